/* coordinator/train.c — the training loop (RUNNING in session.h's diagram).
 *
 * One optimizer step: `accum` micro steps of forward + backward, each
 * accumulating gradients; then the ZeRO engine reduces, clips and updates.
 * Rank 0 logs, writes the metrics and the resolved configuration.
 *
 * Normalisation. The step's loss is the mean over its counted targets (a
 * loss mask leaves prompt tokens and padding out), and its gradient that
 * mean's gradient, whatever the world size, stage or accumulation split:
 * the sum of the counted losses divided by N, the step's counted targets
 * over all ranks and micro steps. N is sampler_counted's, a pure function
 * of (seed, step) every rank computes alone, so the division needs no
 * communication before the backward. The model's backward divides by its
 * B*T and the engine averages over the world's ranks, so each micro step's
 * grad_scale is loss_scale * world * B*T / N. Without a mask N = world *
 * accum * B*T and that is loss_scale / accum, computed so that it is bit
 * for bit. The reported loss (one small allreduce per step, with the stop
 * requests, outside the timed gradient traffic it would otherwise blur)
 * weighs each micro batch's mean by its counted targets.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/clock.h"
#include "../common/fileio.h"
#include "../common/size.h"
#include "../worker/param_quant.h"
#include "../worker/tensor_parallel.h"
#include "../worker/schedule.h"
#include "../report/report.h"
#include "nonfinite.h"
#include "pipeline.h"
#include "run_checkpoint.h"
#include "run_export.h"
#include "train.h"

struct train_io {
    struct progress console;
    FILE *metrics; /* rank 0 only */
    /* rank 0 only; closed when csv_monitor is off */
    struct csv_monitor csv;
    char final_line[4400]; /* where save_final put the weights; printed last */
};

/* Echoes the resolved configuration; `path` names where it was also
 * written, NULL under --dry-run (which writes nothing). */
static zt_status echo_config(const struct run_session *s, const struct run_options *o,
                             const char *path)
{
    if (o->quiet)
        return ZT_OK;
    if (path)
        printf("# resolved configuration (also in %s)\n", path);
    else
        printf("# resolved configuration (dry run: not written)\n");
    return config_write_yaml(&s->cfg, stdout);
}

static zt_status write_resolved_config(const struct run_session *s, const struct run_options *o)
{
    char path[4096];
    ZT_TRY(zt_mkdir_p(s->cfg.run.output_dir));
    snprintf(path, sizeof path, "%s/config.yaml", s->cfg.run.output_dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return zt_error_set(ZT_ERR_IO, "cannot write %s", path);
    zt_status st = config_write_yaml(&s->cfg, f);
    if (fclose(f) != 0 && st == ZT_OK)
        st = zt_error_set(ZT_ERR_IO, "cannot write %s", path);
    ZT_TRY(st);
    return echo_config(s, o, path);
}

/* Rank 0's config.yaml and metrics file. A dry run writes neither: it
 * leaves an existing run folder exactly as it was. A resumed run keeps the
 * metrics of the steps before its checkpoint. */
static zt_status open_outputs(struct run_session *s, const struct run_options *o,
                              struct train_io *io)
{
    progress_init(&io->console, stdout, (enum progress_mode)o->progress);
    io->metrics = NULL;
    if (s->rank != 0)
        return ZT_OK;
    if (o->dry_run)
        return echo_config(s, o, NULL);
    ZT_TRY(write_resolved_config(s, o));
    char path[4096];
    const char *mpath = o->metrics_path;
    if (!mpath) {
        snprintf(path, sizeof path, "%s/metrics.jsonl", s->cfg.run.output_dir);
        mpath = path;
    }
    ZT_TRY(metrics_open_run(mpath, s->start_step, &io->metrics));
    const long samples_per_step = (long)s->cfg.train_micro_batch_size_per_gpu *
                                  s->cfg.gradient_accumulation_steps * s->dp_size;
    return csv_monitor_open(&io->csv, &s->cfg, samples_per_step, s->start_step);
}

/* The communicators a step's traffic goes through: the world's (the
 * step's agreement), each axis's, the data-parallel group's hierarchy
 * (shard groups, replicas, hpZ's secondary groups) and the context group
 * (part of the data-parallel group: ring attention's blocks), with the
 * axis each belongs to (metrics.h's step_record.axis order: tensor,
 * pipeline, data; -1: none). A missing group is NULL. */
#define STEP_COMMS 8

static void step_comms(const struct run_session *s, const struct comm *out[STEP_COMMS],
                       int axis[STEP_COMMS])
{
    const struct comm *c[STEP_COMMS] = {s->comm,
                                        s->axes.tp,
                                        s->axes.pp,
                                        s->axes.dp,
                                        s->dp_groups.shard,
                                        s->dp_groups.replica,
                                        s->dp_groups.secondary,
                                        s->context};
    static const int axes[STEP_COMMS] = {-1, 0, 1, 2, 2, 2, 2, 2};
    for (int i = 0; i < STEP_COMMS; i++) {
        out[i] = c[i];
        axis[i] = axes[i];
    }
}

static void comm_stats_snapshot(const struct run_session *s, struct comm_stats snap[STEP_COMMS])
{
    const struct comm *c[STEP_COMMS];
    int axis[STEP_COMMS];
    step_comms(s, c, axis);
    for (int i = 0; i < STEP_COMMS; i++)
        if (c[i])
            snap[i] = *comm_get_stats(c[i]);
        else
            memset(&snap[i], 0, sizeof snap[i]);
}

/* The step's traffic: in total (r->comm) and per axis (r->axis). */
static void comm_stats_delta(const struct run_session *s,
                             const struct comm_stats before[STEP_COMMS], struct step_record *r)
{
    struct comm_stats now[STEP_COMMS];
    const struct comm *c[STEP_COMMS];
    int axis[STEP_COMMS];
    step_comms(s, c, axis);
    comm_stats_snapshot(s, now);
    memset(&r->comm, 0, sizeof r->comm);
    memset(r->axis, 0, sizeof r->axis);
    for (int i = 0; i < STEP_COMMS; i++) {
        struct axis_traffic *a = axis[i] >= 0 ? &r->axis[axis[i]] : NULL;
        for (int k = 0; k < COMM_KIND_COUNT; k++) {
            const uint64_t bytes = now[i].bytes[k] - before[i].bytes[k];
            r->comm.bytes[k] += bytes;
            r->comm.calls[k] += now[i].calls[k] - before[i].calls[k];
            for (int l = 0; l < COMM_LINK_COUNT; l++)
                r->comm.link_bytes[l][k] += now[i].link_bytes[l][k] - before[i].link_bytes[l][k];
            if (a)
                a->bytes += bytes;
        }
        const double wait = now[i].wait_seconds - before[i].wait_seconds;
        r->comm.wait_seconds += wait;
        if (a)
            a->wait_seconds += wait;
    }
}

/* The rank's micro batch m of `step`, for a training forward. */
static void fill_batch(struct run_session *s, long step, int m)
{
    const double t0 = zt_now_seconds();
    (void)sampler_fill(&s->sampler, &s->train, (uint64_t)step, m, s->inputs, s->targets);
    sampler_rows(&s->sampler, (uint64_t)step, m, s->row_ids);
    s->model->training = 1;
    s->model->row_ids = s->row_ids;
    s->profile_data_seconds += zt_now_seconds() - t0;
}

/* The backward's grad_scale for a step of `counted` targets (the design
 * comment): loss_scale / (counted / (world * B*T)), whose quotient is
 * exactly accum without a mask. */
static float micro_grad_scale(const struct run_session *s, double loss_scale, uint64_t counted)
{
    const double micro_targets =
        (double)s->dp_size * s->cfg.train_micro_batch_size_per_gpu * s->cfg.data.seq_len;
    return (float)(loss_scale / ((double)counted / micro_targets));
}

/* One forward and backward of the step's micro batch, through the
 * pipeline's stages where there is one; loss_sums as session_add_loss. */
static zt_status fused_pass(struct run_session *s, long step, struct step_record *r,
                            float grad_scale, double *loss_sums)
{
    if (s->pipe) {
        ZT_TRY(pipeline_train_micro_steps(s, step, grad_scale, loss_sums));
        r->busy_seconds += s->pipe->busy_seconds;
        r->span_seconds += s->pipe->span_seconds;
        return ZT_OK;
    }
    fill_batch(s, step, 0);
    ZT_TRY(model_forward(s->model, &s->engine.hooks, s->inputs, s->targets));
    ZT_TRY(model_backward(s->model, &s->engine.hooks, grad_scale));
    session_add_loss(s, s->model, loss_sums);
    return ZT_OK;
}

/* A fused-backward optimizer (LOMO; one micro step, a config rule): the
 * update happens inside the backward, so when gradient clipping or fp16
 * loss scaling needs the norm before any update, a first forward and
 * backward only measure it (the method's two backwards: twice the compute
 * of such a step), and a non-finite norm skips the second: an overflow,
 * or a step for run.on_nonfinite. Without that first pass a non-finite
 * norm is found only once applied, and the engine stops the run. */
static zt_status fused_step(struct run_session *s, long step, struct step_record *r,
                            double *loss_sums, struct shard_step_result *result)
{
    const struct zt_config *c = &s->cfg;
    struct optimizer_hparams hp = config_optimizer_hparams(c, r->lr);
    const float grad_scale = micro_grad_scale(s, r->loss_scale, r->counted);
    double clip_coef = 1.0;
    ledger_set_step(&s->ledger, step + 1, 0);
    r->busy_seconds = r->span_seconds = 0.0;
    if (config_norm_before_update(c)) {
        double measured_loss[2] = {0.0, 0.0}; /* session_add_loss's sums */
        shard_engine_fused_arm(&s->engine, NULL, r->loss_scale, 1.0);
        ZT_TRY(fused_pass(s, step, r, grad_scale, measured_loss));
        ZT_TRY(shard_engine_step(&s->engine, &hp, r->loss_scale, 1, result));
        if (result->skipped) {
            loss_sums[0] += measured_loss[0];
            loss_sums[1] += measured_loss[1];
            return ZT_OK;
        }
        const double norm = result->grad_norm;
        if (c->gradient_clipping > 0.0 && norm > c->gradient_clipping)
            clip_coef = c->gradient_clipping / (norm + 1e-6);
    }
    const double measured = result->grad_norm;
    shard_engine_fused_arm(&s->engine, &hp, r->loss_scale, clip_coef);
    ZT_TRY(fused_pass(s, step, r, grad_scale, loss_sums));
    ZT_TRY(shard_engine_step(&s->engine, &hp, r->loss_scale, s->scaler.dynamic, result));
    if (config_norm_before_update(c))
        result->grad_norm = measured; /* before clipping, as for the other optimizers */
    return ZT_OK;
}

/* The step's micro steps and update; loss_sums as session_add_loss. */
static zt_status forward_backward_update(struct run_session *s, long step, struct step_record *r,
                                         double *loss_sums, struct shard_step_result *result)
{
    const struct zt_config *c = &s->cfg;
    if (s->engine.cfg.optimizer->fused_backward)
        return fused_step(s, step, r, loss_sums, result);
    const float grad_scale = micro_grad_scale(s, r->loss_scale, r->counted);
    if (s->pipe) {
        ZT_TRY(pipeline_train_micro_steps(s, step, grad_scale, loss_sums));
        r->busy_seconds = s->pipe->busy_seconds;
        r->span_seconds = s->pipe->span_seconds;
    }
    for (int m = 0; m < c->gradient_accumulation_steps && !s->pipe; m++) {
        ledger_set_step(&s->ledger, step + 1, m);
        fill_batch(s, step, m);
        ZT_TRY(model_forward(s->model, &s->engine.hooks, s->inputs, s->targets));
        if (m == c->gradient_accumulation_steps - 1)
            shard_engine_final_backward(&s->engine);
        ZT_TRY(model_backward(s->model, &s->engine.hooks, grad_scale));
        session_add_loss(s, s->model, loss_sums);
    }
    /* A non-finite norm is a skip at the engine, every rank alike:
     * train_step decides what it means (fp16's overflow, or
     * run.on_nonfinite). */
    struct optimizer_hparams hp = config_optimizer_hparams(c, r->lr);
    return shard_engine_step(&s->engine, &hp, r->loss_scale, 1, result);
}

/* fp8 delayed scaling (worker/fp8_scaling.h): the step's amaxes, max-
 * reduced over every rank (pipeline stages give 0 for blocks they lack,
 * tensor-parallel slices their slice's maximum), enter the histories, and
 * the next step's scales follow, the same on every rank. */
static zt_status fp8_end_step(struct run_session *s)
{
    struct fp8_scaling *f = s->table.fp8;
    if (!f)
        return ZT_OK;
    ZT_TRY(comm_allreduce(comm_host(s->comm), f->amax, f->n, ZT_F32, COMM_OP_MAX));
    fp8_scaling_update(f);
    return ZT_OK;
}

/* A step whose every target is masked has no loss to follow: every rank
 * finds that alone (sampler_counted) and none computes or updates. */
static void skip_all_masked(const struct run_session *s, long step, struct step_record *r)
{
    r->skipped = 1;
    r->skip_reason = STEP_SKIP_MASKED;
    r->loss = NAN;
    if (s->rank != 0)
        return;
    fprintf(stderr,
            "zerotrain: warning: step %ld: every target of the step's batch is masked (no "
            "completion tokens): skipped\n",
            step + 1);
    fflush(stderr);
}

/* The re-run of a non-finite step for nonfinite_diagnose: the same micro
 * steps and engine step, its loss and result thrown away. */
static zt_status rerun_step(struct run_session *s, long step, void *arg)
{
    struct step_record again = *(const struct step_record *)arg;
    double sums[4] = {0.0, 0.0, 0.0, 0.0};
    struct shard_step_result result = {0};
    return forward_backward_update(s, step, &again, sums, &result);
}

/* The message of a first non-finite value, as its rank gives it. */
static void describe_finding(const struct nonfinite_finding *f, long step, char *buf, size_t n)
{
    char micro[48] = "";
    if (f->micro >= 0)
        snprintf(micro, sizeof micro, ", micro batch %d", f->micro);
    snprintf(buf, n, "step %ld: first non-finite value%s: %s%s%s", step, micro, f->what,
             f->report[0] ? "; report: " : "", f->report);
}

/* A step whose gradient norm is not finite without fp16's loss scaling
 * (the engine skipped it on every rank): its first non-finite value is
 * found and reported (the first NONFINITE_MAX_DIAGNOSED such steps of a
 * run), then run.on_nonfinite stops the run (ZT_ERR_NUMERIC, printed by
 * the rank that found the value) or counts the skip (train_loop stops at
 * nonfinite_skip_limit in a row). Every rank comes here at the same step
 * and leaves alike. */
static zt_status on_nonfinite(struct run_session *s, long step, struct step_record *r)
{
    const int skip = s->cfg.run.on_nonfinite == ZT_NONFINITE_SKIP;
    const int diagnose = s->nonfinite.diagnosed < NONFINITE_MAX_DIAGNOSED;
    struct nonfinite_finding f = {0};
    char what[8192];
    r->skip_reason = STEP_SKIP_NONFINITE;
    s->nonfinite.skipped++;
    s->nonfinite.in_a_row++;
    if (diagnose) {
        s->nonfinite.diagnosed++;
        ZT_TRY(nonfinite_diagnose(s, step, rerun_step, r, &f));
    }
    const int finder = f.found && f.rank == s->rank;
    if (finder)
        describe_finding(&f, step + 1, what, sizeof what);
    if (!skip) {
        s->failed_elsewhere = f.found && !finder; /* the finder prints */
        if (finder)
            return zt_error_set(ZT_ERR_NUMERIC,
                                "%s; the gradient norm is %g: training diverged (lower "
                                "optimizer.params.lr, set gradient_clipping, or set "
                                "run.on_nonfinite: skip)",
                                what, r->grad_norm);
        return zt_error_set(ZT_ERR_NUMERIC,
                            "step %ld: the gradient norm is %g: training diverged (lower "
                            "optimizer.params.lr or set gradient_clipping)%s",
                            step + 1, r->grad_norm,
                            f.found ? "" : "; re-running the step met no non-finite value");
    }
    if (finder)
        fprintf(stderr, "zerotrain: warning: rank %d: %s; skipped (run.on_nonfinite: skip)\n",
                s->rank, what);
    else if (diagnose && !f.found && s->rank == 0)
        fprintf(stderr,
                "zerotrain: warning: step %ld: the gradient norm is %g, and re-running the step "
                "met no non-finite value; skipped (run.on_nonfinite: skip)\n",
                step + 1, r->grad_norm);
    fflush(stderr);
    return ZT_OK;
}

/* run.on_nonfinite skip: nonfinite_skip_limit steps in a row skipped; like
 * fp16's loss scale at its floor, the run has diverged. Every rank counts
 * alike. */
static zt_status nonfinite_limit(const struct run_session *s, long step)
{
    return zt_error_set(ZT_ERR_NUMERIC,
                        "step %ld: %ld steps in a row had non-finite values and were skipped "
                        "(run.nonfinite_skip_limit = %d): the run has diverged (lower "
                        "optimizer.params.lr, or resume from an earlier checkpoint)",
                        step, s->nonfinite.in_a_row, s->cfg.run.nonfinite_skip_limit);
}

zt_status train_step(struct run_session *s, long step, struct step_record *r)
{
    struct comm_stats before[STEP_COMMS];
    comm_stats_snapshot(s, before);
    double sums[4] = {0.0, 0.0, 0.0, 0.0}; /* loss, counted share, stop requests */
    struct shard_step_result result = {0};
    double agree_t0 = zt_now_seconds();

    r->loss_scale = s->scaler.scale;
    r->counted = sampler_counted(&s->sampler, &s->train, (uint64_t)step);
    if (r->counted > 0) {
        ZT_TRY(forward_backward_update(s, step, r, sums, &result));
        r->grad_norm = result.grad_norm;
        r->skipped = result.skipped;
        r->skip_reason = result.skipped ? STEP_SKIP_OVERFLOW : STEP_SKIP_NONE;
        if (result.skipped && !s->scaler.dynamic)
            ZT_TRY(on_nonfinite(s, step, r));
        else
            s->nonfinite.in_a_row = 0;
        agree_t0 = zt_now_seconds();
        ZT_TRY(fp8_end_step(s));
        loss_scaler_update(&s->scaler, result.skipped);
    } else {
        skip_all_masked(s, step, r);
    }
    r->nonfinite_skips = s->cfg.run.on_nonfinite == ZT_NONFINITE_SKIP ? s->nonfinite.skipped : -1;
    comm_stats_delta(s, before, r);
    /* The loss average rides with the ranks' stop requests: a signal seen
     * by any rank stops every rank at this same step boundary. */
    const sig_atomic_t local = s->stop_signal ? *s->stop_signal : 0;
    sums[2] = local == 1;
    sums[3] = local == 2;
    ZT_TRY(comm_allreduce(comm_host(s->comm), sums, 4, ZT_F64, COMM_OP_SUM));
    if (r->counted > 0)
        r->loss = sums[0] / sums[1];
    s->stop_request = sums[3] > 0 ? 2 : sums[2] > 0 ? 1 : 0;
    s->profile_agree_seconds += zt_now_seconds() - agree_t0;
    return ZT_OK;
}

static const char *scale_note(const struct step_record *r, char *buf, size_t n)
{
    snprintf(buf, n, " | loss scale %g", r->loss_scale);
    return buf;
}

static void log_step(struct run_session *s, struct train_io *io, const struct step_record *r,
                     double seconds_left)
{
    static const char *const skip_notes[] = {
        [STEP_SKIP_NONE] = "",
        [STEP_SKIP_OVERFLOW] = " | skipped (overflow)",
        [STEP_SKIP_MASKED] = " | skipped (every target masked)",
        [STEP_SKIP_NONFINITE] = " | skipped (non-finite values)",
    };
    char left[32], note[48], epoch[32] = "";
    progress_format_duration(seconds_left, left, sizeof left);
    if (r->epoch > 0)
        snprintf(epoch, sizeof epoch, " | epoch %.2f", r->epoch);
    progress_log(&io->console,
                 "step %6ld%s | loss %.4f | lr %.3e | grad norm %.4f | %8.1f ms | %9.0f tok/s | "
                 "%6.2f GFLOP/s | left %s%s%s",
                 r->step, epoch, r->loss, r->lr, r->grad_norm, r->step_ms, r->tokens_per_s,
                 r->gflops, left, s->scaler.dynamic ? scale_note(r, note, sizeof note) : "",
                 !r->skipped ? "" : skip_notes[r->skip_reason]);
}

static zt_status evaluate_and_log(struct run_session *s, struct train_io *io, long step)
{
    double loss;
    uint64_t tokens;
    ledger_enter_outer(&s->ledger, LEDGER_PHASE_EVALUATION);
    ZT_TRY(session_evaluate(s, &loss, &tokens));
    if (s->rank == 0) {
        progress_log(&io->console, "step %6ld | val loss %.4f (%llu tokens)", step, loss,
                     (unsigned long long)tokens);
        metrics_write_eval(io->metrics, step, loss, tokens);
        csv_monitor_write_eval(&io->csv, step, loss);
    }
    return ZT_OK;
}

/* One row of the breakdown: its seconds and share of the training time. */
static void profile_row(struct train_io *io, const char *name, double t, double train_seconds)
{
    progress_log(&io->console, "  %-16s %8.3f s %6.1f %%", name, t, 100.0 * t / train_seconds);
}

/* Rank 0's breakdown of the training time: each op category of the model,
 * each phase of the engine (communication waits in the phase that issued
 * them), the loop's own batches and agreement, and what none of them
 * timed. The comm wait line splits out how much of the rows was spent
 * blocked on other ranks. */
static void print_profile(struct run_session *s, struct train_io *io, double train_seconds,
                          double comm_wait)
{
    double named = 0.0;
    progress_log(&io->console,
                 "where the time went (rank 0, %.2f s of training steps):", train_seconds);
    for (int k = 0; k < MODEL_PROF_COUNT; k++) {
        named += s->profile.seconds[k];
        profile_row(io, model_profile_name((enum model_profile_category)k), s->profile.seconds[k],
                    train_seconds);
    }
    for (int k = 0; k < SHARD_PROF_COUNT; k++) {
        named += s->engine_profile.seconds[k];
        profile_row(io, shard_profile_name((enum shard_profile_phase)k),
                    s->engine_profile.seconds[k], train_seconds);
    }
    profile_row(io, "data loading", s->profile_data_seconds, train_seconds);
    profile_row(io, "step agreement", s->profile_agree_seconds, train_seconds);
    named += s->profile_data_seconds + s->profile_agree_seconds;
    profile_row(io, "other", train_seconds - named, train_seconds);
    progress_log(&io->console, "  of all this, blocked in communication: %.3f s (%.1f %%)",
                 comm_wait, 100.0 * comm_wait / train_seconds);
}

static zt_status save_checkpoint(struct run_session *s, struct train_io *io, long step,
                                 const char *why)
{
    char where[8192];
    ledger_enter_outer(&s->ledger, LEDGER_PHASE_CHECKPOINT);
    zt_status st = run_checkpoint_save(s, step, where, sizeof where);
    if (st != ZT_OK) {
        s->failure_agreed = 1; /* the save agrees on its outcome */
        return st;
    }
    if (s->rank == 0)
        progress_log(&io->console, "step %6ld | checkpoint saved (%s): %s", step, why, where);
    return ZT_OK;
}

/* After a step: a periodic checkpoint, and the agreed stop requests. Sets
 * *stop when the run must end here. */
static zt_status after_step(struct run_session *s, struct train_io *io, long step, int *stop)
{
    const struct zt_config *c = &s->cfg;
    *stop = 0;
    if (s->stop_request == 2)
        return zt_error_set(ZT_ERR_INTERRUPTED,
                            "interrupted (SIGINT) after step %ld: stopped without saving", step);
    const int periodic = c->checkpoint.every > 0 && step % c->checkpoint.every == 0;
    if (s->stop_request == 1 && !c->checkpoint.dir)
        return zt_error_set(ZT_ERR_INTERRUPTED,
                            "preempted (SIGTERM or SIGUSR1) after step %ld: stopped without "
                            "saving, as checkpoint.dir is not set (null: no checkpoints)",
                            step);
    if (s->stop_request == 1) {
        ZT_TRY(save_checkpoint(s, io, step, "preempted"));
        *stop = 1;
    } else if (periodic) {
        ZT_TRY(save_checkpoint(s, io, step, "every"));
    }
    return ZT_OK;
}

/* An overflow with the loss scale at its minimum: every later step would
 * be skipped too, so the run stops (DeepSpeed: "Current loss scale already
 * at minimum"). Every rank saw the same overflow (the norm is allreduced),
 * so every rank stops here together. */
static zt_status diverged(const struct run_session *s, long step)
{
    return zt_error_set(ZT_ERR_NUMERIC,
                        "step %ld: gradient overflow with the loss scale already at its minimum "
                        "(fp16.min_loss_scale = %g): it cannot decrease any further and every "
                        "later step would be skipped; the run has diverged (lower "
                        "optimizer.params.lr, or resume from an earlier checkpoint)",
                        step, s->scaler.min_scale);
}

/* Every token of a step, masked or not: what the model computes on. */
static double step_tokens(const struct run_session *s)
{
    const struct zt_config *c = &s->cfg;
    return (double)c->train_micro_batch_size_per_gpu * c->data.seq_len *
           c->gradient_accumulation_steps * (double)s->dp_size;
}

/* Without checkpoint.dir the trained weights go to <output_dir>/final
 * (run.save_final), the last line saying where; with it off they are not
 * saved, which the start and the end both say. */
static void note_unsaved(struct train_io *io, const char *when)
{
    progress_log(&io->console,
                 "note: checkpoint.dir is not set and run.save_final is false: the trained "
                 "weights %s saved",
                 when);
}

static zt_status save_final(struct run_session *s, struct train_io *io, long step)
{
    char where[4200];
    const char *kind;
    ledger_enter_outer(&s->ledger, LEDGER_PHASE_CHECKPOINT);
    zt_status st = run_export_final(s, step, where, sizeof where, &kind);
    if (st != ZT_OK) {
        s->failure_agreed = 1; /* the save agrees on its outcome */
        return st;
    }
    snprintf(io->final_line, sizeof io->final_line,
             "step %ld: the final %s (no checkpoint.dir) saved in %s", step, kind, where);
    return ZT_OK;
}

static zt_status train_loop(struct run_session *s, struct train_io *io)
{
    const struct zt_config *c = &s->cfg;
    const int T = c->data.seq_len;
    const double flops_per_token = s->table.family->flops_per_token(&s->table, T);
    double elapsed = 0.0, comm_wait = 0.0;
    zt_status st = ZT_OK;
    int stop = 0;
    long step = s->start_step, done = 0;
    const struct lr_schedule lrs = config_lr_schedule(c);

    for (; step < c->run.steps && st == ZT_OK && !stop; step++, done++) {
        struct step_record r = {.step = step + 1,
                                .lr = schedule_lr(&lrs, step),
                                .epoch = session_epoch_at(s, step + 1)};
        const int at_floor = loss_scaler_at_floor(&s->scaler);
        double t0 = zt_now_seconds();
        st = train_step(s, step, &r);
        if (st != ZT_OK)
            break;
        double dt = zt_now_seconds() - t0;
        elapsed += dt;
        comm_wait += r.comm.wait_seconds;
        r.step_ms = dt * 1e3;
        r.tokens_per_s = (double)r.counted / dt; /* counted targets: masked ones are not */
        r.gflops = step_tokens(s) * flops_per_token / dt / 1e9 / s->world;
        double left = elapsed / (double)(done + 1) * (double)(c->run.steps - step - 1);
        if (s->rank == 0) {
            metrics_write_step(io->metrics, &r);
            csv_monitor_write_step(&io->csv, &r);
            if (r.step % c->steps_per_print == 0 || step == s->start_step || r.step == c->run.steps)
                log_step(s, io, &r, left);
            progress_update(&io->console, r.step, c->run.steps, left);
        }
        if (r.skipped && at_floor) {
            st = diverged(s, r.step);
            break;
        }
        if (r.skip_reason == STEP_SKIP_NONFINITE &&
            s->nonfinite.in_a_row >= c->run.nonfinite_skip_limit) {
            st = nonfinite_limit(s, r.step);
            break;
        }
        st = after_step(s, io, r.step, &stop);
        if (st == ZT_OK && !stop && c->run.eval_interval > 0 &&
            r.step % c->run.eval_interval == 0 && r.step != c->run.steps)
            st = evaluate_and_log(s, io, r.step);
    }
    ZT_TRY(st);
    if (s->rank == 0)
        progress_finish(&io->console);
    if (stop)
        return ZT_OK; /* preempted: the checkpoint is the result */
    if (s->model->profile && s->rank == 0 && done > 0)
        print_profile(s, io, elapsed, comm_wait);
    s->model->profile = NULL; /* evaluation is not part of the breakdown */
    if (c->checkpoint.dir && done > 0 &&
        !(c->checkpoint.every > 0 && step % c->checkpoint.every == 0))
        ZT_TRY(save_checkpoint(s, io, step, "end of training"));
    else if (!c->checkpoint.dir && !c->run.save_final && done > 0 && s->rank == 0)
        note_unsaved(io, "were not");
    /* data.val_fraction: 0 without data.val is a run without a validation
     * set (as in DeepSpeed and the HF Trainer): nothing to evaluate. */
    if (config_has_validation(c))
        ZT_TRY(evaluate_and_log(s, io, step));
    else if (s->rank == 0)
        progress_log(&io->console,
                     "step %6ld | no validation data (data.val_fraction: 0): "
                     "not evaluated",
                     step);
    /* last, so that the final line says where the weights are */
    if (!c->checkpoint.dir && c->run.save_final && done > 0)
        ZT_TRY(save_final(s, io, step));
    return ZT_OK;
}

/* Bytes of the rank's token buffers (report/rss_model.h's data part): a
 * split validation tail is copied out of the training tokens, whose
 * buffer keeps the pages it was read into. A dry run read no data: the
 * files' estimate. */
static uint64_t data_bytes(const struct run_session *s, int dry_run)
{
    const struct zt_config *c = &s->cfg;
    const int split = c->data.n_val == 0;
    if (dry_run) {
        const uint64_t train = rss_data_estimate(c->data.train, c->data.n_train);
        return train + (split ? (uint64_t)(c->data.val_fraction * (double)train)
                              : rss_data_estimate(c->data.val, c->data.n_val));
    }
    const uint64_t per = sizeof(int32_t) + (s->train.mask ? 1 : 0);
    return per * (s->train.n + (split ? 2 : 1) * s->val.n);
}

/* The rank's peak RSS by part as rss_model.h predicts it from its
 * ledger's peaks so far, and *host_peak: ZeRO-Offload's host bytes at
 * their peak. Errors: device_memory_info's. */
static zt_status rss_so_far(const struct run_session *s, int dry_run, struct rss_parts *out,
                            size_t *host_peak)
{
    struct device_memory_info dm = {0};
    size_t host_now = 0;
    ZT_TRY(device_memory_info(&s->compute.dev, &dm));
    shard_engine_host_bytes(&s->engine, &host_now, host_peak);
    *out =
        (struct rss_parts){s->rss_start.baseline, s->rss_start.runtime,
                           rss_counted(s->ledger.peak, s->ledger.total_peak, s->compute.host_memory,
                                       *host_peak, dm.resident_peak - dm.held_peak),
                           data_bytes(s, dry_run)};
    return ZT_OK;
}

/* The memory report: every rank's ledger peaks (measured, or planned under
 * --dry-run) against the single-device baseline. Collective. */
static zt_status report_memory(struct run_session *s, const struct run_options *o)
{
    /* the model's sizes are the whole model's, whatever slice this rank holds */
    const struct param_table *whole = param_table_whole(&s->table);
    struct memory_report r = {.stage = s->cfg.zero.stage, .n_params = whole->n_params};
    for (int k = 0; k < whole->n_tensors; k++)
        r.n_trainable += whole->tensors[k].trainable ? whole->tensors[k].numel : 0;
    struct ledger baseline;
    shard_engine_bytes_per_param(&s->engine, r.bytes_per_param);
    ZT_TRY(session_plan_baseline(s, &baseline));
    memcpy(r.baseline, baseline.peak, sizeof r.baseline);
    r.baseline_total = baseline.total_peak;
    /* A 4-bit base's units are counted at their images' size, not at p
     * bytes an element. */
    /* ZeRO's group: the data-parallel ranks, or one HSDP shard group */
    const int group = s->engine.part.world;
    const size_t split = s->engine.policy.shard_params ? (size_t)group : 1;
    size_t image = 0, packed_numel = 0;
    for (int u = 0; u < s->table.n_units; u++)
        if (s->engine.part.units[u].packed) {
            image += param_quant_unit_bytes(&s->table, u, s->engine.cfg.precision);
            packed_numel += s->engine.part.units[u].numel;
        }
    r.base4_numel = param_quant_numel(&s->table);
    r.base4_bytes = param_quant_region_bytes(&s->table) / split;
    /* What this rank's ZeRO group keeps: its pipeline stage's units
     * (all of them without a pipeline) over the group's ranks. */
    size_t held = 0;
    for (int u = 0; u < s->table.n_units; u++)
        held += s->engine.part.units[u].numel;
    r.shard_ranks = group;
    r.expected_model_states =
        memory_expected_model_states(r.stage, group, held - packed_numel,
                                     s->engine.part.trainable_numel, r.bytes_per_param,
                                     shard_engine_replicated_state_bytes(&s->engine)) +
        image / split;
    r.layout = s->layout.tp > 1 || s->layout.pp > 1;
    r.device_memory = !s->compute.host_memory;
    r.nvme_path = s->engine.cfg.nvme_path;
    r.planned = o->dry_run;
    struct device_memory_info dm = {0};
    size_t host_peak = 0;
    struct rss_parts rss;
    ZT_TRY(device_memory_info(&s->compute.dev, &dm));
    ZT_TRY(rss_so_far(s, o->dry_run, &rss, &host_peak));
    const struct memory_rank_row place = {.tp = s->coords.tp,
                                          .pp = s->coords.pp,
                                          .dp = s->coords.dp,
                                          .expected_model_states = r.expected_model_states,
                                          .device_reserved = dm.reserved,
                                          .device_used_peak = dm.peak,
                                          .device_largest_free = dm.largest_free,
                                          .driver_free = dm.driver_free,
                                          .driver_total = dm.driver_total,
                                          .offload_host_peak = host_peak,
                                          .nvme_file_bytes = shard_engine_nvme_bytes(&s->engine),
                                          .rss = rss,
                                          .rss_loaded = s->rss_loaded,
                                          .load_rss_peak = s->load_rss_peak};
    ZT_TRY(memory_report_gather_placed(s->comm, &s->ledger, &place, &r));
    zt_status st = ZT_OK;
    if (s->rank == 0) {
        if (o->dry_run)
            printf("dry run: the peaks one optimizer step would reach (nothing was "
                   "allocated)\n");
        memory_report_print(&r, stdout);
        fflush(stdout);
        if (o->memory_report_path)
            st = memory_report_write_json(&r, o->memory_report_path);
        if (st == ZT_OK && !o->dry_run) { /* the run's folder keeps its report (zerotrain plot) */
            char path[4096];
            snprintf(path, sizeof path, "%s/memory_report.json", s->cfg.run.output_dir);
            st = memory_report_write_json(&r, path);
        }
    }
    memory_report_free(&r);
    return st;
}

/* --memory-summary: every rank's ledger, rank 0 prints. Collective. */
static zt_status print_memory_summary(struct run_session *s)
{
    const struct memory_summary_place place = {.tp = s->coords.tp,
                                               .pp = s->coords.pp,
                                               .dp = s->coords.dp,
                                               .layout = s->layout.tp > 1 || s->layout.pp > 1};
    return memory_summary_print(s->comm, &s->ledger, &place, s->cfg.zero.stage,
                                param_table_whole(&s->table), stdout);
}

/* A failure inside the loop other than a numerical one (which every rank
 * detects at the same point, after the gradient reduction) leaves the other
 * ranks inside a collective: agreeing is impossible, so this rank prints
 * and aborts the job. */
static void abort_if_peers_may_block(const struct run_session *s, zt_status st)
{
    if (st == ZT_OK || st == ZT_ERR_NUMERIC || st == ZT_ERR_INTERRUPTED || s->failure_agreed ||
        s->world == 1)
        return;
    fprintf(stderr, "zerotrain: error: rank %d: %s\n", s->rank, zt_error_message());
    fflush(stderr);
    comm_flight_leave(s->flight); /* this rank ends the job: its peers must not call it dead */
    comm_world_abort(zt_status_exit_code(st));
}

/* Parameters the optimizer updates: the table's less its frozen tensors. */
static size_t trainable_params(const struct param_table *t)
{
    size_t n = 0;
    for (int k = 0; k < t->n_tensors; k++)
        n += t->tensors[k].trainable ? t->tensors[k].numel : 0;
    return n;
}

/* Rank 0: which weights the run starts from and why, then what it trains.
 * A resumed run that is already at run.steps trains nothing and says so:
 * it still evaluates and exits 0, so resubmitting a finished job (as a
 * scheduler's requeue does) is harmless. */
static void log_start(const struct run_session *s, struct train_io *io)
{
    char from[9000];
    int warn;
    run_checkpoint_describe(s, 1, from, sizeof from, &warn);
    if (from[0])
        progress_log(&io->console, "%s", from);
    if (s->weights_from == RUN_WEIGHTS_INIT_FROM) {
        char rss[32];
        zt_size_format(s->load_rss_peak, rss, sizeof rss);
        progress_log(&io->console, "model.init_from read in %.2f s; rank 0's peak RSS then %s",
                     s->load_seconds, rss);
    }
    if (s->resumed_from[0] && s->start_step >= s->cfg.run.steps) {
        progress_log(&io->console, "checkpoint at step %ld >= run.steps %ld: nothing to train",
                     s->start_step, s->cfg.run.steps);
        return;
    }
    char layout[96] = "";
    if (s->layout.tp > 1 || s->layout.pp > 1)
        snprintf(layout, sizeof layout, " (tensor %d x pipeline %d x data %d, %s)", s->layout.tp,
                 s->layout.pp, s->layout.dp,
                 config_pipeline_schedule_name(s->cfg.pipeline.schedule));
    char count[64];
    const size_t trainable = trainable_params(&s->table);
    if (trainable == s->table.n_params)
        snprintf(count, sizeof count, "%zu", trainable);
    else /* LoRA, a frozen embedding: the frozen ones are not "trained" */
        snprintf(count, sizeof count, "%zu of %zu", trainable, s->table.n_params);
    char epochs[96] = "";
    if (s->cfg.run.epochs > 0)
        snprintf(epochs, sizeof epochs, " (%g epochs of %zu windows)", s->cfg.run.epochs,
                 s->sampler.n_windows);
    progress_log(&io->console,
                 "training %s parameters on %d rank(s)%s, stage %d, %ld steps%s of %d x %d "
                 "x %d sequences of %d tokens",
                 count, s->world, layout, s->cfg.zero.stage, s->cfg.run.steps, epochs,
                 s->cfg.train_micro_batch_size_per_gpu, s->cfg.gradient_accumulation_steps,
                 s->dp_size, s->cfg.data.seq_len);
    if (!s->cfg.checkpoint.dir && !s->cfg.run.save_final)
        note_unsaved(io, "will not be");
    /* Never a generic kernel unsaid: what the products run on. */
    const struct ops_backend *ops = s->compute.ops;
    const enum zt_dtype t = s->table.compute;
    char kernel[160];
    if (ops->gemm_describe(ops, t, kernel, sizeof kernel) != ZT_OK)
        snprintf(kernel, sizeof kernel, "unknown (%s)", zt_error_message());
    if (!s->compute_why[0])
        progress_log(&io->console, "computing in %s, GEMMs on %s", zt_precision_name(t), kernel);
    else /* 16-bit storage, fp32 compute: say why */
        progress_log(&io->console, "computing in fp32 (%s stored only: %s), GEMMs on %s",
                     zt_precision_name(s->engine.cfg.precision), s->compute_why, kernel);
}

/* Rank 0: the rank grid and what each pipeline stage runs. */
static void print_layout(const struct run_session *s)
{
    comm_layout_print(&s->layout, stdout);
    const int P = s->layout.pp;
    for (int p = 0; p < P && P > 1; p++) {
        struct model_stage st;
        if (session_stage_of(&s->cfg, &s->table, p, &st) != ZT_OK)
            return;
        printf("  stage %d: blocks", p);
        for (int j = 0; j < model_stage_chunks(&st); j++)
            printf("%s%d-%d", j ? ", " : " ", st.first_block + j * st.stride,
                   st.end_block - 1 + j * st.stride);
        printf("%s%s, %zu parameters\n", st.first ? " + embedding" : "",
               st.last ? " + final norm and head" : "", model_stage_params(&s->table, &st));
    }
}

/* --dry-run's planned step, through each model chunk of the rank (the
 * session's model alone unless the pipeline is interleaved). */
static zt_status dry_run_step(struct run_session *s)
{
    const int n = s->pipe ? s->pipe->chunks : 1;
    struct model **chunks = malloc((size_t)n * sizeof *chunks);
    if (!chunks)
        return zt_error_set(ZT_ERR_NOMEM, "cannot list %d model chunks", n);
    for (int j = 0; j < n; j++)
        chunks[j] = s->pipe ? s->pipe->chunk[j].slots[0] : s->model;
    const zt_status st =
        session_plan_chunks_step(chunks, n, &s->engine, s->cfg.gradient_accumulation_steps);
    free(chunks);
    return st;
}

zt_status train_run(const struct run_options *o, int *print_here)
{
    struct run_session s;
    struct train_io io = {0};
    zt_status st = session_open(&s, o, !o->dry_run);
    if (st == ZT_OK)
        st = run_checkpoint_restore(&s, o, !o->dry_run);
    size_t host_peak;
    if (st == ZT_OK &&
        (o->dry_run ? s.cfg.model.init_from != NULL : s.weights_from == RUN_WEIGHTS_INIT_FROM))
        st = session_agree(&s, rss_so_far(&s, o->dry_run, &s.rss_loaded, &host_peak), print_here);
    if (st != ZT_OK) {
        *print_here = s.failed_here;
        return st;
    }
    ZT_TRY(pipeline_open(&s, print_here));
    nonfinite_fault_probe_attach(&s);
    if (o->print_layout && s.rank == 0)
        print_layout(&s);
    if (o->print_partition && s.rank == 0)
        shard_partition_print(&s.engine.part, &s.table, stdout);
    st = session_agree(&s, o->dry_run ? ZT_OK : run_checkpoint_check_dir(&s), print_here);
    if (st == ZT_OK)
        st = session_agree(&s, open_outputs(&s, o, &io), print_here);
    if (st == ZT_OK && o->dry_run)
        st = session_agree(&s, dry_run_step(&s), print_here);
    if (st == ZT_OK && !o->dry_run) {
        s.state = RUN_RUNNING;
        if (s.rank == 0)
            log_start(&s, &io);
        st = train_loop(&s, &io);
        abort_if_peers_may_block(&s, st);
        st = session_agree(&s, s.failed_elsewhere ? ZT_OK : st, print_here);
    }
    if (st == ZT_OK && s.timeline)
        st = session_agree(&s,
                           memory_timeline_write(s.timeline, &s.ledger, s.comm,
                                                 param_table_whole(&s.table),
                                                 o->memory_timeline_path),
                           print_here);
    if (st == ZT_OK)
        st = session_agree(&s, report_memory(&s, o), print_here);
    if (st == ZT_OK && o->memory_summary)
        st = session_agree(&s, print_memory_summary(&s), print_here);
    if (st == ZT_OK && s.rank == 0 && io.final_line[0]) {
        printf("%s\n", io.final_line);
        fflush(stdout);
    }
    if (io.metrics)
        fclose(io.metrics);
    csv_monitor_close(&io.csv);
    s.state = st == ZT_OK ? RUN_DONE : RUN_FAILED;
    session_close(&s);
    return st;
}
