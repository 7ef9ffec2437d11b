/* worker/model_context.c — context parallelism inside a model instance
 * (model_parts.h has the cut of the sequence).
 *
 * Ring attention. Forward, on rank r of C: this rank's key/value columns
 * are packed into a block kv[B, T, 2 NKV hs]; at step s the block of rank
 * r - s is attended to (ops.h's attention_ring_forward, merged through the
 * log-sum-exps) while, for s < C - 1, it is passed on to r + 1 and the
 * next one received from r - 1. Backward: the same ring of key/value
 * blocks, each travelling with its dk/dv accumulator; every rank adds its
 * queries' part (attention_ring_backward), and after the last step the
 * accumulators take one more hop, which brings each home, complete, to be
 * added into dqkv's key/value columns. Traffic per layer and micro batch:
 * (C - 1) blocks forward, 2 (C - 1) + 1 backward, each B T 2 NKV hs
 * elements (the planner's plan/plan_context.c counts the same). A
 * key/value block's exchange is posted before the current block's
 * attention and completed after it, so the two overlap; an accumulator
 * can travel only once its block's backward has finished with it.
 *
 * Buffers (workspace, one set per instance): two key/value blocks and two
 * accumulators (send and receive), and under learned positions T rows of
 * wpe and of their gradient. The rest of the model's memory is the
 * family's own at T = S / C rows: activations fall by the factor C.
 */
#include "model_parts.h"

#include <stdlib.h>
#include <string.h>

static size_t act_size(const struct model *m)
{
    return zt_dtype_size(model_act(m));
}

zt_status model_context_create(struct model *m, const struct compute_backend *be)
{
    m->context = NULL;
    if (m->table->cp_size <= 1)
        return ZT_OK;
    if (!m->plan && (!be->ops->attention_ring_forward || !be->ops->attention_ring_backward))
        return zt_error_set(ZT_ERR_UNSUPPORTED,
                            "context_parallel.size: the %s backend has no ring attention (the "
                            "CPU backend has)",
                            be->name);
    ZT_ASSERT(m->cp_kv_width > 0 && m->T % 2 == 0);
    struct model_context *c = calloc(1, sizeof *c);
    if (!c)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the context-parallel state");
    m->context = c;
    c->dev = &be->dev;
    c->ops = be->ops;
    c->cp = m->table->cp_size;
    c->rank = m->table->cp_rank;
    const size_t rows = (size_t)m->B * m->T;
    c->kv_bytes = rows * (size_t)m->cp_kv_width * act_size(m);
    c->pos_bytes = (size_t)m->T * (size_t)m->cp_pos_width * act_size(m);
    c->dpos_bytes = (size_t)m->T * (size_t)m->cp_pos_width * sizeof(float);
    for (int i = 0; i < 2; i++) {
        ZT_TRY(device_alloc(c->dev, LEDGER_WORKSPACE, c->kv_bytes,
                            "ring attention's key/value block", &c->kv[i]));
        ZT_TRY(device_alloc(c->dev, LEDGER_WORKSPACE, c->kv_bytes,
                            "ring attention's key/value gradient", &c->dkv[i]));
    }
    if (c->pos_bytes) {
        ZT_TRY(device_alloc(c->dev, LEDGER_WORKSPACE, c->pos_bytes, "this rank's position rows",
                            &c->pos));
        void *p;
        ZT_TRY(device_alloc(c->dev, LEDGER_WORKSPACE, c->dpos_bytes,
                            "this rank's position rows' gradient", &p));
        c->dpos = p;
    }
    if (m->plan)
        return ZT_OK;
    c->host_tokens = malloc(2 * rows * sizeof(int32_t));
    if (!c->host_tokens)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the context-parallel token rows");
    return ZT_OK;
}

void model_context_destroy(struct model *m)
{
    struct model_context *c = m->context;
    if (!c)
        return;
    for (int i = 0; i < 2; i++) {
        if (c->kv[i])
            device_free(c->dev, LEDGER_WORKSPACE, c->kv_bytes, c->kv[i]);
        if (c->dkv[i])
            device_free(c->dev, LEDGER_WORKSPACE, c->kv_bytes, c->dkv[i]);
    }
    if (c->pos)
        device_free(c->dev, LEDGER_WORKSPACE, c->pos_bytes, c->pos);
    if (c->dpos)
        device_free(c->dev, LEDGER_WORKSPACE, c->dpos_bytes, c->dpos);
    free(c->host_tokens);
    free(c);
    m->context = NULL;
}

void model_cp_select(struct model *m, const int32_t *inputs, const int32_t *targets,
                     const int32_t **in, const int32_t **tg)
{
    struct model_context *c = m->context;
    *in = inputs;
    *tg = targets;
    if (!c || !inputs)
        return;
    const int T = m->T, S = T * c->cp;
    int32_t *li = c->host_tokens, *lt = c->host_tokens + (size_t)m->B * T;
    for (int b = 0; b < m->B; b++)
        for (int t = 0; t < T; t++) {
            const size_t g = (size_t)b * S + (size_t)model_cp_position(m, t);
            li[(size_t)b * T + t] = inputs[g];
            lt[(size_t)b * T + t] = targets[g];
        }
    *in = li;
    *tg = lt;
}

/* Copies (add 0) or adds (add 1) the key/value columns of every row of
 * qkv[B*T, ld] to or from the packed block kv[B*T, width]: pack copies
 * qkv -> kv, unpack adds kv into qkv. */
static zt_status kv_columns(struct model *m, int unpack, void *qkv, void *kv, int NH, int NKV,
                            int hs)
{
    const struct model_context *c = m->context;
    const size_t es = act_size(m), ld = (size_t)(NH + 2 * NKV) * hs, w = (size_t)m->cp_kv_width;
    ZT_ASSERT(w == (size_t)2 * NKV * hs);
    unsigned char *q = qkv, *k = kv;
    for (size_t row = 0; row < (size_t)m->B * m->T; row++) {
        unsigned char *qr = q + (row * ld + (size_t)NH * hs) * es, *kr = k + row * w * es;
        if (unpack)
            ZT_TRY(c->ops->add_into(c->ops, model_act(m), qr, kr, w));
        else
            ZT_TRY(c->dev->ops->copy(c->dev, kr, qr, w * es));
    }
    return ZT_OK;
}

/* Starts passing bufs[s % 2] on around the ring into the other buffer. */
static zt_status pass_start(struct model *m, const struct model_unit_hooks *h, void *const bufs[2],
                            int s, void **pending)
{
    const size_t n = (size_t)m->B * m->T * (size_t)m->cp_kv_width;
    return h->cp_ring_start(h->ctx, model_act(m), bufs[s % 2], bufs[(s + 1) % 2], n, pending);
}

/* Completes a pass started while `st` was computed: both statuses count,
 * the first failure wins. */
static zt_status pass_wait(const struct model_unit_hooks *h, void *pending, zt_status st)
{
    const zt_status w = pending ? h->cp_ring_wait(h->ctx, pending) : ZT_OK;
    ZT_TRY(st);
    return w;
}

zt_status model_attention_forward(struct model *m, const struct ops_backend *ops,
                                  const struct model_unit_hooks *h, void *out, float *lse,
                                  const void *qkv, int NH, int NKV, int hs)
{
    struct model_context *c = m->context;
    if (!c)
        return ops->attention_forward(ops, model_act(m), out, lse, qkv, m->B, m->T, NH, NKV, hs);
    ZT_ASSERT(h->cp_ring_start && h->cp_ring_wait);
    ZT_TRY(kv_columns(m, 0, (void *)qkv, c->kv[0], NH, NKV, hs));
    for (int s = 0; s < c->cp; s++) {
        /* the next block travels while this one is attended to */
        const int owner = (c->rank - s + c->cp) % c->cp;
        void *pending = NULL;
        if (s + 1 < c->cp)
            ZT_TRY(pass_start(m, h, c->kv, s, &pending));
        const zt_status st =
            ops->attention_ring_forward(ops, model_act(m), out, lse, qkv, c->kv[s % 2], m->B, m->T,
                                        NH, NKV, hs, c->cp, c->rank, owner, s == 0);
        ZT_TRY(pass_wait(h, pending, st));
    }
    return ZT_OK;
}

zt_status model_attention_backward(struct model *m, const struct ops_backend *ops,
                                   const struct model_unit_hooks *h, void *dqkv, const void *dout,
                                   const void *qkv, const void *out, const float *lse, int NH,
                                   int NKV, int hs)
{
    struct model_context *c = m->context;
    if (!c)
        return ops->attention_backward(ops, model_act(m), dqkv, dout, qkv, out, lse, m->B, m->T, NH,
                                       NKV, hs);
    ZT_ASSERT(h->cp_ring_start && h->cp_ring_wait);
    ZT_TRY(kv_columns(m, 0, (void *)qkv, c->kv[0], NH, NKV, hs));
    ZT_TRY(c->dev->ops->memset_zero(c->dev, c->dkv[0], c->kv_bytes));
    for (int s = 0; s < c->cp; s++) {
        /* the next key/value block travels during this block's backward;
         * its accumulator only after it (the last hop brings each home) */
        const int owner = (c->rank - s + c->cp) % c->cp;
        void *pending = NULL;
        if (s + 1 < c->cp)
            ZT_TRY(pass_start(m, h, c->kv, s, &pending));
        const zt_status st = ops->attention_ring_backward(ops, model_act(m), dqkv, c->dkv[s % 2],
                                                          dout, qkv, c->kv[s % 2], out, lse, m->B,
                                                          m->T, NH, NKV, hs, c->cp, c->rank, owner);
        ZT_TRY(pass_wait(h, pending, st));
        ZT_TRY(pass_start(m, h, c->dkv, s, &pending));
        ZT_TRY(pass_wait(h, pending, ZT_OK));
    }
    return kv_columns(m, 1, dqkv, c->dkv[c->cp % 2], NH, NKV, hs);
}

zt_status model_cp_positions(struct model *m, const void *wpe, const void **out)
{
    struct model_context *c = m->context;
    *out = wpe;
    if (!c || !wpe)
        return ZT_OK;
    const size_t row = (size_t)m->cp_pos_width * act_size(m), half = (size_t)m->T / 2;
    for (int k = 0; k < 2; k++) {
        const size_t from = (size_t)model_cp_position(m, (int)(k * half));
        ZT_TRY(c->dev->ops->copy(c->dev, (unsigned char *)c->pos + k * half * row,
                                 (const unsigned char *)wpe + from * row, half * row));
    }
    *out = c->pos;
    return ZT_OK;
}

zt_status model_cp_positions_grad(struct model *m, float *dwpe, float **out)
{
    struct model_context *c = m->context;
    *out = dwpe;
    if (!c || !dwpe)
        return ZT_OK;
    ZT_TRY(c->dev->ops->memset_zero(c->dev, c->dpos, c->dpos_bytes));
    *out = c->dpos;
    return ZT_OK;
}

zt_status model_cp_positions_done(struct model *m, float *dwpe)
{
    struct model_context *c = m->context;
    if (!c || !dwpe)
        return ZT_OK;
    const size_t w = (size_t)m->cp_pos_width, half = (size_t)m->T / 2;
    for (int k = 0; k < 2; k++) {
        const size_t from = (size_t)model_cp_position(m, (int)(k * half));
        ZT_TRY(c->ops->add_into(c->ops, ZT_F32, dwpe + from * w, c->dpos + k * half * w, half * w));
    }
    return ZT_OK;
}
