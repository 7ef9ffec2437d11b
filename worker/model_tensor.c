/* worker/model_tensor.c — what both families compute alike under tensor
 * parallelism (model_parts.h): the allreduce through the hooks, and the
 * vocabulary-parallel embedding and loss. */
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

zt_status model_tp_allreduce(struct model *m, const struct model_unit_hooks *h, float *buf,
                             size_t n, enum model_reduce op)
{
    if (!sliced(m))
        return ZT_OK;
    ZT_ASSERT(h->tp_allreduce);
    return h->tp_allreduce(h->ctx, buf, n, op);
}

zt_status model_vocab_embed_forward(struct model *m, const struct ops_backend *ops,
                                    const struct model_unit_hooks *h, float *out,
                                    const int32_t *tokens, const float *wte, const float *wpe,
                                    int C, int V, int v_lo)
{
    if (!sliced(m)) {
        TIMED(m, MODEL_PROF_ENCODER, ops->encoder_forward(out, tokens, wte, wpe, m->B, m->T, C));
        return ZT_OK;
    }
    /* the positions once, by the first slice, so that the sum has them once */
    const float *positions = param_table_tp_rank(m->table) == 0 ? wpe : NULL;
    TIMED(m, MODEL_PROF_ENCODER,
          ops->encoder_forward_vocab(out, tokens, wte, positions, m->B, m->T, C, v_lo, V));
    return model_tp_allreduce(m, h, out, (size_t)m->B * m->T * C, MODEL_REDUCE_SUM);
}

zt_status model_vocab_embed_backward(struct model *m, const struct ops_backend *ops, float *dwte,
                                     float *dwpe, const float *dout, const int32_t *tokens, int C,
                                     int V, int v_lo)
{
    if (!sliced(m))
        TIMED(m, MODEL_PROF_ENCODER,
              ops->encoder_backward(dwte, dwpe, dout, tokens, m->B, m->T, C));
    else
        TIMED(m, MODEL_PROF_ENCODER,
              ops->encoder_backward_vocab(dwte, dwpe, dout, tokens, m->B, m->T, C, v_lo, V));
    return ZT_OK;
}

zt_status model_vocab_loss_forward(struct model *m, const struct ops_backend *ops,
                                   const struct model_unit_hooks *h, float *losses, float *probs,
                                   const float *logits, const int32_t *targets, float *stats, int N,
                                   int V, int v_lo)
{
    if (!sliced(m)) {
        TIMED(m, MODEL_PROF_CROSSENTROPY,
              ops->crossentropy_forward(losses, probs, logits, targets, N, V));
        return ZT_OK;
    }
    float *row_max = stats, *row_sums = stats + N; /* sums of exponentials, then target logits */
    TIMED(m, MODEL_PROF_CROSSENTROPY, ops->crossentropy_vocab_max(row_max, logits, N, V));
    ZT_TRY(model_tp_allreduce(m, h, row_max, (size_t)N, MODEL_REDUCE_MAX));
    TIMED(m, MODEL_PROF_CROSSENTROPY,
          ops->crossentropy_vocab_exp(probs, row_sums, logits, row_max, targets, N, V, v_lo));
    ZT_TRY(model_tp_allreduce(m, h, row_sums, 2 * (size_t)N, MODEL_REDUCE_SUM));
    TIMED(m, MODEL_PROF_CROSSENTROPY,
          ops->crossentropy_vocab_finish(losses, probs, row_sums, targets, N, V));
    return ZT_OK;
}

zt_status model_vocab_loss_backward(struct model *m, const struct ops_backend *ops, float *dlogits,
                                    const float *probs, const int32_t *targets, float dloss, int N,
                                    int V, int v_lo)
{
    if (!sliced(m))
        TIMED(m, MODEL_PROF_CROSSENTROPY,
              ops->crossentropy_backward(dlogits, probs, targets, dloss, N, V));
    else
        TIMED(m, MODEL_PROF_CROSSENTROPY,
              ops->crossentropy_vocab_backward(dlogits, probs, targets, dloss, N, V, v_lo));
    return ZT_OK;
}
