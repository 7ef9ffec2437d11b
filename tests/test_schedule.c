/* tests/test_schedule.c — schedule_lr against values worked out by hand
 * from DeepSpeed's lr_schedules.py at the steps where the formulas change:
 * step 0, inside the warmup, its last step, the first step after it, the
 * middle and end of the decay, and past the end. The arithmetic is written
 * next to each value; log is the natural log, so log(5)/log(10) =
 * 0.698970004336019.
 */
#include <check.h>

#include "../worker/schedule.h"
#include "testutil.h"

#define TOL 1e-15

static struct lr_schedule base(enum lr_schedule_kind kind, enum lr_warmup_type warmup)
{
    struct lr_schedule c = {0};
    c.lr = 0.01;
    c.kind = kind;
    c.warmup_type = warmup;
    c.warmup_min_lr = 0.001;
    c.warmup_max_lr = 0.01;
    c.warmup_num_steps = 10;
    c.total_num_steps = 110;
    c.warmup_min_ratio = 0.1;
    c.cos_min_ratio = 0.01;
    return c;
}

START_TEST(test_none_is_constant)
{
    struct lr_schedule c = base(LR_SCHED_NONE, LR_WARMUP_LOG);
    ck_assert_double_eq(schedule_lr(&c, 0), 0.01);
    ck_assert_double_eq(schedule_lr(&c, 5), 0.01);
    ck_assert_double_eq(schedule_lr(&c, 1000000), 0.01);
}
END_TEST

START_TEST(test_warmup_lr_log)
{
    struct lr_schedule c = base(LR_SCHED_WARMUP_LR, LR_WARMUP_LOG);
    ck_assert_double_eq_tol(schedule_lr(&c, 0), 0.001, TOL); /* log(1) = 0 */
    /* 0.001 + 0.009 * log(5)/log(10) = 0.001 + 0.009 * 0.698970004336019 */
    ck_assert_double_eq_tol(schedule_lr(&c, 4), 0.007290730039024168, TOL);
    ck_assert_double_eq_tol(schedule_lr(&c, 9), 0.01, TOL); /* log(10)/log(10) */
    ck_assert_double_eq_tol(schedule_lr(&c, 10), 0.01, TOL);
    ck_assert_double_eq_tol(schedule_lr(&c, 5000), 0.01, TOL);
}
END_TEST

START_TEST(test_warmup_lr_linear)
{
    struct lr_schedule c = base(LR_SCHED_WARMUP_LR, LR_WARMUP_LINEAR);
    ck_assert_double_eq_tol(schedule_lr(&c, 0), 0.001, TOL);
    ck_assert_double_eq_tol(schedule_lr(&c, 4), 0.0046, TOL); /* 0.001 + 0.009 * 4/10 */
    ck_assert_double_eq_tol(schedule_lr(&c, 9), 0.0091, TOL); /* 0.001 + 0.009 * 9/10 */
    ck_assert_double_eq_tol(schedule_lr(&c, 10), 0.01, TOL);
    ck_assert_double_eq_tol(schedule_lr(&c, 5000), 0.01, TOL);
}
END_TEST

/* DeepSpeed warms up over max(2, warmup_num_steps) steps. */
START_TEST(test_short_warmup_is_two_steps)
{
    struct lr_schedule c = base(LR_SCHED_WARMUP_LR, LR_WARMUP_LINEAR);
    for (long w = 0; w <= 2; w++) {
        c.warmup_num_steps = w;
        ck_assert_double_eq_tol(schedule_lr(&c, 0), 0.001, TOL);
        ck_assert_double_eq_tol(schedule_lr(&c, 1), 0.0055, TOL); /* 0.001 + 0.009 / 2 */
        ck_assert_double_eq_tol(schedule_lr(&c, 2), 0.01, TOL);
    }
    c.warmup_type = LR_WARMUP_LOG;
    c.warmup_num_steps = 1;
    ck_assert_double_eq_tol(schedule_lr(&c, 1), 0.01, TOL); /* log(2)/log(2), finite */
}
END_TEST

START_TEST(test_warmup_decay_lr_linear)
{
    struct lr_schedule c = base(LR_SCHED_WARMUP_DECAY_LR, LR_WARMUP_LINEAR);
    ck_assert_double_eq_tol(schedule_lr(&c, 0), 0.001, TOL);
    ck_assert_double_eq_tol(schedule_lr(&c, 5), 0.0055, TOL);   /* 0.001 + 0.009 * 5/10 */
    ck_assert_double_eq_tol(schedule_lr(&c, 10), 0.01, TOL);    /* (110-10)/(110-10) = 1 */
    ck_assert_double_eq_tol(schedule_lr(&c, 60), 0.0055, TOL);  /* factor (110-60)/100 */
    ck_assert_double_eq_tol(schedule_lr(&c, 85), 0.00325, TOL); /* 0.001 + 0.009 * 0.25 */
    ck_assert_double_eq_tol(schedule_lr(&c, 110), 0.001, TOL);  /* factor 0: min_lr */
    ck_assert_double_eq_tol(schedule_lr(&c, 400), 0.001, TOL);  /* max(0, negative) */
}
END_TEST

START_TEST(test_warmup_decay_lr_log)
{
    struct lr_schedule c = base(LR_SCHED_WARMUP_DECAY_LR, LR_WARMUP_LOG);
    /* 0.001 + 0.009 * log(4)/log(10) = 0.001 + 0.009 * 0.602059991327962 */
    ck_assert_double_eq_tol(schedule_lr(&c, 3), 0.00641853992195166, TOL);
    ck_assert_double_eq_tol(schedule_lr(&c, 9), 0.01, TOL);
    ck_assert_double_eq_tol(schedule_lr(&c, 60), 0.0055, TOL);
    /* With warmup_min_lr 0 the decay is max_lr * factor. */
    c.warmup_min_lr = 0.0;
    ck_assert_double_eq_tol(schedule_lr(&c, 85), 0.0025, TOL);
}
END_TEST

START_TEST(test_warmup_cosine_lr_linear)
{
    struct lr_schedule c = base(LR_SCHED_WARMUP_COSINE_LR, LR_WARMUP_LINEAR);
    ck_assert_double_eq_tol(schedule_lr(&c, 0), 0.001, TOL);  /* 0.01 * 0.1 */
    ck_assert_double_eq_tol(schedule_lr(&c, 5), 0.0055, TOL); /* 0.01 * (0.1 + 0.9 * 0.5) */
    ck_assert_double_eq_tol(schedule_lr(&c, 9), 0.0091, TOL); /* 0.01 * (0.1 + 0.9 * 0.9) */
    /* First cosine step counts 1 of 100: 0.01 * (0.01 + 0.99 * (1 + cos(pi/100)) / 2),
     * cos(pi/100) = 0.999506560365732 */
    ck_assert_double_eq_tol(schedule_lr(&c, 10), 0.009997557473810372, TOL);
    /* 25 of 100: 0.01 * (0.01 + 0.99 * (1 + cos(pi/4)) / 2) */
    ck_assert_double_eq_tol(schedule_lr(&c, 34), 0.00855017856687341, TOL);
    /* 50 of 100: cos(pi/2) = 0, 0.01 * (0.01 + 0.99 * 0.5) */
    ck_assert_double_eq_tol(schedule_lr(&c, 59), 0.00505, TOL);
    /* 100 of 100: cos(pi) = -1, 0.01 * 0.01 */
    ck_assert_double_eq_tol(schedule_lr(&c, 109), 0.0001, TOL);
    ck_assert_double_eq_tol(schedule_lr(&c, 110), 0.0001, TOL);
    ck_assert_double_eq_tol(schedule_lr(&c, 10000), 0.0001, TOL);
}
END_TEST

START_TEST(test_warmup_cosine_lr_log)
{
    struct lr_schedule c = base(LR_SCHED_WARMUP_COSINE_LR, LR_WARMUP_LOG);
    ck_assert_double_eq_tol(schedule_lr(&c, 0), 0.001, TOL);
    /* 0.01 * (0.1 + 0.9 * log(5)/log(10)) */
    ck_assert_double_eq_tol(schedule_lr(&c, 4), 0.007290730039024168, TOL);
    ck_assert_double_eq_tol(schedule_lr(&c, 9), 0.01, TOL);
    ck_assert_double_eq_tol(schedule_lr(&c, 59), 0.00505, TOL);
}
END_TEST

START_TEST(test_negative_step_is_step_zero)
{
    struct lr_schedule c = base(LR_SCHED_WARMUP_DECAY_LR, LR_WARMUP_LOG);
    ck_assert_double_eq(schedule_lr(&c, -3), schedule_lr(&c, 0));
}
END_TEST

static Suite *schedule_suite(void)
{
    Suite *s = suite_create("schedule");
    TCase *tc = tcase_create("schedule");
    tcase_add_test(tc, test_none_is_constant);
    tcase_add_test(tc, test_warmup_lr_log);
    tcase_add_test(tc, test_warmup_lr_linear);
    tcase_add_test(tc, test_short_warmup_is_two_steps);
    tcase_add_test(tc, test_warmup_decay_lr_linear);
    tcase_add_test(tc, test_warmup_decay_lr_log);
    tcase_add_test(tc, test_warmup_cosine_lr_linear);
    tcase_add_test(tc, test_warmup_cosine_lr_log);
    tcase_add_test(tc, test_negative_step_is_step_zero);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return testutil_run_suite(schedule_suite(), 0);
}
