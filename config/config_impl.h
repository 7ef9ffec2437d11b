/* config/config_impl.h — for config/config*.c only: the schema
 * half of the loader. config.c owns the load sequence (read, override,
 * fill, clean up on failure); config_schema.c owns the table of keys and
 * everything that needs to know them (defaults, types, ranges, cross-field
 * rules, the YAML writer), so that a key is described in exactly one place;
 * config_deepspeed.c owns DeepSpeed's keys that zerotrain accepts without
 * acting on them.
 */
#ifndef ZT_CONFIG_CONFIG_IMPL_H
#define ZT_CONFIG_CONFIG_IMPL_H

#include <stdio.h>

#include "config.h"
#include "yaml_tree.h"

/* Fills `cfg` (zeroed, with cfg->source set) from the defaults and the tree
 * `t`, whose root must be a map, and checks the cross-field rules. Strings
 * stored so far stay owned by cfg on failure (the caller frees it).
 * Errors: ZT_ERR_CONFIG, ZT_ERR_UNSUPPORTED, ZT_ERR_NOMEM. */
zt_status config_schema_fill(const struct yaml_tree *t, struct zt_config *cfg);

/* Lines of text collected one by one (the DeepSpeed settings a config gives
 * and zerotrain does not act on); text is NULL or NUL-terminated. */
struct config_notes {
    char *text;
    size_t len, cap;
    int count;
};

/* Asks config_deepspeed.c about the key at `path` (dotted), which has no
 * row in the schema: sets *known when it is one of DeepSpeed's keys. Such a
 * key is accepted; unless its value is null, means "off" or asks for what
 * zerotrain does anyway, one line "  WHERE: PATH (VALUE): what zerotrain
 * does instead" is appended to `notes`. Errors: ZT_ERR_CONFIG (a value of
 * the wrong type, e.g. a non-boolean overlap_comm), ZT_ERR_NOMEM. */
zt_status config_deepspeed_accept(const char *path, const struct yaml_tree_node *value,
                                  struct config_notes *notes, int *known);

/* The i-th of those DeepSpeed key paths, NULL past the last (for the
 * did-you-mean suggestions of unknown keys). */
const char *config_deepspeed_path(size_t i);

/* Writes every stored key of `cfg` as YAML with one comment per key.
 * Errors: ZT_ERR_IO when the stream reports a write error. */
zt_status config_schema_write(const struct zt_config *cfg, FILE *f);

#endif
