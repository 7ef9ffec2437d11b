/* worker/cpu/rmsnorm.c — RMSNorm over rows of C floats (the Llama family's
 * norm: no mean subtraction, no bias).
 *
 * The forward reads a row twice from L1, once for the mean square and once
 * for the output, with float sums kept per vector lane as in layernorm.c.
 * The output is (x * rstd) * w in that order, the order of Hugging Face's
 * LlamaRMSNorm in fp32.
 *
 * With xhat = x * rstd and g = w * dout, the backward is
 *   dinp = rstd * (g - xhat * mean(g * xhat)),  dweight = sum over rows of
 *   dout * xhat.
 * dinp is per row, so rows go to threads. dweight sums over every row:
 * column blocks go to threads in a second sweep, each block adding its
 * column sums into dweight once. Unlike layernorm.c this file has no fused
 * one-thread path: adding each row straight into dweight rounds differently
 * from adding a block's sum once whenever dweight does not start at zero
 * (gradient accumulation), and one path for every thread count keeps
 * dweight bit for bit the same. The price is one more read of dout and inp.
 */
#include "worker/cpu/ops_cpu_impl.h"

#include <math.h>
#include <stdlib.h>

enum { COL_BLOCK = 64 };

/* One row: writes o and the row's 1/rms. */
CPU_KERNEL static void forward_row(float *o, float *rstd, const float *x, const float *w, int C,
                                   float eps)
{
    float ss;
    CPU_ROW_SUM(ss, C, x[c] * x[c]);
    float rs = 1.0f / sqrtf(ss / (float)C + eps);
#pragma omp simd
    for (int c = 0; c < C; c++)
        o[c] = x[c] * rs * w[c];
    *rstd = rs;
}

/* Rows [0, N): out in t, 1/rms in fp32. */
static zt_status forward_rows(enum zt_dtype t, void *out, float *rstd, const void *inp,
                              const float *w, int N, int C, float eps)
{
    const size_t n = (size_t)C;
    CPU_STAGED_ROWS(t, 2 * n, "rmsnorm_forward", N, i, st, {
        float *o = cpu_place(t, out, (size_t)i * n, n, st, 0);
        forward_row(o, rstd + i, cpu_widen(t, inp, (size_t)i * n, n, st + n), w, C, eps);
        cpu_store(t, out, (size_t)i * n, n, o);
    });
    return ZT_OK;
}

zt_status cpu_rmsnorm_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                              float *rstd, const void *inp, const void *weight, int N, int C,
                              float eps)
{
    (void)self;
    const size_t n = (size_t)C;
    float *w_owned;
    const float *w;
    ZT_TRY(cpu_widen_shared(t, weight, n, "rmsnorm_forward", &w_owned, &w));
    zt_status s = forward_rows(t, out, rstd, inp, w, N, C, eps);
    free(w_owned);
    return s;
}
/* dinp for one row. */
CPU_KERNEL static void backward_row(float *dx, const float *dy, const float *x, const float *w,
                                    float rs, int C)
{
    float s;
    CPU_ROW_SUM(s, C, w[c] * dy[c] * (x[c] * rs));
    float m = s / (float)C;
#pragma omp simd
    for (int c = 0; c < C; c++)
        dx[c] += (w[c] * dy[c] - x[c] * rs * m) * rs;
}

/* dweight for columns [c0, c1) summed over all rows, added once. */
CPU_KERNEL static void weight_block(float *dw, enum zt_dtype t, const void *dout, const void *inp,
                                    const float *rstd, int N, int C, int c0, int c1)
{
    float acc[COL_BLOCK] = {0}, tdy[COL_BLOCK], tx[COL_BLOCK];
    int n = c1 - c0;
    for (int i = 0; i < N; i++) {
        const float *dy = cpu_widen(t, dout, (size_t)i * C + c0, (size_t)n, tdy);
        const float *x = cpu_widen(t, inp, (size_t)i * C + c0, (size_t)n, tx);
        float rs = rstd[i];
#pragma omp simd
        for (int c = 0; c < n; c++)
            acc[c] += x[c] * rs * dy[c];
    }
    for (int c = 0; c < n; c++)
        dw[c0 + c] += acc[c];
}

/* dinp for rows [0, N), in t. */
static zt_status backward_rows(enum zt_dtype t, void *dinp, const void *dout, const void *inp,
                               const float *w, const float *rstd, int N, int C)
{
    const size_t n = (size_t)C;
    CPU_STAGED_ROWS(t, 3 * n, "rmsnorm_backward", N, i, st, {
        const size_t at = (size_t)i * n;
        float *dx = cpu_place(t, dinp, at, n, st, 1);
        backward_row(dx, cpu_widen(t, dout, at, n, st + n), cpu_widen(t, inp, at, n, st + 2 * n), w,
                     rstd[i], C);
        cpu_store(t, dinp, at, n, dx);
    });
    return ZT_OK;
}

zt_status cpu_rmsnorm_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                               float *dweight, const void *dout, const void *inp,
                               const void *weight, const float *rstd, int N, int C)
{
    (void)self;
    const size_t n = (size_t)C;
    float *w_owned;
    const float *w;
    ZT_TRY(cpu_widen_shared(t, weight, n, "rmsnorm_backward", &w_owned, &w));
    zt_status s = backward_rows(t, dinp, dout, inp, w, rstd, N, C);
    free(w_owned);
    ZT_TRY(s);
    if (!dweight)
        return ZT_OK;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += COL_BLOCK)
        weight_block(dweight, t, dout, inp, rstd, N, C, c0,
                     c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C);
    return ZT_OK;
}