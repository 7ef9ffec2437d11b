/* plan/calibrate_ops.h — the model's non-GEMM ops timed on one core, for
 * calibrate (calibrate.h): the fused attention and the element-wise ops.
 *
 * A CPU runs both well below what the planner would otherwise assume:
 * the attention's tile loops (softmax rows, a fifth product in the
 * backward) below the GEMMs' rate, and the norms, activations, residuals
 * and casts below the triad's bandwidth (a rank's one core cannot draw
 * the whole memory's). The rates are one core's, as the optimizer
 * updates' are; the planner gives a rank its cores' (plan_cost.c).
 */
#ifndef ZT_PLAN_CALIBRATE_OPS_H
#define ZT_PLAN_CALIBRATE_OPS_H

#include <stdio.h>

#include "../common/status.h"
#include "../config/machine.h"

struct ops_backend;

/* Times, on the calling thread, the median of reps (1..16) after one
 * warm-up:
 *   - attention_forward then attention_backward over one sequence of
 *     512 tokens, width 1024, heads of 64 and of 128, in each type the
 *     ops compute (fp32's rate for the others), into m->attention_flops:
 *     FLOPs as the planner counts them, 12 T C a token (the whole T x T);
 *   - one block's element-wise ops on 512 x 2048 bf16 activations (fp32
 *     where the ops compute no bf16): layernorm forward and backward,
 *     GELU forward and backward over the 4x wide rows, a residual add, a
 *     gradient's add, and an fp32 gradient view zeroed and cast down,
 *     into m->elementwise_bandwidth: the bytes each op reads and writes.
 * Prints a table to `report` (NULL: nowhere). Errors: ZT_ERR_NOMEM, the
 * ops'. */
zt_status calibrate_ops(const struct ops_backend *ops, int reps, struct machine *m, FILE *report);

/* The table calibrate_ops printed, from m, for the machine file's
 * comment. */
void calibrate_ops_put(FILE *f, const struct machine *m, int reps);

#endif
