/* worker/cuda/cuda_impl.h — for worker/cuda/ only: the CUDA ops behind the
 * op table of worker/ops.h, the state one opened backend runs them with, and
 * the translation of CUDA and cuBLAS errors at this boundary.
 *
 * Included both from C (the table and the backend's open and close,
 * ops_cuda.c) and from CUDA C++ (the kernels, one .cu file per op beside
 * the CPU's worker/cpu/<op>.c): every declaration is extern "C".
 *
 * How an op runs: it finds its state through `self` (cuda_ctx_of), issues
 * its kernels and cuBLAS calls on ctx->stream and returns without waiting,
 * so the ops of a step queue up in order on one stream. The ops whose
 * results the host reads (sum_squares, fp8_quantize's amax) copy them
 * through ctx->host_scratch and wait for the stream. Host-side arguments
 * (scalars, hyperparameters, struct optimizer_range/piece themselves) are
 * read at the call; every buffer they point to is device memory.
 */
#ifndef ZT_WORKER_CUDA_CUDA_IMPL_H
#define ZT_WORKER_CUDA_CUDA_IMPL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "worker/device.h"
#include "worker/ops.h"

/* Bytes of each scratch buffer of a context: room for the partial sums of
 * a reduction over every block of a grid (doubles) and the results the
 * host reads back. */
enum { CUDA_SCRATCH_BYTES = 1 << 20 };

/* One opened CUDA compute backend (ops_cuda_open): what every op needs
 * beyond its arguments. Owned by the backend instance, one per rank. */
struct cuda_ctx {
    int device;   /* the GPU's ordinal, current on the opening thread */
    int sm_count; /* its multiprocessors, for grid sizes */
    int cc_major; /* its compute capability, for what it computes */
    int cc_minor;
    cudaStream_t stream; /* compute: every op is issued here, in order */
    /* bound to `stream`; default math (full fp32, no TF32) and no reduced
     * precision reductions: a 16-bit product sums in fp32 to the end */
    cublasHandle_t blas;
    /* device, CUDA_SCRATCH_BYTES: reductions' partials; any op may
     * overwrite it, which is safe because every op runs in order on
     * `stream`, so no op's scratch outlives it */
    void *scratch;
    void *host_scratch; /* pinned host, CUDA_SCRATCH_BYTES: results read back */
};

static inline struct cuda_ctx *cuda_ctx_of(const struct ops_backend *self)
{
    return (struct cuda_ctx *)self->ctx;
}

/* ZT_ERR_DEVICE naming the call, where it was made and the library's
 * message; the error status every CUDA op returns on failure. */
zt_status cuda_error(cudaError_t err, const char *call, const char *file, int line);
zt_status cublas_error(cublasStatus_t st, const char *call, const char *file, int line);

#define CUDA_TRY(call)                                                                             \
    do {                                                                                           \
        cudaError_t cuda_try_ = (call);                                                            \
        if (cuda_try_ != cudaSuccess)                                                              \
            return cuda_error(cuda_try_, #call, __FILE__, __LINE__);                               \
    } while (0)

#define CUBLAS_TRY(call)                                                                           \
    do {                                                                                           \
        cublasStatus_t cublas_try_ = (call);                                                       \
        if (cublas_try_ != CUBLAS_STATUS_SUCCESS)                                                  \
            return cublas_error(cublas_try_, #call, __FILE__, __LINE__);                           \
    } while (0)

/* After a kernel launch: a bad launch configuration surfaces here. */
#define CUDA_LAUNCHED() CUDA_TRY(cudaGetLastError())

/* Blocks of `threads` covering n elements, capped (grid-stride loops cover
 * the rest). */
static inline unsigned cuda_blocks(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    return b == 0 ? 1u : b > 65535u * 16u ? 65535u * 16u : (unsigned)b;
}

/* ---- the ops: the slots of worker/ops.h, same arguments --------------------
 *
 * The model ops take the dtype t of their activations, gradients and
 * weights (fp32, bf16, fp16) and `void *` buffers of it; their kernels are
 * templates over the element type (elem.cuh) that compute in fp32 and
 * round each stored value once. */

/* ZT_OK when ctx's GPU has the GEMMs of t (computes of worker/ops.h),
 * else ZT_ERR_UNSUPPORTED saying what it lacks. ops_cuda.c. */
zt_status cuda_ctx_computes(const struct cuda_ctx *ctx, enum zt_dtype t);

/* One product through ctx's cuBLAS handle, column-major as cuBLAS reads
 * it: C[m, n] = alpha op(A) op(B) + beta C, A and B of type ab (ZT_F32,
 * ZT_BF16, ZT_F16), C of type c (ZT_F32 or ab), summed in fp32
 * (CUBLAS_COMPUTE_32F) and rounded to c once. Errors: cuda_ctx_computes'
 * for 16-bit operands, cuBLAS's. matmul.cu. */
zt_status cuda_gemm(struct cuda_ctx *ctx, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, float alpha, enum zt_dtype ab, const void *A, int lda, const void *B,
                    int ldb, float beta, enum zt_dtype c, void *C, int ldc);

/* encoder.cu */
zt_status cuda_encoder_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                               const int32_t *tokens, const void *wte, const void *wpe, int B,
                               int T, int C);
zt_status cuda_encoder_backward(const struct ops_backend *self, enum zt_dtype t, float *dwte,
                                float *dwpe, const void *dout, const int32_t *tokens, int B, int T,
                                int C);
zt_status cuda_encoder_forward_vocab(const struct ops_backend *self, enum zt_dtype t, void *out,
                                     const int32_t *tokens, const void *wte_part, const void *wpe,
                                     int B, int T, int C, int v_lo, int Vp);
zt_status cuda_encoder_backward_vocab(const struct ops_backend *self, enum zt_dtype t,
                                      float *dwte_part, float *dwpe, const void *dout,
                                      const int32_t *tokens, int B, int T, int C, int v_lo, int Vp);

/* layernorm.cu */
zt_status cuda_layernorm_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                 float *mean, float *rstd, const void *inp, const void *weight,
                                 const void *bias, int N, int C);
zt_status cuda_layernorm_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                                  float *dweight, float *dbias, const void *dout, const void *inp,
                                  const void *weight, const float *mean, const float *rstd, int N,
                                  int C);

/* matmul.cu */
zt_status cuda_matmul_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                              const void *inp, const void *weight, const void *bias, int N, int C,
                              int OC);
zt_status cuda_matmul_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                               float *dweight, float *dbias, const void *dout, const void *inp,
                               const void *weight, int N, int C, int OC);

/* fp8.cu (fp32 only, as worker/ops.h's fp8 slots) */
zt_status cuda_fp8_quantize(const struct ops_backend *self, uint8_t *q, float *amax, const float *x,
                            size_t n, float scale, enum fp8_format f);
zt_status cuda_fp8_dequantize(const struct ops_backend *self, float *x, const uint8_t *q, size_t n,
                              float scale_inv, enum fp8_format f);

/* lora.cu */
zt_status cuda_lora_forward(const struct ops_backend *self, enum zt_dtype t, void *out, int ldo,
                            void *u, const void *inp, const void *A, const void *B, float scale,
                            int N, int C, int r, int OC);
zt_status cuda_lora_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp, float *dA,
                             float *dB, void *scratch, const void *dout, int ldo, const void *inp,
                             const void *A, const void *B, float scale, int N, int C, int r,
                             int OC);

/* attention.cu */
zt_status cuda_attention_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                 float *lse, const void *qkv, int B, int T, int NH, int NKV,
                                 int hs);
zt_status cuda_attention_cached_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                        const void *q, int q_stride, const void *k, const void *v,
                                        int kv_stride, int p0, int n, int NH, int NKV, int hs);
zt_status cuda_attention_backward(const struct ops_backend *self, enum zt_dtype t, void *dqkv,
                                  const void *dout, const void *qkv, const void *out,
                                  const float *lse, int B, int T, int NH, int NKV, int hs);

/* rmsnorm.cu */
zt_status cuda_rmsnorm_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                               float *rstd, const void *inp, const void *weight, int N, int C,
                               float eps);
zt_status cuda_rmsnorm_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                                float *dweight, const void *dout, const void *inp,
                                const void *weight, const float *rstd, int N, int C);

/* rope.cu */
zt_status cuda_rope_forward(const struct ops_backend *self, enum zt_dtype t, void *x,
                            const float *cos_t, const float *sin_t, int B, int T, int n_heads,
                            int hs, int row_stride);
zt_status cuda_rope_backward(const struct ops_backend *self, enum zt_dtype t, void *dx,
                             const float *cos_t, const float *sin_t, int B, int T, int n_heads,
                             int hs, int row_stride);

/* gelu.cu: GELU and the pointwise residual and mask ops */
zt_status cuda_gelu_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                            const void *inp, int N);
zt_status cuda_gelu_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                             const void *inp, const void *dout, int N);
zt_status cuda_residual_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                const void *a, const void *b, int N);
zt_status cuda_mul_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                           const void *a, const void *b, int N);
zt_status cuda_mul_backward(const struct ops_backend *self, enum zt_dtype t, void *da,
                            const void *b, const void *dout, int N);

/* swiglu.cu */
zt_status cuda_swiglu_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                              const void *gu, int N, int I);
zt_status cuda_swiglu_backward(const struct ops_backend *self, enum zt_dtype t, void *dgu,
                               const void *dout, const void *gu, int N, int I);

/* crossentropy.cu: the whole-row and the vocabulary-parallel forms */
zt_status cuda_crossentropy_forward(const struct ops_backend *self, enum zt_dtype t, float *losses,
                                    void *probs, const void *logits, const int32_t *targets, int N,
                                    int V);
zt_status cuda_crossentropy_backward(const struct ops_backend *self, enum zt_dtype t, void *dlogits,
                                     const void *probs, const int32_t *targets, float dloss, int N,
                                     int V);
zt_status cuda_crossentropy_vocab_max(const struct ops_backend *self, enum zt_dtype t,
                                      float *row_max, const void *logits, int N, int Vp, int Vr);
zt_status cuda_crossentropy_vocab_exp(const struct ops_backend *self, enum zt_dtype t, void *probs,
                                      float *row_stats, const void *logits, const float *row_max,
                                      const int32_t *targets, int N, int Vp, int Vr, int v_lo);
zt_status cuda_crossentropy_vocab_finish(const struct ops_backend *self, enum zt_dtype t,
                                         float *losses, void *probs, const float *row_stats,
                                         const int32_t *targets, int N, int Vp);
zt_status cuda_crossentropy_vocab_backward(const struct ops_backend *self, enum zt_dtype t,
                                           void *dlogits, const void *probs, const int32_t *targets,
                                           float dloss, int N, int Vp, int v_lo);

/* engine_ops.cu: precision casts, norms, scaling and the element-wise
 * optimizers */
zt_status cuda_to_f32(const struct ops_backend *self, enum zt_dtype t, const void *src, float *dst,
                      size_t n);
zt_status cuda_from_f32(const struct ops_backend *self, enum zt_dtype t, const float *src,
                        void *dst, size_t n);
zt_status cuda_add_into(const struct ops_backend *self, enum zt_dtype t, void *dst, const void *src,
                        size_t n);
zt_status cuda_sum_squares(const struct ops_backend *self, enum zt_dtype t, const void *src,
                           size_t n, double scale, double *out);
zt_status cuda_scale(const struct ops_backend *self, float *x, size_t n, float s);
zt_status cuda_memset_zero(const struct ops_backend *self, void *p, size_t bytes);
zt_status cuda_adamw_update(const struct ops_backend *self, const struct optimizer_range *r,
                            const struct optimizer_hparams *hp);
zt_status cuda_adam_update(const struct ops_backend *self, const struct optimizer_range *r,
                           const struct optimizer_hparams *hp);
zt_status cuda_sgd_update(const struct ops_backend *self, const struct optimizer_range *r,
                          const struct optimizer_hparams *hp);
zt_status cuda_lion_update(const struct ops_backend *self, const struct optimizer_range *r,
                           const struct optimizer_hparams *hp);

/* optim_pieces.cu: the whole-tensor optimizers (Adafactor, 8-bit AdamW) */
zt_status cuda_adafactor_round(const struct ops_backend *self, int round,
                               const struct optimizer_piece *pc,
                               const struct optimizer_hparams *hp);
zt_status cuda_adafactor_apply(const struct ops_backend *self, const struct optimizer_piece *pc,
                               const struct optimizer_hparams *hp);
zt_status cuda_adamw8bit_round(const struct ops_backend *self, int round,
                               const struct optimizer_piece *pc,
                               const struct optimizer_hparams *hp);
zt_status cuda_adamw8bit_apply(const struct ops_backend *self, const struct optimizer_piece *pc,
                               const struct optimizer_hparams *hp);

/* The backend's entry points (worker/cuda_module.h's table, filled in
 * worker/cuda/module.c): device memory (device_cuda.c) and the ops' life
 * (ops_cuda.c). */
extern const struct device_backend_ops device_cuda_ops;
zt_status ops_cuda_bind(int ordinal);
zt_status ops_cuda_devices(int *count);
zt_status ops_cuda_pinned_alloc(size_t bytes, void **out);
void ops_cuda_pinned_free(void *p);
zt_status ops_cuda_open(const struct ops_backend **out, void **stream);
void ops_cuda_close(const struct ops_backend *ops);

#ifdef __cplusplus
}
#endif

#endif
