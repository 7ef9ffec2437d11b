/* tests/test_memtimeline.c — the memory timeline and summary, through the
 * binary under mpirun: in every ZeRO stage, with 16-bit precision, tensor
 * and pipeline parallelism and under --dry-run, each rank's running sum of
 * the timeline's changes equals the ledger's bytes it records at every
 * event, its maxima equal the memory report's peaks, and the phase the
 * summary names for the peak is the phase of the event where the running
 * total first reached it. A chosen step starts from a snapshot; bad
 * --memory-timeline-steps values are refused. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/json.h"
#include "testutil.h"

#define MAX_CATS  16
#define MAX_RANKS 4

struct event {
    int rank;
    long step, micro;
    char phase[16];
    int unit;
    char unit_name[64];
    int category; /* index into cats, -1: snapshot */
    long long bytes;
    long long current[MAX_CATS];
    long long total;
};

struct timeline {
    int n_cats;
    char cats[MAX_CATS][32];
    struct event *ev;
    int n;
};

static const struct json_value *member(const struct json_value *o, const char *key, int line)
{
    const struct json_value *v = json_object_get(o, key, NULL);
    ck_assert_msg(v != NULL, "timeline line %d: no \"%s\"", line, key);
    return v;
}

static long long int_of(const struct json_value *v)
{
    ck_assert_int_eq(v->type, JSON_INT);
    return v->negative ? -(long long)v->magnitude : (long long)v->magnitude;
}

static void parse_event(const struct json_value *o, int line, struct timeline *t, struct event *e)
{
    const struct json_value *cur = member(o, "current", line);
    ck_assert_int_eq(cur->type, JSON_OBJECT);
    if (t->n_cats == 0) {
        ck_assert(cur->n <= MAX_CATS);
        t->n_cats = (int)cur->n;
        for (size_t k = 0; k < cur->n; k++)
            snprintf(t->cats[k], sizeof t->cats[k], "%s", cur->keys[k]);
    }
    ck_assert_int_eq((int)cur->n, t->n_cats);
    for (int k = 0; k < t->n_cats; k++) {
        ck_assert_str_eq(cur->keys[k], t->cats[k]);
        e->current[k] = int_of(&cur->items[k]);
    }
    e->rank = (int)int_of(member(o, "rank", line));
    e->step = (long)int_of(member(o, "step", line));
    e->micro = (long)int_of(member(o, "micro_step", line));
    snprintf(e->phase, sizeof e->phase, "%s", member(o, "phase", line)->str);
    e->unit = (int)int_of(member(o, "unit", line));
    const struct json_value *name = member(o, "unit_name", line);
    snprintf(e->unit_name, sizeof e->unit_name, "%s", name->type == JSON_STRING ? name->str : "");
    ck_assert_msg((e->unit >= 0) == (name->type == JSON_STRING), "line %d: unit and name", line);
    const struct json_value *cat = member(o, "category", line);
    e->category = -1;
    for (int k = 0; cat->type == JSON_STRING && k < t->n_cats; k++)
        if (strcmp(cat->str, t->cats[k]) == 0)
            e->category = k;
    ck_assert_msg(cat->type == JSON_NULL || e->category >= 0, "line %d: unknown category", line);
    e->bytes = int_of(member(o, "bytes", line));
    e->total = int_of(member(o, "total", line));
}

static void read_timeline(const char *path, struct timeline *t)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: cannot open", path);
    char line[4096];
    int cap = 0;
    while (fgets(line, sizeof line, f)) {
        struct json_source src = {path, NULL, ZT_ERR_DATA, 4};
        struct json_value v;
        ck_assert_msg(json_parse(&src, line, strlen(line), &v) == ZT_OK, "%s", zt_error_message());
        ck_assert_msg(json_object_get(&v, "truncated", NULL) == NULL, "%s: truncated", path);
        if (t->n == cap) {
            cap = cap ? 2 * cap : 256;
            t->ev = realloc(t->ev, (size_t)cap * sizeof *t->ev);
            ck_assert(t->ev != NULL);
        }
        parse_event(&v, t->n + 1, t, &t->ev[t->n]);
        json_free(&v);
        t->n++;
    }
    fclose(f);
    ck_assert_msg(t->n > 0, "%s: empty", path);
}

/* The memory report's peaks of `rank`: per category (in the timeline's
 * category order) and the total. */
static void report_peaks(const char *path, const struct timeline *t, int rank, long long *peak,
                         long long *total_peak)
{
    const char *text = testutil_slurp(path);
    struct json_source src = {path, NULL, ZT_ERR_DATA, 8};
    struct json_value v;
    ck_assert_msg(json_parse(&src, text, strlen(text), &v) == ZT_OK, "%s", zt_error_message());
    const struct json_value *ranks = json_object_get(&v, "ranks", NULL);
    ck_assert(ranks && ranks->type == JSON_ARRAY && (size_t)rank < ranks->n);
    const struct json_value *row = &ranks->items[rank];
    const struct json_value *p = json_object_get(row, "peak", NULL);
    ck_assert(p != NULL);
    for (int k = 0; k < t->n_cats; k++) {
        const struct json_value *b = json_object_get(p, t->cats[k], NULL);
        ck_assert_msg(b != NULL, "%s: no peak of %s", path, t->cats[k]);
        peak[k] = int_of(b);
    }
    *total_peak = int_of(json_object_get(row, "total_peak", NULL));
    json_free(&v);
}

/* The summary's wording of an event's phase (memory_summary.h). */
static void phase_text(const struct event *e, char *buf, size_t n)
{
    char of[96] = "";
    if (e->unit >= 0)
        snprintf(of, sizeof of, " of %s", e->unit_name);
    const int per_micro = strcmp(e->phase, "forward") == 0 || strcmp(e->phase, "backward") == 0 ||
                          (strcmp(e->phase, "reduction") == 0 && e->unit >= 0);
    if (e->step == 0)
        snprintf(buf, n, "%s%s", e->phase, of);
    else if (per_micro)
        snprintf(buf, n, "step %ld, micro %ld: %s%s", e->step, e->micro, e->phase, of);
    else
        snprintf(buf, n, "step %ld: %s%s", e->step, e->phase, of);
}

/* The last column of `row`'s line in rank's summary table in log. */
static void summary_phase(const char *log, int rank, const char *row, char *buf, size_t n)
{
    const char *at = strstr(log, testutil_fmt("| zerotrain memory summary, rank %d of", rank));
    ck_assert_msg(at != NULL, "no summary of rank %d in:\n%s", rank, log);
    const char *line = strstr(at, testutil_fmt("| %-16s |", row));
    ck_assert_msg(line != NULL, "no %s row for rank %d", row, rank);
    const char *end = strchr(line, '\n');
    const char *bar = end - 1; /* the closing '|' */
    const char *open = bar - 1;
    while (*open != '|')
        open--;
    const char *s = open + 2;
    size_t len = (size_t)(bar - 1 - s);
    while (len > 0 && s[len - 1] == ' ')
        len--;
    snprintf(buf, n, "%.*s", (int)len, s);
}

/* Checks one rank's events; returns the index of the event where its
 * running total first reached the maximum. */
static int check_rank(const struct timeline *t, int rank, const long long *peak,
                      long long total_peak, const char *what)
{
    long long sum[MAX_CATS] = {0}, max[MAX_CATS] = {0}, max_total = 0, seq = 0;
    int at = -1, seen = 0;
    for (int i = 0; i < t->n; i++) {
        const struct event *e = &t->ev[i];
        if (e->rank != rank)
            continue;
        if (e->category < 0) {
            ck_assert_msg(seen == 0, "%s: snapshot after events", what);
            memcpy(sum, e->current, sizeof sum);
        } else {
            sum[e->category] += e->bytes;
        }
        seen++;
        long long total = 0;
        for (int k = 0; k < t->n_cats; k++) {
            ck_assert_msg(sum[k] == e->current[k],
                          "%s: rank %d event %lld: running sum of %s %lld, ledger %lld", what, rank,
                          seq, t->cats[k], sum[k], e->current[k]);
            max[k] = sum[k] > max[k] ? sum[k] : max[k];
            total += sum[k];
        }
        ck_assert_int_eq(total, e->total);
        if (total > max_total) {
            max_total = total;
            at = i;
        }
        seq++;
    }
    ck_assert_msg(seen > 0, "%s: no events of rank %d", what, rank);
    if (peak) {
        for (int k = 0; k < t->n_cats; k++)
            ck_assert_msg(max[k] == peak[k],
                          "%s: rank %d: timeline's maximum of %s %lld, peak %lld", what, rank,
                          t->cats[k], max[k], peak[k]);
        ck_assert_msg(max_total == total_peak, "%s: rank %d: timeline's total %lld, peak %lld",
                      what, rank, max_total, total_peak);
    }
    return at;
}

/* Trains micro.yaml for 3 steps with the timeline over the whole run,
 * then checks every rank against the report and the summary. */
static void check_run(const char *name_arg, int np, const char *extra_arg)
{
    char dir[4096], name[64], extra[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("memtimeline"));
    snprintf(name, sizeof name, "%s", name_arg);
    snprintf(extra, sizeof extra, "%s", extra_arg);
    char tl[4096], report[4096];
    snprintf(tl, sizeof tl, "%s", testutil_path_in(dir, testutil_fmt("%s.jsonl", name)));
    snprintf(report, sizeof report, "%s", testutil_path_in(dir, testutil_fmt("%s.json", name)));
    ck_assert_msg(testutil_train_micro(dir, name, np,
                                       testutil_fmt("--set run.steps=3 --memory-timeline %s "
                                                    "--memory-timeline-steps 0-3 --memory-summary "
                                                    "--memory-report %s %s",
                                                    tl, report, extra)) == 0,
                  "%s failed:\n%s", name,
                  testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", name))));
    char log[1 << 16];
    snprintf(log, sizeof log, "%s",
             testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", name))));
    struct timeline t;
    read_timeline(tl, &t);
    for (int r = 0; r < np; r++) {
        long long peak[MAX_CATS], total_peak;
        report_peaks(report, &t, r, peak, &total_peak);
        const int at = check_rank(&t, r, peak, total_peak, name);
        char want[160], got[160];
        phase_text(&t.ev[at], want, sizeof want);
        summary_phase(log, r, "total", got, sizeof got);
        ck_assert_msg(strcmp(want, got) == 0, "%s: rank %d: summary names \"%s\", timeline \"%s\"",
                      name, r, got, want);
    }
    free(t.ev);
}

START_TEST(stages_match_report_and_summary)
{
    static const char *const stages[] = {"0", "1", "2", "3"};
    for (int z = 0; z < 4; z++)
        check_run(testutil_fmt("stage%s", stages[z]), 2,
                  testutil_fmt("--set zero_optimization.stage=%s", stages[z]));
    check_run("bf16-stage3", 2, "--set zero_optimization.stage=3 --set bf16.enabled=true");
}
END_TEST

START_TEST(layouts_and_dry_run_match)
{
    check_run("tensor2", 2, "--set tensor_parallel.size=2 --set zero_optimization.stage=1");
    check_run("pipeline2", 2, "--set pipeline.stages=2 --set gradient_accumulation_steps=2");
    check_run("dry-run-stage3", 2, "--set zero_optimization.stage=3 --dry-run");
}
END_TEST

/* What the summary says of peaks whose phase is known from how the stages
 * allocate: 16-bit stage 0 holds fp32 views of a unit's parameters and
 * gradients only while the backward of that unit runs, and the views of
 * the last block come first; stage 3's gathered units peak in the forward
 * (a unit and the prefetched next one). */
START_TEST(summary_names_known_peaks)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("memsummary"));
    ck_assert_int_eq(testutil_train_micro(dir, "bf16", 1,
                                          "--set run.steps=2 --set bf16.enabled=true "
                                          "--memory-summary"),
                     0);
    const char *log = testutil_slurp(testutil_path_in(dir, "bf16.log"));
    char got[160];
    summary_phase(log, 0, "total", got, sizeof got);
    ck_assert_str_eq(got, "step 1, micro 0: backward of h.1");
    ck_assert_int_eq(testutil_train_micro(dir, "z3", 2,
                                          "--set run.steps=2 --set zero_optimization.stage=3 "
                                          "--memory-summary"),
                     0);
    log = testutil_slurp(testutil_path_in(dir, "z3.log"));
    summary_phase(log, 1, "gathered_params", got, sizeof got);
    ck_assert_msg(strncmp(got, "step 1, micro 0: forward of ", 28) == 0, "%s", got);
}
END_TEST

START_TEST(chosen_step_starts_from_a_snapshot)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("memtimeline-step"));
    char tl[4096];
    snprintf(tl, sizeof tl, "%s", testutil_path_in(dir, "step2.jsonl"));
    ck_assert_int_eq(testutil_train_micro(dir, "step2", 2,
                                          testutil_fmt("--set run.steps=3 --set "
                                                       "zero_optimization.stage=2 "
                                                       "--memory-timeline %s "
                                                       "--memory-timeline-steps 2",
                                                       tl)),
                     0);
    struct timeline t;
    read_timeline(tl, &t);
    for (int r = 0; r < 2; r++) {
        int first = -1;
        for (int i = 0; i < t.n && first < 0; i++)
            first = t.ev[i].rank == r ? i : -1;
        ck_assert_int_ge(first, 0);
        ck_assert_str_eq(t.ev[first].phase, "snapshot");
        ck_assert_int_eq(t.ev[first].bytes, 0);
        ck_assert_int_gt(t.ev[first].total, 0);
        (void)check_rank(&t, r, NULL, 0, "step 2");
    }
    for (int i = 0; i < t.n; i++)
        ck_assert_int_eq(t.ev[i].step, 2);
    free(t.ev);
}
END_TEST

START_TEST(bad_steps_are_refused)
{
    static const char *const bad[] = {"x", "3-1", "-2", "2-", "1-2x"};
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("memtimeline-bad"));
    for (int i = 0; i < 5; i++) {
        const char *name = testutil_fmt("bad%d", i);
        char n[32];
        snprintf(n, sizeof n, "%s", name);
        const int rc = testutil_train_micro(
            dir, n, 1,
            testutil_fmt("--memory-timeline %s/t.jsonl --memory-timeline-steps %s", dir, bad[i]));
        ck_assert_int_eq(rc, 2);
        const char *log = testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", n)));
        ck_assert_msg(strstr(log, testutil_fmt("--memory-timeline-steps '%s'", bad[i])) != NULL,
                      "%s", log);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("memtimeline");
    TCase *tc = tcase_create("stages");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, stages_match_report_and_summary);
    suite_add_tcase(s, tc);
    tc = tcase_create("layouts");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, layouts_and_dry_run_match);
    suite_add_tcase(s, tc);
    tc = tcase_create("summary");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, summary_names_known_peaks);
    tcase_add_test(tc, chosen_step_starts_from_a_snapshot);
    tcase_add_test(tc, bad_steps_are_refused);
    suite_add_tcase(s, tc);
    return testutil_run_suite(s, 0);
}
