/* worker/cuda/layernorm.cu — LayerNorm over rows of C floats on the GPU
 * (eps 1e-5, biased variance); the CPU's is worker/cpu/layernorm.c.
 *
 * Rows are independent and a few thousand floats at most, so one warp takes
 * a row: its lanes stride the row 32 floats apart (each pass coalesces) and
 * meet in a shuffle reduction; a row read three times (mean, variance as
 * the mean of squared deviations, output) is read from DRAM once and then
 * from cache. The row sums are kept in double: the lanes' order cannot be
 * the CPU's (its vector lanes differ by build anyway), and in double the
 * order no longer shows at the float results. Each lane's partial and the
 * shuffle tree are fixed by C alone, so results repeat bit for bit. The
 * statistics themselves are rounded to float and combined exactly as the
 * CPU does (m = s / C, rstd = 1 / sqrtf(v / C + eps)).
 *
 * The backward's dinp is per row the same way (sums of w*dout and
 * w*dout*xhat, then the row). dweight and dbias are column sums over all N
 * rows, which a thread per column would do in N serial steps with only C
 * threads in flight. Instead a grid of (32-column tile) x (row chunk)
 * blocks writes one double partial per column and chunk into ctx->scratch,
 * each block's 8 row lanes combined in a fixed order, and a second kernel
 * adds each column's partials in chunk order and the total, rounded to
 * float, into dweight and dbias once (as the CPU adds its block sums once).
 * The chunk count depends only on N and C, never on the device, so the
 * bits are the same on every run and every GPU. Columns beyond what the
 * scratch holds are done in successive column spans.
 */
#include "worker/cuda/cuda_impl.h"

namespace
{

constexpr float LN_EPS = 1e-5f;

constexpr unsigned WARP = 32;
constexpr unsigned ROW_THREADS = 256; /* 8 rows (warps) per block */
constexpr unsigned ROWS_PER_BLOCK = ROW_THREADS / WARP;

/* Parameter gradients: a block is TILE_COLS columns by ROW_LANES rows. */
constexpr unsigned TILE_COLS = 32;
constexpr unsigned ROW_LANES = 8;
/* Fewest rows per chunk: below it a block's launch outweighs its work. */
constexpr int CHUNK_ROWS_MIN = 32;
/* Doubles of scratch: dweight's partials then dbias's, chunk-major. */
constexpr size_t SCRATCH_DOUBLES = CUDA_SCRATCH_BYTES / sizeof(double);
/* Most chunks: the grid's y dimension. */
constexpr int CHUNKS_MAX = 65535;
/* Widest column span one pass handles (at least one chunk each). */
constexpr int SPAN_COLS_MAX = (int)(SCRATCH_DOUBLES / 2);

/* The sum over the warp's lanes, the same bits in every lane (each step
 * adds two equal-order values, and addition commutes). */
__device__ double warp_sum(double v)
{
    for (unsigned o = WARP / 2; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__global__ void forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                               const float *weight, const float *bias, int N, int C)
{
    const unsigned lane = threadIdx.x % WARP;
    const size_t warps = (size_t)gridDim.x * ROWS_PER_BLOCK;
    for (size_t row = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP; row < (size_t)N;
         row += warps) {
        const float *x = inp + row * C;
        float *o = out + row * C;
        double s = 0.0;
        for (int c = lane; c < C; c += WARP)
            s += x[c];
        float m = (float)(warp_sum(s) / C);
        double v = 0.0;
        for (int c = lane; c < C; c += WARP) {
            float d = x[c] - m;
            v += (double)(d * d);
        }
        float rs = 1.0f / sqrtf((float)(warp_sum(v) / C) + LN_EPS);
        for (int c = lane; c < C; c += WARP)
            o[c] = (x[c] - m) * rs * weight[c] + bias[c];
        if (lane == 0) {
            mean[row] = m;
            rstd[row] = rs;
        }
    }
}

/* dinp += the row gradient, one warp per row. */
__global__ void backward_rows_kernel(float *dinp, const float *dout, const float *inp,
                                     const float *weight, const float *mean, const float *rstd,
                                     int N, int C)
{
    const unsigned lane = threadIdx.x % WARP;
    const size_t warps = (size_t)gridDim.x * ROWS_PER_BLOCK;
    for (size_t row = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP; row < (size_t)N;
         row += warps) {
        const float *dy = dout + row * C, *x = inp + row * C;
        float *dx = dinp + row * C;
        const float m = mean[row], rs = rstd[row];
        double sum_g = 0.0, sum_gx = 0.0;
        for (int c = lane; c < C; c += WARP) {
            float g = weight[c] * dy[c];
            sum_g += g;
            sum_gx += (double)(g * (x[c] - m) * rs);
        }
        float mg = (float)(warp_sum(sum_g) / C), mgx = (float)(warp_sum(sum_gx) / C);
        for (int c = lane; c < C; c += WARP) {
            float xhat = (x[c] - m) * rs;
            dx[c] += (weight[c] * dy[c] - mg - xhat * mgx) * rs;
        }
    }
}

/* Partial column sums of xhat*dout and dout over the rows of chunk
 * blockIdx.y, for the columns [c0, c0 + span): block (x, y) writes
 * pw/pb[y * span + j] for its TILE_COLS columns j. */
__global__ void param_partials_kernel(double *pw, double *pb, const float *dout, const float *inp,
                                      const float *mean, const float *rstd, int N, int C, int c0,
                                      int span, int chunk_rows)
{
    __shared__ double sw[ROW_LANES][TILE_COLS], sb[ROW_LANES][TILE_COLS];
    const unsigned tx = threadIdx.x, ty = threadIdx.y;
    const int j = (int)(blockIdx.x * TILE_COLS + tx);
    const int r0 = (int)blockIdx.y * chunk_rows;
    const int r1 = r0 + chunk_rows < N ? r0 + chunk_rows : N;
    double aw = 0.0, ab = 0.0;
    if (j < span) {
        const size_t c = (size_t)(c0 + j);
        for (int i = r0 + (int)ty; i < r1; i += ROW_LANES) {
            float dy = dout[(size_t)i * C + c];
            aw += (double)((inp[(size_t)i * C + c] - mean[i]) * rstd[i] * dy);
            ab += dy;
        }
    }
    sw[ty][tx] = aw;
    sb[ty][tx] = ab;
    __syncthreads();
    if (ty != 0 || j >= span)
        return;
    for (unsigned k = 1; k < ROW_LANES; k++) {
        aw += sw[k][tx];
        ab += sb[k][tx];
    }
    pw[(size_t)blockIdx.y * span + j] = aw;
    pb[(size_t)blockIdx.y * span + j] = ab;
}

/* dweight/dbias[c0 + j] += the sum of column j's chunk partials, in chunk
 * order. */
__global__ void param_finish_kernel(float *dweight, float *dbias, const double *pw,
                                    const double *pb, int c0, int span, int chunks)
{
    const int j = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (j >= span)
        return;
    double aw = 0.0, ab = 0.0;
    for (int k = 0; k < chunks; k++) {
        aw += pw[(size_t)k * span + j];
        ab += pb[(size_t)k * span + j];
    }
    dweight[c0 + j] += (float)aw;
    dbias[c0 + j] += (float)ab;
}

/* The parameter gradients for the columns [c0, c0 + span). */
zt_status param_span(const struct ops_backend *self, float *dweight, float *dbias,
                     const float *dout, const float *inp, const float *mean, const float *rstd,
                     int N, int C, int c0, int span)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    const size_t fit = SCRATCH_DOUBLES / (2 * (size_t)span);
    const int max_chunks = fit < (size_t)CHUNKS_MAX ? (int)fit : CHUNKS_MAX;
    const size_t want = ((size_t)N + CHUNK_ROWS_MIN - 1) / CHUNK_ROWS_MIN;
    int chunks = want < (size_t)max_chunks ? (int)want : max_chunks;
    /* Rows per chunk, then the chunks that leaves (none of them empty). */
    const int chunk_rows = (int)(((size_t)N + chunks - 1) / chunks);
    chunks = (int)(((size_t)N + chunk_rows - 1) / chunk_rows);
    double *pw = (double *)ctx->scratch, *pb = pw + (size_t)chunks * span;

    dim3 grid((unsigned)((span + TILE_COLS - 1) / TILE_COLS), (unsigned)chunks);
    param_partials_kernel<<<grid, dim3(TILE_COLS, ROW_LANES), 0, ctx->stream>>>(
        pw, pb, dout, inp, mean, rstd, N, C, c0, span, chunk_rows);
    CUDA_LAUNCHED();
    param_finish_kernel<<<cuda_blocks((size_t)span, 256), 256, 0, ctx->stream>>>(
        dweight, dbias, pw, pb, c0, span, chunks);
    CUDA_LAUNCHED();
    return ZT_OK;
}

} // namespace

zt_status cuda_layernorm_forward(const struct ops_backend *self, float *out, float *mean,
                                 float *rstd, const float *inp, const float *weight,
                                 const float *bias, int N, int C)
{
    forward_kernel<<<cuda_blocks(N > 0 ? (size_t)N : 0, ROWS_PER_BLOCK), ROW_THREADS, 0,
                     cuda_ctx_of(self)->stream>>>(out, mean, rstd, inp, weight, bias, N, C);
    CUDA_LAUNCHED();
    return ZT_OK;
}

zt_status cuda_layernorm_backward(const struct ops_backend *self, float *dinp, float *dweight,
                                  float *dbias, const float *dout, const float *inp,
                                  const float *weight, const float *mean, const float *rstd, int N,
                                  int C)
{
    backward_rows_kernel<<<cuda_blocks(N > 0 ? (size_t)N : 0, ROWS_PER_BLOCK), ROW_THREADS, 0,
                           cuda_ctx_of(self)->stream>>>(dinp, dout, inp, weight, mean, rstd, N, C);
    CUDA_LAUNCHED();
    if (!dweight || N <= 0)
        return ZT_OK;
    for (int c0 = 0; c0 < C; c0 += SPAN_COLS_MAX) {
        int span = C - c0 < SPAN_COLS_MAX ? C - c0 : SPAN_COLS_MAX;
        ZT_TRY(param_span(self, dweight, dbias, dout, inp, mean, rstd, N, C, c0, span));
    }
    return ZT_OK;
}
