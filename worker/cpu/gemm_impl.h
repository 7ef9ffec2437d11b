/* worker/cpu/gemm_impl.h — for worker/cpu/gemm*.c only: the oneDNN side
 * of cpu_gemm (gemm_onednn.c), which gemm.c puts beside OpenBLAS.
 *
 * A gemm_onednn holds the CPU engine, its stream and the primitives built
 * so far, one per distinct product (struct cpu_gemm_call less its
 * pointers, plus the thread count the primitive was built for), in a list
 * searched from the front: a model has a few dozen shapes.
 */
#ifndef ZT_WORKER_CPU_GEMM_IMPL_H
#define ZT_WORKER_CPU_GEMM_IMPL_H

#include "worker/cpu/gemm.h"

struct gemm_onednn;

/* Opens the CPU engine and stream; own_scratch: each primitive gets a
 * scratch buffer of its own (a team member's), else oneDNN's shared one.
 * Errors: ZT_ERR_DEVICE, ZT_ERR_NOMEM. */
zt_status gemm_onednn_open(int own_scratch, struct gemm_onednn **out);

/* Destroys every primitive, the stream and the engine; accepts NULL. */
void gemm_onednn_close(struct gemm_onednn *d);

/* The primitive for c's product, built on first use: *kernel is its
 * implementation's name ("brg:avx512_core", "ref:any" ...), owned by d;
 * *generic is 1 when that is a reference loop, not a generated kernel. */
zt_status gemm_onednn_kernel(struct gemm_onednn *d, const struct cpu_gemm_call *c,
                             const char **kernel, int *generic);

/* Runs c's product on its primitive. Errors: ZT_ERR_DEVICE (named). */
zt_status gemm_onednn_run(struct gemm_onednn *d, const struct cpu_gemm_call *c);

/* The library's version, "2.6.3", into buf[0..n). */
void gemm_onednn_version(char *buf, size_t n);

#endif
