/* tests/test_qlora.c — the 4-bit base's tables and unit images
 * (worker/param_quant.h): which tensors are stored in 4 bits, that a
 * packed unit's image decodes to exactly what the block-wise kernels
 * (worker/quant4.h, checked against bitsandbytes' formulas in test_quant4)
 * give for its 4-bit tensors and to the working-precision values of the
 * others, that a bf16 compute dtype rounds the dequantised weights through
 * bf16, that encoding a tensor at a time from chunks of its values (as
 * model.init_from's loader does) gives the same bytes, and that a frozen
 * base is required. Training with it across
 * stages and world sizes is in test_lora_layouts. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "testutil.h"
#include "worker/lora.h"
#include "worker/model.h"
#include "worker/param_quant.h"
#include "worker/precision.h"

static const struct gpt2_config MICRO = {64, 16, 2, 2, 32};

/* The micro GPT-2 with adapters on c_attn (so the base is frozen) and
 * its linear weights in 4 bits. */
static void qlora_table_of(const struct gpt2_config *c, struct param_table *t,
                           enum quant4_type type, int dq, enum zt_dtype compute)
{
    ck_assert_int_eq(gpt2_table_build(c, t), ZT_OK);
    char *names[64] = {0};
    ck_assert_int_le(t->n_tensors, 64);
    char text[64][48];
    for (int k = 0; k < t->n_tensors; k++)
        if (t->tensors[k].linear) {
            snprintf(text[k], sizeof text[k], "%.*s", (int)strlen(t->tensors[k].name) - 7,
                     t->tensors[k].name);
            names[k] = text[k];
        }
    const char *const targets[] = {"qkv"};
    const struct lora_spec spec = {.r = 2, .alpha = 4, .targets = targets, .n_targets = 1};
    ck_assert_int_eq(lora_attach(t, &spec, (const char *const *)names), ZT_OK);
    const struct param_quant_spec q = {type, dq, compute};
    ck_assert_int_eq(param_quant_attach(t, &q), ZT_OK);
}

static void qlora_table(struct param_table *t, enum quant4_type type, int dq, enum zt_dtype compute)
{
    qlora_table_of(&MICRO, t, type, dq, compute);
}

START_TEST(linear_base_weights_are_stored_in_4_bits)
{
    struct param_table t;
    qlora_table(&t, QUANT4_NF4, 1, ZT_F32);
    int q4 = 0;
    for (int k = 0; k < t.n_tensors; k++) {
        const struct param_tensor *p = &t.tensors[k];
        const int want = p->linear == PARAM_LINEAR && !p->trainable;
        ck_assert_msg((p->storage == PARAM_STORAGE_Q4) == want, "%s", p->name);
        q4 += want;
    }
    ck_assert_int_eq(q4, 4 * MICRO.n_layer);    /* qkv, proj, fc, mlp proj */
    ck_assert(!param_quant_unit_packed(&t, 0)); /* the embeddings */
    ck_assert(param_quant_unit_packed(&t, 1) && param_quant_unit_packed(&t, 2));
    ck_assert(!param_quant_unit_packed(&t, 3));                   /* ln_f */
    ck_assert(!param_quant_unit_packed(&t, t.lora.n_base_units)); /* adapters */
    ck_assert_uint_eq(param_quant_numel(&t), (size_t)MICRO.n_layer * 12 * 32 * 32);
    param_table_free(&t);
}
END_TEST

START_TEST(a_base_that_trains_is_refused)
{
    struct param_table t;
    ck_assert_int_eq(gpt2_table_build(&MICRO, &t), ZT_OK);
    const struct param_quant_spec q = {QUANT4_NF4, 1, ZT_F32};
    ck_assert_int_eq(param_quant_attach(&t, &q), ZT_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(zt_error_message(), "lora.enabled"));
    param_table_free(&t);
}
END_TEST

/* Decoded into the 16-bit working type (what a run computing in it
 * reads), the unit is the fp32 decode rounded once, bit for bit. */
static void check_typed_decode(const struct param_table *t, int u, enum zt_dtype working,
                               const void *image, const float *f32)
{
    if (working == ZT_F32)
        return;
    const size_t n = param_table_unit_size(t, u);
    uint16_t *got = malloc(n * 2), *want = malloc(n * 2);
    ck_assert(got && want);
    param_quant_decode(t, u, working, image, working, got);
    precision_from_f32(working, f32, want, n);
    ck_assert_msg(memcmp(got, want, n * 2) == 0, "the %s decode is not the fp32 one rounded",
                  zt_precision_name(working));
    free(got);
    free(want);
}

/* Unit 1's image decodes to quant4's dequantisation of each 4-bit tensor
 * and to the working-precision rounding of the others. */
static void check_round_trip(enum quant4_type type, int dq, enum zt_dtype working,
                             enum zt_dtype compute)
{
    struct param_table t;
    qlora_table(&t, type, dq, compute);
    const int u = 1;
    const size_t n = param_table_unit_size(&t, u), base = t.unit_offset[u];
    float *x = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    unsigned char *image = calloc(1, param_quant_unit_bytes(&t, u, working));
    ck_assert(x && got && image);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(0.2 * rng_normal(11, i));
    param_quant_encode(&t, u, working, x, image);
    param_quant_decode(&t, u, working, image, ZT_F32, got);
    check_typed_decode(&t, u, working, image, got);
    for (int k = 0; k < t.n_tensors; k++) {
        const struct param_tensor *p = &t.tensors[k];
        if (p->unit != u)
            continue;
        const float *xi = x + (p->offset - base), *gi = got + (p->offset - base);
        float *want = malloc(p->numel * sizeof(float));
        unsigned char *region = malloc(quant4_bytes(p->numel, dq) + 4 * p->numel);
        ck_assert(want && region);
        if (p->storage == PARAM_STORAGE_Q4) {
            quant4_quantize_region(type, dq, xi, p->numel, region);
            quant4_dequantize_region(type, dq, region, p->numel, 0, p->numel, want);
            if (compute != ZT_F32)
                for (size_t i = 0; i < p->numel; i++) {
                    unsigned char h[2];
                    precision_from_f32(compute, want + i, h, 1);
                    precision_to_f32(compute, h, want + i, 1);
                }
        } else {
            precision_from_f32(working, xi, region, p->numel);
            precision_to_f32(working, region, want, p->numel);
        }
        ck_assert_msg(memcmp(want, gi, p->numel * sizeof(float)) == 0, "%s differs", p->name);
        double err = 0.0;
        for (size_t i = 0; i < p->numel; i++)
            err = fmax(err, fabs((double)gi[i] - xi[i]));
        ck_assert_msg(err < 0.25, "%s: error %g", p->name, err); /* 4 bits of 0.2-normal data */
        free(want);
        free(region);
    }
    free(x);
    free(got);
    free(image);
    param_table_free(&t);
}

START_TEST(images_decode_to_the_kernels_values)
{
    check_round_trip(QUANT4_NF4, 1, ZT_F32, ZT_F32);
    check_round_trip(QUANT4_FP4, 0, ZT_F32, ZT_F32);
    check_round_trip(QUANT4_NF4, 0, ZT_BF16, ZT_F32);
    check_round_trip(QUANT4_NF4, 1, ZT_BF16, ZT_BF16);
    check_round_trip(QUANT4_FP4, 1, ZT_F16, ZT_F16);
}
END_TEST

/* A source of a unit's values for param_quant_encode_tensor: x holds
 * the unit from flat element `base` on. */
struct unit_values {
    const float *x;
    size_t base;
};

static zt_status read_values(void *ctx, size_t first, size_t n, float *dst)
{
    const struct unit_values *v = ctx;
    memcpy(dst, v->x + (first - v->base), n * sizeof *dst);
    return ZT_OK;
}

/* Each tensor encoded from chunks of `chunk` values into its bytes of the
 * image repeats the whole unit's encoding byte for byte; the block
 * unit's MLP weight has 576 blocks, three groups of double quantisation. */
static void check_tensor_encoding(enum quant4_type type, int dq, enum zt_dtype working,
                                  size_t chunk)
{
    static const struct gpt2_config wide = {64, 16, 1, 2, 96};
    struct param_table t;
    qlora_table_of(&wide, &t, type, dq, ZT_F32);
    const int u = 1;
    const size_t n = param_table_unit_size(&t, u), bytes = param_quant_unit_bytes(&t, u, working);
    float *x = malloc(n * sizeof(float)), *piece = malloc(chunk * sizeof(float));
    float *scales = malloc(n * sizeof(float));
    unsigned char *whole = calloc(1, bytes), *region = malloc(bytes);
    ck_assert(x && piece && scales && whole && region);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(0.2 * rng_normal(5, i));
    param_quant_encode(&t, u, working, x, whole);
    struct unit_values v = {x, t.unit_offset[u]};
    const struct param_quant_source src = {read_values, &v};
    size_t at = 0;
    for (int k = 0; k < t.n_tensors; k++) {
        if (t.tensors[k].unit != u)
            continue;
        const size_t b = param_quant_tensor_bytes(&t, k, working);
        memset(region, 0xAB, b); /* the encoder must write every byte, padding included */
        ck_assert_int_eq(
            param_quant_encode_tensor(&t, k, working, &src, 0, b, piece, chunk, scales, region),
            ZT_OK);
        ck_assert_msg(memcmp(region, whole + at, b) == 0, "%s: chunks of %zu differ",
                      t.tensors[k].name, chunk);
        /* a rank's share (ends inside a block's codes, in the scales, at
         * the ends): its bytes as the whole encoding's */
        const size_t cuts[][2] = {
            {0, b / 3}, {b / 3, 2 * b / 3 + 7}, {17, 18}, {b / 2, b}, {b - 1, b}};
        for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
            memset(region, 0xAB, b);
            ck_assert_int_eq(param_quant_encode_tensor(&t, k, working, &src, cuts[c][0], cuts[c][1],
                                                       piece, chunk, scales, region),
                             ZT_OK);
            ck_assert_msg(
                memcmp(region + cuts[c][0], whole + at + cuts[c][0], cuts[c][1] - cuts[c][0]) == 0,
                "%s: bytes [%zu, %zu) differ", t.tensors[k].name, cuts[c][0], cuts[c][1]);
        }
        at += b;
    }
    ck_assert_uint_eq(at, bytes);
    free(x);
    free(piece);
    free(scales);
    free(whole);
    free(region);
    param_table_free(&t);
}

START_TEST(tensors_encoded_in_chunks_give_the_units_image)
{
    check_tensor_encoding(QUANT4_NF4, 1, ZT_F32, 64);
    check_tensor_encoding(QUANT4_NF4, 1, ZT_BF16, 192);
    check_tensor_encoding(QUANT4_FP4, 0, ZT_F32, 128);
    check_tensor_encoding(QUANT4_NF4, 0, ZT_F16, 1 << 20);
}
END_TEST

/* A share's blocks: those whose codes (32 bytes a block) it holds bytes
 * of; none for a share of the scales alone. */
START_TEST(a_share_encodes_the_blocks_of_its_codes)
{
    static const size_t cases[][4] = {
        /* keep_lo, keep_hi, k0, k1 for 640 elements: 10 blocks, 320 bytes of codes */
        {0, 32, 0, 1},     {31, 33, 0, 2},     {32, 64, 1, 2},
        {100, 330, 3, 10}, {320, 400, 10, 10}, {0, 400, 0, 10}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t k0, k1;
        param_quant_kept_blocks(640, cases[c][0], cases[c][1], &k0, &k1);
        ck_assert_msg(k0 == cases[c][2] && k1 == cases[c][3], "[%zu, %zu): blocks [%zu, %zu)",
                      cases[c][0], cases[c][1], k0, k1);
    }
}
END_TEST

/* With double quantisation a block unit's codes and scales take about
 * half a byte a parameter. */
START_TEST(double_quantisation_is_about_half_a_byte)
{
    struct param_table t;
    qlora_table(&t, QUANT4_NF4, 1, ZT_F32);
    const double bpp = (double)param_quant_region_bytes(&t) / (double)param_quant_numel(&t);
    ck_assert_msg(bpp <= 0.52, "%.4f bytes a parameter", bpp);
    param_table_free(&t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("qlora");
    TCase *tc = tcase_create("qlora");
    tcase_add_test(tc, linear_base_weights_are_stored_in_4_bits);
    tcase_add_test(tc, a_base_that_trains_is_refused);
    tcase_add_test(tc, images_decode_to_the_kernels_values);
    tcase_add_test(tc, double_quantisation_is_about_half_a_byte);
    tcase_add_test(tc, tensors_encoded_in_chunks_give_the_units_image);
    tcase_add_test(tc, a_share_encodes_the_blocks_of_its_codes);
    suite_add_tcase(s, tc);
    return testutil_run_suite(s, 0);
}
