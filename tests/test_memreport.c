/* tests/test_memreport.c — the per-rank memory report (memory_report.h).
 *
 * Every rank fills a ledger by a fixed rank-dependent sequence of
 * ledger_add/ledger_sub whose peaks are worked out by hand below, gathers,
 * and rank 0 checks each row against those numbers. The expected model
 * states are checked against values computed by hand from the ZeRO paper's
 * formulas (including the paper's own 7.5B-parameter example). The table
 * and the JSON file are checked on reports built in the test, so every
 * number they print is known: the JSON is validated by a small parser here,
 * read back key by key, and compared once against a literal document.
 *
 * Without fork, a failed ck_assert on one rank must not leave the others in
 * a collective: tests that gather do so first, on every rank, and assert
 * after.
 */
#include <check.h>
#include <dirent.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/ledger.h"
#include "../report/memory_report.h"
#include "testutil.h"

static int rank, size;
static struct comm *world; /* the group of all ranks, made in main */

#define KIB 1024ull
#define MIB (1024ull * 1024ull)
#define GIB (1024ull * 1024ull * 1024ull)

/* ---- the rank-dependent ledger and its hand-worked peaks ---- */

static void fill_ledger(struct ledger *l, int r)
{
    uint64_t k = (uint64_t)r;
    ledger_init(l, 0);
    /* the loader's staging comes and goes before the model states */
    ledger_add(l, LEDGER_LOAD, 2048 * (k + 1));
    ledger_sub(l, LEDGER_LOAD, 2048 * (k + 1));
    ledger_add(l, LEDGER_PARAMS, (k + 1) * 3 * MIB / 2);
    ledger_add(l, LEDGER_GRADS, 1000 + k);
    ledger_add(l, LEDGER_MASTER_PARAMS, 4096 * (k + 1));
    ledger_add(l, LEDGER_OPTIMIZER_STATES, 3 * MIB * (k + 1));
    ledger_add(l, LEDGER_ACTIVATIONS, 10000 * (k + 1));
    ledger_sub(l, LEDGER_ACTIVATIONS, 10000 * (k + 1));
    ledger_add(l, LEDGER_ACTIVATIONS, 7000);
    ledger_add(l, LEDGER_GATHERED_PARAMS, 20000);
    ledger_sub(l, LEDGER_GATHERED_PARAMS, 20000);
    ledger_add(l, LEDGER_COMM_BUFFERS, 512 * k);
    ledger_add(l, LEDGER_WORKSPACE, 123);
}

static void want_peaks(int r, uint64_t peak[LEDGER_CATEGORY_COUNT], uint64_t *total)
{
    uint64_t k = (uint64_t)r;
    peak[LEDGER_PARAMS] = (k + 1) * 3 * MIB / 2;
    peak[LEDGER_GRADS] = 1000 + k;
    peak[LEDGER_MASTER_PARAMS] = 4096 * (k + 1);
    peak[LEDGER_OPTIMIZER_STATES] = 3 * MIB * (k + 1);
    peak[LEDGER_GATHERED_PARAMS] = 20000;
    peak[LEDGER_SECONDARY_PARAMS] = 0;
    peak[LEDGER_ACTIVATIONS] = 10000 * (k + 1);
    peak[LEDGER_COMM_BUFFERS] = 512 * k;
    peak[LEDGER_WORKSPACE] = 123;
    peak[LEDGER_LOAD] = 2048 * (k + 1);
    /* Model states are held throughout; on top of them the highest moment
     * is either the first activations (10000(r+1)) or 7000 of activations
     * plus 20000 gathered: the latter for ranks 0 and 1. The final state,
     * 7000 + 512r + 123, is always below the first activations. */
    uint64_t held = peak[0] + peak[1] + peak[2] + peak[3];
    *total = held + (r < 2 ? 27000 : 10000 * (k + 1));
}

START_TEST(test_gather_collects_every_rank_in_order)
{
    struct ledger l;
    fill_ledger(&l, rank);
    struct memory_report r = {.stage = 2, .n_params = 77, .world_size = -1};
    zt_status st = memory_report_gather(world, &l, &r);
    uint64_t rss_now = ledger_rss_peak();
    ck_assert_msg(st == ZT_OK, "%s: %s", zt_status_str(st), zt_error_message());
    ck_assert_int_eq(r.world_size, size);
    ck_assert_int_eq(r.stage, 2);
    ck_assert_uint_eq(r.n_params, 77);
    if (rank != 0) {
        ck_assert_ptr_null(r.ranks);
        return;
    }
    ck_assert_ptr_nonnull(r.ranks);
    for (int i = 0; i < size; i++) {
        uint64_t peak[LEDGER_CATEGORY_COUNT], total;
        want_peaks(i, peak, &total);
        ck_assert_int_eq(r.ranks[i].rank, i);
        for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++)
            ck_assert_msg(r.ranks[i].peak[c] == peak[c], "rank %d %s: %llu, want %llu", i,
                          ledger_category_name((enum ledger_category)c),
                          (unsigned long long)r.ranks[i].peak[c], (unsigned long long)peak[c]);
        ck_assert_uint_eq(r.ranks[i].total_peak, total);
        ck_assert_uint_gt(r.ranks[i].rss_peak, 0);
    }
    /* VmHWM only grows: rank 0's row was read before rss_now. */
    ck_assert_uint_le(r.ranks[0].rss_peak, rss_now);
    memory_report_free(&r);
}
END_TEST

/* The device's account travels with each rank's row, and a report on
 * device memory prints it per rank. */
START_TEST(test_gather_carries_the_device_account)
{
    struct ledger l;
    fill_ledger(&l, rank);
    const struct memory_rank_row place = {.dp = rank,
                                          .device_reserved = 1000000ull + (uint64_t)rank,
                                          .device_used_peak = 2000000ull + (uint64_t)rank,
                                          .device_largest_free = 3000ull + (uint64_t)rank,
                                          .driver_free = 4000000ull + (uint64_t)rank,
                                          .driver_total = 5000000ull + (uint64_t)rank};
    struct memory_report r = {.stage = 0, .n_params = 7, .device_memory = 1};
    ck_assert_int_eq(memory_report_gather_placed(world, &l, &place, &r), ZT_OK);
    if (rank != 0)
        return;
    for (int i = 0; i < size; i++) {
        const struct memory_rank_row *row = &r.ranks[i];
        ck_assert_uint_eq(row->device_reserved, 1000000ull + (uint64_t)i);
        ck_assert_uint_eq(row->device_used_peak, 2000000ull + (uint64_t)i);
        ck_assert_uint_eq(row->device_largest_free, 3000ull + (uint64_t)i);
        ck_assert_uint_eq(row->driver_free, 4000000ull + (uint64_t)i);
        ck_assert_uint_eq(row->driver_total, 5000000ull + (uint64_t)i);
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    memory_report_print(&r, f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(text, "device memory (MiB)"));
    ck_assert_ptr_nonnull(strstr(text, "rank 0: reserved 1.0, peak used 1.9, largest free 0.0"));
    free(text);
    memory_report_free(&r);
}
END_TEST

/* ---- expected model states ---- */

struct expectation {
    int stage, world;
    uint64_t bytes;
};

static void check_expectations(const double bpp[4], uint64_t n_params, const struct expectation *e,
                               int n)
{
    for (int i = 0; i < n; i++) {
        uint64_t got =
            memory_expected_model_states(e[i].stage, e[i].world, n_params, n_params, bpp, 0);
        ck_assert_msg(got == e[i].bytes, "stage %d N=%d: %llu, want %llu", e[i].stage, e[i].world,
                      (unsigned long long)got, (unsigned long long)e[i].bytes);
    }
}

/* Ψ = 1.2M; fp32 AdamW keeps p=4, g=4, m=0, o=8 bytes per parameter. */
START_TEST(test_expected_model_states_fp32)
{
    const double bpp[4] = {4, 4, 0, 8};
    const struct expectation e[] = {
        {0, 1, 19200000}, {0, 2, 19200000}, {0, 4, 19200000}, /* 16Ψ */
        {1, 1, 19200000}, {1, 2, 14400000}, {1, 4, 12000000}, /* 8Ψ + 8Ψ/N */
        {2, 1, 19200000}, {2, 2, 12000000}, {2, 4, 8400000},  /* 4Ψ + 12Ψ/N */
        {3, 1, 19200000}, {3, 2, 9600000},  {3, 4, 4800000},  /* 16Ψ/N */
    };
    check_expectations(bpp, 1200000, e, (int)(sizeof e / sizeof e[0]));
}
END_TEST

/* Mixed precision: p=2, g=2, m=4, o=8 (the paper's K = 12 is m + o). */
START_TEST(test_expected_model_states_16bit)
{
    const double bpp[4] = {2, 2, 4, 8};
    const struct expectation e[] = {
        {0, 1, 19200000}, {0, 2, 19200000}, {0, 4, 19200000}, /* 16Ψ */
        {1, 1, 19200000}, {1, 2, 12000000}, {1, 4, 8400000},  /* 4Ψ + 12Ψ/N */
        {2, 1, 19200000}, {2, 2, 10800000}, {2, 4, 6600000},  /* 2Ψ + 14Ψ/N */
        {3, 1, 19200000}, {3, 2, 9600000},  {3, 4, 4800000},  /* 16Ψ/N */
    };
    check_expectations(bpp, 1200000, e, (int)(sizeof e / sizeof e[0]));
}
END_TEST

/* The paper's figure 1: Ψ = 7.5B, N = 64, K = 12: 120 GB, 31.4 GB,
 * 16.6 GB, 1.9 GB. */
START_TEST(test_expected_model_states_paper_example)
{
    const double bpp[4] = {2, 2, 4, 8};
    const struct expectation e[] = {
        {0, 64, 120000000000ull},
        {1, 64, 31406250000ull},
        {2, 64, 16640625000ull},
        {3, 64, 1875000000ull},
    };
    check_expectations(bpp, 7500000000ull, e, (int)(sizeof e / sizeof e[0]));
}
END_TEST

START_TEST(test_expected_model_states_rounds_to_nearest_byte)
{
    const double bpp[4] = {4, 4, 0, 8};
    /* 160/3 = 53.33, 176/3 = 58.67; stage 2 with Ψ=11: 44 + 132/3 = 88. */
    ck_assert_uint_eq(memory_expected_model_states(3, 3, 10, 10, bpp, 0), 53);
    ck_assert_uint_eq(memory_expected_model_states(3, 3, 11, 11, bpp, 0), 59);
    ck_assert_uint_eq(memory_expected_model_states(2, 3, 11, 11, bpp, 0), 88);
}
END_TEST

/* Frozen units keep parameters only: g, m and o count the trainable part. */
START_TEST(test_expected_model_states_with_frozen_parameters)
{
    const double bpp[4] = {2, 2, 4, 8};
    /* stage 1, N = 2, Ψ = 100 of which 40 train: 2*100 + 2*40 + (4+8)*40/2 */
    ck_assert_uint_eq(memory_expected_model_states(1, 2, 100, 40, bpp, 0), 520);
    /* stage 3: everything split: (200 + 80 + 480) / 2 */
    ck_assert_uint_eq(memory_expected_model_states(3, 2, 100, 40, bpp, 0), 380);
    /* nothing trains: parameters alone */
    ck_assert_uint_eq(memory_expected_model_states(0, 2, 100, 0, bpp, 0), 200);
}
END_TEST

/* ---- reports built by hand, and reading back what was written ---- */

/* A 3-rank stage-2 report with rank-dependent, partly > 4 GiB values. */
static void build_report(struct memory_report *r, struct memory_rank_row rows[3])
{
    memset(r, 0, sizeof *r);
    memset(rows, 0, 3 * sizeof *rows);
    r->world_size = 3;
    r->stage = 2;
    r->n_params = 124439808;
    r->bytes_per_param[0] = 2;
    r->bytes_per_param[1] = 2;
    r->bytes_per_param[2] = 4;
    r->bytes_per_param[3] = 8;
    for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++) {
        r->baseline[c] = 1000003ull * (uint64_t)(c + 1);
        for (int i = 0; i < 3; i++)
            rows[i].peak[c] = 5 * GIB + 100ull * (uint64_t)c + (uint64_t)i;
    }
    r->baseline_total = 40000000;
    r->expected_model_states = 821301734;
    for (int i = 0; i < 3; i++) {
        rows[i].rank = i;
        rows[i].total_peak = 7 * GIB + (uint64_t)i;
        rows[i].rss_peak = 9 * GIB + 4096ull * (uint64_t)i;
    }
    r->ranks = rows;
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* A JSON syntax check: objects, arrays, strings without escapes, numbers. */
static const char *json_value(const char *p);

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
        p++;
    return p;
}

static const char *json_string(const char *p)
{
    if (*p != '"')
        return NULL;
    for (p++; *p && *p != '"'; p++)
        if (*p == '\\' || (unsigned char)*p < 0x20)
            return NULL;
    return *p == '"' ? p + 1 : NULL;
}

static const char *json_number(const char *p)
{
    const char *start = p;
    if (*p == '-')
        p++;
    if (*p < '0' || *p > '9')
        return NULL;
    while (*p && strchr("0123456789.eE+-", *p))
        p++;
    char *end;
    strtod(start, &end);
    return end == p ? p : NULL;
}

static const char *json_container(const char *p, char close, int keyed)
{
    p = skip_ws(p + 1);
    if (*p == close)
        return p + 1;
    for (;;) {
        if (keyed) {
            p = json_string(skip_ws(p));
            if (!p)
                return NULL;
            p = skip_ws(p);
            if (*p++ != ':')
                return NULL;
        }
        p = json_value(p);
        if (!p)
            return NULL;
        p = skip_ws(p);
        if (*p == close)
            return p + 1;
        if (*p++ != ',')
            return NULL;
    }
}

static const char *json_value(const char *p)
{
    p = skip_ws(p);
    if (*p == '{')
        return json_container(p, '}', 1);
    if (*p == '[')
        return json_container(p, ']', 0);
    if (*p == '"')
        return json_string(p);
    return json_number(p);
}

static int json_valid(const char *doc)
{
    const char *end = json_value(doc);
    return end && *skip_ws(end) == '\0';
}

/* The number after the next "key": at or after *cur; moves *cur past it,
 * so successive calls also check the order of the keys. */
static unsigned long long next_u64(const char **cur, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *at = strstr(*cur, pat);
    ck_assert_msg(at != NULL, "key \"%s\" missing after offset: %.40s", key, *cur);
    char *end;
    unsigned long long v = strtoull(at + strlen(pat), &end, 10);
    ck_assert_msg(end != at + strlen(pat), "key \"%s\": no number", key);
    *cur = end;
    return v;
}

/* The same key must not occur between *cur and the next `stop` char. */
static void assert_before(const char *cur, char stop, const char *what)
{
    ck_assert_msg(*skip_ws(cur) == ',' || *skip_ws(cur) == stop, "%s: unexpected %.20s", what, cur);
}

START_TEST(test_json_reads_back_every_number)
{
    struct memory_report r;
    struct memory_rank_row rows[3];
    build_report(&r, rows);
    char path[4096];
    snprintf(path, sizeof path, "%s/memory.json", testutil_tmpdir("memreport"));
    zt_status st = memory_report_write_json(&r, path);
    ck_assert_msg(st == ZT_OK, "%s: %s", zt_status_str(st), zt_error_message());
    const char *doc = read_all(path);
    ck_assert_msg(json_valid(doc), "not valid JSON: %s", doc);
    const char *p = doc;
    ck_assert_uint_eq(next_u64(&p, "world_size"), 3);
    ck_assert_uint_eq(next_u64(&p, "stage"), 2);
    ck_assert_uint_eq(next_u64(&p, "n_params"), 124439808);
    ck_assert_ptr_nonnull(strstr(doc, "\"bytes_per_param\": {\"params\": 2, \"grads\": 2, "
                                      "\"master_params\": 4, \"optimizer_states\": 8}"));
    p = strstr(doc, "\"baseline\": {");
    ck_assert_ptr_nonnull(p);
    for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++) {
        ck_assert_uint_eq(next_u64(&p, ledger_category_name((enum ledger_category)c)),
                          1000003ull * (uint64_t)(c + 1));
        assert_before(p, '}', "baseline");
    }
    ck_assert_uint_eq(next_u64(&p, "total"), 40000000);
    ck_assert_uint_eq(next_u64(&p, "expected_model_states"), 821301734);
    p = strstr(p, "\"ranks\": [");
    ck_assert_ptr_nonnull(p);
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(next_u64(&p, "rank"), (unsigned)i);
        for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++) {
            ck_assert_uint_eq(next_u64(&p, ledger_category_name((enum ledger_category)c)),
                              5 * GIB + 100ull * (uint64_t)c + (uint64_t)i);
            assert_before(p, '}', "rank peak");
        }
        ck_assert_uint_eq(next_u64(&p, "total_peak"), 7 * GIB + (uint64_t)i);
        ck_assert_uint_eq(next_u64(&p, "rss_peak"), 9 * GIB + 4096ull * (uint64_t)i);
    }
    ck_assert_ptr_null(strstr(p, "\"rank\": "));
}
END_TEST

/* The whole document for one rank, written out by hand. */
START_TEST(test_json_matches_the_documented_format)
{
    struct memory_rank_row row = {
        .rank = 0,
        .pp = 1,
        .total_peak = 900,
        .rss_peak = 4096,
        .expected_model_states = 700,
        .device_reserved = 2000,
        .device_used_peak = 1500,
        .device_largest_free = 256,
        .driver_free = 30000,
        .driver_total = 80000,
        .offload_host_peak = 640,
        .rss = {.baseline = 3000, .runtime = 40, .counted = 900, .data = 5}};
    for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++)
        row.peak[c] = 10 + (uint64_t)c;
    struct memory_report r = {.world_size = 1,
                              .stage = 0,
                              .n_params = 50,
                              .bytes_per_param = {4, 4, 0, 8},
                              .baseline_total = 1000,
                              .expected_model_states = 800,
                              .ranks = &row};
    for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++)
        r.baseline[c] = 100 + (uint64_t)c;
    char path[4096];
    snprintf(path, sizeof path, "%s/m.json", testutil_tmpdir("memreport"));
    ck_assert_int_eq(memory_report_write_json(&r, path), ZT_OK);
    ck_assert_str_eq(
        read_all(path),
        "{\"world_size\": 1, \"stage\": 0, \"n_params\": 50, \"bytes_per_param\": {\"params\": 4, "
        "\"grads\": 4, \"master_params\": 0, \"optimizer_states\": 8}, \"base4_numel\": 0, "
        "\"base4_bytes\": 0, \"baseline\": {\"params\": "
        "100, \"grads\": 101, \"master_params\": 102, \"optimizer_states\": 103, "
        "\"gathered_params\": 104, \"secondary_params\": 105, \"activations\": 106, "
        "\"comm_buffers\": 107, \"workspace\": 108, \"load\": 109, \"total\": 1000}, "
        "\"expected_model_states\": "
        "800, \"ranks\": [{\"rank\": 0, "
        "\"tp\": 0, \"pp\": 1, \"dp\": 0, \"peak\": "
        "{\"params\": 10, \"grads\": 11, \"master_params\": 12, \"optimizer_states\": 13, "
        "\"gathered_params\": 14, \"secondary_params\": 15, \"activations\": 16, "
        "\"comm_buffers\": 17, \"workspace\": 18, \"load\": 19}, "
        "\"total_peak\": 900, \"rss_peak\": 4096, \"expected_model_states\": 700, "
        "\"device\": {\"reserved\": 2000, \"used_peak\": 1500, \"largest_free\": 256, "
        "\"driver_free\": 30000, \"driver_total\": 80000, \"offload_host_peak\": 640}, "
        "\"nvme_file_bytes\": 0, \"rss_predicted\": {\"baseline\": 3000, \"runtime\": 40, "
        "\"counted\": 900, \"data\": 5, \"total\": 3945}}]}\n");
}
END_TEST

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

START_TEST(test_json_replaces_old_file_and_leaves_no_temporary)
{
    struct memory_report r;
    struct memory_rank_row rows[3];
    build_report(&r, rows);
    const char *dir = testutil_tmpdir("memreport");
    char path[4096];
    snprintf(path, sizeof path, "%s/memory.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("old contents, much longer than nothing at all\n", f);
    fclose(f);
    ck_assert_int_eq(memory_report_write_json(&r, path), ZT_OK);
    ck_assert_msg(json_valid(read_all(path)), "old file not replaced");
    ck_assert_int_eq(count_entries(dir), 1);
}
END_TEST

START_TEST(test_json_errors_are_io_and_clean_up)
{
    struct memory_report r;
    struct memory_rank_row rows[3];
    build_report(&r, rows);
    const char *dir = testutil_tmpdir("memreport");
    char path[4096];
    snprintf(path, sizeof path, "%s/missing/memory.json", dir);
    ck_assert_int_eq(memory_report_write_json(&r, path), ZT_ERR_IO);
    ck_assert_ptr_nonnull(strstr(zt_error_message(), "missing/memory.json"));
    /* A folder where the file should go: the rename fails after the
     * temporary was written, which must then be removed. */
    snprintf(path, sizeof path, "%s/taken", dir);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    ck_assert_int_eq(memory_report_write_json(&r, path), ZT_ERR_IO);
    ck_assert_ptr_nonnull(strstr(zt_error_message(), "cannot rename"));
    ck_assert_int_eq(count_entries(dir), 1);
}
END_TEST

/* ---- the table ---- */

/* Prints r into a string (owned by the caller). */
static char *print_to_string(const struct memory_report *r)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    memory_report_print(r, f);
    fclose(f);
    return buf;
}

/* The line of `text` that starts with `start`, copied into line; 0 if none. */
static int find_line(const char *text, const char *start, char *line, size_t n)
{
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (strncmp(p, start, strlen(start)) == 0) {
            snprintf(line, n, "%.*s", (int)len, p);
            return 1;
        }
        p += len + (eol != NULL);
    }
    return 0;
}

/* Each string of `want` occurs in line, in this order. */
static void assert_in_order(const char *line, const char *const *want, int n)
{
    const char *p = line;
    for (int i = 0; i < n; i++) {
        const char *at = strstr(p, want[i]);
        ck_assert_msg(at != NULL, "'%s' missing (in order) from: %s", want[i], line);
        p = at + strlen(want[i]);
    }
}

static int longest_line(const char *text)
{
    int best = 0;
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        int len = eol ? (int)(eol - p) : (int)strlen(p);
        best = len > best ? len : best;
        p += len + (eol != NULL);
    }
    return best;
}

START_TEST(test_print_has_every_gathered_rank_and_baseline)
{
    struct ledger l;
    fill_ledger(&l, rank);
    struct memory_report r = {.stage = 1, .baseline_total = 100 * MIB};
    zt_status st = memory_report_gather(world, &l, &r);
    ck_assert_int_eq(st, ZT_OK);
    char *text = print_to_string(&r);
    if (rank != 0) {
        ck_assert_str_eq(text, ""); /* no rows here: nothing to print */
        free(text);
        return;
    }
    char line[512], label[16];
    ck_assert_msg(find_line(text, "    rank", line, sizeof line), "no header: %s", text);
    for (int i = 0; i < size; i++) {
        snprintf(label, sizeof label, "%8d ", i);
        ck_assert_msg(find_line(text, label, line, sizeof line), "no row for rank %d: %s", i, text);
    }
    ck_assert_msg(find_line(text, "baseline ", line, sizeof line), "no baseline: %s", text);
    ck_assert_msg(find_line(text, "model states per rank", line, sizeof line), "%s", text);
    free(text);
    memory_report_free(&r);
}
END_TEST

START_TEST(test_print_units_and_ratio)
{
    struct memory_rank_row row = {.rank = 0, .total_peak = 50 * MIB, .rss_peak = 3 * GIB / 4};
    /* no hpZ: the secondary column (0 everywhere) is left out */
    const uint64_t peaks[LEDGER_CATEGORY_COUNT] = {0, 10239,   10240,      3 * MIB / 2, 1023999,
                                                   0, 3 * GIB, 1023 * KIB, 999 * KIB};
    const char *const cells[] = {"0 B",       "10239 B",    "10.00 KiB", "1.50 MiB",
                                 "0.98 MiB",  "3.00 GiB",   "1.00 MiB",  "999.00 KiB",
                                 "50.00 MiB", "768.00 MiB", " 0.25"};
    memcpy(row.peak, peaks, sizeof peaks);
    struct memory_report r = {.world_size = 1, .baseline_total = 200 * MIB, .ranks = &row};
    r.baseline[LEDGER_PARAMS] = 9999;
    char *text = print_to_string(&r);
    char line[512];
    ck_assert_msg(find_line(text, "       0 ", line, sizeof line), "%s", text);
    assert_in_order(line, cells, (int)(sizeof cells / sizeof cells[0]));
    ck_assert_msg(find_line(text, "baseline ", line, sizeof line), "%s", text);
    const char *const base[] = {"9999 B", "0 B", "200.00 MiB", "-", " 1.00"};
    assert_in_order(line, base, (int)(sizeof base / sizeof base[0]));
    ck_assert_int_le(longest_line(text), 124);
    free(text);
}
END_TEST

/* The predicted RSS: its parts, their sum and, in a run, the ratio to the
 * measured peak; a dry run's rows have no measured peak to hold it to. */
START_TEST(test_print_predicted_rss)
{
    struct memory_rank_row row = {.rank = 0, .total_peak = 50 * MIB, .rss_peak = 80 * MIB};
    row.rss = (struct rss_parts){20 * MIB, 6 * MIB, 50 * MIB, 4 * MIB};
    struct memory_report r = {.world_size = 1, .baseline_total = 50 * MIB, .ranks = &row};
    char *text = print_to_string(&r);
    char line[512];
    ck_assert_msg(find_line(text, "  rank 0: ", line, sizeof line), "%s", text);
    const char *const cells[] = {"20.00 MiB",   "6.00 MiB",           "50.00 MiB", "4.00 MiB",
                                 "= 80.00 MiB", "measured 80.00 MiB", "1.000"};
    assert_in_order(line, cells, (int)(sizeof cells / sizeof cells[0]));
    free(text);
    r.planned = 1;
    text = print_to_string(&r);
    ck_assert_msg(find_line(text, "  rank 0: ", line, sizeof line), "%s", text);
    ck_assert_ptr_null(strstr(line, "measured"));
    ck_assert_int_le(longest_line(text), 124);
    free(text);
}
END_TEST

START_TEST(test_print_model_states_against_expected)
{
    struct memory_rank_row rows[3] = {{.rank = 0}, {.rank = 1}, {.rank = 2}};
    /* model states 1010000, 1000000, 1005000; the workspace is not one. */
    const uint64_t p[3][4] = {
        {400000, 10000, 200000, 400000}, {400000, 0, 200000, 400000}, {5000, 0, 600000, 400000}};
    for (int i = 0; i < 3; i++) {
        memcpy(rows[i].peak, p[i], sizeof p[i]);
        rows[i].peak[LEDGER_WORKSPACE] = 77777777;
    }
    struct memory_report r = {.world_size = 3,
                              .stage = 2,
                              .bytes_per_param = {2, 2, 4, 8},
                              .expected_model_states = 1000000,
                              .ranks = rows};
    char *text = print_to_string(&r);
    char line[512];
    ck_assert_msg(find_line(text, "model states per rank", line, sizeof line), "%s", text);
    const char *const measured[] = {"measured 976.56 KiB .. 986.33 KiB"};
    assert_in_order(line, measured, 1);
    ck_assert_msg(find_line(text, "  expected", line, sizeof line), "%s", text);
    const char *const expected[] = {"stage 2", "N = 3", "2+2+4+8", "976.56 KiB"};
    assert_in_order(line, expected, 4);
    ck_assert_msg(find_line(text, "  difference", line, sizeof line), "%s", text);
    const char *const diff[] = {"+0.00% .. +1.00%"};
    assert_in_order(line, diff, 1);
    free(text);
}
END_TEST

START_TEST(test_free_is_idempotent)
{
    struct memory_report r = {.ranks = calloc(2, sizeof(struct memory_rank_row))};
    memory_report_free(&r);
    ck_assert_ptr_null(r.ranks);
    memory_report_free(&r);
    ck_assert_ptr_null(r.ranks);
}
END_TEST

static Suite *memreport_suite(void)
{
    Suite *s = suite_create("memreport");
    TCase *tc = tcase_create("memreport");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_gather_collects_every_rank_in_order);
    tcase_add_test(tc, test_gather_carries_the_device_account);
    tcase_add_test(tc, test_expected_model_states_fp32);
    tcase_add_test(tc, test_expected_model_states_16bit);
    tcase_add_test(tc, test_expected_model_states_paper_example);
    tcase_add_test(tc, test_expected_model_states_rounds_to_nearest_byte);
    tcase_add_test(tc, test_expected_model_states_with_frozen_parameters);
    tcase_add_test(tc, test_json_reads_back_every_number);
    tcase_add_test(tc, test_json_matches_the_documented_format);
    tcase_add_test(tc, test_json_replaces_old_file_and_leaves_no_temporary);
    tcase_add_test(tc, test_json_errors_are_io_and_clean_up);
    tcase_add_test(tc, test_print_has_every_gathered_rank_and_baseline);
    tcase_add_test(tc, test_print_units_and_ratio);
    tcase_add_test(tc, test_print_predicted_rss);
    tcase_add_test(tc, test_print_model_states_against_expected);
    tcase_add_test(tc, test_free_is_idempotent);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct comm_config cfg = {.backend = "mpi"};
    if (comm_create(&cfg, &world) != ZT_OK) {
        fprintf(stderr, "comm_create: %s\n", zt_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int rc = testutil_run_suite(memreport_suite(), 1);
    comm_destroy(world);
    MPI_Finalize();
    return rc;
}
