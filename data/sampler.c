/* data/sampler.c — which windows each rank trains on at each step.
 *
 * The rule (data.h) makes the global batch of a step a function of (seed,
 * step) alone: all ranks walk one endless sequence of windows, epoch after
 * epoch, each epoch a permutation drawn with the counter-based generator
 * from (seed, epoch), and the data-parallel size only decides how a step's
 * G consecutive entries are cut into slices. So a run on 4 data-parallel
 * ranks sees the same sequences as the same run on 1 rank with 4x the
 * accumulation, and a resumed run needs nothing but the step number. Ranks
 * that hold the same data-parallel rank (in other kinds of group) draw the
 * same windows.
 *
 * Each rank keeps one epoch's permutation (4 bytes per window) and redraws
 * it when an entry falls in another epoch; a step straddles at most one
 * boundary, so that is one shuffle per epoch in practice.
 */
#include "data.h"

#include <stdlib.h>
#include <string.h>

#include "../common/rng.h"

/* Fisher-Yates, each draw from its own counter: the result does not depend
 * on how many permutations were drawn before or on which rank. */
static void draw_permutation(uint32_t *perm, size_t n, uint64_t key, uint64_t epoch)
{
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    for (size_t i = n; i-- > 1;) {
        uint64_t r = rng_u64(key, (epoch << 32) | (uint64_t)i);
        size_t j = (size_t)(r % ((uint64_t)i + 1));
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static zt_status check_shape(int seq_len, int micro, int accum, int dp_size, int dp_rank)
{
    if (seq_len < 1 || micro < 1 || accum < 1 || dp_size < 1)
        return zt_error_set(ZT_ERR_CONFIG,
                            "sampler: seq_len %d, micro batch %d, accumulation %d and "
                            "data-parallel size %d must all be >= 1",
                            seq_len, micro, accum, dp_size);
    if (dp_rank < 0 || dp_rank >= dp_size)
        return zt_error_set(ZT_ERR_CONFIG, "sampler: data-parallel rank %d is outside 0 .. %d",
                            dp_rank, dp_size - 1);
    return ZT_OK;
}

zt_status sampler_init(struct sampler *s, size_t n_tokens, int seq_len, uint64_t seed, int micro,
                       int accum, int dp_size, int dp_rank)
{
    memset(s, 0, sizeof *s);
    ZT_TRY(check_shape(seq_len, micro, accum, dp_size, dp_rank));
    if (n_tokens < (size_t)seq_len + 1)
        return zt_error_set(ZT_ERR_DATA,
                            "data: %zu tokens are fewer than seq_len + 1 = %lld: not one "
                            "training window",
                            n_tokens, (long long)seq_len + 1);
    size_t n_windows = (n_tokens - 1) / (size_t)seq_len;
    /* Window indices are stored in 32 bits and draws use 32-bit counters. */
    if (n_windows > UINT32_MAX)
        return zt_error_set(ZT_ERR_DATA,
                            "data: %zu windows of %d tokens are more than the sampler supports "
                            "(2^32 - 1): use a longer seq_len or split the data",
                            n_windows, seq_len);
    uint32_t *perm = malloc(n_windows * sizeof *perm);
    if (!perm)
        return zt_error_set(ZT_ERR_NOMEM, "sampler: cannot allocate %zu window indices", n_windows);
    *s = (struct sampler){.n_windows = n_windows,
                          .seq_len = seq_len,
                          .seed = seed,
                          .micro = micro,
                          .accum = accum,
                          .dp_size = dp_size,
                          .dp_rank = dp_rank,
                          .epoch = 0,
                          .perm = perm};
    draw_permutation(perm, n_windows, rng_key(seed, "data"), 0);
    return ZT_OK;
}

void sampler_free(struct sampler *s)
{
    if (!s)
        return;
    free(s->perm);
    s->perm = NULL;
}

size_t sampler_window(struct sampler *s, uint64_t i)
{
    ZT_ASSERT(s->perm && s->n_windows > 0);
    uint64_t epoch = i / s->n_windows;
    if (epoch != s->epoch) {
        draw_permutation(s->perm, s->n_windows, rng_key(s->seed, "data"), epoch);
        s->epoch = epoch;
    }
    return s->perm[i % s->n_windows];
}

/* The global entry index of row 0 of (step, micro_step). */
static uint64_t first_row(const struct sampler *s, uint64_t step, int micro_step)
{
    ZT_ASSERT(micro_step >= 0 && micro_step < s->accum);
    uint64_t per_rank = (uint64_t)s->micro * (uint64_t)s->accum;
    uint64_t global = per_rank * (uint64_t)s->dp_size;
    return step * global + (uint64_t)s->dp_rank * per_rank +
           (uint64_t)micro_step * (uint64_t)s->micro;
}

void sampler_rows(const struct sampler *s, uint64_t step, int micro_step, uint64_t *ids)
{
    const uint64_t first = first_row(s, step, micro_step);
    for (int b = 0; b < s->micro; b++)
        ids[b] = first + (uint64_t)b;
}

int token_window_fill(const struct token_buffer *data, size_t w, int seq_len, int32_t *inputs,
                      int32_t *targets)
{
    const size_t len = (size_t)seq_len, first = w * len;
    ZT_ASSERT(data->n >= first + len + 1);
    memcpy(inputs, data->tokens + first, len * sizeof *inputs);
    memcpy(targets, data->tokens + first + 1, len * sizeof *targets);
    if (!data->mask)
        return seq_len;
    int counted = 0;
    for (size_t j = 0; j < len; j++) {
        const int keep = data->mask[first + 1 + j] != 0;
        targets[j] = keep ? targets[j] : -1;
        counted += keep;
    }
    return counted;
}

int sampler_fill(struct sampler *s, const struct token_buffer *data, uint64_t step, int micro_step,
                 int32_t *inputs, int32_t *targets)
{
    ZT_ASSERT(data->n >= s->n_windows * (size_t)s->seq_len + 1);
    const uint64_t first = first_row(s, step, micro_step);
    const size_t len = (size_t)s->seq_len;
    int counted = 0;
    for (int b = 0; b < s->micro; b++)
        counted += token_window_fill(data, sampler_window(s, first + (uint64_t)b), s->seq_len,
                                     inputs + (size_t)b * len, targets + (size_t)b * len);
    return counted;
}

/* Counted targets of window w: its mask entries w*T+1 .. w*T+T. */
static uint64_t window_counted(const struct token_buffer *data, size_t w, size_t len)
{
    uint64_t n = 0;
    for (size_t j = 1; j <= len; j++)
        n += data->mask[w * len + j] != 0;
    return n;
}

uint64_t sampler_counted(struct sampler *s, const struct token_buffer *data, uint64_t step)
{
    const uint64_t global = (uint64_t)s->micro * (uint64_t)s->accum * (uint64_t)s->dp_size;
    const size_t len = (size_t)s->seq_len;
    if (!data->mask)
        return global * len;
    uint64_t n = 0;
    for (uint64_t i = 0; i < global; i++)
        n += window_counted(data, sampler_window(s, step * global + i), len);
    return n;
}
