/* worker/schedule.h — learning-rate schedules with DeepSpeed's meanings.
 *
 * Steps count optimizer steps (not micro steps), starting at 0 for the
 * first update. Definitions (DeepSpeed's deepspeed/runtime/lr_schedules.py):
 * - NONE: lr constant at optimizer.lr.
 * - WarmupLR: for step < warmup_num_steps, lr = min_lr + (max_lr - min_lr) *
 *   gamma with gamma = log(step + 1) / log(warmup_num_steps) for "log" warmup
 *   or step / warmup_num_steps for "linear"; afterwards max_lr.
 * - WarmupDecayLR: WarmupLR, then after warmup a linear decay
 *   lr = min_lr + (max_lr - min_lr) * max(0, (total - step) / (total - warmup)),
 *   as DeepSpeed does.
 * - WarmupCosineLR: ratios of optimizer.lr: warmup from warmup_min_ratio to
 *   1 over warmup_num_steps ("log" or "linear" as above), then cosine from 1
 *   down to cos_min_ratio at total_num_steps - 1, and cos_min_ratio afterwards
 *   (where DeepSpeed would let the cosine climb back).
 * Warmup spans at least 2 steps, as in DeepSpeed.
 *
 * The schedule is described by its own parameters (struct lr_schedule);
 * the coordinator fills them from the run's config (config_lr_schedule).
 */
#ifndef ZT_WORKER_SCHEDULE_H
#define ZT_WORKER_SCHEDULE_H

enum lr_schedule_kind {
    LR_SCHED_NONE,
    LR_SCHED_WARMUP_LR,
    LR_SCHED_WARMUP_DECAY_LR,
    LR_SCHED_WARMUP_COSINE_LR
};

enum lr_warmup_type { LR_WARMUP_LOG, LR_WARMUP_LINEAR };

/* Everything schedule_lr reads; the names are DeepSpeed's. */
struct lr_schedule {
    enum lr_schedule_kind kind;
    double lr;                       /* optimizer.lr: NONE's value, WarmupCosineLR's peak */
    double warmup_min_lr;            /* WarmupLR, WarmupDecayLR */
    double warmup_max_lr;            /* WarmupLR, WarmupDecayLR */
    long warmup_num_steps;           /* every warmup; fewer than 2 count as 2 */
    enum lr_warmup_type warmup_type; /* every warmup: log or linear */
    long total_num_steps;            /* WarmupDecayLR, WarmupCosineLR */
    double warmup_min_ratio;         /* WarmupCosineLR */
    double cos_min_ratio;            /* WarmupCosineLR */
};

/* Learning rate for optimizer step `step` (0-based; a negative step counts
 * as 0). Pure function. */
double schedule_lr(const struct lr_schedule *s, long step);

#endif
