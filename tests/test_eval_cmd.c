/* tests/test_eval_cmd.c — what the commands that take weights evaluate or
 * start from, through the binary under mpirun: eval without --checkpoint
 * takes what the config names and says which; a checkpoint folder and a
 * step folder are accepted alike wherever a checkpoint is taken, and a
 * folder that is neither is named with what was expected; a resume that
 * overrides model.init_from, or leaves nothing to train, says so; a
 * checkpoint.dir that does not exist is an error; every validation window
 * counts, whatever the micro batch, rank count or stage. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MAX_STEPS 16

/* `zerotrain eval` of the micro config at np ranks; log in dir/name.log,
 * {"val_loss": ...} in dir/name.json. Returns the exit status. */
static int eval(const char *dir, const char *name, int np, const char *extra)
{
    return testutil_run(testutil_path_in(dir, testutil_fmt("%s.log", name)),
                        "mpirun --oversubscribe -np %d %s eval %s --set run.output_dir=%s/e "
                        "--metrics %s/%s.json %s",
                        np, testutil_binary(), testutil_source_path("tests/data/micro.yaml"), dir,
                        dir, name, extra);
}

/* The text of dir/name.EXT in a new buffer (testutil_slurp's is shared). */
static char *text_of(const char *dir, const char *name, const char *ext)
{
    char *t = strdup(testutil_slurp(testutil_fmt("%s/%s.%s", dir, name, ext)));
    ck_assert(t != NULL);
    return t;
}

/* Trains the micro model for `steps` steps at 2 ranks into dir/ck. */
static void make_checkpoint(const char *dir, int steps)
{
    ck_assert_int_eq(testutil_train_micro(dir, "base", 2,
                                          testutil_fmt("--set checkpoint.dir=%s/ck "
                                                       "--set run.steps=%d",
                                                       dir, steps)),
                     0);
}

static const char *hf_file(void)
{
    return testutil_source_path("tests/data/hf_gpt2_micro.safetensors");
}

/* eval CONFIG evaluates the latest checkpoint of checkpoint.dir, else
 * model.init_from, else warns that the weights are random; one line on
 * rank 0 says which. */
START_TEST(eval_takes_what_the_config_names)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("eval-names"));
    make_checkpoint(dir, 2);

    ck_assert_int_eq(eval(dir, "latest", 2, testutil_fmt("--set checkpoint.dir=%s/ck", dir)), 0);
    char *out = text_of(dir, "latest", "log");
    const char *line = testutil_fmt(
        "evaluating checkpoint %s/ck/step-00000002 (step 2, the latest in checkpoint.dir)\n", dir);
    ck_assert_msg(testutil_count(out, line) == 1, "want once: %s\n%s", line, out);
    free(out);
    ck_assert_int_eq(eval(dir, "given", 1, testutil_fmt("--checkpoint %s/ck/step-00000002", dir)),
                     0);
    char *latest = text_of(dir, "latest", "json"), *given = text_of(dir, "given", "json");
    ck_assert_str_eq(latest, given);

    /* the checkpoint is what this config trained: init_from is named unused */
    ck_assert_int_eq(
        eval(dir, "both", 1,
             testutil_fmt("--set checkpoint.dir=%s/ck --set model.init_from=%s", dir, hf_file())),
        0);
    out = text_of(dir, "both", "log");
    ck_assert_msg(strstr(out, testutil_fmt("; model.init_from %s is not used", hf_file())), "%s",
                  out);
    free(out);
    char *both = text_of(dir, "both", "json");
    ck_assert_str_eq(both, latest);
    free(both);

    ck_assert_int_eq(eval(dir, "hf", 1, testutil_fmt("--set model.init_from=%s", hf_file())), 0);
    out = text_of(dir, "hf", "log");
    ck_assert_msg(
        strstr(out, testutil_fmt("evaluating weights from %s (model.init_from)\n", hf_file())),
        "%s", out);
    free(out);

    ck_assert_int_eq(eval(dir, "random", 1, ""), 0);
    out = text_of(dir, "random", "log");
    ck_assert_msg(strstr(out, "zerotrain: warning: no checkpoint or init_from named: evaluating "
                              "randomly initialised weights\n"),
                  "%s", out);
    free(out);
    char *random = text_of(dir, "random", "json");
    ck_assert_str_ne(random, latest);
    free(random);

    /* a folder that exists but holds nothing yet: said, initial weights */
    ck_assert_int_eq(testutil_run(testutil_path_in(dir, "mk.log"), "mkdir -p %s/empty", dir), 0);
    ck_assert_int_eq(eval(dir, "empty", 1, testutil_fmt("--set checkpoint.dir=%s/empty", dir)), 0);
    out = text_of(dir, "empty", "log");
    ck_assert_msg(strstr(out, testutil_fmt("zerotrain: warning: checkpoint.dir %s/empty holds no "
                                           "checkpoint and no model.init_from is named",
                                           dir)),
                  "%s", out);
    free(out);
    /* one that does not exist names nothing trained: an error, once */
    int rc = eval(dir, "none", 2, testutil_fmt("--set checkpoint.dir=%s/none", dir));
    out = text_of(dir, "none", "log");
    ck_assert_msg(rc == 2 &&
                      strstr(out, testutil_fmt("checkpoint.dir: %s/none: no such folder", dir)),
                  "exit %d:\n%s", rc, out);
    ck_assert_msg(testutil_count(out, "zerotrain: error:") == 1 && !strstr(out, "val_loss"), "%s",
                  out);
    free(out);
    free(latest);
    free(given);
}
END_TEST

/* eval --checkpoint, export and run.resume take the checkpoint folder (the
 * one with `latest`) as they take the step folder it names. */
START_TEST(a_checkpoint_folder_is_taken_everywhere)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("eval-folder"));
    make_checkpoint(dir, 2);

    ck_assert_int_eq(eval(dir, "step", 1, testutil_fmt("--checkpoint %s/ck/step-00000002", dir)),
                     0);
    ck_assert_int_eq(eval(dir, "folder", 1, testutil_fmt("--checkpoint %s/ck/", dir)), 0);
    char *out = text_of(dir, "folder", "log");
    ck_assert_msg(
        strstr(out, testutil_fmt("evaluating checkpoint %s/ck/step-00000002 (step 2)\n", dir)),
        "%s", out);
    free(out);
    char *step = text_of(dir, "step", "json"), *folder = text_of(dir, "folder", "json");
    ck_assert_str_eq(folder, step);
    free(step);
    free(folder);

    const char *log = testutil_path_in(dir, "export.log");
    ck_assert_int_eq(
        testutil_run(log, "%s export %s/ck --out %s/a.safetensors", testutil_binary(), dir, dir),
        0);
    ck_assert_int_eq(testutil_run(log, "%s export %s/ck/step-00000002 --out %s/b.safetensors",
                                  testutil_binary(), dir, dir),
                     0);
    ck_assert_int_eq(testutil_run(log, "cmp %s/a.safetensors %s/b.safetensors", dir, dir), 0);

    ck_assert_int_eq(
        testutil_train_micro(dir, "resumed", 2,
                             testutil_fmt("--set run.resume=%s/ck --set run.steps=3", dir)),
        0);
    out = text_of(dir, "resumed", "log");
    ck_assert_msg(strstr(out, testutil_fmt("resumed from %s/ck/step-00000002 at step 2 "
                                           "(run.resume names it)",
                                           dir)),
                  "%s", out);
    free(out);
    double loss[MAX_STEPS];
    ck_assert_int_eq(testutil_micro_losses(dir, "resumed", loss, MAX_STEPS), 1);

    /* model.init_from takes a weights file: a checkpoint folder there is
     * named, with the two ways to what was meant */
    int rc = eval(dir, "init", 2, testutil_fmt("--set model.init_from=%s/ck", dir));
    out = text_of(dir, "init", "log");
    ck_assert_msg(rc == 2 &&
                      strstr(out, testutil_fmt("model.init_from: %s/ck is a folder: expected "
                                               "a Hugging Face .safetensors file",
                                               dir)),
                  "exit %d:\n%s", rc, out);
    ck_assert_int_eq(testutil_count(out, "zerotrain: error:"), 1);
    free(out);
}
END_TEST

/* A folder that is neither a checkpoint nor a checkpoint folder is refused
 * by every command that takes one, with what was expected; exit 1. */
START_TEST(a_folder_that_is_neither_is_named)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("eval-neither"));
    const char *log = testutil_path_in(dir, "setup.log");
    ck_assert_int_eq(testutil_run(log,
                                  "mkdir -p %s/plain %s/unpublished/step-00000004 "
                                  "%s/broken/step-00000004",
                                  dir, dir, dir),
                     0);
    static const struct {
        const char *folder, *message;
        int exit_status; /* 1: a broken checkpoint; 2: a path that names nothing */
    } cases[] = {
        {"plain",
         "plain: neither a checkpoint (no meta.json) nor a checkpoint folder (no "
         "`latest` file): expected a step-NNNNNNNN folder or the checkpoint.dir "
         "holding them",
         1},
        {"unpublished",
         "unpublished: holds 1 step folder(s) but no `latest` file, so no "
         "checkpoint in it was completed",
         1},
        {"broken/step-00000004",
         "broken/step-00000004/meta.json: missing: the checkpoint was "
         "never completed",
         1},
        {"missing", "missing: no such folder: expected a step-NNNNNNNN folder", 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, cases[k].folder);
        static const char *const commands[] = {"eval", "export", "resume"};
        for (int c = 0; c < 3; c++) {
            int rc;
            if (c == 0)
                rc = eval(dir, "x", 2, testutil_fmt("--checkpoint %s", path));
            else if (c == 1)
                rc = testutil_run(testutil_path_in(dir, "x.log"), "%s export %s --out %s/o.st",
                                  testutil_binary(), path, dir);
            else
                rc = testutil_train_micro(dir, "x", 2, testutil_fmt("--set run.resume=%s", path));
            const char *out = testutil_slurp(testutil_path_in(dir, "x.log"));
            ck_assert_msg(rc == cases[k].exit_status, "%s %s: exit %d\n%s", commands[c], path, rc,
                          out);
            ck_assert_msg(strstr(out, cases[k].message) != NULL, "%s %s lacks '%s':\n%s",
                          commands[c], path, cases[k].message, out);
            ck_assert_msg(testutil_count(out, "zerotrain: error:") == 1, "%s %s:\n%s", commands[c],
                          path, out);
        }
    }
}
END_TEST

/* A checkpoint in checkpoint.dir wins over model.init_from and says so;
 * one already at run.steps trains nothing, says so and exits 0. */
START_TEST(a_resume_says_what_it_overrides)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("eval-resume"));
    make_checkpoint(dir, 2);
    char both[1200];
    snprintf(both, sizeof both, "--set checkpoint.dir=%s/ck --set model.init_from=%s", dir,
             hf_file());

    ck_assert_int_eq(
        testutil_train_micro(dir, "more", 2, testutil_fmt("%s --set run.steps=3", both)), 0);
    char *out = text_of(dir, "more", "log");
    ck_assert_msg(strstr(out, testutil_fmt("resumed from %s/ck/step-00000002 at step 2 (the latest "
                                           "checkpoint in %s/ck); model.init_from %s is not used: "
                                           "set run.resume: never to start from it",
                                           dir, dir, hf_file())),
                  "%s", out);
    free(out);

    ck_assert_int_eq(
        testutil_train_micro(dir, "done", 2, testutil_fmt("%s --set run.steps=3", both)), 0);
    out = text_of(dir, "done", "log");
    ck_assert_msg(strstr(out, "checkpoint at step 3 >= run.steps 3: nothing to train\n"), "%s",
                  out);
    ck_assert_msg(strstr(out, "training ") == NULL, "%s", out);
    free(out);
    double loss[MAX_STEPS];
    ck_assert_int_eq(testutil_micro_losses(dir, "done", loss, MAX_STEPS), 0);

    ck_assert_int_eq(testutil_train_micro(dir, "fresh", 2,
                                          testutil_fmt("%s --set run.resume=never "
                                                       "--set checkpoint.dir=%s/ck2 "
                                                       "--set run.steps=1",
                                                       both, dir)),
                     0);
    out = text_of(dir, "fresh", "log");
    ck_assert_msg(
        strstr(out, testutil_fmt("starting from the weights in %s (model.init_from)\n", hf_file())),
        "%s", out);
    free(out);
}
END_TEST

/* The val_loss and token count of dir/name.json. */
static void read_eval(const char *dir, const char *name, double *loss, unsigned long long *tokens)
{
    const char *json = testutil_slurp(testutil_fmt("%s/%s.json", dir, name));
    ck_assert_msg(sscanf(json, "{\"val_loss\": %lf, \"tokens\": %llu}", loss, tokens) == 2, "%s",
                  json);
}

/* Every validation window counts, a partial last batch too, whatever the
 * micro batch, rank count or stage: the same tokens, the same loss within
 * 1e-6. 37 windows divide by none of the batch sizes or rank counts. */
START_TEST(eval_covers_the_whole_set)
{
    enum { WINDOWS = 37, T = 32 };
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("eval-whole"));
    /* WINDOWS * T + 1 bytes (the byte tokenizer): exactly WINDOWS windows */
    ck_assert_int_eq(testutil_run(testutil_path_in(dir, "val.log"),
                                  "(head -c %d /usr/share/common-licenses/GPL-3 > %s/val.txt)",
                                  WINDOWS * T + 1, dir),
                     0);
    static const struct {
        const char *name;
        int np, micro, stage;
    } runs[] = {{"m1", 1, 1, 0},   {"m5", 1, 5, 0},     {"m12x2", 2, 12, 0},
                {"m5x3", 3, 5, 2}, {"m5x2s3", 2, 5, 3}, {"m2x3s3", 3, 2, 3}};
    double first = 0.0;
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        const char *extra = testutil_fmt("--set data.val=%s/val.txt --set run.eval_batches=0 "
                                         "--set train_micro_batch_size_per_gpu=%d "
                                         "--set zero_optimization.stage=%d",
                                         dir, runs[i].micro, runs[i].stage);
        int rc = eval(dir, runs[i].name, runs[i].np, extra);
        ck_assert_msg(rc == 0, "%s: exit %d\n%s", runs[i].name, rc,
                      testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", runs[i].name))));
        double loss;
        unsigned long long tokens;
        read_eval(dir, runs[i].name, &loss, &tokens);
        ck_assert_msg(tokens == (unsigned long long)WINDOWS * T, "%s: %llu tokens", runs[i].name,
                      tokens);
        if (i == 0)
            first = loss;
        ck_assert_msg(fabs(loss - first) <= 1e-6, "%s: val_loss %.9f, at micro batch 1: %.9f",
                      runs[i].name, loss, first);
    }
    /* run.eval_batches still caps: 2 batches of 5 */
    ck_assert_int_eq(eval(dir, "cap", 2,
                          testutil_fmt("--set data.val=%s/val.txt --set run.eval_batches=2 "
                                       "--set train_micro_batch_size_per_gpu=5",
                                       dir)),
                     0);
    double loss;
    unsigned long long tokens;
    read_eval(dir, "cap", &loss, &tokens);
    ck_assert_uint_eq(tokens, 10ull * T);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("eval_cmd");
    TCase *tc = testutil_tcase(s, "weights", 300);
    tcase_add_test(tc, eval_takes_what_the_config_names);
    tcase_add_test(tc, a_checkpoint_folder_is_taken_everywhere);
    tcase_add_test(tc, a_folder_that_is_neither_is_named);
    tcase_add_test(tc, a_resume_says_what_it_overrides);
    tcase_add_test(tc, eval_covers_the_whole_set);
    return testutil_run_suite(s, 0);
}
