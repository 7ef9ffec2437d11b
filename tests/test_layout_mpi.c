/* tests/test_layout_mpi.c — comm_axes_split on real ranks: for every
 * (T, P) whose product divides the world, each of this rank's four groups
 * has the size and rank layout.h promises, holds exactly the world ranks the
 * layout names in member order (an allgather of the world ranks), and
 * reduces over those ranks only (an allreduce of the world rank).
 *
 * MPI suites run without fork, so a failed assertion on one rank would
 * leave the others waiting in the next collective: every test runs all of
 * its collectives first, counting mismatches, and asserts at the end.
 */
#include <check.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/layout.h"
#include "soft_check.h"
#include "testutil.h"

static struct comm *world;
static int rank, size;

/* The world ranks of this rank's group on one axis, in the group's rank
 * order, as the layout says they are. */
static int expected_members(const struct comm_layout *l, const char *axis, int *out)
{
    const struct comm_coords me = comm_layout_coords(l, rank);
    int n = 0;
    for (int r = 0; r < l->world; r++) {
        const struct comm_coords c = comm_layout_coords(l, r);
        const int same_tp = c.tp == me.tp, same_pp = c.pp == me.pp, same_dp = c.dp == me.dp;
        if ((strcmp(axis, "tp") == 0 && same_pp && same_dp) ||
            (strcmp(axis, "dp") == 0 && same_tp && same_pp) ||
            (strcmp(axis, "pp") == 0 && same_tp && same_dp) ||
            (strcmp(axis, "model") == 0 && same_dp))
            out[n++] = r;
    }
    return n; /* ascending world rank is the member order on every axis */
}

/* One axis's group: size, rank, members, and a sum over exactly them. */
static void check_group(const struct comm_layout *l, struct comm *g, const char *axis,
                        int want_rank)
{
    int want[64], got[64];
    const int n = expected_members(l, axis, want);
    CHECK(g != NULL, "T=%d P=%d %s: no comm", l->tp, l->pp, axis);
    if (!g)
        return;
    CHECK(comm_size(g) == n, "T=%d P=%d %s: size %d, expected %d", l->tp, l->pp, axis, comm_size(g),
          n);
    CHECK(comm_rank(g) == want_rank, "T=%d P=%d %s: rank %d, expected %d", l->tp, l->pp, axis,
          comm_rank(g), want_rank);
    CHECK(want[want_rank] == rank, "T=%d P=%d %s: member %d is %d, not this rank %d", l->tp, l->pp,
          axis, want_rank, want[want_rank], rank);
    if (comm_size(g) != n)
        return; /* the collectives below would disagree on sizes */
    const int mine = rank;
    zt_status s = comm_allgather(g, &mine, got, 1, ZT_I32);
    CHECK(s == ZT_OK, "%s allgather: %s", axis, zt_error_message());
    for (int i = 0; s == ZT_OK && i < n; i++)
        CHECK(got[i] == want[i], "T=%d P=%d %s: member %d is world rank %d, expected %d", l->tp,
              l->pp, axis, i, got[i], want[i]);
    long long sum = rank, want_sum = 0;
    for (int i = 0; i < n; i++)
        want_sum += want[i];
    s = comm_allreduce(g, &sum, 1, ZT_I64, COMM_OP_SUM);
    CHECK(s == ZT_OK, "%s allreduce: %s", axis, zt_error_message());
    CHECK(sum == want_sum, "T=%d P=%d %s: sum of world ranks %lld, expected %lld", l->tp, l->pp,
          axis, sum, want_sum);
}

START_TEST(test_axes_of_every_grid)
{
    int grids = 0;
    bad = 0;
    for (int tp = 1; tp <= size; tp++)
        for (int pp = 1; tp * pp <= size; pp++) {
            if (size % (tp * pp) != 0)
                continue;
            struct comm_layout l;
            ck_assert_int_eq(comm_layout_make(size, tp, pp, &l), ZT_OK);
            struct comm_axes a;
            zt_status s = comm_axes_split(world, &l, &a);
            CHECK(s == ZT_OK, "T=%d P=%d: %s", tp, pp, zt_error_message());
            if (s != ZT_OK)
                continue; /* every rank got the same status */
            const struct comm_coords c = comm_layout_coords(&l, rank);
            check_group(&l, a.tp, "tp", c.tp);
            check_group(&l, a.pp, "pp", c.pp);
            check_group(&l, a.dp, "dp", c.dp);
            check_group(&l, a.model, "model", c.tp + tp * c.pp);
            comm_axes_destroy(&a);
            CHECK(!a.tp && !a.pp && !a.dp && !a.model, "T=%d P=%d: destroy left members", tp, pp);
            grids++;
        }
    ASSERT_NO_BAD();
    /* 4 ranks: (T, P) in 1x1 1x2 1x4 2x1 2x2 4x1; 8 ranks: 10 grids */
    ck_assert_int_eq(grids, size == 4 ? 6 : size == 8 ? 10 : grids);
}
END_TEST

/* A layout of another world is refused before any collective, leaving
 * nothing to destroy; destroying nothing is fine. */
START_TEST(test_split_refuses_another_world)
{
    struct comm_layout l;
    ck_assert_int_eq(comm_layout_make(2 * size, 2, 1, &l), ZT_OK);
    struct comm_axes a;
    memset(&a, 0xab, sizeof a);
    ck_assert_int_eq(comm_axes_split(world, &l, &a), ZT_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(zt_error_message(), "layout's world"));
    ck_assert(!a.tp && !a.pp && !a.dp && !a.model);
    comm_axes_destroy(&a);
    comm_axes_destroy(NULL);
    ck_assert_int_eq(comm_barrier(world), ZT_OK);
}
END_TEST

static Suite *layout_mpi_suite(void)
{
    Suite *s = suite_create("layout_mpi");
    TCase *tc = testutil_tcase(s, "axes", 60);
    tcase_add_test(tc, test_axes_of_every_grid);
    tcase_add_test(tc, test_split_refuses_another_world);
    return s;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct comm_config cfg = {.backend = "mpi"};
    if (comm_create(&cfg, &world) != ZT_OK) {
        fprintf(stderr, "comm_create: %s\n", zt_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (size > 64) {
        fprintf(stderr, "test_layout_mpi: at most 64 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int rc = testutil_run_suite(layout_mpi_suite(), 1);
    comm_destroy(world);
    MPI_Finalize();
    return rc;
}
