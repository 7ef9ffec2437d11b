/* report/plot.h — `zerotrain plot`: PNG plots of runs, drawn by
 * gnuplot.
 *
 *   zerotrain plot RUN_DIR... [--out DIR] [--rank R]
 *
 * Each RUN_DIR is a run folder of `zerotrain train` (run.output_dir: it
 * holds config.yaml and metrics.jsonl); its name in legends is the
 * folder's base name, with the parent's name before it where two runs'
 * base names are the same. The plots (plot_data.h says what is read):
 *
 *   loss.png             training loss against step, one colour per run,
 *                        validation loss as points on a dashed line of the
 *                        same colour
 *   lr.png               learning rate
 *   grad_norm.png        gradient norm before clipping (log scale when it
 *                        spans more than 30x)
 *   loss_scale.png       the fp16 loss scale (log 2), when some run is fp16
 *   throughput.png       tokens/s
 *   memory.png           per run with memory_report.json: each rank's peak
 *                        per ledger category as a stacked bar, the single-
 *                        device baseline beside them, a dot at each peak of
 *                        the total (the categories' own peaks need not
 *                        coincide, so the stack may stand above it)
 *   memory_timeline.png  one rank (R, default 0) of the first run with
 *                        memory_timeline.jsonl, over the last step it
 *                        recorded: `current` of each category as stacked
 *                        areas against ms since the step's first event,
 *                        with a mark where the phase (and unit) changes:
 *                        F3 / B3 the forward / backward of unit 3, R the
 *                        reduction, opt the optimizer, ckpt, eval
 *
 * A plot whose data no run has is skipped with a line saying why; every
 * file written gets a line, and the last line is "plots in DIR". The PNGs go
 * to --out (default: the first run's plots/ folder, created). Errors:
 * ZT_ERR_USAGE (a folder that is not a run folder; --rank of a rank the
 * timeline lacks), plot_data.h's for a malformed file, ZT_ERR_IO (gnuplot
 * not on PATH, or failing), ZT_ERR_NOMEM.
 */
#ifndef ZT_REPORT_PLOT_H
#define ZT_REPORT_PLOT_H

#include <stdio.h>

#include "../common/status.h"

struct plot_options {
    const char *const *runs; /* n_runs run folders */
    int n_runs;
    const char *out_dir; /* NULL: <first run>/plots */
    int rank;            /* memory_timeline.png's rank; -1: 0, and no error if it is missing */
};

/* Draws the plots of o->runs, reporting each file (or why it was skipped)
 * on `out`. */
zt_status plot_run(const struct plot_options *o, FILE *out);

#endif
