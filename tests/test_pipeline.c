/* tests/test_pipeline.c — tensor and pipeline parallelism composed with
 * ZeRO data parallelism, through the binary under mpirun, on both model
 * families: with fp32 and the same global batch (4 micro batches of 2
 * sequences a step), every layout's losses equal a 1-rank run with
 * accumulation within 1e-5 relative over 10 steps — D=4 at ZeRO stages
 * 0-3 (GPT-2), P=2 x D=2 (1F1B at stages 0-3 and GPipe), P=4 (both schedules), P=2
 * with activation checkpointing and a uniform partition, T=2 x D=2 (ZeRO 1,
 * and 3 with checkpointing), T=2 x P=2, T=4, interleaved P=2 with v=2 (D=1
 * and D=2 at ZeRO 1); Llama with its head tied to the
 * embedding and not; and so do the validation losses at the end, evaluated
 * through each layout's pipeline. Then what a pipeline reports: every rank's row with
 * its coordinates, the stages' different model states, the bubble and
 * the bytes per axis in the metrics; and --print-layout. The schedules'
 * and partitions' own rules are in the serial suite below. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../coordinator/pipeline.h"
#include "../shard/shard.h"
#include "../worker/model.h"
#include "../worker/tensor_parallel.h"
#include "testutil.h"

#define STEPS 10

/* Heads enough for 4 tensor-parallel slices (Llama's key-value heads too). */
#define DEEP "--set model.n_layer=4 --set model.n_head=4 --set gradient_clipping=0.5"
#define LLAMA                                                                                      \
    "--set model.family=llama --set model.n_head=8 --set model.n_kv_head=4 "                       \
    "--set model.intermediate_size=64"

#define SEQUENCE    "--set tensor_parallel.sequence_parallel=true"
#define INTERLEAVED "--set pipeline.virtual_stages=2"

/* A run of P stages of T tensor-parallel slices at ZeRO `stage` over np
 * ranks: the global batch is 4 micro batches of 2 sequences, so each of
 * the D = np / (T P) data-parallel ranks accumulates 4 / D of them. */
static const char *layout_tp(int np, int T, int P, int stage, const char *extra)
{
    return testutil_fmt(DEEP " --set tensor_parallel.size=%d --set pipeline.stages=%d --set "
                             "zero_optimization.stage=%d --set gradient_accumulation_steps=%d %s",
                        T, P, stage, 4 / (np / (P * T)), extra);
}

static const char *layout(int np, int P, int stage, const char *extra)
{
    return layout_tp(np, 1, P, stage, extra);
}

static void train(const char *dir, const char *name, int np, const char *args, double *loss)
{
    testutil_train_micro_losses(dir, name, np, args, loss, STEPS);
}

/* The run's final validation loss (evaluated through its pipeline). */
static double val_loss(const char *dir, const char *name)
{
    const char *metrics = testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.jsonl", name)));
    const char *v = strstr(metrics, "\"val_loss\": ");
    ck_assert_msg(v != NULL, "%s: no val_loss in its metrics", name);
    return atof(v + strlen("\"val_loss\": "));
}

struct case_ {
    int np, P, stage;
    const char *extra;
    int T;
};

/* Pure data parallelism (P = T = 1, D = 4 at stages 0-3) runs on GPT-2
 * only: the Llama family's stages at 1, 2 and 4 ranks are
 * test_llama_layouts'; what this suite adds for it is the pipeline and
 * tensor-parallel layouts, where the head, the tied embedding and the
 * grouped heads are cut. */
static void same_losses_in_every_layout(const char *tag, const char *family, int data_parallel)
{
    static const struct case_ cases[] = {
        {4, 1, 0, "", 1},
        {4, 1, 1, "", 1},
        {4, 1, 2, "", 1},
        {4, 1, 3, "", 1},
        {4, 2, 0, "", 1},
        {4, 2, 1, "", 1},
        {4, 2, 2, "", 1},
        {4, 2, 3, "", 1},
        {4, 2, 0, "--set pipeline.schedule=gpipe", 1},
        {4, 2, 3, "--set pipeline.schedule=gpipe", 1},
        {4, 4, 0, "", 1},
        {4, 4, 2, "--set pipeline.schedule=gpipe", 1},
        {2, 2, 1,
         "--set activation_checkpointing.enabled=true --set pipeline.partition_method=uniform", 1},
        {4, 1, 1, "", 2},
        {4, 1, 3, "--set activation_checkpointing.enabled=true", 2},
        {4, 2, 1, "", 2},
        {4, 1, 0, "", 4},
        {4, 1, 1, SEQUENCE, 2},
        {4, 2, 3, SEQUENCE " --set activation_checkpointing.enabled=true", 2},
        {4, 1, 0, SEQUENCE " --set activation_checkpointing.enabled=true", 4},
        {2, 2, 1, INTERLEAVED, 1},
        {4, 2, 1, INTERLEAVED, 1},
    };
    char dir[512], name[128];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir(tag)); /* testutil's strings rotate */
    double base[STEPS], got[STEPS];
    train(dir, "base", 1, layout(1, 1, 0, family), base);
    ck_assert_msg(base[STEPS - 1] < base[0] - 0.05, "%s: loss did not fall: %g -> %g", tag, base[0],
                  base[STEPS - 1]);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct case_ *c = &cases[i];
        const int T = c->T;
        if (!data_parallel && T == 1 && c->P == 1)
            continue;
        snprintf(name, sizeof name, "np%d-T%d-P%d-stage%d-%zu", c->np, T, c->P, c->stage, i);
        char args[1024];
        snprintf(args, sizeof args, "%s %s", c->extra, family);
        train(dir, name, c->np, layout_tp(c->np, T, c->P, c->stage, args), got);
        testutil_assert_losses_close(base, got, STEPS, 1e-5,
                                     testutil_fmt("%s: %d ranks, T=%d, %d stages, ZeRO %d %s", tag,
                                                  c->np, T, c->P, c->stage, c->extra));
        const double want = val_loss(dir, "base"), v = val_loss(dir, name);
        ck_assert_msg(fabs(v - want) <= 1e-5 * want, "%s %s: val_loss %.9g, expected %.9g", tag,
                      name, v, want);
    }
}

START_TEST(gpt2_layouts_give_the_same_losses)
{
    same_losses_in_every_layout("pipe-gpt2", "", 1);
}
END_TEST

START_TEST(llama_layouts_give_the_same_losses)
{
    same_losses_in_every_layout("pipe-llama", LLAMA, 0);
}
END_TEST

START_TEST(tied_llama_layouts_give_the_same_losses)
{
    same_losses_in_every_layout("pipe-llama-tied", LLAMA " --set model.tie_word_embeddings=true",
                                0);
}
END_TEST

/* The memory report's rows carry (tp, pp, dp); the two stages' model
 * states differ as their partitions do, each near what its own stage's
 * parameters need; the metrics carry the bubble and the pipeline's bytes. */
/* In bf16 the slices' partial sums are rounded before they are added, so
 * tensor-parallel layouts follow the one-rank bf16 run within a bound,
 * not bit for bit (measured about 2e-5; the bound leaves room for other
 * kernels' rounding). Their activations travel in bf16. */
START_TEST(bf16_tensor_layouts_follow_one_rank)
{
    static const struct case_ cases[] = {
        {2, 1, 1, "", 2},
        {4, 2, 0, "", 2},
        {2, 1, 3, SEQUENCE, 2},
        {4, 1, 2, SEQUENCE " " LLAMA, 4},
    };
    char dir[512], name[128];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("pipe-bf16"));
    double base[STEPS], llama[STEPS], got[STEPS];
    train(dir, "base", 1, layout(1, 1, 0, "--set bf16.enabled=true"), base);
    train(dir, "llama", 1, layout(1, 1, 0, "--set bf16.enabled=true " LLAMA), llama);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct case_ *c = &cases[i];
        snprintf(name, sizeof name, "np%d-T%d-P%d-stage%d-%zu", c->np, c->T, c->P, c->stage, i);
        char args[1024];
        snprintf(args, sizeof args, "--set bf16.enabled=true %s", c->extra);
        train(dir, name, c->np, layout_tp(c->np, c->T, c->P, c->stage, args), got);
        testutil_assert_losses_close(strstr(c->extra, "llama") ? llama : base, got, STEPS, 2e-3,
                                     testutil_fmt("bf16: %d ranks, T=%d, %d stages, ZeRO %d %s",
                                                  c->np, c->T, c->P, c->stage, c->extra));
        const char *log = testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", name)));
        testutil_assert_computes_bf16(log, name);
    }
}
END_TEST

START_TEST(reports_show_the_layout)
{
    const char *dir = testutil_tmpdir("pipe-report");
    const char *report = testutil_path_in(dir, "mem.json");
    ck_assert_int_eq(testutil_train_micro(dir, "run", 4,
                                          testutil_fmt("%s --memory-report %s --print-layout",
                                                       layout(4, 2, 1, ""), report)),
                     0);
    const char *log = testutil_slurp(testutil_path_in(dir, "run.log"));
    ck_assert_msg(strstr(log, "layout: world 4 = tensor 1 x pipeline 2 x data 2"), "%s", log);
    ck_assert_msg(strstr(log, "stage 0: blocks 0-"), "%s", log);
    ck_assert_msg(strstr(log, "+ final norm and head"), "%s", log);
    ck_assert_msg(strstr(log, "rank (tp,pp,dp)"), "%s", log);
    ck_assert_msg(strstr(log, "3 (0,1,1)"), "%s", log);
    const char *json = testutil_slurp(report);
    ck_assert_msg(strstr(json, "\"rank\": 2, \"tp\": 0, \"pp\": 1, \"dp\": 0"), "%s", json);
    /* Each rank's model states within 5 % of its own stage's expectation. */
    for (int r = 0; r < 4; r++) {
        const char *row = strstr(json, testutil_fmt("\"rank\": %d,", r));
        ck_assert_ptr_nonnull(row);
        const char *e = strstr(row, "\"expected_model_states\": ");
        ck_assert_ptr_nonnull(e);
        const double expected = atof(e + strlen("\"expected_model_states\": "));
        double measured = 0.0;
        static const char *const keys[4] = {
            "\"params\": ", "\"grads\": ", "\"master_params\": ", "\"optimizer_states\": "};
        for (int k = 0; k < 4; k++) {
            const char *v = strstr(row, keys[k]);
            ck_assert_ptr_nonnull(v);
            measured += atof(v + strlen(keys[k]));
        }
        ck_assert_msg(expected > 0 && fabs(measured - expected) <= 0.05 * expected,
                      "rank %d: model states %g, expected %g", r, measured, expected);
    }
    const char *metrics = testutil_slurp(testutil_path_in(dir, "run.jsonl"));
    ck_assert_msg(strstr(metrics, "\"bubble\": "), "%s", metrics);
    const char *pp = strstr(metrics, "\"comm_bytes_by_axis\": {\"tp\": 0, \"pp\": ");
    ck_assert_msg(pp && atof(pp + strlen("\"comm_bytes_by_axis\": {\"tp\": 0, \"pp\": ")) > 0, "%s",
                  metrics);
}
END_TEST

/* Writes `name`'s checkpoints every 5 steps of 10 and its losses. */
static void train_saving(const char *dir, const char *name, int np, const char *args, double *full)
{
    train(dir, name, np,
          testutil_fmt("%s --set checkpoint.every=5 --set checkpoint.keep=5 "
                       "--set checkpoint.dir=%s/%s-ck",
                       args, dir, name),
          full);
}

/* A checkpoint stores each unit with the stage that held it, so any
 * layout resumes it: P=2 x D=2 into D=2 at ZeRO 3 and into P=4, D=2 into
 * P=2 x D=2, and a tied head's second copy is not stored twice; a
 * whole-tensor optimizer's per-tensor state (Adafactor) comes from each
 * tensor's stage. Export reads a pipeline's checkpoint as any other. */
START_TEST(checkpoints_resume_across_layouts)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("pipe-resume")); /* testutil's strings rotate */
    double full[STEPS];
    static const char *const families[2] = {"", LLAMA " --set model.tie_word_embeddings=true"};
    static const char *const names[2][5] = {
        {"p2-0", "p2-to-d2-0", "p2-to-p4-0", "d2-0", "d2-to-p2-0"},
        {"p2-1", "p2-to-d2-1", "p2-to-p4-1", "d2-1", "d2-to-p2-1"}};
    for (int k = 0; k < 2; k++) {
        const char *const *n = names[k], *family = families[k];
        train_saving(dir, n[0], 4, layout(4, 2, 1, family), full);
        testutil_resume_matches(dir, n[0], n[1], 2, layout(2, 1, 3, family), full);
        testutil_resume_matches(dir, n[0], n[2], 4, layout(4, 4, 0, family), full);
        train_saving(dir, n[3], 2, layout(2, 1, 3, family), full);
        testutil_resume_matches(dir, n[3], n[4], 4, layout(4, 2, 2, family), full);
    }
    /* interleaved chunks hold other blocks than the plain stages: v=2 into
     * v=1 and into one rank, and P=2 into v=2 */
    train_saving(dir, "v2", 2, layout(2, 2, 1, INTERLEAVED), full);
    testutil_resume_matches(dir, "v2", "v2-to-v1", 2, layout(2, 2, 1, ""), full);
    testutil_resume_matches(dir, "v2", "v2-to-d1", 1, layout(1, 1, 0, ""), full);
    train_saving(dir, "v1", 2, layout(2, 2, 2, ""), full);
    testutil_resume_matches(dir, "v1", "v1-to-v2", 4, layout(4, 2, 2, INTERLEAVED), full);
    const char *ada = " --set optimizer.type=Adafactor --set optimizer.params.betas=null "
                      "--set optimizer.params.eps=null";
    train_saving(dir, "ada", 4, layout(4, 2, 1, ada), full);
    testutil_resume_matches(dir, "ada", "ada-to-d1", 1, layout(1, 1, 0, ada), full);
    const char *log = testutil_path_in(dir, "export.log");
    ck_assert_msg(testutil_run(log, "%s export %s/p2-0-ck --out %s/p2.safetensors",
                               testutil_binary(), dir, dir) == 0,
                  "%s", testutil_slurp(log));
    ck_assert_int_eq(testutil_run(log, "%s export %s/d2-0-ck --out %s/d2.safetensors",
                                  testutil_binary(), dir, dir),
                     0);
    size_t a, b;
    free(testutil_read_file(testutil_path_in(dir, "p2.safetensors"), &a));
    free(testutil_read_file(testutil_path_in(dir, "d2.safetensors"), &b));
    ck_assert_msg(a == b && a > 0, "exports of %zu and %zu bytes", a, b);
}
END_TEST

/* A checkpoint of tensor-parallel slices is read by any layout, each
 * reader's runs of the whole model intersected with the writers' slices:
 * T=2 x P=2 into D=2 at ZeRO 3, T=4 and T=2 x D=2; D=2 into T=2 x P=2; a
 * Llama slice (grouped key-value heads, gated MLP, untied head) into one
 * rank. Its export is the whole model: a T=2 x D=2 run starting from that
 * file (model.init_from, read by the same runs) trains the losses a
 * one-rank run from it does. A whole-tensor optimizer's per-tensor
 * statistics are the whole tensors' and resume at another tensor-parallel
 * size. */
START_TEST(tensor_checkpoints_resume_across_layouts)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("tp-resume")); /* testutil's strings rotate */
    double full[STEPS];
    train_saving(dir, "t2p2", 4, layout_tp(4, 2, 2, 1, ""), full);
    testutil_resume_matches(dir, "t2p2", "t2p2-to-d2", 2, layout(2, 1, 3, ""), full);
    testutil_resume_matches(dir, "t2p2", "t2p2-to-t4", 4, layout_tp(4, 4, 1, 0, ""), full);
    testutil_resume_matches(dir, "t2p2", "t2p2-to-t2d2", 4, layout_tp(4, 2, 1, 2, ""), full);
    train_saving(dir, "d2", 2, layout(2, 1, 3, ""), full);
    testutil_resume_matches(dir, "d2", "d2-to-t2p2", 4, layout_tp(4, 2, 2, 3, ""), full);
    train_saving(dir, "llama", 4, layout_tp(4, 2, 1, 3, LLAMA), full);
    testutil_resume_matches(dir, "llama", "llama-to-d1", 1, layout(1, 1, 0, LLAMA), full);
    testutil_resume_matches(dir, "llama", "llama-to-t4", 4, layout_tp(4, 4, 1, 1, LLAMA), full);

    const char *log = testutil_path_in(dir, "export.log");
    ck_assert_msg(testutil_run(log,
                               "%s export %s/llama-ck/step-00000005 --out %s/llama.safetensors",
                               testutil_binary(), dir, dir) == 0,
                  "%s", testutil_slurp(log));
    double one[3], sliced[3];
    const char *from =
        testutil_fmt("--set model.init_from=%s/llama.safetensors --set run.steps=3", dir);
    testutil_train_micro_losses(dir, "from-export-1", 1,
                                testutil_fmt("%s %s", layout(1, 1, 0, LLAMA), from), one, 3);
    testutil_train_micro_losses(dir, "from-export-t2", 4,
                                testutil_fmt("%s %s", layout_tp(4, 2, 1, 1, LLAMA), from), sliced,
                                3);
    testutil_assert_losses_close(one, sliced, 3, 1e-5, "T=2 x D=2 from the step-5 export");
    ck_assert_msg(fabs(one[0] - full[0]) > 1e-3, "the export holds the initial weights");

    const char *ada = " --set optimizer.type=Adafactor --set optimizer.params.betas=null "
                      "--set optimizer.params.eps=null";
    train_saving(dir, "ada", 4, layout_tp(4, 2, 1, 1, ada), full);
    testutil_resume_matches(dir, "ada", "ada-to-t2p2", 4, layout_tp(4, 2, 2, 0, ada), full);
    testutil_resume_matches(dir, "ada", "ada-to-d2", 2, layout(2, 1, 1, ada), full);

    /* a slice size that is not the model's cut is named, not read */
    char meta[4200];
    snprintf(meta, sizeof meta, "%s/t2p2-ck/step-00000005/meta.json", dir);
    char *json = strdup(testutil_slurp(meta));
    char *at = strstr(json, "\"slice_numel\": 6448");
    ck_assert_msg(at != NULL, "%s", json);
    memcpy(at + strlen("\"slice_numel\": 644"), "0", 1);
    testutil_write_file(meta, json, strlen(json));
    free(json);
    ck_assert_int_ne(testutil_train_micro(dir, "bad-slice", 2,
                                          testutil_fmt("%s --set run.resume=%s/t2p2-ck/"
                                                       "step-00000005",
                                                       layout(2, 1, 1, ""), dir)),
                     0);
    const char *text = testutil_slurp(testutil_path_in(dir, "bad-slice.log"));
    ck_assert_msg(strstr(text, "unit 1 has 12704 elements in slices of 6440, the model's has "
                               "12704 in slices of 6448 over 2 tensor-parallel ranks"),
                  "%s", text);
}
END_TEST

/* The number after `key` in text (which must have it). */
static double number_after(const char *text, const char *key)
{
    const char *v = strstr(text, key);
    ck_assert_msg(v != NULL, "no %s in %s", key, text);
    return atof(v + strlen(key));
}

/* Under tensor parallelism each rank's measured parameters are its slice's
 * (the cut tensors' 1/T and the replicated ones whole, counted from the
 * table independently of the run), and its activations are below the
 * single-device baseline's, whose logits are whole. */
START_TEST(tensor_slices_hold_their_share)
{
    const char *dir = testutil_tmpdir("tp-report");
    const struct gpt2_config cfg = {
        .vocab_size = 256, .block_size = 32, .n_layer = 4, .n_head = 4, .n_embd = 32};
    struct param_table whole;
    ck_assert_int_eq(gpt2_table_build(&cfg, &whole), ZT_OK);
    for (int T = 2; T <= 4; T *= 2) {
        const char *report = testutil_path_in(dir, testutil_fmt("mem%d.json", T));
        ck_assert_int_eq(
            testutil_train_micro(
                dir, testutil_fmt("t%d", T), T,
                testutil_fmt(DEEP " --set tensor_parallel.size=%d --memory-report %s", T, report)),
            0);
        const char *json = testutil_slurp(report);
        const double baseline_acts =
            number_after(strstr(json, "\"baseline\""), "\"activations\": ");
        for (int r = 0; r < T; r++) {
            struct param_table slice;
            /* the vocabulary padded as the run pads it (to 512 at T=4) */
            ck_assert_int_eq(
                param_table_tp_slice(&whole, T, r, tp_vocab_padded(256, 128, T), &slice), ZT_OK);
            const char *row = strstr(json, testutil_fmt("\"rank\": %d,", r));
            ck_assert_ptr_nonnull(row);
            ck_assert_msg(number_after(row, "\"tp\": ") == r, "%s", row);
            /* ZeRO 0 at D = 1: the slice's units, each padded to the shard quantum */
            struct shard_partition part;
            ck_assert_int_eq(shard_partition_build(&slice, 1, &part), ZT_OK);
            ck_assert_double_eq(number_after(row, "\"params\": "),
                                (double)part.padded_total * sizeof(float));
            ck_assert_uint_lt(part.padded_total - slice.n_params, (size_t)slice.n_units * 64);
            shard_partition_free(&part);
            ck_assert_msg(number_after(row, "\"activations\": ") < baseline_acts, "%s", row);
            param_table_free(&slice);
        }
    }
    param_table_free(&whole);
}
END_TEST

/* Under 1F1B stage s of P keeps min(P - s, m) micro batches in flight, one
 * instance (slot) each. The slots of a stage hold one backward scratch
 * between them; a stage that is not the first gives each its own buffer
 * for the gradient it sends back (a boundary: B*T*C floats). Three
 * stages, m = 4 against m = 1: stage 0's three slots take no more
 * workspace than one, stage 1's two take one boundary more. */
static void workspace_by_rank(const char *dir, int accum, double out[3])
{
    const char *report = testutil_path_in(dir, testutil_fmt("ws%d.json", accum));
    ck_assert_int_eq(testutil_train_micro(dir, testutil_fmt("ws%d", accum), 3,
                                          testutil_fmt(DEEP " --dry-run --set pipeline.stages=3 "
                                                            "--set gradient_accumulation_steps=%d "
                                                            "--memory-report %s",
                                                       accum, report)),
                     0);
    const char *json = testutil_slurp(report);
    for (int r = 0; r < 3; r++) {
        const char *row = strstr(json, testutil_fmt("\"rank\": %d,", r));
        ck_assert_ptr_nonnull(row);
        out[r] = number_after(strstr(row, "\"peak\""), "\"workspace\": ");
    }
}

START_TEST(pipeline_slots_share_one_scratch)
{
    const char *dir = testutil_tmpdir("pipe-scratch");
    double one[3], four[3];
    workspace_by_rank(dir, 1, one);
    workspace_by_rank(dir, 4, four);
    ck_assert_double_eq(four[0], one[0]);
    ck_assert_double_eq(four[1] - one[1], 2.0 * 32 * 32 * sizeof(float)); /* B 2, T 32, C 32 */
    ck_assert_double_eq(four[2], one[2]);
}
END_TEST

/* Sequence parallelism keeps 1/T of the residual stream's token rows:
 * the measured activations of T=2 fall by what the rows a rank no longer
 * holds took, counted here from GPT-2's definition (per block: LayerNorm
 * 1's output, the attention's residual sum and LayerNorm 2's output, C
 * floats each, and the two norms' mean and 1/std; the embedding's and
 * each block's output; the final norm's mean and 1/std), and its
 * tensor-parallel traffic is that of T=2 without it (an allgather and a
 * reduce-scatter move what an allreduce does; the weight gradients' extra
 * gathers and the norms' sums add to it). */
START_TEST(sequence_parallel_keeps_a_share_of_the_rows)
{
    const char *dir = testutil_tmpdir("tp-sequence");
    const int L = 4, C = 32, B = 2, T = 32, tp = 2;
    const char *runs[2] = {"tp", "sp"};
    double acts[2], tp_bytes[2];
    for (int k = 0; k < 2; k++) {
        const char *report = testutil_path_in(dir, testutil_fmt("%s.json", runs[k]));
        ck_assert_int_eq(testutil_train_micro(dir, runs[k], 2,
                                              testutil_fmt(DEEP " --set tensor_parallel.size=%d "
                                                                "%s --memory-report %s",
                                                           tp, k ? SEQUENCE : "", report)),
                         0);
        const char *json = testutil_slurp(report);
        acts[k] = number_after(strstr(json, "\"rank\": 0,"), "\"activations\": ");
        const char *metrics =
            testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.jsonl", runs[k])));
        tp_bytes[k] = number_after(metrics, "\"comm_bytes_by_axis\": {\"tp\": ");
    }
    const double per_row = L * (3.0 * C + 4) + (1 + L) * C + 2;
    const double rows_gone = B * T - B * T / tp;
    ck_assert_msg(acts[0] - acts[1] == per_row * rows_gone * sizeof(float),
                  "activations %.0f without sequence parallelism, %.0f with it", acts[0], acts[1]);
    ck_assert_msg(tp_bytes[1] >= tp_bytes[0] && tp_bytes[1] < 2 * tp_bytes[0],
                  "tensor-parallel bytes %.0f, %.0f without sequence parallelism", tp_bytes[1],
                  tp_bytes[0]);
}
END_TEST

/* What a pipeline cannot run is refused on every rank with its reason. */
START_TEST(refusals_are_clear)
{
    const char *dir = testutil_tmpdir("pipe-refuse");
    ck_assert_int_ne(testutil_train_micro(dir, "deep", 2,
                                          "--set pipeline.stages=2 --set "
                                          "model.n_layer=1"),
                     0);
    const char *log = testutil_slurp(testutil_path_in(dir, "deep.log"));
    ck_assert_msg(strstr(log, "pipeline.stages") && strstr(log, "block"), "%s", log);
    ck_assert_int_ne(testutil_train_micro(dir, "odd", 3, "--set pipeline.stages=2"), 0);
    log = testutil_slurp(testutil_path_in(dir, "odd.log"));
    ck_assert_msg(strstr(log, "pipeline"), "%s", log);
    /* 2 heads cannot be cut over 4 tensor-parallel ranks */
    ck_assert_int_ne(testutil_train_micro(dir, "heads", 4, "--set tensor_parallel.size=4"), 0);
    log = testutil_slurp(testutil_path_in(dir, "heads.log"));
    ck_assert_msg(strstr(log, "tensor_parallel.size: 4 must divide model.n_head (2)"), "%s", log);
    /* interleaving needs whole rounds of P micro batches and equal chunks */
    static const struct {
        const char *name, *args, *want;
    } interleaved[] = {
        {"v-micro", "--set gradient_accumulation_steps=3 --set model.n_layer=4",
         "gradient_accumulation_steps (3 micro batches) must be a multiple of pipeline.stages (2)"},
        {"v-layers", "--set gradient_accumulation_steps=2 --set model.n_layer=6",
         "model.n_layer (6) must be divisible by pipeline.stages x pipeline.virtual_stages (2 x "
         "2)"},
        {"v-zero3",
         "--set gradient_accumulation_steps=2 --set model.n_layer=4 "
         "--set zero_optimization.stage=3",
         "zero_optimization.stage 3"},
    };
    for (size_t i = 0; i < sizeof interleaved / sizeof interleaved[0]; i++) {
        const int rc = testutil_train_micro(
            dir, interleaved[i].name, 2,
            testutil_fmt("--set pipeline.stages=2 " INTERLEAVED " %s", interleaved[i].args));
        ck_assert_int_eq(rc, 2);
        log = testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", interleaved[i].name)));
        ck_assert_msg(strstr(log, interleaved[i].want), "%s", log);
    }
}
END_TEST

/* ---- the schedules and partitions, serially ---- */

/* Every micro batch's forward comes before its backward, the backwards
 * run in micro-batch order, at most `slots` micro batches are in flight,
 * and slot k mod slots is free again when micro batch k starts. */
static void check_schedule(enum pipeline_schedule kind, int P, int s, int m, int v)
{
    struct pipeline_op ops[128];
    ck_assert_int_le(2 * m * v, 128);
    pipeline_schedule_ops(kind, P, s, m, v, ops);
    for (int j = 0; j < v; j++) {
        const int slots = pipeline_slots(kind, P, s, m, v, j);
        int fwd = 0, bwd = 0, busy[64] = {0};
        for (int i = 0; i < 2 * m * v; i++) {
            if (ops[i].chunk != j)
                continue;
            if (ops[i].backward) {
                ck_assert_int_eq(ops[i].micro, bwd++);
                ck_assert_int_lt(ops[i].micro, fwd);
                busy[ops[i].micro % slots] = 0;
            } else {
                ck_assert_int_eq(ops[i].micro, fwd++);
                ck_assert_msg(!busy[ops[i].micro % slots], "P %d stage %d m %d v %d: slot reused",
                              P, s, m, v);
                busy[ops[i].micro % slots] = 1;
            }
            ck_assert_int_le(fwd - bwd, slots);
        }
        ck_assert_int_eq(fwd, m);
        ck_assert_int_eq(bwd, m);
    }
}

/* The messages of one pass: virtual stage `vs` (chunk j on rank r is
 * j P + r) forward or backward of micro batch k. */
struct message {
    int backward, vs, micro;
};

static int same_message(struct message a, struct message b)
{
    return a.backward == b.backward && a.vs == b.vs && a.micro == b.micro;
}

/* Interleaved schedules run on P ranks as the pipeline runs them (a pass
 * waits for its input message; sends do not wait), and each rank receives
 * from each peer in the order that peer sent: so untagged messages pair
 * up, and no rank waits forever. */
static void check_interleaved_run(int P, int m, int v)
{
    enum { MAXP = 4, MAXOPS = 96 };
    struct pipeline_op ops[MAXP][MAXOPS];
    struct message sent[MAXP][MAXP][MAXOPS]; /* [from][to][n] */
    int n_sent[MAXP][MAXP] = {{0}}, n_got[MAXP][MAXP] = {{0}}, at[MAXP] = {0};
    const int n = 2 * m * v, S = P * v;
    ck_assert_int_le(n, MAXOPS);
    for (int r = 0; r < P; r++)
        pipeline_schedule_ops(PIPELINE_1F1B, P, r, m, v, ops[r]);
    for (int moved = 1; moved;) {
        moved = 0;
        for (int r = 0; r < P; r++)
            while (at[r] < n) {
                const struct pipeline_op op = ops[r][at[r]];
                const int vs = op.chunk * P + r;
                const int from_vs = op.backward ? vs + 1 : vs - 1,
                          to_vs = op.backward ? vs - 1 : vs + 1;
                if (from_vs >= 0 && from_vs < S) {
                    const int from = from_vs % P;
                    if (n_got[from][r] == n_sent[from][r])
                        break; /* waits for its input */
                    const struct message want = {op.backward, from_vs, op.micro};
                    ck_assert_msg(same_message(sent[from][r][n_got[from][r]], want),
                                  "P %d m %d v %d: rank %d receives out of order", P, m, v, r);
                    n_got[from][r]++;
                }
                if (to_vs >= 0 && to_vs < S) {
                    const int to = to_vs % P;
                    sent[r][to][n_sent[r][to]++] = (struct message){op.backward, vs, op.micro};
                }
                at[r]++;
                moved = 1;
            }
    }
    for (int r = 0; r < P; r++)
        ck_assert_msg(at[r] == n, "P %d m %d v %d: rank %d stuck at pass %d", P, m, v, r, at[r]);
}

START_TEST(schedules_keep_their_rules)
{
    for (int P = 1; P <= 5; P++)
        for (int s = 0; s < P; s++)
            for (int m = 1; m <= 9; m++) {
                check_schedule(PIPELINE_1F1B, P, s, m, 1);
                check_schedule(PIPELINE_GPIPE, P, s, m, 1);
                for (int v = 2; v <= 3 && P > 1 && m % P == 0; v++)
                    check_schedule(PIPELINE_1F1B, P, s, m, v);
            }
    for (int P = 2; P <= 4; P++)
        for (int v = 2; v <= 3; v++)
            for (int m = P; m <= 3 * P; m += P)
                check_interleaved_run(P, m, v);
    /* 1F1B's warm-up: P - s - 1 forwards, then forward and backward in
     * turn; the last stage alternates from the start. */
    struct pipeline_op ops[8];
    pipeline_schedule_ops(PIPELINE_1F1B, 3, 0, 4, 1, ops);
    static const int want0[8][2] = {{0, 0}, {0, 1}, {0, 2}, {1, 0}, {0, 3}, {1, 1}, {1, 2}, {1, 3}};
    for (int i = 0; i < 8; i++)
        ck_assert(ops[i].backward == want0[i][0] && ops[i].micro == want0[i][1]);
    pipeline_schedule_ops(PIPELINE_1F1B, 3, 2, 4, 1, ops);
    for (int i = 0; i < 8; i++)
        ck_assert(ops[i].backward == (i % 2) && ops[i].micro == i / 2);
    ck_assert_int_eq(pipeline_slots(PIPELINE_1F1B, 4, 0, 8, 1, 0), 4);
    ck_assert_int_eq(pipeline_slots(PIPELINE_1F1B, 4, 3, 8, 1, 0), 1);
    ck_assert_int_eq(pipeline_slots(PIPELINE_GPIPE, 4, 3, 8, 1, 0), 8);
    /* Interleaved, P 2, v 2, m 4 (Narayanan et al.'s figure): stage 0
     * warms up with (2 - 0 - 1) 2 + (2 - 1) 2 = 4 forwards, micro batches
     * 0, 1 on chunk 0 then on chunk 1; its first backward is micro batch 0
     * on chunk 1. */
    struct pipeline_op iops[16];
    pipeline_schedule_ops(PIPELINE_1F1B, 2, 0, 4, 2, iops);
    static const int want_i[6][3] = {{0, 0, 0}, {0, 1, 0}, {0, 0, 1},
                                     {0, 1, 1}, {0, 2, 0}, {1, 0, 1}};
    for (int i = 0; i < 6; i++)
        ck_assert_msg(iops[i].backward == want_i[i][0] && iops[i].micro == want_i[i][1] &&
                          iops[i].chunk == want_i[i][2],
                      "pass %d: %d %d %d", i, iops[i].backward, iops[i].micro, iops[i].chunk);
}
END_TEST

START_TEST(partitions_cover_the_blocks)
{
    struct param_table t;
    const struct gpt2_config cfg = {512, 32, 6, 2, 32};
    ck_assert_int_eq(gpt2_table_build(&cfg, &t), ZT_OK);
    for (int P = 1; P <= 6; P++)
        for (int method = 0; method < 2; method++) {
            int next = 0;
            size_t total = 0;
            for (int p = 0; p < P; p++) {
                struct model_stage s;
                ck_assert_int_eq(model_stage_of(&t, P, (enum model_partition)method, p, &s), ZT_OK);
                ck_assert_int_eq(s.first_block, next);
                ck_assert_int_gt(s.end_block, s.first_block);
                ck_assert_int_eq(s.first, p == 0);
                ck_assert_int_eq(s.last, p == P - 1);
                next = s.end_block;
                total += model_stage_params(&t, &s);
            }
            ck_assert_int_eq(next, 6);
            /* Every unit once, the tied embedding twice when P > 1. */
            ck_assert_uint_eq(total, t.n_params + (P > 1 ? param_table_unit_size(&t, 0) : 0));
        }
    /* Uniform: 6 blocks over 4 stages are 2, 2, 1, 1. Parameters over 3
     * stages: the embedding (512 x 32 + 32 x 32 = 17408, more than a
     * block's 12704) is on the first stage and its tied copy with the
     * final norm (64) on the last, so the middle takes 3 blocks: 2, 3, 1
     * (heaviest 42816 against 2, 2, 2's 42880). */
    struct model_stage s;
    ck_assert_int_eq(model_stage_of(&t, 4, MODEL_PARTITION_UNIFORM, 1, &s), ZT_OK);
    ck_assert(s.first_block == 2 && s.end_block == 4);
    ck_assert_int_eq(model_stage_of(&t, 3, MODEL_PARTITION_PARAMETERS, 1, &s), ZT_OK);
    ck_assert_msg(s.first_block == 2 && s.end_block == 5, "middle stage: blocks %d-%d",
                  s.first_block, s.end_block - 1);
    ck_assert_int_eq(model_stage_of(&t, 7, MODEL_PARTITION_UNIFORM, 0, &s), ZT_ERR_CONFIG);
    ck_assert_msg(strstr(zt_error_message(), "pipeline.stages 7"), "%s", zt_error_message());
    /* A stage's unit order: the last stage of two visits its blocks, the
     * final norm and the tied head. */
    ck_assert_int_eq(model_stage_of(&t, 2, MODEL_PARTITION_UNIFORM, 1, &s), ZT_OK);
    int order[16];
    int n = param_table_unit_order(&t, &s, MODEL_PASS_FORWARD, order, 16);
    static const int fwd[5] = {4, 5, 6, 7, 0};
    ck_assert_int_eq(n, 5);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(order[i], fwd[i]);
    n = param_table_unit_order(&t, &s, MODEL_PASS_BACKWARD, order, 16);
    static const int bwd[5] = {0, 7, 6, 5, 4};
    ck_assert_int_eq(n, 5);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(order[i], bwd[i]);
    /* Interleaved, 6 blocks as 3 stages x 2 chunks: stage 1 holds blocks
     * 1 and 4; its second chunk is a stage of block 4 alone; stage 2's
     * second chunk is the model's last. 4 stages do not divide 6 blocks. */
    ck_assert_int_eq(model_stage_interleaved(&t, 3, 2, 1, &s), ZT_OK);
    ck_assert_int_eq(model_stage_blocks(&s), 2);
    for (int b = 0; b < 6; b++)
        ck_assert_int_eq(model_stage_holds(&t, &s, 1 + b), b == 1 || b == 4);
    ck_assert(!model_stage_holds(&t, &s, 0) && !model_stage_holds(&t, &s, 7));
    const struct model_stage c1 = model_stage_chunk(&s, 1, 6);
    ck_assert(c1.first_block == 4 && c1.end_block == 5 && !c1.first && !c1.last);
    ck_assert_int_eq(model_stage_interleaved(&t, 3, 2, 2, &s), ZT_OK);
    ck_assert(model_stage_chunk(&s, 1, 6).last && !model_stage_chunk(&s, 0, 6).last);
    ck_assert(model_stage_holds(&t, &s, 7) && model_stage_holds(&t, &s, 0)); /* the tied head */
    ck_assert_int_eq(model_stage_interleaved(&t, 4, 2, 0, &s), ZT_ERR_CONFIG);
    param_table_free(&t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pipeline");
    TCase *serial = testutil_tcase(s, "schedules and partitions", 60);
    tcase_add_test(serial, schedules_keep_their_rules);
    tcase_add_test(serial, partitions_cover_the_blocks);
    TCase *tc = testutil_tcase(s, "layouts", 900);
    tcase_set_tags(tc, "layouts"); /* CTest's test_pipeline_layouts; the rest in _rest */
    tcase_add_test(tc, gpt2_layouts_give_the_same_losses);
    tcase_add_test(tc, llama_layouts_give_the_same_losses);
    tcase_add_test(tc, tied_llama_layouts_give_the_same_losses);
    TCase *checks = testutil_tcase(s, "layout checks", 900);
    tcase_add_test(checks, bf16_tensor_layouts_follow_one_rank);
    tcase_add_test(checks, pipeline_slots_share_one_scratch);
    tcase_add_test(checks, reports_show_the_layout);
    tcase_add_test(checks, refusals_are_clear);
    tcase_add_test(checks, tensor_slices_hold_their_share);
    tcase_add_test(checks, sequence_parallel_keeps_a_share_of_the_rows);
    TCase *resume = testutil_tcase(s, "resume", 600);
    tcase_add_test(resume, checkpoints_resume_across_layouts);
    TCase *tensor_resume = testutil_tcase(s, "tensor resume", 600);
    tcase_add_test(tensor_resume, tensor_checkpoints_resume_across_layouts);
    return testutil_run_suite(s, 0);
}
