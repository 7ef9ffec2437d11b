/* worker/cuda/crossentropy.cu — fused softmax and cross-entropy over the
 * vocabulary on the GPU, whole rows (worker/cpu/crossentropy.c) and split
 * by vocabulary over tensor-parallel ranks (worker/cpu/vocab_parallel.c).
 *
 * One block per row of logits: a row is up to ~150k values, as long as the
 * rows are many (B T of them), so a block of CE_THREADS strides over its
 * row with coalesced loads and the grid covers the rows. The forward reads
 * the row for its max, then for the sum of e^(x - max), then writes
 * probs = e^(x - max) / sum; each pass's reduction returns to every thread,
 * so the passes need no barrier between them. The kernels are templates
 * over the element type of logits, probs and dlogits (elem.cuh): fp32
 * inside, each stored value rounded once; losses and row statistics fp32. The loss is taken
 * from the log-sum-exp, log(sum) - (x[target] - max), as on the CPU, so it
 * stays finite when the target's probability underflows.
 *
 * Determinism and precision: the max is exact in any order. The sum of
 * exponentials is a fixed tree: each thread adds its strided terms in
 * order, in double, then the warps fold their partials by shuffles and the
 * first warp folds the warps' — the same order on every run, set by the
 * row length and CE_THREADS alone. The double partials make the sum exact
 * to well below float's rounding (the CPU's blocked float sum is the less
 * accurate of the two), so the backends differ by the CPU's own error.
 *
 * The vocabulary-parallel ops are the same row pieces (row_max,
 * row_exp_sum, scale_row, the backward's row update) around the caller's
 * reductions, so one part (v_lo = 0, Vp = V) gives crossentropy_forward's
 * and crossentropy_backward's numbers bit for bit, as ops.h promises. A
 * padded vocabulary's columns past Vr are left out of the max and the sum
 * and get probability 0.
 *
 * A negative target marks a position that is not a prediction target: its
 * probs are still written, its loss is 0 and its row of dlogits is left
 * alone. A target >= V is a broken precondition, an assert on the CPU; a
 * kernel cannot return a status, so it traps, and the stream's next
 * synchronisation reports the failed launch.
 */
#include "worker/cuda/cuda_impl.h"
#include "worker/cuda/elem.cuh"
#include "worker/cuda/reduce.cuh"

#include <math.h>

using elem::f32;
using elem::round_to;

enum { CE_THREADS = 512 }; /* threads per row's block */

/* The max and the sum of x over the block, returned to every thread:
 * reduce.cuh's block_shuffle_fold (each warp by shuffles, then warp 0 over
 * the warps' results), whose consecutive calls need no barrier between. */
static __device__ float block_max(float x)
{
    return reduce::block_shuffle_fold<CE_THREADS>(x, reduce::max_op{}, -INFINITY);
}

static __device__ double block_sum(double x)
{
    return reduce::block_shuffle_fold<CE_THREADS>(x, reduce::add_op{}, 0.0);
}

/* The largest of x[0..n), n >= 1. */
template <class E> static __device__ float row_max(const E *x, int n)
{
    float m = -INFINITY;
    for (int j = threadIdx.x; j < n; j += CE_THREADS) {
        const float v = f32(x[j]);
        m = v > m ? v : m;
    }
    return block_max(m);
}

/* The sum of e^(x[j] - m) over j < n (see the top of the file for its
 * order). */
template <class E> static __device__ float row_exp_total(const E *x, float m, int n)
{
    double s = 0.0;
    for (int j = threadIdx.x; j < n; j += CE_THREADS)
        s += expf(f32(x[j]) - m);
    return (float)block_sum(s);
}

/* p[j] = e^(x[j] - m) for j < n, rounded to E; returns the sum of the
 * unrounded terms, in row_exp_total's order. */
template <class E> static __device__ float row_exp_sum(E *p, const E *x, float m, int n)
{
    double s = 0.0;
    for (int j = threadIdx.x; j < n; j += CE_THREADS) {
        float e = expf(f32(x[j]) - m);
        p[j] = round_to<E>(e);
        s += e;
    }
    return (float)block_sum(s);
}

/* p[j] = e^(x[j] - m) * inv for j < n: the softmax, each value rounded
 * once (the exponential is taken again rather than stored and read back,
 * which under 16 bits would round it twice). */
template <class E> static __device__ void write_probs(E *p, const E *x, float m, float inv, int n)
{
    for (int j = threadIdx.x; j < n; j += CE_THREADS)
        p[j] = round_to<E>(expf(f32(x[j]) - m) * inv);
}

/* p[j] *= inv for j < n. */
template <class E> static __device__ void scale_row(E *p, float inv, int n)
{
    for (int j = threadIdx.x; j < n; j += CE_THREADS)
        p[j] = round_to<E>(f32(p[j]) * inv);
}

/* d[j] += p[j] dloss, less dloss at column t (none when t < 0): the
 * target's term in one rounding, (p[t] - 1) dloss, as on the CPU. */
template <class E> static __device__ void backward_row(E *d, const E *p, int t, float dloss, int n)
{
    for (int j = threadIdx.x; j < n; j += CE_THREADS) {
        const float pj = f32(p[j]);
        d[j] = round_to<E>(f32(d[j]) + (j == t ? pj - 1.0f : pj) * dloss);
    }
}

/* A target past the vocabulary: crossentropy.c's ZT_ASSERT, on the device. */
static __device__ void check_target(int t, int V)
{
    if (t >= V)
        __trap();
}

template <class E>
static __global__ void forward_rows(float *losses, E *probs, const E *logits,
                                    const int32_t *targets, int N, int V)
{
    for (int i = blockIdx.x; i < N; i += gridDim.x) {
        const int t = targets[i];
        check_target(t, V);
        const E *x = logits + (size_t)i * V;
        const float m = row_max(x, V);
        const float s = row_exp_total(x, m, V);
        write_probs(probs + (size_t)i * V, x, m, 1.0f / s, V);
        if (threadIdx.x == 0)
            losses[i] = t < 0 ? 0.0f : logf(s) - (f32(x[t]) - m);
    }
}

template <class E>
static __global__ void backward_rows(E *dlogits, const E *probs, const int32_t *targets,
                                     float dloss, int N, int V)
{
    for (int i = blockIdx.x; i < N; i += gridDim.x) {
        const int t = targets[i];
        check_target(t, V);
        if (t >= 0)
            backward_row(dlogits + (size_t)i * V, probs + (size_t)i * V, t, dloss, V);
    }
}

template <class E>
static __global__ void vocab_max_rows(float *row_max_out, const E *logits, int N, int Vp, int Vr)
{
    for (int i = blockIdx.x; i < N; i += gridDim.x) {
        const float m = row_max(logits + (size_t)i * Vp, Vr); /* -inf for Vr = 0 */
        if (threadIdx.x == 0)
            row_max_out[i] = m;
    }
}

/* Whether index t lies in the slice [v_lo, v_lo + Vp); false for a masked
 * target (t < 0), since v_lo >= 0. */
static __device__ bool in_slice(int t, int v_lo, int Vp)
{
    return t >= v_lo && t - v_lo < Vp;
}

template <class E>
static __global__ void vocab_exp_rows(E *probs, float *row_stats, const E *logits,
                                      const float *row_max_in, const int32_t *targets, int N,
                                      int Vp, int Vr, int v_lo)
{
    for (int i = blockIdx.x; i < N; i += gridDim.x) {
        const E *x = logits + (size_t)i * Vp;
        const float m = row_max_in[i];
        const int t = targets[i];
        const float s = row_exp_sum(probs + (size_t)i * Vp, x, m, Vr);
        for (int j = Vr + (int)threadIdx.x; j < Vp; j += CE_THREADS) /* padding: no probability */
            probs[(size_t)i * Vp + j] = round_to<E>(0.0f);
        if (threadIdx.x == 0) {
            row_stats[i] = s;
            row_stats[N + i] = in_slice(t, v_lo, Vr) ? f32(x[t - v_lo]) - m : 0.0f;
        }
    }
}

template <class E>
static __global__ void vocab_finish_rows(float *losses, E *probs, const float *row_stats,
                                         const int32_t *targets, int N, int Vp)
{
    for (int i = blockIdx.x; i < N; i += gridDim.x) {
        const float s = row_stats[i];
        scale_row(probs + (size_t)i * Vp, 1.0f / s, Vp);
        if (threadIdx.x == 0)
            losses[i] = targets[i] < 0 ? 0.0f : logf(s) - row_stats[N + i];
    }
}

template <class E>
static __global__ void vocab_backward_rows(E *dlogits, const E *probs, const int32_t *targets,
                                           float dloss, int N, int Vp, int v_lo)
{
    for (int i = blockIdx.x; i < N; i += gridDim.x) {
        const int t = targets[i];
        if (t >= 0)
            backward_row(dlogits + (size_t)i * Vp, probs + (size_t)i * Vp,
                         in_slice(t, v_lo, Vp) ? t - v_lo : -1, dloss, Vp);
    }
}

/* One block per row (capped; the kernels stride over the rest). */
static unsigned row_grid(int N)
{
    return cuda_blocks((size_t)N, 1);
}

/* Launches KERNEL<E>, E the element type of t, one block of CE_THREADS per
 * row; the arguments may name E. */
#define CE_LAUNCH(self, t, N, KERNEL, ...)                                                         \
    elem::with_type((t), [&](auto tag) {                                                           \
        using E = typename decltype(tag)::type;                                                    \
        KERNEL<E><<<row_grid(N), CE_THREADS, 0, cuda_ctx_of(self)->stream>>>(__VA_ARGS__);         \
        CUDA_LAUNCHED();                                                                           \
        return ZT_OK;                                                                              \
    })

extern "C" zt_status cuda_crossentropy_forward(const struct ops_backend *self, enum zt_dtype t,
                                               float *losses, void *probs, const void *logits,
                                               const int32_t *targets, int N, int V)
{
    ZT_ASSERT(N >= 0 && V >= 1);
    if (N == 0)
        return ZT_OK;
    return CE_LAUNCH(self, t, N, forward_rows, losses, static_cast<E *>(probs),
                     static_cast<const E *>(logits), targets, N, V);
}

extern "C" zt_status cuda_crossentropy_backward(const struct ops_backend *self, enum zt_dtype t,
                                                void *dlogits, const void *probs,
                                                const int32_t *targets, float dloss, int N, int V)
{
    ZT_ASSERT(N >= 0 && V >= 1);
    if (N == 0)
        return ZT_OK;
    return CE_LAUNCH(self, t, N, backward_rows, static_cast<E *>(dlogits),
                     static_cast<const E *>(probs), targets, dloss, N, V);
}

extern "C" zt_status cuda_crossentropy_vocab_max(const struct ops_backend *self, enum zt_dtype t,
                                                 float *row_max, const void *logits, int N, int Vp,
                                                 int Vr)
{
    ZT_ASSERT(N >= 0 && Vp >= 1 && Vr >= 0 && Vr <= Vp);
    if (N == 0)
        return ZT_OK;
    return CE_LAUNCH(self, t, N, vocab_max_rows, row_max, static_cast<const E *>(logits), N, Vp,
                     Vr);
}

extern "C" zt_status cuda_crossentropy_vocab_exp(const struct ops_backend *self, enum zt_dtype t,
                                                 void *probs, float *row_stats, const void *logits,
                                                 const float *row_max, const int32_t *targets,
                                                 int N, int Vp, int Vr, int v_lo)
{
    ZT_ASSERT(N >= 0 && Vp >= 1 && Vr >= 0 && Vr <= Vp && v_lo >= 0);
    if (N == 0)
        return ZT_OK;
    return CE_LAUNCH(self, t, N, vocab_exp_rows, static_cast<E *>(probs), row_stats,
                     static_cast<const E *>(logits), row_max, targets, N, Vp, Vr, v_lo);
}

extern "C" zt_status cuda_crossentropy_vocab_finish(const struct ops_backend *self, enum zt_dtype t,
                                                    float *losses, void *probs,
                                                    const float *row_stats, const int32_t *targets,
                                                    int N, int Vp)
{
    ZT_ASSERT(N >= 0 && Vp >= 1);
    if (N == 0)
        return ZT_OK;
    return CE_LAUNCH(self, t, N, vocab_finish_rows, losses, static_cast<E *>(probs), row_stats,
                     targets, N, Vp);
}

extern "C" zt_status cuda_crossentropy_vocab_backward(const struct ops_backend *self,
                                                      enum zt_dtype t, void *dlogits,
                                                      const void *probs, const int32_t *targets,
                                                      float dloss, int N, int Vp, int v_lo)
{
    ZT_ASSERT(N >= 0 && Vp >= 1 && v_lo >= 0);
    if (N == 0)
        return ZT_OK;
    return CE_LAUNCH(self, t, N, vocab_backward_rows, static_cast<E *>(dlogits),
                     static_cast<const E *>(probs), targets, dloss, N, Vp, v_lo);
}
