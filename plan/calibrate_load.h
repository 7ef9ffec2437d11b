/* plan/calibrate_load.h — model.init_from's loader timed on one core, for
 * calibrate (calibrate.h) and the planner's load time (plan_cost.c).
 *
 * A rank loads on its one thread, and on a CPU the work per element is
 * what bounds it once the file is in the page cache: the 16-bit values
 * widened into fp32, a transposed tensor put back in our layout, a QLoRA
 * base encoded into NF4 with its scales quantised again. The disk's part
 * is the nvme rates' (the weights folder read cold).
 */
#ifndef ZT_PLAN_CALIBRATE_LOAD_H
#define ZT_PLAN_CALIBRATE_LOAD_H

#include <stdio.h>

#include "../common/status.h"
#include "../config/machine.h"

/* Times, on the calling thread, the median of reps (1..16) after one
 * warm-up, over a 2048 x 4096 tensor:
 *   - m->weights_read: a bf16 safetensors file that calibrate writes in
 *     dir (and removes), read through the page cache into fp32 in the
 *     loader's pieces of 2^18 elements;
 *   - m->weights_read_transposed: the same file read as a tensor stored
 *     transposed, the reader's way: tiles of rows widened and put back
 *     into our layout (hf_weights_scatter_tile);
 *   - m->quantize_4bit: NF4 with double quantisation (quant4.h).
 * Elements a second each. Prints a table to `report`
 * (NULL: nowhere). Errors: ZT_ERR_IO naming the file, ZT_ERR_NOMEM. */
zt_status calibrate_load(const char *dir, int reps, struct machine *m, FILE *report);

/* The table calibrate_load printed, from m, for the machine file's
 * comment. */
void calibrate_load_put(FILE *f, const struct machine *m, int reps);

#endif
