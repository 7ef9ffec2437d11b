/* tests/test_plot.c — `zerotrain plot` through the binary: two short real
 * runs (one fp16 at 2 ranks), their memory reports and a memory timeline
 * written here in the format train writes, drawn into every PNG; runs
 * without memory files get the other plots and say what was skipped; a
 * folder that is not a run, a malformed line, a --rank the timeline lacks
 * and a missing gnuplot are clear errors. Needs gnuplot (scripts/deps.sh
 * installs gnuplot-nox): without it the suite fails, saying so. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

/* The runs every test reads, made once by make_runs: ROOT/a/run (1 rank,
 * fp32, evaluating) and ROOT/b/run (2 ranks, fp16, stage 2), both with
 * memory_report.json, a/run with memory_timeline.jsonl; ROOT/bare/run
 * without memory files (the report every run keeps is removed, as a run
 * folder from before runs kept one would lack it). Set in the parent
 * before the tests fork. */
static char root[512];

static const char *const all_plots[] = {"loss.png",           "lr.png",         "grad_norm.png",
                                        "loss_scale.png",     "throughput.png", "memory.png",
                                        "memory_timeline.png"};

/* Categories as the ledger has them, and one it may gain: the plots must
 * take whatever `current` holds. */
static const char *const categories[] = {"params",           "grads",           "master_params",
                                         "optimizer_states", "gathered_params", "activations",
                                         "comm_buffers",     "workspace",       "fp8_copies"};
enum { N_CAT = sizeof categories / sizeof categories[0] };

/* One event line of memory_timeline.jsonl; `current` is updated by it. */
static void timeline_event(FILE *f, int rank, int seq, double t, int step, const char *phase,
                           int unit, int cat, long bytes, long current[N_CAT])
{
    long total = 0;
    char unit_name[16] = "null", category[32] = "null";
    if (unit >= 0)
        snprintf(unit_name, sizeof unit_name, "\"h.%d\"", unit);
    if (cat >= 0) {
        snprintf(category, sizeof category, "\"%s\"", categories[cat]);
        current[cat] += bytes;
    }
    fprintf(f,
            "{\"rank\": %d, \"seq\": %d, \"time\": %.6f, \"step\": %d, \"micro_step\": 0, "
            "\"phase\": \"%s\", \"unit\": %d, \"unit_name\": %s, \"category\": %s, "
            "\"bytes\": %ld, \"current\": {",
            rank, seq, t, step, phase, unit, unit_name, category, bytes);
    for (int k = 0; k < N_CAT; k++) {
        fprintf(f, "%s\"%s\": %ld", k ? ", " : "", categories[k], current[k]);
        total += current[k];
    }
    fprintf(f, "}, \"total\": %ld}\n", total);
}

/* A stage-3-like timeline of two ranks over setup and two steps of four
 * units: gathers, activations, a reduction inside each backward, the
 * optimizer; rank 1 starts with a snapshot as a recording begun mid-run. */
static void write_timeline(const char *path)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int rank = 0; rank < 2; rank++) {
        long cur[N_CAT] = {0};
        int seq = 0;
        double t = 0.0;
        timeline_event(f, rank, seq++, t, 0, rank ? "snapshot" : "setup", -1, rank ? -1 : 0,
                       rank ? 0 : 400000, cur);
        for (int k = 1; k < 4; k++)
            timeline_event(f, rank, seq++, t += 1e-4, 0, "setup", -1, k, 300000L * k, cur);
        for (int step = 1; step <= 2; step++) {
            for (int u = 0; u < 4; u++) {
                timeline_event(f, rank, seq++, t += 1e-3, step, "forward", u, 4, 100000, cur);
                timeline_event(f, rank, seq++, t += 2e-3, step, "forward", u, 5, 250000, cur);
                timeline_event(f, rank, seq++, t += 1e-4, step, "forward", u, 8, 50000, cur);
                timeline_event(f, rank, seq++, t += 1e-3, step, "forward", u, 4, -100000, cur);
            }
            for (int u = 3; u >= 0; u--) {
                timeline_event(f, rank, seq++, t += 1e-3, step, "backward", u, 4, 100000, cur);
                timeline_event(f, rank, seq++, t += 3e-3, step, "backward", u, 5, -250000, cur);
                timeline_event(f, rank, seq++, t += 1e-4, step, "backward", u, 8, -50000, cur);
                timeline_event(f, rank, seq++, t += 5e-4, step, "reduction", u, 6, 120000, cur);
                timeline_event(f, rank, seq++, t += 1e-3, step, "reduction", u, 6, -120000, cur);
                timeline_event(f, rank, seq++, t += 1e-4, step, "backward", u, 4, -100000, cur);
            }
            timeline_event(f, rank, seq++, t += 1e-3, step, "optimizer", -1, 7, 80000, cur);
            timeline_event(f, rank, seq++, t += 4e-3, step, "optimizer", -1, 7, -80000, cur);
        }
    }
    ck_assert_int_eq(fclose(f), 0);
}

static void train_into(const char *run, int np, const char *extra)
{
    const char *log = testutil_fmt("%s.log", run);
    const int rc = testutil_run(
        log,
        "mkdir -p %s && mpirun --oversubscribe -np %d %s train %s --quiet --no-progress "
        "--set run.output_dir=%s --set run.steps=6 %s",
        run, np, testutil_binary(), testutil_source_path("tests/data/micro.yaml"), run, extra);
    ck_assert_msg(rc == 0, "training %s failed:\n%s", run, testutil_slurp(log));
}

/* The unchecked fixture: gnuplot is there, and the runs are made. */
static void make_runs(void)
{
    ck_assert_msg(testutil_run("/dev/null", "command -v gnuplot") == 0,
                  "gnuplot is not installed: scripts/deps.sh installs gnuplot-nox");
    snprintf(root, sizeof root, "%s", testutil_tmpdir("plot"));
    const char *a = testutil_path_in(root, "a/run");
    train_into(a, 1,
               testutil_fmt("--set run.eval_interval=3 --memory-report %s/memory_report.json", a));
    write_timeline(testutil_path_in(a, "memory_timeline.jsonl"));
    const char *b = testutil_path_in(root, "b/run");
    train_into(b, 2,
               testutil_fmt("--set fp16.enabled=true --set zero_optimization.stage=2 "
                            "--memory-report %s/memory_report.json",
                            b));
    const char *bare = testutil_path_in(root, "bare/run");
    train_into(bare, 1, "");
    const char *report = testutil_path_in(bare, "memory_report.json");
    ck_assert_msg(unlink(report) == 0, "a run did not keep %s", report);
}

/* Runs `zerotrain plot ARGS` (a shell fragment) with output to LOG;
 * returns the exit status. */
static int plot(const char *log, const char *args)
{
    return testutil_run(log, "%s plot %s", testutil_binary(), args);
}

/* dir/name is a non-empty PNG. */
static void assert_png(const char *dir, const char *name)
{
    static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    size_t n = 0;
    unsigned char *png = testutil_read_file(testutil_path_in(dir, name), &n);
    ck_assert_msg(n > 1000 && memcmp(png, signature, 8) == 0, "%s/%s: %zu bytes, not a PNG", dir,
                  name, n);
    free(png);
}

/* Every plot of two runs with memory files, each file a PNG and reported;
 * nothing else left in the folder. */
START_TEST(every_plot_of_two_runs)
{
    const char *out = testutil_path_in(testutil_tmpdir("plot-out"), "plots");
    const char *log = testutil_path_in(root, "every.log");
    const int rc = plot(log, testutil_fmt("%s/a/run %s/b/run --out %s", root, root, out));
    const char *said = testutil_slurp(log);
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, said);
    char listing[1024] = "";
    for (size_t i = 0; i < sizeof all_plots / sizeof all_plots[0]; i++) {
        assert_png(out, all_plots[i]);
        ck_assert_msg(strstr(said, testutil_fmt("wrote %s/%s\n", out, all_plots[i])), "%s", said);
        snprintf(listing + strlen(listing), sizeof listing - strlen(listing), "%s ", all_plots[i]);
    }
    ck_assert_msg(strstr(said, testutil_fmt("plots in %s\n", out)), "%s", said);
    ck_assert_msg(!strstr(said, "skipped"), "%s", said);
    const char *ls = testutil_path_in(root, "ls.txt");
    testutil_run(ls, "ls -A %s | wc -l", out);
    ck_assert_int_eq(atoi(testutil_slurp(ls)), (int)(sizeof all_plots / sizeof all_plots[0]));
}
END_TEST

/* A run without memory files and without fp16: those plots are skipped,
 * each with its reason, and the others drawn into RUN/plots by default. */
START_TEST(missing_memory_files_skip_their_plots)
{
    const char *run = testutil_path_in(root, "bare/run");
    const char *log = testutil_path_in(root, "bare.log");
    const int rc = plot(log, run);
    const char *said = testutil_slurp(log);
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, said);
    ck_assert_msg(strstr(said, "skipped memory.png: no run has memory_report.json\n"), "%s", said);
    ck_assert_msg(strstr(said, "skipped memory_timeline.png: no run has memory_timeline.jsonl\n"),
                  "%s", said);
    ck_assert_msg(strstr(said, "skipped loss_scale.png: no run trains in fp16"), "%s", said);
    const char *plots = testutil_path_in(run, "plots");
    for (int i = 0; i < 3; i++)
        assert_png(plots, all_plots[i]);
    assert_png(plots, "throughput.png");
    ck_assert_msg(access(testutil_path_in(plots, "memory.png"), F_OK) != 0, "memory.png drawn");
}
END_TEST

/* A folder that is not a run, named in the message; exit 2. */
START_TEST(a_folder_that_is_not_a_run)
{
    const char *dir = testutil_tmpdir("plot-notrun");
    const char *log = testutil_path_in(dir, "log");
    int rc = plot(log, testutil_fmt("%s/a/run %s", root, dir));
    ck_assert_msg(rc == 2, "exit %d:\n%s", rc, testutil_slurp(log));
    ck_assert_msg(strstr(testutil_slurp(log),
                         testutil_fmt("zerotrain: error: %s is not a zerotrain run directory "
                                      "(no metrics.jsonl)",
                                      dir)),
                  "%s", testutil_slurp(log));
    rc = plot(log, testutil_fmt("%s/missing", dir));
    ck_assert_msg(rc == 2 && strstr(testutil_slurp(log), "missing is not a zerotrain run"), "%s",
                  testutil_slurp(log));
}
END_TEST

/* A copy of run a with `sed` applied to one of its files. */
static const char *broken_copy(const char *tag, const char *file, const char *sed)
{
    const char *parent = testutil_tmpdir(tag);
    testutil_mark_handmade(parent);
    const char *dir = testutil_path_in(parent, "run");
    const char *log = testutil_path_in(root, "cp.log");
    ck_assert_int_eq(
        testutil_run(log, "cp -r %s/a/run %s && sed -i '%s' %s/%s", root, dir, sed, dir, file), 0);
    return testutil_fmt("%s", dir);
}

/* A malformed line stops the command before anything is drawn, naming the
 * file and the line: not JSON, a value of the wrong type, a timeline
 * event without its phase. */
START_TEST(a_malformed_line_names_file_and_line)
{
    static const struct {
        const char *file, *sed, *says;
    } cases[] = {
        {"metrics.jsonl", "3s/.*/{\"step\": 3, \"loss\": oops}/",
         "metrics.jsonl: line 3 is not valid JSON at byte 20"},
        {"metrics.jsonl", "5s/\"loss\": [^,]*/\"loss\": \"x\"/",
         "metrics.jsonl:5: \"loss\" is a string, not a number or null"},
        {"metrics.jsonl", "2s/\"step\": 2/\"stop\": 2/", "metrics.jsonl:2: no integer \"step\""},
        {"memory_timeline.jsonl", "9s/\"phase\"/\"phases\"/",
         "memory_timeline.jsonl:9: no string \"phase\""},
        {"memory_report.json", "s/\"ranks\"/\"rank_list\"/",
         "memory_report.json: no \"ranks\" list of a memory report"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *run = broken_copy("plot-bad", cases[i].file, cases[i].sed);
        const char *log = testutil_path_in(root, "bad.log");
        const int rc = plot(log, testutil_fmt("%s --out %s/plots", run, run));
        const char *said = testutil_slurp(log);
        ck_assert_msg(rc == 1, "case %zu: exit %d:\n%s", i, rc, said);
        ck_assert_msg(strstr(said, testutil_fmt("zerotrain: error: %s/%s", run, cases[i].says)),
                      "case %zu:\n%s", i, said);
        ck_assert_msg(access(testutil_path_in(run, "plots"), F_OK) != 0, "case %zu: drew", i);
    }
}
END_TEST

/* --rank picks the timeline's rank; one the file lacks is an error naming
 * the ranks it has, before anything is drawn. */
START_TEST(rank_picks_the_timeline)
{
    const char *out = testutil_tmpdir("plot-rank");
    const char *log = testutil_path_in(root, "rank.log");
    int rc = plot(log, testutil_fmt("%s/a/run --rank 1 --out %s/one", root, out));
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, testutil_slurp(log));
    assert_png(testutil_path_in(out, "one"), "memory_timeline.png");
    rc = plot(log, testutil_fmt("%s/a/run --rank 7 --out %s/seven", root, out));
    ck_assert_msg(rc == 2, "exit %d:\n%s", rc, testutil_slurp(log));
    ck_assert_msg(strstr(testutil_slurp(log), "--rank 7: ") &&
                      strstr(testutil_slurp(log), "has events of ranks 0-1 only"),
                  "%s", testutil_slurp(log));
    ck_assert_msg(access(testutil_path_in(out, "seven"), F_OK) != 0, "drew");
    rc = plot(log, testutil_fmt("%s/a/run --rank one", root));
    ck_assert_msg(rc == 2 && strstr(testutil_slurp(log), "--rank: 'one' is not a rank"), "%s",
                  testutil_slurp(log));
}
END_TEST

/* Without gnuplot on PATH: the message says what to install; exit 1. */
START_TEST(gnuplot_missing_says_what_to_install)
{
    const char *out = testutil_tmpdir("plot-nognuplot");
    const char *log = testutil_path_in(root, "nognuplot.log");
    const int rc =
        testutil_run(log, "PATH=%s %s plot %s/a/run --out %s/p", out, testutil_binary(), root, out);
    ck_assert_msg(rc == 1, "exit %d:\n%s", rc, testutil_slurp(log));
    ck_assert_msg(strstr(testutil_slurp(log), "zerotrain: error: gnuplot not found on PATH; "
                                              "install gnuplot-nox (scripts/deps.sh)"),
                  "%s", testutil_slurp(log));
}
END_TEST

/* zerotrain --help lists plot; plot --help says its usage and plots. */
START_TEST(help_lists_plot)
{
    const char *log = testutil_path_in(root, "help.log");
    ck_assert_int_eq(testutil_run(log, "%s --help", testutil_binary()), 0);
    ck_assert_msg(strstr(testutil_slurp(log), "  plot RUN_DIR...  "), "%s", testutil_slurp(log));
    ck_assert_int_eq(plot(log, "--help"), 0);
    ck_assert_msg(
        strstr(testutil_slurp(log), "usage: zerotrain plot RUN_DIR... [--out DIR] [--rank R]\n") &&
            strstr(testutil_slurp(log), "memory_timeline.png"),
        "%s", testutil_slurp(log));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plot");
    TCase *tc = testutil_tcase(s, "plot", 120);
    tcase_add_unchecked_fixture(tc, make_runs, NULL);
    tcase_add_test(tc, every_plot_of_two_runs);
    tcase_add_test(tc, missing_memory_files_skip_their_plots);
    tcase_add_test(tc, a_folder_that_is_not_a_run);
    tcase_add_test(tc, a_malformed_line_names_file_and_line);
    tcase_add_test(tc, rank_picks_the_timeline);
    tcase_add_test(tc, gnuplot_missing_says_what_to_install);
    tcase_add_test(tc, help_lists_plot);
    return testutil_run_suite(s, 0);
}
