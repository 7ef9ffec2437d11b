/* worker/cpu/attention.c — causal multi-head self-attention.
 *
 * Per (batch, head) the work is three small matrix products on strided views
 * of qkv (q, k and v of head h start at columns h*hs, C + h*hs, 2C + h*hs of
 * rows 3C floats apart, so sgemm reads them in place with lda = 3C) and a
 * row softmax in between.
 *
 * Causality: row i only sees keys 0..i, so half of Q K^T and of att V is
 * wasted on the masked triangle. The rows are cut into blocks of QBLOCK; the
 * block of rows [i0, i1) needs only key columns [0, i1), which is what its
 * sgemm computes. With T = 256 and four blocks this does 5/8 of the full
 * products' work; smaller blocks save more flops but lose more to sgemm's
 * per-call overhead and its efficiency on thin matrices. Everything a block
 * needs (its att rows, q rows, and the k/v prefix) is reused while hot in
 * cache, so each block runs its products and its softmax back to back.
 *
 * Entries of att above the diagonal are written as zero; the backward relies
 * on that when it multiplies by att^T over whole blocks.
 *
 * Threads: the sgemm calls run on OpenBLAS's threads and the softmax rows on
 * OpenMP's; (b, h) pairs stay sequential because calling the pthreads build
 * of OpenBLAS from several OpenMP threads at once oversubscribes the cores.
 */
#include "worker/cpu/ops_cpu_impl.h"

#include "common/status.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

enum { QBLOCK = 64 };

/* Softmax of row r over its first n entries (n >= 1); zeros r[n..T). */
static void softmax_causal_row(float *r, int n, int T)
{
    float m = r[0];
#pragma omp simd reduction(max : m)
    for (int j = 1; j < n; j++)
        m = r[j] > m ? r[j] : m;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < n; j++) {
        float e = cpu_expf(r[j] - m);
        r[j] = e;
        s += e;
    }
    float inv = 1.0f / s;
#pragma omp simd
    for (int j = 0; j < n; j++)
        r[j] *= inv;
    memset(r + n, 0, (size_t)(T - n) * sizeof(float));
}

/* att := softmax backward of rows [i0, i1) in place in d: d[i, j] becomes
 * att[i, j] (d[i, j] - sum_k att[i, k] d[i, k]) for j <= i and 0 for
 * i < j < i1, so that the block products below may run over [0, i1). */
static void softmax_backward_rows(float *d, const float *att, int i0, int i1, int T)
{
#pragma omp parallel for schedule(static)
    for (int i = i0; i < i1; i++) {
        float *dr = d + (size_t)i * T;
        const float *ar = att + (size_t)i * T;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int j = 0; j <= i; j++)
            dot += ar[j] * dr[j];
#pragma omp simd
        for (int j = 0; j <= i; j++)
            dr[j] = ar[j] * (dr[j] - dot);
        if (i1 - i > 1)
            memset(dr + i + 1, 0, (size_t)(i1 - i - 1) * sizeof(float));
    }
}

static void forward_head(float *o, float *a, const float *q, int T, int C, int hs)
{
    const float *k = q + C, *v = q + 2 * C;
    const int ld = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    for (int i0 = 0; i0 < T; i0 += QBLOCK) {
        int i1 = i0 + QBLOCK < T ? i0 + QBLOCK : T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, i1, hs, scale,
                    q + (size_t)i0 * ld, ld, k, ld, 0.0f, a + (size_t)i0 * T, T);
#pragma omp parallel for schedule(static)
        for (int i = i0; i < i1; i++)
            softmax_causal_row(a + (size_t)i * T, i + 1, T);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, hs, i1, 1.0f,
                    a + (size_t)i0 * T, T, v, ld, 0.0f, o + (size_t)i0 * C, C);
    }
}

void cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    ZT_ASSERT(NH > 0 && C % NH == 0);
    int hs = C / NH;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            forward_head(out + (size_t)b * T * C + (size_t)h * hs,
                         att + ((size_t)b * NH + h) * T * T,
                         qkv + (size_t)b * T * 3 * C + (size_t)h * hs, T, C, hs);
}

/* One (b, h): dq/dk/dv and q point at the head's columns of dqkv and qkv,
 * dout at its columns of dout; datt is T*T scratch. */
static void backward_head(float *dq, float *datt, const float *dout, const float *q, const float *a,
                          int T, int C, int hs)
{
    const float *k = q + C, *v = q + 2 * C;
    float *dk = dq + C, *dv = dq + 2 * C;
    const int ld = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    for (int i0 = 0; i0 < T; i0 += QBLOCK) {
        int i1 = i0 + QBLOCK < T ? i0 + QBLOCK : T, bs = i1 - i0;
        const float *ab = a + (size_t)i0 * T, *dob = dout + (size_t)i0 * C;
        float *db = datt + (size_t)i0 * T;
        /* datt = dout V^T and dV += att^T dout, over the block's key prefix. */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bs, i1, hs, 1.0f, dob, C, v, ld, 0.0f,
                    db, T);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, hs, bs, 1.0f, ab, T, dob, C, 1.0f,
                    dv, ld);
        softmax_backward_rows(datt, a, i0, i1, T);
        /* preatt = scale Q K^T: dQ += scale dpre K, dK += scale dpre^T Q. */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bs, hs, i1, scale, db, T, k, ld,
                    1.0f, dq + (size_t)i0 * ld, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, hs, bs, scale, db, T,
                    q + (size_t)i0 * ld, ld, 1.0f, dk, ld);
    }
}

void cpu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                            const float *att, int B, int T, int C, int NH)
{
    ZT_ASSERT(NH > 0 && C % NH == 0);
    int hs = C / NH;
    /* Heads run one after another, so one T*T slice of scratch serves all
     * and stays in cache. */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            backward_head(dqkv + (size_t)b * T * 3 * C + (size_t)h * hs, scratch,
                          dout + (size_t)b * T * C + (size_t)h * hs,
                          qkv + (size_t)b * T * 3 * C + (size_t)h * hs,
                          att + ((size_t)b * NH + h) * T * T, T, C, hs);
}
