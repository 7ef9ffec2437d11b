/* report/csv_monitor.h — DeepSpeed's csv_monitor: each metric in a
 * CSV file of its own.
 *
 * DeepSpeed's CSV monitor (deepspeed/monitor/csv_monitor.py) writes each
 * event (name, value, step) to output_path/job_name/FILE.csv, FILE being
 * the event's name with '/' and ' ' replaced by '_'; the file's first row
 * is "step,<the name's last '/' component>", then one "step,value" row per
 * event, values as Python writes floats (repr: 0.001, 3e-05, 65536.0, nan).
 * DeepSpeed's engine logs Train/Samples/train_loss, Train/Samples/lr and,
 * with fp16, Train/Samples/loss_scale, with the global sample count as the
 * step. The same files come out of zerotrain, so a dashboard that reads
 * DeepSpeed's reads ours, and three more of ours under the same scheme:
 *
 *   Train_Samples_train_loss.csv    step,train_loss    every step
 *   Train_Samples_lr.csv            step,lr            every step
 *   Train_Samples_loss_scale.csv    step,loss_scale    every step, fp16 only
 *   Train_Samples_grad_norm.csv     step,grad_norm     every step (ours)
 *   Train_Samples_tokens_per_s.csv  step,tokens_per_s  every step (ours)
 *   Eval_Samples_val_loss.csv       step,val_loss      every evaluation (ours)
 *
 * The values are metrics.jsonl's (metrics.h). The step column is a sample
 * count, train_batch_size (micro batch x accumulation x data-parallel
 * ranks) per optimizer step: a training step's row is at the samples seen
 * before it, (step - 1) x train_batch_size, and an evaluation's at the
 * samples its weights were trained on, step x train_batch_size. These are
 * DeepSpeed's pairs: it logs train_loss in the backward, before the count
 * moves on, and lr and loss_scale after the step, at the next count, with
 * the scheduler and the scaler already on the next step's values. (So
 * DeepSpeed's lr file starts a step later and ends a step later than ours;
 * where both have a row they agree.)
 *
 * Where: output_path joined with job_name as Python's os.path.join joins
 * them; the default output_path "" puts the job folder in the current
 * directory, as DeepSpeed does. A new run truncates the files; a resumed
 * one keeps the rows its checkpoint covers and appends (log_trim.h), as
 * metrics.jsonl does (DeepSpeed appends to whatever is there, with another
 * header). Written by rank 0 only, flushed per row.
 *
 * Life cycle: zero-initialised (closed: every write does nothing) ->
 * csv_monitor_open on rank 0 when csv_monitor.enabled -> writes ->
 * csv_monitor_close (safe on a closed monitor).
 */
#ifndef ZT_REPORT_CSV_MONITOR_H
#define ZT_REPORT_CSV_MONITOR_H

#include <stdio.h>

#include "../common/status.h"
#include "../config/config.h"
#include "metrics.h"

enum { CSV_MONITOR_FILES = 6 };

struct csv_monitor {
    FILE *files[CSV_MONITOR_FILES]; /* one per event; NULL: not written by this run */
    long samples_per_step;          /* train_batch_size */
};

/* Opens the folder and files of cfg->csv_monitor for a run that starts
 * after step `resumed_at` (0: a new run), `samples_per_step` samples per
 * optimizer step; does nothing when it is not enabled. Errors (the monitor
 * is left closed): ZT_ERR_IO "csv_monitor: cannot create directory DIR:
 * <strerror>", "csv_monitor: cannot write PATH: <strerror>", and
 * log_trim_after's. */
zt_status csv_monitor_open(struct csv_monitor *m, const struct zt_config *cfg,
                           long samples_per_step, long resumed_at);

/* A training step's rows (r->step counts from 1). */
void csv_monitor_write_step(struct csv_monitor *m, const struct step_record *r);

/* An evaluation's row, after optimizer step `step`. */
void csv_monitor_write_eval(struct csv_monitor *m, long step, double val_loss);

/* Closes the files and zeroes *m. */
void csv_monitor_close(struct csv_monitor *m);

#endif
