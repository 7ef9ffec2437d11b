/* tests/test_cli.c — the zerotrain binary end to end, under mpirun.
 *
 * Drives the real binary (ZT_BINARY, set by CTest) as a user would and
 * checks exit codes, messages and the metrics it writes. */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testutil.h"

#define MAX_STEPS 256

/* Runs a shell command with stdout+stderr to `log`; returns the exit code. */
static int run(const char *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run(const char *log, const char *fmt, ...)
{
    char cmd[8192], full[9000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "%s >%s 2>&1", cmd, log);
    int st = system(full);
    ck_assert_msg(st != -1 && WIFEXITED(st), "command did not exit: %s", cmd);
    return WEXITSTATUS(st);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot read %s", path);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int count_occurrences(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* Reads the "loss" of every step record of a metrics file. */
static int read_losses(const char *path, double *loss)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "no metrics file %s", path);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < MAX_STEPS) {
        const char *p = strstr(line, "\"loss\": ");
        if (p && !strstr(line, "val_loss"))
            loss[n++] = strtod(p + 8, NULL);
    }
    fclose(f);
    return n;
}

static const char *binary(void)
{
    const char *b = getenv("ZT_BINARY");
    ck_assert_msg(b != NULL, "ZT_BINARY not set (run through ctest)");
    return b;
}

#define MPIRUN "mpirun --oversubscribe -np"

START_TEST(world_size_and_accumulation_are_interchangeable)
{
    const char *dir = testutil_tmpdir("cli-equiv");
    char log[600];
    snprintf(log, sizeof log, "%s/log", dir);
    const char *cfg = testutil_source_path("tests/data/micro.yaml");
    ck_assert_int_eq(run(log, MPIRUN " 1 %s train %s --quiet --set run.output_dir=%s/a "
                              "--set gradient_accumulation_steps=2 --metrics %s/a.jsonl",
                         binary(), cfg, dir, dir),
                     0);
    ck_assert_int_eq(run(log, MPIRUN " 2 %s train %s --quiet --set run.output_dir=%s/b "
                              "--set gradient_accumulation_steps=1 --metrics %s/b.jsonl",
                         binary(), cfg, dir, dir),
                     0);
    double a[MAX_STEPS], b[MAX_STEPS];
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/a.jsonl", dir);
    snprintf(pb, sizeof pb, "%s/b.jsonl", dir);
    int na = read_losses(pa, a), nb = read_losses(pb, b);
    ck_assert_int_eq(na, 10);
    ck_assert_int_eq(nb, 10);
    for (int i = 0; i < na; i++)
        ck_assert_msg(fabs(a[i] - b[i]) <= 1e-5 * fabs(a[i]),
                      "step %d: 1 rank x 2 accum loss %.9g, 2 ranks x 1 accum %.9g", i + 1, a[i],
                      b[i]);
}
END_TEST

START_TEST(tiny_loss_falls_within_100_steps)
{
    const char *dir = testutil_tmpdir("cli-tiny");
    char log[600], metrics[600];
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(metrics, sizeof metrics, "%s/m.jsonl", dir);
    ck_assert_int_eq(run(log, MPIRUN " 2 %s train %s --quiet --set run.output_dir=%s "
                              "--set run.eval_interval=0 --set run.eval_batches=4 --metrics %s",
                         binary(), testutil_source_path("configs/tiny.yaml"), dir, metrics),
                     0);
    double loss[MAX_STEPS];
    int n = read_losses(metrics, loss);
    ck_assert_int_eq(n, 100);
    double first = loss[0], last = 0.0;
    for (int i = n - 10; i < n; i++)
        last += loss[i] / 10.0;
    /* Untrained: ln(256) = 5.55. Byte-level English reaches well under 3
     * within 100 steps; a broken gradient would not. */
    ck_assert_msg(first > 5.0 && first < 6.0, "first loss %g", first);
    ck_assert_msg(last < 3.0, "mean loss of the last 10 steps %g (first %g)", last, first);
    const char *out = slurp(log);
    ck_assert_msg(strstr(out, "val loss") != NULL, "no validation loss printed:\n%s", out);
}
END_TEST

START_TEST(bad_config_exits_2_everywhere_message_once)
{
    const char *dir = testutil_tmpdir("cli-bad");
    char log[600];
    snprintf(log, sizeof log, "%s/log", dir);
    int rc = run(log, MPIRUN " 2 %s train %s --set model.n_head=3 --set run.output_dir=%s",
                 binary(), testutil_source_path("tests/data/micro.yaml"), dir);
    ck_assert_int_eq(rc, 2);
    const char *out = slurp(log);
    ck_assert_msg(count_occurrences(out, "zerotrain: error:") == 1, "output:\n%s", out);
    ck_assert_msg(strstr(out, "n_head") != NULL, "output:\n%s", out);
}
END_TEST

START_TEST(missing_data_names_the_path)
{
    const char *dir = testutil_tmpdir("cli-nodata");
    char log[600];
    snprintf(log, sizeof log, "%s/log", dir);
    int rc = run(log, MPIRUN " 2 %s train %s --set data.train=/nonexistent/corpus.bin "
                              "--set run.output_dir=%s",
                 binary(), testutil_source_path("tests/data/micro.yaml"), dir);
    ck_assert_int_eq(rc, 2);
    const char *out = slurp(log);
    ck_assert_msg(strstr(out, "/nonexistent/corpus.bin") != NULL, "output:\n%s", out);
    ck_assert_int_eq(count_occurrences(out, "zerotrain: error:"), 1);
}
END_TEST

START_TEST(usage_errors_and_info_commands)
{
    const char *dir = testutil_tmpdir("cli-usage");
    char log[600];
    snprintf(log, sizeof log, "%s/log", dir);
    ck_assert_int_eq(run(log, "%s version", binary()), 0);
    ck_assert(strstr(slurp(log), "zerotrain ") != NULL);
    ck_assert_int_eq(run(log, "%s help", binary()), 0);
    ck_assert(strstr(slurp(log), "prepare") != NULL);
    ck_assert_int_eq(run(log, "%s frobnicate", binary()), 2);
    ck_assert(strstr(slurp(log), "unknown command 'frobnicate'") != NULL);
    ck_assert_int_eq(run(log, "%s", binary()), 2);
    ck_assert_int_eq(run(log, MPIRUN " 1 %s train", binary()), 2);
    ck_assert(strstr(slurp(log), "missing CONFIG") != NULL);
    ck_assert_int_eq(run(log, MPIRUN " 1 %s train x.yaml --bogus", binary()), 2);
    ck_assert(strstr(slurp(log), "--bogus") != NULL);
    ck_assert_int_eq(run(log, "%s prepare --out", binary()), 2);
}
END_TEST

START_TEST(prepare_then_train_and_eval_on_the_token_file)
{
    const char *dir = testutil_tmpdir("cli-prepare");
    char log[600];
    snprintf(log, sizeof log, "%s/log", dir);
    ck_assert_int_eq(run(log, "%s prepare --out %s/lic.tok /usr/share/common-licenses", binary(),
                         dir),
                     0);
    ck_assert(strstr(slurp(log), "wrote ") != NULL);
    ck_assert_int_eq(run(log, MPIRUN " 2 %s train %s --quiet --set data.train=%s/lic.tok "
                              "--set run.steps=2 --set run.output_dir=%s/run",
                         binary(), testutil_source_path("tests/data/micro.yaml"), dir, dir),
                     0);
    ck_assert_int_eq(run(log, MPIRUN " 2 %s eval %s --set data.train=%s/lic.tok "
                              "--set run.output_dir=%s/run --metrics %s/eval.json",
                         binary(), testutil_source_path("tests/data/micro.yaml"), dir, dir, dir),
                     0);
    const char *out = slurp(log);
    const char *last = strstr(out, "val_loss ");
    ck_assert_msg(last != NULL, "no val_loss line:\n%s", out);
    double v = strtod(last + 9, NULL);
    ck_assert_msg(v > 4.0 && v < 7.0, "untrained val_loss %g should be near ln 256", v);
    char eval_json[600];
    snprintf(eval_json, sizeof eval_json, "%s/eval.json", dir);
    ck_assert(strstr(slurp(eval_json), "\"val_loss\"") != NULL);
}
END_TEST

START_TEST(dry_run_reports_memory_without_training)
{
    const char *dir = testutil_tmpdir("cli-dry");
    char log[600], json[600];
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(json, sizeof json, "%s/mem.json", dir);
    ck_assert_int_eq(run(log, MPIRUN " 2 %s train %s --quiet --dry-run --print-partition "
                              "--set zero_optimization.stage=3 --set run.output_dir=%s "
                              "--memory-report %s",
                         binary(), testutil_source_path("configs/small.yaml"), dir, json),
                     0);
    const char *out = slurp(log);
    ck_assert_msg(strstr(out, "dry run") && strstr(out, "baseline") && strstr(out, "partition:"),
                  "output:\n%s", out);
    ck_assert_msg(!strstr(out, "loss "), "a dry run must not train:\n%s", out);
    const char *j = slurp(json);
    const char *keys[] = {"\"world_size\": 2", "\"stage\": 3", "\"n_params\": 10844160",
                          "\"bytes_per_param\"", "\"baseline\"", "\"expected_model_states\"",
                          "\"ranks\"", "\"rss_peak\"", "\"gathered_params\""};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        ck_assert_msg(strstr(j, keys[i]) != NULL, "memory report lacks %s:\n%s", keys[i], j);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("binary");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, usage_errors_and_info_commands);
    tcase_add_test(tc, world_size_and_accumulation_are_interchangeable);
    tcase_add_test(tc, bad_config_exits_2_everywhere_message_once);
    tcase_add_test(tc, missing_data_names_the_path);
    tcase_add_test(tc, prepare_then_train_and_eval_on_the_token_file);
    tcase_add_test(tc, dry_run_reports_memory_without_training);
    tcase_add_test(tc, tiny_loss_falls_within_100_steps);
    suite_add_tcase(s, tc);
    return testutil_run_suite(s, 0);
}
