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

/* o[0..C) = e + p, spans of CPU_STAGE widened and rounded under 16 bits. */
static void add_rows(enum zt_dtype t, void *out, size_t o, const void *wte, size_t e,
                     const void *wpe, size_t p, int C)
{
    for (int c0 = 0; c0 < C; c0 += CPU_STAGE) {
        float to[CPU_STAGE], te[CPU_STAGE], tp[CPU_STAGE];
        const int n = C - c0 < CPU_STAGE ? C - c0 : CPU_STAGE;
        const float *x = cpu_widen(t, wte, e + c0, n, te), *y = cpu_widen(t, wpe, p + c0, n, tp);
        float *z = cpu_place(t, out, o + c0, n, to, 0);
#pragma omp simd
        for (int c = 0; c < n; c++)
            z[c] = x[c] + y[c];
        cpu_store(t, out, o + c0, n, z);
    }
}

zt_status cpu_encoder_forward_vocab(const struct ops_backend *self, enum zt_dtype t, void *out,
                                    const int32_t *tokens, const void *wte_part, const void *wpe,
                                    int B, int T, int C, int v_lo, int Vp)
{
    (void)self;
    ZT_ASSERT(Vp >= 1 && v_lo >= 0);
    const size_t row = (size_t)C * zt_dtype_size(t);
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int tok = tokens[bt];
        const size_t o = (size_t)bt * C, p = (size_t)(bt % T) * C;
        const int in_slice = cpu_in_slice(tok, v_lo, Vp);
        /* A copy needs no rounding: the row is already of type t. */
        if (!in_slice || !wpe) {
            const void *src = in_slice ? cpu_elem(t, wte_part, (size_t)(tok - v_lo) * C)
                              : wpe    ? cpu_elem(t, wpe, p)
                                       : NULL;
            if (src)
                memcpy(cpu_elem(t, out, o), src, row);
            else
                memset(cpu_elem(t, out, o), 0, row);
            continue;
        }
        add_rows(t, out, o, wte_part, (size_t)(tok - v_lo) * C, wpe, p, C);
    }
    return ZT_OK;
}

zt_status cpu_encoder_backward_vocab(const struct ops_backend *self, enum zt_dtype t,
                                     float *dwte_part, float *dwpe, const void *dout,
                                     const int32_t *tokens, int B, int T, int C, int v_lo, int Vp)
{
    (void)self;
    ZT_ASSERT(Vp >= 1 && v_lo >= 0);
    if (!dwte_part)
        return ZT_OK;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += COL_BLOCK) {
        int c1 = c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C;
        float tmp[COL_BLOCK];
        for (int bt = 0; bt < B * T; bt++) {
            const float *d = cpu_widen(t, dout, (size_t)bt * C + c0, (size_t)(c1 - c0), tmp);
            int tok = tokens[bt];
            if (cpu_in_slice(tok, v_lo, Vp)) {
                float *we = dwte_part + (size_t)(tok - v_lo) * C + c0;
#pragma omp simd
                for (int c = 0; c < c1 - c0; c++)
                    we[c] += d[c];
            }
            if (!dwpe)
                continue;
            float *pe = dwpe + (size_t)(bt % T) * C + c0;
#pragma omp simd
            for (int c = 0; c < c1 - c0; c++)
                pe[c] += d[c];
        }
    }
    return ZT_OK;
}

zt_status cpu_encoder_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                              const int32_t *tokens, const void *wte, const void *wpe, int B, int T,
                              int C)
{
    return cpu_encoder_forward_vocab(self, t, out, tokens, wte, wpe, B, T, C, 0, INT_MAX);
}

zt_status cpu_encoder_backward(const struct ops_backend *self, enum zt_dtype t, float *dwte,
                               float *dwpe, const void *dout, const int32_t *tokens, int B, int T,
                               int C)
{
    return cpu_encoder_backward_vocab(self, t, dwte, dwpe, dout, tokens, B, T, C, 0, INT_MAX);
}
