/* report/plot.c — see plot.h.
 *
 * The order of work: every run folder is checked and read first (so a bad
 * input stops the command before anything is drawn), then gnuplot is
 * looked for, then each plot is drawn by its own gnuplot process
 * (gnuplot.h), its data inline in the script. The curve plots are one
 * table (curves[]) drawn by one writer; the memory plots' scripts are in
 * plot_memory.c.
 */
#define _GNU_SOURCE /* realpath */
#include "plot.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/fileio.h"
#include "gnuplot.h"
#include "plot_impl.h"

/* ---- the runs --------------------------------------------------------------- */

static int is_file(const char *dir, const char *name)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A run folder has config.yaml and metrics.jsonl. */
static zt_status check_run_dir(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return zt_error_set(ZT_ERR_USAGE, "%s is not a zerotrain run directory (%s)", dir,
                            strerror(errno));
    static const char *const needed[] = {"metrics.jsonl", "config.yaml"};
    for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++)
        if (!S_ISDIR(st.st_mode) || !is_file(dir, needed[i]))
            return zt_error_set(ZT_ERR_USAGE, "%s is not a zerotrain run directory (no %s)", dir,
                                needed[i]);
    return ZT_OK;
}

/* The last `parts` components of an absolute path ("parent/base"). */
static const char *tail_of(const char *path, int parts)
{
    const char *p = path + strlen(path);
    while (p > path && parts > 0)
        if (*--p == '/' && --parts == 0)
            return p + 1;
    return path[0] == '/' && path[1] ? path + 1 : path;
}

/* Whether run i's last `parts` path components are another run's too. */
static int clashes(const struct plot_run_data *runs, int n, int i, int parts)
{
    for (int j = 0; j < n; j++)
        if (j != i && strcmp(tail_of(runs[i].real, parts), tail_of(runs[j].real, parts)) == 0)
            return 1;
    return 0;
}

/* Names the runs by their folders' base names, with as many parents'
 * names before (up to two) as it takes to tell them apart, and a number
 * after when even that does not (the same folder twice). */
static void name_runs(struct plot_run_data *runs, int n)
{
    for (int i = 0; i < n; i++) {
        int parts = 1;
        while (parts < 3 && clashes(runs, n, i, parts))
            parts++;
        snprintf(runs[i].name, sizeof runs[i].name, "%s", tail_of(runs[i].real, parts));
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1, copy = 2; j < n; j++)
            if (strcmp(runs[i].name, runs[j].name) == 0) {
                const size_t len = strlen(runs[j].name);
                snprintf(runs[j].name + len, sizeof runs[j].name - len, " #%d", copy++);
            }
}

/* Reads one run folder into *r. */
static zt_status load_run(const char *dir, struct plot_run_data *r)
{
    char report[4200];
    ZT_TRY(check_run_dir(dir));
    r->dir = dir;
    if (!realpath(dir, r->real))
        return zt_error_set(ZT_ERR_IO, "%s: %s", dir, strerror(errno));
    ZT_TRY(plot_metrics_read(r->dir, &r->metrics));
    snprintf(report, sizeof report, "%s/memory_report.json", r->dir);
    r->has_report = is_file(r->dir, "memory_report.json");
    if (r->has_report)
        ZT_TRY(plot_memory_report_read(report, &r->report));
    return ZT_OK;
}

static void free_runs(struct plot_run_data *runs, int n)
{
    for (int i = 0; i < n && runs; i++) {
        plot_metrics_free(&runs[i].metrics);
        plot_memory_report_free(&runs[i].report);
    }
    free(runs);
}

/* ---- the curves ------------------------------------------------------------------ */

enum y_scale {
    Y_LINEAR,
    Y_LOG_IF_WIDE, /* log 10 when the positive values span more than 30x */
    Y_LOG2,        /* log 2: a loss scale moves by halving and doubling */
};

/* One plot of a metric against step, every run in its own colour. */
struct curve_plot {
    const char *file, *title, *ylabel;
    enum plot_metric metric;
    int overlay; /* a second metric drawn as points on dashes (-1: none) */
    enum y_scale y;
    int fp16_only;    /* drawn only when some run trains in fp16 */
    const char *ytic; /* the y tics' format; NULL: gnuplot's */
};

static const struct curve_plot curves[] = {
    {"loss.png", "Training loss (points on dashes: validation loss)", "loss (nats/token)",
     PLOT_LOSS, PLOT_VAL_LOSS, Y_LINEAR, 0, NULL},
    {"lr.png", "Learning rate", "learning rate", PLOT_LR, -1, Y_LINEAR, 0, "%.1e"},
    {"grad_norm.png", "Gradient norm (before clipping)", "gradient norm", PLOT_GRAD_NORM, -1,
     Y_LOG_IF_WIDE, 0, NULL},
    {"loss_scale.png", "fp16 loss scale", "loss scale", PLOT_LOSS_SCALE, -1, Y_LOG2, 1, "%.0f"},
    {"throughput.png", "Throughput (counted target tokens per second, all ranks)", "tokens/s",
     PLOT_TOKENS_PER_S, -1, Y_LINEAR, 0, "%.0f"},
};

/* Whether the plot has something to draw; else why not, in `why`. */
static int curve_drawable(const struct curve_plot *c, const struct plot_run_data *runs, int n,
                          char *why, size_t why_n)
{
    int points = 0, fp16 = 0;
    for (int i = 0; i < n; i++) {
        fp16 |= runs[i].metrics.fp16;
        if (!c->fp16_only || runs[i].metrics.fp16)
            points += (int)runs[i].metrics.series[c->metric].n > 0;
    }
    if (c->fp16_only && !fp16)
        snprintf(why, why_n, "no run trains in fp16 (fp16.enabled)");
    else if (!points)
        snprintf(why, why_n, "no run has a value of it in metrics.jsonl");
    return points > 0;
}

/* The y axis: log when the scale asks for it and the values allow. */
static void y_axis(FILE *f, const struct curve_plot *c, const struct plot_run_data *runs, int n)
{
    double lo = INFINITY, hi = 0.0;
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < runs[i].metrics.series[c->metric].n; k++) {
            const double v = runs[i].metrics.series[c->metric].value[k];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
    if (c->y == Y_LOG2 && lo > 0)
        fputs("set logscale y 2\n", f);
    else if (c->y == Y_LOG_IF_WIDE && lo > 0 && hi / lo > 30.0)
        fputs("set logscale y 10\nset format y '%g'\n", f);
    if (c->ytic)
        fprintf(f, "set format y '%s'\n", c->ytic);
}

/* A series as the datablock $NAME: step and value per line. */
static void datablock(FILE *f, const char *name, const struct plot_series *s)
{
    fprintf(f, "$%s << EOD\n", name);
    for (size_t k = 0; k < s->n; k++)
        fprintf(f, "%.0f %.9g\n", s->step[k], s->value[k]);
    fputs("EOD\n", f);
}

/* One run's curve of `metric` in the plot command (`first`: it opens the
 * command): a line, or for the overlay points on dashes, in the run's
 * colour; with points too when they are few enough to tell apart. */
static void curve_entry(FILE *f, const struct plot_run_data *r, int i, int overlay, int metric,
                        int *first)
{
    const size_t n = r->metrics.series[metric].n;
    char title[600];
    if (n == 0)
        return;
    snprintf(title, sizeof title, "%s%s", r->name, overlay ? " (validation)" : "");
    fprintf(f, "%s$%c%d using 1:2 with %s lc rgb '%s' title ", *first ? "plot " : ", \\\n  ",
            overlay ? 'o' : 'm', i,
            overlay   ? "linespoints dt 2 lw 1.5 pt 7 ps 1.3"
            : n <= 25 ? "linespoints lw 2 pt 7 ps 0.6"
                      : "lines lw 2",
            gnuplot_colour(i));
    gnuplot_quote(f, title);
    *first = 0;
}

static void curve_script(FILE *f, const struct curve_plot *c, const struct plot_run_data *runs,
                         int n)
{
    fprintf(f,
            "set title '%s'\nset xlabel 'step'\nset ylabel '%s'\nset key top right\n"
            "set autoscale xfix\nset offsets 0, graph 0.02, 0, 0\n",
            c->title, c->ylabel);
    y_axis(f, c, runs, n);
    for (int i = 0; i < n; i++) {
        if (c->fp16_only && !runs[i].metrics.fp16)
            continue;
        char name[16];
        snprintf(name, sizeof name, "m%d", i);
        datablock(f, name, &runs[i].metrics.series[c->metric]);
        if (c->overlay >= 0) {
            snprintf(name, sizeof name, "o%d", i);
            datablock(f, name, &runs[i].metrics.series[c->overlay]);
        }
    }
    int first = 1; /* every run's curve, then the overlays on top of them */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++)
            if (!c->fp16_only || runs[i].metrics.fp16)
                if (pass == 0 || c->overlay >= 0)
                    curve_entry(f, &runs[i], i, pass, pass ? c->overlay : (int)c->metric, &first);
    fputc('\n', f);
}

/* ---- drawing ----------------------------------------------------------------------- */

/* What every plot needs to be drawn. */
struct drawing {
    const char *program; /* gnuplot */
    const char *out_dir;
    FILE *out; /* the report of what was written */
};

/* A plot's script writer and its argument. */
typedef void (*script_fn)(FILE *f, const void *arg);

struct curve_arg {
    const struct curve_plot *plot;
    const struct plot_run_data *runs;
    int n;
};

static void curve_script_of(FILE *f, const void *arg)
{
    const struct curve_arg *a = arg;
    curve_script(f, a->plot, a->runs, a->n);
}

struct memory_arg {
    const struct plot_run_data *runs;
    int n;
};

static void memory_script_of(FILE *f, const void *arg)
{
    const struct memory_arg *a = arg;
    plot_memory_script(f, a->runs, a->n);
}

struct timeline_arg {
    const struct plot_timeline *t;
    const char *run;
};

static void timeline_script_of(FILE *f, const void *arg)
{
    const struct timeline_arg *a = arg;
    plot_timeline_script(f, a->t, a->run);
}

/* Draws out_dir/file with the script `script` writes. */
static zt_status draw(const struct drawing *d, const char *file, script_fn script, const void *arg)
{
    char png[4200];
    struct gnuplot_job job;
    snprintf(png, sizeof png, "%s/%s", d->out_dir, file);
    ZT_TRY(gnuplot_begin(&job, d->program, png));
    script(job.script, arg);
    ZT_TRY(gnuplot_finish(&job));
    fprintf(d->out, "wrote %s\n", png);
    return ZT_OK;
}

static void skipped(const struct drawing *d, const char *file, const char *why)
{
    fprintf(d->out, "skipped %s: %s\n", file, why);
}

static zt_status draw_curves(const struct drawing *d, const struct plot_run_data *runs, int n)
{
    for (size_t k = 0; k < sizeof curves / sizeof curves[0]; k++) {
        char why[256];
        const struct curve_arg arg = {&curves[k], runs, n};
        if (curve_drawable(&curves[k], runs, n, why, sizeof why))
            ZT_TRY(draw(d, curves[k].file, curve_script_of, &arg));
        else
            skipped(d, curves[k].file, why);
    }
    return ZT_OK;
}

static zt_status draw_memory(const struct drawing *d, const struct plot_run_data *runs, int n)
{
    const struct memory_arg arg = {runs, n};
    for (int i = 0; i < n; i++)
        if (runs[i].has_report)
            return draw(d, "memory.png", memory_script_of, &arg);
    skipped(d, "memory.png", "no run has memory_report.json");
    return ZT_OK;
}

/* memory_timeline.png's data. */
struct timeline_pick {
    int run; /* -1: no run has a timeline */
    struct plot_timeline t;
    char why[4400]; /* when t.n is 0: why nothing is drawn */
};

/* Reads rank o->rank's last step from the timeline of the first run that
 * has one; `why` says why there is nothing to draw when that is so. A
 * --rank the file has no event of is an error (ZT_ERR_USAGE). */
static zt_status pick_timeline(const struct plot_options *o, const struct plot_run_data *runs,
                               int n, struct timeline_pick *p)
{
    const int rank = o->rank < 0 ? 0 : o->rank;
    char path[4200];
    memset(p, 0, sizeof *p);
    p->run = 0;
    while (p->run < n && !is_file(runs[p->run].dir, "memory_timeline.jsonl"))
        p->run++;
    if (p->run == n) {
        p->run = -1;
        snprintf(p->why, sizeof p->why, "no run has memory_timeline.jsonl");
        return ZT_OK;
    }
    snprintf(path, sizeof path, "%s/memory_timeline.jsonl", runs[p->run].dir);
    ZT_TRY(plot_timeline_read(path, rank, &p->t));
    const int has_rank = p->t.min_rank >= 0 && rank >= p->t.min_rank && rank <= p->t.max_rank;
    if (p->t.n > 0)
        return ZT_OK;
    if (p->t.min_rank < 0 || has_rank)
        snprintf(p->why, sizeof p->why, "%s has no event of a training step (step >= 1) of rank %d",
                 path, rank);
    else if (o->rank < 0)
        snprintf(p->why, sizeof p->why, "%s has no event of rank 0 (its ranks: %d-%d)", path,
                 p->t.min_rank, p->t.max_rank);
    else
        return zt_error_set(ZT_ERR_USAGE, "--rank %d: %s has events of ranks %d-%d only", rank,
                            path, p->t.min_rank, p->t.max_rank);
    return ZT_OK;
}

static zt_status draw_timeline(const struct drawing *d, const struct plot_run_data *runs,
                               const struct timeline_pick *p)
{
    if (p->t.n == 0) {
        skipped(d, "memory_timeline.png", p->why);
        return ZT_OK;
    }
    const struct timeline_arg arg = {&p->t, runs[p->run].name};
    return draw(d, "memory_timeline.png", timeline_script_of, &arg);
}

zt_status plot_run(const struct plot_options *o, FILE *out)
{
    ZT_ASSERT(o->n_runs > 0);
    struct plot_run_data *runs = calloc((size_t)o->n_runs, sizeof *runs);
    struct timeline_pick *timeline = calloc(1, sizeof *timeline);
    if (!runs || !timeline) {
        free(runs);
        free(timeline);
        return zt_error_set(ZT_ERR_NOMEM, "plot: out of memory");
    }
    zt_status st = ZT_OK;
    for (int i = 0; i < o->n_runs && st == ZT_OK; i++)
        st = load_run(o->runs[i], &runs[i]);
    if (st == ZT_OK)
        st = pick_timeline(o, runs, o->n_runs, timeline);
    name_runs(runs, o->n_runs);
    char out_dir[4200];
    if (o->out_dir)
        snprintf(out_dir, sizeof out_dir, "%s", o->out_dir);
    else
        snprintf(out_dir, sizeof out_dir, "%s/plots", o->runs[0]);
    struct drawing d = {NULL, out_dir, out};
    if (st == ZT_OK)
        st = gnuplot_find(&d.program);
    if (st == ZT_OK)
        st = zt_mkdir_p(out_dir);
    if (st == ZT_OK)
        st = draw_curves(&d, runs, o->n_runs);
    if (st == ZT_OK)
        st = draw_memory(&d, runs, o->n_runs);
    if (st == ZT_OK)
        st = draw_timeline(&d, runs, timeline);
    if (st == ZT_OK)
        fprintf(out, "plots in %s\n", out_dir);
    plot_timeline_free(&timeline->t);
    free(timeline);
    free_runs(runs, o->n_runs);
    return st;
}
