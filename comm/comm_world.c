/* comm/comm_world.c — the process world beneath every group (comm.h).
 *
 * The coordinator starts and stops the runtime, asks for its rank, counts
 * the ranks of its node and agrees on the outcome of the phases that run
 * before any `struct comm` exists (loading the configuration, creating the
 * first comm), and aborts the job when peers may be blocked. These calls
 * work on MPI_COMM_WORLD directly and keep its default error handler
 * (errors are fatal there, as before any comm exists nothing could recover
 * from them); a code that does come back goes through comm_mpi_error like
 * every other MPI result. comm_mpi_error, the one translation of MPI's
 * codes (comm_impl.h), lives here, at the bottom of the module.
 */
#include "comm_impl.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

zt_status comm_mpi_error(int rc, const char *call)
{
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        len = 0;
    msg[len] = '\0';
    size_t name_len = strcspn(call, "(");
    return zt_error_set(ZT_ERR_COMM, "comm: %.*s failed: %s (code %d)", (int)name_len, call,
                        len ? msg : "unknown MPI error", rc);
}

zt_status comm_runtime_init(int *argc, char ***argv)
{
    COMM_MPI_TRY(MPI_Init(argc, argv));
    return ZT_OK;
}

void comm_runtime_finalize(void)
{
    MPI_Finalize();
}

int comm_world_rank(void)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

int comm_world_size(void)
{
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size;
}

void comm_local_place(int *rank, int *size)
{
    MPI_Comm local;
    *rank = 0;
    *size = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) ==
        MPI_SUCCESS) {
        MPI_Comm_rank(local, rank);
        MPI_Comm_size(local, size);
        MPI_Comm_free(&local);
    }
}

int comm_local_ranks(void)
{
    int rank, size;
    comm_local_place(&rank, &size);
    return size;
}

zt_status comm_agree_over(MPI_Comm mpi, int rank, zt_status local, int *print_here)
{
    if ((int)local < 0 || local >= ZT_STATUS_COUNT)
        local = ZT_ERR_INTERNAL;
    /* One MPI_MAX over two ints: the severity (exit code first, then the
     * position in the status list) and the negated rank of a failing rank,
     * whose maximum is the lowest failing rank. */
    int mine[2] = {zt_status_exit_code(local) * ZT_STATUS_COUNT + (int)local,
                   local == ZT_OK ? -INT_MAX : -rank};
    int all[2];
    int rc = MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MAX, mpi);
    if (rc != MPI_SUCCESS) {
        *print_here = 1;
        return comm_mpi_error(rc, "MPI_Allreduce(world status agreement)");
    }
    *print_here = local != ZT_OK && rank == -all[1];
    return (zt_status)(all[0] % ZT_STATUS_COUNT);
}

zt_status comm_world_agree(zt_status local, int *print_here)
{
    return comm_agree_over(MPI_COMM_WORLD, comm_world_rank(), local, print_here);
}

void comm_world_abort(int code)
{
    MPI_Abort(MPI_COMM_WORLD, code);
    abort(); /* not reached: MPI_Abort ends the job */
}
