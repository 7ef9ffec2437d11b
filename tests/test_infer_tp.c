/* tests/test_infer_tp.c — generation's forward on tensor-parallel slices
 * (worker/infer.h with struct infer_tp), run on as many ranks as mpirun
 * starts, each holding its slice.
 *
 * Every rank also runs the whole model (the path tests/test_infer.c checks
 * against the training forward) and decodes greedily with both: at every
 * position the slices' logits equal the whole model's within 1e-5, the
 * chosen tokens are the same, and the row is bit-identical on every rank
 * (so every rank samples the same token without a message). GPT-2 with a
 * vocabulary no rank count divides (padded), Llama with grouped-query
 * heads, tied and untied, with and without q/k/v biases. */
#include <check.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "comm/comm.h"
#include "common/rng.h"
#include "worker/infer.h"
#include "worker/llama.h"
#include "worker/model.h"
#include "worker/ops.h"
#include "worker/tensor_parallel.h"

#define LOGIT_TOL 1e-5

static struct comm *world;

static zt_status world_sum(void *ctx, float *buf, size_t n)
{
    return comm_allreduce(ctx, buf, n, ZT_F32, COMM_OP_SUM);
}

static zt_status world_gather(void *ctx, const float *in, float *out, size_t n)
{
    return comm_allgather(ctx, in, out, n, ZT_F32);
}

/* Whole weights, the same on every rank: the init's values with every
 * bias and norm moved off its start, so that each tensor counts. */
static float *whole_weights(const struct param_table *t)
{
    float *p = malloc(t->n_params * sizeof *p);
    ck_assert(p != NULL);
    param_table_init(t, 7, 0, t->n_params, p);
    for (int k = 0; k < t->n_tensors; k++) {
        const struct param_tensor *pt = &t->tensors[k];
        const size_t n = (size_t)pt->rows * pt->cols;
        for (size_t i = 0; i < n; i++)
            p[pt->offset + i] = pt->cols == 1 ? p[pt->offset + i] + 0.2f * (float)rng_normal(11, i)
                                              : 4.0f * p[pt->offset + i];
    }
    return p;
}

static double max_abs_diff(const float *a, const float *b, int n)
{
    double d = 0;
    for (int i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static int argmax(const float *x, int n, double *gap)
{
    int best = 0, second = -1;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    for (int i = 0; i < n; i++)
        if (i != best && (second < 0 || x[i] > x[second]))
            second = i;
    *gap = (double)x[best] - x[second];
    return best;
}

/* Greedy decoding with the whole model and with this rank's slice. */
static void check_slices(const struct zt_kvlist *shape)
{
    const int T = comm_size(world), rank = comm_rank(world);
    struct param_table whole, slice;
    ck_assert_int_eq(param_table_build(shape, &whole), ZT_OK);
    const int V = param_table_vocab(&whole);
    ck_assert_int_eq(param_table_tp_slice(&whole, T, rank, (V + T - 1) / T * T, &slice), ZT_OK);
    float *params = whole_weights(&whole), *part = malloc(slice.n_params * sizeof *part);
    ck_assert(part != NULL);
    param_table_tp_take(&slice, params, part);
    const struct infer_tp tp = {world, world_sum, world_gather};
    struct infer_model *ref, *sliced;
    ck_assert_int_eq(infer_open(&whole, params, ops_cpu_backend(), NULL, &ref), ZT_OK);
    ck_assert_msg(infer_open(&slice, part, ops_cpu_backend(), &tp, &sliced) == ZT_OK, "%s",
                  zt_error_message());
    ck_assert_int_eq(infer_vocab_size(sliced), V);
    float *want = malloc((size_t)V * sizeof *want), *got = malloc((size_t)V * sizeof *got);
    float *root = malloc((size_t)V * sizeof *root);
    ck_assert(want && got && root);
    int32_t seq[64] = {3, 17, 5, 9, 1};
    const int P = infer_max_positions(ref), n_prompt = 5;
    ck_assert_int_le(P, 64);
    ck_assert_int_eq(infer_step(ref, seq, n_prompt, want), ZT_OK);
    ck_assert_int_eq(infer_step(sliced, seq, n_prompt, got), ZT_OK);
    double worst = 0;
    for (int n = n_prompt; n < P; n++) {
        const double d = max_abs_diff(got, want, V);
        worst = fmax(worst, d);
        ck_assert_msg(d <= LOGIT_TOL, "%s, %d ranks: position %d: logits differ by %g",
                      whole.family->name, T, n, d);
        memcpy(root, got, (size_t)V * sizeof *root);
        ck_assert_int_eq(comm_broadcast(world, root, (size_t)V, ZT_F32, 0), ZT_OK);
        ck_assert_msg(memcmp(root, got, (size_t)V * sizeof *got) == 0,
                      "rank %d: the logits differ from rank 0's", rank);
        double gap, gap_ref;
        const int tok = argmax(got, V, &gap), tok_ref = argmax(want, V, &gap_ref);
        ck_assert_msg(tok == tok_ref || gap_ref < 1e-4, "%s: position %d: token %d, want %d",
                      whole.family->name, n, tok, tok_ref);
        ck_assert_msg(gap_ref > 1e-3 || n > n_prompt, "the test's logits are too flat");
        seq[n] = tok_ref;
        if (n + 1 == P)
            break;
        ck_assert_int_eq(infer_step(ref, &seq[n], 1, want), ZT_OK);
        ck_assert_int_eq(infer_step(sliced, &seq[n], 1, got), ZT_OK);
    }
    if (rank == 0)
        fprintf(stderr, "test_infer_tp: %s at %d ranks: logits within %.3g of the whole model's\n",
                whole.family->name, T, worst);
    infer_close(ref);
    infer_close(sliced);
    free(want), free(got), free(root), free(params), free(part);
    param_table_free(&slice);
    param_table_free(&whole);
}

START_TEST(gpt2_slices_decode_as_the_whole_model)
{
    struct zt_kvlist shape;
    const struct gpt2_config c = {
        .vocab_size = 41, .block_size = 16, .n_layer = 2, .n_head = 4, .n_embd = 32};
    gpt2_describe(&c, &shape);
    check_slices(&shape);
}
END_TEST

/* _i: bit 0 ties the head to the embedding, bit 1 gives q, k, v biases. */
START_TEST(llama_slices_decode_as_the_whole_model)
{
    struct zt_kvlist shape;
    const struct llama_config c = {.vocab_size = 43,
                                   .block_size = 16,
                                   .n_layer = 2,
                                   .n_head = 8,
                                   .n_kv_head = 4,
                                   .n_embd = 32,
                                   .intermediate_size = 48,
                                   .tie_word_embeddings = _i & 1,
                                   .attention_bias = _i >> 1,
                                   .rope_theta = 500.0,
                                   .rms_norm_eps = 1e-5};
    llama_describe(&c, &shape);
    check_slices(&shape);
}
END_TEST

static Suite *infer_tp_suite(void)
{
    Suite *s = suite_create("infer_tp");
    TCase *tc = testutil_tcase(s, "slices", 300);
    tcase_add_test(tc, gpt2_slices_decode_as_the_whole_model);
    tcase_add_loop_test(tc, llama_slices_decode_as_the_whole_model, 0, 4);
    return s;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    struct comm_config cfg = {.backend = "mpi"};
    if (comm_create(&cfg, &world) != ZT_OK) {
        fprintf(stderr, "comm_create: %s\n", zt_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const int rc = testutil_run_suite(infer_tp_suite(), 1);
    comm_destroy(world);
    MPI_Finalize();
    return rc;
}
