/* worker/cpu/gemm.h — the CPU backend's matrix products: one call, two
 * libraries behind it, the kernel each shape runs on named.
 *
 * Every product of the CPU ops is one cpu_gemm_run: row-major
 * C[M,N] = alpha op(A) op(B), added into C when `accumulate`, with A and B
 * fp32, bf16 or fp16 and C fp32 or the operands' type (the accumulation is
 * fp32 in every library; a 16-bit C is rounded once, at the store).
 * Leading dimensions are taken as the buffers lie, so transposed operands
 * and column slices of wider rows are read in place, never copied.
 *
 * Why two libraries: Debian's OpenBLAS picks its kernels from a table of
 * CPU models that stops before the newest (on a Sapphire Rapids-class Xeon
 * it runs the generic "Prescott" code, 17-26 GFLOP/s at GPT-2's shapes)
 * and has no bf16 GEMM. oneDNN generates its kernels at run time from the
 * CPU's features (AMX, AVX512-BF16, AVX-512, AVX2), as PyTorch's CPU
 * autocast does. The libraries are rows of a table (gemm.c); a run takes
 * oneDNN where it is built and has a real kernel for the shape, OpenBLAS
 * where oneDNN would fall back to its reference loops. ZT_CPU_GEMM=openblas
 * or =onednn forces one (tests that pin a kernel for bit-exact records,
 * benchmarks comparing them).
 *
 * State: a oneDNN primitive is built once per shape (dimensions, strides,
 * dtypes, alpha, accumulate, thread count) and kept in the struct cpu_gemm
 * it was run through: building one costs 10-80 us, one of GPT-2 124M's
 * products 0.2-5 ms. A struct cpu_gemm belongs to one opened CPU backend
 * (its op table's ctx); calls on it come from the thread that runs the ops,
 * never from inside an OpenMP parallel region. Products run by the threads
 * of a parallel region (attention's tiles) take a state per thread from a
 * struct cpu_gemm_team instead.
 *
 * Bits: each library sums in its own order, and oneDNN's blocking follows
 * the CPU's ISA and cache sizes, so results agree across libraries and CPUs
 * within fp32 rounding, not bit for bit; on one machine with one thread
 * count a shape repeats exactly.
 */
#ifndef ZT_WORKER_CPU_GEMM_H
#define ZT_WORKER_CPU_GEMM_H

#include <stddef.h>

#include "common/dtype.h"
#include "common/status.h"

enum cpu_gemm_lib {
    CPU_GEMM_AUTO,     /* oneDNN where it has a kernel for the shape, else OpenBLAS */
    CPU_GEMM_ONEDNN,   /* oneDNN only (where it is built) */
    CPU_GEMM_OPENBLAS, /* OpenBLAS only: fp32 operands */
    CPU_GEMM_LIB_COUNT
};

/* One product. trans_a: A is stored [K, M] (lda >= M) and read as its
 * transpose; otherwise [M, K] (lda >= K). trans_b likewise: [N, K] read
 * transposed, or [K, N]. C is [M, N] with ldc >= N. */
struct cpu_gemm_call {
    int trans_a, trans_b;
    int M, N, K;
    float alpha;
    int accumulate;        /* 1: C += alpha A B; 0: C = alpha A B */
    enum zt_dtype ab_type; /* ZT_F32, ZT_BF16 or ZT_F16 (uint16_t bits), both operands */
    enum zt_dtype c_type;  /* ZT_F32, or ab_type */
    const void *A;
    int lda;
    const void *B;
    int ldb;
    void *C;
    int ldc;
};

struct cpu_gemm;

/* Makes the state for products through library `lib` (CPU_GEMM_AUTO:
 * the environment's ZT_CPU_GEMM, else auto). Errors: ZT_ERR_CONFIG (an
 * unknown ZT_CPU_GEMM value, or a library this build lacks), ZT_ERR_DEVICE
 * (oneDNN would not open its CPU engine), ZT_ERR_NOMEM. */
zt_status cpu_gemm_create(enum cpu_gemm_lib lib, struct cpu_gemm **out);

/* Frees the state and its primitives; accepts NULL. */
void cpu_gemm_destroy(struct cpu_gemm *g);

/* Runs one product. With g NULL a state is made for the call and dropped
 * after it (what the static op tables do: correct, but each shape's kernel
 * is built anew). 16-bit operands need oneDNN, and a CPU it has a kernel
 * for (oneDNN 2.6: bf16 on AVX-512 or newer, none on an AVX2-only CPU;
 * fp16 on AVX512-FP16 only). Errors: ZT_ERR_DEVICE (a oneDNN call failed,
 * named), ZT_ERR_UNSUPPORTED (16-bit without oneDNN, or on a CPU without
 * a kernel for it), ZT_ERR_NOMEM. */
zt_status cpu_gemm_run(struct cpu_gemm *g, const struct cpu_gemm_call *c);

/* What products of `ab_type` operands run on, probed on one mid-sized
 * shape (512 x 768 x 768): "onednn 2.6.3 brg:avx512_core" or
 * "openblas 0.3.21 Haswell". Written into buf[0..n). Errors: those of
 * cpu_gemm_run (ZT_ERR_UNSUPPORTED: no bf16 kernel here, as there). */
zt_status cpu_gemm_describe(struct cpu_gemm *g, enum zt_dtype ab_type, char *buf, size_t n);

/* ZT_OK when products of `ab_type` operands run here (fp32 always); else
 * ZT_ERR_UNSUPPORTED saying why, as cpu_gemm_run would (g NULL: a state
 * made for the call). */
zt_status cpu_gemm_supports(struct cpu_gemm *g, enum zt_dtype ab_type);

/* States for the threads of an OpenMP parallel region, one per thread
 * number, each made by its own thread on first use and then used by that
 * thread only. A member's primitives hold their own scratch (oneDNN's
 * shared scratch would tie a primitive to the OS thread that built it),
 * and are built for the thread count the member's thread sees: a region
 * whose threads each run one-thread products sets it to 1 first. */
struct cpu_gemm_team;

/* A team of `threads` empty slots. Errors: ZT_ERR_NOMEM. */
zt_status cpu_gemm_team_create(int threads, struct cpu_gemm_team **out);

/* Frees every member made; accepts NULL. */
void cpu_gemm_team_destroy(struct cpu_gemm_team *t);

/* Slots in the team. */
int cpu_gemm_team_size(const struct cpu_gemm_team *t);

/* The state of thread `i` (< cpu_gemm_team_size), made on the first call;
 * called by thread i only. Errors: those of cpu_gemm_create. */
zt_status cpu_gemm_team_member(struct cpu_gemm_team *t, int i, struct cpu_gemm **out);

/* "auto", "onednn", "openblas". */
const char *cpu_gemm_lib_name(enum cpu_gemm_lib lib);

#endif
