/* config/yaml_tree.h — a YAML document as an owned tree that remembers
 * where every node came from.
 *
 * The config walk wants plain pointers, the position of each node for its
 * messages, and the freedom to graft `--set key.path=value` overrides into
 * the tree; so libyaml's events are built into this small tree once and
 * libyaml is done with.
 *
 * Every node carries its origin: the file name with a 1-based line and
 * column, or, for nodes made from an override, the text "--set a.b=c" with
 * line 0. yaml_tree_where() turns that into the prefix of an error message.
 * Origin strings are owned by the tree; nodes only point at them.
 *
 * Scalars keep their text and whether they were quoted (a quoted scalar is
 * always a string; only plain scalars may be numbers, booleans or null).
 * Maps keep their keys as scalar nodes, in file order, without duplicates
 * (a duplicate key is a parse error). Aliases are expanded into copies,
 * with a cap on the total node count so that an alias bomb is an error
 * rather than an exhausted machine; nesting deeper than a config needs
 * (64 levels, copies included) is also an error. Each limit is checked as
 * the input is read, so hostile input is refused in time linear in what was
 * read before the limit.
 */
#ifndef ZT_CONFIG_YAML_TREE_H
#define ZT_CONFIG_YAML_TREE_H

#include <stddef.h>

#include "../common/status.h"

enum yaml_tree_kind { YAML_TREE_SCALAR, YAML_TREE_SEQUENCE, YAML_TREE_MAP };

struct yaml_tree_node {
    enum yaml_tree_kind kind;
    const char *origin;            /* file name or "--set a.b=c"; owned by the tree */
    int line, col;                 /* 1-based; 0 for nodes made from an override */
    char *text;                    /* SCALAR: the value, never NULL */
    int quoted;                    /* SCALAR: quoted or block style, so always a string */
    size_t n;                      /* SEQUENCE: items; MAP: pairs */
    struct yaml_tree_node **items; /* SEQUENCE: the items; MAP: the values */
    struct yaml_tree_node **keys;  /* MAP: the keys (scalar nodes) */
};

struct yaml_tree {
    struct yaml_tree_node *root; /* NULL for an empty document */
    char **origins;              /* every origin string the nodes point at */
    size_t n_origins;
};

/* Reads and parses the YAML (or JSON) file `path` into a new tree, *out,
 * to be released with yaml_tree_free. An empty file gives a tree with a NULL
 * root. Errors (ZT_ERR_CONFIG, exit status 2): "cannot open the
 * configuration file FILE: ..." or "cannot read ...", "FILE:LINE:COL: YAML
 * syntax error: ...", duplicate keys (naming both lines), more than one
 * document, non-scalar keys, undefined or self-containing aliases, too deep
 * or too large after alias expansion; ZT_ERR_NOMEM. On error *out is NULL. */
zt_status yaml_tree_load_file(const char *path, struct yaml_tree **out);

/* Parses `len` bytes of YAML text with positions reported against the name
 * `origin` (copied). Same ownership and errors as yaml_tree_load_file,
 * without the I/O ones. */
zt_status yaml_tree_load_string(const char *origin, const char *text, size_t len,
                                struct yaml_tree **out);

/* Applies one override "key.path=value": the value is parsed as YAML (so
 * "3e-4", "[0.9, 0.95]", "true", "{a: 1}" work) and replaces or creates the
 * entry, creating missing intermediate maps (a null value on the way counts
 * as missing). New nodes have the origin "--set key.path=value"; an empty
 * tree gets a map root. Errors (ZT_ERR_CONFIG, message starting
 * "--set ASSIGNMENT: "): no '=', an empty key component, an empty value
 * ("key=": null must be written out), a value that is not valid YAML, a
 * path through a scalar or list; ZT_ERR_NOMEM. On error the
 * tree is unchanged or has gained only empty intermediate maps. */
zt_status yaml_tree_set_path(struct yaml_tree *t, const char *assignment);

/* The value for `key` in the map `map`, or NULL when absent or when `map`
 * is NULL or not a map. Borrowed from the tree. */
const struct yaml_tree_node *yaml_tree_get(const struct yaml_tree_node *map, const char *key);

/* The node at the dotted path "a.b.c" from the root, or NULL. Borrowed. */
const struct yaml_tree_node *yaml_tree_lookup(const struct yaml_tree *t, const char *path);

/* True for a plain scalar that YAML reads as null: "", "~", "null", "Null",
 * "NULL". A quoted "null" is a string. */
int yaml_tree_is_null(const struct yaml_tree_node *n);

/* Reads a plain (unquoted) scalar true/True/TRUE/yes/Yes/YES or
 * false/.../no into *out (1 or 0); returns 0, leaving *out alone, for
 * anything else. */
int yaml_tree_bool(const struct yaml_tree_node *n, int *out);

/* Writes the position prefix of `n` into buf ("run.yaml:14:3" or
 * "--set a.b=c"), truncated to `size`. */
void yaml_tree_where(const struct yaml_tree_node *n, char *buf, size_t size);

/* "a mapping", "a list" or "'TEXT'" (the scalar quoted, shortened when
 * long), for "expected X, got Y" messages; written into buf. */
void yaml_tree_describe(const struct yaml_tree_node *n, char *buf, size_t size);

/* Frees the tree, its nodes and origins; NULL is fine. */
void yaml_tree_free(struct yaml_tree *t);

#endif
