/* scripts/bench/gemm.c — GFLOP/s of each CPU GEMM path at GPT-2's and
 * small.yaml's linear-layer shapes on one thread: OpenBLAS (with whatever
 * kernel its own CPU detection, or OPENBLAS_CORETYPE, gives), oneDNN fp32
 * and oneDNN bf16 (bf16 operands, fp32 accumulation and output), all
 * through worker/cpu/gemm.h as the ops call it; Llama-2-7B's widths and
 * LoRA's thin products (r 16) beside them. For each shape the three
 * products of a linear layer (forward, dinp, dweight) are timed, the paths
 * in turn within each repetition so that drift hits them alike; medians.
 * usage: gemm_bench [REPS]   (default 7) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#include "common/half.h"
#include "worker/cpu/gemm.h"

struct shape {
    const char *what;
    int rows, C, OC;
};

static const struct shape SHAPES[] = {
    {"gpt2 qkv", 512, 768, 2304},      {"gpt2 proj", 512, 768, 768},
    {"gpt2 fc", 512, 768, 3072},       {"gpt2 fcproj", 512, 3072, 768},
    {"gpt2 head", 512, 768, 50257},    {"gpt2 qkv T1024", 2048, 768, 2304},
    {"small qkv", 1024, 256, 768},     {"small fc", 1024, 256, 1024},
    {"small fcproj", 1024, 1024, 256}, {"llama7b q", 512, 4096, 4096},
    {"llama7b up", 512, 4096, 11008},  {"llama7b down", 512, 11008, 4096},
    {"lora A r16", 512, 4096, 16},     {"lora B r16", 512, 16, 4096},
};
#define N_SHAPES (sizeof SHAPES / sizeof SHAPES[0])

enum { PATHS = 3, PRODUCTS = 3 };
static const char *const PATH_NAMES[PATHS] = {"openblas", "onednn fp32", "onednn bf16"};
static const char *const PRODUCT_NAMES[PRODUCTS] = {"fwd", "dinp", "dweight"};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The three products of one linear layer, with operands of `t`. */
static void products(const struct shape *s, enum zt_dtype t, const void *inp, const void *w,
                     const void *dout, float *out, float *dinp, float *dw,
                     struct cpu_gemm_call p[PRODUCTS])
{
    const int N = s->rows, C = s->C, OC = s->OC;
    p[0] = (struct cpu_gemm_call){.trans_b = 1,
                                  .M = N,
                                  .N = OC,
                                  .K = C,
                                  .alpha = 1.0f,
                                  .ab_type = t,
                                  .A = inp,
                                  .lda = C,
                                  .B = w,
                                  .ldb = C,
                                  .C = out,
                                  .ldc = OC};
    p[1] = (struct cpu_gemm_call){.M = N,
                                  .N = C,
                                  .K = OC,
                                  .alpha = 1.0f,
                                  .accumulate = 1,
                                  .ab_type = t,
                                  .A = dout,
                                  .lda = OC,
                                  .B = w,
                                  .ldb = C,
                                  .C = dinp,
                                  .ldc = C};
    p[2] = (struct cpu_gemm_call){.trans_a = 1,
                                  .M = OC,
                                  .N = C,
                                  .K = N,
                                  .alpha = 1.0f,
                                  .accumulate = 1,
                                  .ab_type = t,
                                  .A = dout,
                                  .lda = OC,
                                  .B = inp,
                                  .ldb = C,
                                  .C = dw,
                                  .ldc = C};
}

static void *filled(size_t n, enum zt_dtype t, unsigned seed)
{
    srand(seed);
    if (t == ZT_BF16) {
        uint16_t *h = malloc(n * sizeof *h);
        for (size_t i = 0; i < n; i++)
            h[i] = zt_f32_to_bf16((float)rand() / (float)RAND_MAX - 0.5f);
        return h;
    }
    float *f = malloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    return f;
}

/* g[p] NULL: path p does not run on this CPU (bf16 without a kernel). */
static void bench_shape(const struct shape *s, struct cpu_gemm *g[PATHS], int reps)
{
    const size_t N = (size_t)s->rows, C = (size_t)s->C, OC = (size_t)s->OC;
    void *in[2], *w[2], *d[2];
    for (int t = 0; t < 2; t++) {
        const enum zt_dtype dt = t ? ZT_BF16 : ZT_F32;
        in[t] = filled(N * C, dt, 1), w[t] = filled(OC * C, dt, 2), d[t] = filled(N * OC, dt, 3);
    }
    float *out = calloc(N * OC, sizeof(float)), *dinp = calloc(N * C, sizeof(float)),
          *dw = calloc(OC * C, sizeof(float));
    double *ms = calloc((size_t)PATHS * PRODUCTS * (size_t)reps, sizeof(double));
    for (int r = -1; r < reps; r++) /* r = -1: warm-up, builds the kernels */
        for (int p = 0; p < PATHS; p++) {
            if (!g[p])
                continue;
            const int t = p == 2;
            struct cpu_gemm_call call[PRODUCTS];
            products(s, t ? ZT_BF16 : ZT_F32, in[t], w[t], d[t], out, dinp, dw, call);
            for (int k = 0; k < PRODUCTS; k++) {
                const double t0 = now();
                if (cpu_gemm_run(g[p], &call[k]) != ZT_OK) {
                    fprintf(stderr, "gemm_bench: %s\n", zt_error_message());
                    exit(1);
                }
                if (r >= 0)
                    ms[((size_t)p * PRODUCTS + k) * reps + r] = now() - t0;
            }
        }
    const double flop = 2.0 * (double)N * (double)C * (double)OC;
    printf("%-15s %5d %5d %6d", s->what, s->rows, s->C, s->OC);
    for (int k = 0; k < PRODUCTS; k++)
        for (int p = 0; p < PATHS; p++) {
            double *v = ms + ((size_t)p * PRODUCTS + k) * reps;
            qsort(v, (size_t)reps, sizeof *v, cmp);
            if (g[p])
                printf(" %8.1f", flop / v[reps / 2] / 1e9);
            else
                printf(" %8s", "n/a");
        }
    printf("\n");
    fflush(stdout);
    for (int t = 0; t < 2; t++)
        free(in[t]), free(w[t]), free(d[t]);
    free(out), free(dinp), free(dw), free(ms);
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 7;
    if (reps < 1) {
        fprintf(stderr, "usage: gemm_bench [REPS]\n");
        return 2;
    }
    omp_set_num_threads(1);
    struct cpu_gemm *g[PATHS];
    const enum cpu_gemm_lib libs[PATHS] = {CPU_GEMM_OPENBLAS, CPU_GEMM_ONEDNN, CPU_GEMM_ONEDNN};
    char kernel[PATHS][160];
    for (int p = 0; p < PATHS; p++) {
        if (cpu_gemm_create(libs[p], &g[p]) != ZT_OK) {
            fprintf(stderr, "gemm_bench: %s\n", zt_error_message());
            return 1;
        }
        const zt_status st =
            cpu_gemm_describe(g[p], p == 2 ? ZT_BF16 : ZT_F32, kernel[p], sizeof kernel[p]);
        if (st == ZT_ERR_UNSUPPORTED) { /* no bf16 kernel on this CPU: the column says n/a */
            snprintf(kernel[p], sizeof kernel[p], "none: %s", zt_error_message());
            cpu_gemm_destroy(g[p]);
            g[p] = NULL;
        } else if (st != ZT_OK) {
            fprintf(stderr, "gemm_bench: %s\n", zt_error_message());
            return 1;
        }
        printf("# %-12s %s\n", PATH_NAMES[p], kernel[p]);
    }
    printf("# GFLOP/s, one thread, median of %d; a linear layer's three products\n", reps);
    printf("%-15s %5s %5s %6s", "shape", "rows", "C", "OC");
    for (int k = 0; k < PRODUCTS; k++)
        printf(" %8.8s %8.8s %8.8s", PRODUCT_NAMES[k], "", "");
    printf("\n%-34s", "");
    for (int k = 0; k < PRODUCTS; k++)
        printf(" %8s %8s %8s", "blas", "dnn32", "dnn16");
    printf("\n");
    for (size_t i = 0; i < N_SHAPES; i++)
        bench_shape(&SHAPES[i], g, reps);
    for (int p = 0; p < PATHS; p++)
        cpu_gemm_destroy(g[p]);
    return 0;
}
