/* tests/test_common.c — status list, counter-based generator, ledger,
 * atomic file writes.
 *
 * The atomic file tests look at the folder itself after every outcome, so
 * a temp file left behind or an older file clobbered fails them. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "common/fileio.h"
#include "common/ledger.h"
#include "common/rng.h"
#include "common/size.h"
#include "common/status.h"
#include "testutil.h"

static zt_status fails_deep(void)
{
    return zt_error_set(ZT_ERR_CONFIG, "x.yaml:3:5: model.n_head: must be > 0, got %d", -1);
}

static zt_status propagates(void)
{
    ZT_TRY(fails_deep());
    return ZT_OK;
}

START_TEST(status_names_codes_and_messages)
{
    ck_assert_str_eq(zt_status_str(ZT_OK), "ZT_OK");
    ck_assert_str_eq(zt_status_str(ZT_ERR_CONFIG), "ZT_ERR_CONFIG");
    ck_assert_int_eq(zt_status_exit_code(ZT_OK), 0);
    ck_assert_int_eq(zt_status_exit_code(ZT_ERR_CONFIG), 2);
    ck_assert_int_eq(zt_status_exit_code(ZT_ERR_USAGE), 2);
    ck_assert_int_eq(zt_status_exit_code(ZT_ERR_UNSUPPORTED), 2);
    ck_assert_int_eq(zt_status_exit_code(ZT_ERR_IO), 1);
    ck_assert_int_eq(zt_status_exit_code((zt_status)999), 1);
    ck_assert_int_eq(propagates(), ZT_ERR_CONFIG);
    ck_assert_str_eq(zt_error_message(), "x.yaml:3:5: model.n_head: must be > 0, got -1");
    ck_assert(strstr(zt_error_trace(), "test_common.c") != NULL);
    zt_error_clear();
    ck_assert_str_eq(zt_error_message(), "");
}
END_TEST

START_TEST(rng_is_a_pure_function_of_key_and_counter)
{
    ck_assert_uint_eq(rng_u64(1, 5), rng_u64(1, 5));
    ck_assert_uint_ne(rng_u64(1, 5), rng_u64(1, 6));
    ck_assert_uint_ne(rng_u64(1, 5), rng_u64(2, 5));
    ck_assert_uint_ne(rng_key(1, "init"), rng_key(1, "data"));
    const int n = 200000;
    double s = 0, s2 = 0, u = 0, u2 = 0;
    for (int i = 0; i < n; i++) {
        double x = rng_normal(9, (uint64_t)i), y = rng_uniform(9, (uint64_t)i);
        ck_assert(y >= 0.0 && y < 1.0);
        s += x, s2 += x * x, u += y, u2 += y * y;
    }
    /* Sample moments: 5 standard errors. */
    ck_assert_msg(fabs(s / n) < 5 / sqrt(n), "normal mean %g", s / n);
    ck_assert_msg(fabs(s2 / n - 1.0) < 5 * sqrt(2.0 / n), "normal var %g", s2 / n);
    ck_assert_msg(fabs(u / n - 0.5) < 5 * sqrt(1.0 / 12 / n), "uniform mean %g", u / n);
    ck_assert_msg(fabs(u2 / n - u / n * u / n - 1.0 / 12) < 1e-3, "uniform var");
}
END_TEST

START_TEST(ledger_tracks_current_and_peaks)
{
    struct ledger l;
    ledger_init(&l, 0);
    ledger_add(&l, LEDGER_PARAMS, 100);
    ledger_add(&l, LEDGER_ACTIVATIONS, 50);
    ledger_sub(&l, LEDGER_ACTIVATIONS, 50);
    ledger_add(&l, LEDGER_WORKSPACE, 30);
    ck_assert_uint_eq(l.current[LEDGER_PARAMS], 100);
    ck_assert_uint_eq(l.peak[LEDGER_ACTIVATIONS], 50);
    ck_assert_uint_eq(l.current[LEDGER_ACTIVATIONS], 0);
    ck_assert_uint_eq(l.total_current, 130);
    ck_assert_uint_eq(l.total_peak, 150);
    ck_assert_str_eq(ledger_category_name(LEDGER_OPTIMIZER_STATES), "optimizer_states");
    ck_assert_str_eq(ledger_category_name(LEDGER_GATHERED_PARAMS), "gathered_params");
    ck_assert_uint_gt(ledger_rss_peak(), 0);
}
END_TEST

struct sink_log {
    int n;
    int64_t sum;
};

static void count_event(void *ctx, const struct ledger *l, enum ledger_category c, int64_t bytes)
{
    struct sink_log *log = ctx;
    (void)l;
    (void)c;
    log->n++;
    log->sum += bytes;
}

/* Counts, the phase of each peak, the outer-phase rule and the sink. */
START_TEST(ledger_knows_phases_and_counts)
{
    struct ledger l;
    struct sink_log log = {0, 0};
    const struct ledger_sink sink = {count_event, &log};
    ledger_init(&l, 0);
    l.sink = &sink;
    ledger_add(&l, LEDGER_PARAMS, 100); /* setup */
    ledger_set_step(&l, 1, 0);
    ledger_enter(&l, LEDGER_PHASE_BACKWARD, 3);
    ledger_add(&l, LEDGER_WORKSPACE, 40);
    ledger_sub(&l, LEDGER_WORKSPACE, 40);
    ledger_enter(&l, LEDGER_PHASE_OPTIMIZER, -1);
    ledger_add(&l, LEDGER_WORKSPACE, 20);
    ledger_sub(&l, LEDGER_WORKSPACE, 20);
    ck_assert_int_eq(l.peak_phase[LEDGER_PARAMS].kind, LEDGER_PHASE_SETUP);
    ck_assert_int_eq(l.peak_phase[LEDGER_WORKSPACE].kind, LEDGER_PHASE_BACKWARD);
    ck_assert_int_eq(l.peak_phase[LEDGER_WORKSPACE].unit, 3);
    ck_assert_int_eq(l.peak_phase[LEDGER_WORKSPACE].step, 1);
    ck_assert_int_eq(l.total_peak_phase.kind, LEDGER_PHASE_BACKWARD);
    ck_assert_uint_eq(l.allocs[LEDGER_WORKSPACE], 2);
    ck_assert_uint_eq(l.frees[LEDGER_WORKSPACE], 2);
    ck_assert_uint_eq(l.allocated[LEDGER_WORKSPACE], 60);
    ck_assert_uint_eq(l.freed[LEDGER_WORKSPACE], 60);
    /* an evaluation's forward stays the evaluation; the unit moves */
    ledger_enter_outer(&l, LEDGER_PHASE_EVALUATION);
    ledger_enter(&l, LEDGER_PHASE_FORWARD, 2);
    ck_assert_int_eq(l.phase.kind, LEDGER_PHASE_EVALUATION);
    ck_assert_int_eq(l.phase.unit, 2);
    ledger_set_step(&l, 2, 1);
    ck_assert_int_eq(l.phase.kind, LEDGER_PHASE_FORWARD);
    ck_assert_int_eq(l.phase.micro_step, 1);
    ck_assert_int_eq(log.n, 5);
    ck_assert_int_eq(log.sum, 100);
    ck_assert_str_eq(ledger_phase_name(LEDGER_PHASE_REDUCTION), "reduction");
}
END_TEST

/* ---- atomic files ---- */

/* Names in dir other than . and .., joined with '/' in sorted order. */
static const char *dir_listing(const char *dir)
{
    static char buf[4096];
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    ck_assert_int_ge(n, 0);
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i]->d_name, ".") != 0 && strcmp(names[i]->d_name, "..") != 0) {
            size_t used = strlen(buf);
            snprintf(buf + used, sizeof buf - used, "%s%s", used ? "/" : "", names[i]->d_name);
        }
        free(names[i]);
    }
    free(names);
    return buf;
}

/* The file's contents as a string, which must be shorter than 256 bytes. */
static const char *contents(const char *path)
{
    static char buf[256];
    size_t n;
    unsigned char *b = testutil_read_file(path, &n);
    ck_assert_uint_lt(n, sizeof buf);
    memcpy(buf, b, n);
    buf[n] = '\0';
    free(b);
    return buf;
}

static int is_zeroed(const struct atomic_file *a)
{
    return a->f == NULL && a->path == NULL && a->tmp_path == NULL;
}

/* A fresh folder (returned) holding out.bin = "old", and *a open on
 * out.bin with `data` written through it. */
static const char *open_over_old(const char *tag, const char *data, struct atomic_file *a)
{
    const char *dir = testutil_tmpdir(tag);
    const char *path = testutil_path_in(dir, "out.bin");
    testutil_write_file(path, "old", 3);
    ck_assert_int_eq(atomic_file_open(path, a), ZT_OK);
    ck_assert_int_ge(fputs(data, a->f), 0);
    return dir;
}

START_TEST(atomic_file_commit_replaces_the_file)
{
    struct atomic_file a;
    const char *dir = open_over_old("atomic-commit", "new contents", &a);
    const char *path = testutil_path_in(dir, "out.bin");
    ck_assert_str_eq(a.path, path);
    ck_assert_str_eq(a.tmp_path, testutil_fmt("%s.tmp.%ld", path, (long)getpid()));
    /* Until the commit a reader still sees the old file. */
    ck_assert_str_eq(contents(path), "old");
    ck_assert_int_eq(atomic_file_commit(&a), ZT_OK);
    ck_assert(is_zeroed(&a));
    ck_assert_str_eq(contents(path), "new contents");
    ck_assert_str_eq(dir_listing(dir), "out.bin");
}
END_TEST

START_TEST(atomic_file_abort_leaves_the_file)
{
    struct atomic_file a;
    const char *dir = open_over_old("atomic-abort", "half written", &a);
    ck_assert_str_eq(dir_listing(dir), testutil_fmt("out.bin/out.bin.tmp.%ld", (long)getpid()));
    atomic_file_abort(&a);
    ck_assert(is_zeroed(&a));
    atomic_file_abort(&a); /* a zeroed struct: nothing to do */
    ck_assert_str_eq(contents(testutil_path_in(dir, "out.bin")), "old");
    ck_assert_str_eq(dir_listing(dir), "out.bin");
}
END_TEST

START_TEST(atomic_file_missing_folder_is_an_io_error)
{
    const char *path = testutil_path_in(testutil_tmpdir("atomic-nodir"), "missing/out.bin");
    struct atomic_file a = {stdout, (char *)"x", (char *)"y"}; /* must be zeroed */
    ck_assert_int_eq(atomic_file_open(path, &a), ZT_ERR_IO);
    ck_assert(is_zeroed(&a));
    ck_assert_str_eq(zt_error_message(), testutil_fmt("%s: cannot create %s.tmp.%ld: %s", path,
                                                      path, (long)getpid(), strerror(ENOENT)));
}
END_TEST

/* A path that names a FIFO (a config given as <(...), say) is refused as
 * not a regular file at once, not waited on for a writer. */
START_TEST(a_fifo_is_refused_without_waiting)
{
    const char *path = testutil_path_in(testutil_tmpdir("fifo"), "pipe");
    unlink(path);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    int fd;
    uint64_t size;
    ck_assert_int_eq(zt_open_regular(path, ZT_ERR_CONFIG, &fd, &size), ZT_ERR_CONFIG);
    ck_assert_int_eq(fd, -1);
    ck_assert_str_eq(zt_error_message(), testutil_fmt("%s: not a regular file", path));
}
END_TEST

/* A folder where the file should go: the rename fails, the temp file goes. */
START_TEST(atomic_file_failed_rename_removes_the_temp_file)
{
    const char *dir = testutil_tmpdir("atomic-rename");
    const char *path = testutil_path_in(dir, "taken");
    ck_assert_int_eq(mkdir(path, 0755), 0);
    struct atomic_file a;
    ck_assert_int_eq(atomic_file_open(path, &a), ZT_OK);
    fputs("data", a.f);
    ck_assert_int_eq(atomic_file_commit(&a), ZT_ERR_IO);
    ck_assert(is_zeroed(&a));
    ck_assert_str_eq(zt_error_message(),
                     testutil_fmt("%s: cannot rename %s.tmp.%ld over it: %s", path, path,
                                  (long)getpid(), strerror(EISDIR)));
    ck_assert_str_eq(dir_listing(dir), "taken");
}
END_TEST

/* An error on the stream before the commit (here a read from a stream open
 * only for writing) must fail the commit, not publish a damaged file. */
START_TEST(atomic_file_earlier_write_error_fails_the_commit)
{
    struct atomic_file a;
    const char *dir = open_over_old("atomic-ferror", "data", &a);
    const char *path = testutil_path_in(dir, "out.bin");
    ck_assert_int_eq(fgetc(a.f), EOF);
    ck_assert(ferror(a.f));
    ck_assert_int_eq(atomic_file_commit(&a), ZT_ERR_IO);
    ck_assert(is_zeroed(&a));
    ck_assert_str_eq(zt_error_message(), testutil_fmt("%s: cannot flush %s.tmp.%ld: %s", path, path,
                                                      (long)getpid(), strerror(EIO)));
    ck_assert_str_eq(contents(path), "old");
    ck_assert_str_eq(dir_listing(dir), "out.bin");
}
END_TEST

START_TEST(sizes_parse_as_people_write_them)
{
    static const struct {
        const char *text;
        uint64_t bytes;
    } good[] = {
        {"5GB", 5000000000ull},   {"500MB", 500000000ull},
        {"100KB", 100000ull},     {"2TB", 2000000000000ull},
        {"2GiB", 2147483648ull},  {"512MiB", 536870912ull},
        {"64KiB", 65536ull},      {"1TiB", 1099511627776ull},
        {"1000000", 1000000ull},  {"1", 1},
        {"1.5GB", 1500000000ull}, {"0.5KiB", 512},
        {"1.0001KB", 1000},       {"0.001KB", 1},
        {"007MB", 7000000ull},    {"18446744073709551615", UINT64_MAX},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t b = 0;
        ck_assert_msg(zt_size_parse(good[i].text, &b), "%s", good[i].text);
        ck_assert_msg(b == good[i].bytes, "%s: %llu", good[i].text, (unsigned long long)b);
    }
    static const char *const bad[] = {
        "",
        "GB",
        "5gb",
        "5Gb",
        "5 GB",
        "5GB ",
        " 5GB",
        "5G",
        "5XB",
        "-5GB",
        "0",
        "0GB",
        "0.0001KB",
        "1.5",
        ".GB",
        "1e9",
        "5GiBs",
        "1..5GB",
        "0x10",
        "1.0000000001GB",
        "18446744073709551616",
        "20000000TB",
        "18446744073709551615KB",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t b = 42;
        ck_assert_msg(!zt_size_parse(bad[i], &b), "'%s' was taken", bad[i]);
        ck_assert_uint_eq(b, 42);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("common");
    TCase *tc = tcase_create("common");
    tcase_add_test(tc, status_names_codes_and_messages);
    tcase_add_test(tc, rng_is_a_pure_function_of_key_and_counter);
    tcase_add_test(tc, ledger_tracks_current_and_peaks);
    tcase_add_test(tc, ledger_knows_phases_and_counts);
    tcase_add_test(tc, atomic_file_commit_replaces_the_file);
    tcase_add_test(tc, atomic_file_abort_leaves_the_file);
    tcase_add_test(tc, atomic_file_missing_folder_is_an_io_error);
    tcase_add_test(tc, a_fifo_is_refused_without_waiting);
    tcase_add_test(tc, atomic_file_failed_rename_removes_the_temp_file);
    tcase_add_test(tc, atomic_file_earlier_write_error_fails_the_commit);
    tcase_add_test(tc, sizes_parse_as_people_write_them);
    suite_add_tcase(s, tc);
    return testutil_run_suite(s, 0);
}
