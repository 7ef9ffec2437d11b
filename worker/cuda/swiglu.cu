/* worker/cuda/swiglu.cu — SwiGLU, out = silu(gate) * up, on the fused
 * gate/up buffer of the Llama MLP, on the GPU; the CPU's is
 * worker/cpu/swiglu.c.
 *
 * Each output element reads its gate and up values once and writes once, so
 * the op is bound by memory: one thread per element of out[N,I] (a row's
 * gate and up halves sit I floats apart in gu[N,2I]), consecutive threads on
 * consecutive columns so that the reads of both halves and the write
 * coalesce, in a grid-stride loop over the flattened index. No element
 * depends on another, so results repeat bit for bit.
 *
 * The arithmetic is the CPU's: silu(g) = g / (1 + e^-g) and, in the
 * backward, silu'(g) = s (1 + g (1 - s)) with 1 - s taken as e^-g * s (no
 * cancellation; the product is formed before g multiplies it, since g e^-g
 * alone overflows for g < -88). The exponential is expf with its argument
 * clamped to [-87, 88] as the CPU's cpu_expf clamps: unclamped, e^-g is inf
 * for g < -88.7 and e * s is inf * 0 = NaN in the backward.
 */
#include "worker/cuda/cuda_impl.h"

namespace
{

constexpr unsigned THREADS = 256;

/* e^x with x clamped to [-87, 88] (a NaN passes through), as cpu_expf. */
__device__ float clamped_expf(float x)
{
    x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
    return expf(x);
}

__global__ void swiglu_forward_kernel(float *out, const float *gu, size_t n, size_t I)
{
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        size_t row = k / I, i = k - row * I;
        const float *gate = gu + row * 2 * I;
        float g = gate[i];
        out[k] = g / (1.0f + clamped_expf(-g)) * gate[I + i];
    }
}

__global__ void swiglu_backward_kernel(float *dgu, const float *dout, const float *gu, size_t n,
                                       size_t I)
{
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        size_t row = k / I, i = k - row * I;
        const float *gate = gu + row * 2 * I;
        float *dgate = dgu + row * 2 * I;
        float g = gate[i], up = gate[I + i], d = dout[k];
        float e = clamped_expf(-g);
        float s = 1.0f / (1.0f + e);
        float es = e * s; /* 1 - s */
        dgate[i] += d * up * s * (1.0f + g * es);
        dgate[I + i] += d * g * s;
    }
}

} // namespace

zt_status cuda_swiglu_forward(const struct ops_backend *self, float *out, const float *gu, int N,
                              int I)
{
    size_t n = N > 0 && I > 0 ? (size_t)N * (size_t)I : 0;
    swiglu_forward_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(self)->stream>>>(
        out, gu, n, I > 0 ? (size_t)I : 1);
    CUDA_LAUNCHED();
    return ZT_OK;
}

zt_status cuda_swiglu_backward(const struct ops_backend *self, float *dgu, const float *dout,
                               const float *gu, int N, int I)
{
    size_t n = N > 0 && I > 0 ? (size_t)N * (size_t)I : 0;
    swiglu_backward_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(self)->stream>>>(
        dgu, dout, gu, n, I > 0 ? (size_t)I : 1);
    CUDA_LAUNCHED();
    return ZT_OK;
}
