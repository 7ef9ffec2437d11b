/* worker/precision.c — see precision.h. */
#include "precision.h"

#include <math.h>
#include <string.h>

#include "../common/half.h"
#include "../common/status.h"

void precision_to_f32(enum zt_dtype t, const void *src, float *dst, size_t n)
{
    const uint16_t *h = src;
    switch (t) {
    case ZT_F32:
        memmove(dst, src, n * sizeof(float));
        return;
    case ZT_BF16:
        for (size_t i = 0; i < n; i++)
            dst[i] = zt_bf16_to_f32(h[i]);
        return;
    case ZT_F16:
        for (size_t i = 0; i < n; i++)
            dst[i] = zt_f16_to_f32(h[i]);
        return;
    default:
        ZT_ASSERT(0 && "not a storage precision");
    }
}

void precision_from_f32(enum zt_dtype t, const float *src, void *dst, size_t n)
{
    uint16_t *h = dst;
    switch (t) {
    case ZT_F32:
        memmove(dst, src, n * sizeof(float));
        return;
    case ZT_BF16:
        for (size_t i = 0; i < n; i++)
            h[i] = zt_f32_to_bf16(src[i]);
        return;
    case ZT_F16:
        for (size_t i = 0; i < n; i++)
            h[i] = zt_f32_to_f16(src[i]);
        return;
    default:
        ZT_ASSERT(0 && "not a storage precision");
    }
}

static float load(enum zt_dtype t, const void *p, size_t i)
{
    if (t == ZT_F32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == ZT_BF16 ? zt_bf16_to_f32(h) : zt_f16_to_f32(h);
}

void precision_add_into(enum zt_dtype t, void *dst, const void *src, size_t n)
{
    if (t == ZT_F32) {
        float *d = dst;
        const float *s = src;
        for (size_t i = 0; i < n; i++)
            d[i] += s[i];
        return;
    }
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++) {
        float v = load(t, dst, i) + load(t, src, i);
        d[i] = t == ZT_BF16 ? zt_f32_to_bf16(v) : zt_f32_to_f16(v);
    }
}

double precision_sum_squares(enum zt_dtype t, const void *src, size_t n, double scale)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        double v = (double)load(t, src, i) * scale;
        s += v * v;
    }
    return s;
}

void loss_scaler_init_static(struct loss_scaler *s, double scale)
{
    memset(s, 0, sizeof *s);
    s->scale = scale;
    s->min_scale = scale;
}

void loss_scaler_init_dynamic(struct loss_scaler *s, int initial_power, int window, int hysteresis,
                              double min_scale)
{
    memset(s, 0, sizeof *s);
    s->dynamic = 1;
    s->scale = ldexp(1.0, initial_power);
    s->min_scale = min_scale;
    s->window = window;
    s->hysteresis = hysteresis;
    s->hysteresis_left = hysteresis;
}

void loss_scaler_update(struct loss_scaler *s, int overflow)
{
    if (!s->dynamic)
        return;
    if (overflow) {
        s->good_steps = 0;
        if (s->hysteresis_left > 1) {
            s->hysteresis_left--;
            return;
        }
        s->scale = fmax(s->scale / 2.0, s->min_scale);
        return;
    }
    if (++s->good_steps % s->window == 0)
        s->scale *= 2.0;
}

int loss_scaler_at_floor(const struct loss_scaler *s)
{
    return s->dynamic && s->hysteresis_left <= 1 && s->scale <= s->min_scale;
}
