/* tests/test_half.c — bf16/f16 <-> float conversions (common/half.h).
 *
 * Every 16-bit pattern is decoded and checked against the format's
 * definition evaluated in double, and re-encoded to itself; the encoder is
 * checked on named rounding cases (ties to even, overflow, subnormals,
 * inf/NaN) and, on many pseudo-random floats, against a brute-force nearest
 * search among the neighbouring 16-bit values.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "../common/half.h"
#include "testutil.h"

/* The value of an f16 pattern by the IEEE binary16 definition. */
static double f16_reference(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v = exp == 0 ? ldexp(mant, -24) : ldexp(1.0 + mant / 1024.0, exp - 15);
    if (exp == 0x1f)
        v = mant ? NAN : INFINITY;
    return sign ? -v : v;
}

/* The value of a bf16 pattern: 1-8-7 with bias 127. */
static double bf16_reference(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 7) & 0xff, mant = h & 0x7f;
    double v = exp == 0 ? ldexp(mant, -133) : ldexp(1.0 + mant / 128.0, exp - 127);
    if (exp == 0xff)
        v = mant ? NAN : INFINITY;
    return sign ? -v : v;
}

static float f32_of_bits(uint32_t u)
{
    return half_bits_f32(u);
}

START_TEST(test_f16_decodes_every_pattern)
{
    for (uint32_t h = 0; h <= 0xffff; h++) {
        double want = f16_reference((uint16_t)h);
        float got = zt_f16_to_f32((uint16_t)h);
        if (isnan(want)) {
            ck_assert_msg(isnan(got), "0x%04x should decode to NaN", h);
            ck_assert_int_eq(signbit(got) != 0, (h >> 15) != 0);
        } else {
            ck_assert_msg((double)got == want, "0x%04x: got %.10g want %.10g", h, got, want);
            ck_assert_int_eq(signbit(got) != 0, (h >> 15) != 0); /* -0 too */
        }
    }
}
END_TEST

START_TEST(test_bf16_decodes_every_pattern)
{
    for (uint32_t h = 0; h <= 0xffff; h++) {
        double want = bf16_reference((uint16_t)h);
        float got = zt_bf16_to_f32((uint16_t)h);
        if (isnan(want))
            ck_assert_msg(isnan(got), "0x%04x should decode to NaN", h);
        else
            ck_assert_msg((double)got == want, "0x%04x: got %.10g want %.10g", h, got, want);
    }
}
END_TEST

START_TEST(test_round_trip_every_non_nan_pattern)
{
    for (uint32_t h = 0; h <= 0xffff; h++) {
        if (!isnan(zt_f16_to_f32((uint16_t)h)))
            ck_assert_uint_eq(zt_f32_to_f16(zt_f16_to_f32((uint16_t)h)), h);
        if (!isnan(zt_bf16_to_f32((uint16_t)h)))
            ck_assert_uint_eq(zt_f32_to_bf16(zt_bf16_to_f32((uint16_t)h)), h);
    }
}
END_TEST

START_TEST(test_bf16_rounds_to_nearest_even)
{
    ck_assert_uint_eq(zt_f32_to_bf16(1.0f), 0x3f80);
    /* 1 + 2^-8 lies halfway between 0x3f80 (even) and 0x3f81: down */
    ck_assert_uint_eq(zt_f32_to_bf16(f32_of_bits(0x3f808000u)), 0x3f80);
    /* 1 + 3*2^-8 lies halfway between 0x3f81 and 0x3f82 (even): up */
    ck_assert_uint_eq(zt_f32_to_bf16(f32_of_bits(0x3f818000u)), 0x3f82);
    /* one float ulp either side of a tie goes to the nearer value */
    ck_assert_uint_eq(zt_f32_to_bf16(f32_of_bits(0x3f808001u)), 0x3f81);
    ck_assert_uint_eq(zt_f32_to_bf16(f32_of_bits(0x3f817fffu)), 0x3f81);
    ck_assert_uint_eq(zt_f32_to_bf16(-1.0f), 0xbf80);
    /* a tie with the carry rippling into the exponent: 0x3fff8000 -> 2.0 */
    ck_assert_uint_eq(zt_f32_to_bf16(f32_of_bits(0x3fff8000u)), 0x4000);
}
END_TEST

START_TEST(test_bf16_overflow_inf_nan)
{
    ck_assert_uint_eq(zt_f32_to_bf16(INFINITY), 0x7f80);
    ck_assert_uint_eq(zt_f32_to_bf16(-INFINITY), 0xff80);
    ck_assert_uint_eq(zt_f32_to_bf16(FLT_MAX), 0x7f80); /* above the last tie */
    ck_assert_uint_eq(zt_f32_to_bf16(-FLT_MAX), 0xff80);
    ck_assert_uint_eq(zt_f32_to_bf16(f32_of_bits(0x7f7f7fffu)), 0x7f7f); /* largest finite */
    uint16_t n = zt_f32_to_bf16(NAN);
    ck_assert_msg((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0, "NaN became 0x%04x", n);
    /* a NaN whose payload lives only in the dropped bits must stay NaN */
    n = zt_f32_to_bf16(f32_of_bits(0xff800001u));
    ck_assert_msg((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0 && (n & 0x8000),
                  "-NaN(1) became 0x%04x", n);
    ck_assert_uint_eq(zt_f32_to_bf16(f32_of_bits(0x00010000u)), 0x0001); /* float subnormal */
}
END_TEST

START_TEST(test_f16_rounds_to_nearest_even)
{
    ck_assert_uint_eq(zt_f32_to_f16(1.0f), 0x3c00);
    ck_assert_uint_eq(zt_f32_to_f16(-2.0f), 0xc000);
    /* 1 + 2^-11 is halfway between 0x3c00 (even) and 0x3c01: down */
    ck_assert_uint_eq(zt_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    /* 1 + 3*2^-11 is halfway between 0x3c01 and 0x3c02 (even): up */
    ck_assert_uint_eq(zt_f32_to_f16(1.0f + 0x3p-11f), 0x3c02);
    ck_assert_uint_eq(zt_f32_to_f16(nextafterf(1.0f + 0x1p-11f, 2.0f)), 0x3c01);
    ck_assert_uint_eq(zt_f32_to_f16(0.1f), 0x2e66);
}
END_TEST

START_TEST(test_f16_overflow_inf_nan)
{
    ck_assert_uint_eq(zt_f32_to_f16(65504.0f), 0x7bff);
    ck_assert_uint_eq(zt_f32_to_f16(65519.99f), 0x7bff);
    ck_assert_uint_eq(zt_f32_to_f16(65520.0f), 0x7c00); /* the tie goes to "even" inf */
    ck_assert_uint_eq(zt_f32_to_f16(-1e10f), 0xfc00);
    ck_assert_uint_eq(zt_f32_to_f16(INFINITY), 0x7c00);
    ck_assert_uint_eq(zt_f32_to_f16(-INFINITY), 0xfc00);
    uint16_t n = zt_f32_to_f16(NAN);
    ck_assert_msg((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0, "NaN became 0x%04x", n);
    n = zt_f32_to_f16(f32_of_bits(0xff800001u)); /* payload only in dropped bits */
    ck_assert_msg((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0 && (n & 0x8000),
                  "-NaN(1) became 0x%04x", n);
    ck_assert(isinf(zt_f16_to_f32(0x7c00)) && zt_f16_to_f32(0x7c00) > 0);
    ck_assert(isnan(zt_f16_to_f32(0x7e00)));
}
END_TEST

START_TEST(test_f16_subnormals)
{
    ck_assert_uint_eq(zt_f32_to_f16(0x1p-24f), 0x0001); /* smallest subnormal */
    ck_assert_uint_eq(zt_f32_to_f16(0x1p-25f), 0x0000); /* tie with 0: even */
    ck_assert_uint_eq(zt_f32_to_f16(nextafterf(0x1p-25f, 1.0f)), 0x0001);
    ck_assert_uint_eq(zt_f32_to_f16(0x3p-25f), 0x0002); /* tie between 1 and 2 */
    ck_assert_uint_eq(zt_f32_to_f16(0x5p-25f), 0x0002); /* tie between 2 and 3 */
    ck_assert_uint_eq(zt_f32_to_f16(-0x1p-24f), 0x8001);
    ck_assert_uint_eq(zt_f32_to_f16(0x3ffp-24f), 0x03ff); /* largest subnormal */
    /* just under the smallest normal rounds up into it */
    ck_assert_uint_eq(zt_f32_to_f16(nextafterf(0x1p-14f, 0.0f)), 0x0400);
    ck_assert_uint_eq(zt_f32_to_f16(0x1p-14f), 0x0400);
    ck_assert_uint_eq(zt_f32_to_f16(1e-30f), 0x0000);
    ck_assert_uint_eq(zt_f32_to_f16(-1e-30f), 0x8000);
    ck_assert_uint_eq(zt_f32_to_f16(f32_of_bits(1)), 0x0000); /* float subnormal */
    ck_assert(zt_f16_to_f32(0x0001) == 0x1p-24f);
    ck_assert(zt_f16_to_f32(0x83ff) == -0x3ffp-24f);
}
END_TEST

/* Whether h is the correctly rounded 16-bit value of x: no neighbour is
 * nearer, and on a tie the chosen one has an even last bit. */
static int is_nearest(float x, uint16_t h, double (*decode)(uint16_t))
{
    double v = decode(h), err = fabs(v - (double)x);
    for (int d = -1; d <= 1; d += 2) {
        int nb = (int)h + d;
        if (nb < 0 || nb > 0xffff || ((nb ^ h) & 0x8000))
            continue; /* neighbours across the sign are farther anyway */
        double w = decode((uint16_t)nb);
        if (isnan(w) || isinf(w))
            continue;
        double e = fabs(w - (double)x);
        if (e < err || (e == err && (h & 1)))
            return 0;
    }
    return 1;
}

START_TEST(test_random_floats_round_to_nearest)
{
    uint64_t s = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < 200000; i++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        uint32_t bits = (uint32_t)(s >> 32);
        float x = f32_of_bits(bits);
        /* f16: a float in the f16 range, some subnormal-sized */
        float xh = f32_of_bits((bits & 0x80000000u) |
                               (0x33000000u + (bits & 0x7fffffu) + (((bits >> 23) % 41u) << 23)));
        if (fabsf(xh) < 65504.0f) {
            uint16_t h = zt_f32_to_f16(xh);
            ck_assert_msg(is_nearest(xh, h, f16_reference), "f16(%a) = 0x%04x", xh, h);
        }
        if (!isnan(x) && !isinf(x) && fabsf(x) < 0x1.fep127f) {
            uint16_t b = zt_f32_to_bf16(x);
            ck_assert_msg(is_nearest(x, b, bf16_reference), "bf16(%a) = 0x%04x", x, b);
        }
    }
}
END_TEST

static Suite *half_suite(void)
{
    Suite *s = suite_create("half");
    TCase *tc = tcase_create("conversions");
    tcase_add_test(tc, test_f16_decodes_every_pattern);
    tcase_add_test(tc, test_bf16_decodes_every_pattern);
    tcase_add_test(tc, test_round_trip_every_non_nan_pattern);
    tcase_add_test(tc, test_bf16_rounds_to_nearest_even);
    tcase_add_test(tc, test_bf16_overflow_inf_nan);
    tcase_add_test(tc, test_f16_rounds_to_nearest_even);
    tcase_add_test(tc, test_f16_overflow_inf_nan);
    tcase_add_test(tc, test_f16_subnormals);
    tcase_add_test(tc, test_random_floats_round_to_nearest);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return testutil_run_suite(half_suite(), 0);
}
