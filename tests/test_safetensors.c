/* tests/test_safetensors.c — the safetensors reader and writer.
 *
 * The reader is checked against tests/data/reference.safetensors, written
 * by an independent standard-library Python writer: every shape, offset
 * and value is recomputed here from the formula the script documents
 * (sin(k * 100 + i) rounded to the dtype), and raw bytes are read from the
 * file directly, so a reader and writer that agree on a wrong layout still
 * fail. The writer's bytes are checked against bit patterns worked out by
 * hand (round-to-even ties, little-endian floats). Malformed files are made
 * here from header text or by patching the reference copy, and two fault
 * loops (every truncated prefix, every header byte overwritten) must give
 * a clean error naming the file or a file that reads completely.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/half.h"
#include "../formats/safetensors.h"
#include "testutil.h"

#define REF_FILE "tests/data/reference.safetensors"

/* ---- helpers ---- */

static int file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* A file of the given header text followed by data_len bytes of 0x3c
 * (0x3c3c is 1.0586 in F16, 0x3c3c3c3c is 0.0115 in F32). */
static void make_file(const char *path, const char *json, size_t data_len)
{
    size_t n = strlen(json);
    unsigned char *b = malloc(8 + n + data_len + 1);
    testutil_put_le(b, n, 8);
    memcpy(b + 8, json, n);
    memset(b + 8 + n, 0x3c, data_len);
    testutil_write_file(path, b, 8 + n + data_len);
    free(b);
}

static int same_bits(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* safetensors_open must fail with `want` and exactly "PATH: text". */
static void expect_open_error(const char *path, zt_status want, const char *text)
{
    struct safetensors *s = (struct safetensors *)&s; /* must be reset to NULL */
    zt_status got = safetensors_open(path, &s);
    ck_assert_msg(got == want, "status %s, expected %s (message: %s)", zt_status_str(got),
                  zt_status_str(want), zt_error_message());
    ck_assert_ptr_null(s);
    char want_msg[8192];
    snprintf(want_msg, sizeof want_msg, "%s: %s", path, text);
    ck_assert_str_eq(zt_error_message(), want_msg);
}

/* Header text in a file must be rejected with the given message. One
 * folder per test process, the file rewritten each time. */
static void expect_header_error(const char *json, size_t data_len, const char *text)
{
    static char path[4096];
    if (!path[0])
        snprintf(path, sizeof path, "%s",
                 testutil_path_in(testutil_tmpdir("st-bad"), "bad.safetensors"));
    make_file(path, json, data_len);
    expect_open_error(path, ZT_ERR_DATA, text);
}

static struct safetensors *open_ok(const char *path)
{
    struct safetensors *s = NULL;
    zt_status st = safetensors_open(path, &s);
    ck_assert_msg(st == ZT_OK, "open %s: %s", path, zt_error_message());
    ck_assert_ptr_nonnull(s);
    return s;
}

/* A double rounded to float, then to a 16-bit dtype, and read back: what
 * the reader must return (the script exports F16 and BF16 from float32). */
static float rounded(enum zt_dtype t, double d)
{
    float f = (float)d;
    switch (t) {
    case ZT_F16:
        return zt_f16_to_f32(zt_f32_to_f16(f));
    case ZT_BF16:
        return zt_bf16_to_f32(zt_f32_to_bf16(f));
    default:
        return f;
    }
}

/* ---- the reference file: the script's TENSORS, in data order ---- */

static const struct ref_tensor {
    const char *name;
    enum zt_dtype dtype;
    int ndim;
    uint64_t shape[2];
} ref[] = {
    {"wte", ZT_F32, 2, {5, 7}},
    {"h.0.attn.c_attn.bias", ZT_F32, 1, {7}},
    {"h.0.mlp.c_fc.weight", ZT_F16, 2, {6, 4}},
    {"h.0.ln_1.weight", ZT_F16, 1, {9}},
    {"h.0.mlp.c_proj.weight", ZT_BF16, 2, {4, 6}},
    {"ln_f.bias", ZT_BF16, 1, {11}},
    {"scalar", ZT_F32, 0, {0}},
    {"empty", ZT_F16, 2, {3, 0}},
    {"position_ids", ZT_I32, 1, {4}},
    {"uni.\xc3\xa9.\xf0\x9f\x98\x80 \"q\"", ZT_F32, 2, {2, 3}},
    {"wpe", ZT_F64, 1, {3}},
    {"specials", ZT_F16, 1, {9}},
};
#define N_REF        ((int)(sizeof ref / sizeof ref[0]))
#define REF_SPECIALS 11
#define REF_SIZE     1446

/* The F16 values of the script's SPECIALS, as bits: 0, -0, 1, -2.5,
 * 65504, 2^-24, 2^-14 - 2^-24, 1e-8 (rounds to 0), infinity. */
static const uint16_t ref_specials[9] = {0x0000, 0x8000, 0x3c00, 0xc100, 0x7bff,
                                         0x0001, 0x03ff, 0x0000, 0x7c00};

static uint64_t ref_numel(int k)
{
    uint64_t n = 1;
    for (int d = 0; d < ref[k].ndim; d++)
        n *= ref[k].shape[d];
    return n;
}

static float ref_value(int k, uint64_t i)
{
    if (k == REF_SPECIALS)
        return zt_f16_to_f32(ref_specials[i]);
    return rounded(ref[k].dtype, sin((double)(k * 100) + (double)i));
}

/* Header length of the committed file, read from its first bytes. */
static uint64_t ref_data_start(void)
{
    size_t n;
    unsigned char *b = testutil_read_file(testutil_source_path(REF_FILE), &n);
    uint64_t start = 8 + testutil_get_le(b, 8);
    free(b);
    return start;
}

START_TEST(test_reference_shapes_and_offsets)
{
    struct safetensors *s = open_ok(testutil_source_path(REF_FILE));
    ck_assert_int_eq(safetensors_count(s), N_REF);
    uint64_t offset = ref_data_start();
    ck_assert_uint_eq(offset % 8, 0); /* the script pads the header */
    for (int k = 0; k < N_REF; k++) {
        const struct safetensors_tensor *t = safetensors_find(s, ref[k].name);
        ck_assert_msg(t != NULL, "tensor '%s' not found", ref[k].name);
        ck_assert_str_eq(t->name, ref[k].name);
        ck_assert_int_eq(t->dtype, ref[k].dtype);
        ck_assert_int_eq(t->ndim, ref[k].ndim);
        for (int d = 0; d < ref[k].ndim; d++)
            ck_assert_uint_eq(t->shape[d], ref[k].shape[d]);
        uint64_t nbytes = ref_numel(k) * zt_dtype_size(ref[k].dtype);
        ck_assert_uint_eq(t->offset, offset);
        ck_assert_uint_eq(t->nbytes, nbytes);
        ck_assert_uint_eq(safetensors_tensor_numel(t), ref_numel(k));
        offset += nbytes;
    }
    ck_assert_uint_eq(offset, REF_SIZE);
    ck_assert_ptr_null(safetensors_find(s, "wte "));
    ck_assert_ptr_null(safetensors_find(s, ""));
    safetensors_close(s);
}
END_TEST

START_TEST(test_reference_values)
{
    struct safetensors *s = open_ok(testutil_source_path(REF_FILE));
    int checked = 0;
    for (int k = 0; k < N_REF; k++) {
        if (ref[k].dtype == ZT_I32)
            continue;
        const struct safetensors_tensor *t = safetensors_find(s, ref[k].name);
        uint64_t n = ref_numel(k);
        float got[64];
        ck_assert_uint_le(n, 64);
        ck_assert_int_eq(safetensors_read_f32(s, t, 0, n, got), ZT_OK);
        for (uint64_t i = 0; i < n; i++, checked++)
            ck_assert_msg(same_bits(got[i], ref_value(k, i)), "%s[%llu] = %.9g, expected %.9g",
                          ref[k].name, (unsigned long long)i, got[i], ref_value(k, i));
    }
    ck_assert_int_eq(checked, 35 + 7 + 24 + 9 + 24 + 11 + 1 + 0 + 6 + 3 + 9);
    safetensors_close(s);
}
END_TEST

/* Index order is the header's text order, which the script sorted by name
 * (byte order, as Python's sort_keys): not the data order. */
START_TEST(test_reference_index_order)
{
    static const char *const sorted[] = {"empty",
                                         "h.0.attn.c_attn.bias",
                                         "h.0.ln_1.weight",
                                         "h.0.mlp.c_fc.weight",
                                         "h.0.mlp.c_proj.weight",
                                         "ln_f.bias",
                                         "position_ids",
                                         "scalar",
                                         "specials",
                                         "uni.\xc3\xa9.\xf0\x9f\x98\x80 \"q\"",
                                         "wpe",
                                         "wte"};
    struct safetensors *s = open_ok(testutil_source_path(REF_FILE));
    for (int i = 0; i < N_REF; i++) {
        const struct safetensors_tensor *t = safetensors_tensor_at(s, i);
        ck_assert_str_eq(t->name, sorted[i]);
        ck_assert_ptr_eq(safetensors_find(s, sorted[i]), t);
    }
    safetensors_close(s);
}
END_TEST

START_TEST(test_reference_metadata)
{
    struct safetensors *s = open_ok(testutil_source_path(REF_FILE));
    ck_assert_str_eq(safetensors_metadata(s, "format"), "pt");
    ck_assert_str_eq(safetensors_metadata(s, "generator"), "write_safetensors.py");
    ck_assert_str_eq(safetensors_metadata(s, "note"), "tab\there, quote \" and \xc3\xa9");
    ck_assert_ptr_null(safetensors_metadata(s, "missing"));
    ck_assert_ptr_null(safetensors_metadata(s, "__metadata__"));
    ck_assert_ptr_null(safetensors_find(s, "__metadata__"));
    safetensors_close(s);
}
END_TEST

/* Integer tensors open and locate like any other; read_f32 refuses them.
 * Their bytes, read at t->offset straight from the file, are the script's
 * 7 * i - 10: the offset is from the start of the file. */
START_TEST(test_reference_integer_tensor)
{
    const char *path = testutil_source_path(REF_FILE);
    struct safetensors *s = open_ok(path);
    const struct safetensors_tensor *t = safetensors_find(s, "position_ids");
    ck_assert_ptr_nonnull(t);
    float dst[4];
    ck_assert_int_eq(safetensors_read_f32(s, t, 0, 4, dst), ZT_ERR_UNSUPPORTED);
    ck_assert_str_eq(
        zt_error_message(),
        testutil_fmt("%s: tensor 'position_ids' is I32; only F32, F16, BF16 and F64 read as "
                     "floats",
                     path));
    size_t n;
    unsigned char *b = testutil_read_file(path, &n);
    ck_assert_uint_le(t->offset + 16, n);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq((int32_t)(uint32_t)testutil_get_le(b + t->offset + 4 * i, 4), 7 * i - 10);
    free(b);
    safetensors_close(s);
}
END_TEST

/* Every window [first, first + count) of every float tensor equals the
 * matching part of the whole. */
START_TEST(test_partial_reads)
{
    struct safetensors *s = open_ok(testutil_source_path(REF_FILE));
    for (int k = 0; k < N_REF; k++) {
        if (ref[k].dtype == ZT_I32)
            continue;
        const struct safetensors_tensor *t = safetensors_find(s, ref[k].name);
        uint64_t n = ref_numel(k);
        for (uint64_t first = 0; first <= n; first++)
            for (uint64_t count = 0; first + count <= n; count++) {
                float got[64 + 1];
                got[count] = -7.0f; /* must stay untouched */
                ck_assert_int_eq(safetensors_read_f32(s, t, first, count, got), ZT_OK);
                for (uint64_t i = 0; i < count; i++)
                    ck_assert(same_bits(got[i], ref_value(k, first + i)));
                ck_assert(got[count] == -7.0f);
            }
    }
    safetensors_close(s);
}
END_TEST

START_TEST(test_partial_read_out_of_range)
{
    const char *path = testutil_source_path(REF_FILE);
    struct safetensors *s = open_ok(path);
    const struct safetensors_tensor *t = safetensors_find(s, "ln_f.bias");
    float dst[16];
    static const uint64_t bad[][2] = {{0, 12}, {11, 1}, {12, 0}, {5, 7}, {1, UINT64_MAX}};
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(safetensors_read_f32(s, t, bad[i][0], bad[i][1], dst), ZT_ERR_USAGE);
        ck_assert_str_eq(
            zt_error_message(),
            testutil_fmt("%s: tensor 'ln_f.bias': cannot read %llu elements from element "
                         "%llu: it has 11",
                         path, (unsigned long long)bad[i][1], (unsigned long long)bad[i][0]));
    }
    ck_assert_int_eq(safetensors_read_f32(s, t, 11, 0, dst), ZT_OK);
    safetensors_close(s);
}
END_TEST

/* ---- writing ---- */

/* The flat values a round trip writes: a wide spread of magnitudes with
 * ties and edge values (every fifth element) mixed in. */
static float rt_value(uint64_t i)
{
    static const float edges[] = {0.0f,     -0.0f,         1.0f,     1.00390625f, 1.01171875f,
                                  65504.0f, 5.9604645e-8f, -3.0e-5f, 1.0e-30f,    3.0e38f};
    if (i % 5 == 0)
        return edges[(i / 5) % (sizeof edges / sizeof edges[0])];
    return (float)(sin((double)i * 0.37) * pow(10.0, (double)(i % 7) - 3.0));
}

struct rt_tensor {
    const char *name;
    enum zt_dtype dtype;
    int ndim;
    uint64_t shape[2];
};

static const struct rt_tensor rt[] = {
    {"wte", ZT_F32, 2, {3, 5}},     {"h.0.ln_1.weight", ZT_F16, 1, {17}},
    {"h.0.fc", ZT_BF16, 2, {4, 4}}, {"lnf.bias", ZT_F64, 1, {2}},
    {"step", ZT_F32, 0, {0}},       {"nothing", ZT_BF16, 2, {0, 7}},
    {"tail", ZT_F16, 2, {2, 3}},
};
#define N_RT ((int)(sizeof rt / sizeof rt[0]))

static uint64_t rt_numel(int k)
{
    uint64_t n = 1;
    for (int d = 0; d < rt[k].ndim; d++)
        n *= rt[k].shape[d];
    return n;
}

/* Declares rt[] on a fresh writer for path, with two metadata entries. */
static struct safetensors_writer *rt_writer(const char *path)
{
    struct safetensors_writer *w = NULL;
    ck_assert_int_eq(safetensors_writer_open(path, &w), ZT_OK);
    for (int k = 0; k < N_RT; k++)
        ck_assert_int_eq(
            safetensors_writer_add(w, rt[k].name, rt[k].dtype, rt[k].ndim, rt[k].shape), ZT_OK);
    ck_assert_int_eq(safetensors_writer_set_metadata(w, "format", "pt"), ZT_OK);
    ck_assert_int_eq(safetensors_writer_set_metadata(w, "odd \"key\"\n", "a\\b\x01\xc3\xa9"),
                     ZT_OK);
    return w;
}

/* Writes all of rt[]'s values in pieces of `piece` elements, so that
 * pieces straddle tensor boundaries. */
static void rt_write_all(struct safetensors_writer *w, uint64_t piece)
{
    uint64_t total = 0;
    for (int k = 0; k < N_RT; k++)
        total += rt_numel(k);
    float buf[64];
    ck_assert_int_eq(safetensors_writer_begin_data(w), ZT_OK);
    for (uint64_t i = 0; i < total; i += piece) {
        uint64_t m = total - i < piece ? total - i : piece;
        for (uint64_t j = 0; j < m; j++)
            buf[j] = rt_value(i + j);
        ck_assert_int_eq(safetensors_writer_write_f32(w, buf, m), ZT_OK);
    }
}

START_TEST(test_roundtrip_values)
{
    static const uint64_t pieces[] = {1, 7, 64};
    for (int p = 0; p < 3; p++) {
        const char *path = testutil_path_in(testutil_tmpdir("st-rt"), "rt.safetensors");
        struct safetensors_writer *w = rt_writer(path);
        rt_write_all(w, pieces[p]);
        ck_assert_int_eq(safetensors_writer_finish(w), ZT_OK);

        struct safetensors *s = open_ok(path);
        ck_assert_int_eq(safetensors_count(s), N_RT);
        ck_assert_str_eq(safetensors_metadata(s, "format"), "pt");
        ck_assert_str_eq(safetensors_metadata(s, "odd \"key\"\n"), "a\\b\x01\xc3\xa9");
        uint64_t flat = 0;
        for (int k = 0; k < N_RT; k++) {
            const struct safetensors_tensor *t = safetensors_tensor_at(s, k);
            ck_assert_str_eq(t->name, rt[k].name);
            ck_assert_int_eq(t->dtype, rt[k].dtype);
            ck_assert_int_eq(t->ndim, rt[k].ndim);
            for (int d = 0; d < rt[k].ndim; d++)
                ck_assert_uint_eq(t->shape[d], rt[k].shape[d]);
            float got[32];
            uint64_t n = rt_numel(k);
            ck_assert_int_eq(safetensors_read_f32(s, t, 0, n, got), ZT_OK);
            for (uint64_t i = 0; i < n; i++, flat++)
                ck_assert_msg(same_bits(got[i], rounded(rt[k].dtype, rt_value(flat))),
                              "%s[%llu]: %.9g, expected %.9g", rt[k].name, (unsigned long long)i,
                              got[i], rounded(rt[k].dtype, rt_value(flat)));
        }
        safetensors_close(s);
    }
}
END_TEST

/* The bytes themselves: the header length is a multiple of 8 and the
 * header is compact JSON padded with spaces; F32 is little-endian; F16 and
 * BF16 round ties to even (1 + 2^-8 is a BF16 tie down to 1.0, 1 + 3*2^-8
 * one up to 1 + 2^-6; 1 + 2^-11 and 1 + 3*2^-11 the same for F16). */
START_TEST(test_written_bytes)
{
    const char *path = testutil_path_in(testutil_tmpdir("st-bytes"), "b.safetensors");
    struct safetensors_writer *w = NULL;
    uint64_t two = 2, four = 4;
    ck_assert_int_eq(safetensors_writer_open(path, &w), ZT_OK);
    ck_assert_int_eq(safetensors_writer_add(w, "a", ZT_F32, 1, &two), ZT_OK);
    ck_assert_int_eq(safetensors_writer_add(w, "b", ZT_BF16, 1, &four), ZT_OK);
    ck_assert_int_eq(safetensors_writer_add(w, "c", ZT_F16, 1, &four), ZT_OK);
    ck_assert_int_eq(safetensors_writer_begin_data(w), ZT_OK);
    const float v[10] = {1.0f,    -2.5f,          1.00390625f,    1.01171875f, -1.00390625f,
                         3.0e38f, 1.00048828125f, 1.00146484375f, 65520.0f,    5.9604645e-8f};
    ck_assert_int_eq(safetensors_writer_write_f32(w, v, 10), ZT_OK);
    ck_assert_int_eq(safetensors_writer_finish(w), ZT_OK);

    size_t n;
    unsigned char *b = testutil_read_file(path, &n);
    const char *json = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[8,16]},"
                       "\"c\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[16,24]}}";
    size_t len = strlen(json), padded = (len + 7) / 8 * 8;
    ck_assert_uint_eq(testutil_get_le(b, 8), padded);
    ck_assert_uint_eq(n, 8 + padded + 24);
    ck_assert_mem_eq(b + 8, json, len);
    for (size_t i = len; i < padded; i++)
        ck_assert_int_eq(b[8 + i], ' ');
    static const unsigned char data[24] = {
        0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x20, 0xc0, /* 1.0f, -2.5f */
        0x80, 0x3f, 0x82, 0x3f, 0x80, 0xbf, 0x62, 0x7f, /* ties, 3e38 -> 0x7f62 */
        0x00, 0x3c, 0x02, 0x3c, 0x00, 0x7c, 0x01, 0x00, /* ties, 65520 -> inf, 2^-24 */
    };
    ck_assert_mem_eq(b + 8 + padded, data, 24);
    free(b);
}
END_TEST

/* Reads that cross the reader's internal chunks and a writer fed in
 * pieces larger than one tensor. */
START_TEST(test_roundtrip_large_partial)
{
    const char *path = testutil_path_in(testutil_tmpdir("st-large"), "l.safetensors");
    static const struct {
        const char *name;
        enum zt_dtype dtype;
        uint64_t n;
    } big[] = {{"f16", ZT_F16, 20011}, {"f32", ZT_F32, 9001}, {"bf16", ZT_BF16, 12345}};
    uint64_t total = 0;
    struct safetensors_writer *w = NULL;
    ck_assert_int_eq(safetensors_writer_open(path, &w), ZT_OK);
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(safetensors_writer_add(w, big[k].name, big[k].dtype, 1, &big[k].n), ZT_OK);
        total += big[k].n;
    }
    float *all = malloc(total * sizeof *all), *got = malloc(total * sizeof *got);
    for (uint64_t i = 0; i < total; i++)
        all[i] = rt_value(i);
    ck_assert_int_eq(safetensors_writer_begin_data(w), ZT_OK);
    ck_assert_int_eq(safetensors_writer_write_f32(w, all, 25000), ZT_OK);
    ck_assert_int_eq(safetensors_writer_write_f32(w, all + 25000, total - 25000), ZT_OK);
    ck_assert_int_eq(safetensors_writer_finish(w), ZT_OK);

    struct safetensors *s = open_ok(path);
    static const uint64_t windows[][2] = {{0, 20011}, {8000, 400}, {1, 17000}, {8191, 2}};
    uint64_t base = 0;
    for (int k = 0; k < 3; k++) {
        const struct safetensors_tensor *t = safetensors_find(s, big[k].name);
        for (int j = 0; j < 4; j++) {
            uint64_t first = windows[j][0], count = windows[j][1];
            if (first + count > big[k].n)
                count = big[k].n - first;
            ck_assert_int_eq(safetensors_read_f32(s, t, first, count, got), ZT_OK);
            for (uint64_t i = 0; i < count; i++)
                ck_assert(same_bits(got[i], rounded(big[k].dtype, all[base + first + i])));
        }
        base += big[k].n;
    }
    safetensors_close(s);
    free(all);
    free(got);
}
END_TEST

/* The file appears only at finish; until then an older PATH stays. */
START_TEST(test_writer_is_atomic)
{
    const char *dir = testutil_tmpdir("st-atomic");
    const char *path = testutil_path_in(dir, "m.safetensors");
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    testutil_write_file(path, "old", 3);

    struct safetensors_writer *w = rt_writer(path);
    ck_assert(file_exists(tmp));
    rt_write_all(w, 5);
    size_t n;
    unsigned char *b = testutil_read_file(path, &n);
    ck_assert_uint_eq(n, 3);
    free(b);
    ck_assert_int_eq(safetensors_writer_finish(w), ZT_OK);
    ck_assert(!file_exists(tmp));
    safetensors_close(open_ok(path));

    /* Aborted, before and after begin_data: PATH untouched, temp gone. */
    for (int stage = 0; stage < 2; stage++) {
        testutil_write_file(path, "old", 3);
        w = rt_writer(path);
        if (stage)
            rt_write_all(w, 3);
        safetensors_writer_abort(w);
        ck_assert(!file_exists(tmp));
        b = testutil_read_file(path, &n);
        ck_assert_uint_eq(n, 3);
        free(b);
    }
    safetensors_writer_abort(NULL);
}
END_TEST

START_TEST(test_writer_incomplete_data)
{
    const char *path = testutil_path_in(testutil_tmpdir("st-short"), "s.safetensors");
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    struct safetensors_writer *w = rt_writer(path);
    ck_assert_int_eq(safetensors_writer_begin_data(w), ZT_OK);
    float v[20] = {0};
    /* wte takes 15, h.0.ln_1.weight 17: stop 3 into the second. */
    ck_assert_int_eq(safetensors_writer_write_f32(w, v, 18), ZT_OK);
    ck_assert_int_eq(safetensors_writer_finish(w), ZT_ERR_USAGE);
    ck_assert_str_eq(
        zt_error_message(),
        testutil_fmt("%s: tensor 'h.0.ln_1.weight' is incomplete: 18 of 57 elements were "
                     "written",
                     path));
    ck_assert(!file_exists(path));
    ck_assert(!file_exists(tmp));
}
END_TEST

/* More elements than declared: refused whole, the writer carries on. */
START_TEST(test_writer_too_many_elements)
{
    const char *path = testutil_path_in(testutil_tmpdir("st-long"), "l.safetensors");
    struct safetensors_writer *w = NULL;
    uint64_t three = 3;
    ck_assert_int_eq(safetensors_writer_open(path, &w), ZT_OK);
    ck_assert_int_eq(safetensors_writer_add(w, "x", ZT_F16, 1, &three), ZT_OK);
    ck_assert_int_eq(safetensors_writer_begin_data(w), ZT_OK);
    const float v[4] = {1, 2, 3, 4};
    ck_assert_int_eq(safetensors_writer_write_f32(w, v, 2), ZT_OK);
    ck_assert_int_eq(safetensors_writer_write_f32(w, v, 2), ZT_ERR_USAGE);
    ck_assert_str_eq(
        zt_error_message(),
        testutil_fmt("%s: 2 more elements given but only 1 of the declared tensors remain", path));
    ck_assert_int_eq(safetensors_writer_write_f32(w, v + 3, 1), ZT_OK);
    ck_assert_int_eq(safetensors_writer_finish(w), ZT_OK);
    struct safetensors *s = open_ok(path);
    float got[3];
    ck_assert_int_eq(safetensors_read_f32(s, safetensors_find(s, "x"), 0, 3, got), ZT_OK);
    ck_assert(got[0] == 1 && got[1] == 2 && got[2] == 4);
    safetensors_close(s);
}
END_TEST

START_TEST(test_writer_rejects_bad_declarations)
{
    const char *path = testutil_path_in(testutil_tmpdir("st-decl"), "d.safetensors");
    struct safetensors_writer *w = NULL;
    uint64_t big[2] = {UINT64_MAX / 2, 3}, one = 1;
    uint64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    ck_assert_int_eq(safetensors_writer_open(path, &w), ZT_OK);
    ck_assert_int_eq(safetensors_writer_add(w, "x", ZT_F32, 1, &one), ZT_OK);
    static const struct {
        const char *name;
        enum zt_dtype dtype;
        int ndim;
        zt_status st;
        const char *text;
    } bad[] = {
        {"", ZT_F32, 1, ZT_ERR_USAGE, "tensor name is empty"},
        {"__metadata__", ZT_F32, 1, ZT_ERR_USAGE, "tensor name '__metadata__' is reserved"},
        {"bad\xff", ZT_F32, 1, ZT_ERR_USAGE, "tensor name 'bad\xff' is not valid UTF-8"},
        {"x", ZT_F32, 1, ZT_ERR_USAGE, "tensor 'x' declared twice"},
        {"y", ZT_F32, 9, ZT_ERR_USAGE, "tensor 'y': 9 dimensions (0 to 8 allowed)"},
        {"y", ZT_F32, -1, ZT_ERR_USAGE, "tensor 'y': -1 dimensions (0 to 8 allowed)"},
        {"y", ZT_I32, 1, ZT_ERR_UNSUPPORTED, "tensor 'y': dtype I32 cannot be written from floats"},
        {"y", ZT_F16, 2, ZT_ERR_USAGE, "tensor 'y': shape [9223372036854775807, 3] is too large"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const uint64_t *shape = bad[i].ndim == 9 ? nine : bad[i].ndim == 2 ? big : &one;
        ck_assert_int_eq(safetensors_writer_add(w, bad[i].name, bad[i].dtype, bad[i].ndim, shape),
                         bad[i].st);
        ck_assert_str_eq(zt_error_message(), testutil_fmt("%s: %s", path, bad[i].text));
    }
    ck_assert_int_eq(safetensors_writer_set_metadata(w, "k", "\xc0\xaf"), ZT_ERR_USAGE);
    ck_assert_str_eq(zt_error_message(), testutil_fmt("%s: metadata 'k' is not valid UTF-8", path));
    /* Still usable: the failed declarations left no trace. */
    ck_assert_int_eq(safetensors_writer_begin_data(w), ZT_OK);
    const float v = 0.5f;
    ck_assert_int_eq(safetensors_writer_write_f32(w, &v, 1), ZT_OK);
    ck_assert_int_eq(safetensors_writer_finish(w), ZT_OK);
    struct safetensors *s = open_ok(path);
    ck_assert_int_eq(safetensors_count(s), 1);
    ck_assert_ptr_null(safetensors_metadata(s, "k"));
    safetensors_close(s);
}
END_TEST

START_TEST(test_writer_metadata_replaced)
{
    const char *path = testutil_path_in(testutil_tmpdir("st-meta"), "m.safetensors");
    struct safetensors_writer *w = NULL;
    ck_assert_int_eq(safetensors_writer_open(path, &w), ZT_OK);
    ck_assert_int_eq(safetensors_writer_set_metadata(w, "a", "first"), ZT_OK);
    ck_assert_int_eq(safetensors_writer_set_metadata(w, "b", ""), ZT_OK);
    ck_assert_int_eq(safetensors_writer_set_metadata(w, "a", "second"), ZT_OK);
    ck_assert_int_eq(safetensors_writer_begin_data(w), ZT_OK);
    ck_assert_int_eq(safetensors_writer_finish(w), ZT_OK);
    struct safetensors *s = open_ok(path);
    ck_assert_int_eq(safetensors_count(s), 0);
    ck_assert_str_eq(safetensors_metadata(s, "a"), "second");
    ck_assert_str_eq(safetensors_metadata(s, "b"), "");
    safetensors_close(s);
}
END_TEST

/* No tensors at all: "{}" padded to 8, then nothing. */
START_TEST(test_writer_empty_file)
{
    const char *path = testutil_path_in(testutil_tmpdir("st-empty"), "e.safetensors");
    struct safetensors_writer *w = NULL;
    ck_assert_int_eq(safetensors_writer_open(path, &w), ZT_OK);
    ck_assert_int_eq(safetensors_writer_begin_data(w), ZT_OK);
    ck_assert_int_eq(safetensors_writer_write_f32(w, NULL, 0), ZT_OK);
    ck_assert_int_eq(safetensors_writer_finish(w), ZT_OK);
    size_t n;
    unsigned char *b = testutil_read_file(path, &n);
    ck_assert_uint_eq(n, 16);
    ck_assert_mem_eq(b, "\x08\0\0\0\0\0\0\0{}      ", 16);
    free(b);
    struct safetensors *s = open_ok(path);
    ck_assert_int_eq(safetensors_count(s), 0);
    safetensors_close(s);
}
END_TEST

START_TEST(test_writer_open_fails)
{
    const char *path = testutil_path_in(testutil_tmpdir("st-nodir"), "no/such/dir/x.safetensors");
    struct safetensors_writer *w = (struct safetensors_writer *)&w;
    ck_assert_int_eq(safetensors_writer_open(path, &w), ZT_ERR_IO);
    ck_assert_ptr_null(w);
    ck_assert_str_eq(zt_error_message(),
                     testutil_fmt("%s: cannot create %s.tmp.%ld: No such file or directory", path,
                                  path, (long)getpid()));
}
END_TEST

/* ---- malformed files ---- */

/* A copy of the reference file in a fresh folder. */
static const char *ref_copy(const char *tag, unsigned char **bytes, size_t *n)
{
    const char *path = testutil_path_in(testutil_tmpdir(tag), "ref.safetensors");
    *bytes = testutil_read_file(testutil_source_path(REF_FILE), n);
    testutil_write_file(path, *bytes, *n);
    return path;
}

START_TEST(test_missing_file)
{
    const char *path = testutil_path_in(testutil_tmpdir("st-missing"), "absent.safetensors");
    expect_open_error(path, ZT_ERR_IO, "no such file or directory");
    expect_open_error(testutil_tmpdir("st-dir"), ZT_ERR_IO, "not a regular file");
}
END_TEST

START_TEST(test_file_too_short)
{
    const char *path = testutil_path_in(testutil_tmpdir("st-tiny"), "t.safetensors");
    testutil_write_file(path, "\x02\0\0\0\0", 5);
    expect_open_error(path, ZT_ERR_DATA,
                      "truncated: the file has 5 bytes, too few for the 8-byte header length");
}
END_TEST

START_TEST(test_header_length_exceeds_file)
{
    unsigned char *b;
    size_t n;
    const char *path = ref_copy("st-hlen", &b, &n);
    testutil_put_le(b, 123456789012ull, 8);
    testutil_write_file(path, b, n);
    expect_open_error(path, ZT_ERR_DATA,
                      "header length 123456789012 exceeds the file size (1446 bytes)");
    testutil_put_le(b, n - 7, 8); /* one byte more than there is */
    testutil_write_file(path, b, n);
    expect_open_error(path, ZT_ERR_DATA, "header length 1439 exceeds the file size (1446 bytes)");
    free(b);
}
END_TEST

/* A header over the limit in a file that is large enough: sparse, so no
 * 100 MB are written. */
START_TEST(test_header_over_limit)
{
    const char *path = testutil_path_in(testutil_tmpdir("st-limit"), "big.safetensors");
    unsigned char b[8];
    testutil_put_le(b, SAFETENSORS_MAX_HEADER_BYTES + 1, 8);
    testutil_write_file(path, b, 8);
    ck_assert_int_eq(truncate(path, (off_t)(SAFETENSORS_MAX_HEADER_BYTES + 100)), 0);
    expect_open_error(path, ZT_ERR_DATA,
                      "header length 100000001 exceeds the limit of 100000000 bytes");
    ck_assert_int_eq(remove(path), 0);
}
END_TEST

/* The first ':' of the reference header turned into ';'. */
START_TEST(test_json_error_position)
{
    unsigned char *b;
    size_t n;
    const char *path = ref_copy("st-colon", &b, &n);
    unsigned char *colon = memchr(b + 8, ':', n - 8);
    ck_assert_ptr_nonnull(colon);
    size_t at = (size_t)(colon - (b + 8));
    ck_assert_uint_eq(at, 15); /* {"__metadata__": */
    *colon = ';';
    testutil_write_file(path, b, n);
    expect_open_error(path, ZT_ERR_DATA,
                      "header is not valid JSON at byte 15: expected ':' after the key");
    free(b);
}
END_TEST

#define T_OK "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}"

/* Syntax errors, each with the byte of the header it is reported at. */
START_TEST(test_json_syntax_errors)
{
    static const struct {
        const char *json;
        size_t at;
        const char *what;
    } cases[] = {
        {"", 0, "expected a value"},
        {"{", 1, "expected a string key"},
        {"{\"x\" {", 5, "expected ':' after the key"},
        {"{\"x\":" T_OK ",", 54, "expected a string key"},
        {"{\"x\":" T_OK ",}", 54, "expected a string key"},
        {"{\"x\":" T_OK " \"y\"", 54, "expected ',' or '}'"},
        {"{\"x\":" T_OK "}x", 54, "unexpected text after the value"},
        {"{\"x\":" T_OK "}{}", 54, "unexpected text after the value"},
        {"{\"x", 1, "unterminated string"},
        {"{\"x\\\"}", 1, "unterminated string"},
        {"{\"a\\q\":1}", 3, "unknown escape"},
        {"{\"a\\u12\":1}", 3, "\\u must be followed by 4 hex digits"},
        {"{\"a\\u12g4\":1}", 3, "\\u must be followed by 4 hex digits"},
        {"{\"a\\ud800\":1}", 3, "unpaired surrogate in a \\u escape"},
        {"{\"a\\ud800\\u0041\":1}", 3, "unpaired surrogate in a \\u escape"},
        {"{\"a\\udc00\":1}", 3, "unpaired surrogate in a \\u escape"},
        {"{\"a\\u0000\":1}", 3, "\\u0000 is not allowed in a string"},
        {"{\"a\x01\":1}", 3, "control character in a string"},
        {"{\"a\tb\":1}", 3, "control character in a string"},
        {"{\"a\xc3\x28\":1}", 3, "invalid UTF-8"},
        {"{\"a\xc0\xaf\":1}", 3, "invalid UTF-8"},
        {"{\"a\xed\xa0\x80\":1}", 3, "invalid UTF-8"},
        {"{\"a\xe0\x80\xaf\":1}", 3, "invalid UTF-8"},
        {"{\"a\xf0\x80\x80\xaf\":1}", 3, "invalid UTF-8"},
        {"{\"a\xe2\x82\x28\":1}", 3, "invalid UTF-8"},
        {"{\"a\xf4\x90\x80\x80\":1}", 3, "invalid UTF-8"},
        {"{\"a\xe2\x82\":1}", 3, "invalid UTF-8"},
        {"{\"a\xff\":1}", 3, "invalid UTF-8"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[01],", 29, "leading zeros are not allowed"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],", 33, "expected a string key"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1.5],", 34, "expected a string key"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1e2],", 34, "expected a string key"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[\"1\"],", 34, "expected a string key"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1,],", 31, "expected a value"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1 2],", 31, "expected ',' or ']'"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":{},", 31, "expected a string key"},
        {"{\"x\":{\"data_offsets\":[0,18446744073709551616]", 24,
         "integer out of the 64-bit range"},
        {"{\"x\":{\"dtype\":F32}}", 14, "expected a value"},
        {"{\"x\":{\"extra\":tru}}", 14, "expected a value"},
        {"{\"x\":{\"extra\":}}", 14, "expected a value"},
        {"{\"x\":{\"extra\":-}}", 14, "invalid number"},
        {"{\"x\":{\"extra\":1.}}", 14, "a '.' must be followed by digits"},
        {"{\"x\":{\"extra\":1e+}}", 14, "an exponent must have digits"},
        {"{\"x\":{\"extra\":012}}", 14, "leading zeros are not allowed"},
        {"{\"x\":{\"extra\":[1,]}}", 17, "expected a value"},
        {"{\"x\":{\"extra\":{\"k\":1,}}}", 21, "expected a string key"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_header_error(
            cases[i].json, 0,
            testutil_fmt("header is not valid JSON at byte %zu: %s", cases[i].at, cases[i].what));
    /* Valid JSON of the wrong shape, named by the byte of the value. */
    expect_header_error("  []", 0, "header at byte 2: the header must be an object, not an array");
    expect_header_error("{\"x\":[]}", 0,
                        "header at byte 5: tensor 'x' must be an object, not an array");
    /* The same complete, so that the entry itself is what is refused. */
    static const struct {
        const char *shape;
        size_t at;
        const char *what;
    } shapes[] = {
        {"[-1]", 29, "\"shape\" entry 0 must be a non-negative integer, not a negative integer"},
        {"[1.5]", 29, "\"shape\" entry 0 must be a non-negative integer, not a fractional number"},
        {"[1e2]", 29, "\"shape\" entry 0 must be a non-negative integer, not a fractional number"},
        {"[\"1\"]", 29, "\"shape\" entry 0 must be a non-negative integer, not a string"},
        {"{}", 28, "\"shape\" must be an array, not an object"},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        expect_header_error(
            testutil_fmt("{\"x\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[0,4]}}",
                         shapes[i].shape),
            0, testutil_fmt("header at byte %zu: tensor 'x': %s", shapes[i].at, shapes[i].what));
    expect_header_error(
        "{\"x\":{\"dtype\":1}}", 0,
        "header at byte 14: tensor 'x': \"dtype\" must be a string, not an integer");
}
END_TEST

/* Deep nesting in a skipped value is refused before it can exhaust the
 * stack. */
START_TEST(test_json_nesting_limit)
{
    char json[400] = "{\"x\":{\"extra\":";
    size_t n = strlen(json);
    memset(json + n, '[', 200);
    json[n + 200] = '\0';
    /* Depth 1 is the header, 2 the entry: the 63rd '[' is level 65. */
    expect_header_error(json, 0,
                        testutil_fmt("header is not valid JSON at byte %zu: nesting deeper than 64 "
                                     "levels",
                                     n + 62));
}
END_TEST

/* Unknown fields, whitespace anywhere and any JSON value in them are
 * skipped; the result is an ordinary file. */
START_TEST(test_header_skips_unknown_fields)
{
    const char *path = testutil_path_in(testutil_tmpdir("st-skip"), "s.safetensors");
    make_file(path,
              " \r\n\t{ \"__metadata__\" : { } , \"x\" : { \"extra\" : [ 1 , -2.5e+3 , 0.25E-1 ,"
              " true , false , null , { \"k\" : [ [ ] , { } ] } , \"s\\\"\\\\\\/\\b\\f\\n\\r\\t"
              "\\u00e9\\uD83D\\uDE00\" , 0 , -0 ] , \"shape\" : [ 2 ] , \"dtype\" : \"F16\" ,"
              " \"data_offsets\" : [ 0 , 4 ] } }   \n",
              4);
    struct safetensors *s = open_ok(path);
    ck_assert_int_eq(safetensors_count(s), 1);
    const struct safetensors_tensor *t = safetensors_find(s, "x");
    ck_assert_int_eq(t->dtype, ZT_F16);
    float got[2];
    ck_assert_int_eq(safetensors_read_f32(s, t, 0, 2, got), ZT_OK);
    ck_assert(same_bits(got[0], zt_f16_to_f32(0x3c3c)) && same_bits(got[1], got[0]));
    safetensors_close(s);
}
END_TEST

START_TEST(test_offsets_do_not_match)
{
    expect_header_error(
        "{\"h.0.x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[10,20]}}", 20,
        "tensor 'h.0.x': data_offsets [10, 20] do not match dtype F32 and shape [3] (12 bytes)");
    expect_header_error(
        "{\"y\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[12,0]}}", 12,
        "tensor 'y': data_offsets [12, 0] do not match dtype BF16 and shape [2, 3] (12 bytes)");
    expect_header_error("{\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
                        "tensor 's': data_offsets [0, 4] do not match dtype F64 and shape [] "
                        "(8 bytes)");
    expect_header_error("{\"z\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                        "\"data_offsets\":[0,0]}}",
                        0, "tensor 'z': shape [4294967296, 4294967296] is too large");
}
END_TEST

START_TEST(test_overlap)
{
    expect_header_error("{\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,20]},"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}",
                        20, "tensor 'a' overlaps tensor 'b'");
    /* An empty tensor inside another one's bytes overlaps it too. */
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                        "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}",
                        12, "tensor 'a' overlaps tensor 'e'");
    /* ... but not at its edges. */
    const char *path = testutil_path_in(testutil_tmpdir("st-edge"), "e.safetensors");
    make_file(path,
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
              "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[12,12]},"
              "\"f\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[0,0]}}",
              12);
    safetensors_close(open_ok(path));
}
END_TEST

START_TEST(test_uncovered_bytes)
{
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
                        16, "data section has 8 bytes not covered by any tensor");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 12,
                        "data section has 8 bytes not covered by any tensor");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 11,
                        "data section has 7 bytes not covered by any tensor");
    expect_header_error("{}", 3, "data section has 3 bytes not covered by any tensor");
}
END_TEST

START_TEST(test_unknown_dtype)
{
    expect_header_error("{\"x\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                        "unknown dtype 'F8_E4M3' for tensor 'x'");
    expect_header_error("{\"x\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                        "unknown dtype 'f32' for tensor 'x'");
}
END_TEST

START_TEST(test_truncated_data)
{
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 10,
                        "truncated: data section needs 16 bytes, file has 10");
}
END_TEST

START_TEST(test_duplicate_names)
{
    expect_header_error("{\"a\":" T_OK ",\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                        "\"data_offsets\":[4,8]}}",
                        8, "duplicate tensor name 'a'");
    expect_header_error("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "__metadata__ given twice");
    expect_header_error("{\"__metadata__\":{\"k\":\"1\",\"j\":\"2\",\"k\":\"3\"}}", 0,
                        "duplicate __metadata__ key 'k'");
    expect_header_error("{\"x\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}", 0,
                        "tensor 'x': \"dtype\" given twice");
}
END_TEST

START_TEST(test_bad_entries)
{
    expect_header_error("{\"x\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                        "tensor 'x' has no \"dtype\"");
    expect_header_error("{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4,
                        "tensor 'x' has no \"shape\"");
    expect_header_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4,
                        "tensor 'x' has no \"data_offsets\"");
    expect_header_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1]}}", 4,
                        "tensor 'x': shape has more than 8 entries");
    expect_header_error("{\"x\":{\"data_offsets\":[0,4,8]}}", 4,
                        "tensor 'x': data_offsets has more than 2 entries");
    expect_header_error("{\"x\":{\"data_offsets\":[4]}}", 4,
                        "tensor 'x': data_offsets must be [begin, end]");
    expect_header_error("{\"__metadata__\":{\"k\":1}}", 0,
                        "__metadata__ value of 'k' is not a string");
    expect_header_error("{\"__metadata__\":[]}", 0, "__metadata__ is not an object");
}
END_TEST

/* ---- fault loops ---- */

/* The loops below run thousands of opens: they check with plain ifs
 * (ck_assert records every passing check, which would dominate) and edit
 * the file in place rather than rewriting it. */

/* Whether the last error message starts with "PATH:". */
static int names_file(const char *path)
{
    size_t n = strlen(path);
    return strncmp(zt_error_message(), path, n) == 0 && zt_error_message()[n] == ':';
}

/* Every proper prefix of the reference file is refused with a message
 * naming the file; the whole file opens. Shortest last: ftruncate only
 * ever shrinks the file. */
START_TEST(test_truncation_fault_loop)
{
    unsigned char *b;
    size_t n;
    const char *path = ref_copy("st-trunc", &b, &n);
    ck_assert_uint_lt(n, 2048);
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    for (size_t len = n + 1; len-- > 0;) {
        if (ftruncate(fd, (off_t)len) != 0)
            ck_abort_msg("ftruncate: %s", strerror(errno));
        struct safetensors *s = NULL;
        zt_status st = safetensors_open(path, &s);
        if (len == n && st != ZT_OK)
            ck_abort_msg("whole file: %s", zt_error_message());
        if (len < n && (st != ZT_ERR_DATA || s != NULL || !names_file(path)))
            ck_abort_msg("prefix %zu: %s %s", len, zt_status_str(st), zt_error_message());
        safetensors_close(s);
    }
    close(fd);
    free(b);
}
END_TEST

/* Opens a file that may be corrupt: refused with a message naming it (1),
 * or opened and every float tensor read completely (0). */
static int open_corrupt(const char *path, size_t size)
{
    struct safetensors *s = NULL;
    if (safetensors_open(path, &s) != ZT_OK) {
        if (s != NULL || !names_file(path))
            ck_abort_msg("refused without naming the file: '%s'", zt_error_message());
        return 1;
    }
    for (int i = 0; i < safetensors_count(s); i++) {
        const struct safetensors_tensor *t = safetensors_tensor_at(s, i);
        float dst[64];
        uint64_t numel = safetensors_tensor_numel(t);
        if (t->offset + t->nbytes > size)
            ck_abort_msg("tensor '%s' ends past the file", t->name);
        int is_float =
            t->dtype == ZT_F32 || t->dtype == ZT_F16 || t->dtype == ZT_BF16 || t->dtype == ZT_F64;
        if (numel <= 64 && is_float && safetensors_read_f32(s, t, 0, numel, dst) != ZT_OK)
            ck_abort_msg("opened, then: %s", zt_error_message());
    }
    safetensors_close(s);
    return 0;
}

/* Every byte of the length and the header overwritten with bytes that
 * matter to JSON: each file is refused with a message naming it, or
 * opens and reads completely. */
START_TEST(test_corruption_fault_loop)
{
    static const unsigned char subst[] = {0x00, ' ', '"', '\\', '{', '}',  '[', ']',
                                          ',',  ':', '0', '9',  'u', 0x80, 0xff};
    unsigned char *b;
    size_t n;
    const char *path = ref_copy("st-corrupt", &b, &n);
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    size_t header_end = 8 + (size_t)testutil_get_le(b, 8);
    int opened = 0, refused = 0;
    for (size_t pos = 0; pos < header_end; pos++) {
        for (size_t v = 0; v < sizeof subst; v++) {
            if (subst[v] == b[pos])
                continue;
            if (pwrite(fd, &subst[v], 1, (off_t)pos) != 1)
                ck_abort_msg("pwrite: %s", strerror(errno));
            if (open_corrupt(path, n))
                refused++;
            else
                opened++;
        }
        if (pwrite(fd, &b[pos], 1, (off_t)pos) != 1)
            ck_abort_msg("pwrite: %s", strerror(errno));
    }
    close(fd);
    ck_assert_int_gt(refused, 10000);
    ck_assert_int_gt(opened, 100); /* spaces in the padding, digits in names, ... */
    free(b);
}
END_TEST

static Suite *safetensors_suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *r = tcase_create("reader");
    tcase_add_test(r, test_reference_shapes_and_offsets);
    tcase_add_test(r, test_reference_values);
    tcase_add_test(r, test_reference_index_order);
    tcase_add_test(r, test_reference_metadata);
    tcase_add_test(r, test_reference_integer_tensor);
    tcase_add_test(r, test_partial_reads);
    tcase_add_test(r, test_partial_read_out_of_range);
    suite_add_tcase(s, r);

    TCase *w = tcase_create("writer");
    tcase_add_test(w, test_roundtrip_values);
    tcase_add_test(w, test_written_bytes);
    tcase_add_test(w, test_roundtrip_large_partial);
    tcase_add_test(w, test_writer_is_atomic);
    tcase_add_test(w, test_writer_incomplete_data);
    tcase_add_test(w, test_writer_too_many_elements);
    tcase_add_test(w, test_writer_rejects_bad_declarations);
    tcase_add_test(w, test_writer_metadata_replaced);
    tcase_add_test(w, test_writer_empty_file);
    tcase_add_test(w, test_writer_open_fails);
    suite_add_tcase(s, w);

    TCase *m = tcase_create("malformed");
    tcase_add_test(m, test_missing_file);
    tcase_add_test(m, test_file_too_short);
    tcase_add_test(m, test_header_length_exceeds_file);
    tcase_add_test(m, test_header_over_limit);
    tcase_add_test(m, test_json_error_position);
    tcase_add_test(m, test_json_syntax_errors);
    tcase_add_test(m, test_json_nesting_limit);
    tcase_add_test(m, test_header_skips_unknown_fields);
    tcase_add_test(m, test_offsets_do_not_match);
    tcase_add_test(m, test_overlap);
    tcase_add_test(m, test_uncovered_bytes);
    tcase_add_test(m, test_unknown_dtype);
    tcase_add_test(m, test_truncated_data);
    tcase_add_test(m, test_duplicate_names);
    tcase_add_test(m, test_bad_entries);
    suite_add_tcase(s, m);

    TCase *f = tcase_create("fault");
    tcase_add_test(f, test_truncation_fault_loop);
    tcase_add_test(f, test_corruption_fault_loop);
    tcase_set_timeout(f, 60);
    suite_add_tcase(s, f);
    return s;
}

int main(void)
{
    return testutil_run_suite(safetensors_suite(), 0);
}
