/* tests/testutil.c — see testutil.h. */
#include "testutil.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int testutil_run_suite(Suite *s, int is_mpi)
{
    int rank = 0, failed;
    if (is_mpi)
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    SRunner *sr = srunner_create(s);
    if (is_mpi)
        srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, rank == 0 ? CK_NORMAL : CK_SILENT);
    failed = srunner_ntests_failed(sr);
    if (rank != 0 && failed)
        srunner_print(sr, CK_NORMAL); /* failures only a non-zero rank saw */
    srunner_free(sr);
    if (is_mpi) {
        int total = 0;
        MPI_Allreduce(&failed, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        failed = total;
    }
    return failed ? 1 : 0;
}

static char *slot(void)
{
    static char bufs[8][4096];
    static int next;
    return bufs[next++ % 8];
}

const char *testutil_source_path(const char *rel)
{
    const char *root = getenv("ZT_SOURCE_DIR");
    char *b = slot();
    snprintf(b, 4096, "%s/%s", root ? root : ".", rel);
    return b;
}

const char *testutil_tmpdir(const char *tag)
{
    const char *t = getenv("TMPDIR");
    char *b = slot();
    snprintf(b, 4096, "%s/zt-%s-XXXXXX", t ? t : "/tmp", tag);
    if (!mkdtemp(b)) {
        perror("mkdtemp");
        abort();
    }
    return b;
}
