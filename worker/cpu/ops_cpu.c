/* worker/cpu/ops_cpu.c — the CPU backend's op tables, one per instruction
 * set of the engine ops, and its thread count.
 *
 * The ops themselves live in one file per op (worker/cpu/<op>.c, the stems
 * the CUDA backend shares); this file only gathers them into constant
 * tables. The model ops are the same in every table (their hot loops pick
 * their instruction set through CPU_KERNEL's clones instead); the engine's
 * elementwise ops come in one set per instruction set (ops_cpu_impl.h).
 * ops_cpu_backend() hands out the widest set the CPU runs, decided from the
 * CPU's features on each call, so the choice lives in no variable: the
 * compute backend bundle keeps the table it was given.
 */
#include "worker/ops.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/status.h"
#include "worker/cpu/ops_cpu_impl.h"

#include <cblas.h>
#include <omp.h>

/* The slots every table shares: the model ops, memset_zero and the
 * whole-tensor optimizers. */
#define CPU_SHARED_OPS                                                                             \
    .name = "cpu", .gemm_describe = cpu_gemm_describe_op, .computes = cpu_computes,                \
    .encoder_forward = cpu_encoder_forward, .encoder_backward = cpu_encoder_backward,              \
    .encoder_forward_vocab = cpu_encoder_forward_vocab,                                            \
    .encoder_backward_vocab = cpu_encoder_backward_vocab,                                          \
    .layernorm_forward = cpu_layernorm_forward, .layernorm_backward = cpu_layernorm_backward,      \
    .matmul_forward = cpu_matmul_forward, .matmul_backward = cpu_matmul_backward,                  \
    .fp8_quantize = cpu_fp8_quantize, .fp8_dequantize = cpu_fp8_dequantize,                        \
    .lora_forward = cpu_lora_forward, .lora_backward = cpu_lora_backward,                          \
    .attention_forward = cpu_attention_forward, .attention_backward = cpu_attention_backward,      \
    .attention_cached_forward = cpu_attention_cached_forward,                                      \
    .attention_ring_forward = cpu_attention_ring_forward,                                          \
    .attention_ring_backward = cpu_attention_ring_backward,                                        \
    .rmsnorm_forward = cpu_rmsnorm_forward, .rmsnorm_backward = cpu_rmsnorm_backward,              \
    .rope_forward = cpu_rope_forward, .rope_backward = cpu_rope_backward,                          \
    .swiglu_forward = cpu_swiglu_forward, .swiglu_backward = cpu_swiglu_backward,                  \
    .gelu_forward = cpu_gelu_forward, .gelu_backward = cpu_gelu_backward,                          \
    .residual_forward = cpu_residual_forward, .mul_forward = cpu_mul_forward,                      \
    .mul_backward = cpu_mul_backward, .crossentropy_forward = cpu_crossentropy_forward,            \
    .crossentropy_backward = cpu_crossentropy_backward,                                            \
    .crossentropy_vocab_max = cpu_crossentropy_vocab_max,                                          \
    .crossentropy_vocab_exp = cpu_crossentropy_vocab_exp,                                          \
    .crossentropy_vocab_finish = cpu_crossentropy_vocab_finish,                                    \
    .crossentropy_vocab_backward = cpu_crossentropy_vocab_backward,                                \
    .memset_zero = cpu_memset_zero, .adafactor_round = cpu_adafactor_round,                        \
    .adafactor_apply = cpu_adafactor_apply, .adamw8bit_round = cpu_adamw8bit_round,                \
    .adamw8bit_apply = cpu_adamw8bit_apply

static const struct ops_backend CPU_OPS_GENERIC = {
    CPU_SHARED_OPS,
    .to_f32 = cpu_to_f32,
    .from_f32 = cpu_from_f32,
    .add_into = cpu_add_into,
    .sum_squares = cpu_sum_squares,
    .scale = cpu_scale,
    .adamw_update = cpu_adamw_update,
    .adam_update = cpu_adam_update,
    .sgd_update = cpu_sgd_update,
    .lion_update = cpu_lion_update,
};

static int always_usable(void)
{
    return 1;
}

#ifdef ZT_HAVE_AVX2
static const struct ops_backend CPU_OPS_AVX2 = {
    CPU_SHARED_OPS,
    .to_f32 = cpu_avx2_to_f32,
    .from_f32 = cpu_avx2_from_f32,
    .add_into = cpu_avx2_add_into,
    .sum_squares = cpu_avx2_sum_squares,
    .scale = cpu_avx2_scale,
    .adamw_update = cpu_avx2_adamw_update,
    .adam_update = cpu_avx2_adam_update,
    .sgd_update = cpu_avx2_sgd_update,
    .lion_update = cpu_avx2_lion_update,
};
#endif

/* The instruction sets this build has, widest first. */
static const struct {
    enum ops_cpu_isa isa;
    int (*usable)(void); /* whether this CPU runs it */
    const struct ops_backend *ops;
} ISAS[] = {
#ifdef ZT_HAVE_AVX2
    {OPS_CPU_AVX2, cpu_avx2_usable, &CPU_OPS_AVX2},
#endif
    {OPS_CPU_GENERIC, always_usable, &CPU_OPS_GENERIC},
};
#define N_ISAS (sizeof ISAS / sizeof ISAS[0])

const struct ops_backend *ops_cpu_backend(void)
{
    for (size_t k = 0; k < N_ISAS; k++)
        if (ISAS[k].usable())
            return ISAS[k].ops;
    return &CPU_OPS_GENERIC;
}

const struct ops_backend *ops_cpu_backend_isa(enum ops_cpu_isa isa, char *why, size_t n)
{
    for (size_t k = 0; k < N_ISAS; k++) {
        if (ISAS[k].isa != isa)
            continue;
        if (ISAS[k].usable())
            return ISAS[k].ops;
        if (why)
            snprintf(why, n, "this CPU lacks the %s instruction set", ops_cpu_isa_name(isa));
        return NULL;
    }
    if (why)
        snprintf(why, n, "this build has no %s kernels (not an x86-64 build)",
                 ops_cpu_isa_name(isa));
    return NULL;
}

const char *ops_cpu_isa_name(enum ops_cpu_isa isa)
{
    static const char *const names[OPS_CPU_ISA_COUNT] = {
        [OPS_CPU_GENERIC] = "generic", [OPS_CPU_AVX2] = "avx2"};
    return (unsigned)isa < OPS_CPU_ISA_COUNT ? names[isa] : "?";
}

/* A slot for every thread a region of this process may run: OpenMP's
 * count now, or the processors if a run raises it later. */
static int team_size(void)
{
    const int now = omp_get_max_threads(), procs = omp_get_num_procs();
    return now > procs ? now : procs;
}

/* One open: the table copy and the state its ctx points at, freed together. */
struct cpu_open {
    struct ops_backend ops;
    struct cpu_ctx ctx;
};

zt_status ops_cpu_open(const struct ops_backend **out)
{
    *out = NULL;
    struct cpu_open *o = calloc(1, sizeof *o);
    if (!o)
        return zt_error_set(ZT_ERR_NOMEM, "CPU op table: out of memory");
    zt_status s = cpu_gemm_create(CPU_GEMM_AUTO, &o->ctx.gemm);
    if (s == ZT_OK)
        s = cpu_gemm_team_create(team_size(), &o->ctx.team);
    if (s != ZT_OK) {
        cpu_gemm_destroy(o->ctx.gemm);
        free(o);
        return s;
    }
    o->ops = *ops_cpu_backend();
    o->ops.ctx = &o->ctx;
    *out = &o->ops;
    return ZT_OK;
}

void ops_cpu_close(const struct ops_backend *ops)
{
    if (!ops)
        return;
    struct cpu_open *o = (struct cpu_open *)ops; /* ops is o's first member */
    cpu_gemm_destroy(o->ctx.gemm);
    cpu_gemm_team_destroy(o->ctx.team);
    free(o);
}

zt_status cpu_gemm_team_of(const struct ops_backend *self, struct cpu_gemm_team **team,
                           struct cpu_gemm_team **owned)
{
    *owned = NULL;
    if (self && self->ctx) {
        *team = ((const struct cpu_ctx *)self->ctx)->team;
        return ZT_OK;
    }
    ZT_TRY(cpu_gemm_team_create(team_size(), owned));
    *team = *owned;
    return ZT_OK;
}

struct cpu_gemm *cpu_gemm_of(const struct ops_backend *self)
{
    return self && self->ctx ? ((const struct cpu_ctx *)self->ctx)->gemm : NULL;
}

zt_status cpu_gemm_typed(const struct ops_backend *self, enum zt_dtype t, enum zt_dtype ct,
                         int trans_a, int trans_b, int M, int N, int K, float alpha, const void *A,
                         int lda, const void *B, int ldb, int accumulate, void *C, int ldc)
{
    const struct cpu_gemm_call c = {.trans_a = trans_a,
                                    .trans_b = trans_b,
                                    .M = M,
                                    .N = N,
                                    .K = K,
                                    .alpha = alpha,
                                    .accumulate = accumulate,
                                    .ab_type = t,
                                    .c_type = ct,
                                    .A = A,
                                    .lda = lda,
                                    .B = B,
                                    .ldb = ldb,
                                    .C = C,
                                    .ldc = ldc};
    return cpu_gemm_run(cpu_gemm_of(self), &c);
}

float *cpu_stage_alloc(enum zt_dtype t, size_t n, int *failed)
{
    if (t == ZT_F32)
        return NULL;
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) {
#pragma omp atomic write
        *failed = 1;
    }
    return p;
}

CPU_KERNEL static void bf16_widen(const uint16_t *src, float *dst, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        const union cpu_fbits b = {.i = (int32_t)((uint32_t)src[i] << 16)};
        dst[i] = b.f;
    }
}

/* zt_f32_to_bf16's rounding, written for the vectoriser: NaN by select. */
CPU_KERNEL static void bf16_narrow(const float *src, uint16_t *dst, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        const union cpu_fbits b = {.f = src[i]};
        const uint32_t u = (uint32_t)b.i;
        const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        const uint32_t quiet = (u >> 16) | 0x0040u;
        dst[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
    }
}

void cpu_stage_to_f32(enum zt_dtype t, const void *src, float *dst, size_t n)
{
    if (t == ZT_BF16)
        bf16_widen(src, dst, n);
    else
        precision_to_f32(t, src, dst, n);
}

void cpu_stage_from_f32(enum zt_dtype t, const float *src, void *dst, size_t n)
{
    if (t == ZT_BF16)
        bf16_narrow(src, dst, n);
    else
        precision_from_f32(t, src, dst, n);
}

zt_status cpu_widen_shared(enum zt_dtype t, const void *src, size_t n, const char *op,
                           float **owned, const float **out)
{
    *owned = NULL;
    *out = src;
    if (t == ZT_F32)
        return ZT_OK;
    if (!(*owned = malloc((n ? n : 1) * sizeof(float))))
        return zt_error_set(ZT_ERR_NOMEM, "%s: no memory to widen %zu weights", op, n);
    cpu_stage_to_f32(t, src, *owned, n);
    *out = *owned;
    return ZT_OK;
}

zt_status cpu_stage_status(int failed, const char *op, size_t floats)
{
    if (!failed)
        return ZT_OK;
    return zt_error_set(ZT_ERR_NOMEM, "%s: no memory to stage %zu fp32 values per thread", op,
                        floats);
}

/* The row ops have every 16-bit form; the products need a kernel. */
zt_status cpu_computes(const struct ops_backend *self, enum zt_dtype t)
{
    return cpu_gemm_supports(cpu_gemm_of(self), t);
}

zt_status cpu_gemm_describe_op(const struct ops_backend *self, enum zt_dtype ab_type, char *buf,
                               size_t n)
{
    return cpu_gemm_describe(cpu_gemm_of(self), ab_type, buf, n);
}

/* OpenMP's count is a per-thread setting: it holds for the parallel regions
 * that the calling thread opens, which is the thread that runs the ops. */
void ops_cpu_set_threads(int n)
{
    ZT_ASSERT(n >= 1);
    openblas_set_num_threads(n);
    omp_set_num_threads(n);
}
