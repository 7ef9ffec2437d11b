/* worker/device_pool.h — a caching sub-allocator over one reserved region.
 *
 * A GPU's allocator (cudaMalloc/cudaFree) synchronises the device and costs
 * tens of microseconds per call, and a training step frees and allocates the
 * same gathered parameters, activations and staging buffers over and over.
 * So the CUDA memory backend (worker/device.h) reserves one large region when
 * it opens and hands out pieces of it through this pool; the driver sees one
 * allocation for the life of the device.
 *
 * The pool never reads or writes the region: it only does arithmetic on its
 * addresses. That is what lets it manage device memory from the host, and
 * what lets its tests run over host memory or over made-up addresses. Its own
 * bookkeeping (two arrays of blocks) is host memory from malloc; none of it
 * is counted in the ledger, which counts device memory only.
 *
 * Layout. The usable region is [base, base+bytes) with its start rounded up
 * and its end rounded down to DEVICE_POOL_ALIGN; its size is `reserved`.
 * Every block starts at a multiple of DEVICE_POOL_ALIGN from the start and
 * has a size that is a non-zero multiple of it, so every pointer handed out
 * is aligned for any vector load or cuBLAS call (cudaMalloc's own guarantee
 * is 256 bytes). The region is tiled by live blocks (handed out) and free
 * blocks; no two free blocks are adjacent (a free coalesces with both
 * neighbours), so freeing everything leaves one free block of `reserved`
 * bytes.
 *
 * Policy: best fit. An allocation takes the smallest free block that holds
 * it, the lowest-addressed one among equals, and splits it: the front part is
 * handed out and the rest stays free at the higher address. Best fit keeps
 * the large blocks whole for the large buffers (gathered units, activations)
 * that come back every step, and the address tie-break makes a sequence of
 * calls give the same addresses on every run.
 *
 * Cost. The free blocks and the live blocks are each an array sorted by
 * address. An allocation scans the free blocks (O(f)) and inserts one live
 * entry (a binary search and a memmove, O(l)); a free finds its live entry by
 * binary search (O(log l)) and removes it and inserts or merges a free entry
 * (memmoves, O(l + f)). A training rank holds hundreds to a few thousand
 * buffers, for which these linear moves cost microseconds, far below the
 * driver calls the pool saves.
 *
 * Errors. A request that no free block holds is ZT_ERR_NOMEM with a message
 * naming the request, the used and reserved bytes and the largest free block,
 * so fragmentation (much free, no block large enough) is visible in it.
 * Freeing a pointer the pool did not hand out, or freeing one twice, is a
 * broken invariant of the caller: ZT_ASSERT.
 *
 * Not thread-safe: a rank's allocations come from one thread.
 */
#ifndef ZT_WORKER_DEVICE_POOL_H
#define ZT_WORKER_DEVICE_POOL_H

#include <stddef.h>

#include "../common/status.h"

/* Alignment of every block's start and size, in bytes. */
#define DEVICE_POOL_ALIGN 256

struct device_pool;

struct device_pool_stats {
    size_t reserved;     /* usable bytes of the region */
    size_t used;         /* bytes in live blocks (requests rounded up to the alignment) */
    size_t peak;         /* the largest `used` since create */
    size_t largest_free; /* the largest free block: the largest request that would succeed */
    size_t live_blocks;  /* blocks handed out and not freed */
    size_t free_blocks;  /* free blocks (1 when empty, 0 when full) */
};

/* Creates a pool over [base, base+bytes), which the caller owns and keeps
 * valid until device_pool_destroy; the pool never dereferences it. A region
 * smaller than one aligned block gives a pool with reserved == 0, on which
 * every allocation fails. Errors: ZT_ERR_NOMEM (the host bookkeeping). */
zt_status device_pool_create(void *base, size_t bytes, struct device_pool **out);

/* Releases the bookkeeping (not the region). Live blocks are forgotten.
 * NULL is accepted. */
void device_pool_destroy(struct device_pool *p);

/* Hands out a block of at least `bytes` (rounded up to DEVICE_POOL_ALIGN; 0
 * takes one aligned block, so every pointer is distinct), aligned to
 * DEVICE_POOL_ALIGN, with undefined contents. On failure *out is NULL and
 * nothing changed. Errors: ZT_ERR_NOMEM (no free block holds it, with the
 * message above; or the host bookkeeping could not grow). */
zt_status device_pool_alloc(struct device_pool *p, size_t bytes, void **out);

/* Returns a block from device_pool_alloc to the pool, merging it with free
 * neighbours. Never fails; NULL is ignored. ZT_ASSERT when `ptr` is not the
 * start of a live block of this pool (never handed out, or already freed). */
void device_pool_free(struct device_pool *p, void *ptr);

/* The pool's counters now. */
void device_pool_stats(const struct device_pool *p, struct device_pool_stats *out);

#endif
