/* tests/test_fp8.c — the fp8 codec (common/fp8.h).
 *
 * The codec is checked against tests/data/fp8_tables.txt, which
 * scripts/reference/fp8_reference.py writes from the formats' definitions
 * with exact fractions: every code's value, and the codes of every
 * representable value, every midpoint and its float neighbours, values
 * beyond the range, underflow, infinities and NaNs. Random floats over the
 * whole exponent range are checked against a brute-force nearest-even
 * search over the 256 decoded values in double, written here.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fp8.h"
#include "../common/rng.h"
#include "testutil.h"

static float float_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static enum fp8_format format_named(const char *name)
{
    if (strcmp(name, "e4m3") == 0)
        return FP8_E4M3;
    ck_assert_str_eq(name, "e5m2");
    return FP8_E5M2;
}

static FILE *open_tables(void)
{
    const char *path = testutil_source_path("tests/data/fp8_tables.txt");
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    return f;
}

/* ---- the codec against the reference tables ------------------------------ */

START_TEST(test_decode_every_code)
{
    FILE *f = open_tables();
    char line[256], kind[16], fmt[16], value[64];
    unsigned code;
    int seen[FP8_FORMAT_COUNT][256] = {{0}};
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%15s %15s %x %63s", kind, fmt, &code, value) != 4 ||
            strcmp(kind, "decode") != 0)
            continue;
        const enum fp8_format ff = format_named(fmt);
        const float got = fp8_decode((uint8_t)code, ff);
        seen[ff][code]++;
        if (strcmp(value, "nan") == 0) {
            ck_assert_msg(isnan(got), "%s 0x%02x: want NaN, got %a", fmt, code, got);
            ck_assert_int_eq(signbit(got) != 0, (code & 0x80) != 0);
        } else {
            const double want = strcmp(value, "inf") == 0    ? INFINITY
                                : strcmp(value, "-inf") == 0 ? -INFINITY
                                                             : strtod(value, NULL);
            ck_assert_msg((double)got == want && !signbit(got) == !signbit(want),
                          "%s 0x%02x: want %s, got %a", fmt, code, value, got);
        }
    }
    fclose(f);
    for (int ff = 0; ff < FP8_FORMAT_COUNT; ff++)
        for (int c = 0; c < 256; c++)
            ck_assert_msg(seen[ff][c] == 1, "format %d code 0x%02x not in the table", ff, c);
}
END_TEST

START_TEST(test_encode_reference_cases)
{
    FILE *f = open_tables();
    char line[256], kind[16], fmt[16];
    unsigned bits, code;
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%15s %15s %x %x", kind, fmt, &bits, &code) != 4 ||
            strcmp(kind, "encode") != 0)
            continue;
        const float x = float_of_bits(bits);
        const unsigned got = fp8_encode(x, format_named(fmt));
        ck_assert_msg(got == code, "%s: %a (0x%08x): want 0x%02x, got 0x%02x", fmt, x, bits, code,
                      got);
        n++;
    }
    fclose(f);
    ck_assert_int_gt(n, 1000); /* both formats' values, midpoints and neighbours */
}
END_TEST

/* The code of x by brute force: the nearest of the finite decoded values
 * in double (ties to the even code), saturating beyond the largest, NaN to
 * the format's NaN; the sign kept. Nothing of the codec's rounding. */
static uint8_t encode_brute_force(float x, enum fp8_format ff)
{
    const uint8_t sign = signbit(x) ? 0x80 : 0;
    if (isnan(x))
        return sign | (ff == FP8_E4M3 ? 0x7f : 0x7e);
    const double a = fabs((double)x);
    int best = -1;
    double best_err = INFINITY, top = 0.0;
    int top_code = 0;
    for (int c = 0; c < 0x80; c++) {
        const float v = fp8_decode((uint8_t)c, ff);
        if (!isfinite(v))
            continue;
        if (v > top)
            top = v, top_code = c;
        const double err = fabs(a - v);
        if (err < best_err || (err == best_err && (c & 1) == 0))
            best = c, best_err = err;
    }
    if (a >= top)
        return sign | (uint8_t)top_code;
    return sign | (uint8_t)best;
}

START_TEST(test_encode_random_floats_brute_force)
{
    const uint64_t key = rng_key(7, "fp8 random floats");
    for (int ff = 0; ff < FP8_FORMAT_COUNT; ff++) {
        for (uint64_t i = 0; i < 150000; i++) {
            const uint64_t r = rng_u64(key, i + 1000000 * (uint64_t)ff);
            /* exponents 2^-26 .. 2^21: underflow, subnormals, normals, beyond */
            const uint32_t e = 127 - 26 + (uint32_t)((r >> 32) % 48);
            const uint32_t u = ((uint32_t)(r >> 63) << 31) | (e << 23) | (uint32_t)(r & 0x7fffff);
            const float x = float_of_bits(u);
            const uint8_t want = encode_brute_force(x, (enum fp8_format)ff);
            const uint8_t got = fp8_encode(x, (enum fp8_format)ff);
            ck_assert_msg(got == want, "format %d: %a (0x%08x): want 0x%02x, got 0x%02x", ff, x, u,
                          want, got);
        }
    }
}
END_TEST

START_TEST(test_scaled_encode_and_amax)
{
    const float x[6] = {1.0f, -3.0f, 0.25f, 500.0f, -0.0f, 7.0f};
    uint8_t q[6];
    float back[6];
    fp8_encode_scaled(q, x, 6, 2.0f, FP8_E4M3);
    fp8_decode_scaled(back, q, 6, 0.5f, FP8_E4M3);
    const float want[6] = {1.0f, -3.0f, 0.25f, 224.0f, -0.0f, 7.0f}; /* 1000 saturates to 448 */
    for (int i = 0; i < 6; i++)
        ck_assert_msg(back[i] == want[i] && !signbit(back[i]) == !signbit(want[i]), "%d: %a", i,
                      back[i]);
    ck_assert_float_eq(fp8_amax(x, 6), 500.0f);
    ck_assert_float_eq(fp8_amax(x, 0), 0.0f);
    const float with_nan[3] = {1.0f, NAN, 2.0f};
    ck_assert(isnan(fp8_amax(with_nan, 3)));
    const float with_inf[2] = {-INFINITY, 2.0f};
    ck_assert(isinf(fp8_amax(with_inf, 2)));
}
END_TEST

static Suite *fp8_suite(void)
{
    Suite *s = suite_create("fp8");
    TCase *codec = tcase_create("codec");
    tcase_add_test(codec, test_decode_every_code);
    tcase_add_test(codec, test_encode_reference_cases);
    tcase_add_test(codec, test_encode_random_floats_brute_force);
    tcase_add_test(codec, test_scaled_encode_and_amax);
    tcase_set_timeout(codec, 60);
    suite_add_tcase(s, codec);
    return s;
}

int main(void)
{
    return testutil_run_suite(fp8_suite(), 0);
}
