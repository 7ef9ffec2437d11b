/* worker/cuda_module.h — the CUDA backend as the module zt_cuda.so exports
 * it (common/module.h), and its loader.
 *
 * Everything that calls the CUDA runtime or cuBLAS (worker/cuda/) is built
 * into that module, not into the executable, so a CPU run never maps the
 * CUDA libraries. worker/backend.c and worker/device.c reach the backend
 * only through this table. A build without the CUDA toolkit has no module,
 * and asking for the table says so.
 */
#ifndef ZT_WORKER_CUDA_MODULE_H
#define ZT_WORKER_CUDA_MODULE_H

#include <stddef.h>

#include "../common/module.h"
#include "../common/status.h"
#include "device.h"
#include "ops.h"

struct cuda_worker_table {
    size_t size; /* sizeof(struct cuda_worker_table) where the module was built */
    /* device memory (worker/device.h); its query says whether a GPU is here */
    const struct device_backend_ops *device;
    /* Makes GPU `ordinal` (an index into the devices this process sees,
     * after CUDA_VISIBLE_DEVICES) current for the calling thread; -1 keeps
     * the current one. Errors: ZT_ERR_DEVICE. */
    zt_status (*bind)(int ordinal);
    /* The GPUs this process sees. Errors: ZT_ERR_DEVICE. */
    zt_status (*devices)(int *count);
    /* An op table for the current GPU with its own state (a compute stream,
     * a cuBLAS handle on it, scratch) and that stream (a cudaStream_t).
     * Errors: ZT_ERR_DEVICE, ZT_ERR_NOMEM. */
    zt_status (*ops_open)(const struct ops_backend **out, void **stream);
    /* Waits for the table's stream, then releases it; accepts NULL. */
    void (*ops_close)(const struct ops_backend *ops);
    /* Page-locked host memory; free accepts NULL. Errors: ZT_ERR_NOMEM. */
    zt_status (*pinned_alloc)(size_t bytes, void **out);
    void (*pinned_free)(void *p);
};

/* Defined in the module (worker/cuda/module.c). */
extern const struct cuda_worker_table zt_cuda_worker_table;

/* The module's table, loading it on first use. Returns >= 0, or -1 with
 * why (the module is missing, does not load, or was built from other
 * sources). Local. */
int cuda_worker_table(const struct cuda_worker_table **out, char *why, size_t n);

/* 1 when this machine shows an NVIDIA driver's device files (/dev/nvidiactl,
 * or WSL's /dev/dxg): what "auto" asks before it loads the module, so a
 * machine without a GPU never pays for the CUDA libraries. */
int cuda_driver_present(void);

#endif
