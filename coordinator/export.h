/* coordinator/export.h — `zerotrain export`: a checkpoint's weights as
 * Hugging Face weights of the model's family, one safetensors file or
 * shards with their index. */
#ifndef ZT_COORDINATOR_EXPORT_H
#define ZT_COORDINATOR_EXPORT_H

#include <stdio.h>

#include "../common/status.h"

/* Reads the checkpoint in `dir` (a step folder, or a checkpoint.dir whose
 * `latest` names one), validates it, and writes `out` with the Hugging
 * Face names and shapes of the model's family in `dtype` ("fp32", "bf16"
 * or "fp16"), cut into shards of at most `max_shard_size` (Hugging Face's
 * size strings, "5GB", "2GiB" or a byte count; NULL: "5GB", its default)
 * as formats/hf_weights.h describes; one line to `report`. Errors:
 * ZT_ERR_USAGE (dtype, size: checked before anything is read, naming the
 * value), ZT_ERR_CHECKPOINT, ZT_ERR_UNSUPPORTED (a family without a
 * mapping), ZT_ERR_IO. */
zt_status export_run(const char *dir, const char *out, const char *dtype,
                     const char *max_shard_size, FILE *report);

#endif
