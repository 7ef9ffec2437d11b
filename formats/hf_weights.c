/* formats/hf_weights.c — the table of Hugging Face mappings and the one
 * mechanism they share (see hf_weights.h and hf_weights_impl.h).
 *
 * Transposition goes through a tile of TILE_ROWS rows of the file's
 * [cols, rows] side: export gathers TILE_ROWS columns of our [rows, cols]
 * matrix into one tile and streams it to the writer; import reads
 * TILE_ROWS rows of the file and scatters them into the cached tensor.
 * Either way one side is read or written TILE_ROWS floats at a time
 * instead of one, and neither direction needs a second full copy of the
 * tensor. A family without transposed tensors allocates neither buffer.
 *
 * Open checks in two sweeps: our tensors against the file (missing,
 * shape, dtype), then the file's tensors against ours (anything left
 * over). A model whose layer count differs fails in whichever sweep meets
 * it first, and the message then names model.n_layer and the file's count.
 */
#include "hf_weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/atomic_file.h"
#include "hf_gpt2.h"
#include "hf_llama.h"
#include "hf_weights_impl.h"
#include "safetensors_set.h"

#define TILE_ROWS     HF_WEIGHTS_TILE_ROWS
#define NAME_MAX_LEN  112
#define SHAPE_TEXT    48
#define KEYS_TEXT     160
#define MAX_LAYER_DIG 9

static const struct hf_mapping *const mappings[] = {&hf_gpt2_mapping, &hf_llama_mapping};
#define N_MAPPINGS (sizeof mappings / sizeof mappings[0])

struct hf_weights_reader {
    const struct hf_mapping *m;
    struct safetensors_set *set;
    const char *path; /* the set's file: the .safetensors file or the index */
    const struct param_table *t;
    const struct safetensors_tensor **src; /* file tensor of our tensor k */
    unsigned char *transposed;             /* per k */
    float *cache;                          /* tensor cache_k in our layout */
    float *tile;                           /* TILE_ROWS rows of the file's layout */
    int cache_k;                           /* -1: nothing cached */
    size_t buffer_bytes;                   /* of cache and tile */
};

/* The mapping of t's family, or ZT_ERR_UNSUPPORTED naming it. */
static zt_status mapping_of(const struct param_table *t, const struct hf_mapping **out)
{
    for (size_t k = 0; k < N_MAPPINGS; k++)
        if (strcmp(mappings[k]->family, t->family->name) == 0) {
            *out = mappings[k];
            return ZT_OK;
        }
    return zt_error_set(ZT_ERR_UNSUPPORTED,
                        "Hugging Face weights: no mapping for model family '%s' yet",
                        t->family->name);
}

/* ---- what the mappings share ---- */

int hf_layer_of(const char *name, const char *layer, const char **rest)
{
    size_t n = strlen(layer);
    if (strncmp(name, layer, n) != 0)
        return -1;
    const char *p = name + n;
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

int64_t hf_shape_int(const struct param_table *t, const char *key)
{
    const struct zt_kv *kv = zt_kv_find(&t->shape, key);
    ZT_ASSERT(kv && !kv->is_real);
    return kv->i;
}

/* Our tensor k's name as export writes it, and as messages give it. */
static void export_name(const struct hf_mapping *m, const struct param_table *t, int k, char *name,
                        size_t n, int *transposed)
{
    char bare[NAME_MAX_LEN];
    int prefixed = m->name(t, k, bare, sizeof bare, transposed) && m->export_prefixed;
    snprintf(name, n, "%s%s", prefixed ? m->prefix : "", bare);
}

zt_status hf_weights_module_names(const struct param_table *t, char ***names)
{
    const struct hf_mapping *m;
    ZT_TRY(mapping_of(t, &m));
    const size_t n = (size_t)t->n_tensors;
    char **out = calloc(1, n * (sizeof(char *) + NAME_MAX_LEN));
    if (!out)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the module names");
    char *text = (char *)(out + n);
    for (size_t k = 0; k < n; k++) {
        if (!t->tensors[k].linear)
            continue;
        char bare[NAME_MAX_LEN];
        int transposed;
        const int prefixed = m->name(t, (int)k, bare, sizeof bare, &transposed);
        size_t len = strlen(bare);
        if (len > 7 && strcmp(bare + len - 7, ".weight") == 0)
            bare[len - 7] = '\0';
        out[k] = text + k * NAME_MAX_LEN;
        snprintf(out[k], NAME_MAX_LEN, "%s%s", prefixed ? m->prefix : "", bare);
    }
    *names = out;
    return ZT_OK;
}

/* The family's mapping, or NULL; sets no message (naming only). */
static const struct hf_mapping *mapping_or_null(const struct param_table *t)
{
    for (size_t k = 0; k < N_MAPPINGS; k++)
        if (strcmp(mappings[k]->family, t->family->name) == 0)
            return mappings[k];
    return NULL;
}

int hf_weights_tensor_name(const struct param_table *t, int k, char *name, size_t n)
{
    const struct hf_mapping *m = mapping_or_null(t);
    const int own = t->lora.r > 0 ? t->lora.n_base_tensors : t->n_tensors;
    if (!m || k < 0 || k >= own)
        return 0;
    char bare[NAME_MAX_LEN];
    int transposed;
    const int prefixed = m->name(t, k, bare, sizeof bare, &transposed);
    snprintf(name, n, "%s%s", prefixed ? m->prefix : "", bare);
    return 1;
}

int hf_weights_block_name(const struct param_table *t, int l, char *name, size_t n)
{
    const struct hf_mapping *m = mapping_or_null(t);
    if (!m)
        return 0;
    snprintf(name, n, "%s%s%d", m->prefix, m->layer, l);
    return 1;
}

const char *const *hf_weights_lora_targets(const char *family)
{
    for (size_t k = 0; k < N_MAPPINGS; k++)
        if (strcmp(mappings[k]->family, family) == 0)
            return mappings[k]->lora_targets;
    return NULL;
}

zt_status hf_weights_transposed(const struct param_table *t, int k, int *transposed)
{
    const struct hf_mapping *m;
    char name[NAME_MAX_LEN];
    ZT_TRY(mapping_of(t, &m));
    m->name(t, k, name, sizeof name, transposed);
    return ZT_OK;
}

/* The Hugging Face shape of tensor p; returns ndim (1 for vectors, 2 for
 * matrices). */
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

/* Of the tensors the mapping stores transposed: the most elements of one
 * (*largest) and the elements of a tile (*tile: TILE_ROWS rows as long
 * as the longest output side of a matrix among them); 0 when none is. */
static void transposed_sizes(const struct hf_mapping *m, const struct param_table *t,
                             size_t *largest, size_t *tile)
{
    size_t longest = 0;
    *largest = 0;
    for (int k = 0; k < t->n_tensors; k++) {
        char name[NAME_MAX_LEN];
        int tr;
        m->name(t, k, name, sizeof name, &tr);
        if (!tr)
            continue;
        const struct param_tensor *p = &t->tensors[k];
        *largest = p->numel > *largest ? p->numel : *largest;
        if (p->cols > 1 && (size_t)p->rows > longest)
            longest = (size_t)p->rows;
    }
    *tile = (size_t)TILE_ROWS * longest;
}

/* ---- export ---- */

/* Streams our [rows, cols] matrix at a to the writer as its transpose,
 * TILE_ROWS rows of the transpose at a time. */
static zt_status write_transposed(struct safetensors_set_writer *w, const float *a, int rows,
                                  int cols, float *tile)
{
    for (int c0 = 0; c0 < cols; c0 += TILE_ROWS) {
        int nc = cols - c0 < TILE_ROWS ? cols - c0 : TILE_ROWS;
        for (int o = 0; o < rows; o++)
            for (int c = 0; c < nc; c++)
                tile[(size_t)c * (size_t)rows + (size_t)o] =
                    a[(size_t)o * (size_t)cols + (size_t)(c0 + c)];
        ZT_TRY(safetensors_set_writer_write_f32(w, tile, (uint64_t)nc * (uint64_t)rows));
    }
    return ZT_OK;
}

static zt_status write_model(struct safetensors_set_writer *w, const struct hf_mapping *m,
                             const struct param_table *t, const float *params, enum zt_dtype dtype,
                             float *tile)
{
    ZT_TRY(safetensors_set_writer_set_metadata(w, "format", "pt"));
    ZT_TRY(safetensors_set_writer_set_metadata(w, "producer", "zerotrain"));
    for (int k = 0; k < t->n_tensors; k++) {
        char name[NAME_MAX_LEN];
        uint64_t shape[2];
        int tr;
        export_name(m, t, k, name, sizeof name, &tr);
        int ndim = hf_shape(&t->tensors[k], tr, shape);
        ZT_TRY(safetensors_set_writer_add(w, name, dtype, ndim, shape));
    }
    ZT_TRY(safetensors_set_writer_begin_data(w));
    for (int k = 0; k < t->n_tensors; k++) {
        const struct param_tensor *p = &t->tensors[k];
        char name[NAME_MAX_LEN];
        int tr;
        m->name(t, k, name, sizeof name, &tr);
        if (tr)
            ZT_TRY(write_transposed(w, params + p->offset, p->rows, p->cols, tile));
        else
            ZT_TRY(safetensors_set_writer_write_f32(w, params + p->offset, (uint64_t)p->numel));
    }
    return ZT_OK;
}

zt_status hf_weights_export(const struct param_table *t, const float *params, enum zt_dtype dtype,
                            const char *path, uint64_t max_shard_bytes, int *n_shards)
{
    const struct hf_mapping *m;
    ZT_TRY(mapping_of(t, &m));
    if (dtype != ZT_F32 && dtype != ZT_F16 && dtype != ZT_BF16)
        return zt_error_set(ZT_ERR_UNSUPPORTED,
                            "%s: cannot export %s as %s: the dtypes are F32, F16 and BF16", path,
                            m->title, safetensors_dtype_name(dtype));
    size_t largest, tn;
    transposed_sizes(m, t, &largest, &tn);
    float *tile = malloc((tn ? tn : 1) * sizeof *tile);
    if (!tile)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the transposition tile", path);
    struct safetensors_set_writer *w = NULL;
    zt_status st = safetensors_set_writer_open(path, max_shard_bytes, &w);
    if (st == ZT_OK) {
        st = write_model(w, m, t, params, dtype, tile);
        int shards = st == ZT_OK ? safetensors_set_writer_shard_count(w) : 0;
        if (st == ZT_OK)
            st = safetensors_set_writer_finish(w);
        else
            safetensors_set_writer_abort(w);
        if (st == ZT_OK && n_shards)
            *n_shards = shards;
    }
    free(tile);
    ZT_TRY(st);
    return ZT_OK;
}

zt_status hf_weights_config_text(const struct param_table *t, enum zt_dtype dtype, char *text,
                                 size_t n, size_t *len_out)
{
    static const struct {
        enum zt_dtype dtype;
        const char *torch;
    } torch_dtypes[] = {{ZT_F32, "float32"}, {ZT_BF16, "bfloat16"}, {ZT_F16, "float16"}};
    const struct hf_mapping *m;
    ZT_TRY(mapping_of(t, &m));
    ZT_ASSERT(n >= HF_WEIGHTS_CONFIG_MAX);
    const char *torch = "float32";
    for (size_t i = 0; i < sizeof torch_dtypes / sizeof torch_dtypes[0]; i++)
        if (torch_dtypes[i].dtype == dtype)
            torch = torch_dtypes[i].torch;
    const char *variant = m->config_variant ? m->config_variant(t) : NULL;
    size_t len = (size_t)snprintf(text, n, "{%s", variant ? variant : m->config_fixed);
    for (const struct hf_config_key *k = m->config_keys; k->hf && len < n; k++) {
        const struct zt_kv *kv = zt_kv_find(&t->shape, k->shape);
        ZT_ASSERT(kv);
        if (k->boolean)
            len += (size_t)snprintf(text + len, n - len, ", \"%s\": %s", k->hf,
                                    kv->i ? "true" : "false");
        else if (kv->is_real)
            len += (size_t)snprintf(text + len, n - len, ", \"%s\": %.10g", k->hf, kv->r);
        else
            len += (size_t)snprintf(text + len, n - len, ", \"%s\": %lld", k->hf, (long long)kv->i);
    }
    if (len < n)
        len += (size_t)snprintf(text + len, n - len, ", \"torch_dtype\": \"%s\"}\n", torch);
    ZT_ASSERT(len < n);
    *len_out = len;
    return ZT_OK;
}

zt_status hf_weights_write_config(const struct param_table *t, enum zt_dtype dtype, const char *dir)
{
    char text[HF_WEIGHTS_CONFIG_MAX], path[4200];
    size_t len;
    ZT_TRY(hf_weights_config_text(t, dtype, text, sizeof text, &len));
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
        return zt_error_set(ZT_ERR_IO, "%s: path too long", dir);
    return atomic_file_write(path, text, len);
}

zt_status hf_weights_write_generation_config(const char *dir, int64_t bos_id, int64_t eos_id)
{
    char text[256], path[4200];
    int len = snprintf(text, sizeof text, "{");
    if (bos_id >= 0)
        len += snprintf(text + len, sizeof text - (size_t)len, "\"bos_token_id\": %lld",
                        (long long)bos_id);
    if (eos_id >= 0)
        len += snprintf(text + len, sizeof text - (size_t)len, "%s\"eos_token_id\": %lld",
                        bos_id >= 0 ? ", " : "", (long long)eos_id);
    len += snprintf(text + len, sizeof text - (size_t)len, "}\n");
    if (snprintf(path, sizeof path, "%s/generation_config.json", dir) >= (int)sizeof path)
        return zt_error_set(ZT_ERR_IO, "%s: path too long", dir);
    return atomic_file_write(path, text, (size_t)len);
}

/* ---- import: the checks ---- */

/* "model.vocab_size 256, model.n_embd 32": the keys behind the dimensions
 * of `want` that `got` does not match (all of them if the ranks differ),
 * each once. */
static const char *keys_text(char *buf, const struct hf_weights_reader *r, int k, int transposed,
                             int ndim, const uint64_t *want, const struct safetensors_tensor *got)
{
    const char *seen[2] = {NULL, NULL};
    int n_seen = 0;
    size_t used = 0;
    buf[0] = '\0';
    for (int d = 0; d < ndim; d++) {
        if (got->ndim == ndim && got->shape[d] == want[d])
            continue;
        int64_t value;
        const char *key = r->m->dim_key(r->t, k, ndim == 2 && transposed ? 1 - d : d, &value);
        if (n_seen > 0 && strcmp(seen[0], key) == 0)
            continue;
        seen[n_seen++] = key;
        used += (size_t)snprintf(buf + used, KEYS_TEXT - used, "%s%s %lld", used ? ", " : "", key,
                                 (long long)value);
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

/* A file tensor's name without the base model's prefix. */
static const char *unprefixed(const struct hf_mapping *m, const char *name)
{
    size_t n = strlen(m->prefix);
    return strncmp(name, m->prefix, n) == 0 ? name + n : name;
}

/* Number of layers the file's names speak of: one more than the largest
 * layer index, prefixed or not. */
static int file_layers(const struct hf_weights_reader *r)
{
    int n = 0;
    for (int i = 0; i < safetensors_set_count(r->set); i++) {
        const char *rest;
        int l = hf_layer_of(unprefixed(r->m, safetensors_set_tensor_at(r->set, i)->name),
                            r->m->layer, &rest);
        if (l >= n)
            n = l + 1;
    }
    return n;
}

/* The file's tensor for our tensor k, under either form; *got NULL if
 * neither is present. */
static zt_status find_tensor(const struct hf_weights_reader *r, int k, int *transposed,
                             const struct safetensors_tensor **got)
{
    char bare[NAME_MAX_LEN], prefixed[NAME_MAX_LEN + 32];
    int takes_prefix = r->m->name(r->t, k, bare, sizeof bare, transposed);
    snprintf(prefixed, sizeof prefixed, "%s%s", r->m->prefix, bare);
    const struct safetensors_tensor *a = safetensors_set_find(r->set, bare);
    const struct safetensors_tensor *b =
        takes_prefix ? safetensors_set_find(r->set, prefixed) : NULL;
    if (a && b)
        return zt_error_set(ZT_ERR_DATA, "%s: %s is present twice, as %s and as %s", r->path, bare,
                            bare, prefixed);
    *got = a ? a : b;
    return ZT_OK;
}

static zt_status missing_error(const struct hf_weights_reader *r, int k, int ndim,
                               const uint64_t *want)
{
    char name[NAME_MAX_LEN], bare[NAME_MAX_LEN], ws[SHAPE_TEXT];
    const char *rest;
    int tr;
    export_name(r->m, r->t, k, name, sizeof name, &tr);
    r->m->name(r->t, k, bare, sizeof bare, &tr);
    int l = hf_layer_of(bare, r->m->layer, &rest), have = file_layers(r);
    if (l >= have)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: tensor %s is missing: the file has %d layer%s but the config says "
                            "model.n_layer %lld",
                            r->path, name, have, have == 1 ? "" : "s",
                            (long long)hf_shape_int(r->t, "n_layer"));
    int64_t value;
    const char *key = r->m->required_by ? r->m->required_by(r->t, k, &value) : NULL;
    if (key)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: tensor %s is missing but the config says %s %lld (expected shape "
                            "%s)",
                            r->path, name, key, (long long)value, shape_text(ws, ndim, want));
    return zt_error_set(ZT_ERR_CONFIG, "%s: tensor %s is missing (expected shape %s)", r->path,
                        name, shape_text(ws, ndim, want));
}

/* Finds and checks our tensor k in the file. */
static zt_status check_tensor(struct hf_weights_reader *r, int k)
{
    const struct param_tensor *p = &r->t->tensors[k];
    const struct safetensors_tensor *got = NULL;
    uint64_t want[2];
    int tr;
    ZT_TRY(find_tensor(r, k, &tr, &got));
    int ndim = hf_shape(p, tr, want);
    if (!got)
        return missing_error(r, k, ndim, want);
    const char *file = safetensors_set_file_of(r->set, got);
    if (!shape_matches(got, ndim, want)) {
        char gs[SHAPE_TEXT], ws[SHAPE_TEXT], keys[KEYS_TEXT];
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: %.200s has shape %s but the config says %s (expected %s)", file,
                            got->name, shape_text(gs, got->ndim, got->shape),
                            keys_text(keys, r, k, tr, ndim, want, got), shape_text(ws, ndim, want));
    }
    if (got->dtype != ZT_F32 && got->dtype != ZT_F16 && got->dtype != ZT_BF16 &&
        got->dtype != ZT_F64)
        return zt_error_set(ZT_ERR_DATA, "%s: %.200s has dtype %s; %s weights must be floats", file,
                            got->name, safetensors_dtype_name(got->dtype), r->m->title);
    r->src[k] = got;
    r->transposed[k] = (unsigned char)tr;
    return ZT_OK;
}

static int is_ours(const struct hf_weights_reader *r, const struct safetensors_tensor *s)
{
    for (int k = 0; k < r->t->n_tensors; k++)
        if (r->src[k] == s)
            return 1;
    return 0;
}

/* Every tensor of the file is one of ours or one the family skips. */
static zt_status check_extras(const struct hf_weights_reader *r)
{
    const int64_t n_layer = hf_shape_int(r->t, "n_layer");
    for (int i = 0; i < safetensors_set_count(r->set); i++) {
        const struct safetensors_tensor *s = safetensors_set_tensor_at(r->set, i);
        const char *name = unprefixed(r->m, s->name), *rest;
        if (is_ours(r, s) || r->m->ignored(r->t, name))
            continue;
        const char *file = safetensors_set_file_of(r->set, s);
        if (hf_layer_of(name, r->m->layer, &rest) >= n_layer)
            return zt_error_set(ZT_ERR_CONFIG,
                                "%s: tensor %.200s is not part of the model: the file has %d "
                                "layers but the config says model.n_layer %lld",
                                file, s->name, file_layers(r), (long long)n_layer);
        return zt_error_set(ZT_ERR_CONFIG, "%s: unexpected tensor %.200s: not a parameter of %s",
                            file, s->name, r->m->title);
    }
    return ZT_OK;
}

static zt_status check_file(struct hf_weights_reader *r)
{
    for (int k = 0; k < r->t->n_tensors; k++)
        ZT_TRY(check_tensor(r, k));
    ZT_TRY(check_extras(r));
    return ZT_OK;
}

static zt_status alloc_buffers(struct hf_weights_reader *r);

zt_status hf_weights_open(const char *path, const struct param_table *t,
                          struct hf_weights_reader **out)
{
    const struct hf_mapping *m;
    *out = NULL;
    ZT_TRY(mapping_of(t, &m));
    struct hf_weights_reader *r = calloc(1, sizeof *r);
    if (r) {
        r->src = calloc((size_t)t->n_tensors, sizeof *r->src);
        r->transposed = calloc((size_t)t->n_tensors, sizeof *r->transposed);
    }
    if (!r || !r->src || !r->transposed) {
        hf_weights_close(r);
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate a %s reader", path, m->title);
    }
    r->m = m;
    r->t = t;
    r->cache_k = -1;
    zt_status st = safetensors_set_open(path, &r->set);
    if (st == ZT_OK) {
        r->path = safetensors_set_path(r->set);
        st = check_file(r);
    }
    if (st == ZT_OK)
        st = alloc_buffers(r);
    if (st != ZT_OK) {
        hf_weights_close(r);
        ZT_TRY(st);
    }
    *out = r;
    return ZT_OK;
}

/* ---- import: reading ---- */

size_t hf_weights_buffer_bytes_of(const struct param_table *t)
{
    const struct hf_mapping *m;
    size_t largest, tn;
    if (mapping_of(t, &m) != ZT_OK)
        return 0;
    transposed_sizes(m, t, &largest, &tn);
    return largest ? (largest + tn) * sizeof(float) : 0;
}

/* Allocates the cache and the tile for the largest transposed tensor, if
 * the mapping has one. */
static zt_status alloc_buffers(struct hf_weights_reader *r)
{
    size_t largest, tn;
    transposed_sizes(r->m, r->t, &largest, &tn);
    if (largest == 0)
        return ZT_OK;
    r->buffer_bytes = (largest + tn) * sizeof(float);
    r->cache = malloc(largest * sizeof *r->cache);
    r->tile = malloc(tn * sizeof *r->tile);
    if (!r->cache || !r->tile) {
        free(r->cache);
        free(r->tile);
        r->cache = r->tile = NULL;
        r->buffer_bytes = 0;
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate %zu floats to transpose tensors",
                            r->path, largest + tn);
    }
    return ZT_OK;
}

void hf_weights_scatter_tile(const float *tile, size_t nc, size_t rows, size_t cols, size_t c0,
                             float *out)
{
    for (size_t o = 0; o < rows; o++)
        for (size_t c = 0; c < nc; c++)
            out[o * cols + c0 + c] = tile[c * rows + o];
}

/* Makes transposed tensor k the cached one, in our [rows, cols] layout:
 * the file holds [cols, rows], read TILE_ROWS rows at a time. */
static zt_status load_transposed(struct hf_weights_reader *r, int k)
{
    if (r->cache_k == k)
        return ZT_OK;
    const struct param_tensor *p = &r->t->tensors[k];
    const size_t rows = (size_t)p->rows, cols = (size_t)p->cols;
    r->cache_k = -1;
    for (size_t c0 = 0; c0 < cols; c0 += TILE_ROWS) {
        size_t nc = cols - c0 < TILE_ROWS ? cols - c0 : TILE_ROWS;
        ZT_TRY(safetensors_set_read_f32(r->set, r->src[k], c0 * rows, nc * rows, r->tile));
        hf_weights_scatter_tile(r->tile, nc, rows, cols, c0, r->cache);
    }
    r->cache_k = k;
    return ZT_OK;
}

zt_status hf_weights_read(struct hf_weights_reader *r, size_t begin, size_t end, float *dst)
{
    const struct param_table *t = r->t;
    if (begin > end || end > t->n_params)
        return zt_error_set(ZT_ERR_USAGE, "%s: cannot read parameters [%zu, %zu) of %zu", r->path,
                            begin, end, t->n_params);
    for (size_t pos = begin; pos < end;) {
        int k;
        size_t lo, hi;
        param_table_piece(t, pos, end, &k, &lo, &hi);
        if (r->transposed[k]) {
            ZT_TRY(load_transposed(r, k));
            memcpy(dst, r->cache + lo, (hi - lo) * sizeof *dst);
        } else {
            ZT_TRY(safetensors_set_read_f32(r->set, r->src[k], lo, hi - lo, dst));
        }
        dst += hi - lo;
        pos += hi - lo;
    }
    return ZT_OK;
}

size_t hf_weights_buffer_bytes(const struct hf_weights_reader *r)
{
    return r->buffer_bytes;
}

void hf_weights_close(struct hf_weights_reader *r)
{
    if (!r)
        return;
    safetensors_set_close(r->set);
    free(r->cache);
    free(r->tile);
    free(r->src);
    free(r->transposed);
    free(r);
}
