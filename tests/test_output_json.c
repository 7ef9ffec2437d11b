/* tests/test_output_json.c — every output file the suites' runs wrote is
 * JSON that any reader takes.
 *
 * Runs after every other test (CTest's fixture cleanup, tests/CMakeLists.txt)
 * and walks ZT_TEST_TMPDIR, where testutil_tmpdir puts each suite's
 * folders: each metrics.jsonl and memory_timeline.jsonl line by line, each
 * memory_report.json, flight log and non-finite report whole, through the
 * project's strict reader (no NaN, no Infinity, valid UTF-8). A step that
 * overflowed, a run stopped mid-way, a resumed run's trimmed history: what
 * the suites made them do is what is checked here. Folders a test wrote by
 * hand are marked (testutil_mark_handmade) and left alone. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/json.h"
#include "testutil.h"

/* How a file of ours is read: one document per line, or one document. */
enum shape { PER_LINE, WHOLE };

/* The shape of `path` if it is one of zerotrain's outputs, else -1. */
static int output_shape(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (!strcmp(base, "metrics.jsonl") || !strcmp(base, "memory_timeline.jsonl"))
        return PER_LINE;
    if (!strcmp(base, "memory_report.json"))
        return WHOLE;
    const size_t n = strlen(path);
    if (n > 5 && !strcmp(path + n - 5, ".json") &&
        (strstr(path, "/flight/rank-") || strstr(path, "/nonfinite/step-")))
        return WHOLE;
    return -1;
}

/* Whether a folder on the way from the root to `path` is marked handmade. */
static int handmade(const char *root, const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *slash = strrchr(dir, '/'); slash && strlen(dir) > strlen(root);
         slash = strrchr(dir, '/')) {
        *slash = '\0';
        if (access(testutil_path_in(dir, TESTUTIL_HANDMADE), F_OK) == 0)
            return 1;
    }
    return 0;
}

struct scan {
    const char *root;
    int files, documents;
    char failure[4096]; /* the first problem found, "" while none */
};

/* nftw passes no user pointer; the walk is one call deep in one thread. */
static struct scan *scan_now;

static void check_document(struct scan *s, const char *path, const char *text, size_t len, int line)
{
    struct json_source src = {.path = path, .code = ZT_ERR_DATA, .max_depth = 64};
    struct json_value v;
    if (json_parse(&src, text, len, &v) != ZT_OK) {
        if (!s->failure[0])
            snprintf(s->failure, sizeof s->failure, "line %d: %s", line, zt_error_message());
        return;
    }
    json_free(&v);
    s->documents++;
}

static void check_file(struct scan *s, const char *path, enum shape shape)
{
    size_t n;
    char *text = (char *)testutil_read_file(path, &n);
    s->files++;
    if (shape == WHOLE) {
        check_document(s, path, text, n, 1);
    } else {
        int line = 1;
        for (char *p = text, *end; p < text + n; p = end + 1, line++) {
            end = memchr(p, '\n', (size_t)(text + n - p));
            if (!end) { /* a last line must be complete too */
                if (!s->failure[0])
                    snprintf(s->failure, sizeof s->failure, "%s line %d: no newline at the end",
                             path, line);
                break;
            }
            check_document(s, path, p, (size_t)(end - p), line);
        }
    }
    free(text);
}

static int visit(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (type != FTW_F)
        return 0;
    const int shape = output_shape(path);
    if (shape >= 0 && !handmade(scan_now->root, path))
        check_file(scan_now, path, (enum shape)shape);
    return 0;
}

START_TEST(every_output_file_parses)
{
    const char *root = getenv("ZT_TEST_TMPDIR");
    ck_assert_msg(root && *root, "ZT_TEST_TMPDIR is not set (CTest sets it)");
    struct scan s = {.root = root};
    scan_now = &s;
    ck_assert_msg(nftw(root, visit, 16, FTW_PHYS) == 0, "cannot walk %s", root);
    scan_now = NULL;
    ck_assert_msg(!s.failure[0], "%s", s.failure);
    printf("%d output files, %d JSON documents, all valid\n", s.files, s.documents);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("output_json");
    TCase *tc = tcase_create("output_json");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, every_output_file_parses);
    suite_add_tcase(s, tc);
    return testutil_run_suite(s, 0);
}
