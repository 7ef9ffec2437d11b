/* worker/cuda/rmsnorm.cu — RMSNorm over rows of C floats on the GPU (the
 * Llama family's norm: no mean subtraction, no bias); the CPU's is
 * worker/cpu/rmsnorm.c.
 *
 * The shapes are layernorm.cu's, for the same reasons, and so are the
 * element types (templates computing in fp32, rounding each stored value
 * once). One warp per row:
 * the lanes stride the row 32 floats apart (coalesced passes) and meet in a
 * shuffle reduction; the mean square is summed in double, because the
 * lanes' order cannot be the CPU's and in double it no longer shows at the
 * float result, and it is fixed by C alone, so the bits repeat. rstd is
 * then formed in float as the CPU does, 1 / sqrtf(ss / C + eps), and the
 * output is (x * rstd) * w in that order (Hugging Face's LlamaRMSNorm).
 *
 * The backward's dinp is per row: rstd * (g - xhat * mean(g * xhat)) with
 * xhat = x * rstd, g = w * dout, the row sum again in double. dweight is a
 * column sum of dout * xhat over all N rows, reduce.cuh's column_sums_add
 * as in layernorm.cu: a grid of (32-column tile) x (row chunk) blocks
 * writes one double partial per column and chunk into ctx->scratch (the
 * block's 8 row lanes combined in a fixed order), then a second kernel adds
 * each column's partials in chunk order and adds the total, rounded to
 * float, into dweight once. The chunk count depends only on N and C, never
 * on the device, so the bits are the same on every run; columns beyond
 * what the scratch holds go in successive spans.
 */
#include "worker/cuda/cuda_impl.h"
#include "worker/cuda/elem.cuh"
#include "worker/cuda/reduce.cuh"

namespace
{

using elem::f32;
using elem::round_to;
using reduce::WARP;
using reduce::warp_sum;

constexpr unsigned ROW_THREADS = 256; /* 8 rows (warps) per block */
constexpr unsigned ROWS_PER_BLOCK = ROW_THREADS / WARP;

template <class E>
__global__ void forward_kernel(E *out, float *rstd, const E *inp, const E *weight, int N, int C,
                               float eps)
{
    const unsigned lane = threadIdx.x % WARP;
    const size_t warps = (size_t)gridDim.x * ROWS_PER_BLOCK;
    for (size_t row = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP; row < (size_t)N;
         row += warps) {
        const E *x = inp + row * C;
        E *o = out + row * C;
        double ss = 0.0;
        for (int c = lane; c < C; c += WARP) {
            const float xc = f32(x[c]);
            ss += (double)(xc * xc);
        }
        float rs = 1.0f / sqrtf((float)(warp_sum(ss) / C) + eps);
        for (int c = lane; c < C; c += WARP)
            o[c] = round_to<E>(f32(x[c]) * rs * f32(weight[c]));
        if (lane == 0)
            rstd[row] = rs;
    }
}

/* dinp += the row gradient, one warp per row. */
template <class E>
__global__ void backward_rows_kernel(E *dinp, const E *dout, const E *inp, const E *weight,
                                     const float *rstd, int N, int C)
{
    const unsigned lane = threadIdx.x % WARP;
    const size_t warps = (size_t)gridDim.x * ROWS_PER_BLOCK;
    for (size_t row = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP; row < (size_t)N;
         row += warps) {
        const E *dy = dout + row * C, *x = inp + row * C;
        E *dx = dinp + row * C;
        const float rs = rstd[row];
        double s = 0.0;
        for (int c = lane; c < C; c += WARP)
            s += (double)(f32(weight[c]) * f32(dy[c]) * (f32(x[c]) * rs));
        float m = (float)(warp_sum(s) / C);
        for (int c = lane; c < C; c += WARP)
            dx[c] =
                round_to<E>(f32(dx[c]) + (f32(weight[c]) * f32(dy[c]) - f32(x[c]) * rs * m) * rs);
    }
}

/* The term of dweight at row i, column c: xhat * dout. */
template <class E> struct weight_term {
    const E *dout, *inp;
    const float *rstd;
    int C;
    __device__ void operator()(int i, size_t c, float t[1]) const
    {
        t[0] = f32(inp[(size_t)i * C + c]) * rstd[i] * f32(dout[(size_t)i * C + c]);
    }
};

} // namespace

zt_status cuda_rmsnorm_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                               float *rstd, const void *inp, const void *weight, int N, int C,
                               float eps)
{
    return elem::with_type(t, [&](auto tag) {
        using E = typename decltype(tag)::type;
        forward_kernel<E><<<cuda_blocks(N > 0 ? (size_t)N : 0, ROWS_PER_BLOCK), ROW_THREADS, 0,
                            cuda_ctx_of(self)->stream>>>(static_cast<E *>(out), rstd,
                                                         static_cast<const E *>(inp),
                                                         static_cast<const E *>(weight), N, C, eps);
        CUDA_LAUNCHED();
        return ZT_OK;
    });
}

zt_status cuda_rmsnorm_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                                float *dweight, const void *dout, const void *inp,
                                const void *weight, const float *rstd, int N, int C)
{
    return elem::with_type(t, [&](auto tag) {
        using E = typename decltype(tag)::type;
        const E *dy = static_cast<const E *>(dout), *x = static_cast<const E *>(inp);
        backward_rows_kernel<E><<<cuda_blocks(N > 0 ? (size_t)N : 0, ROWS_PER_BLOCK), ROW_THREADS,
                                  0, cuda_ctx_of(self)->stream>>>(
            static_cast<E *>(dinp), dy, x, static_cast<const E *>(weight), rstd, N, C);
        CUDA_LAUNCHED();
        if (!dweight || N <= 0)
            return ZT_OK;
        return reduce::column_sums_add<1>(cuda_ctx_of(self), reduce::column_outs<1>{{dweight}},
                                          weight_term<E>{dy, x, rstd, C}, N, C);
    });
}
