/* worker/model_parts.c — what every model family's implementation shares
 * (see model_parts.h). */
#include "model_parts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/rng.h"
#include "precision.h"
#include "tensor_parallel.h"

/* Elements per block of model_init_normal: large enough to hide the
 * threads' start, small enough to balance a shard of a few blocks. */
#define INIT_BLOCK ((size_t)1 << 16)

void model_init_normal(uint64_t key, size_t lo, size_t hi, double scale, float *dst)
{
    const size_t blocks = hi > lo ? (hi - lo + INIT_BLOCK - 1) / INIT_BLOCK : 0;
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (size_t b = 0; b < blocks; b++) {
        const size_t at = b * INIT_BLOCK, n = hi - lo - at < INIT_BLOCK ? hi - lo - at : INIT_BLOCK;
        rng_normal_fill(key, lo + at, n, scale, dst + at);
    }
}

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
    p->linear = 0;
    p->adapter = -1;
    p->adapts = -1;
    p->tp_split = 0; /* TP_REPLICATED */
    p->tp_parts = 1;
    p->tp_block = 1;
    *offset += p->numel;
}

int model_blocks_checkpointed(int ckpt_every, int n)
{
    int count = 0;
    for (int l = 0; l < n; l++)
        count += model_block_checkpointed(ckpt_every, l);
    return count;
}

int model_stage_checkpointed(int ckpt_every, const struct model_stage *st)
{
    return model_blocks_checkpointed(ckpt_every, st->end_block) -
           model_blocks_checkpointed(ckpt_every, st->first_block);
}

int model_stage_kept_before(int ckpt_every, const struct model_stage *st, int l)
{
    const struct model_stage before = {st->first_block, l, st->first, 0, 1, 0};
    return l - st->first_block - model_stage_checkpointed(ckpt_every, &before);
}

void model_stage_boundaries(struct model *m, void *in, void *out, void *dres)
{
    m->boundary_in = m->stage.first ? NULL : in;
    m->boundary_din = m->stage.first ? NULL : dres;
    m->boundary_out = m->stage.last ? NULL : out;
    m->boundary_dout = m->stage.last ? NULL : dres;
}

void model_stage_boundary_size(struct model *m, size_t elems)
{
    m->boundary_bytes = elems * zt_dtype_size(m->table->compute);
}

/* Whether unit u is an adapter unit (borrowed with its base unit). */
static int is_adapter_unit(const struct param_table *t, int u)
{
    return t->lora.r > 0 && u >= t->lora.n_base_units;
}

zt_status model_plan_walk(struct model *m, const struct model_unit_hooks *h, enum model_pass pass)
{
    int order[MODEL_MAX_UNITS + 4], embedding_grads = 0;
    const int n = param_table_unit_order(m->table, &m->stage, pass, order, MODEL_MAX_UNITS + 4);
    const int backward = pass == MODEL_PASS_BACKWARD;
    const void *w;
    float *g;
    ZT_ASSERT(n <= MODEL_MAX_UNITS + 4);
    ZT_TRY(h->pass_begin(h->ctx, pass));
    for (int i = 0; i < n; i++) {
        const int u = order[i];
        if (is_adapter_unit(m->table, u))
            continue; /* borrowed with its base unit */
        ZT_TRY(model_unit_acquire(m, h, u, &w));
        if (backward)
            ZT_TRY(model_unit_grads_acquire(m, h, u, &g));
        embedding_grads |= backward && u == 0;
        ZT_TRY(model_unit_release(m, h, u));
        if (backward && u != 0)
            ZT_TRY(model_unit_grads_done(m, h, u));
    }
    if (backward && !embedding_grads && m->stage.first)
        ZT_TRY(model_unit_grads_acquire(m, h, 0, &g));
    if (backward && (embedding_grads || m->stage.first))
        ZT_TRY(model_unit_grads_done(m, h, 0));
    ZT_TRY(h->pass_end(h->ctx, pass));
    return ZT_OK;
}

/* host[n] (fp32) into device memory dst as type t: narrowed on the host
 * into typed[n] first under 16 bits. */
static zt_status model_copy_typed(const struct device *dev, enum zt_dtype t, void *dst,
                                  const float *host, void *typed, size_t n)
{
    if (t == ZT_F32)
        return dev->ops->copy_from_host(dev, dst, host, n * sizeof(float));
    precision_from_f32(t, host, typed, n);
    return dev->ops->copy_from_host(dev, dst, typed, n * zt_dtype_size(t));
}

/* Column col of rows of m's compute type starting at p. */
static void *column_of(const struct model *m, void *p, int col)
{
    return (char *)p + (size_t)col * zt_dtype_size(model_act(m));
}

/* ---- LoRA adapters in the passes ---------------------------------------- */

/* LoRA dropout's buffers (model_adapters), for the widest adapted input. */
static zt_status dropout_buffers(struct model *m)
{
    struct model_adapters *a = m->lora;
    const struct param_table *t = m->table;
    size_t widest = 0;
    for (int k = 0; k < t->lora.n_base_tensors; k++)
        if (t->tensors[k].adapter >= 0 && (size_t)t->tensors[k].cols > widest)
            widest = (size_t)t->tensors[k].cols;
    const size_t n = (size_t)m->B * (size_t)m->T * widest;
    a->drop_bytes = n * zt_dtype_size(model_act(m));
    void **dev[3] = {&a->mask, &a->dropped, &a->ddropped};
    static const char *const what[3] = {"LoRA dropout mask", "LoRA dropped input",
                                        "LoRA dropped input gradient"};
    for (int i = 0; i < 3; i++) {
        void *p = NULL;
        ZT_TRY(device_alloc(a->dev, LEDGER_WORKSPACE, a->drop_bytes, what[i], &p));
        *dev[i] = p;
    }
    if (m->plan)
        return ZT_OK;
    a->mask_host = malloc(n * sizeof(float));
    a->host_typed = model_act(m) == ZT_F32 ? NULL : malloc(a->drop_bytes);
    if (!a->mask_host || (model_act(m) != ZT_F32 && !a->host_typed))
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate LoRA dropout's mask");
    return ZT_OK;
}

/* Which factor of base tensor p's adapters every tensor-parallel rank
 * holds whole (cut_as_base, lora.c) while its weight gradient is only this
 * rank's part, to be summed over the ranks: a column-parallel base's A,
 * whose gradient du^T x has du = dout B summed over the output slices the
 * ranks hold, and a row-parallel base's B, whose gradient dout^T u has
 * u = A x summed over the input slices. The cut factor's gradient is
 * whole where it is (B's rows: dout's slice times the whole u; A's
 * columns: the whole du times x's slice). -1: none (a whole model). */
static int partial_factor(const struct param_table *t, const struct param_tensor *p)
{
    if (param_table_tp_size(t) == 1 || p->adapter < 0)
        return -1;
    return p->tp_split == TP_ROWS ? p->adapter : p->tp_split == TP_COLS ? p->adapter + 1 : -1;
}

/* The fp32 buffer such a gradient is computed in before the sum. */
static zt_status partial_grad_buffer(struct model *m)
{
    struct model_adapters *a = m->lora;
    const struct param_table *t = m->table;
    size_t widest = 0;
    for (int k = 0; k < t->lora.n_base_tensors; k++) {
        const int f = partial_factor(t, &t->tensors[k]);
        if (f >= 0 && t->tensors[f].numel > widest)
            widest = t->tensors[f].numel;
    }
    if (!widest)
        return ZT_OK;
    void *p = NULL;
    ZT_TRY(device_alloc(a->dev, LEDGER_WORKSPACE, widest * sizeof(float),
                        "LoRA gradient summed over tensor-parallel ranks", &p));
    a->partial = p;
    a->partial_bytes = widest * sizeof(float);
    return ZT_OK;
}

zt_status model_adapters_create(struct model *m, const struct compute_backend *be)
{
    const struct param_table *t = m->table;
    m->lora = NULL;
    if (t->lora.r == 0)
        return ZT_OK;
    ZT_ASSERT(param_table_adapter_unit(t, 0) < 0); /* the embedding's grads outlive the pass */
    struct model_adapters *a = calloc(1, sizeof *a);
    if (a) {
        a->w = calloc((size_t)t->n_units, sizeof *a->w);
        a->g = calloc((size_t)t->n_units, sizeof *a->g);
    }
    if (!a || !a->w || !a->g) {
        if (a) {
            free(a->w);
            free(a->g);
        }
        free(a);
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the LoRA adapters' state");
    }
    a->dev = &be->dev;
    a->ops = be->ops;
    a->scratch_bytes =
        2 * (size_t)m->B * (size_t)m->T * (size_t)t->lora.r * zt_dtype_size(model_act(m));
    void *p = NULL;
    zt_status s = device_alloc(a->dev, LEDGER_WORKSPACE, a->scratch_bytes, "LoRA scratch", &p);
    if (s != ZT_OK) {
        free(a->w);
        free(a->g);
        free(a);
        return s;
    }
    a->scratch = p;
    m->lora = a;
    ZT_TRY(partial_grad_buffer(m));
    return t->lora.dropout > 0.0f ? dropout_buffers(m) : ZT_OK;
}

void model_adapters_destroy(struct model *m)
{
    struct model_adapters *a = m->lora;
    if (!a)
        return;
    device_free(a->dev, LEDGER_WORKSPACE, a->scratch_bytes, a->scratch);
    void *drop[3] = {a->ddropped, a->dropped, a->mask};
    for (int i = 0; i < 3 && a->drop_bytes; i++) /* newest first; a plan's are NULL but counted */
        if (drop[i] || m->plan)
            device_free(a->dev, LEDGER_WORKSPACE, a->drop_bytes, drop[i]);
    if (a->partial_bytes)
        device_free(a->dev, LEDGER_WORKSPACE, a->partial_bytes, a->partial);
    free(a->mask_host);
    free(a->host_typed);
    free(a->w);
    free(a->g);
    free(a);
    m->lora = NULL;
}

static int adapter_of(const struct model *m, int u)
{
    return m->lora ? param_table_adapter_unit(m->table, u) : -1;
}

zt_status model_unit_acquire(struct model *m, const struct model_unit_hooks *h, int u,
                             const void **params)
{
    ZT_TRY(h->params_acquire(h->ctx, u, params));
    const int a = adapter_of(m, u);
    return a < 0 ? ZT_OK : h->params_acquire(h->ctx, a, &m->lora->w[u]);
}

zt_status model_unit_release(struct model *m, const struct model_unit_hooks *h, int u)
{
    ZT_TRY(h->params_release(h->ctx, u));
    const int a = adapter_of(m, u);
    if (a < 0)
        return ZT_OK;
    m->lora->w[u] = NULL;
    return h->params_release(h->ctx, a);
}

zt_status model_unit_grads_acquire(struct model *m, const struct model_unit_hooks *h, int u,
                                   float **grads)
{
    ZT_TRY(h->grads_acquire(h->ctx, u, grads));
    const int a = adapter_of(m, u);
    return a < 0 ? ZT_OK : h->grads_acquire(h->ctx, a, &m->lora->g[u]);
}

zt_status model_unit_grads_done(struct model *m, const struct model_unit_hooks *h, int u)
{
    ZT_TRY(h->grads_done(h->ctx, u));
    const int a = adapter_of(m, u);
    if (a < 0)
        return ZT_OK;
    m->lora->g[u] = NULL;
    return h->grads_done(h->ctx, a);
}

/* Row width of the fused outputs of tensors k .. k+n-1. */
static int fused_width(const struct param_table *t, int k, int n)
{
    int width = 0;
    for (int i = 0; i < n; i++)
        width += t->tensors[k + i].rows;
    return width;
}

/* Whether this pass drops the adapters' inputs (training forwards and
 * their backward, lora_dropout > 0). */
static int dropping(const struct model *m)
{
    return m->lora && m->training && m->table->lora.dropout > 0.0f;
}

/* Adapted tensor k's dropout mask for the micro batch, 0 or 1 / (1 - p)
 * per element of its input [N = B*T, C], in a->mask: element (t, c) of
 * batch row b of the whole model's input [N, C_whole] is counter
 * t*C_whole + c of the generator keyed by the row's global sample index
 * and k, so a layout and a recompute draw the same mask; a row-parallel
 * slice, whose input is columns [rank C, rank C + C) of that, draws
 * their counters. Then a->dropped = inp * mask. */
static zt_status drop_input(struct model *m, int k, const void *inp, int N, int C)
{
    struct model_adapters *a = m->lora;
    const struct param_table *t = m->table;
    const double p = t->lora.dropout;
    const float keep = (float)(1.0 / (1.0 - p));
    const uint64_t base = rng_key(m->seed, "lora_dropout");
    const size_t whole_cols = (size_t)param_table_whole(t)->tensors[k].cols;
    const size_t col0 =
        t->tensors[k].tp_split == TP_COLS ? (size_t)param_table_tp_rank(t) * (size_t)C : 0;
    const size_t n = (size_t)N * C;
    ZT_ASSERT(N == m->B * m->T && n * zt_dtype_size(model_act(m)) <= a->drop_bytes);
    for (int b = 0; b < m->B; b++) {
        const uint64_t row = m->row_ids ? m->row_ids[b] : (uint64_t)b;
        const uint64_t key = rng_u64(rng_u64(base, row), (uint64_t)k);
        float *dst = a->mask_host + (size_t)b * (size_t)m->T * (size_t)C;
        for (size_t pos = 0; pos < (size_t)m->T; pos++)
            for (size_t c = 0; c < (size_t)C; c++)
                dst[pos * C + c] = rng_uniform(key, pos * whole_cols + col0 + c) < p ? 0.0f : keep;
    }
    ZT_TRY(model_copy_typed(a->dev, model_act(m), a->mask, a->mask_host, a->host_typed, n));
    return a->ops->mul_forward(a->ops, model_act(m), a->dropped, inp, a->mask, N * C);
}

zt_status model_lora_forward(struct model *m, int k, int n, void *out, const void *inp, int N)
{
    if (!m->lora)
        return ZT_OK;
    const struct param_table *t = m->table;
    const struct model_adapters *a = m->lora;
    const int ldo = fused_width(t, k, n);
    const double t0 = m->profile ? zt_now_seconds() : 0.0;
    for (int i = 0, col = 0; i < n; col += t->tensors[k + i].rows, i++) {
        const struct param_tensor *p = &t->tensors[k + i];
        if (p->adapter < 0)
            continue;
        const void *w = a->w[p->unit], *x = inp;
        ZT_ASSERT(w);
        if (dropping(m)) {
            ZT_TRY(drop_input(m, k + i, inp, N, p->cols));
            x = a->dropped;
        }
        ZT_TRY(a->ops->lora_forward(a->ops, model_act(m), column_of(m, out, col), ldo, a->scratch,
                                    x, model_param_in(t, p->adapter, w),
                                    model_param_in(t, p->adapter + 1, w), t->lora.scale, N, p->cols,
                                    t->lora.r, p->rows));
    }
    if (m->profile)
        m->profile->seconds[MODEL_PROF_MATMUL] += zt_now_seconds() - t0;
    return ZT_OK;
}

zt_status model_lora_backward(struct model *m, const struct model_unit_hooks *h, int k, int n,
                              void *dinp, const void *dout, const void *inp, int N)
{
    if (!m->lora)
        return ZT_OK;
    const struct param_table *t = m->table;
    const struct model_adapters *a = m->lora;
    const int ldo = fused_width(t, k, n);
    const double t0 = m->profile ? zt_now_seconds() : 0.0;
    for (int i = 0, col = 0; i < n; col += t->tensors[k + i].rows, i++) {
        const struct param_tensor *p = &t->tensors[k + i];
        if (p->adapter < 0)
            continue;
        const void *w = a->w[p->unit], *x = inp;
        float *g = a->g[p->unit];
        void *dx = dinp;
        ZT_ASSERT(w && g);
        const size_t nx = (size_t)N * p->cols;
        if (dropping(m)) { /* the forward's mask again; dx goes through it below */
            ZT_TRY(drop_input(m, k + i, inp, N, p->cols));
            ZT_TRY(a->dev->ops->memset_zero(a->dev, a->ddropped, nx * zt_dtype_size(model_act(m))));
            x = a->dropped;
            dx = dinp ? a->ddropped : NULL;
        }
        float *grad[2] = {model_grad_in(t, p->adapter, g), model_grad_in(t, p->adapter + 1, g)};
        const int partial = partial_factor(t, p);
        float *whole_grad = NULL;
        if (partial >= 0) { /* this rank's part first, then the sum is added */
            whole_grad = grad[partial - p->adapter];
            grad[partial - p->adapter] = a->partial;
            ZT_TRY(
                a->ops->memset_zero(a->ops, a->partial, t->tensors[partial].numel * sizeof(float)));
        }
        ZT_TRY(a->ops->lora_backward(
            a->ops, model_act(m), dx, grad[0], grad[1], a->scratch, column_of(m, (void *)dout, col),
            ldo, x, model_param_in(t, p->adapter, w), model_param_in(t, p->adapter + 1, w),
            t->lora.scale, N, p->cols, t->lora.r, p->rows));
        if (partial >= 0) {
            const size_t np = t->tensors[partial].numel;
            ZT_ASSERT(h->tp_allreduce); /* a partial factor exists under T > 1 only */
            ZT_TRY(h->tp_allreduce(h->ctx, ZT_F32, a->partial, np, MODEL_REDUCE_SUM));
            ZT_TRY(a->ops->residual_forward(a->ops, ZT_F32, whole_grad, whole_grad, a->partial,
                                            (int)np));
        }
        if (dx && dx != dinp)
            ZT_TRY(a->ops->mul_backward(a->ops, model_act(m), dinp, a->mask, a->ddropped, (int)nx));
    }
    if (m->profile)
        m->profile->seconds[MODEL_PROF_MATMUL] += zt_now_seconds() - t0;
    return ZT_OK;
}

zt_status model_read_mean_loss(struct model *m, const struct device *dev, const float *dev_losses,
                               const int32_t *targets, int n)
{
    float *losses = malloc((size_t)n * sizeof(float));
    if (!losses)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the loss readback");
    if (m->probe) {
        zt_status probed = m->probe->loss(m->probe->ctx, dev_losses, (size_t)n);
        if (probed != ZT_OK) {
            free(losses);
            return probed;
        }
    }
    zt_status s = dev->ops->copy_to_host(dev, losses, dev_losses, (size_t)n * sizeof(float));
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += losses[i];
    free(losses);
    ZT_TRY(s);
    int counted = 0;
    for (int i = 0; i < n; i++)
        counted += targets[i] >= 0;
    m->loss_sum = sum;
    m->n_counted = counted;
    m->mean_loss = counted > 0 ? (float)(sum / counted) : 0.0f;
    return ZT_OK;
}

/* ---- NEFTune ------------------------------------------------------------- */

zt_status model_neftune_enable(struct model *m, const struct compute_backend *be, double alpha,
                               uint64_t seed)
{
    ZT_ASSERT(!m->neftune && alpha > 0.0);
    struct model_neftune *n = calloc(1, sizeof *n);
    const int C = m->table->tensors[0].cols; /* the token embedding's width */
    const size_t count = (size_t)m->B * (size_t)m->T * (size_t)C;
    const size_t bytes = count * zt_dtype_size(model_act(m));
    if (n && !m->plan) {
        n->host = malloc(count * sizeof(float));
        n->host_typed = model_act(m) == ZT_F32 ? NULL : malloc(bytes);
    }
    if (!n || (!m->plan && (!n->host || (model_act(m) != ZT_F32 && !n->host_typed)))) {
        if (n) {
            free(n->host);
            free(n->host_typed);
        }
        free(n);
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate NEFTune's noise");
    }
    void *p = NULL;
    zt_status s = device_alloc(&be->dev, LEDGER_WORKSPACE, bytes, "NEFTune noise", &p);
    if (s != ZT_OK) {
        free(n->host);
        free(n->host_typed);
        free(n);
        return s;
    }
    n->alpha = alpha;
    n->key = rng_key(seed, "neftune");
    n->dev = p;
    n->bytes = bytes;
    n->device = &be->dev;
    n->ops = be->ops;
    m->neftune = n;
    return ZT_OK;
}

void model_neftune_free(struct model *m)
{
    struct model_neftune *n = m->neftune;
    if (!n)
        return;
    device_free(n->device, LEDGER_WORKSPACE, n->bytes, n->dev);
    free(n->host);
    free(n->host_typed);
    free(n);
    m->neftune = NULL;
}

zt_status model_neftune_apply(struct model *m, void *x, int C)
{
    const struct model_neftune *n = m->neftune;
    if (!n || !m->training)
        return ZT_OK;
    const int T = m->T;
    const double magnitude = n->alpha / sqrt((double)T * C);
    for (int b = 0; b < m->B; b++) {
        const uint64_t row = m->row_ids ? m->row_ids[b] : (uint64_t)b;
        const uint64_t key = rng_u64(n->key, row);
        float *dst = n->host + (size_t)b * T * C;
        for (size_t i = 0; i < (size_t)T * C; i++)
            dst[i] = (float)(magnitude * (2.0 * rng_uniform(key, i) - 1.0));
    }
    ZT_TRY(model_copy_typed(n->device, model_act(m), n->dev, n->host, n->host_typed,
                            (size_t)m->B * T * C));
    return n->ops->residual_forward(n->ops, model_act(m), x, x, n->dev, m->B * T * C);
}
