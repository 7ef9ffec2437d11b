/* report/memory_summary.c — see memory_summary.h. */
#include "memory_summary.h"

#include <stdlib.h>
#include <string.h>

#include "memory_report.h"
#include "../common/size.h"

/* A row (a category, or the total last) as the words it travels in. */
enum {
    ROW_CURRENT,
    ROW_PEAK,
    ROW_ALLOCATED,
    ROW_FREED,
    ROW_ALLOCS,
    ROW_FREES,
    ROW_KIND,
    ROW_UNIT,
    ROW_STEP,
    ROW_MICRO,
    ROW_WORDS
};
enum { PLACE_TP, PLACE_PP, PLACE_DP, PLACE_WORDS };
#define RANK_WORDS (PLACE_WORDS + (LEDGER_CATEGORY_COUNT + 1) * ROW_WORDS)

#define TABLE_WIDTH 143

void memory_summary_phase(const struct ledger_phase *p, const struct param_table *names, char *buf,
                          size_t n)
{
    const char *kind = ledger_phase_name(p->kind);
    char unit[136] = "";
    if (p->unit >= 0 && p->unit < names->n_units) {
        char label[128];
        param_table_unit_label(names, p->unit, label, sizeof label);
        snprintf(unit, sizeof unit, " of %s", label);
    }
    if (p->step == 0)
        snprintf(buf, n, "%s%s", kind, unit);
    else if (p->kind == LEDGER_PHASE_FORWARD || p->kind == LEDGER_PHASE_BACKWARD ||
             (p->kind == LEDGER_PHASE_REDUCTION && p->unit >= 0))
        snprintf(buf, n, "step %ld, micro %d: %s%s", p->step, p->micro_step, kind, unit);
    else
        snprintf(buf, n, "step %ld: %s%s", p->step, kind, unit);
}

static void pack_row(int64_t *w, uint64_t current, uint64_t peak, uint64_t allocated,
                     uint64_t freed, uint64_t allocs, uint64_t frees, const struct ledger_phase *p)
{
    w[ROW_CURRENT] = (int64_t)current;
    w[ROW_PEAK] = (int64_t)peak;
    w[ROW_ALLOCATED] = (int64_t)allocated;
    w[ROW_FREED] = (int64_t)freed;
    w[ROW_ALLOCS] = (int64_t)allocs;
    w[ROW_FREES] = (int64_t)frees;
    w[ROW_KIND] = p->kind;
    w[ROW_UNIT] = p->unit;
    w[ROW_STEP] = p->step;
    w[ROW_MICRO] = p->micro_step;
}

static void pack_rank(const struct ledger *l, const struct memory_summary_place *place, int64_t *w)
{
    w[PLACE_TP] = place->tp;
    w[PLACE_PP] = place->pp;
    w[PLACE_DP] = place->dp;
    uint64_t sums[4] = {0, 0, 0, 0};
    int64_t *rows = w + PLACE_WORDS;
    for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++) {
        pack_row(rows + c * ROW_WORDS, l->current[c], l->peak[c], l->allocated[c], l->freed[c],
                 l->allocs[c], l->frees[c], &l->peak_phase[c]);
        sums[0] += l->allocated[c];
        sums[1] += l->freed[c];
        sums[2] += l->allocs[c];
        sums[3] += l->frees[c];
    }
    pack_row(rows + LEDGER_CATEGORY_COUNT * ROW_WORDS, l->total_current, l->total_peak, sums[0],
             sums[1], sums[2], sums[3], &l->total_peak_phase);
}

static void rule(FILE *f, char c)
{
    fputc('|', f);
    for (int i = 0; i < TABLE_WIDTH - 2; i++)
        fputc(c, f);
    fputs("|\n", f);
}

static void print_row(FILE *f, const char *name, const int64_t *w, const struct param_table *names)
{
    char b[4][32], phase[160];
    for (int k = 0; k < 4; k++)
        zt_size_format((uint64_t)w[ROW_CURRENT + k], b[k], sizeof b[k]);
    const struct ledger_phase p = {.kind = (enum ledger_phase_kind)w[ROW_KIND],
                                   .unit = (int)w[ROW_UNIT],
                                   .step = (long)w[ROW_STEP],
                                   .micro_step = (int)w[ROW_MICRO]};
    if (w[ROW_PEAK] > 0)
        memory_summary_phase(&p, names, phase, sizeof phase);
    else
        snprintf(phase, sizeof phase, "-");
    fprintf(f, "| %-16s | %11s | %11s | %11s | %11s | %7lld | %7lld | %-44.44s |\n", name, b[0],
            b[1], b[2], b[3], (long long)w[ROW_ALLOCS], (long long)w[ROW_FREES], phase);
}

static void print_rank(FILE *f, int rank, int size, const int64_t *w,
                       const struct memory_summary_place *place, int stage,
                       const struct param_table *names)
{
    char title[160], where[64] = "";
    if (place->layout)
        snprintf(where, sizeof where, " (tensor %lld, pipeline %lld, data %lld)",
                 (long long)w[PLACE_TP], (long long)w[PLACE_PP], (long long)w[PLACE_DP]);
    snprintf(title, sizeof title, "zerotrain memory summary, rank %d of %d%s, ZeRO stage %d", rank,
             size, where, stage);
    rule(f, '=');
    fprintf(f, "| %-*s |\n", TABLE_WIDTH - 4, title);
    rule(f, '-');
    fprintf(f, "| %-16s | %11s | %11s | %11s | %11s | %7s | %7s | %-44s |\n", "category", "current",
            "peak", "allocated", "freed", "allocs", "frees", "peak first reached in");
    rule(f, '-');
    const int64_t *rows = w + PLACE_WORDS;
    for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++)
        print_row(f, ledger_category_name((enum ledger_category)c), rows + c * ROW_WORDS, names);
    rule(f, '-');
    print_row(f, "total", rows + LEDGER_CATEGORY_COUNT * ROW_WORDS, names);
    rule(f, '=');
}

zt_status memory_summary_print(struct comm *c, const struct ledger *mine,
                               const struct memory_summary_place *place, int stage,
                               const struct param_table *names, FILE *f)
{
    c = comm_host(c); /* the rows are host memory */
    const int rank = comm_rank(c), size = comm_size(c);
    int64_t row[RANK_WORDS], *all = NULL;
    pack_rank(mine, place, row);
    int32_t ok = 1;
    if (rank == 0) {
        all = malloc((size_t)size * sizeof row);
        ok = all != NULL;
    }
    zt_status st = comm_broadcast(c, &ok, 1, ZT_I32, 0);
    if (st == ZT_OK && !ok)
        st = zt_error_set(ZT_ERR_NOMEM, "memory summary: rank 0 cannot allocate %d rows", size);
    if (st == ZT_OK)
        st = comm_gather(c, row, all, RANK_WORDS, ZT_I64, 0);
    for (int r = 0; st == ZT_OK && rank == 0 && r < size; r++)
        print_rank(f, r, size, all + (size_t)r * RANK_WORDS, place, stage, names);
    if (rank == 0)
        fflush(f);
    free(all);
    return st;
}
