/* tests/test_jsonl.c — JSONL instruction data: parsing and its errors
 * (each naming file:line), the loss mask of prompt, completion and text
 * examples in both layouts (packing and one padded window per example),
 * written out as exact token and mask arrays for the byte tokenizer; the
 * whole-window validation split; the sampler's -1 targets and
 * sampler_counted.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../data/data.h"
#include "testutil.h"

static const char *write_jsonl(const char *dir, const char *name, const char *text)
{
    const char *path = testutil_path_in(dir, name);
    testutil_write_file(path, text, strlen(text));
    return path;
}

static void load_ok(const char *path, int packing, int seq_len, struct token_buffer *out,
                    struct jsonl_report *rep)
{
    const struct jsonl_options opt = {.packing = packing, .seq_len = seq_len};
    zt_status st = jsonl_load(&path, 1, &opt, out, rep);
    ck_assert_msg(st == ZT_OK, "jsonl_load: %s", zt_error_message());
}

/* The buffer's tokens as text ('.' for id 0) and its mask as 0/1. */
static void expect_layout(const struct token_buffer *b, const char *tokens, const char *mask)
{
    ck_assert_uint_eq(b->n, strlen(tokens));
    ck_assert_ptr_nonnull(b->mask);
    for (size_t i = 0; i < b->n; i++) {
        const int32_t want = tokens[i] == '.' ? 0 : (unsigned char)tokens[i];
        ck_assert_msg(b->tokens[i] == want, "token %zu: %d, want %d", i, b->tokens[i], want);
        ck_assert_msg(b->mask[i] == (mask[i] == '1'), "mask %zu: %d, want %c", i, b->mask[i],
                      mask[i]);
    }
}

static const char *const TWO = "{\"prompt\": \"ab\", \"completion\": \"c\"}\n"
                               "\n"
                               "{\"text\": \"xyz\"}\n";

/* Each example a window of 4: its first token and the padding masked; one
 * padding token at the end. */
START_TEST(each_example_is_a_padded_window)
{
    const char *dir = testutil_tmpdir("jsonl-pad");
    struct token_buffer b = {0};
    struct jsonl_report rep;
    load_ok(write_jsonl(dir, "a.jsonl", TWO), 0, 4, &b, &rep);
    expect_layout(&b, "abc.xyz..", "001001100");
    ck_assert_uint_eq(rep.n_examples, 2);
    ck_assert_uint_eq(rep.n_files, 1);
    ck_assert_uint_eq(rep.n_truncated, 0);
    ck_assert_uint_eq(b.vocab_size, 256);
    token_buffer_free(&b);
}
END_TEST

START_TEST(packing_concatenates_examples)
{
    const char *dir = testutil_tmpdir("jsonl-pack");
    struct token_buffer b = {0};
    load_ok(write_jsonl(dir, "a.jsonl", TWO), 1, 4, &b, NULL);
    expect_layout(&b, "abcxyz", "001111");
    token_buffer_free(&b);
}
END_TEST

START_TEST(long_examples_are_truncated_and_counted)
{
    const char *dir = testutil_tmpdir("jsonl-cut");
    struct token_buffer b = {0};
    struct jsonl_report rep;
    load_ok(write_jsonl(dir, "a.jsonl",
                        "{\"prompt\": \"a\", \"completion\": \"bcd\"}\n{\"text\": \"xy\"}\n"),
            0, 2, &b, &rep);
    expect_layout(&b, "abxy.", "01010");
    ck_assert_uint_eq(rep.n_truncated, 1);
    token_buffer_free(&b);
}
END_TEST

/* A folder's *.jsonl files in strcmp order of their paths; others are not
 * read. */
START_TEST(folders_read_jsonl_files_in_order)
{
    const char *dir = testutil_tmpdir("jsonl-dir");
    write_jsonl(dir, "b.jsonl", "{\"text\": \"b\"}\n");
    write_jsonl(dir, "a.jsonl", "{\"text\": \"a\"}");
    write_jsonl(dir, "c.txt", "not json");
    struct token_buffer b = {0};
    struct jsonl_report rep;
    load_ok(dir, 1, 1, &b, &rep);
    expect_layout(&b, "ab", "11");
    ck_assert_uint_eq(rep.n_files, 2);
    token_buffer_free(&b);
}
END_TEST

/* Line 2 of each file is the bad one. */
static const struct {
    const char *line, *says;
} BAD_LINES[] = {
    {"{\"prompt\": \"a\"", "not valid JSON"},
    {"[\"a\"]", "must be a JSON object"},
    {"{\"prompt\": \"a\"}", "has \"prompt\" but no \"completion\""},
    {"{\"completion\": \"a\"}", "has \"completion\" but no \"prompt\""},
    {"{\"prompt\": 1, \"completion\": \"a\"}", "\"prompt\" must be a string"},
    {"{\"text\": null}", "\"text\" must be a string"},
    {"{\"text\": \"a\", \"prompt\": \"b\"}", "has both \"text\" and \"prompt\""},
    {"{\"text\": \"a\", \"completion\": \"b\"}", "has both \"text\" and \"completion\""},
    {"{\"foo\": \"a\"}", "has neither"},
    {"{\"text\": \"a\", \"text\": \"b\"}", "\"text\" is repeated"},
};

START_TEST(bad_lines_are_named_by_file_and_line)
{
    const char *dir = testutil_tmpdir("jsonl-bad");
    const char *path = write_jsonl(dir, "bad.jsonl",
                                   testutil_fmt("{\"text\": \"fine\"}\n%s\n", BAD_LINES[_i].line));
    const struct jsonl_options opt = {.seq_len = 4};
    struct token_buffer b = {0};
    ck_assert_int_eq(jsonl_load(&path, 1, &opt, &b, NULL), ZT_ERR_DATA);
    const char *msg = zt_error_message();
    ck_assert_msg(strstr(msg, testutil_fmt("%s:2: ", path)) != NULL, "no file:line in: %s", msg);
    ck_assert_msg(strstr(msg, BAD_LINES[_i].says) != NULL, "'%s' not in: %s", BAD_LINES[_i].says,
                  msg);
    ck_assert_ptr_null(b.tokens);
    ck_assert_ptr_null(b.mask);
}
END_TEST

START_TEST(an_empty_file_is_refused)
{
    const char *dir = testutil_tmpdir("jsonl-empty");
    const char *path = write_jsonl(dir, "e.jsonl", _i ? "\n  \n" : "");
    const struct jsonl_options opt = {.seq_len = 4};
    struct token_buffer b = {0};
    ck_assert_int_eq(jsonl_load(&path, 1, &opt, &b, NULL), ZT_ERR_DATA);
    ck_assert_ptr_nonnull(strstr(zt_error_message(), "no examples"));
}
END_TEST

/* Ten examples, one window each: a fifth for validation is two whole
 * windows, with their mask. */
START_TEST(the_split_keeps_whole_examples)
{
    const char *dir = testutil_tmpdir("jsonl-split");
    char text[512] = "";
    for (int i = 0; i < 10; i++)
        strcat(text, testutil_fmt("{\"prompt\": \"p%d\", \"completion\": \"c\"}\n", i));
    struct token_buffer all = {0}, val = {0};
    load_ok(write_jsonl(dir, "s.jsonl", text), 0, 4, &all, NULL);
    ck_assert_uint_eq(all.n, 41);
    ck_assert_int_eq(dataset_split_tail(&all, 0.2, 4, &val), ZT_OK);
    ck_assert_uint_eq(all.n, 33);
    ck_assert_uint_eq(val.n, 9);
    ck_assert_int_eq(val.tokens[1], '8');
    ck_assert_int_eq(val.tokens[5], '9');
    ck_assert_int_eq(memcmp(val.mask, "\0\0\1\0\0\0\1\0\0", 9), 0);
    token_buffer_free(&all);
    token_buffer_free(&val);
}
END_TEST

/* Every target is -1 exactly where the mask of the token it names is 0,
 * and the rest are the next tokens. */
START_TEST(sampler_targets_are_minus_one_where_masked)
{
    const char *dir = testutil_tmpdir("jsonl-sampler");
    struct token_buffer b = {0};
    load_ok(write_jsonl(dir, "a.jsonl", TWO), _i, 2, &b, NULL);
    struct sampler s;
    ck_assert_int_eq(sampler_init(&s, b.n, 2, 7, 1, 1, 1, 0), ZT_OK);
    for (uint64_t step = 0; step < 6; step++) {
        int32_t in[2], tg[2];
        const size_t w = sampler_window(&s, step);
        const int counted = sampler_fill(&s, &b, step, 0, in, tg);
        int want = 0;
        for (int j = 0; j < 2; j++) {
            const size_t at = w * 2 + 1 + (size_t)j;
            ck_assert_int_eq(in[j], b.tokens[w * 2 + (size_t)j]);
            ck_assert_int_eq(tg[j], b.mask[at] ? b.tokens[at] : -1);
            want += b.mask[at];
        }
        ck_assert_int_eq(counted, want);
    }
    sampler_free(&s);
    token_buffer_free(&b);
}
END_TEST

/* sampler_counted of a step is the sum of what every rank's micro steps
 * count, for any split of the step; G * T without a mask. */
START_TEST(sampler_counted_totals_every_rank_and_micro_step)
{
    const char *dir = testutil_tmpdir("jsonl-counted");
    char text[2048] = "";
    for (int i = 0; i < 12; i++)
        strcat(text, testutil_fmt("{\"prompt\": \"%.*s\", \"completion\": \"%.*s\"}\n", i % 5,
                                  "ppppp", 1 + i % 3, "ccc"));
    struct token_buffer b = {0};
    load_ok(write_jsonl(dir, "c.jsonl", text), _i, 4, &b, NULL);
    static const int splits[][2] = {{1, 4}, {2, 2}, {4, 1}}; /* ranks, accum */
    for (uint64_t step = 0; step < 5; step++) {
        uint64_t want = 0;
        struct sampler one;
        ck_assert_int_eq(sampler_init(&one, b.n, 4, 3, 2, 4, 1, 0), ZT_OK);
        const uint64_t counted = sampler_counted(&one, &b, step);
        sampler_free(&one);
        for (int k = 0; k < 3; k++) {
            uint64_t sum = 0;
            for (int r = 0; r < splits[k][0]; r++) {
                struct sampler s;
                ck_assert_int_eq(sampler_init(&s, b.n, 4, 3, 2, splits[k][1], splits[k][0], r),
                                 ZT_OK);
                int32_t in[8], tg[8];
                for (int m = 0; m < splits[k][1]; m++)
                    sum += (uint64_t)sampler_fill(&s, &b, step, m, in, tg);
                ck_assert_uint_eq(sampler_counted(&s, &b, step), counted);
                sampler_free(&s);
            }
            want = k == 0 ? sum : want;
            ck_assert_uint_eq(sum, want);
        }
        ck_assert_uint_eq(counted, want);
        ck_assert(counted > 0 && counted < 8 * 4);
    }
    uint8_t *mask = b.mask;
    b.mask = NULL;
    struct sampler s;
    ck_assert_int_eq(sampler_init(&s, b.n, 4, 3, 2, 2, 2, 1), ZT_OK);
    ck_assert_uint_eq(sampler_counted(&s, &b, 3), 2 * 2 * 2 * 4);
    sampler_free(&s);
    b.mask = mask;
    token_buffer_free(&b);
}
END_TEST

static Suite *jsonl_suite(void)
{
    Suite *s = suite_create("jsonl");
    TCase *tc = testutil_tcase(s, "load", 60);
    tcase_add_test(tc, each_example_is_a_padded_window);
    tcase_add_test(tc, packing_concatenates_examples);
    tcase_add_test(tc, long_examples_are_truncated_and_counted);
    tcase_add_test(tc, folders_read_jsonl_files_in_order);
    tcase_add_loop_test(tc, bad_lines_are_named_by_file_and_line, 0,
                        (int)(sizeof BAD_LINES / sizeof BAD_LINES[0]));
    tcase_add_loop_test(tc, an_empty_file_is_refused, 0, 2);
    tcase_add_test(tc, the_split_keeps_whole_examples);
    tc = testutil_tcase(s, "sampler", 60);
    tcase_add_loop_test(tc, sampler_targets_are_minus_one_where_masked, 0, 2);
    tcase_add_loop_test(tc, sampler_counted_totals_every_rank_and_micro_step, 0, 2);
    return s;
}

int main(void)
{
    return testutil_run_suite(jsonl_suite(), 0);
}
