/* common/status.h — the one error pattern of zerotrain.
 *
 * Every fallible function returns zt_status and hands results back through
 * out-parameters. The code that detects a problem writes one message with
 * zt_error_set() saying where ("configs/run.yaml:14:3: optimizer.params.lr:
 * must be > 0"); callers only propagate with ZT_TRY, which appends a
 * file:line frame to the trace. main() prints the message and exits.
 *
 * The message lives in a thread-local buffer, like errno or libgit2's last
 * error: threading a diagnostics object through every call would double the
 * size of every signature for no gain, and a thread-local cannot be seen by
 * other threads, so there is no shared mutable state.
 */
#ifndef ZT_STATUS_H
#define ZT_STATUS_H

#include <stddef.h>

/* X(name, exit_code, description). Exit codes follow the CLI contract:
 * 2 usage or configuration error, 1 run-time failure. */
#define ZT_STATUS_LIST(X)                                                                          \
    X(ZT_OK, 0, "success")                                                                         \
    X(ZT_ERR_USAGE, 2, "usage error")                                                              \
    X(ZT_ERR_CONFIG, 2, "configuration error")                                                     \
    X(ZT_ERR_UNSUPPORTED, 2, "not supported yet")                                                  \
    X(ZT_ERR_IO, 1, "input/output error")                                                          \
    X(ZT_ERR_DATA, 1, "bad data file")                                                             \
    X(ZT_ERR_NOMEM, 1, "out of memory")                                                            \
    X(ZT_ERR_COMM, 1, "communication failure")                                                     \
    X(ZT_ERR_DEVICE, 1, "device failure")                                                          \
    X(ZT_ERR_NUMERIC, 1, "numerical failure")                                                      \
    X(ZT_ERR_CHECKPOINT, 1, "bad checkpoint")                                                      \
    X(ZT_ERR_INTERRUPTED, 1, "interrupted")                                                        \
    X(ZT_ERR_INTERNAL, 1, "internal error")

typedef enum {
#define ZT_STATUS_ENUM(name, code, desc) name,
    ZT_STATUS_LIST(ZT_STATUS_ENUM)
#undef ZT_STATUS_ENUM
        ZT_STATUS_COUNT
} zt_status;

/* Name of a status ("ZT_ERR_CONFIG"); never NULL. */
const char *zt_status_str(zt_status s);
/* One-line description ("configuration error"); never NULL. */
const char *zt_status_desc(zt_status s);
/* Process exit code for a status: 0, 1 or 2. */
int zt_status_exit_code(zt_status s);

/* Records the message for the error being returned (printf format) and
 * returns `s`, so detection reads `return zt_error_set(ZT_ERR_IO, "...")`.
 * Clears the previous message and trace. */
zt_status zt_error_set(zt_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last message set on this thread ("" if none). */
const char *zt_error_message(void);
/* The file:line frames appended by ZT_TRY since the last zt_error_set. */
const char *zt_error_trace(void);
/* Appends a frame to the trace; used by ZT_TRY. */
void zt_error_trace_push(const char *file, int line);
/* Forgets the last message and trace. */
void zt_error_clear(void);

#define ZT_TRY(expr)                                                                               \
    do {                                                                                           \
        zt_status zt_try_status_ = (expr);                                                         \
        if (zt_try_status_ != ZT_OK) {                                                             \
            zt_error_trace_push(__FILE__, __LINE__);                                               \
            return zt_try_status_;                                                                 \
        }                                                                                          \
    } while (0)

/* Always-on assertion for broken invariants (never for bad input). */
#define ZT_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond))                                                                               \
            zt_assert_fail(#cond, __FILE__, __LINE__);                                             \
    } while (0)
/* The CUDA kernels (C++) include this header too. */
#ifdef __cplusplus
[[noreturn]] void zt_assert_fail(const char *cond, const char *file, int line);
#else
_Noreturn void zt_assert_fail(const char *cond, const char *file, int line);
#endif

#endif
