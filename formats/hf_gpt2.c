/* formats/hf_gpt2.c — see hf_gpt2.h for the mapping and the contract.
 *
 * Names are mapped by their text, not by their position in the table: the
 * block suffixes that differ are one small table, everything else keeps
 * its name, so a tensor added to the model shows up under its own name
 * instead of silently taking another's place.
 *
 * Transposition goes through a tile of TILE_ROWS rows of the [in, out]
 * side: export gathers TILE_ROWS columns of our [out, in] matrix into one
 * tile and streams it to the writer; import reads TILE_ROWS rows of the
 * file and scatters them into the cached tensor. Either way one side is
 * read or written TILE_ROWS floats at a time instead of one, and neither
 * direction needs a second full copy of the tensor.
 *
 * Open checks in two sweeps: our tensors against the file (missing,
 * shape, dtype), then the file's tensors against ours (anything left
 * over). A model whose layer count differs fails in whichever sweep meets
 * it first, and the message then names model.n_layer and the file's count.
 */
#include "hf_gpt2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

#define TILE_ROWS     64
#define PREFIX        "transformer."
#define NAME_MAX_LEN  96
#define SHAPE_TEXT    48
#define KEYS_TEXT     96
#define MAX_LAYER_DIG 9

static const struct {
    const char *ours, *hf;
    int transposed;
} renames[] = {
    {"attn.qkv.weight", "attn.c_attn.weight", 1},  {"attn.qkv.bias", "attn.c_attn.bias", 0},
    {"attn.proj.weight", "attn.c_proj.weight", 1}, {"attn.proj.bias", "attn.c_proj.bias", 0},
    {"mlp.fc.weight", "mlp.c_fc.weight", 1},       {"mlp.fc.bias", "mlp.c_fc.bias", 0},
    {"mlp.proj.weight", "mlp.c_proj.weight", 1},   {"mlp.proj.bias", "mlp.c_proj.bias", 0},
};
#define N_RENAMES ((int)(sizeof renames / sizeof renames[0]))

struct hf_gpt2_reader {
    char *path;
    struct safetensors *st;
    const struct param_table *t;
    const struct safetensors_tensor **src; /* file tensor of our tensor k */
    unsigned char *transposed;             /* per k */
    float *cache;                          /* tensor cache_k in our layout */
    float *tile;                           /* TILE_ROWS rows of the file's layout */
    int cache_k;                           /* -1: nothing cached */
};

/* Layer index of a name "h.<i>.<rest>" (rest set to <rest>), or -1. */
static int layer_of(const char *name, const char **rest)
{
    if (strncmp(name, "h.", 2) != 0)
        return -1;
    const char *p = name + 2;
    int l = 0, digits = 0;
    while (*p >= '0' && *p <= '9' && digits < MAX_LAYER_DIG) {
        l = l * 10 + (*p++ - '0');
        digits++;
    }
    if (digits == 0 || *p != '.')
        return -1;
    *rest = p + 1;
    return l;
}

void hf_gpt2_name(const struct param_table *t, int k, char *name, size_t n, int *transposed)
{
    ZT_ASSERT(k >= 0 && k < t->n_tensors);
    const char *ours = t->tensors[k].name, *rest = NULL;
    *transposed = 0;
    if (layer_of(ours, &rest) >= 0) {
        for (int i = 0; i < N_RENAMES; i++) {
            if (strcmp(rest, renames[i].ours) == 0) {
                *transposed = renames[i].transposed;
                snprintf(name, n, "%.*s%s", (int)(rest - ours), ours, renames[i].hf);
                return;
            }
        }
    }
    snprintf(name, n, "%s", ours);
}

/* The HF shape of tensor p; returns ndim (1 for vectors, 2 for matrices). */
static int hf_shape(const struct param_tensor *p, int transposed, uint64_t shape[2])
{
    if (p->cols == 1) {
        shape[0] = (uint64_t)p->rows;
        return 1;
    }
    shape[0] = (uint64_t)(transposed ? p->cols : p->rows);
    shape[1] = (uint64_t)(transposed ? p->rows : p->cols);
    return 2;
}

static const char *shape_text(char *buf, int ndim, const uint64_t *shape)
{
    size_t used = (size_t)snprintf(buf, SHAPE_TEXT, "[");
    for (int i = 0; i < ndim && used < SHAPE_TEXT; i++)
        used += (size_t)snprintf(buf + used, SHAPE_TEXT - used, "%s%llu", i ? ", " : "",
                                 (unsigned long long)shape[i]);
    if (used < SHAPE_TEXT)
        snprintf(buf + used, SHAPE_TEXT - used, "]");
    return buf;
}

/* ---- export ---- */

/* Streams our [rows, cols] matrix at m to the writer as its transpose,
 * TILE_ROWS rows of the transpose at a time. */
static zt_status write_transposed(struct safetensors_writer *w, const float *m, int rows, int cols,
                                  float *tile)
{
    for (int c0 = 0; c0 < cols; c0 += TILE_ROWS) {
        int nc = cols - c0 < TILE_ROWS ? cols - c0 : TILE_ROWS;
        for (int o = 0; o < rows; o++)
            for (int c = 0; c < nc; c++)
                tile[(size_t)c * (size_t)rows + (size_t)o] =
                    m[(size_t)o * (size_t)cols + (size_t)(c0 + c)];
        ZT_TRY(safetensors_writer_write_f32(w, tile, (uint64_t)nc * (uint64_t)rows));
    }
    return ZT_OK;
}

static zt_status write_model(struct safetensors_writer *w, const struct param_table *t,
                             const float *params, enum zt_dtype dtype, float *tile)
{
    ZT_TRY(safetensors_writer_set_metadata(w, "format", "pt"));
    ZT_TRY(safetensors_writer_set_metadata(w, "producer", "zerotrain"));
    for (int k = 0; k < t->n_tensors; k++) {
        char name[NAME_MAX_LEN];
        uint64_t shape[2];
        int tr;
        hf_gpt2_name(t, k, name, sizeof name, &tr);
        int ndim = hf_shape(&t->tensors[k], tr, shape);
        ZT_TRY(safetensors_writer_add(w, name, dtype, ndim, shape));
    }
    ZT_TRY(safetensors_writer_begin_data(w));
    for (int k = 0; k < t->n_tensors; k++) {
        const struct param_tensor *p = &t->tensors[k];
        char name[NAME_MAX_LEN];
        int tr;
        hf_gpt2_name(t, k, name, sizeof name, &tr);
        if (tr)
            ZT_TRY(write_transposed(w, params + p->offset, p->rows, p->cols, tile));
        else
            ZT_TRY(safetensors_writer_write_f32(w, params + p->offset, (uint64_t)p->numel));
    }
    return ZT_OK;
}

/* Elements in a tile: TILE_ROWS rows as long as the longest output side
 * of a transposed tensor. */
static size_t tile_numel(const struct param_table *t)
{
    size_t longest = 0;
    for (int k = 0; k < t->n_tensors; k++)
        if (t->tensors[k].cols > 1 && (size_t)t->tensors[k].rows > longest)
            longest = (size_t)t->tensors[k].rows;
    return (size_t)TILE_ROWS * longest;
}

zt_status hf_gpt2_export(const struct param_table *t, const float *params, enum zt_dtype dtype,
                         const char *path)
{
    if (dtype != ZT_F32 && dtype != ZT_F16 && dtype != ZT_BF16)
        return zt_error_set(ZT_ERR_UNSUPPORTED,
                            "%s: cannot export GPT-2 as %s: the dtypes are F32, F16 and BF16", path,
                            safetensors_dtype_name(dtype));
    float *tile = malloc((tile_numel(t) ? tile_numel(t) : 1) * sizeof *tile);
    if (!tile)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the transposition tile", path);
    struct safetensors_writer *w = NULL;
    zt_status st = safetensors_writer_open(path, &w);
    if (st == ZT_OK) {
        st = write_model(w, t, params, dtype, tile);
        if (st == ZT_OK)
            st = safetensors_writer_finish(w);
        else
            safetensors_writer_abort(w);
    }
    free(tile);
    ZT_TRY(st);
    return ZT_OK;
}

/* ---- import: the checks ---- */

/* The config key a dimension of our tensor p comes from, and its value. */
static const char *dim_key(const struct param_table *t, const struct param_tensor *p, int our_dim,
                           int *value)
{
    if (our_dim == 0 && p->cols > 1 && strcmp(p->name, "wte.weight") == 0) {
        *value = gpt2_config_of(t).vocab_size;
        return "model.vocab_size";
    }
    if (our_dim == 0 && p->cols > 1 && strcmp(p->name, "wpe.weight") == 0) {
        *value = gpt2_config_of(t).block_size;
        return "model.block_size";
    }
    *value = gpt2_config_of(t).n_embd;
    return "model.n_embd";
}

/* "model.vocab_size 256, model.n_embd 32": the keys behind the dimensions
 * of `want` that `got` does not match (all of them if the ranks differ). */
static const char *keys_text(char *buf, const struct param_table *t, const struct param_tensor *p,
                             int transposed, int ndim, const uint64_t *want,
                             const struct safetensors_tensor *got)
{
    const char *seen[2] = {NULL, NULL};
    int n_seen = 0;
    size_t used = 0;
    buf[0] = '\0';
    for (int d = 0; d < ndim; d++) {
        if (got->ndim == ndim && got->shape[d] == want[d])
            continue;
        int value;
        const char *key = dim_key(t, p, ndim == 2 && transposed ? 1 - d : d, &value);
        if (n_seen > 0 && strcmp(seen[0], key) == 0)
            continue;
        seen[n_seen++] = key;
        used +=
            (size_t)snprintf(buf + used, KEYS_TEXT - used, "%s%s %d", used ? ", " : "", key, value);
    }
    return buf;
}

static int shape_matches(const struct safetensors_tensor *got, int ndim, const uint64_t *want)
{
    if (got->ndim != ndim)
        return 0;
    for (int d = 0; d < ndim; d++)
        if (got->shape[d] != want[d])
            return 0;
    return 1;
}

/* Number of layers the file's names speak of: one more than the largest
 * "h.<i>." index, prefixed or not. */
static int file_layers(const struct safetensors *s)
{
    int n = 0;
    for (int i = 0; i < safetensors_count(s); i++) {
        const char *name = safetensors_tensor_at(s, i)->name, *rest;
        if (strncmp(name, PREFIX, strlen(PREFIX)) == 0)
            name += strlen(PREFIX);
        int l = layer_of(name, &rest);
        if (l >= n)
            n = l + 1;
    }
    return n;
}

/* The file's tensor for HF name `name`, under either form; *got NULL if
 * neither is present. */
static zt_status find_tensor(const struct hf_gpt2_reader *r, const char *name,
                             const struct safetensors_tensor **got)
{
    char prefixed[NAME_MAX_LEN + sizeof PREFIX];
    *got = NULL;
    snprintf(prefixed, sizeof prefixed, "%s%s", PREFIX, name);
    const struct safetensors_tensor *a = safetensors_find(r->st, name);
    const struct safetensors_tensor *b = safetensors_find(r->st, prefixed);
    if (a && b)
        return zt_error_set(ZT_ERR_DATA, "%s: %s is present twice, as %s and as %s", r->path, name,
                            name, prefixed);
    *got = a ? a : b;
    return ZT_OK;
}

static zt_status missing_error(const struct hf_gpt2_reader *r, const char *name, int ndim,
                               const uint64_t *want)
{
    const char *rest;
    int l = layer_of(name, &rest), have = file_layers(r->st);
    char ws[SHAPE_TEXT];
    if (l >= have)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: tensor %s is missing: the file has %d layer%s but the config says "
                            "model.n_layer %d",
                            r->path, name, have, have == 1 ? "" : "s",
                            gpt2_config_of(r->t).n_layer);
    return zt_error_set(ZT_ERR_CONFIG, "%s: tensor %s is missing (expected shape %s)", r->path,
                        name, shape_text(ws, ndim, want));
}

/* Finds and checks our tensor k in the file. */
static zt_status check_tensor(struct hf_gpt2_reader *r, int k)
{
    const struct param_tensor *p = &r->t->tensors[k];
    char name[NAME_MAX_LEN];
    uint64_t want[2];
    int tr;
    hf_gpt2_name(r->t, k, name, sizeof name, &tr);
    int ndim = hf_shape(p, tr, want);
    const struct safetensors_tensor *got;
    ZT_TRY(find_tensor(r, name, &got));
    if (!got)
        return missing_error(r, name, ndim, want);
    if (!shape_matches(got, ndim, want)) {
        char gs[SHAPE_TEXT], ws[SHAPE_TEXT], keys[KEYS_TEXT];
        return zt_error_set(
            ZT_ERR_CONFIG, "%s: %.200s has shape %s but the config says %s (expected %s)", r->path,
            got->name, shape_text(gs, got->ndim, got->shape),
            keys_text(keys, r->t, p, tr, ndim, want, got), shape_text(ws, ndim, want));
    }
    if (got->dtype != ZT_F32 && got->dtype != ZT_F16 && got->dtype != ZT_BF16 &&
        got->dtype != ZT_F64)
        return zt_error_set(ZT_ERR_DATA, "%s: %.200s has dtype %s; GPT-2 weights must be floats",
                            r->path, got->name, safetensors_dtype_name(got->dtype));
    r->src[k] = got;
    r->transposed[k] = (unsigned char)tr;
    return ZT_OK;
}

/* Tensors files carry besides the parameters: the tied head and the
 * attention mask buffers. */
static int is_ignored(const char *name)
{
    const char *rest;
    if (strcmp(name, "lm_head.weight") == 0)
        return 1;
    return layer_of(name, &rest) >= 0 &&
           (strcmp(rest, "attn.bias") == 0 || strcmp(rest, "attn.masked_bias") == 0);
}

static int is_ours(const struct hf_gpt2_reader *r, const struct safetensors_tensor *s)
{
    for (int k = 0; k < r->t->n_tensors; k++)
        if (r->src[k] == s)
            return 1;
    return 0;
}

/* Every tensor of the file is one of ours or ignored. */
static zt_status check_extras(const struct hf_gpt2_reader *r)
{
    for (int i = 0; i < safetensors_count(r->st); i++) {
        const struct safetensors_tensor *s = safetensors_tensor_at(r->st, i);
        const char *name = s->name, *rest;
        if (strncmp(name, PREFIX, strlen(PREFIX)) == 0)
            name += strlen(PREFIX);
        if (is_ours(r, s) || is_ignored(name))
            continue;
        int have = file_layers(r->st);
        if (layer_of(name, &rest) >= gpt2_config_of(r->t).n_layer)
            return zt_error_set(ZT_ERR_CONFIG,
                                "%s: tensor %.200s is not part of the model: the file has %d "
                                "layers but the config says model.n_layer %d",
                                r->path, s->name, have, gpt2_config_of(r->t).n_layer);
        return zt_error_set(ZT_ERR_CONFIG, "%s: unexpected tensor %.200s: not a parameter of GPT-2",
                            r->path, s->name);
    }
    return ZT_OK;
}

static zt_status check_file(struct hf_gpt2_reader *r)
{
    for (int k = 0; k < r->t->n_tensors; k++)
        ZT_TRY(check_tensor(r, k));
    ZT_TRY(check_extras(r));
    return ZT_OK;
}

zt_status hf_gpt2_open(const char *path, const struct param_table *t, struct hf_gpt2_reader **out)
{
    *out = NULL;
    struct hf_gpt2_reader *r = calloc(1, sizeof *r);
    size_t len = strlen(path);
    if (r) {
        r->path = malloc(len + 1);
        r->src = calloc((size_t)t->n_tensors, sizeof *r->src);
        r->transposed = calloc((size_t)t->n_tensors, sizeof *r->transposed);
    }
    if (!r || !r->path || !r->src || !r->transposed) {
        hf_gpt2_close(r);
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate a GPT-2 reader", path);
    }
    memcpy(r->path, path, len + 1);
    r->t = t;
    r->cache_k = -1;
    zt_status st = safetensors_open(path, &r->st);
    if (st == ZT_OK)
        st = check_file(r);
    if (st != ZT_OK) {
        hf_gpt2_close(r);
        ZT_TRY(st);
    }
    *out = r;
    return ZT_OK;
}

/* ---- import: reading ---- */

/* Allocates the cache and the tile for the largest transposed tensor. */
static zt_status alloc_buffers(struct hf_gpt2_reader *r)
{
    size_t largest = 0;
    for (int k = 0; k < r->t->n_tensors; k++)
        if (r->transposed[k] && r->t->tensors[k].numel > largest)
            largest = r->t->tensors[k].numel;
    r->cache = malloc(largest * sizeof *r->cache);
    r->tile = malloc(tile_numel(r->t) * sizeof *r->tile);
    if (!r->cache || !r->tile) {
        free(r->cache);
        free(r->tile);
        r->cache = r->tile = NULL;
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate %zu floats to transpose tensors",
                            r->path, largest + tile_numel(r->t));
    }
    return ZT_OK;
}

/* Makes transposed tensor k the cached one, in our [rows, cols] layout:
 * the file holds [cols, rows], read TILE_ROWS rows at a time. */
static zt_status load_transposed(struct hf_gpt2_reader *r, int k)
{
    if (r->cache_k == k)
        return ZT_OK;
    if (!r->cache)
        ZT_TRY(alloc_buffers(r));
    const struct param_tensor *p = &r->t->tensors[k];
    const size_t rows = (size_t)p->rows, cols = (size_t)p->cols;
    r->cache_k = -1;
    for (size_t c0 = 0; c0 < cols; c0 += TILE_ROWS) {
        size_t nc = cols - c0 < TILE_ROWS ? cols - c0 : TILE_ROWS;
        ZT_TRY(safetensors_read_f32(r->st, r->src[k], c0 * rows, nc * rows, r->tile));
        for (size_t o = 0; o < rows; o++)
            for (size_t c = 0; c < nc; c++)
                r->cache[o * cols + c0 + c] = r->tile[c * rows + o];
    }
    r->cache_k = k;
    return ZT_OK;
}

/* The tensor holding flat element i (i < n_params): tensors tile the
 * space in table order. */
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

zt_status hf_gpt2_read(struct hf_gpt2_reader *r, size_t begin, size_t end, float *dst)
{
    const struct param_table *t = r->t;
    if (begin > end || end > t->n_params)
        return zt_error_set(ZT_ERR_USAGE, "%s: cannot read parameters [%zu, %zu) of %zu", r->path,
                            begin, end, t->n_params);
    for (size_t pos = begin; pos < end;) {
        int k = tensor_of(t, pos);
        const struct param_tensor *p = &t->tensors[k];
        size_t lo = pos - p->offset;
        size_t hi = (end < p->offset + p->numel ? end : p->offset + p->numel) - p->offset;
        ZT_ASSERT(pos >= p->offset && lo < hi);
        if (r->transposed[k]) {
            ZT_TRY(load_transposed(r, k));
            memcpy(dst, r->cache + lo, (hi - lo) * sizeof *dst);
        } else {
            ZT_TRY(safetensors_read_f32(r->st, r->src[k], lo, hi - lo, dst));
        }
        dst += hi - lo;
        pos += hi - lo;
    }
    return ZT_OK;
}

void hf_gpt2_close(struct hf_gpt2_reader *r)
{
    if (!r)
        return;
    safetensors_close(r->st);
    free(r->cache);
    free(r->tile);
    free(r->src);
    free(r->transposed);
    free(r->path);
    free(r);
}
