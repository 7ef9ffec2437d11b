/* common/size.h — byte sizes written as people write them.
 *
 * Hugging Face's max_shard_size ("5GB"), a device's memory ("80GiB"):
 * decimal and binary units spelled exactly, parsed without floating point
 * so that "0.5KiB" is 512 bytes and nothing rounds up. */
#ifndef ZT_COMMON_SIZE_H
#define ZT_COMMON_SIZE_H

#include <stdint.h>

/* Parses a number of bytes ("1000000"), or a number (with a fraction if
 * wanted) and a unit, KB, MB, GB, TB (powers of 10: "5GB", "1.5GB") or KiB,
 * MiB, GiB, TiB (powers of 2: "2GiB"), spelled so (lower-case "b" means
 * bits to transformers). The value is rounded down to whole bytes. Returns
 * 1 and sets *bytes for a size of at least one byte, 0 for anything else
 * (*bytes untouched). */
int zt_size_parse(const char *text, uint64_t *bytes);

#endif
