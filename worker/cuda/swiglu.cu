/* worker/cuda/swiglu.cu — SwiGLU, out = silu(gate) * up, on the fused
 * gate/up buffer of the Llama MLP, on the GPU; the CPU's is
 * worker/cpu/swiglu.c.
 *
 * Each output element reads its gate and up values once and writes once, so
 * the op is bound by memory: one thread per element of out[N,I] (a row's
 * gate and up halves sit I elements apart in gu[N,2I]), consecutive threads
 * on consecutive columns so that the reads of both halves and the write
 * coalesce, in a grid-stride loop over the flattened index. The kernels are
 * templates over the element type (elem.cuh): fp32 inside, each stored
 * value rounded once. No element
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
#include "worker/cuda/elem.cuh"

namespace
{

using elem::f32;
using elem::round_to;

constexpr unsigned THREADS = 256;

/* e^x with x clamped to [-87, 88] (a NaN passes through), as cpu_expf. */
__device__ float clamped_expf(float x)
{
    x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
    return expf(x);
}

template <class E> __global__ void swiglu_forward_kernel(E *out, const E *gu, size_t n, size_t I)
{
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        size_t row = k / I, i = k - row * I;
        const E *gate = gu + row * 2 * I;
        float g = f32(gate[i]);
        out[k] = round_to<E>(g / (1.0f + clamped_expf(-g)) * f32(gate[I + i]));
    }
}

template <class E>
__global__ void swiglu_backward_kernel(E *dgu, const E *dout, const E *gu, size_t n, size_t I)
{
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        size_t row = k / I, i = k - row * I;
        const E *gate = gu + row * 2 * I;
        E *dgate = dgu + row * 2 * I;
        float g = f32(gate[i]), up = f32(gate[I + i]), d = f32(dout[k]);
        float e = clamped_expf(-g);
        float s = 1.0f / (1.0f + e);
        float es = e * s; /* 1 - s */
        dgate[i] = round_to<E>(f32(dgate[i]) + d * up * s * (1.0f + g * es));
        dgate[I + i] = round_to<E>(f32(dgate[I + i]) + d * g * s);
    }
}

} // namespace

zt_status cuda_swiglu_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                              const void *gu, int N, int I)
{
    size_t n = N > 0 && I > 0 ? (size_t)N * (size_t)I : 0;
    return elem::with_type(t, [&](auto tag) {
        using E = typename decltype(tag)::type;
        swiglu_forward_kernel<E>
            <<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(self)->stream>>>(
                static_cast<E *>(out), static_cast<const E *>(gu), n, I > 0 ? (size_t)I : 1);
        CUDA_LAUNCHED();
        return ZT_OK;
    });
}

zt_status cuda_swiglu_backward(const struct ops_backend *self, enum zt_dtype t, void *dgu,
                               const void *dout, const void *gu, int N, int I)
{
    size_t n = N > 0 && I > 0 ? (size_t)N * (size_t)I : 0;
    return elem::with_type(t, [&](auto tag) {
        using E = typename decltype(tag)::type;
        swiglu_backward_kernel<E>
            <<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(self)->stream>>>(
                static_cast<E *>(dgu), static_cast<const E *>(dout), static_cast<const E *>(gu), n,
                I > 0 ? (size_t)I : 1);
        CUDA_LAUNCHED();
        return ZT_OK;
    });
}
