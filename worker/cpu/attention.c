/* worker/cpu/attention.c — causal self-attention with grouped-query heads,
 * fused (FlashAttention's algorithm): no T x T matrix is ever stored.
 *
 * Why: keeping the softmax probabilities att[B,NH,T,T] for the backward made
 * activations grow with T^2 (configs/small.yaml: 9.9x from seq 1024 to 4096)
 * and the backward needed as much scratch again. Here the forward keeps only
 * the output and each row's log-sum-exp (lse[B,NH,T]); the backward
 * recomputes the probabilities tile by tile from q, k and lse. Memory is
 * linear in T; the price is one more Q K^T product in the backward.
 *
 * Layout: a row of qkv holds NH query heads, then NKV key heads, then NKV
 * value heads, ld = (NH + 2 NKV) hs floats; query head h reads key/value
 * head h / g (g = NH / NKV), whose k and v start at columns (NH + h/g) hs
 * and (NH + NKV + h/g) hs. Sharing is by index only: no copy of k and v is
 * made, forward or backward, and every product reads q, k, v, out, dout and
 * dqkv in place with their row strides.
 *
 * Forward, per (b, h) and query tile of QTILE rows: key tiles of KTILE
 * columns up to the diagonal (tiles above it are skipped), S = scale Q K^T,
 * then per row the online softmax: the running max m and sum l, the
 * accumulator (the head's rows of out itself) rescaled by e^(m_old - m_new)
 * before P V is added. At the end out /= l and lse = m + log l.
 *
 * Backward (FlashAttention-2): per query tile, D = rowsum(dO o O); per key
 * tile, P = e^(S - lse) (recomputed), dV += P^T dO, dP = dO V^T,
 * dS = P o (dP - D), dQ += scale dS K, dK += scale dS^T Q. Everything but
 * the two tiles S/P and dP (and D) goes straight into dqkv.
 *
 * Products (this file's fp32 form; the 16-bit forms, products on 16-bit
 * operands through oneDNN, are attention16.c): cblas_sgemm on tiles. Even
 * at 64 x 64 x 64 OpenBLAS runs at its large GEMM's rate here (90 GFLOP/s
 * on one core), which GCC's vectorised
 * loops do not approach; the row work (max, exp, sums, masks) is CPU_KERNEL
 * code over a tile row's keys rounded up to 16 lanes, the masked lanes
 * zeroed bitwise, so it vectorises (see cpu_expf).
 *
 * Cost: the forward does the unfused kernel's products and is as fast or
 * faster (its T x T writes are gone); the backward recomputes S = Q K^T, a
 * fifth product beside the unfused backward's four, and is slower by about
 * that much on one core (scripts/bench/attention.sh has the times).
 *
 * Workspace: the tiles live on the stack of the thread running them (the
 * forward one QTILE x KTILE tile, 64 KiB; the backward two, 128 KiB, and a
 * few rows), so neither direction needs scratch from the caller.
 *
 * Threads: tiles are too small to split, so the work items go to OpenMP's
 * threads, each calling a one-thread sgemm (the OpenMP build of OpenBLAS
 * runs inline inside a parallel region). The forward's items are the
 * (b, h, query tile) triples, independent of each other. In the backward
 * the g query heads of a group and all their query tiles add into the same
 * dk and dv, so a group (b, key/value head) is one item that runs its heads
 * and tiles in a fixed order: no race, no atomics, and the result does not
 * depend on the thread count. With one thread, or the pthreads build of
 * OpenBLAS (whose own threads would oversubscribe the cores), the items run
 * in turn.
 */
#include "worker/cpu/attention_rows.h"
#include "worker/cpu/ops_cpu_impl.h"

#include "common/status.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* The tile sizes (attention_rows.h). Wide key tiles make few, large
 * products (64 x 256 x hs, then 64 x hs x 256) and few rescalings of the
 * accumulator; at T <= 256 a query tile sees one key tile and the online
 * softmax is a plain one. On one core (scripts/bench/attention.sh, a
 * loaded machine, so rough) 64 x 256 was the best forward of 32..128 x
 * 64..256, and the backward differed by less than the noise between 128
 * and 256 columns. The diagonal costs nothing extra: a query tile's last
 * key tile ends at its last row. KTILE is a multiple of QTILE, so that a
 * key tile that starts before a query tile's end starts at or before its
 * first row. */

/* Whether the work items go to OpenMP's threads (see the top of the file):
 * several threads, and an OpenBLAS that then runs each sgemm inline. */
int attn_items_in_parallel(const struct head_view *w)
{
    return w->threads > 1 && openblas_get_parallel() == 2; /* 2: the OpenMP build */
}

/* ---- forward ------------------------------------------------------------ */

/* attn_forward_tile (attention_rows.h): the key tiles this query tile
 * sees, [0, min(i1 + vis, Tk)). Resuming, the previous result is the
 * online softmax's state: with m = lse and l = 1, out is already its
 * accumulator divided by l. */
void attn_forward_tile(float *o, float *lse, const float *q, const float *k, const float *v, int i0,
                       const struct head_view *w)
{
    /* Every entry of s stays finite: zeroed once, then only sgemm output. */
    float s[QTILE * KTILE], m[QTILE], l[QTILE];
    memset(s, 0, sizeof s);
    const int T = w->T, hs = w->hs, ld = w->ld, ldk = w->ldk, ldo = w->ldo;
    const int i1 = i0 + QTILE < T ? i0 + QTILE : T, bq = i1 - i0;
    const int je = i1 + w->vis < w->Tk ? i1 + w->vis : w->Tk;
    float *ob = o + (size_t)i0 * ldo;
    for (int r = 0; r < bq && w->resume; r++) {
        m[r] = lse[i0 + r];
        l[r] = 1.0f;
    }
    for (int j0 = 0; j0 < je; j0 += KTILE) {
        const int j1 = attn_tile_end(j0, KTILE, je), bk = j1 - j0, first = j0 == 0 && !w->resume;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, bk, hs, w->scale,
                    q + (size_t)i0 * ld, ld, k + (size_t)j0 * ldk, ldk, 0.0f, s, KTILE);
        for (int r = 0; r < bq; r++) {
            float corr =
                attn_online_softmax_row(s + r * KTILE, attn_keys_in_tile(i0 + r + w->vis, j0, j1),
                                        attn_lanes(bk), &m[r], &l[r], first);
            if (!first)
                attn_scale_row(ob + (size_t)r * ldo, hs, corr);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bq, hs, bk, 1.0f, s, KTILE,
                    v + (size_t)j0 * ldk, ldk, first ? 0.0f : 1.0f, ob, ldo);
    }
    for (int r = 0; r < bq; r++) {
        attn_scale_row(ob + (size_t)r * ldo, hs, 1.0f / l[r]);
        lse[i0 + r] = m[r] + logf(l[r]);
    }
}

/* Work item p of the forward: pair p / tiles = b NH + h, query tile
 * p % tiles. */
static void forward_item(float *out, float *lse, const float *qkv, int p, int tiles,
                         const struct head_view *w)
{
    const int pair = p / tiles, b = pair / w->NH, h = pair % w->NH, T = w->T;
    const float *rows = qkv + (size_t)b * T * w->ld;
    struct head_cols c = attn_head_cols(w, h);
    attn_forward_tile(out + (size_t)b * T * w->ldo + c.q, lse + (size_t)pair * T, rows + c.q,
                      rows + c.k, rows + c.v, (p % tiles) * QTILE, w);
}

zt_status cpu_attention_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                float *lse, const void *qkv, int B, int T, int NH, int NKV, int hs)
{
    const struct head_view w = attn_view_of(T, NH, NKV, hs);
    if (t != ZT_F32)
        return attn16_forward(self, t, out, lse, qkv, B, &w);
    const int tiles = (T + QTILE - 1) / QTILE, items = B * NH * tiles;
    if (!attn_items_in_parallel(&w)) {
        for (int p = 0; p < items; p++)
            forward_item(out, lse, qkv, p, tiles, &w);
        return ZT_OK;
    }
    /* Later tiles have more keys: handed out one at a time. */
#pragma omp parallel for schedule(dynamic, 1)
    for (int p = 0; p < items; p++)
        forward_item(out, lse, qkv, p, tiles, &w);
    return ZT_OK;
}

/* ---- backward ----------------------------------------------------------- */

/* attn_backward_tile (attention_rows.h): the key tiles as the forward's. */
void attn_backward_tile(const struct head_grads *g, int i0, const struct head_view *w)
{
    float p[QTILE * KTILE], dp[QTILE * KTILE], d[QTILE];
    memset(p, 0, sizeof p); /* finite everywhere, as in attn_forward_tile */
    memset(dp, 0, sizeof dp);
    const int T = w->T, hs = w->hs, ld = w->ld, ldk = w->ldk, ldo = w->ldo;
    const int i1 = i0 + QTILE < T ? i0 + QTILE : T, bq = i1 - i0;
    const int je = i1 + w->vis < w->Tk ? i1 + w->vis : w->Tk;
    const float *qb = g->q + (size_t)i0 * ld, *dob = g->dout + (size_t)i0 * ldo;
    for (int r = 0; r < bq; r++)
        d[r] = attn_dot_row(dob + (size_t)r * ldo, g->o + (size_t)(i0 + r) * ldo, hs);
    for (int j0 = 0; j0 < je; j0 += KTILE) {
        const int j1 = attn_tile_end(j0, KTILE, je), bk = j1 - j0;
        const float *kb = g->k + (size_t)j0 * ldk, *vb = g->v + (size_t)j0 * ldk;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, bk, hs, w->scale, qb, ld, kb, ldk,
                    0.0f, p, KTILE);
        for (int r = 0; r < bq; r++)
            attn_probs_row(p + r * KTILE, attn_keys_in_tile(i0 + r + w->vis, j0, j1),
                           attn_lanes(bk), g->lse[i0 + r]);
        /* dV += P^T dO; dP = dO V^T; dS = P o (dP - D). */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bk, hs, bq, 1.0f, p, KTILE, dob, ldo,
                    1.0f, g->dv + (size_t)j0 * ldk, ldk);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, bk, hs, 1.0f, dob, ldo, vb, ldk,
                    0.0f, dp, KTILE);
        for (int r = 0; r < bq; r++)
            attn_dscores_row(dp + r * KTILE, p + r * KTILE, attn_lanes(bk), d[r]);
        /* S = scale Q K^T: dQ += scale dS K, dK += scale dS^T Q. */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bq, hs, bk, w->scale, dp, KTILE, kb,
                    ldk, 1.0f, g->dq + (size_t)i0 * ld, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bk, hs, bq, w->scale, dp, KTILE, qb,
                    ld, 1.0f, g->dk + (size_t)j0 * ldk, ldk);
    }
}

/* Group p = b NKV + kv of the backward: its g query heads in order, each
 * head's query tiles in order. */
static void backward_group(float *dqkv, const float *dout, const float *qkv, const float *out,
                           const float *lse, int p, const struct head_view *w)
{
    const int g = w->NH / w->NKV, b = p / w->NKV, kv = p % w->NKV, T = w->T;
    const size_t rows = (size_t)b * T * w->ld, orows = (size_t)b * T * w->ldo;
    for (int h = kv * g; h < (kv + 1) * g; h++) {
        struct head_cols c = attn_head_cols(w, h);
        const struct head_grads hg = {.dq = dqkv + rows + c.q,
                                      .dk = dqkv + rows + c.k,
                                      .dv = dqkv + rows + c.v,
                                      .q = qkv + rows + c.q,
                                      .k = qkv + rows + c.k,
                                      .v = qkv + rows + c.v,
                                      .o = out + orows + c.q,
                                      .dout = dout + orows + c.q,
                                      .lse = lse + ((size_t)b * w->NH + h) * T};
        for (int i0 = 0; i0 < T; i0 += QTILE)
            attn_backward_tile(&hg, i0, w);
    }
}

zt_status cpu_attention_backward(const struct ops_backend *self, enum zt_dtype t, void *dqkv,
                                 const void *dout, const void *qkv, const void *out,
                                 const float *lse, int B, int T, int NH, int NKV, int hs)
{
    const struct head_view w = attn_view_of(T, NH, NKV, hs);
    if (t != ZT_F32)
        return attn16_backward(self, t, dqkv, dout, qkv, out, lse, B, &w);
    if (!attn_items_in_parallel(&w)) {
        for (int p = 0; p < B * NKV; p++)
            backward_group(dqkv, dout, qkv, out, lse, p, &w);
        return ZT_OK;
    }
#pragma omp parallel for schedule(static)
    for (int p = 0; p < B * NKV; p++)
        backward_group(dqkv, dout, qkv, out, lse, p, &w);
    return ZT_OK;
}
