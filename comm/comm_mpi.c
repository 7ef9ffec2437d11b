/* comm/comm_mpi.c — the MPI backend: collectives on host memory.
 *
 * Native dtypes map to MPI's predefined types and ops. bf16 and f16 have no
 * MPI type, so they travel as MPI_UINT16_T and reduce through user-defined
 * ops that add (or compare) in fp32 per element and round back to nearest
 * even (common/half.h); one op per (format, operation) is created at init
 * and freed at fini.
 *
 * Allreduce, reduce-scatter and allgather each have two algorithms:
 *   native  MPI_Allreduce / MPI_Reduce_scatter_block / MPI_Allgather (and
 *           their I-forms);
 *   ring    N-1 steps per phase of point-to-point exchange with the
 *           neighbours rank+1 (send) and rank-1 (receive).
 * Open MPI 4.1's MPI_Reduce_scatter_block over shared memory reaches a
 * half to a sixth of the ring's bandwidth from 64 KiB up, its MPI_Allreduce
 * falls behind the ring from 32 MiB, and its MPI_Allgather loses to the
 * ring at 4 ranks from 256 KiB; "auto" picks per size from the measured
 * table `auto_ring_from` below.
 *
 * Ring reduce-scatter. At step s (0 <= s < N-1) rank r sends the partial sum
 * of block (r-s-1) mod N to r+1 and receives the partial sum of block
 * (r-s-2) mod N from r-1, then adds its own contribution to it; after the
 * last step it holds block r summed over all ranks. Each block's sum is
 * therefore formed once, along one chain of ranks, and every element of the
 * result is the same whichever rank asks. The first step sends straight
 * from `in` and the last receives straight into `out`.
 *
 * Ring allgather. At step s rank r forwards block (r-s) mod N to r+1 and
 * receives block (r-s-1) mod N from r-1, directly into `out`; the first step
 * sends from `in`, so copying the own block into place overlaps it. Blocks
 * are moved, never combined: every rank ends with the same bytes.
 *
 * Ring allreduce, in place over buf[0..n): the buffer is cut into N blocks,
 * the first n mod N of them one element longer than the rest (so any n
 * works; blocks may be empty). A reduce-scatter phase as above leaves block
 * r's sum in rank r's block r, then an allgather phase forwards it around
 * the ring into place. In the first phase the partial sums stay in their
 * blocks of buf (a rank's own contribution to a block is read once, at the
 * step that adds it) and only the incoming chunks land in scratch; in the
 * second, blocks are copied and never re-combined, so every rank ends with
 * the bytes of the one chain that formed each block.
 *
 * Reduce-scatter and allreduce run over groups of RING_GROUP chunks of
 * RING_CHUNK_BYTES of every block (an allreduce runs both phases per group,
 * so a group is forwarded while it is still cached): per step all chunk
 * exchanges of a group are posted (MPI_Irecv/MPI_Isend), then each chunk is
 * combined as soon as it has arrived. Against one MPI_Sendrecv per chunk
 * this lets a neighbour copy the next chunks while this rank reduces the
 * current one, which measured 10-25% faster; a chunk that fits in L2 is
 * still cached when it is added to. The scratch is bounded by
 * 2 * RING_GROUP * RING_CHUNK_BYTES however large the buffer: a
 * reduce-scatter needs two slots of a group between its first and last
 * step (one being sent while the other is received; two ranks need none),
 * an allreduce one slot for what arrives. It is a growing buffer kept in
 * the backend state (the collectives repeat every step with the same
 * sizes, so allocating per call would only add page faults), recorded in
 * the ledger when one is given. An allgather sends each block whole.
 *
 * Rings are state machines, blocking or not. A ring is a request that
 * records where it stands: group g, step s within the group (reduce-scatter
 * steps, then allgather steps), and the MPI requests of the step it posted.
 *
 *   between steps --post_step--> posted --recv k arrives: reduce_chunk-->
 *   ... --all chunks in and all sends out: next_step--> between steps | done
 *
 * ring_advance makes these moves, testing before each (comm_progress, and
 * once when the ring is issued) or waiting (comm_wait and the blocking
 * calls). The backend keeps its outstanding requests on a list in issue
 * order, and only the oldest ring not yet done posts messages: every rank
 * then posts the rings' messages between two neighbours in the same order
 * under the same tag, and they match one to one. A blocking ring call is a
 * request on the stack that joins the list and is driven to completion
 * (older rings first), so the blocking and non-blocking forms give the
 * same bits. Native requests are MPI's own; comm_progress MPI_Tests them,
 * which is also what advances Open MPI's non-blocking collectives. "auto"
 * applies the same table to both forms.
 *
 * Point-to-point messages are MPI_Send / MPI_Recv and their I-forms under a
 * tag of their own, so a message still in flight never matches a ring's
 * receive on the same communicator. Gather is MPI_Gather. A split group gets
 * a state of its own (its 16-bit ops, ring scratch and list of outstanding
 * requests), made as at init.
 *
 * Every MPI call goes through COMM_MPI_TRY on a communicator with
 * MPI_ERRORS_RETURN (set by comm.c). After a failure inside a ring, requests
 * still posted are abandoned with the communicator (comm.h: a ZT_ERR_COMM
 * ends the run), and the rings issued after it fail without sending.
 */
#include "comm_impl.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/half.h"
#include "../common/ledger.h"

/* x86-64 GCC: the fp16 sum's F16C form, chosen at run time (below) */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define COMM_F16C 1
#include <immintrin.h>
#endif

/* Ring message size and messages in flight per step, tuned with
 * scripts/bench/comm_bench.c at 1-64 MB, 2 and 4 ranks: 64 KiB chunks lost
 * up to a third of the bandwidth; 256 KiB to 1 MiB with 4 to 64 in flight
 * were within the machine's noise (+-15%), 512 KiB x 4 ahead in most paired
 * runs. A chunk and the own block's chunk fit together in the 2 MiB L2. */
#define RING_CHUNK_BYTES ((size_t)512 * 1024)
#define RING_GROUP       4
#define RING_TAG         0x7a72
#define P2P_TAG          0x7a73

/* "auto": full-buffer bytes (N * n * element size; for allreduce the
 * buffer) from which the ring is used, for two ranks and for more. Measured
 * with comm_bench (busbw in GB/s, float32, medians of 3 runs) on a 2-core
 * AMD EPYC VM shared with other jobs (runs differ by up to 2x above 4 MiB),
 * Open MPI 4.1.4, btl vader with CMA single copy; 4 ranks oversubscribe the
 * 2 cores.
 *
 *   ring / native                 4 KiB   64 KiB  1 MiB   4 MiB   64 MiB
 *   reduce-scatter, 2 ranks      3.1/2.5 5.9/2.9 6.4/2.6 9.0/1.5 1.4/0.4
 *   reduce-scatter, 4 ranks      .17/.21 .96/.58 1.9/.88 1.1/.63 .90/.37
 *   allgather, 2 ranks           2.1/2.8 5.1/5.0 8.1/8.4 7.9/8.0 1.1/1.4
 *   allgather, 4 ranks           .20/.23 .95/1.2 3.7/3.5 2.8/1.0 .71/1.3
 *   allreduce, 2 ranks           .91/.81 1.5/1.3 1.9/2.2 .85/1.5 .71/.46
 *   allreduce, 4 ranks           .13/.17 .62/.75 1.0/.87 .56/.72 .57/.38
 *
 * Reduce-scatter: below 4 KiB the two are equal within noise at 2 ranks; at
 * 4 ranks the lead below 64 KiB changes from run to run. Allgather at 2
 * ranks is one exchange either way and equal within noise at every size, so
 * native is kept; at 4 ranks native leads at most sizes up to 128 KiB and
 * the ring from 256 KiB to 16 MiB (above, the runs disagree).
 *
 * Allreduce rows: medians of 6 runs taken while other jobs kept the load
 * average at 6-10 on the 2 cores, so they sit below the rows above; what
 * decides is the ring/native ratio within each run. At 32 and 64 MiB the
 * ring led in 10 of the 12 runs at 2 ranks (median ratio 1.3-1.4) and in
 * 11 of 12 at 4 ranks (1.7); from 4 KiB to 16 MiB the lead changes from run to run and
 * native's median is ahead at most sizes (ratios 0.7-1.1). A run on a
 * quieter machine put the ring ahead from 4 MiB at 2 ranks (64 MiB: 5.2
 * against 2.3 GB/s), so the crossing may lie lower than chosen here.
 */
static const size_t auto_ring_from[COMM_KIND_COUNT][2] = {
    [COMM_KIND_ALLREDUCE] = {(size_t)32 << 20, (size_t)32 << 20},
    [COMM_KIND_REDUCE_SCATTER] = {(size_t)4 << 10, (size_t)64 << 10},
    [COMM_KIND_ALLGATHER] = {SIZE_MAX, (size_t)256 << 10},
};

enum half_format { HALF_BF16, HALF_F16, HALF_COUNT };
#define N_OPS 3 /* COMM_OP_SUM, COMM_OP_MAX, COMM_OP_MIN */

struct mpi_state {
    MPI_Op half_ops[HALF_COUNT][N_OPS];
    unsigned char *scratch; /* the running ring's incoming chunks or partial sums */
    size_t scratch_bytes;
    struct comm_request *head, *tail; /* outstanding requests, in issue order */
    int rings_failed;                 /* a ring failed: later rings are not run */
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

/* The reducers are a ring's combine, run on every chunk it receives: cloned
 * for AVX-512, AVX2 and the baseline, and vectorised per lane with the same
 * scalar conversions, so the bits do not change (bf16's sum runs about 3.5
 * times faster than the scalar loop on a chunk in cache). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define REDUCER_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define REDUCER_CLONES
#endif

/* inout[i] = in[i] (op) inout[i], as MPI_User_function wants. */
#define HALF_REDUCER(name, to_f32, from_f32, combine)                                              \
    REDUCER_CLONES static void name(void *in, void *inout, int *len, MPI_Datatype *type)           \
    {                                                                                              \
        const uint16_t *a = in;                                                                    \
        uint16_t *b = inout;                                                                       \
        const int n = *len;                                                                        \
        (void)type;                                                                                \
        _Pragma("omp simd") for (int i = 0; i < n; i++)                                            \
        {                                                                                          \
            b[i] = from_f32(combine(to_f32(a[i]), to_f32(b[i])));                                  \
        }                                                                                          \
    }

HALF_REDUCER(bf16_sum, zt_bf16_to_f32, zt_f32_to_bf16, sum)
HALF_REDUCER(bf16_max, zt_bf16_to_f32, zt_f32_to_bf16, larger)
HALF_REDUCER(bf16_min, zt_bf16_to_f32, zt_f32_to_bf16, smaller)
HALF_REDUCER(f16_sum_scalar, zt_f16_to_f32, zt_f32_to_f16, sum)
HALF_REDUCER(f16_max, zt_f16_to_f32, zt_f32_to_f16, larger)
HALF_REDUCER(f16_min, zt_f16_to_f32, zt_f32_to_f16, smaller)

/* fp16's conversions do not vectorise as written (8.6 ns an element); the
 * CPU's F16C instructions convert 8 lanes with the same IEEE rounding to
 * nearest even (test_simd holds the engine's F16C casts to half.h's, and
 * test_comm's every-pattern sum holds this one). */
#ifdef COMM_F16C

/* b[i] = a[i] + b[i] over the whole 8-lane groups; returns how many. */
__attribute__((target("avx2,f16c"))) static int f16_sum_f16c(const uint16_t *a, uint16_t *b, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(a + i)));
        const __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(void *)(b + i)));
        _mm_storeu_si128((__m128i *)(void *)(b + i),
                         _mm256_cvtps_ph(_mm256_add_ps(x, y), _MM_FROUND_TO_NEAREST_INT));
    }
    return i;
}

static int f16_sum_fast(const uint16_t *a, uint16_t *b, int n)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") ? f16_sum_f16c(a, b, n)
                                                                            : 0;
}
#else
static int f16_sum_fast(const uint16_t *a, uint16_t *b, int n)
{
    (void)a, (void)b, (void)n;
    return 0;
}
#endif

static void f16_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    const int done = f16_sum_fast(in, inout, *len);
    int rest = *len - done;
    f16_sum_scalar((uint16_t *)in + done, (uint16_t *)inout + done, &rest, type);
}

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
    enum comm_algo algo = kind == COMM_KIND_REDUCE_SCATTER ? c->reduce_scatter_algo
                          : kind == COMM_KIND_ALLGATHER    ? c->allgather_algo
                                                           : c->allreduce_algo;
    if (algo != COMM_ALGO_AUTO)
        return algo == COMM_ALGO_RING;
    size_t ranks = kind == COMM_KIND_ALLREDUCE ? 1 : (size_t)c->size;
    size_t full = n * ranks * zt_dtype_size(t);
    return c->size > 1 && full >= auto_ring_from[kind][c->size > 2];
}

/* ---- the outstanding list ---- */

static void link_request(struct mpi_state *s, struct comm_request *q)
{
    q->next = NULL;
    q->prev = s->tail;
    if (s->tail)
        s->tail->next = q;
    else
        s->head = q;
    s->tail = q;
}

static void unlink_request(struct mpi_state *s, struct comm_request *q)
{
    if (q->prev)
        q->prev->next = q->next;
    else
        s->head = q->next;
    if (q->next)
        q->next->prev = q->prev;
    else
        s->tail = q->prev;
    q->prev = q->next = NULL;
}

/* ---- rings ---- */

/* The buffers of one step: send[0..send_len) goes to the right and
 * recv[0..recv_len) comes from the left, in chunks; with `into`, each chunk
 * that arrived is combined as into = from (op) into, at its offset in recv. */
struct ring_step {
    const unsigned char *send;
    unsigned char *recv;
    size_t send_len, recv_len;
    const unsigned char *from;
    unsigned char *into;
};

/* Where a ring request stands (file comment). Between calls it is between
 * steps (posted == 0) or has step `step` of the group at `g` posted, with
 * chunks [0, reduced) of it received and combined. */
struct ring {
    size_t chunk;    /* elements per message */
    size_t group;    /* elements of each block per group: at most RING_GROUP chunks */
    size_t extent;   /* elements of the longest block: groups start at 0, group, ... */
    size_t g;        /* the current group's first element within each block */
    int step, steps; /* within the group; steps per group */
    int started, posted, done;
    int chunks, reduced;           /* of the posted step */
    struct ring_step at;           /* the posted step's buffers */
    MPI_Request q[2 * RING_GROUP]; /* chunk k: receive 2k, send 2k+1 */
    unsigned char *scratch;
    zt_status status; /* once done */
};

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* a mod N in [0, N), for block indices that step backwards. */
static int ring_index(int a, int N)
{
    return ((a % N) + N) % N;
}

/* Block b of an allreduce of n elements over N ranks: the first n mod N
 * blocks are one element longer, so every n splits. */
static void allreduce_block(size_t n, int N, int b, size_t *off, size_t *len)
{
    size_t base = n / (size_t)N, rem = n % (size_t)N, ub = (size_t)b;
    *off = ub * base + min_size(ub, rem);
    *len = base + (ub < rem);
}

/* Elements of a block of `len` in the current group. */
static size_t group_slice(const struct ring *g, size_t len)
{
    return len > g->g ? min_size(g->group, len - g->g) : 0;
}

/* Allgather: the own block into place, unless it is there already. */
static void copy_own(const struct comm *c, const struct comm_request *q)
{
    const size_t block = q->n * zt_dtype_size(q->dtype);
    unsigned char *own = (unsigned char *)q->out + (size_t)c->rank * block;
    if (q->in != (const void *)own)
        memcpy(own, q->in, block);
}

/* Fills in the ring of q (positioned before its first step). A group of one
 * rank only copies, and an empty buffer has nothing to do: both are done at
 * once. */
static void ring_init(const struct comm *c, struct comm_request *q, struct ring *g)
{
    const int N = c->size;
    const size_t es = zt_dtype_size(q->dtype);
    *g = (struct ring){.status = ZT_OK};
    for (int k = 0; k < 2 * RING_GROUP; k++)
        g->q[k] = MPI_REQUEST_NULL;
    g->extent = q->kind == COMM_KIND_ALLREDUCE ? (q->n + (size_t)N - 1) / (size_t)N : q->n;
    g->chunk = q->kind == COMM_KIND_ALLGATHER ? q->n : min_size(RING_CHUNK_BYTES / es, g->extent);
    g->group = min_size(g->extent, RING_GROUP * g->chunk);
    g->steps = (q->kind == COMM_KIND_ALLREDUCE ? 2 : 1) * (N - 1);
    g->done = q->n == 0 || N == 1;
    if (q->n > 0 && N == 1 && q->kind == COMM_KIND_REDUCE_SCATTER)
        memcpy(q->out, q->in, q->n * es);
    else if (q->n > 0 && N == 1 && q->kind == COMM_KIND_ALLGATHER)
        copy_own(c, q);
    q->impl = g;
}

/* Takes the scratch when the ring starts, not when it is issued: an older
 * ring may still be using (and growing would move) the shared buffer. */
static zt_status ring_start(struct comm *c, const struct comm_request *q, struct ring *g)
{
    const size_t es = zt_dtype_size(q->dtype);
    size_t slots = 0;
    if (q->kind == COMM_KIND_ALLREDUCE)
        slots = 1;
    else if (q->kind == COMM_KIND_REDUCE_SCATTER && c->size > 2)
        slots = 2;
    if (slots)
        ZT_TRY(scratch_reserve(c, slots * g->group * es, &g->scratch));
    g->started = 1;
    return ZT_OK;
}

static void plan_reduce_scatter(const struct comm *c, const struct comm_request *q, struct ring *g)
{
    const int N = c->size, r = c->rank, s = g->step;
    const int send_block = ring_index(r - s - 1, N), recv_block = ring_index(r - s - 2, N);
    const size_t es = zt_dtype_size(q->dtype), slot = g->group * es;
    const unsigned char *in = q->in;
    struct ring_step *at = &g->at;
    at->send = s == 0 ? in + ((size_t)send_block * q->n + g->g) * es
                      : g->scratch + (size_t)((s - 1) % 2) * slot;
    at->recv =
        s == N - 2 ? (unsigned char *)q->out + g->g * es : g->scratch + (size_t)(s % 2) * slot;
    at->send_len = at->recv_len = group_slice(g, q->n);
    at->from = in + ((size_t)recv_block * q->n + g->g) * es;
    at->into = at->recv;
}

static void plan_allgather(const struct comm *c, const struct comm_request *q, struct ring *g)
{
    const int N = c->size, r = c->rank, s = g->step;
    const int send_block = ring_index(r - s, N), recv_block = ring_index(r - s - 1, N);
    const size_t block = q->n * zt_dtype_size(q->dtype);
    unsigned char *out = q->out;
    struct ring_step *at = &g->at;
    at->send = s == 0 ? q->in : out + (size_t)send_block * block;
    at->recv = out + (size_t)recv_block * block;
    at->send_len = at->recv_len = q->n;
    at->from = NULL;
    at->into = NULL;
}

/* Steps 0..N-2 reduce (block r-s-1 out, r-s-2 in); steps N-1.. gather
 * (block r-s' out, r-s'-1 in, s' = s-(N-1)). Empty slices send nothing. */
static void plan_allreduce(const struct comm *c, const struct comm_request *q, struct ring *g)
{
    const int N = c->size, r = c->rank, reducing = g->step < N - 1;
    const int s = reducing ? g->step : g->step - (N - 1);
    const size_t es = zt_dtype_size(q->dtype);
    size_t send_off, send_len, recv_off, recv_len;
    allreduce_block(q->n, N, ring_index(r - s - reducing, N), &send_off, &send_len);
    allreduce_block(q->n, N, ring_index(r - s - 1 - reducing, N), &recv_off, &recv_len);
    unsigned char *buf = q->out;
    struct ring_step *at = &g->at;
    at->send_len = group_slice(g, send_len);
    at->recv_len = group_slice(g, recv_len);
    at->send = at->send_len ? buf + (send_off + g->g) * es : NULL;
    unsigned char *dst = at->recv_len ? buf + (recv_off + g->g) * es : NULL;
    at->recv = reducing ? g->scratch : dst;
    at->from = reducing ? g->scratch : NULL;
    at->into = reducing ? dst : NULL;
}

/* Posts every chunk exchange of the current step (receive before send). */
static zt_status post_step(struct comm *c, const struct comm_request *q, struct ring *g)
{
    const int N = c->size, right = (c->rank + 1) % N, left = (c->rank + N - 1) % N;
    const size_t es = zt_dtype_size(q->dtype);
    const struct ring_step *at = &g->at;
    MPI_Datatype type = mpi_type(q->dtype);
    if (q->kind == COMM_KIND_ALLREDUCE)
        plan_allreduce(c, q, g);
    else if (q->kind == COMM_KIND_REDUCE_SCATTER)
        plan_reduce_scatter(c, q, g);
    else
        plan_allgather(c, q, g);
    size_t len = at->send_len > at->recv_len ? at->send_len : at->recv_len;
    g->chunks = g->reduced = 0;
    g->posted = 1;
    for (size_t off = 0; off < len; off += g->chunk, g->chunks++) {
        ZT_ASSERT(g->chunks < RING_GROUP);
        MPI_Request *rq = &g->q[2 * g->chunks];
        if (off < at->recv_len)
            COMM_MPI_TRY(MPI_Irecv(at->recv + off * es, (int)min_size(g->chunk, at->recv_len - off),
                                   type, left, RING_TAG, c->mpi, &rq[0]));
        if (off < at->send_len)
            COMM_MPI_TRY(MPI_Isend(at->send + off * es, (int)min_size(g->chunk, at->send_len - off),
                                   type, right, RING_TAG, c->mpi, &rq[1]));
    }
    return ZT_OK;
}

/* Combines chunk k of the posted step, which has arrived. */
static zt_status reduce_chunk(struct comm *c, const struct comm_request *q, const struct ring *g,
                              int k)
{
    const struct ring_step *at = &g->at;
    const size_t off = (size_t)k * g->chunk, es = zt_dtype_size(q->dtype);
    if (!at->into || off >= at->recv_len)
        return ZT_OK;
    int m = (int)min_size(g->chunk, at->recv_len - off);
    COMM_MPI_TRY(MPI_Reduce_local(at->from + off * es, at->into + off * es, m, mpi_type(q->dtype),
                                  mpi_op(c, q->dtype, q->op)));
    return ZT_OK;
}

static void next_step(struct ring *g)
{
    g->posted = 0;
    if (++g->step < g->steps)
        return;
    g->step = 0;
    g->g += g->group;
    g->done = g->g >= g->extent;
}

/* Moves the ring along its steps until it is done or, when !blocking, until
 * the next move would wait for a message. */
static zt_status ring_advance(struct comm *c, const struct comm_request *q, int blocking)
{
    struct ring *g = q->impl;
    while (!g->done) {
        if (!g->started)
            ZT_TRY(ring_start(c, q, g));
        if (!g->posted) {
            ZT_TRY(post_step(c, q, g));
            if (q->kind == COMM_KIND_ALLGATHER && g->step == 0)
                copy_own(c, q); /* overlaps the first transfer */
        }
        for (int arrived = 1; g->reduced < g->chunks; g->reduced++) {
            MPI_Request *rq = &g->q[2 * g->reduced];
            if (blocking)
                COMM_MPI_TRY(MPI_Wait(rq, MPI_STATUS_IGNORE));
            else
                COMM_MPI_TRY(MPI_Test(rq, &arrived, MPI_STATUS_IGNORE));
            if (!arrived)
                return ZT_OK;
            ZT_TRY(reduce_chunk(c, q, g, g->reduced));
        }
        int sent = 1;
        if (blocking)
            COMM_MPI_TRY(MPI_Waitall(2 * g->chunks, g->q, MPI_STATUSES_IGNORE));
        else
            COMM_MPI_TRY(MPI_Testall(2 * g->chunks, g->q, &sent, MPI_STATUSES_IGNORE));
        if (!sent)
            return ZT_OK;
        next_step(g);
    }
    return ZT_OK;
}

/* The oldest ring on the list that is not done, or NULL. */
static struct comm_request *running_ring(const struct mpi_state *s)
{
    for (struct comm_request *q = s->head; q; q = q->next)
        if (q->impl && !((const struct ring *)q->impl)->done)
            return q;
    return NULL;
}

/* Advances the rings in issue order: each as far as it goes without waiting
 * (!blocking), or to completion (blocking; stops once `until` is done). A
 * ring that fails is done with its status, and the rings after it fail
 * without sending when their turn comes: their neighbours may never send
 * what they would wait for. */
static zt_status drive_rings(struct comm *c, const struct comm_request *until, int blocking)
{
    struct mpi_state *s = state(c);
    struct comm_request *q;
    while ((q = running_ring(s)) != NULL) {
        struct ring *g = q->impl;
        zt_status st =
            s->rings_failed
                ? zt_error_set(ZT_ERR_COMM, "comm(mpi): ring not run: an earlier ring failed")
                : ring_advance(c, q, blocking);
        if (st != ZT_OK) {
            g->done = 1;
            g->status = st;
            s->rings_failed = 1;
            return st;
        }
        if (!g->done || q == until)
            return ZT_OK;
    }
    return ZT_OK;
}

/* Completes q's ring (and the older ones), unlinks q and gives its status. */
static zt_status ring_finish(struct comm *c, struct comm_request *q)
{
    const struct ring *g = q->impl;
    while (!g->done)
        (void)drive_rings(c, q, 1); /* an older ring's failure is its own wait's */
    unlink_request(state(c), q);
    return g->status;
}

/* Queues a non-blocking ring and lets it post its first step if no older
 * ring is running. A failure there is kept as the failing ring's status. */
static zt_status ring_issue(struct comm *c, struct comm_request *q)
{
    struct ring *g = malloc(sizeof *g);
    if (!g)
        return zt_error_set(ZT_ERR_NOMEM, "comm(mpi): out of memory for a ring request");
    ring_init(c, q, g);
    link_request(state(c), q);
    (void)drive_rings(c, NULL, 0);
    return ZT_OK;
}

/* A blocking ring: the same machine, on the stack, driven to the end. */
static zt_status ring_run(struct comm *c, enum comm_kind kind, const void *in, void *out, size_t n,
                          enum zt_dtype t, enum comm_op op)
{
    struct comm_request q = {.kind = kind,
                             .in = in,
                             .out = out,
                             .n = n,
                             .dtype = t,
                             .op = op,
                             .mpi_req = MPI_REQUEST_NULL};
    struct ring g;
    ring_init(c, &q, &g);
    link_request(state(c), &q);
    return ring_finish(c, &q);
}

/* ---- blocking entries ---- */

static zt_status allreduce(struct comm *c, void *buf, size_t n, enum zt_dtype t, enum comm_op op)
{
    ZT_TRY(check_count("allreduce", n));
    if (use_ring(c, COMM_KIND_ALLREDUCE, n, t))
        return ring_run(c, COMM_KIND_ALLREDUCE, NULL, buf, n, t, op);
    COMM_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(t), mpi_op(c, t, op), c->mpi));
    return ZT_OK;
}

static zt_status reduce_scatter(struct comm *c, const void *in, void *out, size_t n,
                                enum zt_dtype t, enum comm_op op)
{
    ZT_TRY(check_count("reduce_scatter", n));
    if (use_ring(c, COMM_KIND_REDUCE_SCATTER, n, t))
        return ring_run(c, COMM_KIND_REDUCE_SCATTER, in, out, n, t, op);
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
        return ring_run(c, COMM_KIND_ALLGATHER, in, out, n, t, COMM_OP_SUM);
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
    if (use_ring(c, COMM_KIND_ALLREDUCE, q->n, q->dtype))
        return ring_issue(c, q);
    COMM_MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, q->out, (int)q->n, mpi_type(q->dtype),
                                mpi_op(c, q->dtype, q->op), c->mpi, &q->mpi_req));
    link_request(state(c), q);
    return ZT_OK;
}

static zt_status ireduce_scatter(struct comm *c, struct comm_request *q)
{
    ZT_TRY(check_count("ireduce_scatter", q->n));
    if (use_ring(c, COMM_KIND_REDUCE_SCATTER, q->n, q->dtype))
        return ring_issue(c, q);
    COMM_MPI_TRY(MPI_Ireduce_scatter_block(q->in, q->out, (int)q->n, mpi_type(q->dtype),
                                           mpi_op(c, q->dtype, q->op), c->mpi, &q->mpi_req));
    link_request(state(c), q);
    return ZT_OK;
}

static zt_status iallgather(struct comm *c, struct comm_request *q)
{
    ZT_TRY(check_count("iallgather", q->n));
    if (use_ring(c, COMM_KIND_ALLGATHER, q->n, q->dtype))
        return ring_issue(c, q);
    MPI_Datatype type = mpi_type(q->dtype);
    COMM_MPI_TRY(MPI_Iallgather(gather_source(c, q->in, q->out, q->n, q->dtype), (int)q->n, type,
                                q->out, (int)q->n, type, c->mpi, &q->mpi_req));
    link_request(state(c), q);
    return ZT_OK;
}

static zt_status isend(struct comm *c, struct comm_request *q)
{
    ZT_TRY(check_count("isend", q->n));
    COMM_MPI_TRY(
        MPI_Isend(q->in, (int)q->n, mpi_type(q->dtype), q->peer, P2P_TAG, c->mpi, &q->mpi_req));
    link_request(state(c), q);
    return ZT_OK;
}

static zt_status irecv(struct comm *c, struct comm_request *q)
{
    ZT_TRY(check_count("irecv", q->n));
    COMM_MPI_TRY(
        MPI_Irecv(q->out, (int)q->n, mpi_type(q->dtype), q->peer, P2P_TAG, c->mpi, &q->mpi_req));
    link_request(state(c), q);
    return ZT_OK;
}

static zt_status wait_request(struct comm *c, struct comm_request *q)
{
    if (q->impl) {
        zt_status st = ring_finish(c, q);
        free(q->impl);
        q->impl = NULL;
        return st;
    }
    int rc = MPI_Wait(&q->mpi_req, MPI_STATUS_IGNORE);
    unlink_request(state(c), q);
    return rc == MPI_SUCCESS ? ZT_OK : comm_mpi_error(rc, "MPI_Wait(request)");
}

/* Tests every native request (Open MPI progresses its collectives inside
 * such calls), then moves the rings as far as they go without waiting. */
static zt_status advance(struct comm *c)
{
    for (struct comm_request *q = state(c)->head; q; q = q->next) {
        int done = 0;
        if (!q->impl && q->mpi_req != MPI_REQUEST_NULL)
            COMM_MPI_TRY(MPI_Test(&q->mpi_req, &done, MPI_STATUS_IGNORE));
    }
    return drive_rings(c, NULL, 0);
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
    .advance = advance,
};
