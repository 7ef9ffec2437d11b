/* tests/test_data.c — token files, the byte tokenizer, dataset loading,
 * the validation split, the batch sampler and `prepare`.
 *
 * Token files are checked against bytes the test packs itself (the format
 * in data.h) and the checksum against the published FNV-1a 64 vectors, so a
 * reader and writer that agree on a wrong format still fail. The sampler is
 * checked against a shuffle written here from the rule in data.h, and its
 * world-size independence by running every rank of worlds 1, 2 and 4 in
 * this one process: the rule makes that possible without MPI.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <dirent.h>
#include <unistd.h>

#include "../common/rng.h"
#include "../cli/prepare.h"
#include "../data/data.h"
#include "testutil.h"

#define LICENSES "/usr/share/common-licenses"

/* ---- helpers ---- */

static void patch(const char *path, long offset, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "r+b");
    ck_assert(f != NULL);
    ck_assert_int_eq(fseek(f, offset, SEEK_SET), 0);
    ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static void patch_u32(const char *path, long offset, uint32_t v)
{
    unsigned char b[4];
    testutil_put_le(b, v, 4);
    patch(path, offset, b, 4);
}

/* FNV-1a 64 written out again here, so that the file checks do not trust
 * the module's own function. */
static uint64_t ref_fnv(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

static void expect_error(zt_status got, zt_status want, const char *text)
{
    ck_assert_msg(got == want, "status %s, expected %s (message: %s)", zt_status_str(got),
                  zt_status_str(want), zt_error_message());
    ck_assert_msg(strstr(zt_error_message(), text) != NULL, "message '%s' lacks '%s'",
                  zt_error_message(), text);
}

static void expect_message(zt_status got, zt_status want, const char *exact)
{
    ck_assert_msg(got == want, "status %s, expected %s (message: %s)", zt_status_str(got),
                  zt_status_str(want), zt_error_message());
    ck_assert_str_eq(zt_error_message(), exact);
}

static void mkdir_ok(const char *path)
{
    ck_assert_msg(mkdir(path, 0755) == 0, "mkdir %s: %s", path, strerror(errno));
}

/* A width-1 file of n tokens (i * 7 % 256) in a fresh folder. */
static const char *small_tokfile(const char *tag, size_t n)
{
    const char *dir = testutil_tmpdir(tag);
    const char *path = testutil_path_in(dir, "t.tok");
    int32_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++)
        t[i] = (int32_t)(i * 7 % 256);
    ck_assert_int_eq(tokfile_write(path, t, n, 1, 256), ZT_OK);
    free(t);
    return path;
}

/* ---- token files ---- */

START_TEST(test_checksum_vectors)
{
    ck_assert_uint_eq(tokfile_checksum("", 0), 0xcbf29ce484222325ULL);
    ck_assert_uint_eq(tokfile_checksum("a", 1), 0xaf63dc4c8601ec8cULL);
    ck_assert_uint_eq(tokfile_checksum("foobar", 6), 0x85944171f73967e8ULL);
}
END_TEST

START_TEST(test_roundtrip_width1)
{
    const char *path = testutil_path_in(testutil_tmpdir("w1"), "w1.tok");
    size_t n = 3001;
    int32_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++)
        t[i] = (int32_t)((i * 131 + 7) % 256);
    ck_assert_int_eq(tokfile_write(path, t, n, 1, 256), ZT_OK);

    size_t size;
    unsigned char *raw = testutil_read_file(path, &size);
    ck_assert_uint_eq(size, 40 + n);
    unsigned char head[40];
    memcpy(head, "ZTTOKENS", 8);
    testutil_put_le(head + 8, 1, 4);
    testutil_put_le(head + 12, 1, 4);
    testutil_put_le(head + 16, 256, 4);
    testutil_put_le(head + 20, 0, 4);
    testutil_put_le(head + 24, n, 8);
    testutil_put_le(head + 32, ref_fnv(raw + 40, n), 8);
    ck_assert_mem_eq(raw, head, 40);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(raw[40 + i], t[i]);

    struct token_buffer b = {0};
    ck_assert_int_eq(tokfile_read(path, &b), ZT_OK);
    ck_assert_uint_eq(b.n, n);
    ck_assert_uint_eq(b.vocab_size, 256);
    ck_assert_mem_eq(b.tokens, t, n * sizeof *t);
    token_buffer_free(&b);
    ck_assert_ptr_null(b.tokens);
    free(raw);
    free(t);
}
END_TEST

/* 4-byte ids: Llama 3's vocabulary and ids up to INT32_MAX - 1; a vocab
 * past INT32_MAX does not fit the int32 ids in memory. */
START_TEST(test_roundtrip_width4)
{
    const char *path = testutil_path_in(testutil_tmpdir("w4"), "w4.tok");
    const int32_t t[] = {128000, 9906, 0, 65536, 128255, 1};
    ck_assert_int_eq(tokfile_write(path, t, 6, 4, 128256), ZT_OK);
    size_t size;
    unsigned char *raw = testutil_read_file(path, &size);
    ck_assert_uint_eq(size, 40 + 4 * 6);
    ck_assert_uint_eq(testutil_get_le(raw + 12, 4), 4);
    ck_assert_uint_eq(testutil_get_le(raw + 40 + 4 * 3, 4), 65536);
    free(raw);
    struct token_buffer b = {0};
    ck_assert_int_eq(tokfile_read(path, &b), ZT_OK);
    ck_assert_uint_eq(b.vocab_size, 128256);
    ck_assert_uint_eq(b.n, 6);
    ck_assert_mem_eq(b.tokens, t, sizeof t);
    token_buffer_free(&b);
    const int32_t big[] = {INT32_MAX - 1};
    ck_assert_int_eq(tokfile_write(path, big, 1, 4, INT32_MAX), ZT_OK);
    ck_assert_int_eq(tokfile_read(path, &b), ZT_OK);
    ck_assert_int_eq(b.tokens[0], INT32_MAX - 1);
    token_buffer_free(&b);
    expect_error(tokfile_write(path, big, 1, 4, (uint32_t)INT32_MAX + 1), ZT_ERR_DATA,
                 "vocab size 2147483648 does not fit 4-byte ids");
}
END_TEST

START_TEST(test_roundtrip_width2)
{
    /* More tokens than one 1 MiB chunk holds at 2 bytes each. */
    const char *path = testutil_path_in(testutil_tmpdir("w2"), "w2.tok");
    size_t n = 600001;
    int32_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++)
        t[i] = (int32_t)((i * 40503u) % 65536u);
    t[0] = 65535;
    t[1] = 0;
    t[2] = 256;
    t[n - 1] = 65535;
    ck_assert_int_eq(tokfile_write(path, t, n, 2, 65536), ZT_OK);

    size_t size;
    unsigned char *raw = testutil_read_file(path, &size);
    ck_assert_uint_eq(size, 40 + 2 * n);
    ck_assert_uint_eq(testutil_get_le(raw + 24, 8), n);
    ck_assert_uint_eq(testutil_get_le(raw + 32, 8), ref_fnv(raw + 40, 2 * n));
    ck_assert_int_eq(raw[40 + 4], 0x00); /* 256, little-endian */
    ck_assert_int_eq(raw[40 + 5], 0x01);

    struct token_buffer b = {0};
    ck_assert_int_eq(tokfile_read(path, &b), ZT_OK);
    ck_assert_uint_eq(b.n, n);
    ck_assert_uint_eq(b.vocab_size, 65536);
    ck_assert_mem_eq(b.tokens, t, n * sizeof *t);
    token_buffer_free(&b);
    free(raw);
    free(t);
}
END_TEST

START_TEST(test_roundtrip_empty)
{
    const char *path = testutil_path_in(testutil_tmpdir("empty"), "e.tok");
    ck_assert_int_eq(tokfile_write(path, NULL, 0, 1, 256), ZT_OK);
    struct token_buffer b = {0};
    ck_assert_int_eq(tokfile_read(path, &b), ZT_OK);
    ck_assert_uint_eq(b.n, 0);
    token_buffer_free(&b);
}
END_TEST

START_TEST(test_write_rejects_bad_input)
{
    const char *dir = testutil_tmpdir("wbad");
    const char *path = testutil_path_in(dir, "x.tok");
    int32_t t[4] = {1, 2, 300, 4};
    expect_error(tokfile_write(path, t, 4, 1, 256), ZT_ERR_DATA, "token id 300 at position 2");
    int32_t neg[2] = {0, -1};
    expect_error(tokfile_write(path, neg, 2, 2, 1000), ZT_ERR_DATA, "token id -1 at position 1");
    expect_error(tokfile_write(path, t, 2, 3, 256), ZT_ERR_DATA,
                 "token width 3 not supported (1, 2 or 4)");
    expect_error(tokfile_write(path, t, 2, 1, 300), ZT_ERR_DATA, "vocab size 300");
    expect_error(tokfile_write(path, t, 2, 2, 0), ZT_ERR_DATA, "vocab size 0");
    ck_assert_int_ne(access(path, F_OK), 0);
    expect_error(tokfile_write(testutil_path_in(dir, "no/such/dir.tok"), t, 2, 1, 256), ZT_ERR_IO,
                 "cannot create");
}
END_TEST

START_TEST(test_write_is_atomic_and_replaces)
{
    const char *dir = testutil_tmpdir("atomic");
    const char *path = testutil_path_in(dir, "a.tok");
    testutil_write_file(path, "old contents", 12);
    int32_t t[3] = {10, 20, 30};
    ck_assert_int_eq(tokfile_write(path, t, 3, 1, 256), ZT_OK);
    struct token_buffer b = {0};
    ck_assert_int_eq(tokfile_read(path, &b), ZT_OK);
    ck_assert_uint_eq(b.n, 3);
    ck_assert_int_eq(b.tokens[2], 30);
    token_buffer_free(&b);
    /* Only the file itself is left: the temp file was renamed. */
    DIR *d = opendir(dir);
    struct dirent *e;
    int entries = 0;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        entries++;
        ck_assert_str_eq(e->d_name, "a.tok");
    }
    closedir(d);
    ck_assert_int_eq(entries, 1);
}
END_TEST

START_TEST(test_read_flipped_token_byte)
{
    const char *path = small_tokfile("flip", 100);
    size_t size;
    unsigned char *raw = testutil_read_file(path, &size);
    uint64_t stored = testutil_get_le(raw + 32, 8);
    raw[40 + 50] ^= 0x01;
    uint64_t actual = ref_fnv(raw + 40, 100);
    patch(path, 40 + 50, raw + 40 + 50, 1);
    const char *want = testutil_fmt(
        "%s: checksum mismatch (header 0x%016llx, data 0x%016llx): the file is corrupt", path,
        (unsigned long long)stored, (unsigned long long)actual);
    struct token_buffer b = {0};
    expect_message(tokfile_read(path, &b), ZT_ERR_DATA, want);
    ck_assert_ptr_null(b.tokens);
    free(raw);
}
END_TEST

START_TEST(test_read_bad_magic)
{
    const char *path = small_tokfile("magic", 10);
    patch(path, 2, "X", 1);
    const char *want = testutil_fmt("%s: not a token file (bad magic)", path);
    struct token_buffer b = {0};
    expect_message(tokfile_read(path, &b), ZT_ERR_DATA, want);
    ck_assert_int_eq(tokfile_is_tokfile(path), 0);
}
END_TEST

START_TEST(test_read_newer_version)
{
    const char *path = small_tokfile("version", 10);
    patch_u32(path, 8, 7);
    const char *want =
        testutil_fmt("%s: token file version 7 is newer than this zerotrain understands (1)", path);
    struct token_buffer b = {0};
    expect_message(tokfile_read(path, &b), ZT_ERR_DATA, want);
    patch_u32(path, 8, 0);
    expect_error(tokfile_read(path, &b), ZT_ERR_DATA, "version 0 is not valid");
}
END_TEST

START_TEST(test_read_bad_width)
{
    const char *path = small_tokfile("width", 10);
    patch_u32(path, 12, 3);
    const char *want = testutil_fmt("%s: token width 3 not supported (1, 2 or 4)", path);
    struct token_buffer b = {0};
    expect_message(tokfile_read(path, &b), ZT_ERR_DATA, want);
}
END_TEST

START_TEST(test_read_bad_reserved_and_vocab)
{
    const char *path = small_tokfile("reserved", 10);
    patch_u32(path, 20, 5);
    struct token_buffer b = {0};
    expect_error(tokfile_read(path, &b), ZT_ERR_DATA, "reserved header field is 5");
    patch_u32(path, 20, 0);
    patch_u32(path, 16, 257);
    expect_error(tokfile_read(path, &b), ZT_ERR_DATA, "vocab size 257 does not fit 1-byte ids");
}
END_TEST

START_TEST(test_read_truncated_header)
{
    const char *path = small_tokfile("trhead", 10);
    long cuts[] = {39, 20, 8, 4, 0}; /* shrinking: truncate() would pad with zeros */
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        ck_assert_int_eq(truncate(path, cuts[i]), 0);
        const char *want = testutil_fmt(
            "%s: truncated: the header needs 40 bytes but the file has %ld", path, cuts[i]);
        struct token_buffer b = {0};
        expect_message(tokfile_read(path, &b), ZT_ERR_DATA, want);
    }
}
END_TEST

START_TEST(test_read_truncated_body)
{
    size_t n = 1000;
    long cuts[] = {40, 41, 540, 40 + 2 * 1000 - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        const char *path = testutil_path_in(testutil_tmpdir("trbody"), "t.tok");
        int32_t *t = calloc(n, sizeof *t);
        ck_assert_int_eq(tokfile_write(path, t, n, 2, 1000), ZT_OK);
        free(t);
        ck_assert_int_eq(truncate(path, cuts[i]), 0);
        const char *want = testutil_fmt(
            "%s: truncated: header says 1000 tokens (2000 bytes) but the file has %ld bytes "
            "of tokens",
            path, cuts[i] - 40);
        struct token_buffer b = {0};
        expect_message(tokfile_read(path, &b), ZT_ERR_DATA, want);
    }
}
END_TEST

START_TEST(test_read_trailing_bytes)
{
    const char *path = small_tokfile("trail", 10);
    FILE *f = fopen(path, "ab");
    fputs("xyz", f);
    fclose(f);
    struct token_buffer b = {0};
    expect_error(tokfile_read(path, &b), ZT_ERR_DATA,
                 "header says 10 tokens (10 bytes) but the file has 13 bytes of tokens");
}
END_TEST

START_TEST(test_read_id_over_vocab)
{
    /* A well-formed file with a valid checksum whose id 12 is out of range:
     * only a hand-made file can be like that, the writer refuses. */
    const char *path = testutil_path_in(testutil_tmpdir("vocab"), "v.tok");
    unsigned char f[40 + 2 * 20];
    memcpy(f, "ZTTOKENS", 8);
    testutil_put_le(f + 8, 1, 4);
    testutil_put_le(f + 12, 2, 4);
    testutil_put_le(f + 16, 256, 4);
    testutil_put_le(f + 20, 0, 4);
    testutil_put_le(f + 24, 20, 8);
    for (int i = 0; i < 20; i++) {
        int v = i == 12 ? 300 : i;
        f[40 + 2 * i] = (unsigned char)v;
        f[41 + 2 * i] = (unsigned char)(v >> 8);
    }
    testutil_put_le(f + 32, ref_fnv(f + 40, 40), 8);
    testutil_write_file(path, f, sizeof f);
    const char *want = testutil_fmt("%s: token id 300 at position 12 is >= vocab size 256", path);
    struct token_buffer b = {0};
    expect_message(tokfile_read(path, &b), ZT_ERR_DATA, want);
}
END_TEST

START_TEST(test_read_missing_and_folder)
{
    const char *dir = testutil_tmpdir("missing");
    const char *path = testutil_path_in(dir, "nope.tok");
    const char *want = testutil_fmt("%s: no such file or directory", path);
    struct token_buffer b = {0};
    expect_message(tokfile_read(path, &b), ZT_ERR_IO, want);
    expect_error(tokfile_read(dir, &b), ZT_ERR_DATA, "not a regular file");
    ck_assert_int_eq(tokfile_is_tokfile(path), 0);
    ck_assert_int_eq(tokfile_is_tokfile(dir), 0);
}
END_TEST

/* ---- tokenizer ---- */

START_TEST(test_byte_tokenizer)
{
    const unsigned char text[] = {'h', 0xc3, 0xa9, 'l', '\n', 0x00, 0xff};
    struct token_buffer b = {0};
    ck_assert_int_eq(tokenizer_bytes_encode(text, sizeof text, &b), ZT_OK);
    ck_assert_int_eq(tokenizer_bytes_encode(text, 2, &b), ZT_OK);
    ck_assert_uint_eq(b.n, 9);
    ck_assert_uint_eq(b.vocab_size, 256);
    int32_t want[9] = {104, 195, 169, 108, 10, 0, 255, 104, 195};
    ck_assert_mem_eq(b.tokens, want, sizeof want);
    token_buffer_free(&b);

    /* Growing over many appends keeps every byte. */
    for (int i = 0; i < 5000; i++) {
        unsigned char c = (unsigned char)i;
        ck_assert_int_eq(tokenizer_bytes_encode(&c, 1, &b), ZT_OK);
    }
    ck_assert_uint_eq(b.n, 5000);
    ck_assert_int_eq(b.tokens[4999], 4999 % 256);
    token_buffer_free(&b);

    int32_t gpt[2] = {50000, 1};
    struct token_buffer other = {gpt, 2, 50257, 2, NULL};
    expect_error(tokenizer_bytes_encode(text, 1, &other), ZT_ERR_DATA, "vocab size 50257");
}
END_TEST

/* ---- datasets ---- */

static void expect_tokens(const struct token_buffer *b, const char *text)
{
    size_t n = strlen(text);
    ck_assert_uint_eq(b->n, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(b->tokens[i] == (unsigned char)text[i], "token %zu is %d, expected '%c'", i,
                      b->tokens[i], text[i]);
}

START_TEST(test_load_nested_folder)
{
    const char *root = testutil_tmpdir("nested");
    mkdir_ok(testutil_path_in(root, "a"));
    mkdir_ok(testutil_path_in(root, "a/c"));
    mkdir_ok(testutil_path_in(root, "a/.git"));
    testutil_write_file(testutil_path_in(root, "b.txt"), "BBB", 3);
    testutil_write_file(testutil_path_in(root, "a/z.txt"), "Z", 1);
    testutil_write_file(testutil_path_in(root, "a/c/d.txt"), "D1", 2);
    testutil_write_file(testutil_path_in(root, "c.txt"), "cc", 2);
    testutil_write_file(testutil_path_in(root, "a.txt"), "A", 1); /* "a.txt" < "a/..." in strcmp */
    testutil_write_file(testutil_path_in(root, ".hidden"), "HIDDEN", 6);
    testutil_write_file(testutil_path_in(root, "a/.git/x"), "X", 1);
    ck_assert_int_eq(mkfifo(testutil_path_in(root, "fifo"), 0644), 0);
    ck_assert_int_eq(symlink("b.txt", testutil_path_in(root, "link.txt")), 0);
    ck_assert_int_eq(symlink("gone", testutil_path_in(root, "dangling")), 0);
    ck_assert_int_eq(symlink("a/c", testutil_path_in(root, "m")), 0);

    const char *paths[] = {root};
    struct token_buffer b = {0};
    size_t files = 0;
    ck_assert_int_eq(dataset_load_counted(paths, 1, &b, &files), ZT_OK);
    /* a.txt, a/c/d.txt, a/z.txt, b.txt, c.txt, link.txt, m/d.txt */
    expect_tokens(&b, "AD1ZBBBccBBBD1");
    ck_assert_uint_eq(files, 7);
    ck_assert_uint_eq(b.vocab_size, 256);
    token_buffer_free(&b);
}
END_TEST

START_TEST(test_load_paths_in_given_order)
{
    const char *root = testutil_tmpdir("order");
    testutil_write_file(testutil_path_in(root, "a"), "first", 5);
    testutil_write_file(testutil_path_in(root, "b"), "second", 6);
    const char *paths[] = {testutil_path_in(root, "b"), testutil_path_in(root, "a"),
                           testutil_path_in(root, "b")};
    struct token_buffer b = {0};
    ck_assert_int_eq(dataset_load(paths, 3, &b), ZT_OK);
    expect_tokens(&b, "secondfirstsecond");
    token_buffer_free(&b);
}
END_TEST

START_TEST(test_load_missing_path)
{
    const char *root = testutil_tmpdir("loadmiss");
    testutil_write_file(testutil_path_in(root, "a"), "x", 1);
    const char *paths[] = {testutil_path_in(root, "a"), testutil_path_in(root, "nothing")};
    const char *want = testutil_fmt("%s: no such file or directory", paths[1]);
    struct token_buffer b = {0};
    expect_message(dataset_load(paths, 2, &b), ZT_ERR_IO, want);
    ck_assert_ptr_null(b.tokens);
    ck_assert_uint_eq(b.n, 0);
    expect_error(dataset_load(paths, 0, &b), ZT_ERR_USAGE, "no input paths");
}
END_TEST

START_TEST(test_load_empty_folder)
{
    const char *root = testutil_tmpdir("emptydir");
    const char *paths[] = {root};
    const char *want = testutil_fmt("%s: folder contains no files", root);
    struct token_buffer b = {0};
    expect_message(dataset_load(paths, 1, &b), ZT_ERR_DATA, want);
    /* Only dotfiles and empty subfolders: still nothing to read. */
    testutil_write_file(testutil_path_in(root, ".swp"), "x", 1);
    mkdir_ok(testutil_path_in(root, "sub"));
    expect_message(dataset_load(paths, 1, &b), ZT_ERR_DATA, want);
}
END_TEST

START_TEST(test_load_folder_loop)
{
    const char *root = testutil_tmpdir("loop");
    mkdir_ok(testutil_path_in(root, "sub"));
    testutil_write_file(testutil_path_in(root, "sub/f"), "x", 1);
    ck_assert_int_eq(symlink("..", testutil_path_in(root, "sub/up")), 0);
    const char *paths[] = {root};
    struct token_buffer b = {0};
    expect_error(dataset_load(paths, 1, &b), ZT_ERR_DATA, "folder loop");
}
END_TEST

START_TEST(test_load_token_file)
{
    const char *path = small_tokfile("loadtok", 50);
    const char *paths[] = {path};
    struct token_buffer b = {0};
    size_t files = 0;
    ck_assert_int_eq(dataset_load_counted(paths, 1, &b, &files), ZT_OK);
    ck_assert_uint_eq(b.n, 50);
    ck_assert_int_eq(b.tokens[49], 49 * 7 % 256);
    ck_assert_uint_eq(files, 1);
    token_buffer_free(&b);
}
END_TEST

START_TEST(test_load_token_file_mixed)
{
    const char *path = small_tokfile("mixed", 50);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    testutil_write_file(testutil_path_in(dir, "text.txt"), "hello", 5);
    const char *two[] = {testutil_path_in(dir, "text.txt"), path};
    struct token_buffer b = {0};
    expect_error(dataset_load(two, 2, &b), ZT_ERR_DATA, "a token file must be the only input");
    const char *folder[] = {dir};
    expect_error(dataset_load(folder, 1, &b), ZT_ERR_DATA, "t.tok: is a token file");
}
END_TEST

/* Sums the sizes and counts the non-dot entries of a flat folder. */
static size_t folder_bytes(const char *dir, size_t *n_entries)
{
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "%s is missing", dir);
    struct dirent *e;
    size_t total = 0;
    *n_entries = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        struct stat sb;
        ck_assert_int_eq(stat(testutil_path_in(dir, e->d_name), &sb), 0);
        ck_assert_msg(S_ISREG(sb.st_mode), "%s is not flat", dir);
        total += (size_t)sb.st_size;
        (*n_entries)++;
    }
    closedir(d);
    return total;
}

START_TEST(test_load_common_licenses)
{
    size_t entries;
    size_t total = folder_bytes(LICENSES, &entries);
    const char *paths[] = {LICENSES};
    struct token_buffer b = {0};
    size_t files = 0;
    ck_assert_int_eq(dataset_load_counted(paths, 1, &b, &files), ZT_OK);
    ck_assert_uint_eq(b.n, total);
    ck_assert_uint_eq(files, entries);
    /* strcmp order: Apache-2.0 first, MPL-2.0 last. */
    size_t n_first, n_last;
    unsigned char *first = testutil_read_file(LICENSES "/Apache-2.0", &n_first);
    unsigned char *last = testutil_read_file(LICENSES "/MPL-2.0", &n_last);
    for (size_t i = 0; i < n_first; i++)
        ck_assert_int_eq(b.tokens[i], first[i]);
    for (size_t i = 0; i < n_last; i++)
        ck_assert_int_eq(b.tokens[b.n - n_last + i], last[i]);
    free(first);
    free(last);
    token_buffer_free(&b);
}
END_TEST

/* ---- token files named directly, binary files ---- */

/* A file named as a token file whose header is damaged must say what is
 * wrong, never be read as text: alone, among several paths, and by its
 * magic when the name says nothing. */
START_TEST(test_load_damaged_tok_header)
{
    struct {
        long offset;
        uint32_t value;
        const char *want; /* after "PATH: " */
    } cases[] = {
        {2, 0x58585858, "not a token file (bad magic)"},
        {8, 9, "token file version 9 is newer than this zerotrain understands (1)"},
        {8, 0, "token file version 0 is not valid (expected 1)"},
        {12, 3, "token width 3 not supported (1, 2 or 4)"},
        {20, 1, "reserved header field is 1, expected 0"},
        {24, 11, "truncated: header says 11 tokens (11 bytes) but the file has 10 bytes of tokens"},
        {24, 9, "header says 9 tokens (9 bytes) but the file has 10 bytes of tokens"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *path = small_tokfile("dmg", 10);
        patch_u32(path, cases[i].offset, cases[i].value);
        const char *want = testutil_fmt("%s: %s", path, cases[i].want);
        struct token_buffer b = {0};
        const char *one[] = {path};
        expect_message(dataset_load(one, 1, &b), ZT_ERR_DATA, want);
        ck_assert_ptr_null(b.tokens);
        const char *text = testutil_path_in(testutil_tmpdir("dmgtxt"), "a.txt");
        testutil_write_file(text, "hello", 5);
        const char *two[] = {text, path};
        expect_message(dataset_load(two, 2, &b), ZT_ERR_DATA, want);
    }
    /* Cut inside the magic: only the name says it is a token file. */
    const char *path = small_tokfile("dmgcut", 10);
    ck_assert_int_eq(truncate(path, 5), 0);
    const char *one[] = {path};
    struct token_buffer b = {0};
    expect_message(
        dataset_load(one, 1, &b), ZT_ERR_DATA,
        testutil_fmt("%s: truncated: the header needs 40 bytes but the file has 5", path));
    /* Named otherwise: the magic says it, and the header is still checked. */
    const char *bin = testutil_path_in(testutil_tmpdir("dmgbin"), "corpus.bin");
    size_t n;
    unsigned char *raw = testutil_read_file(small_tokfile("dmgsrc", 10), &n);
    testutil_put_le(raw + 8, 2, 4);
    testutil_write_file(bin, raw, n);
    free(raw);
    const char *named_bin[] = {bin};
    expect_message(dataset_load(named_bin, 1, &b), ZT_ERR_DATA,
                   testutil_fmt("%s: token file version 2 is newer than this zerotrain "
                                "understands (1)",
                                bin));
}
END_TEST

/* A sound token file loads by its name or by its magic, and a sound one
 * named among several paths is refused as before. */
START_TEST(test_load_sound_tok_by_name_or_magic)
{
    const char *path = small_tokfile("sound", 30);
    const char *one[] = {path};
    struct token_buffer b = {0};
    ck_assert_int_eq(dataset_load(one, 1, &b), ZT_OK);
    ck_assert_uint_eq(b.n, 30);
    ck_assert_int_eq(b.tokens[29], 29 * 7 % 256);
    token_buffer_free(&b);
    const char *other = testutil_path_in(testutil_tmpdir("soundbin"), "corpus.data");
    size_t n;
    unsigned char *raw = testutil_read_file(path, &n);
    testutil_write_file(other, raw, n);
    free(raw);
    const char *by_magic[] = {other};
    ck_assert_int_eq(dataset_load(by_magic, 1, &b), ZT_OK);
    ck_assert_uint_eq(b.n, 30);
    token_buffer_free(&b);
    const char *two[] = {other, path};
    expect_message(dataset_load(two, 2, &b), ZT_ERR_DATA,
                   testutil_fmt("%s: is a token file; a token file must be the only input", other));
}
END_TEST

START_TEST(test_sniff_rule)
{
    char why[96];
    const unsigned char ascii[] = "plain text\n";
    ck_assert_int_eq(sniff_is_binary(ascii, sizeof ascii - 1, 0, why, sizeof why), 0);
    const unsigned char nul[] = {'a', 'b', 'c', 0, 'd'};
    ck_assert_int_eq(sniff_is_binary(nul, sizeof nul, 0, why, sizeof why), 1);
    ck_assert_str_eq(why, "a NUL byte at offset 3");
    /* UTF-8 of every length, and Latin-1 with a few accented letters. */
    const char *utf8 = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 na\xc3\xafve";
    ck_assert_int_eq(sniff_is_binary((const unsigned char *)utf8, strlen(utf8), 0, why, sizeof why),
                     0);
    const char *latin1 = "Le caf\xe9 de la gare est ferm\xe9 le dimanche.";
    ck_assert_int_eq(
        sniff_is_binary((const unsigned char *)latin1, strlen(latin1), 0, why, sizeof why), 0);
    /* More than one byte in ten invalid: overlong, surrogate, stray bytes. */
    const unsigned char junk[] = {'a', 0xc0, 0xaf, 'b', 0xed, 0xa0, 0x80, 'c', 0xff, 'd'};
    ck_assert_int_eq(sniff_is_binary(junk, sizeof junk, 0, why, sizeof why), 1);
    ck_assert_str_eq(why, "6 of its first 10 bytes are not UTF-8 text");
    /* A sequence cut at the end counts only when the file ends there. */
    unsigned char cut[10] = {'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 0xe2, 0x82};
    ck_assert_int_eq(sniff_is_binary(cut, sizeof cut, 1, why, sizeof why), 0);
    ck_assert_int_eq(sniff_is_binary(cut, sizeof cut, 0, why, sizeof why), 1);
    /* Only the first ZT_SNIFF_BYTES bytes are looked at. */
    unsigned char *big = malloc(ZT_SNIFF_BYTES + 1);
    memset(big, 'x', ZT_SNIFF_BYTES + 1);
    big[ZT_SNIFF_BYTES] = 0;
    ck_assert_int_eq(sniff_is_binary(big, ZT_SNIFF_BYTES + 1, 0, why, sizeof why), 0);
    big[ZT_SNIFF_BYTES - 1] = 0;
    ck_assert_int_eq(sniff_is_binary(big, ZT_SNIFF_BYTES + 1, 0, why, sizeof why), 1);
    free(big);
}
END_TEST

static const unsigned char binary_bytes[] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0};

/* root/a.txt "alpha", root/b.png (binary), root/sub/c.txt "gamma". */
static const char *folder_with_binary(const char *tag)
{
    const char *root = testutil_tmpdir(tag);
    mkdir_ok(testutil_path_in(root, "sub"));
    testutil_write_file(testutil_path_in(root, "a.txt"), "alpha", 5);
    testutil_write_file(testutil_path_in(root, "b.png"), binary_bytes, sizeof binary_bytes);
    testutil_write_file(testutil_path_in(root, "sub/c.txt"), "gamma", 5);
    return root;
}

START_TEST(test_load_folder_with_binary)
{
    const char *root = folder_with_binary("binfold");
    const char *paths[] = {root};
    const char *png = testutil_path_in(root, "b.png");
    struct token_buffer b = {0};
    expect_message(dataset_load(paths, 1, &b), ZT_ERR_DATA,
                   testutil_fmt("%s: is binary, not text (a NUL byte at offset 8)", png));
    ck_assert_ptr_null(b.tokens);
    const struct dataset_options opt = {.skip_setting = "data.skip_binary"};
    expect_message(dataset_load_with(paths, 1, &opt, &b, NULL), ZT_ERR_DATA,
                   testutil_fmt("%s: is binary, not text (a NUL byte at offset 8); set "
                                "data.skip_binary: true to skip binary files in folders",
                                png));
    /* A token file whose magic is damaged is binary by its header. */
    const char *root2 = testutil_tmpdir("binfold2");
    testutil_write_file(testutil_path_in(root2, "a.txt"), "alpha", 5);
    const char *tok = testutil_path_in(root2, "corpus.tok");
    int32_t t[4] = {1, 2, 3, 4};
    ck_assert_int_eq(tokfile_write(tok, t, 4, 1, 256), ZT_OK);
    patch(tok, 0, "X", 1);
    const char *paths2[] = {root2};
    expect_message(dataset_load(paths2, 1, &b), ZT_ERR_DATA,
                   testutil_fmt("%s: is binary, not text (a NUL byte at offset 9)", tok));
}
END_TEST

START_TEST(test_load_folder_skip_binary)
{
    const char *root = folder_with_binary("binskip");
    const char *paths[] = {root};
    const struct dataset_options opt = {.skip_binary = 1, .skip_setting = "data.skip_binary"};
    struct token_buffer b = {0};
    struct dataset_report r = {0};
    ck_assert_int_eq(dataset_load_with(paths, 1, &opt, &b, &r), ZT_OK);
    expect_tokens(&b, "alphagamma");
    ck_assert_uint_eq(r.n_files, 2);
    ck_assert_uint_eq(r.n_skipped, 1);
    ck_assert_str_eq(r.skipped[0], testutil_path_in(root, "b.png"));
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    dataset_report_write_skipped(&r, f);
    fclose(f);
    ck_assert_str_eq(text, testutil_fmt("skipped 1 binary file: %s/b.png", root));
    free(text);
    token_buffer_free(&b);
    dataset_report_free(&r);
    ck_assert_ptr_null(r.skipped[0]);
}
END_TEST

START_TEST(test_load_skip_binary_names_the_first_and_counts)
{
    const char *root = testutil_tmpdir("binmany");
    testutil_write_file(testutil_path_in(root, "text"), "t", 1);
    for (int i = 0; i < 6; i++)
        testutil_write_file(testutil_path_in(root, testutil_fmt("%d.bin", i)), binary_bytes,
                            sizeof binary_bytes);
    const char *paths[] = {root};
    const struct dataset_options opt = {.skip_binary = 1};
    struct token_buffer b = {0};
    struct dataset_report r = {0};
    ck_assert_int_eq(dataset_load_with(paths, 1, &opt, &b, &r), ZT_OK);
    expect_tokens(&b, "t");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    dataset_report_write_skipped(&r, f);
    fclose(f);
    ck_assert_str_eq(text, testutil_fmt("skipped 6 binary files: %s/0.bin, %s/1.bin, %s/2.bin, "
                                        "%s/3.bin and 2 more",
                                        root, root, root, root));
    free(text);
    token_buffer_free(&b);
    dataset_report_free(&r);
}
END_TEST

START_TEST(test_load_skip_binary_limits)
{
    const struct dataset_options opt = {.skip_binary = 1, .skip_setting = "data.skip_binary"};
    struct token_buffer b = {0};
    struct dataset_report r = {0};
    /* A folder of nothing but binary files has nothing to train on. */
    const char *root = testutil_tmpdir("binonly");
    testutil_write_file(testutil_path_in(root, "x.bin"), binary_bytes, sizeof binary_bytes);
    const char *paths[] = {root};
    expect_message(dataset_load_with(paths, 1, &opt, &b, &r), ZT_ERR_DATA,
                   testutil_fmt("%s: folder contains no text files (1 binary file skipped)", root));
    dataset_report_free(&r);
    /* A binary file named directly is never skipped, alone or not. */
    const char *file = testutil_path_in(root, "x.bin");
    const char *want = testutil_fmt("%s: is binary, not text (a NUL byte at offset 8)", file);
    const char *one[] = {file};
    expect_message(dataset_load_with(one, 1, &opt, &b, &r), ZT_ERR_DATA, want);
    dataset_report_free(&r);
    const char *text = testutil_path_in(testutil_tmpdir("bintxt"), "t.txt");
    testutil_write_file(text, "text", 4);
    const char *two[] = {text, file};
    expect_message(dataset_load_with(two, 2, &opt, &b, &r), ZT_ERR_DATA, want);
    dataset_report_free(&r);
}
END_TEST

/* ---- validation split ---- */

static struct token_buffer counting_buffer(size_t n)
{
    struct token_buffer b = {malloc(n * sizeof(int32_t)), n, 1u << 20, n, NULL};
    for (size_t i = 0; i < n; i++)
        b.tokens[i] = (int32_t)i;
    return b;
}

START_TEST(test_split_tail_sizes)
{
    struct token_buffer all = counting_buffer(1000), val;
    ck_assert_int_eq(dataset_split_tail(&all, 0.1, 8, &val), ZT_OK);
    ck_assert_uint_eq(all.n, 900);
    ck_assert_uint_eq(val.n, 100);
    ck_assert_int_eq(val.tokens[0], 900);
    ck_assert_int_eq(val.tokens[99], 999);
    ck_assert_uint_eq(val.vocab_size, all.vocab_size);
    token_buffer_free(&val);

    /* 0.001 * 900 rounds down to 0: raised to one window. */
    ck_assert_int_eq(dataset_split_tail(&all, 0.001, 8, &val), ZT_OK);
    ck_assert_uint_eq(val.n, 9);
    ck_assert_uint_eq(all.n, 891);
    ck_assert_int_eq(val.tokens[0], 891);
    token_buffer_free(&val);

    /* 0.333 * 891 = 296.7: rounded down. */
    ck_assert_int_eq(dataset_split_tail(&all, 0.333, 8, &val), ZT_OK);
    ck_assert_uint_eq(val.n, 296);
    token_buffer_free(&val);

    ck_assert_int_eq(dataset_split_tail(&all, 0.0, 8, &val), ZT_OK);
    ck_assert_uint_eq(val.n, 0);
    ck_assert_ptr_null(val.tokens);
    ck_assert_uint_eq(all.n, 595);
    token_buffer_free(&all);
}
END_TEST

START_TEST(test_split_tail_errors)
{
    struct token_buffer all = counting_buffer(5), val;
    expect_message(dataset_split_tail(&all, 0.1, 8, &val), ZT_ERR_DATA,
                   "data: 5 tokens are fewer than seq_len + 1 = 9: not one training window");
    token_buffer_free(&all);

    all = counting_buffer(17);
    expect_error(dataset_split_tail(&all, 0.1, 8, &val), ZT_ERR_DATA,
                 "9 validation tokens would leave 8 for training");
    ck_assert_uint_eq(all.n, 17);
    ck_assert_ptr_null(val.tokens);
    ck_assert_int_eq(dataset_split_tail(&all, 0.1, 7, &val), ZT_OK); /* 8 + 9 */
    ck_assert_uint_eq(val.n, 8);
    token_buffer_free(&val);

    expect_error(dataset_split_tail(&all, 1.0, 2, &val), ZT_ERR_CONFIG, "outside [0, 1)");
    expect_error(dataset_split_tail(&all, -0.1, 2, &val), ZT_ERR_CONFIG, "outside [0, 1)");
    expect_error(dataset_split_tail(&all, 0.1, 0, &val), ZT_ERR_CONFIG, "seq_len 0");
    token_buffer_free(&all);
}
END_TEST

/* ---- sampler ---- */

/* The rule of data.h written out independently of sampler.c. */
static void ref_permutation(uint64_t seed, uint64_t epoch, size_t n, uint32_t *perm)
{
    uint64_t key = rng_key(seed, "data");
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    for (size_t i = n - 1; i >= 1; i--) {
        size_t j = (size_t)(rng_u64(key, (epoch << 32) | i) % (i + 1));
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

#define SEQ     8
#define WINDOWS 37

START_TEST(test_sampler_window_count)
{
    struct sampler s;
    ck_assert_int_eq(sampler_init(&s, WINDOWS * SEQ + 1, SEQ, 1, 1, 1, 1, 0), ZT_OK);
    ck_assert_uint_eq(s.n_windows, WINDOWS);
    sampler_free(&s);
    ck_assert_int_eq(sampler_init(&s, WINDOWS * SEQ, SEQ, 1, 1, 1, 1, 0), ZT_OK);
    ck_assert_uint_eq(s.n_windows, WINDOWS - 1);
    sampler_free(&s);
    ck_assert_int_eq(sampler_init(&s, SEQ + 1, SEQ, 1, 1, 1, 1, 0), ZT_OK);
    ck_assert_uint_eq(s.n_windows, 1);
    ck_assert_uint_eq(sampler_window(&s, 5), 0);
    sampler_free(&s);
    sampler_free(&s); /* idempotent */
    expect_message(sampler_init(&s, SEQ, SEQ, 1, 1, 1, 1, 0), ZT_ERR_DATA,
                   "data: 8 tokens are fewer than seq_len + 1 = 9: not one training window");
    expect_error(sampler_init(&s, 100, SEQ, 1, 1, 1, 2, 2), ZT_ERR_CONFIG, "rank 2");
    expect_error(sampler_init(&s, 100, SEQ, 1, 0, 1, 1, 0), ZT_ERR_CONFIG, "micro batch 0");
}
END_TEST

START_TEST(test_sampler_is_permutation_per_epoch)
{
    struct sampler s;
    ck_assert_int_eq(sampler_init(&s, WINDOWS * SEQ + 1, SEQ, 42, 1, 1, 1, 0), ZT_OK);
    for (uint64_t e = 0; e < 4; e++) {
        int seen[WINDOWS] = {0};
        for (uint64_t k = 0; k < WINDOWS; k++) {
            size_t w = sampler_window(&s, e * WINDOWS + k);
            ck_assert_uint_lt(w, WINDOWS);
            seen[w]++;
        }
        for (int w = 0; w < WINDOWS; w++)
            ck_assert_msg(seen[w] == 1, "epoch %d: window %d seen %d times", (int)e, w, seen[w]);
    }
    sampler_free(&s);
}
END_TEST

START_TEST(test_sampler_follows_rule)
{
    struct sampler s;
    ck_assert_int_eq(sampler_init(&s, WINDOWS * SEQ + 1, SEQ, 7, 1, 1, 1, 0), ZT_OK);
    uint64_t epochs[] = {0, 1, 5, 2, 0};
    for (size_t k = 0; k < sizeof epochs / sizeof *epochs; k++) {
        uint32_t ref[WINDOWS];
        ref_permutation(7, epochs[k], WINDOWS, ref);
        for (size_t p = 0; p < WINDOWS; p++)
            ck_assert_uint_eq(sampler_window(&s, epochs[k] * WINDOWS + p), ref[p]);
    }
    sampler_free(&s);
}
END_TEST

START_TEST(test_sampler_epochs_and_seeds)
{
    struct sampler a, b, c;
    ck_assert_int_eq(sampler_init(&a, WINDOWS * SEQ + 1, SEQ, 1234, 1, 1, 1, 0), ZT_OK);
    ck_assert_int_eq(sampler_init(&b, WINDOWS * SEQ + 1, SEQ, 1234, 2, 3, 1, 0), ZT_OK);
    ck_assert_int_eq(sampler_init(&c, WINDOWS * SEQ + 1, SEQ, 1235, 1, 1, 1, 0), ZT_OK);
    int same_epoch = 1, same_seed = 1;
    for (uint64_t i = 0; i < 3 * WINDOWS; i++) {
        ck_assert_uint_eq(sampler_window(&a, i), sampler_window(&b, i));
        if (i < WINDOWS && sampler_window(&a, i) != sampler_window(&a, i + WINDOWS))
            same_epoch = 0;
        if (sampler_window(&a, i) != sampler_window(&c, i))
            same_seed = 0;
    }
    ck_assert_msg(!same_epoch, "epochs 0 and 1 drew the same order");
    ck_assert_msg(!same_seed, "seeds 1234 and 1235 drew the same order");
    sampler_free(&a);
    sampler_free(&b);
    sampler_free(&c);
}
END_TEST

START_TEST(test_sampler_fill_copies_windows)
{
    size_t n = WINDOWS * SEQ + 5;
    struct token_buffer data = counting_buffer(n);
    struct sampler s;
    ck_assert_int_eq(sampler_init(&s, n, SEQ, 9, 3, 2, 2, 1), ZT_OK);
    int32_t in[3 * SEQ], tg[3 * SEQ];
    uint32_t ref[WINDOWS];
    ref_permutation(9, 0, WINDOWS, ref);
    /* step 2, micro step 1 of rank 1: entries 2*12 + 6 + 3 .. +2 */
    sampler_fill(&s, &data, 2, 1, in, tg);
    for (int b = 0; b < 3; b++) {
        size_t w = ref[33 + b];
        for (int k = 0; k < SEQ; k++) {
            ck_assert_int_eq(in[b * SEQ + k], (int32_t)(w * SEQ + k));
            ck_assert_int_eq(tg[b * SEQ + k], (int32_t)(w * SEQ + k + 1));
        }
    }
    sampler_free(&s);
    token_buffer_free(&data);
}
END_TEST

/* For micro 2 and worlds 1, 2, 4 with accum = 8 / (micro * world), the
 * sequences of a step concatenated rank-major then micro-step-major are
 * the same, and are the windows of entries 8s .. 8s+7 in order. */
START_TEST(test_sampler_world_size_independent)
{
    enum { MICRO = 2, GLOBAL = 8, STEPS = 15 }; /* 120 entries: over 3 epochs */
    size_t n = WINDOWS * SEQ + 1;
    struct token_buffer data = counting_buffer(n);
    static int32_t seqs[3][STEPS][GLOBAL * SEQ];
    int worlds[3] = {1, 2, 4};
    for (int wi = 0; wi < 3; wi++) {
        int world = worlds[wi], accum = GLOBAL / (MICRO * world);
        for (int r = 0; r < world; r++) {
            struct sampler s;
            ck_assert_int_eq(sampler_init(&s, n, SEQ, 77, MICRO, accum, world, r), ZT_OK);
            for (int st = 0; st < STEPS; st++)
                for (int m = 0; m < accum; m++) {
                    int32_t in[MICRO * SEQ], tg[MICRO * SEQ];
                    sampler_fill(&s, &data, (uint64_t)st, m, in, tg);
                    size_t row = ((size_t)r * accum + m) * MICRO;
                    memcpy(&seqs[wi][st][row * SEQ], in, sizeof in);
                    for (int k = 0; k < MICRO * SEQ; k++)
                        ck_assert_int_eq(tg[k], in[k] + 1);
                }
            sampler_free(&s);
        }
    }
    for (int st = 0; st < STEPS; st++) {
        ck_assert_mem_eq(seqs[1][st], seqs[0][st], sizeof seqs[0][st]);
        ck_assert_mem_eq(seqs[2][st], seqs[0][st], sizeof seqs[0][st]);
        for (int e = 0; e < GLOBAL; e++) {
            uint64_t entry = (uint64_t)st * GLOBAL + e;
            uint32_t ref[WINDOWS];
            ref_permutation(77, entry / WINDOWS, WINDOWS, ref);
            ck_assert_int_eq(seqs[0][st][e * SEQ], (int32_t)(ref[entry % WINDOWS] * SEQ));
        }
    }
    token_buffer_free(&data);
}
END_TEST

/* ---- prepare ---- */

START_TEST(test_prepare_run_reads_back)
{
    const char *in = testutil_tmpdir("prepin");
    const char *outdir = testutil_tmpdir("prepout");
    mkdir_ok(testutil_path_in(in, "sub"));
    testutil_write_file(testutil_path_in(in, "sub/2.txt"), "world", 5);
    testutil_write_file(testutil_path_in(in, "1.txt"), "hello ", 6);
    const char *paths[] = {in};
    const char *out = testutil_path_in(outdir, "data.tok");
    char *report = NULL;
    size_t report_len = 0;
    FILE *rep = open_memstream(&report, &report_len);
    ck_assert_int_eq(prepare_run(out, paths, 1, NULL, rep), ZT_OK);
    fclose(rep);
    const char *want =
        testutil_fmt("wrote 11 tokens (256 vocab, 1-byte ids) from 2 files to %s\n", out);
    ck_assert_str_eq(report, want);
    free(report);
    struct token_buffer b = {0};
    ck_assert_int_eq(tokfile_read(out, &b), ZT_OK);
    ck_assert_uint_eq(b.vocab_size, 256);
    expect_tokens(&b, "hello world");
    token_buffer_free(&b);

    /* A prepared file is not an input for prepare. */
    const char *again[] = {out};
    expect_error(prepare_run(testutil_path_in(outdir, "x.tok"), again, 1, NULL, NULL), ZT_ERR_USAGE,
                 "is already a token file");
    ck_assert_int_ne(access(testutil_path_in(outdir, "x.tok"), F_OK), 0);
}
END_TEST

START_TEST(test_prepare_run_errors)
{
    const char *dir = testutil_tmpdir("preperr");
    const char *paths[] = {testutil_path_in(dir, "missing")};
    const char *out = testutil_path_in(dir, "o.tok");
    expect_error(prepare_run(out, paths, 1, NULL, NULL), ZT_ERR_IO, "no such file or directory");
    ck_assert_int_ne(access(out, F_OK), 0);
    testutil_write_file(testutil_path_in(dir, "t.txt"), "text", 4);
    const char *self[] = {testutil_path_in(dir, "t.txt")};
    expect_error(prepare_run(testutil_path_in(dir, "t.txt"), self, 1, NULL, NULL), ZT_ERR_USAGE,
                 "the output is also an input");
}
END_TEST

/* prepare reads its inputs as text whatever their names, and refuses a
 * binary one. */
START_TEST(test_prepare_tok_named_text_and_binary)
{
    const char *dir = testutil_tmpdir("preptok");
    const char *in = testutil_path_in(dir, "train.en.tok");
    testutil_write_file(in, "tokenised text", 14);
    const char *paths[] = {in};
    const char *out = testutil_path_in(dir, "o.tok");
    ck_assert_int_eq(prepare_run(out, paths, 1, NULL, NULL), ZT_OK);
    struct token_buffer b = {0};
    ck_assert_int_eq(tokfile_read(out, &b), ZT_OK);
    expect_tokens(&b, "tokenised text");
    token_buffer_free(&b);
    const char *bin = testutil_path_in(dir, "x.bin");
    testutil_write_file(bin, binary_bytes, sizeof binary_bytes);
    const char *bad[] = {bin};
    expect_message(prepare_run(testutil_path_in(dir, "p.tok"), bad, 1, NULL, NULL), ZT_ERR_DATA,
                   testutil_fmt("%s: is binary, not text (a NUL byte at offset 8)", bin));
}
END_TEST

START_TEST(test_prepare_common_licenses)
{
    const char *out = testutil_path_in(testutil_tmpdir("preplic"), "lic.tok");
    const char *paths[] = {LICENSES};
    ck_assert_int_eq(prepare_run(out, paths, 1, NULL, NULL), ZT_OK);
    struct token_buffer direct = {0}, back = {0};
    ck_assert_int_eq(dataset_load(paths, 1, &direct), ZT_OK);
    ck_assert_int_eq(tokfile_read(out, &back), ZT_OK);
    ck_assert_uint_eq(back.n, direct.n);
    ck_assert_mem_eq(back.tokens, direct.tokens, direct.n * sizeof *direct.tokens);
    token_buffer_free(&direct);
    token_buffer_free(&back);
}
END_TEST

/* ---- the binary: every rank gives the same answer ---- */

/* A folder holding a copy of a license text and a binary file. */
static const char *corpus_with_binary(const char *tag)
{
    const char *root = testutil_tmpdir(tag);
    size_t n;
    unsigned char *text = testutil_read_file(LICENSES "/GPL-3", &n);
    testutil_write_file(testutil_path_in(root, "gpl.txt"), text, n);
    free(text);
    testutil_write_file(testutil_path_in(root, "b.png"), binary_bytes, sizeof binary_bytes);
    return root;
}

static const char *micro_log(const char *dir, const char *name)
{
    return testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", name)));
}

START_TEST(test_train_damaged_tok_exits_1)
{
    const char *dir = testutil_tmpdir("bin-tok");
    const char *path = testutil_path_in(dir, "corpus.tok");
    int32_t *t = malloc(4000 * sizeof *t);
    for (int i = 0; i < 4000; i++)
        t[i] = i % 251;
    ck_assert_int_eq(tokfile_write(path, t, 4000, 1, 256), ZT_OK);
    free(t);
    patch(path, 0, "zt", 2);
    int rc = testutil_train_micro(dir, "run", 2,
                                  testutil_fmt("--set data.train=%s --set run.steps=2", path));
    const char *out = micro_log(dir, "run");
    ck_assert_msg(rc == 1, "exit %d:\n%s", rc, out);
    ck_assert_msg(testutil_count(out, "zerotrain: error:") == 1, "output:\n%s", out);
    ck_assert_msg(strstr(out, testutil_fmt("%s: not a token file (bad magic)", path)) != NULL,
                  "output:\n%s", out);
}
END_TEST

START_TEST(test_train_binary_in_folder_exits_1)
{
    const char *dir = testutil_tmpdir("bin-fold");
    const char *root = corpus_with_binary("bin-fold-data");
    int rc = testutil_train_micro(dir, "run", 2,
                                  testutil_fmt("--set data.train=%s --set run.steps=2", root));
    const char *out = micro_log(dir, "run");
    ck_assert_msg(rc == 1, "exit %d:\n%s", rc, out);
    ck_assert_msg(testutil_count(out, "zerotrain: error:") == 1, "output:\n%s", out);
    const char *want = testutil_fmt("%s/b.png: is binary, not text (a NUL byte at offset 8); set "
                                    "data.skip_binary: true to skip binary files in folders",
                                    root);
    ck_assert_msg(strstr(out, want) != NULL, "output:\n%s", out);
}
END_TEST

START_TEST(test_train_skip_binary_warns_once)
{
    const char *dir = testutil_tmpdir("bin-skip");
    const char *root = corpus_with_binary("bin-skip-data");
    int rc = testutil_train_micro(
        dir, "run", 2,
        testutil_fmt("--set data.train=%s --set run.steps=2 --set data.skip_binary=true", root));
    const char *out = micro_log(dir, "run");
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, out);
    const char *want = testutil_fmt("zerotrain: warning: data.train: skipped 1 binary file: "
                                    "%s/b.png (data.skip_binary is true)\n",
                                    root);
    ck_assert_msg(testutil_count(out, want) == 1, "output:\n%s", out);
    ck_assert_msg(testutil_count(out, "zerotrain: warning:") == 1, "output:\n%s", out);
    double loss[4];
    ck_assert_int_eq(testutil_micro_losses(dir, "run", loss, 4), 2);
}
END_TEST

static Suite *data_suite(void)
{
    Suite *s = suite_create("data");
    TCase *f = tcase_create("tokfile");
    tcase_add_test(f, test_checksum_vectors);
    tcase_add_test(f, test_roundtrip_width1);
    tcase_add_test(f, test_roundtrip_width2);
    tcase_add_test(f, test_roundtrip_width4);
    tcase_add_test(f, test_roundtrip_empty);
    tcase_add_test(f, test_write_rejects_bad_input);
    tcase_add_test(f, test_write_is_atomic_and_replaces);
    tcase_add_test(f, test_read_flipped_token_byte);
    tcase_add_test(f, test_read_bad_magic);
    tcase_add_test(f, test_read_newer_version);
    tcase_add_test(f, test_read_bad_width);
    tcase_add_test(f, test_read_bad_reserved_and_vocab);
    tcase_add_test(f, test_read_truncated_header);
    tcase_add_test(f, test_read_truncated_body);
    tcase_add_test(f, test_read_trailing_bytes);
    tcase_add_test(f, test_read_id_over_vocab);
    tcase_add_test(f, test_read_missing_and_folder);
    suite_add_tcase(s, f);

    TCase *d = tcase_create("dataset");
    tcase_add_test(d, test_byte_tokenizer);
    tcase_add_test(d, test_load_nested_folder);
    tcase_add_test(d, test_load_paths_in_given_order);
    tcase_add_test(d, test_load_missing_path);
    tcase_add_test(d, test_load_empty_folder);
    tcase_add_test(d, test_load_folder_loop);
    tcase_add_test(d, test_load_token_file);
    tcase_add_test(d, test_load_token_file_mixed);
    tcase_add_test(d, test_load_common_licenses);
    tcase_add_test(d, test_load_damaged_tok_header);
    tcase_add_test(d, test_load_sound_tok_by_name_or_magic);
    tcase_add_test(d, test_sniff_rule);
    tcase_add_test(d, test_load_folder_with_binary);
    tcase_add_test(d, test_load_folder_skip_binary);
    tcase_add_test(d, test_load_skip_binary_names_the_first_and_counts);
    tcase_add_test(d, test_load_skip_binary_limits);
    tcase_add_test(d, test_split_tail_sizes);
    tcase_add_test(d, test_split_tail_errors);
    suite_add_tcase(s, d);

    TCase *p = tcase_create("sampler");
    tcase_add_test(p, test_sampler_window_count);
    tcase_add_test(p, test_sampler_is_permutation_per_epoch);
    tcase_add_test(p, test_sampler_follows_rule);
    tcase_add_test(p, test_sampler_epochs_and_seeds);
    tcase_add_test(p, test_sampler_fill_copies_windows);
    tcase_add_test(p, test_sampler_world_size_independent);
    suite_add_tcase(s, p);

    TCase *r = tcase_create("prepare");
    tcase_add_test(r, test_prepare_run_reads_back);
    tcase_add_test(r, test_prepare_run_errors);
    tcase_add_test(r, test_prepare_common_licenses);
    tcase_add_test(r, test_prepare_tok_named_text_and_binary);
    suite_add_tcase(s, r);

    TCase *z = testutil_tcase(s, "binary", 300);
    tcase_add_test(z, test_train_damaged_tok_exits_1);
    tcase_add_test(z, test_train_binary_in_folder_exits_1);
    tcase_add_test(z, test_train_skip_binary_warns_once);
    return s;
}

int main(void)
{
    return testutil_run_suite(data_suite(), 0);
}
