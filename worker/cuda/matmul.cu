/* worker/cuda/matmul.cu — the linear layer out = inp @ weight^T + bias on
 * the GPU: worker/cpu/matmul.c with cuBLAS in place of OpenBLAS.
 *
 * cuBLAS is column-major; a row-major [R, K] buffer is the column-major
 * [K, R] matrix, its transpose, with the same leading dimension. So each
 * row-major product P = X @ Y is issued as P^T = Y^T @ X^T with the operands
 * swapped, and every buffer is read as it lies (weight [OC, C] is never
 * copied or transposed in memory). The three products are single
 * cublasGemmEx calls (cuda_gemm) on the context's handle, already bound to
 * its stream, with operands and out of the op's type t, dweight fp32, and
 * CUBLAS_COMPUTE_32F: 16-bit operands are multiplied exactly on tensor
 * cores and summed in fp32, and a 16-bit out is rounded once, after the
 * bias or the old value is added (beta = 1), as the CPU's oneDNN products
 * do. The math mode (pedantic fp32, no reduced-precision reductions) is
 * the handle's, set when the backend opens, so nothing here changes it.
 *
 * The bias is fused as on the CPU: a copy kernel writes it into every row
 * of out and the product adds into it with beta = 1. The backward's dinp
 * and dweight use beta = 1, the accumulate convention of worker/ops.h.
 *
 * dbias (column sums of dout[N, OC]) is a reduction over rows, done without
 * atomics so that it is the same bits on every run:
 *   1. bias_partials: blocks of 32 columns x 8 row lanes over one chunk of
 *      rows; a warp reads 32 adjacent columns of a row (coalesced), each
 *      thread sums its rows in order, the 8 lanes are added in order, and
 *      the chunk's sum lands in ctx->scratch as partial[chunk][column].
 *   2. bias_finish: one thread per column adds its chunks' partials in
 *      chunk order and adds the total to dbias.
 * The sums run in double: the CPU adds each column's rows in float, one
 * after another, an order a parallel reduction cannot keep, so the GPU
 * computes the column sums almost exactly instead and differs from the
 * CPU by the CPU's own rounding only. The chunking depends on N and OC
 * alone (not on the GPU's size), so the bits repeat across runs and cards
 * of one architecture. When OC columns of partials do not fit the scratch
 * the columns are done in groups, one after another on the stream.
 */
#include "worker/cuda/cuda_impl.h"
#include "worker/cuda/elem.cuh"

/* The dbias reduction's block: 32 columns (a warp across a row) x 8 rows. */
enum { BIAS_COLS = 32, BIAS_LANES = 8 };
/* Rows per chunk before the chunk count is capped: enough work per thread
 * (32 rows) to hide the loads' latency, enough chunks to fill the GPU. */
enum { BIAS_ROWS_PER_CHUNK = 256, BIAS_MAX_CHUNKS = 4096 };
/* Partials the scratch holds. */
enum { SCRATCH_DOUBLES = CUDA_SCRATCH_BYTES / sizeof(double) };

/* cuBLAS rejects a leading dimension of 0 even when the matrix is empty
 * (the forward's C = 0: out is the bias, or zero). */
static int ld_of(int cols)
{
    return cols > 1 ? cols : 1;
}

/* out[i, :] = bias for every row i of out[N, OC]: blocks stride over rows
 * (y) and column tiles (x), so no thread divides to find its column. */
template <class E> __global__ void bias_broadcast(E *out, const E *bias, int N, int OC)
{
    for (int i = blockIdx.y; i < N; i += gridDim.y)
        for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < OC; o += gridDim.x * blockDim.x)
            out[(size_t)i * OC + o] = bias[o];
}

extern "C" zt_status cuda_gemm(struct cuda_ctx *ctx, cublasOperation_t ta, cublasOperation_t tb,
                               int m, int n, int k, float alpha, enum zt_dtype ab, const void *A,
                               int lda, const void *B, int ldb, float beta, enum zt_dtype c,
                               void *C, int ldc)
{
    ZT_ASSERT(c == ZT_F32 || c == ab);
    ZT_TRY(cuda_ctx_computes(ctx, ab));
    CUBLAS_TRY(cublasGemmEx(ctx->blas, ta, tb, m, n, k, &alpha, A, elem::blas_type(ab), lda, B,
                            elem::blas_type(ab), ldb, &beta, C, elem::blas_type(c), ldc,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return ZT_OK;
}

extern "C" zt_status cuda_matmul_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                         const void *inp, const void *weight, const void *bias,
                                         int N, int C, int OC)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    if (N <= 0 || OC <= 0)
        return ZT_OK;
    if (bias)
        ZT_TRY(elem::with_type(t, [&](auto tag) {
            using E = typename decltype(tag)::type;
            const unsigned col_tiles = cuda_blocks((size_t)OC, 256);
            const dim3 grid(col_tiles < 64u ? col_tiles : 64u, N < 65535 ? (unsigned)N : 65535u);
            bias_broadcast<E><<<grid, 256, 0, ctx->stream>>>(static_cast<E *>(out),
                                                             static_cast<const E *>(bias), N, OC);
            CUDA_LAUNCHED();
            return ZT_OK;
        }));
    /* out^T[OC, N] (+)= weight[OC, C] (its column-major view [C, OC],
     * transposed) @ inp^T (inp's column-major view [C, N]) */
    return cuda_gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, 1.0f, t, weight, ld_of(C), inp,
                     ld_of(C), bias ? 1.0f : 0.0f, t, out, OC);
}

/* partial[chunk, c] = the sum of dout[n, o0 + c] over the rows n of chunk
 * `blockIdx.y` (rows_per consecutive rows), for the ncols columns from o0.
 * Block (BIAS_COLS, BIAS_LANES); lane ty sums rows ty, ty + 8, ... of the
 * chunk in order, then lane 0 adds the lanes in order. */
template <class E>
__global__ void bias_partials(double *partial, const E *dout, int N, int OC, int o0, int ncols,
                              int rows_per)
{
    __shared__ double lanes[BIAS_LANES][BIAS_COLS];
    const int c = blockIdx.x * BIAS_COLS + threadIdx.x;
    const int r0 = blockIdx.y * rows_per;
    const int r1 = r0 + rows_per < N ? r0 + rows_per : N;
    double acc = 0.0;
    if (c < ncols)
        for (int n = r0 + (int)threadIdx.y; n < r1; n += BIAS_LANES)
            acc += (double)elem::f32(dout[(size_t)n * OC + o0 + c]);
    lanes[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y != 0 || c >= ncols)
        return;
    double sum = 0.0;
    for (int l = 0; l < BIAS_LANES; l++)
        sum += lanes[l][threadIdx.x];
    partial[(size_t)blockIdx.y * ncols + c] = sum;
}

/* dbias[o0 + c] += the sum of the chunks' partials of column c, in order. */
__global__ void bias_finish(float *dbias, const double *partial, int o0, int ncols, int chunks)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= ncols)
        return;
    double sum = 0.0;
    for (int k = 0; k < chunks; k++)
        sum += partial[(size_t)k * ncols + c];
    dbias[o0 + c] += (float)sum;
}

/* dbias += the column sums of dout[N, OC], in column groups that fit the
 * scratch. */
template <class E>
static zt_status bias_backward(struct cuda_ctx *ctx, float *dbias, const E *dout, int N, int OC)
{
    double *partial = (double *)ctx->scratch;
    const int group = OC < (int)SCRATCH_DOUBLES ? OC : (int)SCRATCH_DOUBLES;
    for (int o0 = 0; o0 < OC; o0 += group) {
        const int ncols = OC - o0 < group ? OC - o0 : group;
        int chunks = (N + BIAS_ROWS_PER_CHUNK - 1) / BIAS_ROWS_PER_CHUNK;
        const int fit = (int)SCRATCH_DOUBLES / ncols;
        chunks = chunks < fit ? chunks : fit;
        chunks = chunks < BIAS_MAX_CHUNKS ? chunks : BIAS_MAX_CHUNKS;
        chunks = chunks > 1 ? chunks : 1;
        const int rows_per = (N + chunks - 1) / chunks;
        const dim3 grid((unsigned)((ncols + BIAS_COLS - 1) / BIAS_COLS), (unsigned)chunks);
        const dim3 block(BIAS_COLS, BIAS_LANES);
        bias_partials<E>
            <<<grid, block, 0, ctx->stream>>>(partial, dout, N, OC, o0, ncols, rows_per);
        CUDA_LAUNCHED();
        bias_finish<<<(unsigned)((ncols + 255) / 256), 256, 0, ctx->stream>>>(dbias, partial, o0,
                                                                              ncols, chunks);
        CUDA_LAUNCHED();
    }
    return ZT_OK;
}

extern "C" zt_status cuda_matmul_backward(const struct ops_backend *self, enum zt_dtype t,
                                          void *dinp, float *dweight, float *dbias,
                                          const void *dout, const void *inp, const void *weight,
                                          int N, int C, int OC)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    if (N <= 0 || OC <= 0)
        return ZT_OK; /* every gradient adds an empty sum */
    /* dinp^T[C, N] += weight's column-major view [C, OC] @ dout^T [OC, N] */
    if (dinp && C > 0)
        ZT_TRY(cuda_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, 1.0f, t, weight, C, dout, OC,
                         1.0f, t, dinp, C));
    /* dweight^T[C, OC] += inp^T [C, N] @ (dout^T [OC, N])^T, in fp32 */
    if (dweight && C > 0)
        ZT_TRY(cuda_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, 1.0f, t, inp, C, dout, OC, 1.0f,
                         ZT_F32, dweight, C));
    if (!dbias)
        return ZT_OK;
    return elem::with_type(t, [&](auto tag) {
        using E = typename decltype(tag)::type;
        return bias_backward<E>(ctx, dbias, static_cast<const E *>(dout), N, OC);
    });
}
