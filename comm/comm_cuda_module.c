/* comm/comm_cuda_module.c — comm/'s table of the CUDA module; see
 * comm_impl.h. */
#include "../common/module.h"
#include "comm_impl.h"
#include "mpi_error.h"

/* What the module calls of the executable that loads it and the rest of
 * zerotrain may not (see common/module.h); never called through. */
void (*const comm_cuda_module_imports[])(void) = {(void (*)(void))comm_mpi_error};

int comm_cuda_table(const struct comm_cuda_table **out, char *why, size_t n)
{
    const void *table = NULL;
    if (zt_module_table(ZT_MODULE_CUDA_COMM, "zt_cuda_comm_table", sizeof **out, &table, why, n) <
        0)
        return -1;
    *out = table;
    return 0;
}
