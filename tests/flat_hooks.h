/* tests/flat_hooks.h — model unit hooks over one whole flat parameter and
 * gradient buffer, recording every call: the model suites (test_model,
 * test_llama) run a family's passes without an engine and compare the
 * calls a real pass makes with a plan's. */
#ifndef ZT_TESTS_FLAT_HOOKS_H
#define ZT_TESTS_FLAT_HOOKS_H

#include "worker/model_family.h"

enum hook_event { EV_BEGIN, EV_END, EV_PARAMS, EV_RELEASE, EV_GRADS, EV_DONE };

#define FLAT_MAX_EVENTS 512

struct flat_state {
    const struct param_table *t;
    float *params, *grads;
    int acquired, grads_open;       /* units borrowed now (must balance) */
    int n_events;                   /* may exceed FLAT_MAX_EVENTS: only the first are kept */
    int events[FLAT_MAX_EVENTS][2]; /* (event, unit or pass) */
};

/* Hooks lending s->params and s->grads (whole flat buffers) unit by unit;
 * a unit with no trainable tensor gets NULL gradients, as from the engine. */
struct model_unit_hooks flat_hooks(struct flat_state *s);

#endif
