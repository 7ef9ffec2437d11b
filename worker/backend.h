/* worker/backend.h — the compute backend: device memory, the op table and
 * the queue the ops run on, chosen together by one name.
 *
 * A rank computes on one device. Everything that depends on which device
 * comes in one `struct compute_backend`: the device memory (`dev`, a
 * worker/device.h table plus the rank's ledger), the ops that read and write
 * that memory (`ops`, worker/ops.h) and the stream (queue) they are issued
 * on. Choosing memory and ops together means a CUDA op can never be handed a
 * host pointer nor a CPU op a device pointer.
 *
 * Each backend says whether it can run here and, if not, why;
 * compute_backend_select picks by name, "auto" taking CUDA where it is
 * usable, else the CPU. The CPU is always usable; CUDA is usable where its
 * module (zt_cuda.so, worker/cuda_module.h: device memory, and every op as
 * a kernel or cuBLAS call) was built and loads, and its runtime sees a GPU.
 * "auto" loads the module only where an NVIDIA driver's device files
 * exist, so a CPU machine never maps the CUDA libraries.
 *
 * Ownership: compute_backend_open fills a caller-owned struct; the struct
 * owns its stream and, on CUDA, its op table (a copy per open whose ctx
 * holds the stream, the cuBLAS handle and scratch; the CPU's is static),
 * and borrows the ledger. Buffers from
 * device_alloc(&be->dev, ...) are the caller's to free before
 * compute_backend_close. Nothing here is global: two opened backends are
 * independent.
 */
#ifndef ZT_WORKER_BACKEND_H
#define ZT_WORKER_BACKEND_H

#include <stddef.h>

#include "../common/ledger.h"
#include "../common/status.h"
#include "device.h"
#include "ops.h"

struct compute_backend {
    const char *name;              /* "cpu" or "cuda": the entry chosen, static */
    struct device dev;             /* device memory and the ledger (borrowed) it counts in */
    const struct ops_backend *ops; /* the op table for memory of `dev` (owned: see above) */
    void *stream;                  /* the queue ops run on: NULL on the CPU (ops are
                                    * synchronous); a cudaStream_t on CUDA */
    int host_memory;               /* 1: device buffers are host memory (what a
                                    * communicator must be able to read) */
    /* Page-locked host memory, which the device copies to and from
     * fastest (ZeRO-Offload's host states): cudaMallocHost on CUDA; NULL
     * where device memory is host memory already. alloc: *out NULL with
     * ZT_OK, or ZT_ERR_NOMEM with a message. */
    zt_status (*pinned_alloc)(size_t bytes, void **out);
    void (*pinned_free)(void *p);
    void (*ops_close)(const struct ops_backend *ops); /* releases `ops`; NULL: nothing */
};

/* Whether the backend named `name` ("cpu", "cuda") can run here: >= 0
 * usable; < 0 not, with the reason written into why[0..n) (unknown name,
 * the CUDA module missing or not loading, no device). Touches no state. */
int compute_backend_query(const char *name, char *why, size_t n);

/* Resolves `name` ("cpu", "cuda" or "auto") to the backend that
 * compute_backend_open would use, without opening it; *chosen is its static
 * name. Errors: ZT_ERR_CONFIG (unknown name), ZT_ERR_DEVICE (the named
 * backend is not built or not usable here, with the reason). */
zt_status compute_backend_select(const char *name, const char **chosen);

/* How many devices the backend `name` resolves to can choose among here
 * (CUDA: the GPUs this process sees, after CUDA_VISIBLE_DEVICES), the
 * count worker/device_bind.h binds node-local ranks over; 0 for a backend
 * with nothing to choose (the CPU). Errors: those of
 * compute_backend_select, ZT_ERR_DEVICE. */
zt_status compute_backend_devices(const char *name, int *count);

/* Selects as compute_backend_select, makes device `ordinal` current on a
 * backend with several (CUDA: an index into the GPUs this process sees; -1
 * keeps the current one; the CPU ignores it), opens the device memory
 * counted in `ledger` (borrowed; a plan-only ledger gives a plan-only
 * device) and the op table with its stream. On failure *out is zeroed.
 * Errors: those of compute_backend_select, ZT_ERR_DEVICE (no such device,
 * or the device or stream would not open), ZT_ERR_NOMEM. */
zt_status compute_backend_open(const char *name, int ordinal, struct ledger *ledger,
                               struct compute_backend *out);

/* Waits for and destroys the stream, releases the op table an open made
 * and zeroes *be. Accepts a zeroed struct. */
void compute_backend_close(struct compute_backend *be);

#endif
