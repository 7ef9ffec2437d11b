/* worker/cpu/fp8.c — the fp8 quantisation ops, bit for bit common/fp8.h's
 * codec (fp8_encode_scaled, fp8_amax, fp8_decode_scaled), but vectorised.
 *
 * Why not call the codec: its encode branches on the value's class (NaN,
 * infinity, zero, subnormal, normal, beyond the range), so GCC keeps it
 * scalar; emulating fp8 GEMMs with it cost 105 ms of tiny.yaml's 182 ms
 * step (bf16 alone: 77 ms), 47% of the run in fp8_encode. Here every class
 * goes through one branch-free formula on the float's bits, which GCC
 * vectorises in the AVX2 and AVX-512 clones (variable shifts per lane):
 *
 *   E   = the float's exponent field, a its bits without the sign
 *   sh  = clamp(drop + sub - E, drop, 31)     drop = 23 - M, sub = 127 + emin
 *   val = E >= sub ? a - ((127 - bias) << 23) (normal: the exponent rebiased)
 *                  : significand with its 1   (subnormal: shifted further)
 *   c   = val / 2^sh rounded to nearest even  (the usual add-and-shift:
 *         val + 2^(sh-1) - 1 + the kept lsb, shifted; val + 2^(sh-1) < 2^32)
 *   c   = min(c, max_code), NaN's code for a NaN, then the sign or'ed in.
 *
 * The classes fall out of it: a normal value rounds its mantissa to M bits
 * (the carry into the next binade is the code's next exponent, as in the
 * codec); a subnormal's significand is shifted down to units of the
 * smallest subnormal; zero and float subnormals (E = 0) shift by 31 and
 * round to 0; values beyond the format, infinities included, exceed
 * max_code and saturate. sh = 31 where the codec has `shift >= 25 → 0`
 * gives 0 as well: the significand is below 2^24 <= half a unit.
 *
 * The amax of x is taken in the same pass (max of |x|'s bits: non-negative
 * floats order as their bits, NaNs above +inf; a NaN then gives the
 * codec's canonical NaN). Decoding multiplies every code's value by
 * scale_inv once, into a 256-entry table, so a tensor's decode is one
 * lookup per element: the same float product, so the same bits.
 *
 * tests/test_fp8.c checks both ops against the codec on the reference
 * tables' inputs and on random floats at several scales.
 */
#include <string.h>

#include "worker/cpu/ops_cpu_impl.h"

/* Elements per thread task, as in the other elementwise ops. */
enum { CHUNK = 16384 };

/* One format's constants for the formula above. */
struct encode_consts {
    uint32_t rebias;   /* (127 - bias) << 23 */
    int32_t sub, drop; /* 127 + emin: the smallest normal's exponent field; 23 - M */
    uint32_t max_code, nan_code;
};

static struct encode_consts consts_of(enum fp8_format f)
{
    const struct fp8_format_info *fi = fp8_format_info(f);
    return (struct encode_consts){
        .rebias = (uint32_t)(127 - fi->bias) << 23,
        .sub = 127 + 1 - fi->bias,
        .drop = 23 - fi->man_bits,
        .max_code = fi->max_code,
        .nan_code = fi->nan_code,
    };
}

/* q[i] = fp8_encode(x[i] * scale); returns the largest bits of |x[i]|. */
CPU_KERNEL static uint32_t quantize_span(uint8_t *q, const float *x, size_t n, float scale,
                                         struct encode_consts k)
{
    uint32_t amax = 0;
#pragma omp simd reduction(max : amax)
    for (size_t i = 0; i < n; i++) {
        const union cpu_fbits in = {.f = x[i]}, y = {.f = x[i] * scale};
        const uint32_t ax = (uint32_t)in.i & 0x7fffffffu, u = (uint32_t)y.i;
        amax = ax > amax ? ax : amax;
        const uint32_t a = u & 0x7fffffffu;
        const int32_t e = (int32_t)(a >> 23);
        int32_t sh = k.drop + k.sub - e;
        sh = sh < k.drop ? k.drop : sh;
        sh = sh > 31 ? 31 : sh;
        const uint32_t val = e >= k.sub ? a - k.rebias : (a & 0x7fffffu) | 0x800000u;
        const uint32_t half = (1u << sh) >> 1;
        uint32_t c = (val + half - 1u + ((val >> sh) & 1u)) >> sh;
        c = c < k.max_code ? c : k.max_code;
        c = a > 0x7f800000u ? k.nan_code : c;
        q[i] = (uint8_t)(((u >> 24) & 0x80u) | c);
    }
    return amax;
}

zt_status cpu_fp8_quantize(const struct ops_backend *self, uint8_t *q, float *amax, const float *x,
                           size_t n, float scale, enum fp8_format f)
{
    (void)self;
    const struct encode_consts k = consts_of(f);
    uint32_t m = 0;
    const long chunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static) reduction(max : m)
    for (long c = 0; c < chunks; c++) {
        const size_t i0 = (size_t)c * CHUNK;
        const uint32_t cm =
            quantize_span(q + i0, x + i0, n - i0 < CHUNK ? n - i0 : CHUNK, scale, k);
        m = cm > m ? cm : m;
    }
    m = m > 0x7f800000u ? 0x7fc00000u : m; /* fp8_amax's NaN */
    memcpy(amax, &m, sizeof *amax);
    return ZT_OK;
}

zt_status cpu_fp8_dequantize(const struct ops_backend *self, float *x, const uint8_t *q, size_t n,
                             float scale_inv, enum fp8_format f)
{
    (void)self;
    float table[256];
    for (int c = 0; c < 256; c++)
        table[c] = fp8_decode((uint8_t)c, f) * scale_inv;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
        x[i] = table[q[i]];
    return ZT_OK;
}
