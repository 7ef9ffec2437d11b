/* worker/optimizer.c — the optimizer table and its updates (see
 * optimizer.h). */
#include "optimizer.h"

#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

void adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float decay,
                  const struct optimizer_hparams *hp)
{
    /* Bias corrections in double: 0.999^step underflows float precision
     * long before training ends. */
    const double bc1 = 1.0 - pow(hp->beta1, (double)hp->step);
    const double bc2 = 1.0 - pow(hp->beta2, (double)hp->step);
    const float step_size = (float)(hp->lr / bc1);
    const float inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    const float wd = hp->lr * hp->weight_decay * decay;
    const float b1 = hp->beta1, b2 = hp->beta2;

    for (size_t i = 0; i < n; i++) {
        float g = grads[i];
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) * inv_sqrt_bc2 + hp->eps;
        params[i] -= wd * params[i] + step_size * mi / denom;
    }
}

void adam_update(float *params, const float *grads, float *m, float *v, size_t n, float decay,
                 const struct optimizer_hparams *hp)
{
    const double bc1 = 1.0 - pow(hp->beta1, (double)hp->step);
    const double bc2 = 1.0 - pow(hp->beta2, (double)hp->step);
    const float step_size = (float)(hp->lr / bc1);
    const float inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    const float wd = hp->weight_decay * decay;
    const float b1 = hp->beta1, b2 = hp->beta2;

    for (size_t i = 0; i < n; i++) {
        float g = grads[i] + wd * params[i];
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) * inv_sqrt_bc2 + hp->eps;
        params[i] -= step_size * mi / denom;
    }
}

void sgd_update(float *params, const float *grads, float *buf, size_t n, float decay,
                const struct optimizer_hparams *hp)
{
    const float lr = hp->lr, wd = hp->weight_decay * decay, mu = hp->momentum;
    const float keep = 1.0f - hp->dampening;
    const int first = hp->step <= 1;

    for (size_t i = 0; i < n; i++) {
        float g = grads[i] + wd * params[i];
        if (buf) {
            float b = first ? g : mu * buf[i] + keep * g;
            buf[i] = b;
            g = hp->nesterov ? g + mu * b : b;
        }
        params[i] -= lr * g;
    }
}

void lion_update(float *params, const float *grads, float *m, size_t n, float decay,
                 const struct optimizer_hparams *hp)
{
    const float lr = hp->lr, wd = hp->lr * hp->weight_decay * decay;
    const float b1 = hp->beta1, b2 = hp->beta2;

    for (size_t i = 0; i < n; i++) {
        float g = grads[i];
        float c = b1 * m[i] + (1.0f - b1) * g;
        float sign = (float)((c > 0.0f) - (c < 0.0f));
        params[i] -= wd * params[i] + lr * sign;
        m[i] = b2 * m[i] + (1.0f - b2) * g;
    }
}

/* ---- Adafactor ------------------------------------------------------------ */

/* Matrices keep row and column factors of the second moment, vectors a
 * full one. */
static int adafactor_factored(int cols)
{
    return cols > 1;
}

size_t adafactor_state_len(int rows, int cols, const struct optimizer_hparams *hp)
{
    (void)hp;
    return adafactor_factored(cols) ? (size_t)rows + (size_t)cols : (size_t)rows * (size_t)cols;
}

/* Round 0: [sum p^2, then sum g^2 per row and per column, or per element];
 * round 1: [sum u^2]. */
size_t adafactor_stats_len(int round, int rows, int cols, const struct optimizer_hparams *hp)
{
    return round == 0 ? 1 + adafactor_state_len(rows, cols, hp) : 1;
}

/* 1 - step^decay_rate: the second moment's decay, rising towards 1. */
static double adafactor_beta2t(const struct optimizer_hparams *hp)
{
    return 1.0 - pow((double)hp->step, hp->decay_rate);
}

static void adafactor_sum_squares(const struct optimizer_piece *pc, double *stats)
{
    const size_t n = pc->hi - pc->lo;
    double sum_p2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double p = pc->params[i], g = pc->grads[i];
        sum_p2 += p * p;
        const size_t at = pc->lo + i;
        if (adafactor_factored(pc->cols)) {
            stats[1 + at / (size_t)pc->cols] += g * g;
            stats[1 + (size_t)pc->rows + at % (size_t)pc->cols] += g * g;
        } else {
            stats[1 + at] += g * g;
        }
    }
    stats[0] += sum_p2;
}

/* The factors (or the vector's second moment) from round 0's totals: the
 * mean of g^2 + eps1 over each row and column, averaged in with beta2t. */
static void adafactor_update_factors(const struct optimizer_piece *pc,
                                     const struct optimizer_hparams *hp)
{
    const double b = adafactor_beta2t(hp), eps1 = hp->eps;
    const double *sums = pc->stats[0] + 1;
    float *s = pc->tensor_state;
    if (!adafactor_factored(pc->cols)) {
        for (size_t i = 0; i < pc->numel; i++)
            s[i] = (float)(b * s[i] + (1.0 - b) * (sums[i] + eps1));
        return;
    }
    const size_t rows = (size_t)pc->rows, cols = (size_t)pc->cols;
    for (size_t r = 0; r < rows; r++)
        s[r] = (float)(b * s[r] + (1.0 - b) * (sums[r] / (double)cols + eps1));
    for (size_t c = 0; c < cols; c++)
        s[rows + c] = (float)(b * s[rows + c] + (1.0 - b) * (sums[rows + c] / (double)rows + eps1));
}

/* 1 / mean of the row factors (factored tensors). */
static float adafactor_inv_row_mean(const struct optimizer_piece *pc)
{
    double sum = 0.0;
    for (int r = 0; r < pc->rows; r++)
        sum += pc->tensor_state[r];
    return (float)((double)pc->rows / sum);
}

/* The unclipped update of piece element i: g / sqrt(v^), v^ the factored
 * (or full) second moment. */
static float adafactor_raw_update(const struct optimizer_piece *pc, size_t i, float inv_row_mean)
{
    const size_t at = pc->lo + i;
    const float *s = pc->tensor_state;
    if (!adafactor_factored(pc->cols))
        return pc->grads[i] / sqrtf(s[at]);
    const size_t r = at / (size_t)pc->cols, c = at % (size_t)pc->cols;
    return pc->grads[i] / sqrtf(s[r] * inv_row_mean) / sqrtf(s[(size_t)pc->rows + c]);
}

void adafactor_round(int round, const struct optimizer_piece *pc,
                     const struct optimizer_hparams *hp)
{
    if (round == 0) {
        adafactor_sum_squares(pc, pc->stats[0]);
        return;
    }
    adafactor_update_factors(pc, hp);
    const float inv_row_mean = adafactor_factored(pc->cols) ? adafactor_inv_row_mean(pc) : 1.0f;
    double sum_u2 = 0.0;
    for (size_t i = 0; i < pc->hi - pc->lo; i++) {
        const double u = adafactor_raw_update(pc, i, inv_row_mean);
        sum_u2 += u * u;
    }
    pc->stats[1][0] += sum_u2;
}

/* The step size: lr, or under relative_step min(1e-2 or 1e-6 t with
 * warmup_init, 1 / sqrt(t)); times max(eps2, RMS(p)) under scale_parameter. */
static double adafactor_lr(const struct optimizer_piece *pc, const struct optimizer_hparams *hp)
{
    const double t = (double)hp->step;
    double lr = hp->lr;
    if (hp->relative_step) {
        const double min_step = hp->warmup_init ? 1e-6 * t : 1e-2;
        lr = fmin(min_step, 1.0 / sqrt(t));
    }
    if (hp->scale_parameter)
        lr *= fmax(hp->eps2, sqrt(pc->stats[0][0] / (double)pc->numel));
    return lr;
}

void adafactor_apply(const struct optimizer_piece *pc, const struct optimizer_hparams *hp)
{
    const double lr = adafactor_lr(pc, hp);
    const double rms_u = sqrt(pc->stats[1][0] / (double)pc->numel);
    const float step = (float)(lr / fmax(1.0, rms_u / hp->clip_threshold));
    const float keep = (float)(1.0 - (double)hp->weight_decay * lr * pc->decay);
    const float inv_row_mean = adafactor_factored(pc->cols) ? adafactor_inv_row_mean(pc) : 1.0f;
    const float b1 = hp->beta1;
    float *m = b1 > 0.0f ? (float *)pc->states[0] : NULL;
    for (size_t i = 0; i < pc->hi - pc->lo; i++) {
        float u = step * adafactor_raw_update(pc, i, inv_row_mean);
        if (m) {
            m[i] = b1 * m[i] + (1.0f - b1) * u;
            u = m[i];
        }
        pc->params[i] = keep * pc->params[i] - u;
    }
}

static zt_status adafactor_entry_round(const struct ops_backend *ops, int round,
                                       const struct optimizer_piece *pc,
                                       const struct optimizer_hparams *hp)
{
    return ops->adafactor_round(round, pc, hp);
}

static zt_status adafactor_entry_apply(const struct ops_backend *ops,
                                       const struct optimizer_piece *pc,
                                       const struct optimizer_hparams *hp)
{
    return ops->adafactor_apply(pc, hp);
}

/* The first moment only with a beta1. */
static int adafactor_state_count(const struct optimizer_hparams *hp)
{
    return hp->beta1 > 0.0f;
}

/* ---- AdamW8bit ------------------------------------------------------------ */

/* bitsandbytes' dynamic quantisation map (create_dynamic_map, 8 bits, 7
 * exponent bits): for exponent i = 0..6, the midpoints of 2^i (signed) or
 * 2^(i+1) (unsigned) equal steps of [0.1, 1], times 10^(i-6), with their
 * negatives when signed; then 0 and 1. 256 values, ascending. */
static int compare_floats(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void dynamic_map(int is_signed, float out[256])
{
    int n = 0;
    for (int i = 0; i < 7; i++) {
        const int items = is_signed ? 1 << i : 1 << (i + 1);
        const double step = 0.9 / items, scale = pow(10.0, i - 6);
        for (int k = 0; k < items; k++) {
            const float mean = (float)(scale * (0.1 + step * (k + 0.5)));
            out[n++] = mean;
            if (is_signed)
                out[n++] = -mean;
        }
    }
    out[n++] = 0.0f;
    out[n++] = 1.0f;
    qsort(out, (size_t)n, sizeof *out, compare_floats);
}

/* The index of the code nearest to x (x in [-1, 1], or [0, 1] unsigned). */
static unsigned char quantize_nearest(const float code[256], float x)
{
    int lo = 0, hi = 255;
    while (hi - lo > 1) { /* code[lo] <= x <= code[hi], or x outside */
        const int mid = (lo + hi) / 2;
        if (code[mid] <= x)
            lo = mid;
        else
            hi = mid;
    }
    return (unsigned char)(x - code[lo] <= code[hi] - x ? lo : hi);
}

static int adamw8bit_quantised(size_t numel, const struct optimizer_hparams *hp)
{
    return (long)numel >= hp->min_8bit_size;
}

static size_t adamw8bit_blocks(size_t numel)
{
    return (numel + ADAMW8BIT_BLOCK - 1) / ADAMW8BIT_BLOCK;
}

/* Quantised tensors: absmax1 and absmax2 per block; the others: fp32 m
 * and v. */
size_t adamw8bit_state_len(int rows, int cols, const struct optimizer_hparams *hp)
{
    const size_t numel = (size_t)rows * (size_t)cols;
    return 2 * (adamw8bit_quantised(numel, hp) ? adamw8bit_blocks(numel) : numel);
}

/* Round 0 (max): each block's largest |m| and v after the update; round
 * 1 (sum): the updated fp32 m and v of tensors kept in fp32, each element
 * from the rank that holds it. */
size_t adamw8bit_stats_len(int round, int rows, int cols, const struct optimizer_hparams *hp)
{
    const size_t numel = (size_t)rows * (size_t)cols;
    const int quantised = adamw8bit_quantised(numel, hp);
    if (round == 0)
        return quantised ? 2 * adamw8bit_blocks(numel) : 0;
    return quantised ? 0 : 2 * numel;
}

/* The maps of both states, built once per call. */
struct adamw8bit_maps {
    float m[256], v[256];
};

static void adamw8bit_maps_init(struct adamw8bit_maps *maps)
{
    dynamic_map(1, maps->m);
    dynamic_map(0, maps->v);
}

/* Piece element i's moments after this step's update, from its codes and
 * the blocks' absmax before it. */
static void adamw8bit_moments(const struct optimizer_piece *pc, const struct adamw8bit_maps *maps,
                              size_t i, const struct optimizer_hparams *hp, float *m, float *v)
{
    const size_t nb = adamw8bit_blocks(pc->numel), block = (pc->lo + i) / ADAMW8BIT_BLOCK;
    const unsigned char c1 = ((const unsigned char *)pc->states[0])[i];
    const unsigned char c2 = ((const unsigned char *)pc->states[1])[i];
    const float g = pc->grads[i];
    *m = maps->m[c1] * pc->tensor_state[block] * hp->beta1 + (1.0f - hp->beta1) * g;
    *v = maps->v[c2] * pc->tensor_state[nb + block] * hp->beta2 + (1.0f - hp->beta2) * g * g;
}

void adamw8bit_round(int round, const struct optimizer_piece *pc,
                     const struct optimizer_hparams *hp)
{
    const size_t n = pc->hi - pc->lo;
    if (adamw8bit_quantised(pc->numel, hp)) {
        if (round != 0)
            return;
        struct adamw8bit_maps maps;
        adamw8bit_maps_init(&maps);
        const size_t nb = adamw8bit_blocks(pc->numel);
        double *max1 = pc->stats[0], *max2 = pc->stats[0] + nb;
        for (size_t i = 0; i < n; i++) {
            float m, v;
            adamw8bit_moments(pc, &maps, i, hp, &m, &v);
            const size_t block = (pc->lo + i) / ADAMW8BIT_BLOCK;
            max1[block] = fmax(max1[block], fabsf(m));
            max2[block] = fmax(max2[block], fabsf(v));
        }
        return;
    }
    if (round != 1)
        return;
    const float *m_old = pc->tensor_state, *v_old = pc->tensor_state + pc->numel;
    double *m_new = pc->stats[1], *v_new = pc->stats[1] + pc->numel;
    for (size_t i = 0; i < n; i++) {
        const size_t at = pc->lo + i;
        const float g = pc->grads[i];
        m_new[at] = hp->beta1 * m_old[at] + (1.0f - hp->beta1) * g;
        v_new[at] = hp->beta2 * v_old[at] + (1.0f - hp->beta2) * g * g;
    }
}

/* bitsandbytes' step: p += -lr sqrt(bc2) / bc1 * m / (sqrt(v) + eps sqrt(bc2)),
 * then the decoupled decay p *= 1 - lr wd. */
static float adamw8bit_param(float p, float m, float v, float decay,
                             const struct optimizer_hparams *hp)
{
    const float bc1 = 1.0f - powf(hp->beta1, (float)hp->step);
    const float bc2 = sqrtf(1.0f - powf(hp->beta2, (float)hp->step));
    const float step_size = -hp->lr * bc2 / bc1;
    p += step_size * (m / (sqrtf(v) + bc2 * hp->eps));
    return p * (1.0f - hp->lr * hp->weight_decay * decay);
}

static void adamw8bit_apply_quantised(const struct optimizer_piece *pc,
                                      const struct optimizer_hparams *hp)
{
    struct adamw8bit_maps maps;
    adamw8bit_maps_init(&maps);
    const size_t nb = adamw8bit_blocks(pc->numel);
    const double *max1 = pc->stats[0], *max2 = pc->stats[0] + nb;
    unsigned char *c1 = pc->states[0], *c2 = pc->states[1];
    for (size_t i = 0; i < pc->hi - pc->lo; i++) {
        float m, v;
        adamw8bit_moments(pc, &maps, i, hp, &m, &v);
        pc->params[i] = adamw8bit_param(pc->params[i], m, v, pc->decay, hp);
        const size_t block = (pc->lo + i) / ADAMW8BIT_BLOCK;
        /* an all-zero block has absmax 0: its codes are those of 0 */
        const float a1 = (float)max1[block], a2 = (float)max2[block];
        c1[i] = quantize_nearest(maps.m, a1 > 0.0f ? m / a1 : 0.0f);
        c2[i] = quantize_nearest(maps.v, a2 > 0.0f ? v / a2 : 0.0f);
        /* the first moment keeps its sign (bitsandbytes' rule) */
        if (signbit(maps.m[c1[i]]) != signbit(m))
            c1[i] = (unsigned char)(m > 0.0f ? c1[i] + 1 : c1[i] - 1);
    }
    /* every rank, holding a piece or not, takes the new scales */
    for (size_t b = 0; b < 2 * nb; b++)
        pc->tensor_state[b] = (float)pc->stats[0][b];
}

void adamw8bit_apply(const struct optimizer_piece *pc, const struct optimizer_hparams *hp)
{
    if (adamw8bit_quantised(pc->numel, hp)) {
        adamw8bit_apply_quantised(pc, hp);
        return;
    }
    const double *m_new = pc->stats[1], *v_new = pc->stats[1] + pc->numel;
    for (size_t i = 0; i < pc->hi - pc->lo; i++) {
        const size_t at = pc->lo + i;
        pc->params[i] =
            adamw8bit_param(pc->params[i], (float)m_new[at], (float)v_new[at], pc->decay, hp);
    }
    for (size_t at = 0; at < pc->numel; at++) {
        pc->tensor_state[at] = (float)m_new[at];
        pc->tensor_state[pc->numel + at] = (float)v_new[at];
    }
}

static zt_status adamw8bit_entry_round(const struct ops_backend *ops, int round,
                                       const struct optimizer_piece *pc,
                                       const struct optimizer_hparams *hp)
{
    return ops->adamw8bit_round(round, pc, hp);
}

static zt_status adamw8bit_entry_apply(const struct ops_backend *ops,
                                       const struct optimizer_piece *pc,
                                       const struct optimizer_hparams *hp)
{
    return ops->adamw8bit_apply(pc, hp);
}

static zt_status adam_entry_update(const struct ops_backend *ops, float *params, const float *grads,
                                   float *const *states, size_t n, float decay,
                                   const struct optimizer_hparams *hp)
{
    return ops->adam_update(params, grads, states[0], states[1], n, decay, hp);
}

static zt_status sgd_entry_update(const struct ops_backend *ops, float *params, const float *grads,
                                  float *const *states, size_t n, float decay,
                                  const struct optimizer_hparams *hp)
{
    return ops->sgd_update(params, grads, hp->momentum != 0.0f ? states[0] : NULL, n, decay, hp);
}

/* LOMO's update is plain SGD (with L2 weight decay, as SGD's). */
static zt_status lomo_entry_update(const struct ops_backend *ops, float *params, const float *grads,
                                   float *const *states, size_t n, float decay,
                                   const struct optimizer_hparams *hp)
{
    (void)states;
    struct optimizer_hparams sgd = *hp;
    sgd.momentum = 0.0f;
    sgd.dampening = 0.0f;
    sgd.nesterov = 0;
    return ops->sgd_update(params, grads, NULL, n, decay, &sgd);
}

static int sgd_state_count(const struct optimizer_hparams *hp)
{
    return hp->momentum != 0.0f;
}

static zt_status lion_entry_update(const struct ops_backend *ops, float *params, const float *grads,
                                   float *const *states, size_t n, float decay,
                                   const struct optimizer_hparams *hp)
{
    return ops->lion_update(params, grads, states[0], n, decay, hp);
}

static zt_status adamw_entry_update(const struct ops_backend *ops, float *params,
                                    const float *grads, float *const *states, size_t n, float decay,
                                    const struct optimizer_hparams *hp)
{
    return ops->adamw_update(params, grads, states[0], states[1], n, decay, hp);
}

/* "Adam" is PyTorch's Adam (L2 added to the gradient), as PyTorch users
 * and the HF Trainer mean it; DeepSpeed's adam_w_mode default is "AdamW"
 * here. State names follow PyTorch's state dicts. */
static const struct optimizer_ops optimizers[] = {
    {
        .name = "AdamW",
        .n_states = 2,
        .state_names = {"exp_avg", "exp_avg_sq"},
        .whole_tensors = 0,
        .default_beta1 = 0.9,
        .default_beta2 = 0.999,
        .n_hparams = 5,
        .hparams = {OPT_HP_LR, OPT_HP_BETA1, OPT_HP_BETA2, OPT_HP_EPS, OPT_HP_WEIGHT_DECAY},
        .update = adamw_entry_update,
    },
    {
        .name = "Adam",
        .n_states = 2,
        .state_names = {"exp_avg", "exp_avg_sq"},
        .whole_tensors = 0,
        .default_beta1 = 0.9,
        .default_beta2 = 0.999,
        .n_hparams = 5,
        .hparams = {OPT_HP_LR, OPT_HP_BETA1, OPT_HP_BETA2, OPT_HP_EPS, OPT_HP_WEIGHT_DECAY},
        .update = adam_entry_update,
    },
    {
        .name = "SGD",
        .n_states = 1,
        .state_count = sgd_state_count,
        .state_names = {"momentum_buffer"},
        .whole_tensors = 0,
        .default_beta1 = 0.9,
        .default_beta2 = 0.999,
        .n_hparams = 5,
        .hparams = {OPT_HP_LR, OPT_HP_MOMENTUM, OPT_HP_DAMPENING, OPT_HP_NESTEROV,
                    OPT_HP_WEIGHT_DECAY},
        .update = sgd_entry_update,
    },
    {
        .name = "Lion",
        .n_states = 1,
        .state_names = {"exp_avg"},
        .whole_tensors = 0,
        .default_beta1 = 0.9,
        .default_beta2 = 0.99,
        .n_hparams = 4,
        .hparams = {OPT_HP_LR, OPT_HP_BETA1, OPT_HP_BETA2, OPT_HP_WEIGHT_DECAY},
        .update = lion_entry_update,
    },
    {
        .name = "Adafactor",
        .n_states = 1,
        .state_count = adafactor_state_count,
        .state_names = {"exp_avg"},
        .whole_tensors = 1,
        .default_beta1 = 0.0,
        .default_beta2 = 0.0,
        .default_eps = 1e-30,
        .default_eps2 = 1e-3,
        .n_hparams = 10,
        .hparams = {OPT_HP_LR, OPT_HP_EPS, OPT_HP_EPS2, OPT_HP_CLIP_THRESHOLD, OPT_HP_DECAY_RATE,
                    OPT_HP_BETA1, OPT_HP_WEIGHT_DECAY, OPT_HP_SCALE_PARAMETER, OPT_HP_RELATIVE_STEP,
                    OPT_HP_WARMUP_INIT},
        .tensor_state_name = "exp_avg_sq_factors",
        .tensor_state_len = adafactor_state_len,
        .n_rounds = 2,
        .round_reduce = {OPTIMIZER_REDUCE_SUM, OPTIMIZER_REDUCE_SUM},
        .stats_len = adafactor_stats_len,
        .tensor_round = adafactor_entry_round,
        .tensor_apply = adafactor_entry_apply,
    },
    {
        .name = "AdamW8bit",
        .n_states = 2,
        .state_names = {"state1", "state2"},
        .state_dtype = {ZT_U8, ZT_U8},
        .whole_tensors = 1,
        .default_beta1 = 0.9,
        .default_beta2 = 0.999,
        .n_hparams = 6,
        .hparams = {OPT_HP_LR, OPT_HP_BETA1, OPT_HP_BETA2, OPT_HP_EPS, OPT_HP_WEIGHT_DECAY,
                    OPT_HP_MIN_8BIT_SIZE},
        .tensor_state_name = "absmax_and_fp32_states",
        .tensor_state_len = adamw8bit_state_len,
        .n_rounds = 2,
        .round_reduce = {OPTIMIZER_REDUCE_MAX, OPTIMIZER_REDUCE_SUM},
        .stats_len = adamw8bit_stats_len,
        .tensor_round = adamw8bit_entry_round,
        .tensor_apply = adamw8bit_entry_apply,
    },
    {
        /* LOMO (Lv et al. 2023): SGD fused into the backward, no state */
        .name = "LOMO",
        .n_states = 0,
        .fused_backward = 1,
        .default_beta1 = 0.9,
        .default_beta2 = 0.999,
        .n_hparams = 2,
        .hparams = {OPT_HP_LR, OPT_HP_WEIGHT_DECAY},
        .update = lomo_entry_update,
    },
};
#define N_OPTIMIZERS (sizeof optimizers / sizeof optimizers[0])

const struct optimizer_ops *optimizer_find(const char *name)
{
    for (size_t k = 0; k < N_OPTIMIZERS; k++)
        if (strcasecmp(name, optimizers[k].name) == 0 ||
            (optimizers[k].alias && strcasecmp(name, optimizers[k].alias) == 0))
            return &optimizers[k];
    return NULL;
}

void optimizer_list_names(char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < N_OPTIMIZERS; k++)
        for (int a = 0; a < 2; a++) {
            const char *name = a ? optimizers[k].alias : optimizers[k].name;
            if (!name || at >= n)
                continue;
            int w = snprintf(buf + at, n - at, "%s%s", at ? ", " : "", name);
            at += w > 0 ? (size_t)w : 0;
        }
}

static const char *const hparam_names[OPT_HP_COUNT] = {
    "lr",         "beta1",           "beta2",         "eps",         "weight_decay",
    "momentum",   "dampening",       "nesterov",      "eps2",        "clip_threshold",
    "decay_rate", "scale_parameter", "relative_step", "warmup_init", "min_8bit_size"};

/* The shortest decimal that reads back as f, as a double: the update uses
 * the fp32 value, and 0.003f then reads "0.003" in meta.json rather than
 * the binary value's 0.0030000000260770321. */
static double shortest_decimal(float f)
{
    char text[32];
    for (int digits = 1; digits < 9; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, (double)f);
        if ((float)strtod(text, NULL) == f)
            return strtod(text, NULL);
    }
    return (double)f;
}

void optimizer_describe(const struct optimizer_ops *o, const struct optimizer_hparams *hp,
                        struct zt_kvlist *out)
{
    zt_kv_init(out, o->name);
    for (int k = 0; k < o->n_hparams; k++)
        zt_kv_add_real(out, hparam_names[o->hparams[k]],
                       shortest_decimal((float)optimizer_hparam_value(hp, o->hparams[k])));
}

const char *optimizer_hparam_name(enum optimizer_hparam h)
{
    return hparam_names[h];
}

double optimizer_hparam_value(const struct optimizer_hparams *hp, enum optimizer_hparam h)
{
    switch (h) {
    case OPT_HP_LR:
        return hp->lr;
    case OPT_HP_BETA1:
        return hp->beta1;
    case OPT_HP_BETA2:
        return hp->beta2;
    case OPT_HP_EPS:
        return hp->eps;
    case OPT_HP_MOMENTUM:
        return hp->momentum;
    case OPT_HP_DAMPENING:
        return hp->dampening;
    case OPT_HP_NESTEROV:
        return hp->nesterov;
    case OPT_HP_EPS2:
        return hp->eps2;
    case OPT_HP_CLIP_THRESHOLD:
        return hp->clip_threshold;
    case OPT_HP_DECAY_RATE:
        return hp->decay_rate;
    case OPT_HP_SCALE_PARAMETER:
        return hp->scale_parameter;
    case OPT_HP_RELATIVE_STEP:
        return hp->relative_step;
    case OPT_HP_WARMUP_INIT:
        return hp->warmup_init;
    case OPT_HP_MIN_8BIT_SIZE:
        return (double)hp->min_8bit_size;
    case OPT_HP_WEIGHT_DECAY:
    case OPT_HP_COUNT:
        break;
    }
    return hp->weight_decay;
}
