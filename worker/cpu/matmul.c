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

zt_status cpu_matmul_forward(const struct ops_backend *self, float *out, const float *inp,
                             const float *weight, const float *bias, int N, int C, int OC)
{
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int i = 0; i < N; i++)
            memcpy(out + (size_t)i * OC, bias, (size_t)OC * sizeof(float));
    }
    return cpu_gemm_f32(self, 0, 1, N, OC, C, 1.0f, inp, C, weight, C, bias != NULL, out, OC);
}

/* dbias[o0..o1) += column sums of dout, each sum added once. */
static void bias_block(float *dbias, const float *dout, int N, int OC, int o0, int o1)
{
    float acc[COL_BLOCK] = {0};
    int n = o1 - o0;
    for (int i = 0; i < N; i++) {
        const float *d = dout + (size_t)i * OC + o0;
#pragma omp simd
        for (int o = 0; o < n; o++)
            acc[o] += d[o];
    }
    for (int o = 0; o < n; o++)
        dbias[o0 + o] += acc[o];
}

zt_status cpu_matmul_backward(const struct ops_backend *self, float *dinp, float *dweight,
                              float *dbias, const float *dout, const float *inp,
                              const float *weight, int N, int C, int OC)
{
    if (dinp)
        ZT_TRY(cpu_gemm_f32(self, 0, 0, N, C, OC, 1.0f, dout, OC, weight, C, 1, dinp, C));
    if (dweight)
        ZT_TRY(cpu_gemm_f32(self, 1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1, dweight, C));
    if (!dbias)
        return ZT_OK;
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += COL_BLOCK)
        bias_block(dbias, dout, N, OC, o0, o0 + COL_BLOCK < OC ? o0 + COL_BLOCK : OC);
    return ZT_OK;
}
