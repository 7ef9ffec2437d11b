/* worker/model.c — GPT-2 forward and backward over borrowed parameter units.
 *
 * Activations are one allocation carved by `act_layout`; the backward needs
 * only the running residual gradient and per-layer scratch reused by every
 * layer (zeroed before each use, since ops accumulate), so its memory does
 * not grow with depth. The logits buffer is reused for their gradient once
 * the loss is known: the softmax probabilities are all the backward needs.
 */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/rng.h"
#include "model_parts.h"
#include "tensor_parallel.h"

/* ---- parameter table ---------------------------------------------------- */

struct tensor_spec {
    const char *suffix;
    int rows_mul, cols_mul; /* multiples of C (0: literal 1) */
    int tp_split, tp_parts; /* Megatron's cut (tensor_parallel.h), in whole heads */
};

/* Per-block tensors in their flat order; rows/cols are multiples of C.
 * Tensor parallelism: the query-key-value projection is column-parallel by
 * heads (three row parts cut alike), the MLP's first layer column-parallel,
 * the two output projections row-parallel; norms and the row-parallel
 * biases (added once, after the sum over ranks) are whole on every rank. */
static const struct tensor_spec block_specs[] = {
    {"ln_1.weight", 1, 0, TP_REPLICATED, 1}, {"ln_1.bias", 1, 0, TP_REPLICATED, 1},
    {"attn.qkv.weight", 3, 1, TP_ROWS, 3},   {"attn.qkv.bias", 3, 0, TP_ROWS, 3},
    {"attn.proj.weight", 1, 1, TP_COLS, 1},  {"attn.proj.bias", 1, 0, TP_REPLICATED, 1},
    {"ln_2.weight", 1, 0, TP_REPLICATED, 1}, {"ln_2.bias", 1, 0, TP_REPLICATED, 1},
    {"mlp.fc.weight", 4, 1, TP_ROWS, 1},     {"mlp.fc.bias", 4, 0, TP_ROWS, 1},
    {"mlp.proj.weight", 1, 4, TP_COLS, 1},   {"mlp.proj.bias", 1, 0, TP_REPLICATED, 1},
};
#define N_BLOCK_TENSORS ((int)(sizeof block_specs / sizeof block_specs[0]))

/* Index of tensor k of block l in the table (after wte, wpe). */
static int block_tensor(int l, int k)
{
    return 2 + l * N_BLOCK_TENSORS + k;
}

enum {
    T_LN1W,
    T_LN1B,
    T_QKVW,
    T_QKVB,
    T_PROJW,
    T_PROJB,
    T_LN2W,
    T_LN2B,
    T_FCW,
    T_FCB,
    T_FCPW,
    T_FCPB
};

static const char *const shape_keys[5] = {"vocab_size", "block_size", "n_layer", "n_head",
                                          "n_embd"};

void gpt2_describe(const struct gpt2_config *cfg, struct zt_kvlist *shape)
{
    const int dims[5] = {cfg->vocab_size, cfg->block_size, cfg->n_layer, cfg->n_head, cfg->n_embd};
    zt_kv_init(shape, "gpt2");
    for (int k = 0; k < 5; k++)
        zt_kv_add_int(shape, shape_keys[k], dims[k]);
}

struct gpt2_config gpt2_config_of(const struct param_table *t)
{
    const struct zt_kv *d = t->shape.items;
    ZT_ASSERT(t->family == &gpt2_family && t->shape.n == 5);
    return (struct gpt2_config){(int)d[0].i, (int)d[1].i, (int)d[2].i, (int)d[3].i, (int)d[4].i};
}

/* The config a "gpt2" shape describes: every key present as an integer in
 * range, n_embd a multiple of n_head. */
static zt_status config_from_shape(const struct zt_kvlist *shape, struct gpt2_config *cfg)
{
    int dims[5];
    for (int k = 0; k < 5; k++) {
        const struct zt_kv *kv = zt_kv_find(shape, shape_keys[k]);
        if (!kv || kv->is_real || kv->i < 1 || kv->i > (1 << 24))
            return zt_error_set(ZT_ERR_CHECKPOINT, "gpt2 model shape: %s is %s", shape_keys[k],
                                !kv ? "missing" : "not an integer in 1 .. 2^24");
        dims[k] = (int)kv->i;
    }
    *cfg = (struct gpt2_config){dims[0], dims[1], dims[2], dims[3], dims[4]};
    if (cfg->n_embd % cfg->n_head != 0 || cfg->n_layer + 2 > MODEL_MAX_UNITS)
        return zt_error_set(ZT_ERR_CHECKPOINT,
                            "gpt2 model shape: n_embd %d is not a multiple of n_head %d, or "
                            "n_layer %d is above %d",
                            cfg->n_embd, cfg->n_head, cfg->n_layer, MODEL_MAX_UNITS - 2);
    return ZT_OK;
}

static zt_status table_from_shape(const struct zt_kvlist *shape, struct param_table *out)
{
    struct gpt2_config cfg;
    ZT_TRY(config_from_shape(shape, &cfg));
    return gpt2_table_build(&cfg, out);
}

/* What a slice of tensor s must keep together: the attention's weights
 * are cut in whole heads, the MLP's anywhere. */
static int head_rows(const struct gpt2_config *cfg, const struct tensor_spec *s)
{
    return strncmp(s->suffix, "attn.", 5) == 0 ? cfg->n_embd / cfg->n_head : 1;
}

zt_status gpt2_table_build(const struct gpt2_config *cfg, struct param_table *out)
{
    const int L = cfg->n_layer, C = cfg->n_embd;
    memset(out, 0, sizeof *out);
    out->family = &gpt2_family;
    gpt2_describe(cfg, &out->shape);
    out->n_units = L + 2;
    out->tensors = calloc((size_t)(2 + L * N_BLOCK_TENSORS + 2), sizeof *out->tensors);
    out->unit_offset = calloc((size_t)out->n_units + 1, sizeof *out->unit_offset);
    if (!out->tensors || !out->unit_offset) {
        param_table_free(out);
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the parameter table");
    }
    size_t off = 0;
    model_table_add(out, "wte.weight", cfg->vocab_size, C, 0, &off);
    model_table_mark_vocab(out); /* vocabulary-parallel embedding and head */
    model_table_add(out, "wpe.weight", cfg->block_size, C, 0, &off);
    for (int l = 0; l < L; l++) {
        out->unit_offset[1 + l] = off;
        for (int k = 0; k < N_BLOCK_TENSORS; k++) {
            const struct tensor_spec *s = &block_specs[k];
            char name[48];
            snprintf(name, sizeof name, "h.%d.%s", l, s->suffix);
            model_table_add(out, name, s->rows_mul * C, s->cols_mul ? s->cols_mul * C : 1, 1 + l,
                            &off);
            model_table_mark_tp(out, s->tp_split, s->tp_parts,
                                s->tp_split == TP_REPLICATED ? 1 : head_rows(cfg, s));
            if (s->cols_mul)
                model_table_mark_linear(out, PARAM_LINEAR);
        }
    }
    out->unit_offset[L + 1] = off;
    model_table_add(out, "ln_f.weight", C, 1, L + 1, &off);
    model_table_add(out, "ln_f.bias", C, 1, L + 1, &off);
    out->unit_offset[L + 2] = off;
    out->n_params = off;
    return ZT_OK;
}

static int is_residual_projection(const char *name)
{
    size_t n = strlen(name);
    return (n > 16 && strcmp(name + n - 16, "attn.proj.weight") == 0) ||
           (n > 15 && strcmp(name + n - 15, "mlp.proj.weight") == 0);
}

static int is_layernorm_weight(const char *name)
{
    return strstr(name, "ln_") && strstr(name, ".weight");
}

void gpt2_init_params(const struct param_table *t, uint64_t seed, size_t begin, size_t end,
                      float *dst)
{
    const uint64_t key = rng_key(seed, "init");
    const double std = 0.02, residual_std = 0.02 / sqrt(2.0 * gpt2_config_of(t).n_layer);
    for (int k = 0; k < t->n_tensors; k++) {
        const struct param_tensor *p = &t->tensors[k];
        size_t lo = p->offset > begin ? p->offset : begin;
        size_t hi = p->offset + p->numel < end ? p->offset + p->numel : end;
        if (lo >= hi)
            continue;
        if (p->cols == 1) {
            float v = is_layernorm_weight(p->name) ? 1.0f : 0.0f;
            for (size_t i = lo; i < hi; i++)
                dst[i - begin] = v;
        } else {
            double s = is_residual_projection(p->name) ? residual_std : std;
            model_init_normal(key, lo, hi, s, dst + (lo - begin));
        }
    }
}

static int blocks(const struct param_table *t)
{
    return gpt2_config_of(t).n_layer;
}

/* GPT-2's head is always the token embedding. */
static int head_tied(const struct param_table *t)
{
    (void)t;
    return 1;
}

double gpt2_flops_per_token(const struct gpt2_config *cfg, int T)
{
    const double C = cfg->n_embd, L = cfg->n_layer;
    double matmul_params = L * 12.0 * C * C + (double)cfg->vocab_size * C; /* blocks + head */
    return 6.0 * matmul_params + 12.0 * L * T * C;
}

/* ---- activation layout ---------------------------------------------------- */

#define STAT MODEL_STAT
#define take model_layout_take

/* The sizes one rank computes with: the whole model's, or under tensor
 * parallelism its slice's (tensor_parallel.h): its heads, attention and
 * MLP widths and vocabulary slice [v_lo, v_lo + V); the residual stream
 * (C) is whole on every rank. */
struct gpt2_dims {
    int C, NH, hs, A, F, V, v_lo, tp_rank;
    int sp; /* the residual stream holds 1/sp of the token rows (model_sp_rows) */
};

static struct gpt2_dims dims_of(const struct param_table *t)
{
    const struct gpt2_config c = gpt2_config_of(t);
    const int tp = param_table_tp_size(t), V = param_table_vocab_padded(t) / tp;
    return (struct gpt2_dims){.C = c.n_embd,
                              .NH = c.n_head / tp,
                              .hs = c.n_embd / c.n_head,
                              .A = c.n_embd / tp,
                              .F = 4 * c.n_embd / tp,
                              .V = V,
                              .v_lo = param_table_tp_rank(t) * V,
                              .tp_rank = param_table_tp_rank(t),
                              .sp = tp > 1 && t->tp_sequence ? tp : 1};
}

/* Offsets (in bytes) of every activation inside the one allocation:
 * activations in the table's compute type, statistics (norm means and
 * 1/std, attention's log-sum-exps, losses) in fp32, each region starting
 * 4-byte aligned.
 * Every layer's output is kept (it is the next layer's input); a layer's
 * internals (what its backward reads) are kept only when the layer is not
 * checkpointed. Checkpointed layers recompute their internals into one
 * shared buffer during the backward. The residual stream and the norms
 * hold R rows: B*T, or this rank's share under sequence parallelism. */
struct act_layout {
    size_t encoded, lnf, lnf_mean, lnf_rstd, logits, probs, losses, loss_stats;
    size_t outputs0;                 /* L outputs of B*T*C floats each */
    size_t internals0, layer_stride; /* kept internals, one stride per kept layer */
    size_t recompute;                /* one stride for checkpointed layers (if any) */
    size_t ln1, ln1_mean, ln1_rstd, qkv, atty, lse, res2, ln2, ln2_mean, ln2_rstd, fch,
        fch_gelu; /* offsets inside a layer's internals */
    size_t total;
};

static struct act_layout act_layout_of(const struct param_table *t, int B, int T, int ckpt_every,
                                       const struct model_stage *st)
{
    const struct gpt2_dims d = dims_of(t);
    const size_t BT = (size_t)B * T, R = BT / (size_t)d.sp, C = d.C, NH = d.NH, A = d.A, F = d.F;
    const size_t V = st->last ? (size_t)d.V : 0, head = st->last ? 1 : 0;
    const size_t sliced = model_vocab_split(t) ? 1 : 0;
    const int nb = st->end_block - st->first_block;
    const int n_ckpt = model_stage_checkpointed(ckpt_every, st);
    const size_t es = zt_dtype_size(t->compute), f = sizeof(float);
    struct act_layout a;
    size_t o = 0;
    a.ln1 = take(&o, R * C, es);
    a.ln1_mean = take(&o, R, f);
    a.ln1_rstd = take(&o, R, f);
    a.qkv = take(&o, BT * 3 * A, es);
    a.atty = take(&o, BT * A, es);
    a.lse = take(&o, (size_t)B * NH * T, f); /* attention's row log-sum-exps */
    a.res2 = take(&o, R * C, es);
    a.ln2 = take(&o, R * C, es);
    a.ln2_mean = take(&o, R, f);
    a.ln2_rstd = take(&o, R, f);
    a.fch = take(&o, BT * F, es);
    a.fch_gelu = take(&o, BT * F, es);
    a.layer_stride = o;

    o = 0;
    a.encoded = take(&o, R * C, es);
    a.outputs0 = take(&o, R * C * (size_t)nb, es);
    a.internals0 = take(&o, a.layer_stride * (size_t)(nb - n_ckpt), 1);
    a.recompute = take(&o, n_ckpt > 0 ? a.layer_stride : 0, 1);
    /* The final norm (all B*T rows: the head's input), logits and
     * losses: the last stage's only. */
    a.lnf = take(&o, BT * C * head, es);
    a.lnf_mean = take(&o, R * head, f);
    a.lnf_rstd = take(&o, R * head, f);
    a.logits = take(&o, BT * V, es);
    a.probs = take(&o, BT * V, es);
    a.losses = take(&o, BT * head, f);
    a.loss_stats = take(&o, 3 * BT * head * sliced, f); /* model_vocab_loss_forward's */
    a.total = o;
    return a;
}

/* Where layer l's internals live: its own kept block, or the shared
 * recompute buffer when it is checkpointed. */
static unsigned char *layer_internals(const struct gpt2 *m, const struct act_layout *a, int l)
{
    if (model_block_checkpointed(m->ckpt_every, l))
        return m->acts + a->recompute;
    const int kept_before = model_stage_kept_before(m->ckpt_every, &m->base.stage, l);
    return m->acts + a->internals0 + (size_t)kept_before * a->layer_stride;
}

/* Layer l's output; the layer before the stage's first is its input (the
 * embedding output, or what the previous stage sent). */
static unsigned char *layer_output(const struct gpt2 *m, const struct act_layout *a, int l)
{
    const size_t btc = (size_t)model_sp_rows(&m->base) * dims_of(m->base.table).C *
                       zt_dtype_size(model_act(&m->base));
    const int first = m->base.stage.first_block;
    return l < first ? m->acts + a->encoded : m->acts + a->outputs0 + (size_t)(l - first) * btc;
}

/* Backward scratch, reused by every layer. Under sequence parallelism
 * also the forward's: `gathered` takes a column-parallel layer's gathered
 * input (or gradient), dln a partial sum of B*T rows before its
 * reduce-scatter into dln_rows, dnorm a norm's weight gradients before
 * their sum; without it dln_rows is dln and the others are empty. */
struct scratch_layout {
    size_t dres, dln, datty, dqkv, dfch, dfch_gelu, gathered, dln_rows, dnorm, total;
};

static struct scratch_layout scratch_layout_of(const struct param_table *t, int B, int T)
{
    const struct gpt2_dims d = dims_of(t);
    const size_t BT = (size_t)B * T, R = BT / (size_t)d.sp, C = d.C, A = d.A, F = d.F;
    const size_t sequence = d.sp > 1 ? 1 : 0, es = zt_dtype_size(t->compute);
    struct scratch_layout s;
    size_t o = 0;
    s.dres = take(&o, R * C, es);
    s.dln = take(&o, BT * C, es);
    s.datty = take(&o, BT * A, es);
    s.dqkv = take(&o, BT * 3 * A, es);
    s.dfch = take(&o, BT * F, es);
    s.dfch_gelu = take(&o, BT * F, es);
    s.gathered = take(&o, BT * C * sequence, es);
    s.dln_rows = take(&o, R * C * sequence, es);
    s.dln_rows = sequence ? s.dln_rows : s.dln;
    s.dnorm = take(&o, 2 * C * sequence, sizeof(float));
    s.total = o;
    return s;
}

/* gpt2_create, borrowing the backward scratch of `lender` when not NULL
 * (model_create_slot). */
static zt_status gpt2_create_lent(const struct param_table *t, const struct compute_backend *be,
                                  int B, int T, int ckpt_every, const struct model_stage *stage,
                                  const struct gpt2 *lender, struct gpt2 *out)
{
    const struct device *dev = &be->dev;
    memset(out, 0, sizeof *out);
    out->base.family = &gpt2_family;
    out->base.table = t;
    out->ops = be->ops;
    out->dev = dev;
    out->base.plan = !device_is_real(dev);
    out->ckpt_every = ckpt_every;
    out->base.B = B;
    out->base.T = T;
    out->base.stage = *stage;
    out->base.cp_kv_width = 2 * dims_of(t).A; /* as many key/value heads as query heads */
    out->base.cp_pos_width = dims_of(t).C;
    out->act_bytes = act_layout_of(t, B, T, ckpt_every, stage).total;
    out->scratch_bytes = scratch_layout_of(t, B, T).total;
    out->scratch_lent = lender != NULL;
    model_stage_boundary_size(&out->base, (size_t)model_sp_rows(&out->base) * dims_of(t).C);
    const size_t tok_bytes = (size_t)B * T * sizeof(int32_t);
    zt_status s;
    void *p;
    if ((s = device_alloc(dev, LEDGER_ACTIVATIONS, out->act_bytes, "activations", &p)) != ZT_OK)
        goto fail;
    out->acts = p;
    out->n_allocated = 1;
    p = lender ? lender->scratch : NULL;
    if (!lender && (s = device_alloc(dev, LEDGER_WORKSPACE, out->scratch_bytes, "backward scratch",
                                     &p)) != ZT_OK)
        goto fail;
    out->scratch = p;
    out->n_allocated = 2;
    if ((s = device_alloc(dev, LEDGER_ACTIVATIONS, 2 * tok_bytes, "token batch", &p)) != ZT_OK)
        goto fail;
    out->inputs = p;
    out->targets = p ? out->inputs + (size_t)B * T : NULL;
    out->n_allocated = 3;
    if (out->base.plan)
        return ZT_OK;
    const struct act_layout a = act_layout_of(t, B, T, ckpt_every, stage);
    unsigned char *dres = out->scratch + scratch_layout_of(t, B, T).dres;
    model_stage_boundaries(&out->base, out->acts + a.encoded,
                           layer_output(out, &a, stage->end_block - 1), dres);
    return ZT_OK;
fail:
    gpt2_destroy(out);
    return s;
}

zt_status gpt2_create(const struct param_table *t, const struct compute_backend *be, int B, int T,
                      int ckpt_every, const struct model_stage *stage, struct gpt2 *out)
{
    return gpt2_create_lent(t, be, B, T, ckpt_every, stage, NULL, out);
}

void gpt2_destroy(struct gpt2 *m)
{
    const size_t tok_bytes = (size_t)m->base.B * m->base.T * sizeof(int32_t);
    if (m->n_allocated >= 3)
        device_free(m->dev, LEDGER_ACTIVATIONS, 2 * tok_bytes, m->inputs);
    if (m->n_allocated >= 2 && !m->scratch_lent)
        device_free(m->dev, LEDGER_WORKSPACE, m->scratch_bytes, m->scratch);
    if (m->n_allocated >= 1)
        device_free(m->dev, LEDGER_ACTIVATIONS, m->act_bytes, m->acts);
    memset(m, 0, sizeof *m);
}

/* ---- forward -------------------------------------------------------------- */

static zt_status block_forward(struct gpt2 *m, const struct model_unit_hooks *h, int l,
                               const void *w, const void *x, unsigned char *layer, void *out)
{
    const struct param_table *t = m->base.table;
    const struct ops_backend *ops = m->ops;
    const struct gpt2_dims d = dims_of(t);
    const struct act_layout a =
        act_layout_of(t, m->base.B, m->base.T, m->ckpt_every, &m->base.stage);
    const struct scratch_layout s = scratch_layout_of(t, m->base.B, m->base.T);
    const int BT = m->base.B * m->base.T, R = model_sp_rows(&m->base), C = d.C, A = d.A, F = d.F;
    /* a row-parallel projection's bias is added once, by the first slice */
    const int bias_here = d.tp_rank == 0;
    const enum zt_dtype at = model_act(&m->base);
    void *gathered = m->scratch + s.gathered, *partial;
    const void *ln1, *ln2;
#define P(k) model_param_in(t, block_tensor(l, k), w)
    MODEL_TIMED(m, MODEL_PROF_NORM,
                ops->layernorm_forward(ops, at, layer + a.ln1, STAT(layer + a.ln1_mean),
                                       STAT(layer + a.ln1_rstd), x, P(T_LN1W), P(T_LN1B), R, C));
    MODEL_PROBE(&m->base, l, block_tensor(l, T_LN1W), "output", layer + a.ln1, (size_t)R * C);
    ZT_TRY(model_sp_gather(&m->base, h, layer + a.ln1, gathered, C, &ln1));
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                model_linear_forward(&m->base, ops, l, FP8_GEMM_QKV, layer + a.qkv, ln1, P(T_QKVW),
                                     P(T_QKVB), BT, C, 3 * A));
    ZT_TRY(model_lora_forward(&m->base, block_tensor(l, T_QKVW), 1, layer + a.qkv, ln1, BT));
    MODEL_PROBE(&m->base, l, block_tensor(l, T_QKVW), "output", layer + a.qkv, (size_t)BT * 3 * A);
    /* GPT-2 has as many key/value heads as query heads: NKV = NH. */
    MODEL_TIMED(m, MODEL_PROF_ATTENTION,
                model_attention_forward(&m->base, ops, h, layer + a.atty, STAT(layer + a.lse),
                                        layer + a.qkv, d.NH, d.NH, d.hs));
    MODEL_PROBE(&m->base, l, -1, "attention output", layer + a.atty, (size_t)BT * A);
    /* attn projection output is staged in res2 then the residual added in place */
    partial = model_sp_partial(&m->base, layer + a.res2, m->scratch + s.dln);
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                model_linear_forward(&m->base, ops, l, FP8_GEMM_ATTN_OUT, partial, layer + a.atty,
                                     P(T_PROJW), bias_here ? P(T_PROJB) : NULL, BT, A, C));
    ZT_TRY(model_lora_forward(&m->base, block_tensor(l, T_PROJW), 1, partial, layer + a.atty, BT));
    ZT_TRY(model_sp_reduce(&m->base, h, partial, layer + a.res2, C));
    MODEL_TIMED(m, MODEL_PROF_RESIDUAL,
                ops->residual_forward(ops, at, layer + a.res2, layer + a.res2, x, R * C));
    MODEL_PROBE(&m->base, l, block_tensor(l, T_PROJW), "output plus the residual", layer + a.res2,
                (size_t)R * C);
    MODEL_TIMED(m, MODEL_PROF_NORM,
                ops->layernorm_forward(ops, at, layer + a.ln2, STAT(layer + a.ln2_mean),
                                       STAT(layer + a.ln2_rstd), layer + a.res2, P(T_LN2W),
                                       P(T_LN2B), R, C));
    MODEL_PROBE(&m->base, l, block_tensor(l, T_LN2W), "output", layer + a.ln2, (size_t)R * C);
    ZT_TRY(model_sp_gather(&m->base, h, layer + a.ln2, gathered, C, &ln2));
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                model_linear_forward(&m->base, ops, l, FP8_GEMM_MLP_IN, layer + a.fch, ln2,
                                     P(T_FCW), P(T_FCB), BT, C, F));
    ZT_TRY(model_lora_forward(&m->base, block_tensor(l, T_FCW), 1, layer + a.fch, ln2, BT));
    MODEL_PROBE(&m->base, l, block_tensor(l, T_FCW), "output", layer + a.fch, (size_t)BT * F);
    MODEL_TIMED(m, MODEL_PROF_ACTIVATION,
                ops->gelu_forward(ops, at, layer + a.fch_gelu, layer + a.fch, BT * F));
    MODEL_PROBE(&m->base, l, -1, "mlp GELU output", layer + a.fch_gelu, (size_t)BT * F);
    partial = model_sp_partial(&m->base, out, m->scratch + s.dln);
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                model_linear_forward(&m->base, ops, l, FP8_GEMM_MLP_OUT, partial,
                                     layer + a.fch_gelu, P(T_FCPW), bias_here ? P(T_FCPB) : NULL,
                                     BT, F, C));
    ZT_TRY(
        model_lora_forward(&m->base, block_tensor(l, T_FCPW), 1, partial, layer + a.fch_gelu, BT));
    ZT_TRY(model_sp_reduce(&m->base, h, partial, out, C));
    MODEL_TIMED(m, MODEL_PROF_RESIDUAL,
                ops->residual_forward(ops, at, out, out, layer + a.res2, R * C));
    MODEL_PROBE(&m->base, l, block_tensor(l, T_FCPW), "output plus the residual", out,
                (size_t)R * C);
#undef P
    return ZT_OK;
}

zt_status gpt2_forward(struct gpt2 *m, const struct model_unit_hooks *h, const int32_t *inputs,
                       const int32_t *targets)
{
    const struct param_table *t = m->base.table;
    const struct gpt2_dims d = dims_of(t);
    const struct act_layout a =
        act_layout_of(t, m->base.B, m->base.T, m->ckpt_every, &m->base.stage);
    const int B = m->base.B, T = m->base.T, BT = B * T, C = d.C, L = gpt2_config_of(t).n_layer;
    const size_t tok_bytes = (size_t)BT * sizeof(int32_t);
    unsigned char *acts = m->acts;
    const void *w;

    if (m->base.plan)
        return model_plan_walk(&m->base, h, MODEL_PASS_FORWARD);
    ZT_TRY(m->dev->ops->copy_from_host(m->dev, m->inputs, inputs, tok_bytes));
    ZT_TRY(m->dev->ops->copy_from_host(m->dev, m->targets, targets, tok_bytes));
    ZT_TRY(h->pass_begin(h->ctx, MODEL_PASS_FORWARD));

    if (m->base.stage.first) {
        const void *wpe;
        ZT_TRY(model_unit_acquire(&m->base, h, 0, &w));
        ZT_TRY(model_cp_positions(&m->base, model_param_in(t, 1, w), &wpe));
        ZT_TRY(model_vocab_embed_forward(&m->base, m->ops, h, acts + a.encoded,
                                         m->scratch + scratch_layout_of(t, B, T).dln, m->inputs,
                                         model_param_in(t, 0, w), wpe, C, d.V, d.v_lo));
        MODEL_PROBE(&m->base, -1, -1, "embedding output (token + position)", acts + a.encoded,
                    (size_t)model_sp_rows(&m->base) * C);
        ZT_TRY(model_unit_release(&m->base, h, 0));
    }
    for (int l = m->base.stage.first_block; l < m->base.stage.end_block; l++) {
        ZT_TRY(model_unit_acquire(&m->base, h, 1 + l, &w));
        ZT_TRY(block_forward(m, h, l, w, layer_output(m, &a, l - 1), layer_internals(m, &a, l),
                             layer_output(m, &a, l)));
        ZT_TRY(model_unit_release(&m->base, h, 1 + l));
    }
    if (!m->base.stage.last) {
        ZT_TRY(h->pass_end(h->ctx, MODEL_PASS_FORWARD));
        return model_stage_no_loss(&m->base);
    }
    const void *x = layer_output(m, &a, L - 1);
    const enum zt_dtype at = model_act(&m->base);

    const int k_lnf = 2 + L * N_BLOCK_TENSORS;
    /* the norm of this rank's rows, gathered in place to the head's B*T */
    void *lnf_rows = acts + a.lnf + model_sp_offset(&m->base, C) * zt_dtype_size(at);
    const void *lnf;
    ZT_TRY(model_unit_acquire(&m->base, h, L + 1, &w));
    MODEL_TIMED(m, MODEL_PROF_NORM,
                m->ops->layernorm_forward(m->ops, at, lnf_rows, STAT(acts + a.lnf_mean),
                                          STAT(acts + a.lnf_rstd), x, model_param_in(t, k_lnf, w),
                                          model_param_in(t, k_lnf + 1, w), model_sp_rows(&m->base),
                                          C));
    MODEL_PROBE(&m->base, L, k_lnf, "output", lnf_rows, (size_t)model_sp_rows(&m->base) * C);
    ZT_TRY(model_unit_release(&m->base, h, L + 1));
    ZT_TRY(model_sp_gather(&m->base, h, lnf_rows, acts + a.lnf, C, &lnf));

    /* the head: this rank's vocabulary slice of the logits, never all of them */
    ZT_TRY(model_unit_acquire(&m->base, h, 0, &w));
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                m->ops->matmul_forward(m->ops, at, acts + a.logits, lnf, model_param_in(t, 0, w),
                                       NULL, BT, C, d.V));
    MODEL_PROBE(&m->base, L, -1, "logits (the head's output)", acts + a.logits, (size_t)BT * d.V);
    ZT_TRY(model_unit_release(&m->base, h, 0));
    ZT_TRY(model_vocab_loss_forward(&m->base, m->ops, h, STAT(acts + a.losses), acts + a.probs,
                                    acts + a.logits, m->targets, STAT(acts + a.loss_stats), BT, d.V,
                                    d.v_lo));
    ZT_TRY(h->pass_end(h->ctx, MODEL_PASS_FORWARD));

    return model_read_mean_loss(&m->base, m->dev, STAT(acts + a.losses), targets, BT);
}

/* ---- backward ------------------------------------------------------------- */

/* Zeroes n activations (of the compute type) at p. */
static zt_status zero(struct gpt2 *m, void *p, size_t n)
{
    MODEL_TIMED(m, MODEL_PROF_ZERO,
                m->dev->ops->memset_zero(m->dev, p, n * zt_dtype_size(model_act(&m->base))));
    return ZT_OK;
}

/* A LayerNorm's backward over this rank's rows: dinp += the input
 * gradient, and the weight and bias gradients (gw, gb; NULL: frozen)
 * accumulated, summed over the ranks under sequence parallelism. */
static zt_status norm_backward(struct gpt2 *m, const struct model_unit_hooks *h, void *dinp,
                               float *gw, float *gb, const void *dout, const void *inp,
                               const void *weight, const float *mean, const float *rstd)
{
    const int C = dims_of(m->base.table).C;
    float *dnorm = STAT(m->scratch + scratch_layout_of(m->base.table, m->base.B, m->base.T).dnorm);
    float *dw, *db;
    ZT_TRY(model_sp_norm_grad(&m->base, m->ops, gw, dnorm, (size_t)C, &dw));
    ZT_TRY(model_sp_norm_grad(&m->base, m->ops, gb, dnorm + C, (size_t)C, &db));
    MODEL_TIMED(m, MODEL_PROF_NORM,
                m->ops->layernorm_backward(m->ops, model_act(&m->base), dinp, dw, db, dout, inp,
                                           weight, mean, rstd, model_sp_rows(&m->base), C));
    ZT_TRY(model_sp_norm_done(&m->base, m->ops, h, gw, dnorm, (size_t)C));
    return model_sp_norm_done(&m->base, m->ops, h, gb, dnorm + C, (size_t)C);
}

/* A column-parallel layer's input gradient: this rank's part of the sum
 * over the slices, computed by `matmul` into dln (zeroed first) and
 * completed into the rows the norm below reads (Megatron's conjugate of
 * the forward's allreduce, or of its gather). */
static void *dln_partial(struct gpt2 *m, const struct scratch_layout *s)
{
    return model_sp_partial(&m->base, m->scratch + s->dln_rows, m->scratch + s->dln);
}

static zt_status block_backward(struct gpt2 *m, const struct model_unit_hooks *h, int l,
                                const void *w, float *g, const void *x, const unsigned char *layer)
{
    const struct param_table *t = m->base.table;
    const struct ops_backend *ops = m->ops;
    const struct gpt2_dims d = dims_of(t);
    const struct act_layout a =
        act_layout_of(t, m->base.B, m->base.T, m->ckpt_every, &m->base.stage);
    const struct scratch_layout s = scratch_layout_of(t, m->base.B, m->base.T);
    const int B = m->base.B, T = m->base.T, BT = B * T, C = d.C, A = d.A, F = d.F;
    const enum zt_dtype at = model_act(&m->base);
    unsigned char *sc = m->scratch, *dres = sc + s.dres, *gathered = sc + s.gathered;
    void *dln = dln_partial(m, &s);
    const void *dout, *ln;
#define P(k) model_param_in(t, block_tensor(l, k), w)
#define G(k) model_grad_in(t, block_tensor(l, k), g)
    /* dres holds d loss / d res3 on entry and d loss / d x on exit, this
     * rank's rows of them. Under tensor parallelism a row-parallel layer's
     * output gradient is whole on every rank (gathered from the rows under
     * sequence parallelism), and a column-parallel layer's input gradient
     * is this rank's part of a sum, completed over the ranks before the
     * norm below it. A row-parallel bias's gradient is the same on every
     * rank. */
    ZT_TRY(model_sp_gather(&m->base, h, dres, gathered, C, &dout));
    ZT_TRY(zero(m, sc + s.dfch_gelu, (size_t)BT * F));
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                model_linear_backward(&m->base, ops, l, FP8_GEMM_MLP_OUT, sc + s.dfch_gelu,
                                      G(T_FCPW), G(T_FCPB), dout, layer + a.fch_gelu, P(T_FCPW), BT,
                                      F, C));
    ZT_TRY(model_lora_backward(&m->base, h, block_tensor(l, T_FCPW), 1, sc + s.dfch_gelu, dout,
                               layer + a.fch_gelu, BT));
    ZT_TRY(zero(m, sc + s.dfch, (size_t)BT * F));
    MODEL_TIMED(m, MODEL_PROF_ACTIVATION,
                ops->gelu_backward(ops, at, sc + s.dfch, layer + a.fch, sc + s.dfch_gelu, BT * F));
    ZT_TRY(model_sp_gather(&m->base, h, layer + a.ln2, gathered, C, &ln));
    ZT_TRY(zero(m, dln, (size_t)BT * C));
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                model_linear_backward(&m->base, ops, l, FP8_GEMM_MLP_IN, dln, G(T_FCW), G(T_FCB),
                                      sc + s.dfch, ln, P(T_FCW), BT, C, F));
    ZT_TRY(model_lora_backward(&m->base, h, block_tensor(l, T_FCW), 1, dln, sc + s.dfch, ln, BT));
    ZT_TRY(model_sp_reduce(&m->base, h, dln, sc + s.dln_rows, C));
    ZT_TRY(norm_backward(m, h, dres, G(T_LN2W), G(T_LN2B), sc + s.dln_rows, layer + a.res2,
                         P(T_LN2W), STAT(layer + a.ln2_mean), STAT(layer + a.ln2_rstd)));
    ZT_TRY(model_sp_gather(&m->base, h, dres, gathered, C, &dout));
    ZT_TRY(zero(m, sc + s.datty, (size_t)BT * A));
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                model_linear_backward(&m->base, ops, l, FP8_GEMM_ATTN_OUT, sc + s.datty, G(T_PROJW),
                                      G(T_PROJB), dout, layer + a.atty, P(T_PROJW), BT, A, C));
    ZT_TRY(model_lora_backward(&m->base, h, block_tensor(l, T_PROJW), 1, sc + s.datty, dout,
                               layer + a.atty, BT));
    ZT_TRY(zero(m, sc + s.dqkv, (size_t)BT * 3 * A));
    MODEL_TIMED(m, MODEL_PROF_ATTENTION,
                model_attention_backward(&m->base, ops, h, sc + s.dqkv, sc + s.datty, layer + a.qkv,
                                         layer + a.atty, STAT(layer + a.lse), d.NH, d.NH, d.hs));
    ZT_TRY(model_sp_gather(&m->base, h, layer + a.ln1, gathered, C, &ln));
    ZT_TRY(zero(m, dln, (size_t)BT * C));
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                model_linear_backward(&m->base, ops, l, FP8_GEMM_QKV, dln, G(T_QKVW), G(T_QKVB),
                                      sc + s.dqkv, ln, P(T_QKVW), BT, C, 3 * A));
    ZT_TRY(model_lora_backward(&m->base, h, block_tensor(l, T_QKVW), 1, dln, sc + s.dqkv, ln, BT));
    ZT_TRY(model_sp_reduce(&m->base, h, dln, sc + s.dln_rows, C));
    ZT_TRY(norm_backward(m, h, dres, G(T_LN1W), G(T_LN1B), sc + s.dln_rows, x, P(T_LN1W),
                         STAT(layer + a.ln1_mean), STAT(layer + a.ln1_rstd)));
#undef P
#undef G
    return ZT_OK;
}

/* The loss, the head and the final norm, leaving d loss / d(last layer
 * output) in dres; unit 0's gradient (the tied head's) stays borrowed in
 * *g0 for the embedding's, completed at the end of the backward. */
static zt_status head_backward(struct gpt2 *m, const struct model_unit_hooks *h, float grad_scale,
                               float **g0)
{
    const struct param_table *t = m->base.table;
    const struct gpt2_dims d = dims_of(t);
    const struct act_layout a =
        act_layout_of(t, m->base.B, m->base.T, m->ckpt_every, &m->base.stage);
    const struct scratch_layout s = scratch_layout_of(t, m->base.B, m->base.T);
    const int BT = m->base.B * m->base.T, C = d.C, L = gpt2_config_of(t).n_layer;
    const int k_lnf = 2 + L * N_BLOCK_TENSORS;
    unsigned char *acts = m->acts, *sc = m->scratch, *dres = sc + s.dres;
    float *g;
    const void *w;
    /* The head: logits are no longer needed, their buffer takes dlogits. */
    void *dlogits = acts + a.logits;
    ZT_TRY(zero(m, dlogits, (size_t)BT * d.V));
    ZT_TRY(model_vocab_loss_backward(&m->base, m->ops, dlogits, acts + a.probs, m->targets,
                                     grad_scale / (float)BT, BT, d.V, d.v_lo));
    void *dln = dln_partial(m, &s);
    ZT_TRY(model_unit_acquire(&m->base, h, 0, &w));
    ZT_TRY(model_unit_grads_acquire(&m->base, h, 0, g0));
    ZT_TRY(zero(m, dln, (size_t)BT * C));
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                m->ops->matmul_backward(m->ops, model_act(&m->base), dln, model_grad_in(t, 0, *g0),
                                        NULL, dlogits, acts + a.lnf, model_param_in(t, 0, w), BT, C,
                                        d.V));
    ZT_TRY(model_unit_release(&m->base, h, 0));
    ZT_TRY(model_sp_reduce(&m->base, h, dln, sc + s.dln_rows, C));

    const void *x_last = layer_output(m, &a, L - 1);
    ZT_TRY(model_unit_acquire(&m->base, h, L + 1, &w));
    ZT_TRY(model_unit_grads_acquire(&m->base, h, L + 1, &g));
    ZT_TRY(zero(m, dres, (size_t)model_sp_rows(&m->base) * C));
    ZT_TRY(norm_backward(m, h, dres, model_grad_in(t, k_lnf, g), model_grad_in(t, k_lnf + 1, g),
                         sc + s.dln_rows, x_last, model_param_in(t, k_lnf, w),
                         STAT(acts + a.lnf_mean), STAT(acts + a.lnf_rstd)));
    ZT_TRY(model_unit_release(&m->base, h, L + 1));
    return model_unit_grads_done(&m->base, h, L + 1);
}

zt_status gpt2_backward(struct gpt2 *m, const struct model_unit_hooks *h, float grad_scale)
{
    const struct param_table *t = m->base.table;
    const struct gpt2_dims d = dims_of(t);
    const struct act_layout a =
        act_layout_of(t, m->base.B, m->base.T, m->ckpt_every, &m->base.stage);
    const struct scratch_layout s = scratch_layout_of(t, m->base.B, m->base.T);
    const int C = d.C;
    unsigned char *dres = m->scratch + s.dres;
    const void *w;
    float *g, *g0;

    if (m->base.plan)
        return model_plan_walk(&m->base, h, MODEL_PASS_BACKWARD);
    ZT_TRY(h->pass_begin(h->ctx, MODEL_PASS_BACKWARD));
    g0 = NULL;
    if (m->base.stage.last)
        ZT_TRY(head_backward(m, h, grad_scale, &g0));
    for (int l = m->base.stage.end_block - 1; l >= m->base.stage.first_block; l--) {
        const void *x = layer_output(m, &a, l - 1);
        unsigned char *layer = layer_internals(m, &a, l);
        ZT_TRY(model_unit_acquire(&m->base, h, 1 + l, &w));
        ZT_TRY(model_unit_grads_acquire(&m->base, h, 1 + l, &g));
        /* A checkpointed layer recomputes its internals from its input; one
         * acquisition of its parameters serves the recompute and the
         * backward. The output is rewritten with the same values. */
        if (model_block_checkpointed(m->ckpt_every, l))
            ZT_TRY(block_forward(m, h, l, w, x, layer, layer_output(m, &a, l)));
        ZT_TRY(block_backward(m, h, l, w, g, x, layer));
        ZT_TRY(model_unit_release(&m->base, h, 1 + l));
        ZT_TRY(model_unit_grads_done(&m->base, h, 1 + l));
    }
    /* The tied head (last stage) borrowed unit 0's gradient; the first
     * stage alone borrows it here, for the embedding's backward. */
    if (m->base.stage.first) {
        if (!m->base.stage.last)
            ZT_TRY(model_unit_grads_acquire(&m->base, h, 0, &g0));
        float *dwpe = model_grad_in(t, 1, g0), *dpos;
        ZT_TRY(model_cp_positions_grad(&m->base, dwpe, &dpos));
        ZT_TRY(model_vocab_embed_backward(&m->base, m->ops, h, model_grad_in(t, 0, g0), dpos, dres,
                                          m->scratch + s.gathered, m->inputs, C, d.V, d.v_lo));
        ZT_TRY(model_cp_positions_done(&m->base, dwpe));
    }
    if (m->base.stage.first || m->base.stage.last)
        ZT_TRY(model_unit_grads_done(&m->base, h, 0));
    ZT_TRY(h->pass_end(h->ctx, MODEL_PASS_BACKWARD));
    return ZT_OK;
}

static double flops_per_token(const struct param_table *t, int T)
{
    const struct gpt2_config c = gpt2_config_of(t);
    return gpt2_flops_per_token(&c, T);
}

/* c_attn, attn c_proj, c_fc, mlp c_proj as this rank computes them. */
static void gemm_shapes(const struct param_table *t, int in[FP8_GEMMS], int out[FP8_GEMMS])
{
    const struct gpt2_dims d = dims_of(t);
    const int shapes[FP8_GEMMS][2] = {
        [FP8_GEMM_QKV] = {d.C, 3 * d.A},
        [FP8_GEMM_ATTN_OUT] = {d.A, d.C},
        [FP8_GEMM_MLP_IN] = {d.C, d.F},
        [FP8_GEMM_MLP_OUT] = {d.F, d.C},
    };
    for (int g = 0; g < FP8_GEMMS; g++) {
        in[g] = shapes[g][0];
        out[g] = shapes[g][1];
    }
}

/* ---- the family's instance operations ------------------------------------ */

/* The GPT-2 instance `m` is the base of. */
static struct gpt2 *gpt2_of(struct model *m)
{
    ZT_ASSERT(m->family == &gpt2_family);
    return (struct gpt2 *)m;
}

static zt_status instance_create(const struct param_table *t, const struct compute_backend *be,
                                 int B, int T, int ckpt_every, const struct model_stage *stage,
                                 const struct model *lender, struct model **out)
{
    struct gpt2 *g = malloc(sizeof *g);
    if (!g)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the model");
    const struct gpt2 *from = lender ? gpt2_of((struct model *)lender) : NULL;
    zt_status s = gpt2_create_lent(t, be, B, T, ckpt_every, stage, from, g);
    if (s != ZT_OK) {
        free(g);
        ZT_TRY(s);
    }
    *out = &g->base;
    return ZT_OK;
}

static void instance_destroy(struct model *m)
{
    struct gpt2 *g = gpt2_of(m);
    gpt2_destroy(g);
    free(g);
}

static zt_status instance_forward(struct model *m, const struct model_unit_hooks *h,
                                  const int32_t *inputs, const int32_t *targets)
{
    return gpt2_forward(gpt2_of(m), h, inputs, targets);
}

static zt_status instance_backward(struct model *m, const struct model_unit_hooks *h,
                                   float grad_scale)
{
    return gpt2_backward(gpt2_of(m), h, grad_scale);
}

static size_t activation_bytes(const struct param_table *t, int B, int T, int ckpt_every,
                               const struct model_stage *stage)
{
    return act_layout_of(t, B, T, ckpt_every, stage).total;
}

const struct model_family gpt2_family = {
    .name = "gpt2",
    .table_build = table_from_shape,
    .init_params = gpt2_init_params,
    .blocks = blocks,
    .head_tied = head_tied,
    .flops_per_token = flops_per_token,
    .gemm_shapes = gemm_shapes,
    .activation_bytes = activation_bytes,
    .create = instance_create,
    .destroy = instance_destroy,
    .forward = instance_forward,
    .backward = instance_backward,
};
