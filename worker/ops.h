/* worker/ops.h — the op table of a compute backend: every op of both model
 * families (GPT-2, and the Llama-style decoder: RMSNorm, rotary positions,
 * SwiGLU, grouped-query attention) and the elementwise ops of the ZeRO
 * engine's optimizer step.
 *
 * The model (worker/model.c) and the engine (shard/) call ops only through a
 * `struct ops_backend`, which reaches them inside the compute backend bundle
 * (worker/backend.h) together with the device memory the pointers live in,
 * so a CUDA backend fills the same slots beside the CPU one without touching
 * either caller. Shapes follow llm.c: activations are row-major [N, C] with
 * N = B*T rows; weight matrices are [OC, C] (out features, in features), so
 * a linear layer is out = inp @ w^T + bias.
 *
 * Conventions shared by every backend:
 * - Every op returns zt_status: ZT_OK, or the failure of the device library
 *   translated at the backend's boundary (ZT_ERR_DEVICE with the call and
 *   its message). Of the CPU ops only the matrix products (a oneDNN call,
 *   no memory for a new kernel, no 16-bit kernel on this CPU) and the
 *   16-bit forms (no memory to stage rows) can fail; broken preconditions (a
 *   target outside the vocabulary, a bad dtype) hit an always-on assert in
 *   every backend.
 * - Forward ops overwrite their outputs.
 * - Backward ops ACCUMULATE (+=) into every gradient they produce, both the
 *   parameter gradients and the input gradients; callers zero what must start
 *   at zero. This lets gradient accumulation and residual branches share one
 *   buffer without extra copies. The one exception is rope_backward, which
 *   transforms its buffer in place (see there).
 * - Pointers are device pointers of the backend's device; the CPU backend's
 *   device pointers are ordinary host pointers. Scalars (scale factors,
 *   hyperparameters) are host values; results the host needs (a sum of
 *   squares) come back through host out-parameters.
 * - Every model op takes `t`, the type of its activations, their gradients
 *   and its weights: ZT_F32, or a 16-bit ZT_BF16 or ZT_F16 (uint16_t
 *   bits), the `void *` buffers. What stays fp32 whatever t is: the
 *   statistics the backward reads (mean, rstd, lse), the losses and the
 *   cross-entropy's row statistics, the weight gradients (so a step's
 *   gradients accumulate in fp32, as DeepSpeed's grad_accum_dtype fp32),
 *   and rotary tables. A 16-bit op computes in fp32 and rounds each value
 *   it stores once (to nearest even; beyond fp16's range to infinity):
 *   its result is the fp32 op's on the widened inputs, rounded, bit for
 *   bit, for every op but the matrix products (matmul, lora, and the
 *   products inside attention), whose fp32 sums may run in another order,
 *   within OPS_16BIT_GEMM_TOL. A backend without a 16-bit form of an op
 *   (or a kernel for it on this device) returns ZT_ERR_UNSUPPORTED saying
 *   which; the fp32 forms always run.
 * - No op allocates device memory; scratch comes from the caller. (The
 *   CPU's 16-bit forms stage rows through fp32 buffers of each thread, at
 *   most a few rows or, in attention, a few tiles and one group's dk and
 *   dv at a time, freed by the call.)
 * - The engine ops are the backend-side form of the device-independent math
 *   in worker/precision.h and worker/optimizer.h: the CPU backend calls those
 *   functions or vector kernels that reproduce them bit for bit (all but
 *   sum_squares, whose order of summation is its own), and another backend
 *   must match them within each op's documented error.
 */
#ifndef ZT_WORKER_OPS_H
#define ZT_WORKER_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/dtype.h"
#include "../common/fp8.h"
#include "../common/status.h"
#include "optimizer.h"

/* The fp32 attention's bound (attention_forward): relative to the largest
 * magnitude of the exact result, for out, lse and dqkv. Float sums of at
 * most hs products and of one tile's probabilities at a time (the online
 * softmax adds tiles, not single terms), so about 1e-6 in practice. */
#define ATTENTION_FP32_TOL 1e-5

/* A 16-bit matrix product's bound against the fp32 op on the same (widened)
 * operands, relative to the largest magnitude of the fp32 result: its
 * rounding once to bf16 (at most 2^-8 relative; 2^-11 for fp16) plus fp32 sums
 * in another order. Attention's 16-bit forms are held to the same bound
 * against its fp32 forms. */
#define OPS_16BIT_GEMM_TOL(t) ((t) == ZT_BF16 ? 8e-3 : 1e-3)

struct ops_backend {
    const char *name; /* "cpu", "cuda" */
    /* The backend's state for one opened compute backend (the CUDA stream,
     * cuBLAS handle and scratch; the CPU's GEMM kernels built so far),
     * reached by every op through its first argument `self`, the table it
     * was called through; NULL in the CPU's static tables, whose products
     * then build their kernels at each call. */
    void *ctx;

    /* What the matrix products of `ab_type` operands (ZT_F32, ZT_BF16) run
     * on, for the run's start line and records: library, version and
     * kernel ("onednn 2.6.3 brg:avx512_core", "cublas sgemm"), into
     * buf[0..n). Errors: those of building the probe's kernel. */
    zt_status (*gemm_describe)(const struct ops_backend *self, enum zt_dtype ab_type, char *buf,
                               size_t n);

    /* ZT_OK when every model op has a form for activations of type t on
     * this device and its products a kernel (the CPU: bf16 where oneDNN
     * has a bf16 GEMM kernel for the CPU, fp16 where it has an fp16 one);
     * else ZT_ERR_UNSUPPORTED saying what is missing. fp32: always ZT_OK.
     * What a run's compute type is chosen by (param_table.compute). */
    zt_status (*computes)(const struct ops_backend *self, enum zt_dtype t);

    /* out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]. With wpe == NULL no
     * position embedding is added (the Llama family's positions are rotary,
     * applied inside attention): out[b,t,:] = wte[tokens[b,t],:]. */
    zt_status (*encoder_forward)(const struct ops_backend *self, enum zt_dtype t, void *out,
                                 const int32_t *tokens, const void *wte, const void *wpe, int B,
                                 int T, int C);
    /* dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:], skipped
     * when dwpe is NULL (both when dwte is: a frozen embedding). */
    zt_status (*encoder_backward)(const struct ops_backend *self, enum zt_dtype t, float *dwte,
                                  float *dwpe, const void *dout, const int32_t *tokens, int B,
                                  int T, int C);

    /* The embedding under vocabulary-parallel tensor parallelism (Megatron's
     * VocabParallelEmbedding): each of the tensor-parallel ranks holds the
     * contiguous rows [v_lo, v_lo + Vp) of wte[V,C] as wte_part[Vp,C].
     * out[b,t,:] = (wte_part[tok - v_lo,:] if v_lo <= tok < v_lo + Vp, else
     * 0) + (wpe[t,:] unless wpe is NULL), tok = tokens[b,t]. The caller sums
     * out over the ranks and passes wpe on one of them only, so the sum is
     * encoder_forward's out. */
    zt_status (*encoder_forward_vocab)(const struct ops_backend *self, enum zt_dtype t, void *out,
                                       const int32_t *tokens, const void *wte_part, const void *wpe,
                                       int B, int T, int C, int v_lo, int Vp);
    /* Its backward, given every rank the same dout (the full gradient):
     * dwte_part[tok - v_lo,:] += dout[b,t,:] for the tokens in the slice;
     * dwpe[t,:] += dout[b,t,:] unless dwpe is NULL (pass it on the rank that
     * was given wpe). Nothing at all when dwte_part is NULL (a frozen
     * embedding), as encoder_backward. */
    zt_status (*encoder_backward_vocab)(const struct ops_backend *self, enum zt_dtype t,
                                        float *dwte_part, float *dwpe, const void *dout,
                                        const int32_t *tokens, int B, int T, int C, int v_lo,
                                        int Vp);

    /* LayerNorm over the last dimension (eps 1e-5, biased variance);
     * saves per-row mean and 1/std for the backward. */
    zt_status (*layernorm_forward)(const struct ops_backend *self, enum zt_dtype t, void *out,
                                   float *mean, float *rstd, const void *inp, const void *weight,
                                   const void *bias, int N, int C);
    /* dweight and dbias are both NULL (a frozen norm) or neither. */
    zt_status (*layernorm_backward)(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                                    float *dweight, float *dbias, const void *dout, const void *inp,
                                    const void *weight, const float *mean, const float *rstd, int N,
                                    int C);

    /* out[N,OC] = inp[N,C] @ weight[OC,C]^T (+ bias[OC] unless bias is NULL). */
    zt_status (*matmul_forward)(const struct ops_backend *self, enum zt_dtype t, void *out,
                                const void *inp, const void *weight, const void *bias, int N, int C,
                                int OC);
    /* dinp += dout @ weight (skipped when dinp is NULL: fp8 GEMMs take
     * the bias gradient from the unquantised dout alone); dweight += dout^T
     * @ inp (skipped when dweight is NULL: a frozen weight); dbias +=
     * column sums of dout (skipped when dbias is NULL). */
    zt_status (*matmul_backward)(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                                 float *dweight, float *dbias, const void *dout, const void *inp,
                                 const void *weight, int N, int C, int OC);

    /* fp8 quantisation of a GEMM operand (common/fp8.h, the model's fp8
     * GEMMs: worker/model_parts.h): q[i] = fp8_encode(x[i] * scale, f), and
     * *amax (a host float) = max |x[i]| before scaling, NaN when some x[i]
     * is (fp8_amax), in the same pass, as Transformer Engine's casts do. */
    zt_status (*fp8_quantize)(const struct ops_backend *self, uint8_t *q, float *amax,
                              const float *x, size_t n, float scale, enum fp8_format f);
    /* x[i] = fp8_decode(q[i], f) * scale_inv in fp32: the values an fp8
     * GEMM multiplies, for the fp32 matmul that emulates it. */
    zt_status (*fp8_dequantize)(const struct ops_backend *self, float *x, const uint8_t *q,
                                size_t n, float scale_inv, enum fp8_format f);

    /* LoRA's low-rank term of a linear layer (worker/lora.h): u[N,r] =
     * inp[N,C] @ A[r,C]^T, then out[n, 0..OC) += scale * u[n,:] @ B[OC,r]^T
     * on rows of out ldo elements apart (ldo >= OC: the layer's output may be
     * a column slice of a wider one, as q_proj's is of the fused q|k|v).
     * u (N*r elements of t) is scratch the caller keeps no use of. */
    zt_status (*lora_forward)(const struct ops_backend *self, enum zt_dtype t, void *out, int ldo,
                              void *u, const void *inp, const void *A, const void *B, float scale,
                              int N, int C, int r, int OC);
    /* Its backward given dout (the gradient w.r.t. out, rows ldo floats
     * apart): with u recomputed, dB += scale * dout^T @ u, du = scale * dout
     * @ B, dA += du^T @ inp, dinp += du @ A (skipped when dinp is NULL).
     * scratch: 2*N*r elements of t (u and du, rounded
     * to t between the products as out is). */
    zt_status (*lora_backward)(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                               float *dA, float *dB, void *scratch, const void *dout, int ldo,
                               const void *inp, const void *A, const void *B, float scale, int N,
                               int C, int r, int OC);

    /* Causal self-attention with grouped-query heads, fused: no T x T
     * matrix is stored in any backend (FlashAttention's algorithm: tiles of
     * queries against tiles of keys with an online softmax; the backward
     * recomputes the probabilities tile by tile). Row (b,t) of
     * qkv[B,T,(NH+2*NKV)*hs] holds NH query heads, then NKV key heads, then
     * NKV value heads, hs columns each; query head h attends with key/value
     * head h / (NH/NKV) (NH a multiple of NKV). Scale 1/sqrt(hs). GPT-2 is
     * the case NKV == NH.
     * out[B,T,NH*hs] receives the output; lse[B,NH,T] each row's log-sum-exp
     * (natural log) of its scaled scores, s_ij = q_i . k_j / sqrt(hs) for
     * j <= i: what the backward needs, with out, to recompute the softmax.
     * Accuracy (fp32): out within ATTENTION_FP32_TOL of a double loop over
     * the full softmax relative to its largest magnitude (max |err| /
     * max |ref| over the tensor), lse within ATTENTION_FP32_TOL times
     * max(1, max |lse|); tests/test_ops.c holds the CPU to it, and
     * tests/test_gpu_ops.c other backends to the CPU. */
    zt_status (*attention_forward)(const struct ops_backend *self, enum zt_dtype t, void *out,
                                   float *lse, const void *qkv, int B, int T, int NH, int NKV,
                                   int hs);
    /* dqkv += gradient w.r.t. qkv (key/value heads accumulate over the query
     * heads sharing them), given dout[B,T,NH*hs] and the forward's out and
     * lse (out for D_i = dout_i . out_i, the softmax backward's row term).
     * No scratch: each backend's tile workspace is its own (the CPU's fp32
     * form on the stack of each thread, two tiles of 64 x 256 floats; its
     * 16-bit forms from the heap per thread and call, with a group's dk
     * and dv in fp32, 2 T hs floats; the GPU's in shared memory), so it is
     * O(threads x (tile x tile + T hs)), never B*NH*T*T.
     * dqkv within ATTENTION_FP32_TOL of the exact gradient (relative to its
     * largest magnitude). The CPU's result does not depend on the thread
     * count, bit for bit. */
    zt_status (*attention_backward)(const struct ops_backend *self, enum zt_dtype t, void *dqkv,
                                    const void *dout, const void *qkv, const void *out,
                                    const float *lse, int B, int T, int NH, int NKV, int hs);

    /* One step of ring attention (context parallelism, worker/model_context.c):
     * the sequence of S tokens is cut into 2 cp chunks of c = T / 2 rows and
     * rank r holds chunks r and 2 cp - 1 - r (T rows: qkv[B,T,...] as
     * attention_forward's). kv[B,T,2*NKV*hs] holds the key heads then the
     * value heads of rank kv_rank's T rows; the local queries (q_rank's)
     * attend to those of its keys at or before their own global position
     * (a chunk pair is whole, causal or nothing). first: kv is q_rank's own
     * block, and out[B,T,NH*hs] and lse[B,NH,T] are written; otherwise the
     * block's result is merged into theirs through the log-sum-exps. After
     * every block of the ring, out and lse are attention_forward's over the
     * whole sequence, rows in the local order. fp32 only (a 16-bit t is
     * ZT_ERR_UNSUPPORTED); NULL in a backend without it. */
    zt_status (*attention_ring_forward)(const struct ops_backend *self, enum zt_dtype t, void *out,
                                        float *lse, const void *qkv, const void *kv, int B, int T,
                                        int NH, int NKV, int hs, int cp, int q_rank, int kv_rank,
                                        int first);
    /* Its backward for one block: dqkv's query columns += the local
     * queries' gradient through kv_rank's keys, dkv[B,T,2*NKV*hs] += that
     * block's key and value gradients, given the final out and lse (the
     * whole ring's). Summed over the ring's blocks, with each dkv home on
     * its rank, this is attention_backward's dqkv. */
    zt_status (*attention_ring_backward)(const struct ops_backend *self, enum zt_dtype t,
                                         void *dqkv, void *dkv, const void *dout, const void *qkv,
                                         const void *kv, const void *out, const float *lse, int B,
                                         int T, int NH, int NKV, int hs, int cp, int q_rank,
                                         int kv_rank);

    /* Attention of n new positions against a key/value cache, for decoding
     * one sequence: query row i (position p0 + i) attends keys and values
     * 0 .. p0 + i. q[i * q_stride + h * hs ...] is query head h of row i;
     * k[j * kv_stride + g * hs ...] and v[...] alike key and value head g of
     * position j (the cache holds p0 + n positions, the new ones included);
     * head h reads head g = h / (NH/NKV). out[n, NH*hs]. Scale 1/sqrt(hs).
     * With p0 = 0 and n = T it is attention_forward's out over the same
     * rows; with n = 1 one token's attention over the whole past. No
     * lse: nothing runs backward through it. fp32 only (a 16-bit t is
     * ZT_ERR_UNSUPPORTED); within ATTENTION_FP32_TOL of a double loop. */
    zt_status (*attention_cached_forward)(const struct ops_backend *self, enum zt_dtype t,
                                          void *out, const void *q, int q_stride, const void *k,
                                          const void *v, int kv_stride, int p0, int n, int NH,
                                          int NKV, int hs);

    /* RMSNorm over the last dimension: out[n,:] = inp[n,:] * rstd[n] * weight,
     * rstd[n] = 1 / sqrt(mean(inp[n,:]^2) + eps), saved for the backward. */
    zt_status (*rmsnorm_forward)(const struct ops_backend *self, enum zt_dtype t, void *out,
                                 float *rstd, const void *inp, const void *weight, int N, int C,
                                 float eps);
    /* dinp += d/dinp, dweight += d/dweight (skipped when NULL), given dout[N,C]. */
    zt_status (*rmsnorm_backward)(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                                  float *dweight, const void *dout, const void *inp,
                                  const void *weight, const float *rstd, int N, int C);

    /* Rotary position embedding on rows of x: row r (r = b*T + t, position
     * t = r % T) has row_stride elements; its first n_heads*hs columns are
     * n_heads heads of hs (even) columns; each head's pair (x1 = x[i],
     * x2 = x[i + hs/2]), i < hs/2, becomes (x1 cos - x2 sin, x2 cos + x1 sin)
     * with cos = cos_t[t*hs/2 + i], sin = sin_t[t*hs/2 + i] (tables [T, hs/2]
     * the caller computed: angle t * theta^(-2i/hs)). Columns past
     * n_heads*hs are untouched. In place. */
    zt_status (*rope_forward)(const struct ops_backend *self, enum zt_dtype t, void *x,
                              const float *cos_t, const float *sin_t, int B, int T, int n_heads,
                              int hs, int row_stride);
    /* The backward of rope_forward, in place: dx (the gradient w.r.t. the
     * rotated values) is replaced by the gradient w.r.t. the values before
     * rotation (the transposed rotation: (d1 cos + d2 sin, d2 cos - d1 sin)).
     * The one backward op that transforms instead of accumulating: the
     * rotation is linear, so the model applies it to the gradient buffer
     * between the attention backward and the qkv matmul backward. */
    zt_status (*rope_backward)(const struct ops_backend *self, enum zt_dtype t, void *dx,
                               const float *cos_t, const float *sin_t, int B, int T, int n_heads,
                               int hs, int row_stride);

    /* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
    zt_status (*gelu_forward)(const struct ops_backend *self, enum zt_dtype t, void *out,
                              const void *inp, int N);
    zt_status (*gelu_backward)(const struct ops_backend *self, enum zt_dtype t, void *dinp,
                               const void *inp, const void *dout, int N);

    /* SwiGLU: out[n,i] = silu(gu[n,i]) * gu[n,I+i] for n < N, i < I,
     * silu(g) = g / (1 + exp(-g)); gu[N,2I] holds the gate projection's I
     * columns then the up projection's I columns of each row (one matmul of
     * the gate_proj and up_proj weights stacked). */
    zt_status (*swiglu_forward)(const struct ops_backend *self, enum zt_dtype t, void *out,
                                const void *gu, int N, int I);
    /* dgu[N,2I] += the gradient w.r.t. gu, given dout[N,I]. */
    zt_status (*swiglu_backward)(const struct ops_backend *self, enum zt_dtype t, void *dgu,
                                 const void *dout, const void *gu, int N, int I);

    /* out = a + b, elementwise over N elements. */
    zt_status (*residual_forward)(const struct ops_backend *self, enum zt_dtype t, void *out,
                                  const void *a, const void *b, int N);
    /* out = a * b elementwise over N elements (a dropout mask applied). */
    zt_status (*mul_forward)(const struct ops_backend *self, enum zt_dtype t, void *out,
                             const void *a, const void *b, int N);
    /* da += b * dout elementwise: mul_forward's gradient w.r.t. a. */
    zt_status (*mul_backward)(const struct ops_backend *self, enum zt_dtype t, void *da,
                              const void *b, const void *dout, int N);

    /* Fused softmax + cross-entropy over rows of logits[N,V]: probs[N,V]
     * receives the softmax, losses[N] the per-row -log p[target]. A target
     * < 0 is not counted (a masked position: a prompt token, padding): its
     * row's loss is 0 (its probs are still written). */
    zt_status (*crossentropy_forward)(const struct ops_backend *self, enum zt_dtype t,
                                      float *losses, void *probs, const void *logits,
                                      const int32_t *targets, int N, int V);
    /* dlogits += (probs - onehot(target)) * dloss for every row whose
     * target is >= 0; a row with a target < 0 gets nothing (dloss is the
     * same scalar for all rows: the caller's normalisation times any
     * scaling). */
    zt_status (*crossentropy_backward)(const struct ops_backend *self, enum zt_dtype t,
                                       void *dlogits, const void *probs, const int32_t *targets,
                                       float dloss, int N, int V);

    /* Cross-entropy over logits split by vocabulary (Megatron's
     * vocab_parallel_cross_entropy): each tensor-parallel rank holds columns
     * [v_lo, v_lo + Vp) of the logits as logits[N,Vp], and no rank ever holds
     * a full row. crossentropy_forward becomes three ops with a reduction
     * over the ranks after each of the first two: max, allreduce MAX of
     * row_max[N]; exp, allreduce SUM of row_stats[2N]; finish. Targets are
     * global vocabulary indices (< 0: masked, as crossentropy_forward).
     * With one part (v_lo = 0, Vp = V) and no reduction the three give
     * crossentropy_forward's losses and probs, and crossentropy_vocab_backward
     * crossentropy_backward's dlogits. Vp >= 1, v_lo >= 0.
     *
     * Only the first Vr columns (0 <= Vr <= Vp) of a rank's are the
     * vocabulary; the rest are a padded vocabulary's padding
     * (worker/tensor_parallel.h), whatever their logits: left out of the
     * max and the sum, they get probability 0, so the backward gives them
     * no gradient. Vr = Vp: no padding. */

    /* row_max[i] = the largest of logits[i, 0..Vr) (this rank's columns;
     * -infinity when Vr is 0). */
    zt_status (*crossentropy_vocab_max)(const struct ops_backend *self, enum zt_dtype t,
                                        float *row_max, const void *logits, int N, int Vp, int Vr);
    /* Given the global row_max: probs[i,j] = e^(logits[i,j] - row_max[i])
     * for j < Vr and 0 past it, not yet normalised; row_stats[i] = the sum
     * of probs[i,:] (as crossentropy_forward sums); row_stats[N + i] =
     * logits[i, t - v_lo] - row_max[i] when t = targets[i] lies in [v_lo,
     * v_lo + Vr), else 0 (so the sum over ranks is the target's shifted
     * logit). */
    zt_status (*crossentropy_vocab_exp)(const struct ops_backend *self, enum zt_dtype t,
                                        void *probs, float *row_stats, const void *logits,
                                        const float *row_max, const int32_t *targets, int N, int Vp,
                                        int Vr, int v_lo);
    /* Given the summed row_stats: probs[i,:] *= 1 / row_stats[i] (the
     * softmax on this rank's columns, in place); losses[i] =
     * log(row_stats[i]) - row_stats[N + i], or 0 when targets[i] < 0 (probs
     * still written). */
    zt_status (*crossentropy_vocab_finish)(const struct ops_backend *self, enum zt_dtype t,
                                           float *losses, void *probs, const float *row_stats,
                                           const int32_t *targets, int N, int Vp);
    /* crossentropy_backward on this rank's columns: for every row whose
     * target is >= 0, dlogits[i,:] += probs[i,:] * dloss, less dloss at the
     * target's column when the target lies in [v_lo, v_lo + Vp); a row with
     * a target < 0 gets nothing. No reduction follows. */
    zt_status (*crossentropy_vocab_backward)(const struct ops_backend *self, enum zt_dtype t,
                                             void *dlogits, const void *probs,
                                             const int32_t *targets, float dloss, int N, int Vp,
                                             int v_lo);

    /* ---- engine ops: the optimizer step over flat buffers ------------------ */

    /* Working precision (t = ZT_F32, ZT_BF16 or ZT_F16) to fp32:
     * dst[i] = src[i] as float, exactly (precision_to_f32). */
    zt_status (*to_f32)(const struct ops_backend *self, enum zt_dtype t, const void *src,
                        float *dst, size_t n);
    /* fp32 to working precision: dst[i] = src[i] rounded to nearest even in
     * t; beyond fp16's range gives infinity (precision_from_f32). */
    zt_status (*from_f32)(const struct ops_backend *self, enum zt_dtype t, const float *src,
                          void *dst, size_t n);
    /* dst[i] = round_t(dst[i] + src[i]), both in working precision t, the sum
     * taken in fp32 (precision_add_into). */
    zt_status (*add_into)(const struct ops_backend *self, enum zt_dtype t, void *dst,
                          const void *src, size_t n);
    /* *out = sum over i of (src[i] * scale)^2, products and sum in double,
     * src in working precision t (precision_sum_squares). *out is a host
     * double; a non-finite element makes it non-finite. The order of the
     * sum is the backend's (the CPU's vector kernels keep several partial
     * sums), but fixed: the same input gives the same bits on every run
     * and every rank. */
    zt_status (*sum_squares)(const struct ops_backend *self, enum zt_dtype t, const void *src,
                             size_t n, double scale, double *out);
    /* x[i] *= s in fp32, in place: the gradient unscale and clip of the
     * whole-tensor optimizers (the element-wise ones fold it into the update). */
    zt_status (*scale)(const struct ops_backend *self, float *x, size_t n, float s);
    /* Sets `bytes` bytes at p to zero. */
    zt_status (*memset_zero)(const struct ops_backend *self, void *p, size_t bytes);
    /* The element-wise optimizers over one range, with the gradient's
     * conversion to fp32 and its scale by r->gscale before the rule and the
     * cast of the updated fp32 parameters into r->working after it fused
     * in (struct optimizer_range, worker/optimizer.h): each buffer is read
     * and written once, and no fp32 copy of 16-bit gradients is staged in
     * memory. The rule is that of adamw_update (states m, v), adam_update
     * (m, v), sgd_update (its momentum buffer, NULL without momentum) and
     * lion_update (m) in worker/optimizer.h, bit for bit. hp is a host
     * struct. */
    zt_status (*adamw_update)(const struct ops_backend *self, const struct optimizer_range *r,
                              const struct optimizer_hparams *hp);
    zt_status (*adam_update)(const struct ops_backend *self, const struct optimizer_range *r,
                             const struct optimizer_hparams *hp);
    zt_status (*sgd_update)(const struct ops_backend *self, const struct optimizer_range *r,
                            const struct optimizer_hparams *hp);
    zt_status (*lion_update)(const struct ops_backend *self, const struct optimizer_range *r,
                             const struct optimizer_hparams *hp);
    /* Adafactor's round and apply on one piece of a tensor
     * (adafactor_round / adafactor_apply in worker/optimizer.h); the piece's
     * stats and tensor_state are device memory like its other buffers (the
     * engine reduces the stats across ranks with comm_allreduce). */
    zt_status (*adafactor_round)(const struct ops_backend *self, int round,
                                 const struct optimizer_piece *pc,
                                 const struct optimizer_hparams *hp);
    zt_status (*adafactor_apply)(const struct ops_backend *self, const struct optimizer_piece *pc,
                                 const struct optimizer_hparams *hp);
    /* 8-bit AdamW's round and apply (adamw8bit_round / adamw8bit_apply). */
    zt_status (*adamw8bit_round)(const struct ops_backend *self, int round,
                                 const struct optimizer_piece *pc,
                                 const struct optimizer_hparams *hp);
    zt_status (*adamw8bit_apply)(const struct ops_backend *self, const struct optimizer_piece *pc,
                                 const struct optimizer_hparams *hp);
};

/* The instruction sets the CPU backend's engine ops are built for. */
enum ops_cpu_isa {
    OPS_CPU_GENERIC, /* plain C: any CPU */
    OPS_CPU_AVX2,    /* x86-64 with AVX2, FMA and F16C */
    OPS_CPU_ISA_COUNT
};

/* The CPU op table (worker/cpu/) whose engine ops use the widest
 * instruction set this build has and this CPU runs, chosen on each call
 * from the CPU's features alone (so every call in a process returns the
 * same table); static, never NULL. */
const struct ops_backend *ops_cpu_backend(void);

/* The CPU op table whose engine ops use instruction set `isa`, or NULL when
 * this build lacks it or this CPU cannot run it; `why` (n bytes, may be
 * NULL) then says which. The model ops are the same in every table. For
 * tests and benchmarks, which compare the instruction sets. */
const struct ops_backend *ops_cpu_backend_isa(enum ops_cpu_isa isa, char *why, size_t n);

/* "generic", "avx2". */
const char *ops_cpu_isa_name(enum ops_cpu_isa isa);

/* Sets how many threads the CPU ops and the BLAS library may use (>= 1). */
void ops_cpu_set_threads(int n);

/* A copy of ops_cpu_backend()'s table whose ctx keeps the GEMM kernels it
 * builds (worker/cpu/gemm.h; library from ZT_CPU_GEMM, else oneDNN where
 * it has a kernel, else OpenBLAS). Released by ops_cpu_close. Errors:
 * those of cpu_gemm_create. */
zt_status ops_cpu_open(const struct ops_backend **out);
/* Releases what ops_cpu_open made; accepts NULL. */
void ops_cpu_close(const struct ops_backend *ops);

#endif
