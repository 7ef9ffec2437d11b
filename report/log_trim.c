/* report/log_trim.c — see log_trim.h. */
#define _GNU_SOURCE /* getline */
#include "log_trim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/atomic_file.h"

/* Copies the complete lines of `in` whose position is at most
 * `keep_through` (and lines without one) to `out`. */
static zt_status copy_kept_lines(FILE *in, FILE *out, long keep_through, log_line_position position,
                                 const char *what, const char *path)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    zt_status st = ZT_OK;
    while ((len = getline(&line, &cap, in)) > 0) {
        if (line[len - 1] != '\n' || position(line) > keep_through)
            continue;
        if (fwrite(line, 1, (size_t)len, out) != (size_t)len) {
            st = zt_error_set(ZT_ERR_IO, "cannot write %s %s: %s", what, path, strerror(errno));
            break;
        }
    }
    if (st == ZT_OK && ferror(in))
        st = zt_error_set(ZT_ERR_IO, "cannot read %s %s: %s", what, path, strerror(errno));
    free(line);
    return st;
}

zt_status log_trim_after(const char *path, const char *what, long keep_through,
                         log_line_position position)
{
    FILE *in = fopen(path, "r");
    if (!in)
        return errno == ENOENT
                   ? ZT_OK
                   : zt_error_set(ZT_ERR_IO, "cannot read %s %s: %s", what, path, strerror(errno));
    struct atomic_file out;
    zt_status st = atomic_file_open(path, &out);
    if (st == ZT_OK)
        st = copy_kept_lines(in, out.f, keep_through, position, what, path);
    fclose(in);
    if (st != ZT_OK) {
        atomic_file_abort(&out);
        return st;
    }
    return atomic_file_commit(&out);
}
