/* formats/hf_weights.h — Hugging Face weights in and out, for any model
 * family that has a mapping.
 *
 * Each family's Hugging Face layout (tensor names, transposes, which
 * tensors a file may carry besides the parameters) is one entry of a
 * static table, found by the family's name: GPT-2's is formats/hf_gpt2.h.
 * The coordinator imports (model.init_from) and exports (zerotrain export)
 * through this header only, so a new family's mapping is one entry here
 * and a file beside hf_gpt2.c. Readers are shaped for a sharded model: the
 * file is checked against the whole parameter table once, then each rank
 * reads only ranges of the flat parameter space.
 */
#ifndef ZT_FORMATS_HF_WEIGHTS_H
#define ZT_FORMATS_HF_WEIGHTS_H

#include <stddef.h>

#include "../common/dtype.h"
#include "../common/status.h"
#include "../worker/model_family.h"

/* One family's mapping; see hf_gpt2.h for what each entry must do. */
struct hf_mapping {
    const char *family; /* struct model_family's name: "gpt2" */
    zt_status (*export_file)(const struct param_table *t, const float *params, enum zt_dtype dtype,
                             const char *path);
    zt_status (*open)(const char *path, const struct param_table *t, void **reader);
    zt_status (*read)(void *reader, size_t begin, size_t end, float *dst);
    void (*close)(void *reader);
};

/* Writes the full model (`params`: t->n_params fp32 values in the flat
 * order) as a Hugging Face safetensors file of t's family, tensors stored
 * as `dtype`. Statuses: ZT_ERR_UNSUPPORTED (a family without a mapping,
 * naming it; another dtype), those of the family's writer. */
zt_status hf_weights_export(const struct param_table *t, const float *params, enum zt_dtype dtype,
                            const char *path);

/* An open Hugging Face file checked against a parameter table. */
struct hf_weights_reader;

/* Opens `path` as a Hugging Face file of t's family (t must outlive the
 * reader); *out is NULL on error. Statuses: ZT_ERR_UNSUPPORTED (no
 * mapping for the family), ZT_ERR_NOMEM, those of the family's reader
 * (ZT_ERR_CONFIG for a file that contradicts the config, naming the key). */
zt_status hf_weights_open(const char *path, const struct param_table *t,
                          struct hf_weights_reader **out);
/* Reads elements [begin, end) of the flat parameter space as fp32 into
 * dst[0 .. end - begin). Statuses: those of the family's reader. */
zt_status hf_weights_read(struct hf_weights_reader *r, size_t begin, size_t end, float *dst);
/* Closes the file and frees the reader. NULL is allowed. */
void hf_weights_close(struct hf_weights_reader *r);

#endif
