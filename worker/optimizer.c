/* worker/optimizer.c — the optimizer table and its updates (see
 * optimizer.h). */
#include "optimizer.h"

#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

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

static zt_status adam_entry_update(const struct ops_backend *ops, float *params, const float *grads,
                                   float *const *states, size_t n, float decay,
                                   const struct optimizer_hparams *hp)
{
    return ops->adam_update(params, grads, states[0], states[1], n, decay, hp);
}

static zt_status sgd_entry_update(const struct ops_backend *ops, float *params, const float *grads,
                                  float *const *states, size_t n, float decay,
                                  const struct optimizer_hparams *hp)
{
    return ops->sgd_update(params, grads, hp->momentum != 0.0f ? states[0] : NULL, n, decay, hp);
}

static int sgd_state_count(const struct optimizer_hparams *hp)
{
    return hp->momentum != 0.0f;
}

static zt_status lion_entry_update(const struct ops_backend *ops, float *params, const float *grads,
                                   float *const *states, size_t n, float decay,
                                   const struct optimizer_hparams *hp)
{
    return ops->lion_update(params, grads, states[0], n, decay, hp);
}

static zt_status adamw_entry_update(const struct ops_backend *ops, float *params,
                                    const float *grads, float *const *states, size_t n, float decay,
                                    const struct optimizer_hparams *hp)
{
    return ops->adamw_update(params, grads, states[0], states[1], n, decay, hp);
}

/* "Adam" is PyTorch's Adam (L2 added to the gradient), as PyTorch users
 * and the HF Trainer mean it; DeepSpeed's adam_w_mode default is "AdamW"
 * here. State names follow PyTorch's state dicts. */
static const struct optimizer_ops optimizers[] = {
    {
        .name = "AdamW",
        .n_states = 2,
        .state_names = {"exp_avg", "exp_avg_sq"},
        .whole_tensors = 0,
        .default_beta1 = 0.9,
        .default_beta2 = 0.999,
        .n_hparams = 5,
        .hparams = {OPT_HP_LR, OPT_HP_BETA1, OPT_HP_BETA2, OPT_HP_EPS, OPT_HP_WEIGHT_DECAY},
        .update = adamw_entry_update,
    },
    {
        .name = "Adam",
        .n_states = 2,
        .state_names = {"exp_avg", "exp_avg_sq"},
        .whole_tensors = 0,
        .default_beta1 = 0.9,
        .default_beta2 = 0.999,
        .n_hparams = 5,
        .hparams = {OPT_HP_LR, OPT_HP_BETA1, OPT_HP_BETA2, OPT_HP_EPS, OPT_HP_WEIGHT_DECAY},
        .update = adam_entry_update,
    },
    {
        .name = "SGD",
        .n_states = 1,
        .state_count = sgd_state_count,
        .state_names = {"momentum_buffer"},
        .whole_tensors = 0,
        .default_beta1 = 0.9,
        .default_beta2 = 0.999,
        .n_hparams = 5,
        .hparams = {OPT_HP_LR, OPT_HP_MOMENTUM, OPT_HP_DAMPENING, OPT_HP_NESTEROV,
                    OPT_HP_WEIGHT_DECAY},
        .update = sgd_entry_update,
    },
    {
        .name = "Lion",
        .n_states = 1,
        .state_names = {"exp_avg"},
        .whole_tensors = 0,
        .default_beta1 = 0.9,
        .default_beta2 = 0.99,
        .n_hparams = 4,
        .hparams = {OPT_HP_LR, OPT_HP_BETA1, OPT_HP_BETA2, OPT_HP_WEIGHT_DECAY},
        .update = lion_entry_update,
    },
};
#define N_OPTIMIZERS (sizeof optimizers / sizeof optimizers[0])

const struct optimizer_ops *optimizer_find(const char *name)
{
    for (size_t k = 0; k < N_OPTIMIZERS; k++)
        if (strcasecmp(name, optimizers[k].name) == 0 ||
            (optimizers[k].alias && strcasecmp(name, optimizers[k].alias) == 0))
            return &optimizers[k];
    return NULL;
}

void optimizer_list_names(char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < N_OPTIMIZERS; k++)
        for (int a = 0; a < 2; a++) {
            const char *name = a ? optimizers[k].alias : optimizers[k].name;
            if (!name || at >= n)
                continue;
            int w = snprintf(buf + at, n - at, "%s%s", at ? ", " : "", name);
            at += w > 0 ? (size_t)w : 0;
        }
}

static const char *const hparam_names[OPT_HP_COUNT] = {
    "lr", "beta1", "beta2", "eps", "weight_decay", "momentum", "dampening", "nesterov"};

/* The shortest decimal that reads back as f, as a double: the update uses
 * the fp32 value, and 0.003f then reads "0.003" in meta.json rather than
 * the binary value's 0.0030000000260770321. */
static double shortest_decimal(float f)
{
    char text[32];
    for (int digits = 1; digits < 9; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, (double)f);
        if ((float)strtod(text, NULL) == f)
            return strtod(text, NULL);
    }
    return (double)f;
}

void optimizer_describe(const struct optimizer_ops *o, const struct optimizer_hparams *hp,
                        struct zt_kvlist *out)
{
    zt_kv_init(out, o->name);
    for (int k = 0; k < o->n_hparams; k++)
        zt_kv_add_real(out, hparam_names[o->hparams[k]],
                       shortest_decimal((float)optimizer_hparam_value(hp, o->hparams[k])));
}

const char *optimizer_hparam_name(enum optimizer_hparam h)
{
    return hparam_names[h];
}

double optimizer_hparam_value(const struct optimizer_hparams *hp, enum optimizer_hparam h)
{
    switch (h) {
    case OPT_HP_LR:
        return hp->lr;
    case OPT_HP_BETA1:
        return hp->beta1;
    case OPT_HP_BETA2:
        return hp->beta2;
    case OPT_HP_EPS:
        return hp->eps;
    case OPT_HP_MOMENTUM:
        return hp->momentum;
    case OPT_HP_DAMPENING:
        return hp->dampening;
    case OPT_HP_NESTEROV:
        return hp->nesterov;
    case OPT_HP_WEIGHT_DECAY:
    case OPT_HP_COUNT:
        break;
    }
    return hp->weight_decay;
}
