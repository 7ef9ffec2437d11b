/* comm/comm_impl.h — the backend table behind comm.h; for comm/ only.
 *
 * A backend is a `struct comm_backend_ops` of function pointers, in the
 * manner of ggml's backend interface and Open MPI's coll components: query()
 * says whether it can run here (and why not), init() fills the backend state
 * of a `struct comm`, and each collective is one entry. comm.c owns
 * everything the backends share: argument checks, the byte counters and
 * wait-time accounting, the request allocation, status agreement and the
 * choice of backend. Every entry except query is collective.
 *
 * The MPI communicator `mpi` (a dup of MPI_COMM_WORLD with MPI_ERRORS_RETURN)
 * is made by comm.c before the backend is chosen, because choosing needs it
 * (every rank must pick the same backend) and every backend needs it too:
 * the MPI backend as its communicator, the NCCL backend to find local ranks
 * and to broadcast its unique id.
 *
 * Entries receive arguments already checked by comm.c: valid dtype and op,
 * non-NULL buffers, in-range root, no forbidden overlap. A backend may still
 * refuse what it cannot do (ZT_ERR_UNSUPPORTED) and reports library failures
 * as ZT_ERR_COMM (or ZT_ERR_DEVICE for the CUDA runtime).
 */
#ifndef ZT_COMM_IMPL_H
#define ZT_COMM_IMPL_H

#include <mpi.h>

#include "comm.h"

struct ledger;

/* Algorithm for the collectives that have two in the MPI backend. */
enum comm_algo { COMM_ALGO_AUTO, COMM_ALGO_NATIVE, COMM_ALGO_RING };

struct comm {
    const struct comm_backend_ops *ops;
    void *impl;   /* backend state, owned by the backend (init/fini) */
    MPI_Comm mpi; /* dup of MPI_COMM_WORLD, MPI_ERRORS_RETURN; owned by comm.c */
    int rank, size;
    enum comm_algo reduce_scatter_algo, allgather_algo;
    struct ledger *ledger; /* borrowed, may be NULL */
    struct comm_stats stats;
};

/* One outstanding non-blocking collective. comm.c allocates it zeroed and
 * fills the call's arguments; the backend's i-entry fills the rest and its
 * wait entry releases what it took, even when completion fails. */
struct comm_request {
    enum comm_kind kind;
    const void *in; /* reduce-scatter/allgather input (allreduce: NULL) */
    void *out;      /* the buffer written (allreduce: the in-place buffer) */
    size_t n;
    enum zt_dtype dtype;
    enum comm_op op;
    MPI_Request mpi_req; /* MPI backend, native algorithm */
    int deferred;        /* MPI backend: 1 = the ring runs in wait */
    void *impl;          /* other backend state (NCCL: a CUDA event) */
};

struct comm_backend_ops {
    const char *name; /* "mpi", "nccl" */
    /* >= 0: usable; < 0: not usable here, with the reason written to why.
     * Local (not collective): comm.c agrees on the answer across ranks. */
    int (*query)(const struct comm_config *cfg, char *why, size_t n);
    zt_status (*init)(struct comm *c, const struct comm_config *cfg);
    void (*fini)(struct comm *c);
    zt_status (*allreduce)(struct comm *c, void *buf, size_t n, enum zt_dtype t, enum comm_op op);
    zt_status (*reduce_scatter)(struct comm *c, const void *in, void *out, size_t n,
                                enum zt_dtype t, enum comm_op op);
    zt_status (*allgather)(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t);
    zt_status (*broadcast)(struct comm *c, void *buf, size_t n, enum zt_dtype t, int root);
    zt_status (*barrier)(struct comm *c);
    /* The i-entries read their arguments from req (filled by comm.c). */
    zt_status (*iallreduce)(struct comm *c, struct comm_request *req);
    zt_status (*ireduce_scatter)(struct comm *c, struct comm_request *req);
    zt_status (*iallgather)(struct comm *c, struct comm_request *req);
    zt_status (*wait)(struct comm *c, struct comm_request *req);
};

extern const struct comm_backend_ops comm_mpi_ops;
#ifdef ZT_HAVE_NCCL
extern const struct comm_backend_ops comm_nccl_ops;
#endif

/* Translates a failed MPI return code into ZT_ERR_COMM with the call's name
 * (the text of `call` up to its first parenthesis) and MPI's error string. */
zt_status comm_mpi_error(int rc, const char *call);

/* The one translation of MPI return codes: evaluates an MPI call and returns
 * ZT_ERR_COMM from the enclosing function when it fails. */
#define COMM_MPI_TRY(call)                                                                         \
    do {                                                                                           \
        int comm_mpi_rc_ = (call);                                                                 \
        if (comm_mpi_rc_ != MPI_SUCCESS)                                                           \
            return comm_mpi_error(comm_mpi_rc_, #call);                                            \
    } while (0)

#endif
