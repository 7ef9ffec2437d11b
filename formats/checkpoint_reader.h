/* formats/checkpoint_reader.h — a checkpoint's states read by the ranges
 * of any layout.
 *
 * A checkpoint keeps each state (the master weights, each optimizer
 * moment) as its writers held it (checkpoint.h, struct ckpt_layout): unit
 * u by the ranks of one pipeline stage, each tensor-parallel rank's slice
 * of the unit cut into data-parallel pieces. A run resuming in another
 * layout holds other pieces of other slices. Both are places in the whole
 * model's flat space, which worker/tensor_parallel.h maps a slice's ranges
 * to: so a read of elements [lo, hi) of unit u of the reader's table (a
 * slice, or the whole model) is the intersection of the reader's runs
 * with each old slice's runs, walked together in the whole model's order
 * (both ascend), each part then read from the file of the old rank that
 * holds it with ranged reads. Parts that follow each other on both sides
 * are read as one, so a reader with the writer's tensor-parallel size
 * makes one read per old data-parallel piece, as a data-parallel reader
 * does. Tensors that every tensor-parallel rank holds whole (norms,
 * position embeddings) are read from tensor-parallel rank 0's slice.
 * Padding rows of a padded vocabulary are in no run: the writer's are
 * never read, and the reader's are zero, whatever T either padded for.
 *
 * Files are opened when first read from and stay open until the reader
 * closes; reads are not checksummed (ckpt_validate vouches for files).
 */
#ifndef ZT_FORMATS_CHECKPOINT_READER_H
#define ZT_FORMATS_CHECKPOINT_READER_H

#include <stddef.h>

#include "../common/dtype.h"
#include "../common/status.h"
#include "../worker/model_family.h"
#include "checkpoint.h"

/* One state's sections: their name and element type, and which units
 * they hold — every unit in the shards (the master weights), or only
 * those that trained (an optimizer's states). */
struct ckpt_state {
    const char *name;
    enum zt_dtype dtype;
    int trained_only;
};

struct ckpt_reader;

/* A reader of the checkpoint in step_dir that `meta` describes, whose
 * model is `whole` (a whole model's table, not a slice); both stay the
 * caller's and must outlive the reader. *out is NULL on error. Errors:
 * ZT_ERR_CHECKPOINT when meta.json's units are not whole's cut over its
 * tensor-parallel size ("STEP_DIR/meta.json: unit 3's slice has 100
 * elements, ..."), ZT_ERR_NOMEM. */
zt_status ckpt_reader_open(const char *step_dir, const struct ckpt_meta *meta,
                           const struct param_table *whole, struct ckpt_reader **out);

/* Reads elements [lo, hi) of unit u of `mine` (the reader's whole table,
 * or a slice of it: param_table_tp_slice) of state `state` into dst, as
 * raw bytes of its dtype. Unit u must be in the shards
 * (ckpt_meta_unit_stored), and hold the state. Errors: ZT_ERR_CHECKPOINT
 * (a file without the section or with another element type), those of
 * ckpt_shard_open and ckpt_shard_read, ZT_ERR_NOMEM. */
zt_status ckpt_reader_read(struct ckpt_reader *r, const struct ckpt_state *state,
                           const struct param_table *mine, int u, size_t lo, size_t hi, void *dst);

/* Closes the files and frees r. NULL is allowed. */
void ckpt_reader_close(struct ckpt_reader *r);

#endif
