/* formats/safetensors.h — reading and writing one Hugging Face
 * safetensors file, the format Hugging Face weights are exchanged in (a
 * model sharded over several files: formats/safetensors_set.h).
 *
 * Layout: an 8-byte little-endian length N, N bytes of UTF-8 JSON (the
 * header), then the data section. The header is an object mapping each
 * tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, offsets
 * relative to the data section (which starts at byte 8 + N), plus an
 * optional "__metadata__" object of string values. Tensors are row-major
 * and little-endian, and their byte ranges must tile the data section
 * exactly: no overlap, no gap, nothing past the last tensor.
 *
 * Reader. safetensors_open reads and checks the header and the file size
 * and nothing else: a GPT-2 checkpoint is hundreds of megabytes and a rank
 * needs only its shard, so the tensors are read later, a range of elements
 * at a time, with pread (safe from several threads on one handle). Every
 * rule of the format is checked at open, so a file that opens can be read
 * without surprises unless it changes underneath; the JSON parser bounds
 * every access, limits nesting and the header to 100,000,000 bytes (the
 * limit of the reference implementation), validates UTF-8 and reports the
 * byte of the header where the JSON went wrong.
 *
 * Writer. Tensors are declared first (names, dtypes, shapes: that fixes
 * the offsets and so the header), then their values are streamed in
 * declaration order as floats and converted to each tensor's dtype, so a
 * caller can export a sharded model by walking it once without holding a
 * second copy. The file is written under PATH.tmp.<pid> and renamed over
 * PATH only when complete and synced: a reader never sees half a file.
 *
 *   safetensors_writer_open ──► DECLARING ──begin_data──► WRITING ──finish──► (PATH; freed)
 *                               add, set_metadata ↺        write_f32 ↺
 *   safetensors_writer_abort from either state: temp file removed, freed.
 *
 * Every error message starts with the file's path and names the tensor,
 * byte or field at fault. Format errors are ZT_ERR_DATA, system errors
 * ZT_ERR_IO, allocation failures ZT_ERR_NOMEM, calls with impossible
 * arguments ZT_ERR_USAGE, dtypes a function cannot convert
 * ZT_ERR_UNSUPPORTED. Calls in the wrong writer state are bugs and assert.
 */
#ifndef ZT_FORMATS_SAFETENSORS_H
#define ZT_FORMATS_SAFETENSORS_H

#include <stdint.h>

#include "../common/dtype.h"
#include "../common/status.h"

#define SAFETENSORS_MAX_DIMS         8
#define SAFETENSORS_MAX_HEADER_BYTES 100000000ull

/* One tensor of an open file. Owned by the struct safetensors; valid until
 * safetensors_close. */
struct safetensors_tensor {
    const char *name; /* UTF-8, NUL-terminated */
    enum zt_dtype dtype;
    int ndim; /* 0 (a scalar) .. SAFETENSORS_MAX_DIMS */
    uint64_t shape[SAFETENSORS_MAX_DIMS];
    uint64_t offset; /* of the first byte, from the start of the FILE */
    uint64_t nbytes; /* element count * zt_dtype_size(dtype) */
};

struct safetensors;
struct safetensors_writer;

/* Number of elements of a tensor (1 for a scalar, 0 if a dimension is 0). */
static inline uint64_t safetensors_tensor_numel(const struct safetensors_tensor *t)
{
    return t->nbytes / zt_dtype_size(t->dtype);
}

/* The format's name for a dtype ("F32", "BF16", ...); never NULL. */
const char *safetensors_dtype_name(enum zt_dtype dtype);

/* ---- reading ---- */

/* Opens `path`, reads its header and checks it against the format and the
 * file size; *out is the handle (close it with safetensors_close) or NULL
 * on error. Statuses: ZT_ERR_IO (missing or unreadable file), ZT_ERR_DATA
 * (any breach of the format: JSON errors give the byte offset within the
 * header, dtypes outside enum zt_dtype are "unknown dtype"), ZT_ERR_NOMEM. */
zt_status safetensors_open(const char *path, struct safetensors **out);

/* Number of tensors in the file. */
int safetensors_count(const struct safetensors *s);

/* Tensor i, 0 <= i < safetensors_count, in the order of the header text. */
const struct safetensors_tensor *safetensors_tensor_at(const struct safetensors *s, int i);

/* The tensor called `name`, or NULL if there is none. */
const struct safetensors_tensor *safetensors_find(const struct safetensors *s, const char *name);

/* Value of __metadata__[key], or NULL if absent; owned by s. */
const char *safetensors_metadata(const struct safetensors *s, const char *key);

/* Reads elements [first, first + count) of tensor t (of this handle),
 * flattened row-major, into dst as floats: F32 as is, F16 and BF16
 * exactly, F64 rounded to nearest. Reads only those bytes. Statuses:
 * ZT_ERR_USAGE (range beyond the tensor), ZT_ERR_UNSUPPORTED (integer
 * dtypes), ZT_ERR_IO, ZT_ERR_DATA (the file shrank since it was opened). */
zt_status safetensors_read_f32(struct safetensors *s, const struct safetensors_tensor *t,
                               uint64_t first, uint64_t count, float *dst);

/* Closes the file and frees everything of s, tensors and names included.
 * NULL is allowed. */
void safetensors_close(struct safetensors *s);

/* ---- writing ---- */

/* Starts a file to be written to `path` (through PATH.tmp.<pid>, created
 * now so that an unwritable folder is reported before any work). *out is
 * the writer, or NULL on error (ZT_ERR_IO, ZT_ERR_NOMEM). */
zt_status safetensors_writer_open(const char *path, struct safetensors_writer **out);

/* The checks safetensors_writer_add makes of one tensor on its own (all
 * but the duplicate name), for a writer of several files that declares a
 * tensor before it knows which file takes it; `path` names the file in
 * messages. *nbytes is the tensor's size in `dtype`. Statuses as
 * safetensors_writer_add's, ZT_ERR_NOMEM aside. */
zt_status safetensors_check_tensor(const char *path, const char *name, enum zt_dtype dtype,
                                   int ndim, const uint64_t *shape, uint64_t *nbytes);

/* Declares the next tensor (DECLARING state only); its data follows the
 * previous one's. `shape` has `ndim` entries (may be NULL when ndim is 0);
 * name is copied. On error nothing is declared and w stays usable.
 * Statuses: ZT_ERR_USAGE (empty, duplicate, reserved or non-UTF-8 name,
 * ndim outside 0..8, a size that overflows), ZT_ERR_UNSUPPORTED (integer
 * dtypes: the writer converts from floats), ZT_ERR_NOMEM. */
zt_status safetensors_writer_add(struct safetensors_writer *w, const char *name,
                                 enum zt_dtype dtype, int ndim, const uint64_t *shape);

/* Sets __metadata__[key] = value (DECLARING state only), replacing an
 * earlier value; both are copied. Statuses: ZT_ERR_USAGE (non-UTF-8
 * text), ZT_ERR_NOMEM. */
zt_status safetensors_writer_set_metadata(struct safetensors_writer *w, const char *key,
                                          const char *value);

/* Writes the header, padded with spaces to a multiple of 8 bytes so that
 * the data section is 8-byte aligned, and moves to the WRITING state.
 * Statuses: ZT_ERR_IO, ZT_ERR_NOMEM, ZT_ERR_USAGE (header over the limit).
 * After an error only safetensors_writer_abort is allowed. */
zt_status safetensors_writer_begin_data(struct safetensors_writer *w);

/* Appends the next `count` elements (WRITING state), continuing across
 * tensor boundaries in declaration order, each converted to its tensor's
 * dtype with round to nearest even. Statuses: ZT_ERR_USAGE (more elements
 * than declared; nothing is written then), ZT_ERR_IO. After ZT_ERR_IO only
 * safetensors_writer_abort is allowed. */
zt_status safetensors_writer_write_f32(struct safetensors_writer *w, const float *src,
                                       uint64_t count);

/* Completes the file (WRITING state): checks that every declared element
 * was written, flushes and fsyncs it, renames it over PATH and fsyncs the
 * folder. Frees w whatever the outcome; on error the temp file is removed
 * and PATH is left as it was (except when only the folder sync failed:
 * the complete file is in place then). Statuses: ZT_ERR_USAGE (elements
 * missing), ZT_ERR_IO. */
zt_status safetensors_writer_finish(struct safetensors_writer *w);

/* Discards the file being written: removes the temp file and frees w.
 * PATH is left as it was. NULL is allowed. */
void safetensors_writer_abort(struct safetensors_writer *w);

#endif
