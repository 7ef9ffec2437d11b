/* formats/hf_llama.h — how zerotrain's Llama parameters are named in
 * Hugging Face's LlamaForCausalLM state dict: the Llama entry of the
 * mappings behind formats/hf_weights.h, which reads and writes the files.
 *
 * The two layouts are the same but for a prefix: our names are the state
 * dict's without "model.", which the head's name never had. Every matrix
 * is nn.Linear's [out, in] in both, so nothing is transposed and import
 * reads every range straight from the file:
 *
 *   ours (flat order)                         Hugging Face                    shape
 *   embed_tokens.weight                       model.embed_tokens.weight       [V, C]
 *   layers.i.input_layernorm.weight           model.layers.i.(same)           [C]
 *   layers.i.self_attn.q_proj.weight          model.layers.i.(same)           [NH*hs, C]
 *   layers.i.self_attn.{k,v}_proj.weight      model.layers.i.(same)           [NKV*hs, C]
 *   layers.i.self_attn.o_proj.weight          model.layers.i.(same)           [C, NH*hs]
 *   layers.i.post_attention_layernorm.weight  model.layers.i.(same)           [C]
 *   layers.i.mlp.{gate,up}_proj.weight        model.layers.i.(same)           [I, C]
 *   layers.i.mlp.down_proj.weight             model.layers.i.(same)           [C, I]
 *   norm.weight                               model.norm.weight               [C]
 *   lm_head.weight (untied models only)       lm_head.weight                  [V, C]
 * (V = model.vocab_size, C = model.n_embd, NH = model.n_head, NKV =
 * model.n_kv_head, hs = C / NH, I = model.intermediate_size.) Vectors are
 * 1-D in the file.
 *
 * Export writes LlamaForCausalLM's names ("model." prefix, a bare
 * lm_head.weight), and for a tied model (tie_word_embeddings) no
 * lm_head.weight, as save_pretrained leaves out tied weights. Import also
 * accepts LlamaModel's unprefixed names, and skips what Llama files carry
 * besides the parameters: the rotary buffer
 * "model.layers.i.self_attn.rotary_emb.inv_freq" (older transformers), and
 * in a tied model an lm_head.weight (some files carry the head they tie).
 * A mismatch names the key behind the dimension: model.vocab_size,
 * model.n_embd, model.n_head (q_proj's rows, o_proj's columns),
 * model.n_kv_head (k_proj's and v_proj's rows), model.intermediate_size,
 * model.n_layer (a layer missing or extra) or model.tie_word_embeddings
 * (an untied model's head missing).
 */
#ifndef ZT_FORMATS_HF_LLAMA_H
#define ZT_FORMATS_HF_LLAMA_H

/* Llama's entry of the mappings (formats/hf_weights_impl.h). */
struct hf_mapping;
extern const struct hf_mapping hf_llama_mapping;

#endif
