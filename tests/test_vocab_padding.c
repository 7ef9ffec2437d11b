/* tests/test_vocab_padding.c — GPT-2's vocabulary of 50,257 under tensor
 * parallelism, padded as model.pad_vocab_size_to_multiple_of says
 * (worker/tensor_parallel.h), through the binary under mpirun.
 *
 * The micro model with GPT-2's vocabulary (its byte data's ids are a
 * subset): one unpadded rank is the reference; one padded rank, T=2, T=2
 * x D=2 at ZeRO 3 and T=4 give its losses within 1e-5 (fp32) over 10 steps.
 * A T=2 checkpoint holds the true vocabulary with the padding it was cut
 * from, and resumes at T=1 and T=4 on the uninterrupted run's losses; its
 * export has 50,257 rows, and PyTorch (scripts/reference/hf_folder_loss.py)
 * computes from that folder the loss zerotrain evaluates from it at T=2.
 * LoRA pads as full runs do: its frozen embedding's padding rows stay zero,
 * T=2 trains T=1's losses, and the merged export has 50,257 rows.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define STEPS 10

/* Heads enough for 4 tensor-parallel slices; GPT-2's vocabulary. */
#define GPT2_VOCAB                                                                                 \
    "--set model.n_layer=2 --set model.n_head=4 --set model.vocab_size=50257 "                     \
    "--set gradient_clipping=0.5"

/* T tensor-parallel slices at ZeRO `stage` over np ranks: the global batch
 * is 4 micro batches of 2 sequences, accumulated over np / T data-parallel
 * ranks. */
static const char *layout(int np, int T, int stage, const char *extra)
{
    return testutil_fmt(GPT2_VOCAB
                        " --set tensor_parallel.size=%d --set zero_optimization.stage=%d "
                        "--set gradient_accumulation_steps=%d %s",
                        T, stage, 4 / (np / T), extra);
}

static void train(const char *dir, const char *name, int np, const char *args, double *loss)
{
    testutil_train_micro_losses(dir, name, np, args, loss, STEPS);
}

START_TEST(padded_layouts_give_the_unpadded_losses)
{
    static const struct {
        int np, T, stage;
        const char *note; /* what the log says of the padding */
    } cases[] = {
        {1, 1, 0, "vocabulary 50257 padded to 50304 for T=1"},
        {2, 2, 1, "vocabulary 50257 padded to 50432 for T=2"},
        {4, 2, 3, "vocabulary 50257 padded to 50432 for T=2"},
        {4, 4, 0, "vocabulary 50257 padded to 50688 for T=4"},
    };
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("vocab-layouts"));
    double base[STEPS], got[STEPS];
    train(dir, "unpadded", 1, layout(1, 1, 0, "--set model.pad_vocab_size_to_multiple_of=1"), base);
    ck_assert_msg(!strstr(testutil_slurp(testutil_path_in(dir, "unpadded.log")), "padded to"), "%s",
                  testutil_slurp(testutil_path_in(dir, "unpadded.log")));
    ck_assert_msg(base[STEPS - 1] < base[0] - 0.05, "loss did not fall: %g -> %g", base[0],
                  base[STEPS - 1]);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "np%d-T%d-zero%d", cases[i].np, cases[i].T, cases[i].stage);
        train(dir, name, cases[i].np, layout(cases[i].np, cases[i].T, cases[i].stage, ""), got);
        testutil_assert_losses_close(base, got, STEPS, 1e-5, name);
        const char *log = testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", name)));
        ck_assert_msg(strstr(log, cases[i].note), "%s: no '%s' in\n%s", name, cases[i].note, log);
    }
}
END_TEST

/* The 8-byte length and the JSON header of a safetensors file. */
static char *safetensors_header(const char *path)
{
    size_t n;
    unsigned char *blob = testutil_read_file(path, &n);
    ck_assert_uint_ge(n, 8);
    unsigned long long len = 0;
    for (int k = 7; k >= 0; k--)
        len = len << 8 | blob[k];
    ck_assert_uint_le(len, n - 8);
    char *header = malloc(len + 1);
    ck_assert_ptr_nonnull(header);
    memcpy(header, blob + 8, len);
    header[len] = '\0';
    free(blob);
    return header;
}

/* Exports dir/t2-ck (with `flags`) into dir/hf and checks that its
 * embedding holds GPT-2's 50,257 rows, the padding dropped. */
static void export_true_vocabulary(const char *dir, const char *flags)
{
    const char *log = testutil_path_in(dir, "export.log");
    ck_assert_msg(testutil_run(log, "%s export %s/t2-ck %s --out %s/hf/model.safetensors",
                               testutil_binary(), dir, flags, dir) == 0,
                  "%s", testutil_slurp(log));
    char *header = safetensors_header(testutil_path_in(dir, "hf/model.safetensors"));
    const char *wte = strstr(header, "\"wte.weight\"");
    ck_assert_msg(wte && strstr(wte, "\"shape\":[50257,32]") == strstr(wte, "\"shape\""), "%s",
                  header);
    free(header);
}

/* The loss `zerotrain eval` gives the weights in folder hf at T=2 on val. */
static double eval_at_t2(const char *dir, const char *hf, const char *val)
{
    const char *log = testutil_path_in(dir, "eval.log");
    ck_assert_msg(testutil_run(log,
                               "mpirun --oversubscribe -np 2 %s eval %s --quiet "
                               "--set run.output_dir=%s/e --metrics %s/eval.json %s "
                               "--set tensor_parallel.size=2 --set model.init_from=%s "
                               "--set data.val=%s --set run.eval_batches=0",
                               testutil_binary(), testutil_source_path("tests/data/micro.yaml"),
                               dir, dir, GPT2_VOCAB, hf, val) == 0,
                  "%s", testutil_slurp(log));
    return testutil_val_loss(testutil_path_in(dir, "eval.json"));
}

START_TEST(checkpoints_and_exports_hold_the_true_vocabulary)
{
    enum { WINDOWS = 6, SEQ = 32 };
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("vocab-ckpt"));
    double full[STEPS];
    train(dir, "t2", 2,
          testutil_fmt("%s --set checkpoint.every=5 --set checkpoint.keep=5 "
                       "--set checkpoint.dir=%s/t2-ck",
                       layout(2, 2, 1, ""), dir),
          full);
    /* the true vocabulary's units, and the padding they were cut from */
    const char *meta = testutil_slurp(testutil_fmt("%s/t2-ck/step-00000005/meta.json", dir));
    ck_assert_msg(strstr(meta, "\"vocab_padded\": 50432"), "%s", meta);
    ck_assert_msg(strstr(meta, "\"vocab_size\": 50257"), "%s", meta);
    /* wte (50257 x 32) and wpe (32 x 32): the true rows, whatever T padded */
    ck_assert_msg(strstr(meta, "{\"numel\": 1609248,"), "%s", meta);
    testutil_resume_matches(dir, "t2", "t2-to-t1", 1, layout(1, 1, 0, ""), full);
    testutil_resume_matches(dir, "t2", "t2-to-t4", 4, layout(4, 4, 0, ""), full);
    testutil_resume_matches(dir, "t2", "t2-to-unpadded", 1,
                            layout(1, 1, 0, "--set model.pad_vocab_size_to_multiple_of=1"), full);

    export_true_vocabulary(dir, "");
    const char *config = testutil_slurp(testutil_path_in(dir, "hf/config.json"));
    ck_assert_msg(strstr(config, "\"vocab_size\": 50257"), "%s", config);

    /* the export, padded again on import, evaluates as PyTorch reads it */
    const char *val = testutil_path_in(dir, "val.txt");
    ck_assert_int_eq(testutil_run(testutil_path_in(dir, "val.log"),
                                  "(head -c %d /usr/share/common-licenses/GPL-3 > %s)",
                                  WINDOWS * SEQ + 1, val),
                     0);
    const double ours = eval_at_t2(dir, testutil_path_in(dir, "hf"), val);
    const double theirs = testutil_torch_folder_loss(testutil_path_in(dir, "python.log"),
                                                     testutil_path_in(dir, "hf"), val, SEQ);
    if (isnan(theirs))
        return;
    ck_assert_msg(fabs(theirs - ours) <= 1e-4, "PyTorch %.9f, zerotrain at T=2 %.9f", theirs, ours);
}
END_TEST

/* With padding off, T must divide the vocabulary: the refusal names the
 * key that turns it on. */
START_TEST(unpadded_refusal_names_the_key)
{
    const char *dir = testutil_tmpdir("vocab-refusal");
    ck_assert_int_eq(
        testutil_train_micro(dir, "off", 2,
                             layout(2, 2, 0, "--set model.pad_vocab_size_to_multiple_of=1")),
        2);
    const char *log = testutil_slurp(testutil_path_in(dir, "off.log"));
    ck_assert_msg(strstr(log, "tensor_parallel.size: 2 must divide model.vocab_size (50257)") &&
                      strstr(log, "model.pad_vocab_size_to_multiple_of above 1"),
                  "%s", log);
}
END_TEST

/* LoRA (GPT-2's c_attn) at T=2 pads the frozen vocabulary as a full run
 * does and trains the losses of one unpadded rank; its merged export holds
 * the true 50,257 rows. */
START_TEST(lora_pads_as_full_runs_do)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("vocab-lora"));
    const char *lora = "--set lora.enabled=true --set lora.r=8 --set lora.lora_alpha=16 "
                       "--set optimizer.params.lr=2e-2";
    double base[STEPS], got[STEPS];
    train(dir, "t1", 1,
          layout(1, 1, 0, testutil_fmt("%s --set model.pad_vocab_size_to_multiple_of=1", lora)),
          base);
    ck_assert_msg(base[STEPS - 1] < base[0] - 0.02, "loss did not fall: %g -> %g", base[0],
                  base[STEPS - 1]);
    train(dir, "t2", 2,
          layout(2, 2, 0,
                 testutil_fmt("%s --set checkpoint.every=%d --set checkpoint.dir=%s/t2-ck", lora,
                              STEPS, dir)),
          got);
    testutil_assert_losses_close(base, got, STEPS, 1e-5, "LoRA, T=2 padded");
    const char *log = testutil_slurp(testutil_path_in(dir, "t2.log"));
    ck_assert_msg(strstr(log, "vocabulary 50257 padded to 50432 for T=2"), "%s", log);

    export_true_vocabulary(dir, "--merge");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vocab_padding");
    TCase *tc = testutil_tcase(s, "layouts", 900);
    tcase_add_test(tc, padded_layouts_give_the_unpadded_losses);
    tcase_add_test(tc, checkpoints_and_exports_hold_the_true_vocabulary);
    tcase_add_test(tc, unpadded_refusal_names_the_key);
    tcase_add_test(tc, lora_pads_as_full_runs_do);
    return testutil_run_suite(s, 0);
}
