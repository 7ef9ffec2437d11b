/* worker/optim_elementwise.h — for worker/ only: the element-wise update
 * rules (AdamW, Adam, SGD, Lion) split into what a range computes once (its
 * constants) and what each element computes (its step), so that the plain C
 * loops of optim_elementwise.c and the vector kernels of a CPU instruction
 * set (worker/cpu/simd_*.c) run the same arithmetic in the same order.
 *
 * Bit-identical results across instruction sets rest on three things: each
 * step below is written as separate IEEE operations (no fused multiply-add:
 * the build keeps -ffp-contract=off, and a vector kernel uses a multiply and
 * an add where a step has them), every constant is computed here once in
 * fp32 exactly as the step would, and sqrt and division are correctly
 * rounded everywhere. A vector kernel mirrors a step operation for
 * operation and runs the step itself on its tail.
 *
 * Every rule first multiplies the gradient by `gscale` in fp32: the unscale
 * and clip the engine used to apply in a separate pass, folded in here so
 * that the gradients are read once.
 */
#ifndef ZT_WORKER_OPTIM_ELEMENTWISE_H
#define ZT_WORKER_OPTIM_ELEMENTWISE_H

#include <math.h>
#include <stddef.h>

#include "optimizer.h"

/* The element-wise rules, indexing the kernel tables. */
enum optim_rule { OPTIM_ADAMW, OPTIM_ADAM, OPTIM_SGD, OPTIM_LION, OPTIM_RULE_COUNT };

/* A range's constants, in fp32 as the steps use them. */
struct optim_consts {
    float gscale;         /* gradients are multiplied by this first */
    float lr, eps, wd;    /* wd: the rule's decay factor, range flag folded in */
    float b1, b2, c1, c2; /* betas and 1 - betas */
    float step_size;      /* Adam(W): lr / (1 - beta1^step) */
    float inv_sqrt_bc2;   /* Adam(W): 1 / sqrt(1 - beta2^step) */
    float mu, keep;       /* SGD: momentum and 1 - dampening */
    int first, nesterov;  /* SGD: step 1 (the buffer starts as g); Nesterov */
};

/* The constants of `rule` for a range with weight-decay flag `decay` (1 or
 * 0) and gradient scale `gscale`. */
void optim_consts_init(enum optim_rule rule, const struct optimizer_hparams *hp, float decay,
                       float gscale, struct optim_consts *c);

/* A rule over fp32 arrays: params p[0..n), gradients g[0..n) (before
 * gscale), the rule's state vectors s[k][0..n) (SGD: s[0] is the momentum
 * buffer or NULL). */
typedef void (*optim_apply_fn)(float *p, const float *g, float *const *s, size_t n,
                               const struct optim_consts *c);

/* The rules as plain C loops (the reference every kernel matches). */
void optim_adamw_apply(float *p, const float *g, float *const *s, size_t n,
                       const struct optim_consts *c);
void optim_adam_apply(float *p, const float *g, float *const *s, size_t n,
                      const struct optim_consts *c);
void optim_sgd_apply(float *p, const float *g, float *const *s, size_t n,
                     const struct optim_consts *c);
void optim_lion_apply(float *p, const float *g, float *const *s, size_t n,
                      const struct optim_consts *c);

/* ---- one element of each rule; g is the gradient already times gscale ---- */

/* The moments and the Adam step m^ / (sqrt(v^) + eps), shared by AdamW and Adam. */
static inline float optim_adam_moments(float *m, float *v, float g, const struct optim_consts *c)
{
    float mi = c->b1 * *m + c->c1 * g;
    float vi = c->b2 * *v + c->c2 * g * g;
    *m = mi;
    *v = vi;
    float denom = sqrtf(vi) * c->inv_sqrt_bc2 + c->eps;
    return c->step_size * mi / denom;
}

static inline void optim_adamw_step(float *p, float *m, float *v, float g,
                                    const struct optim_consts *c)
{
    float step = optim_adam_moments(m, v, g, c);
    *p -= c->wd * *p + step;
}

static inline void optim_adam_step(float *p, float *m, float *v, float g,
                                   const struct optim_consts *c)
{
    *p -= optim_adam_moments(m, v, g + c->wd * *p, c);
}

/* buf is NULL without momentum. */
static inline void optim_sgd_step(float *p, float *buf, float g, const struct optim_consts *c)
{
    g = g + c->wd * *p;
    if (buf) {
        float b = c->first ? g : c->mu * *buf + c->keep * g;
        *buf = b;
        g = c->nesterov ? g + c->mu * b : b;
    }
    *p -= c->lr * g;
}

static inline void optim_lion_step(float *p, float *m, float g, const struct optim_consts *c)
{
    float u = c->b1 * *m + c->c1 * g;
    float sign = (float)((u > 0.0f) - (u < 0.0f));
    *p -= c->wd * *p + c->lr * sign;
    *m = c->b2 * *m + c->c2 * g;
}

#endif
