/* coordinator/run_base.h — the frozen base of a fine-tuning run, which its
 * checkpoints leave out.
 *
 * A run with LoRA adapters trains the adapters alone; its base units are
 * frozen and stay what they were loaded as: model.init_from's Hugging Face
 * weights, or the initial values param_table_init draws from run.seed.
 * Either can be had again, so a checkpoint of such a run stores only the
 * units that train (weights and optimizer states), and meta.json's "base"
 * (struct ckpt_base) says where the rest comes from: the file's path as the
 * run named it, with the FNV-1a 64 and size of its bytes (every shard of a
 * set), so that a changed or vanished file is refused rather than used, or
 * the seed. A base that came from a checkpoint storing it (a full one) is
 * stored again: nothing else has it.
 *
 * Loading such a checkpoint (resume, eval, export) takes the base from its
 * source first, then the checkpoint's units.
 */
#ifndef ZT_COORDINATOR_RUN_BASE_H
#define ZT_COORDINATOR_RUN_BASE_H

#include "session.h"

/* Records where the restored session's base came from in s->base: from
 * the checkpoint's record `loaded` when one was loaded (NULL otherwise),
 * else model.init_from's file or run.seed. Without adapters, or with a
 * path too long to record, it is stored (every checkpoint is full). */
void run_base_note(struct run_session *s, const struct ckpt_base *loaded);

/* Whether the session's checkpoints leave the frozen units out. */
static inline int run_base_external(const struct run_session *s)
{
    return s->table.lora.r > 0 && s->base.kind != CKPT_BASE_STORED;
}

/* Rank 0, before a checkpoint is written: the base file's checksum and
 * size, computed once per session (it reads every byte) and kept. Errors:
 * those of safetensors_set_open and safetensors_set_digest, naming the
 * file. */
zt_status run_base_digest(struct run_session *s);

/* That the base file recorded in `b` (CKPT_BASE_FILE) still has the bytes
 * it had when the checkpoint whose meta.json is `meta` was written.
 * Reads every byte. Errors: ZT_ERR_CHECKPOINT naming meta, the file and
 * both checksums and sizes (changed), or the file and why it cannot be
 * read (missing). */
zt_status run_base_check(const char *meta, const struct ckpt_base *b);

/* The whole base of t (a table with adapters) into params[0 ..
 * t->lora.n_base_params), as the run that wrote the checkpoint in
 * step_dir (meta m, base kept outside) held it: the file, checked and
 * read, or the seed's values. The weights that carry adapters are rounded
 * to the checkpoint's precision, as the run held them under the adapters
 * that a merge adds; every other tensor keeps the base's own values, bit
 * for bit, since the run never changed it. No MPI. Errors: run_base_check's, hf_weights_open's and
 * _read's, ZT_ERR_NOMEM. */
zt_status run_base_read(const char *step_dir, const struct ckpt_meta *m,
                        const struct param_table *t, float *params);

#endif
