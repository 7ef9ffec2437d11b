/* worker/optim_elementwise.c — the updates of the element-wise optimizers
 * (AdamW, Adam, SGD, Lion) over fp32 ranges (see optimizer.h), written as
 * the constants and per-element steps of optim_elementwise.h so that the
 * CPU's vector kernels share them. */
#include "optim_elementwise.h"

#include <math.h>
#include <stddef.h>

void optim_consts_init(enum optim_rule rule, const struct optimizer_hparams *hp, float decay,
                       float gscale, struct optim_consts *c)
{
    /* Bias corrections in double: 0.999^step underflows float precision
     * long before training ends. */
    const double bc1 = 1.0 - pow(hp->beta1, (double)hp->step);
    const double bc2 = 1.0 - pow(hp->beta2, (double)hp->step);
    *c = (struct optim_consts){
        .gscale = gscale,
        .lr = hp->lr,
        .eps = hp->eps,
        .b1 = hp->beta1,
        .b2 = hp->beta2,
        .c1 = 1.0f - hp->beta1,
        .c2 = 1.0f - hp->beta2,
        .step_size = (float)(hp->lr / bc1),
        .inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2)),
        .mu = hp->momentum,
        .keep = 1.0f - hp->dampening,
        .first = hp->step <= 1,
        .nesterov = hp->nesterov,
    };
    /* Decoupled decay (AdamW, Lion) is scaled by the learning rate; L2
     * decay (Adam, SGD) enters the gradient as it is. */
    const int decoupled = rule == OPTIM_ADAMW || rule == OPTIM_LION;
    c->wd = decoupled ? hp->lr * hp->weight_decay * decay : hp->weight_decay * decay;
}

void optim_adamw_apply(float *p, const float *g, float *const *s, size_t n,
                       const struct optim_consts *c)
{
    float *m = s[0], *v = s[1];
    for (size_t i = 0; i < n; i++)
        optim_adamw_step(&p[i], &m[i], &v[i], g[i] * c->gscale, c);
}

void optim_adam_apply(float *p, const float *g, float *const *s, size_t n,
                      const struct optim_consts *c)
{
    float *m = s[0], *v = s[1];
    for (size_t i = 0; i < n; i++)
        optim_adam_step(&p[i], &m[i], &v[i], g[i] * c->gscale, c);
}

void optim_sgd_apply(float *p, const float *g, float *const *s, size_t n,
                     const struct optim_consts *c)
{
    float *buf = s[0];
    for (size_t i = 0; i < n; i++)
        optim_sgd_step(&p[i], buf ? &buf[i] : NULL, g[i] * c->gscale, c);
}

void optim_lion_apply(float *p, const float *g, float *const *s, size_t n,
                      const struct optim_consts *c)
{
    float *m = s[0];
    for (size_t i = 0; i < n; i++)
        optim_lion_step(&p[i], &m[i], g[i] * c->gscale, c);
}

/* The reference entry points: a rule's constants with gscale 1, then its loop. */
static void run(enum optim_rule rule, optim_apply_fn apply, float *params, const float *grads,
                float *s0, float *s1, size_t n, float decay, const struct optimizer_hparams *hp)
{
    struct optim_consts c;
    float *states[2] = {s0, s1};
    optim_consts_init(rule, hp, decay, 1.0f, &c);
    apply(params, grads, states, n, &c);
}

void adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float decay,
                  const struct optimizer_hparams *hp)
{
    run(OPTIM_ADAMW, optim_adamw_apply, params, grads, m, v, n, decay, hp);
}

void adam_update(float *params, const float *grads, float *m, float *v, size_t n, float decay,
                 const struct optimizer_hparams *hp)
{
    run(OPTIM_ADAM, optim_adam_apply, params, grads, m, v, n, decay, hp);
}

void sgd_update(float *params, const float *grads, float *buf, size_t n, float decay,
                const struct optimizer_hparams *hp)
{
    run(OPTIM_SGD, optim_sgd_apply, params, grads, buf, NULL, n, decay, hp);
}

void lion_update(float *params, const float *grads, float *m, size_t n, float decay,
                 const struct optimizer_hparams *hp)
{
    run(OPTIM_LION, optim_lion_apply, params, grads, m, NULL, n, decay, hp);
}
