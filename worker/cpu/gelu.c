/* worker/cpu/gelu.c — GELU (tanh approximation), the residual add and the elementwise product.
 *
 * GELU(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), as in
 * GPT-2. Since 0.5 (1 + tanh(u)) = 1 / (1 + e^(-2u)) exactly, both
 * directions are computed from one exponential through the logistic form:
 * it needs no tanhf call (scalar in libm, 16 ns, which made GELU slower than
 * the 4C-wide matrix product feeding it), it vectorises with cpu_expf, and
 * it has no cancellation (1 + tanh(u) loses every digit in float once
 * u < -9; x / (1 + e^(-2u)) keeps them). It agrees with the tanh formula
 * to a few ulps times |2u|, the conditioning of e^(-2u) itself.
 *
 * The residual add and the product live here because they are the other
 * elementwise ops.
 */
#include "worker/cpu/ops_cpu_impl.h"

static const float GELU_S = 0.7978845608028654f; /* sqrt(2 / pi) */
static const float GELU_A = 0.044715f;

CPU_KERNEL static void forward_span(float *out, const float *inp, int n)
{
#pragma omp simd
    for (int i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_S * (x + GELU_A * x * x * x);
        out[i] = x / (1.0f + cpu_expf(-2.0f * u));
    }
}

CPU_KERNEL static void backward_span(float *dinp, const float *inp, const float *dout, int n)
{
#pragma omp simd
    for (int i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_S * (x + GELU_A * x * x * x);
        float du = GELU_S * (1.0f + 3.0f * GELU_A * x * x);
        float e = cpu_expf(-2.0f * u);
        float sig = 1.0f / (1.0f + e); /* 0.5 (1 + tanh u) */
        float es = e * sig;            /* 1 - sig, = 0.5 (1 - tanh u) */
        /* d/dx = sig + 0.5 x sech^2(u) du, with sech^2 = 4 sig (1 - sig). */
        dinp[i] += (sig + 2.0f * x * du * es * sig) * dout[i];
    }
}

/* The elementwise ops run in spans of CPU_STAGE values, each widened into
 * and rounded from the stack under 16 bits (ops_cpu_impl.h). */
static int span_of(int i0, int N)
{
    return N - i0 < CPU_STAGE ? N - i0 : CPU_STAGE;
}

zt_status cpu_gelu_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                           const void *inp, int N)
{
    (void)self;
#pragma omp parallel for schedule(static)
    for (int i0 = 0; i0 < N; i0 += CPU_STAGE) {
        float to[CPU_STAGE], ti[CPU_STAGE];
        const int n = span_of(i0, N);
        float *o = cpu_place(t, out, i0, n, to, 0);
        forward_span(o, cpu_widen(t, inp, i0, n, ti), n);
        cpu_store(t, out, i0, n, o);
    }
    return ZT_OK;
}

zt_status cpu_gelu_backward(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                            const void *inp, const void *dout, int N)
{
    (void)self;
#pragma omp parallel for schedule(static)
    for (int i0 = 0; i0 < N; i0 += CPU_STAGE) {
        float td[CPU_STAGE], ti[CPU_STAGE], tdo[CPU_STAGE];
        const int n = span_of(i0, N);
        float *d = cpu_place(t, dinp, i0, n, td, 1);
        backward_span(d, cpu_widen(t, inp, i0, n, ti), cpu_widen(t, dout, i0, n, tdo), n);
        cpu_store(t, dinp, i0, n, d);
    }
    return ZT_OK;
}

CPU_KERNEL static void add_span(float *out, const float *a, const float *b, int n)
{
#pragma omp simd
    for (int i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

CPU_KERNEL static void mul_span(float *out, const float *a, const float *b, int n)
{
#pragma omp simd
    for (int i = 0; i < n; i++)
        out[i] = a[i] * b[i];
}

CPU_KERNEL static void mul_acc_span(float *da, const float *b, const float *dout, int n)
{
#pragma omp simd
    for (int i = 0; i < n; i++)
        da[i] += b[i] * dout[i];
}

/* out = f(a, b) (acc: out += f(a, b), out read first), span by span. out
 * may be a or b: each span is read before it is written. */
static void binary(void (*f)(float *, const float *, const float *, int), enum zt_dtype t,
                   void *out, const void *a, const void *b, int N, int acc)
{
#pragma omp parallel for schedule(static)
    for (int i0 = 0; i0 < N; i0 += CPU_STAGE) {
        float to[CPU_STAGE], ta[CPU_STAGE], tb[CPU_STAGE];
        const int n = span_of(i0, N);
        const float *x = cpu_widen(t, a, i0, n, ta), *y = cpu_widen(t, b, i0, n, tb);
        float *o = cpu_place(t, out, i0, n, to, acc);
        f(o, x, y, n);
        cpu_store(t, out, i0, n, o);
    }
}

zt_status cpu_residual_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                               const void *a, const void *b, int N)
{
    (void)self;
    binary(add_span, t, out, a, b, N, 0);
    return ZT_OK;
}

zt_status cpu_mul_forward(const struct ops_backend *self, enum zt_dtype t, void *out, const void *a,
                          const void *b, int N)
{
    (void)self;
    binary(mul_span, t, out, a, b, N, 0);
    return ZT_OK;
}

zt_status cpu_mul_backward(const struct ops_backend *self, enum zt_dtype t, void *da, const void *b,
                           const void *dout, int N)
{
    (void)self;
    binary(mul_acc_span, t, da, b, dout, N, 1);
    return ZT_OK;
}
