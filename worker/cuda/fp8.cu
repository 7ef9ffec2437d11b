/* worker/cuda/fp8.cu — the fp8 quantisation ops on the GPU, bit for bit
 * common/fp8.h's codec (fp8_encode_scaled, fp8_amax, fp8_decode_scaled) as
 * worker/cpu/fp8.c is.
 *
 * The encode and decode are common/fp8.h's own fp8_encode_with and
 * fp8_decode_with (ZT_HOST_DEVICE: the CPU's source compiled for the
 * device: integer arithmetic on the float's bits, round to nearest even
 * with the carry into the next binade, saturation to the largest finite
 * code, infinities included, the format's NaN with its sign), reading the
 * format's table row (fp8_format_info) passed by value. The branches on
 * the value's class that keep the CPU codec scalar cost little here: a
 * warp diverges only where its 32 values differ in class, and the op is
 * bound by memory traffic either way. The scaled value is one float
 * product rounded to nearest (__fmul_rn: never fused), as the codec's
 * x[i] * scale.
 *
 * quantize: a grid-stride loop, one element per thread per step, encodes
 * and keeps the largest |x| as bits (non-negative floats order as their
 * bits do, NaNs above +inf); each block reduces its threads' maxima in
 * reduce.cuh's shared-memory tree and writes one partial to ctx->scratch,
 * a single block
 * reduces the partials, turns a NaN into fp8_amax's canonical NaN and
 * leaves the result in scratch, and the host reads it back through
 * ctx->host_scratch after waiting for the stream (amax is a host float).
 * A maximum of integers is exact in any order, so the result is the same
 * on every run; the reduction is still a fixed tree, without atomics.
 *
 * dequantize: each block first fills a 256-entry shared table with every
 * code's value times scale_inv (the same float product the CPU's table
 * holds), then its threads look their codes up.
 */
#include <string.h>

#include "worker/cuda/cuda_impl.h"
#include "worker/cuda/reduce.cuh"

/* Threads per block of both ops (the dequantize table has one entry per
 * thread); blocks of the quantize grid: more only add partials, the
 * grid-stride loop covers any n. */
enum { FP8_THREADS = 256, QUANT_MAX_BLOCKS = 1024 };

/* max of two unsigned integers, for the amax tree. */
struct umax_op {
    __device__ uint32_t operator()(uint32_t a, uint32_t b) const
    {
        return max(a, b);
    }
};

/* q[i] = fp8_encode(x[i] * scale); partial[block] = the largest bits of |x[i]|
 * over the block's elements. */
__global__ void quantize_kernel(uint8_t *q, uint32_t *partial, const float *x, size_t n,
                                float scale, struct fp8_format_info k)
{
    uint32_t amax = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i];
        amax = max(amax, __float_as_uint(v) & 0x7fffffffu);
        q[i] = fp8_encode_with(__fmul_rn(v, scale), &k);
    }
    const uint32_t m = reduce::block_tree<FP8_THREADS>(amax, umax_op{});
    if (threadIdx.x == 0)
        partial[blockIdx.x] = m;
}

/* *result = the largest of partial[0..count), fp8_amax's canonical NaN
 * when it is a NaN's bits. One block. */
__global__ void amax_finish(uint32_t *result, const uint32_t *partial, unsigned count)
{
    uint32_t v = 0;
    for (unsigned i = threadIdx.x; i < count; i += blockDim.x)
        v = max(v, partial[i]);
    const uint32_t m = reduce::block_tree<FP8_THREADS>(v, umax_op{});
    if (threadIdx.x == 0)
        *result = m > 0x7f800000u ? 0x7fc00000u : m;
}

extern "C" zt_status cuda_fp8_quantize(const struct ops_backend *self, uint8_t *q, float *amax,
                                       const float *x, size_t n, float scale, enum fp8_format f)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    const struct fp8_format_info k = *fp8_format_info(f); /* asserts a valid f */
    unsigned blocks = cuda_blocks(n, FP8_THREADS);
    blocks = blocks < (unsigned)QUANT_MAX_BLOCKS ? blocks : (unsigned)QUANT_MAX_BLOCKS;
    uint32_t *partial = (uint32_t *)ctx->scratch, *result = partial + QUANT_MAX_BLOCKS;
    quantize_kernel<<<blocks, FP8_THREADS, 0, ctx->stream>>>(q, partial, x, n, scale, k);
    CUDA_LAUNCHED();
    amax_finish<<<1, FP8_THREADS, 0, ctx->stream>>>(result, partial, blocks);
    CUDA_LAUNCHED();
    CUDA_TRY(cudaMemcpyAsync(ctx->host_scratch, result, sizeof *result, cudaMemcpyDeviceToHost,
                             ctx->stream));
    CUDA_TRY(cudaStreamSynchronize(ctx->stream));
    memcpy(amax, ctx->host_scratch, sizeof *amax);
    return ZT_OK;
}

/* x[i] = fp8_decode(q[i]) * scale_inv through the block's table of all 256
 * codes. */
__global__ void dequantize_kernel(float *x, const uint8_t *q, size_t n, float scale_inv,
                                  struct fp8_format_info k)
{
    __shared__ float table[256];
    for (unsigned c = threadIdx.x; c < 256; c += blockDim.x)
        table[c] = __fmul_rn(fp8_decode_with((uint8_t)c, &k), scale_inv);
    __syncthreads();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] = table[q[i]];
}

extern "C" zt_status cuda_fp8_dequantize(const struct ops_backend *self, float *x, const uint8_t *q,
                                         size_t n, float scale_inv, enum fp8_format f)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    const struct fp8_format_info k = *fp8_format_info(f); /* asserts a valid f */
    if (n == 0)
        return ZT_OK;
    dequantize_kernel<<<cuda_blocks(n, FP8_THREADS), FP8_THREADS, 0, ctx->stream>>>(x, q, n,
                                                                                    scale_inv, k);
    CUDA_LAUNCHED();
    return ZT_OK;
}
