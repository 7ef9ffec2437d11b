/* report/gnuplot.h — one PNG drawn by a gnuplot child process.
 *
 * zerotrain draws its plots with gnuplot rather than a plotting library of
 * its own: a plot is a script, and gnuplot (Debian's gnuplot-nox, which
 * scripts/deps.sh installs) is the only dependency. A job collects its
 * script in an anonymous temporary file (the caller writes the commands and
 * the data, inline as `$name << EOD` blocks, through `script`), which then
 * becomes gnuplot's standard input; gnuplot's standard output and error go
 * to another anonymous file. So nothing is left behind whatever happens,
 * there is no pipe to deadlock on, and a gnuplot that dies early costs no
 * SIGPIPE. The PNG is drawn under a temporary name in the output folder and
 * renamed over the final one only when gnuplot exits 0: a failed plot
 * leaves no half-drawn file.
 *
 * Every plot has the same look: the pngcairo terminal at 1000 x 600 with
 * plain text (no enhanced-text markup, so '_' in a run's name stays an
 * '_'), a light grid, and the colours of gnuplot_colour().
 *
 * Life cycle: gnuplot_begin -> fprintf(job.script, ...) -> gnuplot_finish
 * or gnuplot_abort; both release everything.
 */
#ifndef ZT_REPORT_GNUPLOT_H
#define ZT_REPORT_GNUPLOT_H

#include <stdio.h>

#include "../common/status.h"

struct gnuplot_job {
    FILE *script;        /* the commands; the terminal and output are set already */
    char png[4096];      /* the file the plot becomes */
    char tmp_png[4160];  /* where gnuplot draws it */
    const char *program; /* gnuplot's path */
};

/* Finds gnuplot on PATH; *program (static storage) gets its path.
 * Errors: ZT_ERR_IO "gnuplot not found on PATH; install gnuplot-nox
 * (scripts/deps.sh)". */
zt_status gnuplot_find(const char **program);

/* Starts the script of a plot that will be written to `png`, with
 * gnuplot's terminal, output and common style set. Errors: ZT_ERR_IO
 * (no temporary file). */
zt_status gnuplot_begin(struct gnuplot_job *job, const char *program, const char *png);

/* Runs gnuplot on the script and, when it exits 0, renames the drawing to
 * job->png. Errors: ZT_ERR_IO "gnuplot failed drawing PNG (exit N): <what
 * gnuplot printed>", or naming the system call that failed. */
zt_status gnuplot_finish(struct gnuplot_job *job);

/* Releases a job without drawing. */
void gnuplot_abort(struct gnuplot_job *job);

/* Writes s as a gnuplot string literal: single-quoted, where nothing is an
 * escape but '' for a quote. */
void gnuplot_quote(FILE *f, const char *s);

/* The i-th colour of the plots' palette ("#1f77b4", Tableau's 10 and two
 * more), cycling. */
const char *gnuplot_colour(int i);

#endif
