/* formats/hf_gpt2.h — how zerotrain's GPT-2 parameters are named and laid
 * out in Hugging Face's GPT-2 state dict: the GPT-2 entry of the mappings
 * behind formats/hf_weights.h, which reads and writes the files.
 *
 * The two layouts hold the same tensors under different names, and four
 * of them transposed. Hugging Face's GPT2Model state dict names the fused
 * attention and the MLP after OpenAI's Conv1D modules, which store their
 * weight [in, out]; our matrices are nn.Linear's [out, in]:
 *
 *   ours (flat order)             Hugging Face                layout
 *   wte.weight [V,C]              wte.weight [V,C]            same
 *   wpe.weight [T,C]              wpe.weight [T,C]            same
 *   h.i.ln_1.{weight,bias} [C]    h.i.ln_1.{weight,bias}      same
 *   h.i.attn.qkv.weight [3C,C]    h.i.attn.c_attn.weight      [C,3C], transposed
 *   h.i.attn.qkv.bias [3C]        h.i.attn.c_attn.bias        same
 *   h.i.attn.proj.weight [C,C]    h.i.attn.c_proj.weight      [C,C], transposed
 *   h.i.attn.proj.bias [C]        h.i.attn.c_proj.bias        same
 *   h.i.ln_2.{weight,bias} [C]    h.i.ln_2.{weight,bias}      same
 *   h.i.mlp.fc.weight [4C,C]      h.i.mlp.c_fc.weight         [C,4C], transposed
 *   h.i.mlp.fc.bias [4C]          h.i.mlp.c_fc.bias           same
 *   h.i.mlp.proj.weight [C,4C]    h.i.mlp.c_proj.weight       [4C,C], transposed
 *   h.i.mlp.proj.bias [C]         h.i.mlp.c_proj.bias         same
 *   ln_f.{weight,bias} [C]        ln_f.{weight,bias}          same
 * (T = model.block_size, HF's n_positions.) The fused qkv splits into q, k,
 * v along the output dimension in both. Vectors are 1-D in the file.
 *
 * Export writes the HF names without a prefix (GPT2Model's state dict,
 * which GPT2LMHeadModel.from_pretrained also loads) and no lm_head: the
 * head is tied to wte. Import also accepts GPT2LMHeadModel's
 * "transformer."-prefixed names, and skips what such files carry besides
 * the parameters: "lm_head.weight" (tied) and the attention buffers
 * "h.i.attn.bias" and "h.i.attn.masked_bias" (causal mask constants).
 * A mismatch names model.vocab_size (wte's rows), model.block_size (wpe's
 * rows), model.n_layer, or model.n_embd (every other dimension).
 */
#ifndef ZT_FORMATS_HF_GPT2_H
#define ZT_FORMATS_HF_GPT2_H

#include <stddef.h>

#include "../worker/model_family.h"

/* Writes the Hugging Face name of our tensor k (0 <= k < t->n_tensors) to
 * name[0..n) (truncated to fit, always NUL-terminated when n > 0), and sets
 * *transposed to 1 for the four Conv1D weights of a block, 0 otherwise. */
void hf_gpt2_name(const struct param_table *t, int k, char *name, size_t n, int *transposed);

/* GPT-2's entry of the mappings (formats/hf_weights_impl.h). */
struct hf_mapping;
extern const struct hf_mapping hf_gpt2_mapping;

#endif
