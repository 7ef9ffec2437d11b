/* worker/device.h — the device-memory interface.
 *
 * Every buffer that would live on a GPU (parameters, gradients, optimizer
 * state, activations, gather and communication buffers, workspace) is
 * allocated through device_alloc, which records the bytes in the rank's
 * ledger under a category. The backend ("cpu" now, "cuda" when built) is a
 * table of functions chosen once at device_open; the CPU backend's device
 * memory is 64-byte aligned host memory.
 *
 * With a plan-only ledger, device_alloc records the size and returns NULL:
 * the same allocation code then measures a plan without memory behind it.
 */
#ifndef ZT_WORKER_DEVICE_H
#define ZT_WORKER_DEVICE_H

#include <stddef.h>

#include "../common/ledger.h"
#include "../common/status.h"

struct device_backend_ops {
    const char *name;
    /* < 0: unusable here, with the reason written into why. */
    int (*query)(char *why, size_t n);
    zt_status (*alloc)(size_t bytes, void **out);
    void (*free)(void *p);
    zt_status (*memset_zero)(void *p, size_t bytes);
    zt_status (*copy_to_host)(void *host, const void *dev, size_t bytes);
    zt_status (*copy_from_host)(void *dev, const void *host, size_t bytes);
    zt_status (*copy)(void *dst, const void *src, size_t bytes);
};

struct device {
    const struct device_backend_ops *ops;
    struct ledger *ledger; /* not owned */
};

/* Opens the backend named "cpu" or "cuda" ("auto": cuda when usable, else
 * cpu) and attaches `ledger`. Errors: ZT_ERR_CONFIG (unknown name),
 * ZT_ERR_DEVICE (named backend unusable here, with the reason). */
zt_status device_open(const char *name, struct ledger *ledger, struct device *out);

/* Allocates `bytes` zeroed bytes counted under `cat`. With a plan-only
 * ledger *out is NULL. Errors: ZT_ERR_NOMEM naming `what` and the size. */
zt_status device_alloc(struct device *d, enum ledger_category cat, size_t bytes, const char *what,
                       void **out);
/* Frees a buffer from device_alloc with the same category and size. NULL
 * is accepted (plan mode) and still uncounts the bytes. */
void device_free(struct device *d, enum ledger_category cat, size_t bytes, void *p);

/* 1 when buffers are real (not a plan). */
static inline int device_is_real(const struct device *d)
{
    return !d->ledger->plan_only;
}

const struct device_backend_ops *device_cpu_backend(void);
#ifdef ZT_HAVE_CUDA
const struct device_backend_ops *device_cuda_backend(void);
#endif

#endif
