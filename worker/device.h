/* worker/device.h — the device-memory interface.
 *
 * Every buffer that would live on a GPU (parameters, gradients, optimizer
 * state, activations, gather and communication buffers, workspace) is
 * allocated through device_alloc, which records the bytes in the rank's
 * ledger under a category. The memory backend ("cpu" now, "cuda" when
 * built) is a table of functions; the CPU backend's device memory is
 * 64-byte aligned host memory.
 *
 * Training does not open a device on its own: the compute backend bundle
 * (worker/backend.h) embeds a `struct device` beside the op table that works
 * on its memory and opens both under one name, so memory and ops always
 * match. device_open remains for code that needs memory alone (the device
 * memory tests, and the bundle itself). A struct device holds no state of
 * its own beyond the table and the borrowed ledger, so allocation takes it
 * const.
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

/* Opens the memory backend named "cpu" or "cuda" ("auto": cuda when usable,
 * else cpu) and attaches `ledger` (borrowed). Training opens memory through
 * compute_backend_open (worker/backend.h) instead. Errors: ZT_ERR_CONFIG
 * (unknown name), ZT_ERR_DEVICE (named backend unusable here, with the
 * reason). */
zt_status device_open(const char *name, struct ledger *ledger, struct device *out);

/* Allocates `bytes` zeroed bytes counted under `cat`. With a plan-only
 * ledger *out is NULL. Errors: ZT_ERR_NOMEM naming `what` and the size. */
zt_status device_alloc(const struct device *d, enum ledger_category cat, size_t bytes,
                       const char *what, void **out);
/* device_alloc without the zeroing, for a buffer its first use overwrites
 * whole (a gather's or a reduction's destination): zeroing it would only
 * fault in and write every page once more. The contents are undefined. */
zt_status device_alloc_uninit(const struct device *d, enum ledger_category cat, size_t bytes,
                              const char *what, void **out);
/* Frees a buffer from device_alloc with the same category and size. NULL
 * is accepted (plan mode) and still uncounts the bytes. */
void device_free(const struct device *d, enum ledger_category cat, size_t bytes, void *p);

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
