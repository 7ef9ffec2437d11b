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

#endif
