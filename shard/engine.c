/* shard/engine.c — the ZeRO engine: model states, the model's unit hooks,
 * and the optimizer step.
 *
 * Stage 0 (plain data parallel) life of one optimizer step:
 *   micro steps: forward/backward borrow the full params and accumulate into
 *   the full grads (no communication);
 *   shard_engine_step: allreduce(sum) grads -> scale 1/world -> global norm ->
 *   clip -> AdamW over every tensor -> zero grads.
 * Every rank runs the same update on the same averaged gradients, so the
 * parameters stay bit-identical without a broadcast.
 */
#include <math.h>
#include <string.h>

#include "shard.h"

static zt_status full_params_acquire(void *ctx, int unit, const float **params)
{
    struct shard_engine *e = ctx;
    *params = e->params + e->table->unit_offset[unit];
    return ZT_OK;
}

static zt_status full_grads_acquire(void *ctx, int unit, float **grads)
{
    struct shard_engine *e = ctx;
    *grads = e->grads + e->table->unit_offset[unit];
    return ZT_OK;
}

static zt_status nothing_to_do(void *ctx, int unit)
{
    (void)ctx;
    (void)unit;
    return ZT_OK;
}

static zt_status alloc_floats(struct shard_engine *e, enum ledger_category cat, size_t n,
                              const char *what, float **out)
{
    void *p;
    ZT_ASSERT(e->n_allocs < SHARD_MAX_ALLOCS);
    ZT_TRY(device_alloc(e->dev, cat, n * sizeof(float), what, &p));
    e->allocs[e->n_allocs++] = (struct shard_alloc){cat, n * sizeof(float), p};
    *out = p;
    return ZT_OK;
}

zt_status shard_engine_create(const struct shard_engine_config *cfg, const struct param_table *t,
                              struct comm *comm, struct device *dev, struct shard_engine *out)
{
    memset(out, 0, sizeof *out);
    if (cfg->stage != 0)
        return zt_error_set(ZT_ERR_UNSUPPORTED,
                            "zero_optimization.stage %d: not supported yet (stage 0 only)",
                            cfg->stage);
    out->cfg = *cfg;
    out->table = t;
    out->comm = comm;
    out->dev = dev;
    out->n_params = t->n_params;
    ZT_TRY(shard_partition_build(t, comm_size(comm), &out->part));

    zt_status s;
    if ((s = alloc_floats(out, LEDGER_PARAMS, t->n_params, "parameters", &out->params)) ||
        (s = alloc_floats(out, LEDGER_GRADS, t->n_params, "gradients", &out->grads)) ||
        (s = alloc_floats(out, LEDGER_OPTIMIZER_STATES, t->n_params, "AdamW m", &out->m)) ||
        (s = alloc_floats(out, LEDGER_OPTIMIZER_STATES, t->n_params, "AdamW v", &out->v))) {
        shard_engine_destroy(out);
        return s;
    }
    if (device_is_real(dev))
        gpt2_init_params(t, cfg->seed, 0, t->n_params, out->params);

    out->hooks = (struct gpt2_unit_hooks){
        .ctx = out,
        .params_acquire = full_params_acquire,
        .params_release = nothing_to_do,
        .grads_acquire = full_grads_acquire,
        .grads_done = nothing_to_do,
    };
    return ZT_OK;
}

void shard_engine_destroy(struct shard_engine *e)
{
    /* Frees exactly what was counted, real or planned, newest first. */
    while (e->n_allocs > 0) {
        const struct shard_alloc *a = &e->allocs[--e->n_allocs];
        device_free(e->dev, a->cat, a->bytes, a->ptr);
    }
    shard_partition_free(&e->part);
    memset(e, 0, sizeof *e);
}

static double sum_of_squares(const float *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}

static void scale(float *x, size_t n, float f)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= f;
}

zt_status shard_engine_step(struct shard_engine *e, struct adamw_hparams *hp, double *grad_norm)
{
    const int world = comm_size(e->comm);
    ZT_TRY(comm_allreduce(e->comm, e->grads, e->n_params, ZT_F32, COMM_OP_SUM));
    if (world > 1)
        scale(e->grads, e->n_params, 1.0f / (float)world);

    double norm = sqrt(sum_of_squares(e->grads, e->n_params));
    *grad_norm = norm;
    if (!isfinite(norm))
        return zt_error_set(ZT_ERR_NUMERIC,
                            "gradient norm is %f at step %ld: training diverged (lower "
                            "optimizer.params.lr or set gradient_clipping)",
                            norm, e->updates + 1);
    if (e->cfg.clip > 0.0 && norm > e->cfg.clip)
        scale(e->grads, e->n_params, (float)(e->cfg.clip / (norm + 1e-6)));

    hp->step = ++e->updates;
    for (int k = 0; k < e->table->n_tensors; k++) {
        const struct param_tensor *p = &e->table->tensors[k];
        adamw_update(e->params + p->offset, e->grads + p->offset, e->m + p->offset,
                     e->v + p->offset, p->numel, p->decay ? 1.0f : 0.0f, hp);
    }
    memset(e->grads, 0, e->n_params * sizeof(float));
    return ZT_OK;
}

zt_status shard_engine_full_params(struct shard_engine *e, float *dst)
{
    return e->dev->ops->copy_to_host(dst, e->params, e->n_params * sizeof(float));
}
