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
 *                 allreduce), clips, and runs the optimizer on the range it owns;
 *                 stages 1-2 allgather the updated params in place.
 * Every collective is issued in the same order on every rank: the schedule
 * depends only on the model and the configuration.
 *
 * Precision. Working params and grads are stored, gathered and reduced in
 * cfg.precision (16-bit sums over MPI add in fp32 per element, see comm/);
 * the model computes in fp32 on a per-unit fp32 view made at acquisition
 * (counted in `workspace`, one unit at a time, plus the embedding unit's
 * gradient view, open from the tied head to the embeddings). The update
 * runs in fp32 on the master copy and is cast back, round to nearest even.
 *
 * ZeRO-Offload (cfg.offload_optimizer, shard/offload.c): the master, the
 * optimizer's states and its whole-tensor state are allocated in host
 * memory (state_dev) and the update runs there; everything else above is
 * unchanged, the gradient norm included.
 *
 * Under a plan-only device every allocation is made and counted exactly as
 * in a real step, but nothing is computed or communicated.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../worker/param_quant.h"
#include "../worker/tensor_parallel.h"
#include "../worker/precision.h"
#include "shard_impl.h"

enum gather_state { GATHER_RELEASED, GATHER_GATHERING, GATHER_RESIDENT };

struct shard_gather {
    int unit;
    enum gather_state state;
    void *buf; /* full padded unit in the working precision, gathered_params */
    struct comm_request *req;
    struct comm *via; /* the comm req runs on: the primary group's or hpZ's secondary */
    int refresh;      /* hpZ: copy the rank's secondary share out once gathered */
};

struct shard_reduce {
    int unit;
    void *recv; /* the rank's reduced shard, comm_buffers */
    struct comm_request *req;
};

/* Bytes of a full unit / one rank's shard of it in the working precision;
 * a packed unit's padded image (what a gather holds). */
static size_t unit_bytes(const struct shard_engine *e, int u)
{
    const struct shard_unit *su = &e->part.units[u];
    return su->packed ? su->image_padded : su->padded * e->esz;
}

/* Bytes of a full unit / one rank's shard of it in grad_type. */
static size_t unit_grad_bytes(const struct shard_engine *e, int u)
{
    return e->part.units[u].padded * e->gsz;
}

static size_t shard_grad_bytes(const struct shard_engine *e, int u)
{
    return e->part.units[u].shard * e->gsz;
}

/* hpZ: whether the engine keeps a secondary copy, and the bytes of the
 * rank's secondary share of unit u (1/H of what a gather holds). */
static int has_secondary(const struct shard_engine *e)
{
    return e->cfg.secondary_size > 1;
}

static size_t secondary_bytes(const struct shard_engine *e, int u)
{
    return unit_bytes(e, u) / (size_t)e->cfg.secondary_size;
}

/* hpZ: the parameters changed, so every secondary share is out of date
 * until the unit's next primary gather. */
static void secondary_stale(struct shard_engine *e)
{
    if (e->secondary_fresh)
        memset(e->secondary_fresh, 0, (size_t)e->part.n_units);
}

/* The ranks the gradients are averaged over: every replica's. */
static double dp_ranks(const struct shard_engine *e)
{
    return (double)e->cfg.world * (e->cfg.replicas > 1 ? e->cfg.replicas : 1);
}

/* ---- persistent states ---------------------------------------------------- */

/* A persistent buffer in the compute backend's memory (params, grads,
 * packed, secondary) or, with `state`, in state memory (master, optimizer
 * states: the host's under offload). */
static zt_status alloc_in(struct shard_engine *e, int state, enum ledger_category cat, size_t bytes,
                          const char *what, void **out)
{
    ZT_ASSERT(e->n_allocs < SHARD_MAX_ALLOCS);
    if (state)
        ZT_TRY(shard_state_alloc(e, cat, bytes, what, out));
    else
        ZT_TRY(device_alloc(e->dev, cat, bytes, what, out));
    e->allocs[e->n_allocs++] =
        (struct shard_alloc){state ? e->state_dev : e->dev, cat, bytes, *out};
    return ZT_OK;
}

static zt_status alloc_working(struct shard_engine *e, enum ledger_category cat, size_t bytes,
                               const char *what, void **out)
{
    return alloc_in(e, 0, cat, bytes, what, out);
}

static zt_status alloc_state(struct shard_engine *e, enum ledger_category cat, size_t bytes,
                             const char *what, void **out)
{
    return alloc_in(e, 1, cat, bytes, what, out);
}

/* Under NVMe offload the master and the states are in the file; what
 * memory holds of them is the window they stream through, counted where
 * they would be. */
static zt_status alloc_nvme_window(struct shard_engine *e)
{
    size_t master, states;
    void *m, *st = NULL;
    shard_nvme_window_bytes(e, &master, &states);
    ZT_TRY(alloc_state(e, LEDGER_MASTER_PARAMS, master, "NVMe window: fp32 master", &m));
    if (states > 0)
        ZT_TRY(
            alloc_state(e, LEDGER_OPTIMIZER_STATES, states, "NVMe window: optimizer states", &st));
    shard_nvme_set_window(e, m, st);
    return ZT_OK;
}

static zt_status alloc_states(struct shard_engine *e)
{
    const struct shard_policy *pol = &e->policy;
    const size_t full = e->part.padded_total, shard = e->part.shard_total;
    const size_t tfull = e->part.state_padded_total, tshard = e->part.state_shard_total;
    const size_t held = pol->shard_states ? tshard : tfull, fp32 = held * sizeof(float);
    void *p;
    ZT_TRY(alloc_working(e, LEDGER_PARAMS, (pol->shard_params ? shard : full) * e->esz,
                         "parameters", &e->params));
    if (e->part.packed_total > 0)
        ZT_TRY(alloc_working(e, LEDGER_PARAMS,
                             pol->shard_params ? e->part.packed_shard_total : e->part.packed_total,
                             "the 4-bit base", &e->packed));
    /* A fused-backward optimizer keeps no gradients between units. */
    if (!e->cfg.optimizer->fused_backward)
        ZT_TRY(alloc_working(e, LEDGER_GRADS, (pol->shard_grads ? tshard : tfull) * e->gsz,
                             "gradients", &e->grads));
    if (e->nvme) {
        ZT_TRY(alloc_nvme_window(e));
    } else if (has_master(e)) {
        ZT_TRY(alloc_state(e, LEDGER_MASTER_PARAMS, fp32, "fp32 master parameters", &p));
        e->master = p;
    }
    for (int k = 0; k < e->cfg.optimizer_states && !e->nvme; k++) {
        const size_t bytes = held * zt_dtype_size(e->cfg.optimizer->state_dtype[k]);
        ZT_TRY(
            alloc_state(e, LEDGER_OPTIMIZER_STATES, bytes, e->cfg.optimizer->state_names[k], &p));
        e->states[k] = p;
    }
    if (has_secondary(e)) {
        size_t total = 0;
        for (int u = 0; u < e->part.n_units; u++) {
            e->secondary_off[u] = total;
            total += e->part.units[u].held ? secondary_bytes(e, u) : 0;
        }
        ZT_TRY(alloc_working(e, LEDGER_SECONDARY_PARAMS, total, "hpZ secondary parameter shards",
                             &e->secondary_params));
    }
    if (!e->cfg.optimizer->whole_tensors)
        return ZT_OK;
    /* Whole-tensor optimizers' per-tensor state is small and every rank
     * keeps all of it (see shard/update.c). */
    e->tensor_state_len = shard_tensor_state_layout(e, e->tensor_state_off);
    ZT_TRY(alloc_state(e, LEDGER_OPTIMIZER_STATES, e->tensor_state_len * sizeof(float),
                       e->cfg.optimizer->tensor_state_name, &p));
    e->tensor_state = p;
    return ZT_OK;
}

/* Copies fp32 values into a working-precision device buffer through a
 * host staging buffer (device memory is not host memory on a GPU). */
static zt_status store_working(struct shard_engine *e, void *dst, const float *src, size_t n,
                               void *staging)
{
    precision_from_f32(e->cfg.precision, src, staging, n);
    return e->dev->ops->copy_from_host(e->dev, dst, staging, n * e->esz);
}

/* The host staging of shard_engine_init_units: a chunk of fp32 values and
 * its working-precision copy, and for packed units the region and block
 * scales of the largest 4-bit tensor being encoded. */
struct init_staging {
    float *host;
    void *working;
    size_t chunk; /* elements of host and working: a multiple of QUANT4_BLOCK */
    void *region;
    float *scales;
    size_t region_bytes, n_scales;
};

/* Initial values as param_quant_encode_tensor reads them. */
struct seed_source {
    const struct param_table *t;
    uint64_t seed;
};

static zt_status draw_values(void *ctx, size_t first, size_t n, float *dst)
{
    const struct seed_source *s = ctx;
    param_table_tp_init(s->t, s->seed, first, first + n, dst);
    return ZT_OK;
}

/* Packed unit u, a tensor at a time: each tensor with bytes of the image
 * the rank keeps is drawn a chunk at a time and encoded
 * (param_quant_encode_tensor, the bytes param_quant_encode gives); the
 * others are not drawn. */
static zt_status init_packed(struct shard_engine *e, int u, const struct init_staging *b)
{
    const struct seed_source seed = {e->table, e->cfg.seed};
    const struct param_quant_source src = {draw_values, (void *)&seed};
    size_t keep_lo, keep_hi, at = 0;
    shard_engine_packed_range(e, u, &keep_lo, &keep_hi);
    for (int k = 0; k < e->table->n_tensors; k++) {
        if (e->table->tensors[k].unit != u)
            continue;
        const size_t bytes = param_quant_tensor_bytes(e->table, k, e->cfg.precision);
        if (at < keep_hi && at + bytes > keep_lo) {
            ZT_TRY(param_quant_encode_tensor(e->table, k, e->cfg.precision, &src,
                                             keep_lo > at ? keep_lo - at : 0, keep_hi - at, b->host,
                                             b->chunk, b->scales, b->region));
            ZT_TRY(shard_engine_set_packed_bytes(e, u, at, bytes, b->region));
        }
        at += bytes;
    }
    return ZT_OK;
}

/* Initial values, drawn on the host a chunk (SHARD_INIT_CHUNK elements at
 * most) at a time: of each unit only what the rank stores, the working
 * copy (the whole unit, or its shard under stage 3) and, under 16-bit
 * precision, the fp32 master of its range (the whole unit under stage 0).
 * Stage 3 thus draws 1/N of the model per rank, and the staging is two
 * chunks whatever the unit's size. Element i's value depends on i alone
 * (param_table_init), so the chunking, the stage and the world size cannot
 * change it. */
static zt_status init_unit(struct shard_engine *e, int u, const struct init_staging *b)
{
    const struct shard_unit *su = &e->part.units[u];
    const struct device *sd = e->state_dev;
    if (su->packed)
        return init_packed(e, u, b);
    float *host = b->host;
    size_t lo, hi;
    shard_owned_range(&e->part, e->cfg.rank, u, &lo, &hi);
    /* stage 3 shards params and master alike; the other stages keep the
     * whole working copy, so [from, to) covers the master's range too */
    const size_t from = e->policy.shard_params ? lo : 0;
    const size_t to = e->policy.shard_params ? hi : su->numel;
    const int master = has_master(e) && su->trainable;
    for (size_t c0 = from; c0 < to; c0 += b->chunk) {
        const size_t c1 = to - c0 < b->chunk ? to : c0 + b->chunk;
        param_table_tp_init(e->table, e->cfg.seed, su->offset + c0, su->offset + c1, host);
        const size_t w =
            e->policy.shard_params ? su->shard_offset + (c0 - lo) : su->padded_offset + c0;
        ZT_TRY(store_working(e, at(e, e->params, w), host, c1 - c0, b->working));
        if (!master)
            continue;
        if (!e->policy.shard_states) {
            ZT_TRY(e->nvme ? shard_nvme_write(e, 0, su->state_padded_offset + c0, c1 - c0, host)
                           : sd->ops->copy_from_host(sd, e->master + su->state_padded_offset + c0,
                                                     host, (c1 - c0) * sizeof(float)));
            continue;
        }
        const size_t m0 = c0 > lo ? c0 : lo, m1 = c1 < hi ? c1 : hi;
        if (m1 <= m0)
            continue;
        ZT_TRY(e->nvme ? shard_nvme_write(e, 0, su->state_shard_offset + (m0 - lo), m1 - m0,
                                          host + (m0 - c0))
                       : sd->ops->copy_from_host(sd, e->master + su->state_shard_offset + (m0 - lo),
                                                 host + (m0 - c0), (m1 - m0) * sizeof(float)));
    }
    return ZT_OK;
}

/* The staging units [u0, u1) need: a chunk no longer than the longest unit
 * (SHARD_INIT_CHUNK at most, a whole number of 4-bit blocks), and for
 * packed units the largest 4-bit tensor's region and scales. */
static void init_sizes(const struct shard_engine *e, int u0, int u1, struct init_staging *b)
{
    size_t longest = 0;
    for (int u = u0; u < u1; u++)
        longest = e->part.units[u].numel > longest ? e->part.units[u].numel : longest;
    for (int k = 0; k < e->table->n_tensors; k++) {
        const struct param_tensor *p = &e->table->tensors[k];
        if (p->unit < u0 || p->unit >= u1 || !e->part.units[p->unit].packed)
            continue;
        const size_t r = param_quant_tensor_bytes(e->table, k, e->cfg.precision);
        b->region_bytes = r > b->region_bytes ? r : b->region_bytes;
        b->n_scales = quant4_blocks(p->numel) > b->n_scales ? quant4_blocks(p->numel) : b->n_scales;
    }
    longest = longest < SHARD_INIT_CHUNK ? longest : SHARD_INIT_CHUNK;
    b->chunk = (longest + QUANT4_BLOCK - 1) / QUANT4_BLOCK * QUANT4_BLOCK;
}

/* Bytes of the staging, counted under the ledger's `load`. */
static size_t init_staging_bytes(const struct shard_engine *e, const struct init_staging *b)
{
    return b->chunk * (sizeof(float) + e->esz) + b->region_bytes + b->n_scales * sizeof(float);
}

zt_status shard_engine_init_units(struct shard_engine *e, int u0, int u1)
{
    ZT_ASSERT(u0 >= 0 && u0 <= u1 && u1 <= e->part.n_units);
    struct init_staging b = {0};
    init_sizes(e, u0, u1, &b);
    const size_t bytes = init_staging_bytes(e, &b);
    struct ledger *ledger = e->dev->ledger;
    ledger_add(ledger, LEDGER_LOAD, bytes);
    zt_status st = ZT_OK;
    if (!e->plan) {
        b.host = malloc((b.chunk ? b.chunk : 1) * sizeof(float));
        b.working = malloc((b.chunk ? b.chunk : 1) * e->esz);
        b.region = b.region_bytes ? malloc(b.region_bytes) : NULL;
        b.scales = b.n_scales ? malloc(b.n_scales * sizeof(float)) : NULL;
        if (!b.host || !b.working || (b.region_bytes && !b.region) || (b.n_scales && !b.scales))
            st = zt_error_set(ZT_ERR_NOMEM, "cannot allocate the init staging (%zu bytes)", bytes);
        for (int u = u0; u < u1 && st == ZT_OK; u++)
            st = init_unit(e, u, &b);
        free(b.host);
        free(b.working);
        free(b.region);
        free(b.scales);
    }
    ledger_sub(ledger, LEDGER_LOAD, bytes);
    return st;
}

/* ---- packed units (a 4-bit base, worker/param_quant.h) --------------------- */

void shard_engine_packed_range_of(const struct shard_engine *e, int rank, int u, size_t *lo,
                                  size_t *hi)
{
    const struct shard_unit *su = &e->part.units[u];
    ZT_ASSERT(su->packed && rank >= 0 && rank < e->cfg.world);
    *lo = e->policy.shard_params ? (size_t)rank * su->image_shard : 0;
    *hi = e->policy.shard_params ? *lo + su->image_shard : su->image_padded;
}

void shard_engine_packed_range(const struct shard_engine *e, int u, size_t *lo, size_t *hi)
{
    shard_engine_packed_range_of(e, e->cfg.rank, u, lo, hi);
}

zt_status shard_engine_set_packed_bytes(struct shard_engine *e, int u, size_t first, size_t n,
                                        const void *bytes)
{
    const struct shard_unit *su = &e->part.units[u];
    size_t lo, hi;
    shard_engine_packed_range(e, u, &lo, &hi);
    ZT_ASSERT(first <= su->image_padded && n <= su->image_padded - first);
    secondary_stale(e);
    const size_t a = first > lo ? first : lo, b = first + n < hi ? first + n : hi;
    if (b <= a)
        return ZT_OK;
    char *dst =
        (char *)e->packed + (e->policy.shard_params ? su->image_shard_offset : su->image_offset);
    return e->dev->ops->copy_from_host(e->dev, dst + (a - lo), (const char *)bytes + (a - first),
                                       b - a);
}

/* Decodes packed unit u's image (device memory) into its view in the
 * compute type: straight from device memory that is host memory, else
 * through host staging. */
static zt_status decode_packed(struct shard_engine *e, int u, const void *image, void *view)
{
    const struct shard_unit *su = &e->part.units[u];
    const enum zt_dtype to = e->table->compute;
    if (e->be->host_memory) {
        param_quant_decode(e->table, u, e->cfg.precision, image, to, view);
        return ZT_OK;
    }
    const size_t bytes = su->numel * zt_dtype_size(to);
    unsigned char *host = malloc(su->image);
    void *values = malloc(bytes);
    zt_status st = host && values
                       ? ZT_OK
                       : zt_error_set(ZT_ERR_NOMEM, "cannot allocate the 4-bit decode staging");
    if (st == ZT_OK)
        st = e->dev->ops->copy_to_host(e->dev, host, image, su->image);
    if (st == ZT_OK) {
        param_quant_decode(e->table, u, e->cfg.precision, host, to, values);
        st = e->dev->ops->copy_from_host(e->dev, view, values, bytes);
    }
    free(host);
    free(values);
    return st;
}

/* ---- stage 3: gathering units ------------------------------------------- */

static zt_status start_gather(struct shard_engine *e, int pos)
{
    struct shard_gather *g = &e->gathers[pos];
    const int u = e->schedule[pos];
    const struct shard_unit *su = &e->part.units[u];
    void *buf;
    ZT_ASSERT(g->state == GATHER_RELEASED);
    ZT_TRY(device_alloc_uninit(e->dev, LEDGER_GATHERED_PARAMS, unit_bytes(e, u), "a gathered unit",
                               &buf));
    g->unit = u;
    g->buf = buf;
    g->req = NULL;
    g->state = GATHER_GATHERING;
    g->via = e->comm;
    g->refresh = 0;
    if (has_secondary(e) && e->secondary_fresh[u]) {
        /* hpZ: the rest of the step gathers within the secondary group */
        g->via = e->secondary;
        const size_t share = secondary_bytes(e, u);
        if (e->plan)
            return ZT_OK;
        return comm_iallgather(e->secondary, (char *)e->secondary_params + e->secondary_off[u],
                               g->buf, su->packed ? share : share / e->esz,
                               su->packed ? ZT_U8 : e->cfg.precision, &g->req);
    }
    ZT_ASSERT(!has_secondary(e) || e->pass_phase == LEDGER_PHASE_FORWARD ||
              e->pass_phase == LEDGER_PHASE_EVALUATION || e->plan);
    g->refresh = has_secondary(e);
    if (e->plan)
        return ZT_OK;
    if (su->packed)
        return comm_iallgather(e->comm, (char *)e->packed + su->image_shard_offset, g->buf,
                               su->image_shard, ZT_U8, &g->req);
    return comm_iallgather(e->comm, at(e, e->params, su->shard_offset), g->buf, su->shard,
                           e->cfg.precision, &g->req);
}

static zt_status finish_gather(struct shard_engine *e, int pos)
{
    struct shard_gather *g = &e->gathers[pos];
    ZT_ASSERT(g->state == GATHER_GATHERING);
    if (g->req) {
        struct comm_request *req = g->req;
        g->req = NULL;
        ZT_TRY(comm_wait(g->via, req));
    }
    g->state = GATHER_RESIDENT;
    if (!g->refresh)
        return ZT_OK;
    /* hpZ: this rank's share of the secondary copy, from the gathered unit */
    const size_t share = secondary_bytes(e, g->unit);
    const size_t h = (size_t)(e->cfg.rank % e->cfg.secondary_size);
    e->secondary_fresh[g->unit] = 1;
    if (e->plan)
        return ZT_OK;
    return e->dev->ops->copy(e->dev, (char *)e->secondary_params + e->secondary_off[g->unit],
                             (const char *)g->buf + h * share, share);
}

static void release_gather(struct shard_engine *e, struct shard_gather *g)
{
    ZT_ASSERT(g->state == GATHER_RESIDENT);
    device_free(e->dev, LEDGER_GATHERED_PARAMS, unit_bytes(e, g->unit), g->buf);
    g->buf = NULL;
    g->state = GATHER_RELEASED;
}

static zt_status gathered_acquire(struct shard_engine *e, int unit, const void **params)
{
    /* The model acquires units exactly in its family's unit_order. */
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

/* The fp32 staging of 16-bit gradients the update needs for a range of n
 * elements: only whole-tensor optimizers read them through it; the
 * element-wise ones convert in their fused pass (shard/update.c). */
static size_t staging_floats(const struct shard_engine *e, size_t n)
{
    return grads_16bit(e) && e->cfg.optimizer->whole_tensors ? n : 0;
}

/* Each unit's gradient lives in its own transient buffer, reduced once
 * complete: stages 2-3, and every stage of a fused-backward optimizer. */
static int transient_grads(const struct shard_engine *e)
{
    return e->policy.shard_grads || e->cfg.optimizer->fused_backward;
}

/* ---- a tied embedding's two copies under a pipeline ----------------------- */

/* Where the tied embedding's reduced gradient lies in g (the reduced
 * gradients the norm and update read), and how many elements. */
static void tied_range(const struct shard_engine *e, size_t *off, size_t *n)
{
    const struct shard_unit *su = &e->part.units[0];
    *off = e->policy.shard_states ? su->state_shard_offset : su->state_padded_offset;
    *n = e->policy.shard_states ? su->shard : su->padded;
}

/* The first and last stage exchange their reduced gradients of the tied
 * embedding, g[n], and each adds the other's (Megatron's embedding
 * group), so both take the same update. */
static zt_status exchange_tied(struct shard_engine *e, void *g, size_t n)
{
    void *peer = NULL;
    struct comm_request *req = NULL;
    ZT_TRY(
        device_alloc(e->dev, LEDGER_COMM_BUFFERS, n * e->gsz, "tied embedding gradients", &peer));
    zt_status st = comm_isend(e->pipe, g, n, e->grad_type, e->tie_peer, &req);
    if (st == ZT_OK)
        st = comm_recv(e->pipe, peer, n, e->grad_type, e->tie_peer);
    if (req) {
        zt_status w = comm_wait(e->pipe, req);
        st = st == ZT_OK ? w : st;
    }
    if (st == ZT_OK)
        st = e->ops->add_into(e->ops, e->grad_type, g, peer, n);
    device_free(e->dev, LEDGER_COMM_BUFFERS, n * e->gsz, peer);
    return st;
}

/* What exchange_tied holds, counted for a plan. */
static zt_status plan_tied(struct shard_engine *e)
{
    size_t off, n;
    void *peer = NULL;
    tied_range(e, &off, &n);
    ZT_TRY(
        device_alloc(e->dev, LEDGER_COMM_BUFFERS, n * e->gsz, "tied embedding gradients", &peer));
    device_free(e->dev, LEDGER_COMM_BUFFERS, n * e->gsz, peer);
    return ZT_OK;
}

/* ---- fused-backward optimizers: a unit reduced and applied at once -------- */

void shard_engine_fused_arm(struct shard_engine *e, const struct optimizer_hparams *hp,
                            double loss_scale, double clip_coef)
{
    ZT_ASSERT(e->cfg.optimizer->fused_backward);
    e->fused.update = hp != NULL;
    if (hp) {
        e->fused.hp = *hp;
        e->fused.hp.step = ++e->updates;
    }
    e->fused.unscale = 1.0 / (dp_ranks(e) * loss_scale);
    e->fused.gscale = (float)(e->fused.unscale * clip_coef);
    e->fused.sumsq = 0.0;
}

/* The unit's complete gradient reduced over the data-parallel ranks into
 * *reduced: a shard of its own where the states are sharded, else the
 * unit's buffer itself. */
static zt_status fused_reduce(struct shard_engine *e, int unit, void **reduced)
{
    const struct shard_unit *su = &e->part.units[unit];
    void *full = e->unit_grads[unit];
    *reduced = full;
    if (e->policy.shard_states) {
        *reduced = NULL;
        ZT_TRY(device_alloc(e->dev, LEDGER_COMM_BUFFERS, shard_grad_bytes(e, unit),
                            "a reduced shard", reduced));
    }
    if (e->plan)
        return ZT_OK;
    ZT_TRY(e->policy.shard_states
               ? comm_reduce_scatter(e->comm, full, *reduced, su->shard, e->grad_type, COMM_OP_SUM)
               : comm_allreduce(e->comm, full, su->padded, e->grad_type, COMM_OP_SUM));
    if (e->replica) /* HSDP: across the shard groups */
        ZT_TRY(comm_allreduce(e->replica, *reduced, su->shard, e->grad_type, COMM_OP_SUM));
    return ZT_OK;
}

/* The reduced gradient measured and, when armed to, applied to the rank's
 * range, and the unit regathered where the stage keeps parameters whole. */
static zt_status fused_apply(struct shard_engine *e, int unit, void *reduced)
{
    const struct shard_unit *su = &e->part.units[unit];
    const struct owned_range r = owned_range_of(e, unit);
    const size_t tmp_bytes = staging_floats(e, r.hi - r.lo) * sizeof(float);
    void *tmp = NULL;
    zt_status st = ZT_OK;
    if (tmp_bytes)
        st = device_alloc(e->dev, LEDGER_WORKSPACE, tmp_bytes, "fp32 gradients", &tmp);
    if (st == ZT_OK && !e->plan)
        st = shard_update_fused_unit(e, unit, reduced, &r, tmp);
    if (st == ZT_OK && !e->plan && e->fused.update && shard_policy_regathers_params(&e->policy)) {
        void *unit_params = at(e, e->params, su->padded_offset);
        st = comm_allgather(e->comm, at(e, unit_params, (size_t)e->cfg.rank * su->shard),
                            unit_params, su->shard, e->cfg.precision);
    }
    if (tmp_bytes && (tmp || e->plan))
        device_free(e->dev, LEDGER_WORKSPACE, tmp_bytes, tmp);
    return st;
}

/* Drops the unit's gradient buffers. */
static void fused_release(struct shard_engine *e, int unit, void *reduced)
{
    if (e->policy.shard_states && (reduced || e->plan))
        device_free(e->dev, LEDGER_COMM_BUFFERS, shard_grad_bytes(e, unit), reduced);
    device_free(e->dev, LEDGER_COMM_BUFFERS, unit_grad_bytes(e, unit), e->unit_grads[unit]);
    e->unit_grads[unit] = NULL;
}

/* The unit's gradient is complete: reduce it, measure and apply it, and
 * drop the buffers. A tied embedding under a pipeline is whole only once
 * the other stage's backward is done too: its reduced gradient is held
 * until the step's end (fused_tied_done). */
static zt_status fused_unit_done(struct shard_engine *e, int unit)
{
    void *reduced = NULL;
    zt_status st = fused_reduce(e, unit, &reduced);
    if (st == ZT_OK && unit == 0 && e->tie_peer >= 0) {
        e->fused.tied = reduced;
        e->fused.tied_held = 1;
        return ZT_OK;
    }
    if (st == ZT_OK)
        st = fused_apply(e, unit, reduced);
    fused_release(e, unit, reduced);
    return st;
}

/* The held tied embedding: the first and last stage add each other's
 * reduced gradient and both apply the sum; the norm counts it once, on
 * the first stage. */
static zt_status fused_tied_done(struct shard_engine *e)
{
    if (!e->fused.tied_held)
        return ZT_OK;
    void *reduced = e->fused.tied;
    size_t off, n;
    tied_range(e, &off, &n);
    e->fused.tied_held = 0;
    e->fused.tied = NULL;
    zt_status st = e->plan ? plan_tied(e) : exchange_tied(e, reduced, n);
    const double sumsq = e->fused.sumsq;
    if (st == ZT_OK)
        st = fused_apply(e, 0, reduced);
    if (e->tie_duplicate)
        e->fused.sumsq = sumsq;
    fused_release(e, 0, reduced);
    return st;
}

/* The end of a fused step: the norm of what the backward reduced. */
static zt_status step_fused(struct shard_engine *e, int skip_on_overflow,
                            struct shard_step_result *out)
{
    ZT_TRY(fused_tied_done(e));
    if (e->fused.update) /* hpZ: the next forward gathers the new values */
        secondary_stale(e);
    double sumsq = e->fused.sumsq;
    struct comm *groups[3] = {e->policy.shard_states ? e->comm : NULL, e->pipe, e->tensor};
    for (int i = 0; i < 3; i++)
        if (groups[i] && !e->plan)
            ZT_TRY(comm_allreduce(comm_host(groups[i]), &sumsq, 1, ZT_F64, COMM_OP_SUM));
    e->fused.sumsq = 0.0;
    out->grad_norm = sqrt(sumsq);
    if (isfinite(out->grad_norm) || e->plan)
        return ZT_OK;
    if (skip_on_overflow) {
        out->skipped = 1;
        return ZT_OK;
    }
    return zt_error_set(ZT_ERR_NUMERIC,
                        "gradient norm is %f at step %ld: training diverged, and %s applied the "
                        "step's update inside the backward before its norm was known (lower "
                        "optimizer.params.lr, or set gradient_clipping: its first, measuring "
                        "pass finds a non-finite norm before any update, and run.on_nonfinite "
                        "then applies)",
                        out->grad_norm, e->updates, e->cfg.optimizer->name);
}

/* ---- stages 2-3: reducing unit gradients ------------------------------------ */

static zt_status finish_oldest_reduce(struct shard_engine *e)
{
    ZT_ASSERT(e->n_reduces > 0);
    struct shard_reduce r = e->reduces[0];
    memmove(e->reduces, e->reduces + 1, (size_t)(e->n_reduces - 1) * sizeof *e->reduces);
    e->n_reduces--;
    const struct shard_unit *su = &e->part.units[r.unit];
    double t0 = prof_begin(e);
    zt_status st = r.req ? comm_wait(e->comm, r.req) : ZT_OK;
    prof_end(e, SHARD_PROF_REDUCE, t0);
    t0 = prof_begin(e);
    if (st == ZT_OK && !e->plan)
        st = e->ops->add_into(e->ops, e->grad_type, gat(e, e->grads, su->state_shard_offset),
                              r.recv, su->shard);
    prof_end(e, SHARD_PROF_GRAD_ADD, t0);
    t0 = prof_begin(e);
    device_free(e->dev, LEDGER_COMM_BUFFERS, shard_grad_bytes(e, r.unit), r.recv);
    device_free(e->dev, LEDGER_COMM_BUFFERS, unit_grad_bytes(e, r.unit), e->unit_grads[r.unit]);
    e->unit_grads[r.unit] = NULL;
    prof_end(e, SHARD_PROF_REDUCE, t0);
    return st;
}

static zt_status start_reduce(struct shard_engine *e, int unit)
{
    const struct shard_unit *su = &e->part.units[unit];
    struct shard_reduce *r = &e->reduces[e->n_reduces];
    void *recv;
    ZT_ASSERT(e->n_reduces < e->table->n_units);
    ZT_TRY(device_alloc_uninit(e->dev, LEDGER_COMM_BUFFERS, shard_grad_bytes(e, unit),
                               "a reduced shard", &recv));
    *r = (struct shard_reduce){unit, recv, NULL};
    e->n_reduces++;
    if (!e->plan)
        ZT_TRY(comm_ireduce_scatter(e->comm, e->unit_grads[unit], r->recv, su->shard, e->grad_type,
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
        PROF_TRY(e, SHARD_PROF_REDUCE, start_reduce(e, e->bucket[i]));
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

/* ---- stages 0-1: reducing the final backward's buckets early --------------- */

/* Whether this backward reduces stage 0-1 gradients as they complete. */
static int reduces_early(const struct shard_engine *e)
{
    return e->final_backward && e->cfg.overlap_comm && !e->policy.shard_grads &&
           !e->cfg.optimizer->fused_backward;
}

static int by_unit(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* Stage 0: one allreduce of full grads [first, first + n) (elements). */
static zt_status issue_allreduce(struct shard_engine *e, size_t first, size_t n)
{
    struct comm_request **req = &e->early[e->n_early];
    ZT_ASSERT(e->n_early < e->table->n_units);
    e->n_early++;
    *req = NULL;
    return e->plan ? ZT_OK
                   : comm_iallreduce(e->comm, gat(e, e->grads, first), n, e->grad_type, COMM_OP_SUM,
                                     req);
}

/* Stage 1: unit u's full grads reduce-scattered into its reduced shard. */
static zt_status issue_reduce_scatter(struct shard_engine *e, int u)
{
    const struct shard_unit *su = &e->part.units[u];
    struct comm_request **req = &e->early[e->n_early];
    ZT_ASSERT(e->n_early < e->table->n_units);
    if (!e->early_shards_held) /* (a plan's allocations have no address) */
        ZT_TRY(device_alloc_uninit(e->dev, LEDGER_COMM_BUFFERS, e->part.state_shard_total * e->gsz,
                                   "reduced grad shards", &e->early_shards));
    e->early_shards_held = 1;
    e->n_early++;
    *req = NULL;
    return e->plan ? ZT_OK
                   : comm_ireduce_scatter(e->comm, gat(e, e->grads, su->state_padded_offset),
                                          gat(e, e->early_shards, su->state_shard_offset),
                                          su->shard, e->grad_type, COMM_OP_SUM, req);
}

/* Issues the open bucket's reductions: stage 0 one allreduce per run of
 * units adjacent in the grads, stage 1 one reduce-scatter per unit. */
static zt_status issue_early_bucket(struct shard_engine *e)
{
    qsort(e->bucket, (size_t)e->n_bucket, sizeof *e->bucket, by_unit);
    for (int i = 0; i < e->n_bucket;) {
        const struct shard_unit *first = &e->part.units[e->bucket[i]];
        size_t end = first->state_padded_offset + first->padded;
        int j = i + 1;
        if (!e->policy.shard_states)
            while (j < e->n_bucket && e->part.units[e->bucket[j]].state_padded_offset == end)
                end += e->part.units[e->bucket[j++]].padded;
        for (int k = i; k < j; k++)
            e->unit_reduced[e->bucket[k]] = 1;
        ZT_TRY(e->policy.shard_states ? issue_reduce_scatter(e, e->bucket[i])
                                      : issue_allreduce(e, first->state_padded_offset,
                                                        end - first->state_padded_offset));
        i = j;
    }
    e->n_bucket = 0;
    e->bucket_elems = 0;
    return ZT_OK;
}

/* A unit's gradient is final: it joins the open bucket, issued once it
 * holds reduce_bucket_size elements. */
static zt_status early_unit_complete(struct shard_engine *e, int unit)
{
    ZT_ASSERT(e->n_bucket < e->table->n_units);
    e->bucket[e->n_bucket++] = unit;
    e->bucket_elems += e->part.units[unit].padded;
    return e->bucket_elems >= e->cfg.reduce_bucket_size ? issue_early_bucket(e) : ZT_OK;
}

void shard_engine_final_backward(struct shard_engine *e)
{
    e->final_backward = 1;
}

/* The step's stage 0-1 reduction after an early one: every issued
 * reduction completed in issue order, then what the backward did not
 * reach (a trainable unit whose gradient never completed) reduced here. */
static zt_status finish_early(struct shard_engine *e, void *g)
{
    for (int i = 0; i < e->n_early; i++) {
        struct comm_request *req = e->early[i];
        e->early[i] = NULL;
        if (req)
            ZT_TRY(comm_wait(e->comm, req));
    }
    e->n_early = 0;
    for (int u = 0; u < e->part.n_units; u++) {
        const struct shard_unit *su = &e->part.units[u];
        if (!su->trainable || e->unit_reduced[u])
            continue;
        ZT_TRY(e->policy.shard_states
                   ? comm_reduce_scatter(e->comm, gat(e, e->grads, su->state_padded_offset),
                                         gat(e, g, su->state_shard_offset), su->shard, e->grad_type,
                                         COMM_OP_SUM)
                   : comm_allreduce(e->comm, gat(e, e->grads, su->state_padded_offset), su->padded,
                                    e->grad_type, COMM_OP_SUM));
    }
    return ZT_OK;
}

/* ---- the hooks ------------------------------------------------------------ */

/* Between units: the collectives in flight (stage 3's gathers, a bucket's
 * reductions) advance without blocking. There is no progress thread, and
 * MPI moves a ring or a native collective only while it is entered. */
static zt_status drive_comm(struct shard_engine *e)
{
    const int in_flight = e->n_early > 0 || e->n_reduces > 0 || e->issued > e->cursor;
    if (e->plan || !in_flight)
        return ZT_OK;
    zt_status st;
    PROF_CALL(e, SHARD_PROF_PROGRESS, st, comm_progress(e->comm));
    if (st == ZT_OK && e->secondary)
        PROF_CALL(e, SHARD_PROF_PROGRESS, st, comm_progress(e->secondary));
    return st;
}

/* Tells the ledger where the step is, so that a peak names its phase. */
static void enter_phase(struct shard_engine *e, enum ledger_phase_kind k, int unit)
{
    ledger_enter(e->dev->ledger, k, unit);
}

static zt_status hook_pass_begin(void *ctx, enum model_pass pass)
{
    struct shard_engine *e = ctx;
    e->pass_phase = pass == MODEL_PASS_FORWARD ? LEDGER_PHASE_FORWARD : LEDGER_PHASE_BACKWARD;
    enter_phase(e, e->pass_phase, -1);
    if (e->policy.shard_params) {
        e->n_schedule = param_table_unit_order(e->table, &e->pipeline_stage, pass, e->schedule,
                                               MODEL_MAX_UNITS + 4);
        ZT_ASSERT(e->n_schedule <= MODEL_MAX_UNITS + 4);
        e->cursor = 0;
        e->issued = 0;
    }
    return ZT_OK;
}

static zt_status hook_pass_end(void *ctx, enum model_pass pass)
{
    struct shard_engine *e = ctx;
    if (pass == MODEL_PASS_BACKWARD && e->policy.shard_grads && !e->cfg.optimizer->fused_backward) {
        enter_phase(e, LEDGER_PHASE_REDUCTION, -1);
        ZT_TRY(close_bucket(e));
        while (e->n_reduces > 0)
            ZT_TRY(finish_oldest_reduce(e));
    }
    if (pass == MODEL_PASS_BACKWARD && reduces_early(e)) {
        enter_phase(e, LEDGER_PHASE_REDUCTION, -1);
        PROF_TRY(e, SHARD_PROF_REDUCE, issue_early_bucket(e));
        e->final_backward = 0;
        e->early_issued = 1;
    }
    if (e->policy.shard_params) {
        ZT_ASSERT(e->cursor == e->n_schedule && e->issued == e->n_schedule);
        for (int pos = 0; pos < e->n_schedule; pos++)
            ZT_ASSERT(e->gathers[pos].state == GATHER_RELEASED);
    }
    return ZT_OK;
}

/* A unit's view in type t: the fp32 view a 16-bit unit is computed on
 * when the model computes in fp32, or a packed unit's decoded weights. */
static zt_status open_view(struct shard_engine *e, int unit, enum zt_dtype t, const char *what,
                           void **view)
{
    return device_alloc(e->dev, LEDGER_WORKSPACE, e->part.units[unit].padded * zt_dtype_size(t),
                        what, view);
}

static void close_view(struct shard_engine *e, int unit, enum zt_dtype t, void **view)
{
    device_free(e->dev, LEDGER_WORKSPACE, e->part.units[unit].padded * zt_dtype_size(t), *view);
    *view = NULL;
}

/* The view of a packed (dequantised, in the compute type) or 16-bit
 * (fp32) unit's params at src. */
static zt_status param_view_open(struct shard_engine *e, int unit, const void *src)
{
    if (e->part.units[unit].packed) {
        ZT_TRY(open_view(e, unit, e->table->compute, "a unit's dequantised parameters",
                         &e->param_view[unit]));
        return e->plan ? ZT_OK : decode_packed(e, unit, src, e->param_view[unit]);
    }
    ZT_TRY(open_view(e, unit, ZT_F32, "a unit's fp32 parameters", &e->param_view[unit]));
    return e->plan ? ZT_OK
                   : e->ops->to_f32(e->ops, e->cfg.precision, src, e->param_view[unit],
                                    e->part.units[unit].padded);
}

/* Whether the model computes in the working precision itself: its 16-bit
 * units are then lent as they are stored, without an fp32 view. */
static int lends_working(const struct shard_engine *e)
{
    return e->table->compute != ZT_F32;
}

/* The type of unit u's parameter view, while one is open. */
static enum zt_dtype param_view_type(const struct shard_engine *e, int u)
{
    return e->part.units[u].packed ? e->table->compute : ZT_F32;
}

static zt_status hook_params_acquire(void *ctx, int unit, const void **params)
{
    struct shard_engine *e = ctx;
    const struct shard_unit *su = &e->part.units[unit];
    const void *src;
    enter_phase(e, e->pass_phase, unit);
    ZT_TRY(drive_comm(e));
    if (e->policy.shard_params)
        PROF_TRY(e, SHARD_PROF_GATHER, gathered_acquire(e, unit, &src));
    else
        src = su->packed ? (const void *)((char *)e->packed + su->image_offset)
                         : at(e, e->params, su->padded_offset);
    /* 16-bit compute lends the store itself, never another type */
    ZT_ASSERT(!lends_working(e) || e->table->compute == e->cfg.precision);
    if (!su->packed && (!is_16bit(e) || lends_working(e))) {
        *params = src;
        return ZT_OK;
    }
    PROF_TRY(e, SHARD_PROF_CAST, param_view_open(e, unit, src));
    *params = e->param_view[unit];
    return ZT_OK;
}

static zt_status hook_params_release(void *ctx, int unit)
{
    struct shard_engine *e = ctx;
    double t0 = prof_begin(e);
    if ((is_16bit(e) && !lends_working(e)) || e->part.units[unit].packed)
        close_view(e, unit, param_view_type(e, unit), &e->param_view[unit]);
    prof_end(e, SHARD_PROF_CAST, t0);
    zt_status st = ZT_OK;
    if (e->policy.shard_params)
        PROF_CALL(e, SHARD_PROF_GATHER, st, gathered_release(e, unit));
    return st;
}

/* Stages 2-3: the unit's transient full gradient, reduced once complete. */
static zt_status open_unit_grads(struct shard_engine *e, int unit)
{
    if (!e->unit_grads[unit])
        ZT_TRY(device_alloc(e->dev, LEDGER_COMM_BUFFERS, unit_grad_bytes(e, unit),
                            "a unit's gradients", &e->unit_grads[unit]));
    return ZT_OK;
}

/* The fp32 view a 16-bit unit's backward accumulates into: stages 0-1
 * continue from the stored grads, stages 2-3 start each micro step from
 * zero (the view is zeroed). */
static zt_status grad_view_open(struct shard_engine *e, int unit)
{
    const struct shard_unit *su = &e->part.units[unit];
    ZT_TRY(open_view(e, unit, ZT_F32, "a unit's fp32 gradients", &e->grad_view[unit]));
    if (transient_grads(e) || e->plan)
        return ZT_OK;
    return e->ops->to_f32(e->ops, e->grad_type, gat(e, e->grads, su->state_padded_offset),
                          e->grad_view[unit], su->padded);
}

/* A 16-bit unit's fp32 gradients cast back into their store (the stored
 * grads, or the unit's transient buffer), and the view dropped. */
static zt_status grad_view_close(struct shard_engine *e, int unit)
{
    const struct shard_unit *su = &e->part.units[unit];
    void *dst = gat(e, e->grads, su->state_padded_offset);
    if (transient_grads(e)) {
        ZT_TRY(open_unit_grads(e, unit));
        dst = e->unit_grads[unit];
    }
    if (!e->plan)
        ZT_TRY(e->ops->from_f32(e->ops, e->grad_type, e->grad_view[unit], dst, su->padded));
    close_view(e, unit, ZT_F32, &e->grad_view[unit]);
    return ZT_OK;
}

static zt_status hook_grads_acquire(void *ctx, int unit, float **grads)
{
    struct shard_engine *e = ctx;
    const struct shard_unit *su = &e->part.units[unit];
    enter_phase(e, LEDGER_PHASE_BACKWARD, unit);
    ZT_TRY(drive_comm(e));
    if (!su->trainable) {
        /* A frozen unit has no gradients: the model's ops skip them. */
        *grads = NULL;
        return ZT_OK;
    }
    if (!grads_16bit(e)) {
        if (!transient_grads(e)) {
            *grads = gat(e, e->grads, su->state_padded_offset);
            return ZT_OK;
        }
        PROF_TRY(e, SHARD_PROF_REDUCE, open_unit_grads(e, unit));
        *grads = e->unit_grads[unit];
        return ZT_OK;
    }
    PROF_TRY(e, SHARD_PROF_CAST, grad_view_open(e, unit));
    *grads = e->grad_view[unit];
    return ZT_OK;
}

static zt_status hook_grads_done(void *ctx, int unit)
{
    struct shard_engine *e = ctx;
    const struct shard_unit *su = &e->part.units[unit];
    if (!su->trainable)
        return ZT_OK;
    if (grads_16bit(e))
        PROF_TRY(e, SHARD_PROF_CAST, grad_view_close(e, unit));
    zt_status st = ZT_OK;
    if (e->cfg.optimizer->fused_backward) {
        enter_phase(e, LEDGER_PHASE_OPTIMIZER, unit);
        PROF_CALL(e, SHARD_PROF_UPDATE, st, fused_unit_done(e, unit));
        return st;
    }
    if (!e->policy.shard_grads && !reduces_early(e))
        return ZT_OK;
    enter_phase(e, LEDGER_PHASE_REDUCTION, unit);
    if (e->policy.shard_grads)
        return unit_grads_complete(e, unit); /* times its own parts */
    PROF_CALL(e, SHARD_PROF_REDUCE, st, early_unit_complete(e, unit));
    return st;
}

/* ---- create / destroy ------------------------------------------------------ */

const char *shard_profile_name(enum shard_profile_phase p)
{
    static const char *const names[SHARD_PROF_COUNT] = {
#define SHARD_PROFILE_NAME(id, name) [id] = name,
        SHARD_PROFILE_PHASES(SHARD_PROFILE_NAME)
#undef SHARD_PROFILE_NAME
    };
    return p >= 0 && p < SHARD_PROF_COUNT ? names[p] : "?";
}

zt_status shard_engine_create(const struct shard_engine_config *cfg, const struct param_table *t,
                              struct comm *comm, const struct compute_backend *be,
                              struct shard_engine *out)
{
    memset(out, 0, sizeof *out);
    const struct shard_policy *policy = shard_policy_of(cfg->stage);
    if (!policy)
        return zt_error_set(ZT_ERR_CONFIG, "zero_optimization.stage %d: must be 0, 1, 2 or 3",
                            cfg->stage);
    ZT_ASSERT(cfg->world >= 1 && cfg->rank >= 0 && cfg->rank < cfg->world);
    ZT_ASSERT(cfg->reduce_bucket_size >= 1 && cfg->prefetch_depth >= 0);
    ZT_ASSERT(cfg->precision == ZT_F32 || cfg->precision == ZT_BF16 || cfg->precision == ZT_F16);
    ZT_ASSERT(cfg->optimizer && cfg->optimizer_states >= 0 &&
              cfg->optimizer_states <= cfg->optimizer->n_states);
    /* the config refuses these (config_check_world, the zero rules) */
    ZT_ASSERT(cfg->replicas <= 1 || policy->shard_states);
    ZT_ASSERT(cfg->secondary_size <= 1 ||
              (policy->shard_params && cfg->world % cfg->secondary_size == 0));
    out->cfg = *cfg;
    out->policy = *policy;
    out->table = t;
    out->comm = comm;
    out->be = be;
    out->dev = &be->dev;
    out->ops = be->ops;
    out->plan = !device_is_real(&be->dev);
    out->state_dev = out->dev;
    out->state_ops = out->ops;
    out->esz = zt_dtype_size(cfg->precision);
    out->grad_type = cfg->grad_accum_fp32 ? ZT_F32 : cfg->precision;
    out->gsz = zt_dtype_size(out->grad_type);
    out->pipeline_stage = cfg->pipeline_stage ? *cfg->pipeline_stage : model_stage_whole(t);
    out->cfg.pipeline_stage = cfg->pipeline_stage ? &out->pipeline_stage : NULL;
    out->tie_peer = -1;
    ZT_ASSERT(comm || out->plan);
    out->hooks = (struct model_unit_hooks){
        .ctx = out,
        .pass_begin = hook_pass_begin,
        .pass_end = hook_pass_end,
        .params_acquire = hook_params_acquire,
        .params_release = hook_params_release,
        .grads_acquire = hook_grads_acquire,
        .grads_done = hook_grads_done,
    };
    zt_status st = shard_partition_build_stage(t, cfg->world, out->cfg.pipeline_stage, &out->part);
    if (st == ZT_OK)
        shard_partition_pack(&out->part, t, cfg->precision);
    if (st == ZT_OK) {
        out->unit_grads = calloc((size_t)t->n_units, sizeof *out->unit_grads);
        out->reduces = calloc((size_t)t->n_units, sizeof *out->reduces);
        out->bucket = calloc((size_t)t->n_units, sizeof *out->bucket);
        out->early = calloc((size_t)t->n_units, sizeof *out->early);
        out->unit_reduced = calloc((size_t)t->n_units, 1);
        out->param_view = calloc((size_t)t->n_units, sizeof *out->param_view);
        out->grad_view = calloc((size_t)t->n_units, sizeof *out->grad_view);
        out->gathers = calloc(MODEL_MAX_UNITS + 4, sizeof *out->gathers);
        out->tensor_state_off = calloc((size_t)t->n_tensors + 1, sizeof *out->tensor_state_off);
        out->secondary_off = calloc((size_t)t->n_units, sizeof *out->secondary_off);
        out->secondary_fresh = calloc((size_t)t->n_units, 1);
        if (!out->unit_grads || !out->reduces || !out->bucket || !out->early ||
            !out->unit_reduced || !out->gathers || !out->param_view || !out->grad_view ||
            !out->tensor_state_off || !out->secondary_off || !out->secondary_fresh)
            st = zt_error_set(ZT_ERR_NOMEM, "cannot allocate the engine's bookkeeping");
    }
    if (st == ZT_OK && shard_offload_wanted(cfg, be))
        st = shard_offload_open(out);
    if (st == ZT_OK && out->offload && cfg->nvme_path)
        st = shard_nvme_open(out);
    if (st == ZT_OK)
        st = alloc_states(out);
    if (st != ZT_OK) {
        shard_engine_destroy(out);
        return st;
    }
    st = cfg->defer_init ? ZT_OK : shard_engine_init_units(out, 0, t->n_units);
    if (st != ZT_OK)
        shard_engine_destroy(out);
    return st;
}

void shard_engine_destroy(struct shard_engine *e)
{
    if (e->early_shards_held) /* a step that failed before it freed them */
        device_free(e->dev, LEDGER_COMM_BUFFERS, e->part.state_shard_total * e->esz,
                    e->early_shards);
    if (e->fused.tied_held) /* a fused step that failed before its end */
        fused_release(e, 0, e->fused.tied);
    /* Frees exactly what was counted, real or planned, newest first. */
    while (e->n_allocs > 0) {
        const struct shard_alloc *a = &e->allocs[--e->n_allocs];
        if (a->dev == e->state_dev)
            shard_state_free(e, a->cat, a->bytes, a->ptr);
        else
            device_free(a->dev, a->cat, a->bytes, a->ptr);
    }
    shard_nvme_close(e);
    shard_offload_close(e);
    free(e->unit_grads);
    free(e->reduces);
    free(e->bucket);
    free(e->early);
    free(e->unit_reduced);
    free(e->param_view);
    free(e->grad_view);
    free(e->gathers);
    free(e->tensor_state_off);
    free(e->secondary_off);
    free(e->secondary_fresh);
    shard_partition_free(&e->part);
    memset(e, 0, sizeof *e);
}

/* ---- the optimizer step ---------------------------------------------------- */

/* Stage 1: the full grads of the trainable units reduce-scattered into a
 * transient shard buffer. */
static zt_status reduce_full_grads(struct shard_engine *e, void *shards)
{
    for (int u = 0; u < e->part.n_units; u++) {
        const struct shard_unit *su = &e->part.units[u];
        if (!su->trainable)
            continue;
        ZT_TRY(comm_reduce_scatter(e->comm, gat(e, e->grads, su->state_padded_offset),
                                   gat(e, shards, su->state_shard_offset), su->shard, e->grad_type,
                                   COMM_OP_SUM));
    }
    return ZT_OK;
}

/* Stages 1-2: every rank's shard of each unit back into the full params;
 * after an update only the trainable units changed. */
static zt_status allgather_params(struct shard_engine *e, int trainable_only)
{
    for (int u = 0; u < e->part.n_units; u++) {
        const struct shard_unit *su = &e->part.units[u];
        if ((trainable_only && !su->trainable) || su->packed) /* each rank encoded it whole */
            continue;
        void *full = at(e, e->params, su->padded_offset);
        ZT_TRY(comm_allgather(e->comm, at(e, full, (size_t)e->cfg.rank * su->shard), full,
                              su->shard, e->cfg.precision));
    }
    return ZT_OK;
}

static zt_status zero_grads(struct shard_engine *e)
{
    size_t n = !e->policy.shard_grads ? e->part.state_padded_total : e->part.state_shard_total;
    return e->ops->memset_zero(e->ops, e->grads, n * e->gsz);
}

/* The elements of the reduced gradients the norm and update read. */
static size_t reduced_count(const struct shard_engine *e)
{
    return !e->policy.shard_states ? e->part.state_padded_total : e->part.state_shard_total;
}

/* Which stage holds the other copy of a tied embedding, in a pipeline of
 * `stages`. */
static void find_tie(struct shard_engine *e, int stages)
{
    e->tie_peer = -1;
    e->tie_duplicate = 0;
    if (stages == 1 || !param_table_head_tied(e->table) || !e->part.units[0].trainable)
        return;
    e->tie_peer = e->pipeline_stage.first ? stages - 1 : e->pipeline_stage.last ? 0 : -1;
    e->tie_duplicate = e->pipeline_stage.last;
}

void shard_engine_join_pipeline(struct shard_engine *e, struct comm *pipe)
{
    const int stages = comm_size(pipe);
    e->pipe = stages > 1 ? pipe : NULL;
    find_tie(e, stages);
}

void shard_engine_plan_pipeline(struct shard_engine *e, int stages)
{
    ZT_ASSERT(e->plan);
    find_tie(e, stages);
}

/* The exchange on the step's reduced gradients g. */
static zt_status sync_tied(struct shard_engine *e, void *g)
{
    size_t off, n;
    tied_range(e, &off, &n);
    return exchange_tied(e, gat(e, g, off), n);
}

/* The sum of squares of this rank's share of the reduced gradients g[n],
 * scaled, without the second copy of a tied embedding. */
static zt_status norm_share(struct shard_engine *e, const void *g, size_t n, double scale,
                            double *sumsq)
{
    if (!e->tie_duplicate)
        return e->ops->sum_squares(e->ops, e->grad_type, g, n, scale, sumsq);
    size_t off, len;
    double before = 0.0, after = 0.0;
    tied_range(e, &off, &len);
    ZT_TRY(e->ops->sum_squares(e->ops, e->grad_type, g, off, scale, &before));
    ZT_TRY(e->ops->sum_squares(e->ops, e->grad_type, gat(e, (void *)g, off + len), n - off - len,
                               scale, &after));
    *sumsq = before + after;
    return ZT_OK;
}

static zt_status hook_tp_allreduce(void *ctx, enum zt_dtype t, void *buf, size_t n,
                                   enum model_reduce op)
{
    struct shard_engine *e = ctx;
    return comm_allreduce(e->tensor, buf, n, t, op == MODEL_REDUCE_MAX ? COMM_OP_MAX : COMM_OP_SUM);
}

static zt_status hook_tp_allgather(void *ctx, enum zt_dtype t, const void *in, void *out, size_t n)
{
    struct shard_engine *e = ctx;
    return comm_allgather(e->tensor, in, out, n, t);
}

static zt_status hook_tp_reduce_scatter(void *ctx, enum zt_dtype t, const void *in, void *out,
                                        size_t n)
{
    struct shard_engine *e = ctx;
    return comm_reduce_scatter(e->tensor, in, out, n, t, COMM_OP_SUM);
}

void shard_engine_join_replicas(struct shard_engine *e, struct comm *replica)
{
    ZT_ASSERT(comm_size(replica) == (e->cfg.replicas > 1 ? e->cfg.replicas : 1));
    e->replica = comm_size(replica) > 1 ? replica : NULL;
}

void shard_engine_join_secondary(struct shard_engine *e, struct comm *secondary)
{
    ZT_ASSERT(has_secondary(e) && comm_size(secondary) == e->cfg.secondary_size &&
              comm_rank(secondary) == e->cfg.rank % e->cfg.secondary_size);
    e->secondary = secondary;
}

void shard_engine_join_tensor(struct shard_engine *e, struct comm *tensor)
{
    e->tensor = comm_size(tensor) > 1 ? tensor : NULL;
    e->hooks.tp_allreduce = e->tensor ? hook_tp_allreduce : NULL;
    e->hooks.tp_allgather = e->tensor ? hook_tp_allgather : NULL;
    e->hooks.tp_reduce_scatter = e->tensor ? hook_tp_reduce_scatter : NULL;
}

/* One step of the context group's ring: to the next rank, from the
 * previous, both posted at once; the pair is the pending handle. */
struct ring_step {
    struct comm_request *recv, *send;
};

static zt_status hook_cp_ring_wait(void *ctx, void *pending)
{
    struct shard_engine *e = ctx;
    struct ring_step *r = pending;
    zt_status st = r->recv ? comm_wait(e->context, r->recv) : ZT_OK;
    const zt_status ws = r->send ? comm_wait(e->context, r->send) : ZT_OK;
    free(r);
    ZT_TRY(st);
    return ws;
}

static zt_status hook_cp_ring_start(void *ctx, enum zt_dtype t, const void *send, void *recv,
                                    size_t n, void **pending)
{
    struct shard_engine *e = ctx;
    const int size = comm_size(e->context), rank = comm_rank(e->context);
    struct ring_step *r = calloc(1, sizeof *r);
    *pending = NULL;
    if (!r)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate a ring step");
    zt_status st = comm_irecv(e->context, recv, n, t, (rank + size - 1) % size, &r->recv);
    if (st == ZT_OK)
        st = comm_isend(e->context, send, n, t, (rank + 1) % size, &r->send);
    if (st != ZT_OK) {
        (void)hook_cp_ring_wait(ctx, r);
        return st;
    }
    *pending = r;
    return ZT_OK;
}

void shard_engine_join_context(struct shard_engine *e, struct comm *context)
{
    e->context = comm_size(context) > 1 ? context : NULL;
    e->hooks.cp_ring_start = e->context ? hook_cp_ring_start : NULL;
    e->hooks.cp_ring_wait = e->context ? hook_cp_ring_wait : NULL;
}

/* Under tensor parallelism: the sum of squares of this rank's share of
 * the reduced gradients g, each piece of a tensor that every
 * tensor-parallel rank holds whole weighted 1/T, so that the sum over the
 * tensor-parallel group counts it once (its gradients are the same on
 * every slice). Without the second copy of a tied embedding. */
static zt_status norm_share_tensor(struct shard_engine *e, const void *g, double scale,
                                   double *sumsq)
{
    double total = 0.0;
    for (int u = 0; u < e->part.n_units; u++) {
        const struct shard_unit *su = &e->part.units[u];
        if (!su->held || !su->trainable || (u == 0 && e->tie_duplicate))
            continue;
        const struct owned_range r = owned_range_of(e, u);
        double part;
        ZT_TRY(shard_tensor_sumsq(e, u, r.lo, r.hi, gat(e, (void *)g, r.grad_off), scale, &part));
        total += part;
    }
    *sumsq = total;
    return ZT_OK;
}

/* The step's reduction of the accumulated gradients into g, as the stage
 * wants (stages 2-3 reduced theirs in the backward), and the tied
 * embedding's copies made equal. */
static zt_status reduce_grads(struct shard_engine *e, void *g)
{
    if (e->early_issued)
        ZT_TRY(finish_early(e, g));
    else if (shard_policy_allreduces_grads(&e->policy))
        ZT_TRY(comm_allreduce(e->comm, e->grads, reduced_count(e), e->grad_type, COMM_OP_SUM));
    else if (shard_policy_reduces_at_step(&e->policy))
        ZT_TRY(reduce_full_grads(e, g));
    /* HSDP: the shard group's sums added across the groups, once a step */
    if (e->replica)
        ZT_TRY(comm_allreduce(e->replica, g, reduced_count(e), e->grad_type, COMM_OP_SUM));
    return e->tie_peer >= 0 ? sync_tied(e, g) : ZT_OK;
}

/* The squared global norm of the reduced gradients g[n] times scale,
 * summed over every group that holds a share of them. */
static zt_status global_sumsq(struct shard_engine *e, const void *g, size_t n, double scale,
                              double *sumsq)
{
    if (e->tensor)
        ZT_TRY(norm_share_tensor(e, g, scale, sumsq));
    else
        ZT_TRY(norm_share(e, g, n, scale, sumsq));
    if (e->policy.shard_states)
        ZT_TRY(comm_allreduce(comm_host(e->comm), sumsq, 1, ZT_F64, COMM_OP_SUM));
    if (e->pipe)
        ZT_TRY(comm_allreduce(comm_host(e->pipe), sumsq, 1, ZT_F64, COMM_OP_SUM));
    if (e->tensor)
        ZT_TRY(comm_allreduce(comm_host(e->tensor), sumsq, 1, ZT_F64, COMM_OP_SUM));
    return ZT_OK;
}

/* The reduced gradients this rank holds, unit by unit, to the probe. */
static zt_status probe_reduced(struct shard_engine *e, const void *g, double scale)
{
    const struct shard_reduced_probe *p = e->reduced_probe;
    for (int u = 0; u < e->part.n_units; u++) {
        const struct owned_range r = owned_range_of(e, u);
        if (e->part.units[u].trainable && r.hi > r.lo)
            ZT_TRY(p->unit(p->ctx, u, r.lo, gat(e, (void *)g, r.grad_off), r.hi - r.lo, scale));
    }
    return ZT_OK;
}

static zt_status step_real(struct shard_engine *e, void *g, struct shard_update_bufs *bufs,
                           struct optimizer_hparams *hp, double loss_scale, int skip_on_overflow,
                           struct shard_step_result *out)
{
    const size_t n = reduced_count(e);
    enter_phase(e, LEDGER_PHASE_REDUCTION, -1);
    PROF_TRY(e, SHARD_PROF_REDUCE, reduce_grads(e, g));
    const double unscale = 1.0 / (dp_ranks(e) * loss_scale);
    if (e->reduced_probe)
        ZT_TRY(probe_reduced(e, g, unscale));
    double sumsq;
    PROF_TRY(e, SHARD_PROF_NORM, global_sumsq(e, g, n, unscale, &sumsq));
    const double norm = sqrt(sumsq);
    out->grad_norm = norm;
    if (!isfinite(norm) || e->reduced_probe) { /* a probed step never updates */
        PROF_TRY(e, SHARD_PROF_ZERO_GRADS, zero_grads(e));
        if (skip_on_overflow || e->reduced_probe) {
            out->skipped = 1;
            return ZT_OK;
        }
        return zt_error_set(ZT_ERR_NUMERIC,
                            "gradient norm is %f at step %ld: training diverged (lower "
                            "optimizer.params.lr or set gradient_clipping)",
                            norm, e->updates + 1);
    }
    double clip = e->cfg.clip > 0.0 && norm > e->cfg.clip ? e->cfg.clip / (norm + 1e-6) : 1.0;
    hp->step = ++e->updates;
    enter_phase(e, LEDGER_PHASE_OPTIMIZER, -1);
    PROF_TRY(e, SHARD_PROF_UPDATE, shard_update_owned(e, g, (float)(unscale * clip), bufs, hp));
    if (shard_policy_regathers_params(&e->policy))
        PROF_TRY(e, SHARD_PROF_REGATHER, allgather_params(e, 1));
    secondary_stale(e);
    zt_status st;
    PROF_CALL(e, SHARD_PROF_ZERO_GRADS, st, zero_grads(e));
    return st;
}

/* Largest range one unit contributes to the update (the fp32 staging of
 * 16-bit gradients). */
static size_t max_update_range(const struct shard_engine *e)
{
    size_t m = 0;
    for (int u = 0; u < e->part.n_units; u++) {
        size_t n = !e->policy.shard_states ? e->part.units[u].numel : e->part.units[u].shard;
        m = n > m ? n : m;
    }
    return m;
}

/* Bytes of the update's buffers in state memory (struct shard_update_bufs):
 * tmp, and under offload the host copies of the gradients and of one
 * unit's working params. */
static void update_bufs_bytes(const struct shard_engine *e, size_t bytes[3])
{
    bytes[0] = staging_floats(e, max_update_range(e)) * sizeof(float);
    bytes[1] = offload_staged(e) ? reduced_count(e) * e->gsz : 0;
    bytes[2] = offload_staged(e) ? max_update_range(e) * e->esz : 0;
}

static void update_bufs_free(struct shard_engine *e, struct shard_update_bufs *b)
{
    size_t bytes[3];
    update_bufs_bytes(e, bytes);
    shard_update_stats_free(e, &b->stats);
    void *ptr[3] = {b->tmp, b->host_grads, b->host_working};
    const enum ledger_category cat[3] = {LEDGER_WORKSPACE, LEDGER_COMM_BUFFERS, LEDGER_WORKSPACE};
    for (int i = 2; i >= 0; i--)
        if (bytes[i] && (ptr[i] || e->plan)) /* (a plan's allocations have no address) */
            shard_state_free(e, cat[i], bytes[i], ptr[i]);
    memset(b, 0, sizeof *b);
}

static zt_status update_bufs_alloc(struct shard_engine *e, struct shard_update_bufs *b)
{
    size_t bytes[3];
    update_bufs_bytes(e, bytes);
    void **ptr[3] = {(void **)&b->tmp, &b->host_grads, &b->host_working};
    static const char *const what[3] = {"fp32 gradients", "offloaded gradients",
                                        "offloaded working parameters"};
    const enum ledger_category cat[3] = {LEDGER_WORKSPACE, LEDGER_COMM_BUFFERS, LEDGER_WORKSPACE};
    memset(b, 0, sizeof *b);
    zt_status st = ZT_OK;
    for (int i = 0; i < 3 && st == ZT_OK; i++)
        if (bytes[i])
            st = shard_state_alloc(e, cat[i], bytes[i], what[i], ptr[i]);
    if (st == ZT_OK)
        st = shard_update_stats_alloc(e, &b->stats);
    if (st != ZT_OK)
        update_bufs_free(e, b);
    return st;
}

zt_status shard_engine_step(struct shard_engine *e, struct optimizer_hparams *hp, double loss_scale,
                            int skip_on_overflow, struct shard_step_result *out)
{
    const size_t shard_bytes_total = e->part.state_shard_total * e->gsz;
    void *g = e->grads, *shards = NULL;
    out->grad_norm = 0.0;
    out->skipped = 0;
    if (e->cfg.optimizer->fused_backward) {
        (void)hp; /* the backward applied the update armed for it */
        (void)loss_scale;
        zt_status st;
        PROF_CALL(e, SHARD_PROF_NORM, st, step_fused(e, skip_on_overflow, out));
        return st;
    }
    enter_phase(e, LEDGER_PHASE_REDUCTION, -1);
    if (shard_policy_reduces_at_step(&e->policy) && e->early_shards_held)
        shards = e->early_shards; /* the backward's reduce-scatters fill it */
    else if (shard_policy_reduces_at_step(&e->policy))
        PROF_TRY(e, SHARD_PROF_REDUCE,
                 device_alloc_uninit(e->dev, LEDGER_COMM_BUFFERS, shard_bytes_total,
                                     "reduced grad shards", &shards));
    if (shard_policy_reduces_at_step(&e->policy))
        g = shards;
    /* the update's staging is allocated before the reduction runs */
    enter_phase(e, LEDGER_PHASE_OPTIMIZER, -1);
    struct shard_update_bufs bufs;
    zt_status st;
    PROF_CALL(e, SHARD_PROF_UPDATE, st, update_bufs_alloc(e, &bufs));
    const int bufs_held = st == ZT_OK; /* a failed allocation freed its part */
    if (st == ZT_OK && !e->plan)
        st = step_real(e, g, &bufs, hp, loss_scale, skip_on_overflow, out);
    else if (st == ZT_OK && e->tie_peer >= 0)
        st = plan_tied(e);
    double t0 = prof_begin(e);
    if (bufs_held)
        update_bufs_free(e, &bufs);
    if (shard_policy_reduces_at_step(&e->policy))
        device_free(e->dev, LEDGER_COMM_BUFFERS, shard_bytes_total, shards);
    prof_end(e, SHARD_PROF_UPDATE, t0);
    e->early_shards = NULL;
    e->early_shards_held = e->early_issued = 0;
    memset(e->unit_reduced, 0, (size_t)e->part.n_units);
    return st;
}

void shard_engine_bytes_per_param(const struct shard_engine *e, double out[4])
{
    const int half = is_16bit(e);
    const double trainable = (double)e->part.trainable_numel;
    out[0] = half ? 2 : 4;
    out[1] = e->cfg.optimizer->fused_backward ? 0 : (double)e->gsz;
    out[2] = has_master(e) && !e->nvme ? 4 : 0;
    out[3] = 0;
    for (int k = 0; k < e->cfg.optimizer_states && !e->nvme; k++)
        out[3] += (double)zt_dtype_size(e->cfg.optimizer->state_dtype[k]);
    if (trainable > 0)
        out[3] += (double)shard_engine_replicated_state_bytes(e) / trainable;
}

size_t shard_engine_replicated_state_bytes(const struct shard_engine *e)
{
    size_t master = 0, states = 0;
    if (e->nvme)
        shard_nvme_window_bytes(e, &master, &states);
    return e->tensor_state_len * sizeof(float) + master + states;
}

zt_status shard_engine_full_params(struct shard_engine *e, float *dst)
{
    void *buf = NULL, *host = NULL;
    size_t buf_bytes = 0;
    for (int u = 0; u < e->part.n_units; u++)
        buf_bytes = unit_bytes(e, u) > buf_bytes ? unit_bytes(e, u) : buf_bytes;
    if (e->policy.shard_params)
        ZT_TRY(device_alloc(e->dev, LEDGER_WORKSPACE, buf_bytes, "a unit to export", &buf));
    host = malloc(buf_bytes);
    zt_status st = host ? ZT_OK : zt_error_set(ZT_ERR_NOMEM, "cannot allocate the export staging");
    for (int u = 0; u < e->part.n_units && st == ZT_OK; u++) {
        const struct shard_unit *su = &e->part.units[u];
        const void *src = su->packed ? (const void *)((char *)e->packed + su->image_offset)
                                     : at(e, e->params, su->padded_offset);
        if (e->policy.shard_params) {
            st = su->packed ? comm_allgather(e->comm, (char *)e->packed + su->image_shard_offset,
                                             buf, su->image_shard, ZT_U8)
                            : comm_allgather(e->comm, at(e, e->params, su->shard_offset), buf,
                                             su->shard, e->cfg.precision);
            src = buf;
        }
        const size_t bytes = su->packed ? su->image : su->numel * e->esz;
        if (st == ZT_OK)
            st = e->dev->ops->copy_to_host(e->dev, host, src, bytes);
        if (st == ZT_OK && su->packed)
            param_quant_decode(e->table, u, e->cfg.precision, host, ZT_F32, dst + su->offset);
        else if (st == ZT_OK)
            precision_to_f32(e->cfg.precision, host, dst + su->offset, su->numel);
    }
    free(host);
    if (e->policy.shard_params)
        device_free(e->dev, LEDGER_WORKSPACE, buf_bytes, buf);
    return st;
}

/* ---- state access for checkpoints and imported weights --------------------- */

void shard_engine_held_range(const struct shard_engine *e, int u, size_t *lo, size_t *hi)
{
    const struct owned_range r = owned_range_of(e, u);
    *lo = r.lo;
    *hi = r.hi;
}

void shard_engine_held_range_of(const struct shard_engine *e, int rank, int u, size_t *lo,
                                size_t *hi)
{
    ZT_ASSERT(rank >= 0 && rank < e->cfg.world);
    *lo = 0;
    *hi = e->part.units[u].numel;
    if (e->policy.shard_states)
        shard_owned_range(&e->part, rank, u, lo, hi);
}

int shard_engine_ranks_meeting(const struct shard_engine *e, int u, size_t first, size_t n, int *r0,
                               int *r1)
{
    const struct shard_unit *su = &e->part.units[u];
    const size_t width = su->packed ? su->image_shard : su->shard, world = (size_t)e->cfg.world;
    *r0 = 0;
    *r1 = e->cfg.world;
    if (!(su->packed ? e->policy.shard_params : e->policy.shard_states))
        return 0;
    const size_t a = n && width ? first / width : 0,
                 b = n && width ? (first + n - 1) / width + 1 : 0;
    *r0 = (int)(a < world ? a : world);
    *r1 = (int)(b < world ? b : world);
    return 1;
}

const char *shard_engine_state_name(const struct shard_engine *e, int which)
{
    ZT_ASSERT(which >= 0 && which < shard_engine_n_states(e));
    return which == SHARD_STATE_MASTER ? SHARD_STATE_MASTER_NAME
                                       : e->cfg.optimizer->state_names[which - 1];
}

int shard_engine_holds_state(const struct shard_engine *e, int which, int u)
{
    ZT_ASSERT(which >= 0 && which < shard_engine_n_states(e));
    if (e->part.units[u].packed) /* rebuilt from the base weights, never stored */
        return 0;
    return which == SHARD_STATE_MASTER || e->part.units[u].trainable;
}

/* A frozen unit under 16-bit precision or offload has no fp32 master: its
 * weights are the working copy, converted on the way to and from the host. */
static int master_is_working(const struct shard_engine *e, int which, int u)
{
    return which == SHARD_STATE_MASTER && has_master(e) && !e->part.units[u].trainable;
}

/* Under fp32 without offload the master of a unit is its working params. */
static int master_in_params(const struct shard_engine *e, int which)
{
    return which == SHARD_STATE_MASTER && !has_master(e);
}

const struct device *shard_engine_state_device(const struct shard_engine *e, int which, int u)
{
    ZT_ASSERT(shard_engine_holds_state(e, which, u));
    return master_is_working(e, which, u) || master_in_params(e, which) ? e->dev : e->state_dev;
}

enum zt_dtype shard_engine_state_dtype(const struct shard_engine *e, int which)
{
    ZT_ASSERT(which >= 0 && which < shard_engine_n_states(e));
    return which == SHARD_STATE_MASTER ? ZT_F32 : e->cfg.optimizer->state_dtype[which - 1];
}

/* Address of state element `lo` of unit u (inside the held range; not
 * for master_is_working), in shard_engine_state_device's memory. */
static void *state_at(struct shard_engine *e, int which, int u, size_t lo)
{
    const struct owned_range r = owned_range_of(e, u);
    ZT_ASSERT(lo >= r.lo && lo <= r.hi);
    ZT_ASSERT(shard_engine_holds_state(e, which, u) && !master_is_working(e, which, u));
    const size_t skip = lo - r.lo;
    if (which != SHARD_STATE_MASTER)
        return state_elem(e, which - 1, r.state_off + skip);
    return has_master(e) ? e->master + r.state_off + skip
                         : (float *)e->params + r.working_off + skip;
}

/* Under NVMe offload: the index of element lo of unit u's held range in
 * the state vectors (the file's coordinates). */
static size_t state_index(const struct shard_engine *e, int u, size_t lo)
{
    const struct owned_range r = owned_range_of(e, u);
    ZT_ASSERT(lo >= r.lo && lo <= r.hi);
    return r.state_off + (lo - r.lo);
}

/* The working params at element lo of unit u's held range. */
static void *working_at(struct shard_engine *e, int u, size_t lo)
{
    const struct owned_range r = owned_range_of(e, u);
    return at(e, e->params, r.working_off + (lo - r.lo));
}

zt_status shard_engine_get_state(struct shard_engine *e, int which, int u, size_t lo, size_t hi,
                                 void *dst)
{
    ZT_ASSERT(hi >= lo && hi <= owned_range_of(e, u).hi);
    const size_t n = hi - lo, esz = zt_dtype_size(shard_engine_state_dtype(e, which));
    const struct device *d = shard_engine_state_device(e, which, u);
    if (e->nvme && !master_is_working(e, which, u))
        return shard_nvme_read(e, which, state_index(e, u, lo), n, dst);
    if (!master_is_working(e, which, u))
        return d->ops->copy_to_host(d, dst, state_at(e, which, u, lo), n * esz);
    if (e->be->host_memory) { /* widened straight from the working copy */
        precision_to_f32(e->cfg.precision, working_at(e, u, lo), dst, n);
        return ZT_OK;
    }
    void *staging = malloc(n ? n * e->esz : 1);
    if (!staging)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the weight staging");
    zt_status st = e->dev->ops->copy_to_host(e->dev, staging, working_at(e, u, lo), n * e->esz);
    if (st == ZT_OK)
        precision_to_f32(e->cfg.precision, staging, dst, n);
    free(staging);
    return st;
}

zt_status shard_engine_set_state(struct shard_engine *e, int which, int u, size_t lo, size_t hi,
                                 const void *src)
{
    secondary_stale(e);
    ZT_ASSERT(hi >= lo && hi <= owned_range_of(e, u).hi);
    const size_t n = hi - lo, esz = zt_dtype_size(shard_engine_state_dtype(e, which));
    const struct device *d = shard_engine_state_device(e, which, u);
    if (e->nvme && !master_is_working(e, which, u))
        return shard_nvme_write(e, which, state_index(e, u, lo), n, src);
    if (!master_is_working(e, which, u))
        return d->ops->copy_from_host(d, state_at(e, which, u, lo), src, n * esz);
    if (e->be->host_memory) { /* rounded straight into the working copy */
        precision_from_f32(e->cfg.precision, src, working_at(e, u, lo), n);
        return ZT_OK;
    }
    /* a device's copy goes through host staging, the loader's (`load`) */
    void *staging = malloc(n ? n * e->esz : 1);
    if (!staging)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the weight staging");
    ledger_add(e->dev->ledger, LEDGER_LOAD, n * e->esz);
    precision_from_f32(e->cfg.precision, src, staging, n);
    zt_status st = e->dev->ops->copy_from_host(e->dev, working_at(e, u, lo), staging, n * e->esz);
    ledger_sub(e->dev->ledger, LEDGER_LOAD, n * e->esz);
    free(staging);
    return st;
}

/* Under NVMe offload: range r's working params from the master in the
 * file, read a window buffer at a time. */
static zt_status push_from_file(struct shard_engine *e, const struct owned_range *r, void *staging)
{
    size_t room;
    float *buf = shard_nvme_scratch(e, &room);
    for (size_t a = r->lo; a < r->hi; a += room) {
        const size_t b = r->hi - a < room ? r->hi : a + room;
        const struct owned_range piece = owned_range_piece(r, a, b);
        ZT_TRY(shard_nvme_read(e, 0, piece.state_off, b - a, buf));
        ZT_TRY(e->state_ops->from_f32(e->state_ops, e->cfg.precision, buf, staging, b - a));
        ZT_TRY(shard_offload_push_working(e, &piece, staging));
    }
    return ZT_OK;
}

/* Under offload: range r's working params from the host master, cast on
 * the host into staging[] and copied to the device. */
static zt_status push_from_master(struct shard_engine *e, const struct owned_range *r,
                                  void *staging)
{
    if (e->nvme)
        return push_from_file(e, r, staging);
    ZT_TRY(e->state_ops->from_f32(e->state_ops, e->cfg.precision, e->master + r->state_off, staging,
                                  r->hi - r->lo));
    return shard_offload_push_working(e, r, staging);
}

/* The working params of every trainable unit's held range from the
 * master (frozen ones were set directly). */
static zt_status working_from_master(struct shard_engine *e)
{
    void *staging = NULL;
    if (e->offload && !(staging = malloc(max_update_range(e) * e->esz + 1)))
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the weight staging");
    zt_status st = ZT_OK;
    for (int u = 0; u < e->part.n_units && st == ZT_OK; u++) {
        const struct owned_range r = owned_range_of(e, u);
        if (!e->part.units[u].trainable || r.hi == r.lo)
            continue;
        st = e->offload ? push_from_master(e, &r, staging)
                        : e->ops->from_f32(e->ops, e->cfg.precision, e->master + r.state_off,
                                           at(e, e->params, r.working_off), r.hi - r.lo);
    }
    free(staging);
    return st;
}

int shard_engine_master_in_memory(const struct shard_engine *e)
{
    return has_master(e) && !e->nvme;
}

zt_status shard_engine_params_from_master(struct shard_engine *e)
{
    secondary_stale(e);
    if (has_master(e))
        ZT_TRY(working_from_master(e));
    if (shard_policy_regathers_params(&e->policy))
        ZT_TRY(allgather_params(e, 0));
    return ZT_OK;
}

zt_status shard_engine_get_tensor_state(struct shard_engine *e, float *dst)
{
    const struct device *d = e->state_dev;
    return d->ops->copy_to_host(d, dst, e->tensor_state, e->tensor_state_len * sizeof(float));
}

zt_status shard_engine_set_tensor_state(struct shard_engine *e, const float *src)
{
    const struct device *d = e->state_dev;
    return d->ops->copy_from_host(d, e->tensor_state, src, e->tensor_state_len * sizeof(float));
}

void shard_engine_set_updates(struct shard_engine *e, long updates)
{
    e->updates = updates;
}
