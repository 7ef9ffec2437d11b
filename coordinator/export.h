/* coordinator/export.h — `zerotrain export`: a checkpoint's weights as a
 * Hugging Face GPT-2 safetensors file. */
#ifndef ZT_COORDINATOR_EXPORT_H
#define ZT_COORDINATOR_EXPORT_H

#include <stdio.h>

#include "../common/status.h"

/* Reads the checkpoint in `dir` (a step folder, or a checkpoint.dir whose
 * `latest` names one), validates it, and writes `out` with HF GPT-2 names
 * and shapes in `dtype` ("fp32", "bf16" or "fp16"); one line to `report`.
 * Errors: ZT_ERR_USAGE (dtype), ZT_ERR_CHECKPOINT, ZT_ERR_IO. */
zt_status export_run(const char *dir, const char *out, const char *dtype, FILE *report);

#endif
