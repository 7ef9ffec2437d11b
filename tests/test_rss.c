/* tests/test_rss.c — the predicted peak RSS (report/rss_model.h): its parts
 * as the model defines them, and a run's, a dry run's and a plan's
 * predictions of tests/data/micro.yaml made of the same parts.
 *
 * Not timed. The measured peak is held to the prediction only within a
 * generous bound, [0.5, 2] (scripts/bench/rss_check.sh shows 0.95-1.0 on a
 * quiet machine): a loaded machine moves the threads' stacks and arenas,
 * and a sanitizer build's shadow memory and quarantine are in no part, so
 * there the bound is not checked. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/json.h"
#include "../report/rss_model.h"
#include "../worker/backend.h"
#include "../worker/ops.h"
#include "testutil.h"

/* ---- the parts ------------------------------------------------------------- */

START_TEST(total_is_the_sum_of_the_parts)
{
    const struct rss_parts p = {.baseline = 1000, .runtime = 20, .counted = 300, .data = 4};
    ck_assert_uint_eq(rss_parts_total(&p), 1324);
    const struct rss_parts none = {0};
    ck_assert_uint_eq(rss_parts_total(&none), 0);
}
END_TEST

/* Host memory counts the whole ledger; a GPU only its host-side bytes. */
START_TEST(counted_is_the_ledgers_host_bytes)
{
    uint64_t peak[LEDGER_CATEGORY_COUNT] = {0};
    peak[LEDGER_PARAMS] = 1 << 20;
    peak[LEDGER_ACTIVATIONS] = 3 << 20;
    peak[LEDGER_LOAD] = 4096;
    ck_assert_uint_eq(rss_counted(peak, 5 << 20, 1, 777, 0), 5 << 20);
    ck_assert_uint_eq(rss_counted(peak, 5 << 20, 1, 777, 999), (5 << 20) + 999);
    ck_assert_uint_eq(rss_counted(peak, 5 << 20, 0, 777, 999), 777 + 4096);
    ck_assert_uint_eq(rss_counted(peak, 5 << 20, 0, 0, 0), 4096);
}
END_TEST

/* A token file counts its header's tokens, text a token a byte, a folder
 * its files (nested ones too), a missing path nothing; 4 bytes a token. */
START_TEST(data_estimate_counts_tokens)
{
    const char *dir = testutil_tmpdir("rss-data");
    unsigned char tok[40 + 2000] = {0};
    memcpy(tok, "ZTTOKENS", 8);
    testutil_put_le(tok + 8, 1, 4);
    testutil_put_le(tok + 12, 2, 4);
    testutil_put_le(tok + 16, 5000, 4);
    testutil_put_le(tok + 24, 1000, 8);
    testutil_write_file(testutil_path_in(dir, "a.tok"), tok, sizeof tok);
    char sub[4096];
    snprintf(sub, sizeof sub, "%s", testutil_path_in(dir, "texts"));
    ck_assert_int_eq(system(testutil_fmt("mkdir -p %s/deeper", sub)), 0);
    testutil_write_repeated(testutil_path_in(sub, "one.txt"), "0123456789", 30);
    testutil_write_repeated(testutil_path_in(sub, "deeper/two.txt"), "abcde", 4);
    char a[4096], t[4096], missing[4096];
    snprintf(a, sizeof a, "%s", testutil_path_in(dir, "a.tok"));
    snprintf(t, sizeof t, "%s", sub);
    snprintf(missing, sizeof missing, "%s", testutil_path_in(dir, "nothing-here"));
    char *one[] = {a}, *all[] = {a, t, missing};
    ck_assert_uint_eq(rss_data_estimate(one, 1), 4 * 1000);
    ck_assert_uint_eq(rss_data_estimate(all, 3), 4 * (1000 + 300 + 20));
    ck_assert_uint_eq(rss_data_estimate(all + 2, 1), 0);
}
END_TEST

/* The probe runs its product on the CPU and gives back what it kept: no
 * more than the product's own buffers would have been many times over
 * (what the libraries keep is bounded); a device that is not host memory
 * is not probed. */
START_TEST(probe_measures_host_backends_only)
{
    struct ledger ledger;
    struct compute_backend be;
    ledger_init(&ledger, 0);
    ck_assert_int_eq(compute_backend_open("cpu", -1, &ledger, &be), ZT_OK);
    uint64_t kept = UINT64_MAX;
    ck_assert_int_eq(rss_probe_runtime(&be, ZT_F32, 64, 64, 256, &kept), ZT_OK);
    ck_assert_uint_lt(kept, (uint64_t)1 << 30);
    struct compute_backend device = be;
    device.host_memory = 0;
    kept = 1;
    ck_assert_int_eq(rss_probe_runtime(&device, ZT_F32, 64, 64, 256, &kept), ZT_OK);
    ck_assert_uint_eq(kept, 0);
    compute_backend_close(&be);
    ck_assert_uint_eq(ledger.total_current, 0); /* the probe's buffers are not the run's */
}
END_TEST

/* ---- a run, its dry run and its plan -------------------------------------- */

static void report(const char *dir, const char *name, const char *extra, struct json_value *out)
{
    const char *log = testutil_path_in(dir, testutil_fmt("%s.log", name));
    char log_path[4096];
    snprintf(log_path, sizeof log_path, "%s", log);
    ck_assert_msg(testutil_run(log_path,
                               "mpirun -np 1 %s train %s --set run.steps=1 --set "
                               "run.output_dir=%s/%s --set run.save_final=false %s "
                               "--memory-report %s/%s.json",
                               testutil_binary(), testutil_source_path("tests/data/micro.yaml"),
                               dir, name, extra, dir, name) == 0,
                  "%s failed:\n%s", name, testutil_slurp(log_path));
    testutil_load_json(testutil_path_in(dir, testutil_fmt("%s.json", name)), out);
}

static const struct json_value *rank0(const struct json_value *report)
{
    const struct json_value *ranks = testutil_json_member(report, "ranks");
    ck_assert_uint_eq(ranks->n, 1);
    return &ranks->items[0];
}

/* On the CPU the counted part is the ledger's total peak; the dry run and
 * the plan estimate the data from the files as the run counts its tokens:
 * byte-tokenized text, a token a byte (the validation tail's split rounds
 * to whole tokens, 4 bytes at most apart); the measured parts are
 * positive. */
START_TEST(run_dry_run_and_plan_agree_on_the_parts)
{
    const char *dir = testutil_tmpdir("rss-run");
    struct json_value run, dry, plan;
    report(dir, "run", "", &run);
    report(dir, "dry", "--dry-run", &dry);
    const struct json_value *r = rank0(&run), *d = rank0(&dry);
    const struct json_value *rp = testutil_json_member(r, "rss_predicted"),
                            *dp = testutil_json_member(d, "rss_predicted");
    ck_assert_uint_eq(testutil_json_count(rp, "counted"), testutil_json_count(r, "total_peak"));
    ck_assert_uint_eq(testutil_json_count(dp, "counted"), testutil_json_count(d, "total_peak"));
    ck_assert_uint_eq(testutil_json_count(dp, "counted"), testutil_json_count(rp, "counted"));
    const uint64_t data = testutil_json_count(rp, "data"),
                   estimated = testutil_json_count(dp, "data");
    ck_assert_msg(data > 0 && (data > estimated ? data - estimated : estimated - data) <= 4,
                  "data: the run's %llu bytes, the dry run's estimate %llu",
                  (unsigned long long)data, (unsigned long long)estimated);
    ck_assert_uint_gt(testutil_json_count(rp, "baseline"), 0);
    ck_assert_uint_gt(testutil_json_count(dp, "baseline"), 0);
    ck_assert_uint_eq(testutil_json_count(rp, "total"),
                      testutil_json_count(rp, "baseline") + testutil_json_count(rp, "runtime") +
                          testutil_json_count(rp, "counted") + testutil_json_count(rp, "data"));
#if !defined(__SANITIZE_ADDRESS__)
    const double ratio =
        (double)testutil_json_count(dp, "total") / (double)testutil_json_count(r, "rss_peak");
    ck_assert_msg(ratio > 0.5 && ratio < 2.0, "predicted / measured peak RSS %.3f", ratio);
#endif
    ck_assert_int_eq(
        testutil_run(testutil_path_in(dir, "plan.log"),
                     "%s plan %s --gpus 1 --machine cpu-this --global-batch 2 --all --json "
                     "%s/plan.json",
                     testutil_binary(), testutil_source_path("tests/data/micro.yaml"), dir),
        0);
    testutil_load_json(testutil_path_in(dir, "plan.json"), &plan);
    const struct json_value *layouts = testutil_json_member(&plan, "layouts");
    ck_assert_uint_gt(layouts->n, 0);
    for (size_t i = 0; i < layouts->n; i++) {
        const struct json_value *roles = testutil_json_member(&layouts->items[i], "roles");
        for (size_t k = 0; k < roles->n; k++) {
            const struct json_value *p = testutil_json_member(&roles->items[k], "rss_predicted");
            ck_assert_uint_eq(testutil_json_count(p, "counted"),
                              testutil_json_count(&roles->items[k], "total_peak"));
            ck_assert_uint_eq(testutil_json_count(p, "data"), estimated);
        }
    }
    json_free(&plan);
    json_free(&run);
    json_free(&dry);
}
END_TEST

static Suite *rss_suite(void)
{
    Suite *s = suite_create("rss");
    TCase *parts = tcase_create("parts");
    tcase_add_test(parts, total_is_the_sum_of_the_parts);
    tcase_add_test(parts, counted_is_the_ledgers_host_bytes);
    tcase_add_test(parts, data_estimate_counts_tokens);
    tcase_add_test(parts, probe_measures_host_backends_only);
    suite_add_tcase(s, parts);
    TCase *runs = testutil_tcase(s, "runs", 300);
    tcase_add_test(runs, run_dry_run_and_plan_agree_on_the_parts);
    return s;
}

int main(void)
{
    return testutil_run_suite(rss_suite(), 0);
}
