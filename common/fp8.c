/* common/fp8.c — the E4M3 and E5M2 codecs of fp8.h.
 *
 * One table row per format; encode and decode read the row. Encoding takes
 * the float's exponent and 24-bit significand apart: a value in the
 * format's normal range keeps its exponent (rebiased) and rounds its
 * mantissa from 23 to M bits; a smaller one becomes a subnormal, its
 * significand shifted down to units of the smallest subnormal and rounded
 * there. Either way the rounded code may carry into the next binade (a
 * subnormal into the smallest normal, 0.111 into 1.000), which the bit
 * layout encodes correctly as it stands; codes past the largest finite one
 * (E4M3's NaN, E5M2's infinities, or an exponent the format lacks) are
 * clamped to it: that is the saturation.
 */
#include "fp8.h"

#include <string.h>

#include "status.h"

static const struct fp8_format_info formats[FP8_FORMAT_COUNT] = {
    [FP8_E4M3] = {"e4m3", 4, 3, 7, 0, 0x7e, 0x7f, 448.0f},
    [FP8_E5M2] = {"e5m2", 5, 2, 15, 1, 0x7b, 0x7e, 57344.0f},
};

const struct fp8_format_info *fp8_format_info(enum fp8_format f)
{
    ZT_ASSERT((int)f >= 0 && f < FP8_FORMAT_COUNT);
    return &formats[f];
}

float fp8_max_finite(enum fp8_format f)
{
    return fp8_format_info(f)->max_finite;
}

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* q + rem / 2^shift rounded to nearest even; rem < 2^shift, 1 <= shift < 32. */
static uint32_t round_shift(uint32_t q, uint32_t rem, unsigned shift)
{
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u)))
        q++;
    return q;
}

/* The code of |x| = a (float bits without sign, finite, not zero), before
 * clamping to the largest finite code. */
static uint32_t encode_magnitude(uint32_t a, const struct fp8_format_info *fi)
{
    const int M = fi->man_bits, emin = 1 - fi->bias;
    const int e = (int)(a >> 23) - 127;
    if (e + fi->bias > (1 << fi->exp_bits) - 1) /* beyond every exponent the format has */
        return 0xffu;
    if (e >= emin) { /* normal: rebias the exponent, round the mantissa to M bits */
        const unsigned drop = 23u - (unsigned)M;
        const uint32_t q = ((uint32_t)(e + fi->bias) << M) | ((a & 0x7fffffu) >> drop);
        return round_shift(q, a & ((1u << drop) - 1u), drop);
    }
    /* subnormal: the value is sig * 2^(e-23) and the unit 2^(emin-M), so
     * the code is sig / 2^shift; at shift >= 25 it is below a quarter unit */
    const unsigned shift = 23u - (unsigned)M + (unsigned)(emin - e);
    if (shift >= 25)
        return 0;
    const uint32_t sig = (a & 0x7fffffu) | 0x800000u;
    return round_shift(sig >> shift, sig & ((1u << shift) - 1u), shift);
}

uint8_t fp8_encode(float x, enum fp8_format f)
{
    const struct fp8_format_info *fi = fp8_format_info(f);
    const uint32_t u = float_bits(x);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint8_t)(sign | fi->nan_code);
    if (a == 0x7f800000u) /* infinity saturates too */
        return (uint8_t)(sign | fi->max_code);
    if (a < 0x00800000u) /* zero or a float subnormal: far below half the smallest fp8 */
        return sign;
    const uint32_t q = encode_magnitude(a, fi);
    return (uint8_t)(sign | (q > fi->max_code ? fi->max_code : q));
}

float fp8_decode(uint8_t q, enum fp8_format f)
{
    const struct fp8_format_info *fi = fp8_format_info(f);
    const uint32_t sign = (uint32_t)(q & 0x80u) << 24;
    const uint32_t c = q & 0x7fu, M = (uint32_t)fi->man_bits;
    const uint32_t exp = c >> M, man = c & ((1u << M) - 1u);
    const uint32_t exp_ones = (1u << fi->exp_bits) - 1u;
    if (fi->has_inf && exp == exp_ones)
        return bits_float(sign | 0x7f800000u | (man ? 0x400000u : 0u));
    if (!fi->has_inf && c == 0x7fu)
        return bits_float(sign | 0x7fc00000u);
    if (exp == 0) { /* subnormal: man * 2^(1 - bias - M), exact in a float */
        const float unit = bits_float((uint32_t)(127 + 1 - fi->bias - (int)M) << 23);
        return bits_float(sign | float_bits((float)man * unit));
    }
    return bits_float(sign | ((exp - (uint32_t)fi->bias + 127u) << 23) | (man << (23u - M)));
}

void fp8_encode_scaled(uint8_t *q, const float *x, size_t n, float scale, enum fp8_format f)
{
    for (size_t i = 0; i < n; i++)
        q[i] = fp8_encode(x[i] * scale, f);
}

void fp8_decode_scaled(float *x, const uint8_t *q, size_t n, float scale_inv, enum fp8_format f)
{
    float table[256];
    for (int c = 0; c < 256; c++)
        table[c] = fp8_decode((uint8_t)c, f);
    for (size_t i = 0; i < n; i++)
        x[i] = table[q[i]] * scale_inv;
}

float fp8_amax(const float *x, size_t n)
{
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t a = float_bits(x[i]) & 0x7fffffffu;
        if (a > 0x7f800000u)
            return bits_float(0x7fc00000u);
        m = a > m ? a : m; /* non-negative floats order as their bits do */
    }
    return bits_float(m);
}
