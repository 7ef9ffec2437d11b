/* worker/cpu/host_cache.h — the CPU backend's buffers: large ones mapped
 * from the kernel and kept for reuse once freed, never more than the live
 * peak and an eighth in all.
 *
 * Why. A step frees and allocates the same large buffers again and again
 * (stage 3's gathered units, transient gradients, activations). Mapping
 * each anew faults in and zeroes every page again: about 98,000 faults a
 * step per rank at GPT-2 124M's shape under stage 3. Keeping glibc's heap
 * instead (no mmap, no trim) reuses blocks but fragments: a QLoRA step at
 * Llama-2-7B's width held 2.5 times its ledger's peak resident. This cache
 * hands a freed block back when the same size, or up to a quarter less, is
 * asked for again, as the next step asks, and unmaps the oldest freed
 * blocks whenever keeping them would take the mapped bytes above the live
 * peak and 1 / HOST_CACHE_SLACK of it: the resident memory stays within
 * the ledger's peak and that slack. How much of the slack a run uses
 * depends on the order of its sizes: a plan, which allocates nothing,
 * runs a model of the cache on the same sizes to know it (below).
 *
 * Blocks under HOST_CACHE_MIN_BYTES come from malloc (small, and glibc
 * reuses them well). Every block starts with a header naming its cache, so
 * a free needs no size and finds the cache that made it.
 *
 * Ownership: host_cache_create's reference belongs to the caller (the CPU
 * device, worker/cpu/device_cpu.c); every live block holds one more. The
 * cache goes when the last is dropped, so a buffer freed after its device
 * closed is still unmapped correctly. Thread-safe (a mutex).
 */
#ifndef ZT_WORKER_CPU_HOST_CACHE_H
#define ZT_WORKER_CPU_HOST_CACHE_H

#include <stddef.h>

#include "../../common/status.h"

/* Blocks this size and up are mapped and cached; the mapped bytes stay
 * within the live peak plus 1 / HOST_CACHE_SLACK of it. */
enum { HOST_CACHE_MIN_BYTES = 256 << 10, HOST_CACHE_SLACK = 8 };

struct host_cache;

struct host_cache_stats {
    size_t live;      /* bytes mapped for live blocks (page-rounded, header included) */
    size_t cached;    /* bytes mapped for freed blocks kept for reuse */
    size_t peak_live; /* the most `live` has been */
    size_t small;     /* bytes malloc'd for live blocks under HOST_CACHE_MIN_BYTES (headers too) */
    size_t peak_held; /* the most small + live has been: the live buffers' */
    size_t peak_resident; /* the most small + live + cached has been: with the kept ones */
    size_t reused;        /* allocations served from the cache */
    size_t mapped;        /* allocations mapped anew */
    size_t unmapped;      /* freed blocks unmapped: to stay within the bound, or at release */
};

/* Errors: ZT_ERR_NOMEM. */
zt_status host_cache_create(struct host_cache **out);
/* Drops the creator's reference: the freed blocks are unmapped now, the
 * live ones when they are freed. Accepts NULL. */
void host_cache_release(struct host_cache *c);
/* `bytes` (> 0), 64-byte aligned, contents undefined; NULL when the system
 * has no memory left. */
void *host_cache_alloc(struct host_cache *c, size_t bytes);
/* A block of host_cache_alloc; accepts NULL. */
void host_cache_free(void *p);
void host_cache_stats(struct host_cache *c, struct host_cache_stats *out);

/* A model of a cache, for a plan: nothing is mapped, and
 * host_cache_model_alloc and host_cache_model_free make the decisions
 * host_cache_alloc and host_cache_free would for buffers of those sizes
 * (a free takes the newest live block of that size), so that its stats,
 * peak_resident above all, are a run's. Released with host_cache_release.
 * Errors: ZT_ERR_NOMEM. */
zt_status host_cache_model_create(struct host_cache **out);
void host_cache_model_alloc(struct host_cache *c, size_t bytes);
void host_cache_model_free(struct host_cache *c, size_t bytes);

#endif
