/* worker/fp8_scaling.h — delayed scaling of the fp8 GEMMs' operands
 * (Transformer Engine's DelayedScaling recipe), for every block of a model.
 *
 * With fp8 training each transformer block's four GEMMs (fp8_gemm) read
 * their operands quantised: the input X and the weight W in E4M3, the
 * backward's incoming output gradient dY in E5M2 ("hybrid") or E4M3
 * ("e4m3"). Each of these tensors — block x GEMM x operand — has its own
 * per-tensor scale: q = fp8(x * scale), and the GEMM multiplies
 * fp8_decode(q) * scale_inv (common/fp8.h). This module owns the scales,
 * their amax histories and the step's current amaxes; it computes nothing
 * on tensors. Who quantises is worker/model_parts.h (model_linear_*), who
 * reduces is the coordinator's step.
 *
 * Life of a step, as Transformer Engine runs it:
 *   1. every quantisation uses `scale[i]`, fixed for the whole step (every
 *      micro batch, the activation-checkpointing recompute, evaluation);
 *   2. every training quantisation records max |x| (before scaling) into
 *      `amax[i]` with fp8_scaling_record: a running maximum over the step,
 *      so recording the same tensor twice (a recompute) changes nothing;
 *   3. the coordinator max-reduces `amax[0..n)` over every rank of the run
 *      (one allreduce; a rank contributes 0 for tensors it never saw, such
 *      as another pipeline stage's blocks, and its slice's maximum for a
 *      tensor-parallel slice), so every layout gets the scales of a 1-rank
 *      run;
 *   4. fp8_scaling_update pushes the reduced amaxes into the histories and
 *      computes the next step's scales: amax = max over the history
 *      (`max`) or this step's (`most_recent`); scale = (fp8_max / amax) /
 *      2^margin, the previous scale kept where amax is 0 or not finite,
 *      and FLT_MAX where the quotient overflows (Transformer Engine's
 *      _default_sf_compute); scale_inv = 1 / scale. The history is TE's
 *      [len][n] array: row 0 receives the step's amax, then the rows roll
 *      up by one (row 0 goes last) and row 0 is zeroed.
 * The first step's scales are 1.
 *
 * Gradients and the data-parallel world: the coordinator's backward is
 * that of the world's mean loss times the data-parallel size D (each rank's
 * gradient is averaged over D after the backward, coordinator/train.c), so
 * the dY a rank sees is D times the mean loss's. `grad_divisor` (set to D)
 * divides it out before recording and scaling — the amax recorded is
 * amax(dY) / D and the quantisation multiplies by scale / D — so that every
 * data-parallel size quantises the same tensor: bit for bit when D is a
 * power of two. (Transformer Engine lets each layout see its own dY;
 * its 1-rank and D-rank runs then differ from the first step on.)
 *
 * A non-finite amax (a NaN or infinity in a tensor) is recorded as +inf:
 * it survives the max-reduction whatever the MPI library does with NaNs,
 * and like TE's NaN it keeps the scale unchanged while in the history.
 *
 * A checkpoint stores the scales and histories (fp8_scaling_get_state), so
 * a resumed run continues with the scales an uninterrupted one would use.
 *
 * Ownership: fp8_scaling_create allocates everything; the parameter table
 * the scaling belongs to owns it (struct param_table's fp8), so every model
 * instance of the table — a pipeline stage's several, evaluation's —
 * shares one state per block.
 */
#ifndef ZT_WORKER_FP8_SCALING_H
#define ZT_WORKER_FP8_SCALING_H

#include <stddef.h>

#include "../common/fp8.h"
#include "../common/status.h"

/* fp8.format: which format the backward's gradients take. */
enum fp8_recipe_format {
    FP8_RECIPE_HYBRID, /* "hybrid": X and W in E4M3, dY in E5M2 */
    FP8_RECIPE_E4M3,   /* "e4m3": all three in E4M3 */
};

/* fp8.amax_compute_algo: the amax a scale is computed from. */
enum fp8_amax_algo {
    FP8_AMAX_MAX,         /* "max": the largest in the history */
    FP8_AMAX_MOST_RECENT, /* "most_recent": the last step's */
};

struct fp8_recipe {
    enum fp8_recipe_format format;
    int amax_history_len; /* >= 1 */
    enum fp8_amax_algo amax_compute_algo;
    int margin; /* scales are divided by 2^margin, >= 0 */
};

/* A transformer block's GEMMs, in both families: the attention's input
 * projection (GPT-2's c_attn; Llama's q|k|v, one fused GEMM as Transformer
 * Engine's LayerNormLinear runs it), its output projection (c_proj;
 * o_proj), the MLP's input projection (c_fc; gate|up, fused as TE's
 * LayerNormMLP) and its output projection (c_proj; down_proj). */
enum fp8_gemm { FP8_GEMM_QKV, FP8_GEMM_ATTN_OUT, FP8_GEMM_MLP_IN, FP8_GEMM_MLP_OUT, FP8_GEMMS };

/* A GEMM's quantised operands. */
enum fp8_operand { FP8_INPUT, FP8_WEIGHT, FP8_GRAD_OUTPUT, FP8_OPERANDS };

struct fp8_scaling {
    struct fp8_recipe recipe;
    int n_blocks;
    size_t n;           /* tensors: n_blocks * FP8_GEMMS * FP8_OPERANDS */
    float *scale;       /* [n]: this step's scales */
    float *scale_inv;   /* [n]: 1 / scale */
    float *amax;        /* [n]: this step's amaxes so far (fp8_scaling_record) */
    float *history;     /* [amax_history_len][n], row 0 the newest (see step 4) */
    float grad_divisor; /* dY is divided by it (the data-parallel size); default 1 */
};

/* A scaling state for n_blocks blocks: scales 1, histories and amaxes 0.
 * Errors: ZT_ERR_NOMEM. */
zt_status fp8_scaling_create(const struct fp8_recipe *r, int n_blocks, struct fp8_scaling **out);
/* Frees s and everything it holds; NULL is a no-op. */
void fp8_scaling_destroy(struct fp8_scaling *s);

/* The index of block l's GEMM g's operand o in the arrays. */
static inline size_t fp8_scaling_index(int l, enum fp8_gemm g, enum fp8_operand o)
{
    return ((size_t)l * FP8_GEMMS + (size_t)g) * FP8_OPERANDS + (size_t)o;
}

/* The format operand o is quantised to under recipe r. */
enum fp8_format fp8_operand_format(const struct fp8_recipe *r, enum fp8_operand o);

/* amax[i] = max(amax[i], a); a non-finite a is recorded as +inf. */
void fp8_scaling_record(struct fp8_scaling *s, size_t i, float a);

/* Step 4 of the design comment, on amax[] as the caller reduced it: the
 * histories take it, the scales are recomputed, amax[] is zeroed. */
void fp8_scaling_update(struct fp8_scaling *s);

/* What a checkpoint keeps of s: the scales, then the history rows
 * (fp8_scaling_state_len floats; the step's amaxes are 0 between steps,
 * the inverses follow from the scales). set_state takes it back. */
size_t fp8_scaling_state_len(const struct fp8_scaling *s);
void fp8_scaling_get_state(const struct fp8_scaling *s, float *out);
void fp8_scaling_set_state(struct fp8_scaling *s, const float *in);

/* The scale for amax a under recipe r for format f, `prev` where a is 0 or
 * not finite (step 4's formula). */
float fp8_scale_of(const struct fp8_recipe *r, enum fp8_format f, float a, float prev);

#endif
