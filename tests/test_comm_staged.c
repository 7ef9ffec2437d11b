/* tests/test_comm_staged.c — "mpi" with host staging (comm/comm_staged.c)
 * against the plain "mpi" backend.
 *
 * The staged comms are made on COMM_MEMORY_CUDA with a stager of memcpy
 * and malloc, and handed ordinary host buffers: every staged path runs
 * here, without a GPU. Each collective is run twice, on the staged comm
 * and on a host comm of the same algorithm, from the same inputs; the
 * results must be equal bit for bit. The inputs are fractional, so a
 * different order of summation would show.
 *
 * The stager counts its live allocations (all must be freed with the
 * comm) and can be told to fail its n-th next copy or allocation on one
 * rank: every rank must then return an error from the same call, and the
 * comm must work afterwards.
 *
 * MPI suites run without fork, so a failed ck_assert on one rank would leave
 * the others waiting in the next collective: each test runs all of its
 * calls first, counting mismatches with CHECK, and asserts at the end.
 */
#include <check.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/comm.h"
#include "../comm/flight.h"
#include "../common/half.h"
#include "../common/ledger.h"
#include "soft_check.h"
#include "testutil.h"

static int rank, size;

/* ---- the test stager: memcpy and malloc, with injected failures ---- */

/* Each countdown >= 0 makes the call it counts fail once it reaches 0
 * (0: the next call); -1: never. */
static int fail_to_host = -1, fail_to_device = -1, fail_alloc = -1;
static long live_allocs; /* pinned buffers handed out and not yet freed */

static int fires(int *countdown)
{
    if (*countdown < 0)
        return 0;
    return (*countdown)-- == 0;
}

static zt_status mem_to_host(void *host, const void *dev, size_t bytes)
{
    if (fires(&fail_to_host))
        return zt_error_set(ZT_ERR_DEVICE, "injected to_host failure");
    memcpy(host, dev, bytes);
    return ZT_OK;
}

static zt_status mem_to_device(void *dev, const void *host, size_t bytes)
{
    if (fires(&fail_to_device))
        return zt_error_set(ZT_ERR_DEVICE, "injected to_device failure");
    memcpy(dev, host, bytes);
    return ZT_OK;
}

static zt_status mem_alloc(size_t bytes, void **out)
{
    if (fires(&fail_alloc) || !(*out = malloc(bytes)))
        return zt_error_set(ZT_ERR_NOMEM, "injected pinned allocation failure");
    live_allocs++;
    return ZT_OK;
}

static void mem_free(void *p)
{
    live_allocs--;
    free(p);
}

static const struct comm_stager mem_stager = {mem_to_host, mem_to_device, mem_alloc, mem_free};

/* ---- comms and buffers ---- */

static const char *const algos[] = {"native", "ring"};
#define N_ALGOS 2
static struct comm *host_comm[N_ALGOS], *staged_comm[N_ALGOS];

static struct comm *make(const char *algo, enum comm_memory memory, struct ledger *ledger)
{
    struct comm_config cfg = {.backend = "mpi",
                              .reduce_scatter = algo,
                              .allgather = algo,
                              .allreduce = algo,
                              .memory = memory,
                              .ledger = ledger,
                              .stager = &mem_stager};
    struct comm *c = NULL;
    zt_status st = comm_create(&cfg, &c);
    if (st != ZT_OK) {
        fprintf(stderr, "comm_create(%s): %s: %s\n", algo, zt_status_str(st), zt_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return c;
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        MPI_Abort(MPI_COMM_WORLD, 1);
    return p;
}

static const enum zt_dtype types[] = {ZT_F32, ZT_F64, ZT_BF16, ZT_I32};
#define N_TYPES (sizeof types / sizeof types[0])
static const size_t counts[] = {0, 1, 7, 4097};
#define N_COUNTS (sizeof counts / sizeof counts[0])
#define GUARD    16 /* bytes after each output that no call may touch */

/* A value in [-10, 10] with three decimals (not exact in binary), a
 * function of (seed, rank, index); integers for I32. */
static double value(int seed, int r, size_t i)
{
    uint64_t h = ((uint64_t)seed * 0x632be59bd9b4e019u + (uint64_t)r) * 0x9e3779b97f4a7c15u ^
                 (uint64_t)(i + 1) * 0xbf58476d1ce4e5b9u;
    h ^= h >> 31;
    return (double)((int)(h % 20001u) - 10000) / 1000.0;
}

/* n elements of t from `seed` for this rank, then GUARD bytes of 0xA5. */
static void *filled(enum zt_dtype t, size_t n, int seed)
{
    const size_t es = zt_dtype_size(t);
    unsigned char *p = xmalloc(n * es + GUARD);
    for (size_t i = 0; i < n; i++) {
        double v = value(seed, rank, i);
        switch (t) {
        case ZT_F32:
            ((float *)p)[i] = (float)v;
            break;
        case ZT_F64:
            ((double *)p)[i] = v;
            break;
        case ZT_BF16:
        case ZT_F16:
            ((uint16_t *)p)[i] = zt_f32_to_bf16((float)v);
            break;
        case ZT_I32:
            ((int32_t *)p)[i] = (int32_t)(v * 1000);
            break;
        case ZT_I64:
        case ZT_U8:
            ck_abort_msg("type not used here");
        }
    }
    memset(p + n * es, 0xA5, GUARD);
    return p;
}

/* Two copies of one filled buffer: one for each comm. */
static void twin(enum zt_dtype t, size_t n, int seed, unsigned char **a, unsigned char **b)
{
    *a = filled(t, n, seed);
    *b = filled(t, n, seed);
}

/* The staged result equals the host one, and the guard is intact. */
static void same(const void *staged, const void *host, size_t bytes, const char *what, int algo,
                 enum zt_dtype t, size_t n)
{
    const unsigned char *g = (const unsigned char *)staged + bytes;
    int guard_ok = 1;
    for (int i = 0; i < GUARD; i++)
        guard_ok &= g[i] == 0xA5;
    CHECK(memcmp(staged, host, bytes) == 0, "%s %s dtype %d n %zu: staged differs from host", what,
          algos[algo], (int)t, n);
    CHECK(guard_ok, "%s %s dtype %d n %zu: wrote past the output", what, algos[algo], (int)t, n);
}

/* Waits for *q when issuing it (`issued`, evaluated before *q is read)
 * went well. */
static void wait_ok(struct comm *c, zt_status issued, struct comm_request **q)
{
    CHECK(issued == ZT_OK, "issue: %s: %s", zt_status_str(issued), zt_error_message());
    if (issued == ZT_OK)
        CHECK_OK(comm_wait(c, *q));
}

/* ---- selection ---- */

START_TEST(test_mpi_on_device_memory_is_staged)
{
    struct comm *c = NULL;
    ck_assert_str_eq(comm_backend_name(staged_comm[0]), "mpi");
    ck_assert_int_eq(comm_backend_staged(staged_comm[0]), 1);
    ck_assert_str_eq(comm_backend_name(host_comm[0]), "mpi");
    ck_assert_int_eq(comm_backend_staged(host_comm[0]), 0);
    ck_assert_int_eq(comm_size(staged_comm[0]), size);
    ck_assert_int_eq(comm_rank(staged_comm[0]), rank);
    struct comm_config nccl_host = {.backend = "nccl", .memory = COMM_MEMORY_HOST};
    ck_assert_int_eq(comm_create(&nccl_host, &c), ZT_ERR_CONFIG);
    ck_assert_ptr_null(c);
}
END_TEST

/* "auto" on device memory: NCCL when it is usable on every rank (a machine
 * where every rank has a GPU), else the staged MPI. */
/* A comm on device buffers has a host twin for host values, splits carry
 * it along, and a host comm is its own. */
START_TEST(test_host_twin_serves_host_values)
{
    struct comm *twin = comm_host(staged_comm[0]);
    ck_assert_ptr_ne(twin, staged_comm[0]);
    ck_assert_int_eq(comm_backend_staged(twin), 0);
    ck_assert_ptr_eq(comm_host(twin), twin);
    ck_assert_ptr_eq(comm_host(host_comm[0]), host_comm[0]);
    ck_assert_int_eq(comm_size(twin), size);
    ck_assert_int_eq(comm_rank(twin), rank);
    double v = rank + 1.0;
    CHECK_OK(comm_allreduce(twin, &v, 1, ZT_F64, COMM_OP_SUM));
    ck_assert(v == size * (size + 1) / 2.0);
    struct comm *half = NULL;
    CHECK_OK(comm_split(staged_comm[0], rank % 2, rank, &half));
    ck_assert_int_eq(comm_backend_staged(half), 1);
    struct comm *half_twin = comm_host(half);
    ck_assert_ptr_ne(half_twin, half);
    ck_assert_int_eq(comm_size(half_twin), comm_size(half));
    ck_assert_int_eq(comm_rank(half_twin), comm_rank(half));
    int one = 1;
    CHECK_OK(comm_allreduce(half_twin, &one, 1, ZT_I32, COMM_OP_SUM));
    ck_assert_int_eq(one, comm_size(half));
    comm_destroy(half);
}
END_TEST

START_TEST(test_auto_on_device_memory_falls_back_to_staged)
{
    struct comm_config cfg = {.memory = COMM_MEMORY_CUDA, .stager = &mem_stager};
    struct comm *c = NULL;
    zt_status st = comm_create(&cfg, &c);
    if (st != ZT_OK) { /* NCCL chosen, then refused at init (ranks sharing a GPU) */
        ck_assert_ptr_nonnull(strstr(zt_error_message(), "nccl"));
        return;
    }
    int staged = comm_backend_staged(c), nccl = strcmp(comm_backend_name(c), "nccl") == 0;
    int mpi = strcmp(comm_backend_name(c), "mpi") == 0;
    comm_destroy(c);
    ck_assert(nccl || (mpi && staged));
}
END_TEST

/* ---- collectives against the host backend ---- */

START_TEST(test_allreduce_matches_host)
{
    reset_bad();
    for (int a = 0; a < N_ALGOS; a++)
        for (size_t ti = 0; ti < N_TYPES; ti++)
            for (size_t ci = 0; ci < N_COUNTS; ci++)
                for (int op = COMM_OP_SUM; op <= COMM_OP_MIN; op++)
                    for (int nb = 0; nb < 2; nb++) {
                        const enum zt_dtype t = types[ti];
                        const size_t n = counts[ci], bytes = n * zt_dtype_size(t);
                        unsigned char *hb, *sb;
                        twin(t, n, (int)(ti * 7 + ci), &hb, &sb);
                        if (nb) {
                            struct comm_request *q = NULL;
                            wait_ok(host_comm[a], comm_iallreduce(host_comm[a], hb, n, t, op, &q),
                                    &q);
                            wait_ok(staged_comm[a],
                                    comm_iallreduce(staged_comm[a], sb, n, t, op, &q), &q);
                        } else {
                            CHECK_OK(comm_allreduce(host_comm[a], hb, n, t, op));
                            CHECK_OK(comm_allreduce(staged_comm[a], sb, n, t, op));
                        }
                        same(sb, hb, bytes, nb ? "iallreduce" : "allreduce", a, t, n);
                        free(hb);
                        free(sb);
                    }
    ASSERT_NO_BAD();
}
END_TEST

/* Large enough for several ring chunks and groups. */
START_TEST(test_large_allreduce_and_reduce_scatter_match_host)
{
    const size_t n = 700000;
    reset_bad();
    for (int a = 0; a < N_ALGOS; a++) {
        unsigned char *hb, *sb;
        twin(ZT_F32, n, 91, &hb, &sb);
        CHECK_OK(comm_allreduce(host_comm[a], hb, n, ZT_F32, COMM_OP_SUM));
        CHECK_OK(comm_allreduce(staged_comm[a], sb, n, ZT_F32, COMM_OP_SUM));
        same(sb, hb, n * 4, "large allreduce", a, ZT_F32, n);
        const size_t block = n / (size_t)size;
        unsigned char *ho = filled(ZT_F32, block, 0), *so = filled(ZT_F32, block, 0);
        CHECK_OK(comm_reduce_scatter(host_comm[a], hb, ho, block, ZT_F32, COMM_OP_SUM));
        CHECK_OK(comm_reduce_scatter(staged_comm[a], sb, so, block, ZT_F32, COMM_OP_SUM));
        same(so, ho, block * 4, "large reduce_scatter", a, ZT_F32, block);
        free(hb);
        free(sb);
        free(ho);
        free(so);
    }
    ASSERT_NO_BAD();
}
END_TEST

START_TEST(test_reduce_scatter_matches_host)
{
    reset_bad();
    for (int a = 0; a < N_ALGOS; a++)
        for (size_t ti = 0; ti < N_TYPES; ti++)
            for (size_t ci = 0; ci < N_COUNTS; ci++)
                for (int nb = 0; nb < 2; nb++) {
                    const enum zt_dtype t = types[ti];
                    const size_t n = counts[ci];
                    unsigned char *hin, *sin, *hout, *sout;
                    twin(t, n * (size_t)size, (int)(ti + 3 * ci), &hin, &sin);
                    twin(t, n, 1000, &hout, &sout);
                    if (nb) {
                        struct comm_request *q = NULL;
                        wait_ok(
                            host_comm[a],
                            comm_ireduce_scatter(host_comm[a], hin, hout, n, t, COMM_OP_SUM, &q),
                            &q);
                        wait_ok(
                            staged_comm[a],
                            comm_ireduce_scatter(staged_comm[a], sin, sout, n, t, COMM_OP_SUM, &q),
                            &q);
                    } else {
                        CHECK_OK(comm_reduce_scatter(host_comm[a], hin, hout, n, t, COMM_OP_SUM));
                        CHECK_OK(comm_reduce_scatter(staged_comm[a], sin, sout, n, t, COMM_OP_SUM));
                    }
                    same(sout, hout, n * zt_dtype_size(t),
                         nb ? "ireduce_scatter" : "reduce_scatter", a, t, n);
                    CHECK(memcmp(sin, hin, n * (size_t)size * zt_dtype_size(t)) == 0,
                          "reduce_scatter changed its input");
                    free(hin);
                    free(sin);
                    free(hout);
                    free(sout);
                }
    ASSERT_NO_BAD();
}
END_TEST

/* Separate input and output, and in place (in = out + rank * n). */
START_TEST(test_allgather_matches_host)
{
    reset_bad();
    for (int a = 0; a < N_ALGOS; a++)
        for (size_t ti = 0; ti < N_TYPES; ti++)
            for (size_t ci = 0; ci < N_COUNTS; ci++)
                for (int mode = 0; mode < 4; mode++) {
                    const int nb = mode & 1, in_place = mode >> 1;
                    const enum zt_dtype t = types[ti];
                    const size_t n = counts[ci], es = zt_dtype_size(t);
                    const size_t full = n * (size_t)size;
                    unsigned char *hin, *sin, *hout, *sout;
                    twin(t, n, (int)(5 * ti + ci), &hin, &sin);
                    twin(t, full, 2000, &hout, &sout);
                    const void *hsrc = hin, *ssrc = sin;
                    if (in_place) {
                        memcpy(hout + (size_t)rank * n * es, hin, n * es);
                        memcpy(sout + (size_t)rank * n * es, sin, n * es);
                        hsrc = hout + (size_t)rank * n * es;
                        ssrc = sout + (size_t)rank * n * es;
                    }
                    if (nb) {
                        struct comm_request *q = NULL;
                        wait_ok(host_comm[a], comm_iallgather(host_comm[a], hsrc, hout, n, t, &q),
                                &q);
                        wait_ok(staged_comm[a],
                                comm_iallgather(staged_comm[a], ssrc, sout, n, t, &q), &q);
                    } else {
                        CHECK_OK(comm_allgather(host_comm[a], hsrc, hout, n, t));
                        CHECK_OK(comm_allgather(staged_comm[a], ssrc, sout, n, t));
                    }
                    same(sout, hout, full * es, in_place ? "allgather in place" : "allgather", a, t,
                         n);
                    free(hin);
                    free(sin);
                    free(hout);
                    free(sout);
                }
    ASSERT_NO_BAD();
}
END_TEST

START_TEST(test_broadcast_and_gather_match_host)
{
    reset_bad();
    for (int root = 0; root < size; root++)
        for (size_t ci = 0; ci < N_COUNTS; ci++) {
            const size_t n = counts[ci];
            unsigned char *hb, *sb;
            twin(ZT_F64, n, 3000 + (rank == root ? 0 : 1), &hb, &sb);
            CHECK_OK(comm_broadcast(host_comm[0], hb, n, ZT_F64, root));
            CHECK_OK(comm_broadcast(staged_comm[0], sb, n, ZT_F64, root));
            same(sb, hb, n * 8, "broadcast", 0, ZT_F64, n);
            unsigned char *hin, *sin, *hout = NULL, *sout = NULL;
            twin(ZT_I32, n, 4000, &hin, &sin);
            if (rank == root)
                twin(ZT_I32, n * (size_t)size, 4001, &hout, &sout);
            CHECK_OK(comm_gather(host_comm[0], hin, hout, n, ZT_I32, root));
            CHECK_OK(comm_gather(staged_comm[0], sin, sout, n, ZT_I32, root));
            if (rank == root)
                same(sout, hout, n * (size_t)size * 4, "gather", 0, ZT_I32, n);
            free(hb);
            free(sb);
            free(hin);
            free(sin);
            free(hout);
            free(sout);
        }
    ASSERT_NO_BAD();
}
END_TEST

START_TEST(test_barrier)
{
    ck_assert_int_eq(comm_barrier(staged_comm[1]), ZT_OK);
}
END_TEST

/* ---- messages ---- */

/* Beyond eager limits, so a send waits for its receive. */
#define MSG_N 100000

static void check_message(const unsigned char *got, int from, int seed, const char *what)
{
    unsigned char *want = xmalloc(MSG_N * 8);
    for (size_t i = 0; i < MSG_N; i++)
        ((double *)want)[i] = value(seed, from, i);
    CHECK(memcmp(got, want, MSG_N * 8) == 0, "%s: message from %d differs", what, from);
    CHECK(got[MSG_N * 8] == 0xA5, "%s: wrote past the message", what);
    free(want);
}

START_TEST(test_send_recv_ring)
{
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    struct comm *c = staged_comm[0];
    unsigned char *out = filled(ZT_F64, MSG_N, 5000), *in = filled(ZT_F64, MSG_N, 9);
    reset_bad();
    if (size == 1) { /* to itself: the receive must be posted first */
        struct comm_request *q = NULL;
        CHECK_OK(comm_irecv(c, in, MSG_N, ZT_F64, 0, &q));
        CHECK_OK(comm_send(c, out, MSG_N, ZT_F64, 0));
        CHECK_OK(comm_wait(c, q));
    } else if (rank % 2 == 0) {
        CHECK_OK(comm_send(c, out, MSG_N, ZT_F64, right));
        CHECK_OK(comm_recv(c, in, MSG_N, ZT_F64, left));
    } else {
        CHECK_OK(comm_recv(c, in, MSG_N, ZT_F64, left));
        CHECK_OK(comm_send(c, out, MSG_N, ZT_F64, right));
    }
    check_message(in, left, 5000, "blocking ring");
    free(out);
    free(in);
    ASSERT_NO_BAD();
}
END_TEST

/* Every rank isends first and then receives with a blocking call (shard's
 * tied-embedding exchange): only non-blocking sends let this complete.
 * Then two irecvs and isends each, waited in orders that differ between
 * neighbours, with a collective between issue and wait. */
START_TEST(test_isend_irecv)
{
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    struct comm *c = staged_comm[1];
    unsigned char *out0 = filled(ZT_F64, MSG_N, 6000), *out1 = filled(ZT_F64, MSG_N, 6001);
    unsigned char *in0 = filled(ZT_F64, MSG_N, 9), *in1 = filled(ZT_F64, MSG_N, 9);
    struct comm_request *sq[2] = {NULL, NULL}, *rq[2] = {NULL, NULL};
    reset_bad();
    if (size > 1) {
        CHECK_OK(comm_isend(c, out0, MSG_N, ZT_F64, right, &sq[0]));
        CHECK_OK(comm_recv(c, in0, MSG_N, ZT_F64, left));
        CHECK_OK(comm_wait(c, sq[0]));
        check_message(in0, left, 6000, "isend then recv");
    }
    CHECK_OK(comm_irecv(c, in0, MSG_N, ZT_F64, left, &rq[0]));
    CHECK_OK(comm_irecv(c, in1, MSG_N, ZT_F64, left, &rq[1]));
    CHECK_OK(comm_isend(c, out0, MSG_N, ZT_F64, right, &sq[0]));
    CHECK_OK(comm_isend(c, out1, MSG_N, ZT_F64, right, &sq[1]));
    CHECK_OK(comm_progress(c));
    float x[33];
    for (int i = 0; i < 33; i++)
        x[i] = (float)i;
    CHECK_OK(comm_allreduce(c, x, 33, ZT_F32, COMM_OP_SUM));
    CHECK(x[32] == 32.0f * (float)size, "allreduce among messages: %g", (double)x[32]);
    if (rank % 2) {
        CHECK_OK(comm_wait(c, rq[1]));
        CHECK_OK(comm_wait(c, sq[0]));
        CHECK_OK(comm_wait(c, rq[0]));
        CHECK_OK(comm_wait(c, sq[1]));
    } else {
        CHECK_OK(comm_wait(c, sq[1]));
        CHECK_OK(comm_wait(c, sq[0]));
        CHECK_OK(comm_wait(c, rq[0]));
        CHECK_OK(comm_wait(c, rq[1]));
    }
    check_message(in0, left, 6000, "first message");
    check_message(in1, left, 6001, "second message");
    free(out0);
    free(out1);
    free(in0);
    free(in1);
    ASSERT_NO_BAD();
}
END_TEST

/* ---- groups ---- */

START_TEST(test_split_matches_host_split)
{
    reset_bad();
    for (int a = 0; a < N_ALGOS; a++) {
        struct comm *hs = NULL, *ss = NULL;
        CHECK_OK(comm_split(host_comm[a], rank % 2, -rank, &hs));
        CHECK_OK(comm_split(staged_comm[a], rank % 2, -rank, &ss));
        if (!hs || !ss) {
            comm_destroy(hs);
            comm_destroy(ss);
            break;
        }
        CHECK(comm_backend_staged(ss) == 1 && strcmp(comm_backend_name(ss), "mpi") == 0,
              "split of a staged comm is not staged");
        CHECK(comm_size(ss) == comm_size(hs) && comm_rank(ss) == comm_rank(hs),
              "split: rank %d of %d, host %d of %d", comm_rank(ss), comm_size(ss), comm_rank(hs),
              comm_size(hs));
        const size_t n = 5003;
        const int m = comm_size(ss);
        unsigned char *hb, *sb, *ho, *so;
        twin(ZT_F32, n * (size_t)m, 7000, &hb, &sb);
        twin(ZT_F32, n, 0, &ho, &so);
        CHECK_OK(comm_allreduce(hs, hb, n * (size_t)m, ZT_F32, COMM_OP_SUM));
        CHECK_OK(comm_allreduce(ss, sb, n * (size_t)m, ZT_F32, COMM_OP_SUM));
        same(sb, hb, n * (size_t)m * 4, "split allreduce", a, ZT_F32, n);
        CHECK_OK(comm_reduce_scatter(hs, hb, ho, n, ZT_F32, COMM_OP_SUM));
        CHECK_OK(comm_reduce_scatter(ss, sb, so, n, ZT_F32, COMM_OP_SUM));
        same(so, ho, n * 4, "split reduce_scatter", a, ZT_F32, n);
        /* a split of the split */
        struct comm *s2 = NULL;
        CHECK_OK(comm_split(ss, 0, 0, &s2));
        if (s2) {
            CHECK(comm_backend_staged(s2) == 1, "nested split is not staged");
            CHECK_OK(comm_allgather(s2, so, sb, n, ZT_F32));
            CHECK(memcmp(sb + (size_t)comm_rank(s2) * n * 4, so, n * 4) == 0,
                  "nested split allgather: own block");
        }
        comm_destroy(s2);
        comm_destroy(ss);
        comm_destroy(hs);
        free(hb);
        free(sb);
        free(ho);
        free(so);
    }
    ASSERT_NO_BAD();
}
END_TEST

/* ---- memory ---- */

/* The staging buffers are on the ledger while the comm lives (the
 * collectives' one at the largest call's size, one per message), ring
 * scratch too, and all of it comes back, with every pinned buffer, when
 * it is destroyed. */
START_TEST(test_staging_buffers_on_the_ledger)
{
    struct ledger l;
    reset_bad();
    ledger_init(&l, 0);
    const long live0 = live_allocs;
    struct comm *c = make("native", COMM_MEMORY_CUDA, &l);
    const uint64_t *cur = &l.current[LEDGER_COMM_BUFFERS];
    CHECK(*cur == 0, "a fresh comm holds %llu bytes", (unsigned long long)*cur);
    const size_t n = 1000;
    float *buf = filled(ZT_F32, n * (size_t)size, 1), *out = filled(ZT_F32, n, 2);
    CHECK_OK(comm_allreduce(c, buf, n, ZT_F32, COMM_OP_SUM));
    CHECK(*cur == n * 4, "after allreduce of %zu floats: %llu bytes", n, (unsigned long long)*cur);
    CHECK_OK(comm_allreduce(c, buf, n / 2, ZT_F32, COMM_OP_SUM));
    CHECK(*cur == n * 4, "a smaller call grew the buffer: %llu bytes", (unsigned long long)*cur);
    CHECK_OK(comm_reduce_scatter(c, buf, out, n, ZT_F32, COMM_OP_SUM));
    const uint64_t coll = (uint64_t)(size + 1) * n * 4;
    CHECK(*cur == coll, "after reduce_scatter: %llu bytes, want %llu", (unsigned long long)*cur,
          (unsigned long long)coll);
    /* two messages outstanding at once: two buffers, kept for reuse */
    struct comm_request *rq = NULL, *sq = NULL;
    CHECK_OK(comm_irecv(c, out, n, ZT_F32, (rank + size - 1) % size, &rq));
    CHECK_OK(comm_isend(c, buf, n, ZT_F32, (rank + 1) % size, &sq));
    CHECK(*cur == coll + 2 * n * 4, "with two messages out: %llu bytes", (unsigned long long)*cur);
    CHECK_OK(comm_wait(c, sq));
    CHECK_OK(comm_wait(c, rq));
    CHECK_OK(comm_isend(c, buf, n / 2, ZT_F32, (rank + 1) % size, &sq));
    CHECK_OK(comm_recv(c, out, n / 2, ZT_F32, (rank + size - 1) % size));
    CHECK_OK(comm_wait(c, sq));
    CHECK(*cur == coll + 2 * n * 4, "pool not reused: %llu bytes", (unsigned long long)*cur);
    comm_destroy(c);
    CHECK(*cur == 0, "after destroy: %llu bytes", (unsigned long long)*cur);
    CHECK(live_allocs == live0, "%ld pinned buffers not freed", live_allocs - live0);

    /* the MPI backend's ring scratch is counted in the same ledger */
    c = make("ring", COMM_MEMORY_CUDA, &l);
    CHECK_OK(comm_allreduce(c, buf, n * (size_t)size, ZT_F32, COMM_OP_SUM));
    CHECK(size == 1 || *cur > (uint64_t)n * (size_t)size * 4,
          "ring scratch not on the ledger: %llu bytes", (unsigned long long)*cur);
    comm_destroy(c);
    CHECK(*cur == 0, "after destroying the ring comm: %llu bytes", (unsigned long long)*cur);
    CHECK(live_allocs == live0, "%ld pinned buffers not freed", live_allocs - live0);
    free(buf);
    free(out);
    ASSERT_NO_BAD();
}
END_TEST

/* comm.c notes and counts each call once: the staged comm's counters equal
 * the host comm's, and the flight recorder holds one entry per call. */
START_TEST(test_each_call_counted_and_recorded_once)
{
    struct comm_flight *f = NULL;
    char tag[64];
    snprintf(tag, sizeof tag, "staged_flight_%d", rank);
    struct comm_flight_config fc = {.timeout_s = 0, .dir = testutil_tmpdir(tag)};
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", fc.dir);
    reset_bad();
    ck_assert_int_eq(comm_flight_create(&fc, &f, NULL), ZT_OK);
    struct comm_config cfg = {
        .backend = "mpi", .memory = COMM_MEMORY_CUDA, .stager = &mem_stager, .flight = f};
    struct comm *c = NULL;
    ck_assert_int_eq(comm_create(&cfg, &c), ZT_OK);
    comm_reset_stats(host_comm[0]);
    struct comm *both[2] = {c, host_comm[0]};
    const size_t n = 777;
    for (int k = 0; k < 2; k++) {
        float *buf = filled(ZT_F32, n * (size_t)size, 3), *out = filled(ZT_F32, n, 4);
        struct comm_request *q = NULL;
        CHECK_OK(comm_allreduce(both[k], buf, n, ZT_F32, COMM_OP_SUM));
        CHECK_OK(comm_iallreduce(both[k], buf, n, ZT_F32, COMM_OP_SUM, &q));
        CHECK_OK(comm_wait(both[k], q));
        CHECK_OK(comm_reduce_scatter(both[k], buf, out, n, ZT_F32, COMM_OP_SUM));
        CHECK_OK(comm_allgather(both[k], out, buf, n, ZT_F32));
        CHECK_OK(comm_broadcast(both[k], out, n, ZT_F32, 0));
        free(buf);
        free(out);
    }
    const struct comm_stats *s = comm_get_stats(c), *h = comm_get_stats(host_comm[0]);
    CHECK(memcmp(s->bytes, h->bytes, sizeof s->bytes) == 0 &&
              memcmp(s->calls, h->calls, sizeof s->calls) == 0,
          "staged counters differ from host's");
    CHECK(s->calls[COMM_KIND_ALLREDUCE] == 2, "allreduce calls %llu",
          (unsigned long long)s->calls[COMM_KIND_ALLREDUCE]);
    CHECK_OK(comm_flight_write(f, "test"));
    comm_destroy(c);
    comm_flight_destroy(f);
    char path[4200];
    snprintf(path, sizeof path, "%s/flight/rank-%d.json", dir, rank);
    FILE *fp = fopen(path, "rb");
    CHECK(fp != NULL, "no flight log at %.400s", path);
    if (fp) {
        static char text[1 << 20];
        size_t len = fread(text, 1, sizeof text - 1, fp);
        text[len] = '\0';
        fclose(fp);
        int calls[5] = {0};
        const char *ops[5] = {"allreduce", "reduce_scatter", "allgather", "broadcast", "agree"};
        for (int i = 0; i < 5; i++) {
            char key[64];
            snprintf(key, sizeof key, "\"op\": \"%s\"", ops[i]);
            for (const char *p = strstr(text, key); p; p = strstr(p + 1, key))
                calls[i]++;
        }
        CHECK(calls[0] == 2 && calls[1] == 1 && calls[2] == 1 && calls[3] == 1 && calls[4] == 0,
              "flight entries: allreduce %d reduce_scatter %d allgather %d broadcast %d agree %d",
              calls[0], calls[1], calls[2], calls[3], calls[4]);
    }
    ASSERT_NO_BAD();
}
END_TEST

/* ---- failures ---- */

/* Every rank got `want` from the call that failed on `failing`; the failing
 * rank its own message, the others one naming it. */
static void check_failed(zt_status got, zt_status want, int failing, const char *own,
                         const char *what)
{
    CHECK(got == want, "%s: got %s (%s), want %s", what, zt_status_str(got), zt_error_message(),
          zt_status_str(want));
    char naming[64];
    snprintf(naming, sizeof naming, "rank %d failed", failing);
    const char *msg = zt_error_message();
    CHECK(strstr(msg, rank == failing ? own : naming) != NULL, "%s: message '%s'", what, msg);
}

/* After a failure the comm still works and gives the host's bits. */
static void check_still_works(int a)
{
    const size_t n = 513;
    unsigned char *hb, *sb;
    twin(ZT_F32, n, 8000, &hb, &sb);
    CHECK_OK(comm_allreduce(host_comm[a], hb, n, ZT_F32, COMM_OP_SUM));
    CHECK_OK(comm_allreduce(staged_comm[a], sb, n, ZT_F32, COMM_OP_SUM));
    same(sb, hb, n * 4, "allreduce after a failure", a, ZT_F32, n);
    free(hb);
    free(sb);
}

START_TEST(test_copy_failure_reaches_every_rank)
{
    const int failing = size - 1;
    const size_t n = 300;
    reset_bad();
    for (int a = 0; a < N_ALGOS; a++) {
        struct comm *c = staged_comm[a];
        float *buf = filled(ZT_F32, n * (size_t)size, 1), *out = filled(ZT_F32, n, 2);
        struct comm_request *q = (struct comm_request *)&q;

        fail_to_host = rank == failing ? 0 : -1;
        check_failed(comm_allreduce(c, buf, n, ZT_F32, COMM_OP_SUM), ZT_ERR_DEVICE, failing,
                     "injected to_host", "allreduce, to_host");
        check_still_works(a);

        fail_to_device = rank == 0 ? 0 : -1;
        check_failed(comm_reduce_scatter(c, buf, out, n, ZT_F32, COMM_OP_SUM), ZT_ERR_DEVICE, 0,
                     "injected to_device", "reduce_scatter, to_device");
        check_still_works(a);

        fail_to_host = rank == failing ? 0 : -1;
        check_failed(comm_iallgather(c, out, buf, n, ZT_F32, &q), ZT_ERR_DEVICE, failing,
                     "injected to_host", "iallgather, to_host");
        CHECK(q == NULL, "a failed issue left a request");
        check_still_works(a);

        if (size > 1) { /* a receiver fails; the root (0) copies nothing out */
            fail_to_device = rank == failing ? 0 : -1;
            check_failed(comm_broadcast(c, buf, n, ZT_F32, 0), ZT_ERR_DEVICE, failing,
                         "injected to_device", "broadcast, to_device");
            check_still_works(a);
        }
        free(buf);
        free(out);
    }
    ASSERT_NO_BAD();
}
END_TEST

/* Growing the collectives' buffer fails on one rank: every rank fails
 * before the collective, no rank keeps a buffer, and the next call grows
 * it again. */
START_TEST(test_allocation_failure_reaches_every_rank)
{
    struct ledger l;
    const int failing = size - 1;
    const size_t n = 2000;
    reset_bad();
    ledger_init(&l, 0);
    struct comm *c = make("native", COMM_MEMORY_CUDA, &l);
    float *buf = filled(ZT_F32, n, 1);
    CHECK_OK(comm_allreduce(c, buf, n / 4, ZT_F32, COMM_OP_SUM));
    fail_alloc = rank == failing ? 0 : -1;
    check_failed(comm_allreduce(c, buf, n, ZT_F32, COMM_OP_SUM), ZT_ERR_NOMEM, failing,
                 "injected pinned allocation", "allreduce, growing");
    fail_alloc = -1;
    CHECK(l.current[LEDGER_COMM_BUFFERS] == 0, "after a failed growth: %llu bytes",
          (unsigned long long)l.current[LEDGER_COMM_BUFFERS]);
    CHECK_OK(comm_allreduce(c, buf, n, ZT_F32, COMM_OP_SUM));
    CHECK(l.current[LEDGER_COMM_BUFFERS] == n * 4, "after regrowing: %llu bytes",
          (unsigned long long)l.current[LEDGER_COMM_BUFFERS]);
    comm_destroy(c);
    CHECK(l.current[LEDGER_COMM_BUFFERS] == 0, "after destroy: %llu bytes",
          (unsigned long long)l.current[LEDGER_COMM_BUFFERS]);
    free(buf);
    ASSERT_NO_BAD();
}
END_TEST

/* A message whose staging failed is still sent, so its receiver does not
 * hang; the sender reports the failure at its wait. */
START_TEST(test_message_copy_failure_is_reported_without_a_hang)
{
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    struct comm *c = staged_comm[0];
    unsigned char *out = filled(ZT_F64, MSG_N, 9000), *in = filled(ZT_F64, MSG_N, 9);
    struct comm_request *sq = NULL, *rq = NULL;
    reset_bad();
    CHECK_OK(comm_irecv(c, in, MSG_N, ZT_F64, left, &rq));
    fail_to_host = rank == 0 ? 0 : -1;
    CHECK_OK(comm_isend(c, out, MSG_N, ZT_F64, right, &sq));
    fail_to_host = -1;
    zt_status st = comm_wait(c, sq);
    CHECK(st == (rank == 0 ? ZT_ERR_DEVICE : ZT_OK), "isend's wait: %s", zt_status_str(st));
    CHECK_OK(comm_wait(c, rq));
    if (left != 0)
        check_message(in, left, 9000, "message beside a failed one");
    /* a received message that cannot be copied out */
    CHECK_OK(comm_irecv(c, in, MSG_N, ZT_F64, left, &rq));
    CHECK_OK(comm_isend(c, out, MSG_N, ZT_F64, right, &sq));
    CHECK_OK(comm_wait(c, sq));
    fail_to_device = rank == 0 ? 0 : -1;
    st = comm_wait(c, rq);
    fail_to_device = -1;
    CHECK(st == (rank == 0 ? ZT_ERR_DEVICE : ZT_OK), "irecv's wait: %s", zt_status_str(st));
    free(out);
    free(in);
    ASSERT_NO_BAD();
}
END_TEST

static Suite *staged_suite(void)
{
    Suite *s = suite_create("comm_staged");
    TCase *tc = tcase_create("mpi");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_mpi_on_device_memory_is_staged);
    tcase_add_test(tc, test_auto_on_device_memory_falls_back_to_staged);
    tcase_add_test(tc, test_host_twin_serves_host_values);
    tcase_add_test(tc, test_allreduce_matches_host);
    tcase_add_test(tc, test_large_allreduce_and_reduce_scatter_match_host);
    tcase_add_test(tc, test_reduce_scatter_matches_host);
    tcase_add_test(tc, test_allgather_matches_host);
    tcase_add_test(tc, test_broadcast_and_gather_match_host);
    tcase_add_test(tc, test_barrier);
    tcase_add_test(tc, test_send_recv_ring);
    tcase_add_test(tc, test_isend_irecv);
    tcase_add_test(tc, test_split_matches_host_split);
    tcase_add_test(tc, test_staging_buffers_on_the_ledger);
    tcase_add_test(tc, test_each_call_counted_and_recorded_once);
    tcase_add_test(tc, test_copy_failure_reaches_every_rank);
    tcase_add_test(tc, test_allocation_failure_reaches_every_rank);
    tcase_add_test(tc, test_message_copy_failure_is_reported_without_a_hang);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int a = 0; a < N_ALGOS; a++) {
        host_comm[a] = make(algos[a], COMM_MEMORY_HOST, NULL);
        staged_comm[a] = make(algos[a], COMM_MEMORY_CUDA, NULL);
    }
    int rc = testutil_run_suite(staged_suite(), 1);
    for (int a = 0; a < N_ALGOS; a++) {
        comm_destroy(staged_comm[a]);
        comm_destroy(host_comm[a]);
    }
    MPI_Finalize();
    return rc;
}
