/* tests/test_optim_reference.c — the optimizers through the ZeRO engine
 * against an independent float64 reference (run at 1 and 2 ranks).
 *
 * tests/data/optimizer_reference.bin is written by
 * scripts/reference/optimizer_reference.py: for each optimizer case, the
 * loss before each of 5 updates and the full parameter vector after each,
 * starting from the parameters of tests/data/gpt2_reference.bin and always
 * training on its batch (see tests/data/README.md for both layouts). Here
 * the GPT-2 model of that file trains through a real engine in every ZeRO
 * stage at the MPI world size, fp32, every rank on the same full batch (so
 * the gradient the engine averages over ranks is the single-rank one), and
 * after each update every tensor must match the reference.
 *
 * The key bias. Softmax is invariant to adding one constant to a row of
 * attention scores, so the loss does not depend on the key part of
 * attn.qkv.bias and its exact gradient is zero. Computed, it is rounding
 * noise (about 1e-18 in float64, larger in float32), and optimizers that
 * normalise the gradient (Adam's m / sqrt(v), Lion's sign, Adafactor's
 * g / sqrt(v)) turn noise into a full step of random sign. The reference
 * uses the exact zero; the test gives the engine the same by zeroing
 * those gradient elements as each block's gradients complete (a wrapper
 * around the engine's hooks), so every element can be compared. */
#include <check.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "shard/shard.h"
#include "testutil.h"
#include "worker/backend.h"
#include "worker/model.h"

#define N_UPDATES  5
#define NAME_BYTES 24

/* The cases this suite runs: every case of the reference script, with the
 * hyperparameters it used (its docstring has the algorithms), and LOMO
 * against the script's plain SGD. */
struct optim_case {
    const char *name;      /* as optimizer_reference.bin spells it */
    const char *optimizer; /* optimizer_find() */
    struct optimizer_hparams hp;
    /* 8-bit states: a value a float32 rounding away from the midpoint of
     * two codes may be stored as either (the float64 reference came within
     * 7e-7 of a code step of one), and that element then moves by one code
     * step's worth of update: compare_params allows it in up to 1% of a
     * tensor's elements, within 3e-3 of the tensor's largest value. */
    int code_ties;
};

static const struct optim_case cases[] = {
    {"adamw",
     "AdamW",
     {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f},
     0},
    {"adam",
     "Adam",
     {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f},
     0},
    {"sgd", "SGD", {.lr = 0.1f, .momentum = 0.0f, .dampening = 0.0f, .weight_decay = 0.1f}, 0},
    {"sgd_momentum",
     "SGD",
     {.lr = 0.1f, .momentum = 0.9f, .dampening = 0.1f, .nesterov = 0, .weight_decay = 0.1f},
     0},
    {"sgd_nesterov",
     "SGD",
     {.lr = 0.1f, .momentum = 0.9f, .dampening = 0.0f, .nesterov = 1, .weight_decay = 0.1f},
     0},
    {"lion", "Lion", {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.99f, .weight_decay = 0.1f}, 0},
    {"adafactor",
     "Adafactor",
     {.lr = 1e-2f,
      .eps = 1e-30f,
      .eps2 = 1e-3f,
      .clip_threshold = 1.0f,
      .decay_rate = -0.8f,
      .weight_decay = 0.1f,
      .scale_parameter = 1},
     0},
    {"adafactor_beta1",
     "Adafactor",
     {.lr = 1e-2f,
      .eps = 1e-30f,
      .eps2 = 1e-3f,
      .clip_threshold = 1.0f,
      .decay_rate = -0.8f,
      .beta1 = 0.9f,
      .weight_decay = 0.1f,
      .scale_parameter = 1},
     0},
    {"adamw8bit",
     "AdamW8bit",
     {.lr = 1e-2f,
      .beta1 = 0.9f,
      .beta2 = 0.999f,
      .eps = 1e-8f,
      .weight_decay = 0.1f,
      .min_8bit_size = 256},
     1},
    /* LOMO's update is the reference's plain SGD, applied in the backward */
    {"sgd", "LOMO", {.lr = 0.1f, .weight_decay = 0.1f}, 0},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static void read_exact(FILE *f, void *dst, size_t bytes)
{
    ck_assert_msg(fread(dst, 1, bytes, f) == bytes, "reference file truncated");
}

/* What the suite takes from gpt2_reference.bin. */
struct model_ref {
    struct gpt2_config cfg;
    int B, T, n_params;
    int32_t *inputs, *targets;
    float *params;
};

static void model_ref_load(struct model_ref *r)
{
    const char *path = testutil_source_path("tests/data/gpt2_reference.bin");
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char magic[8];
    int32_t hdr[8];
    read_exact(f, magic, 8);
    ck_assert(memcmp(magic, "ZTREF001", 8) == 0);
    read_exact(f, hdr, sizeof hdr);
    r->cfg = (struct gpt2_config){hdr[0], hdr[1], hdr[2], hdr[3], hdr[4]};
    r->B = hdr[5];
    r->T = hdr[6];
    r->n_params = hdr[7];
    const size_t bt = (size_t)r->B * r->T, np = (size_t)r->n_params;
    r->inputs = malloc(bt * sizeof(int32_t));
    r->targets = malloc(bt * sizeof(int32_t));
    r->params = malloc(np * sizeof(float));
    ck_assert(r->inputs && r->targets && r->params);
    read_exact(f, r->inputs, bt * sizeof(int32_t));
    read_exact(f, r->targets, bt * sizeof(int32_t));
    read_exact(f, r->params, np * sizeof(float));
    fclose(f); /* the loss, gradients and AdamW losses are test_model's */
}

static void model_ref_free(struct model_ref *r)
{
    free(r->inputs);
    free(r->targets);
    free(r->params);
}

/* One case of optimizer_reference.bin. */
struct optim_ref {
    float losses[N_UPDATES];
    float *after; /* [N_UPDATES][n_params] */
};

/* Finds case `name` in optimizer_reference.bin; fails the test if absent. */
static void optim_ref_load(const char *name, int n_params, struct optim_ref *out)
{
    const char *path = testutil_source_path("tests/data/optimizer_reference.bin");
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char magic[8];
    int32_t hdr[2];
    read_exact(f, magic, 8);
    ck_assert(memcmp(magic, "ZTOPT001", 8) == 0);
    read_exact(f, hdr, sizeof hdr);
    ck_assert_int_eq(hdr[0], n_params);
    const size_t block = (size_t)N_UPDATES * n_params;
    out->after = malloc(block * sizeof(float));
    ck_assert_ptr_nonnull(out->after);
    for (int k = 0; k < hdr[1]; k++) {
        char case_name[NAME_BYTES + 1] = {0};
        int32_t n_updates;
        read_exact(f, case_name, NAME_BYTES);
        read_exact(f, &n_updates, sizeof n_updates);
        ck_assert_int_eq(n_updates, N_UPDATES);
        read_exact(f, out->losses, sizeof out->losses);
        read_exact(f, out->after, block * sizeof(float));
        if (strcmp(case_name, name) == 0) {
            fclose(f);
            return;
        }
    }
    fclose(f);
    ck_abort_msg("case %s is not in %s", name, path);
}

/* The engine's hooks, with the key part of every attn.qkv.bias gradient set
 * to exact zero when a block's gradients are complete (see the top of the
 * file). */
struct key_bias_hooks {
    const struct model_unit_hooks *inner;
    const struct param_table *table;
    float *unit_grads[MODEL_MAX_UNITS]; /* what grads_acquire lent, per unit */
};

static zt_status kb_pass_begin(void *ctx, enum model_pass pass)
{
    const struct key_bias_hooks *k = ctx;
    return k->inner->pass_begin(k->inner->ctx, pass);
}

static zt_status kb_pass_end(void *ctx, enum model_pass pass)
{
    const struct key_bias_hooks *k = ctx;
    return k->inner->pass_end(k->inner->ctx, pass);
}

static zt_status kb_params_acquire(void *ctx, int unit, const void **params)
{
    const struct key_bias_hooks *k = ctx;
    return k->inner->params_acquire(k->inner->ctx, unit, params);
}

static zt_status kb_params_release(void *ctx, int unit)
{
    const struct key_bias_hooks *k = ctx;
    return k->inner->params_release(k->inner->ctx, unit);
}

static zt_status kb_grads_acquire(void *ctx, int unit, float **grads)
{
    struct key_bias_hooks *k = ctx;
    zt_status st = k->inner->grads_acquire(k->inner->ctx, unit, grads);
    k->unit_grads[unit] = st == ZT_OK ? *grads : NULL;
    return st;
}

static zt_status kb_grads_done(void *ctx, int unit)
{
    struct key_bias_hooks *k = ctx;
    const struct param_table *t = k->table;
    const size_t C = (size_t)gpt2_config_of(t).n_embd;
    for (int i = 0; i < t->n_tensors; i++) {
        const struct param_tensor *p = &t->tensors[i];
        const char *suffix = strstr(p->name, "attn.qkv.bias");
        if (p->unit != unit || !suffix || strcmp(suffix, "attn.qkv.bias") != 0)
            continue;
        ck_assert_ptr_nonnull(k->unit_grads[unit]);
        memset(k->unit_grads[unit] + (p->offset - t->unit_offset[unit]) + C, 0, C * sizeof(float));
    }
    return k->inner->grads_done(k->inner->ctx, unit);
}

static struct model_unit_hooks key_bias_hooks(struct key_bias_hooks *k)
{
    return (struct model_unit_hooks){.ctx = k,
                                     .pass_begin = kb_pass_begin,
                                     .pass_end = kb_pass_end,
                                     .params_acquire = kb_params_acquire,
                                     .params_release = kb_params_release,
                                     .grads_acquire = kb_grads_acquire,
                                     .grads_done = kb_grads_done};
}

/* Every tensor of `got` within 1e-4 of its largest |reference value|
 * (with code_ties, all but 1% of it, and those within 3e-3). */
static void compare_params(const struct param_table *t, const float *got, const float *want,
                           const char *name, int stage, int update, int code_ties)
{
    for (int k = 0; k < t->n_tensors; k++) {
        const struct param_tensor *p = &t->tensors[k];
        double scale = 0.0;
        size_t off = 0;
        for (size_t i = p->offset; i < p->offset + p->numel; i++)
            scale = fmax(scale, fabs((double)want[i]));
        for (size_t i = p->offset; i < p->offset + p->numel; i++) {
            const double diff = fabs((double)got[i] - want[i]);
            if (code_ties && diff > 1e-4 * scale && diff <= 3e-3 * scale) {
                ck_assert_msg(++off * 100 <= p->numel,
                              "%s stage %d update %d: %s: %zu of %zu elements beyond 1e-4 of "
                              "its largest value",
                              name, stage, update, p->name, off, p->numel);
                continue;
            }
            ck_assert_msg(diff <= 1e-4 * scale,
                          "%s stage %d update %d: %s[%zu] is %.9g, the reference %.9g (diff "
                          "%.3e, tolerance %.3e)",
                          name, stage, update, p->name, i - p->offset, got[i], want[i], diff,
                          1e-4 * scale);
        }
    }
}

/* Five updates of case c in ZeRO stage `stage` against the reference. */
static void run_stage(const struct optim_case *c, const struct model_ref *mr,
                      const struct optim_ref * or, int stage)
{
    struct param_table table;
    ck_assert_int_eq(gpt2_table_build(&mr->cfg, &table), ZT_OK);
    ck_assert_int_eq((int)table.n_params, mr->n_params);
    struct ledger ledger;
    struct compute_backend be;
    ledger_init(&ledger, 0);
    ck_assert_int_eq(compute_backend_open("cpu", -1, &ledger, &be), ZT_OK);
    struct comm_config cc = {.memory = be.host_memory ? COMM_MEMORY_HOST : COMM_MEMORY_CUDA};
    struct comm *comm;
    ck_assert_int_eq(comm_create(&cc, &comm), ZT_OK);

    const struct optimizer_ops *opt = optimizer_find(c->optimizer);
    ck_assert_ptr_nonnull(opt);
    struct optimizer_hparams hp = c->hp;
    const struct shard_engine_config ec = {
        .stage = stage,
        .world = comm_size(comm),
        .rank = comm_rank(comm),
        .clip = 0.0,
        .seed = 1,
        .reduce_bucket_size = 1000, /* a few units per bucket */
        .prefetch_depth = 1,
        .precision = ZT_F32,
        .optimizer = opt,
        .optimizer_states = optimizer_state_count(opt, &hp),
        .hparams = hp,
    };
    struct shard_engine e;
    ck_assert_int_eq(shard_engine_create(&ec, &table, comm, &be, &e), ZT_OK);
    for (int u = 0; u < table.n_units; u++) {
        size_t lo, hi;
        shard_engine_held_range(&e, u, &lo, &hi);
        if (hi > lo)
            ck_assert_int_eq(shard_engine_set_state(&e, SHARD_STATE_MASTER, u, lo, hi,
                                                    mr->params + table.unit_offset[u] + lo),
                             ZT_OK);
    }
    ck_assert_int_eq(shard_engine_params_from_master(&e), ZT_OK);

    struct model *model;
    ck_assert_int_eq(model_create(&table, &be, mr->B, mr->T, 0, &model), ZT_OK);
    struct key_bias_hooks kb = {.inner = &e.hooks, .table = &table};
    const struct model_unit_hooks hooks = key_bias_hooks(&kb);
    float *got = malloc(table.n_params * sizeof(float));
    ck_assert_ptr_nonnull(got);
    for (int i = 0; i < N_UPDATES; i++) {
        if (opt->fused_backward) {
            shard_engine_fused_arm(&e, &hp, 1.0, 1.0);
            hp.step = i + 1;
        }
        ck_assert_int_eq(model_forward(model, &hooks, mr->inputs, mr->targets), ZT_OK);
        const double loss = model->mean_loss, want = or->losses[i];
        ck_assert_msg(fabs(loss - want) <= 1e-5 * fabs(want),
                      "%s stage %d: loss before update %d is %.8f, the reference %.8f", c->name,
                      stage, i, loss, want);
        ck_assert_int_eq(model_backward(model, &hooks, 1.0f), ZT_OK);
        struct shard_step_result res;
        ck_assert_int_eq(shard_engine_step(&e, &hp, 1.0, 0, &res), ZT_OK);
        ck_assert_int_eq(res.skipped, 0);
        ck_assert_int_eq((int)hp.step, i + 1);
        ck_assert_int_eq(shard_engine_full_params(&e, got), ZT_OK);
        compare_params(&table, got, or->after + (size_t)i * table.n_params, c->name, stage, i,
                       c->code_ties);
    }
    free(got);
    model_destroy(model);
    shard_engine_destroy(&e);
    comm_destroy(comm);
    compute_backend_close(&be);
    ck_assert_int_eq((int)ledger.total_current, 0);
    param_table_free(&table);
}

/* The reference's decay rule is the 2-D tensors; the table's flags must be
 * the same, or the comparison would test something else. */
START_TEST(decay_flags_are_the_two_dimensional_tensors)
{
    struct model_ref mr;
    model_ref_load(&mr);
    struct param_table table;
    ck_assert_int_eq(gpt2_table_build(&mr.cfg, &table), ZT_OK);
    int n_decay = 0;
    for (int k = 0; k < table.n_tensors; k++) {
        const struct param_tensor *p = &table.tensors[k];
        ck_assert_msg(p->decay == (p->rows > 1 && p->cols > 1), "%s [%d, %d]: decay %d", p->name,
                      p->rows, p->cols, p->decay);
        ck_assert(p->trainable);
        n_decay += p->decay;
    }
    ck_assert_int_eq(n_decay, 2 + 4 * mr.cfg.n_layer);
    param_table_free(&table);
    model_ref_free(&mr);
}
END_TEST

START_TEST(optimizer_matches_the_reference_in_every_stage)
{
    const struct optim_case *c = &cases[_i];
    struct model_ref mr;
    struct optim_ref or ;
    model_ref_load(&mr);
    optim_ref_load(c->name, mr.n_params, & or);
    for (int stage = 0; stage <= 3; stage++)
        run_stage(c, &mr, & or, stage);
    free(or.after);
    model_ref_free(&mr);
}
END_TEST

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    Suite *s = suite_create("optim_reference");
    TCase *tc = testutil_tcase(s, "flags", 60);
    tcase_add_test(tc, decay_flags_are_the_two_dimensional_tensors);
    tc = testutil_tcase(s, "cases", 300);
    tcase_add_loop_test(tc, optimizer_matches_the_reference_in_every_stage, 0, N_CASES);
    int rc = testutil_run_suite(s, 1);
    MPI_Finalize();
    return rc;
}
