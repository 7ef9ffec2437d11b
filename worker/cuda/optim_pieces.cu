/* worker/cuda/optim_pieces.cu — the whole-tensor optimizers of the CUDA
 * backend: Adafactor's and 8-bit AdamW's rounds and apply on one piece of a
 * tensor (struct optimizer_piece; the math is worker/optim_adafactor.c and
 * worker/optim_adamw8bit.c, which these kernels follow operation for
 * operation).
 *
 * Where the buffers live: everything a piece points to is device memory,
 * the statistics included. shard/update.c allocates pc->stats[] and
 * pc->tensor_state with device_alloc (cudaMalloc under this backend),
 * zeroes the stats with the memset_zero op and sums them across ranks with
 * a collective, so the kernels read and write them in place and nothing
 * crosses to the host: no op here waits for the stream. (Pinned host memory
 * would work too, through unified addressing; pageable host memory cannot
 * be reached by a kernel, and stats_reachable turns that into an error
 * instead of a fault that would end the CUDA context.)
 *
 * Precision: float arithmetic is written as __fadd_rn / __fmul_rn /
 * __fdiv_rn / __fsqrt_rn (no fused multiply-add, which the CPU build does
 * not use either) and the double arithmetic as __dadd_rn / __dmul_rn /
 * __ddiv_rn / __dsqrt_rn, so every per-element value is the CPU's bits.
 * Constants that the CPU computes from the hyperparameters alone (powf,
 * pow) are computed on the host with the same library calls and passed by
 * value; those that depend on the statistics are computed on the device
 * (one thread), with the same correctly rounded operations.
 *
 * Determinism and the order of sums:
 * - Adafactor's row and column sums of g^2 (round 0) are one thread per row
 *   and one per column, each adding its elements into the slot in the CPU's
 *   order: bit-identical to the CPU.
 * - The mean of the row factors is a sequential sum as on the CPU (one
 *   block stages the factors in shared memory, one thread adds them in
 *   order): bit-identical.
 * - The two whole-piece sums (p^2 in round 0, u^2 in round 1) are
 *   reduce.cuh's tree_sum (per-thread strided sums, per-block trees into
 *   ctx->scratch, one block over the partials), deterministic but in an
 *   order of its own:
 *   they may differ from the CPU in the last bits of a double, which
 *   optimizer.h allows ("up to the order of double-precision sums").
 * - 8-bit AdamW's block absmax is a max, exact in any order; its codes
 *   use bitsandbytes' binary search, worker/quant_maps.h's
 *   quant_dynamic_encode itself (ZT_HOST_DEVICE), over the maps staged in
 *   shared memory (passed as kernel arguments, so no device-global table
 *   needs initialising).
 */
#include <math.h>
#include <string.h>

#include "worker/cuda/cuda_impl.h"
#include "worker/cuda/reduce.cuh"

extern "C" {
#include "worker/quant_maps.h"
}

enum { THREADS = 256, QBLOCK = ADAMW8BIT_BLOCK };

static_assert(QBLOCK == THREADS, "one thread per element of a quantisation block");

/* What a piece's kernels leave in ctx->scratch for the next ones. */
struct piece_scratch {
    double partials[reduce::TREE_SUM_SCRATCH_DOUBLES]; /* tree_sum's per-block partials */
    float inv_row_mean;                                /* Adafactor: 1 / mean of the row factors */
    float step, keep; /* Adafactor's apply: the step size and 1 - lr wd */
};

static_assert(sizeof(struct piece_scratch) <= CUDA_SCRATCH_BYTES, "fits ctx->scratch");

static __device__ __forceinline__ size_t thread_index()
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

static __device__ __forceinline__ size_t grid_stride()
{
    return (size_t)gridDim.x * blockDim.x;
}

static size_t piece_len(const struct optimizer_piece *pc)
{
    return pc->hi - pc->lo;
}

/* A kernel can read and write p: device memory, or pinned host memory
 * mapped through unified addressing. */
static zt_status stats_reachable(const void *p, const char *what)
{
    struct cudaPointerAttributes a;
    CUDA_TRY(cudaPointerGetAttributes(&a, p));
    if (a.type == cudaMemoryTypeUnregistered)
        return zt_error_set(ZT_ERR_DEVICE,
                            "%s:%d: the optimizer piece's %s is pageable host memory; the CUDA "
                            "backend reads it from kernels and needs device memory",
                            __FILE__, __LINE__, what);
    return ZT_OK;
}

/* The kernels index a piece's elements contiguously in the tensor; a
 * tensor-parallel slice's runs (struct optimizer_slice) are the CPU
 * math's, which ZeRO-Offload's update runs. */
static zt_status contiguous(const struct optimizer_piece *pc)
{
    if (pc->slice.run == 0)
        return ZT_OK;
    return zt_error_set(ZT_ERR_UNSUPPORTED,
                        "optimizer Adafactor or AdamW8bit with tensor_parallel.size > 1: the "
                        "CUDA kernels update contiguous pieces of whole tensors, not slices: set "
                        "zero_optimization.offload_optimizer.device: cpu (the update then runs "
                        "on the host), or tensor_parallel.size 1");
}

/* *slot += sum of term(i) for i < n, n > 0 (reduce.cuh's tree_sum). */
template <class Term>
static zt_status add_sum(struct cuda_ctx *ctx, Term term, size_t n, double *slot)
{
    double *partials = ((struct piece_scratch *)ctx->scratch)->partials;
    return reduce::tree_sum<true>(ctx->stream, term, n, partials, slot);
}

/* ---- Adafactor ------------------------------------------------------------------ */

/* Matrices keep row and column factors, vectors a full second moment
 * (optim_adafactor.c's adafactor_factored). */
static bool factored(const struct optimizer_piece *pc)
{
    return pc->cols > 1;
}

struct square_of_params {
    const float *p;
    __device__ double operator()(size_t i) const
    {
        const double x = p[i];
        return __dmul_rn(x, x);
    }
};

/* The unclipped update g / sqrt(v^) of piece element i (adafactor_raw_update). */
struct raw_update {
    const float *grads, *s; /* the piece's gradients; the tensor's factors */
    size_t lo;
    int rows, cols;
    const float *inv_row_mean; /* in ctx->scratch; factored tensors only */

    __device__ float operator()(size_t i) const
    {
        const size_t at = lo + i;
        const float g = grads[i];
        if (cols <= 1)
            return __fdiv_rn(g, __fsqrt_rn(s[at]));
        const size_t r = at / (size_t)cols, c = at % (size_t)cols;
        const float row = __fsqrt_rn(__fmul_rn(s[r], *inv_row_mean));
        return __fdiv_rn(__fdiv_rn(g, row), __fsqrt_rn(s[(size_t)rows + c]));
    }
};

struct square_of_update {
    struct raw_update u;
    __device__ double operator()(size_t i) const
    {
        const double x = u(i);
        return __dmul_rn(x, x);
    }
};

/* Vectors: stats[1 + at] += g^2 for each piece element. */
static __global__ void adafactor_sq_elems(const float *grads, size_t n, size_t lo, double *stats)
{
    for (size_t i = thread_index(); i < n; i += grid_stride()) {
        const double g = grads[i];
        stats[1 + lo + i] = __dadd_rn(stats[1 + lo + i], __dmul_rn(g, g));
    }
}

/* Matrices, one thread per row the piece touches: the row's slot gets its
 * g^2 added column by column, the CPU's order. */
static __global__ void adafactor_sq_rows(const float *grads, size_t lo, size_t hi, size_t cols,
                                         size_t row0, size_t n_rows, double *stats)
{
    for (size_t k = thread_index(); k < n_rows; k += grid_stride()) {
        const size_t r = row0 + k;
        const size_t from = r * cols > lo ? r * cols : lo;
        const size_t to = (r + 1) * cols < hi ? (r + 1) * cols : hi;
        double acc = stats[1 + r];
        for (size_t at = from; at < to; at++) {
            const double g = grads[at - lo];
            acc = __dadd_rn(acc, __dmul_rn(g, g));
        }
        stats[1 + r] = acc;
    }
}

/* Matrices, one thread per column: its slot gets g^2 added row by row. */
static __global__ void adafactor_sq_cols(const float *grads, size_t lo, size_t hi, size_t rows,
                                         size_t cols, size_t row0, size_t row1, double *stats)
{
    for (size_t c = thread_index(); c < cols; c += grid_stride()) {
        double *slot = &stats[1 + rows + c];
        double acc = *slot;
        int touched = 0;
        for (size_t r = row0; r <= row1; r++) {
            const size_t at = r * cols + c;
            if (at < lo || at >= hi)
                continue;
            const double g = grads[at - lo];
            acc = __dadd_rn(acc, __dmul_rn(g, g));
            touched = 1;
        }
        if (touched)
            *slot = acc;
    }
}

static zt_status adafactor_round0(struct cuda_ctx *ctx, const struct optimizer_piece *pc)
{
    const size_t n = piece_len(pc);
    if (n == 0)
        return ZT_OK;
    double *stats = pc->stats[0];
    ZT_TRY(stats_reachable(stats, "round 0 statistics"));
    if (!factored(pc)) {
        adafactor_sq_elems<<<cuda_blocks(n, THREADS), THREADS, 0, ctx->stream>>>(pc->grads, n,
                                                                                 pc->lo, stats);
        CUDA_LAUNCHED();
    } else {
        const size_t cols = (size_t)pc->cols, rows = (size_t)pc->rows;
        const size_t row0 = pc->lo / cols, row1 = (pc->hi - 1) / cols, n_rows = row1 - row0 + 1;
        adafactor_sq_rows<<<cuda_blocks(n_rows, THREADS), THREADS, 0, ctx->stream>>>(
            pc->grads, pc->lo, pc->hi, cols, row0, n_rows, stats);
        CUDA_LAUNCHED();
        adafactor_sq_cols<<<cuda_blocks(cols, THREADS), THREADS, 0, ctx->stream>>>(
            pc->grads, pc->lo, pc->hi, rows, cols, row0, row1, stats);
        CUDA_LAUNCHED();
    }
    return add_sum(ctx, square_of_params{pc->params}, n, &stats[0]);
}

/* The factors (or the vector's second moment) from round 0's totals
 * (adafactor_update_factors): s = b s + (1 - b) (mean g^2 + eps1), one
 * thread per factor. */
static __global__ void adafactor_factors_kernel(float *s, const double *sums, size_t rows,
                                                size_t cols, size_t len, bool is_factored, double b,
                                                double one_minus_b, double eps1)
{
    for (size_t i = thread_index(); i < len; i += grid_stride()) {
        double mean = sums[i];
        if (is_factored)
            mean = __ddiv_rn(mean, i < rows ? (double)cols : (double)rows);
        const double v =
            __dadd_rn(__dmul_rn(b, (double)s[i]), __dmul_rn(one_minus_b, __dadd_rn(mean, eps1)));
        s[i] = __double2float_rn(v);
    }
}

/* Adafactor's apply constants that depend on the statistics
 * (adafactor_lr and adafactor_apply), in double as the CPU computes them. */
struct adafactor_apply_args {
    double lr;         /* hp->lr, or the relative step: host-side */
    int scale_param;   /* multiply by max(eps2, RMS(p)) */
    double eps2, clip; /* hp->eps2, hp->clip_threshold */
    double wd, decay;  /* hp->weight_decay, pc->decay */
    double numel;
};

/* One block: out->inv_row_mean = rows / (the row factors summed in order,
 * the CPU's adafactor_inv_row_mean), staged 256 at a time in shared memory
 * for one thread to add; with `apply`, also the apply's step and keep from
 * stats0[0] (sum p^2) and stats1[0] (sum u^2). */
static __global__ void adafactor_consts_kernel(const float *s, int rows, bool is_factored,
                                               bool apply, const double *stats0,
                                               const double *stats1, struct adafactor_apply_args a,
                                               struct piece_scratch *out)
{
    __shared__ float chunk[THREADS];
    double sum = 0.0;
    for (int base = 0; is_factored && base < rows; base += THREADS) {
        const int k = base + (int)threadIdx.x;
        chunk[threadIdx.x] = k < rows ? s[k] : 0.0f;
        __syncthreads();
        if (threadIdx.x == 0)
            for (int j = 0; j < THREADS && base + j < rows; j++)
                sum = __dadd_rn(sum, (double)chunk[j]);
        __syncthreads();
    }
    if (threadIdx.x != 0)
        return;
    out->inv_row_mean = is_factored ? __double2float_rn(__ddiv_rn((double)rows, sum)) : 1.0f;
    if (!apply)
        return;
    double lr = a.lr;
    if (a.scale_param)
        lr = __dmul_rn(lr, fmax(a.eps2, __dsqrt_rn(__ddiv_rn(stats0[0], a.numel))));
    const double rms_u = __dsqrt_rn(__ddiv_rn(stats1[0], a.numel));
    out->step = __double2float_rn(__ddiv_rn(lr, fmax(1.0, __ddiv_rn(rms_u, a.clip))));
    out->keep = __double2float_rn(__dsub_rn(1.0, __dmul_rn(__dmul_rn(a.wd, lr), a.decay)));
}

static struct raw_update raw_update_of(const struct optimizer_piece *pc, struct piece_scratch *sc)
{
    return raw_update{pc->grads, pc->tensor_state, pc->lo, pc->rows, pc->cols, &sc->inv_row_mean};
}

static zt_status adafactor_round1(struct cuda_ctx *ctx, const struct optimizer_piece *pc,
                                  const struct optimizer_hparams *hp)
{
    ZT_TRY(stats_reachable(pc->stats[0], "round 0 statistics"));
    ZT_TRY(stats_reachable(pc->tensor_state, "tensor state"));
    /* Every rank updates its replica of the factors, holding a piece or not. */
    const double b = 1.0 - pow((double)hp->step, hp->decay_rate);
    const size_t rows = (size_t)pc->rows, cols = (size_t)pc->cols;
    const size_t len = factored(pc) ? rows + cols : pc->numel;
    adafactor_factors_kernel<<<cuda_blocks(len, THREADS), THREADS, 0, ctx->stream>>>(
        pc->tensor_state, pc->stats[0] + 1, rows, cols, len, factored(pc), b, 1.0 - b,
        (double)hp->eps);
    CUDA_LAUNCHED();
    const size_t n = piece_len(pc);
    if (n == 0)
        return ZT_OK;
    ZT_TRY(stats_reachable(pc->stats[1], "round 1 statistics"));
    struct piece_scratch *sc = (struct piece_scratch *)ctx->scratch;
    adafactor_consts_kernel<<<1, THREADS, 0, ctx->stream>>>(pc->tensor_state, pc->rows,
                                                            factored(pc), false, nullptr, nullptr,
                                                            adafactor_apply_args{}, sc);
    CUDA_LAUNCHED();
    return add_sum(ctx, square_of_update{raw_update_of(pc, sc)}, n, &pc->stats[1][0]);
}

/* The apply on one element per thread: clip and scale the update, average
 * it into the first moment (m NULL: none) and apply decay and update. */
static __global__ void adafactor_apply_kernel(struct raw_update u, float *params, float *m,
                                              size_t n, float b1, float one_minus_b1,
                                              const struct piece_scratch *sc)
{
    const float step = sc->step, keep = sc->keep;
    for (size_t i = thread_index(); i < n; i += grid_stride()) {
        float x = __fmul_rn(step, u(i));
        if (m) {
            m[i] = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(one_minus_b1, x));
            x = m[i];
        }
        params[i] = __fsub_rn(__fmul_rn(keep, params[i]), x);
    }
}

zt_status cuda_adafactor_round(const struct ops_backend *self, int round,
                               const struct optimizer_piece *pc, const struct optimizer_hparams *hp)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    ZT_TRY(contiguous(pc));
    return round == 0 ? adafactor_round0(ctx, pc) : adafactor_round1(ctx, pc, hp);
}

zt_status cuda_adafactor_apply(const struct ops_backend *self, const struct optimizer_piece *pc,
                               const struct optimizer_hparams *hp)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    ZT_TRY(contiguous(pc));
    const size_t n = piece_len(pc);
    if (n == 0)
        return ZT_OK; /* the CPU's apply changes nothing without a piece */
    ZT_TRY(stats_reachable(pc->stats[0], "round 0 statistics"));
    ZT_TRY(stats_reachable(pc->stats[1], "round 1 statistics"));
    /* adafactor_lr's part that needs no statistics, as the CPU computes it */
    const double t = (double)hp->step;
    double lr = hp->lr;
    if (hp->relative_step) {
        const double min_step = hp->warmup_init ? 1e-6 * t : 1e-2;
        lr = fmin(min_step, 1.0 / sqrt(t));
    }
    const struct adafactor_apply_args a = {
        lr,        hp->scale_parameter, hp->eps2, hp->clip_threshold, hp->weight_decay,
        pc->decay, (double)pc->numel};
    struct piece_scratch *sc = (struct piece_scratch *)ctx->scratch;
    adafactor_consts_kernel<<<1, THREADS, 0, ctx->stream>>>(
        pc->tensor_state, pc->rows, factored(pc), true, pc->stats[0], pc->stats[1], a, sc);
    CUDA_LAUNCHED();
    const float b1 = hp->beta1;
    float *m = b1 > 0.0f ? (float *)pc->states[0] : nullptr;
    adafactor_apply_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, ctx->stream>>>(
        raw_update_of(pc, sc), pc->params, m, n, b1, 1.0f - b1, sc);
    CUDA_LAUNCHED();
    return ZT_OK;
}

/* ---- 8-bit AdamW ---------------------------------------------------------------- */

/* The two dynamic maps, passed by value to the kernels that stage them in
 * shared memory (2 KiB of kernel arguments). */
struct quant_maps {
    float s[256]; /* quant_dynamic_signed: the first moment */
    float u[256]; /* quant_dynamic_unsigned: the second */
};

static struct quant_maps quant_maps_of(void)
{
    struct quant_maps q;
    memcpy(q.s, quant_dynamic_signed, sizeof q.s);
    memcpy(q.u, quant_dynamic_unsigned, sizeof q.u);
    return q;
}

/* The maps in shared memory; blockDim.x == 256. */
static __device__ void stage_maps(const struct quant_maps &q, float *s, float *u)
{
    s[threadIdx.x] = q.s[threadIdx.x];
    u[threadIdx.x] = q.u[threadIdx.x];
    __syncthreads();
}

/* The hyperparameters of a step, as floats the CPU reads them. */
struct adamw8bit_args {
    float b1, b2, one_minus_b1, one_minus_b2;
    float step_size, eps, keep; /* adamw8bit_step_of's */
};

static struct adamw8bit_args adamw8bit_args_of(float decay, const struct optimizer_hparams *hp)
{
    const float bc1 = 1.0f - powf(hp->beta1, (float)hp->step);
    const float bc2 = sqrtf(1.0f - powf(hp->beta2, (float)hp->step));
    return adamw8bit_args{hp->beta1,
                          hp->beta2,
                          1.0f - hp->beta1,
                          1.0f - hp->beta2,
                          -hp->lr * bc2 / bc1,
                          bc2 * hp->eps,
                          1.0f - hp->lr * hp->weight_decay * decay};
}

/* Element at's moments after this step from its codes and the blocks'
 * absmax before it (adamw8bit_moments). */
static __device__ __forceinline__ void moments_8bit(const float *ms, const float *mu,
                                                    const float *absmax, size_t nb, size_t at,
                                                    unsigned char c1, unsigned char c2, float g,
                                                    const struct adamw8bit_args &a, float *m,
                                                    float *v)
{
    const size_t block = at / QBLOCK;
    *m = __fadd_rn(__fmul_rn(__fmul_rn(ms[c1], absmax[block]), a.b1), __fmul_rn(a.one_minus_b1, g));
    *v = __fadd_rn(__fmul_rn(__fmul_rn(mu[c2], absmax[nb + block]), a.b2),
                   __fmul_rn(__fmul_rn(a.one_minus_b2, g), g));
}

/* adamw8bit_param: the Adam step, then the decoupled decay. */
static __device__ __forceinline__ float param_8bit(float p, float m, float v,
                                                   const struct adamw8bit_args &a)
{
    p = __fadd_rn(p, __fmul_rn(a.step_size, __fdiv_rn(m, __fadd_rn(__fsqrt_rn(v), a.eps))));
    return __fmul_rn(p, a.keep);
}

/* What the quantised kernels read of a piece. */
struct piece_8bit {
    const float *grads;
    float *params;
    unsigned char *c1, *c2;
    const float *absmax; /* tensor_state: absmax1[nb], absmax2[nb] */
    size_t lo, hi, nb;
};

/* A quantisation block's largest |m| and v, combined with fmax (NaN
 * ignored, exact in any order). */
struct max_pair {
    double m, v;
};

struct fmax_pair_op {
    __device__ max_pair operator()(max_pair a, max_pair b) const
    {
        return max_pair{fmax(a.m, b.m), fmax(a.v, b.v)};
    }
};

/* Round 0: one block per quantisation block the piece touches, one thread
 * per element; the block's max |m| and v go into stats[qb] and
 * stats[nb + qb] with fmax. */
static __global__ void adamw8bit_max_kernel(struct piece_8bit pc, struct quant_maps q,
                                            struct adamw8bit_args a, size_t qb0, size_t n_qb,
                                            double *stats)
{
    __shared__ float ms[256], mu[256];
    stage_maps(q, ms, mu);
    for (size_t k = blockIdx.x; k < n_qb; k += gridDim.x) {
        const size_t qb = qb0 + k, at = qb * QBLOCK + threadIdx.x;
        double a1 = 0.0, a2 = 0.0;
        if (at >= pc.lo && at < pc.hi) {
            const size_t i = at - pc.lo;
            float m, v;
            moments_8bit(ms, mu, pc.absmax, pc.nb, at, pc.c1[i], pc.c2[i], pc.grads[i], a, &m, &v);
            a1 = fabsf(m);
            a2 = fabsf(v);
        }
        const max_pair top =
            reduce::block_tree<THREADS>(max_pair{fmax(0.0, a1), fmax(0.0, a2)}, fmax_pair_op{});
        if (threadIdx.x == 0) {
            stats[qb] = fmax(stats[qb], top.m);
            stats[pc.nb + qb] = fmax(stats[pc.nb + qb], top.v);
        }
        __syncthreads(); /* every thread has read the tree before the next block's */
    }
}

/* The quantised apply, one thread per element: moments, parameter, and the
 * new codes under the blocks' new absmax (adamw8bit_apply_quantised). */
static __global__ void adamw8bit_apply_kernel(struct piece_8bit pc, struct quant_maps q,
                                              struct adamw8bit_args a, const double *new_max)
{
    __shared__ float ms[256], mu[256];
    stage_maps(q, ms, mu);
    const size_t n = pc.hi - pc.lo;
    for (size_t i = thread_index(); i < n; i += grid_stride()) {
        const size_t at = pc.lo + i, block = at / QBLOCK;
        float m, v;
        moments_8bit(ms, mu, pc.absmax, pc.nb, at, pc.c1[i], pc.c2[i], pc.grads[i], a, &m, &v);
        pc.params[i] = param_8bit(pc.params[i], m, v, a);
        /* an all-zero block has absmax 0: its codes are those of 0 */
        const float a1 = __double2float_rn(new_max[block]);
        const float a2 = __double2float_rn(new_max[pc.nb + block]);
        unsigned char c1 = quant_dynamic_encode(ms, a1 > 0.0f ? __fdiv_rn(m, a1) : 0.0f);
        const unsigned char c2 = quant_dynamic_encode(mu, a2 > 0.0f ? __fdiv_rn(v, a2) : 0.0f);
        /* the first moment keeps its sign (bitsandbytes' rule) */
        if ((__float_as_uint(ms[c1]) >> 31) != (__float_as_uint(m) >> 31))
            c1 = (unsigned char)(m > 0.0f ? c1 + 1 : c1 - 1);
        pc.c1[i] = c1;
        pc.c2[i] = c2;
    }
}

/* dst[i] = (float)src[i]: the new block scales, or the fp32 moments of a
 * small tensor, that every rank keeps. */
static __global__ void narrow_kernel(float *dst, const double *src, size_t n)
{
    for (size_t i = thread_index(); i < n; i += grid_stride())
        dst[i] = __double2float_rn(src[i]);
}

/* Small tensors, round 1: the piece's updated fp32 moments into the stats
 * (m_new[at], v_new[at]; the other ranks' slots stay 0 for the sum). */
static __global__ void adamw8bit_fp32_moments(const float *grads, const float *state, size_t lo,
                                              size_t n, size_t numel, struct adamw8bit_args a,
                                              double *stats)
{
    for (size_t i = thread_index(); i < n; i += grid_stride()) {
        const size_t at = lo + i;
        const float g = grads[i];
        const float m = __fadd_rn(__fmul_rn(a.b1, state[at]), __fmul_rn(a.one_minus_b1, g));
        const float v = __fadd_rn(__fmul_rn(a.b2, state[numel + at]),
                                  __fmul_rn(__fmul_rn(a.one_minus_b2, g), g));
        stats[at] = m;
        stats[numel + at] = v;
    }
}

/* Small tensors, apply: the piece's parameters from the summed moments. */
static __global__ void adamw8bit_fp32_apply(float *params, const double *stats, size_t lo, size_t n,
                                            size_t numel, struct adamw8bit_args a)
{
    for (size_t i = thread_index(); i < n; i += grid_stride()) {
        const size_t at = lo + i;
        const float m = __double2float_rn(stats[at]), v = __double2float_rn(stats[numel + at]);
        params[i] = param_8bit(params[i], m, v, a);
    }
}

static bool quantised(const struct optimizer_piece *pc, const struct optimizer_hparams *hp)
{
    return (long)pc->numel >= hp->min_8bit_size;
}

static size_t blocks_8bit(size_t numel)
{
    return (numel + QBLOCK - 1) / QBLOCK;
}

static struct piece_8bit piece_8bit_of(const struct optimizer_piece *pc)
{
    return piece_8bit{pc->grads,
                      pc->params,
                      (unsigned char *)pc->states[0],
                      (unsigned char *)pc->states[1],
                      pc->tensor_state,
                      pc->lo,
                      pc->hi,
                      blocks_8bit(pc->numel)};
}

zt_status cuda_adamw8bit_round(const struct ops_backend *self, int round,
                               const struct optimizer_piece *pc, const struct optimizer_hparams *hp)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    ZT_TRY(contiguous(pc));
    const size_t n = piece_len(pc);
    /* round 0 is the quantised tensors', round 1 the small ones' */
    if (n == 0 || (round == 0) != quantised(pc, hp))
        return ZT_OK;
    ZT_TRY(stats_reachable(pc->stats[round], "statistics"));
    ZT_TRY(stats_reachable(pc->tensor_state, "tensor state"));
    const struct adamw8bit_args a = adamw8bit_args_of(pc->decay, hp);
    if (round == 1) {
        adamw8bit_fp32_moments<<<cuda_blocks(n, THREADS), THREADS, 0, ctx->stream>>>(
            pc->grads, pc->tensor_state, pc->lo, n, pc->numel, a, pc->stats[1]);
        CUDA_LAUNCHED();
        return ZT_OK;
    }
    const size_t qb0 = pc->lo / QBLOCK, n_qb = (pc->hi - 1) / QBLOCK - qb0 + 1;
    adamw8bit_max_kernel<<<cuda_blocks(n_qb, 1), THREADS, 0, ctx->stream>>>(
        piece_8bit_of(pc), quant_maps_of(), a, qb0, n_qb, pc->stats[0]);
    CUDA_LAUNCHED();
    return ZT_OK;
}

zt_status cuda_adamw8bit_apply(const struct ops_backend *self, const struct optimizer_piece *pc,
                               const struct optimizer_hparams *hp)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    ZT_TRY(contiguous(pc));
    const size_t n = piece_len(pc);
    const int q = quantised(pc, hp) ? 0 : 1;
    ZT_TRY(stats_reachable(pc->stats[q], "statistics"));
    ZT_TRY(stats_reachable(pc->tensor_state, "tensor state"));
    const struct adamw8bit_args a = adamw8bit_args_of(pc->decay, hp);
    if (n > 0 && q == 0) {
        adamw8bit_apply_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, ctx->stream>>>(
            piece_8bit_of(pc), quant_maps_of(), a, pc->stats[0]);
        CUDA_LAUNCHED();
    } else if (n > 0) {
        adamw8bit_fp32_apply<<<cuda_blocks(n, THREADS), THREADS, 0, ctx->stream>>>(
            pc->params, pc->stats[1], pc->lo, n, pc->numel, a);
        CUDA_LAUNCHED();
    }
    /* every rank, holding a piece or not, takes the new scales (or moments),
     * after the kernel above has read the old ones */
    const size_t len = q == 0 ? 2 * blocks_8bit(pc->numel) : 2 * pc->numel;
    narrow_kernel<<<cuda_blocks(len, THREADS), THREADS, 0, ctx->stream>>>(pc->tensor_state,
                                                                          pc->stats[q], len);
    CUDA_LAUNCHED();
    return ZT_OK;
}
