/* worker/cuda/attention_cached.cu — attention of a few new positions
 * against a key/value cache on the GPU; the CPU's is
 * worker/cpu/attention_cached.c, whose two passes this follows.
 *
 * One thread per (row, query head): a decode step has NH of them, each
 * reading its key/value head's cache once per pass. Simple rather than
 * fast (no tiling over the keys, no split over threads of one head): it
 * gives generation on a GPU the same op as on the CPU, and tests/test_gpu_ops.c
 * holds it to the CPU's within ATTENTION_FP32_TOL. fp32 only.
 */
#include "worker/cuda/cuda_impl.h"

namespace
{

constexpr unsigned THREADS = 128;

__global__ void cached_kernel(float *out, const float *q, int q_stride, const float *k,
                              const float *v, int kv_stride, int p0, int n, int NH, int group,
                              int hs, float scale)
{
    const int item = blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= n * NH)
        return;
    const int i = item / NH, h = item % NH, g = h / group, visible = p0 + i + 1;
    const float *qi = q + (size_t)i * q_stride + (size_t)h * hs;
    const float *kg = k + (size_t)g * hs, *vg = v + (size_t)g * hs;
    float *o = out + (size_t)i * NH * hs + (size_t)h * hs;
    float max = -INFINITY, sum = 0.0f;
    for (int j = 0; j < visible; j++) {
        float s = 0.0f;
        for (int d = 0; d < hs; d++)
            s += qi[d] * kg[(size_t)j * kv_stride + d];
        max = fmaxf(max, s * scale);
    }
    for (int d = 0; d < hs; d++)
        o[d] = 0.0f;
    for (int j = 0; j < visible; j++) {
        float s = 0.0f;
        for (int d = 0; d < hs; d++)
            s += qi[d] * kg[(size_t)j * kv_stride + d];
        const float p = expf(s * scale - max);
        sum += p;
        for (int d = 0; d < hs; d++)
            o[d] += p * vg[(size_t)j * kv_stride + d];
    }
    for (int d = 0; d < hs; d++)
        o[d] /= sum;
}

} // namespace

zt_status cuda_attention_cached_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                        const void *q, int q_stride, const void *k, const void *v,
                                        int kv_stride, int p0, int n, int NH, int NKV, int hs)
{
    ZT_ASSERT(NH > 0 && NKV > 0 && NH % NKV == 0 && hs > 0 && p0 >= 0 && n >= 0);
    ZT_ASSERT(q_stride >= NH * hs && kv_stride >= NKV * hs);
    if (t != ZT_F32)
        return zt_error_set(ZT_ERR_UNSUPPORTED,
                            "attention over a key/value cache: the GPU has an fp32 form only");
    const size_t items = (size_t)n * (size_t)NH;
    if (items == 0)
        return ZT_OK;
    cached_kernel<<<cuda_blocks(items, THREADS), THREADS, 0, cuda_ctx_of(self)->stream>>>(
        static_cast<float *>(out), static_cast<const float *>(q), q_stride,
        static_cast<const float *>(k), static_cast<const float *>(v), kv_stride, p0, n, NH,
        NH / NKV, hs, 1.0f / sqrtf((float)hs));
    CUDA_LAUNCHED();
    return ZT_OK;
}
