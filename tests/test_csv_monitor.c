/* tests/test_csv_monitor.c — DeepSpeed's csv_monitor through the binary
 * under mpirun: the files DeepSpeed's engine writes (and ours beside them)
 * with DeepSpeed's names, headers and sample-count steps, holding
 * metrics.jsonl's values; a resumed run keeps the rows before its
 * checkpoint; the default output_path is the current directory; a folder
 * that cannot be made stops the run at start. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/json.h"
#include "testutil.h"

#define MAX_ROWS 64

/* micro.yaml's micro batch 2 x accumulation 1 x 2 data-parallel ranks */
enum { SAMPLES_PER_STEP = 4 };

/* One CSV file as the monitor writes it. */
struct csv_file {
    char header[64];
    long samples[MAX_ROWS];
    double value[MAX_ROWS];
    int n;
};

/* Reads dir/name, failing the test on anything but "step,<column>\r\n"
 * and then "<integer>,<number>\r\n" rows. */
static void read_csv(const char *dir, const char *name, struct csv_file *out)
{
    const char *path = testutil_path_in(dir, name);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: not written", path);
    char line[256];
    memset(out, 0, sizeof *out);
    ck_assert_msg(fgets(line, sizeof line, f) != NULL, "%s: empty", path);
    const size_t len = strlen(line);
    ck_assert_msg(len > 2 && strcmp(line + len - 2, "\r\n") == 0, "%s: header '%s'", path, line);
    snprintf(out->header, sizeof out->header, "%.*s", (int)(len - 2), line);
    for (int row = 1; fgets(line, sizeof line, f); row++) {
        ck_assert_msg(out->n < MAX_ROWS, "%s: more than %d rows", path, MAX_ROWS);
        char *end;
        out->samples[out->n] = strtol(line, &end, 10);
        ck_assert_msg(end != line && *end == ',', "%s: row %d: '%s'", path, row, line);
        out->value[out->n] = strtod(end + 1, &end);
        ck_assert_msg(strcmp(end, "\r\n") == 0, "%s: row %d: '%s'", path, row, line);
        out->n++;
    }
    fclose(f);
}

/* The value of `key` in each metrics line that has it, in file order. */
static int metrics_values(const char *path, const char *key, double *out, long *steps)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: cannot open", path);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        struct json_source src = {path, NULL, ZT_ERR_DATA, 4};
        struct json_value v;
        ck_assert_msg(json_parse(&src, line, strlen(line), &v) == ZT_OK, "%s", zt_error_message());
        const struct json_value *x = json_object_get(&v, key, NULL);
        if (x) {
            ck_assert_int_lt(n, MAX_ROWS);
            ck_assert_msg(x->type == JSON_REAL || x->type == JSON_INT, "%s: %s null", path, key);
            out[n] = x->real;
            steps[n++] = (long)json_object_get(&v, "step", NULL)->magnitude;
        }
        json_free(&v);
    }
    fclose(f);
    return n;
}

/* Each file the monitor writes: its name, header, the metrics key it
 * copies, how closely (metrics.jsonl rounds: %.9g, tokens/s %.2f), and
 * whether its rows are evaluations'. */
static const struct {
    const char *file, *header, *key;
    double rel, abs;
    int evaluation;
} files[] = {
    {"Train_Samples_train_loss.csv", "step,train_loss", "loss", 1e-8, 0, 0},
    {"Train_Samples_lr.csv", "step,lr", "lr", 1e-8, 0, 0},
    {"Train_Samples_loss_scale.csv", "step,loss_scale", "loss_scale", 1e-8, 0, 0},
    {"Train_Samples_grad_norm.csv", "step,grad_norm", "grad_norm", 1e-8, 0, 0},
    {"Train_Samples_tokens_per_s.csv", "step,tokens_per_s", "tokens_per_s", 0, 0.006, 0},
    {"Eval_Samples_val_loss.csv", "step,val_loss", "val_loss", 1e-8, 0, 1},
};

/* Every file in `dir` against the metrics file: the header, one row per
 * step (or evaluation) in order, at the sample count of its step, with
 * its value. */
static void check_files_match_metrics(const char *dir, const char *metrics, int steps, int evals)
{
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        struct csv_file csv;
        double want[MAX_ROWS];
        long step[MAX_ROWS];
        read_csv(dir, files[k].file, &csv);
        ck_assert_str_eq(csv.header, files[k].header);
        const int n = metrics_values(metrics, files[k].key, want, step);
        ck_assert_int_eq(n, files[k].evaluation ? evals : steps);
        ck_assert_msg(csv.n == n, "%s: %d rows, %d in %s", files[k].file, csv.n, n, metrics);
        for (int i = 0; i < n; i++) {
            const long samples = (files[k].evaluation ? step[i] : step[i] - 1) * SAMPLES_PER_STEP;
            ck_assert_msg(csv.samples[i] == samples, "%s row %d: step %ld, expected %ld",
                          files[k].file, i + 1, csv.samples[i], samples);
            ck_assert_msg(i == 0 || csv.samples[i] > csv.samples[i - 1], "%s: steps not rising",
                          files[k].file);
            const double tol = files[k].rel * fabs(want[i]) + files[k].abs;
            ck_assert_msg(fabs(csv.value[i] - want[i]) <= tol, "%s row %d: %.17g, metrics %.17g",
                          files[k].file, i + 1, csv.value[i], want[i]);
        }
    }
}

static const char *log_of(const char *dir, const char *name)
{
    return testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", name)));
}

/* An fp16 run of 6 steps at 2 ranks evaluating every 3 steps writes each
 * file with metrics.jsonl's values; with loss_scale, as fp16 is on. */
START_TEST(files_hold_the_metrics)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("csv-monitor"));
    const int rc = testutil_train_micro(
        dir, "a", 2,
        testutil_fmt("--set run.steps=6 --set run.eval_interval=3 --set fp16.enabled=true "
                     "--set csv_monitor.enabled=true --set csv_monitor.output_path=%s/logs "
                     "--set csv_monitor.job_name=job",
                     dir));
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, log_of(dir, "a"));
    check_files_match_metrics(testutil_path_in(dir, "logs/job"), testutil_path_in(dir, "a.jsonl"),
                              6, 2);
}
END_TEST

/* A resumed run keeps the rows its checkpoint covers, byte for byte, drops
 * those past it (and a row cut short), and appends its own: one header,
 * one row per step. */
START_TEST(resume_keeps_rows_before_the_checkpoint)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("csv-monitor-resume"));
    const char *monitor = testutil_fmt("--set csv_monitor.enabled=true --set fp16.enabled=true "
                                       "--set csv_monitor.output_path=%s --set run.steps=6 "
                                       "--set run.eval_interval=2",
                                       dir);
    const char *job = testutil_path_in(dir, "DeepSpeedJobName");
    int rc = testutil_train_micro(
        dir, "a", 2,
        testutil_fmt("%s --set checkpoint.every=4 --set checkpoint.dir=%s/ck", monitor, dir));
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, log_of(dir, "a"));
    struct csv_file before;
    read_csv(job, "Train_Samples_train_loss.csv", &before);
    ck_assert_int_eq(before.n, 6);
    const char *loss_path = testutil_path_in(job, "Train_Samples_train_loss.csv");
    char first_rows[512];
    snprintf(first_rows, sizeof first_rows, "%s", testutil_slurp(loss_path));
    *strstr(first_rows, testutil_fmt("\r\n%d,", 4 * SAMPLES_PER_STEP)) = '\0';
    FILE *f = fopen(loss_path, "a");
    fputs("99999,1.0", f); /* a row cut short by a killed run */
    fclose(f);

    rc = testutil_train_micro(dir, "a", 2,
                              testutil_fmt("%s --set checkpoint.dir=%s/ck2 "
                                           "--set run.resume=%s/ck/step-00000004",
                                           monitor, dir, dir));
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, log_of(dir, "a"));
    ck_assert_msg(strstr(log_of(dir, "a"), "resumed from"), "%s", log_of(dir, "a"));
    const char *after = testutil_slurp(loss_path);
    ck_assert_msg(strncmp(after, first_rows, strlen(first_rows)) == 0, "%s", after);
    ck_assert_int_eq(testutil_count(after, "step,"), 1);
    check_files_match_metrics(job, testutil_path_in(dir, "a.jsonl"), 6, 3);
}
END_TEST

/* DeepSpeed's default output_path "" puts the job folder in the current
 * directory; without csv_monitor.enabled nothing is written. */
START_TEST(default_output_path_is_the_current_directory)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("csv-monitor-cwd"));
    const char *micro = testutil_source_path("tests/data/micro.yaml");
    const char *cmd = "cd %s && mpirun --oversubscribe -np 1 %s train %s --quiet --no-progress "
                      "--set run.output_dir=%s/%s --set run.steps=2 %s";
    int rc = testutil_run(testutil_path_in(dir, "off.log"), cmd, dir, testutil_binary(), micro, dir,
                          "off", "");
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, log_of(dir, "off"));
    ck_assert_msg(access(testutil_path_in(dir, "DeepSpeedJobName"), F_OK) != 0, "written when off");
    rc = testutil_run(testutil_path_in(dir, "on.log"), cmd, dir, testutil_binary(), micro, dir,
                      "on", "--set csv_monitor.enabled=true");
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, log_of(dir, "on"));
    struct csv_file csv;
    read_csv(testutil_path_in(dir, "DeepSpeedJobName"), "Train_Samples_lr.csv", &csv);
    ck_assert_int_eq(csv.n, 2);
    ck_assert_msg(
        access(testutil_path_in(dir, "DeepSpeedJobName/Train_Samples_loss_scale.csv"), F_OK) != 0,
        "loss_scale written without fp16");
}
END_TEST

/* A job folder that cannot be made stops the run before its first step,
 * with one message naming it, and exit status 1 from every rank. */
START_TEST(unwritable_folder_stops_at_start)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("csv-monitor-bad"));
    testutil_write_file(testutil_path_in(dir, "file"), "x", 1);
    const int rc = testutil_train_micro(
        dir, "a", 2,
        testutil_fmt("--set csv_monitor.enabled=true --set csv_monitor.output_path=%s/file", dir));
    const char *out = log_of(dir, "a");
    ck_assert_msg(rc == 1, "exit %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, testutil_fmt("csv_monitor: cannot create directory %s/file/", dir)),
                  "%s", out);
    ck_assert_msg(testutil_count(out, "zerotrain: error:") == 1, "%s", out);
    ck_assert_msg(strstr(out, "| loss") == NULL, "trained:\n%s", out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("csv_monitor");
    TCase *tc = testutil_tcase(s, "csv_monitor", 300);
    tcase_add_test(tc, files_hold_the_metrics);
    tcase_add_test(tc, resume_keeps_rows_before_the_checkpoint);
    tcase_add_test(tc, default_output_path_is_the_current_directory);
    tcase_add_test(tc, unwritable_folder_stops_at_start);
    return testutil_run_suite(s, 0);
}
