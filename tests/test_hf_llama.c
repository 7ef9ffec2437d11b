/* tests/test_hf_llama.c — Hugging Face Llama import and export, one file
 * and sharded.
 *
 * The expected names and shapes are written out here from
 * LlamaForCausalLM's state dict (ref_specs), not taken from the module.
 * The committed checkpoints tests/data/hf_llama_{micro,sharded,tied} come
 * from the standard-library Python writer scripts/reference/write_hf_llama.py
 * and hold the parameters of tests/data/llama_reference{,_tied}.bin, which
 * this suite reads itself: every checkpoint must read back as exactly
 * those floats, the sharded one as the single file does. Files for the
 * other import cases are written by the plain single-file safetensors
 * writer under names the test chooses; exports are read back with the
 * plain readers to check names, shapes and shards, then through the
 * module.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/half.h"
#include "../common/kvlist.h"
#include "../formats/hf_weights.h"
#include "../formats/safetensors.h"
#include "../formats/safetensors_set.h"
#include "../worker/model_family.h"
#include "hfutil.h"
#include "testutil.h"

#define MAX_SPECS 64

struct shape {
    int vocab, block, layers, heads, kv_heads, embd, inter, tied;
    int bias; /* q, k and v biases (Qwen2) */
};

/* The configurations of tests/data/llama_reference.bin, _tied.bin and
 * _qwen2.bin. */
static const struct shape untied = {64, 16, 2, 4, 2, 16, 24, 0, 0};
static const struct shape tied = {64, 16, 2, 4, 1, 16, 40, 1, 0};
static const struct shape qwen2 = {64, 16, 2, 4, 2, 16, 24, 1, 1};

/* ---- the reference layout ---- */

struct spec {
    char name[96]; /* as LlamaForCausalLM's state dict has it */
    int ndim;
    uint64_t shape[2];
};

static void set_spec(struct spec *s, const char *name, int ndim, uint64_t d0, uint64_t d1)
{
    snprintf(s->name, sizeof s->name, "%s", name);
    s->ndim = ndim;
    s->shape[0] = d0;
    s->shape[1] = d1;
}

/* LlamaForCausalLM's parameters for c, in zerotrain's flat order. */
static int ref_specs(const struct shape *c, struct spec *out)
{
    const uint64_t C = (uint64_t)c->embd, hs = C / (uint64_t)c->heads, I = (uint64_t)c->inter;
    const uint64_t q = (uint64_t)c->heads * hs, kv = (uint64_t)c->kv_heads * hs;
    int n = 0;
    set_spec(&out[n++], "model.embed_tokens.weight", 2, (uint64_t)c->vocab, C);
    for (int l = 0; l < c->layers; l++) {
        char p[32];
        snprintf(p, sizeof p, "model.layers.%d.", l);
        set_spec(&out[n++], testutil_fmt("%sinput_layernorm.weight", p), 1, C, 0);
        set_spec(&out[n++], testutil_fmt("%sself_attn.q_proj.weight", p), 2, q, C);
        set_spec(&out[n++], testutil_fmt("%sself_attn.k_proj.weight", p), 2, kv, C);
        set_spec(&out[n++], testutil_fmt("%sself_attn.v_proj.weight", p), 2, kv, C);
        set_spec(&out[n++], testutil_fmt("%sself_attn.o_proj.weight", p), 2, C, q);
        set_spec(&out[n++], testutil_fmt("%spost_attention_layernorm.weight", p), 1, C, 0);
        set_spec(&out[n++], testutil_fmt("%smlp.gate_proj.weight", p), 2, I, C);
        set_spec(&out[n++], testutil_fmt("%smlp.up_proj.weight", p), 2, I, C);
        set_spec(&out[n++], testutil_fmt("%smlp.down_proj.weight", p), 2, C, I);
    }
    set_spec(&out[n++], "model.norm.weight", 1, C, 0);
    if (!c->tied)
        set_spec(&out[n++], "lm_head.weight", 2, (uint64_t)c->vocab, C);
    ck_assert_int_le(n, MAX_SPECS);
    return n;
}

static uint64_t spec_numel(const struct spec *s)
{
    return s->ndim == 1 ? s->shape[0] : s->shape[0] * s->shape[1];
}

/* ---- helpers ---- */

/* The table of a Llama of shape c, built from the shape list as the
 * family describes it. */
static void build_table(const struct shape *c, struct param_table *t)
{
    struct zt_kvlist kv;
    zt_kv_init(&kv, "llama");
    zt_kv_add_int(&kv, "vocab_size", c->vocab);
    zt_kv_add_int(&kv, "block_size", c->block);
    zt_kv_add_int(&kv, "n_layer", c->layers);
    zt_kv_add_int(&kv, "n_head", c->heads);
    zt_kv_add_int(&kv, "n_kv_head", c->kv_heads);
    zt_kv_add_int(&kv, "n_embd", c->embd);
    zt_kv_add_int(&kv, "intermediate_size", c->inter);
    zt_kv_add_int(&kv, "tie_word_embeddings", c->tied);
    zt_kv_add_real(&kv, "rope_theta", 10000.0);
    zt_kv_add_real(&kv, "rms_norm_eps", 1e-5);
    if (c->bias)
        zt_kv_add_int(&kv, "attention_bias", 1);
    ck_assert_msg(param_table_build(&kv, t) == ZT_OK, "%s", zt_error_message());
}

/* The parameters stored in tests/data/<name> (a llama reference file),
 * which must be of shape c. */
static float *reference_params(const char *name, const struct shape *c, size_t n_params)
{
    const char *path = testutil_source_path(testutil_fmt("tests/data/%s", name));
    size_t len;
    unsigned char *b = testutil_read_file(path, &len);
    ck_assert(len > 64 && memcmp(b, "ZTLLAM01", 8) == 0);
    const int32_t want[8] = {c->vocab,    c->block, c->layers, c->heads,
                             c->kv_heads, c->embd,  c->inter,  c->tied};
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq((int32_t)testutil_get_le(b + 8 + 4 * i, 4), want[i]);
    size_t bt = (size_t)testutil_get_le(b + 8 + 32, 4) * (size_t)testutil_get_le(b + 8 + 36, 4);
    ck_assert_uint_eq(testutil_get_le(b + 8 + 48, 4), n_params);
    size_t at = 8 + 40 + 8 + 4 + 2 * bt * 4;
    ck_assert_uint_le(at + n_params * 4, len);
    float *p = malloc(n_params * sizeof *p);
    for (size_t i = 0; i < n_params; i++) {
        uint32_t u = (uint32_t)testutil_get_le(b + at + 4 * i, 4);
        memcpy(&p[i], &u, 4);
    }
    free(b);
    return p;
}

static float *make_params(const struct param_table *t, double phase)
{
    float *p = malloc(t->n_params * sizeof *p);
    for (size_t i = 0; i < t->n_params; i++)
        p[i] = (float)(0.05 * sin(phase + 0.37 * (double)i));
    return p;
}

static void expect_same(const float *got, const float *want, const struct param_table *t)
{
    for (size_t i = 0; i < t->n_params; i++)
        ck_assert_msg(memcmp(&got[i], &want[i], sizeof *got) == 0, "element %zu: %.9g, not %.9g", i,
                      (double)got[i], (double)want[i]);
}

/* Writes specs[0..n) as F32, values from params in our flat order (specs
 * in that order too), then `extra` further tensors of zeros, with the
 * plain single-file writer. */
static void write_specs(const char *path, const struct spec *specs, int n, const float *params,
                        const struct spec *extra, int n_extra)
{
    struct safetensors_writer *w = NULL;
    ck_assert_int_eq(safetensors_writer_open(path, &w), ZT_OK);
    for (int k = 0; k < n; k++)
        ck_assert_int_eq(
            safetensors_writer_add(w, specs[k].name, ZT_F32, specs[k].ndim, specs[k].shape), ZT_OK);
    for (int k = 0; k < n_extra; k++)
        ck_assert_int_eq(
            safetensors_writer_add(w, extra[k].name, ZT_F32, extra[k].ndim, extra[k].shape), ZT_OK);
    ck_assert_int_eq(safetensors_writer_begin_data(w), ZT_OK);
    size_t at = 0;
    for (int k = 0; k < n; k++) {
        ck_assert_int_eq(safetensors_writer_write_f32(w, params + at, spec_numel(&specs[k])),
                         ZT_OK);
        at += spec_numel(&specs[k]);
    }
    for (int k = 0; k < n_extra; k++)
        for (uint64_t i = 0; i < spec_numel(&extra[k]); i++) {
            float zero = 0;
            ck_assert_int_eq(safetensors_writer_write_f32(w, &zero, 1), ZT_OK);
        }
    ck_assert_int_eq(safetensors_writer_finish(w), ZT_OK);
}

/* ---- export ---- */

/* The exported file through the plain reader: LlamaForCausalLM's names
 * and shapes in our order, F32, the metadata; a tied model has no head. */
static void check_export_layout(const struct shape *c)
{
    struct param_table t;
    struct spec specs[MAX_SPECS];
    build_table(c, &t);
    int n = ref_specs(c, specs);
    ck_assert_int_eq(t.n_tensors, n);
    float *params = make_params(&t, 1.0);
    const char *path = testutil_path_in(testutil_tmpdir("llama-layout"), "model.safetensors");
    int shards = 0;
    ck_assert_msg(hf_weights_export(&t, params, ZT_F32, path, 0, &shards) == ZT_OK, "%s",
                  zt_error_message());
    ck_assert_int_eq(shards, 1);
    struct safetensors *s = NULL;
    ck_assert_int_eq(safetensors_open(path, &s), ZT_OK);
    ck_assert_int_eq(safetensors_count(s), n);
    ck_assert_str_eq(safetensors_metadata(s, "format"), "pt");
    ck_assert_int_eq(safetensors_find(s, "lm_head.weight") != NULL, !c->tied);
    for (int k = 0; k < n; k++) {
        const struct safetensors_tensor *f = safetensors_tensor_at(s, k);
        ck_assert_str_eq(f->name, specs[k].name);
        ck_assert_int_eq(f->dtype, ZT_F32);
        ck_assert_int_eq(f->ndim, specs[k].ndim);
        for (int d = 0; d < f->ndim; d++)
            ck_assert_uint_eq(f->shape[d], specs[k].shape[d]);
        const struct param_tensor *p = &t.tensors[k];
        ck_assert_uint_eq(p->numel, spec_numel(&specs[k]));
        float *v = malloc(p->numel * sizeof *v);
        ck_assert_int_eq(safetensors_read_f32(s, f, 0, p->numel, v), ZT_OK);
        ck_assert(memcmp(v, params + p->offset, p->numel * sizeof *v) == 0);
        free(v);
    }
    safetensors_close(s);
    free(params);
    param_table_free(&t);
}

START_TEST(test_export_layout_untied)
{
    check_export_layout(&untied);
}
END_TEST

START_TEST(test_export_layout_tied)
{
    check_export_layout(&tied);
}
END_TEST

/* Export then import gives the same floats, tied and untied, F32 exactly
 * and BF16 as rounded. */
START_TEST(test_round_trips)
{
    const struct shape *shapes[] = {&untied, &tied, &qwen2};
    for (int i = 0; i < 3; i++) {
        struct param_table t;
        build_table(shapes[i], &t);
        float *params = make_params(&t, 2.0 + i);
        const char *path = testutil_path_in(testutil_tmpdir("llama-rt"), "m.safetensors");
        ck_assert_int_eq(hf_weights_export(&t, params, ZT_F32, path, 0, NULL), ZT_OK);
        size_t len;
        unsigned char *file = testutil_read_file(path, &len);
        /* the safetensors header, a JSON text after its 8-byte length */
        const size_t header = (size_t)testutil_get_le(file, 8);
        ck_assert_uint_le(8 + header, len);
        file[8 + header] = '\0';
        const char *bias_name = "\"model.layers.1.self_attn.v_proj.bias\"";
        ck_assert_int_eq(strstr((char *)file + 8, bias_name) != NULL, shapes[i]->bias);
        free(file);
        float *got = hfutil_read_all(path, &t);
        expect_same(got, params, &t);
        free(got);
        ck_assert_int_eq(hf_weights_export(&t, params, ZT_BF16, path, 0, NULL), ZT_OK);
        got = hfutil_read_all(path, &t);
        for (size_t j = 0; j < t.n_params; j++) {
            float want = zt_bf16_to_f32(zt_f32_to_bf16(params[j]));
            ck_assert_msg(memcmp(&got[j], &want, 4) == 0, "element %zu", j);
        }
        free(got);
        free(params);
        param_table_free(&t);
    }
}
END_TEST

/* A small limit cuts the model into shards, read back every way; an
 * untied model's head is in the last one, a tied model has none. */
START_TEST(test_sharded_round_trip)
{
    const struct shape *shapes[] = {&untied, &tied};
    for (int i = 0; i < 2; i++) {
        struct param_table t;
        build_table(shapes[i], &t);
        float *params = make_params(&t, 4.0 + i);
        int shards = 0;
        const char *dir = hfutil_check_sharded(&t, params, 5000, 4, &shards);
        struct safetensors_set *s = NULL;
        ck_assert_int_eq(
            safetensors_set_open(testutil_path_in(dir, "model.safetensors.index.json"), &s), ZT_OK);
        ck_assert_int_eq(safetensors_set_count(s), t.n_tensors);
        const struct safetensors_tensor *head = safetensors_set_find(s, "lm_head.weight");
        ck_assert_int_eq(head != NULL, !shapes[i]->tied);
        if (head)
            ck_assert_str_eq(
                safetensors_set_file_of(s, head),
                testutil_fmt("%s/model-%05d-of-%05d.safetensors", dir, shards, shards));
        safetensors_set_close(s);
        free(params);
        param_table_free(&t);
    }
}
END_TEST

/* ---- the independent writer's files ---- */

/* hf_llama_micro (one file) and hf_llama_sharded (three shards and the
 * index) hold llama_reference.bin's parameters: read as a file, an index
 * or a folder, each gives exactly those floats, and the sharded set read
 * in chunks across its shards agrees with the single file. */
START_TEST(test_reference_checkpoints)
{
    struct param_table t;
    build_table(&untied, &t);
    float *want = reference_params("llama_reference.bin", &untied, t.n_params);
    const char *forms[] = {
        "tests/data/hf_llama_micro/model.safetensors",
        "tests/data/hf_llama_micro",
        "tests/data/hf_llama_sharded/model.safetensors.index.json",
        "tests/data/hf_llama_sharded",
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        float *got = hfutil_read_all(testutil_source_path(forms[i]), &t);
        expect_same(got, want, &t);
        free(got);
    }
    struct hf_weights_reader *one = NULL, *three = NULL;
    ck_assert_int_eq(hf_weights_open(testutil_source_path(forms[1]), &t, &one), ZT_OK);
    ck_assert_int_eq(hf_weights_open(testutil_source_path(forms[3]), &t, &three), ZT_OK);
    float a[700], b[700];
    for (size_t at = 0; at < t.n_params; at += 700) {
        size_t end = at + 700 < t.n_params ? at + 700 : t.n_params;
        ck_assert_int_eq(hf_weights_read(one, at, end, a), ZT_OK);
        ck_assert_int_eq(hf_weights_read(three, at, end, b), ZT_OK);
        ck_assert(memcmp(a, b, (end - at) * sizeof *a) == 0);
    }
    hf_weights_close(one);
    hf_weights_close(three);
    free(want);
    param_table_free(&t);

    build_table(&tied, &t);
    want = reference_params("llama_reference_tied.bin", &tied, t.n_params);
    float *got = hfutil_read_all(testutil_source_path("tests/data/hf_llama_tied"), &t);
    expect_same(got, want, &t);
    free(got);
    free(want);
    param_table_free(&t);
}
END_TEST

/* What Llama files carry besides the parameters: the rotary buffers of
 * older transformers, and in a tied model the head it ties; LlamaModel's
 * unprefixed names read too. */
START_TEST(test_buffers_tied_head_and_bare_names)
{
    struct param_table t;
    struct spec specs[MAX_SPECS], extra[4];
    build_table(&tied, &t);
    int n = ref_specs(&tied, specs);
    float *params = make_params(&t, 6.0);
    set_spec(&extra[0], "model.layers.0.self_attn.rotary_emb.inv_freq", 1, 2, 0);
    set_spec(&extra[1], "model.layers.1.self_attn.rotary_emb.inv_freq", 1, 2, 0);
    set_spec(&extra[2], "lm_head.weight", 2, 64, 16);
    const char *path = testutil_path_in(testutil_tmpdir("llama-extra"), "m.safetensors");
    write_specs(path, specs, n, params, extra, 3);
    float *got = hfutil_read_all(path, &t);
    expect_same(got, params, &t);
    free(got);

    for (int k = 0; k < n; k++)
        memmove(specs[k].name, specs[k].name + 6, strlen(specs[k].name + 6) + 1);
    extra[0] = extra[1];
    memmove(extra[0].name, extra[0].name + 6, strlen(extra[0].name + 6) + 1);
    write_specs(path, specs, n, params, extra, 1);
    got = hfutil_read_all(path, &t);
    expect_same(got, params, &t);
    free(got);
    free(params);
    param_table_free(&t);
}
END_TEST

/* ---- files that contradict the configuration ---- */

START_TEST(test_untied_model_without_head)
{
    struct param_table t;
    struct shape c = untied;
    c.kv_heads = tied.kv_heads;
    c.inter = tied.inter;
    build_table(&c, &t);
    const char *path = testutil_source_path("tests/data/hf_llama_tied/model.safetensors");
    hfutil_expect_open_error(path, &t, ZT_ERR_CONFIG, path,
                             "tensor lm_head.weight is missing but the config says "
                             "model.tie_word_embeddings 0 (expected shape [64, 16])");
    param_table_free(&t);
}
END_TEST

START_TEST(test_wrong_kv_heads)
{
    struct param_table t;
    struct shape c = untied;
    c.kv_heads = 1;
    build_table(&c, &t);
    const char *path = testutil_source_path("tests/data/hf_llama_micro");
    const char *file = testutil_source_path("tests/data/hf_llama_micro/model.safetensors");
    hfutil_expect_open_error(
        path, &t, ZT_ERR_CONFIG, file,
        "model.layers.0.self_attn.k_proj.weight has shape [8, 16] but the config "
        "says model.n_kv_head 1 (expected [4, 16])");
    /* in a sharded set, the shard holding the tensor is named */
    path = testutil_source_path("tests/data/hf_llama_sharded");
    file = testutil_source_path("tests/data/hf_llama_sharded/model-00001-of-00003.safetensors");
    hfutil_expect_open_error(
        path, &t, ZT_ERR_CONFIG, file,
        "model.layers.0.self_attn.k_proj.weight has shape [8, 16] but the config "
        "says model.n_kv_head 1 (expected [4, 16])");
    param_table_free(&t);
}
END_TEST

START_TEST(test_wrong_layer_count)
{
    struct param_table t;
    struct shape c = untied;
    c.layers = 3;
    build_table(&c, &t);
    const char *index =
        testutil_source_path("tests/data/hf_llama_sharded/model.safetensors.index.json");
    hfutil_expect_open_error(
        testutil_source_path("tests/data/hf_llama_sharded"), &t, ZT_ERR_CONFIG, index,
        "tensor model.layers.2.input_layernorm.weight is missing: the file has 2 "
        "layers but the config says model.n_layer 3");
    param_table_free(&t);
    c.layers = 1;
    build_table(&c, &t);
    const char *file = testutil_source_path("tests/data/hf_llama_micro/model.safetensors");
    hfutil_expect_open_error(
        file, &t, ZT_ERR_CONFIG, file,
        "tensor model.layers.1.input_layernorm.weight is not part of the model: the "
        "file has 2 layers but the config says model.n_layer 1");
    param_table_free(&t);
}
END_TEST

START_TEST(test_wrong_widths)
{
    const char *file = testutil_source_path("tests/data/hf_llama_micro/model.safetensors");
    static const struct {
        struct shape c;
        const char *text;
    } cases[] = {
        {{32, 16, 2, 4, 2, 16, 24, 0, 0},
         "model.embed_tokens.weight has shape [64, 16] but the config says model.vocab_size 32 "
         "(expected [32, 16])"},
        {{64, 16, 2, 4, 2, 16, 32, 0, 0},
         "model.layers.0.mlp.gate_proj.weight has shape [24, 16] but the config says "
         "model.intermediate_size 32 (expected [32, 16])"},
        {{64, 16, 2, 4, 2, 32, 24, 0, 0},
         "model.embed_tokens.weight has shape [64, 16] but the config says model.n_embd 32 "
         "(expected [64, 32])"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct param_table t;
        build_table(&cases[i].c, &t);
        hfutil_expect_open_error(file, &t, ZT_ERR_CONFIG, file, cases[i].text);
        param_table_free(&t);
    }
}
END_TEST

START_TEST(test_bad_tensors)
{
    struct param_table t;
    struct spec specs[MAX_SPECS], extra[1];
    build_table(&untied, &t);
    int n = ref_specs(&untied, specs);
    float *params = make_params(&t, 7.0);
    const char *path = testutil_path_in(testutil_tmpdir("llama-bad"), "m.safetensors");

    /* a bias, which Llama has none of */
    set_spec(&extra[0], "model.layers.0.mlp.gate_proj.bias", 1, 24, 0);
    write_specs(path, specs, n, params, extra, 1);
    hfutil_expect_open_error(
        path, &t, ZT_ERR_CONFIG, path,
        "unexpected tensor model.layers.0.mlp.gate_proj.bias: not a parameter of "
        "Llama");

    extra[0] = specs[1];
    memmove(extra[0].name, extra[0].name + 6, strlen(extra[0].name + 6) + 1);
    write_specs(path, specs, n, params, extra, 1);
    hfutil_expect_open_error(path, &t, ZT_ERR_DATA, path,
                             "layers.0.input_layernorm.weight is present twice, as "
                             "layers.0.input_layernorm.weight and as "
                             "model.layers.0.input_layernorm.weight");
    free(params);
    param_table_free(&t);
}
END_TEST

static Suite *hf_llama_suite(void)
{
    Suite *s = suite_create("hf_llama");
    TCase *e = testutil_tcase(s, "export", 60);
    tcase_add_test(e, test_export_layout_untied);
    tcase_add_test(e, test_export_layout_tied);
    tcase_add_test(e, test_round_trips);
    tcase_add_test(e, test_sharded_round_trip);
    TCase *i = testutil_tcase(s, "import", 60);
    tcase_add_test(i, test_reference_checkpoints);
    tcase_add_test(i, test_buffers_tied_head_and_bare_names);
    TCase *m = testutil_tcase(s, "mismatch", 60);
    tcase_add_test(m, test_untied_model_without_head);
    tcase_add_test(m, test_wrong_kv_heads);
    tcase_add_test(m, test_wrong_layer_count);
    tcase_add_test(m, test_wrong_widths);
    tcase_add_test(m, test_bad_tensors);
    return s;
}

int main(void)
{
    return testutil_run_suite(hf_llama_suite(), 0);
}
