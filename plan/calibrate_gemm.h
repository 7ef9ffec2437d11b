/* plan/calibrate_gemm.h — linear layers timed on a node's CPU ops, for a
 * machine file's gemm_rates and matmul_flops (calibrate.h).
 *
 * A layer of `in` x `out` weights over `rows` rows is timed as training
 * runs it: the op table's matmul_forward, and matmul_backward once for the
 * input gradient and once for the weight gradient (no bias: the dense
 * products alone), on one thread and on every core, in fp32 and each
 * 16-bit type the ops compute. The shapes are the linear layers of the
 * models the guide runs (GPT-2 small and XL, a 1.3B GPT, Llama-2-7B, the
 * test configs' width 128) and LoRA's thin products; --quick times three
 * small ones. One core's rows are what a rank gets when the node's ranks
 * fill its cores; a CPU's 16-bit kernels change their rate with the shape
 * and the product far more than its fp32 ones do.
 */
#ifndef ZT_PLAN_CALIBRATE_GEMM_H
#define ZT_PLAN_CALIBRATE_GEMM_H

#include <stdio.h>

#include "../common/status.h"
#include "../config/machine.h"

struct compute_backend;

/* Times every shape on 1 and `cores` threads into m->gemm_rates (rates
 * rounded to 4 significant digits) and sets m->matmul_flops: each type's
 * median rate of the three products together over its every-core rows of
 * GPT-2 small's width (768), fp32's for a type the ops do not compute.
 * Leaves the ops on one thread. Errors: ZT_ERR_NOMEM, those of the ops,
 * ZT_ERR_INTERNAL for a rate that is not positive and finite. */
zt_status calibrate_gemm(struct compute_backend *be, int cores, int quick, struct machine *m);

/* The measured table and how it was measured, for the file's comment and
 * the report. */
void calibrate_gemm_put(FILE *f, const struct compute_backend *be, int quick,
                        const struct machine *m);

/* Small finite values, the same for a seed: buffers that keep products
 * and collectives finite over repetitions. */
void calibrate_fill(float *v, size_t n, int seed);

#endif
