/* tests/test_comm.c — the collectives, groups and messages of comm.h on the
 * "mpi" backend, and the world helpers.
 *
 * Every rank's input is a deterministic function of (rank, index), so each
 * rank computes the expected result of a collective for itself, in double,
 * without trusting any other collective. Most inputs are small integers:
 * their sums are exact in every dtype, so results are compared bit for bit
 * and the ring and native algorithms must agree exactly; fractional inputs
 * check the float paths within a rounding bound.
 *
 * MPI suites run without fork, so a failed ck_assert on one rank would leave
 * the others waiting in the next collective. Each test therefore runs all
 * of its collectives first, counting mismatches with CHECK, and asserts at
 * the end.
 */
#include <check.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../comm/comm.h"
#include "../common/half.h"
#include "../common/ledger.h"
#include "soft_check.h"
#include "testutil.h"

static struct comm *native, *ring, *autoc; /* made in main, one per algorithm */
static int rank, size;

static const size_t counts[] = {1, 7, 4097};
#define N_COUNTS (sizeof counts / sizeof counts[0])
static const enum zt_dtype all_types[] = {ZT_F32, ZT_F64, ZT_BF16, ZT_F16, ZT_I32, ZT_I64, ZT_U8};
#define N_TYPES (sizeof all_types / sizeof all_types[0])
static const enum comm_op all_ops[] = {COMM_OP_SUM, COMM_OP_MAX, COMM_OP_MIN};

/* ---- deterministic inputs and typed buffers ---- */

/* A small integer in [-11, 11] ([0, 22] for U8, whose sum over 4 ranks
 * still fits): exact in every dtype and in every partial sum. */
static double exact_value(enum zt_dtype t, int r, size_t i)
{
    int v = (int)((r * 131u + i * 71u + 5u) % 23u);
    return t == ZT_U8 ? v : v - 11;
}

/* A value in [-10, 10] with three decimals: not exact in binary. */
static double frac_value(int r, size_t i)
{
    uint64_t h = (uint64_t)r * 0x9e3779b97f4a7c15u ^ (uint64_t)(i + 1) * 0xbf58476d1ce4e5b9u;
    h ^= h >> 31;
    return (double)((int)(h % 20001u) - 10000) / 1000.0;
}

static void store(enum zt_dtype t, void *buf, size_t i, double v)
{
    switch (t) {
    case ZT_F32:
        ((float *)buf)[i] = (float)v;
        break;
    case ZT_F64:
        ((double *)buf)[i] = v;
        break;
    case ZT_BF16:
        ((uint16_t *)buf)[i] = zt_f32_to_bf16((float)v);
        break;
    case ZT_F16:
        ((uint16_t *)buf)[i] = zt_f32_to_f16((float)v);
        break;
    case ZT_I32:
        ((int32_t *)buf)[i] = (int32_t)v;
        break;
    case ZT_I64:
        ((int64_t *)buf)[i] = (int64_t)v;
        break;
    case ZT_U8:
        ((uint8_t *)buf)[i] = (uint8_t)v;
        break;
    }
}

static double load(enum zt_dtype t, const void *buf, size_t i)
{
    switch (t) {
    case ZT_F32:
        return ((const float *)buf)[i];
    case ZT_F64:
        return ((const double *)buf)[i];
    case ZT_BF16:
        return zt_bf16_to_f32(((const uint16_t *)buf)[i]);
    case ZT_F16:
        return zt_f16_to_f32(((const uint16_t *)buf)[i]);
    case ZT_I32:
        return ((const int32_t *)buf)[i];
    case ZT_I64:
        return (double)((const int64_t *)buf)[i];
    case ZT_U8:
        return ((const uint8_t *)buf)[i];
    }
    return NAN;
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* Fills buf[0..n) with this rank's exact values for global indices
 * first..first+n. */
static void *exact_buffer(enum zt_dtype t, int r, size_t first, size_t n)
{
    void *b = xmalloc(n * zt_dtype_size(t));
    for (size_t i = 0; i < n; i++)
        store(t, b, i, exact_value(t, r, first + i));
    return b;
}

static double combine(enum comm_op op, double a, double b)
{
    return op == COMM_OP_SUM ? a + b : op == COMM_OP_MAX ? fmax(a, b) : fmin(a, b);
}

/* The reduction over all ranks of the exact value at global index i. */
static double exact_reduced(enum zt_dtype t, enum comm_op op, size_t i)
{
    double acc = exact_value(t, 0, i);
    for (int r = 1; r < size; r++)
        acc = combine(op, acc, exact_value(t, r, i));
    return acc;
}

static const char *type_name(enum zt_dtype t)
{
    static const char *const names[] = {"f32", "f64", "bf16", "f16", "i32", "i64", "u8"};
    return names[t];
}

/* Whether buf[0..bytes) holds the same bytes on every rank (collective over
 * the world; compares a hash). */
static int same_on_every_rank(const void *buf, size_t bytes)
{
    uint64_t h = 1469598103934665603u, lo, hi;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ ((const unsigned char *)buf)[i]) * 1099511628211u;
    MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

/* Calls comm_progress `times` times with a little computation between, as
 * a training step would between layers. */
static void progress_between_work(struct comm *c, int times)
{
    volatile double x = 0;
    for (int k = 0; k < times; k++) {
        for (int i = 0; i < 2000; i++)
            x += i * 0.5;
        CHECK_OK(comm_progress(c));
    }
}

/* ---- creation and configuration ---- */

START_TEST(test_create_reports_rank_size_backend)
{
    int wr, ws;
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    MPI_Comm_size(MPI_COMM_WORLD, &ws);
    ck_assert_int_eq(comm_rank(native), wr);
    ck_assert_int_eq(comm_size(native), ws);
    ck_assert_str_eq(comm_backend_name(native), "mpi");
    ck_assert_str_eq(comm_kind_name(COMM_KIND_REDUCE_SCATTER), "reduce_scatter");
}
END_TEST

START_TEST(test_create_rejects_unknown_names)
{
    struct comm *c = (struct comm *)&c;
    struct comm_config bad_backend = {.backend = "gloo"};
    ck_assert_int_eq(comm_create(&bad_backend, &c), ZT_ERR_CONFIG);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(strstr(zt_error_message(), "comm.backend"));
    struct comm_config bad_algo = {.backend = "mpi", .allgather = "tree"};
    ck_assert_int_eq(comm_create(&bad_algo, &c), ZT_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(zt_error_message(), "comm.allgather"));
    ck_assert_ptr_nonnull(strstr(zt_error_message(), "tree"));
    struct comm_config bad_allreduce = {.backend = "mpi", .allreduce = "rabenseifner"};
    ck_assert_int_eq(comm_create(&bad_allreduce, &c), ZT_ERR_CONFIG);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(strstr(zt_error_message(), "comm.allreduce"));
}
END_TEST

START_TEST(test_create_nccl_without_gpu_is_config_error)
{
    struct comm_config cfg = {.backend = "nccl", .memory = COMM_MEMORY_CUDA};
    struct comm *c = NULL;
    zt_status st = comm_create(&cfg, &c);
    if (st == ZT_OK) { /* a machine where every rank has its own GPU */
        ck_assert_str_eq(comm_backend_name(c), "nccl");
        comm_destroy(c);
        return;
    }
    ck_assert_int_eq(st, ZT_ERR_CONFIG);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(strstr(zt_error_message(), "nccl"));
}
END_TEST

START_TEST(test_auto_backend_falls_back_to_mpi)
{
    struct comm *c = NULL;
    ck_assert_int_eq(comm_create(NULL, &c), ZT_OK);
    const char *name = comm_backend_name(c);
    int ok = strcmp(name, "mpi") == 0 || strcmp(name, "nccl") == 0;
    comm_destroy(c);
    ck_assert(ok);
}
END_TEST

/* ---- allreduce ---- */

static void check_allreduce_exact(struct comm *c, enum zt_dtype t, enum comm_op op, size_t n,
                                  int nonblocking)
{
    void *buf = exact_buffer(t, rank, 0, n);
    if (nonblocking) {
        struct comm_request *req = NULL;
        CHECK_OK(comm_iallreduce(c, buf, n, t, op, &req));
        CHECK_OK(comm_wait(c, req));
    } else {
        CHECK_OK(comm_allreduce(c, buf, n, t, op));
    }
    for (size_t i = 0; i < n; i++) {
        double want = exact_reduced(t, op, i), got = load(t, buf, i);
        CHECK(got == want, "allreduce %s op %d n %zu [%zu]: got %g want %g", type_name(t), op, n, i,
              got, want);
    }
    free(buf);
}

START_TEST(test_allreduce_every_type_and_op)
{
    reset_bad();
    for (size_t k = 0; k < N_TYPES; k++)
        for (int o = 0; o < 3; o++)
            for (size_t j = 0; j < N_COUNTS; j++)
                check_allreduce_exact(native, all_types[k], all_ops[o], counts[j], 0);
    ASSERT_NO_BAD();
}
END_TEST

START_TEST(test_allreduce_fractional_f32_f64)
{
    const size_t n = 1000;
    float *f = xmalloc(n * sizeof *f);
    double *d = xmalloc(n * sizeof *d);
    reset_bad();
    for (size_t i = 0; i < n; i++)
        d[i] = f[i] = (float)frac_value(rank, i); /* f64 sums the same float inputs */
    CHECK_OK(comm_allreduce(native, f, n, ZT_F32, COMM_OP_SUM));
    CHECK_OK(comm_allreduce(native, d, n, ZT_F64, COMM_OP_SUM));
    for (size_t i = 0; i < n; i++) {
        double want = 0, mag = 0;
        for (int r = 0; r < size; r++) {
            want += (float)frac_value(r, i);
            mag += fabs((float)frac_value(r, i));
        }
        CHECK(fabs(f[i] - want) <= size * mag * 0x1p-24, "f32 [%zu]: %.9g vs %.9g", i, f[i], want);
        CHECK(fabs(d[i] - want) <= size * mag * 0x1p-52, "f64 [%zu]: %.17g vs %.17g", i, d[i],
              want);
    }
    free(f);
    free(d);
    ASSERT_NO_BAD();
}
END_TEST

/* ---- reduce-scatter ---- */

static void check_reduce_scatter_exact(struct comm *c, enum zt_dtype t, enum comm_op op, size_t n,
                                       int nonblocking)
{
    void *in = exact_buffer(t, rank, 0, n * (size_t)size);
    void *out = xmalloc(n * zt_dtype_size(t));
    if (nonblocking) {
        struct comm_request *req = NULL;
        CHECK_OK(comm_ireduce_scatter(c, in, out, n, t, op, &req));
        CHECK_OK(comm_wait(c, req));
    } else {
        CHECK_OK(comm_reduce_scatter(c, in, out, n, t, op));
    }
    for (size_t i = 0; i < n; i++) {
        double want = exact_reduced(t, op, (size_t)rank * n + i), got = load(t, out, i);
        CHECK(got == want, "reduce_scatter %s op %d n %zu [%zu]: got %g want %g", type_name(t), op,
              n, i, got, want);
    }
    free(in);
    free(out);
}

static void reduce_scatter_all_cases(struct comm *c)
{
    reset_bad();
    for (size_t k = 0; k < N_TYPES; k++)
        for (int o = 0; o < 3; o++)
            for (size_t j = 0; j < N_COUNTS; j++)
                check_reduce_scatter_exact(c, all_types[k], all_ops[o], counts[j], 0);
    ASSERT_NO_BAD();
}

START_TEST(test_reduce_scatter_native)
{
    reduce_scatter_all_cases(native);
}
END_TEST

START_TEST(test_reduce_scatter_ring)
{
    reduce_scatter_all_cases(ring);
}
END_TEST

START_TEST(test_reduce_scatter_auto)
{
    reduce_scatter_all_cases(autoc);
}
END_TEST

/* ---- allgather ---- */

static void check_allgather_exact(struct comm *c, enum zt_dtype t, size_t n, int in_place,
                                  int nonblocking)
{
    size_t es = zt_dtype_size(t);
    unsigned char *out = xmalloc(n * (size_t)size * es);
    memset(out, 0xa5, n * (size_t)size * es);
    void *own = exact_buffer(t, rank, 0, n), *in = own;
    if (in_place) {
        memcpy(out + (size_t)rank * n * es, own, n * es);
        in = out + (size_t)rank * n * es;
    }
    if (nonblocking) {
        struct comm_request *req = NULL;
        CHECK_OK(comm_iallgather(c, in, out, n, t, &req));
        CHECK_OK(comm_wait(c, req));
    } else {
        CHECK_OK(comm_allgather(c, in, out, n, t));
    }
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < n; i++) {
            double want = exact_value(t, r, i), got = load(t, out, (size_t)r * n + i);
            CHECK(got == want, "allgather %s n %zu in_place %d block %d [%zu]: got %g want %g",
                  type_name(t), n, in_place, r, i, got, want);
        }
    free(own);
    free(out);
}

static void allgather_all_cases(struct comm *c)
{
    reset_bad();
    for (size_t k = 0; k < N_TYPES; k++)
        for (size_t j = 0; j < N_COUNTS; j++)
            for (int in_place = 0; in_place < 2; in_place++)
                check_allgather_exact(c, all_types[k], counts[j], in_place, 0);
    ASSERT_NO_BAD();
}

START_TEST(test_allgather_native)
{
    allgather_all_cases(native);
}
END_TEST

START_TEST(test_allgather_ring)
{
    allgather_all_cases(ring);
}
END_TEST

START_TEST(test_allgather_auto)
{
    allgather_all_cases(autoc);
}
END_TEST

/* ---- ring against native ---- */

START_TEST(test_ring_matches_native_on_fractional_data)
{
    const size_t n = 4097;
    float *in = xmalloc(n * (size_t)size * sizeof *in);
    float *a = xmalloc(n * sizeof *a), *b = xmalloc(n * sizeof *b);
    float *ga = xmalloc(n * (size_t)size * sizeof *ga),
          *gb = xmalloc(n * (size_t)size * sizeof *gb);
    reset_bad();
    for (size_t i = 0; i < n * (size_t)size; i++)
        in[i] = (float)frac_value(rank, i);
    CHECK_OK(comm_reduce_scatter(native, in, a, n, ZT_F32, COMM_OP_SUM));
    CHECK_OK(comm_reduce_scatter(ring, in, b, n, ZT_F32, COMM_OP_SUM));
    for (size_t i = 0; i < n; i++) {
        double mag = 0;
        for (int r = 0; r < size; r++)
            mag += fabs((float)frac_value(r, (size_t)rank * n + i));
        /* two summation orders, each within (N-1) roundings of the truth */
        CHECK(fabs((double)a[i] - b[i]) <= 2.0 * size * mag * 0x1p-24, "[%zu]: %.9g vs %.9g", i,
              a[i], b[i]);
    }
    /* gathering the ring's blocks gives every rank the same bits */
    CHECK_OK(comm_allgather(native, b, ga, n, ZT_F32));
    CHECK_OK(comm_allgather(ring, b, gb, n, ZT_F32));
    CHECK(memcmp(ga, gb, n * (size_t)size * sizeof *ga) == 0, "ring and native allgather differ");
    CHECK(same_on_every_rank(gb, n * (size_t)size * sizeof *gb),
          "gathered ring results differ between ranks");
    free(in);
    free(a);
    free(b);
    free(ga);
    free(gb);
    ASSERT_NO_BAD();
}
END_TEST

START_TEST(test_ring_and_native_identical_on_exact_data)
{
    const size_t n = 4097;
    reset_bad();
    for (size_t k = 0; k < N_TYPES; k++) {
        enum zt_dtype t = all_types[k];
        size_t es = zt_dtype_size(t);
        void *in = exact_buffer(t, rank, 0, n * (size_t)size);
        void *a = xmalloc(n * es), *b = xmalloc(n * es);
        CHECK_OK(comm_reduce_scatter(native, in, a, n, t, COMM_OP_SUM));
        CHECK_OK(comm_reduce_scatter(ring, in, b, n, t, COMM_OP_SUM));
        CHECK(memcmp(a, b, n * es) == 0, "%s: ring and native reduce-scatter differ", type_name(t));
        free(in);
        free(a);
        free(b);
    }
    ASSERT_NO_BAD();
}
END_TEST

/* Sizes spanning several chunks and groups of the ring, with a ragged
 * tail, for the dtypes whose chunks hold the fewest (f64) and most (u8)
 * elements. */
START_TEST(test_ring_many_chunks)
{
    const size_t big[] = {266243, 1100003};
    const enum zt_dtype types[] = {ZT_F64, ZT_U8};
    reset_bad();
    for (int k = 0; k < 2; k++) {
        check_reduce_scatter_exact(ring, types[k], COMM_OP_SUM, big[k], 0);
        check_reduce_scatter_exact(ring, types[k], COMM_OP_MAX, big[k], 1);
        check_allgather_exact(ring, types[k], big[k], 0, 0);
        check_allgather_exact(ring, types[k], big[k], 1, 1);
    }
    ASSERT_NO_BAD();
}
END_TEST

/* ---- ring allreduce ---- */

/* Empty, fewer elements than ranks (blocks of one and empty blocks), odd
 * lengths, several chunks. */
static const size_t allreduce_counts[] = {0, 1, 2, 3, 7, 1001, 4097, 300007};
#define N_ALLREDUCE_COUNTS (sizeof allreduce_counts / sizeof allreduce_counts[0])

START_TEST(test_ring_allreduce_exact_every_type_op_and_size)
{
    reset_bad();
    for (size_t k = 0; k < N_TYPES; k++)
        for (int o = 0; o < 3; o++)
            for (size_t j = 0; j < N_ALLREDUCE_COUNTS; j++)
                for (int nb = 0; nb < 2; nb++)
                    check_allreduce_exact(ring, all_types[k], all_ops[o], allreduce_counts[j], nb);
    ASSERT_NO_BAD();
}
END_TEST

/* Blocks longer than one group of chunks (RING_GROUP x 512 KiB: 256Ki f64,
 * 512Ki f32, 1Mi 16-bit elements) at every group size up to 4, with a
 * ragged tail. */
START_TEST(test_ring_allreduce_many_groups)
{
    const struct {
        enum zt_dtype t;
        size_t n;
    } cases[] = {{ZT_F64, 1100003}, {ZT_F32, 2200003}, {ZT_BF16, 4400003}};
    reset_bad();
    for (int k = 0; k < 3; k++) {
        check_allreduce_exact(ring, cases[k].t, COMM_OP_SUM, cases[k].n, 0);
        check_allreduce_exact(ring, cases[k].t, COMM_OP_MAX, cases[k].n, 1);
    }
    ASSERT_NO_BAD();
}
END_TEST

/* Fills buf with this rank's fractional values, rounded to dtype t. */
static void *frac_buffer(enum zt_dtype t, int r, size_t n)
{
    void *b = xmalloc(n * zt_dtype_size(t));
    for (size_t i = 0; i < n; i++)
        store(t, b, i, (float)frac_value(r, i));
    return b;
}

/* Checks an allreduced sum of fractional data: against the sum over ranks
 * of the inputs as stored (in double for f32/f64; in fp32, as the 16-bit
 * ops add, then rounded, for bf16/f16), within one rounding per combining
 * step plus the final one (relative to the sum of magnitudes). */
static void check_fractional_sum(enum zt_dtype t, const void *got, size_t n, const char *what)
{
    const double unit = t == ZT_F64    ? 0x1p-53
                        : t == ZT_F32  ? 0x1p-24
                        : t == ZT_BF16 ? 0x1p-8
                                       : 0x1p-11; /* half an ulp, relative */
    double scratch[1];
    for (size_t i = 0; i < n; i++) {
        double want = 0, mag = 0;
        float want32 = 0;
        for (int r = 0; r < size; r++) {
            store(t, scratch, 0, (float)frac_value(r, i));
            double x = load(t, scratch, 0);
            want += x;
            want32 += (float)x;
            mag += fabs(x);
        }
        if (t == ZT_BF16 || t == ZT_F16) {
            store(t, scratch, 0, want32);
            want = load(t, scratch, 0);
        }
        double v = load(t, got, i);
        CHECK(fabs(v - want) <= (size + 1) * mag * unit, "%s %s n %zu [%zu]: %.9g vs %.9g", what,
              type_name(t), n, i, v, want);
    }
}

START_TEST(test_ring_allreduce_fractional_matches_native_and_reference)
{
    const size_t ns[] = {1, 3, 7, 1001, 600001};
    const enum zt_dtype types[] = {ZT_F32, ZT_F64, ZT_BF16, ZT_F16};
    reset_bad();
    for (int k = 0; k < 4; k++) {
        enum zt_dtype t = types[k];
        for (int j = 0; j < 5; j++) {
            size_t n = ns[j], bytes = n * zt_dtype_size(t);
            void *a = frac_buffer(t, rank, n), *b = frac_buffer(t, rank, n);
            CHECK_OK(comm_allreduce(native, a, n, t, COMM_OP_SUM));
            CHECK_OK(comm_allreduce(ring, b, n, t, COMM_OP_SUM));
            check_fractional_sum(t, a, n, "native");
            check_fractional_sum(t, b, n, "ring");
            CHECK(same_on_every_rank(b, bytes), "ring %s n %zu: ranks differ", type_name(t), n);
            if (size == 2) /* one combining step: both are the one rounded sum */
                CHECK(memcmp(a, b, bytes) == 0, "ring and native %s n %zu differ at 2 ranks",
                      type_name(t), n);
            free(a);
            free(b);
        }
    }
    ASSERT_NO_BAD();
}
END_TEST

/* The non-blocking ring, progressed between pieces of work, gives the
 * blocking ring's bits. */
START_TEST(test_ring_iallreduce_with_progress_same_bits_as_blocking)
{
    const size_t ns[] = {3, 1001, 600001};
    const enum zt_dtype types[] = {ZT_F32, ZT_BF16, ZT_F16};
    reset_bad();
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 3; j++) {
            enum zt_dtype t = types[k];
            size_t n = ns[j];
            void *a = frac_buffer(t, rank, n), *b = frac_buffer(t, rank, n);
            struct comm_request *req = NULL;
            CHECK_OK(comm_allreduce(ring, a, n, t, COMM_OP_SUM));
            CHECK_OK(comm_iallreduce(ring, b, n, t, COMM_OP_SUM, &req));
            progress_between_work(ring, 20 + 10 * rank); /* ranks progress unevenly */
            CHECK_OK(comm_wait(ring, req));
            CHECK(memcmp(a, b, n * zt_dtype_size(t)) == 0,
                  "%s n %zu: blocking and progressed differ", type_name(t), n);
            free(a);
            free(b);
        }
    ASSERT_NO_BAD();
}
END_TEST

/* Three ring allreduces outstanding, progressed, with a blocking ring call
 * issued among them (it must finish the older ones first), then waited in
 * order. */
START_TEST(test_ring_several_outstanding)
{
    const struct {
        enum zt_dtype t;
        enum comm_op op;
        size_t n;
    } cases[] = {
        {ZT_F32, COMM_OP_SUM, 600001}, {ZT_BF16, COMM_OP_MAX, 1001}, {ZT_F64, COMM_OP_MIN, 7}};
    void *bufs[3];
    struct comm_request *req[3] = {NULL, NULL, NULL};
    const size_t n_mid = 4097;
    reset_bad();
    for (int k = 0; k < 3; k++) {
        bufs[k] = exact_buffer(cases[k].t, rank, 0, cases[k].n);
        CHECK_OK(comm_iallreduce(ring, bufs[k], cases[k].n, cases[k].t, cases[k].op, &req[k]));
    }
    progress_between_work(ring, 10);
    void *mid = exact_buffer(ZT_I32, rank, 0, n_mid);
    CHECK_OK(comm_allreduce(ring, mid, n_mid, ZT_I32, COMM_OP_SUM));
    progress_between_work(ring, 10);
    for (int k = 0; k < 3; k++)
        CHECK_OK(comm_wait(ring, req[k]));
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < cases[k].n; i++)
            CHECK(load(cases[k].t, bufs[k], i) == exact_reduced(cases[k].t, cases[k].op, i),
                  "request %d [%zu]: %g", k, i, load(cases[k].t, bufs[k], i));
    for (size_t i = 0; i < n_mid; i++)
        CHECK(load(ZT_I32, mid, i) == exact_reduced(ZT_I32, COMM_OP_SUM, i), "blocking [%zu]", i);
    for (int k = 0; k < 3; k++)
        free(bufs[k]);
    free(mid);
    ASSERT_NO_BAD();
}
END_TEST

/* comm_progress returns at once when idle, counts in progress_seconds and
 * not in wait_seconds, and the ring counts the bytes the native call does. */
START_TEST(test_progress_accounting_and_ring_bytes)
{
    const size_t n = 100003;
    float *a = exact_buffer(ZT_F32, rank, 0, n), *b = exact_buffer(ZT_F32, rank, 0, n);
    struct comm_request *qa = NULL, *qb = NULL;
    reset_bad();
    comm_reset_stats(native);
    comm_reset_stats(ring);
    CHECK_OK(comm_progress(ring)); /* nothing outstanding */
    CHECK_OK(comm_iallreduce(native, a, n, ZT_F32, COMM_OP_SUM, &qa));
    CHECK_OK(comm_iallreduce(ring, b, n, ZT_F32, COMM_OP_SUM, &qb));
    progress_between_work(native, 5);
    progress_between_work(ring, 5);
    const struct comm_stats *sn = comm_get_stats(native), *sr = comm_get_stats(ring);
    CHECK(sr->wait_seconds == 0.0 && sn->wait_seconds == 0.0, "progress counted as wait: %g %g",
          sr->wait_seconds, sn->wait_seconds);
    CHECK(sr->progress_seconds > 0.0 && sn->progress_seconds > 0.0, "progress_seconds %g %g",
          sr->progress_seconds, sn->progress_seconds);
    CHECK_OK(comm_wait(native, qa));
    CHECK_OK(comm_wait(ring, qb));
    CHECK_OK(comm_allreduce(native, a, n / 2, ZT_F32, COMM_OP_MAX));
    CHECK_OK(comm_allreduce(ring, b, n / 2, ZT_F32, COMM_OP_MAX));
    uint64_t N = (uint64_t)size, want = 2 * (N - 1) * (n * 4) / N + 2 * (N - 1) * (n / 2 * 4) / N;
    CHECK(sr->bytes[COMM_KIND_ALLREDUCE] == want && sn->bytes[COMM_KIND_ALLREDUCE] == want,
          "allreduce bytes ring %llu native %llu want %llu",
          (unsigned long long)sr->bytes[COMM_KIND_ALLREDUCE],
          (unsigned long long)sn->bytes[COMM_KIND_ALLREDUCE], (unsigned long long)want);
    CHECK(sr->calls[COMM_KIND_ALLREDUCE] == 2, "calls %llu",
          (unsigned long long)sr->calls[COMM_KIND_ALLREDUCE]);
    CHECK(sr->wait_seconds > 0.0, "wait_seconds %g", sr->wait_seconds);
    CHECK(memcmp(a, b, n * sizeof *a) == 0, "ring and native differ on exact data");
    comm_reset_stats(ring);
    CHECK(sr->progress_seconds == 0.0, "reset");
    free(a);
    free(b);
    ASSERT_NO_BAD();
}
END_TEST

/* ---- 16-bit sums ---- */

/* Rank 0 adds a, rank 1 adds b, the rest 0: a + b is an exact tie in the
 * 16-bit format, so the result shows the rounding of the reduction. */
static void check_half_tie(enum zt_dtype t, float a, float b, uint16_t want)
{
    uint16_t (*enc)(float) = t == ZT_BF16 ? zt_f32_to_bf16 : zt_f32_to_f16;
    float mine = rank == 0 ? a : rank == 1 ? b : 0.0f;
    uint16_t buf[3], in[8], out[2], ring_out[2];
    for (int i = 0; i < 3; i++)
        buf[i] = enc(mine);
    for (int i = 0; i < 2 * size && i < 8; i++)
        in[i] = enc(mine);
    CHECK_OK(comm_allreduce(native, buf, 3, t, COMM_OP_SUM));
    CHECK_OK(comm_reduce_scatter(native, in, out, 1, t, COMM_OP_SUM));
    CHECK_OK(comm_reduce_scatter(ring, in, ring_out, 1, t, COMM_OP_SUM));
    uint16_t one = size == 1 ? enc(a) : want;
    CHECK(buf[0] == one && buf[2] == one, "%s allreduce tie: 0x%04x want 0x%04x", type_name(t),
          buf[0], one);
    CHECK(out[0] == one && ring_out[0] == one, "%s reduce-scatter tie: 0x%04x/0x%04x want 0x%04x",
          type_name(t), out[0], ring_out[0], one);
}

START_TEST(test_half_sum_rounds_ties_to_even)
{
    reset_bad();
    if (size <= 4) {
        /* bf16: 1+2^-7 plus 2^-8 is halfway between 0x3f81 and 0x3f82 (even) */
        check_half_tie(ZT_BF16, 1.0078125f, 0x1p-8f, 0x3f82);
        /* f16: 1+2^-10 plus 2^-11 is halfway between 0x3c01 and 0x3c02 (even) */
        check_half_tie(ZT_F16, 1.0f + 0x1p-10f, 0x1p-11f, 0x3c02);
        /* and a tie that rounds down: 1 plus 2^-11 stays 1 */
        check_half_tie(ZT_F16, 1.0f, 0x1p-11f, 0x3c00);
    }
    ASSERT_NO_BAD();
}
END_TEST

/* Fractional 16-bit inputs: the result is within one rounding per combining
 * step of the fp32 sum rounded once. */
static void check_half_fractional(struct comm *c, enum zt_dtype t)
{
    const size_t n = 517;
    uint16_t (*enc)(float) = t == ZT_BF16 ? zt_f32_to_bf16 : zt_f32_to_f16;
    float (*dec)(uint16_t) = t == ZT_BF16 ? zt_bf16_to_f32 : zt_f16_to_f32;
    const double unit = t == ZT_BF16 ? 0x1p-8 : 0x1p-11; /* half an ulp, relative */
    uint16_t *in = xmalloc(n * (size_t)size * sizeof *in), *out = xmalloc(n * sizeof *out);
    uint16_t *all = xmalloc(n * sizeof *all);
    for (size_t i = 0; i < n * (size_t)size; i++)
        in[i] = enc((float)frac_value(rank, i));
    for (size_t i = 0; i < n; i++)
        all[i] = in[i];
    CHECK_OK(comm_reduce_scatter(c, in, out, n, t, COMM_OP_SUM));
    CHECK_OK(comm_allreduce(c, all, n, t, COMM_OP_SUM));
    for (size_t i = 0; i < n; i++) {
        size_t g = (size_t)rank * n + i;
        float ref = 0, mag = 0, ref_all = 0, mag_all = 0;
        for (int r = 0; r < size; r++) {
            float x = dec(enc((float)frac_value(r, g))), y = dec(enc((float)frac_value(r, i)));
            ref += x;
            mag += fabsf(x);
            ref_all += y;
            mag_all += fabsf(y);
        }
        double want = dec(enc(ref)), want_all = dec(enc(ref_all));
        double tol = (size + 1) * mag * unit, tol_all = (size + 1) * mag_all * unit;
        CHECK(fabs(dec(out[i]) - want) <= tol, "%s reduce-scatter [%zu]: %g vs %g", type_name(t), i,
              dec(out[i]), want);
        CHECK(fabs(dec(all[i]) - want_all) <= tol_all, "%s allreduce [%zu]: %g vs %g", type_name(t),
              i, dec(all[i]), want_all);
        if (size == 2) /* one combining step: exactly the fp32 sum rounded */
            CHECK(out[i] == enc(ref) && all[i] == enc(ref_all), "%s [%zu]: not the rounded sum",
                  type_name(t), i);
    }
    free(in);
    free(out);
    free(all);
}

START_TEST(test_half_sum_matches_fp32_reference)
{
    reset_bad();
    check_half_fractional(native, ZT_BF16);
    check_half_fractional(native, ZT_F16);
    check_half_fractional(ring, ZT_BF16);
    check_half_fractional(ring, ZT_F16);
    ASSERT_NO_BAD();
}
END_TEST

/* Every bf16 and f16 bit pattern, infinities, NaNs and subnormals among
 * them, through the vectorised 16-bit sum on 2 ranks: rank r holds pattern
 * (i * (2r + 1)) mod 2^16 at i, and the sum is the fp32 sum of the decoded
 * values rounded once (any NaN for a NaN: which operand's payload a NaN
 * keeps depends on the order the lanes add in). */
static void check_half_patterns(struct comm *c, enum zt_dtype t)
{
    const size_t n = 1u << 16;
    uint16_t (*enc)(float) = t == ZT_BF16 ? zt_f32_to_bf16 : zt_f32_to_f16;
    float (*dec)(uint16_t) = t == ZT_BF16 ? zt_bf16_to_f32 : zt_f16_to_f32;
    uint16_t *buf = xmalloc(n * sizeof *buf);
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint16_t)(i * (2u * (unsigned)rank + 1u));
    CHECK_OK(comm_allreduce(c, buf, n, t, COMM_OP_SUM));
    for (size_t i = 0; i < n; i++) {
        const uint16_t x = (uint16_t)i, y = (uint16_t)(i * 3u), want = enc(dec(x) + dec(y));
        if (buf[i] == want || (isnan(dec(want)) && isnan(dec(buf[i]))))
            continue;
        CHECK(0, "%s: %#06x + %#06x gave %#06x, want %#06x", type_name(t), x, y, buf[i], want);
        break;
    }
    free(buf);
}

START_TEST(test_half_sum_every_pattern)
{
    reset_bad();
    if (size == 2)
        for (int k = 0; k < 2; k++) {
            check_half_patterns(native, k ? ZT_F16 : ZT_BF16);
            check_half_patterns(ring, k ? ZT_F16 : ZT_BF16);
        }
    ASSERT_NO_BAD();
}
END_TEST

/* ---- broadcast ---- */

START_TEST(test_broadcast_from_last_rank)
{
    const size_t n = 1001;
    reset_bad();
    for (size_t k = 0; k < N_TYPES; k++) {
        enum zt_dtype t = all_types[k];
        void *buf = exact_buffer(t, rank, 0, n);
        CHECK_OK(comm_broadcast(native, buf, n, t, size - 1));
        for (size_t i = 0; i < n; i++)
            CHECK(load(t, buf, i) == exact_value(t, size - 1, i), "broadcast %s [%zu]",
                  type_name(t), i);
        free(buf);
    }
    ASSERT_NO_BAD();
}
END_TEST

/* ---- non-blocking ---- */

START_TEST(test_nonblocking_single)
{
    struct comm *comms[] = {native, ring, autoc};
    reset_bad();
    for (int k = 0; k < 3; k++)
        for (size_t j = 0; j < N_COUNTS; j++) {
            check_allreduce_exact(comms[k], ZT_F32, COMM_OP_SUM, counts[j], 1);
            check_reduce_scatter_exact(comms[k], ZT_I32, COMM_OP_MAX, counts[j], 1);
            check_reduce_scatter_exact(comms[k], ZT_BF16, COMM_OP_SUM, counts[j], 1);
            check_allgather_exact(comms[k], ZT_F64, counts[j], 0, 1);
            check_allgather_exact(comms[k], ZT_F16, counts[j], 1, 1);
        }
    ASSERT_NO_BAD();
}
END_TEST

/* Several requests in flight at once, waited in issue order; with
 * `progress`, comm_progress is called between issuing and waiting. */
static void check_overlapping_requests(struct comm *c, int progress)
{
    const size_t n = 333;
    float *ar = exact_buffer(ZT_F32, rank, 0, n);
    double *rs_in = exact_buffer(ZT_F64, rank, 0, n * (size_t)size);
    double *rs_out = xmalloc(n * sizeof *rs_out);
    int32_t *ag_in = exact_buffer(ZT_I32, rank, 0, n);
    int32_t *ag_out = xmalloc(n * (size_t)size * sizeof *ag_out);
    struct comm_request *q[3] = {NULL, NULL, NULL};
    CHECK_OK(comm_ireduce_scatter(c, rs_in, rs_out, n, ZT_F64, COMM_OP_SUM, &q[0]));
    CHECK_OK(comm_iallreduce(c, ar, n, ZT_F32, COMM_OP_MIN, &q[1]));
    CHECK_OK(comm_iallgather(c, ag_in, ag_out, n, ZT_I32, &q[2]));
    if (progress)
        progress_between_work(c, 50);
    for (int k = 0; k < 3; k++)
        CHECK_OK(comm_wait(c, q[k]));
    for (size_t i = 0; i < n; i++) {
        CHECK(ar[i] == exact_reduced(ZT_F32, COMM_OP_MIN, i), "iallreduce [%zu]", i);
        CHECK(rs_out[i] == exact_reduced(ZT_F64, COMM_OP_SUM, (size_t)rank * n + i),
              "ireduce_scatter [%zu]", i);
        for (int r = 0; r < size; r++)
            CHECK(ag_out[(size_t)r * n + i] == exact_value(ZT_I32, r, i), "iallgather %d [%zu]", r,
                  i);
    }
    free(ar);
    free(rs_in);
    free(rs_out);
    free(ag_in);
    free(ag_out);
}

START_TEST(test_nonblocking_overlapping)
{
    reset_bad();
    check_overlapping_requests(native, 0);
    check_overlapping_requests(ring, 0);
    check_overlapping_requests(native, 1);
    check_overlapping_requests(ring, 1);
    check_overlapping_requests(autoc, 1);
    ASSERT_NO_BAD();
}
END_TEST

/* ---- accounting ---- */

START_TEST(test_byte_counters_follow_bus_model)
{
    const size_t n = 1000;
    const uint64_t N = (uint64_t)size;
    float *buf = xmalloc(n * (size_t)size * sizeof *buf), *out = xmalloc(n * sizeof *out);
    double *d = xmalloc(n * sizeof *d);
    struct comm_request *req = NULL;
    reset_bad();
    memset(buf, 0, n * (size_t)size * sizeof *buf);
    memset(out, 0, n * sizeof *out);
    memset(d, 0, n * sizeof *d);
    comm_reset_stats(ring);
    CHECK_OK(comm_allreduce(ring, buf, n, ZT_F32, COMM_OP_SUM));
    CHECK_OK(comm_iallreduce(ring, d, 3, ZT_F64, COMM_OP_SUM, &req));
    CHECK_OK(comm_wait(ring, req));
    CHECK_OK(comm_reduce_scatter(ring, buf, out, n, ZT_F32, COMM_OP_SUM));
    CHECK_OK(comm_allgather(ring, out, buf, n, ZT_F32));
    CHECK_OK(comm_iallgather(ring, out, buf, n / 2, ZT_F32, &req));
    CHECK_OK(comm_wait(ring, req));
    CHECK_OK(comm_broadcast(ring, d, 7, ZT_F64, 0));
    const struct comm_stats *s = comm_get_stats(ring);
    uint64_t ar = 2 * (N - 1) * (n * 4) / N + 2 * (N - 1) * (3 * 8) / N;
    CHECK(s->bytes[COMM_KIND_ALLREDUCE] == ar, "allreduce bytes %llu want %llu",
          (unsigned long long)s->bytes[COMM_KIND_ALLREDUCE], (unsigned long long)ar);
    CHECK(s->bytes[COMM_KIND_REDUCE_SCATTER] == (N - 1) * n * 4, "reduce-scatter bytes %llu",
          (unsigned long long)s->bytes[COMM_KIND_REDUCE_SCATTER]);
    CHECK(s->bytes[COMM_KIND_ALLGATHER] == (N - 1) * (n + n / 2) * 4, "allgather bytes %llu",
          (unsigned long long)s->bytes[COMM_KIND_ALLGATHER]);
    CHECK(s->bytes[COMM_KIND_BROADCAST] == (rank == 0 ? 7 * 8u : 0u), "broadcast bytes %llu",
          (unsigned long long)s->bytes[COMM_KIND_BROADCAST]);
    CHECK(s->calls[COMM_KIND_ALLREDUCE] == 2 && s->calls[COMM_KIND_REDUCE_SCATTER] == 1 &&
              s->calls[COMM_KIND_ALLGATHER] == 2 && s->calls[COMM_KIND_BROADCAST] == 1,
          "call counts");
    CHECK(s->wait_seconds > 0.0, "wait_seconds %g", s->wait_seconds);
    comm_reset_stats(ring);
    CHECK(s->bytes[COMM_KIND_ALLREDUCE] == 0 && s->calls[COMM_KIND_ALLGATHER] == 0 &&
              s->wait_seconds == 0.0,
          "reset");
    free(buf);
    free(out);
    free(d);
    ASSERT_NO_BAD();
}
END_TEST

/* Runs one float32 sum on a comm made from cfg with a ledger: the ring's
 * scratch must be on it as `want` bytes, and off it once the comm is gone.
 * n is per rank (reduce-scatter) or the buffer (allreduce). */
static void check_ring_scratch(struct comm_config *cfg, enum comm_kind kind, size_t n,
                               uint64_t want)
{
    struct ledger led;
    struct comm *c = NULL;
    ledger_init(&led, 0);
    cfg->ledger = &led;
    CHECK_OK(comm_create(cfg, &c));
    if (c) {
        size_t in_n = kind == COMM_KIND_REDUCE_SCATTER ? n * (size_t)size : n;
        float *in = exact_buffer(ZT_F32, rank, 0, in_n);
        float *out = xmalloc(n * sizeof *out);
        if (kind == COMM_KIND_REDUCE_SCATTER)
            CHECK_OK(comm_reduce_scatter(c, in, out, n, ZT_F32, COMM_OP_SUM));
        else
            CHECK_OK(comm_allreduce(c, in, n, ZT_F32, COMM_OP_SUM));
        CHECK(led.current[LEDGER_COMM_BUFFERS] == want, "ledger %llu want %llu",
              (unsigned long long)led.current[LEDGER_COMM_BUFFERS], (unsigned long long)want);
        comm_destroy(c);
        free(in);
        free(out);
    }
    CHECK(led.current[LEDGER_COMM_BUFFERS] == 0, "scratch not released");
}

START_TEST(test_ring_scratch_is_on_the_ledger)
{
    const size_t n = 5000;
    struct comm_config cfg = {.backend = "mpi", .reduce_scatter = "ring"};
    reset_bad();
    /* two slots of one group (here the whole block); two ranks send from
     * `in` and receive into `out`, needing none */
    check_ring_scratch(&cfg, COMM_KIND_REDUCE_SCATTER, n, size > 2 ? 2 * n * sizeof(float) : 0);
    ASSERT_NO_BAD();
}
END_TEST

START_TEST(test_ring_allreduce_scratch_is_one_group_on_the_ledger)
{
    const size_t n = 5001;
    struct comm_config cfg = {.backend = "mpi", .allreduce = "ring"};
    reset_bad();
    /* one slot for what arrives, the longest block (one group here) */
    check_ring_scratch(&cfg, COMM_KIND_ALLREDUCE, n,
                       size > 1 ? (n + (size_t)size - 1) / (size_t)size * sizeof(float) : 0);
    ASSERT_NO_BAD();
}
END_TEST

START_TEST(test_usage_errors_enter_no_collective)
{
    float x[4] = {0}, big[64] = {0};
    struct comm_request *req = (struct comm_request *)x;
    comm_reset_stats(native);
    ck_assert_int_eq(comm_allreduce(native, x, 4, (enum zt_dtype)99, COMM_OP_SUM), ZT_ERR_USAGE);
    ck_assert_int_eq(comm_allreduce(native, x, 4, ZT_F32, (enum comm_op)7), ZT_ERR_USAGE);
    ck_assert_int_eq(comm_allreduce(native, NULL, 4, ZT_F32, COMM_OP_SUM), ZT_ERR_USAGE);
    ck_assert_int_eq(comm_reduce_scatter(native, big, big, 1, ZT_F32, COMM_OP_SUM), ZT_ERR_USAGE);
    /* in at out + rank*n is allowed; one element further is not */
    ck_assert_int_eq(comm_allgather(native, big + 2 * rank + 1, big, 2, ZT_F32), ZT_ERR_USAGE);
    ck_assert_int_eq(comm_broadcast(native, x, 4, ZT_F32, size), ZT_ERR_USAGE);
    ck_assert_int_eq(comm_iallreduce(native, NULL, 1, ZT_F32, COMM_OP_SUM, &req), ZT_ERR_USAGE);
    ck_assert_ptr_null(req);
    ck_assert_int_eq(comm_wait(native, NULL), ZT_ERR_USAGE);
    const struct comm_stats *s = comm_get_stats(native);
    for (int k = 0; k < COMM_KIND_COUNT; k++)
        ck_assert_uint_eq(s->calls[k], 0);
    /* n = 0 is a valid, empty collective, NULL buffers included */
    ck_assert_int_eq(comm_allreduce(native, NULL, 0, ZT_F32, COMM_OP_SUM), ZT_OK);
    for (int k = 0; k < 2; k++) {
        struct comm *c = k ? ring : native;
        ck_assert_int_eq(comm_reduce_scatter(c, NULL, NULL, 0, ZT_F32, COMM_OP_SUM), ZT_OK);
        ck_assert_int_eq(comm_allgather(c, NULL, NULL, 0, ZT_BF16), ZT_OK);
        ck_assert_int_eq(comm_iallgather(c, NULL, NULL, 0, ZT_U8, &req), ZT_OK);
        ck_assert_int_eq(comm_wait(c, req), ZT_OK);
    }
}
END_TEST

/* ---- status agreement ---- */

START_TEST(test_agree_status_all_ok)
{
    zt_status agreed = ZT_ERR_INTERNAL;
    ck_assert_int_eq(comm_agree_status(native, ZT_OK, &agreed), ZT_OK);
    ck_assert_int_eq(agreed, ZT_OK);
}
END_TEST

START_TEST(test_agree_status_one_rank_fails)
{
    zt_status agreed = ZT_OK, local = ZT_OK;
    if (rank == size - 1)
        local = zt_error_set(ZT_ERR_IO, "data.bin: cannot read");
    else
        zt_error_clear();
    zt_status ret = comm_agree_status(native, local, &agreed);
    ck_assert_int_eq(ret, ZT_ERR_IO);
    ck_assert_int_eq(agreed, ZT_ERR_IO);
    if (rank == size - 1) {
        ck_assert_str_eq(zt_error_message(), "data.bin: cannot read");
    } else {
        char want[64];
        snprintf(want, sizeof want, "rank %d failed: see its message", size - 1);
        ck_assert_str_eq(zt_error_message(), want);
    }
}
END_TEST

START_TEST(test_agree_status_most_severe_wins)
{
    zt_status agreed = ZT_OK;
    /* rank 0 a run-time failure (exit 1), the last rank a config error
     * (exit 2): everyone leaves with the config error. */
    zt_status local = rank == size - 1 ? ZT_ERR_CONFIG : rank == 0 ? ZT_ERR_COMM : ZT_OK;
    ck_assert_int_eq(comm_agree_status(native, local, &agreed), ZT_ERR_CONFIG);
    ck_assert_int_eq(agreed, ZT_ERR_CONFIG);
}
END_TEST

/* No rank leaves the barrier before the last one entered it: rank r
 * arrives r * 30 ms late, and every rank's exit time is compared with the
 * latest entry time on the host's monotonic clock, which all ranks of one
 * machine share (a comparison of waits measured from each rank's own
 * start would depend on when the scheduler let each rank out of the first
 * barrier). */
static double monotonic_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

START_TEST(test_barrier_waits_for_the_last_rank)
{
    const int rank = comm_rank(native);
    ck_assert_int_eq(comm_barrier(native), ZT_OK);
    struct timespec delay = {0, (long)rank * 30000000L};
    nanosleep(&delay, NULL);
    const double entered = monotonic_s();
    ck_assert_int_eq(comm_barrier(native), ZT_OK);
    const double left = monotonic_s();
    double last_entry = 0;
    MPI_Allreduce(&entered, &last_entry, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    ck_assert_msg(left >= last_entry, "rank %d left %.6f s before the last rank entered", rank,
                  last_entry - left);
}
END_TEST

/* ---- process groups ---- */

/* Splits `parent` or aborts the job: a test cannot go on without its group,
 * and a rank that returned early would leave the others in a collective. */
static struct comm *split_or_abort(struct comm *parent, int color, int key)
{
    struct comm *c = NULL;
    zt_status st = comm_split(parent, color, key, &c);
    if (st != ZT_OK) {
        fprintf(stderr, "rank %d: comm_split(%d, %d): %s: %s\n", rank, color, key,
                zt_status_str(st), zt_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return c;
}

/* The world ranks of the group of world rank `r` for a split by `color_of`
 * (key = world rank), in group order, and r's index among them. */
static int group_of(int r, int (*color_of)(int), int *members, int *index)
{
    int n = 0;
    for (int q = 0; q < size; q++) {
        if (color_of(q) != color_of(r))
            continue;
        if (q == r)
            *index = n;
        members[n++] = q;
    }
    return n;
}

static int parity(int r)
{
    return r % 2;
}

/* Even/odd split of the world, then each of those split by the parity of
 * the rank within it: world ranks r with the same r % 2 and (r / 2) % 2. */
static int nested_color(int r)
{
    return (r % 2) * 2 + (r / 2) % 2;
}

/* Sum over the group of (world rank + 1), by allreduce on `c`; checks the
 * rank, size and result against the group that `color_of` describes. */
static void check_group_sum(struct comm *c, int (*color_of)(int), const char *what)
{
    int members[64], index = -1;
    int n = group_of(rank, color_of, members, &index);
    CHECK(comm_rank(c) == index && comm_size(c) == n, "%s: rank %d size %d, want %d of %d", what,
          comm_rank(c), comm_size(c), index, n);
    int64_t want = 0, got[3] = {rank + 1, 1, -(rank + 1)};
    for (int i = 0; i < n; i++)
        want += members[i] + 1;
    CHECK_OK(comm_allreduce(c, got, 3, ZT_I64, COMM_OP_SUM));
    CHECK(got[0] == want && got[1] == n && got[2] == -want, "%s: sum %lld, %lld want %lld, %d",
          what, (long long)got[0], (long long)got[1], (long long)want, n);
}

START_TEST(test_split_even_odd_renumbers_and_reduces_per_group)
{
    reset_bad();
    struct comm *c = split_or_abort(ring, rank % 2, rank);
    ck_assert_str_eq(comm_backend_name(c), comm_backend_name(ring));
    check_group_sum(c, parity, "even/odd");
    /* the group's reduce-scatter is the ring's too: block g of the sum */
    const int n = comm_size(c);
    int32_t *in = xmalloc(3 * (size_t)n * sizeof *in), out[3] = {0};
    for (int i = 0; i < 3 * n; i++)
        in[i] = rank * 100 + i;
    CHECK_OK(comm_reduce_scatter(c, in, out, 3, ZT_I32, COMM_OP_SUM));
    int members[64], index = -1;
    group_of(rank, parity, members, &index);
    for (int j = 0; j < 3; j++) {
        int32_t want = 0;
        for (int i = 0; i < n; i++)
            want += members[i] * 100 + 3 * index + j;
        CHECK(out[j] == want, "reduce-scatter [%d] %d want %d", j, out[j], want);
    }
    free(in);
    comm_destroy(c);
    ASSERT_NO_BAD();
}
END_TEST

START_TEST(test_split_key_reverses_order)
{
    reset_bad();
    struct comm *c = split_or_abort(native, 0, size - rank);
    CHECK(comm_rank(c) == size - 1 - rank && comm_size(c) == size, "rank %d size %d", comm_rank(c),
          comm_size(c));
    int32_t mine = rank, *all = xmalloc((size_t)size * sizeof *all);
    CHECK_OK(comm_allgather(c, &mine, all, 1, ZT_I32));
    for (int i = 0; i < size; i++)
        CHECK(all[i] == size - 1 - i, "allgather [%d] = world rank %d", i, all[i]);
    /* root 0 of the group is the last world rank */
    int32_t b = rank;
    CHECK_OK(comm_broadcast(c, &b, 1, ZT_I32, 0));
    CHECK(b == size - 1, "broadcast from group rank 0 gave %d", b);
    free(all);
    comm_destroy(c);
    ASSERT_NO_BAD();
}
END_TEST

START_TEST(test_split_group_of_one)
{
    reset_bad();
    struct comm *c = split_or_abort(ring, rank, 0);
    CHECK(comm_rank(c) == 0 && comm_size(c) == 1, "rank %d size %d", comm_rank(c), comm_size(c));
    float x[4] = {1.5f, -2, 3, (float)rank}, out[4] = {0}, all[4] = {0};
    CHECK_OK(comm_allreduce(c, x, 4, ZT_F32, COMM_OP_SUM));
    CHECK(x[0] == 1.5f && x[3] == (float)rank, "allreduce changed a lone rank's data");
    CHECK_OK(comm_reduce_scatter(c, x, out, 4, ZT_F32, COMM_OP_SUM));
    CHECK(memcmp(out, x, sizeof x) == 0, "reduce-scatter of one rank is a copy");
    CHECK_OK(comm_allgather(c, x, all, 4, ZT_F32));
    CHECK(memcmp(all, x, sizeof x) == 0, "allgather of one rank is a copy");
    memset(all, 0, sizeof all);
    CHECK_OK(comm_gather(c, x, all, 4, ZT_F32, 0));
    CHECK(memcmp(all, x, sizeof x) == 0, "gather of one rank is a copy");
    CHECK_OK(comm_barrier(c));
    const struct comm_stats *s = comm_get_stats(c);
    for (int k = 0; k < COMM_KIND_COUNT; k++)
        CHECK(s->bytes[k] == 0, "a lone rank sent %llu bytes of %s",
              (unsigned long long)s->bytes[k], comm_kind_name((enum comm_kind)k));
    comm_destroy(c);
    ASSERT_NO_BAD();
}
END_TEST

/* Collectives of the world and of its two halves, blocking and not,
 * interleaved; every group's results and counters stay its own. */
START_TEST(test_disjoint_groups_interleaved)
{
    reset_bad();
    struct comm *c = split_or_abort(native, rank % 2, rank);
    int members[64], index = -1;
    const int n = group_of(rank, parity, members, &index);
    const size_t m = 5000; /* over the ring threshold at 4 ranks: both algorithms run */
    int64_t world_sum = 0, group_sum = 0;
    for (int r = 0; r < size; r++)
        world_sum += r;
    for (int i = 0; i < n; i++)
        group_sum += members[i];
    comm_reset_stats(native);
    int32_t *big = xmalloc(m * (size_t)size * sizeof *big), *blk = xmalloc(m * sizeof *blk);
    int64_t w = rank, g = rank, w2 = rank;
    struct comm_request *qg = NULL, *qw = NULL;
    for (size_t i = 0; i < m; i++)
        blk[i] = rank;
    CHECK_OK(comm_allreduce(native, &w, 1, ZT_I64, COMM_OP_SUM));
    CHECK_OK(comm_iallgather(c, blk, big, m, ZT_I32, &qg));
    CHECK_OK(comm_iallreduce(native, &w2, 1, ZT_I64, COMM_OP_SUM, &qw));
    CHECK_OK(comm_allreduce(c, &g, 1, ZT_I64, COMM_OP_SUM));
    CHECK_OK(comm_wait(native, qw));
    CHECK_OK(comm_wait(c, qg));
    CHECK(w == world_sum && w2 == world_sum, "world sums %lld %lld want %lld", (long long)w,
          (long long)w2, (long long)world_sum);
    CHECK(g == group_sum, "group sum %lld want %lld", (long long)g, (long long)group_sum);
    for (int i = 0; i < n; i++)
        CHECK(big[(size_t)i * m] == members[i] && big[(size_t)i * m + m - 1] == members[i],
              "group allgather block %d", i);
    const struct comm_stats *sw = comm_get_stats(native), *sg = comm_get_stats(c);
    CHECK(sw->calls[COMM_KIND_ALLREDUCE] == 2 && sw->calls[COMM_KIND_ALLGATHER] == 0,
          "world calls %llu %llu", (unsigned long long)sw->calls[COMM_KIND_ALLREDUCE],
          (unsigned long long)sw->calls[COMM_KIND_ALLGATHER]);
    CHECK(sg->calls[COMM_KIND_ALLREDUCE] == 1 && sg->calls[COMM_KIND_ALLGATHER] == 1,
          "group calls");
    CHECK(sg->bytes[COMM_KIND_ALLGATHER] == (uint64_t)(n - 1) * m * 4, "group allgather bytes %llu",
          (unsigned long long)sg->bytes[COMM_KIND_ALLGATHER]);
    free(big);
    free(blk);
    comm_destroy(c);
    ASSERT_NO_BAD();
}
END_TEST

START_TEST(test_nested_split)
{
    reset_bad();
    struct comm *half = split_or_abort(native, rank % 2, rank);
    struct comm *quarter = split_or_abort(half, comm_rank(half) % 2, comm_rank(half));
    check_group_sum(half, parity, "half");
    check_group_sum(quarter, nested_color, "quarter");
    comm_destroy(quarter);
    check_group_sum(half, parity, "half after the quarter is gone");
    comm_destroy(half);
    ASSERT_NO_BAD();
}
END_TEST

START_TEST(test_split_negative_color_is_usage_error)
{
    struct comm *c = (struct comm *)&c;
    ck_assert_int_eq(comm_split(native, -1, 0, &c), ZT_ERR_USAGE);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(strstr(zt_error_message(), "color -1"));
}
END_TEST

/* ---- point-to-point ---- */

static double message_value(int from, size_t i)
{
    return from * 10000.0 + (double)i + 0.25;
}

static void fill_message(double *buf, size_t n, int from)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = message_value(from, i);
}

static void check_message(const double *buf, size_t n, int from, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (buf[i] != message_value(from, i)) {
            CHECK(0, "%s: [%zu] = %g, want %g (from %d)", what, i, buf[i], message_value(from, i),
                  from);
            return;
        }
}

START_TEST(test_send_recv_ring)
{
    const size_t n = 100000; /* beyond eager limits: a send waits for its receive */
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    double *out = xmalloc(n * sizeof *out), *in = xmalloc(n * sizeof *in);
    reset_bad();
    fill_message(out, n, rank);
    memset(in, 0, n * sizeof *in);
    comm_reset_stats(native);
    if (size == 1) { /* to itself: the receive must be posted first */
        struct comm_request *q = NULL;
        CHECK_OK(comm_irecv(native, in, n, ZT_F64, 0, &q));
        CHECK_OK(comm_send(native, out, n, ZT_F64, 0));
        CHECK_OK(comm_wait(native, q));
    } else if (rank % 2 == 0) {
        CHECK_OK(comm_send(native, out, n, ZT_F64, right));
        CHECK_OK(comm_recv(native, in, n, ZT_F64, left));
    } else {
        CHECK_OK(comm_recv(native, in, n, ZT_F64, left));
        CHECK_OK(comm_send(native, out, n, ZT_F64, right));
    }
    check_message(in, n, left, "blocking ring");
    const struct comm_stats *s = comm_get_stats(native);
    CHECK(s->bytes[COMM_KIND_SEND] == n * 8 && s->calls[COMM_KIND_SEND] == 1,
          "send bytes %llu calls %llu", (unsigned long long)s->bytes[COMM_KIND_SEND],
          (unsigned long long)s->calls[COMM_KIND_SEND]);
    free(out);
    free(in);
    ASSERT_NO_BAD();
}
END_TEST

/* Every rank posts its receive and its send, then waits for them in an
 * order that differs between neighbours. */
START_TEST(test_isend_irecv_ring)
{
    const size_t n = 70000;
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    double *out = xmalloc(2 * n * sizeof *out), *in = xmalloc(2 * n * sizeof *in);
    struct comm_request *rq[2] = {NULL, NULL}, *sq[2] = {NULL, NULL};
    reset_bad();
    fill_message(out, n, rank);
    fill_message(out + n, n, rank + size);
    memset(in, 0, 2 * n * sizeof *in);
    comm_reset_stats(ring);
    CHECK_OK(comm_irecv(ring, in, n, ZT_F64, left, &rq[0]));
    CHECK_OK(comm_irecv(ring, in + n, n, ZT_F64, left, &rq[1]));
    CHECK_OK(comm_isend(ring, out, n, ZT_F64, right, &sq[0]));
    CHECK_OK(comm_isend(ring, out + n, n, ZT_F64, right, &sq[1]));
    const struct comm_stats *s = comm_get_stats(ring);
    CHECK(s->bytes[COMM_KIND_SEND] == 2 * n * 8 && s->calls[COMM_KIND_SEND] == 2,
          "isend bytes %llu calls %llu (counted when issued; receives not)",
          (unsigned long long)s->bytes[COMM_KIND_SEND],
          (unsigned long long)s->calls[COMM_KIND_SEND]);
    if (rank % 2) {
        CHECK_OK(comm_wait(ring, rq[1]));
        CHECK_OK(comm_wait(ring, sq[0]));
        CHECK_OK(comm_wait(ring, rq[0]));
        CHECK_OK(comm_wait(ring, sq[1]));
    } else {
        CHECK_OK(comm_wait(ring, sq[1]));
        CHECK_OK(comm_wait(ring, sq[0]));
        CHECK_OK(comm_wait(ring, rq[0]));
        CHECK_OK(comm_wait(ring, rq[1]));
    }
    check_message(in, n, left, "first message");
    check_message(in + n, n, left + size, "second message (order kept)");
    /* a ring collective right after: its messages never match ours */
    CHECK_OK(comm_isend(ring, out, 7, ZT_F64, right, &sq[0]));
    CHECK_OK(comm_irecv(ring, in, 7, ZT_F64, left, &rq[0]));
    check_reduce_scatter_exact(ring, ZT_I32, COMM_OP_SUM, 3000, 0);
    CHECK_OK(comm_wait(ring, rq[0]));
    CHECK_OK(comm_wait(ring, sq[0]));
    check_message(in, 7, left, "message across a ring collective");
    free(out);
    free(in);
    ASSERT_NO_BAD();
}
END_TEST

START_TEST(test_point_to_point_usage_errors)
{
    double x[2] = {0};
    struct comm_request *req = (struct comm_request *)x;
    comm_reset_stats(native);
    ck_assert_int_eq(comm_send(native, x, 2, ZT_F64, size), ZT_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(zt_error_message(), "peer"));
    ck_assert_int_eq(comm_send(native, x, 2, ZT_F64, -1), ZT_ERR_USAGE);
    ck_assert_int_eq(comm_recv(native, x, 2, ZT_F64, size + 3), ZT_ERR_USAGE);
    ck_assert_int_eq(comm_send(native, NULL, 2, ZT_F64, 0), ZT_ERR_USAGE);
    ck_assert_int_eq(comm_recv(native, NULL, 2, ZT_F64, 0), ZT_ERR_USAGE);
    ck_assert_int_eq(comm_send(native, x, 2, (enum zt_dtype)42, 0), ZT_ERR_USAGE);
    ck_assert_int_eq(comm_isend(native, x, 2, ZT_F64, size, &req), ZT_ERR_USAGE);
    ck_assert_ptr_null(req);
    req = (struct comm_request *)x;
    ck_assert_int_eq(comm_irecv(native, x, 2, ZT_F64, -2, &req), ZT_ERR_USAGE);
    ck_assert_ptr_null(req);
    ck_assert_int_eq(comm_gather(native, x, x, 1, ZT_F64, size), ZT_ERR_USAGE);
    ck_assert_int_eq(comm_gather(native, x, NULL, 1, ZT_F64, rank), ZT_ERR_USAGE);
    const struct comm_stats *s = comm_get_stats(native);
    for (int k = 0; k < COMM_KIND_COUNT; k++)
        ck_assert_uint_eq(s->calls[k], 0);
}
END_TEST

/* ---- gather ---- */

START_TEST(test_gather_to_nonzero_root)
{
    const int root = size - 1;
    const size_t n = 3;
    uint64_t in[3], *out = rank == root ? xmalloc(n * (size_t)size * sizeof *out) : NULL;
    reset_bad();
    for (size_t j = 0; j < n; j++)
        in[j] = ((uint64_t)rank << 40) + j * 7 + 1;
    if (out)
        memset(out, 0xff, n * (size_t)size * sizeof *out);
    comm_reset_stats(ring);
    CHECK_OK(comm_gather(ring, in, out, n, ZT_I64, root));
    for (int r = 0; out && r < size; r++)
        for (size_t j = 0; j < n; j++)
            CHECK(out[(size_t)r * n + j] == ((uint64_t)r << 40) + j * 7 + 1, "gather [%d][%zu]", r,
                  j);
    const struct comm_stats *s = comm_get_stats(ring);
    CHECK(s->bytes[COMM_KIND_GATHER] == (rank == root ? 0u : n * 8) &&
              s->calls[COMM_KIND_GATHER] == 1,
          "gather bytes %llu", (unsigned long long)s->bytes[COMM_KIND_GATHER]);
    ck_assert_str_eq(comm_kind_name(COMM_KIND_GATHER), "gather");
    ck_assert_str_eq(comm_kind_name(COMM_KIND_SEND), "send");
    free(out);
    ASSERT_NO_BAD();
}
END_TEST

/* ---- the world ---- */

START_TEST(test_world_rank_size_local)
{
    MPI_Comm node;
    int local = 0;
    ck_assert_int_eq(comm_world_rank(), rank);
    ck_assert_int_eq(comm_world_size(), size);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
    ck_assert_int_eq(comm_local_ranks(), local);
}
END_TEST

START_TEST(test_world_agree_all_ok)
{
    int print_here = -1;
    ck_assert_int_eq(comm_world_agree(ZT_OK, &print_here), ZT_OK);
    ck_assert_int_eq(print_here, 0);
}
END_TEST

/* Odd ranks fail with a run-time error (exit 1), the last rank with a
 * configuration error (exit 2): everyone gets the configuration error, and
 * the lowest failing rank (1; 0 alone) prints, though its status was the
 * milder one. Ranks that were OK keep their (empty) message. */
START_TEST(test_world_agree_most_severe_lowest_failing)
{
    int print_here = -1, printers = 0;
    zt_status local = ZT_OK;
    zt_error_clear();
    if (rank == size - 1)
        local = zt_error_set(ZT_ERR_CONFIG, "run.yaml: bad");
    else if (rank % 2 == 1)
        local = zt_error_set(ZT_ERR_IO, "data.bin: cannot read");
    zt_status agreed = comm_world_agree(local, &print_here);
    MPI_Allreduce(&print_here, &printers, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    ck_assert_int_eq(agreed, ZT_ERR_CONFIG);
    ck_assert_int_eq(print_here, rank == (size > 1 ? 1 : 0));
    ck_assert_int_eq(printers, 1);
    if (local == ZT_OK)
        ck_assert_str_eq(zt_error_message(), "");
}
END_TEST

/* ---- buffer memory and the backend ---- */

START_TEST(test_backend_must_match_buffer_memory)
{
    struct comm *c = (struct comm *)&c;
    struct comm_config nccl_host = {.backend = "nccl", .memory = COMM_MEMORY_HOST};
    ck_assert_int_eq(comm_create(&nccl_host, &c), ZT_ERR_CONFIG);
    ck_assert_ptr_null(c);
    /* the same message whether or not NCCL is built */
    ck_assert_str_eq(zt_error_message(),
                     "comm.backend: nccl needs device buffers, but device is cpu");
    /* "mpi" on device memory is the staged one (test_comm_staged.c), usable
     * where the CUDA runtime sees a device */
    struct comm_config mpi_cuda = {.backend = "mpi", .memory = COMM_MEMORY_CUDA};
    zt_status staged = comm_create(&mpi_cuda, &c);
    if (staged == ZT_OK) {
        ck_assert_int_eq(comm_backend_staged(c), 1);
        comm_destroy(c);
    } else {
        ck_assert_int_eq(staged, ZT_ERR_CONFIG);
        ck_assert_ptr_nonnull(strstr(zt_error_message(), "comm.backend: mpi: not usable"));
    }
    struct comm_config bad = {.memory = (enum comm_memory)7};
    ck_assert_int_eq(comm_create(&bad, &c), ZT_ERR_USAGE);
    /* auto on device memory without a stager: NCCL where every rank has a
     * GPU, else the CUDA runtime's staging, else nothing */
    struct comm_config auto_cuda = {.memory = COMM_MEMORY_CUDA};
    zt_status st = comm_create(&auto_cuda, &c);
    if (st == ZT_OK) {
        ck_assert_str_eq(comm_backend_name(c), "nccl");
        comm_destroy(c);
    } else {
        ck_assert_int_eq(st, ZT_ERR_CONFIG);
        ck_assert_ptr_nonnull(strstr(zt_error_message(), "device buffers"));
    }
}
END_TEST

/* "auto" follows comm_backend_auto and says why: on host memory MPI, with
 * the rule's line; a named backend says it was named; a split keeps its
 * parent's reason. */
START_TEST(test_auto_reason_on_host_memory)
{
    struct comm *c = NULL, *half = NULL;
    struct comm_config host = {.memory = COMM_MEMORY_HOST, .ranks_share_gpu = 1};
    ck_assert_int_eq(comm_create(&host, &c), ZT_OK);
    ck_assert_str_eq(comm_backend_name(c), "mpi");
    ck_assert_str_eq(comm_backend_reason(c), "mpi: device is cpu, so the buffers are host memory");
    ck_assert_int_eq(comm_split(c, comm_rank(c) % 2, 0, &half), ZT_OK);
    ck_assert_str_eq(comm_backend_reason(half), comm_backend_reason(c));
    comm_destroy(half);
    comm_destroy(c);
    struct comm_config named = {.backend = "mpi"};
    ck_assert_int_eq(comm_create(&named, &c), ZT_OK);
    ck_assert_str_eq(comm_backend_reason(c), "mpi: named by comm.backend");
    comm_destroy(c);
}
END_TEST

/* A stager of plain copies, so that "mpi" with host staging runs on host
 * buffers labelled as device memory (test_comm_staged.c tests it whole). */
static zt_status copy_bytes(void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
    return ZT_OK;
}

static zt_status alloc_bytes(size_t bytes, void **out)
{
    *out = malloc(bytes);
    return *out ? ZT_OK : zt_error_set(ZT_ERR_NOMEM, "test stager: out of memory");
}

static const struct comm_stager copy_stager = {copy_bytes, copy_bytes, alloc_bytes, free};

/* On device memory one rank sharing its GPU makes every rank take MPI with
 * host staging (the input is agreed before the rule), saying why; without
 * sharing "auto" takes NCCL where it is built and usable on every rank,
 * else the staged MPI with the reason. */
START_TEST(test_auto_on_device_memory_follows_the_rule)
{
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct comm *c = NULL;
    struct comm_config cfg = {
        .memory = COMM_MEMORY_CUDA, .stager = &copy_stager, .ranks_share_gpu = rank == size - 1};
    ck_assert_msg(comm_create(&cfg, &c) == ZT_OK, "%s", zt_error_message());
    ck_assert_str_eq(comm_backend_name(c), "mpi");
    ck_assert_int_eq(comm_backend_staged(c), 1);
#ifdef ZT_HAVE_NCCL
    ck_assert_str_eq(comm_backend_reason(c),
                     "mpi with host staging: device is cuda, but ranks share a GPU (more ranks on "
                     "a node than visible GPUs), which NCCL cannot drive");
#else
    ck_assert_str_eq(comm_backend_reason(c), "mpi with host staging: device is cuda, but this "
                                             "build has no NCCL");
#endif
    float x[3] = {1.0f, 2.0f, (float)rank};
    ck_assert_int_eq(comm_allreduce(c, x, 3, ZT_F32, COMM_OP_SUM), ZT_OK);
    ck_assert(x[0] == (float)size && x[2] == (float)(size * (size - 1) / 2));
    comm_destroy(c);

    cfg.ranks_share_gpu = 0;
    ck_assert_msg(comm_create(&cfg, &c) == ZT_OK, "%s", zt_error_message());
    if (strcmp(comm_backend_name(c), "nccl") == 0) { /* a GPU per rank */
        ck_assert_str_eq(comm_backend_reason(c), "nccl: device is cuda, NCCL is built and every "
                                                 "rank has a GPU of its own");
    } else {
        ck_assert_int_eq(comm_backend_staged(c), 1);
#ifdef ZT_HAVE_NCCL
        const char *fallback =
            "mpi with host staging: device is cuda, but nccl is not usable on every rank (";
        ck_assert_msg(strncmp(comm_backend_reason(c), fallback, strlen(fallback)) == 0, "%s",
                      comm_backend_reason(c));
#endif
    }
    comm_destroy(c);
    cfg.backend = "mpi";
    ck_assert_int_eq(comm_create(&cfg, &c), ZT_OK);
    ck_assert_str_eq(comm_backend_reason(c), "mpi with host staging: named by comm.backend");
    comm_destroy(c);
}
END_TEST

/* Every rank's node as comm.h defines it (the real nodes of one machine:
 * one; or ZT_SIMULATED_RANKS_PER_NODE's), and the link-class split of a
 * group's bytes: the share of its ring's edges between nodes is
 * inter-node, on every rank alike; a message by its peer's node. */
static struct comm *make(const char *algo);

static int expected_node(int r)
{
    const char *v = getenv("ZT_SIMULATED_RANKS_PER_NODE");
    return v && atoi(v) > 0 ? r / atoi(v) : 0;
}

static void check_link_split(struct comm *c, const int *world_of, const char *what)
{
    const int n = comm_size(c);
    int cross = 0;
    for (int i = 0; i < n; i++) {
        CHECK(comm_node_of(c, i) == expected_node(world_of[i]), "%s: member %d on node %d", what, i,
              comm_node_of(c, i));
        cross += n > 1 && expected_node(world_of[i]) != expected_node(world_of[(i + 1) % n]);
    }
    comm_reset_stats(c);
    float x[64] = {0};
    CHECK_OK(comm_allreduce(c, x, 64, ZT_F32, COMM_OP_SUM));
    const struct comm_stats *st = comm_get_stats(c);
    const uint64_t bus = st->bytes[COMM_KIND_ALLREDUCE];
    CHECK(st->link_bytes[COMM_LINK_INTER][COMM_KIND_ALLREDUCE] == bus * (uint64_t)cross / n,
          "%s: inter %llu of %llu bytes, %d of %d edges cross", what,
          (unsigned long long)st->link_bytes[COMM_LINK_INTER][COMM_KIND_ALLREDUCE],
          (unsigned long long)bus, cross, n);
    CHECK(st->link_bytes[COMM_LINK_INTRA][COMM_KIND_ALLREDUCE] +
                  st->link_bytes[COMM_LINK_INTER][COMM_KIND_ALLREDUCE] ==
              bus,
          "%s: intra + inter is not the bytes", what);
}

START_TEST(test_nodes_and_link_classes)
{
    struct comm *w = make("native");
    int world_of[64];
    for (int i = 0; i < size; i++)
        world_of[i] = i;
    check_link_split(w, world_of, "world");
    /* the even and the odd ranks: a strided group */
    struct comm *half = NULL;
    CHECK_OK(comm_split(w, rank % 2, rank, &half));
    int n = 0;
    for (int i = rank % 2; i < size; i += 2)
        world_of[n++] = i;
    check_link_split(half, world_of, "half");
    comm_destroy(half);
    /* a message counts by the peer's node */
    if (size >= 2 && rank < 2) {
        float v[8] = {0};
        const int peer = 1 - rank;
        comm_reset_stats(w);
        if (rank == 0)
            CHECK_OK(comm_send(w, v, 8, ZT_F32, peer));
        else
            CHECK_OK(comm_recv(w, v, 8, ZT_F32, peer));
        const uint64_t inter = comm_get_stats(w)->link_bytes[COMM_LINK_INTER][COMM_KIND_SEND];
        CHECK(inter == (rank == 0 && expected_node(0) != expected_node(1) ? sizeof v : 0),
              "send: %llu inter-node bytes", (unsigned long long)inter);
    }
    comm_destroy(w);
    CHECK(strcmp(comm_link_name(COMM_LINK_INTER), "inter") == 0, "link name");
    ASSERT_NO_BAD();
}
END_TEST

static Suite *comm_suite(void)
{
    Suite *s = suite_create("comm");
    TCase *tc = tcase_create("mpi");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_create_reports_rank_size_backend);
    tcase_add_test(tc, test_nodes_and_link_classes);
    tcase_add_test(tc, test_barrier_waits_for_the_last_rank);
    tcase_add_test(tc, test_create_rejects_unknown_names);
    tcase_add_test(tc, test_create_nccl_without_gpu_is_config_error);
    tcase_add_test(tc, test_auto_backend_falls_back_to_mpi);
    tcase_add_test(tc, test_allreduce_every_type_and_op);
    tcase_add_test(tc, test_allreduce_fractional_f32_f64);
    tcase_add_test(tc, test_reduce_scatter_native);
    tcase_add_test(tc, test_reduce_scatter_ring);
    tcase_add_test(tc, test_reduce_scatter_auto);
    tcase_add_test(tc, test_allgather_native);
    tcase_add_test(tc, test_allgather_ring);
    tcase_add_test(tc, test_allgather_auto);
    tcase_add_test(tc, test_ring_matches_native_on_fractional_data);
    tcase_add_test(tc, test_ring_and_native_identical_on_exact_data);
    tcase_add_test(tc, test_ring_many_chunks);
    tcase_add_test(tc, test_ring_allreduce_exact_every_type_op_and_size);
    tcase_add_test(tc, test_ring_allreduce_many_groups);
    tcase_add_test(tc, test_ring_allreduce_fractional_matches_native_and_reference);
    tcase_add_test(tc, test_ring_iallreduce_with_progress_same_bits_as_blocking);
    tcase_add_test(tc, test_ring_several_outstanding);
    tcase_add_test(tc, test_progress_accounting_and_ring_bytes);
    tcase_add_test(tc, test_ring_allreduce_scratch_is_one_group_on_the_ledger);
    tcase_add_test(tc, test_half_sum_rounds_ties_to_even);
    tcase_add_test(tc, test_half_sum_matches_fp32_reference);
    tcase_add_test(tc, test_half_sum_every_pattern);
    tcase_add_test(tc, test_broadcast_from_last_rank);
    tcase_add_test(tc, test_nonblocking_single);
    tcase_add_test(tc, test_nonblocking_overlapping);
    tcase_add_test(tc, test_byte_counters_follow_bus_model);
    tcase_add_test(tc, test_ring_scratch_is_on_the_ledger);
    tcase_add_test(tc, test_usage_errors_enter_no_collective);
    tcase_add_test(tc, test_agree_status_all_ok);
    tcase_add_test(tc, test_agree_status_one_rank_fails);
    tcase_add_test(tc, test_agree_status_most_severe_wins);
    tcase_add_test(tc, test_split_even_odd_renumbers_and_reduces_per_group);
    tcase_add_test(tc, test_split_key_reverses_order);
    tcase_add_test(tc, test_split_group_of_one);
    tcase_add_test(tc, test_disjoint_groups_interleaved);
    tcase_add_test(tc, test_nested_split);
    tcase_add_test(tc, test_split_negative_color_is_usage_error);
    tcase_add_test(tc, test_send_recv_ring);
    tcase_add_test(tc, test_isend_irecv_ring);
    tcase_add_test(tc, test_point_to_point_usage_errors);
    tcase_add_test(tc, test_gather_to_nonzero_root);
    tcase_add_test(tc, test_world_rank_size_local);
    tcase_add_test(tc, test_world_agree_all_ok);
    tcase_add_test(tc, test_world_agree_most_severe_lowest_failing);
    tcase_add_test(tc, test_backend_must_match_buffer_memory);
    tcase_add_test(tc, test_auto_reason_on_host_memory);
    tcase_add_test(tc, test_auto_on_device_memory_follows_the_rule);
    suite_add_tcase(s, tc);
    return s;
}

static struct comm *make(const char *algo)
{
    struct comm_config cfg = {
        .backend = "mpi", .reduce_scatter = algo, .allgather = algo, .allreduce = algo};
    struct comm *c = NULL;
    zt_status st = comm_create(&cfg, &c);
    if (st != ZT_OK) {
        fprintf(stderr, "comm_create(%s): %s: %s\n", algo ? algo : "auto", zt_status_str(st),
                zt_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return c;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    native = make("native");
    ring = make("ring");
    autoc = make(NULL);
    int rc = testutil_run_suite(comm_suite(), 1);
    comm_destroy(autoc);
    comm_destroy(ring);
    comm_destroy(native);
    MPI_Finalize();
    return rc;
}
