/* scripts/bench/sgemm_peak.c — the machine's cblas_sgemm GFLOP/s on one
 * rank: the ceiling the model's achieved GFLOP/s is compared with.
 * usage: sgemm_peak [M N K] [threads]   (default 1024 1024 1024, 1 thread) */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/clock.h"

void openblas_set_num_threads(int);

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int M = argc > 3 ? atoi(argv[1]) : 1024, N = argc > 3 ? atoi(argv[2]) : 1024,
        K = argc > 3 ? atoi(argv[3]) : 1024, threads = argc > 4 ? atoi(argv[4]) : 1;
    openblas_set_num_threads(threads);
    float *a = malloc(sizeof(float) * (size_t)M * K), *b = malloc(sizeof(float) * (size_t)K * N),
          *c = malloc(sizeof(float) * (size_t)M * N);
    if (!a || !b || !c)
        return 1;
    for (size_t i = 0; i < (size_t)M * K; i++)
        a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)K * N; i++)
        b[i] = (float)(i % 5) * 0.1f;
    enum { REPS = 9 };
    double t[REPS];
    for (int r = 0; r < REPS + 1; r++) {
        double t0 = zt_now_seconds();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
        if (r > 0) /* the first call warms caches and thread pools */
            t[r - 1] = zt_now_seconds() - t0;
    }
    qsort(t, REPS, sizeof t[0], cmp_double);
    printf("sgemm %dx%dx%d threads %d: %.2f GFLOP/s (median of %d)\n", M, N, K, threads,
           2.0 * M * N * K / t[REPS / 2] / 1e9, REPS);
    free(a);
    free(b);
    free(c);
    return 0;
}
