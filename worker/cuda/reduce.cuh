/* worker/cuda/reduce.cuh — the CUDA backend's reductions, one copy each.
 *
 * Determinism is a product requirement (the same inputs give the same bits
 * on every run), so every reduction here combines its values in an order
 * fixed by the shape of the data and the block size alone: no atomics, no
 * dependence on the GPU model, on timing or on the grid a device would
 * pick. Each helper states its order; a kernel that uses one gets exactly
 * that order, and a kernel whose order must differ (matmul.cu's dbias,
 * whose chunks and lane sum are its own) keeps its own code.
 *
 * - warp_fold / warp_sum / warp_max: a butterfly over the 32 lanes of a
 *   full warp (xor 16, 8, 4, 2, 1). At every step each lane combines its
 *   value with its partner's, so all lanes end with the same bits (for a
 *   sum: float and double addition are commutative). Requires all 32 lanes
 *   active.
 * - block_tree: a shared-memory tree over the THREADS values of a block
 *   (thread i with i + THREADS/2, then i + THREADS/4, ...). Requires
 *   blockDim.x == THREADS, a power of two; the result is read from shared
 *   memory by every thread; a second call in the same kernel must be
 *   separated from the readers of the first by a barrier.
 * - block_shuffle_fold: a warp_fold in every warp, then warp 0 folds the
 *   warps' results in warp order. Requires blockDim.x == THREADS, a
 *   multiple of 32 up to 1024; the result is returned to every thread and
 *   consecutive calls need no barrier between them (see the function).
 * - tree_sum: a double sum over n terms on the stream: per-thread strided
 *   sums, block_tree per block into a partial, one block adding the
 *   partials. The grid is min(blocks(n), TREE_SUM_MAX_PARTIALS) blocks of
 *   TREE_SUM_THREADS, so the order depends on n alone.
 * - column_sums_add: out[k][c] += the double sum over rows of K terms per
 *   (row, column), for the norms' parameter gradients: tiles of 32 columns
 *   by 8 row lanes over chunks of rows, each lane adding its rows in order,
 *   the lanes added in lane order onto lane 0, then the chunks in chunk
 *   order; the chunk count depends on the row and column counts alone.
 */
#ifndef ZT_WORKER_CUDA_REDUCE_CUH
#define ZT_WORKER_CUDA_REDUCE_CUH

#include "worker/cuda/cuda_impl.h"

namespace reduce
{

constexpr unsigned WARP = 32;

/* ---- combining operations ------------------------------------------------- */

/* a + b with the type's ordinary addition. */
struct add_op {
    template <class T> __device__ T operator()(T a, T b) const
    {
        return a + b;
    }
};

/* Correctly rounded double addition: the trees' sums never fuse. */
struct dadd_rn_op {
    __device__ double operator()(double a, double b) const
    {
        return __dadd_rn(a, b);
    }
};

/* b when b > a, else a: NaN is dropped when it comes second and kept when
 * it comes first, as the float maxima of the softmaxes always did. */
struct max_op {
    __device__ float operator()(float a, float b) const
    {
        return b > a ? b : a;
    }
};

/* ---- within a warp ---------------------------------------------------------- */

/* The butterfly of the top of the file: x = op(x, partner's x) at lane
 * distances 16, 8, 4, 2, 1. */
template <class T, class Op> __device__ __forceinline__ T warp_fold(T x, Op op)
{
    for (unsigned o = WARP / 2; o > 0; o /= 2)
        x = op(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

template <class T> __device__ __forceinline__ T warp_sum(T x)
{
    return warp_fold(x, add_op{});
}

static __device__ __forceinline__ float warp_max(float x)
{
    return warp_fold(x, max_op{});
}

/* ---- within a block ------------------------------------------------------- */

/* The shared-memory tree of the top of the file over every thread's v;
 * blockDim.x == THREADS, a power of two. */
template <unsigned THREADS, class T, class Op> __device__ T block_tree(T v, Op op)
{
    static_assert((THREADS & (THREADS - 1)) == 0, "a power of two");
    __shared__ T sh[THREADS];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            sh[threadIdx.x] = op(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    return sh[0];
}

/* The fold over the block of the top of the file, returned to every
 * thread; `identity` fills warp 0's lanes past the warp count. After the
 * second barrier no thread reads `part` again, and `total` is rewritten
 * only after the next call's first barrier, which every thread reaches
 * after reading it: consecutive calls need no third barrier. */
template <unsigned THREADS, class T, class Op>
__device__ T block_shuffle_fold(T x, Op op, T identity)
{
    static_assert(THREADS % WARP == 0 && THREADS / WARP <= WARP, "whole warps, at most 32");
    constexpr int WARPS = THREADS / WARP;
    __shared__ T part[WARPS];
    __shared__ T total;
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    x = warp_fold(x, op);
    if (lane == 0)
        part[w] = x;
    __syncthreads();
    if (w == 0) {
        x = warp_fold(lane < WARPS ? part[lane] : identity, op);
        if (lane == 0)
            total = x;
    }
    __syncthreads();
    return total;
}

/* ---- a double sum over a whole buffer --------------------------------------- */

constexpr unsigned TREE_SUM_THREADS = 256;
constexpr unsigned TREE_SUM_MAX_PARTIALS = 1024;
/* Doubles of scratch tree_sum uses: the partials and room for a total. */
constexpr size_t TREE_SUM_SCRATCH_DOUBLES = TREE_SUM_MAX_PARTIALS + 1;

/* partials[block] = the block_tree sum of its threads' sums of term(i),
 * thread k of the grid taking i = k, k + stride, ... in order. */
template <class Term> __global__ void tree_sum_partials(Term term, size_t n, double *partials)
{
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s = __dadd_rn(s, term(i));
    const double total = block_tree<TREE_SUM_THREADS>(s, dadd_rn_op{});
    if (threadIdx.x == 0)
        partials[blockIdx.x] = total;
}

/* *out = (ACCUMULATE: *out +) the sum of partials[0..n_partials), one block. */
template <bool ACCUMULATE>
__global__ void tree_sum_finish(const double *partials, unsigned n_partials, double *out)
{
    double s = 0.0;
    for (unsigned i = threadIdx.x; i < n_partials; i += TREE_SUM_THREADS)
        s = __dadd_rn(s, partials[i]);
    const double total = block_tree<TREE_SUM_THREADS>(s, dadd_rn_op{});
    if (threadIdx.x == 0)
        *out = ACCUMULATE ? __dadd_rn(*out, total) : total;
}

/* *out = (ACCUMULATE: *out +) the sum of term(i) for i < n, n > 0, on the
 * stream; term is a functor __device__ double operator()(size_t) const.
 * partials: TREE_SUM_MAX_PARTIALS doubles of device scratch, not
 * overlapping out. */
template <bool ACCUMULATE, class Term>
zt_status tree_sum(cudaStream_t stream, Term term, size_t n, double *partials, double *out)
{
    const unsigned blocks = cuda_blocks(n, TREE_SUM_THREADS) < TREE_SUM_MAX_PARTIALS
                                ? cuda_blocks(n, TREE_SUM_THREADS)
                                : TREE_SUM_MAX_PARTIALS;
    tree_sum_partials<<<blocks, TREE_SUM_THREADS, 0, stream>>>(term, n, partials);
    CUDA_LAUNCHED();
    tree_sum_finish<ACCUMULATE><<<1, TREE_SUM_THREADS, 0, stream>>>(partials, blocks, out);
    CUDA_LAUNCHED();
    return ZT_OK;
}

/* ---- column sums over rows (the norms' parameter gradients) ----------------- */

/* A block is COLS_TILE columns (a warp across a row: coalesced) by
 * COLS_ROW_LANES rows. */
constexpr unsigned COLS_TILE = 32;
constexpr unsigned COLS_ROW_LANES = 8;
/* Fewest rows per chunk: below it a block's launch outweighs its work. */
constexpr int COLS_CHUNK_ROWS_MIN = 32;
/* Most chunks: the grid's y dimension. */
constexpr int COLS_CHUNKS_MAX = 65535;
constexpr size_t COLS_SCRATCH_DOUBLES = CUDA_SCRATCH_BYTES / sizeof(double);

/* The K outputs column_sums_add adds into. */
template <int K> struct column_outs {
    float *p[K];
};

/* p[(k * chunks + chunk) * span + j] = column c0 + j's sum of term k over
 * the rows of chunk blockIdx.y: each row lane adds its rows in order, then
 * lane 0 adds lanes 1..7 in order. terms(i, c, t) sets t[0..K) for row i,
 * column c (floats, summed in double). */
template <int K, class Terms>
__global__ void column_partials_kernel(double *p, Terms terms, int N, int c0, int span,
                                       int chunk_rows)
{
    __shared__ double sh[K][COLS_ROW_LANES][COLS_TILE];
    const unsigned tx = threadIdx.x, ty = threadIdx.y;
    const int j = (int)(blockIdx.x * COLS_TILE + tx);
    const int r0 = (int)blockIdx.y * chunk_rows;
    const int r1 = r0 + chunk_rows < N ? r0 + chunk_rows : N;
    double acc[K];
    for (int k = 0; k < K; k++)
        acc[k] = 0.0;
    if (j < span) {
        const size_t c = (size_t)(c0 + j);
        for (int i = r0 + (int)ty; i < r1; i += COLS_ROW_LANES) {
            float t[K];
            terms(i, c, t);
            for (int k = 0; k < K; k++)
                acc[k] += t[k];
        }
    }
    for (int k = 0; k < K; k++)
        sh[k][ty][tx] = acc[k];
    __syncthreads();
    if (ty != 0 || j >= span)
        return;
    for (unsigned l = 1; l < COLS_ROW_LANES; l++)
        for (int k = 0; k < K; k++)
            acc[k] += sh[k][l][tx];
    for (int k = 0; k < K; k++)
        p[((size_t)k * gridDim.y + blockIdx.y) * span + j] = acc[k];
}

/* out.p[k][c0 + j] += the sum of column j's chunk partials of term k, in
 * chunk order, rounded to float once. */
template <int K>
__global__ void column_finish_kernel(column_outs<K> out, const double *p, int c0, int span,
                                     int chunks)
{
    const int j = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (j >= span)
        return;
    double acc[K];
    for (int k = 0; k < K; k++)
        acc[k] = 0.0;
    for (int ch = 0; ch < chunks; ch++)
        for (int k = 0; k < K; k++)
            acc[k] += p[((size_t)k * chunks + ch) * span + j];
    for (int k = 0; k < K; k++)
        out.p[k][c0 + j] += (float)acc[k];
}

/* The columns [c0, c0 + span) of column_sums_add. */
template <int K, class Terms>
zt_status column_span(struct cuda_ctx *ctx, column_outs<K> out, Terms terms, int N, int c0,
                      int span)
{
    const size_t fit = COLS_SCRATCH_DOUBLES / (K * (size_t)span);
    const int max_chunks = fit < (size_t)COLS_CHUNKS_MAX ? (int)fit : COLS_CHUNKS_MAX;
    const size_t want = ((size_t)N + COLS_CHUNK_ROWS_MIN - 1) / COLS_CHUNK_ROWS_MIN;
    int chunks = want < (size_t)max_chunks ? (int)want : max_chunks;
    /* Rows per chunk, then the chunks that leaves (none of them empty). */
    const int chunk_rows = (int)(((size_t)N + chunks - 1) / chunks);
    chunks = (int)(((size_t)N + chunk_rows - 1) / chunk_rows);
    double *p = (double *)ctx->scratch;

    dim3 grid((unsigned)((span + COLS_TILE - 1) / COLS_TILE), (unsigned)chunks);
    column_partials_kernel<K><<<grid, dim3(COLS_TILE, COLS_ROW_LANES), 0, ctx->stream>>>(
        p, terms, N, c0, span, chunk_rows);
    CUDA_LAUNCHED();
    column_finish_kernel<K>
        <<<cuda_blocks((size_t)span, 256), 256, 0, ctx->stream>>>(out, p, c0, span, chunks);
    CUDA_LAUNCHED();
    return ZT_OK;
}

/* out.p[k][c] += sum over rows i < N of term k (i, c), for c < C, N >= 1,
 * on ctx->stream through ctx->scratch; columns beyond what the scratch
 * holds go in successive spans. Terms: a functor
 * __device__ void operator()(int i, size_t c, float t[K]) const. */
template <int K, class Terms>
zt_status column_sums_add(struct cuda_ctx *ctx, column_outs<K> out, Terms terms, int N, int C)
{
    constexpr int SPAN_COLS_MAX = (int)(COLS_SCRATCH_DOUBLES / K);
    for (int c0 = 0; c0 < C; c0 += SPAN_COLS_MAX) {
        const int span = C - c0 < SPAN_COLS_MAX ? C - c0 : SPAN_COLS_MAX;
        ZT_TRY(column_span<K>(ctx, out, terms, N, c0, span));
    }
    return ZT_OK;
}

} // namespace reduce

#endif
