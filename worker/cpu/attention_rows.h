/* worker/cpu/attention_rows.h — for worker/cpu/attention*.c only: the
 * tiling, the strides of a call and the row kernels that the fp32 form
 * (attention.c, cblas products) and the 16-bit form (attention16.c,
 * oneDNN products on 16-bit operands) share, defined in attention_rows.c.
 * The algorithm is described at the top of attention.c.
 */
#ifndef ZT_WORKER_CPU_ATTENTION_ROWS_H
#define ZT_WORKER_CPU_ATTENTION_ROWS_H

#include <stddef.h>

#include "common/dtype.h"
#include "common/status.h"

/* Query rows and key columns per tile (see attention.c for the choice).
 * KTILE is a multiple of 16 (the row loops' vector width) and of QTILE. */
enum { QTILE = 64, KTILE = 256 };

/* Where one (b, h) finds its operands: q and dq rows are ld elements
 * apart, k, v, dk and dv rows ldk, out and dout rows ldo = NH*hs. A call
 * runs T query rows against Tk key rows; query row i sees keys j <= i +
 * vis (0: the causal diagonal; Tk or more: every key). resume (forward
 * only): out and lse already hold a normalised result over other keys,
 * which the tiles merge with rather than overwrite (ring attention's
 * blocks, attention_ring.c). */
struct head_view {
    int T, NH, NKV, hs, ld, ldo, threads;
    int Tk, ldk, vis, resume;
    float scale;
};

/* The strides of one self-attention call (Tk = T, ldk = ld, causal, no
 * resume); a head count that does not divide fails. */
struct head_view attn_view_of(int T, int NH, int NKV, int hs);

/* The first columns of query head h and of the key and value head it
 * reads, within a row of qkv (q also within a row of out). */
struct head_cols {
    size_t q, k, v;
};

struct head_cols attn_head_cols(const struct head_view *w, int h);

/* The end of query tile i0 (exclusive) and of key tile j0 within it. */
static inline int attn_tile_end(int i0, int step, int limit)
{
    return i0 + step < limit ? i0 + step : limit;
}

/* The lanes the row loops run over for a tile of bk keys: bk rounded up
 * to whole vectors of 16 (within KTILE), the padding lanes masked. */
static inline int attn_lanes(int bk)
{
    return (bk + 15) / 16 * 16;
}

/* Valid keys of row i (absolute) in the key tile [j0, j1): min(i + 1, j1)
 * - j0, <= 0 when the row ends before the tile. */
static inline int attn_keys_in_tile(int i, int j0, int j1)
{
    int e = i + 1 < j1 ? i + 1 : j1;
    return e - j0;
}

/* ---- row kernels: one row of a tile, w lanes, the first n valid ---- */

/* The online softmax step of one row of S (n >= 1 valid entries; the rest
 * finite): with the row's running max *m and sum *l, s becomes
 * e^(s - m_new) (0 past n), *l = *l e^(m - m_new) + the row's sum, *m =
 * m_new; returns e^(m - m_new), the factor the row's accumulator takes.
 * first: no previous tile (returns 0). */
float attn_online_softmax_row(float *s, int n, int w, float *m, float *l, int first);

/* The probabilities of one row recomputed from its log-sum-exp:
 * s = e^(s - lse) for the first n entries, 0 past them (n may be <= 0). */
void attn_probs_row(float *s, int n, int w, float lse);

/* The softmax backward of one row: dp = p (dp - d); zero where p is. */
void attn_dscores_row(float *dp, const float *p, int w, float d);

/* x[0..n) *= a. */
void attn_scale_row(float *x, int n, float a);

/* sum_c a[c] b[c], c < n, in float (CPU_ROW_SUM's order). */
float attn_dot_row(const float *a, const float *b, int n);

/* ---- the fp32 tile kernels (attention.c), which ring attention reuses ---- */

/* Query tile [i0, i0 + QTILE) of one head: o and lse point at the head's
 * row 0 (o's rows ldo apart, lse's contiguous), q, k, v at its columns of
 * row 0 of their tensors. */
void attn_forward_tile(float *o, float *lse, const float *q, const float *k, const float *v, int i0,
                       const struct head_view *w);

/* The operands of one query head in the backward, each at the head's
 * columns of row 0 of its tensor. */
struct head_grads {
    float *dq, *dk, *dv;
    const float *q, *k, *v, *o, *dout, *lse;
};

/* Query tile [i0, i0 + QTILE) of one head: dq += its rows, dk and dv +=
 * the rows of the key tiles it sees. */
void attn_backward_tile(const struct head_grads *g, int i0, const struct head_view *w);

/* Whether a call's work items go to OpenMP's threads (attention.c). */
int attn_items_in_parallel(const struct head_view *w);

/* The 16-bit forms (attention16.c): t is ZT_BF16 or ZT_F16; the products
 * run on the 16-bit operands in place with fp32 results, through the
 * per-thread GEMM states of `self` (ops_cpu_impl.h). */
struct ops_backend;
zt_status attn16_forward(const struct ops_backend *self, enum zt_dtype t, void *out, float *lse,
                         const void *qkv, int B, const struct head_view *w);
zt_status attn16_backward(const struct ops_backend *self, enum zt_dtype t, void *dqkv,
                          const void *dout, const void *qkv, const void *out, const float *lse,
                          int B, const struct head_view *w);

#endif
