/* formats/safetensors_impl.h — for safetensors.c and safetensors_set.c
 * only: what the single-file writer and the sharded one share, so that a
 * metadata list behaves the same in both. */
#ifndef ZT_FORMATS_SAFETENSORS_IMPL_H
#define ZT_FORMATS_SAFETENSORS_IMPL_H

#include <stddef.h>

#include "../common/status.h"

/* One __metadata__ entry; both strings owned by the list. */
struct safetensors_meta {
    char *key, *value;
};

/* Makes room for `need` items in the array *p of *cap items of `size`
 * bytes (doubling, from 16); returns 0, changing nothing, when the
 * allocation fails. */
int safetensors_grow(void **p, int *cap, int need, size_t size);

/* Sets key = value (both copied) in the list *list of *n entries and room
 * for *cap, replacing an earlier value of key; `path` names the file in
 * messages. Statuses: ZT_ERR_USAGE (non-UTF-8 text), ZT_ERR_NOMEM (the
 * list is unchanged then). */
zt_status safetensors_meta_set(struct safetensors_meta **list, int *n, int *cap, const char *path,
                               const char *key, const char *value);

/* Frees the n entries of list and list itself. */
void safetensors_meta_free(struct safetensors_meta *list, int n);

#endif
