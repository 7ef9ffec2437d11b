/* worker/model_family.c — the table of model families (see
 * model_family.h). */
#include "model_family.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

static const struct model_family *const families[] = {&gpt2_family};
#define N_FAMILIES (sizeof families / sizeof families[0])

const struct model_family *model_family_find(const char *name)
{
    for (size_t k = 0; k < N_FAMILIES; k++)
        if (strcmp(families[k]->name, name) == 0)
            return families[k];
    return NULL;
}

zt_status param_table_build(const struct zt_kvlist *shape, struct param_table *out)
{
    memset(out, 0, sizeof *out);
    const struct model_family *f = model_family_find(shape->kind);
    if (!f) {
        char known[128] = "";
        for (size_t k = 0, at = 0; k < N_FAMILIES && at < sizeof known; k++)
            at += (size_t)snprintf(known + at, sizeof known - at, "%s%s", k ? ", " : "",
                                   families[k]->name);
        return zt_error_set(ZT_ERR_CHECKPOINT, "model family '%s' is not known (known: %s)",
                            shape->kind, known);
    }
    return f->table_build(shape, out);
}

void param_table_free(struct param_table *t)
{
    free(t->tensors);
    free(t->unit_offset);
    memset(t, 0, sizeof *t);
}
