/* common/atomic_file.h — writing a file so that it appears whole or not at
 * all.
 *
 * Token files, safetensors checkpoints and memory reports are read later,
 * maybe by another program, maybe after a crash or a full disk cut the
 * writer short. So a writer never writes PATH itself: it writes
 * PATH.tmp.<pid> (the pid keeps two processes writing the same PATH off
 * each other's temp file), and commit flushes it to the disk, renames it
 * over PATH (atomic on POSIX: a reader sees the old file or the new one)
 * and syncs the folder so that the new name survives a crash too. Abort
 * removes the temp file and leaves an older PATH as it was.
 *
 * Life cycle: atomic_file_open -> writes through f -> atomic_file_commit or
 * atomic_file_abort, exactly one of them; both release everything and zero
 * the struct, and abort on a zeroed struct does nothing, so an owner can
 * abort unconditionally in its own cleanup.
 */
#ifndef ZT_ATOMIC_FILE_H
#define ZT_ATOMIC_FILE_H

#include <stdio.h>

#include "status.h"

struct atomic_file {
    FILE *f;        /* open for binary writing on tmp_path */
    char *path;     /* the name the file gets at commit (owned) */
    char *tmp_path; /* PATH.tmp.<pid> (owned) */
};

/* Creates PATH.tmp.<pid> (truncating a stale one) and fills *out; *out is
 * zeroed on failure. PATH's folder must exist. ZT_ERR_IO "PATH: cannot
 * create TMP: <strerror>", ZT_ERR_NOMEM. */
zt_status atomic_file_open(const char *path, struct atomic_file *out);

/* Flushes and syncs the temp file, closes it, renames it over PATH and syncs
 * the folder. Releases *a whatever happens; on failure before the rename
 * the temp file is removed and an older PATH is left as it was.
 * ZT_ERR_IO naming PATH, the step and strerror (a write that failed
 * earlier on f is reported here), ZT_ERR_NOMEM. */
zt_status atomic_file_commit(struct atomic_file *a);

/* Closes and removes the temp file and releases *a; PATH is untouched.
 * Does nothing on a zeroed struct. */
void atomic_file_abort(struct atomic_file *a);

/* Writes the n bytes at `bytes` to PATH whole or not at all: open, one
 * write, commit. ZT_ERR_IO "PATH: cannot write TMP: <strerror>" and the
 * statuses of open and commit, ZT_ERR_NOMEM. */
zt_status atomic_file_write(const char *path, const void *bytes, size_t n);

#endif
