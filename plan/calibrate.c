/* plan/calibrate.c — measuring this node for a machine file
 * (calibrate.h).
 *
 * The run is a sequence of phases, each ended by an agreement over the
 * world so that every rank leaves a failed phase together and no rank is
 * left waiting in a collective that the others never enter:
 *
 *   check options and world   (every rank alike)
 *   open the output           (rank 0: a missing folder fails before any measuring)
 *   open the CPU ops and comm (every rank)
 *   open the wake semaphore   (every rank; see open_wake)
 *   triad and GEMM            (rank 0 on every core; the others asleep on the semaphore)
 *   the nvme folder's files   (every rank, with --nvme-path)
 *   collectives               (every rank)
 *   fit and write             (rank 0)
 *
 * Only rank 0 holds results; the other ranks only take part in the
 * collectives. Buffers come from the CPU backend's device memory, counted
 * in a ledger of this run's own.
 *
 * Three things a naive measurement gets wrong on a CPU node, all seen on
 * the 2-core machine this was written on: mpirun binds rank 0 to one core,
 * so its BLAS threads share it (half the GEMM rate: see widen_affinity);
 * ranks waiting in a collective poll, taking cores from rank 0 (half the
 * GEMM rate at 2 ranks, less at 4: see open_wake); and OpenMP and OpenBLAS
 * workers spin a while after their work, on the cores the other pool then
 * needs (small GEMMs several times slower, the triad a tenth as fast: see
 * time_gemm and measure_node).
 */
#ifdef __linux__
#define _GNU_SOURCE /* sched_setaffinity and the CPU_SET macros */
#endif
#include "calibrate.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <dirent.h>
#include <sched.h>
#endif

#include "../comm/comm.h"
#include "../common/atomic_file.h"
#include "../common/clock.h"
#include "../common/half.h"
#include "../config/machine.h"
#include "../worker/backend.h"
#include "../worker/ops.h"
#include "calibrate_gemm.h"
#include "calibrate_nvme.h"
#include "calibrate_load.h"
#include "calibrate_ops.h"
#include "calibrate_rates.h"

enum { MAX_SIZES = 18, N_COLLECTIVES = 3, N_TYPES = 3, MAX_NVME_REPS = 3 };
/* Seconds of triad passes before the timed ones. */
#define TRIAD_WARMUP_S 0.25

static const char *const collective_names[N_COLLECTIVES] = {"allreduce", "reduce_scatter",
                                                            "allgather"};

/* Sizes and repetitions of one calibration (--quick or not). */
struct sizes {
    int quick;          /* the GEMMs' small set (calibrate_gemm.h) */
    size_t triad_bytes; /* of each of the 3 arrays */
    int triad_reps;
    size_t coll_min, coll_max; /* full buffer bytes, doubling */
    int coll_iters, coll_warmup;
    size_t rate_elems; /* elements of each timed update and decode */
    int rate_reps;
    size_t nvme_bytes; /* of each rank's file */
    int nvme_reps;
};

/* One buffer size, by type (enum machine_precision: fp32, bf16, fp16). */
struct coll_row {
    size_t size[N_TYPES];               /* bytes of the full buffer */
    double sec[N_TYPES][N_COLLECTIVES]; /* median of the slowest rank's time */
};

/* The types collectives carry (enum machine_precision's order): a 16-bit
 * sum adds through the backend's 16-bit reducers, at its own rate. */
static const enum zt_dtype coll_types[N_TYPES] = {ZT_F32, ZT_BF16, ZT_F16};
static const char *const coll_type_names[N_TYPES] = {"float32", "bf16", "fp16"};

struct calibration {
    struct sizes sz;
    int rank, ranks, cores;
    int all_cores;  /* 1: rank 0's threads were free to use every core */
    sem_t *wake;    /* the other ranks sleep on it during rank 0's phase; NULL: none */
    int all_asleep; /* 1: every other rank had `wake` open, so none polled meanwhile */
    char host[256];
    struct ledger ledger;
    struct compute_backend be;
    struct comm *comm;
    struct atomic_file out;
    double triad_rate;                     /* bytes/s */
    double nvme_seconds[2][MAX_NVME_REPS]; /* [read, write] the slowest rank's, by rep */
    struct coll_row coll[MAX_SIZES];
    int n_sizes;
    struct calibrate_link_fit fit;
    struct machine m;
};

/* x to 4 significant digits: what a measurement holds, and a short number
 * in the file. */
static double round4(double x)
{
    char text[32];
    snprintf(text, sizeof text, "%.4g", x);
    return strtod(text, NULL);
}

static double busbytes_factor(int kind, int n)
{
    return kind == 0 ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
}

static double steps_of(int kind, int n)
{
    return kind == 0 ? 2.0 * (n - 1) : (double)(n - 1);
}

void calibrate_fit_link(const double *steps, const double *busbytes, const double *t, int n,
                        struct calibrate_link_fit *out)
{
    ZT_ASSERT(n >= 1);
    double sss = 0, ssx = 0, sxx = 0, sst = 0, sxt = 0, min_lat = INFINITY, max_bw = 0;
    for (int i = 0; i < n; i++) {
        ZT_ASSERT(steps[i] > 0 && busbytes[i] > 0 && t[i] > 0);
        sss += steps[i] * steps[i];
        ssx += steps[i] * busbytes[i];
        sxx += busbytes[i] * busbytes[i];
        sst += steps[i] * t[i];
        sxt += busbytes[i] * t[i];
        min_lat = fmin(min_lat, t[i] / steps[i]);
        max_bw = fmax(max_bw, busbytes[i] / t[i]);
    }
    const double det = sss * sxx - ssx * ssx;
    /* latency a and seconds per bus byte b of t = a*steps + b*busbytes */
    double a = det > 0 ? (sst * sxx - ssx * sxt) / det : 0.0;
    double b = det > 0 ? (sss * sxt - ssx * sst) / det : 0.0;
    memset(out, 0, sizeof *out);
    if (!(a > 0) || !isfinite(a)) {
        out->latency_fallback = 1;
        a = min_lat;
        b = (sxt - a * ssx) / sxx; /* b alone, a fixed */
    }
    if (!(b > 0) || !isfinite(b)) {
        out->bandwidth_fallback = 1;
        b = 1.0 / max_bw;
        if (!out->latency_fallback) {
            a = (sst - b * ssx) / sss; /* a alone, b fixed */
            if (!(a > 0)) {
                out->latency_fallback = 1;
                a = min_lat;
            }
        }
    }
    out->latency = a;
    out->bandwidth = 1.0 / b;
}

/* ---- options and world ---- */

static void pick_sizes(int quick, struct sizes *s)
{
    *s = (struct sizes){.quick = quick,
                        .triad_bytes = (size_t)(quick ? 8 : 64) << 20,
                        .triad_reps = quick ? 5 : 10,
                        .coll_min = 4096,
                        .coll_max = (size_t)(quick ? 4 : 256) << 20,
                        .coll_iters = quick ? 5 : 10,
                        .coll_warmup = quick ? 1 : 2,
                        .rate_elems = (size_t)(quick ? 64 : 65536) << 10,
                        .rate_reps = quick ? 1 : 5,
                        .nvme_bytes = (size_t)(quick ? 8 : 4096) << 20,
                        .nvme_reps = quick ? 1 : 3};
}

/* Fills what every rank knows alike: sizes, name, device memory. */
static zt_status check_setup(const struct calibrate_options *o, struct calibration *cal)
{
    pick_sizes(o->quick, &cal->sz);
    cal->rank = comm_world_rank();
    cal->ranks = comm_world_size();
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cal->cores = cores > 0 ? (int)cores : 1;
    if (gethostname(cal->host, sizeof cal->host - 1) != 0 || !cal->host[0])
        snprintf(cal->host, sizeof cal->host, "unknown");
    if (!o->out_path || !o->out_path[0])
        return zt_error_set(ZT_ERR_USAGE, "calibrate needs --out FILE");
    if (o->name && (!o->name[0] || strlen(o->name) >= sizeof cal->m.name))
        return zt_error_set(ZT_ERR_USAGE, "--name: expected 1 to %zu characters, got %zu",
                            sizeof cal->m.name - 1, strlen(o->name));
    if (o->name)
        snprintf(cal->m.name, sizeof cal->m.name, "%s", o->name);
    else
        snprintf(cal->m.name, sizeof cal->m.name, "cpu-%.59s", cal->host);
    cal->m.device_memory = o->device_memory;
    if (!cal->m.device_memory) {
        const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages <= 0 || page <= 0)
            return zt_error_set(ZT_ERR_USAGE, "calibrate cannot tell this node's memory: "
                                              "give --device-memory SIZE");
        cal->m.device_memory = (uint64_t)pages * (uint64_t)page;
    }
    cal->m.devices_per_node = 1;
    cal->m.cores = cal->cores;
    if (cal->ranks < 2)
        return zt_error_set(ZT_ERR_USAGE, "calibrate measures collectives between ranks: run it "
                                          "under mpirun with 2 to 4 ranks");
    return ZT_OK;
}

static zt_status check_one_node(const struct calibration *cal, int local_ranks)
{
    if (local_ranks != cal->ranks)
        return zt_error_set(ZT_ERR_USAGE,
                            "calibrate measures one node, but only %d of its %d ranks run on "
                            "this one: start them all on one node",
                            local_ranks, cal->ranks);
    return ZT_OK;
}

static zt_status open_compute(struct calibration *cal)
{
    ledger_init(&cal->ledger, 0);
    ZT_TRY(compute_backend_open("cpu", -1, &cal->ledger, &cal->be));
    ops_cpu_set_threads(1); /* rank 0 takes every core for its own phase only */
    return ZT_OK;
}

static zt_status alloc_floats(struct calibration *cal, size_t n, const char *what, float **out)
{
    void *p = NULL;
    ZT_TRY(device_alloc(&cal->be.dev, LEDGER_WORKSPACE, n * sizeof(float), what, &p));
    *out = p;
    return ZT_OK;
}

static void free_floats(struct calibration *cal, size_t n, float *p)
{
    if (p)
        device_free(&cal->be.dev, LEDGER_WORKSPACE, n * sizeof(float), p);
}

/* calibrate_fill's values on every thread, each touching first the part it streams later. */
static void fill_parallel(float *v, size_t n, int seed)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        v[i] = (float)((i * 7 + (size_t)seed) % 13) * 0.01f;
}

/* ---- GEMM ---- */

/* Where rank 0's threads ran, for the tables' headings. */
static const char *placement(const struct calibration *cal)
{
    return cal->all_cores ? "free on every core" : "on the cores mpirun bound rank 0 to";
}

/* Whether rank 0 had the cores to itself while it measured. */
static void put_wait_note(FILE *f, const struct calibration *cal)
{
    if (cal->all_asleep)
        fprintf(f, "While rank 0 measured its compute, the other ranks slept (a POSIX "
                   "semaphore).\n");
    else
        fprintf(f, "While rank 0 measured its compute, some ranks waited polling in MPI (no "
                   "POSIX\nsemaphore could be shared): they took cores, so the compute rates may "
                   "be low.\n");
    if (!cal->all_cores)
        fprintf(f, "Rank 0's threads could not be freed of mpirun's binding: the compute rates "
                   "are\nthose of the cores it was bound to.\n");
}

/* ---- memory bandwidth ---- */

static void put_triad_line(FILE *f, const struct calibration *cal)
{
    fprintf(f,
            "memory: triad a[i] = b[i] + s*c[i] over 3 float arrays of %zu MiB on rank 0, %d "
            "OpenMP\nthreads %s, 12 bytes per element, median of %d after %.2g s of\n"
            "warm-up: %.2f GB/s\n",
            cal->sz.triad_bytes >> 20, cal->cores, placement(cal), cal->sz.triad_reps,
            TRIAD_WARMUP_S, cal->triad_rate / 1e9);
}

static void triad(float *a, const float *b, const float *c, size_t n)
{
    const float s = 0.5f;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        a[i] = b[i] + s * c[i];
}

static zt_status measure_triad(struct calibration *cal)
{
    const size_t n = cal->sz.triad_bytes / sizeof(float);
    const int reps = cal->sz.triad_reps;
    float *v[3] = {0};
    zt_status st = ZT_OK;
    for (int k = 0; k < 3 && st == ZT_OK; k++) {
        st = alloc_floats(cal, n, "calibrate: triad arrays", &v[k]);
        if (st == ZT_OK)
            fill_parallel(v[k], n, k);
    }
    double t[16];
    ZT_ASSERT(reps <= 16);
    /* warm-up by time, long enough for threads that spin after their last
     * work (OpenBLAS's wait about 0.1 s) to have gone to sleep */
    const double w0 = zt_now_seconds();
    while (st == ZT_OK && zt_now_seconds() - w0 < TRIAD_WARMUP_S)
        triad(v[0], v[1], v[2], n);
    for (int r = 0; r < reps && st == ZT_OK; r++) {
        const double t0 = zt_now_seconds();
        triad(v[0], v[1], v[2], n);
        t[r] = zt_now_seconds() - t0;
    }
    if (st == ZT_OK) {
        volatile float sink = v[0][n / 2]; /* the stores are used */
        (void)sink;
        cal->triad_rate = 3.0 * sizeof(float) * (double)n / calibrate_median(t, reps);
    }
    for (int k = 0; k < 3; k++)
        free_floats(cal, n, v[k]);
    return st;
}

/* ---- the cores of rank 0 ----
 *
 * mpirun binds each rank to a core (or a socket) by default, and threads
 * inherit the binding: rank 0's BLAS threads would share one core. For its
 * phase rank 0 lets every thread of the process run on every core, then
 * puts back the mask it had. Linux only; elsewhere the launcher's binding
 * stays, and the report says so. */

struct affinity {
    int widened; /* 1: every thread may run on every core until restored */
#ifdef __linux__
    cpu_set_t saved;
#endif
};

#ifdef __linux__
/* Gives every thread of this process the mask `set`; 0 when all took it. */
static int set_threads_affinity(const cpu_set_t *set)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int bad = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.')
            bad |= sched_setaffinity((pid_t)atol(e->d_name), sizeof *set, set) != 0;
    closedir(d);
    return bad ? -1 : 0;
}
#endif

static void widen_affinity(struct affinity *a)
{
    memset(a, 0, sizeof *a);
#ifdef __linux__
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int i = 0; i < CPU_SETSIZE; i++)
        CPU_SET(i, &all); /* the kernel keeps the CPUs this process may use */
    if (sched_getaffinity(0, sizeof a->saved, &a->saved) == 0)
        a->widened = set_threads_affinity(&all) == 0;
#endif
}

static void restore_affinity(const struct affinity *a)
{
#ifdef __linux__
    if (a->widened)
        (void)set_threads_affinity(&a->saved); /* best effort: only the placement changes */
#else
    (void)a;
#endif
}

/* ---- the other ranks' wait ----
 *
 * While rank 0 measures, the other ranks must leave the cores alone. In a
 * collective they would not: MPI polls while it waits, and yielding the
 * core between polls still cost half of rank 0's GEMM rate in a test on
 * 2 cores, and more with 3 waiting ranks. So they sleep on a POSIX named
 * semaphore that rank 0 creates and posts once per rank when it is done.
 * Where one cannot be had, the ranks without it wait in the agreement
 * instead, and the file's comment says that the compute rates may be low. */

/* Collective over cal->comm: rank 0 creates the semaphore, the others open
 * it; cal->all_asleep tells whether every rank has it. */
static zt_status open_wake(struct calibration *cal)
{
    int64_t msg[2] = {0, 0}; /* rank 0's pid, whether it made the semaphore */
    char name[64];
    sem_t *sem = SEM_FAILED;
    if (cal->rank == 0) {
        snprintf(name, sizeof name, "/zerotrain-calibrate-%ld", (long)getpid());
        sem = sem_open(name, O_CREAT | O_EXCL, 0600, 0);
        msg[0] = (int64_t)getpid();
        msg[1] = sem != SEM_FAILED;
    }
    ZT_TRY(comm_broadcast(cal->comm, msg, 2, ZT_I64, 0));
    if (cal->rank != 0 && msg[1]) {
        snprintf(name, sizeof name, "/zerotrain-calibrate-%ld", (long)msg[0]);
        sem = sem_open(name, 0);
    }
    cal->wake = sem == SEM_FAILED ? NULL : sem;
    double have = cal->wake != NULL;
    ZT_TRY(comm_allreduce(cal->comm, &have, 1, ZT_F64, COMM_OP_MIN));
    cal->all_asleep = have == 1.0;
    if (cal->rank == 0 && msg[1]) /* every rank that could open it has: the name can go */
        sem_unlink(name);
    return ZT_OK;
}

/* Where the loader's file is timed (from the page cache: any disk does):
 * the machine file's folder, which calibrate writes anyway. */
static const char *load_folder(const struct calibrate_options *o, char *buf, size_t n)
{
    const char *slash = strrchr(o->out_path, '/');
    if (!slash)
        return ".";
    snprintf(buf, n, "%.*s", (int)(slash - o->out_path) + (slash == o->out_path), o->out_path);
    return buf;
}

/* Rank 0's phase: every core of the node on its compute. The triad goes
 * first: it needs no BLAS thread, and its buffers are filled by OpenMP,
 * whose workers have gone to sleep by the time the GEMM buffers are
 * filled. */
static zt_status measure_node(struct calibration *cal, const char *load_dir, FILE *report)
{
    struct affinity aff;
    widen_affinity(&aff);
    cal->all_cores = aff.widened;
    ops_cpu_set_threads(cal->cores);
    if (report) {
        put_wait_note(report, cal);
        fputc('\n', report);
    }
    zt_status st = measure_triad(cal);
    if (st == ZT_OK && report) {
        put_triad_line(report, cal);
        fputc('\n', report);
        fflush(report);
    }
    if (st == ZT_OK)
        st = calibrate_gemm(&cal->be, cal->cores, cal->sz.quick, &cal->m);
    if (st == ZT_OK && report) {
        calibrate_gemm_put(report, &cal->be, cal->sz.quick, &cal->m);
        fprintf(report, "matmul_flops: fp32 %.2f, bf16 %.2f, fp16 %.2f GFLOP/s\n\n",
                cal->m.matmul_flops[MACHINE_FP32] / 1e9, cal->m.matmul_flops[MACHINE_BF16] / 1e9,
                cal->m.matmul_flops[MACHINE_FP16] / 1e9);
        fflush(report);
    }
    ops_cpu_set_threads(1); /* the rates are one core's */
    if (st == ZT_OK)
        st = calibrate_rates(cal->be.ops, cal->sz.rate_elems, cal->sz.rate_reps, &cal->m, report);
    if (st == ZT_OK)
        st = calibrate_ops(cal->be.ops, cal->sz.rate_reps, &cal->m, report);
    if (st == ZT_OK)
        st = calibrate_load(load_dir, cal->sz.rate_reps, &cal->m, report);
    restore_affinity(&aff);
    /* the BLAS workers spin a while after their last product: let them stop
     * before the collectives are timed */
    nanosleep(&(struct timespec){.tv_nsec = 200000000}, NULL);
    return st;
}

/* ---- the nvme folder ---- */

static void put_nvme_line(FILE *f, const struct calibration *cal, const char *dir)
{
    fprintf(f,
            "nvme: %d ranks at once, each a file of %zu MiB in %s (8 MiB a call, O_DIRECT\n"
            "where the file system allows it), written and synced, then read; the slowest\n"
            "rank's time, median of %d: read %.3g GB/s, write %.3g GB/s for the node\n",
            cal->ranks, cal->sz.nvme_bytes >> 20, dir, cal->sz.nvme_reps,
            cal->m.nvme_read_bandwidth / 1e9, cal->m.nvme_write_bandwidth / 1e9);
}

/* One timed pass on every rank at once: the slowest rank's seconds; a
 * failure on any rank stops every rank here (the failing one returns it,
 * the others *stop). */
static zt_status time_nvme_pass(struct calibration *cal, struct calibrate_nvme_file *f, int write,
                                double *seconds, int *stop)
{
    ZT_TRY(comm_barrier(cal->comm));
    const double t0 = zt_now_seconds();
    const zt_status st = calibrate_nvme_pass(f, write);
    double v[2] = {zt_now_seconds() - t0, st != ZT_OK};
    ZT_TRY(comm_allreduce(cal->comm, v, 2, ZT_F64, COMM_OP_MAX));
    *seconds = v[0];
    *stop = v[1] != 0.0;
    return st;
}

/* Every rank streams its file; rank 0 keeps the node's bandwidths. */
static zt_status measure_nvme(struct calibration *cal, const char *dir)
{
    struct calibrate_nvme_file f;
    const zt_status opened = calibrate_nvme_open(dir, cal->rank, cal->sz.nvme_bytes, &f);
    double failed = opened != ZT_OK;
    const zt_status agreed = comm_allreduce(cal->comm, &failed, 1, ZT_F64, COMM_OP_MAX);
    if (agreed != ZT_OK || failed != 0.0) { /* another rank's failure is its to report */
        if (opened == ZT_OK)
            calibrate_nvme_close(&f);
        return agreed != ZT_OK ? agreed : opened;
    }
    zt_status st = ZT_OK;
    int stop = 0;
    for (int r = 0; r < cal->sz.nvme_reps && st == ZT_OK && !stop; r++)
        for (int write = 1; write >= 0 && st == ZT_OK && !stop; write--)
            st = time_nvme_pass(cal, &f, write, &cal->nvme_seconds[write][r], &stop);
    calibrate_nvme_close(&f);
    if (st != ZT_OK || stop)
        return st;
    const double node_bytes = (double)cal->ranks * (double)cal->sz.nvme_bytes;
    cal->m.nvme_read_bandwidth =
        round4(node_bytes / calibrate_median(cal->nvme_seconds[0], cal->sz.nvme_reps));
    cal->m.nvme_write_bandwidth =
        round4(node_bytes / calibrate_median(cal->nvme_seconds[1], cal->sz.nvme_reps));
    return ZT_OK;
}

/* ---- collectives ---- */

static void put_coll_table(FILE *f, const struct calibration *cal, int t)
{
    fprintf(f,
            "collectives: the \"%s\" backend (algorithms auto), %s sum, %d ranks; the "
            "slowest\nrank's time, median of %d after %d warm-up; size is the full buffer, "
            "busbw = size/time\n* 2(n-1)/n for allreduce, * (n-1)/n for the others\n",
            comm_backend_name(cal->comm), coll_type_names[t], cal->ranks, cal->sz.coll_iters,
            cal->sz.coll_warmup);
    fprintf(f, "%10s", "size(B)");
    for (int k = 0; k < N_COLLECTIVES; k++)
        fprintf(f, " %16s(us) %5s", collective_names[k], "GB/s");
    fputc('\n', f);
    for (int i = 0; i < cal->n_sizes; i++) {
        const struct coll_row *r = &cal->coll[i];
        fprintf(f, "%10zu", r->size[t]);
        for (int k = 0; k < N_COLLECTIVES; k++)
            fprintf(f, " %20.1f %5.2f", r->sec[t][k] * 1e6,
                    (double)r->size[t] / r->sec[t][k] * busbytes_factor(k, cal->ranks) / 1e9);
        fputc('\n', f);
    }
}

/* One call of collective `kind` over `count` elements of type t in the
 * full buffer. */
static zt_status run_collective(struct comm *c, int kind, enum zt_dtype t, void *big, void *small,
                                size_t count)
{
    const size_t per_rank = count / (size_t)comm_size(c);
    if (kind == 0)
        return comm_allreduce(c, big, count, t, COMM_OP_SUM);
    if (kind == 1)
        return comm_reduce_scatter(c, big, small, per_rank, t, COMM_OP_SUM);
    return comm_allgather(c, small, big, per_rank, t);
}

/* The median over iterations of the slowest rank's time of one call. */
static zt_status time_collective(struct calibration *cal, int kind, enum zt_dtype t, void *big,
                                 void *small, size_t count, double *sec)
{
    const int iters = cal->sz.coll_iters, warm = cal->sz.coll_warmup;
    double times[16];
    ZT_ASSERT(iters <= 16);
    for (int i = 0; i < warm + iters; i++) {
        ZT_TRY(comm_barrier(cal->comm));
        const double t0 = zt_now_seconds();
        ZT_TRY(run_collective(cal->comm, kind, t, big, small, count));
        double dt = zt_now_seconds() - t0;
        ZT_TRY(comm_allreduce(cal->comm, &dt, 1, ZT_F64, COMM_OP_MAX));
        if (i >= warm)
            times[i - warm] = dt;
    }
    *sec = calibrate_median(times, iters);
    return ZT_OK;
}

/* 16-bit buffers hold values near 1 in that type (no NaN, infinity or
 * subnormal to slow the adds): the float fill's high halves. */
static void narrow_fill(float *buf, size_t floats, enum zt_dtype t)
{
    uint16_t *h = (uint16_t *)buf;
    for (size_t i = 0; i < 2 * floats; i++)
        h[i] = t == ZT_BF16 ? zt_f32_to_bf16(1.0f + (float)(i % 7) / 64)
                            : zt_f32_to_f16(1.0f + (float)(i % 7) / 64);
}

static zt_status measure_collectives(struct calibration *cal, FILE *report)
{
    const size_t n = cal->ranks, count = cal->sz.coll_max / sizeof(float);
    float *big = NULL, *small = NULL;
    zt_status st = alloc_floats(cal, count, "calibrate: collective buffers", &big);
    if (st == ZT_OK)
        st = alloc_floats(cal, count / n + 1, "calibrate: collective buffers", &small);
    for (size_t bytes = cal->sz.coll_min; bytes <= cal->sz.coll_max && st == ZT_OK; bytes *= 2) {
        ZT_ASSERT(cal->n_sizes < MAX_SIZES);
        cal->n_sizes++;
    }
    for (int t = 0; t < N_TYPES && st == ZT_OK; t++) {
        const size_t es = zt_dtype_size(coll_types[t]), unit = es * n;
        if (t == 0) {
            calibrate_fill(big, count, 1);
            calibrate_fill(small, count / n + 1, 2);
        } else {
            narrow_fill(big, count, coll_types[t]);
            narrow_fill(small, count / n + 1, coll_types[t]);
        }
        size_t bytes = cal->sz.coll_min;
        for (int i = 0; i < cal->n_sizes && st == ZT_OK; i++, bytes *= 2) {
            struct coll_row *r = &cal->coll[i];
            r->size[t] = bytes / unit * unit;
            for (int k = 0; k < N_COLLECTIVES && st == ZT_OK; k++)
                st = time_collective(cal, k, coll_types[t], big, small, r->size[t] / es,
                                     &r->sec[t][k]);
        }
    }
    free_floats(cal, count / n + 1, small);
    free_floats(cal, count, big);
    for (int t = 0; t < N_TYPES && st == ZT_OK && report && cal->rank == 0; t++) {
        put_coll_table(report, cal, t);
        fputc('\n', report);
        fflush(report);
    }
    return st;
}

/* The tables as the machine file keeps them: each type's bus bandwidth by
 * size, for the planner to read instead of the fit. */
static void set_busbw(struct calibration *cal)
{
    for (int t = 0; t < N_TYPES; t++) {
        struct machine_busbw_table *b = &cal->m.intra_node.busbw[t];
        b->n = cal->n_sizes;
        for (int i = 0; i < cal->n_sizes; i++) {
            const struct coll_row *r = &cal->coll[i];
            b->row[i].bytes = (double)r->size[t];
            for (int k = 0; k < N_COLLECTIVES; k++)
                b->row[i].busbw[k] =
                    round4((double)r->size[t] / r->sec[t][k] * busbytes_factor(k, cal->ranks));
        }
    }
}

/* ---- the fit and the file ---- */

static void fit_links(struct calibration *cal)
{
    double steps[MAX_SIZES * N_COLLECTIVES], bus[MAX_SIZES * N_COLLECTIVES],
        t[MAX_SIZES * N_COLLECTIVES];
    int n = 0;
    for (int i = 0; i < cal->n_sizes; i++)
        for (int k = 0; k < N_COLLECTIVES; k++, n++) {
            steps[n] = steps_of(k, cal->ranks);
            bus[n] = busbytes_factor(k, cal->ranks) * (double)cal->coll[i].size[0];
            t[n] = cal->coll[i].sec[0][k];
        }
    calibrate_fit_link(steps, bus, t, n, &cal->fit);
}

static void put_fit(FILE *f, const struct calibration *cal)
{
    fprintf(f,
            "links: least-squares fit of t = steps*latency + busbytes/bandwidth over the %d "
            "points\nabove (busbytes = 2(n-1)/n*size, steps = 2(n-1) for allreduce; (n-1)/n*size "
            "and n-1\nfor the others): latency %.4g s, bandwidth %.4g GB/s\n",
            cal->n_sizes * N_COLLECTIVES, cal->fit.latency, cal->fit.bandwidth / 1e9);
    if (cal->fit.latency_fallback)
        fprintf(f, "The fit's latency was not positive: latency is the lowest time/steps "
                   "measured (a\nsmallest size's), and the bandwidth is refitted with it.\n");
    if (cal->fit.bandwidth_fallback)
        fprintf(f, "The fit's 1/bandwidth was not positive: bandwidth is the highest busbw "
                   "measured.\n");
}

/* The comment of the machine file: where every number came from. */
static zt_status build_comment(const struct calibration *cal, const struct calibrate_options *o,
                               char **text)
{
    size_t len = 0;
    FILE *f = open_memstream(text, &len);
    if (!f)
        return zt_error_set(ZT_ERR_NOMEM, "calibrate: no memory for the file's comment");
    char date[64];
    const time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&now, &tm));
    fprintf(f,
            "Measured by zerotrain calibrate on host %s, %s,\nwith %d ranks on its %d cores%s:\n"
            "  %s\n\n",
            cal->host, date, cal->ranks, cal->cores, o->quick ? " (--quick sizes)" : "",
            o->command_line ? o->command_line : "zerotrain calibrate");
    fprintf(f, "A CPU node is ONE device (devices_per_node: 1): its cores run one rank's BLAS "
               "threads\nand the ranks of the node share them, so every rate is what all the "
               "cores sustain\ntogether. Rates are rounded to 4 significant digits.\n");
    fprintf(f, "cores: the node's online cores (sysconf _SC_NPROCESSORS_ONLN), which train "
               "divides\namong the ranks of the node, one thread each at least.\n");
    fprintf(f, "device_memory: %s.\n\n",
            o->device_memory ? "given by --device-memory"
                             : "the node's physical memory (sysconf _SC_PHYS_PAGES x "
                               "_SC_PAGESIZE)");
    put_wait_note(f, cal);
    calibrate_gemm_put(f, &cal->be, o->quick, &cal->m);
    fprintf(f, "matmul_flops: each type's median rate of the three products together over its\n"
               "every-core rows 768 wide; a 16-bit type the CPU has no kernel for is computed in\n"
               "fp32 by a run, and takes fp32's rate.\n"
               "gemm_rates: these tables, which the planner reads for a product by its shape and\n"
               "a rank's threads.\n\n");
    put_triad_line(f, cal);
    fprintf(f, "memory_bandwidth: this rate.\n\n");
    calibrate_rates_put(f, &cal->m, cal->sz.rate_elems, cal->sz.rate_reps);
    fprintf(f, "update_rates and dequantize_4bit: these rates.\n\n");
    calibrate_ops_put(f, &cal->m, cal->sz.rate_reps);
    fprintf(f, "attention_flops and elementwise_bandwidth: these rates.\n\n");
    calibrate_load_put(f, &cal->m, cal->sz.rate_reps);
    fprintf(f, "weights_read, weights_read_transposed and quantize_4bit: these rates.\n\n");
    if (o->nvme_path) {
        put_nvme_line(f, cal, o->nvme_path);
        fprintf(f, "nvme: these rates.\n\n");
    }
    for (int t = 0; t < N_TYPES; t++) {
        put_coll_table(f, cal, t);
        fputc('\n', f);
    }
    put_fit(f, cal);
    fprintf(f, "busbw: these tables' bus bandwidths, which the planner reads for a collective "
               "by its\ntype and message size (the fit only for a link without them).\n");
    fprintf(f, "intra_node and inter_node are both these: calibrate ran on one node, so "
               "the link\nbetween nodes was not measured and is taken to be the same.\n");
    if (fclose(f) != 0) {
        free(*text);
        *text = NULL;
        return zt_error_set(ZT_ERR_NOMEM, "calibrate: no memory for the file's comment");
    }
    return ZT_OK;
}

static zt_status check_rate(const char *what, double v)
{
    if (!(v > 0) || !isfinite(v))
        return zt_error_set(ZT_ERR_INTERNAL, "calibrate: measured %s = %g, not a positive rate",
                            what, v);
    return ZT_OK;
}

/* Rank 0's last phase: the machine, its comment, the file. */
static zt_status write_machine(struct calibration *cal, const struct calibrate_options *o,
                               FILE *report)
{
    struct machine *m = &cal->m;
    fit_links(cal);
    for (int p = 0; p < 3; p++)
        ZT_TRY(check_rate("matmul_flops", m->matmul_flops[p]));
    for (int i = 0; i < m->n_updates; i++) {
        m->updates[i].rate = round4(m->updates[i].rate);
        ZT_TRY(check_rate("an optimizer's update rate", m->updates[i].rate));
    }
    if (o->nvme_path) {
        ZT_TRY(check_rate("the nvme read bandwidth", m->nvme_read_bandwidth));
        ZT_TRY(check_rate("the nvme write bandwidth", m->nvme_write_bandwidth));
    }
    m->dequantize_4bit = round4(m->dequantize_4bit);
    ZT_TRY(check_rate("dequantize_4bit", m->dequantize_4bit));
    for (int p = 0; p < 3; p++) {
        m->attention_flops[p] = round4(m->attention_flops[p]);
        ZT_TRY(check_rate("attention_flops", m->attention_flops[p]));
    }
    m->elementwise_bandwidth = round4(m->elementwise_bandwidth);
    ZT_TRY(check_rate("elementwise_bandwidth", m->elementwise_bandwidth));
    double *const loader[] = {&m->weights_read, &m->weights_read_transposed, &m->quantize_4bit};
    for (int k = 0; k < 3; k++) {
        *loader[k] = round4(*loader[k]);
        ZT_TRY(check_rate("the loader's rates", *loader[k]));
    }
    m->memory_bandwidth = round4(cal->triad_rate);
    m->intra_node.bandwidth = round4(cal->fit.bandwidth);
    m->intra_node.latency = round4(cal->fit.latency);
    set_busbw(cal);
    m->inter_node = m->intra_node;
    ZT_TRY(check_rate("memory_bandwidth", m->memory_bandwidth));
    ZT_TRY(check_rate("the link bandwidth", m->intra_node.bandwidth));
    ZT_TRY(check_rate("the link latency", m->intra_node.latency));
    if (report) {
        put_fit(report, cal);
        fflush(report);
    }
    char *comment = NULL;
    ZT_TRY(build_comment(cal, o, &comment));
    zt_status st = machine_write(m, comment, cal->out.f);
    free(comment);
    if (st != ZT_OK)
        return zt_error_set(st, "%s: %s", o->out_path, zt_error_message());
    ZT_TRY(atomic_file_commit(&cal->out));
    if (report) {
        fprintf(report, "\nwrote machine '%s' to %s\n", m->name, o->out_path);
        fflush(report);
    }
    return ZT_OK;
}

zt_status calibrate_run(const struct calibrate_options *o, FILE *report, int *print_here)
{
    struct calibration *cal = calloc(1, sizeof *cal);
    zt_status st = cal ? check_setup(o, cal)
                       : zt_error_set(ZT_ERR_NOMEM, "calibrate: no memory for its tables");
    st = comm_world_agree(st, print_here);
    if (st == ZT_OK) /* comm_local_ranks is collective: every rank is here */
        st = comm_world_agree(check_one_node(cal, comm_local_ranks()), print_here);
    if (st == ZT_OK)
        st = comm_world_agree(cal->rank == 0 ? atomic_file_open(o->out_path, &cal->out) : ZT_OK,
                              print_here);
    if (st == ZT_OK)
        st = comm_world_agree(open_compute(cal), print_here);
    if (st == ZT_OK) {
        struct comm_config cc = {.backend = "mpi", .ledger = &cal->ledger};
        st = comm_world_agree(comm_create(&cc, &cal->comm), print_here);
    }
    if (st == ZT_OK && cal->rank == 0 && report) {
        fprintf(report, "calibrate: %d ranks on %s (%d cores)%s; rank 0 measures the compute\n\n",
                cal->ranks, cal->host, cal->cores, o->quick ? ", quick sizes" : "");
        fflush(report);
    }
    if (st == ZT_OK)
        st = comm_world_agree(open_wake(cal), print_here);
    /* the other ranks sleep (or wait in the agreement) while rank 0 has every core */
    if (st == ZT_OK) {
        zt_status local = ZT_OK;
        if (cal->rank == 0) {
            char dir[4096];
            local = measure_node(cal, load_folder(o, dir, sizeof dir), report);
            for (int r = 1; r < cal->ranks && cal->wake; r++)
                sem_post(cal->wake);
        } else if (cal->wake) {
            while (sem_wait(cal->wake) != 0 && errno == EINTR)
                continue;
        }
        st = comm_world_agree(local, print_here);
    }
    if (st == ZT_OK && o->nvme_path) {
        st = comm_world_agree(measure_nvme(cal, o->nvme_path), print_here);
        if (st == ZT_OK && cal->rank == 0 && report) {
            put_nvme_line(report, cal, o->nvme_path);
            fputc('\n', report);
            fflush(report);
        }
    }
    if (st == ZT_OK)
        st = comm_world_agree(measure_collectives(cal, report), print_here);
    if (st == ZT_OK)
        st = comm_world_agree(cal->rank == 0 ? write_machine(cal, o, report) : ZT_OK, print_here);
    if (cal) {
        if (cal->wake)
            sem_close(cal->wake);
        comm_destroy(cal->comm);
        compute_backend_close(&cal->be);
        atomic_file_abort(&cal->out);
        free(cal);
    }
    return st;
}
