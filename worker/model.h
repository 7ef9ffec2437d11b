/* worker/model.h — the GPT-2 model: parameter table, initialisation,
 * activations, forward and backward.
 *
 * Parameters live in one flat fp32 space described by a table of tensors
 * (name, shape, offset). The space is cut into units, each one contiguous
 * range, that ZeRO gathers one at a time:
 *   unit 0          wte [V,C], wpe [block_size,C]   (embeddings; wte is also
 *                                                   the tied LM head)
 *   unit 1..L       block l-1: ln_1.{weight,bias}, attn.qkv.{weight [3C,C],
 *                   bias}, attn.proj.{weight [C,C], bias}, ln_2.{weight,bias},
 *                   mlp.fc.{weight [4C,C], bias}, mlp.proj.{weight [C,4C], bias}
 *   unit L+1        lnf.{weight,bias}
 * Matrices are [out, in] row-major (nn.Linear layout).
 *
 * The model does not own parameters or gradients: whoever shards them (the
 * ZeRO engine in shard/) lends them unit by unit through `struct
 * model_unit_hooks`. Forward visits units 0, 1..L, L+1, 0 (the tied head);
 * backward visits 0 (head), L+1, L..1, 0 (embeddings). An instance (`struct
 * gpt2`, which begins with the generic `struct model`) owns its activations
 * and backward scratch, allocated on its device and counted under
 * `activations` and `workspace`.
 *
 * Everything here is reached through `gpt2_family` and the generic calls of
 * model_family.h; only GPT-2-specific code (its Hugging Face reader, the
 * config's GPT-2 shape, its own tests) names these declarations.
 */
#ifndef ZT_WORKER_MODEL_H
#define ZT_WORKER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "backend.h"
#include "model_family.h"

struct gpt2_config {
    int vocab_size, block_size, n_layer, n_head, n_embd;
};

/* Builds the table for `cfg` (assumed validated). Errors: ZT_ERR_NOMEM. */
zt_status gpt2_table_build(const struct gpt2_config *cfg, struct param_table *out);

/* GPT-2's shape as its family describes it: kind "gpt2" with vocab_size,
 * block_size, n_layer, n_head, n_embd in this order. */
void gpt2_describe(const struct gpt2_config *cfg, struct zt_kvlist *shape);
/* The GPT-2 config of a GPT-2 table. */
struct gpt2_config gpt2_config_of(const struct param_table *t);

/* The GPT-2 family's table of operations. */
extern const struct model_family gpt2_family;

/* Writes GPT-2's initial values of flat elements [begin, end) into dst[0..end-begin):
 * weights normal(0, 0.02), residual output projections (attn.proj,
 * mlp.proj) normal(0, 0.02/sqrt(2 L)), biases 0, LayerNorm weights 1. Element
 * i is drawn from counter i of rng_key(seed, "init"), so any shard of the
 * space gets the same values whatever the sharding. */
void gpt2_init_params(const struct param_table *t, uint64_t seed, size_t begin, size_t end,
                      float *dst);

/* Model FLOPs per token of one training step (forward + backward):
 * 6 * (parameters in matmuls and the head) + 12 * L * T * C (attention), the
 * PaLM appendix B count. */
double gpt2_flops_per_token(const struct gpt2_config *cfg, int T);

/* A GPT-2 instance: the generic part first (model_family.h), then what
 * GPT-2's passes keep. */
struct gpt2 {
    struct model base; /* first: a `struct model *` of this family points here */
    const struct ops_backend *ops;
    const struct device *dev; /* not owned: the compute backend's memory */
    int ckpt_every;           /* activation checkpointing: every k-th block, 0 = off */
    size_t act_bytes, scratch_bytes;
    unsigned char *acts;       /* owned: all forward activations, one allocation */
    unsigned char *scratch;    /* owned: backward scratch, one allocation */
    int scratch_lent;          /* the scratch is another instance's (model_create_slot) */
    int32_t *inputs, *targets; /* owned device copies of the batch */
    int n_allocated;           /* how many of acts, scratch, inputs exist (for destroy) */
};

/* The GPT-2 instance operations on caller-provided storage (tests that
 * look inside a GPT-2 instance use them; everything else goes through
 * model_create and the generic calls, which the family implements with
 * these). Arguments, effects and errors as model_create, model_forward and
 * model_backward say; gpt2_destroy frees what gpt2_create allocated but not
 * *m itself. */
zt_status gpt2_create(const struct param_table *t, const struct compute_backend *be, int B, int T,
                      int ckpt_every, const struct model_stage *stage, struct gpt2 *out);
void gpt2_destroy(struct gpt2 *m);
zt_status gpt2_forward(struct gpt2 *m, const struct model_unit_hooks *h, const int32_t *inputs,
                       const int32_t *targets);
zt_status gpt2_backward(struct gpt2 *m, const struct model_unit_hooks *h, float grad_scale);

#endif
