/* comm/comm_nccl.c — the NCCL backend: collectives on device memory.
 *
 * Compiled only when CMake found NCCL (ZT_HAVE_NCCL). One rank drives one
 * GPU: the rank's index among the ranks of its node (MPI_Comm_split_type
 * with MPI_COMM_TYPE_SHARED) picks the device, and a node with more ranks
 * than GPUs is refused at init, since NCCL cannot put two ranks of one
 * communicator on one device. Rank 0 makes the ncclUniqueId and MPI
 * broadcasts it; the whole rendezvous piggybacks on the MPI world comm.c
 * already holds.
 *
 * Every NCCL call goes onto one stream owned by the backend, so the
 * collectives of a rank complete in the order they were issued, as comm.h
 * promises. With comm_config.device_stream (the compute stream), each call
 * first makes this stream wait, on the device, for an event recorded on the
 * compute stream: a collective then reads its input only after the kernels
 * queued before it wrote it, and writes its output only after the kernels
 * queued before it stopped reading the old contents, with no host
 * synchronisation, so a prefetch overlaps compute for real. Without one,
 * the caller must have finished writing the input (e.g. by synchronising its
 * compute stream). Blocking calls wait for the stream before returning;
 * non-blocking calls record a CUDA event that comm_wait waits for, so the
 * kernels a caller queues after comm_wait see the result.
 *
 * Waiting polls the stream and ncclCommGetAsyncError instead of blocking in
 * cudaStreamSynchronize: when a peer dies NCCL would spin forever, whereas
 * polling sees the asynchronous error, aborts the communicator and returns
 * ZT_ERR_COMM. NCCL results are translated by NCCL_TRY, CUDA runtime results
 * by CUDA_TRY (ZT_ERR_DEVICE), both returning, never aborting.
 *
 * A split group runs on its parent's device with a stream of its own. Its
 * NCCL communicator comes from ncclCommSplit of the parent's (NCCL 2.18 and
 * later; it orders ranks by key, then parent rank, as MPI_Comm_split does,
 * so the group's NCCL and MPI ranks agree); with an older NCCL the group's
 * rank 0 makes a unique id and broadcasts it over the group's MPI
 * communicator, as at init.
 *
 * Point-to-point calls are ncclSend / ncclRecv on the same stream, so a
 * rank's messages run one after another in the order it issued them, even
 * the non-blocking ones: a pattern that needs a send and a receive of one
 * rank in progress together (every rank receiving first, then sending) does
 * not complete on this backend; order them so that each pair meets (even
 * ranks send first), as a blocking exchange must anyway. Gather is
 * one NCCL group: the root receives every other rank's block straight into
 * place and copies its own on the stream, the others send theirs.
 *
 * NCCL reduces bf16/f16 in fp32 per element and rounds per step, like the
 * MPI backend's user ops, and chooses its own algorithms: the comm_config
 * algorithm fields do not apply.
 */
#include "comm_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

struct nccl_state {
    ncclComm_t comm;
    cudaStream_t stream;
    int device;
    /* comm_config.device_stream (NULL: none) and the event each call
     * records on it for this comm's stream to wait on. */
    cudaStream_t producer;
    cudaEvent_t ready;
};

static zt_status nccl_error(ncclResult_t r, const char *call)
{
    return zt_error_set(ZT_ERR_COMM, "comm(nccl): %.*s failed: %s", (int)strcspn(call, "("), call,
                        ncclGetErrorString(r));
}

static zt_status nccl_cuda_error(cudaError_t e, const char *call)
{
    return zt_error_set(ZT_ERR_DEVICE, "comm(nccl): %.*s failed: %s", (int)strcspn(call, "("), call,
                        cudaGetErrorString(e));
}

#define NCCL_TRY(call)                                                                             \
    do {                                                                                           \
        ncclResult_t nccl_rc_ = (call);                                                            \
        if (nccl_rc_ != ncclSuccess)                                                               \
            return nccl_error(nccl_rc_, #call);                                                    \
    } while (0)

#define CUDA_TRY(call)                                                                             \
    do {                                                                                           \
        cudaError_t cuda_rc_ = (call);                                                             \
        if (cuda_rc_ != cudaSuccess)                                                               \
            return nccl_cuda_error(cuda_rc_, #call);                                               \
    } while (0)

static struct nccl_state *state(const struct comm *c)
{
    return c->impl;
}

static ncclDataType_t nccl_type(enum zt_dtype t)
{
    switch (t) {
    case ZT_F32:
        return ncclFloat32;
    case ZT_F64:
        return ncclFloat64;
    case ZT_BF16:
        return ncclBfloat16;
    case ZT_F16:
        return ncclFloat16;
    case ZT_I32:
        return ncclInt32;
    case ZT_I64:
        return ncclInt64;
    case ZT_U8:
        return ncclUint8;
    }
    ZT_ASSERT(!"dtype checked by comm.c");
    return ncclFloat32;
}

static ncclRedOp_t nccl_op(enum comm_op op)
{
    return op == COMM_OP_SUM ? ncclSum : op == COMM_OP_MAX ? ncclMax : ncclMin;
}

static int query(const struct comm_config *cfg, char *why, size_t n)
{
    (void)cfg;
    return comm_cuda_device_query(why, n);
}

/* The rank's index among the ranks sharing its node, and their number. */
static zt_status local_rank(const struct comm *c, int *rank, int *size)
{
    MPI_Comm node;
    COMM_MPI_TRY(MPI_Comm_split_type(c->mpi, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node));
    int rc = MPI_Comm_rank(node, rank);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_size(node, size);
    MPI_Comm_free(&node);
    if (rc != MPI_SUCCESS)
        return comm_mpi_error(rc, "MPI_Comm_rank/size(node communicator)");
    return ZT_OK;
}

static zt_status pick_device(const struct comm *c, int *device)
{
    int lrank = 0, lsize = 1, count = 0;
    ZT_TRY(local_rank(c, &lrank, &lsize));
    CUDA_TRY(cudaGetDeviceCount(&count));
    if (lsize > count)
        return zt_error_set(ZT_ERR_CONFIG,
                            "comm.backend: nccl: %d ranks on this node but %d GPU(s); NCCL needs "
                            "one GPU per rank (use comm.backend: mpi)",
                            lsize, count);
    *device = lrank;
    CUDA_TRY(cudaSetDevice(*device));
    return ZT_OK;
}

/* Rank 0 makes the unique id and broadcasts it with a success flag, so that
 * a failure on rank 0 does not leave the others waiting in NCCL. */
static zt_status share_unique_id(const struct comm *c, ncclUniqueId *id)
{
    struct {
        int ok;
        ncclUniqueId id;
    } msg;
    memset(&msg, 0, sizeof msg);
    ncclResult_t r = ncclSuccess;
    if (c->rank == 0) {
        r = ncclGetUniqueId(&msg.id);
        msg.ok = r == ncclSuccess;
    }
    COMM_MPI_TRY(MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, c->mpi));
    if (c->rank == 0)
        NCCL_TRY(r);
    if (!msg.ok)
        return zt_error_set(ZT_ERR_COMM, "comm(nccl): rank 0 could not create the NCCL id");
    *id = msg.id;
    return ZT_OK;
}

static void fini(struct comm *c)
{
    struct nccl_state *s = state(c);
    if (!s)
        return;
    if (s->comm)
        ncclCommDestroy(s->comm);
    if (s->ready)
        cudaEventDestroy(s->ready);
    if (s->stream)
        cudaStreamDestroy(s->stream);
    free(s);
    c->impl = NULL;
}

static zt_status init_state(struct comm *c, struct nccl_state *s)
{
    ncclUniqueId id;
    ZT_TRY(pick_device(c, &s->device));
    ZT_TRY(share_unique_id(c, &id));
    CUDA_TRY(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    CUDA_TRY(cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming));
    NCCL_TRY(ncclCommInitRank(&s->comm, c->size, id, c->rank));
    return ZT_OK;
}

/* The split's NCCL communicator; see the file comment. */
static zt_status split_state(struct comm *parent, struct comm *child, struct nccl_state *s,
                             int color, int key)
{
    s->device = state(parent)->device;
    s->producer = state(parent)->producer;
    CUDA_TRY(cudaSetDevice(s->device));
    CUDA_TRY(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    CUDA_TRY(cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming));
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    (void)child;
    NCCL_TRY(ncclCommSplit(state(parent)->comm, color, key, &s->comm, NULL));
#else
    ncclUniqueId id;
    (void)color;
    (void)key;
    ZT_TRY(share_unique_id(child, &id));
    NCCL_TRY(ncclCommInitRank(&s->comm, child->size, id, child->rank));
#endif
    return ZT_OK;
}

static zt_status split(struct comm *parent, struct comm *child, int color, int key)
{
    struct nccl_state *s = calloc(1, sizeof *s);
    if (!s)
        return zt_error_set(ZT_ERR_NOMEM, "comm(nccl): out of memory");
    child->impl = s;
    zt_status st = split_state(parent, child, s, color, key);
    if (st != ZT_OK)
        fini(child);
    return st;
}

static zt_status init(struct comm *c, const struct comm_config *cfg)
{
    struct nccl_state *s = calloc(1, sizeof *s);
    if (!s)
        return zt_error_set(ZT_ERR_NOMEM, "comm(nccl): out of memory");
    s->producer = (cudaStream_t)cfg->device_stream;
    c->impl = s;
    zt_status st = init_state(c, s);
    if (st != ZT_OK)
        fini(c);
    return st;
}

/* Waits until `ev` (or, when NULL, the whole stream) has completed, watching
 * for NCCL's asynchronous errors meanwhile; see the file comment. */
static zt_status sync_on(struct comm *c, cudaEvent_t ev)
{
    struct nccl_state *s = state(c);
    for (;;) {
        cudaError_t e = ev ? cudaEventQuery(ev) : cudaStreamQuery(s->stream);
        if (e == cudaSuccess)
            return ZT_OK;
        if (e != cudaErrorNotReady)
            return nccl_cuda_error(e, ev ? "cudaEventQuery" : "cudaStreamQuery");
        ncclResult_t async = ncclSuccess;
        NCCL_TRY(ncclCommGetAsyncError(s->comm, &async));
        if (async != ncclSuccess && async != ncclInProgress) {
            ncclCommAbort(s->comm);
            s->comm = NULL;
            return nccl_error(async, "ncclCommGetAsyncError");
        }
    }
}

/* ---- enqueueing (shared by the blocking and non-blocking entries) ---- */

/* Orders what comes next on this comm's stream after the work queued so
 * far on the compute stream (see the file comment). */
static zt_status after_producer(struct comm *c)
{
    struct nccl_state *s = state(c);
    if (!s->producer)
        return ZT_OK;
    CUDA_TRY(cudaEventRecord(s->ready, s->producer));
    CUDA_TRY(cudaStreamWaitEvent(s->stream, s->ready, 0));
    return ZT_OK;
}

static zt_status enqueue_allreduce(struct comm *c, void *buf, size_t n, enum zt_dtype t,
                                   enum comm_op op)
{
    ZT_TRY(after_producer(c));
    struct nccl_state *s = state(c);
    NCCL_TRY(ncclAllReduce(buf, buf, n, nccl_type(t), nccl_op(op), s->comm, s->stream));
    return ZT_OK;
}

static zt_status enqueue_reduce_scatter(struct comm *c, const void *in, void *out, size_t n,
                                        enum zt_dtype t, enum comm_op op)
{
    ZT_TRY(after_producer(c));
    struct nccl_state *s = state(c);
    NCCL_TRY(ncclReduceScatter(in, out, n, nccl_type(t), nccl_op(op), s->comm, s->stream));
    return ZT_OK;
}

static zt_status enqueue_allgather(struct comm *c, const void *in, void *out, size_t n,
                                   enum zt_dtype t)
{
    ZT_TRY(after_producer(c));
    struct nccl_state *s = state(c);
    NCCL_TRY(ncclAllGather(in, out, n, nccl_type(t), s->comm, s->stream));
    return ZT_OK;
}

/* ---- blocking entries ---- */

static zt_status allreduce(struct comm *c, void *buf, size_t n, enum zt_dtype t, enum comm_op op)
{
    ZT_TRY(enqueue_allreduce(c, buf, n, t, op));
    return sync_on(c, NULL);
}

static zt_status reduce_scatter(struct comm *c, const void *in, void *out, size_t n,
                                enum zt_dtype t, enum comm_op op)
{
    ZT_TRY(enqueue_reduce_scatter(c, in, out, n, t, op));
    return sync_on(c, NULL);
}

static zt_status allgather(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t)
{
    ZT_TRY(enqueue_allgather(c, in, out, n, t));
    return sync_on(c, NULL);
}

static zt_status broadcast(struct comm *c, void *buf, size_t n, enum zt_dtype t, int root)
{
    ZT_TRY(after_producer(c));
    struct nccl_state *s = state(c);
    NCCL_TRY(ncclBroadcast(buf, buf, n, nccl_type(t), root, s->comm, s->stream));
    return sync_on(c, NULL);
}

static zt_status gather(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t,
                        int root)
{
    ZT_TRY(after_producer(c));
    struct nccl_state *s = state(c);
    const size_t block = n * zt_dtype_size(t);
    if (c->rank == root && block > 0)
        CUDA_TRY(cudaMemcpyAsync((char *)out + (size_t)root * block, in, block,
                                 cudaMemcpyDeviceToDevice, s->stream));
    NCCL_TRY(ncclGroupStart());
    ncclResult_t r = ncclSuccess;
    if (c->rank != root)
        r = ncclSend(in, n, nccl_type(t), root, s->comm, s->stream);
    for (int peer = 0; c->rank == root && peer < c->size && r == ncclSuccess; peer++)
        if (peer != root)
            r = ncclRecv((char *)out + (size_t)peer * block, n, nccl_type(t), peer, s->comm,
                         s->stream);
    ncclResult_t end = ncclGroupEnd(); /* always closes the group */
    NCCL_TRY(r);
    NCCL_TRY(end);
    return sync_on(c, NULL);
}

static zt_status barrier(struct comm *c)
{
    ZT_TRY(sync_on(c, NULL));
    COMM_MPI_TRY(MPI_Barrier(c->mpi));
    return ZT_OK;
}

/* ---- point-to-point ---- */

static zt_status enqueue_send(struct comm *c, const void *buf, size_t n, enum zt_dtype t, int peer)
{
    ZT_TRY(after_producer(c));
    struct nccl_state *s = state(c);
    NCCL_TRY(ncclSend(buf, n, nccl_type(t), peer, s->comm, s->stream));
    return ZT_OK;
}

static zt_status enqueue_recv(struct comm *c, void *buf, size_t n, enum zt_dtype t, int peer)
{
    ZT_TRY(after_producer(c));
    struct nccl_state *s = state(c);
    NCCL_TRY(ncclRecv(buf, n, nccl_type(t), peer, s->comm, s->stream));
    return ZT_OK;
}

static zt_status p2p_send(struct comm *c, const void *buf, size_t n, enum zt_dtype t, int peer)
{
    ZT_TRY(enqueue_send(c, buf, n, t, peer));
    return sync_on(c, NULL);
}

static zt_status p2p_recv(struct comm *c, void *buf, size_t n, enum zt_dtype t, int peer)
{
    ZT_TRY(enqueue_recv(c, buf, n, t, peer));
    return sync_on(c, NULL);
}

/* ---- non-blocking entries ---- */

/* Records the completion event of the collective just enqueued. */
static zt_status record(struct comm *c, struct comm_request *q)
{
    cudaEvent_t ev;
    CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(ev, state(c)->stream);
    if (e != cudaSuccess) {
        cudaEventDestroy(ev);
        return nccl_cuda_error(e, "cudaEventRecord");
    }
    q->impl = ev;
    return ZT_OK;
}

static zt_status iallreduce(struct comm *c, struct comm_request *q)
{
    ZT_TRY(enqueue_allreduce(c, q->out, q->n, q->dtype, q->op));
    return record(c, q);
}

static zt_status ireduce_scatter(struct comm *c, struct comm_request *q)
{
    ZT_TRY(enqueue_reduce_scatter(c, q->in, q->out, q->n, q->dtype, q->op));
    return record(c, q);
}

static zt_status iallgather(struct comm *c, struct comm_request *q)
{
    ZT_TRY(enqueue_allgather(c, q->in, q->out, q->n, q->dtype));
    return record(c, q);
}

static zt_status isend(struct comm *c, struct comm_request *q)
{
    ZT_TRY(enqueue_send(c, q->in, q->n, q->dtype, q->peer));
    return record(c, q);
}

static zt_status irecv(struct comm *c, struct comm_request *q)
{
    ZT_TRY(enqueue_recv(c, q->out, q->n, q->dtype, q->peer));
    return record(c, q);
}

static zt_status wait_request(struct comm *c, struct comm_request *q)
{
    cudaEvent_t ev = q->impl;
    zt_status st = sync_on(c, ev);
    cudaEventDestroy(ev);
    q->impl = NULL;
    return st;
}

const struct comm_backend_ops comm_nccl_ops = {
    .name = "nccl",
    .memory = COMM_MEMORY_CUDA,
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
};
