/* worker/quant_maps.h — bitsandbytes' 8-bit dynamic quantisation maps.
 *
 * Two users store numbers as one byte per value scaled by a block's
 * absolute maximum, both as bitsandbytes does: AdamW8bit's moments
 * (optim_adamw8bit.c) and the double-quantised block scales of 4-bit
 * weights (quant4.c). They share the maps and the search that picks a
 * code, so both pick the codes the library's CUDA kernels pick.
 *
 * A map is create_dynamic_map(signed, max_exponent_bits=7, total_bits=8):
 * for exponent i = 0..6, the midpoints of 2^i (signed) or 2^(i+1)
 * (unsigned) equal steps of [0.1, 1] times 10^(i-6), negated too when
 * signed, with 0 and 1: 256 float32 values, ascending, map[255] = 1. The
 * signed map's 0 is at index 127.
 *
 * Constant tables and pure functions: nothing to create or free.
 */
#ifndef ZT_WORKER_QUANT_MAPS_H
#define ZT_WORKER_QUANT_MAPS_H

extern const float quant_dynamic_signed[256];   /* create_dynamic_map(signed=True) */
extern const float quant_dynamic_unsigned[256]; /* create_dynamic_map(signed=False) */

/* The code (index into `map`, one of the two above) bitsandbytes' kernels
 * store for x, a value already multiplied by its block's reciprocal
 * absmax: the nearest code, a value exactly at the float32 midpoint of two
 * codes taking the one the binary search ended on. NaN gives 0, as in the
 * kernels. */
unsigned char quant_dynamic_encode(const float map[256], float x);

#endif
