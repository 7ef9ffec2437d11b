/* plan/calibrate_gemm.c — linear layers timed on a node's CPU ops
 * (calibrate_gemm.h). */
#include "calibrate_gemm.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/clock.h"
#include "../common/half.h"
#include "../worker/backend.h"
#include "../worker/ops.h"
#include "calibrate_rates.h"

/* rows, in, out of each timed layer */
struct layer {
    int rows, in, out;
};

static const struct layer full_layers[] = {
    /* the test configs' width */
    {512, 128, 384},
    {512, 128, 128},
    {512, 128, 512},
    {512, 512, 128},
    /* GPT-2 small at 512 and 2,048 rows */
    {512, 768, 2304},
    {512, 768, 768},
    {512, 768, 3072},
    {512, 3072, 768},
    {2048, 768, 2304},
    {2048, 768, 768},
    {2048, 768, 3072},
    {2048, 3072, 768},
    /* GPT-2 XL */
    {512, 1600, 4800},
    {512, 1600, 1600},
    {512, 1600, 6400},
    {512, 6400, 1600},
    /* a 1.3B GPT (2,048 wide) */
    {512, 2048, 6144},
    {512, 2048, 2048},
    {512, 2048, 8192},
    {512, 8192, 2048},
    /* Llama-2-7B */
    {512, 4096, 4096},
    {512, 4096, 11008},
    {512, 11008, 4096},
    /* LoRA's adapters: r 16 at 4,096, r 8 at 2,048 */
    {512, 4096, 16},
    {512, 16, 4096},
    {512, 2048, 8},
    {512, 8, 6144},
};
static const struct layer quick_layers[] = {{256, 128, 384}, {256, 128, 128}, {256, 768, 768}};

enum {
    N_FULL = sizeof full_layers / sizeof full_layers[0],
    N_QUICK = sizeof quick_layers / sizeof quick_layers[0],
    REFERENCE_IN = 768, /* matmul_flops' width: GPT-2 small's */
    MAX_REPS = 3,       /* each rep of each product reads the eviction buffer first */
    N_BUFFERS = 6       /* inp, weight, out, dout, dinp, dweight */
};
_Static_assert(2 * N_FULL <= MACHINE_MAX_GEMM_RATES, "both thread counts' rows fit a table");

static const enum zt_dtype types[3] = {
    [MACHINE_FP32] = ZT_F32, [MACHINE_BF16] = ZT_BF16, [MACHINE_FP16] = ZT_F16};

static float fill_value(size_t i, int seed)
{
    return (float)((i * 7 + (size_t)seed) % 13) * 0.01f;
}

void calibrate_fill(float *v, size_t n, int seed)
{
    for (size_t i = 0; i < n; i++)
        v[i] = fill_value(i, seed);
}

/* calibrate_fill's values in a 16-bit type t, in place of n floats' first
 * half. */
static void fill16(void *v, size_t n, int seed, enum zt_dtype t)
{
    uint16_t *h = v;
    for (size_t i = 0; i < n; i++)
        h[i] =
            t == ZT_BF16 ? zt_f32_to_bf16(fill_value(i, seed)) : zt_f32_to_f16(fill_value(i, seed));
}

static void layers_of(int quick, const struct layer **v, int *n)
{
    *v = quick ? quick_layers : full_layers;
    *n = quick ? N_QUICK : N_FULL;
}

static int reps_of(int quick)
{
    return quick ? 1 : MAX_REPS;
}

/* The operands, large enough for every layer, and the eviction buffer. */
struct buffers {
    float *v[N_BUFFERS];
    size_t size[N_BUFFERS];
    float *evict;
    size_t evict_n;
};

/* One product of layer s in type t: the forward, or the backward with only
 * the input's or the weight's gradient. */
static zt_status run_product(const struct ops_backend *ops, enum zt_dtype t, int prod,
                             float *const b[N_BUFFERS], const struct layer *s)
{
    if (prod == MACHINE_FORWARD)
        return ops->matmul_forward(ops, t, b[2], b[0], b[1], NULL, s->rows, s->in, s->out);
    return ops->matmul_backward(ops, t, prod == MACHINE_INPUT_GRAD ? b[4] : NULL,
                                prod == MACHINE_WEIGHT_GRAD ? b[5] : NULL, NULL, b[3], b[0], b[1],
                                s->rows, s->in, s->out);
}

/* Reads one float of every cache line of the eviction buffer (sized
 * twice the last-level cache): a product then finds its operands in
 * memory, as a model larger than the cache does in a run, where each
 * layer's weights and activations are used once a pass. Timed on a
 * repeated product they would sit in a cache of hundreds of MiB (15 %
 * faster at Llama-7B's width, 5 times at width 128, on the machine this
 * was measured on). */
static void evict(const struct buffers *b)
{
    volatile float sink;
    float acc = 0.0f;
    for (size_t i = 0; i < b->evict_n; i += 16)
        acc += b->evict[i];
    sink = acc;
    (void)sink;
}

/* Each product's median over the reps after one warm-up, as FLOP/s, each
 * from cold caches (evict). */
static zt_status time_layer(const struct ops_backend *ops, enum zt_dtype t, int quick,
                            const struct buffers *b, const struct layer *s,
                            struct machine_gemm_rate *out)
{
    const int reps = reps_of(quick);
    double sec[MACHINE_PRODUCTS][MAX_REPS + 1];
    for (int r = 0; r < reps + 1; r++)
        for (int p = 0; p < MACHINE_PRODUCTS; p++) {
            evict(b);
            const double t0 = zt_now_seconds();
            ZT_TRY(run_product(ops, t, p, b->v, s));
            sec[p][r] = zt_now_seconds() - t0;
        }
    const double flops = 2.0 * s->rows * s->in * s->out;
    for (int p = 0; p < MACHINE_PRODUCTS; p++) {
        const double f = flops / calibrate_median(sec[p] + 1, reps);
        char text[32];
        snprintf(text, sizeof text, "%.4g", f);
        out->flops[p] = strtod(text, NULL);
        if (!(out->flops[p] > 0) || !isfinite(out->flops[p]))
            return zt_error_set(ZT_ERR_INTERNAL, "calibrate: measured a GEMM at %g FLOP/s", f);
    }
    return ZT_OK;
}

static void buffer_sizes(const struct layer *v, int n, size_t size[N_BUFFERS])
{
    for (int k = 0; k < N_BUFFERS; k++)
        size[k] = 0;
    for (int i = 0; i < n; i++) {
        const size_t r = (size_t)v[i].rows, in = (size_t)v[i].in, out = (size_t)v[i].out;
        const size_t need[N_BUFFERS] = {r * in, out * in, r * out, r * out, r * in, out * in};
        for (int k = 0; k < N_BUFFERS; k++)
            size[k] = need[k] > size[k] ? need[k] : size[k];
    }
}

/* Every layer of type p on `threads` threads, appended to its table. */
static zt_status time_type(struct compute_backend *be, enum machine_precision p, int threads,
                           int quick, const struct buffers *b, struct machine *m)
{
    const struct layer *v;
    int n;
    layers_of(quick, &v, &n);
    struct machine_gemm_table *g = &m->gemm_rates[p];
    ops_cpu_set_threads(threads);
    for (int i = 0; i < n; i++) {
        struct machine_gemm_rate *row = &g->row[g->n];
        *row = (struct machine_gemm_rate){threads, v[i].rows, v[i].in, v[i].out, {0}};
        ZT_TRY(time_layer(be->ops, types[p], quick, b, &v[i], row));
        g->n++;
    }
    return ZT_OK;
}

/* The median rate of the three products together over p's every-core rows
 * of the reference width (any width when it has none). */
static double reference_rate(const struct machine_gemm_table *g, int cores)
{
    double v[MACHINE_MAX_GEMM_RATES];
    int n = 0;
    for (int pass = 0; pass < 2 && n == 0; pass++)
        for (int i = 0; i < g->n; i++) {
            const struct machine_gemm_rate *r = &g->row[i];
            if (r->threads == cores && (pass == 1 || r->in == REFERENCE_IN))
                v[n++] = 3.0 / (1.0 / r->flops[0] + 1.0 / r->flops[1] + 1.0 / r->flops[2]);
        }
    ZT_ASSERT(n > 0);
    char text[32];
    snprintf(text, sizeof text, "%.4g", calibrate_median(v, n));
    return strtod(text, NULL);
}

/* Twice the last-level cache (sysconf's, 32 MiB where it tells none), at
 * most 1 GiB; 8 MiB for --quick, whose rates no plan relies on. */
static size_t eviction_floats(int quick)
{
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0)
        llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    size_t bytes = llc > 0 ? 2 * (size_t)llc : (size_t)32 << 20;
    if (bytes > ((size_t)1 << 30))
        bytes = (size_t)1 << 30;
    return (quick ? (size_t)8 << 20 : bytes) / sizeof(float);
}

static zt_status buffers_alloc(struct compute_backend *be, int quick, struct buffers *b)
{
    const struct layer *v;
    int n;
    layers_of(quick, &v, &n);
    memset(b, 0, sizeof *b);
    buffer_sizes(v, n, b->size);
    b->evict_n = eviction_floats(quick);
    for (int k = 0; k <= N_BUFFERS; k++) {
        const size_t count = k < N_BUFFERS ? b->size[k] : b->evict_n;
        float **p = k < N_BUFFERS ? &b->v[k] : &b->evict;
        ZT_TRY(device_alloc(&be->dev, LEDGER_WORKSPACE, count * sizeof(float),
                            "calibrate: GEMM buffers", (void **)p));
        calibrate_fill(*p, count, k); /* by this thread: OpenMP's workers would spin after */
    }
    return ZT_OK;
}

static void buffers_free(struct compute_backend *be, struct buffers *b)
{
    for (int k = 0; k <= N_BUFFERS; k++) {
        const size_t count = k < N_BUFFERS ? b->size[k] : b->evict_n;
        float *p = k < N_BUFFERS ? b->v[k] : b->evict;
        if (p)
            device_free(&be->dev, LEDGER_WORKSPACE, count * sizeof(float), p);
    }
}

zt_status calibrate_gemm(struct compute_backend *be, int cores, int quick, struct machine *m)
{
    struct buffers b;
    zt_status st = buffers_alloc(be, quick, &b);
    const int counts[2] = {cores, 1};
    for (int p = 0; p < 3 && st == ZT_OK; p++) {
        m->gemm_rates[p].n = 0;
        if (p != MACHINE_FP32 && be->ops->computes(be->ops, types[p]) != ZT_OK)
            continue; /* a run computes it in fp32: the planner reads fp32's */
        for (int k = 0; k < N_BUFFERS - 1 && p != MACHINE_FP32; k++) /* dweight stays fp32 */
            fill16(b.v[k], b.size[k], k, types[p]);
        for (int c = 0; c < 2 && st == ZT_OK; c++)
            if (c == 0 || cores > 1)
                st = time_type(be, (enum machine_precision)p, counts[c], quick, &b, m);
    }
    buffers_free(be, &b);
    ops_cpu_set_threads(1);
    ZT_TRY(st);
    for (int p = 0; p < 3; p++) {
        const int q = m->gemm_rates[p].n > 0 ? p : MACHINE_FP32;
        m->matmul_flops[p] = reference_rate(&m->gemm_rates[q], cores);
    }
    return ZT_OK;
}

void calibrate_gemm_put(FILE *f, const struct compute_backend *be, int quick,
                        const struct machine *m)
{
    fprintf(f,
            "GEMM: the CPU ops' matmul_forward, and matmul_backward for the input gradient and\n"
            "for the weight gradient apart (no bias: the dense products alone), on rank 0,\n"
            "on every core and on one; median of %d after 1 warm-up, each from cold\n"
            "caches (a read of %zu MiB first); GFLOP/s, 2*rows*in*out FLOPs a product\n",
            reps_of(quick), eviction_floats(quick) * sizeof(float) >> 20);
    for (int p = 0; p < 3; p++) {
        char kernel[160];
        if (be->ops->gemm_describe(be->ops, types[p], kernel, sizeof kernel) != ZT_OK)
            snprintf(kernel, sizeof kernel, "unknown: %s", zt_error_message());
        const struct machine_gemm_table *g = &m->gemm_rates[p];
        if (g->n == 0) {
            fprintf(f, "%s: no kernel of its own here (%s): a run computes it in fp32\n",
                    zt_precision_name(types[p]), kernel);
            continue;
        }
        fprintf(f, "%s on %s\n", zt_precision_name(types[p]), kernel);
        fprintf(f, "threads  rows     in    out   forward  input grad  weight grad\n");
        for (int i = 0; i < g->n; i++) {
            const struct machine_gemm_rate *r = &g->row[i];
            fprintf(f, "%7d %5d %6d %6d %9.1f %11.1f %12.1f\n", r->threads, r->rows, r->in, r->out,
                    r->flops[0] / 1e9, r->flops[1] / 1e9, r->flops[2] / 1e9);
        }
    }
}
