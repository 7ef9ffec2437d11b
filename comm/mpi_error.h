/* comm/mpi_error.h — MPI's return codes as zt_status; for comm/ only.
 *
 * Every file of comm/ that calls MPI translates a failed call here, so that
 * the message names the call and MPI's own words for the failure. The
 * function lives in comm_world.c, the bottom of the module.
 */
#ifndef ZT_COMM_MPI_ERROR_H
#define ZT_COMM_MPI_ERROR_H

#include <mpi.h>

#include "../common/status.h"

/* Translates a failed MPI return code into ZT_ERR_COMM with the call's name
 * (the text of `call` up to its first parenthesis) and MPI's error string. */
zt_status comm_mpi_error(int rc, const char *call);

/* The one translation of MPI return codes: evaluates an MPI call and returns
 * ZT_ERR_COMM from the enclosing function when it fails. */
#define COMM_MPI_TRY(call)                                                                         \
    do {                                                                                           \
        int comm_mpi_rc_ = (call);                                                                 \
        if (comm_mpi_rc_ != MPI_SUCCESS)                                                           \
            return comm_mpi_error(comm_mpi_rc_, #call);                                            \
    } while (0)

#endif
