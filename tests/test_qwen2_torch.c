/* tests/test_qwen2_torch.c — a Qwen2ForCausalLM config.json trained end to
 * end by zerotrain and by PyTorch from the same weights.
 *
 * scripts/reference/qwen2_train.py writes a small Qwen2 folder (q, k and v
 * biases, rope_theta 1e6, rms_norm_eps 1e-6, tied or untied head) with
 * random weights. zerotrain reads it as a user would (model.hf_config,
 * model.init_from) and trains 8 steps of plain SGD in fp32, every step on
 * the whole 8-window file, so that the batch does not depend on the
 * sampler's order; the same script trains the same steps in float64 from
 * the same folder. The per-step losses must agree within 1e-4 (relative),
 * and the weights zerotrain exports at the end give PyTorch
 * (hf_folder_loss.py) the loss its own trained weights give, within 1e-4,
 * their config.json naming Qwen2ForCausalLM.
 * Untied at one rank; tied at two ranks under ZeRO 3. Skipped (77)
 * without /usr/bin/python3 and torch. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

enum { STEPS = 8, SEQ = 32, WINDOWS = 8 };
#define LR "0.1"

static const char *script(void)
{
    return testutil_source_path("scripts/reference/qwen2_train.py");
}

/* PyTorch's per-step losses into loss[STEPS]; returns its `final` loss. */
static double torch_losses(const char *dir, const char *folder, const char *data, double *loss)
{
    const char *log = testutil_path_in(dir, "torch.log");
    ck_assert_msg(testutil_run(log, "/usr/bin/python3 %s train %s %s %d %d %s", script(), folder,
                               data, SEQ, STEPS, LR) == 0,
                  "%s", testutil_slurp(log));
    const char *text = testutil_slurp(log);
    for (int s = 0; s < STEPS; s++) {
        const char *key = testutil_fmt("step %d loss ", s + 1), *at = strstr(text, key);
        ck_assert_msg(at && sscanf(at + strlen(key), "%lf", &loss[s]) == 1, "%s", text);
    }
    double final = NAN;
    const char *at = strstr(text, "final ");
    ck_assert_msg(at && sscanf(at + 6, "%lf", &final) == 1, "%s", text);
    return final;
}

static void compare(const char *tag, int tied, int np, int stage)
{
    const char *dir = testutil_tmpdir(tag);
    const char *init = testutil_path_in(dir, "init");
    ck_assert_msg(testutil_run(testutil_path_in(dir, "init.log"), "/usr/bin/python3 %s init %s%s",
                               script(), init, tied ? " --tied" : "") == 0,
                  "%s", testutil_slurp(testutil_path_in(dir, "init.log")));
    const char *data = testutil_path_in(dir, "data.txt");
    ck_assert_int_eq(testutil_run(testutil_path_in(dir, "data.log"),
                                  "(head -c %d /usr/share/common-licenses/GPL-3 > %s)",
                                  WINDOWS * SEQ + 1, data),
                     0);
    const char *yaml =
        testutil_fmt("model: {hf_config: %s/config.json, init_from: %s}\n"
                     "data: {train: %s, val_fraction: 0, seq_len: %d}\n"
                     "run: {steps: %d, seed: 3, eval_interval: 0, output_dir: %s/run}\n"
                     "train_micro_batch_size_per_gpu: %d\n"
                     "gradient_accumulation_steps: 1\n"
                     "gradient_clipping: 0\n"
                     "zero_optimization: {stage: %d}\n"
                     "optimizer: {type: SGD, params: {lr: " LR ", weight_decay: 0}}\n",
                     init, init, data, SEQ, STEPS, dir, WINDOWS / np, stage);
    const char *config = testutil_path_in(dir, "qwen2.yaml");
    testutil_write_file(config, yaml, strlen(yaml));
    const char *log = testutil_path_in(dir, "train.log");
    ck_assert_msg(testutil_run(log,
                               "mpirun --oversubscribe -np %d %s train %s --quiet --no-progress "
                               "--metrics %s/train.jsonl",
                               np, testutil_binary(), config, dir) == 0,
                  "%s", testutil_slurp(log));
    double ours[STEPS], theirs[STEPS];
    ck_assert_int_eq(testutil_read_losses(testutil_path_in(dir, "train.jsonl"), ours, STEPS),
                     STEPS);
    const double final = torch_losses(dir, init, data, theirs);
    ck_assert_msg(theirs[STEPS - 1] < theirs[0] - 0.5, "%s: loss did not fall: %g -> %g", tag,
                  theirs[0], theirs[STEPS - 1]);
    for (int s = 0; s < STEPS; s++)
        printf("%s step %d: zerotrain %.9f PyTorch %.9f (%.2e)\n", tag, s + 1, ours[s], theirs[s],
               fabs(ours[s] - theirs[s]) / theirs[s]);
    testutil_assert_losses_close(theirs, ours, STEPS, 1e-4, tag);
    /* a Llama with q, k and v biases goes out as Qwen2's architecture */
    const char *exported_config = testutil_slurp(testutil_path_in(dir, "run/final/config.json"));
    ck_assert_msg(strstr(exported_config, "Qwen2ForCausalLM"), "%s", exported_config);
    const double exported = testutil_torch_folder_loss(
        testutil_path_in(dir, "final.log"), testutil_path_in(dir, "run/final"), data, SEQ);
    printf("%s after %d steps: PyTorch's weights %.9f, zerotrain's export %.9f\n", tag, STEPS,
           final, exported);
    ck_assert_msg(fabs(exported - final) <= 1e-4 * final, "%s: export %.9f, PyTorch %.9f", tag,
                  exported, final);
}

START_TEST(untied_one_rank)
{
    compare("qwen2-untied", 0, 1, 0);
}
END_TEST

START_TEST(tied_two_ranks_zero3)
{
    compare("qwen2-tied", 1, 2, 3);
}
END_TEST

int main(void)
{
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test_qwen2_torch: skipped: no /usr/bin/python3 with torch\n");
        return 77;
    }
    Suite *s = suite_create("qwen2_torch");
    TCase *tc = testutil_tcase(s, "qwen2", 900);
    tcase_add_test(tc, untied_one_rank);
    tcase_add_test(tc, tied_two_ranks_zero3);
    return testutil_run_suite(s, 0);
}
