/* plan/calibrate_rates.h — element-wise work timed on one core, for
 * calibrate (calibrate.h): each optimizer's update and the 4-bit weights'
 * dequantisation.
 *
 * Both run on a rank's one thread in training (a rank per core), element
 * by element, at a pace of their own rather than the memory's: 8-bit
 * AdamW decodes and encodes its moments, a QLoRA weight is decoded at
 * every use. The rates are elements per second of one core; the planner
 * gives each rank its core's rate (plan_cost.c).
 */
#ifndef ZT_PLAN_CALIBRATE_RATES_H
#define ZT_PLAN_CALIBRATE_RATES_H

#include <stddef.h>
#include <stdio.h>

#include "../common/status.h"
#include "../config/machine.h"

struct ops_backend;

/* Times every optimizer of the table on n parameter elements with the
 * CPU op table `ops` on the calling thread (bf16 gradients and working
 * copy where the update takes them, as a bf16 run's), the median of reps
 * after one warm-up, into m->updates; then the NF4 decode (double
 * quantised, into bf16) of n weights into m->dequantize_4bit. Prints a
 * table to `report` (NULL: nowhere). Errors: ZT_ERR_NOMEM, the updates'. */
zt_status calibrate_rates(const struct ops_backend *ops, size_t n, int reps, struct machine *m,
                          FILE *report);

/* The median of v[0..n), n >= 1 (v sorted in place): every timing of
 * calibrate's is the median of its repetitions. */
double calibrate_median(double *v, int n);

/* The table calibrate_rates printed, from m, for the machine file's
 * comment. */
void calibrate_rates_put(FILE *f, const struct machine *m, size_t n, int reps);

#endif
