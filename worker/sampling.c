/* worker/sampling.c — see sampling.h. The filters need the ids in order of
 * their logits; a full sort of the vocabulary per token (qsort, ties by
 * id so the order is total) costs milliseconds, well under a step's
 * forward of any real model. */
#include "sampling.h"

#include <math.h>
#include <stdlib.h>

#include "../common/rng.h"

static int32_t argmax(const float *logits, int V)
{
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

/* qsort has no context argument: the logits travel with each id. */
struct ranked {
    float logit;
    int32_t id;
};

static int by_logit(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

int32_t sampling_pick(const struct sampling *s, const float *logits, int V, uint64_t key,
                      uint64_t counter, int32_t *order)
{
    if (s->temperature <= 0.0)
        return argmax(logits, V);
    struct ranked *r = malloc((size_t)V * sizeof *r);
    if (!r) /* no memory for the sort: the most likely token is still a fair answer */
        return argmax(logits, V);
    for (int i = 0; i < V; i++)
        r[i] = (struct ranked){logits[i], i};
    qsort(r, (size_t)V, sizeof *r, by_logit);
    const int k = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    double total = 0.0;
    for (int i = 0; i < k; i++) {
        order[i] = r[i].id;
        total += exp(((double)r[i].logit - r[0].logit) / s->temperature);
    }
    /* the nucleus: the fewest ids whose mass reaches top_p */
    int kept = 0;
    double mass = 0.0;
    while (kept < k && (kept == 0 || mass < s->top_p * total))
        mass += exp(((double)r[kept++].logit - r[0].logit) / s->temperature);
    const double u = rng_uniform(key, counter) * mass;
    double acc = 0.0;
    int32_t pick = order[kept - 1];
    for (int i = 0; i < kept; i++) {
        acc += exp(((double)r[i].logit - r[0].logit) / s->temperature);
        if (u < acc) {
            pick = order[i];
            break;
        }
    }
    free(r);
    return pick;
}
