/* common/atomic_file.c — see atomic_file.h.
 *
 * Every failure is reported with PATH first, because PATH is what the user
 * asked for, and the temp name second, because that is the file the
 * operation touched. A folder that cannot be synced because its
 * filesystem does not support it (EINVAL) is not an error: there is
 * nothing more that could be done there.
 */
#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

zt_status atomic_file_open(const char *path, struct atomic_file *out)
{
    *out = (struct atomic_file){0};
    size_t len = strlen(path) + 32;
    char *copy = strdup(path), *tmp = malloc(len);
    if (!copy || !tmp) {
        free(copy);
        free(tmp);
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the temporary file name", path);
    }
    snprintf(tmp, len, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        zt_status st =
            zt_error_set(ZT_ERR_IO, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        free(copy);
        free(tmp);
        return st;
    }
    *out = (struct atomic_file){f, copy, tmp};
    return ZT_OK;
}

void atomic_file_abort(struct atomic_file *a)
{
    if (a->f)
        fclose(a->f);
    if (a->tmp_path)
        remove(a->tmp_path);
    free(a->tmp_path);
    free(a->path);
    *a = (struct atomic_file){0};
}

/* Gets the bytes to the disk and closes f; 0 or the errno of the first
 * step that failed. A write that failed earlier leaves only the error
 * flag, its errno long overwritten, hence EIO for it. */
static int flush_and_close(FILE *f)
{
    int err = 0;
    if (ferror(f))
        err = EIO;
    else if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        err = errno;
    if (fclose(f) != 0 && err == 0)
        err = errno;
    return err;
}

/* Makes the rename durable: without it a crash can forget the new name
 * even though the data reached the disk. */
static zt_status sync_folder(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir)
        return zt_error_set(ZT_ERR_NOMEM, "%s: out of memory", path);
    int fd = open(dir, O_RDONLY);
    zt_status st = ZT_OK;
    if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL))
        st = zt_error_set(ZT_ERR_IO, "%s: cannot sync folder %s: %s", path, dir, strerror(errno));
    if (fd >= 0)
        close(fd);
    free(dir);
    return st;
}

zt_status atomic_file_commit(struct atomic_file *a)
{
    ZT_ASSERT(a->f && a->path && a->tmp_path);
    int err = flush_and_close(a->f);
    a->f = NULL;
    zt_status st = ZT_OK;
    if (err)
        st =
            zt_error_set(ZT_ERR_IO, "%s: cannot flush %s: %s", a->path, a->tmp_path, strerror(err));
    else if (rename(a->tmp_path, a->path) != 0)
        st = zt_error_set(ZT_ERR_IO, "%s: cannot rename %s over it: %s", a->path, a->tmp_path,
                          strerror(errno));
    if (st != ZT_OK) {
        atomic_file_abort(a);
        return st;
    }
    free(a->tmp_path); /* renamed: nothing left to remove */
    a->tmp_path = NULL;
    st = sync_folder(a->path);
    atomic_file_abort(a);
    return st;
}

zt_status atomic_file_write(const char *path, const void *bytes, size_t n)
{
    struct atomic_file af;
    ZT_TRY(atomic_file_open(path, &af));
    if (n && fwrite(bytes, 1, n, af.f) != n) {
        zt_status st =
            zt_error_set(ZT_ERR_IO, "%s: cannot write %s: %s", path, af.tmp_path, strerror(errno));
        atomic_file_abort(&af);
        return st;
    }
    return atomic_file_commit(&af);
}
