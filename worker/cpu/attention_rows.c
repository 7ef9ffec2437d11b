/* worker/cpu/attention_rows.c — what the fused attention's fp32 form
 * (attention.c) and 16-bit forms (attention16.c) share: the strides of a
 * call and the row kernels of a score tile (attention_rows.h).
 */
#include "worker/cpu/attention_rows.h"
#include "worker/cpu/ops_cpu_impl.h"

#include <math.h>
#include <omp.h>

struct head_view attn_view_of(int T, int NH, int NKV, int hs)
{
    ZT_ASSERT(NH > 0 && NKV > 0 && NH % NKV == 0 && hs > 0 && T >= 0);
    return (struct head_view){.T = T,
                              .NH = NH,
                              .NKV = NKV,
                              .hs = hs,
                              .ld = (NH + 2 * NKV) * hs,
                              .ldo = NH * hs,
                              .Tk = T,
                              .ldk = (NH + 2 * NKV) * hs,
                              .threads = omp_get_max_threads(),
                              .scale = 1.0f / sqrtf((float)hs)};
}

struct head_cols attn_head_cols(const struct head_view *w, int h)
{
    int kv = h / (w->NH / w->NKV);
    return (struct head_cols){.q = (size_t)h * w->hs,
                              .k = (size_t)(w->NH + kv) * w->hs,
                              .v = (size_t)(w->NH + w->NKV + kv) * w->hs};
}

/* ---- row kernels (attention_rows.h) ---- */

CPU_KERNEL float attn_online_softmax_row(float *s, int n, int w, float *m, float *l, int first)
{
    float mx = first ? -INFINITY : *m, sum = 0.0f;
#pragma omp simd reduction(max : mx)
    for (int c = 0; c < w; c++) {
        float v = c < n ? s[c] : -INFINITY;
        mx = v > mx ? v : mx;
    }
    float acc[CPU_LANES] = {0}; /* sums in the fixed order of ops_cpu_impl.h */
    for (int c0 = 0; c0 < w; c0 += CPU_LANES) {
#pragma omp simd
        for (int l = 0; l < CPU_LANES; l++) {
            /* A bitwise mask, not `c < n ? e : 0`, keeps the loop
             * vectorisable (see cpu_expf). */
            union cpu_fbits e = {.f = cpu_expf(s[c0 + l] - mx)};
            e.i &= -(int32_t)(c0 + l < n);
            s[c0 + l] = e.f;
            acc[l] += e.f;
        }
    }
    sum = cpu_lanes_fold(acc);
    float corr = first ? 0.0f : cpu_expf(*m - mx);
    *l = first ? sum : *l * corr + sum;
    *m = mx;
    return corr;
}

CPU_KERNEL void attn_probs_row(float *s, int n, int w, float lse)
{
#pragma omp simd
    for (int c = 0; c < w; c++) {
        union cpu_fbits e = {.f = cpu_expf(s[c] - lse)};
        e.i &= -(int32_t)(c < n);
        s[c] = e.f;
    }
}

CPU_KERNEL void attn_dscores_row(float *dp, const float *p, int w, float d)
{
#pragma omp simd
    for (int c = 0; c < w; c++)
        dp[c] = p[c] * (dp[c] - d);
}

CPU_KERNEL void attn_scale_row(float *x, int n, float a)
{
#pragma omp simd
    for (int c = 0; c < n; c++)
        x[c] *= a;
}

CPU_KERNEL float attn_dot_row(const float *a, const float *b, int n)
{
    float s;
    CPU_ROW_SUM(s, n, a[c] * b[c]);
    return s;
}
