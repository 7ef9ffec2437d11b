/* worker/cpu/encoder.c — token plus position embedding, forward and backward.
 *
 * The forward is a gather and an add per row, so rows are spread over the
 * OpenMP threads. The backward scatters into wte rows picked by the tokens,
 * and a token may repeat within a batch: threads therefore split the C
 * columns instead of the rows, so that no two of them ever touch the same
 * float and the result does not depend on the thread count.
 *
 * Without position embeddings (wpe, dwpe NULL: the Llama family, whose
 * positions are rotary) the forward is the gather alone and the backward
 * the scatter alone; the test is per row, outside the vector loops.
 *
 * Under tensor parallelism a rank holds the rows [v_lo, v_lo + Vp) of wte
 * (vocabulary-parallel): the forward gives a zero row (plus the positions)
 * for a token outside the slice, so that summed over the ranks each
 * position gets its token's row exactly once, and the backward skips it.
 * The whole vocabulary is the slice [0, INT_MAX).
 */
#include "worker/cpu/ops_cpu_impl.h"

#include <limits.h>
#include <string.h>

/* Columns per thread task in the backward: a cache line's worth keeps
 * threads off each other's lines. */
enum { COL_BLOCK = 64 };

zt_status cpu_encoder_forward_vocab(const struct ops_backend *self, float *out,
                                    const int32_t *tokens, const float *wte_part, const float *wpe,
                                    int B, int T, int C, int v_lo, int Vp)
{
    (void)self;
    ZT_ASSERT(Vp >= 1 && v_lo >= 0);
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int tok = tokens[bt];
        float *o = out + (size_t)bt * C;
        const float *p = wpe ? wpe + (size_t)(bt % T) * C : NULL;
        if (!cpu_in_slice(tok, v_lo, Vp)) {
            if (p)
                memcpy(o, p, (size_t)C * sizeof(float));
            else
                memset(o, 0, (size_t)C * sizeof(float));
            continue;
        }
        const float *e = wte_part + (size_t)(tok - v_lo) * C;
        if (!p) {
            memcpy(o, e, (size_t)C * sizeof(float));
            continue;
        }
#pragma omp simd
        for (int c = 0; c < C; c++)
            o[c] = e[c] + p[c];
    }
    return ZT_OK;
}

zt_status cpu_encoder_backward_vocab(const struct ops_backend *self, float *dwte_part, float *dwpe,
                                     const float *dout, const int32_t *tokens, int B, int T, int C,
                                     int v_lo, int Vp)
{
    (void)self;
    ZT_ASSERT(Vp >= 1 && v_lo >= 0);
    if (!dwte_part)
        return ZT_OK;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += COL_BLOCK) {
        int c1 = c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C;
        for (int bt = 0; bt < B * T; bt++) {
            const float *d = dout + (size_t)bt * C;
            int tok = tokens[bt];
            if (cpu_in_slice(tok, v_lo, Vp)) {
                float *we = dwte_part + (size_t)(tok - v_lo) * C;
#pragma omp simd
                for (int c = c0; c < c1; c++)
                    we[c] += d[c];
            }
            if (!dwpe)
                continue;
            float *pe = dwpe + (size_t)(bt % T) * C;
#pragma omp simd
            for (int c = c0; c < c1; c++)
                pe[c] += d[c];
        }
    }
    return ZT_OK;
}

/* The whole vocabulary is the slice that holds every token. */
zt_status cpu_encoder_forward(const struct ops_backend *self, float *out, const int32_t *tokens,
                              const float *wte, const float *wpe, int B, int T, int C)
{
    (void)self;
    return cpu_encoder_forward_vocab(self, out, tokens, wte, wpe, B, T, C, 0, INT_MAX);
}

zt_status cpu_encoder_backward(const struct ops_backend *self, float *dwte, float *dwpe,
                               const float *dout, const int32_t *tokens, int B, int T, int C)
{
    (void)self;
    return cpu_encoder_backward_vocab(self, dwte, dwpe, dout, tokens, B, T, C, 0, INT_MAX);
}
