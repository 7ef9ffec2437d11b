/* tests/test_tensor_parallel.c — the tensor-parallel slice of a parameter
 * table (worker/tensor_parallel.h), for both families at T = 1, 2 and 4:
 * every slice element maps to one element of the same whole tensor, the
 * slices of a cut tensor cover it exactly once (a replicated one is whole
 * on every rank), the slices' sizes are 1/T of the cut tensors, the
 * query-key-value weight is cut in whole heads of each of its three parts
 * (checked element by element against a naive formula), a slice
 * initialises to the whole model's values, and sizes that do not divide
 * are refused naming the tensor. LoRA adapters are cut as their base
 * layers, and each tensor's runs in its own index space (what whole-tensor
 * optimizers index by) are the flat space's runs. A padded vocabulary's
 * slices hold every true row once and zero padding. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../worker/llama.h"
#include "../worker/lora.h"
#include "../worker/model.h"
#include "../worker/tensor_parallel.h"
#include "testutil.h"

static struct param_table gpt2_of(int vocab)
{
    const struct gpt2_config c = {
        .vocab_size = vocab, .block_size = 8, .n_layer = 2, .n_head = 4, .n_embd = 16};
    struct param_table t;
    ck_assert_int_eq(gpt2_table_build(&c, &t), ZT_OK);
    return t;
}

static struct param_table gpt2_whole(void)
{
    return gpt2_of(64);
}

static struct param_table llama_of(int vocab, int tied, int bias)
{
    const struct llama_config c = {.vocab_size = vocab,
                                   .block_size = 8,
                                   .n_layer = 2,
                                   .n_head = 8,
                                   .n_kv_head = 4,
                                   .n_embd = 32,
                                   .intermediate_size = 24,
                                   .tie_word_embeddings = tied,
                                   .rope_theta = 10000.0,
                                   .rms_norm_eps = 1e-5,
                                   .attention_bias = bias};
    struct zt_kvlist shape;
    struct param_table t;
    llama_describe(&c, &shape);
    ck_assert_int_eq(param_table_build(&shape, &t), ZT_OK);
    return t;
}

static struct param_table llama_whole(int tied, int bias)
{
    return llama_of(64, tied, bias);
}

/* The slice element each whole element was reached from (-1: none), and
 * how many times, over all ranks of one T. */
struct coverage {
    const struct param_table *slice;
    int *hits;
    size_t base; /* the slice range's first element */
};

static void mark(void *arg, size_t whole_begin, size_t n, size_t at)
{
    struct coverage *c = arg;
    const struct param_table *s = c->slice, *w = s->whole;
    for (size_t i = 0; i < n; i++) {
        int ks, kw;
        size_t lo, hi;
        param_table_piece(s, c->base + at + i, c->base + at + i + 1, &ks, &lo, &hi);
        param_table_piece(w, whole_begin + i, whole_begin + i + 1, &kw, &lo, &hi);
        ck_assert_msg(ks == kw, "slice element %zu of %s lands in %s", c->base + at + i,
                      s->tensors[ks].name, w->tensors[kw].name);
        c->hits[whole_begin + i]++;
    }
}

/* With vocab_padded (0: none) the vocabulary tensors' slices are
 * vocab_padded / T rows, and their padding is reached from nowhere. */
static void check_slices(const struct param_table *whole, int T, int vocab_padded)
{
    int *hits = calloc(whole->n_params, sizeof *hits);
    for (int r = 0; r < T; r++) {
        struct param_table s;
        ck_assert_int_eq(param_table_tp_slice(whole, T, r, vocab_padded, &s), ZT_OK);
        ck_assert_int_eq(param_table_tp_size(&s), T);
        ck_assert_int_eq(s.n_tensors, whole->n_tensors);
        ck_assert_int_eq(s.n_units, whole->n_units);
        ck_assert_int_eq(param_table_vocab(&s), whole->tensors[0].rows);
        ck_assert_int_eq(param_table_vocab_padded(&s),
                         vocab_padded ? vocab_padded : whole->tensors[0].rows);
        for (int k = 0; k < s.n_tensors; k++) {
            const struct param_tensor *a = &s.tensors[k], *b = &whole->tensors[k];
            if (vocab_padded && b->tp_vocab)
                ck_assert_int_eq(a->rows * T, vocab_padded);
            else
                ck_assert_uint_eq(a->numel * (a->tp_split ? (size_t)T : 1), b->numel);
            ck_assert_int_eq(a->unit, b->unit);
        }
        /* walked in uneven ranges, so that runs start mid-row */
        struct coverage c = {&s, hits, 0};
        for (size_t b = 0; b < s.n_params; b += 7) {
            const size_t e = b + 7 < s.n_params ? b + 7 : s.n_params;
            c.base = b;
            param_table_tp_runs(&s, b, e, mark, &c);
        }
        param_table_free(&s);
    }
    for (int k = 0; k < whole->n_tensors; k++) {
        const struct param_tensor *pt = &whole->tensors[k];
        for (size_t i = 0; i < pt->numel; i++)
            ck_assert_msg(hits[pt->offset + i] == (pt->tp_split ? 1 : T),
                          "T=%d: %s element %zu reached %d times", T, pt->name, i,
                          hits[pt->offset + i]);
    }
    free(hits);
}

START_TEST(slices_cover_every_tensor_once)
{
    /* the last with Qwen2's q, k and v biases, cut as their projections */
    struct param_table tables[4] = {gpt2_whole(), llama_whole(0, 0), llama_whole(1, 0),
                                    llama_whole(1, 1)};
    for (int i = 0; i < 4; i++) {
        for (int T = 1; T <= 4; T *= 2)
            check_slices(&tables[i], T, 0);
        param_table_free(&tables[i]);
    }
}
END_TEST

/* A vocabulary of 61 padded for T ranks (tp_vocab_padded): to 64 and 65
 * at T = 1, 70 at T = 2, 64, 80 and 100 at T = 4 (the last leaves rank 3
 * nothing but padding). The embedding and an untied head keep every true
 * row exactly once; a slice initialises its real rows to the whole
 * model's values and its padding to zero. */
static const int PADDINGS[][3] = {{1, 32, 64}, {1, 5, 65}, {2, 5, 70},
                                  {4, 16, 64}, {4, 5, 80}, {4, 25, 100}}; /* T, multiple, padded */

START_TEST(padded_vocabularies_keep_the_true_rows)
{
    const int T = PADDINGS[_i][0], padded = PADDINGS[_i][2];
    ck_assert_int_eq(tp_vocab_padded(61, PADDINGS[_i][1], T), padded);
    ck_assert_int_eq(tp_vocab_padded(61, 1, T), 61); /* 1: no padding */
    struct param_table tables[2] = {gpt2_of(61), llama_of(61, 0, 0)};
    for (int i = 0; i < 2; i++) {
        struct param_table *w = &tables[i];
        check_slices(w, T, padded);
        float *all = malloc(w->n_params * sizeof *all);
        ck_assert_ptr_nonnull(all);
        param_table_init(w, 11, 0, w->n_params, all);
        for (int r = 0; r < T; r++) {
            struct param_table s;
            ck_assert_int_eq(param_table_tp_slice(w, T, r, padded, &s), ZT_OK);
            float *mine = malloc(s.n_params * sizeof *mine);
            ck_assert_ptr_nonnull(mine);
            param_table_tp_init(&s, 11, 0, s.n_params, mine);
            for (int k = 0; k < s.n_tensors; k++) {
                const struct param_tensor *a = &s.tensors[k], *b = &w->tensors[k];
                if (!b->tp_vocab)
                    continue;
                for (int row = 0; row < a->rows; row++) {
                    const int v = r * a->rows + row; /* the vocabulary row it holds */
                    for (int j = 0; j < a->cols; j++) {
                        const float got = mine[a->offset + (size_t)row * a->cols + j];
                        const float want = v < 61 ? all[b->offset + (size_t)v * b->cols + j] : 0.0f;
                        ck_assert_msg(got == want, "%s, T=%d rank %d: row %d col %d: %g, not %g",
                                      a->name, T, r, row, j, got, want);
                    }
                }
            }
            free(mine);
            param_table_free(&s);
        }
        free(all);
        param_table_free(w);
    }
}
END_TEST

START_TEST(bad_paddings_are_refused)
{
    struct param_table w = gpt2_of(61), s;
    ck_assert_int_eq(param_table_tp_slice(&w, 4, 0, 62, &s), ZT_ERR_CONFIG); /* not a multiple */
    ck_assert_msg(strstr(zt_error_message(), "padded to 62 is not a multiple of "
                                             "tensor_parallel.size 4"),
                  "%s", zt_error_message());
    ck_assert_int_eq(param_table_tp_slice(&w, 2, 0, 60, &s), ZT_ERR_CONFIG); /* below */
    ck_assert_int_eq(param_table_tp_slice(&w, 2, 0, 61, &s), ZT_ERR_CONFIG); /* unpadded: odd */
    ck_assert_msg(strstr(zt_error_message(), "wte.weight"), "%s", zt_error_message());
    param_table_free(&w);
}
END_TEST

/* Gathers a slice's values through its runs. */
struct gather {
    const float *whole;
    float *out;
};

static void copy_run(void *arg, size_t whole_begin, size_t n, size_t at)
{
    struct gather *g = arg;
    memcpy(g->out + at, g->whole + whole_begin, n * sizeof(float));
}

START_TEST(a_slice_initialises_to_the_whole_models_values)
{
    struct param_table tables[3] = {gpt2_whole(), llama_whole(0, 0), llama_whole(0, 1)};
    for (int i = 0; i < 3; i++) {
        const struct param_table *w = &tables[i];
        float *all = malloc(w->n_params * sizeof *all);
        param_table_init(w, 11, 0, w->n_params, all);
        for (int r = 0; r < 2; r++) {
            struct param_table s;
            ck_assert_int_eq(param_table_tp_slice(w, 2, r, 0, &s), ZT_OK);
            float *mine = malloc(s.n_params * sizeof *mine), *want = malloc(s.n_params * 4);
            param_table_tp_init(&s, 11, 0, s.n_params, mine);
            struct gather g = {all, want};
            param_table_tp_runs(&s, 0, s.n_params, copy_run, &g);
            ck_assert_int_eq(memcmp(mine, want, s.n_params * sizeof *mine), 0);
            /* and from the middle of a range */
            param_table_tp_init(&s, 11, 5, s.n_params - 3, mine);
            ck_assert_int_eq(memcmp(mine, want + 5, (s.n_params - 8) * sizeof *mine), 0);
            free(mine);
            free(want);
            param_table_free(&s);
        }
        free(all);
        param_table_free(&tables[i]);
    }
}
END_TEST

/* GPT-2's fused weight [3C, C]: rank r's local row i of part q (q, k or v)
 * is whole row q*C + r*C/T + i; the row-parallel projection's local
 * column j is whole column r*C/T + j. */
START_TEST(qkv_is_cut_in_whole_heads_of_each_part)
{
    struct param_table w = gpt2_whole();
    const int C = 16, T = 2;
    const int kq = 2 + 2, kp = 2 + 4; /* h.0.attn.qkv.weight, h.0.attn.proj.weight */
    ck_assert_str_eq(w.tensors[kq].name, "h.0.attn.qkv.weight");
    ck_assert_str_eq(w.tensors[kp].name, "h.0.attn.proj.weight");
    float *all = malloc(w.n_params * sizeof *all);
    for (size_t i = 0; i < w.n_params; i++)
        all[i] = (float)i;
    for (int r = 0; r < T; r++) {
        struct param_table s;
        ck_assert_int_eq(param_table_tp_slice(&w, T, r, 0, &s), ZT_OK);
        float *mine = malloc(s.n_params * sizeof *mine);
        struct gather g = {all, mine};
        param_table_tp_runs(&s, 0, s.n_params, copy_run, &g);
        const size_t lrows = 3 * C / T;
        ck_assert_int_eq(s.tensors[kq].rows, (int)lrows);
        for (size_t i = 0; i < lrows; i++)
            for (int j = 0; j < C; j++) {
                const size_t q = i / (C / T), row = q * C + (size_t)r * C / T + i % (C / T);
                ck_assert_float_eq(mine[s.tensors[kq].offset + i * C + j],
                                   all[w.tensors[kq].offset + row * C + j]);
            }
        ck_assert_int_eq(s.tensors[kp].cols, C / T);
        for (int i = 0; i < C; i++)
            for (int j = 0; j < C / T; j++)
                ck_assert_float_eq(mine[s.tensors[kp].offset + (size_t)i * C / T + j],
                                   all[w.tensors[kp].offset + (size_t)i * C + r * C / T + j]);
        free(mine);
        param_table_free(&s);
    }
    free(all);
    param_table_free(&w);
}
END_TEST

/* t with r = 4 adapters on every linear layer but the head. */
static void adapt(struct param_table *t)
{
    const char **names = malloc((size_t)t->n_tensors * sizeof *names);
    for (int k = 0; k < t->n_tensors; k++)
        names[k] = t->tensors[k].name;
    const char *const targets[] = {LORA_ALL_LINEAR};
    const struct lora_spec spec = {.r = 4, .alpha = 8, .targets = targets, .n_targets = 1};
    ck_assert_int_eq(lora_attach(t, &spec, names), ZT_OK);
    free(names);
}

/* A column-parallel base's B is cut by rows in its parts and heads and its
 * A is whole; a row-parallel base's A is cut by columns and its B whole;
 * the adapted slices cover the whole table as any slice does. */
START_TEST(adapters_are_cut_as_their_base)
{
    struct param_table tables[2] = {gpt2_whole(), llama_whole(0, 0)};
    for (int i = 0; i < 2; i++) {
        struct param_table *w = &tables[i];
        adapt(w);
        int cut_rows = 0, cut_cols = 0;
        for (int k = 0; k < w->lora.n_base_tensors; k++) {
            const struct param_tensor *p = &w->tensors[k];
            if (p->adapter < 0)
                continue;
            const struct param_tensor *a = &w->tensors[p->adapter], *b = a + 1;
            if (p->tp_split == TP_ROWS) {
                ck_assert_int_eq(a->tp_split, TP_REPLICATED);
                ck_assert_int_eq(b->tp_split, TP_ROWS);
                ck_assert_int_eq(b->tp_parts, p->tp_parts);
                ck_assert_int_eq(b->tp_block, p->tp_block);
                cut_rows++;
            } else {
                ck_assert_int_eq(p->tp_split, TP_COLS);
                ck_assert_int_eq(a->tp_split, TP_COLS);
                ck_assert_int_eq(b->tp_split, TP_REPLICATED);
                cut_cols++;
            }
        }
        ck_assert(cut_rows > 0 && cut_cols > 0);
        check_slices(w, 2, 0);
        struct param_table s;
        ck_assert_int_eq(param_table_tp_slice(w, 2, 1, 0, &s), ZT_OK);
        ck_assert_uint_eq(s.lora.n_base_params, s.unit_offset[s.lora.n_base_units]);
        ck_assert_int_eq(s.lora.unit_adapter[1], w->lora.unit_adapter[1]);
        param_table_free(&s);
        param_table_free(w);
    }
}
END_TEST

static void store_whole(void *arg, size_t whole_begin, size_t n, size_t at)
{
    ck_assert(n == 1 && at == 0);
    *(size_t *)arg = whole_begin;
}

/* Slice element s of tensor k is whole element first + s / run * stride +
 * s % run of it: the same element param_table_tp_runs maps it to. */
static void tensor_runs_agree(const struct param_table *s)
{
    for (int k = 0; k < s->n_tensors; k++) {
        const struct param_tensor *p = &s->tensors[k], *wt = &s->whole->tensors[k];
        size_t first, run, stride;
        param_table_tp_tensor_runs(s, k, &first, &run, &stride);
        for (size_t e = 0; e < p->numel; e++) {
            size_t got = e;
            if (run)
                got = first + e / run * stride + e % run;
            size_t want = 0; /* the one-element run of slice element e */
            param_table_tp_runs(s, p->offset + e, p->offset + e + 1, store_whole, &want);
            ck_assert_msg(got == want - wt->offset, "%s element %zu: %zu, the runs say %zu",
                          p->name, e, got, want - wt->offset);
        }
    }
}

START_TEST(tensor_runs_are_the_flat_runs)
{
    struct param_table tables[3] = {gpt2_whole(), llama_whole(0, 0), llama_whole(0, 1)};
    adapt(&tables[0]);
    for (int i = 0; i < 3; i++) {
        for (int T = 2; T <= 4; T *= 2)
            for (int r = 0; r < T; r++) {
                struct param_table s;
                ck_assert_int_eq(param_table_tp_slice(&tables[i], T, r, 0, &s), ZT_OK);
                tensor_runs_agree(&s);
                param_table_free(&s);
            }
        param_table_free(&tables[i]);
    }
}
END_TEST

START_TEST(sizes_that_do_not_divide_are_refused)
{
    struct param_table w = gpt2_whole(), l = llama_whole(0, 0), s;
    /* 4 heads over 8 ranks: a head would be cut */
    ck_assert_int_eq(param_table_tp_slice(&w, 8, 0, 0, &s), ZT_ERR_CONFIG);
    ck_assert_msg(strstr(zt_error_message(), "tensor_parallel.size 8 does not divide h.0.attn."),
                  "%s", zt_error_message());
    ck_assert_msg(strstr(zt_error_message(), "heads"), "%s", zt_error_message());
    /* 4 key-value heads over 8 ranks (the 8 query heads would divide) */
    ck_assert_int_eq(param_table_tp_slice(&l, 8, 0, 0, &s), ZT_ERR_CONFIG);
    ck_assert_msg(strstr(zt_error_message(), "layers.0.self_attn.k_proj.weight"), "%s",
                  zt_error_message());
    /* a vocabulary of 64 over 3 ranks */
    ck_assert_int_eq(param_table_tp_slice(&w, 3, 0, 0, &s), ZT_ERR_CONFIG);
    ck_assert_msg(strstr(zt_error_message(), "wte.weight"), "%s", zt_error_message());
    param_table_free(&w);
    param_table_free(&l);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tensor_parallel");
    TCase *tc = testutil_tcase(s, "slices", 60);
    tcase_add_test(tc, slices_cover_every_tensor_once);
    tcase_add_test(tc, a_slice_initialises_to_the_whole_models_values);
    tcase_add_test(tc, qkv_is_cut_in_whole_heads_of_each_part);
    tcase_add_test(tc, sizes_that_do_not_divide_are_refused);
    tcase_add_test(tc, adapters_are_cut_as_their_base);
    tcase_add_test(tc, tensor_runs_are_the_flat_runs);
    tcase_add_loop_test(tc, padded_vocabularies_keep_the_true_rows, 0,
                        (int)(sizeof PADDINGS / sizeof PADDINGS[0]));
    tcase_add_test(tc, bad_paddings_are_refused);
    return testutil_run_suite(s, 0);
}
