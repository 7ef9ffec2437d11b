/* worker/cpu/rope.c — rotary position embedding, in place, in Hugging Face's
 * "rotate half" layout.
 *
 * Column i of a head turns with column i + hs/2 (not with its neighbour
 * i + 1 as in the original RoPE paper's interleaved layout): this is the
 * layout of the Llama checkpoints on Hugging Face, whose q_proj and k_proj
 * rows were permuted for it, so weights load unchanged.
 *
 * The caller passes the cos/sin tables rather than theta: they depend only
 * on (t, i), so one pair of tables (best computed in double: in float,
 * t * theta^(-2i/hs) keeps few bits of the angle at large t) serves the q
 * and k heads of every layer and step, and the op does no trigonometry. The backward is the
 * rotation by the opposite angle (a rotation's transpose is its inverse), which is the forward with
 * sin negated; one row kernel serves both.
 *
 * Each element is read and written once with four multiplies, so the op is
 * bound by memory: rows go to OpenMP threads and the kernel needs no wider
 * clones.
 */
#include "worker/cpu/ops_cpu_impl.h"

#include "common/status.h"

/* Rotates the n_heads heads of one row by the angles of cs/sn (that row's
 * position), sin multiplied by sign (+1 forward, -1 backward). */
static void rotate_row(float *x, const float *cs, const float *sn, float sign, int n_heads, int hs)
{
    const int half = hs / 2;
    for (int h = 0; h < n_heads; h++) {
        float *x1 = x + (size_t)h * hs, *x2 = x1 + half;
#pragma omp simd
        for (int i = 0; i < half; i++) {
            float c = cs[i], s = sign * sn[i], a = x1[i], b = x2[i];
            x1[i] = a * c - b * s;
            x2[i] = b * c + a * s;
        }
    }
}

/* Every row in place; under 16 bits its rotated columns are widened and
 * rounded back one head at a time (the rest are never touched). */
static void rotate_rows(enum zt_dtype t, void *x, const float *cos_t, const float *sin_t,
                        float sign, int B, int T, int n_heads, int hs, int row_stride)
{
    ZT_ASSERT(hs > 0 && hs % 2 == 0 && n_heads >= 0 && n_heads * hs <= row_stride);
    ZT_ASSERT(t == ZT_F32 || hs <= CPU_STAGE);
    const int half = hs / 2;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < B * T; r++) {
        size_t tp = (size_t)(r % T);
        for (int h = 0; h < n_heads; h++) {
            float tmp[CPU_STAGE];
            const size_t at = (size_t)r * row_stride + (size_t)h * hs;
            float *head = cpu_place(t, x, at, (size_t)hs, tmp, 1);
            rotate_row(head, cos_t + tp * half, sin_t + tp * half, sign, 1, hs);
            cpu_store(t, x, at, (size_t)hs, head);
        }
    }
}

zt_status cpu_rope_forward(const struct ops_backend *self, enum zt_dtype t, void *x,
                           const float *cos_t, const float *sin_t, int B, int T, int n_heads,
                           int hs, int row_stride)
{
    (void)self;
    rotate_rows(t, x, cos_t, sin_t, 1.0f, B, T, n_heads, hs, row_stride);
    return ZT_OK;
}

zt_status cpu_rope_backward(const struct ops_backend *self, enum zt_dtype t, void *dx,
                            const float *cos_t, const float *sin_t, int B, int T, int n_heads,
                            int hs, int row_stride)
{
    (void)self;
    rotate_rows(t, dx, cos_t, sin_t, -1.0f, B, T, n_heads, hs, row_stride);
    return ZT_OK;
}
