/* worker/quant4.h — QLoRA's 4-bit block-wise quantisation, as
 * bitsandbytes stores a frozen base model (quantize_4bit /
 * dequantize_4bit, blocksize 64, quant_type "nf4" or "fp4"; the formulas
 * of bitsandbytes-foundation/bitsandbytes at 95f9af30, csrc/kernels.cu and
 * bitsandbytes/functional.py).
 *
 * A tensor of n floats (any n >= 1, in its own index space) is cut into
 * blocks of QUANT4_BLOCK elements, the last one possibly short. Each block
 * keeps its absolute maximum in fp32, and each element one 4-bit code of a
 * 16-value code book in [-1, 1]: the element times the block's reciprocal
 * absmax (1.0f / absmax, then one fp32 multiply: not a division), placed by
 * the code book's thresholds exactly as bitsandbytes' CUDA kernels
 * (dQuantizeNF4, dQuantizeFP4) place it; a value exactly at a threshold
 * takes the code below it (NF4: the smaller value, FP4: the smaller
 * magnitude). Codes are packed two per byte, the first element of each
 * pair in the high nibble (bitsandbytes' order); when n is odd the last
 * low nibble is 0. An element dequantises to code[q] * absmax in fp32.
 *
 * Double quantisation (bnb_4bit_use_double_quant, quantize_4bit with
 * compress_statistics=True) stores the block scales in 8 bits: their mean
 * (the offset, fp32) is subtracted, and the differences are quantised in
 * groups of QUANT4_GROUP blocks with the signed 8-bit dynamic map
 * (quant_maps.h), one fp32 absmax2 per group, as bitsandbytes'
 * quantize_blockwise(blocksize=256) does. A block's scale then reads
 * map[qabsmax] * absmax2 + offset, rounded to fp32 after the multiply and
 * after the add, as bitsandbytes' separate kernels round. The 4-bit codes
 * are always chosen with the exact fp32 absmax.
 *
 * Where the result is not bitsandbytes' to the bit:
 *   - a block whose absmax is 0 takes the code of 0 for every element (NF4
 *     7, FP4 0), so it dequantises to zeros also under double quantisation,
 *     whose scale for it is close to 0 but rarely 0. bitsandbytes' kernel
 *     multiplies by 1/0, and the NaN falls through its NF4 tree to code 0
 *     (-1.0): -0.0 without double quantisation, -scale with it. FP4 codes
 *     agree (its NaN lands on code 0 too).
 *   - the offset is the float64 sum of the absmax values in block order
 *     divided by their count, rounded once to fp32; torch's fp32 mean()
 *     may differ from it in the last bit, with its reduction order.
 *   - the reciprocal is IEEE's; bitsandbytes' CUDA build (--use_fast_math)
 *     takes an approximate one (within an ulp) and flushes subnormals, so
 *     on a GPU a value within an ulp of a threshold may go either way.
 * Inputs are finite; what a NaN or infinite element gives is unspecified,
 * though every code written is valid.
 *
 * A region is one tensor's quantised form in one contiguous byte range, for
 * storing and sharding a whole unit as bytes. With n elements,
 * B = ceil(n / 64) blocks and G = ceil(B / 256) groups, at byte offsets
 * (quant4_layout gives them):
 *
 *     0          codes      uint8[ceil(n / 2)]   packed as above
 *     C = ceil(n / 2) rounded up to a multiple of 4
 *   without double quantisation:
 *     C          absmax     float[B]
 *   with it:
 *     C          offset     float
 *     C + 4      absmax2    float[G]
 *     C + 4 + 4G qabsmax    uint8[B]
 *   the size rounded up to a multiple of 4, padding bytes 0.
 *
 * Floats are in the machine's byte order (little-endian on every platform
 * zerotrain builds for) at offsets that are multiples of 4: a region must
 * start at a 4-byte aligned address, and regions laid end to end keep that.
 *
 * The functions are kernels: callers pass valid sizes and types (broken
 * contracts hit ZT_ASSERT). They keep no state and allocate nothing; every
 * buffer is the caller's.
 */
#ifndef ZT_WORKER_QUANT4_H
#define ZT_WORKER_QUANT4_H

#include <stddef.h>
#include <stdint.h>

#define QUANT4_BLOCK 64  /* elements per block (one fp32 absmax each) */
#define QUANT4_GROUP 256 /* block scales per group of double quantisation */

enum quant4_type {
    QUANT4_NF4, /* NormalFloat4 (QLoRA): quantiles of N(0, 1) scaled to [-1, 1] */
    QUANT4_FP4, /* bitsandbytes' fp4 (1 sign, 2 exponent, 1 mantissa bit) / 12 */
    QUANT4_TYPE_COUNT
};

/* The 16 values of t's code book in fp32, indexed by code: NF4 the QLoRA
 * paper's values as bitsandbytes stores them (ascending, code 7 is 0);
 * FP4 bitsandbytes' magnitudes 0, 0.0625, 8, 12, 4, 6, 2, 3 divided by
 * 12 for codes 0-7 and their negatives for 8-15 (the sign in bit 3; code
 * 8 is -0.0, as bitsandbytes' kernel decodes it). */
const float *quant4_codebook(enum quant4_type t);

/* "nf4" or "fp4", as bitsandbytes and Hugging Face spell them. */
const char *quant4_type_name(enum quant4_type t);

/* Sets *t to the type called `name` ("nf4", "fp4"; exact spelling) and
 * returns 1, or returns 0 for any other name. */
int quant4_type_find(const char *name, enum quant4_type *t);

/* Blocks of a tensor of n elements: ceil(n / QUANT4_BLOCK). */
size_t quant4_blocks(size_t n);

/* Quantises x[0..n) into codes[ceil(n / 2)] and absmax[quant4_blocks(n)]. */
void quant4_quantize(enum quant4_type t, const float *x, size_t n, unsigned char *codes,
                     float *absmax);

/* The block scales alone: absmax[quant4_blocks(n)] of x[0..n), as
 * quant4_quantize writes them, for blocks whose codes are not needed. */
void quant4_absmax(const float *x, size_t n, float *absmax);

/* Double quantisation of the block scales absmax[0..blocks): *offset,
 * qabsmax[blocks] (codes of quant_dynamic_signed) and
 * absmax2[ceil(blocks / QUANT4_GROUP)]. */
void quant4_double_quantize(const float *absmax, size_t blocks, unsigned char *qabsmax,
                            float *absmax2, float *offset);

/* The block scales of one quantised tensor: absmax, or with double
 * quantisation (absmax NULL) qabsmax, absmax2 and offset. Borrowed
 * pointers. */
struct quant4_scales {
    const float *absmax;          /* [blocks], or NULL under double quantisation */
    const unsigned char *qabsmax; /* [blocks] */
    const float *absmax2;         /* [groups] */
    float offset;
};

/* Block b's scale: absmax[b], or map[qabsmax[b]] * absmax2[b / 256] +
 * offset. */
float quant4_scale(const struct quant4_scales *s, size_t block);

/* Dequantises elements [lo, hi) of a tensor from its codes (element 0's
 * byte first) and scales into out[0 .. hi - lo), fp32. */
void quant4_dequantize(enum quant4_type t, const unsigned char *codes,
                       const struct quant4_scales *s, size_t lo, size_t hi, float *out);

/* Where the parts of a region lie (byte offsets; see the layout above).
 * Offsets of parts a region does not have are 0. */
struct quant4_layout {
    size_t n;       /* elements */
    size_t blocks;  /* ceil(n / QUANT4_BLOCK) */
    size_t groups;  /* ceil(blocks / QUANT4_GROUP) with double quantisation, else 0 */
    size_t absmax;  /* float[blocks], without double quantisation */
    size_t offset;  /* float, with */
    size_t absmax2; /* float[groups], with */
    size_t qabsmax; /* uint8[blocks], with */
    size_t bytes;   /* the region's size, a multiple of 4 */
};

/* The layout of a region of n >= 1 elements; double_quant 1 or 0. */
struct quant4_layout quant4_layout(size_t n, int double_quant);

/* Bytes of a region of n elements: quant4_layout(n, double_quant).bytes. */
size_t quant4_bytes(size_t n, int double_quant);

/* Quantises x[0..n) into region[quant4_bytes(n, double_quant)] (4-byte
 * aligned), padding included. */
void quant4_quantize_region(enum quant4_type t, int double_quant, const float *x, size_t n,
                            void *region);

/* Dequantises elements [lo, hi) of the n-element tensor in `region`
 * (4-byte aligned) into out[0 .. hi - lo), fp32. */
void quant4_dequantize_region(enum quant4_type t, int double_quant, const void *region, size_t n,
                              size_t lo, size_t hi, float *out);

/* The same values rounded to bf16 (common/half.h's rounding) into
 * out[0 .. hi - lo): what a bf16 run computes with, bit for bit. Each
 * block's 16 values are computed and rounded once, and each byte gives two
 * by lookup: several times faster than the fp32 path and a cast. */
void quant4_dequantize_region_bf16(enum quant4_type t, int double_quant, const void *region,
                                   size_t n, size_t lo, size_t hi, uint16_t *out);

#endif
