/* tests/flat_hooks.c — see flat_hooks.h. */
#include "flat_hooks.h"

static void record(struct flat_state *s, enum hook_event ev, int unit)
{
    if (s->n_events < FLAT_MAX_EVENTS) {
        s->events[s->n_events][0] = ev;
        s->events[s->n_events][1] = unit;
    }
    s->n_events++;
}

static zt_status flat_begin(void *ctx, enum model_pass pass)
{
    record(ctx, EV_BEGIN, (int)pass);
    return ZT_OK;
}

static zt_status flat_end(void *ctx, enum model_pass pass)
{
    record(ctx, EV_END, (int)pass);
    return ZT_OK;
}

static zt_status flat_params(void *ctx, int unit, const void **p)
{
    struct flat_state *s = ctx;
    ZT_ASSERT(s->t->compute == ZT_F32); /* the flat buffers are fp32 */
    record(s, EV_PARAMS, unit);
    s->acquired++;
    *p = s->params + s->t->unit_offset[unit];
    return ZT_OK;
}

static zt_status flat_release(void *ctx, int unit)
{
    struct flat_state *s = ctx;
    record(s, EV_RELEASE, unit);
    s->acquired--;
    return ZT_OK;
}

/* Whether some tensor of the unit trains (else it lends no gradients, as
 * the engine does). */
static int unit_trains(const struct param_table *t, int unit)
{
    for (int k = 0; k < t->n_tensors; k++)
        if (t->tensors[k].unit == unit && t->tensors[k].trainable)
            return 1;
    return 0;
}

static zt_status flat_grads(void *ctx, int unit, float **g)
{
    struct flat_state *s = ctx;
    record(s, EV_GRADS, unit);
    s->grads_open++;
    *g = unit_trains(s->t, unit) ? s->grads + s->t->unit_offset[unit] : NULL;
    return ZT_OK;
}

static zt_status flat_done(void *ctx, int unit)
{
    struct flat_state *s = ctx;
    record(s, EV_DONE, unit);
    s->grads_open--;
    return ZT_OK;
}

struct model_unit_hooks flat_hooks(struct flat_state *s)
{
    return (struct model_unit_hooks){.ctx = s,
                                     .pass_begin = flat_begin,
                                     .pass_end = flat_end,
                                     .params_acquire = flat_params,
                                     .params_release = flat_release,
                                     .grads_acquire = flat_grads,
                                     .grads_done = flat_done};
}
