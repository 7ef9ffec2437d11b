/* tests/test_outputs.c — what a run leaves behind, through the binary under
 * mpirun: a dry run writes nothing, a resume keeps the metrics before its
 * checkpoint, every metrics line is JSON with a time, a diverged fp16 run
 * stops and publishes no broken weights, checkpoint.dir is checked at
 * start and null means no checkpoints, and a run-time error is printed
 * once. */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/json.h"
#include "testutil.h"

#define MAX_LINES 64

/* With run.save_final on, as a user's run has it: this suite checks what
 * lands in the output folder (the harness turns the final save off). */
static int train(const char *dir, const char *name, int np, const char *extra)
{
    return testutil_train_micro(dir, name, np, testutil_fmt("--set run.save_final=true %s", extra));
}

static const char *log_of(const char *dir, const char *name)
{
    return testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", name)));
}

/* One metrics line, parsed: its step, whether it is a step record (has
 * "loss") and its time; the line's bytes for comparisons. */
struct metrics_line {
    long step;
    int is_step;
    double time;
    char text[2048];
};

/* Parses every line of a metrics file as one JSON object (failing the test
 * on anything else); returns how many lines. */
static int read_metrics(const char *path, struct metrics_line *out, int cap)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: cannot open", path);
    int n = 0;
    char line[2048];
    while (fgets(line, sizeof line, f)) {
        ck_assert_msg(n < cap, "%s: more than %d lines", path, cap);
        size_t len = strlen(line);
        ck_assert_msg(len > 0 && line[len - 1] == '\n', "%s: line %d unterminated", path, n + 1);
        struct json_source src = {path, NULL, ZT_ERR_DATA, 4};
        struct json_value v;
        ck_assert_msg(json_parse(&src, line, len, &v) == ZT_OK, "%s: line %d: %s\n%s", path, n + 1,
                      zt_error_message(), line);
        ck_assert_int_eq(v.type, JSON_OBJECT);
        const struct json_value *step = json_object_get(&v, "step", NULL);
        const struct json_value *time = json_object_get(&v, "time", NULL);
        ck_assert_msg(step && step->type == JSON_INT, "%s: line %d has no step", path, n + 1);
        ck_assert_msg(time && (time->type == JSON_REAL || time->type == JSON_INT),
                      "%s: line %d has no time:\n%s", path, n + 1, line);
        out[n].step = (long)step->magnitude;
        out[n].is_step = json_object_get(&v, "loss", NULL) != NULL;
        out[n].time = time->real;
        snprintf(out[n].text, sizeof out[n].text, "%s", line);
        json_free(&v);
        n++;
    }
    fclose(f);
    return n;
}

/* Every step 1..steps has exactly one step record. */
static void assert_each_step_once(const struct metrics_line *l, int n, long steps)
{
    for (long s = 1; s <= steps; s++) {
        int seen = 0;
        for (int i = 0; i < n; i++)
            seen += l[i].is_step && l[i].step == s;
        ck_assert_msg(seen == 1, "step %ld recorded %d times", s, seen);
    }
    for (int i = 0; i < n; i++)
        ck_assert_msg(l[i].step >= 1 && l[i].step <= steps, "step %ld of %ld", l[i].step, steps);
}

/* The names in a folder but the tests' logs, sorted, one per line (""
 * when it is missing). */
static const char *listing(const char *dir)
{
    const char *out = testutil_path_in(testutil_tmpdir("outputs-listing"), "ls.txt");
    testutil_run(out, "ls -A %s 2>/dev/null | grep -v '[.]log$' | sort", dir);
    return testutil_fmt("%s", testutil_slurp(out));
}

/* A dry run in a folder that holds a run writes nothing there, nor
 * anywhere else: not config.yaml, not the metrics (default or --metrics),
 * not checkpoint.dir. Only --memory-report, which asks for a file. */
START_TEST(dry_run_writes_nothing)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("outputs-dry"));
    testutil_mark_handmade(dir);
    const char *run = testutil_path_in(dir, "a");
    ck_assert_int_eq(testutil_run(testutil_path_in(dir, "mk.log"), "mkdir %s", run), 0);
    static const char config[] = "# the config of an earlier run\n";
    static const char metrics[] = "{\"step\": 1, \"loss\": 5.5}\n";
    testutil_write_file(testutil_path_in(run, "config.yaml"), config, sizeof config - 1);
    testutil_write_file(testutil_path_in(run, "metrics.jsonl"), metrics, sizeof metrics - 1);
    testutil_write_file(testutil_path_in(dir, "a.jsonl"), metrics, sizeof metrics - 1);
    char before[256];
    snprintf(before, sizeof before, "%s", listing(dir));

    ck_assert_int_eq(train(dir, "a", 2,
                           testutil_fmt("--dry-run --set checkpoint.dir=%s/ck "
                                        "--memory-report %s/a/report.json",
                                        dir, dir)),
                     0);
    ck_assert_str_eq(testutil_slurp(testutil_path_in(run, "config.yaml")), config);
    ck_assert_str_eq(testutil_slurp(testutil_path_in(run, "metrics.jsonl")), metrics);
    ck_assert_str_eq(testutil_slurp(testutil_path_in(dir, "a.jsonl")), metrics);
    ck_assert_str_eq(listing(run), "config.yaml\nmetrics.jsonl\nreport.json\n");
    ck_assert_str_eq(listing(dir), before);

    /* the same in a folder that does not exist: it is not created */
    ck_assert_int_eq(testutil_run(testutil_path_in(dir, "b.log"),
                                  "mpirun --oversubscribe -np 2 %s train %s --dry-run --quiet "
                                  "--set run.output_dir=%s/new",
                                  testutil_binary(), testutil_source_path("tests/data/micro.yaml"),
                                  dir),
                     0);
    ck_assert_str_eq(listing(testutil_path_in(dir, "new")), "");
}
END_TEST

/* Runs 8 steps with a checkpoint at 4, then resumes from step 4 to 8 into
 * the same metrics file; `extra` picks the file (--metrics or the default
 * <output_dir>/metrics.jsonl). */
static void check_resume_keeps_history(const char *dir, const char *cmd, const char *path)
{
    struct metrics_line first[MAX_LINES], after[MAX_LINES];
    const char *log = testutil_path_in(dir, "run.log");
    ck_assert_int_eq(testutil_run(log,
                                  "%s --set run.steps=8 --set checkpoint.every=4 "
                                  "--set checkpoint.dir=%s/ck",
                                  cmd, dir),
                     0);
    const int n1 = read_metrics(path, first, MAX_LINES);
    assert_each_step_once(first, n1, 8);
    ck_assert_int_eq(testutil_run(log,
                                  "%s --set run.steps=8 --set checkpoint.dir=%s/ck2 "
                                  "--set run.resume=%s/ck/step-00000004",
                                  cmd, dir, dir),
                     0);
    ck_assert_msg(strstr(testutil_slurp(log), "resumed from") != NULL, "%s", testutil_slurp(log));
    const int n2 = read_metrics(path, after, MAX_LINES);
    assert_each_step_once(after, n2, 8);
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(after[i].is_step && after[i].step == i + 1, "line %d: step %ld", i + 1,
                      after[i].step);
        ck_assert_str_eq(after[i].text, first[i].text);
    }
    int evals = 0;
    for (int i = 0; i < n2; i++)
        evals += !after[i].is_step;
    ck_assert_int_eq(evals, 1); /* the end-of-run evaluation, once */
    ck_assert_int_eq(n2, 9);
}

/* Resuming keeps the history before the checkpoint and drops only the
 * lines past it, in --metrics FILE and in the default file alike. */
START_TEST(resume_keeps_metrics_before_the_checkpoint)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("outputs-resume"));
    const char *micro = testutil_source_path("tests/data/micro.yaml");
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "mpirun --oversubscribe -np 2 %s train %s --quiet --no-progress "
             "--set run.output_dir=%s/a --metrics %s/m.jsonl",
             testutil_binary(), micro, dir, dir);
    check_resume_keeps_history(dir, cmd, testutil_path_in(dir, "m.jsonl"));

    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("outputs-resume-default"));
    snprintf(cmd, sizeof cmd,
             "mpirun --oversubscribe -np 2 %s train %s --quiet --no-progress "
             "--set run.output_dir=%s/a",
             testutil_binary(), micro, dir);
    check_resume_keeps_history(dir, cmd, testutil_fmt("%s/a/metrics.jsonl", dir));
}
END_TEST

/* Every line carries the wall-clock time it was written, in Unix seconds
 * with sub-second digits, in order. */
START_TEST(metrics_lines_carry_the_time)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("outputs-time"));
    const double start = (double)time(NULL);
    ck_assert_int_eq(train(dir, "a", 1, "--set run.steps=3"), 0);
    const double end = (double)time(NULL);
    struct metrics_line l[MAX_LINES];
    const int n = read_metrics(testutil_path_in(dir, "a.jsonl"), l, MAX_LINES);
    ck_assert_int_eq(n, 4);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(l[i].time >= start - 1 && l[i].time <= end + 1, "line %d: time %.6f", i + 1,
                      l[i].time);
        ck_assert_msg(i == 0 || l[i].time >= l[i - 1].time, "line %d goes back in time", i + 1);
        const char *t = strstr(l[i].text, "\"time\": ");
        ck_assert_msg(t && strchr(t + 8, '.') < strchr(t + 8, ','), "no fraction: %s", l[i].text);
    }
}
END_TEST

/* fp16 with a learning rate that blows the weights up: every later step
 * overflows and the scale falls to fp16.min_loss_scale; the next overflow
 * stops the run (DeepSpeed's rule) with exit 1 and one message, and the
 * metrics of the skipped steps are still JSON (null for the NaN loss). */
START_TEST(diverged_fp16_run_stops_at_the_minimum_scale)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("outputs-diverge"));
    const int rc = train(dir, "a", 2,
                         "--set fp16.enabled=true --set optimizer.params.lr=1e6 "
                         "--set fp16.initial_scale_power=4 --set run.steps=100");
    const char *out = log_of(dir, "a");
    ck_assert_msg(rc == 1, "exit %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, "with the loss scale already at its minimum "
                              "(fp16.min_loss_scale = 1)"),
                  "%s", out);
    ck_assert_msg(testutil_count(out, "zerotrain: error:") == 1, "%s", out);
    struct metrics_line l[MAX_LINES];
    const int n = read_metrics(testutil_path_in(dir, "a.jsonl"), l, MAX_LINES);
    ck_assert_msg(n > 2 && n < 20, "%d lines", n);
    ck_assert(strstr(l[n - 1].text, "\"loss\": null") &&
              strstr(l[n - 1].text, "\"loss_scale\": 1,"));
    ck_assert(strstr(l[n - 1].text, "\"skipped\": true"));
}
END_TEST

/* Weights that are not finite are never published: the save is refused
 * with a message, `latest` and the older checkpoints stay (keep: 2 would
 * otherwise have deleted the good ones). Good fp16 checkpoints at steps 2
 * and 4, then a resume with a learning rate that breaks the weights at
 * step 5: the save at step 6 is refused. */
START_TEST(non_finite_weights_are_not_saved)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("outputs-nonfinite"));
    const char *ck = testutil_fmt("--set fp16.enabled=true --set checkpoint.every=2 "
                                  "--set checkpoint.keep=2 --set checkpoint.dir=%s/ck",
                                  dir);
    char common[1024];
    snprintf(common, sizeof common, "%s", ck);
    ck_assert_int_eq(train(dir, "good", 2, testutil_fmt("%s --set run.steps=4", common)), 0);
    ck_assert_str_eq(listing(testutil_path_in(dir, "ck")),
                     "latest\nstep-00000002\nstep-00000004\n");
    const int rc = train(
        dir, "bad", 2, testutil_fmt("%s --set run.steps=8 --set optimizer.params.lr=1e6", common));
    const char *out = log_of(dir, "bad");
    ck_assert_msg(rc == 1, "exit %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, "step 6: checkpoint not saved: the weights are not finite"), "%s",
                  out);
    ck_assert_msg(testutil_count(out, "zerotrain: error:") == 1, "%s", out);
    ck_assert_str_eq(listing(testutil_path_in(dir, "ck")),
                     "latest\nstep-00000002\nstep-00000004\n");
    ck_assert_str_eq(testutil_slurp(testutil_fmt("%s/ck/latest", dir)), "step-00000004\n");
}
END_TEST

/* A checkpoint.dir no rank can write stops the run before its first step,
 * once, naming the folder; a missing one is created at start. */
START_TEST(unwritable_checkpoint_dir_stops_at_start)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("outputs-ckdir"));
    testutil_write_file(testutil_path_in(dir, "file"), "x", 1);
    const int rc = train(dir, "a", 2, testutil_fmt("--set checkpoint.dir=%s/file/ck", dir));
    const char *out = log_of(dir, "a");
    ck_assert_msg(rc == 1, "exit %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, testutil_fmt("checkpoint.dir %s/file/ck: not writable", dir)), "%s",
                  out);
    ck_assert_msg(testutil_count(out, "zerotrain: error:") == 1, "%s", out);
    ck_assert_msg(strstr(out, "| loss") == NULL, "trained:\n%s", out);
    ck_assert_msg(access(testutil_path_in(dir, "a.jsonl"), F_OK) != 0, "metrics written");
}
END_TEST

/* checkpoint.dir null means no checkpoints: none is written (not even
 * under the output folder), one there is not resumed, and checkpoint.every
 * without a folder is a configuration error. The trained weights go to
 * <output_dir>/final as an export, the last line saying so; with
 * run.save_final false nothing is saved, which the start and the end say. */
START_TEST(null_checkpoint_dir_means_no_checkpoints)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("outputs-nullck"));
    ck_assert_int_eq(train(dir, "a", 2, "--set run.steps=2"), 0);
    ck_assert_str_eq(listing(testutil_path_in(dir, "a")),
                     "config.yaml\nfinal\nmemory_report.json\n");
    ck_assert_str_eq(listing(testutil_path_in(dir, "a/final")),
                     "config.json\ngeneration_config.json\nmodel.safetensors\n");
    const char *said = log_of(dir, "a");
    const char *last =
        testutil_fmt("step 2: the final model (no checkpoint.dir) saved in %s/a/final\n", dir);
    ck_assert_msg(strlen(said) > strlen(last) &&
                      strcmp(said + strlen(said) - strlen(last), last) == 0,
                  "the last line is not '%s':\n%s", last, said);
    ck_assert_msg(!strstr(said, "not be saved") && !strstr(said, "not saved"), "%s", said);
    ck_assert_int_eq(train(dir, "off", 2, "--set run.steps=2 --set run.save_final=false"), 0);
    ck_assert_str_eq(listing(testutil_path_in(dir, "off")), "config.yaml\nmemory_report.json\n");
    said = log_of(dir, "off");
    ck_assert_msg(testutil_count(said, "note: checkpoint.dir is not set and run.save_final is "
                                       "false: the trained weights will not be saved") == 1 &&
                      testutil_count(said, "note: checkpoint.dir is not set and run.save_final is "
                                           "false: the trained weights were not saved") == 1,
                  "%s", said);
    /* a checkpoint where the old default looked is left alone */
    ck_assert_int_eq(
        train(dir, "a", 2,
              testutil_fmt("--set run.steps=2 --set checkpoint.dir=%s/a/checkpoints", dir)),
        0);
    ck_assert_int_eq(train(dir, "a", 2, "--set run.steps=3"), 0);
    const char *out = log_of(dir, "a");
    ck_assert_msg(strstr(out, "resumed from") == NULL, "%s", out);
    struct metrics_line l[MAX_LINES];
    const int n = read_metrics(testutil_path_in(dir, "a.jsonl"), l, MAX_LINES);
    assert_each_step_once(l, n, 3);

    const int rc = train(dir, "b", 2, "--set checkpoint.every=2");
    out = log_of(dir, "b");
    ck_assert_msg(rc == 2, "exit %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, "checkpoint.every: 2 asks for checkpoints, but checkpoint.dir is "
                              "not set"),
                  "%s", out);
}
END_TEST

/* SIGTERM to a run without checkpoint.dir: it stops at the next step
 * boundary and says that nothing was saved (exit 1, not the 0 of a
 * preemption whose checkpoint is the result). */
START_TEST(preemption_without_checkpoint_dir_says_nothing_was_saved)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("outputs-preempt"));
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "mpirun --oversubscribe -np 2 %s train %s --quiet --no-progress "
             "--set run.output_dir=%s/a --set run.steps=1000000 --metrics %s/a.jsonl "
             ">%s/a.log 2>&1",
             testutil_binary(), testutil_source_path("tests/data/micro.yaml"), dir, dir, dir);
    pid_t child = fork();
    ck_assert(child >= 0);
    if (child == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    const pid_t rank = testutil_wait_for_rank(testutil_path_in(dir, "a.jsonl"), 3,
                                              testutil_fmt("run.output_dir=%s/a", dir));
    ck_assert_msg(rank > 0, "no running rank found");
    ck_assert_int_eq(kill(rank, SIGTERM), 0);
    int status;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    const char *out = log_of(dir, "a");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1, "exit %d:\n%s",
                  WEXITSTATUS(status), out);
    ck_assert_msg(strstr(out, "stopped without saving, as checkpoint.dir is not set"), "%s", out);
    ck_assert_msg(testutil_count(out, "zerotrain: error:") == 1, "%s", out);
    ck_assert_str_eq(listing(testutil_path_in(dir, "a")), "config.yaml\n");
}
END_TEST

/* An error every rank finds is printed once, by rank 0, naming it, before
 * any step (here: validation data without one window, which used to
 * surface after training, on every rank). */
START_TEST(run_time_error_is_printed_once)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("outputs-once"));
    ck_assert_int_eq(
        testutil_run(testutil_path_in(dir, "v.log"), "(printf 'too short' > %s/v.txt)", dir), 0);
    const int rc = train(dir, "a", 3, testutil_fmt("--set data.val=%s/v.txt", dir));
    const char *out = log_of(dir, "a");
    ck_assert_msg(rc == 1, "exit %d:\n%s", rc, out);
    ck_assert_msg(testutil_count(out, "zerotrain: error:") == 1, "%s", out);
    ck_assert_msg(strstr(out, "zerotrain: error: rank 0: validation data has no window"), "%s",
                  out);
    ck_assert_msg(strstr(out, "| loss") == NULL, "trained:\n%s", out);
}
END_TEST

/* run.epochs sets the steps from the data: ceil(epochs x windows / global
 * batch), named at the start, the epoch in each metrics line; given with
 * run.steps it is refused naming both. */
START_TEST(epochs_set_the_steps)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("outputs-epochs"));
    const char *yaml = testutil_path_in(dir, "micro.yaml");
    ck_assert_int_eq(testutil_run(testutil_path_in(dir, "cp.log"), "(grep -v '^  steps:' %s > %s)",
                                  testutil_source_path("tests/data/micro.yaml"), yaml),
                     0);
    const char *log = testutil_path_in(dir, "a.log");
    int rc = testutil_run(log,
                          "mpirun --oversubscribe -np 2 %s train %s --quiet --no-progress --set "
                          "run.output_dir=%s/a --metrics %s/a.jsonl --set run.epochs=0.01",
                          testutil_binary(), yaml, dir, dir);
    const char *out = testutil_slurp(log);
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, out);
    const char *at = strstr(out, ", stage 0, ");
    long steps = 0;
    unsigned long windows = 0;
    ck_assert_msg(at && sscanf(at, ", stage 0, %ld steps (0.01 epochs of %lu windows)", &steps,
                               &windows) == 2,
                  "%s", out);
    const long want = (long)ceil(0.01 * (double)windows / 4.0); /* 2 x 1 x 2 ranks */
    ck_assert_msg(steps == want && want >= 2, "%ld steps for %lu windows, want %ld", steps, windows,
                  want);
    struct metrics_line l[MAX_LINES];
    const int n = read_metrics(testutil_path_in(dir, "a.jsonl"), l, MAX_LINES);
    assert_each_step_once(l, n, steps);
    const char *metrics = testutil_slurp(testutil_path_in(dir, "a.jsonl"));
    ck_assert_msg(testutil_count(metrics, "\"epoch\": ") == steps, "%s", metrics);

    rc = train(dir, "b", 2, "--set run.epochs=1");
    out = log_of(dir, "b");
    ck_assert_msg(rc == 2 && strstr(out, "run.epochs: 1 and run.steps: 10 both say how long to "
                                         "train: give one of them"),
                  "exit %d:\n%s", rc, out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("outputs");
    TCase *tc = testutil_tcase(s, "outputs", 300);
    tcase_add_test(tc, dry_run_writes_nothing);
    tcase_add_test(tc, resume_keeps_metrics_before_the_checkpoint);
    tcase_add_test(tc, metrics_lines_carry_the_time);
    tcase_add_test(tc, diverged_fp16_run_stops_at_the_minimum_scale);
    tcase_add_test(tc, non_finite_weights_are_not_saved);
    tcase_add_test(tc, unwritable_checkpoint_dir_stops_at_start);
    tcase_add_test(tc, null_checkpoint_dir_means_no_checkpoints);
    tcase_add_test(tc, preemption_without_checkpoint_dir_says_nothing_was_saved);
    tcase_add_test(tc, run_time_error_is_printed_once);
    tcase_add_test(tc, epochs_set_the_steps);
    return testutil_run_suite(s, 0);
}
