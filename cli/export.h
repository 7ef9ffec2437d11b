/* cli/export.h — `zerotrain export`: a checkpoint's weights as a folder
 * that loads as save_pretrained's does (coordinator/run_export.h), from
 * the command line's options. */
#ifndef ZT_CLI_EXPORT_H
#define ZT_CLI_EXPORT_H

#include <stdio.h>

#include "../common/status.h"
#include "../coordinator/run_export.h"

struct export_request {
    const char *checkpoint;     /* a step folder, or a checkpoint.dir whose `latest` names one */
    const char *out;            /* the folder, or a model's NAME.safetensors path */
    const char *dtype;          /* "fp32", "bf16" or "fp16" */
    const char *max_shard_size; /* Hugging Face's size strings; NULL: "5GB" */
    enum run_export_what what;
    int force; /* --force */
};

/* Checks the options (ZT_ERR_USAGE naming the value: dtype, size, a size
 * given with RUN_EXPORT_ADAPTER, before anything is read), then writes as
 * run_export_write does, with its errors. One line to `report` per file
 * group written. */
zt_status export_run(const struct export_request *rq, FILE *report);

#endif
