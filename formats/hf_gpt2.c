/* formats/hf_gpt2.c — see hf_gpt2.h for the mapping.
 *
 * Names are mapped by their text, not by their position in the table: the
 * block suffixes that differ are one small table, everything else keeps
 * its name, so a tensor added to the model shows up under its own name
 * instead of silently taking another's place.
 */
#include "hf_gpt2.h"

#include <stdio.h>
#include <string.h>

#include "hf_weights_impl.h"

#define LAYER "h."

static const struct {
    const char *ours, *hf;
    int transposed;
} renames[] = {
    {"attn.qkv.weight", "attn.c_attn.weight", 1},  {"attn.qkv.bias", "attn.c_attn.bias", 0},
    {"attn.proj.weight", "attn.c_proj.weight", 1}, {"attn.proj.bias", "attn.c_proj.bias", 0},
    {"mlp.fc.weight", "mlp.c_fc.weight", 1},       {"mlp.fc.bias", "mlp.c_fc.bias", 0},
    {"mlp.proj.weight", "mlp.c_proj.weight", 1},   {"mlp.proj.bias", "mlp.c_proj.bias", 0},
};
#define N_RENAMES ((int)(sizeof renames / sizeof renames[0]))

void hf_gpt2_name(const struct param_table *t, int k, char *name, size_t n, int *transposed)
{
    ZT_ASSERT(k >= 0 && k < t->n_tensors);
    const char *ours = t->tensors[k].name, *rest = NULL;
    *transposed = 0;
    if (hf_layer_of(ours, LAYER, &rest) >= 0) {
        for (int i = 0; i < N_RENAMES; i++) {
            if (strcmp(rest, renames[i].ours) == 0) {
                *transposed = renames[i].transposed;
                snprintf(name, n, "%.*s%s", (int)(rest - ours), ours, renames[i].hf);
                return;
            }
        }
    }
    snprintf(name, n, "%s", ours);
}

/* Every GPT-2 name takes GPT2LMHeadModel's prefix. */
static int name_of(const struct param_table *t, int k, char *name, size_t n, int *transposed)
{
    hf_gpt2_name(t, k, name, n, transposed);
    return 1;
}

/* wte's rows are the vocabulary, wpe's the positions; every other
 * dimension is the width or a multiple of it. */
static const char *dim_key(const struct param_table *t, int k, int d, int64_t *value)
{
    const struct param_tensor *p = &t->tensors[k];
    if (d == 0 && p->cols > 1 && strcmp(p->name, "wte.weight") == 0) {
        *value = hf_shape_int(t, "vocab_size");
        return "model.vocab_size";
    }
    if (d == 0 && p->cols > 1 && strcmp(p->name, "wpe.weight") == 0) {
        *value = hf_shape_int(t, "block_size");
        return "model.block_size";
    }
    *value = hf_shape_int(t, "n_embd");
    return "model.n_embd";
}

/* The tied head and the attention mask buffers. */
static int ignored(const struct param_table *t, const char *name)
{
    const char *rest;
    (void)t;
    if (strcmp(name, "lm_head.weight") == 0)
        return 1;
    return hf_layer_of(name, LAYER, &rest) >= 0 &&
           (strcmp(rest, "attn.bias") == 0 || strcmp(rest, "attn.masked_bias") == 0);
}

static const char *const lora_targets[] = {"c_attn", NULL};

/* GPT2Config's names; our layer norms use its default epsilon, 1e-5, and
 * the tanh GELU ("gelu_new"); the head is tied to the embedding. */
static const struct hf_config_key config_keys[] = {
    {"vocab_size", "vocab_size", 0},
    {"n_positions", "block_size", 0},
    {"n_ctx", "block_size", 0},
    {"n_embd", "n_embd", 0},
    {"n_layer", "n_layer", 0},
    {"n_head", "n_head", 0},
    {NULL, NULL, 0},
};

const struct hf_mapping hf_gpt2_mapping = {
    .family = "gpt2",
    .title = "GPT-2",
    .prefix = "transformer.",
    .export_prefixed = 0,
    .layer = LAYER,
    .name = name_of,
    .dim_key = dim_key,
    .ignored = ignored,
    .required_by = NULL,
    .lora_targets = lora_targets,
    .config_fixed = "\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", "
                    "\"n_inner\": null, \"activation_function\": \"gelu_new\", "
                    "\"layer_norm_epsilon\": 1e-05, \"tie_word_embeddings\": true",
    .config_keys = config_keys,
};
