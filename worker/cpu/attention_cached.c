/* worker/cpu/attention_cached.c — attention of a few new positions against
 * a key/value cache: what decoding runs once the prompt is in the cache.
 *
 * One (row, head) pair per OpenMP item. Two passes over the visible keys
 * keep it free of scratch: the first finds the largest score, the second
 * adds e^(s - max) v into the output row, which is divided by the sum at
 * the end. A decode step has one row, so the work is NH items of
 * (p0 + 1) * hs products each: it reads the cache once per head, the cost
 * the cache exists to make linear in the context.
 */
#include <math.h>

#include "worker/cpu/ops_cpu_impl.h"

#include "common/status.h"

static float dot(const float *a, const float *b, int n)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int d = 0; d < n; d++)
        s += a[d] * b[d];
    return s;
}

/* One query head of one row over keys [0, visible). */
static void attend_row(float *out, const float *q, const float *k, const float *v, int kv_stride,
                       int visible, int hs, float scale)
{
    float max = -INFINITY, sum = 0.0f;
    for (int j = 0; j < visible; j++) {
        const float s = dot(q, k + (size_t)j * kv_stride, hs) * scale;
        max = s > max ? s : max;
    }
    for (int d = 0; d < hs; d++)
        out[d] = 0.0f;
    for (int j = 0; j < visible; j++) {
        const float p = expf(dot(q, k + (size_t)j * kv_stride, hs) * scale - max);
        const float *vj = v + (size_t)j * kv_stride;
        sum += p;
#pragma omp simd
        for (int d = 0; d < hs; d++)
            out[d] += p * vj[d];
    }
    const float inv = 1.0f / sum;
    for (int d = 0; d < hs; d++)
        out[d] *= inv;
}

zt_status cpu_attention_cached_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                       const void *q, int q_stride, const void *k, const void *v,
                                       int kv_stride, int p0, int n, int NH, int NKV, int hs)
{
    (void)self;
    ZT_ASSERT(NH > 0 && NKV > 0 && NH % NKV == 0 && hs > 0 && p0 >= 0 && n >= 0);
    ZT_ASSERT(q_stride >= NH * hs && kv_stride >= NKV * hs);
    if (t != ZT_F32)
        return zt_error_set(ZT_ERR_UNSUPPORTED,
                            "attention over a key/value cache: the CPU has an fp32 form only, "
                            "not %s",
                            zt_precision_name(t));
    const float scale = 1.0f / sqrtf((float)hs);
    const int group = NH / NKV;
    const float *qf = q, *kf = k, *vf = v;
    float *of = out;
#pragma omp parallel for schedule(static)
    for (int item = 0; item < n * NH; item++) {
        const int i = item / NH, h = item % NH, g = h / group;
        attend_row(of + (size_t)i * NH * hs + (size_t)h * hs,
                   qf + (size_t)i * q_stride + (size_t)h * hs, kf + (size_t)g * hs,
                   vf + (size_t)g * hs, kv_stride, p0 + i + 1, hs, scale);
    }
    return ZT_OK;
}
