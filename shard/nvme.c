/* shard/nvme.c — ZeRO-Infinity: the fp32 master and the optimizer's states
 * in a file, streamed through a bounded window of host memory.
 *
 * Why: AdamW's master and two moments are 12 bytes per parameter, three
 * quarters of the model states; a file on a fast disk holds them for the
 * price of reading and writing each once per step (DeepSpeed's
 * offload_optimizer: {device: nvme}).
 *
 * How: on top of ZeRO-Offload (shard/offload.c: the update runs on the
 * host's op table), each rank keeps one file under nvme_path laid out as
 * its state vectors back to back (master, then each optimizer state), each
 * indexed as the in-memory vectors are (owned_range's state_off). The
 * update cuts the rank's trainable ranges into chunks of at most
 * buffer_size elements and visits them in order through a ring of
 * buffer_count slots, each slot holding one chunk of every vector:
 *
 *   main thread:   get(i): wait for read i   update chunk i   put(i)
 *   I/O thread:    read i+1 .. i+depth-1 ahead, write i-1, ... behind
 *
 * put(i) queues the write of slot i % depth and then the read of chunk
 * i + depth into the same slot; the I/O thread serves the queue in order,
 * so a slot is never read into before its previous chunk is written out.
 * One thread with pread/pwrite (no O_DIRECT, no libaio): the page cache is
 * the file system's business, and the overlap is what hides the latency.
 *
 * Life of the file: created at start with O_TRUNC (a crash's leftover is
 * never trusted) and its bytes reserved (posix_fallocate: a full disk is
 * found before the first step, and the reserved bytes read as zeros, which
 * is what fresh optimizer states are); unlinked at a clean end. It is
 * scratch: checkpoints save master and states in their own format through
 * shard_nvme_read, and a resume writes them back through shard_nvme_write.
 *
 * Memory: the window is allocated as the engine's persistent master and
 * optimizer states (the ledger counts it, in those categories); the file's
 * bytes are reported apart (shard_engine_nvme_bytes). A plan counts the
 * window and opens no file.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shard_impl.h"

#define MAX_VECTORS (1 + OPTIMIZER_MAX_STATES)

enum {
    MAX_DEPTH = 64,          /* buffer_count's ceiling (the schema's too) */
    RING = 2 * MAX_DEPTH + 4 /* requests in flight: depth reads ahead, depth writes behind */
};

struct chunk {
    int unit;
    struct owned_range r; /* the piece of the unit's range */
};

struct request {
    int write; /* else read */
    int chunk; /* into / from slot chunk % depth */
};

struct shard_nvme {
    int fd; /* -1 for a plan */
    char path[4096];
    int n_vectors;                /* 1 + optimizer states */
    size_t esz[MAX_VECTORS];      /* element size of each vector */
    size_t file_off[MAX_VECTORS]; /* byte offset of each vector's element 0 */
    size_t file_bytes;
    size_t held; /* elements per vector */
    int depth;
    size_t slot_elems;
    /* the window: master slots, then state slots (each slot: every state's chunk) */
    float *master_win;
    char *states_win;
    size_t states_slot_bytes;

    /* this pass */
    struct chunk *chunks;
    int n_chunks, cap_chunks;
    long read_id[MAX_DEPTH]; /* request id of each slot's pending read */
    long updates;            /* e->updates when the pass began */
    int hook_fired;
    void (*written)(void *arg, long updates);
    void *written_arg;

    /* the I/O thread and its queue (a ring of requests in order) */
    pthread_t thread;
    int thread_up;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct request ring[RING];
    long issued, done; /* requests queued / completed; request k is done when done > k */
    int stop;
    int busy; /* a pass is open */
    int err;  /* errno of the first failure, 0 if none */
    int err_write;
    size_t err_off;
};

/* ---- the file ---------------------------------------------------------------- */

static int full_io(int fd, int is_write, char *buf, size_t n, size_t off)
{
    while (n > 0) {
        ssize_t k = is_write ? pwrite(fd, buf, n, (off_t)off) : pread(fd, buf, n, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return errno;
        if (k == 0)
            return EIO; /* shorter than reserved: someone truncated it */
        buf += k;
        off += (size_t)k;
        n -= (size_t)k;
    }
    return 0;
}

/* A failure on the file, named with the folder the user gave: a full disk
 * or a folder that cannot be written is a configuration mistake (exit 2). */
static zt_status file_error(const struct shard_nvme *n, int err, const char *what, size_t off)
{
    const int setup = err == ENOSPC || err == EFBIG || err == EDQUOT || err == EACCES ||
                      err == EPERM || err == EROFS || err == ENOENT || err == ENOTDIR;
    return zt_error_set(setup ? ZT_ERR_CONFIG : ZT_ERR_IO,
                        "zero_optimization.offload_optimizer.nvme_path: %s %s (%zu bytes of "
                        "optimizer states) at byte %zu: %s",
                        what, n->path, n->file_bytes, off, strerror(err));
}

/* Vector v's elements [at, at + count) from / to host memory buf. */
static zt_status vector_io(struct shard_nvme *n, int is_write, int v, size_t at, size_t count,
                           void *buf)
{
    ZT_ASSERT(v < n->n_vectors && at + count <= n->held && !n->busy);
    const size_t off = n->file_off[v] + at * n->esz[v];
    const int err = full_io(n->fd, is_write, buf, count * n->esz[v], off);
    return err ? file_error(n, err, is_write ? "cannot write" : "cannot read", off) : ZT_OK;
}

/* ---- the window's slots ------------------------------------------------------- */

static void *slot_vector(const struct shard_nvme *n, int slot, int v)
{
    if (v == 0)
        return n->master_win + (size_t)slot * n->slot_elems;
    char *p = n->states_win + (size_t)slot * n->states_slot_bytes;
    for (int k = 1; k < v; k++)
        p += n->slot_elems * n->esz[k];
    return p;
}

/* One request: every vector of the chunk between its slot and the file. */
static int serve(struct shard_nvme *n, const struct request *q, size_t *err_off)
{
    const struct chunk *c = &n->chunks[q->chunk];
    const size_t count = c->r.hi - c->r.lo;
    for (int v = 0; v < n->n_vectors; v++) {
        *err_off = n->file_off[v] + c->r.state_off * n->esz[v];
        int err = full_io(n->fd, q->write, slot_vector(n, q->chunk % n->depth, v),
                          count * n->esz[v], *err_off);
        if (err)
            return err;
    }
    return 0;
}

static void *io_thread(void *arg)
{
    struct shard_nvme *n = arg;
    pthread_mutex_lock(&n->mu);
    for (;;) {
        while (!n->stop && n->done == n->issued)
            pthread_cond_wait(&n->cv, &n->mu);
        if (n->done == n->issued) /* stop, with nothing left */
            break;
        const struct request q = n->ring[n->done % RING];
        const int failed = n->err != 0;
        pthread_mutex_unlock(&n->mu);
        size_t off = 0;
        int err = failed ? 0 : serve(n, &q, &off); /* after a failure: drained, not served */
        if (!err && !failed && q.write && !n->hook_fired && n->written) {
            n->hook_fired = 1;
            n->written(n->written_arg, n->updates);
        }
        pthread_mutex_lock(&n->mu);
        if (err && !n->err) {
            n->err = err;
            n->err_write = q.write;
            n->err_off = off;
        }
        n->done++;
        pthread_cond_broadcast(&n->cv);
    }
    pthread_mutex_unlock(&n->mu);
    return NULL;
}

static void submit(struct shard_nvme *n, int is_write, int chunk)
{
    pthread_mutex_lock(&n->mu);
    while (n->issued - n->done >= RING)
        pthread_cond_wait(&n->cv, &n->mu);
    n->ring[n->issued % RING] = (struct request){is_write, chunk};
    if (!is_write)
        n->read_id[chunk % n->depth] = n->issued;
    n->issued++;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

/* Waits until request `id` is served (every request when id < 0); the
 * first failure of the pass, if any. */
static zt_status wait_for(struct shard_nvme *n, long id)
{
    pthread_mutex_lock(&n->mu);
    const long until = id < 0 ? n->issued : id + 1;
    while (n->done < until)
        pthread_cond_wait(&n->cv, &n->mu);
    const int err = n->err, was_write = n->err_write;
    const size_t off = n->err_off;
    pthread_mutex_unlock(&n->mu);
    return err ? file_error(n, err, was_write ? "cannot write" : "cannot read", off) : ZT_OK;
}

/* ---- open and close ------------------------------------------------------------- */

static zt_status open_file(struct shard_nvme *n, const struct shard_engine *e)
{
    const char *dir = e->cfg.nvme_path;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return zt_error_set(ZT_ERR_CONFIG, "zero_optimization.offload_optimizer.nvme_path: %s: %s",
                            dir, stat(dir, &st) != 0 ? strerror(errno) : "not a folder");
    if (e->cfg.nvme_name)
        snprintf(n->path, sizeof n->path, "%s/%s", dir, e->cfg.nvme_name);
    else
        snprintf(n->path, sizeof n->path, "%s/zerotrain-rank%d.states", dir, e->cfg.rank);
    /* O_TRUNC: a leftover of a crashed run is scratch, never read */
    n->fd = open(n->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (n->fd < 0)
        return file_error(n, errno, "cannot create", 0);
    const int err = n->file_bytes ? posix_fallocate(n->fd, 0, (off_t)n->file_bytes) : 0;
    if (err) {
        const zt_status s = file_error(n, err, "cannot reserve", 0);
        close(n->fd);
        unlink(n->path);
        n->fd = -1;
        return s;
    }
    return ZT_OK;
}

static zt_status start_thread(struct shard_nvme *n)
{
    if (pthread_mutex_init(&n->mu, NULL) != 0)
        return zt_error_set(ZT_ERR_NOMEM, "cannot create the NVMe I/O lock");
    if (pthread_cond_init(&n->cv, NULL) != 0) {
        pthread_mutex_destroy(&n->mu);
        return zt_error_set(ZT_ERR_NOMEM, "cannot create the NVMe I/O condition");
    }
    if (pthread_create(&n->thread, NULL, io_thread, n) != 0) {
        pthread_cond_destroy(&n->cv);
        pthread_mutex_destroy(&n->mu);
        return zt_error_set(ZT_ERR_NOMEM, "cannot start the NVMe I/O thread");
    }
    n->thread_up = 1;
    return ZT_OK;
}

/* The largest trainable range the rank updates: no chunk is longer. */
static size_t longest_range(const struct shard_engine *e)
{
    size_t m = 0;
    for (int u = 0; u < e->part.n_units; u++) {
        const struct owned_range r = owned_range_of(e, u);
        if (e->part.units[u].trainable && r.hi - r.lo > m)
            m = r.hi - r.lo;
    }
    return m;
}

zt_status shard_nvme_open(struct shard_engine *e)
{
    const struct optimizer_ops *opt = e->cfg.optimizer;
    if (opt->whole_tensors || opt->fused_backward) /* the config refuses them, by key */
        return zt_error_set(ZT_ERR_CONFIG,
                            "offload_optimizer: nvme: %s's states cannot be "
                            "streamed (element-wise optimizers only)",
                            opt->name);
    struct shard_nvme *n = calloc(1, sizeof *n);
    if (!n)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the NVMe offload bookkeeping");
    e->nvme = n;
    n->fd = -1;
    n->written = e->cfg.nvme_written;
    n->written_arg = e->cfg.nvme_written_arg;
    n->held = e->policy.shard_states ? e->part.state_shard_total : e->part.state_padded_total;
    n->n_vectors = 1 + e->cfg.optimizer_states;
    n->esz[0] = sizeof(float);
    for (int k = 0; k < e->cfg.optimizer_states; k++)
        n->esz[1 + k] = zt_dtype_size(e->cfg.optimizer->state_dtype[k]);
    for (int v = 0; v < n->n_vectors; v++) {
        n->file_off[v] = n->file_bytes;
        n->file_bytes += n->held * n->esz[v];
    }
    const int depth = e->cfg.nvme_buffer_count > 0 ? e->cfg.nvme_buffer_count : 4;
    n->depth = depth < MAX_DEPTH ? depth : MAX_DEPTH;
    /* a buffer never exceeds the longest range, nor the window the file */
    const size_t want = e->cfg.nvme_buffer_elems, share = (n->held + n->depth - 1) / n->depth;
    size_t longest = longest_range(e);
    longest = share < longest ? share : longest;
    n->slot_elems = want > 0 && want < longest ? want : longest;
    if (n->slot_elems == 0)
        n->slot_elems = 1;
    for (int v = 1; v < n->n_vectors; v++)
        n->states_slot_bytes += n->slot_elems * n->esz[v];
    if (e->plan)
        return ZT_OK;
    ZT_TRY(open_file(n, e));
    return start_thread(n);
}

void shard_nvme_close(struct shard_engine *e)
{
    struct shard_nvme *n = e->nvme;
    if (!n)
        return;
    if (n->thread_up) {
        pthread_mutex_lock(&n->mu);
        n->stop = 1;
        pthread_cond_broadcast(&n->cv);
        pthread_mutex_unlock(&n->mu);
        pthread_join(n->thread, NULL);
        pthread_cond_destroy(&n->cv);
        pthread_mutex_destroy(&n->mu);
    }
    if (n->fd >= 0) { /* a clean end: the scratch goes */
        close(n->fd);
        unlink(n->path);
    }
    free(n->chunks);
    free(n);
    e->nvme = NULL;
}

void shard_nvme_window_bytes(const struct shard_engine *e, size_t *master, size_t *states)
{
    const struct shard_nvme *n = e->nvme;
    *master = (size_t)n->depth * n->slot_elems * sizeof(float);
    *states = (size_t)n->depth * n->states_slot_bytes;
}

void shard_nvme_set_window(struct shard_engine *e, void *master, void *states)
{
    e->nvme->master_win = master;
    e->nvme->states_win = states;
}

size_t shard_engine_nvme_bytes(const struct shard_engine *e)
{
    return e->nvme ? e->nvme->file_bytes : 0;
}

/* ---- a pass of the update --------------------------------------------------------- */

static zt_status add_chunk(struct shard_nvme *n, int u, const struct owned_range *r)
{
    if (n->n_chunks == n->cap_chunks) {
        const int cap = n->cap_chunks ? 2 * n->cap_chunks : 64;
        struct chunk *grown = realloc(n->chunks, (size_t)cap * sizeof *grown);
        if (!grown)
            return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the NVMe chunk list");
        n->chunks = grown;
        n->cap_chunks = cap;
    }
    n->chunks[n->n_chunks++] = (struct chunk){u, *r};
    return ZT_OK;
}

/* The rank's trainable ranges cut into chunks of at most slot_elems. */
static zt_status plan_chunks(struct shard_engine *e)
{
    struct shard_nvme *n = e->nvme;
    n->n_chunks = 0;
    for (int u = 0; u < e->part.n_units; u++) {
        const struct owned_range r = owned_range_of(e, u);
        if (!e->part.units[u].trainable)
            continue;
        for (size_t a = r.lo; a < r.hi; a += n->slot_elems) {
            const size_t b = r.hi - a < n->slot_elems ? r.hi : a + n->slot_elems;
            const struct owned_range piece = owned_range_piece(&r, a, b);
            ZT_TRY(add_chunk(n, u, &piece));
        }
    }
    return ZT_OK;
}

zt_status shard_nvme_pass_begin(struct shard_engine *e, int *n_chunks)
{
    struct shard_nvme *n = e->nvme;
    ZT_ASSERT(!n->busy && n->fd >= 0);
    ZT_TRY(plan_chunks(e));
    *n_chunks = n->n_chunks;
    n->busy = 1;
    n->updates = e->updates;
    n->hook_fired = 0;
    for (int i = 0; i < n->n_chunks && i < n->depth; i++)
        submit(n, 0, i);
    return ZT_OK;
}

zt_status shard_nvme_chunk_get(struct shard_engine *e, int i, int *unit, struct owned_range *r,
                               struct range_states *rs)
{
    struct shard_nvme *n = e->nvme;
    ZT_ASSERT(n->busy && i < n->n_chunks);
    ZT_TRY(wait_for(n, n->read_id[i % n->depth]));
    *unit = n->chunks[i].unit;
    *r = n->chunks[i].r;
    rs->master = slot_vector(n, i % n->depth, 0);
    for (int v = 1; v < n->n_vectors; v++)
        rs->states[v - 1] = slot_vector(n, i % n->depth, v);
    return ZT_OK;
}

void shard_nvme_chunk_put(struct shard_engine *e, int i)
{
    struct shard_nvme *n = e->nvme;
    submit(n, 1, i);
    if (i + n->depth < n->n_chunks)
        submit(n, 0, i + n->depth);
}

zt_status shard_nvme_pass_end(struct shard_engine *e)
{
    struct shard_nvme *n = e->nvme;
    const zt_status st = wait_for(n, -1);
    n->busy = 0;
    pthread_mutex_lock(&n->mu);
    n->err = 0; /* reported once */
    pthread_mutex_unlock(&n->mu);
    return st;
}

/* ---- state access outside the update ---------------------------------------------- */

zt_status shard_nvme_read(struct shard_engine *e, int v, size_t at, size_t count, void *dst)
{
    return vector_io(e->nvme, 0, v, at, count, dst);
}

zt_status shard_nvme_write(struct shard_engine *e, int v, size_t at, size_t count, const void *src)
{
    return vector_io(e->nvme, 1, v, at, count, (void *)src);
}

float *shard_nvme_scratch(const struct shard_engine *e, size_t *elems)
{
    ZT_ASSERT(!e->nvme->busy);
    *elems = e->nvme->slot_elems;
    return e->nvme->master_win;
}
