/* coordinator/session.h — everything one `train` or `eval` run holds.
 *
 * Life cycle of a run (the coordinator's state machine):
 *
 *   INIT --session_open--> CONFIGURED --train_loop--> RUNNING --> DONE
 *     \__________________________|________________________|____> FAILED
 *
 * session_open loads and checks the configuration, opens the compute
 * backend, creates the communicator, loads the data and builds the model
 * and the ZeRO engine (with initial weights); run_checkpoint_restore
 * (run_checkpoint.h) then loads a checkpoint or imported weights, still in
 * CONFIGURED.
 * Each phase ends with an agreement among ranks (session_agree), so that a
 * failure on any rank sends every rank out of the same phase, nobody blocks
 * in a collective, and the message is printed once, by the lowest failing
 * rank.
 */
#ifndef ZT_COORDINATOR_SESSION_H
#define ZT_COORDINATOR_SESSION_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "../comm/comm.h"
#include "../comm/flight.h"
#include "../comm/layout.h"
#include "../common/ledger.h"
#include "../data/data.h"
#include "../formats/checkpoint.h"
#include "../report/rss_model.h"
#include "../shard/shard.h"
#include "../worker/backend.h"
#include "../worker/lora.h"
#include "../worker/model_family.h"
#include "../worker/precision.h"
#include "../config/config.h"

/* Fault injection into run_checkpoint_save (run_checkpoint.h), for the tests of crash safety
 * (in the manner of SQLite's test VFS), and into the training forward, for
 * the tests of non-finite steps (nonfinite.h): a test build of the program
 * passes hooks through cli_main into the run options; the zerotrain binary
 * passes none, so no hook is ever called there. */
struct ckpt_fault_hooks {
    /* Called by every rank while it writes its shard of the checkpoint of
     * `step`, after the first section and before the second: a hook that
     * kills the process leaves a half-written shard, as a node failure
     * would. NULL: none. */
    void (*mid_shard)(void *arg, int rank, long step);
    /* Called by every rank under NVMe offload once per optimizer step
     * (1-based `step`), from the I/O thread, right after the update's
     * first chunk of states was written to the file: a hook that kills
     * the process leaves the file half updated. NULL: none. */
    void (*mid_update)(void *arg, int rank, long step);
    /* Called with each op output of every training forward of the run
     * (struct model_probe's, at 1-based `step` and micro batch `micro`,
     * -1 in an evaluation at that step;
     * buf[n] of type t in the compute backend's memory, host memory on
     * the CPU): a
     * hook may write non-finite values into it, as a diverging op would.
     * NULL: none. */
    void (*forward_output)(void *arg, int rank, long step, int micro, int block, const char *what,
                           enum zt_dtype t, void *buf, size_t n);
    void *arg; /* passed to the hook */
};

enum run_state { RUN_INIT, RUN_CONFIGURED, RUN_RUNNING, RUN_DONE, RUN_FAILED };

/* Where a session's weights came from (run_checkpoint_restore). */
enum run_weights {
    RUN_WEIGHTS_INITIAL,   /* the model's initial values: nothing was named */
    RUN_WEIGHTS_INIT_FROM, /* model.init_from's file */
    RUN_WEIGHTS_NAMED,     /* a checkpoint named outright: eval --checkpoint, run.resume PATH */
    RUN_WEIGHTS_LATEST,    /* the latest checkpoint of the checkpoint folder */
};

struct run_options {
    const char *config_path;
    const struct config_override *overrides;
    int n_overrides;
    const char *metrics_path;       /* NULL: <output_dir>/metrics.jsonl */
    const char *memory_report_path; /* NULL: none */
    /* --memory-timeline FILE: the ledger's events of steps [first, last]
     * (report/memory_timeline.h); NULL: none. */
    const char *memory_timeline_path;
    long memory_timeline_first, memory_timeline_last;
    int memory_summary; /* print every rank's memory summary at the end */
    int dry_run;        /* plan memory without training */
    int print_partition;
    int print_layout; /* the rank grid and the pipeline stages' blocks */
    int quiet;        /* no resolved-config echo */
    /* Set asynchronously by main's signal handlers: 1 = checkpoint and stop
     * (SIGTERM, SIGUSR1), 2 = stop without saving (SIGINT). May be NULL. */
    volatile sig_atomic_t *stop_signal;
    const char *checkpoint_path; /* eval --checkpoint DIR: load these weights */
    int progress;                /* enum progress_mode of the console */
    int profile;                 /* time every op; print where the step time went */
    /* Checkpoint fault injection: NULL but in test builds. */
    const struct ckpt_fault_hooks *faults;
};

struct pipeline;
struct memory_timeline;

struct run_session {
    enum run_state state;
    struct zt_config cfg;
    int rank, world, local_ranks;
    int local_rank; /* this rank's index among its node's ranks */
    /* The GPU this rank computes on (worker/device_bind.h): its ordinal
     * among the visible ones, -1 on a backend with none to choose, and
     * whether another rank of the node computes on it too. */
    int device_ordinal, device_shared;
    /* The compute backend's page-locked host memory, lent to the engine
     * for ZeRO-Offload's host states. */
    struct shard_pinned_alloc pinned;
    struct comm *comm; /* the world's */
    /* Every comm call of this rank, and the watchdog that ends a job stuck
     * in one (comm/flight.h; comm.timeout_s); NULL with one rank, in a dry
     * run, or with comm.timeout_s 0. Outlives s->comm. */
    struct comm_flight *flight;
    /* The rank grid (tensor x pipeline x data parallel, comm/layout.h),
     * this rank's place in it and its axes' groups. ZeRO shards over the
     * data-parallel group (axes.dp): the engine and the gradient averaging
     * see only it. Under context parallelism of C ranks (context_parallel.size)
     * that group is data x context: its C consecutive ranks form a context
     * group (`context`; NULL when C is 1), which reads one micro batch and
     * splits its sequences (worker/model_parts.h). dp_rank and dp_size count
     * the data-parallel replicas the sampler serves: axes.dp's rank and
     * size divided by C. */
    struct comm_layout layout;
    struct comm_coords coords;
    struct comm_axes axes;
    int dp_rank, dp_size;
    struct comm *context;
    /* The data-parallel group's hierarchy (comm/layout.h): HSDP's shard
     * group, which the engine runs on instead of axes.dp, and its
     * replicas; hpZ's secondary group. NULL members when not configured. */
    struct comm_dp_groups dp_groups;
    /* The rank's pipeline stage (the whole model without a pipeline) and,
     * with pipeline.stages > 1, the pipeline that runs the micro batches
     * (pipeline.h: pipeline_open, after session_open; NULL otherwise),
     * which session_close frees through pipe_free. */
    struct model_stage stage;
    enum model_partition stage_method; /* how the blocks were split into stages */
    struct pipeline *pipe;
    void (*pipe_free)(struct pipeline *p);
    struct ledger ledger;
    struct memory_timeline *timeline; /* owned; NULL without --memory-timeline */
    struct rss_start rss_start;       /* measured at start-up (report/rss_model.h) */
    struct compute_backend compute;   /* device memory, ops and stream, from cfg.device */
    struct param_table table;
    struct shard_engine engine;
    struct model *model;       /* owned; NULL until built */
    struct loss_scaler scaler; /* fp16: dynamic or fixed; otherwise a fixed 1 */
    struct token_buffer train, val;
    struct sampler sampler;
    /* Filled when options.profile: the model's ops, the engine's phases,
     * and the loop's own (seconds filling batches; the end-of-step
     * agreement: fp8 scales, the loss and the stop requests). */
    struct model_profile profile;
    struct shard_profile engine_profile;
    double profile_data_seconds, profile_agree_seconds;
    long start_step;                    /* optimizer steps already taken (resumed checkpoint) */
    volatile sig_atomic_t *stop_signal; /* from run_options */
    int failure_agreed;                 /* the failure being returned was agreed by every rank */
    /* From run_options: NULL but in test builds. */
    const struct ckpt_fault_hooks *faults;
    int stop_request; /* agreed among ranks after each step: 0, 1 save+stop, 2 stop */
    /* Non-finite steps (nonfinite.h) since the run (re)started: skipped
     * (run.on_nonfinite skip), skipped in a row up to the last step, and
     * re-run to find their first non-finite value. */
    struct {
        long skipped, in_a_row;
        int diagnosed;
    } nonfinite;
    /* Test builds' forward_output hook as the models' probe (nonfinite.h);
     * unused without one. */
    struct model_probe fault_probe;
    char resumed_from[4096];   /* the checkpoint loaded, "" if none */
    char nvme_name[160];       /* NVMe offload: the rank's state file in nvme_path */
    char compute_why[192];     /* why a 16-bit run computes in fp32, "" if it does not */
    int32_t *inputs, *targets; /* host batch of B x seq_len tokens each */
    uint64_t *row_ids;         /* the batch rows' global sample indices (sampler_rows) */
    int have_train;            /* train data and sampler loaded */
    int failed_here;           /* this rank detected the failure (it prints) */
    /* Where the weights came from; resumed_from names the checkpoint. */
    enum run_weights weights_from;
    double load_seconds;         /* reading model.init_from's weights, on this rank */
    uint64_t load_rss_peak;      /* VmHWM once they were read, on this rank */
    struct rss_parts rss_loaded; /* the predicted peak RSS then (a dry run's too) */
    /* A failure agreed inside a phase (comm_agree_status) was found by
     * another rank: this one passes ZT_OK to the phase's final agreement,
     * so that the finder, not the lowest rank, prints its message. */
    int failed_elsewhere;
    /* Where the frozen base's weights came from, which decides whether
     * checkpoints store it (run_base.h); set by run_checkpoint_restore.
     * base_digested: base.checksum and base.bytes are known (rank 0). */
    struct ckpt_base base;
    int base_digested;
};

/* INIT -> CONFIGURED. `need_train` loads the training data and sampler
 * (eval needs only validation data). MPI must be initialised. On failure
 * the session is closed, s->state is RUN_FAILED and the status is the
 * agreed one; s->failed_here says whether this rank should print. */
zt_status session_open(struct run_session *s, const struct run_options *o, int need_train);

/* The parameter table of the model `shape` describes, with the LoRA
 * adapters `lora` asks for (NULL: none; worker/lora.h), its targets
 * matched against the family's Hugging Face module names: the one way a
 * table is built, from a config (session_build_table) or a checkpoint's
 * meta.json (export). Errors: those of param_table_build and lora_attach
 * (a target that matches no linear layer is ZT_ERR_CONFIG). */
zt_status session_table_build(const struct zt_kvlist *shape, const struct lora_spec *lora,
                              struct param_table *out);

/* The table the config describes: its model shape, with the adapters
 * session_lora_spec gives when lora.enabled. Errors: session_table_build's. */
zt_status session_build_table(const struct zt_config *c, struct param_table *out);

/* The config's quantization section as a checkpoint records it (canonical
 * names: "nf4", "bf16"). */
void session_quant_of(const struct zt_config *c, struct ckpt_quant *out);

/* Stores t's frozen linear weights in 4 bits as q says (param_quant.h).
 * Errors: ZT_ERR_CHECKPOINT for names it does not know, those of
 * param_quant_attach; t is freed on error. */
zt_status session_table_quantise(const struct ckpt_quant *q, struct param_table *t);

/* The adapters the config's lora section asks for, target_modules
 * resolved: the config's list, else PEFT's default for the family. The
 * strings are the config's or static. Errors: ZT_ERR_UNSUPPORTED (no
 * default for a family without a Hugging Face mapping). */
zt_status session_lora_spec(const struct zt_config *c, struct lora_spec *spec);
void session_close(struct run_session *s);

/* Agrees on `local` among all ranks of the world (comm_world_agree):
 * returns the most severe status any rank had and sets *print_here when
 * this rank is the lowest one that failed. Works before the communicator
 * exists; once it does, over it (comm_agree_ranks), so that the flight
 * recorder's watchdog names a rank that never arrives. */
zt_status session_agree(const struct run_session *s, zt_status local, int *print_here);

/* Validation loss of the current parameters over the validation data
 * (run.eval_batches micro batches, or all whole micro batches). */
zt_status session_evaluate(struct run_session *s, double *loss, uint64_t *tokens);

/* The engine configuration a (checked) config asks for, at this stage,
 * world size and rank: the run's own, or a plan's (the baseline). */
struct shard_engine_config session_engine_config(const struct zt_config *c, int stage, int world,
                                                 int rank);

/* The working precision a config asks for: ZT_BF16, ZT_F16 or ZT_F32. */
enum zt_dtype session_precision(const struct zt_config *c);

/* The type the passes compute in (param_table.compute) for a config on the
 * compute backend `ops` (NULL: a plan for hardware that has every form):
 * the working precision where the layout and the backend have 16-bit
 * forms, else ZT_F32, with the reason in why[0..n) ("" when none is
 * needed). fp8 GEMMs, tensor parallelism and QLoRA's 4-bit base compute
 * in fp32 so far. */
enum zt_dtype session_compute_type(const struct zt_config *c, const struct ops_backend *ops,
                                   char *why, size_t n);

/* The model's activation checkpointing interval (0: off) for a config. */
int session_ckpt_every(const struct zt_config *c);

/* The vocabulary a tensor-parallel group of T computes with:
 * model.vocab_size padded as model.pad_vocab_size_to_multiple_of says
 * (tp_vocab_padded), adapted (LoRA, QLoRA) or not: a frozen embedding's
 * padding rows stay zero and get no gradient. */
int64_t session_vocab_padded(const struct zt_config *c, int T);

/* The parameter table rank t of a tensor-parallel group of T holds: the
 * config's table (session_build_table), sliced when T > 1 or the
 * vocabulary is padded (param_table_tp_slice, session_vocab_padded) and
 * marked for sequence parallelism as the config says, with fp8.enabled
 * its fp8 scaling state (and its whole model's). Errors: those of
 * session_build_table, param_table_tp_slice and fp8_scaling_create. */
zt_status session_rank_table(const struct zt_config *c, int T, int t, struct param_table *out);

/* How the config splits the blocks among pipeline stages. */
enum model_partition session_stage_method(const struct zt_config *c);

/* Pipeline stage p's blocks (of c's pipeline.stages) as the config cuts
 * them: one run split by the partition method, or with
 * pipeline.virtual_stages v > 1 the stage's v interleaved chunks. Errors:
 * ZT_ERR_CONFIG, ZT_ERR_NOMEM (model_stage_of, model_stage_interleaved). */
zt_status session_stage_of(const struct zt_config *c, const struct param_table *t, int p,
                           struct model_stage *out);

/* An instance of table t's model for `stage`, for one micro batch of the
 * config, with its seed and NEFTune, in be's memory; a pipeline slot
 * borrows the backward scratch of `lender`, the stage's first slot (NULL:
 * its own; model_create_slot). *out is set once created: the caller
 * destroys it, also on failure. Errors: those of model_create_slot and
 * model_neftune_enable. */
zt_status session_model_create_for(const struct zt_config *c, const struct param_table *t,
                                   const struct compute_backend *be,
                                   const struct model_stage *stage, const struct model *lender,
                                   struct model **out);

/* An instance of the session's model for chunk j of its pipeline stage
 * (model_stage_chunk; the whole stage, or the whole model without a
 * pipeline, when it has one chunk), for one micro batch, timed into
 * `profile` (NULL: not), with the run's seed and NEFTune, borrowing
 * `lender`'s scratch as above. *out is set once created: the caller
 * destroys it, also on failure. Errors: those of model_create_slot and
 * model_neftune_enable. */
zt_status session_model_create(struct run_session *s, int j, struct model_profile *profile,
                               const struct model *lender, struct model **out);

/* The last forward of m weighed into a step's loss sums: its mean times
 * its share of a full micro batch into sums[0] (1 without a mask, so the
 * sums are the unmasked ones bit for bit), the share into sums[1]. */
void session_add_loss(const struct run_session *s, const struct model *m, double *sums);

/* Passes over the training windows after `step` optimizer steps under
 * run.epochs; -1 without it. */
double session_epoch_at(const struct run_session *s, long step);

/* Runs one optimizer step's allocation plan: `accum` planned forward and
 * backward passes and a planned engine step, through the same code as a
 * real step (the session's device must be plan-only). */
zt_status session_plan_step(struct model *model, struct shard_engine *engine, int accum);
/* The same for the n model chunks of an interleaved stage: each micro
 * batch's forwards in chunk order, then its backwards in reverse. */
zt_status session_plan_chunks_step(struct model *const *chunks, int n, struct shard_engine *engine,
                                   int accum);

/* The single-device baseline: the peaks that stage 0 on one device needs for
 * this model, micro batch and precision, from a dry plan through the same
 * allocation code (no memory, no communication). */
zt_status session_plan_baseline(const struct run_session *s, struct ledger *out);

#endif
