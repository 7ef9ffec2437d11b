/* tests/test_json.c — the JSON reader (common/json.h) on its own.
 *
 * The formats built on it (meta.json, safetensors headers) have their own
 * suites; this one checks the parser's contract directly: every kind of
 * value with its byte offset, the exact 64-bit integer range, escapes and
 * surrogate pairs, UTF-8 validation, repeated keys, the nesting limit,
 * error messages with the byte they name, and two fault loops (every
 * prefix of a document, and the N-th allocation failing), each of which
 * must end in a clean error with nothing leaked.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "fault_alloc.h"
#include "testutil.h"

static const struct json_source doc = {"doc.json", NULL, ZT_ERR_CHECKPOINT, 8};

static struct json_value parse_ok(const char *text)
{
    struct json_value v;
    zt_status st = json_parse(&doc, text, strlen(text), &v);
    ck_assert_msg(st == ZT_OK, "%s: %s", text, zt_error_message());
    return v;
}

/* Parsing text fails with doc.json's status and "doc.json: not valid JSON
 * at byte AT: WHAT", and leaves the output zeroed. */
static void expect_syntax(const char *text, size_t len, size_t at, const char *what)
{
    struct json_value v;
    memset(&v, 0xa5, sizeof v);
    ck_assert_int_eq(json_parse(&doc, text, len, &v), ZT_ERR_CHECKPOINT);
    ck_assert_str_eq(zt_error_message(),
                     testutil_fmt("doc.json: not valid JSON at byte %zu: %s", at, what));
    ck_assert_int_eq(v.type, JSON_NULL);
    ck_assert_ptr_null(v.items);
    ck_assert_ptr_null(v.keys);
    ck_assert_ptr_null(v.str);
}

static void expect_error(const char *text, size_t at, const char *what)
{
    expect_syntax(text, strlen(text), at, what);
}

START_TEST(test_every_kind_of_value)
{
    const char *text = " {\"n\": null, \"t\": true, \"f\": false, \"i\": -42, \"r\": 2.5e-1,"
                       " \"s\": \"h\xc3\xa9\", \"a\": [1, [], {}], \"o\": {\"k\": \"v\"}} ";
    struct json_value v = parse_ok(text);
    ck_assert_int_eq(v.type, JSON_OBJECT);
    ck_assert_uint_eq(v.pos, 1);
    ck_assert_uint_eq(v.n, 8);
    static const char *const keys[] = {"n", "t", "f", "i", "r", "s", "a", "o"};
    static const enum json_type types[] = {JSON_NULL, JSON_BOOL,   JSON_BOOL,  JSON_INT,
                                           JSON_REAL, JSON_STRING, JSON_ARRAY, JSON_OBJECT};
    for (size_t k = 0; k < 8; k++) {
        ck_assert_str_eq(v.keys[k], keys[k]); /* text order kept */
        ck_assert_int_eq(v.items[k].type, types[k]);
    }
    ck_assert_int_eq(v.items[1].boolean, 1);
    ck_assert_int_eq(v.items[2].boolean, 0);
    ck_assert_int_eq(v.items[3].negative, 1);
    ck_assert_uint_eq(v.items[3].magnitude, 42);
    ck_assert(v.items[3].real == -42.0);
    ck_assert(v.items[4].real == 0.25);
    ck_assert_str_eq(v.items[5].str, "h\xc3\xa9");
    const struct json_value *a = &v.items[6];
    ck_assert_uint_eq(a->n, 3);
    ck_assert_ptr_null(a->keys);
    ck_assert_int_eq(a->items[0].type, JSON_INT);
    ck_assert_int_eq(a->items[1].type, JSON_ARRAY);
    ck_assert_uint_eq(a->items[1].n, 0);
    ck_assert_int_eq(a->items[2].type, JSON_OBJECT);
    ck_assert_uint_eq(a->items[2].n, 0);
    ck_assert_str_eq(v.items[7].keys[0], "k");
    ck_assert_str_eq(v.items[7].items[0].str, "v");
    /* byte offsets of values, found independently in the text */
    ck_assert_uint_eq(v.items[0].pos, (size_t)(strstr(text, "null") - text));
    ck_assert_uint_eq(v.items[3].pos, (size_t)(strstr(text, "-42") - text));
    ck_assert_uint_eq(v.items[5].pos, (size_t)(strstr(text, "\"h") - text));
    ck_assert_uint_eq(a->items[1].pos, (size_t)(strstr(text, "[]") - text));
    json_free(&v);
    ck_assert_int_eq(v.type, JSON_NULL);
    ck_assert_uint_eq(v.n, 0);
    json_free(&v); /* a zeroed value frees again */
    json_free(NULL);
}
END_TEST

START_TEST(test_scalars_at_the_top)
{
    struct json_value v = parse_ok("\t\r\n 7 \n");
    ck_assert_int_eq(v.type, JSON_INT);
    ck_assert_uint_eq(v.pos, 4);
    ck_assert_uint_eq(v.magnitude, 7);
    json_free(&v);
    v = parse_ok("\"x\"");
    ck_assert_str_eq(v.str, "x");
    json_free(&v);
    v = parse_ok("null");
    ck_assert_int_eq(v.type, JSON_NULL);
    json_free(&v);
}
END_TEST

/* Integers keep every bit of the 64-bit range; one past either end is an
 * error rather than a rounded value. */
START_TEST(test_exact_integer_limits)
{
    static const struct {
        const char *text;
        int negative;
        uint64_t magnitude;
    } ok[] = {
        {"0", 0, 0},
        {"-0", 0, 0},
        {"9007199254740993", 0, 9007199254740993ull}, /* 2^53 + 1: not a double */
        {"9223372036854775807", 0, 9223372036854775807ull},
        {"-9223372036854775808", 1, 9223372036854775808ull},
        {"18446744073709551615", 0, UINT64_MAX},
        {"18446744073709551614", 0, UINT64_MAX - 1},
    };
    for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++) {
        struct json_value v = parse_ok(ok[k].text);
        ck_assert_int_eq(v.type, JSON_INT);
        ck_assert_int_eq(v.negative, ok[k].negative);
        ck_assert_uint_eq(v.magnitude, ok[k].magnitude);
        json_free(&v);
    }
    expect_error("18446744073709551616", 0, "integer out of the 64-bit range");
    expect_error("[1, -9223372036854775809]", 4, "integer out of the 64-bit range");
    expect_error("[99999999999999999999999]", 1, "integer out of the 64-bit range");
}
END_TEST

START_TEST(test_real_numbers)
{
    static const struct {
        const char *text;
        double want;
    } ok[] = {{"1.5", 1.5},    {"-0.125", -0.125},
              {"1e3", 1000.0}, {"2E-2", 0.02},
              {"1e+2", 100.0}, {"18446744073709551616.0", 18446744073709551616.0}};
    for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++) {
        struct json_value v = parse_ok(ok[k].text);
        ck_assert_int_eq(v.type, JSON_REAL);
        ck_assert_msg(v.real == ok[k].want, "%s: %g", ok[k].text, v.real);
        json_free(&v);
    }
    expect_error("[1e999]", 1, "number out of the double range");
    expect_error("[-]", 1, "invalid number");
    expect_error("[01]", 1, "leading zeros are not allowed");
    expect_error("[1.]", 1, "a '.' must be followed by digits");
    expect_error("[.5]", 1, "expected a value");
    expect_error("[1e]", 1, "an exponent must have digits");
    expect_error("[+1]", 1, "expected a value");
}
END_TEST

START_TEST(test_escapes_and_surrogates)
{
    struct json_value v =
        parse_ok("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\\u00e9\\u20AC\\ud83d\\ude00\\uFFFF\"");
    ck_assert_str_eq(v.str, "\"\\/\b\f\n\r\tA\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xef\xbf\xbf");
    json_free(&v);
    expect_error("[\"ab\\q\"]", 4, "unknown escape");
    expect_error("[\"\\u12\"]", 2, "\\u must be followed by 4 hex digits");
    expect_error("[\"\\u12g4\"]", 2, "\\u must be followed by 4 hex digits");
    expect_error("[\"x\\ud800\"]", 3, "unpaired surrogate in a \\u escape");
    expect_error("[\"x\\ud800\\u0041\"]", 3, "unpaired surrogate in a \\u escape");
    expect_error("[\"x\\udc00\\ud800\"]", 3, "unpaired surrogate in a \\u escape");
    expect_error("[\"x\\u0000\"]", 3, "\\u0000 is not allowed in a string");
    expect_error("{\"\\u0000\": 1}", 2, "\\u0000 is not allowed in a string");
    expect_error("[\"a\x01\"]", 3, "control character in a string");
    expect_error("[\"a\\", 1, "unterminated string"); /* from its quote */
    expect_error("[\"abc", 1, "unterminated string");
}
END_TEST

/* UTF-8 by RFC 3629: each case is checked by json_utf8_check and inside a
 * string, where the parser names the same byte. */
START_TEST(test_utf8_validation)
{
    static const struct {
        const char *bytes;
        size_t bad; /* index of the first bad byte; strlen if valid */
    } cases[] = {
        {"plain ascii", 11},
        {"\xc2\x80\xdf\xbf", 4},                 /* U+0080, U+07FF */
        {"\xe0\xa0\x80\xed\x9f\xbf", 6},         /* U+0800, U+D7FF */
        {"\xee\x80\x80\xef\xbf\xbf", 6},         /* U+E000, U+FFFF */
        {"\xf0\x90\x80\x80\xf4\x8f\xbf\xbf", 8}, /* U+10000, U+10FFFF */
        {"ab\xc0\xaf", 2},                       /* overlong '/' */
        {"ab\xe0\x80\xaf", 2},                   /* overlong, 3 bytes */
        {"ab\xf0\x80\x80\xaf", 2},               /* overlong, 4 bytes */
        {"ab\xed\xa0\x80", 2},                   /* surrogate U+D800 */
        {"ab\xf4\x90\x80\x80", 2},               /* past U+10FFFF */
        {"ab\xf5\x80\x80\x80", 2},
        {"ab\x80", 2},     /* lone continuation */
        {"ab\xc3\x28", 2}, /* bad continuation */
        {"ab\xe2\x82", 2}, /* cut short */
        {"ab\xff", 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *b = cases[k].bytes;
        size_t n = strlen(b);
        ck_assert_msg(json_utf8_check(b, n) == cases[k].bad, "case %zu", k);
        char *text = strdup(testutil_fmt("[\"%s\"]", b));
        if (cases[k].bad == n) {
            struct json_value v = parse_ok(text);
            ck_assert_str_eq(v.items[0].str, b);
            json_free(&v);
        } else {
            expect_error(text, 2 + cases[k].bad, "invalid UTF-8");
        }
        free(text);
    }
    ck_assert_uint_eq(json_utf8_check("", 0), 0);
}
END_TEST

START_TEST(test_duplicate_keys_are_counted)
{
    struct json_value v = parse_ok("{\"a\": 1, \"b\": 2, \"a\": 3}");
    ck_assert_uint_eq(v.n, 3); /* both kept */
    size_t count = 99;
    const struct json_value *a = json_object_get(&v, "a", &count);
    ck_assert_uint_eq(count, 2);
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq(a->magnitude, 1); /* the first */
    ck_assert_uint_eq(json_object_get(&v, "b", &count)->magnitude, 2);
    ck_assert_uint_eq(count, 1);
    ck_assert_ptr_null(json_object_get(&v, "c", &count));
    ck_assert_uint_eq(count, 0);
    ck_assert_ptr_null(json_object_get(&v, "A", NULL));
    json_free(&v);
}
END_TEST

/* doc's limit is 8: eight levels parse, the ninth bracket is refused where
 * it stands, before the parser recurses into it. */
START_TEST(test_nesting_limit)
{
    struct json_value v = parse_ok("[[[[{\"a\":[[[1]]]}]]]]");
    json_free(&v);
    expect_error("[[[[{\"a\":[[[[1]]]]}]]]]", 12, "nesting deeper than 8 levels");
    char deep[20001];
    memset(deep, '[', 20000);
    deep[20000] = '\0';
    expect_error(deep, 8, "nesting deeper than 8 levels");
    const struct json_source one = {"one.json", NULL, ZT_ERR_DATA, 1};
    ck_assert_int_eq(json_parse(&one, "[1]", 3, &v), ZT_OK);
    json_free(&v);
    ck_assert_int_eq(json_parse(&one, "[[]]", 4, &v), ZT_ERR_DATA);
    ck_assert_str_eq(zt_error_message(),
                     "one.json: not valid JSON at byte 1: nesting deeper than 1 levels");
}
END_TEST

START_TEST(test_structure_errors)
{
    expect_error("", 0, "expected a value");
    expect_error("   ", 3, "expected a value");
    expect_error("{} x", 3, "unexpected text after the value");
    expect_error("[1] [2]", 4, "unexpected text after the value");
    expect_error("{", 1, "expected a string key");
    expect_error("{1: 2}", 1, "expected a string key");
    expect_error("{\"a\" 1}", 5, "expected ':' after the key");
    expect_error("{\"a\": 1,}", 8, "expected a string key");
    expect_error("{\"a\": 1 \"b\": 2}", 8, "expected ',' or '}'");
    expect_error("[1 2]", 3, "expected ',' or ']'");
    expect_error("[1,]", 3, "expected a value");
    expect_error("[tru]", 1, "expected a value");
    expect_error("[nul", 1, "expected a value");
    expect_error("[True]", 1, "expected a value");
    /* a NUL byte inside the given length is text, not the end */
    expect_syntax("[1]\0", 4, 3, "unexpected text after the value");
}
END_TEST

/* The source names the file, optionally the part of it, and the status. */
START_TEST(test_error_message_shape)
{
    const struct json_source hdr = {"m.safetensors", "header", ZT_ERR_DATA, 4};
    struct json_value v;
    ck_assert_int_eq(json_parse(&hdr, "{\"a\";1}", 7, &v), ZT_ERR_DATA);
    ck_assert_str_eq(zt_error_message(),
                     "m.safetensors: header is not valid JSON at byte 4: expected ':' after the "
                     "key");
    ck_assert_str_eq(json_type_name(JSON_NULL), "null");
    ck_assert_str_eq(json_type_name(JSON_BOOL), "a boolean");
    ck_assert_str_eq(json_type_name(JSON_INT), "an integer");
    ck_assert_str_eq(json_type_name(JSON_REAL), "a fractional number");
    ck_assert_str_eq(json_type_name(JSON_STRING), "a string");
    ck_assert_str_eq(json_type_name(JSON_ARRAY), "an array");
    ck_assert_str_eq(json_type_name(JSON_OBJECT), "an object");
}
END_TEST

static const char full_doc[] =
    "{\"name\": \"caf\\u00e9 \\ud83d\\ude00 \xe2\x82\xac\", \"n\": -9223372036854775808,"
    " \"u\": 18446744073709551615, \"r\": [1.5e-3, 0, -0.0], \"ok\": true, \"no\": false,"
    " \"z\": null, \"o\": {\"k\": [[], {}], \"esc\": \"\\\"\\\\\\n\"}}";

/* Every proper prefix of a document is refused with the source's status
 * and a message naming a byte inside the prefix; the whole one parses. */
START_TEST(test_truncation_fault_loop)
{
    size_t n = strlen(full_doc);
    for (size_t len = 0; len <= n; len++) {
        char *text = malloc(len ? len : 1); /* exactly len bytes: ASan sees overreads */
        memcpy(text, full_doc, len);
        struct json_value v;
        zt_status st = json_parse(&doc, text, len, &v);
        free(text);
        if (len == n) {
            ck_assert_msg(st == ZT_OK, "whole document: %s", zt_error_message());
            ck_assert_uint_eq(json_object_get(&v, "u", NULL)->magnitude, UINT64_MAX);
            json_free(&v);
            continue;
        }
        size_t at = 0;
        const char *msg = zt_error_message();
        if (st != ZT_ERR_CHECKPOINT ||
            sscanf(msg, "doc.json: not valid JSON at byte %zu: ", &at) != 1 || at > len ||
            v.type != JSON_NULL || v.items)
            ck_abort_msg("prefix %zu: %s %s", len, zt_status_str(st), msg);
    }
}
END_TEST

/* The N-th allocation fails for every N the parse makes: each gives
 * ZT_ERR_NOMEM and a zeroed output (the sanitizer build checks that
 * nothing leaks), until the parse succeeds. */
START_TEST(test_allocation_fault_loop)
{
    size_t len = strlen(full_doc);
    long n;
    for (n = 1; n < 10000; n++) {
        struct json_value v;
        fault_alloc_arm(n);
        zt_status st = json_parse(&doc, full_doc, len, &v);
        long left = fault_alloc_disarm();
        if (st == ZT_OK) {
            ck_assert_int_gt(left, 0);
            json_free(&v);
            break;
        }
        if (st != ZT_ERR_NOMEM || v.type != JSON_NULL || v.items)
            ck_abort_msg("allocation %ld: %s: %s", n, zt_status_str(st), zt_error_message());
        ck_assert_str_eq(zt_error_message(), "doc.json: out of memory while reading the JSON");
    }
    ck_assert_int_gt(n, 10); /* the document makes many allocations */
    ck_assert_int_lt(n, 10000);
}
END_TEST

/* The writer's reals read back exactly as reals; NaN and the infinities,
 * which JSON cannot spell, are null. */
START_TEST(test_written_reals_read_back)
{
    static const double values[] = {0.1, -3.5, 1e-7, 10000.0, 1.0 / 3.0, 6.02214076e23, -0.0};
    for (size_t k = 0; k < sizeof values / sizeof values[0]; k++) {
        struct json_text t = {0};
        json_text_real(&t, values[k]);
        ck_assert(!t.oom);
        struct json_value v = parse_ok(t.p);
        ck_assert_msg(v.type == JSON_REAL && v.real == values[k], "%.17g written as %s", values[k],
                      t.p);
        json_free(&v);
        free(t.p);
    }
    static const double not_numbers[] = {NAN, -NAN, INFINITY, -INFINITY};
    for (size_t k = 0; k < sizeof not_numbers / sizeof not_numbers[0]; k++) {
        struct json_text t = {0};
        json_text_real(&t, not_numbers[k]);
        ck_assert_str_eq(t.p, "null");
        struct json_value v = parse_ok(t.p);
        ck_assert_int_eq(v.type, JSON_NULL);
        json_free(&v);
        free(t.p);
    }
}
END_TEST

static Suite *json_suite(void)
{
    Suite *s = suite_create("json");
    TCase *v = tcase_create("values");
    tcase_add_test(v, test_every_kind_of_value);
    tcase_add_test(v, test_scalars_at_the_top);
    tcase_add_test(v, test_exact_integer_limits);
    tcase_add_test(v, test_real_numbers);
    tcase_add_test(v, test_written_reals_read_back);
    tcase_add_test(v, test_escapes_and_surrogates);
    tcase_add_test(v, test_utf8_validation);
    tcase_add_test(v, test_duplicate_keys_are_counted);
    suite_add_tcase(s, v);
    TCase *e = tcase_create("errors");
    tcase_add_test(e, test_nesting_limit);
    tcase_add_test(e, test_structure_errors);
    tcase_add_test(e, test_error_message_shape);
    tcase_add_test(e, test_truncation_fault_loop);
    tcase_add_test(e, test_allocation_fault_loop);
    suite_add_tcase(s, e);
    return s;
}

int main(void)
{
    return testutil_run_suite(json_suite(), 0);
}
