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

zt_status cpu_crossentropy_forward(const struct ops_backend *self, float *losses, float *probs,
                                   const float *logits, const int32_t *targets, int N, int V)
{
    (void)self;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        int t = targets[i];
        ZT_ASSERT(t < V);
        float loss = forward_row(probs + (size_t)i * V, logits + (size_t)i * V, t < 0 ? 0 : t, V);
        losses[i] = t < 0 ? 0.0f : loss;
    }
    return ZT_OK;
}

zt_status cpu_crossentropy_backward(const struct ops_backend *self, float *dlogits,
                                    const float *probs, const int32_t *targets, float dloss, int N,
                                    int V)
{
    (void)self;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        int t = targets[i];
        ZT_ASSERT(t < V);
        if (t >= 0)
            backward_row(dlogits + (size_t)i * V, probs + (size_t)i * V, t, dloss, V);
    }
    return ZT_OK;
}
