/* common/size.h — byte sizes written as people write them.
 *
 * Hugging Face's max_shard_size ("5GB"), a device's memory ("80GiB"):
 * decimal and binary units spelled exactly, parsed without floating point
 * so that "0.5KiB" is 512 bytes and nothing rounds up. */
#ifndef ZT_COMMON_SIZE_H
#define ZT_COMMON_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* Parses a number of bytes ("1000000"), or a number (with a fraction if
 * wanted) and a unit, KB, MB, GB, TB (powers of 10: "5GB", "1.5GB") or KiB,
 * MiB, GiB, TiB (powers of 2: "2GiB"), spelled so (lower-case "b" means
 * bits to transformers). The value is rounded down to whole bytes. Returns
 * 1 and sets *bytes for a size of at least one byte, 0 for anything else
 * (*bytes untouched). */
int zt_size_parse(const char *text, uint64_t *bytes);

/* Bytes as reports print them, into buf[n]: exact below 10 KiB, else KiB,
 * MiB or GiB with two decimals (a unit gives way to the next where its
 * value would print as 1000.00 or more). */
void zt_size_format(uint64_t bytes, char *buf, size_t n);

#endif
