/* report/memory_timeline.c — see memory_timeline.h. */
#include "memory_timeline.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/atomic_file.h"
#include "../common/clock.h"

/* An event as the words it travels in (int64 each), then `current`. */
enum {
    EV_TIME_NS,
    EV_KIND,
    EV_UNIT,
    EV_STEP,
    EV_MICRO,
    EV_CATEGORY, /* -1: a snapshot */
    EV_BYTES,
    EV_CURRENT,
    EV_WORDS = EV_CURRENT + LEDGER_CATEGORY_COUNT
};

struct memory_timeline {
    long first, last;
    double t0;
    int64_t *words; /* n events of EV_WORDS */
    size_t n, cap;
    int started, truncated;
    struct ledger_sink sink;
};

zt_status memory_timeline_parse_steps(const char *spec, long *first, long *last)
{
    char *end;
    errno = 0;
    *first = strtol(spec, &end, 10);
    *last = *first;
    if (end != spec && *end == '-') {
        const char *rest = end + 1;
        *last = strtol(rest, &end, 10);
        if (end == rest)
            end = (char *)spec; /* "3-" */
    }
    if (end == spec || *end != '\0' || errno || *first < 0 || *last < *first)
        return zt_error_set(ZT_ERR_USAGE,
                            "--memory-timeline-steps '%s': expected FIRST or FIRST-LAST, steps "
                            "counted from 1 (0 is the setup before the first step), FIRST <= LAST",
                            spec);
    return ZT_OK;
}

static int64_t *push(struct memory_timeline *t)
{
    if (t->n == (size_t)MEMORY_TIMELINE_MAX_EVENTS) {
        t->truncated = 1;
        return NULL;
    }
    if (t->n == t->cap) {
        const size_t cap = t->cap ? 2 * t->cap : 1024;
        int64_t *w = realloc(t->words, cap * EV_WORDS * sizeof *w);
        if (!w) {
            t->truncated = 1;
            return NULL;
        }
        t->words = w;
        t->cap = cap;
    }
    return t->words + t->n++ * EV_WORDS;
}

static void fill(struct memory_timeline *t, int64_t *ev, const struct ledger *l, int category,
                 int64_t bytes)
{
    ev[EV_TIME_NS] = (int64_t)((zt_now_seconds() - t->t0) * 1e9);
    ev[EV_KIND] = l->phase.kind;
    ev[EV_UNIT] = l->phase.unit;
    ev[EV_STEP] = l->phase.step;
    ev[EV_MICRO] = l->phase.micro_step;
    ev[EV_CATEGORY] = category;
    ev[EV_BYTES] = bytes;
    for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++)
        ev[EV_CURRENT + c] = (int64_t)l->current[c];
}

/* The first recorded event, when memory was held before it: the state
 * before, so that the running sums start right. */
static void snapshot_before(struct memory_timeline *t, const struct ledger *l,
                            enum ledger_category c, int64_t bytes)
{
    if ((int64_t)l->total_current - bytes == 0)
        return;
    int64_t *ev = push(t);
    if (!ev)
        return;
    fill(t, ev, l, -1, 0);
    ev[EV_CURRENT + c] -= bytes;
}

static void record(void *ctx, const struct ledger *l, enum ledger_category c, int64_t bytes)
{
    struct memory_timeline *t = ctx;
    if (t->truncated || l->phase.step < t->first || l->phase.step > t->last)
        return;
    if (!t->started) {
        t->started = 1;
        snapshot_before(t, l, c, bytes);
    }
    int64_t *ev = push(t);
    if (ev)
        fill(t, ev, l, (int)c, bytes);
}

zt_status memory_timeline_create(long first, long last, struct memory_timeline **out)
{
    ZT_ASSERT(first >= 0 && last >= first);
    struct memory_timeline *t = calloc(1, sizeof *t);
    if (!t)
        return zt_error_set(ZT_ERR_NOMEM, "memory timeline: out of memory");
    t->first = first;
    t->last = last;
    t->sink = (struct ledger_sink){.record = record, .ctx = t};
    *out = t;
    return ZT_OK;
}

void memory_timeline_attach(struct memory_timeline *t, struct ledger *l)
{
    t->t0 = zt_now_seconds();
    l->sink = &t->sink;
}

void memory_timeline_destroy(struct memory_timeline *t)
{
    if (!t)
        return;
    free(t->words);
    free(t);
}

/* ---- writing ---------------------------------------------------------------- */

static void write_event(FILE *f, int rank, size_t seq, const int64_t *ev,
                        const struct param_table *names)
{
    char unit[160] = "null";
    const int u = (int)ev[EV_UNIT];
    if (u >= 0 && u < names->n_units) {
        char label[128];
        param_table_unit_label(names, u, label, sizeof label);
        snprintf(unit, sizeof unit, "\"%s\"", label);
    }
    const int c = (int)ev[EV_CATEGORY];
    fprintf(f,
            "{\"rank\": %d, \"seq\": %zu, \"time\": %.6f, \"step\": %lld, \"micro_step\": %lld, "
            "\"phase\": \"%s\", \"unit\": %d, \"unit_name\": %s, \"category\": %s%s%s, "
            "\"bytes\": %lld, \"current\": {",
            rank, seq, 1e-9 * (double)ev[EV_TIME_NS], (long long)ev[EV_STEP],
            (long long)ev[EV_MICRO],
            c < 0 ? "snapshot" : ledger_phase_name((enum ledger_phase_kind)ev[EV_KIND]), u, unit,
            c < 0 ? "" : "\"", c < 0 ? "null" : ledger_category_name((enum ledger_category)c),
            c < 0 ? "" : "\"", (long long)ev[EV_BYTES]);
    int64_t total = 0;
    for (int k = 0; k < LEDGER_CATEGORY_COUNT; k++) {
        fprintf(f, "%s\"%s\": %lld", k ? ", " : "", ledger_category_name((enum ledger_category)k),
                (long long)ev[EV_CURRENT + k]);
        total += ev[EV_CURRENT + k];
    }
    fprintf(f, "}, \"total\": %lld}\n", (long long)total);
}

/* Rank 0: every rank's events (all: max_n events per rank; rank r's
 * count and truncation at tally[2r], tally[2r + 1]) into path. */
static zt_status write_file(const char *path, const int64_t *all, const int64_t *tally,
                            int64_t max_n, int size, const struct param_table *names)
{
    struct atomic_file out;
    ZT_TRY(atomic_file_open(path, &out));
    for (int r = 0; r < size; r++) {
        const int64_t *rank_events = all + (size_t)r * (size_t)max_n * EV_WORDS;
        for (int64_t i = 0; i < tally[2 * r]; i++)
            write_event(out.f, r, (size_t)i, rank_events + (size_t)i * EV_WORDS, names);
        if (tally[2 * r + 1])
            fprintf(out.f, "{\"rank\": %d, \"truncated\": true, \"events\": %lld}\n", r,
                    (long long)tally[2 * r]);
    }
    return atomic_file_commit(&out);
}

zt_status memory_timeline_write(struct memory_timeline *t, struct ledger *l, struct comm *c,
                                const struct param_table *names, const char *path)
{
    c = comm_host(c); /* the rows are host memory */
    if (l->sink == &t->sink)
        l->sink = NULL;
    const int rank = comm_rank(c), size = comm_size(c);
    const int64_t mine[2] = {(int64_t)t->n, t->truncated};
    int64_t *both = calloc(2 * (size_t)size, sizeof *both), max_n = 0;
    int32_t ok = both != NULL;
    ZT_TRY(comm_allreduce(c, &ok, 1, ZT_I32, COMM_OP_MIN));
    if (!ok) {
        free(both);
        return zt_error_set(ZT_ERR_NOMEM, "memory timeline: out of memory");
    }
    /* Everyone learns the longest timeline: the gather moves equal shares. */
    zt_status st = comm_allgather(c, mine, both, 2, ZT_I64);
    for (int r = 0; st == ZT_OK && r < size; r++)
        max_n = both[2 * r] > max_n ? both[2 * r] : max_n;
    const size_t share = (size_t)max_n * EV_WORDS;
    int64_t *padded = NULL, *all = NULL;
    if (st == ZT_OK && share > 0) {
        padded = calloc(share, sizeof *padded);
        if (rank == 0)
            all = malloc((size_t)size * share * sizeof *all);
        ok = padded && (rank != 0 || all);
        st = comm_allreduce(c, &ok, 1, ZT_I32, COMM_OP_MIN);
        if (st == ZT_OK && !ok)
            st = zt_error_set(ZT_ERR_NOMEM, "memory timeline: out of memory gathering %lld events",
                              (long long)max_n);
        if (st == ZT_OK) {
            if (t->n)
                memcpy(padded, t->words, t->n * EV_WORDS * sizeof *padded);
            st = comm_gather(c, padded, all, share, ZT_I64, 0);
        }
    }
    if (st == ZT_OK && rank == 0)
        st = write_file(path, all, both, max_n, size, names);
    free(padded);
    free(all);
    free(both);
    return st;
}
