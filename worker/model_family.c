/* worker/model_family.c — the table of model families and the parameter
 * table's generic operations (see model_family.h); the instance calls are
 * in model_instance.c. */
#include "model_family.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"
#include "lora.h"
#include "model.h"

static const struct model_family *const families[] = {&gpt2_family, &llama_family};
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
    free(t->lora.unit_adapter);
    free(t->tensors);
    free(t->unit_offset);
    memset(t, 0, sizeof *t);
}

struct param_table param_table_base(const struct param_table *t)
{
    struct param_table base = *t;
    if (t->lora.r > 0) {
        base.n_tensors = t->lora.n_base_tensors;
        base.n_units = t->lora.n_base_units;
        base.n_params = t->lora.n_base_params;
    }
    memset(&base.lora, 0, sizeof base.lora);
    return base;
}

/* The tensor holding flat element i (i < t->n_params): the tensors tile
 * the space in table order. */
static int tensor_of(const struct param_table *t, size_t i)
{
    int lo = 0, hi = t->n_tensors - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (t->tensors[mid].offset <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

void param_table_piece(const struct param_table *t, size_t pos, size_t end, int *k, size_t *lo,
                       size_t *hi)
{
    const struct param_tensor *p = &t->tensors[ *k = tensor_of(t, pos)];
    const size_t stop = end < p->offset + p->numel ? end : p->offset + p->numel;
    ZT_ASSERT(pos >= p->offset && pos < stop);
    *lo = pos - p->offset;
    *hi = stop - p->offset;
}

void param_table_init(const struct param_table *t, uint64_t seed, size_t begin, size_t end,
                      float *dst)
{
    const size_t n_base = t->lora.r > 0 ? t->lora.n_base_params : t->n_params;
    if (begin < n_base)
        t->family->init_params(t, seed, begin, end < n_base ? end : n_base, dst);
    if (end > n_base) {
        const size_t lo = begin > n_base ? begin : n_base;
        lora_init_params(t, seed, lo, end, dst + (lo - begin));
    }
}

int param_table_unit_order(const struct param_table *t, enum model_pass pass, int *order, int cap)
{
    int base[MODEL_MAX_UNITS + 2];
    const int n = t->family->unit_order(t, pass, base, MODEL_MAX_UNITS + 2);
    int k = 0;
    for (int i = 0; i < n; i++) {
        const int a = param_table_adapter_unit(t, base[i]);
        if (k < cap)
            order[k] = base[i];
        k++;
        if (a >= 0 && k < cap)
            order[k] = a;
        k += a >= 0;
    }
    return k;
}

static const char *const profile_names[] = {
#define MODEL_PROFILE_NAME(id, name) name,
    MODEL_PROFILE_CATEGORIES(MODEL_PROFILE_NAME)
#undef MODEL_PROFILE_NAME
};

const char *model_profile_name(enum model_profile_category c)
{
    ZT_ASSERT((unsigned)c < MODEL_PROF_COUNT);
    return profile_names[c];
}
