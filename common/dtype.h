/* common/dtype.h — element types of buffers that cross module boundaries. */
#ifndef ZT_DTYPE_H
#define ZT_DTYPE_H

#include <stddef.h>

enum zt_dtype { ZT_F32, ZT_F64, ZT_BF16, ZT_F16, ZT_I32, ZT_I64, ZT_U8 };

/* Size of one element in bytes. */
static inline size_t zt_dtype_size(enum zt_dtype t)
{
    switch (t) {
    case ZT_F64:
    case ZT_I64:
        return 8;
    case ZT_F32:
    case ZT_I32:
        return 4;
    case ZT_BF16:
    case ZT_F16:
        return 2;
    case ZT_U8:
        return 1;
    }
    return 0;
}

/* The name of a storage precision as configs, checkpoints and exports
 * spell it: "fp32", "bf16" or "fp16"; NULL for a dtype that is not one. */
const char *zt_precision_name(enum zt_dtype t);

/* 1 when `name` is one of those names, with its dtype in *out (when out is
 * not NULL); 0 otherwise. */
int zt_precision_from_name(const char *name, enum zt_dtype *out);

#endif
