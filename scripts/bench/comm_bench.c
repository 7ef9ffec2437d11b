/* scripts/bench/comm_bench.c — bandwidth of the MPI backend's collectives.
 *
 *   mpirun -np N comm_bench [--min BYTES] [--max BYTES] [--iters K] [--warmup W]
 *                           [--dtype f32|bf16|fp16]
 *
 * Prints one table per collective and algorithm in the manner of nccl-tests:
 * allreduce, reduce_scatter and allgather, each native and ring, sizes
 * doubling from --min to --max. "size" is the full buffer in
 * bytes (the allreduce buffer, the reduce-scatter input, the allgather
 * output), rounded down to a multiple of N elements; "count" its elements, float32 or,
 * with --dtype bf16 or fp16, that type (summed through the backend's 16-bit reducers).
 * The time of one iteration is the slowest rank's (MPI_MAX after a barrier),
 * and the table shows the median over the iterations, after W untimed ones.
 * algbw = size / time; busbw = algbw * 2(N-1)/N for allreduce and
 * algbw * (N-1)/N for the others, so the busbw of different collectives and
 * world sizes can be compared with the link's bandwidth (nccl-tests,
 * doc/PERFORMANCE.md).
 *
 * Buffers are host memory: this benchmarks the "mpi" backend, whose "auto"
 * thresholds in comm/comm_mpi.c come from these tables.
 *
 * A last table asks whether comm_progress hides a ring allreduce behind
 * computation, for sizes growing fourfold from 1 MiB (within --min..--max):
 * "comm" is comm_iallreduce then comm_wait; "compute" a busy float loop
 * calibrated on rank 0 to take as long as "comm"; "no progress" issues the
 * allreduce, computes, then waits; "overlap" does the same calling
 * comm_progress about every millisecond of the loop. hidden = (comm +
 * compute - overlap) / comm: 1 when the communication was entirely hidden,
 * 0 when overlapping gained nothing.
 *
 * The last lines say what the flight recorder (comm/flight.h) adds to one
 * call: a 1-element allreduce on a comm that records and on one that does
 * not, in turn.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../comm/comm.h"
#include "../../comm/flight.h"
#include "../../common/dtype.h"
#include "../../common/hostdev.h"

struct options {
    size_t min_bytes, max_bytes;
    int iters, warmup;
    enum zt_dtype dtype; /* of the tables' buffers: ZT_F32 or ZT_BF16 */
};

struct bench {
    const char *title;
    enum comm_kind kind;
    struct comm *c;
};

static int parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s)
        return -1;
    if (*end == 'K' || *end == 'k')
        v <<= 10, end++;
    else if (*end == 'M' || *end == 'm')
        v <<= 20, end++;
    else if (*end == 'G' || *end == 'g')
        v <<= 30, end++;
    if (*end != '\0')
        return -1;
    *out = (size_t)v;
    return 0;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    *o = (struct options){.min_bytes = 1024,
                          .max_bytes = (size_t)64 << 20,
                          .iters = 20,
                          .warmup = 3,
                          .dtype = ZT_F32};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = !v;
        if (!bad && strcmp(argv[i], "--min") == 0)
            bad = parse_size(v, &o->min_bytes);
        else if (!bad && strcmp(argv[i], "--max") == 0)
            bad = parse_size(v, &o->max_bytes);
        else if (!bad && strcmp(argv[i], "--iters") == 0)
            bad = (o->iters = atoi(v)) < 1;
        else if (!bad && strcmp(argv[i], "--warmup") == 0)
            bad = (o->warmup = atoi(v)) < 0;
        else if (!bad && strcmp(argv[i], "--dtype") == 0)
            bad = !(strcmp(v, "f32") == 0    ? (o->dtype = ZT_F32, 1)
                    : strcmp(v, "bf16") == 0 ? (o->dtype = ZT_BF16, 1)
                    : strcmp(v, "fp16") == 0 ? (o->dtype = ZT_F16, 1)
                                             : 0);
        else
            bad = 1;
        if (bad)
            return -1;
        i++;
    }
    return o->min_bytes < 1 || o->max_bytes < o->min_bytes ? -1 : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One call of the benchmarked collective on `size` elements: per-rank
 * elements for reduce-scatter/allgather, the whole buffer for allreduce. */
struct call {
    const struct bench *b;
    void *big, *small;
    size_t n;
    enum zt_dtype t;
};

static zt_status run_once(const void *arg)
{
    const struct call *a = arg;
    switch (a->b->kind) {
    case COMM_KIND_ALLREDUCE:
        return comm_allreduce(a->b->c, a->big, a->n, a->t, COMM_OP_SUM);
    case COMM_KIND_REDUCE_SCATTER:
        return comm_reduce_scatter(a->b->c, a->big, a->small, a->n, a->t, COMM_OP_SUM);
    case COMM_KIND_ALLGATHER:
        return comm_allgather(a->b->c, a->small, a->big, a->n, a->t);
    default:
        return zt_error_set(ZT_ERR_USAGE, "comm_bench: unsupported kind");
    }
}

/* Median over iterations of the slowest rank's time of once(arg), in
 * seconds, after the warm-up ones. */
static zt_status median_time(const struct options *o, zt_status (*once)(const void *),
                             const void *arg, double *median)
{
    double *t = malloc(sizeof *t * (size_t)o->iters);
    if (!t)
        return zt_error_set(ZT_ERR_NOMEM, "comm_bench: out of memory");
    zt_status st = ZT_OK;
    for (int i = 0; i < o->warmup + o->iters && st == ZT_OK; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        st = once(arg);
        double dt = MPI_Wtime() - t0, slowest = dt;
        MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (i >= o->warmup)
            t[i - o->warmup] = slowest;
    }
    if (st == ZT_OK) {
        qsort(t, (size_t)o->iters, sizeof *t, cmp_double);
        *median = o->iters % 2 ? t[o->iters / 2] : 0.5 * (t[o->iters / 2 - 1] + t[o->iters / 2]);
    }
    free(t);
    return st;
}

static zt_status run_table(const struct bench *b, const struct options *o, void *big, void *small)
{
    const int N = comm_size(b->c);
    const double factor = b->kind == COMM_KIND_ALLREDUCE ? 2.0 * (N - 1) / N : (double)(N - 1) / N;
    const size_t es = zt_dtype_size(o->dtype), unit = es * (size_t)N;
    if (comm_rank(b->c) == 0)
        printf("# %s\n#%15s %14s %11s %12s %12s\n", b->title, "size(B)", "count", "time(us)",
               "algbw(GB/s)", "busbw(GB/s)");
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes; bytes *= 2) {
        size_t size = bytes / unit * unit, count = size / es;
        if (size == 0)
            continue;
        size_t n = b->kind == COMM_KIND_ALLREDUCE ? count : count / (size_t)N;
        double sec = 0;
        const struct call call = {b, big, small, n, o->dtype};
        ZT_TRY(median_time(o, run_once, &call, &sec));
        double algbw = (double)size / sec / 1e9;
        if (comm_rank(b->c) == 0)
            printf("%16zu %14zu %11.1f %12.3f %12.3f\n", size, count, sec * 1e6, algbw,
                   algbw * factor);
    }
    if (comm_rank(b->c) == 0)
        printf("\n");
    fflush(stdout);
    return ZT_OK;
}

/* ---- overlap ---- */

enum overlap_mode { OVERLAP_COMM, OVERLAP_COMPUTE, OVERLAP_NO_PROGRESS, OVERLAP_PROGRESS, N_MODES };

#define SLICE_FLOATS 16384 /* one slice of the busy loop: 64 KiB, in L2 */

/* `slices` passes of a dependent float sum over work[0..SLICE_FLOATS), with
 * comm_progress after every `every` of them when c is not NULL. */
static zt_status compute(const float *work, long slices, struct comm *c, long every)
{
    float acc = 0;
    for (long s = 0; s < slices; s++) {
        for (int i = 0; i < SLICE_FLOATS; i++)
            acc += work[i] * 1.0001f;
        if (c && (s + 1) % every == 0)
            ZT_TRY(comm_progress(c));
    }
    volatile float keep = acc; /* the loop must not be optimised away */
    (void)keep;
    return ZT_OK;
}

/* Slices to run so that the loop takes `seconds`, and slices per
 * millisecond; rank 0's measurement, so that every rank does the same work. */
static void calibrate(const float *work, double seconds, long *slices, long *per_ms)
{
    long probe[2] = {0, 0};
    double t0 = MPI_Wtime();
    compute(work, 200, NULL, 1);
    double per_slice = (MPI_Wtime() - t0) / 200;
    probe[0] = (long)(seconds / per_slice) + 1;
    probe[1] = (long)(1e-3 / per_slice) + 1;
    MPI_Bcast(probe, 2, MPI_LONG, 0, MPI_COMM_WORLD);
    *slices = probe[0];
    *per_ms = probe[1];
}

/* One timed run of the overlap table. */
struct overlap_run {
    struct comm *c;
    enum overlap_mode mode;
    float *buf;
    size_t n;
    const float *work;
    long slices, per_ms;
};

static zt_status overlap_once(const void *arg)
{
    const struct overlap_run *a = arg;
    struct comm_request *req = NULL;
    if (a->mode != OVERLAP_COMPUTE)
        ZT_TRY(comm_iallreduce(a->c, a->buf, a->n, ZT_F32, COMM_OP_SUM, &req));
    if (a->mode != OVERLAP_COMM) {
        zt_status st =
            compute(a->work, a->slices, a->mode == OVERLAP_PROGRESS ? a->c : NULL, a->per_ms);
        if (st != ZT_OK) {
            if (req)
                comm_wait(a->c, req);
            return st;
        }
    }
    return req ? comm_wait(a->c, req) : ZT_OK;
}

static zt_status overlap_table(struct comm *c, const struct options *o, float *big, float *work)
{
    if (comm_rank(c) == 0)
        printf("# allreduce (ring) overlapped with computation (times in us)\n#%15s %11s %11s "
               "%11s %11s %8s\n",
               "size(B)", "comm", "compute", "no progress", "overlap", "hidden");
    for (int i = 0; i < SLICE_FLOATS; i++) /* finite: the earlier tables left sums there */
        work[i] = 1.0f;
    for (size_t bytes = (size_t)1 << 20; bytes <= o->max_bytes; bytes *= 4) {
        if (bytes < o->min_bytes)
            continue;
        size_t n = bytes / sizeof(float);
        double t[N_MODES];
        struct overlap_run run = {c, OVERLAP_COMM, big, n, work, 0, 1};
        ZT_TRY(median_time(o, overlap_once, &run, &t[OVERLAP_COMM]));
        calibrate(work, t[OVERLAP_COMM], &run.slices, &run.per_ms);
        for (int m = OVERLAP_COMPUTE; m < N_MODES; m++) {
            run.mode = (enum overlap_mode)m;
            ZT_TRY(median_time(o, overlap_once, &run, &t[m]));
        }
        double hidden =
            (t[OVERLAP_COMM] + t[OVERLAP_COMPUTE] - t[OVERLAP_PROGRESS]) / t[OVERLAP_COMM];
        if (comm_rank(c) == 0)
            printf("%16zu %11.0f %11.0f %11.0f %11.0f %8.2f\n", bytes, t[0] * 1e6, t[1] * 1e6,
                   t[2] * 1e6, t[3] * 1e6, hidden);
    }
    if (comm_rank(c) == 0)
        printf("\n");
    fflush(stdout);
    return ZT_OK;
}

/* Seconds per blocking 1-element allreduce on c, over `calls` calls. */
static zt_status per_call(struct comm *c, long calls, double *out)
{
    float x = 1.0f;
    ZT_TRY(comm_barrier(c));
    double t0 = MPI_Wtime();
    for (long i = 0; i < calls; i++)
        ZT_TRY(comm_allreduce(c, &x, 1, ZT_F32, COMM_OP_SUM));
    *out = (MPI_Wtime() - t0) / (double)calls;
    return ZT_OK;
}

/* What the flight recorder (comm/flight.h) adds to a call: the same tiny
 * allreduce on a comm that records and one that does not, in turn, five
 * rounds; medians of each and of the rounds' differences. */
static zt_status flight_table(void)
{
    enum { ROUNDS = 5 };
    const long calls = 20000;
    const struct comm_flight_config fc = {.timeout_s = 0, .dir = "."};
    struct comm_flight *f = NULL;
    struct comm *on = NULL, *off = NULL;
    double t_on[ROUNDS], t_off[ROUNDS], diff[ROUNDS];
    ZT_TRY(comm_flight_create(&fc, &f, NULL));
    struct comm_config cfg = {.backend = "mpi", .flight = f};
    zt_status st = comm_create(&cfg, &on);
    cfg.flight = NULL;
    if (st == ZT_OK)
        st = comm_create(&cfg, &off);
    for (int r = 0; st == ZT_OK && r < ROUNDS; r++) {
        st = per_call(off, calls, &t_off[r]);
        if (st == ZT_OK)
            st = per_call(on, calls, &t_on[r]);
        diff[r] = t_on[r] - t_off[r];
    }
    if (st == ZT_OK && comm_rank(on) == 0) {
        qsort(t_on, ROUNDS, sizeof(double), cmp_double);
        qsort(t_off, ROUNDS, sizeof(double), cmp_double);
        qsort(diff, ROUNDS, sizeof(double), cmp_double);
        printf("# flight recorder: 1-element allreduce, median of %d rounds of %ld calls\n"
               "#   recording off %8.1f ns/call, on %8.1f ns/call, difference %6.1f ns/call\n\n",
               ROUNDS, calls, t_off[ROUNDS / 2] * 1e9, t_on[ROUNDS / 2] * 1e9,
               diff[ROUNDS / 2] * 1e9);
        fflush(stdout);
    }
    comm_destroy(off);
    comm_destroy(on);
    comm_flight_destroy(f);
    return st;
}

static zt_status run(const struct options *o)
{
    struct comm_config native_cfg = {
        .backend = "mpi", .reduce_scatter = "native", .allgather = "native", .allreduce = "native"};
    struct comm_config ring_cfg = {
        .backend = "mpi", .reduce_scatter = "ring", .allgather = "ring", .allreduce = "ring"};
    struct comm *native = NULL, *ring = NULL;
    float *big = NULL, *small = NULL;
    zt_status st = comm_create(&native_cfg, &native);
    if (st == ZT_OK)
        st = comm_create(&ring_cfg, &ring);
    if (st == ZT_OK) {
        size_t count = o->max_bytes / sizeof(float) + 1;
        if (count < SLICE_FLOATS) /* the overlap table's busy loop reads that many */
            count = SLICE_FLOATS;
        big = malloc(count * sizeof *big);
        small = malloc(count * sizeof *small);
        if (!big || !small)
            st = zt_error_set(ZT_ERR_NOMEM, "comm_bench: no memory for %zu-byte buffers",
                              o->max_bytes);
        for (size_t i = 0; st == ZT_OK && i < count; i++)
            big[i] = small[i] = 1.0f;
        /* 16-bit tables read the same buffers as 1 and a little, two values per float
         * (bf16 0x3f81, fp16 0x3c01) */
        if (st == ZT_OK && o->dtype != ZT_F32)
            for (size_t i = 0; i < count; i++)
                big[i] = small[i] = zt_bits_float(o->dtype == ZT_BF16 ? 0x3f813f81u : 0x3c013c01u);
    }
    if (st == ZT_OK && comm_rank(native) == 0)
        printf("# comm_bench: %d ranks, backend %s, %s sum, median of %d iterations after %d "
               "warm-up\n\n",
               comm_size(native), comm_backend_name(native),
               o->dtype == ZT_BF16  ? "bf16"
               : o->dtype == ZT_F16 ? "fp16"
                                    : "float32",
               o->iters, o->warmup);
    const struct bench benches[] = {
        {"allreduce (native)", COMM_KIND_ALLREDUCE, native},
        {"allreduce (ring)", COMM_KIND_ALLREDUCE, ring},
        {"reduce_scatter (native)", COMM_KIND_REDUCE_SCATTER, native},
        {"reduce_scatter (ring)", COMM_KIND_REDUCE_SCATTER, ring},
        {"allgather (native)", COMM_KIND_ALLGATHER, native},
        {"allgather (ring)", COMM_KIND_ALLGATHER, ring},
    };
    for (size_t i = 0; st == ZT_OK && i < sizeof benches / sizeof benches[0]; i++)
        st = run_table(&benches[i], o, big, small);
    if (st == ZT_OK)
        st = overlap_table(ring, o, big, small);
    if (st == ZT_OK)
        st = flight_table();
    free(big);
    free(small);
    comm_destroy(ring);
    comm_destroy(native);
    return st;
}

int main(int argc, char **argv)
{
    struct options o;
    MPI_Init(&argc, &argv);
    if (parse_args(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: comm_bench [--min BYTES] [--max BYTES] [--iters K] [--warmup W]\n"
                        "                  [--dtype f32|bf16|fp16]\n"
                        "       (sizes accept K, M, G suffixes)\n");
        MPI_Finalize();
        return 2;
    }
    zt_status st = run(&o);
    if (st != ZT_OK) {
        fprintf(stderr, "comm_bench: %s: %s\n", zt_status_str(st), zt_error_message());
        MPI_Abort(MPI_COMM_WORLD, zt_status_exit_code(st)); /* a peer may be inside a collective */
    }
    MPI_Finalize();
    return 0;
}
