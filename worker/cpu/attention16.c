/* worker/cpu/attention16.c — the fused attention's 16-bit forms: products
 * on the 16-bit operands where they lie, fp32 everywhere else.
 *
 * Why: staging each head into fp32 and multiplying with sgemm left
 * attention at the fp32 rate (a fifth of a bf16 step on small.yaml, more
 * at long sequences), while oneDNN multiplies bf16 at 2-3x that. So the
 * tiles are the fp32 form's (attention.c: the same online softmax, the
 * same row kernels), and each product reads q, k, v, out and dout in
 * place as 16-bit matrices with an fp32 result.
 *
 * What is rounded: as FlashAttention's 16-bit kernels do, the
 * probabilities P and the score gradients dS are rounded to 16 bits to be
 * multiplied; the sums (S, dP, the output's and dq, dk, dv's
 * accumulators, the softmax's max and sum, lse, D) stay fp32, and each
 * stored value (out, and dqkv after its fp32 accumulators are added in)
 * is rounded once. Against the fp32 form on the widened inputs that stays
 * within OPS_16BIT_GEMM_TOL (tests/test_ops16.c). Where the CPU has no
 * kernel for t the operands of each product are widened to fp32 first,
 * so the form runs everywhere (it is what GPU kernels are checked
 * against), at about the fp32 form's speed.
 *
 * Threads: the fp32 form's work items (forward: (b, h, query tile);
 * backward: a group (b, key/value head), whose heads add into one dk and
 * dv) go to OpenMP's threads, each multiplying on its own GEMM state (a
 * struct cpu_gemm_team member) with one-thread primitives. Each item runs
 * in a fixed order on one thread, so the result does not depend on the
 * thread count.
 *
 * Workspace: per thread and call, from the heap: the fp32 score tile and
 * its 16-bit copy (two of each in the backward), the output's or dq's
 * accumulator for a query tile, and in the backward dk and dv of a whole
 * group in fp32 (2 T hs floats).
 */
#include "worker/cpu/attention_rows.h"
#include "worker/cpu/gemm.h"
#include "worker/cpu/ops_cpu_impl.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A thread's buffers: s and ds fp32 tiles (QTILE x KTILE), their 16-bit
 * copies p16 and ds16, acc (QTILE x hs: out's or dq's accumulator), row
 * (2 hs: widened rows), in the backward dk and dv (T x hs each), and the
 * packed operand tiles qd, dod (QTILE x hs), kd, vd (KTILE x hs). */
struct tile16 {
    float *s, *ds, *acc, *row, *dk, *dv;
    uint16_t *p16, *ds16, *qd, *dod, *kd, *vd;
    struct cpu_gemm *gemm;
    float *wa, *wb; /* no 16-bit kernel here: operands widened, KTILE x max(hs, QTILE) */
};

static void tile16_free(struct tile16 *b)
{
    free(b->s);
    free(b->ds);
    free(b->acc);
    free(b->row);
    free(b->dk);
    free(b->dv);
    free(b->p16);
    free(b->ds16);
    free(b->qd);
    free(b->dod);
    free(b->kd);
    free(b->vd);
    free(b->wa);
    free(b->wb);
}

/* Every tile entry stays finite (zeroed here, then only products and row
 * kernels write them), as the row kernels' masked lanes need. */
static zt_status tile16_alloc(struct tile16 *b, const struct head_view *w, int backward)
{
    const size_t tile = (size_t)QTILE * KTILE, kv = backward ? (size_t)w->T * w->hs : 1;
    const size_t qh = (size_t)QTILE * w->hs, kh = (size_t)KTILE * w->hs;
    *b = (struct tile16){.s = calloc(tile, sizeof(float)),
                         .ds = backward ? calloc(tile, sizeof(float)) : NULL,
                         .acc = calloc((size_t)QTILE * w->hs, sizeof(float)),
                         .row = calloc(2 * (size_t)w->hs, sizeof(float)),
                         .dk = backward ? calloc(kv, sizeof(float)) : NULL,
                         .dv = backward ? calloc(kv, sizeof(float)) : NULL,
                         .p16 = calloc(tile, sizeof(uint16_t)),
                         .ds16 = backward ? calloc(tile, sizeof(uint16_t)) : NULL,
                         .qd = malloc(qh * sizeof(uint16_t)),
                         .dod = backward ? malloc(qh * sizeof(uint16_t)) : NULL,
                         .kd = malloc(kh * sizeof(uint16_t)),
                         .vd = malloc(kh * sizeof(uint16_t))};
    if (b->s && b->acc && b->row && b->p16 && b->qd && b->kd && b->vd &&
        (!backward || (b->ds && b->dk && b->dv && b->ds16 && b->dod)))
        return ZT_OK;
    tile16_free(b);
    return zt_error_set(ZT_ERR_NOMEM, "attention: out of memory for a thread's 16-bit tiles");
}

/* A CPU without a kernel for t (fp16 without AVX512-FP16) multiplies
 * fp32 copies of the operands instead: slower, but the form still runs,
 * as the reference other backends are checked against. */
static zt_status widen_when_unsupported(struct tile16 *b, enum zt_dtype t,
                                        const struct head_view *w)
{
    if (cpu_gemm_supports(b->gemm, t) == ZT_OK)
        return ZT_OK;
    zt_error_clear();
    const size_t n = (size_t)KTILE * (w->hs > QTILE ? w->hs : QTILE);
    b->wa = malloc(n * sizeof(float));
    b->wb = malloc(n * sizeof(float));
    if (b->wa && b->wb)
        return ZT_OK;
    return zt_error_set(ZT_ERR_NOMEM, "attention: out of memory for a thread's widened tiles");
}

/* The stored rows x cols of src (type t, rows ld apart) into dst, packed. */
static const float *widen_block(enum zt_dtype t, const void *src, int ld, int rows, int cols,
                                float *dst)
{
    for (int i = 0; i < rows; i++)
        cpu_stage_to_f32(t, cpu_elem(t, src, (size_t)i * ld), dst + (size_t)i * cols, (size_t)cols);
    return dst;
}

/* C[M,N] (fp32, ldc) = alpha op(A) op(B) (+ C), A and B of type t. */
static zt_status product(const struct tile16 *b, enum zt_dtype t, int trans_a, int trans_b, int M,
                         int N, int K, float alpha, const void *A, int lda, const void *B, int ldb,
                         int accumulate, float *C, int ldc)
{
    const struct cpu_gemm_call c = {.trans_a = trans_a,
                                    .trans_b = trans_b,
                                    .M = M,
                                    .N = N,
                                    .K = K,
                                    .alpha = alpha,
                                    .accumulate = accumulate,
                                    .ab_type = t,
                                    .c_type = ZT_F32,
                                    .A = A,
                                    .lda = lda,
                                    .B = B,
                                    .ldb = ldb,
                                    .C = C,
                                    .ldc = ldc};
    if (!b->wa)
        return cpu_gemm_run(b->gemm, &c);
    struct cpu_gemm_call f = c; /* A stored [M, K] or [K, M], B [K, N] or [N, K] */
    const int ar = trans_a ? K : M, ac = trans_a ? M : K, br = trans_b ? N : K,
              bc = trans_b ? K : N;
    f.ab_type = ZT_F32;
    f.A = widen_block(t, A, lda, ar, ac, b->wa), f.lda = ac;
    f.B = widen_block(t, B, ldb, br, bc, b->wb), f.ldb = bc;
    return cpu_gemm_run(b->gemm, &f);
}

/* rows x hs elements of src (type t, row i at element at + i ld) packed
 * into dst: oneDNN runs its fastest kernels (brgemm) only on operands
 * whose rows are dense, and q, k, v are column slices of qkv. */
static const void *pack(uint16_t *dst, const void *src, size_t at, int ld, int rows, int hs)
{
    for (int i = 0; i < rows; i++)
        memcpy(dst + (size_t)i * hs, (const uint16_t *)src + at + (size_t)i * ld,
               (size_t)hs * sizeof(uint16_t));
    return dst;
}

/* dst[0..n) (type t) = round(widen(dst) + add). */
static void add_into(enum zt_dtype t, void *dst, const float *add, int n, float *row)
{
    cpu_stage_to_f32(t, dst, row, (size_t)n);
    for (int c = 0; c < n; c++)
        row[c] += add[c];
    cpu_stage_from_f32(t, row, dst, (size_t)n);
}

/* ---- forward ------------------------------------------------------------ */

/* Query tile [i0, i0 + QTILE) of (b, h). Score rows are attn_lanes(bk)
 * apart (whole vectors for the row kernels; dense when bk is a multiple
 * of 16), the 16-bit probabilities bk apart. */
static zt_status forward_tile(struct tile16 *b, enum zt_dtype t, void *out, float *lse,
                              const void *qkv, int bi, int h, int i0, const struct head_view *w)
{
    const int T = w->T, hs = w->hs, ld = w->ld, i1 = attn_tile_end(i0, QTILE, T), bq = i1 - i0;
    const struct head_cols c = attn_head_cols(w, h);
    const size_t rows = (size_t)bi * T * ld;
    const void *q = pack(b->qd, qkv, rows + (size_t)i0 * ld + c.q, ld, bq, hs);
    float m[QTILE], l[QTILE];
    for (int j0 = 0; j0 < i1; j0 += KTILE) {
        const int j1 = attn_tile_end(j0, KTILE, i1), bk = j1 - j0, first = j0 == 0;
        const int lanes = attn_lanes(bk);
        const size_t kv = rows + (size_t)j0 * ld;
        const void *k = pack(b->kd, qkv, kv + c.k, ld, bk, hs);
        const void *v = pack(b->vd, qkv, kv + c.v, ld, bk, hs);
        ZT_TRY(product(b, t, 0, 1, bq, bk, hs, w->scale, q, hs, k, hs, 0, b->s, lanes));
        for (int r = 0; r < bq; r++) {
            float *s = b->s + (size_t)r * lanes;
            float corr = attn_online_softmax_row(s, attn_keys_in_tile(i0 + r, j0, j1), lanes, &m[r],
                                                 &l[r], first);
            if (!first)
                attn_scale_row(b->acc + (size_t)r * hs, hs, corr);
            cpu_stage_from_f32(t, s, b->p16 + (size_t)r * bk, (size_t)bk);
        }
        ZT_TRY(product(b, t, 0, 0, bq, hs, bk, 1.0f, b->p16, bk, v, hs, !first, b->acc, hs));
    }
    const size_t orow = (size_t)bi * T * w->ldo + c.q;
    for (int r = 0; r < bq; r++) {
        float *a = b->acc + (size_t)r * hs;
        attn_scale_row(a, hs, 1.0f / l[r]);
        lse[((size_t)bi * w->NH + h) * T + i0 + r] = m[r] + logf(l[r]);
        cpu_stage_from_f32(t, a, cpu_elem(t, out, orow + (size_t)(i0 + r) * w->ldo), (size_t)hs);
    }
    return ZT_OK;
}

/* ---- backward ----------------------------------------------------------- */

/* The operands of one (b, h) in the backward: element offsets of row 0 of
 * the batch in qkv and out, and the head's columns. */
struct head16 {
    size_t rows, orows;
    struct head_cols c;
    const float *lse; /* the head's T entries */
};

/* D[r] = dout_r . out_r over a query tile's rows, in fp32. */
static void row_terms(struct tile16 *b, enum zt_dtype t, const void *dout, const void *out,
                      const struct head16 *hd, int i0, int bq, const struct head_view *w, float *D)
{
    const int hs = w->hs;
    for (int r = 0; r < bq; r++) {
        const size_t at = hd->orows + (size_t)(i0 + r) * w->ldo + hd->c.q;
        cpu_stage_to_f32(t, cpu_elem(t, dout, at), b->row, (size_t)hs);
        cpu_stage_to_f32(t, cpu_elem(t, out, at), b->row + hs, (size_t)hs);
        D[r] = attn_dot_row(b->row, b->row + hs, hs);
    }
}

/* Query tile [i0, i0 + QTILE) of one head: dq into dqkv, dk and dv into
 * the thread's fp32 accumulators of the group (rows as in forward_tile). */
static zt_status backward_tile(struct tile16 *b, enum zt_dtype t, void *dqkv, const void *dout,
                               const void *qkv, const void *out, const struct head16 *hd, int i0,
                               const struct head_view *w)
{
    const int T = w->T, hs = w->hs, ld = w->ld, i1 = attn_tile_end(i0, QTILE, T), bq = i1 - i0;
    const void *q = pack(b->qd, qkv, hd->rows + (size_t)i0 * ld + hd->c.q, ld, bq, hs);
    const void *dob = pack(b->dod, dout, hd->orows + (size_t)i0 * w->ldo + hd->c.q, w->ldo, bq, hs);
    float D[QTILE];
    row_terms(b, t, dout, out, hd, i0, bq, w, D);
    memset(b->acc, 0, (size_t)bq * hs * sizeof(float));
    for (int j0 = 0; j0 < i1; j0 += KTILE) {
        const int j1 = attn_tile_end(j0, KTILE, i1), bk = j1 - j0, lanes = attn_lanes(bk);
        const size_t kv = hd->rows + (size_t)j0 * ld;
        const void *k = pack(b->kd, qkv, kv + hd->c.k, ld, bk, hs);
        const void *v = pack(b->vd, qkv, kv + hd->c.v, ld, bk, hs);
        ZT_TRY(product(b, t, 0, 1, bq, bk, hs, w->scale, q, hs, k, hs, 0, b->s, lanes));
        for (int r = 0; r < bq; r++) {
            float *p = b->s + (size_t)r * lanes;
            attn_probs_row(p, attn_keys_in_tile(i0 + r, j0, j1), lanes, hd->lse[i0 + r]);
            cpu_stage_from_f32(t, p, b->p16 + (size_t)r * bk, (size_t)bk);
        }
        /* dV += P^T dO; dP = dO V^T; dS = P o (dP - D). */
        ZT_TRY(product(b, t, 1, 0, bk, hs, bq, 1.0f, b->p16, bk, dob, hs, 1,
                       b->dv + (size_t)j0 * hs, hs));
        ZT_TRY(product(b, t, 0, 1, bq, bk, hs, 1.0f, dob, hs, v, hs, 0, b->ds, lanes));
        for (int r = 0; r < bq; r++) {
            float *ds = b->ds + (size_t)r * lanes;
            attn_dscores_row(ds, b->s + (size_t)r * lanes, lanes, D[r]);
            cpu_stage_from_f32(t, ds, b->ds16 + (size_t)r * bk, (size_t)bk);
        }
        /* S = scale Q K^T: dQ += scale dS K, dK += scale dS^T Q. */
        ZT_TRY(product(b, t, 0, 0, bq, hs, bk, w->scale, b->ds16, bk, k, hs, 1, b->acc, hs));
        ZT_TRY(product(b, t, 1, 0, bk, hs, bq, w->scale, b->ds16, bk, q, hs, 1,
                       b->dk + (size_t)j0 * hs, hs));
    }
    for (int r = 0; r < bq; r++)
        add_into(t, cpu_elem(t, dqkv, hd->rows + (size_t)(i0 + r) * ld + hd->c.q),
                 b->acc + (size_t)r * hs, hs, b->row);
    return ZT_OK;
}

/* Group p = b NKV + kv: its g query heads in order, each head's query
 * tiles in order, then the group's dk and dv added into dqkv. */
static zt_status backward_group(struct tile16 *b, enum zt_dtype t, void *dqkv, const void *dout,
                                const void *qkv, const void *out, const float *lse, int p,
                                const struct head_view *w)
{
    const int g = w->NH / w->NKV, bi = p / w->NKV, kv = p % w->NKV, T = w->T, hs = w->hs;
    memset(b->dk, 0, (size_t)T * hs * sizeof(float));
    memset(b->dv, 0, (size_t)T * hs * sizeof(float));
    struct head16 hd = {.rows = (size_t)bi * T * w->ld, .orows = (size_t)bi * T * w->ldo};
    for (int h = kv * g; h < (kv + 1) * g; h++) {
        hd.c = attn_head_cols(w, h);
        hd.lse = lse + ((size_t)bi * w->NH + h) * T;
        for (int i0 = 0; i0 < T; i0 += QTILE)
            ZT_TRY(backward_tile(b, t, dqkv, dout, qkv, out, &hd, i0, w));
    }
    for (int i = 0; i < T; i++) {
        const size_t row = hd.rows + (size_t)i * w->ld;
        add_into(t, cpu_elem(t, dqkv, row + hd.c.k), b->dk + (size_t)i * hs, hs, b->row);
        add_into(t, cpu_elem(t, dqkv, row + hd.c.v), b->dv + (size_t)i * hs, hs, b->row);
    }
    return ZT_OK;
}

/* ---- the items on OpenMP's threads --------------------------------------- */

/* A call's first failure, carried out of the parallel region: messages
 * are per thread (common/status.h). */
struct failure {
    zt_status status;
    char message[512];
};

static void record(struct failure *f, zt_status s)
{
    if (s == ZT_OK)
        return;
#pragma omp critical(attention16_failure)
    if (f->status == ZT_OK) {
        f->status = s;
        snprintf(f->message, sizeof f->message, "%s", zt_error_message());
    }
}

/* One call's operands, for the items. */
struct call16 {
    enum zt_dtype t;
    const struct head_view *w;
    void *out, *dqkv;
    float *lse_out;
    const void *qkv, *dout, *fwd_out;
    const float *lse;
    int tiles; /* the forward's query tiles per head */
};

typedef zt_status (*item_fn)(struct tile16 *b, int i, const struct call16 *c);

static zt_status forward_item(struct tile16 *b, int i, const struct call16 *c)
{
    const int pair = i / c->tiles;
    return forward_tile(b, c->t, c->out, c->lse_out, c->qkv, pair / c->w->NH, pair % c->w->NH,
                        i % c->tiles * QTILE, c->w);
}

static zt_status backward_item(struct tile16 *b, int i, const struct call16 *c)
{
    return backward_group(b, c->t, c->dqkv, c->dout, c->qkv, c->fwd_out, c->lse, i, c->w);
}

/* Runs item(i) for i in [0, items) on the threads, one at a time (later
 * forward tiles have more keys). Each thread first sets its own thread
 * count to 1, so that the primitives it builds and runs are one-thread
 * ones (a tile is too small to split). */
static zt_status run_items(const struct ops_backend *self, const struct call16 *c, int backward,
                           int items, item_fn item)
{
    struct cpu_gemm_team *owned = NULL, *team;
    ZT_TRY(cpu_gemm_team_of(self, &team, &owned));
    const int n = cpu_gemm_team_size(team), threads = c->w->threads < n ? c->w->threads : n;
    struct failure f = {.status = ZT_OK};
#pragma omp parallel num_threads(threads)
    {
        omp_set_num_threads(1);
        struct tile16 b = {0};
        zt_status s = tile16_alloc(&b, c->w, backward);
        if (s == ZT_OK)
            s = cpu_gemm_team_member(team, omp_get_thread_num(), &b.gemm);
        if (s == ZT_OK)
            s = widen_when_unsupported(&b, c->t, c->w);
        record(&f, s);
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < items; i++)
            if (s == ZT_OK)
                record(&f, s = item(&b, i, c));
        tile16_free(&b);
    }
    cpu_gemm_team_destroy(owned);
    return f.status == ZT_OK ? ZT_OK : zt_error_set(f.status, "%s", f.message);
}

zt_status attn16_forward(const struct ops_backend *self, enum zt_dtype t, void *out, float *lse,
                         const void *qkv, int B, const struct head_view *w)
{
    const struct call16 c = {.t = t,
                             .w = w,
                             .out = out,
                             .lse_out = lse,
                             .qkv = qkv,
                             .tiles = (w->T + QTILE - 1) / QTILE};
    return run_items(self, &c, 0, B * w->NH * c.tiles, forward_item);
}

zt_status attn16_backward(const struct ops_backend *self, enum zt_dtype t, void *dqkv,
                          const void *dout, const void *qkv, const void *out, const float *lse,
                          int B, const struct head_view *w)
{
    const struct call16 c = {
        .t = t, .w = w, .dqkv = dqkv, .dout = dout, .qkv = qkv, .fwd_out = out, .lse = lse};
    return run_items(self, &c, 1, B * w->NKV, backward_item);
}
