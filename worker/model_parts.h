/* worker/model_parts.h — for the model families' implementations only
 * (worker/model.c, worker/llama.c): what every family's table and passes
 * do the same way. Callers of a model use model_family.h.
 */
#ifndef ZT_WORKER_MODEL_PARTS_H
#define ZT_WORKER_MODEL_PARTS_H

#include <stddef.h>

#include "../common/clock.h"
#include "../common/status.h"
#include "device.h"
#include "model_family.h"

/* Appends tensor `name` [rows, cols] of `unit` at *offset (then advanced)
 * to t, whose tensors array has room: trainable, in the working
 * precision, weight decay on matrices only (cols > 1). */
void model_table_add(struct param_table *t, const char *name, int rows, int cols, int unit,
                     size_t *offset);

/* Tensor k inside a unit's borrowed parameters or gradients, whose first
 * element is unit_base. */
static inline const float *model_param_in(const struct param_table *t, int k,
                                          const float *unit_base)
{
    const struct param_tensor *p = &t->tensors[k];
    return unit_base + (p->offset - t->unit_offset[p->unit]);
}

static inline float *model_grad_in(const struct param_table *t, int k, float *unit_base)
{
    const struct param_tensor *p = &t->tensors[k];
    return unit_base + (p->offset - t->unit_offset[p->unit]);
}

/* Activation checkpointing as model_create describes it: block l is
 * checkpointed when ckpt_every > 0 divides it. */
static inline int model_block_checkpointed(int ckpt_every, int l)
{
    return ckpt_every > 0 && l % ckpt_every == 0;
}

/* How many of blocks 0 .. n-1 are checkpointed. */
int model_blocks_checkpointed(int ckpt_every, int n);

/* A pass over a plan-only device: the hook calls a family's real pass
 * makes, in its order, with no compute, so that a plan sees every gather
 * and gradient buffer a real step allocates (each family's tests compare
 * the two event by event). Every family's passes follow this pattern: the
 * forward acquires and releases each unit of its unit_order; the backward
 * acquires each unit's parameters and gradients, releases the parameters
 * and completes the gradients, except unit 0 (the embedding, whose
 * gradient completes last: borrowed from the head when it is tied,
 * borrowed at the end when not). */
zt_status model_plan_walk(struct model *m, const struct model_unit_hooks *h, enum model_pass pass);

/* Reads the n per-position losses at dev_losses (memory of dev) back and
 * sets m->mean_loss to their mean. A non-finite loss is not an error here:
 * every rank meets it in the gradient reduction, at the same point.
 * Errors: ZT_ERR_NOMEM, the device's. */
zt_status model_read_mean_loss(struct model *m, const struct device *dev, const float *dev_losses,
                               int n);

/* Runs the fallible `call` of family instance `fam` (whose `base` is its
 * struct model), adds its time to the profile's category when profiling,
 * and returns its failure from the enclosing function. */
#define MODEL_TIMED(fam, category, call)                                                           \
    do {                                                                                           \
        double timed_t0_ = (fam)->base.profile ? zt_now_seconds() : 0.0;                           \
        zt_status timed_status_ = (call);                                                          \
        if ((fam)->base.profile)                                                                   \
            (fam)->base.profile->seconds[category] += zt_now_seconds() - timed_t0_;                \
        ZT_TRY(timed_status_);                                                                     \
    } while (0)

#endif
