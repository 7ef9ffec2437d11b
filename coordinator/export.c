/* coordinator/export.c — see export.h. One process reads every rank's
 * shard of the checkpoint (no MPI), rebuilds the full fp32 weights in the
 * flat order and hands them to the Hugging Face writer of the model family
 * (formats/hf_weights.h). */
#include "export.h"

#include <stdlib.h>
#include <string.h>

#include "../formats/hf_weights.h"
#include "../formats/safetensors_set.h"
#include "run_checkpoint.h"

static zt_status parse_dtype(const char *name, enum zt_dtype *out)
{
    if (!zt_precision_from_name(name, out))
        return zt_error_set(ZT_ERR_USAGE, "--dtype %s: expected fp32, bf16 or fp16", name);
    return ZT_OK;
}

static zt_status parse_max_shard_size(const char *text, uint64_t *out)
{
    *out = HF_WEIGHTS_DEFAULT_MAX_SHARD;
    if (text && !safetensors_set_parse_size(text, out))
        return zt_error_set(ZT_ERR_USAGE,
                            "--max-shard-size %s: expected a size of at least one byte like 5GB, "
                            "500MB, 100KB (powers of 10), 2GiB, 512MiB, 64KiB (powers of 2) or a "
                            "number of bytes",
                            text);
    return ZT_OK;
}

zt_status export_run(const char *dir, const char *out, const char *dtype_name,
                     const char *max_shard_size, FILE *report)
{
    enum zt_dtype dtype = ZT_F32;
    uint64_t max_shard;
    char step_dir[4096];
    struct ckpt_meta meta;
    float *params;
    int n_shards = 1;
    ZT_TRY(parse_dtype(dtype_name, &dtype));
    ZT_TRY(parse_max_shard_size(max_shard_size, &max_shard));
    ZT_TRY(ckpt_resolve(dir, step_dir, sizeof step_dir));
    ZT_TRY(run_checkpoint_read_weights(step_dir, &meta, &params));
    struct param_table table;
    zt_status st = param_table_build(&meta.model, &table);
    if (st == ZT_OK && table.n_params != meta.n_params)
        st = zt_error_set(ZT_ERR_CHECKPOINT,
                          "%s/meta.json: %llu parameters, but its model shape has %zu", step_dir,
                          (unsigned long long)meta.n_params, table.n_params);
    if (st == ZT_OK)
        st = hf_weights_export(&table, params, dtype, out, max_shard, &n_shards);
    if (st == ZT_OK && n_shards == 1)
        fprintf(report, "wrote %s: %zu parameters of step %lld (%s) as %s\n", out, table.n_params,
                (long long)meta.step, step_dir, dtype_name);
    else if (st == ZT_OK)
        fprintf(report,
                "wrote %s.index.json and %d shards beside it: %zu parameters of step %lld (%s) "
                "as %s\n",
                out, n_shards, table.n_params, (long long)meta.step, step_dir, dtype_name);
    param_table_free(&table);
    free(params);
    ckpt_meta_free(&meta);
    return st;
}
