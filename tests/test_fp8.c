/* tests/test_fp8.c — the fp8 codec (common/fp8.h), delayed scaling
 * (worker/fp8_scaling.h) and the fp8 GEMMs of the model path
 * (model_linear_forward/backward, worker/model_parts.h).
 *
 * The codec is checked against tests/data/fp8_tables.txt, which
 * scripts/reference/fp8_reference.py writes from the formats' definitions
 * with exact fractions: every code's value, and the codes of every
 * representable value, every midpoint and its float neighbours, values
 * beyond the range, underflow, infinities and NaNs. Random floats over the
 * whole exponent range are checked against a brute-force nearest-even
 * search over the 256 decoded values in double, written here. The CPU
 * op table's vectorised quantise and dequantise are checked against the
 * codec bit for bit (an exhaustive run over all 2^32 floats at scale 1
 * agreed too; it takes minutes, so the test keeps a sample). The scaling
 * is checked against a naive reference that keeps every step's amax in a
 * list; the GEMMs against triple loops in double over the decoded values;
 * the buffers' bytes against the sizes the model's shape gives.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fp8.h"
#include "../common/rng.h"
#include "../worker/backend.h"
#include "../worker/fp8_scaling.h"
#include "../worker/model.h"
#include "../worker/model_parts.h"
#include "testutil.h"

static float float_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static enum fp8_format format_named(const char *name)
{
    if (strcmp(name, "e4m3") == 0)
        return FP8_E4M3;
    ck_assert_str_eq(name, "e5m2");
    return FP8_E5M2;
}

static FILE *open_tables(void)
{
    const char *path = testutil_source_path("tests/data/fp8_tables.txt");
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    return f;
}

/* ---- the codec against the reference tables ------------------------------ */

START_TEST(test_decode_every_code)
{
    FILE *f = open_tables();
    char line[256], kind[16], fmt[16], value[64];
    unsigned code;
    int seen[FP8_FORMAT_COUNT][256] = {{0}};
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%15s %15s %x %63s", kind, fmt, &code, value) != 4 ||
            strcmp(kind, "decode") != 0)
            continue;
        const enum fp8_format ff = format_named(fmt);
        const float got = fp8_decode((uint8_t)code, ff);
        seen[ff][code]++;
        if (strcmp(value, "nan") == 0) {
            ck_assert_msg(isnan(got), "%s 0x%02x: want NaN, got %a", fmt, code, got);
            ck_assert_int_eq(signbit(got) != 0, (code & 0x80) != 0);
        } else {
            const double want = strcmp(value, "inf") == 0    ? INFINITY
                                : strcmp(value, "-inf") == 0 ? -INFINITY
                                                             : strtod(value, NULL);
            ck_assert_msg((double)got == want && !signbit(got) == !signbit(want),
                          "%s 0x%02x: want %s, got %a", fmt, code, value, got);
        }
    }
    fclose(f);
    for (int ff = 0; ff < FP8_FORMAT_COUNT; ff++)
        for (int c = 0; c < 256; c++)
            ck_assert_msg(seen[ff][c] == 1, "format %d code 0x%02x not in the table", ff, c);
}
END_TEST

START_TEST(test_encode_reference_cases)
{
    FILE *f = open_tables();
    char line[256], kind[16], fmt[16];
    unsigned bits, code;
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%15s %15s %x %x", kind, fmt, &bits, &code) != 4 ||
            strcmp(kind, "encode") != 0)
            continue;
        const float x = float_of_bits(bits);
        const unsigned got = fp8_encode(x, format_named(fmt));
        ck_assert_msg(got == code, "%s: %a (0x%08x): want 0x%02x, got 0x%02x", fmt, x, bits, code,
                      got);
        n++;
    }
    fclose(f);
    ck_assert_int_gt(n, 1000); /* both formats' values, midpoints and neighbours */
}
END_TEST

/* The code of x by brute force: the nearest of the finite decoded values
 * in double (ties to the even code), saturating beyond the largest, NaN to
 * the format's NaN; the sign kept. Nothing of the codec's rounding. */
static uint8_t encode_brute_force(float x, enum fp8_format ff)
{
    const uint8_t sign = signbit(x) ? 0x80 : 0;
    if (isnan(x))
        return sign | (ff == FP8_E4M3 ? 0x7f : 0x7e);
    const double a = fabs((double)x);
    int best = -1;
    double best_err = INFINITY, top = 0.0;
    int top_code = 0;
    for (int c = 0; c < 0x80; c++) {
        const float v = fp8_decode((uint8_t)c, ff);
        if (!isfinite(v))
            continue;
        if (v > top)
            top = v, top_code = c;
        const double err = fabs(a - v);
        if (err < best_err || (err == best_err && (c & 1) == 0))
            best = c, best_err = err;
    }
    if (a >= top)
        return sign | (uint8_t)top_code;
    return sign | (uint8_t)best;
}

START_TEST(test_encode_random_floats_brute_force)
{
    const uint64_t key = rng_key(7, "fp8 random floats");
    for (int ff = 0; ff < FP8_FORMAT_COUNT; ff++) {
        for (uint64_t i = 0; i < 150000; i++) {
            const uint64_t r = rng_u64(key, i + 1000000 * (uint64_t)ff);
            /* exponents 2^-26 .. 2^21: underflow, subnormals, normals, beyond */
            const uint32_t e = 127 - 26 + (uint32_t)((r >> 32) % 48);
            const uint32_t u = ((uint32_t)(r >> 63) << 31) | (e << 23) | (uint32_t)(r & 0x7fffff);
            const float x = float_of_bits(u);
            const uint8_t want = encode_brute_force(x, (enum fp8_format)ff);
            const uint8_t got = fp8_encode(x, (enum fp8_format)ff);
            ck_assert_msg(got == want, "format %d: %a (0x%08x): want 0x%02x, got 0x%02x", ff, x, u,
                          want, got);
        }
    }
}
END_TEST

START_TEST(test_scaled_encode_and_amax)
{
    const float x[6] = {1.0f, -3.0f, 0.25f, 500.0f, -0.0f, 7.0f};
    uint8_t q[6];
    float back[6];
    fp8_encode_scaled(q, x, 6, 2.0f, FP8_E4M3);
    fp8_decode_scaled(back, q, 6, 0.5f, FP8_E4M3);
    const float want[6] = {1.0f, -3.0f, 0.25f, 224.0f, -0.0f, 7.0f}; /* 1000 saturates to 448 */
    for (int i = 0; i < 6; i++)
        ck_assert_msg(back[i] == want[i] && !signbit(back[i]) == !signbit(want[i]), "%d: %a", i,
                      back[i]);
    ck_assert_float_eq(fp8_amax(x, 6), 500.0f);
    ck_assert_float_eq(fp8_amax(x, 0), 0.0f);
    const float with_nan[3] = {1.0f, NAN, 2.0f};
    ck_assert(isnan(fp8_amax(with_nan, 3)));
    const float with_inf[2] = {-INFINITY, 2.0f};
    ck_assert(isinf(fp8_amax(with_inf, 2)));
}
END_TEST

/* ---- the CPU ops against the codec ---------------------------------------- */

/* The encode inputs of the reference tables, then random 32-bit patterns
 * (every class: NaNs, infinities, zeros, float subnormals, normals), with
 * the NaNs among the random ones made finite except one at index nan_at:
 * prefixes before it have a finite (or infinite) amax. */
static float *op_inputs(size_t *n, size_t *nan_at)
{
    enum { RANDOM = 60000 };
    size_t cap = RANDOM + 4096, k = 0;
    float *x = malloc(cap * sizeof *x);
    ck_assert_ptr_nonnull(x);
    FILE *f = open_tables();
    char line[256], kind[16], fmt[16];
    unsigned bits, code;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%15s %15s %x %x", kind, fmt, &bits, &code) == 4 &&
            strcmp(kind, "encode") == 0 && !isnan(float_of_bits(bits))) {
            if (k == cap - RANDOM) {
                cap *= 2;
                x = realloc(x, cap * sizeof *x);
                ck_assert_ptr_nonnull(x);
            }
            x[k++] = float_of_bits(bits);
        }
    fclose(f);
    const uint64_t key = rng_key(11, "fp8 op inputs");
    for (uint64_t i = 0; i < RANDOM; i++) {
        const float v = float_of_bits((uint32_t)rng_u64(key, i));
        x[k++] = isnan(v) ? (float)i : v;
    }
    *nan_at = k - 5;
    x[*nan_at] = -NAN;
    *n = k;
    return x;
}

/* The op table's fp8_quantize and fp8_dequantize (worker/cpu/fp8.c,
 * vectorised and threaded) give the codec's fp8_encode_scaled, fp8_amax
 * and fp8_decode_scaled bit for bit: at scales 1, a power of two and two
 * that are not (one overflowing most values), on prefixes whose lengths
 * end inside a vector and span several thread chunks. */
START_TEST(test_cpu_ops_match_the_codec)
{
    const struct ops_backend *ops = ops_cpu_backend();
    size_t n, nan_at;
    float *x = op_inputs(&n, &nan_at);
    uint8_t *got = malloc(n), *want = malloc(n);
    float *back = malloc(n * sizeof *back), *back_want = malloc(n * sizeof *back);
    ck_assert(got && want && back && back_want);
    static const float scales[] = {1.0f, 0.0078125f, 60.3f, 3.7e9f};
    const size_t lens[] = {0, 1, 7, 33, 1000, nan_at, n};
    for (int ff = 0; ff < FP8_FORMAT_COUNT; ff++)
        for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++)
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                const size_t len = lens[li];
                const enum fp8_format f = (enum fp8_format)ff;
                float amax = -1.0f;
                memset(got, 0xaa, n);
                ck_assert_int_eq(ops->fp8_quantize(ops, got, &amax, x, len, scales[si], f), ZT_OK);
                fp8_encode_scaled(want, x, len, scales[si], f);
                const float amax_want = fp8_amax(x, len);
                ck_assert_msg(memcmp(got, want, len) == 0 &&
                                  memcmp(&amax, &amax_want, sizeof amax) == 0,
                              "format %d scale %g length %zu: codes or amax (%a, want %a) differ",
                              ff, scales[si], len, amax, amax_want);
                ck_assert_int_eq(ops->fp8_dequantize(ops, back, got, len, 1.0f / scales[si], f),
                                 ZT_OK);
                fp8_decode_scaled(back_want, got, len, 1.0f / scales[si], f);
                ck_assert_msg(memcmp(back, back_want, len * sizeof *back) == 0,
                              "format %d scale %g length %zu: decoded values differ", ff,
                              scales[si], len);
            }
    free(x);
    free(got);
    free(want);
    free(back);
    free(back_want);
}
END_TEST

/* ---- delayed scaling against a naive reference --------------------------- */

/* Transformer Engine's rule written plainly: every step's amax kept in a
 * list; the scale for the next step from the last `len` of them (or the
 * last one), in double (a float quotient rounded once is the float
 * division), the previous scale where the amax is 0 or not finite. */
static float naive_scale(const float *amaxes, int steps, const struct fp8_recipe *r, double fmax,
                         float prev)
{
    double a = 0.0;
    if (r->amax_compute_algo == FP8_AMAX_MOST_RECENT) {
        a = amaxes[steps - 1];
    } else {
        for (int k = steps - 1; k >= 0 && k >= steps - r->amax_history_len; k--) {
            const double v = isnan(amaxes[k]) ? INFINITY : amaxes[k];
            a = v > a ? v : a;
        }
    }
    if (!(a > 0.0) || !isfinite(a))
        return prev;
    return (float)((float)(fmax / a) / ldexp(1.0, r->margin));
}

START_TEST(test_delayed_scaling_matches_naive_reference)
{
    enum { STEPS = 24 };
    const uint64_t key = rng_key(3, "fp8 amaxes");
    const struct fp8_recipe recipes[] = {
        {FP8_RECIPE_HYBRID, 1, FP8_AMAX_MAX, 0},  {FP8_RECIPE_HYBRID, 3, FP8_AMAX_MAX, 0},
        {FP8_RECIPE_HYBRID, 5, FP8_AMAX_MAX, 2},  {FP8_RECIPE_E4M3, 4, FP8_AMAX_MOST_RECENT, 0},
        {FP8_RECIPE_HYBRID, 16, FP8_AMAX_MAX, 1}, {FP8_RECIPE_HYBRID, 2, FP8_AMAX_MOST_RECENT, 3},
    };
    for (size_t k = 0; k < sizeof recipes / sizeof recipes[0]; k++) {
        const struct fp8_recipe *r = &recipes[k];
        struct fp8_scaling *s;
        ck_assert_int_eq(fp8_scaling_create(r, 2, &s), ZT_OK);
        ck_assert_uint_eq(s->n, 2 * FP8_GEMMS * FP8_OPERANDS);
        float amaxes[2 * FP8_GEMMS * FP8_OPERANDS][STEPS];
        float prev[2 * FP8_GEMMS * FP8_OPERANDS];
        for (size_t i = 0; i < s->n; i++) {
            prev[i] = 1.0f;
            ck_assert_float_eq(s->scale[i], 1.0f); /* the first step's */
        }
        for (int step = 0; step < STEPS; step++) {
            for (size_t i = 0; i < s->n; i++) {
                const uint64_t u = rng_u64(key, (uint64_t)(k * 10000 + step * 100 + i));
                /* amaxes over many binades; some steps 0, inf or NaN */
                float a =
                    (float)ldexp(1.0 + (double)(u & 0xffff) / 65536.0, (int)((u >> 16) % 40) - 20);
                const int special = (int)((u >> 32) % 16);
                a = special == 0 ? 0.0f : special == 1 ? INFINITY : special == 2 ? NAN : a;
                amaxes[i][step] = a;
                /* two records of the same step: a running maximum */
                fp8_scaling_record(s, i, a * 0.5f);
                fp8_scaling_record(s, i, a);
            }
            fp8_scaling_update(s);
            for (size_t i = 0; i < s->n; i++) {
                const enum fp8_operand o = (enum fp8_operand)(i % FP8_OPERANDS);
                const double fmax =
                    o == FP8_GRAD_OUTPUT && r->format == FP8_RECIPE_HYBRID ? 57344.0 : 448.0;
                const float want = naive_scale(amaxes[i], step + 1, r, fmax, prev[i]);
                ck_assert_msg(s->scale[i] == want, "recipe %zu step %d tensor %zu: %a, want %a", k,
                              step, i, s->scale[i], want);
                ck_assert_float_eq(s->scale_inv[i], 1.0f / want);
                ck_assert_float_eq(s->amax[i], 0.0f);
                prev[i] = want;
            }
        }
        fp8_scaling_destroy(s);
    }
}
END_TEST

START_TEST(test_scale_formula_edges)
{
    const struct fp8_recipe r = {FP8_RECIPE_HYBRID, 4, FP8_AMAX_MAX, 0};
    ck_assert_float_eq(fp8_scale_of(&r, FP8_E4M3, 448.0f, 5.0f), 1.0f);
    ck_assert_float_eq(fp8_scale_of(&r, FP8_E5M2, 2.0f, 5.0f), 28672.0f);
    ck_assert_float_eq(fp8_scale_of(&r, FP8_E4M3, 0.0f, 5.0f), 5.0f);
    ck_assert_float_eq(fp8_scale_of(&r, FP8_E4M3, INFINITY, 5.0f), 5.0f);
    ck_assert_float_eq(fp8_scale_of(&r, FP8_E4M3, NAN, 5.0f), 5.0f);
    ck_assert_float_eq(fp8_scale_of(&r, FP8_E4M3, 1e-44f, 5.0f), FLT_MAX); /* overflow */
    const struct fp8_recipe m3 = {FP8_RECIPE_HYBRID, 4, FP8_AMAX_MAX, 3};
    ck_assert_float_eq(fp8_scale_of(&m3, FP8_E4M3, 448.0f, 5.0f), 0.125f);
    ck_assert_int_eq(fp8_operand_format(&r, FP8_GRAD_OUTPUT), FP8_E5M2);
    ck_assert_int_eq(fp8_operand_format(&r, FP8_INPUT), FP8_E4M3);
    const struct fp8_recipe e4 = {FP8_RECIPE_E4M3, 4, FP8_AMAX_MAX, 0};
    ck_assert_int_eq(fp8_operand_format(&e4, FP8_GRAD_OUTPUT), FP8_E4M3);
}
END_TEST

/* ---- the GEMMs through the model path ------------------------------------ */

struct gemm_fixture {
    struct gpt2_config cfg;
    struct param_table t;
    struct ledger ledger;
    struct compute_backend be;
    struct model *m;
};

static void gemm_fixture_open(struct gemm_fixture *fx, int plan, int fp8, int ckpt_every)
{
    fx->cfg = (struct gpt2_config){
        .vocab_size = 64, .block_size = 8, .n_layer = 3, .n_head = 2, .n_embd = 16};
    ck_assert_int_eq(gpt2_table_build(&fx->cfg, &fx->t), ZT_OK);
    const struct fp8_recipe r = {FP8_RECIPE_HYBRID, 8, FP8_AMAX_MAX, 0};
    if (fp8)
        ck_assert_int_eq(fp8_scaling_create(&r, fx->cfg.n_layer, &fx->t.fp8), ZT_OK);
    ledger_init(&fx->ledger, plan);
    ck_assert_int_eq(compute_backend_open("cpu", -1, &fx->ledger, &fx->be), ZT_OK);
    ck_assert_int_eq(model_create(&fx->t, &fx->be, 2, 8, ckpt_every, &fx->m), ZT_OK);
}

static void gemm_fixture_close(struct gemm_fixture *fx)
{
    model_destroy(fx->m);
    compute_backend_close(&fx->be);
    param_table_free(&fx->t);
}

static void fill_random(float *x, size_t n, uint64_t seed, double spread)
{
    const uint64_t key = rng_key(seed, "fp8 gemm");
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(spread * rng_normal(key, i));
}

/* x quantised and decoded as the GEMM sees it, by the codec's scalar calls. */
static double seen(float x, float scale, float scale_inv, enum fp8_format f)
{
    return (double)(fp8_decode(fp8_encode(x * scale, f), f) * scale_inv);
}

START_TEST(test_gemm_matches_naive_loop)
{
    struct gemm_fixture fx;
    gemm_fixture_open(&fx, 0, 1, 0);
    struct model *m = fx.m;
    struct fp8_scaling *s = fx.t.fp8;
    const int N = 16, C = 16, OC = 64, l = 1; /* GPT-2's c_fc of block 1 */
    const enum fp8_gemm g = FP8_GEMM_MLP_IN;
    float *x = malloc(sizeof(float) * N * C), *w = malloc(sizeof(float) * OC * C);
    float *b = malloc(sizeof(float) * OC), *y = malloc(sizeof(float) * N * OC);
    float *dy = malloc(sizeof(float) * N * OC), *dx = calloc((size_t)N * C, sizeof(float));
    float *dw = calloc((size_t)OC * C, sizeof(float)), *db = calloc((size_t)OC, sizeof(float));
    fill_random(x, (size_t)N * C, 1, 3.0);
    fill_random(w, (size_t)OC * C, 2, 0.05);
    fill_random(b, (size_t)OC, 3, 0.1);
    fill_random(dy, (size_t)N * OC, 4, 1e-4);
    /* scales from a past step: not powers of two, some values saturating */
    const size_t ix = fp8_scaling_index(l, g, FP8_INPUT), iw = fp8_scaling_index(l, g, FP8_WEIGHT);
    const size_t idy = fp8_scaling_index(l, g, FP8_GRAD_OUTPUT);
    s->scale[ix] = 60.3f, s->scale[iw] = 3001.7f, s->scale[idy] = 1.3e8f;
    for (size_t i = 0; i < s->n; i++)
        s->scale_inv[i] = 1.0f / s->scale[i];
    s->grad_divisor = 2.0f;
    m->training = 1;

    ck_assert_int_eq(model_linear_forward(m, fx.be.ops, l, g, y, x, w, b, N, C, OC), ZT_OK);
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OC; o++) {
            double want = b[o], mag = fabs(b[o]);
            for (int c = 0; c < C; c++) {
                const double t = seen(x[n * C + c], s->scale[ix], s->scale_inv[ix], FP8_E4M3) *
                                 seen(w[o * C + c], s->scale[iw], s->scale_inv[iw], FP8_E4M3);
                want += t;
                mag += fabs(t);
            }
            ck_assert_msg(fabs(y[n * OC + o] - want) <= 1e-6 * mag + 1e-30, "y[%d,%d] %g want %g",
                          n, o, y[n * OC + o], want);
        }
    }
    ck_assert_float_eq(s->amax[ix], fp8_amax(x, (size_t)N * C));
    ck_assert_float_eq(s->amax[iw], fp8_amax(w, (size_t)OC * C));

    ck_assert_int_eq(model_linear_backward(m, fx.be.ops, l, g, dx, dw, db, dy, x, w, N, C, OC),
                     ZT_OK);
    /* dY divided by grad_divisor before scaling, multiplied back after */
    const float sdy = s->scale[idy] / 2.0f, sdy_inv = s->scale_inv[idy] * 2.0f;
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) {
            double want = 0.0, mag = 0.0;
            for (int o = 0; o < OC; o++) {
                const double t = seen(dy[n * OC + o], sdy, sdy_inv, FP8_E5M2) *
                                 seen(w[o * C + c], s->scale[iw], s->scale_inv[iw], FP8_E4M3);
                want += t;
                mag += fabs(t);
            }
            ck_assert_msg(fabs(dx[n * C + c] - want) <= 1e-6 * mag + 1e-30, "dx[%d,%d]", n, c);
        }
    }
    for (int o = 0; o < OC; o++) {
        for (int c = 0; c < C; c++) {
            double want = 0.0, mag = 0.0;
            for (int n = 0; n < N; n++) {
                const double t = seen(dy[n * OC + o], sdy, sdy_inv, FP8_E5M2) *
                                 seen(x[n * C + c], s->scale[ix], s->scale_inv[ix], FP8_E4M3);
                want += t;
                mag += fabs(t);
            }
            ck_assert_msg(fabs(dw[o * C + c] - want) <= 1e-6 * mag + 1e-30, "dw[%d,%d]", o, c);
        }
        double want = 0.0, mag = 0.0; /* the bias from the unquantised dY */
        for (int n = 0; n < N; n++)
            want += dy[n * OC + o], mag += fabs(dy[n * OC + o]);
        ck_assert_msg(fabs(db[o] - want) <= 1e-6 * mag, "db[%d]", o);
    }
    ck_assert_float_eq(s->amax[idy], fp8_amax(dy, (size_t)N * OC) / 2.0f);
    /* nothing else recorded */
    for (size_t i = 0; i < s->n; i++)
        if (i != ix && i != iw && i != idy)
            ck_assert_float_eq(s->amax[i], 0.0f);
    free(x), free(w), free(b), free(y), free(dy), free(dx), free(dw), free(db);
    gemm_fixture_close(&fx);
}
END_TEST

START_TEST(test_eval_forward_records_nothing)
{
    struct gemm_fixture fx;
    gemm_fixture_open(&fx, 0, 1, 0);
    const int N = 16, C = 16, OC = 48;
    float *x = malloc(sizeof(float) * N * C), *w = malloc(sizeof(float) * OC * C);
    float *y = malloc(sizeof(float) * N * OC);
    fill_random(x, (size_t)N * C, 5, 1.0);
    fill_random(w, (size_t)OC * C, 6, 0.1);
    fx.m->training = 0;
    ck_assert_int_eq(
        model_linear_forward(fx.m, fx.be.ops, 0, FP8_GEMM_QKV, y, x, w, NULL, N, C, OC), ZT_OK);
    for (size_t i = 0; i < fx.t.fp8->n; i++)
        ck_assert_float_eq(fx.t.fp8->amax[i], 0.0f);
    free(x), free(w), free(y);
    gemm_fixture_close(&fx);
}
END_TEST

/* The fp8 buffers a plan counts, from the shape alone: for GPT-2 with
 * N = B*T rows, width C and MLP width F = 4C, the kept inputs are
 * N (C + C + C + F) bytes per kept block plus one recompute slot; the
 * copies max(weight) + N max(out) bytes; the scratch (N max(in) +
 * max(weight) + N max(out)) floats. */
START_TEST(test_plan_counts_fp8_buffers)
{
    for (int ckpt = 0; ckpt <= 2; ckpt++) {
        struct gemm_fixture plain, fp8;
        gemm_fixture_open(&plain, 1, 0, ckpt);
        gemm_fixture_open(&fp8, 1, 1, ckpt);
        const size_t N = 2 * 8, C = 16, F = 64, L = 3;
        const size_t kept_blocks = ckpt == 0 ? L : ckpt == 1 ? 0 : 1; /* blocks 0, 2 recompute */
        const size_t slots = kept_blocks + (ckpt > 0);
        const size_t kept = slots * N * (3 * C + F);
        const size_t copies = 4 * C * C + N * 4 * C;
        const size_t scratch = (N * F + 4 * C * C + N * 4 * C) * sizeof(float);
        ck_assert_uint_eq(
            fp8.ledger.peak[LEDGER_ACTIVATIONS] - plain.ledger.peak[LEDGER_ACTIVATIONS], kept);
        ck_assert_uint_eq(fp8.ledger.peak[LEDGER_WORKSPACE] - plain.ledger.peak[LEDGER_WORKSPACE],
                          copies + scratch);
        gemm_fixture_close(&fp8);
        gemm_fixture_close(&plain);
        ck_assert_uint_eq(fp8.ledger.current[LEDGER_ACTIVATIONS], 0);
        ck_assert_uint_eq(fp8.ledger.current[LEDGER_WORKSPACE], 0);
    }
}
END_TEST

static Suite *fp8_suite(void)
{
    Suite *s = suite_create("fp8");
    TCase *codec = tcase_create("codec");
    tcase_add_test(codec, test_decode_every_code);
    tcase_add_test(codec, test_encode_reference_cases);
    tcase_add_test(codec, test_encode_random_floats_brute_force);
    tcase_add_test(codec, test_scaled_encode_and_amax);
    tcase_add_test(codec, test_cpu_ops_match_the_codec);
    tcase_set_timeout(codec, 60);
    suite_add_tcase(s, codec);
    TCase *scaling = tcase_create("scaling");
    tcase_add_test(scaling, test_delayed_scaling_matches_naive_reference);
    tcase_add_test(scaling, test_scale_formula_edges);
    suite_add_tcase(s, scaling);
    TCase *gemm = tcase_create("gemm");
    tcase_add_test(gemm, test_gemm_matches_naive_loop);
    tcase_add_test(gemm, test_eval_forward_records_nothing);
    tcase_add_test(gemm, test_plan_counts_fp8_buffers);
    suite_add_tcase(s, gemm);
    return s;
}

int main(void)
{
    return testutil_run_suite(fp8_suite(), 0);
}
