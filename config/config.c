/* config/config.c — the load sequence of config.h: read the file into
 * a tree, check its shape, graft the --set overrides, fill the struct from
 * the schema (config_schema.c), and on any failure hand back a zeroed
 * struct. The file's shape is checked before the overrides so that an empty
 * or non-map file is reported as the file's problem, not as a puzzling
 * override error.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "config_impl.h"
#include "../worker/llama.h"
#include "../worker/model.h"

static zt_status check_shape(const struct yaml_tree *t, const char *path)
{
    if (!t->root)
        return zt_error_set(ZT_ERR_CONFIG, "%s: empty configuration file", path);
    if (t->root->kind != YAML_TREE_MAP) {
        char where[512], got[128];
        yaml_tree_where(t->root, where, sizeof where);
        yaml_tree_describe(t->root, got, sizeof got);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: the top level must be a mapping of sections and keys, got %s",
                            where, got);
    }
    return ZT_OK;
}

static zt_status load_tree(struct yaml_tree *t, const char *path,
                           const struct config_override *overrides, int n_overrides,
                           struct zt_config *out)
{
    ZT_TRY(check_shape(t, path));
    for (int i = 0; i < n_overrides; i++)
        ZT_TRY(yaml_tree_set_path(t, overrides[i].assignment));
    size_t n = strlen(path) + 1;
    out->source = malloc(n);
    if (!out->source)
        return zt_error_set(ZT_ERR_NOMEM, "config: out of memory");
    memcpy(out->source, path, n);
    ZT_TRY(config_schema_fill(t, out));
    return ZT_OK;
}

zt_status config_load(const char *path, const struct config_override *overrides, int n_overrides,
                      struct zt_config *out)
{
    struct yaml_tree *t = NULL;
    memset(out, 0, sizeof *out);
    ZT_TRY(yaml_tree_load_file(path, &t));
    zt_status s = load_tree(t, path, overrides, n_overrides, out);
    yaml_tree_free(t);
    if (s != ZT_OK) {
        config_free(out);
        zt_error_trace_push(__FILE__, __LINE__);
    }
    return s;
}

zt_status config_hf_model_shape(const char *config_json, struct zt_kvlist *shape)
{
    /* the path as a YAML single-quoted scalar; data.train is required of
     * every configuration but never read here */
    size_t cap = 2 * strlen(config_json) + 64, len = 0;
    char *yaml = malloc(cap);
    if (!yaml)
        return zt_error_set(ZT_ERR_NOMEM, "%s: out of memory", config_json);
    len += (size_t)snprintf(yaml, cap, "model: {hf_config: '");
    for (const char *p = config_json; *p; p++) {
        if (*p == '\'')
            yaml[len++] = '\'';
        yaml[len++] = *p;
    }
    len += (size_t)snprintf(yaml + len, cap - len, "'}\ndata: {train: unread}\n");
    struct yaml_tree *t = NULL;
    struct zt_config c;
    memset(&c, 0, sizeof c);
    zt_status s = yaml_tree_load_string(config_json, yaml, len, &t);
    free(yaml);
    if (s == ZT_OK)
        s = load_tree(t, config_json, NULL, 0, &c);
    yaml_tree_free(t);
    if (s == ZT_OK)
        config_model_shape(&c, shape);
    config_free(&c);
    return s;
}

/* A group size of the data-parallel hierarchy (0: unset) must divide the
 * data-parallel size. */
static zt_status check_group_size(const char *where, const char *key, long size, long dp,
                                  int world_size, long replica)
{
    if (size == 0 || (size <= dp && dp % size == 0))
        return ZT_OK;
    return zt_error_set(ZT_ERR_CONFIG,
                        "%s: zero_optimization.%s: %ld does not divide the data-parallel size "
                        "%ld (world %d / %ld ranks per model replica): use a divisor of %ld",
                        where, key, size, dp, world_size, replica, dp);
}

zt_status config_check_world(const struct zt_config *cfg, int world_size)
{
    const char *source = cfg->source ? cfg->source : "config";
    long micro = cfg->train_micro_batch_size_per_gpu, accum = cfg->gradient_accumulation_steps;
    long tp = cfg->tensor_parallel.size, pp = cfg->pipeline.stages;
    if (world_size < 1)
        return zt_error_set(ZT_ERR_USAGE, "config_check_world: world size %d", world_size);
    ZT_ASSERT(tp >= 1 && pp >= 1); /* config_load checked them */
    if (world_size % (tp * pp) != 0)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: the world size %d is not a multiple of tensor_parallel.size (%ld) "
                            "x pipeline.stages (%ld) = %ld ranks per model replica: run on a "
                            "multiple of %ld ranks, or change the sizes",
                            source, world_size, tp, pp, tp * pp, tp * pp);
    const long cp = cfg->context_parallel.size > 1 ? cfg->context_parallel.size : 1;
    if (world_size % (tp * pp * cp) != 0)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: context_parallel.size: the world size %d is not a multiple of "
                            "tensor_parallel.size (%ld) x pipeline.stages (%ld) x "
                            "context_parallel.size (%ld) = %ld: run on a multiple of %ld ranks, "
                            "or change the sizes",
                            source, world_size, tp, pp, cp, tp * pp * cp, tp * pp * cp);
    /* DeepSpeed's train_batch_size counts the samples of one step over the
     * data-parallel ranks only: the ranks of one replica share theirs, and
     * so do the ranks of one context group. */
    long dp = world_size / (tp * pp * cp);
    ZT_TRY(check_group_size(cfg->zero.shard_group_where, "shard_group_size",
                            cfg->zero.shard_group_size, dp, world_size, tp * pp));
    if (cfg->zero.hpz_partition_size > 1)
        ZT_TRY(check_group_size(cfg->zero.hpz_where, "zero_hpz_partition_size",
                                cfg->zero.hpz_partition_size, dp, world_size, tp * pp));
    if (cfg->train_batch_size == 0 || cfg->train_batch_size == micro * accum * dp)
        return ZT_OK;
    if (tp * pp == 1)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: train_batch_size: %ld must equal train_micro_batch_size_per_gpu "
                            "(%ld) * gradient_accumulation_steps (%ld) * world size (%d) = %ld; "
                            "remove it or make the product match",
                            source, cfg->train_batch_size, micro, accum, world_size,
                            micro * accum * dp);
    return zt_error_set(ZT_ERR_CONFIG,
                        "%s: train_batch_size: %ld must equal train_micro_batch_size_per_gpu "
                        "(%ld) * gradient_accumulation_steps (%ld) * data-parallel size %ld (world "
                        "%d / (tensor %ld x pipeline %ld)) = %ld; remove it or make the product "
                        "match",
                        source, cfg->train_batch_size, micro, accum, dp, world_size, tp, pp,
                        micro * accum * dp);
}

zt_status config_write_yaml(const struct zt_config *cfg, FILE *f)
{
    ZT_TRY(config_schema_write(cfg, f));
    return ZT_OK;
}

static void free_list(char **list, int n)
{
    for (int i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

void config_free(struct zt_config *cfg)
{
    if (!cfg)
        return;
    free(cfg->source);
    free(cfg->ignored);
    free(cfg->no_effect);
    free(cfg->model.family);
    free(cfg->model.hf_config);
    free(cfg->model.init_from);
    free(cfg->run.resume);
    free(cfg->checkpoint.dir);
    free(cfg->zero.offload_optimizer.nvme_path);
    free(cfg->csv_monitor.output_path);
    free(cfg->csv_monitor.job_name);
    free_list(cfg->data.train, cfg->data.n_train);
    free_list(cfg->data.val, cfg->data.n_val);
    free(cfg->data.format);
    free(cfg->data.tokenizer);
    free(cfg->data.tokenizer_dir);
    free(cfg->data.chat_template);
    free_list(cfg->lora.target_modules, cfg->lora.n_target_modules);
    free(cfg->lora.bias);
    free(cfg->quantization.bnb_4bit_quant_type);
    free(cfg->quantization.bnb_4bit_compute_dtype);
    free(cfg->lora.init_from);
    free(cfg->data_types.grad_accum_dtype);
    free(cfg->run.output_dir);
    free(cfg->comm.backend);
    free(cfg->comm.reduce_scatter);
    free(cfg->comm.allgather);
    free(cfg->comm.allreduce);
    free(cfg->device);
    free(cfg->optimizer.type);
    memset(cfg, 0, sizeof *cfg);
}

struct lr_schedule config_lr_schedule(const struct zt_config *cfg)
{
    static const enum lr_schedule_kind kinds[] = {
        [ZT_SCHED_NONE] = LR_SCHED_NONE,
        [ZT_SCHED_WARMUP_LR] = LR_SCHED_WARMUP_LR,
        [ZT_SCHED_WARMUP_DECAY_LR] = LR_SCHED_WARMUP_DECAY_LR,
        [ZT_SCHED_WARMUP_COSINE_LR] = LR_SCHED_WARMUP_COSINE_LR,
    };
    ZT_ASSERT((size_t)cfg->scheduler.type < sizeof kinds / sizeof kinds[0]);
    return (struct lr_schedule){
        .kind = kinds[cfg->scheduler.type],
        .lr = cfg->optimizer.lr,
        .warmup_min_lr = cfg->scheduler.warmup_min_lr,
        .warmup_max_lr = cfg->scheduler.warmup_max_lr,
        .warmup_num_steps = cfg->scheduler.warmup_num_steps,
        .warmup_type =
            cfg->scheduler.warmup_type == ZT_WARMUP_LINEAR ? LR_WARMUP_LINEAR : LR_WARMUP_LOG,
        .total_num_steps = cfg->scheduler.total_num_steps,
        .warmup_min_ratio = cfg->scheduler.warmup_min_ratio,
        .cos_min_ratio = cfg->scheduler.cos_min_ratio,
    };
}

/* Said rather than refused: a DeepSpeed file written for GPUs should run on
 * the CPU unchanged, and the user should know the key did nothing there. */
const char *config_offload_note(const struct zt_config *cfg, int host_memory)
{
    if (!host_memory || cfg->zero.offload_optimizer.device != ZT_OFFLOAD_CPU)
        return NULL;
    return "zero_optimization.offload_optimizer (device: cpu) changes nothing on device cpu: the "
           "optimizer states already live in host memory";
}

struct optimizer_hparams config_optimizer_hparams(const struct zt_config *c, double lr)
{
    return (struct optimizer_hparams){
        .lr = (float)lr,
        .beta1 = (float)c->optimizer.beta1,
        .beta2 = (float)c->optimizer.beta2,
        .eps = (float)c->optimizer.eps,
        .weight_decay = (float)c->optimizer.weight_decay,
        .momentum = (float)c->optimizer.momentum,
        .dampening = (float)c->optimizer.dampening,
        .nesterov = c->optimizer.nesterov,
        .eps2 = (float)c->optimizer.eps2,
        .clip_threshold = (float)c->optimizer.clip_threshold,
        .decay_rate = (float)c->optimizer.decay_rate,
        .scale_parameter = c->optimizer.scale_parameter,
        .relative_step = c->optimizer.relative_step,
        .warmup_init = c->optimizer.warmup_init,
        .min_8bit_size = c->optimizer.min_8bit_size,
    };
}

static void gpt2_shape(const struct zt_config *c, struct zt_kvlist *shape)
{
    const struct gpt2_config g = {c->model.vocab_size, c->model.block_size, c->model.n_layer,
                                  c->model.n_head, c->model.n_embd};
    gpt2_describe(&g, shape);
}

static void llama_shape(const struct zt_config *c, struct zt_kvlist *shape)
{
    const struct llama_config l = {
        .vocab_size = c->model.vocab_size,
        .block_size = c->model.block_size,
        .n_layer = c->model.n_layer,
        .n_head = c->model.n_head,
        .n_kv_head = c->model.n_kv_head,
        .n_embd = c->model.n_embd,
        .intermediate_size = c->model.intermediate_size,
        .tie_word_embeddings = c->model.tie_word_embeddings,
        .rope_theta = c->model.rope_theta,
        .rms_norm_eps = c->model.rms_norm_eps,
        .attention_bias = c->model.attention_bias,
    };
    llama_describe(&l, shape);
}

/* Each family's keys into its shape. */
static const struct {
    const char *family;
    void (*shape)(const struct zt_config *c, struct zt_kvlist *shape);
} model_shapes[] = {{"gpt2", gpt2_shape}, {"llama", llama_shape}};

void config_model_shape(const struct zt_config *cfg, struct zt_kvlist *shape)
{
    for (size_t k = 0; k < sizeof model_shapes / sizeof model_shapes[0]; k++)
        if (strcmp(model_shapes[k].family, cfg->model.family) == 0) {
            model_shapes[k].shape(cfg, shape);
            return;
        }
    ZT_ASSERT(0 && "model.family was checked when the config loaded");
}

int config_loss_scale_dynamic(const struct zt_config *c)
{
    return c->fp16.enabled && c->fp16.loss_scale == 0.0;
}

int config_norm_before_update(const struct zt_config *c)
{
    return c->gradient_clipping > 0.0 || config_loss_scale_dynamic(c);
}
