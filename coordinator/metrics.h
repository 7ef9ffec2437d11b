/* coordinator/metrics.h — the per-step metrics file (JSON lines).
 *
 * One object per optimizer step: step, loss, lr, grad_norm, step_ms,
 * tokens_per_s, gflops, loss_scale, skipped, comm_bytes {kind: bytes this
 * step}, comm_calls, comm_wait_ms; and one per evaluation: step, val_loss, val_tokens. Written
 * by rank 0 only; flushed per line so a killed run keeps what it logged. */
#ifndef ZT_COORDINATOR_METRICS_H
#define ZT_COORDINATOR_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "../comm/comm.h"
#include "../common/status.h"

struct step_record {
    long step; /* 1-based */
    double loss, lr, grad_norm, step_ms, tokens_per_s, gflops;
    double loss_scale;      /* the scale this step's backward used (1 without fp16) */
    int skipped;            /* an fp16 overflow skipped the update */
    struct comm_stats comm; /* this step's traffic of this rank */
};

/* Opens (truncates) path. Errors: ZT_ERR_IO. */
zt_status metrics_open(const char *path, FILE **out);
void metrics_write_step(FILE *f, const struct step_record *r);
void metrics_write_eval(FILE *f, long step, double val_loss, uint64_t tokens);

#endif
