/* coordinator/train.h — the `train` and `eval` commands. */
#ifndef ZT_COORDINATOR_TRAIN_H
#define ZT_COORDINATOR_TRAIN_H

#include "../report/report.h"
#include "session.h"

/* Runs training as configured; on every rank. *print_here tells main
 * whether this rank should print the error message on failure. */
zt_status train_run(const struct run_options *o, int *print_here);

/* One optimizer step (0-based `step`) of an open session: the micro steps,
 * the engine's reduction and update. Fills r's loss (mean over all ranks'
 * micro batches), grad_norm and comm (this step's traffic); r->lr must be
 * set. Collective. */
zt_status train_step(struct run_session *s, long step, struct step_record *r);

/* Computes the validation loss; rank 0 prints "val_loss <value>" last. */
zt_status eval_run(const struct run_options *o, int *print_here);

#endif
