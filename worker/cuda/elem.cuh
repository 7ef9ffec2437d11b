/* worker/cuda/elem.cuh — the element types of the model ops' buffers on the
 * GPU, for worker/cuda/ only.
 *
 * Every model op takes `t` (worker/ops.h): its activations, gradients and
 * weights are fp32, bf16 or fp16. A kernel is written once as a template
 * over the element type E (float, __nv_bfloat16, __half), reads every
 * value through elem::f32, computes in fp32, and stores through
 * elem::round_to<E>, which rounds once, to nearest even (infinity past
 * fp16's range): the rounding of common/half.h, so each 16-bit kernel is
 * its fp32 kernel on the widened values, rounded, as the CPU's 16-bit
 * forms are. The hardware's conversions are single instructions on sm_80
 * and newer; NaNs come out as the hardware's canonical NaN rather than
 * half.h's payload, which no op's contract distinguishes.
 *
 * elem::with_type turns the op's run-time t into the template argument:
 * the host side of an op is one generic lambda that launches its kernels
 * for the E it is handed.
 */
#ifndef ZT_WORKER_CUDA_ELEM_CUH
#define ZT_WORKER_CUDA_ELEM_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <library_types.h>

#include "worker/cuda/cuda_impl.h"

namespace elem
{

/* A value of a model buffer, exactly, as fp32. */
__device__ __forceinline__ float f32(float x)
{
    return x;
}
__device__ __forceinline__ float f32(__nv_bfloat16 x)
{
    return __bfloat162float(x);
}
__device__ __forceinline__ float f32(__half x)
{
    return __half2float(x);
}

/* v rounded to E, to nearest even. */
template <class E> __device__ E round_to(float v);
template <> __device__ __forceinline__ float round_to<float>(float v)
{
    return v;
}
template <> __device__ __forceinline__ __nv_bfloat16 round_to<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half round_to<__half>(float v)
{
    return __float2half_rn(v);
}

/* The element type as a value, for a generic lambda to take apart with
 * `typename decltype(tag)::type`. */
template <class E> struct tag {
    using type = E;
};

/* f(tag<E>{}) for the E of t; t must be ZT_F32, ZT_BF16 or ZT_F16 (an
 * always-on assert, as every backend treats a bad dtype). */
template <class F> zt_status with_type(enum zt_dtype t, F f)
{
    switch (t) {
    case ZT_BF16:
        return f(tag<__nv_bfloat16>{});
    case ZT_F16:
        return f(tag<__half>{});
    default:
        ZT_ASSERT(t == ZT_F32 && "a model op's dtype is fp32, bf16 or fp16");
        return f(tag<float>{});
    }
}

/* cuBLAS's name for the elements of t. */
static inline cudaDataType_t blas_type(enum zt_dtype t)
{
    ZT_ASSERT(t == ZT_F32 || t == ZT_BF16 || t == ZT_F16);
    return t == ZT_F32 ? CUDA_R_32F : t == ZT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

} // namespace elem

#endif
