/* worker/cuda/engine_ops.cu — the engine ops of the CUDA backend: the casts
 * between fp32 and the 16-bit working precisions, add_into, sum_squares,
 * scale, memset_zero and the fused element-wise optimizer updates (AdamW,
 * Adam, SGD, Lion) over a struct optimizer_range.
 *
 * Bit-identical to the CPU's generic path (worker/precision.c,
 * worker/optim_elementwise.{h,c}): the ZeRO engine runs the same step
 * whichever backend holds a shard, so these kernels copy the CPU's
 * arithmetic operation for operation.
 * - The 16-bit conversions are common/half.h's own (ZT_HOST_DEVICE: the
 *   CPU's source compiled for the device): round to nearest even, fp16
 *   overflow to infinity, NaNs kept quiet with their payload. The
 *   hardware's __float2half_rn and __float2bfloat16_rn round the same way
 *   but do not promise the CPU's NaN bits.
 * - Every float operation is an explicit __fadd_rn / __fmul_rn / __fdiv_rn /
 *   __fsqrt_rn: nvcc would otherwise contract a * b + c into one fused
 *   multiply-add, which rounds once where the CPU (built without
 *   contraction) rounds twice. The optimizer's constants are computed on
 *   the host by the CPU's own optim_consts_init and passed by value, so the
 *   per-element work is only these correctly rounded operations.
 * - NaN payloads: the GPU's arithmetic returns one canonical NaN where x86
 *   returns the first NaN operand made quiet (or its "indefinite"
 *   0xffc00000 for inf - inf). add_into and scale, whose outputs are the
 *   engine's stored gradients, redo the x86 choice; the optimizer updates
 *   give NaN exactly where the CPU does, with possibly other NaN bits.
 *
 * Parallelisation: the element-wise ops are one thread per element in
 * grid-stride loops (every element independent). sum_squares is the one
 * reduction, reduce.cuh's tree_sum: each thread sums a fixed strided subset
 * in double, each block reduces its threads in a fixed tree into
 * ctx->scratch, and one block then reduces the partials in a fixed order,
 * so the result depends on n alone (not on the GPU model or the run) and
 * is the same bits on every rank.
 */
#include <math.h>
#include <string.h>

#include "common/half.h"
#include "worker/cuda/cuda_impl.h"
#include "worker/cuda/reduce.cuh"

extern "C" {
#include "worker/optim_elementwise.h"
}

enum { THREADS = 256 };

/* Element i of a working-precision buffer as fp32 (exact). */
static __device__ __forceinline__ float load_f32(enum zt_dtype t, const void *p, size_t i)
{
    if (t == ZT_F32)
        return ((const float *)p)[i];
    const uint16_t h = ((const uint16_t *)p)[i];
    return t == ZT_BF16 ? zt_bf16_to_f32(h) : zt_f16_to_f32(h);
}

/* Element i of a working-precision buffer = v rounded to t. */
static __device__ __forceinline__ void store_f32(enum zt_dtype t, void *p, size_t i, float v)
{
    if (t == ZT_F32)
        ((float *)p)[i] = v;
    else
        ((uint16_t *)p)[i] = t == ZT_BF16 ? zt_f32_to_bf16(v) : zt_f32_to_f16(v);
}

/* The NaN x86's SSE arithmetic returns for r = a op b when r is NaN: the
 * first NaN operand made quiet, else the "indefinite" NaN (inf - inf,
 * 0 * inf). Where r is not NaN it is r. */
static __device__ __forceinline__ float x86_nan(float r, float a, float b)
{
    if (!isnan(r))
        return r;
    if (isnan(a))
        return __uint_as_float(__float_as_uint(a) | 0x00400000u);
    if (isnan(b))
        return __uint_as_float(__float_as_uint(b) | 0x00400000u);
    return __uint_as_float(0xffc00000u);
}

static __device__ __forceinline__ size_t thread_index()
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

static __device__ __forceinline__ size_t grid_stride()
{
    return (size_t)gridDim.x * blockDim.x;
}

static void check_storage(enum zt_dtype t)
{
    ZT_ASSERT((t == ZT_F32 || t == ZT_BF16 || t == ZT_F16) && "not a storage precision");
}

/* ---- casts, add_into, scale, memset_zero ---------------------------------- */

static __global__ void to_f32_kernel(enum zt_dtype t, const void *src, float *dst, size_t n)
{
    for (size_t i = thread_index(); i < n; i += grid_stride())
        dst[i] = load_f32(t, src, i);
}

static __global__ void from_f32_kernel(enum zt_dtype t, const float *src, void *dst, size_t n)
{
    for (size_t i = thread_index(); i < n; i += grid_stride())
        store_f32(t, dst, i, src[i]);
}

static __global__ void add_into_kernel(enum zt_dtype t, void *dst, const void *src, size_t n)
{
    for (size_t i = thread_index(); i < n; i += grid_stride()) {
        const float a = load_f32(t, dst, i), b = load_f32(t, src, i);
        store_f32(t, dst, i, x86_nan(__fadd_rn(a, b), a, b));
    }
}

static __global__ void scale_kernel(float *x, size_t n, float s)
{
    for (size_t i = thread_index(); i < n; i += grid_stride())
        x[i] = x86_nan(__fmul_rn(x[i], s), x[i], s);
}

/* An fp32 "conversion" is a copy (precision_to_f32's memmove); the same
 * buffer needs none. */
static zt_status copy_f32(cudaStream_t stream, void *dst, const void *src, size_t n)
{
    if (dst != src && n > 0)
        CUDA_TRY(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    return ZT_OK;
}

zt_status cuda_to_f32(const struct ops_backend *self, enum zt_dtype t, const void *src, float *dst,
                      size_t n)
{
    check_storage(t);
    cudaStream_t stream = cuda_ctx_of(self)->stream;
    if (t == ZT_F32)
        return copy_f32(stream, dst, src, n);
    if (n == 0)
        return ZT_OK;
    to_f32_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, stream>>>(t, src, dst, n);
    CUDA_LAUNCHED();
    return ZT_OK;
}

zt_status cuda_from_f32(const struct ops_backend *self, enum zt_dtype t, const float *src,
                        void *dst, size_t n)
{
    check_storage(t);
    cudaStream_t stream = cuda_ctx_of(self)->stream;
    if (t == ZT_F32)
        return copy_f32(stream, dst, src, n);
    if (n == 0)
        return ZT_OK;
    from_f32_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, stream>>>(t, src, dst, n);
    CUDA_LAUNCHED();
    return ZT_OK;
}

zt_status cuda_add_into(const struct ops_backend *self, enum zt_dtype t, void *dst, const void *src,
                        size_t n)
{
    check_storage(t);
    if (n == 0)
        return ZT_OK;
    add_into_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(self)->stream>>>(t, dst, src,
                                                                                        n);
    CUDA_LAUNCHED();
    return ZT_OK;
}

zt_status cuda_scale(const struct ops_backend *self, float *x, size_t n, float s)
{
    if (n == 0)
        return ZT_OK;
    scale_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(self)->stream>>>(x, n, s);
    CUDA_LAUNCHED();
    return ZT_OK;
}

zt_status cuda_memset_zero(const struct ops_backend *self, void *p, size_t bytes)
{
    if (bytes == 0)
        return ZT_OK;
    CUDA_TRY(cudaMemsetAsync(p, 0, bytes, cuda_ctx_of(self)->stream));
    return ZT_OK;
}

/* ---- sum_squares ----------------------------------------------------------- */

/* (src[i] * scale)^2 in double: product and square rounded separately
 * (no fma), as precision_sum_squares does; a non-finite element makes the
 * sum non-finite. */
struct scaled_square {
    enum zt_dtype t;
    const void *src;
    double scale;
    __device__ double operator()(size_t i) const
    {
        const double v = __dmul_rn((double)load_f32(t, src, i), scale);
        return __dmul_rn(v, v);
    }
};

zt_status cuda_sum_squares(const struct ops_backend *self, enum zt_dtype t, const void *src,
                           size_t n, double scale, double *out)
{
    static_assert(reduce::TREE_SUM_SCRATCH_DOUBLES * sizeof(double) <= CUDA_SCRATCH_BYTES,
                  "the partials and the total fit the scratch buffer");
    check_storage(t);
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    if (n == 0) {
        *out = 0.0;
        return ZT_OK;
    }
    double *partials = (double *)ctx->scratch;
    double *total = partials + reduce::TREE_SUM_MAX_PARTIALS;
    ZT_TRY(reduce::tree_sum<false>(ctx->stream, scaled_square{t, src, scale}, n, partials, total));
    CUDA_TRY(cudaMemcpyAsync(ctx->host_scratch, total, sizeof(double), cudaMemcpyDeviceToHost,
                             ctx->stream));
    CUDA_TRY(cudaStreamSynchronize(ctx->stream));
    memcpy(out, ctx->host_scratch, sizeof(double));
    return ZT_OK;
}

/* ---- the fused element-wise updates --------------------------------------- */

/* optim_elementwise.h's steps, one correctly rounded operation at a time in
 * the order C evaluates them there (a * b * c is (a * b) * c). */

static __device__ __forceinline__ float adam_moments(float *m, float *v, float g,
                                                     const struct optim_consts &c)
{
    const float mi = __fadd_rn(__fmul_rn(c.b1, *m), __fmul_rn(c.c1, g));
    const float vi = __fadd_rn(__fmul_rn(c.b2, *v), __fmul_rn(__fmul_rn(c.c2, g), g));
    *m = mi;
    *v = vi;
    const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), c.inv_sqrt_bc2), c.eps);
    return __fdiv_rn(__fmul_rn(c.step_size, mi), denom);
}

static __device__ __forceinline__ void adamw_step(float *p, float *m, float *v, float g,
                                                  const struct optim_consts &c)
{
    const float step = adam_moments(m, v, g, c);
    *p = __fsub_rn(*p, __fadd_rn(__fmul_rn(c.wd, *p), step));
}

static __device__ __forceinline__ void adam_step(float *p, float *m, float *v, float g,
                                                 const struct optim_consts &c)
{
    *p = __fsub_rn(*p, adam_moments(m, v, __fadd_rn(g, __fmul_rn(c.wd, *p)), c));
}

static __device__ __forceinline__ void sgd_step(float *p, float *buf, float g,
                                                const struct optim_consts &c)
{
    g = __fadd_rn(g, __fmul_rn(c.wd, *p));
    if (buf) {
        const float b = c.first ? g : __fadd_rn(__fmul_rn(c.mu, *buf), __fmul_rn(c.keep, g));
        *buf = b;
        g = c.nesterov ? __fadd_rn(g, __fmul_rn(c.mu, b)) : b;
    }
    *p = __fsub_rn(*p, __fmul_rn(c.lr, g));
}

static __device__ __forceinline__ void lion_step(float *p, float *m, float g,
                                                 const struct optim_consts &c)
{
    const float u = __fadd_rn(__fmul_rn(c.b1, *m), __fmul_rn(c.c1, g));
    const float sign = (float)((u > 0.0f) - (u < 0.0f)); /* NaN: 0, as in C */
    *p = __fsub_rn(*p, __fadd_rn(__fmul_rn(c.wd, *p), __fmul_rn(c.lr, sign)));
    *m = __fadd_rn(__fmul_rn(c.b2, *m), __fmul_rn(c.c2, g));
}

/* One thread per element of the range: the gradient read once and
 * converted in registers, the rule, the parameter and states written once,
 * and the working copy cast from the register (struct optimizer_range). */
template <enum optim_rule R>
static __global__ void range_update_kernel(struct optimizer_range r, struct optim_consts c)
{
    for (size_t i = thread_index(); i < r.n; i += grid_stride()) {
        const float g = __fmul_rn(load_f32(r.grad_dtype, r.grads, i), c.gscale);
        float p = r.params[i];
        if constexpr (R == OPTIM_ADAMW || R == OPTIM_ADAM) {
            float m = r.states[0][i], v = r.states[1][i];
            if constexpr (R == OPTIM_ADAMW)
                adamw_step(&p, &m, &v, g, c);
            else
                adam_step(&p, &m, &v, g, c);
            r.states[0][i] = m;
            r.states[1][i] = v;
        } else if constexpr (R == OPTIM_SGD) {
            if (r.states[0]) {
                float b = r.states[0][i];
                sgd_step(&p, &b, g, c);
                r.states[0][i] = b;
            } else {
                sgd_step(&p, nullptr, g, c);
            }
        } else {
            float m = r.states[0][i];
            lion_step(&p, &m, g, c);
            r.states[0][i] = m;
        }
        r.params[i] = p;
        if (r.working)
            store_f32(r.working_dtype, r.working, i, p);
    }
}

template <enum optim_rule R>
static zt_status range_update(const struct ops_backend *self, const struct optimizer_range *r,
                              const struct optimizer_hparams *hp)
{
    check_storage(r->grad_dtype);
    if (r->working)
        check_storage(r->working_dtype);
    if (r->n == 0)
        return ZT_OK;
    struct optim_consts c;
    optim_consts_init(R, hp, r->decay, r->gscale, &c);
    range_update_kernel<R>
        <<<cuda_blocks(r->n, THREADS), THREADS, 0, cuda_ctx_of(self)->stream>>>(*r, c);
    CUDA_LAUNCHED();
    return ZT_OK;
}

zt_status cuda_adamw_update(const struct ops_backend *self, const struct optimizer_range *r,
                            const struct optimizer_hparams *hp)
{
    return range_update<OPTIM_ADAMW>(self, r, hp);
}

zt_status cuda_adam_update(const struct ops_backend *self, const struct optimizer_range *r,
                           const struct optimizer_hparams *hp)
{
    return range_update<OPTIM_ADAM>(self, r, hp);
}

zt_status cuda_sgd_update(const struct ops_backend *self, const struct optimizer_range *r,
                          const struct optimizer_hparams *hp)
{
    return range_update<OPTIM_SGD>(self, r, hp);
}

zt_status cuda_lion_update(const struct ops_backend *self, const struct optimizer_range *r,
                           const struct optimizer_hparams *hp)
{
    return range_update<OPTIM_LION>(self, r, hp);
}
