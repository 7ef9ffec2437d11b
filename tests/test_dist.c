/* tests/test_dist.c — data-parallel training across ranks (run at 2 and 4). */
#include <check.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/train.h"
#include "data/data.h"
#include "testutil.h"

static zt_status open_micro(struct run_session *s, const char **sets, int n_sets)
{
    struct config_override ov[8];
    char outdir[512];
    snprintf(outdir, sizeof outdir, "run.output_dir=%s", testutil_tmpdir("dist"));
    ov[0].assignment = outdir;
    for (int i = 0; i < n_sets; i++)
        ov[1 + i].assignment = sets[i];
    struct run_options o = {.config_path = testutil_source_path("tests/data/micro.yaml"),
                            .overrides = ov,
                            .n_overrides = 1 + n_sets,
                            .quiet = 1};
    return session_open(s, &o, 1);
}

START_TEST(ranks_hold_bit_identical_parameters)
{
    struct run_session s;
    ck_assert_int_eq(open_micro(&s, NULL, 0), ZT_OK);
    for (long step = 0; step < 5; step++) {
        struct step_record r = {.step = step + 1, .lr = 3e-3};
        ck_assert_int_eq(train_step(&s, step, &r), ZT_OK);
    }
    size_t n = s.table.n_params;
    float *mine = malloc(n * sizeof(float)), *root = malloc(n * sizeof(float));
    ck_assert_int_eq(shard_engine_full_params(&s.engine, mine), ZT_OK);
    memcpy(root, mine, n * sizeof(float));
    MPI_Bcast(root, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
    ck_assert_msg(memcmp(root, mine, n * sizeof(float)) == 0,
                  "rank %d parameters differ from rank 0's", s.rank);
    /* The parameters moved: the test would pass trivially otherwise. */
    float *init = malloc(n * sizeof(float));
    gpt2_init_params(&s.table, s.cfg.run.seed, 0, n, init);
    ck_assert(memcmp(init, mine, n * sizeof(float)) != 0);
    free(init);
    free(mine);
    free(root);
    session_close(&s);
}
END_TEST

START_TEST(one_allreduce_per_step_whatever_the_accumulation)
{
    const char *sets[] = {"gradient_accumulation_steps=3"};
    struct run_session s;
    ck_assert_int_eq(open_micro(&s, sets, 1), ZT_OK);
    struct step_record r = {.step = 1, .lr = 3e-3};
    ck_assert_int_eq(train_step(&s, 0, &r), ZT_OK);
    /* The step's traffic is the one gradient allreduce (the loss average
     * for the log comes after the step's counters are taken). */
    ck_assert_uint_eq(r.comm.calls[COMM_KIND_ALLREDUCE], 1);
    uint64_t grad_bytes = (uint64_t)s.table.n_params * 4, N = (uint64_t)s.world;
    uint64_t expect = 2 * (N - 1) * grad_bytes / N;
    ck_assert_msg(r.comm.bytes[COMM_KIND_ALLREDUCE] >= expect - 8 &&
                      r.comm.bytes[COMM_KIND_ALLREDUCE] <= expect + 8,
                  "allreduce bytes %llu, expected about %llu",
                  (unsigned long long)r.comm.bytes[COMM_KIND_ALLREDUCE],
                  (unsigned long long)expect);
    ck_assert_uint_eq(r.comm.calls[COMM_KIND_REDUCE_SCATTER], 0);
    session_close(&s);
}
END_TEST

START_TEST(bad_config_fails_on_every_rank_printed_once)
{
    const char *sets[] = {"optimizer.params.lr=-1"};
    struct run_session s;
    zt_status st = open_micro(&s, sets, 1);
    ck_assert_int_eq(zt_status_exit_code(st), 2);
    int printers = s.failed_here, total = 0;
    MPI_Allreduce(&printers, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    ck_assert_int_eq(total, 1);
    ck_assert(s.rank != 0 || s.failed_here);
}
END_TEST

START_TEST(failure_on_one_rank_reaches_all)
{
    int rank, printers, total = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    zt_status local = rank == 1 ? zt_error_set(ZT_ERR_DATA, "rank 1 data broken") : ZT_OK;
    zt_status agreed = session_agree(local, &printers);
    ck_assert_int_eq(agreed, ZT_ERR_DATA);
    MPI_Allreduce(&printers, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    ck_assert_int_eq(total, 1);
    ck_assert_int_eq(printers, rank == 1);
}
END_TEST

int main(void)
{
    MPI_Init(NULL, NULL);
    Suite *s = suite_create("dist");
    TCase *tc = tcase_create("stage0");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, ranks_hold_bit_identical_parameters);
    tcase_add_test(tc, one_allreduce_per_step_whatever_the_accumulation);
    tcase_add_test(tc, bad_config_fails_on_every_rank_printed_once);
    tcase_add_test(tc, failure_on_one_rank_reaches_all);
    suite_add_tcase(s, tc);
    int rc = testutil_run_suite(s, 1);
    MPI_Finalize();
    return rc;
}
