/* worker/cuda/layernorm.cu — LayerNorm over rows of C floats on the GPU
 * (eps 1e-5, biased variance); the CPU's is worker/cpu/layernorm.c.
 *
 * Rows are independent and a few thousand values at most, so one warp takes
 * a row (of fp32, bf16 or fp16: the kernels are templates over the element
 * type, elem.cuh, computing in fp32 and rounding each stored value once): its lanes stride the row
 * 32 floats apart (each pass coalesces) and meet in a shuffle reduction; a row read three times
 * (mean, variance as the mean of squared deviations, output) is read from DRAM once and then from
 * cache. The row sums are kept in double: the lanes' order cannot be the CPU's (its vector lanes
 * differ by build anyway), and in double the order no longer shows at the float results. Each
 * lane's partial and the shuffle tree are fixed by C alone, so results repeat bit for bit. The
 * statistics themselves are rounded to float and combined exactly as the
 * CPU does (m = s / C, rstd = 1 / sqrtf(v / C + eps)).
 *
 * The backward's dinp is per row the same way (sums of w*dout and
 * w*dout*xhat, then the row). dweight and dbias are column sums over all N
 * rows, which a thread per column would do in N serial steps with only C
 * threads in flight. Instead they are reduce.cuh's column_sums_add: a grid
 * of (32-column tile) x (row chunk) blocks writes one double partial per
 * column and chunk into ctx->scratch, each block's 8 row lanes combined in
 * a fixed order, and a second kernel adds each column's partials in chunk
 * order and the total, rounded to float, into dweight and dbias once (as
 * the CPU adds its block sums once). The chunk count depends only on N and
 * C, never on the device, so the bits are the same on every run and every
 * GPU. Columns beyond what the scratch holds are done in successive column
 * spans.
 */
#include "worker/cuda/cuda_impl.h"
#include "worker/cuda/elem.cuh"
#include "worker/cuda/reduce.cuh"

namespace
{

constexpr float LN_EPS = 1e-5f;

using elem::f32;
using elem::round_to;
using reduce::WARP;
using reduce::warp_sum;

constexpr unsigned ROW_THREADS = 256; /* 8 rows (warps) per block */
constexpr unsigned ROWS_PER_BLOCK = ROW_THREADS / WARP;

template <class E>
__global__ void forward_kernel(E *out, float *mean, float *rstd, const E *inp, const E *weight,
                               const E *bias, int N, int C)
{
    const unsigned lane = threadIdx.x % WARP;
    const size_t warps = (size_t)gridDim.x * ROWS_PER_BLOCK;
    for (size_t row = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP; row < (size_t)N;
         row += warps) {
        const E *x = inp + row * C;
        E *o = out + row * C;
        double s = 0.0;
        for (int c = lane; c < C; c += WARP)
            s += f32(x[c]);
        float m = (float)(warp_sum(s) / C);
        double v = 0.0;
        for (int c = lane; c < C; c += WARP) {
            float d = f32(x[c]) - m;
            v += (double)(d * d);
        }
        float rs = 1.0f / sqrtf((float)(warp_sum(v) / C) + LN_EPS);
        for (int c = lane; c < C; c += WARP)
            o[c] = round_to<E>((f32(x[c]) - m) * rs * f32(weight[c]) + f32(bias[c]));
        if (lane == 0) {
            mean[row] = m;
            rstd[row] = rs;
        }
    }
}

/* dinp += the row gradient, one warp per row. */
template <class E>
__global__ void backward_rows_kernel(E *dinp, const E *dout, const E *inp, const E *weight,
                                     const float *mean, const float *rstd, int N, int C)
{
    const unsigned lane = threadIdx.x % WARP;
    const size_t warps = (size_t)gridDim.x * ROWS_PER_BLOCK;
    for (size_t row = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP; row < (size_t)N;
         row += warps) {
        const E *dy = dout + row * C, *x = inp + row * C;
        E *dx = dinp + row * C;
        const float m = mean[row], rs = rstd[row];
        double sum_g = 0.0, sum_gx = 0.0;
        for (int c = lane; c < C; c += WARP) {
            float g = f32(weight[c]) * f32(dy[c]);
            sum_g += g;
            sum_gx += (double)(g * (f32(x[c]) - m) * rs);
        }
        float mg = (float)(warp_sum(sum_g) / C), mgx = (float)(warp_sum(sum_gx) / C);
        for (int c = lane; c < C; c += WARP) {
            float xhat = (f32(x[c]) - m) * rs;
            dx[c] = round_to<E>(f32(dx[c]) + (f32(weight[c]) * f32(dy[c]) - mg - xhat * mgx) * rs);
        }
    }
}

/* The terms of dweight and dbias at row i, column c: xhat * dout and dout. */
template <class E> struct param_terms {
    const E *dout, *inp;
    const float *mean, *rstd;
    int C;
    __device__ void operator()(int i, size_t c, float t[2]) const
    {
        const float dy = f32(dout[(size_t)i * C + c]);
        t[0] = (f32(inp[(size_t)i * C + c]) - mean[i]) * rstd[i] * dy;
        t[1] = dy;
    }
};

} // namespace

zt_status cuda_layernorm_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                 float *mean, float *rstd, const void *inp, const void *weight,
                                 const void *bias, int N, int C)
{
    return elem::with_type(t, [&](auto tag) {
        using E = typename decltype(tag)::type;
        forward_kernel<E><<<cuda_blocks(N > 0 ? (size_t)N : 0, ROWS_PER_BLOCK), ROW_THREADS, 0,
                            cuda_ctx_of(self)->stream>>>(
            static_cast<E *>(out), mean, rstd, static_cast<const E *>(inp),
            static_cast<const E *>(weight), static_cast<const E *>(bias), N, C);
        CUDA_LAUNCHED();
        return ZT_OK;
    });
}

zt_status cuda_layernorm_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                                  float *dweight, float *dbias, const void *dout, const void *inp,
                                  const void *weight, const float *mean, const float *rstd, int N,
                                  int C)
{
    return elem::with_type(t, [&](auto tag) {
        using E = typename decltype(tag)::type;
        const E *dy = static_cast<const E *>(dout), *x = static_cast<const E *>(inp);
        backward_rows_kernel<E><<<cuda_blocks(N > 0 ? (size_t)N : 0, ROWS_PER_BLOCK), ROW_THREADS,
                                  0, cuda_ctx_of(self)->stream>>>(
            static_cast<E *>(dinp), dy, x, static_cast<const E *>(weight), mean, rstd, N, C);
        CUDA_LAUNCHED();
        if (!dweight || N <= 0)
            return ZT_OK;
        return reduce::column_sums_add<2>(cuda_ctx_of(self),
                                          reduce::column_outs<2>{{dweight, dbias}},
                                          param_terms<E>{dy, x, mean, rstd, C}, N, C);
    });
}
