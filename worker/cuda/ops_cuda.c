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
 * unless asked for), so the GPU's losses can be compared with the CPU's;
 * 16-bit GEMMs multiply on tensor cores and sum in fp32.
 */
#include "worker/cuda/cuda_impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cublas_api.h>

/* Products run through cublasGemmEx with fp32 accumulation whatever the
 * operands (matmul.cu's cuda_gemm). */
static zt_status cuda_gemm_describe(const struct ops_backend *self, enum zt_dtype ab_type,
                                    char *buf, size_t n)
{
    ZT_TRY(cuda_ctx_computes(cuda_ctx_of(self), ab_type));
    snprintf(buf, n, "cublas %d.%d.%d gemmex, %s operands, fp32 sums", CUBLAS_VER_MAJOR,
             CUBLAS_VER_MINOR, CUBLAS_VER_PATCH, zt_precision_name(ab_type));
    return ZT_OK;
}

/* The model ops have every 16-bit form (their kernels are templates over
 * the element type); what the GPU must have is the tensor cores cuBLAS
 * multiplies 16-bit operands on with fp32 sums: fp16 from Volta (7.0),
 * bf16 from Ampere (8.0). */
zt_status cuda_ctx_computes(const struct cuda_ctx *ctx, enum zt_dtype t)
{
    ZT_ASSERT(t == ZT_F32 || t == ZT_BF16 || t == ZT_F16);
    const int need = t == ZT_BF16 ? 80 : t == ZT_F16 ? 70 : 0;
    const int have = ctx->cc_major * 10 + ctx->cc_minor;
    if (have >= need)
        return ZT_OK;
    return zt_error_set(ZT_ERR_UNSUPPORTED,
                        "GPU %d (compute capability %d.%d) has no %s tensor-core GEMM; %s needs "
                        "%d.%d or newer",
                        ctx->device, ctx->cc_major, ctx->cc_minor, zt_precision_name(t),
                        zt_precision_name(t), need / 10, need % 10);
}

static zt_status cuda_computes(const struct ops_backend *self, enum zt_dtype t)
{
    return cuda_ctx_computes(cuda_ctx_of(self), t);
}

static const struct ops_backend CUDA_OPS = {
    .name = "cuda",
    .gemm_describe = cuda_gemm_describe,
    .computes = cuda_computes,
    .encoder_forward = cuda_encoder_forward,
    .encoder_backward = cuda_encoder_backward,
    .encoder_forward_vocab = cuda_encoder_forward_vocab,
    .encoder_backward_vocab = cuda_encoder_backward_vocab,
    .layernorm_forward = cuda_layernorm_forward,
    .layernorm_backward = cuda_layernorm_backward,
    .matmul_forward = cuda_matmul_forward,
    .matmul_backward = cuda_matmul_backward,
    .fp8_quantize = cuda_fp8_quantize,
    .fp8_dequantize = cuda_fp8_dequantize,
    .lora_forward = cuda_lora_forward,
    .lora_backward = cuda_lora_backward,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .attention_cached_forward = cuda_attention_cached_forward,
    .rmsnorm_forward = cuda_rmsnorm_forward,
    .rmsnorm_backward = cuda_rmsnorm_backward,
    .rope_forward = cuda_rope_forward,
    .rope_backward = cuda_rope_backward,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .swiglu_forward = cuda_swiglu_forward,
    .swiglu_backward = cuda_swiglu_backward,
    .residual_forward = cuda_residual_forward,
    .mul_forward = cuda_mul_forward,
    .mul_backward = cuda_mul_backward,
    .crossentropy_forward = cuda_crossentropy_forward,
    .crossentropy_backward = cuda_crossentropy_backward,
    .crossentropy_vocab_max = cuda_crossentropy_vocab_max,
    .crossentropy_vocab_exp = cuda_crossentropy_vocab_exp,
    .crossentropy_vocab_finish = cuda_crossentropy_vocab_finish,
    .crossentropy_vocab_backward = cuda_crossentropy_vocab_backward,
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
    CUDA_TRY(
        cudaDeviceGetAttribute(&ctx->cc_major, cudaDevAttrComputeCapabilityMajor, ctx->device));
    CUDA_TRY(
        cudaDeviceGetAttribute(&ctx->cc_minor, cudaDevAttrComputeCapabilityMinor, ctx->device));
    CUDA_TRY(cudaStreamCreate(&ctx->stream));
    CUBLAS_TRY(cublasCreate(&ctx->blas));
    CUBLAS_TRY(cublasSetStream(ctx->blas, ctx->stream));
    /* Without the second flag cuBLAS may reduce split-K partial sums of a
     * 16-bit product in the output's precision: several roundings where
     * worker/ops.h promises one. */
    CUBLAS_TRY(cublasSetMathMode(
        ctx->blas,
        (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
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
