/* coordinator/nonfinite.c — see nonfinite.h.
 *
 * The checks wrap what the re-run borrows: the engine's unit hooks (a
 * parameter unit when the forward acquires it, a gradient unit when its
 * backward is done), the models' probes and the engine's reduced probe.
 * Each check first computes the key it would have; one that cannot come
 * before what this rank already found is not scanned. A scan copies the
 * values to the host in blocks (device memory need not be host memory).
 */
#include "nonfinite.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/atomic_file.h"
#include "../common/fileio.h"
#include "../common/half.h"
#include "../common/json.h"
#include "../formats/hf_weights.h"
#include "pipeline.h"

/* The key's fields, most significant first: phase, micro batch, position
 * in the pass, order of the check; 3 + 12 + 12 + 20 bits, exact in a
 * double. */
#define KEY_MICRO_MAX 4095
#define KEY_POS_MAX   4095
#define KEY_SEQ_MAX   ((1 << 20) - 1)
#define KEY_NONE      DBL_MAX
#define SCAN_BLOCK    65536 /* floats copied to the host at a time */

static const char *const phase_names[NONFINITE_PHASES] = {
    [NONFINITE_PARAMETER] = "parameter",
    [NONFINITE_FORWARD] = "forward activation",
    [NONFINITE_LOSS] = "loss",
    [NONFINITE_BACKWARD] = "backward gradient",
    [NONFINITE_REDUCED] = "gradient after reduction",
};

const char *nonfinite_phase_name(enum nonfinite_phase p)
{
    ZT_ASSERT((int)p >= 0 && p < NONFINITE_PHASES);
    return phase_names[p];
}

/* Statistics of a tensor: its element count, how many are NaN, +inf and
 * -inf, and of its finite values the least, greatest, mean and largest
 * magnitude. */
struct stats {
    size_t numel, nan, pinf, ninf, finite;
    double min, max, sum, abs_max;
};

static void stats_init(struct stats *st)
{
    memset(st, 0, sizeof *st);
    st->min = INFINITY;
    st->max = -INFINITY;
}

static void stats_add(struct stats *st, const float *v, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++) {
        const double x = (double)v[i] * scale;
        st->numel++;
        if (isnan(x)) {
            st->nan++;
        } else if (isinf(x)) {
            *(x > 0 ? &st->pinf : &st->ninf) += 1;
        } else {
            st->finite++;
            st->sum += x;
            st->min = x < st->min ? x : st->min;
            st->max = x > st->max ? x : st->max;
            st->abs_max = fabs(x) > st->abs_max ? fabs(x) : st->abs_max;
        }
    }
}

static int stats_nonfinite(const struct stats *st)
{
    return st->nan + st->pinf + st->ninf > 0;
}

/* One rank's checks during the re-run. */
struct check {
    struct run_session *s;
    const struct param_table *t;
    long step; /* 1-based */
    enum model_pass pass;
    struct model_unit_hooks inner; /* the engine's */
    float **grads;                 /* [n_units]: what grads_acquire lent */
    int *pos[2];                   /* [n_units]: position in the forward's, backward's order */
    float *host;                   /* SCAN_BLOCK floats */
    void *raw;                     /* SCAN_BLOCK elements of the working precision */
    unsigned long seq;
    /* The first non-finite value this rank met. */
    double best;
    int micro;
    char what[256];
    struct stats stats;
};

static double key_of(enum nonfinite_phase phase, int micro, int pos, unsigned long seq)
{
    const double m = micro < 0 ? 0 : micro > KEY_MICRO_MAX ? KEY_MICRO_MAX : micro;
    const double p = pos < 0 ? 0 : pos > KEY_POS_MAX ? KEY_POS_MAX : pos;
    const double q = seq > KEY_SEQ_MAX ? KEY_SEQ_MAX : (double)seq;
    return ((((double)phase * 4096.0 + m) * 4096.0 + p) * 1048576.0) + q;
}

static enum nonfinite_phase phase_of_key(double key)
{
    return (enum nonfinite_phase)(int)(key / (4096.0 * 4096.0 * 1048576.0));
}

static int micro_of_key(double key)
{
    return (int)fmod(floor(key / (4096.0 * 1048576.0)), 4096.0);
}

/* The micro batch being computed (train.c and the pipeline set the
 * ledger's). */
static int current_micro(const struct check *c)
{
    return c->s->ledger.phase.micro_step;
}

/* The next check's key, or KEY_NONE when it cannot come first. */
static double next_key(struct check *c, enum nonfinite_phase phase, int micro, int pos)
{
    const double key = key_of(phase, micro, pos, c->seq++);
    return key < c->best ? key : KEY_NONE;
}

/* Statistics of dev[n] (fp32 in the backend's memory), times scale. */
static zt_status scan_f32(struct check *c, const float *dev, size_t n, double scale,
                          struct stats *st)
{
    const struct device *d = &c->s->compute.dev;
    stats_init(st);
    for (size_t i = 0; i < n; i += SCAN_BLOCK) {
        const size_t k = n - i < SCAN_BLOCK ? n - i : SCAN_BLOCK;
        ZT_TRY(d->ops->copy_to_host(d, c->host, dev + i, k * sizeof(float)));
        stats_add(st, c->host, k, scale);
    }
    return ZT_OK;
}

/* The same for g[n] in the working precision t. */
static zt_status scan_working(struct check *c, const void *g, size_t n, enum zt_dtype t,
                              double scale, struct stats *st)
{
    if (t == ZT_F32)
        return scan_f32(c, g, n, scale, st);
    const struct device *d = &c->s->compute.dev;
    const size_t esz = zt_dtype_size(t);
    stats_init(st);
    for (size_t i = 0; i < n; i += SCAN_BLOCK) {
        const size_t k = n - i < SCAN_BLOCK ? n - i : SCAN_BLOCK;
        ZT_TRY(d->ops->copy_to_host(d, c->raw, (const char *)g + i * esz, k * esz));
        const uint16_t *h = c->raw;
        for (size_t j = 0; j < k; j++)
            c->host[j] = t == ZT_BF16 ? zt_bf16_to_f32(h[j]) : zt_f16_to_f32(h[j]);
        stats_add(st, c->host, k, scale);
    }
    return ZT_OK;
}

/* Records a non-finite value found under `key` (which beats c->best). */
static void record(struct check *c, double key, int micro, const struct stats *st, const char *what)
{
    c->best = key;
    c->micro = micro;
    c->stats = *st;
    snprintf(c->what, sizeof c->what, "%s", what);
}

/* Our tensor k as Hugging Face names it, else as the table does. */
static void tensor_name(const struct param_table *t, int k, char *buf, size_t n)
{
    if (!hf_weights_tensor_name(t, k, buf, n))
        snprintf(buf, n, "%s", t->tensors[k].name);
}

/* The first tensor of unit u with a non-finite value among its elements
 * [first, first + n), whose values are at g (fp32 when t is ZT_F32 and
 * `view`, else the working precision t), scaled by scale. */
static zt_status scan_unit(struct check *c, double key, int micro, int u, size_t first,
                           const void *g, size_t n, enum zt_dtype t, double scale)
{
    const struct param_table *tab = c->t;
    const size_t base = tab->unit_offset[u], esz = zt_dtype_size(t);
    for (int k = 0; k < tab->n_tensors; k++) {
        const struct param_tensor *pt = &tab->tensors[k];
        if (pt->unit != u)
            continue;
        size_t a = pt->offset - base, b = a + pt->numel;
        a = a > first ? a : first;
        b = b < first + n ? b : first + n;
        if (a >= b)
            continue;
        struct stats st;
        ZT_TRY(scan_working(c, (const char *)g + (a - first) * esz, b - a, t, scale, &st));
        if (!stats_nonfinite(&st))
            continue;
        char name[160], what[256];
        tensor_name(tab, k, name, sizeof name);
        snprintf(what, sizeof what, "%s%s", name, b - a < pt->numel ? " (this rank's share)" : "");
        record(c, key, micro, &st, what);
        return ZT_OK;
    }
    return ZT_OK;
}

/* ---- the hooks the re-run borrows through ---------------------------- */

static zt_status check_pass_begin(void *ctx, enum model_pass pass)
{
    struct check *c = ctx;
    c->pass = pass;
    return c->inner.pass_begin(c->inner.ctx, pass);
}

static zt_status check_pass_end(void *ctx, enum model_pass pass)
{
    struct check *c = ctx;
    return c->inner.pass_end(c->inner.ctx, pass);
}

static zt_status check_params_acquire(void *ctx, int unit, const void **params)
{
    struct check *c = ctx;
    ZT_TRY(c->inner.params_acquire(c->inner.ctx, unit, params));
    if (c->pass != MODEL_PASS_FORWARD || !*params)
        return ZT_OK;
    const int micro = current_micro(c);
    const double key = next_key(c, NONFINITE_PARAMETER, micro, c->pos[0][unit]);
    if (key == KEY_NONE)
        return ZT_OK;
    return scan_unit(c, key, micro, unit, 0, *params, param_table_unit_size(c->t, unit),
                     c->t->compute, 1.0);
}

static zt_status check_params_release(void *ctx, int unit)
{
    struct check *c = ctx;
    return c->inner.params_release(c->inner.ctx, unit);
}

static zt_status check_grads_acquire(void *ctx, int unit, float **grads)
{
    struct check *c = ctx;
    ZT_TRY(c->inner.grads_acquire(c->inner.ctx, unit, grads));
    c->grads[unit] = *grads;
    return ZT_OK;
}

/* The backward's gradients are scaled by the loss scale and the world
 * (coordinator/train.c): the report shows them as the backward left them. */
static zt_status check_grads_done(void *ctx, int unit)
{
    struct check *c = ctx;
    const float *g = c->grads[unit];
    c->grads[unit] = NULL;
    const int micro = current_micro(c);
    const double key = g ? next_key(c, NONFINITE_BACKWARD, micro, c->pos[1][unit]) : KEY_NONE;
    if (key != KEY_NONE)
        ZT_TRY(
            scan_unit(c, key, micro, unit, 0, g, param_table_unit_size(c->t, unit), ZT_F32, 1.0));
    return c->inner.grads_done(c->inner.ctx, unit);
}

static zt_status check_tp_allreduce(void *ctx, enum zt_dtype t, void *buf, size_t n,
                                    enum model_reduce op)
{
    struct check *c = ctx;
    return c->inner.tp_allreduce(c->inner.ctx, t, buf, n, op);
}

static zt_status check_tp_allgather(void *ctx, enum zt_dtype t, const void *in, void *out, size_t n)
{
    struct check *c = ctx;
    return c->inner.tp_allgather(c->inner.ctx, t, in, out, n);
}

static zt_status check_tp_reduce_scatter(void *ctx, enum zt_dtype t, const void *in, void *out,
                                         size_t n)
{
    struct check *c = ctx;
    return c->inner.tp_reduce_scatter(c->inner.ctx, t, in, out, n);
}

static zt_status check_cp_ring_start(void *ctx, enum zt_dtype t, const void *send, void *recv,
                                     size_t n, void **pending)
{
    struct check *c = ctx;
    return c->inner.cp_ring_start(c->inner.ctx, t, send, recv, n, pending);
}

static zt_status check_cp_ring_wait(void *ctx, void *pending)
{
    struct check *c = ctx;
    return c->inner.cp_ring_wait(c->inner.ctx, pending);
}

/* ---- the models' probes and the engine's ------------------------------ */

/* What a forward op's output is called: "<tensor's module> <what>" for a
 * layer with a weight, "<block> <what>" for another op of a block, else
 * `what` alone. */
static void activation_name(const struct param_table *t, int block, int tensor, const char *what,
                            char *buf, size_t n)
{
    char module[160];
    if (tensor >= 0) {
        tensor_name(t, tensor, module, sizeof module);
        const size_t len = strlen(module);
        if (len > 7 && strcmp(module + len - 7, ".weight") == 0)
            module[len - 7] = '\0';
        snprintf(buf, n, "%s %s", module, what);
    } else if (block >= 0 && block < param_table_blocks(t)) {
        if (!hf_weights_block_name(t, block, module, sizeof module))
            snprintf(module, sizeof module, "block %d", block);
        snprintf(buf, n, "%s %s", module, what);
    } else {
        snprintf(buf, n, "%s", what);
    }
}

/* A test build's hook sees the output first, in the re-run as in the step. */
static void fault_forward(struct run_session *s, int block, const char *what, enum zt_dtype t,
                          void *buf, size_t n)
{
    const enum ledger_phase_kind k = s->ledger.phase.kind;
    if (s->faults && s->faults->forward_output &&
        (k == LEDGER_PHASE_FORWARD || k == LEDGER_PHASE_EVALUATION))
        s->faults->forward_output(s->faults->arg, s->rank, s->ledger.phase.step,
                                  k == LEDGER_PHASE_EVALUATION ? -1 : s->ledger.phase.micro_step,
                                  block, what, t, buf, n);
}

static zt_status check_forward(void *ctx, int block, int tensor, const char *what, enum zt_dtype t,
                               void *buf, size_t n)
{
    struct check *c = ctx;
    fault_forward(c->s, block, what, t, buf, n);
    if (c->pass != MODEL_PASS_FORWARD) /* a checkpointed block recomputed */
        return ZT_OK;
    const int micro = current_micro(c);
    const double key = next_key(c, NONFINITE_FORWARD, micro, block + 1);
    if (key == KEY_NONE)
        return ZT_OK;
    struct stats st;
    ZT_TRY(scan_working(c, buf, n, t, 1.0, &st));
    if (stats_nonfinite(&st)) {
        char name[256];
        activation_name(c->t, block, tensor, what, name, sizeof name);
        record(c, key, micro, &st, name);
    }
    return ZT_OK;
}

static zt_status check_loss(void *ctx, const float *losses, size_t n)
{
    struct check *c = ctx;
    const int micro = current_micro(c);
    const double key = next_key(c, NONFINITE_LOSS, micro, 0);
    if (key == KEY_NONE)
        return ZT_OK;
    struct stats st;
    ZT_TRY(scan_f32(c, losses, n, 1.0, &st));
    if (stats_nonfinite(&st))
        record(c, key, micro, &st, "cross-entropy loss per token");
    return ZT_OK;
}

static zt_status check_reduced(void *ctx, int unit, size_t first, const void *g, size_t n,
                               double scale)
{
    struct check *c = ctx;
    const double key = next_key(c, NONFINITE_REDUCED, 0, unit);
    if (key == KEY_NONE)
        return ZT_OK;
    return scan_unit(c, key, -1, unit, first, g, n, c->s->engine.grad_type, scale);
}

static zt_status fault_only_forward(void *ctx, int block, int tensor, const char *what,
                                    enum zt_dtype t, void *buf, size_t n)
{
    (void)tensor;
    fault_forward(ctx, block, what, t, buf, n);
    return ZT_OK;
}

static zt_status fault_only_loss(void *ctx, const float *losses, size_t n)
{
    (void)ctx;
    (void)losses;
    (void)n;
    return ZT_OK;
}

/* Sets p as the probe of every model instance the session trains with. */
static void set_probe(struct run_session *s, struct model_probe *p)
{
    s->model->probe = p;
    for (int j = 0; s->pipe && j < s->pipe->chunks; j++)
        for (int k = 0; k < s->pipe->chunk[j].n_slots; k++)
            s->pipe->chunk[j].slots[k]->probe = p;
}

void nonfinite_fault_probe_attach(struct run_session *s)
{
    if (!s->faults || !s->faults->forward_output)
        return;
    s->fault_probe =
        (struct model_probe){.ctx = s, .forward = fault_only_forward, .loss = fault_only_loss};
    set_probe(s, &s->fault_probe);
}

/* ---- the re-run -------------------------------------------------------- */

static void check_free(struct check *c)
{
    free(c->grads);
    free(c->pos[0]);
    free(c->pos[1]);
    free(c->host);
    free(c->raw);
}

/* Each unit's position in the whole model's pass (its first acquisition):
 * the same on every pipeline stage, so that stages compare. */
static void unit_positions(const struct run_session *s, enum model_pass pass, int *pos)
{
    const struct param_table *t = s->engine.table;
    int order[2 * MODEL_MAX_UNITS];
    const int n = param_table_unit_order(t, NULL, pass, order, 2 * MODEL_MAX_UNITS);
    for (int u = 0; u < t->n_units; u++)
        pos[u] = KEY_POS_MAX;
    for (int i = n - 1; i >= 0; i--)
        pos[order[i]] = i;
}

static zt_status check_init(struct check *c, struct run_session *s, long step)
{
    memset(c, 0, sizeof *c);
    c->s = s;
    c->t = s->engine.table;
    c->step = step + 1;
    c->best = KEY_NONE;
    c->micro = -1;
    const size_t u = (size_t)c->t->n_units;
    c->grads = calloc(u, sizeof *c->grads);
    c->pos[0] = malloc(u * sizeof *c->pos[0]);
    c->pos[1] = malloc(u * sizeof *c->pos[1]);
    c->host = malloc(SCAN_BLOCK * sizeof(float));
    c->raw = malloc(SCAN_BLOCK * sizeof(float));
    if (!c->grads || !c->pos[0] || !c->pos[1] || !c->host || !c->raw) {
        check_free(c);
        return zt_error_set(ZT_ERR_NOMEM, "step %ld: cannot allocate the non-finite checks",
                            step + 1);
    }
    unit_positions(s, MODEL_PASS_FORWARD, c->pos[0]);
    unit_positions(s, MODEL_PASS_BACKWARD, c->pos[1]);
    return ZT_OK;
}

/* Runs the step again with c's checks in place of the hooks and probes. */
static zt_status rerun_checked(struct check *c, long step,
                               zt_status (*rerun)(struct run_session *s, long step, void *arg),
                               void *arg)
{
    struct run_session *s = c->s;
    struct model_unit_hooks *h = &s->engine.hooks;
    struct model_probe *was = s->model->probe;
    c->inner = *h;
    *h = (struct model_unit_hooks){
        .ctx = c,
        .pass_begin = check_pass_begin,
        .pass_end = check_pass_end,
        .params_acquire = check_params_acquire,
        .params_release = check_params_release,
        .grads_acquire = check_grads_acquire,
        .grads_done = check_grads_done,
        .tp_allreduce = c->inner.tp_allreduce ? check_tp_allreduce : NULL,
        .tp_allgather = c->inner.tp_allgather ? check_tp_allgather : NULL,
        .tp_reduce_scatter = c->inner.tp_reduce_scatter ? check_tp_reduce_scatter : NULL,
        .cp_ring_start = c->inner.cp_ring_start ? check_cp_ring_start : NULL,
        .cp_ring_wait = c->inner.cp_ring_wait ? check_cp_ring_wait : NULL,
    };
    struct model_probe probe = {.ctx = c, .forward = check_forward, .loss = check_loss};
    const struct shard_reduced_probe reduced = {.ctx = c, .unit = check_reduced};
    set_probe(s, &probe);
    s->engine.reduced_probe = &reduced;
    zt_status st = rerun(s, step, arg);
    s->engine.reduced_probe = NULL;
    set_probe(s, was);
    *h = c->inner;
    return st;
}

/* ---- the report -------------------------------------------------------- */

static void put_stats(struct json_text *j, const struct stats *st)
{
    json_text_printf(j,
                     "{\"numel\": %zu, \"nan\": %zu, \"posinf\": %zu, \"neginf\": %zu, "
                     "\"finite\": %zu, \"min\": ",
                     st->numel, st->nan, st->pinf, st->ninf, st->finite);
    const int any = st->finite > 0;
    json_text_real(j, any ? st->min : NAN);
    json_text_puts(j, ", \"max\": ");
    json_text_real(j, any ? st->max : NAN);
    json_text_puts(j, ", \"mean\": ");
    json_text_real(j, any ? st->sum / (double)st->finite : NAN);
    json_text_puts(j, ", \"abs_max\": ");
    json_text_real(j, any ? st->abs_max : NAN);
    json_text_puts(j, "}");
}

/* The rows this rank's sampler drew for micro batch m (all of the step's
 * when m < 0): each its global sample index and the window it read. */
static void put_samples(struct json_text *j, struct run_session *s, long step, int m)
{
    const int B = s->cfg.train_micro_batch_size_per_gpu;
    const int first = m < 0 ? 0 : m, end = m < 0 ? s->cfg.gradient_accumulation_steps : m + 1;
    uint64_t *rows = s->row_ids; /* B entries, free while no forward runs */
    json_text_puts(j, "[");
    for (int k = first; k < end; k++) {
        sampler_rows(&s->sampler, (uint64_t)step, k, rows);
        for (int b = 0; b < B; b++) {
            const size_t w = sampler_window(&s->sampler, rows[b]);
            json_text_printf(j,
                             "%s{\"micro_batch\": %d, \"row\": %d, \"sample\": %llu, "
                             "\"window\": %zu, \"first_token\": %zu}",
                             k == first && b == 0 ? "" : ", ", k, b, (unsigned long long)rows[b], w,
                             w * (size_t)s->cfg.data.seq_len);
        }
    }
    json_text_puts(j, "]");
}

static zt_status write_report(struct run_session *s, const struct check *c,
                              const struct nonfinite_finding *f, const char *path)
{
    struct json_text j = {0};
    json_text_printf(&j, "{\"step\": %ld, \"micro_batch\": ", c->step);
    if (f->micro >= 0)
        json_text_printf(&j, "%d", f->micro);
    else
        json_text_puts(&j, "null");
    json_text_printf(&j, ", \"rank\": %d, \"world\": %d, \"dp_rank\": %d, \"phase\": ", s->rank,
                     s->world, s->dp_rank);
    json_text_string(&j, nonfinite_phase_name(f->phase), JSON_ESCAPE_U);
    json_text_puts(&j, ", \"tensor\": ");
    json_text_string(&j, c->what, JSON_ESCAPE_U);
    json_text_puts(&j, ", \"on_nonfinite\": ");
    json_text_string(&j, s->cfg.run.on_nonfinite == ZT_NONFINITE_SKIP ? "skip" : "stop",
                     JSON_ESCAPE_U);
    json_text_puts(&j, ", \"stats\": ");
    put_stats(&j, &c->stats);
    json_text_puts(&j, ", \"samples\": ");
    put_samples(&j, s, c->step - 1, f->micro);
    json_text_puts(&j, "}\n");
    if (j.oom) {
        free(j.p);
        return zt_error_set(ZT_ERR_NOMEM, "cannot build the non-finite report %s", path);
    }
    zt_status st = atomic_file_write(path, j.p, j.len);
    free(j.p);
    return st;
}

/* The finding rank's report: a failure is a warning, as the other ranks
 * go on without knowing of it. */
static void report(struct run_session *s, const struct check *c, struct nonfinite_finding *f)
{
    char dir[4096];
    zt_status st = ZT_OK;
    if (snprintf(dir, sizeof dir, "%s/nonfinite", s->cfg.run.output_dir) >= (int)sizeof dir ||
        snprintf(f->report, sizeof f->report, "%s/step-%ld.json", dir, c->step) >=
            (int)sizeof f->report)
        st = zt_error_set(ZT_ERR_IO, "%s: path too long", s->cfg.run.output_dir);
    if (st == ZT_OK)
        st = zt_mkdir_p(dir);
    if (st == ZT_OK)
        st = write_report(s, c, f, f->report);
    if (st == ZT_OK)
        return;
    fprintf(stderr, "zerotrain: warning: rank %d: the non-finite report was not written: %s\n",
            s->rank, zt_error_message());
    fflush(stderr);
    f->report[0] = '\0';
}

zt_status nonfinite_diagnose(struct run_session *s, long step,
                             zt_status (*rerun)(struct run_session *s, long step, void *arg),
                             void *arg, struct nonfinite_finding *out)
{
    struct check c;
    memset(out, 0, sizeof *out);
    ZT_TRY(check_init(&c, s, step));
    zt_status st = rerun_checked(&c, step, rerun, arg);
    double key = c.best, who;
    if (st == ZT_OK)
        st = comm_allreduce(comm_host(s->comm), &key, 1, ZT_F64, COMM_OP_MIN);
    who = c.best == key && key != KEY_NONE ? s->rank : s->world;
    if (st == ZT_OK)
        st = comm_allreduce(comm_host(s->comm), &who, 1, ZT_F64, COMM_OP_MIN);
    if (st != ZT_OK || key == KEY_NONE) {
        check_free(&c);
        return st;
    }
    out->found = 1;
    out->rank = (int)who;
    out->phase = phase_of_key(key);
    out->micro = out->phase == NONFINITE_REDUCED ? -1 : micro_of_key(key);
    if (out->rank == s->rank) {
        snprintf(out->what, sizeof out->what, "%s %s: %zu NaN, %zu +inf, %zu -inf of %zu values",
                 nonfinite_phase_name(out->phase), c.what, c.stats.nan, c.stats.pinf, c.stats.ninf,
                 c.stats.numel);
        report(s, &c, out);
    }
    check_free(&c);
    return ZT_OK;
}
