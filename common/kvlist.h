/* common/kvlist.h — a short named list of numbers with a kind.
 *
 * What a module describes of itself for files and messages without the
 * reader knowing its type: a model family's shape ("gpt2" with vocab_size,
 * n_layer, ...) or an optimizer's hyperparameters ("AdamW" with lr,
 * beta1, ...). meta.json stores such a list as one JSON object, and a
 * resume compares the stored list with the run's. Values are exact 64-bit
 * integers or doubles; names are unique within a list. Plain data: copy it
 * by assignment.
 */
#ifndef ZT_COMMON_KVLIST_H
#define ZT_COMMON_KVLIST_H

#include <stddef.h>
#include <stdint.h>

#define ZT_KV_MAX      16
#define ZT_KV_NAME_MAX 32 /* bytes, the NUL included */

struct zt_kv {
    char name[ZT_KV_NAME_MAX];
    int is_real; /* 0: `i` holds the value; 1: `r` does */
    int64_t i;
    double r;
};

struct zt_kvlist {
    char kind[ZT_KV_NAME_MAX]; /* "gpt2", "AdamW" */
    int n;
    struct zt_kv items[ZT_KV_MAX];
};

/* Starts an empty list of `kind` (truncated to fit). */
void zt_kv_init(struct zt_kvlist *l, const char *kind);
/* Appends a value; asserts that the list has room and the name is new and
 * fits (lists are built by code, not from input). */
void zt_kv_add_int(struct zt_kvlist *l, const char *name, int64_t v);
void zt_kv_add_real(struct zt_kvlist *l, const char *name, double v);
/* The entry called name, or NULL. */
const struct zt_kv *zt_kv_find(const struct zt_kvlist *l, const char *name);
/* 1 when both lists have the same kind and the same entries in the same
 * order with bit-identical values. */
int zt_kv_equal(const struct zt_kvlist *a, const struct zt_kvlist *b);
/* "gpt2 {vocab_size 256, n_layer 4}" into buf[n], truncated to fit. */
void zt_kv_format(const struct zt_kvlist *l, char *buf, size_t n);

#endif
