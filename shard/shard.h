/* shard/shard.h — ZeRO: who owns which part of the model states, and the
 * engine that keeps them, lends parameters to the model and takes the
 * optimizer step.
 *
 * Partition. The flat parameter space is split unit by unit (see
 * worker/model.h): every unit of n elements is padded to n_pad, a multiple
 * of world * ZT_SHARD_ALIGN, and rank r owns unit elements [r*n_pad/world,
 * (r+1)*n_pad/world), the way FSDP splits flat parameters. Gathering a unit
 * is then one allgather with equal shares and reducing its gradients one
 * reduce-scatter. Full-size buffers use the padded layout too (unit u at
 * padded_offset); sharded ones hold the rank's shards back to back (unit u
 * at shard_offset). The padding never trains and is counted in memory. The
 * partition is a pure function of (table, world), the same in every stage.
 *
 * Pipelines. The data-parallel ranks of one pipeline stage hold only the
 * units the stage uses (worker/model_family.h's model_stage_holds): the
 * others are in the partition with no elements (`held` 0), so a unit is
 * split among the D ranks of its stage exactly as it would be without a
 * pipeline. A tied embedding lives on the first and the last stage, its
 * two copies kept equal: after the data-parallel reduction their reduced
 * gradients are exchanged and added (A + B on one, B + A on the other:
 * the same bits), and the last stage's copy is left out of the global
 * gradient norm, which is summed over the pipeline too.
 *
 * Stages (what each rank keeps between steps; Ψ parameters, N ranks):
 *   0  full params, full grads, full optimizer state; the grads allreduced
 *      once per step.
 *   1  full params, full grads, optimizer state of its shards; per step one
 *      reduce-scatter of the grads per unit, the update of its shards, and
 *      an allgather of the updated params per unit.
 *      Under both, with overlap_comm, the step's last backward issues those
 *      reductions in buckets of reduce_bucket_size elements as its units'
 *      gradients become final (stage 0: one allreduce per run of adjacent
 *      units), non-blocking and advanced between units, as DDP's buckets
 *      are; the step then only waits. The grads are reduced in place, so no
 *      buffer is added.
 *   2  full params, grads of its shards only: during the backward each
 *      unit's full gradient lives in a transient buffer until it is
 *      reduce-scattered and added to the shard. Completed units gather in a
 *      bucket of whole units; once it holds reduce_bucket_size elements its
 *      reduce-scatters are issued (non-blocking) and the previous bucket's
 *      are completed, so one bucket reduces while the backward fills the
 *      next. Then the update and allgather as in stage 1.
 *   3  params of its shards only: each unit is allgathered into a gather
 *      buffer before use and released after, the next ones prefetched
 *      (stage3_prefetch_depth); gradients as in stage 2; the update needs no
 *      allgather.
 *
 * Hierarchy (node-aware ZeRO). HSDP (cfg.replicas R > 1): the engine's
 * comm is one shard group of G = world ranks, and the D = G * R
 * data-parallel ranks are R such groups holding the same shards: the
 * partition and everything above is over the group, and once the
 * gradients are reduce-scattered within it (accumulated over the step's
 * micro steps) the reduced shards are allreduced across the replicas (the
 * R ranks holding the same shard), once per step before the norm; the
 * average is over all D ranks. hpZ (cfg.secondary_size H > 1, stage 3,
 * ZeRO++): besides the primary shards over all ranks, each rank keeps a
 * secondary copy of every unit partitioned within its group of H ranks
 * (LEDGER_SECONDARY_PARAMS, 1/H of each padded unit). A unit's first
 * gather of a step (a forward's) is a primary one over all ranks, and the
 * rank copies its secondary share out of the gathered unit; every later
 * gather of it that step (the backward's, the next micro steps'
 * forwards') is an allgather of the secondary shares within the group,
 * which stays inside a node. The update makes the secondary copy stale.
 *
 * Where the math runs: every operation on the states (precision casts, the
 * gradient norm, unscaling, the optimizer update, adding reduced shards,
 * zeroing) is an op of the compute backend the engine was created with
 * (worker/backend.h), so the same engine drives host memory through the CPU
 * ops and device memory through a GPU's; the engine's own code only
 * decides what runs where. Host-side staging (initial values, exports) is
 * converted on the host and copied through the device's copy functions.
 * Under ZeRO-Offload (cfg.offload_optimizer) the master, the optimizer's
 * states and the update move to a second, CPU backend (shard/offload.c):
 * the states are then in host memory and the update's ops are the CPU's,
 * while params, gradients, the reductions and the norm stay on the device.
 *
 * Block life cycle under stage 3 (one gather buffer per scheduled use):
 *
 *   RELEASED --start_gather--> GATHERING --finish_gather--> RESIDENT
 *      ^                                                       |
 *      +--------------------- params_release ------------------+
 */
#ifndef ZT_SHARD_H
#define ZT_SHARD_H

#include <stddef.h>
#include <stdio.h>

#include "../comm/comm.h"
#include "../common/status.h"
#include "../worker/backend.h"
#include "../worker/model_family.h"
#include "../worker/optimizer.h"

/* What a ZeRO stage keeps sharded, and from that how it communicates: the
 * one definition of the stages, which the engine, the memory report and
 * evaluation all read (the table at the top of this file in flags).
 * "States" are the optimizer's state vectors and the fp32 master copy; the
 * paper counts the master with the optimizer states. */
struct shard_policy {
    int stage;
    int shard_states; /* the rank keeps states of its range only (stages 1-3) */
    int shard_grads;  /* gradients are shards, reduce-scattered per unit in the backward (2-3) */
    int shard_params; /* parameters are shards, gathered per unit for each use (3) */
};

/* The policy of ZeRO stage `stage`, or NULL outside 0..3. Static storage. */
const struct shard_policy *shard_policy_of(int stage);

/* Full gradients allreduced at the step, everything full (stage 0). */
static inline int shard_policy_allreduces_grads(const struct shard_policy *p)
{
    return !p->shard_states;
}
/* Full gradients reduce-scattered unit by unit at the step (stage 1). */
static inline int shard_policy_reduces_at_step(const struct shard_policy *p)
{
    return p->shard_states && !p->shard_grads;
}
/* Full parameters allgathered after the sharded update (stages 1-2). */
static inline int shard_policy_regathers_params(const struct shard_policy *p)
{
    return p->shard_states && !p->shard_params;
}
/* Every forward gathers parameters with all ranks, so every rank must run
 * the same number of forwards (stage 3). */
static inline int shard_policy_forward_is_collective(const struct shard_policy *p)
{
    return p->shard_params;
}

/* Elements per alignment quantum of a shard: 16 floats = 64 bytes. */
#define ZT_SHARD_ALIGN 16

struct shard_unit {
    size_t offset;        /* first element of the unit in the flat space */
    int held;             /* the rank's pipeline stage uses the unit (else numel is 0) */
    size_t numel;         /* real elements held */
    size_t padded;        /* numel rounded up to a multiple of world * ZT_SHARD_ALIGN */
    size_t shard;         /* padded / world: what each rank owns */
    size_t padded_offset; /* where the unit starts in a full padded buffer */
    size_t shard_offset;  /* where the rank's shard starts in a sharded buffer */
    /* Some tensor of the unit trains: only then does the unit have
     * gradients, a master copy and optimizer states, which live in buffers
     * of the trainable units alone, at these offsets (SHARD_NO_STATE when
     * the unit is frozen). */
    int trainable;
    size_t state_padded_offset; /* in a full padded buffer of trainable units */
    size_t state_shard_offset;  /* in a sharded buffer of trainable units */
    /* A packed unit (worker/param_quant.h: a 4-bit base, always frozen) is
     * not in the working-precision params: its byte image of `image`
     * bytes, padded to world * ZT_SHARD_ALIGN * 4 bytes, lives in the
     * packed buffer at these byte offsets (shard_partition_pack). */
    int packed;
    size_t image, image_padded, image_shard, image_offset, image_shard_offset;
};

#define SHARD_NO_STATE ((size_t)-1)

struct shard_partition {
    int world;
    int n_units;
    struct shard_unit *units;  /* owned */
    size_t padded_total;       /* sum of padded unit sizes: a full buffer */
    size_t shard_total;        /* sum of unit shards: elements one rank owns */
    size_t state_padded_total; /* the same over trainable units: gradient, */
    size_t state_shard_total;  /* master and optimizer-state buffers */
    size_t trainable_numel;    /* real elements of the trainable units */
    size_t packed_total;       /* bytes of the packed units' images: full, */
    size_t packed_shard_total; /* and one rank's shares */
};

/* Builds the partition of `t` over `world` ranks. Errors: ZT_ERR_NOMEM. */
zt_status shard_partition_build(const struct param_table *t, int world,
                                struct shard_partition *out);
/* The same for the ranks of pipeline stage `stage` (NULL: the whole
 * model): the units it does not use are held by nobody here. */
zt_status shard_partition_build_stage(const struct param_table *t, int world,
                                      const struct model_stage *stage, struct shard_partition *out);
void shard_partition_free(struct shard_partition *p);
/* Takes t's packed units (4-bit base) out of the working-precision
 * layout, which closes up, into byte images of their param_quant sizes
 * at precision `working`. What the engine runs on; a partition only
 * describing checkpoint shares needs no packing. */
void shard_partition_pack(struct shard_partition *p, const struct param_table *t,
                          enum zt_dtype working);
/* Prints the partition (one line per unit and per rank's range). */
void shard_partition_print(const struct shard_partition *p, const struct param_table *t, FILE *f);

struct shard_engine_config {
    int stage;       /* 0..3 */
    int world, rank; /* the partition's; a plan may differ from the comm's */
    double clip;     /* global-norm clipping threshold, 0 = off */
    uint64_t seed;
    size_t reduce_bucket_size; /* elements per gradient bucket, >= 1 */
    int overlap_comm;          /* stages 0-1: shard_engine_final_backward reduces buckets in it */
    int prefetch_depth;        /* stage 3: units gathered ahead, >= 0 */
    enum zt_dtype precision;   /* working params and grads: ZT_F32, ZT_BF16 or ZT_F16 */
    /* DeepSpeed's data_types.grad_accum_dtype fp32 under 16-bit precision:
     * the grads, their accumulation over micro steps and their reductions
     * are fp32 while the params stay 16-bit. */
    int grad_accum_fp32;
    const struct optimizer_ops *optimizer; /* its states are kept on the rank's range */
    int optimizer_states; /* how many of them: optimizer_state_count() of the run's hparams */
    /* The run's hyperparameters as configured (the step passes its own,
     * with the scheduled lr): what sizes the optimizer's state. */
    struct optimizer_hparams hparams;
    /* The pipeline stage whose units the engine keeps; NULL: the whole
     * model. Copied at create. */
    const struct model_stage *pipeline_stage;
    /* HSDP: how many shard groups of `world` ranks hold the same shards
     * (the data-parallel size is world * replicas); 0 or 1: none. The
     * groups' comm comes with shard_engine_join_replicas. */
    int replicas;
    /* hpZ, stage 3: the secondary partition's group size H (dividing
     * world; the rank's place in its group is rank % H); 0 or 1: none.
     * The group's comm comes with shard_engine_join_secondary. */
    int secondary_size;
    /* ZeRO-Offload (DeepSpeed's offload_optimizer: {device: cpu}): the
     * fp32 master (kept under fp32 precision too), the optimizer states and
     * the whole-tensor state live in host memory and the update runs there
     * on the CPU op table; each step copies the reduced gradients of the
     * rank's ranges device -> host and the updated working parameters host
     * -> device. Only when the compute backend's memory is not host memory
     * (a GPU's), unless offload_force. Refused with a fused-backward
     * optimizer (LOMO updates inside the backward). */
    int offload_optimizer;
    /* Allocate those host states through `pinned` (page-locked memory,
     * which the device copies at full bus speed); without the hook they are
     * ordinary host memory. */
    int offload_pin_memory;
    const struct shard_pinned_alloc *pinned; /* borrowed; NULL: pageable */
    /* For tests: take the offload path even on host memory (the copies
     * are then memcpys through the CPU device table), so that a machine
     * without a GPU runs all of it. */
    int offload_force;
    /* ZeRO-Infinity (offload_optimizer: {device: nvme}), with
     * offload_optimizer: the master and the optimizer's states live in one
     * file of this rank under nvme_path instead of host memory, and each
     * update streams them through a window of nvme_buffer_count buffers of
     * nvme_buffer_elems elements of every state (shard/nvme.c), on host
     * memory too. NULL: in memory. Borrowed, like nvme_name: the file's
     * name in the folder (NULL: "zerotrain-rank<rank>.states"). A plan
     * counts the window and creates no file. */
    const char *nvme_path, *nvme_name;
    int nvme_buffer_count;
    size_t nvme_buffer_elems;
    /* Called by the I/O thread once per update, after the update's first
     * chunk was written to the file (with the count of updates, this one
     * included), for the tests' crash injection. NULL: none. */
    void (*nvme_written)(void *arg, long updates);
    void *nvme_written_arg;
    /* Leave the initial values undrawn (zeros) at create: the caller
     * draws or loads every unit (shard_engine_init_units, set_state,
     * set_packed_bytes) before the first step. For a run whose weights come
     * from a file, which drawing a multi-billion model first would only
     * slow down. */
    int defer_init;
};

/* Elements of a unit drawn per chunk by shard_engine_init_units (its host
 * staging: this many floats and as many working-precision elements). */
#define SHARD_INIT_CHUNK ((size_t)1 << 20)

/* Page-locked host memory (cudaMallocHost / cudaFreeHost on a GPU) for
 * ZeRO-Offload's host states. alloc: *out NULL with ZT_OK, or an error,
 * when the bytes are not there. */
struct shard_pinned_alloc {
    zt_status (*alloc)(size_t bytes, void **out);
    void (*free)(void *p);
};

#define SHARD_MAX_ALLOCS (5 + OPTIMIZER_MAX_STATES)

struct shard_alloc {
    const struct device *dev; /* the engine's device, or the offload host's */
    enum ledger_category cat;
    size_t bytes;
    void *ptr; /* NULL under a plan-only ledger */
};

/* Where the engine's share of a step's time goes, when profiling (train
 * --profile): seconds per phase, each communication wait counted in the
 * phase that issued the collective. The model's ops are timed apart
 * (worker/model_family.h), and hooks are called between the model's timed
 * ops, never inside one, so no second is counted twice. */
#define SHARD_PROFILE_PHASES(X)                                                                    \
    X(SHARD_PROF_GATHER, "param gather")      /* stage 3: gathering units, waits, buffers */       \
    X(SHARD_PROF_CAST, "precision cast")      /* fp32 views of 16-bit params and grads, 4-bit */   \
    X(SHARD_PROF_REDUCE, "grad reduce")       /* reducing gradients, their waits and buffers */    \
    X(SHARD_PROF_PROGRESS, "comm progress")   /* collectives in flight advanced between units */   \
    X(SHARD_PROF_GRAD_ADD, "grad add")        /* stages 2-3: reduced shards into the grads */      \
    X(SHARD_PROF_NORM, "grad norm")           /* the global norm and its agreement */              \
    X(SHARD_PROF_UPDATE, "optimizer")         /* the update and its staging */                     \
    X(SHARD_PROF_REGATHER, "param allgather") /* stages 1-2: updated params regathered */          \
    X(SHARD_PROF_ZERO_GRADS, "grad zeroing")

enum shard_profile_phase {
#define SHARD_PROFILE_ENUM(id, name) id,
    SHARD_PROFILE_PHASES(SHARD_PROFILE_ENUM)
#undef SHARD_PROFILE_ENUM
        SHARD_PROF_COUNT
};

struct shard_profile {
    double seconds[SHARD_PROF_COUNT]; /* the engine adds to them, nobody resets them */
};

/* Name of a phase ("grad reduce"). */
const char *shard_profile_name(enum shard_profile_phase p);

struct shard_gather;  /* stage-3 gather buffers in flight or resident */
struct shard_offload; /* ZeRO-Offload's host backend (shard/offload.c) */
struct shard_nvme;    /* ZeRO-Infinity's state file and window (shard/nvme.c) */
struct shard_reduce;  /* stage-2/3 gradient reductions in flight */

struct shard_engine {
    struct shard_engine_config cfg;
    struct shard_policy policy;       /* of cfg.stage */
    const struct param_table *table;  /* not owned */
    struct comm *comm;                /* not owned; NULL for a plan */
    const struct compute_backend *be; /* not owned: memory, ops, stream */
    const struct device *dev;         /* &be->dev */
    const struct ops_backend *ops;    /* be->ops: all arithmetic on the states */
    struct shard_partition part;
    int plan; /* the device is plan-only: count, never compute or communicate */

    /* Persistent model states (see the stage table above). Params hold
     * `esz`-byte elements of cfg.precision, grads `gsz`-byte elements of
     * `grad_type` (cfg.precision, or fp32 with grad_accum_fp32); master and
     * moments fp32. */
    size_t esz, gsz;
    enum zt_dtype grad_type;
    void *params;  /* stages 0-2: full padded; stage 3: shards */
    void *packed;  /* the packed units' byte images (a 4-bit base), laid out like params */
    void *grads;   /* stages 0-1: full padded; stages 2-3: shards */
    float *master; /* 16-bit or offload: stage 0 full padded, else shards; else NULL */
    /* The optimizer's state vectors (cfg.optimizer_states of them, each of
     * its state_dtype), laid out like master: stage 0 full padded, else
     * shards. */
    void *states[OPTIMIZER_MAX_STATES];
    /* Whole-tensor optimizers: the small per-tensor state every rank keeps
     * whole (Adafactor's row and column factors), tensor k's at
     * tensor_state_off[k]; NULL and 0 for the others. */
    float *tensor_state;
    size_t tensor_state_len;
    size_t *tensor_state_off; /* n_tensors entries, SHARD_NO_STATE for frozen tensors */
    struct shard_alloc allocs[SHARD_MAX_ALLOCS]; /* every persistent allocation */
    int n_allocs;
    /* Where master, states and tensor_state live and the ops that work on
     * them: dev and ops, or under offload the host backend's (`offload`,
     * NULL without). Every pointer above is in state_dev's memory but
     * params, packed, grads and secondary_params, which are in dev's. */
    struct shard_offload *offload;
    /* Under NVMe offload: master and states are in the file, and `master`
     * and `states` are NULL (the update and the state access stream them
     * through the window). NULL otherwise. */
    struct shard_nvme *nvme;
    const struct device *state_dev;
    const struct ops_backend *state_ops;

    /* Stages 2-3: each unit's transient full gradient buffer (comm_buffers),
     * the reductions in flight (the previous bucket), oldest first, and the
     * units of the open bucket. */
    void **unit_grads; /* n_units entries */
    struct shard_reduce *reduces;
    int n_reduces;
    int *bucket; /* units whose gradients are complete, not yet issued */
    int n_bucket;
    size_t bucket_elems;

    /* Stages 0-1 in a backward armed by shard_engine_final_backward: the
     * reductions issued from the full grads, oldest first (at most one per
     * unit), which units they covered, and stage 1's reduced shards,
     * allocated with its first reduction and freed by the step. */
    int final_backward, early_issued; /* armed; the step finds reductions issued */
    struct comm_request **early;
    int n_early;
    unsigned char *unit_reduced; /* n_units flags */
    void *early_shards;
    int early_shards_held;

    /* Stage 3: the pass's unit schedule and the gathers of its positions. */
    int schedule[MODEL_MAX_UNITS + 4];
    int n_schedule, cursor, issued;
    struct shard_gather *gathers; /* one per schedule position */

    /* Per unit, the views the model computes with (workspace): a 16-bit
     * unit's fp32 params and grads when it computes in fp32, a packed
     * unit's decoded params in the compute type. */
    void **param_view, **grad_view;

    /* The pass the model is in, for the ledger's phase (common/ledger.h). */
    enum ledger_phase_kind pass_phase;

    /* Fused-backward optimizers (LOMO): what the backward does with each
     * unit's reduced gradient (see shard_engine_fused_arm). */
    struct {
        int update;                  /* 0: measure the norm only */
        struct optimizer_hparams hp; /* of this step */
        double unscale;              /* 1 / (world * loss scale) */
        float gscale;                /* unscale times the clipping coefficient */
        double sumsq;                /* of the unscaled gradients this rank reduced */
        void *tied;                  /* a pipeline's tied embedding, reduced, till the step's end */
        int tied_held;
    } fused;

    long updates;                  /* optimizer steps taken */
    struct model_unit_hooks hooks; /* what the model borrows through */
    struct shard_profile *profile; /* not owned; NULL: no timing. Set by the caller */
    /* not owned; NULL (always but in a re-run step): none. Set by the caller */
    const struct shard_reduced_probe *reduced_probe;

    /* Pipelines (shard_engine_join_pipeline): the stage, the pipeline's
     * group (the rank's stage is its rank there; NULL: no pipeline), the
     * stage holding the other copy of a tied embedding (-1: none), and
     * whether this copy is the one the norm leaves out. */
    struct model_stage pipeline_stage;
    struct comm *pipe;
    int tie_peer, tie_duplicate;

    /* Tensor parallelism (shard_engine_join_tensor): the group of the
     * ranks holding the other slices of this rank's tensors; NULL: none. */
    struct comm *tensor;
    /* Context parallelism (shard_engine_join_context): the ranks holding
     * the other parts of this rank's sequences, in ring order; NULL: none. */
    struct comm *context;

    /* HSDP (shard_engine_join_replicas): the ranks holding this rank's
     * shards in the other shard groups; NULL: none. */
    struct comm *replica;
    /* hpZ: the secondary group (shard_engine_join_secondary; NULL for a
     * plan), the secondary copy (each held unit's share of unit_bytes / H
     * at secondary_off[u]) and which units' shares are current this step. */
    struct comm *secondary;
    void *secondary_params;
    size_t *secondary_off;
    unsigned char *secondary_fresh;
};

/* Allocates the persistent model states on `dev` (counted in the ledger)
 * and, unless cfg.defer_init, draws this rank's parameters from the seed
 * (shard_engine_init_units). `comm` may be NULL
 * only for a plan-only device. Errors: ZT_ERR_CONFIG (bad stage or sizes),
 * ZT_ERR_NOMEM, ZT_ERR_COMM (stage 3's first gathers are not needed here). */
zt_status shard_engine_create(const struct shard_engine_config *cfg, const struct param_table *t,
                              struct comm *comm, const struct compute_backend *be,
                              struct shard_engine *out);
void shard_engine_destroy(struct shard_engine *e);

/* Diagnosis of a non-finite step (coordinator/nonfinite.h). While an
 * engine's `reduced_probe` is set, shard_engine_step reduces the
 * gradients as always, then hands `unit` each trainable unit's range this
 * rank holds of the reduced gradients, in unit order (g[n] in
 * grad_type, in the engine's memory: elements [first, first + n) of the
 * unit, times `scale` the averaged unscaled gradient), measures the norm
 * and zeroes the gradients: it never updates, and reports the step
 * skipped. Only steps re-run to find a first non-finite value set it. */
struct shard_reduced_probe {
    void *ctx;
    zt_status (*unit)(void *ctx, int unit, size_t first, const void *g, size_t n, double scale);
};

struct shard_step_result {
    double grad_norm; /* of the unscaled, averaged gradients, before clipping */
    int skipped;      /* an overflow skipped the step (only with skip_on_overflow) */
};

/* Arms the next backward as the step's last (its gradients are final
 * once it ends): stages 0-1 then reduce them in buckets during it, as
 * stages 2-3 always do: a bucket of reduce_bucket_size elements of
 * completed units is issued non-blocking (stage 0: an allreduce of each
 * contiguous run of its units; stage 1: a reduce-scatter per unit) and
 * advanced between units while the backward goes on, and the step waits
 * for them instead of reducing. The result is the same reduction, so the
 * losses do not depend on it (up to float summation order across more than
 * two ranks). Without it the step reduces everything itself. The arming
 * ends with the backward. No effect without cfg.overlap_comm, in other
 * stages, or with a fused-backward optimizer. */
void shard_engine_final_backward(struct shard_engine *e);

/* Reduces the accumulated gradients as the stage requires, averages them
 * over ranks and divides out `loss_scale`, clips by global norm (computed
 * from the shards: one allreduce, which is also the ranks' agreement on an
 * overflow), takes one optimizer step with `hp` (hp->step is set here) on the
 * rank's range in fp32 (on the master copy under 16-bit precision, cast
 * back to the working copy), re-gathers parameters where the stage keeps
 * them full, and zeroes the gradients. A non-finite norm skips the step on
 * every rank when skip_on_overflow (fp16 loss scaling), and is
 * ZT_ERR_NUMERIC otherwise. Errors: ZT_ERR_COMM, ZT_ERR_NUMERIC. */
zt_status shard_engine_step(struct shard_engine *e, struct optimizer_hparams *hp, double loss_scale,
                            int skip_on_overflow, struct shard_step_result *out);

/* Makes the engine of one stage of a pipeline of comm_size(pipe) stages
 * (pipe: the ranks sharing this rank's data-parallel coordinate, ranked
 * by stage; cfg.pipeline_stage the rank's stage): the gradient norm is summed
 * over the pipeline and a tied embedding's copies on the first and last
 * stage are kept equal. pipe is borrowed. */
void shard_engine_join_pipeline(struct shard_engine *e, struct comm *pipe);

/* The same for a plan (a plan-only engine, no communicator): the engine of
 * stage cfg.pipeline_stage of a pipeline of `stages` counts what a step of
 * that stage holds for the tied embedding's exchange. */
void shard_engine_plan_pipeline(struct shard_engine *e, int stages);

/* HSDP: the engine's shard group is one of cfg.replicas; replica holds
 * the ranks with the same shards in each (comm_size(replica) ==
 * cfg.replicas, asserted), borrowed. */
void shard_engine_join_replicas(struct shard_engine *e, struct comm *replica);

/* hpZ: the secondary group of cfg.secondary_size ranks (rank % H within
 * it, asserted), borrowed. */
void shard_engine_join_secondary(struct shard_engine *e, struct comm *secondary);

/* Makes the engine of one tensor-parallel slice of the model (its table
 * from param_table_tp_slice; tensor: the ranks holding the other slices,
 * ranked by slice): the model's hooks gain tp_allreduce, tp_allgather and tp_reduce_scatter over
 * the group, and the gradient norm sums the cut tensors' squares over it while counting the tensors
 * every rank holds whole once. tensor is borrowed. */
void shard_engine_join_tensor(struct shard_engine *e, struct comm *tensor);

/* Context parallelism: `context` is the group of ranks sharing this rank's
 * sequences (worker/model_parts.h), which also belong to its data-parallel
 * group (ZeRO shards over data x context ranks); the model's hooks gain
 * cp_ring_start and cp_ring_wait over it. context is borrowed. */
void shard_engine_join_context(struct shard_engine *e, struct comm *context);

/* Fused-backward optimizers (optimizer->fused_backward, LOMO): there is no
 * gradient buffer; during the backward each unit's gradient, once
 * complete, is reduced (allreduce under stage 0, reduce-scatter otherwise),
 * and then either only measured or, with `hp`, also applied to the rank's
 * range at once (stages 1-2 then allgather the unit) and dropped. Arm
 * before each backward: hp NULL measures (the first of LOMO's two
 * backwards, when clipping or loss scaling needs the norm before any
 * update); with hp the backward updates (hp->step is set here), gradients
 * scaled by 1 / (world * loss_scale) * clip_coef. shard_engine_step then
 * ends the step: a pipeline's first and last stage add each other's
 * gradient of their tied embedding, held since the backward, and apply
 * it; it reports the norm of what the backwards reduced, summed over the
 * pipeline's and the tensor group's shares, and a non-finite norm is a
 * skip (skip_on_overflow) or ZT_ERR_NUMERIC. */
void shard_engine_fused_arm(struct shard_engine *e, const struct optimizer_hparams *hp,
                            double loss_scale, double clip_coef);

/* Bytes per trainable parameter of each model state the engine keeps, in
 * the order params, grads, master_params, optimizer_states: fp32 keeps 4 +
 * 4 + 0 + the optimizer's, 16-bit training 2 + 2 + 4 + the optimizer's.
 * The optimizer's are its per-element states at their element types (8
 * for AdamW's fp32 m and v, 2 for AdamW8bit's codes) plus the state every
 * rank keeps whole (Adafactor's factors, AdamW8bit's block scales)
 * averaged over the trainable parameters. A fused-backward optimizer
 * (LOMO) keeps no gradients. Under ZeRO-Offload the master is kept
 * under fp32 too (4), in host memory; under NVMe offload master and states
 * are on disk and the optimizer column is the window's bytes averaged
 * (shard_engine_replicated_state_bytes). What the memory report's expected
 * model states are computed from. */
void shard_engine_bytes_per_param(const struct shard_engine *e, double out[4]);

/* Draws the initial values of units [u0, u1) from cfg.seed into what the
 * rank stores of them (param_table_init's values: the same at any stage,
 * world size and thread count); shard_engine_create does it for every
 * unit unless cfg.defer_init. Its host staging (a chunk of values and a
 * 4-bit tensor's encoding) is counted under the ledger's `load` while it
 * lasts, under a plan-only device too, which draws nothing. Not
 * collective. Errors: ZT_ERR_NOMEM, the device copies'. */
zt_status shard_engine_init_units(struct shard_engine *e, int u0, int u1);

/* The bytes [*lo, *hi) of packed unit u's image (su->image_padded bytes)
 * the rank keeps: all of them, or its share under stage 3. */
void shard_engine_packed_range(const struct shard_engine *e, int u, size_t *lo, size_t *hi);
/* The same for rank `rank` of the partition (0 <= rank < cfg.world). */
void shard_engine_packed_range_of(const struct shard_engine *e, int rank, int u, size_t *lo,
                                  size_t *hi);

/* Bytes [first, first + n) of packed unit u's image from bytes[n] (host;
 * param_quant_encode's, the padding zero): the rank keeps what of them
 * falls in its range. For a loader that encodes a tensor at a time and
 * skips those outside the range. Not collective. Errors: the device
 * copy's. */
zt_status shard_engine_set_packed_bytes(struct shard_engine *e, int u, size_t first, size_t n,
                                        const void *bytes);

/* Copies the full working parameters, unpadded, as fp32 into host memory
 * dst[n_params]. Collective under stage 3 (it gathers). */
zt_status shard_engine_full_params(struct shard_engine *e, float *dst);

/* The fp32 state of the rank, for checkpoints and imported weights: state
 * 0 is the master weights the optimizer updates (the params under fp32),
 * state 1 + k the optimizer's state vector k. */
#define SHARD_STATE_MASTER      0
#define SHARD_STATE_MASTER_NAME "master"

/* How many states the engine keeps per element (1 + the optimizer's). */
static inline int shard_engine_n_states(const struct shard_engine *e)
{
    return 1 + e->cfg.optimizer_states;
}

/* The name of state `which` ("master", "exp_avg", ...): the checkpoint
 * section it is saved as. */
const char *shard_engine_state_name(const struct shard_engine *e, int which);

/* Whether the rank keeps state `which` for unit u at all: the master (the
 * weights) always; the optimizer's states only for trainable units. */
int shard_engine_holds_state(const struct shard_engine *e, int which, int u);

/* Unit elements [lo, hi) whose state this rank holds and updates: the
 * whole unit under stage 0, the owned range otherwise. */
void shard_engine_held_range(const struct shard_engine *e, int u, size_t *lo, size_t *hi);
/* The same for rank `rank` of the partition (0 <= rank < cfg.world): what
 * a planner counts of another rank's work. */
void shard_engine_held_range_of(const struct shard_engine *e, int rank, int u, size_t *lo,
                                size_t *hi);

/* The ranks [*r0, *r1) whose range of unit u (shard_engine_held_range_of's,
 * or for a packed unit the image bytes shard_engine_packed_range_of keeps)
 * meets [first, first + n) (elements, or a packed unit's bytes). Returns 0
 * where every rank holds the whole unit (then *r0 = 0, *r1 = cfg.world). */
int shard_engine_ranks_meeting(const struct shard_engine *e, int u, size_t first, size_t n, int *r0,
                               int *r1);
/* The element type of state `which`: fp32 for the master, the optimizer's
 * state_dtype for its states (8-bit codes are ZT_U8). */
enum zt_dtype shard_engine_state_dtype(const struct shard_engine *e, int which);

/* The memory state `which` of unit u is in (a state the rank holds): the
 * engine's device, or under ZeRO-Offload the host's for the master of a
 * trainable unit and for the optimizer's states. shard_engine_get_state
 * and set_state copy through it already; for readers of the pointers. */
const struct device *shard_engine_state_device(const struct shard_engine *e, int which, int u);

/* ZeRO-Offload: the bytes the engine holds in host memory now and at
 * most, persistent states and the step's staging (0 without offload).
 * The ledger has no host/device split: these bytes are also in its
 * categories (master_params, optimizer_states, workspace), so device
 * bytes are the ledger's total minus these. */
void shard_engine_host_bytes(const struct shard_engine *e, size_t *current, size_t *peak);

/* The optimizer-state bytes every rank keeps whatever the stage: a
 * whole-tensor optimizer's per-tensor state, and under NVMe offload the
 * window (master and states together), which stands for all of them in
 * shard_engine_bytes_per_param's optimizer column. */
size_t shard_engine_replicated_state_bytes(const struct shard_engine *e);

/* Whether the fp32 master the update writes is a copy in memory apart
 * from the working parameters (16-bit precision, or offload to the host;
 * not under NVMe offload, whose master is in the file). */
int shard_engine_master_in_memory(const struct shard_engine *e);

/* NVMe offload: the bytes of the rank's state file (the window the ledger
 * counts is apart), whether or not a plan created it; 0 without. */
size_t shard_engine_nvme_bytes(const struct shard_engine *e);

/* Copies state elements [lo, hi) of unit u (inside the held range; a state
 * the rank holds for u) to host memory dst[hi - lo] of the state's dtype,
 * or from src. A frozen unit's master under 16-bit precision is its
 * working copy, widened to fp32 on the way out and rounded on the way in
 * (through host staging, counted under `load`, where the device is not
 * host memory).
 * Errors: those of the device copy, ZT_ERR_NOMEM. */
zt_status shard_engine_get_state(struct shard_engine *e, int which, int u, size_t lo, size_t hi,
                                 void *dst);
zt_status shard_engine_set_state(struct shard_engine *e, int which, int u, size_t lo, size_t hi,
                                 const void *src);
/* After the MASTER state of every held range was set: rebuilds the working
 * parameters from it (rounded to the working precision) and gathers them
 * where the stage keeps them full. Collective. */
zt_status shard_engine_params_from_master(struct shard_engine *e);
/* The replicated per-tensor state of a whole-tensor optimizer
 * (e->tensor_state_len floats, the same on every rank), to or from host
 * memory. Errors: those of the device copy. */
zt_status shard_engine_get_tensor_state(struct shard_engine *e, float *dst);
zt_status shard_engine_set_tensor_state(struct shard_engine *e, const float *src);
/* Sets the count of optimizer steps taken (bias corrections). */
void shard_engine_set_updates(struct shard_engine *e, long updates);

/* Elements [lo, hi) of unit u that this rank owns and that are real (not
 * padding), in unit coordinates; lo == hi when the shard is all padding. */
void shard_owned_range(const struct shard_partition *p, int rank, int u, size_t *lo, size_t *hi);

#endif
