/* config/config.h — the run configuration: parse, override, validate.
 *
 * A config file is YAML (and so also JSON: a DeepSpeed config loads as it
 * is for the sections it shares). Sections `model`, `data`, `run`, `comm`
 * and `tensor_parallel` are ours, and so are the keys of `pipeline` (a
 * section DeepSpeed has too, whose own keys are accepted beside ours); the
 * training keys use DeepSpeed's names and meanings
 * (train_micro_batch_size_per_gpu, gradient_accumulation_steps,
 * train_batch_size, gradient_clipping, steps_per_print, optimizer,
 * scheduler, zero_optimization, fp16, bf16, activation_checkpointing,
 * csv_monitor), and `fp8` uses Transformer Engine's (DelayedScaling's).
 * DeepSpeed's other keys are accepted too: silently when their value means
 * "off" or asks for what zerotrain does anyway, else listed in
 * cfg->ignored for the one warning a run prints at start-up. Settings
 * that do nothing beside the others given (sequence parallelism at tensor
 * size 1, an interval of activation checkpointing that is off, ...) are
 * accepted too, so that one config serves every layout, and listed in
 * cfg->no_effect for a second such warning.
 *
 * Loading is: parse the file into a tree (yaml_tree.h), apply `--set
 * key.path=value` overrides to the tree, then walk the tree against the
 * schema (config_schema.c), filling `struct zt_config` from its defaults and
 * the given values, then check cross-field rules. Every problem is reported
 * once through zt_error_set with the file, line and column of the offending
 * node ("run.yaml:14:3: optimizer.params.lr: must be > 0, got -1") or
 * "--set optimizer.params.lr=..." for overrides; unknown keys name the
 * closest valid key. All such errors are ZT_ERR_CONFIG (exit 2), features
 * that later versions implement are ZT_ERR_UNSUPPORTED (exit 2).
 *
 * The config owns its strings; free with config_free.
 */
#ifndef ZT_CONFIG_CONFIG_H
#define ZT_CONFIG_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/kvlist.h"
#include "../common/status.h"
#include "../worker/optimizer.h"
#include "../worker/schedule.h"

enum zt_sched_type {
    ZT_SCHED_NONE,
    ZT_SCHED_WARMUP_LR,
    ZT_SCHED_WARMUP_DECAY_LR,
    ZT_SCHED_WARMUP_COSINE_LR
};
enum zt_warmup_type { ZT_WARMUP_LOG, ZT_WARMUP_LINEAR };

/* pipeline.schedule: the order in which a step's micro batches pass
 * through the stages. */
enum pipeline_schedule {
    PIPELINE_1F1B, /* "1f1b": after warm-up one forward, one backward; a stage holds at most
                      P micro batches' activations (the default) */
    PIPELINE_GPIPE /* "gpipe": every forward, then every backward */
};

/* run.on_nonfinite: what a step whose loss or gradient norm is not finite
 * does (beyond fp16's overflows, which the loss scaler skips). */
enum zt_nonfinite_action {
    ZT_NONFINITE_STOP, /* "stop": the first non-finite value is reported and the run ends */
    ZT_NONFINITE_SKIP  /* "skip": reported, skipped on every rank, and the run goes on */
};

/* zero_optimization.offload_optimizer.device: where ZeRO-Offload keeps the
 * optimizer states and runs their update (DeepSpeed's names). */
enum zt_offload_device {
    ZT_OFFLOAD_NONE, /* "none": with the parameters, on the compute device (the default) */
    ZT_OFFLOAD_CPU,  /* "cpu": in host memory; on device cpu that is where they are anyway */
    ZT_OFFLOAD_NVME  /* "nvme": in files under nvme_path, streamed through host memory */
};

/* pipeline.partition_method: how the blocks are cut into stages, by the
 * names of DeepSpeed's PipelineModule. */
enum pipeline_partition {
    PIPELINE_PARTITION_PARAMETERS, /* "parameters": stages balanced by parameter count */
    PIPELINE_PARTITION_UNIFORM     /* "uniform": the same number of blocks per stage */
};

struct zt_config {
    char *source; /* path of the file loaded */
    /* NULL, or the text of the start-up warning (newline-terminated lines):
     * the DeepSpeed settings given that zerotrain does not act on, each
     * with its position and what zerotrain does instead. */
    char *ignored;
    /* NULL, or the text of the start-up warning about settings given that
     * have no effect beside the others (sequence parallelism at
     * tensor_parallel.size 1, ...), one line each with its position. */
    char *no_effect;

    struct {
        char *family;   /* "gpt2" (default) or "llama" (worker/model_family.h) */
        int vocab_size; /* default 256 (byte tokenizer) */
        /* The vocabulary a run computes with is vocab_size rounded up to a
         * multiple of this times tensor_parallel.size (vocab_padded,
         * worker/tensor_parallel.h); default 128, 1: no padding. */
        int pad_vocab_size_to_multiple_of;
        int block_size;              /* max sequence length, default 128 */
        int n_layer, n_head, n_embd; /* defaults 4, 4, 128 */
        /* llama only */
        int n_kv_head;           /* grouped-query attention, default n_head */
        int intermediate_size;   /* default 2/3 of 4 n_embd rounded up to a multiple of 256 */
        double rope_theta;       /* default 10000 */
        double rms_norm_eps;     /* default 1e-5 */
        int tie_word_embeddings; /* default false */
        int attention_bias;      /* llama: q, k and v biases (Qwen2); default false */
        char *hf_config; /* NULL, or a Hugging Face config.json the unset model keys come from */
        char *init_from; /* NULL: random init; else Hugging Face weights of the family */
    } model;

    /* LoRA adapters (worker/lora.h), PEFT's LoraConfig names. */
    struct {
        int enabled;
        int r;                 /* rank, default 8 */
        double lora_alpha;     /* default 8: the term is scaled by lora_alpha / r */
        double lora_dropout;   /* default 0 */
        char **target_modules; /* default: the family's (gpt2: c_attn; llama: q_proj, v_proj) */
        int n_target_modules;
        char *bias;      /* "none" */
        char *init_from; /* NULL: initial adapters; else a PEFT adapter folder */
    } lora;

    /* QLoRA's 4-bit base (worker/param_quant.h), Hugging Face's
     * BitsAndBytesConfig names. */
    struct {
        int load_in_4bit;
        int load_in_8bit;              /* refused: not supported */
        char *bnb_4bit_quant_type;     /* nf4 (default) or fp4 */
        int bnb_4bit_use_double_quant; /* default false */
        char *bnb_4bit_compute_dtype;  /* fp32 (default), bf16, fp16 */
    } quantization;

    struct {
        char **train; /* one or more paths: a token file, or text files/folders */
        int n_train;
        char **val; /* optional, same forms; NULL/0 when absent */
        int n_val;
        double val_fraction; /* held-out tail of train when val is absent, default 0.1, [0, 0.5] */
        int seq_len;         /* default block_size; must be <= block_size */
        int skip_binary;     /* 1: binary files in data folders are skipped; default 0: error */
        char *format;        /* text (default) or jsonl (instruction data with a loss mask) */
        char *tokenizer;     /* bytes (default) or gpt2; text and jsonl are encoded with it */
        char *tokenizer_dir; /* the tokenizer's vocabulary folder (gpt2); NULL when none */
        char *chat_template; /* jsonl "messages": a built-in template; NULL: the tokenizer's */
        int packing;         /* jsonl: 1: examples in one stream; default 0: a window each */
    } data;

    struct {
        long steps;                 /* optimizer steps, default 100 */
        double epochs;              /* > 0: passes over data.train, which set steps once the data
                                       is read (session.c); default 0: steps counts */
        double neftune_noise_alpha; /* NEFTune's noise on the embeddings, 0 (default): off */
        uint64_t seed;              /* default 1234 */
        long eval_interval;         /* steps between evaluations, 0 = only at the end (if there is
                                       validation data); default 0 */
        long eval_batches; /* micro batches per evaluation, 0 = the whole val set; default 0 */
        char *output_dir;  /* default "runs/latest" */
        int save_final;    /* without checkpoint.dir: the weights to <output_dir>/final; true */
        char *resume;      /* "auto" (default), "never", or a checkpoint path */
        int on_nonfinite;  /* enum zt_nonfinite_action, default stop */
        int nonfinite_skip_limit; /* skip: consecutive skipped steps that end the run, default 10 */
    } run;

    struct {
        char *dir;  /* NULL: no checkpoints */
        long every; /* save every N steps; 0: only at the end and on preemption */
        int keep;   /* complete checkpoints kept, default 2 */
    } checkpoint;

    /* DeepSpeed's csv_monitor: rank 0 also writes each metric to a CSV
     * file of its own in output_path/job_name (report/csv_monitor.h). */
    struct {
        int enabled;       /* default false */
        char *output_path; /* default "": the current directory, as DeepSpeed's */
        char *job_name;    /* default "DeepSpeedJobName"; may be "" */
    } csv_monitor;

    struct {
        char *backend; /* "auto" (default), "mpi", "nccl" */
        char *reduce_scatter, *allgather,
            *allreduce;   /* MPI algorithms: "auto" (default), "native", "ring" */
        double timeout_s; /* a call blocked this long ends the job (flight.h); 0: off */
    } comm;

    /* Tensor parallelism (Megatron-LM's): each block's layers split across
     * `size` ranks. */
    struct {
        int size;              /* T, default 1 */
        int sequence_parallel; /* Megatron's sequence parallelism inside the group; default
                                  false; accepted at size 1, where it changes nothing */
    } tensor_parallel;

    /* Context parallelism (Megatron-LM's --context-parallel-size, torchtitan's
     * context_parallel_degree): each sequence split across `size` ranks,
     * attention computed ring-wise (worker/model_context.c). */
    struct {
        int size; /* C, default 1 */
    } context_parallel;

    /* Pipeline parallelism: the blocks cut into `stages` consecutive runs,
     * one per group of ranks, micro batches flowing through them. */
    struct {
        int stages;                               /* P, default 1; at most model.n_layer */
        enum pipeline_schedule schedule;          /* default 1f1b */
        enum pipeline_partition partition_method; /* default parameters */
        int virtual_stages; /* v chunks per stage (interleaved 1F1B), default 1 */
    } pipeline;

    int train_micro_batch_size_per_gpu; /* default 1 */
    int gradient_accumulation_steps;    /* default 1 */
    long train_batch_size;              /* 0 = not given; else must equal micro*accum*D */
    double gradient_clipping;           /* 0 = off; default 1.0 */
    long steps_per_print;               /* default 10 */
    char *device;                       /* compute backend: "auto" (default), "cpu", "cuda" */

    struct {
        char *type;          /* "AdamW" (also accepted: "Adam" with weight_decay as AdamW's) */
        double lr;           /* default 1e-3 */
        double beta1, beta2; /* betas, default [0.9, 0.999] */
        double eps;          /* default 1e-8; Adafactor: eps1, default 1e-30 */
        double eps2;         /* Adafactor: eps2, default 1e-3; 0: eps was one number */
        double weight_decay; /* default 0.01 */
        double momentum;     /* SGD, default 0 */
        double dampening;    /* SGD, default 0 */
        int nesterov;        /* SGD, default false */
        double clip_threshold, decay_rate;               /* Adafactor: 1.0, -0.8 */
        int scale_parameter, relative_step, warmup_init; /* Adafactor: true, false, false */
        long min_8bit_size;                              /* AdamW8bit: 4096 */
    } optimizer;

    struct {
        enum zt_sched_type type;         /* default NONE: constant lr */
        double warmup_min_lr;            /* WarmupLR/WarmupDecayLR, default 0 */
        double warmup_max_lr;            /* default optimizer.lr */
        long warmup_num_steps;           /* default 1000 as in DeepSpeed */
        enum zt_warmup_type warmup_type; /* default log, as in DeepSpeed */
        long total_num_steps;            /* WarmupDecayLR/WarmupCosineLR; default run.steps */
        int total_from_steps;            /* 1: total_num_steps was not given (follows run.steps) */
        double warmup_min_ratio;         /* WarmupCosineLR, default 0 */
        double cos_min_ratio;            /* WarmupCosineLR, default 1e-4 */
    } scheduler;

    struct {
        int stage;                 /* 0..3 */
        long reduce_bucket_size;   /* elements, default 5e8 as in DeepSpeed */
        int overlap_comm;          /* stages 0-1: reduce buckets in the backward; default 1 */
        int stage3_prefetch_depth; /* default 1 */
        /* HSDP: ZeRO shards within groups of this many consecutive
         * data-parallel ranks and replicates across the groups; 0 (the
         * default): the whole data-parallel group. */
        int shard_group_size;
        /* hpZ (stage 3): a secondary copy of the parameter shards
         * partitioned within groups of this many consecutive data-parallel
         * ranks, which the backward gathers from; 1 (the default): off. */
        int hpz_partition_size;
        /* Where each was set ("file:line:col", an override, or the file),
         * for config_check_world's messages. */
        char shard_group_where[512], hpz_where[512];
        /* ZeRO-Offload, DeepSpeed's offload_optimizer: read by the CUDA
         * engine; the CPU engine's states are host memory already, so there
         * it changes nothing (config_offload_note says so). */
        struct {
            enum zt_offload_device device; /* default none */
            int pin_memory; /* page-locked host buffers for the states; default false */
            /* device nvme (ZeRO-Infinity): the folder of the state files
             * (required), and the window they stream through: buffer_count
             * buffers of buffer_size elements of every state. */
            char *nvme_path;
            int buffer_count;
            long buffer_size;
        } offload_optimizer;
    } zero;

    struct {
        int enabled;
        double loss_scale;       /* 0 = dynamic (default) */
        int initial_scale_power; /* dynamic: start at 2^this, default 16 */
        int loss_scale_window;   /* clean steps before the scale doubles, default 1000 */
        int hysteresis;          /* overflows tolerated before the scale halves, default 2 */
        double min_loss_scale;   /* default 1 */
    } fp16;
    struct {
        int enabled;
    } bf16;
    struct {
        char *grad_accum_dtype; /* NULL: the working precision; fp32, bf16, fp16 */
    } data_types;
    struct {
        int enabled;
        int every_n_blocks; /* checkpoint blocks 0, n, 2n, ...; default 1 (every block) */
    } activation_checkpointing;
    /* fp8 GEMMs with delayed scaling (worker/fp8_scaling.h), Transformer
     * Engine's DelayedScaling names. */
    struct {
        int enabled;
        int format;            /* enum fp8_recipe_format: hybrid (default) or e4m3 */
        int amax_history_len;  /* default 1024, >= 1 */
        int amax_compute_algo; /* enum fp8_amax_algo: max (default) or most_recent */
        int margin;            /* scales divided by 2^margin, default 0 */
    } fp8;
};

/* One command-line override "key.path=value"; value is parsed as YAML
 * (so "[0.9, 0.95]" and "true" work). */
struct config_override {
    const char *assignment;
};

/* Loads `path`, applies the overrides in order and validates everything
 * that does not depend on the world size. On success *out is filled and must
 * be released with config_free; on failure *out is left zeroed.
 * Errors: ZT_ERR_CONFIG (an unreadable or missing file included),
 * ZT_ERR_UNSUPPORTED, ZT_ERR_NOMEM. */
zt_status config_load(const char *path, const struct config_override *overrides, int n_overrides,
                      struct zt_config *out);

/* Whether the config gives validation data: data.val, or a held-out tail
 * (data.val_fraction > 0). Without it a run does not evaluate (and
 * run.eval_interval must be 0, a rule config_load checks). */
int config_has_validation(const struct zt_config *cfg);

/* The model a Hugging Face config.json describes, as config_model_shape
 * gives it: the file read as model.hf_config, every key it does not give
 * at its default. For readers of an exported folder, which have no
 * configuration of their own. Errors: those of model.hf_config
 * (ZT_ERR_CONFIG naming the file, ZT_ERR_UNSUPPORTED), ZT_ERR_NOMEM. */
zt_status config_hf_model_shape(const char *config_json, struct zt_kvlist *shape);

/* The model family's description of the configured model (the shape
 * worker/model_family.h's param_table_build reads). */
void config_model_shape(const struct zt_config *cfg, struct zt_kvlist *shape);

/* Checks the rules that need the world size: it is a multiple of
 * tensor_parallel.size T x pipeline.stages P, and train_batch_size, when
 * given, equals micro batch x accumulation x the data-parallel size
 * D = world / (T x P) (as DeepSpeed, which counts data-parallel ranks only).
 * Errors: ZT_ERR_CONFIG naming the numbers, ZT_ERR_USAGE (world < 1). */
zt_status config_check_world(const struct zt_config *cfg, int world_size);

/* Writes the resolved configuration as YAML (every key, defaults included). */
zt_status config_write_yaml(const struct zt_config *cfg, FILE *f);

/* Frees the strings a loaded config owns and zeroes it; safe on a zeroed
 * or already freed config. */
void config_free(struct zt_config *cfg);

/* Writes the configuration reference (docs/reference/config.md) as Markdown
 * from the schema's table: per section every key's type, default, allowed
 * values, doc and DeepSpeed name, then DeepSpeed's keys accepted without
 * effect. Errors: ZT_ERR_IO when the stream reports a write error. */
zt_status config_write_reference(FILE *f);

/* The learning-rate schedule the config describes (optimizer.lr and the
 * scheduler section), for worker/schedule.h's schedule_lr. */
struct lr_schedule config_lr_schedule(const struct zt_config *cfg);

/* The config file's names of a pipeline schedule ("1f1b", "gpipe") and of
 * a partition method ("parameters", "uniform"); static storage. */
const char *config_pipeline_schedule_name(enum pipeline_schedule s);
const char *config_pipeline_partition_name(enum pipeline_partition p);

/* The one-line note (no newline) a run prints at start-up about
 * zero_optimization.offload_optimizer on a compute device whose memory is
 * host memory (host_memory nonzero: device cpu), where offloading the
 * optimizer states moves nothing; NULL when there is nothing to say
 * (offload off, or a GPU). Static storage. */
const char *config_offload_note(const struct zt_config *cfg, int host_memory);

/* Whether data_types.grad_accum_dtype keeps a 16-bit run's gradients in
 * fp32. */
int config_grad_accum_fp32(const struct zt_config *c);

/* quantization.bnb_4bit_compute_dtype as a dtype (ZT_F32, ZT_BF16 or
 * ZT_F16) of a loaded config. */
enum zt_dtype config_compute_dtype(const struct zt_config *c);

/* The optimizer hyperparameters the config gives, at learning rate lr (the
 * schedule's for the step at hand). */
struct optimizer_hparams config_optimizer_hparams(const struct zt_config *c, double lr);

/* Whether fp16's loss scale is dynamic (fp16.loss_scale 0). */
int config_loss_scale_dynamic(const struct zt_config *c);

/* Whether the step needs the gradient norm before any update: gradient
 * clipping, or a dynamic loss scale's overflow check. A fused-backward
 * optimizer (LOMO) then measures it in a first forward and backward. */
int config_norm_before_update(const struct zt_config *c);

#endif
