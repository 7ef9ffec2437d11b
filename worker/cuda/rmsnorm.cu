/* worker/cuda/rmsnorm.cu — RMSNorm over rows of C floats on the GPU (the
 * Llama family's norm: no mean subtraction, no bias); the CPU's is
 * worker/cpu/rmsnorm.c.
 *
 * The shapes are layernorm.cu's, for the same reasons. One warp per row:
 * the lanes stride the row 32 floats apart (coalesced passes) and meet in a
 * shuffle reduction; the mean square is summed in double, because the
 * lanes' order cannot be the CPU's and in double it no longer shows at the
 * float result, and it is fixed by C alone, so the bits repeat. rstd is
 * then formed in float as the CPU does, 1 / sqrtf(ss / C + eps), and the
 * output is (x * rstd) * w in that order (Hugging Face's LlamaRMSNorm).
 *
 * The backward's dinp is per row: rstd * (g - xhat * mean(g * xhat)) with
 * xhat = x * rstd, g = w * dout, the row sum again in double. dweight is a
 * column sum of dout * xhat over all N rows: a grid of (32-column tile) x
 * (row chunk) blocks writes one double partial per column and chunk into
 * ctx->scratch (the block's 8 row lanes combined in a fixed order), then a
 * second kernel adds each column's partials in chunk order and adds the
 * total, rounded to float, into dweight once. The chunk count depends only
 * on N and C, never on the device, so the bits are the same on every run;
 * columns beyond what the scratch holds go in successive spans.
 */
#include "worker/cuda/cuda_impl.h"

namespace
{

constexpr unsigned WARP = 32;
constexpr unsigned ROW_THREADS = 256; /* 8 rows (warps) per block */
constexpr unsigned ROWS_PER_BLOCK = ROW_THREADS / WARP;

/* dweight: a block is TILE_COLS columns by ROW_LANES rows. */
constexpr unsigned TILE_COLS = 32;
constexpr unsigned ROW_LANES = 8;
/* Fewest rows per chunk: below it a block's launch outweighs its work. */
constexpr int CHUNK_ROWS_MIN = 32;
/* Doubles of scratch: dweight's partials, chunk-major. */
constexpr size_t SCRATCH_DOUBLES = CUDA_SCRATCH_BYTES / sizeof(double);
/* Most chunks: the grid's y dimension. */
constexpr int CHUNKS_MAX = 65535;
/* Widest column span one pass handles (at least one chunk each). */
constexpr int SPAN_COLS_MAX = (int)SCRATCH_DOUBLES;

/* The sum over the warp's lanes, the same bits in every lane (each step
 * adds two equal-order values, and addition commutes). */
__device__ double warp_sum(double v)
{
    for (unsigned o = WARP / 2; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__global__ void forward_kernel(float *out, float *rstd, const float *inp, const float *weight,
                               int N, int C, float eps)
{
    const unsigned lane = threadIdx.x % WARP;
    const size_t warps = (size_t)gridDim.x * ROWS_PER_BLOCK;
    for (size_t row = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP; row < (size_t)N;
         row += warps) {
        const float *x = inp + row * C;
        float *o = out + row * C;
        double ss = 0.0;
        for (int c = lane; c < C; c += WARP)
            ss += (double)(x[c] * x[c]);
        float rs = 1.0f / sqrtf((float)(warp_sum(ss) / C) + eps);
        for (int c = lane; c < C; c += WARP)
            o[c] = x[c] * rs * weight[c];
        if (lane == 0)
            rstd[row] = rs;
    }
}

/* dinp += the row gradient, one warp per row. */
__global__ void backward_rows_kernel(float *dinp, const float *dout, const float *inp,
                                     const float *weight, const float *rstd, int N, int C)
{
    const unsigned lane = threadIdx.x % WARP;
    const size_t warps = (size_t)gridDim.x * ROWS_PER_BLOCK;
    for (size_t row = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP; row < (size_t)N;
         row += warps) {
        const float *dy = dout + row * C, *x = inp + row * C;
        float *dx = dinp + row * C;
        const float rs = rstd[row];
        double s = 0.0;
        for (int c = lane; c < C; c += WARP)
            s += (double)(weight[c] * dy[c] * (x[c] * rs));
        float m = (float)(warp_sum(s) / C);
        for (int c = lane; c < C; c += WARP)
            dx[c] += (weight[c] * dy[c] - x[c] * rs * m) * rs;
    }
}

/* Partial column sums of xhat*dout over the rows of chunk blockIdx.y, for
 * the columns [c0, c0 + span): block (x, y) writes pw[y * span + j] for its
 * TILE_COLS columns j. */
__global__ void weight_partials_kernel(double *pw, const float *dout, const float *inp,
                                       const float *rstd, int N, int C, int c0, int span,
                                       int chunk_rows)
{
    __shared__ double sw[ROW_LANES][TILE_COLS];
    const unsigned tx = threadIdx.x, ty = threadIdx.y;
    const int j = (int)(blockIdx.x * TILE_COLS + tx);
    const int r0 = (int)blockIdx.y * chunk_rows;
    const int r1 = r0 + chunk_rows < N ? r0 + chunk_rows : N;
    double acc = 0.0;
    if (j < span) {
        const size_t c = (size_t)(c0 + j);
        for (int i = r0 + (int)ty; i < r1; i += ROW_LANES)
            acc += (double)(inp[(size_t)i * C + c] * rstd[i] * dout[(size_t)i * C + c]);
    }
    sw[ty][tx] = acc;
    __syncthreads();
    if (ty != 0 || j >= span)
        return;
    for (unsigned k = 1; k < ROW_LANES; k++)
        acc += sw[k][tx];
    pw[(size_t)blockIdx.y * span + j] = acc;
}

/* dweight[c0 + j] += the sum of column j's chunk partials, in chunk order. */
__global__ void weight_finish_kernel(float *dweight, const double *pw, int c0, int span, int chunks)
{
    const int j = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (j >= span)
        return;
    double acc = 0.0;
    for (int k = 0; k < chunks; k++)
        acc += pw[(size_t)k * span + j];
    dweight[c0 + j] += (float)acc;
}

/* dweight for the columns [c0, c0 + span); N >= 1. */
zt_status weight_span(const struct ops_backend *self, float *dweight, const float *dout,
                      const float *inp, const float *rstd, int N, int C, int c0, int span)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    const size_t fit = SCRATCH_DOUBLES / (size_t)span;
    const int max_chunks = fit < (size_t)CHUNKS_MAX ? (int)fit : CHUNKS_MAX;
    const size_t want = ((size_t)N + CHUNK_ROWS_MIN - 1) / CHUNK_ROWS_MIN;
    int chunks = want < (size_t)max_chunks ? (int)want : max_chunks;
    /* Rows per chunk, then the chunks that leaves (none of them empty). */
    const int chunk_rows = (int)(((size_t)N + chunks - 1) / chunks);
    chunks = (int)(((size_t)N + chunk_rows - 1) / chunk_rows);
    double *pw = (double *)ctx->scratch;

    dim3 grid((unsigned)((span + TILE_COLS - 1) / TILE_COLS), (unsigned)chunks);
    weight_partials_kernel<<<grid, dim3(TILE_COLS, ROW_LANES), 0, ctx->stream>>>(
        pw, dout, inp, rstd, N, C, c0, span, chunk_rows);
    CUDA_LAUNCHED();
    weight_finish_kernel<<<cuda_blocks((size_t)span, 256), 256, 0, ctx->stream>>>(dweight, pw, c0,
                                                                                  span, chunks);
    CUDA_LAUNCHED();
    return ZT_OK;
}

} // namespace

zt_status cuda_rmsnorm_forward(const struct ops_backend *self, float *out, float *rstd,
                               const float *inp, const float *weight, int N, int C, float eps)
{
    forward_kernel<<<cuda_blocks(N > 0 ? (size_t)N : 0, ROWS_PER_BLOCK), ROW_THREADS, 0,
                     cuda_ctx_of(self)->stream>>>(out, rstd, inp, weight, N, C, eps);
    CUDA_LAUNCHED();
    return ZT_OK;
}

zt_status cuda_rmsnorm_backward(const struct ops_backend *self, float *dinp, float *dweight,
                                const float *dout, const float *inp, const float *weight,
                                const float *rstd, int N, int C)
{
    backward_rows_kernel<<<cuda_blocks(N > 0 ? (size_t)N : 0, ROWS_PER_BLOCK), ROW_THREADS, 0,
                           cuda_ctx_of(self)->stream>>>(dinp, dout, inp, weight, rstd, N, C);
    CUDA_LAUNCHED();
    if (!dweight || N <= 0)
        return ZT_OK;
    for (int c0 = 0; c0 < C; c0 += SPAN_COLS_MAX) {
        int span = C - c0 < SPAN_COLS_MAX ? C - c0 : SPAN_COLS_MAX;
        ZT_TRY(weight_span(self, dweight, dout, inp, rstd, N, C, c0, span));
    }
    return ZT_OK;
}
