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
 * gpt2_unit_hooks`. Forward visits units 0, 1..L, L+1, 0 (the tied head);
 * backward visits 0 (head), L+1, L..1, 0 (embeddings). The model owns its
 * activations and backward scratch, allocated on its device and counted
 * under `activations` and `workspace`.
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

/* The order in which a pass acquires unit parameters: forward 0, 1..L, L+1,
 * 0 (the tied head); backward 0 (head), L+1, L..1. Writes at most `cap`
 * units to order and returns how many the pass acquires (L + 3 forward,
 * L + 2 backward). gpt2_forward/backward follow exactly this order, so a
 * ZeRO-3 engine can prefetch from it. */
int gpt2_unit_order(const struct param_table *t, enum model_pass pass, int *order, int cap);

/* Where a step's compute time goes, when profiling is on. */
#define GPT2_PROFILE_CATEGORIES(X)                                                                 \
    X(PROF_MATMUL, "matmul")                                                                       \
    X(PROF_ATTENTION, "attention")                                                                 \
    X(PROF_LAYERNORM, "layernorm")                                                                 \
    X(PROF_GELU, "gelu")                                                                           \
    X(PROF_CROSSENTROPY, "crossentropy")                                                           \
    X(PROF_ENCODER, "encoder")                                                                     \
    X(PROF_RESIDUAL, "residual")                                                                   \
    X(PROF_ZERO, "zeroing")

enum gpt2_profile_category {
#define GPT2_PROFILE_ENUM(id, name) id,
    GPT2_PROFILE_CATEGORIES(GPT2_PROFILE_ENUM)
#undef GPT2_PROFILE_ENUM
        PROF_CATEGORY_COUNT
};

struct gpt2_profile {
    double seconds[PROF_CATEGORY_COUNT];
};

/* Name of a profile category ("matmul"). */
const char *gpt2_profile_name(enum gpt2_profile_category c);

struct gpt2 {
    const struct param_table *table; /* not owned */
    const struct ops_backend *ops;
    const struct device *dev; /* not owned: the compute backend's memory */
    int B, T;
    int ckpt_every; /* activation checkpointing: every k-th block, 0 = off */
    size_t act_bytes, scratch_bytes;
    float *acts;                  /* owned: all forward activations, one allocation */
    float *scratch;               /* owned: backward scratch, one allocation */
    int32_t *inputs, *targets;    /* owned device copies of the batch */
    float mean_loss;              /* of the last forward with targets */
    struct gpt2_profile *profile; /* not owned; NULL: no timing */
    int plan;                     /* plan-only device: walk the hooks, compute nothing */
    int n_allocated;              /* how many of acts, scratch, inputs exist (for destroy) */
};

/* Allocates activations for micro batch B x T in the memory of `be`, whose
 * ops the passes run (be is borrowed and must outlive the model). Activation
 * checkpointing: with ckpt_every = k > 0, blocks 0, k, 2k, ... keep only
 * their input during the forward and recompute their internals in the
 * backward (k = 1: every block); 0 keeps everything. Gradients are
 * bit-identical either way. With a plan-only
 * ledger nothing is allocated but everything is counted, and forward and
 * backward then only walk the hooks in their real order (so a plan sees
 * every gather and gradient buffer a real step allocates). Errors:
 * ZT_ERR_NOMEM. */
zt_status gpt2_create(const struct param_table *t, const struct compute_backend *be, int B, int T,
                      int ckpt_every, struct gpt2 *out);
void gpt2_destroy(struct gpt2 *m);

/* Forward over host arrays inputs/targets[B*T]; sets m->mean_loss. */
zt_status gpt2_forward(struct gpt2 *m, const struct model_unit_hooks *h, const int32_t *inputs,
                       const int32_t *targets);
/* Backward of the last forward. Accumulates d(loss * grad_scale)/dparams
 * into the hooks' gradient buffers (grad_scale = 1/accumulation steps, times
 * the loss scale under fp16). */
zt_status gpt2_backward(struct gpt2 *m, const struct model_unit_hooks *h, float grad_scale);

#endif
