/* worker/ops.h — the compute backend table: every op of the GPT-2 model.
 *
 * The model (worker/model.c) calls ops only through a `struct ops_backend`,
 * so a CUDA backend slots in beside the CPU one without touching the model.
 * Shapes follow llm.c: activations are row-major [N, C] with N = B*T rows;
 * weight matrices are [OC, C] (out features, in features), so a linear layer
 * is out = inp @ w^T + bias.
 *
 * Conventions shared by every backend:
 * - Forward ops overwrite their outputs.
 * - Backward ops ACCUMULATE (+=) into every gradient they produce, both the
 *   parameter gradients and the input gradients; callers zero what must start
 *   at zero. This lets gradient accumulation and residual branches share one
 *   buffer without extra copies.
 * - Pointers are device pointers of the backend's device; the CPU backend's
 *   device pointers are ordinary host pointers.
 * - No op allocates; scratch comes from the caller.
 */
#ifndef ZT_WORKER_OPS_H
#define ZT_WORKER_OPS_H

#include <stddef.h>
#include <stdint.h>

struct ops_backend {
    const char *name; /* "cpu", "cuda" */

    /* out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]. */
    void (*encoder_forward)(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                            int B, int T, int C);
    /* dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:]. */
    void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                             int B, int T, int C);

    /* LayerNorm over the last dimension (eps 1e-5, biased variance);
     * saves per-row mean and 1/std for the backward. */
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C);
    void (*layernorm_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C);

    /* out[N,OC] = inp[N,C] @ weight[OC,C]^T (+ bias[OC] unless bias is NULL). */
    void (*matmul_forward)(float *out, const float *inp, const float *weight, const float *bias,
                           int N, int C, int OC);
    /* dinp += dout @ weight; dweight += dout^T @ inp; dbias += column sums of
     * dout (skipped when dbias is NULL). */
    void (*matmul_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC);

    /* Causal multi-head self-attention. qkv[B,T,3C] holds q, k, v side by
     * side (head h uses columns h*hs..(h+1)*hs-1 of each, hs = C/NH);
     * out[B,T,C]; att[B,NH,T,T] receives the softmax probabilities (entries
     * above the diagonal are written as 0) and is kept for the backward. */
    void (*attention_forward)(float *out, float *att, const float *qkv, int B, int T, int C,
                              int NH);
    /* dqkv += gradient of the attention w.r.t. qkv; scratch is caller
     * memory of at least B*NH*T*T floats, contents undefined on return. */
    void (*attention_backward)(float *dqkv, float *scratch, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH);

    /* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
    void (*gelu_forward)(float *out, const float *inp, int N);
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, int N);

    /* out = a + b, elementwise over N floats. */
    void (*residual_forward)(float *out, const float *a, const float *b, int N);

    /* Fused softmax + cross-entropy over rows of logits[N,V]: probs[N,V]
     * receives the softmax, losses[N] the per-row -log p[target]. */
    void (*crossentropy_forward)(float *losses, float *probs, const float *logits,
                                 const int32_t *targets, int N, int V);
    /* dlogits += (probs - onehot(target)) * dloss for every row (dloss is
     * the same scalar for all rows: the mean's 1/N times any scaling). */
    void (*crossentropy_backward)(float *dlogits, const float *probs, const int32_t *targets,
                                  float dloss, int N, int V);
};

/* The CPU backend (worker/cpu/). Never NULL. */
const struct ops_backend *ops_cpu_backend(void);

/* Sets how many threads the CPU ops and the BLAS library may use (>= 1). */
void ops_cpu_set_threads(int n);

#endif
