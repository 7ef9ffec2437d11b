/* common/fileio.c — see fileio.h. */
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

zt_status zt_open_regular(const char *path, zt_status not_regular, int *fd, uint64_t *size)
{
    *size = 0;
    /* O_NONBLOCK: a FIFO's open would wait for a writer before the check
     * below could refuse it; regular files ignore the flag */
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0)
        return errno == ENOENT
                   ? zt_error_set(ZT_ERR_IO, "%s: no such file or directory", path)
                   : zt_error_set(ZT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    zt_status st = ZT_OK;
    if (fstat(*fd, &sb) != 0)
        st = zt_error_set(ZT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = zt_error_set(not_regular, "%s: not a regular file", path);
    if (st != ZT_OK) {
        close(*fd);
        *fd = -1;
        return st;
    }
    *size = (uint64_t)sb.st_size;
    return ZT_OK;
}

zt_status zt_pread_full(int fd, const char *path, void *buf, size_t n, uint64_t offset,
                        zt_status truncated)
{
    unsigned char *p = buf;
    while (n > 0) {
        if (offset > (uint64_t)INT64_MAX || (uint64_t)(off_t)offset != offset)
            return zt_error_set(ZT_ERR_IO, "%s: offset %llu is beyond what this system can seek",
                                path, (unsigned long long)offset);
        ssize_t got = pread(fd, p, n, (off_t)offset);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return zt_error_set(ZT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        if (got == 0)
            return zt_error_set(truncated, "%s: truncated: the file shrank while being read", path);
        p += got;
        n -= (size_t)got;
        offset += (uint64_t)got;
    }
    return ZT_OK;
}

zt_status zt_read_small_file(const char *path, size_t max, zt_status bad, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    int fd;
    uint64_t size;
    ZT_TRY(zt_open_regular(path, bad, &fd, &size));
    zt_status st = ZT_OK;
    char *buf = NULL;
    if (size > max)
        st = zt_error_set(bad, "%s: %lld bytes, more than the limit of %zu", path, (long long)size,
                          max);
    else if (!(buf = malloc((size_t)size + 1)))
        st = zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate %lld bytes", path, (long long)size);
    else
        st = zt_pread_full(fd, path, buf, (size_t)size, 0, bad);
    close(fd);
    if (st != ZT_OK) {
        free(buf);
        return st;
    }
    buf[size] = '\0';
    *out = buf;
    *len = (size_t)size;
    return ZT_OK;
}

zt_status zt_mkdir_p(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return zt_error_set(ZT_ERR_IO, "%s: path too long", dir);
    for (char *p = path + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(path, 0755) != 0 && errno != EEXIST)
                return zt_error_set(ZT_ERR_IO, "cannot create directory %s: %s", path,
                                    strerror(errno));
            *p = saved;
            if (saved == '\0')
                break;
        }
    }
    return ZT_OK;
}

int zt_ends_with(const char *path, const char *tail)
{
    const size_t n = strlen(path), k = strlen(tail);
    return n >= k && strcmp(path + n - k, tail) == 0;
}
