/* worker/model_family.h — the model interface: what a model family gives
 * the ZeRO engine, the coordinator and the file formats.
 *
 * A family (GPT-2: worker/model.h; Llama: worker/llama.h) lays its
 * parameters out in one flat space described by a `struct param_table`:
 * tensors with their
 * shapes, offsets and flags, cut into *units* — contiguous ranges that
 * ZeRO gathers, reduces and frees one at a time (an embedding, one
 * transformer block, a final norm). The family says in which order a pass
 * visits its units, so a stage-3 engine can prefetch, and it borrows each
 * unit's parameters and gradients through `struct model_unit_hooks` rather
 * than owning them: whoever shards the states lends them.
 *
 * A family describes its shape as a `struct zt_kvlist` of kind = the
 * family's name ("gpt2" with vocab_size, n_layer, ...): the config builds
 * one, meta.json stores it, a resume compares it, and export rebuilds the
 * table from it. `struct model_family` is the family's table of
 * operations, found by name; the engine uses only this header.
 *
 * An *instance* of a model (`struct model`) holds what one rank's passes
 * need beyond the parameters: activations and backward scratch sized for a
 * micro batch B x T, in the memory of a compute backend. The family creates
 * it and runs its forward and backward; callers hold only a `struct model *`
 * and go through model_create, model_forward, model_backward and
 * model_destroy, which dispatch through the instance's family.
 *
 * Why a generic header rather than an opaque pointer with accessors: every
 * step reads the loss of the forward, the training loop turns profiling on
 * and off, and a plan asserts that it holds a plan-only instance. These are
 * the same for every family, so they live in `struct model`, which each
 * family embeds as the FIRST member of its own instance (GPT-2: `struct
 * gpt2 { struct model base; ... }`); the family converts back with a cast
 * it checks against `family`. What is particular to a family (its
 * activation layout, device buffers, checkpointing) stays in its own
 * struct, which only its own code and tests name. Accessor functions would
 * add one call per field and hide nothing a caller could misuse.
 *
 * Adding a family: a `struct model_family` entry in model_family.c and its
 * implementation beside worker/model.c (table, init, unit order, instance
 * create/destroy, forward, backward over borrowed units), plus its Hugging
 * Face name mapping in the file formats.
 */
#ifndef ZT_WORKER_MODEL_FAMILY_H
#define ZT_WORKER_MODEL_FAMILY_H

#include <stddef.h>
#include <stdint.h>

#include "../common/dtype.h"
#include "../common/kvlist.h"
#include "../common/status.h"
#include "fp8_scaling.h"

/* Most units a table may have: a family's (at most 1026) and as many
 * adapter units (a pass's schedule is bounded by it plus the revisits). */
#define MODEL_MAX_UNITS 2052

/* How a tensor's working copy is stored: in the run's working precision,
 * or (a frozen base weight under QLoRA, worker/param_quant.h) as 4-bit
 * block-wise codes, dequantised for each use. */
enum param_storage { PARAM_STORAGE_WORKING, PARAM_STORAGE_Q4 };

enum { PARAM_LINEAR = 1, PARAM_LINEAR_HEAD = 2 };

struct param_tensor {
    char name[48];  /* "h.3.attn.qkv.weight" */
    int rows, cols; /* cols == 1 for vectors */
    size_t offset, numel;
    int unit;
    /* Per-tensor flags, set by the model family. */
    int trainable;              /* 0: frozen: the optimizer never updates it */
    int decay;                  /* 1: weight decay applies (2-D tensors) */
    enum param_storage storage; /* how its working copy is kept */
    /* PARAM_LINEAR (a linear layer's weight [out, in], what a matmul reads)
     * or PARAM_LINEAR_HEAD (the output head's): LoRA may adapt it; 0 else. */
    int linear;
    int adapter; /* a base weight: index of its lora_A tensor (lora_B follows), else -1 */
    int adapts;  /* lora_A or lora_B: index of the base weight it adapts, else -1 */
    /* How tensor parallelism cuts it (enum tp_split, worker/tensor_parallel.h;
     * 0: every rank holds it whole), into how many equal parts its rows
     * fall that are cut alike (3 for a fused query-key-value weight), and
     * the rows or columns a slice must keep together (a head's).
     * tp_vocab: its rows are the vocabulary (the token embedding, an
     * untied head), which a slice pads (param_table_tp_slice). */
    int tp_split, tp_parts, tp_block, tp_vocab;
};

enum model_pass { MODEL_PASS_FORWARD, MODEL_PASS_BACKWARD };

enum model_reduce { MODEL_REDUCE_SUM, MODEL_REDUCE_MAX };

struct model_family;

/* LoRA adapters on a table (worker/lora.h adds them, after the family's
 * own tensors and units, which keep their indices and offsets). r == 0:
 * none, and the base counts equal the table's. */
struct param_adapters {
    int r;         /* rank */
    float scale;   /* lora_alpha / r */
    float dropout; /* lora_dropout: probability in [0, 1) */
    int n_base_tensors, n_base_units;
    size_t n_base_params;
    int *unit_adapter; /* owned; n_base_units entries: the adapter unit of base unit u, or -1 */
};

struct param_table {
    const struct model_family *family;
    struct zt_kvlist shape; /* the family's description of the model */
    int n_tensors;
    struct param_tensor *tensors; /* owned */
    int n_units;
    size_t *unit_offset; /* owned, n_units + 1 entries; unit u is [off[u], off[u+1]) */
    size_t n_params;
    struct param_adapters lora; /* zeroed by a family's table_build */
    /* QLoRA's 4-bit base (worker/param_quant.h); enabled 0: none. */
    struct param_quant {
        int enabled;
        int type;              /* enum quant4_type: NF4 or FP4 */
        int double_quant;      /* the block scales quantised too */
        enum zt_dtype compute; /* what dequantised weights are rounded to: F32, BF16, F16 */
    } quant;
    /* Tensor parallelism (worker/tensor_parallel.h): this table is rank
     * tp_rank's slice of `whole` (owned) over tp_size ranks; tp_size 1 and
     * whole NULL for the whole model. Tensor k here is tensor k there.
     * tp_sequence: Megatron's sequence parallelism, set by the caller on a
     * slice (model_parts.h says what the model then computes). */
    int tp_size, tp_rank, tp_sequence;
    struct param_table *whole;
    /* Context parallelism (worker/model_context.c): each instance runs
     * rank cp_rank's share of every sequence, cut over cp_size ranks
     * (0 or 1: the whole sequence); set by the caller. */
    int cp_size, cp_rank;
    /* fp8 training (worker/fp8_scaling.h): the delayed-scaling state of the
     * blocks' GEMMs, shared by every instance of the table; owned, freed
     * by param_table_free. NULL: the GEMMs run in fp32. */
    struct fp8_scaling *fp8;
    /* The type the passes compute in (worker/ops.h's t): activations,
     * their gradients, and the parameters params_acquire lends. ZT_F32
     * (the zeroed default: 16-bit storage is then lent as fp32 views), or
     * the 16-bit working precision itself where the run's backend has
     * 16-bit forms (model_compute_type says where). Weight gradients are
     * fp32 views either way. Set by the caller before any instance. */
    enum zt_dtype compute;
};

void param_table_free(struct param_table *t);

/* The adapter unit of unit u, or -1 (an adapter unit itself has none). */
static inline int param_table_adapter_unit(const struct param_table *t, int u)
{
    return t->lora.r > 0 && u < t->lora.n_base_units ? t->lora.unit_adapter[u] : -1;
}

/* The family's own part of t: a shallow copy without the adapters, which
 * shares t's arrays (never freed; valid while t is). What Hugging Face
 * weights are read into and checked against. */
struct param_table param_table_base(const struct param_table *t);

/* The first piece of flat range [pos, end) (pos < end <= t->n_params)
 * that lies in one tensor: *k that tensor, [*lo, *hi) the piece as
 * elements of it. A reader of ranges walks a range piece by piece. */
void param_table_piece(const struct param_table *t, size_t pos, size_t end, int *k, size_t *lo,
                       size_t *hi);

/* Initial values of flat elements [begin, end) into dst[0..end-begin): the
 * family's init_params for its tensors, the adapters' (worker/lora.h) for
 * theirs. What every caller uses instead of the family's entry; a
 * tensor-parallel slice's go through param_table_tp_init. */
void param_table_init(const struct param_table *t, uint64_t seed, size_t begin, size_t end,
                      float *dst);

/* ---- pipeline stages ----
 *
 * Every family lays its units out alike: unit 0 the token embedding (which
 * also holds the output head's weight when the head is tied to it), units
 * 1 .. L the L blocks, unit L + 1 the final norm (with the head when it is
 * not tied). A pipeline stage runs a contiguous range of blocks; the first
 * stage also the embedding, the last the final norm, the head and the
 * loss. The whole model is the one stage that is both. With a tied head,
 * unit 0 is used by the first and the last stage: both hold it, and
 * whoever runs the pipeline keeps the two copies equal (Megatron's
 * embedding group).
 *
 * Interleaved (Megatron's virtual stages): the blocks are cut into P x v
 * equal chunks and rank r of P holds chunks r, r + P, ..., r + (v - 1) P.
 * A rank's stage then describes all v chunks: `chunks` runs of
 * end_block - first_block blocks, each `stride` blocks after the one
 * before; `first` and `last` say whether one of them is the model's first
 * or last chunk. Each chunk is also a stage of its own (one run), which is
 * what a model instance runs. */
struct model_stage {
    int first_block, end_block; /* blocks [first_block, end_block) */
    int first, last;            /* runs the embedding / the head and the loss */
    int chunks, stride;         /* interleaved: runs and their spacing; chunks 0 or 1: one run */
};

/* How a pipeline's blocks are split among its stages (DeepSpeed's
 * partition_method names): "uniform" gives each stage the same number of
 * blocks (the first stages one more when they do not divide), "parameters"
 * balances the parameters each stage holds, the embedding counted on the
 * first stage and the final norm and head on the last. */
enum model_partition { MODEL_PARTITION_PARAMETERS, MODEL_PARTITION_UNIFORM };

/* The whole model as one stage. */
struct model_stage model_stage_whole(const struct param_table *t);

/* Stage `index` of `stages` over t's blocks, split as `method` says; every
 * stage gets at least one block. Errors: ZT_ERR_CONFIG when there are
 * fewer blocks than stages. */
zt_status model_stage_of(const struct param_table *t, int stages, enum model_partition method,
                         int index, struct model_stage *out);

/* Rank `index` of `stages` holding `chunks` interleaved chunks of equal
 * size (the comment above struct model_stage). Errors: ZT_ERR_CONFIG when
 * the blocks do not divide into stages x chunks. */
zt_status model_stage_interleaved(const struct param_table *t, int stages, int chunks, int index,
                                  struct model_stage *out);

/* Chunk j of a rank's stage s (0 <= j < model_stage_chunks(s)) as a stage
 * of one run: the model's first chunk runs the embedding, its last the
 * head. */
struct model_stage model_stage_chunk(const struct model_stage *s, int j, int n_blocks);

/* The runs of blocks s holds (1 unless interleaved), and its blocks. */
int model_stage_chunks(const struct model_stage *s);
int model_stage_blocks(const struct model_stage *s);

/* How many blocks t's model has, and whether its head is unit 0's
 * embedding. */
int param_table_blocks(const struct param_table *t);
int param_table_head_tied(const struct param_table *t);

/* Whether stage s uses unit u (an adapter unit: when it uses the unit the
 * adapter adapts). NULL: the whole model, every unit. */
int model_stage_holds(const struct param_table *t, const struct model_stage *s, int u);

/* Parameters (real elements) of the units stage s holds. */
size_t model_stage_params(const struct param_table *t, const struct model_stage *s);

/* The order in which a pass of stage s (NULL: the whole model) acquires
 * units, each adapted unit followed by its adapter unit. Forward: the
 * embedding (first stage), the stage's blocks in order, then (last stage)
 * the final norm and, when tied, unit 0 for the head. Backward: (last
 * stage) unit 0 when tied, the final norm, then the blocks in reverse; the
 * embedding's backward needs no parameters. Writes at most cap entries
 * and returns how many the pass acquires. */
int param_table_unit_order(const struct param_table *t, const struct model_stage *s,
                           enum model_pass pass, int *order, int cap);
/* A name for unit u in reports: the common dotted prefix of its tensors'
 * names ("h.2", "ln_f"), else their first components joined by commas
 * ("wte,wpe"). Truncated to n - 1 characters. */
void param_table_unit_label(const struct param_table *t, int unit, char *buf, size_t n);
static inline size_t param_table_unit_size(const struct param_table *t, int unit)
{
    return t->unit_offset[unit + 1] - t->unit_offset[unit];
}

/* How the model borrows parameters and gradients, one unit at a time. The
 * pointers returned point at the unit's first element; they stay valid
 * until the matching release (params) or grads_done (grads). Every pass
 * starts with pass_begin and ends with pass_end. */
struct model_unit_hooks {
    void *ctx;
    zt_status (*pass_begin)(void *ctx, enum model_pass pass);
    zt_status (*pass_end)(void *ctx, enum model_pass pass);
    /* The unit's parameters in the table's compute type (elements of
     * zt_dtype_size(table->compute) bytes). */
    zt_status (*params_acquire)(void *ctx, int unit, const void **params);
    zt_status (*params_release)(void *ctx, int unit);
    /* The unit's gradient buffer; the backward ACCUMULATES into it. NULL
     * for a unit with no trainable tensor: the backward then computes no
     * weight gradients for it (only the gradients flowing through it). */
    zt_status (*grads_acquire)(void *ctx, int unit, float **grads);
    /* The unit's gradients of this micro step are complete. */
    zt_status (*grads_done)(void *ctx, int unit);
    /* Tensor parallelism: buf[n] of type t becomes its sum
     * (MODEL_REDUCE_SUM) or maximum over the tensor-parallel ranks, the
     * same on each. Only a table sliced over more than one rank calls it
     * (NULL otherwise). Activations travel in the compute type, row
     * statistics in fp32. */
    zt_status (*tp_allreduce)(void *ctx, enum zt_dtype t, void *buf, size_t n,
                              enum model_reduce op);
    /* Sequence parallelism (a slice with tp_sequence): in[n] of every rank
     * into out[n * T] in rank order (in may be out + rank * n), and the sum
     * over the ranks of in[n * T]'s block `rank` into out[n]. */
    zt_status (*tp_allgather)(void *ctx, enum zt_dtype t, const void *in, void *out, size_t n);
    zt_status (*tp_reduce_scatter)(void *ctx, enum zt_dtype t, const void *in, void *out, size_t n);
    /* Context parallelism (a table with cp_size > 1): starts sending
     * send[n] of type t to the next rank of the context group and
     * receiving recv[n] from the previous one (a ring; send and recv
     * apart, neither touched until the wait); *pending (NULL on failure)
     * is completed and freed by cp_ring_wait. NULL otherwise. */
    zt_status (*cp_ring_start)(void *ctx, enum zt_dtype t, const void *send, void *recv, size_t n,
                               void **pending);
    zt_status (*cp_ring_wait)(void *ctx, void *pending);
};

/* Where a step's compute time goes, when profiling is on. The categories
 * are the kinds of op a transformer runs (norm: LayerNorm or RMSNorm;
 * activation: GELU or SwiGLU); a family times each op under the
 * one it belongs to and leaves the others at zero. */
#define MODEL_PROFILE_CATEGORIES(X)                                                                \
    X(MODEL_PROF_MATMUL, "matmul")                                                                 \
    X(MODEL_PROF_ATTENTION, "attention")                                                           \
    X(MODEL_PROF_NORM, "norm")                                                                     \
    X(MODEL_PROF_ACTIVATION, "activation")                                                         \
    X(MODEL_PROF_ROPE, "rope")                                                                     \
    X(MODEL_PROF_CROSSENTROPY, "crossentropy")                                                     \
    X(MODEL_PROF_ENCODER, "encoder")                                                               \
    X(MODEL_PROF_RESIDUAL, "residual")                                                             \
    X(MODEL_PROF_ZERO, "zeroing")

enum model_profile_category {
#define MODEL_PROFILE_ENUM(id, name) id,
    MODEL_PROFILE_CATEGORIES(MODEL_PROFILE_ENUM)
#undef MODEL_PROFILE_ENUM
        MODEL_PROF_COUNT
};

/* Seconds spent per category; passes add to it, nobody resets it. */
struct model_profile {
    double seconds[MODEL_PROF_COUNT];
};

/* Name of a profile category ("matmul"). */
const char *model_profile_name(enum model_profile_category c);

/* Watching a forward's values (coordinator/nonfinite.h: what finds a
 * step's first non-finite value). When an instance's `probe` is set, its
 * family's training forward hands it each op's output right after the op
 * computed it, in the order computed, and model_read_mean_loss hands it
 * the per-token losses. `block` is the block the op belongs to (-1 the
 * embedding, n_layer the final norm and the head), `tensor` the table
 * index of the weight whose layer computed the output (-1: an op without
 * one: attention, an activation, a residual sum), `what` the op's output
 * in words ("attention output"); buf[n] is in the instance's device
 * memory, of the table's compute type t. Recomputations in a backward (activation checkpointing)
 * call it too. NULL (every healthy step): nothing is called, nothing is copied. */
struct model_probe {
    void *ctx;
    zt_status (*forward)(void *ctx, int block, int tensor, const char *what, enum zt_dtype t,
                         void *buf, size_t n);
    zt_status (*loss)(void *ctx, const float *losses, size_t n);
};

/* The part of a model instance every family shares; the first member of
 * each family's instance struct (see the design comment). The family's
 * create sets every field but `profile`; forward sets `mean_loss`,
 * `loss_sum` and `n_counted`. */
struct model {
    const struct model_family *family; /* whose create made it */
    const struct param_table *table;   /* not owned; outlives the instance */
    int B, T;                          /* the micro batch its activations hold */
    int plan; /* plan-only device: passes walk the hooks, compute nothing */
    /* The last real forward's loss: the sum over its counted targets (a
     * target < 0 is masked: not counted, ops.h), how many counted, and
     * their mean (0 when none counted). */
    float mean_loss;
    double loss_sum;
    int n_counted;
    struct model_profile *profile; /* not owned; NULL: no timing. Set by the caller */
    struct model_probe *probe;     /* not owned; NULL: none (above). Set by the caller */
    /* The borrowed adapter units and the adapters' scratch when the table
     * has LoRA adapters (model_parts.h), else NULL; model_create sets it. */
    struct model_adapters *lora;
    /* Set by the caller before each forward: 1 for a training forward
     * (NEFTune's noise applies to those only), and the global sample index
     * of each of the B rows, which keys the noise so that it does not
     * depend on how a step's batch is split over ranks (NULL: 0 .. B-1). */
    int training;
    const uint64_t *row_ids;
    uint64_t seed; /* the run's seed: keys LoRA dropout's masks (with the row ids) */
    struct model_neftune *neftune; /* NULL: off (model_neftune_enable) */
    /* The fp8 GEMMs' buffers (model_parts.h) when the table has fp8
     * scaling, else NULL; model_create sets it. */
    struct model_fp8 *fp8;
    /* The pipeline stage the instance runs (the whole model but under a
     * pipeline) and its boundaries with the neighbouring stages, each
     * model_sp_rows(m) * C elements of the table's compute type in the
     * device's memory (NULL where the stage has no
     * such neighbour): `in` the activations a first block reads (written
     * by the caller before a forward of a stage that is not the first),
     * `out` the last block's output (read after such a forward, when the
     * stage is not the last), `dout` the gradient of that output (written
     * before the backward), `din` the gradient of `in` (read after it). */
    struct model_stage stage;
    /* Context parallelism (model_parts.h): the ring's buffers when the
     * table's cp_size > 1, else NULL; model_create sets it from the
     * widths the family's create leaves in cp_kv_width (one row of a
     * key/value block: 2 NKV hs) and cp_pos_width (one learned position
     * row, 0: none). */
    struct model_context *context;
    int cp_kv_width, cp_pos_width;
    void *boundary_in, *boundary_out, *boundary_dout, *boundary_din;
    /* `din` is a buffer of its own (model_create_slot), copied from where
     * the backward leaves it in the scratch, `din_result`; the device and
     * bytes of that copy. */
    void *din_result;
    const struct device *boundary_dev;
    size_t boundary_bytes;
};

/* The token rows of the residual stream (the embedding's and each
 * block's output, a pipeline boundary) the instance holds: all B*T, or
 * under sequence parallelism its 1/T of them (model_parts.h). */
int model_sp_rows(const struct model *m);

struct compute_backend;

struct model_family {
    const char *name; /* "gpt2": the shape's kind, meta.json's "family" */
    /* Builds the table of the model `shape` describes (kind == name).
     * Errors: ZT_ERR_CHECKPOINT for a shape the family cannot read (a
     * missing or out-of-range entry, named), ZT_ERR_NOMEM. */
    zt_status (*table_build)(const struct zt_kvlist *shape, struct param_table *out);
    /* Initial values of flat elements [begin, end) into dst[0..end-begin),
     * the same whatever the sharding (counter-based draws from seed). */
    void (*init_params)(const struct param_table *t, uint64_t seed, size_t begin, size_t end,
                        float *dst);
    /* The model's blocks (units 1 .. L, see "pipeline stages") and whether
     * its head is tied to the embedding. Its passes acquire units in
     * exactly param_table_unit_order's order. */
    int (*blocks)(const struct param_table *t);
    int (*head_tied)(const struct param_table *t);
    /* Model FLOPs per token of one training step at sequence length T. */
    double (*flops_per_token)(const struct param_table *t, int T);
    /* The in and out features of a block's GEMMs (enum fp8_gemm,
     * worker/fp8_scaling.h) as a rank holding table t computes them (a
     * tensor-parallel slice's): what the fp8 GEMMs' buffers are sized by. */
    void (*gemm_shapes)(const struct param_table *t, int in[FP8_GEMMS], int out[FP8_GEMMS]);
    /* Bytes of the activations an instance of micro batch B x T on `stage`
     * allocates (what create counts in LEDGER_ACTIVATIONS for them), with
     * checkpointing every ckpt_every blocks (0: off): off, what the
     * passes' element-wise ops write and read (the planner's traffic). */
    size_t (*activation_bytes)(const struct param_table *t, int B, int T, int ckpt_every,
                               const struct model_stage *stage);
    /* The instance operations, as model_create, model_destroy,
     * model_forward and model_backward describe them; `m` is always an
     * instance this family's create made. create borrows the backward
     * scratch of `lender` (an instance of the same family and shape; NULL:
     * it allocates its own), as model_create_slot describes. */
    zt_status (*create)(const struct param_table *t, const struct compute_backend *be, int B, int T,
                        int ckpt_every, const struct model_stage *stage, const struct model *lender,
                        struct model **out);
    void (*destroy)(struct model *m);
    zt_status (*forward)(struct model *m, const struct model_unit_hooks *h, const int32_t *inputs,
                         const int32_t *targets);
    zt_status (*backward)(struct model *m, const struct model_unit_hooks *h, float grad_scale);
};

/* The family called `name`, or NULL. */
const struct model_family *model_family_find(const char *name);

/* The table of the model `shape` describes, through its family. Errors:
 * ZT_ERR_CHECKPOINT (unknown family or a shape it cannot read), ZT_ERR_NOMEM. */
zt_status param_table_build(const struct zt_kvlist *shape, struct param_table *out);

/* Creates an instance of t's family for micro batch B x T: activations and
 * scratch in the memory of `be`, whose ops the passes run. t and be are
 * borrowed and must outlive the instance; the caller frees *out with
 * model_destroy (*out is NULL on failure). Activation checkpointing: with
 * ckpt_every = k > 0, blocks 0, k, 2k, ... keep only their input during the
 * forward and recompute the rest in the backward (k = 1: every block); 0
 * keeps everything; gradients are bit-identical either way. On a plan-only
 * device nothing is allocated but everything is counted, m->plan is set,
 * and the passes only walk the hooks in their real order (so a plan sees
 * every gather and gradient buffer a real step allocates). Errors:
 * ZT_ERR_NOMEM. */
zt_status model_create(const struct param_table *t, const struct compute_backend *be, int B, int T,
                       int ckpt_every, struct model **out);
/* The same for one pipeline stage: activations for its blocks only (the
 * logits only on the last stage), its forward starting from
 * m->boundary_in unless it is the first and its backward from
 * m->boundary_dout unless it is the last (model_family.h's struct model).
 * Its passes acquire exactly param_table_unit_order(t, stage, ...). */
zt_status model_create_stage(const struct param_table *t, const struct compute_backend *be, int B,
                             int T, int ckpt_every, const struct model_stage *stage,
                             struct model **out);
/* The same for a pipeline slot: one of the instances of a stage that hold
 * the micro batches in flight. Slots run their passes one at a time, so
 * all borrow the backward scratch of `lender` (the stage's first slot, or
 * NULL for that one): a stage holds its scratch once, however many micro
 * batches it keeps. A stage that is not the first sends `din` from a
 * buffer of each slot's own (a send may still read it while another
 * slot's backward runs). The lender outlives its borrowers. */
zt_status model_create_slot(const struct param_table *t, const struct compute_backend *be, int B,
                            int T, int ckpt_every, const struct model_stage *stage,
                            const struct model *lender, struct model **out);
/* NEFTune (Jain et al., 2023; Hugging Face's neftune_noise_alpha): in
 * training forwards, noise uniform in [-1, 1] * alpha / sqrt(T * C) is
 * added to the token embeddings, element (row, t, c) drawn from counter
 * t * C + c of the generator keyed by rng_u64(rng_key(seed, "neftune"),
 * row id), so reruns and any layout draw the same noise. Evaluation
 * (m->training 0) sees none. Allocates a B x T x C buffer in be's memory
 * and one on the host. Errors: ZT_ERR_NOMEM. */
zt_status model_neftune_enable(struct model *m, const struct compute_backend *be, double alpha,
                               uint64_t seed);

/* Frees an instance and what it allocated; NULL is a no-op. */
void model_destroy(struct model *m);

/* Forward over host arrays inputs/targets[B*T] (a target < 0: a masked
 * position, not counted), borrowing the parameters through h; sets
 * m->mean_loss, m->loss_sum and m->n_counted. Under context parallelism
 * the arrays are the whole sequences, B*T*cp_size each; the instance
 * keeps its rank's rows (model_parts.h), and the loss and counts are
 * theirs: summed over the context group, the sequence's. A plan-only instance takes NULL for both
 * and only walks the hooks. Errors: the hooks', the compute backend's,
 * ZT_ERR_NOMEM. */
zt_status model_forward(struct model *m, const struct model_unit_hooks *h, const int32_t *inputs,
                        const int32_t *targets);
/* Backward of the last forward: accumulates d(sum of the counted losses *
 * grad_scale / (B*T))/dparams into the hooks' gradient buffers. With no
 * mask grad_scale = 1/accumulation steps (times the loss scale under
 * fp16): the gradient of the micro batch's mean; the training step scales
 * it so that a step's gradient is that of its mean over counted targets
 * (coordinator/train.c). Errors: the hooks', the compute
 * backend's. */
zt_status model_backward(struct model *m, const struct model_unit_hooks *h, float grad_scale);

#endif
