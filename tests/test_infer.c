/* tests/test_infer.c — generation's forward (worker/infer.h), its
 * attention over a key/value cache and the choice of the next token.
 *
 * The cached attention against a double loop; a decode with the cache
 * against the training forward (model_forward, another code path: fused
 * causal attention over the whole sequence) re-run on the growing
 * sequence, for GPT-2 and for Llama with grouped-query heads (untied and
 * tied head, with and without q/k/v biases): the same greedy tokens, and log-probabilities within
 * float rounding; the same against the cache refilled from scratch each step; and sampling's
 * filters and draws. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flat_hooks.h"
#include "testutil.h"
#include "common/ledger.h"
#include "common/rng.h"
#include "worker/backend.h"
#include "worker/infer.h"
#include "worker/llama.h"
#include "worker/model.h"
#include "worker/ops.h"
#include "worker/sampling.h"

static float *random_floats(size_t n, uint64_t seed)
{
    float *x = malloc(n * sizeof *x);
    ck_assert(x != NULL);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)rng_normal(seed, i);
    return x;
}

/* Query row i at position p0 + i over keys 0 .. p0 + i, in double. */
static void cached_reference(double *out, const float *q, int qs, const float *k, const float *v,
                             int ks, int p0, int n, int NH, int NKV, int hs)
{
    for (int i = 0; i < n; i++)
        for (int h = 0; h < NH; h++) {
            const int g = h / (NH / NKV), vis = p0 + i + 1;
            double *s = malloc((size_t)vis * sizeof *s), max = -INFINITY, sum = 0;
            for (int j = 0; j < vis; j++) {
                double d = 0;
                for (int c = 0; c < hs; c++)
                    d += (double)q[i * qs + h * hs + c] * k[j * ks + g * hs + c];
                s[j] = d / sqrt((double)hs);
                max = s[j] > max ? s[j] : max;
            }
            for (int j = 0; j < vis; j++)
                sum += s[j] = exp(s[j] - max);
            for (int c = 0; c < hs; c++) {
                double o = 0;
                for (int j = 0; j < vis; j++)
                    o += s[j] / sum * v[j * ks + g * hs + c];
                out[(i * NH + h) * hs + c] = o;
            }
            free(s);
        }
}

static double max_rel_err(const float *got, const double *want, size_t n)
{
    double err = 0, mag = 0;
    for (size_t i = 0; i < n; i++) {
        err = fmax(err, fabs(got[i] - want[i]));
        mag = fmax(mag, fabs(want[i]));
    }
    return err / fmax(mag, 1e-30);
}

START_TEST(cached_attention_matches_double_loop)
{
    const struct ops_backend *ops = ops_cpu_backend();
    const int NH = 4, NKV = 2, hs = 16, P = 37;
    const int qs = (NH + 2 * NKV) * hs + 3, ks = NKV * hs + 5; /* strides wider than the heads */
    float *q = random_floats((size_t)P * qs, 1), *k = random_floats((size_t)P * ks, 2);
    float *v = random_floats((size_t)P * ks, 3), *out = malloc((size_t)P * NH * hs * sizeof *out);
    double *want = malloc((size_t)P * NH * hs * sizeof *want);
    const int cases[][2] = {{0, 1}, {0, P}, {20, 1}, {36, 1}, {30, 7}}; /* p0, n */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int p0 = cases[c][0], n = cases[c][1];
        ck_assert_int_eq(
            ops->attention_cached_forward(ops, ZT_F32, out, q, qs, k, v, ks, p0, n, NH, NKV, hs),
            ZT_OK);
        cached_reference(want, q, qs, k, v, ks, p0, n, NH, NKV, hs);
        const double err = max_rel_err(out, want, (size_t)n * NH * hs);
        ck_assert_msg(err < ATTENTION_FP32_TOL, "p0 %d n %d: error %g", p0, n, err);
    }
    ck_assert_int_eq(
        ops->attention_cached_forward(ops, ZT_BF16, out, q, qs, k, v, ks, 0, 1, NH, NKV, hs),
        ZT_ERR_UNSUPPORTED);
    free(q), free(k), free(v), free(out), free(want);
}
END_TEST

/* A model, its weights and the CPU backend the training forward runs on. */
struct fixture {
    struct param_table t;
    float *params, *grads;
    struct ledger ledger;
    struct compute_backend be;
};

static void fixture_open(struct fixture *fx, const struct zt_kvlist *shape)
{
    memset(fx, 0, sizeof *fx);
    ck_assert_int_eq(param_table_build(shape, &fx->t), ZT_OK);
    fx->params = malloc(fx->t.n_params * sizeof(float));
    fx->grads = calloc(fx->t.n_params, sizeof(float));
    ck_assert(fx->params && fx->grads);
    param_table_init(&fx->t, 7, 0, fx->t.n_params, fx->params);
    /* larger than the init's 0.02 spread, so that the logits are far apart,
     * and biases and norms off their start, so that each counts */
    for (int k = 0; k < fx->t.n_tensors; k++) {
        const struct param_tensor *pt = &fx->t.tensors[k];
        for (size_t i = 0; i < (size_t)pt->rows * pt->cols; i++)
            fx->params[pt->offset + i] =
                pt->cols == 1 ? fx->params[pt->offset + i] + 0.2f * (float)rng_normal(11, i)
                              : 8.0f * fx->params[pt->offset + i];
    }
    ledger_init(&fx->ledger, 0);
    ck_assert_int_eq(compute_backend_open("cpu", -1, &fx->ledger, &fx->be), ZT_OK);
}

static void fixture_close(struct fixture *fx)
{
    compute_backend_close(&fx->be);
    param_table_free(&fx->t);
    free(fx->params);
    free(fx->grads);
}

/* The training forward's log-probabilities of every token after seq[0..n):
 * one forward per candidate, every target masked but the last. */
static void training_logprobs(struct fixture *fx, const int32_t *seq, int n, int V, double *lp)
{
    struct model *m;
    struct flat_state st = {.t = &fx->t, .params = fx->params, .grads = fx->grads};
    const struct model_unit_hooks h = flat_hooks(&st);
    int32_t *targets = malloc((size_t)n * sizeof *targets);
    ck_assert(targets != NULL);
    ck_assert_int_eq(model_create(&fx->t, &fx->be, 1, n, 0, &m), ZT_OK);
    for (int i = 0; i < n; i++)
        targets[i] = -1;
    for (int c = 0; c < V; c++) {
        targets[n - 1] = c;
        ck_assert_int_eq(model_forward(m, &h, seq, targets), ZT_OK);
        ck_assert_int_eq(m->n_counted, 1);
        lp[c] = -m->loss_sum;
    }
    model_destroy(m);
    free(targets);
}

static void log_softmax(const float *logits, int V, double *lp)
{
    double max = -INFINITY, sum = 0;
    for (int c = 0; c < V; c++)
        max = fmax(max, logits[c]);
    for (int c = 0; c < V; c++)
        sum += exp(logits[c] - max);
    for (int c = 0; c < V; c++)
        lp[c] = logits[c] - max - log(sum);
}

static int argmax_d(const double *x, int V, double *gap)
{
    int best = 0, second = -1;
    for (int c = 1; c < V; c++)
        if (x[c] > x[best])
            best = c;
    for (int c = 0; c < V; c++)
        if (c != best && (second < 0 || x[c] > x[second]))
            second = c;
    *gap = x[best] - x[second];
    return best;
}

/* Greedy decoding with the cache, step by step against the training
 * forward on the sequence so far and against a fresh prefill of it. */
static void check_greedy_decode(const struct zt_kvlist *shape)
{
    struct fixture fx;
    struct infer_model *cached, *fresh;
    fixture_open(&fx, shape);
    ck_assert_int_eq(infer_open(&fx.t, fx.params, ops_cpu_backend(), NULL, &cached), ZT_OK);
    ck_assert_int_eq(infer_open(&fx.t, fx.params, ops_cpu_backend(), NULL, &fresh), ZT_OK);
    const int V = infer_vocab_size(cached), P = infer_max_positions(cached), n_prompt = 4;
    int32_t seq[64] = {3, 17, 5, 9};
    float *logits = malloc((size_t)V * sizeof *logits), *again = malloc((size_t)V * sizeof *again);
    double *lp = malloc((size_t)V * sizeof *lp), *ref = malloc((size_t)V * sizeof *ref);
    ck_assert_int_le(P, 64);
    ck_assert_int_eq(infer_step(cached, seq, n_prompt, logits), ZT_OK);
    for (int n = n_prompt; n < P; n++) {
        log_softmax(logits, V, lp);
        training_logprobs(&fx, seq, n, V, ref);
        double gap, gap_ref, err = 0;
        const int tok = argmax_d(lp, V, &gap), tok_ref = argmax_d(ref, V, &gap_ref);
        for (int c = 0; c < V; c++)
            err = fmax(err, fabs(lp[c] - ref[c]));
        ck_assert_msg(err < 1e-4, "%s: position %d: log-probabilities differ by %g",
                      fx.t.family->name, n, err);
        /* the same token, unless the two best are too close to tell apart */
        ck_assert_msg(tok == tok_ref || gap_ref < 1e-4, "%s: position %d: token %d, want %d",
                      fx.t.family->name, n, tok, tok_ref);
        ck_assert_msg(gap_ref > 1e-3 || n > n_prompt, "%s: the test's logits are too flat",
                      fx.t.family->name);
        infer_reset(fresh);
        ck_assert_int_eq(infer_step(fresh, seq, n, again), ZT_OK);
        for (int c = 0; c < V; c++)
            ck_assert_msg(fabsf(again[c] - logits[c]) <= 1e-4f * fmaxf(1.0f, fabsf(again[c])),
                          "%s: position %d: cached logit %d %g, refilled %g", fx.t.family->name, n,
                          c, logits[c], again[c]);
        seq[n] = tok_ref;
        ck_assert_int_eq(infer_step(cached, &seq[n], 1, logits), ZT_OK);
    }
    /* the cache is full: one more position is refused, nothing run */
    ck_assert_int_eq(infer_position(cached), P);
    ck_assert_int_eq(infer_step(cached, seq, 1, logits), ZT_ERR_USAGE);
    ck_assert_int_eq(infer_position(cached), P);
    infer_close(cached);
    infer_close(fresh);
    free(logits), free(again), free(lp), free(ref);
    fixture_close(&fx);
}

START_TEST(gpt2_cached_decode_matches_full_forward)
{
    struct zt_kvlist shape;
    const struct gpt2_config c = {
        .vocab_size = 40, .block_size = 16, .n_layer = 2, .n_head = 4, .n_embd = 32};
    gpt2_describe(&c, &shape);
    check_greedy_decode(&shape);
}
END_TEST

START_TEST(llama_cached_decode_matches_full_forward)
{
    struct zt_kvlist shape;
    const struct llama_config c = {.vocab_size = 40,
                                   .block_size = 16,
                                   .n_layer = 2,
                                   .n_head = 4,
                                   .n_kv_head = 2,
                                   .n_embd = 32,
                                   .intermediate_size = 48,
                                   .tie_word_embeddings = _i & 1,
                                   .attention_bias = _i >> 1,
                                   .rope_theta = 500.0,
                                   .rms_norm_eps = 1e-5};
    llama_describe(&c, &shape);
    check_greedy_decode(&shape);
}
END_TEST

START_TEST(sampling_filters_and_draws)
{
    const float logits[5] = {0.0f, 2.0f, 1.0f, 2.0f, -1.0f};
    int32_t order[5];
    const struct sampling greedy = {0, 0, 1}, top1 = {1.0, 1, 1}, nucleus = {1.0, 0, 1e-6};
    /* ties go to the lowest id */
    ck_assert_int_eq(sampling_pick(&greedy, logits, 5, 1, 0, order), 1);
    for (uint64_t i = 0; i < 50; i++) {
        ck_assert_int_eq(sampling_pick(&top1, logits, 5, 1, i, order), 1);
        ck_assert_int_eq(sampling_pick(&nucleus, logits, 5, 1, i, order), 1);
    }
    /* softmax at temperature 1 over {0, log 3}: 1/4 and 3/4; top_k 2 of
     * the five leaves ids 1 and 3 at 1/2 each */
    const float two[2] = {0.0f, (float)log(3.0)};
    const struct sampling warm = {1.0, 0, 1}, top2 = {1.0, 2, 1};
    int ones = 0, threes = 0, n = 20000;
    for (int i = 0; i < n; i++) {
        ones += sampling_pick(&warm, two, 2, 9, (uint64_t)i, order) == 1;
        const int32_t t = sampling_pick(&top2, logits, 5, 9, (uint64_t)i, order);
        ck_assert(t == 1 || t == 3);
        threes += t == 3;
        ck_assert_int_eq(sampling_pick(&warm, logits, 5, 4, (uint64_t)i, order),
                         sampling_pick(&warm, logits, 5, 4, (uint64_t)i, order));
    }
    ck_assert_msg(fabs(ones / (double)n - 0.75) < 0.02, "%d of %d", ones, n);
    ck_assert_msg(fabs(threes / (double)n - 0.5) < 0.02, "%d of %d", threes, n);
}
END_TEST

static Suite *infer_suite(void)
{
    Suite *s = suite_create("infer");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, cached_attention_matches_double_loop);
    tcase_add_test(tc, gpt2_cached_decode_matches_full_forward);
    /* tied and untied heads, without and with q, k, v biases (Qwen2) */
    tcase_add_loop_test(tc, llama_cached_decode_matches_full_forward, 0, 4);
    tcase_add_test(tc, sampling_filters_and_draws);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return testutil_run_suite(infer_suite(), 0);
}
