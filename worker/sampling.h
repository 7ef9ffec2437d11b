/* worker/sampling.h — the next token from a row of logits: greedy, or a
 * draw at a temperature restricted to the top k and the top-p nucleus,
 * as Hugging Face's generate() filters them (temperature, then top_k,
 * then top_p). A draw is counter-based (common/rng.h): the same key and
 * counter give the same token on any machine and thread count.
 */
#ifndef ZT_WORKER_SAMPLING_H
#define ZT_WORKER_SAMPLING_H

#include <stdint.h>

struct sampling {
    double temperature; /* 0: greedy */
    int top_k;          /* 0: the whole vocabulary */
    double top_p;       /* 1: no nucleus */
};

/* The token chosen from logits[V]. Greedy: the largest logit, the lowest
 * id among equals. Otherwise softmax(logits / temperature) over the k
 * most likely ids (ties by id), cut to the fewest whose probabilities sum
 * to at least top_p (at least one), renormalised; the draw is
 * rng_uniform(key, counter). order[V] is scratch. */
int32_t sampling_pick(const struct sampling *s, const float *logits, int V, uint64_t key,
                      uint64_t counter, int32_t *order);

#endif
