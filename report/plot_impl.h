/* report/plot_impl.h — for plot*.c only: the runs as plot.c loads
 * them, and the memory plots' scripts (plot_memory.c), which plot.c
 * draws beside its curves. */
#ifndef ZT_REPORT_PLOT_IMPL_H
#define ZT_REPORT_PLOT_IMPL_H

#include <limits.h>
#include <stdio.h>

#include "plot_data.h"

/* One run folder, loaded. */
struct plot_run_data {
    const char *dir;     /* as given (in messages) */
    char real[PATH_MAX]; /* its absolute path, which names it */
    char name[512];      /* in legends and titles */
    struct plot_metrics metrics;
    int has_report; /* memory_report.json was there */
    struct plot_memory_report report;
};

/* Writes memory.png's script (after gnuplot_begin's lines) to f: the
 * stacked peaks of every run that has a memory report (at least one). */
void plot_memory_script(FILE *f, const struct plot_run_data *runs, int n_runs);

/* Writes memory_timeline.png's script to f for timeline t (t->n > 0) of
 * the run called `run_name`. */
void plot_timeline_script(FILE *f, const struct plot_timeline *t, const char *run_name);

/* The colour of a ledger category: the same in every plot, so a category
 * looks alike in memory.png and memory_timeline.png. */
const char *plot_category_colour(const struct plot_categories *c, int k);

#endif
