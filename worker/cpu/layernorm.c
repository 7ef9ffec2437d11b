/* worker/cpu/layernorm.c — LayerNorm over rows of C floats.
 *
 * A row (at most a few thousand floats) sits in L1 once read, so the forward
 * reads it three times from cache: the mean, then the variance as the mean
 * of squared deviations (the two-pass form: no cancellation, unlike
 * E[x^2] - E[x]^2), then the output. Memory sees one read and one write per
 * element, and all sums stay in float: `omp simd` keeps one partial sum per
 * vector lane, which bounds the rounding growth for the C of GPT-2 widths.
 *
 * The backward needs, per row, the sums of w*dout and w*dout*xhat before it
 * can write dinp, and accumulates dweight and dbias across all rows. Rows
 * go to threads for dinp; column blocks go to threads for the parameter
 * gradients in a second sweep, each block's column sums added once. One
 * thread does the same (rather than adding each row straight into dweight
 * in the first sweep), because the two orders round differently whenever
 * the gradients do not start at zero (accumulation over micro steps): the
 * price of bit-identical results on any thread count is one more read of
 * dout and inp, as in rmsnorm.c.
 */
#include "worker/cpu/ops_cpu_impl.h"

#include <math.h>
#include <stdlib.h>

enum { COL_BLOCK = 64 };

static const float LN_EPS = 1e-5f;

/* One row: writes o, and the row's mean and 1/std. */
CPU_KERNEL static void forward_row(float *o, float *mean, float *rstd, const float *x,
                                   const float *w, const float *b, int C)
{
    float s, v;
    CPU_ROW_SUM(s, C, x[c]);
    float m = s / (float)C;
    CPU_ROW_SUM(v, C, (x[c] - m) * (x[c] - m));
    float rs = 1.0f / sqrtf(v / (float)C + LN_EPS);
#pragma omp simd
    for (int c = 0; c < C; c++)
        o[c] = (x[c] - m) * rs * w[c] + b[c];
    *mean = m;
    *rstd = rs;
}

/* Rows [0, N): out in t, statistics in fp32. */
static zt_status forward_rows(enum zt_dtype t, void *out, float *mean, float *rstd, const void *inp,
                              const float *w, const float *b, int N, int C)
{
    const size_t n = (size_t)C;
    CPU_STAGED_ROWS(t, 2 * n, "layernorm_forward", N, i, st, {
        float *o = cpu_place(t, out, (size_t)i * n, n, st, 0);
        forward_row(o, mean + i, rstd + i, cpu_widen(t, inp, (size_t)i * n, n, st + n), w, b, C);
        cpu_store(t, out, (size_t)i * n, n, o);
    });
    return ZT_OK;
}

zt_status cpu_layernorm_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                float *mean, float *rstd, const void *inp, const void *weight,
                                const void *bias, int N, int C)
{
    (void)self;
    const size_t n = (size_t)C;
    float *w_owned, *b_owned = NULL;
    const float *w, *b;
    ZT_TRY(cpu_widen_shared(t, weight, n, "layernorm_forward", &w_owned, &w));
    zt_status s = cpu_widen_shared(t, bias, n, "layernorm_forward", &b_owned, &b);
    if (s == ZT_OK)
        s = forward_rows(t, out, mean, rstd, inp, w, b, N, C);
    free(w_owned);
    free(b_owned);
    return s;
}

/* dinp for one row. */
CPU_KERNEL static void backward_row(float *dx, const float *dy, const float *x, const float *w,
                                    float m, float rs, int C)
{
    float sum_g, sum_gx;
    CPU_ROW_SUM(sum_g, C, w[c] * dy[c]);
    CPU_ROW_SUM(sum_gx, C, w[c] * dy[c] * (x[c] - m) * rs);
    float mg = sum_g / (float)C, mgx = sum_gx / (float)C;
#pragma omp simd
    for (int c = 0; c < C; c++) {
        float xhat = (x[c] - m) * rs;
        dx[c] += (w[c] * dy[c] - mg - xhat * mgx) * rs;
    }
}

/* dweight/dbias for columns [c0, c1) summed over all rows, added once. */
CPU_KERNEL static void param_block(float *dw, float *db, enum zt_dtype t, const void *dout,
                                   const void *inp, const float *mean, const float *rstd, int N,
                                   int C, int c0, int c1)
{
    float aw[COL_BLOCK] = {0}, ab[COL_BLOCK] = {0}, tdy[COL_BLOCK], tx[COL_BLOCK];
    int n = c1 - c0;
    for (int i = 0; i < N; i++) {
        const float *dy = cpu_widen(t, dout, (size_t)i * C + c0, (size_t)n, tdy);
        const float *x = cpu_widen(t, inp, (size_t)i * C + c0, (size_t)n, tx);
        float m = mean[i], rs = rstd[i];
#pragma omp simd
        for (int c = 0; c < n; c++) {
            aw[c] += (x[c] - m) * rs * dy[c];
            ab[c] += dy[c];
        }
    }
    for (int c = 0; c < n; c++) {
        dw[c0 + c] += aw[c];
        db[c0 + c] += ab[c];
    }
}

/* dinp for rows [0, N), in t. */
static zt_status backward_rows(enum zt_dtype t, void *dinp, const void *dout, const void *inp,
                               const float *w, const float *mean, const float *rstd, int N, int C)
{
    const size_t n = (size_t)C;
    CPU_STAGED_ROWS(t, 3 * n, "layernorm_backward", N, i, st, {
        const size_t at = (size_t)i * n;
        float *dx = cpu_place(t, dinp, at, n, st, 1);
        backward_row(dx, cpu_widen(t, dout, at, n, st + n), cpu_widen(t, inp, at, n, st + 2 * n), w,
                     mean[i], rstd[i], C);
        cpu_store(t, dinp, at, n, dx);
    });
    return ZT_OK;
}

zt_status cpu_layernorm_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                                 float *dweight, float *dbias, const void *dout, const void *inp,
                                 const void *weight, const float *mean, const float *rstd, int N,
                                 int C)
{
    (void)self;
    const size_t n = (size_t)C;
    float *w_owned;
    const float *w;
    ZT_TRY(cpu_widen_shared(t, weight, n, "layernorm_backward", &w_owned, &w));
    zt_status s = backward_rows(t, dinp, dout, inp, w, mean, rstd, N, C);
    free(w_owned);
    ZT_TRY(s);
    if (!dweight)
        return ZT_OK;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += COL_BLOCK)
        param_block(dweight, dbias, t, dout, inp, mean, rstd, N, C, c0,
                    c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C);
    return ZT_OK;
}