/* common/fp8.h — 8-bit floats: encoding float into E4M3 and E5M2, and back.
 *
 * The two formats of the OCP 8-bit floating point specification, which are
 * what NVIDIA Hopper multiplies and Transformer Engine trains with:
 *
 *   E4M3 ("E4M3FN")  1 sign, 4 exponent (bias 7), 3 mantissa bits. No
 *                    infinities; the one NaN is S.1111.111, so the largest
 *                    finite value is S.1111.110 = 448. Smallest subnormal
 *                    2^-9.
 *   E5M2             1 sign, 5 exponent (bias 15), 2 mantissa bits, IEEE-
 *                    like: infinities S.11111.00, NaNs S.11111.{01,10,11}.
 *                    Largest finite 57344, smallest subnormal 2^-16.
 *
 * Decoding is exact (every 8-bit value is a float). Encoding rounds to
 * nearest, ties to even, subnormals included and with the carry into the
 * next binade, and it SATURATES: a finite value whose rounding lies beyond
 * the largest finite value becomes ±max finite, and so does ±infinity, for
 * both formats. That is the saturating cast Transformer Engine uses for
 * training (E4M3 has no infinity to give; for E5M2 it keeps one overflowing
 * gradient from turning a whole GEMM into infinities and NaNs). A NaN stays
 * NaN with its sign: E4M3's S.1111.111 (0x7f/0xff), E5M2's canonical quiet
 * NaN S.11111.10 (0x7e/0xfe). -0.0, and a negative value that rounds to
 * zero, keep the sign (0x80).
 *
 * The rounding is integer arithmetic on the float's bits, as half.h does for
 * 16-bit floats, so the result does not depend on the compiler's or the
 * FPU's rounding mode. The format's constants are one row of a table
 * (fp8_format_info); encode and decode are the same code for both rows.
 *
 * Encode and decode of one value given the row (fp8_encode_with,
 * fp8_decode_with) are static inline below and ZT_HOST_DEVICE
 * (common/hostdev.h): the CUDA backend's fp8 kernels (worker/cuda/fp8.cu)
 * run this same source with the row passed by value.
 *
 * Encoding takes the float's exponent and 24-bit significand apart: a value
 * in the format's normal range keeps its exponent (rebiased) and rounds its
 * mantissa from 23 to M bits; a smaller one becomes a subnormal, its
 * significand shifted down to units of the smallest subnormal and rounded
 * there. Either way the rounded code may carry into the next binade (a
 * subnormal into the smallest normal, 0.111 into 1.000), which the bit
 * layout encodes correctly as it stands; codes past the largest finite one
 * (E4M3's NaN, E5M2's infinities, or an exponent the format lacks) are
 * clamped to it: that is the saturation.
 */
#ifndef ZT_FP8_H
#define ZT_FP8_H

#include <stddef.h>
#include <stdint.h>

#include "hostdev.h"

enum fp8_format { FP8_E4M3, FP8_E5M2, FP8_FORMAT_COUNT };

struct fp8_format_info {
    const char *name; /* "e4m3", "e5m2" */
    int exp_bits;     /* 4, 5 */
    int man_bits;     /* 3, 2 */
    int bias;         /* 7, 15 */
    int has_inf;      /* the all-ones exponent holds infinities and NaNs (E5M2) */
    uint8_t max_code; /* the largest finite value's code without sign: 0x7e, 0x7b */
    uint8_t nan_code; /* the NaN encoding gives, without sign: 0x7f, 0x7e */
    float max_finite; /* 448, 57344 */
};

/* The constants of format f; static, never NULL. */
const struct fp8_format_info *fp8_format_info(enum fp8_format f);

/* The largest finite value of f (448 or 57344). */
float fp8_max_finite(enum fp8_format f);

/* x rounded to nearest even in f, saturating as the design comment says. */
uint8_t fp8_encode(float x, enum fp8_format f);

/* The value of code q in f: exact; NaN for f's NaN codes, ±inf for E5M2's
 * infinities. */
float fp8_decode(uint8_t q, enum fp8_format f);

/* q[i] = fp8_encode(x[i] * scale, f): the quantisation of a tensor with a
 * per-tensor scale (the product rounded in float first, as a GPU's cast
 * kernel does). */
void fp8_encode_scaled(uint8_t *q, const float *x, size_t n, float scale, enum fp8_format f);

/* x[i] = fp8_decode(q[i], f) * scale_inv, in float. */
void fp8_decode_scaled(float *x, const uint8_t *q, size_t n, float scale_inv, enum fp8_format f);

/* The largest |x[i]| (0 for n == 0); NaN when some x[i] is NaN. */
float fp8_amax(const float *x, size_t n);

/* The code of |x| = a (float bits without sign, finite, not zero, not a
 * float subnormal), before clamping to the largest finite code. */
ZT_HOST_DEVICE static inline uint32_t fp8_encode_magnitude(uint32_t a,
                                                           const struct fp8_format_info *fi)
{
    const int M = fi->man_bits, emin = 1 - fi->bias;
    const int e = (int)(a >> 23) - 127;
    if (e + fi->bias > (1 << fi->exp_bits) - 1) /* beyond every exponent the format has */
        return 0xffu;
    if (e >= emin) { /* normal: rebias the exponent, round the mantissa to M bits */
        const unsigned drop = 23u - (unsigned)M;
        const uint32_t q = ((uint32_t)(e + fi->bias) << M) | ((a & 0x7fffffu) >> drop);
        return zt_round_shift(q, a & ((1u << drop) - 1u), drop);
    }
    /* subnormal: the value is sig * 2^(e-23) and the unit 2^(emin-M), so
     * the code is sig / 2^shift; at shift >= 25 it is below a quarter unit */
    const unsigned shift = 23u - (unsigned)M + (unsigned)(emin - e);
    if (shift >= 25)
        return 0;
    const uint32_t sig = (a & 0x7fffffu) | 0x800000u;
    return zt_round_shift(sig >> shift, sig & ((1u << shift) - 1u), shift);
}

/* fp8_encode(x, f) given f's row fi. */
ZT_HOST_DEVICE static inline uint8_t fp8_encode_with(float x, const struct fp8_format_info *fi)
{
    const uint32_t u = zt_float_bits(x);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint8_t)(sign | fi->nan_code);
    if (a == 0x7f800000u) /* infinity saturates too */
        return (uint8_t)(sign | fi->max_code);
    if (a < 0x00800000u) /* zero or a float subnormal: far below half the smallest fp8 */
        return sign;
    const uint32_t q = fp8_encode_magnitude(a, fi);
    return (uint8_t)(sign | (q > fi->max_code ? fi->max_code : q));
}

/* fp8_decode(q, f) given f's row fi. The subnormal's product is exact, so
 * its bits do not depend on how a compiler schedules it. */
ZT_HOST_DEVICE static inline float fp8_decode_with(uint8_t q, const struct fp8_format_info *fi)
{
    const uint32_t sign = (uint32_t)(q & 0x80u) << 24;
    const uint32_t c = q & 0x7fu, M = (uint32_t)fi->man_bits;
    const uint32_t exp = c >> M, man = c & ((1u << M) - 1u);
    const uint32_t exp_ones = (1u << fi->exp_bits) - 1u;
    if (fi->has_inf && exp == exp_ones)
        return zt_bits_float(sign | 0x7f800000u | (man ? 0x400000u : 0u));
    if (!fi->has_inf && c == 0x7fu)
        return zt_bits_float(sign | 0x7fc00000u);
    if (exp == 0) { /* subnormal: man * 2^(1 - bias - M), exact in a float */
        const float unit = zt_bits_float((uint32_t)(127 + 1 - fi->bias - (int)M) << 23);
        return zt_bits_float(sign | zt_float_bits((float)man * unit));
    }
    return zt_bits_float(sign | ((exp - (uint32_t)fi->bias + 127u) << 23) | (man << (23u - M)));
}

#endif
