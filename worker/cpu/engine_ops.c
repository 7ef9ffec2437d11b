/* worker/cpu/engine_ops.c — the engine ops of the CPU backend.
 *
 * Each op is the device-independent function of worker/precision.h or
 * worker/optimizer.h called on host memory, so the ZeRO engine computes the
 * same bits through the table as it did calling those functions directly.
 * Only `scale` is a loop of its own: the unscale the engine runs before the
 * update, one fp32 multiply per element.
 */
#include "worker/cpu/ops_cpu_impl.h"

#include <string.h>

#include "worker/optimizer.h"
#include "worker/precision.h"

zt_status cpu_to_f32(enum zt_dtype t, const void *src, float *dst, size_t n)
{
    precision_to_f32(t, src, dst, n);
    return ZT_OK;
}

zt_status cpu_from_f32(enum zt_dtype t, const float *src, void *dst, size_t n)
{
    precision_from_f32(t, src, dst, n);
    return ZT_OK;
}

zt_status cpu_add_into(enum zt_dtype t, void *dst, const void *src, size_t n)
{
    precision_add_into(t, dst, src, n);
    return ZT_OK;
}

zt_status cpu_sum_squares(enum zt_dtype t, const void *src, size_t n, double scale, double *out)
{
    *out = precision_sum_squares(t, src, n, scale);
    return ZT_OK;
}

zt_status cpu_scale(float *x, size_t n, float s)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
    return ZT_OK;
}

zt_status cpu_memset_zero(void *p, size_t bytes)
{
    memset(p, 0, bytes);
    return ZT_OK;
}

zt_status cpu_adam_update(float *params, const float *grads, float *m, float *v, size_t n,
                          float decay, const struct optimizer_hparams *hp)
{
    adam_update(params, grads, m, v, n, decay, hp);
    return ZT_OK;
}

zt_status cpu_sgd_update(float *params, const float *grads, float *buf, size_t n, float decay,
                         const struct optimizer_hparams *hp)
{
    sgd_update(params, grads, buf, n, decay, hp);
    return ZT_OK;
}

zt_status cpu_lion_update(float *params, const float *grads, float *m, size_t n, float decay,
                          const struct optimizer_hparams *hp)
{
    lion_update(params, grads, m, n, decay, hp);
    return ZT_OK;
}

zt_status cpu_adamw_update(float *params, const float *grads, float *m, float *v, size_t n,
                           float decay, const struct optimizer_hparams *hp)
{
    adamw_update(params, grads, m, v, n, decay, hp);
    return ZT_OK;
}

zt_status cpu_adafactor_round(int round, const struct optimizer_piece *pc,
                              const struct optimizer_hparams *hp)
{
    adafactor_round(round, pc, hp);
    return ZT_OK;
}

zt_status cpu_adafactor_apply(const struct optimizer_piece *pc, const struct optimizer_hparams *hp)
{
    adafactor_apply(pc, hp);
    return ZT_OK;
}

zt_status cpu_adamw8bit_round(int round, const struct optimizer_piece *pc,
                              const struct optimizer_hparams *hp)
{
    adamw8bit_round(round, pc, hp);
    return ZT_OK;
}

zt_status cpu_adamw8bit_apply(const struct optimizer_piece *pc, const struct optimizer_hparams *hp)
{
    adamw8bit_apply(pc, hp);
    return ZT_OK;
}
