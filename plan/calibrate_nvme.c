/* plan/calibrate_nvme.c — a folder's file bandwidth (calibrate_nvme.h). */
#define _GNU_SOURCE /* O_DIRECT */
#include "calibrate_nvme.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Bytes a call moves: as large as the offload's default buffer of 1e8
 * elements would read in a few calls, small enough for any folder. */
#define CHUNK ((size_t)8 << 20)

static zt_status io_error(const char *what, const char *path, int err)
{
    return zt_error_set(ZT_ERR_IO, "calibrate --nvme-path: cannot %s %s: %s", what, path,
                        strerror(err));
}

zt_status calibrate_nvme_open(const char *dir, int rank, size_t bytes,
                              struct calibrate_nvme_file *f)
{
    ZT_ASSERT(bytes > 0 && bytes % CHUNK == 0);
    memset(f, 0, sizeof *f);
    f->fd = -1;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/zerotrain-calibrate-%d-%ld.tmp", dir, rank,
                 (long)getpid()) >= (int)sizeof path)
        return zt_error_set(ZT_ERR_IO, "calibrate --nvme-path: path too long: %s", dir);
    f->direct = 1;
    f->fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT, 0600);
    if (f->fd < 0 && errno == EINVAL) { /* tmpfs and others take no O_DIRECT */
        f->direct = 0;
        f->fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    }
    if (f->fd < 0)
        return io_error("create a file in", dir, errno);
    unlink(path);
    f->bytes = bytes;
    const int err = posix_fallocate(f->fd, 0, (off_t)bytes);
    if (err != 0) {
        calibrate_nvme_close(f);
        return zt_error_set(ZT_ERR_IO, "calibrate --nvme-path: cannot reserve %zu bytes in %s: %s",
                            bytes, dir, strerror(err));
    }
    if (posix_memalign(&f->chunk, 4096, CHUNK) != 0) {
        f->chunk = NULL;
        calibrate_nvme_close(f);
        return zt_error_set(ZT_ERR_NOMEM, "calibrate: no memory for the file's buffer");
    }
    memset(f->chunk, 0x5a, CHUNK);
    return ZT_OK;
}

zt_status calibrate_nvme_pass(struct calibrate_nvme_file *f, int write)
{
    for (size_t off = 0; off < f->bytes; off += CHUNK)
        for (size_t done = 0; done < CHUNK;) {
            char *p = (char *)f->chunk + done;
            const ssize_t k = write ? pwrite(f->fd, p, CHUNK - done, (off_t)(off + done))
                                    : pread(f->fd, p, CHUNK - done, (off_t)(off + done));
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0 && errno == EINVAL && f->direct) { /* took O_DIRECT at open only */
                f->direct = 0;
                if (fcntl(f->fd, F_SETFL, fcntl(f->fd, F_GETFL) & ~O_DIRECT) == 0)
                    continue;
            }
            if (k <= 0)
                return io_error(write ? "write" : "read", "the calibration file",
                                k < 0 ? errno : EIO);
            done += (size_t)k;
        }
    if (write && fdatasync(f->fd) != 0)
        return io_error("sync", "the calibration file", errno);
    /* without O_DIRECT the synced pages would serve the read from memory */
    if (write && !f->direct)
        (void)posix_fadvise(f->fd, 0, 0, POSIX_FADV_DONTNEED);
    return ZT_OK;
}

void calibrate_nvme_close(struct calibrate_nvme_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    free(f->chunk);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}
