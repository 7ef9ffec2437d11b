/* common/rng.c — see rng.h. */
#include "rng.h"

#include <math.h>

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The key's half of rng_u64, the same for every counter. */
static uint64_t mixed_key(uint64_t key)
{
    return mix64(key + 0x9e3779b97f4a7c15ULL);
}

static uint64_t keyed_u64(uint64_t mixed, uint64_t counter)
{
    return mix64(mixed ^ (counter * 0xd1b54a32d192ed03ULL + 1));
}

static double keyed_normal(uint64_t mixed, uint64_t counter)
{
    uint64_t bits = keyed_u64(mixed, 2 * counter);
    uint64_t bits2 = keyed_u64(mixed, 2 * counter + 1);
    double u1 = ((double)(bits >> 11) + 1.0) * 0x1.0p-53; /* (0, 1]: log is finite */
    double u2 = (double)(bits2 >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}

uint64_t rng_u64(uint64_t key, uint64_t counter)
{
    return keyed_u64(mixed_key(key), counter);
}

double rng_uniform(uint64_t key, uint64_t counter)
{
    return (double)(rng_u64(key, counter) >> 11) * 0x1.0p-53;
}

double rng_normal(uint64_t key, uint64_t counter)
{
    return keyed_normal(mixed_key(key), counter);
}

void rng_normal_fill(uint64_t key, uint64_t first, size_t n, double scale, float *dst)
{
    const uint64_t mixed = mixed_key(key);
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)(scale * keyed_normal(mixed, first + i));
}

uint64_t rng_key(uint64_t seed, const char *purpose)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const char *p = purpose; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
    return mix64(seed ^ h);
}
