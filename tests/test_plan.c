/* tests/test_plan.c — `zerotrain plan` against what it predicts.
 *
 * Measured: for layouts of 1 to 4 ranks (ZeRO stages, T, P and their
 * products, with and without checkpointing, sequence parallelism, HSDP and
 * hpZ, both families) a 3-step run writes its memory report and metrics; the plan of
 * the same layout must give, for every role, each category's peak and the
 * total exactly as the run's rank of that role measured them, and the
 * bytes rank 0 sent on each axis in a step exactly as its metrics counted.
 *
 * Published: the ZeRO paper's model-state memory of a 7.5 B model on 64
 * GPUs (Rajbhandari et al., 2020, figure 1), and Korthikanti et al.'s
 * activation memory per transformer layer (2022, equations 1, 2 and 4),
 * both from plan roles built by the planner.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/json.h"
#include "../config/config.h"
#include "../coordinator/session.h"
#include "../formats/hf_weights.h"
#include "../plan/plan.h"
#include "testutil.h"

/* ---- reading the files a run and a plan write ----------------------------- */

/* ---- measured layouts ----------------------------------------------------- */

struct layout_case {
    int np, tp, pp, stage, ckpt, sp, llama;
    int vp;               /* pipeline.virtual_stages; 0: 1 */
    int cp;               /* context_parallel.size; 0: no context parallelism */
    int shard_group, hpz; /* HSDP's G and hpZ's H; 0: off */
};

/* micro.yaml with 4 layers and 4 heads (so that T and P go to 4), a global
 * batch of 2 x 2 sequences per data-parallel rank */
#define MODEL "--set model.n_layer=4 --set model.n_head=4 --set run.steps=3 "
#define LLAMA "--set model.family=llama --set model.n_kv_head=2 --set model.intermediate_size=64 "

static const struct layout_case cases[] = {
    {1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0},
    {2, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0},
    {2, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0},
    {2, 1, 1, 2, 1, 0, 0, 0, 0, 0, 0},
    {2, 1, 1, 3, 0, 0, 0, 0, 0, 0, 0},
    {2, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0},
    {2, 1, 2, 0, 1, 0, 0, 0, 0, 0, 0},
    {3, 1, 3, 0, 0, 0, 0, 0, 0, 0, 0},
    {3, 1, 1, 3, 1, 0, 0, 0, 0, 0, 0},
    {4, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0},
    {4, 2, 1, 3, 1, 0, 0, 0, 0, 0, 0},
    {4, 1, 2, 2, 0, 0, 0, 0, 0, 0, 0},
    {4, 4, 1, 0, 1, 0, 0, 0, 0, 0, 0},
    {4, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0},
    {4, 2, 1, 1, 0, 1, 0, 0, 0, 0, 0},
    {4, 2, 2, 0, 1, 0, 1, 0, 0, 0, 0},
    {4, 2, 1, 3, 0, 0, 1, 0, 0, 0, 0},
    {2, 2, 1, 0, 0, 1, 1, 0, 0, 0, 0},
    {4, 1, 2, 1, 1, 1, 1, 0, 0, 0, 0},
    {4, 1, 2, 1, 0, 0, 0, 2, 0, 0, 0},
    {2, 1, 2, 0, 1, 0, 1, 2, 0, 0, 0},
    {2, 1, 1, 0, 0, 0, 0, 0, 2, 0, 0},
    {4, 2, 1, 3, 1, 0, 1, 0, 2, 0, 0},
    /* HSDP and hpZ: their groups' traffic */
    {4, 1, 1, 3, 0, 0, 0, 0, 0, 2, 0},
    {4, 1, 1, 2, 1, 0, 1, 0, 0, 2, 0},
    {4, 1, 1, 3, 0, 0, 0, 0, 0, 0, 2},
    {4, 1, 1, 3, 1, 0, 1, 0, 0, 0, 2},
};

static int context_of(const struct layout_case *c)
{
    return c->cp > 1 ? c->cp : 1;
}

static const char *case_args(const struct layout_case *c)
{
    char groups[128] = "";
    if (c->shard_group)
        snprintf(groups, sizeof groups, " --set zero_optimization.shard_group_size=%d",
                 c->shard_group);
    if (c->hpz)
        snprintf(groups, sizeof groups, " --set zero_optimization.zero_hpz_partition_size=%d",
                 c->hpz);
    return testutil_fmt(MODEL "%s--set tensor_parallel.size=%d --set pipeline.stages=%d --set "
                              "zero_optimization.stage=%d --set gradient_accumulation_steps=2 "
                              "--set activation_checkpointing.enabled=%s%s --set "
                              "pipeline.virtual_stages=%d --set context_parallel.size=%d%s",
                        c->llama ? LLAMA : "", c->tp, c->pp, c->stage, c->ckpt ? "true" : "false",
                        c->sp ? " --set tensor_parallel.sequence_parallel=true" : "",
                        c->vp ? c->vp : 1, context_of(c), groups);
}

/* The plan's entry for the case's layout (micro batch 2, 2 micro steps;
 * sequence parallelism as the case asks, which the plan tries at T > 1). */
static const struct json_value *planned_layout(const struct json_value *plan,
                                               const struct layout_case *c)
{
    const struct json_value *layouts = testutil_json_member(plan, "layouts");
    for (size_t i = 0; i < layouts->n; i++) {
        const struct json_value *l = &layouts->items[i];
        if (testutil_json_count(l, "tp") == (uint64_t)c->tp &&
            testutil_json_count(l, "pp") == (uint64_t)c->pp &&
            testutil_json_count(l, "zero_stage") == (uint64_t)c->stage &&
            testutil_json_count(l, "micro_batch") == 2 && testutil_json_count(l, "accum") == 2 &&
            testutil_json_count(l, "ckpt_every") == (uint64_t)c->ckpt &&
            testutil_json_count(l, "virtual_stages") == (uint64_t)(c->vp ? c->vp : 1) &&
            testutil_json_count(l, "cp") == (uint64_t)context_of(c) &&
            testutil_json_member(l, "sequence_parallel")->boolean == (c->sp && c->tp > 1))
            return l;
    }
    ck_abort_msg("the plan has no entry for the layout");
    return NULL;
}

/* The measured rank of a role: tensor- and data-parallel rank 0 of its
 * stage. */
static const struct json_value *measured_rank(const struct json_value *report, uint64_t stage)
{
    const struct json_value *ranks = testutil_json_member(report, "ranks");
    for (size_t i = 0; i < ranks->n; i++)
        if (testutil_json_count(&ranks->items[i], "tp") == 0 &&
            testutil_json_count(&ranks->items[i], "dp") == 0 &&
            testutil_json_count(&ranks->items[i], "pp") == stage)
            return &ranks->items[i];
    ck_abort_msg("the report has no rank of stage %llu", (unsigned long long)stage);
    return NULL;
}

static void assert_role(const char *what, const struct json_value *role,
                        const struct json_value *rank)
{
    const struct json_value *want = testutil_json_member(rank, "peak"),
                            *got = testutil_json_member(role, "peak");
    for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++) {
        const char *name = ledger_category_name((enum ledger_category)c);
        ck_assert_msg(testutil_json_count(got, name) == testutil_json_count(want, name),
                      "%s, stage %llu: %s planned %llu, measured %llu", what,
                      (unsigned long long)testutil_json_count(role, "stage"), name,
                      (unsigned long long)testutil_json_count(got, name),
                      (unsigned long long)testutil_json_count(want, name));
    }
    ck_assert_msg(testutil_json_count(role, "total_peak") ==
                      testutil_json_count(rank, "total_peak"),
                  "%s: total planned %llu, measured %llu", what,
                  (unsigned long long)testutil_json_count(role, "total_peak"),
                  (unsigned long long)testutil_json_count(rank, "total_peak"));
}

/* Rank 0's bytes per axis in the second step's metrics line. */
static void assert_traffic(const char *what, const char *metrics, const struct json_value *role)
{
    const char *text = testutil_slurp(metrics), *line = strstr(text, "\"loss\"");
    line = line ? strstr(line + 1, "\"loss\"") : NULL;
    ck_assert_msg(line != NULL, "%s: no second step in\n%s", what, text);
    while (line > text && line[-1] != '\n')
        line--;
    struct json_value m;
    const struct json_source src = {.path = metrics, .code = ZT_ERR_DATA, .max_depth = 8};
    ck_assert_int_eq(json_parse(&src, line, strcspn(line, "\n"), &m), ZT_OK);
    const struct json_value *axes = testutil_json_member(&m, "comm_bytes_by_axis"),
                            *bytes = testutil_json_member(role, "bytes");
    static const char *const run_axis[] = {"tp", "pp", "dp"}, *const plan_axis[] = {
                                                                  "tensor", "pipeline", "data"};
    for (int a = 0; a < 3; a++)
        ck_assert_msg(testutil_json_count(bytes, plan_axis[a]) ==
                          testutil_json_count(axes, run_axis[a]),
                      "%s: %s axis planned %llu bytes, sent %llu", what, plan_axis[a],
                      (unsigned long long)testutil_json_count(bytes, plan_axis[a]),
                      (unsigned long long)testutil_json_count(axes, run_axis[a]));
    json_free(&m);
}

START_TEST(plan_equals_the_measured_ledger_and_traffic)
{
    const struct layout_case *c = &cases[_i];
    char dir[4096], args[2048], what[128];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("plan"));
    snprintf(args, sizeof args, "%s", case_args(c));
    snprintf(what, sizeof what, "%d ranks T%d P%d v%d C%d stage %d%s%s%s%s%s", c->np, c->tp, c->pp,
             c->vp ? c->vp : 1, context_of(c), c->stage, c->ckpt ? " checkpointed" : "",
             c->sp ? " sequence-parallel" : "", c->llama ? " llama" : "",
             c->shard_group ? " HSDP" : "", c->hpz ? " hpZ" : "");
    ck_assert_msg(
        testutil_train_micro(dir, "run", c->np,
                             testutil_fmt("%s --memory-report %s/report.json", args, dir)) == 0,
        "%s: the run failed:\n%s", what, testutil_slurp(testutil_path_in(dir, "run.log")));
    const int D = c->np / (c->tp * c->pp * context_of(c));
    ck_assert_msg(testutil_run(testutil_path_in(dir, "plan.log"),
                               "%s plan %s --gpus %d --gpus-per-node %d --global-batch %d --all "
                               "--json %s/plan.json %s",
                               testutil_binary(), testutil_source_path("tests/data/micro.yaml"),
                               c->np, c->np, 4 * D, dir, args) == 0,
                  "%s: the plan failed:\n%s", what,
                  testutil_slurp(testutil_path_in(dir, "plan.log")));
    struct json_value plan, report;
    testutil_load_json(testutil_path_in(dir, "plan.json"), &plan);
    testutil_load_json(testutil_path_in(dir, "report.json"), &report);
    const struct json_value *roles = testutil_json_member(planned_layout(&plan, c), "roles");
    ck_assert_uint_eq(roles->n, c->pp < 3 ? (size_t)c->pp : 3);
    for (size_t k = 0; k < roles->n; k++)
        assert_role(what, &roles->items[k],
                    measured_rank(&report, testutil_json_count(&roles->items[k], "stage")));
    assert_traffic(what, testutil_path_in(dir, "run.jsonl"), &roles->items[0]);
    json_free(&plan);
    json_free(&report);
}
END_TEST

/* MFU is against the machine file's datasheet peak, the sustained share
 * against its sustained rate: for every layout their ratio is the file's
 * sustained / peak. A file that states no peak (calibrate's) has no MFU. */
START_TEST(mfu_is_against_the_datasheet_peak)
{
    static const struct {
        const char *machine;
        double ratio; /* sustained / peak for fp32, or 0: no peak stated */
    } machines[] = {
        {"h100-sxm", 46.9e12 / 67e12}, {"a100-80gb", 13.65e12 / 19.5e12}, {"cpu-this", 0.0}};
    for (size_t k = 0; k < sizeof machines / sizeof machines[0]; k++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", testutil_tmpdir("plan-mfu"));
        ck_assert_msg(testutil_run(testutil_path_in(dir, "plan.log"),
                                   "%s plan %s --gpus 8 --machine %s --global-batch 8 --all "
                                   "--json %s/plan.json " MODEL,
                                   testutil_binary(), testutil_source_path("tests/data/micro.yaml"),
                                   machines[k].machine, dir) == 0,
                      "%s: the plan failed:\n%s", machines[k].machine,
                      testutil_slurp(testutil_path_in(dir, "plan.log")));
        struct json_value plan;
        testutil_load_json(testutil_path_in(dir, "plan.json"), &plan);
        const struct json_value *layouts = testutil_json_member(&plan, "layouts");
        ck_assert_uint_gt(layouts->n, 0);
        for (size_t i = 0; i < layouts->n; i++) {
            const struct json_value *mfu = testutil_json_member(&layouts->items[i], "mfu"),
                                    *sust =
                                        testutil_json_member(&layouts->items[i], "sustained_share");
            ck_assert_int_eq(sust->type, JSON_REAL);
            ck_assert_double_gt(sust->real, 0.0);
            if (machines[k].ratio == 0.0) {
                ck_assert_int_eq(mfu->type, JSON_NULL);
                continue;
            }
            ck_assert_int_eq(mfu->type, JSON_REAL);
            ck_assert_double_eq_tol(mfu->real / sust->real, machines[k].ratio, 1e-12);
        }
        json_free(&plan);
    }
}
END_TEST

/* ---- published cases ------------------------------------------------------ */

static void load_config(const char *yaml, struct zt_config *out)
{
    const char *path = testutil_path_in(testutil_tmpdir("plan-config"), "model.yaml");
    testutil_write_file(path, yaml, strlen(yaml));
    ck_assert_msg(config_load(path, NULL, 0, out) == ZT_OK, "%s", zt_error_message());
}

static uint64_t model_states(const struct plan_role *r)
{
    return r->peak[LEDGER_PARAMS] + r->peak[LEDGER_GRADS] + r->peak[LEDGER_MASTER_PARAMS] +
           r->peak[LEDGER_OPTIMIZER_STATES];
}

/* ZeRO (Rajbhandari et al., 2020), figure 1: Psi = 7.5 B parameters, Adam
 * in mixed precision (K = 12), 64 GPUs: 120 GB of model states per GPU
 * without ZeRO, 31.4 GB under P_os (stage 1), 16.6 GB under P_os+g
 * (stage 2), 1.9 GB under P_os+g+p (stage 3). A GPT-2 shape of about that
 * size (36 layers of width 4096) planned at D = 64 holds per parameter
 * exactly the bytes the figure's formulas give (up to its shards'
 * padding), and scaled to 7.5 B they are the figure's numbers. */
START_TEST(zero_paper_model_states)
{
    struct zt_config cfg;
    load_config("model: {vocab_size: 50257, block_size: 1024, n_layer: 36, n_head: 32, "
                "n_embd: 4096}\n"
                "data: {train: /dev/null, seq_len: 1024}\nbf16: {enabled: true}\n"
                "optimizer: {type: AdamW}\n",
                &cfg);
    struct plan_model pm;
    ck_assert_int_eq(plan_model_of(&cfg, &pm), ZT_OK);
    static const double per_param[] = {16.0, 4.0 + 12.0 / 64, 2.0 + 14.0 / 64, 16.0 / 64};
    static const double figure_gb[] = {120.0, 31.4, 16.6, 1.9};
    for (int stage = 0; stage <= 3; stage++) {
        const struct plan_layout l = {
            .tp = 1, .pp = 1, .dp = 64, .zero_stage = stage, .micro_batch = 1, .accum = 1};
        struct plan_role r;
        ck_assert_int_eq(plan_role(&cfg, &l, 0, &r), ZT_OK);
        const double got = (double)model_states(&r) / (double)pm.n_params;
        ck_assert_msg(fabs(got / per_param[stage] - 1.0) < 1e-4,
                      "stage %d: %.6f bytes per parameter, ZeRO's formula %.6f", stage, got,
                      per_param[stage]);
        const double gb = round(got * 7.5e9 / 1e9 * 10.0) / 10.0;
        ck_assert_msg(fabs(gb - figure_gb[stage]) < 1e-9, "stage %d: %.1f GB at 7.5 B, figure %.1f",
                      stage, gb, figure_gb[stage]);
    }
    config_free(&cfg);
}
END_TEST

/* Activation bytes of one layer: the plan of two layers less that of one,
 * in the precision `prec` ("fp32", "bf16"), every layer checkpointed when
 * `ckpt` is 1 (the layout's interval). */
static double layer_activations_in(int s, int b, int h, int a, int t, int sp, const char *prec,
                                   int ckpt)
{
    char yaml[768];
    double bytes[2];
    for (int L = 1; L <= 2; L++) {
        snprintf(yaml, sizeof yaml,
                 "model: {vocab_size: 256, block_size: %d, n_layer: %d, n_head: %d, n_embd: %d}\n"
                 "data: {train: /dev/null, seq_len: %d}\ntrain_micro_batch_size_per_gpu: %d\n"
                 "tensor_parallel: {size: %d, sequence_parallel: %s}\n"
                 "bf16: {enabled: %s}\n",
                 s, L, a, h, s, b, t, sp ? "true" : "false",
                 strcmp(prec, "bf16") == 0 ? "true" : "false");
        struct zt_config cfg;
        load_config(yaml, &cfg);
        const struct plan_layout l = {.tp = t,
                                      .pp = 1,
                                      .dp = 1,
                                      .micro_batch = b,
                                      .accum = 1,
                                      .ckpt_every = ckpt,
                                      .sequence_parallel = sp};
        struct plan_role r;
        ck_assert_int_eq(plan_role(&cfg, &l, 0, &r), ZT_OK);
        bytes[L - 1] = (double)r.peak[LEDGER_ACTIVATIONS];
        config_free(&cfg);
    }
    return bytes[1] - bytes[0];
}

static double layer_activations(int s, int b, int h, int a, int t, int sp)
{
    return layer_activations_in(s, b, h, a, t, sp, "fp32", 0);
}

/* Korthikanti et al. (2022) count a layer's activations in 16-bit bytes:
 * 34 sbh + 5 as^2b without tensor parallelism (eq. 1), sbh (10 + 24/t +
 * 5as/(ht)) with it (eq. 2), and (34 sbh + 5 as^2 b)/t with sequence
 * parallelism too (eq. 4). Of the 34, 2 are the two dropout masks (a byte
 * each); of the 10 replicated, the same 2; 5 as^2b is attention's T x T
 * part (the scores, the softmax, its dropout mask), which a fused
 * attention does not keep: with it the formula is 34 sbh (their selective
 * recomputation's figure). zerotrain's attention is fused
 * (worker/cpu/attention.c): it keeps the output and one log-sum-exp per
 * query row and head, a s b floats. It has no dropout, keeps fp32 runs'
 * activations in fp32 (4 bytes an element, twice the paper's 2: the fp32
 * numbers here are 2 x (34 - 2) = 64 sbh bytes, not 34 sbh; bf16 runs:
 * korthikanti_bf16_activations) and keeps each norm's mean and reciprocal
 * deviation (2 floats per row, so 16 sb bytes per layer). So per layer,
 * exactly:
 *   (34 - 2)/2 = 16 elements sbh + asb                      (t = 1)
 *   (10 - 2)/2 = 4 + 24/2/t = 12/t elements sbh + asb/t     (t > 1)
 *   all of it over t                                       (sequence-par.)
 * each times 4 bytes, plus the norms' statistics: linear in s. */
START_TEST(korthikanti_activations_per_layer)
{
    static const int shapes[][4] = {
        {64, 1, 64, 4}, {128, 1, 64, 4}, {64, 2, 64, 4}, {64, 1, 128, 4}, {64, 1, 64, 8}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const double s = shapes[k][0], b = shapes[k][1], h = shapes[k][2], a = shapes[k][3];
        const double sbh = s * b * h, asb = a * s * b, stats = 16.0 * s * b;
        for (int t = 1; t <= 4; t *= 2)
            for (int sp = 0; sp <= (t > 1); sp++) {
                const double got = layer_activations((int)s, (int)b, (int)h, (int)a, t, sp);
                double want = 4.0 * ((4.0 + 12.0 / t) * sbh + asb / t) + stats;
                if (sp)
                    want = (4.0 * (16.0 * sbh + asb) + stats) / t;
                ck_assert_msg(got == want,
                              "s %g b %g h %g a %g t %d%s: %.0f bytes per layer, expected %.0f", s,
                              b, h, a, t, sp ? " sequence-parallel" : "", got, want);
            }
    }
}
END_TEST

/* In bf16 a layer's activations are the paper's 2-byte elements: exactly
 * 2 x 16 sbh bytes, with the log-sum-exps (4 asb) and the norms'
 * statistics (16 sb) in fp32 (t = 1; tensor parallelism computes in fp32
 * so far). A GPT-3 175B layer (h 12288, a 96, s 2048, b 1) is then within
 * 15 % of the paper's 34 sbh without recomputation (its 2 dropout masks
 * and no statistics: 6 % under), and with full recomputation holds its
 * block input alone, exactly 2 sbh bytes. */
START_TEST(korthikanti_bf16_activations)
{
    static const int shapes[][4] = {{64, 1, 64, 4}, {128, 2, 64, 8}, {64, 1, 128, 4}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const double s = shapes[k][0], b = shapes[k][1], h = shapes[k][2], a = shapes[k][3];
        const double got = layer_activations_in((int)s, (int)b, (int)h, (int)a, 1, 0, "bf16", 0);
        const double want = 2.0 * 16.0 * s * b * h + 4.0 * a * s * b + 16.0 * s * b;
        ck_assert_msg(got == want, "s %g b %g h %g a %g: %.0f bf16 bytes per layer, expected %.0f",
                      s, b, h, a, got, want);
    }
    const double s = 2048, b = 1, h = 12288, a = 96, sbh = s * b * h;
    const double full = layer_activations_in((int)s, (int)b, (int)h, (int)a, 1, 0, "bf16", 0);
    ck_assert_msg(fabs(full / (34.0 * sbh) - 1.0) < 0.15,
                  "GPT-3 layer: %.0f bytes, Korthikanti's 34 sbh = %.0f", full, 34.0 * sbh);
    const double ckpt = layer_activations_in((int)s, (int)b, (int)h, (int)a, 1, 0, "bf16", 1);
    ck_assert_msg(ckpt == 2.0 * sbh, "GPT-3 layer, full recomputation: %.0f bytes, 2 sbh = %.0f",
                  ckpt, 2.0 * sbh);
}
END_TEST

/* With fused attention a rank's activations grow linearly in the sequence
 * length: configs/small.yaml's model (6 layers, 6 heads, width 384) at
 * micro batch 1, the ledger's activation bytes per token at seq 256, 512,
 * 1024 and 2048 within 1 % of each other (with the T x T probabilities
 * kept they grew 3.5 times from 256 to 2048). */
START_TEST(activations_grow_linearly_in_seq)
{
    double per_token[4];
    for (int k = 0; k < 4; k++) {
        const int seq = 256 << k;
        char yaml[512];
        snprintf(yaml, sizeof yaml,
                 "model: {vocab_size: 256, block_size: %d, n_layer: 6, n_head: 6, n_embd: 384}\n"
                 "data: {train: /dev/null, seq_len: %d}\ntrain_micro_batch_size_per_gpu: 1\n",
                 seq, seq);
        struct zt_config cfg;
        load_config(yaml, &cfg);
        const struct plan_layout l = {.tp = 1, .pp = 1, .dp = 1, .micro_batch = 1, .accum = 1};
        struct plan_role r;
        ck_assert_int_eq(plan_role(&cfg, &l, 0, &r), ZT_OK);
        per_token[k] = (double)r.peak[LEDGER_ACTIVATIONS] / seq;
        config_free(&cfg);
        ck_assert_msg(fabs(per_token[k] / per_token[0] - 1.0) < 0.01,
                      "seq %d: %.1f activation bytes per token, seq 256: %.1f", seq, per_token[k],
                      per_token[0]);
    }
}
END_TEST

/* The cost model: ring traffic and latency as comm.h and plan.h state. */
/* A two-block GPT-2 of width 64: the config the role and cost tests plan. */
/* A small Llama whose linear weights are a 4-bit base under LoRA. */
static const char tiny_llama_qlora[] =
    "model: {family: llama, vocab_size: 256, block_size: 32, n_layer: 2, n_head: 4, "
    "n_embd: 64, intermediate_size: 128}\ndata: {train: /dev/null, seq_len: 32}\n"
    "bf16: {enabled: true}\nlora: {enabled: true, r: 4, target_modules: all-linear}\n"
    "quantization: {load_in_4bit: true}\n";

static const char tiny_gpt2[] = "model: {vocab_size: 256, block_size: 32, n_layer: 2, n_head: 4, "
                                "n_embd: 64}\ndata: {train: /dev/null, seq_len: 32}\n";

/* One block on a rank of a one-stage layout, 1000 trainable elements of
 * esz bytes, flops FLOPs a micro batch: the role the cost tests price. */
static struct plan_role one_block_role(size_t esz, double flops)
{
    return (struct plan_role){.first = 1,
                              .last = 1,
                              .blocks = 1,
                              .slots = 1,
                              .esz = esz,
                              .grad_esz = esz,
                              .act_esz = esz,
                              .trainable_padded = 1000,
                              .trainable_shard = 1000,
                              .padded = 1000,
                              .flops = flops};
}

START_TEST(cost_of_a_data_parallel_step)
{
    const struct machine m = {.device_memory = 1ull << 30,
                              .devices_per_node = 2,
                              .matmul_flops = {1e12, 1e12, 1e12},
                              .memory_bandwidth = 1e11,
                              .intra_node = {1e10, 1e-5},
                              .inter_node = {1e9, 1e-4}};
    const struct plan_model pm = {.layers = 1, .heads = 1, .kv_heads = 1, .embd = 8, .seq = 4};
    struct plan_role r = one_block_role(4, 1e9);
    const struct plan_layout l = {
        .tp = 1, .pp = 1, .dp = 4, .zero_stage = 0, .micro_batch = 1, .accum = 1};
    struct plan_time t;
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_FP32, &t);
    /* one allreduce of 4000 bytes over 4 ranks: 6000 bytes sent, 6 steps,
     * across nodes (4 ranks, 2 per node) */
    ck_assert_uint_eq(t.bytes[PLAN_AXIS_DATA], 6000);
    ck_assert_int_eq(t.inter_node[PLAN_AXIS_DATA], 1);
    ck_assert_double_eq_tol(t.comm[PLAN_AXIS_DATA], 6000 / 1e9 + 6 * 1e-4, 1e-15);
    ck_assert_double_eq_tol(t.compute, 1e9 / 1e12, 1e-15);
    ck_assert_double_eq_tol(
        t.step, t.compute + t.optimizer + t.comm[PLAN_AXIS_DATA] + t.grad_passes, 1e-15);
    /* the same on one node of 4 */
    plan_cost(&pm, &l, &r, &m, 4, MACHINE_FP32, &t);
    ck_assert_int_eq(t.inter_node[PLAN_AXIS_DATA], 0);
    /* 4 ranks share 2 devices: each computes at half the rate */
    ck_assert_double_eq_tol(t.compute, 2e9 / 1e12, 1e-15);
}
END_TEST

/* A CPU node of 2 cores as one device, its links at `bandwidth` and
 * `latency`: the machine the cost tests below plan on. */
static struct machine two_core_node(double bandwidth, double latency)
{
    return (struct machine){.device_memory = 1ull << 30,
                            .devices_per_node = 1,
                            .cores = 2,
                            .matmul_flops = {1e12, 1e12, 1e12},
                            .memory_bandwidth = 1e11,
                            .intra_node = {bandwidth, latency},
                            .inter_node = {bandwidth, latency}};
}

/* Work at a CPU core's own pace: an optimizer the machine states a rate
 * for is planned at it when that is slower than its traffic, one rank's
 * core shared when the node's ranks outnumber its cores; a micro batch's
 * 4-bit decodes at the stated rate, or as traffic without one. */
START_TEST(element_rates_on_a_core)
{
    struct machine m = two_core_node(1e10, 1e-5);
    m.n_updates = 1;
    m.updates[0] = (struct machine_update){"AdamW8bit", 1e6};
    m.dequantize_4bit = 1e9;
    struct plan_model pm = {.layers = 1, .heads = 1, .kv_heads = 1, .embd = 8, .seq = 4};
    strcpy(pm.optimizer, "AdamW8bit");
    struct plan_role r = one_block_role(2, 1e9);
    r.state_bytes = 6000;
    r.decoded_elems = 1000000;
    const struct plan_layout l = {
        .tp = 1, .pp = 1, .dp = 2, .zero_stage = 0, .micro_batch = 1, .accum = 1};
    struct plan_time t;
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_BF16, &t); /* two ranks, two cores */
    ck_assert_double_eq_tol(t.optimizer, 1000 / 1e6, 1e-15);
    const double matmul = 1e9 / (1e12 / 2); /* the device's rate over its 2 ranks */
    /* the backward's fp32 gradient view: zeroed, read and cast to bf16 */
    const double views = 1000 * (4 + 4 + 2) / (1e11 / 2);
    ck_assert_double_eq_tol(t.compute, matmul + 1e6 / 1e9 + views, 1e-15);
    /* stage 0: the norm reads the gradients and the zeroing writes them */
    ck_assert_double_eq_tol(t.grad_passes, 1000 * 2 * 2 / (1e11 / 2), 1e-15);
    plan_cost(&pm, &l, &r, &m, 4, MACHINE_BF16, &t); /* four ranks on two cores */
    ck_assert_double_eq_tol(t.optimizer, 2 * 1000 / 1e6, 1e-15);
    /* another optimizer, no decode rate: the traffic */
    strcpy(pm.optimizer, "AdamW");
    m.dequantize_4bit = 0;
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_BF16, &t);
    ck_assert_double_eq_tol(t.optimizer, 2.0 * 6000 / (1e11 / 2), 1e-15);
    ck_assert_double_eq_tol(t.compute, matmul + 1e6 * (0.5 + 2) / (1e11 / 2) + views, 1e-15);
}
END_TEST

/* Attention and the element-wise ops at the rates a machine states for
 * one core, on a rank's cores (the node's cores over its ranks, a share of
 * one beyond), the element-wise ops never faster than the rank's share of
 * the memory; without them attention runs at the GEMMs' rate and the rest
 * at the memory's. The attention FLOPs a role counts are the family's
 * 12 T C a token for each block, a third more when recomputed. */
START_TEST(attention_and_element_wise_ops_at_measured_rates)
{
    struct machine m = two_core_node(1e10, 1e-5);
    struct plan_model pm = {.layers = 1, .heads = 1, .kv_heads = 1, .embd = 8, .seq = 4};
    strcpy(pm.optimizer, "AdamW");
    struct plan_role r = one_block_role(4, 1e9);
    r.state_bytes = 12000;
    r.attention_flops = 4e8;
    r.act_pass_bytes = 1000000;
    const struct plan_layout l = {
        .tp = 1, .pp = 1, .dp = 2, .zero_stage = 0, .micro_batch = 1, .accum = 1};
    struct plan_time t;
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_FP32, &t); /* nothing stated */
    ck_assert_double_eq_tol(t.matmul, 1e9 / (1e12 / 2), 1e-15);
    ck_assert_double_eq_tol(t.attention, 4e8 / (1e12 / 2), 1e-15);
    ck_assert_double_eq_tol(t.compute - t.matmul, 3.0 * 1e6 / (1e11 / 2), 1e-15);
    m.attention_flops[MACHINE_FP32] = 1e10;
    m.elementwise_bandwidth = 1e9;
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_FP32, &t); /* a core each */
    ck_assert_double_eq_tol(t.attention, 4e8 / 1e10, 1e-15);
    ck_assert_double_eq_tol(t.matmul, 6e8 / (1e12 / 2) + 4e8 / 1e10, 1e-15);
    ck_assert_double_eq_tol(t.compute - t.matmul, 3.0 * 1e6 / 1e9, 1e-15);
    ck_assert_double_eq_tol(t.grad_passes, 1000 * 4 * 2 / 1e9, 1e-15);
    plan_cost(&pm, &l, &r, &m, 1, MACHINE_FP32, &t); /* one rank, both cores */
    ck_assert_double_eq_tol(t.attention, 4e8 / 2e10, 1e-15);
    ck_assert_double_eq_tol(t.compute - t.matmul, 3.0 * 1e6 / 2e9, 1e-15);
    plan_cost(&pm, &l, &r, &m, 4, MACHINE_FP32, &t); /* half a core each */
    ck_assert_double_eq_tol(t.attention, 4e8 / 5e9, 1e-15);
    m.elementwise_bandwidth = 1e12; /* bounded by the memory's share */
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_FP32, &t);
    ck_assert_double_eq_tol(t.compute - t.matmul, 3.0 * 1e6 / (1e11 / 2), 1e-15);
    /* another type's rate is not fp32's */
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_BF16, &t);
    ck_assert_double_eq_tol(t.attention, 4e8 / (1e12 / 2), 1e-15);

    /* a role's attention FLOPs: 12 T C a token a block, 16 recomputed */
    struct zt_config cfg;
    load_config(tiny_gpt2, &cfg);
    struct plan_layout g = {
        .tp = 1, .pp = 1, .dp = 1, .zero_stage = 0, .micro_batch = 2, .accum = 1};
    struct plan_role plain, again;
    ck_assert_int_eq(plan_role(&cfg, &g, 0, &plain), ZT_OK);
    cfg.activation_checkpointing.enabled = 1;
    g.ckpt_every = 1;
    ck_assert_int_eq(plan_role(&cfg, &g, 0, &again), ZT_OK);
    config_free(&cfg);
    ck_assert_double_eq_tol(plain.attention_flops, 2 * 12.0 * 32 * 64 * 2 * 32, 1e-6);
    ck_assert_double_eq_tol(again.attention_flops, 2 * 16.0 * 32 * 64 * 2 * 32, 1e-6);
}
END_TEST

/* model.init_from's load: each element read at the rate of its kind (a
 * tensor stored transposed at its own) and encoded at the encoder's on
 * the rank's core, the stores and the scales' scans at the rank's share
 * of the memory, the file off the disk at the rank's share (none once
 * cached), the NVMe master out and back; nothing predicted without the
 * rates or without a load. */
START_TEST(load_time_at_the_loaders_rates)
{
    struct machine m = two_core_node(1e10, 1e-5); /* memory: 1e11 bytes/s */
    struct plan_model pm = {.layers = 1, .heads = 1, .kv_heads = 1, .embd = 8, .seq = 4};
    strcpy(pm.optimizer, "AdamW");
    pm.weights_file_esz = 2.0;
    struct plan_role r = one_block_role(4, 1e9);
    r.load_work = (struct run_import_work){.read = 1000000, .transposed = 400000, .stored = 6e6};
    const struct plan_layout l = {
        .tp = 1, .pp = 1, .dp = 2, .zero_stage = 3, .micro_batch = 1, .accum = 1};
    struct plan_time t;
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_FP32, &t);
    ck_assert(isnan(t.load)); /* the machine states no loader */
    m.weights_read = 1e8;
    m.weights_read_transposed = 4e7;
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_FP32, &t);
    const double reads = 6e5 / 1e8 + 4e5 / 4e7;
    ck_assert_double_eq_tol(t.load, reads + 6e6 / 5e10, 1e-15);
    ck_assert_double_eq(t.load_cached, t.load);      /* no disk stated */
    plan_cost(&pm, &l, &r, &m, 4, MACHINE_FP32, &t); /* half a core, a quarter of the memory */
    ck_assert_double_eq_tol(t.load, 2 * reads + 6e6 / 2.5e10, 1e-15);
    r.load_work.encoded = 500000; /* a 4-bit base needs the encoder's rate */
    r.load_work.scanned = 250000;
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_FP32, &t);
    ck_assert(isnan(t.load));
    m.quantize_4bit = 5e7;
    m.nvme_read_bandwidth = 2e9;
    m.nvme_write_bandwidth = 1e9;
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_FP32, &t);
    const double cpu = reads + 5e5 / 5e7 + (6e6 + 4 * 2.5e5) / 5e10, disk = 1e6 * 2.0 / (2e9 / 2);
    ck_assert_double_eq_tol(t.load, cpu + disk, 1e-15);
    ck_assert_double_eq_tol(t.load_cached, cpu, 1e-15);
    r.load_work.master_nvme = 300000;
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_FP32, &t);
    ck_assert_double_eq_tol(t.load, cpu + disk + 3e5 * 4 * (1 / 5e8 + 1 / 1e9), 1e-15);
    ck_assert_double_eq_tol(t.load_cached, cpu + 3e5 * 4 * (1 / 5e8 + 1 / 1e9), 1e-15);
    r.load_work = (struct run_import_work){0};
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_FP32, &t);
    ck_assert(isnan(t.load)); /* no model.init_from */
}
END_TEST

/* The config `yaml` loading model.init_from (a path the plan never
 * opens), its table, and the roles of one rank and of a ZeRO-3 rank of
 * two. */
static void plan_import(const char *yaml, struct zt_config *cfg, struct param_table *t,
                        struct plan_role *one, struct plan_role *half)
{
    load_config(yaml, cfg);
    cfg->model.init_from = strdup("/nonexistent/weights");
    ck_assert_int_eq(session_build_table(cfg, t), ZT_OK);
    struct plan_layout g = {
        .tp = 1, .pp = 1, .dp = 1, .zero_stage = 0, .micro_batch = 1, .accum = 1};
    ck_assert_int_eq(plan_role(cfg, &g, 0, one), ZT_OK);
    g.dp = 2;
    g.zero_stage = 3;
    ck_assert_int_eq(plan_role(cfg, &g, 0, half), ZT_OK);
}

/* The import's work the planner times: one rank reads the whole file,
 * each tensor GPT-2 stores transposed once; a ZeRO-3 rank of two reads
 * its half, and a transposed tensor whole wherever it holds part of it. */
START_TEST(import_work_follows_the_held_ranges)
{
    struct zt_config cfg;
    struct param_table t;
    struct plan_role one, half;
    plan_import(tiny_gpt2, &cfg, &t, &one, &half);
    size_t transposed = 0;
    for (int k = 0; k < t.n_tensors; k++) {
        int tr = 0;
        ck_assert_int_eq(hf_weights_transposed(&t, k, &tr), ZT_OK);
        transposed += tr ? t.tensors[k].numel : 0;
    }
    ck_assert_uint_gt(transposed, 0);
    ck_assert_uint_eq(one.load_work.read, t.n_params);
    ck_assert_uint_eq(one.load_work.transposed, transposed);
    ck_assert_uint_eq(one.load_work.encoded + one.load_work.master_nvme, 0);
    /* fp32: the master is the parameters, stored once (4 read, 4 written);
     * a transposed tensor copied out of the cache */
    ck_assert_uint_eq(one.load_work.stored, t.n_params * 8 + transposed * 8);
    const size_t plain = half.load_work.read - half.load_work.transposed;
    ck_assert_uint_le(plain, (t.n_params - transposed) / 2 + 64 * 128);
    ck_assert_uint_ge(plain + half.load_work.transposed, t.n_params / 2);
    ck_assert_uint_lt(half.load_work.read, t.n_params);
    param_table_free(&t);
    config_free(&cfg);
}
END_TEST

/* A 4-bit base's encoding follows the image each rank keeps: one rank
 * encodes every block; of two under ZeRO-3 the busier encodes the codes
 * of its half (a block more at each end of a tensor it shares) and scans
 * the rest of the tensors it touches for their scales alone. */
START_TEST(a_4bit_base_is_encoded_where_the_rank_keeps_it)
{
    struct zt_config cfg;
    struct param_table t;
    struct plan_role one, half;
    plan_import(tiny_llama_qlora, &cfg, &t, &one, &half);
    size_t q4 = 0;
    for (int k = 0; k < t.n_tensors; k++)
        q4 += t.tensors[k].storage == PARAM_STORAGE_Q4 ? t.tensors[k].numel : 0;
    ck_assert_uint_eq(one.load_work.encoded, q4);
    ck_assert_uint_eq(one.load_work.scanned, 0);
    ck_assert_uint_ge(half.load_work.encoded, q4 / 2 - 64 * 2 * (size_t)t.n_tensors);
    ck_assert_uint_le(half.load_work.encoded, q4 / 2 + 64 * 2 * (size_t)t.n_tensors);
    ck_assert_uint_gt(half.load_work.scanned, 0);
    ck_assert_uint_lt(half.load_work.scanned, q4);
    param_table_free(&t);
    config_free(&cfg);
}
END_TEST

/* Plans the small model of `cfg_path` on `machine` (--gpus-per-node
 * per_node, 0: the default; --gpu-memory memory, 0: the machine's) into
 * *out, from the JSON it wrote. */
static void plan_json(const char *cfg_path, const char *machine, int gpus, int per_node,
                      uint64_t memory, struct json_value *out)
{
    char json[64];
    snprintf(json, sizeof json, "/tmp/zt_test_plan_%d.json", (int)getpid());
    struct plan_options o = {.config_path = cfg_path,
                             .gpus = gpus,
                             .per_node = per_node,
                             .gpu_memory = memory,
                             .machine = machine,
                             .top = 1,
                             .json_path = json};
    FILE *sink = fopen("/dev/null", "w");
    ck_assert_int_eq(plan_run(&o, sink), ZT_OK);
    fclose(sink);
    testutil_load_json(json, out);
    remove(json);
}

/* A layout's key, for finding it in another plan: T, P, v, D, ZeRO,
 * micro batch, checkpointing, sequence parallelism. */
static void layout_key(const struct json_value *l, uint64_t key[8])
{
    static const char *const names[7] = {"tp",         "pp",          "virtual_stages", "dp",
                                         "zero_stage", "micro_batch", "ckpt_every"};
    for (int k = 0; k < 7; k++)
        key[k] = testutil_json_count(l, names[k]);
    key[7] = (uint64_t)testutil_json_member(l, "sequence_parallel")->boolean;
}

/* The first role's `field` of the layout of `plan` with `key`. */
static double role_seconds(const struct json_value *plan, const uint64_t key[8], const char *field)
{
    const struct json_value *layouts = testutil_json_member(plan, "layouts");
    for (size_t i = 0; i < layouts->n; i++) {
        uint64_t k[8];
        layout_key(&layouts->items[i], k);
        if (memcmp(k, key, sizeof k) == 0)
            return testutil_json_member(
                       &testutil_json_member(&layouts->items[i], "roles")->items[0], field)
                ->real;
    }
    ck_abort_msg("no layout T%d P%d in the other plan", (int)key[0], (int)key[1]);
    return 0.0;
}

/* LOMO is planned under tensor parallelism and under a pipeline, always
 * with one micro batch a step (it keeps no gradient to accumulate into),
 * and with clipping its step computes, and zeroes and measures its
 * transient gradients, twice: the first forward and backward measure the
 * norm. */
START_TEST(lomo_is_planned_in_every_layout_with_its_passes)
{
    char cfg_path[2][64];
    struct json_value plan[2];
    for (int clip = 0; clip < 2; clip++) {
        snprintf(cfg_path[clip], sizeof cfg_path[clip], "/tmp/zt_test_plan_%d_%d.yaml",
                 (int)getpid(), clip);
        FILE *f = fopen(cfg_path[clip], "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f, "%soptimizer: {type: LOMO, params: {lr: 0.1}}\ngradient_clipping: %d\n",
                tiny_gpt2, clip);
        fclose(f);
        plan_json(cfg_path[clip], "a100-80gb", 4, 0, 0, &plan[clip]);
    }
    const struct json_value *layouts = testutil_json_member(&plan[1], "layouts");
    int tensor = 0, pipeline = 0;
    for (size_t i = 0; i < layouts->n; i++) {
        const struct json_value *l = &layouts->items[i];
        ck_assert_uint_eq(testutil_json_count(l, "accum"), 1);
        tensor |= testutil_json_count(l, "tp") > 1;
        pipeline |= testutil_json_count(l, "pp") > 1;
        uint64_t key[8];
        layout_key(l, key);
        static const char *const per_pass[] = {"compute_seconds", "grad_pass_seconds"};
        for (int k = 0; k < 2; k++) {
            const double twice = role_seconds(&plan[1], key, per_pass[k]),
                         once = role_seconds(&plan[0], key, per_pass[k]);
            ck_assert_msg(once > 0.0 && fabs(twice - 2.0 * once) <= 1e-12 * twice,
                          "layout %zu: %s %g with clipping, %g without", i, per_pass[k], twice,
                          once);
        }
    }
    ck_assert(tensor && pipeline);
    for (int clip = 0; clip < 2; clip++) {
        json_free(&plan[clip]);
        remove(cfg_path[clip]);
    }
}
END_TEST

/* A CPU machine (one device, several cores) puts a rank on each core of a
 * node unless --gpus-per-node says otherwise; a GPU machine one on each
 * device. Ranks that share a device share its memory: a layout whose
 * ranks each fit it alone does not fit two to a device. */
START_TEST(cpu_nodes_take_a_rank_per_core)
{
    char cfg_path[64];
    snprintf(cfg_path, sizeof cfg_path, "/tmp/zt_test_plan_%d.yaml", (int)getpid());
    FILE *f = fopen(cfg_path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(tiny_gpt2, f);
    fclose(f);
    const struct {
        const char *machine;
        int gpus, per_node, expect;
    } cases[] = {{"cpu-this", 2, 0, 2},
                 {"cpu-this", 3, 0, 2},
                 {"cpu-this", 2, 1, 1},
                 {"a100-80gb", 2, 0, 8}};
    struct json_value plan;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        plan_json(cfg_path, cases[i].machine, cases[i].gpus, cases[i].per_node, 0, &plan);
        ck_assert_msg(testutil_json_count(&plan, "per_node") == (uint64_t)cases[i].expect,
                      "%s --gpus %d: %llu per node", cases[i].machine, cases[i].gpus,
                      (unsigned long long)testutil_json_count(&plan, "per_node"));
        json_free(&plan);
    }
    /* the smallest peak of a rank, then a device of 1.5 x that (after the
     * allocator's margin): one rank a device fits it, two do not */
    plan_json(cfg_path, "cpu-this", 2, 1, 0, &plan);
    const struct json_value *layouts = testutil_json_member(&plan, "layouts");
    uint64_t least = UINT64_MAX;
    for (size_t i = 0; i < layouts->n; i++) {
        const uint64_t p = testutil_json_count(&layouts->items[i], "peak");
        least = p < least ? p : least;
    }
    json_free(&plan);
    const uint64_t memory = (uint64_t)(1.5 * (double)least / (1.0 - PLAN_ALLOCATOR_MARGIN));
    const int per_node[2] = {1, 2}, fits[2] = {1, 0};
    for (int k = 0; k < 2; k++) {
        plan_json(cfg_path, "cpu-this", 2, per_node[k], memory, &plan);
        layouts = testutil_json_member(&plan, "layouts");
        int any = 0;
        for (size_t i = 0; i < layouts->n; i++)
            any |= testutil_json_member(&layouts->items[i], "fits")->boolean;
        ck_assert_msg(any == fits[k], "%d ranks a device of %llu bytes: fits %d", per_node[k],
                      (unsigned long long)memory, any);
        json_free(&plan);
    }
    remove(cfg_path);
}
END_TEST

/* An NVMe offload's state files: the update waits for the node's reads
 * and writes together (every rank's file at each bandwidth), and the step
 * is never shorter than that; without the bandwidths the files are not
 * priced. On a node whose ranks
 * share the cores, the data-parallel traffic inside it is not hidden
 * behind the compute: the cores make its copies. */
START_TEST(nvme_files_and_shared_core_traffic)
{
    struct machine m = two_core_node(1e9, 1e-9);
    m.nvme_read_bandwidth = 1e9;
    m.nvme_write_bandwidth = 2e9;
    struct plan_model pm = {
        .layers = 1, .heads = 1, .kv_heads = 1, .embd = 8, .seq = 4, .prefetch_depth = 1};
    strcpy(pm.optimizer, "AdamW");
    struct plan_role r = {.first = 1,
                          .last = 1,
                          .blocks = 1,
                          .units = 4,
                          .slots = 1,
                          .esz = 4,
                          .grad_esz = 4,
                          .act_esz = 4,
                          .trainable_padded = 1000,
                          .trainable_shard = 500,
                          .padded = 1000,
                          .state_bytes = 6000,
                          .flops = 1e11,
                          .pass_bytes = 8000000,
                          .pass_bytes_forward = 4000000,
                          .nvme_bytes = 3000000000ull};
    const struct plan_layout l = {
        .tp = 1, .pp = 1, .dp = 2, .zero_stage = 3, .micro_batch = 1, .accum = 1};
    struct plan_time t;
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_FP32, &t);
    /* the update waits for the node's reads and writes: one disk, each
     * rank's I/O thread serving its window in order */
    const double reads = 2 * 3e9 / 1e9, writes = 2 * 3e9 / 2e9;
    ck_assert_double_eq_tol(t.optimizer, reads + writes, 1e-12);
    ck_assert_double_eq_tol(t.nvme, reads + writes, 1e-12);
    ck_assert_double_ge(t.step, reads + writes);
    ck_assert_double_eq_tol(t.exposed[PLAN_AXIS_DATA], t.comm[PLAN_AXIS_DATA], 1e-15);
    /* stage 3: each micro batch's shard added in, then the norm and the zeroing */
    ck_assert_double_eq_tol(t.grad_passes, 500 * 4 * (3 + 2) / (1e11 / 2), 1e-15);
    m.nvme_read_bandwidth = m.nvme_write_bandwidth = 0;
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_FP32, &t);
    ck_assert_double_eq(t.nvme, 0);
    ck_assert_double_lt(t.optimizer, 1e-3);
    /* one GPU per rank: the stage's gathers hide behind the compute */
    m.devices_per_node = 2;
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_FP32, &t);
    ck_assert_double_lt(t.exposed[PLAN_AXIS_DATA], 0.5 * t.comm[PLAN_AXIS_DATA]);
}
END_TEST

/* A link with measured collectives times each call at its type's bus
 * bandwidth for its message size (ZeRO-3's: one unit), interpolated in log
 * size and held below the smallest row; fp32's table for a type without
 * one; the bytes are the same as with the fit alone. */
START_TEST(measured_collectives_by_type_and_size)
{
    struct machine m = two_core_node(1e9, 1e-6);
    struct plan_model pm = {
        .layers = 1, .heads = 1, .kv_heads = 1, .embd = 8, .seq = 4, .prefetch_depth = 1};
    strcpy(pm.optimizer, "AdamW");
    struct plan_role r = {.first = 1,
                          .last = 1,
                          .blocks = 1,
                          .units = 4,
                          .slots = 1,
                          .esz = 2,
                          .grad_esz = 2,
                          .act_esz = 2,
                          .trainable_padded = 20000000,
                          .trainable_shard = 10000000,
                          .padded = 20000000,
                          .state_bytes = 6000,
                          .flops = 1e11,
                          .pass_bytes = 80000000,
                          .pass_bytes_forward = 40000000};
    const struct plan_layout l = {
        .tp = 1, .pp = 1, .dp = 2, .zero_stage = 3, .micro_batch = 1, .accum = 1};
    struct plan_time fit, measured;
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_BF16, &fit);
    /* the fit: bus bytes over the bandwidth and a latency a ring step */
    const double bus = 40e6 + 20e6 + 8; /* gathers, reduce-scatters, the norm's double */
    ck_assert_uint_eq(fit.bytes[PLAN_AXIS_DATA], (uint64_t)bus);
    ck_assert_double_eq_tol(fit.comm[PLAN_AXIS_DATA], bus / 1e9 + (1 + 1 + 2) * 1e-6, 1e-12);
    const struct machine_busbw_table fp32 = {2, {{1e6, {1e9, 2e9, 3e9}}, {1e8, {4e9, 5e9, 6e9}}}};
    const struct machine_busbw_table bf16 = {2, {{1e6, {1e8, 2e8, 3e8}}, {1e8, {4e8, 5e8, 6e8}}}};
    m.intra_node.busbw[MACHINE_FP32] = fp32;
    m.intra_node.busbw[MACHINE_BF16] = bf16;
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_BF16, &measured);
    ck_assert_uint_eq(measured.bytes[PLAN_AXIS_DATA], fit.bytes[PLAN_AXIS_DATA]);
    /* a unit is 1e7 bytes, halfway in log size: the rows' geometric mean */
    const double want = 40e6 / sqrt(3e8 * 6e8) + 20e6 / sqrt(2e8 * 5e8) + 8 / 1e9;
    ck_assert_double_eq_tol(measured.comm[PLAN_AXIS_DATA], want, 1e-12);
    /* fp16 has no table: fp32's */
    plan_cost(&pm, &l, &r, &m, 2, MACHINE_FP16, &measured);
    ck_assert_double_eq_tol(measured.comm[PLAN_AXIS_DATA],
                            40e6 / sqrt(3e9 * 6e9) + 20e6 / sqrt(2e9 * 5e9) + 8 / 1e9, 1e-12);
}
END_TEST

/* The element-wise ops' traffic is a micro batch's activations without
 * checkpointing: with checkpointing off, exactly what the role's
 * instance allocates for them (its ledger peak of activations less the
 * batch's tokens); with it on, the
 * same bytes, though the peak falls; and at a micro batch of 2, twice. */
START_TEST(element_wise_traffic_is_the_uncheckpointed_activations)
{
    struct zt_config cfg;
    load_config(tiny_gpt2, &cfg);
    struct plan_layout l = {
        .tp = 1, .pp = 1, .dp = 1, .zero_stage = 0, .micro_batch = 1, .accum = 1};
    struct plan_role off, on, two;
    ck_assert_int_eq(plan_role(&cfg, &l, 0, &off), ZT_OK);
    l.ckpt_every = 1;
    ck_assert_int_eq(plan_role(&cfg, &l, 0, &on), ZT_OK);
    l.ckpt_every = 0;
    l.micro_batch = 2;
    ck_assert_int_eq(plan_role(&cfg, &l, 0, &two), ZT_OK);
    config_free(&cfg);
    ck_assert_uint_gt(off.act_pass_bytes, 0);
    /* the peak holds the batch's input and target tokens beside them */
    ck_assert_uint_eq(off.act_pass_bytes + 2 * 32 * sizeof(int32_t), off.peak[LEDGER_ACTIVATIONS]);
    ck_assert_uint_eq(on.act_pass_bytes, off.act_pass_bytes);
    ck_assert_uint_lt(on.peak[LEDGER_ACTIVATIONS], off.peak[LEDGER_ACTIVATIONS]);
    ck_assert_uint_eq(two.act_pass_bytes, 2 * off.act_pass_bytes);
}
END_TEST

/* A LoRA run never forms its frozen base's weight gradients: the planned
 * FLOPs of a micro batch drop by 2 x the block's linear weights and 2 V C
 * (a frozen head) a token, and the adapters' 6 x their parameters come in;
 * 4-bit base weights are decoded at each acquire, forward and backward. */
START_TEST(lora_plans_no_frozen_weight_gradients)
{
    const int L = 2, C = 64, V = 256, T = 32, R = 4;
    const struct plan_layout l = {
        .tp = 1, .pp = 1, .dp = 1, .zero_stage = 0, .micro_batch = 1, .accum = 1};
    double flops[2];
    for (int lora = 0; lora < 2; lora++) {
        struct zt_config cfg;
        load_config(
            testutil_fmt("%s%s", tiny_gpt2,
                         lora ? "lora: {enabled: true, r: 4, target_modules: c_attn}\n" : ""),
            &cfg);
        struct plan_role r;
        ck_assert_int_eq(plan_role(&cfg, &l, 0, &r), ZT_OK);
        flops[lora] = r.flops;
        ck_assert_uint_eq(r.decoded_elems, 0);
        config_free(&cfg);
    }
    const double block_linear = 12.0 * C * C, adapters = 4.0 * R * C; /* r x C and 3C x r */
    const double want = T * (L * (2.0 * block_linear - 6.0 * adapters) + 2.0 * V * C);
    ck_assert_msg(fabs((flops[0] - flops[1]) / want - 1.0) < 1e-12,
                  "full %g, LoRA %g FLOPs: %g apart, want %g", flops[0], flops[1],
                  flops[0] - flops[1], want);

    struct zt_config cfg;
    load_config(tiny_llama_qlora, &cfg);
    struct plan_role r;
    ck_assert_int_eq(plan_role(&cfg, &l, 0, &r), ZT_OK);
    /* each block unit, its 4-bit linear weights and its two norms, once a pass */
    const size_t block = 4 * 64 * 64 + 3 * 64 * 128 + 2 * 64;
    ck_assert_uint_eq(r.decoded_elems, 2 * (size_t)L * block);
    config_free(&cfg);
}
END_TEST

/* The pipeline bubble: (P-1)/m of the busy time when every rank has its
 * cores, (P-1)/(v m) with v interleaved chunks, shrunk where the node's
 * ranks oversubscribe them (plan.h). */
START_TEST(bubble_shrinks_on_oversubscribed_cores)
{
    /* o = 1 is the 1F1B/GPipe bubble: busy (P-1)/m */
    ck_assert_double_eq_tol(plan_bubble(1.0, 4, 8, 1, 1.0), 3.0 / 8.0, 1e-15);
    ck_assert_double_eq_tol(plan_bubble(0.2, 2, 4, 1, 1.0), 0.2 * 1.0 / 4.0, 1e-15);
    ck_assert_double_eq(plan_bubble(1.0, 1, 4, 1, 1.0), 0.0);
    /* o = 2: 1 x (1 + 3/2) / 2 - 1 = 0.25; (1 + 3/8) / 2 < 1: all absorbed */
    ck_assert_double_eq_tol(plan_bubble(1.0, 4, 2, 1, 2.0), 0.25, 1e-15);
    ck_assert_double_eq(plan_bubble(1.0, 4, 8, 1, 2.0), 0.0);
    ck_assert_double_eq(plan_bubble(1.0, 2, 2, 1, 2.0), 0.0);
    /* o = 5/4 (5 ranks on 4 cores): (1 + 3/2) / 1.25 - 1 = 1 */
    ck_assert_double_eq_tol(plan_bubble(1.0, 4, 2, 1, 1.25), 1.0, 1e-15);
    /* interleaved: v chunks shrink it v times, (P-1)/(v m) */
    ck_assert_double_eq_tol(plan_bubble(1.0, 4, 8, 2, 1.0), 3.0 / 16.0, 1e-15);
    ck_assert_double_eq_tol(plan_bubble(1.0, 4, 8, 4, 1.0), 3.0 / 32.0, 1e-15);

    /* Through plan_cost: P4 x D1, 2 micro batches, 4 ranks on a CPU node
     * (one device). A rank computes 2 x 1e9 FLOPs at a quarter of 1e12:
     * 8 ms; the pipeline sends the norm's double (2 x 3/4 x 8 = 12 bytes
     * over 1e10 B/s, no latency): busy = 8e-3 + 1.2e-9 s. */
    struct machine m = {.device_memory = 1ull << 30,
                        .devices_per_node = 1,
                        .matmul_flops = {1e12, 1e12, 1e12},
                        .memory_bandwidth = 1e11,
                        .intra_node = {1e10, 0.0},
                        .inter_node = {1e10, 0.0}};
    const struct plan_model pm = {.layers = 4, .heads = 1, .kv_heads = 1, .embd = 8, .seq = 4};
    const struct plan_role r = {
        .blocks = 1, .slots = 1, .esz = 4, .grad_esz = 4, .act_esz = 4, .flops = 1e9};
    const struct plan_layout l = {
        .tp = 1, .pp = 4, .dp = 1, .zero_stage = 0, .micro_batch = 1, .accum = 2};
    const double busy = 8e-3 + 1.2e-9;
    struct plan_time t;
    static const struct {
        int cores;
        double bubble; /* in units of busy */
    } cases[] = {
        {0, 1.5},                     /* cores not stated: never oversubscribed, (4-1)/2 */
        {4, 1.5},                     /* one core per rank: o = 1 */
        {8, 1.5},                     /* two threads per rank, 8 of 8 cores: o = 1 */
        {2, 0.25},                    /* half a core per rank: o = 2 */
        {3, 2.5 / (4.0 / 3.0) - 1.0}, /* 4 ranks of one thread on 3 cores: o = 4/3 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        m.cores = cases[i].cores;
        plan_cost(&pm, &l, &r, &m, 4, MACHINE_FP32, &t);
        ck_assert_double_eq_tol(t.compute, 8e-3, 1e-15);
        ck_assert_double_eq_tol(t.exposed[PLAN_AXIS_PIPELINE], 1.2e-9, 1e-18);
        ck_assert_msg(fabs(t.bubble - cases[i].bubble * busy) <= 1e-15,
                      "cores %d: bubble %.17g, expected %.17g", cases[i].cores, t.bubble,
                      cases[i].bubble * busy);
        ck_assert_double_eq_tol(t.step, busy + t.bubble, 1e-15);
    }
    /* Interleaved, v = 2: the same stage's bubble halves, and a middle
     * stage sends each micro batch's boundary twice each way (once per
     * chunk) where one chunk sends it once. */
    m.cores = 0;
    struct plan_role rv = r;
    rv.boundary = 8;
    struct plan_time t1, t2, t0;
    plan_cost(&pm, &l, &rv, &m, 4, MACHINE_FP32, &t1);
    rv.chunks = 2;
    plan_cost(&pm, &l, &rv, &m, 4, MACHINE_FP32, &t2);
    rv.boundary = 0;
    plan_cost(&pm, &l, &rv, &m, 4, MACHINE_FP32, &t0); /* the norm's double alone */
    const double busy1 = t1.compute + t1.exposed[PLAN_AXIS_PIPELINE];
    const double busy2 = t2.compute + t2.exposed[PLAN_AXIS_PIPELINE];
    ck_assert_double_eq_tol(t1.bubble, 1.5 * busy1, 1e-15);
    ck_assert_double_eq_tol(t2.bubble, 0.75 * busy2, 1e-15);
    ck_assert_uint_eq(t1.bytes[PLAN_AXIS_PIPELINE] - t0.bytes[PLAN_AXIS_PIPELINE],
                      2 * 2 * 8 * 4); /* 2 micro batches x 2 directions x 8 floats */
    ck_assert_uint_eq(t2.bytes[PLAN_AXIS_PIPELINE] - t0.bytes[PLAN_AXIS_PIPELINE],
                      2 * (t1.bytes[PLAN_AXIS_PIPELINE] - t0.bytes[PLAN_AXIS_PIPELINE]));
}
END_TEST

/* GPT-3 175B (configs/gpt3-175b.yaml) on 1,024 A100s of 80 GB: T cannot
 * cut GPT-2's 50,257 vocabulary rows evenly, so without padding only T = 1
 * layouts are planned; padded (model.pad_vocab_size_to_multiple_of,
 * default 128) the best layout is tensor-parallel, faster than the best
 * unpadded one, fits, and interleaves its pipeline. */
static const struct json_value *best_gpt3_layout(const char *dir, const char *name,
                                                 const char *extra, struct json_value *plan)
{
    const char *log = testutil_path_in(dir, testutil_fmt("%s.log", name));
    ck_assert_msg(testutil_run(log,
                               "%s plan %s --gpus 1024 --machine a100-80gb --global-batch 1536 "
                               "--json %s/%s.json %s",
                               testutil_binary(), testutil_source_path("configs/gpt3-175b.yaml"),
                               dir, name, extra) == 0,
                  "%s", testutil_slurp(log));
    testutil_load_json(testutil_path_in(dir, testutil_fmt("%s.json", name)), plan);
    const struct json_value *layouts = testutil_json_member(plan, "layouts");
    ck_assert_uint_gt(layouts->n, 0);
    return &layouts->items[0];
}

START_TEST(gpt3_plans_tensor_parallel_layouts)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("plan-gpt3"));
    struct json_value padded, unpadded;
    const struct json_value *best = best_gpt3_layout(dir, "padded", "", &padded);
    const struct json_value *before =
        best_gpt3_layout(dir, "unpadded", "--set model.pad_vocab_size_to_multiple_of=1", &unpadded);
    ck_assert_uint_eq(testutil_json_count(before, "tp"), 1);
    ck_assert_uint_gt(testutil_json_count(best, "tp"), 1);
    ck_assert(testutil_json_member(best, "fits")->type == JSON_BOOL &&
              testutil_json_member(best, "fits")->boolean);
    const double t = testutil_json_member(best, "step_seconds")->real,
                 t1 = testutil_json_member(before, "step_seconds")->real;
    ck_assert_msg(t < t1, "padded best step %g s, unpadded %g s", t, t1);
    /* At 48 micro batches the best is pipelined and interleaved (as
     * Narayanan et al. ran GPT-3-sized models): the same layout with one
     * chunk per stage has v times the bubble and is slower. */
    ck_assert_uint_gt(testutil_json_count(best, "pp"), 1);
    ck_assert_uint_gt(testutil_json_count(best, "virtual_stages"), 1);
    const struct json_value *layouts = testutil_json_member(&padded, "layouts"), *plain = NULL;
    static const char *const same[] = {"tp",          "pp",    "dp",        "zero_stage",
                                       "micro_batch", "accum", "ckpt_every"};
    for (size_t i = 0; i < layouts->n && !plain; i++) {
        const struct json_value *l = &layouts->items[i];
        int match = testutil_json_count(l, "virtual_stages") == 1;
        for (size_t k = 0; k < sizeof same / sizeof same[0] && match; k++)
            match = testutil_json_count(l, same[k]) == testutil_json_count(best, same[k]);
        plain = match ? l : NULL;
    }
    ck_assert_ptr_nonnull(plain);
    ck_assert_double_gt(testutil_json_member(plain, "step_seconds")->real, t);
    json_free(&padded);
    json_free(&unpadded);
}
END_TEST

/* ---- the time model by shape and by overlap -------------------------------- */

/* A datasheet machine's GEMM rate: the roofline of its FLOPs in whole
 * 128-wide tiles at matmul_flops against its three matrices' bytes at the
 * memory bandwidth, computed here from the formula; so a small product
 * runs below a large one, and a width one over a tile wastes most of the
 * next tile. */
START_TEST(gemm_rate_by_shape)
{
    const struct machine m = {.devices_per_node = 1,
                              .matmul_flops = {20e12, 200e12, 200e12},
                              .memory_bandwidth = 2e12,
                              .gemm_tile = 128};
    static const double shapes[][3] = {{64, 64, 64},      {768, 768, 768},   {8192, 8192, 8192},
                                       {2048, 4096, 129}, {2048, 4096, 128}, {100, 12288, 4096}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const double M = shapes[i][0], K = shapes[i][1], N = shapes[i][2];
        const double tiled = 2.0 * ceil(M / 128) * 128 * K * ceil(N / 128) * 128 / 200e12;
        const double moved = 2.0 * (M * K + K * N + M * N) / 2e12;
        const double want = 2.0 * M * K * N / fmax(tiled, moved);
        const double got = plan_gemm_rate(&m, MACHINE_BF16, MACHINE_FORWARD, 1, M, K, N);
        ck_assert_msg(fabs(got / want - 1.0) < 1e-12, "%gx%gx%g: %g FLOP/s, expected %g", M, K, N,
                      got, want);
    }
    const double small = plan_gemm_rate(&m, MACHINE_BF16, MACHINE_FORWARD, 1, 64, 64, 64);
    const double large = plan_gemm_rate(&m, MACHINE_BF16, MACHINE_FORWARD, 1, 8192, 8192, 8192);
    ck_assert_double_eq_tol(large, 200e12, 1e-3);
    ck_assert_msg(small < 0.25 * large, "64^3: %g FLOP/s, 8192^3: %g", small, large);
    ck_assert_msg(plan_gemm_rate(&m, MACHINE_BF16, MACHINE_FORWARD, 1, 2048, 4096, 129) <
                      0.6 * plan_gemm_rate(&m, MACHINE_BF16, MACHINE_FORWARD, 1, 2048, 4096, 128),
                  "a width of 129 computes two tiles");
    /* no tile stated: no quantisation, only the roofline */
    struct machine flat = m;
    flat.gemm_tile = 0;
    ck_assert_double_eq_tol(
        plan_gemm_rate(&flat, MACHINE_BF16, MACHINE_FORWARD, 1, 2048, 4096, 129), 200e12, 1e-3);
}
END_TEST

/* A file calibrate wrote (configs/machines/cpu-this.yaml) gives back each
 * measured layer's own rate, product by product, to a rank whose threads
 * (cores / ranks) are the row's; a shape between measured ones a rate
 * within theirs; a rank on half a core half its core's rate; and a type
 * without a table of its own, fp32's (what a run computes it in). */
START_TEST(calibrated_gemm_shapes_are_reproduced)
{
    struct machine m;
    ck_assert_int_eq(machine_load(testutil_source_path("configs/machines/cpu-this.yaml"), &m),
                     ZT_OK);
    const struct machine_gemm_table *g = &m.gemm_rates[MACHINE_FP32];
    ck_assert_int_ge(g->n, 4);
    ck_assert_int_ge(m.cores, 1);
    double lo = INFINITY, hi = 0.0;
    for (int i = 0; i < g->n; i++) {
        const struct machine_gemm_rate *r = &g->row[i];
        const int per_node = m.cores / r->threads;
        for (int k = 0; k < MACHINE_PRODUCTS; k++) {
            const double got =
                plan_gemm_rate(&m, MACHINE_FP32, k, per_node, r->rows, r->in, r->out);
            ck_assert_msg(fabs(got / r->flops[k] - 1.0) < 1e-9,
                          "%d threads %dx%dx%d product %d: %g FLOP/s, measured %g", r->threads,
                          r->rows, r->in, r->out, k, got, r->flops[k]);
            if (r->threads == 1) {
                lo = fmin(lo, r->flops[k]);
                hi = fmax(hi, r->flops[k]);
                const double crowded =
                    plan_gemm_rate(&m, MACHINE_FP32, k, 2 * m.cores, r->rows, r->in, r->out);
                ck_assert_double_eq_tol(crowded, 0.5 * r->flops[k], 1e-9 * r->flops[k]);
            }
        }
    }
    const double between =
        plan_gemm_rate(&m, MACHINE_FP32, MACHINE_INPUT_GRAD, m.cores, 700, 1000, 3000);
    ck_assert_double_le(between, hi);
    ck_assert_double_ge(between, lo);
    struct machine no_bf16 = m;
    no_bf16.gemm_rates[MACHINE_BF16].n = 0;
    ck_assert_double_eq(
        plan_gemm_rate(&no_bf16, MACHINE_BF16, MACHINE_FORWARD, m.cores, 512, 768, 768),
        plan_gemm_rate(&m, MACHINE_FP32, MACHINE_FORWARD, m.cores, 512, 768, 768));
}
END_TEST

/* The pass walk of plan_pass_exposed against the closed forms of equal
 * units: a gather no longer than a unit's compute is hidden but the
 * first; a longer one exposes the difference at every later unit; on
 * demand (depth 0) every gather waits; a reduce-scatter after the last
 * unit is exposed. */
START_TEST(overlap_is_bounded_by_the_compute)
{
    const int n = 10;
    ck_assert_double_eq_tol(plan_pass_exposed(n, 1.0, 0.5, 0.0, 1), 0.5, 1e-12);
    ck_assert_double_eq_tol(plan_pass_exposed(n, 1.0, 3.0, 0.0, 1), 3.0 + (n - 1) * 2.0, 1e-12);
    ck_assert_double_eq_tol(plan_pass_exposed(n, 1.0, 3.0, 0.0, 4), 3.0 + (n - 1) * 2.0, 1e-12);
    ck_assert_double_eq_tol(plan_pass_exposed(n, 1.0, 0.5, 0.0, 0), n * 0.5, 1e-12);
    ck_assert_double_eq_tol(plan_pass_exposed(n, 1.0, 0.0, 0.5, 1), 0.5, 1e-12);
    /* the link carries both: gather + reduce-scatter per unit against 1 s */
    ck_assert_double_eq_tol(plan_pass_exposed(n, 1.0, 0.4, 0.4, 1), 0.4 + 0.4, 1e-12);
    const double both = plan_pass_exposed(n, 1.0, 0.8, 0.8, 1);
    ck_assert_msg(both >= (n * 1.6 - n * 1.0) && both <= n * 1.6,
                  "gather and reduce-scatter of 0.8 s each over 1 s units: %g s exposed", both);
    /* a longer pass scales the walk's steady state */
    ck_assert_double_eq_tol(plan_pass_exposed(2 * PLAN_MAX_PASS_UNITS, 1.0, 3.0, 0.0, 1),
                            2.0 * (3.0 + (PLAN_MAX_PASS_UNITS - 1) * 2.0), 1e-6);
}
END_TEST

/* Through plan_cost: ZeRO-3 on 8 ranks of two nodes. On a fast network
 * its traffic hides behind the compute but the first gather and the last
 * reduce-scatter of each micro batch's passes (and stage 2's regather of
 * the updated parameters, after the step); on a slow one (the same
 * machine with a thousandth of the bandwidth) the gathers outlast the
 * compute and the step grows by nearly all of the traffic. ZeRO-2's
 * reduce-scatters likewise against the backward. */
START_TEST(zero_traffic_exposed_when_it_outlasts_the_compute)
{
    struct machine m = {.devices_per_node = 4,
                        .matmul_flops = {1e12, 1e12, 1e12},
                        .memory_bandwidth = 1e12,
                        .intra_node = {1e11, 1e-6},
                        .inter_node = {1e10, 1e-6}};
    const struct plan_model pm = {
        .layers = 8, .heads = 1, .kv_heads = 1, .embd = 8, .seq = 4, .prefetch_depth = 1};
    const struct plan_role r = {.first = 1,
                                .last = 1,
                                .blocks = 8,
                                .units = 10,
                                .slots = 1,
                                .esz = 2,
                                .grad_esz = 2,
                                .act_esz = 2,
                                .trainable_padded = 100000000,
                                .padded = 100000000,
                                .pass_bytes = 400000000,
                                .flops = 1e12};
    for (int stage = 2; stage <= 3; stage++) {
        const struct plan_layout l = {
            .tp = 1, .pp = 1, .dp = 8, .zero_stage = stage, .micro_batch = 1, .accum = 2};
        struct plan_time fast, slow;
        m.inter_node.bandwidth = 1e10;
        plan_cost(&pm, &l, &r, &m, 4, MACHINE_BF16, &fast);
        m.inter_node.bandwidth = 1e7;
        plan_cost(&pm, &l, &r, &m, 4, MACHINE_BF16, &slow);
        const int D = PLAN_AXIS_DATA;
        ck_assert_msg(fast.exposed[D] < 0.5 * fast.comm[D],
                      "stage %d, fast link: %g s of %g s exposed", stage, fast.exposed[D],
                      fast.comm[D]);
        ck_assert_msg(fast.exposed[D] > 0.0, "stage %d: the last reduce-scatter is exposed", stage);
        ck_assert_msg(slow.exposed[D] >= slow.comm[D] - slow.compute - 1e-9,
                      "stage %d, slow link: %g s exposed of %g s traffic beside %g s compute",
                      stage, slow.exposed[D], slow.comm[D], slow.compute);
        ck_assert_msg(slow.step > 10.0 * fast.step, "stage %d: step %g s slow, %g s fast", stage,
                      slow.step, fast.step);
        ck_assert_double_eq_tol(slow.step, slow.compute + slow.optimizer + slow.exposed[D], 1e-9);
    }
}
END_TEST

/* Sequence parallelism is a candidate, not the config's: a plan of
 * tests/data/micro.yaml on 2 GPUs lists T = 2 with and without it, and with
 * it the activations a tensor-parallel rank holds are smaller. */
START_TEST(sequence_parallelism_is_tried)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("plan-sp"));
    const char *log = testutil_path_in(dir, "plan.log");
    ck_assert_msg(testutil_run(log, "%s plan %s --gpus 2 --all --json %s/plan.json %s",
                               testutil_binary(), testutil_source_path("tests/data/micro.yaml"),
                               dir, MODEL) == 0,
                  "%s", testutil_slurp(log));
    struct json_value plan;
    testutil_load_json(testutil_path_in(dir, "plan.json"), &plan);
    const struct json_value *layouts = testutil_json_member(&plan, "layouts");
    uint64_t act[2] = {0, 0};
    for (size_t i = 0; i < layouts->n; i++) {
        const struct json_value *l = &layouts->items[i];
        if (testutil_json_count(l, "tp") != 2 || testutil_json_count(l, "zero_stage") != 0 ||
            testutil_json_count(l, "micro_batch") != 2 || testutil_json_count(l, "ckpt_every") != 0)
            continue;
        const int sp = testutil_json_member(l, "sequence_parallel")->boolean;
        act[sp] = testutil_json_count(
            testutil_json_member(&testutil_json_member(l, "roles")->items[0], "peak"),
            "activations");
    }
    ck_assert_msg(act[0] > 0 && act[1] > 0, "T2 layouts with and without SP: %llu, %llu bytes",
                  (unsigned long long)act[0], (unsigned long long)act[1]);
    ck_assert_msg(act[1] < act[0], "activations with SP %llu bytes, without %llu",
                  (unsigned long long)act[1], (unsigned long long)act[0]);
    ck_assert_ptr_nonnull(strstr(testutil_slurp(log), "rank    T SP    P"));
    json_free(&plan);
}
END_TEST

/* --keep KEY holds a searched setting at the config's value: planned on 8
 * GPUs with all five kept, every layout has micro.yaml's ZeRO stage,
 * checkpointing, sequence parallelism, chunks and micro batch, where the
 * free search varies each of them; a key the search does not vary exits
 * 2 naming the ones it does. */
START_TEST(keep_holds_the_configs_settings)
{
    static const struct {
        const char *field;
        int config;       /* the value --set gives below */
        const char *axis; /* where it applies: layouts with this size over 1; NULL: all */
    } kept[] = {{"zero_stage", 2, "dp"},
                {"ckpt_every", 1, NULL},
                {"sequence_parallel", 1, "tp"},
                {"virtual_stages", 2, "pp"},
                {"micro_batch", 2, NULL}};
    const char *const keys = "--keep zero_optimization.stage --keep activation_checkpointing "
                             "--keep tensor_parallel.sequence_parallel --keep "
                             "pipeline.virtual_stages --keep train_micro_batch_size_per_gpu";
    const char *const sets =
        "--set zero_optimization.stage=2 --set "
        "activation_checkpointing.enabled=true --set "
        "tensor_parallel.sequence_parallel=true --set pipeline.virtual_stages=2";
    for (int keep = 0; keep <= 1; keep++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", testutil_tmpdir("plan-keep"));
        const char *log = testutil_path_in(dir, "plan.log");
        ck_assert_msg(testutil_run(log,
                                   "%s plan %s --gpus 8 --global-batch 16 --all --json "
                                   "%s/plan.json %s %s %s",
                                   testutil_binary(), testutil_source_path("tests/data/micro.yaml"),
                                   dir, MODEL, sets, keep ? keys : "") == 0,
                      "%s", testutil_slurp(log));
        struct json_value plan;
        testutil_load_json(testutil_path_in(dir, "plan.json"), &plan);
        const struct json_value *layouts = testutil_json_member(&plan, "layouts");
        ck_assert_uint_gt(layouts->n, 0);
        for (size_t k = 0; k < sizeof kept / sizeof kept[0]; k++) {
            size_t other = 0, applies = 0;
            for (size_t i = 0; i < layouts->n; i++) {
                const struct json_value *l = &layouts->items[i],
                                        *v = testutil_json_member(l, kept[k].field);
                const int value = v->type == JSON_BOOL ? v->boolean : (int)v->magnitude;
                const int has_axis = !kept[k].axis || testutil_json_count(l, kept[k].axis) > 1;
                applies += has_axis;
                other += has_axis && value != kept[k].config;
            }
            ck_assert_uint_gt(applies, 0);
            if (keep)
                ck_assert_msg(other == 0, "%s: %zu layouts not at the config's %d", kept[k].field,
                              other, kept[k].config);
            else
                ck_assert_msg(other > 0, "%s: the free search never varies it", kept[k].field);
        }
        if (keep)
            ck_assert_ptr_nonnull(strstr(testutil_slurp(log), "kept at the config's: "
                                                              "zero_optimization.stage 2"));
        json_free(&plan);
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("plan-keep-bad"));
    const char *log = testutil_path_in(dir, "plan.log");
    ck_assert_int_eq(testutil_run(log, "%s plan %s --gpus 8 --keep optimizer.type",
                                  testutil_binary(), testutil_source_path("tests/data/micro.yaml")),
                     2);
    ck_assert_ptr_nonnull(strstr(testutil_slurp(log), "--keep optimizer.type: not a setting the "
                                                      "plan searches (zero_optimization.stage, "));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plan");
    TCase *tc = testutil_tcase(s, "published", 300);
    tcase_add_test(tc, zero_paper_model_states);
    tcase_add_test(tc, korthikanti_activations_per_layer);
    tcase_add_test(tc, activations_grow_linearly_in_seq);
    tcase_add_test(tc, korthikanti_bf16_activations);
    tcase_add_test(tc, cost_of_a_data_parallel_step);
    tcase_add_test(tc, element_rates_on_a_core);
    tcase_add_test(tc, attention_and_element_wise_ops_at_measured_rates);
    tcase_add_test(tc, load_time_at_the_loaders_rates);
    tcase_add_test(tc, import_work_follows_the_held_ranges);
    tcase_add_test(tc, a_4bit_base_is_encoded_where_the_rank_keeps_it);
    tcase_add_test(tc, cpu_nodes_take_a_rank_per_core);
    tcase_add_test(tc, lomo_is_planned_in_every_layout_with_its_passes);
    tcase_add_test(tc, nvme_files_and_shared_core_traffic);
    tcase_add_test(tc, measured_collectives_by_type_and_size);
    tcase_add_test(tc, element_wise_traffic_is_the_uncheckpointed_activations);
    tcase_add_test(tc, lora_plans_no_frozen_weight_gradients);
    tcase_add_test(tc, mfu_is_against_the_datasheet_peak);
    tcase_add_test(tc, bubble_shrinks_on_oversubscribed_cores);
    tcase_add_test(tc, gpt3_plans_tensor_parallel_layouts);
    tcase_add_test(tc, gemm_rate_by_shape);
    tcase_add_test(tc, calibrated_gemm_shapes_are_reproduced);
    tcase_add_test(tc, overlap_is_bounded_by_the_compute);
    tcase_add_test(tc, zero_traffic_exposed_when_it_outlasts_the_compute);
    tcase_add_test(tc, sequence_parallelism_is_tried);
    tcase_add_test(tc, keep_holds_the_configs_settings);
    tc = testutil_tcase(s, "measured", 900);
    tcase_add_loop_test(tc, plan_equals_the_measured_ledger_and_traffic, 0,
                        (int)(sizeof cases / sizeof cases[0]));
    return testutil_run_suite(s, 0);
}
