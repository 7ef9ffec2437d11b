/* worker/optimizer.c — the optimizer table: each optimizer's entry, and
 * finding and describing them (see optimizer.h; the updates' math is in
 * optim_*.c). */
#include "optimizer.h"

#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

static zt_status adafactor_entry_round(const struct ops_backend *ops, int round,
                                       const struct optimizer_piece *pc,
                                       const struct optimizer_hparams *hp)
{
    return ops->adafactor_round(ops, round, pc, hp);
}

static zt_status adafactor_entry_apply(const struct ops_backend *ops,
                                       const struct optimizer_piece *pc,
                                       const struct optimizer_hparams *hp)
{
    return ops->adafactor_apply(ops, pc, hp);
}

/* The first moment only with a beta1. */
static int adafactor_state_count(const struct optimizer_hparams *hp)
{
    return hp->beta1 > 0.0f;
}

static zt_status adamw8bit_entry_round(const struct ops_backend *ops, int round,
                                       const struct optimizer_piece *pc,
                                       const struct optimizer_hparams *hp)
{
    return ops->adamw8bit_round(ops, round, pc, hp);
}

static zt_status adamw8bit_entry_apply(const struct ops_backend *ops,
                                       const struct optimizer_piece *pc,
                                       const struct optimizer_hparams *hp)
{
    return ops->adamw8bit_apply(ops, pc, hp);
}

static zt_status adam_entry_update(const struct ops_backend *ops, const struct optimizer_range *r,
                                   const struct optimizer_hparams *hp)
{
    return ops->adam_update(ops, r, hp);
}

static zt_status sgd_entry_update(const struct ops_backend *ops, const struct optimizer_range *r,
                                  const struct optimizer_hparams *hp)
{
    struct optimizer_range plain = *r;
    plain.states[0] = hp->momentum != 0.0f ? r->states[0] : NULL;
    return ops->sgd_update(ops, &plain, hp);
}

/* LOMO's update is plain SGD (with L2 weight decay, as SGD's). */
static zt_status lomo_entry_update(const struct ops_backend *ops, const struct optimizer_range *r,
                                   const struct optimizer_hparams *hp)
{
    struct optimizer_hparams sgd = *hp;
    sgd.momentum = 0.0f;
    sgd.dampening = 0.0f;
    sgd.nesterov = 0;
    struct optimizer_range plain = *r;
    plain.states[0] = NULL;
    return ops->sgd_update(ops, &plain, &sgd);
}

static int sgd_state_count(const struct optimizer_hparams *hp)
{
    return hp->momentum != 0.0f;
}

static zt_status lion_entry_update(const struct ops_backend *ops, const struct optimizer_range *r,
                                   const struct optimizer_hparams *hp)
{
    return ops->lion_update(ops, r, hp);
}

static zt_status adamw_entry_update(const struct ops_backend *ops, const struct optimizer_range *r,
                                    const struct optimizer_hparams *hp)
{
    return ops->adamw_update(ops, r, hp);
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
    {
        .name = "Adafactor",
        .n_states = 1,
        .state_count = adafactor_state_count,
        .state_names = {"exp_avg"},
        .whole_tensors = 1,
        .default_beta1 = 0.0,
        .default_beta2 = 0.0,
        .default_eps = 1e-30,
        .default_eps2 = 1e-3,
        .n_hparams = 10,
        .hparams = {OPT_HP_LR, OPT_HP_EPS, OPT_HP_EPS2, OPT_HP_CLIP_THRESHOLD, OPT_HP_DECAY_RATE,
                    OPT_HP_BETA1, OPT_HP_WEIGHT_DECAY, OPT_HP_SCALE_PARAMETER, OPT_HP_RELATIVE_STEP,
                    OPT_HP_WARMUP_INIT},
        .tensor_state_name = "exp_avg_sq_factors",
        .tensor_state_len = adafactor_state_len,
        .n_rounds = 2,
        .round_reduce = {OPTIMIZER_REDUCE_SUM, OPTIMIZER_REDUCE_SUM},
        .stats_len = adafactor_stats_len,
        .tensor_round = adafactor_entry_round,
        .tensor_apply = adafactor_entry_apply,
    },
    {
        .name = "AdamW8bit",
        .n_states = 2,
        .state_names = {"state1", "state2"},
        .state_dtype = {ZT_U8, ZT_U8},
        .whole_tensors = 1,
        .default_beta1 = 0.9,
        .default_beta2 = 0.999,
        .n_hparams = 6,
        .hparams = {OPT_HP_LR, OPT_HP_BETA1, OPT_HP_BETA2, OPT_HP_EPS, OPT_HP_WEIGHT_DECAY,
                    OPT_HP_MIN_8BIT_SIZE},
        .tensor_state_name = "absmax_and_fp32_states",
        .tensor_state_len = adamw8bit_state_len,
        .n_rounds = 2,
        .round_reduce = {OPTIMIZER_REDUCE_MAX, OPTIMIZER_REDUCE_SUM},
        .stats_len = adamw8bit_stats_len,
        .tensor_round = adamw8bit_entry_round,
        .tensor_apply = adamw8bit_entry_apply,
    },
    {
        /* LOMO (Lv et al. 2023): SGD fused into the backward, no state */
        .name = "LOMO",
        .n_states = 0,
        .fused_backward = 1,
        .default_beta1 = 0.9,
        .default_beta2 = 0.999,
        .n_hparams = 2,
        .hparams = {OPT_HP_LR, OPT_HP_WEIGHT_DECAY},
        .update = lomo_entry_update,
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

const struct optimizer_ops *optimizer_at(int i)
{
    return i >= 0 && (size_t)i < N_OPTIMIZERS ? &optimizers[i] : NULL;
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
    "lr",         "beta1",           "beta2",         "eps",         "weight_decay",
    "momentum",   "dampening",       "nesterov",      "eps2",        "clip_threshold",
    "decay_rate", "scale_parameter", "relative_step", "warmup_init", "min_8bit_size"};

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
    case OPT_HP_EPS2:
        return hp->eps2;
    case OPT_HP_CLIP_THRESHOLD:
        return hp->clip_threshold;
    case OPT_HP_DECAY_RATE:
        return hp->decay_rate;
    case OPT_HP_SCALE_PARAMETER:
        return hp->scale_parameter;
    case OPT_HP_RELATIVE_STEP:
        return hp->relative_step;
    case OPT_HP_WARMUP_INIT:
        return hp->warmup_init;
    case OPT_HP_MIN_8BIT_SIZE:
        return (double)hp->min_8bit_size;
    case OPT_HP_WEIGHT_DECAY:
    case OPT_HP_COUNT:
        break;
    }
    return hp->weight_decay;
}
