/* tests/fuzz/fuzz_config.c — the run configuration: a YAML file (the
 * first piece) and --set overrides (each further piece one assignment)
 * through config_load, which builds the YAML tree, grafts the overrides,
 * walks the schema and checks the cross-field rules. A config that loads
 * is written back (config_write_yaml) and must load again: the resolved
 * config a run saves is a config. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "../../config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_piece pieces[FUZZ_MAX_PIECES];
    size_t n = fuzz_split(data, size, pieces, FUZZ_MAX_PIECES);
    struct config_override overrides[FUZZ_MAX_PIECES];
    char *texts[FUZZ_MAX_PIECES] = {0};
    for (size_t i = 1; i < n; i++) {
        texts[i] = strndup((const char *)pieces[i].data, pieces[i].size);
        if (!texts[i])
            abort();
        overrides[i - 1].assignment = texts[i];
    }
    const char *path = fuzz_write("config.yaml", pieces[0].data, pieces[0].size);
    struct zt_config cfg;
    fuzz_begin();
    if (fuzz_check(config_load(path, overrides, (int)n - 1, &cfg)) == ZT_OK) {
        char resolved[4200];
        snprintf(resolved, sizeof resolved, "%s/resolved.yaml", fuzz_dir());
        FILE *f = fopen(resolved, "w");
        if (!f || config_write_yaml(&cfg, f) != ZT_OK || fclose(f) != 0)
            abort();
        struct zt_config again;
        if (config_load(resolved, NULL, 0, &again) != ZT_OK) {
            fprintf(stderr, "fuzz_config: the resolved config does not load: %s\n",
                    zt_error_message());
            abort();
        }
        config_free(&again);
    }
    config_free(&cfg);
    for (size_t i = 1; i < n; i++)
        free(texts[i]);
    return 0;
}
