/* formats/hf_weights_impl.h — for formats/hf_*.c only: what one model
 * family's Hugging Face mapping gives the mechanism in hf_weights.c.
 *
 * A mapping is data and a few pure functions of the parameter table: how
 * each of our tensors is named in Hugging Face's state dict and whether it
 * is stored transposed, which config key each dimension comes from (for
 * the messages of a file that contradicts the config), and what files of
 * the family carry besides the parameters. Everything else (the sweeps
 * that check a file against the table, the ranged reader with its
 * transposition cache, the sharded writer) is the one mechanism in
 * hf_weights.c, the same for every family.
 *
 * Names. A *ForCausalLM state dict names the base model's tensors under a
 * prefix ("transformer." for GPT-2, "model." for Llama) and the head
 * without one; the base model's own state dict has no prefix. A mapping
 * gives each tensor's name without the prefix and says whether it takes
 * one; import accepts both forms (a file holding both is refused), export
 * writes the form `export_prefixed` says. Messages name a tensor as export
 * writes it, or as the file has it.
 */
#ifndef ZT_FORMATS_HF_WEIGHTS_IMPL_H
#define ZT_FORMATS_HF_WEIGHTS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "../worker/model_family.h"

struct hf_mapping {
    const char *family;  /* struct model_family's name: "gpt2" */
    const char *title;   /* the family in messages: "GPT-2" */
    const char *prefix;  /* the base model's prefix: "transformer." */
    int export_prefixed; /* export writes prefix + name (1) or the bare name (0) */
    const char *layer;   /* how a layer's names start, before its index: "h." (the
                          * layer count is the shape's "n_layer", model.n_layer) */
    /* Writes the Hugging Face name of our tensor k without the prefix to
     * name[0..n) (truncated to fit, NUL-terminated), sets *transposed when
     * the file stores it [cols, rows]; returns 1 if the name takes the
     * prefix, 0 if it never does. */
    int (*name)(const struct param_table *t, int k, char *name, size_t n, int *transposed);
    /* The config key ("model.vocab_size") dimension d (0: rows, 1: cols, in
     * our layout) of our tensor k comes from, and its value. */
    const char *(*dim_key)(const struct param_table *t, int k, int d, int64_t *value);
    /* Whether a file tensor (named without the prefix) that is none of ours
     * is skipped: buffers, a tied head. */
    int (*ignored)(const struct param_table *t, const char *name);
    /* NULL, or for our tensor k a config key other than the layer count
     * that says it must be in the file ("model.tie_word_embeddings" for
     * an untied head), with its value; NULL if there is none. */
    const char *(*required_by)(const struct param_table *t, int k, int64_t *value);
    /* PEFT's default target_modules for the architecture, NULL-terminated. */
    const char *const *lora_targets;
    /* config.json: the members that do not depend on the shape's numbers
     * (JSON text, comma-separated: architectures, model_type, fixed
     * choices), then one member per entry, the config class's name and
     * the shape's value. config_variant, when not NULL, names another
     * architecture's members for a table whose shape asks for it (a Llama
     * with q, k and v biases is Qwen2's), or NULL for config_fixed. */
    const char *config_fixed;
    const char *(*config_variant)(const struct param_table *t);
    const struct hf_config_key {
        const char *hf, *shape; /* "n_positions", "block_size" */
        int boolean;            /* 1: written as true / false */
    } * config_keys;            /* ends with {NULL} */
};

/* The layer index of `name` if it reads "<layer><i>.<rest>" (*rest then
 * points at <rest>), else -1. */
int hf_layer_of(const char *name, const char *layer, const char **rest);

/* The value of integer entry `key` of the table's shape; the entry must
 * exist (families build their shapes). */
int64_t hf_shape_int(const struct param_table *t, const char *key);

#endif
