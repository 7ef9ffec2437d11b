/* cli/export.h — `zerotrain export`: a checkpoint's weights as
 * Hugging Face weights of the model's family (one safetensors file or
 * shards with their index), and a fine-tuning checkpoint's LoRA adapters
 * as PEFT writes them, or merged into the model. */
#ifndef ZT_CLI_EXPORT_H
#define ZT_CLI_EXPORT_H

#include <stdio.h>

#include "../common/status.h"

/* What is written. */
enum export_what {
    EXPORT_MODEL,   /* the model; refused for a checkpoint with adapters */
    EXPORT_MERGED,  /* --merge: the model with its adapters merged in */
    EXPORT_ADAPTER, /* --adapter: the adapters alone, as a PEFT folder */
};

struct export_request {
    const char *checkpoint;     /* a step folder, or a checkpoint.dir whose `latest` names one */
    const char *out;            /* the .safetensors path; the folder for EXPORT_ADAPTER */
    const char *dtype;          /* "fp32", "bf16" or "fp16" */
    const char *max_shard_size; /* Hugging Face's size strings; NULL: "5GB" */
    enum export_what what;
};

/* Reads the checkpoint (its base too, when kept outside it: run_checkpoint.h),
 * validates it and writes what `rq` asks for in `dtype`:
 *   EXPORT_MODEL, EXPORT_MERGED: `out` with the Hugging Face names and
 *   shapes of the model's family, cut into shards of at most
 *   max_shard_size as formats/hf_weights.h describes; merged, each adapted
 *   weight is W + (lora_alpha / r) B A (worker/lora.h, lora_merge);
 *   EXPORT_ADAPTER: the folder `out` (created if missing) with
 *   adapter_model.safetensors and adapter_config.json
 *   (formats/peft_adapter.h), base_model_name_or_path the base's file.
 * One line to `report`. Errors: ZT_ERR_USAGE (dtype, size, a size given
 * with EXPORT_ADAPTER: checked before anything is read, naming the value;
 * EXPORT_MODEL of a checkpoint with adapters and EXPORT_ADAPTER of one
 * without, saying what to ask for), ZT_ERR_CHECKPOINT, ZT_ERR_UNSUPPORTED
 * (a family without a mapping), ZT_ERR_IO. */
zt_status export_run(const struct export_request *rq, FILE *report);

#endif
