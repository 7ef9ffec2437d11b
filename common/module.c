/* common/module.c — finding and opening a module; see module.h. */
#include "module.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef ZT_MODULE_BUILD_DIR
#define ZT_MODULE_BUILD_DIR ""
#endif

/* The folder of the running executable into dir, or "" when unknown. */
static void executable_dir(char *dir, size_t n)
{
    ssize_t len = readlink("/proc/self/exe", dir, n - 1);
    dir[len > 0 ? len : 0] = '\0';
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        dir[0] = '\0';
}

/* Opens dir/name; NULL with the loader's message appended to why. */
static void *open_in(const char *dir, const char *name, char *why, size_t n)
{
    if (!dir || !dir[0])
        return NULL;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (access(path, F_OK) != 0)
        return NULL;
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        size_t used = strlen(why);
        snprintf(why + used, n - used, "%s%s", used ? "; " : "", dlerror());
    }
    return handle;
}

int zt_module_table(const char *name, const char *symbol, size_t size, const void **out, char *why,
                    size_t n)
{
    char exe_dir[PATH_MAX];
    executable_dir(exe_dir, sizeof exe_dir);
    const char *dirs[] = {getenv("ZT_MODULE_DIR"), exe_dir, ZT_MODULE_BUILD_DIR};
    why[0] = '\0';
    void *handle = NULL;
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0] && !handle && !why[0]; i++)
        handle = open_in(dirs[i], name, why, n);
    if (!handle) {
        if (!why[0])
            snprintf(why, n, "%s not found ($ZT_MODULE_DIR, beside the executable, %s)", name,
                     ZT_MODULE_BUILD_DIR[0] ? ZT_MODULE_BUILD_DIR : "no build folder");
        return -1;
    }
    dlerror();
    const size_t *table = dlsym(handle, symbol);
    const char *err = dlerror();
    if (err || !table) {
        snprintf(why, n, "%s has no %s: %s", name, symbol, err ? err : "a NULL symbol");
        return -1;
    }
    if (*table != size) {
        snprintf(why, n, "%s was built from other sources (its %s has %zu bytes, not %zu)", name,
                 symbol, *table, size);
        return -1;
    }
    *out = table;
    return 0;
}
