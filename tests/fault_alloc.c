/* tests/fault_alloc.c — see fault_alloc.h. */
#include "fault_alloc.h"

#include <stddef.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);

static long countdown; /* > 0: the allocation that brings it to 0 fails */

static int fails(void)
{
    return countdown > 0 && --countdown == 0;
}

void fault_alloc_arm(long n)
{
    countdown = n;
}

long fault_alloc_disarm(void)
{
    long left = countdown;
    countdown = 0;
    return left;
}

void *__wrap_malloc(size_t n)
{
    return fails() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    return fails() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    return fails() ? NULL : __real_realloc(p, n);
}
