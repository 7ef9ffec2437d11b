/* scripts/bench/generate_bench.c — decode speed with the key/value cache
 * (worker/infer.h: one token's forward per step) against without it (the
 * whole sequence re-run for each new token, what a model without a cache
 * does), for a GPT-2 of random weights at a given context length: tokens
 * per second of each and their ratio. Greedy tokens, so both paths decode
 * the same sequence. Run by scripts/bench/generate.sh.
 * usage: generate_bench [CONTEXT [NEW [N_LAYER [N_EMBD]]]]  (512 16 4 256) */
#include <stdio.h>
#include <stdlib.h>

#include "common/clock.h"
#include "worker/infer.h"
#include "worker/model.h"
#include "worker/ops.h"
#include "worker/sampling.h"

static int arg(int argc, char **argv, int i, int dflt)
{
    return argc > i ? atoi(argv[i]) : dflt;
}

int main(int argc, char **argv)
{
    const int ctx = arg(argc, argv, 1, 512), n_new = arg(argc, argv, 2, 16);
    const struct gpt2_config c = {.vocab_size = 50257,
                                  .block_size = ctx + n_new,
                                  .n_layer = arg(argc, argv, 3, 4),
                                  .n_head = 4,
                                  .n_embd = arg(argc, argv, 4, 256)};
    struct zt_kvlist shape;
    struct param_table t;
    struct infer_model *m;
    gpt2_describe(&c, &shape);
    if (param_table_build(&shape, &t) != ZT_OK)
        return 1;
    float *params = malloc(t.n_params * sizeof(float));
    float *logits = malloc((size_t)c.vocab_size * sizeof(float));
    int32_t *seq = malloc((size_t)(ctx + n_new) * sizeof(int32_t));
    int32_t *order = malloc((size_t)c.vocab_size * sizeof(int32_t));
    if (!params || !logits || !seq || !order)
        return 1;
    param_table_init(&t, 1, 0, t.n_params, params);
    for (int i = 0; i < ctx; i++)
        seq[i] = (int32_t)((i * 7919) % c.vocab_size);
    const struct ops_backend *ops;
    if (ops_cpu_open(&ops) != ZT_OK || infer_open(&t, params, ops, NULL, &m) != ZT_OK)
        return 1;
    const struct sampling greedy = {0, 0, 1};
    /* with the cache: the prompt once, then one token per step */
    if (infer_step(m, seq, ctx, logits) != ZT_OK)
        return 1;
    double t0 = zt_now_seconds();
    for (int i = 0; i < n_new; i++) {
        seq[ctx + i] = sampling_pick(&greedy, logits, c.vocab_size, 0, 0, order);
        if (infer_step(m, &seq[ctx + i], 1, logits) != ZT_OK)
            return 1;
    }
    const double cached = n_new / (zt_now_seconds() - t0);
    /* without: the whole sequence so far for each new token */
    t0 = zt_now_seconds();
    for (int i = 0; i < n_new; i++) {
        infer_reset(m);
        if (infer_step(m, seq, ctx + i + 1, logits) != ZT_OK)
            return 1;
    }
    const double full = n_new / (zt_now_seconds() - t0);
    printf("| model | context | new tokens | cached tokens/s | uncached tokens/s | ratio |\n");
    printf("|---|---:|---:|---:|---:|---:|\n");
    printf("| GPT-2 L%d C%d V%d | %d | %d | %.1f | %.2f | %.1fx |\n", c.n_layer, c.n_embd,
           c.vocab_size, ctx, n_new, cached, full, cached / full);
    infer_close(m);
    ops_cpu_close(ops);
    param_table_free(&t);
    free(params), free(logits), free(seq), free(order);
    return 0;
}
