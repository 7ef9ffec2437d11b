/* tests/test_safetensors_set.c — one safetensors file or a sharded set
 * with its index, read and written by name.
 *
 * Sets for the reader are made here: shards by the plain single-file
 * writer (checked by test_safetensors), indexes as hand-written text, so a
 * reader that misread the index format could not agree with itself. The
 * writer's cut is checked against huggingface_hub's algorithm worked out
 * by hand for sizes chosen to hit each of its branches, and its index
 * against the exact text json.dumps(indent=2, sort_keys=True) writes.
 * Every way an index can contradict its shards, or reach out of its
 * folder, must be refused with a message naming the index and the tensor;
 * two allocation fault loops (opening a set, writing one) must give clean
 * errors and leak nothing.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../formats/safetensors.h"
#include "../formats/safetensors_set.h"
#include "fault_alloc.h"
#include "testutil.h"

/* ---- helpers ---- */

static int file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* The value of element i of the tensor called name: a function of both,
 * so a tensor read from the wrong place shows. */
static float value_of(const char *name, uint64_t i)
{
    unsigned h = 0;
    for (const char *p = name; *p; p++)
        h = h * 31u + (unsigned char)*p;
    return (float)(h % 1000u) + 0.001f * (float)i;
}

/* Writes a safetensors file at dir/file holding 1-D F32 tensors called
 * names[0..n) of numel[k] elements, with value_of values. */
static void write_shard(const char *dir, const char *file, const char *const *names,
                        const uint64_t *numel, int n)
{
    struct safetensors_writer *w = NULL;
    ck_assert_int_eq(safetensors_writer_open(testutil_path_in(dir, file), &w), ZT_OK);
    for (int k = 0; k < n; k++)
        ck_assert_int_eq(safetensors_writer_add(w, names[k], ZT_F32, 1, &numel[k]), ZT_OK);
    ck_assert_int_eq(safetensors_writer_begin_data(w), ZT_OK);
    for (int k = 0; k < n; k++)
        for (uint64_t i = 0; i < numel[k]; i++) {
            float v = value_of(names[k], i);
            ck_assert_int_eq(safetensors_writer_write_f32(w, &v, 1), ZT_OK);
        }
    ck_assert_int_eq(safetensors_writer_finish(w), ZT_OK);
}

static void write_text(const char *path, const char *text)
{
    testutil_write_file(path, text, strlen(text));
}

/* Three shards in dir: s1 {a, b}, s2 {c, d}, s3 {e}; `extra` (if not
 * NULL) added to s2 as well. */
static void write_three_shards(const char *dir, const char *extra)
{
    const char *s1[] = {"a", "b"}, *s2[] = {"c", "d", extra}, *s3[] = {"e"};
    const uint64_t n1[] = {3, 5}, n2[] = {7, 2, 4}, n3[] = {6};
    write_shard(dir, "s1.safetensors", s1, n1, 2);
    write_shard(dir, "s2.safetensors", s2, n2, extra ? 3 : 2);
    write_shard(dir, "s3.safetensors", s3, n3, 1);
}

/* An index whose weight_map lists a..e in their shards, with `more`
 * (entries with a leading comma, or "") after them. */
static const char *index_text(const char *more)
{
    return testutil_fmt("{\"metadata\": {\"total_size\": 92},\n \"weight_map\": {\"e\": "
                        "\"s3.safetensors\", \"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\", "
                        "\"d\": \"s2.safetensors\", \"c\": \"s2.safetensors\"%s}}",
                        more);
}

/* safetensors_set_open must fail with `want`, leave *out NULL, and say
 * "PATH: " then a message containing `text`. */
static void expect_open_error(const char *path, zt_status want, const char *text)
{
    struct safetensors_set *s = (struct safetensors_set *)&s; /* must be reset to NULL */
    zt_status got = safetensors_set_open(path, &s);
    ck_assert_msg(got == want, "status %s, expected %s (message: %s)", zt_status_str(got),
                  zt_status_str(want), zt_error_message());
    ck_assert_ptr_null(s);
    const char *msg = zt_error_message();
    ck_assert_msg(strncmp(msg, path, strlen(path)) == 0 && msg[strlen(path)] == ':',
                  "message does not start with %s: %s", path, msg);
    ck_assert_msg(strstr(msg, text), "message lacks \"%s\": %s", text, msg);
}

/* Every tensor of the set read whole holds its value_of values. */
static void check_values(struct safetensors_set *s)
{
    for (int i = 0; i < safetensors_set_count(s); i++) {
        const struct safetensors_tensor *t = safetensors_set_tensor_at(s, i);
        uint64_t n = safetensors_tensor_numel(t);
        float v[128];
        ck_assert_uint_le(n, 128);
        ck_assert_int_eq(safetensors_set_read_f32(s, t, 0, n, v), ZT_OK);
        for (uint64_t j = 0; j < n; j++)
            ck_assert_msg(v[j] == value_of(t->name, j), "%s[%llu]", t->name, (unsigned long long)j);
    }
}

/* ---- reading ---- */

START_TEST(test_single_file)
{
    const char *dir = testutil_tmpdir("set-single");
    write_three_shards(dir, NULL);
    const char *path = testutil_path_in(dir, "s2.safetensors");
    struct safetensors_set *s = NULL;
    ck_assert_int_eq(safetensors_set_open(path, &s), ZT_OK);
    ck_assert_str_eq(safetensors_set_path(s), path);
    ck_assert_int_eq(safetensors_set_shard_count(s), 1);
    ck_assert_int_eq(safetensors_set_count(s), 2);
    ck_assert_str_eq(safetensors_set_tensor_at(s, 0)->name, "c");
    ck_assert_str_eq(safetensors_set_tensor_at(s, 1)->name, "d");
    const struct safetensors_tensor *d = safetensors_set_find(s, "d");
    ck_assert_ptr_eq(d, safetensors_set_tensor_at(s, 1));
    ck_assert_ptr_null(safetensors_set_find(s, "a"));
    ck_assert_str_eq(safetensors_set_file_of(s, d), path);
    float v;
    ck_assert_int_eq(safetensors_set_read_f32(s, d, 1, 1, &v), ZT_OK);
    ck_assert(v == value_of("d", 1));
    ck_assert_int_eq(safetensors_set_read_f32(s, d, 1, 2, &v), ZT_ERR_USAGE);
    check_values(s);
    safetensors_set_close(s);
    safetensors_set_close(NULL);
}
END_TEST

START_TEST(test_index_of_three_shards)
{
    const char *dir = testutil_tmpdir("set-index");
    write_three_shards(dir, NULL);
    const char *index = testutil_path_in(dir, "weights.index.json");
    write_text(index, index_text(""));
    struct safetensors_set *s = NULL;
    ck_assert_msg(safetensors_set_open(index, &s) == ZT_OK, "%s", zt_error_message());
    ck_assert_str_eq(safetensors_set_path(s), index);
    ck_assert_int_eq(safetensors_set_shard_count(s), 3);
    ck_assert_int_eq(safetensors_set_count(s), 5);
    /* the shards in name order, each's tensors in header order */
    const char *order = "abcde";
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(safetensors_set_tensor_at(s, i)->name[0], order[i]);
    static const char *const shard_of[] = {"s1", "s1", "s2", "s2", "s3"};
    for (int i = 0; i < 5; i++) {
        char name[2] = {order[i], 0};
        const struct safetensors_tensor *t = safetensors_set_find(s, name);
        ck_assert_ptr_nonnull(t);
        ck_assert_str_eq(safetensors_set_file_of(s, t),
                         testutil_path_in(dir, testutil_fmt("%s.safetensors", shard_of[i])));
    }
    ck_assert_ptr_null(safetensors_set_find(s, "f"));
    check_values(s);
    safetensors_set_close(s);
}
END_TEST

/* A folder is read as from_pretrained reads it: model.safetensors first,
 * else the index; anything else is named. */
START_TEST(test_folder)
{
    const char *dir = testutil_tmpdir("set-folder");
    write_three_shards(dir, NULL);
    struct safetensors_set *s = NULL;
    expect_open_error(dir, ZT_ERR_IO,
                      "a folder without model.safetensors or model.safetensors.index.json");

    write_text(testutil_path_in(dir, SAFETENSORS_SET_INDEX), index_text(""));
    ck_assert_int_eq(safetensors_set_open(dir, &s), ZT_OK);
    ck_assert_str_eq(safetensors_set_path(s), testutil_path_in(dir, SAFETENSORS_SET_INDEX));
    ck_assert_int_eq(safetensors_set_count(s), 5);
    safetensors_set_close(s);

    const char *s3[] = {"e"};
    const uint64_t n3[] = {6};
    write_shard(dir, SAFETENSORS_SET_FILE, s3, n3, 1);
    ck_assert_int_eq(safetensors_set_open(testutil_fmt("%s/", dir), &s), ZT_OK);
    ck_assert_str_eq(safetensors_set_path(s), testutil_fmt("%s/%s", dir, SAFETENSORS_SET_FILE));
    ck_assert_int_eq(safetensors_set_count(s), 1);
    check_values(s);
    safetensors_set_close(s);
}
END_TEST

/* The digest of a set is FNV-1a 64 over its shards' bytes one after the
 * other, in the shards' name order, written out here rather than trusted
 * to the module's, and their total size; one file is its own bytes. */
START_TEST(test_digest_covers_every_shard)
{
    static const char *const shards[] = {"model-00001-of-00003.safetensors",
                                         "model-00002-of-00003.safetensors",
                                         "model-00003-of-00003.safetensors"};
    uint64_t want = 0xcbf29ce484222325ull, want_bytes = 0, got, bytes;
    for (int i = 0; i < 3; i++) {
        size_t n;
        unsigned char *b = testutil_read_file(
            testutil_source_path(testutil_fmt("tests/data/hf_llama_sharded/%s", shards[i])), &n);
        for (size_t k = 0; k < n; k++)
            want = (want ^ b[k]) * 0x100000001b3ull;
        want_bytes += n;
        free(b);
    }
    struct safetensors_set *s = NULL;
    ck_assert_int_eq(safetensors_set_open(testutil_source_path("tests/data/hf_llama_sharded"), &s),
                     ZT_OK);
    ck_assert_int_eq(safetensors_set_digest(s, &got, &bytes), ZT_OK);
    safetensors_set_close(s);
    ck_assert_uint_eq(got, want);
    ck_assert_uint_eq(bytes, want_bytes);
    ck_assert_uint_eq(bytes, 9328 + 8736 + 7944);

    ck_assert_int_eq(
        safetensors_set_open(testutil_source_path("tests/data/hf_gpt2_micro.safetensors"), &s),
        ZT_OK);
    ck_assert_int_eq(safetensors_set_digest(s, &got, &bytes), ZT_OK);
    safetensors_set_close(s);
    ck_assert_uint_eq(bytes, 149832);
    ck_assert_uint_ne(got, want);
}
END_TEST

START_TEST(test_missing_file)
{
    const char *path = testutil_path_in(testutil_tmpdir("set-nofile"), "none.safetensors");
    expect_open_error(path, ZT_ERR_IO, "no such file or directory");
    path = testutil_path_in(testutil_tmpdir("set-noindex"), "none.index.json");
    expect_open_error(path, ZT_ERR_IO, "no such file or directory");
}
END_TEST

/* ---- an index against its shards ---- */

START_TEST(test_missing_shard)
{
    const char *dir = testutil_tmpdir("set-noshard");
    write_three_shards(dir, NULL);
    const char *index = testutil_path_in(dir, "m.index.json");
    ck_assert_int_eq(unlink(testutil_path_in(dir, "s2.safetensors")), 0);
    write_text(index, index_text(""));
    expect_open_error(index, ZT_ERR_IO,
                      testutil_fmt("weight_map puts tensor 'c' in shard s2.safetensors, which "
                                   "cannot be read: %s/s2.safetensors: no such file or directory",
                                   dir));
}
END_TEST

START_TEST(test_tensor_in_two_shards)
{
    const char *dir = testutil_tmpdir("set-twice");
    write_three_shards(dir, "b");
    const char *index = testutil_path_in(dir, "m.index.json");
    write_text(index, index_text(""));
    expect_open_error(index, ZT_ERR_DATA,
                      "tensor 'b' is in two shards, s1.safetensors and s2.safetensors; "
                      "weight_map names s1.safetensors");
}
END_TEST

START_TEST(test_weight_map_names_the_wrong_shard)
{
    const char *dir = testutil_tmpdir("set-wrong");
    write_three_shards(dir, "f");
    const char *index = testutil_path_in(dir, "m.index.json");
    write_text(index, index_text(", \"f\": \"s3.safetensors\""));
    expect_open_error(index, ZT_ERR_DATA,
                      "weight_map puts tensor 'f' in s3.safetensors, but that shard has no such "
                      "tensor (it is in s2.safetensors)");
    write_text(index, index_text(", \"f\": \"s3.safetensors\", \"g\": \"s3.safetensors\""));
    expect_open_error(index, ZT_ERR_DATA,
                      "weight_map puts tensor 'f' in s3.safetensors, but that shard has no such "
                      "tensor (it is in s2.safetensors)");
    write_text(index, index_text(", \"g\": \"s1.safetensors\""));
    expect_open_error(index, ZT_ERR_DATA,
                      "weight_map puts tensor 'g' in s1.safetensors, but that shard has no such "
                      "tensor (no shard holds it)");
    write_text(index, index_text(""));
    expect_open_error(index, ZT_ERR_DATA,
                      "shard s2.safetensors holds tensor 'f', which weight_map does not list");
}
END_TEST

START_TEST(test_shard_outside_the_folder)
{
    const char *dir = testutil_tmpdir("set-escape");
    const char *sub = testutil_path_in(dir, "sub");
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    write_three_shards(dir, NULL);
    write_three_shards(sub, NULL);
    const char *index = testutil_path_in(sub, "m.index.json");
    static const char *const bad[] = {"../s1.safetensors", "sub/s1.safetensors", "/tmp/x",
                                      "s1..safetensors", ".."};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(index, index_text(testutil_fmt(", \"f\": \"%s\"", bad[i])));
        expect_open_error(index, ZT_ERR_DATA,
                          testutil_fmt("weight_map puts tensor 'f' in '%s', which is not a file "
                                       "of the index's folder (a shard name has no '/' or '..')",
                                       bad[i]));
    }
    write_text(index, index_text(", \"f\": \"\""));
    expect_open_error(index, ZT_ERR_DATA, "weight_map puts tensor 'f' in '', which is not a file");
}
END_TEST

START_TEST(test_malformed_index)
{
    const char *dir = testutil_tmpdir("set-badjson");
    write_three_shards(dir, NULL);
    const char *index = testutil_path_in(dir, "m.index.json");
    static const struct {
        const char *text, *message;
    } cases[] = {
        {"{\"weight_map\": {\"a\": \"s1.safetensors\",}}",
         "not valid JSON at byte 38: expected a string key"},
        {"", "not valid JSON at byte 0"},
        {"[1]", "at byte 0: the index must be an object, not an array"},
        {"{\"metadata\": {}}", "the index has no \"weight_map\""},
        {"{\"weight_map\": [\"s1.safetensors\"]}",
         "at byte 15: \"weight_map\" must be an object, not an array"},
        {"{\"weight_map\": {}, \"weight_map\": {}}", "\"weight_map\" is given 2 times"},
        {"{\"weight_map\": {\"a\": 1}}",
         "at byte 21: weight_map's \"a\" must be a string (a shard file name), not an integer"},
        {"{\"weight_map\": {\"a\": \"s1.safetensors\", \"a\": \"s1.safetensors\"}}",
         "weight_map lists tensor 'a' twice"},
        {"{\"metadata\": [], \"weight_map\": {}}",
         "at byte 13: \"metadata\" must be an object, not an array"},
        {"{\"metadata\": {\"total_size\": -1}, \"weight_map\": {}}",
         "at byte 28: metadata.total_size must be a non-negative integer, not a negative "
         "integer"},
        {"{\"metadata\": {\"total_size\": \"92\"}, \"weight_map\": {}}",
         "at byte 28: metadata.total_size must be a non-negative integer, not a string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text(index, cases[i].text);
        expect_open_error(index, ZT_ERR_DATA, cases[i].message);
    }
    /* an empty weight_map is a set of no tensors; other members are not ours to judge */
    write_text(index, "{\"weight_map\": {}, \"format\": \"x\", \"metadata\": {\"total_size\": 0, "
                      "\"total_parameters\": 0}}");
    struct safetensors_set *s = NULL;
    ck_assert_int_eq(safetensors_set_open(index, &s), ZT_OK);
    ck_assert_int_eq(safetensors_set_count(s), 0);
    safetensors_set_close(s);
}
END_TEST

START_TEST(test_open_allocation_faults)
{
    const char *dir = testutil_tmpdir("set-fault");
    write_three_shards(dir, NULL);
    const char *index = testutil_path_in(dir, "m.index.json");
    write_text(index, index_text(""));
    long n;
    for (n = 1; n < 10000; n++) {
        struct safetensors_set *s = NULL;
        fault_alloc_arm(n);
        zt_status st = safetensors_set_open(index, &s);
        long left = fault_alloc_disarm();
        if (st == ZT_OK) {
            ck_assert_int_gt(left, 0);
            check_values(s);
            safetensors_set_close(s);
            break;
        }
        ck_assert_msg(st == ZT_ERR_NOMEM && !s, "allocation %ld: %s: %s", n, zt_status_str(st),
                      zt_error_message());
    }
    ck_assert_int_gt(n, 10);
    ck_assert_int_lt(n, 10000);
}
END_TEST

/* ---- writing ---- */

struct wt {
    const char *name;
    uint64_t numel;
};

/* Writes tensors[0..n) (1-D F32 of value_of values) through a set writer
 * at path with max bytes per shard; returns the number of files. */
static int write_set(const char *path, uint64_t max, const struct wt *tensors, int n)
{
    struct safetensors_set_writer *w = NULL;
    ck_assert_int_eq(safetensors_set_writer_open(path, max, &w), ZT_OK);
    ck_assert_int_eq(safetensors_set_writer_set_metadata(w, "format", "pt"), ZT_OK);
    for (int k = 0; k < n; k++)
        ck_assert_int_eq(
            safetensors_set_writer_add(w, tensors[k].name, ZT_F32, 1, &tensors[k].numel), ZT_OK);
    ck_assert_msg(safetensors_set_writer_begin_data(w) == ZT_OK, "%s", zt_error_message());
    int shards = safetensors_set_writer_shard_count(w);
    /* one stream across tensors and shards, in uneven pieces */
    uint64_t total = 0;
    for (int k = 0; k < n; k++)
        total += tensors[k].numel;
    float *all = malloc((total ? total : 1) * sizeof *all);
    for (int k = 0, at = 0; k < n; k++)
        for (uint64_t i = 0; i < tensors[k].numel; i++)
            all[at++] = value_of(tensors[k].name, i);
    for (uint64_t at = 0, piece = 1; at < total; piece = piece * 3 % 17 + 1) {
        uint64_t m = piece < total - at ? piece : total - at;
        ck_assert_int_eq(safetensors_set_writer_write_f32(w, all + at, m), ZT_OK);
        at += m;
    }
    free(all);
    ck_assert_msg(safetensors_set_writer_finish(w) == ZT_OK, "%s", zt_error_message());
    return shards;
}

/* The names in a shard file, in header order, as "a,b". */
static const char *names_in(const char *path)
{
    static char buf[256];
    struct safetensors *s = NULL;
    ck_assert_int_eq(safetensors_open(path, &s), ZT_OK);
    buf[0] = '\0';
    for (int i = 0; i < safetensors_count(s); i++)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? "," : "",
                 safetensors_tensor_at(s, i)->name);
    ck_assert_str_eq(safetensors_metadata(s, "format"), "pt");
    safetensors_close(s);
    return buf;
}

/* Limit 100 bytes, tensors of 40, 40, 40, 300, 20, 100 bytes declared in
 * reverse name order. huggingface_hub: z0, y1 fill shard A; x2 would pass
 * 100, so A closes (00001) and x2 starts B; w3 is over the limit alone and
 * gets 00002 at once; v4 joins B (60 bytes); u5 would pass 100, so B
 * closes (00003) and u5 starts C (00004), exactly at the limit. */
START_TEST(test_writer_cuts_as_huggingface)
{
    const char *dir = testutil_tmpdir("set-cut");
    const char *path = testutil_path_in(dir, "m.safetensors");
    static const struct wt tensors[] = {{"z0", 10}, {"y1", 10}, {"x2", 10},
                                        {"w3", 75}, {"v4", 5},  {"u5", 25}};
    write_text(path, "an older single file");
    ck_assert_int_eq(write_set(path, 100, tensors, 6), 4);
    ck_assert_int_eq(file_exists(path), 0); /* the stale single file is gone */
    ck_assert_str_eq(names_in(testutil_path_in(dir, "m-00001-of-00004.safetensors")), "z0,y1");
    ck_assert_str_eq(names_in(testutil_path_in(dir, "m-00002-of-00004.safetensors")), "w3");
    ck_assert_str_eq(names_in(testutil_path_in(dir, "m-00003-of-00004.safetensors")), "x2,v4");
    ck_assert_str_eq(names_in(testutil_path_in(dir, "m-00004-of-00004.safetensors")), "u5");
    const char *index = testutil_path_in(dir, "m.safetensors.index.json");
    ck_assert_str_eq(testutil_slurp(index), "{\n"
                                            "  \"metadata\": {\n"
                                            "    \"total_size\": 540\n"
                                            "  },\n"
                                            "  \"weight_map\": {\n"
                                            "    \"u5\": \"m-00004-of-00004.safetensors\",\n"
                                            "    \"v4\": \"m-00003-of-00004.safetensors\",\n"
                                            "    \"w3\": \"m-00002-of-00004.safetensors\",\n"
                                            "    \"x2\": \"m-00003-of-00004.safetensors\",\n"
                                            "    \"y1\": \"m-00001-of-00004.safetensors\",\n"
                                            "    \"z0\": \"m-00001-of-00004.safetensors\"\n"
                                            "  }\n"
                                            "}\n");
    ck_assert_int_eq(testutil_entries(dir), 5);
    struct safetensors_set *s = NULL;
    ck_assert_int_eq(safetensors_set_open(index, &s), ZT_OK);
    ck_assert_int_eq(safetensors_set_count(s), 6);
    check_values(s);
    safetensors_set_close(s);
}
END_TEST

/* A model within the limit (or with none) is the single file PATH, and a
 * stale index beside it goes; a name without .safetensors keeps its
 * whole name as the stem. */
START_TEST(test_writer_single_file_when_it_fits)
{
    const char *dir = testutil_tmpdir("set-fits");
    const char *path = testutil_path_in(dir, "m.safetensors");
    static const struct wt tensors[] = {{"a", 10}, {"b", 15}};
    write_text(testutil_path_in(dir, "m.safetensors.index.json"), "{}");
    ck_assert_int_eq(write_set(path, 100, tensors, 2), 1);
    ck_assert_int_eq(testutil_entries(dir), 1);
    ck_assert_str_eq(names_in(path), "a,b");
    ck_assert_int_eq(write_set(path, 0, tensors, 2), 1);
    ck_assert_int_eq(write_set(path, 99, tensors, 2), 2);
    ck_assert_int_eq(testutil_entries(dir), 3);
    ck_assert_str_eq(names_in(testutil_path_in(dir, "m-00002-of-00002.safetensors")), "b");

    /* b, over the limit alone, takes the first shard; a closes the second */
    const char *odd = testutil_path_in(testutil_tmpdir("set-stem"), "w.st");
    ck_assert_int_eq(write_set(odd, 40, tensors, 2), 2);
    ck_assert_str_eq(names_in(testutil_fmt("%s-00001-of-00002.safetensors", odd)), "b");
    ck_assert_str_eq(names_in(testutil_fmt("%s-00002-of-00002.safetensors", odd)), "a");
    ck_assert(file_exists(testutil_fmt("%s.index.json", odd)));
}
END_TEST

/* Empty tensors anywhere, and a model of none. */
START_TEST(test_writer_empty_tensors)
{
    const char *dir = testutil_tmpdir("set-empty");
    const char *path = testutil_path_in(dir, "m.safetensors");
    static const struct wt tensors[] = {{"e0", 0}, {"a", 10}, {"e1", 0}, {"b", 10}, {"e2", 0}};
    ck_assert_int_eq(write_set(path, 40, tensors, 5), 2);
    ck_assert_str_eq(names_in(testutil_path_in(dir, "m-00001-of-00002.safetensors")), "e0,a,e1");
    ck_assert_str_eq(names_in(testutil_path_in(dir, "m-00002-of-00002.safetensors")), "b,e2");
    ck_assert_int_eq(write_set(path, 40, tensors, 0), 1);
    ck_assert_str_eq(names_in(path), "");
}
END_TEST

START_TEST(test_writer_errors)
{
    const char *dir = testutil_tmpdir("set-werr");
    const char *path = testutil_path_in(dir, "m.safetensors");
    const uint64_t n = 10;
    struct safetensors_set_writer *w = NULL;
    ck_assert_int_eq(safetensors_set_writer_open(path, 40, &w), ZT_OK);
    ck_assert_int_eq(safetensors_set_writer_add(w, "a", ZT_F32, 1, &n), ZT_OK);
    ck_assert_int_eq(safetensors_set_writer_add(w, "a", ZT_F32, 1, &n), ZT_ERR_USAGE);
    ck_assert_str_eq(zt_error_message(), testutil_fmt("%s: tensor 'a' declared twice", path));
    ck_assert_int_eq(safetensors_set_writer_add(w, "i", ZT_I32, 1, &n), ZT_ERR_UNSUPPORTED);
    ck_assert_int_eq(safetensors_set_writer_add(w, "", ZT_F32, 1, &n), ZT_ERR_USAGE);
    ck_assert_int_eq(safetensors_set_writer_add(w, "b", ZT_F32, 1, &n), ZT_OK);
    ck_assert_int_eq(safetensors_set_writer_begin_data(w), ZT_OK);
    float v[21] = {0};
    ck_assert_int_eq(safetensors_set_writer_write_f32(w, v, 21), ZT_ERR_USAGE);
    ck_assert_int_eq(safetensors_set_writer_write_f32(w, v, 15), ZT_OK);
    /* the first shard is complete and in place; finishing early removes it */
    ck_assert(file_exists(testutil_path_in(dir, "m-00001-of-00002.safetensors")));
    ck_assert_int_eq(safetensors_set_writer_finish(w), ZT_ERR_USAGE);
    ck_assert_str_eq(
        zt_error_message(),
        testutil_fmt("%s: tensor 'b' is incomplete: 15 of 20 elements were written", path));
    ck_assert_int_eq(testutil_entries(dir), 0);

    ck_assert_int_eq(safetensors_set_writer_open(path, 40, &w), ZT_OK);
    ck_assert_int_eq(safetensors_set_writer_add(w, "a", ZT_F32, 1, &n), ZT_OK);
    ck_assert_int_eq(safetensors_set_writer_add(w, "b", ZT_F32, 1, &n), ZT_OK);
    ck_assert_int_eq(safetensors_set_writer_begin_data(w), ZT_OK);
    ck_assert_int_eq(safetensors_set_writer_write_f32(w, v, 12), ZT_OK);
    safetensors_set_writer_abort(w);
    ck_assert_int_eq(testutil_entries(dir), 0);
    safetensors_set_writer_abort(NULL);

    const char *nodir = testutil_path_in(dir, "missing/m.safetensors");
    ck_assert_int_eq(safetensors_set_writer_open(nodir, 0, &w), ZT_OK);
    ck_assert_int_eq(safetensors_set_writer_add(w, "a", ZT_F32, 1, &n), ZT_OK);
    ck_assert_int_eq(safetensors_set_writer_begin_data(w), ZT_ERR_IO);
    safetensors_set_writer_abort(w);
}
END_TEST

START_TEST(test_writer_allocation_faults)
{
    const char *dir = testutil_tmpdir("set-wfault");
    const char *path = testutil_path_in(dir, "m.safetensors");
    static const struct wt tensors[] = {{"a", 10}, {"b", 10}, {"c", 30}, {"d", 10}};
    long n;
    for (n = 1; n < 10000; n++) {
        struct safetensors_set_writer *w = NULL;
        zt_status st = ZT_OK;
        fault_alloc_arm(n);
        st = safetensors_set_writer_open(path, 40, &w);
        for (int k = 0; k < 4 && st == ZT_OK; k++)
            st = safetensors_set_writer_add(w, tensors[k].name, ZT_F32, 1, &tensors[k].numel);
        if (st == ZT_OK)
            st = safetensors_set_writer_begin_data(w);
        for (int k = 0; k < 4 && st == ZT_OK; k++) {
            float v[30];
            for (uint64_t i = 0; i < tensors[k].numel; i++)
                v[i] = value_of(tensors[k].name, i);
            st = safetensors_set_writer_write_f32(w, v, tensors[k].numel);
        }
        if (st == ZT_OK) {
            st = safetensors_set_writer_finish(w);
        } else {
            safetensors_set_writer_abort(w);
        }
        long left = fault_alloc_disarm();
        if (st == ZT_OK) {
            ck_assert_int_gt(left, 0);
            break;
        }
        ck_assert_msg(st == ZT_ERR_NOMEM || st == ZT_ERR_IO, "allocation %ld: %s: %s", n,
                      zt_status_str(st), zt_error_message());
        ck_assert_int_eq(testutil_entries(dir), 0);
    }
    ck_assert_int_gt(n, 5);
    ck_assert_int_lt(n, 10000);
    ck_assert_int_eq(testutil_entries(dir), 5); /* {a}, {c} over the limit, {b}, {d}, the index */
    struct safetensors_set *s = NULL;
    ck_assert_int_eq(safetensors_set_open(testutil_fmt("%s.index.json", path), &s), ZT_OK);
    check_values(s);
    safetensors_set_close(s);
}
END_TEST

static Suite *safetensors_set_suite(void)
{
    Suite *s = suite_create("safetensors_set");
    TCase *r = testutil_tcase(s, "read", 60);
    tcase_add_test(r, test_single_file);
    tcase_add_test(r, test_index_of_three_shards);
    tcase_add_test(r, test_folder);
    tcase_add_test(r, test_digest_covers_every_shard);
    tcase_add_test(r, test_missing_file);
    tcase_add_test(r, test_open_allocation_faults);
    TCase *x = testutil_tcase(s, "index", 60);
    tcase_add_test(x, test_missing_shard);
    tcase_add_test(x, test_tensor_in_two_shards);
    tcase_add_test(x, test_weight_map_names_the_wrong_shard);
    tcase_add_test(x, test_shard_outside_the_folder);
    tcase_add_test(x, test_malformed_index);
    TCase *w = testutil_tcase(s, "write", 60);
    tcase_add_test(w, test_writer_cuts_as_huggingface);
    tcase_add_test(w, test_writer_single_file_when_it_fits);
    tcase_add_test(w, test_writer_empty_tensors);
    tcase_add_test(w, test_writer_errors);
    tcase_add_test(w, test_writer_allocation_faults);
    return s;
}

int main(void)
{
    return testutil_run_suite(safetensors_set_suite(), 0);
}
