/* report/memory_report.c — see memory_report.h.
 *
 * The gather sends each rank's row as a flat array of uint64 (the category
 * peaks, the total peak, the resident peak) with one comm_gather, so the
 * struct's layout and padding never cross the wire. Rank 0 allocates the
 * rows before the gather and broadcasts whether it could: a rank 0 that
 * returned early would leave the others blocked or out of step in the next
 * collective, so every rank leaves with the same status.
 *
 * The table keeps to about 120 columns (hpZ's secondary column comes only
 * with hpZ): ten byte columns of ten characters
 * ("999.99 MiB" is the widest a value gets, since a unit gives way to the
 * next at 1000 of it rather than 1024) with the category names shortened.
 */
#include "memory_report.h"

#include "../common/atomic_file.h"
#include "../common/size.h"
#include "../shard/shard.h"

#include <math.h>
#include <stdlib.h>

/* peaks, total_peak, rss_peak, tp, pp, dp, expected model states, the
 * device's five, the offload host peak, the NVMe file's bytes, the four
 * parts of the predicted RSS */
#define ROW_WORDS (LEDGER_CATEGORY_COUNT + 22)

/* Column headers; a category missing here falls back to its full name. */
static const char *const short_names[] = {
    [LEDGER_PARAMS] = "params",
    [LEDGER_GRADS] = "grads",
    [LEDGER_MASTER_PARAMS] = "master",
    [LEDGER_OPTIMIZER_STATES] = "optim",
    [LEDGER_GATHERED_PARAMS] = "gathered",
    [LEDGER_SECONDARY_PARAMS] = "secondary",
    [LEDGER_ACTIVATIONS] = "activ",
    [LEDGER_COMM_BUFFERS] = "comm",
    [LEDGER_WORKSPACE] = "workspace",
    [LEDGER_LOAD] = "load",
};
_Static_assert(sizeof short_names / sizeof short_names[0] == LEDGER_CATEGORY_COUNT,
               "one column header per ledger category");

/* The categories that make up the paper's model states, in bpp order. */
static const enum ledger_category model_state_categories[4] = {
    LEDGER_PARAMS, LEDGER_GRADS, LEDGER_MASTER_PARAMS, LEDGER_OPTIMIZER_STATES};

/* ---- gathering ---- */

static void pack_row(const struct ledger *l, const struct memory_rank_row *place,
                     uint64_t row[ROW_WORDS])
{
    for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++)
        row[c] = l->peak[c];
    uint64_t *at = row + LEDGER_CATEGORY_COUNT;
    at[0] = l->total_peak;
    at[1] = ledger_rss_peak();
    at[2] = (uint64_t)place->tp;
    at[3] = (uint64_t)place->pp;
    at[4] = (uint64_t)place->dp;
    at[5] = place->expected_model_states;
    at[6] = place->device_reserved;
    at[7] = place->device_used_peak;
    at[8] = place->device_largest_free;
    at[9] = place->driver_free;
    at[10] = place->driver_total;
    at[11] = place->offload_host_peak;
    at[12] = place->nvme_file_bytes;
    at[13] = place->rss.baseline;
    at[14] = place->rss.runtime;
    at[15] = place->rss.counted;
    at[16] = place->rss.data;
    at[17] = place->rss_loaded.baseline;
    at[18] = place->rss_loaded.runtime;
    at[19] = place->rss_loaded.counted;
    at[20] = place->rss_loaded.data;
    at[21] = place->load_rss_peak;
}

static void unpack_row(const uint64_t row[ROW_WORDS], int rank, struct memory_rank_row *out)
{
    out->rank = rank;
    for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++)
        out->peak[c] = row[c];
    const uint64_t *at = row + LEDGER_CATEGORY_COUNT;
    out->total_peak = at[0];
    out->rss_peak = at[1];
    out->tp = (int)at[2];
    out->pp = (int)at[3];
    out->dp = (int)at[4];
    out->expected_model_states = at[5];
    out->device_reserved = at[6];
    out->device_used_peak = at[7];
    out->device_largest_free = at[8];
    out->driver_free = at[9];
    out->driver_total = at[10];
    out->offload_host_peak = at[11];
    out->nvme_file_bytes = at[12];
    out->rss = (struct rss_parts){at[13], at[14], at[15], at[16]};
    out->rss_loaded = (struct rss_parts){at[17], at[18], at[19], at[20]};
    out->load_rss_peak = at[21];
}

zt_status memory_report_gather(struct comm *c, const struct ledger *mine, struct memory_report *r)
{
    const struct memory_rank_row place = {.dp = comm_rank(c)};
    return memory_report_gather_placed(c, mine, &place, r);
}

zt_status memory_report_gather_placed(struct comm *c, const struct ledger *mine,
                                      const struct memory_rank_row *place, struct memory_report *r)
{
    c = comm_host(c); /* the rows are host memory */
    const int rank = comm_rank(c), size = comm_size(c);
    r->world_size = size;
    r->ranks = NULL;
    uint64_t row[ROW_WORDS], *all = NULL;
    pack_row(mine, place, row);
    int32_t ok = 1;
    if (rank == 0) {
        all = malloc((size_t)size * sizeof row);
        r->ranks = calloc((size_t)size, sizeof *r->ranks);
        ok = all && r->ranks;
    }
    zt_status st = comm_broadcast(c, &ok, 1, ZT_I32, 0);
    if (st == ZT_OK && ok)
        st = comm_gather(c, row, all, ROW_WORDS, ZT_I64, 0);
    for (int i = 0; st == ZT_OK && ok && rank == 0 && i < size; i++)
        unpack_row(all + (size_t)i * ROW_WORDS, i, &r->ranks[i]);
    free(all);
    if (st == ZT_OK && ok)
        return ZT_OK;
    memory_report_free(r);
    ZT_TRY(st);
    return zt_error_set(ZT_ERR_NOMEM, "memory report: rank 0 cannot allocate %d rows", size);
}

/* ---- the paper's model states ---- */

uint64_t memory_expected_model_states(int stage, int world, uint64_t n_params, uint64_t n_trainable,
                                      const double bpp[4], uint64_t replicated)
{
    /* Which of p, g, m, o the stage divides among the ranks: the master
     * copy goes with the optimizer states, as in the paper's K. */
    const struct shard_policy *pol = shard_policy_of(stage);
    ZT_ASSERT(pol != NULL);
    ZT_ASSERT(world >= 1);
    const int partitioned[4] = {pol->shard_params, pol->shard_grads, pol->shard_states,
                                pol->shard_states};
    /* Parameters count over all of Ψ, the rest over the trainable part;
     * the replicated optimizer bytes are in bpp[3] as an average and every
     * rank keeps them whole. */
    double whole = 0, split = 0;
    for (int k = 0; k < 4; k++) {
        const double bytes = bpp[k] * (double)(k == 0 ? n_params : n_trainable);
        if (partitioned[k])
            split += bytes;
        else
            whole += bytes;
    }
    if (partitioned[3]) {
        whole += (double)replicated;
        split -= (double)replicated;
    }
    return (uint64_t)floor(whole + split / world + 0.5);
}

/* ---- printing ---- */

static const char *column_name(int c)
{
    return short_names[c] ? short_names[c] : ledger_category_name((enum ledger_category)c);
}

/* The rank column: "rank", or "rank (tp,pp,dp)" under a layout. */
static int label_width(const struct memory_report *r)
{
    return r->layout ? 16 : 8;
}

/* Which categories get a column: all but hpZ's secondary copy and the
 * load staging, which only a run that has them shows (so the table keeps
 * its width without). */
static void shown_columns(const struct memory_report *r, int shown[LEDGER_CATEGORY_COUNT])
{
    for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++) {
        shown[c] = (c != LEDGER_SECONDARY_PARAMS && c != LEDGER_LOAD) || r->baseline[c] > 0;
        for (int i = 0; i < r->world_size && !shown[c]; i++)
            shown[c] = r->ranks[i].peak[c] > 0;
    }
}

static void print_header(FILE *f, int width, const int shown[LEDGER_CATEGORY_COUNT])
{
    fprintf(f, "%*s", width, width > 8 ? "rank (tp,pp,dp)" : "rank");
    for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++)
        if (shown[c])
            fprintf(f, " %10s", column_name(c));
    fprintf(f, " %10s %10s %5s\n", "total", "rss", "ratio");
}

/* One table row; rss NULL prints "-" (a plan has no resident memory). */
static void print_row(FILE *f, int width, const char *label,
                      const uint64_t peak[LEDGER_CATEGORY_COUNT], uint64_t total,
                      const uint64_t *rss, uint64_t baseline_total,
                      const int shown[LEDGER_CATEGORY_COUNT])
{
    char b[32];
    fprintf(f, "%*s", width, label);
    for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++) {
        zt_size_format(peak[c], b, sizeof b);
        if (shown[c])
            fprintf(f, " %10s", b);
    }
    zt_size_format(total, b, sizeof b);
    fprintf(f, " %10s", b);
    if (rss)
        zt_size_format(*rss, b, sizeof b);
    fprintf(f, " %10s", rss ? b : "-");
    if (baseline_total)
        fprintf(f, " %5.2f\n", (double)total / (double)baseline_total);
    else
        fprintf(f, " %5s\n", "-");
}

static uint64_t model_states_of(const struct memory_rank_row *row)
{
    uint64_t sum = 0;
    for (int k = 0; k < 4; k++)
        sum += row->peak[model_state_categories[k]];
    return sum;
}

/* The ranks the model states are sharded over (struct memory_report). */
static int shard_ranks(const struct memory_report *r)
{
    return r->shard_ranks > 0 ? r->shard_ranks : r->world_size;
}

static void format_difference(uint64_t measured, uint64_t expected, char *buf, size_t n)
{
    if (expected == 0)
        snprintf(buf, n, "n/a");
    else
        snprintf(buf, n, "%+.2f%%",
                 100.0 * ((double)measured - (double)expected) / (double)expected);
}

static void print_model_states(const struct memory_report *r, FILE *f)
{
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < r->world_size; i++) {
        uint64_t m = model_states_of(&r->ranks[i]);
        lo = m < lo ? m : lo;
        hi = m > hi ? m : hi;
    }
    if (r->world_size < 1)
        lo = 0;
    char a[32], b[32], e[32], da[32], db[32];
    zt_size_format(lo, a, sizeof a);
    zt_size_format(hi, b, sizeof b);
    zt_size_format(r->expected_model_states, e, sizeof e);
    format_difference(lo, r->expected_model_states, da, sizeof da);
    format_difference(hi, r->expected_model_states, db, sizeof db);
    const double *p = r->bytes_per_param;
    fprintf(f, "model states per rank (params+grads+master+optim peaks): measured %s .. %s\n", a,
            b);
    if (!r->layout) {
        const int n = shard_ranks(r);
        fprintf(f, "  expected for stage %d, N = %d%s, %g+%g+%g+%g bytes per parameter: %s\n",
                r->stage, n, n != r->world_size ? " (one shard group)" : "", p[0], p[1], p[2], p[3],
                e);
        fprintf(f, "  difference %s .. %s (shard padding explains a small excess)\n", da, db);
    } else {
        fprintf(f,
                "  expected for stage %d over each rank's data-parallel group and pipeline "
                "stage, %g+%g+%g+%g bytes per parameter:\n",
                r->stage, p[0], p[1], p[2], p[3]);
    }
    /* Pipeline stages hold different parts of the model: each rank
     * against what its own stage's parameters need. */
    for (int i = 0; i < r->world_size && r->layout; i++) {
        const struct memory_rank_row *row = &r->ranks[i];
        zt_size_format(model_states_of(row), a, sizeof a);
        zt_size_format(row->expected_model_states, e, sizeof e);
        format_difference(model_states_of(row), row->expected_model_states, da, sizeof da);
        fprintf(f, "  rank %d (tp %d, pp %d, dp %d): measured %s, expected %s for its stage, %s\n",
                row->rank, row->tp, row->pp, row->dp, a, e, da);
    }
    if (r->base4_numel == 0)
        return;
    char q[32];
    zt_size_format(r->base4_bytes, q, sizeof q);
    fprintf(f,
            "  4-bit base: %llu parameters, codes and scales %s per rank, %.4f bytes per "
            "parameter (in the params column)\n",
            (unsigned long long)r->base4_numel, q,
            (double)r->base4_bytes /
                ((double)r->base4_numel / (r->stage == 3 ? (double)shard_ranks(r) : 1.0)));
}

/* NVMe offload: the state files, which no column counts. */
static void print_nvme(const struct memory_report *r, FILE *f)
{
    uint64_t lo = UINT64_MAX, hi = 0, all = 0;
    for (int i = 0; i < r->world_size; i++) {
        const uint64_t b = r->ranks[i].nvme_file_bytes;
        lo = b < lo ? b : lo;
        hi = b > hi ? b : hi;
        all += b;
    }
    if (hi == 0)
        return;
    char a[32], b[32], t[32];
    zt_size_format(lo, a, sizeof a);
    zt_size_format(hi, b, sizeof b);
    zt_size_format(all, t, sizeof t);
    fprintf(f,
            "nvme %s%s%s per rank (%s in all) in %s: the fp32 master and optimizer states on "
            "disk; the master and optim columns are the window they stream through\n",
            a, lo == hi ? "" : " .. ", lo == hi ? "" : b, t, r->nvme_path ? r->nvme_path : "?");
}

/* One rank's predicted RSS by part, against `measured` in a run. */
static void print_rss_row(FILE *f, const struct memory_report *r, int rank, const char *when,
                          const struct rss_parts *p, uint64_t measured)
{
    char parts[200], m[32];
    rss_parts_format(p, parts, sizeof parts);
    zt_size_format(measured, m, sizeof m);
    fprintf(f, "  rank %d%s: %s", rank, when, parts);
    if (!r->planned && measured > 0)
        fprintf(f, "; measured %s, predicted / measured %.3f", m,
                (double)rss_parts_total(p) / (double)measured);
    fputc('\n', f);
}

/* The predicted peak RSS of each rank by part, against the measured one
 * in a run; then the same once model.init_from was read, where it was. */
static void print_rss(const struct memory_report *r, FILE *f)
{
    fprintf(f,
            "peak RSS per rank, predicted = baseline + runtime + counted + data "
            "(report/rss_model.h)%s\n",
            r->planned ? "" : ", against the measured");
    for (int i = 0; i < r->world_size; i++)
        print_rss_row(f, r, r->ranks[i].rank, "", &r->ranks[i].rss, r->ranks[i].rss_peak);
    for (int i = 0; i < r->world_size; i++)
        if (rss_parts_total(&r->ranks[i].rss_loaded) > 0)
            print_rss_row(f, r, r->ranks[i].rank, " once model.init_from was read",
                          &r->ranks[i].rss_loaded, r->ranks[i].load_rss_peak);
}

/* On a GPU: each rank's caching pool against the card, in MiB. */
static void print_device_rows(const struct memory_report *r, FILE *f)
{
    const double mib = 1024.0 * 1024.0;
    fprintf(f, "device memory (MiB): reserved by the pool, peak in use, largest free block, "
               "free / total on the card\n");
    for (int i = 0; i < r->world_size; i++) {
        const struct memory_rank_row *row = &r->ranks[i];
        fprintf(f,
                "  rank %d: reserved %.1f, peak used %.1f, largest free %.1f, card %.1f / %.1f\n",
                row->rank, (double)row->device_reserved / mib, (double)row->device_used_peak / mib,
                (double)row->device_largest_free / mib, (double)row->driver_free / mib,
                (double)row->driver_total / mib);
    }
}

void memory_report_print(const struct memory_report *r, FILE *f)
{
    if (!r->ranks)
        return;
    char trains[64] = "";
    if (r->n_trainable > 0 && r->n_trainable < r->n_params)
        snprintf(trains, sizeof trains, " (%llu trainable)", (unsigned long long)r->n_trainable);
    fprintf(f,
            "memory per rank: ZeRO stage %d, %d ranks, %llu parameters%s; ratio = total / "
            "baseline total\n",
            r->stage, r->world_size, (unsigned long long)r->n_params, trains);
    int shown[LEDGER_CATEGORY_COUNT];
    shown_columns(r, shown);
    print_header(f, label_width(r), shown);
    for (int i = 0; i < r->world_size; i++) {
        const struct memory_rank_row *row = &r->ranks[i];
        char label[40];
        if (r->layout)
            snprintf(label, sizeof label, "%d (%d,%d,%d)", row->rank, row->tp, row->pp, row->dp);
        else
            snprintf(label, sizeof label, "%d", row->rank);
        print_row(f, label_width(r), label, row->peak, row->total_peak, &row->rss_peak,
                  r->baseline_total, shown);
    }
    print_row(f, label_width(r), "baseline", r->baseline, r->baseline_total, NULL,
              r->baseline_total, shown);
    print_model_states(r, f);
    print_nvme(r, f);
    print_rss(r, f);
    if (r->device_memory)
        print_device_rows(r, f);
}

/* ---- JSON ---- */

static void write_categories(FILE *f, const uint64_t bytes[LEDGER_CATEGORY_COUNT])
{
    for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++)
        fprintf(f, "%s\"%s\": %llu", c ? ", " : "", ledger_category_name((enum ledger_category)c),
                (unsigned long long)bytes[c]);
}

static void write_body(FILE *f, const struct memory_report *r)
{
    fprintf(f, "{\"world_size\": %d, \"stage\": %d, \"n_params\": %llu, \"bytes_per_param\": {",
            r->world_size, r->stage, (unsigned long long)r->n_params);
    for (int k = 0; k < 4; k++)
        fprintf(f, "%s\"%s\": %.17g", k ? ", " : "",
                ledger_category_name(model_state_categories[k]), r->bytes_per_param[k]);
    fprintf(f, "}, \"base4_numel\": %llu, \"base4_bytes\": %llu, \"baseline\": {",
            (unsigned long long)r->base4_numel, (unsigned long long)r->base4_bytes);
    write_categories(f, r->baseline);
    fprintf(f, ", \"total\": %llu}, \"expected_model_states\": %llu, \"ranks\": [",
            (unsigned long long)r->baseline_total, (unsigned long long)r->expected_model_states);
    for (int i = 0; i < r->world_size; i++) {
        const struct memory_rank_row *row = &r->ranks[i];
        fprintf(f, "%s{\"rank\": %d, \"tp\": %d, \"pp\": %d, \"dp\": %d, \"peak\": {",
                i ? ", " : "", row->rank, row->tp, row->pp, row->dp);
        write_categories(f, row->peak);
        fprintf(f, "}, \"total_peak\": %llu, \"rss_peak\": %llu, \"expected_model_states\": %llu",
                (unsigned long long)row->total_peak, (unsigned long long)row->rss_peak,
                (unsigned long long)row->expected_model_states);
        fprintf(f,
                ", \"device\": {\"reserved\": %llu, \"used_peak\": %llu, \"largest_free\": "
                "%llu, \"driver_free\": %llu, \"driver_total\": %llu, \"offload_host_peak\": "
                "%llu}, \"nvme_file_bytes\": %llu",
                (unsigned long long)row->device_reserved, (unsigned long long)row->device_used_peak,
                (unsigned long long)row->device_largest_free, (unsigned long long)row->driver_free,
                (unsigned long long)row->driver_total, (unsigned long long)row->offload_host_peak,
                (unsigned long long)row->nvme_file_bytes);
        fputs(", \"rss_predicted\": ", f);
        rss_parts_write_json(&row->rss, f);
        if (rss_parts_total(&row->rss_loaded) > 0) {
            fprintf(f, ", \"load_rss_peak\": %llu, \"rss_predicted_loaded\": ",
                    (unsigned long long)row->load_rss_peak);
            rss_parts_write_json(&row->rss_loaded, f);
        }
        fputc('}', f);
    }
    fprintf(f, "]}\n");
}

zt_status memory_report_write_json(const struct memory_report *r, const char *path)
{
    ZT_ASSERT(r->ranks != NULL || r->world_size == 0);
    for (int k = 0; k < 4; k++)
        ZT_ASSERT(isfinite(r->bytes_per_param[k])); /* JSON has no inf or nan */
    struct atomic_file out;
    ZT_TRY(atomic_file_open(path, &out));
    write_body(out.f, r); /* a failed fprintf shows at commit, through ferror */
    ZT_TRY(atomic_file_commit(&out));
    return ZT_OK;
}

void memory_report_free(struct memory_report *r)
{
    free(r->ranks);
    r->ranks = NULL;
}
