/* shard/engine.c — the ZeRO engine: model states, the model's unit hooks,
 * and the optimizer step, for stages 0 to 3 (see shard.h for what each
 * stage keeps).
 *
 * One optimizer step, by stage:
 *   micro steps   forward/backward through the hooks. Stages 0-1 accumulate
 *                 into full grads; stages 2-3 hand each unit's gradient,
 *                 once complete, to a non-blocking reduce-scatter and add
 *                 the result to the rank's grad shards. Stage 3 gathers
 *                 every unit before use (prefetching the next ones) and
 *                 frees it after.
 *   step          stage 0 allreduces the grads; stage 1 reduce-scatters
 *                 them unit by unit; every stage averages over ranks, takes
 *                 the global norm (stages 1-3 from the shards with one
 *                 allreduce), clips, and runs AdamW on the range it owns;
 *                 stages 1-2 allgather the updated params in place.
 * Every collective is issued in the same order on every rank: the schedule
 * depends only on the model and the configuration.
 *
 * Under a plan-only device every allocation is made and counted exactly as
 * in a real step, but nothing is computed or communicated.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "shard.h"

enum gather_state { GATHER_RELEASED, GATHER_GATHERING, GATHER_RESIDENT };

struct shard_gather {
    int unit;
    enum gather_state state;
    float *buf; /* full padded unit, gathered_params */
    struct comm_request *req;
};

struct shard_reduce {
    int unit;
    float *recv; /* the rank's reduced shard, comm_buffers */
    struct comm_request *req;
};

static size_t unit_bytes(const struct shard_engine *e, int u)
{
    return e->part.units[u].padded * sizeof(float);
}

static size_t shard_bytes(const struct shard_engine *e, int u)
{
    return e->part.units[u].shard * sizeof(float);
}

/* ---- persistent states ---------------------------------------------------- */

static zt_status alloc_state(struct shard_engine *e, enum ledger_category cat, size_t n,
                             const char *what, float **out)
{
    void *p;
    ZT_ASSERT(e->n_allocs < SHARD_MAX_ALLOCS);
    ZT_TRY(device_alloc(e->dev, cat, n * sizeof(float), what, &p));
    e->allocs[e->n_allocs++] = (struct shard_alloc){cat, n * sizeof(float), p};
    *out = p;
    return ZT_OK;
}

static zt_status alloc_states(struct shard_engine *e)
{
    const int stage = e->cfg.stage;
    const size_t full = e->part.padded_total, shard = e->part.shard_total;
    ZT_TRY(alloc_state(e, LEDGER_PARAMS, stage < 3 ? full : shard, "parameters", &e->params));
    ZT_TRY(alloc_state(e, LEDGER_GRADS, stage < 2 ? full : shard, "gradients", &e->grads));
    ZT_TRY(alloc_state(e, LEDGER_OPTIMIZER_STATES, stage == 0 ? full : shard, "AdamW m", &e->m));
    ZT_TRY(alloc_state(e, LEDGER_OPTIMIZER_STATES, stage == 0 ? full : shard, "AdamW v", &e->v));
    return ZT_OK;
}

static void init_params(struct shard_engine *e)
{
    const struct param_table *t = e->table;
    for (int u = 0; u < t->n_units; u++) {
        const struct shard_unit *su = &e->part.units[u];
        if (e->cfg.stage < 3) {
            gpt2_init_params(t, e->cfg.seed, su->offset, su->offset + su->numel,
                             e->params + su->padded_offset);
        } else {
            size_t lo, hi;
            shard_owned_range(&e->part, e->cfg.rank, u, &lo, &hi);
            if (hi > lo)
                gpt2_init_params(t, e->cfg.seed, su->offset + lo, su->offset + hi,
                                 e->params + su->shard_offset);
        }
    }
}

/* ---- stage 3: gathering units ------------------------------------------- */

static zt_status start_gather(struct shard_engine *e, int pos)
{
    struct shard_gather *g = &e->gathers[pos];
    const int u = e->schedule[pos];
    const struct shard_unit *su = &e->part.units[u];
    void *buf;
    ZT_ASSERT(g->state == GATHER_RELEASED);
    ZT_TRY(device_alloc(e->dev, LEDGER_GATHERED_PARAMS, unit_bytes(e, u), "a gathered unit", &buf));
    g->unit = u;
    g->buf = buf;
    g->req = NULL;
    g->state = GATHER_GATHERING;
    if (!e->plan)
        ZT_TRY(comm_iallgather(e->comm, e->params + su->shard_offset, g->buf, su->shard, ZT_F32,
                               &g->req));
    return ZT_OK;
}

static zt_status finish_gather(struct shard_engine *e, int pos)
{
    struct shard_gather *g = &e->gathers[pos];
    ZT_ASSERT(g->state == GATHER_GATHERING);
    if (g->req) {
        struct comm_request *req = g->req;
        g->req = NULL;
        ZT_TRY(comm_wait(e->comm, req));
    }
    g->state = GATHER_RESIDENT;
    return ZT_OK;
}

static void release_gather(struct shard_engine *e, struct shard_gather *g)
{
    ZT_ASSERT(g->state == GATHER_RESIDENT);
    device_free(e->dev, LEDGER_GATHERED_PARAMS, unit_bytes(e, g->unit), g->buf);
    g->buf = NULL;
    g->state = GATHER_RELEASED;
}

static zt_status gathered_acquire(struct shard_engine *e, int unit, const float **params)
{
    /* The model acquires units exactly in gpt2_unit_order's order. */
    ZT_ASSERT(e->cursor < e->n_schedule && e->schedule[e->cursor] == unit);
    const int pos = e->cursor++;
    if (pos >= e->issued) {
        ZT_TRY(start_gather(e, pos));
        e->issued = pos + 1;
    }
    ZT_TRY(finish_gather(e, pos));
    while (e->issued < e->n_schedule && e->issued <= pos + e->cfg.prefetch_depth) {
        ZT_TRY(start_gather(e, e->issued));
        e->issued++;
    }
    *params = e->gathers[pos].buf;
    return ZT_OK;
}

static zt_status gathered_release(struct shard_engine *e, int unit)
{
    for (int pos = e->cursor - 1; pos >= 0; pos--) {
        struct shard_gather *g = &e->gathers[pos];
        if (g->state == GATHER_RESIDENT && g->unit == unit) {
            release_gather(e, g);
            return ZT_OK;
        }
    }
    ZT_ASSERT(0 && "release of a unit that is not resident");
    return ZT_ERR_INTERNAL;
}

/* ---- stages 2-3: reducing unit gradients ------------------------------------ */

static void add_into(float *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

static zt_status finish_oldest_reduce(struct shard_engine *e)
{
    ZT_ASSERT(e->n_reduces > 0);
    struct shard_reduce r = e->reduces[0];
    memmove(e->reduces, e->reduces + 1, (size_t)(e->n_reduces - 1) * sizeof *e->reduces);
    e->n_reduces--;
    const struct shard_unit *su = &e->part.units[r.unit];
    zt_status st = r.req ? comm_wait(e->comm, r.req) : ZT_OK;
    if (st == ZT_OK && !e->plan)
        add_into(e->grads + su->shard_offset, r.recv, su->shard);
    device_free(e->dev, LEDGER_COMM_BUFFERS, shard_bytes(e, r.unit), r.recv);
    device_free(e->dev, LEDGER_COMM_BUFFERS, unit_bytes(e, r.unit), e->unit_grads[r.unit]);
    e->unit_grads[r.unit] = NULL;
    return st;
}

static zt_status start_reduce(struct shard_engine *e, int unit)
{
    const struct shard_unit *su = &e->part.units[unit];
    struct shard_reduce *r = &e->reduces[e->n_reduces];
    void *recv;
    ZT_ASSERT(e->n_reduces < e->table->n_units);
    ZT_TRY(device_alloc(e->dev, LEDGER_COMM_BUFFERS, shard_bytes(e, unit), "a reduced shard",
                        &recv));
    *r = (struct shard_reduce){unit, recv, NULL};
    e->n_reduces++;
    if (!e->plan)
        ZT_TRY(comm_ireduce_scatter(e->comm, e->unit_grads[unit], r->recv, su->shard, ZT_F32,
                                    COMM_OP_SUM, &r->req));
    return ZT_OK;
}

/* Closes the open bucket: the previous bucket's reductions complete (double
 * buffering: one bucket reduces while the backward fills the next), then
 * this bucket's are issued. */
static zt_status close_bucket(struct shard_engine *e)
{
    while (e->n_reduces > 0)
        ZT_TRY(finish_oldest_reduce(e));
    for (int i = 0; i < e->n_bucket; i++)
        ZT_TRY(start_reduce(e, e->bucket[i]));
    e->n_bucket = 0;
    e->bucket_elems = 0;
    return ZT_OK;
}

/* A unit's gradient is complete: it joins the open bucket, which closes
 * once it holds reduce_bucket_size elements (a larger unit is a bucket of
 * its own). */
static zt_status unit_grads_complete(struct shard_engine *e, int unit)
{
    ZT_ASSERT(e->n_bucket < e->table->n_units);
    e->bucket[e->n_bucket++] = unit;
    e->bucket_elems += e->part.units[unit].padded;
    if (e->bucket_elems >= e->cfg.reduce_bucket_size)
        ZT_TRY(close_bucket(e));
    return ZT_OK;
}

/* ---- the hooks ------------------------------------------------------------ */

static zt_status hook_pass_begin(void *ctx, enum gpt2_pass pass)
{
    struct shard_engine *e = ctx;
    if (e->cfg.stage == 3) {
        e->n_schedule = gpt2_unit_order(e->table, pass, e->schedule, GPT2_MAX_UNITS + 2);
        ZT_ASSERT(e->n_schedule <= GPT2_MAX_UNITS + 2);
        e->cursor = 0;
        e->issued = 0;
    }
    return ZT_OK;
}

static zt_status hook_pass_end(void *ctx, enum gpt2_pass pass)
{
    struct shard_engine *e = ctx;
    if (pass == GPT2_PASS_BACKWARD && e->cfg.stage >= 2) {
        ZT_TRY(close_bucket(e));
        while (e->n_reduces > 0)
            ZT_TRY(finish_oldest_reduce(e));
    }
    if (e->cfg.stage == 3) {
        ZT_ASSERT(e->cursor == e->n_schedule && e->issued == e->n_schedule);
        for (int pos = 0; pos < e->n_schedule; pos++)
            ZT_ASSERT(e->gathers[pos].state == GATHER_RELEASED);
    }
    return ZT_OK;
}

static zt_status hook_params_acquire(void *ctx, int unit, const float **params)
{
    struct shard_engine *e = ctx;
    if (e->cfg.stage == 3)
        return gathered_acquire(e, unit, params);
    *params = e->params + e->part.units[unit].padded_offset;
    return ZT_OK;
}

static zt_status hook_params_release(void *ctx, int unit)
{
    struct shard_engine *e = ctx;
    return e->cfg.stage == 3 ? gathered_release(e, unit) : ZT_OK;
}

static zt_status hook_grads_acquire(void *ctx, int unit, float **grads)
{
    struct shard_engine *e = ctx;
    if (e->cfg.stage < 2) {
        *grads = e->grads + e->part.units[unit].padded_offset;
        return ZT_OK;
    }
    if (!e->unit_grads[unit]) {
        void *p;
        ZT_TRY(device_alloc(e->dev, LEDGER_COMM_BUFFERS, unit_bytes(e, unit),
                            "a unit's gradients", &p));
        e->unit_grads[unit] = p;
    }
    *grads = e->unit_grads[unit];
    return ZT_OK;
}

static zt_status hook_grads_done(void *ctx, int unit)
{
    struct shard_engine *e = ctx;
    return e->cfg.stage < 2 ? ZT_OK : unit_grads_complete(e, unit);
}

/* ---- create / destroy ------------------------------------------------------ */

zt_status shard_engine_create(const struct shard_engine_config *cfg, const struct param_table *t,
                              struct comm *comm, struct device *dev, struct shard_engine *out)
{
    memset(out, 0, sizeof *out);
    if (cfg->stage < 0 || cfg->stage > 3)
        return zt_error_set(ZT_ERR_CONFIG, "zero_optimization.stage %d: must be 0, 1, 2 or 3",
                            cfg->stage);
    ZT_ASSERT(cfg->world >= 1 && cfg->rank >= 0 && cfg->rank < cfg->world);
    ZT_ASSERT(cfg->reduce_bucket_size >= 1 && cfg->prefetch_depth >= 0);
    out->cfg = *cfg;
    out->table = t;
    out->comm = comm;
    out->dev = dev;
    out->plan = !device_is_real(dev);
    ZT_ASSERT(comm || out->plan);
    out->hooks = (struct gpt2_unit_hooks){
        .ctx = out,
        .pass_begin = hook_pass_begin,
        .pass_end = hook_pass_end,
        .params_acquire = hook_params_acquire,
        .params_release = hook_params_release,
        .grads_acquire = hook_grads_acquire,
        .grads_done = hook_grads_done,
    };
    zt_status st = shard_partition_build(t, cfg->world, &out->part);
    if (st == ZT_OK) {
        out->unit_grads = calloc((size_t)t->n_units, sizeof *out->unit_grads);
        out->reduces = calloc((size_t)t->n_units, sizeof *out->reduces);
        out->bucket = calloc((size_t)t->n_units, sizeof *out->bucket);
        out->gathers = calloc(GPT2_MAX_UNITS + 2, sizeof *out->gathers);
        if (!out->unit_grads || !out->reduces || !out->bucket || !out->gathers)
            st = zt_error_set(ZT_ERR_NOMEM, "cannot allocate the engine's bookkeeping");
    }
    if (st == ZT_OK)
        st = alloc_states(out);
    if (st != ZT_OK) {
        shard_engine_destroy(out);
        return st;
    }
    if (!out->plan)
        init_params(out);
    return ZT_OK;
}

void shard_engine_destroy(struct shard_engine *e)
{
    /* Frees exactly what was counted, real or planned, newest first. */
    while (e->n_allocs > 0) {
        const struct shard_alloc *a = &e->allocs[--e->n_allocs];
        device_free(e->dev, a->cat, a->bytes, a->ptr);
    }
    free(e->unit_grads);
    free(e->reduces);
    free(e->bucket);
    free(e->gathers);
    shard_partition_free(&e->part);
    memset(e, 0, sizeof *e);
}

/* ---- the optimizer step ---------------------------------------------------- */

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

/* AdamW on unit elements [lo, hi); p, g, m, v point at element lo. Tensors
 * are cut at the range's edges so each keeps its own weight-decay rule. */
static void update_unit_range(const struct shard_engine *e, int u, size_t lo, size_t hi, float *p,
                              const float *g, float *m, float *v, const struct adamw_hparams *hp)
{
    const struct param_table *t = e->table;
    const size_t base = t->unit_offset[u];
    for (int k = 0; k < t->n_tensors; k++) {
        const struct param_tensor *pt = &t->tensors[k];
        if (pt->unit != u)
            continue;
        size_t a = pt->offset - base, b = a + pt->numel;
        a = a > lo ? a : lo;
        b = b < hi ? b : hi;
        if (a < b)
            adamw_update(p + (a - lo), g + (a - lo), m + (a - lo), v + (a - lo), b - a,
                         pt->decay ? 1.0f : 0.0f, hp);
    }
}

/* Stage 1: the full grads reduce-scattered into a transient shard buffer. */
static zt_status reduce_full_grads(struct shard_engine *e, float *shards)
{
    for (int u = 0; u < e->part.n_units; u++) {
        const struct shard_unit *su = &e->part.units[u];
        ZT_TRY(comm_reduce_scatter(e->comm, e->grads + su->padded_offset,
                                   shards + su->shard_offset, su->shard, ZT_F32, COMM_OP_SUM));
    }
    return ZT_OK;
}

static zt_status allgather_params(struct shard_engine *e)
{
    for (int u = 0; u < e->part.n_units; u++) {
        const struct shard_unit *su = &e->part.units[u];
        float *full = e->params + su->padded_offset;
        ZT_TRY(comm_allgather(e->comm, full + (size_t)e->cfg.rank * su->shard, full, su->shard,
                              ZT_F32));
    }
    return ZT_OK;
}

/* Averaged gradients in `g` (full padded for stage 0, shards otherwise):
 * their global norm, clipped in place. */
static zt_status norm_and_clip(struct shard_engine *e, float *g, size_t n, double *grad_norm)
{
    double sumsq = sum_of_squares(g, n);
    if (e->cfg.stage > 0)
        ZT_TRY(comm_allreduce(e->comm, &sumsq, 1, ZT_F64, COMM_OP_SUM));
    const double norm = sqrt(sumsq);
    *grad_norm = norm;
    if (!isfinite(norm))
        return zt_error_set(ZT_ERR_NUMERIC,
                            "gradient norm is %f at step %ld: training diverged (lower "
                            "optimizer.params.lr or set gradient_clipping)",
                            norm, e->updates + 1);
    if (e->cfg.clip > 0.0 && norm > e->cfg.clip)
        scale(g, n, (float)(e->cfg.clip / (norm + 1e-6)));
    return ZT_OK;
}

static void update_owned(struct shard_engine *e, const float *g, const struct adamw_hparams *hp)
{
    for (int u = 0; u < e->part.n_units; u++) {
        const struct shard_unit *su = &e->part.units[u];
        if (e->cfg.stage == 0) {
            size_t o = su->padded_offset;
            update_unit_range(e, u, 0, su->numel, e->params + o, g + o, e->m + o, e->v + o, hp);
            continue;
        }
        size_t lo, hi, o = su->shard_offset;
        shard_owned_range(&e->part, e->cfg.rank, u, &lo, &hi);
        float *p = e->cfg.stage < 3 ? e->params + su->padded_offset + lo : e->params + o;
        update_unit_range(e, u, lo, hi, p, g + o, e->m + o, e->v + o, hp);
    }
}

static zt_status step_real(struct shard_engine *e, float *g, size_t n,
                           struct adamw_hparams *hp, double *grad_norm)
{
    const int world = e->cfg.world;
    if (e->cfg.stage == 0)
        ZT_TRY(comm_allreduce(e->comm, e->grads, n, ZT_F32, COMM_OP_SUM));
    else if (e->cfg.stage == 1)
        ZT_TRY(reduce_full_grads(e, g));
    if (world > 1)
        scale(g, n, 1.0f / (float)world);
    ZT_TRY(norm_and_clip(e, g, n, grad_norm));
    hp->step = ++e->updates;
    update_owned(e, g, hp);
    if (e->cfg.stage == 1 || e->cfg.stage == 2)
        ZT_TRY(allgather_params(e));
    memset(e->grads, 0, (e->cfg.stage < 2 ? e->part.padded_total : e->part.shard_total) *
                            sizeof(float));
    return ZT_OK;
}

zt_status shard_engine_step(struct shard_engine *e, struct adamw_hparams *hp, double *grad_norm)
{
    const size_t n = e->cfg.stage == 0 ? e->part.padded_total : e->part.shard_total;
    float *g = e->grads;
    void *transient = NULL;
    *grad_norm = 0.0;
    if (e->cfg.stage == 1) {
        ZT_TRY(device_alloc(e->dev, LEDGER_COMM_BUFFERS, n * sizeof(float), "reduced grad shards",
                            &transient));
        g = transient;
    }
    zt_status st = e->plan ? ZT_OK : step_real(e, g, n, hp, grad_norm);
    if (e->cfg.stage == 1)
        device_free(e->dev, LEDGER_COMM_BUFFERS, n * sizeof(float), transient);
    return st;
}

zt_status shard_engine_full_params(struct shard_engine *e, float *dst)
{
    const struct device_backend_ops *ops = e->dev->ops;
    void *buf = NULL;
    size_t buf_bytes = 0;
    zt_status st = ZT_OK;
    if (e->cfg.stage == 3) {
        for (int u = 0; u < e->part.n_units; u++)
            buf_bytes = unit_bytes(e, u) > buf_bytes ? unit_bytes(e, u) : buf_bytes;
        ZT_TRY(device_alloc(e->dev, LEDGER_WORKSPACE, buf_bytes, "a unit to export", &buf));
    }
    for (int u = 0; u < e->part.n_units && st == ZT_OK; u++) {
        const struct shard_unit *su = &e->part.units[u];
        const float *src = e->params + su->padded_offset;
        if (e->cfg.stage == 3) {
            st = comm_allgather(e->comm, e->params + su->shard_offset, buf, su->shard, ZT_F32);
            src = buf;
        }
        if (st == ZT_OK)
            st = ops->copy_to_host(dst + su->offset, src, su->numel * sizeof(float));
    }
    if (e->cfg.stage == 3)
        device_free(e->dev, LEDGER_WORKSPACE, buf_bytes, buf);
    return st;
}
