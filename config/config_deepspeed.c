/* config/config_deepspeed.c — DeepSpeed's keys that zerotrain knows but
 * does not act on.
 *
 * A DeepSpeed config carries far more than zerotrain implements: monitors
 * (tensorboard, wandb, comms_logger, flops_profiler; csv_monitor is the
 * schema's), offload, the stage-3 memory knobs, quantization, compression,
 * curriculum learning.
 * Refusing each of them would make every real DeepSpeed file fail one key
 * per run; ignoring them silently would lose what the user asked for. So
 * every DeepSpeed key that has no row in the schema (config_schema.c) has a
 * row here: when its value means "off" (`enabled: false`, `device: none`),
 * or asks for what zerotrain does anyway (`reduce_scatter: true`), it is
 * accepted silently; otherwise it is accepted and listed, with what
 * zerotrain does instead, in the one warning the run prints at start-up.
 * A key in neither table is still an unknown key (a typo, most likely).
 *
 * A row names a key or a whole section (its sub-keys are not checked: they
 * configure something zerotrain does not have). The rows follow
 * DeepSpeed's runtime config (deepspeed/runtime/config.py with its
 * get_pipeline_config, constants.py, zero/config.py,
 * activation_checkpointing/config.py, tensor_parallel/config.py): the top
 * level, then the keys of the sections zerotrain shares.
 */
#include "config_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* When a given value asks for nothing zerotrain lacks. */
enum quiet_when {
    Q_NEVER,       /* any value asks for something */
    Q_ALWAYS,      /* no value changes anything here */
    Q_FALSE,       /* a boolean; false is off */
    Q_TRUE,        /* a boolean; true is what zerotrain does */
    Q_DISABLED,    /* a section; off unless `enabled: true`, as in DeepSpeed */
    Q_NO_DEVICE,   /* an offload section; off when `device` is absent or none */
    Q_ONE,         /* a number; 1 is off */
    Q_ZERO_OR_ONE, /* a number; 0 and 1 are off */
    Q_ZERO,        /* a number; 0 is off */
    Q_NEGATIVE,    /* a number; below 0 is off */
};

struct ds_key {
    const char *path;
    enum quiet_when quiet;
    const char *instead; /* what zerotrain does instead, for the warning */
};

/* clang-format off */
static const struct ds_key keys[] = {
    /* the top level */
    {"amp", Q_DISABLED,
     "no Apex AMP: the precision is bf16.enabled's or fp16.enabled's (else fp32)"},
    /* listed by the schema when offload_optimizer's device is nvme (note_nvme_aio) */
    {"aio", Q_ALWAYS, "nothing uses asynchronous I/O without NVMe offload"},
    {"autotuning", Q_DISABLED, "the configuration runs as given, nothing is tuned"},
    {"bfloat16", Q_DISABLED, "DeepSpeed's old name: zerotrain reads bf16.enabled"},
    {"communication_data_type", Q_NEVER, "gradients are reduced in the working precision"},
    {"comms_logger", Q_DISABLED,
     "metrics.jsonl records each step's communication bytes and calls; --profile times them"},
    {"compile", Q_DISABLED, "the model runs as built, nothing is compiled"},
    {"compression_training", Q_NEVER, "the model is trained uncompressed"},
    {"curriculum_learning", Q_DISABLED, "samples are drawn uniformly from data.train"},
    {"data_efficiency", Q_DISABLED, "samples are drawn uniformly from data.train"},
    {"dataloader_drop_last", Q_ALWAYS, "zerotrain has its own sampler"},
    {"disable_allgather", Q_FALSE, "updated parameters are allgathered (stages 1 and 2)"},
    {"dump_state", Q_FALSE, "the resolved configuration is printed and written to "
                            "<run.output_dir>/config.yaml"},
    {"eigenvalue", Q_DISABLED, "no eigenvalues are computed"},
    {"elasticity", Q_DISABLED, "the batch is fixed by the configuration and the world size"},
    {"flops_profiler", Q_DISABLED,
     "every log line shows the achieved GFLOP/s; --profile shows where the step time went"},
    {"fp32_allreduce", Q_FALSE, "gradients are reduced in the working precision"},
    {"gradient_predivide_factor", Q_ONE,
     "gradients are divided by the world size after the reduction"},
    {"graph_harvesting", Q_FALSE, "no CUDA graphs"},
    {"hybrid_engine", Q_DISABLED, "no inference engine"},
    {"memory_breakdown", Q_FALSE, "--memory-report FILE writes every rank's memory peaks"},
    {"nebula", Q_DISABLED, "checkpoints are written to checkpoint.dir"},
    {"prescale_gradients", Q_FALSE,
     "gradients are divided by the world size after the reduction"},
    {"progressive_layer_drop", Q_DISABLED, "every layer runs at every step"},
    {"quantize_training", Q_DISABLED, "weights are trained unquantized"},
    {"seq_parallel_communication_data_type", Q_NEVER,
     "no Ulysses sequence parallelism (tensor_parallel.sequence_parallel is Megatron's)"},
    {"sequence_parallel_size", Q_ONE,
     "no Ulysses sequence parallelism (tensor_parallel.sequence_parallel is Megatron's)"},
    {"sparse_attention", Q_NEVER, "attention is dense"},
    {"sparse_gradients", Q_FALSE, "gradients are dense"},
    {"tensorboard", Q_DISABLED, "metrics go to metrics.jsonl (--metrics FILE)"},
    {"timers", Q_ALWAYS, "every log line shows the step time and throughput"},
    {"wall_clock_breakdown", Q_FALSE, "--profile shows where the step time went"},
    {"wandb", Q_DISABLED, "metrics go to metrics.jsonl (--metrics FILE)"},
    {"weight_quantization", Q_NEVER, "weights are kept unquantized"},
    {"zero_allow_untested_optimizer", Q_ALWAYS, "every optimizer zerotrain has runs under ZeRO"},
    {"zero_force_ds_cpu_optimizer", Q_ALWAYS, "nothing is offloaded to the CPU"},

    /* zero_optimization (stage, reduce_bucket_size and stage3_prefetch_depth are the schema's) */
    {"zero_optimization.allgather_bucket_size", Q_NEVER,
     "updated parameters are allgathered one unit (a transformer block) at a time"},
    {"zero_optimization.allgather_partitions", Q_TRUE, "updated parameters are allgathered"},
    {"zero_optimization.contiguous_gradients", Q_TRUE,
     "gradients are reduced from buckets of whole units"},
    {"zero_optimization.cpu_offload", Q_FALSE,
     "optimizer states stay in device memory, sharded under stages 1-3"},
    {"zero_optimization.cpu_offload_param", Q_FALSE,
     "parameters stay in device memory, sharded under stage 3"},
    {"zero_optimization.cpu_offload_use_pin_memory", Q_ALWAYS, "nothing is offloaded"},
    {"zero_optimization.elastic_checkpoint", Q_ALWAYS,
     "checkpoints load at any world size and stage"},
    {"zero_optimization.ignore_unused_parameters", Q_ALWAYS, "every parameter is used"},
    {"zero_optimization.legacy_stage1", Q_FALSE, "one stage-1 implementation"},
    {"zero_optimization.load_from_fp32_weights", Q_TRUE,
     "checkpoints restore the fp32 master weights"},
    {"zero_optimization.log_trace_cache_warnings", Q_ALWAYS, "no trace cache"},
    {"zero_optimization.memory_efficient_linear", Q_ALWAYS, "zerotrain's own linear layers"},
    {"zero_optimization.mics_hierarchical_params_gather", Q_FALSE, "no MiCS"},
    {"zero_optimization.mics_shard_size", Q_NEGATIVE, "no MiCS: ZeRO shards over all ranks"},
    /* offload_optimizer's device, pin_memory, nvme_path and buffer_count
     * are the schema's; the rest tune DeepSpeed's NVMe pipeline */
    {"zero_optimization.offload_optimizer.fast_init", Q_ALWAYS,
     "the NVMe state files are reserved at once and read as zeros: initialisation is fast"},
    {"zero_optimization.offload_optimizer.pipeline", Q_TRUE,
     "NVMe reads ahead and writes behind always overlap the update"},
    {"zero_optimization.offload_optimizer.pipeline_read", Q_TRUE,
     "NVMe reads ahead always overlap the update"},
    {"zero_optimization.offload_optimizer.pipeline_write", Q_TRUE,
     "NVMe writes behind always overlap the update"},
    {"zero_optimization.offload_optimizer.ratio", Q_ONE,
     "offload_optimizer offloads all of the optimizer states"},
    {"zero_optimization.offload_param", Q_NO_DEVICE,
     "parameters stay in device memory, sharded under stage 3"},
    {"zero_optimization.override_module_apply", Q_ALWAYS, "zerotrain's own model"},
    {"zero_optimization.pipeline_loading_checkpoint", Q_FALSE,
     "zerotrain reads its own checkpoints"},
    {"zero_optimization.reduce_scatter", Q_TRUE,
     "gradients are reduce-scattered (stages 1-3) or allreduced (stage 0)"},
    {"zero_optimization.round_robin_gradients", Q_FALSE, "gradients are not offloaded"},
    {"zero_optimization.stage3_gather_16bit_weights_on_model_save", Q_FALSE,
     "`zerotrain export` writes the whole model from a checkpoint"},
    {"zero_optimization.stage3_gather_fp16_weights_on_model_save", Q_FALSE,
     "`zerotrain export` writes the whole model from a checkpoint"},
    {"zero_optimization.stage3_max_live_parameters", Q_NEVER,
     "stage 3 holds the unit in use and zero_optimization.stage3_prefetch_depth units ahead"},
    {"zero_optimization.stage3_max_reuse_distance", Q_NEVER,
     "stage 3 releases a unit as soon as the pass leaves it"},
    {"zero_optimization.stage3_model_persistence_threshold", Q_NEVER,
     "stage 3 partitions every parameter, however small"},
    {"zero_optimization.stage3_module_granularity_threshold", Q_ZERO,
     "stage 3 gathers one unit (a transformer block) at a time"},
    {"zero_optimization.stage3_param_persistence_threshold", Q_NEVER,
     "stage 3 partitions every parameter, however small"},
    {"zero_optimization.stage3_prefetch_bucket_size", Q_NEVER,
     "stage 3 prefetches zero_optimization.stage3_prefetch_depth units (a count of units)"},
    {"zero_optimization.stage3_use_all_reduce_for_fetch_params", Q_FALSE,
     "stage 3 allgathers parameters"},
    {"zero_optimization.sub_group_size", Q_NEVER,
     "each rank updates its whole shard in one pass"},
    {"zero_optimization.use_multi_rank_bucket_allreduce", Q_ALWAYS, "zerotrain's own buckets"},
    {"zero_optimization.zero_quantized_gradients", Q_FALSE, "gradients are reduced unquantized"},
    {"zero_optimization.zero_quantized_nontrainable_weights", Q_FALSE,
     "frozen weights are kept unquantized"},
    {"zero_optimization.zero_quantized_weights", Q_FALSE,
     "parameters are allgathered unquantized"},
    {"zero_optimization.zeropp_loco_param", Q_ALWAYS, "gradients are reduced unquantized"},

    /* activation_checkpointing (enabled and every_n_blocks are the schema's) */
    {"activation_checkpointing.contiguous_memory_optimization", Q_FALSE,
     "each checkpointed block keeps its own input buffer"},
    {"activation_checkpointing.cpu_checkpointing", Q_FALSE,
     "checkpointed activations stay in device memory"},
    {"activation_checkpointing.number_checkpoints", Q_ALWAYS,
     "activation_checkpointing.every_n_blocks chooses the checkpointed blocks"},
    {"activation_checkpointing.partition_activations", Q_FALSE,
     "each rank keeps the checkpointed activations of its own micro batch, whole"},
    {"activation_checkpointing.profile", Q_FALSE, "--profile times the forward and backward"},
    {"activation_checkpointing.synchronize_checkpoint_boundary", Q_FALSE,
     "no device synchronisation at checkpoint boundaries"},

    /* checkpoint (dir, every and keep are the schema's) */
    {"checkpoint.load_universal", Q_FALSE,
     "zerotrain reads its own checkpoints, at any world size and stage"},
    {"checkpoint.parallel_write", Q_ALWAYS, "every rank writes its own shard file"},
    {"checkpoint.tag_validation", Q_ALWAYS,
     "checkpoints are named by step, and every shard is checked against meta.json"},
    {"checkpoint.use_node_local_storage", Q_FALSE,
     "checkpoints go to checkpoint.dir, which every rank must reach"},
    {"checkpoint.writer", Q_ALWAYS, "every rank writes its own shard file"},

    /* bf16 (enabled is the schema's) */
    {"bf16.bf16_master_weights_and_grads", Q_FALSE, "master weights stay fp32"},
    {"bf16.bf16_optimizer_states", Q_FALSE,
     "optimizer states keep the optimizer's own types (fp32; AdamW8bit's 8-bit codes)"},
    {"bf16.check_overflow", Q_FALSE, "a non-finite gradient norm stops the run with an error"},
    {"bf16.immediate_grad_update", Q_ALWAYS, "gradients are applied at the optimizer step"},

    /* fp16 (enabled and the loss-scaling keys are the schema's) */
    {"fp16.auto_cast", Q_FALSE, "the model computes in the working precision"},
    {"fp16.consecutive_hysteresis", Q_FALSE,
     "clean steps do not refill the hysteresis (DeepSpeed's default)"},
    {"fp16.fp16_master_weights_and_grads", Q_FALSE, "master weights stay fp32"},

    /* optimizer */
    {"optimizer.legacy_fusion", Q_FALSE, "zerotrain's own optimizer kernels"},

    /* pipeline (stages is the schema's; DeepSpeed's PipelineModule argument
     * partition_method is the schema's pipeline.partition_method) */
    {"pipeline.activation_checkpoint_interval", Q_ZERO,
     "activation_checkpointing.every_n_blocks chooses the checkpointed blocks"},
    {"pipeline.grad_partitioned", Q_ALWAYS, "zerotrain's own messages between stages"},
    {"pipeline.partition", Q_NEVER,
     "pipeline.partition_method cuts the blocks into stages (parameters or uniform)"},
    {"pipeline.pipe_partitioned", Q_ALWAYS, "zerotrain's own messages between stages"},
    {"pipeline.seed_layers", Q_FALSE, "initial weights come from run.seed alone"},
    {"pipeline.use_reentrant", Q_ALWAYS, "zerotrain's own recomputation"},

    /* tensor_parallel (DeepSpeed's AutoTP training keys; size and
     * sequence_parallel are the schema's) */
    {"tensor_parallel.autotp_size", Q_ZERO_OR_ONE,
     "tensor_parallel.size is the tensor-parallel size"},
    {"tensor_parallel.dtype", Q_NEVER,
     "the precision is bf16.enabled's or fp16.enabled's (else fp32)"},
    {"tensor_parallel.injection_policy_tuple", Q_NEVER, "zerotrain splits its own layers"},
    {"tensor_parallel.keep_module_on_host", Q_FALSE, "each rank reads only the weights it holds"},
    {"tensor_parallel.partition_config", Q_NEVER, "zerotrain splits its own layers"},
    {"tensor_parallel.replace_with_kernel_inject", Q_FALSE, "zerotrain's own kernels"},
    {"tensor_parallel.tensor_parallel", Q_NEVER,
     "tensor_parallel.size is the tensor-parallel size"},
    {"tensor_parallel.tp", Q_NEVER, "tensor_parallel.size is the tensor-parallel size"},
    {"tensor_parallel.tp_overlap_comm", Q_ALWAYS, "zerotrain schedules its own collectives"},
};
/* clang-format on */

enum { N_KEYS = sizeof keys / sizeof keys[0], WHERE = 512 };

const char *config_deepspeed_path(size_t i)
{
    return i < N_KEYS ? keys[i].path : NULL;
}

static const struct ds_key *find(const char *path)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(keys[i].path, path) == 0)
            return &keys[i];
    return NULL;
}

static zt_status expected(const struct yaml_tree_node *v, const char *path, const char *what)
{
    char where[WHERE], got[128];
    yaml_tree_where(v, where, sizeof where);
    yaml_tree_describe(v, got, sizeof got);
    return zt_error_set(ZT_ERR_CONFIG, "%s: %s: expected %s, got %s", where, path, what, got);
}

/* The decisive sub-key of a section, for the quiet test and the warning. */
static const struct yaml_tree_node *switch_of(const struct ds_key *k,
                                              const struct yaml_tree_node *v, const char **name)
{
    *name = k->quiet == Q_DISABLED ? "enabled" : "device";
    const struct yaml_tree_node *s = yaml_tree_get(v, *name);
    return s && !yaml_tree_is_null(s) ? s : NULL;
}

static zt_status quiet_bool(const struct ds_key *k, const struct yaml_tree_node *v, int *quiet)
{
    int b = 0;
    if (!yaml_tree_bool(v, &b))
        return expected(v, k->path, "a boolean (true or false)");
    *quiet = b == (k->quiet == Q_TRUE);
    return ZT_OK;
}

/* A section is off when its switch is absent, as in DeepSpeed. */
static zt_status quiet_section(const struct ds_key *k, const struct yaml_tree_node *v, int *quiet)
{
    int b = 0;
    const char *name;
    const struct yaml_tree_node *s;
    if (v->kind != YAML_TREE_MAP)
        return expected(v, k->path, "a mapping");
    if (!(s = switch_of(k, v, &name))) {
        *quiet = 1;
    } else if (k->quiet == Q_DISABLED) {
        if (!yaml_tree_bool(s, &b))
            return expected(s, k->path, "enabled: true or false");
        *quiet = !b;
    } else if (s->kind == YAML_TREE_SCALAR && strcmp(s->text, "nvme") == 0) {
        /* a run that expects its parameters on NVMe would not fit without */
        char where[WHERE];
        yaml_tree_where(s, where, sizeof where);
        return zt_error_set(ZT_ERR_UNSUPPORTED,
                            "%s: %s.device: nvme is not supported (%s; "
                            "zero_optimization.offload_optimizer.device: nvme moves the optimizer "
                            "states to NVMe)",
                            where, k->path, k->instead);
    } else {
        *quiet = s->kind == YAML_TREE_SCALAR && strcmp(s->text, "none") == 0;
    }
    return ZT_OK;
}

/* Anything but a number is listed, not refused: the key is not acted on. */
static int quiet_number(const struct ds_key *k, const struct yaml_tree_node *v)
{
    char *end = NULL;
    double x = v->kind == YAML_TREE_SCALAR && !v->quoted ? strtod(v->text, &end) : 0.0;
    if (!end || end == v->text || *end != '\0')
        return 0;
    switch (k->quiet) {
    case Q_ONE:
        return x == 1.0;
    case Q_ZERO_OR_ONE:
        return x == 0.0 || x == 1.0;
    case Q_ZERO:
        return x == 0.0;
    default:
        return x < 0;
    }
}

/* Whether `v` asks for nothing zerotrain lacks; checks its type on the way. */
static zt_status is_quiet(const struct ds_key *k, const struct yaml_tree_node *v, int *quiet)
{
    switch (k->quiet) {
    case Q_NEVER:
    case Q_ALWAYS:
        *quiet = k->quiet == Q_ALWAYS;
        return ZT_OK;
    case Q_FALSE:
    case Q_TRUE:
        return quiet_bool(k, v, quiet);
    case Q_DISABLED:
    case Q_NO_DEVICE:
        return quiet_section(k, v, quiet);
    case Q_ONE:
    case Q_ZERO_OR_ONE:
    case Q_ZERO:
    case Q_NEGATIVE:
        *quiet = quiet_number(k, v);
        return ZT_OK;
    }
    ZT_ASSERT(0 && "every rule is handled");
    return ZT_ERR_INTERNAL;
}

zt_status config_notes_append(struct config_notes *n, const char *line)
{
    size_t len = strlen(line);
    if (n->len + len + 1 > n->cap) {
        size_t cap = n->cap ? n->cap : 256;
        while (cap < n->len + len + 1)
            cap *= 2;
        char *grown = realloc(n->text, cap);
        if (!grown)
            return zt_error_set(ZT_ERR_NOMEM, "config: out of memory");
        n->text = grown;
        n->cap = cap;
    }
    memcpy(n->text + n->len, line, len + 1);
    n->len += len;
    n->count++;
    return ZT_OK;
}

/* A value as the user wrote it (JSON's quotes aside), shortened. */
static void shown(const struct yaml_tree_node *v, char *buf, size_t size)
{
    if (v->kind != YAML_TREE_SCALAR)
        yaml_tree_describe(v, buf, size);
    else if (strlen(v->text) > 40)
        snprintf(buf, size, "%.37s...", v->text);
    else
        snprintf(buf, size, "%s", v->text);
}

/* "  WHERE: PATH (VALUE): INSTEAD\n"; a section shows its switch. */
static zt_status note(const struct ds_key *k, const struct yaml_tree_node *v,
                      struct config_notes *n)
{
    char where[WHERE], value[160] = "", line[1024];
    const char *name;
    const struct yaml_tree_node *s;
    yaml_tree_where(v, where, sizeof where);
    if (v->kind == YAML_TREE_SCALAR) {
        shown(v, value, sizeof value);
    } else if ((k->quiet == Q_DISABLED || k->quiet == Q_NO_DEVICE) &&
               (s = switch_of(k, v, &name))) {
        char got[128];
        shown(s, got, sizeof got);
        snprintf(value, sizeof value, "%s: %s", name, got);
    }
    snprintf(line, sizeof line, "  %s: %s%s%s%s: %s\n", where, k->path, value[0] ? " (" : "", value,
             value[0] ? ")" : "", k->instead);
    return config_notes_append(n, line);
}

zt_status config_deepspeed_accept(const char *path, const struct yaml_tree_node *value,
                                  struct config_notes *notes, int *known)
{
    const struct ds_key *k = find(path);
    int quiet = 0;
    *known = k != NULL;
    if (!k || yaml_tree_is_null(value)) /* null: absent, as everywhere */
        return ZT_OK;
    ZT_TRY(is_quiet(k, value, &quiet));
    if (!quiet)
        ZT_TRY(note(k, value, notes));
    return ZT_OK;
}

/* The quiet rule in words, for the reference. */
static const char *quiet_words(enum quiet_when q)
{
    switch (q) {
    case Q_NEVER:
        return "never";
    case Q_ALWAYS:
        return "always";
    case Q_FALSE:
        return "`false`";
    case Q_TRUE:
        return "`true`";
    case Q_DISABLED:
        return "`enabled` absent or `false`";
    case Q_NO_DEVICE:
        return "`device` absent or `none`";
    case Q_ONE:
        return "`1`";
    case Q_ZERO_OR_ONE:
        return "`0` or `1`";
    case Q_ZERO:
        return "`0`";
    case Q_NEGATIVE:
        return "below 0";
    }
    ZT_ASSERT(0 && "every rule is described");
    return "";
}

void config_deepspeed_write_reference(FILE *f)
{
    fputs("\n## DeepSpeed keys accepted without effect\n"
          "\n"
          "DeepSpeed's keys that zerotrain knows but does not act on. A given one is accepted:\n"
          "silently when its value is null or as the second column says (the value means \"off\"\n"
          "or asks for what zerotrain does anyway), else listed, with what zerotrain does\n"
          "instead, in the one warning a run prints at start-up. A key that names a section\n"
          "covers every key under it. A key in neither this table nor the ones above is an\n"
          "error.\n"
          "\n"
          "| Key | Silent when | What zerotrain does instead |\n"
          "|---|---|---|\n",
          f);
    for (size_t i = 0; i < N_KEYS; i++) {
        fprintf(f, "| `%s` | %s | ", keys[i].path, quiet_words(keys[i].quiet));
        config_write_md_cell(f, keys[i].instead);
        fputs(" |\n", f);
    }
}
