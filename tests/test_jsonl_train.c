/* tests/test_jsonl_train.c — instruction data through the zerotrain binary
 * (tests/data/micro.yaml with data.format jsonl): a run trains; every
 * ZeRO stage at 1, 2 and 4 ranks gives the same losses for the same global
 * batch; masked targets neither count in the loss nor move the weights;
 * GPT-2's tokenizer with a model of its vocabulary, and a model too small
 * for it refused; a bad line fails every rank naming file:line.
 *
 * The mask check is built so that it is sound under causal attention
 * (prompts are inputs to their completions, so changing a prompt may
 * rightly change the loss): examples whose prompt is longer than seq_len
 * lose their completion to the cut and are windows with every target
 * masked. Two data sets that differ only in the prompts of such windows
 * must give the same losses at every step (nothing of those windows counts
 * in the loss or the gradient, and the normalisation counts only the other
 * windows' targets); the same windows as "text" examples (every target
 * counted) must not.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define STEPS 4

/* A fresh folder, copied out of testutil's ring of buffers, which the
 * many paths a test makes would overwrite. */
static void own_tmpdir(char *dir, const char *tag)
{
    snprintf(dir, 4096, "%s", testutil_tmpdir(tag));
}

static const char *instruct(void)
{
    return testutil_source_path("tests/data/instruct_micro.jsonl");
}

static const char *jsonl_args(const char *train, const char *more)
{
    return testutil_fmt(
        "--set data.format=jsonl --set data.train=%s --set data.val_fraction=0.1 %s", train, more);
}

START_TEST(a_jsonl_run_trains)
{
    char dir[4096];
    own_tmpdir(dir, "jsonl-trains");
    enum { N = 40 };
    double loss[N];
    testutil_train_micro_losses(dir, "run", 1,
                                jsonl_args(instruct(), "--set run.steps=40 --set "
                                                       "gradient_accumulation_steps=2"),
                                loss, N);
    const double first = (loss[0] + loss[1] + loss[2]) / 3, last = (loss[N - 1] + loss[N - 2]) / 2;
    ck_assert_msg(last < 0.75 * first, "loss did not fall: %.4f -> %.4f", first, last);
    const char *log = testutil_slurp(testutil_path_in(dir, "run.log"));
    ck_assert_msg(strstr(log, "were cut to it") != NULL, "no truncation warning:\n%s", log);
}
END_TEST

/* The same global batch (2 x accum x ranks = 8 windows) under every stage
 * and world size; _i: packing off, on. */
START_TEST(every_stage_and_world_size_gives_the_same_losses)
{
    char dir[4096];
    own_tmpdir(dir, "jsonl-layouts");
    const char *packing = _i ? "--set data.packing=true" : "--set data.packing=false";
    double want[STEPS], got[STEPS];
    static const int ranks[] = {1, 2, 4};
    for (int stage = 0; stage <= 3; stage++)
        for (int k = 0; k < 3; k++) {
            const int np = ranks[k];
            const char *name = testutil_fmt("s%d-np%d", stage, np);
            const char *more =
                testutil_fmt("--set run.steps=%d --set zero_optimization.stage=%d --set "
                             "gradient_accumulation_steps=%d %s",
                             STEPS, stage, 4 / np, packing);
            testutil_train_micro_losses(dir, name, np, jsonl_args(instruct(), more),
                                        stage == 0 && np == 1 ? want : got, STEPS);
            if (stage > 0 || np > 1)
                testutil_assert_losses_close(want, got, STEPS, 1e-5, name);
        }
}
END_TEST

/* Writes the examples of instruct_micro.jsonl with every fourth line
 * replaced by a whole-window example made of `fill` characters:
 * "prompt" (its completion cut off: every target masked) or "text". */
static const char *with_window_examples(const char *dir, const char *name, const char *form,
                                        char fill)
{
    size_t n;
    unsigned char *src = testutil_read_file(instruct(), &n);
    src[n] = '\0';
    char filler[48];
    memset(filler, fill, 40);
    filler[40] = '\0';
    const char *path = testutil_path_in(dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    int i = 0;
    for (char *line = strtok((char *)src, "\n"); line; line = strtok(NULL, "\n"), i++) {
        if (i % 4 != 3)
            fprintf(f, "%s\n", line);
        else if (strcmp(form, "prompt") == 0)
            fprintf(f, "{\"prompt\": \"%s\", \"completion\": \" cut\"}\n", filler);
        else
            fprintf(f, "{\"text\": \"%s\"}\n", filler);
    }
    ck_assert_int_eq(fclose(f), 0);
    free(src);
    return path;
}

START_TEST(masked_targets_do_not_count)
{
    char dir[4096];
    own_tmpdir(dir, "jsonl-mask");
    const char *more = "--set run.steps=4 --set gradient_accumulation_steps=2";
    double a[STEPS], b[STEPS], c[STEPS], d[STEPS];
    testutil_train_micro_losses(
        dir, "a", 1, jsonl_args(with_window_examples(dir, "a.jsonl", "prompt", 'a'), more), a,
        STEPS);
    testutil_train_micro_losses(
        dir, "b", 1, jsonl_args(with_window_examples(dir, "b.jsonl", "prompt", 'q'), more), b,
        STEPS);
    testutil_assert_losses_close(a, b, STEPS, 1e-6, "different masked prompts");
    testutil_train_micro_losses(
        dir, "c", 1, jsonl_args(with_window_examples(dir, "c.jsonl", "text", 'a'), more), c, STEPS);
    testutil_train_micro_losses(
        dir, "d", 1, jsonl_args(with_window_examples(dir, "d.jsonl", "text", 'q'), more), d, STEPS);
    int differ = 0;
    for (int k = 0; k < STEPS; k++)
        differ |= c[k] != d[k] || c[k] != a[k];
    ck_assert_msg(differ, "counted windows changed nothing: the check is vacuous");
}
END_TEST

static const char *gpt2_args(const char *vocab_size)
{
    return jsonl_args(instruct(),
                      testutil_fmt("--set data.tokenizer=gpt2 --set data.tokenizer_dir=%s --set "
                                   "model.vocab_size=%s --set model.n_embd=16 --set "
                                   "model.n_layer=1 --set run.steps=2",
                                   testutil_gpt2_vocab_dir(), vocab_size));
}

START_TEST(gpt2_tokenizer_trains_on_jsonl)
{
    char dir[4096];
    own_tmpdir(dir, "jsonl-gpt2");
    double loss[2];
    testutil_train_micro_losses(dir, "run", 2, gpt2_args("50257"), loss, 2);
    ck_assert(loss[0] > 8.0 && loss[0] < 13.0); /* about ln 50257 = 10.8 at the start */
}
END_TEST

START_TEST(a_vocab_smaller_than_the_tokenizer_is_refused)
{
    char dir[4096];
    own_tmpdir(dir, "jsonl-gpt2-small");
    ck_assert_int_eq(testutil_train_micro(dir, "run", 2, gpt2_args("256")), 2);
    const char *log = testutil_slurp(testutil_path_in(dir, "run.log"));
    ck_assert_msg(strstr(log, "model.vocab_size: 256 is smaller than the vocabulary of "
                              "data.tokenizer gpt2 (50257 ids)") != NULL,
                  "%s", log);
    ck_assert_int_eq(testutil_count(log, "zerotrain: error:"), 1);
}
END_TEST

START_TEST(a_bad_line_fails_every_rank_naming_it)
{
    char dir[4096];
    own_tmpdir(dir, "jsonl-bad");
    const char *path = testutil_path_in(dir, "bad.jsonl");
    const char *text = "{\"prompt\": \"a\", \"completion\": \"b\"}\n"
                       "{\"prompt\": \"a\", \"completion\": \"b\"}\n"
                       "{\"prompt\": \"a\", \"text\": \"b\"}\n";
    testutil_write_file(path, text, strlen(text));
    ck_assert_int_eq(testutil_train_micro(dir, "run", 2, jsonl_args(path, "")), 1);
    const char *log = testutil_slurp(testutil_path_in(dir, "run.log"));
    ck_assert_msg(strstr(log, testutil_fmt("%s:3: has both \"text\" and \"prompt\"", path)) != NULL,
                  "%s", log);
    ck_assert_int_eq(testutil_count(log, "zerotrain: error:"), 1);
}
END_TEST

/* Prompts that all fill seq_len leave nothing to train: refused at the
 * start naming the file's first cut line, not "trained" on skipped steps;
 * a set with some such examples trains and names the cut lines. */
START_TEST(prompts_longer_than_seq_len_are_named)
{
    char dir[4096];
    own_tmpdir(dir, "jsonl-long");
    const char *path = testutil_path_in(dir, "long.jsonl");
    char text[1024] = "";
    for (int i = 0; i < 4; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text),
                 "{\"prompt\": \"%d: a prompt much longer than the window of 32 tokens\", "
                 "\"completion\": \" yes\"}\n",
                 i);
    testutil_write_file(path, text, strlen(text));
    ck_assert_int_eq(testutil_train_micro(dir, "run", 2, jsonl_args(path, "")), 1);
    const char *log = testutil_slurp(testutil_path_in(dir, "run.log"));
    ck_assert_msg(strstr(log, testutil_fmt("data.train: no example keeps a trainable token at "
                                           "data.seq_len 32: 4 of 4 examples were cut, 4 of them "
                                           "inside the prompt (first: %s:1)",
                                           path)) != NULL,
                  "%s", log);
    ck_assert_int_eq(testutil_count(log, "zerotrain: error:"), 1);
    ck_assert_msg(strstr(log, "GFLOP/s") == NULL, "trained:\n%s", log);

    const char *mixed = testutil_path_in(dir, "mixed.jsonl");
    char both[2048];
    snprintf(both, sizeof both, "%s{\"prompt\": \"Q:\", \"completion\": \" fine\"}\n", text);
    testutil_write_file(mixed, both, strlen(both));
    ck_assert_int_eq(testutil_train_micro(dir, "mixed", 1,
                                          jsonl_args(mixed, "--set data.val_fraction=0 "
                                                            "--set run.steps=1")),
                     0);
    log = testutil_slurp(testutil_path_in(dir, "mixed.log"));
    ck_assert_msg(strstr(log, testutil_fmt("4 of 5 examples are longer than data.seq_len (32 "
                                           "tokens) and were cut to it (data.packing is false); 4 "
                                           "lost every completion token: %s:1 %s:2 %s:3 ...\n",
                                           mixed, mixed, mixed)) != NULL,
                  "%s", log);
}
END_TEST

static Suite *jsonl_train_suite(void)
{
    Suite *s = suite_create("jsonl_train");
    TCase *tc = testutil_tcase(s, "train", 600);
    tcase_add_test(tc, a_jsonl_run_trains);
    tcase_add_loop_test(tc, every_stage_and_world_size_gives_the_same_losses, 0, 2);
    tcase_add_test(tc, masked_targets_do_not_count);
    tcase_add_test(tc, gpt2_tokenizer_trains_on_jsonl);
    tcase_add_test(tc, a_vocab_smaller_than_the_tokenizer_is_refused);
    tcase_add_test(tc, a_bad_line_fails_every_rank_naming_it);
    tcase_add_test(tc, prompts_longer_than_seq_len_are_named);
    return s;
}

int main(void)
{
    return testutil_run_suite(jsonl_train_suite(), 0);
}
