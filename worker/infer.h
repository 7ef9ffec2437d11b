/* worker/infer.h — generation's forward: one sequence through a whole
 * model, with a key/value cache per layer, so that each new token costs
 * one token's forward rather than the whole sequence's.
 *
 * The model is a family's table (GPT-2 or Llama; adapters merged in, not
 * sliced, not quantised) with its full fp32 weights in the flat order, as
 * run_checkpoint_read_model and the Hugging Face reader give them. An
 * infer_model borrows both and owns its cache and activations, host memory
 * the CPU op table computes in (worker/ops.h: attention_cached_forward
 * over the cache, the training ops for the rest).
 *
 * Life: infer_open -> infer_step (the prompt's tokens, then one token per
 * step; positions follow on) ... -> infer_reset (a new sequence) or
 * infer_close. A step of n tokens at positions p .. p+n-1 gives the logits
 * of the last of them: the training forward's logits at that position of
 * the sequence so far, within the ops' rounding (tests/test_infer.c).
 */
#ifndef ZT_WORKER_INFER_H
#define ZT_WORKER_INFER_H

#include <stdint.h>

#include "../common/status.h"
#include "model_family.h"
#include "ops.h"

struct infer_model;

/* A model for sequences of at most the table's block_size positions.
 * t and params are borrowed and must outlive it; ops is the CPU's table
 * (ops_cpu_backend) or one whose pointers are host memory. Errors:
 * ZT_ERR_UNSUPPORTED (a family without a cached forward, a table with
 * adapters, slices or a 4-bit base), ZT_ERR_NOMEM. */
zt_status infer_open(const struct param_table *t, const float *params,
                     const struct ops_backend *ops, struct infer_model **out);
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
 * logits of the last one into logits[V] (host). Errors: ZT_ERR_USAGE when
 * the sequence would pass infer_max_positions (nothing is run), those of
 * the ops. */
zt_status infer_step(struct infer_model *m, const int32_t *tokens, int n, float *logits);

#endif
