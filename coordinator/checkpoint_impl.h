/* coordinator/checkpoint_impl.h — what the checkpoint_*.c files share and
 * nobody else includes: the checksum, little-endian packing, the JSON
 * reader meta.json needs, and the small atomic files (meta.json, latest).
 */
#ifndef ZT_COORDINATOR_CHECKPOINT_IMPL_H
#define ZT_COORDINATOR_CHECKPOINT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"

#define CKPT_FNV_OFFSET 0xcbf29ce484222325ULL
#define CKPT_FNV_PRIME  0x100000001b3ULL

/* FNV-1a 64 continued over n more bytes: start from CKPT_FNV_OFFSET. */
static inline uint64_t ckpt_fnv(uint64_t h, const void *bytes, size_t n)
{
    const unsigned char *p = bytes;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * CKPT_FNV_PRIME;
    return h;
}

static inline void ckpt_put_le(unsigned char *p, uint64_t v, int nbytes)
{
    for (int i = 0; i < nbytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint64_t ckpt_get_le(const unsigned char *p, int nbytes)
{
    uint64_t v = 0;
    for (int i = 0; i < nbytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Writes `n` bytes to `path` through common/atomic_file (whole or not at
 * all). ZT_ERR_IO, ZT_ERR_NOMEM. */
zt_status ckpt_write_atomic(const char *path, const void *bytes, size_t n);

/* Reads a whole small file (at most `max` bytes) into a new NUL-terminated
 * buffer (*out, caller frees; *len its length). ZT_ERR_IO ("PATH: no such
 * file or directory" when missing), ZT_ERR_CHECKPOINT (larger than max, not
 * a regular file), ZT_ERR_NOMEM. */
zt_status ckpt_read_small(const char *path, size_t max, char **out, size_t *len);

/* Index of the first byte of s[0..n) that does not start a valid UTF-8
 * sequence (no overlong forms, surrogates or code points past U+10FFFF),
 * or n when all of it is valid. */
size_t ckpt_utf8_check(const char *s, size_t n);

/* ---- JSON (checkpoint_json.c) ----
 * A parsed value tree. Integers (no fraction, no exponent) keep their exact
 * value from -2^63 to 2^64 - 1 as a sign and a magnitude, parsed digit by
 * digit; other numbers are doubles. Strings are decoded to UTF-8 and may
 * not contain NUL. Objects keep their keys in file order, duplicates
 * included: the reader of a key decides (ckpt_json_get reports them). */
enum ckpt_json_type {
    CKPT_JSON_NULL,
    CKPT_JSON_BOOL,
    CKPT_JSON_INT,
    CKPT_JSON_REAL,
    CKPT_JSON_STRING,
    CKPT_JSON_ARRAY,
    CKPT_JSON_OBJECT
};

struct ckpt_json {
    enum ckpt_json_type type;
    size_t pos;              /* byte offset of the value in the text */
    int boolean;             /* BOOL */
    int negative;            /* INT: the value is -magnitude */
    uint64_t magnitude;      /* INT */
    double real;             /* REAL; also INT, rounded */
    char *str;               /* STRING: owned, NUL-terminated */
    size_t n;                /* ARRAY, OBJECT: members */
    struct ckpt_json *items; /* ARRAY, OBJECT: n values (owned) */
    char **keys;             /* OBJECT: n keys (owned) */
};

/* Parses len bytes of text (one value, blanks around it allowed) into
 * *out; free with ckpt_json_free. Nesting is limited to 32 levels. On error
 * *out is zeroed and the message is "PATH: not valid JSON at byte N: what"
 * (N from 0), ZT_ERR_CHECKPOINT; or ZT_ERR_NOMEM. */
zt_status ckpt_json_parse(const char *path, const char *text, size_t len, struct ckpt_json *out);

/* Frees what v owns and zeroes it; NULL-safe. */
void ckpt_json_free(struct ckpt_json *v);

/* "an integer", "a string", ... for messages. */
const char *ckpt_json_type_name(enum ckpt_json_type t);

/* The value of `key` in object obj: *out is NULL and the status ZT_OK when
 * absent. A key given twice is ZT_ERR_CHECKPOINT "PATH: duplicate key
 * 'WHERE'" (where: the key's full name for the message). */
zt_status ckpt_json_get(const char *path, const struct ckpt_json *obj, const char *key,
                        const char *where, const struct ckpt_json **out);

#endif
