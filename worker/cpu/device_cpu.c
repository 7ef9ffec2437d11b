/* worker/cpu/device_cpu.c — host memory as the CPU backend's device memory.
 * 64-byte alignment: one cache line, and the widest vector load (AVX-512). */
#include <stdlib.h>
#include <string.h>

#include "../device.h"

static int cpu_query(char *why, size_t n)
{
    (void)why;
    (void)n;
    return 0;
}

static zt_status cpu_alloc(size_t bytes, void **out)
{
    size_t rounded = (bytes + 63) & ~(size_t)63;
    *out = aligned_alloc(64, rounded);
    return ZT_OK; /* NULL is reported by device_alloc, which knows what it was for */
}

static void cpu_free(void *p)
{
    free(p);
}

static zt_status cpu_memset_zero(void *p, size_t bytes)
{
    memset(p, 0, bytes);
    return ZT_OK;
}

static zt_status cpu_copy(void *dst, const void *src, size_t bytes)
{
    memmove(dst, src, bytes);
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
};

const struct device_backend_ops *device_cpu_backend(void)
{
    return &cpu_ops;
}
