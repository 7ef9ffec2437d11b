/* data/paths.c — joining a folder and a name, and saying a path is missing
 * (see data_impl.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data_impl.h"

char *data_join_path(const char *dir, const char *name)
{
    size_t ld = strlen(dir), ln = strlen(name);
    int slash = ld > 0 && dir[ld - 1] != '/';
    char *p = malloc(ld + slash + ln + 1);
    if (p) {
        memcpy(p, dir, ld);
        if (slash)
            p[ld] = '/';
        memcpy(p + ld + slash, name, ln + 1);
    }
    return p;
}

zt_status data_check_present(const char *path, const char *what, zt_status code, const char *hint)
{
    struct stat sb;
    if (stat(path, &sb) == 0 || errno != ENOENT)
        return ZT_OK;
    return zt_error_set(code, "%s: no such %s (%s)", path, what, hint);
}
