/* formats/checkpoint_meta.c — meta.json, the description of one
 * checkpoint: what was trained (model shape, precision, the resolved
 * config), where training stood (step, sampler position, loss scaler,
 * optimizer steps), how the state was partitioned (units and per-rank
 * shard sizes) and which shard files make it up (size and checksum each).
 *
 * It is JSON because people read it: `cat meta.json` answers "what is in
 * this checkpoint" without a tool. The scalar fields are one table read by
 * both directions, each with the range the reader accepts; the writer
 * refuses a value the reader would refuse, so every file written reads
 * back. The reader is strict (each key present once, with its type and
 * range) because a checkpoint resumed with a silently defaulted field
 * trains something else; keys it does not know are ignored, so a later
 * version can add fields without breaking this one. format_version is read
 * first, so that a newer file is reported as newer rather than as broken.
 */
#include "checkpoint.h"
#include "checkpoint_impl.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/json.h"

/* meta.json is flat but for two lists of objects: 32 levels leave room for
 * later fields and still bound the parser's recursion. */
#define META_MAX_DEPTH 32

enum kind { K_INT, K_I64, K_U64, K_F64 };

static const struct field {
    const char *key;
    enum kind kind;
    size_t off;
    int64_t min, max; /* K_INT and K_I64 */
} fields[] = {
    {"step", K_I64, offsetof(struct ckpt_meta, step), 0, INT64_MAX},
    {"world", K_INT, offsetof(struct ckpt_meta, world), 1, INT_MAX},
    {"stage", K_INT, offsetof(struct ckpt_meta, stage), 0, 3},
    {"n_params", K_U64, offsetof(struct ckpt_meta, n_params), 0, 0},
    {"seed", K_U64, offsetof(struct ckpt_meta, seed), 0, 0},
    {"samples_seen", K_U64, offsetof(struct ckpt_meta, samples_seen), 0, 0},
    {"loss_scale", K_F64, offsetof(struct ckpt_meta, loss_scale), 0, 0},
    {"scaler_good_steps", K_I64, offsetof(struct ckpt_meta, scaler_good_steps), INT64_MIN,
     INT64_MAX},
    {"scaler_hysteresis", K_INT, offsetof(struct ckpt_meta, scaler_hysteresis), INT_MIN, INT_MAX},
    {"optimizer_steps", K_I64, offsetof(struct ckpt_meta, optimizer_steps), 0, INT64_MAX},
};
#define N_FIELDS (sizeof fields / sizeof fields[0])

/* The GPT-2 shape keys of version 1, which read as "model": {"family":
 * "gpt2", ...} with these entries in this order. */
static const char *const v1_shape_keys[] = {"vocab_size", "block_size", "n_layer", "n_head",
                                            "n_embd"};
#define N_V1_SHAPE_KEYS (sizeof v1_shape_keys / sizeof v1_shape_keys[0])

/* The key that names a described object's kind. */
#define MODEL_KIND_KEY     "family"
#define OPTIMIZER_KIND_KEY "type"

/* ---- writing ---- */

static int64_t field_int(const struct ckpt_meta *m, const struct field *f)
{
    const char *p = (const char *)m + f->off;
    if (f->kind == K_INT) {
        int v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    int64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* A non-empty NUL-terminated UTF-8 text within n bytes. */
static int text_ok(const char *s, size_t n)
{
    const char *end = memchr(s, '\0', n);
    return end && end > s && json_utf8_check(s, (size_t)(end - s)) == (size_t)(end - s);
}

static zt_status check_lora_writable(const char *path, const struct ckpt_lora *l)
{
    if (l->r == 0)
        return ZT_OK;
    int ok = l->r > 0 && isfinite(l->alpha) && isfinite(l->dropout) && l->n_targets >= 1 &&
             l->targets && text_ok(l->bias, sizeof l->bias);
    for (int i = 0; ok && i < l->n_targets; i++)
        ok = l->targets[i] && text_ok(l->targets[i], strlen(l->targets[i]) + 1);
    if (!ok)
        return zt_error_set(ZT_ERR_USAGE, "%s: the lora description is incomplete", path);
    return ZT_OK;
}

/* The layout a writer left zeroed is the data-parallel one. */
static struct ckpt_layout layout_of(const struct ckpt_meta *m)
{
    if (m->layout.tp == 0 && m->layout.pp == 0 && m->layout.dp == 0)
        return (struct ckpt_layout){1, 1, m->world, m->layout.vocab_padded};
    return m->layout;
}

/* Whether the slices are the units themselves: one tensor-parallel rank,
 * no padding. */
static int layout_unsliced(const struct ckpt_meta *m)
{
    return layout_of(m).tp == 1 && m->layout.vocab_padded == 0;
}

static int layout_is_data_only(const struct ckpt_meta *m)
{
    const struct ckpt_layout l = layout_of(m);
    return l.pp == 1 && layout_unsliced(m);
}

/* The grid must hold exactly the writing ranks, and every unit a stage of
 * it: `err` is the writer's ZT_ERR_USAGE or the reader's
 * ZT_ERR_CHECKPOINT. */
static zt_status check_layout(const char *path, zt_status err, const struct ckpt_meta *m)
{
    const struct ckpt_layout l = layout_of(m);
    if (l.tp < 1 || l.pp < 1 || l.dp < 1 || (int64_t)l.tp * l.pp * l.dp != m->world)
        return zt_error_set(err, "%s: layout tp %d x pp %d x dp %d is not the %d ranks of 'world'",
                            path, l.tp, l.pp, l.dp, m->world);
    if (l.vocab_padded < 0 || l.vocab_padded > INT32_MAX || l.vocab_padded % l.tp != 0)
        return zt_error_set(err,
                            "%s: layout.vocab_padded %lld is not a multiple of tp %d in "
                            "0 .. 2^31 - 1",
                            path, (long long)l.vocab_padded, l.tp);
    for (int u = 0; m->unit_stage && u < m->n_units; u++)
        if (m->unit_stage[u] < 0 || m->unit_stage[u] >= l.pp)
            return zt_error_set(err, "%s: units[%d].pipeline_stage is %d, outside 0 .. %d", path, u,
                                m->unit_stage[u], l.pp - 1);
    return ZT_OK;
}

/* What the reader would refuse in m, as ZT_ERR_USAGE. */
static zt_status check_writable(const char *path, const struct ckpt_meta *m)
{
    for (size_t k = 0; k < N_FIELDS; k++) {
        const struct field *f = &fields[k];
        if (f->kind == K_F64) {
            double v;
            memcpy(&v, (const char *)m + f->off, sizeof v);
            if (!isfinite(v))
                return zt_error_set(ZT_ERR_USAGE, "%s: %s must be finite", path, f->key);
        }
        if (f->kind != K_INT && f->kind != K_I64)
            continue;
        int64_t v = field_int(m, f);
        if (v < f->min || v > f->max)
            return zt_error_set(ZT_ERR_USAGE, "%s: %s is %lld, must be in %lld .. %lld", path,
                                f->key, (long long)v, (long long)f->min, (long long)f->max);
    }
    if (!memchr(m->precision, '\0', sizeof m->precision) ||
        !zt_precision_from_name(m->precision, NULL))
        return zt_error_set(ZT_ERR_USAGE, "%s: precision '%.16s' is not fp32, bf16 or fp16", path,
                            m->precision);
    if (m->n_units < 0 || (m->n_units > 0 && (!m->unit_numel || !m->unit_shard)))
        return zt_error_set(ZT_ERR_USAGE, "%s: %d units without their arrays", path, m->n_units);
    if (!m->files)
        return zt_error_set(ZT_ERR_USAGE, "%s: the shard file list is missing", path);
    ZT_TRY(check_layout(path, ZT_ERR_USAGE, m));
    const struct zt_kvlist *described[2] = {&m->model, &m->optimizer};
    for (int k = 0; k < 2; k++) {
        const struct zt_kvlist *l = described[k];
        if (!l->kind[0] || l->n < 0 || l->n > ZT_KV_MAX)
            return zt_error_set(ZT_ERR_USAGE, "%s: the %s description is missing", path,
                                k ? "optimizer" : "model");
        for (int i = 0; i < l->n; i++)
            if (l->items[i].is_real && !isfinite(l->items[i].r))
                return zt_error_set(ZT_ERR_USAGE, "%s: %s.%s must be finite", path,
                                    k ? "optimizer" : "model", l->items[i].name);
    }
    ZT_TRY(check_lora_writable(path, &m->lora));
    if (m->base.kind == CKPT_BASE_FILE && !text_ok(m->base.path, sizeof m->base.path))
        return zt_error_set(ZT_ERR_USAGE, "%s: the base path is empty or not UTF-8", path);
    if (!m->config_yaml)
        return zt_error_set(ZT_ERR_USAGE, "%s: the config text is missing", path);
    size_t len = strlen(m->config_yaml), bad = json_utf8_check(m->config_yaml, len);
    if (bad != len)
        return zt_error_set(ZT_ERR_USAGE, "%s: the config text is not valid UTF-8 at byte %zu",
                            path, bad);
    return ZT_OK;
}

static void add_fields(struct json_text *t, const struct ckpt_meta *m)
{
    for (size_t k = 0; k < N_FIELDS; k++) {
        const struct field *f = &fields[k];
        const char *p = (const char *)m + f->off;
        json_text_printf(t, "  \"%s\": ", f->key);
        if (f->kind == K_U64) {
            uint64_t v;
            memcpy(&v, p, sizeof v);
            json_text_printf(t, "%llu,\n", (unsigned long long)v);
        } else if (f->kind == K_F64) {
            double v;
            memcpy(&v, p, sizeof v);
            json_text_printf(t, "%.17g,\n", v);
        } else {
            json_text_printf(t, "%lld,\n", (long long)field_int(m, f));
        }
    }
}

/* A described object on one line: {"KIND_KEY": "kind", "name": value, ...}. */
static void add_kvlist(struct json_text *t, const char *key, const char *kind_key,
                       const struct zt_kvlist *l)
{
    json_text_printf(t, "  \"%s\": {\"%s\": ", key, kind_key);
    json_text_string(t, l->kind, JSON_ESCAPE_SHORT);
    for (int k = 0; k < l->n; k++) {
        const struct zt_kv *kv = &l->items[k];
        json_text_printf(t, ", ");
        json_text_string(t, kv->name, JSON_ESCAPE_SHORT);
        /* a real that prints as an integer (rope_theta 10000) gets ".0", so
         * that it reads back as a real and a resume's shape compares equal */
        json_text_printf(t, ": ");
        if (kv->is_real)
            json_text_real(t, kv->r);
        else
            json_text_printf(t, "%lld", (long long)kv->i);
    }
    json_text_printf(t, "},\n");
}

/* ", \"pipeline_stage\": P" for unit u, and its ", \"slice_numel\": N"
 * when the tensor-parallel ranks cut it, in buf. */
static const char *layout_text(const struct ckpt_meta *m, int u, char *buf, size_t n)
{
    int len = snprintf(buf, n, ", \"pipeline_stage\": %d", m->unit_stage ? m->unit_stage[u] : 0);
    if (!layout_unsliced(m) && len >= 0 && (size_t)len < n)
        snprintf(buf + len, n - (size_t)len, ", \"slice_numel\": %llu",
                 (unsigned long long)(m->unit_slice ? m->unit_slice[u] : m->unit_numel[u]));
    return buf;
}

static void add_lists(struct json_text *t, const struct ckpt_meta *m)
{
    char stage[96];
    json_text_printf(t, "  \"units\": [");
    for (int u = 0; u < m->n_units; u++)
        json_text_printf(t, "%s\n    {\"numel\": %llu, \"shard\": %llu%s%s%s}", u ? "," : "",
                         (unsigned long long)m->unit_numel[u], (unsigned long long)m->unit_shard[u],
                         layout_is_data_only(m) ? "" : layout_text(m, u, stage, sizeof stage),
                         m->unit_frozen && m->unit_frozen[u] ? ", \"frozen\": true" : "",
                         m->unit_frozen && m->unit_frozen[u] == CKPT_UNIT_NOT_STORED
                             ? ", \"stored\": false"
                             : "");
    json_text_printf(t, "%s],\n  \"files\": [", m->n_units ? "\n  " : "");
    for (int r = 0; r < m->world; r++)
        json_text_printf(
            t,
            "%s\n    {\"name\": \"rank-%05d.bin\", \"bytes\": %llu, \"checksum\": \"0x%016llx\"}",
            r ? "," : "", r, (unsigned long long)m->files[r].bytes,
            (unsigned long long)m->files[r].checksum);
    json_text_printf(t, "\n  ],\n");
}

/* "lora": {...} on one line, when there are adapters. */
static void add_lora(struct json_text *t, const struct ckpt_lora *l)
{
    if (l->r == 0)
        return;
    json_text_printf(t, "  \"lora\": {\"r\": %d, \"lora_alpha\": ", l->r);
    json_text_real(t, l->alpha);
    json_text_printf(t, ", \"lora_dropout\": ");
    json_text_real(t, l->dropout);
    json_text_printf(t, ", \"bias\": ");
    json_text_string(t, l->bias, JSON_ESCAPE_SHORT);
    json_text_printf(t, ", \"target_modules\": [");
    for (int i = 0; i < l->n_targets; i++) {
        json_text_printf(t, "%s", i ? ", " : "");
        json_text_string(t, l->targets[i], JSON_ESCAPE_SHORT);
    }
    json_text_printf(t, "]},\n");
}

/* "quantization": {...} on one line, with a 4-bit base. */
static void add_quant(struct json_text *t, const struct ckpt_quant *q)
{
    if (!q->load_in_4bit)
        return;
    json_text_printf(t, "  \"quantization\": {\"load_in_4bit\": true, \"bnb_4bit_quant_type\": ");
    json_text_string(t, q->quant_type, JSON_ESCAPE_SHORT);
    json_text_printf(t, ", \"bnb_4bit_use_double_quant\": %s, \"bnb_4bit_compute_dtype\": ",
                     q->double_quant ? "true" : "false");
    json_text_string(t, q->compute_dtype, JSON_ESCAPE_SHORT);
    json_text_printf(t, "},\n");
}

/* "layout": {...} on one line, beyond data parallelism (format 4). */
static void add_layout(struct json_text *t, const struct ckpt_meta *m)
{
    const struct ckpt_layout l = layout_of(m);
    if (layout_is_data_only(m))
        return;
    json_text_printf(t, "  \"layout\": {\"tp\": %d, \"pp\": %d, \"dp\": %d", l.tp, l.pp, l.dp);
    if (l.vocab_padded > 0)
        json_text_printf(t, ", \"vocab_padded\": %lld", (long long)l.vocab_padded);
    json_text_printf(t, "},\n");
}

/* "base": {...} on one line, when the frozen units are kept elsewhere. */
static void add_base(struct json_text *t, const struct ckpt_base *b)
{
    if (b->kind == CKPT_BASE_SEED) {
        json_text_printf(t, "  \"base\": {\"init\": \"seed\", \"seed\": %llu},\n",
                         (unsigned long long)b->seed);
    } else if (b->kind == CKPT_BASE_FILE) {
        json_text_printf(t, "  \"base\": {\"path\": ");
        json_text_string(t, b->path, JSON_ESCAPE_SHORT);
        json_text_printf(t, ", \"checksum\": \"0x%016llx\", \"bytes\": %llu},\n",
                         (unsigned long long)b->checksum, (unsigned long long)b->bytes);
    }
}

zt_status ckpt_meta_write(const char *path, const struct ckpt_meta *m)
{
    ZT_TRY(check_writable(path, m));
    struct json_text t = {0};
    /* Formats 3 and 4 only where they are needed, so that older readers
     * keep reading every data-parallel checkpoint that holds all its units. */
    json_text_printf(&t, "{\n  \"format_version\": %u,\n",
                     !layout_is_data_only(m)            ? CKPT_FORMAT_VERSION
                     : m->base.kind == CKPT_BASE_STORED ? 2u
                                                        : 3u);
    add_fields(&t, m);
    add_layout(&t, m);
    add_kvlist(&t, "model", MODEL_KIND_KEY, &m->model);
    add_kvlist(&t, "optimizer", OPTIMIZER_KIND_KEY, &m->optimizer);
    add_lora(&t, &m->lora);
    add_quant(&t, &m->quant);
    add_base(&t, &m->base);
    json_text_printf(&t, "  \"precision\": ");
    json_text_string(&t, m->precision, JSON_ESCAPE_SHORT);
    json_text_printf(&t, ",\n");
    if (m->gemm[0]) {
        json_text_printf(&t, "  \"gemm\": ");
        json_text_string(&t, m->gemm, JSON_ESCAPE_SHORT);
        json_text_printf(&t, ",\n");
    }
    add_lists(&t, m);
    json_text_printf(&t, "  \"config_yaml\": ");
    json_text_string(&t, m->config_yaml, JSON_ESCAPE_SHORT);
    json_text_printf(&t, "\n}\n");
    zt_status st = t.oom ? zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the text", path)
                         : atomic_file_write(path, t.p, t.len);
    free(t.p);
    return st;
}

/* ---- reading ---- */

/* The value of obj[key], which must be there with the given type. `where`
 * is the key's full name for messages ("files[2].bytes"). */
static zt_status need(const char *path, const struct json_value *obj, const char *key,
                      const char *where, enum json_type type, const struct json_value **out)
{
    size_t count;
    *out = json_object_get(obj, key, &count);
    if (count > 1)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: duplicate key '%s'", path, where);
    if (!*out)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: missing key '%s'", path, where);
    if ((*out)->type != type && !(type == JSON_REAL && (*out)->type == JSON_INT))
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: key '%s' must be %s, not %s", path, where,
                            type == JSON_REAL ? "a number" : json_type_name(type),
                            json_type_name((*out)->type));
    return ZT_OK;
}

static zt_status need_i64(const char *path, const struct json_value *obj, const char *key,
                          const char *where, int64_t min, int64_t max, int64_t *out)
{
    const struct json_value *v;
    ZT_TRY(need(path, obj, key, where, JSON_INT, &v));
    int in_range = v->negative || v->magnitude <= (uint64_t)INT64_MAX;
    if (v->negative) /* magnitude <= 2^63: the parser guarantees it */
        *out = v->magnitude == (uint64_t)1 << 63 ? INT64_MIN : -(int64_t)v->magnitude;
    else
        *out = in_range ? (int64_t)v->magnitude : 0;
    in_range = in_range && *out >= min && *out <= max;
    if (!in_range)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: key '%s' is %s%llu, must be in %lld .. %lld",
                            path, where, v->negative ? "-" : "", (unsigned long long)v->magnitude,
                            (long long)min, (long long)max);
    return ZT_OK;
}

static zt_status need_u64(const char *path, const struct json_value *obj, const char *key,
                          const char *where, uint64_t *out)
{
    const struct json_value *v;
    ZT_TRY(need(path, obj, key, where, JSON_INT, &v));
    if (v->negative)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: key '%s' must not be negative", path, where);
    *out = v->magnitude;
    return ZT_OK;
}

/* "0x" and 16 hex digits. */
static zt_status need_hex64(const char *path, const struct json_value *obj, const char *key,
                            const char *where, uint64_t *out)
{
    const struct json_value *v;
    ZT_TRY(need(path, obj, key, where, JSON_STRING, &v));
    const char *s = v->str;
    int ok = strlen(s) == 18 && s[0] == '0' && s[1] == 'x';
    uint64_t x = 0;
    for (int k = 2; ok && k < 18; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        ok = d >= 0;
        x = x << 4 | (uint64_t)(d & 15);
    }
    if (!ok)
        return zt_error_set(ZT_ERR_CHECKPOINT,
                            "%s: key '%s' must be \"0x\" and 16 lowercase hex digits", path, where);
    *out = x;
    return ZT_OK;
}

static zt_status read_field(const char *path, const struct json_value *root, const struct field *f,
                            struct ckpt_meta *m)
{
    char *p = (char *)m + f->off;
    if (f->kind == K_U64) {
        uint64_t v;
        ZT_TRY(need_u64(path, root, f->key, f->key, &v));
        memcpy(p, &v, sizeof v);
    } else if (f->kind == K_F64) {
        const struct json_value *v;
        ZT_TRY(need(path, root, f->key, f->key, JSON_REAL, &v));
        memcpy(p, &v->real, sizeof v->real);
    } else {
        int64_t v;
        ZT_TRY(need_i64(path, root, f->key, f->key, f->min, f->max, &v));
        if (f->kind == K_INT) {
            int i = (int)v;
            memcpy(p, &i, sizeof i);
        } else {
            memcpy(p, &v, sizeof v);
        }
    }
    return ZT_OK;
}

static zt_status read_version(const char *path, const struct json_value *root, struct ckpt_meta *m)
{
    int64_t v;
    ZT_TRY(need_i64(path, root, "format_version", "format_version", 0, UINT32_MAX, &v));
    if (v > CKPT_FORMAT_VERSION)
        return zt_error_set(ZT_ERR_CHECKPOINT,
                            "%s: format version %lld is newer than this zerotrain understands (%u)",
                            path, (long long)v, CKPT_FORMAT_VERSION);
    if (v < 1)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: format version %lld is not valid", path,
                            (long long)v);
    m->format_version = (uint32_t)v;
    return ZT_OK;
}

static zt_status read_strings(const char *path, const struct json_value *root, struct ckpt_meta *m)
{
    const struct json_value *v;
    ZT_TRY(need(path, root, "precision", "precision", JSON_STRING, &v));
    if (!zt_precision_from_name(v->str, NULL))
        return zt_error_set(ZT_ERR_CHECKPOINT,
                            "%s: key 'precision' is '%s', expected fp32, bf16 or fp16", path,
                            v->str);
    strcpy(m->precision, v->str);
    if ((v = json_object_get(root, "gemm", NULL))) { /* a record only: any text, cut to fit */
        if (v->type != JSON_STRING)
            return zt_error_set(ZT_ERR_CHECKPOINT, "%s: key 'gemm' must be a string", path);
        snprintf(m->gemm, sizeof m->gemm, "%s", v->str);
    }
    ZT_TRY(need(path, root, "config_yaml", "config_yaml", JSON_STRING, &v));
    size_t len = strlen(v->str);
    if (!(m->config_yaml = malloc(len + 1)))
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the config text", path);
    memcpy(m->config_yaml, v->str, len + 1);
    return ZT_OK;
}

/* An array of objects; *out is it, with at most `max` entries. */
static zt_status need_list(const char *path, const struct json_value *root, const char *key,
                           size_t max, const struct json_value **out)
{
    ZT_TRY(need(path, root, key, key, JSON_ARRAY, out));
    if ((*out)->n > max)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: key '%s' has %zu entries, more than %zu", path,
                            key, (*out)->n, max);
    for (size_t k = 0; k < (*out)->n; k++)
        if ((*out)->items[k].type != JSON_OBJECT)
            return zt_error_set(ZT_ERR_CHECKPOINT, "%s: key '%s[%zu]' must be an object, not %s",
                                path, key, k, json_type_name((*out)->items[k].type));
    return ZT_OK;
}

/* Unit u's slice: units[u].slice_numel when tensor-parallel ranks cut
 * it, else the whole unit. */
static zt_status read_unit_slice(const char *path, const struct json_value *unit, size_t u,
                                 struct ckpt_meta *m)
{
    char where[64];
    m->unit_slice[u] = m->unit_numel[u];
    snprintf(where, sizeof where, "units[%zu].slice_numel", u);
    if (!layout_unsliced(m))
        ZT_TRY(need_u64(path, unit, "slice_numel", where, &m->unit_slice[u]));
    if (m->unit_slice[u] > m->unit_numel[u] && m->layout.vocab_padded == 0) /* padding adds */
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: %s is %llu, more than the unit's %llu", path,
                            where, (unsigned long long)m->unit_slice[u],
                            (unsigned long long)m->unit_numel[u]);
    return ZT_OK;
}

static zt_status read_units(const char *path, const struct json_value *root, struct ckpt_meta *m)
{
    const struct json_value *list;
    ZT_TRY(need_list(path, root, "units", INT_MAX, &list));
    size_t n = list->n;
    m->unit_numel = malloc((n ? n : 1) * sizeof *m->unit_numel);
    m->unit_slice = malloc((n ? n : 1) * sizeof *m->unit_slice);
    m->unit_shard = malloc((n ? n : 1) * sizeof *m->unit_shard);
    m->unit_frozen = calloc(n ? n : 1, sizeof *m->unit_frozen);
    m->unit_stage = calloc(n ? n : 1, sizeof *m->unit_stage);
    if (!m->unit_numel || !m->unit_slice || !m->unit_shard || !m->unit_frozen || !m->unit_stage)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate %zu units", path, n);
    m->n_units = (int)n;
    for (size_t u = 0; u < n; u++) {
        char where[64];
        snprintf(where, sizeof where, "units[%zu].numel", u);
        ZT_TRY(need_u64(path, &list->items[u], "numel", where, &m->unit_numel[u]));
        snprintf(where, sizeof where, "units[%zu].shard", u);
        ZT_TRY(need_u64(path, &list->items[u], "shard", where, &m->unit_shard[u]));
        snprintf(where, sizeof where, "units[%zu].pipeline_stage", u);
        if (!layout_is_data_only(m)) {
            int64_t stage;
            ZT_TRY(need_i64(path, &list->items[u], "pipeline_stage", where, 0, m->layout.pp - 1,
                            &stage));
            m->unit_stage[u] = (int)stage;
        }
        ZT_TRY(read_unit_slice(path, &list->items[u], u, m));
        snprintf(where, sizeof where, "units[%zu].frozen", u);
        if (json_object_get(&list->items[u], "frozen", NULL)) {
            const struct json_value *v;
            ZT_TRY(need(path, &list->items[u], "frozen", where, JSON_BOOL, &v));
            m->unit_frozen[u] = (unsigned char)(v->boolean != 0);
        }
        snprintf(where, sizeof where, "units[%zu].stored", u);
        if (m->unit_frozen[u] && json_object_get(&list->items[u], "stored", NULL)) {
            const struct json_value *v;
            ZT_TRY(need(path, &list->items[u], "stored", where, JSON_BOOL, &v));
            if (!v->boolean)
                m->unit_frozen[u] = CKPT_UNIT_NOT_STORED;
        }
    }
    return ZT_OK;
}

/* One files[] entry: its name must be rank r's. */
static zt_status read_file_entry(const char *path, const struct json_value *e, int r,
                                 struct ckpt_file *f)
{
    char where[64], name[32];
    const struct json_value *v;
    snprintf(where, sizeof where, "files[%d].name", r);
    snprintf(name, sizeof name, "rank-%05d.bin", r);
    ZT_TRY(need(path, e, "name", where, JSON_STRING, &v));
    if (strcmp(v->str, name) != 0)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: key '%s' is '%s', expected '%s'", path, where,
                            v->str, name);
    snprintf(where, sizeof where, "files[%d].bytes", r);
    ZT_TRY(need_u64(path, e, "bytes", where, &f->bytes));
    snprintf(where, sizeof where, "files[%d].checksum", r);
    return need_hex64(path, e, "checksum", where, &f->checksum);
}

static zt_status read_files(const char *path, const struct json_value *root, struct ckpt_meta *m)
{
    const struct json_value *list;
    ZT_TRY(need_list(path, root, "files", INT_MAX, &list));
    if (list->n != (size_t)m->world)
        return zt_error_set(ZT_ERR_CHECKPOINT,
                            "%s: key 'files' lists %zu shard files, but world is %d", path, list->n,
                            m->world);
    if (!(m->files = malloc(list->n * sizeof *m->files)))
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate %zu file entries", path, list->n);
    for (int r = 0; r < m->world; r++)
        ZT_TRY(read_file_entry(path, &list->items[r], r, &m->files[r]));
    return ZT_OK;
}

/* One described object: a string under kind_key and numbers under every
 * other key, at most ZT_KV_MAX of them, names unique and short. */
static zt_status read_kvlist(const char *path, const struct json_value *root, const char *key,
                             const char *kind_key, struct zt_kvlist *out)
{
    const struct json_value *obj, *kind;
    char where[96];
    ZT_TRY(need(path, root, key, key, JSON_OBJECT, &obj));
    snprintf(where, sizeof where, "%s.%s", key, kind_key);
    ZT_TRY(need(path, obj, kind_key, where, JSON_STRING, &kind));
    if (!kind->str[0] || strlen(kind->str) >= ZT_KV_NAME_MAX)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: key '%s' must be 1 to %d bytes", path, where,
                            ZT_KV_NAME_MAX - 1);
    zt_kv_init(out, kind->str);
    for (size_t k = 0; k < obj->n; k++) {
        const char *name = obj->keys[k];
        const struct json_value *v = &obj->items[k];
        if (strcmp(name, kind_key) == 0)
            continue;
        snprintf(where, sizeof where, "%s.%.40s", key, name);
        if (strlen(name) >= ZT_KV_NAME_MAX || !name[0] || zt_kv_find(out, name) ||
            out->n == ZT_KV_MAX)
            return zt_error_set(ZT_ERR_CHECKPOINT,
                                "%s: key '%s' is repeated, too long or one too many (at most %d)",
                                path, where, ZT_KV_MAX);
        if (v->type == JSON_INT) {
            int64_t i;
            ZT_TRY(need_i64(path, obj, name, where, INT64_MIN, INT64_MAX, &i));
            zt_kv_add_int(out, name, i);
        } else if (v->type == JSON_REAL) {
            zt_kv_add_real(out, name, v->real);
        } else {
            return zt_error_set(ZT_ERR_CHECKPOINT, "%s: key '%s' must be a number, not %s", path,
                                where, json_type_name(v->type));
        }
    }
    return ZT_OK;
}

/* Version 1: the GPT-2 shape from its flat keys; AdamW, hyperparameters
 * not recorded. */
static zt_status read_v1_descriptions(const char *path, const struct json_value *root,
                                      struct ckpt_meta *m)
{
    zt_kv_init(&m->model, "gpt2");
    for (size_t k = 0; k < N_V1_SHAPE_KEYS; k++) {
        int64_t v;
        ZT_TRY(need_i64(path, root, v1_shape_keys[k], v1_shape_keys[k], 0, INT_MAX, &v));
        zt_kv_add_int(&m->model, v1_shape_keys[k], v);
    }
    zt_kv_init(&m->optimizer, "AdamW");
    return ZT_OK;
}

/* A string of 1 to n - 1 bytes into buf. */
static zt_status need_text(const char *path, const struct json_value *obj, const char *key,
                           const char *where, char *buf, size_t n)
{
    const struct json_value *v;
    ZT_TRY(need(path, obj, key, where, JSON_STRING, &v));
    if (!v->str[0] || strlen(v->str) >= n)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: key '%s' must be 1 to %zu bytes", path, where,
                            n - 1);
    memcpy(buf, v->str, strlen(v->str) + 1);
    return ZT_OK;
}

static zt_status read_targets(const char *path, const struct json_value *lora, struct ckpt_lora *l)
{
    const struct json_value *list;
    ZT_TRY(need(path, lora, "target_modules", "lora.target_modules", JSON_ARRAY, &list));
    if (list->n == 0 || list->n > INT_MAX)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: key 'lora.target_modules' must not be empty",
                            path);
    if (!(l->targets = calloc(list->n, sizeof *l->targets)))
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the target modules", path);
    for (size_t i = 0; i < list->n; i++) {
        const struct json_value *v = &list->items[i];
        if (v->type != JSON_STRING || !v->str[0])
            return zt_error_set(ZT_ERR_CHECKPOINT,
                                "%s: key 'lora.target_modules[%zu]' must be a non-empty string",
                                path, i);
        if (!(l->targets[i] = strdup(v->str)))
            return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the target modules", path);
        l->n_targets = (int)i + 1;
    }
    return ZT_OK;
}

/* "lora", when present. */
static zt_status read_lora(const char *path, const struct json_value *root, struct ckpt_lora *l)
{
    const struct json_value *lora, *v;
    int64_t r;
    if (!json_object_get(root, "lora", NULL))
        return ZT_OK;
    ZT_TRY(need(path, root, "lora", "lora", JSON_OBJECT, &lora));
    ZT_TRY(need_i64(path, lora, "r", "lora.r", 1, INT_MAX, &r));
    ZT_TRY(need(path, lora, "lora_alpha", "lora.lora_alpha", JSON_REAL, &v));
    l->alpha = v->real;
    ZT_TRY(need(path, lora, "lora_dropout", "lora.lora_dropout", JSON_REAL, &v));
    l->dropout = v->real;
    ZT_TRY(need_text(path, lora, "bias", "lora.bias", l->bias, sizeof l->bias));
    ZT_TRY(read_targets(path, lora, l));
    l->r = (int)r;
    return ZT_OK;
}

/* "quantization", when present. */
static zt_status read_quant(const char *path, const struct json_value *root, struct ckpt_quant *q)
{
    const struct json_value *obj, *v;
    if (!json_object_get(root, "quantization", NULL))
        return ZT_OK;
    ZT_TRY(need(path, root, "quantization", "quantization", JSON_OBJECT, &obj));
    ZT_TRY(need(path, obj, "load_in_4bit", "quantization.load_in_4bit", JSON_BOOL, &v));
    q->load_in_4bit = v->boolean != 0;
    ZT_TRY(need_text(path, obj, "bnb_4bit_quant_type", "quantization.bnb_4bit_quant_type",
                     q->quant_type, sizeof q->quant_type));
    ZT_TRY(need(path, obj, "bnb_4bit_use_double_quant", "quantization.bnb_4bit_use_double_quant",
                JSON_BOOL, &v));
    q->double_quant = v->boolean != 0;
    ZT_TRY(need_text(path, obj, "bnb_4bit_compute_dtype", "quantization.bnb_4bit_compute_dtype",
                     q->compute_dtype, sizeof q->compute_dtype));
    return ZT_OK;
}

/* "base", when present (format 3). */
static zt_status read_base(const char *path, const struct json_value *root, struct ckpt_base *b)
{
    const struct json_value *base;
    char init[8];
    if (!json_object_get(root, "base", NULL))
        return ZT_OK;
    ZT_TRY(need(path, root, "base", "base", JSON_OBJECT, &base));
    if (!json_object_get(base, "init", NULL)) {
        ZT_TRY(need_text(path, base, "path", "base.path", b->path, sizeof b->path));
        ZT_TRY(need_hex64(path, base, "checksum", "base.checksum", &b->checksum));
        ZT_TRY(need_u64(path, base, "bytes", "base.bytes", &b->bytes));
        b->kind = CKPT_BASE_FILE;
        return ZT_OK;
    }
    ZT_TRY(need_text(path, base, "init", "base.init", init, sizeof init));
    if (strcmp(init, "seed") != 0)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: key 'base.init' is '%s', expected 'seed'", path,
                            init);
    ZT_TRY(need_u64(path, base, "seed", "base.seed", &b->seed));
    b->kind = CKPT_BASE_SEED;
    return ZT_OK;
}

/* "layout" (format 4), else the data-parallel grid of `world` ranks. */
static zt_status read_layout(const char *path, const struct json_value *root, struct ckpt_meta *m)
{
    m->layout = (struct ckpt_layout){1, 1, m->world, 0};
    if (m->format_version < 4)
        return ZT_OK;
    const struct json_value *obj;
    int64_t v[3];
    static const char *const keys[3] = {"tp", "pp", "dp"};
    ZT_TRY(need(path, root, "layout", "layout", JSON_OBJECT, &obj));
    for (int k = 0; k < 3; k++) {
        char where[32];
        snprintf(where, sizeof where, "layout.%s", keys[k]);
        ZT_TRY(need_i64(path, obj, keys[k], where, 1, INT_MAX, &v[k]));
    }
    m->layout = (struct ckpt_layout){(int)v[0], (int)v[1], (int)v[2], 0};
    if (json_object_get(obj, "vocab_padded", NULL))
        ZT_TRY(need_i64(path, obj, "vocab_padded", "layout.vocab_padded", 1, INT32_MAX,
                        &m->layout.vocab_padded));
    return check_layout(path, ZT_ERR_CHECKPOINT, m);
}

static zt_status read_tree(const char *path, const struct json_value *root, struct ckpt_meta *m)
{
    if (root->type != JSON_OBJECT)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: the top level must be an object, not %s", path,
                            json_type_name(root->type));
    ZT_TRY(read_version(path, root, m));
    for (size_t k = 0; k < N_FIELDS; k++)
        ZT_TRY(read_field(path, root, &fields[k], m));
    ZT_TRY(read_layout(path, root, m));
    if (m->format_version == 1) {
        ZT_TRY(read_v1_descriptions(path, root, m));
    } else {
        ZT_TRY(read_kvlist(path, root, "model", MODEL_KIND_KEY, &m->model));
        ZT_TRY(read_kvlist(path, root, "optimizer", OPTIMIZER_KIND_KEY, &m->optimizer));
    }
    ZT_TRY(read_lora(path, root, &m->lora));
    ZT_TRY(read_quant(path, root, &m->quant));
    if (m->format_version >= 3)
        ZT_TRY(read_base(path, root, &m->base));
    /* only adapters leave frozen units out: a base without them is a broken file */
    if (m->base.kind != CKPT_BASE_STORED && m->lora.r == 0)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: key 'base' without 'lora'", path);
    ZT_TRY(read_strings(path, root, m));
    ZT_TRY(read_units(path, root, m));
    return read_files(path, root, m);
}

zt_status ckpt_meta_read(const char *path, struct ckpt_meta *out)
{
    *out = (struct ckpt_meta){0};
    char *text;
    size_t len;
    ZT_TRY(ckpt_read_small(path, CKPT_META_MAX_BYTES, &text, &len));
    struct json_value root;
    const struct json_source src = {path, NULL, ZT_ERR_CHECKPOINT, META_MAX_DEPTH};
    zt_status st = json_parse(&src, text, len, &root);
    free(text);
    ZT_TRY(st);
    st = read_tree(path, &root, out);
    json_free(&root);
    if (st != ZT_OK)
        ckpt_meta_free(out);
    return st;
}

void ckpt_meta_free(struct ckpt_meta *m)
{
    if (!m)
        return;
    free(m->config_yaml);
    free(m->unit_numel);
    free(m->unit_slice);
    free(m->unit_shard);
    free(m->unit_frozen);
    free(m->unit_stage);
    free(m->files);
    for (int i = 0; m->lora.targets && i < m->lora.n_targets; i++)
        free(m->lora.targets[i]);
    free(m->lora.targets);
    *m = (struct ckpt_meta){0};
}
