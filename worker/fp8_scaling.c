/* worker/fp8_scaling.c — see fp8_scaling.h. */
#include "fp8_scaling.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

zt_status fp8_scaling_create(const struct fp8_recipe *r, int n_blocks, struct fp8_scaling **out)
{
    ZT_ASSERT(r->amax_history_len >= 1 && r->margin >= 0 && n_blocks >= 1);
    *out = NULL;
    struct fp8_scaling *s = calloc(1, sizeof *s);
    const size_t n = (size_t)n_blocks * FP8_GEMMS * FP8_OPERANDS;
    if (s) {
        s->scale = malloc(n * sizeof *s->scale);
        s->scale_inv = malloc(n * sizeof *s->scale_inv);
        s->amax = calloc(n, sizeof *s->amax);
        s->history = calloc((size_t)r->amax_history_len * n, sizeof *s->history);
    }
    if (!s || !s->scale || !s->scale_inv || !s->amax || !s->history) {
        fp8_scaling_destroy(s);
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the fp8 scaling state");
    }
    s->recipe = *r;
    s->n_blocks = n_blocks;
    s->n = n;
    s->grad_divisor = 1.0f;
    for (size_t i = 0; i < n; i++)
        s->scale[i] = s->scale_inv[i] = 1.0f;
    *out = s;
    return ZT_OK;
}

void fp8_scaling_destroy(struct fp8_scaling *s)
{
    if (!s)
        return;
    free(s->scale);
    free(s->scale_inv);
    free(s->amax);
    free(s->history);
    free(s);
}

enum fp8_format fp8_operand_format(const struct fp8_recipe *r, enum fp8_operand o)
{
    return o == FP8_GRAD_OUTPUT && r->format == FP8_RECIPE_HYBRID ? FP8_E5M2 : FP8_E4M3;
}

void fp8_scaling_record(struct fp8_scaling *s, size_t i, float a)
{
    ZT_ASSERT(i < s->n);
    if (!isfinite(a))
        a = INFINITY;
    if (a > s->amax[i])
        s->amax[i] = a;
}

float fp8_scale_of(const struct fp8_recipe *r, enum fp8_format f, float a, float prev)
{
    if (!(a > 0.0f) || !isfinite(a))
        return prev;
    const float sf = ldexpf(fp8_max_finite(f) / a, -r->margin);
    return isinf(sf) ? FLT_MAX : sf;
}

/* The amax tensor i's next scale comes from, history row 0 holding this
 * step's. */
static float amax_for_scale(const struct fp8_scaling *s, size_t i)
{
    if (s->recipe.amax_compute_algo == FP8_AMAX_MOST_RECENT)
        return s->history[i];
    float m = 0.0f;
    for (int row = 0; row < s->recipe.amax_history_len; row++) {
        const float a = s->history[(size_t)row * s->n + i];
        m = a > m ? a : m; /* +inf wins, as it must */
    }
    return m;
}

void fp8_scaling_update(struct fp8_scaling *s)
{
    const size_t n = s->n, len = (size_t)s->recipe.amax_history_len;
    memcpy(s->history, s->amax, n * sizeof *s->history);
    for (size_t i = 0; i < n; i++) {
        const enum fp8_format f =
            fp8_operand_format(&s->recipe, (enum fp8_operand)(i % FP8_OPERANDS));
        s->scale[i] = fp8_scale_of(&s->recipe, f, amax_for_scale(s, i), s->scale[i]);
        s->scale_inv[i] = 1.0f / s->scale[i];
    }
    /* roll the rows up by one (row 0 goes last), then row 0 starts empty */
    if (len > 1) {
        memcpy(s->amax, s->history, n * sizeof *s->amax); /* row 0, kept aside */
        memmove(s->history, s->history + n, (len - 1) * n * sizeof *s->history);
        memcpy(s->history + (len - 1) * n, s->amax, n * sizeof *s->history);
    }
    memset(s->history, 0, n * sizeof *s->history);
    memset(s->amax, 0, n * sizeof *s->amax);
}

size_t fp8_scaling_state_len(const struct fp8_scaling *s)
{
    return s->n * (1 + (size_t)s->recipe.amax_history_len);
}

void fp8_scaling_get_state(const struct fp8_scaling *s, float *out)
{
    memcpy(out, s->scale, s->n * sizeof *out);
    memcpy(out + s->n, s->history, s->n * (size_t)s->recipe.amax_history_len * sizeof *out);
}

void fp8_scaling_set_state(struct fp8_scaling *s, const float *in)
{
    memcpy(s->scale, in, s->n * sizeof *s->scale);
    memcpy(s->history, in + s->n, s->n * (size_t)s->recipe.amax_history_len * sizeof *s->history);
    for (size_t i = 0; i < s->n; i++)
        s->scale_inv[i] = 1.0f / s->scale[i];
    memset(s->amax, 0, s->n * sizeof *s->amax);
}
