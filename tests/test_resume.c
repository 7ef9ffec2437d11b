/* tests/test_resume.c — checkpoints end to end, through the binary under
 * mpirun: exact resume, resharding across world sizes and stages, crash
 * safety, every corruption, preemption by signal, and weights in and out. */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define MPIRUN    "mpirun --oversubscribe -np"
#define MAX_STEPS 64

static const char *micro(void)
{
    return testutil_source_path("tests/data/micro.yaml");
}

static int train(const char *dir, const char *name, int np, const char *extra)
{
    return testutil_train_micro(dir, name, np, extra);
}

static int losses(const char *dir, const char *name, double *out)
{
    return testutil_micro_losses(dir, name, out, MAX_STEPS);
}

/* Resuming at the same world size and stage continues bit for bit: the
 * final weights of an interrupted run equal an uninterrupted one's. */
START_TEST(exact_resume_is_bitwise)
{
    for (int stage = 0; stage <= 3; stage += 3) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s", testutil_tmpdir("resume-exact"));
        char common[512];
        snprintf(common, sizeof common,
                 "--set zero_optimization.stage=%d --set run.steps=8 "
                 "--set checkpoint.every=4",
                 stage);
        ck_assert_int_eq(
            train(dir, "a", 2, testutil_fmt("%s --set checkpoint.dir=%s/ca", common, dir)), 0);
        /* the same run, stopped after 4 steps, then resumed to 8 */
        ck_assert_int_eq(
            train(dir, "b", 2,
                  testutil_fmt("%s --set checkpoint.dir=%s/cb --set run.steps=4", common, dir)),
            0);
        ck_assert_int_eq(
            train(dir, "c", 2, testutil_fmt("%s --set checkpoint.dir=%s/cb", common, dir)), 0);
        ck_assert(strstr(testutil_slurp(testutil_fmt("%s/c.log", dir)), "resumed from") != NULL);
        double a[MAX_STEPS], c[MAX_STEPS];
        ck_assert_int_eq(losses(dir, "a", a), 8);
        ck_assert_int_eq(losses(dir, "c", c), 4);
        for (int i = 0; i < 4; i++)
            ck_assert_msg(a[4 + i] == c[i], "stage %d step %d: %.9g vs %.9g", stage, 5 + i,
                          a[4 + i], c[i]);
        const char *log = testutil_fmt("%s/export.log", dir);
        ck_assert_int_eq(testutil_run(log, "%s export %s/ca --out %s/a.safetensors",
                                      testutil_binary(), dir, dir),
                         0);
        ck_assert_int_eq(testutil_run(log, "%s export %s/cb --out %s/c.safetensors",
                                      testutil_binary(), dir, dir),
                         0);
        ck_assert_int_eq(testutil_run(log, "cmp %s/a.safetensors %s/c.safetensors", dir, dir), 0);
    }
}
END_TEST

/* Saved at 4 ranks under stage 3, resumed at 2 ranks stage 1 and 1 rank
 * stage 0 (with the accumulation that keeps the global batch): the next
 * losses match the uninterrupted 4-rank run. */
START_TEST(resharding_continues_the_run)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("resume-reshard"));
    ck_assert_int_eq(train(dir, "full", 4,
                           testutil_fmt("--set zero_optimization.stage=3 --set run.steps=10 "
                                        "--set checkpoint.every=5 --set checkpoint.keep=5 "
                                        "--set checkpoint.dir=%s/ck",
                                        dir)),
                     0);
    double full[MAX_STEPS], part[MAX_STEPS];
    ck_assert_int_eq(losses(dir, "full", full), 10);
    static const struct {
        int np, stage, accum;
        const char *name;
    } to[] = {{2, 1, 2, "two"}, {1, 0, 4, "one"}};
    for (size_t k = 0; k < 2; k++) {
        ck_assert_int_eq(train(dir, to[k].name, to[k].np,
                               testutil_fmt("--set zero_optimization.stage=%d "
                                            "--set gradient_accumulation_steps=%d "
                                            "--set run.steps=10 "
                                            "--set run.resume=%s/ck/step-00000005",
                                            to[k].stage, to[k].accum, dir)),
                         0);
        ck_assert_int_eq(losses(dir, to[k].name, part), 5);
        for (int i = 0; i < 5; i++)
            ck_assert_msg(fabs(part[i] - full[5 + i]) <= 1e-5 * fabs(full[5 + i]),
                          "%d ranks stage %d, step %d: %.9g vs %.9g", to[k].np, to[k].stage, 6 + i,
                          part[i], full[5 + i]);
    }
}
END_TEST

/* A rank killed while writing a checkpoint leaves the previous one
 * published and loadable. */
START_TEST(crash_while_saving_keeps_the_previous_checkpoint)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("resume-crash"));
    char ck[600];
    snprintf(ck, sizeof ck, "--set checkpoint.dir=%s/ck --set checkpoint.every=3 --set run.steps=6",
             dir);
    int rc = testutil_run(testutil_fmt("%s/crash.log", dir),
                          "ZT_TEST_CRASH_IN_SAVE=1,6 " MPIRUN
                          " 2 %s train %s --quiet --set run.output_dir=%s/a %s",
                          testutil_faulty_binary(), micro(), dir, ck);
    ck_assert_int_ne(rc, 0);
    const char *latest = testutil_slurp(testutil_fmt("%s/ck/latest", dir));
    ck_assert_msg(strncmp(latest, "step-00000003", 13) == 0, "latest: %s", latest);
    ck_assert_int_eq(train(dir, "b", 2, ck), 0);
    const char *out = testutil_slurp(testutil_fmt("%s/b.log", dir));
    ck_assert_msg(strstr(out, "resumed from") && strstr(out, "step-00000003"), "%s", out);
}
END_TEST

/* A rank killed in an update under NVMe offload, its state file half
 * written, leaves the last checkpoint intact: the rerun resumes from it,
 * overwrites the leftover file rather than trusting it, and repeats the
 * uninterrupted run's losses bit for bit. */
START_TEST(crash_in_an_nvme_update_keeps_the_last_checkpoint)
{
    char dir[512], nvme[1024], ca[1700], cb[1700];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("resume-nvme-crash"));
    ck_assert_int_eq(testutil_run(testutil_fmt("%s/mkdir.log", dir), "mkdir %s/nvme", dir), 0);
    snprintf(
        nvme, sizeof nvme,
        "--set zero_optimization.stage=3 --set zero_optimization.offload_optimizer.device=nvme "
        "--set zero_optimization.offload_optimizer.nvme_path=%s/nvme "
        "--set zero_optimization.offload_optimizer.buffer_size=300 --set run.steps=6 "
        "--set checkpoint.every=3",
        dir);
    snprintf(ca, sizeof ca, "%s --set checkpoint.dir=%s/ca", nvme, dir);
    snprintf(cb, sizeof cb, "%s --set checkpoint.dir=%s/cb", nvme, dir);
    double a[MAX_STEPS], b[MAX_STEPS];
    testutil_train_micro_losses(dir, "a", 2, ca, a, 6);
    int rc = testutil_run(testutil_fmt("%s/crash.log", dir),
                          "ZT_TEST_CRASH_IN_UPDATE=1,5 " MPIRUN
                          " 2 %s train %s --quiet --set run.output_dir=%s/b %s",
                          testutil_faulty_binary(), micro(), dir, cb);
    ck_assert_int_ne(rc, 0);
    const char *latest = testutil_slurp(testutil_fmt("%s/cb/latest", dir));
    ck_assert_msg(strncmp(latest, "step-00000003", 13) == 0, "latest: %s", latest);
    ck_assert_int_eq(testutil_run(testutil_fmt("%s/left.log", dir), "ls %s/nvme | grep -q .", dir),
                     0); /* the killed run's scratch is still there */
    testutil_train_micro_losses(dir, "b", 2, cb, b, 3);
    const char *out = testutil_slurp(testutil_fmt("%s/b.log", dir));
    ck_assert_msg(strstr(out, "resumed from") && strstr(out, "step-00000003"), "%s", out);
    /* the memory report names the files apart from the ledger's columns */
    ck_assert_msg(strstr(out, testutil_fmt(" in all) in %s/nvme: the fp32 master", dir)), "%s",
                  out);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(a[3 + i] == b[i], "step %d: %.17g uninterrupted, %.17g resumed", 4 + i,
                      a[3 + i], b[i]);
    ck_assert_int_ne(testutil_run(testutil_fmt("%s/left.log", dir), "ls %s/nvme | grep -q .", dir),
                     0); /* a clean end removes it */
}
END_TEST

/* Makes a checkpoint of the micro model at 2 ranks and returns its folder. */
static const char *make_checkpoint(const char *dir)
{
    ck_assert_int_eq(
        train(dir, "base", 2, testutil_fmt("--set checkpoint.dir=%s/ck --set run.steps=2", dir)),
        0);
    return testutil_fmt("%s/ck/step-00000002", dir);
}

/* Every corruption is caught before training, named, exit 1 everywhere. */
START_TEST(corrupt_checkpoints_are_named)
{
    static const struct {
        const char *damage; /* shell command run in the step folder */
        const char *message;
        const char *extra;
        int rc;
    } cases[] = {
        {"rm rank-00001.bin", "rank-00001.bin: missing", "", 1},
        {"truncate -s 100 rank-00000.bin", "rank-00000.bin: truncated", "", 1},
        {"printf 'X' | dd of=rank-00001.bin bs=1 seek=300 conv=notrunc 2>/dev/null",
         "checksum mismatch", "", 1},
        {"sed -i 's/\"format_version\": 2/\"format_version\": 7/' meta.json",
         "format version 7 is newer", "", 1},
        {"true", "another model shape", "--set model.n_embd=64 --set model.n_head=2", 1},
        /* its states are another optimizer's: a configuration mistake */
        {"sed -i 's/\"type\": \"AdamW\"/\"type\": \"Lion\"/' meta.json",
         "written with optimizer Lion, but the config asks for AdamW", "", 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s", testutil_tmpdir("resume-corrupt"));
        char step[600];
        snprintf(step, sizeof step, "%s", make_checkpoint(dir));
        const char *log = testutil_fmt("%s/damage.log", dir);
        ck_assert_int_eq(testutil_run(log, "cd %s && %s", step, cases[k].damage), 0);
        int rc =
            train(dir, "again", 2,
                  testutil_fmt("--set run.resume=%s --set run.steps=4 %s", step, cases[k].extra));
        const char *out = testutil_slurp(testutil_fmt("%s/again.log", dir));
        ck_assert_msg(rc == cases[k].rc, "case %zu: exit %d\n%s", k, rc, out);
        ck_assert_msg(strstr(out, cases[k].message) != NULL, "case %zu lacks '%s':\n%s", k,
                      cases[k].message, out);
        ck_assert_msg(testutil_count(out, "zerotrain: error:") == 1, "case %zu:\n%s", k, out);
        ck_assert_msg(strstr(out, "step ") == NULL || !strstr(out, "| loss"),
                      "case %zu trained:\n%s", k, out);
    }
}
END_TEST

/* SIGTERM to one rank mid-run: every rank stops at the next step boundary,
 * a checkpoint appears, all exit 0, and resuming continues the run. */
START_TEST(sigterm_to_one_rank_checkpoints_and_exits_0)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("resume-sigterm"));
    char metrics[600];
    snprintf(metrics, sizeof metrics, "%s/a.jsonl", dir);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             MPIRUN " 2 %s train %s --quiet --no-progress --set run.output_dir=%s/a "
                    "--set run.steps=1000000 --set checkpoint.dir=%s/ck --metrics %s "
                    ">%s/a.log 2>&1",
             testutil_binary(), micro(), dir, dir, metrics, dir);
    pid_t child = fork();
    ck_assert(child >= 0);
    if (child == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    const pid_t rank = testutil_wait_for_rank(metrics, 3, testutil_fmt("run.output_dir=%s/a", dir));
    ck_assert_msg(rank > 0, "no running rank found");
    ck_assert_int_eq(kill(rank, SIGTERM), 0);
    int status;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    const char *out = testutil_slurp(testutil_fmt("%s/a.log", dir));
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit %d:\n%s",
                  WEXITSTATUS(status), out);
    ck_assert_msg(strstr(out, "checkpoint saved (preempted)") != NULL, "%s", out);
    const int n = testutil_count(testutil_slurp(metrics), "\"loss\": ");
    ck_assert_int_eq(
        train(dir, "b", 2,
              testutil_fmt("--set checkpoint.dir=%s/ck --set run.steps=%d", dir, n + 2)),
        0);
    out = testutil_slurp(testutil_fmt("%s/b.log", dir));
    ck_assert_msg(strstr(out, testutil_fmt("at step %d", n)) != NULL, "%s", out);
    double after[MAX_STEPS];
    ck_assert_int_eq(losses(dir, "b", after), 2);
}
END_TEST

/* Export then init_from gives the same validation loss as the checkpoint;
 * a file from an independent writer loads; a shape mismatch is named. */
START_TEST(weights_in_and_out)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("resume-weights"));
    char step[600], eval[1200], log[600], a[256];
    snprintf(step, sizeof step, "%s", make_checkpoint(dir));
    snprintf(log, sizeof log, "%s/x.log", dir);
    snprintf(eval, sizeof eval, MPIRUN " 2 %s eval %s --set run.output_dir=%s/e", testutil_binary(),
             micro(), dir);
    ck_assert_int_eq(
        testutil_run(log, "%s export %s --out %s/m.safetensors", testutil_binary(), step, dir), 0);
    ck_assert_int_eq(testutil_run(log, "%s --checkpoint %s --metrics %s/a.json", eval, step, dir),
                     0);
    /* evaluation reads the weights only: another optimizer's states do not matter */
    ck_assert_int_eq(testutil_run(log,
                                  "sed -i 's/\"type\": \"AdamW\"/\"type\": \"Lion\"/' %s/meta.json "
                                  "&& %s --checkpoint %s --metrics %s/c.json",
                                  step, eval, step, dir),
                     0);
    char c[256];
    snprintf(c, sizeof c, "%s", testutil_slurp(testutil_fmt("%s/c.json", dir)));
    ck_assert_str_eq(c, testutil_slurp(testutil_fmt("%s/a.json", dir)));
    ck_assert_int_eq(testutil_run(log,
                                  "%s --set model.init_from=%s/m.safetensors "
                                  "--set zero_optimization.stage=3 --metrics %s/b.json",
                                  eval, dir, dir),
                     0);
    snprintf(a, sizeof a, "%s", testutil_slurp(testutil_fmt("%s/a.json", dir)));
    const char *b = testutil_slurp(testutil_fmt("%s/b.json", dir));
    ck_assert_msg(strcmp(a, b) == 0, "checkpoint %s vs exported %s", a, b);
    ck_assert(strstr(a, "\"val_loss\"") && strstr(a, "\"tokens\""));

    /* cut into shards as save_pretrained cuts them, read through the index or its folder */
    ck_assert_int_eq(testutil_run(log,
                                  "mkdir %s/hf && %s export %s --out %s/hf/model.safetensors "
                                  "--max-shard-size 40KB",
                                  dir, testutil_binary(), step, dir),
                     0);
    ck_assert_msg(strstr(testutil_slurp(log),
                         testutil_fmt("wrote %s/hf/model.safetensors.index.json and ", dir)),
                  "%s", testutil_slurp(log));
    static const char *const forms[] = {"hf", "hf/model.safetensors.index.json"};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(testutil_run(log, "%s --set model.init_from=%s/%s --metrics %s/s.json",
                                      eval, dir, forms[i], dir),
                         0);
        ck_assert_str_eq(testutil_slurp(testutil_fmt("%s/s.json", dir)), a);
    }

    ck_assert_int_eq(testutil_run(log, "%s --set model.init_from=%s", eval,
                                  testutil_source_path("tests/data/hf_gpt2_micro.safetensors")),
                     0);
    const char *out = testutil_slurp(log);
    const char *last = strstr(out, "val_loss ");
    ck_assert_msg(last && isfinite(strtod(last + 9, NULL)), "%s", out);

    int rc = testutil_run(log, "%s --set model.init_from=%s --set model.n_embd=64", eval,
                          testutil_source_path("tests/data/hf_gpt2_micro.safetensors"));
    out = testutil_slurp(log);
    ck_assert_msg(rc == 2 && strstr(out, "model.n_embd"), "exit %d:\n%s", rc, out);
}
END_TEST

/* A Llama checkpoint exported as one file and as shards with their index
 * starts evaluation from the same weights either way, at stages 0 and 3;
 * a config that contradicts the files is named by its key, exit 2. */
START_TEST(llama_weights_in_and_out)
{
    static const char llama[] = "--set model.family=llama --set model.n_kv_head=1 "
                                "--set model.intermediate_size=48";
    char dir[512], eval[1200], log[600], a[256];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("resume-llama"));
    snprintf(log, sizeof log, "%s/x.log", dir);
    ck_assert_int_eq(
        train(dir, "llama", 2,
              testutil_fmt("%s --set checkpoint.dir=%s/ck --set run.steps=2", llama, dir)),
        0);
    ck_assert_int_eq(
        testutil_run(log, "%s export %s/ck --out %s/one.safetensors", testutil_binary(), dir, dir),
        0);
    ck_assert_int_eq(testutil_run(log,
                                  "mkdir %s/hf && %s export %s/ck --out %s/hf/model.safetensors "
                                  "--max-shard-size 20KB",
                                  dir, testutil_binary(), dir, dir),
                     0);
    ck_assert_msg(strstr(testutil_slurp(log), "model.safetensors.index.json and "), "%s",
                  testutil_slurp(log));
    snprintf(eval, sizeof eval, MPIRUN " 2 %s eval %s --set run.output_dir=%s/e %s",
             testutil_binary(), micro(), dir, llama);
    ck_assert_int_eq(testutil_run(log,
                                  "%s --set model.init_from=%s/one.safetensors --metrics "
                                  "%s/a.json",
                                  eval, dir, dir),
                     0);
    snprintf(a, sizeof a, "%s", testutil_slurp(testutil_fmt("%s/a.json", dir)));
    ck_assert(strstr(a, "\"val_loss\""));
    ck_assert_int_eq(testutil_run(log,
                                  "%s --set model.init_from=%s/hf --set zero_optimization.stage=3 "
                                  "--metrics %s/b.json",
                                  eval, dir, dir),
                     0);
    ck_assert_str_eq(testutil_slurp(testutil_fmt("%s/b.json", dir)), a);

    int rc = testutil_run(log, "%s --set model.init_from=%s/hf --set model.n_kv_head=2", eval, dir);
    const char *out = testutil_slurp(log);
    ck_assert_msg(rc == 2 && strstr(out, "model.layers.0.self_attn.k_proj.weight has shape [16, "
                                         "32] but the config says model.n_kv_head 2"),
                  "exit %d:\n%s", rc, out);
    ck_assert_int_eq(testutil_count(out, "zerotrain: error:"), 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("resume");
    TCase *tc = tcase_create("checkpoints");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, exact_resume_is_bitwise);
    tcase_add_test(tc, resharding_continues_the_run);
    tcase_add_test(tc, crash_while_saving_keeps_the_previous_checkpoint);
    tcase_add_test(tc, corrupt_checkpoints_are_named);
    tcase_add_test(tc, sigterm_to_one_rank_checkpoints_and_exits_0);
    tcase_add_test(tc, weights_in_and_out);
    tcase_add_test(tc, llama_weights_in_and_out);
    suite_add_tcase(s, tc);
    TCase *nvme = tcase_create("nvme"); /* CK_RUN_CASE=nvme runs it alone */
    tcase_set_timeout(nvme, 300);
    tcase_add_test(nvme, crash_in_an_nvme_update_keeps_the_last_checkpoint);
    suite_add_tcase(s, nvme);
    return testutil_run_suite(s, 0);
}
