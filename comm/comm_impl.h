/* comm/comm_impl.h — the backend table behind comm.h; for comm/ only.
 *
 * A backend is a `struct comm_backend_ops` of function pointers, in the
 * manner of ggml's backend interface and Open MPI's coll components: query()
 * says whether it can run here (and why not), init() fills the backend state
 * of a `struct comm`, and each collective is one entry. comm.c owns
 * everything the backends share: argument checks, the byte counters and
 * wait-time accounting, the request allocation, status agreement and the
 * choice of backend. Every entry except query, advance and the
 * point-to-point ones is collective over the comm's group (split: over the
 * parent's).
 *
 * The MPI communicator `mpi` (with MPI_ERRORS_RETURN) is made by comm.c
 * before the backend is set up: for comm_create a dup of MPI_COMM_WORLD,
 * for comm_split an MPI_Comm_split of the parent's. Choosing a backend needs
 * it (every rank must pick the same backend) and every backend needs it too:
 * the MPI backend as its communicator, the NCCL backend to find local ranks,
 * to broadcast its unique id and for barriers.
 *
 * Entries receive arguments already checked by comm.c: valid dtype and op,
 * non-NULL buffers, in-range root and peer, no forbidden overlap. A backend may still
 * refuse what it cannot do (ZT_ERR_UNSUPPORTED) and reports library failures
 * as ZT_ERR_COMM (or ZT_ERR_DEVICE for the CUDA runtime).
 *
 * The process world (comm_runtime_*, comm_world_*) needs no struct comm and
 * no backend; it lives in comm_world.c.
 */
#ifndef ZT_COMM_IMPL_H
#define ZT_COMM_IMPL_H

#include <mpi.h>

#include "comm.h"
#include "mpi_error.h"
#include "nodes.h"

struct ledger;

/* Algorithm for the collectives that have two in the MPI backend. */
enum comm_algo { COMM_ALGO_AUTO, COMM_ALGO_NATIVE, COMM_ALGO_RING };

struct comm {
    const struct comm_backend_ops *ops;
    void *impl;     /* backend state, owned by the backend (init/fini) */
    MPI_Comm mpi;   /* the group's communicator, MPI_ERRORS_RETURN; owned by comm.c */
    int rank, size; /* within the group */
    enum comm_algo reduce_scatter_algo, allgather_algo, allreduce_algo;
    struct ledger *ledger; /* borrowed, may be NULL */
    struct comm_stats stats;
    /* The flight recorder every call is noted in (borrowed, may be NULL),
     * this group's index in it and its key there (the same on every
     * member: world 1, a split mixed from the parent's key, the number of
     * splits the parent made before and the color). */
    struct comm_flight *flight;
    int flight_group;
    uint64_t flight_key;
    uint64_t splits;          /* comm_split calls on it so far (the same on every member) */
    struct comm_nodes nodes;  /* each member's node (nodes.h), owned */
    char backend_reason[192]; /* comm_backend_reason's line */
    /* The same group over MPI on host memory, for the small host-side
     * exchanges of a comm whose buffers are device memory (comm_host);
     * NULL when this comm's buffers are host memory. Owned. */
    struct comm *host;
};

/* One outstanding non-blocking call. comm.c allocates it zeroed and fills
 * the call's arguments; the backend's i-entry fills the rest and its wait
 * entry releases what it took (and unlinks it), even when completion fails. */
struct comm_request {
    enum comm_kind kind; /* COMM_KIND_SEND for both point-to-point forms */
    const void *in;      /* reduce-scatter/allgather input, isend buffer (else NULL) */
    void *out;           /* the buffer written (allreduce: in place; irecv: the message) */
    size_t n;
    enum zt_dtype dtype;
    enum comm_op op;
    int peer;            /* isend/irecv: the other rank */
    MPI_Request mpi_req; /* MPI backend, native algorithm */
    /* MPI backend: its list of outstanding requests, in issue order. */
    struct comm_request *prev, *next;
    void *impl;         /* other backend state (MPI: the ring's; NCCL: a CUDA event) */
    uint64_t flight_id; /* its entry in the comm's flight recorder; 0: none */
};

struct comm_backend_ops {
    const char *name;        /* "mpi", "nccl" */
    enum comm_memory memory; /* the buffers it works on */
    /* 1: it copies those buffers through host memory around each call and
     * runs on the copies (comm_staged.c; comm_backend_staged). */
    int host_staged;
    /* >= 0: usable; < 0: not usable here, with the reason written to why.
     * Local (not collective): comm.c agrees on the answer across ranks. */
    int (*query)(const struct comm_config *cfg, char *why, size_t n);
    zt_status (*init)(struct comm *c, const struct comm_config *cfg);
    void (*fini)(struct comm *c);
    /* Sets up the backend state of `child`, whose mpi, rank and size comm.c
     * has filled from the split of the parent's communicator; collective over
     * the parent. */
    zt_status (*split)(struct comm *parent, struct comm *child, int color, int key);
    zt_status (*allreduce)(struct comm *c, void *buf, size_t n, enum zt_dtype t, enum comm_op op);
    zt_status (*reduce_scatter)(struct comm *c, const void *in, void *out, size_t n,
                                enum zt_dtype t, enum comm_op op);
    zt_status (*allgather)(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t);
    zt_status (*broadcast)(struct comm *c, void *buf, size_t n, enum zt_dtype t, int root);
    zt_status (*gather)(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t,
                        int root);
    zt_status (*barrier)(struct comm *c);
    /* Point-to-point: only this rank and `peer` take part. */
    zt_status (*send)(struct comm *c, const void *buf, size_t n, enum zt_dtype t, int peer);
    zt_status (*recv)(struct comm *c, void *buf, size_t n, enum zt_dtype t, int peer);
    /* The i-entries read their arguments from req (filled by comm.c). */
    zt_status (*iallreduce)(struct comm *c, struct comm_request *req);
    zt_status (*ireduce_scatter)(struct comm *c, struct comm_request *req);
    zt_status (*iallgather)(struct comm *c, struct comm_request *req);
    zt_status (*isend)(struct comm *c, struct comm_request *req); /* req->in, n, dtype, peer */
    zt_status (*irecv)(struct comm *c, struct comm_request *req); /* req->out, n, dtype, peer */
    zt_status (*wait)(struct comm *c, struct comm_request *req);
    /* Advances outstanding requests without blocking; local. NULL: nothing
     * to do (the backend's requests advance by themselves). */
    zt_status (*advance)(struct comm *c);
};

extern const struct comm_backend_ops comm_mpi_ops;
/* "mpi" on CUDA device memory: comm_mpi_ops on pinned host copies of the
 * buffers, made by comm_config.stager (comm_staged.c). */
extern const struct comm_backend_ops comm_staged_ops;

/* What comm/'s CUDA module (zt_cuda_comm.so, common/module.h) gives: built
 * from comm_cuda_stager.c and comm_nccl.c, so that only a run on device
 * memory loads the CUDA runtime and NCCL. */
struct comm_cuda_table {
    size_t size; /* sizeof(struct comm_cuda_table) where the module was built */
    /* The staged backend's copies when the config names none: the CUDA
     * runtime's. */
    const struct comm_stager *stager;
    /* >= 0 when the CUDA runtime sees a device (what both the staged
     * backend's copies and NCCL need); < 0 with the reason. Local. */
    int (*device_query)(char *why, size_t n);
    const struct comm_backend_ops *nccl; /* NULL: the module was built without NCCL */
};
/* In the module (comm_cuda_stager.c). */
extern const struct comm_cuda_table zt_cuda_comm_table;
/* The module's table, loaded on first use: >= 0, or -1 with why (missing,
 * not loading, built from other sources). Local. (comm_cuda_module.c) */
int comm_cuda_table(const struct comm_cuda_table **out, char *why, size_t n);
/* Inside the module only: the pieces of its table. */
extern const struct comm_backend_ops comm_nccl_ops;
extern const struct comm_stager comm_cuda_stager;
int comm_cuda_device_query(char *why, size_t n);

/* The agreement of comm_world_agree over any communicator of every rank
 * (comm_world.c): most severe status, *print_here on the lowest rank that
 * failed. */
zt_status comm_agree_over(MPI_Comm mpi, int rank, zt_status local, int *print_here);

#endif
