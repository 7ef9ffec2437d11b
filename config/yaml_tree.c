/* config/yaml_tree.c — YAML text to an owned, position-carrying tree.
 *
 * libyaml parses; this file builds struct yaml_tree_node from its events
 * (resolving aliases itself) and translates libyaml's errors, at this one
 * boundary, into zt_status messages with file:line:col.
 * The file is read into memory first so that open and read failures are
 * reported with errno's text, and so that reader errors (bad UTF-8), which
 * libyaml reports as a byte offset, can be turned into a line and column.
 *
 * Ownership: a node owns its text, its item/key arrays and its children;
 * the tree owns the root and the origin strings. Every allocation failure
 * unwinds what was built and returns ZT_ERR_NOMEM.
 */
#include "yaml_tree.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* A config is a few levels deep and a few hundred nodes; these bounds only
 * stop hostile input (deep nesting, alias bombs) from eating time, the
 * stack or memory. */
enum { MAX_DEPTH = 64, MAX_NODES = 100000 };
#define MAX_FILE_BYTES (16u << 20)

static zt_status nomem(void)
{
    return zt_error_set(ZT_ERR_NOMEM, "yaml_tree: out of memory");
}

static char *dup_bytes(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p)
        return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static void node_free(struct yaml_tree_node *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n; i++) {
        node_free(n->items[i]);
        if (n->keys)
            node_free(n->keys[i]);
    }
    free(n->items);
    free(n->keys);
    free(n->text);
    free(n);
}

static struct yaml_tree_node *node_new(enum yaml_tree_kind kind, const char *origin, int line,
                                       int col)
{
    struct yaml_tree_node *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->kind = kind;
    n->origin = origin;
    n->line = line;
    n->col = col;
    return n;
}

static const char *origin_add(struct yaml_tree *t, const char *text)
{
    char **grown = realloc(t->origins, (t->n_origins + 1) * sizeof *grown);
    if (!grown)
        return NULL;
    t->origins = grown;
    char *copy = dup_bytes(text, strlen(text));
    if (!copy)
        return NULL;
    t->origins[t->n_origins++] = copy;
    return copy;
}

void yaml_tree_where(const struct yaml_tree_node *n, char *buf, size_t size)
{
    if (n->line > 0)
        snprintf(buf, size, "%s:%d:%d", n->origin, n->line, n->col);
    else
        snprintf(buf, size, "%s", n->origin);
}

void yaml_tree_describe(const struct yaml_tree_node *n, char *buf, size_t size)
{
    if (n->kind == YAML_TREE_MAP)
        snprintf(buf, size, "a mapping");
    else if (n->kind == YAML_TREE_SEQUENCE)
        snprintf(buf, size, "a list");
    else if (yaml_tree_is_null(n))
        snprintf(buf, size, "null");
    else if (strlen(n->text) > 40)
        snprintf(buf, size, "%s'%.37s...'", n->quoted ? "the string " : "", n->text);
    else
        snprintf(buf, size, "%s'%s'", n->quoted ? "the string " : "", n->text);
}

int yaml_tree_is_null(const struct yaml_tree_node *n)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
    if (n->kind != YAML_TREE_SCALAR || n->quoted)
        return 0;
    for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
        if (strcmp(n->text, nulls[i]) == 0)
            return 1;
    return 0;
}

/* ---- libyaml events -> tree ------------------------------------------- */

/* The tree is built from libyaml's event stream rather than its document
 * API, so that a limit is enforced the moment input crosses it: loading the
 * whole document first costs time quadratic in the nesting depth inside
 * libyaml (its scanner walks one saved key per open flow level on every
 * token), 25 s for 20000 levels of "[", before any check could run.
 * Nodes are attached to their parent as soon as they start, so freeing the
 * root frees everything built so far; the stack of open collections is as
 * deep as the depth limit, so it needs no allocation. */

/* One open collection. */
struct frame {
    struct yaml_tree_node *node;
    struct yaml_tree_node *key; /* MAP: a key waiting for its value; owned here */
    size_t cap;                 /* room in node->items (and node->keys) */
};

/* An anchor name and the node it names; an open-addressing hash table, so
 * that each alias costs one lookup however many anchors there are. */
struct anchor {
    char *name;
    const struct yaml_tree_node *node;
};

struct builder {
    const char *origin;
    int positions; /* 0: override text, whose line/col mean nothing */
    size_t count;  /* nodes made, copies of aliases included */
    struct frame stack[MAX_DEPTH + 1];
    int depth; /* open collections */
    struct yaml_tree_node *root;
    struct anchor *anchors;
    size_t n_anchors, cap_anchors; /* cap: 0 or a power of two */
};

static void mark_where(const struct builder *b, yaml_mark_t m, char *buf, size_t size)
{
    if (b->positions)
        snprintf(buf, size, "%s:%d:%d", b->origin, (int)m.line + 1, (int)m.column + 1);
    else
        snprintf(buf, size, "%s", b->origin);
}

static void builder_free(struct builder *b)
{
    for (int i = 0; i < b->depth; i++)
        node_free(b->stack[i].key);
    node_free(b->root);
    for (size_t i = 0; i < b->cap_anchors; i++)
        free(b->anchors[i].name);
    free(b->anchors);
}

static size_t hash_name(const char *s)
{
    uint64_t h = 14695981039346656037u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return (size_t)h;
}

/* The slot for `name`: where it is, or the empty slot where it belongs. */
static struct anchor *anchor_slot(struct anchor *table, size_t cap, const char *name)
{
    size_t i = hash_name(name) & (cap - 1);
    while (table[i].name && strcmp(table[i].name, name) != 0)
        i = (i + 1) & (cap - 1);
    return &table[i];
}

static zt_status anchors_grow(struct builder *b)
{
    size_t cap = b->cap_anchors ? 2 * b->cap_anchors : 16;
    struct anchor *table = calloc(cap, sizeof *table);
    if (!table)
        return nomem();
    for (size_t i = 0; i < b->cap_anchors; i++)
        if (b->anchors[i].name)
            *anchor_slot(table, cap, b->anchors[i].name) = b->anchors[i];
    free(b->anchors);
    b->anchors = table;
    b->cap_anchors = cap;
    return ZT_OK;
}

/* Names `node`; a later anchor of the same name replaces it, as YAML says. */
static zt_status anchor_add(struct builder *b, const yaml_char_t *anchor,
                            const struct yaml_tree_node *node)
{
    if (!anchor)
        return ZT_OK;
    if (2 * (b->n_anchors + 1) > b->cap_anchors)
        ZT_TRY(anchors_grow(b));
    struct anchor *a = anchor_slot(b->anchors, b->cap_anchors, (const char *)anchor);
    if (!a->name) {
        if (!(a->name = dup_bytes((const char *)anchor, strlen((const char *)anchor))))
            return nomem();
        b->n_anchors++;
    }
    a->node = node;
    return ZT_OK;
}

static const struct yaml_tree_node *anchor_find(const struct builder *b, const char *name)
{
    if (!b->cap_anchors)
        return NULL;
    return anchor_slot(b->anchors, b->cap_anchors, name)->node;
}

/* Counts one more node at `depth`, or says which limit it crosses. */
static zt_status count_node(struct builder *b, int depth, const char *where)
{
    if (depth > MAX_DEPTH)
        return zt_error_set(ZT_ERR_CONFIG, "%s: nested deeper than %d levels", where, MAX_DEPTH);
    if (++b->count > MAX_NODES)
        return zt_error_set(ZT_ERR_CONFIG, "%s: more than %d nodes (after expanding aliases)",
                            where, MAX_NODES);
    return ZT_OK;
}

static zt_status push_item(struct yaml_tree_node *parent, size_t *cap, struct yaml_tree_node *key,
                           struct yaml_tree_node *value)
{
    if (parent->n == *cap) {
        size_t grown_cap = *cap ? 2 * *cap : 4;
        struct yaml_tree_node **items = realloc(parent->items, grown_cap * sizeof *items);
        if (!items)
            return nomem();
        parent->items = items;
        if (parent->kind == YAML_TREE_MAP) {
            struct yaml_tree_node **keys = realloc(parent->keys, grown_cap * sizeof *keys);
            if (!keys)
                return nomem();
            parent->keys = keys;
        }
        *cap = grown_cap;
    }
    if (parent->kind == YAML_TREE_MAP)
        parent->keys[parent->n] = key;
    parent->items[parent->n++] = value;
    return ZT_OK;
}

/* Hands `n` to the innermost open collection (or makes it the root); takes
 * ownership of n whatever happens. A map's keys alternate with its values. */
static zt_status attach(struct builder *b, struct yaml_tree_node *n, yaml_mark_t mark)
{
    if (b->depth == 0) {
        b->root = n;
        return ZT_OK;
    }
    struct frame *f = &b->stack[b->depth - 1];
    if (f->node->kind == YAML_TREE_MAP && !f->key) {
        if (n->kind != YAML_TREE_SCALAR) {
            char where[512];
            node_free(n);
            mark_where(b, mark, where, sizeof where);
            return zt_error_set(ZT_ERR_CONFIG, "%s: mapping keys must be plain strings", where);
        }
        f->key = n;
        return ZT_OK;
    }
    zt_status s = push_item(f->node, &f->cap, f->key, n);
    if (s != ZT_OK) {
        node_free(n);
        return s;
    }
    f->key = NULL;
    return ZT_OK;
}

static struct yaml_tree_node *event_node(const struct builder *b, enum yaml_tree_kind kind,
                                         yaml_mark_t m)
{
    return node_new(kind, b->origin, b->positions ? (int)m.line + 1 : 0,
                    b->positions ? (int)m.column + 1 : 0);
}

static zt_status on_scalar(struct builder *b, const yaml_event_t *e)
{
    char where[512];
    const char *v = (const char *)e->data.scalar.value;
    size_t len = e->data.scalar.length;
    mark_where(b, e->start_mark, where, sizeof where);
    ZT_TRY(count_node(b, b->depth, where));
    if (memchr(v, '\0', len))
        return zt_error_set(ZT_ERR_CONFIG, "%s: string contains a NUL character", where);
    struct yaml_tree_node *n = event_node(b, YAML_TREE_SCALAR, e->start_mark);
    if (!n || !(n->text = dup_bytes(v, len))) {
        free(n);
        return nomem();
    }
    n->quoted = e->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    ZT_TRY(attach(b, n, e->start_mark));
    return anchor_add(b, e->data.scalar.anchor, n);
}

static zt_status on_collection_start(struct builder *b, const yaml_event_t *e)
{
    char where[512];
    int is_map = e->type == YAML_MAPPING_START_EVENT;
    mark_where(b, e->start_mark, where, sizeof where);
    ZT_TRY(count_node(b, b->depth, where));
    struct yaml_tree_node *n =
        event_node(b, is_map ? YAML_TREE_MAP : YAML_TREE_SEQUENCE, e->start_mark);
    if (!n)
        return nomem();
    ZT_TRY(attach(b, n, e->start_mark));
    /* count_node kept depth <= MAX_DEPTH, so the stack has room */
    b->stack[b->depth++] = (struct frame){.node = n};
    return anchor_add(b, is_map ? e->data.mapping_start.anchor : e->data.sequence_start.anchor, n);
}

struct key_ref {
    const char *text;
    size_t index;
};

static int key_ref_cmp(const void *pa, const void *pb)
{
    const struct key_ref *a = pa, *b = pb;
    int c = strcmp(a->text, b->text);
    return c ? c : (a->index > b->index) - (a->index < b->index);
}

/* A duplicate key in a finished map, found by sorting (a linear scan per
 * key would be quadratic in a map of many keys); the one reported is the
 * first repetition in file order. */
static zt_status check_duplicates(const struct builder *b, const struct yaml_tree_node *map)
{
    if (map->n < 2)
        return ZT_OK;
    struct key_ref *refs = malloc(map->n * sizeof *refs);
    if (!refs)
        return nomem();
    for (size_t i = 0; i < map->n; i++)
        refs[i] = (struct key_ref){map->keys[i]->text, i};
    qsort(refs, map->n, sizeof *refs, key_ref_cmp);
    size_t first = 0, again = SIZE_MAX;
    for (size_t i = 1; i < map->n; i++)
        if (strcmp(refs[i].text, refs[i - 1].text) == 0 && refs[i].index < again) {
            again = refs[i].index;
            first = refs[i - 1].index;
        }
    free(refs);
    if (again == SIZE_MAX)
        return ZT_OK;
    const struct yaml_tree_node *k = map->keys[again];
    if (!b->positions)
        return zt_error_set(ZT_ERR_CONFIG, "%s: duplicate key '%s'", k->origin, k->text);
    return zt_error_set(ZT_ERR_CONFIG, "%s:%d:%d: duplicate key '%s' (lines %d and %d)", k->origin,
                        k->line, k->col, k->text, map->keys[first]->line, k->line);
}

static zt_status on_collection_end(struct builder *b)
{
    ZT_ASSERT(b->depth > 0);
    const struct yaml_tree_node *n = b->stack[b->depth - 1].node;
    if (n->kind == YAML_TREE_MAP)
        ZT_TRY(check_duplicates(b, n));
    b->depth--;
    return ZT_OK;
}

/* A copy of an aliased node, `depth` levels down; the limits apply to the
 * copy as to any node, reported at the alias. */
static zt_status copy_node(struct builder *b, const struct yaml_tree_node *src, int depth,
                           const char *where, struct yaml_tree_node **out)
{
    *out = NULL;
    ZT_TRY(count_node(b, depth, where));
    struct yaml_tree_node *n = node_new(src->kind, src->origin, src->line, src->col);
    if (!n)
        return nomem();
    n->quoted = src->quoted;
    zt_status s = ZT_OK;
    if (src->kind == YAML_TREE_SCALAR && !(n->text = dup_bytes(src->text, strlen(src->text))))
        s = nomem();
    size_t cap = 0;
    for (size_t i = 0; i < src->n && s == ZT_OK; i++) {
        struct yaml_tree_node *key = NULL, *value = NULL;
        if (src->keys)
            s = copy_node(b, src->keys[i], depth + 1, where, &key);
        if (s == ZT_OK)
            s = copy_node(b, src->items[i], depth + 1, where, &value);
        if (s == ZT_OK)
            s = push_item(n, &cap, key, value);
        if (s != ZT_OK) {
            node_free(key);
            node_free(value);
        }
    }
    if (s != ZT_OK) {
        node_free(n);
        return s;
    }
    *out = n;
    return ZT_OK;
}

static zt_status on_alias(struct builder *b, const yaml_event_t *e)
{
    char where[512];
    const char *name = (const char *)e->data.alias.anchor;
    mark_where(b, e->start_mark, where, sizeof where);
    const struct yaml_tree_node *target = anchor_find(b, name);
    if (!target)
        return zt_error_set(ZT_ERR_CONFIG, "%s: undefined alias *%s", where, name);
    for (int i = 0; i < b->depth; i++)
        if (b->stack[i].node == target)
            return zt_error_set(ZT_ERR_CONFIG, "%s: alias *%s refers to a node that contains it",
                                where, name);
    struct yaml_tree_node *copy = NULL;
    ZT_TRY(copy_node(b, target, b->depth, where, &copy));
    return attach(b, copy, e->start_mark);
}

static zt_status on_event(struct builder *b, const yaml_event_t *e)
{
    switch (e->type) {
    case YAML_SCALAR_EVENT:
        return on_scalar(b, e);
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT:
        return on_collection_start(b, e);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        return on_collection_end(b);
    case YAML_ALIAS_EVENT:
        return on_alias(b, e);
    default:
        return ZT_OK; /* stream and document boundaries */
    }
}

/* ---- parsing ----------------------------------------------------------- */

/* Line and column (1-based) of byte `offset` of the text. */
static void offset_position(const char *text, size_t len, size_t offset, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < offset && i < len; i++) {
        if (text[i] == '\n') {
            ++*line;
            *col = 1;
        } else {
            ++*col;
        }
    }
}

static zt_status syntax_error(const yaml_parser_t *p, const char *origin, int positions,
                              const char *text, size_t len)
{
    if (p->error == YAML_MEMORY_ERROR)
        return nomem();
    const char *problem = p->problem ? p->problem : "malformed input";
    int line = (int)p->problem_mark.line + 1, col = (int)p->problem_mark.column + 1;
    if (p->error == YAML_READER_ERROR)
        offset_position(text, len, p->problem_offset, &line, &col);
    char context[256] = "";
    if (p->context && positions && p->context_mark.line != p->problem_mark.line)
        snprintf(context, sizeof context, " %s (at line %d)", p->context,
                 (int)p->context_mark.line + 1);
    else if (p->context)
        snprintf(context, sizeof context, " %s", p->context);
    if (!positions)
        return zt_error_set(ZT_ERR_CONFIG, "%s: YAML syntax error: %s%s", origin, problem, context);
    return zt_error_set(ZT_ERR_CONFIG, "%s:%d:%d: YAML syntax error: %s%s", origin, line, col,
                        problem, context);
}

/* A stream must hold at most one document: a second one is almost always a
 * stray "---" that would otherwise silently drop half of the config. Called
 * at the second document's start; reports at its first node. */
static zt_status second_document(const struct builder *b, yaml_parser_t *p, const char *text,
                                 size_t len)
{
    yaml_event_t e;
    char where[512];
    if (!yaml_parser_parse(p, &e))
        return syntax_error(p, b->origin, b->positions, text, len);
    mark_where(b, e.start_mark, where, sizeof where);
    yaml_event_delete(&e);
    return zt_error_set(ZT_ERR_CONFIG, "%s: a second YAML document; only one is allowed", where);
}

/* Feeds every event of the stream to the builder, stopping at the first
 * problem, so that work is linear in the input read so far. */
static zt_status build(struct builder *b, yaml_parser_t *p, const char *text, size_t len)
{
    int documents = 0;
    for (;;) {
        yaml_event_t e;
        if (!yaml_parser_parse(p, &e))
            return syntax_error(p, b->origin, b->positions, text, len);
        int end = e.type == YAML_STREAM_END_EVENT;
        zt_status s = ZT_OK;
        if (e.type == YAML_DOCUMENT_START_EVENT && documents++ > 0)
            s = second_document(b, p, text, len);
        else
            s = on_event(b, &e);
        yaml_event_delete(&e);
        if (s != ZT_OK || end)
            return s;
    }
}

static zt_status parse_text(const char *origin, int positions, const char *text, size_t len,
                            struct yaml_tree_node **root)
{
    yaml_parser_t p;
    struct builder b = {.origin = origin, .positions = positions};
    *root = NULL;
    if (!yaml_parser_initialize(&p))
        return nomem();
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    zt_status s = build(&b, &p, text, len);
    yaml_parser_delete(&p);
    if (s == ZT_OK) {
        *root = b.root;
        b.root = NULL;
    }
    builder_free(&b);
    return s;
}

zt_status yaml_tree_load_string(const char *origin, const char *text, size_t len,
                                struct yaml_tree **out)
{
    *out = NULL;
    struct yaml_tree *t = calloc(1, sizeof *t);
    if (!t)
        return nomem();
    const char *o = origin_add(t, origin);
    zt_status s = o ? parse_text(o, 1, text, len, &t->root) : nomem();
    if (s != ZT_OK) {
        yaml_tree_free(t);
        return s;
    }
    *out = t;
    return ZT_OK;
}

/* The whole file. A path that cannot be opened or read is the user's to fix
 * (a typo, a directory, permissions), so it is a configuration error, exit
 * status 2, like every other problem with what the command line names. */
static zt_status read_all(const char *path, char **text, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return zt_error_set(ZT_ERR_CONFIG, "cannot open the configuration file %s: %s", path,
                            strerror(errno));
    size_t cap = 4096, used = 0;
    char *buf = malloc(cap);
    zt_status s = buf ? ZT_OK : nomem();
    while (s == ZT_OK) {
        if (used == cap) {
            char *grown = cap < MAX_FILE_BYTES ? realloc(buf, cap * 2) : NULL;
            if (!grown) {
                s = cap < MAX_FILE_BYTES ? nomem()
                                         : zt_error_set(ZT_ERR_CONFIG, "%s: larger than %u bytes",
                                                        path, MAX_FILE_BYTES);
                break;
            }
            buf = grown;
            cap *= 2;
        }
        size_t got = fread(buf + used, 1, cap - used, f);
        used += got;
        if (got == 0 && ferror(f))
            s = zt_error_set(ZT_ERR_CONFIG, "cannot read the configuration file %s: %s", path,
                             strerror(errno));
        else if (got == 0)
            break;
    }
    fclose(f);
    if (s != ZT_OK) {
        free(buf);
        return s;
    }
    *text = buf;
    *len = used;
    return ZT_OK;
}

zt_status yaml_tree_load_file(const char *path, struct yaml_tree **out)
{
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    ZT_TRY(read_all(path, &text, &len));
    zt_status s = yaml_tree_load_string(path, text, len, out);
    free(text);
    return s;
}

void yaml_tree_free(struct yaml_tree *t)
{
    if (!t)
        return;
    node_free(t->root);
    for (size_t i = 0; i < t->n_origins; i++)
        free(t->origins[i]);
    free(t->origins);
    free(t);
}

/* ---- lookup and overrides ---------------------------------------------- */

static long find_key(const struct yaml_tree_node *map, const char *key, size_t key_len)
{
    if (!map || map->kind != YAML_TREE_MAP)
        return -1;
    for (size_t i = 0; i < map->n; i++)
        if (strlen(map->keys[i]->text) == key_len && memcmp(map->keys[i]->text, key, key_len) == 0)
            return (long)i;
    return -1;
}

const struct yaml_tree_node *yaml_tree_get(const struct yaml_tree_node *map, const char *key)
{
    long i = find_key(map, key, strlen(key));
    return i < 0 ? NULL : map->items[i];
}

const struct yaml_tree_node *yaml_tree_lookup(const struct yaml_tree *t, const char *path)
{
    const struct yaml_tree_node *cur = t->root;
    while (cur) {
        const char *dot = strchr(path, '.');
        size_t len = dot ? (size_t)(dot - path) : strlen(path);
        long i = find_key(cur, path, len);
        cur = i < 0 ? NULL : cur->items[i];
        if (!dot)
            return cur;
        path = dot + 1;
    }
    return NULL;
}

/* Appends key -> value to the map; takes ownership of value only on
 * success. */
static zt_status map_append(struct yaml_tree_node *map, const char *origin, const char *key,
                            size_t key_len, struct yaml_tree_node *value)
{
    struct yaml_tree_node **items = realloc(map->items, (map->n + 1) * sizeof *items);
    if (!items)
        return nomem();
    map->items = items;
    struct yaml_tree_node **keys = realloc(map->keys, (map->n + 1) * sizeof *keys);
    if (!keys)
        return nomem();
    map->keys = keys;
    struct yaml_tree_node *k = node_new(YAML_TREE_SCALAR, origin, 0, 0);
    if (!k || !(k->text = dup_bytes(key, key_len))) {
        free(k);
        return nomem();
    }
    map->keys[map->n] = k;
    map->items[map->n++] = value;
    return ZT_OK;
}

static zt_status check_key_path(const char *assignment, const char *key, size_t key_len)
{
    if (key_len == 0)
        return zt_error_set(ZT_ERR_CONFIG, "--set %s: expected key.path=value", assignment);
    for (size_t i = 0; i <= key_len; i++)
        if ((i == key_len || key[i] == '.') && (i == 0 || key[i - 1] == '.'))
            return zt_error_set(ZT_ERR_CONFIG, "--set %s: empty component in key path '%.*s'",
                                assignment, (int)key_len, key);
    return ZT_OK;
}

/* Descends one component from `map`, creating a map where the key is absent
 * or null. */
static zt_status descend(const char *assignment, const char *origin, struct yaml_tree_node *map,
                         const char *key, const char *comp, size_t comp_len,
                         struct yaml_tree_node **next)
{
    long i = find_key(map, comp, comp_len);
    if (i >= 0 && !yaml_tree_is_null(map->items[i])) {
        if (map->items[i]->kind != YAML_TREE_MAP) {
            char got[64];
            yaml_tree_describe(map->items[i], got, sizeof got);
            return zt_error_set(ZT_ERR_CONFIG, "--set %s: '%.*s' is %s, not a mapping", assignment,
                                (int)(comp + comp_len - key), key, got);
        }
        *next = map->items[i];
        return ZT_OK;
    }
    struct yaml_tree_node *created = node_new(YAML_TREE_MAP, origin, 0, 0);
    if (!created)
        return nomem();
    if (i >= 0) {
        node_free(map->items[i]);
        map->items[i] = created;
    } else if (map_append(map, origin, comp, comp_len, created) != ZT_OK) {
        free(created);
        return ZT_ERR_NOMEM;
    }
    *next = created;
    return ZT_OK;
}

static zt_status graft(struct yaml_tree *t, const char *assignment, const char *origin,
                       const char *key, size_t key_len, struct yaml_tree_node *value)
{
    if (!t->root && !(t->root = node_new(YAML_TREE_MAP, origin, 0, 0)))
        return nomem();
    if (t->root->kind != YAML_TREE_MAP)
        return zt_error_set(ZT_ERR_CONFIG, "--set %s: the top level of the file is not a mapping",
                            assignment);
    struct yaml_tree_node *map = t->root;
    const char *comp = key;
    for (;;) {
        const char *dot = memchr(comp, '.', (size_t)(key + key_len - comp));
        size_t comp_len = dot ? (size_t)(dot - comp) : (size_t)(key + key_len - comp);
        if (!dot) {
            long i = find_key(map, comp, comp_len);
            if (i < 0)
                return map_append(map, origin, comp, comp_len, value);
            node_free(map->items[i]);
            map->items[i] = value;
            return ZT_OK;
        }
        ZT_TRY(descend(assignment, origin, map, key, comp, comp_len, &map));
        comp = dot + 1;
    }
}

zt_status yaml_tree_set_path(struct yaml_tree *t, const char *assignment)
{
    const char *eq = strchr(assignment, '=');
    if (!eq)
        return zt_error_set(ZT_ERR_CONFIG, "--set %s: expected key.path=value", assignment);
    size_t key_len = (size_t)(eq - assignment);
    ZT_TRY(check_key_path(assignment, assignment, key_len));

    size_t label_len = strlen(assignment) + 7;
    char *label = malloc(label_len);
    if (!label)
        return nomem();
    snprintf(label, label_len, "--set %s", assignment);
    const char *origin = origin_add(t, label);
    free(label);
    if (!origin)
        return nomem();

    struct yaml_tree_node *value = NULL;
    ZT_TRY(parse_text(origin, 0, eq + 1, strlen(eq + 1), &value));
    /* "key=" is almost always a shell variable that expanded to nothing;
     * taking it as null would silently restore the default. */
    if (!value)
        return zt_error_set(ZT_ERR_CONFIG,
                            "--set %s: empty value (give a value, or null to restore the default)",
                            assignment);
    zt_status s = graft(t, assignment, origin, assignment, key_len, value);
    if (s != ZT_OK)
        node_free(value);
    return s;
}

int yaml_tree_bool(const struct yaml_tree_node *v, int *out)
{
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No", "NO"};
    if (v->kind != YAML_TREE_SCALAR || v->quoted)
        return 0;
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcmp(v->text, yes[i]) == 0 || strcmp(v->text, no[i]) == 0) {
            *out = strcmp(v->text, yes[i]) == 0;
            return 1;
        }
    }
    return 0;
}
