/* comm/comm_mpi.c — the MPI backend: collectives on host memory.
 *
 * Native dtypes map to MPI's predefined types and ops. bf16 and f16 have no
 * MPI type, so they travel as MPI_UINT16_T and reduce through user-defined
 * ops that add (or compare) in fp32 per element and round back to nearest
 * even (common/half.h); one op per (format, operation) is created at init
 * and freed at fini.
 *
 * Reduce-scatter and allgather each have two algorithms:
 *   native  MPI_Reduce_scatter_block / MPI_Allgather (and their I-forms);
 *   ring    N-1 steps of point-to-point exchange with the neighbours
 *           rank+1 (send) and rank-1 (receive).
 * Open MPI 4.1's MPI_Reduce_scatter_block over shared memory reaches a
 * half to a sixth of the ring's bandwidth from 64 KiB up, and its
 * MPI_Allgather loses to the ring at 4 ranks from 256 KiB; "auto" picks per
 * size from the measured table `auto_ring_from` below.
 *
 * Ring reduce-scatter. At step s (0 <= s < N-1) rank r sends the partial sum
 * of block (r-s-1) mod N to r+1 and receives the partial sum of block
 * (r-s-2) mod N from r-1, then adds its own contribution to it; after the
 * last step it holds block r summed over all ranks. Each block's sum is
 * therefore formed once, along one chain of ranks, and every element of the
 * result is the same whichever rank asks. The first step sends straight
 * from `in` and the last receives straight into `out`.
 *
 * The ring runs over groups of RING_GROUP chunks of RING_CHUNK_BYTES: per
 * step all chunk exchanges of a group are posted (MPI_Irecv/MPI_Isend), then
 * each chunk is added into as soon as it has arrived. Against one
 * MPI_Sendrecv per chunk this lets a neighbour copy the next chunks while
 * this rank reduces the current one, which measured 10-25% faster; a chunk
 * that fits in L2 is still cached when it is added to. Between the first
 * and the last step the partial sums need two slots of a group (one being
 * sent while the other is received), so the scratch is bounded by
 * 2 * RING_GROUP * RING_CHUNK_BYTES however large the buffer, and two
 * ranks need none. It is a growing buffer kept in the backend state (the
 * collectives repeat every step with the same sizes, so allocating per call
 * would only add page faults), recorded in the ledger when one is given.
 *
 * Ring allgather. At step s rank r forwards block (r-s) mod N to r+1 and
 * receives block (r-s-1) mod N from r-1, directly into `out`; the first step
 * sends from `in`, so copying the own block into place overlaps it. Blocks
 * are moved, never combined: every rank ends with the same bytes.
 *
 * Non-blocking forms. Native algorithms use MPI_Iallreduce /
 * MPI_Ireduce_scatter_block / MPI_Iallgather. A ring request is only
 * recorded when issued and runs entirely inside comm_wait: there is no
 * progress thread, and Open MPI's own non-blocking collectives also advance
 * only while MPI is entered, so a ring driven from the caller would gain
 * nothing. "auto" applies the same table to both forms so that a blocking
 * and a non-blocking call on the same sizes give the same bits.
 *
 * Point-to-point messages are MPI_Send / MPI_Recv and their I-forms under a
 * tag of their own, so a message still in flight never matches a ring's
 * receive on the same communicator. Gather is MPI_Gather. A split group gets
 * a state of its own (its 16-bit ops and ring scratch), made as at init.
 *
 * Every MPI call goes through COMM_MPI_TRY on a communicator with
 * MPI_ERRORS_RETURN (set by comm.c). After a failure inside a ring, requests
 * still posted are abandoned with the communicator (comm.h: a ZT_ERR_COMM
 * ends the run).
 */
#include "comm_impl.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/half.h"
#include "../common/ledger.h"

/* Ring message size and messages in flight per step, tuned with
 * scripts/bench/comm_bench.c at 1-64 MB, 2 and 4 ranks: 64 KiB chunks lost
 * up to a third of the bandwidth; 256 KiB to 1 MiB with 4 to 64 in flight
 * were within the machine's noise (+-15%), 512 KiB x 4 ahead in most paired
 * runs. A chunk and the own block's chunk fit together in the 2 MiB L2. */
#define RING_CHUNK_BYTES ((size_t)512 * 1024)
#define RING_GROUP       4
#define RING_TAG         0x7a72
#define P2P_TAG          0x7a73

/* "auto": full-buffer bytes (N * n * element size) from which the ring is
 * used, for two ranks and for more. Measured with comm_bench (busbw in GB/s,
 * float32, medians of 3 runs) on a 2-core AMD EPYC VM shared with other
 * jobs (runs differ by up to 2x above 4 MiB), Open MPI 4.1.4, btl vader
 * with CMA single copy; 4 ranks oversubscribe the 2 cores.
 *
 *   ring / native                 4 KiB   64 KiB  1 MiB   4 MiB   64 MiB
 *   reduce-scatter, 2 ranks      3.1/2.5 5.9/2.9 6.4/2.6 9.0/1.5 1.4/0.4
 *   reduce-scatter, 4 ranks      .17/.21 .96/.58 1.9/.88 1.1/.63 .90/.37
 *   allgather, 2 ranks           2.1/2.8 5.1/5.0 8.1/8.4 7.9/8.0 1.1/1.4
 *   allgather, 4 ranks           .20/.23 .95/1.2 3.7/3.5 2.8/1.0 .71/1.3
 *
 * Reduce-scatter: below 4 KiB the two are equal within noise at 2 ranks; at
 * 4 ranks the lead below 64 KiB changes from run to run. Allgather at 2
 * ranks is one exchange either way and equal within noise at every size, so
 * native is kept; at 4 ranks native leads at most sizes up to 128 KiB and
 * the ring from 256 KiB to 16 MiB (above, the runs disagree).
 */
static const size_t auto_ring_from[COMM_KIND_COUNT][2] = {
    [COMM_KIND_REDUCE_SCATTER] = {(size_t)4 << 10, (size_t)64 << 10},
    [COMM_KIND_ALLGATHER] = {SIZE_MAX, (size_t)256 << 10},
};

enum half_format { HALF_BF16, HALF_F16, HALF_COUNT };
#define N_OPS 3 /* COMM_OP_SUM, COMM_OP_MAX, COMM_OP_MIN */

struct mpi_state {
    MPI_Op half_ops[HALF_COUNT][N_OPS];
    unsigned char *scratch; /* ring reduce-scatter partial sums, N > 2 */
    size_t scratch_bytes;
};

/* ---- 16-bit reductions (in fp32, rounded to nearest even) ---- */

static float sum(float a, float b)
{
    return a + b;
}

static float larger(float a, float b)
{
    return a > b ? a : b;
}

static float smaller(float a, float b)
{
    return a < b ? a : b;
}

/* inout[i] = in[i] (op) inout[i], as MPI_User_function wants. */
#define HALF_REDUCER(name, to_f32, from_f32, combine)                                              \
    static void name(void *in, void *inout, int *len, MPI_Datatype *type)                          \
    {                                                                                              \
        const uint16_t *a = in;                                                                    \
        uint16_t *b = inout;                                                                       \
        (void)type;                                                                                \
        for (int i = 0; i < *len; i++)                                                             \
            b[i] = from_f32(combine(to_f32(a[i]), to_f32(b[i])));                                  \
    }

HALF_REDUCER(bf16_sum, zt_bf16_to_f32, zt_f32_to_bf16, sum)
HALF_REDUCER(bf16_max, zt_bf16_to_f32, zt_f32_to_bf16, larger)
HALF_REDUCER(bf16_min, zt_bf16_to_f32, zt_f32_to_bf16, smaller)
HALF_REDUCER(f16_sum, zt_f16_to_f32, zt_f32_to_f16, sum)
HALF_REDUCER(f16_max, zt_f16_to_f32, zt_f32_to_f16, larger)
HALF_REDUCER(f16_min, zt_f16_to_f32, zt_f32_to_f16, smaller)

static MPI_User_function *const half_reducers[HALF_COUNT][N_OPS] = {
    {bf16_sum, bf16_max, bf16_min},
    {f16_sum, f16_max, f16_min},
};

/* ---- types, ops and the state ---- */

static struct mpi_state *state(const struct comm *c)
{
    return c->impl;
}

static MPI_Datatype mpi_type(enum zt_dtype t)
{
    switch (t) {
    case ZT_F32:
        return MPI_FLOAT;
    case ZT_F64:
        return MPI_DOUBLE;
    case ZT_BF16:
    case ZT_F16:
        return MPI_UINT16_T;
    case ZT_I32:
        return MPI_INT32_T;
    case ZT_I64:
        return MPI_INT64_T;
    case ZT_U8:
        return MPI_UINT8_T;
    }
    ZT_ASSERT(!"dtype checked by comm.c");
    return MPI_DATATYPE_NULL;
}

static MPI_Op mpi_op(const struct comm *c, enum zt_dtype t, enum comm_op op)
{
    if (t == ZT_BF16 || t == ZT_F16)
        return state(c)->half_ops[t == ZT_BF16 ? HALF_BF16 : HALF_F16][op];
    return op == COMM_OP_SUM ? MPI_SUM : op == COMM_OP_MAX ? MPI_MAX : MPI_MIN;
}

/* MPI counts are int; larger buffers are not needed by the trainer yet. */
static zt_status check_count(const char *where, size_t n)
{
    if (n > (size_t)INT_MAX)
        return zt_error_set(ZT_ERR_UNSUPPORTED, "comm(mpi): %s: %zu elements exceed INT_MAX", where,
                            n);
    return ZT_OK;
}

static int query(const struct comm_config *cfg, char *why, size_t n)
{
    (void)cfg;
    (void)why;
    (void)n;
    return 0; /* MPI is initialised (comm.c checked): always usable */
}

static void fini(struct comm *c)
{
    struct mpi_state *s = state(c);
    if (!s)
        return;
    for (int f = 0; f < HALF_COUNT; f++)
        for (int o = 0; o < N_OPS; o++)
            if (s->half_ops[f][o] != MPI_OP_NULL)
                MPI_Op_free(&s->half_ops[f][o]);
    if (s->scratch_bytes && c->ledger)
        ledger_sub(c->ledger, LEDGER_COMM_BUFFERS, s->scratch_bytes);
    free(s->scratch);
    free(s);
    c->impl = NULL;
}

static zt_status init(struct comm *c, const struct comm_config *cfg)
{
    (void)cfg;
    struct mpi_state *s = calloc(1, sizeof *s);
    if (!s)
        return zt_error_set(ZT_ERR_NOMEM, "comm(mpi): out of memory");
    c->impl = s;
    for (int f = 0; f < HALF_COUNT; f++)
        for (int o = 0; o < N_OPS; o++)
            s->half_ops[f][o] = MPI_OP_NULL;
    for (int f = 0; f < HALF_COUNT; f++) {
        for (int o = 0; o < N_OPS; o++) {
            int rc = MPI_Op_create(half_reducers[f][o], 1, &s->half_ops[f][o]);
            if (rc != MPI_SUCCESS) {
                fini(c);
                return comm_mpi_error(rc, "MPI_Op_create(16-bit reduction)");
            }
        }
    }
    return ZT_OK;
}

static zt_status split(struct comm *parent, struct comm *child, int color, int key)
{
    (void)parent;
    (void)color;
    (void)key;
    return init(child, NULL);
}

/* Grows the ring scratch to at least `bytes`, keeping the ledger in step. */
static zt_status scratch_reserve(struct comm *c, size_t bytes, unsigned char **out)
{
    struct mpi_state *s = state(c);
    if (bytes > s->scratch_bytes) {
        unsigned char *p = malloc(bytes);
        if (!p)
            return zt_error_set(ZT_ERR_NOMEM, "comm(mpi): no memory for %zu bytes of ring scratch",
                                bytes);
        free(s->scratch);
        if (c->ledger) {
            ledger_sub(c->ledger, LEDGER_COMM_BUFFERS, s->scratch_bytes);
            ledger_add(c->ledger, LEDGER_COMM_BUFFERS, bytes);
        }
        s->scratch = p;
        s->scratch_bytes = bytes;
    }
    *out = s->scratch;
    return ZT_OK;
}

/* Whether "auto" or the configured choice runs the ring for this call. */
static int use_ring(const struct comm *c, enum comm_kind kind, size_t n, enum zt_dtype t)
{
    enum comm_algo algo =
        kind == COMM_KIND_REDUCE_SCATTER ? c->reduce_scatter_algo : c->allgather_algo;
    if (algo != COMM_ALGO_AUTO)
        return algo == COMM_ALGO_RING;
    size_t full = n * (size_t)c->size * zt_dtype_size(t);
    return c->size > 1 && full >= auto_ring_from[kind][c->size > 2];
}

/* ---- rings ---- */

/* The elements rings exchange per message. */
static size_t ring_chunk(enum zt_dtype t, size_t n)
{
    size_t chunk = RING_CHUNK_BYTES / zt_dtype_size(t);
    return chunk < n ? chunk : n;
}

/* One reduce-scatter step over a group of `len` elements: sends send[],
 * receives into recv[] and adds own[] to it. Every chunk's exchange is
 * posted before the first is waited for, then each chunk is added into as
 * it arrives, so the neighbours copy later chunks while earlier ones are
 * reduced. */
static zt_status ring_step(struct comm *c, const unsigned char *send, unsigned char *recv,
                           const unsigned char *own, size_t len, size_t chunk, enum zt_dtype t,
                           enum comm_op op)
{
    const int N = c->size, right = (c->rank + 1) % N, left = (c->rank + N - 1) % N;
    const size_t es = zt_dtype_size(t);
    MPI_Datatype type = mpi_type(t);
    MPI_Request q[2 * RING_GROUP];
    size_t k = 0;
    for (size_t off = 0; off < len; off += chunk, k++) {
        int m = (int)(len - off < chunk ? len - off : chunk);
        COMM_MPI_TRY(MPI_Irecv(recv + off * es, m, type, left, RING_TAG, c->mpi, &q[2 * k]));
        COMM_MPI_TRY(MPI_Isend(send + off * es, m, type, right, RING_TAG, c->mpi, &q[2 * k + 1]));
    }
    k = 0;
    for (size_t off = 0; off < len; off += chunk, k++) {
        int m = (int)(len - off < chunk ? len - off : chunk);
        COMM_MPI_TRY(MPI_Waitall(2, &q[2 * k], MPI_STATUSES_IGNORE));
        COMM_MPI_TRY(MPI_Reduce_local(own + off * es, recv + off * es, m, type, mpi_op(c, t, op)));
    }
    return ZT_OK;
}

static zt_status ring_reduce_scatter(struct comm *c, const void *in, void *out, size_t n,
                                     enum zt_dtype t, enum comm_op op)
{
    const int N = c->size, r = c->rank;
    const size_t es = zt_dtype_size(t), chunk = ring_chunk(t, n);
    const unsigned char *src = in;
    unsigned char *dst = out, *scratch = NULL;
    if (n == 0) /* the same on every rank: nothing to exchange */
        return ZT_OK;
    if (N == 1) {
        memcpy(out, in, n * es);
        return ZT_OK;
    }
    size_t group = n < RING_GROUP * chunk ? n : RING_GROUP * chunk;
    if (N > 2) /* two slots of partial sums; two ranks need none */
        ZT_TRY(scratch_reserve(c, 2 * group * es, &scratch));
    for (size_t g = 0; g < n; g += group) {
        size_t len = n - g < group ? n - g : group;
        for (int s = 0; s < N - 1; s++) {
            int send_block = (r + 2 * N - s - 1) % N, recv_block = (r + 2 * N - s - 2) % N;
            const unsigned char *send = s == 0 ? src + ((size_t)send_block * n + g) * es
                                               : scratch + (size_t)((s - 1) % 2) * group * es;
            unsigned char *recv =
                s == N - 2 ? dst + g * es : scratch + (size_t)(s % 2) * group * es;
            ZT_TRY(ring_step(c, send, recv, src + ((size_t)recv_block * n + g) * es, len, chunk, t,
                             op));
        }
    }
    return ZT_OK;
}

static zt_status ring_allgather(struct comm *c, const void *in, void *out, size_t n,
                                enum zt_dtype t)
{
    const int N = c->size, r = c->rank;
    const int right = (r + 1) % N, left = (r + N - 1) % N;
    const size_t block = n * zt_dtype_size(t);
    if (n == 0) /* the same on every rank: nothing to exchange */
        return ZT_OK;
    unsigned char *dst = out, *own = dst + (size_t)r * block;
    MPI_Datatype type = mpi_type(t);
    if (N == 1 && in != own)
        memcpy(own, in, block);
    for (int s = 0; s < N - 1; s++) {
        int send_block = (r + N - s) % N, recv_block = (r + 2 * N - s - 1) % N;
        const void *send = s == 0 ? in : dst + (size_t)send_block * block;
        MPI_Request q[2];
        COMM_MPI_TRY(MPI_Irecv(dst + (size_t)recv_block * block, (int)n, type, left, RING_TAG,
                               c->mpi, &q[0]));
        COMM_MPI_TRY(MPI_Isend(send, (int)n, type, right, RING_TAG, c->mpi, &q[1]));
        if (s == 0 && in != own) /* the own copy overlaps the first transfer */
            memcpy(own, in, block);
        COMM_MPI_TRY(MPI_Waitall(2, q, MPI_STATUSES_IGNORE));
    }
    return ZT_OK;
}

/* ---- blocking entries ---- */

static zt_status allreduce(struct comm *c, void *buf, size_t n, enum zt_dtype t, enum comm_op op)
{
    ZT_TRY(check_count("allreduce", n));
    COMM_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(t), mpi_op(c, t, op), c->mpi));
    return ZT_OK;
}

static zt_status reduce_scatter(struct comm *c, const void *in, void *out, size_t n,
                                enum zt_dtype t, enum comm_op op)
{
    ZT_TRY(check_count("reduce_scatter", n));
    if (use_ring(c, COMM_KIND_REDUCE_SCATTER, n, t))
        return ring_reduce_scatter(c, in, out, n, t, op);
    COMM_MPI_TRY(MPI_Reduce_scatter_block(in, out, (int)n, mpi_type(t), mpi_op(c, t, op), c->mpi));
    return ZT_OK;
}

/* MPI_IN_PLACE when the caller gathers in place (comm.c allowed no other
 * overlap). */
static const void *gather_source(const struct comm *c, const void *in, void *out, size_t n,
                                 enum zt_dtype t)
{
    if (n == 0)
        return in;
    const unsigned char *own = (unsigned char *)out + (size_t)c->rank * n * zt_dtype_size(t);
    return in == (const void *)own ? MPI_IN_PLACE : in;
}

static zt_status allgather(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t)
{
    ZT_TRY(check_count("allgather", n));
    if (use_ring(c, COMM_KIND_ALLGATHER, n, t))
        return ring_allgather(c, in, out, n, t);
    MPI_Datatype type = mpi_type(t);
    COMM_MPI_TRY(
        MPI_Allgather(gather_source(c, in, out, n, t), (int)n, type, out, (int)n, type, c->mpi));
    return ZT_OK;
}

static zt_status broadcast(struct comm *c, void *buf, size_t n, enum zt_dtype t, int root)
{
    ZT_TRY(check_count("broadcast", n));
    COMM_MPI_TRY(MPI_Bcast(buf, (int)n, mpi_type(t), root, c->mpi));
    return ZT_OK;
}

static zt_status gather(struct comm *c, const void *in, void *out, size_t n, enum zt_dtype t,
                        int root)
{
    ZT_TRY(check_count("gather", n));
    MPI_Datatype type = mpi_type(t);
    COMM_MPI_TRY(MPI_Gather(in, (int)n, type, out, (int)n, type, root, c->mpi));
    return ZT_OK;
}

static zt_status barrier(struct comm *c)
{
    COMM_MPI_TRY(MPI_Barrier(c->mpi));
    return ZT_OK;
}

/* ---- point-to-point ---- */

static zt_status p2p_send(struct comm *c, const void *buf, size_t n, enum zt_dtype t, int peer)
{
    ZT_TRY(check_count("send", n));
    COMM_MPI_TRY(MPI_Send(buf, (int)n, mpi_type(t), peer, P2P_TAG, c->mpi));
    return ZT_OK;
}

static zt_status p2p_recv(struct comm *c, void *buf, size_t n, enum zt_dtype t, int peer)
{
    ZT_TRY(check_count("recv", n));
    COMM_MPI_TRY(MPI_Recv(buf, (int)n, mpi_type(t), peer, P2P_TAG, c->mpi, MPI_STATUS_IGNORE));
    return ZT_OK;
}

/* ---- non-blocking entries ---- */

static zt_status iallreduce(struct comm *c, struct comm_request *q)
{
    ZT_TRY(check_count("iallreduce", q->n));
    COMM_MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, q->out, (int)q->n, mpi_type(q->dtype),
                                mpi_op(c, q->dtype, q->op), c->mpi, &q->mpi_req));
    return ZT_OK;
}

static zt_status ireduce_scatter(struct comm *c, struct comm_request *q)
{
    ZT_TRY(check_count("ireduce_scatter", q->n));
    if (use_ring(c, COMM_KIND_REDUCE_SCATTER, q->n, q->dtype)) {
        q->deferred = 1;
        return ZT_OK;
    }
    COMM_MPI_TRY(MPI_Ireduce_scatter_block(q->in, q->out, (int)q->n, mpi_type(q->dtype),
                                           mpi_op(c, q->dtype, q->op), c->mpi, &q->mpi_req));
    return ZT_OK;
}

static zt_status iallgather(struct comm *c, struct comm_request *q)
{
    ZT_TRY(check_count("iallgather", q->n));
    if (use_ring(c, COMM_KIND_ALLGATHER, q->n, q->dtype)) {
        q->deferred = 1;
        return ZT_OK;
    }
    MPI_Datatype type = mpi_type(q->dtype);
    COMM_MPI_TRY(MPI_Iallgather(gather_source(c, q->in, q->out, q->n, q->dtype), (int)q->n, type,
                                q->out, (int)q->n, type, c->mpi, &q->mpi_req));
    return ZT_OK;
}

static zt_status isend(struct comm *c, struct comm_request *q)
{
    ZT_TRY(check_count("isend", q->n));
    COMM_MPI_TRY(
        MPI_Isend(q->in, (int)q->n, mpi_type(q->dtype), q->peer, P2P_TAG, c->mpi, &q->mpi_req));
    return ZT_OK;
}

static zt_status irecv(struct comm *c, struct comm_request *q)
{
    ZT_TRY(check_count("irecv", q->n));
    COMM_MPI_TRY(
        MPI_Irecv(q->out, (int)q->n, mpi_type(q->dtype), q->peer, P2P_TAG, c->mpi, &q->mpi_req));
    return ZT_OK;
}

static zt_status wait_request(struct comm *c, struct comm_request *q)
{
    if (q->deferred && q->kind == COMM_KIND_REDUCE_SCATTER)
        return ring_reduce_scatter(c, q->in, q->out, q->n, q->dtype, q->op);
    if (q->deferred)
        return ring_allgather(c, q->in, q->out, q->n, q->dtype);
    COMM_MPI_TRY(MPI_Wait(&q->mpi_req, MPI_STATUS_IGNORE));
    return ZT_OK;
}

const struct comm_backend_ops comm_mpi_ops = {
    .name = "mpi",
    .memory = COMM_MEMORY_HOST,
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
