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

static int read_losses(const char *path, double *loss)
{
    return testutil_read_losses(path, loss, MAX_STEPS);
}

#define MPIRUN "mpirun --oversubscribe -np"
/* Runs that train to the end save no final folder: test_outputs checks
 * that save, and here it would only cost time. */
#define NO_FINAL "--set run.save_final=false "

/* config_offload_note's line (config/config.h). */
#define OFFLOAD_NOTE                                                                               \
    "zero_optimization.offload_optimizer (device: cpu) changes nothing on device cpu: the "        \
    "optimizer states already live in host memory"

START_TEST(world_size_and_accumulation_are_interchangeable)
{
    const char *dir = testutil_tmpdir("cli-equiv");
    char log[600];
    snprintf(log, sizeof log, "%s/log", dir);
    const char *cfg = testutil_source_path("tests/data/micro.yaml");
    ck_assert_int_eq(testutil_run(log,
                                  MPIRUN " 1 %s train %s --quiet " NO_FINAL
                                         "--set run.output_dir=%s/a "
                                         "--set gradient_accumulation_steps=2 --metrics %s/a.jsonl",
                                  testutil_binary(), cfg, dir, dir),
                     0);
    ck_assert_int_eq(testutil_run(log,
                                  MPIRUN " 2 %s train %s --quiet " NO_FINAL
                                         "--set run.output_dir=%s/b "
                                         "--set gradient_accumulation_steps=1 --metrics %s/b.jsonl",
                                  testutil_binary(), cfg, dir, dir),
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
    ck_assert_int_eq(
        testutil_run(log,
                     MPIRUN " 2 %s train %s --quiet " NO_FINAL "--set run.output_dir=%s "
                            "--set run.eval_interval=0 --set run.eval_batches=4 --metrics %s",
                     testutil_binary(), testutil_source_path("configs/tiny.yaml"), dir, metrics),
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
    const char *out = testutil_slurp(log);
    ck_assert_msg(strstr(out, "val loss") != NULL, "no validation loss printed:\n%s", out);
}
END_TEST

START_TEST(bad_config_exits_2_everywhere_message_once)
{
    const char *dir = testutil_tmpdir("cli-bad");
    char log[600];
    snprintf(log, sizeof log, "%s/log", dir);
    int rc = testutil_run(log, MPIRUN " 2 %s train %s --set model.n_head=3 --set run.output_dir=%s",
                          testutil_binary(), testutil_source_path("tests/data/micro.yaml"), dir);
    ck_assert_int_eq(rc, 2);
    const char *out = testutil_slurp(log);
    ck_assert_msg(testutil_count(out, "zerotrain: error:") == 1, "output:\n%s", out);
    ck_assert_msg(strstr(out, "n_head") != NULL, "output:\n%s", out);
}
END_TEST

START_TEST(missing_data_names_the_path)
{
    const char *dir = testutil_tmpdir("cli-nodata");
    char log[600];
    snprintf(log, sizeof log, "%s/log", dir);
    int rc = testutil_run(log,
                          MPIRUN " 2 %s train %s --set data.train=/nonexistent/corpus.bin "
                                 "--set run.output_dir=%s",
                          testutil_binary(), testutil_source_path("tests/data/micro.yaml"), dir);
    ck_assert_int_eq(rc, 2);
    const char *out = testutil_slurp(log);
    ck_assert_msg(strstr(out, "/nonexistent/corpus.bin") != NULL, "output:\n%s", out);
    ck_assert_int_eq(testutil_count(out, "zerotrain: error:"), 1);
}
END_TEST

/* A config path that does not exist is the user's mistake: exit status 2
 * on every rank, one message naming the path. */
START_TEST(missing_config_exits_2_naming_the_path)
{
    const char *dir = testutil_tmpdir("cli-nocfg");
    char log[600];
    snprintf(log, sizeof log, "%s/log", dir);
    int rc = testutil_run(log, MPIRUN " 2 %s train %s/nowhere.yaml", testutil_binary(), dir);
    ck_assert_int_eq(rc, 2);
    const char *out = testutil_slurp(log);
    ck_assert_msg(testutil_count(out, "zerotrain: error: cannot open the configuration file ") == 1,
                  "output:\n%s", out);
    ck_assert_msg(strstr(out, "/nowhere.yaml: No such file or directory") != NULL, "output:\n%s",
                  out);
}
END_TEST

/* "--set key=" (an empty shell variable, usually) is refused, not taken as
 * null, which would silently restore the default. */
START_TEST(empty_set_value_exits_2_naming_the_argument)
{
    const char *dir = testutil_tmpdir("cli-emptyset");
    char log[600];
    snprintf(log, sizeof log, "%s/log", dir);
    int rc = testutil_run(log,
                          MPIRUN " 2 %s train %s --set optimizer.params.lr= --set "
                                 "run.output_dir=%s",
                          testutil_binary(), testutil_source_path("tests/data/micro.yaml"), dir);
    ck_assert_int_eq(rc, 2);
    const char *out = testutil_slurp(log);
    ck_assert_msg(testutil_count(out, "zerotrain: error: --set optimizer.params.lr=: empty value "
                                      "(give a value, or null to restore the default)") == 1,
                  "output:\n%s", out);
}
END_TEST

/* A DeepSpeed ZeRO-3 file runs as it is, with one warning (rank 0's)
 * listing the settings zerotrain does not act on. */
START_TEST(deepspeed_config_runs_with_one_warning)
{
    const char *dir = testutil_tmpdir("cli-ds");
    char log[600];
    snprintf(log, sizeof log, "%s/log", dir);
    int rc =
        testutil_run(log,
                     MPIRUN " 2 %s train %s --quiet --dry-run --set data.train=%s "
                            "--set model.n_layer=1 --set run.output_dir=%s",
                     testutil_binary(), testutil_source_path("tests/data/deepspeed_zero3.json"),
                     testutil_source_path("tests/data/trajectory_corpus.txt"), dir);
    const char *out = testutil_slurp(log);
    ck_assert_msg(rc == 0, "exit %d, output:\n%s", rc, out);
    ck_assert_msg(testutil_count(out, "zerotrain: warning:") == 1, "output:\n%s", out);
    ck_assert_msg(testutil_count(out, "does not act on 8 DeepSpeed settings") == 1, "output:\n%s",
                  out);
    ck_assert_msg(strstr(out, "tensorboard (enabled: true)"), "output:\n%s", out);
    /* offload_optimizer is read, and on the CPU said to change nothing */
    ck_assert_msg(testutil_count(out, "zero_optimization.offload_optimizer") == 1 &&
                      testutil_count(out, OFFLOAD_NOTE) == 1,
                  "output:\n%s", out);
    ck_assert_msg(!strstr(out, "zerotrain: error"), "output:\n%s", out);
}
END_TEST

/* ZeRO-Offload on the CPU: rank 0 alone says, once, that it changes
 * nothing, and the run trains exactly as without the key (the same losses,
 * bit for bit). */
START_TEST(offload_optimizer_on_cpu_notes_once_and_changes_nothing)
{
    enum { STEPS = 10 };
    const char *dir = testutil_tmpdir("cli-offload");
    double plain[STEPS], offload[STEPS];
    testutil_train_micro_losses(dir, "plain", 2, "--set zero_optimization.stage=2", plain, STEPS);
    testutil_train_micro_losses(dir, "offload", 2,
                                "--set zero_optimization.stage=2 "
                                "--set zero_optimization.offload_optimizer.device=cpu "
                                "--set zero_optimization.offload_optimizer.pin_memory=true",
                                offload, STEPS);
    for (int i = 0; i < STEPS; i++)
        ck_assert_msg(plain[i] == offload[i], "step %d: loss %.9g with offload, %.9g without",
                      i + 1, offload[i], plain[i]);
    const char *out = testutil_slurp(testutil_path_in(dir, "offload.log"));
    ck_assert_msg(testutil_count(out, "zerotrain: note: " OFFLOAD_NOTE "\n") == 1 &&
                      testutil_count(out, "offload_optimizer") == 1 && !strstr(out, "warning") &&
                      !strstr(out, "error"),
                  "output:\n%s", out);
    out = testutil_slurp(testutil_path_in(dir, "plain.log"));
    ck_assert_msg(!strstr(out, "offload_optimizer"), "output:\n%s", out);
}
END_TEST

/* data.val_fraction: 0 without data.val: no validation set, so the run
 * trains and does not evaluate; asking for evaluations as well is a
 * configuration error found at start-up, printed once. */
START_TEST(no_validation_data_means_no_evaluation)
{
    const char *dir = testutil_tmpdir("cli-noval");
    char log[600];
    snprintf(log, sizeof log, "%s/log", dir);
    int rc = testutil_run(log,
                          MPIRUN " 2 %s train %s --quiet " NO_FINAL "--set data.val_fraction=0 "
                                 "--set run.steps=2 --set run.output_dir=%s",
                          testutil_binary(), testutil_source_path("tests/data/micro.yaml"), dir);
    const char *out = testutil_slurp(log);
    ck_assert_msg(rc == 0, "exit %d, output:\n%s", rc, out);
    ck_assert_msg(strstr(out, "no validation data (data.val_fraction: 0): not evaluated") &&
                      !strstr(out, "val loss") && !strstr(out, "error"),
                  "output:\n%s", out);

    rc = testutil_run(log,
                      MPIRUN " 2 %s train %s --quiet --set data.val_fraction=0 "
                             "--set run.eval_interval=1 --set run.output_dir=%s",
                      testutil_binary(), testutil_source_path("tests/data/micro.yaml"), dir);
    out = testutil_slurp(log);
    ck_assert_msg(rc == 2, "exit %d, output:\n%s", rc, out);
    ck_assert_msg(testutil_count(out, "zerotrain: error:") == 1 &&
                      strstr(out, "run.eval_interval: 1 asks for evaluations, but there is no "
                                  "validation data (data.val_fraction is 0"),
                  "output:\n%s", out);
    ck_assert_msg(!strstr(out, "step "), "trained before refusing:\n%s", out);

    /* eval with nothing to evaluate on: a configuration error, printed once */
    rc = testutil_run(log, MPIRUN " 2 %s eval %s --set data.val_fraction=0 --set run.output_dir=%s",
                      testutil_binary(), testutil_source_path("tests/data/micro.yaml"), dir);
    out = testutil_slurp(log);
    ck_assert_msg(rc == 2, "exit %d, output:\n%s", rc, out);
    ck_assert_msg(testutil_count(out, "zerotrain: error:") == 1 &&
                      strstr(out, "eval: there is no validation data to evaluate on"),
                  "output:\n%s", out);

    /* Validation data without one window: found before training too, and
     * printed once. */
    ck_assert_int_eq(testutil_run(log, "(printf 'too short' > %s/v.txt)", dir), 0);
    rc = testutil_run(log,
                      MPIRUN " 2 %s train %s --quiet --set data.val=%s/v.txt "
                             "--set run.output_dir=%s",
                      testutil_binary(), testutil_source_path("tests/data/micro.yaml"), dir, dir);
    out = testutil_slurp(log);
    ck_assert_msg(rc == 1, "exit %d, output:\n%s", rc, out);
    ck_assert_msg(testutil_count(out, "validation data has no window") == 1, "output:\n%s", out);
    ck_assert_msg(!strstr(out, "step "), "trained before refusing:\n%s", out);
}
END_TEST

START_TEST(usage_errors_and_info_commands)
{
    const char *dir = testutil_tmpdir("cli-usage");
    char log[600];
    snprintf(log, sizeof log, "%s/log", dir);
    ck_assert_int_eq(testutil_run(log, "%s version", testutil_binary()), 0);
    ck_assert(strstr(testutil_slurp(log), "zerotrain ") != NULL);
    ck_assert_int_eq(testutil_run(log, "%s help", testutil_binary()), 0);
    ck_assert(strstr(testutil_slurp(log), "prepare") != NULL);
    ck_assert_int_eq(testutil_run(log, "%s frobnicate", testutil_binary()), 2);
    ck_assert(strstr(testutil_slurp(log), "unknown command 'frobnicate'") != NULL);
    ck_assert_int_eq(testutil_run(log, "%s", testutil_binary()), 2);
    ck_assert_int_eq(testutil_run(log, MPIRUN " 1 %s train", testutil_binary()), 2);
    ck_assert(strstr(testutil_slurp(log), "missing CONFIG") != NULL);
    ck_assert_int_eq(testutil_run(log, MPIRUN " 1 %s train x.yaml --bogus", testutil_binary()), 2);
    ck_assert(strstr(testutil_slurp(log), "--bogus") != NULL);
    ck_assert_int_eq(testutil_run(log, "%s prepare --out", testutil_binary()), 2);
}
END_TEST

/* export's shard size: Hugging Face's strings, a bad one refused (exit
 * 2, like every usage error) naming it before any checkpoint is read; the
 * help says what is taken and the default. */
START_TEST(export_max_shard_size_usage)
{
    const char *dir = testutil_tmpdir("cli-export");
    char log[600];
    snprintf(log, sizeof log, "%s/log", dir);
    static const char *const bad[] = {"5XB", "0", "5gb", "1.5", "-1GB"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(testutil_run(log,
                                      "%s export %s/none --out %s/m.safetensors "
                                      "--max-shard-size '%s'",
                                      testutil_binary(), dir, dir, bad[i]),
                         2);
        const char *out = testutil_slurp(log);
        ck_assert_msg(strstr(out, testutil_fmt("zerotrain: error: --max-shard-size %s: expected "
                                               "a size of at least one byte like 5GB",
                                               bad[i])) &&
                          testutil_count(out, "zerotrain: error:") == 1,
                      "%s", out);
    }
    ck_assert_int_eq(testutil_run(log, "%s export %s/none --out %s/m.safetensors --max-shard-size",
                                  testutil_binary(), dir, dir),
                     2);
    ck_assert(strstr(testutil_slurp(log), "'--max-shard-size': unknown option or missing value"));
    /* a good size gets as far as the checkpoint, which names nothing: exit 2 */
    ck_assert_int_eq(testutil_run(log,
                                  "%s export %s/none --out %s/m.safetensors "
                                  "--max-shard-size 2GiB",
                                  testutil_binary(), dir, dir),
                     2);
    ck_assert(strstr(testutil_slurp(log), "none: no such folder"));
    ck_assert_int_eq(testutil_run(log, "%s help export", testutil_binary()), 0);
    const char *help = testutil_slurp(log);
    ck_assert_msg(strstr(help, "--max-shard-size SIZE") && strstr(help, "(default 5GB") &&
                      strstr(help, "NAME-00001-of-0000N.safetensors") &&
                      strstr(help, "NAME.safetensors.index.json"),
                  "%s", help);
    ck_assert_int_eq(testutil_run(log, "%s help", testutil_binary()), 0);
    ck_assert_msg(strstr(testutil_slurp(log), "a Hugging Face model folder (weights,\n") &&
                      !strstr(testutil_slurp(log), "GPT-2"),
                  "%s", testutil_slurp(log));
}
END_TEST

START_TEST(prepare_then_train_and_eval_on_the_token_file)
{
    const char *dir = testutil_tmpdir("cli-prepare");
    char log[600];
    snprintf(log, sizeof log, "%s/log", dir);
    ck_assert_int_eq(testutil_run(log, "%s prepare --out %s/lic.tok /usr/share/common-licenses",
                                  testutil_binary(), dir),
                     0);
    ck_assert(strstr(testutil_slurp(log), "wrote ") != NULL);
    ck_assert_int_eq(
        testutil_run(log,
                     MPIRUN " 2 %s train %s --quiet " NO_FINAL "--set data.train=%s/lic.tok "
                            "--set run.steps=2 --set run.output_dir=%s/run",
                     testutil_binary(), testutil_source_path("tests/data/micro.yaml"), dir, dir),
        0);
    ck_assert_int_eq(testutil_run(log,
                                  MPIRUN " 2 %s eval %s --set data.train=%s/lic.tok "
                                         "--set run.output_dir=%s/run --metrics %s/eval.json",
                                  testutil_binary(), testutil_source_path("tests/data/micro.yaml"),
                                  dir, dir, dir),
                     0);
    const char *out = testutil_slurp(log);
    const char *last = strstr(out, "val_loss ");
    ck_assert_msg(last != NULL, "no val_loss line:\n%s", out);
    double v = strtod(last + 9, NULL);
    ck_assert_msg(v > 4.0 && v < 7.0, "untrained val_loss %g should be near ln 256", v);
    char eval_json[600];
    snprintf(eval_json, sizeof eval_json, "%s/eval.json", dir);
    ck_assert(strstr(testutil_slurp(eval_json), "\"val_loss\"") != NULL);
}
END_TEST

START_TEST(dry_run_reports_memory_without_training)
{
    const char *dir = testutil_tmpdir("cli-dry");
    char log[600], json[600];
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(json, sizeof json, "%s/mem.json", dir);
    ck_assert_int_eq(testutil_run(log,
                                  MPIRUN " 2 %s train %s --quiet --dry-run --print-partition "
                                         "--set zero_optimization.stage=3 --set run.output_dir=%s "
                                         "--memory-report %s",
                                  testutil_binary(), testutil_source_path("configs/small.yaml"),
                                  dir, json),
                     0);
    const char *out = testutil_slurp(log);
    ck_assert_msg(strstr(out, "dry run") && strstr(out, "baseline") && strstr(out, "partition:"),
                  "output:\n%s", out);
    ck_assert_msg(!strstr(out, "loss "), "a dry run must not train:\n%s", out);
    const char *j = testutil_slurp(json);
    const char *keys[] = {"\"world_size\": 2",   "\"stage\": 3", "\"n_params\": 10844160",
                          "\"bytes_per_param\"", "\"baseline\"", "\"expected_model_states\"",
                          "\"ranks\"",           "\"rss_peak\"", "\"gathered_params\""};
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
    tcase_add_test(tc, export_max_shard_size_usage);
    tcase_add_test(tc, world_size_and_accumulation_are_interchangeable);
    tcase_add_test(tc, bad_config_exits_2_everywhere_message_once);
    tcase_add_test(tc, missing_data_names_the_path);
    tcase_add_test(tc, missing_config_exits_2_naming_the_path);
    tcase_add_test(tc, empty_set_value_exits_2_naming_the_argument);
    tcase_add_test(tc, deepspeed_config_runs_with_one_warning);
    tcase_add_test(tc, offload_optimizer_on_cpu_notes_once_and_changes_nothing);
    tcase_add_test(tc, no_validation_data_means_no_evaluation);
    tcase_add_test(tc, prepare_then_train_and_eval_on_the_token_file);
    tcase_add_test(tc, dry_run_reports_memory_without_training);
    tcase_add_test(tc, tiny_loss_falls_within_100_steps);
    suite_add_tcase(s, tc);
    return testutil_run_suite(s, 0);
}
