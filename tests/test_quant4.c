/* tests/test_quant4.c — 4-bit block-wise quantisation (worker/quant4.h)
 * against bitsandbytes' formulas.
 *
 * tests/data/quant4_reference.bin is written by
 * scripts/reference/quant4_reference.py, which emulates bitsandbytes'
 * CUDA kernels in float32 (its docstring has the rules and the layout):
 * tensors with full, short and odd last blocks, more than 256 blocks, zero
 * blocks, values at and beside every threshold, values that a division
 * would code differently from the kernels' reciprocal multiply, and very
 * large and small magnitudes, each as NF4 and FP4 with and without double
 * quantisation. Codes and statistics must equal the file's byte for byte
 * and the dequantised values bit for bit, through the array functions and
 * through a region; the rest checks what the file cannot: the error bound,
 * sub-ranges, the region layout and its size per parameter.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/half.h"
#include "../worker/quant4.h"
#include "../worker/quant_maps.h"
#include "testutil.h"

#define NAME_BYTES 24
#define MAX_ITEMS  64

struct ref_tensor {
    char name[NAME_BYTES + 1];
    size_t n;
    const unsigned char *x; /* float[n], unaligned in the file */
};

struct ref_result {
    const struct ref_tensor *tensor;
    enum quant4_type type;
    int double_quant;
    size_t blocks, groups;
    const unsigned char *codes;   /* [ceil(n / 2)] */
    const unsigned char *absmax;  /* float[blocks], without double quantisation */
    float offset;                 /* with it: */
    const unsigned char *absmax2; /* float[groups] */
    const unsigned char *qabsmax; /* [blocks] */
    const unsigned char *out;     /* float[n] */
};

struct reference {
    unsigned char *file;
    size_t size;
    const unsigned char *codebook[QUANT4_TYPE_COUNT]; /* float[16] each */
    int n_tensors, n_results;
    struct ref_tensor tensors[MAX_ITEMS];
    struct ref_result results[MAX_ITEMS];
};

/* Reads the next `n` bytes of the file; fails the test past its end. */
static const unsigned char *take(struct reference *r, size_t *at, size_t n)
{
    ck_assert_msg(*at + n <= r->size, "quant4_reference.bin: truncated at byte %zu", *at);
    const unsigned char *p = r->file + *at;
    *at += n;
    return p;
}

static int take_int(struct reference *r, size_t *at)
{
    return (int)(int32_t)testutil_get_le(take(r, at, 4), 4);
}

static float float_at(const unsigned char *p, size_t i)
{
    float v;
    memcpy(&v, p + 4 * i, sizeof v);
    return v;
}

/* A copy of float[n] at p (the file's floats are not aligned). */
static float *floats_of(const unsigned char *p, size_t n)
{
    float *v = malloc(n * sizeof *v);
    ck_assert_ptr_nonnull(v);
    memcpy(v, p, n * sizeof *v);
    return v;
}

static void read_result(struct reference *r, size_t *at, struct ref_result *res)
{
    const int t = take_int(r, at);
    ck_assert(t >= 0 && t < r->n_tensors);
    res->tensor = &r->tensors[t];
    res->type = (enum quant4_type)take_int(r, at);
    res->double_quant = take_int(r, at);
    const size_t n = res->tensor->n;
    res->blocks = (n + 63) / 64;
    res->codes = take(r, at, (n + 1) / 2);
    if (res->double_quant) {
        res->groups = (res->blocks + 255) / 256;
        res->offset = float_at(take(r, at, 4), 0);
        res->absmax2 = take(r, at, 4 * res->groups);
        res->qabsmax = take(r, at, res->blocks);
    } else {
        res->absmax = take(r, at, 4 * res->blocks);
    }
    res->out = take(r, at, 4 * n);
}

/* The reference file, parsed; free with reference_free. */
static struct reference *reference_load(void)
{
    struct reference *r = calloc(1, sizeof *r);
    ck_assert_ptr_nonnull(r);
    r->file = testutil_read_file(testutil_source_path("tests/data/quant4_reference.bin"), &r->size);
    size_t at = 0;
    ck_assert(memcmp(take(r, &at, 8), "ZTQ4R001", 8) == 0);
    r->codebook[QUANT4_NF4] = take(r, &at, 64);
    r->codebook[QUANT4_FP4] = take(r, &at, 64);
    r->n_tensors = take_int(r, &at);
    ck_assert(r->n_tensors > 0 && r->n_tensors <= MAX_ITEMS);
    for (int k = 0; k < r->n_tensors; k++) {
        memcpy(r->tensors[k].name, take(r, &at, NAME_BYTES), NAME_BYTES);
        r->tensors[k].n = (size_t)take_int(r, &at);
        r->tensors[k].x = take(r, &at, 4 * r->tensors[k].n);
    }
    r->n_results = take_int(r, &at);
    ck_assert(r->n_results > 0 && r->n_results <= MAX_ITEMS);
    for (int k = 0; k < r->n_results; k++)
        read_result(r, &at, &r->results[k]);
    ck_assert_msg(at == r->size, "quant4_reference.bin: %zu bytes after the end", r->size - at);
    return r;
}

static void reference_free(struct reference *r)
{
    free(r->file);
    free(r);
}

static const char *label(const struct ref_result *res)
{
    return testutil_fmt("%s %s%s", res->tensor->name, quant4_type_name(res->type),
                        res->double_quant ? " double" : "");
}

/* The file's scales of a result (pointing into `absmax` and `absmax2`,
 * aligned copies the caller frees). */
static struct quant4_scales ref_scales(const struct ref_result *res, float **absmax,
                                       float **absmax2)
{
    struct quant4_scales s = {0};
    *absmax = *absmax2 = NULL;
    if (res->double_quant) {
        *absmax2 = floats_of(res->absmax2, res->groups);
        s.qabsmax = res->qabsmax;
        s.absmax2 = *absmax2;
        s.offset = res->offset;
    } else {
        *absmax = floats_of(res->absmax, res->blocks);
        s.absmax = *absmax;
    }
    return s;
}

/* Runs `check` on every result of the reference file. */
static void each_result(void (*check)(const struct ref_result *res))
{
    struct reference *r = reference_load();
    for (int k = 0; k < r->n_results; k++)
        check(&r->results[k]);
    reference_free(r);
}

START_TEST(test_codebooks_match_reference)
{
    struct reference *r = reference_load();
    for (int t = 0; t < QUANT4_TYPE_COUNT; t++)
        ck_assert_msg(memcmp(quant4_codebook((enum quant4_type)t), r->codebook[t], 64) == 0,
                      "%s code book", quant4_type_name((enum quant4_type)t));
    /* fp4's sign bit: code 8 is -0.0, as the kernel decodes it */
    ck_assert(signbit(quant4_codebook(QUANT4_FP4)[8]));
    ck_assert_float_eq(quant4_codebook(QUANT4_NF4)[7], 0.0f);
    reference_free(r);
}
END_TEST

START_TEST(test_type_names)
{
    enum quant4_type t = QUANT4_FP4;
    ck_assert_str_eq(quant4_type_name(QUANT4_NF4), "nf4");
    ck_assert_str_eq(quant4_type_name(QUANT4_FP4), "fp4");
    ck_assert_int_eq(quant4_type_find("nf4", &t), 1);
    ck_assert_int_eq(t, QUANT4_NF4);
    ck_assert_int_eq(quant4_type_find("fp4", &t), 1);
    ck_assert_int_eq(t, QUANT4_FP4);
    ck_assert_int_eq(quant4_type_find("NF4", &t), 0);
    ck_assert_int_eq(quant4_type_find("int4", &t), 0);
    ck_assert_int_eq(quant4_type_find("", &t), 0);
    ck_assert_int_eq(t, QUANT4_FP4);
}
END_TEST

/* Codes, absmax and the double-quantised statistics of the array
 * functions, byte for byte. */
static void quantize_matches_reference(const struct ref_result *res)
{
    const size_t n = res->tensor->n;
    float *x = floats_of(res->tensor->x, n);
    unsigned char *codes = malloc((n + 1) / 2), *qabsmax = malloc(res->blocks);
    float *absmax = malloc(res->blocks * sizeof *absmax);
    float *absmax2 = malloc((res->blocks + 255) / 256 * sizeof *absmax2);
    ck_assert(codes && qabsmax && absmax && absmax2);
    quant4_quantize(res->type, x, n, codes, absmax);
    ck_assert_msg(memcmp(codes, res->codes, (n + 1) / 2) == 0, "%s: codes", label(res));
    /* the scales alone, for blocks whose codes a rank does not keep */
    float *scales = malloc(res->blocks * sizeof *scales);
    ck_assert_ptr_nonnull(scales);
    quant4_absmax(x, n, scales);
    ck_assert_msg(memcmp(scales, absmax, 4 * res->blocks) == 0, "%s: quant4_absmax", label(res));
    free(scales);
    if (res->double_quant) {
        float offset;
        quant4_double_quantize(absmax, res->blocks, qabsmax, absmax2, &offset);
        ck_assert_msg(memcmp(&offset, &res->offset, 4) == 0, "%s: offset %a, reference %a",
                      label(res), offset, res->offset);
        ck_assert_msg(memcmp(absmax2, res->absmax2, 4 * res->groups) == 0, "%s: absmax2",
                      label(res));
        ck_assert_msg(memcmp(qabsmax, res->qabsmax, res->blocks) == 0, "%s: qabsmax", label(res));
    } else {
        ck_assert_msg(memcmp(absmax, res->absmax, 4 * res->blocks) == 0, "%s: absmax", label(res));
    }
    free(x), free(codes), free(qabsmax), free(absmax), free(absmax2);
}

START_TEST(test_quantize_matches_reference)
{
    each_result(quantize_matches_reference);
}
END_TEST

/* The dequantised tensor from the file's codes and statistics, bit for
 * bit (signs of zeros included). */
static void dequantize_matches_reference(const struct ref_result *res)
{
    const size_t n = res->tensor->n;
    float *absmax, *absmax2, *out = malloc(n * sizeof *out);
    ck_assert_ptr_nonnull(out);
    const struct quant4_scales s = ref_scales(res, &absmax, &absmax2);
    quant4_dequantize(res->type, res->codes, &s, 0, n, out);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&out[i], res->out + 4 * i, 4) == 0, "%s: element %zu: %a, %a",
                      label(res), i, out[i], float_at(res->out, i));
    free(absmax), free(absmax2), free(out);
}

START_TEST(test_dequantize_matches_reference)
{
    each_result(dequantize_matches_reference);
}
END_TEST

/* A region holds the reference's bytes at the layout's offsets, zeros in
 * its padding, and dequantises to the reference's values. */
static void region_matches_reference(const struct ref_result *res)
{
    const size_t n = res->tensor->n;
    const struct quant4_layout l = quant4_layout(n, res->double_quant);
    float *x = floats_of(res->tensor->x, n), *out = malloc(n * sizeof *out);
    /* poisoned, so that padding left unwritten shows */
    unsigned char *region = malloc(l.bytes);
    ck_assert(out && region);
    memset(region, 0xA5, l.bytes);
    quant4_quantize_region(res->type, res->double_quant, x, n, region);
    const size_t ncodes = (n + 1) / 2;
    ck_assert_msg(memcmp(region, res->codes, ncodes) == 0, "%s: codes", label(res));
    size_t end;
    if (res->double_quant) {
        ck_assert(memcmp(region + l.offset, &res->offset, 4) == 0);
        ck_assert(memcmp(region + l.absmax2, res->absmax2, 4 * l.groups) == 0);
        ck_assert(memcmp(region + l.qabsmax, res->qabsmax, l.blocks) == 0);
        for (size_t i = ncodes; i < l.offset; i++)
            ck_assert_msg(region[i] == 0, "%s: padding byte %zu", label(res), i);
        end = l.qabsmax + l.blocks;
    } else {
        ck_assert(memcmp(region + l.absmax, res->absmax, 4 * l.blocks) == 0);
        for (size_t i = ncodes; i < l.absmax; i++)
            ck_assert_msg(region[i] == 0, "%s: padding byte %zu", label(res), i);
        end = l.absmax + 4 * l.blocks;
    }
    for (size_t i = end; i < l.bytes; i++)
        ck_assert_msg(region[i] == 0, "%s: padding byte %zu", label(res), i);
    quant4_dequantize_region(res->type, res->double_quant, region, n, 0, n, out);
    ck_assert_msg(memcmp(out, res->out, 4 * n) == 0, "%s: dequantised", label(res));
    free(x), free(out), free(region);
}

START_TEST(test_region_matches_reference)
{
    each_result(region_matches_reference);
}
END_TEST

/* Half the largest distance between neighbouring values of the code
 * book: no value in [-1, 1] is farther from its nearest code. */
static double half_largest_gap(enum quant4_type t)
{
    double v[16], gap = 0.0;
    for (int k = 0; k < 16; k++)
        v[k] = quant4_codebook(t)[k];
    for (int k = 0; k < 16; k++) /* insertion sort: 16 values */
        for (int j = k; j > 0 && v[j] < v[j - 1]; j--) {
            const double s = v[j];
            v[j] = v[j - 1], v[j - 1] = s;
        }
    for (int k = 1; k < 16; k++)
        gap = fmax(gap, v[k] - v[k - 1]);
    return gap / 2;
}

/* |x - dequantised| <= half the largest code gap times the block's absmax
 * (a few float32 roundings aside); under double quantisation plus the
 * error of the block's scale, since |code| <= 1, and the rounding of
 * code * scale. Blocks of zeros come back
 * as zeros either way. */
static void round_trip_error_is_bounded(const struct ref_result *res)
{
    const size_t n = res->tensor->n;
    float *x = floats_of(res->tensor->x, n), *out = floats_of(res->out, n);
    float *absmax = malloc(res->blocks * sizeof *absmax), *absmax_ref, *absmax2;
    unsigned char *codes = malloc((n + 1) / 2);
    ck_assert(absmax && codes);
    quant4_quantize(res->type, x, n, codes, absmax);
    const struct quant4_scales s = ref_scales(res, &absmax_ref, &absmax2);
    const double half_gap = half_largest_gap(res->type);
    for (size_t i = 0; i < n; i++) {
        const size_t b = i / QUANT4_BLOCK;
        const double a = absmax[b], scale = quant4_scale(&s, b);
        const double bound = half_gap * a * (1 + 0x1p-20) + fabs(a - scale) + 0x1p-23 * fabs(scale);
        ck_assert_msg(fabs((double)x[i] - out[i]) <= bound, "%s: element %zu: %a -> %a", label(res),
                      i, x[i], out[i]);
        if (a == 0.0)
            ck_assert_msg(out[i] == 0.0f, "%s: element %zu of a zero block: %a", label(res), i,
                          out[i]);
    }
    free(x), free(out), free(absmax), free(absmax_ref), free(absmax2), free(codes);
}

START_TEST(test_round_trip_error_is_bounded)
{
    each_result(round_trip_error_is_bounded);
}
END_TEST

/* Every sub-range [lo, hi) — odd and even ends, inside one block, across
 * blocks and groups, empty — equals the full dequantisation's slice, from
 * arrays and from a region. */
static void subrange_equals_slice(const struct ref_result *res)
{
    const size_t n = res->tensor->n;
    float *x = floats_of(res->tensor->x, n), *full = floats_of(res->out, n);
    float *part = malloc((n + 1) * sizeof *part), *absmax, *absmax2;
    unsigned char *region = malloc(quant4_bytes(n, res->double_quant));
    ck_assert(part && region);
    quant4_quantize_region(res->type, res->double_quant, x, n, region);
    const struct quant4_scales s = ref_scales(res, &absmax, &absmax2);
    const size_t cuts[] = {0,    1,     2,     3,     63,    64,        65,    127,   128, 129,
                           1000, 16383, 16384, 16385, n / 3, n / 2 + 1, n - 2, n - 1, n};
    const size_t ncuts = sizeof cuts / sizeof cuts[0];
    for (size_t a = 0; a < ncuts; a++)
        for (size_t b = 0; b < ncuts; b++) {
            const size_t lo = cuts[a], hi = cuts[b];
            if (lo > hi || hi > n)
                continue;
            part[hi - lo] = 42.0f; /* nothing past hi - lo is written */
            quant4_dequantize(res->type, res->codes, &s, lo, hi, part);
            ck_assert_msg(memcmp(part, full + lo, (hi - lo) * sizeof *part) == 0, "%s: [%zu, %zu)",
                          label(res), lo, hi);
            ck_assert(part[hi - lo] == 42.0f);
            quant4_dequantize_region(res->type, res->double_quant, region, n, lo, hi, part);
            ck_assert_msg(memcmp(part, full + lo, (hi - lo) * sizeof *part) == 0,
                          "%s: region [%zu, %zu)", label(res), lo, hi);
        }
    free(x), free(full), free(part), free(absmax), free(absmax2), free(region);
}

START_TEST(test_subrange_equals_slice)
{
    each_result(subrange_equals_slice);
}
END_TEST

static size_t round_up4(size_t v)
{
    return (v + 3) / 4 * 4;
}

/* The layout as quant4.h draws it, for sizes around every boundary. */
START_TEST(test_region_layout)
{
    const size_t sizes[] = {
        1,     2,     3,     63,        64,        65,       127,           128,    129,
        16383, 16384, 16385, 16384 * 2, 16384 + 1, 64 * 257, 64 * 300 + 37, 1000003};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const size_t n = sizes[k], blocks = (n + 63) / 64, groups = (blocks + 255) / 256;
        const size_t stats = round_up4((n + 1) / 2);
        struct quant4_layout l = quant4_layout(n, 0);
        ck_assert_uint_eq(l.n, n);
        ck_assert_uint_eq(l.blocks, blocks);
        ck_assert_uint_eq(quant4_blocks(n), blocks);
        ck_assert_uint_eq(l.groups, 0);
        ck_assert_uint_eq(l.absmax, stats);
        ck_assert_uint_eq(l.bytes, stats + 4 * blocks);
        ck_assert_uint_eq(quant4_bytes(n, 0), l.bytes);
        l = quant4_layout(n, 1);
        ck_assert_uint_eq(l.groups, groups);
        ck_assert_uint_eq(l.offset, stats);
        ck_assert_uint_eq(l.absmax2, stats + 4);
        ck_assert_uint_eq(l.qabsmax, stats + 4 + 4 * groups);
        ck_assert_uint_eq(l.bytes, round_up4(stats + 4 + 4 * groups + blocks));
        ck_assert_uint_eq(l.bytes % 4, 0);
        ck_assert_uint_eq(quant4_bytes(n, 1), l.bytes);
    }
}
END_TEST

/* A 4096 x 4096 weight: half a byte per parameter for the codes, 4 bytes
 * per 64 for absmax, or with double quantisation 1 byte per 64 and 4 per
 * 64 * 256. */
START_TEST(test_bytes_per_parameter)
{
    const size_t n = 4096 * 4096;
    const double plain = (double)quant4_bytes(n, 0) / (double)n;
    const double dq = (double)quant4_bytes(n, 1) / (double)n;
    ck_assert_double_eq_tol(plain, 0.5 + 4.0 / 64, 1e-9);
    ck_assert_double_le(dq, 0.52);
    ck_assert_double_eq_tol(dq, 0.5 + 1.0 / 64 + 4.0 / (64 * 256) + 4.0 / (double)n, 1e-12);
}
END_TEST

/* Regions laid end to end in one blob (each a multiple of 4 bytes) hold
 * the same bytes as regions quantised alone and read back the same. */
START_TEST(test_regions_end_to_end)
{
    const size_t n[2] = {77, 64 * 300 + 37};
    const size_t bytes[2] = {quant4_bytes(n[0], 1), quant4_bytes(n[1], 1)};
    float *x = malloc(n[1] * sizeof *x), *out = malloc(n[1] * sizeof *out);
    float *alone_out = malloc(n[1] * sizeof *alone_out);
    unsigned char *blob = malloc(bytes[0] + bytes[1] + 4), *alone = malloc(bytes[1]);
    ck_assert(x && out && alone_out && blob && alone);
    for (size_t i = 0; i < n[1]; i++)
        x[i] = sinf(0.37f * (float)i) * (float)(1 + i % 97);
    memset(blob, 0x5A, bytes[0] + bytes[1] + 4);
    quant4_quantize_region(QUANT4_NF4, 1, x, n[0], blob);
    quant4_quantize_region(QUANT4_NF4, 1, x, n[1], blob + bytes[0]);
    for (int k = 0; k < 2; k++) {
        const unsigned char *mine = blob + (k ? bytes[0] : 0);
        quant4_quantize_region(QUANT4_NF4, 1, x, n[k], alone);
        ck_assert(memcmp(mine, alone, bytes[k]) == 0);
        quant4_dequantize_region(QUANT4_NF4, 1, mine, n[k], 0, n[k], out);
        quant4_dequantize_region(QUANT4_NF4, 1, alone, n[k], 0, n[k], alone_out);
        ck_assert(memcmp(out, alone_out, n[k] * sizeof *out) == 0);
    }
    for (size_t i = 0; i < 4; i++)
        ck_assert_uint_eq(blob[bytes[0] + bytes[1] + i], 0x5A);
    free(x), free(out), free(alone_out), free(blob), free(alone);
}
END_TEST

/* The bf16 decode is the fp32 decode rounded (common/half.h), bit for bit:
 * both types, with and without double quantisation, whole and over
 * subranges that start and end on either nibble and across blocks; a
 * block's scale of 0 and values that round up to the next binade among
 * them. */
START_TEST(test_bf16_decode_is_the_fp32_decode_rounded)
{
    const size_t n = 64 * 300 + 37;
    const size_t ranges[][2] = {{0, n}, {1, n}, {0, n - 1}, {63, 65}, {64, 64}, {65, 1000}, {7, 8}};
    float *x = malloc(n * sizeof *x), *wide = malloc(n * sizeof *wide);
    uint16_t *narrow = malloc((n + 1) * sizeof *narrow);
    unsigned char *region = malloc(quant4_bytes(n, 1) + quant4_bytes(n, 0));
    ck_assert(x && wide && narrow && region);
    for (size_t i = 0; i < n; i++)
        x[i] = i / 64 == 5 ? 0.0f : sinf(0.37f * (float)i) * (float)(1 + i % 97) * 1.0039f;
    for (int t = QUANT4_NF4; t <= QUANT4_FP4; t++)
        for (int dq = 0; dq <= 1; dq++) {
            quant4_quantize_region((enum quant4_type)t, dq, x, n, region);
            for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
                const size_t lo = ranges[r][0], hi = ranges[r][1];
                quant4_dequantize_region((enum quant4_type)t, dq, region, n, lo, hi, wide);
                narrow[hi - lo] = 0xBEEF;
                quant4_dequantize_region_bf16((enum quant4_type)t, dq, region, n, lo, hi, narrow);
                ck_assert_uint_eq(narrow[hi - lo], 0xBEEF);
                for (size_t i = 0; i < hi - lo; i++)
                    ck_assert_msg(narrow[i] == zt_f32_to_bf16(wide[i]),
                                  "type %d dq %d [%zu, %zu) element %zu: %04x, fp32 %a", t, dq, lo,
                                  hi, lo + i, narrow[i], (double)wide[i]);
            }
        }
    free(x), free(wide), free(narrow), free(region);
}
END_TEST

/* The 8-bit map search AdamW8bit and double quantisation share: every
 * code finds itself, midpoints of neighbours go to one of them, NaN to 0. */
START_TEST(test_dynamic_map_encode)
{
    const float *maps[] = {quant_dynamic_signed, quant_dynamic_unsigned};
    for (int m = 0; m < 2; m++) {
        const float *map = maps[m];
        for (int k = 0; k < 256; k++)
            ck_assert_int_eq(quant_dynamic_encode(map, map[k]), k);
        for (int k = 0; k + 1 < 256; k++) {
            const float mid = (map[k] + map[k + 1]) * 0.5f;
            const int q = quant_dynamic_encode(map, mid);
            ck_assert(q == k || q == k + 1);
            ck_assert_int_eq(quant_dynamic_encode(map, nextafterf(mid, -2.0f)), k);
            ck_assert_int_eq(quant_dynamic_encode(map, nextafterf(mid, 2.0f)), k + 1);
        }
        ck_assert_int_eq(quant_dynamic_encode(map, NAN), 0);
        ck_assert_int_eq(quant_dynamic_encode(map, 2.0f), 255);
    }
    ck_assert_int_eq(quant_dynamic_encode(quant_dynamic_signed, -2.0f), 0);
    ck_assert_float_eq(quant_dynamic_signed[127], 0.0f);
}
END_TEST

/* The bucket index gives the search's codes: at each code's lowest value
 * and the float below it, at the ends, NaN and both zeros, and over every
 * 65537th float; and its committed tables are what quant_index_build
 * gives (scripts/gen_quant_index.sh rewrites them). */
START_TEST(test_dynamic_map_index)
{
    const float *maps[] = {quant_dynamic_signed, quant_dynamic_unsigned};
    const struct quant_index *index[] = {&quant_index_signed, &quant_index_unsigned};
    static unsigned char first[2 * QUANT_INDEX_HALF];
    static float bound[257];
    for (int m = 0; m < 2; m++) {
        const float *map = maps[m];
        const struct quant_index *ix = index[m];
        unsigned char ends[3];
        ck_assert_int_eq(quant_index_build(map, first, bound, ends), 0);
        ck_assert_msg(memcmp(first, ix->first, sizeof first) == 0 &&
                          memcmp(bound, ix->bound, sizeof bound) == 0 && ends[0] == ix->tiny &&
                          ends[1] == ix->below && ends[2] == ix->above,
                      "worker/quant_maps_index.c is stale: run scripts/gen_quant_index.sh");
        for (int k = 1; k < 256; k++) {
            const float at = bound[k], before = nextafterf(at, -INFINITY);
            ck_assert_int_eq(quant_dynamic_encode(map, at), k);
            ck_assert_int_eq(quant_index_encode(ix, at), k);
            ck_assert_int_eq(quant_index_encode(ix, before), quant_dynamic_encode(map, before));
            ck_assert_int_lt(quant_index_encode(ix, before), k);
        }
        const float ends_at[] = {0.0f,  -0.0f,    NAN,       INFINITY,        -INFINITY, 2.0f,
                                 -2.0f, 0x1p-25f, -0x1p-25f, 0x1.fffffep-26f, 1.0f,      -1.0f};
        for (size_t i = 0; i < sizeof ends_at / sizeof *ends_at; i++)
            ck_assert_int_eq(quant_index_encode(ix, ends_at[i]),
                             quant_dynamic_encode(map, ends_at[i]));
        for (uint64_t u = 0; u <= 0xffffffffu; u += 65537) {
            const uint32_t bits = (uint32_t)u;
            float x;
            memcpy(&x, &bits, sizeof x);
            ck_assert_msg(quant_index_encode(ix, x) == quant_dynamic_encode(map, x),
                          "map %d, %a: %d against %d", m, (double)x, quant_index_encode(ix, x),
                          quant_dynamic_encode(map, x));
        }
    }
}
END_TEST

static Suite *quant4_suite(void)
{
    Suite *s = suite_create("quant4");
    TCase *tc = testutil_tcase(s, "reference", 120);
    tcase_add_test(tc, test_codebooks_match_reference);
    tcase_add_test(tc, test_type_names);
    tcase_add_test(tc, test_quantize_matches_reference);
    tcase_add_test(tc, test_dequantize_matches_reference);
    tcase_add_test(tc, test_region_matches_reference);
    tc = testutil_tcase(s, "properties", 120);
    tcase_add_test(tc, test_round_trip_error_is_bounded);
    tcase_add_test(tc, test_subrange_equals_slice);
    tcase_add_test(tc, test_region_layout);
    tcase_add_test(tc, test_bytes_per_parameter);
    tcase_add_test(tc, test_regions_end_to_end);
    tcase_add_test(tc, test_bf16_decode_is_the_fp32_decode_rounded);
    tcase_add_test(tc, test_dynamic_map_encode);
    tcase_add_test(tc, test_dynamic_map_index);
    return s;
}

int main(void)
{
    return testutil_run_suite(quant4_suite(), 0);
}
