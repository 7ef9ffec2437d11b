/* worker/model_instance.c — the generic instance calls of model_family.h:
 * create and destroy an instance through its family, with the parts every
 * family's instance shares (LoRA adapters' state, NEFTune's noise, the
 * fp8 GEMMs' buffers: model_parts.h), and run its passes. */
#include "model_family.h"
#include "model_parts.h"

zt_status model_create(const struct param_table *t, const struct compute_backend *be, int B, int T,
                       int ckpt_every, struct model **out)
{
    const struct model_stage whole = model_stage_whole(t);
    return model_create_stage(t, be, B, T, ckpt_every, &whole, out);
}

zt_status model_create_stage(const struct param_table *t, const struct compute_backend *be, int B,
                             int T, int ckpt_every, const struct model_stage *stage,
                             struct model **out)
{
    return model_create_slot(t, be, B, T, ckpt_every, stage, NULL, out);
}

/* A stage that is not the first: `din` moves out of the scratch into a
 * buffer of the instance's own (counted in a plan too). */
static zt_status own_din(struct model *m, const struct compute_backend *be)
{
    if (m->stage.first)
        return ZT_OK;
    m->boundary_dev = &be->dev;
    m->din_result = m->boundary_din;
    return device_alloc(&be->dev, LEDGER_WORKSPACE, m->boundary_bytes,
                        "a pipeline boundary's gradient", &m->boundary_din);
}

static void own_din_free(struct model *m)
{
    if (m->boundary_dev)
        device_free(m->boundary_dev, LEDGER_WORKSPACE, m->boundary_bytes, m->boundary_din);
    m->boundary_dev = NULL;
}

zt_status model_create_slot(const struct param_table *t, const struct compute_backend *be, int B,
                            int T, int ckpt_every, const struct model_stage *stage,
                            const struct model *lender, struct model **out)
{
    ZT_ASSERT(t->family && B > 0 && T > 0 && ckpt_every >= 0);
    ZT_ASSERT(stage->first_block >= 0 && stage->first_block < stage->end_block &&
              stage->end_block <= param_table_blocks(t));
    /* Context parallelism: the instance holds its rank's T / cp rows of
     * each sequence (model_parts.h). */
    const int cp = t->cp_size > 1 ? t->cp_size : 1;
    ZT_ASSERT(T % (2 * cp) == 0 || cp == 1);
    T /= cp;
    ZT_ASSERT(!lender || (lender->family == t->family && lender->B == B && lender->T == T));
    *out = NULL;
    ZT_TRY(t->family->create(t, be, B, T, ckpt_every, stage, lender, out));
    ZT_ASSERT((*out)->family == t->family && (*out)->table == t);
    zt_status s = own_din(*out, be);
    if (s == ZT_OK)
        s = model_adapters_create(*out, be);
    if (s == ZT_OK)
        s = model_fp8_create(*out, be, ckpt_every);
    if (s == ZT_OK)
        s = model_context_create(*out, be);
    if (s != ZT_OK) {
        model_context_destroy(*out);
        model_fp8_destroy(*out);
        model_adapters_destroy(*out);
        own_din_free(*out);
        (*out)->family->destroy(*out);
        *out = NULL;
    }
    return s;
}

void model_destroy(struct model *m)
{
    if (!m)
        return;
    model_context_destroy(m);
    model_fp8_destroy(m);
    model_adapters_destroy(m);
    model_neftune_free(m);
    own_din_free(m);
    m->family->destroy(m);
}

zt_status model_forward(struct model *m, const struct model_unit_hooks *h, const int32_t *inputs,
                        const int32_t *targets)
{
    ZT_ASSERT(m->plan || (inputs && targets));
    const int32_t *in, *tg;
    model_cp_select(m, inputs, targets, &in, &tg);
    return m->family->forward(m, h, in, tg);
}

zt_status model_backward(struct model *m, const struct model_unit_hooks *h, float grad_scale)
{
    ZT_TRY(m->family->backward(m, h, grad_scale));
    if (!m->din_result || m->plan)
        return ZT_OK;
    return m->boundary_dev->ops->copy(m->boundary_dev, m->boundary_din, m->din_result,
                                      m->boundary_bytes);
}
