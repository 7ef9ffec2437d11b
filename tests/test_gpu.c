/* tests/test_gpu.c — the CUDA device-memory backend and the NCCL
 * collectives against host references, on a machine with a GPU. Built only
 * when the CUDA Toolkit was found; without a usable device every case
 * skips (exit 77) and says why. Run at 1 and 2 ranks (one GPU per rank;
 * NCCL refuses more ranks than GPUs on a node, which also skips). */
#include <check.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "testutil.h"
#include "worker/cuda_module.h"
#include "worker/device.h"

START_TEST(cuda_memory_round_trip_is_counted)
{
    struct ledger l;
    struct device d;
    ledger_init(&l, 0);
    ck_assert_int_eq(device_open("cuda", &l, &d), ZT_OK);
    enum { N = 1 << 20 };
    float *host = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++)
        host[i] = (float)i * 0.5f;
    void *dev;
    ck_assert_int_eq(device_alloc(&d, LEDGER_ACTIVATIONS, N * sizeof(float), "test", &dev), ZT_OK);
    ck_assert_uint_eq(l.current[LEDGER_ACTIVATIONS], N * sizeof(float));
    ck_assert_int_eq(d.ops->copy_to_host(&d, back, dev, N * sizeof(float)), ZT_OK);
    for (int i = 0; i < N; i++)
        ck_assert(back[i] == 0.0f); /* device_alloc zeroes */
    ck_assert_int_eq(d.ops->copy_from_host(&d, dev, host, N * sizeof(float)), ZT_OK);
    ck_assert_int_eq(d.ops->copy_to_host(&d, back, dev, N * sizeof(float)), ZT_OK);
    ck_assert(memcmp(host, back, N * sizeof(float)) == 0);
    struct device_memory_info mi;
    ck_assert_int_eq(device_memory_info(&d, &mi), ZT_OK);
    ck_assert_uint_ge(mi.reserved, mi.used);
    ck_assert_uint_ge(mi.used, N * sizeof(float));
    ck_assert_uint_ge(mi.peak, mi.used);
    ck_assert_uint_le(mi.largest_free, mi.reserved - mi.used);
    ck_assert_uint_gt(mi.driver_total, mi.reserved);
    device_free(&d, LEDGER_ACTIVATIONS, N * sizeof(float), dev);
    ck_assert_uint_eq(l.total_current, 0);
    ck_assert_int_eq(device_memory_info(&d, &mi), ZT_OK);
    ck_assert_uint_eq(mi.used, 0);
    ck_assert_uint_eq(mi.largest_free, mi.reserved); /* the pool coalesced back to one block */
    device_close(&d);
    free(host);
    free(back);
}
END_TEST

#ifdef ZT_HAVE_NCCL
/* Sum over ranks of rank-dependent device buffers, against the host sum. */
START_TEST(nccl_allreduce_matches_the_host_sum)
{
    struct ledger l;
    struct device d;
    struct comm *c;
    struct comm_config cc = {.backend = "nccl", .memory = COMM_MEMORY_CUDA};
    ledger_init(&l, 0);
    ck_assert_int_eq(device_open("cuda", &l, &d), ZT_OK);
    ck_assert_int_eq(comm_create(&cc, &c), ZT_OK);
    const int rank = comm_rank(c), size = comm_size(c);
    enum { N = 4097 };
    float host[N], back[N];
    for (int i = 0; i < N; i++)
        host[i] = (float)(rank + 1) * (float)(i % 13);
    void *dev;
    ck_assert_int_eq(device_alloc(&d, LEDGER_COMM_BUFFERS, sizeof host, "test", &dev), ZT_OK);
    ck_assert_int_eq(d.ops->copy_from_host(&d, dev, host, sizeof host), ZT_OK);
    ck_assert_int_eq(comm_allreduce(c, dev, N, ZT_F32, COMM_OP_SUM), ZT_OK);
    ck_assert_int_eq(d.ops->copy_to_host(&d, back, dev, sizeof back), ZT_OK);
    const float ranks_sum = (float)size * (float)(size + 1) / 2.0f;
    for (int i = 0; i < N; i++)
        ck_assert_msg(back[i] == ranks_sum * (float)(i % 13), "element %d: %g", i, back[i]);
    device_free(&d, LEDGER_COMM_BUFFERS, sizeof host, dev);
    comm_destroy(c);
    device_close(&d);
}
END_TEST
#endif

/* 0 when a CUDA device is usable on every rank; otherwise prints why once. */
static int gpu_missing(void)
{
    const struct cuda_worker_table *t;
    char why[512] = "";
    int mine = cuda_worker_table(&t, why, sizeof why) < 0 || t->device->query(why, sizeof why) < 0;
    int any = 0, rank = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (any && rank == 0)
        printf("SKIP: GPU tests need a CUDA device on every rank: %s\n",
               mine ? why : "another rank has none");
    return any;
}

int main(void)
{
    MPI_Init(NULL, NULL);
    if (gpu_missing()) {
        MPI_Finalize();
        return 77;
    }
    Suite *s = suite_create("gpu");
    TCase *tc = tcase_create("cuda");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, cuda_memory_round_trip_is_counted);
#ifdef ZT_HAVE_NCCL
    tcase_add_test(tc, nccl_allreduce_matches_the_host_sum);
#endif
    suite_add_tcase(s, tc);
    int rc = testutil_run_suite(s, 1);
    MPI_Finalize();
    return rc;
}
