/* comm/comm_staged.c — "mpi" with host staging: the MPI backend on device
 * buffers.
 *
 * When NCCL cannot serve a run on CUDA memory (ranks sharing one GPU, or a
 * build without NCCL), every call copies the caller's device buffers into
 * pinned host buffers, runs the MPI backend's entry (comm_mpi_ops) on the
 * copies and copies the result back. The copies go through a
 * `struct comm_stager` (comm.h): the CUDA runtime's by default
 * (comm_cuda_stager.c), memcpy in the tests, so that every path here runs
 * without a GPU and this file needs no CUDA header. Results are the MPI
 * backend's bits: the same algorithms ("native", "ring", "auto") on the
 * same bytes.
 *
 * Reaching the MPI backend. Its entries take a `struct comm *` and read
 * its impl, communicator, rank, size, algorithms and ledger. Our state
 * holds `inner`, a struct comm of its own that mirrors those fields of
 * the outer comm (filled once at init or split: comm.c never changes them
 * afterwards) and owns the MPI backend's state in inner.impl; every MPI
 * entry is handed &inner. Swapping the outer c->impl around each call
 * would also work, but a separate struct keeps one owner per field and
 * nothing half-swapped when an entry returns early. The inner comm has no
 * flight recorder and its counters are never read: comm.c notes and counts
 * each call once, around this backend's entry, and nothing here goes back
 * through comm.c. The MPI backend's ring scratch is counted in the same
 * ledger, through inner.ledger.
 *
 * Collectives, blocking or not, run to completion inside the call that
 * issues them: stage in, the MPI entry (for an i-form its i-entry, then its
 * wait, so the i-form gives the bits the host i-form gives), stage out.
 * comm_wait then only finishes the bookkeeping. The overlap of
 * communication with computation is lost on this fallback path, but
 * every collective then runs in issue order, which is the same on every
 * rank, and that is what lets a failed copy reach all ranks (below) and
 * lets one staging buffer serve every collective. Since issuing waits for
 * the group, a rank must not block, between issuing a collective and
 * waiting for it, on a message that a member sends only after issuing it.
 *
 * Point-to-point messages keep their non-blocking forms truly
 * non-blocking: an exchange in which both sides isend before they recv
 * (shard's tied embeddings) and a send to oneself after comm_irecv need
 * it. comm_isend stages its buffer and posts MPI's isend from the copy;
 * comm_irecv posts MPI's irecv into a host buffer that comm_wait copies to
 * the device. Each outstanding message holds a staging buffer of its own
 * from a pool that keeps freed buffers for the next messages (a pipeline
 * sends the same sizes every micro step).
 *
 * Staging memory is pinned (the stager's alloc_pinned, cudaMallocHost), so
 * copies run at full bus speed and a host-to-device copy is done when it
 * returns. Collectives share one buffer grown on demand to the largest
 * call seen (a ZeRO step repeats its sizes, so it settles after the first
 * step); messages take buffers from the pool. Both are counted in the
 * comm's ledger under LEDGER_COMM_BUFFERS when it has one, and freed at
 * fini. A split comm gets its own buffers and pool.
 *
 * Failures. A copy that fails on one rank must not leave the others
 * waiting, nor let them return data that never arrived as if it had. In a
 * collective the rank still enters the MPI call (with whatever its staging
 * buffer held), and after the copy back the group agrees on the result
 * (one MPI_Allreduce of two ints over the comm, in the call's place in the
 * issue order): every rank returns the failing rank's status, the failing
 * rank its own message, the others one naming it; outputs are then
 * unspecified. Growing the collectives' buffer is agreed before the call:
 * every rank asks for the same size (a collective's sizes are the same
 * everywhere; gather reserves the root's size on every rank), so all grow
 * together, and if any rank could not, all give up their buffer and fail
 * with its status without entering the collective. A group of one agrees
 * with nobody. Messages fail locally: a message whose copy to the host
 * failed is still sent, so the receiver does not hang, and only the
 * sending rank reports it; a failed copy of a received message is
 * reported by the receiver (callers agree on the status afterwards, as for
 * any failure of a message). A message for which no staging buffer could
 * be had is not posted, as when the MPI backend cannot post one. Failures
 * of MPI itself are returned as the MPI backend gives them, without an
 * agreement: after a ZT_ERR_COMM the communicator may be unusable
 * (comm.h).
 *
 * Ordering with the device. The stager's to_host sees all device work the
 * caller queued before the call, and its to_device has finished when it
 * returns (comm_cuda_stager.c says how), so staged calls need nothing
 * more from the caller than NCCL's blocking calls do.
 */
#include "comm_impl.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/ledger.h"

/* One pinned buffer of the message pool. */
struct stage_buf {
    struct stage_buf *next;
    unsigned char *host;
    size_t bytes;
    int busy; /* held by an outstanding message */
};

struct staged_state {
    struct comm inner; /* the MPI backend's view of this comm; inner.impl is its state */
    const struct comm_stager *stager; /* borrowed (comm_config.stager or the CUDA runtime's) */
    unsigned char *coll;              /* the collectives' staging buffer */
    size_t coll_bytes;
    struct stage_buf *pool; /* the messages' buffers, busy or free */
};

/* An outstanding isend or irecv: the MPI backend's request on the host
 * copy and the buffer it holds. */
struct staged_message {
    struct comm_request inner; /* linked on the MPI backend's list until its wait */
    struct stage_buf *buf;     /* NULL for an empty message */
    int sending;               /* isend (else irecv) */
    zt_status staged;          /* isend: how the copy to the host went */
};

static struct staged_state *state(const struct comm *c)
{
    return c->impl;
}

static struct comm *inner(const struct comm *c)
{
    return &state(c)->inner;
}

/* base + off, without forming an offset from NULL (an empty call's buffer). */
static unsigned char *byte_at(unsigned char *base, size_t off)
{
    return base ? base + off : NULL;
}

/* The MPI backend's view of c: the fields its entries read, without its
 * state (its init or split fills inner.impl). */
static void mirror(const struct comm *c, struct comm *m)
{
    memset(m, 0, sizeof *m);
    m->ops = &comm_mpi_ops;
    m->mpi = c->mpi;
    m->rank = c->rank;
    m->size = c->size;
    m->reduce_scatter_algo = c->reduce_scatter_algo;
    m->allgather_algo = c->allgather_algo;
    m->allreduce_algo = c->allreduce_algo;
    m->ledger = c->ledger;
}

/* ---- copies and pinned memory ---- */

static zt_status to_host(const struct comm *c, void *host, const void *dev, size_t bytes)
{
    return bytes ? state(c)->stager->to_host(host, dev, bytes) : ZT_OK;
}

static zt_status to_device(const struct comm *c, void *dev, const void *host, size_t bytes)
{
    return bytes ? state(c)->stager->to_device(dev, host, bytes) : ZT_OK;
}

/* Pinned memory of `bytes` > 0, recorded in the ledger. */
static zt_status pinned_alloc(struct comm *c, size_t bytes, unsigned char **out)
{
    void *p = NULL;
    ZT_TRY(state(c)->stager->alloc_pinned(bytes, &p));
    if (c->ledger)
        ledger_add(c->ledger, LEDGER_COMM_BUFFERS, bytes);
    *out = p;
    return ZT_OK;
}

static void pinned_free(struct comm *c, unsigned char *p, size_t bytes)
{
    if (!p)
        return;
    state(c)->stager->free_pinned(p);
    if (c->ledger)
        ledger_sub(c->ledger, LEDGER_COMM_BUFFERS, bytes);
}

/* ---- agreement ---- */

/* Every rank of the group gets the status of the lowest rank whose
 * `local` was worst (MPI_MAXLOC on the status's position in the list);
 * a rank that was OK gets a message naming that rank. */
static zt_status agree(struct comm *c, zt_status local)
{
    if (c->size == 1)
        return local;
    int mine[2] = {(int)local, c->rank}, worst[2];
    COMM_MPI_TRY(MPI_Allreduce(mine, worst, 1, MPI_2INT, MPI_MAXLOC, c->mpi));
    if (local != ZT_OK || worst[0] == ZT_OK)
        return local;
    zt_status st =
        worst[0] > 0 && worst[0] < ZT_STATUS_COUNT ? (zt_status)worst[0] : ZT_ERR_INTERNAL;
    return zt_error_set(
        st, "comm(mpi, host staging): rank %d failed to stage its buffers: see its message",
        worst[1]);
}

/* ---- the collectives' buffer ---- */

static void coll_release(struct comm *c)
{
    struct staged_state *s = state(c);
    pinned_free(c, s->coll, s->coll_bytes);
    s->coll = NULL;
    s->coll_bytes = 0;
}

/* The collectives' buffer, grown to at least `bytes`. Every rank of the
 * group asks for the same size, so every rank grows here or none does, and
 * the growth is agreed before the collective: after a failure no rank
 * holds a buffer (all alike again) and none enters the call. */
static zt_status coll_reserve(struct comm *c, size_t bytes, unsigned char **out)
{
    struct staged_state *s = state(c);
    if (bytes > s->coll_bytes) {
        coll_release(c);
        unsigned char *p = NULL;
        zt_status st = pinned_alloc(c, bytes, &p);
        if (st == ZT_OK) {
            s->coll = p;
            s->coll_bytes = bytes;
        }
        st = agree(c, st);
        if (st != ZT_OK) {
            coll_release(c);
            return st;
        }
    }
    *out = s->coll;
    return ZT_OK;
}

/* ---- running a collective ---- */

/* A request as comm.c makes them, for the MPI backend's i-entries. */
static struct comm_request request(enum comm_kind kind, const void *in, void *out, size_t n,
                                   enum zt_dtype t, enum comm_op op)
{
    return (struct comm_request){.kind = kind,
                                 .in = in,
                                 .out = out,
                                 .n = n,
                                 .dtype = t,
                                 .op = op,
                                 .peer = -1,
                                 .mpi_req = MPI_REQUEST_NULL};
}

/* The MPI backend's call on host buffers: the blocking entry, or the
 * i-entry and its wait (the i-form's own algorithm choice and bits).
 * Broadcast and gather have no i-form; their root is `root`. */
static zt_status run_mpi(struct comm *c, struct comm_request *r, int root, int nonblocking)
{
    struct comm *m = inner(c);
    if (nonblocking) {
        zt_status (*issue)(struct comm *, struct comm_request *) =
            r->kind == COMM_KIND_ALLREDUCE        ? comm_mpi_ops.iallreduce
            : r->kind == COMM_KIND_REDUCE_SCATTER ? comm_mpi_ops.ireduce_scatter
                                                  : comm_mpi_ops.iallgather;
        ZT_ASSERT(r->kind == COMM_KIND_ALLREDUCE || r->kind == COMM_KIND_REDUCE_SCATTER ||
                  r->kind == COMM_KIND_ALLGATHER);
        ZT_TRY(issue(m, r));
        return comm_mpi_ops.wait(m, r);
    }
    switch (r->kind) {
    case COMM_KIND_ALLREDUCE:
        return comm_mpi_ops.allreduce(m, r->out, r->n, r->dtype, r->op);
    case COMM_KIND_REDUCE_SCATTER:
        return comm_mpi_ops.reduce_scatter(m, r->in, r->out, r->n, r->dtype, r->op);
    case COMM_KIND_ALLGATHER:
        return comm_mpi_ops.allgather(m, r->in, r->out, r->n, r->dtype);
    case COMM_KIND_BROADCAST:
        return comm_mpi_ops.broadcast(m, r->out, r->n, r->dtype, root);
    case COMM_KIND_GATHER:
        return comm_mpi_ops.gather(m, r->in, r->out, r->n, r->dtype, root);
    case COMM_KIND_SEND:
    case COMM_KIND_COUNT:
        break;
    }
    ZT_ASSERT(!"not a collective");
    return ZT_ERR_INTERNAL;
}

/* Where one collective's device data goes to and comes from: dev_in's
 * in_bytes land at host_in before the call (none when dev_in is NULL),
 * host_out's out_bytes go to dev_out after it (none when NULL). */
struct staging {
    const void *dev_in;
    unsigned char *host_in;
    size_t in_bytes;
    void *dev_out;
    const unsigned char *host_out;
    size_t out_bytes;
};

/* Stages in, runs r on the host copies, stages out and agrees. The MPI call
 * is entered even when staging in failed, so no peer waits in vain. */
static zt_status run_staged(struct comm *c, struct comm_request *r, int root, int nonblocking,
                            const struct staging *g)
{
    zt_status st = g->dev_in ? to_host(c, g->host_in, g->dev_in, g->in_bytes) : ZT_OK;
    ZT_TRY(run_mpi(c, r, root, nonblocking));
    if (st == ZT_OK && g->dev_out)
        st = to_device(c, g->dev_out, g->host_out, g->out_bytes);
    return agree(c, st);
}

/* MPI counts are int (the MPI backend's limit), checked before the staging
 * sizes are formed from them; the same on every rank. */
static zt_status check_count(const char *where, size_t n)
{
    if (n > (size_t)INT_MAX)
        return zt_error_set(ZT_ERR_UNSUPPORTED, "comm(mpi): %s: %zu elements exceed INT_MAX", where,
                            n);
    return ZT_OK;
}

/* In place: buf's bytes go out and come back through one host copy. */
static zt_status staged_allreduce(struct comm *c, void *buf, size_t n, enum zt_dtype t,
                                  enum comm_op op, int nonblocking)
{
    ZT_TRY(check_count("allreduce", n));
    const size_t bytes = n * zt_dtype_size(t);
    unsigned char *h = NULL;
    ZT_TRY(coll_reserve(c, bytes, &h));
    struct comm_request r = request(COMM_KIND_ALLREDUCE, NULL, h, n, t, op);
    const struct staging g = {buf, h, bytes, buf, h, bytes};
    return run_staged(c, &r, -1, nonblocking, &g);
}

/* The full input, then the reduced block, in one host buffer. */
static zt_status staged_reduce_scatter(struct comm *c, const void *in, void *out, size_t n,
                                       enum zt_dtype t, enum comm_op op, int nonblocking)
{
    ZT_TRY(check_count("reduce_scatter", n));
    const size_t block = n * zt_dtype_size(t), full = block * (size_t)c->size;
    unsigned char *h = NULL;
    ZT_TRY(coll_reserve(c, full + block, &h));
    struct comm_request r = request(COMM_KIND_REDUCE_SCATTER, h, byte_at(h, full), n, t, op);
    const struct staging g = {in, h, full, out, byte_at(h, full), block};
    return run_staged(c, &r, -1, nonblocking, &g);
}

/* Always gathered in place on the host (this rank's block staged at its
 * place in the output), whether or not the caller's is: the same bytes
 * arrive either way, and no second buffer is needed. */
static zt_status staged_allgather(struct comm *c, const void *in, void *out, size_t n,
                                  enum zt_dtype t, int nonblocking)
{
    ZT_TRY(check_count("allgather", n));
    const size_t block = n * zt_dtype_size(t), full = block * (size_t)c->size;
    unsigned char *h = NULL;
    ZT_TRY(coll_reserve(c, full, &h));
    unsigned char *own = byte_at(h, (size_t)c->rank * block);
    struct comm_request r = request(COMM_KIND_ALLGATHER, own, h, n, t, COMM_OP_SUM);
    const struct staging g = {in, own, block, out, h, full};
    return run_staged(c, &r, -1, nonblocking, &g);
}

static zt_status allreduce(struct comm *c, void *buf, size_t n, enum zt_dtype t, enum comm_op op)
{
    return staged_allreduce(c, buf, n, t, op, 0);
}

static zt_status reduce_scatter(struct comm *c, const void *in, void *out, size_t n,
                                enum zt_dtype t, enum comm_op op)
{
    return staged_reduce_scatter(c, in, out, n, t, op, 0);
}

static zt_status allgather(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t)
{
    return staged_allgather(c, in, out, n, t, 0);
}

/* The root stages its buffer in; the others copy the result out. */
static zt_status broadcast(struct comm *c, void *buf, size_t n, enum zt_dtype t, int root)
{
    ZT_TRY(check_count("broadcast", n));
    const size_t bytes = n * zt_dtype_size(t);
    const int is_root = c->rank == root;
    unsigned char *h = NULL;
    ZT_TRY(coll_reserve(c, bytes, &h));
    struct comm_request r = request(COMM_KIND_BROADCAST, NULL, h, n, t, COMM_OP_SUM);
    const struct staging g = {is_root ? buf : NULL, h, bytes, is_root ? NULL : buf, h, bytes};
    return run_staged(c, &r, root, 0, &g);
}

/* Every rank reserves the root's room (its block, then the gathered
 * blocks), so that the buffer grows alike everywhere; only the root copies
 * out. */
static zt_status gather(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t,
                        int root)
{
    ZT_TRY(check_count("gather", n));
    const size_t block = n * zt_dtype_size(t), full = block * (size_t)c->size;
    const int is_root = c->rank == root;
    unsigned char *h = NULL;
    ZT_TRY(coll_reserve(c, block + full, &h));
    unsigned char *gathered = is_root ? byte_at(h, block) : NULL;
    struct comm_request r = request(COMM_KIND_GATHER, h, gathered, n, t, COMM_OP_SUM);
    const struct staging g = {in, h, block, is_root ? out : NULL, gathered, full};
    return run_staged(c, &r, root, 0, &g);
}

static zt_status barrier(struct comm *c)
{
    return comm_mpi_ops.barrier(inner(c));
}

/* The i-forms run to completion here (see the design comment): the request
 * keeps impl NULL, which tells wait there is nothing left to do. */
static zt_status iallreduce(struct comm *c, struct comm_request *q)
{
    return staged_allreduce(c, q->out, q->n, q->dtype, q->op, 1);
}

static zt_status ireduce_scatter(struct comm *c, struct comm_request *q)
{
    return staged_reduce_scatter(c, q->in, q->out, q->n, q->dtype, q->op, 1);
}

static zt_status iallgather(struct comm *c, struct comm_request *q)
{
    return staged_allgather(c, q->in, q->out, q->n, q->dtype, 1);
}

/* ---- the message pool ---- */

/* A free pool buffer of at least `bytes` (the smallest that fits), or a
 * new one; NULL for an empty message. A free buffer too small for any
 * request is regrown rather than kept beside a new one, so the pool holds
 * at most as many buffers as messages were ever outstanding at once. */
static zt_status pool_take(struct comm *c, size_t bytes, struct stage_buf **out)
{
    struct staged_state *s = state(c);
    struct stage_buf *fit = NULL, *small = NULL;
    *out = NULL;
    if (bytes == 0)
        return ZT_OK;
    for (struct stage_buf *b = s->pool; b; b = b->next) {
        if (b->busy)
            continue;
        if (b->bytes >= bytes && (!fit || b->bytes < fit->bytes))
            fit = b;
        else if (b->bytes < bytes)
            small = b;
    }
    if (!fit && small) {
        pinned_free(c, small->host, small->bytes);
        small->host = NULL;
        small->bytes = 0;
        ZT_TRY(pinned_alloc(c, bytes, &small->host));
        small->bytes = bytes;
        fit = small;
    }
    if (!fit) {
        fit = calloc(1, sizeof *fit);
        if (!fit)
            return zt_error_set(ZT_ERR_NOMEM, "comm(mpi, host staging): out of memory");
        zt_status st = pinned_alloc(c, bytes, &fit->host);
        if (st != ZT_OK) {
            free(fit);
            return st;
        }
        fit->bytes = bytes;
        fit->next = s->pool;
        s->pool = fit;
    }
    fit->busy = 1;
    *out = fit;
    return ZT_OK;
}

static void pool_give(struct stage_buf *b)
{
    if (b)
        b->busy = 0;
}

static unsigned char *host_of(const struct stage_buf *b)
{
    return b ? b->host : NULL;
}

static void pool_free(struct comm *c)
{
    struct staged_state *s = state(c);
    while (s->pool) {
        struct stage_buf *b = s->pool;
        s->pool = b->next;
        pinned_free(c, b->host, b->bytes);
        free(b);
    }
}

/* ---- point-to-point ---- */

/* The message is sent even when staging it failed, so that the receiver
 * does not hang; the failure is this rank's to report. */
static zt_status p2p_send(struct comm *c, const void *buf, size_t n, enum zt_dtype t, int peer)
{
    ZT_TRY(check_count("send", n));
    const size_t bytes = n * zt_dtype_size(t);
    struct stage_buf *b = NULL;
    ZT_TRY(pool_take(c, bytes, &b));
    zt_status staged = to_host(c, host_of(b), buf, bytes);
    zt_status st = comm_mpi_ops.send(inner(c), host_of(b), n, t, peer);
    pool_give(b);
    return st != ZT_OK ? st : staged;
}

static zt_status p2p_recv(struct comm *c, void *buf, size_t n, enum zt_dtype t, int peer)
{
    ZT_TRY(check_count("recv", n));
    const size_t bytes = n * zt_dtype_size(t);
    struct stage_buf *b = NULL;
    ZT_TRY(pool_take(c, bytes, &b));
    zt_status st = comm_mpi_ops.recv(inner(c), host_of(b), n, t, peer);
    if (st == ZT_OK)
        st = to_device(c, buf, host_of(b), bytes);
    pool_give(b);
    return st;
}

/* Posts q (its buffer already staged for a send) through the MPI backend's
 * i-entry on a host copy; on failure nothing is held. */
static zt_status message_issue(struct comm *c, struct comm_request *q, int sending)
{
    ZT_TRY(check_count(sending ? "isend" : "irecv", q->n));
    const size_t bytes = q->n * zt_dtype_size(q->dtype);
    struct staged_message *m = calloc(1, sizeof *m);
    if (!m)
        return zt_error_set(ZT_ERR_NOMEM, "comm(mpi, host staging): out of memory for a message");
    zt_status st = pool_take(c, bytes, &m->buf);
    if (st != ZT_OK) {
        free(m);
        return st;
    }
    m->inner = request(q->kind, NULL, NULL, q->n, q->dtype, q->op);
    m->inner.peer = q->peer;
    m->sending = sending;
    if (sending) {
        m->inner.in = host_of(m->buf);
        m->staged = to_host(c, host_of(m->buf), q->in, bytes);
        st = comm_mpi_ops.isend(inner(c), &m->inner);
    } else {
        m->inner.out = host_of(m->buf);
        st = comm_mpi_ops.irecv(inner(c), &m->inner);
    }
    if (st != ZT_OK) {
        pool_give(m->buf);
        free(m);
        return st;
    }
    q->impl = m;
    return ZT_OK;
}

static zt_status isend(struct comm *c, struct comm_request *q)
{
    return message_issue(c, q, 1);
}

static zt_status irecv(struct comm *c, struct comm_request *q)
{
    return message_issue(c, q, 0);
}

/* A message: MPI's wait, then a received message's copy to the device; the
 * buffer goes back to the pool either way. A collective finished when it
 * was issued. */
static zt_status wait_request(struct comm *c, struct comm_request *q)
{
    struct staged_message *m = q->impl;
    if (!m)
        return ZT_OK;
    zt_status st = comm_mpi_ops.wait(inner(c), &m->inner);
    if (st == ZT_OK)
        st = m->sending ? m->staged
                        : to_device(c, q->out, host_of(m->buf), q->n * zt_dtype_size(q->dtype));
    pool_give(m->buf);
    free(m);
    q->impl = NULL;
    return st;
}

/* Outstanding messages are the MPI backend's requests. */
static zt_status advance(struct comm *c)
{
    return comm_mpi_ops.advance(inner(c));
}

/* ---- life cycle ---- */

/* Usable with a stager from the config, or with the CUDA runtime's when
 * it sees a device. */
static int query(const struct comm_config *cfg, char *why, size_t n)
{
    const struct comm_cuda_table *t;
    char missing[400];
    if (cfg->stager)
        return 0;
    if (comm_cuda_table(&t, missing, sizeof missing) < 0) {
        snprintf(why, n, "no way to copy device buffers (no stager given, and %s)", missing);
        return -1;
    }
    return t->device_query(why, n);
}

static void fini(struct comm *c)
{
    struct staged_state *s = state(c);
    if (!s)
        return;
    comm_mpi_ops.fini(&s->inner);
    coll_release(c);
    pool_free(c);
    free(s);
    c->impl = NULL;
}

/* A state for c that stages with `stager`; the caller has the MPI backend
 * fill inner.impl (its init, or its split of the parent's). */
static zt_status state_new(struct comm *c, const struct comm_stager *stager,
                           struct staged_state **out)
{
    struct staged_state *s = calloc(1, sizeof *s);
    if (!s)
        return zt_error_set(ZT_ERR_NOMEM, "comm(mpi, host staging): out of memory");
    s->stager = stager;
    mirror(c, &s->inner);
    *out = s;
    return ZT_OK;
}

static zt_status init(struct comm *c, const struct comm_config *cfg)
{
    const struct comm_stager *stager = cfg->stager;
    const struct comm_cuda_table *t;
    char why[512];
    if (!stager && comm_cuda_table(&t, why, sizeof why) >= 0)
        stager = t->stager;
    if (!stager) /* query refused it already */
        return zt_error_set(ZT_ERR_CONFIG, "comm(mpi, host staging): no stager");
    struct staged_state *s = NULL;
    ZT_TRY(state_new(c, stager, &s));
    zt_status st = comm_mpi_ops.init(&s->inner, cfg);
    if (st != ZT_OK) {
        free(s);
        return st;
    }
    c->impl = s;
    return ZT_OK;
}

/* The child stages with the parent's stager; the MPI backend splits its
 * own state alongside. */
static zt_status split(struct comm *parent, struct comm *child, int color, int key)
{
    struct staged_state *s = NULL;
    ZT_TRY(state_new(child, state(parent)->stager, &s));
    zt_status st = comm_mpi_ops.split(inner(parent), &s->inner, color, key);
    if (st != ZT_OK) {
        free(s);
        return st;
    }
    child->impl = s;
    return ZT_OK;
}

const struct comm_backend_ops comm_staged_ops = {
    .name = "mpi",
    .memory = COMM_MEMORY_CUDA,
    .host_staged = 1,
    .query = query,
    .init = init,
    .fini = fini,
    .split = split,
    .allreduce = allreduce,
    .reduce_scatter = reduce_scatter,
    .allgather = allgather,
    .broadcast = broadcast,
    .gather = gather,
    .barrier = barrier,
    .send = p2p_send,
    .recv = p2p_recv,
    .iallreduce = iallreduce,
    .ireduce_scatter = ireduce_scatter,
    .iallgather = iallgather,
    .isend = isend,
    .irecv = irecv,
    .wait = wait_request,
    .advance = advance,
};
