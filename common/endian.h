/* common/endian.h — little-endian packing of unsigned integers, byte by
 * byte, so that file formats (checkpoint shards, safetensors) read the same
 * on every host whatever its own byte order and alignment. */
#ifndef ZT_COMMON_ENDIAN_H
#define ZT_COMMON_ENDIAN_H

#include <stddef.h>
#include <stdint.h>

/* Stores the low `nbytes` bytes of v at p, least significant first. */
static inline void zt_put_le(unsigned char *p, uint64_t v, size_t nbytes)
{
    for (size_t i = 0; i < nbytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* The `nbytes` (at most 8) bytes at p, least significant first. */
static inline uint64_t zt_get_le(const unsigned char *p, size_t nbytes)
{
    uint64_t v = 0;
    for (size_t i = 0; i < nbytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#endif
