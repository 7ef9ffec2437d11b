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
 * Constant tables and pure functions: nothing to create or free. The
 * search is static inline and ZT_HOST_DEVICE (common/hostdev.h): the CUDA
 * backend's 8-bit AdamW (worker/cuda/optim_pieces.cu) runs this source on
 * the maps staged in shared memory.
 */
#ifndef ZT_WORKER_QUANT_MAPS_H
#define ZT_WORKER_QUANT_MAPS_H

#include <stdint.h>

#include "../common/hostdev.h"

extern const float quant_dynamic_signed[256];   /* create_dynamic_map(signed=True) */
extern const float quant_dynamic_unsigned[256]; /* create_dynamic_map(signed=False) */

/* The code (index into `map`, one of the two above) bitsandbytes' kernels
 * store for x, a value already multiplied by its block's reciprocal
 * absmax: the nearest code, a value exactly at the float32 midpoint of two
 * codes taking the one the binary search ended on. NaN gives 0, as in the
 * kernels. */
ZT_HOST_DEVICE static inline unsigned char quant_dynamic_encode(const float map[256], float x)
{
    /* bitsandbytes' search (dQuantize and quantize_2D in csrc/kernels.cu):
     * from index 127 in steps of 64, 32, ..., 1, remembering the neighbours
     * passed, then the nearer of the final index and the neighbour on x's
     * side by comparing with their float midpoint. The kernels start the
     * neighbours at -1 (0 unsigned) and 1; starting them at the map's ends
     * gives the same codes: the lower one is only read at index 0, where
     * both answers are 0, and the upper one is map[255] = 1. The midpoint's
     * sum feeds a product, never the reverse, so no compiler fuses it. */
    int pivot = 127, upper_pivot = 255, lower_pivot = 0;
    float lower = map[0], upper = map[255];
    for (int step = 64; step > 0; step >>= 1) {
        if (x > map[pivot]) {
            lower_pivot = pivot;
            lower = map[pivot];
            pivot += step;
        } else {
            upper_pivot = pivot;
            upper = map[pivot];
            pivot -= step;
        }
    }
    const float val = map[pivot];
    if (x > val)
        return (unsigned char)(x > (upper + val) * 0.5f ? upper_pivot : pivot);
    return (unsigned char)(x < (lower + val) * 0.5f ? lower_pivot : pivot);
}

/* The same codes without the search, for the CPU's 8-bit AdamW, where the
 * search's seven dependent, unpredictable branches were most of the
 * update's time. Floats are cut into buckets by their top 16 bits (sign,
 * exponent and 7 bits of mantissa: 1/128 of a binade, finer than the
 * maps' steps, so a bucket straddles at most one code boundary). Each
 * bucket keeps the code of its lowest value; one comparison with the next
 * code's lowest value finishes. Magnitudes below 2^-25 all take the code
 * of 0, those from 2 up (infinities too) the map's end, NaN 0: the search
 * is monotone, so its codes at those ends hold for all beyond.
 *
 * The tables (quant_maps_index.c) are what quant_index_build writes, and
 * scripts/gen_quant_index.sh writes the file from it; test_quant4 checks
 * both against the search. */
#define QUANT_INDEX_LOW  0x33000000u /* 2^-25 */
#define QUANT_INDEX_HIGH 0x40000000u /* 2 */
#define QUANT_INDEX_HALF ((QUANT_INDEX_HIGH - QUANT_INDEX_LOW) >> 16)

struct quant_index {
    unsigned char tiny;         /* |x| < 2^-25 */
    unsigned char below;        /* x <= -2 */
    unsigned char above;        /* x >= 2 */
    const unsigned char *first; /* [2 * HALF]: positive buckets, then negative */
    const float *bound;         /* [257]: code k's lowest value; bound[256] = inf */
};

extern const struct quant_index quant_index_signed;   /* of quant_dynamic_signed */
extern const struct quant_index quant_index_unsigned; /* of quant_dynamic_unsigned */

/* quant_dynamic_encode(map, x) for the map `ix` indexes. */
static inline unsigned char quant_index_encode(const struct quant_index *ix, float x)
{
    union {
        float f;
        uint32_t u;
    } bits = {x};
    const uint32_t mag = bits.u & 0x7fffffffu;
    if (mag < QUANT_INDEX_LOW)
        return ix->tiny;
    if (mag >= QUANT_INDEX_HIGH)
        return x != x ? 0 : x > 0.0f ? ix->above : ix->below;
    const uint32_t bucket = ((mag - QUANT_INDEX_LOW) >> 16) + (bits.u >> 31 ? QUANT_INDEX_HALF : 0);
    const unsigned char c = ix->first[bucket];
    return (unsigned char)(c + (x >= ix->bound[c + 1]));
}

/* Fills the tables of `map`'s index: first[2 * QUANT_INDEX_HALF],
 * bound[257], ends[3] = {tiny, below, above}. Returns 0, or -1 when a
 * bucket straddles two boundaries or an end is not one code (the index
 * cannot stand for the search). */
int quant_index_build(const float map[256], unsigned char *first, float *bound,
                      unsigned char ends[3]);

#endif
