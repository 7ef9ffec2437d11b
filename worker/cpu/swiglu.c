/* worker/cpu/swiglu.c — SwiGLU, out = silu(gate) * up, on the fused
 * gate/up buffer of the Llama MLP.
 *
 * silu(g) = g * sigmoid(g) = g / (1 + e^-g), from one cpu_expf per element
 * so that the row loops vectorise (the MLP's hidden width makes this the
 * widest elementwise op of the model, as GELU is GPT-2's). cpu_expf is
 * within 1 ulp of e^-g for g in [-88, 87], so sigmoid(g) is within about
 * 2 ulp there. Outside that range the exponential saturates instead of
 * overflowing: for g > 87, e^-g becomes 1.6e-38, 1 + e^-g rounds to 1 as
 * the exact value would, and silu(g) = g; for g < -88, e^-g stays at e^88
 * and silu(g) comes out as g / e^88 rather than g e^g, both below 1e-33 in
 * magnitude for |g| <= 1e4 and finite for every finite g.
 *
 * The backward uses silu'(g) = s (1 + g (1 - s)), s = sigmoid(g), with
 * 1 - s taken as e^-g * s: no cancellation, and the product is formed before
 * g multiplies it, because g * e^-g alone overflows float for g < -88.
 */
#include "worker/cpu/ops_cpu_impl.h"

CPU_KERNEL static void forward_row(float *out, const float *gate, const float *up, int I)
{
#pragma omp simd
    for (int i = 0; i < I; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + cpu_expf(-g)) * up[i];
    }
}

CPU_KERNEL static void backward_row(float *dgate, float *dup, const float *dout, const float *gate,
                                    const float *up, int I)
{
#pragma omp simd
    for (int i = 0; i < I; i++) {
        float g = gate[i], e = cpu_expf(-g);
        float s = 1.0f / (1.0f + e);
        float es = e * s; /* 1 - s */
        dgate[i] += dout[i] * up[i] * s * (1.0f + g * es);
        dup[i] += dout[i] * g * s;
    }
}

zt_status cpu_swiglu_forward(const struct ops_backend *self, float *out, const float *gu, int N,
                             int I)
{
    (void)self;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *row = gu + (size_t)n * 2 * I;
        forward_row(out + (size_t)n * I, row, row + I, I);
    }
    return ZT_OK;
}

zt_status cpu_swiglu_backward(const struct ops_backend *self, float *dgu, const float *dout,
                              const float *gu, int N, int I)
{
    (void)self;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *row = gu + (size_t)n * 2 * I;
        float *drow = dgu + (size_t)n * 2 * I;
        backward_row(drow, drow + I, dout + (size_t)n * I, row, row + I, I);
    }
    return ZT_OK;
}
