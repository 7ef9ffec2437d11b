/* worker/cuda/attention.cu — causal self-attention with grouped-query heads
 * on the GPU: worker/cpu/attention.c's products and softmaxes, on the
 * context's stream.
 *
 * Layout (worker/ops.h): a row of qkv holds NH query heads, then NKV key
 * heads, then NKV value heads, hs floats each, ld = (NH + 2 NKV) hs; query
 * head h reads key/value head h / g, g = NH / NKV. att[B,NH,T,T] keeps the
 * probabilities for the backward, so the T x T matrix goes to memory
 * anyway, which takes away most of what a fused (flash) kernel would save.
 *
 * Products: cuBLAS, not hand-tiled kernels. Every product of a head is a
 * GEMM on strided views of qkv, out and att, and the context's handle runs
 * them in plain fp32 (CUBLAS_PEDANTIC_MATH unless the run asked for tf32):
 * full-rate, tested tiling, and the same bits on every run for the same
 * shapes (cuBLAS is deterministic on one GPU model unless told to use
 * atomics). One call covers every (b, h) pair at once through
 * cublasSgemmBatched: a strided batch cannot, since the pair's operands are
 * T ld floats apart along b but hs apart along h (and k, v repeat over the
 * g heads of a group), while the per-head sizes (T <= 1024, hs 64..128)
 * need the whole batch to fill the GPU. The pointer arrays are built on the
 * stream by a small kernel in ctx->scratch (three pointers per pair;
 * batches beyond its room go in pieces), so nothing waits for the host.
 *
 * Causality: as on the CPU, rows are cut into chunks of QCHUNK; rows
 * [i0, i1) see keys [0, i1) only, so each chunk's products stop there.
 * At T = 1024 the four chunks do 10/16 of the full products' work, for
 * four times the calls (each a whole batch of B NH pairs). Entries of att
 * above the diagonal are written as exact zeros by the softmax; the
 * products then run over whole chunks with those zeros in them, and the
 * backward relies on them the same way.
 *
 * Grouped heads in the backward: the g query heads of a group all add into
 * the same dk and dv. No atomics: the sum over the group is g separate
 * batched calls (query head j = 0..g-1 of every group in call j, beta = 1),
 * issued in order on the stream, so each group's dk and dv receive their g
 * terms in a fixed order; inside one call the pairs write disjoint outputs.
 *
 * Softmaxes: one warp per row of att, lanes striding over the row, max and
 * sum folded by reduce.cuh's butterfly of shuffles (every lane ends with
 * the same bits, and the order is fixed by the shape alone). Rows are at most T floats, so
 * a warp's 32 partial sums keep float's rounding small; expf, not __expf.
 */
#include "worker/cuda/cuda_impl.h"
#include "worker/cuda/reduce.cuh"

#include <math.h>

enum {
    QCHUNK = 256, /* query rows per chunk of the causal products */
    SOFTMAX_THREADS = 256,
    WARP = 32,
    FILL_THREADS = 256,
};

using reduce::warp_max;
using reduce::warp_sum;

/* Where one operand of a batched product lies for query head h of batch
 * row b: base + b * b_stride + (h / head_div) * head_stride. head_div is g
 * for the key and value heads (shared by a group), 1 otherwise. */
struct operand {
    const float *base;
    long long b_stride;
    long long head_stride;
    int head_div;
};

/* Which (b, h) batch item p stands for: b = p / per_b, h = (p % per_b) *
 * mul + add. The per-pair products take every query head (per_b = NH,
 * mul = 1, add = 0); the group sums take query head `add` of each of the
 * NKV groups (per_b = NKV, mul = g). */
struct batch_map {
    int per_b, mul, add;
};

/* One batched product in cuBLAS's column-major terms (a row-major matrix
 * with leading dimension ld is its transpose, column-major, same ld). */
struct gemm {
    cublasOperation_t ta, tb;
    int m, n, k;
    float alpha, beta;
    struct operand a, b, c;
    int lda, ldb, ldc;
};

/* A batched product, its arguments in cublasSgemm's order. */
static struct gemm gemm_of(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           float alpha, struct operand a, int lda, struct operand b, int ldb,
                           float beta, struct operand c, int ldc)
{
    struct gemm g = {ta, tb, m, n, k, alpha, beta, a, b, c, lda, ldb, ldc};
    return g;
}

/* The strides of one call (shape_of fills it in this order). */
struct attn_shape {
    int B, T, NH, NKV, hs, g;
    int ld;  /* floats per row of qkv and dqkv */
    int ldo; /* floats per row of out and dout */
};

static __device__ const float *operand_at(struct operand o, int b, int h)
{
    return o.base + (long long)b * o.b_stride + (long long)(h / o.head_div) * o.head_stride;
}

/* The pointers of batch items p0 .. p0 + n - 1 into a[0..n), b[0..n),
 * c[0..n). */
static __global__ void fill_pointers(const float **a, const float **b, float **c, int p0, int n,
                                     struct batch_map map, struct operand oa, struct operand ob,
                                     struct operand oc)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        int p = p0 + i, bi = p / map.per_b, h = (p % map.per_b) * map.mul + map.add;
        a[i] = operand_at(oa, bi, h);
        b[i] = operand_at(ob, bi, h);
        c[i] = const_cast<float *>(operand_at(oc, bi, h));
    }
}

/* Runs g over `items` batch items, in pieces that fit their pointer arrays
 * into ctx->scratch. Stream order keeps a piece's arrays intact until its
 * GEMM has run, so every piece reuses the same room. */
static zt_status run_batched(struct cuda_ctx *ctx, const struct gemm *g, struct batch_map map,
                             int items)
{
    const int room = (int)(CUDA_SCRATCH_BYTES / (3 * sizeof(float *)));
    const float **pa = (const float **)ctx->scratch;
    const float **pb = pa + room;
    float **pc = (float **)(pb + room);
    for (int p0 = 0; p0 < items; p0 += room) {
        int n = items - p0 < room ? items - p0 : room;
        fill_pointers<<<cuda_blocks((size_t)n, FILL_THREADS), FILL_THREADS, 0, ctx->stream>>>(
            pa, pb, pc, p0, n, map, g->a, g->b, g->c);
        CUDA_LAUNCHED();
        CUBLAS_TRY(cublasSgemmBatched(ctx->blas, g->ta, g->tb, g->m, g->n, g->k, &g->alpha, pa,
                                      g->lda, pb, g->ldb, &g->beta, pc, g->ldc, n));
    }
    return ZT_OK;
}

static struct attn_shape shape_of(int B, int T, int NH, int NKV, int hs)
{
    ZT_ASSERT(B >= 0 && T >= 1 && NH > 0 && NKV > 0 && NH % NKV == 0 && hs > 0);
    return {B, T, NH, NKV, hs, NH / NKV, (NH + 2 * NKV) * hs, NH * hs};
}

/* The operands, for rows from i0 on. q, k and v (and dq, dk, dv) are
 * views of qkv (dqkv), rows_view of out (dout), square_view of att (the
 * backward's scratch, laid out as att). */
static struct operand q_view(const struct attn_shape *s, const float *qkv, int i0)
{
    return {qkv + (size_t)i0 * s->ld, (long long)s->T * s->ld, s->hs, 1};
}

static struct operand k_view(const struct attn_shape *s, const float *qkv)
{
    return {qkv + (size_t)s->NH * s->hs, (long long)s->T * s->ld, s->hs, s->g};
}

static struct operand v_view(const struct attn_shape *s, const float *qkv)
{
    return {qkv + (size_t)(s->NH + s->NKV) * s->hs, (long long)s->T * s->ld, s->hs, s->g};
}

static struct operand rows_view(const struct attn_shape *s, const float *out, int i0)
{
    return {out + (size_t)i0 * s->ldo, (long long)s->T * s->ldo, s->hs, 1};
}

static struct operand square_view(const struct attn_shape *s, const float *att, int i0)
{
    long long tt = (long long)s->T * s->T;
    return {att + (size_t)i0 * s->T, tt * s->NH, tt, 1};
}

static struct batch_map every_pair(const struct attn_shape *s)
{
    return {s->NH, 1, 0};
}

/* Query head j of every group. */
static struct batch_map group_member(const struct attn_shape *s, int j)
{
    return {s->NKV, s->g, j};
}

/* In place on rows of att (row r is query position r % T): the scaled
 * scores of keys 0..i become their softmax, the rest of the row 0. One
 * warp per row; the grid strides over rows a warp at a time, so the
 * shuffles always see the whole warp. */
static __global__ void softmax_causal(float *att, size_t rows, int T)
{
    const int lane = threadIdx.x % WARP;
    const size_t warps = (size_t)gridDim.x * blockDim.x / WARP;
    for (size_t r = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / WARP; r < rows; r += warps) {
        float *a = att + r * T;
        const int n = (int)(r % T) + 1;
        float m = -INFINITY;
        for (int j = lane; j < n; j += WARP)
            m = a[j] > m ? a[j] : m;
        m = warp_max(m);
        float s = 0.0f;
        for (int j = lane; j < n; j += WARP) {
            float e = expf(a[j] - m);
            a[j] = e;
            s += e;
        }
        const float inv = 1.0f / warp_sum(s);
        for (int j = lane; j < T; j += WARP)
            a[j] = j < n ? a[j] * inv : 0.0f;
    }
}

/* In place on rows of d (the gradient w.r.t. att, over keys 0..i at least):
 * d[j] becomes att[j] (d[j] - sum_k att[k] d[k]) for j <= i, and 0 past
 * the diagonal, where d may hold anything the chunked product left. */
static __global__ void softmax_causal_backward(float *d, const float *att, size_t rows, int T)
{
    const int lane = threadIdx.x % WARP;
    const size_t warps = (size_t)gridDim.x * blockDim.x / WARP;
    for (size_t r = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / WARP; r < rows; r += warps) {
        float *dr = d + r * T;
        const float *a = att + r * T;
        const int n = (int)(r % T) + 1;
        float dot = 0.0f;
        for (int j = lane; j < n; j += WARP)
            dot += a[j] * dr[j];
        dot = warp_sum(dot);
        for (int j = lane; j < T; j += WARP)
            dr[j] = j < n ? a[j] * (dr[j] - dot) : 0.0f;
    }
}

static unsigned row_blocks(size_t rows)
{
    return cuda_blocks(rows * WARP, SOFTMAX_THREADS);
}

/* The end of the chunk of query rows that starts at i0. */
static int chunk_end(int i0, int T)
{
    return i0 + QCHUNK < T ? i0 + QCHUNK : T;
}

extern "C" zt_status cuda_attention_forward(const struct ops_backend *self, float *out, float *att,
                                            const float *qkv, int B, int T, int NH, int NKV, int hs)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    const struct attn_shape s = shape_of(B, T, NH, NKV, hs);
    if (B == 0)
        return ZT_OK;
    const int pairs = B * NH;
    const float scale = 1.0f / sqrtf((float)hs);
    /* att rows [i0, i1), keys [0, i1): scale q k^T. */
    for (int i0 = 0; i0 < T; i0 += QCHUNK) {
        int i1 = chunk_end(i0, T);
        struct gemm g = gemm_of(CUBLAS_OP_T, CUBLAS_OP_N, i1, i1 - i0, hs, scale, k_view(&s, qkv),
                                s.ld, q_view(&s, qkv, i0), s.ld, 0.0f, square_view(&s, att, i0), T);
        ZT_TRY(run_batched(ctx, &g, every_pair(&s), pairs));
    }
    const size_t rows = (size_t)pairs * T;
    softmax_causal<<<row_blocks(rows), SOFTMAX_THREADS, 0, ctx->stream>>>(att, rows, T);
    CUDA_LAUNCHED();
    /* out rows [i0, i1) = att[i0:i1, 0:i1] v[0:i1]. */
    for (int i0 = 0; i0 < T; i0 += QCHUNK) {
        int i1 = chunk_end(i0, T);
        struct gemm g =
            gemm_of(CUBLAS_OP_N, CUBLAS_OP_N, hs, i1 - i0, i1, 1.0f, v_view(&s, qkv), s.ld,
                    square_view(&s, att, i0), T, 0.0f, rows_view(&s, out, i0), s.ldo);
        ZT_TRY(run_batched(ctx, &g, every_pair(&s), pairs));
    }
    return ZT_OK;
}

/* datt rows [i0, i1) = dout v^T over keys [0, i1), into scratch (laid out
 * as att); then dv[0:i1] += att[i0:i1, 0:i1]^T dout[i0:i1], one query head
 * of every group per call. */
static zt_status backward_values(struct cuda_ctx *ctx, const struct attn_shape *s, float *dqkv,
                                 float *datt, const float *dout, const float *qkv, const float *att)
{
    const int pairs = s->B * s->NH, groups = s->B * s->NKV, T = s->T, hs = s->hs;
    for (int i0 = 0; i0 < T; i0 += QCHUNK) {
        int i1 = chunk_end(i0, T);
        struct gemm g =
            gemm_of(CUBLAS_OP_T, CUBLAS_OP_N, i1, i1 - i0, hs, 1.0f, v_view(s, qkv), s->ld,
                    rows_view(s, dout, i0), s->ldo, 0.0f, square_view(s, datt, i0), T);
        ZT_TRY(run_batched(ctx, &g, every_pair(s), pairs));
    }
    for (int i0 = 0; i0 < T; i0 += QCHUNK) {
        int i1 = chunk_end(i0, T);
        struct gemm g =
            gemm_of(CUBLAS_OP_N, CUBLAS_OP_T, hs, i1, i1 - i0, 1.0f, rows_view(s, dout, i0), s->ldo,
                    square_view(s, att, i0), T, 1.0f, v_view(s, dqkv), s->ld);
        for (int j = 0; j < s->g; j++)
            ZT_TRY(run_batched(ctx, &g, group_member(s, j), groups));
    }
    return ZT_OK;
}

/* With dpre = the gradient w.r.t. the scaled scores (in scratch):
 * dq[i0:i1] += scale dpre[i0:i1, 0:i1] k[0:i1]; then dk[0:i1] += scale
 * dpre[i0:i1, 0:i1]^T q[i0:i1], one query head of every group per call. */
static zt_status backward_scores(struct cuda_ctx *ctx, const struct attn_shape *s, float *dqkv,
                                 const float *dpre, const float *qkv)
{
    const int pairs = s->B * s->NH, groups = s->B * s->NKV, T = s->T, hs = s->hs;
    const float scale = 1.0f / sqrtf((float)hs);
    for (int i0 = 0; i0 < T; i0 += QCHUNK) {
        int i1 = chunk_end(i0, T);
        struct gemm g =
            gemm_of(CUBLAS_OP_N, CUBLAS_OP_N, hs, i1 - i0, i1, scale, k_view(s, qkv), s->ld,
                    square_view(s, dpre, i0), T, 1.0f, q_view(s, dqkv, i0), s->ld);
        ZT_TRY(run_batched(ctx, &g, every_pair(s), pairs));
    }
    for (int i0 = 0; i0 < T; i0 += QCHUNK) {
        int i1 = chunk_end(i0, T);
        struct gemm g =
            gemm_of(CUBLAS_OP_N, CUBLAS_OP_T, hs, i1, i1 - i0, scale, q_view(s, qkv, i0), s->ld,
                    square_view(s, dpre, i0), T, 1.0f, k_view(s, dqkv), s->ld);
        for (int j = 0; j < s->g; j++)
            ZT_TRY(run_batched(ctx, &g, group_member(s, j), groups));
    }
    return ZT_OK;
}

extern "C" zt_status cuda_attention_backward(const struct ops_backend *self, float *dqkv,
                                             float *scratch, const float *dout, const float *qkv,
                                             const float *att, int B, int T, int NH, int NKV,
                                             int hs)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    const struct attn_shape s = shape_of(B, T, NH, NKV, hs);
    if (B == 0)
        return ZT_OK;
    ZT_TRY(backward_values(ctx, &s, dqkv, scratch, dout, qkv, att));
    const size_t rows = (size_t)B * NH * T;
    softmax_causal_backward<<<row_blocks(rows), SOFTMAX_THREADS, 0, ctx->stream>>>(scratch, att,
                                                                                   rows, T);
    CUDA_LAUNCHED();
    return backward_scores(ctx, &s, dqkv, scratch, qkv);
}
