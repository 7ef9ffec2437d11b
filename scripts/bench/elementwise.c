/* scripts/bench/elementwise.c — bandwidth of the ZeRO engine's elementwise
 * ops on one core: the generic (plain C) engine ops against the ones
 * ops_cpu_backend() dispatches to (AVX2 where the CPU has it), and the
 * update's old unfused sequence of passes against the fused pass.
 *
 * usage: elementwise_bench [reps] [n...]
 *        (default 7 reps; n = 42500000 and 85000000: a rank's shard of
 *        GPT-2 124M's 85M parameters at 2 ranks, and all of them)
 *
 * GB/s counts the bytes an op must move at least (its reads plus its
 * writes, `B/el` per element) over its median time; the two sets run
 * alternately, back to back in one process, so both see the same machine.
 * The unfused rows count the fused pass's bytes, so that their GB/s compare
 * as times do. memcpy's GB/s (read + write) is the ceiling.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "worker/ops.h"

/* The buffers of one size n: fp32 params, moments and gradients, 16-bit
 * gradients and working params, and the fp32 staging the unfused update
 * used. */
struct bufs {
    size_t n;
    float *p, *m, *v, *g, *tmp;
    uint16_t *g16, *w16;
};

static const struct optimizer_hparams HP = {
    .lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .step = 10};
static const float GSCALE = 0.5f;

static void to_f32(const struct ops_backend *o, struct bufs *b)
{
    o->to_f32(o, ZT_BF16, b->g16, b->tmp, b->n);
}

static void from_f32(const struct ops_backend *o, struct bufs *b)
{
    o->from_f32(o, ZT_BF16, b->p, b->w16, b->n);
}

static void add_into_bf16(const struct ops_backend *o, struct bufs *b)
{
    o->add_into(o, ZT_BF16, b->w16, b->g16, b->n);
}

static void add_into_f32(const struct ops_backend *o, struct bufs *b)
{
    o->add_into(o, ZT_F32, b->tmp, b->g, b->n);
}

static void sum_squares_bf16(const struct ops_backend *o, struct bufs *b)
{
    double s;
    o->sum_squares(o, ZT_BF16, b->g16, b->n, 0.5, &s);
}

static void sum_squares_f32(const struct ops_backend *o, struct bufs *b)
{
    double s;
    o->sum_squares(o, ZT_F32, b->g, b->n, 0.5, &s);
}

static void scale(const struct ops_backend *o, struct bufs *b)
{
    o->scale(o, b->tmp, b->n, 1.0f);
}

/* AdamW over all of b's params and moments, from grads of type t times
 * gscale, refreshing w16 when working. */
static void adamw(const struct ops_backend *o, struct bufs *b, const void *grads, enum zt_dtype t,
                  float gscale, int working)
{
    const struct optimizer_range r = {.params = b->p,
                                      .grads = grads,
                                      .grad_dtype = t,
                                      .gscale = gscale,
                                      .states = {b->m, b->v},
                                      .working = working ? b->w16 : NULL,
                                      .working_dtype = ZT_BF16,
                                      .n = b->n,
                                      .decay = 1.0f};
    o->adamw_update(o, &r, &HP);
}

static void adamw_f32(const struct ops_backend *o, struct bufs *b)
{
    adamw(o, b, b->g, ZT_F32, GSCALE, 0);
}

/* The 16-bit update as shard/update.c ran it before the fused pass: stage
 * fp32 gradients, scale them, update the master, cast it back. */
static void adamw_bf16_unfused(const struct ops_backend *o, struct bufs *b)
{
    o->to_f32(o, ZT_BF16, b->g16, b->tmp, b->n);
    o->scale(o, b->tmp, b->n, GSCALE);
    adamw(o, b, b->tmp, ZT_F32, 1.0f, 0);
    o->from_f32(o, ZT_BF16, b->p, b->w16, b->n);
}

static void adamw_bf16_fused(const struct ops_backend *o, struct bufs *b)
{
    adamw(o, b, b->g16, ZT_BF16, GSCALE, 1);
}

/* The fp32 update before: a scale pass over the gradients, then the rule. */
static void adamw_f32_unfused(const struct ops_backend *o, struct bufs *b)
{
    o->scale(o, b->g, b->n, 1.0f);
    adamw(o, b, b->g, ZT_F32, 1.0f, 0);
}

static const struct bench_op {
    const char *name;
    double bytes; /* per element */
    void (*run)(const struct ops_backend *o, struct bufs *b);
} OPS[] = {
    {"to_f32 bf16", 6, to_f32},
    {"from_f32 bf16", 6, from_f32},
    {"add_into bf16", 6, add_into_bf16},
    {"add_into f32", 12, add_into_f32},
    {"sum_squares bf16", 2, sum_squares_bf16},
    {"sum_squares f32", 4, sum_squares_f32},
    {"scale f32", 8, scale},
    {"adamw f32 (gscale fused)", 28, adamw_f32},
    {"adamw f32 unfused: scale+adamw", 28, adamw_f32_unfused},
    {"adamw bf16 fused pass", 28, adamw_bf16_fused},
    {"adamw bf16 unfused: 4 passes", 28, adamw_bf16_unfused},
};
#define N_OPS (sizeof OPS / sizeof OPS[0])

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static void *alloc_zeroed(size_t n, size_t esz)
{
    unsigned char *p = malloc(n * esz);
    if (!p) {
        fprintf(stderr, "elementwise_bench: out of memory\n");
        exit(1);
    }
    memset(p, 0, n * esz); /* touched before it is timed */
    return p;
}

/* Small values of both signs, in fp32 and as bf16. */
static void fill(struct bufs *b)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < b->n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float x = ((float)(s >> 40) / (float)(1u << 24) - 0.5f) * 0.02f;
        uint32_t u;
        memcpy(&u, &x, sizeof u);
        b->p[i] = x * 10.0f;
        b->g[i] = x;
        b->g16[i] = (uint16_t)(u >> 16);
    }
}

static void bench_size(size_t n, int reps, const struct ops_backend *gen,
                       const struct ops_backend *fast)
{
    struct bufs b = {.n = n};
    b.p = alloc_zeroed(n, 4), b.m = alloc_zeroed(n, 4), b.v = alloc_zeroed(n, 4);
    b.g = alloc_zeroed(n, 4), b.tmp = alloc_zeroed(n, 4);
    b.g16 = alloc_zeroed(n, 2), b.w16 = alloc_zeroed(n, 2);
    fill(&b);
    double *tg = malloc(sizeof(double) * (size_t)reps), *tf = malloc(sizeof(double) * (size_t)reps);
    for (int r = 0; r < reps; r++) {
        double t0 = zt_now_seconds();
        memcpy(b.tmp, b.g, n * sizeof(float));
        tg[r] = zt_now_seconds() - t0;
    }
    printf("\nn = %zu floats: memcpy %.2f GB/s (read + write)\n", n,
           8.0 * (double)n / median(tg, reps) / 1e9);
    printf("%-32s %5s %10s %10s %7s %10s\n", "op", "B/el", "generic", fast ? "dispatch" : "-",
           "ratio", "ms (disp)");
    double ms_old = 0, ms_new = 0;
    for (size_t k = 0; k < N_OPS; k++) {
        for (int r = 0; r < reps; r++) {
            double t0 = zt_now_seconds();
            OPS[k].run(gen, &b);
            tg[r] = zt_now_seconds() - t0;
            t0 = zt_now_seconds();
            OPS[k].run(fast ? fast : gen, &b);
            tf[r] = zt_now_seconds() - t0;
        }
        const double mg = median(tg, reps), mf = median(tf, reps), bytes = OPS[k].bytes * (double)n;
        printf("%-32s %5.0f %10.2f %10.2f %6.2fx %10.1f\n", OPS[k].name, OPS[k].bytes,
               bytes / mg / 1e9, bytes / mf / 1e9, mg / mf, mf * 1e3);
        if (OPS[k].run == adamw_bf16_unfused)
            ms_old = mg * 1e3;
        if (OPS[k].run == adamw_bf16_fused)
            ms_new = mf * 1e3;
    }
    printf(
        "bf16 update, old (generic, unfused) %.1f ms -> new (dispatched, fused) %.1f ms: %.2fx\n",
        ms_old, ms_new, ms_old / ms_new);
    free(tg), free(tf);
    free(b.p), free(b.m), free(b.v), free(b.g), free(b.tmp), free(b.g16), free(b.w16);
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    char why[128] = "";
    const struct ops_backend *gen = ops_cpu_backend_isa(OPS_CPU_GENERIC, NULL, 0);
    const struct ops_backend *fast = ops_cpu_backend();
    if (reps < 1)
        reps = 1;
    if (!ops_cpu_backend_isa(OPS_CPU_AVX2, why, sizeof why))
        printf("avx2: %s; dispatch is the generic set\n", why);
    printf("engine ops, one thread: generic vs dispatched (%s), median of %d\n",
           fast == gen ? "generic" : "avx2", reps);
    if (argc > 2)
        for (int a = 2; a < argc; a++)
            bench_size((size_t)strtoull(argv[a], NULL, 10), reps, gen, fast);
    else {
        bench_size(42500000, reps, gen, fast);
        bench_size(85000000, reps, gen, fast);
    }
    return 0;
}
