/* config/yaml_tree.c — YAML text to an owned, position-carrying tree.
 *
 * libyaml's document API does the parsing (and alias resolution); this file
 * copies the document into struct yaml_tree_node and translates libyaml's
 * errors, at this one boundary, into zt_status messages with file:line:col.
 * The file is read into memory first so that open and read failures are
 * ZT_ERR_IO with errno's text, and so that reader errors (bad UTF-8), which
 * libyaml reports as a byte offset, can be turned into a line and column.
 *
 * Ownership: a node owns its text, its item/key arrays and its children;
 * the tree owns the root and the origin strings. Every allocation failure
 * unwinds what was built and returns ZT_ERR_NOMEM.
 */
#include "yaml_tree.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* A config is a few levels deep and a few hundred nodes; these bounds only
 * stop hostile input (deep nesting, alias bombs) from eating the stack or
 * memory. */
enum { MAX_DEPTH = 64, MAX_NODES = 100000 };
#define MAX_FILE_BYTES (16u << 20)

struct convert {
    yaml_document_t *doc;
    const char *origin;
    int positions; /* 0: override text, whose line/col mean nothing */
    size_t count;
};

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

static struct yaml_tree_node *scalar_new(const char *origin, const char *text)
{
    struct yaml_tree_node *n = node_new(YAML_TREE_SCALAR, origin, 0, 0);
    if (n && !(n->text = dup_bytes(text, strlen(text)))) {
        free(n);
        return NULL;
    }
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

/* ---- libyaml document -> tree ---------------------------------------- */

static zt_status convert_node(struct convert *c, yaml_node_t *src, int depth,
                              struct yaml_tree_node **out);

static void mark_where(const struct convert *c, yaml_mark_t m, char *buf, size_t size)
{
    if (c->positions)
        snprintf(buf, size, "%s:%d:%d", c->origin, (int)m.line + 1, (int)m.column + 1);
    else
        snprintf(buf, size, "%s", c->origin);
}

static zt_status convert_scalar(yaml_node_t *src, const char *where, struct yaml_tree_node *n)
{
    const char *v = (const char *)src->data.scalar.value;
    size_t len = src->data.scalar.length;
    if (memchr(v, '\0', len))
        return zt_error_set(ZT_ERR_CONFIG, "%s: string contains a NUL character", where);
    n->quoted = src->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    n->text = dup_bytes(v, len);
    return n->text ? ZT_OK : nomem();
}

static zt_status convert_sequence(struct convert *c, yaml_node_t *src, int depth,
                                  struct yaml_tree_node *n)
{
    size_t count = (size_t)(src->data.sequence.items.top - src->data.sequence.items.start);
    n->items = calloc(count ? count : 1, sizeof *n->items);
    if (!n->items)
        return nomem();
    for (yaml_node_item_t *it = src->data.sequence.items.start; it < src->data.sequence.items.top;
         it++) {
        struct yaml_tree_node *child = NULL;
        ZT_TRY(convert_node(c, yaml_document_get_node(c->doc, *it), depth + 1, &child));
        n->items[n->n++] = child;
    }
    return ZT_OK;
}

static zt_status check_duplicate(const struct convert *c, const struct yaml_tree_node *map,
                                 const struct yaml_tree_node *key)
{
    char where[512];
    for (size_t i = 0; i < map->n; i++) {
        if (strcmp(map->keys[i]->text, key->text) != 0)
            continue;
        if (c->positions) {
            snprintf(where, sizeof where, "%s:%d:%d", key->origin, key->line, key->col);
            return zt_error_set(ZT_ERR_CONFIG, "%s: duplicate key '%s' (lines %d and %d)", where,
                                key->text, map->keys[i]->line, key->line);
        }
        return zt_error_set(ZT_ERR_CONFIG, "%s: duplicate key '%s'", key->origin, key->text);
    }
    return ZT_OK;
}

static zt_status convert_pair(struct convert *c, yaml_node_pair_t *pair, int depth,
                              struct yaml_tree_node *n)
{
    char where[512];
    yaml_node_t *ksrc = yaml_document_get_node(c->doc, pair->key);
    if (ksrc->type != YAML_SCALAR_NODE) {
        mark_where(c, ksrc->start_mark, where, sizeof where);
        return zt_error_set(ZT_ERR_CONFIG, "%s: mapping keys must be plain strings", where);
    }
    struct yaml_tree_node *key = NULL, *value = NULL;
    ZT_TRY(convert_node(c, ksrc, depth + 1, &key));
    zt_status s = check_duplicate(c, n, key);
    if (s == ZT_OK)
        s = convert_node(c, yaml_document_get_node(c->doc, pair->value), depth + 1, &value);
    if (s != ZT_OK) {
        node_free(key);
        return s;
    }
    n->keys[n->n] = key;
    n->items[n->n++] = value;
    return ZT_OK;
}

static zt_status convert_map(struct convert *c, yaml_node_t *src, int depth,
                             struct yaml_tree_node *n)
{
    size_t count = (size_t)(src->data.mapping.pairs.top - src->data.mapping.pairs.start);
    n->items = calloc(count ? count : 1, sizeof *n->items);
    n->keys = calloc(count ? count : 1, sizeof *n->keys);
    if (!n->items || !n->keys)
        return nomem();
    for (yaml_node_pair_t *p = src->data.mapping.pairs.start; p < src->data.mapping.pairs.top; p++)
        ZT_TRY(convert_pair(c, p, depth, n));
    return ZT_OK;
}

static zt_status convert_node(struct convert *c, yaml_node_t *src, int depth,
                              struct yaml_tree_node **out)
{
    char where[512];
    mark_where(c, src->start_mark, where, sizeof where);
    if (depth > MAX_DEPTH)
        return zt_error_set(ZT_ERR_CONFIG, "%s: nested deeper than %d levels", where, MAX_DEPTH);
    if (++c->count > MAX_NODES)
        return zt_error_set(ZT_ERR_CONFIG, "%s: more than %d nodes (after expanding aliases)",
                            where, MAX_NODES);
    int line = c->positions ? (int)src->start_mark.line + 1 : 0;
    int col = c->positions ? (int)src->start_mark.column + 1 : 0;
    static const enum yaml_tree_kind kinds[] = {[YAML_SCALAR_NODE] = YAML_TREE_SCALAR,
                                                [YAML_SEQUENCE_NODE] = YAML_TREE_SEQUENCE,
                                                [YAML_MAPPING_NODE] = YAML_TREE_MAP};
    ZT_ASSERT(src->type == YAML_SCALAR_NODE || src->type == YAML_SEQUENCE_NODE ||
              src->type == YAML_MAPPING_NODE);
    struct yaml_tree_node *n = node_new(kinds[src->type], c->origin, line, col);
    if (!n)
        return nomem();
    zt_status s;
    if (src->type == YAML_SCALAR_NODE)
        s = convert_scalar(src, where, n);
    else if (src->type == YAML_SEQUENCE_NODE)
        s = convert_sequence(c, src, depth, n);
    else
        s = convert_map(c, src, depth, n);
    if (s != ZT_OK) {
        node_free(n);
        return s;
    }
    *out = n;
    return ZT_OK;
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
 * stray "---" that would otherwise silently drop half of the config. */
static zt_status check_single_document(yaml_parser_t *p, const char *origin, int positions,
                                       const char *text, size_t len)
{
    yaml_document_t doc;
    if (!yaml_parser_load(p, &doc))
        return syntax_error(p, origin, positions, text, len);
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    zt_status s = ZT_OK;
    if (root) {
        char where[512];
        struct convert c = {&doc, origin, positions, 0};
        mark_where(&c, root->start_mark, where, sizeof where);
        s = zt_error_set(ZT_ERR_CONFIG, "%s: a second YAML document; only one is allowed", where);
    }
    yaml_document_delete(&doc);
    return s;
}

static zt_status parse_text(const char *origin, int positions, const char *text, size_t len,
                            struct yaml_tree_node **root)
{
    yaml_parser_t p;
    yaml_document_t doc;
    *root = NULL;
    if (!yaml_parser_initialize(&p))
        return nomem();
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    if (!yaml_parser_load(&p, &doc)) {
        zt_status s = syntax_error(&p, origin, positions, text, len);
        yaml_parser_delete(&p);
        return s;
    }
    yaml_node_t *src = yaml_document_get_root_node(&doc);
    zt_status s = ZT_OK;
    if (src) {
        struct convert c = {&doc, origin, positions, 0};
        s = convert_node(&c, src, 0, root);
    }
    yaml_document_delete(&doc);
    if (s == ZT_OK && src)
        s = check_single_document(&p, origin, positions, text, len);
    yaml_parser_delete(&p);
    if (s != ZT_OK) {
        node_free(*root);
        *root = NULL;
    }
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

static zt_status read_all(const char *path, char **text, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return zt_error_set(ZT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
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
            s = zt_error_set(ZT_ERR_IO, "cannot read %s: %s", path, strerror(errno));
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
    if (!value && !(value = scalar_new(origin, "")))
        return nomem();
    zt_status s = graft(t, assignment, origin, assignment, key_len, value);
    if (s != ZT_OK)
        node_free(value);
    return s;
}
