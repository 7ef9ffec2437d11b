/* tests/test_checkpoint.c — checkpoint storage: shard files, meta.json,
 * folders (prepare, publish, latest, rotation) and validation.
 *
 * The shard layout is checked byte by byte against the format in
 * checkpoint.h with this file's own little-endian decoding and its own
 * FNV-1a (pinned by known answers), so a writer and reader that agreed on
 * a wrong layout would still fail. meta.json is checked both ways: written
 * and read back with every field at values a double cannot hold, and
 * hand-written text (escapes, surrogate pairs, unknown keys) read by the
 * reader. Every kind of damage a checkpoint can suffer is made here on
 * disk and must give its exact message. Three fault loops: every prefix
 * and many byte overwrites of meta.json, every header byte of a shard
 * flipped, and the N-th allocation failing in each reader and writer.
 *
 * malloc, calloc and realloc are wrapped at link time (tests/ckpt.cmake)
 * so that the allocation loop can fail the N-th one; the countdown is off
 * everywhere else.
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/half.h"
#include "../formats/checkpoint.h"
#include "fault_alloc.h"
#include "testutil.h"

/* ---- allocation fault injection ---- */

/* ---- helpers ---- */

#define EXPECT_STATUS(expr, code)                                                                  \
    do {                                                                                           \
        zt_status st_ = (expr);                                                                    \
        ck_assert_msg(st_ == (code), "%s gave %s (%s), expected %s", #expr, zt_status_str(st_),    \
                      zt_error_message(), zt_status_str(code));                                    \
    } while (0)

#define EXPECT_OK(expr) EXPECT_STATUS(expr, ZT_OK)

/* The call fails with `code` and exactly the message `msg`. */
#define EXPECT_ERROR(expr, code, msg)                                                              \
    do {                                                                                           \
        EXPECT_STATUS(expr, code);                                                                 \
        ck_assert_str_eq(zt_error_message(), (msg));                                               \
    } while (0)

/* This file's FNV-1a 64, independent of the module's. */
static uint64_t fnv1a(const void *bytes, size_t n)
{
    const unsigned char *p = bytes;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static int file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static uint64_t file_size(const char *path)
{
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    return (uint64_t)sb.st_size;
}

/* Number of entries in a folder besides . and .. */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void flip_byte(const char *path, uint64_t at, unsigned char mask)
{
    size_t n;
    unsigned char *b = testutil_read_file(path, &n);
    ck_assert_uint_lt(at, n);
    b[at] ^= mask;
    testutil_write_file(path, b, n);
    free(b);
}

static void write_text(const char *path, const char *text)
{
    testutil_write_file(path, text, strlen(text));
}

/* ---- the test shard: fixed sections, values from (rank, section, i) ---- */

static const struct {
    const char *name;
    enum zt_dtype dtype;
    uint64_t count;
} sections[] = {
    {"params", ZT_F32, 1000}, {"exp_avg", ZT_BF16, 777}, {"exp_avg_sq", ZT_F32, 500},
    {"ids", ZT_I64, 33},      {"empty", ZT_U8, 0},       {"tail.bytes", ZT_U8, 13},
};
#define N_SECTIONS ((int)(sizeof sections / sizeof sections[0]))
#define HEADER_END (24 + 64 * N_SECTIONS)

static float f32_value(int rank, int k, uint64_t i)
{
    return (float)(rank * 100000 + (int)i) * 0.25f + (float)k;
}

static int64_t i64_value(int rank, uint64_t i)
{
    return ((int64_t)1 << 60) + (int64_t)i * 1000003 * (rank + 1) -
           (int64_t)(i % 3) * INT64_C(4000000000000000000);
}

/* The little-endian bytes section k of `rank` must hold (new buffer). */
static unsigned char *section_bytes(int rank, int k, size_t *nbytes)
{
    uint64_t n = sections[k].count;
    size_t size = zt_dtype_size(sections[k].dtype);
    unsigned char *b = malloc(n * size + 1);
    ck_assert_ptr_nonnull(b);
    for (uint64_t i = 0; i < n; i++) {
        unsigned char *p = b + i * size;
        switch (sections[k].dtype) {
        case ZT_F32:
            testutil_put_le(p, half_f32_bits(f32_value(rank, k, i)), 4);
            break;
        case ZT_BF16:
            testutil_put_le(p, zt_f32_to_bf16((float)i * 0.5f - (float)rank), 2);
            break;
        case ZT_I64:
            testutil_put_le(p, (uint64_t)i64_value(rank, i), 8);
            break;
        default:
            p[0] = (unsigned char)(i * 31 + (uint64_t)rank);
        }
    }
    *nbytes = n * size;
    return b;
}

/* All sections' bytes, concatenated in declaration order. */
static unsigned char *shard_blob(int rank, size_t *nbytes)
{
    size_t total = 0, at = 0;
    for (int k = 0; k < N_SECTIONS; k++)
        total += sections[k].count * zt_dtype_size(sections[k].dtype);
    unsigned char *blob = malloc(total + 1);
    ck_assert_ptr_nonnull(blob);
    for (int k = 0; k < N_SECTIONS; k++) {
        size_t n;
        unsigned char *b = section_bytes(rank, k, &n);
        memcpy(blob + at, b, n);
        at += n;
        free(b);
    }
    *nbytes = total;
    return blob;
}

/* Writes the test shard of `rank` to path, `chunk` elements per write
 * call (crossing sections), and returns what finish reports. */
static void write_shard(const char *path, int rank, int world, uint64_t chunk, uint64_t *bytes,
                        uint64_t *checksum)
{
    struct ckpt_shard_writer *w;
    EXPECT_OK(ckpt_shard_writer_open(path, rank, world, &w));
    uint64_t total = 0;
    for (int k = 0; k < N_SECTIONS; k++) {
        EXPECT_OK(ckpt_shard_writer_add(w, sections[k].name, sections[k].dtype, sections[k].count));
        total += sections[k].count;
    }
    EXPECT_OK(ckpt_shard_writer_begin(w));
    size_t blob_n;
    unsigned char *blob = shard_blob(rank, &blob_n), *p = blob;
    int k = 0;
    uint64_t in_k = 0;
    for (uint64_t done = 0; done < total;) {
        uint64_t m = total - done < chunk ? total - done : chunk;
        EXPECT_OK(ckpt_shard_writer_write(w, p, m));
        for (uint64_t left = m; left > 0;) { /* advance p by m elements */
            while (in_k == sections[k].count)
                k++, in_k = 0;
            uint64_t take = sections[k].count - in_k < left ? sections[k].count - in_k : left;
            p += take * zt_dtype_size(sections[k].dtype);
            in_k += take;
            left -= take;
        }
        done += m;
    }
    ck_assert_ptr_eq(p, blob + blob_n);
    free(blob);
    EXPECT_OK(ckpt_shard_writer_finish(w, bytes, checksum));
}

/* A meta struct for `world` ranks with every field set; owns its arrays. */
static void fill_meta(struct ckpt_meta *m, int64_t step, int world, const struct ckpt_file *files)
{
    *m = (struct ckpt_meta){0};
    m->step = step;
    m->world = world;
    m->stage = 2;
    strcpy(m->precision, "bf16");
    const char *cfg = "model:\n  n_layer: 2\nrun:\n  name: \"quote\\d\" # é\n";
    m->config_yaml = malloc(strlen(cfg) + 1);
    strcpy(m->config_yaml, cfg);
    m->n_units = 3;
    m->unit_numel = malloc(3 * sizeof *m->unit_numel);
    m->unit_shard = malloc(3 * sizeof *m->unit_shard);
    for (int u = 0; u < 3; u++) {
        m->unit_numel[u] = 1000 + (uint64_t)u;
        m->unit_shard[u] = (1000 + (uint64_t)u + (uint64_t)world - 1) / (uint64_t)world;
    }
    m->n_params = 3003;
    zt_kv_init(&m->model, "gpt2");
    zt_kv_add_int(&m->model, "vocab_size", 50257);
    zt_kv_add_int(&m->model, "block_size", 1024);
    zt_kv_add_int(&m->model, "n_layer", 2);
    zt_kv_add_int(&m->model, "n_head", 4);
    zt_kv_add_int(&m->model, "n_embd", 64);
    zt_kv_init(&m->optimizer, "AdamW");
    zt_kv_add_real(&m->optimizer, "lr", 3e-4);
    zt_kv_add_real(&m->optimizer, "beta2", 0.95);
    m->seed = 1337;
    m->samples_seen = (uint64_t)step * 64;
    m->loss_scale = 65536.0;
    m->scaler_good_steps = 17;
    m->scaler_hysteresis = 2;
    m->optimizer_steps = step;
    m->files = malloc((size_t)world * sizeof *m->files);
    memcpy(m->files, files, (size_t)world * sizeof *m->files);
}

static const char *step_path(const char *dir, int64_t step)
{
    char name[CKPT_STEP_NAME_MAX];
    ckpt_step_dirname(step, name, sizeof name);
    return testutil_path_in(dir, name);
}

static const char *shard_path(const char *step_dir, int rank)
{
    static char bufs[4][4096];
    static int next;
    char *b = bufs[next++ % 4];
    EXPECT_OK(ckpt_shard_path(step_dir, rank, b, 4096));
    return b;
}

/* A whole checkpoint of `world` ranks at `step`, published if asked. */
static void save_checkpoint(const char *dir, int64_t step, int world, int publish)
{
    char step_dir[4096];
    EXPECT_OK(ckpt_dir_prepare(dir, step, step_dir, sizeof step_dir));
    ck_assert_str_eq(step_dir, step_path(dir, step));
    struct ckpt_file files[8];
    ck_assert_int_le(world, 8);
    for (int r = 0; r < world; r++)
        write_shard(shard_path(step_dir, r), r, world, 100, &files[r].bytes, &files[r].checksum);
    struct ckpt_meta m;
    fill_meta(&m, step, world, files);
    EXPECT_OK(ckpt_meta_write(testutil_path_in(step_dir, "meta.json"), &m));
    ckpt_meta_free(&m);
    if (publish)
        EXPECT_OK(ckpt_publish(dir, step));
}

static char *read_latest_text(const char *dir)
{
    size_t n;
    unsigned char *b = testutil_read_file(testutil_path_in(dir, "latest"), &n);
    b[n] = '\0';
    return (char *)b;
}

/* ---- shard files ---- */

START_TEST(test_fnv_known_answers)
{
    /* Published FNV-1a 64 test vectors pin this file's reference. */
    ck_assert_uint_eq(fnv1a("", 0), 0xcbf29ce484222325ull);
    ck_assert_uint_eq(fnv1a("a", 1), 0xaf63dc4c8601ec8cull);
    ck_assert_uint_eq(fnv1a("foobar", 6), 0x85944171f73967e8ull);
}
END_TEST

START_TEST(test_shard_layout_matches_format)
{
    const char *dir = testutil_tmpdir("ckpt");
    const char *path = testutil_path_in(dir, "rank-00002.bin");
    uint64_t bytes, checksum;
    write_shard(path, 2, 4, 100, &bytes, &checksum);
    size_t n;
    unsigned char *f = testutil_read_file(path, &n);
    ck_assert_uint_eq(bytes, n);
    ck_assert_mem_eq(f, "ZTCKSHRD", 8);
    ck_assert_uint_eq(testutil_get_le(f + 8, 4), 1);
    ck_assert_uint_eq(testutil_get_le(f + 12, 4), 2);
    ck_assert_uint_eq(testutil_get_le(f + 16, 4), 4);
    ck_assert_uint_eq(testutil_get_le(f + 20, 4), N_SECTIONS);
    static const uint32_t codes[] = {0, 2, 0, 5, 6, 6}; /* F32 BF16 F32 I64 U8 U8 */
    uint64_t offset = HEADER_END;
    for (int k = 0; k < N_SECTIONS; k++) {
        const unsigned char *e = f + 24 + 64 * k;
        char name[32] = {0};
        memcpy(name, sections[k].name, strlen(sections[k].name));
        ck_assert_mem_eq(e, name, 32);
        ck_assert_uint_eq(testutil_get_le(e + 32, 4), codes[k]);
        ck_assert_uint_eq(testutil_get_le(e + 36, 4), 0);
        ck_assert_uint_eq(testutil_get_le(e + 40, 8), sections[k].count);
        ck_assert_uint_eq(testutil_get_le(e + 48, 8), offset);
        size_t sn;
        unsigned char *want = section_bytes(2, k, &sn);
        ck_assert_mem_eq(f + offset, want, sn);
        ck_assert_uint_eq(testutil_get_le(e + 56, 8), fnv1a(want, sn));
        free(want);
        offset += sn;
    }
    ck_assert_uint_eq(offset, n);
    ck_assert_uint_eq(checksum, fnv1a(f, HEADER_END));
    /* One value decoded by hand: params[3] of rank 2 is (200003) * 0.25. */
    uint32_t bits = (uint32_t)testutil_get_le(f + HEADER_END + 12, 4);
    ck_assert_float_eq(half_bits_f32(bits), 50000.75f);
    free(f);
    ck_assert_int_eq(count_entries(dir), 1); /* no temp file left */
}
END_TEST

START_TEST(test_shard_chunking_gives_the_same_file)
{
    const char *dir = testutil_tmpdir("ckpt");
    static const uint64_t chunks[] = {1, 7, 777, 1000000};
    size_t n0 = 0;
    unsigned char *first = NULL;
    for (int c = 0; c < 4; c++) {
        const char *path = testutil_path_in(dir, testutil_fmt("chunk%d.bin", c));
        uint64_t bytes, checksum;
        write_shard(path, 1, 3, chunks[c], &bytes, &checksum);
        size_t n;
        unsigned char *f = testutil_read_file(path, &n);
        if (!first) {
            first = f;
            n0 = n;
            continue;
        }
        ck_assert_uint_eq(n, n0);
        ck_assert_mem_eq(f, first, n);
        free(f);
    }
    free(first);
}
END_TEST

START_TEST(test_shard_round_trip_and_ranged_reads)
{
    const char *dir = testutil_tmpdir("ckpt");
    const char *path = testutil_path_in(dir, "rank-00001.bin");
    uint64_t bytes, checksum;
    write_shard(path, 1, 2, 333, &bytes, &checksum);
    struct ckpt_shard *s;
    EXPECT_OK(ckpt_shard_open(path, &s));
    const struct ckpt_shard_header *h = ckpt_shard_header(s);
    ck_assert_int_eq(h->rank, 1);
    ck_assert_int_eq(h->world, 2);
    ck_assert_int_eq(h->n_sections, N_SECTIONS);
    ck_assert_uint_eq(h->file_bytes, bytes);
    ck_assert_uint_eq(h->file_checksum, checksum);
    EXPECT_OK(ckpt_shard_verify(s));
    for (int k = 0; k < N_SECTIONS; k++) {
        const struct ckpt_section *sec = ckpt_shard_find(s, sections[k].name);
        ck_assert_ptr_eq(sec, &h->sections[k]);
        ck_assert_int_eq(sec->dtype, sections[k].dtype);
        ck_assert_uint_eq(sec->count, sections[k].count);
        size_t sn, size = zt_dtype_size(sec->dtype);
        unsigned char *want = section_bytes(1, k, &sn);
        unsigned char *got = malloc(sn + 1);
        EXPECT_OK(ckpt_shard_read(s, sec, 0, sec->count, got));
        ck_assert_mem_eq(got, want, sn);
        /* ranges: the start, the end, the middle, one element, nothing */
        uint64_t c = sec->count;
        uint64_t ranges[][2] = {
            {0, c / 3}, {c - c / 4, c / 4}, {c / 5, c / 2}, {c / 2, c ? 1 : 0}, {c, 0}};
        for (int r = 0; r < 5; r++) {
            memset(got, 0xa5, sn + 1);
            EXPECT_OK(ckpt_shard_read(s, sec, ranges[r][0], ranges[r][1], got));
            ck_assert_mem_eq(got, want + ranges[r][0] * size, ranges[r][1] * size);
            ck_assert_uint_eq(got[ranges[r][1] * size], 0xa5); /* nothing past the range */
        }
        free(got);
        free(want);
    }
    /* Typed values through the dtype, against the formulas. */
    const struct ckpt_section *ids = ckpt_shard_find(s, "ids");
    int64_t v[3];
    EXPECT_OK(ckpt_shard_read(s, ids, 30, 3, v));
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(v[i], i64_value(1, 30 + (uint64_t)i));
    const struct ckpt_section *avg = ckpt_shard_find(s, "exp_avg");
    uint16_t b16;
    EXPECT_OK(ckpt_shard_read(s, avg, 5, 1, &b16));
    ck_assert_float_eq(zt_bf16_to_f32(b16), 1.5f); /* 5 * 0.5 - 1 */
    ck_assert_ptr_null(ckpt_shard_find(s, "exp_avg2"));
    ck_assert_ptr_null(ckpt_shard_find(s, ""));
    ckpt_shard_close(s);
}
END_TEST

START_TEST(test_shard_read_beyond_a_section)
{
    const char *dir = testutil_tmpdir("ckpt");
    const char *path = testutil_path_in(dir, "s.bin");
    write_shard(path, 0, 1, 1000, NULL, NULL);
    struct ckpt_shard *s;
    EXPECT_OK(ckpt_shard_open(path, &s));
    const struct ckpt_section *sec = ckpt_shard_find(s, "exp_avg_sq");
    float buf[600];
    EXPECT_ERROR(ckpt_shard_read(s, sec, 400, 101, buf), ZT_ERR_USAGE,
                 testutil_fmt("%s: section 'exp_avg_sq': cannot read 101 elements from 400, it "
                              "has 500",
                              path));
    EXPECT_STATUS(ckpt_shard_read(s, sec, 501, 0, buf), ZT_ERR_USAGE);
    EXPECT_STATUS(ckpt_shard_read(s, sec, 1, UINT64_MAX, buf), ZT_ERR_USAGE);
    EXPECT_OK(ckpt_shard_read(s, sec, 400, 100, buf));
    ck_assert_float_eq(buf[99], f32_value(0, 2, 499));
    ckpt_shard_close(s);
}
END_TEST

START_TEST(test_shard_writer_refuses_bad_declarations)
{
    const char *dir = testutil_tmpdir("ckpt");
    const char *path = testutil_path_in(dir, "w.bin");
    struct ckpt_shard_writer *w;
    EXPECT_ERROR(ckpt_shard_writer_open(path, 4, 4, &w), ZT_ERR_USAGE,
                 testutil_fmt("%s: rank 4 of world 4 is impossible", path));
    ck_assert_ptr_null(w);
    EXPECT_STATUS(ckpt_shard_writer_open(path, 0, 0, &w), ZT_ERR_USAGE);
    EXPECT_STATUS(ckpt_shard_writer_open(path, -1, 2, &w), ZT_ERR_USAGE);
    EXPECT_OK(ckpt_shard_writer_open(path, 0, 1, &w));
    EXPECT_OK(ckpt_shard_writer_add(w, "a", ZT_F32, 2));
    EXPECT_ERROR(ckpt_shard_writer_add(w, "a", ZT_F32, 2), ZT_ERR_USAGE,
                 testutil_fmt("%s: section 'a' is declared twice", path));
    EXPECT_ERROR(ckpt_shard_writer_add(w, "", ZT_F32, 2), ZT_ERR_USAGE,
                 testutil_fmt("%s: section '': name is empty", path));
    EXPECT_ERROR(ckpt_shard_writer_add(w, "has space", ZT_F32, 2), ZT_ERR_USAGE,
                 testutil_fmt("%s: section 'has space': name has a byte outside '!' .. '~'", path));
    EXPECT_OK(ckpt_shard_writer_add(w, "abcdefghijklmnopqrstuvwxyz01234", ZT_U8, 1)); /* 31 */
    EXPECT_ERROR(ckpt_shard_writer_add(w, "abcdefghijklmnopqrstuvwxyz012345", ZT_U8, 1),
                 ZT_ERR_USAGE,
                 testutil_fmt("%s: section 'abcdefghijklmnopqrstuvwxyz012345': name is longer "
                              "than 31 bytes",
                              path));
    EXPECT_ERROR(ckpt_shard_writer_add(w, "b", (enum zt_dtype)99, 2), ZT_ERR_USAGE,
                 testutil_fmt("%s: section 'b': dtype 99 is not known", path));
    EXPECT_ERROR(ckpt_shard_writer_add(w, "huge", ZT_F64, UINT64_MAX / 4), ZT_ERR_USAGE,
                 testutil_fmt("%s: section 'huge': the file would be too large", path));
    EXPECT_OK(ckpt_shard_writer_begin(w));
    /* Too many elements: refused, nothing written, the writer goes on. */
    float a[3] = {1, 2, 3};
    EXPECT_ERROR(ckpt_shard_writer_write(w, a, 4), ZT_ERR_USAGE,
                 testutil_fmt("%s: writing 4 elements, but only 3 of those declared remain", path));
    EXPECT_OK(ckpt_shard_writer_write(w, a, 2));
    unsigned char u = 7;
    EXPECT_OK(ckpt_shard_writer_write(w, &u, 1));
    EXPECT_OK(ckpt_shard_writer_finish(w, NULL, NULL));
    struct ckpt_shard *s;
    EXPECT_OK(ckpt_shard_open(path, &s));
    EXPECT_OK(ckpt_shard_verify(s));
    ck_assert_int_eq(ckpt_shard_header(s)->n_sections, 2);
    ckpt_shard_close(s);
}
END_TEST

START_TEST(test_shard_finish_with_missing_elements)
{
    const char *dir = testutil_tmpdir("ckpt");
    const char *path = testutil_path_in(dir, "w.bin");
    write_text(path, "older file");
    struct ckpt_shard_writer *w;
    EXPECT_OK(ckpt_shard_writer_open(path, 0, 1, &w));
    EXPECT_OK(ckpt_shard_writer_add(w, "x", ZT_F32, 2));
    EXPECT_OK(ckpt_shard_writer_add(w, "y", ZT_I32, 5));
    EXPECT_OK(ckpt_shard_writer_begin(w));
    int32_t v[4] = {0};
    EXPECT_OK(ckpt_shard_writer_write(w, v, 4));
    EXPECT_ERROR(ckpt_shard_writer_finish(w, NULL, NULL), ZT_ERR_USAGE,
                 testutil_fmt("%s: finished after 4 of 7 elements (section 'y' has 2 of 5)", path));
    ck_assert_int_eq(count_entries(dir), 1); /* temp file removed */
    size_t n;
    unsigned char *b = testutil_read_file(path, &n);
    ck_assert_uint_eq(n, 10);
    ck_assert_mem_eq(b, "older file", 10); /* PATH untouched */
    free(b);
}
END_TEST

START_TEST(test_shard_abort_leaves_the_old_file)
{
    const char *dir = testutil_tmpdir("ckpt");
    const char *path = testutil_path_in(dir, "rank-00000.bin");
    uint64_t bytes, checksum;
    write_shard(path, 0, 1, 1000, &bytes, &checksum);
    size_t n0;
    unsigned char *before = testutil_read_file(path, &n0);
    struct ckpt_shard_writer *w;
    EXPECT_OK(ckpt_shard_writer_open(path, 0, 1, &w));
    EXPECT_OK(ckpt_shard_writer_add(w, "params", ZT_F32, 100));
    EXPECT_OK(ckpt_shard_writer_begin(w));
    float v[50] = {0};
    EXPECT_OK(ckpt_shard_writer_write(w, v, 50));
    ck_assert_int_eq(count_entries(dir), 2); /* the temp file exists meanwhile */
    ckpt_shard_writer_abort(w);
    ckpt_shard_writer_abort(NULL);
    ck_assert_int_eq(count_entries(dir), 1);
    size_t n1;
    unsigned char *after = testutil_read_file(path, &n1);
    ck_assert_uint_eq(n1, n0);
    ck_assert_mem_eq(after, before, n0);
    free(before);
    free(after);
}
END_TEST

START_TEST(test_shard_open_rejects_malformed_headers)
{
    const char *dir = testutil_tmpdir("ckpt");
    const char *good = testutil_path_in(dir, "good.bin");
    const char *bad = testutil_path_in(dir, "bad.bin");
    write_shard(good, 1, 2, 1000, NULL, NULL);
    size_t n;
    unsigned char *orig = testutil_read_file(good, &n);
    unsigned char *b = malloc(n + 1);
    struct ckpt_shard *s;
    /* params starts after the 6-entry header (408), exp_avg after its 4000
     * bytes, exp_avg_sq after exp_avg's 1554; tail.bytes is the last 13. */
    ck_assert_uint_eq(testutil_get_le(orig + 24 + 64 + 48, 8), 4408);
    ck_assert_uint_eq(testutil_get_le(orig + 24 + 128 + 48, 8), 5962);
    struct {
        size_t at;
        const char *bytes; /* copied when not NULL, else value is put */
        size_t nbytes;
        uint64_t value;
        int width;
        const char *msg; /* the message after "PATH: " */
    } cases[] = {
        {0, "X", 1, 0, 0, "not a checkpoint shard (bad magic)"},
        {8, NULL, 0, 3, 4, "shard format version 3 is newer than this zerotrain understands (1)"},
        {8, NULL, 0, 0, 4, "shard format version 0 is not valid"},
        {12, NULL, 0, 2, 4, "rank 2 of world 2 is impossible"},
        {16, NULL, 0, 0, 4, "rank 1 of world 0 is impossible"},
        {20, NULL, 0, 2000000, 4, "2000000 sections exceed the limit of 1048576"},
        {20, NULL, 0, 1000, 4, "truncated: 8239 bytes, the table of 1000 sections needs 64024"},
        {20, NULL, 0, 5, 4,
         "section 'params': offset 408, expected 344 (sections follow the table without gaps)"},
        {24 + 64, "", 1, 0, 0, "section 1: name is empty"},
        {24 + 64 + 3, " ", 1, 0, 0, "section 1: name has a byte outside '!' .. '~'"},
        {24 + 64, "abcdefghijklmnopqrstuvwxyz012345", 32, 0, 0,
         "section 1: name is longer than 31 bytes"},
        {24 + 64 + 20, "x", 1, 0, 0, "section 'exp_avg': name padding is not zero"},
        {24 + 64 + 32, NULL, 0, 9, 4, "section 'exp_avg': unknown dtype code 9"},
        {24 + 64 + 36, NULL, 0, 1, 4, "section 'exp_avg': reserved field is 1, expected 0"},
        {24 + 64 + 48, NULL, 0, 0, 8,
         "section 'exp_avg': offset 0, expected 4408 (sections follow the table without gaps)"},
        {24 + 64 + 40, NULL, 0, 778, 8,
         "section 'exp_avg_sq': offset 5962, expected 5964 (sections follow the table without "
         "gaps)"},
        {24 + 64 * 5 + 40, NULL, 0, 14, 8,
         "truncated: 8239 bytes, section 'tail.bytes' (14 U8 elements) does not fit"},
        {24 + 64 * 5 + 40, NULL, 0, 12, 8,
         "8239 bytes, but the sections end at byte 8238 (trailing bytes)"},
        {24 + 128, "exp_avg\0\0\0", 10, 0, 0, "section 'exp_avg' appears twice"},
    };
    ck_assert_uint_eq(n, 8239);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memcpy(b, orig, n);
        if (cases[c].bytes)
            memcpy(b + cases[c].at, cases[c].bytes, cases[c].nbytes);
        else
            testutil_put_le(b + cases[c].at, cases[c].value, cases[c].width);
        testutil_write_file(bad, b, n);
        zt_status st = ckpt_shard_open(bad, &s);
        ck_assert_msg(st == ZT_ERR_CHECKPOINT, "case %zu: %s: %s", c, zt_status_str(st),
                      zt_error_message());
        ck_assert_ptr_null(s);
        ck_assert_msg(strcmp(zt_error_message(), testutil_fmt("%s: %s", bad, cases[c].msg)) == 0,
                      "case %zu: '%s'", c, zt_error_message());
    }
    /* Trailing bytes after a good file. */
    memcpy(b, orig, n);
    testutil_write_file(bad, b, n);
    EXPECT_OK(ckpt_shard_open(bad, &s));
    ckpt_shard_close(s);
    b[n] = 0;
    testutil_write_file(bad, b, n + 1);
    EXPECT_ERROR(
        ckpt_shard_open(bad, &s), ZT_ERR_CHECKPOINT,
        testutil_fmt("%s: 8240 bytes, but the sections end at byte 8239 (trailing bytes)", bad));
    EXPECT_ERROR(ckpt_shard_open(testutil_path_in(dir, "none.bin"), &s), ZT_ERR_IO,
                 testutil_fmt("%s/none.bin: no such file or directory", dir));
    EXPECT_ERROR(ckpt_shard_open(dir, &s), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s: not a regular file", dir));
    free(b);
    free(orig);
}
END_TEST

START_TEST(test_shard_truncated_at_every_header_byte_and_in_data)
{
    const char *dir = testutil_tmpdir("ckpt");
    const char *good = testutil_path_in(dir, "good.bin");
    const char *bad = testutil_path_in(dir, "bad.bin");
    write_shard(good, 0, 1, 1000, NULL, NULL);
    size_t n;
    unsigned char *orig = testutil_read_file(good, &n);
    size_t cuts[HEADER_END + 4];
    size_t n_cuts = 0;
    for (size_t c = 0; c <= HEADER_END; c++)
        cuts[n_cuts++] = c;
    cuts[n_cuts++] = HEADER_END + 1;
    cuts[n_cuts++] = n / 2;
    cuts[n_cuts++] = n - 1;
    for (size_t k = 0; k < n_cuts; k++) {
        testutil_write_file(bad, orig, cuts[k]);
        struct ckpt_shard *s;
        zt_status st = ckpt_shard_open(bad, &s);
        if (st != ZT_ERR_CHECKPOINT || strncmp(zt_error_message(), bad, strlen(bad)) != 0)
            ck_abort_msg("cut at %zu: %s: %s", cuts[k], zt_status_str(st), zt_error_message());
        if (cuts[k] >= 8 && !strstr(zt_error_message(), "truncated"))
            ck_abort_msg("cut at %zu: %s", cuts[k], zt_error_message());
    }
    free(orig);
}
END_TEST

START_TEST(test_shard_verify_names_the_section)
{
    const char *dir = testutil_tmpdir("ckpt");
    const char *path = testutil_path_in(dir, "s.bin");
    write_shard(path, 0, 1, 1000, NULL, NULL);
    struct ckpt_shard *s;
    EXPECT_OK(ckpt_shard_open(path, &s));
    const struct ckpt_section sec = *ckpt_shard_find(s, "exp_avg");
    ckpt_shard_close(s);
    flip_byte(path, sec.offset + 100, 0x10);
    size_t n;
    unsigned char *f = testutil_read_file(path, &n);
    uint64_t computed = fnv1a(f + sec.offset, sec.count * 2);
    free(f);
    EXPECT_OK(ckpt_shard_open(path, &s)); /* the header is fine */
    EXPECT_ERROR(ckpt_shard_verify(s), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s: checksum mismatch in section 'exp_avg' (stored 0x%016llx, "
                              "computed 0x%016llx)",
                              path, (unsigned long long)sec.checksum,
                              (unsigned long long)computed));
    ckpt_shard_close(s);
}
END_TEST

/* ---- meta.json ---- */

START_TEST(test_meta_round_trip_every_field)
{
    const char *dir = testutil_tmpdir("ckpt");
    const char *path = testutil_path_in(dir, "meta.json");
    struct ckpt_file files[3] = {
        {1, 0}, {(1ull << 53) + 1, 0xffffffffffffffffull}, {UINT64_MAX, 0x8000000000000001ull}};
    struct ckpt_meta m;
    fill_meta(&m, (INT64_C(1) << 53) + 3, 3, files);
    free(m.config_yaml);
    const char *cfg = "name: \"a \\\"quoted\\\" run\"\n\ttab\r\n\x01\x1f ctl\n"
                      "unicode: é ü 中文 😀\n\\back\\slash/";
    m.config_yaml = malloc(strlen(cfg) + 1);
    strcpy(m.config_yaml, cfg);
    m.stage = 3;
    strcpy(m.precision, "fp16");
    strcpy(m.gemm, "onednn 2.6.3 brg:avx512_core_amx");
    m.unit_numel[1] = UINT64_MAX;
    m.unit_shard[2] = (1ull << 63) + 5;
    m.n_params = (1ull << 53) + 1;
    zt_kv_add_int(&m.model, "big", INT64_MIN);
    zt_kv_add_real(&m.optimizer, "tiny", 5e-324);
    m.seed = 0xfedcba9876543210ull;
    m.samples_seen = (1ull << 63) + 12345;
    m.loss_scale = 0.1;
    m.scaler_good_steps = INT64_MIN;
    m.scaler_hysteresis = -7;
    m.optimizer_steps = INT64_MAX;
    m.format_version = 99; /* ignored: the current version is written */
    EXPECT_OK(ckpt_meta_write(path, &m));
    ck_assert_int_eq(count_entries(dir), 1);

    /* The text holds the exact decimal a double could not. */
    size_t tn;
    char *text = (char *)testutil_read_file(path, &tn);
    text[tn] = '\0';
    ck_assert_ptr_nonnull(strstr(text, "\"seed\": 18364758544493064720,"));
    ck_assert_ptr_nonnull(strstr(text, "\"samples_seen\": 9223372036854788153,"));
    ck_assert_ptr_nonnull(strstr(text, "\"checksum\": \"0xffffffffffffffff\""));
    ck_assert_ptr_nonnull(strstr(text, "\"format_version\": 2,"));
    ck_assert_ptr_nonnull(
        strstr(text, "\"model\": {\"family\": \"gpt2\", \"vocab_size\": 50257, "));
    ck_assert_ptr_nonnull(strstr(text, "\"big\": -9223372036854775808}"));
    /* reals in their shortest exact form */
    ck_assert_ptr_nonnull(
        strstr(text, "\"optimizer\": {\"type\": \"AdamW\", \"lr\": 0.0003, \"beta2\": 0.95, "));
    free(text);

    struct ckpt_meta r;
    EXPECT_OK(ckpt_meta_read(path, &r));
    ck_assert_uint_eq(r.format_version, 2);
    ck_assert_int_eq(r.step, m.step);
    ck_assert_int_eq(r.world, 3);
    ck_assert_int_eq(r.stage, 3);
    ck_assert_str_eq(r.precision, "fp16");
    ck_assert_str_eq(r.gemm, "onednn 2.6.3 brg:avx512_core_amx");
    ck_assert_str_eq(r.config_yaml, cfg);
    ck_assert_int_eq(r.n_units, 3);
    for (int u = 0; u < 3; u++) {
        ck_assert_uint_eq(r.unit_numel[u], m.unit_numel[u]);
        ck_assert_uint_eq(r.unit_shard[u], m.unit_shard[u]);
    }
    ck_assert_uint_eq(r.n_params, m.n_params);
    ck_assert(zt_kv_equal(&r.model, &m.model));
    ck_assert(zt_kv_equal(&r.optimizer, &m.optimizer));
    ck_assert_uint_eq(r.seed, m.seed);
    ck_assert_uint_eq(r.samples_seen, m.samples_seen);
    ck_assert(r.loss_scale == 0.1); /* exact: %.17g round-trips */
    ck_assert_int_eq(r.scaler_good_steps, INT64_MIN);
    ck_assert_int_eq(r.scaler_hysteresis, -7);
    ck_assert_int_eq(r.optimizer_steps, INT64_MAX);
    for (int k = 0; k < 3; k++) {
        ck_assert_uint_eq(r.files[k].bytes, files[k].bytes);
        ck_assert_uint_eq(r.files[k].checksum, files[k].checksum);
    }
    ckpt_meta_free(&r);
    ckpt_meta_free(&r); /* idempotent */
    ckpt_meta_free(NULL);

    /* No units at all. */
    m.n_units = 0;
    EXPECT_OK(ckpt_meta_write(path, &m));
    EXPECT_OK(ckpt_meta_read(path, &r));
    ck_assert_int_eq(r.n_units, 0);
    ckpt_meta_free(&r);
    ckpt_meta_free(&m);
}
END_TEST

/* A hand-written meta.json; `extra` goes in after "world" (may be ""). */
static const char *meta_text(const char *version, const char *world_line, const char *extra)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"format_version\": %s, \"step\": 5,%s%s \"stage\": 1,\n"
             " \"precision\": \"fp32\", \"n_params\": 10, \"vocab_size\": 256, \"block_size\": 8,\n"
             " \"n_layer\": 1, \"n_head\": 1, \"n_embd\": 4, \"seed\": 18446744073709551615,\n"
             " \"samples_seen\": 0, \"loss_scale\": 1e3, \"scaler_good_steps\": -3,\n"
             " \"scaler_hysteresis\": 0, \"optimizer_steps\": 5,\n"
             " \"units\": [ {\"shard\": 5, \"numel\": 10} ],\n"
             " \"files\": [{\"name\": \"rank-00000.bin\", \"bytes\": 400, \"checksum\": "
             "\"0x0123456789abcdef\"}],\n"
             " \"config_yaml\": \"a\\u00e9\\ud83d\\ude00\\n\\\"q\\\"\\/\\t\", \"unknown\": [1, "
             "{\"x\": null}, true]}\n",
             version, world_line, extra);
    return buf;
}

/* The adapters ("lora") and a base kept outside the shards ("base", format
 * 3) read back as written; a checkpoint without a base stays format 2. */
START_TEST(test_meta_records_adapters_and_base)
{
    const char *dir = testutil_tmpdir("ckpt");
    const char *path = testutil_path_in(dir, "meta.json");
    struct ckpt_file files[1] = {{400, 7}};
    char *targets[] = {"c_attn", "c_proj"};
    struct ckpt_meta m, r;
    fill_meta(&m, 5, 1, files);
    m.lora = (struct ckpt_lora){
        .r = 8, .alpha = 16, .dropout = 0.05, .bias = "none", .targets = targets, .n_targets = 2};
    m.base = (struct ckpt_base){.kind = CKPT_BASE_FILE,
                                .path = "w/model.safetensors",
                                .checksum = 0xfedcba9876543210ull,
                                .bytes = 149832};
    EXPECT_OK(ckpt_meta_write(path, &m));
    size_t tn;
    char *text = (char *)testutil_read_file(path, &tn);
    text[tn] = '\0';
    ck_assert_ptr_nonnull(strstr(text, "\"format_version\": 3,"));
    ck_assert_ptr_nonnull(strstr(text, "\"lora\": {\"r\": 8, \"lora_alpha\": 16.0, "
                                       "\"lora_dropout\": 0.05, \"bias\": \"none\", "
                                       "\"target_modules\": [\"c_attn\", \"c_proj\"]},"));
    ck_assert_ptr_nonnull(strstr(text,
                                 "\"base\": {\"path\": \"w/model.safetensors\", "
                                 "\"checksum\": \"0xfedcba9876543210\", \"bytes\": 149832},"));
    ck_assert_ptr_null(strstr(text, "\"gemm\"")); /* none recorded: the key is left out */
    free(text);
    EXPECT_OK(ckpt_meta_read(path, &r));
    ck_assert_str_eq(r.gemm, "");
    ck_assert_int_eq(r.lora.r, 8);
    ck_assert(r.lora.alpha == 16.0 && r.lora.dropout == 0.05);
    ck_assert_str_eq(r.lora.bias, "none");
    ck_assert_int_eq(r.lora.n_targets, 2);
    ck_assert_str_eq(r.lora.targets[1], "c_proj");
    ck_assert_int_eq(r.base.kind, CKPT_BASE_FILE);
    ck_assert_str_eq(r.base.path, "w/model.safetensors");
    ck_assert_uint_eq(r.base.checksum, 0xfedcba9876543210ull);
    ck_assert_uint_eq(r.base.bytes, 149832);
    ckpt_meta_free(&r);

    m.base = (struct ckpt_base){.kind = CKPT_BASE_SEED, .seed = UINT64_MAX};
    EXPECT_OK(ckpt_meta_write(path, &m));
    EXPECT_OK(ckpt_meta_read(path, &r));
    ck_assert_int_eq(r.base.kind, CKPT_BASE_SEED);
    ck_assert_uint_eq(r.base.seed, UINT64_MAX);
    ckpt_meta_free(&r);

    m.base.kind = CKPT_BASE_STORED;
    EXPECT_OK(ckpt_meta_write(path, &m));
    EXPECT_OK(ckpt_meta_read(path, &r));
    ck_assert_uint_eq(r.format_version, 2);
    ck_assert_int_eq(r.base.kind, CKPT_BASE_STORED);
    ck_assert_int_eq(r.lora.r, 8);
    ckpt_meta_free(&r);
    m.lora.targets = NULL; /* the test's */
    m.lora.n_targets = 0;
    ckpt_meta_free(&m);
}
END_TEST

START_TEST(test_meta_reads_hand_written_json)
{
    const char *dir = testutil_tmpdir("ckpt");
    const char *path = testutil_path_in(dir, "meta.json");
    write_text(path, meta_text("1", " \"world\": 1,", ""));
    struct ckpt_meta r;
    EXPECT_OK(ckpt_meta_read(path, &r));
    ck_assert_uint_eq(r.seed, UINT64_MAX);
    ck_assert(r.loss_scale == 1000.0);
    ck_assert_int_eq(r.scaler_good_steps, -3);
    ck_assert_str_eq(r.config_yaml, "a\xc3\xa9\xf0\x9f\x98\x80\n\"q\"/\t");
    ck_assert_uint_eq(r.unit_numel[0], 10);
    ck_assert_uint_eq(r.unit_shard[0], 5);
    ck_assert_uint_eq(r.files[0].checksum, 0x0123456789abcdefull);
    /* version 1: GPT-2 from the flat shape keys, AdamW */
    struct zt_kvlist gpt2;
    zt_kv_init(&gpt2, "gpt2");
    zt_kv_add_int(&gpt2, "vocab_size", 256);
    zt_kv_add_int(&gpt2, "block_size", 8);
    zt_kv_add_int(&gpt2, "n_layer", 1);
    zt_kv_add_int(&gpt2, "n_head", 1);
    zt_kv_add_int(&gpt2, "n_embd", 4);
    ck_assert(zt_kv_equal(&r.model, &gpt2));
    ck_assert_str_eq(r.optimizer.kind, "AdamW");
    ck_assert_int_eq(r.optimizer.n, 0);
    ckpt_meta_free(&r);
}
END_TEST

/* Where `mark` starts in text, plus delta: the byte an error names. */
static size_t byte_of(const char *text, const char *mark, int delta)
{
    const char *at = strstr(text, mark);
    ck_assert_msg(at != NULL, "'%s' not in the text", mark);
    return (size_t)(at - text) + (size_t)delta;
}

/* Reads path and expects ZT_ERR_CHECKPOINT with "PATH: msg", msg being a
 * format with one %zu for the byte of `mark` (+ delta) when mark is set. */
static void expect_meta_error(const char *path, const char *text, const char *msg, const char *mark,
                              int delta, size_t c)
{
    write_text(path, text);
    struct ckpt_meta r;
    zt_status st = ckpt_meta_read(path, &r);
    ck_assert_msg(st == ZT_ERR_CHECKPOINT, "case %zu: %s: %s", c, zt_status_str(st),
                  zt_error_message());
    char want[1024];
    if (mark)
        snprintf(want, sizeof want, msg, byte_of(text, mark, delta));
    else
        snprintf(want, sizeof want, "%s", msg);
    ck_assert_msg(strcmp(zt_error_message(), testutil_fmt("%s: %s", path, want)) == 0,
                  "case %zu: '%s', expected '%s'", c, zt_error_message(), want);
    ck_assert_ptr_null(r.files);
    ck_assert_ptr_null(r.config_yaml);
    ck_assert_ptr_null(r.unit_numel);
}

START_TEST(test_meta_errors_name_the_problem)
{
    const char *dir = testutil_tmpdir("ckpt");
    const char *path = testutil_path_in(dir, "meta.json");
    struct {
        const char *version, *world, *extra, *msg, *mark;
        int delta;
    } cases[] = {
        {"1", "", "", "missing key 'world'", NULL, 0},
        {"5", "", "", "format version 5 is newer than this zerotrain understands (4)", NULL, 0},
        {"4", " \"world\": 1,", "", "missing key 'layout'", NULL, 0},
        {"4", " \"world\": 1,", " \"layout\": {\"tp\": 1, \"pp\": 2, \"dp\": 1},",
         "layout tp 1 x pp 2 x dp 1 is not the 1 ranks of 'world'", NULL, 0},
        {"4", " \"world\": 1,", " \"layout\": {\"tp\": 1, \"pp\": 1},", "missing key 'layout.dp'",
         NULL, 0},
        {"0", " \"world\": 1,", "", "format version 0 is not valid", NULL, 0},
        {"\"1\"", " \"world\": 1,", "", "key 'format_version' must be an integer, not a string",
         NULL, 0},
        {"1", " \"world\": 1.5,", "", "key 'world' must be an integer, not a fractional number",
         NULL, 0},
        {"1", " \"world\": 0,", "", "key 'world' is 0, must be in 1 .. 2147483647", NULL, 0},
        {"1", " \"world\": -2,", "", "key 'world' is -2, must be in 1 .. 2147483647", NULL, 0},
        {"1", " \"world\": 2,", "", "key 'files' lists 1 shard files, but world is 2", NULL, 0},
        {"1", " \"world\": 1, \"world\": 1,", "", "duplicate key 'world'", NULL, 0},
        {"1", " \"world\": 1,", " \"stage\": 4,", "duplicate key 'stage'", NULL, 0},
        {"1", " \"world\": 99999999999999999999,", "",
         "not valid JSON at byte %zu: integer out of the 64-bit range", "9999", 0},
        {"1", " \"world\": 1,", " \"x\": 01,",
         "not valid JSON at byte %zu: leading zeros are not "
         "allowed",
         "01,", 0},
        {"1", " \"world\": 1,", " \"x\": [1,],", "not valid JSON at byte %zu: expected a value",
         "],", 0},
        {"1", " \"world\": 1,", " \"x\": \"\\q\",", "not valid JSON at byte %zu: unknown escape",
         "\\q", 0},
        {"1", " \"world\": 1,", " \"x\": \"\\ud800\",",
         "not valid JSON at byte %zu: unpaired surrogate in a \\u escape", "\\ud800", 0},
        {"1", " \"world\": 1,", " \"x\": \"\\u12g4\",",
         "not valid JSON at byte %zu: \\u must be followed by 4 hex digits", "\\u12g4", 0},
        {"1", " \"world\": 1,", " \"x\": \"\\u0000\",",
         "not valid JSON at byte %zu: \\u0000 is not allowed in a string", "\\u0000", 0},
        {"1", " \"world\": 1,", " \"x\": \"\xc3\x28\",",
         "not valid JSON at byte %zu: invalid "
         "UTF-8",
         "\xc3\x28", 0},
        {"1", " \"world\": 1,", " \"x\": \"\xed\xa0\x80\",",
         "not valid JSON at byte %zu: invalid "
         "UTF-8",
         "\xed\xa0\x80", 0},
        {"1", " \"world\": 1,", " \"x\": \"a\tb\",",
         "not valid JSON at byte %zu: control character in a string", "\tb", 0},
        {"1", " \"world\": 1,", " \"x\": tru,", "not valid JSON at byte %zu: expected a value",
         "tru,", 0},
        {"1", " \"world\": 1,", " \"x\": 1.,",
         "not valid JSON at byte %zu: a '.' must be followed by digits", "1.,", 0},
        {"1", " \"world\": 1,", " \"x\": 1e,",
         "not valid JSON at byte %zu: an exponent must have digits", "1e,", 0},
        {"1", " \"world\": 1,", " \"x\" 1,",
         "not valid JSON at byte %zu: expected ':' after the key", "\"x\" 1", 4},
        {"1", " \"world\": 1,", " x: 1,", "not valid JSON at byte %zu: expected a string key",
         "x: 1", 0},
        {"1", " \"world\": 1,", " \"x\": {\"a\": 1 \"b\": 2},",
         "not valid JSON at byte %zu: expected ',' or '}'", "\"b\"", 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        expect_meta_error(path, meta_text(cases[c].version, cases[c].world, cases[c].extra),
                          cases[c].msg, cases[c].mark, cases[c].delta, c);
}
END_TEST

START_TEST(test_meta_field_errors)
{
    const char *dir = testutil_tmpdir("ckpt");
    const char *path = testutil_path_in(dir, "meta.json");
    struct {
        const char *from, *to, *msg, *mark;
    } cases[] = {
        {"\"precision\": \"fp32\"", "\"precision\": \"fp8\"",
         "key 'precision' is 'fp8', expected fp32, bf16 or fp16", NULL},
        {"\"precision\": \"fp32\"", "\"precision\": \"fp32\", \"gemm\": 7",
         "key 'gemm' must be a string", NULL},
        {"\"seed\": 18446744073709551615", "\"seed\": 18446744073709551616",
         "not valid JSON at byte %zu: integer out of the 64-bit range", "18446744073709551616"},
        {"\"seed\": 18446744073709551615", "\"seed\": -1", "key 'seed' must not be negative", NULL},
        {"\"rank-00000.bin\"", "\"rank-00001.bin\"",
         "key 'files[0].name' is 'rank-00001.bin', expected 'rank-00000.bin'", NULL},
        {"\"0x0123456789abcdef\"", "\"0x0123456789ABCDEF\"",
         "key 'files[0].checksum' must be \"0x\" and 16 lowercase hex digits", NULL},
        {"\"0x0123456789abcdef\"", "\"0x0123456789abcde\"",
         "key 'files[0].checksum' must be \"0x\" and 16 lowercase hex digits", NULL},
        {"\"bytes\": 400", "\"bytes\": \"400\"",
         "key 'files[0].bytes' must be an integer, not a string", NULL},
        {"{\"shard\": 5, \"numel\": 10}", "{\"shard\": 5}", "missing key 'units[0].numel'", NULL},
        {"[ {\"shard\": 5, \"numel\": 10} ]", "[ 7 ]",
         "key 'units[0]' must be an object, not an integer", NULL},
        {"\"units\": [", "\"units\": 3, \"u\": [", "key 'units' must be an array, not an integer",
         NULL},
        {"\"loss_scale\": 1e3", "\"loss_scale\": \"x\"",
         "key 'loss_scale' must be a number, not a string", NULL},
        {"\"loss_scale\": 1e3", "\"loss_scale\": 1e999",
         "not valid JSON at byte %zu: number out of the double range", "1e999"},
        {"\"stage\": 1", "\"stage\": 4", "key 'stage' is 4, must be in 0 .. 3", NULL},
        {"\"step\": 5", "\"step\": -9223372036854775808",
         "key 'step' is -9223372036854775808, must be in 0 .. 9223372036854775807", NULL},
        {"\"step\": 5", "\"step\": -9223372036854775809",
         "not valid JSON at byte %zu: integer out of the 64-bit range", "-9223372036854775809"},
        {"\"step\": 5", "\"step\": 9223372036854775808",
         "key 'step' is 9223372036854775808, must be in 0 .. 9223372036854775807", NULL},
        {"\"config_yaml\": \"", "\"config_yaml\": 5, \"x\": \"",
         "key 'config_yaml' must be a string, not an integer", NULL},
    };
    const char *base = meta_text("1", " \"world\": 1,", "");
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", base);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *at = strstr(copy, cases[c].from);
        ck_assert_ptr_nonnull(at);
        char text[4096];
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - copy), copy, cases[c].to,
                 at + strlen(cases[c].from));
        expect_meta_error(path, text, cases[c].msg, cases[c].mark, 0, c);
    }
    write_text(path, "[1, 2]");
    struct ckpt_meta r;
    EXPECT_ERROR(ckpt_meta_read(path, &r), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s: the top level must be an object, not an array", path));
    write_text(path, "");
    EXPECT_ERROR(ckpt_meta_read(path, &r), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s: not valid JSON at byte 0: expected a value", path));
    write_text(path, "{} x");
    EXPECT_ERROR(
        ckpt_meta_read(path, &r), ZT_ERR_CHECKPOINT,
        testutil_fmt("%s: not valid JSON at byte 3: unexpected text after the value", path));
    write_text(path, "{\"a\": \"open");
    EXPECT_ERROR(ckpt_meta_read(path, &r), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s: not valid JSON at byte 6: unterminated string", path));
    char deep[80];
    memset(deep, '[', 40);
    memset(deep + 40, ']', 40);
    testutil_write_file(path, deep, 80);
    EXPECT_ERROR(
        ckpt_meta_read(path, &r), ZT_ERR_CHECKPOINT,
        testutil_fmt("%s: not valid JSON at byte 32: nesting deeper than 32 levels", path));
    EXPECT_ERROR(ckpt_meta_read(testutil_path_in(dir, "none.json"), &r), ZT_ERR_IO,
                 testutil_fmt("%s/none.json: no such file or directory", dir));
    EXPECT_ERROR(ckpt_meta_read(dir, &r), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s: not a regular file", dir));
}
END_TEST

START_TEST(test_meta_write_refuses_what_cannot_be_read)
{
    const char *dir = testutil_tmpdir("ckpt");
    const char *path = testutil_path_in(dir, "meta.json");
    struct ckpt_file files[1] = {{1, 2}};
    struct ckpt_meta m;
    fill_meta(&m, 5, 1, files);
    m.world = 0;
    EXPECT_ERROR(ckpt_meta_write(path, &m), ZT_ERR_USAGE,
                 testutil_fmt("%s: world is 0, must be in 1 .. 2147483647", path));
    m.world = 1;
    strcpy(m.precision, "fp8");
    EXPECT_ERROR(ckpt_meta_write(path, &m), ZT_ERR_USAGE,
                 testutil_fmt("%s: precision 'fp8' is not fp32, bf16 or fp16", path));
    strcpy(m.precision, "fp32");
    m.loss_scale = INFINITY;
    EXPECT_ERROR(ckpt_meta_write(path, &m), ZT_ERR_USAGE,
                 testutil_fmt("%s: loss_scale must be finite", path));
    m.loss_scale = 1;
    m.step = -1;
    EXPECT_STATUS(ckpt_meta_write(path, &m), ZT_ERR_USAGE);
    m.step = 1;
    m.config_yaml[3] = (char)0xff;
    EXPECT_ERROR(ckpt_meta_write(path, &m), ZT_ERR_USAGE,
                 testutil_fmt("%s: the config text is not valid UTF-8 at byte 3", path));
    ck_assert_int_eq(count_entries(dir), 0); /* nothing was created */
    ckpt_meta_free(&m);
}
END_TEST

/* A pipeline's grid ("layout") and each unit's stage read back as
 * written, as format 4; a data-parallel checkpoint stays format 2 and
 * reads as every unit on stage 0 of a {1, 1, world} grid; a stage outside
 * the grid or a grid that is not the world is refused. */
START_TEST(test_meta_records_the_layout)
{
    const char *dir = testutil_tmpdir("ckpt");
    const char *path = testutil_path_in(dir, "meta.json");
    struct ckpt_file files[4] = {{1, 2}, {3, 4}, {5, 6}, {7, 8}};
    struct ckpt_meta m, r;
    fill_meta(&m, 5, 4, files);
    EXPECT_OK(ckpt_meta_write(path, &m));
    EXPECT_OK(ckpt_meta_read(path, &r));
    ck_assert_uint_eq(r.format_version, 2);
    ck_assert_int_eq(r.layout.tp, 1);
    ck_assert_int_eq(r.layout.pp, 1);
    ck_assert_int_eq(r.layout.dp, 4);
    for (int u = 0; u < 3; u++)
        ck_assert_int_eq(r.unit_stage[u], 0);
    ckpt_meta_free(&r);

    m.layout = (struct ckpt_layout){1, 2, 2, 0};
    m.unit_stage = calloc(3, sizeof *m.unit_stage);
    m.unit_stage[1] = m.unit_stage[2] = 1;
    EXPECT_OK(ckpt_meta_write(path, &m));
    const char *text = testutil_slurp(path);
    ck_assert_ptr_nonnull(strstr(text, "\"format_version\": 4,"));
    ck_assert_ptr_nonnull(strstr(text, "\"layout\": {\"tp\": 1, \"pp\": 2, \"dp\": 2},"));
    ck_assert_ptr_nonnull(strstr(text, "\"shard\": 251, \"pipeline_stage\": 1}"));
    EXPECT_OK(ckpt_meta_read(path, &r));
    ck_assert_uint_eq(r.format_version, 4);
    ck_assert_int_eq(r.layout.pp, 2);
    ck_assert_int_eq(r.layout.dp, 2);
    ck_assert_int_eq(r.unit_stage[0], 0);
    ck_assert_int_eq(r.unit_stage[2], 1);
    ckpt_meta_free(&r);

    m.unit_stage[2] = 2;
    EXPECT_ERROR(ckpt_meta_write(path, &m), ZT_ERR_USAGE,
                 testutil_fmt("%s: units[2].pipeline_stage is 2, outside 0 .. 1", path));
    m.unit_stage[2] = 1;
    m.layout.dp = 3;
    EXPECT_ERROR(ckpt_meta_write(path, &m), ZT_ERR_USAGE,
                 testutil_fmt("%s: layout tp 1 x pp 2 x dp 3 is not the 4 ranks of 'world'", path));

    /* tensor-parallel slices: each unit's slice size is recorded */
    m.layout = (struct ckpt_layout){2, 2, 1, 0};
    m.unit_slice = malloc(3 * sizeof *m.unit_slice);
    for (int u = 0; u < 3; u++)
        m.unit_slice[u] = 600 + (uint64_t)u;
    EXPECT_OK(ckpt_meta_write(path, &m));
    text = testutil_slurp(path);
    ck_assert_ptr_nonnull(strstr(text, "\"pipeline_stage\": 1, \"slice_numel\": 602}"));
    EXPECT_OK(ckpt_meta_read(path, &r));
    ck_assert_int_eq(r.layout.tp, 2);
    ck_assert_uint_eq(r.unit_slice[0], 600);
    ck_assert_uint_eq(r.unit_slice[2], 602);
    ckpt_meta_free(&r);
    m.unit_slice[1] = 2000;
    EXPECT_OK(ckpt_meta_write(path, &m));
    EXPECT_ERROR(ckpt_meta_read(path, &r), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s: units[1].slice_numel is 2000, more than the unit's 1001", path));
    /* without the layout's tensor-parallel size, no slices */
    m.layout = (struct ckpt_layout){1, 2, 2, 0};
    EXPECT_OK(ckpt_meta_write(path, &m));
    ck_assert_ptr_null(strstr(testutil_slurp(path), "slice_numel"));
    EXPECT_OK(ckpt_meta_read(path, &r));
    ck_assert_uint_eq(r.unit_slice[1], 1001);
    ckpt_meta_free(&r);
    ckpt_meta_free(&m);
}
END_TEST

/* ---- folders ---- */

START_TEST(test_step_names_and_paths)
{
    char buf[CKPT_STEP_NAME_MAX];
    ckpt_step_dirname(120, buf, sizeof buf);
    ck_assert_str_eq(buf, "step-00000120");
    ckpt_step_dirname(0, buf, sizeof buf);
    ck_assert_str_eq(buf, "step-00000000");
    ckpt_step_dirname(123456789012LL, buf, sizeof buf);
    ck_assert_str_eq(buf, "step-123456789012");
    char p[64];
    EXPECT_OK(ckpt_shard_path("ck/step-00000001", 3, p, sizeof p));
    ck_assert_str_eq(p, "ck/step-00000001/rank-00003.bin");
    EXPECT_OK(ckpt_meta_path("ck/step-00000001", p, sizeof p));
    ck_assert_str_eq(p, "ck/step-00000001/meta.json");
    EXPECT_STATUS(ckpt_meta_path("ck/step-00000001", p, 20), ZT_ERR_USAGE);
}
END_TEST

START_TEST(test_publish_and_find_latest)
{
    const char *root = testutil_tmpdir("ckpt");
    const char *dir = testutil_path_in(root, "runs/a/ckpt"); /* parents made on demand */
    char step_dir[4096];
    int found = 7;
    EXPECT_OK(ckpt_find_latest(dir, step_dir, sizeof step_dir, &found));
    ck_assert_int_eq(found, 0); /* no folder */
    save_checkpoint(dir, 100, 2, 0);
    EXPECT_OK(ckpt_find_latest(dir, step_dir, sizeof step_dir, &found));
    ck_assert_int_eq(found, 0); /* written but not published */
    EXPECT_OK(ckpt_publish(dir, 100));
    char *latest = read_latest_text(dir);
    ck_assert_str_eq(latest, "step-00000100\n");
    free(latest);
    EXPECT_OK(ckpt_find_latest(dir, step_dir, sizeof step_dir, &found));
    ck_assert_int_eq(found, 1);
    ck_assert_str_eq(step_dir, testutil_path_in(dir, "step-00000100"));
    save_checkpoint(dir, 120, 2, 1);
    EXPECT_OK(ckpt_find_latest(dir, step_dir, sizeof step_dir, &found));
    ck_assert_str_eq(step_dir, testutil_path_in(dir, "step-00000120"));
    EXPECT_STATUS(ckpt_find_latest(dir, step_dir, 8, &found), ZT_ERR_USAGE);
    /* Only latest and the step folders are in DIR: no temp files. */
    ck_assert_int_eq(count_entries(dir), 3);
}
END_TEST

START_TEST(test_incomplete_step_is_not_latest)
{
    const char *dir = testutil_tmpdir("ckpt");
    save_checkpoint(dir, 100, 2, 1);
    char step_dir[4096];
    EXPECT_OK(ckpt_dir_prepare(dir, 120, step_dir, sizeof step_dir));
    write_shard(shard_path(step_dir, 0), 0, 2, 1000, NULL, NULL);
    write_shard(shard_path(step_dir, 1), 1, 2, 1000, NULL, NULL);
    /* no meta.json: the save never completed */
    EXPECT_ERROR(
        ckpt_publish(dir, 120), ZT_ERR_CHECKPOINT,
        testutil_fmt("%s/meta.json: missing: the checkpoint was never completed", step_dir));
    int found;
    char got[4096];
    EXPECT_OK(ckpt_find_latest(dir, got, sizeof got, &found));
    ck_assert_int_eq(found, 1);
    ck_assert_str_eq(got, step_path(dir, 100));
    EXPECT_ERROR(
        ckpt_validate(step_dir, NULL), ZT_ERR_CHECKPOINT,
        testutil_fmt("%s/meta.json: missing: the checkpoint was never completed", step_dir));
}
END_TEST

START_TEST(test_find_latest_reports_a_broken_latest)
{
    const char *dir = testutil_tmpdir("ckpt");
    char got[4096];
    int found;
    write_text(testutil_path_in(dir, "latest"), "step-00000100\n");
    EXPECT_ERROR(ckpt_find_latest(dir, got, sizeof got, &found), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s/latest names step-00000100, which is not a complete checkpoint "
                              "(its folder is missing)",
                              dir));
    mkdir(step_path(dir, 100), 0777);
    EXPECT_ERROR(ckpt_find_latest(dir, got, sizeof got, &found), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s/latest names step-00000100, which is not a complete checkpoint "
                              "(meta.json missing)",
                              dir));
    ck_assert_int_eq(found, 0);
    ck_assert_int_eq(unlink(testutil_path_in(dir, "latest")), 0);
    save_checkpoint(dir, 100, 2, 0);
    write_text(testutil_path_in(dir, "latest"), "step-00000100\n");
    ck_assert_int_eq(unlink(shard_path(step_path(dir, 100), 1)), 0);
    EXPECT_ERROR(ckpt_find_latest(dir, got, sizeof got, &found), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s/latest names step-00000100, which is not a complete checkpoint: "
                              "%s/step-00000100/rank-00001.bin: missing (the checkpoint lists 2 "
                              "shard files)",
                              dir, dir));
    static const char *garbage[] = {"step-100\n",    "step-00000100\n\n", "",
                                    "step-0000010a", "../step-00000100",  "step-00000100\nx"};
    for (int g = 0; g < 6; g++) {
        write_text(testutil_path_in(dir, "latest"), garbage[g]);
        EXPECT_STATUS(ckpt_find_latest(dir, got, sizeof got, &found), ZT_ERR_CHECKPOINT);
        ck_assert_ptr_nonnull(strstr(zt_error_message(), "expected one line 'step-NNNNNNNN'"));
    }
    ck_assert_int_eq(unlink(testutil_path_in(dir, "latest")), 0);
    save_checkpoint(dir, 100, 2, 0);
    write_text(testutil_path_in(dir, "latest"), "step-00000100"); /* no newline: accepted */
    EXPECT_OK(ckpt_find_latest(dir, got, sizeof got, &found));
    ck_assert_int_eq(found, 1);
}
END_TEST

/* ckpt_resolve takes a step folder as it is and a checkpoint folder as the
 * step its latest names; anything else is named with what was expected. */
START_TEST(test_resolve_takes_both_kinds_of_folder)
{
    char root[4096], dir[4096], got[4096], step_dir[4096];
    snprintf(root, sizeof root, "%s", testutil_tmpdir("ckpt"));
    snprintf(dir, sizeof dir, "%s", testutil_path_in(root, "ck"));
    save_checkpoint(dir, 100, 2, 1);
    save_checkpoint(dir, 120, 2, 0); /* newer, not published */
    EXPECT_OK(ckpt_resolve(dir, got, sizeof got));
    ck_assert_str_eq(got, step_path(dir, 100));
    EXPECT_OK(ckpt_resolve(testutil_fmt("%s//", dir), got, sizeof got));
    ck_assert_str_eq(got, step_path(dir, 100));
    EXPECT_OK(ckpt_resolve(step_path(dir, 120), got, sizeof got));
    ck_assert_str_eq(got, step_path(dir, 120));
    EXPECT_OK(ckpt_resolve(testutil_fmt("%s/", step_path(dir, 120)), got, sizeof got));
    ck_assert_str_eq(got, step_path(dir, 120));
    EXPECT_STATUS(ckpt_resolve(dir, got, 8), ZT_ERR_USAGE);
    EXPECT_STATUS(ckpt_resolve(step_path(dir, 120), got, 8), ZT_ERR_USAGE);

    const char *expected = "expected a step-NNNNNNNN folder or the checkpoint.dir holding them";
    EXPECT_ERROR(ckpt_resolve(root, got, sizeof got), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s: neither a checkpoint (no meta.json) nor a checkpoint folder "
                              "(no `latest` file): %s",
                              root, expected));
    EXPECT_ERROR(ckpt_resolve(testutil_path_in(root, "none"), got, sizeof got), ZT_ERR_USAGE,
                 testutil_fmt("%s/none: no such folder: %s", root, expected));
    const char *meta = testutil_path_in(step_path(dir, 100), "meta.json");
    EXPECT_ERROR(ckpt_resolve(meta, got, sizeof got), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s: not a folder: %s", meta, expected));
    EXPECT_OK(ckpt_dir_prepare(dir, 140, step_dir, sizeof step_dir));
    EXPECT_ERROR(
        ckpt_resolve(step_dir, got, sizeof got), ZT_ERR_CHECKPOINT,
        testutil_fmt("%s/meta.json: missing: the checkpoint was never completed", step_dir));
    write_text(testutil_path_in(dir, "latest"), "step-00000140\n");
    EXPECT_STATUS(ckpt_resolve(dir, got, sizeof got), ZT_ERR_CHECKPOINT);
    ck_assert_ptr_nonnull(
        strstr(zt_error_message(), "latest names step-00000140, which is not a complete"));
    ck_assert_int_eq(unlink(testutil_path_in(dir, "latest")), 0);
    EXPECT_ERROR(ckpt_resolve(dir, got, sizeof got), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s: holds 3 step folder(s) but no `latest` file, so no checkpoint "
                              "in it was completed: %s",
                              dir, expected));
}
END_TEST

START_TEST(test_prepare_clears_leftovers_but_not_the_published_step)
{
    const char *dir = testutil_tmpdir("ckpt");
    char step_dir[4096];
    save_checkpoint(dir, 100, 1, 1);
    /* a leftover of a crashed save of 120: a stale shard and a temp file */
    mkdir(step_path(dir, 120), 0777);
    write_text(testutil_path_in(step_path(dir, 120), "rank-00003.bin"), "stale");
    write_text(testutil_path_in(step_path(dir, 120), "rank-00000.bin.tmp.999"), "stale");
    mkdir(testutil_path_in(step_path(dir, 120), "sub"), 0777);
    write_text(testutil_path_in(testutil_path_in(step_path(dir, 120), "sub"), "f"), "x");
    EXPECT_OK(ckpt_dir_prepare(dir, 120, step_dir, sizeof step_dir));
    ck_assert_int_eq(count_entries(step_dir), 0);
    /* a complete but unpublished folder of the same name is replaced too */
    save_checkpoint(dir, 130, 1, 0);
    EXPECT_OK(ckpt_dir_prepare(dir, 130, step_dir, sizeof step_dir));
    ck_assert_int_eq(count_entries(step_dir), 0);
    /* the published one is not */
    EXPECT_ERROR(ckpt_dir_prepare(dir, 100, step_dir, sizeof step_dir), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s/step-00000100: is the published checkpoint (%s/latest names "
                              "it); it is not written over",
                              dir, dir));
    EXPECT_OK(ckpt_validate(step_path(dir, 100), NULL));
    EXPECT_STATUS(ckpt_dir_prepare(dir, -1, step_dir, sizeof step_dir), ZT_ERR_USAGE);
    write_text(testutil_path_in(dir, "file"), "x");
    EXPECT_STATUS(ckpt_dir_prepare(testutil_path_in(dir, "file"), 1, step_dir, sizeof step_dir),
                  ZT_ERR_IO);
}
END_TEST

START_TEST(test_rotation_keeps_the_newest_and_latest)
{
    const char *dir = testutil_tmpdir("ckpt");
    for (int64_t s = 10; s <= 60; s += 10)
        save_checkpoint(dir, s, 2, 1);
    /* incomplete folders: an old one and one newer than everything */
    mkdir(step_path(dir, 25), 0777);
    mkdir(step_path(dir, 65), 0777);
    write_text(testutil_path_in(step_path(dir, 65), "rank-00000.bin"), "partial");
    /* names that are not step folders are never touched */
    static const char *others[] = {"notes.txt", "step-12", "step-00000010.bak", "step-000000010"};
    for (int k = 0; k < 4; k++)
        write_text(testutil_path_in(dir, others[k]), "keep");

    EXPECT_ERROR(ckpt_rotate(dir, 0), ZT_ERR_USAGE,
                 testutil_fmt("%s: rotation must keep at least 1 checkpoint, not 0", dir));
    EXPECT_OK(ckpt_rotate(dir, 2));
    static const int64_t gone[] = {10, 20, 25, 30, 40};
    for (int k = 0; k < 5; k++)
        ck_assert_msg(!file_exists(step_path(dir, gone[k])), "step %lld still there",
                      (long long)gone[k]);
    static const int64_t kept[] = {50, 60, 65};
    for (int k = 0; k < 3; k++)
        ck_assert_msg(file_exists(step_path(dir, kept[k])), "step %lld removed",
                      (long long)kept[k]);
    for (int k = 0; k < 4; k++)
        ck_assert(file_exists(testutil_path_in(dir, others[k])));
    EXPECT_OK(ckpt_validate(step_path(dir, 50), NULL));
    EXPECT_OK(ckpt_validate(step_path(dir, 60), NULL));

    /* latest pointing at an older step survives a rotation that keeps 1 */
    EXPECT_OK(ckpt_publish(dir, 50));
    EXPECT_OK(ckpt_rotate(dir, 1));
    ck_assert(file_exists(step_path(dir, 50)));
    ck_assert(file_exists(step_path(dir, 60)));
    ck_assert(file_exists(step_path(dir, 65)));
    EXPECT_OK(ckpt_validate(step_path(dir, 50), NULL));
    int found;
    char got[4096];
    EXPECT_OK(ckpt_find_latest(dir, got, sizeof got, &found));
    ck_assert_str_eq(got, step_path(dir, 50));

    /* without a latest, rotation refuses */
    ck_assert_int_eq(unlink(testutil_path_in(dir, "latest")), 0);
    EXPECT_ERROR(ckpt_rotate(dir, 1), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s/latest: missing; rotation runs only after a checkpoint is "
                              "published",
                              dir));
}
END_TEST

/* ---- validation ---- */

START_TEST(test_validate_a_good_checkpoint)
{
    const char *dir = testutil_tmpdir("ckpt");
    save_checkpoint(dir, 120, 4, 1);
    struct ckpt_meta m;
    EXPECT_OK(ckpt_validate(step_path(dir, 120), &m));
    ck_assert_int_eq(m.step, 120);
    ck_assert_int_eq(m.world, 4);
    for (int r = 0; r < 4; r++) {
        const char *p = shard_path(step_path(dir, 120), r);
        ck_assert_uint_eq(m.files[r].bytes, file_size(p));
        size_t n;
        unsigned char *f = testutil_read_file(p, &n);
        ck_assert_uint_eq(m.files[r].checksum, fnv1a(f, HEADER_END));
        free(f);
    }
    ckpt_meta_free(&m);
    EXPECT_ERROR(ckpt_validate(step_path(dir, 130), &m), ZT_ERR_IO,
                 testutil_fmt("%s: no such checkpoint folder", step_path(dir, 130)));
    ck_assert_ptr_null(m.files);
}
END_TEST

START_TEST(test_validate_missing_shard)
{
    const char *dir = testutil_tmpdir("ckpt");
    save_checkpoint(dir, 120, 4, 1);
    const char *p = shard_path(step_path(dir, 120), 2);
    ck_assert_int_eq(unlink(p), 0);
    struct ckpt_meta m;
    EXPECT_ERROR(ckpt_validate(step_path(dir, 120), &m), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s: missing (the checkpoint lists 4 shard files)", p));
    ck_assert_ptr_null(m.files);
}
END_TEST

START_TEST(test_validate_truncated_shard)
{
    const char *dir = testutil_tmpdir("ckpt");
    save_checkpoint(dir, 120, 2, 1);
    const char *p = shard_path(step_path(dir, 120), 1);
    size_t n;
    unsigned char *orig = testutil_read_file(p, &n);
    size_t cuts[] = {0, 7, 24, 100, HEADER_END, HEADER_END + 1, n / 2, n - 1};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        testutil_write_file(p, orig, cuts[c]);
        EXPECT_ERROR(ckpt_validate(step_path(dir, 120), NULL), ZT_ERR_CHECKPOINT,
                     testutil_fmt("%s: truncated: %zu bytes, meta.json says %zu", p, cuts[c], n));
    }
    unsigned char *longer = malloc(n + 3);
    memcpy(longer, orig, n);
    memset(longer + n, 0, 3);
    testutil_write_file(p, longer, n + 3);
    EXPECT_ERROR(ckpt_validate(step_path(dir, 120), NULL), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s: %zu bytes, meta.json says %zu", p, n + 3, n));
    free(longer);
    free(orig);
}
END_TEST

START_TEST(test_validate_flipped_section_byte)
{
    const char *dir = testutil_tmpdir("ckpt");
    save_checkpoint(dir, 120, 2, 1);
    const char *p = shard_path(step_path(dir, 120), 1);
    size_t n;
    unsigned char *f = testutil_read_file(p, &n);
    /* exp_avg: after the header and params (1000 F32) */
    uint64_t off = HEADER_END + 4000, len = 777 * 2;
    uint64_t stored = testutil_get_le(f + 24 + 64 + 56, 8);
    f[off + len - 1] ^= 0x80;
    uint64_t computed = fnv1a(f + off, len);
    testutil_write_file(p, f, n);
    free(f);
    EXPECT_ERROR(ckpt_validate(step_path(dir, 120), NULL), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s: checksum mismatch in section 'exp_avg' (stored 0x%016llx, "
                              "computed 0x%016llx)",
                              p, (unsigned long long)stored, (unsigned long long)computed));
    /* and in every other section, one byte each */
    f = testutil_read_file(p, &n);
    f[off + len - 1] ^= 0x80;
    testutil_write_file(p, f, n);
    EXPECT_OK(ckpt_validate(step_path(dir, 120), NULL));
    for (int k = 0; k < N_SECTIONS; k++) {
        uint64_t so = testutil_get_le(f + 24 + 64 * k + 48, 8);
        if (sections[k].count == 0)
            continue;
        flip_byte(p, so, 0x01);
        EXPECT_STATUS(ckpt_validate(step_path(dir, 120), NULL), ZT_ERR_CHECKPOINT);
        ck_assert_ptr_nonnull(
            strstr(zt_error_message(), testutil_fmt("in section '%s'", sections[k].name)));
        flip_byte(p, so, 0x01);
    }
    free(f);
}
END_TEST

START_TEST(test_validate_every_header_byte_flipped)
{
    const char *dir = testutil_tmpdir("ckpt");
    save_checkpoint(dir, 120, 2, 1);
    const char *sd = step_path(dir, 120);
    const char *p = shard_path(sd, 0);
    for (uint64_t at = 0; at < HEADER_END; at++) {
        flip_byte(p, at, 0x04);
        zt_status st = ckpt_validate(sd, NULL);
        if (st != ZT_ERR_CHECKPOINT || strncmp(zt_error_message(), p, strlen(p)) != 0)
            ck_abort_msg("byte %llu: %s: %s", (unsigned long long)at, zt_status_str(st),
                         zt_error_message());
        flip_byte(p, at, 0x04);
    }
    EXPECT_OK(ckpt_validate(sd, NULL));
    /* a flip the header format cannot see (a name byte) is the digest's */
    flip_byte(p, 24 + 1, 0x04); /* "params" -> "perams" */
    size_t n;
    unsigned char *f = testutil_read_file(p, &n);
    uint64_t digest = fnv1a(f, HEADER_END);
    free(f);
    struct ckpt_meta m;
    EXPECT_OK(ckpt_meta_read(testutil_path_in(sd, "meta.json"), &m));
    EXPECT_ERROR(ckpt_validate(sd, NULL), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s: header checksum 0x%016llx, meta.json says 0x%016llx", p,
                              (unsigned long long)digest, (unsigned long long)m.files[0].checksum));
    ckpt_meta_free(&m);
}
END_TEST

START_TEST(test_validate_wrong_rank)
{
    const char *dir = testutil_tmpdir("ckpt");
    save_checkpoint(dir, 120, 4, 1);
    const char *sd = step_path(dir, 120);
    flip_byte(shard_path(sd, 0), 12, 0x01); /* rank 0 -> 1 */
    EXPECT_ERROR(
        ckpt_validate(sd, NULL), ZT_ERR_CHECKPOINT,
        testutil_fmt("%s: written by rank 1 of 4, expected rank 0 of 4", shard_path(sd, 0)));
    flip_byte(shard_path(sd, 0), 12, 0x01);
    /* two files swapped (same sizes) */
    const char *a = shard_path(sd, 2), *b = shard_path(sd, 3);
    const char *t = testutil_path_in(sd, "swap");
    ck_assert_int_eq(rename(a, t), 0);
    ck_assert_int_eq(rename(b, a), 0);
    ck_assert_int_eq(rename(t, b), 0);
    EXPECT_ERROR(ckpt_validate(sd, NULL), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s: written by rank 3 of 4, expected rank 2 of 4", a));
    /* a shard of another world size */
    write_shard(a, 2, 8, 1000, NULL, NULL);
    EXPECT_ERROR(ckpt_validate(sd, NULL), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s: written by rank 2 of 8, expected rank 2 of 4", a));
}
END_TEST

START_TEST(test_validate_meta_problems)
{
    const char *dir = testutil_tmpdir("ckpt");
    save_checkpoint(dir, 120, 2, 1);
    const char *sd = step_path(dir, 120);
    const char *mp = testutil_path_in(sd, "meta.json");
    size_t n;
    char *orig = (char *)testutil_read_file(mp, &n);
    orig[n] = '\0';
    char *text = malloc(n + 16);

    /* a newer format version */
    char *v = strstr(orig, "\"format_version\": 2");
    ck_assert_ptr_nonnull(v);
    strcpy(text, orig);
    text[v - orig + 18] = '5';
    write_text(mp, text);
    EXPECT_ERROR(
        ckpt_validate(sd, NULL), ZT_ERR_CHECKPOINT,
        testutil_fmt("%s: format version 5 is newer than this zerotrain understands (4)", mp));
    /* corrupt JSON: a brace removed at a known byte */
    strcpy(text, orig);
    char *units = strstr(text, "{\"numel\"");
    ck_assert_ptr_nonnull(units);
    *units = ' ';
    write_text(mp, text);
    EXPECT_ERROR(ckpt_validate(sd, NULL), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s: not valid JSON at byte %zu: expected ',' or ']'", mp,
                              (size_t)(units - text) + 8));
    /* a missing key */
    strcpy(text, orig);
    char *w = strstr(text, "\"world\"");
    memcpy(w, "\"wurld\"", 7);
    write_text(mp, text);
    EXPECT_ERROR(ckpt_validate(sd, NULL), ZT_ERR_CHECKPOINT,
                 testutil_fmt("%s: missing key 'world'", mp));
    write_text(mp, orig);
    EXPECT_OK(ckpt_validate(sd, NULL));
    free(text);
    free(orig);
}
END_TEST

START_TEST(test_crash_mid_save_keeps_the_previous_checkpoint)
{
    const char *dir = testutil_tmpdir("ckpt");
    save_checkpoint(dir, 100, 2, 1);
    char *before = read_latest_text(dir);
    /* the save of 120: rank 0 finishes, rank 1 dies mid-write (its writer
     * aborted, and a temp file as a killed process would leave), no meta */
    char step_dir[4096];
    EXPECT_OK(ckpt_dir_prepare(dir, 120, step_dir, sizeof step_dir));
    write_shard(shard_path(step_dir, 0), 0, 2, 1000, NULL, NULL);
    struct ckpt_shard_writer *w;
    EXPECT_OK(ckpt_shard_writer_open(shard_path(step_dir, 1), 1, 2, &w));
    EXPECT_OK(ckpt_shard_writer_add(w, "params", ZT_F32, 1000));
    EXPECT_OK(ckpt_shard_writer_begin(w));
    float half[500] = {0};
    EXPECT_OK(ckpt_shard_writer_write(w, half, 500));
    ckpt_shard_writer_abort(w);
    write_text(testutil_path_in(step_dir, "rank-00001.bin.tmp.424242"), "half a shard");

    int found;
    char got[4096];
    EXPECT_OK(ckpt_find_latest(dir, got, sizeof got, &found));
    ck_assert_int_eq(found, 1);
    ck_assert_str_eq(got, step_path(dir, 100));
    char *after = read_latest_text(dir);
    ck_assert_str_eq(after, before);
    free(after);
    EXPECT_OK(ckpt_validate(got, NULL));

    /* dying after meta.json but before publishing changes nothing either */
    save_checkpoint(dir, 120, 2, 0);
    EXPECT_OK(ckpt_find_latest(dir, got, sizeof got, &found));
    ck_assert_str_eq(got, step_path(dir, 100));
    /* the restarted save clears the leftovers and can publish */
    save_checkpoint(dir, 120, 2, 1);
    ck_assert_int_eq(count_entries(step_path(dir, 120)), 3);
    EXPECT_OK(ckpt_find_latest(dir, got, sizeof got, &found));
    ck_assert_str_eq(got, step_path(dir, 120));
    free(before);
}
END_TEST

/* ---- fault loops ---- */

START_TEST(test_meta_every_prefix_is_a_clean_error)
{
    const char *dir = testutil_tmpdir("ckpt");
    save_checkpoint(dir, 120, 3, 1);
    const char *mp = testutil_path_in(step_path(dir, 120), "meta.json");
    size_t n;
    unsigned char *orig = testutil_read_file(mp, &n);
    const char *cut = testutil_path_in(dir, "cut.json");
    size_t close = n;
    while (close > 0 && orig[close - 1] != '}')
        close--;
    for (size_t len = 0; len <= n; len++) {
        testutil_write_file(cut, orig, len);
        struct ckpt_meta m;
        zt_status st = ckpt_meta_read(cut, &m);
        zt_status want = len < close ? ZT_ERR_CHECKPOINT : ZT_OK;
        if (st != want || (st != ZT_OK && strncmp(zt_error_message(), cut, strlen(cut)) != 0))
            ck_abort_msg("prefix %zu: %s: %s", len, zt_status_str(st), zt_error_message());
        if (st != ZT_OK && (m.files || m.config_yaml || m.unit_numel))
            ck_abort_msg("prefix %zu: output not zeroed", len);
        ckpt_meta_free(&m);
    }
    free(orig);
}
END_TEST

START_TEST(test_meta_every_byte_overwritten)
{
    const char *dir = testutil_tmpdir("ckpt");
    save_checkpoint(dir, 120, 1, 1);
    const char *mp = testutil_path_in(step_path(dir, 120), "meta.json");
    size_t n;
    unsigned char *orig = testutil_read_file(mp, &n);
    const char *bad = testutil_path_in(dir, "bad.json");
    static const unsigned char with[] = {'"', '{', ']', '9', '-', '\\', 0x00, 0xff, 'e'};
    for (size_t at = 0; at < n; at++) {
        for (size_t k = 0; k < sizeof with; k++) {
            unsigned char keep = orig[at];
            orig[at] = with[k];
            testutil_write_file(bad, orig, n);
            orig[at] = keep;
            struct ckpt_meta m;
            zt_status st = ckpt_meta_read(bad, &m);
            if (st != ZT_OK &&
                (st != ZT_ERR_CHECKPOINT || strncmp(zt_error_message(), bad, strlen(bad)) != 0))
                ck_abort_msg("byte %zu = %#x: %s: %s", at, with[k], zt_status_str(st),
                             zt_error_message());
            ckpt_meta_free(&m);
        }
    }
    free(orig);
}
END_TEST

/* Runs `op` with the N-th allocation failing, N = 1, 2, ... until it
 * succeeds; every failure must be ZT_ERR_NOMEM. Returns the N it took. */
static long alloc_loop(zt_status (*op)(void *), void *arg)
{
    long n;
    for (n = 1; n < 100000; n++) {
        fault_alloc_arm(n);
        zt_status st = op(arg);
        long left = fault_alloc_disarm();
        if (st == ZT_OK) {
            ck_assert_int_gt(left, 0); /* succeeded because nothing failed */
            return n;
        }
        if (st != ZT_ERR_NOMEM)
            ck_abort_msg("allocation %ld: %s: %s", n, zt_status_str(st), zt_error_message());
    }
    ck_abort_msg("no success after %ld allocations", n);
    return n;
}

static zt_status op_validate(void *arg)
{
    struct ckpt_meta m;
    zt_status st = ckpt_validate(arg, &m);
    if (st == ZT_OK)
        ckpt_meta_free(&m);
    else if (m.files || m.config_yaml)
        return ZT_ERR_INTERNAL;
    return st;
}

static zt_status op_write_shard(void *arg)
{
    const char *path = arg;
    struct ckpt_shard_writer *w;
    ZT_TRY(ckpt_shard_writer_open(path, 0, 1, &w));
    zt_status st = ZT_OK;
    for (int k = 0; k < 20 && st == ZT_OK; k++)
        st = ckpt_shard_writer_add(w, testutil_fmt("s%d", k), ZT_I32, 3);
    if (st == ZT_OK)
        st = ckpt_shard_writer_begin(w);
    int32_t v[60] = {0};
    if (st == ZT_OK)
        st = ckpt_shard_writer_write(w, v, 60);
    if (st != ZT_OK) {
        ckpt_shard_writer_abort(w);
        return st;
    }
    return ckpt_shard_writer_finish(w, NULL, NULL);
}

struct meta_job {
    const char *path;
    const struct ckpt_meta *m;
};

static zt_status op_write_meta(void *arg)
{
    struct meta_job *j = arg;
    return ckpt_meta_write(j->path, j->m);
}

static zt_status op_publish_rotate(void *arg)
{
    ZT_TRY(ckpt_publish(arg, 120));
    return ckpt_rotate(arg, 1);
}

START_TEST(test_allocation_failures_are_clean)
{
    const char *dir = testutil_tmpdir("ckpt");
    save_checkpoint(dir, 120, 2, 1);
    ck_assert_int_gt(alloc_loop(op_validate, (void *)step_path(dir, 120)), 10);
    const char *sp = testutil_path_in(dir, "w.bin");
    ck_assert_int_gt(alloc_loop(op_write_shard, (void *)sp), 4);
    struct ckpt_shard *s;
    EXPECT_OK(ckpt_shard_open(sp, &s));
    ck_assert_int_eq(ckpt_shard_header(s)->n_sections, 20);
    ckpt_shard_close(s);
    struct ckpt_file files[2] = {{1, 2}, {3, 4}};
    struct ckpt_meta m;
    fill_meta(&m, 7, 2, files);
    struct meta_job job = {testutil_path_in(dir, "m.json"), &m};
    ck_assert_int_gt(alloc_loop(op_write_meta, &job), 1);
    ckpt_meta_free(&m);
    save_checkpoint(dir, 110, 2, 0);
    ck_assert_int_gt(alloc_loop(op_publish_rotate, (void *)dir), 1);
    ck_assert(!file_exists(step_path(dir, 110)));
    EXPECT_OK(ckpt_validate(step_path(dir, 120), NULL));
    ck_assert_int_eq(count_entries(dir), 4); /* latest, step 120, w.bin, m.json */
}
END_TEST

static Suite *checkpoint_suite(void)
{
    Suite *s = suite_create("checkpoint");
    TCase *shard = tcase_create("shard");
    tcase_add_test(shard, test_fnv_known_answers);
    tcase_add_test(shard, test_shard_layout_matches_format);
    tcase_add_test(shard, test_shard_chunking_gives_the_same_file);
    tcase_add_test(shard, test_shard_round_trip_and_ranged_reads);
    tcase_add_test(shard, test_shard_read_beyond_a_section);
    tcase_add_test(shard, test_shard_writer_refuses_bad_declarations);
    tcase_add_test(shard, test_shard_finish_with_missing_elements);
    tcase_add_test(shard, test_shard_abort_leaves_the_old_file);
    tcase_add_test(shard, test_shard_open_rejects_malformed_headers);
    tcase_add_test(shard, test_shard_truncated_at_every_header_byte_and_in_data);
    tcase_add_test(shard, test_shard_verify_names_the_section);
    suite_add_tcase(s, shard);

    TCase *meta = tcase_create("meta");
    tcase_add_test(meta, test_meta_round_trip_every_field);
    tcase_add_test(meta, test_meta_records_adapters_and_base);
    tcase_add_test(meta, test_meta_reads_hand_written_json);
    tcase_add_test(meta, test_meta_errors_name_the_problem);
    tcase_add_test(meta, test_meta_field_errors);
    tcase_add_test(meta, test_meta_write_refuses_what_cannot_be_read);
    tcase_add_test(meta, test_meta_records_the_layout);
    suite_add_tcase(s, meta);

    TCase *dirs = tcase_create("folders");
    tcase_add_test(dirs, test_step_names_and_paths);
    tcase_add_test(dirs, test_publish_and_find_latest);
    tcase_add_test(dirs, test_incomplete_step_is_not_latest);
    tcase_add_test(dirs, test_find_latest_reports_a_broken_latest);
    tcase_add_test(dirs, test_resolve_takes_both_kinds_of_folder);
    tcase_add_test(dirs, test_prepare_clears_leftovers_but_not_the_published_step);
    tcase_add_test(dirs, test_rotation_keeps_the_newest_and_latest);
    suite_add_tcase(s, dirs);

    TCase *val = tcase_create("validate");
    tcase_add_test(val, test_validate_a_good_checkpoint);
    tcase_add_test(val, test_validate_missing_shard);
    tcase_add_test(val, test_validate_truncated_shard);
    tcase_add_test(val, test_validate_flipped_section_byte);
    tcase_add_test(val, test_validate_every_header_byte_flipped);
    tcase_add_test(val, test_validate_wrong_rank);
    tcase_add_test(val, test_validate_meta_problems);
    tcase_add_test(val, test_crash_mid_save_keeps_the_previous_checkpoint);
    suite_add_tcase(s, val);

    TCase *faults = tcase_create("faults");
    tcase_set_timeout(faults, 60);
    tcase_add_test(faults, test_meta_every_prefix_is_a_clean_error);
    tcase_add_test(faults, test_meta_every_byte_overwritten);
    tcase_add_test(faults, test_allocation_failures_are_clean);
    suite_add_tcase(s, faults);
    return s;
}

int main(void)
{
    return testutil_run_suite(checkpoint_suite(), 0);
}
