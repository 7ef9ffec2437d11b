/* tests/test_gpu_train.c — whole training runs on a GPU against the same
 * runs on the CPU: the model's losses (its forward and, through 20 steps
 * of updates, its gradients and the engine's arithmetic) on the CUDA
 * backend must follow the CPU backend's within 1e-4 at fp32.
 *
 * Cases, each a pair of runs of tests/data/micro.yaml with the same seed:
 * - one rank, GPT-2 and the Llama family (grouped-query heads, RMSNorm,
 *   RoPE, SwiGLU), fp32;
 * - two ranks sharing one GPU at every ZeRO stage: NCCL refuses two ranks
 *   on one device, so the communicator is MPI with host staging;
 * - bf16 with fp32 master weights, one rank, GPT-2 and the Llama family,
 *   within the 16-bit budget of tests/test_dist.c: the GPU computes in
 *   bf16 (its 16-bit ops), the CPU in bf16 where oneDNN has a bf16 kernel
 *   for it and in fp32 elsewhere.
 * Without a usable GPU every case skips (exit 77) and says why.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"
#include "worker/backend.h"

enum { STEPS = 20 };

#define LLAMA                                                                                      \
    "--set model.family=llama --set model.n_head=4 --set model.n_kv_head=2 "                       \
    "--set model.intermediate_size=64"

/* The losses of `STEPS` steps of micro.yaml on `device` at `np` ranks. */
static void losses_on(const char *device, const char *name, int np, const char *extra, double *loss)
{
    const char *dir = testutil_tmpdir("gpu_train");
    testutil_train_micro_losses(
        dir, name, np,
        testutil_fmt("--set device=%s --set run.steps=%d --set gradient_accumulation_steps=%d %s",
                     device, STEPS, 2 / np, extra),
        loss, STEPS);
}

static void assert_gpu_follows_cpu(const char *what, int np, const char *extra, double tol)
{
    double cpu[STEPS], gpu[STEPS];
    losses_on("cpu", testutil_fmt("%s-cpu", what), np, extra, cpu);
    losses_on("cuda", testutil_fmt("%s-cuda", what), np, extra, gpu);
    testutil_assert_losses_close(cpu, gpu, STEPS, tol, what);
}

START_TEST(gpt2_one_rank_fp32)
{
    assert_gpu_follows_cpu("gpt2-fp32", 1, "", 1e-4);
}
END_TEST

START_TEST(llama_one_rank_fp32)
{
    assert_gpu_follows_cpu("llama-fp32", 1, LLAMA, 1e-4);
}
END_TEST

START_TEST(two_ranks_on_one_gpu_every_stage)
{
    for (int stage = 0; stage <= 3; stage++)
        assert_gpu_follows_cpu(testutil_fmt("stage%d-np2", stage), 2,
                               testutil_fmt("--set zero_optimization.stage=%d", stage), 1e-4);
}
END_TEST

START_TEST(gpt2_one_rank_bf16)
{
    assert_gpu_follows_cpu("gpt2-bf16", 1, "--set bf16.enabled=true", 0.05);
}
END_TEST

START_TEST(llama_one_rank_bf16)
{
    assert_gpu_follows_cpu("llama-bf16", 1, "--set bf16.enabled=true " LLAMA, 0.05);
}
END_TEST

int main(void)
{
    char why[256] = "";
    if (compute_backend_query("cuda", why, sizeof why) < 0) {
        printf("SKIP: training on a GPU needs a usable CUDA device: %s\n", why);
        return 77;
    }
    Suite *s = suite_create("gpu_train");
    TCase *tc = testutil_tcase(s, "fp32", 600);
    tcase_add_test(tc, gpt2_one_rank_fp32);
    tcase_add_test(tc, llama_one_rank_fp32);
    tcase_add_test(tc, two_ranks_on_one_gpu_every_stage);
    tc = testutil_tcase(s, "bf16", 600);
    tcase_add_test(tc, gpt2_one_rank_bf16);
    tcase_add_test(tc, llama_one_rank_bf16);
    return testutil_run_suite(s, 0);
}
