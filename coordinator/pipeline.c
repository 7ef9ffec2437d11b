/* coordinator/pipeline.c — the pipeline schedules and their point-to-point
 * boundaries (see pipeline.h). */
#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "../common/clock.h"
#include "session.h"

void pipeline_schedule_ops(enum pipeline_schedule kind, int stages, int stage, int m,
                           struct pipeline_op *ops)
{
    int n = 0;
    if (kind == PIPELINE_GPIPE) {
        for (int k = 0; k < m; k++)
            ops[n++] = (struct pipeline_op){0, k};
        for (int k = 0; k < m; k++)
            ops[n++] = (struct pipeline_op){1, k};
        return;
    }
    const int warm = stages - stage - 1 < m ? stages - stage - 1 : m;
    for (int k = 0; k < warm; k++)
        ops[n++] = (struct pipeline_op){0, k};
    for (int k = 0; k < m - warm; k++) {
        ops[n++] = (struct pipeline_op){0, warm + k};
        ops[n++] = (struct pipeline_op){1, k};
    }
    for (int k = m - warm; k < m; k++)
        ops[n++] = (struct pipeline_op){1, k};
}

int pipeline_slots(enum pipeline_schedule kind, int stages, int stage, int m)
{
    if (kind == PIPELINE_GPIPE)
        return m;
    return stages - stage < m ? stages - stage : m;
}

static zt_status pipeline_create(struct run_session *s, struct pipeline *out)
{
    const struct zt_config *c = &s->cfg;
    const int B = c->train_micro_batch_size_per_gpu;
    memset(out, 0, sizeof *out);
    out->kind = c->pipeline.schedule;
    out->stages = c->pipeline.stages;
    out->stage = s->coords.pp;
    out->micro = c->gradient_accumulation_steps;
    out->pp = s->axes.pp;
    /* the residual stream's rows this rank holds (all B*T, or its share
     * under sequence parallelism) */
    out->boundary = (size_t)model_sp_rows(s->model) * (size_t)c->model.n_embd;
    out->n_slots = pipeline_slots(out->kind, out->stages, out->stage, out->micro);
    out->slots = calloc((size_t)out->n_slots, sizeof *out->slots);
    out->pending = calloc((size_t)out->n_slots, sizeof *out->pending);
    out->row_ids = calloc((size_t)out->n_slots * (size_t)B, sizeof *out->row_ids);
    out->ops = calloc(2 * (size_t)out->micro, sizeof *out->ops);
    if (!out->slots || !out->pending || !out->row_ids || !out->ops)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the pipeline's schedule");
    pipeline_schedule_ops(out->kind, out->stages, out->stage, out->micro, out->ops);
    out->slots[0] = s->model;
    for (int k = 1; k < out->n_slots; k++) {
        ZT_TRY(session_model_create(s, s->model->profile, s->model, &out->slots[k]));
    }
    return ZT_OK;
}

static void pipeline_destroy(struct pipeline *p)
{
    for (int k = 0; k < p->n_slots && p->pending; k++)
        if (p->pending[k])
            (void)comm_wait(p->pp, p->pending[k]);
    for (int k = 1; k < p->n_slots && p->slots; k++)
        model_destroy(p->slots[k]);
    free(p->slots);
    free(p->pending);
    free(p->row_ids);
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
static zt_status settle(struct pipeline *p, int k)
{
    struct comm_request *req = p->pending[k];
    p->pending[k] = NULL;
    return req ? comm_wait(p->pp, req) : ZT_OK;
}

static int is_first(const struct pipeline *p)
{
    return p->stage == 0;
}

static int is_last(const struct pipeline *p)
{
    return p->stage == p->stages - 1;
}

/* A forward on slot k of the host batch, between the neighbours'
 * messages. */
static zt_status forward_on(struct run_session *s, struct pipeline *p, int k, const int32_t *inputs,
                            const int32_t *targets)
{
    struct model *m = p->slots[k];
    ZT_TRY(settle(p, k));
    if (!is_first(p))
        ZT_TRY(comm_recv(p->pp, m->boundary_in, p->boundary, m->table->compute, p->stage - 1));
    const double t0 = zt_now_seconds();
    ZT_TRY(model_forward(m, &s->engine.hooks, inputs, targets));
    p->busy_seconds += zt_now_seconds() - t0;
    if (!is_last(p))
        ZT_TRY(comm_isend(p->pp, m->boundary_out, p->boundary, m->table->compute, p->stage + 1,
                          &p->pending[k]));
    return ZT_OK;
}

static zt_status backward_on(struct run_session *s, struct pipeline *p, int k, float grad_scale)
{
    struct model *m = p->slots[k];
    ZT_TRY(settle(p, k));
    if (!is_last(p))
        ZT_TRY(comm_recv(p->pp, m->boundary_dout, p->boundary, m->table->compute, p->stage + 1));
    const double t0 = zt_now_seconds();
    ZT_TRY(model_backward(m, &s->engine.hooks, grad_scale));
    p->busy_seconds += zt_now_seconds() - t0;
    if (!is_first(p))
        ZT_TRY(comm_isend(p->pp, m->boundary_din, p->boundary, m->table->compute, p->stage - 1,
                          &p->pending[k]));
    return ZT_OK;
}

zt_status pipeline_train_micro_steps(struct run_session *s, long step, float grad_scale,
                                     double *loss_sums)
{
    struct pipeline *p = s->pipe;
    const int B = s->cfg.train_micro_batch_size_per_gpu;
    const double t0 = zt_now_seconds();
    p->busy_seconds = 0.0;
    for (int i = 0; i < 2 * p->micro; i++) {
        const struct pipeline_op op = p->ops[i];
        const int k = op.micro % p->n_slots;
        ledger_set_step(&s->ledger, step + 1, op.micro);
        if (op.backward) {
            ZT_TRY(backward_on(s, p, k, grad_scale));
            continue;
        }
        uint64_t *rows = p->row_ids + (size_t)k * (size_t)B;
        (void)sampler_fill(&s->sampler, &s->train, (uint64_t)step, op.micro, s->inputs, s->targets);
        sampler_rows(&s->sampler, (uint64_t)step, op.micro, rows);
        p->slots[k]->training = 1;
        p->slots[k]->row_ids = rows;
        ZT_TRY(forward_on(s, p, k, s->inputs, s->targets));
        if (is_last(p))
            session_add_loss(s, p->slots[k], loss_sums);
    }
    for (int k = 0; k < p->n_slots; k++)
        ZT_TRY(settle(p, k));
    p->span_seconds = zt_now_seconds() - t0;
    return ZT_OK;
}

zt_status pipeline_forward(struct run_session *s, const int32_t *inputs, const int32_t *targets)
{
    struct pipeline *p = s->pipe;
    p->slots[0]->training = 0;
    p->slots[0]->row_ids = NULL;
    ZT_TRY(forward_on(s, p, 0, inputs, targets));
    return settle(p, 0);
}
