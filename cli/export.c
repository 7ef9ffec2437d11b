/* cli/export.c — see export.h. One process reads every rank's
 * shard of the checkpoint (no MPI) and its base when kept elsewhere,
 * rebuilds the table and the full fp32 weights in the flat order
 * (run_checkpoint_read_model) and hands them to the writer of what was
 * asked: the Hugging Face writer of the model family
 * (formats/hf_weights.h), after merging the adapters in for --merge, or
 * PEFT's adapter writer (formats/peft_adapter.h). */
#include "export.h"

#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "../common/size.h"
#include "../formats/hf_weights.h"
#include "../formats/peft_adapter.h"
#include "../formats/safetensors_set.h"
#include "../coordinator/run_checkpoint.h"

/* What one export writes from, and where. */
struct export_job {
    const struct export_request *rq;
    const char *step_dir;
    struct ckpt_meta meta;
    struct param_table table;
    float *params;
    enum zt_dtype dtype;
    uint64_t max_shard;
};

static zt_status parse_dtype(const char *name, enum zt_dtype *out)
{
    if (!zt_precision_from_name(name, out))
        return zt_error_set(ZT_ERR_USAGE, "--dtype %s: expected fp32, bf16 or fp16", name);
    return ZT_OK;
}

static zt_status parse_max_shard_size(const struct export_request *rq, uint64_t *out)
{
    const char *text = rq->max_shard_size;
    *out = HF_WEIGHTS_DEFAULT_MAX_SHARD;
    if (text && rq->what == EXPORT_ADAPTER)
        return zt_error_set(ZT_ERR_USAGE,
                            "--max-shard-size %s: an adapter is one file (--max-shard-size is for "
                            "the model)",
                            text);
    if (text && !zt_size_parse(text, out))
        return zt_error_set(ZT_ERR_USAGE,
                            "--max-shard-size %s: expected a size of at least one byte like 5GB, "
                            "500MB, 100KB (powers of 10), 2GiB, 512MiB, 64KiB (powers of 2) or a "
                            "number of bytes",
                            text);
    return ZT_OK;
}

/* The model, all of it, through the family's Hugging Face writer. */
static zt_status write_model(struct export_job *j, const struct param_table *t, const char *how,
                             FILE *report)
{
    int n_shards = 1;
    const char *out = j->rq->out;
    /* as save_pretrained: the folder is made, and config.json beside the
     * weights lets from_pretrained(folder) build the model they fill */
    char dir[4096];
    const char *slash = strrchr(out, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - out) : 1, slash ? out : ".");
    if (slash == out)
        snprintf(dir, sizeof dir, "/");
    ZT_TRY(zt_mkdir_p(dir));
    ZT_TRY(hf_weights_export(t, j->params, j->dtype, out, j->max_shard, &n_shards));
    ZT_TRY(hf_weights_write_config(t, j->dtype, dir));
    if (n_shards == 1)
        fprintf(report, "wrote %s and %s/config.json: %zu parameters of step %lld (%s)%s as %s\n",
                out, dir, t->n_params, (long long)j->meta.step, j->step_dir, how, j->rq->dtype);
    else
        fprintf(report,
                "wrote %s.index.json and %d shards beside it, with config.json: %zu "
                "parameters of step %lld (%s)%s as %s\n",
                out, n_shards, t->n_params, (long long)j->meta.step, j->step_dir, how,
                j->rq->dtype);
    return ZT_OK;
}

static zt_status export_model(struct export_job *j, FILE *report)
{
    if (j->table.lora.r > 0)
        return zt_error_set(ZT_ERR_USAGE,
                            "%s holds LoRA adapters (r %d) on a frozen model: export --merge "
                            "writes the model with them merged in, export --adapter --out DIR "
                            "the adapters in PEFT's format",
                            j->step_dir, j->table.lora.r);
    return write_model(j, &j->table, "", report);
}

static zt_status export_merged(struct export_job *j, FILE *report)
{
    if (j->table.lora.r == 0)
        return write_model(j, &j->table, ", which has no adapters to merge,", report);
    lora_merge(&j->table, j->meta.lora.alpha, j->params);
    const struct param_table base = param_table_base(&j->table);
    return write_model(j, &base, " with its adapters merged in", report);
}

static zt_status export_adapter(struct export_job *j, FILE *report)
{
    const struct ckpt_meta *m = &j->meta;
    if (j->table.lora.r == 0)
        return zt_error_set(ZT_ERR_USAGE,
                            "%s holds no LoRA adapters (it was not trained with lora.enabled): "
                            "export it without --adapter",
                            j->step_dir);
    const struct lora_spec spec = {.r = m->lora.r,
                                   .alpha = m->lora.alpha,
                                   .dropout = m->lora.dropout,
                                   .targets = (const char *const *)m->lora.targets,
                                   .n_targets = m->lora.n_targets};
    ZT_TRY(zt_mkdir_p(j->rq->out));
    ZT_TRY(peft_adapter_write(j->rq->out, &j->table, j->params, j->dtype, &spec,
                              m->base.kind == CKPT_BASE_FILE ? m->base.path : NULL));
    fprintf(report,
            "wrote %s/" PEFT_ADAPTER_WEIGHTS " and " PEFT_ADAPTER_CONFIG
            ": %zu adapter parameters (r %d) of step %lld (%s) as %s\n",
            j->rq->out, lora_n_params(&j->table), m->lora.r, (long long)m->step, j->step_dir,
            j->rq->dtype);
    return ZT_OK;
}

/* By enum export_what. */
static zt_status (*const writers[])(struct export_job *, FILE *) = {
    [EXPORT_MODEL] = export_model,
    [EXPORT_MERGED] = export_merged,
    [EXPORT_ADAPTER] = export_adapter,
};

zt_status export_run(const struct export_request *rq, FILE *report)
{
    char step_dir[4096];
    struct export_job j = {.rq = rq, .step_dir = step_dir, .dtype = ZT_F32};
    ZT_TRY(parse_dtype(rq->dtype, &j.dtype));
    ZT_TRY(parse_max_shard_size(rq, &j.max_shard));
    ZT_TRY(ckpt_resolve(rq->checkpoint, step_dir, sizeof step_dir));
    ZT_TRY(run_checkpoint_read_model(step_dir, &j.meta, &j.table, &j.params));
    zt_status st = writers[rq->what](&j, report);
    param_table_free(&j.table);
    free(j.params);
    ckpt_meta_free(&j.meta);
    return st;
}
