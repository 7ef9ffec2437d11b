/* config/config_hf.c — a Hugging Face config.json read as model keys (see
 * config_impl.h).
 *
 * The architecture decides the family and which of the file's names map
 * to which of our keys; one table per family says so. Mistral and Qwen2
 * are the llama family: Mistral with a window that must hold the sequence,
 * Qwen2 with q, k and v biases. What a file may
 * carry that zerotrain does not implement (a rotary scaling, biases on the
 * attention or the MLP, another activation, a head size that is not
 * hidden_size / num_attention_heads) is refused by name: converting such a
 * model silently would train a different one.
 */
#include "config_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "../common/json.h"

#define HF_CONFIG_MAX_BYTES (16u << 20)

struct key_map {
    const char *hf, *ours;
};

/* The names GPT2Config writes. */
static const struct key_map gpt2_keys[] = {
    {"vocab_size", "model.vocab_size"}, {"n_positions", "model.block_size"},
    {"n_layer", "model.n_layer"},       {"n_head", "model.n_head"},
    {"n_embd", "model.n_embd"},         {NULL, NULL},
};

/* The names LlamaConfig writes. */
static const struct key_map llama_keys[] = {
    {"vocab_size", "model.vocab_size"},
    {"max_position_embeddings", "model.block_size"},
    {"num_hidden_layers", "model.n_layer"},
    {"num_attention_heads", "model.n_head"},
    {"num_key_value_heads", "model.n_kv_head"},
    {"hidden_size", "model.n_embd"},
    {"intermediate_size", "model.intermediate_size"},
    {"rope_theta", "model.rope_theta"},
    {"rms_norm_eps", "model.rms_norm_eps"},
    {"tie_word_embeddings", "model.tie_word_embeddings"},
    {NULL, NULL},
};

/* What a file must say, if it says it at all, for the model to be one
 * zerotrain builds: a key and the JSON text of its only accepted value. */
struct requirement {
    const char *key, *accepted, *why;
};

static const struct requirement gpt2_requirements[] = {
    {"activation_function", "\"gelu_new\"", "GPT-2's MLP uses GELU's tanh approximation"},
    {NULL, NULL, NULL},
};

static const struct requirement llama_requirements[] = {
    {"hidden_act", "\"silu\"", "the SwiGLU MLP gates with SiLU"},
    {"rope_scaling", "null", "rotary scaling (long-context variants) is not implemented"},
    {"attention_bias", "false", "the attention projections have no bias"},
    {"mlp_bias", "false", "the MLP projections have no bias"},
    {NULL, NULL, NULL},
};

/* Qwen2's attention always has q, k and v biases (and no key says so). */
static const struct requirement qwen2_requirements[] = {
    {"hidden_act", "\"silu\"", "the SwiGLU MLP gates with SiLU"},
    {"rope_scaling", "null", "rotary scaling (long-context variants) is not implemented"},
    {"use_sliding_window", "false", "sliding-window attention is not implemented"},
    {NULL, NULL, NULL},
};

struct architecture {
    const char *name, *model_type, *family;
    const struct key_map *keys;
    const struct requirement *requirements;
    int qkv_bias; /* q, k and v have biases, whatever the file says (Qwen2) */
};

/* Mistral is the Llama decoder with a sliding attention window, which is
 * full attention while the sequence fits in it (config_hf.sliding_window,
 * checked against data.seq_len once that is known). */
static const struct architecture architectures[] = {
    {"GPT2LMHeadModel", "gpt2", "gpt2", gpt2_keys, gpt2_requirements, 0},
    {"LlamaForCausalLM", "llama", "llama", llama_keys, llama_requirements, 0},
    {"MistralForCausalLM", "mistral", "llama", llama_keys, llama_requirements, 0},
    {"Qwen2ForCausalLM", "qwen2", "llama", llama_keys, qwen2_requirements, 1},
};
#define N_ARCHITECTURES (sizeof architectures / sizeof architectures[0])

/* The architecture `architectures[0]` names, else the one model_type names. */
static zt_status find_architecture(const char *path, const struct json_value *root,
                                   const struct architecture **out)
{
    const struct json_value *list = json_object_get(root, "architectures", NULL);
    const struct json_value *type = json_object_get(root, "model_type", NULL);
    const char *name =
        list && list->type == JSON_ARRAY && list->n > 0 && list->items[0].type == JSON_STRING
            ? list->items[0].str
            : NULL;
    const char *model_type = type && type->type == JSON_STRING ? type->str : NULL;
    for (size_t k = 0; k < N_ARCHITECTURES; k++)
        if ((name && strcmp(name, architectures[k].name) == 0) ||
            (!name && model_type && strcmp(model_type, architectures[k].model_type) == 0)) {
            *out = &architectures[k];
            return ZT_OK;
        }
    return zt_error_set(ZT_ERR_CONFIG,
                        "%s: architecture %s (model_type %s) is not one zerotrain builds "
                        "(GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM)",
                        path, name ? name : "not given", model_type ? model_type : "not given");
}

/* The JSON text of a scalar, for comparing with a requirement. */
static void scalar_text(const struct json_value *v, char *buf, size_t n)
{
    switch (v->type) {
    case JSON_NULL:
        snprintf(buf, n, "null");
        break;
    case JSON_BOOL:
        snprintf(buf, n, "%s", v->boolean ? "true" : "false");
        break;
    case JSON_STRING:
        snprintf(buf, n, "\"%s\"", v->str);
        break;
    case JSON_INT:
    case JSON_REAL:
        snprintf(buf, n, "%.17g", v->real);
        break;
    default:
        snprintf(buf, n, "%s", json_type_name(v->type));
    }
}

static zt_status check_requirements(const char *path, const struct json_value *root,
                                    const struct architecture *a)
{
    for (const struct requirement *r = a->requirements; r->key; r++) {
        const struct json_value *v = json_object_get(root, r->key, NULL);
        char text[128];
        if (!v)
            continue;
        scalar_text(v, text, sizeof text);
        if (strcmp(text, r->accepted) != 0)
            return zt_error_set(ZT_ERR_UNSUPPORTED,
                                "%s: %s is %s: not supported: %s (zerotrain needs %s)", path,
                                r->key, text, r->why, r->accepted);
    }
    return ZT_OK;
}

/* head_dim, when given, must be what the family computes. */
static zt_status check_head_dim(const char *path, const struct json_value *root)
{
    const struct json_value *hd = json_object_get(root, "head_dim", NULL);
    const struct json_value *c = json_object_get(root, "hidden_size", NULL);
    const struct json_value *nh = json_object_get(root, "num_attention_heads", NULL);
    if (!hd || hd->type == JSON_NULL || !c || !nh || c->type != JSON_INT || nh->type != JSON_INT ||
        nh->magnitude == 0)
        return ZT_OK;
    if (hd->type == JSON_INT && hd->magnitude * nh->magnitude == c->magnitude)
        return ZT_OK;
    return zt_error_set(ZT_ERR_UNSUPPORTED,
                        "%s: head_dim %.17g is not hidden_size / num_attention_heads: not "
                        "supported (the head size is n_embd / n_head)",
                        path, hd->real);
}

static zt_status read_values(const char *path, const struct json_value *root,
                             const struct architecture *a, struct config_hf *out)
{
    for (const struct key_map *k = a->keys; k->hf; k++) {
        const struct json_value *v = json_object_get(root, k->hf, NULL);
        if (!v || v->type == JSON_NULL)
            continue;
        if (v->type != JSON_INT && v->type != JSON_REAL && v->type != JSON_BOOL)
            return zt_error_set(ZT_ERR_CONFIG, "%s: %s must be a number, not %s", path, k->hf,
                                json_type_name(v->type));
        if (v->type == JSON_INT && v->negative)
            return zt_error_set(ZT_ERR_CONFIG, "%s: %s must not be negative", path, k->hf);
        ZT_ASSERT(out->n < CONFIG_HF_MAX);
        out->items[out->n++] = (struct config_hf_value){
            .hf_key = k->hf,
            .path = k->ours,
            .value = v->type == JSON_BOOL ? (double)v->boolean : v->real,
        };
    }
    return ZT_OK;
}

/* sliding_window: null (none) or a positive whole number. */
static zt_status read_sliding_window(const char *path, const struct json_value *root,
                                     struct config_hf *out)
{
    const struct json_value *v = json_object_get(root, "sliding_window", NULL);
    if (!v || v->type == JSON_NULL)
        return ZT_OK;
    if (v->type != JSON_INT || v->negative || v->magnitude == 0)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: sliding_window must be null or a positive whole number", path);
    out->sliding_window = v->magnitude;
    return ZT_OK;
}

zt_status config_hf_read(const char *path, struct config_hf *out)
{
    char *text = NULL;
    size_t len = 0;
    memset(out, 0, sizeof *out);
    zt_status s = zt_read_small_file(path, HF_CONFIG_MAX_BYTES, ZT_ERR_CONFIG, &text, &len);
    if (s != ZT_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", zt_error_message());
        return zt_error_set(s == ZT_ERR_NOMEM ? s : ZT_ERR_CONFIG, "model.hf_config: %s", why);
    }
    const struct json_source src = {path, NULL, ZT_ERR_CONFIG, 16};
    struct json_value root;
    s = json_parse(&src, text, len, &root);
    free(text);
    ZT_TRY(s);
    const struct architecture *a = NULL;
    if (root.type != JSON_OBJECT)
        s = zt_error_set(ZT_ERR_CONFIG, "%s: expected a JSON object (a Hugging Face config.json)",
                         path);
    if (s == ZT_OK)
        s = find_architecture(path, &root, &a);
    if (s == ZT_OK)
        s = check_requirements(path, &root, a);
    if (s == ZT_OK && strcmp(a->family, "llama") == 0)
        s = check_head_dim(path, &root);
    if (s == ZT_OK)
        s = read_values(path, &root, a, out);
    if (s == ZT_OK && strcmp(a->model_type, "mistral") == 0)
        s = read_sliding_window(path, &root, out);
    if (s == ZT_OK && a->qkv_bias) {
        ZT_ASSERT(out->n < CONFIG_HF_MAX);
        out->items[out->n++] = (struct config_hf_value){
            .hf_key = "architectures", .path = "model.attention_bias", .value = 1};
    }
    if (s == ZT_OK)
        snprintf(out->family, sizeof out->family, "%s", a->family);
    json_free(&root);
    return s;
}
