/* worker/cuda/rope.cu — rotary position embedding, in place, in Hugging
 * Face's "rotate half" layout, on the GPU; the CPU's is worker/cpu/rope.c.
 *
 * Column i of a head turns with column i + hs/2 by the angle of the
 * caller's cos/sin tables at (t, i); the backward is the rotation by the
 * opposite angle, the forward with sin negated, so one kernel serves both.
 *
 * Each pair is read and written once with four multiplies: the op is bound
 * by memory. One thread per pair (x1, x2), the flattened index running
 * over i fastest, then the head, then the row, so a warp's threads touch
 * consecutive floats of both halves of a head (two coalesced streams) and
 * the same consecutive entries of the tables. Under 16 bits a pair is
 * widened, rotated in fp32 and rounded once (elem.cuh); the tables are
 * fp32 whatever the type. Rows are row_stride elements
 * apart and only their first n_heads*hs columns are visited, so the columns
 * past them (the v of a fused q|k|v row) stay untouched. Each pair belongs
 * to one thread, so in-place updates need no synchronisation and results
 * repeat bit for bit.
 */
#include "worker/cuda/cuda_impl.h"
#include "worker/cuda/elem.cuh"

namespace
{

using elem::f32;
using elem::round_to;

constexpr unsigned THREADS = 256;

template <class E>
__global__ void rotate_kernel(E *x, const float *cos_t, const float *sin_t, float sign, size_t n,
                              int T, int n_heads, int hs, int row_stride)
{
    const size_t half = (size_t)(hs / 2);
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < n;
         p += (size_t)gridDim.x * blockDim.x) {
        size_t i = p % half, q = p / half;
        size_t h = q % (size_t)n_heads, r = q / (size_t)n_heads;
        size_t t = r % (size_t)T;
        E *x1 = x + r * (size_t)row_stride + h * (size_t)hs, *x2 = x1 + half;
        float c = cos_t[t * half + i], s = sign * sin_t[t * half + i];
        float a = f32(x1[i]), b = f32(x2[i]);
        x1[i] = round_to<E>(a * c - b * s);
        x2[i] = round_to<E>(b * c + a * s);
    }
}

zt_status rotate_rows(const struct ops_backend *self, enum zt_dtype t, void *x, const float *cos_t,
                      const float *sin_t, float sign, int B, int T, int n_heads, int hs,
                      int row_stride)
{
    ZT_ASSERT(hs > 0 && hs % 2 == 0 && n_heads >= 0 && n_heads * hs <= row_stride);
    size_t n = B > 0 && T > 0 ? (size_t)B * (size_t)T * (size_t)n_heads * (size_t)(hs / 2) : 0;
    return elem::with_type(t, [&](auto tag) {
        using E = typename decltype(tag)::type;
        rotate_kernel<E><<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(self)->stream>>>(
            static_cast<E *>(x), cos_t, sin_t, sign, n, T, n_heads, hs, row_stride);
        CUDA_LAUNCHED();
        return ZT_OK;
    });
}

} // namespace

zt_status cuda_rope_forward(const struct ops_backend *self, enum zt_dtype t, void *x,
                            const float *cos_t, const float *sin_t, int B, int T, int n_heads,
                            int hs, int row_stride)
{
    return rotate_rows(self, t, x, cos_t, sin_t, 1.0f, B, T, n_heads, hs, row_stride);
}

zt_status cuda_rope_backward(const struct ops_backend *self, enum zt_dtype t, void *dx,
                             const float *cos_t, const float *sin_t, int B, int T, int n_heads,
                             int hs, int row_stride)
{
    return rotate_rows(self, t, dx, cos_t, sin_t, -1.0f, B, T, n_heads, hs, row_stride);
}
