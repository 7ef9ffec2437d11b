/* tests/test_llama.c — the Llama-style family against its float64
 * reference, and its table, pass order and checkpointing.
 *
 * tests/data/llama_reference.bin (untied head, 4 query heads on 2
 * key/value heads) and llama_reference_tied.bin (tied head, one key/value
 * head, another rope_theta and eps) are written by
 * scripts/reference/llama_reference.py from the Hugging Face modeling
 * code's formulas in float64; see tests/data/README.md for the layout.
 * Everything here goes through the generic model interface
 * (model_family.h), as the engine does. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flat_hooks.h"
#include "testutil.h"
#include "worker/backend.h"
#include "worker/llama.h"
#include "worker/model_family.h"
#include "worker/optimizer.h"

struct reference {
    struct llama_config cfg;
    int B, T, n_params, n_steps;
    int32_t *inputs, *targets;
    float *params, *grads, *losses;
    float loss, lr, beta1, beta2, eps, weight_decay;
};

static void read_exact(FILE *f, void *dst, size_t bytes)
{
    ck_assert_msg(fread(dst, 1, bytes, f) == bytes, "reference file truncated");
}

static void reference_load(const char *name, struct reference *r)
{
    const char *path = testutil_source_path(testutil_fmt("tests/data/%s", name));
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char magic[8];
    int32_t hdr[10];
    float reals[2];
    int32_t bias = 0;
    read_exact(f, magic, 8);
    const int with_bias = memcmp(magic, "ZTLLAM02", 8) == 0;
    ck_assert(with_bias || memcmp(magic, "ZTLLAM01", 8) == 0);
    read_exact(f, hdr, sizeof hdr);
    if (with_bias)
        read_exact(f, &bias, sizeof bias);
    read_exact(f, reals, sizeof reals);
    r->cfg = (struct llama_config){.vocab_size = hdr[0],
                                   .block_size = hdr[1],
                                   .n_layer = hdr[2],
                                   .n_head = hdr[3],
                                   .n_kv_head = hdr[4],
                                   .n_embd = hdr[5],
                                   .intermediate_size = hdr[6],
                                   .tie_word_embeddings = hdr[7],
                                   .rope_theta = reals[0],
                                   .rms_norm_eps = reals[1],
                                   .attention_bias = bias};
    r->B = hdr[8];
    r->T = hdr[9];
    read_exact(f, &r->n_params, sizeof(int32_t));
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

struct fixture {
    struct reference ref;
    struct param_table table;
    struct ledger ledger;
    struct compute_backend be;
    struct model *model;
    struct flat_state state;
    struct model_unit_hooks hooks;
};

/* Untied, tied, and Qwen2-shaped (tied, q, k and v biases). */
static const char *const reference_files[] = {"llama_reference.bin", "llama_reference_tied.bin",
                                              "llama_reference_qwen2.bin"};
#define N_REFERENCES ((int)(sizeof reference_files / sizeof reference_files[0]))

static void fixture_open(struct fixture *fx, int which, int ckpt_every)
{
    struct zt_kvlist shape;
    reference_load(reference_files[which], &fx->ref);
    llama_describe(&fx->ref.cfg, &shape);
    ck_assert_int_eq(param_table_build(&shape, &fx->table), ZT_OK);
    ck_assert_ptr_eq(fx->table.family, &llama_family);
    ck_assert_int_eq((int)fx->table.n_params, fx->ref.n_params);
    ledger_init(&fx->ledger, 0);
    ck_assert_int_eq(compute_backend_open("cpu", -1, &fx->ledger, &fx->be), ZT_OK);
    ck_assert_int_eq(
        model_create(&fx->table, &fx->be, fx->ref.B, fx->ref.T, ckpt_every, &fx->model), ZT_OK);
    fx->state = (struct flat_state){.t = &fx->table,
                                    .params = fx->ref.params,
                                    .grads = calloc(fx->table.n_params, sizeof(float))};
    fx->hooks = flat_hooks(&fx->state);
}

static void fixture_close(struct fixture *fx)
{
    model_destroy(fx->model);
    compute_backend_close(&fx->be);
    ck_assert_int_eq((int)fx->ledger.total_current, 0);
    free(fx->state.grads);
    param_table_free(&fx->table);
    reference_free(&fx->ref);
}

static void forward_backward(struct fixture *fx, float scale)
{
    ck_assert_int_eq(model_forward(fx->model, &fx->hooks, fx->ref.inputs, fx->ref.targets), ZT_OK);
    ck_assert_int_eq(model_backward(fx->model, &fx->hooks, scale), ZT_OK);
    ck_assert_int_eq(fx->state.acquired, 0);
    ck_assert_int_eq(fx->state.grads_open, 0);
}

START_TEST(loss_matches_reference)
{
    struct fixture fx;
    fixture_open(&fx, _i, 0);
    ck_assert_int_eq(model_forward(fx.model, &fx.hooks, fx.ref.inputs, fx.ref.targets), ZT_OK);
    ck_assert_int_eq(fx.state.acquired, 0);
    double rel = fabs(fx.model->mean_loss - fx.ref.loss) / fabs(fx.ref.loss);
    ck_assert_msg(rel < 1e-5, "%s: loss %.8f vs reference %.8f (rel %.2e)", reference_files[_i],
                  fx.model->mean_loss, fx.ref.loss, rel);
    fixture_close(&fx);
}
END_TEST

/* Every tensor's gradient within 1e-4 of its largest reference entry. */
START_TEST(gradients_match_reference)
{
    struct fixture fx;
    fixture_open(&fx, _i, 0);
    forward_backward(&fx, 1.0f);
    for (int k = 0; k < fx.table.n_tensors; k++) {
        const struct param_tensor *p = &fx.table.tensors[k];
        double maxdiff = 0.0, maxref = 0.0;
        for (size_t i = p->offset; i < p->offset + p->numel; i++) {
            maxdiff = fmax(maxdiff, fabs((double)fx.state.grads[i] - fx.ref.grads[i]));
            maxref = fmax(maxref, fabs((double)fx.ref.grads[i]));
        }
        ck_assert_msg(maxref > 0.0, "%s: reference gradient is all zero", p->name);
        ck_assert_msg(maxdiff <= 1e-4 * maxref, "%s %s: max diff %.3e vs max |grad| %.3e",
                      reference_files[_i], p->name, maxdiff, maxref);
    }
    fixture_close(&fx);
}
END_TEST

START_TEST(adamw_trajectory_matches_reference)
{
    struct fixture fx;
    fixture_open(&fx, _i, 0);
    size_t n = fx.table.n_params;
    float *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
    struct optimizer_hparams hp = {.lr = fx.ref.lr,
                                   .beta1 = fx.ref.beta1,
                                   .beta2 = fx.ref.beta2,
                                   .eps = fx.ref.eps,
                                   .weight_decay = fx.ref.weight_decay};
    ck_assert_int_ge(fx.ref.n_steps, 5);
    for (int step = 0; step < fx.ref.n_steps; step++) {
        memset(fx.state.grads, 0, n * sizeof(float));
        ck_assert_int_eq(model_forward(fx.model, &fx.hooks, fx.ref.inputs, fx.ref.targets), ZT_OK);
        double rel = fabs(fx.model->mean_loss - fx.ref.losses[step]) / fabs(fx.ref.losses[step]);
        ck_assert_msg(rel < 1e-4, "step %d: loss %.7f vs reference %.7f", step, fx.model->mean_loss,
                      fx.ref.losses[step]);
        ck_assert_int_eq(model_backward(fx.model, &fx.hooks, 1.0f), ZT_OK);
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

/* Two backwards at half scale accumulate to one at full scale. */
START_TEST(backward_accumulates_with_scale)
{
    struct fixture fx;
    fixture_open(&fx, _i, 0);
    forward_backward(&fx, 0.5f);
    forward_backward(&fx, 0.5f);
    for (size_t i = 0; i < fx.table.n_params; i++)
        ck_assert_msg(fabs(fx.state.grads[i] - fx.ref.grads[i]) <=
                          1e-4 * (fabs(fx.ref.grads[i]) + 1e-2),
                      "element %zu: two half-scaled backwards give %g, the reference %g", i,
                      fx.state.grads[i], fx.ref.grads[i]);
    fixture_close(&fx);
}
END_TEST

/* A plan-only instance makes the real passes' hook calls in their order,
 * and the parameter acquisitions follow the family's unit order. */
START_TEST(plan_walk_makes_the_same_hook_calls_as_a_real_pass)
{
    struct fixture fx;
    fixture_open(&fx, _i, 0);
    forward_backward(&fx, 1.0f);
    struct ledger plan;
    struct compute_backend dplan;
    struct model *pm;
    struct flat_state ps = {.t = &fx.table, .params = fx.ref.params, .grads = fx.state.grads};
    struct model_unit_hooks ph = flat_hooks(&ps);
    ledger_init(&plan, 1);
    ck_assert_int_eq(compute_backend_open("cpu", -1, &plan, &dplan), ZT_OK);
    ck_assert_int_eq(model_create(&fx.table, &dplan, fx.ref.B, fx.ref.T, 0, &pm), ZT_OK);
    ck_assert(pm->plan);
    ck_assert_int_eq(model_forward(pm, &ph, NULL, NULL), ZT_OK);
    ck_assert_int_eq(model_backward(pm, &ph, 1.0f), ZT_OK);
    ck_assert_int_eq(ps.n_events, fx.state.n_events);
    for (int i = 0; i < ps.n_events; i++)
        ck_assert_msg(ps.events[i][0] == fx.state.events[i][0] &&
                          ps.events[i][1] == fx.state.events[i][1],
                      "event %d: plan (%d, unit %d) vs real (%d, unit %d)", i, ps.events[i][0],
                      ps.events[i][1], fx.state.events[i][0], fx.state.events[i][1]);
    for (int pass = 0; pass < 2; pass++) {
        int order[16], k = 0, in_pass = 0;
        const int n = param_table_unit_order(&fx.table, NULL, (enum model_pass)pass, order, 16);
        for (int i = 0; i < fx.state.n_events; i++) {
            if (fx.state.events[i][0] == EV_BEGIN)
                in_pass = fx.state.events[i][1] == pass;
            else if (in_pass && fx.state.events[i][0] == EV_PARAMS)
                ck_assert_int_eq(fx.state.events[i][1], order[k++]);
        }
        ck_assert_int_eq(k, n);
    }
    /* a plan counts what a real instance allocates */
    ck_assert_uint_eq(plan.total_peak, fx.ledger.total_peak);
    model_destroy(pm);
    compute_backend_close(&dplan);
    fixture_close(&fx);
}
END_TEST

/* Recomputing checkpointed layers in the backward gives bit-identical
 * gradients. */
START_TEST(activation_checkpointing_is_bit_identical)
{
    struct fixture full, ck;
    fixture_open(&full, _i, 0);
    forward_backward(&full, 1.0f);
    for (int every = 1; every <= 2; every++) {
        fixture_open(&ck, _i, every);
        forward_backward(&ck, 1.0f);
        ck_assert(ck.model->mean_loss == full.model->mean_loss);
        ck_assert_msg(
            memcmp(ck.state.grads, full.state.grads, full.table.n_params * sizeof(float)) == 0,
            "every_n_blocks %d: gradients differ", every);
        if (every == 1)
            ck_assert_uint_lt(ck.ledger.total_peak, full.ledger.total_peak);
        fixture_close(&ck);
    }
    fixture_close(&full);
}
END_TEST

START_TEST(table_follows_the_hugging_face_layout)
{
    struct fixture fx;
    fixture_open(&fx, _i, 0);
    const struct llama_config *c = &fx.ref.cfg;
    const struct param_table *t = &fx.table;
    const int hs = c->n_embd / c->n_head;
    ck_assert_int_eq(t->n_units, c->n_layer + 2);
    ck_assert_str_eq(t->tensors[0].name, "embed_tokens.weight");
    ck_assert_str_eq(t->tensors[2].name, "layers.0.self_attn.q_proj.weight");
    ck_assert_int_eq(t->tensors[3].rows, c->n_kv_head * hs);
    ck_assert_str_eq(t->tensors[7].name, "layers.0.mlp.gate_proj.weight");
    ck_assert_int_eq(t->tensors[7].rows, c->intermediate_size);
    const int per_layer = c->attention_bias ? 12 : 9;
    ck_assert_str_eq(t->tensors[1 + per_layer * c->n_layer].name, "norm.weight");
    ck_assert_int_eq(t->n_tensors, 2 + per_layer * c->n_layer + !c->tie_word_embeddings);
    if (c->attention_bias) {
        ck_assert_str_eq(t->tensors[10].name, "layers.0.self_attn.q_proj.bias");
        ck_assert_int_eq(t->tensors[11].rows, c->n_kv_head * hs);
        ck_assert_str_eq(t->tensors[12].name, "layers.0.self_attn.v_proj.bias");
    }
    if (!c->tie_word_embeddings)
        ck_assert_str_eq(t->tensors[t->n_tensors - 1].name, "lm_head.weight");
    size_t off = 0;
    for (int k = 0; k < t->n_tensors; k++) {
        ck_assert_uint_eq(t->tensors[k].offset, off);
        ck_assert_int_eq(t->tensors[k].decay, t->tensors[k].cols > 1);
        ck_assert_uint_ge(t->tensors[k].offset, t->unit_offset[t->tensors[k].unit]);
        off += t->tensors[k].numel;
    }
    ck_assert_uint_eq(off, t->n_params);
    ck_assert_uint_eq(t->unit_offset[t->n_units], t->n_params);
    fixture_close(&fx);
}
END_TEST

/* Initial values: matrices normal(0, 0.02), norms 1, and any range of the
 * flat space gets the values the whole space has there. */
START_TEST(init_is_independent_of_sharding)
{
    struct fixture fx;
    fixture_open(&fx, _i, 0);
    const struct param_table *t = &fx.table;
    const size_t n = t->n_params;
    float *whole = malloc(n * sizeof(float)), *piece = malloc(n * sizeof(float));
    t->family->init_params(t, 7, 0, n, whole);
    const size_t cut = n / 3 + 1;
    t->family->init_params(t, 7, cut, n, piece);
    ck_assert(memcmp(whole + cut, piece, (n - cut) * sizeof(float)) == 0);
    double sum2 = 0.0;
    size_t count = 0;
    for (int k = 0; k < t->n_tensors; k++) {
        const struct param_tensor *p = &t->tensors[k];
        for (size_t i = p->offset; i < p->offset + p->numel; i++) {
            if (strstr(p->name, ".bias")) {
                ck_assert(whole[i] == 0.0f); /* nn.Linear's bias: zeros */
            } else if (p->cols == 1) {
                ck_assert(whole[i] == 1.0f);
            } else {
                sum2 += (double)whole[i] * whole[i];
                count++;
            }
        }
    }
    const double std = sqrt(sum2 / (double)count);
    ck_assert_msg(fabs(std - 0.02) < 0.002, "matrix std %g, expected 0.02", std);
    free(whole);
    free(piece);
    fixture_close(&fx);
}
END_TEST

/* Shapes the family cannot build are refused, naming the key. */
START_TEST(bad_shapes_are_refused)
{
    struct llama_config good = {.vocab_size = 64,
                                .block_size = 16,
                                .n_layer = 2,
                                .n_head = 4,
                                .n_kv_head = 2,
                                .n_embd = 16,
                                .intermediate_size = 24,
                                .rope_theta = 10000.0,
                                .rms_norm_eps = 1e-5};
    struct {
        struct llama_config c;
        const char *needle;
    } cases[] = {
        {good, NULL},
        {good, "n_kv_head"},
        {good, "odd"},
        {good, "rope_theta"},
        {good, "n_embd is not a multiple of n_head"},
    };
    cases[1].c.n_kv_head = 3;
    cases[2].c.n_head = 8, cases[2].c.n_kv_head = 8; /* head size 2: fine */
    cases[2].c.n_embd = 24;                          /* head size 3: odd */
    cases[3].c.rope_theta = 0.0;
    cases[4].c.n_embd = 18;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct zt_kvlist shape;
        struct param_table t;
        llama_describe(&cases[k].c, &shape);
        zt_status s = param_table_build(&shape, &t);
        if (!cases[k].needle) {
            ck_assert_int_eq(s, ZT_OK);
            param_table_free(&t);
            continue;
        }
        ck_assert_int_eq(s, ZT_ERR_CHECKPOINT);
        ck_assert_msg(strstr(zt_error_message(), cases[k].needle), "case %zu: %s", k,
                      zt_error_message());
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("llama");
    TCase *tc = testutil_tcase(s, "reference", 120);
    tcase_add_loop_test(tc, loss_matches_reference, 0, N_REFERENCES);
    tcase_add_loop_test(tc, gradients_match_reference, 0, N_REFERENCES);
    tcase_add_loop_test(tc, adamw_trajectory_matches_reference, 0, N_REFERENCES);
    tcase_add_loop_test(tc, backward_accumulates_with_scale, 0, N_REFERENCES);
    tc = testutil_tcase(s, "passes", 120);
    tcase_add_loop_test(tc, plan_walk_makes_the_same_hook_calls_as_a_real_pass, 0, N_REFERENCES);
    tcase_add_loop_test(tc, activation_checkpointing_is_bit_identical, 0, N_REFERENCES);
    tc = testutil_tcase(s, "table", 60);
    tcase_add_loop_test(tc, table_follows_the_hugging_face_layout, 0, N_REFERENCES);
    tcase_add_loop_test(tc, init_is_independent_of_sharding, 0, N_REFERENCES);
    tcase_add_test(tc, bad_shapes_are_refused);
    return testutil_run_suite(s, 0);
}
