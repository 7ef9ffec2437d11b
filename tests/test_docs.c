/* tests/test_docs.c — the generated references in docs/reference/ are
 * current.
 *
 * docs/reference/config.md and cli.md are what `zerotrain help --reference
 * config|cli` prints (the schema's table and the help texts, written out by
 * scripts/docs.sh). Each test runs the binary (ZT_BINARY, set by CTest) and
 * compares its output with the checked-in file byte for byte; a difference
 * fails naming the file, the first line that differs, and the fix. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* The line of `s` (n bytes) that starts at or before offset `at`, into buf. */
static const char *line_at(const unsigned char *s, size_t n, size_t at, char *buf, size_t size)
{
    size_t start = at < n ? at : n;
    while (start > 0 && s[start - 1] != '\n')
        start--;
    size_t end = start;
    while (end < n && s[end] != '\n')
        end++;
    if (start == n)
        return "(end of file)";
    snprintf(buf, size, "%.*s", (int)(end - start), (const char *)s + start);
    return buf;
}

/* Fails unless `zerotrain help --reference what` prints docs/reference/WHAT.md. */
static void check_reference(const char *what)
{
    const char *dir = testutil_tmpdir("docs");
    const char *got_path = testutil_fmt("%s/%s.md", dir, what);
    const char *rel = testutil_fmt("docs/reference/%s.md", what);
    int rc = testutil_run(got_path, "%s help --reference %s", testutil_binary(), what);
    ck_assert_msg(rc == 0, "zerotrain help --reference %s exited %d:\n%s", what, rc,
                  testutil_slurp(got_path));
    size_t n_got = 0, n_want = 0;
    unsigned char *got = testutil_read_file(got_path, &n_got);
    unsigned char *want = testutil_read_file(testutil_source_path(rel), &n_want);
    size_t at = 0, line = 1;
    while (at < n_got && at < n_want && got[at] == want[at])
        line += got[at++] == '\n';
    if (at < n_got || at < n_want) {
        char a[512], b[512];
        ck_abort_msg("%s is stale: line %zu differs from what zerotrain help --reference %s "
                     "prints now:\n  file:      %s\n  generated: %s\nrun scripts/docs.sh",
                     rel, line, what, line_at(want, n_want, at, a, sizeof a),
                     line_at(got, n_got, at, b, sizeof b));
    }
    free(got);
    free(want);
}

START_TEST(config_reference_is_current)
{
    check_reference("config");
}
END_TEST

START_TEST(cli_reference_is_current)
{
    check_reference("cli");
}
END_TEST

/* The reference's spelling errors as usage errors, and help help says it. */
START_TEST(reference_usage)
{
    const char *log = testutil_path_in(testutil_tmpdir("docs-usage"), "log");
    ck_assert_int_eq(testutil_run(log, "%s help --reference yaml", testutil_binary()), 2);
    ck_assert_msg(strstr(testutil_slurp(log), "--reference takes config or cli, not 'yaml'"), "%s",
                  testutil_slurp(log));
    ck_assert_int_eq(testutil_run(log, "%s help --reference", testutil_binary()), 2);
    ck_assert_int_eq(testutil_run(log, "%s help help", testutil_binary()), 0);
    ck_assert_msg(strstr(testutil_slurp(log), "--reference config") &&
                      strstr(testutil_slurp(log), "--reference cli"),
                  "%s", testutil_slurp(log));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("docs");
    TCase *tc = testutil_tcase(s, "reference", 60);
    tcase_add_test(tc, config_reference_is_current);
    tcase_add_test(tc, cli_reference_is_current);
    tcase_add_test(tc, reference_usage);
    return testutil_run_suite(s, 0);
}
