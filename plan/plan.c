/* plan/plan.c — enumerating the layouts of `zerotrain plan`, ranking
 * them and telling why (plan.h). */
#include "plan.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/clock.h"
#include "../coordinator/session.h"
#include "../worker/optimizer.h"

#define PLAN_MAX_ROLES 4

/* One layout, planned. */
struct planned {
    struct plan_layout l;
    int n_roles;
    struct plan_role roles[PLAN_MAX_ROLES];
    struct plan_time times[PLAN_MAX_ROLES];
    uint64_t peak; /* the largest role's total */
    int slowest;   /* the role whose step is the longest: the layout's */
    double step, tokens_per_s;
    double mfu;       /* model FLOPs against the datasheet's dense peak; NaN: not stated */
    double sustained; /* ... against the machine file's sustained rate */
    int fits;
};

struct plan_list {
    struct planned *v;
    size_t n, cap;
};

/* Everything the enumeration shares. */
struct plan_ctx {
    const struct plan_options *o;
    struct zt_config cfg;
    struct plan_model model;
    struct machine machine;
    int per_node;
    uint64_t memory, usable; /* usable: a rank's, (1 - margin) of its device over `sharing` */
    int sharing;             /* ranks on one device: 1 on a GPU, a CPU node's ranks */
    long global_batch;
    enum machine_precision precision;
    struct plan_list list;
    size_t refused;        /* layouts the model or the run cannot take */
    char refused_why[512]; /* the first one's reason */
    size_t uneven;         /* data-parallel sizes that do not divide the batch */
    unsigned keep;         /* KEEP_* bits: settings held at the config's */
    struct rss_start rss;  /* host memory measured at start-up (plan_rss.c) */
};

static zt_status list_push(struct plan_list *l, const struct planned *p)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        struct planned *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return zt_error_set(ZT_ERR_NOMEM, "cannot hold %zu planned layouts", cap);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *p;
    return ZT_OK;
}

static enum machine_precision precision_of(const struct zt_config *c)
{
    return c->bf16.enabled ? MACHINE_BF16 : c->fp16.enabled ? MACHINE_FP16 : MACHINE_FP32;
}

/* The roles worth planning: the first and last stage and, of the middle
 * ones, the earliest with each distinct block count (the earliest keeps
 * the most micro batches in flight, so it peaks highest among equals). */
static int roles_of(int P, const int *blocks, int *stages)
{
    int n = 0;
    stages[n++] = 0;
    for (int p = 1; p + 1 < P && n < PLAN_MAX_ROLES - 1; p++) {
        int seen = 0;
        for (int k = 1; k < n; k++)
            seen |= blocks[stages[k]] == blocks[p];
        if (!seen)
            stages[n++] = p;
    }
    if (P > 1)
        stages[n++] = P - 1;
    return n;
}

static void refuse(struct plan_ctx *x, const char *why)
{
    if (x->refused++ == 0)
        snprintf(x->refused_why, sizeof x->refused_why, "%s", why);
}

/* Plans the roles of layout l and adds it to the list. */
static zt_status plan_one(struct plan_ctx *x, const struct plan_layout *l, const int *stages,
                          int n_roles)
{
    struct planned p = {.l = *l, .n_roles = n_roles};
    for (int k = 0; k < n_roles; k++) {
        zt_status s = plan_role(&x->cfg, l, stages[k], &p.roles[k]);
        if (s == ZT_ERR_CONFIG || s == ZT_ERR_UNSUPPORTED) {
            refuse(x, zt_error_message());
            return ZT_OK;
        }
        ZT_TRY(s);
        plan_rss_role(&x->cfg, &x->machine, &x->rss, &p.roles[k]);
        plan_cost(&x->model, l, &p.roles[k], &x->machine, x->per_node, x->precision, &p.times[k]);
        if (p.roles[k].total_peak > p.peak)
            p.peak = p.roles[k].total_peak;
        if (p.times[k].step > p.times[p.slowest].step)
            p.slowest = k;
    }
    p.step = p.times[p.slowest].step;
    const double tokens = (double)x->global_batch * x->model.seq;
    p.tokens_per_s = tokens / p.step;
    const double share = (double)x->per_node / x->machine.devices_per_node;
    const double devices = x->o->gpus / (share > 1.0 ? share : 1.0);
    const double achieved = x->model.flops_per_token * p.tokens_per_s / devices;
    const double peak = x->machine.peak_matmul_flops[x->precision];
    p.mfu = peak > 0.0 ? achieved / peak : NAN;
    p.sustained = achieved / x->machine.matmul_flops[x->precision];
    p.fits = p.peak <= x->usable;
    return list_push(&x->list, &p);
}

/* ---- settings held at the config's (--keep) ------------------------------ */

enum { KEEP_ZERO = 1, KEEP_CKPT = 2, KEEP_SP = 4, KEEP_CHUNKS = 8, KEEP_MICRO = 16 };

static const struct {
    const char *key;
    unsigned bit;
} keep_keys[] = {
    {"zero_optimization.stage", KEEP_ZERO},         {"activation_checkpointing", KEEP_CKPT},
    {"tensor_parallel.sequence_parallel", KEEP_SP}, {"pipeline.virtual_stages", KEEP_CHUNKS},
    {"train_micro_batch_size_per_gpu", KEEP_MICRO},
};
#define N_KEEP_KEYS (sizeof keep_keys / sizeof keep_keys[0])

static zt_status keep_of(const struct plan_options *o, unsigned *out)
{
    *out = 0;
    for (int i = 0; i < o->n_keep; i++) {
        size_t k = 0;
        while (k < N_KEEP_KEYS && strcmp(o->keep[i], keep_keys[k].key) != 0)
            k++;
        if (k == N_KEEP_KEYS) {
            char keys[256] = "";
            for (size_t j = 0; j < N_KEEP_KEYS; j++)
                snprintf(keys + strlen(keys), sizeof keys - strlen(keys), "%s%s", j ? ", " : "",
                         keep_keys[j].key);
            return zt_error_set(ZT_ERR_USAGE, "--keep %s: not a setting the plan searches (%s)",
                                o->keep[i], keys);
        }
        *out |= keep_keys[k].bit;
    }
    return ZT_OK;
}

/* Micro batches that divide a replica's share of the batch: the config's
 * alone when it is kept, the whole share for a fused-backward optimizer. */
static int micro_options(const struct plan_ctx *x, long per_replica, int *out)
{
    if (x->keep & KEEP_MICRO) {
        const int b = x->cfg.train_micro_batch_size_per_gpu;
        out[0] = b;
        return per_replica % b == 0;
    }
    const struct optimizer_ops *o = optimizer_find(x->cfg.optimizer.type);
    if (o && o->fused_backward) { /* it keeps no gradient to accumulate into */
        out[0] = (int)per_replica;
        return 1;
    }
    int n = 0;
    for (int b = 1; b <= 64 && b <= per_replica; b *= 2)
        if (per_replica % b == 0)
            out[n++] = b;
    return n;
}

/* Activation checkpointing: off, every block, every other block, and the
 * config's interval; the config's alone when it is kept. */
static int ckpt_options(const struct zt_config *c, unsigned keep, int layers, int *out)
{
    if (keep & KEEP_CKPT) {
        out[0] =
            c->activation_checkpointing.enabled ? c->activation_checkpointing.every_n_blocks : 0;
        return 1;
    }
    int n = 0;
    out[n++] = 0;
    out[n++] = 1;
    if (layers > 2)
        out[n++] = 2;
    const int k = c->activation_checkpointing.every_n_blocks;
    if (c->activation_checkpointing.enabled && k > 2)
        out[n++] = k;
    return n;
}

/* Whether layout l's micro batches and ZeRO stage let it interleave v
 * chunks per stage (the config's rules; plan_grid checks the blocks). */
static int interleaves(const struct plan_layout *l, int v)
{
    return v == 1 || (l->accum % l->pp == 0 && l->zero_stage < 3);
}

/* The layouts of T x P x C with v model chunks per stage. */
static zt_status plan_grid_chunks(struct plan_ctx *x, int T, int P, int C, int v)
{
    const int D = x->o->gpus / (T * P * C);
    struct plan_layout l = {.tp = T, .pp = P, .dp = D, .cp = C, .vp = v};
    int *blocks = calloc((size_t)P, sizeof *blocks), stages[PLAN_MAX_ROLES];
    if (!blocks)
        return zt_error_set(ZT_ERR_NOMEM, "cannot plan %d stages", P);
    zt_status s = plan_stage_blocks(&x->cfg, &l, blocks);
    const int n_roles = s == ZT_OK ? roles_of(P, blocks, stages) : 0;
    free(blocks);
    if (s == ZT_ERR_CONFIG || s == ZT_ERR_UNSUPPORTED) {
        refuse(x, zt_error_message());
        return ZT_OK;
    }
    ZT_TRY(s);
    int micro[8], ckpt[4];
    const int n_micro = micro_options(x, x->global_batch / D, micro);
    const int n_ckpt = ckpt_options(&x->cfg, x->keep, x->model.layers, ckpt);
    /* sequence parallelism is tried wherever there is a tensor group to
     * split the sequence over, ZeRO wherever there are data x context ranks */
    const int sp_last = T > 1, z_last = D * C > 1 ? 3 : 0;
    const int sp0 = x->keep & KEEP_SP ? sp_last && x->cfg.tensor_parallel.sequence_parallel : 0;
    const int z0 = x->keep & KEEP_ZERO ? (z_last ? x->cfg.zero.stage : 0) : 0;
    for (int sp = sp0; sp <= (x->keep & KEEP_SP ? sp0 : sp_last); sp++)
        for (int z = z0; z <= (x->keep & KEEP_ZERO ? z0 : z_last); z++)
            for (int b = 0; b < n_micro; b++)
                for (int k = 0; k < n_ckpt; k++) {
                    l.sequence_parallel = sp;
                    l.zero_stage = z;
                    l.micro_batch = micro[b];
                    l.accum = (int)(x->global_batch / D / micro[b]);
                    l.ckpt_every = ckpt[k];
                    if (interleaves(&l, v))
                        ZT_TRY(plan_one(x, &l, stages, n_roles));
                }
    return ZT_OK;
}

/* Layouts of T x P x C: one chunk per stage, and 2 and 4 interleaved
 * ones where the blocks divide. */
static zt_status plan_grid(struct plan_ctx *x, int T, int P, int C)
{
    const int N = x->o->gpus, D = N / (T * P * C);
    const long micro = x->keep & KEEP_MICRO ? x->cfg.train_micro_batch_size_per_gpu : 1;
    if (x->global_batch % (D * micro) != 0) {
        x->uneven++;
        return ZT_OK;
    }
    const struct plan_layout l = {.tp = T, .pp = P, .dp = D, .cp = C};
    const char *why = plan_context_unsupported(&x->cfg, &l);
    if (why) {
        refuse(x, why);
        return ZT_OK;
    }
    if (x->keep & KEEP_CHUNKS) {
        const int v = P > 1 ? x->cfg.pipeline.virtual_stages : 1;
        return v == 1 || x->model.layers % (P * v) == 0 ? plan_grid_chunks(x, T, P, C, v) : ZT_OK;
    }
    for (int v = 1; v <= PLAN_MAX_CHUNKS; v *= 2)
        if (v == 1 || (P > 1 && x->model.layers % (P * v) == 0))
            ZT_TRY(plan_grid_chunks(x, T, P, C, v));
    return ZT_OK;
}

static int divides(int d, int n)
{
    return d > 0 && n % d == 0;
}

static zt_status enumerate(struct plan_ctx *x)
{
    const int N = x->o->gpus;
    for (int T = 1; T <= N; T++) {
        if (!divides(T, N) || !divides(T, x->model.heads) || !divides(T, x->model.kv_heads))
            continue;
        for (int P = 1; P <= N / T && P <= x->model.layers; P++) {
            if (!divides(P, N / T))
                continue;
            for (int C = 1; C <= N / (T * P); C *= 2) /* context parallelism: powers of 2 */
                if (divides(C, N / (T * P)))
                    ZT_TRY(plan_grid(x, T, P, C));
        }
    }
    return ZT_OK;
}

/* Fitting layouts first, fastest first; then the rest by peak memory. */
static int by_rank(const void *a, const void *b)
{
    const struct planned *p = a, *q = b;
    if (p->fits != q->fits)
        return q->fits - p->fits;
    if (p->fits && p->tokens_per_s != q->tokens_per_s)
        return (p->tokens_per_s < q->tokens_per_s) - (p->tokens_per_s > q->tokens_per_s);
    return (p->peak > q->peak) - (p->peak < q->peak); /* then the smaller peak */
}

static double gib(uint64_t bytes)
{
    return (double)bytes / (double)(1ull << 30);
}

/* ---- printing ------------------------------------------------------------ */

static const char *const axis_names[PLAN_AXIS_COUNT] = {"tensor", "pipeline", "data"};

/* The parts of a step, named for the explanations. */
enum plan_part {
    PART_COMPUTE,
    PART_OPTIMIZER,
    PART_TENSOR,
    PART_PIPELINE,
    PART_DATA,
    PART_BUBBLE,
    PART_COUNT
};

static const char *const part_names[PART_COUNT] = {
    "compute",          "the optimizer step",    "tensor-parallel traffic",
    "pipeline traffic", "data-parallel traffic", "the pipeline bubble"};

static void parts_of(const struct plan_time *t, double *v)
{
    v[PART_COMPUTE] = t->compute;
    v[PART_OPTIMIZER] = t->optimizer + t->grad_passes; /* the norm and zeroing with it */
    v[PART_TENSOR] = t->exposed[PLAN_AXIS_TENSOR];
    v[PART_PIPELINE] = t->exposed[PLAN_AXIS_PIPELINE];
    v[PART_DATA] = t->exposed[PLAN_AXIS_DATA] + t->context; /* ring attention's, on the data axis */
    v[PART_BUBBLE] = t->bubble;
}

static void layout_name(const struct plan_layout *l, char *buf, size_t n)
{
    char ck[16] = "off";
    if (l->ckpt_every)
        snprintf(ck, sizeof ck, "every %d", l->ckpt_every);
    char v[16] = "", cp[16] = "";
    if (l->vp > 1)
        snprintf(v, sizeof v, " v%d", l->vp);
    if (plan_context_size(l) > 1)
        snprintf(cp, sizeof cp, " C%d", plan_context_size(l));
    snprintf(buf, n, "T%d%s P%d%s D%d%s ZeRO-%d micro %d x %d, checkpointing %s", l->tp,
             l->sequence_parallel ? "+SP" : "", l->pp, v, l->dp, cp, l->zero_stage, l->micro_batch,
             l->accum, ck);
}

static const char *link_of(const struct plan_time *t, enum plan_axis a)
{
    return t->inter_node[a] ? "inter-node" : "intra-node";
}

/* "what dominates": the largest part of the layout's slowest role, with
 * the link a traffic part crosses. */
static void explain_best(const struct planned *p, FILE *f)
{
    const struct plan_time *t = &p->times[p->slowest];
    double v[PART_COUNT];
    parts_of(t, v);
    int top = 0, next = -1;
    for (int k = 1; k < PART_COUNT; k++)
        top = v[k] > v[top] ? k : top;
    for (int k = 0; k < PART_COUNT; k++)
        if (k != top && (next < 0 || v[k] > v[next]))
            next = k;
    char name[128];
    layout_name(&p->l, name, sizeof name);
    fprintf(f, "best: %s: %s is %.0f%% of the %.3g s step, then %s %.0f%%", name, part_names[top],
            100.0 * v[top] / t->step, t->step, part_names[next], 100.0 * v[next] / t->step);
    if (next >= PART_TENSOR && next <= PART_DATA)
        fprintf(f, " (%s)", link_of(t, (enum plan_axis)(next - PART_TENSOR)));
    fputc('\n', f);
}

/* model.init_from's load on the best layout: its slowest stage's, which
 * the first step waits for. */
static void print_load(const struct planned *p, FILE *f)
{
    double load = NAN, cached = NAN;
    for (int k = 0; k < p->n_roles; k++) {
        if (isfinite(p->times[k].load) && !(p->times[k].load <= load))
            load = p->times[k].load;
        if (isfinite(p->times[k].load_cached) && !(p->times[k].load_cached <= cached))
            cached = p->times[k].load_cached;
    }
    if (isfinite(load))
        fprintf(f,
                "model.init_from: read in %.1f s before the first step (%.1f s with the files "
                "in the page cache)\n",
                load, cached);
}

/* "what the other pays": the part where the runner-up spends the most
 * more than the winner. */
static void explain_runner_up(const struct planned *best, const struct planned *p, FILE *f)
{
    double a[PART_COUNT], b[PART_COUNT];
    parts_of(&best->times[best->slowest], a);
    parts_of(&p->times[p->slowest], b);
    int worst = 0;
    for (int k = 1; k < PART_COUNT; k++)
        worst = b[k] - a[k] > b[worst] - a[worst] ? k : worst;
    char name[128];
    layout_name(&p->l, name, sizeof name);
    if (p->step == best->step) {
        fprintf(f, "runner-up: %s: as fast; it needs %.2f GiB more per rank\n", name,
                gib(p->peak) - gib(best->peak));
        return;
    }
    fprintf(f, "runner-up: %s: %.1f%% slower; it pays %.3g s more in %s (%.3g s against %.3g s)\n",
            name, 100.0 * (p->step / best->step - 1.0), b[worst] - a[worst], part_names[worst],
            b[worst], a[worst]);
}

static int chunks_of(const struct plan_layout *l)
{
    return l->vp > 1 ? l->vp : 1;
}

static void print_row(const struct planned *p, size_t rank, FILE *f)
{
    const struct plan_time *t = &p->times[p->slowest];
    double comm = t->context;
    for (int a = 0; a < PLAN_AXIS_COUNT; a++)
        comm += t->exposed[a];
    char ck[8] = "off";
    if (p->l.ckpt_every)
        snprintf(ck, sizeof ck, "%d", p->l.ckpt_every);
    char mfu[16] = "    -";
    if (isfinite(p->mfu))
        snprintf(mfu, sizeof mfu, "%5.1f%%", 100.0 * p->mfu);
    char dc[24]; /* data x context */
    snprintf(dc, sizeof dc, plan_context_size(&p->l) > 1 ? "%d*%d" : "%d", p->l.dp, p->l.cp);
    fprintf(f,
            "%4zu %4d %2s %4d %2d %6s %4d %5d x %-5d %5s %9.2f %4s %9.4g %11.4g %6s %5.1f%% "
            "%6.1f%% %6.1f%%\n",
            rank, p->l.tp, p->l.sequence_parallel ? "sp" : "-", p->l.pp, chunks_of(&p->l), dc,
            p->l.zero_stage, p->l.micro_batch, p->l.accum, ck, gib(p->peak), p->fits ? "yes" : "no",
            p->step, p->tokens_per_s, mfu, 100.0 * p->sustained, 100.0 * comm / t->step,
            100.0 * t->bubble / t->step);
}

/* The settings held at the config's, with their values. */
static void print_kept(const struct plan_ctx *x, FILE *f)
{
    if (!x->keep)
        return;
    const struct zt_config *c = &x->cfg;
    const int values[N_KEEP_KEYS] = {
        c->zero.stage,
        c->activation_checkpointing.enabled ? c->activation_checkpointing.every_n_blocks : 0,
        c->tensor_parallel.sequence_parallel, c->pipeline.virtual_stages,
        c->train_micro_batch_size_per_gpu};
    fputs("kept at the config's:", f);
    for (size_t k = 0, n = 0; k < N_KEEP_KEYS; k++)
        if (keep_keys[k].bit == KEEP_CKPT && (x->keep & KEEP_CKPT) && !values[k])
            fprintf(f, "%s %s off", n++ ? "," : "", keep_keys[k].key);
        else if (keep_keys[k].bit == KEEP_CKPT && (x->keep & KEEP_CKPT))
            fprintf(f, "%s %s every %d blocks", n++ ? "," : "", keep_keys[k].key, values[k]);
        else if (x->keep & keep_keys[k].bit)
            fprintf(f, "%s %s %d", n++ ? "," : "", keep_keys[k].key, values[k]);
    fputc('\n', f);
}

static void print_table(const struct plan_ctx *x, double seconds, FILE *f)
{
    size_t fit = 0;
    for (size_t i = 0; i < x->list.n; i++)
        fit += x->list.v[i].fits;
    fprintf(f, "plan: %s: %s, %.4g B parameters, %d layers, %d heads, seq %d, %s, optimizer %s\n",
            x->cfg.source ? x->cfg.source : "config", x->cfg.model.family,
            (double)x->model.n_params / 1e9, x->model.layers, x->model.heads, x->model.seq,
            zt_precision_name(session_precision(&x->cfg)), x->cfg.optimizer.type);
    fprintf(f,
            "machine: %s (%s): %d GPUs, %d per node, %.1f GiB each; %.0f%% kept for the "
            "allocator, so a layout fits at a peak of %.1f GiB",
            x->machine.name, x->machine.path, x->o->gpus, x->per_node, gib(x->memory),
            100.0 * PLAN_ALLOCATOR_MARGIN, gib(x->usable));
    if (x->sharing > 1)
        fprintf(f, " a rank (%d ranks share each device's memory)", x->sharing);
    fputc('\n', f);
    fprintf(f, "global batch: %ld sequences (%.0f tokens) per step\n", x->global_batch,
            (double)x->global_batch * x->model.seq);
    print_kept(x, f);
    fprintf(f, "planned %zu layouts in %.2f s: %zu fit", x->list.n, seconds, fit);
    if (x->uneven)
        fprintf(f, "; %zu grids left out: their data-parallel size does not divide the batch%s",
                x->uneven, x->keep & KEEP_MICRO ? " into the kept micro batches" : "");
    if (x->refused)
        fprintf(f, "; %zu refused (%s)", x->refused, x->refused_why);
    fputc('\n', f);
    if (x->list.n && x->list.v[0].roles[0].nvme_bytes)
        fprintf(f,
                "optimizer states on NVMe in %s: the peaks count the window they stream "
                "through; the first layout's file is %.2f GiB per rank\n",
                x->cfg.zero.offload_optimizer.nvme_path, gib(x->list.v[0].roles[0].nvme_bytes));
    fprintf(f, "rank    T SP    P  v    D*C ZeRO micro x accum ckpt  peak GiB fits    step s    "
               "tokens/s    MFU  sust.   comm  bubble\n");
    const size_t shown = x->o->all ? x->list.n : (size_t)x->o->top;
    for (size_t i = 0; i < x->list.n && i < shown && (x->o->all || x->list.v[i].fits); i++)
        print_row(&x->list.v[i], i + 1, f);
    if (fit == 0) {
        fprintf(f, "no layout fits: the smallest peak is %.2f GiB\n",
                x->list.n ? gib(x->list.v[0].peak) : 0.0);
        return;
    }
    explain_best(&x->list.v[0], f);
    if (fit > 1)
        explain_runner_up(&x->list.v[0], &x->list.v[1], f);
    plan_rss_print(x->list.v[0].roles, x->list.v[0].n_roles, f);
    print_load(&x->list.v[0], f);
}

/* ---- JSON ---------------------------------------------------------------- */

static void json_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.17g", v);
    else
        fputs("null", f);
}

static void json_axes_num(FILE *f, const char *key, const double *v)
{
    fprintf(f, ", \"%s\": {", key);
    for (int a = 0; a < PLAN_AXIS_COUNT; a++) {
        fprintf(f, "%s\"%s\": ", a ? ", " : "", axis_names[a]);
        json_num(f, v[a]);
    }
    fputc('}', f);
}

static void json_role(FILE *f, const struct plan_role *r, const struct plan_time *t)
{
    fprintf(f, "{\"stage\": %d, \"blocks\": %d, \"slots\": %d, \"peak\": {", r->stage, r->blocks,
            r->slots);
    for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++)
        fprintf(f, "%s\"%s\": %llu", c ? ", " : "", ledger_category_name((enum ledger_category)c),
                (unsigned long long)r->peak[c]);
    fprintf(f, "}, \"total_peak\": %llu, \"nvme_file_bytes\": %llu, \"bytes\": {",
            (unsigned long long)r->total_peak, (unsigned long long)r->nvme_bytes);
    for (int a = 0; a < PLAN_AXIS_COUNT; a++)
        fprintf(f, "%s\"%s\": %llu", a ? ", " : "", axis_names[a], (unsigned long long)t->bytes[a]);
    fprintf(f, "}, \"inter_node\": {");
    for (int a = 0; a < PLAN_AXIS_COUNT; a++)
        fprintf(f, "%s\"%s\": %s", a ? ", " : "", axis_names[a],
                t->inter_node[a] ? "true" : "false");
    fputc('}', f);
    fputs(", \"rss_predicted\": ", f);
    rss_parts_write_json(&r->rss, f);
    if (r->loaded_total_peak > 0) {
        fputs(", \"rss_predicted_loaded\": ", f);
        rss_parts_write_json(&r->rss_loaded, f);
    }
    json_axes_num(f, "comm_seconds", t->comm);
    json_axes_num(f, "exposed_seconds", t->exposed);
    const double rest[] = {t->compute,   t->matmul, t->attention,   t->decode,
                           t->optimizer, t->nvme,   t->grad_passes, t->bubble,
                           t->step,      t->load,   t->load_cached};
    static const char *const names[] = {
        "compute_seconds",   "matmul_seconds", "attention_seconds",  "decode_seconds",
        "optimizer_seconds", "nvme_seconds",   "grad_pass_seconds",  "bubble_seconds",
        "step_seconds",      "load_seconds",   "load_cached_seconds"};
    for (int k = 0; k < 11; k++) {
        fprintf(f, ", \"%s\": ", names[k]);
        json_num(f, rest[k]);
    }
    fputc('}', f);
}

static void json_layout(FILE *f, const struct planned *p)
{
    fprintf(f,
            "{\"tp\": %d, \"pp\": %d, \"virtual_stages\": %d, \"dp\": %d, \"cp\": %d, "
            "\"zero_stage\": %d, \"micro_batch\": %d, \"accum\": %d, \"ckpt_every\": %d, "
            "\"sequence_parallel\": %s, \"fits\": %s, \"peak\": %llu, \"step_seconds\": ",
            p->l.tp, p->l.pp, chunks_of(&p->l), p->l.dp, plan_context_size(&p->l), p->l.zero_stage,
            p->l.micro_batch, p->l.accum, p->l.ckpt_every,
            p->l.sequence_parallel ? "true" : "false", p->fits ? "true" : "false",
            (unsigned long long)p->peak);
    json_num(f, p->step);
    fputs(", \"tokens_per_s\": ", f);
    json_num(f, p->tokens_per_s);
    fputs(", \"mfu\": ", f);
    json_num(f, p->mfu);
    fputs(", \"sustained_share\": ", f);
    json_num(f, p->sustained);
    fputs(", \"roles\": [", f);
    for (int k = 0; k < p->n_roles; k++) {
        fputs(k ? ", " : "", f);
        json_role(f, &p->roles[k], &p->times[k]);
    }
    fputs("]}", f);
}

static zt_status write_json(const struct plan_ctx *x, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return zt_error_set(ZT_ERR_IO, "--json %s: cannot write: %s", path, strerror(errno));
    fprintf(f, "{\"gpus\": %d, \"per_node\": %d, \"gpu_memory\": %llu, \"margin\": ", x->o->gpus,
            x->per_node, (unsigned long long)x->memory);
    json_num(f, PLAN_ALLOCATOR_MARGIN);
    fprintf(f, ", \"machine\": \"%s\", \"global_batch\": %ld, \"seq_len\": %d, ", x->machine.name,
            x->global_batch, x->model.seq);
    fprintf(f, "\"n_params\": %zu, \"kept\": [", x->model.n_params);
    for (size_t k = 0, n = 0; k < N_KEEP_KEYS; k++)
        if (x->keep & keep_keys[k].bit)
            fprintf(f, "%s\"%s\"", n++ ? ", " : "", keep_keys[k].key);
    fputs("], \"layouts\": [\n", f);
    for (size_t i = 0; i < x->list.n; i++) {
        json_layout(f, &x->list.v[i]);
        fputs(i + 1 < x->list.n ? ",\n" : "\n", f);
    }
    fputs("]}\n", f);
    if (ferror(f) | (fclose(f) != 0))
        return zt_error_set(ZT_ERR_IO, "--json %s: write failed", path);
    return ZT_OK;
}

/* ---- the command --------------------------------------------------------- */

/* Ranks per node where --gpus-per-node is not given: one per device; on a
 * node of one device and several cores (a CPU node, as calibrate writes
 * it), one per core up to --gpus, as mpirun fills a node's slots. */
static int default_per_node(const struct machine *m, int gpus)
{
    if (m->devices_per_node == 1 && m->cores > 1)
        return gpus < m->cores ? gpus : m->cores;
    return m->devices_per_node;
}

static zt_status open_ctx(const struct plan_options *o, struct plan_ctx *x)
{
    memset(x, 0, sizeof *x);
    x->o = o;
    if (o->gpus < 1)
        return zt_error_set(ZT_ERR_USAGE, "--gpus: %d: give the number of GPUs (at least 1)",
                            o->gpus);
    ZT_TRY(keep_of(o, &x->keep));
    ZT_TRY(machine_load(o->machine ? o->machine : "h100-sxm", &x->machine));
    ZT_TRY(config_load(o->config_path, o->overrides, o->n_overrides, &x->cfg));
    ZT_TRY(plan_model_of(&x->cfg, &x->model));
    ZT_TRY(plan_rss_start(&x->cfg, &x->machine, &x->rss));
    x->per_node = o->per_node > 0 ? o->per_node : default_per_node(&x->machine, o->gpus);
    x->memory = o->gpu_memory ? o->gpu_memory : x->machine.device_memory;
    /* ranks that share a device (a CPU node's) divide its memory */
    x->sharing = (x->per_node + x->machine.devices_per_node - 1) / x->machine.devices_per_node;
    x->usable = (uint64_t)((1.0 - PLAN_ALLOCATOR_MARGIN) * (double)x->memory / x->sharing);
    x->precision = precision_of(&x->cfg);
    x->global_batch = o->global_batch > 0 ? o->global_batch
                                          : (long)x->cfg.train_micro_batch_size_per_gpu *
                                                x->cfg.gradient_accumulation_steps * o->gpus;
    return ZT_OK;
}

zt_status plan_run(const struct plan_options *o, FILE *f)
{
    struct plan_ctx x;
    const double t0 = zt_now_seconds();
    zt_status s = open_ctx(o, &x);
    if (s == ZT_OK)
        s = enumerate(&x);
    if (s == ZT_OK && x.list.n == 0)
        s = zt_error_set(ZT_ERR_CONFIG,
                         "no layout of %d GPUs can run this model with a global batch of %ld "
                         "sequences%s%s",
                         o->gpus, x.global_batch, x.refused ? ": " : "", x.refused_why);
    if (s == ZT_OK) {
        qsort(x.list.v, x.list.n, sizeof *x.list.v, by_rank);
        print_table(&x, zt_now_seconds() - t0, f);
        if (o->json_path)
            s = write_json(&x, o->json_path);
    }
    free(x.list.v);
    config_free(&x.cfg);
    return s;
}
