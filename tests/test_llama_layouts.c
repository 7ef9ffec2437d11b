/* tests/test_llama_layouts.c — the Llama family through the binary under
 * mpirun: ZeRO stages 0-3 at 1, 2 and 4 ranks give the same losses (fp32,
 * global batch kept), activation checkpointing changes no bit, bf16 and
 * fp16 train, a tied head trains, the memory report's model states match
 * the plan, and the dry run counts what a real run allocates. The
 * optimizers' layouts and resharding on this family are in
 * test_optim_layouts; Hugging Face weights in and out in test_hf_llama. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#define STEPS 8

/* micro.yaml as a Llama: 4 query heads on 2 key/value heads (head size 8),
 * SwiGLU width 64. */
#define LLAMA                                                                                      \
    "--set model.family=llama --set model.n_head=4 --set model.n_kv_head=2 "                       \
    "--set model.intermediate_size=64 --set run.steps=8"

/* The run at `np` ranks under `stage`, the global batch 4 x 2 sequences. */
static const char *layout(int np, int stage, const char *extra)
{
    return testutil_fmt("%s --set zero_optimization.stage=%d --set gradient_accumulation_steps=%d "
                        "%s",
                        LLAMA, stage, 4 / np, extra);
}

static void train(const char *dir, const char *name, int np, const char *args, double *loss)
{
    testutil_train_micro_losses(dir, name, np, args, loss, STEPS);
}

static void assert_close(const double *want, const double *got, double tol, const char *what)
{
    testutil_assert_losses_close(want, got, STEPS, tol, what);
}

START_TEST(stages_and_world_sizes_give_the_same_losses)
{
    const char *dir = testutil_tmpdir("llama-layouts");
    double base[STEPS], got[STEPS];
    train(dir, "base", 1, layout(1, 0, ""), base);
    ck_assert_msg(base[STEPS - 1] < base[0] - 0.05, "loss did not fall: %g -> %g", base[0],
                  base[STEPS - 1]);
    static const int worlds[] = {1, 2, 4};
    for (int w = 0; w < 3; w++)
        for (int stage = 0; stage <= 3; stage++) {
            if (worlds[w] == 1 && stage == 0)
                continue;
            const char *name = testutil_fmt("np%d-stage%d", worlds[w], stage);
            train(dir, name, worlds[w], layout(worlds[w], stage, ""), got);
            assert_close(base, got, 1e-5, testutil_fmt("%d ranks, stage %d", worlds[w], stage));
        }
}
END_TEST

/* Checkpointed blocks recompute bit-identical internals; every block and
 * every second block, under stage 3 where the recompute re-gathers. */
START_TEST(activation_checkpointing_changes_no_bit)
{
    const char *dir = testutil_tmpdir("llama-ckpt");
    double plain[STEPS], got[STEPS];
    train(dir, "plain", 2, layout(2, 3, ""), plain);
    for (int every = 1; every <= 2; every++) {
        train(dir, testutil_fmt("every%d", every), 2,
              layout(2, 3,
                     testutil_fmt("--set activation_checkpointing.enabled=true "
                                  "--set activation_checkpointing.every_n_blocks=%d",
                                  every)),
              got);
        ck_assert_msg(memcmp(plain, got, sizeof got) == 0, "every_n_blocks %d: losses differ",
                      every);
    }
}
END_TEST

/* 16-bit working precision follows fp32 closely over a few steps; a tied
 * head trains. */
START_TEST(half_precision_and_tied_head_train)
{
    const char *dir = testutil_tmpdir("llama-precision");
    double fp32[STEPS], got[STEPS];
    train(dir, "fp32", 2, layout(2, 2, ""), fp32);
    train(dir, "bf16", 2, layout(2, 2, "--set bf16.enabled=true"), got);
    assert_close(fp32, got, 2e-2, "bf16");
    train(dir, "fp16", 2, layout(2, 2, "--set fp16.enabled=true --set fp16.loss_scale=1024"), got);
    assert_close(fp32, got, 5e-3, "fp16");
    train(dir, "tied", 2, layout(2, 3, "--set model.tie_word_embeddings=true"), got);
    ck_assert_msg(got[STEPS - 1] < got[0] - 0.05, "tied: loss did not fall: %g -> %g", got[0],
                  got[STEPS - 1]);
}
END_TEST

/* The dry run's plan and the measured run report the same peaks. */
START_TEST(dry_run_plans_what_the_run_allocates)
{
    const char *dir = testutil_tmpdir("llama-plan");
    const char *args = layout(2, 3, "--set activation_checkpointing.enabled=true");
    ck_assert_int_eq(
        testutil_train_micro(dir, "real", 2,
                             testutil_fmt("%s --memory-report %s/real.json", args, dir)),
        0);
    ck_assert_int_eq(
        testutil_train_micro(dir, "plan", 2,
                             testutil_fmt("%s --dry-run --memory-report %s/plan.json", args, dir)),
        0);
    /* rank 0's peaks per category and in total: everything from its
     * "peak" object up to its RSS, which only a real run has */
    char real[4096], plan[4096];
    static const char *const files[] = {"real.json", "plan.json"};
    char *out[] = {real, plan};
    for (int k = 0; k < 2; k++) {
        const char *text = testutil_slurp(testutil_path_in(dir, files[k]));
        const char *a = strstr(text, "\"peak\": {"), *b = a ? strstr(a, ", \"rss_peak\"") : NULL;
        ck_assert_msg(a && b && b - a < 4096, "%s: no rank peaks in\n%s", files[k], text);
        snprintf(out[k], 4096, "%.*s", (int)(b - a), a);
    }
    ck_assert_msg(strcmp(real, plan) == 0, "measured %s\nplanned  %s", real, plan);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("llama_layouts");
    TCase *tc = testutil_tcase(s, "layouts", 900);
    tcase_add_test(tc, stages_and_world_sizes_give_the_same_losses);
    tcase_add_test(tc, activation_checkpointing_changes_no_bit);
    tcase_add_test(tc, half_precision_and_tied_head_train);
    tcase_add_test(tc, dry_run_plans_what_the_run_allocates);
    return testutil_run_suite(s, 0);
}
