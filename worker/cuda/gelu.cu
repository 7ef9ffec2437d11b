/* worker/cuda/gelu.cu — GELU (tanh approximation), the residual add and the
 * elementwise product on the GPU; the CPU's is worker/cpu/gelu.c.
 *
 * Every op here reads and writes each element once, so it is bound by
 * memory: one thread per element, consecutive threads on consecutive floats
 * (coalesced), in a grid-stride loop so that any N fits the capped grid.
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

namespace
{

constexpr unsigned THREADS = 256;

constexpr float GELU_S = 0.7978845608028654f; /* sqrt(2 / pi) */
constexpr float GELU_A = 0.044715f;

/* e^x with x clamped to [-87, 88] (a NaN passes through), as cpu_expf. */
__device__ float clamped_expf(float x)
{
    x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
    return expf(x);
}

__global__ void gelu_forward_kernel(float *out, const float *inp, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = inp[i];
        float u = GELU_S * (x + GELU_A * x * x * x);
        out[i] = x / (1.0f + clamped_expf(-2.0f * u));
    }
}

__global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = inp[i];
        float u = GELU_S * (x + GELU_A * x * x * x);
        float du = GELU_S * (1.0f + 3.0f * GELU_A * x * x);
        float e = clamped_expf(-2.0f * u);
        float sig = 1.0f / (1.0f + e); /* 0.5 (1 + tanh u) */
        float es = e * sig;            /* 1 - sig */
        /* d/dx = sig + 0.5 x sech^2(u) du, with sech^2 = 4 sig (1 - sig). */
        dinp[i] += (sig + 2.0f * x * du * es * sig) * dout[i];
    }
}

__global__ void residual_kernel(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

__global__ void mul_kernel(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] * b[i];
}

__global__ void mul_backward_kernel(float *da, const float *b, const float *dout, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        da[i] += b[i] * dout[i];
}

} // namespace

zt_status cuda_gelu_forward(const struct ops_backend *self, float *out, const float *inp, int N)
{
    size_t n = N > 0 ? (size_t)N : 0;
    gelu_forward_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(self)->stream>>>(out,
                                                                                            inp, n);
    CUDA_LAUNCHED();
    return ZT_OK;
}

zt_status cuda_gelu_backward(const struct ops_backend *self, float *dinp, const float *inp,
                             const float *dout, int N)
{
    size_t n = N > 0 ? (size_t)N : 0;
    gelu_backward_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(self)->stream>>>(
        dinp, inp, dout, n);
    CUDA_LAUNCHED();
    return ZT_OK;
}

zt_status cuda_residual_forward(const struct ops_backend *self, float *out, const float *a,
                                const float *b, int N)
{
    size_t n = N > 0 ? (size_t)N : 0;
    residual_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(self)->stream>>>(out, a, b,
                                                                                        n);
    CUDA_LAUNCHED();
    return ZT_OK;
}

zt_status cuda_mul_forward(const struct ops_backend *self, float *out, const float *a,
                           const float *b, int N)
{
    size_t n = N > 0 ? (size_t)N : 0;
    mul_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(self)->stream>>>(out, a, b, n);
    CUDA_LAUNCHED();
    return ZT_OK;
}

zt_status cuda_mul_backward(const struct ops_backend *self, float *da, const float *b,
                            const float *dout, int N)
{
    size_t n = N > 0 ? (size_t)N : 0;
    mul_backward_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(self)->stream>>>(
        da, b, dout, n);
    CUDA_LAUNCHED();
    return ZT_OK;
}
