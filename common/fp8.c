/* common/fp8.c — the E4M3 and E5M2 codecs of fp8.h: the format table and
 * the whole-buffer functions. The per-value encode and decode are fp8.h's
 * static inline fp8_encode_with and fp8_decode_with, shared with the CUDA
 * kernels; fp8.h's design comment says how they round.
 */
#include "fp8.h"

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

uint8_t fp8_encode(float x, enum fp8_format f)
{
    return fp8_encode_with(x, fp8_format_info(f));
}

float fp8_decode(uint8_t q, enum fp8_format f)
{
    return fp8_decode_with(q, fp8_format_info(f));
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
        const uint32_t a = zt_float_bits(x[i]) & 0x7fffffffu;
        if (a > 0x7f800000u)
            return zt_bits_float(0x7fc00000u);
        m = a > m ? a : m; /* non-negative floats order as their bits do */
    }
    return zt_bits_float(m);
}
