/* worker/cpu/crossentropy.c — fused softmax and cross-entropy over the
 * vocabulary.
 *
 * One row of logits (V floats, 200 KB for GPT-2's vocabulary) stays in L2
 * while the forward reads it for the max, then writes e^(x - max) into probs
 * while summing, then scales probs by 1/sum. The loss is taken from the
 * log-sum-exp, log(sum) - (x[target] - max), not from log(probs[target]),
 * so it stays finite and exact when the target's probability underflows.
 *
 * The sum over V terms is kept in float but blocked (cpu_exp_sum in
 * ops_cpu_impl.h, which the vocabulary-parallel ops share): each block of
 * CPU_SUM_BLOCK terms is summed with one partial per vector lane, then the
 * block sums are added; the rounding error grows with the block count plus
 * the block length over the lane count (a few hundred ulps at worst for
 * V = 50257, typically a few), instead of with V.
 *
 * A negative target marks a position that is not a prediction target (a
 * prompt token or padding under a loss mask): the forward still writes
 * its softmax, so every row of probs is defined, but its loss is 0 and the
 * backward leaves its row of dlogits alone.
 */
#include "worker/cpu/ops_cpu_impl.h"

#include "common/status.h"

#include <math.h>
#include <stdlib.h>

/* Softmax of one row into p; returns the row's loss. */
CPU_KERNEL static float forward_row(float *p, const float *x, int t, int V)
{
    float m = cpu_row_max(x, V);
    float s = cpu_exp_sum(p, x, m, V);
    float inv = 1.0f / s;
#pragma omp simd
    for (int j = 0; j < V; j++)
        p[j] *= inv;
    return logf(s) - (x[t] - m);
}

CPU_KERNEL static void backward_row(float *d, const float *p, int t, float dloss, int V)
{
    float dt = d[t]; /* the target's term in one rounding, not two */
#pragma omp simd
    for (int j = 0; j < V; j++)
        d[j] += p[j] * dloss;
    d[t] = dt + (p[t] - 1.0f) * dloss;
}

/* Under 16 bits a row of logits and of probs is staged (2V floats a
 * thread). */
zt_status cpu_crossentropy_forward(const struct ops_backend *self, enum zt_dtype t, float *losses,
                                   void *probs, const void *logits, const int32_t *targets, int N,
                                   int V)
{
    (void)self;
    const size_t v = (size_t)V;
    CPU_STAGED_ROWS(t, 2 * v, "crossentropy_forward", N, i, st, {
        int tg = targets[i];
        ZT_ASSERT(tg < V);
        float *p = cpu_place(t, probs, (size_t)i * v, v, st, 0);
        float loss =
            forward_row(p, cpu_widen(t, logits, (size_t)i * v, v, st + v), tg < 0 ? 0 : tg, V);
        cpu_store(t, probs, (size_t)i * v, v, p);
        losses[i] = tg < 0 ? 0.0f : loss;
    });
    return ZT_OK;
}
zt_status cpu_crossentropy_backward(const struct ops_backend *self, enum zt_dtype t, void *dlogits,
                                    const void *probs, const int32_t *targets, float dloss, int N,
                                    int V)
{
    (void)self;
    const size_t v = (size_t)V;
    CPU_STAGED_ROWS(t, 2 * v, "crossentropy_backward", N, i, st, {
        int tg = targets[i];
        ZT_ASSERT(tg < V);
        if (tg >= 0) {
            float *d = cpu_place(t, dlogits, (size_t)i * v, v, st, 1);
            backward_row(d, cpu_widen(t, probs, (size_t)i * v, v, st + v), tg, dloss, V);
            cpu_store(t, dlogits, (size_t)i * v, v, d);
        }
    });
    return ZT_OK;
}