/* worker/cpu/lora.c — LoRA's low-rank term: four thin products, each one
 * cpu_gemm on the buffers as they lie. The output and its gradient may
 * be a column slice of wider rows (ldo), which the leading dimension
 * takes directly, so a q_proj adapter adds into the fused q|k|v output
 * without a copy. u is recomputed in the backward rather than kept: it
 * costs 2*N*C*r flops, a fraction r/OC of the layer's own product, and
 * saves an activation per adapted layer. */
#include "worker/cpu/ops_cpu_impl.h"

zt_status cpu_lora_forward(const struct ops_backend *self, enum zt_dtype t, void *out, int ldo,
                           void *u, const void *inp, const void *A, const void *B, float scale,
                           int N, int C, int r, int OC)
{
    ZT_TRY(cpu_gemm_typed(self, t, t, 0, 1, N, r, C, 1.0f, inp, C, A, C, 0, u, r));
    return cpu_gemm_typed(self, t, t, 0, 1, N, OC, r, scale, u, r, B, r, 1, out, ldo);
}

zt_status cpu_lora_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp, float *dA,
                            float *dB, void *scratch, const void *dout, int ldo, const void *inp,
                            const void *A, const void *B, float scale, int N, int C, int r, int OC)
{
    void *u = scratch, *du = cpu_elem(t, scratch, (size_t)N * r);
    ZT_TRY(cpu_gemm_typed(self, t, t, 0, 1, N, r, C, 1.0f, inp, C, A, C, 0, u, r));
    ZT_TRY(cpu_gemm_typed(self, t, ZT_F32, 1, 0, OC, r, N, scale, dout, ldo, u, r, 1, dB, r));
    ZT_TRY(cpu_gemm_typed(self, t, t, 0, 0, N, r, OC, scale, dout, ldo, B, r, 0, du, r));
    ZT_TRY(cpu_gemm_typed(self, t, ZT_F32, 1, 0, r, C, N, 1.0f, du, r, inp, C, 1, dA, C));
    return dinp ? cpu_gemm_typed(self, t, t, 0, 0, N, C, r, 1.0f, du, r, A, C, 1, dinp, C) : ZT_OK;
}
