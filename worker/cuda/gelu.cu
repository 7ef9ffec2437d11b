/* worker/cuda/gelu.cu — GELU (tanh approximation), the residual add and the
 * elementwise product on the GPU; the CPU's is worker/cpu/gelu.c.
 *
 * Every op here reads and writes each element once, so it is bound by
 * memory: one thread per element, consecutive threads on consecutive
 * elements (coalesced), in a grid-stride loop so that any N fits the capped
 * grid. Each kernel is a template over the element type (elem.cuh): it
 * widens what it reads, computes in fp32 and rounds what it stores once.
 * No element depends on another, so the results repeat bit for bit. The
 * pointers carry no __restrict__: the model adds residuals in place
 * (out == a), which is safe because each thread reads its element before
 * writing it.
 *
 * GELU takes the CPU's form, not tanhf: 0.5 (1 + tanh(u)) is computed as
 * the logistic 1 / (1 + e^(-2u)), which has no cancellation where
 * 1 + tanh(u) loses every digit (u < -9), and the backward reuses the same
 * exponential (sech^2(u) = 4 sig (1 - sig)). The exponential is expf (not
 * the fast __expf) with its argument clamped to [-87, 88] as the CPU's
 * cpu_expf clamps: without it e^(-2u) overflows to inf for u < -44 and the
 * backward's e * sig becomes inf * 0 = NaN, where the CPU gives 0.
 */
#include "worker/cuda/cuda_impl.h"
#include "worker/cuda/elem.cuh"

namespace
{

using elem::f32;
using elem::round_to;

constexpr unsigned THREADS = 256;

constexpr float GELU_S = 0.7978845608028654f; /* sqrt(2 / pi) */
constexpr float GELU_A = 0.044715f;

/* e^x with x clamped to [-87, 88] (a NaN passes through), as cpu_expf. */
__device__ float clamped_expf(float x)
{
    x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
    return expf(x);
}

template <class E> __global__ void gelu_forward_kernel(E *out, const E *inp, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = f32(inp[i]);
        float u = GELU_S * (x + GELU_A * x * x * x);
        out[i] = round_to<E>(x / (1.0f + clamped_expf(-2.0f * u)));
    }
}

template <class E>
__global__ void gelu_backward_kernel(E *dinp, const E *inp, const E *dout, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = f32(inp[i]);
        float u = GELU_S * (x + GELU_A * x * x * x);
        float du = GELU_S * (1.0f + 3.0f * GELU_A * x * x);
        float e = clamped_expf(-2.0f * u);
        float sig = 1.0f / (1.0f + e); /* 0.5 (1 + tanh u) */
        float es = e * sig;            /* 1 - sig */
        /* d/dx = sig + 0.5 x sech^2(u) du, with sech^2 = 4 sig (1 - sig). */
        dinp[i] = round_to<E>(f32(dinp[i]) + (sig + 2.0f * x * du * es * sig) * f32(dout[i]));
    }
}

/* The binary pointwise ops: out = a + b, out = a * b, out += a * b. */
struct add_op {
    __device__ float operator()(float o, float a, float b) const
    {
        (void)o;
        return a + b;
    }
};
struct mul_op {
    __device__ float operator()(float o, float a, float b) const
    {
        (void)o;
        return a * b;
    }
};
struct mul_acc_op {
    __device__ float operator()(float o, float a, float b) const
    {
        return o + a * b;
    }
};

/* out[i] = op(out[i], a[i], b[i]), out read only where the op reads it
 * (`load`): a forward's out is not yet written, and may be a or b. */
template <class E, class Op, bool LOAD>
__global__ void binary_kernel(E *out, const E *a, const E *b, size_t n, Op op)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = round_to<E>(op(LOAD ? f32(out[i]) : 0.0f, f32(a[i]), f32(b[i])));
}

/* Launches binary_kernel over N elements of t. */
template <class Op, bool LOAD>
zt_status binary(const struct ops_backend *self, enum zt_dtype t, void *out, const void *a,
                 const void *b, int N)
{
    const size_t n = N > 0 ? (size_t)N : 0;
    return elem::with_type(t, [&](auto tag) {
        using E = typename decltype(tag)::type;
        binary_kernel<E, Op, LOAD>
            <<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(self)->stream>>>(
                static_cast<E *>(out), static_cast<const E *>(a), static_cast<const E *>(b), n,
                Op{});
        CUDA_LAUNCHED();
        return ZT_OK;
    });
}

} // namespace

zt_status cuda_gelu_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                            const void *inp, int N)
{
    const size_t n = N > 0 ? (size_t)N : 0;
    return elem::with_type(t, [&](auto tag) {
        using E = typename decltype(tag)::type;
        gelu_forward_kernel<E><<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(self)->stream>>>(
            static_cast<E *>(out), static_cast<const E *>(inp), n);
        CUDA_LAUNCHED();
        return ZT_OK;
    });
}

zt_status cuda_gelu_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                             const void *inp, const void *dout, int N)
{
    const size_t n = N > 0 ? (size_t)N : 0;
    return elem::with_type(t, [&](auto tag) {
        using E = typename decltype(tag)::type;
        gelu_backward_kernel<E><<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(self)->stream>>>(
            static_cast<E *>(dinp), static_cast<const E *>(inp), static_cast<const E *>(dout), n);
        CUDA_LAUNCHED();
        return ZT_OK;
    });
}

zt_status cuda_residual_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                const void *a, const void *b, int N)
{
    return binary<add_op, false>(self, t, out, a, b, N);
}

zt_status cuda_mul_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                           const void *a, const void *b, int N)
{
    return binary<mul_op, false>(self, t, out, a, b, N);
}

zt_status cuda_mul_backward(const struct ops_backend *self, enum zt_dtype t, void *da,
                            const void *b, const void *dout, int N)
{
    return binary<mul_acc_op, true>(self, t, da, b, dout, N);
}
