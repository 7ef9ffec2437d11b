/* formats/safetensors_set.c — see safetensors_set.h for the forms and the
 * contract.
 *
 * Opening an index is four passes, each stopping at the first problem with
 * a message naming the index:
 *   1. the JSON, parsed whole by common/json.h (which names the byte of a
 *      syntax error);
 *   2. its form: an object with one "weight_map" object of strings and at
 *      most one "metadata" object; the entries are sorted by tensor name,
 *      which finds a tensor listed twice and later serves lookups;
 *   3. the shards: each entry's shard name checked (no '/' or ".."), the
 *      distinct names sorted and opened, so an entry's shard is an index;
 *   4. the cross-check, both ways: every entry against its shard's header
 *      (and, when absent there, the other shards, to say where it is), then
 *      every shard's tensors against the entries. After it the entries and
 *      the shards' tensors are one and the same set, each tensor in one
 *      place.
 * A single file is the one-shard case of the same structures, without an
 * index, so everything after opening has one code path.
 *
 * The writer keeps the declarations and cuts them into shards at
 * begin_data, when every size is known. A shard's file is started when the
 * stream reaches its first tensor and completed at its last one; with
 * huggingface_hub's cut, the current shard and one oversized tensor's
 * shard are the most ever open together, whatever the model.
 */
#include "safetensors_set.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/atomic_file.h"
#include "../common/fileio.h"
#include "../common/fnv.h"
#include "../common/json.h"
#include "safetensors_impl.h"

#define MAX_DEPTH    8 /* the index nests two objects; room for metadata values */
#define SUFFIX       ".safetensors"
#define INDEX_SUFFIX ".index.json"
#define SHARD_DIGITS 5
#define DIGEST_CHUNK (1u << 20)

struct shard {
    char *name; /* as the index lists it; NULL for a single file */
    char *path;
    struct safetensors *st;
};

struct entry {
    const char *name; /* the tensor's; owned by its shard's reader */
    const struct safetensors_tensor *t;
    int shard;
};

struct safetensors_set {
    char *path; /* the .safetensors file or the index */
    struct shard *shards;
    int n_shards;
    struct entry *tensors; /* the set's order */
    struct entry *by_name; /* sorted by name */
    int n;
};

/* An index entry while opening: tensor name, shard name, shard index. */
struct listed {
    const char *tensor, *shard_name;
    int shard;
};

static char *join(const char *a, size_t alen, const char *b)
{
    size_t blen = strlen(b);
    char *p = malloc(alen + blen + 1);
    if (p) {
        memcpy(p, a, alen);
        memcpy(p + alen, b, blen + 1);
    }
    return p;
}

/* Length of the folder part of path, its last '/' included (0: none). */
static size_t dir_len(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? (size_t)(slash - path) + 1 : 0;
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name);
}

static int entry_find_cmp(const void *key, const void *elem)
{
    return strcmp(key, ((const struct entry *)elem)->name);
}

static int listed_cmp(const void *a, const void *b)
{
    return strcmp(((const struct listed *)a)->tensor, ((const struct listed *)b)->tensor);
}

static int listed_find_cmp(const void *key, const void *elem)
{
    return strcmp(key, ((const struct listed *)elem)->tensor);
}

static int str_ptr_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ---- reading: the index's form ---- */

/* A value of the wrong kind in the index, named by its byte. */
static zt_status wrong_value(const char *path, const struct json_value *v, const char *what,
                             const char *want)
{
    const char *got =
        v->type == JSON_INT && v->negative ? "a negative integer" : json_type_name(v->type);
    return zt_error_set(ZT_ERR_DATA, "%s: at byte %zu: %s must be %s, not %s", path, v->pos, what,
                        want, got);
}

/* The member `key` of the index object, at most once; *v NULL if absent. */
static zt_status member(const char *path, const struct json_value *root, const char *key,
                        const struct json_value **v)
{
    size_t count;
    *v = json_object_get(root, key, &count);
    if (count > 1)
        return zt_error_set(ZT_ERR_DATA, "%s: \"%s\" is given %zu times", path, key, count);
    return ZT_OK;
}

static zt_status check_metadata(const char *path, const struct json_value *root)
{
    const struct json_value *meta, *size;
    ZT_TRY(member(path, root, "metadata", &meta));
    if (!meta)
        return ZT_OK;
    if (meta->type != JSON_OBJECT)
        return wrong_value(path, meta, "\"metadata\"", "an object");
    ZT_TRY(member(path, meta, "total_size", &size));
    if (size && (size->type != JSON_INT || size->negative))
        return wrong_value(path, size, "metadata.total_size", "a non-negative integer");
    return ZT_OK;
}

/* weight_map's entries into *out (n of them, sorted by tensor name; the
 * strings stay owned by the tree). */
static zt_status read_weight_map(const char *path, const struct json_value *root,
                                 struct listed **out, int *n)
{
    const struct json_value *map;
    *out = NULL;
    *n = 0;
    if (root->type != JSON_OBJECT)
        return wrong_value(path, root, "the index", "an object");
    ZT_TRY(check_metadata(path, root));
    ZT_TRY(member(path, root, "weight_map", &map));
    if (!map)
        return zt_error_set(ZT_ERR_DATA, "%s: the index has no \"weight_map\"", path);
    if (map->type != JSON_OBJECT)
        return wrong_value(path, map, "\"weight_map\"", "an object");
    if (map->n > (size_t)(INT32_MAX / 2))
        return zt_error_set(ZT_ERR_DATA, "%s: weight_map lists %zu tensors", path, map->n);
    for (size_t k = 0; k < map->n; k++)
        if (map->items[k].type != JSON_STRING) {
            char what[260];
            snprintf(what, sizeof what, "weight_map's \"%.200s\"", map->keys[k]);
            return wrong_value(path, &map->items[k], what, "a string (a shard file name)");
        }
    struct listed *l = malloc((map->n ? map->n : 1) * sizeof *l);
    if (!l)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate %zu index entries", path, map->n);
    for (size_t k = 0; k < map->n; k++)
        l[k] = (struct listed){map->keys[k], map->items[k].str, -1};
    qsort(l, map->n, sizeof *l, listed_cmp);
    for (size_t k = 1; k < map->n; k++)
        if (strcmp(l[k - 1].tensor, l[k].tensor) == 0) {
            zt_status st = zt_error_set(ZT_ERR_DATA, "%s: weight_map lists tensor '%.200s' twice",
                                        path, l[k].tensor);
            free(l);
            return st;
        }
    *out = l;
    *n = (int)map->n;
    return ZT_OK;
}

/* ---- reading: the shards ---- */

/* A shard is a file of the index's folder: a name that could reach beyond
 * it is refused before anything is opened. */
static zt_status check_shard_names(const char *path, const struct listed *l, int n)
{
    for (int i = 0; i < n; i++) {
        const char *s = l[i].shard_name;
        if (!*s || strchr(s, '/') || strstr(s, ".."))
            return zt_error_set(ZT_ERR_DATA,
                                "%s: weight_map puts tensor '%.200s' in '%.200s', which is not a "
                                "file of the index's folder (a shard name has no '/' or '..')",
                                path, l[i].tensor, s);
    }
    return ZT_OK;
}

/* Opens shard k; a failure is reported as the index's, with the reader's
 * message after it. */
static zt_status open_shard(struct safetensors_set *s, int k, const char *tensor)
{
    struct shard *sh = &s->shards[k];
    sh->path = join(s->path, dir_len(s->path), sh->name);
    if (!sh->path)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate a shard path", s->path);
    zt_status st = safetensors_open(sh->path, &sh->st);
    if (st == ZT_OK)
        return ZT_OK;
    char why[1024];
    snprintf(why, sizeof why, "%s", zt_error_message());
    return zt_error_set(
        st, "%s: weight_map puts tensor '%.200s' in shard %.200s, which cannot be read: %s",
        s->path, tensor, sh->name, why);
}

/* The distinct shard names, sorted, opened; each entry's shard set. */
static zt_status open_shards(struct safetensors_set *s, struct listed *l, int n)
{
    ZT_TRY(check_shard_names(s->path, l, n));
    const char **names = malloc((n > 0 ? (size_t)n : 1) * sizeof *names);
    if (!names)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the shard list", s->path);
    for (int i = 0; i < n; i++)
        names[i] = l[i].shard_name;
    qsort(names, (size_t)n, sizeof *names, str_ptr_cmp);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (m == 0 || strcmp(names[m - 1], names[i]) != 0)
            names[m++] = names[i];
    s->shards = calloc(m > 0 ? (size_t)m : 1, sizeof *s->shards);
    zt_status st =
        s->shards ? ZT_OK : zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate %d shards", s->path, m);
    for (int k = 0; k < m && st == ZT_OK; k++) {
        s->shards[k].name = strdup(names[k]);
        s->n_shards = k + 1;
        if (!s->shards[k].name)
            st = zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate a shard name", s->path);
    }
    for (int i = 0; i < n && st == ZT_OK; i++) {
        const char **at = bsearch(&l[i].shard_name, names, (size_t)m, sizeof *names, str_ptr_cmp);
        ZT_ASSERT(at);
        l[i].shard = (int)(at - names);
    }
    free(names);
    ZT_TRY(st);
    /* entries are in name order: open each shard for the first tensor it is named for */
    for (int i = 0; i < n; i++)
        if (!s->shards[l[i].shard].st)
            ZT_TRY(open_shard(s, l[i].shard, l[i].tensor));
    return ZT_OK;
}

/* Where tensor `name` is among the shards other than `not`, or NULL. */
static const char *shard_holding(const struct safetensors_set *s, const char *name, int not )
{
    for (int k = 0; k < s->n_shards; k++)
        if (k != not &&safetensors_find(s->shards[k].st, name))
            return s->shards[k].name;
    return NULL;
}

/* Every entry in its shard, every shard's tensor listed for it. */
static zt_status cross_check(const struct safetensors_set *s, const struct listed *l, int n)
{
    for (int i = 0; i < n; i++) {
        if (safetensors_find(s->shards[l[i].shard].st, l[i].tensor))
            continue;
        const char *elsewhere = shard_holding(s, l[i].tensor, l[i].shard);
        return zt_error_set(ZT_ERR_DATA,
                            "%s: weight_map puts tensor '%.200s' in %.200s, but that shard has no "
                            "such tensor (%s%.200s)",
                            s->path, l[i].tensor, s->shards[l[i].shard].name,
                            elsewhere ? "it is in " : "no shard holds it",
                            elsewhere ? elsewhere : "");
    }
    for (int k = 0; k < s->n_shards; k++) {
        const struct safetensors *st = s->shards[k].st;
        for (int i = 0; i < safetensors_count(st); i++) {
            const char *name = safetensors_tensor_at(st, i)->name;
            const struct listed *e = bsearch(name, l, (size_t)n, sizeof *l, listed_find_cmp);
            if (!e)
                return zt_error_set(ZT_ERR_DATA,
                                    "%s: shard %.200s holds tensor '%.200s', which weight_map "
                                    "does not list",
                                    s->path, s->shards[k].name, name);
            if (e->shard != k)
                return zt_error_set(ZT_ERR_DATA,
                                    "%s: tensor '%.200s' is in two shards, %.200s and %.200s; "
                                    "weight_map names %.200s",
                                    s->path, name, s->shards[e->shard].name, s->shards[k].name,
                                    s->shards[e->shard].name);
        }
    }
    return ZT_OK;
}

static zt_status open_index(struct safetensors_set *s)
{
    char *text = NULL;
    size_t len = 0;
    ZT_TRY(zt_read_small_file(s->path, SAFETENSORS_SET_MAX_INDEX_BYTES, ZT_ERR_DATA, &text, &len));
    struct json_value root = {0};
    const struct json_source src = {s->path, NULL, ZT_ERR_DATA, MAX_DEPTH};
    zt_status st = json_parse(&src, text, len, &root);
    free(text);
    struct listed *l = NULL;
    int n = 0;
    if (st == ZT_OK)
        st = read_weight_map(s->path, &root, &l, &n);
    if (st == ZT_OK)
        st = open_shards(s, l, n);
    if (st == ZT_OK)
        st = cross_check(s, l, n);
    free(l);
    json_free(&root);
    return st;
}

static zt_status open_file(struct safetensors_set *s)
{
    s->shards = calloc(1, sizeof *s->shards);
    if (!s->shards || !(s->shards[0].path = strdup(s->path)))
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the reader", s->path);
    s->n_shards = 1;
    return safetensors_open(s->path, &s->shards[0].st);
}

/* The tensors of every shard, in the set's order and sorted by name. */
static zt_status index_tensors(struct safetensors_set *s)
{
    int n = 0;
    for (int k = 0; k < s->n_shards; k++)
        n += safetensors_count(s->shards[k].st);
    s->tensors = malloc((n > 0 ? (size_t)n : 1) * sizeof *s->tensors);
    s->by_name = malloc((n > 0 ? (size_t)n : 1) * sizeof *s->by_name);
    if (!s->tensors || !s->by_name)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate %d tensor entries", s->path, n);
    for (int k = 0, i = 0; k < s->n_shards; k++)
        for (int j = 0; j < safetensors_count(s->shards[k].st); j++, i++) {
            const struct safetensors_tensor *t = safetensors_tensor_at(s->shards[k].st, j);
            s->tensors[i] = (struct entry){t->name, t, k};
        }
    s->n = n;
    memcpy(s->by_name, s->tensors, (size_t)n * sizeof *s->by_name);
    qsort(s->by_name, (size_t)n, sizeof *s->by_name, entry_cmp);
    return ZT_OK;
}

/* What path names: a folder's model.safetensors, else its index; anything
 * else as it is. *out is a copy (caller frees). */
static zt_status resolve(const char *path, char **out)
{
    static const char *const names[] = {SAFETENSORS_SET_FILE, SAFETENSORS_SET_INDEX};
    struct stat sb;
    size_t len = strlen(path);
    *out = NULL;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        *out = strdup(path);
        return *out ? ZT_OK : zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the reader", path);
    }
    const char *sep = len > 0 && path[len - 1] == '/' ? "" : "/";
    for (int i = 0; i < 2; i++) {
        size_t n = len + 1 + strlen(names[i]) + 1;
        char *p = malloc(n);
        if (!p)
            return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the reader", path);
        snprintf(p, n, "%s%s%s", path, sep, names[i]);
        if (stat(p, &sb) == 0) {
            *out = p;
            return ZT_OK;
        }
        free(p);
    }
    return zt_error_set(ZT_ERR_IO, "%s: a folder without %s or %s", path, SAFETENSORS_SET_FILE,
                        SAFETENSORS_SET_INDEX);
}

zt_status safetensors_set_open(const char *path, struct safetensors_set **out)
{
    *out = NULL;
    struct safetensors_set *s = calloc(1, sizeof *s);
    if (!s)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the reader", path);
    zt_status st = resolve(path, &s->path);
    if (st == ZT_OK)
        st = zt_ends_with(s->path, ".json") ? open_index(s) : open_file(s);
    if (st == ZT_OK)
        st = index_tensors(s);
    if (st != ZT_OK) {
        safetensors_set_close(s);
        ZT_TRY(st);
    }
    *out = s;
    return ZT_OK;
}

/* One file's bytes into the running checksum, a chunk at a time. */
static zt_status digest_file(const char *path, unsigned char *chunk, uint64_t *h, uint64_t *bytes)
{
    int fd;
    uint64_t size;
    ZT_TRY(zt_open_regular(path, ZT_ERR_DATA, &fd, &size));
    zt_status st = ZT_OK;
    for (uint64_t at = 0; at < size && st == ZT_OK; at += DIGEST_CHUNK) {
        const size_t n = size - at < DIGEST_CHUNK ? (size_t)(size - at) : DIGEST_CHUNK;
        st = zt_pread_full(fd, path, chunk, n, at, ZT_ERR_DATA);
        if (st == ZT_OK)
            *h = zt_fnv1a(*h, chunk, n);
    }
    close(fd);
    *bytes += size;
    return st;
}

zt_status safetensors_set_digest(const struct safetensors_set *s, uint64_t *checksum,
                                 uint64_t *bytes)
{
    unsigned char *chunk = malloc(DIGEST_CHUNK);
    if (!chunk)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the read buffer", s->path);
    uint64_t h = ZT_FNV_OFFSET, total = 0;
    zt_status st = ZT_OK;
    for (int i = 0; i < s->n_shards && st == ZT_OK; i++)
        st = digest_file(s->shards[i].path, chunk, &h, &total);
    free(chunk);
    ZT_TRY(st);
    *checksum = h;
    *bytes = total;
    return ZT_OK;
}

void safetensors_set_close(struct safetensors_set *s)
{
    if (!s)
        return;
    for (int k = 0; k < s->n_shards; k++) {
        safetensors_close(s->shards[k].st);
        free(s->shards[k].name);
        free(s->shards[k].path);
    }
    free(s->shards);
    free(s->tensors);
    free(s->by_name);
    free(s->path);
    free(s);
}

/* ---- reading: lookups ---- */

const char *safetensors_set_path(const struct safetensors_set *s)
{
    return s->path;
}

int safetensors_set_shard_count(const struct safetensors_set *s)
{
    return s->n_shards;
}

int safetensors_set_count(const struct safetensors_set *s)
{
    return s->n;
}

const struct safetensors_tensor *safetensors_set_tensor_at(const struct safetensors_set *s, int i)
{
    ZT_ASSERT(i >= 0 && i < s->n);
    return s->tensors[i].t;
}

static const struct entry *find_entry(const struct safetensors_set *s, const char *name)
{
    return bsearch(name, s->by_name, (size_t)s->n, sizeof *s->by_name, entry_find_cmp);
}

const struct safetensors_tensor *safetensors_set_find(const struct safetensors_set *s,
                                                      const char *name)
{
    const struct entry *e = find_entry(s, name);
    return e ? e->t : NULL;
}

/* The entry of t, which must be a tensor of this set. */
static const struct entry *entry_of(const struct safetensors_set *s,
                                    const struct safetensors_tensor *t)
{
    const struct entry *e = find_entry(s, t->name);
    ZT_ASSERT(e && e->t == t);
    return e;
}

const char *safetensors_set_file_of(const struct safetensors_set *s,
                                    const struct safetensors_tensor *t)
{
    return s->shards[entry_of(s, t)->shard].path;
}

zt_status safetensors_set_read_f32(struct safetensors_set *s, const struct safetensors_tensor *t,
                                   uint64_t first, uint64_t count, float *dst)
{
    return safetensors_read_f32(s->shards[entry_of(s, t)->shard].st, t, first, count, dst);
}

/* ---- writing ---- */

struct wtensor {
    char *name;
    enum zt_dtype dtype;
    int ndim;
    uint64_t shape[SAFETENSORS_MAX_DIMS];
    uint64_t numel, nbytes;
    int shard;
};

struct wshard {
    char *file; /* its name in the folder (the index's weight_map value) */
    char *path;
    struct safetensors_writer *w; /* while being written */
    int last;                     /* its last tensor; -1 for none */
    int done;                     /* renamed into place */
};

enum writer_state { W_DECLARING, W_WRITING, W_FAILED };

struct safetensors_set_writer {
    char *path;
    uint64_t max_bytes; /* 0: no limit */
    enum writer_state state;
    struct wtensor *t;
    int n, cap;
    struct safetensors_meta *meta;
    int n_meta, cap_meta;
    struct wshard *shards;
    int n_shards;
    int cur;           /* tensor receiving the next element */
    uint64_t cur_done; /* elements of tensor cur already written */
    uint64_t total_numel, done_numel, total_bytes;
    int published; /* the model is complete: abort keeps the shards */
};

void safetensors_set_writer_abort(struct safetensors_set_writer *w)
{
    if (!w)
        return;
    for (int k = 0; k < w->n_shards; k++) {
        safetensors_writer_abort(w->shards[k].w);
        if (w->shards[k].done && !w->published)
            unlink(w->shards[k].path);
        free(w->shards[k].file);
        free(w->shards[k].path);
    }
    for (int i = 0; i < w->n; i++)
        free(w->t[i].name);
    safetensors_meta_free(w->meta, w->n_meta);
    free(w->shards);
    free(w->t);
    free(w->path);
    free(w);
}

zt_status safetensors_set_writer_open(const char *path, uint64_t max_shard_bytes,
                                      struct safetensors_set_writer **out)
{
    *out = NULL;
    struct safetensors_set_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the writer", path);
    }
    w->max_bytes = max_shard_bytes;
    *out = w;
    return ZT_OK;
}

zt_status safetensors_set_writer_add(struct safetensors_set_writer *w, const char *name,
                                     enum zt_dtype dtype, int ndim, const uint64_t *shape)
{
    ZT_ASSERT(w && w->state == W_DECLARING);
    uint64_t nbytes;
    ZT_TRY(safetensors_check_tensor(w->path, name, dtype, ndim, shape, &nbytes));
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return zt_error_set(ZT_ERR_USAGE, "%s: tensor '%.200s' declared twice", w->path, name);
    if (nbytes > UINT64_MAX - w->total_bytes)
        return zt_error_set(ZT_ERR_USAGE, "%s: tensor '%.200s' takes the model past 2^64 bytes",
                            w->path, name);
    void *arr = w->t;
    int ok = safetensors_grow(&arr, &w->cap, w->n + 1, sizeof *w->t);
    w->t = arr;
    char *copy = ok ? strdup(name) : NULL;
    if (!copy)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot declare tensor '%.200s'", w->path, name);
    struct wtensor *t = &w->t[w->n++];
    *t = (struct wtensor){.name = copy, .dtype = dtype, .ndim = ndim, .nbytes = nbytes};
    t->numel = nbytes / zt_dtype_size(dtype);
    for (int i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    w->total_bytes += nbytes;
    w->total_numel += t->numel;
    return ZT_OK;
}

zt_status safetensors_set_writer_set_metadata(struct safetensors_set_writer *w, const char *key,
                                              const char *value)
{
    ZT_ASSERT(w && w->state == W_DECLARING);
    return safetensors_meta_set(&w->meta, &w->n_meta, &w->cap_meta, w->path, key, value);
}

/* huggingface_hub's cut (split_state_dict_into_shards_factory): in order
 * into the current shard until the next tensor would take it past the
 * limit, which closes it; a tensor over the limit on its own gets a shard
 * at once, ahead of the current one. Shards are numbered as they are
 * closed; returns how many. `pending` has room for every tensor. */
static int cut_shards(struct wtensor *t, int n, uint64_t max, int *pending)
{
    int n_shards = 0, n_pending = 0;
    uint64_t size = 0;
    for (int i = 0; i < n; i++) {
        if (max && t[i].nbytes > max) {
            t[i].shard = n_shards++;
            continue;
        }
        if (max && t[i].nbytes > max - size) {
            for (int j = 0; j < n_pending; j++)
                t[pending[j]].shard = n_shards;
            n_shards++;
            n_pending = 0;
            size = 0;
        }
        pending[n_pending++] = i;
        size += t[i].nbytes;
    }
    for (int j = 0; j < n_pending; j++)
        t[pending[j]].shard = n_shards;
    return n_pending || n_shards == 0 ? n_shards + 1 : n_shards;
}

/* The shards' names: PATH for one; else STEM-0000k-of-0000N.safetensors
 * in PATH's folder. */
static zt_status name_shards(struct safetensors_set_writer *w)
{
    const size_t dir = dir_len(w->path);
    const char *base = w->path + dir;
    size_t stem = strlen(base) - (zt_ends_with(base, SUFFIX) ? strlen(SUFFIX) : 0);
    for (int k = 0; k < w->n_shards; k++) {
        struct wshard *s = &w->shards[k];
        size_t n = stem + 2 * 20 + sizeof "--of-" SUFFIX;
        s->last = -1;
        s->file = malloc(n);
        if (s->file) {
            if (w->n_shards == 1)
                snprintf(s->file, n, "%s", base);
            else
                snprintf(s->file, n, "%.*s-%0*d-of-%0*d" SUFFIX, (int)stem, base, SHARD_DIGITS,
                         k + 1, SHARD_DIGITS, w->n_shards);
            s->path = join(w->path, dir, s->file);
        }
        if (!s->file || !s->path)
            return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the shard names", w->path);
    }
    for (int i = 0; i < w->n; i++)
        w->shards[w->t[i].shard].last = i;
    return ZT_OK;
}

/* Starts shard k's file if it is neither started nor done: its tensors
 * declared in order, the metadata, the header. */
static zt_status start_shard(struct safetensors_set_writer *w, int k)
{
    struct wshard *s = &w->shards[k];
    if (s->w || s->done)
        return ZT_OK;
    w->state = W_FAILED;
    ZT_TRY(safetensors_writer_open(s->path, &s->w));
    for (int i = 0; i < w->n; i++)
        if (w->t[i].shard == k)
            ZT_TRY(safetensors_writer_add(s->w, w->t[i].name, w->t[i].dtype, w->t[i].ndim,
                                          w->t[i].shape));
    for (int i = 0; i < w->n_meta; i++)
        ZT_TRY(safetensors_writer_set_metadata(s->w, w->meta[i].key, w->meta[i].value));
    ZT_TRY(safetensors_writer_begin_data(s->w));
    w->state = W_WRITING;
    return ZT_OK;
}

/* Completes shard k (started if it had no elements to write). */
static zt_status finish_shard(struct safetensors_set_writer *w, int k)
{
    struct wshard *s = &w->shards[k];
    ZT_TRY(start_shard(w, k));
    struct safetensors_writer *sw = s->w;
    s->w = NULL;
    w->state = W_FAILED;
    ZT_TRY(safetensors_writer_finish(sw));
    s->done = 1;
    w->state = W_WRITING;
    return ZT_OK;
}

/* Moves past the tensors that are complete (empty ones included),
 * completing each shard at its last tensor. */
static zt_status advance(struct safetensors_set_writer *w)
{
    while (w->cur < w->n && w->cur_done == w->t[w->cur].numel) {
        int k = w->t[w->cur].shard;
        if (w->shards[k].last == w->cur)
            ZT_TRY(finish_shard(w, k));
        w->cur++;
        w->cur_done = 0;
    }
    return ZT_OK;
}

zt_status safetensors_set_writer_begin_data(struct safetensors_set_writer *w)
{
    ZT_ASSERT(w && w->state == W_DECLARING);
    w->state = W_FAILED;
    int *pending = malloc((w->n > 0 ? (size_t)w->n : 1) * sizeof *pending);
    if (!pending)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the shard plan", w->path);
    int n_shards = cut_shards(w->t, w->n, w->max_bytes, pending);
    free(pending);
    w->shards = calloc((size_t)n_shards, sizeof *w->shards);
    if (!w->shards)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate %d shards", w->path, n_shards);
    w->n_shards = n_shards;
    ZT_TRY(name_shards(w));
    ZT_TRY(start_shard(w, w->n ? w->t[0].shard : 0));
    return advance(w);
}

int safetensors_set_writer_shard_count(const struct safetensors_set_writer *w)
{
    ZT_ASSERT(w->state != W_DECLARING);
    return w->n_shards;
}

zt_status safetensors_set_writer_write_f32(struct safetensors_set_writer *w, const float *src,
                                           uint64_t count)
{
    ZT_ASSERT(w && w->state == W_WRITING);
    if (count > w->total_numel - w->done_numel)
        return zt_error_set(ZT_ERR_USAGE,
                            "%s: %llu more elements given but only %llu of the declared "
                            "tensors remain",
                            w->path, (unsigned long long)count,
                            (unsigned long long)(w->total_numel - w->done_numel));
    while (count > 0) {
        ZT_ASSERT(w->cur < w->n);
        const struct wtensor *t = &w->t[w->cur];
        ZT_TRY(start_shard(w, t->shard));
        uint64_t m = t->numel - w->cur_done < count ? t->numel - w->cur_done : count;
        w->state = W_FAILED;
        ZT_TRY(safetensors_writer_write_f32(w->shards[t->shard].w, src, m));
        w->state = W_WRITING;
        src += m;
        count -= m;
        w->cur_done += m;
        w->done_numel += m;
        ZT_TRY(advance(w));
    }
    return ZT_OK;
}

static int wtensor_name_cmp(const void *a, const void *b)
{
    return strcmp((*(const struct wtensor *const *)a)->name,
                  (*(const struct wtensor *const *)b)->name);
}

/* The index as json.dumps(index, indent=2, sort_keys=True) + "\n" writes
 * it, the way save_pretrained does. */
static zt_status index_text(const struct safetensors_set_writer *w, struct json_text *b)
{
    const struct wtensor **sorted = malloc((w->n > 0 ? (size_t)w->n : 1) * sizeof *sorted);
    if (!sorted)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the index", w->path);
    for (int i = 0; i < w->n; i++)
        sorted[i] = &w->t[i];
    qsort(sorted, (size_t)w->n, sizeof *sorted, wtensor_name_cmp);
    json_text_printf(b, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n",
                     (unsigned long long)w->total_bytes);
    json_text_puts(b, "  \"weight_map\": {\n");
    for (int i = 0; i < w->n; i++) {
        json_text_puts(b, "    ");
        json_text_string(b, sorted[i]->name, JSON_ESCAPE_U);
        json_text_puts(b, ": ");
        json_text_string(b, w->shards[sorted[i]->shard].file, JSON_ESCAPE_U);
        json_text_puts(b, i + 1 < w->n ? ",\n" : "\n");
    }
    json_text_puts(b, "  }\n}\n");
    free(sorted);
    if (b->oom)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot build the index", w->path);
    return ZT_OK;
}

/* Removes `path` if it is there. */
static zt_status remove_stale(const char *path, const char *written)
{
    if (unlink(path) == 0 || errno == ENOENT)
        return ZT_OK;
    return zt_error_set(ZT_ERR_IO, "%s: written, but the older %s beside it cannot be removed: %s",
                        written, path, strerror(errno));
}

/* The index of a sharded model, then the stale file of the other form. */
static zt_status write_index(struct safetensors_set_writer *w)
{
    size_t len = strlen(w->path);
    char *index = join(w->path, len, INDEX_SUFFIX);
    if (!index)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the index name", w->path);
    zt_status st = ZT_OK;
    if (w->n_shards > 1) {
        struct json_text b = {0};
        st = index_text(w, &b);
        if (st == ZT_OK)
            st = atomic_file_write(index, b.p, b.len);
        free(b.p);
        w->published = st == ZT_OK;
        if (st == ZT_OK)
            st = remove_stale(w->path, index);
    } else {
        w->published = 1;
        st = remove_stale(index, w->path);
    }
    free(index);
    return st;
}

zt_status safetensors_set_writer_finish(struct safetensors_set_writer *w)
{
    ZT_ASSERT(w && w->state == W_WRITING);
    zt_status st = ZT_OK;
    if (w->done_numel < w->total_numel)
        st = zt_error_set(ZT_ERR_USAGE,
                          "%s: tensor '%.200s' is incomplete: %llu of %llu elements were written",
                          w->path, w->t[w->cur].name, (unsigned long long)w->done_numel,
                          (unsigned long long)w->total_numel);
    for (int k = 0; k < w->n_shards && st == ZT_OK; k++)
        if (!w->shards[k].done)
            st = finish_shard(w, k); /* a shard of empty tensors only */
    if (st == ZT_OK)
        st = write_index(w);
    safetensors_set_writer_abort(w);
    ZT_TRY(st);
    return ZT_OK;
}
