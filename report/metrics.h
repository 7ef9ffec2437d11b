/* report/metrics.h — the per-step metrics file (JSON lines).
 *
 * One object per optimizer step: step, time (Unix seconds when the line was
 * written), loss, lr, grad_norm, step_ms, tokens_per_s, gflops, loss_scale,
 * skipped, comm_bytes {kind: bytes this step}, the same split by link
 * class as comm.h models it, comm_bytes_intra and comm_bytes_inter (each
 * {kind: bytes}; intra + inter = comm_bytes), comm_calls, comm_wait_ms;
 * and one per evaluation: step, time, val_loss, val_tokens. A number JSON
 * cannot hold (the NaN loss of a step skipped on overflow) is null. Written
 * by rank 0 only; flushed per line so a killed run keeps what it logged. */
#ifndef ZT_REPORT_METRICS_H
#define ZT_REPORT_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "../comm/comm.h"
#include "../common/status.h"

struct step_record {
    long step; /* 1-based */
    double loss, lr, grad_norm, step_ms, tokens_per_s, gflops;
    double loss_scale; /* the scale this step's backward used (1 without fp16) */
    int skipped;       /* an fp16 overflow (or counted == 0) skipped the update */
    enum step_skip {
        STEP_SKIP_NONE,      /* not skipped */
        STEP_SKIP_OVERFLOW,  /* fp16's loss scaler: "overflow" */
        STEP_SKIP_MASKED,    /* no counted target: "masked" */
        STEP_SKIP_NONFINITE, /* run.on_nonfinite skip: "nonfinite" */
    } skip_reason;
    /* Steps skipped for non-finite values since the run (re)started, with
     * run.on_nonfinite skip; -1 otherwise (not written). */
    long nonfinite_skips;
    uint64_t counted;       /* the step's counted targets, all ranks (loss-masked ones not) */
    struct comm_stats comm; /* this step's traffic of this rank */
    /* The same per axis of the layout: tensor, pipeline, data parallel
     * (bytes sent, seconds waited), without the step's small agreement. */
    struct axis_traffic {
        uint64_t bytes;
        double wait_seconds;
    } axis[3];
    /* Under a pipeline: this rank's seconds computing passes and the span
     * of its schedule (pipeline.h); 0 and 0 without one. */
    double busy_seconds, span_seconds;
    /* Passes over the training data at the step's end under run.epochs;
     * <= 0 otherwise (not written). */
    double epoch;
};

/* Opens (truncates) path. Errors: ZT_ERR_IO. */
zt_status metrics_open(const char *path, FILE **out);
/* Opens path for a training run that starts at step `resumed_at` + 1: a
 * new run (resumed_at 0) truncates it; a resumed one keeps the lines of
 * steps up to resumed_at and appends after them (lines past it, and a last
 * line cut short, are dropped). Errors: ZT_ERR_IO. */
zt_status metrics_open_run(const char *path, long resumed_at, FILE **out);
void metrics_write_step(FILE *f, const struct step_record *r);
void metrics_write_eval(FILE *f, long step, double val_loss, uint64_t tokens);

#endif
