/* tests/test_layout.c — the rank grid of comm/layout.h without MPI: which
 * layouts are made and which refused (with messages naming the numbers),
 * coordinates and ranks as inverses in Megatron's order over every grid of
 * up to 24 ranks, and the printed grid's exact text for several shapes.
 * tests/test_layout_mpi.c splits the axes on real ranks.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/layout.h"
#include "testutil.h"

/* The printed grid as a string (caller frees). */
static char *printed(const struct comm_layout *l)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    comm_layout_print(l, f);
    ck_assert_int_eq(fclose(f), 0);
    return text;
}

static struct comm_layout make(int world, int tp, int pp)
{
    struct comm_layout l;
    zt_status s = comm_layout_make(world, tp, pp, &l);
    ck_assert_msg(s == ZT_OK, "W=%d T=%d P=%d: %s", world, tp, pp, zt_error_message());
    return l;
}

static void assert_printed(int world, int tp, int pp, const char *want)
{
    struct comm_layout l = make(world, tp, pp);
    char *got = printed(&l);
    ck_assert_msg(strcmp(got, want) == 0, "W=%d T=%d P=%d printed:\n%s\nwanted:\n%s", world, tp, pp,
                  got, want);
    free(got);
}

START_TEST(test_make_gives_the_data_parallel_size)
{
    static const struct {
        int world, tp, pp, dp;
    } cases[] = {{1, 1, 1, 1}, {8, 1, 1, 8},  {8, 2, 2, 2}, {8, 8, 1, 1},
                 {8, 1, 8, 1}, {12, 2, 3, 2}, {6, 3, 2, 1}, {24, 4, 2, 3}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct comm_layout l = make(cases[k].world, cases[k].tp, cases[k].pp);
        ck_assert_int_eq(l.world, cases[k].world);
        ck_assert_int_eq(l.tp, cases[k].tp);
        ck_assert_int_eq(l.pp, cases[k].pp);
        ck_assert_int_eq(l.dp, cases[k].dp);
    }
}
END_TEST

START_TEST(test_make_refuses_bad_sizes_naming_them)
{
    static const struct {
        int world, tp, pp;
        const char *message;
    } cases[] = {
        {8, 0, 1,
         "layout: world size 8, tensor-parallel size 0 and pipeline stages 1 must each be at "
         "least 1"},
        {8, 2, -1,
         "layout: world size 8, tensor-parallel size 2 and pipeline stages -1 must each be at "
         "least 1"},
        {0, 1, 1,
         "layout: world size 0, tensor-parallel size 1 and pipeline stages 1 must each be at "
         "least 1"},
        {6, 4, 1,
         "layout: world size 6 is not a multiple of tensor-parallel size 4 x pipeline stages 1 = "
         "4 ranks per model replica"},
        {4, 2, 4,
         "layout: world size 4 is not a multiple of tensor-parallel size 2 x pipeline stages 4 = "
         "8 ranks per model replica"},
        {12, 5, 1, "world size 12 is not a multiple of tensor-parallel size 5"},
        /* the product is not computed in int */
        {1 << 30, 1 << 16, 1 << 16,
         "world size 1073741824 is not a multiple of tensor-parallel size 65536 x pipeline "
         "stages 65536 = 4294967296 ranks per model replica"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct comm_layout l = {1, 1, 1, 1};
        zt_status s = comm_layout_make(cases[k].world, cases[k].tp, cases[k].pp, &l);
        ck_assert_msg(s == ZT_ERR_CONFIG, "case %zu: %s", k, zt_status_str(s));
        ck_assert_msg(strstr(zt_error_message(), cases[k].message), "case %zu: \"%s\" lacks \"%s\"",
                      k, zt_error_message(), cases[k].message);
        ck_assert_int_eq(l.world, 0);
        ck_assert_int_eq(l.tp, 0);
        ck_assert_int_eq(l.pp, 0);
        ck_assert_int_eq(l.dp, 0);
    }
}
END_TEST

/* For every world up to 24 and every T, P with T * P dividing it: each
 * rank's coordinates are in range, follow rank = tp + T (dp + D pp), and
 * map back to the rank; so every cell of the grid has exactly one rank. */
START_TEST(test_coords_and_rank_round_trip_on_every_grid)
{
    int grids = 0;
    for (int world = 1; world <= 24; world++)
        for (int tp = 1; tp <= world; tp++)
            for (int pp = 1; tp * pp <= world; pp++) {
                if (world % (tp * pp) != 0)
                    continue;
                struct comm_layout l = make(world, tp, pp);
                grids++;
                for (int r = 0; r < world; r++) {
                    struct comm_coords c = comm_layout_coords(&l, r);
                    if (c.tp < 0 || c.tp >= tp || c.pp < 0 || c.pp >= pp || c.dp < 0 ||
                        c.dp >= l.dp || c.tp + tp * (c.dp + l.dp * c.pp) != r ||
                        comm_layout_rank(&l, c) != r)
                        ck_abort_msg("W=%d T=%d P=%d rank %d: tp %d, pp %d, dp %d", world, tp, pp,
                                     r, c.tp, c.pp, c.dp);
                }
            }
    ck_assert_int_gt(grids, 100);
}
END_TEST

/* Tensor innermost, then data, then pipeline: the T ranks of a
 * tensor-parallel group are consecutive, and so is each stage. */
START_TEST(test_megatron_order)
{
    static const struct comm_coords want[8] = {{0, 0, 0}, {1, 0, 0}, {0, 0, 1}, {1, 0, 1},
                                               {0, 1, 0}, {1, 1, 0}, {0, 1, 1}, {1, 1, 1}};
    struct comm_layout l = make(8, 2, 2);
    for (int r = 0; r < 8; r++) {
        struct comm_coords c = comm_layout_coords(&l, r);
        ck_assert_msg(c.tp == want[r].tp && c.pp == want[r].pp && c.dp == want[r].dp,
                      "rank %d: tp %d, pp %d, dp %d", r, c.tp, c.pp, c.dp);
    }
    struct comm_layout dp_only = make(5, 1, 1);
    for (int r = 0; r < 5; r++)
        ck_assert_int_eq(comm_layout_coords(&dp_only, r).dp, r);
}
END_TEST

START_TEST(test_print_three_axes)
{
    assert_printed(8, 2, 2,
                   "layout: world 8 = tensor 2 x pipeline 2 x data 2\n"
                   "  rank 0: tp 0, pp 0, dp 0\n"
                   "  rank 1: tp 1, pp 0, dp 0\n"
                   "  rank 2: tp 0, pp 0, dp 1\n"
                   "  rank 3: tp 1, pp 0, dp 1\n"
                   "  rank 4: tp 0, pp 1, dp 0\n"
                   "  rank 5: tp 1, pp 1, dp 0\n"
                   "  rank 6: tp 0, pp 1, dp 1\n"
                   "  rank 7: tp 1, pp 1, dp 1\n"
                   "  pipeline stage 0: ranks 0-3\n"
                   "  pipeline stage 1: ranks 4-7\n"
                   "  tensor-parallel group (pp 0, dp 0): ranks 0, 1\n"
                   "  tensor-parallel group (pp 0, dp 1): ranks 2, 3\n"
                   "  tensor-parallel group (pp 1, dp 0): ranks 4, 5\n"
                   "  tensor-parallel group (pp 1, dp 1): ranks 6, 7\n"
                   "  data-parallel group (tp 0, pp 0): ranks 0, 2\n"
                   "  data-parallel group (tp 1, pp 0): ranks 1, 3\n"
                   "  data-parallel group (tp 0, pp 1): ranks 4, 6\n"
                   "  data-parallel group (tp 1, pp 1): ranks 5, 7\n"
                   "  pipeline (tp 0, dp 0): ranks 0 -> 4\n"
                   "  pipeline (tp 1, dp 0): ranks 1 -> 5\n"
                   "  pipeline (tp 0, dp 1): ranks 2 -> 6\n"
                   "  pipeline (tp 1, dp 1): ranks 3 -> 7\n"
                   "  model replica (dp 0): ranks 0, 1, 4, 5\n"
                   "  model replica (dp 1): ranks 2, 3, 6, 7\n");
}
END_TEST

/* Plain data parallelism: only the one data-parallel group is listed. */
START_TEST(test_print_data_parallel_only)
{
    assert_printed(4, 1, 1,
                   "layout: world 4 = tensor 1 x pipeline 1 x data 4\n"
                   "  rank 0: tp 0, pp 0, dp 0\n"
                   "  rank 1: tp 0, pp 0, dp 1\n"
                   "  rank 2: tp 0, pp 0, dp 2\n"
                   "  rank 3: tp 0, pp 0, dp 3\n"
                   "  data-parallel group (tp 0, pp 0): ranks 0-3\n");
}
END_TEST

/* No data parallelism (D = 1): a three-stage pipeline of tensor-parallel
 * groups of 3, and single-rank stages. */
START_TEST(test_print_without_data_parallelism)
{
    assert_printed(6, 3, 2,
                   "layout: world 6 = tensor 3 x pipeline 2 x data 1\n"
                   "  rank 0: tp 0, pp 0, dp 0\n"
                   "  rank 1: tp 1, pp 0, dp 0\n"
                   "  rank 2: tp 2, pp 0, dp 0\n"
                   "  rank 3: tp 0, pp 1, dp 0\n"
                   "  rank 4: tp 1, pp 1, dp 0\n"
                   "  rank 5: tp 2, pp 1, dp 0\n"
                   "  pipeline stage 0: ranks 0-2\n"
                   "  pipeline stage 1: ranks 3-5\n"
                   "  tensor-parallel group (pp 0, dp 0): ranks 0-2\n"
                   "  tensor-parallel group (pp 1, dp 0): ranks 3-5\n"
                   "  pipeline (tp 0, dp 0): ranks 0 -> 3\n"
                   "  pipeline (tp 1, dp 0): ranks 1 -> 4\n"
                   "  pipeline (tp 2, dp 0): ranks 2 -> 5\n"
                   "  model replica (dp 0): ranks 0-5\n");
    assert_printed(3, 1, 3,
                   "layout: world 3 = tensor 1 x pipeline 3 x data 1\n"
                   "  rank 0: tp 0, pp 0, dp 0\n"
                   "  rank 1: tp 0, pp 1, dp 0\n"
                   "  rank 2: tp 0, pp 2, dp 0\n"
                   "  pipeline stage 0: rank 0\n"
                   "  pipeline stage 1: rank 1\n"
                   "  pipeline stage 2: rank 2\n"
                   "  pipeline (tp 0, dp 0): ranks 0 -> 1 -> 2\n"
                   "  model replica (dp 0): ranks 0-2\n");
}
END_TEST

/* Strided groups are listed rank by rank, runs within them compressed. */
START_TEST(test_print_lists_runs_and_strides)
{
    struct comm_layout l = make(16, 4, 1);
    char *text = printed(&l);
    ck_assert_ptr_nonnull(strstr(text, "  tensor-parallel group (pp 0, dp 3): ranks 12-15\n"));
    ck_assert_ptr_nonnull(strstr(text, "  data-parallel group (tp 2, pp 0): ranks 2, 6, 10, 14\n"));
    ck_assert_ptr_nonnull(strstr(text, "  model replica (dp 1): ranks 4-7\n"));
    ck_assert_ptr_null(strstr(text, "  pipeline"));
    ck_assert_int_eq(testutil_count(text, "\n"), 1 + 16 + 4 + 4 + 4);
    free(text);
}
END_TEST

static Suite *layout_suite(void)
{
    Suite *s = suite_create("layout");
    TCase *tc = testutil_tcase(s, "grid", 30);
    tcase_add_test(tc, test_make_gives_the_data_parallel_size);
    tcase_add_test(tc, test_make_refuses_bad_sizes_naming_them);
    tcase_add_test(tc, test_coords_and_rank_round_trip_on_every_grid);
    tcase_add_test(tc, test_megatron_order);
    tcase_add_test(tc, test_print_three_axes);
    tcase_add_test(tc, test_print_data_parallel_only);
    tcase_add_test(tc, test_print_without_data_parallelism);
    tcase_add_test(tc, test_print_lists_runs_and_strides);
    return s;
}

int main(void)
{
    return testutil_run_suite(layout_suite(), 0);
}
