/* worker/cpu/host_cache.c — see host_cache.h. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "host_cache.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* In front of every block; 64 bytes so that the block stays aligned. */
struct block {
    struct host_cache *cache;
    size_t bytes;              /* mapped (header included); 0: from malloc */
    struct block *prev, *next; /* the freed list, oldest first */
    void *base;                /* the mapping's start */
    unsigned char pad[24];
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
    struct block *oldest, *newest; /* freed blocks kept for reuse */
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

/* Unmaps the oldest freed block. Under the lock. */
static void unmap_oldest(struct host_cache *c)
{
    struct block *b = c->oldest;
    unlink_freed(c, b);
    munmap(b->base, b->bytes);
    c->s.unmapped++;
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

void *host_cache_alloc(struct host_cache *c, size_t bytes)
{
    struct block *b;
    if (bytes > SIZE_MAX / 2)
        return NULL;
    if (bytes < HOST_CACHE_MIN_BYTES) {
        b = aligned_alloc(64, sizeof *b + ((bytes + 63) & ~(size_t)63));
        if (!b)
            return NULL;
        b->bytes = 0;
        pthread_mutex_lock(&c->mu);
    } else {
        size_t size = mapped_size(bytes);
        pthread_mutex_lock(&c->mu);
        b = take_freed(c, size);
        if (b) {
            size = b->bytes;
            c->s.reused++;
        } else {
            make_room(c, size);
            void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) {
                pthread_mutex_unlock(&c->mu);
                return NULL;
            }
            b = (struct block *)p + c->s.mapped % COLORS;
            b->base = p;
            b->bytes = size;
            c->s.mapped++;
        }
        c->s.live += size;
        if (c->s.live > c->s.peak_live)
            c->s.peak_live = c->s.live;
    }
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
    if (!b->bytes) {
        free(b);
    } else {
        pthread_mutex_lock(&c->mu);
        c->s.live -= b->bytes;
        if (c->open) { /* keep it for the next step */
            b->next = NULL;
            b->prev = c->newest;
            *(c->newest ? &c->newest->next : &c->oldest) = b;
            c->newest = b;
            c->s.cached += b->bytes;
        } else {
            munmap(b->base, b->bytes);
        }
        pthread_mutex_unlock(&c->mu);
    }
    unref(c);
}

void host_cache_release(struct host_cache *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->open = 0;
    drop_freed(c);
    pthread_mutex_unlock(&c->mu);
    unref(c);
}

void host_cache_stats(struct host_cache *c, struct host_cache_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->s;
    pthread_mutex_unlock(&c->mu);
}
