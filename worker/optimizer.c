/* worker/optimizer.c — see optimizer.h. */
#include "optimizer.h"

#include <math.h>

void adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float decay,
                  const struct adamw_hparams *hp)
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
