/* worker/schedule.c — learning-rate schedules, DeepSpeed's formulas.
 *
 * Written as one pure function of the step so that a resumed run, every
 * rank and the tests all get the same value without carrying scheduler
 * state. Some details follow DeepSpeed's lr_schedules.py rather than the
 * round numbers one might expect, so that a config moved over from
 * DeepSpeed gives the same curve:
 * - the warmup length is max(2, warmup_num_steps) (log warmup divides by
 *   log(warmup_num_steps), which must not be 0);
 * - WarmupDecayLR decays the warmup factor, lr = min_lr + (max_lr - min_lr)
 *   * factor, with the denominator max(1, total - warmup);
 * - WarmupCosineLR counts the cosine from step - warmup + 1 and so reaches
 *   cos_min_ratio at step total_num_steps - 1; from there on it stays at
 *   cos_min_ratio (DeepSpeed would let the cosine climb back up).
 */
#include "schedule.h"

#include <math.h>

static const double PI = 3.14159265358979323846;

/* Warmup progress in [0, 1) for step < warmup. */
static double warmup_gamma(enum lr_warmup_type type, long step, long warmup)
{
    if (type == LR_WARMUP_LINEAR)
        return (double)step / (double)warmup;
    return log((double)step + 1.0) / log((double)warmup);
}

static double cosine_ratio(const struct lr_schedule *s, long step, long warmup)
{
    double min_ratio = s->cos_min_ratio;
    long done = step - warmup + 1, span = s->total_num_steps - warmup;
    if (span <= 0 || done >= span)
        return min_ratio;
    double ratio =
        min_ratio + (1.0 - min_ratio) * (1.0 + cos(PI * (double)done / (double)span)) / 2;
    return ratio > 0.0 ? ratio : 0.0;
}

double schedule_lr(const struct lr_schedule *s, long step)
{
    const double lr = s->lr;
    const double min_lr = s->warmup_min_lr, max_lr = s->warmup_max_lr;
    const long warmup = s->warmup_num_steps < 2 ? 2 : s->warmup_num_steps;
    const long total = s->total_num_steps;
    if (step < 0)
        step = 0;
    double gamma = step < warmup ? warmup_gamma(s->warmup_type, step, warmup) : 1.0;

    switch (s->kind) {
    case LR_SCHED_WARMUP_LR:
        return min_lr + (max_lr - min_lr) * gamma;
    case LR_SCHED_WARMUP_DECAY_LR:
        if (step >= warmup) {
            double span = total - warmup > 1 ? (double)(total - warmup) : 1.0;
            gamma = (double)(total - step) / span;
            gamma = gamma > 0.0 ? gamma : 0.0;
        }
        return min_lr + (max_lr - min_lr) * gamma;
    case LR_SCHED_WARMUP_COSINE_LR: {
        double wmin = s->warmup_min_ratio;
        if (step < warmup)
            return lr * (wmin + (1.0 - wmin) * gamma);
        return lr * cosine_ratio(s, step, warmup);
    }
    case LR_SCHED_NONE:
        break;
    }
    return lr;
}
