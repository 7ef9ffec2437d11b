/* tests/test_backend.c — the compute backend bundle (worker/backend.h) and
 * the engine ops of the op table (worker/ops.h).
 *
 * Selection: "cpu" gives the CPU, "auto" the GPU where one is usable and
 * the CPU elsewhere (without loading the CUDA module where no driver is),
 * "cuda" without a GPU is refused with a reason (in a build without CUDA,
 * the module is not found), an unknown name is a configuration error.
 *
 * Engine ops, each against a loop written here: casts against the scalar
 * conversions of common/half.h (and the round trip of every 16-bit pattern),
 * add_into against the exact sum in double rounded once to fp32 and once to
 * the working precision, sum_squares and scale against double loops, AdamW
 * against a double-precision AdamW over several steps. Every op must
 * return ZT_OK.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"
#include "common/rng.h"
#include "testutil.h"
#include "worker/backend.h"
#include "worker/cuda_module.h"

/* A fresh CPU op table through the bundle, as the coordinator gets it. */
static const struct ops_backend *cpu_ops(struct compute_backend *be, struct ledger *l)
{
    ledger_init(l, 0);
    ck_assert_int_eq(compute_backend_open("cpu", -1, l, be), ZT_OK);
    return be->ops;
}

/* n floats uniform in [-scale, scale), from counter stream `key`. */
static float *rand_floats(size_t n, uint64_t key, double scale)
{
    float *x = malloc(n * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((2.0 * rng_uniform(key, (uint64_t)i) - 1.0) * scale);
    return x;
}

/* *r as a plain fp32 range (gscale 1, no working copy) over the arrays; returns r. */
static const struct optimizer_range *f32_range(struct optimizer_range *r, float *p, const float *g,
                                               float *s0, float *s1, size_t n, float decay)
{
    *r = (struct optimizer_range){.params = p,
                                  .grads = g,
                                  .grad_dtype = ZT_F32,
                                  .gscale = 1.0f,
                                  .states = {s0, s1},
                                  .n = n,
                                  .decay = decay};
    return r;
}

static float half_to_f32(enum zt_dtype t, uint16_t h)
{
    return t == ZT_BF16 ? zt_bf16_to_f32(h) : zt_f16_to_f32(h);
}

static uint16_t f32_to_half(enum zt_dtype t, float f)
{
    return t == ZT_BF16 ? zt_f32_to_bf16(f) : zt_f32_to_f16(f);
}

/* ---- selection ------------------------------------------------------------ */

START_TEST(cpu_selects_cpu)
{
    const char *chosen = NULL;
    struct ledger l;
    struct compute_backend be;
    ck_assert_int_eq(compute_backend_select("cpu", &chosen), ZT_OK);
    ck_assert_str_eq(chosen, "cpu");
    ledger_init(&l, 0);
    ck_assert_int_eq(compute_backend_open("cpu", -1, &l, &be), ZT_OK);
    ck_assert_str_eq(be.name, "cpu");
    /* an opened copy of the CPU table, with its GEMM state */
    ck_assert_ptr_eq(be.ops->matmul_forward, ops_cpu_backend()->matmul_forward);
    ck_assert_ptr_nonnull(be.ops->ctx);
    ck_assert_ptr_eq(be.dev.ops, device_cpu_backend());
    ck_assert_ptr_eq(be.dev.ledger, &l);
    ck_assert_ptr_null(be.stream);
    ck_assert(device_is_real(&be.dev));
    compute_backend_close(&be);
    ck_assert_ptr_null(be.ops);
    compute_backend_close(&be); /* a closed (zeroed) bundle closes again */
}
END_TEST

START_TEST(auto_selects_the_gpu_if_usable_else_cpu)
{
    const char *chosen = NULL;
    struct ledger l;
    struct compute_backend be;
    char why[256];
    const int gpu = compute_backend_query("cuda", why, sizeof why) >= 0;
    ck_assert_int_eq(compute_backend_select("auto", &chosen), ZT_OK);
    ck_assert_str_eq(chosen, gpu ? "cuda" : "cpu");
    ledger_init(&l, 1);
    ck_assert_int_eq(compute_backend_open("auto", -1, &l, &be), ZT_OK);
    ck_assert_str_eq(be.name, chosen);
    if (!gpu)
        ck_assert_ptr_eq(be.ops->matmul_forward, ops_cpu_backend()->matmul_forward);
    ck_assert(!device_is_real(&be.dev)); /* the plan-only ledger reaches the device */
    compute_backend_close(&be);
}
END_TEST

/* 1 when this process has mapped a file whose path holds `part`. */
static int mapped(const char *part)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    ck_assert_ptr_nonnull(f);
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, part) != NULL;
    fclose(f);
    return found;
}

/* What keeps a CPU run's start-up short: on a machine without an NVIDIA
 * driver, "auto" picks the CPU without loading the CUDA module, so neither
 * it nor the CUDA runtime is ever mapped. Runs first in the suite, before
 * a case that names cuda (which loads it, in a build that has it). */
START_TEST(auto_without_a_driver_maps_no_cuda)
{
    struct ledger l;
    struct compute_backend be;
    if (cuda_driver_present())
        return; /* a GPU machine: "auto" must look */
    ck_assert(!mapped("zt_cuda.so"));
    ledger_init(&l, 1);
    ck_assert_int_eq(compute_backend_open("auto", -1, &l, &be), ZT_OK);
    ck_assert_str_eq(be.name, "cpu");
    ck_assert(!mapped("zt_cuda.so"));
    ck_assert(!mapped("libcudart"));
    compute_backend_close(&be);
}
END_TEST

/* Without a GPU (or without CUDA in the build), naming cuda is refused
 * with the reason; on a machine with a GPU there is nothing to refuse. */
START_TEST(cuda_without_a_device_is_refused_with_a_reason)
{
    char why[256] = "";
    const char *chosen = NULL;
    struct ledger l;
    struct compute_backend be;
#ifdef ZT_HAVE_CUDA
    /* the module loads (its symbols resolve against this executable) and
     * its runtime finds no GPU */
    if (compute_backend_query("cuda", why, sizeof why) >= 0)
        return;
    ck_assert_msg(strstr(why, "no CUDA device"), "%s", why);
#else
    ck_assert_int_lt(compute_backend_query("cuda", why, sizeof why), 0);
    ck_assert_msg(strstr(why, "zt_cuda.so not found"), "%s", why);
#endif
    zt_error_clear();
    ck_assert_int_eq(compute_backend_select("cuda", &chosen), ZT_ERR_DEVICE);
    ck_assert_ptr_null(chosen);
    ck_assert_ptr_nonnull(strstr(zt_error_message(), "device 'cuda': not usable here: "));
    ck_assert_ptr_nonnull(strstr(zt_error_message(), why));
    ledger_init(&l, 0);
    memset(&be, 0xff, sizeof be);
    ck_assert_int_eq(compute_backend_open("cuda", -1, &l, &be), ZT_ERR_DEVICE);
    ck_assert_ptr_null(be.name);
    ck_assert_ptr_null(be.ops);
    ck_assert_ptr_null(be.dev.ops);
    ck_assert_uint_eq(l.total_current, 0);
}
END_TEST

/* The binary itself, where no GPU is: device cuda ends the run with the
 * reason, which in a CUDA build shows the module loaded into zerotrain
 * (every symbol it calls resolved there) and asked the runtime. */
START_TEST(the_binary_refuses_cuda_without_a_gpu)
{
    const char *dir = testutil_tmpdir("cuda_refused");
    const char *log = testutil_path_in(dir, "log");
    if (cuda_driver_present())
        return;
    const int rc = testutil_run(log, "%s train %s --set device=cuda --set run.output_dir=%s",
                                testutil_binary(), testutil_source_path("tests/data/micro.yaml"),
                                testutil_path_in(dir, "out"));
    ck_assert_int_eq(rc, 1);
    const char *text = testutil_slurp(log);
    ck_assert_msg(strstr(text, "device 'cuda': not usable here: "), "%s", text);
#ifdef ZT_HAVE_CUDA
    ck_assert_msg(strstr(text, "no CUDA device"), "%s", text);
#else
    ck_assert_msg(strstr(text, "zt_cuda.so not found"), "%s", text);
#endif
}
END_TEST

START_TEST(unknown_name_is_a_config_error)
{
    const char *names[] = {"tpu", "", "CPU", "gpu"};
    char why[256] = "";
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *chosen = NULL;
        struct ledger l;
        struct compute_backend be;
        zt_error_clear();
        ck_assert_int_eq(compute_backend_select(names[i], &chosen), ZT_ERR_CONFIG);
        ck_assert_ptr_null(chosen);
        ck_assert_ptr_nonnull(strstr(zt_error_message(), "unknown (auto, cpu or cuda)"));
        ledger_init(&l, 0);
        ck_assert_int_eq(compute_backend_open(names[i], -1, &l, &be), ZT_ERR_CONFIG);
        ck_assert_ptr_null(be.ops);
        ck_assert_int_lt(compute_backend_query(names[i], why, sizeof why), 0);
    }
    /* "auto" is a choice, not a backend to query */
    ck_assert_int_lt(compute_backend_query("auto", why, sizeof why), 0);
    ck_assert_int_ge(compute_backend_query("cpu", why, sizeof why), 0);
}
END_TEST

START_TEST(bundle_memory_is_counted)
{
    struct ledger l;
    struct compute_backend be;
    const struct ops_backend *ops = cpu_ops(&be, &l);
    void *p;
    ck_assert_int_eq(device_alloc(&be.dev, LEDGER_WORKSPACE, 1000, "a test buffer", &p), ZT_OK);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(l.total_current, 1000);
    memset(p, 0x5a, 1000);
    ck_assert_int_eq(ops->memset_zero(ops, p, 999), ZT_OK);
    const unsigned char *b = p;
    for (int i = 0; i < 999; i++)
        ck_assert_uint_eq(b[i], 0);
    ck_assert_uint_eq(b[999], 0x5a);
    device_free(&be.dev, LEDGER_WORKSPACE, 1000, p);
    ck_assert_uint_eq(l.total_current, 0);
    compute_backend_close(&be);
}
END_TEST

/* ---- casts ---------------------------------------------------------------- */

static const enum zt_dtype HALVES[] = {ZT_BF16, ZT_F16};

/* from_f32 agrees with half.h element by element, over values that include
 * ties, subnormals of both formats, fp16 overflow and signed zeros. */
START_TEST(from_f32_matches_half_h)
{
    const enum zt_dtype t = HALVES[_i];
    struct ledger l;
    struct compute_backend be;
    const struct ops_backend *ops = cpu_ops(&be, &l);
    const size_t n = 4096 + 8;
    float *src = rand_floats(n, 101, 4.0);
    for (size_t i = 0; i < 1024; i++)
        src[i] = ldexpf(src[i], (int)(i % 64) - 40); /* spread the exponents */
    const float special[8] = {0.0f,     -0.0f,    1.0f + 0x1p-8f, 1.0f + 0x1p-11f,
                              65520.0f, 70000.0f, 0x1p-20f,       -0x1p-130f};
    memcpy(src + 4096, special, sizeof special);
    uint16_t *dst = malloc(n * sizeof *dst);
    ck_assert_int_eq(ops->from_f32(ops, t, src, dst, n), ZT_OK);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(dst[i] == f32_to_half(t, src[i]), "%s: element %zu (%a): %04x, want %04x",
                      t == ZT_BF16 ? "bf16" : "fp16", i, (double)src[i], dst[i],
                      f32_to_half(t, src[i]));
    free(dst);
    free(src);
    compute_backend_close(&be);
}
END_TEST

/* Every 16-bit pattern: to_f32 agrees with half.h, and casting back gives
 * the same pattern (NaNs excepted: their payload may be quieted). */
START_TEST(to_f32_round_trips_every_pattern)
{
    const enum zt_dtype t = HALVES[_i];
    struct ledger l;
    struct compute_backend be;
    const struct ops_backend *ops = cpu_ops(&be, &l);
    const size_t n = 65536;
    uint16_t *h = malloc(n * sizeof *h), *back = malloc(n * sizeof *back);
    float *f = malloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++)
        h[i] = (uint16_t)i;
    ck_assert_int_eq(ops->to_f32(ops, t, h, f, n), ZT_OK);
    ck_assert_int_eq(ops->from_f32(ops, t, f, back, n), ZT_OK);
    for (size_t i = 0; i < n; i++) {
        float want = half_to_f32(t, h[i]);
        ck_assert(memcmp(&f[i], &want, sizeof want) == 0 || (isnan(f[i]) && isnan(want)));
        if (!isnan(f[i]))
            ck_assert_msg(back[i] == h[i], "pattern %04zx came back as %04x", i, back[i]);
    }
    free(h);
    free(back);
    free(f);
    compute_backend_close(&be);
}
END_TEST

/* fp32 is a copy both ways, and a float round trip through a half type is
 * within half an ulp of that type (2^-8 bf16, 2^-11 fp16) in its normal
 * range. */
START_TEST(casts_round_trip_floats)
{
    struct ledger l;
    struct compute_backend be;
    const struct ops_backend *ops = cpu_ops(&be, &l);
    const size_t n = 3001;
    float *src = rand_floats(n, 102, 100.0), *back = malloc(n * sizeof(float));
    float *copy = malloc(n * sizeof(float));
    uint16_t *h = malloc(n * sizeof *h);
    ck_assert_int_eq(ops->from_f32(ops, ZT_F32, src, copy, n), ZT_OK);
    ck_assert(memcmp(copy, src, n * sizeof(float)) == 0);
    ck_assert_int_eq(ops->to_f32(ops, ZT_F32, copy, back, n), ZT_OK);
    ck_assert(memcmp(back, src, n * sizeof(float)) == 0);
    for (int k = 0; k < 2; k++) {
        const double half_ulp = HALVES[k] == ZT_BF16 ? 0x1p-8 : 0x1p-11;
        ck_assert_int_eq(ops->from_f32(ops, HALVES[k], src, h, n), ZT_OK);
        ck_assert_int_eq(ops->to_f32(ops, HALVES[k], h, back, n), ZT_OK);
        for (size_t i = 0; i < n; i++) {
            if (fabs((double)src[i]) < 0x1p-14) /* fp16 subnormals: absolute error */
                continue;
            double rel = fabs((double)back[i] - (double)src[i]) / fabs((double)src[i]);
            ck_assert_msg(rel <= half_ulp, "element %zu: %a -> %a", i, (double)src[i],
                          (double)back[i]);
        }
    }
    free(src);
    free(back);
    free(copy);
    free(h);
    compute_backend_close(&be);
}
END_TEST

/* ---- add_into ------------------------------------------------------------- */

/* The exact sum in double, rounded once to fp32 (what an fp32 add gives)
 * and once to the working precision. */
START_TEST(add_into_matches_exact_sum)
{
    static const enum zt_dtype types[] = {ZT_F32, ZT_BF16, ZT_F16};
    const enum zt_dtype t = types[_i];
    struct ledger l;
    struct compute_backend be;
    const struct ops_backend *ops = cpu_ops(&be, &l);
    const size_t n = 2049;
    float *a = rand_floats(n, 103, 8.0), *b = rand_floats(n, 104, 8.0);
    for (size_t i = 0; i < n; i += 7)
        b[i] = ldexpf(b[i], -12); /* small addends: rounding matters */
    if (t == ZT_F32) {
        float *d = malloc(n * sizeof *d);
        memcpy(d, a, n * sizeof *d);
        ck_assert_int_eq(ops->add_into(ops, t, d, b, n), ZT_OK);
        for (size_t i = 0; i < n; i++)
            ck_assert(d[i] == (float)((double)a[i] + (double)b[i]));
        free(d);
    } else {
        uint16_t *ha = malloc(n * 2), *hb = malloc(n * 2), *d = malloc(n * 2);
        for (size_t i = 0; i < n; i++) {
            ha[i] = f32_to_half(t, a[i]);
            hb[i] = f32_to_half(t, b[i]);
        }
        memcpy(d, ha, n * 2);
        ck_assert_int_eq(ops->add_into(ops, t, d, hb, n), ZT_OK);
        for (size_t i = 0; i < n; i++) {
            double exact = (double)half_to_f32(t, ha[i]) + (double)half_to_f32(t, hb[i]);
            uint16_t want = f32_to_half(t, (float)exact);
            ck_assert_msg(d[i] == want, "element %zu: %04x, want %04x", i, d[i], want);
        }
        free(ha);
        free(hb);
        free(d);
    }
    free(a);
    free(b);
    compute_backend_close(&be);
}
END_TEST

/* ---- sum_squares and scale ------------------------------------------------ */

START_TEST(sum_squares_matches_double_loop)
{
    static const enum zt_dtype types[] = {ZT_F32, ZT_BF16, ZT_F16};
    const enum zt_dtype t = types[_i];
    struct ledger l;
    struct compute_backend be;
    const struct ops_backend *ops = cpu_ops(&be, &l);
    const size_t n = 10007;
    const double scale = 1.0 / 3.0;
    float *x = rand_floats(n, 105, 2.0);
    void *buf = malloc(n * sizeof(float));
    double want = 0.0, got = -1.0;
    if (t == ZT_F32)
        memcpy(buf, x, n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        if (t != ZT_F32)
            ((uint16_t *)buf)[i] = f32_to_half(t, x[i]);
        double v = (t == ZT_F32 ? (double)x[i] : (double)half_to_f32(t, ((uint16_t *)buf)[i]));
        want += v * v;
    }
    want *= scale * scale;
    ck_assert_int_eq(ops->sum_squares(ops, t, buf, n, scale, &got), ZT_OK);
    ck_assert_msg(fabs(got - want) <= 1e-12 * want, "%.17g, want %.17g", got, want);
    ck_assert_int_eq(ops->sum_squares(ops, t, buf, 0, scale, &got), ZT_OK);
    ck_assert(got == 0.0);
    if (t == ZT_F32) { /* a non-finite element shows */
        ((float *)buf)[17] = INFINITY;
        ck_assert_int_eq(ops->sum_squares(ops, t, buf, n, scale, &got), ZT_OK);
        ck_assert(!isfinite(got));
    }
    free(x);
    free(buf);
    compute_backend_close(&be);
}
END_TEST

START_TEST(scale_multiplies_in_place)
{
    struct ledger l;
    struct compute_backend be;
    const struct ops_backend *ops = cpu_ops(&be, &l);
    const size_t n = 1001;
    const float s = 0.37f;
    float *x = rand_floats(n, 106, 1e3), *orig = rand_floats(n, 106, 1e3);
    ck_assert_int_eq(ops->scale(ops, x, n - 1, s), ZT_OK);
    for (size_t i = 0; i < n - 1; i++)
        ck_assert(x[i] == (float)((double)orig[i] * (double)s)); /* one rounding */
    ck_assert(x[n - 1] == orig[n - 1]);                          /* n respected */
    free(x);
    free(orig);
    compute_backend_close(&be);
}
END_TEST

/* ---- AdamW ---------------------------------------------------------------- */

/* AdamW in double: the textbook update with bias corrections and
 * decoupled weight decay. */
static void adamw_ref(double *p, const double *g, double *m, double *v, size_t n, double decay,
                      const struct optimizer_hparams *hp)
{
    double bc1 = 1.0 - pow(hp->beta1, (double)hp->step);
    double bc2 = 1.0 - pow(hp->beta2, (double)hp->step);
    for (size_t i = 0; i < n; i++) {
        m[i] = hp->beta1 * m[i] + (1.0 - hp->beta1) * g[i];
        v[i] = hp->beta2 * v[i] + (1.0 - hp->beta2) * g[i] * g[i];
        double mhat = m[i] / bc1, vhat = v[i] / bc2;
        p[i] -= hp->lr * hp->weight_decay * decay * p[i] + hp->lr * mhat / (sqrt(vhat) + hp->eps);
    }
}

START_TEST(adamw_matches_double_reference)
{
    const float decay = _i ? 1.0f : 0.0f;
    struct ledger l;
    struct compute_backend be;
    const struct ops_backend *ops = cpu_ops(&be, &l);
    struct optimizer_range r;
    const size_t n = 777;
    float *p = rand_floats(n, 107, 1.0), *m = calloc(n, sizeof(float));
    float *v = calloc(n, sizeof(float));
    double *pd = malloc(n * sizeof(double)), *md = calloc(n, sizeof(double));
    double *vd = calloc(n, sizeof(double)), *gd = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++)
        pd[i] = p[i];
    struct optimizer_hparams hp = {
        .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    for (long step = 1; step <= 5; step++) {
        float *g = rand_floats(n, 200 + (uint64_t)step, 0.5);
        for (size_t i = 0; i < n; i++)
            gd[i] = g[i];
        hp.step = step;
        ck_assert_int_eq(ops->adamw_update(ops, f32_range(&r, p, g, m, v, n, decay), &hp), ZT_OK);
        /* the reference takes the float hyperparameters as given */
        adamw_ref(pd, gd, md, vd, n, decay, &hp);
        free(g);
        for (size_t i = 0; i < n; i++) {
            ck_assert_msg(fabs(p[i] - pd[i]) <= 1e-6 + 1e-5 * fabs(pd[i]),
                          "step %ld element %zu: param %.9g, want %.9g", step, i, (double)p[i],
                          pd[i]);
            ck_assert(fabs(m[i] - md[i]) <= 1e-6 * (1.0 + fabs(md[i])));
            ck_assert(fabs(v[i] - vd[i]) <= 1e-6 * (1.0 + fabs(vd[i])));
        }
    }
    free(p);
    free(m);
    free(v);
    free(pd);
    free(md);
    free(vd);
    free(gd);
    compute_backend_close(&be);
}
END_TEST

/* The table entry is the optimizer's own update, bit for bit. */
/* PyTorch's Adam in double: L2 weight decay added to the gradient. */
static void adam_ref(double *p, const double *g, double *m, double *v, size_t n, double decay,
                     const struct optimizer_hparams *hp)
{
    double bc1 = 1.0 - pow(hp->beta1, (double)hp->step);
    double bc2 = 1.0 - pow(hp->beta2, (double)hp->step);
    for (size_t i = 0; i < n; i++) {
        double gi = g[i] + hp->weight_decay * decay * p[i];
        m[i] = hp->beta1 * m[i] + (1.0 - hp->beta1) * gi;
        v[i] = hp->beta2 * v[i] + (1.0 - hp->beta2) * gi * gi;
        p[i] -= hp->lr * (m[i] / bc1) / (sqrt(v[i] / bc2) + hp->eps);
    }
}

/* Lion in double (Chen et al. 2023, Algorithm 2). Where the interpolation
 * c is within float rounding of 0 the sign may legitimately differ: those
 * elements are marked in `tie` and the caller skips them. */
static void lion_ref(double *p, const double *g, double *m, size_t n, double decay,
                     const struct optimizer_hparams *hp, int *tie)
{
    for (size_t i = 0; i < n; i++) {
        double c = hp->beta1 * m[i] + (1.0 - hp->beta1) * g[i];
        tie[i] |= fabs(c) < 1e-6;
        p[i] -= hp->lr * ((c > 0) - (c < 0) + hp->weight_decay * decay * p[i]);
        m[i] = hp->beta2 * m[i] + (1.0 - hp->beta2) * g[i];
    }
}

/* Adam (loop index 0, 1) and Lion (2, 3), without and with weight decay:
 * five steps of the CPU kernel against the double loops above. */
START_TEST(adam_and_lion_match_double_references)
{
    const int lion = _i >= 2;
    const float decay = _i % 2 ? 1.0f : 0.0f;
    struct ledger l;
    struct compute_backend be;
    const struct ops_backend *ops = cpu_ops(&be, &l);
    struct optimizer_range r;
    const size_t n = 777;
    float *p = rand_floats(n, 117, 1.0), *m = calloc(n, sizeof(float));
    float *v = calloc(n, sizeof(float));
    double *pd = malloc(n * sizeof(double)), *md = calloc(n, sizeof(double));
    double *vd = calloc(n, sizeof(double)), *gd = malloc(n * sizeof(double));
    int *tie = calloc(n, sizeof(int));
    for (size_t i = 0; i < n; i++)
        pd[i] = p[i];
    struct optimizer_hparams hp = {.lr = lion ? 1e-3f : 1e-2f,
                                   .beta1 = 0.9f,
                                   .beta2 = lion ? 0.99f : 0.95f,
                                   .eps = 1e-8f,
                                   .weight_decay = 0.1f};
    for (long step = 1; step <= 5; step++) {
        float *g = rand_floats(n, 300 + (uint64_t)step, 0.5);
        for (size_t i = 0; i < n; i++)
            gd[i] = g[i];
        hp.step = step;
        if (lion) {
            ck_assert_int_eq(ops->lion_update(ops, f32_range(&r, p, g, m, NULL, n, decay), &hp),
                             ZT_OK);
            lion_ref(pd, gd, md, n, decay, &hp, tie);
        } else {
            ck_assert_int_eq(ops->adam_update(ops, f32_range(&r, p, g, m, v, n, decay), &hp),
                             ZT_OK);
            adam_ref(pd, gd, md, vd, n, decay, &hp);
        }
        free(g);
        for (size_t i = 0; i < n; i++) {
            if (tie[i])
                continue;
            ck_assert_msg(fabs(p[i] - pd[i]) <= 1e-6 + 1e-5 * fabs(pd[i]),
                          "%s step %ld element %zu: param %.9g, want %.9g", lion ? "Lion" : "Adam",
                          step, i, (double)p[i], pd[i]);
            ck_assert(fabs(m[i] - md[i]) <= 1e-6 * (1.0 + fabs(md[i])));
            ck_assert(lion || fabs(v[i] - vd[i]) <= 1e-6 * (1.0 + fabs(vd[i])));
        }
    }
    /* the kernel moved the parameters, and ties skipped almost nothing */
    float *p0 = rand_floats(n, 117, 1.0);
    size_t ties = 0;
    for (size_t i = 0; i < n; i++)
        ties += (size_t)tie[i];
    ck_assert(memcmp(p0, p, n * sizeof(float)) != 0);
    ck_assert_uint_lt(ties, n / 100);
    free(p0);
    free(p);
    free(m);
    free(v);
    free(pd);
    free(md);
    free(vd);
    free(gd);
    free(tie);
    compute_backend_close(&be);
}
END_TEST

/* PyTorch's SGD in double (torch.optim.SGD's step). */
static void sgd_ref(double *p, const double *g, double *buf, size_t n, double decay,
                    const struct optimizer_hparams *hp)
{
    for (size_t i = 0; i < n; i++) {
        double gi = g[i] + hp->weight_decay * decay * p[i];
        if (hp->momentum != 0) {
            buf[i] = hp->step == 1 ? gi : hp->momentum * buf[i] + (1.0 - hp->dampening) * gi;
            gi = hp->nesterov ? gi + hp->momentum * buf[i] : buf[i];
        }
        p[i] -= hp->lr * gi;
    }
}

/* SGD without momentum (loop index 0, 1), with momentum and dampening (2,
 * 3) and with Nesterov momentum (4, 5), without and with weight decay. */
START_TEST(sgd_matches_double_reference)
{
    const int variant = _i / 2;
    const float decay = _i % 2 ? 1.0f : 0.0f;
    struct ledger l;
    struct compute_backend be;
    const struct ops_backend *ops = cpu_ops(&be, &l);
    struct optimizer_range r;
    const size_t n = 555;
    float *p = rand_floats(n, 127, 1.0), *buf = calloc(n, sizeof(float));
    double *pd = malloc(n * sizeof(double)), *bd = calloc(n, sizeof(double));
    double *gd = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++)
        pd[i] = p[i];
    struct optimizer_hparams hp = {.lr = 0.05f,
                                   .weight_decay = 0.1f,
                                   .momentum = variant ? 0.9f : 0.0f,
                                   .dampening = variant == 1 ? 0.1f : 0.0f,
                                   .nesterov = variant == 2};
    for (long step = 1; step <= 5; step++) {
        float *g = rand_floats(n, 400 + (uint64_t)step, 0.5);
        for (size_t i = 0; i < n; i++)
            gd[i] = g[i];
        hp.step = step;
        ck_assert_int_eq(
            ops->sgd_update(ops, f32_range(&r, p, g, variant ? buf : NULL, NULL, n, decay), &hp),
            ZT_OK);
        sgd_ref(pd, gd, bd, n, decay, &hp);
        free(g);
        for (size_t i = 0; i < n; i++) {
            ck_assert_msg(fabs(p[i] - pd[i]) <= 1e-6 + 1e-5 * fabs(pd[i]),
                          "variant %d step %ld element %zu: param %.9g, want %.9g", variant, step,
                          i, (double)p[i], pd[i]);
            ck_assert(fabs(buf[i] - bd[i]) <= 1e-6 * (1.0 + fabs(bd[i])));
        }
    }
    free(p);
    free(buf);
    free(pd);
    free(bd);
    free(gd);
    compute_backend_close(&be);
}
END_TEST

/* Hugging Face's Adafactor step on a whole tensor [rows, cols] (a vector
 * when cols == 1), written out in double: row/col hold the factors (a
 * vector: v), m the first moment. */
static void adafactor_ref(double *p, const double *g, double *row, double *col, double *v,
                          double *m, int rows, int cols, double decay,
                          const struct optimizer_hparams *hp)
{
    const size_t n = (size_t)rows * (size_t)cols;
    const double t = (double)hp->step, b2t = 1.0 - pow(t, hp->decay_rate);
    double p2 = 0.0;
    for (size_t i = 0; i < n; i++)
        p2 += p[i] * p[i];
    double lr = hp->lr;
    if (hp->relative_step)
        lr = fmin(hp->warmup_init ? 1e-6 * t : 1e-2, 1.0 / sqrt(t));
    if (hp->scale_parameter)
        lr *= fmax(hp->eps2, sqrt(p2 / (double)n));
    double *u = malloc(n * sizeof(double));
    if (cols > 1) {
        for (int r = 0; r < rows; r++) {
            double mean = 0.0;
            for (int c = 0; c < cols; c++)
                mean += g[(size_t)r * cols + c] * g[(size_t)r * cols + c] + hp->eps;
            row[r] = b2t * row[r] + (1.0 - b2t) * mean / cols;
        }
        for (int c = 0; c < cols; c++) {
            double mean = 0.0;
            for (int r = 0; r < rows; r++)
                mean += g[(size_t)r * cols + c] * g[(size_t)r * cols + c] + hp->eps;
            col[c] = b2t * col[c] + (1.0 - b2t) * mean / rows;
        }
        double row_mean = 0.0;
        for (int r = 0; r < rows; r++)
            row_mean += row[r] / rows;
        for (size_t i = 0; i < n; i++)
            u[i] = g[i] / sqrt(row[i / cols] / row_mean) / sqrt(col[i % cols]);
    } else {
        for (size_t i = 0; i < n; i++) {
            v[i] = b2t * v[i] + (1.0 - b2t) * (g[i] * g[i] + hp->eps);
            u[i] = g[i] / sqrt(v[i]);
        }
    }
    double u2 = 0.0;
    for (size_t i = 0; i < n; i++)
        u2 += u[i] * u[i];
    const double clip = fmax(1.0, sqrt(u2 / (double)n) / hp->clip_threshold);
    for (size_t i = 0; i < n; i++) {
        double step = u[i] / clip * lr;
        if (hp->beta1 > 0.0f) {
            m[i] = hp->beta1 * m[i] + (1.0 - hp->beta1) * step;
            step = m[i];
        }
        p[i] = p[i] - hp->weight_decay * lr * decay * p[i] - step;
    }
    free(u);
}

/* One whole-tensor optimizer step of a tensor cut into `parts` uneven
 * pieces, as ranks hold it under ZeRO: each round's partial stats
 * combined over the pieces by the entry's reduction, every piece owner
 * keeping its own copy of the tensor state. */
static void whole_tensor_step(const struct optimizer_ops *o, const struct ops_backend *ops,
                              float *p, const float *g, void *const *states,
                              const size_t *state_esz, float *copies, int rows, int cols, int parts,
                              const struct optimizer_hparams *hp)
{
    const size_t n = (size_t)rows * (size_t)cols, len = o->tensor_state_len(rows, cols, hp);
    double *stats[OPTIMIZER_MAX_ROUNDS] = {0}, *partial = NULL;
    for (int q = 0; q < o->n_rounds; q++)
        stats[q] = calloc(o->stats_len(q, rows, cols, hp) + 1, sizeof(double));
    for (int q = 0; q <= o->n_rounds; q++) {
        const size_t ns = q < o->n_rounds ? o->stats_len(q, rows, cols, hp) : 0;
        for (int k = 0; k < parts; k++) {
            const size_t lo = n * (size_t)k * (size_t)k / ((size_t)parts * (size_t)parts);
            const size_t hi = n * (size_t)(k + 1) * (size_t)(k + 1) / ((size_t)parts * parts);
            struct optimizer_piece pc = {.rows = rows,
                                         .cols = cols,
                                         .numel = n,
                                         .lo = lo,
                                         .hi = hi,
                                         .params = p + lo,
                                         .grads = g + lo,
                                         .tensor_state = copies + (size_t)k * len,
                                         .decay = 1.0f};
            for (int j = 0; j < o->n_states; j++)
                pc.states[j] = (char *)states[j] + lo * state_esz[j];
            for (int r = 0; r < o->n_rounds; r++)
                pc.stats[r] = stats[r];
            if (q == o->n_rounds) {
                ck_assert_int_eq(o->tensor_apply(ops, &pc, hp), ZT_OK);
                continue;
            }
            /* this piece's partial sums, combined into the totals */
            partial = calloc(ns + 1, sizeof(double));
            pc.stats[q] = partial;
            ck_assert_int_eq(o->tensor_round(ops, q, &pc, hp), ZT_OK);
            for (size_t i = 0; i < ns; i++)
                stats[q][i] = o->round_reduce[q] == OPTIMIZER_REDUCE_MAX
                                  ? fmax(stats[q][i], partial[i])
                                  : stats[q][i] + partial[i];
            free(partial);
        }
    }
    for (int q = 0; q < o->n_rounds; q++)
        free(stats[q]);
}

/* Matrices (factored) and vectors, with and without beta1, lr absolute and
 * relative to the parameters' RMS, and the relative step; 1 and 3 pieces
 * give the double reference's update. */
START_TEST(adafactor_matches_double_reference)
{
    const int cols = _i % 2 ? 1 : 37, rows = 29, parts = _i / 4 % 2 ? 3 : 1;
    const int variant = _i / 2 % 2;
    const size_t n = (size_t)rows * (size_t)cols, len = adafactor_state_len(rows, cols, NULL);
    struct ledger l;
    struct compute_backend be;
    const struct ops_backend *ops = cpu_ops(&be, &l);
    float *p = rand_floats(n, 131, 0.5), *m = calloc(n, sizeof(float));
    float *copies = calloc(len * 3, sizeof(float));
    double *pd = malloc(n * sizeof(double)), *gd = malloc(n * sizeof(double));
    double *md = calloc(n, sizeof(double)), *vd = calloc(n, sizeof(double));
    double *row = calloc((size_t)rows, sizeof(double)), *col = calloc((size_t)cols, sizeof(double));
    for (size_t i = 0; i < n; i++)
        pd[i] = p[i];
    struct optimizer_hparams hp = {.lr = 0.03f,
                                   .eps = 1e-30f,
                                   .eps2 = 1e-3f,
                                   .clip_threshold = 1.0f,
                                   .decay_rate = -0.8f,
                                   .weight_decay = 0.1f,
                                   .beta1 = variant ? 0.9f : 0.0f,
                                   .scale_parameter = !variant,
                                   .relative_step = variant};
    for (long step = 1; step <= 5; step++) {
        /* one step with a gradient far from the others clips */
        float *g = rand_floats(n, 900 + (uint64_t)step, step == 3 ? 50.0 : 0.5);
        for (size_t i = 0; i < n; i++)
            gd[i] = g[i];
        hp.step = step;
        void *states[] = {m};
        const size_t esz[] = {sizeof(float)};
        whole_tensor_step(optimizer_find("adafactor"), ops, p, g, states, esz, copies, rows, cols,
                          parts, &hp);
        adafactor_ref(pd, gd, row, col, vd, md, rows, cols, 1.0, &hp);
        free(g);
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(fabs(p[i] - pd[i]) <= 1e-6 + 1e-5 * fabs(pd[i]),
                          "case %d step %ld element %zu: param %.9g, want %.9g", _i, step, i,
                          (double)p[i], pd[i]);
        for (int k = 0; k < parts; k++)
            for (size_t i = 0; i < len; i++) {
                const double want = cols > 1 ? (i < (size_t)rows ? row[i] : col[i - rows]) : vd[i];
                ck_assert(fabs(copies[(size_t)k * len + i] - want) <= 1e-5 * fabs(want));
            }
    }
    free(p);
    free(m);
    free(copies);
    free(pd);
    free(gd);
    free(md);
    free(vd);
    free(row);
    free(col);
    compute_backend_close(&be);
}
END_TEST

/* bitsandbytes' dynamic map, written out from its definition: for
 * exponent i the midpoints of 2^i (signed; 2^(i+1) unsigned) equal steps
 * of [0.1, 1] times 10^(i-6), negated too when signed, with 0 and 1;
 * ascending. */
static void dynamic_map_ref(int is_signed, double out[256])
{
    int n = 0;
    for (int i = 0; i < 7; i++) {
        const int items = is_signed ? 1 << i : 2 << i;
        for (int k = 0; k < items; k++) {
            const double lo = 0.1 + 0.9 * k / items, hi = 0.1 + 0.9 * (k + 1) / items;
            const double v = (float)(pow(10.0, i - 6) * (lo + hi) / 2);
            out[n++] = v;
            if (is_signed)
                out[n++] = -v;
        }
    }
    out[n++] = 0.0;
    out[n++] = 1.0;
    ck_assert_int_eq(n, 256);
    for (int i = 1; i < n; i++) /* insertion sort */
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            const double t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
}

static int nearest_code(const double map[256], double x)
{
    int best = 0;
    for (int i = 1; i < 256; i++)
        if (fabs(map[i] - x) < fabs(map[best] - x))
            best = i;
    return best;
}

/* AdamW8bit, bitsandbytes' block-wise kernel in double: dequantise with
 * the old absmax, update the moments, step with them (then the decoupled
 * decay), requantise under each block's new absmax, keeping m's sign.
 * Tensors under min_8bit_size take the same step with fp32 moments. */
static void adamw8bit_ref(double *p, const double *g, int *c1, int *c2, double *a1, double *a2,
                          double *m32, double *v32, size_t n, const struct optimizer_hparams *hp)
{
    double map1[256], map2[256];
    dynamic_map_ref(1, map1);
    dynamic_map_ref(0, map2);
    const int quantised = (long)n >= hp->min_8bit_size;
    const double bc1 = 1.0 - pow(hp->beta1, (double)hp->step);
    const double bc2 = sqrt(1.0 - pow(hp->beta2, (double)hp->step));
    double *m = malloc(n * sizeof(double)), *v = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        const double m_old = quantised ? map1[c1[i]] * a1[i / 256] : m32[i];
        const double v_old = quantised ? map2[c2[i]] * a2[i / 256] : v32[i];
        m[i] = hp->beta1 * m_old + (1.0 - hp->beta1) * g[i];
        v[i] = hp->beta2 * v_old + (1.0 - hp->beta2) * g[i] * g[i];
        p[i] += -hp->lr * bc2 / bc1 * m[i] / (sqrt(v[i]) + bc2 * hp->eps);
        p[i] *= 1.0 - hp->lr * hp->weight_decay;
    }
    for (size_t b = 0; quantised && b * 256 < n; b++) {
        double x1 = 0.0, x2 = 0.0;
        for (size_t i = b * 256; i < n && i < (b + 1) * 256; i++) {
            x1 = fmax(x1, fabs(m[i]));
            x2 = fmax(x2, v[i]);
        }
        a1[b] = x1;
        a2[b] = x2;
        for (size_t i = b * 256; i < n && i < (b + 1) * 256; i++) {
            c1[i] = nearest_code(map1, x1 > 0 ? m[i] / x1 : 0.0);
            c2[i] = nearest_code(map2, x2 > 0 ? v[i] / x2 : 0.0);
            if ((map1[c1[i]] < 0) != (m[i] < 0))
                c1[i] += m[i] > 0 ? 1 : -1;
        }
    }
    for (size_t i = 0; !quantised && i < n; i++) {
        m32[i] = m[i];
        v32[i] = v[i];
    }
    free(m);
    free(v);
}

/* A quantised matrix (blocks of 256, the last one short) and a tensor under
 * min_8bit_size, in 1 and 3 pieces: the double reference's parameters and
 * the same codes up to a rare rounding tie; the pieces agree bit for bit
 * with the whole tensor. */
START_TEST(adamw8bit_matches_double_reference)
{
    const int rows = _i < 2 ? 13 : 3, cols = 97;
    const size_t n = (size_t)rows * (size_t)cols;
    const int parts = _i % 2 ? 3 : 1;
    struct ledger l;
    struct compute_backend be;
    const struct ops_backend *ops = cpu_ops(&be, &l);
    const struct optimizer_ops *o = optimizer_find("adamw8bit");
    ck_assert_ptr_nonnull(o);
    struct optimizer_hparams hp = {.lr = 0.01f,
                                   .beta1 = 0.9f,
                                   .beta2 = 0.999f,
                                   .eps = 1e-8f,
                                   .weight_decay = 0.1f,
                                   .min_8bit_size = 1000};
    const size_t len = o->tensor_state_len(rows, cols, &hp);
    ck_assert_uint_eq(len, n >= 1000 ? 2 * ((n + 255) / 256) : 2 * n);
    float *p = rand_floats(n, 77, 0.5), *p1 = malloc(n * sizeof(float));
    memcpy(p1, p, n * sizeof(float));
    unsigned char *c[2] = {calloc(n, 1), calloc(n, 1)}, *c_one[2] = {calloc(n, 1), calloc(n, 1)};
    float *copies = calloc(len * 3, sizeof(float)), *copies_one = calloc(len, sizeof(float));
    const size_t esz[2] = {1, 1};
    double *pd = malloc(n * sizeof(double)), *gd = malloc(n * sizeof(double));
    int *c1 = calloc(n, sizeof(int)), *c2 = calloc(n, sizeof(int));
    double *a1 = calloc(n, sizeof(double)), *a2 = calloc(n, sizeof(double));
    double *m32 = calloc(n, sizeof(double)), *v32 = calloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++)
        pd[i] = p[i];
    int code_mismatches = 0;
    for (long step = 1; step <= 5; step++) {
        float *g = rand_floats(n, 500 + (uint64_t)step, 0.3);
        for (size_t i = 0; i < n; i++)
            gd[i] = g[i];
        hp.step = step;
        whole_tensor_step(o, ops, p, g, (void *const *)c, esz, copies, rows, cols, parts, &hp);
        whole_tensor_step(o, ops, p1, g, (void *const *)c_one, esz, copies_one, rows, cols, 1, &hp);
        adamw8bit_ref(pd, gd, c1, c2, a1, a2, m32, v32, n, &hp);
        free(g);
        ck_assert(memcmp(p, p1, n * sizeof(float)) == 0);
        ck_assert(memcmp(c[0], c_one[0], n) == 0 && memcmp(c[1], c_one[1], n) == 0);
        for (int k = 0; k < parts; k++)
            ck_assert(memcmp(copies + (size_t)k * len, copies_one, len * sizeof(float)) == 0);
        for (size_t i = 0; i < n; i++) {
            ck_assert_msg(fabs(p[i] - pd[i]) <= 1e-5 * (1.0 + fabs(pd[i])),
                          "case %d step %ld element %zu: param %.9g, want %.9g", _i, step, i,
                          (double)p[i], pd[i]);
            code_mismatches += n >= 1000 && (c[0][i] != c1[i] || c[1][i] != c2[i]);
        }
    }
    ck_assert_int_le(code_mismatches, 5);
    for (int k = 0; k < 2; k++) {
        free(c[k]);
        free(c_one[k]);
    }
    free(p);
    free(p1);
    free(copies);
    free(copies_one);
    free(pd);
    free(gd);
    free(c1);
    free(c2);
    free(a1);
    free(a2);
    free(m32);
    free(v32);
    compute_backend_close(&be);
}
END_TEST

START_TEST(adamw_entry_is_adamw_update)
{
    struct ledger l;
    struct compute_backend be;
    const struct ops_backend *ops = cpu_ops(&be, &l);
    const size_t n = 301;
    float *p1 = rand_floats(n, 108, 1.0), *p2 = rand_floats(n, 108, 1.0);
    float *g = rand_floats(n, 109, 1.0);
    float *m1 = calloc(n, sizeof(float)), *m2 = calloc(n, sizeof(float));
    float *v1 = calloc(n, sizeof(float)), *v2 = calloc(n, sizeof(float));
    struct optimizer_hparams hp = {.lr = 3e-4f,
                                   .beta1 = 0.9f,
                                   .beta2 = 0.999f,
                                   .eps = 1e-8f,
                                   .weight_decay = 0.01f,
                                   .step = 3};
    struct optimizer_range r;
    ck_assert_int_eq(ops->adamw_update(ops, f32_range(&r, p1, g, m1, v1, n, 1.0f), &hp), ZT_OK);
    adamw_update(p2, g, m2, v2, n, 1.0f, &hp);
    ck_assert(memcmp(p1, p2, n * sizeof(float)) == 0);
    ck_assert(memcmp(m1, m2, n * sizeof(float)) == 0);
    ck_assert(memcmp(v1, v2, n * sizeof(float)) == 0);
    free(p1);
    free(p2);
    free(g);
    free(m1);
    free(m2);
    free(v1);
    free(v2);
    compute_backend_close(&be);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("backend");
    TCase *tc = testutil_tcase(s, "select", 60);
    tcase_add_test(tc, auto_without_a_driver_maps_no_cuda);
    tcase_add_test(tc, cpu_selects_cpu);
    tcase_add_test(tc, auto_selects_the_gpu_if_usable_else_cpu);
    tcase_add_test(tc, cuda_without_a_device_is_refused_with_a_reason);
    tcase_add_test(tc, the_binary_refuses_cuda_without_a_gpu);
    tcase_add_test(tc, unknown_name_is_a_config_error);
    tcase_add_test(tc, bundle_memory_is_counted);
    tc = testutil_tcase(s, "casts", 60);
    tcase_add_loop_test(tc, from_f32_matches_half_h, 0, 2);
    tcase_add_loop_test(tc, to_f32_round_trips_every_pattern, 0, 2);
    tcase_add_test(tc, casts_round_trip_floats);
    tc = testutil_tcase(s, "reduce", 60);
    tcase_add_loop_test(tc, add_into_matches_exact_sum, 0, 3);
    tcase_add_loop_test(tc, sum_squares_matches_double_loop, 0, 3);
    tcase_add_test(tc, scale_multiplies_in_place);
    tc = testutil_tcase(s, "adamw", 60);
    tcase_add_loop_test(tc, adamw_matches_double_reference, 0, 2);
    tcase_add_test(tc, adamw_entry_is_adamw_update);
    tcase_add_loop_test(tc, adam_and_lion_match_double_references, 0, 4);
    tcase_add_loop_test(tc, adafactor_matches_double_reference, 0, 8);
    tcase_add_loop_test(tc, adamw8bit_matches_double_reference, 0, 4);
    tcase_add_loop_test(tc, sgd_matches_double_reference, 0, 6);
    return testutil_run_suite(s, 0);
}
