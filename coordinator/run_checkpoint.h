/* coordinator/run_checkpoint.h — saving and resuming a training session.
 *
 * What a checkpoint holds (formats/checkpoint.h is the storage format):
 * every rank writes, for every unit in order, the real elements of the unit
 * that it owns in the run's partition (the same split in every stage), as
 * fp32 sections: "master" (the weights the optimizer updates: the
 * parameters under fp32, the master copy under 16-bit precision; the
 * working 16-bit copy is always their rounding, so it is not stored; a
 * frozen unit's weights are its working copy) for every unit, and one
 * section per state vector of the optimizer ("exp_avg", "exp_avg_sq" for
 * AdamW: the names come from the optimizer table) for the units that
 * train. Gradients are zero between steps. Rank 0 writes meta.json: the
 * step, world size, stage, precision, the resolved config, the partition
 * (each unit's size, per-rank share and whether it is frozen), the model
 * family and shape, the LoRA adapters ("lora"), the optimizer and its
 * hyperparameters, the loss scaler and the optimizer step count. A run
 * with adapters leaves its frozen base units out when they can be had
 * again (model.init_from's file, or run.seed) and records where in
 * "base" (run_base.h): its checkpoints hold the adapters and their
 * optimizer states alone. The data
 * order and every random draw are pure functions of (seed, step), so the
 * step is all the sampler and generator state there is.
 *
 * Resharding: a rank of any later world size and stage needs, per unit,
 * the range it holds (all of it under stage 0, its share otherwise) and
 * reads exactly those bytes from the old shard files, whichever ranks wrote
 * them.
 *
 * Every function here is collective over the session's ranks.
 */
#ifndef ZT_COORDINATOR_RUN_CHECKPOINT_H
#define ZT_COORDINATOR_RUN_CHECKPOINT_H

#include <stddef.h>

#include "../formats/checkpoint.h"
#include "session.h"

/* Bytes a rank's loader holds at its peak, under the ledger's `load`,
 * while it imports model.init_from into engine e (rank table t): the
 * weights reader's transposition buffers and the import's staging, as
 * import_weights allocates them. */
size_t run_checkpoint_import_bytes(const struct param_table *t, const struct shard_engine *e);

/* The work of that import on the slowest rank of e's partition (the
 * import ends when every rank has done its own): of each count below the
 * most any rank has, in elements: read from the file (a transposed tensor
 * whole, by any rank that holds part of it, as the reader caches it),
 * transposed on the way, encoded into 4 bits (the blocks of the rank's
 * share of the codes), scanned for a 4-bit tensor's block scales alone
 * (its other blocks), and written to the NVMe master file (which the
 * parameters are then rebuilt from); and the bytes its stores into the
 * model states read and write (`stored`: a transposed tensor's copy out
 * of the reader's cache, the values into the held parameters, through the
 * fp32 master in memory where there is one, a 4-bit image). The planner
 * times it (plan_cost.c). */
struct run_import_work {
    size_t read, transposed, encoded, scanned, master_nvme;
    size_t stored;
};

void run_checkpoint_import_work(const struct param_table *t, const struct shard_engine *e,
                                struct run_import_work *w);

/* What restoring model.init_from's weights allocates, counted on a
 * plan-only ledger without reading a file (a dry run, the planner): the
 * units the file does not fill drawn (LoRA's adapters; engine e created
 * with defer_init), then the import's peak. Nothing without init_from.
 * Errors: shard_engine_init_units's. */
zt_status run_checkpoint_plan_import(const struct zt_config *c, const struct param_table *t,
                                     struct shard_engine *e, struct ledger *ledger);

/* The last phase of opening a run (CONFIGURED, after session_open): the
 * weights from a checkpoint (eval --checkpoint; training: resuming as
 * run.resume says; eval: the latest in checkpoint.dir), else from
 * model.init_from (the base) and lora.init_from (the adapters), else the
 * initial values stay; nothing under --dry-run. A checkpoint that keeps
 * its base outside is loaded after its base (run_base.h).
 * A checkpoint path may be a step folder or a checkpoint folder
 * (ckpt_resolve). s->weights_from says which was taken. Collective and
 * agreed: on failure every rank gets the same status, the session is
 * closed (RUN_FAILED) and s->failed_here says whether this rank prints. */
zt_status run_checkpoint_restore(struct run_session *s, const struct run_options *o,
                                 int need_train);

/* One line saying which weights the restored session holds and why, for
 * rank 0 to print: training ("resumed from DIR/step-00000100 at step 100
 * (the latest checkpoint in DIR); model.init_from FILE is not used: set
 * run.resume: never to start from it", or "" for initial weights) or
 * evaluation ("evaluating checkpoint DIR/step-00000100 (step 100)").
 * *warn is set when an evaluation measures randomly initialised weights. */
void run_checkpoint_describe(const struct run_session *s, int training, char *buf, size_t n,
                             int *warn);

/* The folder checkpoints go to: checkpoint.dir, which must be set (null
 * means no checkpoints: nothing is saved, and run.resume: auto finds
 * nothing). */
void run_checkpoint_dir(const struct zt_config *c, char *buf, size_t n);

/* Before training: with checkpoint.dir set, every rank creates the folder
 * if missing and creates and removes a file in it, so that a folder the
 * run cannot write stops it now rather than at the first save. Not
 * collective (the caller agrees). Errors: ZT_ERR_IO naming the folder. */
zt_status run_checkpoint_check_dir(struct run_session *s);

/* Agrees on a phase's outcome among the session's ranks: the most severe
 * status any rank had. A rank that was fine but learns of another's
 * failure notes it (s->failed_elsewhere), so that the rank that found the
 * failure is the one that prints it (session.h). Collective. */
zt_status run_checkpoint_agree(struct run_session *s, zt_status local);

/* Saves the session after `step` optimizer steps; `where` receives the
 * checkpoint's folder. Old checkpoints beyond checkpoint.keep are removed
 * after the new one is complete. Errors: ZT_ERR_IO, ZT_ERR_CHECKPOINT. */
zt_status run_checkpoint_save(struct run_session *s, long step, char *where, size_t n);

/* The same save into the checkpoint folder `dir`, of the weights alone (no
 * optimizer state: it cannot be resumed), for reading them back whole
 * (run_checkpoint_read_model) whatever the layout. Same errors. */
zt_status run_checkpoint_save_weights(struct run_session *s, const char *dir, long step,
                                      char *where, size_t n);

/* Resolves run.resume ("auto", "never" or a path: a step folder or a
 * checkpoint folder, ckpt_resolve) to a step folder; *found = 0 when there
 * is nothing to resume. A given path that is not a complete checkpoint is
 * an error naming run.resume. */
zt_status run_checkpoint_find(const struct run_session *s, char *step_dir, size_t n, int *found);

/* Validates the checkpoint in step_dir (every file and checksum), checks
 * it is of this model (adapters included: other lora settings are
 * ZT_ERR_CONFIG naming both values), and loads it into the session
 * whatever world size, stage and precision wrote it, its base first when
 * kept outside (ZT_ERR_CHECKPOINT when that file changed or is gone); sets
 * s->start_step and s->base. With weights_only
 * (evaluation) only the weights are loaded, so the optimizer and the
 * frozen units need not match. Errors: ZT_ERR_CHECKPOINT naming the file
 * and the problem, ZT_ERR_CONFIG (another optimizer's states, unless
 * weights_only), ZT_ERR_IO. */
zt_status run_checkpoint_load(struct run_session *s, const char *step_dir, int weights_only);

/* Reads a checkpoint alone, with only local file access (for `zerotrain
 * export`): validates it, builds the table its meta.json describes (model
 * and adapters, session_table_build) into *table and reads its full fp32
 * weights, unpadded, in the flat order, into *params (free). The caller
 * frees all three (ckpt_meta_free, param_table_free, free); on error none
 * is left to free. Errors: ZT_ERR_CHECKPOINT, ZT_ERR_IO, ZT_ERR_NOMEM. */
zt_status run_checkpoint_read_model(const char *step_dir, struct ckpt_meta *meta,
                                    struct param_table *table, float **params);

#endif
