/* worker/cuda/attention.cu — causal self-attention with grouped-query heads
 * on the GPU, fused as worker/cpu/attention.c is (FlashAttention's
 * algorithm): the forward keeps out and each row's log-sum-exp, the
 * backward recomputes the probabilities tile by tile. No T x T matrix and
 * no scratch: every tile lives in shared memory.
 *
 * Layout (worker/ops.h): a row of qkv holds NH query heads, then NKV key
 * heads, then NKV value heads, hs elements each, ld = (NH + 2 NKV) hs; query
 * head h reads key/value head h / g, g = NH / NKV, by index (no copies).
 *
 * Kernels: plain fp32 tiles of BT query rows by BT key columns (BT = 32, or
 * 16 or 8 where the device's shared memory cannot hold 32 rows of a wide
 * head), 128 threads a block, expf (not __expf). qkv, out, dout and dqkv
 * are of the op's type (fp32, bf16, fp16; the kernels are templates over
 * it, elem.cuh): tiles are widened into fp32 shared memory as they load,
 * and each stored value is rounded once, at the end (out, and dqkv's old
 * value plus the whole gradient); lse stays fp32. Straightforward rather than
 * tuned: dot products from shared memory, no tensor cores.
 * - forward: a block per (query tile, h, b); key tiles up to the diagonal
 *   (those above it are skipped), the online softmax per row (a warp per
 *   row, lanes over the tile's columns), the accumulator rescaled by
 *   e^(m_old - m_new) before P V is added; out = acc / l, lse = m + log l.
 * - backward, two kernels, FlashAttention-2's products with no float
 *   atomics: dq, a block per (query tile, h, b) over the key tiles, and
 *   dk/dv, a block per (key tile, key/value head, b) over the group's query
 *   heads in order and, for each, the query tiles from the diagonal on. So
 *   every output element is written by one thread, which adds its terms in
 *   an order fixed by the shape alone: the same bits on every run. Each
 *   kernel recomputes P = e^(S - lse) and dP = dO V^T for its tiles, and
 *   D = rowsum(dO o O) per query tile (hs products per row: small beside
 *   the tile's BT hs per row).
 * Reductions: warp rows through reduce.cuh's butterflies (fixed order);
 * every other sum is one thread's loop in index order.
 *
 * Not run here (no GPU on the development machine): tests/test_gpu_ops.c
 * checks it against the CPU ops wherever a GPU is lent.
 */
#include "worker/cuda/cuda_impl.h"
#include "worker/cuda/elem.cuh"
#include "worker/cuda/reduce.cuh"

#include <math.h>

enum {
    THREADS = 128, /* four warps */
    WARP = 32,
    TILE_MAX = 32, /* BT at most a warp's lanes: the softmax has a lane per column */
};

using elem::f32;
using elem::round_to;
using reduce::warp_max;
using reduce::warp_sum;

/* The shape of one call and the tile it runs with. */
struct attn_shape {
    int B, T, NH, NKV, hs, g, ld, ldo, bt;
    float scale;
};

/* Shared memory of a block, in floats: tiles of bt rows, those read across
 * rows by a warp (q, k, v, dout) padded to hs + 1 floats so that the lanes
 * of a dot product hit distinct banks; score tiles bt x (bt + 1). */
static size_t fwd_floats(int bt, int hs)
{
    return (size_t)bt * (hs + 1) * 2 + (size_t)bt * hs * 2 + (size_t)bt * (bt + 1) + 3 * bt;
}
static size_t dq_floats(int bt, int hs)
{
    return (size_t)bt * (hs + 1) * 4 + (size_t)bt * hs + 2 * (size_t)bt * (bt + 1) + 2 * bt;
}
static size_t dkv_floats(int bt, int hs)
{
    return (size_t)bt * (hs + 1) * 4 + 2 * (size_t)bt * hs + 2 * (size_t)bt * (bt + 1) + 2 * bt;
}

/* Where block-wide pieces of shared memory start: a bump allocator. */
struct smem_cursor {
    float *p;
    __device__ float *take(size_t n)
    {
        float *r = p;
        p += n;
        return r;
    }
};

extern __shared__ float attn_smem[];

/* rows [r0, r0 + n) of a head's hs columns (from src) of a tensor with
 * rows ld elements apart, widened into dst with rows dld floats apart;
 * zeros past n up to bt rows, so that every tile entry is finite. */
template <class E>
__device__ static void load_rows(float *dst, int dld, const E *src, size_t ld, int r0, int n,
                                 int bt, int hs)
{
    for (int e = threadIdx.x; e < bt * hs; e += blockDim.x) {
        int r = e / hs, d = e % hs;
        dst[r * dld + d] = r < n ? f32(src[(size_t)(r0 + r) * ld + d]) : 0.0f;
    }
}

/* s[r][c] = a_r . b_c over hs for r, c < bt (rows of a and b apart by
 * hs + 1), times `mul`. */
__device__ static void tile_dots(float *s, const float *a, const float *b, int bt, int hs,
                                 float mul)
{
    for (int e = threadIdx.x; e < bt * bt; e += blockDim.x) {
        int r = e / bt, c = e % bt;
        const float *x = a + r * (hs + 1), *y = b + c * (hs + 1);
        float acc = 0.0f;
        for (int d = 0; d < hs; d++)
            acc = fmaf(x[d], y[d], acc);
        s[r * (bt + 1) + c] = acc * mul;
    }
}

/* dst[r] = x_r . y_r over hs for the first n rows of bt, 0 past them (x
 * in shared memory, rows xld floats apart; y in global memory, rows yld
 * elements apart), a warp per row. */
template <class E>
__device__ static void row_dots(float *dst, const float *x, int xld, const E *y, size_t yld, int n,
                                int bt, int hs)
{
    const int lane = threadIdx.x % WARP;
    for (int r = threadIdx.x / WARP; r < bt; r += blockDim.x / WARP) {
        float acc = 0.0f;
        for (int d = lane; d < hs && r < n; d += WARP)
            acc = fmaf(x[r * xld + d], f32(y[(size_t)r * yld + d]), acc);
        acc = warp_sum(acc);
        if (lane == 0)
            dst[r] = acc;
    }
}

/* Whether entry (r, c) of the tile pair (query rows from i0, n_q of them;
 * keys from j0, n_k) is a causal score. */
__device__ static bool visible(int r, int c, int i0, int j0, int n_q, int n_k)
{
    return r < n_q && c < n_k && j0 + c <= i0 + r;
}

/* ---- forward ----------------------------------------------------------------- */

template <class E>
__global__ static void attention_forward_kernel(E *out, float *lse, const E *qkv, attn_shape s)
{
    const int bt = s.bt, hs = s.hs, T = s.T;
    const int i0 = blockIdx.x * bt, h = blockIdx.y, b = blockIdx.z, kv = h / s.g;
    const int nq = min(bt, T - i0), lane = threadIdx.x % WARP;
    smem_cursor sm{attn_smem};
    float *q = sm.take((size_t)bt * (hs + 1)), *k = sm.take((size_t)bt * (hs + 1));
    float *v = sm.take((size_t)bt * hs), *acc = sm.take((size_t)bt * hs);
    float *p = sm.take((size_t)bt * (bt + 1));
    float *m = sm.take(bt), *l = sm.take(bt), *corr = sm.take(bt);
    const E *rows = qkv + (size_t)b * T * s.ld;
    load_rows(q, hs + 1, rows + (size_t)h * hs, s.ld, i0, nq, bt, hs);
    for (int e = threadIdx.x; e < bt * hs; e += blockDim.x)
        acc[e] = 0.0f;
    for (int r = threadIdx.x; r < bt; r += blockDim.x) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    for (int j0 = 0; j0 < i0 + nq; j0 += bt) {
        const int nk = min(bt, T - j0);
        __syncthreads(); /* the previous tile's readers are done */
        load_rows(k, hs + 1, rows + (size_t)(s.NH + kv) * hs, s.ld, j0, nk, bt, hs);
        load_rows(v, hs, rows + (size_t)(s.NH + s.NKV + kv) * hs, s.ld, j0, nk, bt, hs);
        __syncthreads();
        tile_dots(p, q, k, bt, hs, s.scale);
        __syncthreads();
        /* the online softmax: a warp per row, a lane per column */
        for (int r = threadIdx.x / WARP; r < bt; r += blockDim.x / WARP) {
            const bool on = lane < bt && visible(r, lane, i0, j0, nq, nk);
            const float x = on ? p[r * (bt + 1) + lane] : -INFINITY;
            const float mx = fmaxf(m[r], warp_max(x));
            /* a row with no visible key here (only rows past nq, which
             * are never written out) keeps mx = -inf: guard the NaN */
            const float e = on ? expf(x - mx) : 0.0f, sum = warp_sum(e);
            if (lane < bt)
                p[r * (bt + 1) + lane] = e;
            if (lane == 0) {
                const float c = mx == -INFINITY ? 1.0f : expf(m[r] - mx);
                corr[r] = c;
                l[r] = l[r] * c + sum;
                m[r] = mx;
            }
        }
        __syncthreads();
        for (int e = threadIdx.x; e < bt * hs; e += blockDim.x) {
            const int r = e / hs, d = e % hs;
            float a = acc[e] * corr[r];
            for (int c = 0; c < bt; c++)
                a = fmaf(p[r * (bt + 1) + c], v[c * hs + d], a);
            acc[e] = a;
        }
    }
    __syncthreads();
    E *ob = out + (size_t)b * T * s.ldo + (size_t)h * hs;
    for (int e = threadIdx.x; e < nq * hs; e += blockDim.x) {
        const int r = e / hs, d = e % hs;
        ob[(size_t)(i0 + r) * s.ldo + d] = round_to<E>(acc[e] / l[r]);
    }
    for (int r = threadIdx.x; r < nq; r += blockDim.x)
        lse[((size_t)b * s.NH + h) * T + i0 + r] = m[r] + logf(l[r]);
}

/* ---- backward ---------------------------------------------------------------- */

/* The probabilities and score gradients of one tile pair, in place:
 * p = e^(p - lse_r) where visible, else 0; ds = p (ds - D_r). */
__device__ static void tile_softmax_backward(float *p, float *ds, const float *lse_r,
                                             const float *D, int i0, int j0, int nq, int nk, int bt)
{
    for (int e = threadIdx.x; e < bt * bt; e += blockDim.x) {
        const int r = e / bt, c = e % bt, at = r * (bt + 1) + c;
        const float pr = visible(r, c, i0, j0, nq, nk) ? expf(p[at] - lse_r[r]) : 0.0f;
        p[at] = pr;
        ds[at] = pr * (ds[at] - D[r]);
    }
}

/* dq for query tile blockIdx.x of head blockIdx.y of batch row blockIdx.z:
 * dq += scale sum over key tiles of dS K. */
template <class E>
__global__ static void attention_dq_kernel(E *dqkv, const E *dout, const E *qkv, const E *out,
                                           const float *lse, attn_shape s)
{
    const int bt = s.bt, hs = s.hs, T = s.T;
    const int i0 = blockIdx.x * bt, h = blockIdx.y, b = blockIdx.z, kv = h / s.g;
    const int nq = min(bt, T - i0);
    smem_cursor sm{attn_smem};
    float *q = sm.take((size_t)bt * (hs + 1)), *dob = sm.take((size_t)bt * (hs + 1));
    float *k = sm.take((size_t)bt * (hs + 1)), *v = sm.take((size_t)bt * (hs + 1));
    float *dq = sm.take((size_t)bt * hs);
    float *p = sm.take((size_t)bt * (bt + 1)), *ds = sm.take((size_t)bt * (bt + 1));
    float *D = sm.take(bt), *lr = sm.take(bt);
    const E *rows = qkv + (size_t)b * T * s.ld;
    const size_t orow = (size_t)b * T * s.ldo + (size_t)h * hs;
    load_rows(q, hs + 1, rows + (size_t)h * hs, s.ld, i0, nq, bt, hs);
    load_rows(dob, hs + 1, dout + orow, s.ldo, i0, nq, bt, hs);
    for (int e = threadIdx.x; e < bt * hs; e += blockDim.x)
        dq[e] = 0.0f;
    for (int r = threadIdx.x; r < bt; r += blockDim.x)
        lr[r] = r < nq ? lse[((size_t)b * s.NH + h) * T + i0 + r] : 0.0f;
    __syncthreads();
    row_dots(D, dob, hs + 1, out + orow + (size_t)i0 * s.ldo, s.ldo, nq, bt, hs);
    for (int j0 = 0; j0 < i0 + nq; j0 += bt) {
        const int nk = min(bt, T - j0);
        __syncthreads();
        load_rows(k, hs + 1, rows + (size_t)(s.NH + kv) * hs, s.ld, j0, nk, bt, hs);
        load_rows(v, hs + 1, rows + (size_t)(s.NH + s.NKV + kv) * hs, s.ld, j0, nk, bt, hs);
        __syncthreads();
        tile_dots(p, q, k, bt, hs, s.scale);
        tile_dots(ds, dob, v, bt, hs, 1.0f);
        __syncthreads();
        tile_softmax_backward(p, ds, lr, D, i0, j0, nq, nk, bt);
        __syncthreads();
        for (int e = threadIdx.x; e < bt * hs; e += blockDim.x) {
            const int r = e / hs, d = e % hs;
            float a = dq[e];
            for (int c = 0; c < bt; c++)
                a = fmaf(ds[r * (bt + 1) + c], k[c * (hs + 1) + d], a);
            dq[e] = a;
        }
    }
    __syncthreads();
    E *dqb = dqkv + (size_t)b * T * s.ld + (size_t)h * hs;
    for (int e = threadIdx.x; e < nq * hs; e += blockDim.x) {
        const int r = e / hs, d = e % hs;
        E *g = dqb + (size_t)(i0 + r) * s.ld + d;
        *g = round_to<E>(f32(*g) + s.scale * dq[e]);
    }
}

/* dk and dv for key tile blockIdx.x of key/value head blockIdx.y of batch
 * row blockIdx.z: over the group's query heads in order and each one's
 * query tiles from the diagonal on, dV += P^T dO and dK += scale dS^T Q. */
template <class E>
__global__ static void attention_dkv_kernel(E *dqkv, const E *dout, const E *qkv, const E *out,
                                            const float *lse, attn_shape s)
{
    const int bt = s.bt, hs = s.hs, T = s.T;
    const int j0 = blockIdx.x * bt, kv = blockIdx.y, b = blockIdx.z;
    const int nk = min(bt, T - j0);
    smem_cursor sm{attn_smem};
    float *k = sm.take((size_t)bt * (hs + 1)), *v = sm.take((size_t)bt * (hs + 1));
    float *q = sm.take((size_t)bt * (hs + 1)), *dob = sm.take((size_t)bt * (hs + 1));
    float *dk = sm.take((size_t)bt * hs), *dv = sm.take((size_t)bt * hs);
    float *p = sm.take((size_t)bt * (bt + 1)), *ds = sm.take((size_t)bt * (bt + 1));
    float *D = sm.take(bt), *lr = sm.take(bt);
    const E *rows = qkv + (size_t)b * T * s.ld;
    load_rows(k, hs + 1, rows + (size_t)(s.NH + kv) * hs, s.ld, j0, nk, bt, hs);
    load_rows(v, hs + 1, rows + (size_t)(s.NH + s.NKV + kv) * hs, s.ld, j0, nk, bt, hs);
    for (int e = threadIdx.x; e < bt * hs; e += blockDim.x)
        dk[e] = dv[e] = 0.0f;
    for (int h = kv * s.g; h < (kv + 1) * s.g; h++) {
        const size_t orow = (size_t)b * T * s.ldo + (size_t)h * hs;
        for (int i0 = j0; i0 < T; i0 += bt) {
            const int nq = min(bt, T - i0);
            __syncthreads(); /* the previous tile's readers are done */
            load_rows(q, hs + 1, rows + (size_t)h * hs, s.ld, i0, nq, bt, hs);
            load_rows(dob, hs + 1, dout + orow, s.ldo, i0, nq, bt, hs);
            for (int r = threadIdx.x; r < bt; r += blockDim.x)
                lr[r] = r < nq ? lse[((size_t)b * s.NH + h) * T + i0 + r] : 0.0f;
            __syncthreads();
            row_dots(D, dob, hs + 1, out + orow + (size_t)i0 * s.ldo, s.ldo, nq, bt, hs);
            tile_dots(p, q, k, bt, hs, s.scale);
            tile_dots(ds, dob, v, bt, hs, 1.0f);
            __syncthreads();
            tile_softmax_backward(p, ds, lr, D, i0, j0, nq, nk, bt);
            __syncthreads();
            for (int e = threadIdx.x; e < bt * hs; e += blockDim.x) {
                const int c = e / hs, d = e % hs;
                float av = dv[e], ak = dk[e];
                for (int r = 0; r < bt; r++) {
                    av = fmaf(p[r * (bt + 1) + c], dob[r * (hs + 1) + d], av);
                    ak = fmaf(ds[r * (bt + 1) + c], q[r * (hs + 1) + d], ak);
                }
                dv[e] = av;
                dk[e] = ak;
            }
        }
    }
    __syncthreads();
    E *dkb = dqkv + (size_t)b * T * s.ld + (size_t)(s.NH + kv) * hs;
    E *dvb = dqkv + (size_t)b * T * s.ld + (size_t)(s.NH + s.NKV + kv) * hs;
    for (int e = threadIdx.x; e < nk * hs; e += blockDim.x) {
        const int c = e / hs, d = e % hs;
        E *gk = dkb + (size_t)(j0 + c) * s.ld + d, *gv = dvb + (size_t)(j0 + c) * s.ld + d;
        *gk = round_to<E>(f32(*gk) + s.scale * dk[e]);
        *gv = round_to<E>(f32(*gv) + dv[e]);
    }
}

/* ---- launching ----------------------------------------------------------------- */

/* The shape, with the widest tile (32, 16 or 8 rows) whose blocks fit the
 * device's shared memory in all three kernels. */
static zt_status shape_of(const struct cuda_ctx *ctx, int B, int T, int NH, int NKV, int hs,
                          attn_shape *out)
{
    ZT_ASSERT(NH > 0 && NKV > 0 && NH % NKV == 0 && hs > 0 && T >= 0 && B >= 0);
    int optin = 0;
    CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx->device));
    int bt = TILE_MAX;
    while (bt >= 8 && dkv_floats(bt, hs) * sizeof(float) > (size_t)optin)
        bt /= 2;
    if (bt < 8)
        return zt_error_set(ZT_ERR_DEVICE,
                            "attention: head size %d needs more shared memory than this GPU's "
                            "%d bytes per block",
                            hs, optin);
    *out = attn_shape{
        B, T, NH, NKV, hs, NH / NKV, (NH + 2 * NKV) * hs, NH * hs, bt, 1.0f / sqrtf((float)hs)};
    return ZT_OK;
}

/* Raises a kernel's dynamic shared memory limit to `bytes` where it is
 * past the default 48 KiB. */
template <class K> static zt_status allow_smem(K kernel, size_t bytes)
{
    if (bytes > 48 * 1024)
        CUDA_TRY(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return ZT_OK;
}

extern "C" zt_status cuda_attention_forward(const struct ops_backend *self, enum zt_dtype t,
                                            void *out, float *lse, const void *qkv, int B, int T,
                                            int NH, int NKV, int hs)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    attn_shape s;
    ZT_TRY(shape_of(ctx, B, T, NH, NKV, hs, &s));
    if (B == 0 || T == 0)
        return ZT_OK;
    const size_t bytes = fwd_floats(s.bt, hs) * sizeof(float);
    const dim3 grid((unsigned)((T + s.bt - 1) / s.bt), (unsigned)NH, (unsigned)B);
    return elem::with_type(t, [&](auto tag) {
        using E = typename decltype(tag)::type;
        ZT_TRY(allow_smem(attention_forward_kernel<E>, bytes));
        attention_forward_kernel<E><<<grid, THREADS, bytes, ctx->stream>>>(
            static_cast<E *>(out), lse, static_cast<const E *>(qkv), s);
        CUDA_LAUNCHED();
        return ZT_OK;
    });
}

extern "C" zt_status cuda_attention_backward(const struct ops_backend *self, enum zt_dtype t,
                                             void *dqkv, const void *dout, const void *qkv,
                                             const void *out, const float *lse, int B, int T,
                                             int NH, int NKV, int hs)
{
    struct cuda_ctx *ctx = cuda_ctx_of(self);
    attn_shape s;
    ZT_TRY(shape_of(ctx, B, T, NH, NKV, hs, &s));
    if (B == 0 || T == 0)
        return ZT_OK;
    const unsigned tiles = (unsigned)((T + s.bt - 1) / s.bt);
    const size_t dq_bytes = dq_floats(s.bt, hs) * sizeof(float);
    const size_t dkv_bytes = dkv_floats(s.bt, hs) * sizeof(float);
    return elem::with_type(t, [&](auto tag) {
        using E = typename decltype(tag)::type;
        E *g = static_cast<E *>(dqkv);
        const E *d = static_cast<const E *>(dout), *x = static_cast<const E *>(qkv),
                *o = static_cast<const E *>(out);
        ZT_TRY(allow_smem(attention_dq_kernel<E>, dq_bytes));
        ZT_TRY(allow_smem(attention_dkv_kernel<E>, dkv_bytes));
        /* dq and dk/dv touch disjoint columns of dqkv: no order between them */
        attention_dq_kernel<E>
            <<<dim3(tiles, (unsigned)NH, (unsigned)B), THREADS, dq_bytes, ctx->stream>>>(g, d, x, o,
                                                                                         lse, s);
        CUDA_LAUNCHED();
        attention_dkv_kernel<E>
            <<<dim3(tiles, (unsigned)NKV, (unsigned)B), THREADS, dkv_bytes, ctx->stream>>>(
                g, d, x, o, lse, s);
        CUDA_LAUNCHED();
        return ZT_OK;
    });
}
