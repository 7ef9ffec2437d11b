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
    ZT_ASSERT(t->family && B > 0 && T > 0 && ckpt_every >= 0);
    ZT_ASSERT(stage->first_block >= 0 && stage->first_block < stage->end_block &&
              stage->end_block <= param_table_blocks(t));
    *out = NULL;
    ZT_TRY(t->family->create(t, be, B, T, ckpt_every, stage, out));
    ZT_ASSERT((*out)->family == t->family && (*out)->table == t);
    zt_status s = model_adapters_create(*out, be);
    if (s == ZT_OK)
        s = model_fp8_create(*out, be, ckpt_every);
    if (s != ZT_OK) {
        model_fp8_destroy(*out);
        model_adapters_destroy(*out);
        (*out)->family->destroy(*out);
        *out = NULL;
    }
    return s;
}

void model_destroy(struct model *m)
{
    if (!m)
        return;
    model_fp8_destroy(m);
    model_adapters_destroy(m);
    model_neftune_free(m);
    m->family->destroy(m);
}

zt_status model_forward(struct model *m, const struct model_unit_hooks *h, const int32_t *inputs,
                        const int32_t *targets)
{
    ZT_ASSERT(m->plan || (inputs && targets));
    return m->family->forward(m, h, inputs, targets);
}

zt_status model_backward(struct model *m, const struct model_unit_hooks *h, float grad_scale)
{
    return m->family->backward(m, h, grad_scale);
}
