/* worker/cuda/lora.cu — LoRA's low-rank term on the GPU: worker/cpu/lora.c
 * with cuBLAS in place of OpenBLAS.
 *
 * Forward: u[N, r] = inp @ A^T, out[:, 0..OC) += scale * u @ B^T. Backward:
 * u recomputed, dB += scale * dout^T @ u, du = scale * dout @ B,
 * dA += du^T @ inp, dinp += du @ A. Each product is one cuda_gemm
 * (cublasGemmEx, fp32 sums; u, du, out and dinp of the op's type t, dA and
 * dB fp32) on the buffers as they lie, with no kernels of its own: the work is four or five
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

/* Elements i.. of a buffer of t. */
static void *at(enum zt_dtype t, void *p, size_t i)
{
    return (char *)p + i * zt_dtype_size(t);
}

/* u[N, r] = inp[N, C] @ A[r, C]^T, rounded to t: u^T[r, N] = (A's view
 * [C, r])^T @ inp's view [C, N]. */
static zt_status lora_down(struct cuda_ctx *ctx, enum zt_dtype t, void *u, const void *inp,
                           const void *A, int N, int C, int r)
{
    return cuda_gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, r, N, C, 1.0f, t, A, C, inp, C, 0.0f, t, u, r);
}

extern "C" zt_status cuda_lora_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                       int ldo, void *u, const void *inp, const void *A,
                                       const void *B, float scale, int N, int C, int r, int OC)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    if (N <= 0 || C <= 0 || r <= 0 || OC <= 0)
        return ZT_OK; /* an empty product: the term adds nothing (cuBLAS would
                         refuse the zero leading dimensions) */
    ZT_TRY(lora_down(ctx, t, u, inp, A, N, C, r));
    /* out^T[OC, N] (ld ldo) += scale * (B's view [r, OC])^T @ u^T[r, N] */
    return cuda_gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, r, scale, t, B, r, u, r, 1.0f, t, out,
                     ldo);
}

/* dA and dB in fp32, u and du rounded to t between the products (as the
 * CPU's, so both sides multiply the same values). */
extern "C" zt_status cuda_lora_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                                        float *dA, float *dB, void *scratch, const void *dout,
                                        int ldo, const void *inp, const void *A, const void *B,
                                        float scale, int N, int C, int r, int OC)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    if (N <= 0 || C <= 0 || r <= 0 || OC <= 0)
        return ZT_OK; /* every gradient adds an empty sum or zero */
    void *u = scratch, *du = at(t, scratch, (size_t)N * r);
    ZT_TRY(lora_down(ctx, t, u, inp, A, N, C, r));
    /* dB^T[r, OC] += scale * u^T[r, N] @ (dout^T[OC, N], ld ldo)^T */
    ZT_TRY(cuda_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, r, OC, N, scale, t, u, r, dout, ldo, 1.0f,
                     ZT_F32, dB, r));
    /* du^T[r, N] = scale * B's view [r, OC] @ dout^T[OC, N] (ld ldo) */
    ZT_TRY(cuda_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, r, N, OC, scale, t, B, r, dout, ldo, 0.0f, t,
                     du, r));
    /* dA^T[C, r] += inp^T[C, N] @ (du^T[r, N])^T */
    ZT_TRY(cuda_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, C, r, N, 1.0f, t, inp, C, du, r, 1.0f, ZT_F32,
                     dA, C));
    /* dinp^T[C, N] += A's view [C, r] @ du^T[r, N] */
    if (!dinp)
        return ZT_OK;
    return cuda_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, C, N, r, 1.0f, t, A, C, du, r, 1.0f, t, dinp,
                     C);
}
