/* formats/hf_weights.c — the table of Hugging Face mappings (see
 * hf_weights.h). */
#include "hf_weights.h"

#include <stdlib.h>
#include <string.h>

#include "hf_gpt2.h"

static zt_status gpt2_open(const char *path, const struct param_table *t, void **reader)
{
    struct hf_gpt2_reader *r = NULL;
    zt_status st = hf_gpt2_open(path, t, &r);
    *reader = r;
    return st;
}

static zt_status gpt2_read(void *reader, size_t begin, size_t end, float *dst)
{
    return hf_gpt2_read(reader, begin, end, dst);
}

static void gpt2_close(void *reader)
{
    hf_gpt2_close(reader);
}

static const struct hf_mapping mappings[] = {
    {"gpt2", hf_gpt2_export, gpt2_open, gpt2_read, gpt2_close},
};
#define N_MAPPINGS (sizeof mappings / sizeof mappings[0])

struct hf_weights_reader {
    const struct hf_mapping *mapping;
    void *impl;
};

/* The mapping of t's family, or ZT_ERR_UNSUPPORTED naming it. */
static zt_status mapping_of(const struct param_table *t, const struct hf_mapping **out)
{
    for (size_t k = 0; k < N_MAPPINGS; k++)
        if (strcmp(mappings[k].family, t->family->name) == 0) {
            *out = &mappings[k];
            return ZT_OK;
        }
    return zt_error_set(ZT_ERR_UNSUPPORTED,
                        "Hugging Face weights: no mapping for model family '%s' yet",
                        t->family->name);
}

zt_status hf_weights_export(const struct param_table *t, const float *params, enum zt_dtype dtype,
                            const char *path)
{
    const struct hf_mapping *m;
    ZT_TRY(mapping_of(t, &m));
    return m->export_file(t, params, dtype, path);
}

zt_status hf_weights_open(const char *path, const struct param_table *t,
                          struct hf_weights_reader **out)
{
    const struct hf_mapping *m;
    *out = NULL;
    ZT_TRY(mapping_of(t, &m));
    struct hf_weights_reader *r = calloc(1, sizeof *r);
    if (!r)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the reader", path);
    r->mapping = m;
    zt_status st = m->open(path, t, &r->impl);
    if (st != ZT_OK) {
        free(r);
        return st;
    }
    *out = r;
    return ZT_OK;
}

zt_status hf_weights_read(struct hf_weights_reader *r, size_t begin, size_t end, float *dst)
{
    return r->mapping->read(r->impl, begin, end, dst);
}

void hf_weights_close(struct hf_weights_reader *r)
{
    if (!r)
        return;
    r->mapping->close(r->impl);
    free(r);
}
