/* report/progress.h — rank 0's console: log lines and a progress line.
 *
 * On a terminal the current step is shown as one line redrawn in place
 * ("step 12/100  ETA 1m02s"), and log lines scroll past it; when output goes
 * to a file or pipe only the plain log lines are written. */
#ifndef ZT_REPORT_PROGRESS_H
#define ZT_REPORT_PROGRESS_H

#include <stdio.h>

struct progress {
    FILE *out;
    int tty;   /* out is a terminal */
    int drawn; /* a progress line is on screen */
};

enum progress_mode { PROGRESS_AUTO, PROGRESS_ALWAYS, PROGRESS_NEVER };

/* AUTO draws the progress line when `out` is a terminal, except under Open
 * MPI's launcher: it hands every rank a pseudo-terminal even when mpirun's
 * own output goes to a file (open-mpi/ompi#7868), so there only ALWAYS
 * (--progress) draws it. */
void progress_init(struct progress *p, FILE *out, enum progress_mode mode);
/* Prints a log line (a newline is added), scrolling past the progress line. */
void progress_log(struct progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Redraws the progress line (terminals only). */
void progress_update(struct progress *p, long step, long total, double seconds_left);
/* Removes the progress line. */
void progress_finish(struct progress *p);
/* Formats seconds as "1h02m", "3m05s" or "12s" into buf. */
void progress_format_duration(double seconds, char *buf, size_t n);

#endif
