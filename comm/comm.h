/* comm/comm.h — collectives among the ranks of one training run.
 *
 * A `struct comm` is one communicator over all ranks, backed by one backend
 * chosen at init ("mpi" on CPUs; "nccl" on GPUs when built with NCCL). Every
 * function here is collective: all ranks call it in the same order with the
 * same sizes, or the run hangs. Buffers are device memory of the backend
 * (host memory for "mpi").
 *
 * Element counts are per rank-visible buffer as documented per call. Each
 * call adds the bytes this rank sends to a per-kind counter (the bus model of
 * nccl-tests: allreduce sends 2(N-1)/N of the buffer, reduce-scatter and
 * allgather (N-1)/N of the full buffer, broadcast the buffer on the root).
 *
 * Non-blocking calls return a request that must be passed to comm_wait
 * exactly once; buffers must not be touched until then. Time spent inside
 * comm_wait and blocking calls is added to `wait_seconds`.
 */
#ifndef ZT_COMM_H
#define ZT_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "../common/dtype.h"
#include "../common/status.h"

enum comm_op { COMM_OP_SUM, COMM_OP_MAX, COMM_OP_MIN };

enum comm_kind {
    COMM_KIND_ALLREDUCE,
    COMM_KIND_REDUCE_SCATTER,
    COMM_KIND_ALLGATHER,
    COMM_KIND_BROADCAST,
    COMM_KIND_COUNT
};

/* Name of a kind as used in metrics ("allreduce", "reduce_scatter", ...). */
const char *comm_kind_name(enum comm_kind k);

struct comm_stats {
    uint64_t bytes[COMM_KIND_COUNT]; /* bytes this rank sent, per kind */
    uint64_t calls[COMM_KIND_COUNT];
    double wait_seconds; /* time blocked in collectives and comm_wait */
};

struct comm_config {
    const char *backend; /* "auto", "mpi" or "nccl" */
};

struct comm; /* opaque */
struct comm_request; /* opaque; owned by the comm until comm_wait */

/* Creates the communicator over MPI_COMM_WORLD (MPI must be initialised).
 * *out is owned by the caller and freed with comm_destroy.
 * Errors: ZT_ERR_CONFIG (unknown or unusable backend), ZT_ERR_COMM. */
zt_status comm_create(const struct comm_config *cfg, struct comm **out);
void comm_destroy(struct comm *c);

int comm_rank(const struct comm *c);
int comm_size(const struct comm *c);
const char *comm_backend_name(const struct comm *c);

/* In place: buf[0..n) becomes the reduction over ranks. */
zt_status comm_allreduce(struct comm *c, void *buf, size_t n, enum zt_dtype t, enum comm_op op);
/* in[0..n*size) on every rank; out[0..n) receives the reduction of block
 * `rank` (elements rank*n .. rank*n+n-1). in and out must not overlap. */
zt_status comm_reduce_scatter(struct comm *c, const void *in, void *out, size_t n,
                              enum zt_dtype t, enum comm_op op);
/* in[0..n) from every rank; out[0..n*size) receives them in rank order.
 * `in` may equal out + rank*n (in-place gather). */
zt_status comm_allgather(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t);
zt_status comm_broadcast(struct comm *c, void *buf, size_t n, enum zt_dtype t, int root);
zt_status comm_barrier(struct comm *c);

/* Non-blocking variants; *req is valid until passed to comm_wait. */
zt_status comm_iallreduce(struct comm *c, void *buf, size_t n, enum zt_dtype t, enum comm_op op,
                          struct comm_request **req);
zt_status comm_ireduce_scatter(struct comm *c, const void *in, void *out, size_t n,
                               enum zt_dtype t, enum comm_op op, struct comm_request **req);
zt_status comm_iallgather(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t,
                          struct comm_request **req);
/* Completes and frees a request. */
zt_status comm_wait(struct comm *c, struct comm_request *req);

/* Agreement on a status: every rank passes its local status and receives
 * the first non-OK one by severity (max exit code), so all ranks leave a
 * failed phase together and nobody blocks in a later collective. */
zt_status comm_agree_status(struct comm *c, zt_status local, zt_status *agreed);

const struct comm_stats *comm_get_stats(const struct comm *c);
void comm_reset_stats(struct comm *c);

#endif
