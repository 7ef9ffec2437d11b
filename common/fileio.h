/* common/fileio.h — reading files and making folders: opening a regular
 * file for reading, reading an exact byte range, reading a small file
 * whole, and creating a folder with its parents.
 *
 * Checkpoint shards, safetensors files, meta.json and DIR/latest are read
 * with these, so that a missing file, a failed read and a file that ends
 * early are reported the same way everywhere: ZT_ERR_IO naming PATH for
 * what the system refused, and the reading format's own status (the caller
 * passes it: ZT_ERR_CHECKPOINT, ZT_ERR_DATA) for a file that is not what
 * the format needs. Reads retry EINTR and short counts.
 *
 * Nothing here keeps state; file descriptors belong to the caller.
 */
#ifndef ZT_COMMON_FILEIO_H
#define ZT_COMMON_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* Opens PATH read-only (close-on-exec) into *fd (the caller closes it)
 * and sets *size to its length in bytes; on failure nothing stays open and
 * *fd is -1. ZT_ERR_IO "PATH: no such file or directory" when it is
 * missing, "PATH: cannot open: <strerror>", "PATH: cannot stat:
 * <strerror>"; `not_regular` (the format's status) "PATH: not a regular
 * file" for a folder, a device or a pipe. */
zt_status zt_open_regular(const char *path, zt_status not_regular, int *fd, uint64_t *size);

/* Reads exactly n bytes at `offset` of fd (the file PATH names, for
 * messages) into buf with pread, retrying EINTR and short reads; the file
 * position is not used. ZT_ERR_IO "PATH: read failed: <strerror>" or for
 * an offset past what off_t holds; `truncated` (the format's status)
 * "PATH: truncated: the file shrank while being read" when the file ends
 * first. */
zt_status zt_pread_full(int fd, const char *path, void *buf, size_t n, uint64_t offset,
                        zt_status truncated);

/* Reads the whole regular file PATH, at most `max` bytes, into a new
 * NUL-terminated buffer (*out, caller frees; *len its length without the
 * NUL). Errors: as zt_open_regular (with `bad` for not_regular),
 * ZT_ERR_NOMEM, and `bad` (the format's status) for "PATH: N bytes, more
 * than the limit of MAX" and a file that shrinks while read. *out is NULL and *len 0 on failure. */
zt_status zt_read_small_file(const char *path, size_t max, zt_status bad, char **out, size_t *len);

/* Whether `path` ends in `tail` (".json", ".safetensors"). */
int zt_ends_with(const char *path, const char *tail);

/* Creates `dir` and its parents (mode 0755); folders that exist are kept.
 * Errors: ZT_ERR_IO "cannot create directory PATH: <strerror>", or "DIR:
 * path too long". */
zt_status zt_mkdir_p(const char *dir);

#endif
