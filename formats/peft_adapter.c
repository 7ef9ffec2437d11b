/* formats/peft_adapter.c — see peft_adapter.h. The tensor names come from
 * the family's Hugging Face mapping (hf_weights_module_names), the files
 * from safetensors.h and common/json.h; this file only knows PEFT's names
 * and adapter_config.json. */
#include "peft_adapter.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/atomic_file.h"
#include "../common/fileio.h"
#include "../common/json.h"
#include "hf_weights.h"
#include "safetensors.h"

#define PREFIX           "base_model.model."
#define NAME_LEN         256
#define PATH_LEN         4200
#define SHAPE_TEXT       48
#define CONFIG_MAX_BYTES (1u << 20)
#define CONFIG_MAX_DEPTH 16

struct peft_adapter_reader {
    const struct param_table *t;
    struct safetensors *file;
    char path[PATH_LEN]; /* the weights file, for messages */
    /* per adapter tensor (k - t->lora.n_base_tensors): its tensor in the file */
    const struct safetensors_tensor **src;
};

/* PEFT's name of our adapter tensor k: "base_model.model.<module of the
 * weight it adapts>.lora_A.weight" (or lora_B). */
static void adapter_name(const struct param_table *t, char *const *modules, int k, char *out,
                         size_t n)
{
    const struct param_tensor *p = &t->tensors[k];
    const int is_a = t->tensors[p->adapts].adapter == k;
    snprintf(out, n, PREFIX "%s.%s.weight", modules[p->adapts], is_a ? "lora_A" : "lora_B");
}

static void join(char *out, const char *dir, const char *name)
{
    snprintf(out, PATH_LEN, "%s/%s", dir, name);
}

/* ---- writing ---- */

static zt_status declare_and_write(struct safetensors_writer *w, const struct param_table *t,
                                   char *const *modules, const float *params, enum zt_dtype dtype)
{
    ZT_TRY(safetensors_writer_set_metadata(w, "format", "pt"));
    for (int k = t->lora.n_base_tensors; k < t->n_tensors; k++) {
        char name[NAME_LEN];
        const uint64_t shape[2] = {(uint64_t)t->tensors[k].rows, (uint64_t)t->tensors[k].cols};
        adapter_name(t, modules, k, name, sizeof name);
        ZT_TRY(safetensors_writer_add(w, name, dtype, 2, shape));
    }
    ZT_TRY(safetensors_writer_begin_data(w));
    for (int k = t->lora.n_base_tensors; k < t->n_tensors; k++)
        ZT_TRY(safetensors_writer_write_f32(w, params + t->tensors[k].offset,
                                            (uint64_t)t->tensors[k].numel));
    return ZT_OK;
}

static zt_status write_weights(const char *path, const struct param_table *t, char *const *modules,
                               const float *params, enum zt_dtype dtype)
{
    struct safetensors_writer *w;
    ZT_TRY(safetensors_writer_open(path, &w));
    zt_status st = declare_and_write(w, t, modules, params, dtype);
    if (st == ZT_OK)
        return safetensors_writer_finish(w);
    safetensors_writer_abort(w);
    return st;
}

/* The target_modules adapter_config.json lists: the spec's, but for
 * "all-linear" the last name of each adapted module, once each, which is
 * what PEFT saves for it and what every PEFT version reads. *names is
 * allocated (free it); its strings are the spec's or in `modules`. */
static zt_status listed_targets(const struct param_table *t, char *const *modules,
                                const struct lora_spec *spec, const char ***names, int *n)
{
    const int all = spec->n_targets == 1 && strcmp(spec->targets[0], LORA_ALL_LINEAR) == 0;
    *n = 0;
    *names = malloc((size_t)(all ? t->lora.n_base_tensors : spec->n_targets) * sizeof **names);
    if (!*names)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the target list");
    for (int i = 0; !all && i < spec->n_targets; i++)
        (*names)[(*n)++] = spec->targets[i];
    for (int k = 0; all && k < t->lora.n_base_tensors; k++) {
        if (t->tensors[k].adapter < 0)
            continue;
        const char *leaf = strrchr(modules[k], '.') ? strrchr(modules[k], '.') + 1 : modules[k];
        int seen = 0;
        for (int i = 0; i < *n && !seen; i++)
            seen = strcmp((*names)[i], leaf) == 0;
        if (!seen)
            (*names)[(*n)++] = leaf;
    }
    return ZT_OK;
}

/* lora_alpha as PEFT's int when it is one, else as a float. */
static void put_number(struct json_text *j, double v)
{
    if (v == floor(v) && fabs(v) < 9007199254740992.0)
        json_text_printf(j, "%.0f", v);
    else
        json_text_real(j, v);
}

/* adapter_config.json as PEFT's to_json_string writes it: sorted keys,
 * indent 2. */
static void config_text(struct json_text *j, const struct lora_spec *spec, const char **targets,
                        int n_targets, int fan_in_fan_out, const char *base_model)
{
    json_text_puts(j, "{\n  \"base_model_name_or_path\": ");
    if (base_model)
        json_text_string(j, base_model, JSON_ESCAPE_U);
    else
        json_text_puts(j, "null");
    json_text_printf(j,
                     ",\n  \"bias\": \"none\",\n  \"fan_in_fan_out\": %s,\n"
                     "  \"inference_mode\": true,\n  \"init_lora_weights\": true,\n"
                     "  \"lora_alpha\": ",
                     fan_in_fan_out ? "true" : "false");
    put_number(j, spec->alpha);
    json_text_puts(j, ",\n  \"lora_dropout\": ");
    json_text_real(j, spec->dropout);
    json_text_printf(j,
                     ",\n  \"modules_to_save\": null,\n  \"peft_type\": \"LORA\",\n"
                     "  \"r\": %d,\n  \"target_modules\": [",
                     spec->r);
    for (int i = 0; i < n_targets; i++) {
        json_text_puts(j, i ? ",\n    " : "\n    ");
        json_text_string(j, targets[i], JSON_ESCAPE_U);
    }
    json_text_puts(j, "\n  ],\n  \"task_type\": \"CAUSAL_LM\"\n}\n");
}

/* The weights, then the config that goes with them. */
static zt_status write_folder(const char *weights, const char *config, const struct param_table *t,
                              const float *params, enum zt_dtype dtype,
                              const struct lora_spec *spec, int fan_in_fan_out,
                              const char *base_model)
{
    char **modules;
    const char **targets = NULL;
    int n_targets = 0;
    struct json_text j = {0};
    ZT_TRY(hf_weights_module_names(t, &modules));
    zt_status st = write_weights(weights, t, modules, params, dtype);
    if (st == ZT_OK)
        st = listed_targets(t, modules, spec, &targets, &n_targets);
    if (st == ZT_OK) {
        config_text(&j, spec, targets, n_targets, fan_in_fan_out, base_model);
        st = j.oom ? zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the text", config)
                   : atomic_file_write(config, j.p, j.len);
    }
    free(j.p);
    free(targets);
    free(modules);
    return st;
}

zt_status peft_adapter_write(const char *dir, const struct param_table *t, const float *params,
                             enum zt_dtype dtype, const struct lora_spec *spec,
                             const char *base_model)
{
    char weights[PATH_LEN], config[PATH_LEN];
    int fan_in_fan_out;
    ZT_ASSERT(t->lora.r > 0);
    if (dtype != ZT_F32 && dtype != ZT_F16 && dtype != ZT_BF16)
        return zt_error_set(ZT_ERR_UNSUPPORTED,
                            "%s: cannot write adapters as %s: the dtypes are F32, F16 and BF16",
                            dir, safetensors_dtype_name(dtype));
    ZT_TRY(hf_weights_transposed(t, t->tensors[t->lora.n_base_tensors].adapts, &fan_in_fan_out));
    join(weights, dir, PEFT_ADAPTER_WEIGHTS);
    join(config, dir, PEFT_ADAPTER_CONFIG);
    return write_folder(weights, config, t, params, dtype, spec, fan_in_fan_out, base_model);
}

/* ---- reading: adapter_config.json ---- */

/* Settings of PEFT's LoraConfig that would make another model of the same
 * tensors: a value other than `fine` (or null) is refused. */
static const struct {
    const char *key, *fine, *why;
} settings[] = {
    {"bias", "none", "biases stay frozen: bias none is the only choice"},
    {"use_rslora", "false", "the adapters are scaled by lora_alpha / r"},
    {"use_dora", "false", "DoRA's magnitude vectors are not computed"},
    {"alpha_pattern", "{}", "every module has lora_alpha"},
    {"rank_pattern", "{}", "every module has rank r"},
};

/* A setting's value as text for the comparison above. */
static const char *value_text(const struct json_value *v)
{
    switch (v->type) {
    case JSON_NULL:
        return "null";
    case JSON_BOOL:
        return v->boolean ? "true" : "false";
    case JSON_STRING:
        return v->str;
    case JSON_OBJECT:
        return v->n ? "a non-empty object" : "{}";
    default:
        return json_type_name(v->type);
    }
}

static zt_status check_settings(const char *path, const struct json_value *root)
{
    const struct json_value *v = json_object_get(root, "peft_type", NULL);
    if (v && (v->type != JSON_STRING || strcmp(v->str, "LORA") != 0))
        return zt_error_set(ZT_ERR_CONFIG, "%s: peft_type is %s: not a LoRA adapter", path,
                            value_text(v));
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
        v = json_object_get(root, settings[i].key, NULL);
        if (!v || v->type == JSON_NULL || strcmp(value_text(v), settings[i].fine) == 0)
            continue;
        return zt_error_set(ZT_ERR_UNSUPPORTED, "%s: %s is %s: not supported (%s)", path,
                            settings[i].key, value_text(v), settings[i].why);
    }
    return ZT_OK;
}

/* obj[key] of the given type (REAL takes integers too). */
static zt_status need(const char *path, const struct json_value *obj, const char *key,
                      enum json_type type, const struct json_value **out)
{
    *out = json_object_get(obj, key, NULL);
    if (!*out)
        return zt_error_set(ZT_ERR_CONFIG, "%s: missing key '%s'", path, key);
    if ((*out)->type != type && !(type == JSON_REAL && (*out)->type == JSON_INT))
        return zt_error_set(ZT_ERR_CONFIG, "%s: key '%s' must be %s, not %s", path, key,
                            type == JSON_REAL ? "a number" : json_type_name(type),
                            json_type_name((*out)->type));
    return ZT_OK;
}

/* target_modules: a list of names, or one name (PEFT takes a string as a
 * regular expression; as a name it can only equal ours). *targets points
 * into the tree. */
static zt_status read_targets(const char *path, const struct json_value *root,
                              const char ***targets, int *n)
{
    const struct json_value *v = json_object_get(root, "target_modules", NULL);
    if (v && v->type == JSON_STRING) {
        *targets = malloc(sizeof **targets);
        if (!*targets)
            return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the target list", path);
        (*targets)[0] = v->str;
        *n = 1;
        return ZT_OK;
    }
    ZT_TRY(need(path, root, "target_modules", JSON_ARRAY, &v));
    *targets = malloc((v->n ? v->n : 1) * sizeof **targets);
    if (!*targets)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the target list", path);
    for (size_t i = 0; i < v->n; i++) {
        if (v->items[i].type != JSON_STRING)
            return zt_error_set(ZT_ERR_CONFIG, "%s: target_modules[%zu] must be a string, not %s",
                                path, i, json_type_name(v->items[i].type));
        (*targets)[i] = v->items[i].str;
    }
    *n = (int)v->n;
    return ZT_OK;
}

/* The file's r, lora_alpha and target_modules against `want`. */
/* Whether the file's targets adapt the same modules of t as the config's. */
static zt_status same_modules(const struct param_table *t, const struct lora_spec *got, int *same)
{
    char **modules;
    ZT_TRY(hf_weights_module_names(t, &modules));
    *same = lora_spec_adapts_same(t, got, (const char *const *)modules);
    free(modules);
    return ZT_OK;
}

static zt_status check_spec(const char *path, const struct json_value *root,
                            const struct param_table *t, const struct lora_spec *want)
{
    const struct json_value *r, *alpha;
    ZT_TRY(need(path, root, "r", JSON_INT, &r));
    ZT_TRY(need(path, root, "lora_alpha", JSON_REAL, &alpha));
    struct lora_spec got = {.r = r->negative || r->magnitude > 1u << 30 ? -1 : (int)r->magnitude,
                            .alpha = alpha->real};
    const char **targets = NULL;
    zt_status st = read_targets(path, root, &targets, &got.n_targets);
    got.targets = targets;
    char a[512], b[512];
    const char *key = st == ZT_OK ? lora_spec_diff(&got, want, a, b, sizeof a) : NULL;
    int same = 0;
    if (key && strcmp(key, "target_modules") == 0)
        st = same_modules(t, &got, &same);
    if (key && !same && st == ZT_OK)
        st = zt_error_set(ZT_ERR_CONFIG, "%s: %s is %s, but the config says lora.%s %s", path, key,
                          a, key, b);
    free(targets);
    return st;
}

/* adapter_config.json parsed, an object whose settings zerotrain computes;
 * *root is the caller's to json_free, also on error. */
static zt_status parse_config(const char *path, struct json_value *root)
{
    char *text;
    size_t len;
    const struct json_source src = {path, NULL, ZT_ERR_CONFIG, CONFIG_MAX_DEPTH};
    memset(root, 0, sizeof *root);
    ZT_TRY(zt_read_small_file(path, CONFIG_MAX_BYTES, ZT_ERR_CONFIG, &text, &len));
    zt_status st = json_parse(&src, text, len, root);
    free(text);
    ZT_TRY(st);
    if (root->type != JSON_OBJECT)
        return zt_error_set(ZT_ERR_CONFIG, "%s: the top level must be an object, not %s", path,
                            json_type_name(root->type));
    return check_settings(path, root);
}

static zt_status check_config(const char *path, const struct param_table *t,
                              const struct lora_spec *want)
{
    struct json_value root;
    zt_status st = parse_config(path, &root);
    if (st == ZT_OK)
        st = check_spec(path, &root, t, want);
    json_free(&root);
    return st;
}

/* The spec and base of a parsed adapter_config.json, copied out. */
static zt_status take_config(const char *path, const struct json_value *root,
                             struct peft_adapter_config *out)
{
    const struct json_value *r, *alpha,
        *base = json_object_get(root, "base_model_name_or_path", NULL);
    const struct json_value *dropout = json_object_get(root, "lora_dropout", NULL);
    ZT_TRY(need(path, root, "r", JSON_INT, &r));
    ZT_TRY(need(path, root, "lora_alpha", JSON_REAL, &alpha));
    if (r->negative || r->magnitude == 0 || r->magnitude > 1u << 30)
        return zt_error_set(ZT_ERR_CONFIG, "%s: r must be a whole number from 1 to 2^30", path);
    const char **targets = NULL;
    int n = 0;
    ZT_TRY(read_targets(path, root, &targets, &n));
    out->targets = calloc((size_t)n + 1, sizeof *out->targets);
    out->spec.n_targets = out->targets ? n : 0;
    int failed = !out->targets;
    for (int i = 0; !failed && i < n; i++)
        failed = !(out->targets[i] = strdup(targets[i]));
    free(targets);
    if (!failed && base && base->type == JSON_STRING)
        failed = !(out->base = strdup(base->str));
    if (failed)
        return zt_error_set(ZT_ERR_NOMEM, "%s: out of memory", path);
    out->spec = (struct lora_spec){
        .r = (int)r->magnitude,
        .alpha = alpha->real,
        .dropout = dropout && (dropout->type == JSON_REAL || dropout->type == JSON_INT)
                       ? dropout->real
                       : 0.0,
        .targets = (const char *const *)out->targets,
        .n_targets = n};
    return ZT_OK;
}

zt_status peft_adapter_read_config(const char *dir, struct peft_adapter_config *out)
{
    char path[PATH_LEN];
    struct json_value root;
    memset(out, 0, sizeof *out);
    join(path, dir, PEFT_ADAPTER_CONFIG);
    zt_status st = parse_config(path, &root);
    if (st == ZT_OK)
        st = take_config(path, &root, out);
    json_free(&root);
    if (st != ZT_OK)
        peft_adapter_config_free(out);
    return st;
}

void peft_adapter_config_free(struct peft_adapter_config *c)
{
    for (int i = 0; c->targets && i < c->spec.n_targets; i++)
        free(c->targets[i]);
    free(c->targets);
    free(c->base);
    memset(c, 0, sizeof *c);
}

/* ---- reading: the weights ---- */

static const char *shape_text(char *buf, int ndim, const uint64_t *shape)
{
    size_t at = (size_t)snprintf(buf, SHAPE_TEXT, "[");
    for (int d = 0; d < ndim && at < SHAPE_TEXT; d++)
        at += (size_t)snprintf(buf + at, SHAPE_TEXT - at, "%s%llu", d ? ", " : "",
                               (unsigned long long)shape[d]);
    if (at < SHAPE_TEXT)
        snprintf(buf + at, SHAPE_TEXT - at, "]");
    return buf;
}

/* Our adapter tensor k in the file: present, in its shape, floats. */
static zt_status check_tensor(struct peft_adapter_reader *r, char *const *modules, int k)
{
    const struct param_tensor *p = &r->t->tensors[k];
    const uint64_t want[2] = {(uint64_t)p->rows, (uint64_t)p->cols};
    char name[NAME_LEN], ws[SHAPE_TEXT], gs[SHAPE_TEXT];
    adapter_name(r->t, modules, k, name, sizeof name);
    const struct safetensors_tensor *got = safetensors_find(r->file, name);
    if (!got)
        return zt_error_set(ZT_ERR_CONFIG, "%s: tensor %s is missing (expected shape %s)", r->path,
                            name, shape_text(ws, 2, want));
    if (got->ndim != 2 || got->shape[0] != want[0] || got->shape[1] != want[1])
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s has shape %s, expected %s", r->path, name,
                            shape_text(gs, got->ndim, got->shape), shape_text(ws, 2, want));
    if (got->dtype != ZT_F32 && got->dtype != ZT_F16 && got->dtype != ZT_BF16 &&
        got->dtype != ZT_F64)
        return zt_error_set(ZT_ERR_DATA, "%s: %s has dtype %s; adapters must be floats", r->path,
                            name, safetensors_dtype_name(got->dtype));
    r->src[k - r->t->lora.n_base_tensors] = got;
    return ZT_OK;
}

/* Every tensor of the file is one of our adapters. */
static zt_status check_extras(const struct peft_adapter_reader *r)
{
    const int n = r->t->n_tensors - r->t->lora.n_base_tensors;
    for (int i = 0; i < safetensors_count(r->file); i++) {
        const struct safetensors_tensor *s = safetensors_tensor_at(r->file, i);
        int ours = 0;
        for (int k = 0; k < n && !ours; k++)
            ours = r->src[k] == s;
        if (!ours)
            return zt_error_set(ZT_ERR_CONFIG,
                                "%s: unexpected tensor %.200s: not an adapter of the modules "
                                "lora.target_modules names",
                                r->path, s->name);
    }
    return ZT_OK;
}

static zt_status check_weights(struct peft_adapter_reader *r)
{
    char **modules;
    ZT_TRY(hf_weights_module_names(r->t, &modules));
    zt_status st = ZT_OK;
    for (int k = r->t->lora.n_base_tensors; k < r->t->n_tensors && st == ZT_OK; k++)
        st = check_tensor(r, modules, k);
    free(modules);
    ZT_TRY(st);
    return check_extras(r);
}

/* Both files are there; else what the folder is not. */
static zt_status check_folder(const char *dir, const char *config, const char *weights)
{
    struct stat sb;
    char bin[PATH_LEN];
    if (stat(dir, &sb) != 0)
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s", dir,
                            errno == ENOENT ? "no such folder" : strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: not a folder: expected a PEFT adapter folder (" PEFT_ADAPTER_CONFIG
                            " and " PEFT_ADAPTER_WEIGHTS ")",
                            dir);
    if (stat(config, &sb) != 0)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: no " PEFT_ADAPTER_CONFIG " in it: not a PEFT adapter folder", dir);
    join(bin, dir, "adapter_model.bin");
    if (stat(weights, &sb) != 0)
        return zt_error_set(ZT_ERR_CONFIG, "%s: no " PEFT_ADAPTER_WEIGHTS " in it%s", dir,
                            stat(bin, &sb) == 0
                                ? " (adapter_model.bin, PyTorch's pickle, is not read: save the "
                                  "adapter with safe_serialization=True)"
                                : "");
    return ZT_OK;
}

zt_status peft_adapter_open(const char *dir, const struct param_table *t,
                            const struct lora_spec *want, struct peft_adapter_reader **out)
{
    char config[PATH_LEN];
    *out = NULL;
    ZT_ASSERT(t->lora.r > 0);
    struct peft_adapter_reader *r = calloc(1, sizeof *r);
    if (r)
        r->src = calloc((size_t)(t->n_tensors - t->lora.n_base_tensors), sizeof *r->src);
    if (!r || !r->src) {
        peft_adapter_close(r);
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate an adapter reader", dir);
    }
    r->t = t;
    join(config, dir, PEFT_ADAPTER_CONFIG);
    join(r->path, dir, PEFT_ADAPTER_WEIGHTS);
    zt_status st = check_folder(dir, config, r->path);
    if (st == ZT_OK)
        st = check_config(config, t, want);
    if (st == ZT_OK)
        st = safetensors_open(r->path, &r->file);
    if (st == ZT_OK)
        st = check_weights(r);
    if (st != ZT_OK) {
        peft_adapter_close(r);
        return st;
    }
    *out = r;
    return ZT_OK;
}

zt_status peft_adapter_read(struct peft_adapter_reader *r, size_t begin, size_t end, float *dst)
{
    const struct param_table *t = r->t;
    if (begin < t->lora.n_base_params || begin > end || end > t->n_params)
        return zt_error_set(ZT_ERR_USAGE,
                            "%s: elements [%zu, %zu) are not all adapters' (%zu .. %zu)", r->path,
                            begin, end, t->lora.n_base_params, t->n_params);
    for (size_t pos = begin; pos < end;) {
        int k;
        size_t lo, hi;
        param_table_piece(t, pos, end, &k, &lo, &hi);
        ZT_TRY(safetensors_read_f32(r->file, r->src[k - t->lora.n_base_tensors], lo, hi - lo, dst));
        dst += hi - lo;
        pos += hi - lo;
    }
    return ZT_OK;
}

void peft_adapter_close(struct peft_adapter_reader *r)
{
    if (!r)
        return;
    safetensors_close(r->file);
    free(r->src);
    free(r);
}
