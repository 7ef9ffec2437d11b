/* common/kvlist.c — see kvlist.h. */
#include "kvlist.h"

#include <stdio.h>
#include <string.h>

#include "status.h"

void zt_kv_init(struct zt_kvlist *l, const char *kind)
{
    memset(l, 0, sizeof *l);
    snprintf(l->kind, sizeof l->kind, "%s", kind);
}

static struct zt_kv *append(struct zt_kvlist *l, const char *name)
{
    ZT_ASSERT(l->n < ZT_KV_MAX && strlen(name) < ZT_KV_NAME_MAX && !zt_kv_find(l, name));
    struct zt_kv *kv = &l->items[l->n++];
    memset(kv, 0, sizeof *kv);
    memcpy(kv->name, name, strlen(name) + 1);
    return kv;
}

void zt_kv_add_int(struct zt_kvlist *l, const char *name, int64_t v)
{
    append(l, name)->i = v;
}

void zt_kv_add_real(struct zt_kvlist *l, const char *name, double v)
{
    struct zt_kv *kv = append(l, name);
    kv->is_real = 1;
    kv->r = v;
}

const struct zt_kv *zt_kv_find(const struct zt_kvlist *l, const char *name)
{
    for (int k = 0; k < l->n; k++)
        if (strcmp(l->items[k].name, name) == 0)
            return &l->items[k];
    return NULL;
}

int zt_kv_equal(const struct zt_kvlist *a, const struct zt_kvlist *b)
{
    if (strcmp(a->kind, b->kind) != 0 || a->n != b->n)
        return 0;
    for (int k = 0; k < a->n; k++) {
        const struct zt_kv *x = &a->items[k], *y = &b->items[k];
        if (strcmp(x->name, y->name) != 0 || x->is_real != y->is_real)
            return 0;
        if (x->is_real ? memcmp(&x->r, &y->r, sizeof x->r) != 0 : x->i != y->i)
            return 0;
    }
    return 1;
}

void zt_kv_format(const struct zt_kvlist *l, char *buf, size_t n)
{
    size_t at = 0;
    int w = snprintf(buf, n, "%s {", l->kind);
    for (int k = 0; k < l->n && w >= 0; k++) {
        at += (size_t)w;
        if (at >= n)
            return;
        const struct zt_kv *kv = &l->items[k];
        w = kv->is_real ? snprintf(buf + at, n - at, "%s%s %g", k ? ", " : "", kv->name, kv->r)
                        : snprintf(buf + at, n - at, "%s%s %lld", k ? ", " : "", kv->name,
                                   (long long)kv->i);
    }
    if (w >= 0 && at + (size_t)w < n)
        snprintf(buf + at + (size_t)w, n - at - (size_t)w, "}");
}
