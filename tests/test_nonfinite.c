/* tests/test_nonfinite.c — steps with non-finite values, through the binary
 * under mpirun: run.on_nonfinite stop and skip, the first non-finite value
 * named once by the rank that met it, its report, the skip limit, LOMO's
 * measuring pass, the key's refusals, and fp16's overflows left to the
 * loss scaler.
 *
 * Diverging runs are configs/tiny.yaml at optimizer.params.lr 1e6, whose
 * fourth step is the first with a non-finite gradient norm. Runs that must
 * meet a non-finite value at a known place use zerotrain_faulty's
 * ZT_TEST_POISON (a NaN written into one block's attention output). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/json.h"
#include "testutil.h"

#define MPIRUN "mpirun --oversubscribe -np"

/* The report of step `step` in run folder `dir`, parsed; fails the test if
 * it is missing or not JSON. */
static void read_report(const char *dir, long step, struct json_value *out)
{
    const char *path = testutil_fmt("%s/nonfinite/step-%ld.json", dir, step);
    ck_assert_msg(access(path, F_OK) == 0, "no report %s", path);
    testutil_load_json(path, out);
    ck_assert_int_eq(out->type, JSON_OBJECT);
}

static const struct json_value *member(const struct json_value *obj, const char *key,
                                       enum json_type type)
{
    const struct json_value *v = json_object_get(obj, key, NULL);
    ck_assert_msg(v != NULL, "the report has no \"%s\"", key);
    ck_assert_msg(v->type == type, "the report's \"%s\" is %s", key, json_type_name(v->type));
    return v;
}

static long int_member(const struct json_value *obj, const char *key)
{
    return (long)member(obj, key, JSON_INT)->real;
}

/* The fields every report has, with the values the caller knows. */
static void check_report(const struct json_value *r, long step, int rank, const char *phase,
                         int micro_rows)
{
    ck_assert_int_eq(int_member(r, "step"), step);
    if (rank >= 0)
        ck_assert_int_eq(int_member(r, "rank"), rank);
    const char *p = member(r, "phase", JSON_STRING)->str;
    if (phase)
        ck_assert_str_eq(p, phase);
    ck_assert_msg(strlen(member(r, "tensor", JSON_STRING)->str) > 0, "no tensor named");
    const struct json_value *st = member(r, "stats", JSON_OBJECT);
    const long numel = int_member(st, "numel"),
               bad = int_member(st, "nan") + int_member(st, "posinf") + int_member(st, "neginf");
    ck_assert_int_gt(numel, 0);
    ck_assert_msg(bad > 0 && bad <= numel, "%ld non-finite of %ld", bad, numel);
    ck_assert_int_eq(int_member(st, "finite"), numel - bad);
    const struct json_value *samples = member(r, "samples", JSON_ARRAY);
    ck_assert_int_eq((int)samples->n, micro_rows);
    for (size_t i = 0; i < samples->n; i++) {
        ck_assert_int_eq(samples->items[i].type, JSON_OBJECT);
        (void)int_member(&samples->items[i], "sample");
        (void)int_member(&samples->items[i], "window");
    }
}

/* Lines of the log that are error messages. */
static int errors_in(const char *log)
{
    return testutil_count(testutil_slurp(log), "zerotrain: error:");
}

/* configs/tiny.yaml at 2 ranks with a learning rate that diverges, in
 * each stage and precision: exit 1 at the fourth step, one message naming
 * the rank, phase, step and tensor, and its report. */
START_TEST(diverging_run_stops_naming_its_first_nonfinite_value)
{
    static const struct {
        int stage;
        const char *precision; /* extra --set */
    } cases[] = {
        {0, ""},
        {3, ""},
        {3, "--set bf16.enabled=true"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *dir = testutil_tmpdir(testutil_fmt("nonfinite-stop-%zu", i));
        const char *log = testutil_path_in(dir, "log");
        const int rc = testutil_run(
            log,
            MPIRUN " 2 %s train %s --quiet --no-progress --set run.output_dir=%s "
                   "--set optimizer.params.lr=1e6 --set run.steps=8 --set run.eval_interval=0 "
                   "--set zero_optimization.stage=%d %s",
            testutil_binary(), testutil_source_path("configs/tiny.yaml"), dir, cases[i].stage,
            cases[i].precision);
        const char *out = testutil_slurp(log);
        ck_assert_msg(rc == 1, "case %zu: exit %d\n%s", i, rc, out);
        ck_assert_msg(errors_in(log) == 1, "case %zu: not one error message\n%s", i, out);
        const char *line = strstr(out, "zerotrain: error: rank ");
        ck_assert_msg(line, "case %zu: the message names no rank\n%s", i, out);
        int rank = -1;
        long step = 0;
        ck_assert_msg(sscanf(line, "zerotrain: error: rank %d: step %ld: first non-finite value",
                             &rank, &step) == 2,
                      "case %zu: %s", i, line);
        ck_assert_msg(strstr(line, "; report: ") && strstr(line, "training diverged"),
                      "case %zu: %s", i, line);
        ck_assert_msg(step >= 2 && step <= 8, "case %zu: step %ld", i, step);
        struct json_value r;
        read_report(dir, step, &r);
        check_report(&r, step, rank, NULL, 8);
        const char *phase = member(&r, "phase", JSON_STRING)->str;
        const char *tensor = member(&r, "tensor", JSON_STRING)->str;
        ck_assert_msg(strstr(line, phase) && strstr(line, tensor), "case %zu: %s", i, line);
        json_free(&r);
        /* the steps before it were logged (test_output_json parses them) */
        const char *metrics = testutil_slurp(testutil_path_in(dir, "metrics.jsonl"));
        ck_assert_int_eq(testutil_count(metrics, "{\"step\": "), step - 1);
    }
}
END_TEST

/* A NaN written into block 2's attention output in micro batch 1 of step 3
 * on rank 1 (stage 2, two micro batches): rank 1 prints, naming exactly
 * that. */
START_TEST(the_rank_that_met_the_value_names_the_op)
{
    const char *dir = testutil_tmpdir("nonfinite-poison-stop");
    const char *log = testutil_path_in(dir, "log");
    const int rc =
        testutil_run(log,
                     "ZT_TEST_POISON=1,3,1,2 " MPIRUN " 2 %s train %s --quiet --no-progress "
                     "--set run.output_dir=%s --set run.steps=5 --set run.eval_interval=0 "
                     "--set gradient_accumulation_steps=2 --set zero_optimization.stage=2",
                     testutil_faulty_binary(), testutil_source_path("configs/tiny.yaml"), dir);
    const char *out = testutil_slurp(log);
    ck_assert_msg(rc == 1, "exit %d\n%s", rc, out);
    ck_assert_msg(errors_in(log) == 1, "not one error message\n%s", out);
    ck_assert_msg(strstr(out, "zerotrain: error: rank 1: step 3: first non-finite value, micro "
                              "batch 1: forward activation transformer.h.2 attention output: 1 "
                              "NaN, 0 +inf, 0 -inf of "),
                  "%s", out);
    struct json_value r;
    read_report(dir, 3, &r);
    check_report(&r, 3, 1, "forward activation", 8);
    ck_assert_int_eq(int_member(&r, "micro_batch"), 1);
    ck_assert_str_eq(member(&r, "tensor", JSON_STRING)->str, "transformer.h.2 attention output");
    ck_assert_int_eq(int_member(member(&r, "stats", JSON_OBJECT), "nan"), 1);
    json_free(&r);
}
END_TEST

/* The same poison with run.on_nonfinite skip (bf16, stage 1): the step is
 * skipped and marked, counted, reported, and training goes on to exit 0. */
START_TEST(skip_skips_the_step_and_goes_on)
{
    const char *dir = testutil_tmpdir("nonfinite-poison-skip");
    const char *log = testutil_path_in(dir, "log");
    const int rc = testutil_run(
        log,
        "ZT_TEST_POISON=0,3,0,1 " MPIRUN " 2 %s train %s --quiet --no-progress "
        "--set run.output_dir=%s --set run.steps=6 --set run.eval_interval=0 "
        "--set run.on_nonfinite=skip --set bf16.enabled=true --set zero_optimization.stage=1",
        testutil_faulty_binary(), testutil_source_path("configs/tiny.yaml"), dir);
    const char *out = testutil_slurp(log);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    ck_assert_msg(errors_in(log) == 0, "%s", out);
    ck_assert_msg(strstr(out, "zerotrain: warning: rank 0: step 3: first non-finite value, micro "
                              "batch 0: forward activation transformer.h.1 attention output") &&
                      strstr(out, "skipped (run.on_nonfinite: skip)"),
                  "%s", out);
    struct json_value r;
    read_report(dir, 3, &r);
    check_report(&r, 3, 0, "forward activation", 8);
    ck_assert_str_eq(member(&r, "on_nonfinite", JSON_STRING)->str, "skip");
    json_free(&r);
    /* metrics: six steps, the third skipped for non-finite values */
    const char *path = testutil_path_in(dir, "metrics.jsonl");
    size_t n;
    char *text = (char *)testutil_read_file(path, &n);
    text[n] = '\0'; /* the spare byte */
    int steps = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        struct json_source src = {.path = path, .code = ZT_ERR_DATA, .max_depth = 16};
        struct json_value v;
        ck_assert_msg(json_parse(&src, line, strlen(line), &v) == ZT_OK, "%s", zt_error_message());
        if (!json_object_get(&v, "loss", NULL)) {
            json_free(&v);
            continue;
        }
        const long step = int_member(&v, "step");
        steps++;
        const int skipped = member(&v, "skipped", JSON_BOOL)->boolean;
        ck_assert_int_eq(skipped, step == 3);
        ck_assert_int_eq(int_member(&v, "nonfinite_skips"), step >= 3);
        if (step == 3)
            ck_assert_str_eq(member(&v, "skip_reason", JSON_STRING)->str, "nonfinite");
        else
            ck_assert_msg(!json_object_get(&v, "skip_reason", NULL), "step %ld", step);
        const struct json_value *loss = json_object_get(&v, "loss", NULL);
        ck_assert_msg(step == 3 || (loss->type == JSON_REAL && isfinite(loss->real)),
                      "step %ld: loss", step); /* step 3's is NaN: null */
        json_free(&v);
    }
    free(text);
    ck_assert_int_eq(steps, 6);
}
END_TEST

/* run.on_nonfinite skip on a run that keeps diverging: it ends at
 * run.nonfinite_skip_limit steps in a row, exit 1, one message. */
START_TEST(skip_limit_ends_a_run_that_keeps_diverging)
{
    const char *dir = testutil_tmpdir("nonfinite-limit");
    const char *log = testutil_path_in(dir, "log");
    const int rc = testutil_run(
        log,
        MPIRUN " 2 %s train %s --quiet --no-progress --set run.output_dir=%s "
               "--set optimizer.params.lr=1e6 --set run.steps=20 --set run.eval_interval=0 "
               "--set run.on_nonfinite=skip --set run.nonfinite_skip_limit=2",
        testutil_binary(), testutil_source_path("configs/tiny.yaml"), dir);
    const char *out = testutil_slurp(log);
    ck_assert_msg(rc == 1, "exit %d\n%s", rc, out);
    ck_assert_msg(errors_in(log) == 1, "%s", out);
    ck_assert_msg(strstr(out, "zerotrain: error: rank 0: step ") &&
                      strstr(out, "2 steps in a row had non-finite values and were skipped "
                                  "(run.nonfinite_skip_limit = 2)"),
                  "%s", out);
    ck_assert_int_eq(testutil_count(out, "skipped (run.on_nonfinite: skip)"), 2);
}
END_TEST

/* LOMO updates inside the backward. With clipping its first, measuring
 * pass meets a non-finite norm before any update, so run.on_nonfinite
 * applies as to any optimizer (skip: the step skipped, its first value
 * named and reported); without clipping the update is applied before the
 * norm is known, and the run stops saying so, whatever on_nonfinite says. */
START_TEST(lomo_meets_a_nonfinite_norm_before_its_update_with_clipping)
{
    static const struct {
        const char *clip;
        int rc;
        const char *want;
    } cases[] = {
        {"1.0", 0, "skipped (run.on_nonfinite: skip)"},
        {"0", 1,
         "training diverged, and LOMO applied the step's update inside the backward before its "
         "norm was known"},
    };
    char skipped_dir[4096] = "";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *dir = testutil_tmpdir(testutil_fmt("nonfinite-lomo-%zu", i));
        if (i == 0)
            snprintf(skipped_dir, sizeof skipped_dir, "%s", dir);
        const char *log = testutil_path_in(dir, "log");
        const int rc = testutil_run(
            log,
            MPIRUN " 2 %s train %s --quiet --no-progress --set run.output_dir=%s "
                   "--set optimizer.type=LOMO --set optimizer.params.betas=null "
                   "--set optimizer.params.eps=null --set optimizer.params.lr=1e6 "
                   "--set run.steps=8 --set run.eval_interval=0 --set run.on_nonfinite=skip "
                   "--set gradient_clipping=%s",
            testutil_binary(), testutil_source_path("configs/tiny.yaml"), dir, cases[i].clip);
        const char *out = testutil_slurp(log);
        ck_assert_msg(rc == cases[i].rc, "clipping %s: exit %d\n%s", cases[i].clip, rc, out);
        ck_assert_msg(strstr(out, cases[i].want), "clipping %s:\n%s", cases[i].clip, out);
        ck_assert_int_eq(errors_in(log), cases[i].rc);
    }
    /* the skipped step's first value, named and reported */
    const char *out = testutil_slurp(testutil_path_in(skipped_dir, "log"));
    long step = 0;
    const char *line = strstr(out, "zerotrain: warning: rank ");
    ck_assert_msg(line && sscanf(line, "zerotrain: warning: rank %*d: step %ld", &step) == 1, "%s",
                  out);
    struct json_value r;
    read_report(skipped_dir, step, &r);
    check_report(&r, step, -1, NULL, 8);
    json_free(&r);
}
END_TEST

/* A config whose run section has the extra line `line`, under dir. */
static const char *config_with(const char *dir, const char *line)
{
    const char *text = testutil_slurp(testutil_source_path("tests/data/micro.yaml"));
    const char *at = strstr(text, "run:\n");
    ck_assert(at);
    const size_t head = (size_t)(at - text) + 5;
    const char *path = testutil_path_in(dir, "bad.yaml");
    char buf[8192];
    const int n = snprintf(buf, sizeof buf, "%.*s%s\n%s", (int)head, text, line, text + head);
    ck_assert(n > 0 && (size_t)n < sizeof buf);
    testutil_write_file(path, buf, (size_t)n);
    return path;
}

START_TEST(bad_values_are_refused_with_file_and_line)
{
    static const struct {
        const char *line, *message;
    } cases[] = {
        {"  on_nonfinite: ignore", "run.on_nonfinite: \"ignore\" is not one of stop, skip"},
        {"  on_nonfinite: [stop]", "run.on_nonfinite"},
        {"  nonfinite_skip_limit: 0", "run.nonfinite_skip_limit"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *dir = testutil_tmpdir(testutil_fmt("nonfinite-bad-%zu", i));
        const char *cfg = config_with(dir, cases[i].line);
        const char *log = testutil_path_in(dir, "log");
        const int rc = testutil_run(log, MPIRUN " 2 %s train %s --quiet --set run.output_dir=%s",
                                    testutil_binary(), cfg, dir);
        const char *out = testutil_slurp(log);
        ck_assert_msg(rc == 2, "case %zu: exit %d\n%s", i, rc, out);
        ck_assert_msg(errors_in(log) == 1, "case %zu: %s", i, out);
        /* the run section opens on the file's line 12: the key is on line 13 */
        ck_assert_msg(strstr(out, testutil_fmt("%s:13:", cfg)) && strstr(out, cases[i].message),
                      "case %zu: %s", i, out);
    }
}
END_TEST

/* fp16 with dynamic loss scaling: the first steps overflow at the initial
 * scale, which the scaler skips as ever: no report, no message, exit 0. */
START_TEST(fp16_overflows_stay_the_loss_scalers)
{
    const char *dir = testutil_tmpdir("nonfinite-fp16");
    const char *log = testutil_path_in(dir, "log");
    const int rc = testutil_run(
        log,
        MPIRUN " 2 %s train %s --quiet --no-progress --set run.output_dir=%s --set run.steps=6 "
               "--set run.eval_interval=0 --set fp16.enabled=true "
               "--set fp16.initial_scale_power=40",
        testutil_binary(), testutil_source_path("configs/tiny.yaml"), dir);
    const char *out = testutil_slurp(log);
    ck_assert_msg(rc == 0, "exit %d\n%s", rc, out);
    ck_assert_msg(access(testutil_path_in(dir, "nonfinite"), F_OK) != 0, "a report was written");
    ck_assert_msg(!strstr(out, "non-finite"), "%s", out);
    const char *metrics = testutil_slurp(testutil_path_in(dir, "metrics.jsonl"));
    ck_assert_msg(testutil_count(metrics, "\"skip_reason\": \"overflow\"") > 0,
                  "no overflow at loss scale 2^40:\n%s", metrics);
    ck_assert_int_eq(testutil_count(metrics, "nonfinite"), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("nonfinite");
    TCase *tc = testutil_tcase(s, "binary", 600);
    tcase_add_test(tc, bad_values_are_refused_with_file_and_line);
    tcase_add_test(tc, diverging_run_stops_naming_its_first_nonfinite_value);
    tcase_add_test(tc, the_rank_that_met_the_value_names_the_op);
    tcase_add_test(tc, skip_skips_the_step_and_goes_on);
    tcase_add_test(tc, skip_limit_ends_a_run_that_keeps_diverging);
    tcase_add_test(tc, lomo_meets_a_nonfinite_norm_before_its_update_with_clipping);
    tcase_add_test(tc, fp16_overflows_stay_the_loss_scalers);
    return testutil_run_suite(s, 0);
}
