/* scripts/bench/attention_unfused.c — the attention kernel before it was
 * fused (worker/cpu/attention.c up to the commit that replaced it), kept
 * here only so that scripts/bench/attention.sh can time the two side by
 * side in one process. Not part of any library: the attention_bench driver
 * alone links it. It keeps the softmax probabilities att[B,NH,T,T] for the
 * backward and needs B*NH*T*T floats of scratch there.
 *
 * Its design, as it was: per (batch, query head) three small matrix
 * products on strided views of qkv and a row softmax in between, in row
 * blocks of QBLOCK = 32 whose products stop at the block's key prefix (the
 * causal triangle); att is written whole (zeros above the diagonal) and
 * reread by the backward.
 */
#include "worker/cpu/ops_cpu_impl.h"

#include "common/status.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

enum { QBLOCK = 32 };

/* Rows are short (n <= T, a few hundred) and 16 lanes wide under AVX-512,
 * so per-row overheads matter. The loops run over whole chunks of PAD
 * entries, up to n rounded up to PAD but not past the row's end, with the
 * padding lanes masked off; the running max and sum are PAD-wide arrays the
 * compiler keeps in vector registers. This beats `omp simd reduction`
 * (whose per-lane arrays GCC initialises and folds one element at a time)
 * by 20% on T = 128 and leaves at most a T % PAD tail to scalar code. */
enum { PAD = 16 };

/* n rounded up to a whole chunk, capped at limit. */
static int padded_end(int n, int limit)
{
    int p = (n + PAD - 1) / PAD * PAD;
    return p < limit ? p : limit;
}

/* Softmax of row r over its first n entries (n >= 1); zeros r[n..T).
 * Entries past n may hold anything, NaN included: they are masked, never
 * mixed in. */
CPU_KERNEL static void softmax_causal_row(float *r, int n, int T)
{
    int np = padded_end(n, T);
    int nv = np / PAD * PAD; /* entries in whole chunks */
    float mx[PAD], sum[PAD];
    for (int l = 0; l < PAD; l++) {
        mx[l] = -INFINITY;
        sum[l] = 0.0f;
    }
    for (int j0 = 0; j0 < nv; j0 += PAD) {
#pragma omp simd
        for (int l = 0; l < PAD; l++) {
            float x = r[j0 + l], v = j0 + l < n ? x : -INFINITY;
            mx[l] = v > mx[l] ? v : mx[l];
        }
    }
    float m = -INFINITY, s = 0.0f;
    for (int l = 0; l < PAD; l++)
        m = mx[l] > m ? mx[l] : m;
    for (int j = nv; j < n; j++)
        m = r[j] > m ? r[j] : m;
    for (int j0 = 0; j0 < nv; j0 += PAD) {
#pragma omp simd
        for (int l = 0; l < PAD; l++) {
            /* A bitwise mask, not `j < n ? e : 0`, keeps the loop
             * vectorisable (see cpu_expf). */
            union cpu_fbits e = {.f = cpu_expf(r[j0 + l] - m)};
            e.i &= -(int32_t)(j0 + l < n);
            r[j0 + l] = e.f;
            sum[l] += e.f;
        }
    }
    for (int j = nv; j < np; j++) {
        r[j] = j < n ? cpu_expf(r[j] - m) : 0.0f;
        s += r[j];
    }
    for (int l = 0; l < PAD; l++)
        s += sum[l];
    float inv = 1.0f / s;
#pragma omp simd
    for (int j = 0; j < np; j++)
        r[j] *= inv;
    memset(r + np, 0, (size_t)(T - np) * sizeof(float));
}

/* Softmax backward of row i of a block ending at i1, in place in d:
 * d[j] becomes att[j] (d[j] - sum_k att[k] d[k]) for j <= i and 0 for
 * i < j < i1, so that the block's products may run over keys [0, i1).
 * Past the diagonal att is 0 and d is finite (sgemm output), so the padded
 * loops produce exact zeros there. */
CPU_KERNEL static void softmax_backward_row(float *d, const float *att, int i, int i1)
{
    int np = padded_end(i + 1, i1);
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int j = 0; j < np; j++)
        dot += att[j] * d[j];
#pragma omp simd
    for (int j = 0; j < np; j++)
        d[j] = att[j] * (d[j] - dot);
    memset(d + np, 0, (size_t)(i1 - np) * sizeof(float));
}

/* An OpenMP parallel region costs about 0.4 us even with one thread, and
 * attention would open one per block per head, hundreds per call (6% of
 * the forward at T = 128): with one thread the row loops run inline. */
static void softmax_rows(float *a, int i0, int i1, int T, int threads)
{
    if (threads == 1) {
        for (int i = i0; i < i1; i++)
            softmax_causal_row(a + (size_t)i * T, i + 1, T);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int i = i0; i < i1; i++)
        softmax_causal_row(a + (size_t)i * T, i + 1, T);
}

static void softmax_backward_rows(float *datt, const float *a, int i0, int i1, int T, int threads)
{
    if (threads == 1) {
        for (int i = i0; i < i1; i++)
            softmax_backward_row(datt + (size_t)i * T, a + (size_t)i * T, i, i1);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int i = i0; i < i1; i++)
        softmax_backward_row(datt + (size_t)i * T, a + (size_t)i * T, i, i1);
}

/* Where one (b, h) finds its operands: q, k, v (and dq, dk, dv) are rows
 * ld floats apart, out and dout rows ldo = NH*hs floats apart. */
struct head_view {
    int T, NH, NKV, hs, ld, ldo, threads;
};

/* The first columns of query head h and of the key and value head it reads,
 * within a row of qkv (q also within a row of out). */
struct head_cols {
    size_t q, k, v;
};

static struct head_cols head_cols_of(const struct head_view *w, int h)
{
    int kv = h / (w->NH / w->NKV);
    return (struct head_cols){.q = (size_t)h * w->hs,
                              .k = (size_t)(w->NH + kv) * w->hs,
                              .v = (size_t)(w->NH + w->NKV + kv) * w->hs};
}

static void forward_head(float *o, float *a, const float *q, const float *k, const float *v,
                         const struct head_view *w)
{
    const int T = w->T, hs = w->hs, ld = w->ld, ldo = w->ldo;
    const float scale = 1.0f / sqrtf((float)hs);
    for (int i0 = 0; i0 < T; i0 += QBLOCK) {
        int i1 = i0 + QBLOCK < T ? i0 + QBLOCK : T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, i1, hs, scale,
                    q + (size_t)i0 * ld, ld, k, ld, 0.0f, a + (size_t)i0 * T, T);
        softmax_rows(a, i0, i1, T, w->threads);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, hs, i1, 1.0f,
                    a + (size_t)i0 * T, T, v, ld, 0.0f, o + (size_t)i0 * ldo, ldo);
    }
}

/* The strides of one call; a head count that does not divide fails. */
static struct head_view view_of(int T, int NH, int NKV, int hs)
{
    ZT_ASSERT(NH > 0 && NKV > 0 && NH % NKV == 0 && hs > 0);
    return (struct head_view){.T = T,
                              .NH = NH,
                              .NKV = NKV,
                              .hs = hs,
                              .ld = (NH + 2 * NKV) * hs,
                              .ldo = NH * hs,
                              .threads = omp_get_max_threads()};
}

/* Whether the heads go to OpenMP's threads (see the top of the file):
 * several threads, and an OpenBLAS that then runs each sgemm inline. */
static int heads_in_parallel(const struct head_view *w)
{
    return w->threads > 1 && openblas_get_parallel() == 2; /* 2: the OpenMP build */
}

/* Pair p = b NH + h of the forward. */
static void forward_pair(float *out, float *att, const float *qkv, int p, const struct head_view *w)
{
    const int b = p / w->NH, h = p % w->NH, T = w->T;
    const float *rows = qkv + (size_t)b * T * w->ld;
    struct head_cols c = head_cols_of(w, h);
    forward_head(out + (size_t)b * T * w->ldo + c.q, att + (size_t)p * T * T, rows + c.q,
                 rows + c.k, rows + c.v, w);
}

zt_status unfused_attention_forward(const struct ops_backend *self, float *out, float *att,
                                    const float *qkv, int B, int T, int NH, int NKV, int hs)
{
    (void)self;
    const struct head_view w = view_of(T, NH, NKV, hs);
    if (!heads_in_parallel(&w)) {
        for (int p = 0; p < B * NH; p++)
            forward_pair(out, att, qkv, p, &w);
        return ZT_OK;
    }
    struct head_view one = w;
    one.threads = 1; /* softmax rows inline: this thread owns the pair */
#pragma omp parallel for schedule(static)
    for (int p = 0; p < B * NH; p++)
        forward_pair(out, att, qkv, p, &one);
    return ZT_OK;
}

/* One (b, h): dq/dk/dv and q/k/v point at the head's columns of dqkv and
 * qkv, dout at its columns of dout; datt is T*T scratch. */
static void backward_head(float *dq, float *dk, float *dv, float *datt, const float *dout,
                          const float *q, const float *k, const float *v, const float *a,
                          const struct head_view *w)
{
    const int T = w->T, hs = w->hs, ld = w->ld, ldo = w->ldo;
    const float scale = 1.0f / sqrtf((float)hs);
    for (int i0 = 0; i0 < T; i0 += QBLOCK) {
        int i1 = i0 + QBLOCK < T ? i0 + QBLOCK : T, bs = i1 - i0;
        const float *ab = a + (size_t)i0 * T, *dob = dout + (size_t)i0 * ldo;
        float *db = datt + (size_t)i0 * T;
        /* datt = dout V^T and dV += att^T dout, over the block's key prefix. */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bs, i1, hs, 1.0f, dob, ldo, v, ld,
                    0.0f, db, T);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, hs, bs, 1.0f, ab, T, dob, ldo,
                    1.0f, dv, ld);
        softmax_backward_rows(datt, a, i0, i1, T, w->threads);
        /* preatt = scale Q K^T: dQ += scale dpre K, dK += scale dpre^T Q. */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bs, hs, i1, scale, db, T, k, ld,
                    1.0f, dq + (size_t)i0 * ld, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, hs, bs, scale, db, T,
                    q + (size_t)i0 * ld, ld, 1.0f, dk, ld);
    }
}

/* Group p = b NKV + kv of the backward: its g query heads in turn, on the
 * T*T slice `datt` of scratch. */
static void backward_group(float *dqkv, float *datt, const float *dout, const float *qkv,
                           const float *att, int p, const struct head_view *w)
{
    const int g = w->NH / w->NKV, b = p / w->NKV, kv = p % w->NKV, T = w->T;
    const float *rows = qkv + (size_t)b * T * w->ld;
    float *drows = dqkv + (size_t)b * T * w->ld;
    for (int h = kv * g; h < (kv + 1) * g; h++) {
        struct head_cols c = head_cols_of(w, h);
        backward_head(drows + c.q, drows + c.k, drows + c.v, datt,
                      dout + (size_t)b * T * w->ldo + c.q, rows + c.q, rows + c.k, rows + c.v,
                      att + ((size_t)b * w->NH + h) * T * T, w);
    }
}

zt_status unfused_attention_backward(const struct ops_backend *self, float *dqkv, float *scratch,
                                     const float *dout, const float *qkv, const float *att, int B,
                                     int T, int NH, int NKV, int hs)
{
    (void)self;
    const struct head_view w = view_of(T, NH, NKV, hs);
    /* In turn, one T*T slice of scratch serves every head and stays in
     * cache; in parallel each group takes its own (scratch holds B NH of
     * them, and there are B NKV <= B NH groups). */
    if (!heads_in_parallel(&w)) {
        for (int p = 0; p < B * NKV; p++)
            backward_group(dqkv, scratch, dout, qkv, att, p, &w);
        return ZT_OK;
    }
    struct head_view one = w;
    one.threads = 1;
#pragma omp parallel for schedule(static)
    for (int p = 0; p < B * NKV; p++)
        backward_group(dqkv, scratch + (size_t)p * T * T, dout, qkv, att, p, &one);
    return ZT_OK;
}
