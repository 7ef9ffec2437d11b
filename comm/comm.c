/* comm/comm.c — the public face of comm.h: checks, accounting, dispatch.
 *
 * Everything that does not depend on the backend lives here so each backend
 * is only its collectives and messages: argument checks (a bad argument is
 * caught before any rank enters a collective with it), the nccl-tests
 * bus-byte counters, the time spent blocked (and in comm_progress), request
 * allocation, status agreement, the choice of backend and the MPI side of
 * splitting a group.
 *
 * Choosing a backend is itself collective. Under "auto" the rule of
 * comm_backend_auto (comm_choice.c) names the backend from the buffers'
 * memory, the build and whether any rank shares its GPU (agreed with
 * MPI_MAX, so every rank applies the rule to the same inputs). The named
 * backend's query() is then asked on each rank and the answers are
 * combined with MPI_MIN, so a backend is used only if it is usable on
 * every rank; otherwise one rank could pick NCCL while another picks MPI
 * and the first collective would hang. For the same reason init()
 * is followed by an agreement on its status: a rank that failed to
 * initialise makes all ranks fail together. A backend serves one kind of
 * memory (its table entry says which), so the choice also follows where
 * the caller's buffers live; "mpi" has a table for each (on device memory
 * the staged one, comm_staged.c).
 *
 * Splitting is two agreed phases over the parent: the MPI split and the
 * child's struct, then the backend's split (for NCCL itself collective over
 * the parent, so no rank may enter it after another failed the first phase).
 *
 * The table of backends is static const; NCCL joins it from comm/'s CUDA
 * module (zt_cuda_comm.so), loaded only for device memory. The chosen entry is kept in
 * the struct comm, not in a global.
 */
#include "../common/module.h"
#include "comm_impl.h"
#include "flight_impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NCCL comes from the CUDA module (comm_cuda_table), asked only for device
 * memory: see built_backend. */
static const struct comm_backend_ops *const backends[] = {
    &comm_mpi_ops, &comm_staged_ops, /* device memory without NCCL: MPI on host copies */
};
#define N_BACKENDS (sizeof backends / sizeof backends[0])

static const char *const kind_names[COMM_KIND_COUNT] = {
    [COMM_KIND_ALLREDUCE] = "allreduce", [COMM_KIND_REDUCE_SCATTER] = "reduce_scatter",
    [COMM_KIND_ALLGATHER] = "allgather", [COMM_KIND_BROADCAST] = "broadcast",
    [COMM_KIND_SEND] = "send",           [COMM_KIND_GATHER] = "gather",
};

/* What comm_config.memory means, for messages: the buffers' kind and the
 * device that has them. */
static const char *const memory_buffers[] = {
    [COMM_MEMORY_HOST] = "host", [COMM_MEMORY_CUDA] = "device"};
static const char *const memory_device[] = {
    [COMM_MEMORY_HOST] = "cpu", [COMM_MEMORY_CUDA] = "cuda"};
#define N_MEMORY (sizeof memory_device / sizeof memory_device[0])

static const char *const link_names[COMM_LINK_COUNT] = {
    [COMM_LINK_INTRA] = "intra", [COMM_LINK_INTER] = "inter"};

const char *comm_link_name(enum comm_link l)
{
    return (int)l >= 0 && l < COMM_LINK_COUNT ? link_names[l] : "unknown";
}

const char *comm_kind_name(enum comm_kind k)
{
    return (int)k >= 0 && k < COMM_KIND_COUNT ? kind_names[k] : "unknown";
}

/* ---- creation and choice of backend ---- */

static zt_status parse_algo(const char *key, const char *value, enum comm_algo *out)
{
    if (!value || strcmp(value, "auto") == 0)
        *out = COMM_ALGO_AUTO;
    else if (strcmp(value, "native") == 0)
        *out = COMM_ALGO_NATIVE;
    else if (strcmp(value, "ring") == 0)
        *out = COMM_ALGO_RING;
    else
        return zt_error_set(ZT_ERR_CONFIG, "comm.%s: unknown algorithm '%s' (auto, native, ring)",
                            key, value);
    return ZT_OK;
}

/* Agrees on `local` over the comm's MPI communicator; see comm.h. */
static zt_status agree(MPI_Comm mpi, int rank, zt_status local, zt_status *agreed)
{
    if ((int)local < 0 || local >= ZT_STATUS_COUNT)
        local = ZT_ERR_INTERNAL;
    /* Ranked by exit code first, then by position in the status list, so
     * MPI_MAXLOC finds the most severe status and the lowest rank holding it. */
    int mine[2] = {zt_status_exit_code(local) * ZT_STATUS_COUNT + (int)local, rank};
    int best[2];
    int rc = MPI_Allreduce(mine, best, 1, MPI_2INT, MPI_MAXLOC, mpi);
    if (rc != MPI_SUCCESS) {
        *agreed = ZT_ERR_COMM;
        return comm_mpi_error(rc, "MPI_Allreduce(status agreement)");
    }
    *agreed = (zt_status)(best[0] % ZT_STATUS_COUNT);
    if (*agreed != ZT_OK && local == ZT_OK)
        zt_error_set(*agreed, "rank %d failed: see its message", best[1]);
    return *agreed;
}

/* Every backend a configuration may name, built or not, with the memories
 * it has a table for (a bit per enum comm_memory): a name on memory it
 * cannot read is refused for that reason even in a build that lacks it. */
static const struct {
    const char *name;
    unsigned memories;
} known_backends[] = {
    {"mpi", 1u << COMM_MEMORY_HOST | 1u << COMM_MEMORY_CUDA}, /* on CUDA: staged */
    {"nccl", 1u << COMM_MEMORY_CUDA},
};
#define N_KNOWN (sizeof known_backends / sizeof known_backends[0])

/* NCCL's table from the CUDA module, or NULL (no module, or one built
 * without NCCL). */
static const struct comm_backend_ops *nccl_backend(void)
{
    const struct comm_cuda_table *t;
    char why[512];
    return comm_cuda_table(&t, why, sizeof why) < 0 ? NULL : t->nccl;
}

/* The built table of `name` for `memory`, or NULL. */
static const struct comm_backend_ops *built_backend(const char *name, enum comm_memory memory)
{
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (strcmp(backends[i]->name, name) == 0 && backends[i]->memory == memory)
            return backends[i];
    const struct comm_backend_ops *nccl = memory == COMM_MEMORY_CUDA ? nccl_backend() : NULL;
    return nccl && strcmp(nccl->name, name) == 0 ? nccl : NULL;
}

/* Whether `b` is usable on every rank (query() agreed with MPI_MIN); why
 * not on this rank into why. */
static zt_status usable_everywhere(const struct comm_backend_ops *b, const struct comm_config *cfg,
                                   MPI_Comm mpi, int *all, char *why, size_t n)
{
    int here = b->query(cfg, why, n) < 0 ? 0 : 1;
    COMM_MPI_TRY(MPI_Allreduce(&here, all, 1, MPI_INT, MPI_MIN, mpi));
    if (here && !*all)
        snprintf(why, n, "not usable on another rank");
    return ZT_OK;
}

/* comm.backend named: it must have a table for cfg->memory, built, and
 * usable on every rank. */
static zt_status choose_named(const char *want, const struct comm_config *cfg, MPI_Comm mpi,
                              const struct comm_backend_ops **out, char *reason, size_t n)
{
    size_t k = 0;
    while (k < N_KNOWN && strcmp(want, known_backends[k].name) != 0)
        k++;
    if (k == N_KNOWN)
        return zt_error_set(ZT_ERR_CONFIG, "comm.backend: unknown backend '%s' (auto, mpi, nccl)",
                            want);
    if (!(known_backends[k].memories & 1u << cfg->memory)) {
        const enum comm_memory other =
            cfg->memory == COMM_MEMORY_HOST ? COMM_MEMORY_CUDA : COMM_MEMORY_HOST;
        return zt_error_set(ZT_ERR_CONFIG, "comm.backend: %s needs %s buffers, but device is %s",
                            want, memory_buffers[other], memory_device[cfg->memory]);
    }
    const struct comm_backend_ops *b = built_backend(want, cfg->memory);
    if (!b)
        return zt_error_set(ZT_ERR_CONFIG,
                            "comm.backend: %s: not in this build (nccl comes with the module %s)",
                            want, ZT_MODULE_CUDA_COMM);
    char why[256] = "";
    int all = 0;
    ZT_TRY(usable_everywhere(b, cfg, mpi, &all, why, sizeof why));
    if (!all)
        return zt_error_set(ZT_ERR_CONFIG, "comm.backend: %s: not usable: %s", want, why);
    snprintf(reason, n, "%s%s: named by comm.backend", want,
             b->host_staged ? " with host staging" : "");
    *out = b;
    return ZT_OK;
}

/* comm.backend auto: comm_backend_auto's rule on the agreed inputs. Where
 * it names NCCL and NCCL is unusable on some rank (a driver, a device
 * NCCL refuses), the rule's "otherwise" applies: the staged MPI. */
static zt_status choose_auto(const struct comm_config *cfg, MPI_Comm mpi,
                             const struct comm_backend_ops **out, char *reason, size_t n)
{
    int mine = cfg->ranks_share_gpu != 0, any = 0;
    if (cfg->memory == COMM_MEMORY_CUDA) /* the rule reads it on device memory only */
        COMM_MPI_TRY(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, mpi));
    struct comm_backend_choice rule;
    const int nccl_built = cfg->memory == COMM_MEMORY_CUDA && nccl_backend() != NULL;
    ZT_TRY(comm_backend_auto(memory_device[cfg->memory], nccl_built, any, &rule));
    const struct comm_backend_ops *b = built_backend(rule.backend, cfg->memory);
    ZT_ASSERT(b && b->host_staged == rule.host_staging);
    char why[256] = "";
    int all = 0;
    ZT_TRY(usable_everywhere(b, cfg, mpi, &all, why, sizeof why));
    if (all) {
        snprintf(reason, n, "%s", rule.reason);
        *out = b;
        return ZT_OK;
    }
    if (rule.host_staging || cfg->memory != COMM_MEMORY_CUDA)
        return zt_error_set(ZT_ERR_CONFIG, "comm.backend: auto: %s; but it is not usable: %s",
                            rule.reason, why);
    char nccl_why[256];
    snprintf(nccl_why, sizeof nccl_why, "%s", why);
    b = built_backend("mpi", COMM_MEMORY_CUDA);
    ZT_ASSERT(b && b->host_staged);
    ZT_TRY(usable_everywhere(b, cfg, mpi, &all, why, sizeof why));
    if (!all)
        return zt_error_set(ZT_ERR_CONFIG,
                            "comm.backend: auto: no backend for device buffers is usable on every "
                            "rank: nccl: %s; mpi with host staging: %s",
                            nccl_why, why);
    /* the reason is one log line: NCCL's cut to what fits */
    snprintf(reason, n,
             "mpi with host staging: device is cuda, but nccl is not usable on every "
             "rank (%.100s)",
             nccl_why);
    *out = b;
    return ZT_OK;
}

/* Finds the backend to use, agreed over all ranks; see comm_create. */
static zt_status choose_backend(const struct comm_config *cfg, MPI_Comm mpi,
                                const struct comm_backend_ops **out, char *reason, size_t n)
{
    const char *want = cfg->backend ? cfg->backend : "auto";
    if (strcmp(want, "auto") == 0)
        return choose_auto(cfg, mpi, out, reason, n);
    return choose_named(want, cfg, mpi, out, reason, n);
}

/* Everything of comm_create after the communicator exists; on failure the
 * caller frees the communicator and the struct. */
static zt_status setup(struct comm *c, const struct comm_config *cfg)
{
    COMM_MPI_TRY(MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN));
    COMM_MPI_TRY(MPI_Comm_rank(c->mpi, &c->rank));
    COMM_MPI_TRY(MPI_Comm_size(c->mpi, &c->size));
    ZT_TRY(comm_nodes_world(c->mpi, &c->nodes));
    ZT_TRY(choose_backend(cfg, c->mpi, &c->ops, c->backend_reason, sizeof c->backend_reason));
    zt_status st = c->ops->init(c, cfg), all;
    agree(c->mpi, c->rank, st, &all);
    if (all != ZT_OK && st == ZT_OK)
        c->ops->fini(c);
    return all;
}

/* A comm on device buffers gets the same group over MPI on host buffers
 * (comm_host): every rank makes it, so the agreement inside comm_create
 * keeps the ranks together. It has no flight recorder of its own: its
 * calls are the coordinator's small host-side exchanges. */
static zt_status make_host_twin(struct comm *c, const struct comm_config *cfg)
{
    if (c->ops->memory == COMM_MEMORY_HOST)
        return ZT_OK;
    struct comm_config hc = *cfg;
    hc.backend = "mpi";
    hc.memory = COMM_MEMORY_HOST;
    hc.flight = NULL;
    hc.device_stream = NULL;
    hc.stager = NULL;
    return comm_create(&hc, &c->host);
}

zt_status comm_create(const struct comm_config *cfg, struct comm **out)
{
    static const struct comm_config defaults = {0};
    int initialised = 0;
    *out = NULL;
    if (!cfg)
        cfg = &defaults;
    MPI_Initialized(&initialised);
    if (!initialised)
        return zt_error_set(ZT_ERR_USAGE, "comm_create: MPI is not initialised");
    if ((unsigned)cfg->memory >= N_MEMORY)
        return zt_error_set(ZT_ERR_USAGE, "comm_create: unknown memory %d", (int)cfg->memory);
    struct comm *c = calloc(1, sizeof *c);
    if (!c)
        return zt_error_set(ZT_ERR_NOMEM, "comm_create: out of memory");
    c->ledger = cfg->ledger;
    c->flight = cfg->flight;
    zt_status st = parse_algo("reduce_scatter", cfg->reduce_scatter, &c->reduce_scatter_algo);
    if (st == ZT_OK)
        st = parse_algo("allgather", cfg->allgather, &c->allgather_algo);
    if (st == ZT_OK)
        st = parse_algo("allreduce", cfg->allreduce, &c->allreduce_algo);
    if (st != ZT_OK) {
        free(c);
        return st;
    }
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi);
    if (rc != MPI_SUCCESS) {
        free(c);
        return comm_mpi_error(rc, "MPI_Comm_dup(MPI_COMM_WORLD)");
    }
    st = setup(c, cfg);
    if (st != ZT_OK) {
        MPI_Comm_free(&c->mpi);
        comm_nodes_free(&c->nodes);
        free(c);
        return st;
    }
    c->flight_key = 1;
    if (c->flight)
        c->flight_group = flight_group_add(c->flight, c->flight_key, "world", c->size, c->rank);
    st = make_host_twin(c, cfg);
    if (st != ZT_OK) {
        comm_destroy(c);
        return st;
    }
    *out = c;
    return ZT_OK;
}

/* First phase of a split: the child's communicator and struct (on a rank
 * where it fails, *out stays NULL and nothing is held). */
static zt_status split_mpi(struct comm *parent, int color, int key, struct comm **out)
{
    MPI_Comm mpi = MPI_COMM_NULL;
    COMM_MPI_TRY(MPI_Comm_split(parent->mpi, color, key, &mpi));
    struct comm *c = calloc(1, sizeof *c);
    if (!c) {
        MPI_Comm_free(&mpi);
        return zt_error_set(ZT_ERR_NOMEM, "comm_split: out of memory");
    }
    c->mpi = mpi; /* the error handler comes from the parent */
    c->ops = parent->ops;
    memcpy(c->backend_reason, parent->backend_reason, sizeof c->backend_reason);
    c->reduce_scatter_algo = parent->reduce_scatter_algo;
    c->allgather_algo = parent->allgather_algo;
    c->allreduce_algo = parent->allreduce_algo;
    c->ledger = parent->ledger;
    c->flight = parent->flight;
    /* splitmix64 of the parent's key, its split count and the color: every
     * member agrees, and two splits of one parent never share a key */
    uint64_t k =
        (parent->flight_key + parent->splits++ * 0x632be59bd9b4e019ull) * 0x9e3779b97f4a7c15ull +
        (uint64_t)color + 1;
    k = (k ^ (k >> 30)) * 0xbf58476d1ce4e5b9ull;
    k = (k ^ (k >> 27)) * 0x94d049bb133111ebull;
    c->flight_key = (k ^ (k >> 31)) | 2; /* never 0 or the world's 1 */
    int rc = MPI_Comm_rank(mpi, &c->rank);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_size(mpi, &c->size);
    if (rc != MPI_SUCCESS) {
        MPI_Comm_free(&c->mpi);
        free(c);
        return comm_mpi_error(rc, "MPI_Comm_rank/size(split communicator)");
    }
    zt_status st = comm_nodes_split(&parent->nodes, parent->mpi, c->mpi, &c->nodes);
    if (st != ZT_OK) {
        MPI_Comm_free(&c->mpi);
        comm_nodes_free(&c->nodes);
        free(c);
        return st;
    }
    if (c->flight)
        c->flight_group = flight_group_add(c->flight, c->flight_key, "split", c->size, c->rank);
    *out = c;
    return ZT_OK;
}

/* Frees a child whose backend state was never made (or already freed). */
static void free_shell(struct comm *c)
{
    if (!c)
        return;
    MPI_Comm_free(&c->mpi);
    comm_nodes_free(&c->nodes);
    free(c);
}

zt_status comm_split(struct comm *parent, int color, int key, struct comm **out)
{
    struct comm *c = NULL;
    zt_status agreed;
    ZT_ASSERT(parent && out);
    *out = NULL;
    if (color < 0)
        return zt_error_set(ZT_ERR_USAGE, "comm_split: color %d is negative", color);
    zt_status st = split_mpi(parent, color, key, &c);
    agree(parent->mpi, parent->rank, st, &agreed);
    if (agreed != ZT_OK) {
        free_shell(c);
        return agreed;
    }
    st = parent->ops->split(parent, c, color, key);
    agree(parent->mpi, parent->rank, st, &agreed);
    if (agreed != ZT_OK) {
        if (st == ZT_OK)
            c->ops->fini(c);
        free_shell(c);
        return agreed;
    }
    /* the host twin splits alongside (comm_split agrees across the parent) */
    if (parent->host && (st = comm_split(parent->host, color, key, &c->host)) != ZT_OK) {
        comm_destroy(c);
        return st;
    }
    *out = c;
    return ZT_OK;
}

struct comm *comm_host(struct comm *c)
{
    return c->host ? c->host : c;
}

void comm_destroy(struct comm *c)
{
    if (!c)
        return;
    comm_destroy(c->host);
    c->ops->fini(c);
    MPI_Comm_free(&c->mpi);
    comm_nodes_free(&c->nodes);
    free(c);
}

int comm_node_of(const struct comm *c, int rank)
{
    return comm_nodes_node_of(&c->nodes, rank);
}

int comm_nodes_spanned(const struct comm *c)
{
    return comm_nodes_count(&c->nodes);
}

int comm_rank(const struct comm *c)
{
    return c->rank;
}

int comm_size(const struct comm *c)
{
    return c->size;
}

void comm_set_name(struct comm *c, const char *name)
{
    if (c->flight)
        flight_group_name(c->flight, c->flight_group, name);
}

const char *comm_backend_name(const struct comm *c)
{
    return c->ops->name;
}

int comm_backend_staged(const struct comm *c)
{
    return c->ops->host_staged;
}

const char *comm_backend_reason(const struct comm *c)
{
    return c->backend_reason;
}

const struct comm_stats *comm_get_stats(const struct comm *c)
{
    return &c->stats;
}

void comm_reset_stats(struct comm *c)
{
    memset(&c->stats, 0, sizeof c->stats);
}

/* ---- the flight recorder's notes (flight_impl.h) ---- */

/* Opens the entry of a collective of kind k on c; 0 when c records
 * nothing. `n` elements of t are the call's count. */
static uint64_t note_call(struct comm *c, enum comm_kind k, int peer, size_t n, enum zt_dtype t,
                          int blocking)
{
    if (!c->flight)
        return 0;
    return flight_begin(c->flight, c->flight_group, comm_kind_name(k), FLIGHT_COLLECTIVE, peer,
                        (uint64_t)n * zt_dtype_size(t), t, blocking);
}

/* The same for a call that is not one of the counted kinds ("barrier",
 * "agree") or a message (FLIGHT_SEND, FLIGHT_RECV, op "send" or "recv"). */
static uint64_t note_other(struct comm *c, const char *op, enum flight_class cls, int peer,
                           size_t n, enum zt_dtype t, int blocking)
{
    if (!c->flight)
        return 0;
    return flight_begin(c->flight, c->flight_group, op, cls, peer, (uint64_t)n * zt_dtype_size(t),
                        t, blocking);
}

/* Closes it with the call's status and passes the status through. */
static zt_status note_done(struct comm *c, uint64_t id, zt_status st)
{
    if (id)
        flight_end(c->flight, id, st);
    return st;
}

zt_status comm_agree_status(struct comm *c, zt_status local, zt_status *agreed)
{
    ZT_ASSERT(c && agreed);
    uint64_t id = note_other(c, "agree", FLIGHT_COLLECTIVE, -1, 2, ZT_I32, 1);
    zt_status st = agree(c->mpi, c->rank, local, agreed);
    note_done(c, id, *agreed == ZT_ERR_COMM ? ZT_ERR_COMM : ZT_OK);
    return st;
}

zt_status comm_agree_ranks(struct comm *c, zt_status local, int *print_here)
{
    ZT_ASSERT(c && print_here);
    uint64_t id = note_other(c, "agree", FLIGHT_COLLECTIVE, -1, 2, ZT_I32, 1);
    zt_status st = comm_agree_over(c->mpi, c->rank, local, print_here);
    note_done(c, id, ZT_OK);
    return st;
}

/* ---- argument checks and accounting ---- */

static zt_status check_type(const char *where, enum zt_dtype t)
{
    if ((int)t < 0 || zt_dtype_size(t) == 0)
        return zt_error_set(ZT_ERR_USAGE, "%s: invalid dtype %d", where, (int)t);
    return ZT_OK;
}

static zt_status check_op(const char *where, enum comm_op op)
{
    if (op != COMM_OP_SUM && op != COMM_OP_MAX && op != COMM_OP_MIN)
        return zt_error_set(ZT_ERR_USAGE, "%s: invalid op %d", where, (int)op);
    return ZT_OK;
}

static zt_status check_buffer(const char *where, const char *name, const void *p, size_t n)
{
    if (n > 0 && !p)
        return zt_error_set(ZT_ERR_USAGE, "%s: %s is NULL with %zu elements", where, name, n);
    return ZT_OK;
}

/* Whether byte ranges [a, a+na) and [b, b+nb) share a byte. */
static int overlap(const void *a, size_t na, const void *b, size_t nb)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return na > 0 && nb > 0 && x < y + nb && y < x + na;
}

static zt_status check_reduce_scatter(const struct comm *c, const char *where, const void *in,
                                      const void *out, size_t n, enum zt_dtype t, enum comm_op op)
{
    ZT_TRY(check_type(where, t));
    ZT_TRY(check_op(where, op));
    ZT_TRY(check_buffer(where, "in", in, n));
    ZT_TRY(check_buffer(where, "out", out, n));
    size_t es = zt_dtype_size(t);
    if (overlap(in, n * (size_t)c->size * es, out, n * es))
        return zt_error_set(ZT_ERR_USAGE, "%s: in and out overlap", where);
    return ZT_OK;
}

static zt_status check_allgather(const struct comm *c, const char *where, const void *in,
                                 const void *out, size_t n, enum zt_dtype t)
{
    ZT_TRY(check_type(where, t));
    ZT_TRY(check_buffer(where, "in", in, n));
    ZT_TRY(check_buffer(where, "out", out, n));
    size_t es = zt_dtype_size(t);
    if (n == 0)
        return ZT_OK;
    const char *own = (const char *)out + (size_t)c->rank * n * es;
    if (in != (const void *)own && overlap(in, n * es, out, n * (size_t)c->size * es))
        return zt_error_set(ZT_ERR_USAGE, "%s: in overlaps out other than at out + rank*n", where);
    return ZT_OK;
}

static zt_status check_rank(const struct comm *c, const char *where, const char *what, int r)
{
    if (r < 0 || r >= c->size)
        return zt_error_set(ZT_ERR_USAGE, "%s: %s %d outside [0, %d)", where, what, r, c->size);
    return ZT_OK;
}

/* Bytes this rank puts on the bus for one call, after nccl-tests (sends:
 * the message). */
static uint64_t bus_bytes(const struct comm *c, enum comm_kind kind, size_t n, enum zt_dtype t,
                          int is_root)
{
    uint64_t ranks = (uint64_t)c->size, buf = (uint64_t)n * zt_dtype_size(t);
    switch (kind) {
    case COMM_KIND_ALLREDUCE:
        return 2 * (ranks - 1) * buf / ranks;
    case COMM_KIND_REDUCE_SCATTER:
    case COMM_KIND_ALLGATHER:
        return (ranks - 1) * buf; /* (N-1)/N of the full buffer of N*n elements */
    case COMM_KIND_BROADCAST:
        return is_root ? buf : 0;
    case COMM_KIND_GATHER:
        return is_root ? 0 : buf;
    case COMM_KIND_SEND:
        return buf;
    case COMM_KIND_COUNT:
        break;
    }
    return 0;
}

/* Counts one call; peer: the other rank of a message, -1 for a
 * collective (its link split, comm_nodes.c). */
static void account(struct comm *c, enum comm_kind kind, size_t n, enum zt_dtype t, int is_root,
                    int peer)
{
    const uint64_t bytes = bus_bytes(c, kind, n, t, is_root);
    c->stats.bytes[kind] += bytes;
    c->stats.calls[kind]++;
    const uint64_t inter = comm_nodes_inter_bytes(&c->nodes, bytes, peer);
    c->stats.link_bytes[COMM_LINK_INTER][kind] += inter;
    c->stats.link_bytes[COMM_LINK_INTRA][kind] += bytes - inter;
}

/* Adds the time since t0 to wait_seconds and passes the status through. */
static zt_status waited(struct comm *c, double t0, zt_status st)
{
    c->stats.wait_seconds += MPI_Wtime() - t0;
    return st;
}

/* ---- blocking collectives ---- */

zt_status comm_allreduce(struct comm *c, void *buf, size_t n, enum zt_dtype t, enum comm_op op)
{
    ZT_TRY(check_type("comm_allreduce", t));
    ZT_TRY(check_op("comm_allreduce", op));
    ZT_TRY(check_buffer("comm_allreduce", "buf", buf, n));
    uint64_t id = note_call(c, COMM_KIND_ALLREDUCE, -1, n, t, 1);
    double t0 = MPI_Wtime();
    ZT_TRY(waited(c, t0, note_done(c, id, c->ops->allreduce(c, buf, n, t, op))));
    account(c, COMM_KIND_ALLREDUCE, n, t, 0, -1);
    return ZT_OK;
}

zt_status comm_reduce_scatter(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t,
                              enum comm_op op)
{
    ZT_TRY(check_reduce_scatter(c, "comm_reduce_scatter", in, out, n, t, op));
    uint64_t id = note_call(c, COMM_KIND_REDUCE_SCATTER, -1, n, t, 1);
    double t0 = MPI_Wtime();
    ZT_TRY(waited(c, t0, note_done(c, id, c->ops->reduce_scatter(c, in, out, n, t, op))));
    account(c, COMM_KIND_REDUCE_SCATTER, n, t, 0, -1);
    return ZT_OK;
}

zt_status comm_allgather(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t)
{
    ZT_TRY(check_allgather(c, "comm_allgather", in, out, n, t));
    uint64_t id = note_call(c, COMM_KIND_ALLGATHER, -1, n, t, 1);
    double t0 = MPI_Wtime();
    ZT_TRY(waited(c, t0, note_done(c, id, c->ops->allgather(c, in, out, n, t))));
    account(c, COMM_KIND_ALLGATHER, n, t, 0, -1);
    return ZT_OK;
}

zt_status comm_broadcast(struct comm *c, void *buf, size_t n, enum zt_dtype t, int root)
{
    ZT_TRY(check_type("comm_broadcast", t));
    ZT_TRY(check_buffer("comm_broadcast", "buf", buf, n));
    ZT_TRY(check_rank(c, "comm_broadcast", "root", root));
    uint64_t id = note_call(c, COMM_KIND_BROADCAST, root, n, t, 1);
    double t0 = MPI_Wtime();
    ZT_TRY(waited(c, t0, note_done(c, id, c->ops->broadcast(c, buf, n, t, root))));
    account(c, COMM_KIND_BROADCAST, n, t, root == c->rank, -1);
    return ZT_OK;
}

zt_status comm_gather(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t,
                      int root)
{
    ZT_TRY(check_type("comm_gather", t));
    ZT_TRY(check_rank(c, "comm_gather", "root", root));
    ZT_TRY(check_buffer("comm_gather", "in", in, n));
    const int is_root = root == c->rank;
    if (is_root) {
        size_t es = zt_dtype_size(t);
        ZT_TRY(check_buffer("comm_gather", "out", out, n));
        if (overlap(in, n * es, out, n * (size_t)c->size * es))
            return zt_error_set(ZT_ERR_USAGE, "comm_gather: in and out overlap");
    }
    uint64_t id = note_call(c, COMM_KIND_GATHER, root, n, t, 1);
    double t0 = MPI_Wtime();
    ZT_TRY(
        waited(c, t0, note_done(c, id, c->ops->gather(c, in, is_root ? out : NULL, n, t, root))));
    account(c, COMM_KIND_GATHER, n, t, is_root, -1);
    return ZT_OK;
}

zt_status comm_barrier(struct comm *c)
{
    uint64_t id = note_other(c, "barrier", FLIGHT_COLLECTIVE, -1, 0, ZT_U8, 1);
    double t0 = MPI_Wtime();
    return waited(c, t0, note_done(c, id, c->ops->barrier(c)));
}

/* ---- point-to-point ---- */

static zt_status check_message(const struct comm *c, const char *where, const void *buf, size_t n,
                               enum zt_dtype t, int peer)
{
    ZT_TRY(check_type(where, t));
    ZT_TRY(check_buffer(where, "buf", buf, n));
    ZT_TRY(check_rank(c, where, "peer", peer));
    return ZT_OK;
}

zt_status comm_send(struct comm *c, const void *buf, size_t n, enum zt_dtype t, int peer)
{
    ZT_TRY(check_message(c, "comm_send", buf, n, t, peer));
    uint64_t id = note_other(c, "send", FLIGHT_SEND, peer, n, t, 1);
    double t0 = MPI_Wtime();
    ZT_TRY(waited(c, t0, note_done(c, id, c->ops->send(c, buf, n, t, peer))));
    account(c, COMM_KIND_SEND, n, t, 0, peer);
    return ZT_OK;
}

zt_status comm_recv(struct comm *c, void *buf, size_t n, enum zt_dtype t, int peer)
{
    ZT_TRY(check_message(c, "comm_recv", buf, n, t, peer));
    uint64_t id = note_other(c, "recv", FLIGHT_RECV, peer, n, t, 1);
    double t0 = MPI_Wtime();
    return waited(c, t0, note_done(c, id, c->ops->recv(c, buf, n, t, peer)));
}

/* ---- non-blocking calls ---- */

static zt_status request_new(enum comm_kind kind, const void *in, void *out, size_t n,
                             enum zt_dtype t, enum comm_op op, struct comm_request **req)
{
    struct comm_request *r = calloc(1, sizeof *r);
    if (!r)
        return zt_error_set(ZT_ERR_NOMEM, "comm: out of memory for a request");
    r->kind = kind;
    r->in = in;
    r->out = out;
    r->n = n;
    r->dtype = t;
    r->op = op;
    r->mpi_req = MPI_REQUEST_NULL;
    r->peer = -1;
    *req = r;
    return ZT_OK;
}

/* Closes a request's entry when issuing it failed; passes st through. */
static zt_status note_failed(struct comm *c, uint64_t id, zt_status st)
{
    return st == ZT_OK ? st : note_done(c, id, st);
}

/* Issues a filled request through `issue`, counting it when `counted`;
 * frees it when that fails. */
static zt_status request_issue(struct comm *c,
                               zt_status (*issue)(struct comm *, struct comm_request *),
                               struct comm_request *r, int counted, struct comm_request **req)
{
    const int recv = issue == c->ops->irecv;
    r->flight_id = r->kind != COMM_KIND_SEND
                       ? note_call(c, r->kind, r->peer, r->n, r->dtype, 0)
                       : note_other(c, recv ? "recv" : "send", recv ? FLIGHT_RECV : FLIGHT_SEND,
                                    r->peer, r->n, r->dtype, 0);
    zt_status st = note_failed(c, r->flight_id, issue(c, r));
    if (st != ZT_OK) {
        free(r);
        return st;
    }
    if (counted)
        account(c, r->kind, r->n, r->dtype, 0, r->kind == COMM_KIND_SEND ? r->peer : -1);
    *req = r;
    return ZT_OK;
}

zt_status comm_iallreduce(struct comm *c, void *buf, size_t n, enum zt_dtype t, enum comm_op op,
                          struct comm_request **req)
{
    struct comm_request *r = NULL;
    *req = NULL;
    ZT_TRY(check_type("comm_iallreduce", t));
    ZT_TRY(check_op("comm_iallreduce", op));
    ZT_TRY(check_buffer("comm_iallreduce", "buf", buf, n));
    ZT_TRY(request_new(COMM_KIND_ALLREDUCE, NULL, buf, n, t, op, &r));
    ZT_TRY(request_issue(c, c->ops->iallreduce, r, 1, req));
    return ZT_OK;
}

zt_status comm_ireduce_scatter(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t,
                               enum comm_op op, struct comm_request **req)
{
    struct comm_request *r = NULL;
    *req = NULL;
    ZT_TRY(check_reduce_scatter(c, "comm_ireduce_scatter", in, out, n, t, op));
    ZT_TRY(request_new(COMM_KIND_REDUCE_SCATTER, in, out, n, t, op, &r));
    ZT_TRY(request_issue(c, c->ops->ireduce_scatter, r, 1, req));
    return ZT_OK;
}

zt_status comm_iallgather(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t,
                          struct comm_request **req)
{
    struct comm_request *r = NULL;
    *req = NULL;
    ZT_TRY(check_allgather(c, "comm_iallgather", in, out, n, t));
    ZT_TRY(request_new(COMM_KIND_ALLGATHER, in, out, n, t, COMM_OP_SUM, &r));
    ZT_TRY(request_issue(c, c->ops->iallgather, r, 1, req));
    return ZT_OK;
}

zt_status comm_isend(struct comm *c, const void *buf, size_t n, enum zt_dtype t, int peer,
                     struct comm_request **req)
{
    struct comm_request *r = NULL;
    *req = NULL;
    ZT_TRY(check_message(c, "comm_isend", buf, n, t, peer));
    ZT_TRY(request_new(COMM_KIND_SEND, buf, NULL, n, t, COMM_OP_SUM, &r));
    r->peer = peer;
    ZT_TRY(request_issue(c, c->ops->isend, r, 1, req));
    return ZT_OK;
}

zt_status comm_irecv(struct comm *c, void *buf, size_t n, enum zt_dtype t, int peer,
                     struct comm_request **req)
{
    struct comm_request *r = NULL;
    *req = NULL;
    ZT_TRY(check_message(c, "comm_irecv", buf, n, t, peer));
    ZT_TRY(request_new(COMM_KIND_SEND, NULL, buf, n, t, COMM_OP_SUM, &r));
    r->peer = peer;
    ZT_TRY(request_issue(c, c->ops->irecv, r, 0, req));
    return ZT_OK;
}

zt_status comm_wait(struct comm *c, struct comm_request *req)
{
    if (!req)
        return zt_error_set(ZT_ERR_USAGE, "comm_wait: NULL request");
    if (req->flight_id)
        flight_wait(c->flight, req->flight_id);
    double t0 = MPI_Wtime();
    zt_status st = note_done(c, req->flight_id, c->ops->wait(c, req));
    free(req);
    ZT_TRY(waited(c, t0, st));
    return ZT_OK;
}

zt_status comm_progress(struct comm *c)
{
    if (!c->ops->advance)
        return ZT_OK;
    double t0 = MPI_Wtime();
    zt_status st = c->ops->advance(c);
    c->stats.progress_seconds += MPI_Wtime() - t0;
    ZT_TRY(st);
    return ZT_OK;
}
