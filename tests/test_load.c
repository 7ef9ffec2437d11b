/* tests/test_load.c — model.init_from on a sharded save_pretrained folder
 * through the binary under mpirun.
 *
 * scripts/bench/make_weights.py writes the same random weights of
 * configs/tiny.yaml's GPT-2 shape (and a Llama of llama-tiny's) twice: cut
 * into shards of 300 kB with an index, and as one file. Each rank reads
 * only its ranges of the shards, a chunk at a time: at one rank the
 * sharded folder must give the one file's losses bit for bit, and at 2 and
 * 4 ranks under every ZeRO stage the same losses within a tolerance, in
 * fp32 and bf16 files, and for QLoRA, whose 4-bit base is encoded a tensor
 * at a time. The loader's staging (the ledger's `load` category, in the
 * memory report) stays below an fp32 copy of the model: what the ledger
 * would show if any rank built one; the dry run predicts it exactly. A truncated shard is refused
 * on every rank, naming it, with exit status 2.
 *
 * The weights need numpy (Debian's python3-numpy); without it the suite
 * skips, saying so.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define STEPS  2
#define PYTHON "/usr/bin/python3"

/* Parameters of make_weights.py's "tiny" (configs/tiny.yaml's GPT-2), and
 * of "tiny-llama". */
#define TINY_PARAMS       842496ull
#define TINY_LLAMA_PARAMS 1049728ull

/* Their shapes over tests/data/micro.yaml's. */
#define TINY                                                                                       \
    "--set model.block_size=128 --set model.n_layer=4 --set model.n_head=4 "                       \
    "--set model.n_embd=128"
#define TINY_LLAMA                                                                                 \
    TINY " --set model.family=llama --set model.n_kv_head=2 --set model.intermediate_size=512 "    \
         "--set model.tie_word_embeddings=false"

/* Writes make_weights.py's `shape` in `dtype` to dir/name, in shards of
 * `shard` bytes, and its path into out[4096]. */
static void weights(const char *dir, const char *name, const char *shape, const char *dtype,
                    const char *shard, char *out)
{
    const char *log = testutil_path_in(dir, testutil_fmt("%s.log", name));
    char log_path[4096];
    snprintf(out, 4096, "%s", testutil_path_in(dir, name));
    snprintf(log_path, sizeof log_path, "%s", log);
    ck_assert_msg(testutil_run(log_path,
                               "%s %s %s --out %s --dtype %s --seed 7 --max-shard-size %s", PYTHON,
                               testutil_source_path("scripts/bench/make_weights.py"), shape, out,
                               dtype, shard) == 0,
                  "make_weights.py %s failed:\n%s", shape, testutil_slurp(log_path));
}

/* The run at `np` ranks under `stage` from the weights at `from`, the
 * global batch 4 x 2 sequences at any np. */
static const char *layout(const char *from, int np, int stage, const char *extra)
{
    return testutil_fmt("--set model.init_from=%s --set run.steps=%d "
                        "--set zero_optimization.stage=%d --set gradient_accumulation_steps=%d %s",
                        from, STEPS, stage, 4 / np, extra);
}

/* Peak of the `load` category of the first rank in the memory report at
 * `path`. */
static unsigned long long load_peak(const char *path)
{
    const char *report = testutil_slurp(path);
    const char *peak = strstr(report, "\"peak\": {");
    ck_assert_msg(peak != NULL, "no peaks in %s:\n%s", path, report);
    const char *load = strstr(peak, "\"load\": ");
    ck_assert_msg(load != NULL, "no load peak in %s:\n%s", path, report);
    return strtoull(load + strlen("\"load\": "), NULL, 10);
}

/* The counted part of rank 0's RSS once model.init_from was read, in a
 * memory report's text. */
static unsigned long long loaded_counted(const char *report)
{
    const char *at = strstr(report, "\"rss_predicted_loaded\": ");
    ck_assert_msg(at != NULL, "no rss_predicted_loaded in\n%s", report);
    at = strstr(at, "\"counted\": ");
    ck_assert_ptr_nonnull(at);
    return strtoull(at + strlen("\"counted\": "), NULL, 10);
}

/* Trains; the loader's staging must have been counted, and stayed below
 * an fp32 copy of the model's n_params. With `dry`, the dry run of the
 * same run must have predicted that peak to the byte (it reads no file:
 * the reader's transposition buffers are the family's, the staging the
 * rank's ranges'). */
static void train(const char *dir, const char *name, int np, const char *args,
                  unsigned long long n_params, double *loss, int dry)
{
    testutil_train_micro_losses(dir, name, np, args, loss, STEPS);
    const unsigned long long peak = load_peak(testutil_fmt("%s/%s/memory_report.json", dir, name));
    ck_assert_msg(peak > 0 && peak < n_params * 4,
                  "%s: load peak %llu bytes; an fp32 copy of the model is %llu", name, peak,
                  n_params * 4);
    if (!dry)
        return;
    const char *report = testutil_fmt("%s/%s-dry.json", dir, name);
    char path[4096];
    snprintf(path, sizeof path, "%s", report);
    const char *dry_name = testutil_fmt("%s-dry", name);
    ck_assert_msg(
        testutil_train_micro(dir, dry_name, np,
                             testutil_fmt("%s --dry-run --memory-report %s", args, path)) == 0,
        "%s failed:\n%s", dry_name,
        testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", dry_name))));
    ck_assert_msg(load_peak(path) == peak,
                  "%s: the dry run predicted a load peak of %llu bytes, "
                  "the run's was %llu",
                  name, load_peak(path), peak);
    /* and the ledger's part of the RSS once the weights were read, which
     * the run measured then */
    const char *run = testutil_slurp(testutil_fmt("%s/%s/memory_report.json", dir, name));
    const char *hwm = strstr(run, "\"load_rss_peak\": ");
    ck_assert_msg(hwm && strtoull(hwm + strlen("\"load_rss_peak\": "), NULL, 10) > 0,
                  "%s: no load_rss_peak in\n%s", name, run);
    const unsigned long long want = loaded_counted(run), got = loaded_counted(testutil_slurp(path));
    ck_assert_msg(got == want, "%s: the dry run counted %llu bytes once loaded, the run %llu", name,
                  got, want);
}

static void assert_same(const double *want, const double *got, const char *what)
{
    for (int i = 0; i < STEPS; i++)
        ck_assert_msg(got[i] == want[i], "%s, step %d: loss %.17g, expected %.17g", what, i + 1,
                      got[i], want[i]);
}

/* The sharded folder at one rank repeats the one file bit for bit; at 2
 * and 4 ranks every stage gives its losses within `tol`. */
static void every_layout(const char *tag, const char *shape, unsigned long long n_params,
                         const char *dtype, const char *extra, double tol)
{
    const char *dir = testutil_tmpdir(tag);
    char one[4096], sharded[4096];
    weights(dir, "one-file", shape, dtype, "100MB", one);
    weights(dir, "shards", shape, dtype, "300KB", sharded);
    ck_assert_msg(strstr(testutil_slurp(testutil_fmt("%s/model.safetensors.index.json", sharded)),
                         "-of-") != NULL,
                  "%s: make_weights.py wrote no shards", tag);
    double base[STEPS], got[STEPS];
    train(dir, "one", 1, layout(one, 1, 0, extra), n_params, base, 0);
    train(dir, "sharded-np1", 1, layout(sharded, 1, 0, extra), n_params, got, 1);
    assert_same(base, got, testutil_fmt("%s: shards against one file", tag));
    static const int worlds[] = {2, 4};
    for (int w = 0; w < 2; w++)
        for (int stage = 0; stage <= 3; stage++) {
            const char *name = testutil_fmt("np%d-stage%d", worlds[w], stage);
            train(dir, name, worlds[w], layout(sharded, worlds[w], stage, extra), n_params, got,
                  worlds[w] == 2 && stage == 3);
            testutil_assert_losses_close(
                base, got, STEPS, tol,
                testutil_fmt("%s: %d ranks, stage %d", tag, worlds[w], stage));
        }
}

START_TEST(fp32_shards_load_at_every_layout)
{
    every_layout("load-fp32", "tiny", TINY_PARAMS, "fp32", TINY, 1e-5);
}
END_TEST

START_TEST(bf16_shards_load_at_every_layout)
{
    every_layout("load-bf16", "tiny", TINY_PARAMS, "bf16", TINY " --set bf16.enabled=true", 1e-3);
}
END_TEST

#define QLORA                                                                                      \
    "--set lora.enabled=true --set lora.r=8 --set lora.lora_alpha=16 "                             \
    "--set quantization.load_in_4bit=true --set quantization.bnb_4bit_use_double_quant=true"

START_TEST(qlora_shards_load_at_every_layout)
{
    every_layout("load-qlora", "tiny", TINY_PARAMS, "bf16",
                 TINY " " QLORA " --set bf16.enabled=true", 1e-3);
}
END_TEST

START_TEST(llama_qlora_shards_load_at_every_layout)
{
    every_layout("load-llama", "tiny-llama", TINY_LLAMA_PARAMS, "bf16",
                 TINY_LLAMA " " QLORA " --set lora.target_modules=all-linear "
                            "--set bf16.enabled=true",
                 1e-3);
}
END_TEST

/* A shard cut short: refused at open on every rank, naming the shard,
 * exit 2, one error line. */
START_TEST(truncated_shard_is_refused)
{
    const char *dir = testutil_tmpdir("load-truncated");
    char sharded[4096];
    weights(dir, "shards", "tiny", "bf16", "300KB", sharded);
    const char *shard = testutil_fmt("%s/model-00002-of-00007.safetensors", sharded);
    ck_assert_int_eq(truncate(shard, 100000), 0);
    int rc = testutil_train_micro(dir, "bad", 2, layout(sharded, 2, 3, TINY));
    const char *out = testutil_slurp(testutil_path_in(dir, "bad.log"));
    ck_assert_msg(rc == 2, "exit %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, "model.init_from: ") && strstr(out, "model-00002-of-00007"),
                  "the error does not name the shard:\n%s", out);
    ck_assert_int_eq(testutil_count(out, "zerotrain: error:"), 1);
}
END_TEST

static Suite *load_suite(void)
{
    Suite *s = suite_create("load");
    TCase *tc = testutil_tcase(s, "layouts", 900);
    tcase_add_test(tc, fp32_shards_load_at_every_layout);
    tcase_add_test(tc, bf16_shards_load_at_every_layout);
    tcase_add_test(tc, truncated_shard_is_refused);
    tc = testutil_tcase(s, "qlora", 900);
    tcase_set_tags(tc, "qlora"); /* CTest's test_load_qlora; the rest in _rest */
    tcase_add_test(tc, qlora_shards_load_at_every_layout);
    tcase_add_test(tc, llama_qlora_shards_load_at_every_layout);
    return s;
}

int main(void)
{
    if (system(PYTHON " -c 'import numpy' 2>/dev/null") != 0) {
        printf("test_load: skipped: " PYTHON " has no numpy (Debian's python3-numpy), which "
               "scripts/bench/make_weights.py needs to write the weights\n");
        return 77;
    }
    return testutil_run_suite(load_suite(), 0);
}
