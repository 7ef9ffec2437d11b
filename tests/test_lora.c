/* tests/test_lora.c — LoRA adapters on a parameter table and in both
 * families' passes, without an engine:
 *   - the table lora_attach builds: names, units, flags, the unit order,
 *     PEFT's matching rules and the errors for targets that match nothing;
 *   - GPT-2 with adapters on every linear layer against
 *     tests/data/lora_reference.bin (scripts/reference/lora_reference.py,
 *     float64 PyTorch): the loss to 1e-5, the adapters' gradients to 1e-4,
 *     and no gradient for the frozen base (its units lend none);
 *   - Llama (grouped-query heads, the untied head adapted too) against the
 *     identity LoRA rests on: the adapted model is the base model with
 *     W + (alpha/r) B A, and with G the gradient of that merged weight,
 *     dA = (alpha/r) B^T G and dB = (alpha/r) G A^T. The merged model runs
 *     the family's own tested passes, so this checks the adapters' slicing
 *     of the fused q|k|v and gate|up outputs independently. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "flat_hooks.h"
#include "testutil.h"
#include "worker/backend.h"
#include "worker/llama.h"
#include "worker/lora.h"
#include "worker/model.h"

/* Module names as PEFT would see them, here our own tensor names without
 * ".weight" (the suffix rule is the same). */
static char **our_module_names(const struct param_table *t)
{
    char **names = calloc((size_t)t->n_tensors, sizeof *names);
    ck_assert_ptr_nonnull(names);
    for (int k = 0; k < t->n_tensors; k++) {
        if (!t->tensors[k].linear)
            continue;
        names[k] = strdup(t->tensors[k].name);
        ck_assert_ptr_nonnull(names[k]);
        char *dot = strrchr(names[k], '.');
        if (dot && strcmp(dot, ".weight") == 0)
            *dot = '\0';
    }
    return names;
}

static void free_names(char **names, int n)
{
    for (int k = 0; k < n; k++)
        free(names[k]);
    free(names);
}

static zt_status attach(struct param_table *t, int r, double alpha, const char *const *targets,
                        int n_targets)
{
    char **names = our_module_names(t);
    const struct lora_spec spec = {
        .r = r, .alpha = alpha, .targets = targets, .n_targets = n_targets};
    const int n = t->n_tensors;
    zt_status s = lora_attach(t, &spec, (const char *const *)names);
    free_names(names, n);
    return s;
}

static const struct gpt2_config MICRO = {64, 16, 2, 2, 16};

START_TEST(table_has_adapter_units_after_the_base)
{
    struct param_table t;
    ck_assert_int_eq(gpt2_table_build(&MICRO, &t), ZT_OK);
    const int n_base = t.n_tensors, units = t.n_units;
    const size_t params = t.n_params;
    const char *const targets[] = {"qkv", "fc"};
    ck_assert_int_eq(attach(&t, 4, 8.0, targets, 2), ZT_OK);
    /* two adapted weights per block, one adapter unit per block */
    ck_assert_int_eq(t.n_tensors, n_base + 2 * 2 * 2);
    ck_assert_int_eq(t.n_units, units + 2);
    ck_assert_int_eq(t.lora.n_base_tensors, n_base);
    ck_assert_uint_eq(t.lora.n_base_params, params);
    ck_assert_float_eq(t.lora.scale, 2.0f);
    for (int k = 0; k < n_base; k++)
        ck_assert_msg(!t.tensors[k].trainable, "%s is not frozen", t.tensors[k].name);
    const struct param_tensor *a = &t.tensors[n_base], *b = &t.tensors[n_base + 1];
    ck_assert_str_eq(a->name, "h.0.attn.qkv.lora_A.weight");
    ck_assert_str_eq(b->name, "h.0.attn.qkv.lora_B.weight");
    ck_assert_int_eq(a->rows, 4);
    ck_assert_int_eq(a->cols, 16);
    ck_assert_int_eq(b->rows, 48);
    ck_assert_int_eq(b->cols, 4);
    ck_assert(a->trainable && b->trainable && a->decay && b->decay);
    ck_assert_int_eq(a->unit, units);
    ck_assert_int_eq(t.tensors[a->adapts].adapter, n_base);
    ck_assert_str_eq(t.tensors[n_base + 2].name, "h.0.mlp.fc.lora_A.weight");
    ck_assert_str_eq(t.tensors[n_base + 4].name, "h.1.attn.qkv.lora_A.weight");
    ck_assert_int_eq(t.tensors[n_base + 4].unit, units + 1);
    ck_assert_uint_eq(t.unit_offset[units], params);
    ck_assert_uint_eq(t.unit_offset[t.n_units], t.n_params);
    ck_assert_uint_eq(lora_n_params(&t), 2 * (4 * 16 + 48 * 4 + 4 * 16 + 64 * 4));
    /* each block's adapter unit is acquired right after the block */
    int order[16];
    const int n = param_table_unit_order(&t, NULL, MODEL_PASS_FORWARD, order, 16);
    const int want[] = {0, 1, units, 2, units + 1, 3, 0};
    ck_assert_int_eq(n, 7);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(order[i], want[i]);
    /* the base view is the family's table */
    const struct param_table base = param_table_base(&t);
    ck_assert_int_eq(base.n_tensors, n_base);
    ck_assert_int_eq(base.n_units, units);
    ck_assert_uint_eq(base.n_params, params);
    param_table_free(&t);
}
END_TEST

START_TEST(targets_follow_peft_matching)
{
    struct param_table t;
    ck_assert_int_eq(gpt2_table_build(&MICRO, &t), ZT_OK);
    const char *const bad[] = {"qkv", "nope"};
    ck_assert_int_eq(attach(&t, 4, 8.0, bad, 2), ZT_ERR_CONFIG);
    ck_assert_msg(strstr(zt_error_message(), "'nope' matches no module") &&
                      strstr(zt_error_message(), "qkv, proj, fc"),
                  "%s", zt_error_message());
    ck_assert_int_eq(t.lora.r, 0); /* unchanged */
    /* a suffix matches whole components only: "kv" is no module */
    const char *const partial[] = {"kv"};
    ck_assert_int_eq(attach(&t, 4, 8.0, partial, 1), ZT_ERR_CONFIG);
    /* a full path matches one module */
    const char *const one[] = {"h.1.mlp.proj"};
    ck_assert_int_eq(attach(&t, 2, 2.0, one, 1), ZT_OK);
    ck_assert_int_eq(t.n_tensors, t.lora.n_base_tensors + 2);
    ck_assert_str_eq(t.tensors[t.lora.n_base_tensors].name, "h.1.mlp.proj.lora_A.weight");
    ck_assert_int_eq(param_table_adapter_unit(&t, 1), -1);
    ck_assert_int_eq(param_table_adapter_unit(&t, 2), t.lora.n_base_units);
    param_table_free(&t);
}
END_TEST

/* A target that is a regular expression matches the modules whose whole
 * name it matches, as PEFT's string target_modules (re.fullmatch), with
 * Python's \d and (?: understood; one that matches nothing is refused. */
START_TEST(a_regex_target_matches_whole_names)
{
    struct param_table t;
    ck_assert_int_eq(gpt2_table_build(&MICRO, &t), ZT_OK);
    const int n_base = t.n_tensors;
    const char *const layer1[] = {"h\\.1\\.(?:attn\\.qkv|mlp\\.\\w+)"};
    ck_assert_int_eq(attach(&t, 2, 2.0, layer1, 1), ZT_OK);
    ck_assert_int_eq(t.n_tensors, n_base + 3 * 2); /* qkv, fc, proj of block 1 */
    const char *want[] = {"h.1.attn.qkv.lora_A.weight", "h.1.mlp.fc.lora_A.weight",
                          "h.1.mlp.proj.lora_A.weight"};
    for (int i = 0; i < 3; i++)
        ck_assert_str_eq(t.tensors[n_base + 2 * i].name, want[i]);
    param_table_free(&t);

    ck_assert_int_eq(gpt2_table_build(&MICRO, &t), ZT_OK);
    const char *const every_qkv[] = {".*\\d\\.attn\\.qkv"};
    ck_assert_int_eq(attach(&t, 2, 2.0, every_qkv, 1), ZT_OK);
    ck_assert_int_eq(t.n_tensors, n_base + 2 * 2);
    param_table_free(&t);

    /* a fullmatch: a pattern for part of a name matches nothing */
    ck_assert_int_eq(gpt2_table_build(&MICRO, &t), ZT_OK);
    const char *const part[] = {"attn\\.q.*"};
    ck_assert_int_eq(attach(&t, 2, 2.0, part, 1), ZT_ERR_CONFIG);
    ck_assert_msg(strstr(zt_error_message(), "matches no module"), "%s", zt_error_message());
    param_table_free(&t);

    /* bounded repeats compile; repeats regcomp would copy past counting
     * (it took 14 s over a++++...) match nothing, at once */
    ck_assert_int_eq(gpt2_table_build(&MICRO, &t), ZT_OK);
    const char *const bounded[] = {"h\\.[0-9]{1,2}\\.attn\\.qkv"};
    ck_assert_int_eq(attach(&t, 2, 2.0, bounded, 1), ZT_OK);
    ck_assert_int_eq(t.n_tensors, n_base + 2 * 2);
    param_table_free(&t);
    char repeats[200] = "h\\.1\\.attn\\.qk";
    memset(repeats + strlen(repeats), '+', 120);
    strcat(repeats, "v");
    const char *const pathological[] = {repeats, "(h{99}){99}"};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(gpt2_table_build(&MICRO, &t), ZT_OK);
        ck_assert_int_eq(attach(&t, 2, 2.0, pathological + i, 1), ZT_ERR_CONFIG);
        param_table_free(&t);
    }
}
END_TEST

START_TEST(all_linear_leaves_out_the_head)
{
    const struct llama_config c = {64, 16, 2, 4, 2, 32, 48, 0, 10000.0, 1e-5, 0};
    struct zt_kvlist shape;
    struct param_table t;
    llama_describe(&c, &shape);
    ck_assert_int_eq(param_table_build(&shape, &t), ZT_OK);
    const int n_base = t.n_tensors;
    const char *const all[] = {LORA_ALL_LINEAR};
    ck_assert_int_eq(attach(&t, 2, 4.0, all, 1), ZT_OK);
    ck_assert_int_eq(t.n_tensors, n_base + 2 * 7 * 2); /* 7 linear layers a block */
    for (int k = n_base; k < t.n_tensors; k++)
        ck_assert_msg(strncmp(t.tensors[k].name, "lm_head", 7) != 0, "%s", t.tensors[k].name);
    param_table_free(&t);
}
END_TEST

/* ---- GPT-2 against the float64 reference ---- */

struct lora_reference {
    struct gpt2_config cfg;
    int B, T, r, n_base, n_adapter, n_steps;
    float alpha, loss;
    int32_t *inputs, *targets;
    float *params; /* base then adapters */
    float *grads;  /* of the adapters */
};

static void read_exact(FILE *f, void *dst, size_t bytes)
{
    ck_assert_msg(fread(dst, 1, bytes, f) == bytes, "lora_reference.bin is truncated");
}

static void reference_load(struct lora_reference *r)
{
    const char *path = testutil_source_path("tests/data/lora_reference.bin");
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char magic[8];
    int32_t head[8];
    read_exact(f, magic, 8);
    ck_assert(memcmp(magic, "ZTLORA01", 8) == 0);
    read_exact(f, head, sizeof head);
    r->cfg = (struct gpt2_config){head[0], head[1], head[2], head[3], head[4]};
    r->B = head[5];
    r->T = head[6];
    r->r = head[7];
    read_exact(f, &r->alpha, 4);
    read_exact(f, &r->n_base, 4);
    read_exact(f, &r->n_adapter, 4);
    const size_t bt = (size_t)r->B * r->T, n = (size_t)r->n_base + r->n_adapter;
    r->inputs = malloc(bt * sizeof(int32_t));
    r->targets = malloc(bt * sizeof(int32_t));
    r->params = malloc(n * sizeof(float));
    r->grads = malloc((size_t)r->n_adapter * sizeof(float));
    ck_assert(r->inputs && r->targets && r->params && r->grads);
    read_exact(f, r->inputs, bt * 4);
    read_exact(f, r->targets, bt * 4);
    read_exact(f, r->params, n * 4);
    read_exact(f, &r->loss, 4);
    read_exact(f, r->grads, (size_t)r->n_adapter * 4);
    fclose(f);
}

static void reference_free(struct lora_reference *r)
{
    free(r->inputs);
    free(r->targets);
    free(r->params);
    free(r->grads);
}

START_TEST(gpt2_lora_matches_pytorch)
{
    struct lora_reference ref;
    reference_load(&ref);
    struct param_table t;
    ck_assert_int_eq(gpt2_table_build(&ref.cfg, &t), ZT_OK);
    const char *const targets[] = {"qkv", "proj", "fc"};
    ck_assert_int_eq(attach(&t, ref.r, ref.alpha, targets, 3), ZT_OK);
    ck_assert_uint_eq(t.lora.n_base_params, (size_t)ref.n_base);
    ck_assert_uint_eq(t.n_params, (size_t)(ref.n_base + ref.n_adapter));

    struct ledger ledger;
    struct compute_backend be;
    struct model *m;
    ledger_init(&ledger, 0);
    ck_assert_int_eq(compute_backend_open("cpu", -1, &ledger, &be), ZT_OK);
    ck_assert_int_eq(model_create(&t, &be, ref.B, ref.T, 1, &m), ZT_OK);
    struct flat_state st = {.t = &t, .params = ref.params, .grads = calloc(t.n_params, 4)};
    ck_assert_ptr_nonnull(st.grads);
    const struct model_unit_hooks h = flat_hooks(&st);
    ck_assert_int_eq(model_forward(m, &h, ref.inputs, ref.targets), ZT_OK);
    const double rel = fabs(m->mean_loss - ref.loss) / fabs(ref.loss);
    ck_assert_msg(rel < 1e-5, "loss %.8f vs %.8f (rel %.2e)", m->mean_loss, ref.loss, rel);
    ck_assert_int_eq(model_backward(m, &h, 1.0f), ZT_OK);
    ck_assert_int_eq(st.acquired, 0);
    ck_assert_int_eq(st.grads_open, 0);
    for (size_t i = 0; i < t.lora.n_base_params; i++)
        ck_assert_msg(st.grads[i] == 0.0f, "the frozen base got a gradient at %zu", i);
    for (int k = t.lora.n_base_tensors; k < t.n_tensors; k++) {
        const struct param_tensor *p = &t.tensors[k];
        const float *want = ref.grads + (p->offset - t.lora.n_base_params);
        double maxdiff = 0.0, maxref = 0.0;
        for (size_t i = 0; i < p->numel; i++) {
            maxdiff = fmax(maxdiff, fabs((double)st.grads[p->offset + i] - want[i]));
            maxref = fmax(maxref, fabs((double)want[i]));
        }
        ck_assert_msg(maxref > 0.0, "%s: reference gradient is all zero", p->name);
        ck_assert_msg(maxdiff <= 1e-4 * maxref, "%s: max diff %.3e vs max |grad| %.3e", p->name,
                      maxdiff, maxref);
    }
    model_destroy(m);
    compute_backend_close(&be);
    ck_assert_int_eq((int)ledger.total_current, 0);
    free(st.grads);
    param_table_free(&t);
    reference_free(&ref);
}
END_TEST

/* ---- LoRA dropout ---- */

struct drop_fixture {
    struct lora_reference ref;
    struct param_table t;
    struct ledger ledger;
    struct compute_backend be;
    struct model *m;
    struct flat_state st;
    struct model_unit_hooks h;
    uint64_t rows[8];
};

static void drop_open(struct drop_fixture *fx, double dropout)
{
    reference_load(&fx->ref);
    ck_assert_int_eq(gpt2_table_build(&fx->ref.cfg, &fx->t), ZT_OK);
    const char *const targets[] = {"qkv", "proj", "fc"};
    char **names = our_module_names(&fx->t);
    const struct lora_spec spec = {.r = fx->ref.r,
                                   .alpha = fx->ref.alpha,
                                   .dropout = dropout,
                                   .targets = targets,
                                   .n_targets = 3};
    const int n = fx->t.n_tensors;
    ck_assert_int_eq(lora_attach(&fx->t, &spec, (const char *const *)names), ZT_OK);
    free_names(names, n);
    ledger_init(&fx->ledger, 0);
    ck_assert_int_eq(compute_backend_open("cpu", -1, &fx->ledger, &fx->be), ZT_OK);
    ck_assert_int_eq(model_create(&fx->t, &fx->be, fx->ref.B, fx->ref.T, 1, &fx->m), ZT_OK);
    fx->st = (struct flat_state){.t = &fx->t, .params = fx->ref.params};
    fx->st.grads = calloc(fx->t.n_params, sizeof(float));
    ck_assert_ptr_nonnull(fx->st.grads);
    fx->h = flat_hooks(&fx->st);
    ck_assert_int_le(fx->ref.B, 8);
    for (int b = 0; b < fx->ref.B; b++)
        fx->rows[b] = 1000 + 7 * (uint64_t)b;
    fx->m->seed = 99;
    fx->m->row_ids = fx->rows;
}

static void drop_close(struct drop_fixture *fx)
{
    model_destroy(fx->m);
    compute_backend_close(&fx->be);
    ck_assert_int_eq((int)fx->ledger.total_current, 0);
    free(fx->st.grads);
    param_table_free(&fx->t);
    reference_free(&fx->ref);
}

static double drop_loss(struct drop_fixture *fx, int training)
{
    fx->m->training = training;
    ck_assert_int_eq(model_forward(fx->m, &fx->h, fx->ref.inputs, fx->ref.targets), ZT_OK);
    return fx->m->mean_loss;
}

/* Training forwards drop (the same mask every time), evaluation does not
 * (bit-identical to a table without dropout), and the backward goes
 * through the forward's mask: the largest adapter gradients match central
 * differences of the loss with dropout. Activation checkpointing is on, so the backward's
 * recompute draws the mask once more. */
START_TEST(dropout_masks_training_forwards_alike)
{
    struct drop_fixture fx, plain;
    drop_open(&fx, 0.3);
    drop_open(&plain, 0.0);
    const double eval = drop_loss(&fx, 0), train = drop_loss(&fx, 1);
    ck_assert_msg(eval == drop_loss(&plain, 1), "evaluation differs from no dropout");
    ck_assert_msg(fabs(train - eval) > 1e-4, "dropout changed nothing: %g vs %g", train, eval);
    ck_assert_msg(train == drop_loss(&fx, 1), "a second training forward drew another mask");
    ck_assert_int_eq(model_backward(fx.m, &fx.h, 1.0f), ZT_OK);
    /* central differences on the 16 largest adapter gradients */
    const size_t a0 = fx.t.lora.n_base_params, n = fx.t.n_params - a0;
    float *g = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(g);
    memcpy(g, fx.st.grads + a0, n * sizeof(float));
    for (int pick = 0; pick < 16; pick++) {
        size_t at = 0;
        for (size_t i = 1; i < n; i++)
            at = fabsf(g[i]) > fabsf(g[at]) ? i : at;
        const float old = fx.ref.params[a0 + at], eps = 1e-2f;
        fx.ref.params[a0 + at] = old + eps;
        const double up = drop_loss(&fx, 1);
        fx.ref.params[a0 + at] = old - eps;
        const double down = drop_loss(&fx, 1);
        fx.ref.params[a0 + at] = old;
        const double fd = (up - down) / (2.0 * eps);
        ck_assert_msg(fabs(fd - g[at]) <= 3e-2 * fabs(g[at]), "adapter element %zu: %.6g vs %.6g",
                      at, (double)g[at], fd);
        g[at] = 0.0f;
    }
    free(g);
    drop_close(&plain);
    drop_close(&fx);
}
END_TEST

/* ---- Llama against the merged model ---- */

struct pass_result {
    double loss;
    float *grads;
};

static struct pass_result run_passes(const struct param_table *t, float *params,
                                     const int32_t *inputs, const int32_t *targets, int B, int T)
{
    struct ledger ledger;
    struct compute_backend be;
    struct model *m;
    ledger_init(&ledger, 0);
    ck_assert_int_eq(compute_backend_open("cpu", -1, &ledger, &be), ZT_OK);
    ck_assert_int_eq(model_create(t, &be, B, T, 0, &m), ZT_OK);
    struct flat_state st = {.t = t, .params = params, .grads = calloc(t->n_params, 4)};
    ck_assert_ptr_nonnull(st.grads);
    const struct model_unit_hooks h = flat_hooks(&st);
    ck_assert_int_eq(model_forward(m, &h, inputs, targets), ZT_OK);
    ck_assert_int_eq(model_backward(m, &h, 1.0f), ZT_OK);
    struct pass_result r = {m->mean_loss, st.grads};
    model_destroy(m);
    compute_backend_close(&be);
    return r;
}

START_TEST(llama_lora_is_the_merged_model)
{
    const struct llama_config c = {64, 16, 2, 4, 2, 32, 48, 0, 10000.0, 1e-5, 0};
    const int B = 2, T = 12;
    struct zt_kvlist shape;
    struct param_table base, t;
    llama_describe(&c, &shape);
    ck_assert_int_eq(param_table_build(&shape, &base), ZT_OK);
    ck_assert_int_eq(param_table_build(&shape, &t), ZT_OK);
    const char *const targets[] = {"q_proj",    "k_proj",  "v_proj",    "o_proj",
                                   "gate_proj", "up_proj", "down_proj", "lm_head"};
    ck_assert_int_eq(attach(&t, 3, 6.0, targets, 8), ZT_OK);
    const float s = t.lora.scale;

    float *params = malloc(t.n_params * sizeof(float));
    float *merged = malloc(base.n_params * sizeof(float));
    int32_t *tok = malloc(2 * (size_t)B * T * sizeof(int32_t));
    ck_assert(params && merged && tok);
    param_table_init(&t, 7, 0, t.n_params, params);
    for (size_t i = t.lora.n_base_params; i < t.n_params; i++) /* B non-zero too */
        params[i] = (float)(0.3 * (2.0 * rng_uniform(99, i) - 1.0));
    for (int i = 0; i < 2 * B * T; i++)
        tok[i] = (int32_t)(rng_u64(5, (uint64_t)i) % 64);
    /* merged = W + s B A, computed in double */
    memcpy(merged, params, base.n_params * sizeof(float));
    for (int k = 0; k < base.n_tensors; k++) {
        const struct param_tensor *w = &t.tensors[k];
        if (w->adapter < 0)
            continue;
        const float *A = params + t.tensors[w->adapter].offset;
        const float *Bm = params + t.tensors[w->adapter + 1].offset;
        for (int o = 0; o < w->rows; o++)
            for (int i = 0; i < w->cols; i++) {
                double d = 0.0;
                for (int j = 0; j < t.lora.r; j++)
                    d += (double)Bm[o * t.lora.r + j] * A[j * w->cols + i];
                merged[w->offset + (size_t)o * w->cols + i] =
                    (float)(params[w->offset + (size_t)o * w->cols + i] + s * d);
            }
    }
    struct pass_result lora = run_passes(&t, params, tok, tok + B * T, B, T);
    struct pass_result plain = run_passes(&base, merged, tok, tok + B * T, B, T);
    const double rel = fabs(lora.loss - plain.loss) / fabs(plain.loss);
    ck_assert_msg(rel < 1e-5, "loss %.8f vs merged %.8f", lora.loss, plain.loss);
    for (size_t i = 0; i < t.lora.n_base_params; i++)
        ck_assert_msg(lora.grads[i] == 0.0f, "the frozen base got a gradient at %zu", i);
    int adapted = 0;
    for (int k = 0; k < base.n_tensors; k++) {
        const struct param_tensor *w = &t.tensors[k];
        if (w->adapter < 0)
            continue;
        adapted++;
        const struct param_tensor *pa = &t.tensors[w->adapter], *pb = &t.tensors[w->adapter + 1];
        const float *A = params + pa->offset, *Bm = params + pb->offset;
        const float *G = plain.grads + w->offset;
        const int r = t.lora.r, O = w->rows, I = w->cols;
        double maxdiff = 0.0, maxref = 0.0;
        for (int j = 0; j < r; j++) /* dA = s B^T G */
            for (int i = 0; i < I; i++) {
                double want = 0.0;
                for (int o = 0; o < O; o++)
                    want += (double)Bm[o * r + j] * G[(size_t)o * I + i];
                want *= s;
                maxdiff = fmax(maxdiff, fabs(want - lora.grads[pa->offset + (size_t)j * I + i]));
                maxref = fmax(maxref, fabs(want));
            }
        for (int o = 0; o < O; o++) /* dB = s G A^T */
            for (int j = 0; j < r; j++) {
                double want = 0.0;
                for (int i = 0; i < I; i++)
                    want += (double)G[(size_t)o * I + i] * A[j * I + i];
                want *= s;
                maxdiff = fmax(maxdiff, fabs(want - lora.grads[pb->offset + (size_t)o * r + j]));
                maxref = fmax(maxref, fabs(want));
            }
        ck_assert_msg(maxref > 0.0, "%s: zero gradient", w->name);
        ck_assert_msg(maxdiff <= 1e-4 * maxref, "%s adapters: max diff %.3e vs %.3e", w->name,
                      maxdiff, maxref);
    }
    ck_assert_int_eq(adapted, 2 * 7 + 1);
    free(lora.grads);
    free(plain.grads);
    free(params);
    free(merged);
    free(tok);
    param_table_free(&t);
    param_table_free(&base);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("lora");
    TCase *tc = tcase_create("lora");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, table_has_adapter_units_after_the_base);
    tcase_add_test(tc, targets_follow_peft_matching);
    tcase_add_test(tc, a_regex_target_matches_whole_names);
    tcase_add_test(tc, all_linear_leaves_out_the_head);
    tcase_add_test(tc, gpt2_lora_matches_pytorch);
    tcase_add_test(tc, llama_lora_is_the_merged_model);
    tcase_add_test(tc, dropout_masks_training_forwards_alike);
    suite_add_tcase(s, tc);
    return testutil_run_suite(s, 0);
}
