/* formats/checkpoint_reader.c — see checkpoint_reader.h. */
#include "checkpoint_reader.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../worker/tensor_parallel.h"

/* Slice elements [at, at + n) are the whole model's [whole, whole + n). */
struct run {
    size_t whole, n, at;
};

struct runs {
    struct run *v;
    size_t n, cap;
    int failed; /* an allocation failed: the list is incomplete */
};

struct ckpt_reader {
    const char *step_dir;
    const struct ckpt_meta *meta;
    const struct param_table *whole;
    struct param_table *slices; /* meta->layout.tp slices of whole; NULL when tp is 1 */
    struct ckpt_shard **files;  /* meta->world entries, opened as first read */
    /* [rank * n_units + u]: where unit u starts in the rank's sections that
     * hold every stored unit, and in those holding only trained ones. */
    uint64_t *prefix, *trained_prefix;
    struct runs mine, old; /* scratch of ckpt_reader_read */
};

/* The old tensor-parallel rank t's table: its slice, or the whole model. */
static const struct param_table *old_table(const struct ckpt_reader *r, int t)
{
    return r->slices ? &r->slices[t] : r->whole;
}

static zt_status cut_slices(struct ckpt_reader *r)
{
    const int tp = r->meta->layout.tp;
    if (tp == 1 && r->meta->layout.vocab_padded == 0)
        return ZT_OK;
    r->slices = calloc((size_t)tp, sizeof *r->slices);
    if (!r->slices)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the checkpoint's slices");
    for (int t = 0; t < tp; t++) {
        const zt_status st =
            param_table_tp_slice(r->whole, tp, t, r->meta->layout.vocab_padded, &r->slices[t]);
        if (st != ZT_OK) {
            char why[1024];
            snprintf(why, sizeof why, "%s", zt_error_message());
            return zt_error_set(ZT_ERR_CHECKPOINT, "%s/meta.json: layout.tp %d: %s", r->step_dir,
                                tp, why);
        }
    }
    return ZT_OK;
}

/* meta.json's units must be the model's, cut as the model cuts. */
static zt_status check_units(const struct ckpt_reader *r)
{
    const struct ckpt_meta *m = r->meta;
    const struct param_table *cut = old_table(r, 0);
    if (m->n_units != r->whole->n_units)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s/meta.json: %d units, the model has %d",
                            r->step_dir, m->n_units, r->whole->n_units);
    for (int u = 0; u < m->n_units; u++) {
        const uint64_t slice = m->unit_slice[u], dp = (uint64_t)m->layout.dp;
        /* a piece index must name a file */
        if (m->unit_shard[u] < slice / dp + (slice % dp != 0))
            return zt_error_set(ZT_ERR_CHECKPOINT,
                                "%s/meta.json: units[%d].shard is %llu: %llu pieces of it do not "
                                "hold the unit's %llu elements",
                                r->step_dir, u, (unsigned long long)m->unit_shard[u],
                                (unsigned long long)dp, (unsigned long long)slice);
        if (m->unit_numel[u] != param_table_unit_size(r->whole, u) ||
            m->unit_slice[u] != param_table_unit_size(cut, u))
            return zt_error_set(ZT_ERR_CHECKPOINT,
                                "%s/meta.json: unit %d has %llu elements in slices of %llu, the "
                                "model's has %zu in slices of %zu over %d tensor-parallel ranks",
                                r->step_dir, u, (unsigned long long)m->unit_numel[u],
                                (unsigned long long)m->unit_slice[u],
                                param_table_unit_size(r->whole, u), param_table_unit_size(cut, u),
                                m->layout.tp);
    }
    return ZT_OK;
}

/* Where each unit starts in each old rank's sections. */
static void fill_prefixes(struct ckpt_reader *r)
{
    const struct ckpt_meta *m = r->meta;
    const size_t nu = (size_t)m->n_units;
    for (int rank = 0; rank < m->world; rank++) {
        int tp, pp, dp;
        ckpt_layout_coords(&m->layout, rank, &tp, &pp, &dp);
        uint64_t at = 0, trained_at = 0;
        for (size_t u = 0; u < nu; u++) {
            const uint64_t real = pp == m->unit_stage[u]
                                      ? ckpt_piece_elements(m->unit_slice[u], m->unit_shard[u], dp)
                                      : 0;
            r->prefix[(size_t)rank * nu + u] = at;
            r->trained_prefix[(size_t)rank * nu + u] = trained_at;
            at += ckpt_meta_unit_stored(m, (int)u) ? real : 0;
            trained_at += m->unit_frozen && m->unit_frozen[u] ? 0 : real;
        }
    }
}

zt_status ckpt_reader_open(const char *step_dir, const struct ckpt_meta *meta,
                           const struct param_table *whole, struct ckpt_reader **out)
{
    ZT_ASSERT(!whole->whole);
    *out = NULL;
    struct ckpt_reader *r = calloc(1, sizeof *r);
    if (!r)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the checkpoint reader");
    const size_t w = (size_t)meta->world, nu = (size_t)meta->n_units;
    r->step_dir = step_dir;
    r->meta = meta;
    r->whole = whole;
    r->files = calloc(w, sizeof *r->files);
    r->prefix = calloc(w * nu + 1, sizeof *r->prefix);
    r->trained_prefix = calloc(w * nu + 1, sizeof *r->trained_prefix);
    zt_status st = r->files && r->prefix && r->trained_prefix
                       ? cut_slices(r)
                       : zt_error_set(ZT_ERR_NOMEM, "cannot allocate the shard table");
    if (st == ZT_OK)
        st = check_units(r);
    if (st != ZT_OK) {
        ckpt_reader_close(r);
        return st;
    }
    fill_prefixes(r);
    *out = r;
    return ZT_OK;
}

void ckpt_reader_close(struct ckpt_reader *r)
{
    if (!r)
        return;
    for (int k = 0; r->files && k < r->meta->world; k++)
        ckpt_shard_close(r->files[k]);
    for (int t = 0; r->slices && t < r->meta->layout.tp; t++)
        param_table_free(&r->slices[t]);
    free(r->slices);
    free(r->files);
    free(r->prefix);
    free(r->trained_prefix);
    free(r->mine.v);
    free(r->old.v);
    free(r);
}

/* The open file of old rank `rank`, with state's section in *sec. */
static zt_status section_of(struct ckpt_reader *r, int rank, const struct ckpt_state *state,
                            const struct ckpt_section **sec)
{
    if (!r->files[rank]) {
        char path[4096];
        ZT_TRY(ckpt_shard_path(r->step_dir, rank, path, sizeof path));
        ZT_TRY(ckpt_shard_open(path, &r->files[rank]));
    }
    *sec = ckpt_shard_find(r->files[rank], state->name);
    if (*sec && (*sec)->dtype == state->dtype)
        return ZT_OK;
    return zt_error_set(ZT_ERR_CHECKPOINT,
                        "%s/rank-%05d.bin: no %s section '%s' (not a zerotrain training "
                        "checkpoint of this version)",
                        r->step_dir, rank, state->dtype == ZT_U8 ? "8-bit" : "fp32", state->name);
}

/* Elements [a, b) of unit u of old tensor-parallel rank t's slice, from
 * the files of the data-parallel pieces holding them. */
static zt_status read_slice(struct ckpt_reader *r, const struct ckpt_state *state, int u, int t,
                            uint64_t a, uint64_t b, char *dst)
{
    const struct ckpt_meta *m = r->meta;
    const uint64_t share = m->unit_shard[u], numel = m->unit_slice[u];
    const uint64_t *prefix = state->trained_only ? r->trained_prefix : r->prefix;
    const size_t size = zt_dtype_size(state->dtype);
    while (a < b) {
        const int piece = (int)(a / share);
        const int rank = ckpt_layout_rank(&m->layout, t, m->unit_stage[u], piece);
        uint64_t end = share * (uint64_t)(piece + 1);
        end = end < b ? end : b;
        end = end < numel ? end : numel;
        const struct ckpt_section *sec;
        ZT_TRY(section_of(r, rank, state, &sec));
        const uint64_t first =
            prefix[(size_t)rank * (size_t)m->n_units + (size_t)u] + (a - share * (uint64_t)piece);
        ZT_TRY(ckpt_shard_read(r->files[rank], sec, first, end - a, dst));
        dst += (end - a) * size;
        a = end;
    }
    return ZT_OK;
}

static void add_run(void *arg, size_t whole, size_t n, size_t at)
{
    struct runs *l = arg;
    if (l->failed)
        return;
    if (l->n == l->cap) {
        const size_t cap = l->cap ? 2 * l->cap : 64;
        struct run *v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            l->failed = 1;
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (struct run){whole, n, at};
}

/* The runs of flat range [begin, end) of table t into l. */
static zt_status runs_of(const struct param_table *t, size_t begin, size_t end, struct runs *l)
{
    l->n = 0;
    l->failed = 0;
    param_table_tp_runs(t, begin, end, add_run, l);
    return l->failed ? zt_error_set(ZT_ERR_NOMEM, "cannot allocate the checkpoint's runs") : ZT_OK;
}

/* Whether the whole model's element `at` is in a tensor that every
 * tensor-parallel rank holds whole. */
static int replicated(const struct param_table *whole, size_t at)
{
    int k;
    size_t lo, hi;
    param_table_piece(whole, at, at + 1, &k, &lo, &hi);
    return whole->tensors[k].tp_split == TP_REPLICATED;
}

/* A part to read: old slice elements [old_at, old_at + n) into the
 * reader's [new_at, new_at + n). */
struct part {
    size_t new_at, old_at, n;
};

/* Reads what old rank t's slice of unit u holds of the reader's runs
 * (r->mine, relative to the read's start; r->old, relative to the old
 * unit's start), merging parts that continue each other; *got counts the
 * elements read. */
static zt_status read_intersections(struct ckpt_reader *r, const struct ckpt_state *state, int u,
                                    int t, char *dst, size_t *got)
{
    const size_t size = zt_dtype_size(state->dtype);
    struct part pending = {0, 0, 0};
    size_t i = 0, j = 0;
    while (i < r->mine.n && j < r->old.n) {
        const struct run *a = &r->mine.v[i], *b = &r->old.v[j];
        const size_t lo = a->whole > b->whole ? a->whole : b->whole;
        const size_t a_end = a->whole + a->n, b_end = b->whole + b->n;
        const size_t hi = a_end < b_end ? a_end : b_end;
        if (lo < hi && !(t > 0 && replicated(r->whole, lo))) {
            const struct part p = {a->at + (lo - a->whole), b->at + (lo - b->whole), hi - lo};
            if (pending.n && pending.new_at + pending.n == p.new_at &&
                pending.old_at + pending.n == p.old_at) {
                pending.n += p.n;
            } else {
                if (pending.n)
                    ZT_TRY(read_slice(r, state, u, t, pending.old_at, pending.old_at + pending.n,
                                      dst + pending.new_at * size));
                pending = p;
            }
            *got += p.n;
        }
        if (a_end <= b_end)
            i++;
        else
            j++;
    }
    if (pending.n)
        ZT_TRY(read_slice(r, state, u, t, pending.old_at, pending.old_at + pending.n,
                          dst + pending.new_at * size));
    return ZT_OK;
}

zt_status ckpt_reader_read(struct ckpt_reader *r, const struct ckpt_state *state,
                           const struct param_table *mine, int u, size_t lo, size_t hi, void *dst)
{
    ZT_ASSERT(u >= 0 && u < r->meta->n_units && lo <= hi && hi <= param_table_unit_size(mine, u));
    ZT_TRY(runs_of(mine, mine->unit_offset[u] + lo, mine->unit_offset[u] + hi, &r->mine));
    size_t got = 0, real = 0;
    for (size_t i = 0; i < r->mine.n; i++)
        real += r->mine.v[i].n;
    if (real < hi - lo) /* padding rows, in no run: zero */
        memset(dst, 0, (hi - lo) * zt_dtype_size(state->dtype));
    for (int t = 0; t < r->meta->layout.tp; t++) {
        const struct param_table *old = old_table(r, t);
        /* counted from the old unit's start, as read_slice counts */
        ZT_TRY(runs_of(old, old->unit_offset[u], old->unit_offset[u + 1], &r->old));
        ZT_TRY(read_intersections(r, state, u, t, dst, &got));
    }
    /* every element of the model is in some slice: a gap is a bug */
    ZT_ASSERT(got == real);
    return ZT_OK;
}
