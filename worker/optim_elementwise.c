/* worker/optim_elementwise.c — the updates of the element-wise optimizers
 * (AdamW, Adam, SGD, Lion) over fp32 ranges (see optimizer.h). */
#include <math.h>
#include <stddef.h>

#include "optimizer.h"

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
