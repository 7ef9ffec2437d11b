/* tests/test_simd.c — the CPU backend's engine ops in every instruction set
 * this build and this CPU have (worker/ops.h: ops_cpu_backend_isa), each
 * against common/half.h and worker/optimizer.h's reference loops and
 * against plain double sums.
 *
 * Every test runs once per instruction set (a loop test over enum
 * ops_cpu_isa), so the generic C path is checked as well as the AVX2 one;
 * where the CPU lacks AVX2 that run prints why and checks nothing. Lengths
 * cover the vector tails (0, 1, 7, 8, 9, 31, 1000, 4097: past the fused
 * update's 512-element blocks too), each at an aligned start and one
 * element off, with guard elements around the output. Casts, add_into,
 * scale and the update rules must match bit for bit; sum_squares (whose
 * order of summation is the kernel's) must be within 1e-12 relative of a
 * double loop and repeat its bits exactly, whatever the alignment.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"
#include "testutil.h"
#include "worker/cpu/ops_cpu_impl.h"
#include "worker/ops.h"

static const size_t LENS[] = {0, 1, 7, 8, 9, 31, 1000, 4097};
#define N_LENS (sizeof LENS / sizeof LENS[0])
enum { GUARD = 8 }; /* elements checked untouched on each side of an output */

/* The op table of instruction set `isa`, or NULL (and a line saying why). */
static const struct ops_backend *isa_ops(int isa)
{
    char why[128];
    const struct ops_backend *o = ops_cpu_backend_isa((enum ops_cpu_isa)isa, why, sizeof why);
    if (!o)
        printf("test_simd: %s run skipped: %s\n", ops_cpu_isa_name((enum ops_cpu_isa)isa), why);
    return o;
}

static const struct ops_backend *generic(void)
{
    return ops_cpu_backend_isa(OPS_CPU_GENERIC, NULL, 0);
}

static uint32_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 32);
}

static float bits_f32(uint32_t u)
{
    return half_bits_f32(u);
}

/* Floats where the conversions have edges: NaNs (quiet, signalling, with
 * payloads, negative), infinities, zeros, float subnormals, the largest
 * float (bf16 rounds it to infinity), fp16's largest value, the halfway
 * point to its overflow and just below, fp16 subnormals and their rounding
 * to zero, and ties of bf16 (1 + 2^-8, 1 + 3*2^-8) and of fp16. */
static const uint32_t SPECIALS[] = {
    0x7fc00000, 0xffc00001, 0x7f800001, 0x7fa00000, 0x7f802000, 0xff801234, 0x7f800000,
    0xff800000, 0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x00800000, 0x7f7fffff,
    0xff7fffff, 0x477fe000, 0x477fefff, 0x477ff000, 0xc77ff000, 0x47800000, 0x33800000,
    0x33000000, 0x33000001, 0xb3400000, 0x38800000, 0x387fc000, 0x387fe000, 0x3f808000,
    0x3f818000, 0x3f80c000, 0x3f800001, 0x3f801000, 0x3f803000, 0xbf808000, 0x3effffff,
};
#define N_SPECIALS (sizeof SPECIALS / sizeof SPECIALS[0])

/* A float of varied sign and magnitude, or (specials) now and then one of
 * SPECIALS. */
static float rand_value(uint64_t *s, int specials)
{
    uint32_t r = rng_next(s);
    if (specials && r % 8 == 0)
        return bits_f32(SPECIALS[(r >> 3) % N_SPECIALS]);
    float x = (float)(rng_next(s) >> 8) / 16777216.0f * 2.0f - 1.0f;
    return ldexpf(x, (int)((r >> 3) % 24) - 16);
}

static void fill(float *x, size_t n, uint64_t seed, int specials)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++)
        x[i] = rand_value(&s, specials);
}

static uint16_t ref_from_f32(enum zt_dtype t, float f)
{
    return t == ZT_BF16 ? zt_f32_to_bf16(f) : zt_f32_to_f16(f);
}

static float ref_to_f32(enum zt_dtype t, uint16_t h)
{
    return t == ZT_BF16 ? zt_bf16_to_f32(h) : zt_f16_to_f32(h);
}

/* Element i of a buffer of type t as float. */
static float load(enum zt_dtype t, const void *p, size_t i)
{
    return t == ZT_F32 ? ((const float *)p)[i] : ref_to_f32(t, ((const uint16_t *)p)[i]);
}

/* Equal bits, or both NaN: NaN payloads may differ between the scalar and
 * vector forms of the update, which may swap a commutative operation's
 * operands. */
static int same_float(float a, float b)
{
    return (isnan(a) && isnan(b)) || half_f32_bits(a) == half_f32_bits(b);
}

static const enum zt_dtype TYPES[] = {ZT_F32, ZT_BF16, ZT_F16};
#define N_TYPES (sizeof TYPES / sizeof TYPES[0])

/* A buffer of `n` elements of size esz at offset `off` elements inside an
 * allocation whose guard bytes are 0xa5. */
struct guarded {
    unsigned char *base;
    void *p;
    size_t bytes, lead;
};

static struct guarded guarded_alloc(size_t n, size_t esz, size_t off)
{
    struct guarded g;
    g.lead = (GUARD + off) * esz;
    g.bytes = g.lead + n * esz + GUARD * esz;
    g.base = malloc(g.bytes);
    ck_assert_ptr_nonnull(g.base);
    memset(g.base, 0xa5, g.bytes);
    g.p = g.base + g.lead;
    return g;
}

static void guarded_check_free(struct guarded *g, size_t n, size_t esz)
{
    for (size_t i = 0; i < g->lead; i++)
        ck_assert_msg(g->base[i] == 0xa5, "byte %zu before the output was written", g->lead - i);
    for (size_t i = g->lead + n * esz; i < g->bytes; i++)
        ck_assert_msg(g->base[i] == 0xa5, "byte %zu past the output was written",
                      i - g->lead - n * esz);
    free(g->base);
}

/* A check of one case: type t, length LENS[l], output `off` elements past
 * an aligned start. */
typedef void (*case_fn)(const struct ops_backend *o, enum zt_dtype t, size_t l, size_t off);

/* Runs fn on instruction set isa for TYPES[lo..hi), every length and both
 * alignments; nothing (a printed line) where the set is missing. */
static void for_each_case(int isa, size_t lo, size_t hi, case_fn fn)
{
    const struct ops_backend *o = isa_ops(isa);
    if (!o)
        return;
    for (size_t k = lo; k < hi; k++)
        for (size_t l = 0; l < N_LENS; l++)
            for (size_t off = 0; off < 2; off++)
                fn(o, TYPES[k], l, off);
}

/* ---- casts -------------------------------------------------------------- */

START_TEST(to_f32_is_exact_on_every_16bit_pattern)
{
    const struct ops_backend *o = isa_ops(_i);
    if (!o)
        return;
    const size_t n = 65536;
    for (size_t k = 1; k < N_TYPES; k++) {
        struct guarded h = guarded_alloc(n, 2, 1), f = guarded_alloc(n, 4, 1);
        for (size_t i = 0; i < n; i++)
            ((uint16_t *)h.p)[i] = (uint16_t)i;
        ck_assert_int_eq(o->to_f32(o, TYPES[k], h.p, f.p, n), ZT_OK);
        for (size_t i = 0; i < n; i++) {
            uint32_t got = half_f32_bits(((float *)f.p)[i]);
            uint32_t want = half_f32_bits(ref_to_f32(TYPES[k], (uint16_t)i));
            ck_assert_msg(got == want, "%s %04zx: %08x, want %08x", k == 1 ? "bf16" : "f16", i, got,
                          want);
        }
        guarded_check_free(&h, n, 2);
        guarded_check_free(&f, n, 4);
    }
}
END_TEST

START_TEST(from_f32_matches_half_h_on_a_sweep_of_floats)
{
    const struct ops_backend *o = isa_ops(_i);
    if (!o)
        return;
    /* every 4093rd bit pattern (the whole 32-bit range once) and the specials */
    const size_t n = ((size_t)1 << 20) + N_SPECIALS;
    float *x = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < n; i++)
        x[i] = bits_f32(i < N_SPECIALS ? SPECIALS[i] : (uint32_t)((i - N_SPECIALS) * 4093u));
    for (size_t k = 1; k < N_TYPES; k++) {
        struct guarded h = guarded_alloc(n, 2, 1);
        ck_assert_int_eq(o->from_f32(o, TYPES[k], x, h.p, n), ZT_OK);
        for (size_t i = 0; i < n; i++) {
            uint16_t got = ((uint16_t *)h.p)[i], want = ref_from_f32(TYPES[k], x[i]);
            ck_assert_msg(got == want, "%s of %08x: %04x, want %04x", k == 1 ? "bf16" : "f16",
                          half_f32_bits(x[i]), got, want);
        }
        guarded_check_free(&h, n, 2);
    }
    free(x);
}
END_TEST

/* The 16-bit model ops' staging casts (worker/cpu/ops_cpu_impl.h, vector
 * clones of their own) are the reference's too: every 16-bit pattern
 * widened, the float sweep and its specials narrowed, at odd lengths. */
START_TEST(staging_casts_match_the_reference)
{
    const size_t n = ((size_t)1 << 20) + N_SPECIALS, p = 65536;
    float *x = malloc(n * sizeof(float)), *f = malloc(p * sizeof(float));
    uint16_t *h = malloc(n * sizeof(uint16_t));
    ck_assert(x && f && h);
    for (size_t i = 0; i < n; i++)
        x[i] = bits_f32(i < N_SPECIALS ? SPECIALS[i] : (uint32_t)((i - N_SPECIALS) * 4093u));
    for (size_t k = 1; k < N_TYPES; k++) {
        cpu_stage_from_f32(TYPES[k], x, h, n - 3);
        for (size_t i = 0; i < n - 3; i++)
            ck_assert_msg(h[i] == ref_from_f32(TYPES[k], x[i]), "type %d of %08x: %04x, want %04x",
                          (int)TYPES[k], half_f32_bits(x[i]), h[i], ref_from_f32(TYPES[k], x[i]));
        for (size_t i = 0; i < p; i++)
            h[i] = (uint16_t)i;
        cpu_stage_to_f32(TYPES[k], h, f, p - 5);
        for (size_t i = 0; i < p - 5; i++)
            ck_assert_msg(half_f32_bits(f[i]) == half_f32_bits(ref_to_f32(TYPES[k], h[i])),
                          "type %d %04zx", (int)TYPES[k], i);
    }
    free(x), free(f), free(h);
}
END_TEST

/* Both directions of every type, every length, both alignments. */
static void check_casts(const struct ops_backend *o, enum zt_dtype t, size_t l, size_t off)
{
    const size_t n = LENS[l], esz = zt_dtype_size(t);
    struct guarded src = guarded_alloc(n, 4, off), h = guarded_alloc(n, esz, off);
    struct guarded back = guarded_alloc(n, 4, off);
    fill(src.p, n, 11 + l, 1);
    ck_assert_int_eq(o->from_f32(o, t, src.p, h.p, n), ZT_OK);
    ck_assert_int_eq(o->to_f32(o, t, h.p, back.p, n), ZT_OK);
    for (size_t i = 0; i < n; i++) {
        const float x = ((float *)src.p)[i];
        const float want = t == ZT_F32 ? x : ref_to_f32(t, ref_from_f32(t, x));
        ck_assert_msg(half_f32_bits(((float *)back.p)[i]) == half_f32_bits(want),
                      "type %d n %zu off %zu element %zu", (int)t, n, off, i);
    }
    guarded_check_free(&src, n, 4);
    guarded_check_free(&h, n, esz);
    guarded_check_free(&back, n, 4);
}

START_TEST(casts_cover_tails_and_unaligned_starts)
{
    for_each_case(_i, 0, N_TYPES, check_casts);
}
END_TEST

/* ---- add_into, scale, sum_squares --------------------------------------- */

/* add_into's sums equal the fp32 sum rounded to the type, bit for bit but
 * for which NaN a sum of two NaNs keeps (the hardware takes the first
 * operand's, and the compiler may order them either way). */

static void check_add_into(const struct ops_backend *o, enum zt_dtype t, size_t l, size_t off)
{
    const size_t n = LENS[l], esz = zt_dtype_size(t);
    float *a = malloc((n + 1) * sizeof(float)), *b = malloc((n + 1) * sizeof(float));
    float *want = malloc((n + 1) * sizeof(float));
    fill(a, n, 21 + l, 1);
    fill(b, n, 31 + l, 1);
    struct guarded d = guarded_alloc(n, esz, off), s = guarded_alloc(n, esz, off);
    ck_assert_int_eq(generic()->from_f32(generic(), t, a, d.p, n), ZT_OK);
    ck_assert_int_eq(generic()->from_f32(generic(), t, b, s.p, n), ZT_OK);
    for (size_t i = 0; i < n; i++) {
        float sum = load(t, d.p, i) + load(t, s.p, i);
        want[i] = t == ZT_F32 ? sum : ref_to_f32(t, ref_from_f32(t, sum));
    }
    ck_assert_int_eq(o->add_into(o, t, d.p, s.p, n), ZT_OK);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(same_float(load(t, d.p, i), want[i]), "type %d n %zu off %zu element %zu",
                      (int)t, n, off, i);
    guarded_check_free(&d, n, esz);
    guarded_check_free(&s, n, esz);
    free(a), free(b), free(want);
}

START_TEST(add_into_rounds_the_fp32_sum)
{
    for_each_case(_i, 0, N_TYPES, check_add_into);
}
END_TEST

static void check_scale(const struct ops_backend *o, enum zt_dtype t, size_t l, size_t off)
{
    const size_t n = LENS[l];
    struct guarded x = guarded_alloc(n, 4, off);
    float *want = malloc((n + 1) * sizeof(float));
    (void)t;
    fill(x.p, n, 41 + l, 1);
    for (size_t i = 0; i < n; i++)
        want[i] = ((float *)x.p)[i] * 0.3f;
    ck_assert_int_eq(o->scale(o, x.p, n, 0.3f), ZT_OK);
    for (size_t i = 0; i < n; i++)
        ck_assert(same_float(((float *)x.p)[i], want[i]));
    guarded_check_free(&x, n, 4);
    free(want);
}

START_TEST(scale_is_one_fp32_multiply)
{
    for_each_case(_i, 0, 1, check_scale);
}
END_TEST

static void check_sum_squares(const struct ops_backend *o, enum zt_dtype t, size_t l, size_t off)
{
    const size_t n = LENS[l], esz = zt_dtype_size(t);
    float *x = malloc((n + 1) * sizeof(float));
    fill(x, n, 51 + l, 0);
    struct guarded a = guarded_alloc(n, esz, off), b = guarded_alloc(n, esz, 1 - off);
    ck_assert_int_eq(generic()->from_f32(generic(), t, x, a.p, n), ZT_OK);
    ck_assert_int_eq(generic()->from_f32(generic(), t, x, b.p, n), ZT_OK);
    double ref = 0.0, got, again, moved;
    for (size_t i = 0; i < n; i++) {
        double v = (double)load(t, a.p, i) * 3.0;
        ref += v * v;
    }
    ck_assert_int_eq(o->sum_squares(o, t, a.p, n, 3.0, &got), ZT_OK);
    ck_assert_int_eq(o->sum_squares(o, t, a.p, n, 3.0, &again), ZT_OK);
    ck_assert_int_eq(o->sum_squares(o, t, b.p, n, 3.0, &moved), ZT_OK);
    ck_assert_msg(fabs(got - ref) <= 1e-12 * ref, "type %d n %zu: %.17g, want %.17g", (int)t, n,
                  got, ref);
    ck_assert(memcmp(&got, &again, sizeof got) == 0);
    ck_assert(memcmp(&got, &moved, sizeof got) == 0); /* alignment does not matter */
    if (n > 0) {                                      /* non-finite in, non-finite out */
        const uint16_t inf16 = t == ZT_BF16 ? 0x7f80 : 0x7c00;
        const size_t at = n / 2;
        if (t == ZT_F32)
            ((float *)b.p)[at] = INFINITY;
        else
            ((uint16_t *)b.p)[at] = inf16;
        ck_assert_int_eq(o->sum_squares(o, t, b.p, n, 3.0, &moved), ZT_OK);
        ck_assert(isinf(moved));
        if (t == ZT_F32)
            ((float *)b.p)[at] = NAN;
        else
            ((uint16_t *)b.p)[at] = (uint16_t)(inf16 | 0x0040);
        ck_assert_int_eq(o->sum_squares(o, t, b.p, n, 3.0, &moved), ZT_OK);
        ck_assert(isnan(moved));
    }
    guarded_check_free(&a, n, esz);
    guarded_check_free(&b, n, esz);
    free(x);
}

START_TEST(sum_squares_is_close_and_repeats_its_bits)
{
    for_each_case(_i, 0, N_TYPES, check_sum_squares);
}
END_TEST

/* ---- the update rules ----------------------------------------------------- */

/* The element-wise optimizers' cases: rule, and SGD's momentum variants. */
static const struct rule_case {
    const char *name;
    int rule; /* 0 AdamW, 1 Adam, 2 SGD, 3 Lion */
    int n_states;
    float momentum, dampening;
    int nesterov;
} RULES[] = {
    {"AdamW", 0, 2, 0, 0, 0},
    {"Adam", 1, 2, 0, 0, 0},
    {"SGD", 2, 0, 0, 0, 0},
    {"SGD momentum", 2, 1, 0.9f, 0.1f, 0},
    {"SGD Nesterov", 2, 1, 0.9f, 0, 1},
    {"Lion", 3, 1, 0, 0, 0},
};
#define N_RULES (sizeof RULES / sizeof RULES[0])

static zt_status rule_slot(const struct ops_backend *o, const struct rule_case *rc,
                           const struct optimizer_range *r, const struct optimizer_hparams *hp)
{
    zt_status (*const slots[])(const struct ops_backend *, const struct optimizer_range *,
                               const struct optimizer_hparams *) = {o->adamw_update, o->adam_update,
                                                                    o->sgd_update, o->lion_update};
    return slots[rc->rule](o, r, hp);
}

/* worker/optimizer.h's reference loop of the case on fp32 gradients. */
static void rule_reference(const struct rule_case *rc, float *p, const float *g, float **s,
                           size_t n, float decay, const struct optimizer_hparams *hp)
{
    switch (rc->rule) {
    case 0:
        adamw_update(p, g, s[0], s[1], n, decay, hp);
        return;
    case 1:
        adam_update(p, g, s[0], s[1], n, decay, hp);
        return;
    case 2:
        sgd_update(p, g, rc->n_states ? s[0] : NULL, n, decay, hp);
        return;
    default:
        lion_update(p, g, s[0], n, decay, hp);
    }
}

static struct optimizer_hparams rule_hparams(const struct rule_case *rc, long step)
{
    return (struct optimizer_hparams){.lr = 1e-2f,
                                      .beta1 = 0.9f,
                                      .beta2 = 0.95f,
                                      .eps = 1e-8f,
                                      .weight_decay = 0.1f,
                                      .momentum = rc->momentum,
                                      .dampening = rc->dampening,
                                      .nesterov = rc->nesterov,
                                      .step = step};
}

/* One run's parameters and states, at offset `off` in their allocations. */
struct rule_state {
    float *mem[3];
    float *p, *s[2];
};

static void rule_state_init(struct rule_state *st, size_t n, size_t off, uint64_t seed)
{
    for (int k = 0; k < 3; k++) {
        st->mem[k] = malloc((n + 1) * sizeof(float));
        ck_assert_ptr_nonnull(st->mem[k]);
        fill(st->mem[k] + off, n, seed + (uint64_t)k, 0);
    }
    for (size_t i = 0; i < n; i++) /* a second moment is never negative */
        st->mem[2][off + i] = fabsf(st->mem[2][off + i]);
    st->p = st->mem[0] + off;
    st->s[0] = st->mem[1] + off;
    st->s[1] = st->mem[2] + off;
}

/* The states the case's slot takes: NULL past its count (SGD without
 * momentum gets no buffer). */
static float *case_state(const struct rule_case *rc, const struct rule_state *st, int k)
{
    return k < rc->n_states ? st->s[k] : NULL;
}

static void rule_state_same(const struct rule_state *a, const struct rule_state *b, size_t n,
                            const char *what, size_t len)
{
    for (int k = 0; k < 3; k++) {
        const float *x = k ? a->s[k - 1] : a->p, *y = k ? b->s[k - 1] : b->p;
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(same_float(x[i], y[i]), "%s n %zu: %s[%zu] %a, want %a", what, len,
                          k ? "state" : "param", i, (double)x[i], (double)y[i]);
    }
}

static void rule_state_free(struct rule_state *st)
{
    for (int k = 0; k < 3; k++)
        free(st->mem[k]);
}

/* The rule through the op table (fp32 gradients, gscale folded in) equals
 * the reference loop run on gradients multiplied by gscale beforehand:
 * three steps, with and without weight decay, special gradients included. */
static void check_rules(const struct ops_backend *o, enum zt_dtype t, size_t l, size_t off)
{
    const float gscale = 0.37f, decay = (float)((l + off) % 2);
    const size_t n = LENS[l];
    (void)t;
    for (size_t c = 0; c < N_RULES; c++) {
        const struct rule_case *rc = &RULES[c];
        struct rule_state a, b;
        rule_state_init(&a, n, off, 61 + l);
        rule_state_init(&b, n, off, 61 + l);
        float *gm = malloc((n + 1) * sizeof(float)), *g = gm + off;
        float *scaled = malloc((n + 1) * sizeof(float));
        for (long step = 1; step <= 3; step++) {
            const struct optimizer_hparams hp = rule_hparams(rc, step);
            fill(g, n, 71 + (uint64_t)step, 1);
            for (size_t i = 0; i < n; i++)
                scaled[i] = g[i] * gscale;
            const struct optimizer_range r = {
                .params = a.p,
                .grads = g,
                .grad_dtype = ZT_F32,
                .gscale = gscale,
                .states = {case_state(rc, &a, 0), case_state(rc, &a, 1)},
                .n = n,
                .decay = decay};
            ck_assert_int_eq(rule_slot(o, rc, &r, &hp), ZT_OK);
            rule_reference(rc, b.p, scaled, b.s, n, decay, &hp);
        }
        rule_state_same(&a, &b, n, rc->name, n);
        rule_state_free(&a);
        rule_state_free(&b);
        free(gm), free(scaled);
    }
}

START_TEST(rules_match_the_reference_bit_for_bit)
{
    for_each_case(_i, 0, 1, check_rules);
}
END_TEST

/* Under 16-bit precision the fused pass (16-bit gradients, gscale, update,
 * cast into the working copy) equals the sequence the engine ran before
 * it, through the generic ops: to_f32 into a staging buffer, scale, the
 * update on fp32, from_f32 of the master into the working copy. */
static void check_fused(const struct ops_backend *o, enum zt_dtype t, size_t l, size_t off)
{
    const struct ops_backend *g0 = generic();
    const float gscale = 1.0f / 384.0f;
    const size_t n = LENS[l];
    for (size_t c = 0; c < N_RULES; c++) {
        const struct rule_case *rc = &RULES[c];
        struct rule_state a, b;
        rule_state_init(&a, n, off, 81 + l);
        rule_state_init(&b, n, off, 81 + l);
        float *x = malloc((n + 1) * sizeof(float)), *tmp = malloc((n + 1) * sizeof(float));
        struct guarded g16 = guarded_alloc(n, 2, off), wa = guarded_alloc(n, 2, off);
        struct guarded wb = guarded_alloc(n, 2, off);
        for (long step = 1; step <= 2; step++) {
            const struct optimizer_hparams hp = rule_hparams(rc, step);
            fill(x, n, 91 + (uint64_t)step, 0);
            ck_assert_int_eq(g0->from_f32(g0, t, x, g16.p, n), ZT_OK);
            const struct optimizer_range fused = {
                .params = a.p,
                .grads = g16.p,
                .grad_dtype = t,
                .gscale = gscale,
                .states = {case_state(rc, &a, 0), case_state(rc, &a, 1)},
                .working = wa.p,
                .working_dtype = t,
                .n = n,
                .decay = 1.0f};
            ck_assert_int_eq(rule_slot(o, rc, &fused, &hp), ZT_OK);
            const struct optimizer_range plain = {
                .params = b.p,
                .grads = tmp,
                .grad_dtype = ZT_F32,
                .gscale = 1.0f,
                .states = {case_state(rc, &b, 0), case_state(rc, &b, 1)},
                .n = n,
                .decay = 1.0f};
            ck_assert_int_eq(g0->to_f32(g0, t, g16.p, tmp, n), ZT_OK);
            ck_assert_int_eq(g0->scale(g0, tmp, n, gscale), ZT_OK);
            ck_assert_int_eq(rule_slot(g0, rc, &plain, &hp), ZT_OK);
            ck_assert_int_eq(g0->from_f32(g0, t, b.p, wb.p, n), ZT_OK);
        }
        rule_state_same(&a, &b, n, rc->name, n);
        ck_assert_msg(memcmp(wa.p, wb.p, n * 2) == 0, "%s n %zu: working copies differ", rc->name,
                      n);
        rule_state_free(&a);
        rule_state_free(&b);
        guarded_check_free(&g16, n, 2);
        guarded_check_free(&wa, n, 2);
        guarded_check_free(&wb, n, 2);
        free(x), free(tmp);
    }
}

START_TEST(fused_16bit_pass_equals_the_unfused_sequence)
{
    for_each_case(_i, 1, N_TYPES, check_fused);
}
END_TEST

START_TEST(the_default_table_is_the_widest_usable)
{
    const struct ops_backend *avx2 = ops_cpu_backend_isa(OPS_CPU_AVX2, NULL, 0);
    ck_assert_ptr_eq(ops_cpu_backend(), avx2 ? avx2 : generic());
    ck_assert_ptr_nonnull(generic());
    ck_assert_str_eq(ops_cpu_isa_name(OPS_CPU_AVX2), "avx2");
    printf("test_simd: ops_cpu_backend() uses the %s engine ops\n", avx2 ? "avx2" : "generic");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("simd");
    TCase *tc = tcase_create("simd");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, to_f32_is_exact_on_every_16bit_pattern, 0, OPS_CPU_ISA_COUNT);
    tcase_add_loop_test(tc, from_f32_matches_half_h_on_a_sweep_of_floats, 0, OPS_CPU_ISA_COUNT);
    tcase_add_loop_test(tc, casts_cover_tails_and_unaligned_starts, 0, OPS_CPU_ISA_COUNT);
    tcase_add_loop_test(tc, add_into_rounds_the_fp32_sum, 0, OPS_CPU_ISA_COUNT);
    tcase_add_loop_test(tc, scale_is_one_fp32_multiply, 0, OPS_CPU_ISA_COUNT);
    tcase_add_loop_test(tc, sum_squares_is_close_and_repeats_its_bits, 0, OPS_CPU_ISA_COUNT);
    tcase_add_loop_test(tc, rules_match_the_reference_bit_for_bit, 0, OPS_CPU_ISA_COUNT);
    tcase_add_loop_test(tc, fused_16bit_pass_equals_the_unfused_sequence, 0, OPS_CPU_ISA_COUNT);
    tcase_add_test(tc, the_default_table_is_the_widest_usable);
    tcase_add_test(tc, staging_casts_match_the_reference);
    suite_add_tcase(s, tc);
    return testutil_run_suite(s, 0);
}
