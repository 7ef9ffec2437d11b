/* tests/test_hf_gpt2.c — Hugging Face GPT-2 import and export.
 *
 * The expected names, shapes and layouts are written out here from the
 * Hugging Face state dict (ref_specs), not taken from the module, and
 * files for the import cases are built byte by byte by a small writer of
 * this file's own: a mapping that agreed with itself on a wrong layout
 * would still fail. Exports are read back with the plain safetensors
 * reader to check the names, shapes and Conv1D transposition in the file,
 * then with the module's reader over random ranges. The committed file
 * tests/data/hf_gpt2_micro.safetensors comes from the standard-library
 * Python writer scripts/reference/write_hf_gpt2.py; its every element is
 * recomputed here from the formula the script documents.
 */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/half.h"
#include "../formats/hf_gpt2.h"
#include "../formats/hf_weights.h"
#include "../formats/safetensors.h"
#include "../formats/safetensors_set.h"
#include "../worker/model.h"
#include "hfutil.h"
#include "testutil.h"

#define PY_FILE   "tests/data/hf_gpt2_micro.safetensors"
#define MAX_SPECS 64

/* The configuration of the committed file. */
static const struct gpt2_config micro = {256, 32, 2, 2, 32};

/* ---- the reference layout ---- */

struct spec {
    char name[96];
    const char *dtype; /* "F32" or "I32" */
    int ndim;
    uint64_t shape[4];
    int transposed; /* a Conv1D weight: [in, out] */
};

static void set_spec(struct spec *s, const char *name, int ndim, uint64_t d0, uint64_t d1,
                     int transposed)
{
    snprintf(s->name, sizeof s->name, "%s", name);
    s->dtype = "F32";
    s->ndim = ndim;
    s->shape[0] = d0;
    s->shape[1] = d1;
    s->transposed = transposed;
}

/* Hugging Face GPT2Model's parameters for cfg, in zerotrain's flat order. */
static int ref_specs(const struct gpt2_config *cfg, struct spec *out)
{
    static const struct {
        const char *suffix;
        int ndim, mul0, mul1, transposed;
    } block[] = {
        {"ln_1.weight", 1, 1, 0, 0},        {"ln_1.bias", 1, 1, 0, 0},
        {"attn.c_attn.weight", 2, 1, 3, 1}, {"attn.c_attn.bias", 1, 3, 0, 0},
        {"attn.c_proj.weight", 2, 1, 1, 1}, {"attn.c_proj.bias", 1, 1, 0, 0},
        {"ln_2.weight", 1, 1, 0, 0},        {"ln_2.bias", 1, 1, 0, 0},
        {"mlp.c_fc.weight", 2, 1, 4, 1},    {"mlp.c_fc.bias", 1, 4, 0, 0},
        {"mlp.c_proj.weight", 2, 4, 1, 1},  {"mlp.c_proj.bias", 1, 1, 0, 0},
    };
    const uint64_t C = (uint64_t)cfg->n_embd;
    int n = 0;
    set_spec(&out[n++], "wte.weight", 2, (uint64_t)cfg->vocab_size, C, 0);
    set_spec(&out[n++], "wpe.weight", 2, (uint64_t)cfg->block_size, C, 0);
    for (int l = 0; l < cfg->n_layer; l++)
        for (size_t i = 0; i < sizeof block / sizeof block[0]; i++) {
            char name[96];
            snprintf(name, sizeof name, "h.%d.%s", l, block[i].suffix);
            set_spec(&out[n++], name, block[i].ndim, block[i].mul0 * C, block[i].mul1 * C,
                     block[i].transposed);
        }
    set_spec(&out[n++], "ln_f.weight", 1, C, 0, 0);
    set_spec(&out[n++], "ln_f.bias", 1, C, 0, 0);
    ck_assert_int_le(n, MAX_SPECS);
    return n;
}

/* GPT2LMHeadModel's form of the name. */
static void add_prefix(struct spec *s)
{
    static const char prefix[] = "transformer.";
    size_t len = strlen(s->name), plen = sizeof prefix - 1;
    ck_assert_uint_lt(len + plen, sizeof s->name);
    memmove(s->name + plen, s->name, len + 1);
    memcpy(s->name, prefix, plen);
}

static uint64_t spec_numel(const struct spec *s)
{
    uint64_t n = 1;
    for (int d = 0; d < s->ndim; d++)
        n *= s->shape[d];
    return n;
}

/* The Python script's values: element j of the file layout of tensor k. */
static float formula(int k, uint64_t j)
{
    return (float)(0.02 * sin(1.3 * k + 0.01 * (double)j));
}

/* Element i, in OUR layout, of parameter k of a file holding formula(). */
static float expected_ours(const struct param_table *t, const struct spec *specs, int k, size_t i)
{
    const struct param_tensor *p = &t->tensors[k];
    if (!specs[k].transposed)
        return formula(k, i);
    size_t o = i / (size_t)p->cols, c = i % (size_t)p->cols;
    return formula(k, c * (size_t)p->rows + o);
}

/* ---- a safetensors writer of the test's own ---- */

/* Writes specs[0..n) to path, F32 tensors holding formula(k, j) for k
 * their position in the list, I32 ones 0. */
static void write_specs(const char *path, const struct spec *specs, int n)
{
    size_t cap = 256 + (size_t)n * 256, len = 0;
    char *json = malloc(cap);
    uint64_t off = 0;
    len += (size_t)snprintf(json + len, cap - len, "{");
    for (int k = 0; k < n; k++) {
        const struct spec *s = &specs[k];
        uint64_t bytes = spec_numel(s) * 4;
        len += (size_t)snprintf(json + len, cap - len, "\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                                s->name, s->dtype);
        for (int d = 0; d < s->ndim; d++)
            len += (size_t)snprintf(json + len, cap - len, "%s%llu", d ? "," : "",
                                    (unsigned long long)s->shape[d]);
        len += (size_t)snprintf(json + len, cap - len, "],\"data_offsets\":[%llu,%llu]},",
                                (unsigned long long)off, (unsigned long long)(off + bytes));
        off += bytes;
    }
    len += (size_t)snprintf(json + len, cap - len, "\"__metadata__\":{\"format\":\"pt\"}}");
    ck_assert_uint_lt(len + 8, cap);
    while (len % 8)
        json[len++] = ' ';
    unsigned char *b = malloc(8 + len + off);
    testutil_put_le(b, len, 8);
    memcpy(b + 8, json, len);
    unsigned char *p = b + 8 + len;
    for (int k = 0; k < n; k++) {
        int is_float = strcmp(specs[k].dtype, "F32") == 0;
        for (uint64_t j = 0; j < spec_numel(&specs[k]); j++, p += 4) {
            float v = formula(k, j);
            uint32_t u;
            memcpy(&u, &v, 4);
            testutil_put_le(p, is_float ? u : 0, 4);
        }
    }
    testutil_write_file(path, b, 8 + len + off);
    free(b);
    free(json);
}

/* ---- helpers ---- */

static void build_table(const struct gpt2_config *cfg, struct param_table *t)
{
    ck_assert_int_eq(gpt2_table_build(cfg, t), ZT_OK);
}

static float *init_params(const struct param_table *t, uint64_t seed)
{
    float *p = malloc(t->n_params * sizeof *p);
    ck_assert_ptr_nonnull(p);
    gpt2_init_params(t, seed, 0, t->n_params, p);
    /* LayerNorm and biases start at 1 and 0: make them distinct too. */
    for (size_t i = 0; i < t->n_params; i++)
        p[i] += (float)(1e-3 * sin((double)i));
    return p;
}

static const char *tmp_file(const char *tag)
{
    return testutil_path_in(testutil_tmpdir(tag), "model.safetensors");
}

static int same_bits(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* hf_weights_open must fail with `want` and exactly "PATH: text". */
static void expect_open_error(const char *path, const struct param_table *t, zt_status want,
                              const char *text)
{
    hfutil_expect_open_error(path, t, want, path, text);
}

/* Checks every element of a file of formula() values read through t. */
static void check_formula_file(const char *path, const struct param_table *t)
{
    struct spec specs[MAX_SPECS];
    const struct gpt2_config cfg = gpt2_config_of(t);
    ref_specs(&cfg, specs);
    float *got = hfutil_read_all(path, t);
    for (int k = 0; k < t->n_tensors; k++)
        for (size_t i = 0; i < t->tensors[k].numel; i++)
            ck_assert_msg(same_bits(got[t->tensors[k].offset + i], expected_ours(t, specs, k, i)),
                          "%s element %zu: %.9g", t->tensors[k].name, i,
                          (double)got[t->tensors[k].offset + i]);
    free(got);
}

/* ---- names and export ---- */

START_TEST(test_names)
{
    struct param_table t;
    struct spec specs[MAX_SPECS];
    build_table(&micro, &t);
    int n = ref_specs(&micro, specs);
    ck_assert_int_eq(t.n_tensors, n);
    for (int k = 0; k < n; k++) {
        char name[96];
        int tr = -1;
        hf_gpt2_name(&t, k, name, sizeof name, &tr);
        ck_assert_str_eq(name, specs[k].name);
        ck_assert_int_eq(tr, specs[k].transposed);
        /* Our shape is the reference's, transposed where it is Conv1D. */
        const struct param_tensor *p = &t.tensors[k];
        uint64_t rows = specs[k].transposed ? specs[k].shape[1] : specs[k].shape[0];
        ck_assert_uint_eq((uint64_t)p->rows, rows);
        ck_assert_uint_eq(p->numel, spec_numel(&specs[k]));
    }
    char small[6];
    int tr;
    hf_gpt2_name(&t, 4, small, sizeof small, &tr); /* h.0.attn.c_attn.weight */
    ck_assert_str_eq(small, "h.0.a");
    ck_assert_int_eq(tr, 1);
    param_table_free(&t);
}
END_TEST

/* The exported file, seen through the plain safetensors reader: names,
 * order, shapes, metadata, and each Conv1D weight the transpose of ours. */
START_TEST(test_export_layout)
{
    struct param_table t;
    struct spec specs[MAX_SPECS];
    build_table(&micro, &t);
    int n = ref_specs(&micro, specs);
    float *params = init_params(&t, 11);
    const char *path = tmp_file("hf-layout");
    ck_assert_msg(hf_weights_export(&t, params, ZT_F32, path, 0, NULL) == ZT_OK, "%s",
                  zt_error_message());

    struct safetensors *s = NULL;
    ck_assert_int_eq(safetensors_open(path, &s), ZT_OK);
    ck_assert_int_eq(safetensors_count(s), n);
    ck_assert_str_eq(safetensors_metadata(s, "format"), "pt");
    ck_assert_str_eq(safetensors_metadata(s, "producer"), "zerotrain");
    uint64_t prev_end = 0;
    for (int k = 0; k < n; k++) {
        const struct safetensors_tensor *f = safetensors_tensor_at(s, k);
        ck_assert_str_eq(f->name, specs[k].name);
        ck_assert_int_eq(f->dtype, ZT_F32);
        ck_assert_int_eq(f->ndim, specs[k].ndim);
        for (int d = 0; d < f->ndim; d++)
            ck_assert_uint_eq(f->shape[d], specs[k].shape[d]);
        ck_assert_uint_ge(f->offset, prev_end); /* data in our order */
        prev_end = f->offset + f->nbytes;

        const struct param_tensor *p = &t.tensors[k];
        float *v = malloc(p->numel * sizeof *v);
        ck_assert_int_eq(safetensors_read_f32(s, f, 0, p->numel, v), ZT_OK);
        for (size_t i = 0; i < p->numel; i++) {
            size_t ours = i;
            if (specs[k].transposed) { /* file (c, o) is our (o, c) */
                size_t c = i / (size_t)p->rows, o = i % (size_t)p->rows;
                ours = o * (size_t)p->cols + c;
            }
            ck_assert(same_bits(v[i], params[p->offset + ours]));
        }
        free(v);
    }
    safetensors_close(s);
    free(params);
    param_table_free(&t);
}
END_TEST

START_TEST(test_export_read_back_random_ranges)
{
    struct param_table t;
    build_table(&micro, &t);
    float *params = init_params(&t, 12);
    const char *path = tmp_file("hf-ranges");
    ck_assert_int_eq(hf_weights_export(&t, params, ZT_F32, path, 0, NULL), ZT_OK);
    struct hf_weights_reader *r = NULL;
    ck_assert_int_eq(hf_weights_open(path, &t, &r), ZT_OK);
    float *got = malloc(t.n_params * sizeof *got);
    uint64_t x = 88172645463325252ull;
    for (int trial = 0; trial < 400; trial++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t a = (size_t)(x % (t.n_params + 1));
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        /* Mostly short ranges, which start and end inside tensors. */
        size_t len = (size_t)(x % (trial % 4 == 0 ? t.n_params : 5000));
        size_t b = a + len < t.n_params ? a + len : t.n_params;
        ck_assert_int_eq(hf_weights_read(r, a, b, got), ZT_OK);
        ck_assert_msg(memcmp(got, params + a, (b - a) * sizeof *got) == 0, "range [%zu, %zu)", a,
                      b);
    }
    ck_assert_int_eq(hf_weights_read(r, 0, t.n_params, got), ZT_OK);
    ck_assert(memcmp(got, params, t.n_params * sizeof *got) == 0);
    /* Exactly the span of one transposed tensor, and one element of it. */
    const struct param_tensor *qkv = &t.tensors[4];
    ck_assert_int_eq(hf_weights_read(r, qkv->offset, qkv->offset + qkv->numel, got), ZT_OK);
    ck_assert(memcmp(got, params + qkv->offset, qkv->numel * sizeof *got) == 0);
    ck_assert_int_eq(hf_weights_read(r, qkv->offset + 33, qkv->offset + 34, got), ZT_OK);
    ck_assert(same_bits(got[0], params[qkv->offset + 33]));
    hf_weights_close(r);
    free(got);
    free(params);
    param_table_free(&t);
}
END_TEST

static void check_half_export(enum zt_dtype dtype)
{
    struct param_table t;
    build_table(&micro, &t);
    float *params = init_params(&t, 13);
    const char *path = tmp_file("hf-half");
    ck_assert_int_eq(hf_weights_export(&t, params, dtype, path, 0, NULL), ZT_OK);
    struct safetensors *s = NULL;
    ck_assert_int_eq(safetensors_open(path, &s), ZT_OK);
    for (int i = 0; i < safetensors_count(s); i++)
        ck_assert_int_eq(safetensors_tensor_at(s, i)->dtype, dtype);
    safetensors_close(s);
    float *got = hfutil_read_all(path, &t);
    int inexact = 0;
    for (size_t i = 0; i < t.n_params; i++) {
        float want = dtype == ZT_BF16 ? zt_bf16_to_f32(zt_f32_to_bf16(params[i]))
                                      : zt_f16_to_f32(zt_f32_to_f16(params[i]));
        ck_assert_msg(same_bits(got[i], want), "element %zu: %.9g, expected %.9g", i,
                      (double)got[i], (double)want);
        inexact += got[i] != params[i];
    }
    ck_assert_int_gt(inexact, (int)(t.n_params / 2)); /* it was rounded */
    free(got);
    free(params);
    param_table_free(&t);
}

START_TEST(test_export_bf16)
{
    check_half_export(ZT_BF16);
}
END_TEST

START_TEST(test_export_f16)
{
    check_half_export(ZT_F16);
}
END_TEST

START_TEST(test_export_errors)
{
    struct param_table t;
    build_table(&micro, &t);
    float *params = init_params(&t, 14);
    const char *dir = testutil_tmpdir("hf-export-err");
    const char *path = testutil_path_in(dir, "m.safetensors");
    ck_assert_int_eq(hf_weights_export(&t, params, ZT_F64, path, 0, NULL), ZT_ERR_UNSUPPORTED);
    ck_assert_str_eq(zt_error_message(),
                     testutil_fmt("%s: cannot export GPT-2 as F64: the dtypes are F32, F16 and "
                                  "BF16",
                                  path));
    ck_assert_int_eq(hf_weights_export(&t, params, ZT_I32, path, 0, NULL), ZT_ERR_UNSUPPORTED);
    ck_assert_int_ne(access(path, F_OK), 0);
    const char *nodir = testutil_path_in(dir, "missing/m.safetensors");
    ck_assert_int_eq(hf_weights_export(&t, params, ZT_F32, nodir, 0, NULL), ZT_ERR_IO);
    free(params);
    param_table_free(&t);
}
END_TEST

/* ---- the Python-written file ---- */

START_TEST(test_python_file)
{
    struct param_table t;
    build_table(&micro, &t);
    const char *path = testutil_source_path(PY_FILE);
    /* The file carries the attention buffers, which import must skip. */
    struct safetensors *s = NULL;
    ck_assert_int_eq(safetensors_open(path, &s), ZT_OK);
    ck_assert_int_eq(safetensors_count(s), t.n_tensors + 2 * micro.n_layer);
    ck_assert_ptr_nonnull(safetensors_find(s, "h.1.attn.bias"));
    ck_assert_ptr_nonnull(safetensors_find(s, "h.1.attn.masked_bias"));
    safetensors_close(s);
    check_formula_file(path, &t);
    param_table_free(&t);
}
END_TEST

/* The Python file read in chunks of 1000 elements, which cross tensors
 * and split transposed ones. */
START_TEST(test_python_file_in_chunks)
{
    struct param_table t;
    struct spec specs[MAX_SPECS];
    build_table(&micro, &t);
    ref_specs(&micro, specs);
    struct hf_weights_reader *r = NULL;
    ck_assert_int_eq(hf_weights_open(testutil_source_path(PY_FILE), &t, &r), ZT_OK);
    float buf[1000];
    int k = 0;
    for (size_t a = 0; a < t.n_params; a += 1000) {
        size_t b = a + 1000 < t.n_params ? a + 1000 : t.n_params;
        ck_assert_int_eq(hf_weights_read(r, a, b, buf), ZT_OK);
        for (size_t i = a; i < b; i++) {
            while (i >= t.tensors[k].offset + t.tensors[k].numel)
                k++;
            ck_assert(same_bits(buf[i - a], expected_ours(&t, specs, k, i - t.tensors[k].offset)));
        }
    }
    hf_weights_close(r);
    param_table_free(&t);
}
END_TEST

/* ---- files that contradict the configuration ---- */

START_TEST(test_wrong_vocab)
{
    struct param_table t;
    struct gpt2_config c = micro;
    c.vocab_size = 128;
    build_table(&c, &t);
    expect_open_error(testutil_source_path(PY_FILE), &t, ZT_ERR_CONFIG,
                      "wte.weight has shape [256, 32] but the config says model.vocab_size 128 "
                      "(expected [128, 32])");
    param_table_free(&t);
}
END_TEST

START_TEST(test_wrong_embd)
{
    struct param_table t;
    struct gpt2_config c = micro;
    c.n_embd = 64;
    build_table(&c, &t);
    expect_open_error(testutil_source_path(PY_FILE), &t, ZT_ERR_CONFIG,
                      "wte.weight has shape [256, 32] but the config says model.n_embd 64 "
                      "(expected [256, 64])");
    param_table_free(&t);
}
END_TEST

START_TEST(test_wrong_vocab_and_embd)
{
    struct param_table t;
    struct gpt2_config c = micro;
    c.vocab_size = 50257;
    c.n_embd = 768;
    build_table(&c, &t);
    expect_open_error(testutil_source_path(PY_FILE), &t, ZT_ERR_CONFIG,
                      "wte.weight has shape [256, 32] but the config says model.vocab_size "
                      "50257, model.n_embd 768 (expected [50257, 768])");
    param_table_free(&t);
}
END_TEST

START_TEST(test_wrong_block_size)
{
    struct param_table t;
    struct gpt2_config c = micro;
    c.block_size = 64;
    build_table(&c, &t);
    expect_open_error(testutil_source_path(PY_FILE), &t, ZT_ERR_CONFIG,
                      "wpe.weight has shape [32, 32] but the config says model.block_size 64 "
                      "(expected [64, 32])");
    param_table_free(&t);
}
END_TEST

START_TEST(test_more_layers_in_file)
{
    struct param_table t;
    struct gpt2_config c = micro;
    c.n_layer = 1;
    build_table(&c, &t);
    expect_open_error(testutil_source_path(PY_FILE), &t, ZT_ERR_CONFIG,
                      "tensor h.1.ln_1.weight is not part of the model: the file has 2 layers "
                      "but the config says model.n_layer 1");
    param_table_free(&t);
}
END_TEST

START_TEST(test_fewer_layers_in_file)
{
    struct param_table t;
    struct gpt2_config c = micro;
    c.n_layer = 3;
    build_table(&c, &t);
    expect_open_error(testutil_source_path(PY_FILE), &t, ZT_ERR_CONFIG,
                      "tensor h.2.ln_1.weight is missing: the file has 2 layers but the config "
                      "says model.n_layer 3");
    param_table_free(&t);
}
END_TEST

/* A Conv1D weight stored in nn.Linear layout, as a careless converter
 * would write it. */
START_TEST(test_untransposed_weight)
{
    struct param_table t;
    struct spec specs[MAX_SPECS];
    build_table(&micro, &t);
    int n = ref_specs(&micro, specs);
    specs[10].shape[0] = 128; /* h.0.mlp.c_fc.weight as [4C, C] */
    specs[10].shape[1] = 32;
    const char *path = tmp_file("hf-untransposed");
    write_specs(path, specs, n);
    expect_open_error(path, &t, ZT_ERR_CONFIG,
                      "h.0.mlp.c_fc.weight has shape [128, 32] but the config says model.n_embd "
                      "32 (expected [32, 128])");
    param_table_free(&t);
}
END_TEST

START_TEST(test_vector_as_matrix)
{
    struct param_table t;
    struct spec specs[MAX_SPECS];
    build_table(&micro, &t);
    int n = ref_specs(&micro, specs);
    specs[n - 1].ndim = 2; /* ln_f.bias as [32, 1] */
    specs[n - 1].shape[1] = 1;
    const char *path = tmp_file("hf-rank");
    write_specs(path, specs, n);
    expect_open_error(path, &t, ZT_ERR_CONFIG,
                      "ln_f.bias has shape [32, 1] but the config says model.n_embd 32 (expected "
                      "[32])");
    param_table_free(&t);
}
END_TEST

START_TEST(test_missing_tensor)
{
    struct param_table t;
    struct spec specs[MAX_SPECS];
    build_table(&micro, &t);
    int n = ref_specs(&micro, specs);
    int gone = 2 + 12 + 9; /* h.1.mlp.c_fc.bias */
    ck_assert_str_eq(specs[gone].name, "h.1.mlp.c_fc.bias");
    memmove(&specs[gone], &specs[gone + 1], (size_t)(n - gone - 1) * sizeof specs[0]);
    const char *path = tmp_file("hf-missing");
    write_specs(path, specs, n - 1);
    expect_open_error(path, &t, ZT_ERR_CONFIG,
                      "tensor h.1.mlp.c_fc.bias is missing (expected shape [128])");
    param_table_free(&t);
}
END_TEST

START_TEST(test_extra_tensor)
{
    struct param_table t;
    struct spec specs[MAX_SPECS];
    build_table(&micro, &t);
    int n = ref_specs(&micro, specs);
    const char *path = tmp_file("hf-extra");
    set_spec(&specs[n], "h.0.attn.rotary.weight", 1, 4, 0, 0);
    write_specs(path, specs, n + 1);
    expect_open_error(path, &t, ZT_ERR_CONFIG,
                      "unexpected tensor h.0.attn.rotary.weight: not a parameter of GPT-2");
    set_spec(&specs[n], "score.weight", 2, 2, 32, 0);
    write_specs(path, specs, n + 1);
    expect_open_error(path, &t, ZT_ERR_CONFIG,
                      "unexpected tensor score.weight: not a parameter of GPT-2");
    param_table_free(&t);
}
END_TEST

/* GPT2LMHeadModel's names ("transformer." but a bare lm_head.weight), its
 * tied head and the attention buffers; then the head next to bare names. */
START_TEST(test_prefix_and_ignored_tensors)
{
    struct param_table t;
    struct spec specs[MAX_SPECS];
    build_table(&micro, &t);
    int n = ref_specs(&micro, specs);
    set_spec(&specs[n], "h.0.attn.bias", 4, 1, 1, 0);
    specs[n].shape[2] = specs[n].shape[3] = 32;
    set_spec(&specs[n + 1], "h.1.attn.masked_bias", 0, 0, 0, 0);
    set_spec(&specs[n + 2], "lm_head.weight", 2, 256, 32, 0);
    const char *path = tmp_file("hf-prefix");
    write_specs(path, specs, n + 3);
    check_formula_file(path, &t);

    for (int k = 0; k < n + 2; k++)
        add_prefix(&specs[k]);
    write_specs(path, specs, n + 3);
    check_formula_file(path, &t);
    param_table_free(&t);
}
END_TEST

/* Each tensor is looked up under both forms, so a file may mix them. */
START_TEST(test_mixed_prefixes)
{
    struct param_table t;
    struct spec specs[MAX_SPECS];
    build_table(&micro, &t);
    int n = ref_specs(&micro, specs);
    for (int k = 0; k < n; k += 2)
        add_prefix(&specs[k]);
    const char *path = tmp_file("hf-mixed");
    write_specs(path, specs, n);
    check_formula_file(path, &t);
    param_table_free(&t);
}
END_TEST

START_TEST(test_both_name_forms)
{
    struct param_table t;
    struct spec specs[MAX_SPECS];
    build_table(&micro, &t);
    int n = ref_specs(&micro, specs);
    specs[n] = specs[0];
    snprintf(specs[n].name, sizeof specs[n].name, "transformer.wte.weight");
    const char *path = tmp_file("hf-twice");
    write_specs(path, specs, n + 1);
    expect_open_error(path, &t, ZT_ERR_DATA,
                      "wte.weight is present twice, as wte.weight and as transformer.wte.weight");
    param_table_free(&t);
}
END_TEST

START_TEST(test_integer_tensor)
{
    struct param_table t;
    struct spec specs[MAX_SPECS];
    build_table(&micro, &t);
    int n = ref_specs(&micro, specs);
    specs[2].dtype = "I32"; /* h.0.ln_1.weight */
    const char *path = tmp_file("hf-int");
    write_specs(path, specs, n);
    expect_open_error(path, &t, ZT_ERR_DATA,
                      "h.0.ln_1.weight has dtype I32; GPT-2 weights must be floats");
    param_table_free(&t);
}
END_TEST

START_TEST(test_missing_file)
{
    struct param_table t;
    build_table(&micro, &t);
    const char *path = testutil_path_in(testutil_tmpdir("hf-nofile"), "none.safetensors");
    expect_open_error(path, &t, ZT_ERR_IO, "no such file or directory");
    param_table_free(&t);
}
END_TEST

/* ---- reading ---- */

START_TEST(test_read_range_errors)
{
    struct param_table t;
    build_table(&micro, &t);
    struct hf_weights_reader *r = NULL;
    ck_assert_int_eq(hf_weights_open(testutil_source_path(PY_FILE), &t, &r), ZT_OK);
    float v[4];
    ck_assert_int_eq(hf_weights_read(r, t.n_params, t.n_params, v), ZT_OK);
    ck_assert_int_eq(hf_weights_read(r, 5, 5, v), ZT_OK);
    ck_assert_int_eq(hf_weights_read(r, 5, 4, v), ZT_ERR_USAGE);
    ck_assert_int_eq(hf_weights_read(r, t.n_params - 1, t.n_params + 1, v), ZT_ERR_USAGE);
    ck_assert_str_eq(zt_error_message(),
                     testutil_fmt("%s: cannot read parameters [%zu, %zu) of %zu",
                                  testutil_source_path(PY_FILE), t.n_params - 1, t.n_params + 1,
                                  t.n_params));
    hf_weights_close(r);
    hf_weights_close(NULL);
    param_table_free(&t);
}
END_TEST

/* Overwrites the bytes of file tensor `name` with zeros, in place. */
static void zero_tensor_in_file(const char *path, const char *name)
{
    struct safetensors *s = NULL;
    ck_assert_int_eq(safetensors_open(path, &s), ZT_OK);
    const struct safetensors_tensor *f = safetensors_find(s, name);
    ck_assert_ptr_nonnull(f);
    unsigned char *zeros = calloc(1, f->nbytes);
    int fd = open(path, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, zeros, f->nbytes, (off_t)f->offset), (ssize_t)f->nbytes);
    close(fd);
    free(zeros);
    safetensors_close(s);
}

/* A transposed tensor is read once while consecutive ranges stay in it,
 * and again after another transposed tensor was read: the file is changed
 * underneath between the reads to tell which happened. */
START_TEST(test_transposed_tensor_cached)
{
    struct param_table t;
    build_table(&micro, &t);
    float *params = init_params(&t, 15);
    const char *path = tmp_file("hf-cache");
    ck_assert_int_eq(hf_weights_export(&t, params, ZT_F32, path, 0, NULL), ZT_OK);
    struct hf_weights_reader *r = NULL;
    ck_assert_int_eq(hf_weights_open(path, &t, &r), ZT_OK);
    const struct param_tensor *qkv = &t.tensors[4], *proj = &t.tensors[6];
    size_t half = qkv->numel / 2, a = qkv->offset, b = qkv->offset + qkv->numel;
    float *got = malloc(qkv->numel * sizeof *got);

    ck_assert_int_eq(hf_weights_read(r, a, a + half, got), ZT_OK);
    zero_tensor_in_file(path, "h.0.attn.c_attn.weight");
    ck_assert_int_eq(hf_weights_read(r, a + half, b, got), ZT_OK);
    ck_assert(memcmp(got, params + a + half, (b - a - half) * sizeof *got) == 0);
    ck_assert_int_eq(hf_weights_read(r, 0, 10, got), ZT_OK); /* wte: not transposed */
    ck_assert_int_eq(hf_weights_read(r, a, a + 10, got), ZT_OK);
    ck_assert(memcmp(got, params + a, 10 * sizeof *got) == 0);

    ck_assert_int_eq(hf_weights_read(r, proj->offset, proj->offset + 10, got), ZT_OK);
    ck_assert_int_eq(hf_weights_read(r, a, b, got), ZT_OK);
    for (size_t i = 0; i < qkv->numel; i++)
        ck_assert(got[i] == 0.0f);
    hf_weights_close(r);
    free(got);
    free(params);
    param_table_free(&t);
}
END_TEST

/* A width that is not a multiple of the transposition tile (C = 72, 4C =
 * 288), three heads and a block size unlike the width still round-trip. */
START_TEST(test_round_trip_odd_width)
{
    struct param_table t;
    struct gpt2_config c = {50, 7, 3, 3, 72};
    build_table(&c, &t);
    float *params = init_params(&t, 16);
    const char *path = tmp_file("hf-odd");
    ck_assert_int_eq(hf_weights_export(&t, params, ZT_F32, path, 0, NULL), ZT_OK);
    float *got = hfutil_read_all(path, &t);
    ck_assert(memcmp(got, params, t.n_params * sizeof *got) == 0);
    free(got);
    free(params);
    param_table_free(&t);
}
END_TEST

/* The model cut into shards of at most 40 kB (the micro model is 147 kB,
 * wte 32 kB), read back every way; each Conv1D weight is transposed in
 * whichever shard holds it; written again within the limit, the folder
 * holds the single file only. */
START_TEST(test_sharded_round_trip)
{
    struct param_table t;
    build_table(&micro, &t);
    float *params = init_params(&t, 17);
    int shards = 0;
    const char *dir = hfutil_check_sharded(&t, params, 40000, 4, &shards);
    const char *index = testutil_path_in(dir, "model.safetensors.index.json");
    struct safetensors_set *set = NULL;
    ck_assert_int_eq(safetensors_set_open(index, &set), ZT_OK);
    ck_assert_int_eq(safetensors_set_shard_count(set), shards);
    const struct safetensors_tensor *fc = safetensors_set_find(set, "h.1.mlp.c_fc.weight");
    ck_assert_int_eq(fc->ndim, 2);
    ck_assert_uint_eq(fc->shape[0], 32);
    ck_assert_uint_eq(fc->shape[1], 128);
    safetensors_set_close(set);

    const char *path = testutil_path_in(dir, "model.safetensors");
    ck_assert_int_eq(hf_weights_export(&t, params, ZT_F32, path, 0, &shards), ZT_OK);
    ck_assert_int_eq(shards, 1);
    ck_assert_int_ne(access(index, F_OK), 0);
    float *got = hfutil_read_all(dir, &t);
    ck_assert(memcmp(got, params, t.n_params * sizeof *got) == 0);
    free(got);
    free(params);
    param_table_free(&t);
}
END_TEST

/* A tensor that contradicts the config is named in the shard that holds
 * it; one that is missing, by the index. */
START_TEST(test_sharded_mismatch)
{
    struct param_table t;
    build_table(&micro, &t);
    float *params = init_params(&t, 18);
    int shards = 0;
    const char *dir = hfutil_check_sharded(&t, params, 40000, 4, &shards);
    const char *index = testutil_path_in(dir, "model.safetensors.index.json");
    struct param_table wide;
    struct gpt2_config c = micro;
    c.block_size = 64;
    build_table(&c, &wide);
    hfutil_expect_open_error(index, &wide, ZT_ERR_CONFIG,
                             testutil_fmt("%s/model-00001-of-%05d.safetensors", dir, shards),
                             "wpe.weight has shape [32, 32] but the config says model.block_size "
                             "64 (expected [64, 32])");
    param_table_free(&wide);
    c = micro;
    c.n_layer = 3;
    build_table(&c, &wide);
    hfutil_expect_open_error(dir, &wide, ZT_ERR_CONFIG, index,
                             "tensor h.2.ln_1.weight is missing: the file has 2 layers but the "
                             "config says model.n_layer 3");
    param_table_free(&wide);
    free(params);
    param_table_free(&t);
}
END_TEST

static Suite *hf_gpt2_suite(void)
{
    Suite *s = suite_create("hf_gpt2");
    TCase *e = tcase_create("export");
    tcase_add_test(e, test_names);
    tcase_add_test(e, test_export_layout);
    tcase_add_test(e, test_export_read_back_random_ranges);
    tcase_add_test(e, test_export_bf16);
    tcase_add_test(e, test_export_f16);
    tcase_add_test(e, test_export_errors);
    tcase_add_test(e, test_round_trip_odd_width);
    tcase_add_test(e, test_sharded_round_trip);
    suite_add_tcase(s, e);
    TCase *i = tcase_create("import");
    tcase_add_test(i, test_python_file);
    tcase_add_test(i, test_python_file_in_chunks);
    tcase_add_test(i, test_prefix_and_ignored_tensors);
    tcase_add_test(i, test_mixed_prefixes);
    tcase_add_test(i, test_read_range_errors);
    tcase_add_test(i, test_transposed_tensor_cached);
    suite_add_tcase(s, i);
    TCase *m = tcase_create("mismatch");
    tcase_add_test(m, test_wrong_vocab);
    tcase_add_test(m, test_wrong_embd);
    tcase_add_test(m, test_wrong_vocab_and_embd);
    tcase_add_test(m, test_wrong_block_size);
    tcase_add_test(m, test_more_layers_in_file);
    tcase_add_test(m, test_fewer_layers_in_file);
    tcase_add_test(m, test_untransposed_weight);
    tcase_add_test(m, test_vector_as_matrix);
    tcase_add_test(m, test_missing_tensor);
    tcase_add_test(m, test_extra_tensor);
    tcase_add_test(m, test_both_name_forms);
    tcase_add_test(m, test_integer_tensor);
    tcase_add_test(m, test_missing_file);
    tcase_add_test(m, test_sharded_mismatch);
    suite_add_tcase(s, m);
    return s;
}

int main(void)
{
    return testutil_run_suite(hf_gpt2_suite(), 0);
}
