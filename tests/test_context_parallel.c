/* tests/test_context_parallel.c — context parallelism (context_parallel.size)
 * through the binary under mpirun: the losses of C = 2 and 4, alone, with
 * data parallelism under ZeRO stages 0-3, with tensor parallelism and with
 * a pipeline, equal one rank's within 1e-5 (fp32, the global batch kept)
 * on GPT-2 and on a grouped-query Llama; each rank's activations are half
 * one rank's at C = 2; what does not compose yet is refused with exit 2
 * naming the keys. Ring attention itself is checked against the unsplit
 * attention in test_attention_ring. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define STEPS 5

#define LLAMA                                                                                      \
    "--set model.family=llama --set model.n_head=4 --set model.n_kv_head=2 "                       \
    "--set model.intermediate_size=64"

/* np ranks with context size cp, tensor size tp and pp pipeline stages
 * under `stage`; the global batch is 2 x 2 sequences at every layout
 * (D = np / (cp tp pp) data-parallel replicas). */
static const char *layout(const char *family, int np, int cp, int tp, int pp, int stage)
{
    return testutil_fmt("%s --set run.steps=%d --set context_parallel.size=%d "
                        "--set tensor_parallel.size=%d --set pipeline.stages=%d "
                        "--set zero_optimization.stage=%d --set gradient_accumulation_steps=%d",
                        family, STEPS, cp, tp, pp, stage, 2 * cp * tp * pp / np);
}

/* The activations peak of rank `rank` in dir/name/memory_report.json. */
static double rank_activations(const char *dir, const char *name, int rank)
{
    const char *text = testutil_slurp(testutil_fmt("%s/%s/memory_report.json", dir, name));
    const char *p = strstr(text, "\"ranks\"");
    ck_assert_ptr_nonnull(p);
    for (int r = 0; r <= rank; r++) {
        p = strstr(p + 1, "\"activations\": ");
        ck_assert_ptr_nonnull(p);
    }
    return strtod(p + strlen("\"activations\": "), NULL);
}

/* The layouts of one family against its one-rank run. */
static void check_family(const char *tag, const char *family, int with_memory)
{
    const char *dir = testutil_tmpdir(tag);
    double base[STEPS], got[STEPS];
    testutil_train_micro_losses(dir, "base", 1, layout(family, 1, 1, 1, 1, 0), base, STEPS);
    ck_assert_msg(base[STEPS - 1] < base[0], "loss did not fall: %g -> %g", base[0],
                  base[STEPS - 1]);
    static const struct {
        int np, cp, tp, pp, stage;
    } runs[] = {{2, 2, 1, 1, 0}, {4, 2, 1, 1, 1}, {4, 2, 1, 1, 3},
                {4, 4, 1, 1, 2}, {4, 2, 2, 1, 3}, {4, 2, 1, 2, 1}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        const char *name = testutil_fmt("np%d-cp%d-tp%d-pp%d-stage%d", runs[i].np, runs[i].cp,
                                        runs[i].tp, runs[i].pp, runs[i].stage);
        testutil_train_micro_losses(
            dir, name, runs[i].np,
            layout(family, runs[i].np, runs[i].cp, runs[i].tp, runs[i].pp, runs[i].stage), got,
            STEPS);
        testutil_assert_losses_close(base, got, STEPS, 1e-5, name);
    }
    if (!with_memory)
        return;
    /* Every activation buffer holds the rank's T / C rows. */
    const double one = rank_activations(dir, "base", 0);
    for (int r = 0; r < 2; r++) {
        const double half = rank_activations(dir, "np2-cp2-tp1-pp1-stage0", r);
        printf("activations per rank: C=1 %.0f bytes, C=2 rank %d %.0f bytes (%.3f)\n", one, r,
               half, half / one);
        ck_assert_msg(fabs(half / one - 0.5) < 0.02, "rank %d: %.0f bytes against %.0f", r, half,
                      one);
    }
}

START_TEST(gpt2_layouts_give_the_same_losses)
{
    check_family("cp-gpt2", "", 1);
}
END_TEST

START_TEST(llama_layouts_give_the_same_losses)
{
    check_family("cp-llama", LLAMA, 0);
}
END_TEST

/* A configuration context parallelism cannot run: exit 2 and a message
 * naming `key`. */
static void assert_refused(const char *dir, const char *name, int np, const char *args,
                           const char *key)
{
    ck_assert_int_eq(testutil_train_micro(dir, name, np, args), 2);
    const char *log = testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", name)));
    ck_assert_msg(strstr(log, key) && strstr(log, "context_parallel.size"), "%s: %s", name, log);
}

START_TEST(what_does_not_compose_is_refused)
{
    const char *dir = testutil_tmpdir("cp-refused");
    assert_refused(dir, "seq", 2, "--set context_parallel.size=2 --set data.seq_len=30",
                   "data.seq_len");
    assert_refused(dir, "world", 3, "--set context_parallel.size=2", "world size 3");
    assert_refused(dir, "sp", 8,
                   "--set context_parallel.size=2 --set tensor_parallel.size=4 "
                   "--set model.n_head=4 --set tensor_parallel.sequence_parallel=true "
                   "--set data.seq_len=12",
                   "sequence parallelism");
    assert_refused(dir, "bf16", 2, "--set context_parallel.size=2 --set bf16.enabled=true",
                   "bf16.enabled");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("context_parallel");
    TCase *tc = testutil_tcase(s, "layouts", 900);
    tcase_add_test(tc, gpt2_layouts_give_the_same_losses);
    tcase_add_test(tc, llama_layouts_give_the_same_losses);
    tcase_add_test(tc, what_does_not_compose_is_refused);
    return testutil_run_suite(s, 0);
}
