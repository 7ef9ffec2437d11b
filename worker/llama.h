/* worker/llama.h — the Llama-style decoder family (Llama, Mistral, Qwen
 * share its layout): RMSNorm, rotary position embedding, grouped-query
 * attention, SwiGLU MLP, no biases.
 *
 * The flat parameter space is cut into units as GPT-2's is (worker/model.h):
 *   unit 0          embed_tokens.weight [V,C]
 *   unit 1..L       layers.{l}: input_layernorm.weight [C],
 *                   self_attn.{q,k,v}_proj.weight [NH*hs | NKV*hs | NKV*hs, C],
 *                   self_attn.o_proj.weight [C, NH*hs],
 *                   post_attention_layernorm.weight [C],
 *                   mlp.{gate,up}_proj.weight [I,C], mlp.down_proj.weight [C,I]
 *   unit L+1        norm.weight [C], then lm_head.weight [V,C] unless the
 *                   head is tied to embed_tokens
 * with hs = C / NH. Tensor names are Hugging Face's without the "model."
 * prefix, so the file mapping (formats/hf_llama.c) is a prefix, not a
 * table. q, k and v sit side by side, as do gate and up: each pair or
 * triple is one [rows, C] matrix for the matmul op, so a block runs one
 * projection for attention and one for the MLP's two inputs.
 *
 * Pass order: forward 0, 1..L, L+1 (and 0 again for a tied head);
 * backward L+1, L..1 for an untied head, whose embedding gradient needs no
 * parameters (only unit 0's gradient buffer, borrowed at the very end);
 * with a tied head the backward starts at unit 0 as GPT-2's does and keeps
 * its gradient borrowed to the end.
 *
 * Everything here is reached through `llama_family` and model_family.h;
 * only Llama-specific code (the config's shape, the Hugging Face reader,
 * the family's tests) names these declarations.
 */
#ifndef ZT_WORKER_LLAMA_H
#define ZT_WORKER_LLAMA_H

#include "../common/status.h"
#include "model_family.h"

struct llama_config {
    int vocab_size, block_size, n_layer, n_head, n_kv_head, n_embd, intermediate_size;
    int tie_word_embeddings; /* 1: the head is embed_tokens */
    double rope_theta, rms_norm_eps;
    int attention_bias; /* 1: q, k and v have biases (Qwen2) */
};

/* The family's table of operations ("llama"). */
extern const struct model_family llama_family;

/* Llama's shape as its family describes it: kind "llama" with vocab_size,
 * block_size, n_layer, n_head, n_kv_head, n_embd, intermediate_size,
 * tie_word_embeddings (integers), rope_theta, rms_norm_eps (reals), and
 * attention_bias 1 when the model has q, k and v biases (absent: none). */
void llama_describe(const struct llama_config *cfg, struct zt_kvlist *shape);

/* The config of a "llama" shape: every key present, integers in range,
 * n_embd a multiple of n_head, n_head of n_kv_head, an even head size,
 * rope_theta and rms_norm_eps positive. Errors: ZT_ERR_CHECKPOINT naming
 * the key. */
zt_status llama_config_from_shape(const struct zt_kvlist *shape, struct llama_config *out);

/* The config of a Llama table. */
struct llama_config llama_config_of(const struct param_table *t);

#endif
