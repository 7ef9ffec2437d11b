/* tests/test_gpu_ops.c — every slot of the op table (worker/ops.h) of one
 * compute backend, the backend under test, against the CPU backend.
 *
 * The backend under test is named by ZT_TEST_BACKEND ("cuda" or "cpu",
 * default "cpu") and opened with compute_backend_open; when it cannot run
 * here the suite prints "SKIP: <why>" and exits 77. The reference is always
 * ops_cpu_backend() on host buffers. Each check makes fresh random inputs
 * from fixed seeds (negative values included), copies them into the
 * backend's device buffers, runs the op through be.ops, copies the results
 * back and compares them with the CPU's on the same inputs. With
 * ZT_TEST_BACKEND=cpu the suite compares the CPU with itself: that run
 * proves the harness (buffers, shapes, the driving of every op) before a
 * GPU is there, and the self-check below proves that it can fail.
 *
 * What a comparison catches:
 * - Outputs of forward ops start as NaN on the backend's side (every byte
 *   0xff), so an element the op leaves unwritten fails.
 * - Gradients of accumulating backward ops start as the same random values
 *   on both sides, so an op that assigns where it must add fails.
 * - Arguments whose NULL means "skip" get a case with NULL.
 * - Sizes are odd on purpose (B=2 T=7 C=24 NH=4 NKV=2 hs=6 V=37, N=1, sizes
 *   that are not multiples of 32 or 256, T past a 64-row tile), so that the
 *   edges of thread blocks and vector loops are exercised.
 * - Every model op runs at each of its types (worker/ops.h's t: fp32, bf16,
 *   fp16), its typed inputs rounded to the type on the host, both sides
 *   given the same bits.
 *
 * Budgets, in one place (the constants below):
 * - FP32_BUDGET 1e-5: max |but - ref| / max |ref| over the tensor, for the
 *   model ops, whose sums a GPU reorders.
 * - ELEMENTWISE_BUDGET 0: bit for bit (NaNs equal whatever their payload)
 *   for the casts, add_into, scale, memset_zero and the element-wise
 *   optimizers, including 8-bit AdamW. worker/ops.h makes this the CPU's
 *   contract; the CUDA kernels are held to it as well. If a CUDA kernel
 *   cannot be (FMA contraction, a different powf), relax it there, with the
 *   reason next to it.
 * - SUMSQ_BUDGET 1e-12 relative for sum_squares (a double sum whose order
 *   is each backend's own), and for Adafactor's double statistics.
 * - fp8 codes and amax: exact, always.
 * - The 16-bit forms of the model ops: their outputs of the op's type
 *   within OPS_16BIT_GEMM_TOL(t) (worker/ops.h) relative to the largest,
 *   a little over one unit in the last place of t. Each side computes in
 *   fp32 and rounds once; the two fp32 results differ only as FP32_BUDGET
 *   allows, so they round to the same value or to neighbours. So that a
 *   kernel that truncates (within one unit too) still fails, at most
 *   ROUNDED_APART_SHARE of the elements (plus one) may differ from the
 *   CPU's bits at all: rounding apart needs the two fp32 values to
 *   straddle a rounding boundary, where truncating moves about half of
 *   them. Their fp32 outputs (statistics, losses, weight gradients) keep
 *   FP32_BUDGET. The products (matmul, lora) are checked where the backend
 *   under test computes the type (ops->computes); the reference is the
 *   CPU's 16-bit product where it has a kernel for the type, else its fp32
 *   product on the same values with the outputs rounded, each side then
 *   within OPS_16BIT_GEMM_TOL of that fp32 product and so within twice it
 *   of each other. LoRA rounds u and du between its products on each side,
 *   so its outputs, dA and dB included, get twice the bound as well.
 *
 * The whole-tensor optimizers run as shard/update.c drives them: a tensor
 * cut into pieces as ranks hold it (one piece empty), every "rank" with
 * its own copy of the tensor state, each round's statistics zeroed with the
 * backend's memset_zero, filled by the piece and combined over the pieces
 * (the allreduce) between rounds. As in the engine, stats, tensor state,
 * parameters, gradients and states are all device memory of the backend.
 *
 * Every comparison is non-aborting: it prints the op, the worst element,
 * both values and the error, and counts a failure; a test fails at its end
 * when any comparison did. The self-check runs the same checks on copies of
 * the CPU table with deliberately broken slots and asserts that each one
 * is reported.
 */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef ZT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "common/half.h"
#include "common/rng.h"
#include "testutil.h"
#include "worker/backend.h"
#include "worker/optimizer.h"

/* ---- budgets ------------------------------------------------------------- */

static const double FP32_BUDGET = 1e-5;
static const double SUMSQ_BUDGET = 1e-12;
/* At most this share of a 16-bit output's elements (plus one) may hold
 * other bits than the CPU's (see the top). */
static const double ROUNDED_APART_SHARE = 0.25;
/* 0: bit for bit. The one place to relax the element-wise ops (see the top). */
static const double ELEMENTWISE_BUDGET = 0.0;

/* ---- the harness --------------------------------------------------------- */

enum { MAX_BUFFERS = 4096 };

/* One opened backend under test beside the CPU reference, the buffers made
 * for the checks (freed together at the end) and the failures so far. */
struct harness {
    struct ledger ledger;
    struct compute_backend be;     /* the backend under test: its memory and ops */
    const struct ops_backend *but; /* the table under test: be.ops, or a broken copy */
    const struct ops_backend *ref; /* the CPU table, on host buffers */
    int failures;                  /* comparisons over budget, ops that did not return ZT_OK */
    int quiet;                     /* 1: count failures without printing them (self-check) */
    int n_dev, n_host;
    void *dev[MAX_BUFFERS];
    size_t dev_bytes[MAX_BUFFERS];
    void *host[MAX_BUFFERS];
};

static const char *backend_name(void)
{
    const char *name = getenv("ZT_TEST_BACKEND");
    return name && *name ? name : "cpu";
}

/* Opens the backend named `name` (its ops under test) beside the CPU reference. */
static void harness_open_named(struct harness *h, const char *name)
{
    memset(h, 0, sizeof *h);
    ledger_init(&h->ledger, 0);
    ck_assert_msg(compute_backend_open(name, -1, &h->ledger, &h->be) == ZT_OK, "%s: %s", name,
                  zt_error_message());
    h->but = h->be.ops;
    h->ref = ops_cpu_backend();
}

static void harness_open(struct harness *h)
{
    harness_open_named(h, backend_name());
}

/* Frees every buffer the checks made; the ledger must come back to zero. */
static void harness_release(struct harness *h)
{
    for (int i = h->n_dev - 1; i >= 0; i--)
        device_free(&h->be.dev, LEDGER_WORKSPACE, h->dev_bytes[i], h->dev[i]);
    for (int i = 0; i < h->n_host; i++)
        free(h->host[i]);
    h->n_dev = h->n_host = 0;
    ck_assert_uint_eq(h->ledger.total_current, 0);
}

/* Frees everything, closes the backend and fails the test if any check did. */
static void harness_close(struct harness *h)
{
    harness_release(h);
    compute_backend_close(&h->be);
    ck_assert_msg(h->failures == 0, "%d comparison(s) failed on backend '%s' (see above)",
                  h->failures, backend_name());
}

static void report(struct harness *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(struct harness *h, const char *fmt, ...)
{
    h->failures++;
    if (h->quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL [%s] ", h->but->name ? h->but->name : "?");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

/* Counts an op that did not return ZT_OK. On a backend with a stream the
 * op only queued its work: wait for it here, so that a fault in its
 * kernels is reported against it, and so that reading the results back
 * does not depend on how the device copies order against the stream. */
static void status_ok(struct harness *h, const char *op, zt_status st)
{
    if (st != ZT_OK)
        report(h, "%s returned %s: %s", op, zt_status_str(st), zt_error_message());
#ifdef ZT_HAVE_CUDA
    if (h->be.stream && strcmp(h->be.name, "cuda") == 0) {
        const cudaError_t err = cudaStreamSynchronize((cudaStream_t)h->be.stream);
        if (err != cudaSuccess)
            report(h, "%s: its kernels failed: %s", op, cudaGetErrorString(err));
    }
#endif
}

/* Calls op through the table under test (counted, not aborting) or the reference. */
#define BUT(h, op, ...) status_ok((h), #op, (h)->but->op((h)->but, __VA_ARGS__))
#define REF(h, op, ...) ck_assert_int_eq((h)->ref->op((h)->ref, __VA_ARGS__), ZT_OK)

/* A zeroed host buffer, freed by harness_release. */
static void *hmem(struct harness *h, size_t bytes)
{
    ck_assert_int_lt(h->n_host, MAX_BUFFERS);
    void *p = calloc(bytes ? bytes : 1, 1);
    ck_assert_ptr_nonnull(p);
    h->host[h->n_host++] = p;
    return p;
}

static void *hdup(struct harness *h, const void *src, size_t bytes)
{
    return memcpy(hmem(h, bytes), src, bytes);
}

/* n floats uniform in [lo, hi) from counter stream `key`. */
static float *rnd_range(struct harness *h, size_t n, uint64_t key, double lo, double hi)
{
    float *x = hmem(h, n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(lo + (hi - lo) * rng_uniform(key, (uint64_t)i));
    return x;
}

/* n floats uniform in [-scale, scale). */
static float *rnd(struct harness *h, size_t n, uint64_t key, double scale)
{
    return rnd_range(h, n, key, -scale, scale);
}

/* n token ids in [0, V); every fifth one -1 (masked) when `masked`. */
static int32_t *ids(struct harness *h, int n, int V, uint64_t key, int masked)
{
    int32_t *t = hmem(h, (size_t)n * sizeof *t);
    for (int i = 0; i < n; i++)
        t[i] = masked && i % 5 == 3 ? -1 : (int32_t)(rng_u64(key, (uint64_t)i) % (uint64_t)V);
    return t;
}

static void *dev_alloc(struct harness *h, size_t bytes)
{
    ck_assert_int_lt(h->n_dev, MAX_BUFFERS);
    void *p = NULL;
    bytes = bytes ? bytes : 1;
    ck_assert_int_eq(device_alloc_uninit(&h->be.dev, LEDGER_WORKSPACE, bytes, "op test", &p),
                     ZT_OK);
    h->dev[h->n_dev] = p;
    h->dev_bytes[h->n_dev++] = bytes;
    return p;
}

/* A device copy of host[0..bytes). */
static void *to_dev(struct harness *h, const void *host, size_t bytes)
{
    void *p = dev_alloc(h, bytes);
    if (bytes)
        ck_assert_int_eq(h->be.dev.ops->copy_from_host(&h->be.dev, p, host, bytes), ZT_OK);
    return p;
}

/* A device buffer whose every byte is 0xff: NaN as floats, doubles and
 * 16-bit floats, so that an element an op leaves unwritten fails. */
static void *poisoned(struct harness *h, size_t bytes)
{
    void *pattern = hmem(h, bytes);
    memset(pattern, 0xff, bytes);
    return to_dev(h, pattern, bytes);
}

/* A host copy of dev[0..bytes). */
static void *from_dev(struct harness *h, const void *dev, size_t bytes)
{
    void *p = hmem(h, bytes);
    if (bytes)
        ck_assert_int_eq(h->be.dev.ops->copy_to_host(&h->be.dev, p, dev, bytes), ZT_OK);
    return p;
}

/* ---- comparisons --------------------------------------------------------- */

/* max |but - ref| / max |ref| over n elements of t (absolute when ref is
 * all zero); a NaN or infinity on one side only, or infinities of
 * different signs, is an infinite error. Over `budget` (or non-finite)
 * counts a failure naming the op, the worst element, both values and the
 * error. Returns the error. */
static double expect_close_t(struct harness *h, const char *name, enum zt_dtype t, const void *but,
                             const void *ref, size_t n, double budget);

static double expect_close(struct harness *h, const char *name, const float *but, const float *ref,
                           size_t n, double budget)
{
    return expect_close_t(h, name, ZT_F32, but, ref, n, budget);
}

static double expect_dev_close(struct harness *h, const char *name, const float *dev,
                               const float *ref, size_t n, double budget)
{
    return expect_close(h, name, from_dev(h, dev, n * sizeof(float)), ref, n, budget);
}

/* The value of element i of an array of t as a double (for messages and NaN tests). */
static double elem_value(enum zt_dtype t, const void *p, size_t i)
{
    switch (t) {
    case ZT_F32:
        return ((const float *)p)[i];
    case ZT_F64:
        return ((const double *)p)[i];
    case ZT_BF16:
        return zt_bf16_to_f32(((const uint16_t *)p)[i]);
    case ZT_F16:
        return zt_f16_to_f32(((const uint16_t *)p)[i]);
    default:
        return ((const uint8_t *)p)[i];
    }
}

static double expect_close_t(struct harness *h, const char *name, enum zt_dtype t, const void *but,
                             const void *ref, size_t n, double budget)
{
    double scale = 0.0, worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const double r = elem_value(t, ref, i);
        if (isfinite(r) && fabs(r) > scale)
            scale = fabs(r);
    }
    for (size_t i = 0; i < n; i++) {
        const double a = elem_value(t, but, i), r = elem_value(t, ref, i);
        double d;
        if (isnan(r) || isnan(a))
            d = isnan(r) && isnan(a) ? 0.0 : INFINITY;
        else if (isinf(r) || isinf(a))
            d = r == a ? 0.0 : INFINITY;
        else
            d = fabs(a - r);
        if (d > worst) {
            worst = d;
            at = i;
        }
    }
    const double err = scale > 0.0 ? worst / scale : worst;
    if (!(err <= budget))
        report(h, "%s: element %zu of %zu: backend %.17g, cpu %.17g, error %.3g > budget %.3g",
               name, at, n, elem_value(t, but, at), elem_value(t, ref, at), err, budget);
    return err;
}

/* Element for element the same bits (n elements of t; floats that are NaN
 * on both sides count as equal whatever their payload). Returns 1 when all
 * match; else counts a failure naming the first differing element. */
static int expect_same(struct harness *h, const char *name, enum zt_dtype t, const void *but,
                       const void *ref, size_t n)
{
    const size_t esz = zt_dtype_size(t);
    const int is_float = t == ZT_F32 || t == ZT_F64 || t == ZT_BF16 || t == ZT_F16;
    for (size_t i = 0; i < n; i++) {
        const void *a = (const char *)but + i * esz, *b = (const char *)ref + i * esz;
        if (memcmp(a, b, esz) == 0)
            continue;
        if (is_float && isnan(elem_value(t, but, i)) && isnan(elem_value(t, ref, i)))
            continue;
        uint64_t ua = 0, ub = 0;
        memcpy(&ua, a, esz);
        memcpy(&ub, b, esz);
        report(h,
               "%s: element %zu of %zu differs: backend %.9g (0x%llx), cpu %.9g (0x%llx), want "
               "the same bits",
               name, i, n, elem_value(t, but, i), (unsigned long long)ua, elem_value(t, ref, i),
               (unsigned long long)ub);
        return 0;
    }
    return 1;
}

static int expect_dev_same(struct harness *h, const char *name, enum zt_dtype t, const void *dev,
                           const void *ref, size_t n)
{
    return expect_same(h, name, t, from_dev(h, dev, n * zt_dtype_size(t)), ref, n);
}

/* An element-wise op's result (n elements of t on the device): bit for bit
 * while ELEMENTWISE_BUDGET is 0, else within it relative to the largest. */
static void expect_elementwise(struct harness *h, const char *name, enum zt_dtype t,
                               const void *dev, const void *ref, size_t n)
{
    const void *but = from_dev(h, dev, n * zt_dtype_size(t));
    if (ELEMENTWISE_BUDGET == 0.0 || t == ZT_U8) {
        expect_same(h, name, t, but, ref, n);
        return;
    }
    float *a = hmem(h, n * sizeof(float)), *b = hmem(h, n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)elem_value(t, but, i);
        b[i] = (float)elem_value(t, ref, i);
    }
    expect_close(h, name, a, b, n, ELEMENTWISE_BUDGET);
}

#define FB(n)     ((size_t)(n) * sizeof(float))
#define IB(n)     ((size_t)(n) * sizeof(int32_t))
#define TB(t, n)  ((size_t)(n)*zt_dtype_size(t))
#define NAME(...) testutil_fmt(__VA_ARGS__)

/* ---- the model ops' element types ------------------------------------------ */

static const enum zt_dtype WORKING[] = {ZT_F32, ZT_BF16, ZT_F16};

static const char *dtype_name(enum zt_dtype t)
{
    return t == ZT_F32 ? "f32" : t == ZT_BF16 ? "bf16" : t == ZT_F16 ? "f16" : "?";
}

/* The budget of the outputs of type t of a model op run at t (see the top). */
static double typed_budget(enum zt_dtype t)
{
    return t == ZT_F32 ? FP32_BUDGET : OPS_16BIT_GEMM_TOL(t);
}

/* Element i of a buffer of t. */
static void *elem_at(enum zt_dtype t, void *p, size_t i)
{
    return (char *)p + i * zt_dtype_size(t);
}

/* x[0..n) as elements of t, rounded to nearest even (the CPU's from_f32):
 * a new host buffer, or x itself under fp32. */
static void *as_type(struct harness *h, enum zt_dtype t, float *x, size_t n)
{
    if (t == ZT_F32)
        return x;
    void *v = hmem(h, TB(t, n));
    REF(h, from_f32, t, x, v, n);
    return v;
}

/* n values of t, uniform in [lo, hi) before rounding, and in [-scale, scale). */
static void *rnd_t_range(struct harness *h, enum zt_dtype t, size_t n, uint64_t key, double lo,
                         double hi)
{
    return as_type(h, t, rnd_range(h, n, key, lo, hi), n);
}

static void *rnd_t(struct harness *h, enum zt_dtype t, size_t n, uint64_t key, double scale)
{
    return rnd_t_range(h, t, n, key, -scale, scale);
}

/* The n elements of p (type `from`) as elements of `to`: p itself when the
 * types agree, else a new host buffer, widened exactly or rounded. */
static void *convert(struct harness *h, enum zt_dtype from, enum zt_dtype to, void *p, size_t n)
{
    if (from == to)
        return p;
    if (to == ZT_F32) {
        float *f = hmem(h, FB(n));
        REF(h, to_f32, from, p, f, n);
        return f;
    }
    ck_assert_int_eq(from, ZT_F32);
    return as_type(h, to, p, n);
}

/* An output of type t of a model op run at t, n elements on the device,
 * against the reference's: within `budget` relative to the largest, and
 * under 16 bits no more than ROUNDED_APART_SHARE of the elements other
 * than the reference's bits (see the top). */
static void expect_typed(struct harness *h, const char *name, enum zt_dtype t, const void *dev,
                         const void *ref, size_t n, double budget)
{
    const void *but = from_dev(h, dev, TB(t, n));
    expect_close_t(h, name, t, but, ref, n, budget);
    if (t == ZT_F32)
        return;
    size_t apart = 0;
    for (size_t i = 0; i < n; i++)
        apart += ((const uint16_t *)but)[i] != ((const uint16_t *)ref)[i];
    if ((double)apart > ROUNDED_APART_SHARE * (double)n + 1.0)
        report(h, "%s: %zu of %zu elements round apart from the cpu's, more than %.0f %%", name,
               apart, n, 100.0 * ROUNDED_APART_SHARE);
}

/* The type the reference computes a product of t at: t where the CPU has
 * a GEMM kernel for it, else fp32 on the widened operands, the value
 * worker/ops.h holds a 16-bit product to. */
static enum zt_dtype product_ref_type(struct harness *h, enum zt_dtype t)
{
    if (t == ZT_F32 || h->ref->computes(h->ref, t) == ZT_OK)
        return t;
    printf("note: the cpu has no %s GEMM here (%s): the %s products are checked against its fp32 "
           "products on the same values\n",
           dtype_name(t), zt_error_message(), dtype_name(t));
    return ZT_F32;
}

/* The budget of an output of type t of a product run at t against a
 * reference computed at rt: typed_budget, or twice OPS_16BIT_GEMM_TOL when
 * the reference is the fp32 product (the backend's result and the rounded
 * fp32 one each lie within OPS_16BIT_GEMM_TOL of it). */
static double product_budget(enum zt_dtype t, enum zt_dtype rt)
{
    return t == rt ? typed_budget(t) : 2.0 * OPS_16BIT_GEMM_TOL(t);
}

/* A typed output of a product against a reference computed at rt:
 * expect_typed, or its budget alone when the reference is the rounded fp32
 * product, whose bits no 16-bit op is asked to match. */
static void expect_product(struct harness *h, const char *name, enum zt_dtype t, enum zt_dtype rt,
                           const void *dev, const void *ref, size_t n, double budget)
{
    if (t == rt)
        expect_typed(h, name, t, dev, ref, n, budget);
    else
        expect_close_t(h, name, t, from_dev(h, dev, TB(t, n)), ref, n, budget);
}

/* ---- embeddings ------------------------------------------------------------ */

/* encoder_forward with and without wpe; encoder_backward with both
 * gradients, without dwpe, and frozen (both NULL: nothing may change).
 * V small against B*T, so tokens repeat and rows of dwte collect several
 * rows of dout. */
static void check_encoder(struct harness *h, enum zt_dtype t, int B, int T, int C, int V,
                          uint64_t key)
{
    const int N = B * T;
    const char *tn = dtype_name(t);
    const void *wte = rnd_t(h, t, (size_t)V * C, key, 1.0),
               *wpe = rnd_t(h, t, (size_t)T * C, key + 1, 1.0);
    const int32_t *tok = ids(h, N, V, key + 2, 0);
    const void *d_wte = to_dev(h, wte, TB(t, V * C)), *d_wpe = to_dev(h, wpe, TB(t, T * C));
    const int32_t *d_tok = to_dev(h, tok, IB(N));
    for (int with_wpe = 0; with_wpe < 2; with_wpe++) {
        void *out = hmem(h, TB(t, N * C)), *d_out = poisoned(h, TB(t, N * C));
        REF(h, encoder_forward, t, out, tok, wte, with_wpe ? wpe : NULL, B, T, C);
        BUT(h, encoder_forward, t, d_out, d_tok, d_wte, with_wpe ? d_wpe : NULL, B, T, C);
        expect_typed(h, NAME("encoder_forward %s B=%d T=%d C=%d wpe=%d", tn, B, T, C, with_wpe), t,
                     d_out, out, (size_t)N * C, typed_budget(t));
    }
    const void *dout = rnd_t(h, t, (size_t)N * C, key + 3, 1.0);
    const void *d_dout = to_dev(h, dout, TB(t, N * C));
    for (int c = 0; c < 3; c++) { /* 0: both, 1: dwpe NULL, 2: frozen */
        float *dwte = rnd(h, (size_t)V * C, key + 4 + c, 1.0);
        float *dwpe = rnd(h, (size_t)T * C, key + 8 + c, 1.0);
        float *d_dwte = to_dev(h, dwte, FB(V * C)), *d_dwpe = to_dev(h, dwpe, FB(T * C));
        REF(h, encoder_backward, t, c < 2 ? dwte : NULL, c == 0 ? dwpe : NULL, dout, tok, B, T, C);
        BUT(h, encoder_backward, t, c < 2 ? d_dwte : NULL, c == 0 ? d_dwpe : NULL, d_dout, d_tok, B,
            T, C);
        expect_dev_close(h, NAME("encoder_backward %s dwte B=%d T=%d C=%d case=%d", tn, B, T, C, c),
                         d_dwte, dwte, (size_t)V * C, FP32_BUDGET);
        expect_dev_close(h, NAME("encoder_backward %s dwpe B=%d T=%d C=%d case=%d", tn, B, T, C, c),
                         d_dwpe, dwpe, (size_t)T * C, FP32_BUDGET);
    }
}

/* The vocabulary-parallel embedding on the slice [v_lo, v_lo + Vp) of V,
 * tokens drawn over the whole vocabulary (most outside the slice). */
static void check_encoder_vocab(struct harness *h, enum zt_dtype t, int B, int T, int C, int V,
                                int v_lo, int Vp, uint64_t key)
{
    const int N = B * T;
    const char *tn = dtype_name(t);
    const void *wte = rnd_t(h, t, (size_t)Vp * C, key, 1.0),
               *wpe = rnd_t(h, t, (size_t)T * C, key + 1, 1.0);
    const int32_t *tok = ids(h, N, V, key + 2, 0);
    const void *d_wte = to_dev(h, wte, TB(t, Vp * C)), *d_wpe = to_dev(h, wpe, TB(t, T * C));
    const int32_t *d_tok = to_dev(h, tok, IB(N));
    for (int with_wpe = 0; with_wpe < 2; with_wpe++) {
        void *out = hmem(h, TB(t, N * C)), *d_out = poisoned(h, TB(t, N * C));
        REF(h, encoder_forward_vocab, t, out, tok, wte, with_wpe ? wpe : NULL, B, T, C, v_lo, Vp);
        BUT(h, encoder_forward_vocab, t, d_out, d_tok, d_wte, with_wpe ? d_wpe : NULL, B, T, C,
            v_lo, Vp);
        expect_typed(h,
                     NAME("encoder_forward_vocab %s v_lo=%d Vp=%d wpe=%d", tn, v_lo, Vp, with_wpe),
                     t, d_out, out, (size_t)N * C, typed_budget(t));
    }
    const void *dout = rnd_t(h, t, (size_t)N * C, key + 3, 1.0);
    const void *d_dout = to_dev(h, dout, TB(t, N * C));
    for (int c = 0; c < 3; c++) { /* 0: both, 1: dwpe NULL, 2: frozen (dwte_part NULL) */
        float *dwte = rnd(h, (size_t)Vp * C, key + 4 + c, 1.0);
        float *dwpe = rnd(h, (size_t)T * C, key + 8 + c, 1.0);
        float *d_dwte = to_dev(h, dwte, FB(Vp * C)), *d_dwpe = to_dev(h, dwpe, FB(T * C));
        REF(h, encoder_backward_vocab, t, c < 2 ? dwte : NULL, c == 0 ? dwpe : NULL, dout, tok, B,
            T, C, v_lo, Vp);
        BUT(h, encoder_backward_vocab, t, c < 2 ? d_dwte : NULL, c == 0 ? d_dwpe : NULL, d_dout,
            d_tok, B, T, C, v_lo, Vp);
        expect_dev_close(
            h, NAME("encoder_backward_vocab %s dwte v_lo=%d Vp=%d case=%d", tn, v_lo, Vp, c),
            d_dwte, dwte, (size_t)Vp * C, FP32_BUDGET);
        expect_dev_close(
            h, NAME("encoder_backward_vocab %s dwpe v_lo=%d Vp=%d case=%d", tn, v_lo, Vp, c),
            d_dwpe, dwpe, (size_t)T * C, FP32_BUDGET);
    }
}

/* ---- normalisations ------------------------------------------------------ */

/* LayerNorm forward (out, mean, rstd all written), then the backward on
 * the reference's mean and rstd, trainable and frozen. Inputs off-centre
 * so the mean matters. */
static void check_layernorm(struct harness *h, enum zt_dtype t, int N, int C, uint64_t key)
{
    const size_t n = (size_t)N * C;
    const char *tn = dtype_name(t);
    const void *inp = rnd_t_range(h, t, n, key, -1.0, 3.0),
               *w = rnd_t(h, t, (size_t)C, key + 1, 1.5);
    const void *b = rnd_t(h, t, (size_t)C, key + 2, 1.0);
    const void *d_inp = to_dev(h, inp, TB(t, n)), *d_w = to_dev(h, w, TB(t, C)),
               *d_b = to_dev(h, b, TB(t, C));
    void *out = hmem(h, TB(t, n)), *d_out = poisoned(h, TB(t, n));
    float *mean = hmem(h, FB(N)), *rstd = hmem(h, FB(N));
    float *d_mean = poisoned(h, FB(N)), *d_rstd = poisoned(h, FB(N));
    REF(h, layernorm_forward, t, out, mean, rstd, inp, w, b, N, C);
    BUT(h, layernorm_forward, t, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C);
    expect_typed(h, NAME("layernorm_forward %s out N=%d C=%d", tn, N, C), t, d_out, out, n,
                 typed_budget(t));
    expect_dev_close(h, NAME("layernorm_forward %s mean N=%d C=%d", tn, N, C), d_mean, mean,
                     (size_t)N, FP32_BUDGET);
    expect_dev_close(h, NAME("layernorm_forward %s rstd N=%d C=%d", tn, N, C), d_rstd, rstd,
                     (size_t)N, FP32_BUDGET);
    const void *dout = rnd_t(h, t, n, key + 3, 1.0);
    const void *d_dout = to_dev(h, dout, TB(t, n));
    const float *r_mean = to_dev(h, mean, FB(N)), *r_rstd = to_dev(h, rstd, FB(N));
    for (int frozen = 0; frozen < 2; frozen++) {
        void *dinp = rnd_t(h, t, n, key + 4 + frozen, 1.0), *d_dinp = to_dev(h, dinp, TB(t, n));
        float *dw = rnd(h, (size_t)C, key + 6, 1.0), *db = rnd(h, (size_t)C, key + 7, 1.0);
        float *d_dw = to_dev(h, dw, FB(C)), *d_db = to_dev(h, db, FB(C));
        REF(h, layernorm_backward, t, dinp, frozen ? NULL : dw, frozen ? NULL : db, dout, inp, w,
            mean, rstd, N, C);
        BUT(h, layernorm_backward, t, d_dinp, frozen ? NULL : d_dw, frozen ? NULL : d_db, d_dout,
            d_inp, d_w, r_mean, r_rstd, N, C);
        expect_typed(h, NAME("layernorm_backward %s dinp N=%d C=%d frozen=%d", tn, N, C, frozen), t,
                     d_dinp, dinp, n, typed_budget(t));
        expect_dev_close(
            h, NAME("layernorm_backward %s dweight N=%d C=%d frozen=%d", tn, N, C, frozen), d_dw,
            dw, (size_t)C, FP32_BUDGET);
        expect_dev_close(h,
                         NAME("layernorm_backward %s dbias N=%d C=%d frozen=%d", tn, N, C, frozen),
                         d_db, db, (size_t)C, FP32_BUDGET);
    }
}

static void check_rmsnorm(struct harness *h, enum zt_dtype t, int N, int C, float eps, uint64_t key)
{
    const size_t n = (size_t)N * C;
    const char *tn = dtype_name(t);
    const void *inp = rnd_t(h, t, n, key, 2.0), *w = rnd_t(h, t, (size_t)C, key + 1, 1.5);
    const void *d_inp = to_dev(h, inp, TB(t, n)), *d_w = to_dev(h, w, TB(t, C));
    void *out = hmem(h, TB(t, n)), *d_out = poisoned(h, TB(t, n));
    float *rstd = hmem(h, FB(N)), *d_rstd = poisoned(h, FB(N));
    REF(h, rmsnorm_forward, t, out, rstd, inp, w, N, C, eps);
    BUT(h, rmsnorm_forward, t, d_out, d_rstd, d_inp, d_w, N, C, eps);
    expect_typed(h, NAME("rmsnorm_forward %s out N=%d C=%d", tn, N, C), t, d_out, out, n,
                 typed_budget(t));
    expect_dev_close(h, NAME("rmsnorm_forward %s rstd N=%d C=%d", tn, N, C), d_rstd, rstd,
                     (size_t)N, FP32_BUDGET);
    const void *dout = rnd_t(h, t, n, key + 3, 1.0);
    const void *d_dout = to_dev(h, dout, TB(t, n));
    const float *r_rstd = to_dev(h, rstd, FB(N));
    for (int frozen = 0; frozen < 2; frozen++) {
        void *dinp = rnd_t(h, t, n, key + 4 + frozen, 1.0), *d_dinp = to_dev(h, dinp, TB(t, n));
        float *dw = rnd(h, (size_t)C, key + 6, 1.0), *d_dw = to_dev(h, dw, FB(C));
        REF(h, rmsnorm_backward, t, dinp, frozen ? NULL : dw, dout, inp, w, rstd, N, C);
        BUT(h, rmsnorm_backward, t, d_dinp, frozen ? NULL : d_dw, d_dout, d_inp, d_w, r_rstd, N, C);
        expect_typed(h, NAME("rmsnorm_backward %s dinp N=%d C=%d frozen=%d", tn, N, C, frozen), t,
                     d_dinp, dinp, n, typed_budget(t));
        expect_dev_close(h,
                         NAME("rmsnorm_backward %s dweight N=%d C=%d frozen=%d", tn, N, C, frozen),
                         d_dw, dw, (size_t)C, FP32_BUDGET);
    }
}

/* ---- linear layers --------------------------------------------------------- */

/* matmul_forward with and without bias; matmul_backward with every subset
 * of its three gradients (each NULL one skipped, the others accumulated).
 * The reference runs at product_ref_type: its inputs are the same values
 * (widened when it is fp32), its typed outputs rounded to t to compare.
 * dweight and dbias are fp32 sums of exact products in every type. */
static void check_matmul(struct harness *h, enum zt_dtype t, int N, int C, int OC, uint64_t key)
{
    const enum zt_dtype rt = product_ref_type(h, t);
    const char *tn = dtype_name(t);
    const double budget = product_budget(t, rt);
    const size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    void *inp = rnd_t(h, t, ni, key, 1.0), *w = rnd_t(h, t, nw, key + 1, 1.0);
    void *bias = rnd_t(h, t, (size_t)OC, key + 2, 1.0);
    const void *d_inp = to_dev(h, inp, TB(t, ni)), *d_w = to_dev(h, w, TB(t, nw)),
               *d_bias = to_dev(h, bias, TB(t, OC));
    const void *r_inp = convert(h, t, rt, inp, ni), *r_w = convert(h, t, rt, w, nw),
               *r_bias = convert(h, t, rt, bias, (size_t)OC);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        void *out = hmem(h, TB(rt, no)), *d_out = poisoned(h, TB(t, no));
        REF(h, matmul_forward, rt, out, r_inp, r_w, with_bias ? r_bias : NULL, N, C, OC);
        BUT(h, matmul_forward, t, d_out, d_inp, d_w, with_bias ? d_bias : NULL, N, C, OC);
        expect_product(h,
                       NAME("matmul_forward %s N=%d C=%d OC=%d bias=%d", tn, N, C, OC, with_bias),
                       t, rt, d_out, convert(h, rt, t, out, no), no, budget);
    }
    void *dout = rnd_t(h, t, no, key + 3, 1.0);
    const void *d_dout = to_dev(h, dout, TB(t, no)), *r_dout = convert(h, t, rt, dout, no);
    for (int mask = 0; mask < 8; mask++) { /* bit 0: dinp, 1: dweight, 2: dbias */
        void *dinp = rnd_t(h, t, ni, key + 10 + mask, 1.0), *d_dinp = to_dev(h, dinp, TB(t, ni));
        void *r_dinp = convert(h, t, rt, dinp, ni);
        float *dw = rnd(h, nw, key + 20 + mask, 1.0),
              *db = rnd(h, (size_t)OC, key + 30 + mask, 1.0);
        float *d_dw = to_dev(h, dw, FB(nw)), *d_db = to_dev(h, db, FB(OC));
        REF(h, matmul_backward, rt, mask & 1 ? r_dinp : NULL, mask & 2 ? dw : NULL,
            mask & 4 ? db : NULL, r_dout, r_inp, r_w, N, C, OC);
        BUT(h, matmul_backward, t, mask & 1 ? d_dinp : NULL, mask & 2 ? d_dw : NULL,
            mask & 4 ? d_db : NULL, d_dout, d_inp, d_w, N, C, OC);
        expect_product(h,
                       NAME("matmul_backward %s dinp N=%d C=%d OC=%d mask=%d", tn, N, C, OC, mask),
                       t, rt, d_dinp, convert(h, rt, t, r_dinp, ni), ni, budget);
        expect_dev_close(
            h, NAME("matmul_backward %s dweight N=%d C=%d OC=%d mask=%d", tn, N, C, OC, mask), d_dw,
            dw, nw, FP32_BUDGET);
        expect_dev_close(
            h, NAME("matmul_backward %s dbias N=%d C=%d OC=%d mask=%d", tn, N, C, OC, mask), d_db,
            db, (size_t)OC, FP32_BUDGET);
    }
}

/* LoRA on a column slice of a wider output (ldo > OC): the forward adds
 * into out, whose columns past OC must stay as they were; the backward
 * with and without dinp. u and scratch start as NaN and are not compared
 * (the caller keeps no use of them). Under 16 bits u and du are rounded
 * between the products on each side, and one that rounds to the other
 * neighbour moves the results by up to OPS_16BIT_GEMM_TOL on its own: every
 * output, dA and dB included, gets twice that. */
static void check_lora(struct harness *h, enum zt_dtype t, int N, int C, int r, int OC, int ldo,
                       uint64_t key)
{
    const enum zt_dtype rt = product_ref_type(h, t);
    const char *tn = dtype_name(t);
    const double budget = t == ZT_F32 ? FP32_BUDGET : 2.0 * OPS_16BIT_GEMM_TOL(t);
    const float scale = 0.75f;
    const size_t no = (size_t)N * ldo, ni = (size_t)N * C, na = (size_t)r * C, nb = (size_t)OC * r;
    void *inp = rnd_t(h, t, ni, key, 1.0), *A = rnd_t(h, t, na, key + 1, 1.0);
    void *Bm = rnd_t(h, t, nb, key + 2, 1.0);
    const void *d_inp = to_dev(h, inp, TB(t, ni)), *d_A = to_dev(h, A, TB(t, na)),
               *d_B = to_dev(h, Bm, TB(t, nb));
    const void *r_inp = convert(h, t, rt, inp, ni), *r_A = convert(h, t, rt, A, na),
               *r_B = convert(h, t, rt, Bm, nb);
    void *out = rnd_t(h, t, no, key + 3, 1.0), *d_out = to_dev(h, out, TB(t, no));
    void *r_out = convert(h, t, rt, out, no);
    void *u = hmem(h, TB(rt, N * r)), *d_u = poisoned(h, TB(t, N * r));
    REF(h, lora_forward, rt, r_out, ldo, u, r_inp, r_A, r_B, scale, N, C, r, OC);
    BUT(h, lora_forward, t, d_out, ldo, d_u, d_inp, d_A, d_B, scale, N, C, r, OC);
    expect_product(h, NAME("lora_forward %s N=%d C=%d r=%d OC=%d ldo=%d", tn, N, C, r, OC, ldo), t,
                   rt, d_out, convert(h, rt, t, r_out, no), no, budget);
    void *dout = rnd_t(h, t, no, key + 4, 1.0);
    const void *d_dout = to_dev(h, dout, TB(t, no)), *r_dout = convert(h, t, rt, dout, no);
    for (int with_dinp = 0; with_dinp < 2; with_dinp++) {
        void *dinp = rnd_t(h, t, ni, key + 5 + with_dinp, 1.0),
             *d_dinp = to_dev(h, dinp, TB(t, ni));
        void *r_dinp = convert(h, t, rt, dinp, ni);
        float *dA = rnd(h, na, key + 7, 1.0), *dB = rnd(h, nb, key + 8, 1.0);
        float *d_dA = to_dev(h, dA, FB(na)), *d_dB = to_dev(h, dB, FB(nb));
        void *scratch = hmem(h, TB(rt, 2 * N * r)), *d_scratch = poisoned(h, TB(t, 2 * N * r));
        REF(h, lora_backward, rt, with_dinp ? r_dinp : NULL, dA, dB, scratch, r_dout, ldo, r_inp,
            r_A, r_B, scale, N, C, r, OC);
        BUT(h, lora_backward, t, with_dinp ? d_dinp : NULL, d_dA, d_dB, d_scratch, d_dout, ldo,
            d_inp, d_A, d_B, scale, N, C, r, OC);
        expect_product(h,
                       NAME("lora_backward %s dinp N=%d C=%d r=%d dinp=%d", tn, N, C, r, with_dinp),
                       t, rt, d_dinp, convert(h, rt, t, r_dinp, ni), ni, budget);
        expect_dev_close(h,
                         NAME("lora_backward %s dA N=%d C=%d r=%d dinp=%d", tn, N, C, r, with_dinp),
                         d_dA, dA, na, budget);
        expect_dev_close(h,
                         NAME("lora_backward %s dB N=%d C=%d r=%d dinp=%d", tn, N, C, r, with_dinp),
                         d_dB, dB, nb, budget);
    }
}

/* ---- fp8 ----------------------------------------------------------------- */

/* Quantisation of values that saturate (scale puts the largest past the
 * format's range), include zeros of both signs, and optionally a NaN (amax
 * NaN); the codes and amax exactly. Dequantisation of every code (NaN and
 * infinity codes included) exactly: a decode and one fp32 product. */
static void check_fp8(struct harness *h, enum fp8_format f, size_t n, int with_nan, uint64_t key)
{
    float *x = rnd(h, n, key, 3.0);
    if (n > 3) {
        x[1] = 0.0f;
        x[2] = -0.0f;
        x[3] = 1e-30f;
    }
    if (with_nan)
        x[n / 2] = NAN;
    const float scale = fp8_max_finite(f) / 2.0f;
    uint8_t *q = hmem(h, n), *d_q = poisoned(h, n);
    float amax = 0.0f, d_amax = 0.0f;
    REF(h, fp8_quantize, q, &amax, x, n, scale, f);
    BUT(h, fp8_quantize, d_q, &d_amax, to_dev(h, x, FB(n)), n, scale, f);
    expect_dev_same(
        h, NAME("fp8_quantize codes %s n=%zu nan=%d", fp8_format_info(f)->name, n, with_nan), ZT_U8,
        d_q, q, n);
    expect_same(h, NAME("fp8_quantize amax %s n=%zu nan=%d", fp8_format_info(f)->name, n, with_nan),
                ZT_F32, &d_amax, &amax, 1);

    uint8_t *codes = hmem(h, n);
    for (size_t i = 0; i < n; i++)
        codes[i] = (uint8_t)(i < 256 ? i : rng_u64(key + 1, i) & 0xff);
    const float scale_inv = -0.37f;
    float *y = hmem(h, FB(n)), *d_y = poisoned(h, FB(n));
    REF(h, fp8_dequantize, y, codes, n, scale_inv, f);
    BUT(h, fp8_dequantize, d_y, to_dev(h, codes, n), n, scale_inv, f);
    expect_dev_same(h, NAME("fp8_dequantize %s n=%zu", fp8_format_info(f)->name, n), ZT_F32, d_y, y,
                    n);
}

/* ---- attention and rotary positions ---------------------------------------- */

/* Causal grouped-query attention, fused: out and lse written; the backward
 * on the reference's out and lse, key/value heads accumulating over the
 * query heads that share them. */
static void check_attention(struct harness *h, enum zt_dtype t, int B, int T, int NH, int NKV,
                            int hs, uint64_t key)
{
    const size_t nq = (size_t)B * T * (size_t)(NH + 2 * NKV) * hs, no = (size_t)B * T * NH * hs;
    const size_t nl = (size_t)B * NH * T;
    const void *qkv = rnd_t(h, t, nq, key, 1.5);
    const void *d_qkv = to_dev(h, qkv, TB(t, nq));
    void *out = hmem(h, TB(t, no)), *d_out = poisoned(h, TB(t, no));
    float *lse = hmem(h, FB(nl)), *d_lse = poisoned(h, FB(nl));
    REF(h, attention_forward, t, out, lse, qkv, B, T, NH, NKV, hs);
    BUT(h, attention_forward, t, d_out, d_lse, d_qkv, B, T, NH, NKV, hs);
    char shape[96];
    snprintf(shape, sizeof shape, "%s B=%d T=%d NH=%d NKV=%d hs=%d", dtype_name(t), B, T, NH, NKV,
             hs);
    expect_typed(h, NAME("attention_forward out %s", shape), t, d_out, out, no, typed_budget(t));
    expect_dev_close(h, NAME("attention_forward lse %s", shape), d_lse, lse, nl, FP32_BUDGET);
    const void *dout = rnd_t(h, t, no, key + 1, 1.0);
    void *dqkv = rnd_t(h, t, nq, key + 2, 1.0), *d_dqkv = to_dev(h, dqkv, TB(t, nq));
    REF(h, attention_backward, t, dqkv, dout, qkv, out, lse, B, T, NH, NKV, hs);
    BUT(h, attention_backward, t, d_dqkv, to_dev(h, dout, TB(t, no)), d_qkv,
        to_dev(h, out, TB(t, no)), to_dev(h, lse, FB(nl)), B, T, NH, NKV, hs);
    expect_typed(h, NAME("attention_backward dqkv %s", shape), t, d_dqkv, dqkv, nq,
                 typed_budget(t));
}

/* Attention of n new rows over a key/value cache of p0 + n positions
 * (decoding), fp32 only; row strides wider than the heads. */
static void check_attention_cached(struct harness *h, int p0, int n, int NH, int NKV, int hs,
                                   uint64_t key)
{
    const int qs = (NH + 2 * NKV) * hs, ks = NKV * hs + 3, P = p0 + n;
    const size_t nq = (size_t)n * qs, nk = (size_t)P * ks, no = (size_t)n * NH * hs;
    const float *q = rnd_t(h, ZT_F32, nq, key, 1.5), *k = rnd_t(h, ZT_F32, nk, key + 1, 1.5);
    const float *v = rnd_t(h, ZT_F32, nk, key + 2, 1.0);
    float *out = hmem(h, FB(no)), *d_out = poisoned(h, FB(no));
    REF(h, attention_cached_forward, ZT_F32, out, q, qs, k, v, ks, p0, n, NH, NKV, hs);
    BUT(h, attention_cached_forward, ZT_F32, d_out, to_dev(h, q, FB(nq)), qs, to_dev(h, k, FB(nk)),
        to_dev(h, v, FB(nk)), ks, p0, n, NH, NKV, hs);
    expect_dev_close(
        h, NAME("attention_cached_forward p0=%d n=%d NH=%d NKV=%d hs=%d", p0, n, NH, NKV, hs),
        d_out, out, no, FP32_BUDGET);
}

/* RoPE on the query heads and on the key heads of qkv rows (row_stride
 * wider than the rotated heads: the columns past them must stay), forward
 * then backward, both in place on the same random buffer on each side. */
static void check_rope(struct harness *h, enum zt_dtype t, int B, int T, int NH, int NKV, int hs,
                       uint64_t key)
{
    const int stride = (NH + 2 * NKV) * hs;
    const size_t n = (size_t)B * T * stride, nt = (size_t)T * (hs / 2);
    float *cos_t = hmem(h, FB(nt)), *sin_t = hmem(h, FB(nt));
    for (int p = 0; p < T; p++)
        for (int i = 0; i < hs / 2; i++) {
            const double angle = p * pow(10000.0, -2.0 * i / hs);
            cos_t[p * (hs / 2) + i] = (float)cos(angle);
            sin_t[p * (hs / 2) + i] = (float)sin(angle);
        }
    const float *d_cos = to_dev(h, cos_t, FB(nt)), *d_sin = to_dev(h, sin_t, FB(nt));
    for (int backward = 0; backward < 2; backward++)
        for (int part = 0; part < 2; part++) { /* 0: the query heads, 1: the key heads */
            void *x = rnd_t(h, t, n, key + (uint64_t)(2 * backward + part), 1.0);
            void *d_x = to_dev(h, x, TB(t, n));
            const size_t off = part ? (size_t)NH * hs : 0;
            const int heads = part ? NKV : NH;
            void *xo = elem_at(t, x, off), *d_xo = elem_at(t, d_x, off);
            if (backward) {
                REF(h, rope_backward, t, xo, cos_t, sin_t, B, T, heads, hs, stride);
                BUT(h, rope_backward, t, d_xo, d_cos, d_sin, B, T, heads, hs, stride);
            } else {
                REF(h, rope_forward, t, xo, cos_t, sin_t, B, T, heads, hs, stride);
                BUT(h, rope_forward, t, d_xo, d_cos, d_sin, B, T, heads, hs, stride);
            }
            expect_typed(h,
                         NAME("rope_%s %s B=%d T=%d heads=%d hs=%d stride=%d",
                              backward ? "backward" : "forward", dtype_name(t), B, T, heads, hs,
                              stride),
                         t, d_x, x, n, typed_budget(t));
        }
}

/* ---- pointwise ------------------------------------------------------------- */

/* GELU, the residual add and the mask multiply with its gradient. */
static void check_pointwise(struct harness *h, enum zt_dtype t, int N, uint64_t key)
{
    const size_t n = (size_t)N;
    const char *tn = dtype_name(t);
    const double budget = typed_budget(t);
    const void *a = rnd_t(h, t, n, key, 5.0), *b = rnd_t(h, t, n, key + 1, 2.0);
    const void *dout = rnd_t(h, t, n, key + 2, 1.0);
    const void *d_a = to_dev(h, a, TB(t, n)), *d_b = to_dev(h, b, TB(t, n)),
               *d_dout = to_dev(h, dout, TB(t, n));
    void *out = hmem(h, TB(t, n)), *d_out = poisoned(h, TB(t, n));
    REF(h, gelu_forward, t, out, a, N);
    BUT(h, gelu_forward, t, d_out, d_a, N);
    expect_typed(h, NAME("gelu_forward %s N=%d", tn, N), t, d_out, out, n, budget);
    void *dinp = rnd_t(h, t, n, key + 3, 1.0), *d_dinp = to_dev(h, dinp, TB(t, n));
    REF(h, gelu_backward, t, dinp, a, dout, N);
    BUT(h, gelu_backward, t, d_dinp, d_a, d_dout, N);
    expect_typed(h, NAME("gelu_backward %s N=%d", tn, N), t, d_dinp, dinp, n, budget);

    out = hmem(h, TB(t, n));
    d_out = poisoned(h, TB(t, n));
    REF(h, residual_forward, t, out, a, b, N);
    BUT(h, residual_forward, t, d_out, d_a, d_b, N);
    expect_typed(h, NAME("residual_forward %s N=%d", tn, N), t, d_out, out, n, budget);
    out = hmem(h, TB(t, n));
    d_out = poisoned(h, TB(t, n));
    REF(h, mul_forward, t, out, a, b, N);
    BUT(h, mul_forward, t, d_out, d_a, d_b, N);
    expect_typed(h, NAME("mul_forward %s N=%d", tn, N), t, d_out, out, n, budget);
    void *da = rnd_t(h, t, n, key + 4, 1.0), *d_da = to_dev(h, da, TB(t, n));
    REF(h, mul_backward, t, da, b, dout, N);
    BUT(h, mul_backward, t, d_da, d_b, d_dout, N);
    expect_typed(h, NAME("mul_backward %s N=%d", tn, N), t, d_da, da, n, budget);
}

static void check_swiglu(struct harness *h, enum zt_dtype t, int N, int I, uint64_t key)
{
    const size_t n = (size_t)N * I;
    const char *tn = dtype_name(t);
    const void *gu = rnd_t(h, t, 2 * n, key, 4.0), *dout = rnd_t(h, t, n, key + 1, 1.0);
    const void *d_gu = to_dev(h, gu, TB(t, 2 * n));
    void *out = hmem(h, TB(t, n)), *d_out = poisoned(h, TB(t, n));
    REF(h, swiglu_forward, t, out, gu, N, I);
    BUT(h, swiglu_forward, t, d_out, d_gu, N, I);
    expect_typed(h, NAME("swiglu_forward %s N=%d I=%d", tn, N, I), t, d_out, out, n,
                 typed_budget(t));
    void *dgu = rnd_t(h, t, 2 * n, key + 2, 1.0), *d_dgu = to_dev(h, dgu, TB(t, 2 * n));
    REF(h, swiglu_backward, t, dgu, dout, gu, N, I);
    BUT(h, swiglu_backward, t, d_dgu, to_dev(h, dout, TB(t, n)), d_gu, N, I);
    expect_typed(h, NAME("swiglu_backward %s N=%d I=%d", tn, N, I), t, d_dgu, dgu, 2 * n,
                 typed_budget(t));
}

/* ---- cross-entropy --------------------------------------------------------- */

/* The fused softmax + cross-entropy with masked rows (target -1): losses
 * and every prob written; the backward on the reference's probs. */
static void check_crossentropy(struct harness *h, enum zt_dtype t, int N, int V, uint64_t key)
{
    const size_t n = (size_t)N * V;
    const char *tn = dtype_name(t);
    const void *logits = rnd_t(h, t, n, key, 4.0);
    const int32_t *tgt = ids(h, N, V, key + 1, 1);
    const int32_t *d_tgt = to_dev(h, tgt, IB(N));
    float *losses = hmem(h, FB(N)), *d_losses = poisoned(h, FB(N));
    void *probs = hmem(h, TB(t, n)), *d_probs = poisoned(h, TB(t, n));
    REF(h, crossentropy_forward, t, losses, probs, logits, tgt, N, V);
    BUT(h, crossentropy_forward, t, d_losses, d_probs, to_dev(h, logits, TB(t, n)), d_tgt, N, V);
    expect_dev_close(h, NAME("crossentropy_forward %s losses N=%d V=%d", tn, N, V), d_losses,
                     losses, (size_t)N, FP32_BUDGET);
    expect_typed(h, NAME("crossentropy_forward %s probs N=%d V=%d", tn, N, V), t, d_probs, probs, n,
                 typed_budget(t));
    void *dlogits = rnd_t(h, t, n, key + 2, 1.0), *d_dlogits = to_dev(h, dlogits, TB(t, n));
    const float dloss = 1.0f / (float)N;
    REF(h, crossentropy_backward, t, dlogits, probs, tgt, dloss, N, V);
    BUT(h, crossentropy_backward, t, d_dlogits, to_dev(h, probs, TB(t, n)), d_tgt, dloss, N, V);
    expect_typed(h, NAME("crossentropy_backward %s N=%d V=%d", tn, N, V), t, d_dlogits, dlogits, n,
                 typed_budget(t));
}

/* The vocabulary-parallel cross-entropy on the columns [v_lo, v_lo + Vp)
 * of V, each of its four ops on its own given inputs (the reductions
 * between them are the caller's): targets over the whole vocabulary,
 * some in the slice, some not, some masked. Columns past V are a padded
 * vocabulary's padding (the ops' Vr). */
static void check_crossentropy_vocab(struct harness *h, enum zt_dtype t, int N, int V, int v_lo,
                                     int Vp, uint64_t key)
{
    const size_t n = (size_t)N * Vp;
    const int Vr = V - v_lo < 0 ? 0 : V - v_lo < Vp ? V - v_lo : Vp;
    const double budget = typed_budget(t);
    char shape[96];
    snprintf(shape, sizeof shape, "%s N=%d V=%d v_lo=%d Vp=%d Vr=%d", dtype_name(t), N, V, v_lo, Vp,
             Vr);
    const void *logits = rnd_t(h, t, n, key, 4.0);
    const void *d_logits = to_dev(h, logits, TB(t, n));
    const int32_t *tgt = ids(h, N, V, key + 1, 1);
    const int32_t *d_tgt = to_dev(h, tgt, IB(N));

    float *row_max = hmem(h, FB(N)), *d_row_max = poisoned(h, FB(N));
    REF(h, crossentropy_vocab_max, t, row_max, logits, N, Vp, Vr);
    BUT(h, crossentropy_vocab_max, t, d_row_max, d_logits, N, Vp, Vr);
    expect_dev_close(h, NAME("crossentropy_vocab_max %s", shape), d_row_max, row_max, (size_t)N,
                     FP32_BUDGET);

    /* the global max: at least this part's */
    float *gmax = rnd_range(h, (size_t)N, key + 2, 0.0, 1.0);
    for (int i = 0; i < N; i++)
        gmax[i] += row_max[i];
    void *probs = hmem(h, TB(t, n)), *d_probs = poisoned(h, TB(t, n));
    float *stats = hmem(h, FB(2 * N)), *d_stats = poisoned(h, FB(2 * N));
    REF(h, crossentropy_vocab_exp, t, probs, stats, logits, gmax, tgt, N, Vp, Vr, v_lo);
    BUT(h, crossentropy_vocab_exp, t, d_probs, d_stats, d_logits, to_dev(h, gmax, FB(N)), d_tgt, N,
        Vp, Vr, v_lo);
    expect_typed(h, NAME("crossentropy_vocab_exp probs %s", shape), t, d_probs, probs, n, budget);
    expect_dev_close(h, NAME("crossentropy_vocab_exp row_stats %s", shape), d_stats, stats,
                     2 * (size_t)N, FP32_BUDGET);

    /* the summed stats: this part's sums plus the other parts' */
    float *tot = hdup(h, stats, FB(2 * N));
    for (int i = 0; i < N; i++)
        tot[i] += 1.0f + (float)i;
    void *d_fprobs = to_dev(h, probs, TB(t, n));
    float *losses = hmem(h, FB(N)), *d_losses = poisoned(h, FB(N));
    REF(h, crossentropy_vocab_finish, t, losses, probs, tot, tgt, N, Vp);
    BUT(h, crossentropy_vocab_finish, t, d_losses, d_fprobs, to_dev(h, tot, FB(2 * N)), d_tgt, N,
        Vp);
    expect_dev_close(h, NAME("crossentropy_vocab_finish losses %s", shape), d_losses, losses,
                     (size_t)N, FP32_BUDGET);
    expect_typed(h, NAME("crossentropy_vocab_finish probs %s", shape), t, d_fprobs, probs, n,
                 budget);

    void *dlogits = rnd_t(h, t, n, key + 3, 1.0), *d_dlogits = to_dev(h, dlogits, TB(t, n));
    const float dloss = 0.37f;
    REF(h, crossentropy_vocab_backward, t, dlogits, probs, tgt, dloss, N, Vp, v_lo);
    BUT(h, crossentropy_vocab_backward, t, d_dlogits, to_dev(h, probs, TB(t, n)), d_tgt, dloss, N,
        Vp, v_lo);
    expect_typed(h, NAME("crossentropy_vocab_backward %s", shape), t, d_dlogits, dlogits, n,
                 budget);
}

/* ---- engine ops: casts, reductions, scaling -------------------------------- */

/* n floats over many binades (subnormals of fp16 and bf16, fp16's
 * overflow), with ties of both 16-bit formats, signed zeros, infinities
 * and a NaN among the first ones. */
static float *spread_floats(struct harness *h, size_t n, uint64_t key)
{
    float *x = rnd(h, n, key, 2.0);
    for (size_t i = 0; i < n; i++)
        x[i] = ldexpf(x[i], (int)(rng_u64(key + 1, i) % 80) - 50);
    const float special[] = {0.0f,      -0.0f,  1.0f + 0x1p-8f, 1.0f + 0x1p-11f, 65520.0f,
                             70000.0f,  -1e30f, 0x1p-20f,       -0x1p-130f,      INFINITY,
                             -INFINITY, NAN,    0x1p-149f,      -3.0f + 0x1p-7f};
    for (size_t i = 0; i < sizeof special / sizeof special[0] && i < n; i++)
        x[i] = special[i];
    return x;
}

/* n elements of t: the working-precision values of spread_floats, or for
 * 16-bit types every bit pattern first. */
static void *working_values(struct harness *h, enum zt_dtype t, size_t n, uint64_t key)
{
    void *v = hmem(h, n * zt_dtype_size(t));
    REF(h, from_f32, t, spread_floats(h, n, key), v, n);
    if (t != ZT_F32)
        for (size_t i = 0; i < n && i < 65536; i++)
            ((uint16_t *)v)[i] = (uint16_t)i;
    return v;
}

/* to_f32 and from_f32 in every working precision, bit for bit. */
static void check_casts(struct harness *h, enum zt_dtype t, size_t n, uint64_t key)
{
    const char *tn = dtype_name(t);
    const void *src = working_values(h, t, n, key);
    float *f = hmem(h, FB(n)), *d_f = poisoned(h, FB(n));
    REF(h, to_f32, t, src, f, n);
    BUT(h, to_f32, t, to_dev(h, src, n * zt_dtype_size(t)), d_f, n);
    expect_elementwise(h, NAME("to_f32 %s n=%zu", tn, n), ZT_F32, d_f, f, n);

    const float *x = spread_floats(h, n, key + 2);
    void *w = hmem(h, n * zt_dtype_size(t)), *d_w = poisoned(h, n * zt_dtype_size(t));
    REF(h, from_f32, t, x, w, n);
    BUT(h, from_f32, t, to_dev(h, x, FB(n)), d_w, n);
    expect_elementwise(h, NAME("from_f32 %s n=%zu", tn, n), t, d_w, w, n);
}

/* add_into in every working precision, on moderate values (the sum of
 * two spread values is mostly one of them). */
static void check_add_into(struct harness *h, enum zt_dtype t, size_t n, uint64_t key)
{
    const size_t bytes = n * zt_dtype_size(t);
    void *dst = hmem(h, bytes), *src = hmem(h, bytes);
    REF(h, from_f32, t, rnd(h, n, key, 3.0), dst, n);
    REF(h, from_f32, t, rnd(h, n, key + 1, 3.0), src, n);
    void *d_dst = to_dev(h, dst, bytes);
    REF(h, add_into, t, dst, src, n);
    BUT(h, add_into, t, d_dst, to_dev(h, src, bytes), n);
    expect_elementwise(h, NAME("add_into %s n=%zu", dtype_name(t), n), t, d_dst, dst, n);
}

/* sum_squares within SUMSQ_BUDGET (its order of summation is each
 * backend's own); with an infinity among the values, non-finite on both. */
static void check_sum_squares(struct harness *h, enum zt_dtype t, size_t n, int with_inf,
                              uint64_t key)
{
    const size_t bytes = n * zt_dtype_size(t);
    float *x = rnd(h, n, key, 3.0);
    if (with_inf)
        x[n / 3] = -INFINITY;
    void *src = hmem(h, bytes);
    REF(h, from_f32, t, x, src, n);
    const double scale = 1.0 / 3.0;
    double ref = 0.0, got = 0.0;
    REF(h, sum_squares, t, src, n, scale, &ref);
    BUT(h, sum_squares, t, to_dev(h, src, bytes), n, scale, &got);
    const char *name = NAME("sum_squares %s n=%zu inf=%d", dtype_name(t), n, with_inf);
    if (!isfinite(ref))
        expect_same(h, name, ZT_F64, &got, &ref, 1);
    else
        expect_close_t(h, name, ZT_F64, &got, &ref, 1, SUMSQ_BUDGET);
}

/* scale in place, and memset_zero of an odd byte count from an odd
 * offset: the bytes around it must stay. */
static void check_scale_and_memset(struct harness *h, size_t n, uint64_t key)
{
    float *x = rnd(h, n, key, 3.0), *d_x = to_dev(h, x, FB(n));
    REF(h, scale, x, n, -0.37f);
    BUT(h, scale, d_x, n, -0.37f);
    expect_elementwise(h, NAME("scale n=%zu", n), ZT_F32, d_x, x, n);

    const size_t bytes = n + 6;
    unsigned char *b = hmem(h, bytes);
    memset(b, 0xab, bytes);
    unsigned char *d_b = to_dev(h, b, bytes);
    REF(h, memset_zero, b + 3, n);
    BUT(h, memset_zero, d_b + 3, n);
    expect_elementwise(h, NAME("memset_zero bytes=%zu", n), ZT_U8, d_b, b, bytes);
}

/* ---- element-wise optimizers ----------------------------------------------- */

enum rule { RULE_ADAMW, RULE_ADAM, RULE_SGD, RULE_LION };

static const char *const RULE_NAMES[] = {"adamw_update", "adam_update", "sgd_update",
                                         "lion_update"};

static zt_status run_rule(const struct ops_backend *ops, enum rule rule,
                          const struct optimizer_range *r, const struct optimizer_hparams *hp)
{
    switch (rule) {
    case RULE_ADAMW:
        return ops->adamw_update(ops, r, hp);
    case RULE_ADAM:
        return ops->adam_update(ops, r, hp);
    case RULE_SGD:
        return ops->sgd_update(ops, r, hp);
    default:
        return ops->lion_update(ops, r, hp);
    }
}

/* One fused update of n elements: gradients in grad_t scaled by gscale,
 * the rule's states (n_states of them, random: v non-negative) and, when
 * working_t is not ZT_F32, the working copy refreshed (it starts as NaN on
 * the backend's side). Parameters, states and the working copy bit for bit. */
static void check_rule(struct harness *h, enum rule rule, const struct optimizer_hparams *hp,
                       int n_states, enum zt_dtype grad_t, enum zt_dtype working_t, size_t n,
                       float decay, uint64_t key)
{
    char what[128];
    snprintf(what, sizeof what, "%s grads=%s working=%s n=%zu decay=%g step=%ld mom=%g nest=%d",
             RULE_NAMES[rule], dtype_name(grad_t),
             working_t == ZT_F32 ? "none" : dtype_name(working_t), n, (double)decay, hp->step,
             (double)hp->momentum, hp->nesterov);
    const size_t gbytes = n * zt_dtype_size(grad_t), wbytes = n * zt_dtype_size(working_t);
    float *p = rnd(h, n, key, 1.0), *d_p = to_dev(h, p, FB(n));
    void *g = hmem(h, gbytes);
    REF(h, from_f32, grad_t, rnd(h, n, key + 1, 2.0), g, n);
    struct optimizer_range r = {.params = p,
                                .grads = g,
                                .grad_dtype = grad_t,
                                .gscale = 0.7f,
                                .n = n,
                                .decay = decay,
                                .working_dtype = working_t};
    struct optimizer_range d = r;
    d.params = d_p;
    d.grads = to_dev(h, g, gbytes);
    for (int k = 0; k < n_states; k++) {
        /* the second moments (adam's state 1) are non-negative */
        r.states[k] = k == 1 ? rnd_range(h, n, key + 2 + (uint64_t)k, 0.0, 0.01)
                             : rnd(h, n, key + 2 + (uint64_t)k, 0.1);
        d.states[k] = to_dev(h, r.states[k], FB(n));
    }
    if (working_t != ZT_F32) {
        r.working = hmem(h, wbytes);
        d.working = poisoned(h, wbytes);
    }
    ck_assert_int_eq(run_rule(h->ref, rule, &r, hp), ZT_OK);
    status_ok(h, what, run_rule(h->but, rule, &d, hp));
    expect_elementwise(h, NAME("%s: params", what), ZT_F32, d_p, p, n);
    for (int k = 0; k < n_states; k++)
        expect_elementwise(h, NAME("%s: state %d", what, k), ZT_F32, d.states[k], r.states[k], n);
    if (working_t != ZT_F32)
        expect_elementwise(h, NAME("%s: working", what), working_t, d.working, r.working, n);
}

static const struct optimizer_hparams ADAM_HP = {
    .lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f, .step = 3};

/* Every rule over the engine's precisions (fp32 gradients and no working
 * copy; 16-bit gradients and working copy; fp32 gradients with a bf16
 * working copy), decay on and off, n odd and n = 1. SGD without momentum
 * (no state), with momentum at its first step (buf = g) and later, and
 * Nesterov. */
static void check_elementwise_optimizers(struct harness *h, size_t n, uint64_t key)
{
    static const enum zt_dtype PAIRS[][2] = {
        {ZT_F32, ZT_F32}, {ZT_BF16, ZT_BF16}, {ZT_F16, ZT_F16}, {ZT_F32, ZT_BF16}};
    for (int c = 0; c < 4; c++) {
        const enum zt_dtype gt = PAIRS[c][0], wt = PAIRS[c][1];
        const float decay = c % 2 ? 0.0f : 1.0f;
        const uint64_t k = key + 100 * (uint64_t)c;
        check_rule(h, RULE_ADAMW, &ADAM_HP, 2, gt, wt, n, decay, k);
        check_rule(h, RULE_ADAM, &ADAM_HP, 2, gt, wt, n, decay, k + 10);
        struct optimizer_hparams lion = ADAM_HP;
        lion.beta2 = 0.99f;
        check_rule(h, RULE_LION, &lion, 1, gt, wt, n, decay, k + 20);
        struct optimizer_hparams sgd = {.lr = 0.05f, .weight_decay = 0.01f, .step = 3};
        check_rule(h, RULE_SGD, &sgd, 0, gt, wt, n, decay, k + 30);
        sgd.momentum = 0.9f;
        sgd.dampening = 0.1f;
        for (long step = 1; step <= 3; step += 2) {
            sgd.step = step;
            sgd.nesterov = 0;
            check_rule(h, RULE_SGD, &sgd, 1, gt, wt, n, decay, k + 40 + (uint64_t)step);
            sgd.nesterov = 1;
            sgd.dampening = 0.0f; /* PyTorch's Nesterov takes no dampening */
            check_rule(h, RULE_SGD, &sgd, 1, gt, wt, n, decay, k + 50 + (uint64_t)step);
            sgd.dampening = 0.1f;
        }
    }
}

/* ---- whole-tensor optimizers ------------------------------------------------- */

/* Overwrites dev[0..bytes) with host's. */
static void put(struct harness *h, void *dev, const void *host, size_t bytes)
{
    if (bytes)
        ck_assert_int_eq(h->be.dev.ops->copy_from_host(&h->be.dev, dev, host, bytes), ZT_OK);
}

/* Compares n host values of t: bit for bit when budget is 0, else within
 * budget relative to the largest. */
static void expect_values(struct harness *h, const char *name, enum zt_dtype t, const void *but,
                          const void *ref, size_t n, double budget)
{
    if (budget == 0.0)
        expect_same(h, name, t, but, ref, n);
    else
        expect_close_t(h, name, t, but, ref, n, budget);
}

/* The tensors of one side (reference on the host, or the backend's
 * device) for the whole-tensor optimizers: the tensor whole, and one
 * tensor-state copy per rank. */
enum { RANKS = 3 };
struct tensor_side {
    float *params, *grads;
    void *states[OPTIMIZER_MAX_STATES];
    float *tstate[RANKS];
    double *totals[OPTIMIZER_MAX_ROUNDS];
};

/* Rank k's piece [cut[k], cut[k+1]) of the tensor on one side; an empty
 * piece has lo = hi = 0 and no pointers, as shard/update.c passes it. */
static struct optimizer_piece piece_of(const struct tensor_side *s, int k, const size_t *cut,
                                       int rows, int cols, const size_t *esz, int n_states)
{
    struct optimizer_piece pc = {.rows = rows,
                                 .cols = cols,
                                 .numel = (size_t)rows * (size_t)cols,
                                 .tensor_state = s->tstate[k],
                                 .decay = 1.0f};
    for (int q = 0; q < OPTIMIZER_MAX_ROUNDS; q++)
        pc.stats[q] = s->totals[q];
    if (cut[k] == cut[k + 1])
        return pc;
    pc.lo = cut[k];
    pc.hi = cut[k + 1];
    pc.params = s->params + pc.lo;
    pc.grads = s->grads + pc.lo;
    for (int j = 0; j < n_states; j++)
        pc.states[j] = (char *)s->states[j] + pc.lo * esz[j];
    return pc;
}

/* Budgets of the whole-tensor optimizers' results, by what they are. */
struct piece_budgets {
    double stats[OPTIMIZER_MAX_ROUNDS]; /* each round's partial and total statistics */
    double values;                      /* parameters, states, tensor state */
};

/* Round q on every rank's piece: each rank's partial statistics zeroed
 * with the table's memset_zero (as the engine does), filled by the round,
 * compared, and combined into the totals by the round's reduction (the
 * allreduce). */
static void pieces_round(struct harness *h, const struct optimizer_ops *o, int q,
                         struct tensor_side *ref, struct tensor_side *but, const size_t *cut,
                         int rows, int cols, const size_t *esz, int n_states,
                         const struct optimizer_hparams *hp, const struct piece_budgets *bud,
                         const char *what)
{
    const size_t ns = o->stats_len(q, rows, cols, hp), bytes = ns * sizeof(double);
    double *tot_ref = hmem(h, bytes), *tot_but = hmem(h, bytes);
    for (int k = 0; k < RANKS; k++) {
        struct optimizer_piece pr = piece_of(ref, k, cut, rows, cols, esz, n_states);
        struct optimizer_piece pb = piece_of(but, k, cut, rows, cols, esz, n_states);
        double *part_ref = hmem(h, bytes), *part_dev = dev_alloc(h, bytes);
        BUT(h, memset_zero, part_dev, bytes);
        pr.stats[q] = part_ref;
        pb.stats[q] = part_dev;
        ck_assert_int_eq(o->tensor_round(h->ref, q, &pr, hp), ZT_OK);
        status_ok(h, NAME("%s round %d", what, q), o->tensor_round(h->but, q, &pb, hp));
        const double *part_but = from_dev(h, part_dev, bytes);
        expect_values(h, NAME("%s round %d rank %d: stats", what, q, k), ZT_F64, part_but, part_ref,
                      ns, bud->stats[q]);
        const int max = o->round_reduce[q] == OPTIMIZER_REDUCE_MAX;
        for (size_t i = 0; i < ns; i++) {
            tot_ref[i] = max ? fmax(tot_ref[i], part_ref[i]) : tot_ref[i] + part_ref[i];
            tot_but[i] = max ? fmax(tot_but[i], part_but[i]) : tot_but[i] + part_but[i];
        }
    }
    ref->totals[q] = tot_ref;
    but->totals[q] = to_dev(h, tot_but, bytes);
}

/* `steps` steps of a whole-tensor optimizer on a rows x cols tensor cut
 * into RANKS pieces (the middle one empty), states and tensor state
 * starting at zero as device_alloc leaves them. Every result is compared
 * after each step; then the backend's buffers take the reference's values,
 * so that each step is judged on the same inputs. The second step's
 * gradients are large, so the update clips. */
static void check_pieces(struct harness *h, const char *opt, int rows, int cols,
                         struct optimizer_hparams hp, const struct piece_budgets *bud, int steps,
                         uint64_t key)
{
    const struct optimizer_ops *o = optimizer_find(opt);
    ck_assert_ptr_nonnull(o);
    const size_t n = (size_t)rows * (size_t)cols, len = o->tensor_state_len(rows, cols, &hp);
    const size_t cut[RANKS + 1] = {0, n * 2 / 5, n * 2 / 5, n};
    const int n_states = optimizer_state_count(o, &hp);
    size_t esz[OPTIMIZER_MAX_STATES];
    struct tensor_side ref = {0}, but = {0};
    ref.params = rnd(h, n, key, 1.0);
    but.params = to_dev(h, ref.params, FB(n));
    for (int j = 0; j < n_states; j++) {
        esz[j] = zt_dtype_size(o->state_dtype[j]);
        ref.states[j] = hmem(h, n * esz[j]);
        but.states[j] = to_dev(h, ref.states[j], n * esz[j]);
    }
    for (int k = 0; k < RANKS; k++) {
        ref.tstate[k] = hmem(h, FB(len));
        but.tstate[k] = to_dev(h, ref.tstate[k], FB(len));
    }
    char what[128];
    for (long step = 1; step <= steps; step++) {
        hp.step = step;
        snprintf(what, sizeof what, "%s %dx%d beta1=%g step=%ld", opt, rows, cols, (double)hp.beta1,
                 step);
        ref.grads = rnd(h, n, key + 1 + (uint64_t)step, step == 2 ? 50.0 : 0.5);
        but.grads = to_dev(h, ref.grads, FB(n));
        for (int q = 0; q < o->n_rounds; q++)
            pieces_round(h, o, q, &ref, &but, cut, rows, cols, esz, n_states, &hp, bud, what);
        for (int k = 0; k < RANKS; k++) {
            struct optimizer_piece pr = piece_of(&ref, k, cut, rows, cols, esz, n_states);
            struct optimizer_piece pb = piece_of(&but, k, cut, rows, cols, esz, n_states);
            ck_assert_int_eq(o->tensor_apply(h->ref, &pr, &hp), ZT_OK);
            status_ok(h, NAME("%s apply", what), o->tensor_apply(h->but, &pb, &hp));
        }
        expect_values(h, NAME("%s: params", what), ZT_F32, from_dev(h, but.params, FB(n)),
                      ref.params, n, bud->values);
        put(h, but.params, ref.params, FB(n));
        for (int j = 0; j < n_states; j++) {
            const enum zt_dtype t = o->state_dtype[j] == ZT_U8 ? ZT_U8 : ZT_F32;
            expect_values(h, NAME("%s: state %d", what, j), t,
                          from_dev(h, but.states[j], n * esz[j]), ref.states[j], n, bud->values);
            put(h, but.states[j], ref.states[j], n * esz[j]);
        }
        for (int k = 0; k < RANKS; k++) {
            expect_values(h, NAME("%s: tensor state of rank %d", what, k), ZT_F32,
                          from_dev(h, but.tstate[k], FB(len)), ref.tstate[k], len, bud->values);
            put(h, but.tstate[k], ref.tstate[k], FB(len));
        }
    }
}

/* Adafactor on a factored matrix and a vector, with and without beta1,
 * lr relative to the parameters' RMS and the relative step. Round 0's
 * statistics are double sums of the same floats (SUMSQ_BUDGET); round 1's
 * square the update, which divides by fp32 factors (FP32_BUDGET). */
static void check_adafactor(struct harness *h, int rows, int cols, int variant, uint64_t key)
{
    const struct optimizer_hparams hp = {.lr = 0.03f,
                                         .eps = 1e-30f,
                                         .eps2 = 1e-3f,
                                         .clip_threshold = 1.0f,
                                         .decay_rate = -0.8f,
                                         .weight_decay = 0.1f,
                                         .beta1 = variant ? 0.9f : 0.0f,
                                         .scale_parameter = !variant,
                                         .relative_step = variant};
    const struct piece_budgets bud = {{SUMSQ_BUDGET, FP32_BUDGET}, FP32_BUDGET};
    check_pieces(h, "Adafactor", rows, cols, hp, &bud, 3, key);
}

/* 8-bit AdamW on a quantised tensor cut inside a block (and past a block
 * edge) and on one small enough to keep fp32 moments: codes, absmax and
 * parameters bit for bit (every step is element-wise; the maxima are exact). */
static void check_adamw8bit(struct harness *h, int rows, int cols, uint64_t key)
{
    const struct optimizer_hparams hp = {.lr = 0.01f,
                                         .beta1 = 0.9f,
                                         .beta2 = 0.999f,
                                         .eps = 1e-8f,
                                         .weight_decay = 0.01f,
                                         .min_8bit_size = 256};
    const struct piece_budgets bud = {{ELEMENTWISE_BUDGET, ELEMENTWISE_BUDGET}, ELEMENTWISE_BUDGET};
    check_pieces(h, "AdamW8bit", rows, cols, hp, &bud, 3, key);
}

/* ---- the tests ------------------------------------------------------------- */

/* The model's sizes: B=2 T=7 C=24 NH=4 NKV=2 hs=6 V=37. */
enum { B_ = 2, T_ = 7, C_ = 24, NH_ = 4, NKV_ = 2, HS_ = 6, V_ = 37 };

/* The model-op tests run once per element type: loop index i is WORKING[i]. */
enum { N_WORKING = sizeof WORKING / sizeof WORKING[0] };

START_TEST(embeddings)
{
    const enum zt_dtype t = WORKING[_i];
    struct harness h;
    harness_open(&h);
    check_encoder(&h, t, B_, T_, C_, V_, 1000);
    check_encoder(&h, t, 1, 1, 3, 1, 1100);
    check_encoder(&h, t, 3, 5, 33, 4, 1200); /* many repeats of each token */
    check_encoder_vocab(&h, t, B_, T_, C_, V_, 10, 13, 1300);
    check_encoder_vocab(&h, t, B_, T_, C_, V_, 0, V_, 1400);
    check_encoder_vocab(&h, t, B_, T_, C_, V_, V_ - 1, 1, 1500);
    harness_close(&h);
}
END_TEST

START_TEST(norms)
{
    const enum zt_dtype t = WORKING[_i];
    struct harness h;
    harness_open(&h);
    check_layernorm(&h, t, B_ * T_, C_, 2000);
    check_layernorm(&h, t, 1, 7, 2100);
    check_layernorm(&h, t, 3, 771, 2200);
    check_rmsnorm(&h, t, B_ * T_, C_, 1e-5f, 2300);
    check_rmsnorm(&h, t, 1, 7, 1e-6f, 2400);
    check_rmsnorm(&h, t, 3, 771, 1e-5f, 2500);
    harness_close(&h);
}
END_TEST

/* The products of a 16-bit type run where the backend under test computes
 * it (the CPU needs a GEMM kernel for it, a GPU tensor cores); elsewhere
 * the test says so and checks nothing. */
START_TEST(linear)
{
    const enum zt_dtype t = WORKING[_i];
    struct harness h;
    harness_open(&h);
    if (h.but->computes(h.but, t) != ZT_OK) {
        printf("note: backend '%s' has no %s products here (%s): not checked\n", backend_name(),
               dtype_name(t), zt_error_message());
        harness_close(&h);
        return;
    }
    check_matmul(&h, t, B_ * T_, C_, V_, 3000);
    check_matmul(&h, t, 1, 3, 5, 3100);
    check_matmul(&h, t, 33, 70, 65, 3200);
    check_lora(&h, t, B_ * T_, C_, 3, V_, V_ + 5, 3300);
    check_lora(&h, t, 1, 5, 1, 7, 7, 3400);
    check_lora(&h, t, 33, 70, 4, 65, 3 * 65, 3500);
    harness_close(&h);
}
END_TEST

START_TEST(fp8)
{
    struct harness h;
    harness_open(&h);
    for (int f = 0; f < FP8_FORMAT_COUNT; f++) {
        check_fp8(&h, (enum fp8_format)f, 1001, 0, 4000 + 10 * (uint64_t)f);
        check_fp8(&h, (enum fp8_format)f, 1, 0, 4100 + 10 * (uint64_t)f);
        check_fp8(&h, (enum fp8_format)f, 4099, 1, 4200 + 10 * (uint64_t)f);
    }
    harness_close(&h);
}
END_TEST

START_TEST(attention)
{
    const enum zt_dtype t = WORKING[_i];
    struct harness h;
    harness_open(&h);
    check_attention(&h, t, B_, T_, NH_, NKV_, HS_, 5000);
    check_attention(&h, t, B_, T_, 3, 3, HS_, 5100); /* GPT-2: NKV == NH */
    check_attention(&h, t, 1, 1, 2, 1, 5, 5200);
    check_attention(&h, t, 1, 70, 2, 1, 5, 5300);   /* T past a 64-row tile */
    check_attention(&h, t, 2, 130, 4, 2, 64, 5310); /* GPT-2's head size, several tiles */
    /* wide heads: past 48 KiB of shared memory a block, and the GPU's
     * smaller tile for hs 256 where 32 rows do not fit */
    check_attention(&h, t, 1, 40, 2, 1, 128, 5320);
    check_attention(&h, t, 1, 20, 1, 1, 256, 5330);
    if (t == ZT_F32) {
        check_attention_cached(&h, 0, 9, 4, 2, 16, 5340);
        check_attention_cached(&h, 40, 1, 4, 2, 64, 5350);
        check_attention_cached(&h, 100, 3, 3, 3, 32, 5360);
    }
    check_rope(&h, t, B_, T_, NH_, NKV_, HS_, 5400);
    check_rope(&h, t, 1, 1, 1, 1, 2, 5500);
    check_rope(&h, t, 2, 33, 3, 1, 10, 5600);
    harness_close(&h);
}
END_TEST

START_TEST(pointwise)
{
    const enum zt_dtype t = WORKING[_i];
    struct harness h;
    harness_open(&h);
    check_pointwise(&h, t, 1001, 6000);
    check_pointwise(&h, t, 1, 6100);
    check_pointwise(&h, t, B_ * T_ * C_, 6200);
    check_swiglu(&h, t, B_ * T_, V_, 6300);
    check_swiglu(&h, t, 1, 1, 6400);
    check_swiglu(&h, t, 3, 257, 6500);
    harness_close(&h);
}
END_TEST

START_TEST(crossentropy)
{
    const enum zt_dtype t = WORKING[_i];
    struct harness h;
    harness_open(&h);
    check_crossentropy(&h, t, B_ * T_, V_, 7000);
    check_crossentropy(&h, t, 1, 1, 7100);
    check_crossentropy(&h, t, 3, 1001, 7200);
    check_crossentropy_vocab(&h, t, B_ * T_, V_, 10, 13, 7300);
    check_crossentropy_vocab(&h, t, B_ * T_, V_, 0, V_, 7400);
    check_crossentropy_vocab(&h, t, B_ * T_, V_, V_ - 1, 1, 7500);
    check_crossentropy_vocab(&h, t, 3, 3000, 1000, 1001, 7600);
    check_crossentropy_vocab(&h, t, B_ * T_, V_, V_ - 5, 16, 7700); /* the last slice, padded */
    harness_close(&h);
}
END_TEST

START_TEST(casts_and_reductions)
{
    struct harness h;
    harness_open(&h);
    for (int i = 0; i < 3; i++) {
        const enum zt_dtype t = WORKING[i];
        const uint64_t k = 8000 + 100 * (uint64_t)i;
        check_casts(&h, t, t == ZT_F32 ? 4099 : 65536 + 37, k);
        check_casts(&h, t, 1, k + 10);
        check_add_into(&h, t, 1001, k + 20);
        check_add_into(&h, t, 1, k + 30);
        check_sum_squares(&h, t, 1, 0, k + 40);
        check_sum_squares(&h, t, 1001, 0, k + 50);
        check_sum_squares(&h, t, 300007, 0, k + 60);
        check_sum_squares(&h, t, 1001, 1, k + 70);
    }
    check_scale_and_memset(&h, 1001, 8500);
    check_scale_and_memset(&h, 1, 8600);
    harness_close(&h);
}
END_TEST

START_TEST(elementwise_optimizers)
{
    struct harness h;
    harness_open(&h);
    check_elementwise_optimizers(&h, 1001, 9000);
    check_elementwise_optimizers(&h, 1, 9500);
    harness_close(&h);
}
END_TEST

START_TEST(whole_tensor_optimizers)
{
    struct harness h;
    harness_open(&h);
    for (int variant = 0; variant < 2; variant++) {
        check_adafactor(&h, 7, V_, variant, 10000 + 100 * (uint64_t)variant);
        check_adafactor(&h, V_, 1, variant, 10200 + 100 * (uint64_t)variant);
    }
    check_adamw8bit(&h, 20, 30, 10400); /* 600 elements: 3 blocks, cut at 240 */
    check_adamw8bit(&h, V_, 1, 10500);  /* below min_8bit_size: fp32 moments */
    harness_close(&h);
}
END_TEST

/* ---- the self-check: the harness reports broken ops ------------------------- */

/* Each broken slot does the CPU's work with one deliberate fault, the kind
 * a new kernel might have. The CPU's device memory is host memory, so a
 * broken op may touch its buffers directly. */
static const struct ops_backend *cpu(void)
{
    return ops_cpu_backend();
}

/* leaves the last element unwritten */
static zt_status gelu_forward_short(const struct ops_backend *self, enum zt_dtype t, void *out,
                                    const void *inp, int N)
{
    (void)self;
    return N > 1 ? cpu()->gelu_forward(cpu(), t, out, inp, N - 1) : ZT_OK;
}

/* assigns its gradients instead of accumulating them */
static zt_status layernorm_backward_assigns(const struct ops_backend *self, enum zt_dtype t,
                                            void *dinp, float *dweight, float *dbias,
                                            const void *dout, const void *inp, const void *weight,
                                            const float *mean, const float *rstd, int N, int C)
{
    (void)self;
    memset(dinp, 0, (size_t)N * C * zt_dtype_size(t));
    if (dweight) {
        memset(dweight, 0, FB(C));
        memset(dbias, 0, FB(C));
    }
    return cpu()->layernorm_backward(cpu(), t, dinp, dweight, dbias, dout, inp, weight, mean, rstd,
                                     N, C);
}

/* truncates its bf16 outputs instead of rounding them to nearest even */
static zt_status gelu_forward_truncates(const struct ops_backend *self, enum zt_dtype t, void *out,
                                        const void *inp, int N)
{
    (void)self;
    if (t != ZT_BF16)
        return cpu()->gelu_forward(cpu(), t, out, inp, N);
    float *x = malloc(FB(N)), *y = malloc(FB(N));
    ck_assert(x && y);
    for (int i = 0; i < N; i++)
        x[i] = zt_bf16_to_f32(((const uint16_t *)inp)[i]);
    zt_status st = cpu()->gelu_forward(cpu(), ZT_F32, y, x, N);
    for (int i = 0; i < N; i++) {
        uint32_t u;
        memcpy(&u, &y[i], sizeof u);
        ((uint16_t *)out)[i] = (uint16_t)(u >> 16);
    }
    free(x);
    free(y);
    return st;
}

/* misses the last element */
static zt_status sum_squares_short(const struct ops_backend *self, enum zt_dtype t, const void *src,
                                   size_t n, double scale, double *out)
{
    (void)self;
    return cpu()->sum_squares(cpu(), t, src, n > 1 ? n - 1 : n, scale, out);
}

/* drops the bias */
static zt_status matmul_forward_no_bias(const struct ops_backend *self, enum zt_dtype t, void *out,
                                        const void *inp, const void *weight, const void *bias,
                                        int N, int C, int OC)
{
    (void)self;
    (void)bias;
    return cpu()->matmul_forward(cpu(), t, out, inp, weight, NULL, N, C, OC);
}

/* truncates to bf16 instead of rounding to nearest even */
static zt_status from_f32_truncates(const struct ops_backend *self, enum zt_dtype t,
                                    const float *src, void *dst, size_t n)
{
    (void)self;
    if (t != ZT_BF16)
        return cpu()->from_f32(cpu(), t, src, dst, n);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], sizeof u);
        ((uint16_t *)dst)[i] = (uint16_t)(u >> 16);
    }
    return ZT_OK;
}

/* never refreshes the working copy */
static zt_status adamw_update_stale_working(const struct ops_backend *self,
                                            const struct optimizer_range *r,
                                            const struct optimizer_hparams *hp)
{
    (void)self;
    struct optimizer_range without = *r;
    without.working = NULL;
    return cpu()->adamw_update(cpu(), &without, hp);
}

/* rotates the wrong way */
static zt_status rope_forward_backwards(const struct ops_backend *self, enum zt_dtype t, void *x,
                                        const float *cos_t, const float *sin_t, int B, int T,
                                        int n_heads, int hs, int row_stride)
{
    (void)self;
    return cpu()->rope_backward(cpu(), t, x, cos_t, sin_t, B, T, n_heads, hs, row_stride);
}

/* the cache without its newest position: row i sees keys 0 .. p0 + i - 1
 * (row 0 of a prompt, which would see none, keeps its own key) */
static zt_status attention_cached_one_short(const struct ops_backend *self, enum zt_dtype t,
                                            void *out, const void *q, int q_stride, const void *k,
                                            const void *v, int kv_stride, int p0, int n, int NH,
                                            int NKV, int hs)
{
    (void)self;
    for (int i = 0; i < n; i++) {
        const int seen = p0 + i > 0 ? p0 + i - 1 : 0;
        ZT_TRY(cpu()->attention_cached_forward(cpu(), t, (float *)out + (size_t)i * NH * hs,
                                               (const float *)q + (size_t)i * q_stride, q_stride, k,
                                               v, kv_stride, seen, 1, NH, NKV, hs));
    }
    return ZT_OK;
}

/* amax one ulp high */
static zt_status fp8_quantize_amax_ulp(const struct ops_backend *self, uint8_t *q, float *amax,
                                       const float *x, size_t n, float scale, enum fp8_format f)
{
    (void)self;
    zt_status st = cpu()->fp8_quantize(cpu(), q, amax, x, n, scale, f);
    *amax = nextafterf(*amax, INFINITY);
    return st;
}

/* counts the masked rows too (their target taken as 0) */
static zt_status crossentropy_backward_unmasked(const struct ops_backend *self, enum zt_dtype t,
                                                void *dlogits, const void *probs,
                                                const int32_t *targets, float dloss, int N, int V)
{
    (void)self;
    int32_t *tgt = malloc(IB(N));
    ck_assert_ptr_nonnull(tgt);
    for (int i = 0; i < N; i++)
        tgt[i] = targets[i] < 0 ? 0 : targets[i];
    zt_status st = cpu()->crossentropy_backward(cpu(), t, dlogits, probs, tgt, dloss, N, V);
    free(tgt);
    return st;
}

/* forgets the weight decay */
static zt_status adafactor_apply_no_decay(const struct ops_backend *self,
                                          const struct optimizer_piece *pc,
                                          const struct optimizer_hparams *hp)
{
    (void)self;
    struct optimizer_piece without = *pc;
    without.decay = 0.0f;
    return cpu()->adafactor_apply(cpu(), &without, hp);
}

static void break_gelu(struct ops_backend *t)
{
    t->gelu_forward = gelu_forward_short;
}
static void break_gelu_bf16(struct ops_backend *t)
{
    t->gelu_forward = gelu_forward_truncates;
}
static void break_layernorm(struct ops_backend *t)
{
    t->layernorm_backward = layernorm_backward_assigns;
}
static void break_sum_squares(struct ops_backend *t)
{
    t->sum_squares = sum_squares_short;
}
static void break_matmul(struct ops_backend *t)
{
    t->matmul_forward = matmul_forward_no_bias;
}
static void break_from_f32(struct ops_backend *t)
{
    t->from_f32 = from_f32_truncates;
}
static void break_adamw(struct ops_backend *t)
{
    t->adamw_update = adamw_update_stale_working;
}
static void break_rope(struct ops_backend *t)
{
    t->rope_forward = rope_forward_backwards;
}
static void break_attention_cached(struct ops_backend *t)
{
    t->attention_cached_forward = attention_cached_one_short;
}
static void break_fp8(struct ops_backend *t)
{
    t->fp8_quantize = fp8_quantize_amax_ulp;
}
static void break_crossentropy(struct ops_backend *t)
{
    t->crossentropy_backward = crossentropy_backward_unmasked;
}
static void break_adafactor(struct ops_backend *t)
{
    t->adafactor_apply = adafactor_apply_no_decay;
}

static void run_gelu(struct harness *h)
{
    check_pointwise(h, ZT_F32, 1001, 6000);
}
static void run_gelu_bf16(struct harness *h)
{
    check_pointwise(h, ZT_BF16, 1001, 6000);
}
static void run_layernorm(struct harness *h)
{
    check_layernorm(h, ZT_F32, B_ * T_, C_, 2000);
}
static void run_sum_squares(struct harness *h)
{
    check_sum_squares(h, ZT_F32, 1001, 0, 8050);
}
static void run_matmul(struct harness *h)
{
    check_matmul(h, ZT_F32, B_ * T_, C_, V_, 3000);
}
static void run_from_f32(struct harness *h)
{
    check_casts(h, ZT_BF16, 1001, 8100);
}
static void run_adamw(struct harness *h)
{
    check_rule(h, RULE_ADAMW, &ADAM_HP, 2, ZT_BF16, ZT_BF16, 1001, 1.0f, 9100);
}
static void run_rope(struct harness *h)
{
    check_rope(h, ZT_F32, B_, T_, NH_, NKV_, HS_, 5400);
}
static void run_attention_cached(struct harness *h)
{
    check_attention_cached(h, 40, 3, 4, 2, 16, 5350);
}
static void run_fp8(struct harness *h)
{
    check_fp8(h, FP8_E4M3, 1001, 0, 4000);
}
static void run_crossentropy(struct harness *h)
{
    check_crossentropy(h, ZT_F32, B_ * T_, V_, 7000);
}
static void run_adafactor(struct harness *h)
{
    check_adafactor(h, 7, V_, 0, 10000);
}

static const struct {
    const char *what;
    void (*install)(struct ops_backend *table);
    void (*check)(struct harness *h);
} BREAKAGES[] = {
    {"a gelu_forward that leaves the last element unwritten", break_gelu, run_gelu},
    {"a bf16 gelu_forward that truncates instead of rounding", break_gelu_bf16, run_gelu_bf16},
    {"a layernorm_backward that assigns instead of accumulating", break_layernorm, run_layernorm},
    {"a sum_squares that misses the last element", break_sum_squares, run_sum_squares},
    {"a matmul_forward that drops the bias", break_matmul, run_matmul},
    {"a from_f32 that truncates to bf16", break_from_f32, run_from_f32},
    {"an adamw_update that leaves the working copy stale", break_adamw, run_adamw},
    {"a rope_forward that rotates the wrong way", break_rope, run_rope},
    {"an attention_cached_forward that misses the newest position", break_attention_cached,
     run_attention_cached},
    {"an fp8_quantize whose amax is one ulp high", break_fp8, run_fp8},
    {"a crossentropy_backward that counts masked rows", break_crossentropy, run_crossentropy},
    {"an adafactor_apply that forgets the weight decay", break_adafactor, run_adafactor},
};
enum { N_BREAKAGES = sizeof BREAKAGES / sizeof BREAKAGES[0] };

/* The check passes on the intact CPU table and reports the broken one. */
START_TEST(harness_reports_broken_ops)
{
    struct harness h;
    harness_open_named(&h, "cpu");
    BREAKAGES[_i].check(&h);
    ck_assert_msg(h.failures == 0, "the intact CPU table failed the check for %s",
                  BREAKAGES[_i].what);
    struct ops_backend broken = *ops_cpu_backend();
    broken.name = "broken";
    BREAKAGES[_i].install(&broken);
    h.but = &broken;
    h.quiet = 1;
    BREAKAGES[_i].check(&h);
    const int caught = h.failures;
    h.failures = 0;
    harness_close(&h);
    ck_assert_msg(caught > 0, "the harness did not report %s", BREAKAGES[_i].what);
}
END_TEST

/* The comparisons themselves: a NaN where the reference has a number, an
 * error just over the budget, a sign of zero; and what they let pass. */
START_TEST(comparisons_fail_when_they_should)
{
    struct harness h;
    harness_open_named(&h, "cpu");
    h.quiet = 1;
    const float ref[3] = {1.0f, -2.0f, 3.0f};
    const float unwritten[3] = {1.0f, -2.0f, NAN}, off[3] = {1.0f, -2.0f, 3.0f + 1e-4f};
    ck_assert(isinf(expect_close(&h, "unwritten", unwritten, ref, 3, FP32_BUDGET)));
    ck_assert_int_eq(h.failures, 1);
    ck_assert(expect_close(&h, "off", off, ref, 3, FP32_BUDGET) > FP32_BUDGET);
    ck_assert_int_eq(h.failures, 2);
    ck_assert(expect_close(&h, "off", off, ref, 3, 1e-4) <= 1e-4);
    ck_assert_int_eq(h.failures, 2);
    const float zero = 0.0f, minus_zero = -0.0f, nan1 = NAN, nan2 = -NAN;
    ck_assert(!expect_same(&h, "zero", ZT_F32, &minus_zero, &zero, 1));
    ck_assert_int_eq(h.failures, 3);
    ck_assert(expect_same(&h, "nan", ZT_F32, &nan1, &nan2, 1));
    const uint8_t c1 = 7, c2 = 8;
    ck_assert(!expect_same(&h, "codes", ZT_U8, &c1, &c2, 1));
    ck_assert_int_eq(h.failures, 4);
    h.failures = 0;
    harness_close(&h);
}
END_TEST

int main(void)
{
    const char *name = backend_name();
    char why[256] = "";
    if (compute_backend_query(name, why, sizeof why) < 0) {
        printf("SKIP: backend '%s' is not usable here: %s\n", name, why);
        return 77;
    }
    /* A CUDA context does not survive fork: run the cases in this process. */
    if (strcmp(name, "cpu") != 0)
        setenv("CK_FORK", "no", 0);
    Suite *s = suite_create("gpu_ops");
    TCase *tc = testutil_tcase(s, "model", 120);
    tcase_add_loop_test(tc, embeddings, 0, N_WORKING);
    tcase_add_loop_test(tc, norms, 0, N_WORKING);
    tcase_add_loop_test(tc, linear, 0, N_WORKING);
    tcase_add_test(tc, fp8);
    tcase_add_loop_test(tc, attention, 0, N_WORKING);
    tcase_add_loop_test(tc, pointwise, 0, N_WORKING);
    tcase_add_loop_test(tc, crossentropy, 0, N_WORKING);
    tc = testutil_tcase(s, "engine", 120);
    tcase_add_test(tc, casts_and_reductions);
    tcase_add_test(tc, elementwise_optimizers);
    tcase_add_test(tc, whole_tensor_optimizers);
    tc = testutil_tcase(s, "selfcheck", 120);
    tcase_add_test(tc, comparisons_fail_when_they_should);
    tcase_add_loop_test(tc, harness_reports_broken_ops, 0, N_BREAKAGES);
    return testutil_run_suite(s, 0);
}
