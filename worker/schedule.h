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
 */
#ifndef ZT_WORKER_SCHEDULE_H
#define ZT_WORKER_SCHEDULE_H

#include "../coordinator/config.h"

/* Learning rate for optimizer step `step` (0-based). Pure function. */
double schedule_lr(const struct zt_config *cfg, long step);

#endif
