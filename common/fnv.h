/* common/fnv.h — FNV-1a 64, the one checksum of zerotrain's files: token
 * files, checkpoint shards and a fine-tuning run's base weights. Cheap,
 * streamable (a checksum continues over pieces in order) and enough to
 * tell a changed or damaged file; not a defence against anyone. */
#ifndef ZT_COMMON_FNV_H
#define ZT_COMMON_FNV_H

#include <stddef.h>
#include <stdint.h>

#define ZT_FNV_OFFSET 0xcbf29ce484222325ULL /* the checksum of no bytes */
#define ZT_FNV_PRIME  0x100000001b3ULL

/* FNV-1a 64 of h's bytes followed by the n bytes at `bytes`: start from
 * ZT_FNV_OFFSET. */
static inline uint64_t zt_fnv1a(uint64_t h, const void *bytes, size_t n)
{
    const unsigned char *p = bytes;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * ZT_FNV_PRIME;
    return h;
}

#endif
