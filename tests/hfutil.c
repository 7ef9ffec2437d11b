/* tests/hfutil.c — see hfutil.h. */
#include "hfutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../formats/hf_weights.h"
#include "testutil.h"

float *hfutil_read_all(const char *path, const struct param_table *t)
{
    struct hf_weights_reader *r = NULL;
    ck_assert_msg(hf_weights_open(path, t, &r) == ZT_OK, "%s", zt_error_message());
    float *got = malloc(t->n_params * sizeof *got);
    ck_assert_int_eq(hf_weights_read(r, 0, t->n_params, got), ZT_OK);
    hf_weights_close(r);
    return got;
}

void hfutil_expect_open_error(const char *path, const struct param_table *t, zt_status want,
                              const char *file, const char *text)
{
    struct hf_weights_reader *r = (struct hf_weights_reader *)&r; /* must be reset to NULL */
    zt_status got = hf_weights_open(path, t, &r);
    ck_assert_msg(got == want, "status %s, expected %s (message: %s)", zt_status_str(got),
                  zt_status_str(want), zt_error_message());
    ck_assert_ptr_null(r);
    ck_assert_str_eq(zt_error_message(), testutil_fmt("%s: %s", file, text));
}

/* Reads [a, a + len) every `step` elements through path and compares. */
static void check_ranges(const char *path, const struct param_table *t, const float *params,
                         size_t step, size_t len)
{
    struct hf_weights_reader *r = NULL;
    ck_assert_msg(hf_weights_open(path, t, &r) == ZT_OK, "%s", zt_error_message());
    float *got = malloc(len * sizeof *got);
    for (size_t a = 0; a < t->n_params; a += step) {
        size_t b = a + len < t->n_params ? a + len : t->n_params;
        ck_assert_int_eq(hf_weights_read(r, a, b, got), ZT_OK);
        ck_assert_msg(memcmp(got, params + a, (b - a) * sizeof *got) == 0, "[%zu, %zu)", a, b);
    }
    hf_weights_close(r);
    free(got);
}

const char *hfutil_check_sharded(const struct param_table *t, const float *params,
                                 uint64_t max_shard_bytes, int min_shards, int *n_shards)
{
    const char *dir = testutil_tmpdir("hf-sharded");
    const char *path = testutil_path_in(dir, "model.safetensors");
    ck_assert_msg(hf_weights_export(t, params, ZT_F32, path, max_shard_bytes, n_shards) == ZT_OK,
                  "%s", zt_error_message());
    ck_assert_int_ge(*n_shards, min_shards);
    ck_assert_int_ne(access(path, F_OK), 0);
    for (int k = 1; k <= *n_shards; k++)
        ck_assert_int_eq(
            access(testutil_fmt("%s/model-%05d-of-%05d.safetensors", dir, k, *n_shards), F_OK), 0);
    float *got = hfutil_read_all(testutil_path_in(dir, "model.safetensors.index.json"), t);
    ck_assert(memcmp(got, params, t->n_params * sizeof *got) == 0);
    free(got);
    check_ranges(dir, t, params, t->n_params / 19 + 1, t->n_params / 4 + 1);
    return dir;
}
