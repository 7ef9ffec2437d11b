/* worker/model_parts.h — for the model families' implementations only
 * (worker/model.c, worker/llama.c): what every family's table and passes
 * do the same way. Callers of a model use model_family.h.
 */
#ifndef ZT_WORKER_MODEL_PARTS_H
#define ZT_WORKER_MODEL_PARTS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/clock.h"
#include "../common/status.h"
#include "backend.h"
#include "device.h"
#include "model_family.h"
#include "tensor_parallel.h"

/* Appends tensor `name` [rows, cols] of `unit` at *offset (then advanced)
 * to t, whose tensors array has room: trainable, in the working
 * precision, weight decay on matrices only (cols > 1). */
void model_table_add(struct param_table *t, const char *name, int rows, int cols, int unit,
                     size_t *offset);

/* Initial values dst[i] = (float)(scale * rng_normal(key, lo + i)) for
 * flat elements [lo, hi): blocks of them on the OpenMP threads, each
 * value a function of its index alone, so the thread count cannot change
 * it. */
void model_init_normal(uint64_t key, size_t lo, size_t hi, double scale, float *dst);

/* The tensor added last is a linear layer's weight: PARAM_LINEAR, or
 * PARAM_LINEAR_HEAD for the output head. */
static inline void model_table_mark_linear(struct param_table *t, int kind)
{
    t->tensors[t->n_tensors - 1].linear = kind;
}

/* How tensor parallelism cuts the tensor added last (worker/tensor_parallel.h:
 * enum tp_split, its row parts, and the rows or columns kept together). */
static inline void model_table_mark_tp(struct param_table *t, int split, int parts, int block)
{
    t->tensors[t->n_tensors - 1].tp_split = split;
    t->tensors[t->n_tensors - 1].tp_parts = parts;
    t->tensors[t->n_tensors - 1].tp_block = block;
}

/* The tensor added last has the vocabulary as its rows: the token
 * embedding or an untied head, cut vocabulary-parallel and padded
 * (worker/tensor_parallel.h). */
static inline void model_table_mark_vocab(struct param_table *t)
{
    model_table_mark_tp(t, TP_ROWS, 1, 1);
    t->tensors[t->n_tensors - 1].tp_vocab = 1;
}

/* The type instance m computes in (param_table.compute). */
static inline enum zt_dtype model_act(const struct model *m)
{
    return m->table->compute;
}

/* Tensor k inside a unit's borrowed parameters (elements of t->compute),
 * whose first element is unit_base. */
static inline const void *model_param_in(const struct param_table *t, int k, const void *unit_base)
{
    const struct param_tensor *p = &t->tensors[k];
    return (const char *)unit_base +
           (p->offset - t->unit_offset[p->unit]) * zt_dtype_size(t->compute);
}

/* Appends a region of n elements of es bytes to a family's byte layout of
 * activations or scratch at *o, and returns its offset. Regions start
 * 4-byte aligned, so fp32 statistics may follow 16-bit activations; an
 * fp32 layout is the same as one counted in floats. */
static inline size_t model_layout_take(size_t *o, size_t n, size_t es)
{
    const size_t at = *o;
    *o = (at + n * es + 3) / 4 * 4;
    return at;
}

/* An fp32 statistic at a byte address p of such a layout. */
#define MODEL_STAT(p) ((float *)(void *)(p))

/* Tensor k inside a unit's borrowed fp32 gradients; NULL when the unit has no gradients (a frozen
 * unit's grads_acquire lends NULL): the ops then skip that weight gradient. */
static inline float *model_grad_in(const struct param_table *t, int k, float *unit_base)
{
    const struct param_tensor *p = &t->tensors[k];
    return unit_base ? unit_base + (p->offset - t->unit_offset[p->unit]) : NULL;
}

/* ---- LoRA adapters in the passes (worker/lora.h) ----
 *
 * A family borrows its units through model_unit_* rather than the hooks
 * directly: each call borrows the unit's adapter unit right after it (the
 * order param_table_unit_order gives a stage-3 engine) and keeps the
 * adapter pointers here, so that model_lora_forward/backward, called after
 * each linear layer's matmul, find the adapters of the layer's weights.
 * Without adapters they are the plain hook calls and model_lora_* return
 * at once. */
struct model_adapters {
    const void **w; /* [n_units]: base unit u's borrowed adapter parameters */
    float **g;      /* [n_units]: and gradients */
    void *scratch;  /* 2 * B*T*r elements of the compute type: u and du of one adapter */
    size_t scratch_bytes;
    /* lora_dropout > 0: one adapter's mask (0 or 1 / (1 - p)), dropped
     * input and its gradient, B*T*cols elements of the compute type each
     * for the widest adapted input, in the device's memory; the mask drawn
     * on the host first (mask_host, fp32; host_typed: narrowed for the
     * copy under 16 bits, else NULL). */
    void *mask, *dropped, *ddropped;
    float *mask_host;
    void *host_typed;
    size_t drop_bytes;
    /* Under tensor parallelism: the fp32 weight gradient of an adapter
     * factor every rank holds whole, this rank's part of it, before the
     * sum over the ranks (model_lora_backward); NULL on a whole model. */
    float *partial;
    size_t partial_bytes;
    const struct device *dev;
    const struct ops_backend *ops;
};

/* ---- NEFTune (model_neftune_enable) ---- */
struct model_neftune {
    double alpha;
    uint64_t key;     /* rng_key(seed, "neftune") */
    float *host;      /* B*T*C: the noise drawn on the host */
    void *host_typed; /* narrowed to the compute type under 16 bits, else NULL */
    void *dev;        /* the same in the device's memory (workspace), compute type */
    size_t bytes;
    const struct device *device;
    const struct ops_backend *ops;
};

/* After the token embedding of a training forward: adds the noise to the
 * embeddings x[B*T, C] (nothing when off or not training). */
zt_status model_neftune_apply(struct model *m, void *x, int C);
void model_neftune_free(struct model *m);

/* Sets up m->lora for m's table (NULL without adapters), its scratch in
 * be's memory (counted as workspace). Errors: ZT_ERR_NOMEM. */
zt_status model_adapters_create(struct model *m, const struct compute_backend *be);
void model_adapters_destroy(struct model *m);

zt_status model_unit_acquire(struct model *m, const struct model_unit_hooks *h, int u,
                             const void **params);
zt_status model_unit_release(struct model *m, const struct model_unit_hooks *h, int u);
zt_status model_unit_grads_acquire(struct model *m, const struct model_unit_hooks *h, int u,
                                   float **grads);
zt_status model_unit_grads_done(struct model *m, const struct model_unit_hooks *h, int u);

/* After the matmul of tensors k .. k+n-1 (weights whose outputs lie side by
 * side in out's rows, as q|k|v do): adds each adapted one's low-rank term
 * into its columns of out[N, sum of rows], given the matmul's input
 * inp[N, C]. */
zt_status model_lora_forward(struct model *m, int k, int n, void *out, const void *inp, int N);
/* The backward of the same, given dout (the gradient w.r.t. out): the
 * adapters' gradients, and their part of dinp (NULL: not wanted). On a
 * tensor-parallel slice, adapters are cut as their base (lora.c) and the
 * forward needs nothing more (a row-parallel base's partial output takes
 * the adapter's partial term into the same sum); here the gradient of the
 * factor every rank holds whole is summed over the ranks through h, and
 * dinp gets this rank's part, as the base's matmul gives it. */
zt_status model_lora_backward(struct model *m, const struct model_unit_hooks *h, int k, int n,
                              void *dinp, const void *dout, const void *inp, int N);

/* ---- fp8 GEMMs (worker/model_fp8.c; the scaling: fp8_scaling.h) ----
 *
 * A family runs each block's four GEMMs (enum fp8_gemm) through
 * model_linear_forward and model_linear_backward. Without fp8 (m->fp8
 * NULL) they are the plain matmul ops. With it they emulate Transformer
 * Engine's fp8 GEMM exactly, on fp32 hardware:
 *   forward   X and W are quantised with their scales (E4M3), their amaxes
 *             recorded in a training pass, and decoded times scale_inv
 *             into fp32 scratch; matmul_forward multiplies those: the
 *             values an fp8 tensor core multiplies, accumulated in fp32
 *             (only the order of the fp32 sums may differ). The bias is
 *             added in fp32.
 *   backward  dY is quantised (E5M2 under "hybrid", else E4M3; divided by
 *             the scaling's grad_divisor first, fp8_scaling.h) and decoded;
 *             dX = dY' W' and dW = dY'^T X', X' decoded from the fp8 bytes
 *             of X the forward kept and W quantised again with the step's
 *             unchanged scale (the same bytes); dbias from the unquantised
 *             dY, as TE's fused cast-and-dbias computes it.
 * Buffers, each through device_alloc (so a plan counts them):
 *   - the kept fp8 inputs of every block whose internals are kept, plus
 *     one slot for the checkpointed blocks' recompute (as the activations
 *     are laid out): N * (sum of the GEMMs' in) bytes a slot, under
 *     `activations` ("fp8 activations"). The fp32 inputs stay where the
 *     families' layouts keep them, so in this emulation fp8 adds memory
 *     rather than saving it; a GPU implementation would drop them;
 *   - one GEMM's fp8 weight and dY at a time (max in*out + N * max out
 *     bytes), under `workspace` ("fp8 weight and gradient copies");
 *   - the decoded fp32 operands X', W', dY' (N * max in + max in*out +
 *     N * max out floats), under `workspace` ("fp8 emulation scratch"):
 *     what only the emulation needs.
 * N = B*T (inputs gathered to all rows under sequence parallelism). */
struct model_fp8 {
    struct fp8_scaling *scaling; /* the table's: shared by its instances */
    const struct device *dev;
    const struct ops_backend *ops;
    int ckpt_every;
    int in[FP8_GEMMS], out[FP8_GEMMS]; /* the family's gemm_shapes */
    size_t x_at[FP8_GEMMS];            /* GEMM g's input inside a slot, bytes */
    size_t slot_bytes;                 /* one block's kept fp8 inputs */
    int n_slots;
    uint8_t *kept; /* n_slots * slot_bytes: activations */
    size_t kept_bytes;
    uint8_t *copies; /* the weight's codes, then dY's: workspace */
    size_t copies_bytes, dy_at;
    float *scratch; /* X', then W', then dY': workspace */
    size_t scratch_bytes, w_at, dy_scratch_at;
};

/* Sets up m->fp8 when m's table has fp8 scaling (NULL otherwise), for
 * activation checkpointing every ckpt_every blocks, in be's memory.
 * Errors: ZT_ERR_NOMEM, the device's. */
zt_status model_fp8_create(struct model *m, const struct compute_backend *be, int ckpt_every);
void model_fp8_destroy(struct model *m);

/* out[N,OC] = inp[N,C] @ weight^T + bias as matmul_forward, for GEMM g of
 * block l: in fp8 when m->fp8 is set (see above). */
zt_status model_linear_forward(struct model *m, const struct ops_backend *ops, int l,
                               enum fp8_gemm g, void *out, const void *inp, const void *weight,
                               const void *bias, int N, int C, int OC);
/* Its backward as matmul_backward (dinp required, dweight and dbias NULL
 * to skip), for GEMM g of block l whose forward was the last one of this
 * instance for that block. */
zt_status model_linear_backward(struct model *m, const struct ops_backend *ops, int l,
                                enum fp8_gemm g, void *dinp, float *dweight, float *dbias,
                                const void *dout, const void *inp, const void *weight, int N, int C,
                                int OC);

/* ---- tensor parallelism (worker/model_tensor.c) ----
 *
 * What both families compute the same way on a table sliced over the
 * tensor-parallel ranks (tensor_parallel.h); on a whole model's table each
 * is the plain op (the allreduce nothing). `ops` is the instance's. */

/* buf[n] of type t becomes its sum or maximum over the tensor-parallel
 * ranks. */
zt_status model_tp_allreduce(struct model *m, const struct model_unit_hooks *h, enum zt_dtype t,
                             void *buf, size_t n, enum model_reduce op);
/* The token embedding (plus wpe's positions unless it is NULL) of the
 * vocabulary slice [v_lo, v_lo + V) this rank holds, summed over the
 * ranks, with NEFTune's noise when it is on (model_neftune_apply): every
 * rank gets the whole embedding out[B*T, C], or under sequence
 * parallelism its rows of it (full[B*T, C] is the scratch the sum is
 * reduce-scattered from; unused otherwise). */
zt_status model_vocab_embed_forward(struct model *m, const struct ops_backend *ops,
                                    const struct model_unit_hooks *h, void *out, void *full,
                                    const int32_t *tokens, const void *wte, const void *wpe, int C,
                                    int V, int v_lo);
/* Its backward into the slice's rows (dwte NULL: frozen, nothing), from
 * dout, this rank's rows of the gradient under sequence parallelism
 * (gathered into full[B*T, C] first). */
zt_status model_vocab_embed_backward(struct model *m, const struct ops_backend *ops,
                                     const struct model_unit_hooks *h, float *dwte, float *dwpe,
                                     const void *dout, void *full, const int32_t *tokens, int C,
                                     int V, int v_lo);
/* The columns of vocabulary slice [v_lo, v_lo + V) of table t that are
 * the true vocabulary, the rest being padding (tensor_parallel.h). */
int model_vocab_real(const struct param_table *t, int V, int v_lo);
/* Whether t's logits are split over ranks or padded: the loss then runs
 * as the vocabulary-parallel ops (and needs model_vocab_loss_forward's
 * stats). */
int model_vocab_split(const struct param_table *t);
/* Softmax cross-entropy over logits[N, V], this rank's vocabulary slice
 * [v_lo, v_lo + V) of them: the row maxima and the sums of exponentials
 * and target logits are reduced over the ranks (stats: 3N floats of the
 * device's memory, unused unless model_vocab_split), so no rank holds all
 * the logits; losses[N] is whole on every rank, probs the slice's. A
 * padded vocabulary's columns get no probability. */
zt_status model_vocab_loss_forward(struct model *m, const struct ops_backend *ops,
                                   const struct model_unit_hooks *h, float *losses, void *probs,
                                   const void *logits, const int32_t *targets, float *stats, int N,
                                   int V, int v_lo);
/* dlogits += (probs - onehot(target)) * dloss over the slice. */
zt_status model_vocab_loss_backward(struct model *m, const struct ops_backend *ops, void *dlogits,
                                    const void *probs, const int32_t *targets, float dloss, int N,
                                    int V, int v_lo);

/* ---- sequence parallelism (worker/model_tensor.c) ----
 *
 * On a slice with tp_sequence (Megatron-LM's sequence parallelism), the
 * residual stream (the embedding's and every block's output, the norms'
 * inputs and outputs, their gradients) holds only this rank's R = N / T
 * of the N = B*T token rows, rows [rank R, rank R + R): every op there
 * works row by row, so any cut of the rows gives the same values, and
 * contiguous blocks of our [B, T, C] rows are what Megatron's cut of its
 * [T, B, C] sequence axis is, bytes and savings alike. A column-parallel
 * layer's input is gathered to all N rows first (and gathered again for
 * its weight gradient in the backward, so that only the rows are kept),
 * and a row-parallel layer's partial output is reduce-scattered to the
 * rows where tensor parallelism alone allreduces it; in the backward the
 * conjugates. A norm's weight gradient is then each rank's rows' part,
 * summed over the ranks. Without tp_sequence every helper is the tensor-
 * parallel op (or nothing, on a whole model). */

/* model_sp_rows (model_family.h): the rows this rank holds. */
/* Where this rank's rows start in a [N, C] buffer (0 without sequence
 * parallelism). */
size_t model_sp_offset(const struct model *m, int C);
/* All N rows of a column-parallel layer's input, from this rank's rows
 * [R, C]: *out is `rows` itself, or full[N, C] they were gathered into
 * (rows may be full + model_sp_offset). */
zt_status model_sp_gather(struct model *m, const struct model_unit_hooks *h, const void *rows,
                          void *full, int C, const void **out);
/* Where a partial sum over the ranks of N rows (a row-parallel layer's
 * output, a column-parallel layer's input gradient) is written: `rows`,
 * or the scratch full[N, C]. */
void *model_sp_partial(const struct model *m, void *rows, void *full);
/* Completes that partial sum into this rank's rows: an allreduce in
 * place, or a reduce-scatter. */
zt_status model_sp_reduce(struct model *m, const struct model_unit_hooks *h, void *partial,
                          void *rows, int C);
/* Where a norm's weight gradient (n floats) accumulates: *out is grad
 * itself (NULL: frozen), or under sequence parallelism tmp[n], zeroed,
 * which model_sp_norm_done then sums over the ranks into grad. */
zt_status model_sp_norm_grad(struct model *m, const struct ops_backend *ops, float *grad,
                             float *tmp, size_t n, float **out);
zt_status model_sp_norm_done(struct model *m, const struct ops_backend *ops,
                             const struct model_unit_hooks *h, float *grad, float *tmp, size_t n);

/* ---- context parallelism (worker/model_context.c) ----
 *
 * On a table with cp_size = C > 1 an instance holds T = S / C rows of each
 * sequence of S tokens: the sequence is cut into 2C chunks of c = T / 2 and
 * rank r keeps chunks r and 2C - 1 - r (Megatron's load balance for the
 * causal mask), local rows [0, c) and [c, T). Every op but attention works
 * row by row and runs on those rows as they are; positions are each row's
 * global one (model_cp_position); attention runs ring-wise over the
 * context group's key/value blocks (ops.h's attention_ring_*), one block
 * passed on per step through the hooks' cp_ring_start and cp_ring_wait. Without context
 * parallelism each helper is the plain op. */
struct model_context {
    const struct device *dev;
    const struct ops_backend *ops;
    int cp, rank;
    void *kv[2], *dkv[2]; /* B*T*cp_kv_width elements of the compute type each */
    size_t kv_bytes;
    void *pos;   /* T*cp_pos_width of the compute type: this rank's rows of wpe */
    float *dpos; /* T*cp_pos_width fp32: their gradient before it goes home */
    size_t pos_bytes, dpos_bytes;
    int32_t *host_tokens; /* 2*B*T: the local inputs, then targets */
};

/* The global position of local row t. */
static inline int model_cp_position(const struct model *m, int t)
{
    const struct param_table *tb = m->table;
    if (tb->cp_size <= 1)
        return t;
    const int c = m->T / 2, chunk = t < c ? tb->cp_rank : 2 * tb->cp_size - 1 - tb->cp_rank;
    return chunk * c + t % c;
}

/* Sets up m->context when m's table has cp_size > 1 (NULL otherwise), its
 * buffers in be's memory (workspace). Errors: ZT_ERR_NOMEM,
 * ZT_ERR_UNSUPPORTED (a backend without ring attention). */
zt_status model_context_create(struct model *m, const struct compute_backend *be);
void model_context_destroy(struct model *m);

/* The rows of a whole micro batch inputs[B, S] (and targets) this rank
 * keeps, in the local order: *in and *tg point at them (the arguments
 * themselves without context parallelism). */
void model_cp_select(struct model *m, const int32_t *inputs, const int32_t *targets,
                     const int32_t **in, const int32_t **tg);

/* Causal attention of this rank's rows qkv[B,T,(NH+2NKV)hs] over the whole
 * sequence: attention_forward's out and lse for them (ops.h). */
zt_status model_attention_forward(struct model *m, const struct ops_backend *ops,
                                  const struct model_unit_hooks *h, void *out, float *lse,
                                  const void *qkv, int NH, int NKV, int hs);
/* Its backward: dqkv += attention_backward's for this rank's rows, their
 * key/value part gathered from every rank's queries. */
zt_status model_attention_backward(struct model *m, const struct ops_backend *ops,
                                   const struct model_unit_hooks *h, void *dqkv, const void *dout,
                                   const void *qkv, const void *out, const float *lse, int NH,
                                   int NKV, int hs);

/* The learned position rows of this rank's T rows, from the whole table
 * wpe[S', cp_pos_width]: wpe itself, or those rows copied out. */
zt_status model_cp_positions(struct model *m, const void *wpe, const void **out);
/* Where their gradient accumulates: *out is dwpe itself (NULL: frozen),
 * or a zeroed fp32 buffer of T rows that model_cp_positions_done then adds
 * into dwpe's rows. */
zt_status model_cp_positions_grad(struct model *m, float *dwpe, float **out);
zt_status model_cp_positions_done(struct model *m, float *dwpe);

/* Activation checkpointing as model_create describes it: block l is
 * checkpointed when ckpt_every > 0 divides it. */
static inline int model_block_checkpointed(int ckpt_every, int l)
{
    return ckpt_every > 0 && l % ckpt_every == 0;
}

/* How many of blocks 0 .. n-1 are checkpointed. */
int model_blocks_checkpointed(int ckpt_every, int n);

/* How many of stage st's blocks are checkpointed, and how many of its
 * blocks before block l (l in the stage) keep their internals: where
 * block l's kept internals lie among the stage's. */
int model_stage_checkpointed(int ckpt_every, const struct model_stage *st);
int model_stage_kept_before(int ckpt_every, const struct model_stage *st, int l);

/* Sets m's pipeline boundaries (model_family.h) for its stage: `in` the
 * stage's input activations, `out` its last block's output, `dres` the
 * backward's running residual gradient (which holds d out on entry and
 * d in on exit), each left NULL where the stage has no such neighbour. */
void model_stage_boundaries(struct model *m, void *in, void *out, void *dres);
/* The size of one boundary: `elems` elements of the compute type
 * (model_sp_rows x C; set by create, plans too). */
void model_stage_boundary_size(struct model *m, size_t elems);

/* A pass over a plan-only device: the hook calls a family's real pass
 * makes, in its order, with no compute, so that a plan sees every gather
 * and gradient buffer a real step allocates (each family's tests compare
 * the two event by event). Every family's passes follow this pattern: the
 * forward acquires and releases each unit of the stage's
 * param_table_unit_order; the backward acquires each unit's parameters and
 * gradients, releases the parameters and completes the gradients, except
 * unit 0 (the embedding, whose gradient completes last: borrowed from the
 * head when it is tied, borrowed at the end of the first stage's backward
 * when not). */
zt_status model_plan_walk(struct model *m, const struct model_unit_hooks *h, enum model_pass pass);

/* Reads the n per-position losses at dev_losses (memory of dev) back and
 * sets m->loss_sum to their sum, m->n_counted to how many of the host
 * targets[n] are >= 0 (a masked position's loss is 0, ops.h) and
 * m->mean_loss to sum / counted (0 when none counts), after handing them
 * to m's probe if it has one. A non-finite loss is
 * not an error here: every rank meets it in the gradient reduction, at the
 * same point. Errors: ZT_ERR_NOMEM, the device's. */
zt_status model_read_mean_loss(struct model *m, const struct device *dev, const float *dev_losses,
                               const int32_t *targets, int n);

/* The forward of a stage that is not the last computes no loss. */
static inline zt_status model_stage_no_loss(struct model *m)
{
    m->loss_sum = 0.0;
    m->n_counted = 0;
    m->mean_loss = 0.0f;
    return ZT_OK;
}

/* Runs the fallible `call` of family instance `fam` (whose `base` is its
 * struct model), adds its time to the profile's category when profiling,
 * and returns its failure from the enclosing function. */
#define MODEL_TIMED(fam, category, call)                                                           \
    do {                                                                                           \
        double timed_t0_ = (fam)->base.profile ? zt_now_seconds() : 0.0;                           \
        zt_status timed_status_ = (call);                                                          \
        if ((fam)->base.profile)                                                                   \
            (fam)->base.profile->seconds[category] += zt_now_seconds() - timed_t0_;                \
        ZT_TRY(timed_status_);                                                                     \
    } while (0)

/* Hands buf[n], the output of the op just run, to instance m's probe
 * (model_family.h's struct model_probe) when it has one, and returns the
 * probe's failure from the enclosing function. */
#define MODEL_PROBE(m, block, tensor, what, buf, n)                                                \
    do {                                                                                           \
        if ((m)->probe)                                                                            \
            ZT_TRY(                                                                                \
                (m)->probe->forward((m)->probe->ctx, block, tensor, what, model_act(m), buf, n));  \
    } while (0)

#endif
