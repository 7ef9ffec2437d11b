/* worker/tensor_parallel.h — Megatron's tensor parallelism as a transform
 * of a parameter table.
 *
 * A family marks each tensor of its table with how T ranks cut it
 * (`param_tensor.tp_split`): a column-parallel linear layer's weight
 * [out, in] and bias by rows (each rank computes out/T of the outputs),
 * a row-parallel one's weight by columns (each rank reads in/T of the
 * inputs and the partial outputs are summed over the ranks), the token
 * embedding and an untied head by rows (vocabulary-parallel), and norms,
 * position embeddings and row-parallel biases not at all. A fused
 * query-key-value weight is cut in `tp_parts` = 3 row blocks, so that each
 * rank holds the same heads of the three.
 *
 * `param_table_tp_slice` turns the whole model's table into rank t's: the
 * same tensors in the same units, each with its slice's shape, laid out
 * back to back as the family's tables are. ZeRO then shards that table
 * over the data-parallel ranks as it shards any other. The slice keeps a
 * copy of the whole table, and `param_table_tp_runs` maps any range of the
 * slice's flat space to the runs of the whole model's flat space it holds:
 * what initialisation (the same values whatever the layout), Hugging Face
 * weights and checkpoints read and write by.
 *
 * Vocabulary padding (Megatron's --make-vocab-size-divisible-by): T
 * ranks cannot cut GPT-2's 50,257 rows evenly, so a slice may be cut from
 * a padded vocabulary, a multiple of T (model.pad_vocab_size_to_multiple_of
 * times T). The whole model keeps its true vocabulary; each rank holds
 * vocab_padded / T rows of the embedding and of an untied head, the last
 * ranks' tails being padding rows that map to nothing of the whole model
 * (no run holds them). They start at zero and stay there: no token looks
 * them up, the loss gives their logits no probability and so no gradient
 * (worker/ops.h's crossentropy_vocab_*). So checkpoints, Hugging Face
 * weights and exports, read and written through the whole model's flat
 * space, hold the true vocabulary whatever T padded it for.
 *
 * What the model computes with a slice (the allreduces that complete a
 * row-parallel output, the vocabulary-parallel loss) is the family's;
 * this file only knows shapes.
 */
#ifndef ZT_WORKER_TENSOR_PARALLEL_H
#define ZT_WORKER_TENSOR_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "model_family.h"

enum tp_split {
    TP_REPLICATED = 0, /* every rank holds it whole */
    TP_ROWS,           /* rows cut into T slices (per part): column-parallel, vocabulary-parallel */
    TP_COLS,           /* columns cut into T slices: row-parallel */
};

/* The tensor-parallel size and rank of table t (1 and 0 for a whole
 * model's). */
static inline int param_table_tp_size(const struct param_table *t)
{
    return t->whole ? t->tp_size : 1;
}
static inline int param_table_tp_rank(const struct param_table *t)
{
    return t->whole ? t->tp_rank : 0;
}

/* The whole model's table: t's `whole`, or t itself. */
static inline const struct param_table *param_table_whole(const struct param_table *t)
{
    return t->whole ? t->whole : t;
}

/* The vocabulary `tp` ranks compute with: `vocab` rounded up to a
 * multiple of `multiple` * tp, or vocab itself when multiple is 1 (no
 * padding: tp must then divide it). multiple >= 1, tp >= 1. */
int64_t tp_vocab_padded(int vocab, int multiple, int tp);

/* Rank `rank`'s slice of `whole` over `size` ranks into *out (free with
 * param_table_free; it owns a copy of whole), its vocabulary tensors
 * (param_tensor.tp_vocab) cut from `vocab_padded` rows (0: the true
 * vocabulary, unpadded). size 1 gives a copy that is the whole model,
 * padded if vocab_padded says so. Errors: ZT_ERR_CONFIG when size does not
 * divide a cut dimension (naming the tensor and the dimension) or
 * vocab_padded is below the vocabulary, not a multiple of size or above
 * 2^31 - 1, ZT_ERR_NOMEM. LoRA adapters are cut as their base weight
 * (lora.h); a 4-bit base's tensors keep their storage, and each rank
 * quantises its own slice (param_quant.h). */
zt_status param_table_tp_slice(const struct param_table *whole, int size, int rank,
                               int64_t vocab_padded, struct param_table *out);

/* The vocabulary of t's model (its embedding's rows, tensor 0 of every
 * family), and the padded one t's ranks compute with (a slice's rows of it
 * times the tensor-parallel size): equal unless the slice is padded. */
static inline int param_table_vocab(const struct param_table *t)
{
    return param_table_whole(t)->tensors[0].rows;
}
static inline int param_table_vocab_padded(const struct param_table *t)
{
    return t->tensors[0].rows * param_table_tp_size(t);
}

/* Calls fn(arg, whole_begin, n, at) for each maximal run of the slice's
 * flat elements [begin, end) that lies contiguously in the whole model's
 * flat space: slice elements [begin + at, begin + at + n) are whole
 * elements [whole_begin, whole_begin + n). In the slice's order; a whole
 * model's table (no `whole`) is one run. Padding rows are in no run: a
 * reader of runs leaves them as it found them (zero). */
typedef void (*tp_run_fn)(void *arg, size_t whole_begin, size_t n, size_t at);
void param_table_tp_runs(const struct param_table *t, size_t begin, size_t end, tp_run_fn fn,
                         void *arg);

/* Where tensor k of table t lies in the whole tensor's own index space
 * (its element 0 at 0): slice element s is whole element
 * *first + (s / *run) * *stride + s % *run, in runs of contiguous elements
 * (a rows cut: one run per part; a columns cut: one per row). A tensor
 * every rank holds whole, or a whole model's: *run = 0, element s is s. */
void param_table_tp_tensor_runs(const struct param_table *t, int k, size_t *first, size_t *run,
                                size_t *stride);

/* param_table_init for any table: a slice's elements get the whole
 * model's values at their places, so every layout starts alike, and its
 * padding rows zero. */
void param_table_tp_init(const struct param_table *t, uint64_t seed, size_t begin, size_t end,
                         float *dst);

/* The slice t's weights out of the whole model's (whole[whole's
 * n_params], flat order) into dst[t->n_params], its padding rows zero; a
 * whole model's table copies them all. */
void param_table_tp_take(const struct param_table *t, const float *whole, float *dst);

/* Deep copy of a whole model's table, adapters included (its own arrays;
 * free with param_table_free). Errors: ZT_ERR_NOMEM. */
zt_status param_table_copy(const struct param_table *src, struct param_table *out);

#endif
