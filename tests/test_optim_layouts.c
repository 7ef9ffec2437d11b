/* tests/test_optim_layouts.c — every optimizer of the table, through the
 * binary under mpirun: the losses do not depend on the world size (1 and
 * 4 ranks with the global batch kept), and a checkpoint written at 4 ranks
 * under stage 3 resumes at 2 ranks under stage 1 where the 4-rank run went
 * on (so 2 ranks are compared over the last 5 steps). test_dist compares the stages at one world
 * size; this suite compares the world sizes, so together they cover the grid. Every optimizer runs
 * on micro.yaml's GPT-2; on a Llama of the same size with grouped-query attention run AdamW and
 * those whose state or update depends on the tensors' shapes (factored, blockwise, fused into the
 * backward pass). The whole-tensor ones and LOMO also run at T=2 and
 * resume across the tensor-parallel size, and LOMO runs through a
 * pipeline of two stages. The elementwise others would repeat AdamW's there: their
 * update at an element reads that element's state only, so other shapes
 * cut by other shard boundaries change nothing their GPT-2 case does not
 * already cover. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#define STEPS 10
#define SAVED 5

/* One optimizer and its settings. micro.yaml's betas and eps are AdamW's:
 * nulled, each optimizer takes its own defaults. */
struct optimizer_case {
    const char *name;
    const char *sets;
    int lomo;     /* accumulation must be 1: the global batch is kept by the micro batch */
    int on_llama; /* AdamW, and the state or update that depends on the shapes */
};

static const struct optimizer_case cases[] = {
    {"AdamW", "--set optimizer.type=AdamW", 0, 1},
    {"Adam", "--set optimizer.type=Adam", 0, 0},
    {"SGD", "--set optimizer.type=SGD --set optimizer.params.momentum=0", 0, 0},
    {"SGD momentum", "--set optimizer.type=SGD --set optimizer.params.momentum=0.9", 0, 0},
    {"Lion", "--set optimizer.type=Lion --set optimizer.params.lr=1e-3", 0, 0},
    {"Adafactor", "--set optimizer.type=Adafactor --set optimizer.params.scale_parameter=false", 0,
     1},
    /* the default relative step size: lr times the parameters' RMS */
    {"Adafactor beta1",
     "--set optimizer.type=Adafactor --set optimizer.params.beta1=0.9 --set "
     "optimizer.params.lr=0.3",
     0, 1},
    /* blocks of 256 cut by shard boundaries, and the small tensors in fp32 */
    {"AdamW8bit", "--set optimizer.type=AdamW8bit --set optimizer.params.min_8bit_size=256", 0, 1},
    {"LOMO", "--set optimizer.type=LOMO --set optimizer.params.lr=0.1", 1, 1},
};

#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static int n_on_llama(void)
{
    int n = 0;
    for (int k = 0; k < N_CASES; k++)
        n += cases[k].on_llama;
    return n;
}

/* Loop index i: the GPT-2 cases, then the Llama ones; sets the family. */
static const struct optimizer_case *case_of(int i, int *family)
{
    *family = i >= N_CASES;
    if (i < N_CASES)
        return &cases[i];
    for (int k = 0, left = i - N_CASES; k < N_CASES; k++)
        if (cases[k].on_llama && left-- == 0)
            return &cases[k];
    ck_abort_msg("loop index %d past the cases", i);
    return NULL;
}

/* "AdamW8bit on llama", for messages, into name[96]. */
static void case_name(const struct optimizer_case *c, int f, char *name)
{
    snprintf(name, 96, "%s on %s", c->name, f ? "llama" : "gpt2");
}

/* The model families, as overrides of micro.yaml. */
static const char *const families[] = {
    "",
    "--set model.family=llama --set model.n_head=4 --set model.n_kv_head=2 "
    "--set model.intermediate_size=64",
};

/* The arguments that run `c` on family `f` at `np` ranks under `stage`
 * with the global batch of 4 ranks times micro.yaml's micro batch of 2. */
static const char *layout(const struct optimizer_case *c, int f, int np, int stage)
{
    const int accum = c->lomo ? 1 : 4 / np, micro_batch = c->lomo ? 8 / np : 2;
    return testutil_fmt("%s %s --set optimizer.params.betas=null --set optimizer.params.eps=null "
                        "--set zero_optimization.stage=%d --set gradient_accumulation_steps=%d "
                        "--set train_micro_batch_size_per_gpu=%d --set run.steps=%d",
                        families[f], c->sets, stage, accum, micro_batch, STEPS);
}

static void assert_close(const double *want, const double *got, int n, int first_step,
                         const char *what)
{
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= 1e-5 * fabs(want[i]),
                      "%s, step %d: loss %.9g, the reference run's %.9g", what, first_step + i,
                      got[i], want[i]);
}

/* 4 ranks under stage 3 (checkpoint at step 5), then 1 rank under stage 0
 * from scratch, then 2 ranks under stage 1 resumed from the 4-rank
 * checkpoint: the 2-rank layout's steps are compared from step 6, where
 * its shards come from other boundaries than those it writes. */
START_TEST(optimizer_is_world_size_invariant_and_reshards)
{
    int f;
    const struct optimizer_case *c = case_of(_i, &f);
    const char *dir = testutil_tmpdir("optim-layouts");
    char name[96];
    case_name(c, f, name);
    double full[STEPS], got[STEPS];
    ck_assert_msg(testutil_train_micro(dir, "four", 4,
                                       testutil_fmt("%s --set checkpoint.every=%d "
                                                    "--set checkpoint.keep=5 "
                                                    "--set checkpoint.dir=%s/ck",
                                                    layout(c, f, 4, 3), SAVED, dir)) == 0,
                  "%s at 4 ranks failed:\n%s", name,
                  testutil_slurp(testutil_path_in(dir, "four.log")));
    ck_assert_int_eq(testutil_micro_losses(dir, "four", full, STEPS), STEPS);
    ck_assert_msg(full[STEPS - 1] < full[0] - 0.01, "%s: loss did not fall: %g -> %g", name,
                  full[0], full[STEPS - 1]);

    ck_assert_int_eq(testutil_train_micro(dir, "one", 1, layout(c, f, 1, 0)), 0);
    ck_assert_int_eq(testutil_micro_losses(dir, "one", got, STEPS), STEPS);
    assert_close(full, got, STEPS, 1, testutil_fmt("%s at 1 rank, stage 0", name));

    ck_assert_int_eq(testutil_train_micro(dir, "resumed", 2,
                                          testutil_fmt("%s --set run.resume=%s/ck/step-%08d",
                                                       layout(c, f, 2, 1), dir, SAVED)),
                     0);
    ck_assert_int_eq(testutil_micro_losses(dir, "resumed", got, STEPS), STEPS - SAVED);
    assert_close(full + SAVED, got, STEPS - SAVED, SAVED + 1,
                 testutil_fmt("%s resumed at 2 ranks, stage 1", name));
}
END_TEST

/* The cases whose update reads more than its own slice under tensor
 * parallelism (Adafactor's factors, AdamW8bit's blocks; LOMO's clipping
 * norm, measured in a first backward over the group's slices), each on
 * both families: loop index i. */
static const struct optimizer_case *tensor_parallel_case(int i, int *family)
{
    static const char *const names[] = {"Adafactor", "Adafactor beta1", "AdamW8bit", "LOMO"};
    *family = i % 2;
    for (int k = 0; k < N_CASES; k++)
        if (strcmp(cases[k].name, names[i / 2]) == 0)
            return &cases[k];
    ck_abort_msg("no case %s", names[i / 2]);
    return NULL;
}

/* `c` on family f as T tensor-parallel slices of micro.yaml's model, the
 * global batch kept (T ranks, accumulating 4 micro batches). */
static const char *tp_layout(const struct optimizer_case *c, int f, int T)
{
    return testutil_fmt("%s --set tensor_parallel.size=%d", layout(c, f, 1, 0), T);
}

/* A whole-tensor optimizer's statistics are the whole tensors' under
 * tensor parallelism (a slice's rows, columns and 256-element blocks
 * reduced over the group), and LOMO's norm the whole model's (a tensor
 * every rank holds whole counted once): T=2 trains one rank's losses, a
 * T=2 checkpoint resumes at T=1 and a T=1 one at T=2, each where the run
 * it left went on. */
START_TEST(optimizer_is_exact_under_tensor_parallelism)
{
    int f;
    const struct optimizer_case *c = tensor_parallel_case(_i, &f);
    const char *dir = testutil_tmpdir("optim-tp");
    char name[96];
    case_name(c, f, name);
    static const struct {
        const char *run, *resumed;
        int T, resumed_T;
    } legs[] = {{"one", "one-to-t2", 1, 2}, {"t2", "t2-to-one", 2, 1}};
    double losses[2][STEPS], got[STEPS];
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(testutil_train_micro(dir, legs[k].run, legs[k].T,
                                           testutil_fmt("%s --set checkpoint.every=%d "
                                                        "--set checkpoint.keep=5 "
                                                        "--set checkpoint.dir=%s/%s-ck",
                                                        tp_layout(c, f, legs[k].T), SAVED, dir,
                                                        legs[k].run)) == 0,
                      "%s at T=%d failed:\n%s", name, legs[k].T,
                      testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", legs[k].run))));
        ck_assert_int_eq(testutil_micro_losses(dir, legs[k].run, losses[k], STEPS), STEPS);
    }
    ck_assert_msg(losses[0][STEPS - 1] < losses[0][0] - 0.01, "%s: loss did not fall: %g -> %g",
                  name, losses[0][0], losses[0][STEPS - 1]);
    assert_close(losses[0], losses[1], STEPS, 1, testutil_fmt("%s at T=2", name));
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(testutil_train_micro(dir, legs[k].resumed, legs[k].resumed_T,
                                              testutil_fmt("%s --set run.resume=%s/%s-ck/step-%08d",
                                                           tp_layout(c, f, legs[k].resumed_T), dir,
                                                           legs[k].run, SAVED)),
                         0);
        ck_assert_int_eq(testutil_micro_losses(dir, legs[k].resumed, got, STEPS), STEPS - SAVED);
        assert_close(
            losses[k] + SAVED, got, STEPS - SAVED, SAVED + 1,
            testutil_fmt("%s resumed from T=%d at T=%d", name, legs[k].T, legs[k].resumed_T));
    }
}
END_TEST

/* LOMO through a pipeline: the norm for clipping (micro.yaml's 1.0) is
 * summed over the stages, and the tied embedding's two copies, each
 * updated inside its stage's backward by the other optimizers' rule, add
 * each other's gradient at the step's end. Each layout trains one rank's
 * losses: loop index i. */
START_TEST(lomo_is_exact_under_a_pipeline)
{
    static const struct {
        int family, np, T, stage;
        const char *extra;
    } legs[] = {
        {0, 2, 1, 0, ""},
        {0, 4, 1, 3, ""},
        {1, 4, 2, 1, "--set model.tie_word_embeddings=true"},
        {1, 4, 1, 2, ""},
    };
    const int f = legs[_i].family;
    const struct optimizer_case *c = &cases[N_CASES - 1];
    const char *dir = testutil_tmpdir("optim-pp");
    char name[96];
    case_name(c, f, name);
    ck_assert_str_eq(c->name, "LOMO");
    const char *one = testutil_fmt("%s %s", layout(c, f, 1, 0), legs[_i].extra);
    double want[STEPS], got[STEPS];
    ck_assert_int_eq(testutil_train_micro(dir, "one", 1, one), 0);
    ck_assert_int_eq(testutil_micro_losses(dir, "one", want, STEPS), STEPS);
    const int D = legs[_i].np / (2 * legs[_i].T);
    const char *pp = testutil_fmt("%s --set pipeline.stages=2 --set tensor_parallel.size=%d "
                                  "--set zero_optimization.stage=%d "
                                  "--set train_micro_batch_size_per_gpu=%d",
                                  one, legs[_i].T, legs[_i].stage, 8 / D);
    ck_assert_msg(testutil_train_micro(dir, "pp", legs[_i].np, pp) == 0, "%s failed:\n%s", name,
                  testutil_slurp(testutil_path_in(dir, "pp.log")));
    ck_assert_int_eq(testutil_micro_losses(dir, "pp", got, STEPS), STEPS);
    assert_close(want, got, STEPS, 1,
                 testutil_fmt("%s at P=2, T=%d, D=%d, ZeRO %d %s", name, legs[_i].T, D,
                              legs[_i].stage, legs[_i].extra));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("optim_layouts");
    TCase *tc = testutil_tcase(s, "layouts", 600);
    tcase_add_loop_test(tc, optimizer_is_world_size_invariant_and_reshards, 0,
                        N_CASES + n_on_llama());
    tcase_add_loop_test(tc, optimizer_is_exact_under_tensor_parallelism, 0, 8);
    tcase_add_loop_test(tc, lomo_is_exact_under_a_pipeline, 0, 4);
    return testutil_run_suite(s, 0);
}
