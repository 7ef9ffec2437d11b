/* worker/lora.h — LoRA adapters on a model's parameter table.
 *
 * LoRA (Hu et al., 2021) trains, beside a frozen linear weight W [out, in],
 * two small matrices A [r, in] and B [out, r]; the layer computes
 *   y = W x + b + (lora_alpha / r) * B A dropout(x)
 * with A drawn as PEFT draws it (Kaiming-uniform with a = sqrt(5): bound
 * 1 / sqrt(in)) and B zero, so training starts from the base model. Names
 * and meanings are PEFT's LoraConfig's: r, lora_alpha, lora_dropout,
 * target_modules, bias ("none" only: biases stay frozen).
 *
 * Layout. lora_attach appends to a family's table, which keeps its tensors,
 * units and offsets: for every base unit holding an adapted weight, one
 * *adapter unit* with that unit's A and B pairs, named after the weight
 * ("h.0.attn.qkv.weight" gets "h.0.attn.qkv.lora_A.weight" and
 * ".lora_B.weight"), trainable, with weight decay (Hugging Face's Trainer
 * decays every weight but biases and norms, adapters included). Every base tensor is
 * frozen. Because trainability is per unit in the ZeRO engine, the frozen
 * base units keep no gradients, master copy or optimizer state in any
 * stage, and communicate no gradients; the adapter units are sharded like
 * any trainable unit, and under stage 3 gathered just in time right after
 * their base unit (param_table_unit_order).
 *
 * Matching. Whether weight k is adapted is decided on module_names[k], the
 * weight's module path in the Hugging Face model ("transformer.h.0.attn.
 * c_attn", "model.layers.0.self_attn.q_proj"), which the caller gets from
 * the family's Hugging Face mapping: a target matches a module whose name
 * equals it or ends in "." + target, as PEFT matches a list of names; the
 * single target "all-linear" takes every linear layer but the output head,
 * as PEFT's does. Only linear weights (param_tensor.linear) are adapted.
 *
 * The passes' side (borrowing adapter units with their base unit, the
 * adapter products in the forward and backward) is in model_parts.h.
 */
#ifndef ZT_WORKER_LORA_H
#define ZT_WORKER_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "model_family.h"

/* PEFT's name for every linear layer but the output head. */
#define LORA_ALL_LINEAR "all-linear"

struct lora_spec {
    int r;                      /* >= 1 */
    double alpha;               /* lora_alpha, > 0 */
    double dropout;             /* lora_dropout, in [0, 1) */
    const char *const *targets; /* target_modules */
    int n_targets;
};

/* Adds adapters to t (a family's table without adapters) for the linear
 * weights whose module_names[k] (k < t->n_tensors; NULL for tensors that
 * are no module's weight) match spec's targets, and freezes every base
 * tensor. Errors: ZT_ERR_CONFIG naming the target that matches no module
 * or a module that is not a linear layer (with the modules there are),
 * and when the table would exceed MODEL_MAX_UNITS; ZT_ERR_NOMEM. On error
 * t is unchanged. */
zt_status lora_attach(struct param_table *t, const struct lora_spec *spec,
                      const char *const *module_names);

/* The first of r, lora_alpha and target_modules (compared as sets, as
 * PEFT matches them) on which a and b differ: returns its PEFT name ("r",
 * "lora_alpha", "target_modules") with a's and b's values as text in
 * a_text and b_text (n bytes each: "8", "[c_attn, c_proj]"); NULL when
 * they agree. Dropout is left out: it changes training, not the model. */
const char *lora_spec_diff(const struct lora_spec *a, const struct lora_spec *b, char *a_text,
                           char *b_text, size_t n);

/* Whether spec's targets adapt exactly the weights t carries adapters on
 * (module_names as lora_attach takes them): target lists that name the
 * same modules in other words ("all-linear" and its layers' names) select
 * the same model. */
int lora_spec_adapts_same(const struct param_table *t, const struct lora_spec *spec,
                          const char *const *module_names);

/* Merges the adapters into the base weights of `params` (t->n_params
 * values in t's flat order), as PEFT's merge_and_unload does:
 * W + (lora_alpha / r) B A for every adapted W, each element computed in
 * double and rounded once; every other value is left as it is. `alpha` is
 * the exact lora_alpha (t->lora.scale is its float quotient). */
void lora_merge(const struct param_table *t, double alpha, float *params);

/* Initial values of adapter elements [begin, end) (flat indices at or past
 * t->lora.n_base_params) into dst: A Kaiming-uniform from rng_key(seed,
 * "lora") at counter = flat index, B zero. */
void lora_init_params(const struct param_table *t, uint64_t seed, size_t begin, size_t end,
                      float *dst);

/* How many parameters the adapters add (0 without). */
static inline size_t lora_n_params(const struct param_table *t)
{
    return t->lora.r > 0 ? t->n_params - t->lora.n_base_params : 0;
}

#endif
