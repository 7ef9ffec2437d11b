/* formats/safetensors.c — see safetensors.h for the format and the
 * contract.
 *
 * The reader is three passes over untrusted input, each stopping at the
 * first problem with a message that names it:
 *   1. sizes: the 8-byte length against the file size (from fstat, before
 *      anything is allocated) and the 100 MB limit;
 *   2. the JSON: the header is parsed into a tree by common/json.h (which
 *      bounds every access, limits nesting, validates UTF-8, decodes
 *      escapes and names the byte of a syntax error), then walked member
 *      by member in text order. Unknown fields of an entry are skipped, so
 *      they stay harmless; each tensor entry is checked as it is walked:
 *      known dtype, at most 8 dimensions, a byte size that does not
 *      overflow and equals end - begin. A value of the wrong kind is named
 *      by its byte in the header, like a syntax error;
 *   3. the file as a whole: duplicate names (sorted by name, which also
 *      gives safetensors_find its binary search), then the ranges sorted by
 *      offset swept once for overlaps, the data section's size and gaps.
 * The whole header is read into memory once; it is at most 100 MB and in
 * practice a few tens of kilobytes for GPT-2.
 *
 * Element reads and writes go through one small stack chunk with explicit
 * little-endian packing, so the code is the same on any host and reading a
 * shard never allocates.
 */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "../common/atomic_file.h"
#include "../common/endian.h"
#include "../common/fileio.h"
#include "../common/half.h"
#include "../common/json.h"
#include "safetensors_impl.h"

#define CHUNK_BYTES    16384
#define MAX_DEPTH      64 /* levels of JSON nesting in the header */
#define METADATA_KEY   "__metadata__"
#define SHAPE_TEXT_MAX (SAFETENSORS_MAX_DIMS * 22 + 4)

struct safetensors {
    char *path;
    int fd;
    uint64_t data_start, data_len; /* the data section: file bytes [start, start + len) */
    struct safetensors_tensor *tensors;
    uint64_t (*ranges)[2]; /* data_offsets of tensors[i], as the header gives them */
    int n_tensors, cap_tensors;
    const struct safetensors_tensor **by_name; /* sorted by strcmp */
    struct safetensors_meta *meta;             /* sorted by key once the header is read */
    int n_meta, cap_meta, have_meta;
};

static const struct {
    enum zt_dtype dtype;
    const char *name;
} dtype_names[] = {
    {ZT_F32, "F32"}, {ZT_F16, "F16"}, {ZT_BF16, "BF16"}, {ZT_F64, "F64"},
    {ZT_I32, "I32"}, {ZT_I64, "I64"}, {ZT_U8, "U8"},
};

#define N_DTYPES ((int)(sizeof dtype_names / sizeof dtype_names[0]))

const char *safetensors_dtype_name(enum zt_dtype dtype)
{
    for (int i = 0; i < N_DTYPES; i++)
        if (dtype_names[i].dtype == dtype)
            return dtype_names[i].name;
    return "?";
}

static int dtype_from_name(const char *name, enum zt_dtype *out)
{
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(dtype_names[i].name, name) == 0) {
            *out = dtype_names[i].dtype;
            return 1;
        }
    return 0;
}

static int is_float_dtype(enum zt_dtype t)
{
    return t == ZT_F32 || t == ZT_F16 || t == ZT_BF16 || t == ZT_F64;
}

/* ---- shared helpers ---- */

/* Whether a C string is valid UTF-8 (by the rules the header parser
 * applies), so that what the writer writes reads back. */
static int utf8_valid(const char *s)
{
    size_t n = strlen(s);
    return json_utf8_check(s, n) == n;
}

/* "[768, 2304]" into buf (SHAPE_TEXT_MAX bytes). */
static const char *shape_text(char *buf, int ndim, const uint64_t *shape)
{
    size_t used = (size_t)snprintf(buf, SHAPE_TEXT_MAX, "[");
    for (int i = 0; i < ndim; i++)
        used += (size_t)snprintf(buf + used, SHAPE_TEXT_MAX - used, "%s%llu", i ? ", " : "",
                                 (unsigned long long)shape[i]);
    snprintf(buf + used, SHAPE_TEXT_MAX - used, "]");
    return buf;
}

/* Element count and byte size of a shape; 0 if either overflows. A zero
 * dimension makes the tensor empty however large the others are. */
static int shape_size(int ndim, const uint64_t *shape, enum zt_dtype dtype, uint64_t *numel,
                      uint64_t *nbytes)
{
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0)
            n = 0;
    for (int i = 0; i < ndim && n; i++) {
        if (n > UINT64_MAX / shape[i])
            return 0;
        n *= shape[i];
    }
    uint64_t es = zt_dtype_size(dtype);
    if (n > UINT64_MAX / es)
        return 0;
    *numel = n;
    *nbytes = n * es;
    return 1;
}

/* Reads n bytes at offset; a file that ends early is ZT_ERR_DATA. */
static zt_status pread_full(int fd, const char *path, void *buf, size_t n, uint64_t offset)
{
    return zt_pread_full(fd, path, buf, n, offset, ZT_ERR_DATA);
}

/* ---- reading the header ---- */

int safetensors_grow(void **p, int *cap, int need, size_t size)
{
    if (need <= *cap)
        return 1;
    int n = *cap ? *cap * 2 : 16;
    void *q = realloc(*p, (size_t)n * size);
    if (!q)
        return 0;
    *p = q;
    *cap = n;
    return 1;
}

/* A value of the wrong kind in the header, named by its byte there. */
static zt_status wrong_value(const struct safetensors *s, const struct json_value *v,
                             const char *what, const char *want)
{
    const char *got =
        v->type == JSON_INT && v->negative ? "a negative integer" : json_type_name(v->type);
    return zt_error_set(ZT_ERR_DATA, "%s: header at byte %zu: %s must be %s, not %s", s->path,
                        v->pos, what, want, got);
}

/* Appends a tensor called `name` (copied). */
static zt_status push_tensor(struct safetensors *s, const char *name)
{
    int need = s->n_tensors + 1, cap = s->cap_tensors;
    void *t = s->tensors, *r = s->ranges;
    int ok = safetensors_grow(&t, &cap, need, sizeof *s->tensors);
    s->tensors = t;
    cap = s->cap_tensors;
    ok = ok && safetensors_grow(&r, &cap, need, sizeof *s->ranges);
    s->ranges = r;
    char *copy = ok ? strdup(name) : NULL;
    if (!copy)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate %d tensor entries", s->path, need);
    s->cap_tensors = cap;
    s->tensors[s->n_tensors] = (struct safetensors_tensor){.name = copy};
    s->ranges[s->n_tensors][0] = s->ranges[s->n_tensors][1] = 0;
    s->n_tensors++;
    return ZT_OK;
}

/* A JSON array of at most `max` non-negative integers into out[], *n of
 * them; entries are checked in text order, so the first bad one is named. */
static zt_status read_uints(const struct safetensors *s, const char *tname, const char *field,
                            const struct json_value *v, uint64_t *out, int max, int *n)
{
    char what[300];
    snprintf(what, sizeof what, "tensor '%.200s': \"%s\"", tname, field);
    if (v->type != JSON_ARRAY)
        return wrong_value(s, v, what, "an array");
    for (size_t k = 0; k < v->n; k++) {
        const struct json_value *e = &v->items[k];
        if (k == (size_t)max)
            return zt_error_set(ZT_ERR_DATA, "%s: tensor '%.200s': %s has more than %d entries",
                                s->path, tname, field, max);
        if (e->type != JSON_INT || e->negative) {
            snprintf(what, sizeof what, "tensor '%.200s': \"%s\" entry %zu", tname, field, k);
            return wrong_value(s, e, what, "a non-negative integer");
        }
        out[k] = e->magnitude;
    }
    *n = (int)v->n;
    return ZT_OK;
}

static zt_status read_dtype(const struct safetensors *s, struct safetensors_tensor *t,
                            const struct json_value *v)
{
    char what[300];
    snprintf(what, sizeof what, "tensor '%.200s': \"dtype\"", t->name);
    if (v->type != JSON_STRING)
        return wrong_value(s, v, what, "a string");
    if (!dtype_from_name(v->str, &t->dtype))
        return zt_error_set(ZT_ERR_DATA, "%s: unknown dtype '%.40s' for tensor '%.200s'", s->path,
                            v->str, t->name);
    return ZT_OK;
}

enum { HAVE_DTYPE = 1, HAVE_SHAPE = 2, HAVE_OFFSETS = 4 };

/* One member of a tensor entry; unknown fields are skipped. */
static zt_status read_field(struct safetensors *s, int i, const char *field,
                            const struct json_value *v, unsigned *seen)
{
    struct safetensors_tensor *t = &s->tensors[i];
    unsigned bit = strcmp(field, "dtype") == 0          ? HAVE_DTYPE
                   : strcmp(field, "shape") == 0        ? HAVE_SHAPE
                   : strcmp(field, "data_offsets") == 0 ? HAVE_OFFSETS
                                                        : 0;
    if (bit & *seen)
        return zt_error_set(ZT_ERR_DATA, "%s: tensor '%.200s': \"%s\" given twice", s->path,
                            t->name, field);
    *seen |= bit;
    if (bit == HAVE_DTYPE)
        return read_dtype(s, t, v);
    if (bit == HAVE_SHAPE)
        return read_uints(s, t->name, "shape", v, t->shape, SAFETENSORS_MAX_DIMS, &t->ndim);
    if (bit == HAVE_OFFSETS) {
        int n;
        ZT_TRY(read_uints(s, t->name, "data_offsets", v, s->ranges[i], 2, &n));
        if (n != 2)
            return zt_error_set(ZT_ERR_DATA,
                                "%s: tensor '%.200s': data_offsets must be [begin, end]", s->path,
                                t->name);
    }
    return ZT_OK;
}

/* The checks one entry allows on its own: all fields present, a size that
 * fits, and data_offsets spanning exactly that size. Sets nbytes. */
static zt_status check_tensor(const struct safetensors *s, int i, unsigned seen)
{
    struct safetensors_tensor *t = &s->tensors[i];
    static const char *const names[] = {"dtype", "shape", "data_offsets"};
    for (int k = 0; k < 3; k++)
        if (!(seen & (1u << k)))
            return zt_error_set(ZT_ERR_DATA, "%s: tensor '%.200s' has no \"%s\"", s->path, t->name,
                                names[k]);
    char shape[SHAPE_TEXT_MAX];
    uint64_t numel, nbytes, begin = s->ranges[i][0], end = s->ranges[i][1];
    if (!shape_size(t->ndim, t->shape, t->dtype, &numel, &nbytes))
        return zt_error_set(ZT_ERR_DATA, "%s: tensor '%.200s': shape %s is too large", s->path,
                            t->name, shape_text(shape, t->ndim, t->shape));
    if (end < begin || end - begin != nbytes)
        return zt_error_set(ZT_ERR_DATA,
                            "%s: tensor '%.200s': data_offsets [%llu, %llu] do not match dtype %s "
                            "and shape %s (%llu bytes)",
                            s->path, t->name, (unsigned long long)begin, (unsigned long long)end,
                            safetensors_dtype_name(t->dtype), shape_text(shape, t->ndim, t->shape),
                            (unsigned long long)nbytes);
    t->nbytes = nbytes;
    return ZT_OK;
}

/* The entry of tensor `name` (a member of the header object). */
static zt_status read_tensor(struct safetensors *s, const char *name, const struct json_value *v)
{
    ZT_TRY(push_tensor(s, name));
    int i = s->n_tensors - 1;
    char what[220];
    snprintf(what, sizeof what, "tensor '%.200s'", name);
    if (v->type != JSON_OBJECT)
        return wrong_value(s, v, what, "an object");
    unsigned seen = 0;
    for (size_t k = 0; k < v->n; k++)
        ZT_TRY(read_field(s, i, v->keys[k], &v->items[k], &seen));
    return check_tensor(s, i, seen);
}

/* One "key": "value" of __metadata__, both copied. */
static zt_status push_meta(struct safetensors *s, const char *key, const struct json_value *v)
{
    if (v->type != JSON_STRING)
        return zt_error_set(ZT_ERR_DATA, "%s: __metadata__ value of '%.200s' is not a string",
                            s->path, key);
    void *arr = s->meta;
    int ok = safetensors_grow(&arr, &s->cap_meta, s->n_meta + 1, sizeof *s->meta);
    s->meta = arr;
    char *k = ok ? strdup(key) : NULL, *value = k ? strdup(v->str) : NULL;
    if (!value) {
        free(k);
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate %d metadata entries", s->path,
                            s->n_meta + 1);
    }
    s->meta[s->n_meta++] = (struct safetensors_meta){k, value};
    return ZT_OK;
}

static zt_status read_metadata(struct safetensors *s, const struct json_value *v)
{
    if (s->have_meta)
        return zt_error_set(ZT_ERR_DATA, "%s: __metadata__ given twice", s->path);
    s->have_meta = 1;
    if (v->type != JSON_OBJECT)
        return zt_error_set(ZT_ERR_DATA, "%s: __metadata__ is not an object", s->path);
    for (size_t k = 0; k < v->n; k++)
        ZT_TRY(push_meta(s, v->keys[k], &v->items[k]));
    return ZT_OK;
}

/* The parsed header, member by member in text order. */
static zt_status read_header(struct safetensors *s, const struct json_value *root)
{
    if (root->type != JSON_OBJECT)
        return wrong_value(s, root, "the header", "an object");
    for (size_t k = 0; k < root->n; k++) {
        if (strcmp(root->keys[k], METADATA_KEY) == 0)
            ZT_TRY(read_metadata(s, &root->items[k]));
        else
            ZT_TRY(read_tensor(s, root->keys[k], &root->items[k]));
    }
    return ZT_OK;
}

/* ---- checking the file as a whole ---- */

static int by_name_cmp(const void *a, const void *b)
{
    const struct safetensors_tensor *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

static int meta_cmp(const void *a, const void *b)
{
    return strcmp(((const struct safetensors_meta *)a)->key,
                  ((const struct safetensors_meta *)b)->key);
}

/* Sorts names (for safetensors_find) and metadata keys, rejecting repeats. */
static zt_status index_names(struct safetensors *s)
{
    int n = s->n_tensors;
    s->by_name = malloc((n ? (size_t)n : 1) * sizeof *s->by_name);
    if (!s->by_name)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the name index", s->path);
    for (int i = 0; i < n; i++)
        s->by_name[i] = &s->tensors[i];
    qsort(s->by_name, (size_t)n, sizeof *s->by_name, by_name_cmp);
    for (int i = 1; i < n; i++)
        if (strcmp(s->by_name[i - 1]->name, s->by_name[i]->name) == 0)
            return zt_error_set(ZT_ERR_DATA, "%s: duplicate tensor name '%.200s'", s->path,
                                s->by_name[i]->name);
    if (s->n_meta > 1) /* meta may be NULL, which qsort does not allow even for 0 */
        qsort(s->meta, (size_t)s->n_meta, sizeof *s->meta, meta_cmp);
    for (int i = 1; i < s->n_meta; i++)
        if (strcmp(s->meta[i - 1].key, s->meta[i].key) == 0)
            return zt_error_set(ZT_ERR_DATA, "%s: duplicate __metadata__ key '%.200s'", s->path,
                                s->meta[i].key);
    return ZT_OK;
}

struct span {
    uint64_t begin, end;
    int idx;
};

static int span_cmp(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return x->idx - y->idx;
}

/* One sweep over the ranges in offset order: the first overlap, then
 * whether the file holds the last byte, then the bytes no tensor covers
 * (gaps and a tail). Strict like the reference implementation: even an
 * empty tensor may not sit inside another's bytes. */
static zt_status sweep_spans(const struct safetensors *s, const struct span *sp)
{
    uint64_t end_max = 0, uncovered = 0;
    int owner = -1;
    for (int i = 0; i < s->n_tensors; i++) {
        if (sp[i].begin < end_max)
            return zt_error_set(ZT_ERR_DATA, "%s: tensor '%.200s' overlaps tensor '%.200s'",
                                s->path, s->tensors[owner].name, s->tensors[sp[i].idx].name);
        uncovered += sp[i].begin - end_max;
        if (sp[i].end > end_max || owner < 0) {
            end_max = sp[i].end;
            owner = sp[i].idx;
        }
    }
    if (end_max > s->data_len)
        return zt_error_set(ZT_ERR_DATA,
                            "%s: truncated: data section needs %llu bytes, file has %llu", s->path,
                            (unsigned long long)end_max, (unsigned long long)s->data_len);
    uncovered += s->data_len - end_max;
    if (uncovered)
        return zt_error_set(ZT_ERR_DATA,
                            "%s: data section has %llu bytes not covered by any tensor", s->path,
                            (unsigned long long)uncovered);
    return ZT_OK;
}

static zt_status check_layout(struct safetensors *s)
{
    struct span *sp = malloc((s->n_tensors ? (size_t)s->n_tensors : 1) * sizeof *sp);
    if (!sp)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the layout check", s->path);
    for (int i = 0; i < s->n_tensors; i++)
        sp[i] = (struct span){s->ranges[i][0], s->ranges[i][1], i};
    qsort(sp, (size_t)s->n_tensors, sizeof *sp, span_cmp);
    zt_status st = sweep_spans(s, sp);
    free(sp);
    ZT_TRY(st);
    for (int i = 0; i < s->n_tensors; i++)
        s->tensors[i].offset = s->data_start + s->ranges[i][0];
    return ZT_OK;
}

/* ---- opening ---- */

/* The 8-byte length against the file size and the limit. */
static zt_status read_header_len(const struct safetensors *s, uint64_t size, uint64_t *len)
{
    unsigned char b[8];
    if (size < 8)
        return zt_error_set(ZT_ERR_DATA,
                            "%s: truncated: the file has %llu bytes, too few for the 8-byte "
                            "header length",
                            s->path, (unsigned long long)size);
    ZT_TRY(pread_full(s->fd, s->path, b, 8, 0));
    *len = zt_get_le(b, 8);
    if (*len > size - 8)
        return zt_error_set(ZT_ERR_DATA,
                            "%s: header length %llu exceeds the file size (%llu bytes)", s->path,
                            (unsigned long long)*len, (unsigned long long)size);
    if (*len > SAFETENSORS_MAX_HEADER_BYTES)
        return zt_error_set(ZT_ERR_DATA, "%s: header length %llu exceeds the limit of %llu bytes",
                            s->path, (unsigned long long)*len, SAFETENSORS_MAX_HEADER_BYTES);
    return ZT_OK;
}

static zt_status parse_file_header(struct safetensors *s, uint64_t len)
{
    unsigned char *buf = malloc(len ? (size_t)len : 1);
    if (!buf)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate %llu bytes for the header", s->path,
                            (unsigned long long)len);
    zt_status st = pread_full(s->fd, s->path, buf, (size_t)len, 8);
    struct json_value root = {0};
    if (st == ZT_OK) {
        const struct json_source src = {s->path, "header", ZT_ERR_DATA, MAX_DEPTH};
        st = json_parse(&src, (const char *)buf, (size_t)len, &root);
    }
    free(buf);
    if (st == ZT_OK)
        st = read_header(s, &root);
    json_free(&root);
    return st;
}

static zt_status load(struct safetensors *s)
{
    uint64_t size, len = 0;
    ZT_TRY(zt_open_regular(s->path, ZT_ERR_IO, &s->fd, &size));
    /* a loader reads its ranges front to back: twice the kernel's
     * read-ahead (two ranks read a cold 7B folder at 1.8 GB/s, 1.0
     * without); advice only, so a failure is not an error */
    (void)posix_fadvise(s->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    ZT_TRY(read_header_len(s, size, &len));
    s->data_start = 8 + len;
    s->data_len = size - s->data_start;
    ZT_TRY(parse_file_header(s, len));
    ZT_TRY(index_names(s));
    return check_layout(s);
}

zt_status safetensors_open(const char *path, struct safetensors **out)
{
    *out = NULL;
    struct safetensors *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the reader", path);
    }
    s->fd = -1;
    zt_status st = load(s);
    if (st != ZT_OK) {
        safetensors_close(s);
        ZT_TRY(st);
    }
    *out = s;
    return ZT_OK;
}

void safetensors_close(struct safetensors *s)
{
    if (!s)
        return;
    if (s->fd >= 0)
        close(s->fd);
    for (int i = 0; i < s->n_tensors; i++)
        free((char *)s->tensors[i].name);
    safetensors_meta_free(s->meta, s->n_meta);
    free(s->tensors);
    free(s->ranges);
    free(s->by_name);
    free(s->path);
    free(s);
}

/* ---- lookups and element reads ---- */

int safetensors_count(const struct safetensors *s)
{
    return s->n_tensors;
}

const struct safetensors_tensor *safetensors_tensor_at(const struct safetensors *s, int i)
{
    ZT_ASSERT(i >= 0 && i < s->n_tensors);
    return &s->tensors[i];
}

static int find_cmp(const void *key, const void *elem)
{
    return strcmp(key, (*(const struct safetensors_tensor *const *)elem)->name);
}

const struct safetensors_tensor *safetensors_find(const struct safetensors *s, const char *name)
{
    const struct safetensors_tensor *const *t =
        bsearch(name, s->by_name, (size_t)s->n_tensors, sizeof *s->by_name, find_cmp);
    return t ? *t : NULL;
}

static int meta_find_cmp(const void *key, const void *elem)
{
    return strcmp(key, ((const struct safetensors_meta *)elem)->key);
}

const char *safetensors_metadata(const struct safetensors *s, const char *key)
{
    if (s->n_meta == 0) /* meta may be NULL */
        return NULL;
    const struct safetensors_meta *m =
        bsearch(key, s->meta, (size_t)s->n_meta, sizeof *s->meta, meta_find_cmp);
    return m ? m->value : NULL;
}

static void decode_f32(const unsigned char *b, size_t n, enum zt_dtype dtype, float *dst)
{
    for (size_t i = 0; i < n; i++) {
        switch (dtype) {
        case ZT_F32:
            dst[i] = half_bits_f32((uint32_t)zt_get_le(b + 4 * i, 4));
            break;
        case ZT_F16:
            dst[i] = zt_f16_to_f32((uint16_t)zt_get_le(b + 2 * i, 2));
            break;
        case ZT_BF16:
            dst[i] = zt_bf16_to_f32((uint16_t)zt_get_le(b + 2 * i, 2));
            break;
        case ZT_F64: {
            uint64_t u = zt_get_le(b + 8 * i, 8);
            double d;
            memcpy(&d, &u, sizeof d);
            dst[i] = (float)d;
            break;
        }
        default:
            ZT_ASSERT(0);
        }
    }
}

zt_status safetensors_read_f32(struct safetensors *s, const struct safetensors_tensor *t,
                               uint64_t first, uint64_t count, float *dst)
{
    uintptr_t a = (uintptr_t)t, lo = (uintptr_t)s->tensors;
    ZT_ASSERT(a >= lo && a < lo + (uintptr_t)s->n_tensors * sizeof *t);
    uint64_t numel = safetensors_tensor_numel(t);
    if (first > numel || count > numel - first)
        return zt_error_set(ZT_ERR_USAGE,
                            "%s: tensor '%.200s': cannot read %llu elements from element %llu: it "
                            "has %llu",
                            s->path, t->name, (unsigned long long)count, (unsigned long long)first,
                            (unsigned long long)numel);
    if (!is_float_dtype(t->dtype))
        return zt_error_set(ZT_ERR_UNSUPPORTED,
                            "%s: tensor '%.200s' is %s; only F32, F16, BF16 and F64 read as floats",
                            s->path, t->name, safetensors_dtype_name(t->dtype));
    size_t es = zt_dtype_size(t->dtype), per = CHUNK_BYTES / es;
    uint64_t off = t->offset + first * es;
    unsigned char buf[CHUNK_BYTES];
    while (count > 0) {
        size_t m = count < per ? (size_t)count : per;
        ZT_TRY(pread_full(s->fd, s->path, buf, m * es, off));
        decode_f32(buf, m, t->dtype, dst);
        dst += m;
        count -= m;
        off += m * es;
    }
    return ZT_OK;
}

/* ---- writing ---- */

struct wtensor {
    char *name;
    enum zt_dtype dtype;
    int ndim;
    uint64_t shape[SAFETENSORS_MAX_DIMS];
    uint64_t numel;
};

enum writer_state { W_DECLARING, W_WRITING, W_FAILED };

struct safetensors_writer {
    struct atomic_file out; /* out.path names the file in every message */
    enum writer_state state;
    struct wtensor *t;
    int n, cap;
    struct safetensors_meta *meta;
    int n_meta, cap_meta;
    uint64_t total_bytes, total_numel, done_numel;
    int cur;           /* tensor receiving the next element */
    uint64_t cur_done; /* elements of tensor cur already written */
};

void safetensors_writer_abort(struct safetensors_writer *w)
{
    if (!w)
        return;
    atomic_file_abort(&w->out);
    for (int i = 0; i < w->n; i++)
        free(w->t[i].name);
    safetensors_meta_free(w->meta, w->n_meta);
    free(w->t);
    free(w);
}

zt_status safetensors_writer_open(const char *path, struct safetensors_writer **out)
{
    *out = NULL;
    struct safetensors_writer *w = calloc(1, sizeof *w);
    if (!w)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the writer", path);
    zt_status st = atomic_file_open(path, &w->out);
    if (st != ZT_OK) {
        free(w);
        return st;
    }
    *out = w;
    return ZT_OK;
}

zt_status safetensors_check_tensor(const char *path, const char *name, enum zt_dtype dtype,
                                   int ndim, const uint64_t *shape, uint64_t *nbytes)
{
    char text[SHAPE_TEXT_MAX];
    uint64_t numel;
    if (!name || !*name)
        return zt_error_set(ZT_ERR_USAGE, "%s: tensor name is empty", path);
    if (strcmp(name, METADATA_KEY) == 0 || !utf8_valid(name))
        return zt_error_set(ZT_ERR_USAGE, "%s: tensor name '%.200s' is %s", path, name,
                            utf8_valid(name) ? "reserved" : "not valid UTF-8");
    if (ndim < 0 || ndim > SAFETENSORS_MAX_DIMS)
        return zt_error_set(ZT_ERR_USAGE, "%s: tensor '%.200s': %d dimensions (0 to %d allowed)",
                            path, name, ndim, SAFETENSORS_MAX_DIMS);
    ZT_ASSERT(ndim == 0 || shape != NULL);
    if (!is_float_dtype(dtype))
        return zt_error_set(ZT_ERR_UNSUPPORTED,
                            "%s: tensor '%.200s': dtype %s cannot be written from floats", path,
                            name, safetensors_dtype_name(dtype));
    if (!shape_size(ndim, shape, dtype, &numel, nbytes))
        return zt_error_set(ZT_ERR_USAGE, "%s: tensor '%.200s': shape %s is too large", path, name,
                            shape_text(text, ndim, shape));
    return ZT_OK;
}

/* Everything about a new tensor that can be wrong, in the caller's terms. */
static zt_status check_new_tensor(const struct safetensors_writer *w, const char *name,
                                  enum zt_dtype dtype, int ndim, const uint64_t *shape,
                                  uint64_t *numel)
{
    char text[SHAPE_TEXT_MAX];
    uint64_t nbytes = 0;
    ZT_TRY(safetensors_check_tensor(w->out.path, name, dtype, ndim, shape, &nbytes));
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return zt_error_set(ZT_ERR_USAGE, "%s: tensor '%.200s' declared twice", w->out.path,
                                name);
    if (nbytes > UINT64_MAX - w->total_bytes)
        return zt_error_set(ZT_ERR_USAGE, "%s: tensor '%.200s': shape %s is too large", w->out.path,
                            name, shape_text(text, ndim, shape));
    *numel = nbytes / zt_dtype_size(dtype);
    return ZT_OK;
}

zt_status safetensors_writer_add(struct safetensors_writer *w, const char *name,
                                 enum zt_dtype dtype, int ndim, const uint64_t *shape)
{
    ZT_ASSERT(w && w->state == W_DECLARING);
    uint64_t numel = 0;
    ZT_TRY(check_new_tensor(w, name, dtype, ndim, shape, &numel));
    void *arr = w->t;
    int ok = safetensors_grow(&arr, &w->cap, w->n + 1, sizeof *w->t);
    w->t = arr;
    char *copy = ok ? strdup(name) : NULL;
    if (!copy)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot declare tensor '%.200s'", w->out.path, name);
    struct wtensor *t = &w->t[w->n++];
    *t = (struct wtensor){.name = copy, .dtype = dtype, .ndim = ndim, .numel = numel};
    for (int i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    w->total_bytes += numel * zt_dtype_size(dtype);
    w->total_numel += numel;
    return ZT_OK;
}

zt_status safetensors_meta_set(struct safetensors_meta **list, int *n, int *cap, const char *path,
                               const char *key, const char *value)
{
    if (!utf8_valid(key) || !utf8_valid(value))
        return zt_error_set(ZT_ERR_USAGE, "%s: metadata '%.200s' is not valid UTF-8", path, key);
    char *v = strdup(value);
    int i = 0;
    while (i < *n && strcmp((*list)[i].key, key) != 0)
        i++;
    char *k = i < *n ? (*list)[i].key : strdup(key);
    void *arr = *list;
    int ok = v && k && safetensors_grow(&arr, cap, i + 1, sizeof **list);
    *list = arr;
    if (!ok) {
        free(v);
        if (i == *n)
            free(k);
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot store metadata '%.200s'", path, key);
    }
    if (i < *n)
        free((*list)[i].value);
    else
        (*n)++;
    (*list)[i] = (struct safetensors_meta){k, v};
    return ZT_OK;
}

void safetensors_meta_free(struct safetensors_meta *list, int n)
{
    for (int i = 0; i < n; i++) {
        free(list[i].key);
        free(list[i].value);
    }
    free(list);
}

zt_status safetensors_writer_set_metadata(struct safetensors_writer *w, const char *key,
                                          const char *value)
{
    ZT_ASSERT(w && w->state == W_DECLARING);
    return safetensors_meta_set(&w->meta, &w->n_meta, &w->cap_meta, w->out.path, key, value);
}

static void text_u64(struct json_text *b, uint64_t v)
{
    json_text_printf(b, "%llu", (unsigned long long)v);
}

static void header_tensor(struct json_text *b, const struct wtensor *t, uint64_t begin)
{
    json_text_string(b, t->name, JSON_ESCAPE_U);
    json_text_puts(b, ":{\"dtype\":\"");
    json_text_puts(b, safetensors_dtype_name(t->dtype));
    json_text_puts(b, "\",\"shape\":[");
    for (int i = 0; i < t->ndim; i++) {
        if (i)
            json_text_put(b, ",", 1);
        text_u64(b, t->shape[i]);
    }
    json_text_puts(b, "],\"data_offsets\":[");
    text_u64(b, begin);
    json_text_put(b, ",", 1);
    text_u64(b, begin + t->numel * zt_dtype_size(t->dtype));
    json_text_puts(b, "]}");
}

/* The header JSON, metadata first, then tensors in declaration order,
 * padded with spaces to a multiple of 8 bytes. */
static void header_text(const struct safetensors_writer *w, struct json_text *b)
{
    json_text_put(b, "{", 1);
    if (w->n_meta) {
        json_text_puts(b, "\"" METADATA_KEY "\":{");
        for (int i = 0; i < w->n_meta; i++) {
            if (i)
                json_text_put(b, ",", 1);
            json_text_string(b, w->meta[i].key, JSON_ESCAPE_U);
            json_text_put(b, ":", 1);
            json_text_string(b, w->meta[i].value, JSON_ESCAPE_U);
        }
        json_text_puts(b, w->n ? "}," : "}");
    }
    uint64_t begin = 0;
    for (int i = 0; i < w->n; i++) {
        if (i)
            json_text_put(b, ",", 1);
        header_tensor(b, &w->t[i], begin);
        begin += w->t[i].numel * zt_dtype_size(w->t[i].dtype);
    }
    json_text_put(b, "}", 1);
    while (!b->oom && b->len % 8 != 0)
        json_text_put(b, " ", 1);
}

static zt_status write_bytes(struct safetensors_writer *w, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, w->out.f) != n) {
        w->state = W_FAILED;
        return zt_error_set(ZT_ERR_IO, "%s: write failed: %s", w->out.tmp_path, strerror(errno));
    }
    return ZT_OK;
}

zt_status safetensors_writer_begin_data(struct safetensors_writer *w)
{
    ZT_ASSERT(w && w->state == W_DECLARING);
    struct json_text b = {0};
    header_text(w, &b);
    zt_status st = ZT_OK;
    unsigned char len[8];
    w->state = W_FAILED;
    if (b.oom)
        st = zt_error_set(ZT_ERR_NOMEM, "%s: cannot build the header", w->out.path);
    else if (b.len > SAFETENSORS_MAX_HEADER_BYTES)
        st = zt_error_set(ZT_ERR_USAGE, "%s: header of %zu bytes exceeds the limit of %llu",
                          w->out.path, b.len, SAFETENSORS_MAX_HEADER_BYTES);
    if (st == ZT_OK) {
        zt_put_le(len, b.len, 8);
        st = write_bytes(w, len, 8);
    }
    if (st == ZT_OK)
        st = write_bytes(w, b.p, b.len);
    free(b.p);
    ZT_TRY(st);
    w->state = W_WRITING;
    return ZT_OK;
}

static void encode_f32(const float *src, size_t n, enum zt_dtype dtype, unsigned char *b)
{
    for (size_t i = 0; i < n; i++) {
        switch (dtype) {
        case ZT_F32:
            zt_put_le(b + 4 * i, half_f32_bits(src[i]), 4);
            break;
        case ZT_F16:
            zt_put_le(b + 2 * i, zt_f32_to_f16(src[i]), 2);
            break;
        case ZT_BF16:
            zt_put_le(b + 2 * i, zt_f32_to_bf16(src[i]), 2);
            break;
        case ZT_F64: {
            double d = src[i];
            uint64_t u;
            memcpy(&u, &d, sizeof u);
            zt_put_le(b + 8 * i, u, 8);
            break;
        }
        default:
            ZT_ASSERT(0);
        }
    }
}

zt_status safetensors_writer_write_f32(struct safetensors_writer *w, const float *src,
                                       uint64_t count)
{
    ZT_ASSERT(w && w->state == W_WRITING);
    if (count > w->total_numel - w->done_numel)
        return zt_error_set(ZT_ERR_USAGE,
                            "%s: %llu more elements given but only %llu of the declared "
                            "tensors remain",
                            w->out.path, (unsigned long long)count,
                            (unsigned long long)(w->total_numel - w->done_numel));
    unsigned char buf[CHUNK_BYTES];
    while (count > 0) {
        while (w->cur_done == w->t[w->cur].numel) {
            w->cur++;
            w->cur_done = 0;
        }
        const struct wtensor *t = &w->t[w->cur];
        size_t es = zt_dtype_size(t->dtype);
        uint64_t m = t->numel - w->cur_done;
        m = m < count ? m : count;
        m = m < CHUNK_BYTES / es ? m : CHUNK_BYTES / es;
        encode_f32(src, (size_t)m, t->dtype, buf);
        ZT_TRY(write_bytes(w, buf, (size_t)m * es));
        src += m;
        count -= m;
        w->cur_done += m;
        w->done_numel += m;
    }
    return ZT_OK;
}

/* The name of the first tensor not completely written. */
static const char *first_incomplete(const struct safetensors_writer *w)
{
    for (int i = w->cur; i < w->n; i++)
        if ((i == w->cur ? w->cur_done : 0) < w->t[i].numel)
            return w->t[i].name;
    return "?";
}

zt_status safetensors_writer_finish(struct safetensors_writer *w)
{
    ZT_ASSERT(w && w->state == W_WRITING);
    zt_status st;
    if (w->done_numel < w->total_numel)
        st = zt_error_set(ZT_ERR_USAGE,
                          "%s: tensor '%.200s' is incomplete: %llu of %llu elements were written",
                          w->out.path, first_incomplete(w), (unsigned long long)w->done_numel,
                          (unsigned long long)w->total_numel);
    else
        st = atomic_file_commit(&w->out);
    safetensors_writer_abort(w);
    ZT_TRY(st);
    return ZT_OK;
}
