/* worker/cpu/matmul.c — the linear layer out = inp @ weight^T + bias.
 *
 * All three products are single cpu_gemm calls (gemm.h) on the row-major
 * buffers as they lie (weight [OC, C] is read transposed in place, never
 * copied). The bias is fused by writing it into every output row first
 * and letting the product accumulate: the library would otherwise spend
 * the same pass zeroing out, so the bias costs no extra sweep over it.
 * The backward's dinp and dweight accumulate, which is exactly the
 * convention of worker/ops.h.
 */
#include "worker/cpu/ops_cpu_impl.h"

#include <string.h>

/* Columns per dbias task: the running sums stay in registers and L1 while
 * the rows stream past. */
enum { COL_BLOCK = 256 };

zt_status cpu_matmul_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                             const void *inp, const void *weight, const void *bias, int N, int C,
                             int OC)
{
    const size_t row = (size_t)OC * zt_dtype_size(t);
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int i = 0; i < N; i++)
            memcpy((char *)out + (size_t)i * row, bias, row);
    }
    return cpu_gemm_typed(self, t, t, 0, 1, N, OC, C, 1.0f, inp, C, weight, C, bias != NULL, out,
                          OC);
}

/* dbias[o0..o1) += column sums of dout, each sum added once. */
static void bias_block(float *dbias, enum zt_dtype t, const void *dout, int N, int OC, int o0,
                       int o1)
{
    float acc[COL_BLOCK] = {0}, tmp[COL_BLOCK];
    int n = o1 - o0;
    for (int i = 0; i < N; i++) {
        const float *d = cpu_widen(t, dout, (size_t)i * OC + o0, (size_t)n, tmp);
#pragma omp simd
        for (int o = 0; o < n; o++)
            acc[o] += d[o];
    }
    for (int o = 0; o < n; o++)
        dbias[o0 + o] += acc[o];
}

/* dinp in t, dweight in fp32: both products accumulate in fp32. */
zt_status cpu_matmul_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                              float *dweight, float *dbias, const void *dout, const void *inp,
                              const void *weight, int N, int C, int OC)
{
    if (dinp)
        ZT_TRY(cpu_gemm_typed(self, t, t, 0, 0, N, C, OC, 1.0f, dout, OC, weight, C, 1, dinp, C));
    if (dweight)
        ZT_TRY(
            cpu_gemm_typed(self, t, ZT_F32, 1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1, dweight, C));
    if (!dbias)
        return ZT_OK;
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += COL_BLOCK)
        bias_block(dbias, t, dout, N, OC, o0, o0 + COL_BLOCK < OC ? o0 + COL_BLOCK : OC);
    return ZT_OK;
}
