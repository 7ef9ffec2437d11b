/* worker/cpu/lora.c — LoRA's low-rank term: four thin products, each one
 * cblas_sgemm on the buffers as they lie. The output and its gradient may
 * be a column slice of wider rows (ldo), which sgemm's leading dimension
 * takes directly, so a q_proj adapter adds into the fused q|k|v output
 * without a copy. u is recomputed in the backward rather than kept: it
 * costs 2*N*C*r flops, a fraction r/OC of the layer's own product, and
 * saves an activation per adapted layer. */
#include "worker/cpu/ops_cpu_impl.h"

#include <cblas.h>

zt_status cpu_lora_forward(const struct ops_backend *self, float *out, int ldo, float *u,
                           const float *inp, const float *A, const float *B, float scale, int N,
                           int C, int r, int OC)
{
    (void)self;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, r, C, 1.0f, inp, C, A, C, 0.0f, u, r);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, r, scale, u, r, B, r, 1.0f, out,
                ldo);
    return ZT_OK;
}

zt_status cpu_lora_backward(const struct ops_backend *self, float *dinp, float *dA, float *dB,
                            float *scratch, const float *dout, int ldo, const float *inp,
                            const float *A, const float *B, float scale, int N, int C, int r,
                            int OC)
{
    (void)self;
    float *u = scratch, *du = scratch + (size_t)N * r;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, r, C, 1.0f, inp, C, A, C, 0.0f, u, r);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, r, N, scale, dout, ldo, u, r, 1.0f, dB,
                r);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, r, OC, scale, dout, ldo, B, r, 0.0f,
                du, r);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r, C, N, 1.0f, du, r, inp, C, 1.0f, dA, C);
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, r, 1.0f, du, r, A, C, 1.0f,
                    dinp, C);
    return ZT_OK;
}
