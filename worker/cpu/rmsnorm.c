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

zt_status cpu_rmsnorm_forward(const struct ops_backend *self, float *out, float *rstd,
                              const float *inp, const float *weight, int N, int C, float eps)
{
    (void)self;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++)
        forward_row(out + (size_t)i * C, rstd + i, inp + (size_t)i * C, weight, C, eps);
    return ZT_OK;
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
CPU_KERNEL static void weight_block(float *dw, const float *dout, const float *inp,
                                    const float *rstd, int N, int C, int c0, int c1)
{
    float acc[COL_BLOCK] = {0};
    int n = c1 - c0;
    for (int i = 0; i < N; i++) {
        const float *dy = dout + (size_t)i * C + c0;
        const float *x = inp + (size_t)i * C + c0;
        float rs = rstd[i];
#pragma omp simd
        for (int c = 0; c < n; c++)
            acc[c] += x[c] * rs * dy[c];
    }
    for (int c = 0; c < n; c++)
        dw[c0 + c] += acc[c];
}

zt_status cpu_rmsnorm_backward(const struct ops_backend *self, float *dinp, float *dweight,
                               const float *dout, const float *inp, const float *weight,
                               const float *rstd, int N, int C)
{
    (void)self;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int i = 0; i < N; i++)
            backward_row(dinp + (size_t)i * C, dout + (size_t)i * C, inp + (size_t)i * C, weight,
                         rstd[i], C);
        if (dweight)
#pragma omp for schedule(static)
            for (int c0 = 0; c0 < C; c0 += COL_BLOCK)
                weight_block(dweight, dout, inp, rstd, N, C, c0,
                             c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C);
    }
    return ZT_OK;
}
