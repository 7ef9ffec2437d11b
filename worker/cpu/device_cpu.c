/* worker/cpu/device_cpu.c — host memory as the CPU backend's device memory.
 * 64-byte alignment: one cache line, and the widest vector load (AVX-512).
 * An opened device keeps freed large blocks for reuse in its host cache
 * (host_cache.h), which maps at most the live peak and an eighth; a plan's
 * device runs a model of the cache, so that a plan knows what a run's
 * would hold. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../device.h"
#include "host_cache.h"

static zt_status cpu_open(struct device *d)
{
    struct host_cache *c;
    ZT_TRY(host_cache_create(&c));
    d->state = c;
    return ZT_OK;
}

static zt_status cpu_plan_open(struct device *d)
{
    struct host_cache *c;
    ZT_TRY(host_cache_model_create(&c));
    d->state = c;
    return ZT_OK;
}

static void cpu_plan_alloc(const struct device *d, size_t bytes)
{
    host_cache_model_alloc(d->state, bytes);
}

static void cpu_plan_free(const struct device *d, size_t bytes)
{
    host_cache_model_free(d->state, bytes);
}

static void cpu_close(struct device *d)
{
    host_cache_release(d->state);
    d->state = NULL;
}

static int cpu_query(char *why, size_t n)
{
    (void)why;
    (void)n;
    return 0;
}

static zt_status cpu_alloc(const struct device *d, size_t bytes, void **out)
{
    *out = host_cache_alloc(d->state, bytes);
    return ZT_OK; /* NULL is reported by device_alloc, which knows what it was for */
}

static void cpu_free(const struct device *d, void *p)
{
    (void)d;
    host_cache_free(p);
}

static zt_status cpu_memset_zero(const struct device *d, void *p, size_t bytes)
{
    (void)d;
    memset(p, 0, bytes);
    return ZT_OK;
}

static zt_status cpu_copy(const struct device *d, void *dst, const void *src, size_t bytes)
{
    (void)d;
    memmove(dst, src, bytes);
    return ZT_OK;
}

/* sysconf's pages times the page size; 0 where the system does not say. */
static size_t physical_bytes(int name)
{
    long pages = sysconf(name), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

/* Used is the ledger's total; reserved adds the freed blocks the host
 * cache keeps for reuse; resident_peak is the cache's (or its model's). */
static zt_status cpu_memory_info(const struct device *d, struct device_memory_info *out)
{
    struct host_cache_stats cs = {0};
    if (d->state && d->ops->alloc == cpu_alloc) /* not a copy with another allocator */
        host_cache_stats(d->state, &cs);
    out->held_peak = cs.peak_held;
    out->resident_peak = cs.peak_resident;
    out->used = (size_t)d->ledger->total_current;
    out->reserved = out->used + cs.cached;
    out->peak = (size_t)d->ledger->total_peak;
    out->largest_free = 0;
    out->driver_free = physical_bytes(_SC_AVPHYS_PAGES);
    out->driver_total = physical_bytes(_SC_PHYS_PAGES);
    return ZT_OK;
}

static const struct device_backend_ops cpu_ops = {
    .name = "cpu",
    .query = cpu_query,
    .open = cpu_open,
    .close = cpu_close,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memset_zero = cpu_memset_zero,
    .copy_to_host = cpu_copy,
    .copy_from_host = cpu_copy,
    .copy = cpu_copy,
    .memory_info = cpu_memory_info,
    .plan_open = cpu_plan_open,
    .plan_alloc = cpu_plan_alloc,
    .plan_free = cpu_plan_free,
};

const struct device_backend_ops *device_cpu_backend(void)
{
    return &cpu_ops;
}
