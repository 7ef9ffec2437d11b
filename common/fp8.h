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
 */
#ifndef ZT_FP8_H
#define ZT_FP8_H

#include <stddef.h>
#include <stdint.h>

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

#endif
