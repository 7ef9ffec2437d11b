/* worker/cpu/device_cpu.c — host memory as the CPU backend's device memory.
 * 64-byte alignment: one cache line, and the widest vector load (AVX-512).
 * The C library's allocator is already a caching allocator, so the CPU keeps
 * no pool and no per-device state; its memory numbers are the ledger's. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../device.h"

static int cpu_query(char *why, size_t n)
{
    (void)why;
    (void)n;
    return 0;
}

static zt_status cpu_alloc(const struct device *d, size_t bytes, void **out)
{
    (void)d;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    *out = aligned_alloc(64, rounded);
    return ZT_OK; /* NULL is reported by device_alloc, which knows what it was for */
}

static void cpu_free(const struct device *d, void *p)
{
    (void)d;
    free(p);
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

/* Without a pool, what is reserved is what is used: the ledger's total. */
static zt_status cpu_memory_info(const struct device *d, struct device_memory_info *out)
{
    out->reserved = out->used = (size_t)d->ledger->total_current;
    out->peak = (size_t)d->ledger->total_peak;
    out->largest_free = 0;
    out->driver_free = physical_bytes(_SC_AVPHYS_PAGES);
    out->driver_total = physical_bytes(_SC_PHYS_PAGES);
    return ZT_OK;
}

static const struct device_backend_ops cpu_ops = {
    .name = "cpu",
    .query = cpu_query,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memset_zero = cpu_memset_zero,
    .copy_to_host = cpu_copy,
    .copy_from_host = cpu_copy,
    .copy = cpu_copy,
    .memory_info = cpu_memory_info,
};

const struct device_backend_ops *device_cpu_backend(void)
{
    return &cpu_ops;
}
