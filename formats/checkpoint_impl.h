/* formats/checkpoint_impl.h — what the checkpoint_*.c files share and
 * nobody else includes: the checksum and the small files (meta.json,
 * latest), written whole with common/atomic_file.h and read with
 * common/fileio.h. meta.json is parsed with common/json.h; shard headers
 * are packed with common/endian.h.
 */
#ifndef ZT_FORMATS_CHECKPOINT_IMPL_H
#define ZT_FORMATS_CHECKPOINT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "../common/atomic_file.h"
#include "../common/fileio.h"
#include "../common/fnv.h"
#include "../common/status.h"

#define CKPT_FNV_OFFSET ZT_FNV_OFFSET

/* FNV-1a 64 continued over n more bytes: start from CKPT_FNV_OFFSET. */
static inline uint64_t ckpt_fnv(uint64_t h, const void *bytes, size_t n)
{
    return zt_fnv1a(h, bytes, n);
}

/* Reads a whole small file (at most `max` bytes: meta.json, latest) into a
 * new NUL-terminated buffer (*out, caller frees; *len its length).
 * ZT_ERR_IO ("PATH: no such file or directory" when missing),
 * ZT_ERR_CHECKPOINT (larger than max, not a regular file), ZT_ERR_NOMEM.
 * They are written with atomic_file_write. */
static inline zt_status ckpt_read_small(const char *path, size_t max, char **out, size_t *len)
{
    return zt_read_small_file(path, max, ZT_ERR_CHECKPOINT, out, len);
}

#endif
