/* comm/comm_choice.c — the rule behind "comm.backend: auto".
 *
 * Kept apart from comm.c's collective machinery so that the rule itself is
 * a pure function a test can walk through without MPI, NCCL or a GPU, and
 * so that the run can log the same sentence the decision was made by.
 *
 * Why these conditions: NCCL reads device memory directly and is the fast
 * path on GPUs, but it needs a library in the binary and refuses two ranks
 * of one communicator on one device. MPI (as built here) reads host memory
 * only, so on a GPU it needs the device buffers copied to the host and back
 * around each collective: slower, but it works wherever ranks run. On the
 * CPU the buffers are host memory already and MPI is the only backend.
 */
#include "comm.h"

#include <stdio.h>
#include <string.h>

zt_status comm_backend_auto(const char *device, int nccl_built, int ranks_share_gpu,
                            struct comm_backend_choice *out)
{
    if (!out)
        return zt_error_set(ZT_ERR_USAGE, "comm_backend_auto: NULL argument");
    if (!device || (strcmp(device, "cpu") != 0 && strcmp(device, "cuda") != 0))
        return zt_error_set(ZT_ERR_USAGE, "comm_backend_auto: device '%s' (cpu or cuda)",
                            device ? device : "(null)");
    struct comm_backend_choice c = {.backend = "mpi"};
    if (strcmp(device, "cpu") == 0) {
        snprintf(c.reason, sizeof c.reason, "mpi: device is cpu, so the buffers are host memory");
    } else if (!nccl_built) {
        c.host_staging = 1;
        snprintf(c.reason, sizeof c.reason,
                 "mpi with host staging: device is cuda, but this build has no NCCL");
    } else if (ranks_share_gpu) {
        c.host_staging = 1;
        snprintf(c.reason, sizeof c.reason,
                 "mpi with host staging: device is cuda, but ranks share a GPU (more ranks on a "
                 "node than visible GPUs), which NCCL cannot drive");
    } else {
        c.backend = "nccl";
        snprintf(c.reason, sizeof c.reason,
                 "nccl: device is cuda, NCCL is built and every rank has a GPU of its own");
    }
    *out = c;
    return ZT_OK;
}
