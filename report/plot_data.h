/* report/plot_data.h — what `zerotrain plot` reads from a run folder.
 *
 * A run folder (train's run.output_dir) holds config.yaml and metrics.jsonl
 * always, and memory_report.json and memory_timeline.jsonl when the run
 * wrote them. This module reads them into plain arrays for the plots and
 * knows nothing of gnuplot; plot.c draws.
 *
 *   metrics.jsonl          one JSON object per line: a step's (loss, lr,
 *                          grad_norm, loss_scale, tokens_per_s, ...) or an
 *                          evaluation's (val_loss); null values (a NaN
 *                          loss) are left out of the series
 *   config.yaml            fp16.enabled, which makes the loss scale a
 *                          quantity worth a plot
 *   memory_report.json     each rank's peak per ledger category, its peak
 *                          of the total, and the single-device baseline
 *                          (memory_report.h); the categories
 *                          are whatever keys `peak` has, not a list here
 *   memory_timeline.jsonl  one ledger event per line, several ranks' in one
 *                          file: rank, time (s since the ledger started),
 *                          step (0: setup), phase, unit, and `current`, the
 *                          bytes of every category after the event; only
 *                          one rank's events of its last step are kept
 *
 * Errors name the file and, for a line-per-record file, the line
 * ("metrics.jsonl: line 7 is not valid JSON at byte 12: ...",
 * "metrics.jsonl:7: \"loss\" is a string, not a number or null"), with
 * ZT_ERR_DATA; a file that cannot be read is ZT_ERR_IO. A last line without
 * its newline (a run still writing, or killed mid-line) is left out.
 *
 * Ownership: each struct is filled by its reader and released by its
 * *_free, which is safe on a zeroed struct.
 */
#ifndef ZT_REPORT_PLOT_DATA_H
#define ZT_REPORT_PLOT_DATA_H

#include <stddef.h>

#include "../common/status.h"

/* The metrics a run's curves show, in metrics.jsonl's keys. */
enum plot_metric {
    PLOT_LOSS,         /* "loss" */
    PLOT_VAL_LOSS,     /* "val_loss" */
    PLOT_LR,           /* "lr" */
    PLOT_GRAD_NORM,    /* "grad_norm" */
    PLOT_LOSS_SCALE,   /* "loss_scale" */
    PLOT_TOKENS_PER_S, /* "tokens_per_s" */
    PLOT_METRIC_COUNT
};

/* One curve: n points (step, value) in the file's order. */
struct plot_series {
    double *step, *value;
    size_t n, cap;
};

/* A run's metrics.jsonl and config.yaml. */
struct plot_metrics {
    struct plot_series series[PLOT_METRIC_COUNT];
    int fp16; /* config.yaml's fp16.enabled */
};

enum { PLOT_MAX_CATEGORIES = 32, PLOT_NAME = 64 };

/* Category names, in the order the file first gives them. */
struct plot_categories {
    int n;
    char name[PLOT_MAX_CATEGORIES][PLOT_NAME];
};

/* memory_report.json. */
struct plot_memory_report {
    struct plot_categories cats;
    int n_ranks;
    int *rank;          /* n_ranks: each row's rank */
    double *peak;       /* n_ranks x PLOT_MAX_CATEGORIES bytes, row-major (0 where absent) */
    double *total_peak; /* n_ranks: the peak of the sum */
    double baseline[PLOT_MAX_CATEGORIES];
    double baseline_total;
};

/* One rank's events of the last step memory_timeline.jsonl records. */
struct plot_timeline {
    int rank;
    long step;
    struct plot_categories cats;
    size_t n, cap;
    double *ms;             /* n: time since the step's first event, ms */
    char (*phase)[16];      /* n: "forward", ... */
    int *unit;              /* n: -1 without a unit */
    double *current;        /* n x PLOT_MAX_CATEGORIES bytes (0 where absent) */
    int min_rank, max_rank; /* the ranks the file has events of (-1, -1: none) */
};

/* Reads DIR/metrics.jsonl and DIR/config.yaml into *out. */
zt_status plot_metrics_read(const char *dir, struct plot_metrics *out);
void plot_metrics_free(struct plot_metrics *m);

/* Reads the memory report at `path` into *out. */
zt_status plot_memory_report_read(const char *path, struct plot_memory_report *out);
void plot_memory_report_free(struct plot_memory_report *r);

/* Reads the events of `rank` in the last step (>= 1) of the timeline at
 * `path`; out->n is 0 when the file has no such events (min_rank and
 * max_rank then say which ranks it has). */
zt_status plot_timeline_read(const char *path, int rank, struct plot_timeline *out);
void plot_timeline_free(struct plot_timeline *t);

#endif
