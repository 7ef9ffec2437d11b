/* worker/cpu/simd_avx2.c — the engine's elementwise ops for x86-64 CPUs with
 * AVX2, FMA and F16C: eight floats per instruction, built into every x86-64
 * binary and used only where cpu_avx2_usable() says the CPU has them (the
 * build itself targets the x86-64 baseline).
 *
 * Every function that uses the instructions carries AVX2 (GCC's target
 * attribute) rather than the file being compiled with -mavx2, so that
 * cpu_avx2_usable(), which runs on any CPU, stays baseline code. CMake
 * compiles this file on x86-64 only and defines ZT_HAVE_AVX2 there.
 *
 * Results equal the generic set's bit for bit:
 * - bf16 -> fp32 is a shift, exact; fp32 -> bf16 is common/half.h's integer
 *   rounding (add 0x7fff plus the kept lowest bit, NaN made quiet apart)
 *   done on eight lanes.
 * - fp16 uses F16C's conversions in round-to-nearest-even, which agree with
 *   common/half.h on every input: subnormals, overflow to infinity and NaN
 *   payloads (tests/test_simd.c checks every 16-bit pattern and a sweep of
 *   float patterns).
 * - The update rules run optim_elementwise.h's steps operation for
 *   operation: separate multiplies and adds (no FMA; the file is compiled
 *   with -ffp-contract=off as well), correctly rounded sqrt and division.
 *   Each loop hands its tail (< 8 elements) to the generic code.
 * - sum_squares alone differs: it keeps 16 partial sums in double (four
 *   vectors of four lanes, element i in partial i mod 16, FMA) and adds them
 *   in a fixed order, then the tail past the last multiple of 16 summed
 *   in order; the same input gives the same bits, whatever its alignment.
 */
#include "worker/cpu/ops_cpu_impl.h"

#include <immintrin.h>
#include <string.h>

#include "common/half.h"
#include "worker/precision.h"

#define AVX2 __attribute__((target("avx2,fma,f16c")))

int cpu_avx2_usable(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}

/* ---- eight lanes of 16-bit floats ------------------------------------------ */

AVX2 static inline __m256 load_bf16(const uint16_t *p)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* zt_f32_to_bf16 on eight lanes; packus cannot saturate, every lane being
 * below 2^16 after the shift. */
AVX2 static inline void store_bf16(uint16_t *p, __m256 x)
{
    const __m256i u = _mm256_castps_si256(x);
    const __m256i mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7f800000));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), nan);
    r = _mm256_srli_epi32(r, 16);
    __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128((__m128i *)p, h);
}

AVX2 static inline __m256 load_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

AVX2 static inline void store_f16(uint16_t *p, __m256 x)
{
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}

/* ---- casts and sums ------------------------------------------------------ */

/* The 16-bit loops cover whole vectors; the generic code takes the tail. */
AVX2 zt_status cpu_avx2_to_f32(const struct ops_backend *self, enum zt_dtype t, const void *src,
                               float *dst, size_t n)
{
    (void)self;
    const uint16_t *h = src;
    size_t i = 0;
    if (t == ZT_BF16)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, load_bf16(h + i));
    else if (t == ZT_F16)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, load_f16(h + i));
    precision_to_f32(t, (const char *)src + i * zt_dtype_size(t), dst + i, n - i);
    return ZT_OK;
}

AVX2 zt_status cpu_avx2_from_f32(const struct ops_backend *self, enum zt_dtype t, const float *src,
                                 void *dst, size_t n)
{
    (void)self;
    uint16_t *h = dst;
    size_t i = 0;
    if (t == ZT_BF16)
        for (; i + 8 <= n; i += 8)
            store_bf16(h + i, _mm256_loadu_ps(src + i));
    else if (t == ZT_F16)
        for (; i + 8 <= n; i += 8)
            store_f16(h + i, _mm256_loadu_ps(src + i));
    precision_from_f32(t, src + i, (char *)dst + i * zt_dtype_size(t), n - i);
    return ZT_OK;
}

AVX2 zt_status cpu_avx2_add_into(const struct ops_backend *self, enum zt_dtype t, void *dst,
                                 const void *src, size_t n)
{
    (void)self;
    uint16_t *d = dst;
    const uint16_t *s = src;
    float *df = dst;
    const float *sf = src;
    size_t i = 0;
    if (t == ZT_F32)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(df + i,
                             _mm256_add_ps(_mm256_loadu_ps(df + i), _mm256_loadu_ps(sf + i)));
    else if (t == ZT_BF16)
        for (; i + 8 <= n; i += 8)
            store_bf16(d + i, _mm256_add_ps(load_bf16(d + i), load_bf16(s + i)));
    else if (t == ZT_F16)
        for (; i + 8 <= n; i += 8)
            store_f16(d + i, _mm256_add_ps(load_f16(d + i), load_f16(s + i)));
    const size_t at = i * zt_dtype_size(t);
    precision_add_into(t, (char *)dst + at, (const char *)src + at, n - i);
    return ZT_OK;
}

/* Four elements of type t from element i of x, as floats (exact). */
AVX2 static inline __m128 load4(enum zt_dtype t, const void *x, size_t i)
{
    const __m128i *p = (const __m128i *)((const uint16_t *)x + i);
    if (t == ZT_BF16)
        return _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(_mm_loadl_epi64(p)), 16));
    if (t == ZT_F16)
        return _mm_cvtph_ps(_mm_loadl_epi64(p));
    return _mm_loadu_ps((const float *)x + i);
}

/* Partial sums of squares: element i of the input goes to partial i mod
 * 16, lane i mod 4 of part[(i / 4) mod 4]. */
struct sumsq_acc {
    __m256d part[4];
};

/* Adds (x[i] * s)^2 for i < n, n a multiple of 16, x of type t. Always
 * inlined, so that each call with a constant t is a loop of its own. */
AVX2 __attribute__((always_inline)) static inline void
sumsq_run(struct sumsq_acc *a, enum zt_dtype t, const void *x, size_t n, __m256d s)
{
    __m256d p0 = a->part[0], p1 = a->part[1], p2 = a->part[2], p3 = a->part[3];
    for (size_t i = 0; i < n; i += 16) {
        __m256d v0 = _mm256_mul_pd(_mm256_cvtps_pd(load4(t, x, i)), s);
        __m256d v1 = _mm256_mul_pd(_mm256_cvtps_pd(load4(t, x, i + 4)), s);
        __m256d v2 = _mm256_mul_pd(_mm256_cvtps_pd(load4(t, x, i + 8)), s);
        __m256d v3 = _mm256_mul_pd(_mm256_cvtps_pd(load4(t, x, i + 12)), s);
        p0 = _mm256_fmadd_pd(v0, v0, p0);
        p1 = _mm256_fmadd_pd(v1, v1, p1);
        p2 = _mm256_fmadd_pd(v2, v2, p2);
        p3 = _mm256_fmadd_pd(v3, v3, p3);
    }
    a->part[0] = p0, a->part[1] = p1, a->part[2] = p2, a->part[3] = p3;
}

AVX2 zt_status cpu_avx2_sum_squares(const struct ops_backend *self, enum zt_dtype t,
                                    const void *src, size_t n, double scale, double *out)
{
    (void)self;
    const __m256d s = _mm256_set1_pd(scale);
    const size_t whole = n / 16 * 16;
    struct sumsq_acc a = {
        {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()}};
    if (t == ZT_BF16)
        sumsq_run(&a, ZT_BF16, src, whole, s);
    else if (t == ZT_F16)
        sumsq_run(&a, ZT_F16, src, whole, s);
    else
        sumsq_run(&a, ZT_F32, src, whole, s);
    __m256d v =
        _mm256_add_pd(_mm256_add_pd(a.part[0], a.part[1]), _mm256_add_pd(a.part[2], a.part[3]));
    double lane[4];
    _mm256_storeu_pd(lane, v);
    const double tail =
        precision_sum_squares(t, (const char *)src + whole * zt_dtype_size(t), n - whole, scale);
    *out = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + tail;
    return ZT_OK;
}

AVX2 zt_status cpu_avx2_scale(const struct ops_backend *self, float *x, size_t n, float s)
{
    (void)self;
    const __m256 vs = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    for (; i < n; i++)
        x[i] *= s;
    return ZT_OK;
}

/* ---- the update rules ------------------------------------------------------ */

/* struct optim_consts broadcast to eight lanes. */
struct vconsts {
    __m256 gscale, lr, eps, wd, b1, b2, c1, c2, step_size, inv_sqrt_bc2, mu, keep;
};

AVX2 static inline struct vconsts vconsts_of(const struct optim_consts *c)
{
    return (struct vconsts){
        _mm256_set1_ps(c->gscale),       _mm256_set1_ps(c->lr), _mm256_set1_ps(c->eps),
        _mm256_set1_ps(c->wd),           _mm256_set1_ps(c->b1), _mm256_set1_ps(c->b2),
        _mm256_set1_ps(c->c1),           _mm256_set1_ps(c->c2), _mm256_set1_ps(c->step_size),
        _mm256_set1_ps(c->inv_sqrt_bc2), _mm256_set1_ps(c->mu), _mm256_set1_ps(c->keep),
    };
}

/* optim_adam_moments on eight lanes at m, v. */
AVX2 static inline __m256 adam_moments(float *m, float *v, __m256 g, const struct vconsts *k)
{
    __m256 mi = _mm256_add_ps(_mm256_mul_ps(k->b1, _mm256_loadu_ps(m)), _mm256_mul_ps(k->c1, g));
    __m256 vi = _mm256_add_ps(_mm256_mul_ps(k->b2, _mm256_loadu_ps(v)),
                              _mm256_mul_ps(_mm256_mul_ps(k->c2, g), g));
    _mm256_storeu_ps(m, mi);
    _mm256_storeu_ps(v, vi);
    __m256 denom = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(vi), k->inv_sqrt_bc2), k->eps);
    return _mm256_div_ps(_mm256_mul_ps(k->step_size, mi), denom);
}

/* The state vectors from element i on, for the generic tail. */
static void states_from(float *const *s, size_t i, float **out)
{
    out[0] = s[0] ? s[0] + i : NULL;
    out[1] = s[1] ? s[1] + i : NULL;
}

AVX2 static void adamw_apply(float *p, const float *g, float *const *s, size_t n,
                             const struct optim_consts *c)
{
    const struct vconsts k = vconsts_of(c);
    float *m = s[0], *v = s[1], *tail[2];
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), k.gscale);
        __m256 step = adam_moments(m + i, v + i, gi, &k);
        __m256 pi = _mm256_loadu_ps(p + i);
        _mm256_storeu_ps(p + i, _mm256_sub_ps(pi, _mm256_add_ps(_mm256_mul_ps(k.wd, pi), step)));
    }
    states_from(s, i, tail);
    optim_adamw_apply(p + i, g + i, tail, n - i, c);
}

AVX2 static void adam_apply(float *p, const float *g, float *const *s, size_t n,
                            const struct optim_consts *c)
{
    const struct vconsts k = vconsts_of(c);
    float *m = s[0], *v = s[1], *tail[2];
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 pi = _mm256_loadu_ps(p + i);
        __m256 gi =
            _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(g + i), k.gscale), _mm256_mul_ps(k.wd, pi));
        _mm256_storeu_ps(p + i, _mm256_sub_ps(pi, adam_moments(m + i, v + i, gi, &k)));
    }
    states_from(s, i, tail);
    optim_adam_apply(p + i, g + i, tail, n - i, c);
}

AVX2 static void sgd_apply(float *p, const float *g, float *const *s, size_t n,
                           const struct optim_consts *c)
{
    const struct vconsts k = vconsts_of(c);
    float *buf = s[0], *tail[2];
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 pi = _mm256_loadu_ps(p + i);
        __m256 gi =
            _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(g + i), k.gscale), _mm256_mul_ps(k.wd, pi));
        if (buf) {
            __m256 b = c->first ? gi
                                : _mm256_add_ps(_mm256_mul_ps(k.mu, _mm256_loadu_ps(buf + i)),
                                                _mm256_mul_ps(k.keep, gi));
            _mm256_storeu_ps(buf + i, b);
            gi = c->nesterov ? _mm256_add_ps(gi, _mm256_mul_ps(k.mu, b)) : b;
        }
        _mm256_storeu_ps(p + i, _mm256_sub_ps(pi, _mm256_mul_ps(k.lr, gi)));
    }
    states_from(s, i, tail);
    optim_sgd_apply(p + i, g + i, tail, n - i, c);
}

AVX2 static void lion_apply(float *p, const float *g, float *const *s, size_t n,
                            const struct optim_consts *c)
{
    const struct vconsts k = vconsts_of(c);
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    float *m = s[0], *tail[2];
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), k.gscale);
        __m256 mi = _mm256_loadu_ps(m + i), pi = _mm256_loadu_ps(p + i);
        __m256 u = _mm256_add_ps(_mm256_mul_ps(k.b1, mi), _mm256_mul_ps(k.c1, gi));
        /* (u > 0) - (u < 0): 1, -1, or +0 (also for a NaN) */
        __m256 sign = _mm256_sub_ps(_mm256_and_ps(_mm256_cmp_ps(u, zero, _CMP_GT_OQ), one),
                                    _mm256_and_ps(_mm256_cmp_ps(u, zero, _CMP_LT_OQ), one));
        pi = _mm256_sub_ps(pi, _mm256_add_ps(_mm256_mul_ps(k.wd, pi), _mm256_mul_ps(k.lr, sign)));
        _mm256_storeu_ps(p + i, pi);
        _mm256_storeu_ps(m + i, _mm256_add_ps(_mm256_mul_ps(k.b2, mi), _mm256_mul_ps(k.c2, gi)));
    }
    states_from(s, i, tail);
    optim_lion_apply(p + i, g + i, tail, n - i, c);
}

static const struct cpu_rule_kernels AVX2_RULES = {
    .to_f32 = cpu_avx2_to_f32,
    .from_f32 = cpu_avx2_from_f32,
    .apply = {[OPTIM_ADAMW] = adamw_apply,
              [OPTIM_ADAM] = adam_apply,
              [OPTIM_SGD] = sgd_apply,
              [OPTIM_LION] = lion_apply},
};

zt_status cpu_avx2_adamw_update(const struct ops_backend *self, const struct optimizer_range *r,
                                const struct optimizer_hparams *hp)
{
    (void)self;
    return cpu_range_update(self, &AVX2_RULES, OPTIM_ADAMW, r, hp);
}

zt_status cpu_avx2_adam_update(const struct ops_backend *self, const struct optimizer_range *r,
                               const struct optimizer_hparams *hp)
{
    (void)self;
    return cpu_range_update(self, &AVX2_RULES, OPTIM_ADAM, r, hp);
}

zt_status cpu_avx2_sgd_update(const struct ops_backend *self, const struct optimizer_range *r,
                              const struct optimizer_hparams *hp)
{
    (void)self;
    return cpu_range_update(self, &AVX2_RULES, OPTIM_SGD, r, hp);
}

zt_status cpu_avx2_lion_update(const struct ops_backend *self, const struct optimizer_range *r,
                               const struct optimizer_hparams *hp)
{
    (void)self;
    return cpu_range_update(self, &AVX2_RULES, OPTIM_LION, r, hp);
}
