/* tests/test_common.c — status list, counter-based generator, ledger. */
#include <check.h>
#include <math.h>
#include <string.h>

#include "common/ledger.h"
#include "common/rng.h"
#include "common/status.h"
#include "testutil.h"

static zt_status fails_deep(void)
{
    return zt_error_set(ZT_ERR_CONFIG, "x.yaml:3:5: model.n_head: must be > 0, got %d", -1);
}

static zt_status propagates(void)
{
    ZT_TRY(fails_deep());
    return ZT_OK;
}

START_TEST(status_names_codes_and_messages)
{
    ck_assert_str_eq(zt_status_str(ZT_OK), "ZT_OK");
    ck_assert_str_eq(zt_status_str(ZT_ERR_CONFIG), "ZT_ERR_CONFIG");
    ck_assert_int_eq(zt_status_exit_code(ZT_OK), 0);
    ck_assert_int_eq(zt_status_exit_code(ZT_ERR_CONFIG), 2);
    ck_assert_int_eq(zt_status_exit_code(ZT_ERR_USAGE), 2);
    ck_assert_int_eq(zt_status_exit_code(ZT_ERR_UNSUPPORTED), 2);
    ck_assert_int_eq(zt_status_exit_code(ZT_ERR_IO), 1);
    ck_assert_int_eq(zt_status_exit_code((zt_status)999), 1);
    ck_assert_int_eq(propagates(), ZT_ERR_CONFIG);
    ck_assert_str_eq(zt_error_message(), "x.yaml:3:5: model.n_head: must be > 0, got -1");
    ck_assert(strstr(zt_error_trace(), "test_common.c") != NULL);
    zt_error_clear();
    ck_assert_str_eq(zt_error_message(), "");
}
END_TEST

START_TEST(rng_is_a_pure_function_of_key_and_counter)
{
    ck_assert_uint_eq(rng_u64(1, 5), rng_u64(1, 5));
    ck_assert_uint_ne(rng_u64(1, 5), rng_u64(1, 6));
    ck_assert_uint_ne(rng_u64(1, 5), rng_u64(2, 5));
    ck_assert_uint_ne(rng_key(1, "init"), rng_key(1, "data"));
    const int n = 200000;
    double s = 0, s2 = 0, u = 0, u2 = 0;
    for (int i = 0; i < n; i++) {
        double x = rng_normal(9, (uint64_t)i), y = rng_uniform(9, (uint64_t)i);
        ck_assert(y >= 0.0 && y < 1.0);
        s += x, s2 += x * x, u += y, u2 += y * y;
    }
    /* Sample moments: 5 standard errors. */
    ck_assert_msg(fabs(s / n) < 5 / sqrt(n), "normal mean %g", s / n);
    ck_assert_msg(fabs(s2 / n - 1.0) < 5 * sqrt(2.0 / n), "normal var %g", s2 / n);
    ck_assert_msg(fabs(u / n - 0.5) < 5 * sqrt(1.0 / 12 / n), "uniform mean %g", u / n);
    ck_assert_msg(fabs(u2 / n - u / n * u / n - 1.0 / 12) < 1e-3, "uniform var");
}
END_TEST

START_TEST(ledger_tracks_current_and_peaks)
{
    struct ledger l;
    ledger_init(&l, 0);
    ledger_add(&l, LEDGER_PARAMS, 100);
    ledger_add(&l, LEDGER_ACTIVATIONS, 50);
    ledger_sub(&l, LEDGER_ACTIVATIONS, 50);
    ledger_add(&l, LEDGER_WORKSPACE, 30);
    ck_assert_uint_eq(l.current[LEDGER_PARAMS], 100);
    ck_assert_uint_eq(l.peak[LEDGER_ACTIVATIONS], 50);
    ck_assert_uint_eq(l.current[LEDGER_ACTIVATIONS], 0);
    ck_assert_uint_eq(l.total_current, 130);
    ck_assert_uint_eq(l.total_peak, 150);
    ck_assert_str_eq(ledger_category_name(LEDGER_OPTIMIZER_STATES), "optimizer_states");
    ck_assert_str_eq(ledger_category_name(LEDGER_GATHERED_PARAMS), "gathered_params");
    ck_assert_uint_gt(ledger_rss_peak(), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("common");
    TCase *tc = tcase_create("common");
    tcase_add_test(tc, status_names_codes_and_messages);
    tcase_add_test(tc, rng_is_a_pure_function_of_key_and_counter);
    tcase_add_test(tc, ledger_tracks_current_and_peaks);
    suite_add_tcase(s, tc);
    return testutil_run_suite(s, 0);
}
