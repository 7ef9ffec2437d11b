/* data/paths.c — joining a folder and a name (see data_impl.h). */
#include <stdlib.h>
#include <string.h>

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
