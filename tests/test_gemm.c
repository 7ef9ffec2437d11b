/* tests/test_gemm.c — the CPU's matrix products (worker/cpu/gemm.h)
 * against a naive double loop, through every library: every transpose
 * pair, alpha, accumulation, leading dimensions wider than the rows (the
 * column slices LoRA writes into), odd and degenerate sizes, and bf16
 * operands (whose products are exact in fp32 accumulation, so the bound
 * is the fp32 one on the rounded inputs). Also what each library says it
 * runs on, and a bad ZT_CPU_GEMM. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"
#include "testutil.h"
#include "worker/cpu/gemm.h"

/* fp32 against a double reference: K terms of magnitude <= 1 each. */
static double bound(int K)
{
    return 1e-5 * (1.0 + sqrt((double)K));
}

struct operand {
    float *f;    /* the values as fp32 (bf16-rounded for bf16 runs) */
    uint16_t *h; /* their bf16 bits */
};

static struct operand make(size_t n, unsigned seed, int bf16)
{
    struct operand o = {malloc(n * sizeof(float) + 4), malloc(n * sizeof(uint16_t) + 2)};
    srand(seed);
    for (size_t i = 0; i < n; i++) {
        float v = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
        o.h[i] = zt_f32_to_bf16(v);
        o.f[i] = bf16 ? zt_bf16_to_f32(o.h[i]) : v;
    }
    return o;
}

/* A(i,k) of op(A) as stored. */
static double at(const float *X, int trans, int ld, int i, int k)
{
    return trans ? X[(size_t)k * ld + i] : X[(size_t)i * ld + k];
}

static void check_one(enum cpu_gemm_lib lib, int ta, int tb, int M, int N, int K, float alpha,
                      int acc, int pad, int bf16)
{
    const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb,
                 nc = (size_t)M * ldc;
    struct operand a = make(na, 1u + (unsigned)M, bf16), b = make(nb, 2u + (unsigned)N, bf16),
                   c0 = make(nc, 3u + (unsigned)K, 0);
    float *c = malloc(nc * sizeof(float) + 4);
    memcpy(c, c0.f, nc * sizeof(float));
    struct cpu_gemm *g;
    ck_assert_int_eq(cpu_gemm_create(lib, &g), ZT_OK);
    const struct cpu_gemm_call call = {.trans_a = ta,
                                       .trans_b = tb,
                                       .M = M,
                                       .N = N,
                                       .K = K,
                                       .alpha = alpha,
                                       .accumulate = acc,
                                       .ab_type = bf16 ? ZT_BF16 : ZT_F32,
                                       .A = bf16 ? (const void *)a.h : a.f,
                                       .lda = lda,
                                       .B = bf16 ? (const void *)b.h : b.f,
                                       .ldb = ldb,
                                       .C = c,
                                       .ldc = ldc};
    ck_assert_int_eq(cpu_gemm_run(g, &call), ZT_OK);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < ldc; j++) {
            const float got = c[(size_t)i * ldc + j];
            if (j >= N) { /* the padding columns are never written */
                ck_assert_msg(got == c0.f[(size_t)i * ldc + j], "%s: column %d of %d written",
                              cpu_gemm_lib_name(lib), j, ldc);
                continue;
            }
            double want = 0;
            for (int k = 0; k < K; k++)
                want += at(a.f, ta, lda, i, k) * at(b.f, !tb, ldb, j, k);
            want = alpha * want + (acc ? c0.f[(size_t)i * ldc + j] : 0.0);
            ck_assert_msg(fabs(got - want) <= bound(K) * (1 + fabs(alpha)),
                          "%s ta %d tb %d %dx%dx%d alpha %g acc %d pad %d bf16 %d: C[%d,%d] %.9g "
                          "want %.9g",
                          cpu_gemm_lib_name(lib), ta, tb, M, N, K, alpha, acc, pad, bf16, i, j, got,
                          want);
        }
    cpu_gemm_destroy(g);
    free(a.f), free(a.h), free(b.f), free(b.h), free(c0.f), free(c0.h), free(c);
}

static const int SHAPES[][3] = {{1, 1, 1},    {7, 5, 3},    {33, 17, 64}, {64, 96, 130},
                                {130, 8, 96}, {8, 130, 40}, {3, 256, 768}};

/* Every library on every shape, transpose pair, alpha, accumulation and
 * padding. _i: the library. */
START_TEST(products_match_double_loops)
{
    const enum cpu_gemm_lib lib = (enum cpu_gemm_lib)_i;
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int v = 0; v < 4; v++)
                check_one(lib, t & 1, t >> 1, SHAPES[s][0], SHAPES[s][1], SHAPES[s][2],
                          v & 1 ? 0.37f : 1.0f, v >> 1, s % 2 ? 3 : 0, 0);
}
END_TEST

/* Whether oneDNN has a bf16 kernel on this CPU (none on an AVX2-only
 * one); says so when not. */
static int cpu_has_bf16_gemm(void)
{
    struct cpu_gemm *g;
    char buf[160];
    ck_assert_int_eq(cpu_gemm_create(CPU_GEMM_ONEDNN, &g), ZT_OK);
    const zt_status s = cpu_gemm_describe(g, ZT_BF16, buf, sizeof buf);
    /* supports says the same as describe, whichever it is */
    ck_assert_int_eq(cpu_gemm_supports(g, ZT_BF16), s);
    cpu_gemm_destroy(g);
    if (s == ZT_ERR_UNSUPPORTED) {
        ck_assert_msg(strstr(zt_error_message(), "has no bf16 GEMM for this CPU"), "%s",
                      zt_error_message());
        fprintf(stderr, "test_gemm: bf16 cases skipped: %s\n", zt_error_message());
        return 0;
    }
    ck_assert_int_eq(s, ZT_OK);
    return 1;
}

/* bf16 operands with fp32 accumulation (oneDNN, and auto which takes it),
 * where this CPU has a bf16 kernel; elsewhere the refusal is checked. */
START_TEST(bf16_products_match_double_loops)
{
    if (!cpu_has_bf16_gemm())
        return;
    const enum cpu_gemm_lib lib = _i ? CPU_GEMM_AUTO : CPU_GEMM_ONEDNN;
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
        for (int t = 0; t < 4; t++)
            check_one(lib, t & 1, t >> 1, SHAPES[s][0], SHAPES[s][1], SHAPES[s][2], 1.0f, t & 1,
                      s % 2 ? 5 : 0, 1);
}
END_TEST

/* K = 0: C is alpha * (empty sum) = 0, or left as it was. */
START_TEST(empty_sums)
{
    for (int lib = CPU_GEMM_AUTO; lib < CPU_GEMM_LIB_COUNT; lib++) {
        struct cpu_gemm *g;
        ck_assert_int_eq(cpu_gemm_create((enum cpu_gemm_lib)lib, &g), ZT_OK);
        float c[6] = {1, 2, 3, 4, 5, 6};
        struct cpu_gemm_call call = {.M = 2,
                                     .N = 3,
                                     .K = 0,
                                     .alpha = 1.0f,
                                     .accumulate = 1,
                                     .ab_type = ZT_F32,
                                     .A = c,
                                     .lda = 1,
                                     .B = c,
                                     .ldb = 3,
                                     .C = c,
                                     .ldc = 3};
        ck_assert_int_eq(cpu_gemm_run(g, &call), ZT_OK);
        ck_assert(c[0] == 1 && c[5] == 6);
        call.accumulate = 0;
        ck_assert_int_eq(cpu_gemm_run(g, &call), ZT_OK);
        for (int i = 0; i < 6; i++)
            ck_assert(c[i] == 0.0f);
        cpu_gemm_destroy(g);
    }
}
END_TEST

/* The same state repeats a product bit for bit, and a state made for the
 * call gives what a kept one gives. */
START_TEST(kept_kernels_repeat_exactly)
{
    enum { M = 64, N = 96, K = 200 };
    struct operand a = make((size_t)M * K, 5, 0), b = make((size_t)N * K, 6, 0);
    float *c1 = calloc((size_t)M * N, sizeof(float)), *c2 = calloc((size_t)M * N, sizeof(float)),
          *c3 = calloc((size_t)M * N, sizeof(float));
    struct cpu_gemm *g;
    ck_assert_int_eq(cpu_gemm_create(CPU_GEMM_AUTO, &g), ZT_OK);
    struct cpu_gemm_call call = {.trans_b = 1,
                                 .M = M,
                                 .N = N,
                                 .K = K,
                                 .alpha = 1.0f,
                                 .ab_type = ZT_F32,
                                 .A = a.f,
                                 .lda = K,
                                 .B = b.f,
                                 .ldb = K,
                                 .C = c1,
                                 .ldc = N};
    ck_assert_int_eq(cpu_gemm_run(g, &call), ZT_OK);
    call.C = c2;
    ck_assert_int_eq(cpu_gemm_run(g, &call), ZT_OK);
    call.C = c3;
    ck_assert_int_eq(cpu_gemm_run(NULL, &call), ZT_OK);
    ck_assert(memcmp(c1, c2, sizeof(float) * M * N) == 0);
    ck_assert(memcmp(c1, c3, sizeof(float) * M * N) == 0);
    cpu_gemm_destroy(g);
    free(a.f), free(a.h), free(b.f), free(b.h), free(c1), free(c2), free(c3);
}
END_TEST

/* Each library names itself and its kernel; OpenBLAS has no bf16. */
START_TEST(libraries_say_what_they_run)
{
    char buf[256];
    struct cpu_gemm *g;
    ck_assert_int_eq(cpu_gemm_create(CPU_GEMM_OPENBLAS, &g), ZT_OK);
    ck_assert_int_eq(cpu_gemm_describe(g, ZT_F32, buf, sizeof buf), ZT_OK);
    ck_assert_msg(strncmp(buf, "openblas 0.", 11) == 0, "%s", buf);
    ck_assert_int_eq(cpu_gemm_describe(g, ZT_BF16, buf, sizeof buf), ZT_OK);
    ck_assert_str_eq(buf, "none (bf16 needs oneDNN)");
    ck_assert_int_eq(cpu_gemm_supports(g, ZT_F32), ZT_OK);
    ck_assert_int_eq(cpu_gemm_supports(g, ZT_BF16), ZT_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(zt_error_message(), "bf16 GEMM needs oneDNN"), "%s", zt_error_message());
    uint16_t x = 0;
    float y = 0;
    const struct cpu_gemm_call bf = {.M = 1,
                                     .N = 1,
                                     .K = 1,
                                     .alpha = 1.0f,
                                     .ab_type = ZT_BF16,
                                     .A = &x,
                                     .lda = 1,
                                     .B = &x,
                                     .ldb = 1,
                                     .C = &y,
                                     .ldc = 1};
    ck_assert_int_eq(cpu_gemm_run(g, &bf), ZT_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(zt_error_message(), "needs oneDNN"), "%s", zt_error_message());
    cpu_gemm_destroy(g);
    ck_assert_int_eq(cpu_gemm_create(CPU_GEMM_ONEDNN, &g), ZT_OK);
    for (int t = 0; t < 1 + cpu_has_bf16_gemm(); t++) {
        ck_assert_int_eq(cpu_gemm_describe(g, t ? ZT_BF16 : ZT_F32, buf, sizeof buf), ZT_OK);
        ck_assert_msg(strncmp(buf, "onednn 2.", 9) == 0 || strncmp(buf, "onednn 3.", 9) == 0, "%s",
                      buf);
        fprintf(stderr, "test_gemm: %s products run on %s\n", t ? "bf16" : "fp32", buf);
    }
    cpu_gemm_destroy(g);
}
END_TEST

START_TEST(a_bad_library_name_is_refused)
{
    setenv("ZT_CPU_GEMM", "mkl", 1);
    struct cpu_gemm *g = (struct cpu_gemm *)1;
    ck_assert_int_eq(cpu_gemm_create(CPU_GEMM_AUTO, &g), ZT_ERR_CONFIG);
    ck_assert_ptr_null(g);
    ck_assert_msg(strstr(zt_error_message(), "ZT_CPU_GEMM=mkl: unknown GEMM library (auto, "
                                             "onednn, openblas)"),
                  "%s", zt_error_message());
    setenv("ZT_CPU_GEMM", "openblas", 1);
    ck_assert_int_eq(cpu_gemm_create(CPU_GEMM_AUTO, &g), ZT_OK);
    char buf[128];
    ck_assert_int_eq(cpu_gemm_describe(g, ZT_F32, buf, sizeof buf), ZT_OK);
    ck_assert_msg(strncmp(buf, "openblas", 8) == 0, "%s", buf);
    cpu_gemm_destroy(g);
    unsetenv("ZT_CPU_GEMM");
}
END_TEST

int main(void)
{
    unsetenv("ZT_CPU_GEMM");
    Suite *s = suite_create("gemm");
    TCase *tc = testutil_tcase(s, "gemm", 300);
    tcase_add_loop_test(tc, products_match_double_loops, CPU_GEMM_AUTO, CPU_GEMM_LIB_COUNT);
    tcase_add_loop_test(tc, bf16_products_match_double_loops, 0, 2);
    tcase_add_test(tc, empty_sums);
    tcase_add_test(tc, kept_kernels_repeat_exactly);
    tcase_add_test(tc, libraries_say_what_they_run);
    tcase_add_test(tc, a_bad_library_name_is_refused);
    return testutil_run_suite(s, 0);
}
