/* tests/test_lora_layouts.c — LoRA through the binary under mpirun, on
 * both families: ZeRO stages 0-3 at 2 and 4 ranks give one rank's losses
 * (fp32, global batch kept), bf16 follows fp32, a checkpoint of an adapted
 * run resumes exactly, the memory report's gradients and AdamW states are
 * those of the adapters alone (4 and 8 bytes per adapter parameter over N
 * ranks), and a target that matches nothing is refused on every rank; and
 * NEFTune's noise (run.neftune_noise_alpha), which fine-tuning runs use
 * with adapters; adapters and a 4-bit base cut over tensor-parallel ranks
 * train one rank's losses. The adapters' numerics are in test_lora. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#define STEPS 8

#define LORA                                                                                       \
    "--set lora.enabled=true --set lora.r=8 --set lora.lora_alpha=16 --set run.steps=8 "           \
    "--set optimizer.params.lr=2e-2"
#define LLAMA                                                                                      \
    "--set model.family=llama --set model.n_head=4 --set model.n_kv_head=2 "                       \
    "--set model.intermediate_size=64 --set lora.target_modules=all-linear"

/* The run at `np` ranks under `stage`, the global batch 4 x 2 sequences. */
static const char *layout(int np, int stage, const char *extra)
{
    return testutil_fmt(LORA " --set zero_optimization.stage=%d --set "
                             "gradient_accumulation_steps=%d %s",
                        stage, 4 / np, extra);
}

static void train(const char *dir, const char *name, int np, const char *args, double *loss)
{
    testutil_train_micro_losses(dir, name, np, args, loss, STEPS);
}

static void assert_close(const double *want, const double *got, double tol, const char *what)
{
    testutil_assert_losses_close(want, got, STEPS, tol, what);
}

static void same_losses_everywhere(const char *tag, const char *family)
{
    const char *dir = testutil_tmpdir(tag);
    double base[STEPS], got[STEPS];
    train(dir, "base", 1, layout(1, 0, family), base);
    ck_assert_msg(base[STEPS - 1] < base[0] - 0.02, "%s: loss did not fall: %g -> %g", tag, base[0],
                  base[STEPS - 1]);
    /* each stage at 2 and 4 ranks, against one rank at stage 0: at one
     * rank a stage's shard is the whole tensor, with no boundary for the
     * adapters to cross, and the stages' own paths run at 2 and 4 */
    static const int worlds[] = {2, 4};
    for (int w = 0; w < 2; w++)
        for (int stage = 0; stage <= 3; stage++) {
            const char *name = testutil_fmt("np%d-stage%d", worlds[w], stage);
            train(dir, name, worlds[w], layout(worlds[w], stage, family), got);
            assert_close(base, got, 1e-5,
                         testutil_fmt("%s: %d ranks, stage %d", tag, worlds[w], stage));
        }
}

START_TEST(gpt2_stages_and_world_sizes_give_the_same_losses)
{
    same_losses_everywhere("lora-gpt2", "");
}
END_TEST

START_TEST(llama_stages_and_world_sizes_give_the_same_losses)
{
    same_losses_everywhere("lora-llama", LLAMA);
}
END_TEST

START_TEST(bf16_follows_fp32)
{
    const char *dir = testutil_tmpdir("lora-bf16");
    double fp32[STEPS], got[STEPS];
    train(dir, "fp32", 2, layout(2, 3, ""), fp32);
    train(dir, "bf16", 2, layout(2, 3, "--set bf16.enabled=true"), got);
    assert_close(fp32, got, 2e-2, "bf16");
}
END_TEST

#define QLORA_NF4                                                                                  \
    "--set quantization.load_in_4bit=true --set quantization.bnb_4bit_use_double_quant=true"

/* QLoRA in bf16 computes in bf16 (its base decoded into bf16 views) and
 * follows the fp32 run as LoRA does. */
START_TEST(qlora_computes_in_bf16)
{
    const char *dir = testutil_tmpdir("qlora-bf16");
    double fp32[STEPS], got[STEPS];
    train(dir, "fp32", 2, layout(2, 3, QLORA_NF4), fp32);
    train(dir, "bf16", 2, layout(2, 3, QLORA_NF4 " --set bf16.enabled=true"), got);
    assert_close(fp32, got, 2e-2, "QLoRA bf16");
    const char *log = testutil_slurp(testutil_path_in(dir, "bf16.log"));
    testutil_assert_computes_bf16(log, "QLoRA bf16");
}
END_TEST

/* Four steps, a checkpoint, four more from it: the losses of the second
 * half repeat a straight run's bit for bit. */
START_TEST(adapted_checkpoints_resume_exactly)
{
    const char *dir = testutil_tmpdir("lora-resume");
    double straight[STEPS], first[4], second[4];
    const char *ckpt = testutil_fmt("--set checkpoint.dir=%s/ckpt --set checkpoint.every=4", dir);
    train(dir, "straight", 2, layout(2, 3, LLAMA), straight);
    ck_assert_int_eq(
        testutil_train_micro(dir, "first", 2,
                             layout(2, 3, testutil_fmt(LLAMA " %s --set run.steps=4", ckpt))),
        0);
    ck_assert_int_eq(testutil_micro_losses(dir, "first", first, 4), 4);
    ck_assert_int_eq(
        testutil_train_micro(dir, "second", 2,
                             layout(2, 3, testutil_fmt(LLAMA " %s --set run.resume=auto", ckpt))),
        0);
    ck_assert_int_eq(testutil_micro_losses(dir, "second", second, 4), 4);
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(first[i] == straight[i], "step %d: %.17g vs %.17g", i + 1, first[i],
                      straight[i]);
        ck_assert_msg(second[i] == straight[4 + i], "step %d after resume: %.17g vs %.17g", 5 + i,
                      second[i], straight[4 + i]);
    }
}
END_TEST

/* The number after "key": in report. */
static unsigned long long json_number(const char *report, const char *key)
{
    const char *at = strstr(report, testutil_fmt("\"%s\": ", key));
    ck_assert_msg(at != NULL, "no %s in %s", key, report);
    unsigned long long v = 0;
    ck_assert_int_eq(sscanf(at + strlen(key) + 4, "%llu", &v), 1);
    return v;
}

/* The value of "key": N in the first rank's "peak" object of a report. */
static unsigned long long peak_of(const char *report, const char *key)
{
    const char *ranks = strstr(report, "\"ranks\"");
    ck_assert_ptr_nonnull(ranks);
    return json_number(ranks, key);
}

/* micro.yaml (n_embd 32, 2 blocks) with r = 8 on c_attn: per block A [8,
 * 32] and B [96, 8], 1024 parameters, 2048 in all, split evenly over 2
 * ranks under stage 3 (each unit's 1024 is a multiple of 2 x 16: no
 * padding). */
START_TEST(memory_holds_the_adapters_states_only)
{
    const char *dir = testutil_tmpdir("lora-memory");
    const char *json = testutil_fmt("%s/mem.json", dir);
    ck_assert_int_eq(
        testutil_train_micro(dir, "mem", 2, layout(2, 3, testutil_fmt("--memory-report %s", json))),
        0);
    const char *report = testutil_slurp(json);
    ck_assert_uint_eq(peak_of(report, "optimizer_states"), 8ull * 2048 / 2);
    ck_assert_uint_eq(peak_of(report, "grads"), 4ull * 2048 / 2);
    ck_assert_uint_eq(peak_of(report, "master_params"), 0);
}
END_TEST

START_TEST(a_target_matching_nothing_is_refused)
{
    const char *dir = testutil_tmpdir("lora-bad");
    const int rc = testutil_train_micro(
        dir, "bad", 2, layout(2, 3, "--set 'lora.target_modules=[c_attn, q_proj]'"));
    const char *log = testutil_slurp(testutil_path_in(dir, "bad.log"));
    ck_assert_msg(rc != 0, "a bad target trained:\n%s", log);
    ck_assert_msg(
        strstr(log, "lora.target_modules: 'q_proj' matches no module of this gpt2 model") &&
            strstr(log, "c_attn, c_proj, c_fc"),
        "%s", log);
}
END_TEST

/* LoRA dropout's masks are drawn per sample: another world size and stage
 * draw the same ones (Llama, every linear layer adapted). */
START_TEST(dropout_is_the_same_at_any_layout)
{
    const char *dir = testutil_tmpdir("lora-dropout");
    const char *drop = LLAMA " --set lora.lora_dropout=0.1";
    double base[STEPS], plain[STEPS], got[STEPS];
    train(dir, "base", 1, layout(1, 0, drop), base);
    train(dir, "plain", 1, layout(1, 0, LLAMA), plain);
    /* B starts at zero: the first step cannot tell, the last can */
    ck_assert_msg(fabs(base[STEPS - 1] - plain[STEPS - 1]) > 1e-6, "dropout changed nothing");
    train(dir, "np2-stage3", 2, layout(2, 3, drop), got);
    assert_close(base, got, 1e-5, "dropout, 2 ranks, stage 3");
    train(dir, "np4-stage1", 4,
          layout(4, 1, testutil_fmt("%s --set activation_checkpointing.enabled=true", drop)), got);
    assert_close(base, got, 1e-5, "dropout, 4 ranks, stage 1, checkpointed blocks");
}
END_TEST

/* `zerotrain eval` of the checkpoint in dir/ckpt at 2 ranks: its
 * {"val_loss": ...} text. */
static const char *eval_loss(const char *dir, const char *name, const char *extra)
{
    const char *json = testutil_fmt("%s/%s.json", dir, name);
    ck_assert_int_eq(
        testutil_run(testutil_path_in(dir, testutil_fmt("%s.log", name)),
                     "mpirun --oversubscribe -np 2 %s eval %s --set run.output_dir=%s/e "
                     "--checkpoint %s/ckpt --metrics %s %s",
                     testutil_binary(), testutil_source_path("tests/data/micro.yaml"), dir, dir,
                     json, layout(2, 3, extra)),
        0);
    return testutil_slurp(json);
}

/* NEFTune's noise changes the training forwards only: the first step's
 * loss (before any update: the same weights) differs from a run without
 * it, a rerun repeats it bit for bit, another layout within rounding (the
 * noise is keyed by sample, not by rank), and evaluating the weights it
 * trained gives the same loss with or without it. */
START_TEST(neftune_noise_is_training_only_and_deterministic)
{
    const char *dir = testutil_tmpdir("lora-neftune");
    const char *noise = "--set run.neftune_noise_alpha=5";
    double plain[STEPS], noisy[STEPS], again[STEPS], other[STEPS];
    train(dir, "plain", 2, layout(2, 3, ""), plain);
    train(dir, "noisy", 2,
          layout(
              2, 3,
              testutil_fmt("%s --set checkpoint.dir=%s/ckpt --set checkpoint.every=8", noise, dir)),
          noisy);
    ck_assert_msg(fabs(noisy[0] - plain[0]) > 1e-6, "step 1: %.9g with noise, %.9g without",
                  noisy[0], plain[0]);
    train(dir, "again", 2, layout(2, 3, noise), again);
    ck_assert_msg(memcmp(noisy, again, sizeof again) == 0, "a rerun drew other noise");
    train(dir, "other", 1, layout(1, 0, noise), other);
    assert_close(noisy, other, 1e-5, "1 rank, stage 0, with noise");
    char with[256];
    snprintf(with, sizeof with, "%s", eval_loss(dir, "eval-noise", noise));
    ck_assert_str_eq(with, eval_loss(dir, "eval-plain", ""));
}
END_TEST

/* QLoRA: the same across layouts too (every rank encodes the same images,
 * stage 3 gathers them as bytes); NF4 with double quantisation on GPT-2,
 * FP4 with a bf16 compute dtype on Llama. */
START_TEST(qlora_stages_and_world_sizes_give_the_same_losses)
{
    same_losses_everywhere("qlora-gpt2", QLORA_NF4);
    same_losses_everywhere("qlora-llama", LLAMA " --set quantization.load_in_4bit=true "
                                                "--set quantization.bnb_4bit_quant_type=fp4 "
                                                "--set quantization.bnb_4bit_compute_dtype=bf16");
}
END_TEST

/* The 4-bit base's codes and scales take at most 0.52 bytes a parameter
 * with double quantisation, and the measured parameters of a QLoRA rank
 * are under half a LoRA rank's (fp32 base; the embeddings stay fp32).
 * Weights from a Hugging Face file are quantised at load, and train alike
 * at another layout. */
START_TEST(qlora_base_is_half_a_byte_a_parameter)
{
    const char *dir = testutil_tmpdir("qlora-memory");
    char init[600], ckpt[600]; /* kept: testutil_fmt's buffers are reused */
    snprintf(init, sizeof init, "--set model.init_from=%s",
             testutil_source_path("tests/data/hf_gpt2_micro.safetensors"));
    snprintf(ckpt, sizeof ckpt, "--set checkpoint.dir=%s/ckpt --set checkpoint.every=4", dir);
    double lossa[STEPS], lossb[STEPS];
    train(dir, "lora", 2, layout(2, 3, testutil_fmt("%s --memory-report %s/lora.json", init, dir)),
          lossa);
    train(dir, "qlora", 2,
          layout(2, 3, testutil_fmt(QLORA_NF4 " %s --memory-report %s/qlora.json", init, dir)),
          lossa);
    const char *lora = testutil_slurp(testutil_path_in(dir, "lora.json"));
    const unsigned long long lora_params = peak_of(lora, "params");
    const char *qlora = testutil_slurp(testutil_path_in(dir, "qlora.json"));
    const unsigned long long numel = json_number(qlora, "base4_numel"),
                             bytes = json_number(qlora, "base4_bytes");
    ck_assert_msg(numel > 0 && 2.0 * (double)bytes / (double)numel <= 0.52,
                  "%llu bytes a rank for %llu parameters", bytes, numel);
    ck_assert_msg(peak_of(qlora, "params") * 2 < lora_params, "params %llu vs LoRA's %llu",
                  peak_of(qlora, "params"), lora_params);
    train(dir, "init0", 1, layout(1, 0, testutil_fmt(QLORA_NF4 " %s", init)), lossb);
    assert_close(lossb, lossa, 1e-5, "QLoRA from Hugging Face weights, 2 ranks stage 3");
    /* resumed at step 4 from a checkpoint without the base, at 4 ranks
     * under stage 1: the base is quantised again from the file */
    double first[4], second[4];
    ck_assert_int_eq(
        testutil_train_micro(
            dir, "first", 2,
            layout(2, 3, testutil_fmt(QLORA_NF4 " %s %s --set run.steps=4", init, ckpt))),
        0);
    ck_assert_int_eq(testutil_micro_losses(dir, "first", first, 4), 4);
    ck_assert_int_eq(
        testutil_train_micro(
            dir, "second", 4,
            layout(4, 1, testutil_fmt(QLORA_NF4 " %s %s --set run.resume=auto", init, ckpt))),
        0);
    ck_assert_int_eq(testutil_micro_losses(dir, "second", second, 4), 4);
    testutil_assert_losses_close(lossa + 4, second, 4, 1e-5, "QLoRA resumed at 4 ranks, stage 1");
}
END_TEST

/* The run at `np` ranks as T tensor-parallel slices under `stage`, the
 * global batch kept: each of the np / T data-parallel ranks accumulates
 * 4 / (np / T) micro batches. */
static const char *tp_layout(int np, int T, int stage, const char *extra)
{
    return testutil_fmt(LORA " --set tensor_parallel.size=%d --set zero_optimization.stage=%d "
                             "--set gradient_accumulation_steps=%d %s",
                        T, stage, 4 / (np / T), extra);
}

/* Adapters cut as their base layers train one rank's losses: GPT-2's
 * c_attn at T=2, and Llama's every linear layer at T=2 x D=2 under ZeRO 3
 * with LoRA dropout (each slice draws its part of the whole input's mask)
 * and NEFTune's noise. */
START_TEST(tensor_parallel_adapters_train_one_ranks_losses)
{
    const char *dir = testutil_tmpdir("lora-tp");
    double base[STEPS], got[STEPS];
    train(dir, "base", 1, layout(1, 0, ""), base);
    train(dir, "t2", 2, tp_layout(2, 2, 0, ""), got);
    assert_close(base, got, 1e-5, "GPT-2 c_attn, T=2");
    const char *llama = LLAMA " --set lora.lora_dropout=0.1 --set run.neftune_noise_alpha=5";
    train(dir, "llama", 1, layout(1, 0, llama), base);
    ck_assert_msg(base[STEPS - 1] < base[0] - 0.02, "loss did not fall: %g -> %g", base[0],
                  base[STEPS - 1]);
    train(dir, "llama-t2d2", 4, tp_layout(4, 2, 3, llama), got);
    assert_close(base, got, 1e-5, "Llama all-linear, dropout and NEFTune, T=2 x D=2, stage 3");
}
END_TEST

/* n_embd 128 with 2 heads: at T=2 every slice's rows, and every row piece
 * of a column-cut slice (64 columns), are whole blocks of 64 of the whole
 * tensor. */
#define WIDE "--set model.n_embd=128 --set quantization.load_in_4bit=true "

/* QLoRA at T=2 x D=2 under ZeRO 3, each rank quantising its own slice.
 * Where the slices are cut on block boundaries the blocks and their absmax
 * are one rank's, so the base and the losses are one rank's (NF4, 1e-5).
 * With double quantisation a slice's block scales are quantised against
 * its own offset (their mean) and in its own groups of 256: each scale
 * moves by at most the 8-bit map's step, which the losses follow to 1e-3. */
START_TEST(qlora_slices_train_one_ranks_losses)
{
    const char *dir = testutil_tmpdir("qlora-tp");
    double base[STEPS], got[STEPS];
    train(dir, "nf4", 1, layout(1, 0, WIDE), base);
    train(dir, "nf4-t2d2", 4, tp_layout(4, 2, 3, WIDE), got);
    assert_close(base, got, 1e-5, "QLoRA NF4, T=2 x D=2, stage 3");
    train(dir, "dq", 1, layout(1, 0, WIDE QLORA_NF4), base);
    train(dir, "dq-t2d2", 4, tp_layout(4, 2, 3, WIDE QLORA_NF4), got);
    assert_close(base, got, 1e-3, "QLoRA NF4 double-quantised, T=2 x D=2, stage 3");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("lora_layouts");
    TCase *tc = testutil_tcase(s, "layouts", 900);
    tcase_add_test(tc, gpt2_stages_and_world_sizes_give_the_same_losses);
    tcase_add_test(tc, llama_stages_and_world_sizes_give_the_same_losses);
    tcase_add_test(tc, bf16_follows_fp32);
    tcase_add_test(tc, qlora_computes_in_bf16);
    tcase_add_test(tc, adapted_checkpoints_resume_exactly);
    tcase_add_test(tc, memory_holds_the_adapters_states_only);
    tcase_add_test(tc, a_target_matching_nothing_is_refused);
    tcase_add_test(tc, neftune_noise_is_training_only_and_deterministic);
    tcase_add_test(tc, dropout_is_the_same_at_any_layout);
    tcase_add_test(tc, qlora_stages_and_world_sizes_give_the_same_losses);
    tcase_add_test(tc, qlora_base_is_half_a_byte_a_parameter);
    tcase_add_test(tc, tensor_parallel_adapters_train_one_ranks_losses);
    tcase_add_test(tc, qlora_slices_train_one_ranks_losses);
    return testutil_run_suite(s, 0);
}
