/* worker/cuda/lora.cu — LoRA's low-rank term on the GPU: worker/cpu/lora.c
 * with cuBLAS in place of OpenBLAS.
 *
 * Forward: u[N, r] = inp @ A^T, out[:, 0..OC) += scale * u @ B^T. Backward:
 * u recomputed, dB += scale * dout^T @ u, du = scale * dout @ B,
 * dA += du^T @ inp, dinp += du @ A. Each product is one cublasSgemm on the
 * buffers as they lie, with no kernels of its own: the work is four or five
 * thin GEMMs (one dimension is the rank r), which cuBLAS already shapes
 * for, and no elementwise pass is needed because the scale rides on alpha
 * and the accumulations on beta = 1.
 *
 * cuBLAS is column-major: a row-major [R, K] buffer with rows ld floats
 * apart is the column-major [K, R] matrix with leading dimension ld, so a
 * row-major product P = X @ Y is issued as P^T = Y^T @ X^T. The leading
 * dimension is how out and dout may be a column slice of wider rows (ldo),
 * as q_proj's output is of the fused q|k|v: the GEMM writes or reads the
 * slice in place. The handle is bound to the context's stream and carries
 * its math mode; cuBLAS GEMMs give the same bits on every run on one GPU
 * model, so the op is deterministic.
 */
#include "worker/cuda/cuda_impl.h"

/* u[N, r] = inp[N, C] @ A[r, C]^T: u^T[r, N] = (A's view [C, r])^T @ inp's
 * view [C, N]. */
static zt_status lora_down(struct cuda_ctx *ctx, float *u, const float *inp, const float *A, int N,
                           int C, int r)
{
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_TRY(
        cublasSgemm(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, r, N, C, &one, A, C, inp, C, &zero, u, r));
    return ZT_OK;
}

extern "C" zt_status cuda_lora_forward(const struct ops_backend *self, float *out, int ldo,
                                       float *u, const float *inp, const float *A, const float *B,
                                       float scale, int N, int C, int r, int OC)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    if (N <= 0 || C <= 0 || r <= 0 || OC <= 0)
        return ZT_OK; /* an empty product: the term adds nothing (cuBLAS would
                         refuse the zero leading dimensions) */
    ZT_TRY(lora_down(ctx, u, inp, A, N, C, r));
    /* out^T[OC, N] (ld ldo) += scale * (B's view [r, OC])^T @ u^T[r, N] */
    const float one = 1.0f;
    CUBLAS_TRY(cublasSgemm(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, r, &scale, B, r, u, r, &one,
                           out, ldo));
    return ZT_OK;
}

extern "C" zt_status cuda_lora_backward(const struct ops_backend *self, float *dinp, float *dA,
                                        float *dB, float *scratch, const float *dout, int ldo,
                                        const float *inp, const float *A, const float *B,
                                        float scale, int N, int C, int r, int OC)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    if (N <= 0 || C <= 0 || r <= 0 || OC <= 0)
        return ZT_OK; /* every gradient adds an empty sum or zero */
    float *u = scratch, *du = scratch + (size_t)N * r;
    const float one = 1.0f, zero = 0.0f;
    ZT_TRY(lora_down(ctx, u, inp, A, N, C, r));
    /* dB^T[r, OC] += scale * u^T[r, N] @ (dout^T[OC, N], ld ldo)^T */
    CUBLAS_TRY(cublasSgemm(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_T, r, OC, N, &scale, u, r, dout, ldo,
                           &one, dB, r));
    /* du^T[r, N] = scale * B's view [r, OC] @ dout^T[OC, N] (ld ldo) */
    CUBLAS_TRY(cublasSgemm(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_N, r, N, OC, &scale, B, r, dout, ldo,
                           &zero, du, r));
    /* dA^T[C, r] += inp^T[C, N] @ (du^T[r, N])^T */
    CUBLAS_TRY(cublasSgemm(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_T, C, r, N, &one, inp, C, du, r, &one,
                           dA, C));
    /* dinp^T[C, N] += A's view [C, r] @ du^T[r, N] */
    if (dinp)
        CUBLAS_TRY(cublasSgemm(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_N, C, N, r, &one, A, C, du, r,
                               &one, dinp, C));
    return ZT_OK;
}
