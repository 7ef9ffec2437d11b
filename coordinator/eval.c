/* coordinator/eval.c — validation loss, for evaluations during training and
 * for the `eval` command.
 *
 * The validation data is cut into consecutive windows of seq_len + 1 tokens
 * (run.eval_batches, when set, caps them at that many micro batches). The
 * windows are split evenly over the D data-parallel ranks, rank r taking a
 * contiguous run of them, and each rank evaluates its share in micro
 * batches of the training micro batch size (the model's activations are
 * sized for it); a last batch that is not full is filled with rows whose
 * targets are all masked. Every rank runs the same number of forwards (a
 * rank whose share is shorter runs a fully masked batch), so no rank
 * computes alone while the others wait in the sum, and stage 3's gathers
 * line up. Under a pipeline each batch goes through every stage of that
 * rank's pipeline and the last stage's loss counts. The per-token losses
 * and counted targets are summed over ranks: the result is the mean over
 * every counted target of the set, whatever the micro batch, rank count or
 * layout, up to the order of a double-precision sum.
 */
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"
#include "run_checkpoint.h"
#include "train.h"

/* Rows first .. first + B - 1 of this rank's share of `count` windows
 * starting at window `begin`; rows past the share repeat its first window
 * with every target masked. */
static void fill_eval_batch(const struct token_buffer *val, int seq_len, int B, size_t begin,
                            size_t count, size_t first, int32_t *inputs, int32_t *targets)
{
    for (int b = 0; b < B; b++) {
        int32_t *in = inputs + (size_t)b * seq_len, *tg = targets + (size_t)b * seq_len;
        const size_t row = first + (size_t)b;
        (void)token_window_fill(val, begin + (row < count ? row : 0), seq_len, in, tg);
        if (row >= count)
            for (int j = 0; j < seq_len; j++)
                tg[j] = -1;
    }
}

zt_status session_evaluate(struct run_session *s, double *loss, uint64_t *tokens)
{
    const int B = s->cfg.train_micro_batch_size_per_gpu, T = s->cfg.data.seq_len;
    size_t windows = s->val.n > 0 ? (s->val.n - 1) / (size_t)T : 0;
    if (s->cfg.run.eval_batches > 0 && (size_t)s->cfg.run.eval_batches * B < windows)
        windows = (size_t)s->cfg.run.eval_batches * B;
    if (windows == 0)
        return zt_error_set(ZT_ERR_DATA,
                            "validation data has no window of seq_len + 1 = %d tokens: give "
                            "more data.val or a larger data.val_fraction",
                            T + 1);

    const size_t world = (size_t)s->dp_size, rank = (size_t)s->dp_rank;
    const size_t begin = windows * rank / world, count = windows * (rank + 1) / world - begin;
    const size_t most = (windows + world - 1) / world; /* the longest share */
    const size_t rounds = (most + (size_t)B - 1) / (size_t)B;
    double sums[2] = {0.0, 0.0}; /* summed loss of counted targets, counted targets */
    zt_status st = ZT_OK;
    for (size_t i = 0; i < rounds && st == ZT_OK; i++) {
        fill_eval_batch(&s->val, T, B, begin, count, i * (size_t)B, s->inputs, s->targets);
        s->model->training = 0;
        st = s->pipe ? pipeline_forward(s, s->inputs, s->targets)
                     : model_forward(s->model, &s->engine.hooks, s->inputs, s->targets);
        if (st == ZT_OK && s->stage.last && s->coords.tp == 0) {
            sums[0] += s->model->loss_sum;
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
