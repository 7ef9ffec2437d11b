/* worker/device_pool.c — best-fit sub-allocation over one region (see
 * device_pool.h for the layout, the policy and the costs).
 *
 * Blocks are kept as offsets from the aligned start of the region, in two
 * arrays sorted by offset: the free blocks and the live ones. Both arrays
 * share one capacity (the free one has one slot more): free blocks are
 * separated by live ones, so there are never more than live + 1 of them, and
 * a free that inserts a free entry has always room for it. Growing happens in
 * device_pool_alloc only, before anything changes, which is what lets
 * device_pool_free never fail.
 */
#include "device_pool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct block {
    size_t off, size;
};

struct device_pool {
    uintptr_t start; /* the aligned start of the region */
    size_t reserved;
    struct block *free_list; /* sorted by offset; never two adjacent */
    struct block *live;      /* sorted by offset */
    size_t n_free, n_live;
    size_t cap; /* live holds cap entries, free_list cap + 1 */
    size_t used, peak;
};

#define ALIGN_MASK ((size_t)DEVICE_POOL_ALIGN - 1)

/* The first index of a[0..n) whose offset is >= off. */
static size_t lower_bound(const struct block *a, size_t n, size_t off)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void insert_at(struct block *a, size_t *n, size_t i, struct block b)
{
    memmove(a + i + 1, a + i, (*n - i) * sizeof *a);
    a[i] = b;
    (*n)++;
}

static void remove_at(struct block *a, size_t *n, size_t i)
{
    memmove(a + i, a + i + 1, (*n - i - 1) * sizeof *a);
    (*n)--;
}

/* Makes room for `cap` live entries (and cap + 1 free ones). */
static zt_status reserve_entries(struct device_pool *p, size_t cap)
{
    if (cap <= p->cap)
        return ZT_OK;
    struct block *live = realloc(p->live, cap * sizeof *live);
    if (live)
        p->live = live;
    struct block *free_list = live ? realloc(p->free_list, (cap + 1) * sizeof *free_list) : NULL;
    if (!free_list)
        return zt_error_set(ZT_ERR_NOMEM,
                            "device pool: cannot grow its host bookkeeping to %zu blocks", cap);
    p->free_list = free_list;
    p->cap = cap;
    return ZT_OK;
}

zt_status device_pool_create(void *base, size_t bytes, struct device_pool **out)
{
    *out = NULL;
    struct device_pool *p = calloc(1, sizeof *p);
    if (!p)
        return zt_error_set(ZT_ERR_NOMEM, "device pool: cannot allocate its host bookkeeping");
    const uintptr_t b = (uintptr_t)base;
    const uintptr_t skip = (DEVICE_POOL_ALIGN - (b & ALIGN_MASK)) & ALIGN_MASK;
    p->start = b + skip;
    p->reserved = bytes > skip ? (bytes - skip) & ~ALIGN_MASK : 0;
    zt_status s = reserve_entries(p, 16);
    if (s != ZT_OK) {
        device_pool_destroy(p);
        return s;
    }
    if (p->reserved > 0)
        p->free_list[p->n_free++] = (struct block){0, p->reserved};
    *out = p;
    return ZT_OK;
}

void device_pool_destroy(struct device_pool *p)
{
    if (!p)
        return;
    free(p->free_list);
    free(p->live);
    free(p);
}

/* The smallest free block holding `size`, the lowest-addressed among
 * equals; n_free when none does. */
static size_t best_fit(const struct device_pool *p, size_t size)
{
    size_t best = p->n_free;
    for (size_t i = 0; i < p->n_free; i++)
        if (p->free_list[i].size >= size &&
            (best == p->n_free || p->free_list[i].size < p->free_list[best].size))
            best = i;
    return best;
}

static size_t largest_free(const struct device_pool *p)
{
    size_t m = 0;
    for (size_t i = 0; i < p->n_free; i++)
        m = p->free_list[i].size > m ? p->free_list[i].size : m;
    return m;
}

/* The message of a request no free block holds: how much is used and
 * whether the free bytes would hold it if they were not fragmented. */
static zt_status no_fit(const struct device_pool *p, size_t bytes, size_t size)
{
    const size_t free_bytes = p->reserved - p->used;
    return zt_error_set(ZT_ERR_NOMEM,
                        "device pool: cannot allocate %zu bytes (%zu aligned): %zu of %zu reserved "
                        "bytes used; %zu free in %zu blocks, the largest %zu bytes%s",
                        bytes, size, p->used, p->reserved, free_bytes, p->n_free, largest_free(p),
                        free_bytes >= size ? " (fragmented: enough free bytes, no block that large)"
                                           : "");
}

zt_status device_pool_alloc(struct device_pool *p, size_t bytes, void **out)
{
    *out = NULL;
    if (bytes > SIZE_MAX - ALIGN_MASK)
        return no_fit(p, bytes, bytes);
    const size_t size = bytes == 0 ? DEVICE_POOL_ALIGN : (bytes + ALIGN_MASK) & ~ALIGN_MASK;
    const size_t i = best_fit(p, size);
    if (i == p->n_free)
        return no_fit(p, bytes, size);
    if (p->n_live == p->cap)
        ZT_TRY(reserve_entries(p, 2 * p->cap));

    struct block *f = &p->free_list[i];
    const size_t off = f->off;
    if (f->size == size) {
        remove_at(p->free_list, &p->n_free, i);
    } else {
        f->off += size;
        f->size -= size;
    }
    insert_at(p->live, &p->n_live, lower_bound(p->live, p->n_live, off), (struct block){off, size});
    p->used += size;
    p->peak = p->used > p->peak ? p->used : p->peak;
    *out = (void *)(p->start + off);
    return ZT_OK;
}

/* Puts [off, off+size) back on the free list, merging it with the free
 * blocks that end where it starts and start where it ends. */
static void give_back(struct device_pool *p, size_t off, size_t size)
{
    const size_t j = lower_bound(p->free_list, p->n_free, off);
    struct block *prev = j > 0 ? &p->free_list[j - 1] : NULL;
    struct block *next = j < p->n_free ? &p->free_list[j] : NULL;
    const int join_prev = prev && prev->off + prev->size == off;
    const int join_next = next && off + size == next->off;
    if (join_prev && join_next) {
        prev->size += size + next->size;
        remove_at(p->free_list, &p->n_free, j);
    } else if (join_prev) {
        prev->size += size;
    } else if (join_next) {
        next->off = off;
        next->size += size;
    } else {
        ZT_ASSERT(p->n_free <= p->cap && "free blocks never outnumber live blocks + 1");
        insert_at(p->free_list, &p->n_free, j, (struct block){off, size});
    }
}

void device_pool_free(struct device_pool *p, void *ptr)
{
    if (!ptr)
        return;
    /* Wraps for an address below the start, which then matches no block. */
    const size_t off = (size_t)((uintptr_t)ptr - p->start);
    const size_t i = lower_bound(p->live, p->n_live, off);
    ZT_ASSERT(i < p->n_live && p->live[i].off == off &&
              "freed pointer is the start of a live block of this pool");
    const size_t size = p->live[i].size;
    remove_at(p->live, &p->n_live, i);
    p->used -= size;
    give_back(p, off, size);
}

void device_pool_stats(const struct device_pool *p, struct device_pool_stats *out)
{
    *out = (struct device_pool_stats){
        .reserved = p->reserved,
        .used = p->used,
        .peak = p->peak,
        .largest_free = largest_free(p),
        .live_blocks = p->n_live,
        .free_blocks = p->n_free,
    };
}
