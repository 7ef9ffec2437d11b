/* plan/plan.h — `zerotrain plan`: every layout of a model on a
 * cluster, compared before any node is booked.
 *
 * A layout is the tensor x pipeline x data grid (T x P x D = the GPUs), the
 * ZeRO stage on the data-parallel axis, the micro batch and accumulation
 * that keep the global batch, the activation checkpointing interval and
 * sequence parallelism (at T > 1); the precision, optimizer, adapters and
 * HSDP/hpZ groups are the config's. For each layout
 * the plan gives:
 *
 *   memory   of each rank role (the first, the heaviest middle and the last
 *            pipeline stage; tensor- and data-parallel rank 0 of it), by
 *            ledger category: the config is changed to the layout and the
 *            rank's table, engine and model instances are built on a
 *            plan-only ledger, and one optimizer step's passes run through
 *            them (session_plan_step): the allocation code of training,
 *            run without memory, without MPI and without the other ranks.
 *            It equals what that rank's ledger measures in a run.
 *   traffic  bytes one rank sends per step on each axis, in the bus model
 *            of comm.h (what a run's metrics report as comm_bytes_by_axis),
 *            and the link class each axis's ring crosses.
 *   time     per role: matmul FLOPs at the rate their GEMMs' shapes allow
 *            (plan_gemm_rate), the other ops as activation traffic at its
 *            memory bandwidth, the optimizer step as state traffic, the
 *            collectives as bytes over the link's bandwidth plus a latency
 *            per ring step, ZeRO-2/3's exposed only where the compute
 *            beside them does not cover them (plan_pass_exposed), and the
 *            pipeline's bubble
 *            (less where the node's ranks oversubscribe its cores, so
 *            that an idle stage's core runs the others: plan_bubble).
 *
 * The cost model (plan_cost) is a pure function of a layout's facts and a
 * machine (config/machine.h), so it is tested without building anything.
 * Nothing here allocates the model: a plan of a trillion parameters on a
 * hundred thousand GPUs takes the time of its table walks.
 *
 * The folder: plan.c enumerates and ranks the layouts, plan_role.c builds
 * one rank role on a plan-only session (coordinator/session.h), plan_cost.c
 * is the cost model, with plan_gemm.c (rates by shape) and plan_overlap.c
 * (ZeRO's traffic against the compute), and calibrate.h (included below,
 * so that this header is the folder's whole face) measures a node into the
 * machine file that the cost model reads. It stands above coordinator/; only cli/ uses it.
 */
#ifndef ZT_PLAN_PLAN_H
#define ZT_PLAN_PLAN_H

#include <stdio.h>

#include "../comm/comm.h"
#include "../common/ledger.h"
#include "../config/config.h"
#include "../config/machine.h"
#include "../coordinator/run_checkpoint.h"
#include "../report/rss_model.h"
#include "calibrate.h"

/* One layout to plan. */
struct plan_layout {
    int tp, pp, dp;
    int zero_stage;
    int micro_batch, accum; /* per data-parallel rank: micro_batch x accum sequences */
    int ckpt_every;         /* activation checkpointing interval, 0: off */
    int vp;                 /* model chunks per pipeline stage (interleaved 1F1B); 0 or 1: one */
    int cp;                 /* context-parallel size C (0 or 1: none); dp counts replicas */
    int sequence_parallel;  /* Megatron's sequence parallelism in the tensor group (T > 1) */
};

/* The most model chunks per stage a plan tries (interleaved 1F1B). */
#define PLAN_MAX_CHUNKS 4

/* Axes in the order metrics report them (step_record.axis). */
enum plan_axis { PLAN_AXIS_TENSOR, PLAN_AXIS_PIPELINE, PLAN_AXIS_DATA, PLAN_AXIS_COUNT };

/* What one rank role holds and does in one optimizer step: the facts the
 * cost model needs, all read from the built rank. */
struct plan_role {
    int stage;       /* its pipeline stage */
    int first, last; /* the stage holds the embedding / the head */
    int blocks;      /* blocks of the stage */
    int slots;       /* model instances in flight (pipeline schedule), all chunks' */
    int chunks;      /* model chunks of the stage (interleaved 1F1B), else 1 */
    uint64_t peak[LEDGER_CATEGORY_COUNT];
    uint64_t total_peak;
    /* the rank's ZeRO partition: full padded elements of all units and of
     * the trainable ones, and the rank's share of the trainable ones */
    size_t padded, trainable_padded, trainable_shard;
    size_t esz;         /* bytes of a working-precision element */
    size_t grad_esz;    /* bytes of a gradient element (fp32 with grad_accum_dtype fp32) */
    size_t act_esz;     /* bytes of an activation element: the compute type's */
    size_t pass_bytes;  /* full units a micro batch's passes acquire, in bytes */
    size_t state_bytes; /* the rank's persistent model states */
    size_t nvme_bytes;  /* NVMe offload: its state file, in no peak (0 without) */
    size_t boundary;    /* elements crossing a stage boundary per micro batch */
    int tied_exchange;  /* exchanges a tied embedding's gradient with another stage */
    size_t tied_elems;  /* that exchange's elements */
    double flops;       /* matmul FLOPs of one micro batch on this rank */
    int units;          /* units the stage's passes acquire */
    /* attention's part of flops */
    double attention_flops;
    /* its host memory, peak RSS by part (plan_rss_role) */
    struct rss_parts rss;
    /* model.init_from's load (zero without): the ledger's peaks and the
     * cache's kept bytes once the weights are read, and the RSS then */
    uint64_t loaded_peak[LEDGER_CATEGORY_COUNT], loaded_total_peak, loaded_cache_kept;
    struct rss_parts rss_loaded;
    struct run_import_work load_work; /* that load's work on the rank */
    /* of pass_bytes, the forward's, and the forward's distinct units (hpZ
     * gathers a unit's first use in a step from the shard group) */
    size_t pass_bytes_forward, pass_bytes_distinct;
    /* elements of 4-bit units a micro batch's passes decode (QLoRA: each
     * acquire decodes the unit) */
    size_t decoded_elems;
    /* a micro batch's activations on the stage without checkpointing, all
     * chunks: what its element-wise ops write and read */
    size_t act_pass_bytes;
    /* what the CPU device's host cache keeps beyond its live peak, from a
     * model of it (device_memory_info: resident_peak - held_peak) */
    uint64_t cache_kept;
};

/* One linear layer's weight of a block (or the head), or a LoRA adapter of
 * one: the GEMMs it is part of multiply a micro batch's rows by it. */
struct plan_weight {
    int out, in;   /* its rows and columns, whole */
    int split;     /* how tensor parallelism cuts it: enum tp_split (worker/tensor_parallel.h) */
    int trainable; /* 0: frozen, no weight gradient is formed (a LoRA base) */
};

#define PLAN_MAX_WEIGHTS 24

/* The model-wide facts of a plan (the same for every layout). */
struct plan_model {
    int layers, heads, kv_heads, embd, vocab, seq;
    double flops_per_token; /* one training step of the whole model */
    int norm_vectors;       /* vectors of one norm: 2 (LayerNorm), 1 (RMSNorm) */
    int sequence_parallel;  /* tensor_parallel.sequence_parallel */
    size_t n_params;
    int prefetch_depth;                       /* zero.stage3_prefetch_depth */
    int shard_group_size, hpz_partition_size; /* HSDP's G (0: off) and hpZ's H (1: off) */
    int n_weights; /* linear weights and adapters of one block, in weights[]; 0: unknown */
    struct plan_weight weights[PLAN_MAX_WEIGHTS];
    struct plan_weight head; /* the output head's (vocabulary rows) */
    char optimizer[24];      /* the optimizer's name, as its table entry spells it */
    /* forward and backward passes over a step's micro batches: 2 where a
     * fused-backward optimizer (LOMO) measures the norm in a first pass
     * before it updates (clipping, fp16's dynamic loss scale), else 1 */
    int passes;
    /* bytes an element of model.init_from's files takes: the .safetensors
     * files' size over the base's elements (0: no file, or none found) */
    double weights_file_esz;
};

/* What the cost model predicts for one role of one layout. */
struct plan_time {
    double compute;                  /* matmuls + other ops + 4-bit decodes, all micro batches */
    double matmul, decode;           /* two parts of compute: the linear layers' and attention's
                                        products, and QLoRA's decodes */
    double attention;                /* attention's part of matmul */
    double optimizer;                /* the optimizer step: its update, or its state files'
                                        reads and writes where they take longer (nvme) */
    double nvme;                     /* the disk's reads and writes of a step (nvme offload) */
    double grad_passes;              /* the step's passes over the reduced gradients: the
                                        micro batches' adds, the norm, the zeroing */
    double comm[PLAN_AXIS_COUNT];    /* every collective of the axis, whole */
    double exposed[PLAN_AXIS_COUNT]; /* the part the stage's overlap leaves */
    double bubble;                   /* idle time of the pipeline schedule */
    double context;                  /* ring attention's exposed time (plan_context.c) */
    double step;                     /* the step: all of it */
    double load; /* model.init_from's load on the rank, before the steps; NAN: not predicted */
    double load_cached;              /* the same with the files already in the page cache */
    uint64_t bytes[PLAN_AXIS_COUNT]; /* bytes this rank sends per step */
    int inter_node[PLAN_AXIS_COUNT]; /* the axis's ring crosses nodes */
};

/* Facts of the model a config describes. Errors: session_build_table's. */
zt_status plan_model_of(const struct zt_config *c, struct plan_model *out);

/* A copy of `base` set to layout l (shallow: shares base's strings; do not
 * config_free it). */
struct zt_config plan_config(const struct zt_config *base, const struct plan_layout *l);

/* Builds pipeline stage `stage` of layout l's rank (tp 0, dp 0) on a
 * plan-only ledger and runs one optimizer step's passes through it.
 * Errors: those of building the table, engine and instances
 * (ZT_ERR_CONFIG for a layout the model cannot take). */
zt_status plan_role(const struct zt_config *base, const struct plan_layout *l, int stage,
                    struct plan_role *out);

/* The blocks of each of layout l's pipeline stages, into blocks[0..pp).
 * Errors: those of building the table; ZT_ERR_CONFIG (fewer blocks than
 * stages). */
zt_status plan_stage_blocks(const struct zt_config *base, const struct plan_layout *l, int *blocks);

/* Predicted traffic and time of role r of layout l on machine m, with
 * `per_node` GPUs per node. */
void plan_cost(const struct plan_model *pm, const struct plan_layout *l, const struct plan_role *r,
               const struct machine *m, int per_node, enum machine_precision precision,
               struct plan_time *out);

/* Sustained FLOP/s one rank gets, with `per_node` ranks on its node, in
 * product `prod` of a linear layer of `in` x `out` weights over `rows` rows
 * in precision p (plan_gemm.c). With measured layers (calibrate's
 * gemm_rates; fp32's where p has none), the rows of the thread count
 * nearest the rank's (cores / per_node, at least 1), scaled by the ratio,
 * weighted by inverse distance in log(rows, in, out) and exact at a
 * measured shape, times plan_core_share; else a roofline: the time of the
 * FLOPs of whole gemm_tile tiles at matmul_flops, or of moving the three
 * matrices at memory_bandwidth, whichever is longer, over
 * plan_device_share. */
double plan_gemm_rate(const struct machine *mach, enum machine_precision p,
                      enum machine_product prod, int per_node, double rows, double in, double out);

/* The FLOP/s a rank sustains over one micro batch's linear layers: the
 * block's weights and adapters (and the head's on the last stage) at
 * layout l's shape of a rank (micro_batch x seq / context rows, each
 * weight's cut dimension over T), each product at plan_gemm_rate (the
 * forward twice under checkpointing, no weight gradient for a frozen
 * weight), averaged by their FLOPs over `blocks` blocks and the head when
 * `last`. matmul_flops over plan_device_share when pm states no weights. */
double plan_matmul_rate(const struct plan_model *pm, const struct plan_layout *l, int blocks,
                        int last, const struct machine *mach, enum machine_precision p,
                        int per_node);

/* How many ranks share one device: per_node over devices_per_node, at
 * least 1 (more than one on a CPU node, whose cores are its one device). */
double plan_device_share(const struct machine *m, int per_node);

/* The share of a core one rank's thread gets: 1 while the node's ranks
 * fit its cores, cores / ranks beyond (and 1 where cores are not stated). */
double plan_core_share(const struct machine *m, int per_node);

/* Exposed seconds of a pass over n units whose parameters one link gathers
 * before each unit's compute and whose gradients it reduce-scatters after
 * (plan_overlap.c): unit i computes `work` seconds, its gather (`gather`
 * seconds, 0: none) may start once unit i - depth - 1 has computed (depth
 * units prefetched; depth 0: on demand), and its reduce-scatter (`reduce`
 * seconds, 0: none) is queued when it has. The link serves them in the
 * order issued. The result is the pass's length less n x work: the first
 * gather and the last reduce-scatter always, and the rest as far as the
 * compute beside them does not cover them. */
double plan_pass_exposed(int n, double work, double gather, double reduce, int depth);

/* Units plan_pass_exposed walks one by one; a longer pass scales the walk
 * of this many (its units being equal, the rest is its steady state). */
#define PLAN_MAX_PASS_UNITS 1024

/* The idle time the pipeline schedule exposes in a step of `busy` seconds
 * of a stage's own work, P = pp stages, m = accum micro batches and v
 * model chunks per stage: busy x (P-1)/(v m), the bubble of 1F1B and GPipe
 * at v = 1 and of interleaved 1F1B (Narayanan et al. 2021), when each rank
 * has its cores to itself (oversubscription 1). When the node's ranks ask
 * for o > 1 times its cores (machine.h's cores), a stage's idle time is
 * absorbed by the other ranks taking its core:
 * max(0, busy x (1 + (P-1)/(v m)) / o - busy). */
double plan_bubble(double busy, int pp, int accum, int chunks, double oversubscription);

/* Context parallelism (plan_context.c): C of layout l (1 without); why
 * the config cannot run l's C, as config_load would refuse it, or NULL;
 * and ring attention's traffic on the data axis and exposed time, added
 * to out by plan_cost (flops_rate: the rank's matmul rate). */
int plan_context_size(const struct plan_layout *l);
const char *plan_context_unsupported(const struct zt_config *c, const struct plan_layout *l);
void plan_context_cost(const struct plan_model *pm, const struct plan_layout *l,
                       const struct plan_role *r, const struct machine *m, double flops_rate,
                       int per_node, struct plan_time *out);

/* Host memory (plan_rss.c): the measured parts of a planned rank's peak
 * RSS, taken in this process at start-up (report/rss_model.h; without
 * MPI's buffers, which the dry run measures), and the parts of role r on
 * machine m from its ledger peaks and the config's data files. Errors:
 * those of opening the CPU backend and of the probe. */
zt_status plan_rss_start(const struct zt_config *c, const struct machine *m, struct rss_start *out);
void plan_rss_role(const struct zt_config *c, const struct machine *m, const struct rss_start *st,
                   struct plan_role *r);
/* Prints the n roles' predicted RSS, part by part, to f. */
void plan_rss_print(const struct plan_role *roles, int n, FILE *f);

/* The settings the search varies, each of which --keep KEY holds at the
 * config's value instead (a stack without ZeRO, a run that must
 * recompute): zero_optimization.stage, activation_checkpointing,
 * tensor_parallel.sequence_parallel, pipeline.virtual_stages and
 * train_micro_batch_size_per_gpu. Another key is a ZT_ERR_USAGE naming
 * them. */
#define PLAN_MAX_KEEP 8

/* The command's options. */
struct plan_options {
    const char *config_path;
    const struct config_override *overrides;
    int n_overrides;
    int gpus;                        /* N */
    int per_node;                    /* 0: the machine's devices_per_node (a CPU node: cores) */
    uint64_t gpu_memory;             /* 0: the machine's device_memory */
    const char *machine;             /* name or path; NULL: h100-sxm */
    long global_batch;               /* sequences per step; 0: the config's micro x accum x N */
    int top;                         /* rows printed, default 10 */
    const char *json_path;           /* NULL: none */
    int all;                         /* print every layout, fitting or not */
    const char *keep[PLAN_MAX_KEEP]; /* --keep KEY: searched settings held at the config's */
    int n_keep;
};

/* Fraction of a device's memory kept free for the allocator's
 * fragmentation and the libraries' own buffers (CUDA context, cuBLAS
 * workspace, NCCL channels): a layout fits when its largest role's
 * total peak is at most (1 - margin) of the memory. */
#define PLAN_ALLOCATOR_MARGIN 0.10

/* Runs the plan and prints the table to f. Errors: ZT_ERR_USAGE,
 * ZT_ERR_CONFIG, ZT_ERR_IO (the JSON), ZT_ERR_NOMEM. */
zt_status plan_run(const struct plan_options *o, FILE *f);

#endif
