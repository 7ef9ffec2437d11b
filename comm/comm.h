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
 * allgather (N-1)/N of the full buffer, broadcast the buffer on the root;
 * N is the number of ranks, fractions of a byte are dropped, one rank sends
 * nothing). Non-blocking calls count when issued.
 *
 * Non-blocking calls return a request that must be passed to comm_wait
 * exactly once, in the same order on every rank; buffers must not be touched
 * until then. Time spent inside comm_wait and blocking calls is added to
 * `wait_seconds`.
 *
 * Reductions over 16-bit floats (ZT_BF16, ZT_F16) add in fp32 per element and
 * round once to nearest even per combining step, on every backend.
 *
 * The "mpi" backend has two algorithms for reduce-scatter and allgather:
 * "native" (the MPI library's collective) and "ring" (N-1 steps of
 * point-to-point exchange between neighbours). They agree up to the order
 * of floating point summation; "auto" picks per message size and world size
 * from measured thresholds (comm_mpi.c). Both give every rank the same
 * bytes for the same block. The "nccl" backend ignores these fields: NCCL
 * picks its own algorithms.
 *
 * Errors are never fatal here: MPI and NCCL run with errors returned and each
 * library code becomes ZT_ERR_COMM with the call's name and the library's
 * message. After a ZT_ERR_COMM the communicator may be unusable; the caller
 * should agree on the status (comm_agree_status) where possible and exit.
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

struct ledger;

/* All fields may be zero/NULL: a zeroed config means "auto" everywhere. */
struct comm_config {
    const char *backend;        /* "auto" (NULL), "mpi" or "nccl" */
    const char *reduce_scatter; /* mpi algorithm: "auto" (NULL), "native" or "ring" */
    const char *allgather;      /* mpi algorithm: "auto" (NULL), "native" or "ring" */
    /* Where the backend's own staging memory (the ring's scratch blocks) is
     * recorded under LEDGER_COMM_BUFFERS; NULL: not recorded. Borrowed: it
     * must outlive the comm. */
    struct ledger *ledger;
};

struct comm;         /* opaque */
struct comm_request; /* opaque; owned by the comm until comm_wait */

/* Creates the communicator over MPI_COMM_WORLD (MPI must be initialised;
 * collective over MPI_COMM_WORLD). "auto" takes the first built backend whose
 * query says it is usable on every rank, NCCL before MPI. *out is owned by
 * the caller and freed with comm_destroy; on failure *out is NULL.
 * Errors: ZT_ERR_CONFIG (unknown or unusable backend, unknown algorithm),
 * ZT_ERR_COMM, ZT_ERR_DEVICE, ZT_ERR_NOMEM. */
zt_status comm_create(const struct comm_config *cfg, struct comm **out);
/* Frees the communicator and everything it owns (collective). NULL is a
 * no-op. Requests not yet waited on are a caller bug. */
void comm_destroy(struct comm *c);

/* This rank's index and the number of ranks (MPI_COMM_WORLD's). */
int comm_rank(const struct comm *c);
int comm_size(const struct comm *c);
/* The chosen backend's name ("mpi", "nccl"); static storage. */
const char *comm_backend_name(const struct comm *c);

/* In place: buf[0..n) becomes the reduction over ranks.
 * Errors: ZT_ERR_USAGE (bad dtype/op, NULL buffer), ZT_ERR_UNSUPPORTED
 * (count beyond the backend's limit), ZT_ERR_COMM. Same for the calls below. */
zt_status comm_allreduce(struct comm *c, void *buf, size_t n, enum zt_dtype t, enum comm_op op);
/* in[0..n*size) on every rank; out[0..n) receives the reduction of block
 * `rank` (elements rank*n .. rank*n+n-1). in and out must not overlap. */
zt_status comm_reduce_scatter(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t,
                              enum comm_op op);
/* in[0..n) from every rank; out[0..n*size) receives them in rank order.
 * `in` may equal out + rank*n (in-place gather); no other overlap. */
zt_status comm_allgather(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t);
/* buf[0..n) of rank `root` is copied to buf on every rank. */
zt_status comm_broadcast(struct comm *c, void *buf, size_t n, enum zt_dtype t, int root);
/* Returns once every rank has entered it (and, for "nccl", once this rank's
 * earlier collectives have completed). */
zt_status comm_barrier(struct comm *c);

/* Non-blocking variants; *req is valid until passed to comm_wait and is NULL
 * on failure. There is no progress thread: a native MPI collective advances
 * when MPI is entered, and a "ring" one runs entirely inside comm_wait. */
zt_status comm_iallreduce(struct comm *c, void *buf, size_t n, enum zt_dtype t, enum comm_op op,
                          struct comm_request **req);
zt_status comm_ireduce_scatter(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t,
                               enum comm_op op, struct comm_request **req);
zt_status comm_iallgather(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t,
                          struct comm_request **req);
/* Completes and frees a request (freed also when completion fails). */
zt_status comm_wait(struct comm *c, struct comm_request *req);

/* Agreement on a status: every rank passes its local status and receives
 * the first non-OK one by severity (max exit code, then the later entry of
 * the status list; the lowest rank among equals), so all ranks leave a
 * failed phase together and nobody blocks in a later collective. Returns the
 * agreed status, which is also stored in *agreed. When this rank was OK but
 * another failed, the message becomes "rank R failed: see its message";
 * a failing rank keeps its own message. If the agreement itself fails the
 * result is ZT_ERR_COMM. */
zt_status comm_agree_status(struct comm *c, zt_status local, zt_status *agreed);

/* Counters since creation or the last reset; owned by the comm. */
const struct comm_stats *comm_get_stats(const struct comm *c);
void comm_reset_stats(struct comm *c);

#endif
