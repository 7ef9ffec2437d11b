/* worker/cuda/encoder.cu — token plus position embedding, forward and
 * backward, on the GPU; the CPU's is worker/cpu/encoder.c.
 *
 * The forward is a gather and an add: one thread per output element,
 * consecutive threads on consecutive columns of a row (coalesced reads of
 * the wte and wpe rows and of the write), in a grid-stride loop. Under 16
 * bits (elem.cuh) the sum is taken in fp32 and rounded once; the gradients
 * dwte and dwpe are fp32 whatever dout is.
 *
 * The backward scatters dout's rows into the wte rows its tokens pick, and
 * a token may repeat within the batch, so two positions can add into the
 * same float. Float atomics would make the sum's order, hence its bits,
 * vary between runs. Instead one thread owns one column of dwte and walks
 * the positions in order, which is exactly the CPU's summation order: the
 * result is the CPU's to the bit, on every run. That leaves only C threads
 * in flight, and a walk that waits on each read-modify-write of a dwte row
 * it cannot know is distinct from the previous one; so each thread takes
 * TILE positions at a time, reads their TILE dwte values together, forwards
 * in registers the running value of a row that repeats within the tile, and
 * writes back in order (the last write of a repeated row holds its full
 * sum). The tokens are the same for every thread, so the repeat tests never
 * diverge.
 *
 * dwpe[t,:] takes dout[b,t,:] for every b: one thread per (t, column)
 * adding over b in order (again the CPU's order), T*C threads.
 *
 * Under vocabulary-parallel tensor parallelism a rank holds the rows
 * [v_lo, v_lo + Vp) of wte: the forward gives a zero row (plus the
 * positions) for a token outside the slice and the backward skips it; the
 * whole vocabulary is the slice [0, INT_MAX).
 */
#include "worker/cuda/cuda_impl.h"
#include "worker/cuda/elem.cuh"

#include <climits>

namespace
{

using elem::f32;
using elem::round_to;

constexpr unsigned THREADS = 256;
/* The dwte walk: a warp per block spreads the few column threads over as
 * many multiprocessors as possible. */
constexpr unsigned DWTE_THREADS = 32;
/* Positions whose dwte reads a thread keeps in flight at once. */
constexpr int TILE = 8;

/* The row of wte_part holding token tok, or -1 outside [v_lo, v_lo + Vp). */
__host__ __device__ inline int slice_row(int32_t tok, int v_lo, int Vp)
{
    return tok >= v_lo && tok - v_lo < Vp ? tok - v_lo : -1;
}

/* Under 16 bits a row copied (no position, or a token outside the slice)
 * keeps its values exactly; only a sum is rounded. */
template <class E>
__global__ void forward_kernel(E *out, const int32_t *tokens, const E *wte_part, const E *wpe,
                               size_t n, int T, int C, int v_lo, int Vp)
{
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        size_t bt = k / (size_t)C, c = k - bt * (size_t)C;
        int row = slice_row(tokens[bt], v_lo, Vp);
        float p = wpe ? f32(wpe[(bt % (size_t)T) * C + c]) : 0.0f;
        /* Outside the slice the position alone (not 0 + p: a -0 stays). */
        if (row < 0)
            out[k] = round_to<E>(p);
        else
            out[k] = round_to<E>(wpe ? f32(wte_part[(size_t)row * C + c]) + p
                                     : f32(wte_part[(size_t)row * C + c]));
    }
}

/* dwte_part[row(bt), c] += dout[bt, c] for bt = 0, 1, ..., BT-1 in order,
 * for one column c. dout and dwte_part never overlap, so dout's reads may
 * run ahead of dwte's writes (__restrict__). */
template <class E>
__device__ inline void walk_column(float *__restrict__ dwte_part, const E *__restrict__ dout,
                                   const int32_t *__restrict__ tokens, int BT, int C, int c,
                                   int v_lo, int Vp)
{
    for (int bt0 = 0; bt0 < BT; bt0 += TILE) {
        int row[TILE];
        float val[TILE];
        for (int k = 0; k < TILE; k++)
            row[k] = bt0 + k < BT ? slice_row(tokens[bt0 + k], v_lo, Vp) : -1;
        for (int k = 0; k < TILE; k++)
            val[k] = row[k] >= 0 ? dwte_part[(size_t)row[k] * C + c] : 0.0f;
        for (int k = 0; k < TILE; k++) {
            if (row[k] < 0)
                continue;
            /* The row's value so far: the latest earlier update in this
             * tile, else what was read. */
            float acc = val[k];
            for (int j = 0; j < k; j++)
                if (row[j] == row[k])
                    acc = val[j];
            val[k] = acc + f32(dout[(size_t)(bt0 + k) * C + c]);
        }
        for (int k = 0; k < TILE; k++)
            if (row[k] >= 0)
                dwte_part[(size_t)row[k] * C + c] = val[k];
    }
}

/* One thread per column of dwte_part (grid-stride past the capped grid). */
template <class E>
__global__ void dwte_kernel(float *dwte_part, const E *dout, const int32_t *tokens, int BT, int C,
                            int v_lo, int Vp)
{
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < (size_t)C;
         c += (size_t)gridDim.x * blockDim.x)
        walk_column(dwte_part, dout, tokens, BT, C, (int)c, v_lo, Vp);
}

/* dwpe[t, c] += dout[b*T + t, c] for b = 0, 1, ..., B-1 in order, one
 * thread per (t, c). */
template <class E>
__global__ void dwpe_kernel(float *dwpe, const E *dout, size_t n, int B, int T, int C)
{
    const size_t plane = (size_t)T * C;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        float acc = dwpe[k];
        for (int b = 0; b < B; b++)
            acc += f32(dout[(size_t)b * plane + k]);
        dwpe[k] = acc;
    }
}

} // namespace

zt_status cuda_encoder_forward_vocab(const struct ops_backend *self, enum zt_dtype t, void *out,
                                     const int32_t *tokens, const void *wte_part, const void *wpe,
                                     int B, int T, int C, int v_lo, int Vp)
{
    ZT_ASSERT(Vp >= 1 && v_lo >= 0);
    size_t n = B > 0 && T > 0 && C > 0 ? (size_t)B * T * C : 0;
    return elem::with_type(t, [&](auto tag) {
        using E = typename decltype(tag)::type;
        forward_kernel<E><<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(self)->stream>>>(
            static_cast<E *>(out), tokens, static_cast<const E *>(wte_part),
            static_cast<const E *>(wpe), n, T > 0 ? T : 1, C > 0 ? C : 1, v_lo, Vp);
        CUDA_LAUNCHED();
        return ZT_OK;
    });
}

zt_status cuda_encoder_backward_vocab(const struct ops_backend *self, enum zt_dtype t,
                                      float *dwte_part, float *dwpe, const void *dout,
                                      const int32_t *tokens, int B, int T, int C, int v_lo, int Vp)
{
    ZT_ASSERT(Vp >= 1 && v_lo >= 0);
    if (!dwte_part || B <= 0 || T <= 0 || C <= 0)
        return ZT_OK;
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    return elem::with_type(t, [&](auto tag) {
        using E = typename decltype(tag)::type;
        const E *d = static_cast<const E *>(dout);
        dwte_kernel<E><<<cuda_blocks((size_t)C, DWTE_THREADS), DWTE_THREADS, 0, ctx->stream>>>(
            dwte_part, d, tokens, B * T, C, v_lo, Vp);
        CUDA_LAUNCHED();
        if (!dwpe)
            return ZT_OK;
        size_t n = (size_t)T * C;
        dwpe_kernel<E><<<cuda_blocks(n, THREADS), THREADS, 0, ctx->stream>>>(dwpe, d, n, B, T, C);
        CUDA_LAUNCHED();
        return ZT_OK;
    });
}

/* The whole vocabulary is the slice that holds every token. */
zt_status cuda_encoder_forward(const struct ops_backend *self, enum zt_dtype t, void *out,
                               const int32_t *tokens, const void *wte, const void *wpe, int B,
                               int T, int C)
{
    return cuda_encoder_forward_vocab(self, t, out, tokens, wte, wpe, B, T, C, 0, INT_MAX);
}

zt_status cuda_encoder_backward(const struct ops_backend *self, enum zt_dtype t, float *dwte,
                                float *dwpe, const void *dout, const int32_t *tokens, int B, int T,
                                int C)
{
    return cuda_encoder_backward_vocab(self, t, dwte, dwpe, dout, tokens, B, T, C, 0, INT_MAX);
}
