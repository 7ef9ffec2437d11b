/* worker/cuda/device_cuda.c — CUDA device memory through the runtime API.
 *
 * Compiled only when the CUDA Toolkit is found. Every runtime error is
 * translated at this boundary by CUDA_TRY into ZT_ERR_DEVICE with the call
 * and the runtime's message. */
#include <cuda_runtime_api.h>
#include <stdio.h>

#include "../device.h"

#define CUDA_TRY(call)                                                                             \
    do {                                                                                           \
        cudaError_t cuda_err_ = (call);                                                            \
        if (cuda_err_ != cudaSuccess)                                                              \
            return zt_error_set(ZT_ERR_DEVICE, "%s:%d: %s: %s", __FILE__, __LINE__, #call,         \
                                cudaGetErrorString(cuda_err_));                                    \
    } while (0)

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

static zt_status cuda_alloc(size_t bytes, void **out)
{
    CUDA_TRY(cudaMalloc(out, bytes));
    return ZT_OK;
}

static void cuda_free(void *p)
{
    cudaFree(p);
}

static zt_status cuda_memset_zero(void *p, size_t bytes)
{
    CUDA_TRY(cudaMemset(p, 0, bytes));
    return ZT_OK;
}

static zt_status cuda_copy_to_host(void *host, const void *dev, size_t bytes)
{
    CUDA_TRY(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
    return ZT_OK;
}

static zt_status cuda_copy_from_host(void *dev, const void *host, size_t bytes)
{
    CUDA_TRY(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
    return ZT_OK;
}

static zt_status cuda_copy(void *dst, const void *src, size_t bytes)
{
    CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
    return ZT_OK;
}

static const struct device_backend_ops cuda_ops = {
    .name = "cuda",
    .query = cuda_query,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .memset_zero = cuda_memset_zero,
    .copy_to_host = cuda_copy_to_host,
    .copy_from_host = cuda_copy_from_host,
    .copy = cuda_copy,
};

const struct device_backend_ops *device_cuda_backend(void)
{
    return &cuda_ops;
}
