/* worker/cpu/fp8.c — the fp8 quantisation ops: common/fp8.h's plain C, so
 * the CPU backend's codes are the codec's bit for bit. The amax is taken
 * before the scaled encode in the same call, as a GPU cast kernel fuses
 * the two. */
#include "worker/cpu/ops_cpu_impl.h"

zt_status cpu_fp8_quantize(uint8_t *q, float *amax, const float *x, size_t n, float scale,
                           enum fp8_format f)
{
    *amax = fp8_amax(x, n);
    fp8_encode_scaled(q, x, n, scale, f);
    return ZT_OK;
}

zt_status cpu_fp8_dequantize(float *x, const uint8_t *q, size_t n, float scale_inv,
                             enum fp8_format f)
{
    fp8_decode_scaled(x, q, n, scale_inv, f);
    return ZT_OK;
}
