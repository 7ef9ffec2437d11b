/* coordinator/eval.c — validation loss, for evaluations during training and
 * for the `eval` command.
 *
 * The validation data is cut into consecutive windows of seq_len + 1 tokens
 * and grouped into micro batches of the training micro batch size (the
 * model's activations are sized for it); a trailing part that does not fill
 * a micro batch is left out. Micro batch j goes to data-parallel rank j %
 * D (under a pipeline, through every stage of that rank's pipeline; the
 * last stage's loss counts); losses and counted targets are summed over
 * ranks, so the result does not depend on the layout beyond float
 * summation order. Under a loss mask the
 * loss is the mean over counted targets only, and the tokens reported are
 * those.
 */
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"
#include "run_checkpoint.h"
#include "train.h"

static void fill_eval_batch(const struct token_buffer *val, int seq_len, int B, size_t batch,
                            int32_t *inputs, int32_t *targets)
{
    for (int b = 0; b < B; b++)
        (void)token_window_fill(val, (size_t)batch * B + b, seq_len, inputs + (size_t)b * seq_len,
                                targets + (size_t)b * seq_len);
}

zt_status session_evaluate(struct run_session *s, double *loss, uint64_t *tokens)
{
    const int B = s->cfg.train_micro_batch_size_per_gpu, T = s->cfg.data.seq_len;
    const size_t windows = s->val.n > 0 ? (s->val.n - 1) / (size_t)T : 0;
    size_t batches = windows / (size_t)B;
    if (s->cfg.run.eval_batches > 0 && (size_t)s->cfg.run.eval_batches < batches)
        batches = (size_t)s->cfg.run.eval_batches;
    if (batches == 0)
        return zt_error_set(ZT_ERR_DATA,
                            "validation data has %zu windows of seq_len + 1 = %d tokens, fewer "
                            "than one micro batch of %d: give more data.val or a larger "
                            "data.val_fraction",
                            windows, T + 1, B);

    /* Under stage 3 every forward gathers parameters with all ranks, so
     * every rank runs the same number of forwards: a rank without a batch
     * of its own in the last round repeats batch 0 and does not count it. */
    const size_t world = (size_t)s->dp_size, rank = (size_t)s->dp_rank;
    const size_t rounds = shard_policy_forward_is_collective(&s->engine.policy)
                              ? (batches + world - 1) / world
                              : (batches + world - 1 - rank) / world;
    double sums[2] = {0.0, 0.0}; /* loss * counted, counted targets */
    zt_status st = ZT_OK;
    for (size_t i = 0; i < rounds && st == ZT_OK; i++) {
        const size_t j = rank + i * world;
        fill_eval_batch(&s->val, T, B, j < batches ? j : 0, s->inputs, s->targets);
        s->model->training = 0;
        st = s->pipe ? pipeline_forward(s, s->inputs, s->targets)
                     : model_forward(s->model, &s->engine.hooks, s->inputs, s->targets);
        if (j < batches && s->stage.last && s->coords.tp == 0) {
            /* the mean times its counted targets, in an order that is the
             * unmasked sum's bit for bit (the share is then exactly 1) */
            const double share = (double)s->model->n_counted / ((double)B * T);
            sums[0] += (double)s->model->mean_loss * B * T * share;
            sums[1] += s->model->n_counted;
        }
    }
    ZT_TRY(st);
    ZT_TRY(comm_allreduce(comm_host(s->comm), sums, 2, ZT_F64, COMM_OP_SUM));
    *loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
    *tokens = (uint64_t)sums[1];
    return ZT_OK;
}

/* Rank 0 says which weights it evaluates before measuring them: a loss
 * near ln(vocab_size) from weights nobody named would look like a result. */
static void say_which_weights(const struct run_session *s)
{
    char line[9000];
    int warn;
    run_checkpoint_describe(s, 0, line, sizeof line, &warn);
    if (warn)
        fprintf(stderr, "zerotrain: warning: %s\n", line);
    else
        printf("%s\n", line);
    fflush(stderr);
    fflush(stdout);
}

zt_status eval_run(const struct run_options *o, int *print_here)
{
    struct run_session s;
    *print_here = 0;
    zt_status st = session_open(&s, o, 0);
    if (st == ZT_OK && !config_has_validation(&s.cfg)) {
        /* every rank finds it: agreed, printed once, before any weights load */
        st = session_agree(&s,
                           zt_error_set(ZT_ERR_CONFIG,
                                        "eval: there is no validation data to evaluate on "
                                        "(data.val_fraction is 0 and data.val is not given): "
                                        "give data.val or a data.val_fraction > 0"),
                           print_here);
        session_close(&s);
        return st;
    }
    if (st == ZT_OK)
        st = run_checkpoint_restore(&s, o, 0);
    if (st != ZT_OK) {
        *print_here = s.failed_here;
        return st;
    }
    ZT_TRY(pipeline_open(&s, print_here));
    if (s.rank == 0)
        say_which_weights(&s);
    double loss = 0.0;
    uint64_t tokens = 0;
    st = session_evaluate(&s, &loss, &tokens);
    st = session_agree(&s, st, print_here);
    if (st == ZT_OK && s.rank == 0) {
        printf("evaluated %llu validation tokens\n", (unsigned long long)tokens);
        FILE *f;
        if (o->metrics_path && metrics_open(o->metrics_path, &f) == ZT_OK) {
            fprintf(f, "{\"val_loss\": %.9g, \"tokens\": %llu}\n", loss,
                    (unsigned long long)tokens);
            fclose(f);
        } else if (o->metrics_path) {
            fprintf(stderr, "zerotrain: warning: %s\n", zt_error_message());
        }
        printf("val_loss %.6f\n", loss);
        fflush(stdout);
    }
    session_close(&s);
    return st;
}
