/* worker/model_tensor.c — what both families compute alike under tensor
 * parallelism (model_parts.h): the collectives through the hooks, the
 * vocabulary-parallel embedding and loss, and sequence parallelism's
 * gathers and reduce-scatters of the residual stream's rows. */
#include <string.h>

#include "../common/clock.h"
#include "model_parts.h"
#include "ops.h"
#include "tensor_parallel.h"

/* Runs `call`, timed under `category` when m is profiled. */
#define TIMED(m, category, call)                                                                   \
    do {                                                                                           \
        const double t0_ = (m)->profile ? zt_now_seconds() : 0.0;                                  \
        const zt_status st_ = (call);                                                              \
        if ((m)->profile)                                                                          \
            (m)->profile->seconds[category] += zt_now_seconds() - t0_;                             \
        ZT_TRY(st_);                                                                               \
    } while (0)

static int sliced(const struct model *m)
{
    return param_table_tp_size(m->table) > 1;
}

zt_status model_tp_allreduce(struct model *m, const struct model_unit_hooks *h, enum zt_dtype t,
                             void *buf, size_t n, enum model_reduce op)
{
    if (!sliced(m))
        return ZT_OK;
    ZT_ASSERT(h->tp_allreduce);
    return h->tp_allreduce(h->ctx, t, buf, n, op);
}

static int sequence(const struct model *m)
{
    return sliced(m) && m->table->tp_sequence;
}

int model_sp_rows(const struct model *m)
{
    return m->B * m->T / (sequence(m) ? param_table_tp_size(m->table) : 1);
}

size_t model_sp_offset(const struct model *m, int C)
{
    return sequence(m) ? (size_t)param_table_tp_rank(m->table) * model_sp_rows(m) * C : 0;
}

zt_status model_sp_gather(struct model *m, const struct model_unit_hooks *h, const void *rows,
                          void *full, int C, const void **out)
{
    *out = rows;
    if (!sequence(m))
        return ZT_OK;
    ZT_ASSERT(h->tp_allgather);
    *out = full;
    return h->tp_allgather(h->ctx, model_act(m), rows, full, (size_t)model_sp_rows(m) * C);
}

void *model_sp_partial(const struct model *m, void *rows, void *full)
{
    return sequence(m) ? full : rows;
}

zt_status model_sp_reduce(struct model *m, const struct model_unit_hooks *h, void *partial,
                          void *rows, int C)
{
    if (!sequence(m)) {
        ZT_ASSERT(partial == rows);
        return model_tp_allreduce(m, h, model_act(m), rows, (size_t)m->B * m->T * C,
                                  MODEL_REDUCE_SUM);
    }
    ZT_ASSERT(h->tp_reduce_scatter);
    return h->tp_reduce_scatter(h->ctx, model_act(m), partial, rows, (size_t)model_sp_rows(m) * C);
}

zt_status model_sp_norm_grad(struct model *m, const struct ops_backend *ops, float *grad,
                             float *tmp, size_t n, float **out)
{
    *out = grad;
    if (!sequence(m) || !grad)
        return ZT_OK;
    *out = tmp;
    return ops->memset_zero(ops, tmp, n * sizeof(float));
}

zt_status model_sp_norm_done(struct model *m, const struct ops_backend *ops,
                             const struct model_unit_hooks *h, float *grad, float *tmp, size_t n)
{
    if (!sequence(m) || !grad)
        return ZT_OK;
    ZT_TRY(model_tp_allreduce(m, h, ZT_F32, tmp, n, MODEL_REDUCE_SUM));
    return ops->residual_forward(ops, ZT_F32, grad, grad, tmp, (int)n);
}

zt_status model_vocab_embed_forward(struct model *m, const struct ops_backend *ops,
                                    const struct model_unit_hooks *h, void *out, void *full,
                                    const int32_t *tokens, const void *wte, const void *wpe, int C,
                                    int V, int v_lo)
{
    if (!sliced(m)) {
        TIMED(m, MODEL_PROF_ENCODER,
              ops->encoder_forward(ops, model_act(m), out, tokens, wte, wpe, m->B, m->T, C));
        return model_neftune_apply(m, out, C);
    }
    /* the positions and NEFTune's noise once, by the first slice, so that
     * the sum has them once */
    const int first = param_table_tp_rank(m->table) == 0;
    void *partial = model_sp_partial(m, out, full);
    TIMED(m, MODEL_PROF_ENCODER,
          ops->encoder_forward_vocab(ops, model_act(m), partial, tokens, wte, first ? wpe : NULL,
                                     m->B, m->T, C, v_lo, V));
    if (first)
        ZT_TRY(model_neftune_apply(m, partial, C));
    return model_sp_reduce(m, h, partial, out, C);
}

zt_status model_vocab_embed_backward(struct model *m, const struct ops_backend *ops,
                                     const struct model_unit_hooks *h, float *dwte, float *dwpe,
                                     const void *dout, void *full, const int32_t *tokens, int C,
                                     int V, int v_lo)
{
    if (!sliced(m)) {
        TIMED(m, MODEL_PROF_ENCODER,
              ops->encoder_backward(ops, model_act(m), dwte, dwpe, dout, tokens, m->B, m->T, C));
        return ZT_OK;
    }
    const void *d;
    ZT_TRY(model_sp_gather(m, h, dout, full, C, &d));
    TIMED(m, MODEL_PROF_ENCODER,
          ops->encoder_backward_vocab(ops, model_act(m), dwte, dwpe, d, tokens, m->B, m->T, C, v_lo,
                                      V));
    return ZT_OK;
}

int model_vocab_real(const struct param_table *t, int V, int v_lo)
{
    const int real = param_table_vocab(t) - v_lo;
    return real < 0 ? 0 : real < V ? real : V;
}

int model_vocab_split(const struct param_table *t)
{
    return param_table_tp_size(t) > 1 || param_table_vocab_padded(t) != param_table_vocab(t);
}

zt_status model_vocab_loss_forward(struct model *m, const struct ops_backend *ops,
                                   const struct model_unit_hooks *h, float *losses, void *probs,
                                   const void *logits, const int32_t *targets, float *stats, int N,
                                   int V, int v_lo)
{
    if (!model_vocab_split(m->table)) {
        TIMED(m, MODEL_PROF_CROSSENTROPY,
              ops->crossentropy_forward(ops, model_act(m), losses, probs, logits, targets, N, V));
        return ZT_OK;
    }
    /* the split ops, also for one rank with padding: they leave it out */
    const int Vr = model_vocab_real(m->table, V, v_lo);
    float *row_max = stats, *row_sums = stats + N; /* sums of exponentials, then target logits */
    TIMED(m, MODEL_PROF_CROSSENTROPY,
          ops->crossentropy_vocab_max(ops, model_act(m), row_max, logits, N, V, Vr));
    ZT_TRY(model_tp_allreduce(m, h, ZT_F32, row_max, (size_t)N, MODEL_REDUCE_MAX));
    TIMED(m, MODEL_PROF_CROSSENTROPY,
          ops->crossentropy_vocab_exp(ops, model_act(m), probs, row_sums, logits, row_max, targets,
                                      N, V, Vr, v_lo));
    ZT_TRY(model_tp_allreduce(m, h, ZT_F32, row_sums, 2 * (size_t)N, MODEL_REDUCE_SUM));
    TIMED(
        m, MODEL_PROF_CROSSENTROPY,
        ops->crossentropy_vocab_finish(ops, model_act(m), losses, probs, row_sums, targets, N, V));
    return ZT_OK;
}

zt_status model_vocab_loss_backward(struct model *m, const struct ops_backend *ops, void *dlogits,
                                    const void *probs, const int32_t *targets, float dloss, int N,
                                    int V, int v_lo)
{
    if (!model_vocab_split(m->table))
        TIMED(m, MODEL_PROF_CROSSENTROPY,
              ops->crossentropy_backward(ops, model_act(m), dlogits, probs, targets, dloss, N, V));
    else
        TIMED(m, MODEL_PROF_CROSSENTROPY,
              ops->crossentropy_vocab_backward(ops, model_act(m), dlogits, probs, targets, dloss, N,
                                               V, v_lo));
    return ZT_OK;
}
