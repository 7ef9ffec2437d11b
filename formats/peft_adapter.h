/* formats/peft_adapter.h — LoRA adapters as PEFT saves them: a folder
 * holding adapter_model.safetensors and adapter_config.json, what
 * PeftModel.save_pretrained writes and PeftModel.from_pretrained reads.
 *
 * Names and shapes. The adapters of the module whose weight our tensor k
 * is (formats/hf_weights.h, hf_weights_module_names: "transformer.h.0.
 * attn.c_attn") are "base_model.model.<module>.lora_A.weight" [r, in] and
 * ".lora_B.weight" [out, r]: PEFT's own layout for nn.Linear and GPT-2's
 * Conv1D alike (its lora_A and lora_B are nn.Linear layers whatever the
 * base layer is), which is ours, so nothing is transposed. Only
 * adapter_config.json's fan_in_fan_out says that a Conv1D base stores its
 * weight [in, out].
 *
 * adapter_config.json is written as PEFT writes it (json.dumps with
 * indent 2 and sorted keys), with the keys every PEFT version reads and
 * nothing newer versions added, so that old and new PEFT load it: peft_type
 * LORA, task_type CAUSAL_LM, r, lora_alpha, lora_dropout, target_modules,
 * bias none, fan_in_fan_out, inference_mode, init_lora_weights,
 * modules_to_save null and base_model_name_or_path. Reading takes r,
 * lora_alpha and target_modules (a list, or one name) and refuses what
 * would make another model of the same tensors: a peft_type other than
 * LORA, a bias other than none, use_rslora or use_dora true.
 *
 * Reading is shaped like formats/hf_weights.h's: peft_adapter_open checks
 * the folder against the table once (the config against the run's spec,
 * every adapter tensor present in its shape and a float dtype, nothing
 * else in the file), then ranges of OUR flat space are read, so that each
 * rank reads only what it holds.
 *
 * Both files of a folder are written whole or not at all
 * (common/atomic_file.h), the weights first: a folder whose config is
 * there has the weights that go with it.
 */
#ifndef ZT_FORMATS_PEFT_ADAPTER_H
#define ZT_FORMATS_PEFT_ADAPTER_H

#include <stddef.h>

#include "../common/dtype.h"
#include "../common/status.h"
#include "../worker/lora.h"
#include "../worker/model_family.h"

#define PEFT_ADAPTER_WEIGHTS "adapter_model.safetensors"
#define PEFT_ADAPTER_CONFIG  "adapter_config.json"

/* Writes the adapters of t (params: t->n_params fp32 values in t's flat
 * order; only the adapters' are read) into the existing folder `dir`:
 * PEFT_ADAPTER_WEIGHTS with every adapter as `dtype` (ZT_F32, ZT_F16 or
 * ZT_BF16, rounded to nearest even) and metadata {"format": "pt"}, then
 * PEFT_ADAPTER_CONFIG describing `spec` (its target_modules as given, but
 * "all-linear" as the last names of the adapted modules, which PEFT saves
 * for it) and base_model (NULL: null). Statuses: ZT_ERR_UNSUPPORTED (a family without
 * a Hugging Face mapping; another dtype), ZT_ERR_IO, ZT_ERR_NOMEM. */
zt_status peft_adapter_write(const char *dir, const struct param_table *t, const float *params,
                             enum zt_dtype dtype, const struct lora_spec *spec,
                             const char *base_model);

/* What an adapter folder's adapter_config.json says, for a reader that
 * has no config of its own (zerotrain generate ADAPTER_DIR). Owned:
 * peft_adapter_config_free. */
struct peft_adapter_config {
    struct lora_spec spec; /* r, lora_alpha, lora_dropout, target_modules */
    char *base;            /* base_model_name_or_path; NULL when null */
    char **targets;        /* spec.targets' strings */
};

/* Reads DIR/adapter_config.json into *out, refusing what peft_adapter_open
 * refuses (another peft_type, use_rslora, use_dora, a bias). Errors:
 * ZT_ERR_CONFIG naming the file and the key, ZT_ERR_UNSUPPORTED,
 * ZT_ERR_NOMEM. On error *out is zeroed. */
zt_status peft_adapter_read_config(const char *dir, struct peft_adapter_config *out);
void peft_adapter_config_free(struct peft_adapter_config *c);

/* An adapter folder checked against a table; not for several threads. */
struct peft_adapter_reader;

/* Opens the adapter folder `dir` for t (a table with adapters, which must
 * outlive the reader) and checks it: adapter_config.json's r, lora_alpha
 * and target_modules (equal as sets, or selecting the same modules of t)
 * against `want` (ZT_ERR_CONFIG naming the file, the key and both values: "DIR/adapter_config.json:
 * r is 4, but the config says lora.r 8"); every adapter of t in PEFT_ADAPTER_WEIGHTS under its
 * name, in its shape, a float dtype, and no other tensor in the file
 * (ZT_ERR_CONFIG naming the file and the tensor). *out is the reader or
 * NULL. Statuses also: ZT_ERR_CONFIG for a folder without either file or
 * a config that is not JSON or lacks a key, ZT_ERR_UNSUPPORTED (a setting
 * zerotrain's adapters do not compute: use_rslora, use_dora, a bias),
 * ZT_ERR_DATA (a malformed safetensors file), ZT_ERR_IO, ZT_ERR_NOMEM. */
zt_status peft_adapter_open(const char *dir, const struct param_table *t,
                            const struct lora_spec *want, struct peft_adapter_reader **out);

/* Reads flat elements [begin, end) of t, all inside its adapters
 * (begin >= t->lora.n_base_params), as fp32 into dst[0 .. end - begin).
 * Statuses: ZT_ERR_USAGE (a range outside the adapters), and those of
 * safetensors_read_f32. */
zt_status peft_adapter_read(struct peft_adapter_reader *r, size_t begin, size_t end, float *dst);

/* Closes the file and frees r. NULL is allowed. */
void peft_adapter_close(struct peft_adapter_reader *r);

#endif
