/* worker/cpu/vocab_parallel.c — the cross-entropy
 * with the vocabulary split over tensor-parallel ranks.
 *
 * Each rank holds the rows [v_lo, v_lo + Vp) of wte and so the same columns
 * of the logits; the full rows of logits (V floats per position, the
 * largest activation of the model) never exist anywhere. What a softmax
 * needs from the other columns is two numbers per row, the max and the sum
 * of exponentials, plus the target's logit, which only the rank owning it
 * can read: these ops compute each rank's share, the caller reduces them
 * between the ops, and the finish needs nothing more. The target's logit
 * travels in the same buffer as the sums (row_stats[2N]), with 0 from the
 * ranks that do not own it, so one SUM reduction carries both.
 *
 * The row pieces are crossentropy.c's (cpu_row_max and cpu_exp_sum in
 * ops_cpu_impl.h), the probs are scaled by the reciprocal of the sum as it
 * scales them, and the loss is its log(sum) - (x[target] - max); so a
 * single part gives crossentropy_forward's and crossentropy_backward's
 * numbers (bit for bit with GCC here; the test allows 1e-6), and with
 * several parts the only difference is that the row sum is a sum of
 * per-part sums.
 *
 * A padded vocabulary's padding columns (past Vr) are skipped by the max
 * and the sum and get probability 0, so its logits never matter and the
 * backward's row update adds nothing to them.
 *
 * The embedding's slice of the vocabulary is encoder.c's.
 */
#include "worker/cpu/ops_cpu_impl.h"

#include "common/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The row functions are CPU_KERNEL wrappers so that the inlined helpers are
 * cloned for AVX2 and AVX-512 (an omp parallel body would not be). */

CPU_KERNEL static float max_row(const float *x, int Vp)
{
    return cpu_row_max(x, Vp);
}

CPU_KERNEL static float exp_row(float *p, const float *x, float m, int Vp)
{
    return cpu_exp_sum(p, x, m, Vp);
}

CPU_KERNEL static void scale_row(float *p, float inv, int Vp)
{
#pragma omp simd
    for (int j = 0; j < Vp; j++)
        p[j] *= inv;
}

/* crossentropy.c's backward row; t is the target's local column, or < 0
 * when another rank owns it. */
CPU_KERNEL static void backward_row(float *d, const float *p, int t, float dloss, int Vp)
{
    float dt = t >= 0 ? d[t] : 0.0f; /* the target's term in one rounding, not two */
#pragma omp simd
    for (int j = 0; j < Vp; j++)
        d[j] += p[j] * dloss;
    if (t >= 0)
        d[t] = dt + (p[t] - 1.0f) * dloss;
}

/* Under 16 bits each op stages a row of each typed buffer it touches (at
 * most 2 Vp floats a thread), as crossentropy.c does. */
zt_status cpu_crossentropy_vocab_max(const struct ops_backend *self, enum zt_dtype t,
                                     float *row_max, const void *logits, int N, int Vp, int Vr)
{
    (void)self;
    ZT_ASSERT(Vp >= 1 && Vr >= 0 && Vr <= Vp);
    const size_t v = (size_t)Vp;
    CPU_STAGED_ROWS(t, v, "crossentropy_vocab_max", N, i, st, {
        row_max[i] = Vr > 0 ? max_row(cpu_widen(t, logits, (size_t)i * v, v, st), Vr) : -INFINITY;
    });
    return ZT_OK;
}
zt_status cpu_crossentropy_vocab_exp(const struct ops_backend *self, enum zt_dtype t, void *probs,
                                     float *row_stats, const void *logits, const float *row_max,
                                     const int32_t *targets, int N, int Vp, int Vr, int v_lo)
{
    (void)self;
    ZT_ASSERT(Vp >= 1 && Vr >= 0 && Vr <= Vp && v_lo >= 0);
    const size_t v = (size_t)Vp;
    CPU_STAGED_ROWS(t, 2 * v, "crossentropy_vocab_exp", N, i, st, {
        const float *x = cpu_widen(t, logits, (size_t)i * v, v, st + v);
        float *p = cpu_place(t, probs, (size_t)i * v, v, st, 0);
        float m = row_max[i];
        int tg = targets[i];
        row_stats[i] = Vr > 0 ? exp_row(p, x, m, Vr) : 0.0f;
        for (int j = Vr; j < Vp; j++) /* padding: no probability */
            p[j] = 0.0f;
        row_stats[N + i] = cpu_in_slice(tg, v_lo, Vr) ? x[tg - v_lo] - m : 0.0f;
        cpu_store(t, probs, (size_t)i * v, v, p);
    });
    return ZT_OK;
}
zt_status cpu_crossentropy_vocab_finish(const struct ops_backend *self, enum zt_dtype t,
                                        float *losses, void *probs, const float *row_stats,
                                        const int32_t *targets, int N, int Vp)
{
    (void)self;
    ZT_ASSERT(Vp >= 1);
    const size_t v = (size_t)Vp;
    CPU_STAGED_ROWS(t, v, "crossentropy_vocab_finish", N, i, st, {
        float s = row_stats[i];
        float *p = cpu_place(t, probs, (size_t)i * v, v, st, 1);
        scale_row(p, 1.0f / s, Vp);
        cpu_store(t, probs, (size_t)i * v, v, p);
        losses[i] = targets[i] < 0 ? 0.0f : logf(s) - row_stats[N + i];
    });
    return ZT_OK;
}
zt_status cpu_crossentropy_vocab_backward(const struct ops_backend *self, enum zt_dtype t,
                                          void *dlogits, const void *probs, const int32_t *targets,
                                          float dloss, int N, int Vp, int v_lo)
{
    (void)self;
    ZT_ASSERT(Vp >= 1 && v_lo >= 0);
    const size_t v = (size_t)Vp;
    CPU_STAGED_ROWS(t, 2 * v, "crossentropy_vocab_backward", N, i, st, {
        int tg = targets[i];
        if (tg >= 0) {
            float *d = cpu_place(t, dlogits, (size_t)i * v, v, st, 1);
            backward_row(d, cpu_widen(t, probs, (size_t)i * v, v, st + v),
                         cpu_in_slice(tg, v_lo, Vp) ? tg - v_lo : -1, dloss, Vp);
            cpu_store(t, dlogits, (size_t)i * v, v, d);
        }
    });
    return ZT_OK;
}