/* coordinator/pipeline.c — the pipeline schedules and their point-to-point
 * boundaries (see pipeline.h). */
#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "../common/clock.h"
#include "session.h"

/* Forwards before the first backward (all of them under gpipe). */
static int warm_up(enum pipeline_schedule kind, int P, int stage, int m, int v)
{
    const int n = m * v;
    int warm = kind == PIPELINE_GPIPE ? n
               : v == 1               ? P - stage - 1
               : m == P               ? n
                                      : (P - stage - 1) * 2 + (v - 1) * P;
    return warm < n ? warm : n;
}

/* Pass number k of its direction: the micro batch and the chunk. With one
 * chunk, micro batch k. */
static struct pipeline_op op_of(int backward, int k, int P, int v)
{
    const int chunk = (k % (P * v)) / P;
    return (struct pipeline_op){backward, (k / (P * v)) * P + k % P,
                                backward ? v - 1 - chunk : chunk};
}

/* Pass i (of 2 m v) of the stage's schedule: the warm-up's forwards, one
 * forward and one backward in turn, then the cool-down's backwards. */
static struct pipeline_op op_at(enum pipeline_schedule kind, int P, int stage, int m, int v, int i)
{
    const int n = m * v, warm = warm_up(kind, P, stage, m, v), steady = 2 * (n - warm);
    if (i < warm)
        return op_of(0, i, P, v);
    if (i - warm < steady)
        return (i - warm) % 2 ? op_of(1, (i - warm) / 2, P, v)
                              : op_of(0, warm + (i - warm) / 2, P, v);
    return op_of(1, i - warm - steady + (n - warm), P, v);
}

void pipeline_schedule_ops(enum pipeline_schedule kind, int stages, int stage, int m, int chunks,
                           struct pipeline_op *ops)
{
    ZT_ASSERT(chunks == 1 || (kind == PIPELINE_1F1B && m % stages == 0));
    for (int i = 0; i < 2 * m * chunks; i++)
        ops[i] = op_at(kind, stages, stage, m, chunks, i);
}

int pipeline_slots(enum pipeline_schedule kind, int stages, int stage, int m, int chunks, int chunk)
{
    int held = 0, most = 0;
    for (int i = 0; i < 2 * m * chunks; i++) {
        const struct pipeline_op op = op_at(kind, stages, stage, m, chunks, i);
        if (op.chunk != chunk)
            continue;
        held += op.backward ? -1 : 1;
        most = held > most ? held : most;
    }
    return most;
}

static zt_status chunk_create(struct run_session *s, struct pipeline *p, int j)
{
    const int B = s->cfg.train_micro_batch_size_per_gpu;
    struct pipeline_chunk *c = &p->chunk[j];
    c->n_slots = pipeline_slots(p->kind, p->stages, p->stage, p->micro, p->chunks, j);
    c->slots = calloc((size_t)c->n_slots, sizeof *c->slots);
    c->pending = calloc((size_t)c->n_slots, sizeof *c->pending);
    c->row_ids = calloc((size_t)c->n_slots * (size_t)B, sizeof *c->row_ids);
    if (!c->slots || !c->pending || !c->row_ids)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the pipeline's chunk %d", j);
    /* the last chunk's first slot is the session's model; the other
     * chunks' first slots hold their own scratch (a chunk's shapes differ) */
    const int own = j == p->chunks - 1;
    if (own)
        c->slots[0] = s->model;
    for (int k = own; k < c->n_slots; k++) {
        ZT_TRY(session_model_create(s, j, s->model->profile, k ? c->slots[0] : NULL, &c->slots[k]));
    }
    return ZT_OK;
}

static zt_status pipeline_create(struct run_session *s, struct pipeline *out)
{
    const struct zt_config *c = &s->cfg;
    memset(out, 0, sizeof *out);
    out->kind = c->pipeline.schedule;
    out->stages = c->pipeline.stages;
    out->stage = s->coords.pp;
    out->micro = c->gradient_accumulation_steps;
    out->chunks = model_stage_chunks(&s->stage);
    out->pp = s->axes.pp;
    /* the residual stream's rows this rank holds (all B*T, or its share
     * under sequence parallelism) */
    out->boundary = (size_t)model_sp_rows(s->model) * (size_t)c->model.n_embd;
    out->chunk = calloc((size_t)out->chunks, sizeof *out->chunk);
    out->ops = calloc(2 * (size_t)out->micro * (size_t)out->chunks, sizeof *out->ops);
    if (!out->chunk || !out->ops)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the pipeline's schedule");
    pipeline_schedule_ops(out->kind, out->stages, out->stage, out->micro, out->chunks, out->ops);
    for (int j = 0; j < out->chunks; j++)
        ZT_TRY(chunk_create(s, out, j));
    return ZT_OK;
}

static void pipeline_destroy(struct pipeline *p)
{
    for (int j = 0; j < p->chunks && p->chunk; j++) {
        struct pipeline_chunk *c = &p->chunk[j];
        for (int k = 0; k < c->n_slots && c->pending; k++)
            if (c->pending[k])
                (void)comm_wait(p->pp, c->pending[k]);
        /* the borrowers before their lender, slot 0 */
        for (int k = c->n_slots - 1; k >= 0 && c->slots; k--)
            if (j != p->chunks - 1 || k > 0)
                model_destroy(c->slots[k]);
        free(c->slots);
        free(c->pending);
        free(c->row_ids);
    }
    free(p->chunk);
    free(p->ops);
    free(p);
}

zt_status pipeline_open(struct run_session *s, int *print_here)
{
    zt_status st = ZT_OK;
    if (s->cfg.pipeline.stages > 1) {
        s->pipe_free = pipeline_destroy;
        s->pipe = calloc(1, sizeof *s->pipe);
        st = s->pipe ? pipeline_create(s, s->pipe)
                     : zt_error_set(ZT_ERR_NOMEM, "cannot allocate the pipeline");
    }
    st = session_agree(s, st, print_here);
    if (st != ZT_OK) {
        session_close(s);
        s->state = RUN_FAILED;
    }
    return st;
}

/* Completes slot k's send in flight, if any: its buffers are free again. */
static zt_status settle(struct pipeline *p, struct pipeline_chunk *c, int k)
{
    struct comm_request *req = c->pending[k];
    c->pending[k] = NULL;
    return req ? comm_wait(p->pp, req) : ZT_OK;
}

/* The neighbours in the chunks' ring: virtual stage j P + stage gets its
 * input from the previous rank and sends its output to the next. */
static int next_rank(const struct pipeline *p)
{
    return (p->stage + 1) % p->stages;
}

static int prev_rank(const struct pipeline *p)
{
    return (p->stage + p->stages - 1) % p->stages;
}

/* A forward on slot k of chunk j of the host batch, between the
 * neighbours' messages. */
static zt_status forward_on(struct run_session *s, struct pipeline *p, int j, int k,
                            const int32_t *inputs, const int32_t *targets)
{
    struct pipeline_chunk *c = &p->chunk[j];
    struct model *m = c->slots[k];
    ZT_TRY(settle(p, c, k));
    if (!m->stage.first)
        ZT_TRY(comm_recv(p->pp, m->boundary_in, p->boundary, m->table->compute, prev_rank(p)));
    const double t0 = zt_now_seconds();
    ZT_TRY(model_forward(m, &s->engine.hooks, inputs, targets));
    p->busy_seconds += zt_now_seconds() - t0;
    if (!m->stage.last)
        ZT_TRY(comm_isend(p->pp, m->boundary_out, p->boundary, m->table->compute, next_rank(p),
                          &c->pending[k]));
    return ZT_OK;
}

static zt_status backward_on(struct run_session *s, struct pipeline *p, int j, int k,
                             float grad_scale)
{
    struct pipeline_chunk *c = &p->chunk[j];
    struct model *m = c->slots[k];
    ZT_TRY(settle(p, c, k));
    if (!m->stage.last)
        ZT_TRY(comm_recv(p->pp, m->boundary_dout, p->boundary, m->table->compute, next_rank(p)));
    const double t0 = zt_now_seconds();
    ZT_TRY(model_backward(m, &s->engine.hooks, grad_scale));
    p->busy_seconds += zt_now_seconds() - t0;
    if (!m->stage.first)
        ZT_TRY(comm_isend(p->pp, m->boundary_din, p->boundary, m->table->compute, prev_rank(p),
                          &c->pending[k]));
    return ZT_OK;
}

static zt_status settle_all(struct pipeline *p)
{
    for (int j = 0; j < p->chunks; j++)
        for (int k = 0; k < p->chunk[j].n_slots; k++)
            ZT_TRY(settle(p, &p->chunk[j], k));
    return ZT_OK;
}

zt_status pipeline_train_micro_steps(struct run_session *s, long step, float grad_scale,
                                     double *loss_sums)
{
    struct pipeline *p = s->pipe;
    const int B = s->cfg.train_micro_batch_size_per_gpu;
    const double t0 = zt_now_seconds();
    p->busy_seconds = 0.0;
    for (int i = 0; i < 2 * p->micro * p->chunks; i++) {
        const struct pipeline_op op = p->ops[i];
        struct pipeline_chunk *c = &p->chunk[op.chunk];
        const int k = op.micro % c->n_slots;
        ledger_set_step(&s->ledger, step + 1, op.micro);
        if (op.backward) {
            ZT_TRY(backward_on(s, p, op.chunk, k, grad_scale));
            continue;
        }
        uint64_t *rows = c->row_ids + (size_t)k * (size_t)B;
        (void)sampler_fill(&s->sampler, &s->train, (uint64_t)step, op.micro, s->inputs, s->targets);
        sampler_rows(&s->sampler, (uint64_t)step, op.micro, rows);
        c->slots[k]->training = 1;
        c->slots[k]->row_ids = rows;
        ZT_TRY(forward_on(s, p, op.chunk, k, s->inputs, s->targets));
        if (c->slots[k]->stage.last)
            session_add_loss(s, c->slots[k], loss_sums);
    }
    ZT_TRY(settle_all(p));
    p->span_seconds = zt_now_seconds() - t0;
    return ZT_OK;
}

zt_status pipeline_forward(struct run_session *s, const int32_t *inputs, const int32_t *targets)
{
    struct pipeline *p = s->pipe;
    for (int j = 0; j < p->chunks; j++) {
        p->chunk[j].slots[0]->training = 0;
        p->chunk[j].slots[0]->row_ids = NULL;
        ZT_TRY(forward_on(s, p, j, 0, inputs, targets));
    }
    return settle_all(p);
}
