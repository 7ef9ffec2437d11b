/* worker/cpu/ops_cpu_impl.h — for worker/cpu/ only: the CPU ops behind
 * ops_cpu_backend() and the vectorisable exponential they share.
 *
 * Every function here has the semantics of the `struct ops_backend` member of
 * the same stem in worker/ops.h (forward overwrites, backward accumulates,
 * except rope_backward, which transforms in place); ops_cpu.c only puts them
 * in the table. Matrix products go to OpenBLAS and run on its threads; row
 * loops run on OpenMP threads. Both counts are set by ops_cpu_set_threads().
 *
 * Why a private exp: the softmaxes (attention, and cross-entropy over the
 * whole vocabulary: 51M exponentials a step at B*T = 1024), GELU and SwiGLU
 * take an exponential per activation, and libm's expf and tanhf are scalar
 * calls of 5 and 16 ns here; with tanhf, GELU alone cost six times the matrix
 * product feeding it. cpu_expf is branch-free so that GCC vectorises the
 * loops calling it under `#pragma omp simd` without -ffast-math.
 *
 * Why CPU_KERNEL: the build targets the x86-64 baseline (SSE2, 4 lanes).
 * Row kernels bound by vector arithmetic are compiled again for AVX2 and
 * AVX-512 with GCC's target_clones, and the loader picks the widest the CPU
 * has (an ifunc, resolved once). GELU costs 1.9, 0.9 and 0.6 ns per element
 * in the three builds. The attribute must sit on a plain function: the body
 * of an `omp parallel` region is outlined before cloning and would stay at
 * the baseline, so parallel loops call CPU_KERNEL functions per row or
 * chunk. Elsewhere CPU_KERNEL expands to nothing and the code is plain C11.
 * Clones sum reductions over different lane counts, so results can differ
 * between CPUs in the last bits; on one machine they repeat exactly.
 */
#ifndef ZT_WORKER_CPU_OPS_CPU_IMPL_H
#define ZT_WORKER_CPU_OPS_CPU_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/fp8.h"
#include "common/status.h"

#include "worker/cpu/gemm.h"
#include "worker/optim_elementwise.h"
#include "worker/precision.h"

struct ops_backend;

/* Row sums that give the same bits on every CPU. `omp simd reduction(+)`
 * sums in the order of the vector width of the clone the CPU gets (8
 * lanes under AVX2, 16 under AVX-512, 4 in the baseline), so a norm's
 * statistics, and every loss after them, would follow the CPU. Instead a
 * sum runs in CPU_LANES running partials (lane l takes terms l, l + 16,
 * ...), which every width vectorises alike, folded in lane order. */
enum { CPU_LANES = 16 };

static inline float cpu_lanes_fold(const float acc[CPU_LANES])
{
    float s = 0.0f;
    for (int l = 0; l < CPU_LANES; l++)
        s += acc[l];
    return s;
}

/* out = the sum over c in [0, n) of `term`, an expression of c, in the
 * order above. */
#define CPU_ROW_SUM(out, n, term)                                                                  \
    do {                                                                                           \
        float acc_[CPU_LANES] = {0};                                                               \
        const int nv_ = (n) / CPU_LANES * CPU_LANES;                                               \
        for (int c0_ = 0; c0_ < nv_; c0_ += CPU_LANES) {                                           \
            _Pragma("omp simd") for (int l_ = 0; l_ < CPU_LANES; l_++)                             \
            {                                                                                      \
                const int c = c0_ + l_;                                                            \
                acc_[l_] += (term);                                                                \
            }                                                                                      \
        }                                                                                          \
        for (int c = nv_; c < (n); c++)                                                            \
            acc_[c - nv_] += (term);                                                               \
        (out) = cpu_lanes_fold(acc_);                                                              \
    } while (0)

/* An opened CPU table's ctx (ops_cpu_open): its GEMM state, and one per
 * thread for products inside parallel regions (attention's tiles). */
struct cpu_ctx {
    struct cpu_gemm *gemm;
    struct cpu_gemm_team *team;
};

/* self's per-thread GEMM states; through a static table (no ctx), a team
 * made for the call, also in *owned for the caller to destroy (else
 * *owned is NULL). Errors: ZT_ERR_NOMEM. */
zt_status cpu_gemm_team_of(const struct ops_backend *self, struct cpu_gemm_team **team,
                           struct cpu_gemm_team **owned);

/* The GEMM state the op was called with: NULL through a static table. */
struct cpu_gemm *cpu_gemm_of(const struct ops_backend *self);

/* One product through self's GEMM state (gemm.h's fields in its order:
 * C = alpha op(A) op(B), + C when accumulate), A and B of type t, C of
 * type ct (ZT_F32 or t). */
zt_status cpu_gemm_typed(const struct ops_backend *self, enum zt_dtype t, enum zt_dtype ct,
                         int trans_a, int trans_b, int M, int N, int K, float alpha, const void *A,
                         int lda, const void *B, int ldb, int accumulate, void *C, int ldc);

/* ---- the 16-bit forms (worker/ops.h: t = ZT_BF16 or ZT_F16) ----
 *
 * Each runs the fp32 form's own row kernels on fp32 copies of the rows it
 * reads, widened exactly, and rounds each value it stores once: so its
 * result is the fp32 op's on the widened inputs, rounded, bit for bit.
 * Rows too wide for the stack (a norm's C, a cross-entropy's V, attention
 * heads) are staged in a heap buffer per thread and call; elementwise ops
 * and column blocks stage CPU_STAGE floats on the stack. With t = ZT_F32
 * every helper hands out the buffer itself: one code path, no copy. */
enum { CPU_STAGE = 1024 };

/* Element i of a buffer of type t. */
static inline void *cpu_elem(enum zt_dtype t, const void *p, size_t i)
{
    return (char *)p + i * zt_dtype_size(t);
}

/* precision_to_f32 and precision_from_f32 for the staging, bit for bit,
 * with bf16 in vector code (CPU_KERNEL clones): the 16-bit forms convert
 * every value they read and write, which the scalar loops made cost as
 * much as a norm itself. */
void cpu_stage_to_f32(enum zt_dtype t, const void *src, float *dst, size_t n);
void cpu_stage_from_f32(enum zt_dtype t, const float *src, void *dst, size_t n);

/* Elements [i, i + n) of src (type t) as floats: src itself under fp32,
 * else widened into tmp[n]. */
static inline const float *cpu_widen(enum zt_dtype t, const void *src, size_t i, size_t n,
                                     float *tmp)
{
    if (t == ZT_F32)
        return (const float *)src + i;
    cpu_stage_to_f32(t, cpu_elem(t, src, i), tmp, n);
    return tmp;
}

/* Where elements [i, i + n) of dst (type t) are computed in fp32: dst
 * itself under fp32, else tmp[n], holding dst's values widened when
 * `load` (an accumulation or an in-place op reads them). cpu_store then
 * rounds tmp into dst. */
static inline float *cpu_place(enum zt_dtype t, void *dst, size_t i, size_t n, float *tmp, int load)
{
    if (t == ZT_F32)
        return (float *)dst + i;
    if (load)
        cpu_stage_to_f32(t, cpu_elem(t, dst, i), tmp, n);
    return tmp;
}

static inline void cpu_store(enum zt_dtype t, void *dst, size_t i, size_t n, const float *tmp)
{
    if (t != ZT_F32)
        cpu_stage_from_f32(t, tmp, cpu_elem(t, dst, i), n);
}

/* A thread's heap staging of n floats for a 16-bit form (NULL under fp32,
 * which needs none); on failure NULL with *failed set, and the thread
 * skips its rows. cpu_stage_status turns *failed into the op's error. */
float *cpu_stage_alloc(enum zt_dtype t, size_t n, int *failed);
zt_status cpu_stage_status(int failed, const char *op, size_t floats);

/* Whether a thread with staging `stage` may compute (see cpu_stage_alloc). */
static inline int cpu_staged(enum zt_dtype t, const float *stage)
{
    return t == ZT_F32 || stage != NULL;
}

/* Runs the statements `...` for each row `i` in [0, N) on OpenMP threads
 * (a static split), `st` naming `floats` floats of staging of the thread
 * (NULL under fp32); returns the op's error from the enclosing function
 * when staging failed. */
#define CPU_STAGED_ROWS(t, floats, op, N, i, st, ...)                                              \
    do {                                                                                           \
        int failed_ = 0;                                                                           \
        _Pragma("omp parallel")                                                                    \
        {                                                                                          \
            float *st = cpu_stage_alloc(t, floats, &failed_);                                      \
            _Pragma("omp for schedule(static)") for (int i = 0; i < (N); i++)                      \
            {                                                                                      \
                if (cpu_staged(t, st)) {                                                           \
                    __VA_ARGS__                                                                    \
                }                                                                                  \
            }                                                                                      \
            free(st);                                                                              \
        }                                                                                          \
        ZT_TRY(cpu_stage_status(failed_, op, floats));                                             \
    } while (0)

/* src[0..n) of type t as floats, for every thread to read: *out is src
 * itself under fp32, else a widened copy in *owned, which the caller
 * frees. Errors: ZT_ERR_NOMEM naming `op`. */
zt_status cpu_widen_shared(enum zt_dtype t, const void *src, size_t n, const char *op,
                           float **owned, const float **out);

/* computes of worker/ops.h. */
zt_status cpu_computes(const struct ops_backend *self, enum zt_dtype t);

/* gemm_describe of worker/ops.h. */
zt_status cpu_gemm_describe_op(const struct ops_backend *self, enum zt_dtype ab_type, char *buf,
                               size_t n);

/* encoder_forward and encoder_backward of worker/ops.h. */
zt_status cpu_encoder_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                              const int32_t *tokens, const void *wte, const void *wpe, int B, int T,
                              int C);
zt_status cpu_encoder_backward(const struct ops_backend *self, enum zt_dtype t, float *dwte,
                               float *dwpe, const void *dout, const int32_t *tokens, int B, int T,
                               int C);

/* layernorm_forward and layernorm_backward of worker/ops.h. */
zt_status cpu_layernorm_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                float *mean, float *rstd, const void *inp, const void *weight,
                                const void *bias, int N, int C);
zt_status cpu_layernorm_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                                 float *dweight, float *dbias, const void *dout, const void *inp,
                                 const void *weight, const float *mean, const float *rstd, int N,
                                 int C);

/* matmul_forward and matmul_backward of worker/ops.h (one cpu_gemm per product). */
zt_status cpu_matmul_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                             const void *inp, const void *weight, const void *bias, int N, int C,
                             int OC);
zt_status cpu_matmul_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                              float *dweight, float *dbias, const void *dout, const void *inp,
                              const void *weight, int N, int C, int OC);

/* fp8_quantize and fp8_dequantize of worker/ops.h: common/fp8.h's loops. */
zt_status cpu_fp8_quantize(const struct ops_backend *self, uint8_t *q, float *amax, const float *x,
                           size_t n, float scale, enum fp8_format f);
zt_status cpu_fp8_dequantize(const struct ops_backend *self, float *x, const uint8_t *q, size_t n,
                             float scale_inv, enum fp8_format f);

/* attention_forward and attention_backward of worker/ops.h (fused, tiles
 * on the stack). */
zt_status cpu_attention_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                float *lse, const void *qkv, int B, int T, int NH, int NKV, int hs);
zt_status cpu_attention_cached_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                       const void *q, int q_stride, const void *k, const void *v,
                                       int kv_stride, int p0, int n, int NH, int NKV, int hs);
/* attention_ring_forward and attention_ring_backward of worker/ops.h
 * (attention_ring.c: the fp32 tiles of attention.c over chunk pairs). */
zt_status cpu_attention_ring_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                     float *lse, const void *qkv, const void *kv, int B, int T,
                                     int NH, int NKV, int hs, int cp, int q_rank, int kv_rank,
                                     int first);
zt_status cpu_attention_ring_backward(const struct ops_backend *self, enum zt_dtype t, void *dqkv,
                                      void *dkv, const void *dout, const void *qkv, const void *kv,
                                      const void *out, const float *lse, int B, int T, int NH,
                                      int NKV, int hs, int cp, int q_rank, int kv_rank);
zt_status cpu_attention_backward(const struct ops_backend *self, enum zt_dtype t, void *dqkv,
                                 const void *dout, const void *qkv, const void *out,
                                 const float *lse, int B, int T, int NH, int NKV, int hs);

/* rmsnorm_forward and rmsnorm_backward of worker/ops.h. */
zt_status cpu_rmsnorm_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                              float *rstd, const void *inp, const void *weight, int N, int C,
                              float eps);
zt_status cpu_rmsnorm_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                               float *dweight, const void *dout, const void *inp,
                               const void *weight, const float *rstd, int N, int C);

/* rope_forward and rope_backward of worker/ops.h; hs odd or heads wider
 * than row_stride fail a ZT_ASSERT. */
zt_status cpu_rope_forward(const struct ops_backend *self, enum zt_dtype t, void *x,
                           const float *cos_t, const float *sin_t, int B, int T, int n_heads,
                           int hs, int row_stride);
zt_status cpu_rope_backward(const struct ops_backend *self, enum zt_dtype t, void *dx,
                            const float *cos_t, const float *sin_t, int B, int T, int n_heads,
                            int hs, int row_stride);

/* swiglu_forward and swiglu_backward of worker/ops.h. */
zt_status cpu_swiglu_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                             const void *gu, int N, int I);
zt_status cpu_swiglu_backward(const struct ops_backend *self, enum zt_dtype t, void *dgu,
                              const void *dout, const void *gu, int N, int I);

/* lora_forward and lora_backward of worker/ops.h (sgemm on strided rows). */
zt_status cpu_lora_forward(const struct ops_backend *self, enum zt_dtype t, void *out, int ldo,
                           void *u, const void *inp, const void *A, const void *B, float scale,
                           int N, int C, int r, int OC);
zt_status cpu_lora_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp, float *dA,
                            float *dB, void *scratch, const void *dout, int ldo, const void *inp,
                            const void *A, const void *B, float scale, int N, int C, int r, int OC);

/* gelu_forward, gelu_backward, residual_forward and mul_forward/backward of
 * worker/ops.h (the elementwise ops). */
zt_status cpu_gelu_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                           const void *inp, int N);
zt_status cpu_gelu_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                            const void *inp, const void *dout, int N);
zt_status cpu_residual_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                               const void *a, const void *b, int N);
zt_status cpu_mul_forward(const struct ops_backend *self, enum zt_dtype t, void *out, const void *a,
                          const void *b, int N);
zt_status cpu_mul_backward(const struct ops_backend *self, enum zt_dtype t, void *da, const void *b,
                           const void *dout, int N);

/* crossentropy_forward and crossentropy_backward of worker/ops.h; a target
 * outside [0, V) fails a ZT_ASSERT. */
zt_status cpu_crossentropy_forward(const struct ops_backend *self, enum zt_dtype t, float *losses,
                                   void *probs, const void *logits, const int32_t *targets, int N,
                                   int V);
zt_status cpu_crossentropy_backward(const struct ops_backend *self, enum zt_dtype t, void *dlogits,
                                    const void *probs, const int32_t *targets, float dloss, int N,
                                    int V);

/* The vocabulary-parallel embedding and cross-entropy of worker/ops.h
 * (worker/cpu/vocab_parallel.c): encoder_forward_vocab,
 * encoder_backward_vocab, crossentropy_vocab_max, crossentropy_vocab_exp,
 * crossentropy_vocab_finish and crossentropy_vocab_backward; Vp < 1 or
 * v_lo < 0 fails a ZT_ASSERT. */
zt_status cpu_encoder_forward_vocab(const struct ops_backend *self, enum zt_dtype t, void *out,
                                    const int32_t *tokens, const void *wte_part, const void *wpe,
                                    int B, int T, int C, int v_lo, int Vp);
zt_status cpu_encoder_backward_vocab(const struct ops_backend *self, enum zt_dtype t,
                                     float *dwte_part, float *dwpe, const void *dout,
                                     const int32_t *tokens, int B, int T, int C, int v_lo, int Vp);
zt_status cpu_crossentropy_vocab_max(const struct ops_backend *self, enum zt_dtype t,
                                     float *row_max, const void *logits, int N, int Vp, int Vr);
zt_status cpu_crossentropy_vocab_exp(const struct ops_backend *self, enum zt_dtype t, void *probs,
                                     float *row_stats, const void *logits, const float *row_max,
                                     const int32_t *targets, int N, int Vp, int Vr, int v_lo);
zt_status cpu_crossentropy_vocab_finish(const struct ops_backend *self, enum zt_dtype t,
                                        float *losses, void *probs, const float *row_stats,
                                        const int32_t *targets, int N, int Vp);
zt_status cpu_crossentropy_vocab_backward(const struct ops_backend *self, enum zt_dtype t,
                                          void *dlogits, const void *probs, const int32_t *targets,
                                          float dloss, int N, int Vp, int v_lo);

/* The engine ops of worker/ops.h. The ones that are the same for every
 * instruction set (worker/cpu/engine_ops.c): memset_zero and the
 * whole-tensor optimizers. */
zt_status cpu_memset_zero(const struct ops_backend *self, void *p, size_t bytes);
zt_status cpu_adafactor_round(const struct ops_backend *self, int round,
                              const struct optimizer_piece *pc, const struct optimizer_hparams *hp);
zt_status cpu_adafactor_apply(const struct ops_backend *self, const struct optimizer_piece *pc,
                              const struct optimizer_hparams *hp);
zt_status cpu_adamw8bit_round(const struct ops_backend *self, int round,
                              const struct optimizer_piece *pc, const struct optimizer_hparams *hp);
zt_status cpu_adamw8bit_apply(const struct ops_backend *self, const struct optimizer_piece *pc,
                              const struct optimizer_hparams *hp);

/* ---- the engine's elementwise ops per instruction set ---------------------
 *
 * Each instruction set (enum ops_cpu_isa) provides the engine ops of
 * worker/ops.h that touch every element: to_f32, from_f32, add_into,
 * sum_squares, scale and the element-wise optimizers, with the semantics of
 * the slots of the same stem; ops_cpu.c puts each set into its op table.
 * The generic set (cpu_*, engine_ops.c) is worker/precision.c's and
 * worker/optim_elementwise.c's plain C; the AVX2 set (cpu_avx2_*,
 * simd_avx2.c, built on x86-64 only, where the build defines ZT_HAVE_AVX2)
 * is vector code with the same results bit for bit except sum_squares'
 * order of summation. The optimizer slots of both are cpu_range_update
 * over the set's casts and rule loops. */
zt_status cpu_to_f32(const struct ops_backend *self, enum zt_dtype t, const void *src, float *dst,
                     size_t n);
zt_status cpu_from_f32(const struct ops_backend *self, enum zt_dtype t, const float *src, void *dst,
                       size_t n);
zt_status cpu_add_into(const struct ops_backend *self, enum zt_dtype t, void *dst, const void *src,
                       size_t n);
zt_status cpu_sum_squares(const struct ops_backend *self, enum zt_dtype t, const void *src,
                          size_t n, double scale, double *out);
zt_status cpu_scale(const struct ops_backend *self, float *x, size_t n, float s);
zt_status cpu_adamw_update(const struct ops_backend *self, const struct optimizer_range *r,
                           const struct optimizer_hparams *hp);
zt_status cpu_adam_update(const struct ops_backend *self, const struct optimizer_range *r,
                          const struct optimizer_hparams *hp);
zt_status cpu_sgd_update(const struct ops_backend *self, const struct optimizer_range *r,
                         const struct optimizer_hparams *hp);
zt_status cpu_lion_update(const struct ops_backend *self, const struct optimizer_range *r,
                          const struct optimizer_hparams *hp);

zt_status cpu_avx2_to_f32(const struct ops_backend *self, enum zt_dtype t, const void *src,
                          float *dst, size_t n);
zt_status cpu_avx2_from_f32(const struct ops_backend *self, enum zt_dtype t, const float *src,
                            void *dst, size_t n);
zt_status cpu_avx2_add_into(const struct ops_backend *self, enum zt_dtype t, void *dst,
                            const void *src, size_t n);
zt_status cpu_avx2_sum_squares(const struct ops_backend *self, enum zt_dtype t, const void *src,
                               size_t n, double scale, double *out);
zt_status cpu_avx2_scale(const struct ops_backend *self, float *x, size_t n, float s);
zt_status cpu_avx2_adamw_update(const struct ops_backend *self, const struct optimizer_range *r,
                                const struct optimizer_hparams *hp);
zt_status cpu_avx2_adam_update(const struct ops_backend *self, const struct optimizer_range *r,
                               const struct optimizer_hparams *hp);
zt_status cpu_avx2_sgd_update(const struct ops_backend *self, const struct optimizer_range *r,
                              const struct optimizer_hparams *hp);
zt_status cpu_avx2_lion_update(const struct ops_backend *self, const struct optimizer_range *r,
                               const struct optimizer_hparams *hp);
/* Whether this CPU (and its OS) runs the AVX2 set: AVX2, FMA and F16C. */
int cpu_avx2_usable(void);

/* The rule loops of one instruction set, indexed by enum optim_rule
 * (worker/optim_elementwise.h), and its casts. */
struct cpu_rule_kernels {
    zt_status (*to_f32)(const struct ops_backend *self, enum zt_dtype t, const void *src,
                        float *dst, size_t n);
    zt_status (*from_f32)(const struct ops_backend *self, enum zt_dtype t, const float *src,
                          void *dst, size_t n);
    optim_apply_fn apply[OPTIM_RULE_COUNT];
};

/* The element-wise update of rule `rule` on r (struct optimizer_range)
 * with kernels k, in blocks small enough for L1: a 16-bit block of
 * gradients is converted into a stack buffer, the rule runs on it (the
 * scale by gscale inside the rule), and the updated block of parameters is
 * cast into r->working while still in cache. */
zt_status cpu_range_update(const struct ops_backend *self, const struct cpu_rule_kernels *k,
                           enum optim_rule rule, const struct optimizer_range *r,
                           const struct optimizer_hparams *hp);

/* Marks a row kernel for the AVX-512 / AVX2 / baseline clones above. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define CPU_KERNEL __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CPU_KERNEL
#endif

/* A float and its bits, for the exponent and mask tricks below. */
union cpu_fbits {
    int32_t i;
    float f;
};

/* e^x in float, within 1 ulp of the exact value for x in [-87, 88] (0.98 at
 * worst on a dense grid; tests/test_ops.c holds it to 1.5); below
 * that range it returns e^-87 (about 1.6e-38, so softmax tails stay
 * harmlessly tiny), above it e^88; NaN stays NaN (with no undefined
 * conversion on the way). Cody-Waite reduction
 * x = n ln2 + r with |r| <= ln2/2, Cephes' degree-7 minimax polynomial for
 * e^r, and 2^n assembled in the exponent bits. The clamp is a bitwise select
 * rather than `x < lo ? lo : x`: with the branch, GCC's partial-redundancy
 * pass specialises the rest of the function for the constant and the loop is
 * no longer if-convertible, so it would not vectorise. */
static inline float cpu_expf(float x)
{
    const union cpu_fbits lo = {.f = -87.0f}, hi = {.f = 88.0f};
    union cpu_fbits u = {.f = x}, s;
    int32_t below = -(int32_t)(x < lo.f), above = -(int32_t)(x > hi.f);
    u.i = (u.i & ~(below | above)) | (lo.i & below) | (hi.i & above);
    x = u.f;
    /* A NaN takes n = 0 (its bits masked to +0 for n alone): converting a
     * NaN n to an integer below is undefined, while r and p carry the NaN
     * into the result. Adding and removing 1.5 * 2^23 rounds to the nearest
     * integer. */
    union cpu_fbits xn = {.f = x};
    xn.i &= ~(-(int32_t)(x != x));
    float n = (xn.f * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693145751953125f; /* ln2 split so n*hi is exact */
    r = r - n * 1.428606765330187045e-6f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    s.i = ((int32_t)n + 127) * (1 << 23);
    return p * s.f;
}

/* The softmax row pieces that crossentropy.c and vocab_parallel.c share, so
 * that a vocabulary split into one part sums exactly as the fused op does.
 * Both are inlined into their callers' CPU_KERNEL row functions and so
 * cloned with them. */

/* Terms per block of cpu_exp_sum (the error bound is in crossentropy.c). */
enum { CPU_SUM_BLOCK = 512 };

/* The largest of x[0..n), n >= 1. */
static inline float cpu_row_max(const float *x, int n)
{
    float m = x[0];
#pragma omp simd reduction(max : m)
    for (int j = 1; j < n; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}

/* p[j] = e^(x[j] - m) for j < n; returns their sum, in float but blocked:
 * one partial per vector lane within a block of CPU_SUM_BLOCK terms, then
 * the block sums added in order. */
static inline float cpu_exp_sum(float *p, const float *x, float m, int n)
{
    float total = 0.0f;
    for (int j0 = 0; j0 < n; j0 += CPU_SUM_BLOCK) {
        int j1 = j0 + CPU_SUM_BLOCK < n ? j0 + CPU_SUM_BLOCK : n;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int j = j0; j < j1; j++) {
            float e = cpu_expf(x[j] - m);
            p[j] = e;
            s += e;
        }
        total += s;
    }
    return total;
}

/* Whether index t lies in the vocabulary slice [v_lo, v_lo + Vp); false
 * for a masked target (t < 0), since v_lo >= 0. */
static inline int cpu_in_slice(int32_t t, int v_lo, int Vp)
{
    return t >= v_lo && t - v_lo < Vp;
}

#endif
