/* cli/export.c — see export.h: the options' text into a request of
 * coordinator/run_export.h. */
#include "export.h"

#include "../common/size.h"
#include "../formats/hf_weights.h"

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
    if (text && rq->what == RUN_EXPORT_ADAPTER)
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

zt_status export_run(const struct export_request *rq, FILE *report)
{
    struct run_export_request r = {.checkpoint = rq->checkpoint,
                                   .out = rq->out,
                                   .dtype = ZT_F32,
                                   .what = rq->what,
                                   .force = rq->force};
    ZT_TRY(parse_dtype(rq->dtype, &r.dtype));
    ZT_TRY(parse_max_shard_size(rq, &r.max_shard));
    return run_export_write(&r, report);
}
