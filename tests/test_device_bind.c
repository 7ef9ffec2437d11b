/* tests/test_device_bind.c — a rank's GPU from its node-local rank
 * (worker/device_bind.h).
 *
 * The binding is a pure function of the launcher variables, the
 * shared-memory split and the device count, so every case is a table row
 * here: which source wins, the round-robin ordinal and the sharing flag,
 * and each kind of bad value with the exact message a user would see. One
 * test reads the real environment through device_bind_env_read. No GPU and
 * no MPI are needed.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "worker/device_bind.h"

static const struct device_bind_split no_split = {.rank = 0, .size = 1};

/* Open MPI's variables, as mpirun sets them. */
static struct device_bind_env ompi(const char *rank, const char *size)
{
    return (struct device_bind_env){.ompi_local_rank = rank, .ompi_local_size = size};
}

START_TEST(ordinal_is_local_rank_modulo_devices)
{
    static const struct {
        const char *rank, *size;
        int devices, ordinal, shared;
    } cases[] = {
        {"0", "1", 1, 0, 0}, {"3", "4", 4, 3, 0}, {"3", "4", 8, 3, 0}, /* more GPUs than ranks */
        {"5", "8", 2, 1, 1}, {"4", "8", 2, 0, 1}, {"2", "3", 2, 0, 1}, /* ranks share GPUs */
        {"7", "8", 8, 7, 0}, {"0", "2", 1, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct device_bind_env env = ompi(cases[i].rank, cases[i].size);
        struct device_binding b;
        ck_assert_msg(device_bind_choose(&env, no_split, cases[i].devices, &b) == ZT_OK, "%s",
                      zt_error_message());
        ck_assert_int_eq(b.ordinal, cases[i].ordinal);
        ck_assert_int_eq(b.shared, cases[i].shared);
        ck_assert_int_eq(b.local_rank, atoi(cases[i].rank));
        ck_assert_int_eq(b.local_size, atoi(cases[i].size));
        ck_assert_int_eq(b.device_count, cases[i].devices);
        ck_assert_str_eq(b.rank_from, "OMPI_COMM_WORLD_LOCAL_RANK");
        ck_assert_str_eq(b.size_from, "OMPI_COMM_WORLD_LOCAL_SIZE");
    }
}
END_TEST

/* Open MPI's variables, then Slurm's, then the split; rank and size each
 * by that order on their own. */
START_TEST(sources_are_taken_in_order)
{
    const struct device_bind_split split = {.rank = 2, .size = 3};
    struct device_binding b;

    struct device_bind_env all = {.ompi_local_rank = "1",
                                  .ompi_local_size = "4",
                                  .slurm_localid = "0",
                                  .slurm_ntasks_per_node = "2"};
    ck_assert_int_eq(device_bind_choose(&all, split, 4, &b), ZT_OK);
    ck_assert_int_eq(b.local_rank, 1);
    ck_assert_int_eq(b.local_size, 4);
    ck_assert_str_eq(b.rank_from, "OMPI_COMM_WORLD_LOCAL_RANK");

    struct device_bind_env slurm = {.slurm_localid = "1", .slurm_ntasks_per_node = "2"};
    ck_assert_int_eq(device_bind_choose(&slurm, split, 4, &b), ZT_OK);
    ck_assert_int_eq(b.local_rank, 1);
    ck_assert_int_eq(b.local_size, 2);
    ck_assert_str_eq(b.rank_from, "SLURM_LOCALID");
    ck_assert_str_eq(b.size_from, "SLURM_NTASKS_PER_NODE");

    struct device_bind_env none = {0};
    ck_assert_int_eq(device_bind_choose(&none, split, 2, &b), ZT_OK);
    ck_assert_int_eq(b.local_rank, 2);
    ck_assert_int_eq(b.local_size, 3);
    ck_assert_int_eq(b.ordinal, 0);
    ck_assert_int_eq(b.shared, 1);
    ck_assert_str_eq(b.rank_from, "MPI_COMM_TYPE_SHARED");
    ck_assert_str_eq(b.size_from, "MPI_COMM_TYPE_SHARED");

    /* srun without --ntasks-per-node: the rank from Slurm, the size from the split */
    struct device_bind_env rank_only = {.slurm_localid = "2"};
    ck_assert_int_eq(device_bind_choose(&rank_only, split, 4, &b), ZT_OK);
    ck_assert_int_eq(b.ordinal, 2);
    ck_assert_str_eq(b.rank_from, "SLURM_LOCALID");
    ck_assert_str_eq(b.size_from, "MPI_COMM_TYPE_SHARED");
}
END_TEST

/* Every refusal: its status and its whole message. */
START_TEST(bad_values_name_the_variable)
{
    static const struct {
        struct device_bind_env env;
        struct device_bind_split split;
        int devices;
        zt_status status;
        const char *message;
    } cases[] = {
        {{.ompi_local_rank = "abc", .ompi_local_size = "2"},
         {0, 1},
         2,
         ZT_ERR_CONFIG,
         "OMPI_COMM_WORLD_LOCAL_RANK='abc': expected a non-negative integer"},
        {{.ompi_local_rank = "", .ompi_local_size = "2"},
         {0, 1},
         2,
         ZT_ERR_CONFIG,
         "OMPI_COMM_WORLD_LOCAL_RANK='': expected a non-negative integer"},
        {{.ompi_local_rank = "1 ", .ompi_local_size = "2"},
         {0, 1},
         2,
         ZT_ERR_CONFIG,
         "OMPI_COMM_WORLD_LOCAL_RANK='1 ': expected a non-negative integer"},
        {{.ompi_local_rank = "-1", .ompi_local_size = "2"},
         {0, 1},
         2,
         ZT_ERR_CONFIG,
         "OMPI_COMM_WORLD_LOCAL_RANK='-1': must be >= 0"},
        {{.slurm_localid = "$SLURM_LOCALID"},
         {0, 1},
         2,
         ZT_ERR_CONFIG,
         "SLURM_LOCALID='$SLURM_LOCALID': expected a non-negative integer"},
        {{.slurm_localid = "0", .slurm_ntasks_per_node = "2(x3)"},
         {0, 1},
         2,
         ZT_ERR_CONFIG,
         "SLURM_NTASKS_PER_NODE='2(x3)': expected a non-negative integer"},
        {{.slurm_localid = "0", .slurm_ntasks_per_node = "0"},
         {0, 1},
         2,
         ZT_ERR_CONFIG,
         "SLURM_NTASKS_PER_NODE='0': must be >= 1"},
        {{.ompi_local_rank = "99999999999", .ompi_local_size = "2"},
         {0, 1},
         2,
         ZT_ERR_CONFIG,
         "OMPI_COMM_WORLD_LOCAL_RANK='99999999999': out of range (at most 2147483647)"},
        {{.ompi_local_rank = "4", .ompi_local_size = "4"},
         {0, 1},
         4,
         ZT_ERR_CONFIG,
         "OMPI_COMM_WORLD_LOCAL_RANK=4 is not below OMPI_COMM_WORLD_LOCAL_SIZE=4: a node-local "
         "rank must be less than the number of ranks on the node"},
        {{.slurm_localid = "3"},
         {1, 2},
         4,
         ZT_ERR_CONFIG,
         "SLURM_LOCALID=3 is not below MPI_COMM_TYPE_SHARED=2: a node-local rank must be less "
         "than the number of ranks on the node"},
        {{.ompi_local_rank = "0", .ompi_local_size = "2", .cuda_visible_devices = ""},
         {0, 1},
         0,
         ZT_ERR_DEVICE,
         "no CUDA device is visible to local rank 0 (CUDA_VISIBLE_DEVICES=)"},
        {{0},
         {1, 2},
         0,
         ZT_ERR_DEVICE,
         "no CUDA device is visible to local rank 1 (CUDA_VISIBLE_DEVICES=(unset))"},
        {{0},
         {2, 2},
         1,
         ZT_ERR_USAGE,
         "device binding: the MPI_COMM_TYPE_SHARED split gives rank 2 of 2 (need 0 <= rank < "
         "size)"},
        {{0},
         {0, 0},
         1,
         ZT_ERR_USAGE,
         "device binding: the MPI_COMM_TYPE_SHARED split gives rank 0 of 0 (need 0 <= rank < "
         "size)"},
        {{0}, {0, 1}, -1, ZT_ERR_USAGE, "device_bind_choose: device count -1 < 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct device_binding b;
        memset(&b, 0x5a, sizeof b);
        zt_status st = device_bind_choose(&cases[i].env, cases[i].split, cases[i].devices, &b);
        ck_assert_msg(st == cases[i].status, "case %zu: status %d, want %d (%s)", i, (int)st,
                      (int)cases[i].status, zt_error_message());
        ck_assert_str_eq(zt_error_message(), cases[i].message);
        ck_assert_int_eq(b.ordinal, 0x5a5a5a5a); /* untouched on failure */
    }
}
END_TEST

/* The split is the caller's and is checked only when it is used: a launch
 * that exports both variables needs none. */
START_TEST(unused_split_is_not_checked)
{
    struct device_bind_env env = ompi("1", "2");
    struct device_binding b;
    const struct device_bind_split junk = {.rank = -7, .size = 0};
    ck_assert_int_eq(device_bind_choose(&env, junk, 2, &b), ZT_OK);
    ck_assert_int_eq(b.ordinal, 1);
    ck_assert_int_eq(device_bind_choose(NULL, junk, 2, &b), ZT_ERR_USAGE);
    ck_assert_int_eq(device_bind_choose(&env, junk, 2, NULL), ZT_ERR_USAGE);
}
END_TEST

START_TEST(describe_names_sources_and_sharing)
{
    struct device_bind_env env = {
        .ompi_local_rank = "3", .ompi_local_size = "5", .cuda_visible_devices = "4,5"};
    struct device_binding b;
    char line[256];
    ck_assert_int_eq(device_bind_choose(&env, no_split, 2, &b), ZT_OK);
    device_bind_describe(&b, line, sizeof line);
    ck_assert_str_eq(line, "local rank 3 of 5 (OMPI_COMM_WORLD_LOCAL_RANK) -> visible device 1 "
                           "of 2 (CUDA_VISIBLE_DEVICES=4,5), shared by up to 3 ranks");
    env = (struct device_bind_env){.slurm_localid = "1", .slurm_ntasks_per_node = "2"};
    ck_assert_int_eq(device_bind_choose(&env, no_split, 2, &b), ZT_OK);
    device_bind_describe(&b, line, sizeof line);
    ck_assert_str_eq(line, "local rank 1 of 2 (SLURM_LOCALID) -> visible device 1 of 2 "
                           "(CUDA_VISIBLE_DEVICES=(unset))");
    char tiny[8];
    device_bind_describe(&b, tiny, sizeof tiny);
    ck_assert_str_eq(tiny, "local r");
}
END_TEST

/* A long CUDA_VISIBLE_DEVICES (UUIDs) is kept for messages, cut with "...". */
START_TEST(long_visible_list_is_cut)
{
    char uuids[400];
    size_t used = 0;
    for (int i = 0; i < 8; i++)
        used += (size_t)snprintf(uuids + used, sizeof uuids - used,
                                 "%sGPU-0000000%d-1111-2222-3333-444444444444", i ? "," : "", i);
    struct device_bind_env env = {
        .ompi_local_rank = "0", .ompi_local_size = "1", .cuda_visible_devices = uuids};
    struct device_binding b;
    ck_assert_int_eq(device_bind_choose(&env, no_split, 8, &b), ZT_OK);
    ck_assert_uint_eq(strlen(b.visible), sizeof b.visible - 1);
    ck_assert_int_eq(strncmp(b.visible, uuids, sizeof b.visible - 4), 0);
    ck_assert_str_eq(b.visible + sizeof b.visible - 4, "...");
}
END_TEST

/* device_bind_env_read takes exactly the five variables. */
START_TEST(env_read_takes_the_launcher_variables)
{
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "3", 1);
    setenv("SLURM_LOCALID", "2", 1);
    unsetenv("SLURM_NTASKS_PER_NODE");
    setenv("CUDA_VISIBLE_DEVICES", "2,0", 1);
    struct device_bind_env env;
    device_bind_env_read(&env);
    ck_assert_str_eq(env.ompi_local_rank, "1");
    ck_assert_str_eq(env.ompi_local_size, "3");
    ck_assert_str_eq(env.slurm_localid, "2");
    ck_assert_ptr_null(env.slurm_ntasks_per_node);
    ck_assert_str_eq(env.cuda_visible_devices, "2,0");
    struct device_binding b;
    ck_assert_int_eq(device_bind_choose(&env, no_split, 2, &b), ZT_OK);
    ck_assert_int_eq(b.ordinal, 1);
    ck_assert_str_eq(b.visible, "2,0");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("device_bind");
    TCase *tc = testutil_tcase(s, "bind", 30);
    tcase_add_test(tc, ordinal_is_local_rank_modulo_devices);
    tcase_add_test(tc, sources_are_taken_in_order);
    tcase_add_test(tc, bad_values_name_the_variable);
    tcase_add_test(tc, unused_split_is_not_checked);
    tcase_add_test(tc, describe_names_sources_and_sharing);
    tcase_add_test(tc, long_visible_list_is_cut);
    tcase_add_test(tc, env_read_takes_the_launcher_variables);
    return testutil_run_suite(s, 0);
}
