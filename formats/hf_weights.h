/* formats/hf_weights.h — Hugging Face weights in and out, for any model
 * family that has a mapping.
 *
 * Each family's Hugging Face layout (tensor names, transposes, which
 * tensors a file may carry besides the parameters) is one entry of a
 * static table, found by the family's name: GPT-2's is formats/hf_gpt2.h,
 * Llama's formats/hf_llama.h. The coordinator imports (model.init_from)
 * and exports (zerotrain export) through this header only, so a new
 * family's mapping is one entry in hf_weights.c and a file beside
 * hf_gpt2.c; the mechanism below is the same for every family.
 *
 * Files. Weights are read from and written to one safetensors file or a
 * sharded set with its index, as Hugging Face saves them
 * (formats/safetensors_set.h): import takes a .safetensors file, a
 * model.safetensors.index.json, or a save_pretrained folder holding
 * either; export cuts the model into shards of at most max_shard_bytes as
 * save_pretrained does.
 *
 * Import is shaped for a sharded model: hf_weights_open checks the whole
 * file against the parameter table once, in two sweeps (our tensors
 * against the file: each present under its Hugging Face name, in the
 * right shape, a float dtype; then the file's tensors against ours:
 * nothing left over but what the family's files carry besides their
 * parameters), so that a mismatch is a configuration error naming the
 * config key before any rank reads a byte of data; then each rank reads
 * only ranges of OUR flat space. Tensors stored in our layout are read
 * straight from their shard, only the bytes needed. A transposed tensor
 * (GPT-2's Conv1D weights) cannot be read by ranges without gathering
 * strided elements, so it is read whole, turned into our layout, and kept
 * until a range leaves it: a rank walking its shard in order reads each
 * such tensor once. The buffers for it (the largest transposed tensor and
 * a tile) are allocated at open, so a caller can count them, and are all
 * the memory a reader holds beyond the files' headers.
 */
#ifndef ZT_FORMATS_HF_WEIGHTS_H
#define ZT_FORMATS_HF_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/dtype.h"
#include "../common/status.h"
#include "../worker/model_family.h"

/* Hugging Face's default max_shard_size, "5GB", in bytes. */
#define HF_WEIGHTS_DEFAULT_MAX_SHARD 5000000000ull

/* Writes the full model (`params`: t->n_params fp32 values in our flat
 * order, not modified, not kept) as Hugging Face weights of t's family at
 * `path`: tensors in our order under their Hugging Face names and
 * layouts, every tensor stored as `dtype` (ZT_F32, ZT_F16 or ZT_BF16,
 * rounded to nearest even), metadata {"format": "pt", "producer":
 * "zerotrain"} in every file. A model of more than max_shard_bytes bytes
 * (0: no limit) is written as shards and an index beside `path` (see
 * safetensors_set.h), else as the single file `path`; *n_shards (if not
 * NULL) gets the number of files. Every file appears complete or not at
 * all. Statuses: ZT_ERR_UNSUPPORTED (a family without a mapping, naming
 * it; another dtype), ZT_ERR_IO, ZT_ERR_NOMEM. */
zt_status hf_weights_export(const struct param_table *t, const float *params, enum zt_dtype dtype,
                            const char *path, uint64_t max_shard_bytes, int *n_shards);

/* Writes `dir`/config.json as save_pretrained does for t's family: the
 * architecture, the shape under the config class's names and torch_dtype
 * (`dtype`'s name: "float32", "bfloat16", "float16"), so that
 * from_pretrained(dir) builds the model the weights beside it fill. The
 * file appears complete or not at all. Statuses: ZT_ERR_UNSUPPORTED (a
 * family without a mapping), ZT_ERR_IO. */
zt_status hf_weights_write_config(const struct param_table *t, enum zt_dtype dtype,
                                  const char *dir);

/* The text hf_weights_write_config writes, into text[n] (n at least
 * HF_WEIGHTS_CONFIG_MAX), its length in *len: what an existing
 * config.json is compared with. Statuses: ZT_ERR_UNSUPPORTED. */
#define HF_WEIGHTS_CONFIG_MAX 4096
zt_status hf_weights_config_text(const struct param_table *t, enum zt_dtype dtype, char *text,
                                 size_t n, size_t *len);

/* Writes `dir`/generation_config.json as save_pretrained does: the
 * begin- and end-of-text ids generation starts from and stops at (each
 * left out when < 0), so that generate() of the loaded model stops where
 * the tokenizer ends a text. Whole or not at all. Statuses: ZT_ERR_IO. */
zt_status hf_weights_write_generation_config(const char *dir, int64_t bos_id, int64_t eos_id);

/* An open Hugging Face file or set checked against a parameter table. Not
 * for use from several threads at once (it keeps the last transposed
 * tensor read). */
struct hf_weights_reader;

/* Opens `path` (a file, an index or a folder) as Hugging Face weights of
 * t's family (t must outlive the reader) and checks it holds exactly the
 * tensors of t, each under its Hugging Face name with or without the
 * base model's prefix, in the Hugging Face shape, in a float dtype; the
 * tensors the family's files carry besides the parameters may be present
 * too. *out is the reader, or NULL on error. Statuses: ZT_ERR_UNSUPPORTED
 * (no mapping for the family); ZT_ERR_CONFIG for a tensor missing, of
 * another shape or not part of the model, with a message naming the file,
 * the tensor, the shapes and the config key(s) the file contradicts
 * ("m.safetensors: wte.weight has shape [50257, 768] but the config says
 * model.vocab_size 256, model.n_embd 32 (expected [256, 32])"; a missing
 * or extra layer names model.n_layer and the file's layer count);
 * ZT_ERR_DATA for an integer tensor or one present under both name
 * forms; ZT_ERR_NOMEM (the transposition buffers included); and those of
 * safetensors_set_open. */
zt_status hf_weights_open(const char *path, const struct param_table *t,
                          struct hf_weights_reader **out);

/* Reads elements [begin, end) of OUR flat parameter space (any range,
 * across tensors and shards) as fp32 into dst[0 .. end - begin), in our
 * layout. F16 and BF16 files read exactly. Statuses: ZT_ERR_USAGE (begin >
 * end or end beyond t->n_params), and those of safetensors_read_f32. */
zt_status hf_weights_read(struct hf_weights_reader *r, size_t begin, size_t end, float *dst);

/* Bytes of the reader's transposition buffers (0 when the file stores no
 * tensor transposed). */
size_t hf_weights_buffer_bytes(const struct hf_weights_reader *r);

/* The same for a reader of t's weights, before any file is opened (which
 * tensors are stored transposed is the family's mapping's, not the
 * file's): what a dry run and the planner count. 0 for a family without
 * a mapping. */
size_t hf_weights_buffer_bytes_of(const struct param_table *t);

/* Rows the reader takes of a transposed tensor's file side at a time. */
#define HF_WEIGHTS_TILE_ROWS 64

/* The reader's transposition of one tile: nc <= HF_WEIGHTS_TILE_ROWS rows
 * of a file's [cols, rows] tensor, from its row c0, into columns
 * c0..c0+nc of our [rows, cols] `out` (calibrate times it). */
void hf_weights_scatter_tile(const float *tile, size_t nc, size_t rows, size_t cols, size_t c0,
                             float *out);

/* Closes the files and frees the reader. NULL is allowed. */
void hf_weights_close(struct hf_weights_reader *r);

/* Module paths in the Hugging Face model, what PEFT's target_modules and
 * adapter names refer to: for each of our tensors k < t->n_tensors that is
 * a linear layer's weight (param_tensor.linear), *names[k] is its
 * state-dict name without ".weight" ("transformer.h.0.attn.c_attn",
 * "model.layers.0.self_attn.q_proj", "lm_head"); NULL for the others.
 * *names is one allocation the caller frees with free(). Statuses:
 * ZT_ERR_UNSUPPORTED (no mapping for the family), ZT_ERR_NOMEM. */
zt_status hf_weights_module_names(const struct param_table *t, char ***names);

/* Names in messages and reports. The state-dict name a *ForCausalLM
 * model gives our tensor k ("transformer.h.3.attn.c_attn.weight",
 * "lm_head.weight"), and the module path of block l ("transformer.h.3",
 * "model.layers.3"), into name[0..n) (truncated to fit): 1, or 0 with name
 * untouched when the family has no mapping or k is not one of the
 * family's own tensors (a LoRA adapter's). Set no error message. */
int hf_weights_tensor_name(const struct param_table *t, int k, char *name, size_t n);
int hf_weights_block_name(const struct param_table *t, int l, char *name, size_t n);

/* PEFT's default target_modules for the family called `family` (its
 * architecture's entry in PEFT's table), NULL-terminated and static; NULL
 * when the family has no mapping. */
const char *const *hf_weights_lora_targets(const char *family);

/* Whether Hugging Face stores our tensor k transposed ([in, out]: GPT-2's
 * Conv1D weights), what PEFT's fan_in_fan_out says of an adapted layer.
 * Statuses: ZT_ERR_UNSUPPORTED (no mapping for the family). */
zt_status hf_weights_transposed(const struct param_table *t, int k, int *transposed);

#endif
