/* worker/infer.c — see infer.h.
 *
 * A step runs the family's block on its n new rows, as the training
 * forward does on B*T rows, with one difference: attention. Each layer's
 * keys and values of the new rows (after the rotary embedding, for Llama)
 * are appended to that layer's cache, and the queries attend over the
 * cache (attention_cached_forward), so earlier positions are never
 * recomputed. The final norm and the head run on the last row only: a step
 * needs one row of logits, and the head is the largest product.
 *
 * What differs between the families is a row of `families[]`: how rows
 * are embedded (GPT-2 adds learned positions), the norm (LayerNorm with a
 * bias, RMSNorm), the attention's projection (fused q|k|v with a bias, or
 * rotated q|k|v) and the MLP (GELU, SwiGLU).
 *
 * On a tensor-parallel slice the same code runs on this rank's heads and
 * MLP columns (the dims below are the rank's): the slice lays q|k|v and
 * gate|up out as the rank's rows of each, back to back, so they stay one
 * matrix. Three reductions complete a layer's outputs: the embedding (each
 * rank looks up the tokens of its vocabulary rows, zero for the others),
 * and the two row-parallel projections, whose bias rank 0 alone adds. The
 * head gives the rank's vocabulary slice of the logits, which one
 * allgather makes the whole row on every rank, identical there.
 */
#include "infer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"
#include "model.h"
#include "tensor_parallel.h"

/* The shape a step needs, whatever the family: the rank's heads (NH, NKV),
 * q|k|v width (QKV) and MLP width (F: the first product's), its vocabulary
 * rows [v_lo, v_lo + Vp) of the padded Vp * tp, of which V are the model's. */
struct infer_dims {
    int V, C, L, NH, NKV, hs, QKV, F, max_pos;
    int tp, tp_rank, Vp, v_lo;
    int qkv_bias; /* Llama: q, k and v have biases */
    float eps;
};

struct infer_family;

struct infer_model {
    const struct infer_family *fam;
    const struct param_table *t;
    const float *params;
    const struct ops_backend *ops;
    struct infer_tp tp; /* zeroed on a whole model */
    struct infer_dims d;
    int pos;
    float *kcache, *vcache;     /* [L, max_pos, NKV*hs] each */
    float *x, *ln, *tmp;        /* [max_pos, C] */
    float *mean, *rstd;         /* [max_pos] */
    float *qkv, *att;           /* [max_pos, QKV], [max_pos, NH*hs] */
    float *fc, *act;            /* [max_pos, F] */
    float *rope_cos, *rope_sin; /* [max_pos, hs/2]; Llama only */
    float *head_out, *gathered; /* [Vp], [Vp * tp]: a slice's logits; NULL when whole */
};

struct infer_family {
    const struct model_family *family;
    void (*dims)(const struct param_table *t, struct infer_dims *d);
    zt_status (*embed)(struct infer_model *m, const int32_t *tokens, int n);
    zt_status (*block)(struct infer_model *m, int l, int n);
    /* the final norm of one row, and the head's weight [V, C] */
    zt_status (*final_norm)(struct infer_model *m, float *out, const float *row);
    const float *(*head)(const struct infer_model *m);
};

/* The weights of the tensor called `name`; it must exist (the family
 * built the table). */
static const float *weight(const struct infer_model *m, const char *fmt, int l)
{
    char name[48];
    snprintf(name, sizeof name, fmt, l);
    for (int k = 0; k < m->t->n_tensors; k++)
        if (strcmp(m->t->tensors[k].name, name) == 0)
            return m->params + m->t->tensors[k].offset;
    ZT_ASSERT(!"a tensor of the family's table is missing");
    return NULL;
}

/* buf[n] becomes its sum over the tensor-parallel ranks; nothing on a
 * whole model. */
static zt_status tp_sum(const struct infer_model *m, float *buf, size_t n)
{
    return m->d.tp > 1 ? m->tp.allreduce_sum(m->tp.ctx, buf, n) : ZT_OK;
}

/* A row-parallel linear layer: out[n, C] = in[n, k] W^T + bias, the
 * partial products summed over the ranks and the bias added once. */
static zt_status row_parallel(struct infer_model *m, float *out, const float *in, const float *w,
                              const float *bias, int n, int k)
{
    const int C = m->d.C;
    ZT_TRY(m->ops->matmul_forward(m->ops, ZT_F32, out, in, w, m->d.tp_rank == 0 ? bias : NULL, n, k,
                                  C));
    return tp_sum(m, out, (size_t)n * C);
}

/* Appends the new rows' keys and values (the NKV heads after the NH query
 * heads of each qkv row, then as many values) to layer l's cache, then
 * attends. */
static zt_status attend(struct infer_model *m, int l, int n)
{
    const struct infer_dims *d = &m->d;
    const int KV = d->NKV * d->hs, k_col = d->NH * d->hs;
    float *kc = m->kcache + (size_t)l * d->max_pos * KV,
          *vc = m->vcache + (size_t)l * d->max_pos * KV;
    for (int i = 0; i < n; i++) {
        const float *row = m->qkv + (size_t)i * d->QKV;
        memcpy(kc + (size_t)(m->pos + i) * KV, row + k_col, (size_t)KV * sizeof(float));
        memcpy(vc + (size_t)(m->pos + i) * KV, row + k_col + KV, (size_t)KV * sizeof(float));
    }
    return m->ops->attention_cached_forward(m->ops, ZT_F32, m->att, m->qkv, d->QKV, kc, vc, KV,
                                            m->pos, n, d->NH, d->NKV, d->hs);
}

/* ---- GPT-2 --------------------------------------------------------------- */

static void gpt2_dims(const struct param_table *t, struct infer_dims *d)
{
    const struct gpt2_config c = gpt2_config_of(t);
    *d = (struct infer_dims){.V = c.vocab_size,
                             .C = c.n_embd,
                             .L = c.n_layer,
                             .NH = c.n_head,
                             .NKV = c.n_head,
                             .hs = c.n_embd / c.n_head,
                             .QKV = 3 * c.n_embd,
                             .F = 4 * c.n_embd,
                             .max_pos = c.block_size,
                             .eps = 1e-5f};
}

/* The rows' token embeddings (plus positions: wpe, NULL for none); on a
 * slice each rank adds its vocabulary rows' and rank 0 the positions. */
static zt_status embed_rows(struct infer_model *m, const int32_t *tokens, int n, const float *wte,
                            const float *wpe)
{
    const struct infer_dims *d = &m->d;
    if (d->tp == 1)
        return m->ops->encoder_forward(m->ops, ZT_F32, m->x, tokens, wte, wpe, 1, n, d->C);
    ZT_TRY(m->ops->encoder_forward_vocab(m->ops, ZT_F32, m->x, tokens, wte,
                                         d->tp_rank == 0 ? wpe : NULL, 1, n, d->C, d->v_lo, d->Vp));
    return tp_sum(m, m->x, (size_t)n * d->C);
}

static zt_status gpt2_embed(struct infer_model *m, const int32_t *tokens, int n)
{
    const float *wpe = weight(m, "wpe.weight", 0) + (size_t)m->pos * m->d.C;
    return embed_rows(m, tokens, n, weight(m, "wte.weight", 0), wpe);
}

static zt_status gpt2_block(struct infer_model *m, int l, int n)
{
    const struct ops_backend *ops = m->ops;
    const int C = m->d.C, F = m->d.F;
#define W(suffix) weight(m, "h.%d." suffix, l)
    ZT_TRY(ops->layernorm_forward(ops, ZT_F32, m->ln, m->mean, m->rstd, m->x, W("ln_1.weight"),
                                  W("ln_1.bias"), n, C));
    ZT_TRY(ops->matmul_forward(ops, ZT_F32, m->qkv, m->ln, W("attn.qkv.weight"), W("attn.qkv.bias"),
                               n, C, m->d.QKV));
    ZT_TRY(attend(m, l, n));
    ZT_TRY(row_parallel(m, m->tmp, m->att, W("attn.proj.weight"), W("attn.proj.bias"), n,
                        m->d.NH * m->d.hs));
    ZT_TRY(ops->residual_forward(ops, ZT_F32, m->x, m->x, m->tmp, n * C));
    ZT_TRY(ops->layernorm_forward(ops, ZT_F32, m->ln, m->mean, m->rstd, m->x, W("ln_2.weight"),
                                  W("ln_2.bias"), n, C));
    ZT_TRY(ops->matmul_forward(ops, ZT_F32, m->fc, m->ln, W("mlp.fc.weight"), W("mlp.fc.bias"), n,
                               C, F));
    ZT_TRY(ops->gelu_forward(ops, ZT_F32, m->act, m->fc, n * F));
    ZT_TRY(row_parallel(m, m->tmp, m->act, W("mlp.proj.weight"), W("mlp.proj.bias"), n, F));
#undef W
    return ops->residual_forward(ops, ZT_F32, m->x, m->x, m->tmp, n * C);
}

static zt_status gpt2_final_norm(struct infer_model *m, float *out, const float *row)
{
    return m->ops->layernorm_forward(m->ops, ZT_F32, out, m->mean, m->rstd, row,
                                     weight(m, "ln_f.weight", 0), weight(m, "ln_f.bias", 0), 1,
                                     m->d.C);
}

static const float *gpt2_head(const struct infer_model *m)
{
    return weight(m, "wte.weight", 0);
}

/* ---- Llama --------------------------------------------------------------- */

static void llama_dims(const struct param_table *t, struct infer_dims *d)
{
    const struct llama_config c = llama_config_of(t);
    const int hs = c.n_embd / c.n_head;
    *d = (struct infer_dims){.V = c.vocab_size,
                             .C = c.n_embd,
                             .L = c.n_layer,
                             .NH = c.n_head,
                             .NKV = c.n_kv_head,
                             .hs = hs,
                             .QKV = (c.n_head + 2 * c.n_kv_head) * hs,
                             .F = 2 * c.intermediate_size,
                             .max_pos = c.block_size,
                             .qkv_bias = c.attention_bias,
                             .eps = (float)c.rms_norm_eps};
}

static zt_status llama_embed(struct infer_model *m, const int32_t *tokens, int n)
{
    return embed_rows(m, tokens, n, weight(m, "embed_tokens.weight", 0), NULL);
}

static zt_status llama_block(struct infer_model *m, int l, int n)
{
    const struct ops_backend *ops = m->ops;
    const struct infer_dims *d = &m->d;
    const int C = d->C, I = d->F / 2, half = d->hs / 2, A = d->NH * d->hs;
#define W(suffix) weight(m, "layers.%d." suffix, l)
    ZT_TRY(ops->rmsnorm_forward(ops, ZT_F32, m->ln, m->rstd, m->x, W("input_layernorm.weight"), n,
                                C, d->eps));
    /* q, k and v are one [QKV, C] matrix (their biases one [QKV] vector),
     * as gate and up are one [2I, C] */
    ZT_TRY(ops->matmul_forward(ops, ZT_F32, m->qkv, m->ln, W("self_attn.q_proj.weight"),
                               d->qkv_bias ? W("self_attn.q_proj.bias") : NULL, n, C, d->QKV));
    ZT_TRY(ops->rope_forward(ops, ZT_F32, m->qkv, m->rope_cos + (size_t)m->pos * half,
                             m->rope_sin + (size_t)m->pos * half, 1, n, d->NH + d->NKV, d->hs,
                             d->QKV));
    ZT_TRY(attend(m, l, n));
    ZT_TRY(row_parallel(m, m->tmp, m->att, W("self_attn.o_proj.weight"), NULL, n, A));
    ZT_TRY(ops->residual_forward(ops, ZT_F32, m->x, m->x, m->tmp, n * C));
    ZT_TRY(ops->rmsnorm_forward(ops, ZT_F32, m->ln, m->rstd, m->x,
                                W("post_attention_layernorm.weight"), n, C, d->eps));
    ZT_TRY(ops->matmul_forward(ops, ZT_F32, m->fc, m->ln, W("mlp.gate_proj.weight"), NULL, n, C,
                               2 * I));
    ZT_TRY(ops->swiglu_forward(ops, ZT_F32, m->act, m->fc, n, I));
    ZT_TRY(row_parallel(m, m->tmp, m->act, W("mlp.down_proj.weight"), NULL, n, I));
#undef W
    return ops->residual_forward(ops, ZT_F32, m->x, m->x, m->tmp, n * C);
}

static zt_status llama_final_norm(struct infer_model *m, float *out, const float *row)
{
    return m->ops->rmsnorm_forward(m->ops, ZT_F32, out, m->rstd, row, weight(m, "norm.weight", 0),
                                   1, m->d.C, m->d.eps);
}

static const float *llama_head(const struct infer_model *m)
{
    return param_table_head_tied(m->t) ? weight(m, "embed_tokens.weight", 0)
                                       : weight(m, "lm_head.weight", 0);
}

/* The rotary tables, in double as the training forward computes them. */
static void rope_tables_fill(struct infer_model *m, const struct param_table *t)
{
    const double theta = llama_config_of(t).rope_theta;
    const int half = m->d.hs / 2;
    for (int p = 0; p < m->d.max_pos; p++)
        for (int i = 0; i < half; i++) {
            const double angle = p * pow(theta, -2.0 * i / (2.0 * half));
            m->rope_cos[(size_t)p * half + i] = (float)cos(angle);
            m->rope_sin[(size_t)p * half + i] = (float)sin(angle);
        }
}

static const struct infer_family families[] = {
    {&gpt2_family, gpt2_dims, gpt2_embed, gpt2_block, gpt2_final_norm, gpt2_head},
    {&llama_family, llama_dims, llama_embed, llama_block, llama_final_norm, llama_head},
};

/* ---- the model ----------------------------------------------------------- */

static zt_status check_table(const struct param_table *t, const struct infer_tp *tp,
                             const struct infer_family **fam)
{
    *fam = NULL;
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (families[i].family == t->family)
            *fam = &families[i];
    if (!*fam)
        return zt_error_set(ZT_ERR_UNSUPPORTED, "generation: no cached forward for family %s",
                            t->family->name);
    if (t->lora.r > 0 || t->quant.enabled || t->tp_sequence)
        return zt_error_set(ZT_ERR_UNSUPPORTED,
                            "generation: the model must be fp32, with its adapters merged in "
                            "(lora_merge), and its slices without sequence parallelism");
    if (param_table_tp_size(t) > 1 && !(tp && tp->allreduce_sum && tp->allgather))
        return zt_error_set(ZT_ERR_UNSUPPORTED,
                            "generation: a tensor-parallel slice needs its group's collectives");
    return ZT_OK;
}

/* The rank's share of the whole model's dims d (tensor_parallel.h's cuts,
 * which param_table_tp_slice checked divide). */
static void slice_dims(const struct param_table *t, struct infer_dims *d)
{
    const int tp = param_table_tp_size(t);
    d->tp = tp;
    d->tp_rank = param_table_tp_rank(t);
    d->NH /= tp;
    d->NKV /= tp;
    d->QKV /= tp;
    d->F /= tp;
    d->Vp = param_table_vocab_padded(t) / tp;
    d->v_lo = d->tp_rank * d->Vp;
}

zt_status infer_open(const struct param_table *t, const float *params,
                     const struct ops_backend *ops, const struct infer_tp *tp,
                     struct infer_model **out)
{
    const struct infer_family *fam;
    *out = NULL;
    ZT_TRY(check_table(t, tp, &fam));
    struct infer_model *m = calloc(1, sizeof *m);
    if (!m)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the generation model");
    *m = (struct infer_model){.fam = fam, .t = t, .params = params, .ops = ops};
    if (param_table_tp_size(t) > 1)
        m->tp = *tp;
    fam->dims(t, &m->d);
    slice_dims(t, &m->d);
    const struct infer_dims *d = &m->d;
    const size_t P = (size_t)d->max_pos, cache = (size_t)d->L * P * d->NKV * d->hs;
    const size_t rope = fam->family == &llama_family ? P * (size_t)(d->hs / 2) : 0;
    m->kcache = malloc(cache * sizeof(float));
    m->vcache = malloc(cache * sizeof(float));
    m->x = malloc(P * d->C * sizeof(float));
    m->ln = malloc(P * d->C * sizeof(float));
    m->tmp = malloc(P * d->C * sizeof(float));
    m->mean = malloc(P * sizeof(float));
    m->rstd = malloc(P * sizeof(float));
    m->qkv = malloc(P * d->QKV * sizeof(float));
    m->att = malloc(P * d->NH * d->hs * sizeof(float));
    m->fc = malloc(P * d->F * sizeof(float));
    m->act = malloc(P * d->F * sizeof(float));
    m->rope_cos = malloc((rope ? 2 * rope : 1) * sizeof(float));
    m->rope_sin = m->rope_cos ? m->rope_cos + rope : NULL;
    if (d->tp > 1) {
        m->head_out = malloc((size_t)d->Vp * sizeof(float));
        m->gathered = malloc((size_t)d->Vp * d->tp * sizeof(float));
    }
    if (!m->kcache || !m->vcache || !m->x || !m->ln || !m->tmp || !m->mean || !m->rstd || !m->qkv ||
        !m->att || !m->fc || !m->act || !m->rope_cos ||
        (d->tp > 1 && (!m->head_out || !m->gathered))) {
        infer_close(m);
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the key/value cache of %zu positions",
                            P);
    }
    if (rope)
        rope_tables_fill(m, t);
    *out = m;
    return ZT_OK;
}

void infer_close(struct infer_model *m)
{
    if (!m)
        return;
    float *bufs[] = {m->kcache, m->vcache, m->x,  m->ln,  m->tmp,      m->mean,     m->rstd,
                     m->qkv,    m->att,    m->fc, m->act, m->rope_cos, m->head_out, m->gathered};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(m);
}

int infer_max_positions(const struct infer_model *m)
{
    return m->d.max_pos;
}

int infer_vocab_size(const struct infer_model *m)
{
    return m->d.V;
}

int infer_position(const struct infer_model *m)
{
    return m->pos;
}

void infer_reset(struct infer_model *m)
{
    m->pos = 0;
}

zt_status infer_step(struct infer_model *m, const int32_t *tokens, int n, float *logits)
{
    const struct infer_dims *d = &m->d;
    ZT_ASSERT(n >= 1);
    if (n > d->max_pos - m->pos)
        return zt_error_set(ZT_ERR_USAGE,
                            "the sequence would reach %d positions: the model has %d (block_size)",
                            m->pos + n, d->max_pos);
    for (int i = 0; i < n; i++)
        ZT_ASSERT(tokens[i] >= 0 && tokens[i] < d->V);
    ZT_TRY(m->fam->embed(m, tokens, n));
    for (int l = 0; l < d->L; l++)
        ZT_TRY(m->fam->block(m, l, n));
    m->pos += n;
    ZT_TRY(m->fam->final_norm(m, m->ln, m->x + (size_t)(n - 1) * d->C));
    if (d->tp == 1)
        return m->ops->matmul_forward(m->ops, ZT_F32, logits, m->ln, m->fam->head(m), NULL, 1, d->C,
                                      d->V);
    /* the rank's vocabulary rows, then the whole row (its first V columns:
     * the padding is the last ranks' tails) */
    ZT_TRY(m->ops->matmul_forward(m->ops, ZT_F32, m->head_out, m->ln, m->fam->head(m), NULL, 1,
                                  d->C, d->Vp));
    ZT_TRY(m->tp.allgather(m->tp.ctx, m->head_out, m->gathered, (size_t)d->Vp));
    memcpy(logits, m->gathered, (size_t)d->V * sizeof(float));
    return ZT_OK;
}
