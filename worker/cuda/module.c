/* worker/cuda/module.c — what the module zt_cuda.so exports of the CUDA
 * backend (worker/cuda_module.h). */
#include "worker/cuda/cuda_impl.h"
#include "worker/cuda_module.h"

const struct cuda_worker_table zt_cuda_worker_table = {
    .size = sizeof(struct cuda_worker_table),
    .device = &device_cuda_ops,
    .bind = ops_cuda_bind,
    .devices = ops_cuda_devices,
    .ops_open = ops_cuda_open,
    .ops_close = ops_cuda_close,
    .pinned_alloc = ops_cuda_pinned_alloc,
    .pinned_free = ops_cuda_pinned_free,
};
