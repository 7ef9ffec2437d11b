/* worker/llama.c — the Llama-style family: its table, initial values,
 * pass order, and forward and backward over borrowed parameter units.
 *
 * The activation scheme is GPT-2's (worker/model.c): one allocation for
 * every kept activation, layer outputs always kept, a layer's internals
 * kept unless the layer is checkpointed, in which case the backward
 * recomputes them into one shared buffer from the layer's input; one
 * backward scratch reused by every layer. Two things differ:
 * - RoPE rotates q and k in place inside the fused qkv activation. The
 *   attention backward needs only the rotated values, and the rotation's
 *   backward needs none (it is linear), so the unrotated ones are never
 *   kept.
 * - The rotation angles depend on the position and the head size only, so
 *   their cos/sin tables [T, hs/2] are computed once per instance on the
 *   host in double and copied to the device.
 */
#include "llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/rng.h"
#include "backend.h"
#include "model_parts.h"
#include "tensor_parallel.h"

/* ---- the table ------------------------------------------------------------- */

/* Per-layer tensors in their flat order; the q, k and v biases (Qwen2's
 * attention_bias) last, only in a model that has them, so that a model
 * without keeps its flat layout. */
enum {
    T_IN_NORM,
    T_Q,
    T_K,
    T_V,
    T_O,
    T_POST_NORM,
    T_GATE,
    T_UP,
    T_DOWN,
    T_Q_BIAS,
    T_K_BIAS,
    T_V_BIAS,
    N_LAYER_TENSORS
};

static const char *const layer_suffix[N_LAYER_TENSORS] = {
    "input_layernorm.weight",  "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",    "mlp.up_proj.weight",      "mlp.down_proj.weight",
    "self_attn.q_proj.bias",   "self_attn.k_proj.bias",   "self_attn.v_proj.bias",
};

static int tensors_per_layer(const struct llama_config *c)
{
    return c->attention_bias ? N_LAYER_TENSORS : T_Q_BIAS;
}

static int layer_tensor(const struct llama_config *c, int l, int k)
{
    return 1 + l * tensors_per_layer(c) + k;
}

static int norm_tensor(const struct llama_config *c)
{
    return 1 + c->n_layer * tensors_per_layer(c);
}

/* The head: lm_head after the final norm, or embed_tokens when tied. */
static int head_tensor(const struct llama_config *c)
{
    return c->tie_word_embeddings ? 0 : norm_tensor(c) + 1;
}

static int head_dim(const struct llama_config *c)
{
    return c->n_embd / c->n_head;
}

/* Columns of the fused q|k|v projection. */
static int qkv_width(const struct llama_config *c)
{
    return (c->n_head + 2 * c->n_kv_head) * head_dim(c);
}

static const char *const int_keys[] = {
    "vocab_size", "block_size", "n_layer",           "n_head",
    "n_kv_head",  "n_embd",     "intermediate_size", "tie_word_embeddings"};
#define N_INT_KEYS ((int)(sizeof int_keys / sizeof int_keys[0]))

void llama_describe(const struct llama_config *c, struct zt_kvlist *shape)
{
    const int v[N_INT_KEYS] = {
        c->vocab_size, c->block_size, c->n_layer,           c->n_head,
        c->n_kv_head,  c->n_embd,     c->intermediate_size, c->tie_word_embeddings};
    zt_kv_init(shape, "llama");
    for (int k = 0; k < N_INT_KEYS; k++)
        zt_kv_add_int(shape, int_keys[k], v[k]);
    zt_kv_add_real(shape, "rope_theta", c->rope_theta);
    zt_kv_add_real(shape, "rms_norm_eps", c->rms_norm_eps);
    if (c->attention_bias) /* absent: none, as in shapes written before it */
        zt_kv_add_int(shape, "attention_bias", 1);
}

/* A real entry; an integer is accepted too (a JSON writer may print
 * 10000.0 as 10000). */
static zt_status shape_real(const struct zt_kvlist *shape, const char *key, double *out)
{
    const struct zt_kv *kv = zt_kv_find(shape, key);
    double v = !kv ? 0.0 : kv->is_real ? kv->r : (double)kv->i;
    if (!kv || !(v > 0.0) || !isfinite(v))
        return zt_error_set(ZT_ERR_CHECKPOINT, "llama model shape: %s is %s", key,
                            !kv ? "missing" : "not a positive number");
    *out = v;
    return ZT_OK;
}

static zt_status check_config(const struct llama_config *c)
{
    const char *why = NULL;
    if (c->n_embd % c->n_head != 0)
        why = "n_embd is not a multiple of n_head";
    else if (c->n_head % c->n_kv_head != 0)
        why = "n_head is not a multiple of n_kv_head";
    else if (head_dim(c) % 2 != 0)
        why = "the head size n_embd / n_head is odd (rotary embedding rotates pairs)";
    else if (c->tie_word_embeddings > 1)
        why = "tie_word_embeddings is neither 0 nor 1";
    else if (c->n_layer + 2 > MODEL_MAX_UNITS)
        why = "n_layer is above the most units a model may have";
    if (why)
        return zt_error_set(ZT_ERR_CHECKPOINT,
                            "llama model shape: %s (n_embd %d, n_head %d, n_kv_head %d, "
                            "n_layer %d)",
                            why, c->n_embd, c->n_head, c->n_kv_head, c->n_layer);
    return ZT_OK;
}

zt_status llama_config_from_shape(const struct zt_kvlist *shape, struct llama_config *out)
{
    int v[N_INT_KEYS];
    for (int k = 0; k < N_INT_KEYS; k++) {
        const struct zt_kv *kv = zt_kv_find(shape, int_keys[k]);
        const int64_t lo = k == N_INT_KEYS - 1 ? 0 : 1;
        if (!kv || kv->is_real || kv->i < lo || kv->i > (1 << 24))
            return zt_error_set(ZT_ERR_CHECKPOINT, "llama model shape: %s is %s", int_keys[k],
                                !kv ? "missing" : "not an integer in range");
        v[k] = (int)kv->i;
    }
    struct llama_config c = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], 0.0, 0.0, 0};
    const struct zt_kv *bias = zt_kv_find(shape, "attention_bias");
    if (bias && (bias->is_real || bias->i < 0 || bias->i > 1))
        return zt_error_set(ZT_ERR_CHECKPOINT, "llama model shape: attention_bias is neither 0 "
                                               "nor 1");
    c.attention_bias = bias ? (int)bias->i : 0;
    ZT_TRY(shape_real(shape, "rope_theta", &c.rope_theta));
    ZT_TRY(shape_real(shape, "rms_norm_eps", &c.rms_norm_eps));
    ZT_TRY(check_config(&c));
    *out = c;
    return ZT_OK;
}

struct llama_config llama_config_of(const struct param_table *t)
{
    struct llama_config c;
    ZT_ASSERT(t->family == &llama_family);
    zt_status s = llama_config_from_shape(&t->shape, &c);
    ZT_ASSERT(s == ZT_OK);
    (void)s;
    return c;
}

static void add_layer(struct param_table *t, const struct llama_config *c, int l, size_t *off)
{
    const int C = c->n_embd, hs = head_dim(c), I = c->intermediate_size;
    const int rows[N_LAYER_TENSORS] = {
        C, c->n_head * hs, c->n_kv_head * hs, c->n_kv_head * hs, C, C, I, I,
        C, c->n_head * hs, c->n_kv_head * hs, c->n_kv_head * hs};
    const int cols[N_LAYER_TENSORS] = {1, C, C, C, c->n_head * hs, 1, C, C, I, 1, 1, 1};
    /* Tensor parallelism: q, k, v column-parallel in whole heads, o
     * row-parallel, gate and up column-parallel, down row-parallel. */
    const int split[N_LAYER_TENSORS] = {TP_REPLICATED, TP_ROWS,       TP_ROWS, TP_ROWS,
                                        TP_COLS,       TP_REPLICATED, TP_ROWS, TP_ROWS,
                                        TP_COLS,       TP_ROWS,       TP_ROWS, TP_ROWS};
    const int block[N_LAYER_TENSORS] = {1, hs, hs, hs, hs, 1, 1, 1, 1, hs, hs, hs};
    for (int k = 0; k < tensors_per_layer(c); k++) {
        char name[48];
        snprintf(name, sizeof name, "layers.%d.%s", l, layer_suffix[k]);
        model_table_add(t, name, rows[k], cols[k], 1 + l, off);
        model_table_mark_tp(t, split[k], 1, block[k]);
        if (cols[k] > 1)
            model_table_mark_linear(t, PARAM_LINEAR);
    }
}

static zt_status table_build(const struct zt_kvlist *shape, struct param_table *out)
{
    struct llama_config c;
    memset(out, 0, sizeof *out);
    ZT_TRY(llama_config_from_shape(shape, &c));
    const int L = c.n_layer;
    out->family = &llama_family;
    llama_describe(&c, &out->shape);
    out->n_units = L + 2;
    out->tensors = calloc((size_t)(3 + L * tensors_per_layer(&c)), sizeof *out->tensors);
    out->unit_offset = calloc((size_t)out->n_units + 1, sizeof *out->unit_offset);
    if (!out->tensors || !out->unit_offset) {
        param_table_free(out);
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the parameter table");
    }
    size_t off = 0;
    model_table_add(out, "embed_tokens.weight", c.vocab_size, c.n_embd, 0, &off);
    model_table_mark_vocab(out); /* vocabulary-parallel */
    for (int l = 0; l < L; l++) {
        out->unit_offset[1 + l] = off;
        add_layer(out, &c, l, &off);
    }
    out->unit_offset[L + 1] = off;
    model_table_add(out, "norm.weight", c.n_embd, 1, L + 1, &off);
    if (!c.tie_word_embeddings) {
        model_table_add(out, "lm_head.weight", c.vocab_size, c.n_embd, L + 1, &off);
        model_table_mark_vocab(out);
        model_table_mark_linear(out, PARAM_LINEAR_HEAD);
    }
    out->unit_offset[L + 2] = off;
    out->n_params = off;
    return ZT_OK;
}

/* Hugging Face's initialisation (LlamaPreTrainedModel): every matrix
 * normal(0, initializer_range = 0.02), every norm weight 1, every bias 0. Element i is
 * counter i of rng_key(seed, "init"), so any shard draws the same values. */
static void init_params(const struct param_table *t, uint64_t seed, size_t begin, size_t end,
                        float *dst)
{
    const uint64_t key = rng_key(seed, "init");
    for (int k = 0; k < t->n_tensors; k++) {
        const struct param_tensor *p = &t->tensors[k];
        size_t lo = p->offset > begin ? p->offset : begin;
        size_t hi = p->offset + p->numel < end ? p->offset + p->numel : end;
        const int bias = strstr(p->name, ".bias") != NULL;
        if (lo >= hi)
            continue;
        if (!bias && p->cols > 1) {
            model_init_normal(key, lo, hi, 0.02, dst + (lo - begin));
            continue;
        }
        for (size_t i = lo; i < hi; i++)
            dst[i - begin] = bias ? 0.0f : 1.0f;
    }
}

static int blocks(const struct param_table *t)
{
    return llama_config_of(t).n_layer;
}

static int head_tied(const struct param_table *t)
{
    return llama_config_of(t).tie_word_embeddings;
}

/* 6 x (parameters in matmuls, the head included) + 12 L T C for attention
 * (the PaLM appendix B count, as for GPT-2; C = NH hs). */
static double flops_per_token(const struct param_table *t, int T)
{
    const struct llama_config c = llama_config_of(t);
    const double C = c.n_embd, L = c.n_layer, I = c.intermediate_size;
    const double per_layer = C * qkv_width(&c) + C * C + 3.0 * C * I;
    return 6.0 * (L * per_layer + (double)c.vocab_size * C) + 12.0 * L * T * C;
}

/* ---- the instance ------------------------------------------------------------ */

/* The sizes one rank computes with: the whole model's, or under tensor
 * parallelism its slice's (tensor_parallel.h): its query and key-value
 * heads, MLP width and vocabulary slice [v_lo, v_lo + V); the residual
 * stream (C) is whole on every rank. */
struct llama_dims {
    int C, NH, NKV, hs, QKV, I, V, v_lo, tp_rank, sliced;
    int sp;    /* the residual stream holds 1/sp of the token rows (model_sp_rows) */
    size_t es; /* bytes of one activation: the table's compute type */
};

static struct llama_dims dims_of(const struct param_table *t)
{
    const struct llama_config c = llama_config_of(t);
    const int tp = param_table_tp_size(t), hs = head_dim(&c);
    const int V = param_table_vocab_padded(t) / tp;
    const int NH = c.n_head / tp, NKV = c.n_kv_head / tp;
    return (struct llama_dims){.C = c.n_embd,
                               .NH = NH,
                               .NKV = NKV,
                               .hs = hs,
                               .QKV = (NH + 2 * NKV) * hs,
                               .I = c.intermediate_size / tp,
                               .V = V,
                               .v_lo = param_table_tp_rank(t) * V,
                               .tp_rank = param_table_tp_rank(t),
                               .sliced = model_vocab_split(t),
                               .sp = tp > 1 && t->tp_sequence ? tp : 1,
                               .es = zt_dtype_size(t->compute)};
}

/* q|k|v, o_proj, gate|up, down_proj as this rank computes them. */
static void gemm_shapes(const struct param_table *t, int in[FP8_GEMMS], int out[FP8_GEMMS])
{
    const struct llama_dims d = dims_of(t);
    const int shapes[FP8_GEMMS][2] = {
        [FP8_GEMM_QKV] = {d.C, d.QKV},
        [FP8_GEMM_ATTN_OUT] = {d.NH * d.hs, d.C},
        [FP8_GEMM_MLP_IN] = {d.C, 2 * d.I},
        [FP8_GEMM_MLP_OUT] = {d.I, d.C},
    };
    for (int g = 0; g < FP8_GEMMS; g++) {
        in[g] = shapes[g][0];
        out[g] = shapes[g][1];
    }
}

struct llama {
    struct model base; /* first: a `struct model *` of this family points here */
    struct llama_config c;
    struct llama_dims d;
    const struct ops_backend *ops;
    const struct device *dev; /* not owned */
    int ckpt_every;
    size_t act_bytes, scratch_bytes, rope_bytes;
    unsigned char *acts, *scratch; /* byte layouts: act_layout, scratch_layout */
    const struct llama *lender;    /* whose scratch this one borrows; NULL: its own */
    float *rope_cos, *rope_sin;    /* [T, hs/2] each, one allocation */
    int32_t *inputs, *targets;
    int n_allocated; /* how many of acts, scratch, rope tables, tokens exist */
};

#define STAT MODEL_STAT
#define take model_layout_take

/* Offsets (in bytes) inside the activation allocation; see model.c's
 * act_layout for the scheme (R rows of the residual stream and the norms;
 * activations in the compute type, statistics in fp32). */
struct act_layout {
    size_t encoded, outputs0, internals0, layer_stride, recompute;
    size_t lnf, lnf_rstd, logits, probs, losses, loss_stats, total;
    /* inside a layer's internals */
    size_t ln1, ln1_rstd, qkv, atty, lse, res2, ln2, ln2_rstd, gu, mlp;
};

static struct act_layout act_layout_of(const struct llama_dims *d, int B, int T, int ckpt_every,
                                       const struct model_stage *st)
{
    const size_t BT = (size_t)B * T, R = BT / (size_t)d->sp, C = d->C, I = d->I;
    const size_t V = st->last ? (size_t)d->V : 0, head = st->last ? 1 : 0;
    const int nb = st->end_block - st->first_block;
    const int n_ckpt = model_stage_checkpointed(ckpt_every, st);
    const size_t es = d->es, f = sizeof(float);
    struct act_layout a;
    size_t o = 0;
    a.ln1 = take(&o, R * C, es);
    a.ln1_rstd = take(&o, R, f);
    a.qkv = take(&o, BT * (size_t)d->QKV, es);
    a.atty = take(&o, BT * (size_t)d->NH * d->hs, es);
    a.lse = take(&o, (size_t)B * d->NH * T, f); /* attention's row log-sum-exps */
    a.res2 = take(&o, R * C, es);
    a.ln2 = take(&o, R * C, es);
    a.ln2_rstd = take(&o, R, f);
    a.gu = take(&o, BT * 2 * I, es);
    a.mlp = take(&o, BT * I, es);
    a.layer_stride = o;

    o = 0;
    a.encoded = take(&o, R * C, es);
    a.outputs0 = take(&o, R * C * (size_t)nb, es);
    a.internals0 = take(&o, a.layer_stride * (size_t)(nb - n_ckpt), 1);
    a.recompute = take(&o, n_ckpt > 0 ? a.layer_stride : 0, 1);
    /* The final norm (all B*T rows: the head's input), logits and
     * losses: the last stage's only. */
    a.lnf = take(&o, BT * C * head, es);
    a.lnf_rstd = take(&o, R * head, f);
    a.logits = take(&o, BT * V, es);
    a.probs = take(&o, BT * V, es);
    a.losses = take(&o, BT * head, f);
    a.loss_stats = take(&o, 3 * BT * head * (size_t)d->sliced, f); /* model_vocab_loss_forward's */
    a.total = o;
    return a;
}

static unsigned char *layer_internals(const struct llama *m, const struct act_layout *a, int l)
{
    if (model_block_checkpointed(m->ckpt_every, l))
        return m->acts + a->recompute;
    const int kept_before = model_stage_kept_before(m->ckpt_every, &m->base.stage, l);
    return m->acts + a->internals0 + (size_t)kept_before * a->layer_stride;
}

/* Layer l's output; the layer before the stage's first is its input (the
 * embedding output, or what the previous stage sent). */
static unsigned char *layer_output(const struct llama *m, const struct act_layout *a, int l)
{
    const size_t btc = (size_t)model_sp_rows(&m->base) * m->c.n_embd * m->d.es;
    const int first = m->base.stage.first_block;
    return l < first ? m->acts + a->encoded : m->acts + a->outputs0 + (size_t)(l - first) * btc;
}

/* Backward scratch; under sequence parallelism also the forward's (see
 * model.c's scratch_layout). */
struct scratch_layout {
    size_t dres, dln, datty, dqkv, dgu, dmlp, gathered, dln_rows, dnorm, total;
};

static struct scratch_layout scratch_layout_of(const struct llama_dims *d, int B, int T)
{
    const size_t BT = (size_t)B * T, R = BT / (size_t)d->sp, C = d->C, I = d->I;
    const size_t sequence = d->sp > 1 ? 1 : 0, es = d->es;
    struct scratch_layout s;
    size_t o = 0;
    s.dres = take(&o, R * C, es);
    s.dln = take(&o, BT * C, es);
    s.datty = take(&o, BT * (size_t)d->NH * d->hs, es);
    s.dqkv = take(&o, BT * (size_t)d->QKV, es);
    s.dgu = take(&o, BT * 2 * I, es);
    s.dmlp = take(&o, BT * I, es);
    s.gathered = take(&o, BT * C * sequence, es);
    s.dln_rows = take(&o, R * C * sequence, es);
    s.dln_rows = sequence ? s.dln_rows : s.dln;
    s.dnorm = take(&o, C * sequence, sizeof(float));
    s.total = o;
    return s;
}

/* cos and sin of p * theta^(-2i/hs) for the position p of each local row
 * t < T (model_cp_position: t itself but under context parallelism),
 * i < hs/2, computed in
 * double (Hugging Face computes the angle in fp32; the difference is
 * below fp32's rounding of the result for the positions a model has). */
static zt_status rope_tables_fill(struct llama *m)
{
    const int T = m->base.T, half = head_dim(&m->c) / 2;
    const size_t n = (size_t)T * half;
    float *host = malloc(2 * n * sizeof(float));
    if (!host)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the rotary tables");
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double angle =
                model_cp_position(&m->base, t) * pow(m->c.rope_theta, -2.0 * i / (2.0 * half));
            host[(size_t)t * half + i] = (float)cos(angle);
            host[n + (size_t)t * half + i] = (float)sin(angle);
        }
    zt_status s = m->dev->ops->copy_from_host(m->dev, m->rope_cos, host, 2 * n * sizeof(float));
    free(host);
    return s;
}

static void instance_free(struct llama *m)
{
    const size_t tok_bytes = (size_t)m->base.B * m->base.T * sizeof(int32_t);
    if (m->n_allocated >= 4)
        device_free(m->dev, LEDGER_ACTIVATIONS, 2 * tok_bytes, m->inputs);
    if (m->n_allocated >= 3)
        device_free(m->dev, LEDGER_WORKSPACE, m->rope_bytes, m->rope_cos);
    if (m->n_allocated >= 2 && !m->lender)
        device_free(m->dev, LEDGER_WORKSPACE, m->scratch_bytes, m->scratch);
    if (m->n_allocated >= 1)
        device_free(m->dev, LEDGER_ACTIVATIONS, m->act_bytes, m->acts);
    free(m);
}

static zt_status instance_alloc(struct llama *m)
{
    const struct device *dev = m->dev;
    const size_t tok_bytes = (size_t)m->base.B * m->base.T * sizeof(int32_t);
    void *p;
    ZT_TRY(device_alloc(dev, LEDGER_ACTIVATIONS, m->act_bytes, "activations", &p));
    m->acts = p;
    m->n_allocated = 1;
    p = m->lender ? m->lender->scratch : NULL;
    if (!m->lender)
        ZT_TRY(device_alloc(dev, LEDGER_WORKSPACE, m->scratch_bytes, "backward scratch", &p));
    m->scratch = p;
    m->n_allocated = 2;
    ZT_TRY(device_alloc(dev, LEDGER_WORKSPACE, m->rope_bytes, "rotary tables", &p));
    m->rope_cos = p;
    m->rope_sin = p ? m->rope_cos + m->rope_bytes / sizeof(float) / 2 : NULL;
    m->n_allocated = 3;
    ZT_TRY(device_alloc(dev, LEDGER_ACTIVATIONS, 2 * tok_bytes, "token batch", &p));
    m->inputs = p;
    m->targets = p ? m->inputs + (size_t)m->base.B * m->base.T : NULL;
    m->n_allocated = 4;
    if (m->base.plan)
        return ZT_OK;
    const struct model_stage *st = &m->base.stage;
    const struct act_layout a = act_layout_of(&m->d, m->base.B, m->base.T, m->ckpt_every, st);
    unsigned char *dres = m->scratch + scratch_layout_of(&m->d, m->base.B, m->base.T).dres;
    model_stage_boundaries(&m->base, m->acts + a.encoded, layer_output(m, &a, st->end_block - 1),
                           dres);
    return rope_tables_fill(m);
}

static struct llama *llama_of(struct model *m)
{
    ZT_ASSERT(m->family == &llama_family);
    return (struct llama *)m;
}

static zt_status instance_create(const struct param_table *t, const struct compute_backend *be,
                                 int B, int T, int ckpt_every, const struct model_stage *stage,
                                 const struct model *lender, struct model **out)
{
    struct llama *m = calloc(1, sizeof *m);
    if (!m)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the model");
    m->base.family = &llama_family;
    m->base.table = t;
    m->base.B = B;
    m->base.T = T;
    m->base.plan = !device_is_real(&be->dev);
    m->base.stage = *stage;
    m->c = llama_config_of(t);
    m->d = dims_of(t);
    m->base.cp_kv_width = 2 * m->d.NKV * m->d.hs;
    m->ops = be->ops;
    m->dev = &be->dev;
    m->ckpt_every = ckpt_every;
    m->act_bytes = act_layout_of(&m->d, B, T, ckpt_every, stage).total;
    m->scratch_bytes = scratch_layout_of(&m->d, B, T).total;
    m->lender = lender ? llama_of((struct model *)lender) : NULL;
    model_stage_boundary_size(&m->base, (size_t)model_sp_rows(&m->base) * m->d.C);
    m->rope_bytes = 2 * (size_t)T * (size_t)(head_dim(&m->c) / 2) * sizeof(float);
    zt_status s = instance_alloc(m);
    if (s != ZT_OK) {
        instance_free(m);
        return s;
    }
    *out = &m->base;
    return ZT_OK;
}

static void instance_destroy(struct model *m)
{
    instance_free(llama_of(m));
}

/* ---- forward ------------------------------------------------------------------ */

static zt_status block_forward(struct llama *m, const struct model_unit_hooks *h, int l,
                               const void *w, const void *x, unsigned char *layer, void *out)
{
    const struct param_table *t = m->base.table;
    const struct ops_backend *ops = m->ops;
    const enum zt_dtype at = model_act(&m->base);
    const struct llama_config *c = &m->c;
    const struct llama_dims *d = &m->d;
    const struct act_layout a =
        act_layout_of(d, m->base.B, m->base.T, m->ckpt_every, &m->base.stage);
    const struct scratch_layout s = scratch_layout_of(d, m->base.B, m->base.T);
    const int B = m->base.B, T = m->base.T, BT = B * T, R = model_sp_rows(&m->base), C = d->C;
    const int I = d->I, hs = d->hs, QKV = d->QKV, NH = d->NH, NKV = d->NKV;
    const float eps = (float)c->rms_norm_eps;
    void *gathered = m->scratch + s.gathered, *partial;
    const void *ln1, *ln2;
#define P(k) model_param_in(t, layer_tensor(c, l, k), w)
    MODEL_TIMED(m, MODEL_PROF_NORM,
                ops->rmsnorm_forward(ops, at, layer + a.ln1, STAT(layer + a.ln1_rstd), x,
                                     P(T_IN_NORM), R, C, eps));
    MODEL_PROBE(&m->base, l, layer_tensor(c, l, T_IN_NORM), "output", layer + a.ln1, (size_t)R * C);
    ZT_TRY(model_sp_gather(&m->base, h, layer + a.ln1, gathered, C, &ln1));
    /* q, k and v are one [QKV, C] matrix in the flat space. */
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                model_linear_forward(&m->base, ops, l, FP8_GEMM_QKV, layer + a.qkv, ln1, P(T_Q),
                                     c->attention_bias ? P(T_Q_BIAS) : NULL, BT, C, QKV));
    ZT_TRY(model_lora_forward(&m->base, layer_tensor(c, l, T_Q), 3, layer + a.qkv, ln1, BT));
    MODEL_TIMED(m, MODEL_PROF_ROPE,
                ops->rope_forward(ops, at, layer + a.qkv, m->rope_cos, m->rope_sin, B, T, NH + NKV,
                                  hs, QKV));
    MODEL_PROBE(&m->base, l, layer_tensor(c, l, T_Q),
                "q, k and v outputs after the rotary embedding", layer + a.qkv, (size_t)BT * QKV);
    MODEL_TIMED(m, MODEL_PROF_ATTENTION,
                model_attention_forward(&m->base, ops, h, layer + a.atty, STAT(layer + a.lse),
                                        layer + a.qkv, NH, NKV, hs));
    MODEL_PROBE(&m->base, l, -1, "attention output", layer + a.atty, (size_t)BT * NH * hs);
    partial = model_sp_partial(&m->base, layer + a.res2, m->scratch + s.dln);
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                model_linear_forward(&m->base, ops, l, FP8_GEMM_ATTN_OUT, partial, layer + a.atty,
                                     P(T_O), NULL, BT, NH * hs, C));
    ZT_TRY(model_lora_forward(&m->base, layer_tensor(c, l, T_O), 1, partial, layer + a.atty, BT));
    ZT_TRY(model_sp_reduce(&m->base, h, partial, layer + a.res2, C));
    MODEL_TIMED(m, MODEL_PROF_RESIDUAL,
                ops->residual_forward(ops, at, layer + a.res2, layer + a.res2, x, R * C));
    MODEL_PROBE(&m->base, l, layer_tensor(c, l, T_O), "output plus the residual", layer + a.res2,
                (size_t)R * C);
    MODEL_TIMED(m, MODEL_PROF_NORM,
                ops->rmsnorm_forward(ops, at, layer + a.ln2, STAT(layer + a.ln2_rstd),
                                     layer + a.res2, P(T_POST_NORM), R, C, eps));
    MODEL_PROBE(&m->base, l, layer_tensor(c, l, T_POST_NORM), "output", layer + a.ln2,
                (size_t)R * C);
    ZT_TRY(model_sp_gather(&m->base, h, layer + a.ln2, gathered, C, &ln2));
    /* gate and up are one [2I, C] matrix. */
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                model_linear_forward(&m->base, ops, l, FP8_GEMM_MLP_IN, layer + a.gu, ln2,
                                     P(T_GATE), NULL, BT, C, 2 * I));
    ZT_TRY(model_lora_forward(&m->base, layer_tensor(c, l, T_GATE), 2, layer + a.gu, ln2, BT));
    MODEL_PROBE(&m->base, l, layer_tensor(c, l, T_GATE), "gate and up outputs", layer + a.gu,
                (size_t)BT * 2 * I);
    MODEL_TIMED(m, MODEL_PROF_ACTIVATION,
                ops->swiglu_forward(ops, at, layer + a.mlp, layer + a.gu, BT, I));
    MODEL_PROBE(&m->base, l, -1, "mlp SwiGLU output", layer + a.mlp, (size_t)BT * I);
    partial = model_sp_partial(&m->base, out, m->scratch + s.dln);
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                model_linear_forward(&m->base, ops, l, FP8_GEMM_MLP_OUT, partial, layer + a.mlp,
                                     P(T_DOWN), NULL, BT, I, C));
    ZT_TRY(model_lora_forward(&m->base, layer_tensor(c, l, T_DOWN), 1, partial, layer + a.mlp, BT));
    ZT_TRY(model_sp_reduce(&m->base, h, partial, out, C));
    MODEL_TIMED(m, MODEL_PROF_RESIDUAL,
                ops->residual_forward(ops, at, out, out, layer + a.res2, R * C));
    MODEL_PROBE(&m->base, l, layer_tensor(c, l, T_DOWN), "output plus the residual", out,
                (size_t)R * C);
#undef P
    return ZT_OK;
}

/* The final norm, the head and the loss. */
static zt_status head_forward(struct llama *m, const struct model_unit_hooks *h,
                              const struct act_layout *a)
{
    const struct param_table *t = m->base.table;
    const struct llama_config *c = &m->c;
    const int BT = m->base.B * m->base.T, C = c->n_embd, V = m->d.V, L = c->n_layer;
    unsigned char *acts = m->acts;
    const enum zt_dtype at = model_act(&m->base);
    /* the norm of this rank's rows, gathered in place to the head's B*T */
    void *lnf_rows = acts + a->lnf + model_sp_offset(&m->base, C) * m->d.es;
    const void *w, *lnf;
    ZT_TRY(model_unit_acquire(&m->base, h, L + 1, &w));
    MODEL_TIMED(m, MODEL_PROF_NORM,
                m->ops->rmsnorm_forward(m->ops, at, lnf_rows, STAT(acts + a->lnf_rstd),
                                        layer_output(m, a, L - 1),
                                        model_param_in(t, norm_tensor(c), w),
                                        model_sp_rows(&m->base), C, (float)c->rms_norm_eps));
    MODEL_PROBE(&m->base, L, norm_tensor(c), "output", lnf_rows,
                (size_t)model_sp_rows(&m->base) * C);
    ZT_TRY(model_sp_gather(&m->base, h, lnf_rows, acts + a->lnf, C, &lnf));
    if (c->tie_word_embeddings) {
        ZT_TRY(model_unit_release(&m->base, h, L + 1));
        ZT_TRY(model_unit_acquire(&m->base, h, 0, &w));
    }
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                m->ops->matmul_forward(m->ops, at, acts + a->logits, lnf,
                                       model_param_in(t, head_tensor(c), w), NULL, BT, C, V));
    ZT_TRY(model_lora_forward(&m->base, head_tensor(c), 1, acts + a->logits, lnf, BT));
    MODEL_PROBE(&m->base, L, -1, "logits (the head's output)", acts + a->logits, (size_t)BT * V);
    ZT_TRY(model_unit_release(&m->base, h, c->tie_word_embeddings ? 0 : L + 1));
    return model_vocab_loss_forward(&m->base, m->ops, h, STAT(acts + a->losses), acts + a->probs,
                                    acts + a->logits, m->targets, STAT(acts + a->loss_stats), BT, V,
                                    m->d.v_lo);
}

static zt_status instance_forward(struct model *base, const struct model_unit_hooks *h,
                                  const int32_t *inputs, const int32_t *targets)
{
    struct llama *m = llama_of(base);
    const struct param_table *t = base->table;
    const struct act_layout a = act_layout_of(&m->d, base->B, base->T, m->ckpt_every, &base->stage);
    const int B = base->B, T = base->T, C = m->c.n_embd;
    const size_t tok_bytes = (size_t)B * T * sizeof(int32_t);
    const void *w;

    if (base->plan)
        return model_plan_walk(&m->base, h, MODEL_PASS_FORWARD);
    ZT_TRY(m->dev->ops->copy_from_host(m->dev, m->inputs, inputs, tok_bytes));
    ZT_TRY(m->dev->ops->copy_from_host(m->dev, m->targets, targets, tok_bytes));
    ZT_TRY(h->pass_begin(h->ctx, MODEL_PASS_FORWARD));
    if (base->stage.first) {
        ZT_TRY(model_unit_acquire(&m->base, h, 0, &w));
        ZT_TRY(model_vocab_embed_forward(&m->base, m->ops, h, m->acts + a.encoded,
                                         m->scratch + scratch_layout_of(&m->d, B, T).dln, m->inputs,
                                         model_param_in(t, 0, w), NULL, C, m->d.V, m->d.v_lo));
        MODEL_PROBE(&m->base, -1, -1, "embedding output", m->acts + a.encoded,
                    (size_t)model_sp_rows(&m->base) * C);
        ZT_TRY(model_unit_release(&m->base, h, 0));
    }
    for (int l = base->stage.first_block; l < base->stage.end_block; l++) {
        ZT_TRY(model_unit_acquire(&m->base, h, 1 + l, &w));
        ZT_TRY(block_forward(m, h, l, w, layer_output(m, &a, l - 1), layer_internals(m, &a, l),
                             layer_output(m, &a, l)));
        ZT_TRY(model_unit_release(&m->base, h, 1 + l));
    }
    if (!base->stage.last) {
        ZT_TRY(h->pass_end(h->ctx, MODEL_PASS_FORWARD));
        return model_stage_no_loss(base);
    }
    ZT_TRY(head_forward(m, h, &a));
    ZT_TRY(h->pass_end(h->ctx, MODEL_PASS_FORWARD));
    return model_read_mean_loss(base, m->dev, STAT(m->acts + a.losses), targets, B * T);
}

/* ---- backward ----------------------------------------------------------------- */

/* Zeroes n activations (of the compute type) at p. */
static zt_status zero(struct llama *m, void *p, size_t n)
{
    MODEL_TIMED(m, MODEL_PROF_ZERO, m->dev->ops->memset_zero(m->dev, p, n * m->d.es));
    return ZT_OK;
}

/* An RMSNorm's backward over this rank's rows: dinp += the input
 * gradient, and the weight gradient (gw; NULL: frozen) accumulated,
 * summed over the ranks under sequence parallelism. */
static zt_status norm_backward(struct llama *m, const struct model_unit_hooks *h, void *dinp,
                               float *gw, const void *dout, const void *inp, const void *weight,
                               const float *rstd)
{
    const int C = m->d.C;
    float *dnorm = STAT(m->scratch + scratch_layout_of(&m->d, m->base.B, m->base.T).dnorm), *dw;
    ZT_TRY(model_sp_norm_grad(&m->base, m->ops, gw, dnorm, (size_t)C, &dw));
    MODEL_TIMED(m, MODEL_PROF_NORM,
                m->ops->rmsnorm_backward(m->ops, model_act(&m->base), dinp, dw, dout, inp, weight,
                                         rstd, model_sp_rows(&m->base), C));
    return model_sp_norm_done(&m->base, m->ops, h, gw, dnorm, (size_t)C);
}

/* Where a column-parallel layer's input gradient is summed: model.c's. */
static void *dln_partial(struct llama *m, const struct scratch_layout *s)
{
    return model_sp_partial(&m->base, m->scratch + s->dln_rows, m->scratch + s->dln);
}

/* dres holds d loss / d(layer output) on entry and d loss / d x on exit,
 * this rank's rows of them (model.c's block_backward says how the
 * slices' gradients meet). */
static zt_status block_backward(struct llama *m, const struct model_unit_hooks *h, int l,
                                const void *w, float *g, const void *x, const unsigned char *layer)
{
    const struct param_table *t = m->base.table;
    const struct ops_backend *ops = m->ops;
    const enum zt_dtype at = model_act(&m->base);
    const struct llama_config *c = &m->c;
    const struct llama_dims *d = &m->d;
    const struct act_layout a =
        act_layout_of(d, m->base.B, m->base.T, m->ckpt_every, &m->base.stage);
    const struct scratch_layout s = scratch_layout_of(d, m->base.B, m->base.T);
    const int B = m->base.B, T = m->base.T, BT = B * T, C = d->C, I = d->I;
    const int hs = d->hs, QKV = d->QKV, NH = d->NH, NKV = d->NKV;
    unsigned char *sc = m->scratch, *dres = sc + s.dres, *gathered = sc + s.gathered;
    void *dln = dln_partial(m, &s);
    const void *dout, *ln;
#define P(k) model_param_in(t, layer_tensor(c, l, k), w)
#define G(k) model_grad_in(t, layer_tensor(c, l, k), g)
    ZT_TRY(model_sp_gather(&m->base, h, dres, gathered, C, &dout));
    ZT_TRY(zero(m, sc + s.dmlp, (size_t)BT * I));
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                model_linear_backward(&m->base, ops, l, FP8_GEMM_MLP_OUT, sc + s.dmlp, G(T_DOWN),
                                      NULL, dout, layer + a.mlp, P(T_DOWN), BT, I, C));
    ZT_TRY(model_lora_backward(&m->base, h, layer_tensor(c, l, T_DOWN), 1, sc + s.dmlp, dout,
                               layer + a.mlp, BT));
    ZT_TRY(zero(m, sc + s.dgu, (size_t)BT * 2 * I));
    MODEL_TIMED(m, MODEL_PROF_ACTIVATION,
                ops->swiglu_backward(ops, at, sc + s.dgu, sc + s.dmlp, layer + a.gu, BT, I));
    ZT_TRY(model_sp_gather(&m->base, h, layer + a.ln2, gathered, C, &ln));
    ZT_TRY(zero(m, dln, (size_t)BT * C));
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                model_linear_backward(&m->base, ops, l, FP8_GEMM_MLP_IN, dln, G(T_GATE), NULL,
                                      sc + s.dgu, ln, P(T_GATE), BT, C, 2 * I));
    ZT_TRY(
        model_lora_backward(&m->base, h, layer_tensor(c, l, T_GATE), 2, dln, sc + s.dgu, ln, BT));
    /* a column-parallel layer's input gradient: summed over the slices */
    ZT_TRY(model_sp_reduce(&m->base, h, dln, sc + s.dln_rows, C));
    ZT_TRY(norm_backward(m, h, dres, G(T_POST_NORM), sc + s.dln_rows, layer + a.res2,
                         P(T_POST_NORM), STAT(layer + a.ln2_rstd)));
    ZT_TRY(model_sp_gather(&m->base, h, dres, gathered, C, &dout));
    ZT_TRY(zero(m, sc + s.datty, (size_t)BT * NH * hs));
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                model_linear_backward(&m->base, ops, l, FP8_GEMM_ATTN_OUT, sc + s.datty, G(T_O),
                                      NULL, dout, layer + a.atty, P(T_O), BT, NH * hs, C));
    ZT_TRY(model_lora_backward(&m->base, h, layer_tensor(c, l, T_O), 1, sc + s.datty, dout,
                               layer + a.atty, BT));
    ZT_TRY(zero(m, sc + s.dqkv, (size_t)BT * QKV));
    MODEL_TIMED(m, MODEL_PROF_ATTENTION,
                model_attention_backward(&m->base, ops, h, sc + s.dqkv, sc + s.datty, layer + a.qkv,
                                         layer + a.atty, STAT(layer + a.lse), NH, NKV, hs));
    MODEL_TIMED(m, MODEL_PROF_ROPE,
                ops->rope_backward(ops, at, sc + s.dqkv, m->rope_cos, m->rope_sin, B, T, NH + NKV,
                                   hs, QKV));
    ZT_TRY(model_sp_gather(&m->base, h, layer + a.ln1, gathered, C, &ln));
    ZT_TRY(zero(m, dln, (size_t)BT * C));
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                model_linear_backward(&m->base, ops, l, FP8_GEMM_QKV, dln, G(T_Q),
                                      c->attention_bias ? G(T_Q_BIAS) : NULL, sc + s.dqkv, ln,
                                      P(T_Q), BT, C, QKV));
    ZT_TRY(model_lora_backward(&m->base, h, layer_tensor(c, l, T_Q), 3, dln, sc + s.dqkv, ln, BT));
    ZT_TRY(model_sp_reduce(&m->base, h, dln, sc + s.dln_rows, C));
    ZT_TRY(norm_backward(m, h, dres, G(T_IN_NORM), sc + s.dln_rows, x, P(T_IN_NORM),
                         STAT(layer + a.ln1_rstd)));
#undef P
#undef G
    return ZT_OK;
}

/* The loss, the head and the final norm, leaving d loss / d(last layer
 * output) in dres. With a tied head, unit 0's gradient stays borrowed in
 * *g0 for the embedding at the end. */
static zt_status head_backward(struct llama *m, const struct model_unit_hooks *h, float grad_scale,
                               float **g0)
{
    const struct param_table *t = m->base.table;
    const struct llama_config *c = &m->c;
    const struct act_layout a =
        act_layout_of(&m->d, m->base.B, m->base.T, m->ckpt_every, &m->base.stage);
    const struct scratch_layout s = scratch_layout_of(&m->d, m->base.B, m->base.T);
    const int BT = m->base.B * m->base.T, C = c->n_embd, V = m->d.V, L = c->n_layer;
    const int tied = c->tie_word_embeddings;
    void *dlogits = m->acts + a.logits, *dln = dln_partial(m, &s);
    float *g;
    const void *w;
    ZT_TRY(zero(m, dlogits, (size_t)BT * V));
    ZT_TRY(model_vocab_loss_backward(&m->base, m->ops, dlogits, m->acts + a.probs, m->targets,
                                     grad_scale / (float)BT, BT, V, m->d.v_lo));
    ZT_TRY(model_unit_acquire(&m->base, h, tied ? 0 : L + 1, &w));
    ZT_TRY(model_unit_grads_acquire(&m->base, h, tied ? 0 : L + 1, &g));
    if (tied)
        *g0 = g;
    ZT_TRY(zero(m, dln, (size_t)BT * C));
    MODEL_TIMED(m, MODEL_PROF_MATMUL,
                m->ops->matmul_backward(
                    m->ops, model_act(&m->base), dln, model_grad_in(t, head_tensor(c), g), NULL,
                    dlogits, m->acts + a.lnf, model_param_in(t, head_tensor(c), w), BT, C, V));
    ZT_TRY(model_lora_backward(&m->base, h, head_tensor(c), 1, dln, dlogits, m->acts + a.lnf, BT));
    ZT_TRY(model_sp_reduce(&m->base, h, dln, m->scratch + s.dln_rows, C));
    if (tied) {
        ZT_TRY(model_unit_release(&m->base, h, 0));
        ZT_TRY(model_unit_acquire(&m->base, h, L + 1, &w));
        ZT_TRY(model_unit_grads_acquire(&m->base, h, L + 1, &g));
    }
    ZT_TRY(zero(m, m->scratch + s.dres, (size_t)model_sp_rows(&m->base) * C));
    ZT_TRY(norm_backward(m, h, m->scratch + s.dres, model_grad_in(t, norm_tensor(c), g),
                         m->scratch + s.dln_rows, layer_output(m, &a, L - 1),
                         model_param_in(t, norm_tensor(c), w), STAT(m->acts + a.lnf_rstd)));
    ZT_TRY(model_unit_release(&m->base, h, L + 1));
    ZT_TRY(model_unit_grads_done(&m->base, h, L + 1));
    return ZT_OK;
}

static zt_status instance_backward(struct model *base, const struct model_unit_hooks *h,
                                   float grad_scale)
{
    struct llama *m = llama_of(base);
    const struct param_table *t = base->table;
    const struct act_layout a = act_layout_of(&m->d, base->B, base->T, m->ckpt_every, &base->stage);
    const struct scratch_layout s = scratch_layout_of(&m->d, base->B, base->T);
    const void *w;
    float *g, *g0 = NULL;

    if (base->plan)
        return model_plan_walk(&m->base, h, MODEL_PASS_BACKWARD);
    ZT_TRY(h->pass_begin(h->ctx, MODEL_PASS_BACKWARD));
    if (base->stage.last)
        ZT_TRY(head_backward(m, h, grad_scale, &g0));
    for (int l = base->stage.end_block - 1; l >= base->stage.first_block; l--) {
        const void *x = layer_output(m, &a, l - 1);
        unsigned char *layer = layer_internals(m, &a, l);
        ZT_TRY(model_unit_acquire(&m->base, h, 1 + l, &w));
        ZT_TRY(model_unit_grads_acquire(&m->base, h, 1 + l, &g));
        /* One acquisition serves a checkpointed layer's recompute and its
         * backward; the output is rewritten with the same values. */
        if (model_block_checkpointed(m->ckpt_every, l))
            ZT_TRY(block_forward(m, h, l, w, x, layer, layer_output(m, &a, l)));
        ZT_TRY(block_backward(m, h, l, w, g, x, layer));
        ZT_TRY(model_unit_release(&m->base, h, 1 + l));
        ZT_TRY(model_unit_grads_done(&m->base, h, 1 + l));
    }
    /* Unit 0's gradient is borrowed by the tied head (on the last stage)
     * or here, by the embedding's backward (on the first). */
    const int head_borrowed = base->stage.last && m->c.tie_word_embeddings;
    if (base->stage.first) {
        if (!head_borrowed)
            ZT_TRY(model_unit_grads_acquire(&m->base, h, 0, &g0));
        ZT_TRY(model_vocab_embed_backward(&m->base, m->ops, h, model_grad_in(t, 0, g0), NULL,
                                          m->scratch + s.dres, m->scratch + s.gathered, m->inputs,
                                          m->c.n_embd, m->d.V, m->d.v_lo));
    }
    if (head_borrowed || base->stage.first)
        ZT_TRY(model_unit_grads_done(&m->base, h, 0));
    ZT_TRY(h->pass_end(h->ctx, MODEL_PASS_BACKWARD));
    return ZT_OK;
}

static size_t activation_bytes(const struct param_table *t, int B, int T, int ckpt_every,
                               const struct model_stage *stage)
{
    const struct llama_dims d = dims_of(t);
    return act_layout_of(&d, B, T, ckpt_every, stage).total;
}

const struct model_family llama_family = {
    .name = "llama",
    .table_build = table_build,
    .init_params = init_params,
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
