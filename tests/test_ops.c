/* tests/test_ops.c — the CPU ops against independent double-precision
 * references.
 *
 * Each forward is compared with a naive double loop written here from the
 * op's definition in worker/ops.h. Each backward is compared with central
 * finite differences of the scalar L = sum(out * R), R a fixed random tensor
 * passed to the backward as dout, taken on a double reimplementation of the
 * forward; so neither check reuses anything from the code under test.
 * The vocabulary-parallel ops run on column slices of one matrix, the
 * reductions between them done here, and are judged by the references on
 * the full rows (and by the unsplit ops, which the references judge).
 * The one internal piece tested directly is cpu_expf (ops_cpu_impl.h), the
 * exponential under every softmax and GELU.
 *
 * Tolerances, all relative to the largest magnitude of the reference so
 * that tiny entries are judged on the tensor's scale:
 * - FWD_TOL 2e-5. The ops keep float sums of at most a few hundred terms
 *   (about 1e-6 relative here) and cpu_expf is within 2 ulp; a wrong index
 *   or formula is off by far more than 1e-3.
 * - GRAD_TOL 1e-4. The finite differences use h = 1e-4 in double:
 *   truncation is h^2 |f'''| / 6, about 1e-9, and rounding 1e-16 |L| / h,
 *   about 1e-11. The float backward carries about 1e-6 relative error.
 *   A missing term in a gradient shows up at 1e-2 or more.
 * Sizes are small and odd on purpose (T = 1, C not a multiple of the vector
 * width, N = 3, attention with T past the 64-row tile and head size
 * 5, RMSNorm across three 64-column blocks) so that remainder loops and
 * block edges are exercised. Grouped-query attention is checked against
 * plain multi-head attention on key/value heads repeated the way Hugging
 * Face's repeat_kv does, so the reference shares no indexing with the op.
 */
#include "testutil.h"

#include "common/rng.h"
#include "worker/cpu/ops_cpu_impl.h"
#include "worker/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double FWD_TOL = 2e-5;
static const double GRAD_TOL = 1e-4;
static const double FD_STEP = 1e-4;
static const double PI = 3.14159265358979323846;

/* A tensor held twice: the float copy the ops see, the double copy the
 * references see. */
struct tensor {
    int n;
    float *f;
    double *d;
};

static struct tensor tensor_zeros(int n)
{
    struct tensor t = {n, calloc((size_t)n, sizeof(float)), calloc((size_t)n, sizeof(double))};
    ck_assert_ptr_nonnull(t.f);
    ck_assert_ptr_nonnull(t.d);
    return t;
}

/* Uniform in [-scale, scale), the double copy equal to the float one. */
static struct tensor tensor_rand(int n, uint64_t key, double scale)
{
    struct tensor t = tensor_zeros(n);
    for (int i = 0; i < n; i++) {
        t.f[i] = (float)((2.0 * rng_uniform(key, (uint64_t)i) - 1.0) * scale);
        t.d[i] = t.f[i];
    }
    return t;
}

static void tensor_free(struct tensor *t)
{
    free(t->f);
    free(t->d);
}

static int32_t *random_ids(int n, int V, uint64_t key)
{
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)(rng_u64(key, (uint64_t)i) % (uint64_t)V);
    return ids;
}

static double max_abs(const double *x, int n)
{
    double m = 0.0;
    for (int i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

static double dot(const double *a, const double *b, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* |got - want| <= tol * max |want| elementwise. */
static void check_close(const char *what, const float *got, const double *want, int n, double tol)
{
    double scale = max_abs(want, n), worst = 0.0;
    int at = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]);
        if (!(e <= worst)) { /* also catches NaN */
            worst = e;
            at = i;
        }
    }
    ck_assert_msg(worst <= tol * (scale > 0.0 ? scale : 1.0),
                  "%s: error %.3g at [%d] (got %.9g, want %.9g), max |want| %.3g, tol %.1g", what,
                  worst, at, (double)got[at], want[at], scale, tol);
}

typedef double (*objective_fn)(void *ctx);

/* Compares the float gradient g of the objective w.r.t. x[0..n) with
 * central differences of f, which reads x (perturbed in place, restored). */
static void check_gradient(const char *what, objective_fn f, void *ctx, double *x, const float *g,
                           int n)
{
    double *fd = malloc((size_t)n * sizeof *fd);
    ck_assert_ptr_nonnull(fd);
    for (int k = 0; k < n; k++) {
        double x0 = x[k];
        x[k] = x0 + FD_STEP;
        double lp = f(ctx);
        x[k] = x0 - FD_STEP;
        double lm = f(ctx);
        x[k] = x0;
        fd[k] = (lp - lm) / (2.0 * FD_STEP);
    }
    ck_assert_msg(max_abs(fd, n) > 0.0, "%s: gradient is identically zero, test is vacuous", what);
    check_close(what, g, fd, n, GRAD_TOL);
    free(fd);
}

typedef void (*backward_fn)(void *ctx);

/* One gradient a backward produces, for check_accumulates. */
struct grad {
    const char *what;
    const float *g;
    int n;
};

/* Runs the backward twice on the same inputs from zero gradients: each of
 * the k gradients must come out of the second call twice what the first
 * left (the accumulate convention of worker/ops.h). */
static void check_accumulates(backward_fn backward, void *ctx, const struct grad *gs, int k)
{
    backward(ctx);
    float **first = malloc((size_t)k * sizeof *first);
    ck_assert_ptr_nonnull(first);
    for (int i = 0; i < k; i++) {
        first[i] = malloc((size_t)gs[i].n * sizeof(float));
        ck_assert_ptr_nonnull(first[i]);
        memcpy(first[i], gs[i].g, (size_t)gs[i].n * sizeof(float));
    }
    backward(ctx);
    for (int i = 0; i < k; i++) {
        double *want = malloc((size_t)gs[i].n * sizeof *want);
        ck_assert_ptr_nonnull(want);
        for (int j = 0; j < gs[i].n; j++)
            want[j] = 2.0 * first[i][j];
        check_close(gs[i].what, gs[i].g, want, gs[i].n, 1e-6);
        free(want);
        free(first[i]);
    }
    free(first);
}

/* ---- references, double precision, straight from the definitions ---- */

static void ref_layernorm(double *out, const double *x, const double *w, const double *b, int N,
                          int C)
{
    for (int i = 0; i < N; i++) {
        const double *r = x + (size_t)i * C;
        double m = 0.0, v = 0.0;
        for (int c = 0; c < C; c++)
            m += r[c] / C;
        for (int c = 0; c < C; c++)
            v += (r[c] - m) * (r[c] - m) / C;
        for (int c = 0; c < C; c++)
            out[(size_t)i * C + c] = (r[c] - m) / sqrt(v + 1e-5) * w[c] + b[c];
    }
}

/* eps is the float the op receives, widened. */
static void ref_rmsnorm(double *out, double *rstd, const double *x, const double *w, int N, int C,
                        double eps)
{
    for (int i = 0; i < N; i++) {
        const double *r = x + (size_t)i * C;
        double ms = 0.0;
        for (int c = 0; c < C; c++)
            ms += r[c] * r[c] / C;
        double rs = 1.0 / sqrt(ms + eps);
        if (rstd)
            rstd[i] = rs;
        for (int c = 0; c < C; c++)
            out[(size_t)i * C + c] = r[c] * rs * w[c];
    }
}

static void ref_matmul(double *out, const double *x, const double *w, const double *bias, int N,
                       int C, int OC)
{
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++)
                s += x[(size_t)i * C + c] * w[(size_t)o * C + c];
            out[(size_t)i * OC + o] = s;
        }
}

/* Multi-head attention, one key/value head per query head: qkv[B,T,3C]
 * holds q, k, v side by side, C = NH*hs. att may be NULL. */
static void ref_attention_mha(double *out, double *att, const double *qkv, int B, int T, int C,
                              int NH)
{
    int hs = C / NH;
    double *p = malloc((size_t)T * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = qkv + ((size_t)b * T + i) * 3 * C + h * hs;
                double m = -INFINITY, s = 0.0;
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    p[j] = 0.0;
                    for (int c = 0; c < hs; c++)
                        p[j] += q[c] * k[c];
                    p[j] /= sqrt((double)hs);
                    m = fmax(m, p[j]);
                }
                for (int j = 0; j <= i; j++) {
                    p[j] = exp(p[j] - m);
                    s += p[j];
                }
                double *o = out + ((size_t)b * T + i) * C + h * hs;
                for (int c = 0; c < hs; c++)
                    o[c] = 0.0;
                for (int j = 0; j < T; j++) {
                    double a = j <= i ? p[j] / s : 0.0;
                    if (att)
                        att[(((size_t)b * NH + h) * T + i) * T + j] = a;
                    const double *v = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * hs;
                    for (int c = 0; c < hs && j <= i; c++)
                        o[c] += a * v[c];
                }
            }
    free(p);
}

/* Grouped-query attention the way Hugging Face's repeat_kv computes it:
 * each of the NKV key/value heads is copied for the NH / NKV query heads
 * that share it, then plain multi-head attention runs. qkv is
 * [B,T,(NH+2*NKV)*hs]; att may be NULL. */
static void ref_attention(double *out, double *att, const double *qkv, int B, int T, int NH,
                          int NKV, int hs)
{
    int C = NH * hs, ld = (NH + 2 * NKV) * hs, g = NH / NKV;
    double *full = malloc((size_t)B * T * 3 * C * sizeof *full);
    ck_assert_ptr_nonnull(full);
    for (int bt = 0; bt < B * T; bt++) {
        const double *src = qkv + (size_t)bt * ld;
        double *dst = full + (size_t)bt * 3 * C;
        memcpy(dst, src, (size_t)C * sizeof *dst); /* the query heads */
        for (int h = 0; h < NH; h++) {
            int kv = h / g;
            memcpy(dst + C + h * hs, src + (NH + kv) * hs, (size_t)hs * sizeof *dst);
            memcpy(dst + 2 * C + h * hs, src + (NH + NKV + kv) * hs, (size_t)hs * sizeof *dst);
        }
    }
    ref_attention_mha(out, att, full, B, T, C, NH);
    free(full);
}

static double ref_gelu(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / PI) * (x + 0.044715 * x * x * x)));
}

/* Returns the sum of the losses; probs may be NULL. A target < 0 is not
 * counted: loss 0. */
static double ref_crossentropy(double *losses, double *probs, const double *logits,
                               const int32_t *targets, int N, int V)
{
    double total = 0.0;
    for (int i = 0; i < N; i++) {
        const double *x = logits + (size_t)i * V;
        double m = -INFINITY, s = 0.0;
        for (int j = 0; j < V; j++)
            m = fmax(m, x[j]);
        for (int j = 0; j < V; j++)
            s += exp(x[j] - m);
        if (probs)
            for (int j = 0; j < V; j++)
                probs[(size_t)i * V + j] = exp(x[j] - m) / s;
        losses[i] = targets[i] < 0 ? 0.0 : log(s) + m - x[targets[i]];
        total += losses[i];
    }
    return total;
}

/* ---- encoder ---- */

static const int ENC_SIZES[][4] = {{2, 4, 8, 5}, {1, 1, 3, 2}, {3, 2, 20, 3}}; /* B T C V */

struct enc_case {
    int B, T, C, V, pos;
    int32_t *tok;
    struct tensor wte, wpe, out, r, dwte, dwpe;
};

/* Loop index i: size i / 2, with position embeddings when i is even (GPT-2)
 * and without them (wpe and dwpe NULL, the Llama family) when odd. */
static struct enc_case enc_setup(int i)
{
    int which = i / 2;
    struct enc_case e = {.B = ENC_SIZES[which][0],
                         .T = ENC_SIZES[which][1],
                         .C = ENC_SIZES[which][2],
                         .V = ENC_SIZES[which][3],
                         .pos = i % 2 == 0};
    int N = e.B * e.T;
    e.tok = random_ids(N, e.V, 11); /* V < N somewhere: tokens repeat */
    e.wte = tensor_rand(e.V * e.C, 12, 1.0);
    e.wpe = tensor_rand(e.T * e.C, 13, 1.0);
    e.r = tensor_rand(N * e.C, 14, 1.0);
    e.out = tensor_zeros(N * e.C);
    e.dwte = tensor_zeros(e.V * e.C);
    e.dwpe = tensor_zeros(e.T * e.C);
    return e;
}

static void enc_teardown(struct enc_case *e)
{
    free(e->tok);
    tensor_free(&e->wte);
    tensor_free(&e->wpe);
    tensor_free(&e->out);
    tensor_free(&e->r);
    tensor_free(&e->dwte);
    tensor_free(&e->dwpe);
}

static void enc_ref(struct enc_case *e)
{
    for (int bt = 0; bt < e->B * e->T; bt++)
        for (int c = 0; c < e->C; c++)
            e->out.d[bt * e->C + c] =
                e->wte.d[e->tok[bt] * e->C + c] + (e->pos ? e->wpe.d[bt % e->T * e->C + c] : 0.0);
}

static double enc_objective(void *ctx)
{
    struct enc_case *e = ctx;
    enc_ref(e);
    return dot(e->out.d, e->r.d, e->out.n);
}

static void enc_backward(void *ctx)
{
    struct enc_case *e = ctx;
    ck_assert_int_eq(ops_cpu_backend()->encoder_backward(ops_cpu_backend(), ZT_F32, e->dwte.f,
                                                         e->pos ? e->dwpe.f : NULL, e->r.f, e->tok,
                                                         e->B, e->T, e->C),
                     ZT_OK);
}

START_TEST(encoder_forward_matches_reference)
{
    struct enc_case e = enc_setup(_i);
    ck_assert_int_eq(ops_cpu_backend()->encoder_forward(ops_cpu_backend(), ZT_F32, e.out.f, e.tok,
                                                        e.wte.f, e.pos ? e.wpe.f : NULL, e.B, e.T,
                                                        e.C),
                     ZT_OK);
    enc_ref(&e);
    check_close(e.pos ? "encoder out" : "encoder out (no wpe)", e.out.f, e.out.d, e.out.n, FWD_TOL);
    enc_teardown(&e);
}
END_TEST

START_TEST(encoder_backward_matches_finite_differences)
{
    struct enc_case e = enc_setup(_i);
    enc_backward(&e);
    check_gradient(e.pos ? "encoder dwte" : "encoder dwte (no dwpe)", enc_objective, &e, e.wte.d,
                   e.dwte.f, e.wte.n);
    if (e.pos)
        check_gradient("encoder dwpe", enc_objective, &e, e.wpe.d, e.dwpe.f, e.wpe.n);
    enc_teardown(&e);
}
END_TEST

START_TEST(encoder_backward_accumulates)
{
    struct enc_case e = enc_setup(0);
    check_accumulates(
        enc_backward, &e,
        (struct grad[]){{"encoder dwte", e.dwte.f, e.dwte.n}, {"encoder dwpe", e.dwpe.f, e.dwpe.n}},
        2);
    enc_teardown(&e);
}
END_TEST

/* ---- layernorm ---- */

static const int LN_SIZES[][2] = {{4, 16}, {3, 20}, {1, 7}, {5, 33}}; /* N C */

struct ln_case {
    int N, C;
    struct tensor x, w, b, out, mean, rstd, r, dx, dw, db;
};

static struct ln_case ln_setup(int which)
{
    struct ln_case l = {.N = LN_SIZES[which][0], .C = LN_SIZES[which][1]};
    int n = l.N * l.C;
    l.x = tensor_rand(n, 21, 2.0);
    for (int i = 0; i < n; i++) /* an offset mean, as residual streams have */
        l.x.d[i] = l.x.f[i] += 3.0f;
    l.w = tensor_rand(l.C, 22, 1.5);
    l.b = tensor_rand(l.C, 23, 0.5);
    l.r = tensor_rand(n, 24, 1.0);
    l.out = tensor_zeros(n);
    l.mean = tensor_zeros(l.N);
    l.rstd = tensor_zeros(l.N);
    l.dx = tensor_zeros(n);
    l.dw = tensor_zeros(l.C);
    l.db = tensor_zeros(l.C);
    return l;
}

static void ln_teardown(struct ln_case *l)
{
    struct tensor *all[] = {&l->x,    &l->w, &l->b,  &l->out, &l->mean,
                            &l->rstd, &l->r, &l->dx, &l->dw,  &l->db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tensor_free(all[i]);
}

static double ln_objective(void *ctx)
{
    struct ln_case *l = ctx;
    ref_layernorm(l->out.d, l->x.d, l->w.d, l->b.d, l->N, l->C);
    return dot(l->out.d, l->r.d, l->out.n);
}

static void ln_forward(struct ln_case *l)
{
    ck_assert_int_eq(ops_cpu_backend()->layernorm_forward(ops_cpu_backend(), ZT_F32, l->out.f,
                                                          l->mean.f, l->rstd.f, l->x.f, l->w.f,
                                                          l->b.f, l->N, l->C),
                     ZT_OK);
}

static void ln_backward(void *ctx)
{
    struct ln_case *l = ctx;
    ck_assert_int_eq(ops_cpu_backend()->layernorm_backward(ops_cpu_backend(), ZT_F32, l->dx.f,
                                                           l->dw.f, l->db.f, l->r.f, l->x.f, l->w.f,
                                                           l->mean.f, l->rstd.f, l->N, l->C),
                     ZT_OK);
}

START_TEST(layernorm_forward_matches_reference)
{
    struct ln_case l = ln_setup(_i);
    ln_forward(&l);
    ref_layernorm(l.out.d, l.x.d, l.w.d, l.b.d, l.N, l.C);
    check_close("layernorm out", l.out.f, l.out.d, l.out.n, FWD_TOL);
    for (int i = 0; i < l.N; i++) { /* the saved statistics */
        double m = 0.0, v = 0.0;
        for (int c = 0; c < l.C; c++)
            m += l.x.d[i * l.C + c] / l.C;
        for (int c = 0; c < l.C; c++)
            v += (l.x.d[i * l.C + c] - m) * (l.x.d[i * l.C + c] - m) / l.C;
        ck_assert_double_eq_tol(l.mean.f[i], m, FWD_TOL * fabs(m));
        ck_assert_double_eq_tol(l.rstd.f[i], 1.0 / sqrt(v + 1e-5), FWD_TOL / sqrt(v + 1e-5));
    }
    ln_teardown(&l);
}
END_TEST

START_TEST(layernorm_backward_matches_finite_differences)
{
    struct ln_case l = ln_setup(_i);
    ln_forward(&l);
    ln_backward(&l);
    check_gradient("layernorm dinp", ln_objective, &l, l.x.d, l.dx.f, l.x.n);
    check_gradient("layernorm dweight", ln_objective, &l, l.w.d, l.dw.f, l.w.n);
    check_gradient("layernorm dbias", ln_objective, &l, l.b.d, l.db.f, l.b.n);
    ln_teardown(&l);
}
END_TEST

START_TEST(layernorm_backward_accumulates)
{
    struct ln_case l = ln_setup(3);
    ln_forward(&l);
    check_accumulates(ln_backward, &l,
                      (struct grad[]){{"layernorm dinp", l.dx.f, l.dx.n},
                                      {"layernorm dweight", l.dw.f, l.C},
                                      {"layernorm dbias", l.db.f, l.C}},
                      3);
    ln_teardown(&l);
}
END_TEST

/* ---- rmsnorm ---- */

/* N C: as layernorm's, and C = 130 across three column blocks of 64. */
static const int RMS_SIZES[][2] = {{4, 16}, {3, 20}, {1, 7}, {5, 33}, {3, 130}};

struct rms_case {
    int N, C;
    float eps;
    struct tensor x, w, out, rstd, r, dx, dw;
};

/* Llama's two epsilons, 1e-5 and 1e-6, in turn. */
static struct rms_case rms_setup(int which)
{
    struct rms_case m = {
        .N = RMS_SIZES[which][0], .C = RMS_SIZES[which][1], .eps = which % 2 ? 1e-6f : 1e-5f};
    int n = m.N * m.C;
    m.x = tensor_rand(n, 81, 2.0);
    m.w = tensor_rand(m.C, 82, 1.5);
    m.r = tensor_rand(n, 83, 1.0);
    m.out = tensor_zeros(n);
    m.rstd = tensor_zeros(m.N);
    m.dx = tensor_zeros(n);
    m.dw = tensor_zeros(m.C);
    return m;
}

static void rms_teardown(struct rms_case *m)
{
    struct tensor *all[] = {&m->x, &m->w, &m->out, &m->rstd, &m->r, &m->dx, &m->dw};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tensor_free(all[i]);
}

static double rms_objective(void *ctx)
{
    struct rms_case *m = ctx;
    ref_rmsnorm(m->out.d, NULL, m->x.d, m->w.d, m->N, m->C, m->eps);
    return dot(m->out.d, m->r.d, m->out.n);
}

static void rms_forward(struct rms_case *m)
{
    ck_assert_int_eq(ops_cpu_backend()->rmsnorm_forward(ops_cpu_backend(), ZT_F32, m->out.f,
                                                        m->rstd.f, m->x.f, m->w.f, m->N, m->C,
                                                        m->eps),
                     ZT_OK);
}

static void rms_backward(void *ctx)
{
    struct rms_case *m = ctx;
    ck_assert_int_eq(ops_cpu_backend()->rmsnorm_backward(ops_cpu_backend(), ZT_F32, m->dx.f,
                                                         m->dw.f, m->r.f, m->x.f, m->w.f, m->rstd.f,
                                                         m->N, m->C),
                     ZT_OK);
}

/* Gradients that do not start at zero (accumulation over micro steps)
 * come out bit for bit the same on any number of threads. */
START_TEST(layernorm_backward_is_bitwise_thread_independent)
{
    struct ln_case l = ln_setup(3);
    const int n = l.dx.n + 2 * l.C;
    float *first = malloc((size_t)n * sizeof *first);
    ck_assert_ptr_nonnull(first);
    ln_forward(&l);
    for (int threads = 1; threads <= 3; threads++) {
        for (int i = 0; i < l.dx.n; i++)
            l.dx.f[i] = 0.25f * l.r.f[i];
        for (int c = 0; c < l.C; c++) {
            l.dw.f[c] = 0.5f + 0.01f * (float)c;
            l.db.f[c] = 0.3f - 0.02f * (float)c;
        }
        ops_cpu_set_threads(threads);
        ln_backward(&l);
        float *got[3] = {l.dx.f, l.dw.f, l.db.f};
        const int len[3] = {l.dx.n, l.C, l.C};
        for (int k = 0, at = 0; k < 3; at += len[k], k++) {
            if (threads == 1)
                memcpy(first + at, got[k], (size_t)len[k] * sizeof(float));
            else
                ck_assert_msg(memcmp(first + at, got[k], (size_t)len[k] * sizeof(float)) == 0,
                              "layernorm gradient %d differs on %d threads", k, threads);
        }
    }
    ops_cpu_set_threads(1);
    free(first);
    ln_teardown(&l);
}
END_TEST

START_TEST(rmsnorm_forward_matches_reference)
{
    struct rms_case m = rms_setup(_i);
    for (int i = 0; i < m.out.n; i++) /* garbage that the forward must overwrite */
        m.out.f[i] = 1e6f;
    rms_forward(&m);
    ref_rmsnorm(m.out.d, m.rstd.d, m.x.d, m.w.d, m.N, m.C, m.eps);
    check_close("rmsnorm out", m.out.f, m.out.d, m.out.n, FWD_TOL);
    check_close("rmsnorm rstd", m.rstd.f, m.rstd.d, m.N, FWD_TOL);
    rms_teardown(&m);
}
END_TEST

/* eps sits inside the root: rows of 1e-3 have mean square 1e-6, so with
 * eps = 1e-6 the output is x / sqrt(2e-6) = 0.7071 w, where eps left out
 * gives w and eps added after the root 0.999 w. */
START_TEST(rmsnorm_eps_is_inside_the_root)
{
    enum { C = 8 };
    float x[2 * C], w[C], out[2 * C], rstd[2];
    for (int c = 0; c < C; c++) {
        x[c] = 1e-3f;
        x[C + c] = -1e-3f;
        w[c] = (float)(c + 1);
    }
    ck_assert_int_eq(
        ops_cpu_backend()->rmsnorm_forward(ops_cpu_backend(), ZT_F32, out, rstd, x, w, 2, C, 1e-6f),
        ZT_OK);
    for (int i = 0; i < 2 * C; i++) {
        double want = x[i] / sqrt((double)x[i] * x[i] + (double)1e-6f) * w[i % C];
        ck_assert_double_eq_tol(out[i], want, 1e-6 * fabs(want));
    }
}
END_TEST

START_TEST(rmsnorm_backward_matches_finite_differences)
{
    struct rms_case m = rms_setup(_i);
    rms_forward(&m);
    rms_backward(&m);
    check_gradient("rmsnorm dinp", rms_objective, &m, m.x.d, m.dx.f, m.x.n);
    check_gradient("rmsnorm dweight", rms_objective, &m, m.w.d, m.dw.f, m.w.n);
    rms_teardown(&m);
}
END_TEST

START_TEST(rmsnorm_backward_accumulates)
{
    struct rms_case m = rms_setup(4);
    rms_forward(&m);
    check_accumulates(
        rms_backward, &m,
        (struct grad[]){{"rmsnorm dinp", m.dx.f, m.dx.n}, {"rmsnorm dweight", m.dw.f, m.C}}, 2);
    rms_teardown(&m);
}
END_TEST

/* dinp and dweight come out bit for bit the same on 1, 2 and 3 threads,
 * also when they start non-zero (a second micro-batch accumulating). */
START_TEST(rmsnorm_backward_is_bitwise_thread_independent)
{
    struct rms_case m = rms_setup(4); /* C = 130: column blocks of 64, 64 and 2 */
    int n = m.dx.n + m.C;
    float *first = malloc((size_t)n * sizeof *first);
    ck_assert_ptr_nonnull(first);
    rms_forward(&m);
    for (int threads = 1; threads <= 3; threads++) {
        for (int i = 0; i < m.dx.n; i++)
            m.dx.f[i] = 0.25f * m.r.f[i];
        for (int c = 0; c < m.C; c++)
            m.dw.f[c] = 0.5f + 0.01f * (float)c;
        ops_cpu_set_threads(threads);
        rms_backward(&m);
        if (threads == 1) {
            memcpy(first, m.dx.f, (size_t)m.dx.n * sizeof(float));
            memcpy(first + m.dx.n, m.dw.f, (size_t)m.C * sizeof(float));
            continue;
        }
        ck_assert_msg(memcmp(first, m.dx.f, (size_t)m.dx.n * sizeof(float)) == 0,
                      "rmsnorm dinp differs on %d threads", threads);
        ck_assert_msg(memcmp(first + m.dx.n, m.dw.f, (size_t)m.C * sizeof(float)) == 0,
                      "rmsnorm dweight differs on %d threads", threads);
    }
    ops_cpu_set_threads(1);
    free(first);
    rms_teardown(&m);
}
END_TEST

/* ---- matmul ---- */

static const int MM_SIZES[][3] = {{4, 8, 16}, {3, 5, 7}, {1, 20, 3}, {6, 33, 10}}; /* N C OC */

struct mm_case {
    int N, C, OC, has_bias;
    struct tensor x, w, bias, out, r, dx, dw, db;
};

/* Loop index i: size i / 2, with a bias when i is even. */
static struct mm_case mm_setup(int i)
{
    struct mm_case m = {.N = MM_SIZES[i / 2][0],
                        .C = MM_SIZES[i / 2][1],
                        .OC = MM_SIZES[i / 2][2],
                        .has_bias = i % 2 == 0};
    m.x = tensor_rand(m.N * m.C, 31, 1.0);
    m.w = tensor_rand(m.OC * m.C, 32, 0.5);
    m.bias = tensor_rand(m.OC, 33, 1.0);
    m.r = tensor_rand(m.N * m.OC, 34, 1.0);
    m.out = tensor_zeros(m.N * m.OC);
    m.dx = tensor_zeros(m.x.n);
    m.dw = tensor_zeros(m.w.n);
    m.db = tensor_zeros(m.OC);
    return m;
}

static void mm_teardown(struct mm_case *m)
{
    struct tensor *all[] = {&m->x, &m->w, &m->bias, &m->out, &m->r, &m->dx, &m->dw, &m->db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tensor_free(all[i]);
}

static double mm_objective(void *ctx)
{
    struct mm_case *m = ctx;
    ref_matmul(m->out.d, m->x.d, m->w.d, m->has_bias ? m->bias.d : NULL, m->N, m->C, m->OC);
    return dot(m->out.d, m->r.d, m->out.n);
}

static void mm_backward(void *ctx)
{
    struct mm_case *m = ctx;
    ck_assert_int_eq(ops_cpu_backend()->matmul_backward(ops_cpu_backend(), ZT_F32, m->dx.f, m->dw.f,
                                                        m->has_bias ? m->db.f : NULL, m->r.f,
                                                        m->x.f, m->w.f, m->N, m->C, m->OC),
                     ZT_OK);
}

START_TEST(matmul_forward_matches_reference)
{
    struct mm_case m = mm_setup(_i);
    for (int i = 0; i < m.out.n; i++) /* garbage that the forward must overwrite */
        m.out.f[i] = 1e6f;
    ck_assert_int_eq(ops_cpu_backend()->matmul_forward(ops_cpu_backend(), ZT_F32, m.out.f, m.x.f,
                                                       m.w.f, m.has_bias ? m.bias.f : NULL, m.N,
                                                       m.C, m.OC),
                     ZT_OK);
    ref_matmul(m.out.d, m.x.d, m.w.d, m.has_bias ? m.bias.d : NULL, m.N, m.C, m.OC);
    check_close(m.has_bias ? "matmul out (bias)" : "matmul out (no bias)", m.out.f, m.out.d,
                m.out.n, FWD_TOL);
    mm_teardown(&m);
}
END_TEST

START_TEST(matmul_backward_matches_finite_differences)
{
    struct mm_case m = mm_setup(_i);
    mm_backward(&m);
    check_gradient("matmul dinp", mm_objective, &m, m.x.d, m.dx.f, m.x.n);
    check_gradient("matmul dweight", mm_objective, &m, m.w.d, m.dw.f, m.w.n);
    if (m.has_bias)
        check_gradient("matmul dbias", mm_objective, &m, m.bias.d, m.db.f, m.OC);
    else
        for (int o = 0; o < m.OC; o++)
            ck_assert_float_eq(m.db.f[o], 0.0f);
    mm_teardown(&m);
}
END_TEST

START_TEST(matmul_backward_accumulates)
{
    struct mm_case m = mm_setup(6);
    check_accumulates(mm_backward, &m,
                      (struct grad[]){{"matmul dinp", m.dx.f, m.dx.n},
                                      {"matmul dweight", m.dw.f, m.dw.n},
                                      {"matmul dbias", m.db.f, m.OC}},
                      3);
    mm_teardown(&m);
}
END_TEST

/* ---- LoRA's low-rank term ---- */

/* N C r OC ldo: the output a slice of wider rows when ldo > OC. */
static const int LORA_SIZES[][5] = {{4, 8, 2, 16, 16}, {3, 5, 1, 7, 12}, {6, 33, 4, 10, 10}};

struct lora_case {
    int N, C, r, OC, ldo;
    struct tensor x, A, B, base, out, rw, dx, dA, dB;
    float *scratch;
    float scale;
};

static struct lora_case lora_setup(int i)
{
    struct lora_case l = {.N = LORA_SIZES[i][0],
                          .C = LORA_SIZES[i][1],
                          .r = LORA_SIZES[i][2],
                          .OC = LORA_SIZES[i][3],
                          .ldo = LORA_SIZES[i][4],
                          .scale = 1.75f};
    l.x = tensor_rand(l.N * l.C, 41, 1.0);
    l.A = tensor_rand(l.r * l.C, 42, 0.5);
    l.B = tensor_rand(l.OC * l.r, 43, 0.5);
    l.base = tensor_rand(l.N * l.ldo, 44, 1.0);
    l.rw = tensor_rand(l.N * l.ldo, 45, 1.0);
    l.out = tensor_zeros(l.N * l.ldo);
    l.dx = tensor_zeros(l.x.n);
    l.dA = tensor_zeros(l.A.n);
    l.dB = tensor_zeros(l.B.n);
    l.scratch = calloc(2 * (size_t)l.N * l.r, sizeof(float));
    ck_assert_ptr_nonnull(l.scratch);
    return l;
}

static void lora_teardown(struct lora_case *l)
{
    struct tensor *all[] = {&l->x, &l->A, &l->B, &l->base, &l->out, &l->rw, &l->dx, &l->dA, &l->dB};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tensor_free(all[i]);
    free(l->scratch);
}

/* out = base, then columns 0..OC of each row += scale * (x A^T) B^T. */
static void ref_lora(struct lora_case *l)
{
    for (int n = 0; n < l->N; n++)
        for (int o = 0; o < l->ldo; o++) {
            double acc = 0.0;
            for (int k = 0; o < l->OC && k < l->r; k++) {
                double u = 0.0;
                for (int c = 0; c < l->C; c++)
                    u += l->x.d[n * l->C + c] * l->A.d[k * l->C + c];
                acc += u * l->B.d[o * l->r + k];
            }
            l->out.d[n * l->ldo + o] = l->base.d[n * l->ldo + o] + l->scale * acc;
        }
}

/* The objective's weights cover only the slice: the columns past OC are
 * another layer's, which the backward must not read. */
static double lora_objective(void *ctx)
{
    struct lora_case *l = ctx;
    ref_lora(l);
    double s = 0.0;
    for (int n = 0; n < l->N; n++)
        for (int o = 0; o < l->OC; o++)
            s += l->out.d[n * l->ldo + o] * l->rw.d[n * l->ldo + o];
    return s;
}

static void lora_backward(void *ctx)
{
    struct lora_case *l = ctx;
    float *dout = malloc((size_t)l->N * l->ldo * sizeof(float));
    ck_assert_ptr_nonnull(dout);
    for (int i = 0; i < l->N * l->ldo; i++) /* NaN past the slice: must never be read */
        dout[i] = i % l->ldo < l->OC ? l->rw.f[i] : NAN;
    ck_assert_int_eq(ops_cpu_backend()->lora_backward(
                         ops_cpu_backend(), ZT_F32, l->dx.f, l->dA.f, l->dB.f, l->scratch, dout,
                         l->ldo, l->x.f, l->A.f, l->B.f, l->scale, l->N, l->C, l->r, l->OC),
                     ZT_OK);
    free(dout);
}

START_TEST(lora_forward_matches_reference)
{
    struct lora_case l = lora_setup(_i);
    memcpy(l.out.f, l.base.f, (size_t)l.out.n * sizeof(float));
    ck_assert_int_eq(ops_cpu_backend()->lora_forward(ops_cpu_backend(), ZT_F32, l.out.f, l.ldo,
                                                     l.scratch, l.x.f, l.A.f, l.B.f, l.scale, l.N,
                                                     l.C, l.r, l.OC),
                     ZT_OK);
    ref_lora(&l);
    check_close("lora out", l.out.f, l.out.d, l.out.n, FWD_TOL);
    lora_teardown(&l);
}
END_TEST

START_TEST(lora_backward_matches_finite_differences)
{
    struct lora_case l = lora_setup(_i);
    lora_backward(&l);
    check_gradient("lora dinp", lora_objective, &l, l.x.d, l.dx.f, l.x.n);
    check_gradient("lora dA", lora_objective, &l, l.A.d, l.dA.f, l.A.n);
    check_gradient("lora dB", lora_objective, &l, l.B.d, l.dB.f, l.B.n);
    lora_teardown(&l);
}
END_TEST

START_TEST(lora_backward_accumulates_and_skips_dinp)
{
    struct lora_case l = lora_setup(1);
    check_accumulates(lora_backward, &l,
                      (struct grad[]){{"lora dinp", l.dx.f, l.dx.n},
                                      {"lora dA", l.dA.f, l.dA.n},
                                      {"lora dB", l.dB.f, l.dB.n}},
                      3);
    float *dout = calloc((size_t)l.N * l.ldo, sizeof(float));
    ck_assert_ptr_nonnull(dout);
    ck_assert_int_eq(ops_cpu_backend()->lora_backward(ops_cpu_backend(), ZT_F32, NULL, l.dA.f,
                                                      l.dB.f, l.scratch, dout, l.ldo, l.x.f, l.A.f,
                                                      l.B.f, l.scale, l.N, l.C, l.r, l.OC),
                     ZT_OK);
    free(dout);
    lora_teardown(&l);
}
END_TEST

START_TEST(matmul_backward_skips_a_frozen_weight)
{
    struct mm_case m = mm_setup(0);
    ck_assert_int_eq(ops_cpu_backend()->matmul_backward(ops_cpu_backend(), ZT_F32, m.dx.f, NULL,
                                                        NULL, m.r.f, m.x.f, m.w.f, m.N, m.C, m.OC),
                     ZT_OK);
    check_gradient("matmul dinp (frozen weight)", mm_objective, &m, m.x.d, m.dx.f, m.x.n);
    mm_teardown(&m);
}
END_TEST

/* ---- elementwise product (dropout masks) ---- */

START_TEST(mul_forward_and_backward_match_reference)
{
    const int N = 37;
    struct tensor a = tensor_rand(N, 51, 1.0), b = tensor_rand(N, 52, 2.0),
                  d = tensor_rand(N, 53, 1.0);
    struct tensor out = tensor_zeros(N), da = tensor_zeros(N);
    ck_assert_int_eq(ops_cpu_backend()->mul_forward(ops_cpu_backend(), ZT_F32, out.f, a.f, b.f, N),
                     ZT_OK);
    for (int i = 0; i < N; i++)
        out.d[i] = a.d[i] * b.d[i];
    check_close("mul out", out.f, out.d, N, FWD_TOL);
    for (int rep = 1; rep <= 2; rep++) { /* accumulates */
        ck_assert_int_eq(
            ops_cpu_backend()->mul_backward(ops_cpu_backend(), ZT_F32, da.f, b.f, d.f, N), ZT_OK);
        for (int i = 0; i < N; i++)
            da.d[i] = rep * b.d[i] * d.d[i];
        check_close("mul da", da.f, da.d, N, FWD_TOL);
    }
    struct tensor *all[] = {&a, &b, &d, &out, &da};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tensor_free(all[i]);
}
END_TEST

/* ---- attention ---- */

/* The fused op keeps no probabilities: its forward is judged on out and
 * lse against the double loop above, its backward against a double
 * backward written here from the full softmax (P, dP = dO V^T, dS = P o
 * (dP - rowsum(P o dP))), and, on the small cases below, against finite
 * differences too. Both use ATTENTION_FP32_TOL (worker/ops.h). */

/* lse[B,NH,T]: each row's log-sum-exp of its scaled causal scores. */
static void ref_attention_lse(double *lse, const double *qkv, int B, int T, int NH, int NKV, int hs)
{
    const int ld = (NH + 2 * NKV) * hs, g = NH / NKV;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = qkv + ((size_t)b * T + i) * ld + h * hs;
                double m = -INFINITY, s = 0.0, *sc = malloc((size_t)(i + 1) * sizeof *sc);
                ck_assert_ptr_nonnull(sc);
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * ld + (NH + h / g) * hs;
                    sc[j] = dot(q, k, hs) / sqrt((double)hs);
                    m = fmax(m, sc[j]);
                }
                for (int j = 0; j <= i; j++)
                    s += exp(sc[j] - m);
                lse[((size_t)b * NH + h) * T + i] = m + log(s);
                free(sc);
            }
}

/* dqkv += the gradient of sum(out * dout) w.r.t. qkv, through the full
 * T x T softmax of each head, in double. */
static void ref_attention_backward(double *dqkv, const double *dout, const double *qkv, int B,
                                   int T, int NH, int NKV, int hs)
{
    const int ld = (NH + 2 * NKV) * hs, ldo = NH * hs, g = NH / NKV;
    const double scale = 1.0 / sqrt((double)hs);
    double *p = malloc((size_t)T * T * sizeof *p), *dp = malloc((size_t)T * T * sizeof *dp);
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(dp);
#define Q(t)            (qkv + ((size_t)b * T + (t)) * ld + h * hs)
#define K(t)            (qkv + ((size_t)b * T + (t)) * ld + (NH + h / g) * hs)
#define V(t)            (qkv + ((size_t)b * T + (t)) * ld + (NH + NKV + h / g) * hs)
#define DO(t)           (dout + ((size_t)b * T + (t)) * ldo + h * hs)
#define D(base, t, off) (dqkv + ((size_t)b * T + (t)) * ld + (off)*hs)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < T; i++) {
                double m = -INFINITY, s = 0.0, rs = 0.0;
                for (int j = 0; j <= i; j++) {
                    p[i * T + j] = dot(Q(i), K(j), hs) * scale;
                    m = fmax(m, p[i * T + j]);
                }
                for (int j = 0; j <= i; j++)
                    s += p[i * T + j] = exp(p[i * T + j] - m);
                for (int j = 0; j <= i; j++) {
                    p[i * T + j] /= s;
                    dp[i * T + j] = dot(DO(i), V(j), hs);
                    rs += p[i * T + j] * dp[i * T + j];
                }
                for (int j = 0; j <= i; j++) /* now dS, the scores' gradient */
                    dp[i * T + j] = p[i * T + j] * (dp[i * T + j] - rs);
            }
            for (int i = 0; i < T; i++)
                for (int j = 0; j <= i; j++)
                    for (int c = 0; c < hs; c++) {
                        D(dqkv, i, h)[c] += scale * dp[i * T + j] * K(j)[c];
                        D(dqkv, j, NH + h / g)[c] += scale * dp[i * T + j] * Q(i)[c];
                        D(dqkv, j, NH + NKV + h / g)[c] += p[i * T + j] * DO(i)[c];
                    }
        }
#undef Q
#undef K
#undef V
#undef DO
#undef D
    free(p);
    free(dp);
}

/* B T NH NKV hs: the cases small enough for finite differences. GPT-2's
 * case NKV == NH: head size 4, T = 1, T past the 64-row tile, head size 5.
 * Then grouped-query heads, all with T = 70: two query heads per
 * key/value head, all four sharing one, and NKV == NH again with four
 * heads. */
static const int ATT_SIZES[][5] = {{2, 5, 3, 3, 4}, {1, 1, 2, 2, 3},  {1, 70, 2, 2, 4},
                                   {2, 3, 4, 4, 5}, {1, 70, 4, 2, 4}, {2, 70, 4, 1, 3},
                                   {1, 70, 4, 4, 3}};
enum { ATT_GQA = 4 }; /* the first grouped case: NH = 4, NKV = 2, T = 70 */

/* The larger grid, judged against the double forward and backward: query
 * heads per key/value head g in {1, 2, 4} (NKV = 2), T in {1, 7, 33, 130,
 * 300} (one query tile, partial tiles, past two, and past the CPU's
 * 256-key tile, where the online softmax rescales), hs in {8, 16, 64};
 * case i is g = ATT_G[i / 15], T = ATT_T[i / 3 % 5], hs = ATT_HS[i % 3]. */
static const int ATT_G[] = {1, 2, 4}, ATT_T[] = {1, 7, 33, 130, 300}, ATT_HS[] = {8, 16, 64};
enum { ATT_GRID = 45, ATT_THREADS = 44 /* g 4, T 300, hs 64 */ };

struct att_case {
    int B, T, NH, NKV, hs;
    struct tensor qkv, out, lse, r, dqkv;
};

static struct att_case att_make(int B, int T, int NH, int NKV, int hs)
{
    struct att_case a = {.B = B, .T = T, .NH = NH, .NKV = NKV, .hs = hs};
    int rows = a.B * a.T, n = rows * a.NH * a.hs, nl = a.B * a.NH * a.T;
    int nqkv = rows * (a.NH + 2 * a.NKV) * a.hs;
    /* logits of a few units: a peaked softmax (q . k / sqrt(hs) has a
     * deviation of 1.5^2 / 3 at any hs) */
    a.qkv = tensor_rand(nqkv, 41, 1.5);
    a.r = tensor_rand(n, 42, 1.0);
    a.out = tensor_zeros(n);
    a.lse = tensor_zeros(nl);
    a.dqkv = tensor_zeros(nqkv);
    return a;
}

static struct att_case att_setup(int which)
{
    const int *z = ATT_SIZES[which];
    return att_make(z[0], z[1], z[2], z[3], z[4]);
}

static struct att_case att_grid_setup(int i)
{
    const int g = ATT_G[i / 15], T = ATT_T[i / 3 % 5], hs = ATT_HS[i % 3];
    return att_make(2, T, 2 * g, 2, hs);
}

static void att_teardown(struct att_case *a)
{
    struct tensor *all[] = {&a->qkv, &a->out, &a->lse, &a->r, &a->dqkv};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tensor_free(all[i]);
}

static void att_forward(struct att_case *a)
{
    ck_assert_int_eq(ops_cpu_backend()->attention_forward(ops_cpu_backend(), ZT_F32, a->out.f,
                                                          a->lse.f, a->qkv.f, a->B, a->T, a->NH,
                                                          a->NKV, a->hs),
                     ZT_OK);
}

static void att_backward(void *ctx)
{
    struct att_case *a = ctx;
    ck_assert_int_eq(ops_cpu_backend()->attention_backward(ops_cpu_backend(), ZT_F32, a->dqkv.f,
                                                           a->r.f, a->qkv.f, a->out.f, a->lse.f,
                                                           a->B, a->T, a->NH, a->NKV, a->hs),
                     ZT_OK);
}

static double att_objective(void *ctx)
{
    struct att_case *a = ctx;
    ref_attention(a->out.d, NULL, a->qkv.d, a->B, a->T, a->NH, a->NKV, a->hs);
    return dot(a->out.d, a->r.d, a->out.n);
}

/* Forward into buffers of NaN (all must be overwritten): out and lse
 * against the double loop, lse on the scale max(1, max |lse|). */
static void check_attention_forward(struct att_case *a)
{
    for (int i = 0; i < a->out.n; i++)
        a->out.f[i] = NAN;
    for (int i = 0; i < a->lse.n; i++)
        a->lse.f[i] = NAN;
    att_forward(a);
    ref_attention(a->out.d, NULL, a->qkv.d, a->B, a->T, a->NH, a->NKV, a->hs);
    ref_attention_lse(a->lse.d, a->qkv.d, a->B, a->T, a->NH, a->NKV, a->hs);
    check_close("attention out", a->out.f, a->out.d, a->out.n, ATTENTION_FP32_TOL);
    const double scale = fmax(1.0, max_abs(a->lse.d, a->lse.n));
    for (int i = 0; i < a->lse.n; i++)
        ck_assert_msg(fabs(a->lse.f[i] - a->lse.d[i]) <= ATTENTION_FP32_TOL * scale,
                      "attention lse[%d]: got %.9g, want %.9g", i, (double)a->lse.f[i],
                      a->lse.d[i]);
}

START_TEST(attention_forward_matches_reference)
{
    struct att_case a = att_setup(_i);
    check_attention_forward(&a);
    att_teardown(&a);
}
END_TEST

START_TEST(attention_backward_matches_finite_differences)
{
    struct att_case a = att_setup(_i);
    att_forward(&a);
    att_backward(&a);
    check_gradient("attention dqkv", att_objective, &a, a.qkv.d, a.dqkv.f, a.qkv.n);
    att_teardown(&a);
}
END_TEST

/* The grid: forward, then the backward onto a random dqkv (it adds)
 * against the double backward onto the same. */
START_TEST(attention_matches_double_reference)
{
    struct att_case a = att_grid_setup(_i);
    check_attention_forward(&a);
    for (int i = 0; i < a.dqkv.n; i++) {
        a.dqkv.f[i] = (float)(0.01 * sin(i));
        a.dqkv.d[i] = a.dqkv.f[i];
    }
    att_backward(&a);
    ref_attention_backward(a.dqkv.d, a.r.d, a.qkv.d, a.B, a.T, a.NH, a.NKV, a.hs);
    char what[96];
    snprintf(what, sizeof what, "attention dqkv T=%d NH=%d NKV=%d hs=%d", a.T, a.NH, a.NKV, a.hs);
    check_close(what, a.dqkv.f, a.dqkv.d, a.dqkv.n, ATTENTION_FP32_TOL);
    att_teardown(&a);
}
END_TEST

/* One and two threads give the same out, lse and dqkv, bit for bit. */
START_TEST(attention_is_bitwise_thread_independent)
{
    struct att_case a = att_grid_setup(ATT_THREADS);
    float *first = NULL;
    const int n = a.out.n + a.lse.n + a.dqkv.n;
    for (int threads = 1; threads <= 2; threads++) {
        ops_cpu_set_threads(threads);
        memset(a.dqkv.f, 0, (size_t)a.dqkv.n * sizeof(float));
        att_forward(&a);
        att_backward(&a);
        float *got = malloc((size_t)n * sizeof *got);
        ck_assert_ptr_nonnull(got);
        memcpy(got, a.out.f, (size_t)a.out.n * sizeof(float));
        memcpy(got + a.out.n, a.lse.f, (size_t)a.lse.n * sizeof(float));
        memcpy(got + a.out.n + a.lse.n, a.dqkv.f, (size_t)a.dqkv.n * sizeof(float));
        if (first) {
            ck_assert_msg(memcmp(first, got, (size_t)n * sizeof(float)) == 0,
                          "attention differs on %d threads", threads);
            free(got);
        } else {
            first = got;
        }
    }
    ops_cpu_set_threads(1);
    free(first);
    att_teardown(&a);
}
END_TEST

START_TEST(attention_backward_accumulates)
{
    struct att_case a = att_setup(ATT_GQA);
    att_forward(&a);
    check_accumulates(att_backward, &a, &(struct grad){"attention dqkv", a.dqkv.f, a.dqkv.n}, 1);
    att_teardown(&a);
}
END_TEST

/* Rewriting the key and value of token j leaves the outputs of every
 * earlier token bit for bit unchanged, and changes token j's own. */
START_TEST(attention_is_causal)
{
    struct att_case a = att_setup(ATT_GQA); /* T = 70: j in the second and third query blocks */
    int T = a.T, C = a.NH * a.hs, ld = (a.NH + 2 * a.NKV) * a.hs;
    att_forward(&a);
    float *before = malloc((size_t)a.out.n * sizeof *before);
    ck_assert_ptr_nonnull(before);
    memcpy(before, a.out.f, (size_t)a.out.n * sizeof(float));
    for (int j = T - 1; j >= 1; j -= 23) {
        for (int c = C; c < ld; c++) /* k and v of token j */
            a.qkv.f[(size_t)j * ld + c] += 0.75f;
        att_forward(&a);
        ck_assert_msg(memcmp(before, a.out.f, (size_t)j * C * sizeof(float)) == 0,
                      "changing token %d's k/v changed an earlier output", j);
        ck_assert_msg(
            memcmp(before + (size_t)j * C, a.out.f + (size_t)j * C, (size_t)C * sizeof(float)) != 0,
            "changing token %d's k/v did not change its own output", j);
        memcpy(before, a.out.f, (size_t)a.out.n * sizeof(float));
    }
    free(before);
    att_teardown(&a);
}
END_TEST

/* ---- rotary position embedding ---- */

/* B T n_heads hs row_stride theta: extra columns past the heads; no extra
 * columns; hs = 2 at T = 1; the query heads inside a grouped qkv row
 * (NH = 4, NKV = 2) at T = 70 and Llama 3's theta; hs / 2 odd. */
static const struct {
    int B, T, n_heads, hs, stride;
    double theta;
} ROPE_SIZES[] = {{2, 5, 3, 8, 29, 1e4},
                  {1, 9, 2, 6, 12, 5e5},
                  {1, 1, 1, 2, 3, 1e4},
                  {2, 70, 4, 4, 32, 5e5},
                  {3, 4, 2, 10, 30, 1e4}};

struct rope_case {
    int B, T, n_heads, hs, stride;
    struct tensor x, cs, sn, r;
};

/* The tables from theta in double (the float copy is what the op gets). */
static struct rope_case rope_setup(int which)
{
    struct rope_case p = {.B = ROPE_SIZES[which].B,
                          .T = ROPE_SIZES[which].T,
                          .n_heads = ROPE_SIZES[which].n_heads,
                          .hs = ROPE_SIZES[which].hs,
                          .stride = ROPE_SIZES[which].stride};
    int half = p.hs / 2, n = p.B * p.T * p.stride;
    p.x = tensor_rand(n, 91, 1.0);
    p.r = tensor_rand(n, 92, 1.0);
    p.cs = tensor_zeros(p.T * half);
    p.sn = tensor_zeros(p.T * half);
    for (int t = 0; t < p.T; t++)
        for (int i = 0; i < half; i++) {
            double angle = t * pow(ROPE_SIZES[which].theta, -2.0 * i / p.hs);
            p.cs.d[t * half + i] = cos(angle);
            p.sn.d[t * half + i] = sin(angle);
            p.cs.f[t * half + i] = (float)p.cs.d[t * half + i];
            p.sn.f[t * half + i] = (float)p.sn.d[t * half + i];
        }
    return p;
}

static void rope_teardown(struct rope_case *p)
{
    struct tensor *all[] = {&p->x, &p->cs, &p->sn, &p->r};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tensor_free(all[i]);
}

/* out = the rotation of x, Hugging Face's apply_rotary_pos_emb:
 * x * cos + rotate_half(x) * sin, rotate_half(x1, x2) = (-x2, x1). */
static void ref_rope(double *out, const double *x, const struct rope_case *p)
{
    int half = p->hs / 2;
    memcpy(out, x, (size_t)p->x.n * sizeof *out);
    for (int r = 0; r < p->B * p->T; r++)
        for (int h = 0; h < p->n_heads; h++)
            for (int i = 0; i < p->hs; i++) {
                int t = r % p->T, k = i % half, at = r * p->stride + h * p->hs;
                double rot = i < half ? -x[at + i + half] : x[at + i - half];
                out[at + i] = x[at + i] * p->cs.d[t * half + k] + rot * p->sn.d[t * half + k];
            }
}

static double rope_objective(void *ctx)
{
    struct rope_case *p = ctx;
    double *y = malloc((size_t)p->x.n * sizeof *y);
    ck_assert_ptr_nonnull(y);
    ref_rope(y, p->x.d, p);
    double l = dot(y, p->r.d, p->x.n);
    free(y);
    return l;
}

static void rope_apply(struct rope_case *p, float *x, int backward)
{
    const struct ops_backend *b = ops_cpu_backend();
    ck_assert_int_eq((backward ? b->rope_backward : b->rope_forward)(
                         b, ZT_F32, x, p->cs.f, p->sn.f, p->B, p->T, p->n_heads, p->hs, p->stride),
                     ZT_OK);
}

/* Also: the columns past the heads keep their bits. */
START_TEST(rope_forward_matches_reference)
{
    struct rope_case p = rope_setup(_i);
    struct tensor want = tensor_zeros(p.x.n);
    rope_apply(&p, p.x.f, 0);
    ref_rope(want.d, p.x.d, &p);
    check_close("rope out", p.x.f, want.d, p.x.n, FWD_TOL);
    int heads = p.n_heads * p.hs;
    for (int r = 0; r < p.B * p.T; r++)
        for (int c = heads; c < p.stride; c++)
            ck_assert_msg(p.x.f[r * p.stride + c] == (float)p.x.d[r * p.stride + c],
                          "rope changed column %d past the heads", c);
    tensor_free(&want);
    rope_teardown(&p);
}
END_TEST

/* The backward is the transpose: <R x, y> = <x, R^T y> for random x, y,
 * and R^T R x = x (a rotation's transpose is its inverse). */
START_TEST(rope_backward_is_the_transpose)
{
    struct rope_case p = rope_setup(_i);
    struct tensor rx = tensor_rand(p.x.n, 91, 1.0), rty = tensor_rand(p.x.n, 92, 1.0);
    rope_apply(&p, rx.f, 0);
    rope_apply(&p, rty.f, 1);
    for (int i = 0; i < p.x.n; i++) {
        rx.d[i] = rx.f[i];
        rty.d[i] = rty.f[i];
    }
    double lhs = dot(rx.d, p.r.d, p.x.n), rhs = dot(p.x.d, rty.d, p.x.n);
    double scale = sqrt(dot(p.x.d, p.x.d, p.x.n) * dot(p.r.d, p.r.d, p.x.n));
    ck_assert_msg(fabs(lhs - rhs) <= 1e-6 * scale, "<Rx, y> = %.9g but <x, R^T y> = %.9g", lhs,
                  rhs);
    rope_apply(&p, rx.f, 1);
    check_close("rope R^T R x", rx.f, p.x.d, p.x.n, FWD_TOL);
    tensor_free(&rx);
    tensor_free(&rty);
    rope_teardown(&p);
}
END_TEST

/* dout replaced in place by the gradient of L = <rope(x), dout>. */
START_TEST(rope_backward_matches_finite_differences)
{
    struct rope_case p = rope_setup(_i);
    struct tensor g = tensor_rand(p.x.n, 92, 1.0); /* = r */
    rope_apply(&p, g.f, 1);
    check_gradient("rope dx", rope_objective, &p, p.x.d, g.f, p.x.n);
    tensor_free(&g);
    rope_teardown(&p);
}
END_TEST

/* ---- gelu and residual ---- */

static const int GELU_SIZES[] = {1, 3, 37};

struct gelu_case {
    int N;
    struct tensor x, out, r, dx;
};

static struct gelu_case gelu_setup(int which)
{
    struct gelu_case g = {.N = GELU_SIZES[which]};
    g.x = tensor_rand(g.N, 51, 4.0);
    g.r = tensor_rand(g.N, 52, 1.0);
    g.out = tensor_zeros(g.N);
    g.dx = tensor_zeros(g.N);
    return g;
}

static void gelu_teardown(struct gelu_case *g)
{
    tensor_free(&g->x);
    tensor_free(&g->out);
    tensor_free(&g->r);
    tensor_free(&g->dx);
}

static double gelu_objective(void *ctx)
{
    struct gelu_case *g = ctx;
    double s = 0.0;
    for (int i = 0; i < g->N; i++)
        s += ref_gelu(g->x.d[i]) * g->r.d[i];
    return s;
}

static void gelu_backward(void *ctx)
{
    struct gelu_case *g = ctx;
    ck_assert_int_eq(
        ops_cpu_backend()->gelu_backward(ops_cpu_backend(), ZT_F32, g->dx.f, g->x.f, g->r.f, g->N),
        ZT_OK);
}

START_TEST(gelu_forward_matches_reference)
{
    struct gelu_case g = gelu_setup(_i);
    ck_assert_int_eq(
        ops_cpu_backend()->gelu_forward(ops_cpu_backend(), ZT_F32, g.out.f, g.x.f, g.N), ZT_OK);
    for (int i = 0; i < g.N; i++)
        g.out.d[i] = ref_gelu(g.x.d[i]);
    check_close("gelu out", g.out.f, g.out.d, g.N, FWD_TOL);
    gelu_teardown(&g);
}
END_TEST

/* Elementwise relative accuracy, including the negative tail where
 * 0.5 x (1 + tanh u) cancels in float (at x = -5.5, 1 + tanh u is 8e-9,
 * below float's spacing near 1). The double reference itself is good to
 * 3e-8 there and loses digits below x = -5.5, where the check stops. The
 * result's sensitivity to rounding in u is |2u| (e^(-2u) amplifies it),
 * which no float evaluation escapes; the bound allows 3 ulp per unit of
 * 2 + |2u|. Far out (x = -30) the value must just be a tiny non-positive. */
START_TEST(gelu_forward_is_accurate_elementwise)
{
    enum { N = 2101 };
    float x[N], y[N];
    for (int i = 0; i < N; i++)
        x[i] = -5.5f + 17.5f * (float)i / (N - 1);
    x[0] = -30.0f;
    ck_assert_int_eq(ops_cpu_backend()->gelu_forward(ops_cpu_backend(), ZT_F32, y, x, N), ZT_OK);
    ck_assert_msg(y[0] <= 0.0f && y[0] > -1e-30f, "gelu(-30) = %g", (double)y[0]);
    for (int i = 1; i < N; i++) {
        double u = sqrt(2.0 / PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i]);
        double want = ref_gelu(x[i]), tol = 3.0 * 0x1p-24 * (2.0 + fabs(2.0 * u)) * fabs(want);
        ck_assert_msg(fabs(y[i] - want) <= tol, "gelu(%.9g) = %.9g, want %.9g", (double)x[i],
                      (double)y[i], want);
    }
}
END_TEST

START_TEST(gelu_backward_matches_finite_differences)
{
    struct gelu_case g = gelu_setup(_i);
    gelu_backward(&g);
    check_gradient("gelu dinp", gelu_objective, &g, g.x.d, g.dx.f, g.N);
    gelu_teardown(&g);
}
END_TEST

START_TEST(gelu_backward_accumulates)
{
    struct gelu_case g = gelu_setup(2);
    check_accumulates(gelu_backward, &g, &(struct grad){"gelu dinp", g.dx.f, g.N}, 1);
    gelu_teardown(&g);
}
END_TEST

START_TEST(residual_forward_adds)
{
    struct tensor a = tensor_rand(37, 61, 3.0), b = tensor_rand(37, 62, 3.0), o = tensor_zeros(37);
    ck_assert_int_eq(
        ops_cpu_backend()->residual_forward(ops_cpu_backend(), ZT_F32, o.f, a.f, b.f, 37), ZT_OK);
    for (int i = 0; i < 37; i++)
        ck_assert_float_eq(o.f[i], (float)(a.d[i] + b.d[i]));
    tensor_free(&a);
    tensor_free(&b);
    tensor_free(&o);
}
END_TEST

/* ---- swiglu ---- */

static const int SWIGLU_SIZES[][2] = {{3, 5}, {1, 1}, {4, 37}}; /* N I */

struct swiglu_case {
    int N, I;
    struct tensor gu, out, r, dgu;
};

static struct swiglu_case swiglu_setup(int which)
{
    struct swiglu_case w = {.N = SWIGLU_SIZES[which][0], .I = SWIGLU_SIZES[which][1]};
    w.gu = tensor_rand(w.N * 2 * w.I, 101, 4.0);
    w.r = tensor_rand(w.N * w.I, 102, 1.0);
    w.out = tensor_zeros(w.N * w.I);
    w.dgu = tensor_zeros(w.N * 2 * w.I);
    return w;
}

static void swiglu_teardown(struct swiglu_case *w)
{
    tensor_free(&w->gu);
    tensor_free(&w->out);
    tensor_free(&w->r);
    tensor_free(&w->dgu);
}

/* silu(g) = g sigmoid(g), in the form that stays finite for either sign. */
static double ref_silu(double g)
{
    return g >= 0.0 ? g / (1.0 + exp(-g)) : g * exp(g) / (1.0 + exp(g));
}

static void ref_swiglu(double *out, const double *gu, int N, int I)
{
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++)
            out[n * I + i] = ref_silu(gu[n * 2 * I + i]) * gu[n * 2 * I + I + i];
}

static double swiglu_objective(void *ctx)
{
    struct swiglu_case *w = ctx;
    ref_swiglu(w->out.d, w->gu.d, w->N, w->I);
    return dot(w->out.d, w->r.d, w->out.n);
}

static void swiglu_backward(void *ctx)
{
    struct swiglu_case *w = ctx;
    ck_assert_int_eq(ops_cpu_backend()->swiglu_backward(ops_cpu_backend(), ZT_F32, w->dgu.f, w->r.f,
                                                        w->gu.f, w->N, w->I),
                     ZT_OK);
}

START_TEST(swiglu_forward_matches_reference)
{
    struct swiglu_case w = swiglu_setup(_i);
    ck_assert_int_eq(
        ops_cpu_backend()->swiglu_forward(ops_cpu_backend(), ZT_F32, w.out.f, w.gu.f, w.N, w.I),
        ZT_OK);
    ref_swiglu(w.out.d, w.gu.d, w.N, w.I);
    check_close("swiglu out", w.out.f, w.out.d, w.out.n, FWD_TOL);
    swiglu_teardown(&w);
}
END_TEST

START_TEST(swiglu_backward_matches_finite_differences)
{
    struct swiglu_case w = swiglu_setup(_i);
    swiglu_backward(&w);
    check_gradient("swiglu dgu", swiglu_objective, &w, w.gu.d, w.dgu.f, w.gu.n);
    swiglu_teardown(&w);
}
END_TEST

START_TEST(swiglu_backward_accumulates)
{
    struct swiglu_case w = swiglu_setup(2);
    check_accumulates(swiglu_backward, &w, &(struct grad){"swiglu dgu", w.dgu.f, w.dgu.n}, 1);
    swiglu_teardown(&w);
}
END_TEST

/* Gates from -1e4 to 1e4, past both ends of cpu_expf's range: outputs and
 * gradients finite, and elementwise within 1e-5 relative of silu(g) u and
 * its derivatives, or within 1e-30 where the exact value is itself below
 * float's normal range (silu(-100) = -3.7e-42; the op gives -6e-37). */
START_TEST(swiglu_survives_extreme_gates)
{
    static const float G[] = {-1e4f, -1e3f, -200.0f, -100.0f, -88.7f, -87.5f, -50.0f, -20.0f,
                              -5.0f, -1.0f, -0.25f,  0.0f,    0.25f,  1.0f,   5.0f,   20.0f,
                              50.0f, 87.5f, 88.7f,   100.0f,  200.0f, 1e3f,   1e4f};
    enum { I = sizeof G / sizeof G[0] };
    float gu[2 * I], out[I], dout[I], dgu[2 * I];
    memset(dgu, 0, sizeof dgu);
    for (int i = 0; i < I; i++) {
        gu[i] = G[i];
        gu[I + i] = 0.5f;
        dout[i] = 1.0f;
    }
    ck_assert_int_eq(ops_cpu_backend()->swiglu_forward(ops_cpu_backend(), ZT_F32, out, gu, 1, I),
                     ZT_OK);
    ck_assert_int_eq(
        ops_cpu_backend()->swiglu_backward(ops_cpu_backend(), ZT_F32, dgu, dout, gu, 1, I), ZT_OK);
    for (int i = 0; i < I; i++) {
        /* sigmoid(g) and 1 - sigmoid(g), each without cancellation */
        double g = G[i], e = exp(-fabs(g));
        double sg = g >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
        double om = g >= 0.0 ? e / (1.0 + e) : 1.0 / (1.0 + e);
        double want[3] = {0.5 * ref_silu(g), 0.5 * sg * (1.0 + g * om), ref_silu(g)};
        float got[3] = {out[i], dgu[i], dgu[I + i]};
        for (int k = 0; k < 3; k++)
            ck_assert_msg(isfinite(got[k]) &&
                              fabs(got[k] - want[k]) <= 1e-5 * fabs(want[k]) + 1e-30,
                          "swiglu at g = %g: %s = %.9g, want %.9g", g,
                          k == 0   ? "out"
                          : k == 1 ? "dgate"
                                   : "dup",
                          (double)got[k], want[k]);
    }
}
END_TEST

/* ---- cross-entropy ---- */

/* N V: V = 1, and V past the 512-term summation block. */
static const int XENT_SIZES[][2] = {{3, 11}, {4, 5}, {1, 1}, {2, 700}};
static const float XENT_DLOSS = 0.37f;

struct xent_case {
    int N, V;
    int32_t *tgt;
    struct tensor logits, probs, losses, dlogits;
};

static struct xent_case xent_setup(int which)
{
    struct xent_case x = {.N = XENT_SIZES[which][0], .V = XENT_SIZES[which][1]};
    x.tgt = random_ids(x.N, x.V, 71);
    x.logits = tensor_rand(x.N * x.V, 72, 4.0);
    for (int i = 0; i < x.logits.n; i++) /* large logits: the max must be subtracted */
        x.logits.d[i] = x.logits.f[i] += 60.0f;
    x.probs = tensor_zeros(x.N * x.V);
    x.losses = tensor_zeros(x.N);
    x.dlogits = tensor_zeros(x.N * x.V);
    return x;
}

static void xent_teardown(struct xent_case *x)
{
    free(x->tgt);
    tensor_free(&x->logits);
    tensor_free(&x->probs);
    tensor_free(&x->losses);
    tensor_free(&x->dlogits);
}

static void xent_forward(struct xent_case *x)
{
    ck_assert_int_eq(ops_cpu_backend()->crossentropy_forward(ops_cpu_backend(), ZT_F32, x->losses.f,
                                                             x->probs.f, x->logits.f, x->tgt, x->N,
                                                             x->V),
                     ZT_OK);
}

static void xent_backward(void *ctx)
{
    struct xent_case *x = ctx;
    ck_assert_int_eq(ops_cpu_backend()->crossentropy_backward(ops_cpu_backend(), ZT_F32,
                                                              x->dlogits.f, x->probs.f, x->tgt,
                                                              XENT_DLOSS, x->N, x->V),
                     ZT_OK);
}

/* L = dloss * sum of the losses: the backward's scalar dloss is R. */
static double xent_objective(void *ctx)
{
    struct xent_case *x = ctx;
    return XENT_DLOSS * ref_crossentropy(x->losses.d, NULL, x->logits.d, x->tgt, x->N, x->V);
}

START_TEST(crossentropy_forward_matches_reference)
{
    struct xent_case x = xent_setup(_i);
    xent_forward(&x);
    ref_crossentropy(x.losses.d, x.probs.d, x.logits.d, x.tgt, x.N, x.V);
    check_close("crossentropy probs", x.probs.f, x.probs.d, x.probs.n, FWD_TOL);
    for (int i = 0; i < x.N; i++) /* losses may be near 0: absolute on an O(1) scale */
        ck_assert_double_eq_tol(x.losses.f[i], x.losses.d[i], FWD_TOL * fmax(1.0, x.losses.d[i]));
    xent_teardown(&x);
}
END_TEST

START_TEST(crossentropy_backward_matches_finite_differences)
{
    struct xent_case x = xent_setup(_i == 2 ? 0 : _i); /* V = 1 has no gradient to check */
    xent_forward(&x);
    xent_backward(&x);
    check_gradient("crossentropy dlogits", xent_objective, &x, x.logits.d, x.dlogits.f, x.logits.n);
    xent_teardown(&x);
}
END_TEST

START_TEST(crossentropy_backward_accumulates)
{
    struct xent_case x = xent_setup(0);
    xent_forward(&x);
    check_accumulates(xent_backward, &x,
                      &(struct grad){"crossentropy dlogits", x.dlogits.f, x.dlogits.n}, 1);
    xent_teardown(&x);
}
END_TEST

/* Masked rows (target -1): every other row (_i 0) or every row (_i 1):
 * loss 0 and no gradient, the others as the reference. */
START_TEST(crossentropy_masked_rows_are_not_counted)
{
    struct xent_case x = xent_setup(0);
    for (int i = 0; i < x.N; i++)
        if (_i == 1 || i % 2 == 0)
            x.tgt[i] = -1;
    xent_forward(&x);
    ref_crossentropy(x.losses.d, x.probs.d, x.logits.d, x.tgt, x.N, x.V);
    check_close("masked crossentropy probs", x.probs.f, x.probs.d, x.probs.n, FWD_TOL);
    for (int i = 0; i < x.N; i++)
        ck_assert_double_eq_tol(x.losses.f[i], x.losses.d[i], FWD_TOL * fmax(1.0, x.losses.d[i]));
    xent_backward(&x);
    if (_i == 0) /* all masked: nothing to differentiate, all zero below */
        check_gradient("masked crossentropy dlogits", xent_objective, &x, x.logits.d, x.dlogits.f,
                       x.logits.n);
    for (int i = 0; i < x.N; i++)
        for (int j = 0; j < x.V && x.tgt[i] < 0; j++)
            ck_assert_float_eq(x.dlogits.f[(size_t)i * x.V + j], 0.0f);
    xent_teardown(&x);
}
END_TEST

/* A target whose probability underflows float still gets its exact loss
 * (the log-sum-exp), not -log(0). */
START_TEST(crossentropy_loss_survives_underflow)
{
    float logits[4] = {100.0f, -100.0f, 99.0f, 0.0f}, probs[4], loss;
    int32_t target = 1;
    ck_assert_int_eq(ops_cpu_backend()->crossentropy_forward(ops_cpu_backend(), ZT_F32, &loss,
                                                             probs, logits, &target, 1, 4),
                     ZT_OK);
    double want = log(1.0 + exp(-1.0) + exp(-100.0)) + 200.0;
    ck_assert_double_eq_tol(loss, want, 1e-5 * want);
    ck_assert_double_eq_tol(probs[0] + probs[2], 1.0, 1e-6);
}
END_TEST

/* ---- vocabulary-parallel embedding and cross-entropy ---- */

/* A vocabulary V and the widths of its parts (0-terminated): one part,
 * uneven parts, parts one column wide, and parts past the 512-term
 * summation block. The reductions between the ops are simulated here, in
 * part order: MAX of row_max, SUM of row_stats. */
static const int VOCAB_SPLITS[][5] = {
    {37, 37}, {37, 12, 13, 12}, {37, 1, 20, 15, 1}, {700, 700}, {700, 600, 100}};
enum { VOCAB_MAX_PARTS = 4, XV_N = 7 };
static const int VOCAB_ONE_PART[] = {0, 3}; /* the splits into one part */

struct vocab_split {
    int V, n, lo[VOCAB_MAX_PARTS], w[VOCAB_MAX_PARTS];
};

static struct vocab_split vocab_split(int which)
{
    struct vocab_split s = {.V = VOCAB_SPLITS[which][0]};
    int lo = 0;
    for (int k = 1; k <= VOCAB_MAX_PARTS && VOCAB_SPLITS[which][k] > 0; k++) {
        s.lo[s.n] = lo;
        s.w[s.n] = VOCAB_SPLITS[which][k];
        lo += s.w[s.n++];
    }
    ck_assert_int_eq(lo, s.V);
    return s;
}

/* Columns [lo, lo + w) of the rows of x[N,V], as a new [N,w] matrix (its
 * own allocation, so that the sanitizer build sees any read past a part). */
static float *columns(const float *x, int N, int V, int lo, int w)
{
    float *part = malloc((size_t)N * w * sizeof *part);
    ck_assert_ptr_nonnull(part);
    for (int i = 0; i < N; i++)
        memcpy(part + (size_t)i * w, x + (size_t)i * V + lo, (size_t)w * sizeof *part);
    return part;
}

/* The inverse: part[N,w] into columns [lo, lo + w) of x[N,V]. */
static void put_columns(float *x, const float *part, int N, int V, int lo, int w)
{
    for (int i = 0; i < N; i++)
        memcpy(x + (size_t)i * V + lo, part + (size_t)i * w, (size_t)w * sizeof *part);
}

struct xvocab_case {
    struct vocab_split s;
    int N;
    int32_t *tgt;
    /* full [N,V] matrices: .d the references, .f the parts put together */
    struct tensor logits, probs, losses, dlogits;
    float *logit_part[VOCAB_MAX_PARTS], *prob_part[VOCAB_MAX_PARTS];
    float *dlogit_part[VOCAB_MAX_PARTS], *loss_part[VOCAB_MAX_PARTS];
};

/* Rows 0 and 4 masked; the other five take, part by part in turn, the
 * part's first column and then its last, so that every part owns a target
 * and targets sit on the part edges. dlogits start nonzero (accumulation). */
static struct xvocab_case xvocab_setup(int which)
{
    struct xvocab_case x = {.s = vocab_split(which), .N = XV_N};
    int N = x.N, V = x.s.V;
    x.tgt = malloc((size_t)N * sizeof *x.tgt);
    ck_assert_ptr_nonnull(x.tgt);
    for (int i = 0, k = 0; i < N; i++) {
        if (i == 0 || i == 4) {
            x.tgt[i] = -1;
            continue;
        }
        int p = k % x.s.n;
        x.tgt[i] = x.s.lo[p] + ((k / x.s.n) % 2 == 0 ? 0 : x.s.w[p] - 1);
        k++;
    }
    x.logits = tensor_rand(N * V, 91, 4.0);
    for (int i = 0; i < x.logits.n; i++) /* large logits: the max must be subtracted */
        x.logits.d[i] = x.logits.f[i] += 60.0f;
    x.probs = tensor_zeros(N * V);
    x.losses = tensor_zeros(N);
    x.dlogits = tensor_rand(N * V, 92, 1.0);
    for (int p = 0; p < x.s.n; p++) {
        x.logit_part[p] = columns(x.logits.f, N, V, x.s.lo[p], x.s.w[p]);
        x.dlogit_part[p] = columns(x.dlogits.f, N, V, x.s.lo[p], x.s.w[p]);
        x.prob_part[p] = malloc((size_t)N * x.s.w[p] * sizeof(float));
        x.loss_part[p] = malloc((size_t)N * sizeof(float));
        ck_assert_ptr_nonnull(x.prob_part[p]);
        ck_assert_ptr_nonnull(x.loss_part[p]);
    }
    return x;
}

static void xvocab_teardown(struct xvocab_case *x)
{
    free(x->tgt);
    tensor_free(&x->logits);
    tensor_free(&x->probs);
    tensor_free(&x->losses);
    tensor_free(&x->dlogits);
    for (int p = 0; p < x->s.n; p++) {
        free(x->logit_part[p]);
        free(x->prob_part[p]);
        free(x->dlogit_part[p]);
        free(x->loss_part[p]);
    }
}

/* The three forward ops on every part with the reductions between them;
 * losses.f and probs.f receive part 0's losses and all parts' probs. */
static void xvocab_forward(struct xvocab_case *x)
{
    const struct ops_backend *ops = ops_cpu_backend();
    const struct vocab_split *s = &x->s;
    int N = x->N;
    float row_max[XV_N], stats[2 * XV_N], part_max[XV_N], part_stats[2 * XV_N];
    for (int i = 0; i < N; i++)
        row_max[i] = -INFINITY;
    for (int p = 0; p < s->n; p++) {
        ck_assert_int_eq(ops->crossentropy_vocab_max(ops, ZT_F32, part_max, x->logit_part[p], N,
                                                     s->w[p], s->w[p]),
                         ZT_OK);
        for (int i = 0; i < N; i++) {
            /* exact: the softmax would hide a wrong max until e^x overflowed */
            double m = -INFINITY;
            for (int j = 0; j < s->w[p]; j++)
                m = fmax(m, x->logits.d[(size_t)i * s->V + s->lo[p] + j]);
            ck_assert_float_eq(part_max[i], (float)m);
            row_max[i] = fmaxf(row_max[i], part_max[i]);
        }
    }
    memset(stats, 0, sizeof stats);
    for (int p = 0; p < s->n; p++) {
        ck_assert_int_eq(ops->crossentropy_vocab_exp(ops, ZT_F32, x->prob_part[p], part_stats,
                                                     x->logit_part[p], row_max, x->tgt, N, s->w[p],
                                                     s->w[p], s->lo[p]),
                         ZT_OK);
        for (int i = 0; i < 2 * N; i++)
            stats[i] += part_stats[i];
    }
    for (int p = 0; p < s->n; p++) {
        ck_assert_int_eq(ops->crossentropy_vocab_finish(ops, ZT_F32, x->loss_part[p],
                                                        x->prob_part[p], stats, x->tgt, N, s->w[p]),
                         ZT_OK);
        put_columns(x->probs.f, x->prob_part[p], N, s->V, s->lo[p], s->w[p]);
    }
    memcpy(x->losses.f, x->loss_part[0], (size_t)N * sizeof(float));
}

/* The backward on every part; dlogits.f receives the parts put together. */
static void xvocab_backward(struct xvocab_case *x)
{
    const struct vocab_split *s = &x->s;
    for (int p = 0; p < s->n; p++) {
        ck_assert_int_eq(ops_cpu_backend()->crossentropy_vocab_backward(
                             ops_cpu_backend(), ZT_F32, x->dlogit_part[p], x->prob_part[p], x->tgt,
                             XENT_DLOSS, x->N, s->w[p], s->lo[p]),
                         ZT_OK);
        put_columns(x->dlogits.f, x->dlogit_part[p], x->N, s->V, s->lo[p], s->w[p]);
    }
}

/* Each part's probs against the reference softmax of the full rows, judged
 * on the part's own scale; every part gives the same losses, those of the
 * full rows. */
START_TEST(crossentropy_vocab_matches_reference)
{
    struct xvocab_case x = xvocab_setup(_i);
    const struct vocab_split *s = &x.s;
    xvocab_forward(&x);
    ref_crossentropy(x.losses.d, x.probs.d, x.logits.d, x.tgt, x.N, s->V);
    double *want = malloc((size_t)x.probs.n * sizeof *want);
    ck_assert_ptr_nonnull(want);
    for (int p = 0; p < s->n; p++) {
        float *got = columns(x.probs.f, x.N, s->V, s->lo[p], s->w[p]);
        for (int i = 0; i < x.N; i++)
            for (int j = 0; j < s->w[p]; j++)
                want[(size_t)i * s->w[p] + j] = x.probs.d[(size_t)i * s->V + s->lo[p] + j];
        char what[64];
        snprintf(what, sizeof what, "vocab-parallel probs, part %d of %d", p, s->n);
        check_close(what, got, want, x.N * s->w[p], FWD_TOL);
        free(got);
    }
    free(want);
    for (int i = 0; i < x.N; i++) {
        ck_assert_double_eq_tol(x.losses.f[i], x.losses.d[i], FWD_TOL * fmax(1.0, x.losses.d[i]));
        if (x.tgt[i] < 0)
            ck_assert_float_eq(x.losses.f[i], 0.0f);
        for (int p = 1; p < s->n; p++)
            ck_assert_float_eq(x.loss_part[p][i], x.losses.f[i]);
    }
    xvocab_teardown(&x);
}
END_TEST

/* The parts' dlogits put together against the double gradient (p -
 * onehot) * dloss added to their nonzero start; masked rows keep their
 * start exactly. */
START_TEST(crossentropy_vocab_backward_matches_reference)
{
    struct xvocab_case x = xvocab_setup(_i);
    int V = x.s.V;
    xvocab_forward(&x);
    ref_crossentropy(x.losses.d, x.probs.d, x.logits.d, x.tgt, x.N, V);
    xvocab_backward(&x);
    double *want = malloc((size_t)x.dlogits.n * sizeof *want);
    ck_assert_ptr_nonnull(want);
    for (int i = 0; i < x.N; i++)
        for (int j = 0; j < V; j++) {
            size_t k = (size_t)i * V + j;
            double g = x.tgt[i] < 0 ? 0.0 : (x.probs.d[k] - (j == x.tgt[i])) * XENT_DLOSS;
            want[k] = x.dlogits.d[k] + g;
            if (x.tgt[i] < 0)
                ck_assert_float_eq(x.dlogits.f[k], (float)x.dlogits.d[k]);
        }
    check_close("vocab-parallel dlogits", x.dlogits.f, want, x.dlogits.n, FWD_TOL);
    free(want);
    xvocab_teardown(&x);
}
END_TEST

/* One part and no reduction: the fused ops' losses, probs and dlogits. */
START_TEST(crossentropy_vocab_one_part_is_crossentropy)
{
    struct xvocab_case x = xvocab_setup(VOCAB_ONE_PART[_i]);
    int N = x.N, V = x.s.V;
    ck_assert_int_eq(x.s.n, 1);
    float *losses = malloc((size_t)N * sizeof *losses);
    float *probs = malloc((size_t)N * V * sizeof *probs);
    float *dlogits = malloc((size_t)N * V * sizeof *dlogits);
    ck_assert(losses && probs && dlogits);
    memcpy(dlogits, x.dlogits.f, (size_t)N * V * sizeof *dlogits);
    ck_assert_int_eq(ops_cpu_backend()->crossentropy_forward(ops_cpu_backend(), ZT_F32, losses,
                                                             probs, x.logits.f, x.tgt, N, V),
                     ZT_OK);
    ck_assert_int_eq(ops_cpu_backend()->crossentropy_backward(ops_cpu_backend(), ZT_F32, dlogits,
                                                              probs, x.tgt, XENT_DLOSS, N, V),
                     ZT_OK);
    xvocab_forward(&x);
    xvocab_backward(&x);
    double *want = calloc((size_t)N * V, sizeof *want);
    ck_assert_ptr_nonnull(want);
    for (int k = 0; k < N * V; k++)
        want[k] = probs[k];
    check_close("one-part probs", x.probs.f, want, N * V, 1e-6);
    for (int k = 0; k < N * V; k++)
        want[k] = dlogits[k];
    check_close("one-part dlogits", x.dlogits.f, want, N * V, 1e-6);
    for (int i = 0; i < N; i++)
        ck_assert_double_eq_tol(x.losses.f[i], losses[i], 1e-6 * fmax(1.0, losses[i]));
    free(want);
    free(losses);
    free(probs);
    free(dlogits);
    xvocab_teardown(&x);
}
END_TEST

/* A padded vocabulary (worker/tensor_parallel.h): V = 37 true columns
 * padded to Vp, cut into T equal parts; the padding columns hold logits
 * far above the others. The loss must be the unpadded rows' and the
 * padding must get no probability and no gradient. The last case's
 * fourth part is padding only. */
static const int XPAD_CASES[][2] = {{48, 1}, {48, 2}, {48, 4}, {64, 4}}; /* Vp, T */
enum { XPAD_V = 37 };

/* The real columns of part [lo, lo + w) of a vocabulary of V. */
static int real_columns(int V, int lo, int w)
{
    return V - lo < 0 ? 0 : V - lo < w ? V - lo : w;
}

START_TEST(crossentropy_vocab_padding_gets_nothing)
{
    const struct ops_backend *ops = ops_cpu_backend();
    const int N = XV_N, V = XPAD_V, Vp = XPAD_CASES[_i][0], T = XPAD_CASES[_i][1], w = Vp / T;
    int32_t *tgt = random_ids(N, V, 95);
    tgt[2] = -1; /* a masked row */
    tgt[3] = V - 1;
    struct tensor logits = tensor_rand(N * V, 96, 4.0);
    float *padded = malloc((size_t)N * Vp * sizeof *padded);
    float *probs = malloc((size_t)N * Vp * sizeof *probs);
    float *dlogits = calloc((size_t)N * Vp, sizeof *dlogits);
    float *losses = malloc((size_t)N * sizeof *losses);
    double *want_losses = malloc((size_t)N * sizeof *want_losses);
    double *want_probs = malloc((size_t)N * V * sizeof *want_probs);
    ck_assert(padded && probs && dlogits && losses && want_losses && want_probs);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < Vp; j++)
            padded[(size_t)i * Vp + j] = j < V ? logits.f[(size_t)i * V + j] : 1e4f;
    ref_crossentropy(want_losses, want_probs, logits.d, tgt, N, V);

    /* each part's max, exp and finish with the reductions between them */
    float *x[VOCAB_MAX_PARTS], *p[VOCAB_MAX_PARTS], *d[VOCAB_MAX_PARTS];
    float row_max[XV_N], part_max[XV_N], stats[2 * XV_N] = {0}, part_stats[2 * XV_N];
    for (int i = 0; i < N; i++)
        row_max[i] = -INFINITY;
    for (int k = 0; k < T; k++) {
        x[k] = columns(padded, N, Vp, k * w, w);
        p[k] = malloc((size_t)N * w * sizeof *p[k]);
        d[k] = columns(dlogits, N, Vp, k * w, w);
        ck_assert_ptr_nonnull(p[k]);
        ck_assert_int_eq(ops->crossentropy_vocab_max(ops, ZT_F32, part_max, x[k], N, w,
                                                     real_columns(V, k * w, w)),
                         ZT_OK);
        for (int i = 0; i < N; i++)
            row_max[i] = fmaxf(row_max[i], part_max[i]);
    }
    for (int k = 0; k < T; k++) {
        ck_assert_int_eq(ops->crossentropy_vocab_exp(ops, ZT_F32, p[k], part_stats, x[k], row_max,
                                                     tgt, N, w, real_columns(V, k * w, w), k * w),
                         ZT_OK);
        for (int i = 0; i < 2 * N; i++)
            stats[i] += part_stats[i];
    }
    for (int k = 0; k < T; k++) {
        ck_assert_int_eq(
            ops->crossentropy_vocab_finish(ops, ZT_F32, losses, p[k], stats, tgt, N, w), ZT_OK);
        ck_assert_int_eq(
            ops->crossentropy_vocab_backward(ops, ZT_F32, d[k], p[k], tgt, XENT_DLOSS, N, w, k * w),
            ZT_OK);
        put_columns(probs, p[k], N, Vp, k * w, w);
        put_columns(dlogits, d[k], N, Vp, k * w, w);
        free(x[k]);
        free(p[k]);
        free(d[k]);
    }
    for (int i = 0; i < N; i++) {
        ck_assert_double_eq_tol(losses[i], want_losses[i], FWD_TOL * fmax(1.0, want_losses[i]));
        for (int j = 0; j < Vp; j++) {
            const size_t k = (size_t)i * Vp + j;
            if (j >= V) { /* the padding: exactly nothing */
                ck_assert_float_eq(probs[k], 0.0f);
                ck_assert_float_eq(dlogits[k], 0.0f);
                continue;
            }
            const double want = want_probs[(size_t)i * V + j];
            ck_assert_double_eq_tol(probs[k], want, FWD_TOL);
            const double g = tgt[i] < 0 ? 0.0 : (want - (j == tgt[i])) * XENT_DLOSS;
            ck_assert_double_eq_tol(dlogits[k], g, FWD_TOL);
        }
    }
    free(tgt);
    tensor_free(&logits);
    free(padded);
    free(probs);
    free(dlogits);
    free(losses);
    free(want_losses);
    free(want_probs);
}
END_TEST

/* B T C and a vocabulary of 9 in parts 4, 1, 4: C past one 64-column block
 * of the backward; tokens (5 bt mod 9) repeat and reach every part. */
enum { EV_B = 3, EV_T = 4, EV_C = 70, EV_V = 9 };
static const int EV_LO[] = {0, 4, 5}, EV_W[] = {4, 1, 4};
enum { EV_PARTS = 3 };

struct encv_case {
    int32_t tok[EV_B * EV_T];
    struct tensor wte, wpe, dout;
};

static struct encv_case encv_setup(void)
{
    struct encv_case e;
    for (int bt = 0; bt < EV_B * EV_T; bt++)
        e.tok[bt] = (int32_t)(bt * 5 % EV_V);
    e.wte = tensor_rand(EV_V * EV_C, 94, 1.0);
    e.wpe = tensor_rand(EV_T * EV_C, 95, 1.0);
    e.dout = tensor_rand(EV_B * EV_T * EV_C, 96, 1.0);
    return e;
}

static void encv_teardown(struct encv_case *e)
{
    tensor_free(&e->wte);
    tensor_free(&e->wpe);
    tensor_free(&e->dout);
}

/* The parts' outputs summed, wpe given to part 0 only (_i 0) or to none
 * (_i 1), against encoder_forward on the full wte. The outputs start as NaN:
 * the op overwrites. */
START_TEST(encoder_forward_vocab_sums_to_encoder_forward)
{
    struct encv_case e = encv_setup();
    const struct ops_backend *ops = ops_cpu_backend();
    int n = EV_B * EV_T * EV_C;
    const float *wpe = _i == 0 ? e.wpe.f : NULL;
    float *full = malloc((size_t)n * sizeof *full), *out = malloc((size_t)n * sizeof *out);
    ck_assert(full && out);
    ck_assert_int_eq(ops->encoder_forward(ops, ZT_F32, full, e.tok, e.wte.f, wpe, EV_B, EV_T, EV_C),
                     ZT_OK);
    struct tensor sum = tensor_zeros(n);
    for (int p = 0; p < EV_PARTS; p++) {
        float *part = columns(e.wte.f, 1, EV_V * EV_C, EV_LO[p] * EV_C, EV_W[p] * EV_C);
        for (int k = 0; k < n; k++)
            out[k] = NAN;
        ck_assert_int_eq(ops->encoder_forward_vocab(ops, ZT_F32, out, e.tok, part,
                                                    p == 0 ? wpe : NULL, EV_B, EV_T, EV_C, EV_LO[p],
                                                    EV_W[p]),
                         ZT_OK);
        for (int k = 0; k < n; k++)
            sum.f[k] += out[k];
        free(part);
    }
    for (int k = 0; k < n; k++)
        sum.d[k] = full[k];
    check_close(_i == 0 ? "vocab-parallel encoder out" : "vocab-parallel encoder out (no wpe)",
                sum.f, sum.d, n, FWD_TOL);
    tensor_free(&sum);
    free(full);
    free(out);
    encv_teardown(&e);
}
END_TEST

/* The parts' dwte put together, and dwpe given to the last part only (_i 0)
 * or to none (_i 1), against encoder_backward; both start nonzero. */
START_TEST(encoder_backward_vocab_matches_encoder_backward)
{
    struct encv_case e = encv_setup();
    const struct ops_backend *ops = ops_cpu_backend();
    int pos = _i == 0;
    struct tensor dwte = tensor_rand(EV_V * EV_C, 97, 1.0),
                  dwpe = tensor_rand(EV_T * EV_C, 98, 1.0);
    float *want_dwte = malloc((size_t)dwte.n * sizeof(float));
    float *want_dwpe = malloc((size_t)dwpe.n * sizeof(float));
    ck_assert(want_dwte && want_dwpe);
    memcpy(want_dwte, dwte.f, (size_t)dwte.n * sizeof(float));
    memcpy(want_dwpe, dwpe.f, (size_t)dwpe.n * sizeof(float));
    ck_assert_int_eq(ops->encoder_backward(ops, ZT_F32, want_dwte, pos ? want_dwpe : NULL, e.dout.f,
                                           e.tok, EV_B, EV_T, EV_C),
                     ZT_OK);
    for (int p = 0; p < EV_PARTS; p++) {
        float *part = columns(dwte.f, 1, EV_V * EV_C, EV_LO[p] * EV_C, EV_W[p] * EV_C);
        ck_assert_int_eq(
            ops->encoder_backward_vocab(ops, ZT_F32, part, pos && p == EV_PARTS - 1 ? dwpe.f : NULL,
                                        e.dout.f, e.tok, EV_B, EV_T, EV_C, EV_LO[p], EV_W[p]),
            ZT_OK);
        put_columns(dwte.f, part, 1, EV_V * EV_C, EV_LO[p] * EV_C, EV_W[p] * EV_C);
        free(part);
    }
    for (int k = 0; k < dwte.n; k++)
        dwte.d[k] = want_dwte[k];
    for (int k = 0; k < dwpe.n; k++)
        dwpe.d[k] = want_dwpe[k];
    check_close("vocab-parallel encoder dwte", dwte.f, dwte.d, dwte.n, FWD_TOL);
    check_close(pos ? "vocab-parallel encoder dwpe" : "vocab-parallel encoder dwpe (not given)",
                dwpe.f, dwpe.d, dwpe.n, FWD_TOL);
    free(want_dwte);
    free(want_dwpe);
    tensor_free(&dwte);
    tensor_free(&dwpe);
    encv_teardown(&e);
}
END_TEST

/* A frozen embedding (dwte_part NULL): dwpe is left alone too. */
START_TEST(encoder_backward_vocab_skips_a_frozen_embedding)
{
    struct encv_case e = encv_setup();
    struct tensor dwpe = tensor_rand(EV_T * EV_C, 98, 1.0);
    ck_assert_int_eq(ops_cpu_backend()->encoder_backward_vocab(ops_cpu_backend(), ZT_F32, NULL,
                                                               dwpe.f, e.dout.f, e.tok, EV_B, EV_T,
                                                               EV_C, EV_LO[0], EV_W[0]),
                     ZT_OK);
    for (int k = 0; k < dwpe.n; k++)
        ck_assert_float_eq(dwpe.f[k], (float)dwpe.d[k]);
    tensor_free(&dwpe);
    encv_teardown(&e);
}
END_TEST

/* ---- the CPU backend's private exponential ---- */

/* Every softmax and GELU rests on cpu_expf: within 1.5 ulp of exp on a
 * dense grid of its range (it measures 0.98), tiny and non-negative below
 * the range, finite above it, and NaN for NaN. */
START_TEST(cpu_expf_is_accurate)
{
    const int n = 1 << 17;
    for (int i = 0; i <= n; i++) {
        float x = -87.0f + 175.0f * (float)i / (float)n;
        double want = exp((double)x), ulp = ldexp(1.0, ilogb(want) - 23);
        float got = cpu_expf(x);
        ck_assert_msg(fabs(got - want) <= 1.5 * ulp, "cpu_expf(%.9g) = %.9g, want %.9g", (double)x,
                      (double)got, want);
    }
    ck_assert(cpu_expf(-1000.0f) >= 0.0f && cpu_expf(-1000.0f) < 2e-38f);
    ck_assert(isfinite(cpu_expf(1000.0f)) && cpu_expf(1000.0f) > 1e38f);
    /* at run time, where the sanitizer build checks the integer arithmetic */
    volatile float nan_in = NAN, inf_in = INFINITY;
    ck_assert(isnan(cpu_expf(nan_in)) && isnan(cpu_expf(-nan_in)));
    ck_assert(isfinite(cpu_expf(inf_in)) && cpu_expf(-inf_in) >= 0.0f);
}
END_TEST

/* ---- backend-wide ---- */

START_TEST(backend_table_is_complete)
{
    const struct ops_backend *b = ops_cpu_backend();
    ck_assert_ptr_nonnull(b);
    ck_assert_str_eq(b->name, "cpu");
    ck_assert(b->encoder_forward && b->encoder_backward && b->layernorm_forward &&
              b->layernorm_backward && b->matmul_forward && b->matmul_backward &&
              b->attention_forward && b->attention_backward && b->rmsnorm_forward &&
              b->rmsnorm_backward && b->rope_forward && b->rope_backward && b->swiglu_forward &&
              b->swiglu_backward && b->gelu_forward && b->gelu_backward && b->residual_forward &&
              b->lora_forward && b->lora_backward && b->mul_forward && b->mul_backward &&
              b->crossentropy_forward && b->crossentropy_backward && b->to_f32 && b->from_f32 &&
              b->add_into && b->sum_squares && b->scale && b->memset_zero && b->adamw_update &&
              b->encoder_forward_vocab && b->encoder_backward_vocab && b->crossentropy_vocab_max &&
              b->crossentropy_vocab_exp && b->crossentropy_vocab_finish &&
              b->crossentropy_vocab_backward);
}
END_TEST

/* Appends n floats to a growing record of outputs. */
static void record(float **all, int *len, const float *x, int n)
{
    float *grown = realloc(*all, (size_t)(*len + n) * sizeof **all);
    ck_assert_ptr_nonnull(grown);
    memcpy(grown + *len, x, (size_t)n * sizeof *x);
    *all = grown;
    *len += n;
}

/* Layernorm's gradients, RMSNorm's and grouped-query attention's, run on
 * `threads` threads, one after another in one buffer. */
static float *threaded_outputs(int threads, int *len)
{
    float *all = NULL;
    *len = 0;
    ops_cpu_set_threads(threads);
    struct ln_case l = ln_setup(3);
    ln_forward(&l);
    ln_backward(&l);
    record(&all, len, l.dx.f, l.dx.n);
    record(&all, len, l.dw.f, l.C);
    record(&all, len, l.db.f, l.C);
    ln_teardown(&l);
    struct rms_case m = rms_setup(4);
    rms_forward(&m);
    rms_backward(&m);
    record(&all, len, m.dx.f, m.dx.n);
    record(&all, len, m.dw.f, m.C);
    rms_teardown(&m);
    struct att_case a = att_setup(ATT_GQA + 1); /* four query heads on one k/v head */
    att_forward(&a);
    att_backward(&a);
    record(&all, len, a.out.f, a.out.n);
    record(&all, len, a.dqkv.f, a.dqkv.n);
    att_teardown(&a);
    ops_cpu_set_threads(1);
    return all;
}

/* The multi-threaded paths (column-split parameter gradients, parallel
 * rows, threaded sgemm) agree with the single-threaded ones. */
START_TEST(results_do_not_depend_on_thread_count)
{
    int n1, n2;
    float *one = threaded_outputs(1, &n1), *two = threaded_outputs(2, &n2);
    ck_assert_int_eq(n1, n2);
    double *want = malloc((size_t)n1 * sizeof *want);
    ck_assert_ptr_nonnull(want);
    for (int i = 0; i < n1; i++)
        want[i] = one[i];
    check_close("two threads vs one", two, want, n1, 1e-6);
    free(want);
    free(one);
    free(two);
}
END_TEST

#define NSIZES(a) ((int)(sizeof(a) / sizeof((a)[0])))

int main(void)
{
    Suite *s = suite_create("ops");
    TCase *tc = testutil_tcase(s, "encoder", 60);
    tcase_add_loop_test(tc, encoder_forward_matches_reference, 0, 2 * NSIZES(ENC_SIZES));
    tcase_add_loop_test(tc, encoder_backward_matches_finite_differences, 0, 2 * NSIZES(ENC_SIZES));
    tcase_add_test(tc, encoder_backward_accumulates);
    tc = testutil_tcase(s, "layernorm", 60);
    tcase_add_loop_test(tc, layernorm_forward_matches_reference, 0, NSIZES(LN_SIZES));
    tcase_add_loop_test(tc, layernorm_backward_matches_finite_differences, 0, NSIZES(LN_SIZES));
    tcase_add_test(tc, layernorm_backward_accumulates);
    tc = testutil_tcase(s, "rmsnorm", 60);
    tcase_add_loop_test(tc, rmsnorm_forward_matches_reference, 0, NSIZES(RMS_SIZES));
    tcase_add_test(tc, rmsnorm_eps_is_inside_the_root);
    tcase_add_loop_test(tc, rmsnorm_backward_matches_finite_differences, 0, NSIZES(RMS_SIZES));
    tcase_add_test(tc, rmsnorm_backward_accumulates);
    tcase_add_test(tc, rmsnorm_backward_is_bitwise_thread_independent);
    tcase_add_test(tc, layernorm_backward_is_bitwise_thread_independent);
    tc = testutil_tcase(s, "matmul", 60);
    tcase_add_loop_test(tc, matmul_forward_matches_reference, 0, 2 * NSIZES(MM_SIZES));
    tcase_add_loop_test(tc, matmul_backward_matches_finite_differences, 0, 2 * NSIZES(MM_SIZES));
    tcase_add_test(tc, matmul_backward_accumulates);
    tc = testutil_tcase(s, "attention", 60);
    tcase_add_loop_test(tc, attention_forward_matches_reference, 0, NSIZES(ATT_SIZES));
    tcase_add_loop_test(tc, attention_backward_matches_finite_differences, 0, NSIZES(ATT_SIZES));
    tcase_add_loop_test(tc, attention_matches_double_reference, 0, ATT_GRID);
    tcase_add_test(tc, attention_is_bitwise_thread_independent);
    tcase_add_test(tc, attention_backward_accumulates);
    tcase_add_test(tc, attention_is_causal);
    tcase_add_loop_test(tc, lora_forward_matches_reference, 0, NSIZES(LORA_SIZES));
    tcase_add_loop_test(tc, lora_backward_matches_finite_differences, 0, NSIZES(LORA_SIZES));
    tcase_add_test(tc, lora_backward_accumulates_and_skips_dinp);
    tcase_add_test(tc, matmul_backward_skips_a_frozen_weight);
    tcase_add_test(tc, mul_forward_and_backward_match_reference);
    tc = testutil_tcase(s, "rope", 60);
    tcase_add_loop_test(tc, rope_forward_matches_reference, 0, NSIZES(ROPE_SIZES));
    tcase_add_loop_test(tc, rope_backward_is_the_transpose, 0, NSIZES(ROPE_SIZES));
    tcase_add_loop_test(tc, rope_backward_matches_finite_differences, 0, NSIZES(ROPE_SIZES));
    tc = testutil_tcase(s, "gelu", 60);
    tcase_add_loop_test(tc, gelu_forward_matches_reference, 0, NSIZES(GELU_SIZES));
    tcase_add_test(tc, gelu_forward_is_accurate_elementwise);
    tcase_add_loop_test(tc, gelu_backward_matches_finite_differences, 0, NSIZES(GELU_SIZES));
    tcase_add_test(tc, gelu_backward_accumulates);
    tcase_add_test(tc, residual_forward_adds);
    tc = testutil_tcase(s, "swiglu", 60);
    tcase_add_loop_test(tc, swiglu_forward_matches_reference, 0, NSIZES(SWIGLU_SIZES));
    tcase_add_loop_test(tc, swiglu_backward_matches_finite_differences, 0, NSIZES(SWIGLU_SIZES));
    tcase_add_test(tc, swiglu_backward_accumulates);
    tcase_add_test(tc, swiglu_survives_extreme_gates);
    tc = testutil_tcase(s, "crossentropy", 60);
    tcase_add_loop_test(tc, crossentropy_forward_matches_reference, 0, NSIZES(XENT_SIZES));
    tcase_add_loop_test(tc, crossentropy_backward_matches_finite_differences, 0,
                        NSIZES(XENT_SIZES));
    tcase_add_test(tc, crossentropy_backward_accumulates);
    tcase_add_test(tc, crossentropy_loss_survives_underflow);
    tcase_add_loop_test(tc, crossentropy_masked_rows_are_not_counted, 0, 2);
    tc = testutil_tcase(s, "vocab_parallel", 60);
    tcase_add_loop_test(tc, crossentropy_vocab_matches_reference, 0, NSIZES(VOCAB_SPLITS));
    tcase_add_loop_test(tc, crossentropy_vocab_backward_matches_reference, 0, NSIZES(VOCAB_SPLITS));
    tcase_add_loop_test(tc, crossentropy_vocab_one_part_is_crossentropy, 0, NSIZES(VOCAB_ONE_PART));
    tcase_add_loop_test(tc, crossentropy_vocab_padding_gets_nothing, 0, NSIZES(XPAD_CASES));
    tcase_add_loop_test(tc, encoder_forward_vocab_sums_to_encoder_forward, 0, 2);
    tcase_add_loop_test(tc, encoder_backward_vocab_matches_encoder_backward, 0, 2);
    tcase_add_test(tc, encoder_backward_vocab_skips_a_frozen_embedding);
    tc = testutil_tcase(s, "expf", 60);
    tcase_add_test(tc, cpu_expf_is_accurate);
    tc = testutil_tcase(s, "backend", 60);
    tcase_add_test(tc, backend_table_is_complete);
    tcase_add_test(tc, results_do_not_depend_on_thread_count);
    return testutil_run_suite(s, 0);
}
