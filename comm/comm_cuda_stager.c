/* comm/comm_cuda_stager.c — the CUDA runtime's copies for "mpi" with host
 * staging (comm_staged.c), and comm/'s table of the CUDA module (built
 * into zt_cuda.so; ZT_HAVE_NCCL when the module has NCCL).
 *
 * Ordering. A staged call must see everything the caller's device work
 * wrote before the call, on whichever stream it was queued. cudaMemcpy on
 * the legacy default stream already waits for work on blocking streams,
 * but not for streams created with cudaStreamNonBlocking, so each copy
 * first waits for the whole device (cudaDeviceSynchronize): the compute
 * stream need not be known here, and on this fallback path, which blocks
 * the host for every call anyway, the wait costs little against the
 * copies. The copies are synchronous with the host: device to host
 * returns with the bytes in place, and host to device from pinned memory
 * returns once the copy is done, so kernels queued after the call read
 * the result and the staging buffer may be reused at once.
 *
 * Pinned memory (cudaMallocHost) lets the copies run by DMA at full bus
 * speed; its failure to allocate is ZT_ERR_NOMEM, every other runtime
 * failure ZT_ERR_DEVICE with the call and the runtime's message.
 */
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "comm_impl.h"

static zt_status stager_cuda_error(cudaError_t e, const char *call)
{
    return zt_error_set(e == cudaErrorMemoryAllocation ? ZT_ERR_NOMEM : ZT_ERR_DEVICE,
                        "comm(mpi, host staging): %s failed: %s", call, cudaGetErrorString(e));
}

#define STAGER_CUDA_TRY(call)                                                                      \
    do {                                                                                           \
        cudaError_t stager_rc_ = (call);                                                           \
        if (stager_rc_ != cudaSuccess)                                                             \
            return stager_cuda_error(stager_rc_, #call);                                           \
    } while (0)

static zt_status to_host(void *host, const void *dev, size_t bytes)
{
    STAGER_CUDA_TRY(cudaDeviceSynchronize());
    STAGER_CUDA_TRY(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
    return ZT_OK;
}

static zt_status to_device(void *dev, const void *host, size_t bytes)
{
    /* no kernel queued before the call may still read dev when it is
     * overwritten */
    STAGER_CUDA_TRY(cudaDeviceSynchronize());
    STAGER_CUDA_TRY(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
    return ZT_OK;
}

static zt_status alloc_pinned(size_t bytes, void **out)
{
    STAGER_CUDA_TRY(cudaMallocHost(out, bytes));
    return ZT_OK;
}

static void free_pinned(void *p)
{
    cudaFreeHost(p);
}

const struct comm_stager comm_cuda_stager = {
    .to_host = to_host,
    .to_device = to_device,
    .alloc_pinned = alloc_pinned,
    .free_pinned = free_pinned,
};

int comm_cuda_device_query(char *why, size_t n)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        snprintf(why, n, "cudaGetDeviceCount failed: %s", cudaGetErrorString(e));
        return -1;
    }
    if (count == 0) {
        snprintf(why, n, "no CUDA device");
        return -1;
    }
    return 0;
}

const struct comm_cuda_table zt_cuda_comm_table = {
    .size = sizeof(struct comm_cuda_table),
    .stager = &comm_cuda_stager,
    .device_query = comm_cuda_device_query,
#ifdef ZT_HAVE_NCCL
    .nccl = &comm_nccl_ops,
#endif
};
