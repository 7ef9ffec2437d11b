/* worker/optimizer.h — the optimizer table.
 *
 * Every optimizer describes itself in one `struct optimizer_ops`: its name
 * (as the config and meta.json spell it), the state it keeps per parameter
 * element (named vectors, which are also the checkpoint sections and the
 * ledger's `optimizer_states` allocations), whether its update needs whole
 * tensors (row/column statistics) or runs on any element range, which
 * hyperparameters it reads, and its `update`. The ZeRO engine allocates the
 * states on the rank's range, the checkpoint writer saves one section per
 * state, the memory report counts `state_bytes` per parameter, and
 * meta.json records `name` with the hyperparameters — all from the entry,
 * so adding an optimizer is one entry here and one update function.
 *
 * An entry's `update` runs the backend's kernel for it (a slot of the op
 * table, worker/ops.h); the math of each kernel is written once here in
 * plain C over fp32 ranges (adamw_update; its per-element steps in
 * optim_elementwise.h), which the CPU backend's kernels reproduce bit for
 * bit and a GPU backend's kernel must match, so every backend and every
 * ZeRO stage run the same update on whichever range a rank owns. An
 * element-wise update takes a struct optimizer_range: gradients averaged
 * but with the unscale and clip still to apply (its gscale), in fp32 or in
 * the 16-bit working precision, and a per-range weight-decay factor (1 for
 * tensors that decay, 0 for the rest: see the per-tensor flags in
 * worker/model_family.h). Whole-tensor updates take gradients already
 * unscaled and clipped, in fp32.
 *
 * Adding an optimizer: its math here, a slot in struct ops_backend with the
 * CPU entry calling that math, and one entry in the table in optimizer.c.
 *
 * States start at zero (device_alloc zeroes them).
 */
#ifndef ZT_WORKER_OPTIMIZER_H
#define ZT_WORKER_OPTIMIZER_H

#include <stddef.h>

#include "../common/dtype.h"
#include "../common/kvlist.h"
#include "../common/status.h"
#include "optim_slice.h"

struct ops_backend;

/* Most state vectors an optimizer may keep per element. */
#define OPTIMIZER_MAX_STATES 4

/* The hyperparameters any optimizer may read, in the config's units. An
 * entry lists the ones it uses in `hparams` (for meta.json); the rest are
 * ignored. */
struct optimizer_hparams {
    float lr, beta1, beta2, eps, weight_decay;
    float momentum, dampening; /* SGD */
    int nesterov;              /* SGD: 1 for Nesterov momentum */
    /* Adafactor (Hugging Face's parameters): eps is its eps1 (added to the
     * squared gradient), eps2 the floor of the parameter scale; beta1 0
     * means no first moment. */
    float eps2, clip_threshold, decay_rate;
    int scale_parameter, relative_step, warmup_init;
    /* AdamW8bit: tensors of fewer elements keep fp32 states. */
    long min_8bit_size;
    long step; /* 1-based count of updates including this one */
};

/* Names of the hyperparameters, as meta.json writes them. */
enum optimizer_hparam {
    OPT_HP_LR,
    OPT_HP_BETA1,
    OPT_HP_BETA2,
    OPT_HP_EPS,
    OPT_HP_WEIGHT_DECAY,
    OPT_HP_MOMENTUM,
    OPT_HP_DAMPENING,
    OPT_HP_NESTEROV,
    OPT_HP_EPS2,
    OPT_HP_CLIP_THRESHOLD,
    OPT_HP_DECAY_RATE,
    OPT_HP_SCALE_PARAMETER,
    OPT_HP_RELATIVE_STEP,
    OPT_HP_WARMUP_INIT,
    OPT_HP_MIN_8BIT_SIZE,
    OPT_HP_COUNT
};

/* "lr", "beta1", ...; never NULL for a valid id. */
const char *optimizer_hparam_name(enum optimizer_hparam h);
/* The value of hyperparameter h in hp. */
double optimizer_hparam_value(const struct optimizer_hparams *hp, enum optimizer_hparam h);

/* Whole-tensor optimizers (Adafactor) need statistics over each tensor —
 * row and column sums of squared gradients, the RMS of the parameters and
 * of the update — while under ZeRO a rank holds only part of a tensor. The
 * engine runs them in rounds: in round r every rank adds its piece's
 * partial sums into the tensor's stats[r] (stats_len(r) doubles), the
 * engine sums stats[r] over the ranks that share the tensor, and the next
 * round (or the final apply) reads the totals. Rounds and apply are called
 * for every trainable tensor on every rank, also with an empty piece, since
 * each rank keeps the tensor's small replicated state (row and column
 * factors) and updates it from the totals. The result is the unsharded
 * update whatever the world size, up to the order of double-precision
 * sums; under tensor parallelism too, the statistics and the state being
 * the whole tensor's (struct optimizer_slice). */
#define OPTIMIZER_MAX_ROUNDS 2

/* How a round's statistics combine across ranks. */
enum optimizer_reduce { OPTIMIZER_REDUCE_SUM, OPTIMIZER_REDUCE_MAX };
struct optimizer_piece {
    int rows, cols; /* the (whole) tensor's shape, row-major; cols == 1 for a vector */
    size_t numel;   /* rows * cols */
    size_t lo, hi;  /* elements [lo, hi) of the rank's slice that it updates; lo == hi: none */
    struct optimizer_slice slice; /* where the slice's elements are in the tensor */
    float *params;                /* element lo of the fp32 parameters (the master copy) */
    const float *grads;           /* element lo of the averaged, clipped, unscaled gradients */
    void *states[OPTIMIZER_MAX_STATES];  /* element lo of each per-element state (state_dtype) */
    float *tensor_state;                 /* tensor_state_len floats, alike on every rank */
    double *stats[OPTIMIZER_MAX_ROUNDS]; /* each round's stats_len doubles */
    float decay;                         /* 1: weight decay applies to the tensor */
};

/* One range of an element-wise update, with the passes around it fused in
 * so that each buffer is read and written once: for i < n,
 *   g = grads[i] as fp32 (exact), times gscale in fp32;
 *   params[i] and states[k][i] updated by the rule from g;
 *   working[i] = params[i] rounded to working_dtype, when working is set.
 * Under 16-bit precision params is the fp32 master, grads the reduced
 * 16-bit gradients and working the 16-bit working parameters; under fp32
 * grads are fp32 and working is NULL. The result equals the unfused
 * sequence (to_f32, scale, update, from_f32) bit for bit. */
struct optimizer_range {
    float *params;                       /* fp32, updated in place */
    const void *grads;                   /* grad_dtype elements, not modified */
    enum zt_dtype grad_dtype;            /* ZT_F32, ZT_BF16 or ZT_F16 */
    float gscale;                        /* the unscale and clip factor */
    float *states[OPTIMIZER_MAX_STATES]; /* the rule's fp32 states; SGD: NULL without momentum */
    void *working;                       /* NULL, or the working copy to refresh */
    enum zt_dtype working_dtype;         /* ZT_BF16, ZT_F16 (or ZT_F32) */
    size_t n;
    float decay; /* 1: weight decay applies to the range; 0: none */
};

struct optimizer_ops {
    const char *name;  /* "AdamW": the canonical spelling */
    const char *alias; /* another accepted spelling, or NULL */
    int n_states;      /* state vectors per element, <= OPTIMIZER_MAX_STATES */
    /* How many of them a run with these hyperparameters keeps (the first
     * ones); NULL: all n_states. SGD keeps its momentum only when it has
     * one. */
    int (*state_count)(const struct optimizer_hparams *hp);
    const char *state_names[OPTIMIZER_MAX_STATES]; /* checkpoint sections ("exp_avg") */
    /* Element type of each state vector: ZT_F32 (the zero value) or ZT_U8
     * (8-bit codes). Element-wise optimizers keep fp32 states. */
    enum zt_dtype state_dtype[OPTIMIZER_MAX_STATES];
    int whole_tensors; /* 1: an update needs a tensor whole (row/column statistics) */
    /* 1: the update runs inside the backward, each unit as soon as its
     * gradient is reduced, and no gradient outlives its unit (LOMO). */
    int fused_backward;
    double default_beta1, default_beta2; /* optimizer.params.betas when not given */
    double default_eps, default_eps2;    /* a pair eps when not given (those reading eps2) */
    int n_hparams;
    enum optimizer_hparam hparams[OPT_HP_COUNT]; /* the ones it reads, in meta.json order */
    /* Updates the range r (device memory of `ops`' backend) through the
     * backend's kernel for this optimizer: see struct optimizer_range.
     * Errors: those of the kernel. */
    zt_status (*update)(const struct ops_backend *ops, const struct optimizer_range *r,
                        const struct optimizer_hparams *hp);

    /* Whole-tensor optimizers (whole_tensors = 1; `update` is NULL). */
    const char *tensor_state_name; /* checkpoint section of the replicated state */
    /* Floats of replicated state the tensor keeps on every rank. */
    size_t (*tensor_state_len)(int rows, int cols, const struct optimizer_hparams *hp);
    int n_rounds; /* <= OPTIMIZER_MAX_ROUNDS */
    enum optimizer_reduce round_reduce[OPTIMIZER_MAX_ROUNDS];
    /* Doubles of round r's statistics for a tensor of this shape. */
    size_t (*stats_len)(int round, int rows, int cols, const struct optimizer_hparams *hp);
    /* Round r on one piece: adds its partial sums into pc->stats[round],
     * whose slots start at zero; stats of earlier rounds hold totals. */
    zt_status (*tensor_round)(const struct ops_backend *ops, int round,
                              const struct optimizer_piece *pc, const struct optimizer_hparams *hp);
    /* After the last round: updates the piece's parameters and states. */
    zt_status (*tensor_apply)(const struct ops_backend *ops, const struct optimizer_piece *pc,
                              const struct optimizer_hparams *hp);
};

/* The optimizer's description for meta.json: kind = o->name, then the
 * hyperparameters it reads, in its order, as reals. */
void optimizer_describe(const struct optimizer_ops *o, const struct optimizer_hparams *hp,
                        struct zt_kvlist *out);

/* The entry whose name or alias matches `name` ignoring ASCII case
 * (DeepSpeed's rule), or NULL. */
const struct optimizer_ops *optimizer_find(const char *name);

/* Entry i of the table (0, 1, ...), or NULL past its end. */
const struct optimizer_ops *optimizer_at(int i);

/* The known optimizers' names and aliases, comma-separated ("AdamW, Adam"), into buf[n]
 * (truncated to fit), for messages. */
void optimizer_list_names(char *buf, size_t n);

/* Whether `o` reads hyperparameter h. */
static inline int optimizer_reads(const struct optimizer_ops *o, enum optimizer_hparam h)
{
    for (int k = 0; k < o->n_hparams; k++)
        if (o->hparams[k] == h)
            return 1;
    return 0;
}

/* How many state vectors per element a run of `o` with `hp` keeps. */
static inline int optimizer_state_count(const struct optimizer_ops *o,
                                        const struct optimizer_hparams *hp)
{
    return o->state_count ? o->state_count(hp) : o->n_states;
}

/* The updates' math, which the CPU kernels call and the tests drive on
 * whole tensors. `decay` scales weight_decay per range (1 or 0). */

/* AdamW (Loshchilov & Hutter 2019): decoupled weight decay,
 * p -= lr (wd p + m^ / (sqrt(v^) + eps)), bias-corrected moments. */
void adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float decay,
                  const struct optimizer_hparams *hp);
/* Adam with L2 regularisation, PyTorch's torch.optim.Adam: the gradient
 * becomes g + wd p before the moments; p -= lr m^ / (sqrt(v^) + eps). */
void adam_update(float *params, const float *grads, float *m, float *v, size_t n, float decay,
                 const struct optimizer_hparams *hp);
/* SGD, PyTorch's torch.optim.SGD: g += wd p; with momentum mu > 0,
 * buf = g at the first step, else mu buf + (1 - dampening) g, and the step
 * uses g + mu buf (Nesterov) or buf; p -= lr g. `buf` is NULL without
 * momentum. */
void sgd_update(float *params, const float *grads, float *buf, size_t n, float decay,
                const struct optimizer_hparams *hp);
/* Lion (Chen et al. 2023): c = beta1 m + (1 - beta1) g;
 * p -= lr (sign(c) + wd p); then m = beta2 m + (1 - beta2) g. */
void lion_update(float *params, const float *grads, float *m, size_t n, float decay,
                 const struct optimizer_hparams *hp);

/* Adafactor (Shazeer & Stern 2018) as Hugging Face's transformers
 * implements it, over one piece of a tensor in the rounds described above.
 * Round 0 sums the squared parameters and the squared gradients per row
 * and per column (a vector: per element); round 1 updates the row and
 * column factors (a vector: its second moment) from the totals and sums the
 * squares of the unclipped update; apply clips the update to RMS
 * clip_threshold, scales it by the learning rate (relative to the
 * parameters' RMS under scale_parameter), averages it into the first
 * moment when beta1 > 0, and applies weight decay and the update. */
size_t adafactor_state_len(int rows, int cols, const struct optimizer_hparams *hp);
size_t adafactor_stats_len(int round, int rows, int cols, const struct optimizer_hparams *hp);
void adafactor_round(int round, const struct optimizer_piece *pc,
                     const struct optimizer_hparams *hp);
void adafactor_apply(const struct optimizer_piece *pc, const struct optimizer_hparams *hp);

/* 8-bit AdamW as bitsandbytes' AdamW8bit (block-wise, optim_bits 8): the
 * moments are stored as 8-bit codes of the dynamic quantisation map
 * (signed for m, unsigned for v) scaled by one absmax per block of
 * ADAMW8BIT_BLOCK elements in the tensor's own index space; a tensor of
 * fewer than min_8bit_size elements keeps fp32 moments. A step dequantises
 * the moments, updates them in fp32, moves the parameters with the fp32
 * moments (bitsandbytes' order: the Adam step, then the decoupled decay),
 * and stores them back as the nearest codes under the blocks' new absmax.
 * The per-element codes are the states "state1" and "state2"; the absmax
 * of every block (and the fp32 moments of small tensors) are the tensor
 * state every rank keeps whole. A block cut by a shard boundary gets its
 * absmax as the max over the ranks' parts (round 0, a max) and a small
 * tensor its moments from the ranks that hold them (round 1, a sum of one
 * value and zeros), so the result is exact whatever the world size. */
#define ADAMW8BIT_BLOCK 256
size_t adamw8bit_state_len(int rows, int cols, const struct optimizer_hparams *hp);
size_t adamw8bit_stats_len(int round, int rows, int cols, const struct optimizer_hparams *hp);
void adamw8bit_round(int round, const struct optimizer_piece *pc,
                     const struct optimizer_hparams *hp);
void adamw8bit_apply(const struct optimizer_piece *pc, const struct optimizer_hparams *hp);

#endif
