/* common/hostdev.h — what C code that also runs on a CUDA device needs.
 *
 * A few scalar functions (common/half.h's 16-bit conversions, common/fp8.h's
 * codec, worker/quant_maps.h's code search) are the same source on the CPU
 * and in the CUDA kernels, so that both give the same bits by construction
 * rather than by a port kept in step by hand. They are static inline in
 * their headers and marked ZT_HOST_DEVICE: nvcc compiles them for both
 * sides, a C compiler sees plain static inline C11.
 *
 * Such a function sticks to integer work on the float's bits and float
 * arithmetic whose result cannot depend on the compiler: products that are
 * exact, or operations that feed no addition (nvcc may fuse a product into
 * a following addition; an exact product fused gives the same bits).
 */
#ifndef ZT_HOSTDEV_H
#define ZT_HOSTDEV_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define ZT_HOST_DEVICE __host__ __device__
#else
#define ZT_HOST_DEVICE
#endif

/* The bit pattern of a float, and back: memcpy is C's defined way, the
 * device has a register move for it. */
ZT_HOST_DEVICE static inline uint32_t zt_float_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

ZT_HOST_DEVICE static inline float zt_bits_float(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* q + rem / 2^shift rounded to nearest, ties to even; rem < 2^shift,
 * 1 <= shift < 32. The narrowing step of the 16-bit and 8-bit encoders. */
ZT_HOST_DEVICE static inline uint32_t zt_round_shift(uint32_t q, uint32_t rem, unsigned shift)
{
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u)))
        q++;
    return q;
}

#endif
