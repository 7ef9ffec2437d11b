/* worker/model_parts.c — what every model family's implementation shares
 * (see model_parts.h). */
#include "model_parts.h"

#include <stdio.h>
#include <stdlib.h>

void model_table_add(struct param_table *t, const char *name, int rows, int cols, int unit,
                     size_t *offset)
{
    struct param_tensor *p = &t->tensors[t->n_tensors++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->rows = rows;
    p->cols = cols;
    p->numel = (size_t)rows * (size_t)cols;
    p->offset = *offset;
    p->unit = unit;
    p->trainable = 1;
    p->decay = cols > 1;
    p->storage = PARAM_STORAGE_WORKING;
    *offset += p->numel;
}

int model_blocks_checkpointed(int ckpt_every, int n)
{
    int count = 0;
    for (int l = 0; l < n; l++)
        count += model_block_checkpointed(ckpt_every, l);
    return count;
}

zt_status model_plan_walk(struct model *m, const struct model_unit_hooks *h, enum model_pass pass)
{
    int order[MODEL_MAX_UNITS + 2], embedding_grads = 0;
    const int n = m->family->unit_order(m->table, pass, order, MODEL_MAX_UNITS + 2);
    const int backward = pass == MODEL_PASS_BACKWARD;
    const float *w;
    float *g;
    ZT_ASSERT(n <= MODEL_MAX_UNITS + 2);
    ZT_TRY(h->pass_begin(h->ctx, pass));
    for (int i = 0; i < n; i++) {
        ZT_TRY(h->params_acquire(h->ctx, order[i], &w));
        if (backward)
            ZT_TRY(h->grads_acquire(h->ctx, order[i], &g));
        embedding_grads |= backward && order[i] == 0;
        ZT_TRY(h->params_release(h->ctx, order[i]));
        if (backward && order[i] != 0)
            ZT_TRY(h->grads_done(h->ctx, order[i]));
    }
    if (backward && !embedding_grads)
        ZT_TRY(h->grads_acquire(h->ctx, 0, &g));
    if (backward)
        ZT_TRY(h->grads_done(h->ctx, 0));
    ZT_TRY(h->pass_end(h->ctx, pass));
    return ZT_OK;
}

zt_status model_read_mean_loss(struct model *m, const struct device *dev, const float *dev_losses,
                               int n)
{
    float *losses = malloc((size_t)n * sizeof(float));
    if (!losses)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the loss readback");
    zt_status s = dev->ops->copy_to_host(losses, dev_losses, (size_t)n * sizeof(float));
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += losses[i];
    free(losses);
    ZT_TRY(s);
    m->mean_loss = (float)(sum / n);
    return ZT_OK;
}
