/* worker/cpu/engine_ops.c — the engine ops of the CPU backend: the generic
 * (plain C) set of the elementwise ones, the ops every instruction set
 * shares, and the blocked driver of the fused optimizer update.
 *
 * The generic ops are the device-independent functions of
 * worker/precision.h and worker/optim_elementwise.h called on host memory,
 * so the ZeRO engine computes the same bits through the table as it did
 * calling those functions directly. `scale` is a loop of its own: one fp32
 * multiply per element.
 *
 * Why blocks in cpu_range_update: the fused update must not stage a whole
 * range of fp32 gradients in memory (a write and a read of 4 bytes per
 * element, more than the 16-bit gradients themselves). A block of
 * RANGE_BLOCK elements is converted into a stack buffer that stays in L1,
 * the rule reads it from there, and the updated parameters are cast back
 * while they are still in cache; main memory sees each buffer once.
 */
#include "worker/cpu/ops_cpu_impl.h"

#include <string.h>

#include "worker/optimizer.h"
#include "worker/precision.h"

zt_status cpu_to_f32(const struct ops_backend *self, enum zt_dtype t, const void *src, float *dst,
                     size_t n)
{
    (void)self;
    precision_to_f32(t, src, dst, n);
    return ZT_OK;
}

zt_status cpu_from_f32(const struct ops_backend *self, enum zt_dtype t, const float *src, void *dst,
                       size_t n)
{
    (void)self;
    precision_from_f32(t, src, dst, n);
    return ZT_OK;
}

zt_status cpu_add_into(const struct ops_backend *self, enum zt_dtype t, void *dst, const void *src,
                       size_t n)
{
    (void)self;
    precision_add_into(t, dst, src, n);
    return ZT_OK;
}

zt_status cpu_sum_squares(const struct ops_backend *self, enum zt_dtype t, const void *src,
                          size_t n, double scale, double *out)
{
    (void)self;
    *out = precision_sum_squares(t, src, n, scale);
    return ZT_OK;
}

zt_status cpu_scale(const struct ops_backend *self, float *x, size_t n, float s)
{
    (void)self;
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
    return ZT_OK;
}

zt_status cpu_memset_zero(const struct ops_backend *self, void *p, size_t bytes)
{
    (void)self;
    memset(p, 0, bytes);
    return ZT_OK;
}

/* Elements per block of the fused update: 2 KiB of staged fp32 gradients,
 * a multiple of every vector width. */
enum { RANGE_BLOCK = 512 };

zt_status cpu_range_update(const struct ops_backend *self, const struct cpu_rule_kernels *k,
                           enum optim_rule rule, const struct optimizer_range *r,
                           const struct optimizer_hparams *hp)
{
    (void)self;
    const size_t gsz = zt_dtype_size(r->grad_dtype), wsz = zt_dtype_size(r->working_dtype);
    struct optim_consts c;
    float staged[RANGE_BLOCK];
    optim_consts_init(rule, hp, r->decay, r->gscale, &c);
    for (size_t i = 0; i < r->n; i += RANGE_BLOCK) {
        const size_t nb = r->n - i < RANGE_BLOCK ? r->n - i : RANGE_BLOCK;
        const void *g = (const char *)r->grads + i * gsz;
        if (r->grad_dtype != ZT_F32)
            ZT_TRY(k->to_f32(self, r->grad_dtype, g, staged, nb));
        float *states[OPTIMIZER_MAX_STATES];
        for (int j = 0; j < OPTIMIZER_MAX_STATES; j++)
            states[j] = r->states[j] ? r->states[j] + i : NULL;
        k->apply[rule](r->params + i, r->grad_dtype != ZT_F32 ? staged : g, states, nb, &c);
        if (r->working)
            ZT_TRY(k->from_f32(self, r->working_dtype, r->params + i, (char *)r->working + i * wsz,
                               nb));
    }
    return ZT_OK;
}

static const struct cpu_rule_kernels GENERIC = {
    .to_f32 = cpu_to_f32,
    .from_f32 = cpu_from_f32,
    .apply = {[OPTIM_ADAMW] = optim_adamw_apply,
              [OPTIM_ADAM] = optim_adam_apply,
              [OPTIM_SGD] = optim_sgd_apply,
              [OPTIM_LION] = optim_lion_apply},
};

zt_status cpu_adamw_update(const struct ops_backend *self, const struct optimizer_range *r,
                           const struct optimizer_hparams *hp)
{
    (void)self;
    return cpu_range_update(self, &GENERIC, OPTIM_ADAMW, r, hp);
}

zt_status cpu_adam_update(const struct ops_backend *self, const struct optimizer_range *r,
                          const struct optimizer_hparams *hp)
{
    (void)self;
    return cpu_range_update(self, &GENERIC, OPTIM_ADAM, r, hp);
}

zt_status cpu_sgd_update(const struct ops_backend *self, const struct optimizer_range *r,
                         const struct optimizer_hparams *hp)
{
    (void)self;
    return cpu_range_update(self, &GENERIC, OPTIM_SGD, r, hp);
}

zt_status cpu_lion_update(const struct ops_backend *self, const struct optimizer_range *r,
                          const struct optimizer_hparams *hp)
{
    (void)self;
    return cpu_range_update(self, &GENERIC, OPTIM_LION, r, hp);
}

zt_status cpu_adafactor_round(const struct ops_backend *self, int round,
                              const struct optimizer_piece *pc, const struct optimizer_hparams *hp)
{
    (void)self;
    adafactor_round(round, pc, hp);
    return ZT_OK;
}

zt_status cpu_adafactor_apply(const struct ops_backend *self, const struct optimizer_piece *pc,
                              const struct optimizer_hparams *hp)
{
    (void)self;
    adafactor_apply(pc, hp);
    return ZT_OK;
}

zt_status cpu_adamw8bit_round(const struct ops_backend *self, int round,
                              const struct optimizer_piece *pc, const struct optimizer_hparams *hp)
{
    (void)self;
    adamw8bit_round(round, pc, hp);
    return ZT_OK;
}

zt_status cpu_adamw8bit_apply(const struct ops_backend *self, const struct optimizer_piece *pc,
                              const struct optimizer_hparams *hp)
{
    (void)self;
    adamw8bit_apply(pc, hp);
    return ZT_OK;
}
