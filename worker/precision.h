/* worker/precision.h — storage precision of the model states and the fp16
 * loss scaler: device-independent math that every backend and every ZeRO
 * stage shares.
 *
 * Mixed precision keeps working parameters and gradients in 16 bits (bf16
 * or fp16, 2 bytes each) and the fp32 master copy and AdamW state in the
 * rank's shard. Conversions round to nearest even (common/half.h); a value
 * beyond fp16's range becomes infinity, which is how an fp16 overflow shows
 * itself to the loss scaler.
 */
#ifndef ZT_WORKER_PRECISION_H
#define ZT_WORKER_PRECISION_H

#include <stddef.h>
#include <stdint.h>

#include "../common/dtype.h"

/* dst[i] = src[i] as float, for t = ZT_F32, ZT_BF16 or ZT_F16. */
void precision_to_f32(enum zt_dtype t, const void *src, float *dst, size_t n);
/* dst[i] = src[i] rounded to t. */
void precision_from_f32(enum zt_dtype t, const float *src, void *dst, size_t n);
/* dst[i] = round_t(dst[i] + src[i]), the sum taken in fp32. */
void precision_add_into(enum zt_dtype t, void *dst, const void *src, size_t n);
/* Sum of squares of src[i] * scale, accumulated in double. */
double precision_sum_squares(enum zt_dtype t, const void *src, size_t n, double scale);

/* fp16 dynamic loss scaling with DeepSpeed's rules: an overflow skips the
 * step; the first `hysteresis` - 1 overflows only use up the hysteresis,
 * every later one halves the scale (DeepSpeed does not re-arm it), never
 * below min_scale; after `window` clean steps in a row the scale doubles. A static scaler (fixed
 * scale, or bf16/fp32 with scale 1) never changes. */
struct loss_scaler {
    int dynamic;
    double scale, min_scale;
    int window, hysteresis, hysteresis_left;
    long good_steps; /* clean steps since the last overflow or doubling */
};

void loss_scaler_init_static(struct loss_scaler *s, double scale);
void loss_scaler_init_dynamic(struct loss_scaler *s, int initial_power, int window, int hysteresis,
                              double min_scale);
/* Records the outcome of a step (overflow: the step was skipped). */
void loss_scaler_update(struct loss_scaler *s, int overflow);
/* Whether an overflow now would have to lower a dynamic scale below
 * min_scale: the scale is at its minimum and the hysteresis is used up.
 * DeepSpeed stops the run there ("Current loss scale already at minimum");
 * every later step would be skipped too. */
int loss_scaler_at_floor(const struct loss_scaler *s);

#endif
