/* tests/test_ops16.c — the CPU ops' 16-bit forms (t = ZT_BF16, ZT_F16)
 * against their own fp32 forms.
 *
 * worker/ops.h: a 16-bit op computes in fp32 and rounds each value it
 * stores once, so its result is the fp32 op's on the widened inputs,
 * rounded to t, bit for bit, and its float outputs (statistics, losses,
 * row statistics, weight gradients) are the fp32 op's exactly. The matrix
 * products (matmul, lora) and attention are held to OPS_16BIT_GEMM_TOL(t)
 * relative to the largest magnitude of the fp32 result instead. So every
 * check runs an op twice on the same values, typed and widened, and the
 * fp32 run is the reference (tests/test_ops.c holds that one to double
 * references).
 *
 * Inputs are normal draws rounded to t, so both runs see the same values.
 * Backward ops accumulate: both runs start from the same nonzero gradients
 * (t-representable for typed ones), so a 16-bit form that rounded the
 * gradient before adding it, or dropped the old value, is caught.
 *
 * The ops run through an opened table (ops_cpu_open) so GEMM kernels are
 * cached, at 1 and at 3 threads (uneven splits of the rows the 16-bit
 * forms stage per thread). matmul and lora need a native 16-bit GEMM
 * kernel (fp16 has none on the CPU; bf16 only with AVX-512): without one
 * they return ZT_ERR_UNSUPPORTED with a message, which is accepted, so the
 * test never depends on the kernel this CPU gets. Attention's 16-bit forms
 * widen their operands where there is no kernel, and must always run.
 */
#include "testutil.h"

#include "common/half.h"
#include "common/rng.h"
#include "common/status.h"
#include "worker/ops.h"
#include "worker/precision.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct ops_backend *ops;

static void open_ops(void)
{
    ck_assert_msg(ops_cpu_open(&ops) == ZT_OK, "ops_cpu_open: %s", zt_error_message());
}

static void close_ops(void)
{
    ops_cpu_close(ops);
    ops = NULL;
}

/* Loop index i: bf16 when even, fp16 when odd; 1 thread, or 3 when bit 1
 * is set. */
static enum zt_dtype start(int i)
{
    ops_cpu_set_threads(i / 2 % 2 ? 3 : 1);
    return i % 2 ? ZT_F16 : ZT_BF16;
}

static const char *tname(enum zt_dtype t)
{
    return zt_precision_name(t);
}

static uint16_t round_t(enum zt_dtype t, float x)
{
    return t == ZT_BF16 ? zt_f32_to_bf16(x) : zt_f32_to_f16(x);
}

static float widen_t(enum zt_dtype t, uint16_t h)
{
    return t == ZT_BF16 ? zt_bf16_to_f32(h) : zt_f16_to_f32(h);
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

static void ok(zt_status s, const char *op)
{
    ck_assert_msg(s == ZT_OK, "%s: %s: %s", op, zt_status_str(s), zt_error_message());
}

/* Whether a 16-bit matrix product ran: ZT_OK, or ZT_ERR_UNSUPPORTED with a
 * message (no kernel for t here); any other status fails. The caller
 * clears the error before the call so an old message cannot pass. */
static int gemm_ran(zt_status s, const char *op, enum zt_dtype t)
{
    if (s == ZT_OK)
        return 1;
    ck_assert_msg(s == ZT_ERR_UNSUPPORTED, "%s (%s): %s: %s", op, tname(t), zt_status_str(s),
                  zt_error_message());
    ck_assert_msg(zt_error_message()[0] != '\0', "%s (%s): ZT_ERR_UNSUPPORTED without a message",
                  op, tname(t));
    zt_error_clear();
    return 0;
}

/* A tensor as the 16-bit op sees it (h, type t) and as the fp32 op sees it
 * (f, h widened exactly). Outputs: each op writes its own copy. */
struct ten {
    enum zt_dtype t;
    int n;
    uint16_t *h;
    float *f;
};

/* Normal(offset, scale^2) draws rounded to t. */
static struct ten ten_randn(enum zt_dtype t, int n, uint64_t key, double scale, double offset)
{
    struct ten x = {t, n, xmalloc((size_t)n * 2), xmalloc((size_t)n * 4)};
    for (int i = 0; i < n; i++)
        x.f[i] = (float)(offset + scale * rng_normal(key, (uint64_t)i));
    precision_from_f32(t, x.f, x.h, (size_t)n);
    precision_to_f32(t, x.h, x.f, (size_t)n);
    return x;
}

/* Garbage a forward must overwrite. */
static struct ten ten_out(enum zt_dtype t, int n)
{
    struct ten x = {t, n, xmalloc((size_t)n * 2), xmalloc((size_t)n * 4)};
    for (int i = 0; i < n; i++) {
        x.h[i] = 0x7e7e;
        x.f[i] = NAN;
    }
    return x;
}

/* What a 16-bit op stored, as the next op's input for both runs. */
static struct ten ten_from(enum zt_dtype t, const uint16_t *h, int n)
{
    struct ten x = {t, n, xmalloc((size_t)n * 2), xmalloc((size_t)n * 4)};
    memcpy(x.h, h, (size_t)n * 2);
    precision_to_f32(t, x.h, x.f, (size_t)n);
    return x;
}

static void ten_free(struct ten *x)
{
    free(x->h);
    free(x->f);
    x->h = NULL;
    x->f = NULL;
}

/* A float output twice with the same start: a for the 16-bit run, b for
 * the fp32 run. */
struct fpair {
    int n;
    float *a, *b;
};

static struct fpair fpair_randn(int n, uint64_t key, double scale)
{
    struct fpair p = {n, xmalloc((size_t)n * 4), xmalloc((size_t)n * 4)};
    for (int i = 0; i < n; i++)
        p.a[i] = p.b[i] = (float)(scale * rng_normal(key, (uint64_t)i));
    return p;
}

static void fpair_free(struct fpair *p)
{
    free(p->a);
    free(p->b);
}

static int32_t *random_ids(int n, int V, uint64_t key)
{
    int32_t *ids = xmalloc((size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)(rng_u64(key, (uint64_t)i) % (uint64_t)V);
    return ids;
}

/* Distance in representable values between two 16-bit numbers. */
static int ulps(uint16_t a, uint16_t b)
{
    int sa = a & 0x8000 ? -(int)(a & 0x7fff) : (int)(a & 0x7fff);
    int sb = b & 0x8000 ? -(int)(b & 0x7fff) : (int)(b & 0x7fff);
    return abs(sa - sb);
}

/* got[i] == round_t(want[i]) bit for bit: the non-GEMM ops' contract. */
static void expect_rounded(const char *what, enum zt_dtype t, const uint16_t *got,
                           const float *want, int n)
{
    int bad = 0, first = -1, worst = 0;
    for (int i = 0; i < n; i++) {
        uint16_t w = round_t(t, want[i]);
        if (got[i] == w)
            continue;
        bad++;
        if (first < 0)
            first = i;
        if (ulps(got[i], w) > worst)
            worst = ulps(got[i], w);
    }
    if (bad)
        ck_abort_msg("%s (%s): %d of %d values are not the fp32 op's rounded (worst %d ulp); "
                     "first [%d]: got %.9g (0x%04x), want %.9g (0x%04x, fp32 %.9g)",
                     what, tname(t), bad, n, worst, first, (double)widen_t(t, got[first]),
                     got[first], (double)widen_t(t, round_t(t, want[first])),
                     round_t(t, want[first]), (double)want[first]);
}

/* Float outputs equal the fp32 op's bit for bit. */
static void expect_same(const char *what, enum zt_dtype t, const float *got, const float *want,
                        int n)
{
    int bad = 0, first = -1;
    double worst = 0.0, scale = 0.0;
    for (int i = 0; i < n; i++) {
        scale = fmax(scale, fabs(want[i]));
        if (memcmp(&got[i], &want[i], sizeof(float)) == 0)
            continue;
        bad++;
        if (first < 0)
            first = i;
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= worst))
            worst = e;
    }
    if (bad)
        ck_abort_msg("%s (%s): %d of %d floats differ from the fp32 op's (worst |diff| %.3g, "
                     "max |want| %.3g); first [%d]: got %.9g, want %.9g",
                     what, tname(t), bad, n, worst, scale, first, (double)got[first],
                     (double)want[first]);
}

/* |got - want| <= OPS_16BIT_GEMM_TOL(t) * max |want|: the products' bound. */
static void expect_close(const char *what, enum zt_dtype t, const float *got, const float *want,
                         int n)
{
    double scale = 0.0, worst = 0.0, tol = OPS_16BIT_GEMM_TOL(t);
    int at = 0;
    for (int i = 0; i < n; i++) {
        scale = fmax(scale, fabs(want[i]));
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= worst)) { /* also catches NaN */
            worst = e;
            at = i;
        }
    }
    ck_assert_msg(scale > 0.0, "%s (%s): the fp32 result is all zero, test is vacuous", what,
                  tname(t));
    ck_assert_msg(worst <= tol * scale,
                  "%s (%s): error %.3g at [%d] (got %.9g, want %.9g), max |want| %.3g, "
                  "relative %.3g > tol %.1g",
                  what, tname(t), worst, at, (double)got[at], (double)want[at], scale,
                  worst / scale, tol);
}

static void expect_close_t(const char *what, enum zt_dtype t, const uint16_t *got,
                           const float *want, int n)
{
    float *g = xmalloc((size_t)n * 4);
    precision_to_f32(t, got, g, (size_t)n);
    expect_close(what, t, g, want, n);
    free(g);
}

#define NSIZES(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- encoder, and its vocabulary-parallel form ---- */

enum { EN_B = 3, EN_T = 5, EN_C = 40, EN_V = 11, EN_LO = 4, EN_VP = 5 };

/* B*T > V: tokens repeat, so dwte rows take several additions. The first
 * four lie outside, at both ends of, and past the slice [LO, LO + VP). */
static int32_t *enc_tokens(void)
{
    int32_t *tok = random_ids(EN_B * EN_T, EN_V, 201);
    tok[0] = 0;
    tok[1] = EN_LO;
    tok[2] = EN_LO + EN_VP - 1;
    tok[3] = EN_V - 1;
    return tok;
}

/* Loop bit 2 (i / 4): the vocabulary-parallel form on the slice. */
START_TEST(encoder_forward_16bit_is_rounded_fp32)
{
    enum zt_dtype t = start(_i);
    int vocab = _i / 4, rows = vocab ? EN_VP : EN_V, n = EN_B * EN_T * EN_C;
    int32_t *tok = enc_tokens();
    struct ten wte = ten_randn(t, rows * EN_C, 202, 1.0, 0.0);
    struct ten wpe = ten_randn(t, EN_T * EN_C, 203, 0.5, 0.0);
    for (int pos = 0; pos < 2; pos++) {
        struct ten out = ten_out(t, n);
        const void *p16 = pos ? wpe.h : NULL, *p32 = pos ? wpe.f : NULL;
        if (vocab) {
            ok(ops->encoder_forward_vocab(ops, t, out.h, tok, wte.h, p16, EN_B, EN_T, EN_C, EN_LO,
                                          EN_VP),
               "encoder_forward_vocab");
            ok(ops->encoder_forward_vocab(ops, ZT_F32, out.f, tok, wte.f, p32, EN_B, EN_T, EN_C,
                                          EN_LO, EN_VP),
               "encoder_forward_vocab fp32");
        } else {
            ok(ops->encoder_forward(ops, t, out.h, tok, wte.h, p16, EN_B, EN_T, EN_C),
               "encoder_forward");
            ok(ops->encoder_forward(ops, ZT_F32, out.f, tok, wte.f, p32, EN_B, EN_T, EN_C),
               "encoder_forward fp32");
        }
        expect_rounded(
            testutil_fmt("encoder%s out%s", vocab ? "_vocab" : "", pos ? "" : " (no wpe)"), t,
            out.h, out.f, n);
        ten_free(&out);
    }
    ten_free(&wte);
    ten_free(&wpe);
    free(tok);
}
END_TEST

START_TEST(encoder_backward_16bit_is_fp32)
{
    enum zt_dtype t = start(_i);
    int vocab = _i / 4, rows = vocab ? EN_VP : EN_V, n = EN_B * EN_T * EN_C;
    int32_t *tok = enc_tokens();
    struct ten dout = ten_randn(t, n, 211, 1.0, 0.0);
    for (int pos = 0; pos < 2; pos++) {
        struct fpair dwte = fpair_randn(rows * EN_C, 212, 0.3);
        struct fpair dwpe = fpair_randn(EN_T * EN_C, 213, 0.3);
        if (vocab) {
            ok(ops->encoder_backward_vocab(ops, t, dwte.a, pos ? dwpe.a : NULL, dout.h, tok, EN_B,
                                           EN_T, EN_C, EN_LO, EN_VP),
               "encoder_backward_vocab");
            ok(ops->encoder_backward_vocab(ops, ZT_F32, dwte.b, pos ? dwpe.b : NULL, dout.f, tok,
                                           EN_B, EN_T, EN_C, EN_LO, EN_VP),
               "encoder_backward_vocab fp32");
        } else {
            ok(ops->encoder_backward(ops, t, dwte.a, pos ? dwpe.a : NULL, dout.h, tok, EN_B, EN_T,
                                     EN_C),
               "encoder_backward");
            ok(ops->encoder_backward(ops, ZT_F32, dwte.b, pos ? dwpe.b : NULL, dout.f, tok, EN_B,
                                     EN_T, EN_C),
               "encoder_backward fp32");
        }
        const char *v = vocab ? "_vocab" : "";
        expect_same(testutil_fmt("encoder%s dwte%s", v, pos ? "" : " (no dwpe)"), t, dwte.a, dwte.b,
                    dwte.n);
        expect_same(testutil_fmt("encoder%s dwpe%s", v, pos ? "" : " (untouched)"), t, dwpe.a,
                    dwpe.b, dwpe.n);
        fpair_free(&dwte);
        fpair_free(&dwpe);
    }
    ten_free(&dout);
    free(tok);
}
END_TEST

/* ---- layernorm and rmsnorm: N rows, C not a multiple of 16 ---- */

enum { LN_N = 37, LN_C = 150, RMS_C = 200 };

START_TEST(layernorm_16bit_is_rounded_fp32)
{
    enum zt_dtype t = start(_i);
    const int N = LN_N, C = LN_C;
    struct ten x = ten_randn(t, N * C, 301, 1.5, 0.3), w = ten_randn(t, C, 302, 0.2, 1.0),
               b = ten_randn(t, C, 303, 0.1, 0.0), out = ten_out(t, N * C);
    struct fpair mean = fpair_randn(N, 304, 1.0), rstd = fpair_randn(N, 305, 1.0);
    ok(ops->layernorm_forward(ops, t, out.h, mean.a, rstd.a, x.h, w.h, b.h, N, C),
       "layernorm_forward");
    ok(ops->layernorm_forward(ops, ZT_F32, out.f, mean.b, rstd.b, x.f, w.f, b.f, N, C),
       "layernorm_forward fp32");
    expect_rounded("layernorm out", t, out.h, out.f, N * C);
    expect_same("layernorm mean", t, mean.a, mean.b, N);
    expect_same("layernorm rstd", t, rstd.a, rstd.b, N);

    /* The backward reads the 16-bit forward's statistics in both runs. */
    struct ten dout = ten_randn(t, N * C, 306, 1.0, 0.0);
    for (int grads = 0; grads < 2; grads++) {
        struct ten dx = ten_randn(t, N * C, 307, 0.3, 0.0);
        struct fpair dw = fpair_randn(C, 308, 0.3), db = fpair_randn(C, 309, 0.3);
        ok(ops->layernorm_backward(ops, t, dx.h, grads ? dw.a : NULL, grads ? db.a : NULL, dout.h,
                                   x.h, w.h, mean.a, rstd.a, N, C),
           "layernorm_backward");
        ok(ops->layernorm_backward(ops, ZT_F32, dx.f, grads ? dw.b : NULL, grads ? db.b : NULL,
                                   dout.f, x.f, w.f, mean.a, rstd.a, N, C),
           "layernorm_backward fp32");
        expect_rounded(grads ? "layernorm dinp" : "layernorm dinp (frozen)", t, dx.h, dx.f, N * C);
        expect_same("layernorm dweight", t, dw.a, dw.b, C);
        expect_same("layernorm dbias", t, db.a, db.b, C);
        ten_free(&dx);
        fpair_free(&dw);
        fpair_free(&db);
    }
    struct ten *all[] = {&x, &w, &b, &out, &dout};
    for (int k = 0; k < NSIZES(all); k++)
        ten_free(all[k]);
    fpair_free(&mean);
    fpair_free(&rstd);
}
END_TEST

START_TEST(rmsnorm_16bit_is_rounded_fp32)
{
    enum zt_dtype t = start(_i);
    const int N = LN_N, C = RMS_C;
    const float eps = 1e-5f;
    struct ten x = ten_randn(t, N * C, 311, 1.0, 0.0), w = ten_randn(t, C, 312, 0.2, 1.0),
               out = ten_out(t, N * C);
    struct fpair rstd = fpair_randn(N, 313, 1.0);
    ok(ops->rmsnorm_forward(ops, t, out.h, rstd.a, x.h, w.h, N, C, eps), "rmsnorm_forward");
    ok(ops->rmsnorm_forward(ops, ZT_F32, out.f, rstd.b, x.f, w.f, N, C, eps),
       "rmsnorm_forward fp32");
    expect_rounded("rmsnorm out", t, out.h, out.f, N * C);
    expect_same("rmsnorm rstd", t, rstd.a, rstd.b, N);

    struct ten dout = ten_randn(t, N * C, 314, 1.0, 0.0);
    for (int grads = 0; grads < 2; grads++) {
        struct ten dx = ten_randn(t, N * C, 315, 0.3, 0.0);
        struct fpair dw = fpair_randn(C, 316, 0.3);
        ok(ops->rmsnorm_backward(ops, t, dx.h, grads ? dw.a : NULL, dout.h, x.h, w.h, rstd.a, N, C),
           "rmsnorm_backward");
        ok(ops->rmsnorm_backward(ops, ZT_F32, dx.f, grads ? dw.b : NULL, dout.f, x.f, w.f, rstd.a,
                                 N, C),
           "rmsnorm_backward fp32");
        expect_rounded(grads ? "rmsnorm dinp" : "rmsnorm dinp (frozen)", t, dx.h, dx.f, N * C);
        expect_same("rmsnorm dweight", t, dw.a, dw.b, C);
        ten_free(&dx);
        fpair_free(&dw);
    }
    ten_free(&x);
    ten_free(&w);
    ten_free(&out);
    ten_free(&dout);
    fpair_free(&rstd);
}
END_TEST

/* ---- matmul and lora: the bound, or ZT_ERR_UNSUPPORTED ---- */

enum { MM_N = 37, MM_C = 72, MM_OC = 50 };

START_TEST(matmul_forward_16bit_within_tolerance)
{
    enum zt_dtype t = start(_i);
    const int N = MM_N, C = MM_C, OC = MM_OC;
    struct ten x = ten_randn(t, N * C, 401, 1.0, 0.0),
               w = ten_randn(t, OC * C, 402, 1.0 / sqrt((double)C), 0.0),
               b = ten_randn(t, OC, 403, 0.5, 0.0);
    for (int bias = 0; bias < 2; bias++) {
        struct ten out = ten_out(t, N * OC);
        zt_error_clear();
        if (gemm_ran(ops->matmul_forward(ops, t, out.h, x.h, w.h, bias ? b.h : NULL, N, C, OC),
                     "matmul_forward", t)) {
            ok(ops->matmul_forward(ops, ZT_F32, out.f, x.f, w.f, bias ? b.f : NULL, N, C, OC),
               "matmul_forward fp32");
            expect_close_t(bias ? "matmul out" : "matmul out (no bias)", t, out.h, out.f, N * OC);
        }
        ten_free(&out);
    }
    ten_free(&x);
    ten_free(&w);
    ten_free(&b);
}
END_TEST

/* Every gradient, then each of dinp, dweight, dbias skipped (NULL). */
START_TEST(matmul_backward_16bit_within_tolerance)
{
    enum zt_dtype t = start(_i);
    const int N = MM_N, C = MM_C, OC = MM_OC;
    static const char *const variant[] = {"", " (no dinp)", " (no dweight)", " (no dbias)"};
    struct ten x = ten_randn(t, N * C, 411, 1.0, 0.0),
               w = ten_randn(t, OC * C, 412, 1.0 / sqrt((double)C), 0.0),
               dout = ten_randn(t, N * OC, 413, 1.0, 0.0);
    for (int v = 0; v < 4; v++) {
        struct ten dx = ten_randn(t, N * C, 414, 0.3, 0.0);
        struct fpair dw = fpair_randn(OC * C, 415, 0.3), db = fpair_randn(OC, 416, 0.3);
        int has_dx = v != 1, has_dw = v != 2, has_db = v != 3;
        zt_error_clear();
        if (gemm_ran(ops->matmul_backward(ops, t, has_dx ? dx.h : NULL, has_dw ? dw.a : NULL,
                                          has_db ? db.a : NULL, dout.h, x.h, w.h, N, C, OC),
                     "matmul_backward", t)) {
            ok(ops->matmul_backward(ops, ZT_F32, has_dx ? dx.f : NULL, has_dw ? dw.b : NULL,
                                    has_db ? db.b : NULL, dout.f, x.f, w.f, N, C, OC),
               "matmul_backward fp32");
            expect_close_t(testutil_fmt("matmul dinp%s", variant[v]), t, dx.h, dx.f, N * C);
            expect_close(testutil_fmt("matmul dweight%s", variant[v]), t, dw.a, dw.b, OC * C);
            expect_close(testutil_fmt("matmul dbias%s", variant[v]), t, db.a, db.b, OC);
        }
        ten_free(&dx);
        fpair_free(&dw);
        fpair_free(&db);
    }
    ten_free(&x);
    ten_free(&w);
    ten_free(&dout);
}
END_TEST

/* q_proj's slice of a wider output: rows LR_LDO apart, LR_OC used. */
enum { LR_N = 20, LR_C = 48, LR_R = 4, LR_OC = 30, LR_LDO = 44 };
static const float LR_SCALE = 1.75f;

/* The slice's columns of rows ld apart, contiguous. */
static float *slice_cols(const float *x, int rows, int ld, int cols)
{
    float *s = xmalloc((size_t)rows * cols * 4);
    for (int n = 0; n < rows; n++)
        memcpy(s + (size_t)n * cols, x + (size_t)n * ld, (size_t)cols * 4);
    return s;
}

START_TEST(lora_forward_16bit_within_tolerance)
{
    enum zt_dtype t = start(_i);
    const int N = LR_N, C = LR_C, r = LR_R, OC = LR_OC, ldo = LR_LDO;
    struct ten x = ten_randn(t, N * C, 501, 1.0, 0.0),
               A = ten_randn(t, r * C, 502, 1.0 / sqrt((double)C), 0.0),
               B = ten_randn(t, OC * r, 503, 1.0 / sqrt((double)r), 0.0),
               out = ten_randn(t, N * ldo, 504, 0.5, 0.0);
    uint16_t *before = xmalloc((size_t)N * ldo * 2);
    memcpy(before, out.h, (size_t)N * ldo * 2);
    /* u's size as fp32: enough whatever type the op keeps it in. */
    float *u16 = xmalloc((size_t)N * r * 4), *u32 = xmalloc((size_t)N * r * 4);
    zt_error_clear();
    if (gemm_ran(ops->lora_forward(ops, t, out.h, ldo, u16, x.h, A.h, B.h, LR_SCALE, N, C, r, OC),
                 "lora_forward", t)) {
        ok(ops->lora_forward(ops, ZT_F32, out.f, ldo, u32, x.f, A.f, B.f, LR_SCALE, N, C, r, OC),
           "lora_forward fp32");
        float *got = xmalloc((size_t)N * ldo * 4);
        precision_to_f32(t, out.h, got, (size_t)N * ldo);
        float *g = slice_cols(got, N, ldo, OC), *w = slice_cols(out.f, N, ldo, OC);
        expect_close("lora out", t, g, w, N * OC);
        for (int n = 0; n < N; n++)
            for (int c = OC; c < ldo; c++)
                ck_assert_msg(out.h[n * ldo + c] == before[n * ldo + c],
                              "lora_forward (%s) changed [%d,%d] past the slice: 0x%04x -> 0x%04x",
                              tname(t), n, c, before[n * ldo + c], out.h[n * ldo + c]);
        free(got);
        free(g);
        free(w);
    }
    free(before);
    free(u16);
    free(u32);
    ten_free(&x);
    ten_free(&A);
    ten_free(&B);
    ten_free(&out);
}
END_TEST

START_TEST(lora_backward_16bit_within_tolerance)
{
    enum zt_dtype t = start(_i);
    const int N = LR_N, C = LR_C, r = LR_R, OC = LR_OC, ldo = LR_LDO;
    struct ten x = ten_randn(t, N * C, 511, 1.0, 0.0),
               A = ten_randn(t, r * C, 512, 1.0 / sqrt((double)C), 0.0),
               B = ten_randn(t, OC * r, 513, 1.0 / sqrt((double)r), 0.0),
               dout = ten_randn(t, N * ldo, 514, 1.0, 0.0);
    /* NaN past the slice: another layer's gradient, never to be read. */
    for (int n = 0; n < N; n++)
        for (int c = OC; c < ldo; c++) {
            dout.h[n * ldo + c] = t == ZT_BF16 ? 0x7fc0 : 0x7e00;
            dout.f[n * ldo + c] = NAN;
        }
    float *s16 = xmalloc(2 * (size_t)N * r * 4), *s32 = xmalloc(2 * (size_t)N * r * 4);
    for (int has_dx = 0; has_dx < 2; has_dx++) {
        struct ten dx = ten_randn(t, N * C, 515, 0.3, 0.0);
        struct fpair dA = fpair_randn(r * C, 516, 0.3), dB = fpair_randn(OC * r, 517, 0.3);
        zt_error_clear();
        if (gemm_ran(ops->lora_backward(ops, t, has_dx ? dx.h : NULL, dA.a, dB.a, s16, dout.h, ldo,
                                        x.h, A.h, B.h, LR_SCALE, N, C, r, OC),
                     "lora_backward", t)) {
            ok(ops->lora_backward(ops, ZT_F32, has_dx ? dx.f : NULL, dA.b, dB.b, s32, dout.f, ldo,
                                  x.f, A.f, B.f, LR_SCALE, N, C, r, OC),
               "lora_backward fp32");
            const char *v = has_dx ? "" : " (no dinp)";
            expect_close_t(testutil_fmt("lora dinp%s", v), t, dx.h, dx.f, N * C);
            expect_close(testutil_fmt("lora dA%s", v), t, dA.a, dA.b, r * C);
            expect_close(testutil_fmt("lora dB%s", v), t, dB.a, dB.b, OC * r);
        }
        ten_free(&dx);
        fpair_free(&dA);
        fpair_free(&dB);
    }
    free(s16);
    free(s32);
    ten_free(&x);
    ten_free(&A);
    ten_free(&B);
    ten_free(&dout);
}
END_TEST

/* ---- attention: causal, grouped-query and not; T past the 64-row tile
 * and (300) past the 256-column key tile ---- */

static const int ATT16[][4] = {{1, 70, 4, 2}, {2, 70, 4, 4}, {1, 200, 4, 2}, {1, 300, 4, 4}};
enum { ATT_HS = 16 }; /* B T NH NKV above */

/* Loop index i: case i / 2 (so 1 or 3 threads alternate with the cases). */
START_TEST(attention_16bit_within_tolerance)
{
    enum zt_dtype t = start(_i);
    const int *a = ATT16[_i / 2];
    const int B = a[0], T = a[1], NH = a[2], NKV = a[3], hs = ATT_HS;
    const int nqkv = B * T * (NH + 2 * NKV) * hs, nout = B * T * NH * hs, nlse = B * NH * T;
    struct ten qkv = ten_randn(t, nqkv, 601, 1.0, 0.0), out = ten_out(t, nout);
    struct fpair lse = fpair_randn(nlse, 602, 1.0);
    ok(ops->attention_forward(ops, t, out.h, lse.a, qkv.h, B, T, NH, NKV, hs), "attention_forward");
    ok(ops->attention_forward(ops, ZT_F32, out.f, lse.b, qkv.f, B, T, NH, NKV, hs),
       "attention_forward fp32");
    const char *c = testutil_fmt("B=%d T=%d NH=%d NKV=%d", B, T, NH, NKV);
    expect_close_t(testutil_fmt("attention out, %s", c), t, out.h, out.f, nout);
    expect_close(testutil_fmt("attention lse, %s", c), t, lse.a, lse.b, nlse);

    /* Both backwards read the 16-bit forward's out and lse. */
    struct ten o = ten_from(t, out.h, nout), dout = ten_randn(t, nout, 603, 1.0, 0.0),
               dqkv = ten_randn(t, nqkv, 604, 0.05, 0.0);
    ok(ops->attention_backward(ops, t, dqkv.h, dout.h, qkv.h, o.h, lse.a, B, T, NH, NKV, hs),
       "attention_backward");
    ok(ops->attention_backward(ops, ZT_F32, dqkv.f, dout.f, qkv.f, o.f, lse.a, B, T, NH, NKV, hs),
       "attention_backward fp32");
    expect_close_t(testutil_fmt("attention dqkv, %s", c), t, dqkv.h, dqkv.f, nqkv);
    ten_free(&qkv);
    ten_free(&out);
    ten_free(&o);
    ten_free(&dout);
    ten_free(&dqkv);
    fpair_free(&lse);
}
END_TEST

/* The 16-bit forms on 1 and 3 threads: out, lse and dqkv the same, bit
 * for bit (each work item runs in a fixed order on one thread). */
START_TEST(attention_16bit_is_bitwise_thread_independent)
{
    const enum zt_dtype t = _i ? ZT_F16 : ZT_BF16;
    const int B = 2, T = 300, NH = 4, NKV = 2, hs = ATT_HS;
    const int nqkv = B * T * (NH + 2 * NKV) * hs, nout = B * T * NH * hs, nlse = B * NH * T;
    struct ten qkv = ten_randn(t, nqkv, 611, 1.0, 0.0), dout = ten_randn(t, nout, 612, 1.0, 0.0);
    uint16_t *res[2];
    float *lse[2];
    for (int k = 0; k < 2; k++) {
        ops_cpu_set_threads(k ? 3 : 1);
        res[k] = calloc((size_t)(nout + nqkv), sizeof(uint16_t));
        lse[k] = calloc((size_t)nlse, sizeof(float));
        ck_assert(res[k] && lse[k]);
        ok(ops->attention_forward(ops, t, res[k], lse[k], qkv.h, B, T, NH, NKV, hs),
           "attention_forward");
        ok(ops->attention_backward(ops, t, res[k] + nout, dout.h, qkv.h, res[k], lse[k], B, T, NH,
                                   NKV, hs),
           "attention_backward");
    }
    ck_assert_msg(memcmp(res[0], res[1], (size_t)(nout + nqkv) * sizeof(uint16_t)) == 0,
                  "%s attention differs on 3 threads", tname(t));
    ck_assert_msg(memcmp(lse[0], lse[1], (size_t)nlse * sizeof(float)) == 0,
                  "%s attention's lse differs on 3 threads", tname(t));
    ops_cpu_set_threads(1);
    for (int k = 0; k < 2; k++) {
        free(res[k]);
        free(lse[k]);
    }
    ten_free(&qkv);
    ten_free(&dout);
}
END_TEST

/* ---- rope: rows wider than the heads ---- */

enum { RP_B = 2, RP_T = 7, RP_NH = 3, RP_HS = 16, RP_STRIDE = RP_NH * RP_HS + 10 };

/* Loop bit 2 (i / 4): rope_backward. Columns past the heads hold values
 * and signalling NaNs, which any widen-and-round trip would quieten: so
 * "untouched" means never stored, not stored back unchanged. */
START_TEST(rope_16bit_is_rounded_fp32_and_spares_other_columns)
{
    enum zt_dtype t = start(_i);
    int backward = _i / 4, half = RP_HS / 2, heads = RP_NH * RP_HS;
    const int rows = RP_B * RP_T, n = rows * RP_STRIDE;
    float *cs = xmalloc((size_t)RP_T * half * 4), *sn = xmalloc((size_t)RP_T * half * 4);
    for (int p = 0; p < RP_T; p++)
        for (int i = 0; i < half; i++) {
            double angle = p * pow(10000.0, -2.0 * i / RP_HS);
            cs[p * half + i] = (float)cos(angle);
            sn[p * half + i] = (float)sin(angle);
        }
    struct ten x = ten_randn(t, n, 701 + backward, 1.0, 0.0);
    for (int r = 0; r < rows; r++)
        for (int c = heads; c < RP_STRIDE; c += 3)
            x.h[r * RP_STRIDE + c] = t == ZT_BF16 ? 0x7f81 : 0x7d01;
    precision_to_f32(t, x.h, x.f, (size_t)n);
    uint16_t *before = xmalloc((size_t)n * 2);
    memcpy(before, x.h, (size_t)n * 2);
    if (backward) {
        ok(ops->rope_backward(ops, t, x.h, cs, sn, RP_B, RP_T, RP_NH, RP_HS, RP_STRIDE),
           "rope_backward");
        ok(ops->rope_backward(ops, ZT_F32, x.f, cs, sn, RP_B, RP_T, RP_NH, RP_HS, RP_STRIDE),
           "rope_backward fp32");
    } else {
        ok(ops->rope_forward(ops, t, x.h, cs, sn, RP_B, RP_T, RP_NH, RP_HS, RP_STRIDE),
           "rope_forward");
        ok(ops->rope_forward(ops, ZT_F32, x.f, cs, sn, RP_B, RP_T, RP_NH, RP_HS, RP_STRIDE),
           "rope_forward fp32");
    }
    /* Head columns: compare row by row. */
    const char *what = backward ? "rope_backward dx" : "rope_forward x";
    for (int r = 0; r < rows; r++)
        expect_rounded(testutil_fmt("%s, row %d", what, r), t, x.h + r * RP_STRIDE,
                       x.f + r * RP_STRIDE, heads);
    for (int r = 0; r < rows; r++)
        for (int c = heads; c < RP_STRIDE; c++)
            ck_assert_msg(x.h[r * RP_STRIDE + c] == before[r * RP_STRIDE + c],
                          "%s (%s) changed [%d,%d] past the heads: 0x%04x -> 0x%04x", what,
                          tname(t), r, c, before[r * RP_STRIDE + c], x.h[r * RP_STRIDE + c]);
    free(before);
    free(cs);
    free(sn);
    ten_free(&x);
}
END_TEST

/* ---- elementwise: gelu, swiglu, residual, mul ---- */

enum { EW_N = 777, SW_N = 13, SW_I = 70 };

START_TEST(gelu_16bit_is_rounded_fp32)
{
    enum zt_dtype t = start(_i);
    struct ten x = ten_randn(t, EW_N, 801, 2.5, 0.0), out = ten_out(t, EW_N),
               dout = ten_randn(t, EW_N, 802, 1.0, 0.0), dx = ten_randn(t, EW_N, 803, 0.3, 0.0);
    ok(ops->gelu_forward(ops, t, out.h, x.h, EW_N), "gelu_forward");
    ok(ops->gelu_forward(ops, ZT_F32, out.f, x.f, EW_N), "gelu_forward fp32");
    expect_rounded("gelu out", t, out.h, out.f, EW_N);
    ok(ops->gelu_backward(ops, t, dx.h, x.h, dout.h, EW_N), "gelu_backward");
    ok(ops->gelu_backward(ops, ZT_F32, dx.f, x.f, dout.f, EW_N), "gelu_backward fp32");
    expect_rounded("gelu dinp", t, dx.h, dx.f, EW_N);
    ten_free(&x);
    ten_free(&out);
    ten_free(&dout);
    ten_free(&dx);
}
END_TEST

START_TEST(swiglu_16bit_is_rounded_fp32)
{
    enum zt_dtype t = start(_i);
    const int N = SW_N, I = SW_I;
    struct ten gu = ten_randn(t, N * 2 * I, 811, 2.0, 0.0), out = ten_out(t, N * I),
               dout = ten_randn(t, N * I, 812, 1.0, 0.0),
               dgu = ten_randn(t, N * 2 * I, 813, 0.3, 0.0);
    ok(ops->swiglu_forward(ops, t, out.h, gu.h, N, I), "swiglu_forward");
    ok(ops->swiglu_forward(ops, ZT_F32, out.f, gu.f, N, I), "swiglu_forward fp32");
    expect_rounded("swiglu out", t, out.h, out.f, N * I);
    ok(ops->swiglu_backward(ops, t, dgu.h, dout.h, gu.h, N, I), "swiglu_backward");
    ok(ops->swiglu_backward(ops, ZT_F32, dgu.f, dout.f, gu.f, N, I), "swiglu_backward fp32");
    expect_rounded("swiglu dgu", t, dgu.h, dgu.f, N * 2 * I);
    ten_free(&gu);
    ten_free(&out);
    ten_free(&dout);
    ten_free(&dgu);
}
END_TEST

START_TEST(residual_and_mul_16bit_are_rounded_fp32)
{
    enum zt_dtype t = start(_i);
    struct ten a = ten_randn(t, EW_N, 821, 1.0, 0.0), b = ten_randn(t, EW_N, 822, 1.5, 0.0),
               dout = ten_randn(t, EW_N, 823, 1.0, 0.0), da = ten_randn(t, EW_N, 824, 0.3, 0.0),
               out = ten_out(t, EW_N);
    ok(ops->residual_forward(ops, t, out.h, a.h, b.h, EW_N), "residual_forward");
    ok(ops->residual_forward(ops, ZT_F32, out.f, a.f, b.f, EW_N), "residual_forward fp32");
    expect_rounded("residual out", t, out.h, out.f, EW_N);
    ok(ops->mul_forward(ops, t, out.h, a.h, b.h, EW_N), "mul_forward");
    ok(ops->mul_forward(ops, ZT_F32, out.f, a.f, b.f, EW_N), "mul_forward fp32");
    expect_rounded("mul out", t, out.h, out.f, EW_N);
    ok(ops->mul_backward(ops, t, da.h, b.h, dout.h, EW_N), "mul_backward");
    ok(ops->mul_backward(ops, ZT_F32, da.f, b.f, dout.f, EW_N), "mul_backward fp32");
    expect_rounded("mul da", t, da.h, da.f, EW_N);
    ten_free(&a);
    ten_free(&b);
    ten_free(&dout);
    ten_free(&da);
    ten_free(&out);
}
END_TEST

/* ---- cross-entropy, whole rows and vocabulary slices ---- */

enum { XE_N = 23, XE_V = 301 };
static const float XE_DLOSS = 0.37f;

/* Targets at both ends of [lo, lo + w), one inside, row 4 masked; the
 * rest anywhere in the vocabulary (mostly outside a narrow slice). */
static int32_t *xe_targets(int lo, int w)
{
    int32_t *tgt = random_ids(XE_N, XE_V, 901);
    tgt[2] = lo;
    tgt[3] = lo + w - 1;
    tgt[4] = -1;
    tgt[5] = lo + w / 2;
    return tgt;
}

START_TEST(crossentropy_16bit_is_rounded_fp32)
{
    enum zt_dtype t = start(_i);
    const int N = XE_N, V = XE_V;
    int32_t *tgt = xe_targets(0, V);
    struct ten logits = ten_randn(t, N * V, 902, 3.0, 0.0), probs = ten_out(t, N * V);
    struct fpair losses = fpair_randn(N, 903, 1.0);
    ok(ops->crossentropy_forward(ops, t, losses.a, probs.h, logits.h, tgt, N, V),
       "crossentropy_forward");
    ok(ops->crossentropy_forward(ops, ZT_F32, losses.b, probs.f, logits.f, tgt, N, V),
       "crossentropy_forward fp32");
    expect_rounded("crossentropy probs", t, probs.h, probs.f, N * V);
    expect_same("crossentropy losses", t, losses.a, losses.b, N);
    ck_assert_msg(losses.a[4] == 0.0f, "masked row's loss %g", (double)losses.a[4]);

    struct ten p = ten_from(t, probs.h, N * V), dl = ten_randn(t, N * V, 904, 0.1, 0.0);
    ok(ops->crossentropy_backward(ops, t, dl.h, p.h, tgt, XE_DLOSS, N, V), "crossentropy_backward");
    ok(ops->crossentropy_backward(ops, ZT_F32, dl.f, p.f, tgt, XE_DLOSS, N, V),
       "crossentropy_backward fp32");
    expect_rounded("crossentropy dlogits", t, dl.h, dl.f, N * V);
    ten_free(&logits);
    ten_free(&probs);
    ten_free(&p);
    ten_free(&dl);
    fpair_free(&losses);
    free(tgt);
}
END_TEST

/* {v_lo, Vp}: one part (the whole vocabulary), and a slice of it. */
static const int XV_PARTS[][2] = {{0, XE_V}, {120, 97}};

/* Each of the four ops on the 16-bit chain's inputs; the slice's
 * reductions are stood in for by fixed shifts (other ranks' larger max,
 * their sums), which the ops take as given. Loop bit 2 (i / 4): the part. */
START_TEST(crossentropy_vocab_16bit_is_rounded_fp32)
{
    enum zt_dtype t = start(_i);
    const int lo = XV_PARTS[_i / 4][0], Vp = XV_PARTS[_i / 4][1], N = XE_N, slice = lo > 0;
    int32_t *tgt = xe_targets(lo, Vp);
    const char *part = slice ? "slice" : "one part";
    struct ten logits = ten_randn(t, N * Vp, 911, 3.0, 0.0), probs = ten_out(t, N * Vp);
    struct fpair rmax = fpair_randn(N, 912, 1.0), stats = fpair_randn(2 * N, 913, 1.0),
                 losses = fpair_randn(N, 914, 1.0);

    ok(ops->crossentropy_vocab_max(ops, t, rmax.a, logits.h, N, Vp, Vp), "crossentropy_vocab_max");
    ok(ops->crossentropy_vocab_max(ops, ZT_F32, rmax.b, logits.f, N, Vp, Vp),
       "crossentropy_vocab_max fp32");
    expect_same(testutil_fmt("crossentropy_vocab row_max, %s", part), t, rmax.a, rmax.b, N);

    for (int i = 0; i < N && slice; i++)
        rmax.a[i] += 0.25f;
    ok(ops->crossentropy_vocab_exp(ops, t, probs.h, stats.a, logits.h, rmax.a, tgt, N, Vp, Vp, lo),
       "crossentropy_vocab_exp");
    ok(ops->crossentropy_vocab_exp(ops, ZT_F32, probs.f, stats.b, logits.f, rmax.a, tgt, N, Vp, Vp,
                                   lo),
       "crossentropy_vocab_exp fp32");
    expect_rounded(testutil_fmt("crossentropy_vocab_exp probs, %s", part), t, probs.h, probs.f,
                   N * Vp);
    expect_same(testutil_fmt("crossentropy_vocab_exp row_stats, %s", part), t, stats.a, stats.b,
                2 * N);

    for (int i = 0; i < N && slice; i++) {
        stats.a[i] += 1.5f;
        stats.a[N + i] -= 1.0f;
    }
    struct ten p = ten_from(t, probs.h, N * Vp);
    ok(ops->crossentropy_vocab_finish(ops, t, losses.a, p.h, stats.a, tgt, N, Vp),
       "crossentropy_vocab_finish");
    ok(ops->crossentropy_vocab_finish(ops, ZT_F32, losses.b, p.f, stats.a, tgt, N, Vp),
       "crossentropy_vocab_finish fp32");
    expect_rounded(testutil_fmt("crossentropy_vocab_finish probs, %s", part), t, p.h, p.f, N * Vp);
    expect_same(testutil_fmt("crossentropy_vocab_finish losses, %s", part), t, losses.a, losses.b,
                N);

    struct ten q = ten_from(t, p.h, N * Vp), dl = ten_randn(t, N * Vp, 915, 0.1, 0.0);
    ok(ops->crossentropy_vocab_backward(ops, t, dl.h, q.h, tgt, XE_DLOSS, N, Vp, lo),
       "crossentropy_vocab_backward");
    ok(ops->crossentropy_vocab_backward(ops, ZT_F32, dl.f, q.f, tgt, XE_DLOSS, N, Vp, lo),
       "crossentropy_vocab_backward fp32");
    expect_rounded(testutil_fmt("crossentropy_vocab dlogits, %s", part), t, dl.h, dl.f, N * Vp);

    struct ten *all[] = {&logits, &probs, &p, &q, &dl};
    for (int k = 0; k < NSIZES(all); k++)
        ten_free(all[k]);
    fpair_free(&rmax);
    fpair_free(&stats);
    fpair_free(&losses);
    free(tgt);
}
END_TEST

/* Loop counts: 4 = {bf16, fp16} x {1, 3 threads}; 8 adds a variant bit. */
static TCase *tcase(Suite *s, const char *name)
{
    TCase *tc = testutil_tcase(s, name, 60);
    tcase_add_checked_fixture(tc, open_ops, close_ops);
    return tc;
}

int main(void)
{
    Suite *s = suite_create("ops16");
    TCase *tc = tcase(s, "encoder");
    tcase_add_loop_test(tc, encoder_forward_16bit_is_rounded_fp32, 0, 8);
    tcase_add_loop_test(tc, encoder_backward_16bit_is_fp32, 0, 8);
    tc = tcase(s, "norms");
    tcase_add_loop_test(tc, layernorm_16bit_is_rounded_fp32, 0, 4);
    tcase_add_loop_test(tc, rmsnorm_16bit_is_rounded_fp32, 0, 4);
    tc = tcase(s, "products");
    tcase_add_loop_test(tc, matmul_forward_16bit_within_tolerance, 0, 4);
    tcase_add_loop_test(tc, matmul_backward_16bit_within_tolerance, 0, 4);
    tcase_add_loop_test(tc, lora_forward_16bit_within_tolerance, 0, 4);
    tcase_add_loop_test(tc, lora_backward_16bit_within_tolerance, 0, 4);
    tc = tcase(s, "attention");
    tcase_add_loop_test(tc, attention_16bit_within_tolerance, 0, 2 * NSIZES(ATT16));
    tcase_add_loop_test(tc, attention_16bit_is_bitwise_thread_independent, 0, 2);
    tc = tcase(s, "rope");
    tcase_add_loop_test(tc, rope_16bit_is_rounded_fp32_and_spares_other_columns, 0, 8);
    tc = tcase(s, "elementwise");
    tcase_add_loop_test(tc, gelu_16bit_is_rounded_fp32, 0, 4);
    tcase_add_loop_test(tc, swiglu_16bit_is_rounded_fp32, 0, 4);
    tcase_add_loop_test(tc, residual_and_mul_16bit_are_rounded_fp32, 0, 4);
    tc = tcase(s, "crossentropy");
    tcase_add_loop_test(tc, crossentropy_16bit_is_rounded_fp32, 0, 4);
    tcase_add_loop_test(tc, crossentropy_vocab_16bit_is_rounded_fp32, 0, 4 * NSIZES(XV_PARTS));
    return testutil_run_suite(s, 0);
}
