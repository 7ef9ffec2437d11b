/* worker/optim_adafactor.c — Adafactor's rounds and apply on pieces of a
 * tensor (see optimizer.h). */
#include <math.h>
#include <stddef.h>

#include "optimizer.h"

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
        const size_t at = optimizer_slice_index(&pc->slice, pc->lo + i);
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
    const size_t at = optimizer_slice_index(&pc->slice, pc->lo + i);
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
