/* worker/cuda/device_cuda.c — CUDA device memory: one reserved region,
 * sub-allocated by a caching pool.
 *
 * Compiled only when the CUDA Toolkit is found. Every runtime error is
 * translated at this boundary by CUDA_TRY into ZT_ERR_DEVICE with the call
 * and the runtime's message.
 *
 * Why a pool. cudaMalloc and cudaFree are driver calls that synchronise the
 * device; a training step would make hundreds of them for buffers of the
 * same sizes as the step before. The device instead holds one region from
 * cudaMalloc (plain device memory, never managed memory, so nothing migrates
 * behind the ledger's back) and worker/device_pool.c hands out pieces of it.
 * Its size is ZT_CUDA_RESERVE_BYTES when set, else
 * DEVICE_CUDA_RESERVE_FRACTION of the driver's free bytes (worker/device.h).
 *
 * When the region is reserved. Open only reads and checks the size setting;
 * the region is reserved at the first allocation, on the device that is
 * current then. The session opens the memory before the communicator, and
 * the NCCL backend is what chooses each rank's GPU (cudaSetDevice by local
 * rank): reserving at open would put every rank of a node on GPU 0. By the
 * first allocation the rank is on its own GPU, and the fraction is taken of
 * what NCCL and cuBLAS left free. close frees the region on the device it
 * was reserved on.
 *
 * Freeing. cudaFree waited for the device, so a buffer's memory could not be
 * rewritten while a kernel or a collective still read it. A pooled block can
 * be handed out again at once, so free keeps that guarantee by waiting for
 * the device (cudaDeviceSynchronize) before returning the block: no worse
 * than cudaFree, and allocation costs no driver call at all. A stream-ordered
 * free (an event recorded on each stream that used the block) would remove
 * the wait; it needs the streams, which the memory table does not know.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "../device.h"
#include "../device_pool.h"

#define CUDA_TRY(call)                                                                             \
    do {                                                                                           \
        cudaError_t cuda_err_ = (call);                                                            \
        if (cuda_err_ != cudaSuccess)                                                              \
            return zt_error_set(ZT_ERR_DEVICE, "%s:%d: %s: %s", __FILE__, __LINE__, #call,         \
                                cudaGetErrorString(cuda_err_));                                    \
    } while (0)

#define RESERVE_ENV "ZT_CUDA_RESERVE_BYTES"
/* cudaMalloc maps whole 2 MiB pages: a fraction is rounded down to them. */
#define RESERVE_GRANULE ((size_t)2 << 20)

/* The per-open state (struct device's `state`). */
struct cuda_memory {
    size_t want;  /* ZT_CUDA_RESERVE_BYTES; 0: the fraction of the free bytes */
    void *region; /* NULL until the first allocation */
    size_t bytes; /* the region's size */
    int device;   /* the ordinal the region lives on */
    struct device_pool *pool;
};

static int cuda_query(char *why, size_t n)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        snprintf(why, n, "no CUDA device (%s)", cudaGetErrorString(err));
        return -1;
    }
    if (count == 0) {
        snprintf(why, n, "no CUDA device present");
        return -1;
    }
    return 0;
}

/* ZT_CUDA_RESERVE_BYTES: a decimal byte count > 0, nothing else; 0 in *out
 * when unset. */
static zt_status reserve_setting(size_t *out)
{
    *out = 0;
    const char *s = getenv(RESERVE_ENV);
    if (!s)
        return ZT_OK;
    char *end = NULL;
    errno = 0;
    unsigned long long v = s[0] >= '0' && s[0] <= '9' ? strtoull(s, &end, 10) : 0;
    if (!end || *end != '\0' || errno == ERANGE || v == 0 || v > (unsigned long long)SIZE_MAX)
        return zt_error_set(ZT_ERR_CONFIG, "%s='%s': want a number of bytes > 0", RESERVE_ENV, s);
    *out = (size_t)v;
    return ZT_OK;
}

static zt_status cuda_open(struct device *d)
{
    size_t want;
    ZT_TRY(reserve_setting(&want));
    struct cuda_memory *m = calloc(1, sizeof *m);
    if (!m)
        return zt_error_set(ZT_ERR_NOMEM, "device 'cuda': cannot allocate its host state");
    m->want = want;
    d->state = m;
    return ZT_OK;
}

/* Reserves the region on the current device and creates the pool over it. */
static zt_status reserve(struct cuda_memory *m)
{
    size_t free_b = 0, total_b = 0;
    CUDA_TRY(cudaGetDevice(&m->device));
    CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    size_t bytes = m->want;
    if (bytes == 0) {
        bytes = (size_t)((double)free_b * DEVICE_CUDA_RESERVE_FRACTION);
        bytes = bytes >= RESERVE_GRANULE ? bytes / RESERVE_GRANULE * RESERVE_GRANULE : bytes;
    }
    if (bytes == 0)
        return zt_error_set(ZT_ERR_NOMEM, "device 'cuda' %d: nothing to reserve (%zu bytes free)",
                            m->device, free_b);
    void *region = NULL;
    cudaError_t err = cudaMalloc(&region, bytes);
    if (err != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure is not sticky: forget it */
        return zt_error_set(err == cudaErrorMemoryAllocation ? ZT_ERR_NOMEM : ZT_ERR_DEVICE,
                            "device 'cuda' %d: cannot reserve %zu bytes (%s) with %zu of %zu "
                            "bytes free: %s",
                            m->device, bytes,
                            m->want ? RESERVE_ENV : "a fraction of the free bytes", free_b, total_b,
                            cudaGetErrorString(err));
    }
    zt_status s = device_pool_create(region, bytes, &m->pool);
    if (s != ZT_OK) {
        cudaFree(region);
        return s;
    }
    m->region = region;
    m->bytes = bytes;
    return ZT_OK;
}

static void cuda_close(struct device *d)
{
    struct cuda_memory *m = d->state;
    if (m->region) {
        int current = m->device;
        cudaGetDevice(&current);
        if (current != m->device)
            cudaSetDevice(m->device);
        cudaFree(m->region); /* waits for the device's work on it */
        if (current != m->device)
            cudaSetDevice(current);
    }
    device_pool_destroy(m->pool);
    free(m);
    d->state = NULL;
}

static zt_status cuda_alloc(const struct device *d, size_t bytes, void **out)
{
    struct cuda_memory *m = d->state;
    ZT_ASSERT(m && "a CUDA device with a real ledger has its state");
    if (!m->region)
        ZT_TRY(reserve(m));
    return device_pool_alloc(m->pool, bytes, out);
}

static void cuda_free(const struct device *d, void *p)
{
    struct cuda_memory *m = d->state;
    ZT_ASSERT(m && m->pool && "a freed CUDA buffer came from the pool");
    /* An error here is sticky and the next checked call reports it. */
    (void)cudaDeviceSynchronize();
    device_pool_free(m->pool, p);
}

static zt_status cuda_memset_zero(const struct device *d, void *p, size_t bytes)
{
    (void)d;
    CUDA_TRY(cudaMemset(p, 0, bytes));
    return ZT_OK;
}

static zt_status cuda_copy_to_host(const struct device *d, void *host, const void *dev,
                                   size_t bytes)
{
    (void)d;
    CUDA_TRY(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
    return ZT_OK;
}

static zt_status cuda_copy_from_host(const struct device *d, void *dev, const void *host,
                                     size_t bytes)
{
    (void)d;
    CUDA_TRY(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
    return ZT_OK;
}

static zt_status cuda_copy(const struct device *d, void *dst, const void *src, size_t bytes)
{
    (void)d;
    CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
    return ZT_OK;
}

/* The pool's numbers (all 0 before the first allocation); a plan-only
 * device, which has no pool, reports the ledger's as the CPU does. */
static zt_status cuda_memory_info(const struct device *d, struct device_memory_info *out)
{
    const struct cuda_memory *m = d->state;
    if (!m) {
        out->reserved = out->used = (size_t)d->ledger->total_current;
        out->peak = (size_t)d->ledger->total_peak;
    } else if (m->pool) {
        struct device_pool_stats ps;
        device_pool_stats(m->pool, &ps);
        out->reserved = ps.reserved;
        out->used = ps.used;
        out->peak = ps.peak;
        out->largest_free = ps.largest_free;
    }
    CUDA_TRY(cudaMemGetInfo(&out->driver_free, &out->driver_total));
    return ZT_OK;
}

const struct device_backend_ops device_cuda_ops = {
    .name = "cuda",
    .query = cuda_query,
    .open = cuda_open,
    .close = cuda_close,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .memset_zero = cuda_memset_zero,
    .copy_to_host = cuda_copy_to_host,
    .copy_from_host = cuda_copy_from_host,
    .copy = cuda_copy,
    .memory_info = cuda_memory_info,
};
