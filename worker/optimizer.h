/* worker/optimizer.h — AdamW on a range of the flat parameter space.
 *
 * Device-independent math in plain C so that every backend and every ZeRO
 * stage runs the same update on whichever range a rank owns. Weight decay
 * is decoupled (AdamW, Loshchilov & Hutter) and, as in GPT-2 training
 * practice (nanoGPT, Hugging Face), applied only to 2-D tensors (matrices
 * and embeddings), never to biases and LayerNorm parameters: the caller
 * passes a per-element decay mask through `decay_ranges`.
 */
#ifndef ZT_WORKER_OPTIMIZER_H
#define ZT_WORKER_OPTIMIZER_H

#include <stddef.h>

struct adamw_hparams {
    float lr, beta1, beta2, eps, weight_decay;
    long step; /* 1-based count of updates including this one (bias correction) */
};

/* Updates params[0..n) in place from grads (already averaged, clipped and
 * unscaled), moments m and v. `decay` is 1.0f to apply weight decay to
 * the whole range, 0.0f for none. */
void adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float decay,
                  const struct adamw_hparams *hp);

#endif
