/* shard/update.c — the optimizer update over the ranges a rank owns.
 *
 * Element-wise optimizers (AdamW, Lion, ...) run on each trainable
 * tensor's part of the rank's range of each unit, in one pass that also
 * reads the gradients in the working precision with the unscale and clip
 * applied on the fly, and under 16-bit precision writes the working copy
 * from the updated master (struct optimizer_range): no fp32 staging of the
 * gradients and no separate scale or cast pass. Whole-tensor
 * optimizers (Adafactor) need statistics of each whole tensor while the
 * rank holds only a piece of it: every round, each rank adds its pieces'
 * partial sums into one vector of doubles (all tensors back to back), one
 * allreduce totals it across the ranks that split the tensors (none under
 * stage 0, where every rank holds every tensor whole), and the next round
 * reads the totals. The vector is O(rows + cols) per matrix, so the
 * communication is small next to the gradients, and the update equals the
 * unsharded one whatever the world size. Under tensor parallelism the
 * statistics and the replicated state are the whole tensor's, not the
 * slice's: each piece says where its slice lies in the whole tensor
 * (struct optimizer_slice), and the totals are also taken over the
 * tensor-parallel ranks, so a slice's update is the one T = 1 makes, and
 * the replicated state is the same on every rank of every layout (a
 * checkpoint's resumes at any T).
 *
 * Every op here runs on the memory the states are in (e->state_ops): the
 * device's, or under ZeRO-Offload the host's, where the update then reads
 * a host copy of the gradients and writes the working params through a
 * host staging buffer that is copied to the device unit by unit
 * (shard/offload.c).
 */
#include <string.h>

#include "../worker/tensor_parallel.h"
#include "shard_impl.h"

/* The fp32 update target of the rank's range of unit u: the master under
 * 16-bit precision or offload, else the working params. */
static float *update_target(struct shard_engine *e, const struct owned_range *r)
{
    return has_master(e) ? e->master + r->state_off : (float *)e->params + r->working_off;
}

/* Range r's update target and optimizer states in the engine's vectors. */
static struct range_states states_in_memory(struct shard_engine *e, const struct owned_range *r)
{
    struct range_states rs = {.master = update_target(e, r)};
    for (int j = 0; j < e->cfg.optimizer_states; j++)
        rs.states[j] = state_elem(e, j, r->state_off);
    return rs;
}

/* Where the update writes range r's working params from the updated
 * master: the device's under 16-bit precision or offload in place, the
 * host staging under staged offload (pushed by finish_working), none when
 * the target is the working params. */
static void *update_working(struct shard_engine *e, const struct owned_range *r,
                            const struct shard_update_bufs *b)
{
    if (offload_staged(e))
        return b->host_working;
    return is_16bit(e) || e->offload ? at(e, e->params, r->working_off) : NULL;
}

static zt_status finish_working(struct shard_engine *e, const struct owned_range *r,
                                const struct shard_update_bufs *b)
{
    return offload_staged(e) ? shard_offload_push_working(e, r, b->host_working) : ZT_OK;
}

/* The element-wise optimizer on the rank's range r of unit u, one fused
 * pass per tensor piece (struct optimizer_range): `grads` points at element
 * r->lo of the reduced gradients (grad_type), which the kernel
 * converts and multiplies by gscale as it reads them; under 16-bit precision
 * the kernel also casts the updated master into the working params. Tensors
 * are cut at the range's edges so each keeps its own flags: frozen ones are
 * not updated (under 16-bit their working params are still refreshed from
 * the master, as the whole range always was), and weight decay applies
 * where the tensor says. */
static zt_status update_unit_range(struct shard_engine *e, int u, const struct owned_range *r,
                                   const struct range_states *rs, const void *grads, float gscale,
                                   void *working, const struct optimizer_hparams *hp)
{
    const struct param_table *t = e->table;
    const size_t base = t->unit_offset[u];
    float *target = rs->master;
    for (int k = 0; k < t->n_tensors; k++) {
        const struct param_tensor *pt = &t->tensors[k];
        if (pt->unit != u)
            continue;
        size_t a = pt->offset - base, b = a + pt->numel;
        a = a > r->lo ? a : r->lo;
        b = b < r->hi ? b : r->hi;
        if (a >= b)
            continue;
        const size_t off = a - r->lo;
        if (!pt->trainable) {
            if (working)
                ZT_TRY(e->state_ops->from_f32(e->state_ops, e->cfg.precision, target + off,
                                              at(e, working, off), b - a));
            continue;
        }
        struct optimizer_range range = {
            .params = target + off,
            .grads = gat(e, (void *)grads, off),
            .grad_dtype = e->grad_type,
            .gscale = gscale,
            .working = working ? at(e, working, off) : NULL,
            .working_dtype = e->cfg.precision,
            .n = b - a,
            .decay = pt->decay ? 1.0f : 0.0f,
        };
        for (int j = 0; j < e->cfg.optimizer_states; j++)
            range.states[j] = (float *)rs->states[j] + off; /* fp32 here */
        ZT_TRY(e->cfg.optimizer->update(e->state_ops, &range, hp));
    }
    return ZT_OK;
}

/* The rank's fp32 gradients of unit u's range times gscale, for the
 * whole-tensor optimizers: in place when they are fp32 (scaled once, by
 * the caller), through tmp when they are 16-bit. */
static zt_status unit_grads_f32(struct shard_engine *e, void *g, const struct owned_range *r,
                                float gscale, float *tmp, const float **out)
{
    const size_t n = r->hi - r->lo;
    *out = (const float *)g + r->grad_off;
    if (!grads_16bit(e))
        return ZT_OK;
    ZT_TRY(e->state_ops->to_f32(e->state_ops, e->grad_type, gat(e, g, r->grad_off), tmp, n));
    ZT_TRY(e->state_ops->scale(e->state_ops, tmp, n, gscale));
    *out = tmp;
    return ZT_OK;
}

/* Under NVMe offload: the same update chunk by chunk, each chunk's
 * states streamed through the window (shard/nvme.c). A chunk is a piece
 * of one unit's range, so the pieces' updates are the range's. */
static zt_status update_streamed(struct shard_engine *e, void *g, float gscale,
                                 const struct shard_update_bufs *b,
                                 const struct optimizer_hparams *hp)
{
    int n_chunks = 0;
    ZT_TRY(shard_nvme_pass_begin(e, &n_chunks));
    zt_status st = ZT_OK;
    for (int i = 0; i < n_chunks && st == ZT_OK; i++) {
        int u;
        struct owned_range r;
        struct range_states rs;
        st = shard_nvme_chunk_get(e, i, &u, &r, &rs);
        if (st == ZT_OK)
            st = update_unit_range(e, u, &r, &rs, gat(e, g, r.grad_off), gscale,
                                   update_working(e, &r, b), hp);
        if (st == ZT_OK)
            st = finish_working(e, &r, b);
        if (st == ZT_OK)
            shard_nvme_chunk_put(e, i);
    }
    const zt_status end = shard_nvme_pass_end(e);
    return st != ZT_OK ? st : end;
}

static zt_status update_elementwise(struct shard_engine *e, void *g, float gscale,
                                    const struct shard_update_bufs *b,
                                    const struct optimizer_hparams *hp)
{
    if (e->nvme)
        return update_streamed(e, g, gscale, b, hp);
    for (int u = 0; u < e->part.n_units; u++) {
        const struct owned_range r = owned_range_of(e, u);
        if (r.hi == r.lo || !e->part.units[u].trainable)
            continue;
        const struct range_states rs = states_in_memory(e, &r);
        ZT_TRY(update_unit_range(e, u, &r, &rs, gat(e, g, r.grad_off), gscale,
                                 update_working(e, &r, b), hp));
        ZT_TRY(finish_working(e, &r, b));
    }
    return ZT_OK;
}

/* ---- the norm's share of a unit under tensor parallelism ------------------------ */

zt_status shard_tensor_sumsq(struct shard_engine *e, int u, size_t lo, size_t hi, const void *g,
                             double scale, double *sumsq)
{
    const struct param_table *t = e->table;
    const double whole_weight = 1.0 / (double)comm_size(e->tensor);
    *sumsq = 0.0;
    for (int k = 0; k < t->n_tensors; k++) {
        const struct param_tensor *pt = &t->tensors[k];
        if (pt->unit != u)
            continue;
        const size_t first = pt->offset - t->unit_offset[u], end = first + pt->numel;
        const size_t a = first > lo ? first : lo, b = end < hi ? end : hi;
        if (a >= b)
            continue;
        double part = 0.0;
        ZT_TRY(e->ops->sum_squares(e->ops, e->grad_type, gat(e, (void *)g, a - lo), b - a, scale,
                                   &part));
        *sumsq += pt->tp_split ? part : part * whole_weight;
    }
    return ZT_OK;
}

/* ---- fused-backward optimizers -------------------------------------------------- */

/* The update reads the reduced 16-bit gradients itself: tmp, the fp32
 * staging the engine allocates under 16-bit precision, is not used. Never
 * offloaded (shard_offload_open refuses), so the states are the device's. */
zt_status shard_update_fused_unit(struct shard_engine *e, int u, void *reduced,
                                  const struct owned_range *r, float *tmp)
{
    (void)tmp;
    const size_t n = r->hi - r->lo;
    double sumsq;
    if (n == 0)
        return ZT_OK;
    if (e->tensor)
        ZT_TRY(shard_tensor_sumsq(e, u, r->lo, r->hi, reduced, e->fused.unscale, &sumsq));
    else
        ZT_TRY(e->ops->sum_squares(e->ops, e->grad_type, reduced, n, e->fused.unscale, &sumsq));
    e->fused.sumsq += sumsq;
    if (!e->fused.update)
        return ZT_OK;
    void *working = is_16bit(e) ? at(e, e->params, r->working_off) : NULL;
    const struct range_states rs = states_in_memory(e, r);
    return update_unit_range(e, u, r, &rs, reduced, e->fused.gscale, working, &e->fused.hp);
}

/* ---- whole-tensor optimizers ------------------------------------------------ */

size_t shard_tensor_state_layout(const struct shard_engine *e, size_t *out)
{
    const struct param_table *t = e->table;
    const struct optimizer_ops *opt = e->cfg.optimizer;
    size_t total = 0;
    for (int k = 0; k < t->n_tensors; k++) {
        const struct param_tensor *wt = &param_table_whole(t)->tensors[k];
        out[k] = SHARD_NO_STATE;
        if (!wt->trainable)
            continue;
        out[k] = total;
        total += opt->tensor_state_len(wt->rows, wt->cols, &e->cfg.hparams);
    }
    return total;
}

/* Doubles of round q's statistics of tensor k: its whole tensor's. */
static size_t stats_len_of(const struct shard_engine *e, int q, int k)
{
    const struct param_tensor *wt = &param_table_whole(e->table)->tensors[k];
    return e->cfg.optimizer->stats_len(q, wt->rows, wt->cols, &e->cfg.hparams);
}

/* One visit of every trainable tensor's piece: round `round` of the
 * statistics, or the apply when round == opt->n_rounds. */
struct piece_pass {
    int round;
    double *stats[OPTIMIZER_MAX_ROUNDS]; /* whole vectors, tensors back to back */
    size_t stats_at[OPTIMIZER_MAX_ROUNDS];
};

/* The piece of tensor pt that the rank's range r of its unit covers. */
static struct optimizer_piece piece_of(struct shard_engine *e, const struct param_tensor *pt, int k,
                                       const struct owned_range *r, float *target,
                                       const float *grad)
{
    const size_t a = pt->offset - e->table->unit_offset[pt->unit], b = a + pt->numel;
    const size_t from = a > r->lo ? a : r->lo, to = b < r->hi ? b : r->hi;
    const struct param_tensor *wt = &param_table_whole(e->table)->tensors[k];
    struct optimizer_piece pc = {
        .rows = wt->rows,
        .cols = wt->cols,
        .numel = wt->numel,
        .decay = pt->decay ? 1.0f : 0.0f,
        .tensor_state = e->tensor_state + e->tensor_state_off[k],
    };
    param_table_tp_tensor_runs(e->table, k, &pc.slice.first, &pc.slice.run, &pc.slice.stride);
    if (from >= to)
        return pc; /* the rank holds none of it: lo == hi == 0 */
    pc.lo = from - a;
    pc.hi = to - a;
    pc.params = target + (from - r->lo);
    pc.grads = grad + (from - r->lo);
    for (int j = 0; j < e->cfg.optimizer_states; j++)
        pc.states[j] = state_elem(e, j, r->state_off + (from - r->lo));
    return pc;
}

/* After the apply of unit u's pieces: the working params of range r from
 * the updated master, where it is apart from them. */
static zt_status refresh_working(struct shard_engine *e, const struct owned_range *r,
                                 const float *target, const struct shard_update_bufs *b)
{
    void *working = update_working(e, r, b);
    if (!working || r->hi == r->lo)
        return ZT_OK;
    ZT_TRY(e->state_ops->from_f32(e->state_ops, e->cfg.precision, target, working, r->hi - r->lo));
    return finish_working(e, r, b);
}

static zt_status visit_pieces(struct shard_engine *e, void *g, float gscale,
                              const struct shard_update_bufs *b, struct piece_pass *pass,
                              const struct optimizer_hparams *hp)
{
    const struct param_table *t = e->table;
    const struct optimizer_ops *opt = e->cfg.optimizer;
    const int apply = pass->round == opt->n_rounds;
    size_t at_stats[OPTIMIZER_MAX_ROUNDS] = {0};
    for (int u = 0; u < e->part.n_units; u++) {
        if (!e->part.units[u].trainable)
            continue;
        const struct owned_range r = owned_range_of(e, u);
        const float *grad = NULL;
        float *target = NULL;
        if (r.hi > r.lo) {
            ZT_TRY(unit_grads_f32(e, g, &r, gscale, b->tmp, &grad));
            target = update_target(e, &r);
        }
        for (int k = 0; k < t->n_tensors; k++) {
            const struct param_tensor *pt = &t->tensors[k];
            if (pt->unit != u || !pt->trainable)
                continue;
            struct optimizer_piece pc = piece_of(e, pt, k, &r, target, grad);
            for (int q = 0; q < opt->n_rounds; q++) {
                pc.stats[q] = pass->stats[q] + at_stats[q];
                at_stats[q] += stats_len_of(e, q, k);
            }
            ZT_TRY(apply ? opt->tensor_apply(e->state_ops, &pc, hp)
                         : opt->tensor_round(e->state_ops, pass->round, &pc, hp));
        }
        if (apply)
            ZT_TRY(refresh_working(e, &r, target, b));
    }
    return ZT_OK;
}

/* Doubles of round q's statistics over every trainable tensor. */
static size_t stats_total(const struct shard_engine *e, int q)
{
    size_t n = 0;
    for (int k = 0; k < e->table->n_tensors; k++)
        if (e->table->tensors[k].trainable)
            n += stats_len_of(e, q, k);
    return n;
}

/* Zeroes round q's statistics of the tensors every tensor-parallel rank
 * holds whole, so that the sum (or the maximum: the statistics a maximum
 * takes are >= 0) over the tensor-parallel ranks counts them once. In
 * visit_pieces' order. */
static zt_status zero_replicated_stats(struct shard_engine *e, double *stats, int q)
{
    const struct param_table *t = e->table;
    size_t at = 0;
    for (int u = 0; u < e->part.n_units; u++)
        for (int k = 0; k < t->n_tensors; k++) {
            const struct param_tensor *pt = &t->tensors[k];
            if (pt->unit != u || !pt->trainable)
                continue;
            const size_t n = stats_len_of(e, q, k);
            if (pt->tp_split == TP_REPLICATED && n)
                ZT_TRY(e->state_ops->memset_zero(e->state_ops, stats + at, n * sizeof(double)));
            at += n;
        }
    return ZT_OK;
}

/* Round q's statistics summed (or maxed) over the ranks that split the
 * tensors: the data-parallel ranks that shard them (in place, or under
 * offload through their device copy), then the tensor-parallel ranks that
 * hold their other slices. */
static zt_status reduce_stats(struct shard_engine *e, const struct shard_update_stats *s, int q)
{
    const enum comm_op op =
        e->cfg.optimizer->round_reduce[q] == OPTIMIZER_REDUCE_MAX ? COMM_OP_MAX : COMM_OP_SUM;
    if (e->policy.shard_states)
        ZT_TRY(e->offload ? shard_offload_allreduce(e, s->v[q], s->dev[q], s->n[q], op)
                          : comm_allreduce(e->comm, s->v[q], s->n[q], ZT_F64, op));
    if (!e->tensor)
        return ZT_OK;
    if (comm_rank(e->tensor) != 0)
        ZT_TRY(zero_replicated_stats(e, s->v[q], q));
    return comm_allreduce(e->offload ? comm_host(e->tensor) : e->tensor, s->v[q], s->n[q], ZT_F64,
                          op);
}

static zt_status update_whole_tensors(struct shard_engine *e, void *g, float gscale,
                                      const struct shard_update_bufs *b,
                                      const struct optimizer_hparams *hp, struct piece_pass *pass)
{
    const struct optimizer_ops *opt = e->cfg.optimizer;
    for (int q = 0; q < opt->n_rounds; q++) {
        pass->round = q;
        ZT_TRY(e->state_ops->memset_zero(e->state_ops, pass->stats[q],
                                         stats_total(e, q) * sizeof(double)));
        ZT_TRY(visit_pieces(e, g, gscale, b, pass, hp));
        ZT_TRY(reduce_stats(e, &b->stats, q));
    }
    pass->round = opt->n_rounds;
    return visit_pieces(e, g, gscale, b, pass, hp);
}

/* Round q's statistics: in state memory, and under offload their device
 * copy for the allreduce. */
static zt_status stats_alloc_round(struct shard_engine *e, struct shard_update_stats *s, int q,
                                   size_t n)
{
    ZT_TRY(shard_state_alloc(e, LEDGER_WORKSPACE, n * sizeof(double), "optimizer statistics",
                             (void **)&s->v[q]));
    s->n[q] = n;
    if (!e->offload)
        return ZT_OK;
    zt_status st = device_alloc(e->dev, LEDGER_WORKSPACE, n * sizeof(double),
                                "optimizer statistics (device copy)", (void **)&s->dev[q]);
    if (st != ZT_OK) {
        shard_state_free(e, LEDGER_WORKSPACE, n * sizeof(double), s->v[q]);
        s->n[q] = 0;
    }
    return st;
}

zt_status shard_update_stats_alloc(struct shard_engine *e, struct shard_update_stats *out)
{
    memset(out, 0, sizeof *out);
    const struct optimizer_ops *opt = e->cfg.optimizer;
    for (int q = 0; opt->whole_tensors && q < opt->n_rounds; q++) {
        zt_status st = stats_alloc_round(e, out, q, stats_total(e, q));
        if (st != ZT_OK) {
            shard_update_stats_free(e, out);
            return st;
        }
    }
    return ZT_OK;
}

void shard_update_stats_free(struct shard_engine *e, struct shard_update_stats *s)
{
    for (int q = OPTIMIZER_MAX_ROUNDS - 1; q >= 0; q--) {
        if (!s->n[q])
            continue;
        if (e->offload)
            device_free(e->dev, LEDGER_WORKSPACE, s->n[q] * sizeof(double), s->dev[q]);
        shard_state_free(e, LEDGER_WORKSPACE, s->n[q] * sizeof(double), s->v[q]);
    }
    memset(s, 0, sizeof *s);
}

zt_status shard_update_owned(struct shard_engine *e, void *g, float gscale,
                             struct shard_update_bufs *b, const struct optimizer_hparams *hp)
{
    const struct optimizer_ops *opt = e->cfg.optimizer;
    if (offload_staged(e)) { /* the update reads the gradients where the states are */
        ZT_TRY(shard_offload_pull_grads(e, g, b->host_grads));
        g = b->host_grads;
    }
    if (!opt->whole_tensors)
        return update_elementwise(e, g, gscale, b, hp); /* tmp: not needed */
    /* fp32 gradients are scaled in place once, not once a round. */
    if (!grads_16bit(e))
        for (int u = 0; u < e->part.n_units; u++) {
            const struct owned_range r = owned_range_of(e, u);
            if (r.hi > r.lo && e->part.units[u].trainable)
                ZT_TRY(e->state_ops->scale(e->state_ops, (float *)g + r.grad_off, r.hi - r.lo,
                                           gscale));
        }
    struct piece_pass pass = {0};
    for (int q = 0; q < opt->n_rounds; q++)
        pass.stats[q] = b->stats.v[q];
    return update_whole_tensors(e, g, gscale, b, hp, &pass);
}
