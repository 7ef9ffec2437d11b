/* formats/hf_gpt2.h — zerotrain's GPT-2 parameters as a Hugging Face
 * GPT-2 safetensors file, both ways.
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
 *
 * Import is shaped for a sharded model: hf_gpt2_open checks the whole file
 * against the parameter table once, so that a mismatch is a configuration
 * error naming the config key before any rank reads a byte of data; then
 * each rank reads only its range of OUR flat space. Untransposed tensors
 * are read straight from the file, only the bytes needed. A transposed
 * tensor cannot be read by ranges without gathering strided elements, so it
 * is read whole, turned into our layout, and kept until a range leaves it:
 * a rank walking its shard in order reads each such tensor once.
 */
#ifndef ZT_FORMATS_HF_GPT2_H
#define ZT_FORMATS_HF_GPT2_H

#include <stddef.h>

#include "../common/dtype.h"
#include "../common/status.h"
#include "../worker/model.h"

/* Writes the Hugging Face name of our tensor k (0 <= k < t->n_tensors) to
 * name[0..n) (truncated to fit, always NUL-terminated when n > 0), and sets
 * *transposed to 1 for the four Conv1D weights of a block, 0 otherwise. */
void hf_gpt2_name(const struct param_table *t, int k, char *name, size_t n, int *transposed);

/* Writes the full model, `params` being t->n_params fp32 values in our
 * flat order (not modified, not kept), as a Hugging Face GPT-2 safetensors
 * file at `path`: tensors in our order, HF names and layouts, every tensor
 * stored as `dtype` (ZT_F32, ZT_F16 or ZT_BF16, rounded to nearest even),
 * metadata {"format": "pt", "producer": "zerotrain"}. The file appears
 * complete or not at all (see safetensors_writer_finish). Statuses:
 * ZT_ERR_UNSUPPORTED (another dtype), ZT_ERR_IO, ZT_ERR_NOMEM. */
zt_status hf_gpt2_export(const struct param_table *t, const float *params, enum zt_dtype dtype,
                         const char *path);

/* An open Hugging Face GPT-2 file checked against a parameter table. Not
 * for use from several threads at once (it keeps the last transposed
 * tensor read). */
struct hf_gpt2_reader;

/* Opens `path` and checks that it holds exactly the tensors of t (which
 * must outlive the reader), each under its HF name with or without the
 * "transformer." prefix, in HF shape, in a float dtype; the ignored names
 * above may be present too. *out is the reader, or NULL on error.
 * Statuses: ZT_ERR_CONFIG for a tensor missing, of another shape or not
 * part of the model, with a message naming the file, the tensor, the
 * shapes and the config key(s) the file contradicts ("m.safetensors:
 * wte.weight has shape [50257, 768] but the config says model.vocab_size
 * 256, model.n_embd 32 (expected [256, 32])"); ZT_ERR_DATA for an integer
 * tensor or one present under both name forms; ZT_ERR_NOMEM; and those of
 * safetensors_open. */
zt_status hf_gpt2_open(const char *path, const struct param_table *t, struct hf_gpt2_reader **out);

/* Reads elements [begin, end) of OUR flat parameter space (any range,
 * across tensors) as fp32 into dst[0 .. end - begin), in our layout. F16
 * and BF16 files read exactly. Statuses: ZT_ERR_USAGE (begin > end or end
 * beyond t->n_params), ZT_ERR_NOMEM (the first transposed tensor's
 * buffers), and those of safetensors_read_f32. */
zt_status hf_gpt2_read(struct hf_gpt2_reader *r, size_t begin, size_t end, float *dst);

/* Closes the file and frees the reader. NULL is allowed. */
void hf_gpt2_close(struct hf_gpt2_reader *r);

#endif
