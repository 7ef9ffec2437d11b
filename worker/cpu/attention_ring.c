/* worker/cpu/attention_ring.c — one block of ring attention (context
 * parallelism): this rank's queries against another rank's keys and values.
 *
 * The sequence is cut into 2 cp chunks of c rows and rank r holds chunks r
 * and 2 cp - 1 - r (Megatron's load balance for the causal mask: every rank
 * gets one early and one late chunk, so every rank does the same work). A
 * pair of chunks (query chunk a, key chunk b) is then one of three cases:
 * b < a, every key before every query (vis = c); b == a, the causal
 * diagonal (vis = 0); b > a, nothing. Each visible pair runs attention.c's
 * fp32 tiles with the key/value rows of the block (stride 2 NKV hs) and the
 * pair's vis; the first pair a query chunk meets writes out and lse, every
 * later one resumes from them (the online softmax's state is (m = lse,
 * l = 1, acc = out), attention_rows.h), so after the whole ring out and lse
 * are the unsplit attention's.
 *
 * The backward is a sum over key blocks: with the final lse and out,
 * P = e^(S - lse) and D = rowsum(dO o O) are the unsplit backward's, so each
 * block adds its part to dq and to the block's dk and dv, which travel
 * with it (worker/model_context.c).
 *
 * Threads as in attention.c: forward items (b, h, query chunk) are
 * independent; backward items are groups (b, key/value head), whose query
 * heads add into the same dk and dv in a fixed order.
 */
#include "worker/cpu/attention_rows.h"
#include "worker/cpu/ops_cpu_impl.h"

#include "common/status.h"

/* The global chunk index of rank r's local chunk k (0 or 1). */
static int chunk_of(int cp, int r, int k)
{
    return k == 0 ? r : 2 * cp - 1 - r;
}

/* The arguments of one call. */
struct ring_call {
    float *out, *dqkv, *dkv;
    float *lse;
    const float *qkv, *kv, *dout, *out_read, *lse_read;
    int B, T, NH, NKV, hs, cp, q_rank, kv_rank, first;
};

/* The view of query chunk qc against key chunk kc, or vis < 0 when the
 * pair sees nothing. */
static struct head_view pair_view(const struct ring_call *a, int qc, int kc, int resume)
{
    struct head_view w = attn_view_of(a->T / 2, a->NH, a->NKV, a->hs);
    const int gq = chunk_of(a->cp, a->q_rank, qc), gk = chunk_of(a->cp, a->kv_rank, kc);
    w.ldk = 2 * a->NKV * a->hs;
    w.vis = gk < gq ? w.T : gk == gq ? 0 : -1;
    w.resume = resume;
    return w;
}

/* Forward item p = (b NH + h) 2 + qc. */
static void forward_item(const struct ring_call *a, int p)
{
    const int qc = p % 2, pair = p / 2, b = pair / a->NH, h = pair % a->NH, c = a->T / 2;
    const int kvh = h / (a->NH / a->NKV), ld = (a->NH + 2 * a->NKV) * a->hs;
    const size_t ldk = (size_t)2 * a->NKV * a->hs, ldo = (size_t)a->NH * a->hs;
    const size_t qrow = (size_t)b * a->T + (size_t)qc * c;
    int have = !a->first;
    for (int kc = 0; kc < 2; kc++) {
        const struct head_view w = pair_view(a, qc, kc, have);
        if (w.vis < 0)
            continue;
        const size_t krow = (size_t)b * a->T + (size_t)kc * c;
        const float *k = a->kv + krow * ldk + (size_t)kvh * a->hs;
        for (int i0 = 0; i0 < c; i0 += QTILE)
            attn_forward_tile(a->out + qrow * ldo + (size_t)h * a->hs,
                              a->lse + ((size_t)b * a->NH + h) * a->T + (size_t)qc * c,
                              a->qkv + qrow * ld + (size_t)h * a->hs, k, k + (size_t)a->NKV * a->hs,
                              i0, &w);
        have = 1;
    }
}

/* Backward group p = b NKV + kvh: its query heads, each head's chunks. */
static void backward_group(const struct ring_call *a, int p)
{
    const int g = a->NH / a->NKV, b = p / a->NKV, kvh = p % a->NKV, c = a->T / 2;
    const int ld = (a->NH + 2 * a->NKV) * a->hs;
    const size_t ldk = (size_t)2 * a->NKV * a->hs, ldo = (size_t)a->NH * a->hs;
    for (int h = kvh * g; h < (kvh + 1) * g; h++)
        for (int qc = 0; qc < 2; qc++)
            for (int kc = 0; kc < 2; kc++) {
                const struct head_view w = pair_view(a, qc, kc, 0);
                if (w.vis < 0)
                    continue;
                const size_t qrow = (size_t)b * a->T + (size_t)qc * c;
                const size_t krow = (size_t)b * a->T + (size_t)kc * c;
                const size_t ko = krow * ldk + (size_t)kvh * a->hs;
                const size_t vo = ko + (size_t)a->NKV * a->hs;
                const struct head_grads hg = {.dq = a->dqkv + qrow * ld + (size_t)h * a->hs,
                                              .dk = a->dkv + ko,
                                              .dv = a->dkv + vo,
                                              .q = a->qkv + qrow * ld + (size_t)h * a->hs,
                                              .k = a->kv + ko,
                                              .v = a->kv + vo,
                                              .o = a->out_read + qrow * ldo + (size_t)h * a->hs,
                                              .dout = a->dout + qrow * ldo + (size_t)h * a->hs,
                                              .lse = a->lse_read + ((size_t)b * a->NH + h) * a->T +
                                                     (size_t)qc * c};
                for (int i0 = 0; i0 < c; i0 += QTILE)
                    attn_backward_tile(&hg, i0, &w);
            }
}

static zt_status check_call(enum zt_dtype t, int T, int cp, int q_rank, int kv_rank)
{
    if (t != ZT_F32)
        return zt_error_set(ZT_ERR_UNSUPPORTED,
                            "ring attention: %s activations are not built "
                            "(context parallelism runs in fp32)",
                            zt_precision_name(t));
    ZT_ASSERT(T > 0 && T % 2 == 0 && cp >= 1 && q_rank >= 0 && q_rank < cp && kv_rank >= 0 &&
              kv_rank < cp);
    return ZT_OK;
}

/* The sizes of a call, its pointers left to the caller. */
static struct ring_call call_of(int B, int T, int NH, int NKV, int hs, int cp, int q_rank,
                                int kv_rank)
{
    return (struct ring_call){.B = B,
                              .T = T,
                              .NH = NH,
                              .NKV = NKV,
                              .hs = hs,
                              .cp = cp,
                              .q_rank = q_rank,
                              .kv_rank = kv_rank};
}

/* Runs item(a, p) for p < n, on OpenMP's threads when attention.c would. */
static void run_items(const struct ring_call *a, int n, void (*item)(const struct ring_call *, int))
{
    const struct head_view w = attn_view_of(a->T, a->NH, a->NKV, a->hs);
    if (!attn_items_in_parallel(&w)) {
        for (int p = 0; p < n; p++)
            item(a, p);
        return;
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int p = 0; p < n; p++)
        item(a, p);
}

zt_status cpu_attention_ring_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                                     float *lse, const void *qkv, const void *kv, int B, int T,
                                     int NH, int NKV, int hs, int cp, int q_rank, int kv_rank,
                                     int first)
{
    (void)self;
    ZT_TRY(check_call(t, T, cp, q_rank, kv_rank));
    struct ring_call a = call_of(B, T, NH, NKV, hs, cp, q_rank, kv_rank);
    a.out = out;
    a.lse = lse;
    a.qkv = qkv;
    a.kv = kv;
    a.first = first;
    run_items(&a, B * NH * 2, forward_item); /* later chunks have more keys: dynamic */
    return ZT_OK;
}

zt_status cpu_attention_ring_backward(const struct ops_backend *self, enum zt_dtype t, void *dqkv,
                                      void *dkv, const void *dout, const void *qkv, const void *kv,
                                      const void *out, const float *lse, int B, int T, int NH,
                                      int NKV, int hs, int cp, int q_rank, int kv_rank)
{
    (void)self;
    ZT_TRY(check_call(t, T, cp, q_rank, kv_rank));
    struct ring_call a = call_of(B, T, NH, NKV, hs, cp, q_rank, kv_rank);
    a.dqkv = dqkv;
    a.dkv = dkv;
    a.dout = dout;
    a.qkv = qkv;
    a.kv = kv;
    a.out_read = out;
    a.lse_read = lse;
    run_items(&a, B * NKV, backward_group);
    return ZT_OK;
}
