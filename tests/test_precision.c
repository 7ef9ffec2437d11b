/* tests/test_precision.c — storage conversions and the fp16 loss scaler. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/half.h"
#include "testutil.h"
#include "worker/precision.h"

START_TEST(conversions_round_to_nearest_even)
{
    const float src[] = {1.0f, -2.5f, 1.0f + 0x1p-8f, 1.0f + 0x1p-9f, 65504.0f, 70000.0f, 0.0f};
    const size_t n = sizeof src / sizeof src[0];
    uint16_t h[8];
    float back[8];
    precision_from_f32(ZT_BF16, src, h, n);
    precision_to_f32(ZT_BF16, h, back, n);
    ck_assert(back[0] == 1.0f && back[1] == -2.5f);
    /* bf16 keeps 8 bits: 1 + 2^-8 is a tie between 1 and 1 + 2^-7, to even */
    ck_assert(back[2] == 1.0f);
    ck_assert(back[3] == 1.0f);
    ck_assert(back[5] == 70144.0f); /* bf16 has fp32's range */
    precision_from_f32(ZT_F16, src, h, n);
    precision_to_f32(ZT_F16, h, back, n);
    ck_assert(back[2] == 1.0f + 0x1p-8f); /* fp16 keeps 10 bits */
    ck_assert(back[4] == 65504.0f);
    ck_assert(isinf(back[5])); /* beyond fp16: the overflow the scaler sees */
    float f32[8];
    precision_from_f32(ZT_F32, src, f32, n);
    ck_assert(memcmp(f32, src, sizeof src) == 0);
}
END_TEST

START_TEST(add_into_sums_in_fp32_then_rounds)
{
    const float a[] = {1.0f, 256.0f, 3.0f}, b[] = {0x1p-9f, 1.0f, -3.0f};
    uint16_t ha[3], hb[3];
    float out[3];
    precision_from_f32(ZT_BF16, a, ha, 3);
    precision_from_f32(ZT_BF16, b, hb, 3);
    precision_add_into(ZT_BF16, ha, hb, 3);
    precision_to_f32(ZT_BF16, ha, out, 3);
    ck_assert(out[0] == 1.0f);   /* 1 + 2^-9 rounds back to 1 */
    ck_assert(out[1] == 256.0f); /* 257 is not a bf16: ties to even 256 */
    ck_assert(out[2] == 0.0f);
    double s = precision_sum_squares(ZT_BF16, hb, 3, 2.0);
    ck_assert(fabs(s - (4.0 * 0x1p-18 + 4.0 + 36.0)) < 1e-12);
}
END_TEST

START_TEST(dynamic_scaler_follows_deepspeed)
{
    struct loss_scaler s;
    loss_scaler_init_dynamic(&s, 16, 3, 2, 1024.0);
    ck_assert(s.scale == 65536.0);
    loss_scaler_update(&s, 1); /* first overflow uses up the hysteresis */
    ck_assert(s.scale == 65536.0);
    loss_scaler_update(&s, 1); /* second halves */
    ck_assert(s.scale == 32768.0);
    loss_scaler_update(&s, 1); /* hysteresis is not re-armed */
    ck_assert(s.scale == 16384.0);
    loss_scaler_update(&s, 0);
    loss_scaler_update(&s, 0);
    ck_assert(s.scale == 16384.0);
    loss_scaler_update(&s, 0); /* window of 3 clean steps: doubles */
    ck_assert(s.scale == 32768.0);
    for (int i = 0; i < 10; i++)
        loss_scaler_update(&s, 1);
    ck_assert(s.scale == 1024.0);        /* never below min_loss_scale */
    ck_assert(loss_scaler_at_floor(&s)); /* the next overflow stops the run */
    struct loss_scaler h;
    loss_scaler_init_dynamic(&h, 10, 3, 2, 1024.0);
    ck_assert(!loss_scaler_at_floor(&h)); /* at the minimum, the hysteresis left */
    loss_scaler_update(&h, 1);
    ck_assert(loss_scaler_at_floor(&h) && h.scale == 1024.0);
    struct loss_scaler f;
    loss_scaler_init_static(&f, 128.0);
    loss_scaler_update(&f, 1);
    loss_scaler_update(&f, 0);
    ck_assert(f.scale == 128.0 && !f.dynamic);
    ck_assert(!loss_scaler_at_floor(&f)); /* a fixed scale's overflow is an error of its own */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("precision");
    TCase *tc = tcase_create("precision");
    tcase_add_test(tc, conversions_round_to_nearest_even);
    tcase_add_test(tc, add_into_sums_in_fp32_then_rounds);
    tcase_add_test(tc, dynamic_scaler_follows_deepspeed);
    suite_add_tcase(s, tc);
    return testutil_run_suite(s, 0);
}
