/* common/dtype.c — see dtype.h. One table names the storage precisions,
 * read in both directions. */
#include "dtype.h"

#include <string.h>

static const struct {
    enum zt_dtype dtype;
    const char *name;
} precisions[] = {{ZT_F32, "fp32"}, {ZT_BF16, "bf16"}, {ZT_F16, "fp16"}};

#define N_PRECISIONS (sizeof precisions / sizeof precisions[0])

const char *zt_precision_name(enum zt_dtype t)
{
    for (size_t k = 0; k < N_PRECISIONS; k++)
        if (precisions[k].dtype == t)
            return precisions[k].name;
    return NULL;
}

int zt_precision_from_name(const char *name, enum zt_dtype *out)
{
    for (size_t k = 0; k < N_PRECISIONS; k++)
        if (strcmp(name, precisions[k].name) == 0) {
            if (out)
                *out = precisions[k].dtype;
            return 1;
        }
    return 0;
}
