/* tests/test_model.c — the GPT-2 model against PyTorch, and its parameter
 * table and initialisation.
 *
 * tests/data/gpt2_reference.bin is written by
 * scripts/reference/gpt2_reference.py (float64 PyTorch); see
 * tests/data/README.md for its layout. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "flat_hooks.h"
#include "testutil.h"
#include "worker/backend.h"
#include "worker/model.h"
#include "worker/ops.h"
#include "worker/optimizer.h"

struct reference {
    struct gpt2_config cfg;
    int B, T, n_params, n_steps;
    int32_t *inputs, *targets;
    float *params, *grads, *losses;
    float loss, lr, beta1, beta2, eps, weight_decay;
};

/* The whole model as one stage, as an lvalue for gpt2_create. */
#define whole_of(t) ((struct model_stage[1]){model_stage_whole(t)})[0]

static void read_exact(FILE *f, void *dst, size_t bytes)
{
    ck_assert_msg(fread(dst, 1, bytes, f) == bytes, "reference file truncated");
}

static void reference_load(struct reference *r)
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
    size_t bt = (size_t)r->B * r->T, np = (size_t)r->n_params;
    r->inputs = malloc(bt * sizeof(int32_t));
    r->targets = malloc(bt * sizeof(int32_t));
    r->params = malloc(np * sizeof(float));
    r->grads = malloc(np * sizeof(float));
    read_exact(f, r->inputs, bt * sizeof(int32_t));
    read_exact(f, r->targets, bt * sizeof(int32_t));
    read_exact(f, r->params, np * sizeof(float));
    read_exact(f, &r->loss, sizeof(float));
    read_exact(f, r->grads, np * sizeof(float));
    read_exact(f, &r->n_steps, sizeof(int32_t));
    float hp[5];
    read_exact(f, hp, sizeof hp);
    r->lr = hp[0], r->beta1 = hp[1], r->beta2 = hp[2], r->eps = hp[3], r->weight_decay = hp[4];
    r->losses = malloc((size_t)r->n_steps * sizeof(float));
    read_exact(f, r->losses, (size_t)r->n_steps * sizeof(float));
    fclose(f);
}

static void reference_free(struct reference *r)
{
    free(r->inputs);
    free(r->targets);
    free(r->params);
    free(r->grads);
    free(r->losses);
}

struct model_fixture {
    struct reference ref;
    struct param_table table;
    struct ledger ledger;
    struct compute_backend be;
    struct gpt2 model;
    struct flat_state state;
    struct model_unit_hooks hooks;
};

static void fixture_open(struct model_fixture *fx)
{
    reference_load(&fx->ref);
    ck_assert_int_eq(gpt2_table_build(&fx->ref.cfg, &fx->table), ZT_OK);
    ck_assert_int_eq((int)fx->table.n_params, fx->ref.n_params);
    ledger_init(&fx->ledger, 0);
    ck_assert_int_eq(compute_backend_open("cpu", -1, &fx->ledger, &fx->be), ZT_OK);
    ck_assert_int_eq(gpt2_create(&fx->table, &fx->be, fx->ref.B, fx->ref.T, 0,
                                 &whole_of(&fx->table), &fx->model),
                     ZT_OK);
    fx->state = (struct flat_state){.t = &fx->table,
                                    .params = fx->ref.params,
                                    .grads = calloc(fx->table.n_params, sizeof(float))};
    fx->hooks = flat_hooks(&fx->state);
}

static void fixture_close(struct model_fixture *fx)
{
    gpt2_destroy(&fx->model);
    compute_backend_close(&fx->be);
    ck_assert_int_eq((int)fx->ledger.total_current, 0);
    free(fx->state.grads);
    param_table_free(&fx->table);
    reference_free(&fx->ref);
}

START_TEST(loss_matches_pytorch)
{
    struct model_fixture fx;
    fixture_open(&fx);
    ck_assert_int_eq(gpt2_forward(&fx.model, &fx.hooks, fx.ref.inputs, fx.ref.targets), ZT_OK);
    ck_assert_int_eq(fx.state.acquired, 0);
    double rel = fabs(fx.model.base.mean_loss - fx.ref.loss) / fabs(fx.ref.loss);
    ck_assert_msg(rel < 1e-5, "loss %.8f vs PyTorch %.8f (rel %.2e)", fx.model.base.mean_loss,
                  fx.ref.loss, rel);
    fixture_close(&fx);
}
END_TEST

START_TEST(gradients_match_pytorch)
{
    struct model_fixture fx;
    fixture_open(&fx);
    ck_assert_int_eq(gpt2_forward(&fx.model, &fx.hooks, fx.ref.inputs, fx.ref.targets), ZT_OK);
    ck_assert_int_eq(gpt2_backward(&fx.model, &fx.hooks, 1.0f), ZT_OK);
    ck_assert_int_eq(fx.state.acquired, 0);
    /* Per tensor: max |ours - ref| relative to the tensor's largest
     * reference gradient, so tiny entries are not held to a relative bound
     * float32 cannot meet. */
    for (int k = 0; k < fx.table.n_tensors; k++) {
        const struct param_tensor *p = &fx.table.tensors[k];
        double maxdiff = 0.0, maxref = 0.0;
        for (size_t i = p->offset; i < p->offset + p->numel; i++) {
            maxdiff = fmax(maxdiff, fabs((double)fx.state.grads[i] - fx.ref.grads[i]));
            maxref = fmax(maxref, fabs((double)fx.ref.grads[i]));
        }
        ck_assert_msg(maxref > 0.0, "%s: reference gradient is all zero", p->name);
        ck_assert_msg(maxdiff <= 1e-4 * maxref, "%s: max diff %.3e vs max |grad| %.3e", p->name,
                      maxdiff, maxref);
    }
    fixture_close(&fx);
}
END_TEST

START_TEST(backward_accumulates_with_scale)
{
    struct model_fixture fx;
    fixture_open(&fx);
    size_t n = fx.table.n_params;
    for (int rep = 0; rep < 2; rep++) {
        ck_assert_int_eq(gpt2_forward(&fx.model, &fx.hooks, fx.ref.inputs, fx.ref.targets), ZT_OK);
        ck_assert_int_eq(gpt2_backward(&fx.model, &fx.hooks, 0.5f), ZT_OK);
    }
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs(fx.state.grads[i] - fx.ref.grads[i]) <=
                          1e-4 * (fabs(fx.ref.grads[i]) + 1e-2),
                      "element %zu: two half-scaled backwards give %g, one full %g", i,
                      fx.state.grads[i], fx.ref.grads[i]);
    fixture_close(&fx);
}
END_TEST

START_TEST(adamw_trajectory_matches_pytorch)
{
    struct model_fixture fx;
    fixture_open(&fx);
    size_t n = fx.table.n_params;
    float *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
    struct optimizer_hparams hp = {.lr = fx.ref.lr,
                                   .beta1 = fx.ref.beta1,
                                   .beta2 = fx.ref.beta2,
                                   .eps = fx.ref.eps,
                                   .weight_decay = fx.ref.weight_decay};
    for (int step = 0; step < fx.ref.n_steps; step++) {
        memset(fx.state.grads, 0, n * sizeof(float));
        ck_assert_int_eq(gpt2_forward(&fx.model, &fx.hooks, fx.ref.inputs, fx.ref.targets), ZT_OK);
        double rel =
            fabs(fx.model.base.mean_loss - fx.ref.losses[step]) / fabs(fx.ref.losses[step]);
        ck_assert_msg(rel < 1e-4, "step %d: loss %.7f vs PyTorch %.7f", step,
                      fx.model.base.mean_loss, fx.ref.losses[step]);
        ck_assert_int_eq(gpt2_backward(&fx.model, &fx.hooks, 1.0f), ZT_OK);
        hp.step = step + 1;
        for (int k = 0; k < fx.table.n_tensors; k++) {
            const struct param_tensor *p = &fx.table.tensors[k];
            adamw_update(fx.ref.params + p->offset, fx.state.grads + p->offset, m + p->offset,
                         v + p->offset, p->numel, p->decay ? 1.0f : 0.0f, &hp);
        }
    }
    free(m);
    free(v);
    fixture_close(&fx);
}
END_TEST

START_TEST(plan_walk_makes_the_same_hook_calls_as_a_real_pass)
{
    struct model_fixture fx;
    fixture_open(&fx);
    ck_assert_int_eq(gpt2_forward(&fx.model, &fx.hooks, fx.ref.inputs, fx.ref.targets), ZT_OK);
    ck_assert_int_eq(gpt2_backward(&fx.model, &fx.hooks, 1.0f), ZT_OK);

    struct ledger plan;
    struct compute_backend dplan;
    struct gpt2 pm;
    struct flat_state ps = {.t = &fx.table, .params = fx.ref.params, .grads = fx.state.grads};
    struct model_unit_hooks ph = flat_hooks(&ps);
    ledger_init(&plan, 1);
    ck_assert_int_eq(compute_backend_open("cpu", -1, &plan, &dplan), ZT_OK);
    ck_assert_int_eq(
        gpt2_create(&fx.table, &dplan, fx.ref.B, fx.ref.T, 0, &whole_of(&fx.table), &pm), ZT_OK);
    ck_assert_int_eq(gpt2_forward(&pm, &ph, NULL, NULL), ZT_OK);
    ck_assert_int_eq(gpt2_backward(&pm, &ph, 1.0f), ZT_OK);
    ck_assert_int_eq(ps.n_events, fx.state.n_events);
    ck_assert_int_le(ps.n_events, FLAT_MAX_EVENTS);
    for (int i = 0; i < ps.n_events; i++)
        ck_assert_msg(ps.events[i][0] == fx.state.events[i][0] &&
                          ps.events[i][1] == fx.state.events[i][1],
                      "event %d: plan (%d, unit %d) vs real (%d, unit %d)", i, ps.events[i][0],
                      ps.events[i][1], fx.state.events[i][0], fx.state.events[i][1]);
    /* The params acquisitions follow param_table_unit_order. */
    int order[16], n = param_table_unit_order(&fx.table, NULL, MODEL_PASS_FORWARD, order, 16),
                   k = 0;
    for (int i = 0; i < fx.state.n_events && k < n; i++)
        if (fx.state.events[i][0] == EV_PARAMS)
            ck_assert_int_eq(fx.state.events[i][1], order[k++]);
    ck_assert_int_eq(k, n);
    gpt2_destroy(&pm);
    compute_backend_close(&dplan);
    fixture_close(&fx);
}
END_TEST

/* Recomputing checkpointed blocks in the backward gives bit-identical
 * gradients, with less activation memory. */
START_TEST(activation_checkpointing_is_bit_identical)
{
    struct model_fixture fx;
    fixture_open(&fx);
    const size_t n = fx.table.n_params;
    ck_assert_int_eq(gpt2_forward(&fx.model, &fx.hooks, fx.ref.inputs, fx.ref.targets), ZT_OK);
    ck_assert_int_eq(gpt2_backward(&fx.model, &fx.hooks, 1.0f), ZT_OK);
    const float loss = fx.model.base.mean_loss;
    const size_t full_acts = fx.model.act_bytes;
    for (int every = 1; every <= 2; every++) {
        struct ledger l;
        struct compute_backend d;
        struct gpt2 cm;
        struct flat_state cs = {
            .t = &fx.table, .params = fx.ref.params, .grads = calloc(n, sizeof(float))};
        struct model_unit_hooks ch = flat_hooks(&cs);
        ledger_init(&l, 0);
        ck_assert_int_eq(compute_backend_open("cpu", -1, &l, &d), ZT_OK);
        ck_assert_int_eq(
            gpt2_create(&fx.table, &d, fx.ref.B, fx.ref.T, every, &whole_of(&fx.table), &cm),
            ZT_OK);
        ck_assert_int_eq(gpt2_forward(&cm, &ch, fx.ref.inputs, fx.ref.targets), ZT_OK);
        ck_assert_int_eq(gpt2_backward(&cm, &ch, 1.0f), ZT_OK);
        ck_assert(cm.base.mean_loss == loss);
        ck_assert_msg(memcmp(cs.grads, fx.state.grads, n * sizeof(float)) == 0,
                      "every_n_blocks %d: gradients differ", every);
        /* with 2 blocks, every 2nd block keeps block 1 and the recompute
         * buffer: no saving; every block saves one block's internals */
        if (every == 1)
            ck_assert_uint_lt(cm.act_bytes, full_acts);
        else
            ck_assert_uint_le(cm.act_bytes, full_acts);
        gpt2_destroy(&cm);
        compute_backend_close(&d);
        free(cs.grads);
    }
    fixture_close(&fx);
}
END_TEST

/* The generic calls reach GPT-2 through its family: a model made by
 * model_create from a GPT-2 table gives the same loss and gradients, bit
 * for bit, as the GPT-2 calls, and frees all it counted. */
START_TEST(generic_instance_dispatches_to_the_family)
{
    struct model_fixture fx;
    fixture_open(&fx);
    const size_t n = fx.table.n_params;
    ck_assert_int_eq(gpt2_forward(&fx.model, &fx.hooks, fx.ref.inputs, fx.ref.targets), ZT_OK);
    ck_assert_int_eq(gpt2_backward(&fx.model, &fx.hooks, 0.5f), ZT_OK);

    struct ledger l;
    struct compute_backend d;
    struct model *m;
    struct model_profile prof = {{0}};
    struct flat_state gs = {
        .t = &fx.table, .params = fx.ref.params, .grads = calloc(n, sizeof(float))};
    struct model_unit_hooks gh = flat_hooks(&gs);
    ledger_init(&l, 0);
    ck_assert_int_eq(compute_backend_open("cpu", -1, &l, &d), ZT_OK);
    ck_assert_int_eq(model_create(&fx.table, &d, fx.ref.B, fx.ref.T, 0, &m), ZT_OK);
    ck_assert_ptr_eq(m->family, &gpt2_family);
    ck_assert_ptr_eq(m->table, &fx.table);
    ck_assert(m->B == fx.ref.B && m->T == fx.ref.T && !m->plan);
    m->profile = &prof;
    ck_assert_int_eq(model_forward(m, &gh, fx.ref.inputs, fx.ref.targets), ZT_OK);
    ck_assert_int_eq(model_backward(m, &gh, 0.5f), ZT_OK);
    ck_assert(m->mean_loss == fx.model.base.mean_loss);
    ck_assert_msg(memcmp(gs.grads, fx.state.grads, n * sizeof(float)) == 0, "gradients differ");
    ck_assert(prof.seconds[MODEL_PROF_MATMUL] > 0.0);
    ck_assert_str_eq(model_profile_name(MODEL_PROF_ZERO), "zeroing");
    model_destroy(m);
    model_destroy(NULL);
    compute_backend_close(&d);
    ck_assert_uint_eq(l.total_current, 0);
    free(gs.grads);
    fixture_close(&fx);
}
END_TEST

START_TEST(units_are_contiguous_and_cover_the_space)
{
    struct gpt2_config c = {256, 64, 3, 4, 32};
    struct param_table t;
    ck_assert_int_eq(gpt2_table_build(&c, &t), ZT_OK);
    ck_assert_int_eq(t.n_units, c.n_layer + 2);
    size_t C = 32, expect = 256 * C + 64 * C + 3 * (12 * C * C + 13 * C) + 2 * C;
    ck_assert_uint_eq(t.n_params, expect);
    ck_assert_uint_eq(t.unit_offset[0], 0);
    ck_assert_uint_eq(t.unit_offset[t.n_units], t.n_params);
    size_t next = 0;
    for (int k = 0; k < t.n_tensors; k++) {
        const struct param_tensor *p = &t.tensors[k];
        ck_assert_uint_eq(p->offset, next);
        ck_assert(p->offset >= t.unit_offset[p->unit]);
        ck_assert(p->offset + p->numel <= t.unit_offset[p->unit + 1]);
        next += p->numel;
    }
    ck_assert_str_eq(t.tensors[2].name, "h.0.ln_1.weight");
    ck_assert_int_eq(t.tensors[4].rows, 3 * 32);
    param_table_free(&t);
}
END_TEST

START_TEST(init_is_independent_of_sharding_and_follows_gpt2)
{
    struct gpt2_config c = {256, 64, 4, 4, 64};
    struct param_table t;
    ck_assert_int_eq(gpt2_table_build(&c, &t), ZT_OK);
    size_t n = t.n_params;
    float *whole = malloc(n * sizeof(float)), *pieces = malloc(n * sizeof(float));
    gpt2_init_params(&t, 7, 0, n, whole);
    for (size_t lo = 0; lo < n; lo += 1237) { /* odd chunk size: cuts through tensors */
        size_t hi = lo + 1237 < n ? lo + 1237 : n;
        gpt2_init_params(&t, 7, lo, hi, pieces + lo);
    }
    ck_assert(memcmp(whole, pieces, n * sizeof(float)) == 0);
    for (int k = 0; k < t.n_tensors; k++) {
        const struct param_tensor *p = &t.tensors[k];
        double s = 0, s2 = 0;
        for (size_t i = p->offset; i < p->offset + p->numel; i++)
            s += whole[i], s2 += (double)whole[i] * whole[i];
        double mean = s / p->numel, std = sqrt(s2 / p->numel - mean * mean);
        if (p->cols == 1) {
            double want = strstr(p->name, "ln_") && strstr(p->name, "weight") ? 1.0 : 0.0;
            ck_assert_msg(mean == want && std < 1e-12, "%s: mean %g std %g", p->name, mean, std);
        } else {
            double want = strstr(p->name, "proj.weight") ? 0.02 / sqrt(8.0) : 0.02;
            ck_assert_msg(fabs(std - want) < 0.1 * want, "%s: std %g want %g", p->name, std, want);
            ck_assert_msg(fabs(mean) < 0.1 * want, "%s: mean %g", p->name, mean);
        }
    }
    gpt2_init_params(&t, 8, 0, n, pieces);
    ck_assert(memcmp(whole, pieces, n * sizeof(float)) != 0);
    free(whole);
    free(pieces);
    param_table_free(&t);
}
END_TEST

/* The initial values are drawn in blocks on the OpenMP threads: at 1 and
 * 3 threads they are the same bits, and each matrix element is still
 * (float)(std * rng_normal(rng_key(seed, "init"), i)), element i's own
 * draw (what checkpoints of seeded bases and test_trajectory rely on). */
START_TEST(init_is_independent_of_the_thread_count)
{
    struct gpt2_config c = {256, 64, 4, 4, 64};
    struct param_table t;
    ck_assert_int_eq(gpt2_table_build(&c, &t), ZT_OK);
    size_t n = t.n_params;
    ck_assert_uint_gt(n, 3 << 16); /* several blocks of model_init_normal */
    float *one = malloc(n * sizeof(float)), *three = malloc(n * sizeof(float));
    ck_assert(one && three);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    gpt2_init_params(&t, 7, 0, n, one);
    omp_set_num_threads(3);
    gpt2_init_params(&t, 7, 0, n, three);
    omp_set_num_threads(threads);
    ck_assert(memcmp(one, three, n * sizeof(float)) == 0);
    const uint64_t key = rng_key(7, "init");
    for (int k = 0; k < t.n_tensors; k++) {
        const struct param_tensor *p = &t.tensors[k];
        if (p->cols == 1)
            continue;
        const double std = strstr(p->name, "proj.weight") ? 0.02 / sqrt(8.0) : 0.02;
        for (size_t i = p->offset; i < p->offset + p->numel; i++)
            ck_assert_msg(three[i] == (float)(std * rng_normal(key, i)), "%s: element %zu", p->name,
                          i);
    }
    free(one);
    free(three);
    param_table_free(&t);
}
END_TEST

START_TEST(plan_only_ledger_counts_without_allocating)
{
    struct gpt2_config c = {256, 128, 2, 4, 64};
    struct param_table t;
    struct ledger real, plan;
    struct compute_backend dreal, dplan;
    struct gpt2 a, b;
    ck_assert_int_eq(gpt2_table_build(&c, &t), ZT_OK);
    ledger_init(&real, 0);
    ledger_init(&plan, 1);
    ck_assert_int_eq(compute_backend_open("cpu", -1, &real, &dreal), ZT_OK);
    ck_assert_int_eq(compute_backend_open("cpu", -1, &plan, &dplan), ZT_OK);
    ck_assert_int_eq(gpt2_create(&t, &dreal, 4, 128, 0, &whole_of(&t), &a), ZT_OK);
    ck_assert_int_eq(gpt2_create(&t, &dplan, 4, 128, 0, &whole_of(&t), &b), ZT_OK);
    ck_assert(a.acts != NULL && b.acts == NULL);
    ck_assert_uint_gt(plan.total_peak, 0);
    for (int k = 0; k < LEDGER_CATEGORY_COUNT; k++)
        ck_assert_uint_eq(real.peak[k], plan.peak[k]);
    gpt2_destroy(&a);
    gpt2_destroy(&b);
    compute_backend_close(&dreal);
    compute_backend_close(&dplan);
    ck_assert_uint_eq(real.total_current, 0);
    ck_assert_uint_eq(plan.total_current, 0);
    param_table_free(&t);
}
END_TEST

/* meta.json records the optimizer's hyperparameters as the decimals the
 * config gave, though the update runs on their fp32 values. */
START_TEST(optimizer_describes_itself)
{
    const struct optimizer_ops *o = optimizer_find("adamw");
    ck_assert_ptr_nonnull(o);
    ck_assert_str_eq(optimizer_find("ADAM")->name, "Adam"); /* its own entry: L2, not AdamW */
    ck_assert_int_eq(optimizer_find("lion")->n_states, 1);
    ck_assert_ptr_null(optimizer_find("Lamb"));
    ck_assert_int_eq(o->n_states, 2);
    ck_assert_str_eq(o->state_names[1], "exp_avg_sq");
    const struct optimizer_hparams hp = {
        .lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f};
    struct zt_kvlist l;
    optimizer_describe(o, &hp, &l);
    ck_assert_str_eq(l.kind, "AdamW");
    ck_assert_int_eq(l.n, 5);
    static const char *const names[5] = {"lr", "beta1", "beta2", "eps", "weight_decay"};
    static const double want[5] = {3e-4, 0.9, 0.999, 1e-8, 0.1};
    for (int k = 0; k < 5; k++) {
        ck_assert_str_eq(l.items[k].name, names[k]);
        ck_assert(l.items[k].is_real && l.items[k].r == want[k]);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("gpt2");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, loss_matches_pytorch);
    tcase_add_test(tc, optimizer_describes_itself);
    tcase_add_test(tc, gradients_match_pytorch);
    tcase_add_test(tc, backward_accumulates_with_scale);
    tcase_add_test(tc, adamw_trajectory_matches_pytorch);
    tcase_add_test(tc, plan_walk_makes_the_same_hook_calls_as_a_real_pass);
    tcase_add_test(tc, activation_checkpointing_is_bit_identical);
    tcase_add_test(tc, generic_instance_dispatches_to_the_family);
    tcase_add_test(tc, units_are_contiguous_and_cover_the_space);
    tcase_add_test(tc, init_is_independent_of_sharding_and_follows_gpt2);
    tcase_add_test(tc, init_is_independent_of_the_thread_count);
    tcase_add_test(tc, plan_only_ledger_counts_without_allocating);
    suite_add_tcase(s, tc);
    return testutil_run_suite(s, 0);
}
