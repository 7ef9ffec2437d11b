/* tests/hfutil.h — what the Hugging Face weights suites (test_hf_gpt2,
 * test_hf_llama) do alike through formats/hf_weights.h, whatever the
 * family: read a whole model, expect an open to fail, and export a model
 * cut into shards and read it back every way. */
#ifndef ZT_TESTS_HFUTIL_H
#define ZT_TESTS_HFUTIL_H

#include <stdint.h>

#include "../common/status.h"
#include "../worker/model_family.h"

/* Our flat space [0, n_params) of the weights at path (a file, an index or
 * a folder), read through the module; the caller frees it. */
float *hfutil_read_all(const char *path, const struct param_table *t);

/* hf_weights_open(path) must fail with `want`, leave its reader NULL, and
 * say exactly "FILE: text" (FILE: the file at fault, path for one file). */
void hfutil_expect_open_error(const char *path, const struct param_table *t, zt_status want,
                              const char *file, const char *text);

/* Exports params (fp32, in t's flat order) to a fresh folder as
 * model.safetensors with at most max_shard_bytes per file and checks that
 * it was cut into at least min_shards files named as save_pretrained names
 * them, with no single file beside them, and that the index and the folder
 * read back exactly params, whole and by ranges that cross shards. Returns
 * the folder (a static buffer of testutil's ring); *n_shards gets the
 * count. */
const char *hfutil_check_sharded(const struct param_table *t, const float *params,
                                 uint64_t max_shard_bytes, int min_shards, int *n_shards);

#endif
