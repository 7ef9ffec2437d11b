/* formats/hf_llama.c — see hf_llama.h for the mapping. Everything is read
 * from the table's names and its shape kvlist (kind "llama"), so this file
 * needs nothing of the Llama model's own code. */
#include "hf_llama.h"

#include <stdio.h>
#include <string.h>

#include "hf_weights_impl.h"

#define LAYER "layers."
#define HEAD  "lm_head.weight"

/* Our name is the state dict's without the prefix, which the head's never
 * takes. */
static int name_of(const struct param_table *t, int k, char *name, size_t n, int *transposed)
{
    ZT_ASSERT(k >= 0 && k < t->n_tensors);
    *transposed = 0;
    snprintf(name, n, "%s", t->tensors[k].name);
    return strcmp(t->tensors[k].name, HEAD) != 0;
}

/* The matrices' dimensions by the shape key they come from (rows, cols);
 * everything else is the width. */
static const struct {
    const char *name; /* within a layer, or the whole name */
    const char *rows, *cols;
} matrices[] = {
    {"embed_tokens.weight", "vocab_size", "n_embd"},
    {HEAD, "vocab_size", "n_embd"},
    {"self_attn.q_proj.weight", "n_head", "n_embd"},
    {"self_attn.k_proj.weight", "n_kv_head", "n_embd"},
    {"self_attn.v_proj.weight", "n_kv_head", "n_embd"},
    {"self_attn.o_proj.weight", "n_embd", "n_head"},
    {"mlp.gate_proj.weight", "intermediate_size", "n_embd"},
    {"mlp.up_proj.weight", "intermediate_size", "n_embd"},
    {"mlp.down_proj.weight", "n_embd", "intermediate_size"},
    {"self_attn.q_proj.bias", "n_head", "n_embd"},
    {"self_attn.k_proj.bias", "n_kv_head", "n_embd"},
    {"self_attn.v_proj.bias", "n_kv_head", "n_embd"},
};

static const char *dim_key(const struct param_table *t, int k, int d, int64_t *value)
{
    static const struct {
        const char *shape, *config;
    } keys[] = {
        {"vocab_size", "model.vocab_size"},
        {"n_embd", "model.n_embd"},
        {"n_head", "model.n_head"},
        {"n_kv_head", "model.n_kv_head"},
        {"intermediate_size", "model.intermediate_size"},
    };
    const char *name = t->tensors[k].name, *rest;
    const char *key = "n_embd";
    if (hf_layer_of(name, LAYER, &rest) >= 0)
        name = rest;
    for (size_t i = 0; i < sizeof matrices / sizeof matrices[0]; i++)
        if (strcmp(name, matrices[i].name) == 0)
            key = d == 0 ? matrices[i].rows : matrices[i].cols;
    *value = hf_shape_int(t, key);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(key, keys[i].shape) == 0)
            return keys[i].config;
    ZT_ASSERT(0);
    return NULL;
}

/* The rotary buffer of older transformers, and a tied model's head. */
static int ignored(const struct param_table *t, const char *name)
{
    const char *rest;
    if (strcmp(name, HEAD) == 0)
        return hf_shape_int(t, "tie_word_embeddings") != 0;
    return hf_layer_of(name, LAYER, &rest) >= 0 &&
           strcmp(rest, "self_attn.rotary_emb.inv_freq") == 0;
}

/* An untied model's head must be in the file: the config unties it. */
static const char *required_by(const struct param_table *t, int k, int64_t *value)
{
    if (strcmp(t->tensors[k].name, HEAD) != 0)
        return NULL;
    *value = hf_shape_int(t, "tie_word_embeddings");
    return "model.tie_word_embeddings";
}

static const char *const lora_targets[] = {"q_proj", "v_proj", NULL};

/* LlamaConfig's names: SiLU-gated MLP, no biases, no rotary scaling. */
static const struct hf_config_key config_keys[] = {
    {"vocab_size", "vocab_size", 0},
    {"max_position_embeddings", "block_size", 0},
    {"hidden_size", "n_embd", 0},
    {"intermediate_size", "intermediate_size", 0},
    {"num_hidden_layers", "n_layer", 0},
    {"num_attention_heads", "n_head", 0},
    {"num_key_value_heads", "n_kv_head", 0},
    {"rms_norm_eps", "rms_norm_eps", 0},
    {"rope_theta", "rope_theta", 0},
    {"tie_word_embeddings", "tie_word_embeddings", 1},
    {NULL, NULL, 0},
};

/* A Llama with q, k and v biases is Qwen2's architecture: LlamaConfig's
 * attention_bias would put a bias on o_proj too. */
static const char *config_variant(const struct param_table *t)
{
    const struct zt_kv *bias = zt_kv_find(&t->shape, "attention_bias");
    return bias && bias->i
               ? "\"architectures\": [\"Qwen2ForCausalLM\"], \"model_type\": \"qwen2\", "
                 "\"hidden_act\": \"silu\", \"rope_scaling\": null, "
                 "\"use_sliding_window\": false"
               : NULL;
}

const struct hf_mapping hf_llama_mapping = {
    .family = "llama",
    .title = "Llama",
    .prefix = "model.",
    .export_prefixed = 1,
    .layer = LAYER,
    .name = name_of,
    .dim_key = dim_key,
    .ignored = ignored,
    .required_by = required_by,
    .lora_targets = lora_targets,
    .config_fixed = "\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
                    "\"hidden_act\": \"silu\", \"rope_scaling\": null, \"attention_bias\": false, "
                    "\"mlp_bias\": false",
    .config_variant = config_variant,
    .config_keys = config_keys,
};
