/* tests/test_comm_choice.c — the rule behind "comm.backend: auto"
 * (comm_backend_auto in comm/comm.h).
 *
 * The rule is a pure function of three inputs, so every combination is a
 * row here with the backend, the staging flag and the exact line the run
 * logs. comm_create's use of it (the inputs agreed over the ranks) is
 * tested in test_comm.c.
 */
#include <check.h>
#include <string.h>

#include "comm/comm.h"
#include "testutil.h"

START_TEST(every_combination_of_inputs)
{
    static const struct {
        const char *device;
        int nccl_built, shared;
        const char *backend;
        int staging;
        const char *reason;
    } rows[] = {
        {"cuda", 1, 0, "nccl", 0,
         "nccl: device is cuda, NCCL is built and every rank has a GPU of its own"},
        {"cuda", 1, 1, "mpi", 1,
         "mpi with host staging: device is cuda, but ranks share a GPU (more ranks on a node "
         "than visible GPUs), which NCCL cannot drive"},
        {"cuda", 0, 0, "mpi", 1,
         "mpi with host staging: device is cuda, but this build has no NCCL"},
        {"cuda", 0, 1, "mpi", 1,
         "mpi with host staging: device is cuda, but this build has no NCCL"},
        {"cpu", 1, 0, "mpi", 0, "mpi: device is cpu, so the buffers are host memory"},
        {"cpu", 1, 1, "mpi", 0, "mpi: device is cpu, so the buffers are host memory"},
        {"cpu", 0, 0, "mpi", 0, "mpi: device is cpu, so the buffers are host memory"},
        {"cpu", 0, 1, "mpi", 0, "mpi: device is cpu, so the buffers are host memory"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        struct comm_backend_choice c;
        ck_assert_int_eq(comm_backend_auto(rows[i].device, rows[i].nccl_built, rows[i].shared, &c),
                         ZT_OK);
        ck_assert_str_eq(c.backend, rows[i].backend);
        ck_assert_int_eq(c.host_staging, rows[i].staging);
        ck_assert_str_eq(c.reason, rows[i].reason);
        ck_assert_ptr_null(strchr(c.reason, '\n'));
    }
}
END_TEST

/* "auto" is resolved before the rule; anything but cpu or cuda is a bug. */
START_TEST(device_must_be_resolved)
{
    struct comm_backend_choice c;
    memset(&c, 0x5a, sizeof c);
    ck_assert_int_eq(comm_backend_auto("auto", 1, 0, &c), ZT_ERR_USAGE);
    ck_assert_str_eq(zt_error_message(), "comm_backend_auto: device 'auto' (cpu or cuda)");
    ck_assert_int_eq(comm_backend_auto(NULL, 1, 0, &c), ZT_ERR_USAGE);
    ck_assert_str_eq(zt_error_message(), "comm_backend_auto: device '(null)' (cpu or cuda)");
    ck_assert_int_eq(comm_backend_auto("CUDA", 1, 0, &c), ZT_ERR_USAGE);
    ck_assert_int_eq(c.host_staging, 0x5a5a5a5a); /* untouched on failure */
    ck_assert_int_eq(comm_backend_auto("cpu", 1, 0, NULL), ZT_ERR_USAGE);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("comm_choice");
    TCase *tc = testutil_tcase(s, "auto", 30);
    tcase_add_test(tc, every_combination_of_inputs);
    tcase_add_test(tc, device_must_be_resolved);
    return testutil_run_suite(s, 0);
}
