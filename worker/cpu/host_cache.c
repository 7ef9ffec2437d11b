/* worker/cpu/host_cache.c — see host_cache.h. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "host_cache.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* In front of every block; 64 bytes so that the block stays aligned. A
 * model's blocks (host_cache_model_create) are headers alone. */
struct block {
    struct host_cache *cache;
    size_t bytes;              /* mapped (header included); 0: from malloc */
    struct block *prev, *next; /* the freed list (a model's live list too), oldest first */
    void *base;                /* the mapping's start */
    size_t small;              /* malloc'd bytes (header included) when bytes is 0 */
    size_t request;            /* a model's: the bytes asked for */
    unsigned char pad[8];
};

/* Blocks start at one of COLORS offsets of 64 bytes into their first page,
 * in turn: buffers that all began at one offset would share their low 12
 * address bits, and the loads and stores of an op over several of them
 * would stall on 4K aliasing (7 % of a step, measured). */
enum { COLORS = 32 };
_Static_assert(sizeof(struct block) == 64, "the header keeps blocks 64-byte aligned");

struct host_cache {
    pthread_mutex_t mu;
    int refs;                      /* the creator's, and one per live block */
    int open;                      /* 0 once the creator released it: frees unmap */
    int model;                     /* 1: sizes only, nothing mapped */
    struct block *oldest, *newest; /* freed blocks kept for reuse */
    struct block *live_newest;     /* a model's live blocks, newest first (prev links) */
    struct host_cache_stats s;
};

zt_status host_cache_create(struct host_cache **out)
{
    struct host_cache *c = calloc(1, sizeof *c);
    if (!c)
        return zt_error_set(ZT_ERR_NOMEM, "host_cache_create: out of memory");
    pthread_mutex_init(&c->mu, NULL);
    c->refs = 1;
    c->open = 1;
    *out = c;
    return ZT_OK;
}

static void unlink_freed(struct host_cache *c, struct block *b)
{
    *(b->prev ? &b->prev->next : &c->oldest) = b->next;
    *(b->next ? &b->next->prev : &c->newest) = b->prev;
    c->s.cached -= b->bytes;
}

/* Unmaps a block off every list (a model's header is freed). */
static void unmap(struct host_cache *c, struct block *b)
{
    if (c->model)
        free(b);
    else
        munmap(b->base, b->bytes);
}

/* Unmaps the oldest freed block. Under the lock. */
static void unmap_oldest(struct host_cache *c)
{
    struct block *b = c->oldest;
    unlink_freed(c, b);
    unmap(c, b);
    c->s.unmapped++;
}

/* After a block became live: the peaks. Under the lock. */
static void note_peaks(struct host_cache *c)
{
    if (c->s.live > c->s.peak_live)
        c->s.peak_live = c->s.live;
    const size_t held = c->s.small + c->s.live, resident = held + c->s.cached;
    if (held > c->s.peak_held)
        c->s.peak_held = held;
    if (resident > c->s.peak_resident)
        c->s.peak_resident = resident;
}

/* Unmaps the oldest freed blocks until `need` more mapped bytes stay within
 * the live peak and an eighth: a step's phases ask for other sizes than its
 * peak holds (the update's after the backward's), and unmapping a block
 * there only to map it again in the next step cost 5 % of a step at
 * small.yaml's stage 3. Under the lock. */
static void make_room(struct host_cache *c, size_t need)
{
    if (c->s.live + need > c->s.peak_live)
        c->s.peak_live = c->s.live + need;
    const size_t bound = c->s.peak_live + c->s.peak_live / HOST_CACHE_SLACK;
    while (c->oldest && c->s.live + c->s.cached + need > bound)
        unmap_oldest(c);
}

/* The smallest freed block of `bytes` to a quarter more (the newest of
 * equals), taken off the list; NULL if none. A step asks for the same
 * sizes again, and near ones in its other phases, where the slack spares
 * unmapping one block to map the next. Under the lock. */
static struct block *take_freed(struct host_cache *c, size_t bytes)
{
    struct block *best = NULL;
    for (struct block *b = c->newest; b; b = b->prev)
        if (b->bytes >= bytes && b->bytes - bytes <= bytes / 4 && (!best || b->bytes < best->bytes))
            best = b;
    if (best)
        unlink_freed(c, best);
    return best;
}

/* Unmaps every freed block. Under the lock. */
static void drop_freed(struct host_cache *c)
{
    while (c->oldest)
        unmap_oldest(c);
}

/* Drops one reference; the last frees the cache. */
static void unref(struct host_cache *c)
{
    pthread_mutex_lock(&c->mu);
    const int last = --c->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (last) {
        pthread_mutex_destroy(&c->mu);
        free(c);
    }
}

static size_t mapped_size(size_t bytes)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + COLORS * sizeof(struct block) + page - 1) / page * page;
}

/* A large block of `size` mapped bytes made live: a freed one reused, or
 * one mapped anew (a model's: a header); NULL when the system has none.
 * Under the lock. */
static struct block *take_large(struct host_cache *c, size_t size)
{
    struct block *b = take_freed(c, size);
    if (b) {
        c->s.reused++;
    } else {
        make_room(c, size);
        if (c->model) {
            if (!(b = calloc(1, sizeof *b)))
                return NULL;
        } else {
            void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED)
                return NULL;
            b = (struct block *)p + c->s.mapped % COLORS;
            b->base = p;
        }
        b->bytes = size;
        c->s.mapped++;
    }
    c->s.live += b->bytes;
    return b;
}

/* A small block's bytes as malloc holds them: header and 64-byte units. */
static size_t small_size(size_t bytes)
{
    return sizeof(struct block) + ((bytes + 63) & ~(size_t)63);
}

/* Block b is no longer live: a large one is kept for the next step while
 * the cache is open, unmapped after; a small one's bytes leave the count
 * (its caller frees it). Under the lock. */
static void give_back(struct host_cache *c, struct block *b)
{
    if (!b->bytes) {
        c->s.small -= b->small;
        return;
    }
    c->s.live -= b->bytes;
    if (c->open) {
        b->next = NULL;
        b->prev = c->newest;
        *(c->newest ? &c->newest->next : &c->oldest) = b;
        c->newest = b;
        c->s.cached += b->bytes;
    } else {
        unmap(c, b);
    }
}

void *host_cache_alloc(struct host_cache *c, size_t bytes)
{
    struct block *b;
    if (bytes > SIZE_MAX / 2)
        return NULL;
    if (bytes < HOST_CACHE_MIN_BYTES) {
        const size_t size = small_size(bytes);
        if (!(b = aligned_alloc(64, size)))
            return NULL;
        b->bytes = 0;
        b->small = size;
        pthread_mutex_lock(&c->mu);
        c->s.small += size;
    } else {
        pthread_mutex_lock(&c->mu);
        if (!(b = take_large(c, mapped_size(bytes)))) {
            pthread_mutex_unlock(&c->mu);
            return NULL;
        }
    }
    note_peaks(c);
    b->cache = c;
    c->refs++;
    pthread_mutex_unlock(&c->mu);
    return b + 1;
}

void host_cache_free(void *p)
{
    if (!p)
        return;
    struct block *b = (struct block *)p - 1;
    struct host_cache *c = b->cache;
    const int small = !b->bytes; /* b may be unmapped below */
    pthread_mutex_lock(&c->mu);
    give_back(c, b);
    pthread_mutex_unlock(&c->mu);
    if (small)
        free(b);
    unref(c);
}

/* ---- the model: the same decisions on sizes alone ---- */

zt_status host_cache_model_create(struct host_cache **out)
{
    ZT_TRY(host_cache_create(out));
    (*out)->model = 1;
    return ZT_OK;
}

static void unlink_live(struct host_cache *c, struct block *b)
{
    if (b->next)
        b->next->prev = b->prev;
    else
        c->live_newest = b->prev;
    if (b->prev)
        b->prev->next = b->next;
}

void host_cache_model_alloc(struct host_cache *c, size_t bytes)
{
    ZT_ASSERT(c->model);
    pthread_mutex_lock(&c->mu);
    struct block *b;
    if (bytes < HOST_CACHE_MIN_BYTES) {
        if ((b = calloc(1, sizeof *b))) {
            b->small = small_size(bytes);
            c->s.small += b->small;
        }
    } else {
        b = take_large(c, mapped_size(bytes));
    }
    if (b) { /* else the system is out of memory for a header: the model loses a block */
        b->request = bytes;
        b->next = NULL;
        b->prev = c->live_newest;
        if (c->live_newest)
            c->live_newest->next = b;
        c->live_newest = b;
        note_peaks(c);
    }
    pthread_mutex_unlock(&c->mu);
}

void host_cache_model_free(struct host_cache *c, size_t bytes)
{
    ZT_ASSERT(c->model);
    pthread_mutex_lock(&c->mu);
    struct block *b = c->live_newest;
    while (b && b->request != bytes)
        b = b->prev;
    if (b) {
        const int small = !b->bytes; /* b may be freed below */
        unlink_live(c, b);
        give_back(c, b);
        if (small)
            free(b);
    }
    pthread_mutex_unlock(&c->mu);
}

void host_cache_release(struct host_cache *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->open = 0;
    drop_freed(c);
    while (c->model && c->live_newest) { /* a model's live blocks hold no reference */
        struct block *b = c->live_newest;
        unlink_live(c, b);
        free(b);
    }
    pthread_mutex_unlock(&c->mu);
    unref(c);
}

void host_cache_stats(struct host_cache *c, struct host_cache_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->s;
    pthread_mutex_unlock(&c->mu);
}
