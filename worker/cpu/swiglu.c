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

/* Rows of gu stage their gate and up halves, CPU_STAGE columns at a time
 * under 16 bits. */
static int span_of(int i0, int I)
{
    return I - i0 < CPU_STAGE ? I - i0 : CPU_STAGE;
}

zt_status cpu_swiglu_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                             const void *gu, int N, int I)
{
    (void)self;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const size_t row = (size_t)n * 2 * I;
        for (int i0 = 0; i0 < I; i0 += CPU_STAGE) {
            float to[CPU_STAGE], tg[CPU_STAGE], tu[CPU_STAGE];
            const int w = span_of(i0, I);
            const size_t at = (size_t)n * I + i0;
            float *o = cpu_place(t, out, at, w, to, 0);
            forward_row(o, cpu_widen(t, gu, row + i0, w, tg), cpu_widen(t, gu, row + I + i0, w, tu),
                        w);
            cpu_store(t, out, at, w, o);
        }
    }
    return ZT_OK;
}

zt_status cpu_swiglu_backward(const struct ops_backend *self, enum zt_dtype t, void *dgu,
                              const void *dout, const void *gu, int N, int I)
{
    (void)self;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const size_t row = (size_t)n * 2 * I;
        for (int i0 = 0; i0 < I; i0 += CPU_STAGE) {
            float tdg[CPU_STAGE], tdu[CPU_STAGE], tdo[CPU_STAGE], tg[CPU_STAGE], tu[CPU_STAGE];
            const int w = span_of(i0, I);
            float *dg = cpu_place(t, dgu, row + i0, w, tdg, 1);
            float *du = cpu_place(t, dgu, row + I + i0, w, tdu, 1);
            backward_row(dg, du, cpu_widen(t, dout, (size_t)n * I + i0, w, tdo),
                         cpu_widen(t, gu, row + i0, w, tg), cpu_widen(t, gu, row + I + i0, w, tu),
                         w);
            cpu_store(t, dgu, row + i0, w, dg);
            cpu_store(t, dgu, row + I + i0, w, du);
        }
    }
    return ZT_OK;
}
