/* worker/model_fp8.c — the fp8 GEMMs of the families' blocks (see
 * model_parts.h for what is quantised and which buffers exist, and
 * fp8_scaling.h for the scales).
 *
 * One operand at a time: quantise with the tensor's scale (recording its
 * amax in a training pass), decode times scale_inv into the operand's
 * fp32 scratch, and hand the decoded values to the ordinary matmul op. The
 * scratch and the weight's and dY's codes are reused by every GEMM, so
 * they are sized by the largest; only X's codes are kept per block, for
 * the backward's weight gradient.
 */
#include "model_parts.h"

#include <stdlib.h>
#include <string.h>

static size_t max_of(const int *v, int n)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return (size_t)m;
}

static size_t max_weight(const struct model_fp8 *f)
{
    size_t m = 0;
    for (int g = 0; g < FP8_GEMMS; g++) {
        const size_t w = (size_t)f->in[g] * (size_t)f->out[g];
        m = w > m ? w : m;
    }
    return m;
}

/* The sizes and offsets of f's buffers for micro batch rows N. */
static void fp8_layout(struct model_fp8 *f, const struct model *m, size_t N)
{
    const int nb = m->stage.end_block - m->stage.first_block;
    const int n_ckpt = model_stage_checkpointed(f->ckpt_every, &m->stage);
    size_t at = 0;
    for (int g = 0; g < FP8_GEMMS; g++) {
        f->x_at[g] = at;
        at += N * (size_t)f->in[g];
    }
    f->slot_bytes = at;
    f->n_slots = nb - n_ckpt + (n_ckpt > 0);
    f->kept_bytes = (size_t)f->n_slots * f->slot_bytes;
    const size_t in = max_of(f->in, FP8_GEMMS), out = max_of(f->out, FP8_GEMMS);
    f->dy_at = max_weight(f);
    f->copies_bytes = f->dy_at + N * out;
    f->w_at = N * in;
    f->dy_scratch_at = f->w_at + max_weight(f);
    f->scratch_bytes = (f->dy_scratch_at + N * out) * sizeof(float);
}

zt_status model_fp8_create(struct model *m, const struct compute_backend *be, int ckpt_every)
{
    const struct param_table *t = m->table;
    m->fp8 = NULL;
    if (!t->fp8)
        return ZT_OK;
    ZT_ASSERT(t->lora.r == 0 && t->fp8->n_blocks == param_table_blocks(t));
    struct model_fp8 *f = calloc(1, sizeof *f);
    if (!f)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the fp8 GEMMs' state");
    f->scaling = t->fp8;
    f->dev = &be->dev;
    f->ops = be->ops;
    f->ckpt_every = ckpt_every;
    t->family->gemm_shapes(t, f->in, f->out);
    fp8_layout(f, m, (size_t)m->B * (size_t)m->T);
    m->fp8 = f;
    void *p = NULL;
    ZT_TRY(device_alloc(f->dev, LEDGER_ACTIVATIONS, f->kept_bytes, "fp8 activations", &p));
    f->kept = p;
    ZT_TRY(device_alloc(f->dev, LEDGER_WORKSPACE, f->copies_bytes, "fp8 weight and gradient copies",
                        &p));
    f->copies = p;
    ZT_TRY(device_alloc(f->dev, LEDGER_WORKSPACE, f->scratch_bytes, "fp8 emulation scratch", &p));
    f->scratch = p;
    return ZT_OK;
}

/* Frees what model_fp8_create got, also after it failed part-way: a
 * buffer's pointer is set only once its allocation succeeded (a plan-only
 * device's is NULL but counted, and freed by its size alike). */
void model_fp8_destroy(struct model *m)
{
    struct model_fp8 *f = m->fp8;
    if (!f)
        return;
    const int planned = !device_is_real(f->dev);
    if (f->scratch || planned)
        device_free(f->dev, LEDGER_WORKSPACE, f->scratch_bytes, f->scratch);
    if (f->copies || planned)
        device_free(f->dev, LEDGER_WORKSPACE, f->copies_bytes, f->copies);
    if (f->kept || planned)
        device_free(f->dev, LEDGER_ACTIVATIONS, f->kept_bytes, f->kept);
    free(f);
    m->fp8 = NULL;
}

/* Block l's kept fp8 input of GEMM g: its own slot, or the recompute slot
 * of the checkpointed blocks (the activations' rule). */
static uint8_t *kept_input(const struct model *m, int l, enum fp8_gemm g)
{
    const struct model_fp8 *f = m->fp8;
    const int slot = model_block_checkpointed(f->ckpt_every, l)
                         ? f->n_slots - 1
                         : model_stage_kept_before(f->ckpt_every, &m->stage, l);
    return f->kept + (size_t)slot * f->slot_bytes + f->x_at[g];
}

/* q = fp8(x * scale / divisor) for tensor i (operand o), its amax / divisor
 * recorded when training. */
static zt_status quantise(struct model *m, size_t i, enum fp8_operand o, uint8_t *q, const float *x,
                          size_t n, float divisor)
{
    struct fp8_scaling *s = m->fp8->scaling;
    float amax;
    ZT_TRY(m->fp8->ops->fp8_quantize(m->fp8->ops, q, &amax, x, n, s->scale[i] / divisor,
                                     fp8_operand_format(&s->recipe, o)));
    if (m->training)
        fp8_scaling_record(s, i, amax / divisor);
    return ZT_OK;
}

/* x = decode(q) * scale_inv * divisor: tensor i's values as the GEMM sees them. */
static zt_status dequantise(struct model *m, size_t i, enum fp8_operand o, float *x,
                            const uint8_t *q, size_t n, float divisor)
{
    const struct fp8_scaling *s = m->fp8->scaling;
    return m->fp8->ops->fp8_dequantize(m->fp8->ops, x, q, n, s->scale_inv[i] * divisor,
                                       fp8_operand_format(&s->recipe, o));
}

/* Quantises operand o (n elements of x) of block l's GEMM g into q and
 * decodes it into x_out. */
static zt_status operand(struct model *m, int l, enum fp8_gemm g, enum fp8_operand o, uint8_t *q,
                         const float *x, size_t n, float *x_out)
{
    const size_t i = fp8_scaling_index(l, g, o);
    const float divisor = o == FP8_GRAD_OUTPUT ? m->fp8->scaling->grad_divisor : 1.0f;
    ZT_TRY(quantise(m, i, o, q, x, n, divisor));
    return dequantise(m, i, o, x_out, q, n, divisor);
}

static void check_shape(const struct model *m, enum fp8_gemm g, int N, int C, int OC)
{
    ZT_ASSERT((int)g >= 0 && g < FP8_GEMMS);
    ZT_ASSERT(N == m->B * m->T && C == m->fp8->in[g] && OC == m->fp8->out[g]);
}

zt_status model_linear_forward(struct model *m, const struct ops_backend *ops, int l,
                               enum fp8_gemm g, void *out, const void *inp, const void *weight,
                               const void *bias, int N, int C, int OC)
{
    struct model_fp8 *f = m->fp8;
    if (!f)
        return ops->matmul_forward(ops, model_act(m), out, inp, weight, bias, N, C, OC);
    ZT_ASSERT(model_act(m) == ZT_F32); /* the emulation widens nothing: fp32 passes only */
    check_shape(m, g, N, C, OC);
    float *x = f->scratch, *w = f->scratch + f->w_at;
    ZT_TRY(operand(m, l, g, FP8_INPUT, kept_input(m, l, g), inp, (size_t)N * C, x));
    ZT_TRY(operand(m, l, g, FP8_WEIGHT, f->copies, weight, (size_t)OC * C, w));
    return ops->matmul_forward(ops, ZT_F32, out, x, w, bias, N, C, OC);
}

zt_status model_linear_backward(struct model *m, const struct ops_backend *ops, int l,
                                enum fp8_gemm g, void *dinp, float *dweight, float *dbias,
                                const void *dout, const void *inp, const void *weight, int N, int C,
                                int OC)
{
    struct model_fp8 *f = m->fp8;
    if (!f)
        return ops->matmul_backward(ops, model_act(m), dinp, dweight, dbias, dout, inp, weight, N,
                                    C, OC);
    ZT_ASSERT(dinp && model_act(m) == ZT_F32);
    check_shape(m, g, N, C, OC);
    float *x = f->scratch, *w = f->scratch + f->w_at, *dy = f->scratch + f->dy_scratch_at;
    ZT_TRY(operand(m, l, g, FP8_GRAD_OUTPUT, f->copies + f->dy_at, dout, (size_t)N * OC, dy));
    ZT_TRY(operand(m, l, g, FP8_WEIGHT, f->copies, weight, (size_t)OC * C, w));
    if (dweight)
        ZT_TRY(dequantise(m, fp8_scaling_index(l, g, FP8_INPUT), FP8_INPUT, x, kept_input(m, l, g),
                          (size_t)N * C, 1.0f));
    ZT_TRY(ops->matmul_backward(ops, ZT_F32, dinp, dweight, NULL, dy, x, w, N, C, OC));
    if (dbias)
        ZT_TRY(ops->matmul_backward(ops, ZT_F32, NULL, NULL, dbias, dout, inp, weight, N, C, OC));
    return ZT_OK;
}
