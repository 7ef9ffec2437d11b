/* tests/test_attention_ring.c — ring attention (context parallelism)
 * against the unsplit fused attention.
 *
 * One sequence of S tokens is cut as a context group of cp ranks cuts it
 * (2 cp chunks, rank r holding chunks r and 2 cp - 1 - r); each simulated
 * rank runs attention_ring_forward over the ring's blocks in its order (its
 * own first, then r - 1, r - 2, ...), and attention_ring_backward over the
 * same blocks, each block's dk and dv summed at its owner. Put back in
 * sequence order, out, lse and dqkv must equal attention_forward's and
 * attention_backward's on the whole sequence (which tests/test_ops.c holds
 * to double references) within RING_TOL relative to the largest magnitude:
 * the same tiles run over the same keys, only the order of the online
 * softmax's merges and of the sums differs, a few float roundings. A wrong
 * mask (a chunk pair seen or missed) moves them by 1e-2 or more.
 * Chunks of 80 rows span two query tiles; NH 4 over NKV 2 key/value heads
 * checks the grouped-query indexing.
 */
#include "testutil.h"

#include "common/rng.h"
#include "worker/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING_TOL 1e-6

enum { B = 2, NH = 4, NKV = 2, HS = 16, CHUNK = 80 };

static void fill_random(float *x, size_t n, uint64_t key)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)rng_normal(key, i);
}

/* Global row of local row t of rank r (chunks of CHUNK rows). */
static int global_row(int cp, int r, int t)
{
    const int k = t / CHUNK, chunk = k == 0 ? r : 2 * cp - 1 - r;
    return chunk * CHUNK + t % CHUNK;
}

/* max |a - b| / max |b| over columns [c0, c0 + w) of `rows` rows ld
 * apart, and that max |b| is not 0. */
static double rel_diff_cols(const float *a, const float *b, size_t rows, size_t ld, size_t c0,
                            size_t w)
{
    double d = 0.0, m = 0.0;
    for (size_t r = 0; r < rows; r++)
        for (size_t i = r * ld + c0; i < r * ld + c0 + w; i++) {
            d = fmax(d, fabs((double)a[i] - b[i]));
            m = fmax(m, fabs((double)b[i]));
        }
    ck_assert(m > 0.0);
    return d / m;
}

static double rel_diff(const float *a, const float *b, size_t n)
{
    return rel_diff_cols(a, b, 1, n, 0, n);
}

static float *alloc_floats(size_t n)
{
    float *p = calloc(n, sizeof(float));
    ck_assert_ptr_nonnull(p);
    return p;
}

START_TEST(ring_equals_unsplit_attention)
{
    const int cp = _i == 0 ? 2 : 4, S = 2 * cp * CHUNK, T = S / cp;
    const int ld = (NH + 2 * NKV) * HS, ldo = NH * HS, ldk = 2 * NKV * HS;
    const struct ops_backend *ops = ops_cpu_backend();
    float *qkv = alloc_floats((size_t)B * S * ld), *out = alloc_floats((size_t)B * S * ldo);
    float *lse = alloc_floats((size_t)B * NH * S), *dout = alloc_floats((size_t)B * S * ldo);
    float *dqkv = alloc_floats((size_t)B * S * ld);
    fill_random(qkv, (size_t)B * S * ld, 11);
    fill_random(dout, (size_t)B * S * ldo, 12);
    ck_assert_int_eq(ops->attention_forward(ops, ZT_F32, out, lse, qkv, B, S, NH, NKV, HS), ZT_OK);
    ck_assert_int_eq(
        ops->attention_backward(ops, ZT_F32, dqkv, dout, qkv, out, lse, B, S, NH, NKV, HS), ZT_OK);

    /* Each rank's rows, its key/value block, and the ring's results put
     * back in sequence order. */
    float *lq[4], *lkv[4], *lo[4], *ll[4], *ldout[4], *ldq[4], *ldkv[4];
    float *ring_out = alloc_floats((size_t)B * S * ldo),
          *ring_lse = alloc_floats((size_t)B * NH * S);
    float *ring_dqkv = alloc_floats((size_t)B * S * ld);
    for (int r = 0; r < cp; r++) {
        lq[r] = alloc_floats((size_t)B * T * ld);
        lkv[r] = alloc_floats((size_t)B * T * ldk);
        lo[r] = alloc_floats((size_t)B * T * ldo);
        ll[r] = alloc_floats((size_t)B * NH * T);
        ldout[r] = alloc_floats((size_t)B * T * ldo);
        ldq[r] = alloc_floats((size_t)B * T * ld);
        ldkv[r] = alloc_floats((size_t)B * T * ldk);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const size_t g = (size_t)b * S + global_row(cp, r, t), l = (size_t)b * T + t;
                memcpy(lq[r] + l * ld, qkv + g * ld, (size_t)ld * sizeof(float));
                memcpy(lkv[r] + l * ldk, qkv + g * ld + NH * HS, (size_t)ldk * sizeof(float));
                memcpy(ldout[r] + l * ldo, dout + g * ldo, (size_t)ldo * sizeof(float));
            }
    }
    for (int r = 0; r < cp; r++)
        for (int s = 0; s < cp; s++) {
            const int owner = (r - s + cp) % cp;
            ck_assert_int_eq(ops->attention_ring_forward(ops, ZT_F32, lo[r], ll[r], lq[r],
                                                         lkv[owner], B, T, NH, NKV, HS, cp, r,
                                                         owner, s == 0),
                             ZT_OK);
        }
    for (int r = 0; r < cp; r++)
        for (int s = 0; s < cp; s++) {
            const int owner = (r - s + cp) % cp;
            ck_assert_int_eq(ops->attention_ring_backward(ops, ZT_F32, ldq[r], ldkv[owner],
                                                          ldout[r], lq[r], lkv[owner], lo[r], ll[r],
                                                          B, T, NH, NKV, HS, cp, r, owner),
                             ZT_OK);
        }
    for (int r = 0; r < cp; r++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const size_t g = (size_t)b * S + global_row(cp, r, t), l = (size_t)b * T + t;
                memcpy(ring_out + g * ldo, lo[r] + l * ldo, (size_t)ldo * sizeof(float));
                memcpy(ring_dqkv + g * ld, ldq[r] + l * ld, (size_t)NH * HS * sizeof(float));
                memcpy(ring_dqkv + g * ld + NH * HS, ldkv[r] + l * ldk,
                       (size_t)ldk * sizeof(float));
                for (int h = 0; h < NH; h++)
                    ring_lse[((size_t)b * NH + h) * S + global_row(cp, r, t)] =
                        ll[r][((size_t)b * NH + h) * T + t];
            }
    const double d_out = rel_diff(ring_out, out, (size_t)B * S * ldo);
    const double d_lse = rel_diff(ring_lse, lse, (size_t)B * NH * S);
    /* dq, dk and dv apart: a block missed shows in one of them alone */
    const size_t rows = (size_t)B * S, w = (size_t)NKV * HS;
    const double d_q = rel_diff_cols(ring_dqkv, dqkv, rows, ld, 0, (size_t)NH * HS);
    const double d_k = rel_diff_cols(ring_dqkv, dqkv, rows, ld, (size_t)NH * HS, w);
    const double d_v = rel_diff_cols(ring_dqkv, dqkv, rows, ld, (size_t)NH * HS + w, w);
    printf("ring attention, %d ranks: max relative difference out %.2e, lse %.2e, dq %.2e, "
           "dk %.2e, dv %.2e\n",
           cp, d_out, d_lse, d_q, d_k, d_v);
    ck_assert(d_out <= RING_TOL && d_lse <= RING_TOL);
    ck_assert(d_q <= RING_TOL && d_k <= RING_TOL && d_v <= RING_TOL);
    for (int r = 0; r < cp; r++) {
        free(lq[r]);
        free(lkv[r]);
        free(lo[r]);
        free(ll[r]);
        free(ldout[r]);
        free(ldq[r]);
        free(ldkv[r]);
    }
    free(ring_out);
    free(ring_lse);
    free(ring_dqkv);
    free(qkv);
    free(out);
    free(lse);
    free(dout);
    free(dqkv);
}
END_TEST

START_TEST(ring_refuses_16_bit)
{
    const struct ops_backend *ops = ops_cpu_backend();
    float x[8] = {0};
    ck_assert_int_eq(
        ops->attention_ring_forward(ops, ZT_BF16, x, x, x, x, 1, 2, 1, 1, 1, 1, 0, 0, 1),
        ZT_ERR_UNSUPPORTED);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("attention_ring");
    TCase *tc = testutil_tcase(s, "ring", 120);
    tcase_add_loop_test(tc, ring_equals_unsplit_attention, 0, 2);
    tcase_add_test(tc, ring_refuses_16_bit);
    return testutil_run_suite(s, 0);
}
