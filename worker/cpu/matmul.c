/* worker/cpu/matmul.c — the linear layer out = inp @ weight^T + bias.
 *
 * All three products are single cblas_sgemm calls on the row-major buffers
 * as they lie (weight [OC, C] is read transposed in place, never copied).
 * The bias is fused by writing it into every output row first and letting
 * sgemm accumulate with beta = 1: OpenBLAS would otherwise spend the same
 * pass zeroing C for beta = 0, so the bias costs no extra sweep over out.
 * The backward's dinp and dweight use beta = 1, which is exactly the
 * accumulate convention of worker/ops.h.
 */
#include "worker/cpu/ops_cpu_impl.h"

#include <cblas.h>
#include <string.h>

/* Columns per dbias task: the running sums stay in registers and L1 while
 * the rows stream past. */
enum { COL_BLOCK = 256 };

zt_status cpu_matmul_forward(const struct ops_backend *self, float *out, const float *inp,
                             const float *weight, const float *bias, int N, int C, int OC)
{
    (void)self;
    float beta = 0.0f;
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int i = 0; i < N; i++)
            memcpy(out + (size_t)i * OC, bias, (size_t)OC * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, beta,
                out, OC);
    return ZT_OK;
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
    (void)self;
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C,
                    1.0f, dinp, C);
    if (dweight)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f,
                    dweight, C);
    if (!dbias)
        return ZT_OK;
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += COL_BLOCK)
        bias_block(dbias, dout, N, OC, o0, o0 + COL_BLOCK < OC ? o0 + COL_BLOCK : OC);
    return ZT_OK;
}
