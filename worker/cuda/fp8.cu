/* worker/cuda/fp8.cu — the fp8 quantisation ops on the GPU, bit for bit
 * common/fp8.h's codec (fp8_encode_scaled, fp8_amax, fp8_decode_scaled) as
 * worker/cpu/fp8.c is.
 *
 * The encode and decode below are the codec of common/fp8.c ported to
 * device functions line for line (integer arithmetic on the float's bits:
 * round to nearest even with the carry into the next binade, saturation to
 * the largest finite code, infinities included, the format's NaN with its
 * sign), reading the same table row (fp8_format_info) passed by value. The
 * branches on the value's class that keep the CPU codec scalar cost little
 * here: a warp diverges only where its 32 values differ in class, and the
 * op is bound by memory traffic either way. The scaled value is one float
 * product rounded to nearest (__fmul_rn: never fused), as the codec's
 * x[i] * scale.
 *
 * quantize: a grid-stride loop, one element per thread per step, encodes
 * and keeps the largest |x| as bits (non-negative floats order as their
 * bits do, NaNs above +inf); each block reduces its threads' maxima in
 * shared memory and writes one partial to ctx->scratch, a single block
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

/* Threads per block of both ops (the dequantize table has one entry per
 * thread); blocks of the quantize grid: more only add partials, the
 * grid-stride loop covers any n. */
enum { FP8_THREADS = 256, QUANT_MAX_BLOCKS = 1024 };

/* The fields of struct fp8_format_info the codec reads, as kernel
 * arguments. */
struct fp8_consts {
    int exp_bits, man_bits, bias, has_inf;
    uint32_t max_code, nan_code;
};

static struct fp8_consts consts_of(enum fp8_format f)
{
    const struct fp8_format_info *fi = fp8_format_info(f); /* asserts a valid f */
    struct fp8_consts k;
    k.exp_bits = fi->exp_bits;
    k.man_bits = fi->man_bits;
    k.bias = fi->bias;
    k.has_inf = fi->has_inf;
    k.max_code = fi->max_code;
    k.nan_code = fi->nan_code;
    return k;
}

/* q + rem / 2^shift rounded to nearest even; rem < 2^shift, 1 <= shift < 32. */
__device__ static uint32_t round_shift(uint32_t q, uint32_t rem, unsigned shift)
{
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u)))
        q++;
    return q;
}

/* The code of |x| = a (float bits without sign, finite, not zero, not a
 * float subnormal), before clamping to the largest finite code. */
__device__ static uint32_t encode_magnitude(uint32_t a, const struct fp8_consts &k)
{
    const int M = k.man_bits, emin = 1 - k.bias;
    const int e = (int)(a >> 23) - 127;
    if (e + k.bias > (1 << k.exp_bits) - 1) /* beyond every exponent the format has */
        return 0xffu;
    if (e >= emin) { /* normal: rebias the exponent, round the mantissa to M bits */
        const unsigned drop = 23u - (unsigned)M;
        const uint32_t q = ((uint32_t)(e + k.bias) << M) | ((a & 0x7fffffu) >> drop);
        return round_shift(q, a & ((1u << drop) - 1u), drop);
    }
    /* subnormal: the code is the significand in units of 2^(emin-M); at
     * shift >= 25 the value is below a quarter unit */
    const unsigned shift = 23u - (unsigned)M + (unsigned)(emin - e);
    if (shift >= 25)
        return 0;
    const uint32_t sig = (a & 0x7fffffu) | 0x800000u;
    return round_shift(sig >> shift, sig & ((1u << shift) - 1u), shift);
}

/* fp8_encode(x, f) of common/fp8.h. */
__device__ static uint8_t encode(float x, const struct fp8_consts &k)
{
    const uint32_t u = __float_as_uint(x);
    const uint32_t sign = (u >> 24) & 0x80u;
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint8_t)(sign | k.nan_code);
    if (a == 0x7f800000u) /* infinity saturates too */
        return (uint8_t)(sign | k.max_code);
    if (a < 0x00800000u) /* zero or a float subnormal: far below half the smallest fp8 */
        return (uint8_t)sign;
    const uint32_t q = encode_magnitude(a, k);
    return (uint8_t)(sign | (q > k.max_code ? k.max_code : q));
}

/* fp8_decode(q, f) of common/fp8.h. */
__device__ static float decode(uint32_t q, const struct fp8_consts &k)
{
    const uint32_t sign = (q & 0x80u) << 24;
    const uint32_t c = q & 0x7fu, M = (uint32_t)k.man_bits;
    const uint32_t exp = c >> M, man = c & ((1u << M) - 1u);
    const uint32_t exp_ones = (1u << k.exp_bits) - 1u;
    if (k.has_inf && exp == exp_ones)
        return __uint_as_float(sign | 0x7f800000u | (man ? 0x400000u : 0u));
    if (!k.has_inf && c == 0x7fu)
        return __uint_as_float(sign | 0x7fc00000u);
    if (exp == 0) { /* subnormal: man * 2^(1 - bias - M), exact in a float */
        const float unit = __uint_as_float((uint32_t)(127 + 1 - k.bias - (int)M) << 23);
        return __uint_as_float(sign | __float_as_uint(__fmul_rn((float)man, unit)));
    }
    return __uint_as_float(sign | ((exp - (uint32_t)k.bias + 127u) << 23) | (man << (23u - M)));
}

/* The largest of the block's values v (one per thread), in thread 0. */
__device__ static uint32_t block_max(uint32_t v)
{
    __shared__ uint32_t m[FP8_THREADS];
    m[threadIdx.x] = v;
    __syncthreads();
    for (unsigned half = FP8_THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half)
            m[threadIdx.x] = max(m[threadIdx.x], m[threadIdx.x + half]);
        __syncthreads();
    }
    return m[0];
}

/* q[i] = encode(x[i] * scale); partial[block] = the largest bits of |x[i]|
 * over the block's elements. */
__global__ void quantize_kernel(uint8_t *q, uint32_t *partial, const float *x, size_t n,
                                float scale, struct fp8_consts k)
{
    uint32_t amax = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i];
        amax = max(amax, __float_as_uint(v) & 0x7fffffffu);
        q[i] = encode(__fmul_rn(v, scale), k);
    }
    const uint32_t m = block_max(amax);
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
    const uint32_t m = block_max(v);
    if (threadIdx.x == 0)
        *result = m > 0x7f800000u ? 0x7fc00000u : m;
}

extern "C" zt_status cuda_fp8_quantize(const struct ops_backend *self, uint8_t *q, float *amax,
                                       const float *x, size_t n, float scale, enum fp8_format f)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    const struct fp8_consts k = consts_of(f);
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

/* x[i] = decode(q[i]) * scale_inv through the block's table of all 256
 * codes. */
__global__ void dequantize_kernel(float *x, const uint8_t *q, size_t n, float scale_inv,
                                  struct fp8_consts k)
{
    __shared__ float table[256];
    for (unsigned c = threadIdx.x; c < 256; c += blockDim.x)
        table[c] = __fmul_rn(decode(c, k), scale_inv);
    __syncthreads();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] = table[q[i]];
}

extern "C" zt_status cuda_fp8_dequantize(const struct ops_backend *self, float *x, const uint8_t *q,
                                         size_t n, float scale_inv, enum fp8_format f)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    const struct fp8_consts k = consts_of(f);
    if (n == 0)
        return ZT_OK;
    dequantize_kernel<<<cuda_blocks(n, FP8_THREADS), FP8_THREADS, 0, ctx->stream>>>(x, q, n,
                                                                                    scale_inv, k);
    CUDA_LAUNCHED();
    return ZT_OK;
}
