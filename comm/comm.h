/* comm/comm.h — collectives and messages among the ranks of one training run.
 *
 * A `struct comm` is a process group: an ordered set of ranks with its own
 * communicator, backed by one backend chosen at creation ("mpi" on host
 * memory; "nccl" on device memory when built with NCCL). comm_create makes
 * the group of all ranks; comm_split cuts a group into disjoint subgroups
 * (data-parallel, tensor-parallel, ...), each a `struct comm` of its own on
 * its parent's backend. comm_rank and comm_size are the rank within the group
 * and the group's size, and every root and peer argument is such a rank.
 *
 * Every collective is collective over its group only: all ranks of that
 * group call it in the same order with the same sizes, or the run hangs;
 * ranks outside the group take no part, so collectives on disjoint groups
 * may be interleaved freely. Buffers are memory of the kind the config
 * names (comm_config.memory: host memory for "mpi", device memory for
 * "nccl" and for "mpi" with host staging, which copies them through host
 * memory around each call: comm_staged.c).
 *
 * Point-to-point messages (comm_send, comm_recv and their non-blocking
 * forms) pair one sender with one receiver of the same group, with the same
 * count and dtype; messages between one pair arrive in the order they were
 * sent. On "nccl" a rank's messages run one after another in issue order,
 * the non-blocking ones too (comm_nccl.c): order them so that each pair
 * meets.
 *
 * Element counts are per rank-visible buffer as documented per call. Each
 * call adds the bytes this rank sends to a per-kind counter of its comm (the
 * bus model of nccl-tests: allreduce sends 2(N-1)/N of the buffer,
 * reduce-scatter and allgather (N-1)/N of the full buffer, broadcast the
 * buffer on the root, gather the buffer on every rank but the root, send the
 * message; N is the number of ranks of the group, fractions of a byte are
 * dropped, a group of one rank sends nothing; receives count nothing).
 * Non-blocking calls count when issued. Counters are per comm: a split
 * starts its own at zero.
 *
 * Nodes and link classes. Every world rank is on one node, and every rank
 * knows every rank's node (comm_node_of, agreed at comm_create): the ranks
 * that share memory (MPI_COMM_TYPE_SHARED), nodes numbered in the order of
 * their lowest world rank; or, when ZT_SIMULATED_RANKS_PER_NODE=S is set
 * in world rank 0's environment (S >= 1, taken from rank 0 by every rank),
 * world ranks [k*S, (k+1)*S) form node k, so that one machine can play
 * several. Each call's bus bytes B (above) are split by link class, on
 * every rank of the group alike: a collective on a group of N ranks is
 * modelled as the ring of its members in group rank order (edges i -> i+1
 * mod N); of those N edges X join ranks on different nodes, and
 * B * X / N (rounded down) counts as inter-node, the rest as intra-node. A
 * message (send) is inter-node when its peer is on another node. So a
 * group inside one node sends only intra-node bytes, a group of one rank
 * per node only inter-node bytes, and intra + inter is always B.
 *
 * Non-blocking collectives return a request that must be passed to comm_wait
 * exactly once, in the same order on every rank of the group; point-to-point
 * requests must be waited exactly once too, but in any order. Buffers must
 * not be touched until then. There is no progress thread: outstanding
 * requests advance while the caller is inside a comm call, and comm_progress
 * is the call to make between pieces of computation so that they advance
 * then too. Time spent inside comm_wait and blocking calls is added to
 * `wait_seconds`, time inside comm_progress to `progress_seconds`.
 *
 * Reductions over 16-bit floats (ZT_BF16, ZT_F16) add in fp32 per element and
 * round once to nearest even per combining step, on every backend.
 *
 * The "mpi" backend has two algorithms for allreduce, reduce-scatter and
 * allgather: "native" (the MPI library's collective) and "ring" (N-1 steps
 * of point-to-point exchange between neighbours per phase; an allreduce is
 * a reduce-scatter phase and an allgather phase). They agree up to the order
 * of floating point summation; "auto" picks per message size and group size
 * from measured thresholds (comm_mpi.c). Both give every rank the same
 * bytes for the same block, and a blocking and a non-blocking call on the
 * same sizes give the same bits. The "nccl" backend ignores these fields:
 * NCCL picks its own algorithms.
 *
 * The process world beneath every group is MPI's: comm_runtime_init and the
 * comm_world_* calls start it, describe it and agree over it before any
 * `struct comm` exists, so that no other module needs <mpi.h>.
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
    COMM_KIND_SEND,   /* comm_send and comm_isend; receives count nothing */
    COMM_KIND_GATHER, /* comm_gather */
    COMM_KIND_COUNT
};

/* Name of a kind as used in metrics ("allreduce", "reduce_scatter", ...). */
const char *comm_kind_name(enum comm_kind k);

/* The class of link a byte crosses (see the design comment). */
enum comm_link { COMM_LINK_INTRA, COMM_LINK_INTER, COMM_LINK_COUNT };

/* Name of a link class as used in metrics ("intra", "inter"). */
const char *comm_link_name(enum comm_link l);

struct comm_stats {
    uint64_t bytes[COMM_KIND_COUNT]; /* bytes this rank sent, per kind */
    /* The same bytes by link class: link_bytes[INTRA][k] + link_bytes[INTER][k]
     * == bytes[k]. */
    uint64_t link_bytes[COMM_LINK_COUNT][COMM_KIND_COUNT];
    uint64_t calls[COMM_KIND_COUNT];
    double wait_seconds;     /* time blocked in collectives and comm_wait */
    double progress_seconds; /* time in comm_progress (not blocked: not wait) */
};

struct ledger;
struct comm_flight; /* flight.h */

/* Where the buffers passed to a comm live. */
enum comm_memory {
    COMM_MEMORY_HOST, /* host memory (device "cpu"): the "mpi" backend */
    COMM_MEMORY_CUDA  /* CUDA device memory: "nccl", or "mpi" with host staging */
};

/* How the "mpi" backend reaches device memory when it runs on CUDA buffers
 * (comm_staged.c): it copies each call's device buffers through pinned host
 * staging buffers. Every function returns ZT_OK or the error it set
 * (ZT_ERR_DEVICE for the CUDA runtime, ZT_ERR_NOMEM). to_host and
 * to_device copy `bytes` and have finished with both buffers when they
 * return; to_host must see everything the caller's device work wrote to
 * `dev` before the call. alloc_pinned gives host memory of `bytes` > 0
 * bytes that free_pinned releases. Tests pass memcpy and malloc, so that
 * every staged path runs on ordinary host memory. On this path the
 * non-blocking collectives complete inside the call that issues them (their
 * wait has nothing left to do); messages stay non-blocking. */
struct comm_stager {
    zt_status (*to_host)(void *host, const void *dev, size_t bytes);
    zt_status (*to_device)(void *dev, const void *host, size_t bytes);
    zt_status (*alloc_pinned)(size_t bytes, void **out);
    void (*free_pinned)(void *p);
};

/* All fields may be zero/NULL: a zeroed config means "auto" everywhere. */
struct comm_config {
    const char *backend;        /* "auto" (NULL), "mpi" or "nccl" */
    const char *reduce_scatter; /* mpi algorithm: "auto" (NULL), "native" or "ring" */
    const char *allgather;      /* mpi algorithm: "auto" (NULL), "native" or "ring" */
    const char *allreduce;      /* mpi algorithm: "auto" (NULL), "native" or "ring" */
    /* Where the backend's own staging memory (the ring's scratch blocks) is
     * recorded under LEDGER_COMM_BUFFERS; NULL: not recorded. Borrowed: it
     * must outlive the comm. */
    struct ledger *ledger;
    /* Where the buffers live (zero: host). "auto" picks a backend for this
     * memory; naming a backend that works on other memory is ZT_ERR_CONFIG. */
    enum comm_memory memory;
    /* The flight recorder (flight.h) that notes every call of this comm and
     * of its splits; NULL: none. Borrowed: it must outlive the comm. */
    struct comm_flight *flight;
    /* Device memory only: the stream (a cudaStream_t) whose queued kernels
     * write and read the buffers. Each collective waits, on the device, for
     * the work queued there before it was called, so callers need not
     * synchronise that stream first; NULL: the caller has. Splits inherit
     * it. Borrowed. */
    void *device_stream;
    /* The copies of "mpi" on COMM_MEMORY_CUDA buffers; NULL: the CUDA
     * runtime's (cudaMemcpy, cudaMallocHost), in builds with CUDA. Ignored
     * on host memory and by "nccl". Borrowed: it must outlive the comm and
     * its splits. */
    const struct comm_stager *stager;
    /* "auto" on device memory: nonzero when this rank shares its GPU with
     * another rank of its node (worker/device_bind.h's `shared`). Agreed at
     * comm_create: one rank sharing makes every rank take MPI. */
    int ranks_share_gpu;
};

/* What "comm.backend: auto" uses, and why, in one line a run can log. */
struct comm_backend_choice {
    const char *backend; /* "nccl" or "mpi"; static storage */
    /* 1: device buffers are copied through host memory around each
     * collective (MPI on device memory); 0: the backend reads the buffers
     * where they are. */
    int host_staging;
    char reason[192]; /* "nccl: device is cuda, ...", no newline */
};

/* The rule behind "auto", as a pure function: NCCL when the compute device
 * is "cuda", NCCL is built and no rank shares its GPU (NCCL cannot put two
 * ranks of one communicator on one device); otherwise MPI, staging device
 * buffers through host memory when the device is "cuda". `device` is the
 * compute backend chosen ("cpu" or "cuda", never "auto"); on device "cpu"
 * the other two inputs do not matter. comm_create applies it to
 * comm_config.memory, with nccl_built from the build and ranks_share_gpu
 * agreed over the ranks. *out is written only on success.
 * Errors: ZT_ERR_USAGE (device NULL or not "cpu"/"cuda", out NULL). */
zt_status comm_backend_auto(const char *device, int nccl_built, int ranks_share_gpu,
                            struct comm_backend_choice *out);

struct comm;         /* opaque */
struct comm_request; /* opaque; owned by the comm until comm_wait */

/* Creates the group of all ranks (MPI_COMM_WORLD's; the runtime must be
 * initialised; collective over the world). "auto" follows
 * comm_backend_auto for cfg->memory (device "cpu" for host memory, "cuda"
 * for device memory) and the ranks_share_gpu of every rank: NCCL, or MPI,
 * on device memory the staged MPI (comm_staged.c, which naming "mpi" there
 * also gives). The backend must be usable on every rank; where the rule
 * names NCCL and it is not, "auto" takes the staged MPI, as the rule's
 * "otherwise" says. *out is owned by the caller and freed with
 * comm_destroy; on failure *out is NULL.
 * Errors: ZT_ERR_CONFIG (unknown or unusable backend, a backend for other
 * memory, unknown algorithm), ZT_ERR_USAGE (runtime not initialised, unknown
 * memory), ZT_ERR_COMM, ZT_ERR_DEVICE, ZT_ERR_NOMEM. */
zt_status comm_create(const struct comm_config *cfg, struct comm **out);
/* Collective over the parent: cuts it into groups, one per distinct color,
 * like MPI_Comm_split. The ranks of a group are ordered by key, then by
 * their rank in the parent. The new comm uses the parent's backend (a new
 * MPI communicator; for "nccl" a new NCCL communicator on the same device),
 * algorithms and ledger, and starts with zeroed counters. It is independent
 * of the parent afterwards, but must be destroyed before the runtime is
 * finalised. *out is owned by the caller and freed with comm_destroy; on
 * failure *out is NULL and every rank of the parent gets the same status.
 * Errors: ZT_ERR_USAGE (negative color; found before any rank is entered),
 * ZT_ERR_COMM, ZT_ERR_DEVICE, ZT_ERR_NOMEM. */
zt_status comm_split(struct comm *parent, int color, int key, struct comm **out);
/* Frees the communicator and everything it owns (collective over its
 * group). NULL is a no-op. Requests not yet waited on are a caller bug. */
void comm_destroy(struct comm *c);

/* The group for buffers in host memory: c itself when c's buffers are
 * host memory; for a comm on device buffers (NCCL, or MPI with host
 * staging), the same ranks over MPI on host memory, made with it by
 * comm_create and comm_split and destroyed with it. Every small exchange
 * of host values (a loss, a norm, a report's rows) goes through it, so
 * one call site serves every device. */
struct comm *comm_host(struct comm *c);

/* Names the group in the flight recorder's logs and messages ("data",
 * "tensor", ...; comm_create's group is "world", a split's "split" until
 * named). Local; a no-op without a recorder. */
void comm_set_name(struct comm *c, const char *name);

/* This rank's index within the group and the group's number of ranks. */
int comm_rank(const struct comm *c);
int comm_size(const struct comm *c);
/* The chosen backend's name ("mpi", "nccl"); static storage. */
const char *comm_backend_name(const struct comm *c);
/* 1 when the backend works on host memory and copies the caller's device
 * buffers through host staging buffers around each call ("mpi" on
 * COMM_MEMORY_CUDA), so a log can say "mpi (host staging)"; else 0. */
int comm_backend_staged(const struct comm *c);
/* Why that backend, one line without newline for the run's log: the rule's
 * reason under "auto" (comm_backend_auto), "<name>: named by comm.backend"
 * otherwise; a split keeps its parent's. Owned by the comm. */
const char *comm_backend_reason(const struct comm *c);

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
/* in[0..n) from every rank; on `root`, out[0..n*size) receives them in rank
 * order (out is not read or written elsewhere and may be NULL there). Meant
 * for small fixed-size records (shard sizes, memory peaks); in and out must
 * not overlap. */
zt_status comm_gather(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t,
                      int root);
/* Returns once every rank has entered it (and, for "nccl", once this rank's
 * earlier collectives have completed). */
zt_status comm_barrier(struct comm *c);

/* Non-blocking variants; *req is valid until passed to comm_wait and is NULL
 * on failure. There is no progress thread: a native MPI collective advances
 * when MPI is entered; a "ring" one posts its first messages when issued
 * (once the ring requests issued before it on this comm are complete:
 * rings run one after another in issue order) and advances in comm_progress
 * and comm_wait, and in any later call that waits for a ring on this comm. */
zt_status comm_iallreduce(struct comm *c, void *buf, size_t n, enum zt_dtype t, enum comm_op op,
                          struct comm_request **req);
zt_status comm_ireduce_scatter(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t,
                               enum comm_op op, struct comm_request **req);
zt_status comm_iallgather(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t,
                          struct comm_request **req);
/* Point-to-point: sends buf[0..n) to rank `peer` of the group, which
 * receives it with comm_recv or comm_irecv of the same count and dtype.
 * Blocking: returns when buf may be reused (comm_send) or holds the message
 * (comm_recv); a rank that sends to itself must have posted the receive with
 * comm_irecv first. Errors: ZT_ERR_USAGE (peer outside [0, size), NULL
 * buffer, bad dtype), ZT_ERR_UNSUPPORTED, ZT_ERR_COMM. */
zt_status comm_send(struct comm *c, const void *buf, size_t n, enum zt_dtype t, int peer);
zt_status comm_recv(struct comm *c, void *buf, size_t n, enum zt_dtype t, int peer);
/* Non-blocking forms; *req (NULL on failure) is completed by comm_wait. The
 * requests of point-to-point calls may be waited in any order, and in a
 * different order on each rank, unlike those of collectives. */
zt_status comm_isend(struct comm *c, const void *buf, size_t n, enum zt_dtype t, int peer,
                     struct comm_request **req);
zt_status comm_irecv(struct comm *c, void *buf, size_t n, enum zt_dtype t, int peer,
                     struct comm_request **req);

/* Completes and frees a request (freed also when completion fails). A
 * collective's failure may also be reported by the comm_progress or
 * comm_wait that met it first. */
zt_status comm_wait(struct comm *c, struct comm_request *req);
/* Advances this comm's outstanding non-blocking collectives without
 * blocking: a ring request posts its next messages and reduces the chunks
 * that have arrived; a native MPI request gets an MPI_Test (Open MPI
 * advances its collectives only while MPI is entered). Returns at once when
 * nothing is outstanding; a no-op on "nccl", whose collectives run on the
 * device's stream. Not collective: call it as often as suits each rank.
 * Errors: ZT_ERR_COMM. */
zt_status comm_progress(struct comm *c);

/* Agreement on a status: every rank passes its local status and receives
 * the first non-OK one by severity (max exit code, then the later entry of
 * the status list; the lowest rank among equals), so all ranks leave a
 * failed phase together and nobody blocks in a later collective. Returns the
 * agreed status, which is also stored in *agreed. When this rank was OK but
 * another failed, the message becomes "rank R failed: see its message";
 * a failing rank keeps its own message. If the agreement itself fails the
 * result is ZT_ERR_COMM. */
zt_status comm_agree_status(struct comm *c, zt_status local, zt_status *agreed);

/* comm_world_agree's agreement over a comm that holds every rank (the one
 * comm_create made), noted in its flight recorder so that a rank that never
 * arrives is named: most severe status; *print_here set on the lowest rank
 * whose own status was not ZT_OK. Messages are left alone. */
zt_status comm_agree_ranks(struct comm *c, zt_status local, int *print_here);

/* Counters since creation or the last reset; owned by the comm. */
const struct comm_stats *comm_get_stats(const struct comm *c);
void comm_reset_stats(struct comm *c);

/* The node of group rank `rank` (in [0, comm_size)): the index of its node
 * among the world's nodes (see the design comment), the same on every rank. */
int comm_node_of(const struct comm *c, int rank);
/* How many distinct nodes the group's ranks are on (1 for a group inside
 * one node). */
int comm_nodes_spanned(const struct comm *c);

/* ---- the process world (usable before any struct comm exists) ---- */

/* Starts the runtime (MPI_Init; argc and argv may be NULL). Once per process,
 * before anything else here. Errors: ZT_ERR_COMM. */
zt_status comm_runtime_init(int *argc, char ***argv);
/* Stops the runtime (MPI_Finalize); every struct comm must be destroyed. */
void comm_runtime_finalize(void);
/* This process's rank in the world and the world's number of ranks. */
int comm_world_rank(void);
int comm_world_size(void);
/* The number of world ranks on this node (this one included); 1 if the
 * runtime cannot tell. Collective over the world. */
int comm_local_ranks(void);
/* This rank's index among its node's ranks (key: world rank) and their
 * number; 0 and 1 if the runtime cannot tell. Collective over the world. */
void comm_local_place(int *rank, int *size);
/* Agreement over the world, for phases that may run before a comm exists:
 * every rank passes its local status and gets the most severe one any rank
 * had (max exit code, then the later entry of the status list); *print_here
 * is set on the lowest rank whose own status was not ZT_OK, and cleared
 * elsewhere, so that the message is printed once. Messages are left alone.
 * Collective over the world; if the agreement itself fails the result is
 * ZT_ERR_COMM with *print_here set. */
zt_status comm_world_agree(zt_status local, int *print_here);
/* Ends every rank of the job with exit code `code` (MPI_Abort on the world),
 * for a failure that leaves peers blocked in a collective. Does not return. */
_Noreturn void comm_world_abort(int code);

#endif
