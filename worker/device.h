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
 * memory tests, and the bundle itself).
 *
 * Per-open state. A backend may keep state for each opened device in
 * `state`, created by its open hook and released by its close hook
 * (device_open / device_close): on the CPU the host cache of freed blocks
 * (worker/cpu/host_cache.h); on CUDA the caching pool
 * (worker/device_pool.h) and the one region it sub-allocates. Every memory
 * function of the table takes the device first to reach that state. The
 * state is reached through a pointer, so allocation still takes the device
 * const: the struct itself never changes between open and close.
 *
 * CUDA memory. A "cuda" device with a real ledger holds one region from
 * cudaMalloc (never managed memory) and serves every device_alloc from it,
 * so a training step's allocations cost no driver call. The region is
 * reserved at the device's first allocation, on the CUDA device current
 * then, not at open: the communicator, opened after the memory, is what
 * puts each rank on its own GPU (comm/comm_nccl.c); open only checks the
 * size setting. A free waits for the device (as cudaFree did) before its
 * block can be handed out again. The region's size is
 *   - ZT_CUDA_RESERVE_BYTES, when that environment variable is set: exactly
 *     that many bytes (a decimal integer > 0). For tests, and for ranks that
 *     share one GPU, which must split it between them;
 *   - otherwise DEVICE_CUDA_RESERVE_FRACTION (0.9) of the bytes the driver
 *     reports free (cudaMemGetInfo) then, rounded down to 2 MiB. The rest is left to what
 *     allocates outside the ledger: the CUDA context, cuBLAS's workspace,
 *     NCCL's buffers, the compute backend's scratch; those made before the
 *     first allocation are already out of the free bytes it is taken of.
 * A request the region cannot hold is ZT_ERR_NOMEM with the pool's numbers
 * (used, reserved, largest free block). The ledger counts the bytes asked
 * for; the pool rounds each buffer up to 256 bytes, so its `used` can be a
 * little larger than the ledger's total.
 *
 * With a plan-only ledger, device_alloc records the size and returns NULL:
 * the same allocation code then measures a plan without memory behind it. A
 * plan-only device has no state (device_open calls no open hook for it), so
 * a plan reserves no GPU memory.
 */
#ifndef ZT_WORKER_DEVICE_H
#define ZT_WORKER_DEVICE_H

#include <stddef.h>

#include "../common/ledger.h"
#include "../common/status.h"

/* Fraction of the driver's free bytes the CUDA backend reserves when
 * ZT_CUDA_RESERVE_BYTES is not set. */
#define DEVICE_CUDA_RESERVE_FRACTION 0.9

struct device;
struct device_memory_info;

/* A memory backend. Every function but query takes the opened device first
 * (its state); pointers are the backend's device memory unless named host. */
struct device_backend_ops {
    const char *name;
    /* < 0: unusable here, with the reason written into why. Stateless. */
    int (*query)(char *why, size_t n);
    /* Creates d->state (d->ops and d->ledger are set). NULL: the backend
     * keeps no state. Errors: ZT_ERR_DEVICE, ZT_ERR_NOMEM, ZT_ERR_CONFIG. */
    zt_status (*open)(struct device *d);
    /* Releases d->state; device_close calls it only when the state is set.
     * NULL when open is NULL. */
    void (*close)(struct device *d);
    /* *out NULL with ZT_OK, or ZT_ERR_NOMEM with a message, when the bytes
     * are not there; device_alloc names the buffer either way. */
    zt_status (*alloc)(const struct device *d, size_t bytes, void **out);
    void (*free)(const struct device *d, void *p);
    zt_status (*memset_zero)(const struct device *d, void *p, size_t bytes);
    zt_status (*copy_to_host)(const struct device *d, void *host, const void *dev, size_t bytes);
    zt_status (*copy_from_host)(const struct device *d, void *dev, const void *host, size_t bytes);
    zt_status (*copy)(const struct device *d, void *dst, const void *src, size_t bytes);
    /* Fills *out (see device_memory_info). */
    zt_status (*memory_info)(const struct device *d, struct device_memory_info *out);
    /* A plan-only ledger's device, where nothing is allocated: its state,
     * and the sizes of the buffers a run would allocate and free, so that
     * memory_info's resident_peak is a run's. All NULL: no plan state. */
    zt_status (*plan_open)(struct device *d);
    void (*plan_alloc)(const struct device *d, size_t bytes);
    void (*plan_free)(const struct device *d, size_t bytes);
};

struct device {
    const struct device_backend_ops *ops;
    struct ledger *ledger; /* not owned */
    void *state;           /* the backend's, from its open hook (its plan_open hook for a
                            * plan-only ledger): the CPU's host cache (a model of one);
                            * CUDA's pool and region (none) */
};

/* Where the device's memory stands, for the memory report. */
struct device_memory_info {
    size_t reserved;      /* bytes held from the driver for this device's buffers: on CUDA
                           * the pool's region; on the CPU the ledger's total and the
                           * freed blocks its host cache keeps */
    size_t used;          /* bytes in live buffers: the pool's (each rounded up to 256)
                           * on CUDA; the ledger's total on the CPU */
    size_t peak;          /* the largest `used` since open (the ledger's total peak on the
                           * CPU) */
    size_t largest_free;  /* the largest buffer that could still be allocated inside
                           * `reserved`: the pool's largest free block; 0 on the CPU */
    size_t driver_free;   /* free memory the system reports now: cudaMemGetInfo's free on
                           * CUDA, available physical pages on the CPU */
    size_t driver_total;  /* the device's total memory: cudaMemGetInfo's total, physical
                           * pages on the CPU */
    size_t held_peak;     /* the CPU: the most bytes its live buffers held (page-rounded) */
    size_t resident_peak; /* ... and with the freed ones its host cache kept; a plan's
                           * both from its model of the cache. 0 on CUDA */
};

/* Opens the memory backend named "cpu" or "cuda" ("auto": cuda when usable,
 * else cpu), attaches `ledger` (borrowed) and creates the backend's state
 * (on CUDA: reads the size setting; the region comes at the first
 * allocation), or for a plan-only ledger its plan state (the CPU's model
 * of its host cache).
 * Training opens memory through compute_backend_open (worker/backend.h)
 * instead. The caller closes it with device_close. On failure *out is
 * zeroed. Errors: ZT_ERR_CONFIG (unknown name; a bad ZT_CUDA_RESERVE_BYTES),
 * ZT_ERR_DEVICE (named backend unusable here, with the reason),
 * ZT_ERR_NOMEM (host state). */
zt_status device_open(const char *name, struct ledger *ledger, struct device *out);

/* Releases the backend's state (on CUDA: the region, with every buffer still
 * in it: free them first) and zeroes *d. Every device_open and
 * compute_backend_open is paired with it. A zeroed device closes again as a
 * no-op. */
void device_close(struct device *d);

/* Fills *out with the device's reserved, used, peak and largest free bytes
 * and the driver's free and total bytes. A plan-only device reports the
 * ledger's numbers, as the CPU does, and the driver's. Errors: ZT_ERR_DEVICE
 * (the driver could not be asked). */
zt_status device_memory_info(const struct device *d, struct device_memory_info *out);

/* Allocates `bytes` zeroed bytes counted under `cat`. With a plan-only
 * ledger *out is NULL. Errors: ZT_ERR_NOMEM naming `what`, the size and, on
 * CUDA, the pool's used, reserved and largest free bytes (or the region that
 * could not be reserved); ZT_ERR_DEVICE (a driver failure). */
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

#endif
