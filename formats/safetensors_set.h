/* formats/safetensors_set.h — a model's tensors in one safetensors file
 * or sharded over several, found and read by name, and written either way.
 *
 * Hugging Face saves a model whose tensors exceed `max_shard_size` (5 GB
 * by default) as shards NAME-00001-of-0000N.safetensors ... beside an
 * index NAME.safetensors.index.json,
 *   {"metadata": {"total_size": <bytes of tensor data>},
 *    "weight_map": {"<tensor name>": "<shard file name>", ...}},
 * shard names being file names in the index's folder; a smaller model is
 * the one file NAME.safetensors. save_pretrained writes NAME = "model" in
 * a folder of its own.
 *
 * Reader. safetensors_set_open takes a .safetensors file, an index (any
 * name ending in ".json") or a folder: its model.safetensors, else its
 * model.safetensors.index.json (the order from_pretrained looks in). Every
 * shard the index names is opened (safetensors_open: its header only) and
 * the index is checked against the headers, so that each tensor has one
 * place: a tensor listed is in the shard listed for it and in no other, and
 * a tensor in a shard is listed for that shard. A shard name containing
 * '/' or ".." is refused: an index cannot send the reader out of its
 * folder. metadata.total_size is not checked against the tensors:
 * transformers counts a storage shared by several tensors once, and a
 * view's whole storage, so it need not equal their sum. Then the tensors
 * are found by name and read by ranges as safetensors.h reads them, each
 * from its own shard; reads only pread, so one set may serve several
 * threads.
 *
 * Writer. Tensors are declared first, then streamed in declaration order
 * as floats, as with safetensors_writer, so that a model is written in one
 * walk without a second copy. With max_shard_bytes > 0 the declared
 * tensors are cut into shards as huggingface_hub's
 * split_state_dict_into_shards_factory (which save_pretrained uses) cuts
 * them: in order into the current shard until the next would take it past
 * the limit, which starts a new one; a tensor larger than the limit alone
 * gets a shard of its own, numbered when it is met, ahead of the current
 * shard. One shard is written as the single file PATH; N > 1 as
 * STEM-00001-of-0000N.safetensors ... (STEM: PATH without its
 * ".safetensors") and the index PATH.index.json (json.dumps' indent=2 and
 * sort_keys layout: weight_map sorted by name), written last. Each file
 * appears whole or not at all (safetensors_writer, atomic_file_write).
 * Finishing one form removes a stale file of the other form at the same
 * PATH, so that a folder never offers an older model beside the new one.
 *
 *   safetensors_set_writer_open ──► DECLARING ──begin_data──► WRITING ──finish──► (files; freed)
 *                                   add, set_metadata ↺        write_f32 ↺
 *   safetensors_set_writer_abort from either state: every file it wrote is removed, freed.
 *
 * Errors name the file at fault: the index for what it lists, the shard
 * for what it holds. A bad index or shard is ZT_ERR_DATA, a missing or
 * unreadable file ZT_ERR_IO, allocation failure ZT_ERR_NOMEM; the writer's
 * statuses are safetensors_writer's.
 */
#ifndef ZT_FORMATS_SAFETENSORS_SET_H
#define ZT_FORMATS_SAFETENSORS_SET_H

#include <stddef.h>
#include <stdint.h>

#include "../common/dtype.h"
#include "../common/status.h"
#include "safetensors.h"

/* What safetensors_set_open looks for in a folder, in this order. */
#define SAFETENSORS_SET_FILE  "model.safetensors"
#define SAFETENSORS_SET_INDEX "model.safetensors.index.json"

/* Largest index read (bytes); a 405-billion-parameter model's is 100 kB. */
#define SAFETENSORS_SET_MAX_INDEX_BYTES 100000000u

struct safetensors_set;
struct safetensors_set_writer;

/* ---- reading ---- */

/* Opens a .safetensors file, an index or a folder (see above); *out is
 * the set (close it with safetensors_set_close) or NULL on error.
 * Statuses: ZT_ERR_IO (a missing or unreadable file, a folder holding
 * neither file), ZT_ERR_DATA (an index that is not JSON, naming the byte,
 * or not of the form above; a shard name with '/' or ".."; a tensor listed
 * for a shard that lacks it, in two shards, or in a shard but not listed
 * for it; and those of safetensors_open, for the shards), ZT_ERR_NOMEM. */
zt_status safetensors_set_open(const char *path, struct safetensors_set **out);

/* The file the set was opened from: the .safetensors file or the index (a
 * folder's file named in full). Owned by s. */
const char *safetensors_set_path(const struct safetensors_set *s);

/* Number of shard files (1 for a single file). */
int safetensors_set_shard_count(const struct safetensors_set *s);

/* Number of tensors in all the shards. */
int safetensors_set_count(const struct safetensors_set *s);

/* Tensor i, 0 <= i < safetensors_set_count: the shards in the order of
 * their names, each's tensors in the order of its header. Owned by s. */
const struct safetensors_tensor *safetensors_set_tensor_at(const struct safetensors_set *s, int i);

/* The tensor called `name`, or NULL if there is none. Owned by s. */
const struct safetensors_tensor *safetensors_set_find(const struct safetensors_set *s,
                                                      const char *name);

/* Path of the shard file holding tensor t (of this set), for messages. */
const char *safetensors_set_file_of(const struct safetensors_set *s,
                                    const struct safetensors_tensor *t);

/* Reads elements [first, first + count) of tensor t (of this set) from its
 * shard, as safetensors_read_f32 does; statuses as there. */
zt_status safetensors_set_read_f32(struct safetensors_set *s, const struct safetensors_tensor *t,
                                   uint64_t first, uint64_t count, float *dst);

/* FNV-1a 64 (common/fnv.h) of the bytes of every shard file of s, one
 * after the other in the set's shard order (a single file: its bytes),
 * and their total size: what tells that a model's files have changed
 * since. Reads every byte. Statuses: ZT_ERR_IO, ZT_ERR_DATA (a file that
 * shrank while read), ZT_ERR_NOMEM. */
zt_status safetensors_set_digest(const struct safetensors_set *s, uint64_t *checksum,
                                 uint64_t *bytes);

/* Closes every shard and frees s. NULL is allowed. */
void safetensors_set_close(struct safetensors_set *s);

/* ---- writing ---- */

/* Starts a model to be written at `path` (a .safetensors name), cut into
 * shards of at most max_shard_bytes bytes of tensor data (0: one file
 * whatever the size). Nothing is created before begin_data. *out is the
 * writer or NULL (ZT_ERR_NOMEM). */
zt_status safetensors_set_writer_open(const char *path, uint64_t max_shard_bytes,
                                      struct safetensors_set_writer **out);

/* Declares the next tensor (DECLARING state only), as safetensors_writer_add
 * does; names are unique across the shards. Statuses as there. */
zt_status safetensors_set_writer_add(struct safetensors_set_writer *w, const char *name,
                                     enum zt_dtype dtype, int ndim, const uint64_t *shape);

/* Sets __metadata__[key] = value in every shard (DECLARING state only), as
 * safetensors_writer_set_metadata does. Statuses: ZT_ERR_USAGE (non-UTF-8
 * text), ZT_ERR_NOMEM. */
zt_status safetensors_set_writer_set_metadata(struct safetensors_set_writer *w, const char *key,
                                              const char *value);

/* Cuts the tensors into shards, starts the file of the first tensor (so
 * that an unwritable folder is reported before any data) and moves to the
 * WRITING state. Statuses: those of safetensors_writer_open, _add and
 * _begin_data, ZT_ERR_NOMEM. After an error only abort is allowed. */
zt_status safetensors_set_writer_begin_data(struct safetensors_set_writer *w);

/* Number of files the tensors are cut into (1: the single file PATH);
 * known from begin_data on. */
int safetensors_set_writer_shard_count(const struct safetensors_set_writer *w);

/* Appends the next `count` elements (WRITING state), continuing across
 * tensors and shards in declaration order; a shard is completed (synced and
 * renamed into place) as soon as its last element is written. Statuses:
 * ZT_ERR_USAGE (more elements than declared; nothing is written then),
 * ZT_ERR_IO, ZT_ERR_NOMEM. After an error other than ZT_ERR_USAGE only
 * abort is allowed. */
zt_status safetensors_set_writer_write_f32(struct safetensors_set_writer *w, const float *src,
                                           uint64_t count);

/* Completes the model (WRITING state): checks that every declared element
 * was written, writes the index of a sharded model, then removes a stale
 * file of the other form (PATH.index.json beside a single file, PATH
 * beside shards). Frees w whatever the outcome; on error every file this
 * writer wrote is removed. Statuses: ZT_ERR_USAGE (elements missing),
 * ZT_ERR_IO, ZT_ERR_NOMEM. */
zt_status safetensors_set_writer_finish(struct safetensors_set_writer *w);

/* Discards the model being written: removes its temp files and the shards
 * already completed, and frees w. NULL is allowed. */
void safetensors_set_writer_abort(struct safetensors_set_writer *w);

#endif
