/* scripts/bench/attention_bench.c — the fused attention of worker/cpu/
 * attention.c against the unfused kernel it replaced
 * (scripts/bench/attention_unfused.c), forward and backward, on one
 * thread, at GPT-2 124M's shapes (B = 2, NH = 12, hs = 64) for each T given.
 *
 * usage: attention_bench [reps [T...]]   (default 7 reps, T = 256 1024)
 *
 * Each repetition runs the unfused forward and backward, then the fused
 * ones, back to back in one process, so both see the same machine; the
 * table has the medians. The first repetition is a warm-up, not counted.
 * The fused kernel's bf16 form (worker/cpu/attention16.c: bf16 products
 * where the CPU has a kernel for them) runs third, through an opened op
 * table so that its GEMM primitives are built once. The last columns are
 * the bytes each keeps for the backward beyond out (att against lse) and
 * its backward's scratch, and the largest difference between the two fp32
 * kernels' outputs and gradients (relative to the largest magnitude), a
 * check that they compute the same thing.
 */
#include "common/clock.h"
#include "common/half.h"
#include "common/rng.h"
#include "worker/ops.h"

/* after worker/ops.h: cblas.h may bring complex.h's macro I */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* scripts/bench/attention_unfused.c */
zt_status unfused_attention_forward(const struct ops_backend *self, float *out, float *att,
                                    const float *qkv, int B, int T, int NH, int NKV, int hs);
zt_status unfused_attention_backward(const struct ops_backend *self, float *dqkv, float *scratch,
                                     const float *dout, const float *qkv, const float *att, int B,
                                     int T, int NH, int NKV, int hs);

enum { B = 2, NH = 12, HS = 64, MAX_REPS = 101 };

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static float *alloc_floats(size_t n)
{
    float *p = calloc(n, sizeof *p);
    if (!p) {
        fprintf(stderr, "attention_bench: out of memory (%zu floats)\n", n);
        exit(1);
    }
    return p;
}

static void fill(float *x, size_t n, uint64_t key, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(2.0 * rng_uniform(key, i) - 1.0) * scale;
}

/* max |a - b| / max |b|. */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0.0 ? d / m : d;
}

static uint16_t *to_bf16(const float *x, size_t n)
{
    uint16_t *h = calloc(n, sizeof *h);
    if (!h) {
        fprintf(stderr, "attention_bench: out of memory (%zu bf16)\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        h[i] = zt_f32_to_bf16(x[i]);
    return h;
}

static void run(const struct ops_backend *ops16, int T, int reps)
{
    const struct ops_backend *ops = ops_cpu_backend();
    const size_t nq = (size_t)B * T * 3 * NH * HS, no = (size_t)B * T * NH * HS;
    const size_t na = (size_t)B * NH * T * T, nl = (size_t)B * NH * T;
    float *qkv = alloc_floats(nq), *dout = alloc_floats(no);
    float *out_u = alloc_floats(no), *att = alloc_floats(na), *scratch = alloc_floats(na);
    float *dqkv_u = alloc_floats(nq), *out_f = alloc_floats(no), *lse = alloc_floats(nl);
    float *dqkv_f = alloc_floats(nq);
    fill(qkv, nq, 1, 1.0f);
    fill(dout, no, 2, 1.0f);
    uint16_t *qkv_h = to_bf16(qkv, nq), *dout_h = to_bf16(dout, no), *out_h = to_bf16(out_f, no);
    uint16_t *dqkv_h = to_bf16(dqkv_f, nq);
    double t[6][MAX_REPS];
    for (int r = 0; r <= reps; r++) {
        double t0 = zt_now_seconds();
        unfused_attention_forward(ops, out_u, att, qkv, B, T, NH, NH, HS);
        double t1 = zt_now_seconds();
        memset(dqkv_u, 0, nq * sizeof(float));
        double t2 = zt_now_seconds();
        unfused_attention_backward(ops, dqkv_u, scratch, dout, qkv, att, B, T, NH, NH, HS);
        double t3 = zt_now_seconds();
        ops->attention_forward(ops, ZT_F32, out_f, lse, qkv, B, T, NH, NH, HS);
        double t4 = zt_now_seconds();
        memset(dqkv_f, 0, nq * sizeof(float));
        double t5 = zt_now_seconds();
        ops->attention_backward(ops, ZT_F32, dqkv_f, dout, qkv, out_f, lse, B, T, NH, NH, HS);
        double t6 = zt_now_seconds();
        ops16->attention_forward(ops16, ZT_BF16, out_h, lse, qkv_h, B, T, NH, NH, HS);
        double t7 = zt_now_seconds();
        memset(dqkv_h, 0, nq * sizeof(uint16_t));
        double t8 = zt_now_seconds();
        ops16->attention_backward(ops16, ZT_BF16, dqkv_h, dout_h, qkv_h, out_h, lse, B, T, NH, NH,
                                  HS);
        double t9 = zt_now_seconds();
        if (r > 0) {
            t[0][r - 1] = t1 - t0;
            t[1][r - 1] = t3 - t2;
            t[2][r - 1] = t4 - t3;
            t[3][r - 1] = t6 - t5;
            t[4][r - 1] = t7 - t6;
            t[5][r - 1] = t9 - t8;
        }
    }
    double m[6];
    for (int k = 0; k < 6; k++)
        m[k] = 1e3 * median(t[k], reps);
    const double diff = fmax(rel_diff(out_f, out_u, no), rel_diff(dqkv_f, dqkv_u, nq));
    printf("| %5d | %10.2f | %12.2f | %6.2fx | %10.2f | %12.2f | %6.2fx | %11.2f | %11.2f | %19.1f "
           "| %13.3f | %12.1e |\n",
           T, m[0], m[2], m[0] / m[2], m[1], m[3], m[1] / m[3], m[4], m[5],
           (double)na * 4 / 1048576.0 * 2, (double)nl * 4 / 1048576.0, diff);
    free(qkv);
    free(dout);
    free(out_u);
    free(att);
    free(scratch);
    free(dqkv_u);
    free(out_f);
    free(lse);
    free(dqkv_f);
    free(qkv_h);
    free(dout_h);
    free(out_h);
    free(dqkv_h);
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    if (reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "usage: attention_bench [reps (1..%d) [T...]]\n", MAX_REPS);
        return 2;
    }
    ops_cpu_set_threads(1);
    printf("attention, one thread, B=%d NH=%d hs=%d (GPT-2 124M), medians of %d runs; "
           "OpenBLAS %s\n",
           B, NH, HS, reps, openblas_get_corename());
    const struct ops_backend *ops16;
    if (ops_cpu_open(&ops16) != ZT_OK) {
        fprintf(stderr, "attention_bench: %s\n", zt_error_message());
        return 1;
    }
    printf("| T     | fwd old ms | fwd fused ms | speedup | bwd old ms | bwd fused ms | speedup "
           "| fwd bf16 ms | bwd bf16 ms | old att+scratch MiB | fused lse MiB | max rel diff |\n");
    printf("|-------|------------|--------------|---------|------------|--------------|---------"
           "|-------------|-------------|---------------------|---------------|--------------|\n");
    if (argc > 2)
        for (int i = 2; i < argc; i++)
            run(ops16, atoi(argv[i]), reps);
    else {
        run(ops16, 256, reps);
        run(ops16, 1024, reps);
    }
    ops_cpu_close(ops16);
    return 0;
}
