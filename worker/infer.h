/* worker/infer.h — generation's forward: one sequence through a model,
 * with a key/value cache per layer, so that each new token costs one
 * token's forward rather than the whole sequence's.
 *
 * The model is a family's table (GPT-2 or Llama; adapters merged in, not
 * quantised) with its fp32 weights in the flat order, as
 * run_checkpoint_read_model and the Hugging Face reader give them: the
 * whole model, or one rank's tensor-parallel slice of it
 * (param_table_tp_slice, without sequence parallelism), whose cache holds
 * the rank's heads only and whose steps call the group's collectives
 * (struct infer_tp). An infer_model borrows table and weights and owns its
 * cache and activations, host memory the CPU op table computes in
 * (worker/ops.h: attention_cached_forward over the cache, the training ops
 * for the rest).
 *
 * Life: infer_open -> infer_step (the prompt's tokens, then one token per
 * step; positions follow on) ... -> infer_reset (a new sequence) or
 * infer_close. A step of n tokens at positions p .. p+n-1 gives the logits
 * of the last of them: the training forward's logits at that position of
 * the sequence so far, within the ops' rounding (tests/test_infer.c); a
 * slice's, the whole model's within the rounding of the sums over the
 * ranks, the same row on every rank (tests/test_infer_tp.c).
 */
#ifndef ZT_WORKER_INFER_H
#define ZT_WORKER_INFER_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "model_family.h"
#include "ops.h"

struct infer_model;

/* The collectives of a slice's tensor-parallel group, over host fp32
 * buffers; every rank of the group calls them in the same order. */
struct infer_tp {
    void *ctx;
    /* buf[n] becomes its sum over the ranks, the same on each */
    zt_status (*allreduce_sum)(void *ctx, float *buf, size_t n);
    /* in[n] of each rank into out[n * ranks], in rank order */
    zt_status (*allgather)(void *ctx, const float *in, float *out, size_t n);
};

/* A model for sequences of at most the table's block_size positions.
 * t and params are borrowed and must outlive it; ops is the CPU's table
 * (ops_cpu_backend) or one whose pointers are host memory; tp (copied) is
 * the group's collectives for a slice over more than one rank, ignored
 * (may be NULL) for a whole model. Errors: ZT_ERR_UNSUPPORTED (a family
 * without a cached forward, a table with adapters, a 4-bit base or
 * sequence parallelism, a slice without tp), ZT_ERR_NOMEM. */
zt_status infer_open(const struct param_table *t, const float *params,
                     const struct ops_backend *ops, const struct infer_tp *tp,
                     struct infer_model **out);
/* Frees it; NULL-safe. */
void infer_close(struct infer_model *m);

/* The positions a sequence may hold (block_size), the vocabulary, and
 * how many positions the cache holds now. */
int infer_max_positions(const struct infer_model *m);
int infer_vocab_size(const struct infer_model *m);
int infer_position(const struct infer_model *m);

/* Forgets the sequence: the next step starts at position 0. */
void infer_reset(struct infer_model *m);

/* Runs tokens[0..n) (n >= 1, each in the vocabulary) at the next n
 * positions, adds their keys and values to the cache and writes the
 * logits of the last one into logits[V] (host; the whole row, on every
 * rank of a slice's group: collective there). Errors: ZT_ERR_USAGE when
 * the sequence would pass infer_max_positions (nothing is run), those of
 * the ops and of the collectives. */
zt_status infer_step(struct infer_model *m, const int32_t *tokens, int n, float *logits);

#endif
