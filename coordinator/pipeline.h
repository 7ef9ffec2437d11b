/* coordinator/pipeline.h — a step's micro batches through a pipeline of
 * stages (pipeline.stages > 1).
 *
 * Each rank runs one stage of the model (worker/model_family.h's struct
 * model_stage) on the micro batches of its data-parallel coordinate; the
 * P ranks that share that coordinate form the pipeline (its group `pp`,
 * ranked by stage). A stage's forward receives the previous stage's
 * output activations (B x T x C floats) and sends its own to the next; its
 * backward receives the gradient of its output from the next stage and
 * sends the gradient of its input back. Sends are non-blocking and each
 * receive blocks, so a stage waits exactly for what it needs; a slot's
 * pending send is completed before the slot's buffers are touched again.
 *
 * Schedules (m = gradient_accumulation_steps micro batches):
 *   gpipe  every forward, then every backward: m micro batches in flight.
 *   1f1b   a warm-up of min(P - stage - 1, m) forwards, then one forward
 *          and one backward in turn, then the remaining backwards: at most
 *          P - stage micro batches in flight on a stage.
 *   interleaved 1f1b (pipeline.virtual_stages v > 1; Narayanan et al.
 *          2021, Megatron's schedule): the rank holds v chunks (model
 *          chunk j is virtual stage j P + stage) and runs m v passes each
 *          way. Forward number k is micro batch (k / (P v)) P + k mod P on
 *          chunk (k mod P v) / P: P micro batches through one chunk, then
 *          the same P through the next; backward number k the same on
 *          chunk v - 1 - that. A warm-up of (P - stage - 1) 2 + (v - 1) P
 *          forwards (all m v when m = P), then one forward and one backward
 *          in turn, then the remaining backwards. Messages go to the next
 *          rank (stage P - 1 to 0) forward and to the previous backward.
 * On every schedule a chunk's forwards and its backwards run in
 * micro-batch order, so the gradients accumulate in the order a run
 * without a pipeline adds them, and the messages between two ranks are
 * received in the order they were sent (no tags needed; the test suite
 * checks it for every small P, v, m). Each micro batch in flight needs its
 * own activations: chunk j holds `n_slots` model instances (micro batch k
 * uses slot k mod n_slots, free again by then), the session's model being
 * the last chunk's first.
 *
 * Bubble. A stage is busy while it computes a pass; the rest of the
 * scheduled time it waits for a neighbour. The measured bubble of a step
 * is idle / busy, Megatron's (P - 1) / m for equal stages and
 * (P - 1) / (v m) interleaved.
 */
#ifndef ZT_COORDINATOR_PIPELINE_H
#define ZT_COORDINATOR_PIPELINE_H

#include "../comm/comm.h"
#include "../config/config.h"
#include "../worker/model_family.h"

struct run_session;

struct pipeline_op {
    int backward; /* 0: a forward */
    int micro;    /* the micro batch */
    int chunk;    /* the stage's model chunk (0 unless interleaved) */
};

/* The passes stage `stage` of `stages` runs over m micro batches with
 * `chunks` model chunks (1: not interleaved; > 1 only with 1f1b and m a
 * multiple of stages), in order: 2 m chunks entries into ops. */
void pipeline_schedule_ops(enum pipeline_schedule kind, int stages, int stage, int m, int chunks,
                           struct pipeline_op *ops);

/* How many micro batches chunk `chunk` of the stage holds activations for
 * at once under that schedule. */
int pipeline_slots(enum pipeline_schedule kind, int stages, int stage, int m, int chunks,
                   int chunk);

/* One model chunk's instances. */
struct pipeline_chunk {
    int n_slots;
    struct model **slots;          /* [n_slots]; the session's model is not owned */
    struct comm_request **pending; /* [n_slots]: the slot's send in flight, or NULL */
    uint64_t *row_ids;             /* [n_slots * B]: each slot's rows, kept for its backward */
};

struct pipeline {
    enum pipeline_schedule kind;
    int stages, stage, micro;     /* P, this rank's stage, micro batches per step */
    int chunks;                   /* v model chunks on this rank */
    struct comm *pp;              /* borrowed */
    size_t boundary;              /* floats of one boundary message: B*T*C */
    struct pipeline_chunk *chunk; /* [chunks] */
    struct pipeline_op *ops;      /* [2 * micro * chunks] */
    /* Seconds of the last step: computing passes, and from its first pass
     * to its last send's completion. */
    double busy_seconds, span_seconds;
};

/* After session_open (and the weights' restore): with pipeline.stages > 1,
 * s->pipe, the pipeline of the session's layout with its chunks' extra
 * model instances (like s->model, from the same table and backend), freed
 * by session_close; nothing otherwise. Agreed among the ranks; on failure
 * the session is closed. Errors: ZT_ERR_NOMEM, those of
 * model_create_stage. */
zt_status pipeline_open(struct run_session *s, int *print_here);

/* One step's forwards and backwards of the micro batches of `step` on this
 * stage, the backward scaled by grad_scale; the last stage adds each
 * micro batch's loss to loss_sums (session_add_loss). Gradients
 * accumulate in the engine's hooks; the optimizer step is the caller's.
 * Errors: the model's, the hooks', ZT_ERR_COMM. */
zt_status pipeline_train_micro_steps(struct run_session *s, long step, float grad_scale,
                                     double *loss_sums);

/* A forward of one batch through the pipeline for evaluation (the host
 * inputs and targets are every stage's; only the last chunk computes the
 * loss, into s->model). Errors: as pipeline_train_micro_steps. */
zt_status pipeline_forward(struct run_session *s, const int32_t *inputs, const int32_t *targets);

#endif
