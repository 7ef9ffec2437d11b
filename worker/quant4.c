/* worker/quant4.c — 4-bit block-wise quantisation as bitsandbytes'
 * quantize_4bit (see quant4.h). */
#include "quant4.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../common/half.h"
#include "../common/status.h"
#include "quant_maps.h"

/* The code books and thresholds are bitsandbytes' constants as its
 * csrc/kernels.cu writes them, so each rounds to the same float. */
static const float nf4_codes[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

/* dQuantizeNF4's decision tree is a binary search over these midpoints of
 * neighbouring codes, ascending: the code is how many of them lie strictly
 * below x. */
static const float nf4_thresholds[15] = {
    -0.8480964004993439f,  -0.6106329262256622f,  -0.4599952697753906f,   -0.33967943489551544f,
    -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,
    0.1202552504837513f,   0.2035212516784668f,   0.2920137718319893f,    0.3893125355243683f,
    0.5016634166240692f,   0.6427869200706482f,   0.8614784181118011f,
};

/* fp4: sign in bit 3, and the magnitudes not in value order (bitsandbytes'
 * bit patterns of a 2-exponent, 1-mantissa float divided by 12). */
static const float fp4_codes[16] = {
    0.0f,  0.005208333333f,  0.66666667f,  1.0f,  0.33333333f,  0.5f,  0.16666667f,  0.25f,
    -0.0f, -0.005208333333f, -0.66666667f, -1.0f, -0.33333333f, -0.5f, -0.16666667f, -0.25f,
};

/* dQuantizeFP4 on |x|: the magnitude's rank is how many of these lie
 * strictly below it, and fp4_by_rank its bit pattern. */
static const float fp4_thresholds[7] = {
    0.00260417f, 0.0859375f, 0.20833333f, 0.29166667f, 0.4166667f, 0.583333f, 0.8333333f,
};
static const unsigned char fp4_by_rank[8] = {0x0, 0x1, 0x6, 0x7, 0x4, 0x5, 0x2, 0x3};

static const char *const type_names[QUANT4_TYPE_COUNT] = {"nf4", "fp4"};

const float *quant4_codebook(enum quant4_type t)
{
    ZT_ASSERT(t == QUANT4_NF4 || t == QUANT4_FP4);
    return t == QUANT4_NF4 ? nf4_codes : fp4_codes;
}

const char *quant4_type_name(enum quant4_type t)
{
    ZT_ASSERT(t == QUANT4_NF4 || t == QUANT4_FP4);
    return type_names[t];
}

int quant4_type_find(const char *name, enum quant4_type *t)
{
    for (int k = 0; k < QUANT4_TYPE_COUNT; k++)
        if (strcmp(name, type_names[k]) == 0) {
            *t = (enum quant4_type)k;
            return 1;
        }
    return 0;
}

size_t quant4_blocks(size_t n)
{
    return (n + QUANT4_BLOCK - 1) / QUANT4_BLOCK;
}

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

static unsigned rank_below(const float *thresholds, int count, float x)
{
    unsigned rank = 0;
    for (int k = 0; k < count; k++)
        rank += x > thresholds[k];
    return rank;
}

/* The code of x, already scaled into [-1, 1]. NaN compares false
 * everywhere and gets code 0, as in the kernels. */
static unsigned char encode(enum quant4_type t, float x)
{
    if (t == QUANT4_NF4)
        return (unsigned char)rank_below(nf4_thresholds, 15, x);
    const unsigned char sign = x < 0.0f ? 0x8 : 0x0;
    return (unsigned char)(fp4_by_rank[rank_below(fp4_thresholds, 7, fabsf(x))] | sign);
}

/* A select, not fmaxf: libm's is a call per element, and NaN is skipped
 * either way. */
static float block_absmax(const float *x, size_t len)
{
    float m = 0.0f;
#pragma omp simd reduction(max : m)
    for (size_t i = 0; i < len; i++) {
        const float a = fabsf(x[i]);
        m = a > m ? a : m;
    }
    return m;
}

/* NF4 codes of len values times inv, one a byte: the compares summed
 * without a branch, so that the loop runs in vector lanes (NF4 encoding
 * was most of a 4-bit model's load). */
static void nf4_codes_of(const float *x, size_t len, float inv, unsigned char *c)
{
#pragma omp simd
    for (size_t i = 0; i < len; i++) {
        const float v = x[i] * inv;
        int rank = 0;
#pragma GCC unroll 15
        for (int k = 0; k < 15; k++)
            rank += v > nf4_thresholds[k];
        c[i] = (unsigned char)rank;
    }
}

/* Codes of one block of len elements with absmax a into out[ceil(len/2)].
 * bitsandbytes multiplies by 1/a; for a = 0 that is NaN, which this
 * replaces by x * 0 = 0, the code of 0 (see quant4.h). */
static void quantize_block(enum quant4_type t, const float *x, size_t len, float a,
                           unsigned char *out)
{
    const float inv = a > 0.0f ? 1.0f / a : 0.0f;
    unsigned char c[QUANT4_BLOCK + 1];
    if (t == QUANT4_NF4)
        nf4_codes_of(x, len, inv, c);
    else
        for (size_t i = 0; i < len; i++)
            c[i] = encode(t, x[i] * inv);
    c[len] = 0; /* an odd block's last byte: its low half */
    for (size_t i = 0; i < len; i += 2)
        out[i / 2] = (unsigned char)(c[i] << 4 | c[i + 1]);
}

void quant4_quantize(enum quant4_type t, const float *x, size_t n, unsigned char *codes,
                     float *absmax)
{
    ZT_ASSERT(t == QUANT4_NF4 || t == QUANT4_FP4);
    ZT_ASSERT(n >= 1);
    for (size_t b = 0; b * QUANT4_BLOCK < n; b++) {
        const size_t at = b * QUANT4_BLOCK, len = min_size(n - at, QUANT4_BLOCK);
        absmax[b] = block_absmax(x + at, len);
        quantize_block(t, x + at, len, absmax[b], codes + at / 2);
    }
}

void quant4_absmax(const float *x, size_t n, float *absmax)
{
    for (size_t b = 0; b * QUANT4_BLOCK < n; b++)
        absmax[b] =
            block_absmax(x + b * QUANT4_BLOCK, min_size(n - b * QUANT4_BLOCK, QUANT4_BLOCK));
}

/* The offset: a float64 running sum in block order, so the array and
 * region paths, which visit the scales in the same order, agree. */
static float mean_of(double sum, size_t count)
{
    return (float)(sum / (double)count);
}

/* One group of count <= QUANT4_GROUP scales, as quantize_blockwise's
 * kernel does a block of 256: centred in fp32, multiplied by the
 * reciprocal of their absmax and encoded with the signed dynamic map. A
 * group whose scales all equal the offset has absmax2 0; bitsandbytes'
 * kernel then encodes 0 * (1/0), NaN, as code 0, which decodes to
 * map[0] * 0 + offset = offset exactly: kept. */
static void double_quantize_group(const float *absmax, size_t count, float offset,
                                  unsigned char *qabsmax, float *absmax2)
{
    float centred[QUANT4_GROUP];
    *absmax2 = 0.0f;
    for (size_t k = 0; k < count; k++) {
        centred[k] = absmax[k] - offset;
        const float a = fabsf(centred[k]);
        *absmax2 = a > *absmax2 ? a : *absmax2;
    }
    if (*absmax2 == 0.0f) {
        memset(qabsmax, 0, count);
        return;
    }
    const float inv = 1.0f / *absmax2;
    for (size_t k = 0; k < count; k++)
        qabsmax[k] = quant_dynamic_encode(quant_dynamic_signed, centred[k] * inv);
}

void quant4_double_quantize(const float *absmax, size_t blocks, unsigned char *qabsmax,
                            float *absmax2, float *offset)
{
    ZT_ASSERT(blocks >= 1);
    double sum = 0.0;
    for (size_t b = 0; b < blocks; b++)
        sum += absmax[b];
    *offset = mean_of(sum, blocks);
    for (size_t g = 0; g * QUANT4_GROUP < blocks; g++)
        double_quantize_group(absmax + g * QUANT4_GROUP,
                              min_size(blocks - g * QUANT4_GROUP, QUANT4_GROUP), *offset,
                              qabsmax + g * QUANT4_GROUP, absmax2 + g);
}

float quant4_scale(const struct quant4_scales *s, size_t block)
{
    if (s->absmax)
        return s->absmax[block];
    /* two statements: bitsandbytes rounds the product before adding (two
     * kernels), and a fused multiply-add would not */
    const float scaled = quant_dynamic_signed[s->qabsmax[block]] * s->absmax2[block / QUANT4_GROUP];
    return scaled + s->offset;
}

void quant4_dequantize(enum quant4_type t, const unsigned char *codes,
                       const struct quant4_scales *s, size_t lo, size_t hi, float *out)
{
    ZT_ASSERT(lo <= hi);
    const float *book = quant4_codebook(t);
    size_t i = lo;
    while (i < hi) {
        const size_t block = i / QUANT4_BLOCK;
        const size_t end = min_size((block + 1) * QUANT4_BLOCK, hi);
        const float a = quant4_scale(s, block);
        for (; i < end; i++) {
            const unsigned char byte = codes[i / 2];
            out[i - lo] = book[i % 2 ? byte & 0xF : byte >> 4] * a;
        }
    }
}

static size_t round_up4(size_t v)
{
    return (v + 3) & ~(size_t)3;
}

struct quant4_layout quant4_layout(size_t n, int double_quant)
{
    ZT_ASSERT(n >= 1);
    struct quant4_layout l = {.n = n, .blocks = quant4_blocks(n)};
    const size_t stats = round_up4((n + 1) / 2);
    if (!double_quant) {
        l.absmax = stats;
        l.bytes = stats + l.blocks * sizeof(float);
        return l;
    }
    l.groups = (l.blocks + QUANT4_GROUP - 1) / QUANT4_GROUP;
    l.offset = stats;
    l.absmax2 = stats + sizeof(float);
    l.qabsmax = l.absmax2 + l.groups * sizeof(float);
    l.bytes = round_up4(l.qabsmax + l.blocks);
    return l;
}

size_t quant4_bytes(size_t n, int double_quant)
{
    return quant4_layout(n, double_quant).bytes;
}

/* With double quantisation the fp32 scales of all blocks are never held at
 * once: a first pass sums them for the offset, and the second quantises
 * each group's elements and then the group's scales. */
static void quantize_region_double(enum quant4_type t, const float *x,
                                   const struct quant4_layout *l, unsigned char *region)
{
    double sum = 0.0;
    for (size_t at = 0; at < l->n; at += QUANT4_BLOCK)
        sum += block_absmax(x + at, min_size(l->n - at, QUANT4_BLOCK));
    const float offset = mean_of(sum, l->blocks);
    *(float *)(region + l->offset) = offset;
    float *absmax2 = (float *)(region + l->absmax2);
    for (size_t g = 0; g < l->groups; g++) {
        float absmax[QUANT4_GROUP];
        const size_t at = g * QUANT4_GROUP * QUANT4_BLOCK;
        quant4_quantize(t, x + at, min_size(l->n - at, QUANT4_GROUP * QUANT4_BLOCK),
                        region + at / 2, absmax);
        double_quantize_group(absmax, min_size(l->blocks - g * QUANT4_GROUP, QUANT4_GROUP), offset,
                              region + l->qabsmax + g * QUANT4_GROUP, absmax2 + g);
    }
}

void quant4_quantize_region(enum quant4_type t, int double_quant, const float *x, size_t n,
                            void *region)
{
    ZT_ASSERT((uintptr_t)region % sizeof(float) == 0);
    const struct quant4_layout l = quant4_layout(n, double_quant);
    unsigned char *r = region;
    memset(r, 0, l.bytes); /* the padding */
    if (double_quant)
        quantize_region_double(t, x, &l, r);
    else
        quant4_quantize(t, x, n, r, (float *)(r + l.absmax));
}

/* The block scales of an n-element region. */
static struct quant4_scales region_scales(int double_quant, const void *region, size_t n)
{
    ZT_ASSERT((uintptr_t)region % sizeof(float) == 0);
    const struct quant4_layout l = quant4_layout(n, double_quant);
    const unsigned char *r = region;
    struct quant4_scales s = {0};
    if (double_quant) {
        s.qabsmax = r + l.qabsmax;
        s.absmax2 = (const float *)(r + l.absmax2);
        s.offset = *(const float *)(r + l.offset);
    } else {
        s.absmax = (const float *)(r + l.absmax);
    }
    return s;
}

void quant4_dequantize_region(enum quant4_type t, int double_quant, const void *region, size_t n,
                              size_t lo, size_t hi, float *out)
{
    ZT_ASSERT(hi <= n);
    const struct quant4_scales s = region_scales(double_quant, region, n);
    quant4_dequantize(t, region, &s, lo, hi, out);
}

void quant4_dequantize_region_bf16(enum quant4_type t, int double_quant, const void *region,
                                   size_t n, size_t lo, size_t hi, uint16_t *out)
{
    ZT_ASSERT(lo <= hi && hi <= n);
    const struct quant4_scales s = region_scales(double_quant, region, n);
    const unsigned char *codes = region;
    const float *book = quant4_codebook(t);
    size_t i = lo;
    while (i < hi) {
        const size_t block = i / QUANT4_BLOCK;
        const size_t end = min_size((block + 1) * QUANT4_BLOCK, hi);
        const float a = quant4_scale(&s, block);
        uint16_t value[16]; /* the block's 16 values, rounded once */
        for (int c = 0; c < 16; c++)
            value[c] = zt_f32_to_bf16(book[c] * a);
        if (i % 2) { /* a low nibble first */
            out[i - lo] = value[codes[i / 2] & 0xF];
            i++;
        }
        for (; i + 1 < end; i += 2) {
            const unsigned char byte = codes[i / 2];
            out[i - lo] = value[byte >> 4];
            out[i + 1 - lo] = value[byte & 0xF];
        }
        if (i < end) { /* a high nibble last */
            out[i - lo] = value[codes[i / 2] >> 4];
            i++;
        }
    }
}
