/* report/report.h — what a run tells its user: the files and console lines
 * it writes while it trains, and the plots drawn from them afterwards.
 *
 * The run (coordinator/) fills a step's numbers and owns each rank's memory
 * ledger; the writers here only format and write what they are handed, and
 * never change the run. Each writer is one header:
 *
 *   metrics.h          metrics.jsonl, one JSON object per step and per
 *                      evaluation (struct step_record is what a step hands)
 *   csv_monitor.h      DeepSpeed's csv_monitor: one CSV file per metric
 *   progress.h         rank 0's console: log lines and a progress line
 *   memory_report.h    memory_report.json and its table, each rank's peaks
 *   memory_summary.h   the torch.cuda.memory_summary()-shaped table
 *   memory_timeline.h  every change of the ledger over chosen steps
 *   plot.h             `zerotrain plot`: PNGs drawn from run folders
 *
 * and, for this folder only, log_trim.h (a resumed run's logs cut back to
 * its checkpoint), plot_data.h (reading a run folder), plot_impl.h and
 * gnuplot.h (drawing through a gnuplot child).
 *
 * Layering: below coordinator/, plan/ and cli/, which include this header;
 * above comm/, shard/, worker/, config/ and common/. Nothing here includes
 * coordinator/: a writer that needed the session would make the run and its
 * reports one knot again.
 */
#ifndef ZT_REPORT_REPORT_H
#define ZT_REPORT_REPORT_H

#include "csv_monitor.h"
#include "memory_report.h"
#include "memory_summary.h"
#include "memory_timeline.h"
#include "metrics.h"
#include "plot.h"
#include "progress.h"

#endif
