/* report/plot_data.c — see plot_data.h.
 *
 * The line-per-record files go through one reader (each_record), which
 * numbers the lines, parses each as a JSON object and hands it to the
 * file's own function; so every message about a line says the file and
 * the line the same way. The series grow by doubling.
 */
#define _GNU_SOURCE /* getline */
#include "plot_data.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "../common/json.h"
#include "../config/yaml_tree.h"

/* ---- one record per line -------------------------------------------------- */

/* Where a record is, for messages. */
struct record_at {
    const char *path;
    long line;
};

typedef zt_status (*record_fn)(void *ctx, const struct record_at *at, const struct json_value *obj);

static zt_status nomem(void)
{
    return zt_error_set(ZT_ERR_NOMEM, "plot: out of memory");
}

/* "PATH:LINE: WHAT" as ZT_ERR_DATA. */
static zt_status bad_record(const struct record_at *at, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static zt_status bad_record(const struct record_at *at, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return zt_error_set(ZT_ERR_DATA, "%s:%ld: %s", at->path, at->line, what);
}

static int is_blank(const char *s)
{
    return s[strspn(s, " \t\r\n")] == '\0';
}

/* Parses one complete line as a JSON object and calls fn on it. */
static zt_status one_record(const struct record_at *at, const char *text, size_t len, record_fn fn,
                            void *ctx)
{
    char part[32];
    snprintf(part, sizeof part, "line %ld", at->line);
    const struct json_source src = {at->path, part, ZT_ERR_DATA, 8};
    struct json_value v;
    ZT_TRY(json_parse(&src, text, len, &v));
    zt_status st = v.type == JSON_OBJECT
                       ? fn(ctx, at, &v)
                       : bad_record(at, "%s, not a JSON object", json_type_name(v.type));
    json_free(&v);
    return st;
}

/* Calls fn on every line of the file at `path` but blank ones and a last
 * one without its newline (still being written, or cut short). */
static zt_status each_record(const char *path, record_fn fn, void *ctx)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return zt_error_set(ZT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    struct record_at at = {path, 0};
    zt_status st = ZT_OK;
    while (st == ZT_OK && (len = getline(&line, &cap, f)) > 0) {
        at.line++;
        if (line[len - 1] == '\n' && !is_blank(line))
            st = one_record(&at, line, (size_t)len, fn, ctx);
    }
    if (st == ZT_OK && ferror(f))
        st = zt_error_set(ZT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
    free(line);
    fclose(f);
    return st;
}

/* The number member `key` of obj into *out; 0 when it is absent or null,
 * 1 when read, an error for any other type. */
static zt_status number_member(const struct record_at *at, const struct json_value *obj,
                               const char *key, double *out, int *found)
{
    const struct json_value *v = json_object_get(obj, key, NULL);
    *found = 0;
    if (!v || v->type == JSON_NULL)
        return ZT_OK;
    if (v->type != JSON_INT && v->type != JSON_REAL)
        return bad_record(at, "\"%s\" is %s, not a number or null", key, json_type_name(v->type));
    *out = v->negative           ? -(double)v->magnitude
           : v->type == JSON_INT ? (double)v->magnitude
                                 : v->real;
    *found = 1;
    return ZT_OK;
}

/* An integer member that must be there. */
static zt_status integer_member(const struct record_at *at, const struct json_value *obj,
                                const char *key, long *out)
{
    const struct json_value *v = json_object_get(obj, key, NULL);
    if (!v || v->type != JSON_INT || v->magnitude > (uint64_t)1 << 62)
        return bad_record(at, "no integer \"%s\"%s%s", key, v ? ": it is " : "",
                          v ? json_type_name(v->type) : "");
    *out = v->negative ? -(long)v->magnitude : (long)v->magnitude;
    return ZT_OK;
}

/* ---- series ------------------------------------------------------------- */

static zt_status series_add(struct plot_series *s, double step, double value)
{
    if (s->n == s->cap) {
        const size_t cap = s->cap ? 2 * s->cap : 256;
        double *st = realloc(s->step, cap * sizeof *st);
        if (st)
            s->step = st;
        double *v = st ? realloc(s->value, cap * sizeof *v) : NULL;
        if (!v)
            return nomem();
        s->value = v;
        s->cap = cap;
    }
    s->step[s->n] = step;
    s->value[s->n++] = value;
    return ZT_OK;
}

/* ---- metrics.jsonl and config.yaml ---------------------------------------- */

static const char *const metric_keys[PLOT_METRIC_COUNT] = {
    [PLOT_LOSS] = "loss",
    [PLOT_VAL_LOSS] = "val_loss",
    [PLOT_LR] = "lr",
    [PLOT_GRAD_NORM] = "grad_norm",
    [PLOT_LOSS_SCALE] = "loss_scale",
    [PLOT_TOKENS_PER_S] = "tokens_per_s",
};

static zt_status metrics_record(void *ctx, const struct record_at *at, const struct json_value *obj)
{
    struct plot_metrics *m = ctx;
    long step;
    ZT_TRY(integer_member(at, obj, "step", &step));
    for (int k = 0; k < PLOT_METRIC_COUNT; k++) {
        double value;
        int found;
        ZT_TRY(number_member(at, obj, metric_keys[k], &value, &found));
        if (found)
            ZT_TRY(series_add(&m->series[k], (double)step, value));
    }
    return ZT_OK;
}

/* config.yaml's fp16.enabled (a run folder's config is resolved: every
 * key is there). */
static zt_status read_fp16(const char *dir, int *fp16)
{
    char path[4200];
    struct yaml_tree *t = NULL;
    snprintf(path, sizeof path, "%s/config.yaml", dir);
    ZT_TRY(yaml_tree_load_file(path, &t));
    const struct yaml_tree_node *v = yaml_tree_lookup(t, "fp16.enabled");
    *fp16 = 0;
    if (v)
        yaml_tree_bool(v, fp16);
    yaml_tree_free(t);
    return ZT_OK;
}

zt_status plot_metrics_read(const char *dir, struct plot_metrics *out)
{
    char path[4200];
    memset(out, 0, sizeof *out);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    zt_status st = each_record(path, metrics_record, out);
    if (st == ZT_OK)
        st = read_fp16(dir, &out->fp16);
    if (st != ZT_OK)
        plot_metrics_free(out);
    return st;
}

void plot_metrics_free(struct plot_metrics *m)
{
    for (int k = 0; k < PLOT_METRIC_COUNT; k++) {
        free(m->series[k].step);
        free(m->series[k].value);
    }
    memset(m, 0, sizeof *m);
}

/* ---- categories ------------------------------------------------------------ */

/* The index of category `name`, added when new; -1 when the table is full. */
static int category_index(struct plot_categories *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->name[i], name) == 0)
            return i;
    if (c->n == PLOT_MAX_CATEGORIES)
        return -1;
    snprintf(c->name[c->n], PLOT_NAME, "%s", name);
    return c->n++;
}

/* The members of object `by_category` (bytes per category) into row[],
 * each at its category's index; `skip` (or NULL) is a member that is not a
 * category ("total"). `where` says where the object is, for messages. */
static zt_status read_categories(const struct json_value *by_category, const char *skip,
                                 struct plot_categories *cats, double *row, const char *where)
{
    if (!by_category || by_category->type != JSON_OBJECT)
        return zt_error_set(ZT_ERR_DATA, "%s: not an object of bytes per category", where);
    for (size_t i = 0; i < by_category->n; i++) {
        const struct json_value *v = &by_category->items[i];
        const char *key = by_category->keys[i];
        if (skip && strcmp(key, skip) == 0)
            continue;
        if (v->type != JSON_INT || v->negative)
            return zt_error_set(ZT_ERR_DATA, "%s.%s: %s, not a number of bytes", where, key,
                                json_type_name(v->type));
        const int k = category_index(cats, key);
        if (k < 0)
            return zt_error_set(ZT_ERR_DATA, "%s: more than %d categories", where,
                                PLOT_MAX_CATEGORIES);
        row[k] = (double)v->magnitude;
    }
    return ZT_OK;
}

/* ---- memory_report.json ------------------------------------------------------ */

static zt_status report_rank(const char *path, const struct json_value *row, int i,
                             struct plot_memory_report *r)
{
    char where[4300];
    snprintf(where, sizeof where, "%s: ranks[%d]", path, i);
    const struct json_value *rank =
        row->type == JSON_OBJECT ? json_object_get(row, "rank", NULL) : NULL;
    const struct json_value *total =
        row->type == JSON_OBJECT ? json_object_get(row, "total_peak", NULL) : NULL;
    if (!rank || rank->type != JSON_INT || !total || total->type != JSON_INT)
        return zt_error_set(ZT_ERR_DATA, "%s: no integer \"rank\" and \"total_peak\"", where);
    r->rank[i] = (int)rank->magnitude;
    r->total_peak[i] = (double)total->magnitude;
    snprintf(where + strlen(where), sizeof where - strlen(where), ".peak");
    return read_categories(json_object_get(row, "peak", NULL), NULL, &r->cats,
                           &r->peak[(size_t)i * PLOT_MAX_CATEGORIES], where);
}

static zt_status report_body(const char *path, const struct json_value *root,
                             struct plot_memory_report *r)
{
    const struct json_value *ranks =
        root->type == JSON_OBJECT ? json_object_get(root, "ranks", NULL) : NULL;
    if (!ranks || ranks->type != JSON_ARRAY || ranks->n == 0 || ranks->n > 1000000)
        return zt_error_set(ZT_ERR_DATA, "%s: no \"ranks\" list of a memory report", path);
    r->n_ranks = (int)ranks->n;
    r->rank = calloc(ranks->n, sizeof *r->rank);
    r->total_peak = calloc(ranks->n, sizeof *r->total_peak);
    r->peak = calloc(ranks->n * PLOT_MAX_CATEGORIES, sizeof *r->peak);
    if (!r->rank || !r->total_peak || !r->peak)
        return nomem();
    for (int i = 0; i < r->n_ranks; i++)
        ZT_TRY(report_rank(path, &ranks->items[i], i, r));
    const struct json_value *baseline = json_object_get(root, "baseline", NULL);
    const struct json_value *total =
        baseline && baseline->type == JSON_OBJECT ? json_object_get(baseline, "total", NULL) : NULL;
    char where[4200];
    snprintf(where, sizeof where, "%s: baseline", path);
    ZT_TRY(read_categories(baseline, "total", &r->cats, r->baseline, where));
    r->baseline_total = total && total->type == JSON_INT ? (double)total->magnitude : 0.0;
    return ZT_OK;
}

zt_status plot_memory_report_read(const char *path, struct plot_memory_report *out)
{
    char *text = NULL;
    size_t len = 0;
    struct json_value root;
    const struct json_source src = {path, NULL, ZT_ERR_DATA, 8};
    memset(out, 0, sizeof *out);
    ZT_TRY(zt_read_small_file(path, (size_t)256 << 20, ZT_ERR_DATA, &text, &len));
    zt_status st = json_parse(&src, text, len, &root);
    free(text);
    if (st == ZT_OK)
        st = report_body(path, &root, out);
    json_free(&root);
    if (st != ZT_OK)
        plot_memory_report_free(out);
    return st;
}

void plot_memory_report_free(struct plot_memory_report *r)
{
    free(r->rank);
    free(r->peak);
    free(r->total_peak);
    memset(r, 0, sizeof *r);
}

/* ---- memory_timeline.jsonl ------------------------------------------------------- */

static zt_status timeline_grow(struct plot_timeline *t)
{
    if (t->n < t->cap)
        return ZT_OK;
    const size_t cap = t->cap ? 2 * t->cap : 1024;
    void *ms = realloc(t->ms, cap * sizeof *t->ms);
    if (ms)
        t->ms = ms;
    void *phase = ms ? realloc(t->phase, cap * sizeof *t->phase) : NULL;
    if (phase)
        t->phase = phase;
    void *unit = phase ? realloc(t->unit, cap * sizeof *t->unit) : NULL;
    if (unit)
        t->unit = unit;
    void *current =
        unit ? realloc(t->current, cap * PLOT_MAX_CATEGORIES * sizeof *t->current) : NULL;
    if (!current)
        return nomem();
    t->current = current;
    t->cap = cap;
    return ZT_OK;
}

/* The file's ranks, for a message when the one asked for has no events. */
static void note_rank(struct plot_timeline *t, long rank)
{
    if (t->min_rank < 0 || rank < t->min_rank)
        t->min_rank = (int)rank;
    if (rank > t->max_rank)
        t->max_rank = (int)rank;
}

/* Keeps the event when it is of the rank asked for and of its last step:
 * a later step starts the collection again, and so does the same step with
 * an earlier time (a resumed run's ledger started again). */
static zt_status timeline_record(void *ctx, const struct record_at *at,
                                 const struct json_value *obj)
{
    struct plot_timeline *t = ctx;
    long rank, step, unit;
    double seconds;
    int found;
    ZT_TRY(integer_member(at, obj, "rank", &rank));
    ZT_TRY(integer_member(at, obj, "step", &step));
    ZT_TRY(integer_member(at, obj, "unit", &unit));
    ZT_TRY(number_member(at, obj, "time", &seconds, &found));
    if (!found)
        return bad_record(at, "no number \"time\"");
    const struct json_value *phase = json_object_get(obj, "phase", NULL);
    if (!phase || phase->type != JSON_STRING)
        return bad_record(at, "no string \"phase\"");
    note_rank(t, rank);
    if (rank != t->rank || step < 1 || step < t->step)
        return ZT_OK;
    if (step > t->step || (t->n > 0 && seconds < t->ms[t->n - 1])) {
        t->step = step;
        t->n = 0;
    }
    ZT_TRY(timeline_grow(t));
    double *row = &t->current[t->n * PLOT_MAX_CATEGORIES];
    memset(row, 0, PLOT_MAX_CATEGORIES * sizeof *row);
    char where[4200];
    snprintf(where, sizeof where, "%s:%ld: \"current\"", at->path, at->line);
    ZT_TRY(read_categories(json_object_get(obj, "current", NULL), NULL, &t->cats, row, where));
    t->ms[t->n] = seconds; /* made relative once the step is known */
    snprintf(t->phase[t->n], sizeof t->phase[t->n], "%s", phase->str);
    t->unit[t->n++] = (int)unit;
    return ZT_OK;
}

zt_status plot_timeline_read(const char *path, int rank, struct plot_timeline *out)
{
    memset(out, 0, sizeof *out);
    out->rank = rank;
    out->min_rank = out->max_rank = -1;
    zt_status st = each_record(path, timeline_record, out);
    if (st != ZT_OK) {
        plot_timeline_free(out);
        return st;
    }
    for (size_t i = out->n; i-- > 0;)
        out->ms[i] = (out->ms[i] - out->ms[0]) * 1e3;
    return ZT_OK;
}

void plot_timeline_free(struct plot_timeline *t)
{
    free(t->ms);
    free(t->phase);
    free(t->unit);
    free(t->current);
    memset(t, 0, sizeof *t);
}
