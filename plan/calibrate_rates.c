/* plan/calibrate_rates.c — optimizer updates and 4-bit decodes timed on
 * one core (calibrate_rates.h). */
#include "calibrate_rates.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/clock.h"
#include "../common/half.h"
#include "../worker/ops.h"
#include "../worker/optimizer.h"
#include "../worker/param_quant.h"
#include "../worker/quant4.h"

enum { MAX_REPS = 16, COLS = 1024 };

/* The buffers of one timing: n elements each, states as the optimizer
 * keeps them; a whole-tensor optimizer's replicated state and round
 * statistics for a tensor of n / COLS rows. */
struct rate_buffers {
    float *params;
    uint16_t *grads16, *working;
    float *grads32;
    void *states[OPTIMIZER_MAX_STATES];
    float *tensor_state;
    double *stats[OPTIMIZER_MAX_ROUNDS];
};

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double calibrate_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Hyperparameters as a run's defaults give them: every optimizer's state
 * kept (SGD with momentum), 8-bit states from 4,096 elements. */
static struct optimizer_hparams hparams_of(const struct optimizer_ops *o)
{
    return (struct optimizer_hparams){.lr = 1e-4f,
                                      .beta1 = (float)o->default_beta1,
                                      .beta2 = (float)o->default_beta2,
                                      .eps = (float)o->default_eps,
                                      .eps2 = (float)o->default_eps2,
                                      .weight_decay = 0.01f,
                                      .momentum = 0.9f,
                                      .clip_threshold = 1.0f,
                                      .decay_rate = -0.8f,
                                      .scale_parameter = 1,
                                      .min_8bit_size = 4096,
                                      .step = 2};
}

static void free_buffers(struct rate_buffers *b)
{
    free(b->params);
    free(b->grads16);
    free(b->working);
    free(b->grads32);
    for (int k = 0; k < OPTIMIZER_MAX_STATES; k++)
        free(b->states[k]);
    free(b->tensor_state);
    for (int r = 0; r < OPTIMIZER_MAX_ROUNDS; r++)
        free(b->stats[r]);
    memset(b, 0, sizeof *b);
}

/* Small, finite values; states at zero, as a run's first step has them. */
static zt_status alloc_buffers(const struct optimizer_ops *o, const struct optimizer_hparams *hp,
                               size_t n, struct rate_buffers *b)
{
    const int rows = (int)(n / COLS);
    memset(b, 0, sizeof *b);
    b->params = malloc(n * sizeof(float));
    b->grads32 = malloc(n * sizeof(float));
    b->grads16 = malloc(n * sizeof(uint16_t));
    b->working = malloc(n * sizeof(uint16_t));
    int ok = b->params && b->grads32 && b->grads16 && b->working;
    for (int k = 0; k < optimizer_state_count(o, hp) && ok; k++)
        ok = (b->states[k] = calloc(n, zt_dtype_size(o->state_dtype[k]))) != NULL;
    if (ok && o->whole_tensors) {
        ok = (b->tensor_state = calloc(o->tensor_state_len(rows, COLS, hp) + 1, sizeof(float))) !=
             NULL;
        for (int r = 0; r < o->n_rounds && ok; r++)
            ok =
                (b->stats[r] = calloc(o->stats_len(r, rows, COLS, hp) + 1, sizeof(double))) != NULL;
    }
    if (!ok) {
        free_buffers(b);
        return zt_error_set(ZT_ERR_NOMEM, "calibrate: no memory to time the %s update", o->name);
    }
    for (size_t i = 0; i < n; i++) {
        b->params[i] = (float)((i * 7) % 13) * 0.01f - 0.06f;
        b->grads32[i] = (float)((i * 5) % 11) * 1e-3f - 5e-3f;
        b->grads16[i] = zt_f32_to_bf16(b->grads32[i]);
    }
    return ZT_OK;
}

/* One update of all n elements: a range (bf16 gradients, the bf16 working
 * copy refreshed), or a whole tensor's rounds and apply. */
static zt_status update_once(const struct ops_backend *ops, const struct optimizer_ops *o,
                             const struct optimizer_hparams *hp, size_t n, struct rate_buffers *b)
{
    if (!o->whole_tensors) {
        struct optimizer_range r = {.params = b->params,
                                    .grads = b->grads16,
                                    .grad_dtype = ZT_BF16,
                                    .gscale = 1.0f,
                                    .working = b->working,
                                    .working_dtype = ZT_BF16,
                                    .n = n,
                                    .decay = 1.0f};
        for (int k = 0; k < OPTIMIZER_MAX_STATES; k++)
            r.states[k] = b->states[k];
        return o->update(ops, &r, hp);
    }
    const int rows = (int)(n / COLS);
    struct optimizer_piece pc = {.rows = rows,
                                 .cols = COLS,
                                 .numel = n,
                                 .lo = 0,
                                 .hi = n,
                                 .params = b->params,
                                 .grads = b->grads32,
                                 .tensor_state = b->tensor_state,
                                 .decay = 1.0f};
    memcpy(pc.states, b->states, sizeof pc.states);
    /* as the engine runs it in a 16-bit run (shard/update.c): every pass
     * widens and scales the bf16 gradients, and the apply is followed by
     * the working copy's refresh */
    for (int r = 0; r <= o->n_rounds; r++) {
        ZT_TRY(ops->to_f32(ops, ZT_BF16, b->grads16, b->grads32, n));
        ZT_TRY(ops->scale(ops, b->grads32, n, 1.0f));
        if (r == o->n_rounds)
            break;
        memset(b->stats[r], 0, o->stats_len(r, rows, COLS, hp) * sizeof(double));
        pc.stats[r] = b->stats[r];
        ZT_TRY(o->tensor_round(ops, r, &pc, hp));
    }
    ZT_TRY(o->tensor_apply(ops, &pc, hp));
    return ops->from_f32(ops, ZT_BF16, b->params, b->working, n);
}

static zt_status time_update(const struct ops_backend *ops, const struct optimizer_ops *o, size_t n,
                             int reps, double *rate)
{
    const struct optimizer_hparams hp = hparams_of(o);
    struct rate_buffers b;
    ZT_TRY(alloc_buffers(o, &hp, n, &b));
    double t[MAX_REPS];
    zt_status st = ZT_OK;
    for (int r = 0; r < reps + 1 && st == ZT_OK; r++) {
        const double t0 = zt_now_seconds();
        st = update_once(ops, o, &hp, n, &b);
        if (r > 0)
            t[r - 1] = zt_now_seconds() - t0;
    }
    free_buffers(&b);
    if (st == ZT_OK)
        *rate = (double)n / calibrate_median(t, reps);
    return st;
}

/* NF4 with double quantisation into bf16, as a QLoRA run decodes. */
static zt_status time_dequantize(size_t n, int reps, double *rate)
{
    const struct param_quant q = {
        .enabled = 1, .type = QUANT4_NF4, .double_quant = 1, .compute = ZT_BF16};
    float *x = malloc(n * sizeof *x);
    void *region = malloc(quant4_bytes(n, 1));
    uint16_t *y = malloc(n * sizeof *y);
    zt_status st = x && region && y ? ZT_OK
                                    : zt_error_set(ZT_ERR_NOMEM, "calibrate: no memory to time "
                                                                 "the 4-bit decode");
    if (st == ZT_OK) {
        for (size_t i = 0; i < n; i++)
            x[i] = (float)((i * 7) % 13) * 0.01f - 0.06f;
        quant4_quantize_region(QUANT4_NF4, 1, x, n, region);
        double t[MAX_REPS];
        for (int r = 0; r < reps + 1; r++) {
            const double t0 = zt_now_seconds();
            param_quant_decode_region(&q, region, n, ZT_BF16, y);
            if (r > 0)
                t[r - 1] = zt_now_seconds() - t0;
        }
        *rate = (double)n / calibrate_median(t, reps);
    }
    free(x);
    free(region);
    free(y);
    return st;
}

void calibrate_rates_put(FILE *f, const struct machine *m, size_t n, int reps)
{
    fprintf(f,
            "element rates: one core (a rank's thread), %zu elements, median of %d after 1\n"
            "warm-up; updates with bf16 gradients and working copy (tensor-wise ones: one\n"
            "%zu x %d tensor, its gradients widened before each pass), defaults'\n"
            "hyperparameters\n",
            n, reps, n / COLS, COLS);
    fprintf(f, "  %-12s %14s %10s\n", "work", "elements/s", "ns/element");
    for (int i = 0; i < m->n_updates; i++)
        fprintf(f, "  %-12s %14.4g %10.2f\n", m->updates[i].optimizer, m->updates[i].rate,
                1e9 / m->updates[i].rate);
    if (m->dequantize_4bit > 0)
        fprintf(f, "  %-12s %14.4g %10.2f\n", "nf4 decode", m->dequantize_4bit,
                1e9 / m->dequantize_4bit);
}

zt_status calibrate_rates(const struct ops_backend *ops, size_t n, int reps, struct machine *m,
                          FILE *report)
{
    ZT_ASSERT(reps >= 1 && reps <= MAX_REPS && n >= COLS && n % COLS == 0);
    m->n_updates = 0;
    for (int i = 0; optimizer_at(i) && m->n_updates < MACHINE_MAX_UPDATES; i++) {
        const struct optimizer_ops *o = optimizer_at(i);
        struct machine_update *u = &m->updates[m->n_updates];
        ZT_TRY(time_update(ops, o, n, reps, &u->rate));
        snprintf(u->optimizer, sizeof u->optimizer, "%s", o->name);
        m->n_updates++;
    }
    ZT_TRY(time_dequantize(n, reps, &m->dequantize_4bit));
    if (report) {
        calibrate_rates_put(report, m, n, reps);
        fputc('\n', report);
        fflush(report);
    }
    return ZT_OK;
}
