/* report/log_trim.h — cutting a run's line logs back to a checkpoint.
 *
 * A run appends one line per step (or per evaluation) to its logs:
 * metrics.jsonl, csv_monitor's CSV files. A resumed run keeps the history
 * its checkpoint covers and drops what comes after it (written by the run
 * being resumed after its checkpoint, and about to be written again), as
 * TensorBoard purges orphaned events. Each log says how to read the
 * position of one of its lines (a step, a sample count); a line that has
 * none (a header, another program's line) is kept where it is. The kept
 * lines go to a temporary file that replaces the old one whole
 * (atomic_file.h), so a crash while trimming loses nothing.
 */
#ifndef ZT_REPORT_LOG_TRIM_H
#define ZT_REPORT_LOG_TRIM_H

#include "../common/status.h"

/* The position a line records, or -1 when it records none (kept). `line`
 * ends with its newline. */
typedef long (*log_line_position)(const char *line);

/* Drops from the file at `path` every line whose position is past
 * `keep_through`, and a last line without its newline (cut short by a
 * killed run); the other lines keep their order. A missing file is left
 * missing. `what` names the file in messages ("metrics file").
 * Errors: ZT_ERR_IO "cannot read|write WHAT PATH: <strerror>". */
zt_status log_trim_after(const char *path, const char *what, long keep_through,
                         log_line_position position);

#endif
