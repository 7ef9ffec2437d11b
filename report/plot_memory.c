/* report/plot_memory.c — memory.png and memory_timeline.png's
 * gnuplot scripts (plot_impl.h).
 *
 * memory.png is a row-stacked histogram: one row per rank, a row for the
 * single-device baseline after each run's ranks, an empty row between
 * runs; a column per category that some row has bytes of (the others
 * would only crowd the legend). Its unit follows the tallest stack.
 *
 * memory_timeline.png fills the area between running sums of the
 * categories. Memory holds still between events, so each event is two
 * rows: the state before it and the state after it, at its time; the
 * areas then rise and fall in steps, as the ledger did.
 */
#include <math.h>
#include <string.h>

#include "gnuplot.h"
#include "plot_impl.h"

/* The ledger's categories keep their colours; a category it does not have
 * today takes the palette's next ones. */
static const char *const known_categories[] = {
    "params",           "grads",           "master_params",
    "optimizer_states", "gathered_params", "activations",
    "comm_buffers",     "workspace",       "load",
};
enum { N_KNOWN = sizeof known_categories / sizeof known_categories[0] };

const char *plot_category_colour(const struct plot_categories *c, int k)
{
    int unknown = 0;
    for (int i = 0; i <= k; i++) {
        int known = -1;
        for (int j = 0; j < N_KNOWN && known < 0; j++)
            known = strcmp(c->name[i], known_categories[j]) == 0 ? j : -1;
        if (i == k)
            return gnuplot_colour(known >= 0 ? known : N_KNOWN + unknown);
        unknown += known < 0;
    }
    return gnuplot_colour(0);
}

/* A unit for bytes up to `max`. */
struct unit {
    const char *name;
    double bytes;
};

static struct unit unit_for(double max)
{
    static const struct unit units[] = {
        {"GiB", 1073741824.0}, {"MiB", 1048576.0}, {"KiB", 1024.0}, {"bytes", 1.0}};
    size_t i = 0;
    while (i + 1 < sizeof units / sizeof units[0] && max < units[i].bytes)
        i++;
    return units[i];
}

/* ---- memory.png ------------------------------------------------------------------ */

/* Whether some run's rows have bytes of category k. */
static int category_used(const struct plot_run_data *r, int k)
{
    if (r->report.baseline[k] > 0)
        return 1;
    for (int i = 0; i < r->report.n_ranks; i++)
        if (r->report.peak[(size_t)i * PLOT_MAX_CATEGORIES + k] > 0)
            return 1;
    return 0;
}

/* The categories of every report, in first-seen order, and for each run the
 * column of each of its categories (-1: not drawn). */
static void memory_columns(const struct plot_run_data *runs, int n, struct plot_categories *all,
                           int used[PLOT_MAX_CATEGORIES])
{
    memset(all, 0, sizeof *all);
    memset(used, 0, PLOT_MAX_CATEGORIES * sizeof *used);
    for (int i = 0; i < n; i++)
        for (int k = 0; runs[i].has_report && k < runs[i].report.cats.n; k++) {
            int j = 0;
            while (j < all->n && strcmp(all->name[j], runs[i].report.cats.name[k]) != 0)
                j++;
            if (j == all->n && all->n < PLOT_MAX_CATEGORIES)
                snprintf(all->name[all->n++], PLOT_NAME, "%s", runs[i].report.cats.name[k]);
            if (j < PLOT_MAX_CATEGORIES)
                used[j] |= category_used(&runs[i], k);
        }
}

/* Run r's bytes of category `name` in row i (-1: the baseline). */
static double bytes_of(const struct plot_run_data *r, int i, const char *name)
{
    for (int k = 0; k < r->report.cats.n; k++)
        if (strcmp(r->report.cats.name[k], name) == 0)
            return i < 0 ? r->report.baseline[k]
                         : r->report.peak[(size_t)i * PLOT_MAX_CATEGORIES + k];
    return 0.0;
}

/* The tallest stack of every row drawn. */
static double tallest(const struct plot_run_data *runs, int n, const struct plot_categories *all)
{
    double max = 0.0;
    for (int r = 0; r < n; r++)
        for (int i = -1; runs[r].has_report && i < runs[r].report.n_ranks; i++) {
            double sum = 0.0;
            for (int k = 0; k < all->n; k++)
                sum += bytes_of(&runs[r], i, all->name[k]);
            max = sum > max ? sum : max;
        }
    return max;
}

/* One histogram row: its x tic label and the bytes of each drawn column. */
static void memory_row(FILE *f, const char *label, const struct plot_run_data *r, int i,
                       const struct plot_categories *all, const int *used, struct unit u)
{
    fprintf(f, "\"%s\"", label);
    for (int k = 0; k < all->n; k++)
        if (used[k])
            fprintf(f, " %.6g", r ? bytes_of(r, i, all->name[k]) / u.bytes : 0.0);
    fputc('\n', f);
}

/* The rows ($mem): each run's ranks, its baseline, an empty row between
 * runs. */
static void memory_rows(FILE *f, const struct plot_run_data *runs, int n,
                        const struct plot_categories *all, const int *used, struct unit u)
{
    fputs("$mem << EOD\n", f);
    for (int r = 0, g = 0; r < n; r++) {
        if (!runs[r].has_report)
            continue;
        if (g++ > 0)
            memory_row(f, "", NULL, 0, all, used, u);
        for (int i = 0; i < runs[r].report.n_ranks; i++) {
            char label[32];
            snprintf(label, sizeof label, "%d", runs[r].report.rank[i]);
            memory_row(f, label, &runs[r], i, all, used, u);
        }
        memory_row(f, "1 device", &runs[r], -1, all, used, u);
    }
    fputs("EOD\n", f);
}

/* The peaks of the totals at their rows' x ($total: a row's x is its
 * index in $mem), and each run's name under its group when there are
 * several. */
static void memory_totals(FILE *f, const struct plot_run_data *runs, int n, struct unit u)
{
    int groups = 0, x = 0;
    for (int r = 0; r < n; r++)
        groups += runs[r].has_report;
    for (int r = 0, g = 0; r < n; r++) {
        if (!runs[r].has_report)
            continue;
        x += g++ > 0;
        const int first = x;
        x += runs[r].report.n_ranks + 1;
        if (groups < 2)
            continue;
        fputs("set label ", f);
        gnuplot_quote(f, runs[r].name);
        fprintf(f, " at first %g, graph 0 center offset 0,-2.2\n", (first + x - 1) / 2.0);
    }
    fputs("$total << EOD\n", f);
    x = 0;
    for (int r = 0, g = 0; r < n; r++) {
        if (!runs[r].has_report)
            continue;
        x += g++ > 0;
        for (int i = 0; i < runs[r].report.n_ranks; i++, x++)
            fprintf(f, "%d %.6g\n", x, runs[r].report.total_peak[i] / u.bytes);
        fprintf(f, "%d %.6g\n", x++, runs[r].report.baseline_total / u.bytes);
    }
    fputs("EOD\n", f);
}

void plot_memory_script(FILE *f, const struct plot_run_data *runs, int n)
{
    struct plot_categories all;
    int used[PLOT_MAX_CATEGORIES];
    memory_columns(runs, n, &all, used);
    const struct unit u = unit_for(tallest(runs, n, &all));
    int groups = 0;
    for (int r = 0; r < n; r++)
        groups += runs[r].has_report;
    fprintf(f,
            "set title 'Peak memory per rank by category, and the single-device baseline'\n"
            "set xlabel 'rank' offset 0,%s\nset ylabel '%s'\n"
            "set style data histograms\nset style histogram rowstacked\n"
            "set style fill solid 0.85 border lc rgb '#333333'\nset boxwidth 0.6\n"
            "set key outside right top vertical invert\nset grid noxtics ytics\n"
            "set xtics nomirror scale 0\nset yrange [0:*]\nset bmargin %d\n",
            groups > 1 ? "-1.4" : "0", u.name, groups > 1 ? 6 : 4);
    memory_rows(f, runs, n, &all, used, u);
    memory_totals(f, runs, n, u);
    int column = 2, first = 1;
    for (int k = 0; k < all.n; k++) {
        if (!used[k])
            continue;
        fprintf(f, "%s$mem using %d%s lc rgb '%s' title ", first ? "plot " : ", \\\n  ", column,
                first ? ":xtic(1)" : "", plot_category_colour(&all, k));
        gnuplot_quote(f, all.name[k]);
        column++;
        first = 0;
    }
    fprintf(f,
            "%s$total using 1:2 with points pt 7 ps 1.6 lc rgb 'black' "
            "title 'peak of the total'\n",
            first ? "plot " : ", \\\n  ");
}

/* ---- memory_timeline.png ------------------------------------------------------------ */

/* The short name of a phase ("F3" for the forward of unit 3); "" for a
 * snapshot, which marks no change of phase. */
static void phase_label(const char *phase, int unit, char *out, size_t n)
{
    static const struct {
        const char *phase, *label;
        int numbered;
    } labels[] = {
        {"setup", "setup", 0},     {"forward", "F", 1},     {"backward", "B", 1},
        {"reduction", "R", 0},     {"optimizer", "opt", 0}, {"checkpoint", "ckpt", 0},
        {"evaluation", "eval", 0}, {"snapshot", "", 0},
    };
    for (size_t i = 0; i < sizeof labels / sizeof labels[0]; i++)
        if (strcmp(phase, labels[i].phase) == 0) {
            if (labels[i].numbered && unit >= 0)
                snprintf(out, n, "%s%d", labels[i].label, unit);
            else
                snprintf(out, n, "%s", labels[i].label);
            return;
        }
    snprintf(out, n, "%s", phase); /* a phase this table does not know yet */
}

/* Whether events i and j are in the same (phase, unit). */
static int same_phase(const struct plot_timeline *t, size_t i, size_t j)
{
    return strcmp(t->phase[i], t->phase[j]) == 0 && t->unit[i] == t->unit[j];
}

/* Marks where the (phase, unit) changes: a dotted line, and the new
 * phase's short name above the plot. A return to the phase before an
 * interlude (the backward of unit 3 after a reduction inside it) is no new
 * phase; a name that would overlap the one before it is left out, its line
 * kept. */
static void phase_marks(FILE *f, const struct plot_timeline *t)
{
    const double span = t->ms[t->n - 1] > 0 ? t->ms[t->n - 1] : 1.0;
    double last_label = -INFINITY;
    size_t current = 0, before = 0; /* first events of the current and the previous segment */
    for (size_t i = 0; i < t->n; i++) {
        if (i > 0 && same_phase(t, i, current))
            continue;
        const int resumed = i > 0 && current != before && same_phase(t, i, before);
        before = current;
        current = i;
        char label[40];
        phase_label(t->phase[i], t->unit[i], label, sizeof label);
        if (resumed || !label[0])
            continue;
        fprintf(f,
                "set arrow from %.6f, graph 0 to %.6f, graph 1 nohead dt 3 lw 1 "
                "lc rgb '#555555' front\n",
                t->ms[i], t->ms[i]);
        if (t->ms[i] - last_label < 0.02 * span)
            continue;
        last_label = t->ms[i];
        fprintf(f,
                "set label '%s' at %.6f, graph 1 left rotate by 90 offset 0.3,0.4 font ',9' "
                "tc rgb '#333333'\n",
                label, t->ms[i]);
    }
}

/* One row: ms, 0, then the running sums (MiB) of the categories drawn. */
static void timeline_row(FILE *f, double ms, const double *current, const int *drawn, int n_cat)
{
    double sum = 0.0;
    fprintf(f, "%.6f 0", ms);
    for (int k = 0; k < n_cat; k++)
        if (drawn[k]) {
            sum += current[k] / 1048576.0;
            fprintf(f, " %.6f", sum);
        }
    fputc('\n', f);
}

void plot_timeline_script(FILE *f, const struct plot_timeline *t, const char *run_name)
{
    int drawn[PLOT_MAX_CATEGORIES] = {0};
    for (size_t i = 0; i < t->n; i++)
        for (int k = 0; k < t->cats.n; k++)
            drawn[k] |= t->current[i * PLOT_MAX_CATEGORIES + k] > 0;
    char title[768];
    snprintf(title, sizeof title, "Memory of rank %d during step %ld, by category (%s)", t->rank,
             t->step, run_name);
    fputs("set title ", f);
    gnuplot_quote(f, title);
    fprintf(f,
            " offset 0,1.6\nset xlabel 'time in step (ms)'\nset ylabel 'MiB'\n"
            "set key outside right top vertical invert\nset tmargin 6\nset yrange [0:*]\n"
            "set xrange [0:%.6f]\nset style fill solid 0.85 noborder\n",
            t->ms[t->n - 1] > 0 ? t->ms[t->n - 1] : 1.0);
    phase_marks(f, t);
    fputs("$tl << EOD\n", f);
    for (size_t i = 0; i < t->n; i++) {
        if (i > 0)
            timeline_row(f, t->ms[i], &t->current[(i - 1) * PLOT_MAX_CATEGORIES], drawn, t->cats.n);
        timeline_row(f, t->ms[i], &t->current[i * PLOT_MAX_CATEGORIES], drawn, t->cats.n);
    }
    fputs("EOD\n", f);
    int column = 2;
    for (int k = 0; k < t->cats.n; k++) {
        if (!drawn[k])
            continue;
        fprintf(f, "%s$tl using 1:%d:%d with filledcurves lc rgb '%s' title ",
                column == 2 ? "plot " : ", \\\n  ", column, column + 1,
                plot_category_colour(&t->cats, k));
        gnuplot_quote(f, t->cats.name[k]);
        column++;
    }
    if (column == 2) /* nothing counted: the axes alone */
        fputs("plot $tl using 1:2 with lines lc rgb '#999999' title 'no bytes counted'", f);
    fputc('\n', f);
}
