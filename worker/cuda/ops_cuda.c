/* worker/cuda/ops_cuda.c — the CUDA backend's op table and the state one
 * opened backend runs it with.
 *
 * The kernels live one file per op (worker/cuda/<op>.cu, the stems of
 * worker/cpu/); this file gathers them into a constant table and, for each
 * open, makes a copy of it whose `ctx` is a struct cuda_ctx: the compute
 * stream, a cuBLAS handle bound to it and the scratch buffers reductions
 * use. A copy per open rather than a static table is what lets two opened
 * backends (two GPUs in one process, or a test's and a run's) stay
 * independent: no op reaches any state but through its `self`.
 *
 * The stream is created blocking (cudaStreamCreate's default): the device
 * memory table's synchronous copies (worker/cuda/device_cuda.c) run on the
 * legacy default stream and so wait for the ops queued before them, which
 * is what makes "copy the loss back after the forward" correct without an
 * explicit synchronisation at every call site.
 *
 * cuBLAS keeps its default math mode: fp32 GEMMs run in full fp32 (no TF32
 * unless asked for), so the GPU's losses can be compared with the CPU's.
 */
#include "worker/cuda/cuda_impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cublas_api.h>

/* fp32 products are cublasSgemm in its default math; 16-bit ones are not
 * built yet. */
static zt_status cuda_gemm_describe(const struct ops_backend *self, enum zt_dtype ab_type,
                                    char *buf, size_t n)
{
    (void)self;
    if (ab_type != ZT_F32)
        return zt_error_set(ZT_ERR_UNSUPPORTED, "the CUDA backend has no 16-bit GEMM yet");
    snprintf(buf, n, "cublas %d.%d.%d sgemm", CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH);
    return ZT_OK;
}

/* ---- the model ops: fp32 only for now --------------------------------------
 * The table's model ops take `t`, the type of their activations, gradients
 * and weights (worker/ops.h). The kernels behind them (cuda_impl.h) are
 * fp32 only, so each slot is an adapter: with t == ZT_F32 it calls the
 * kernel's op on the same buffers as floats; with a 16-bit t it returns
 * ZT_ERR_UNSUPPORTED naming the op, as the table's conventions ask. */

/* ZT_OK for fp32; ZT_ERR_UNSUPPORTED naming `op` for bf16 and fp16. Any
 * other t is a broken precondition. */
static zt_status fp32_only(enum zt_dtype t, const char *op)
{
    if (t == ZT_F32)
        return ZT_OK;
    ZT_ASSERT(t == ZT_BF16 || t == ZT_F16);
    return zt_error_set(ZT_ERR_UNSUPPORTED,
                        "the CUDA backend's %s computes in fp32 only; 16-bit activations (%s) are "
                        "not built yet",
                        op, zt_precision_name(t));
}

static zt_status cuda_computes(const struct ops_backend *self, enum zt_dtype t)
{
    (void)self;
    return fp32_only(t, "model ops");
}

static zt_status encoder_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                 const int32_t *tokens, const void *wte, const void *wpe, int B,
                                 int T, int C)
{
    ZT_TRY(fp32_only(t, "encoder_forward"));
    return cuda_encoder_forward(self, out, tokens, wte, wpe, B, T, C);
}

static zt_status encoder_backward(const struct ops_backend *self, enum zt_dtype t, float *dwte,
                                  float *dwpe, const void *dout, const int32_t *tokens, int B,
                                  int T, int C)
{
    ZT_TRY(fp32_only(t, "encoder_backward"));
    return cuda_encoder_backward(self, dwte, dwpe, dout, tokens, B, T, C);
}

static zt_status encoder_forward_vocab(const struct ops_backend *self, enum zt_dtype t, void *out,
                                       const int32_t *tokens, const void *wte_part, const void *wpe,
                                       int B, int T, int C, int v_lo, int Vp)
{
    ZT_TRY(fp32_only(t, "encoder_forward_vocab"));
    return cuda_encoder_forward_vocab(self, out, tokens, wte_part, wpe, B, T, C, v_lo, Vp);
}

static zt_status encoder_backward_vocab(const struct ops_backend *self, enum zt_dtype t,
                                        float *dwte_part, float *dwpe, const void *dout,
                                        const int32_t *tokens, int B, int T, int C, int v_lo,
                                        int Vp)
{
    ZT_TRY(fp32_only(t, "encoder_backward_vocab"));
    return cuda_encoder_backward_vocab(self, dwte_part, dwpe, dout, tokens, B, T, C, v_lo, Vp);
}

static zt_status layernorm_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                   float *mean, float *rstd, const void *inp, const void *weight,
                                   const void *bias, int N, int C)
{
    ZT_TRY(fp32_only(t, "layernorm_forward"));
    return cuda_layernorm_forward(self, out, mean, rstd, inp, weight, bias, N, C);
}

static zt_status layernorm_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                                    float *dweight, float *dbias, const void *dout, const void *inp,
                                    const void *weight, const float *mean, const float *rstd, int N,
                                    int C)
{
    ZT_TRY(fp32_only(t, "layernorm_backward"));
    return cuda_layernorm_backward(self, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

static zt_status matmul_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                const void *inp, const void *weight, const void *bias, int N, int C,
                                int OC)
{
    ZT_TRY(fp32_only(t, "matmul_forward"));
    return cuda_matmul_forward(self, out, inp, weight, bias, N, C, OC);
}

static zt_status matmul_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                                 float *dweight, float *dbias, const void *dout, const void *inp,
                                 const void *weight, int N, int C, int OC)
{
    ZT_TRY(fp32_only(t, "matmul_backward"));
    return cuda_matmul_backward(self, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

static zt_status lora_forward(const struct ops_backend *self, enum zt_dtype t, void *out, int ldo,
                              void *u, const void *inp, const void *A, const void *B, float scale,
                              int N, int C, int r, int OC)
{
    ZT_TRY(fp32_only(t, "lora_forward"));
    return cuda_lora_forward(self, out, ldo, u, inp, A, B, scale, N, C, r, OC);
}

static zt_status lora_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                               float *dA, float *dB, void *scratch, const void *dout, int ldo,
                               const void *inp, const void *A, const void *B, float scale, int N,
                               int C, int r, int OC)
{
    ZT_TRY(fp32_only(t, "lora_backward"));
    return cuda_lora_backward(self, dinp, dA, dB, scratch, dout, ldo, inp, A, B, scale, N, C, r,
                              OC);
}

static zt_status attention_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                   float *lse, const void *qkv, int B, int T, int NH, int NKV,
                                   int hs)
{
    ZT_TRY(fp32_only(t, "attention_forward"));
    return cuda_attention_forward(self, out, lse, qkv, B, T, NH, NKV, hs);
}

static zt_status attention_backward(const struct ops_backend *self, enum zt_dtype t, void *dqkv,
                                    const void *dout, const void *qkv, const void *out,
                                    const float *lse, int B, int T, int NH, int NKV, int hs)
{
    ZT_TRY(fp32_only(t, "attention_backward"));
    return cuda_attention_backward(self, dqkv, dout, qkv, out, lse, B, T, NH, NKV, hs);
}

static zt_status rmsnorm_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                 float *rstd, const void *inp, const void *weight, int N, int C,
                                 float eps)
{
    ZT_TRY(fp32_only(t, "rmsnorm_forward"));
    return cuda_rmsnorm_forward(self, out, rstd, inp, weight, N, C, eps);
}

static zt_status rmsnorm_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                                  float *dweight, const void *dout, const void *inp,
                                  const void *weight, const float *rstd, int N, int C)
{
    ZT_TRY(fp32_only(t, "rmsnorm_backward"));
    return cuda_rmsnorm_backward(self, dinp, dweight, dout, inp, weight, rstd, N, C);
}

static zt_status rope_forward(const struct ops_backend *self, enum zt_dtype t, void *x,
                              const float *cos_t, const float *sin_t, int B, int T, int n_heads,
                              int hs, int row_stride)
{
    ZT_TRY(fp32_only(t, "rope_forward"));
    return cuda_rope_forward(self, x, cos_t, sin_t, B, T, n_heads, hs, row_stride);
}

static zt_status rope_backward(const struct ops_backend *self, enum zt_dtype t, void *dx,
                               const float *cos_t, const float *sin_t, int B, int T, int n_heads,
                               int hs, int row_stride)
{
    ZT_TRY(fp32_only(t, "rope_backward"));
    return cuda_rope_backward(self, dx, cos_t, sin_t, B, T, n_heads, hs, row_stride);
}

static zt_status gelu_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                              const void *inp, int N)
{
    ZT_TRY(fp32_only(t, "gelu_forward"));
    return cuda_gelu_forward(self, out, inp, N);
}

static zt_status gelu_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                               const void *inp, const void *dout, int N)
{
    ZT_TRY(fp32_only(t, "gelu_backward"));
    return cuda_gelu_backward(self, dinp, inp, dout, N);
}

static zt_status swiglu_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                const void *gu, int N, int I)
{
    ZT_TRY(fp32_only(t, "swiglu_forward"));
    return cuda_swiglu_forward(self, out, gu, N, I);
}

static zt_status swiglu_backward(const struct ops_backend *self, enum zt_dtype t, void *dgu,
                                 const void *dout, const void *gu, int N, int I)
{
    ZT_TRY(fp32_only(t, "swiglu_backward"));
    return cuda_swiglu_backward(self, dgu, dout, gu, N, I);
}

static zt_status residual_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                  const void *a, const void *b, int N)
{
    ZT_TRY(fp32_only(t, "residual_forward"));
    return cuda_residual_forward(self, out, a, b, N);
}

static zt_status mul_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                             const void *a, const void *b, int N)
{
    ZT_TRY(fp32_only(t, "mul_forward"));
    return cuda_mul_forward(self, out, a, b, N);
}

static zt_status mul_backward(const struct ops_backend *self, enum zt_dtype t, void *da,
                              const void *b, const void *dout, int N)
{
    ZT_TRY(fp32_only(t, "mul_backward"));
    return cuda_mul_backward(self, da, b, dout, N);
}

static zt_status crossentropy_forward(const struct ops_backend *self, enum zt_dtype t,
                                      float *losses, void *probs, const void *logits,
                                      const int32_t *targets, int N, int V)
{
    ZT_TRY(fp32_only(t, "crossentropy_forward"));
    return cuda_crossentropy_forward(self, losses, probs, logits, targets, N, V);
}

static zt_status crossentropy_backward(const struct ops_backend *self, enum zt_dtype t,
                                       void *dlogits, const void *probs, const int32_t *targets,
                                       float dloss, int N, int V)
{
    ZT_TRY(fp32_only(t, "crossentropy_backward"));
    return cuda_crossentropy_backward(self, dlogits, probs, targets, dloss, N, V);
}

static zt_status crossentropy_vocab_max(const struct ops_backend *self, enum zt_dtype t,
                                        float *row_max, const void *logits, int N, int Vp)
{
    ZT_TRY(fp32_only(t, "crossentropy_vocab_max"));
    return cuda_crossentropy_vocab_max(self, row_max, logits, N, Vp);
}

static zt_status crossentropy_vocab_exp(const struct ops_backend *self, enum zt_dtype t,
                                        void *probs, float *row_stats, const void *logits,
                                        const float *row_max, const int32_t *targets, int N, int Vp,
                                        int v_lo)
{
    ZT_TRY(fp32_only(t, "crossentropy_vocab_exp"));
    return cuda_crossentropy_vocab_exp(self, probs, row_stats, logits, row_max, targets, N, Vp,
                                       v_lo);
}

static zt_status crossentropy_vocab_finish(const struct ops_backend *self, enum zt_dtype t,
                                           float *losses, void *probs, const float *row_stats,
                                           const int32_t *targets, int N, int Vp)
{
    ZT_TRY(fp32_only(t, "crossentropy_vocab_finish"));
    return cuda_crossentropy_vocab_finish(self, losses, probs, row_stats, targets, N, Vp);
}

static zt_status crossentropy_vocab_backward(const struct ops_backend *self, enum zt_dtype t,
                                             void *dlogits, const void *probs,
                                             const int32_t *targets, float dloss, int N, int Vp,
                                             int v_lo)
{
    ZT_TRY(fp32_only(t, "crossentropy_vocab_backward"));
    return cuda_crossentropy_vocab_backward(self, dlogits, probs, targets, dloss, N, Vp, v_lo);
}

static const struct ops_backend CUDA_OPS = {
    .name = "cuda",
    .gemm_describe = cuda_gemm_describe,
    .computes = cuda_computes,
    .encoder_forward = encoder_forward,
    .encoder_backward = encoder_backward,
    .encoder_forward_vocab = encoder_forward_vocab,
    .encoder_backward_vocab = encoder_backward_vocab,
    .layernorm_forward = layernorm_forward,
    .layernorm_backward = layernorm_backward,
    .matmul_forward = matmul_forward,
    .matmul_backward = matmul_backward,
    .fp8_quantize = cuda_fp8_quantize,
    .fp8_dequantize = cuda_fp8_dequantize,
    .lora_forward = lora_forward,
    .lora_backward = lora_backward,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .rmsnorm_forward = rmsnorm_forward,
    .rmsnorm_backward = rmsnorm_backward,
    .rope_forward = rope_forward,
    .rope_backward = rope_backward,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .swiglu_forward = swiglu_forward,
    .swiglu_backward = swiglu_backward,
    .residual_forward = residual_forward,
    .mul_forward = mul_forward,
    .mul_backward = mul_backward,
    .crossentropy_forward = crossentropy_forward,
    .crossentropy_backward = crossentropy_backward,
    .crossentropy_vocab_max = crossentropy_vocab_max,
    .crossentropy_vocab_exp = crossentropy_vocab_exp,
    .crossentropy_vocab_finish = crossentropy_vocab_finish,
    .crossentropy_vocab_backward = crossentropy_vocab_backward,
    .to_f32 = cuda_to_f32,
    .from_f32 = cuda_from_f32,
    .add_into = cuda_add_into,
    .sum_squares = cuda_sum_squares,
    .scale = cuda_scale,
    .memset_zero = cuda_memset_zero,
    .adamw_update = cuda_adamw_update,
    .adam_update = cuda_adam_update,
    .sgd_update = cuda_sgd_update,
    .lion_update = cuda_lion_update,
    .adafactor_round = cuda_adafactor_round,
    .adafactor_apply = cuda_adafactor_apply,
    .adamw8bit_round = cuda_adamw8bit_round,
    .adamw8bit_apply = cuda_adamw8bit_apply,
};

/* One open: the table copy and the state its ctx points at, freed together. */
struct cuda_instance {
    struct ops_backend table;
    struct cuda_ctx ctx;
};

zt_status cuda_error(cudaError_t err, const char *call, const char *file, int line)
{
    return zt_error_set(ZT_ERR_DEVICE, "%s:%d: %s: %s (%s)", file, line, call,
                        cudaGetErrorString(err), cudaGetErrorName(err));
}

zt_status cublas_error(cublasStatus_t st, const char *call, const char *file, int line)
{
    return zt_error_set(ZT_ERR_DEVICE, "%s:%d: %s: %s (%s)", file, line, call,
                        cublasGetStatusString(st), cublasGetStatusName(st));
}

zt_status ops_cuda_devices(int *count)
{
    CUDA_TRY(cudaGetDeviceCount(count));
    return ZT_OK;
}

zt_status ops_cuda_pinned_alloc(size_t bytes, void **out)
{
    *out = NULL;
    cudaError_t err = cudaMallocHost(out, bytes);
    if (err == cudaSuccess)
        return ZT_OK;
    *out = NULL;
    return zt_error_set(ZT_ERR_NOMEM, "cannot allocate %zu bytes of page-locked host memory: %s",
                        bytes, cudaGetErrorString(err));
}

void ops_cuda_pinned_free(void *p)
{
    cudaFreeHost(p);
}

zt_status ops_cuda_bind(int ordinal)
{
    int count = 0;
    CUDA_TRY(cudaGetDeviceCount(&count));
    if (ordinal >= count)
        return zt_error_set(ZT_ERR_DEVICE, "GPU %d asked for, but this process sees %d GPU%s",
                            ordinal, count, count == 1 ? "" : "s");
    if (ordinal >= 0)
        CUDA_TRY(cudaSetDevice(ordinal));
    return ZT_OK;
}

/* Everything of ctx that was made, released in reverse; accepts a partly
 * made ctx (the failure paths of open). */
static void ctx_release(struct cuda_ctx *ctx)
{
    if (ctx->host_scratch)
        cudaFreeHost(ctx->host_scratch);
    if (ctx->scratch)
        cudaFree(ctx->scratch);
    if (ctx->blas)
        cublasDestroy(ctx->blas);
    if (ctx->stream)
        cudaStreamDestroy(ctx->stream);
}

static zt_status ctx_make(struct cuda_ctx *ctx)
{
    CUDA_TRY(cudaGetDevice(&ctx->device));
    CUDA_TRY(cudaDeviceGetAttribute(&ctx->sm_count, cudaDevAttrMultiProcessorCount, ctx->device));
    CUDA_TRY(cudaStreamCreate(&ctx->stream));
    CUBLAS_TRY(cublasCreate(&ctx->blas));
    CUBLAS_TRY(cublasSetStream(ctx->blas, ctx->stream));
    CUBLAS_TRY(cublasSetMathMode(ctx->blas, CUBLAS_DEFAULT_MATH));
    /* alpha and beta are host scalars in every call (matmul.cu, lora.cu) */
    CUBLAS_TRY(cublasSetPointerMode(ctx->blas, CUBLAS_POINTER_MODE_HOST));
    CUDA_TRY(cudaMalloc(&ctx->scratch, CUDA_SCRATCH_BYTES));
    CUDA_TRY(cudaMallocHost(&ctx->host_scratch, CUDA_SCRATCH_BYTES));
    return ZT_OK;
}

zt_status ops_cuda_open(const struct ops_backend **out, void **stream)
{
    struct cuda_instance *in = calloc(1, sizeof *in);
    if (!in)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the CUDA backend's state");
    zt_status s = ctx_make(&in->ctx);
    if (s != ZT_OK) {
        ctx_release(&in->ctx);
        free(in);
        return s;
    }
    in->table = CUDA_OPS;
    in->table.ctx = &in->ctx;
    *out = &in->table;
    *stream = in->ctx.stream;
    return ZT_OK;
}

void ops_cuda_close(const struct ops_backend *ops)
{
    if (!ops)
        return;
    /* The table is the instance's first member: this is the instance. */
    struct cuda_instance *in = (struct cuda_instance *)(void *)(uintptr_t)ops;
    cudaStreamSynchronize(in->ctx.stream);
    ctx_release(&in->ctx);
    free(in);
}
