/* config/config_impl.h — for config/config*.c only: the schema
 * half of the loader. config.c owns the load sequence (read, override,
 * fill, clean up on failure); config_schema.c owns the table of keys and
 * everything that needs to know them (defaults, types, ranges, cross-field
 * rules, the YAML writer), so that a key is described in exactly one place;
 * config_deepspeed.c owns DeepSpeed's keys that zerotrain accepts without
 * acting on them.
 */
#ifndef ZT_CONFIG_CONFIG_IMPL_H
#define ZT_CONFIG_CONFIG_IMPL_H

#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "yaml_tree.h"

/* Fills `cfg` (zeroed, with cfg->source set) from the defaults and the tree
 * `t`, whose root must be a map, and checks the cross-field rules. Strings
 * stored so far stay owned by cfg on failure (the caller frees it).
 * Errors: ZT_ERR_CONFIG, ZT_ERR_UNSUPPORTED, ZT_ERR_NOMEM. */
zt_status config_schema_fill(const struct yaml_tree *t, struct zt_config *cfg);

/* YAML scalars written so that they read back as they were: a string
 * double-quoted with '"', '\\' and control characters escaped, a double in
 * the shortest %g form that reads back as the same double. */
void config_write_quoted(FILE *f, const char *s);
void config_write_double(FILE *f, double x);

/* Lines of text collected one by one (the DeepSpeed settings a config gives
 * and zerotrain does not act on); text is NULL or NUL-terminated. */
struct config_notes {
    char *text;
    size_t len, cap;
    int count;
};

/* Appends `line` (newline-terminated) to n and counts it. Errors:
 * ZT_ERR_NOMEM. */
zt_status config_notes_append(struct config_notes *n, const char *line);

/* Asks config_deepspeed.c about the key at `path` (dotted), which has no
 * row in the schema: sets *known when it is one of DeepSpeed's keys. Such a
 * key is accepted; unless its value is null, means "off" or asks for what
 * zerotrain does anyway, one line "  WHERE: PATH (VALUE): what zerotrain
 * does instead" is appended to `notes`. Errors: ZT_ERR_CONFIG (a value of
 * the wrong type, e.g. a non-boolean overlap_comm), ZT_ERR_NOMEM. */
zt_status config_deepspeed_accept(const char *path, const struct yaml_tree_node *value,
                                  struct config_notes *notes, int *known);

/* The i-th of those DeepSpeed key paths, NULL past the last (for the
 * did-you-mean suggestions of unknown keys). */
const char *config_deepspeed_path(size_t i);

/* Writes the table of DeepSpeed's keys accepted without effect as a
 * Markdown section of the configuration reference. */
void config_deepspeed_write_reference(FILE *f);

/* Writes `s` as the text of a Markdown table cell: '|', '*' and backslash
 * escaped, '<' as "&lt;". */
void config_write_md_cell(FILE *f, const char *s);

/* Writes every stored key of `cfg` as YAML with one comment per key.
 * Errors: ZT_ERR_IO when the stream reports a write error. */
zt_status config_schema_write(const struct zt_config *cfg, FILE *f);

/* ---- config_hf.c: a Hugging Face config.json as model keys ---- */

#define CONFIG_HF_MAX 16

/* One model key a config.json gives: our key path and the file's name. */
struct config_hf_value {
    const char *path;   /* "model.n_embd" (static) */
    const char *hf_key; /* "hidden_size" (static) */
    double value;       /* booleans as 0 / 1 */
};

/* What a Hugging Face config.json says about a model. */
struct config_hf {
    char family[16];         /* the family its architecture is: "gpt2", "llama" */
    uint64_t sliding_window; /* Mistral's attention window in tokens; 0: none */
    int n;
    struct config_hf_value items[CONFIG_HF_MAX];
};

/* Reads the config.json at `path` (GPT2LMHeadModel, LlamaForCausalLM,
 * MistralForCausalLM or Qwen2ForCausalLM, whose model.attention_bias it
 * sets, else the model_type): the family, Mistral's
 * sliding_window and the values of the keys it gives
 * under Hugging Face's names (GPT2Config's n_embd, n_head, n_layer,
 * n_positions, vocab_size; LlamaConfig's hidden_size, num_attention_heads,
 * num_key_value_heads, intermediate_size, num_hidden_layers, rope_theta,
 * rms_norm_eps, vocab_size, max_position_embeddings, tie_word_embeddings).
 * Errors: ZT_ERR_CONFIG (unreadable, not JSON, an unknown architecture, a
 * value that is not a number, naming the file and key), ZT_ERR_UNSUPPORTED
 * (what the model has that zerotrain does not build: rope_scaling,
 * attention or MLP biases, another activation, a head_dim that is not
 * hidden_size / num_attention_heads), ZT_ERR_NOMEM. */
zt_status config_hf_read(const char *path, struct config_hf *out);

#endif
