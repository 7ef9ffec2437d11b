/* worker/cuda_module.c — the CUDA module's loader; see cuda_module.h. */
#include "cuda_module.h"

#include <unistd.h>

#include "../common/fp8.h"
#include "device_pool.h"
#include "optim_elementwise.h"
#include "quant_maps.h"

/* What the module calls of the executable that loads it and the rest of
 * zerotrain may not: named here, it is linked into every executable that
 * can load the module, whose load would otherwise fail on the missing
 * symbol (test_backend loads it in every CUDA build). Never called
 * through. */
void (*const cuda_module_imports[])(void) = {
    (void (*)(void))device_pool_create, (void (*)(void))device_pool_destroy,
    (void (*)(void))device_pool_alloc,  (void (*)(void))device_pool_free,
    (void (*)(void))device_pool_stats,  (void (*)(void))fp8_format_info,
    (void (*)(void))optim_consts_init,  (void (*)(void))zt_precision_name,
};
const float *const cuda_module_data_imports[] = {quant_dynamic_signed, quant_dynamic_unsigned};

int cuda_worker_table(const struct cuda_worker_table **out, char *why, size_t n)
{
    const void *table = NULL;
    if (zt_module_table(ZT_MODULE_CUDA, "zt_cuda_worker_table", sizeof **out, &table, why, n) < 0)
        return -1;
    *out = table;
    return 0;
}

int cuda_driver_present(void)
{
    return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/dxg", F_OK) == 0;
}
