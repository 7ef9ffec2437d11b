/* common/half.h — conversions between 16-bit floats and float.
 *
 * bf16 (1-8-7, float's upper half) and IEEE binary16 "f16" (1-5-10) are
 * storage formats only: every arithmetic on them converts to float, works
 * there and rounds back. The conversions are written with integer bit
 * manipulation rather than compiler types (_Float16, __bf16) because those
 * are extensions outside C11 and their rounding mode is not promised.
 *
 * Rounding is to nearest, ties to even, as the hardware conversions do, so
 * that the CPU path and the GPU path round a sum the same way. NaNs stay NaN
 * (made quiet, sign kept), infinities stay infinite, values beyond the finite
 * range round to infinity, and f16 subnormals are produced and read exactly.
 * Everything is static inline: these sit in inner loops (the MPI reduction of
 * 16-bit buffers, casts between master weights and compute weights). The
 * conversions are also the CUDA backend's (worker/cuda/engine_ops.cu):
 * ZT_HOST_DEVICE (common/hostdev.h) compiles them for the device too, so
 * both backends round with one source.
 */
#ifndef ZT_HALF_H
#define ZT_HALF_H

#include <stdint.h>

#include "hostdev.h"

/* The bit pattern of a float, and back. */
ZT_HOST_DEVICE static inline uint32_t half_f32_bits(float f)
{
    return zt_float_bits(f);
}

ZT_HOST_DEVICE static inline float half_bits_f32(uint32_t u)
{
    return zt_bits_float(u);
}

/* bf16 -> float: exact (bf16 is the upper half of a float). */
ZT_HOST_DEVICE static inline float zt_bf16_to_f32(uint16_t h)
{
    return half_bits_f32((uint32_t)h << 16);
}

/* float -> bf16, round to nearest even. Adding 0x7fff plus the lowest kept
 * bit before truncating rounds ties to even; the carry walks into the
 * exponent when the mantissa overflows, which also turns the largest
 * floats into infinity as rounding demands. NaN is kept apart so the carry
 * cannot turn it into infinity. */
ZT_HOST_DEVICE static inline uint16_t zt_f32_to_bf16(float f)
{
    uint32_t u = half_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN, sign kept */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* f16 -> float: exact for every value, subnormals included. */
ZT_HOST_DEVICE static inline float zt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) /* inf, or NaN with its payload kept and made quiet */
        return half_bits_f32(sign | 0x7f800000u | (mant ? 0x00400000u | (mant << 13) : 0));
    if (exp == 0) { /* zero or subnormal: mant * 2^-24, exact in a float */
        float v = (float)mant * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return half_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* float -> f16, round to nearest even. |f| >= 65520 (halfway between the
 * largest f16, 65504, and 2^16; the tie goes to the even neighbour, which
 * is infinity) becomes infinity; |f| below 2^-14 becomes a subnormal or
 * zero, rounded on the full-precision mantissa. */
ZT_HOST_DEVICE static inline uint16_t zt_f32_to_f16(float f)
{
    uint32_t u = half_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet, top payload bits kept */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u)
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* normal f16: rebias the exponent, round 13 bits */
        uint32_t q = (a - 0x38000000u) >> 13;
        return (uint16_t)(sign | zt_round_shift(q, a & 0x1fffu, 13));
    }
    uint32_t exp = a >> 23;
    if (exp < 102) /* below 2^-25 (float subnormals too): rounds to zero */
        return sign;
    /* value = mant * 2^(exp-150) and the f16 subnormal unit is 2^-24, so
     * the result is mant / 2^(126-exp); a carry into 0x400 is the smallest
     * normal, encoded correctly as it stands. */
    uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    unsigned shift = 126u - exp;
    uint32_t q = zt_round_shift(mant >> shift, mant & ((1u << shift) - 1u), shift);
    return (uint16_t)(sign | q);
}

#endif
