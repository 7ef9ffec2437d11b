/* common/rng.h — a counter-based random generator.
 *
 * Values are pure functions of (key, counter): element i of a tensor is
 * drawn from counter i whatever rank computes it, so initial weights and
 * data order are the same for any world size and any sharding. The mixer is
 * SplitMix64's finaliser applied to a Weyl sequence of the key and counter;
 * it passes BigCrush as a hash of a counter, which is all we ask of it.
 */
#ifndef ZT_RNG_H
#define ZT_RNG_H

#include <stddef.h>
#include <stdint.h>

/* 64 random bits for (key, counter). */
uint64_t rng_u64(uint64_t key, uint64_t counter);
/* Uniform in [0, 1) with 53 random bits. */
double rng_uniform(uint64_t key, uint64_t counter);
/* Standard normal (Box-Muller on two uniforms drawn from counter). */
double rng_normal(uint64_t key, uint64_t counter);
/* dst[i] = (float)(scale * rng_normal(key, first + i)) for i < n, the
 * same values without mixing the key again for every element. */
void rng_normal_fill(uint64_t key, uint64_t first, size_t n, double scale, float *dst);
/* Derives a sub-key, e.g. rng_key(seed, "init") vs rng_key(seed, "data"). */
uint64_t rng_key(uint64_t seed, const char *purpose);

#endif
