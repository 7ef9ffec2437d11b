/* config/config_impl.h — for config/config*.c only: the schema
 * half of the loader. config.c owns the load sequence (read, override,
 * fill, clean up on failure); config_schema.c owns the table of keys and
 * everything that needs to know them (defaults, types, ranges, cross-field
 * rules, the YAML writer), so that a key is described in exactly one place.
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

/* Writes every stored key of `cfg` as YAML with one comment per key.
 * Errors: ZT_ERR_IO when the stream reports a write error. */
zt_status config_schema_write(const struct zt_config *cfg, FILE *f);

#endif
