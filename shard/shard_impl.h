/* shard/shard_impl.h — what the engine's files share and nobody else
 * sees: element addressing in working-precision buffers and the rank's
 * range of a unit for the update. */
#ifndef ZT_SHARD_IMPL_H
#define ZT_SHARD_IMPL_H

#include "../common/clock.h"
#include "shard.h"

/* Profiling (shard_profile): the start of a timed region, and its end
 * adding the time to `phase`. Regions never nest, so each second is
 * counted once. */
static inline double prof_begin(const struct shard_engine *e)
{
    return e->profile ? zt_now_seconds() : 0.0;
}

static inline void prof_end(const struct shard_engine *e, enum shard_profile_phase phase, double t0)
{
    if (e->profile)
        e->profile->seconds[phase] += zt_now_seconds() - t0;
}

/* st = call, its time added to `phase`; and the form that returns the
 * failure from the enclosing function. */
#define PROF_CALL(e, phase, st, call)                                                              \
    do {                                                                                           \
        const double prof_t0_ = prof_begin(e);                                                     \
        (st) = (call);                                                                             \
        prof_end((e), (phase), prof_t0_);                                                          \
    } while (0)

#define PROF_TRY(e, phase, call)                                                                   \
    do {                                                                                           \
        zt_status prof_st_;                                                                        \
        PROF_CALL(e, phase, prof_st_, call);                                                       \
        ZT_TRY(prof_st_);                                                                          \
    } while (0)

/* Element i of a working-precision buffer. */
static inline void *at(const struct shard_engine *e, void *base, size_t i)
{
    return (char *)base + i * e->esz;
}

/* Element i of optimizer state vector k, at its own element size. */
static inline void *state_elem(const struct shard_engine *e, int k, size_t i)
{
    return (char *)e->states[k] + i * zt_dtype_size(e->cfg.optimizer->state_dtype[k]);
}

/* Element i of a gradient buffer (grad_type). */
static inline void *gat(const struct shard_engine *e, void *base, size_t i)
{
    return (char *)base + i * e->gsz;
}

static inline int is_16bit(const struct shard_engine *e)
{
    return e->cfg.precision != ZT_F32;
}

/* Whether the grads are 16-bit (the backward then accumulates into fp32
 * views of them). */
static inline int grads_16bit(const struct shard_engine *e)
{
    return e->grad_type != ZT_F32;
}

/* The update's fp32 target is a master copy apart from the working
 * params: under 16-bit precision, and under offload (the working params
 * are on the device, the update on the host). */
static inline int has_master(const struct shard_engine *e)
{
    return is_16bit(e) || e->offload;
}

/* Offload onto a device whose memory is host memory (NVMe offload on the
 * CPU): the update reads the reduced gradients and writes the working
 * params where they are, since staging them would copy host memory into
 * host memory. offload_force keeps the staging, which is what it tests. */
static inline int offload_in_place(const struct shard_engine *e)
{
    return e->offload && e->be->host_memory && !e->cfg.offload_force;
}

/* Whether the update stages gradients and working params in host memory
 * (ZeRO-Offload from a GPU, or forced). */
static inline int offload_staged(const struct shard_engine *e)
{
    return e->offload && !offload_in_place(e);
}

/* The rank's range of unit u for the update: unit elements [lo, hi), and
 * the element offset of lo in the gradient buffer and in the fp32 update
 * target / moments (SHARD_NO_STATE for a frozen unit), and in the working
 * params. */
struct owned_range {
    size_t lo, hi, grad_off, state_off, working_off;
};

static inline struct owned_range owned_range_of(const struct shard_engine *e, int u)
{
    const struct shard_unit *su = &e->part.units[u];
    struct owned_range r;
    if (!e->policy.shard_states) {
        r.lo = 0;
        r.hi = su->numel;
        r.working_off = su->padded_offset;
        r.grad_off = r.state_off = su->state_padded_offset;
        return r;
    }
    shard_owned_range(&e->part, e->cfg.rank, u, &r.lo, &r.hi);
    r.grad_off = r.state_off = su->state_shard_offset;
    r.working_off = !e->policy.shard_params ? su->padded_offset + r.lo : su->shard_offset;
    return r;
}

/* Elements [a, b) of range r (r->lo <= a <= b <= r->hi) as a range of its
 * own, its offsets moved along. */
static inline struct owned_range owned_range_piece(const struct owned_range *r, size_t a, size_t b)
{
    const size_t skip = a - r->lo;
    return (struct owned_range){a, b, r->grad_off + skip, r->state_off + skip,
                                r->working_off + skip};
}

/* The sum of squares of unit u's gradient elements [lo, hi) at g (g: the
 * element lo), times scale squared, for the norm: a tensor cut over the
 * tensor-parallel group counted whole, one every rank holds whole 1/T
 * (its gradient is the same on every rank); summed over the group, that
 * is the whole model's. */
zt_status shard_tensor_sumsq(struct shard_engine *e, int u, size_t lo, size_t hi, const void *g,
                             double scale, double *sumsq);

/* Whole-tensor optimizers' statistics for one step: round q's vector of
 * n[q] doubles over every trainable tensor (workspace). Allocated and freed
 * around every step, a plan's included, so the ledger counts them; none for
 * element-wise optimizers. Errors: ZT_ERR_NOMEM. */
struct shard_update_stats {
    double *v[OPTIMIZER_MAX_ROUNDS]; /* in state memory: the pieces' ops write them */
    size_t n[OPTIMIZER_MAX_ROUNDS];
    /* Offload: device copies the allreduce runs on (a communicator works
     * on the compute backend's memory); NULL without offload. */
    double *dev[OPTIMIZER_MAX_ROUNDS];
};
zt_status shard_update_stats_alloc(struct shard_engine *e, struct shard_update_stats *out);
void shard_update_stats_free(struct shard_engine *e, struct shard_update_stats *s);

/* What the update works with besides the gradients, allocated by the
 * step in state memory: `tmp` (max_update_range floats) stages a unit's
 * fp32 gradients under 16-bit precision for whole-tensor optimizers, and
 * under offload host_grads (the reduced gradients' layout) receives the
 * gradients of the rank's ranges and host_working (max_update_range
 * working-precision elements) one unit's updated working params on their
 * way to the device. */
struct shard_update_bufs {
    float *tmp;
    struct shard_update_stats stats;
    void *host_grads, *host_working;
};

/* The optimizer update over the rank's ranges (shard/update.c), with the
 * reduced gradients g (working precision, at the layout reduced_count
 * describes, in the engine's device memory) times gscale. Under 16-bit
 * precision or offload the updated master is cast into the working
 * parameters. Errors: those of the ops and copies, and of the statistics'
 * allreduce for whole-tensor optimizers (ZT_ERR_COMM). */
zt_status shard_update_owned(struct shard_engine *e, void *g, float gscale,
                             struct shard_update_bufs *b, const struct optimizer_hparams *hp);

/* Fused-backward optimizers: the reduced gradient of unit u's range r
 * (working precision, element r->lo first) measured into e->fused.sumsq
 * and, when the step updates, applied to the rank's range of the unit; tmp
 * holds r->hi - r->lo floats. Errors: those of the ops. */
zt_status shard_update_fused_unit(struct shard_engine *e, int u, void *reduced,
                                  const struct owned_range *r, float *tmp);

/* Whole-tensor optimizers: where each trainable tensor's replicated state
 * starts in e->tensor_state (SHARD_NO_STATE for frozen tensors), and the
 * total, set in out[n_tensors]. */
size_t shard_tensor_state_layout(const struct shard_engine *e, size_t *out);

/* ---- ZeRO-Offload (shard/offload.c) ---- */

/* Whether an engine of cfg on `be` offloads its states. */
int shard_offload_wanted(const struct shard_engine_config *cfg, const struct compute_backend *be);
/* Opens the host backend (on the engine's ledger; pinned when asked and
 * hooked) and points state_dev / state_ops at it. Errors: those of
 * compute_backend_open, ZT_ERR_NOMEM. */
zt_status shard_offload_open(struct shard_engine *e);
/* Closes it (after every host buffer was freed); no-op without offload. */
void shard_offload_close(struct shard_engine *e);
/* Allocates / frees `bytes` of state memory counted under cat, and under
 * offload in the engine's host bytes. Errors: those of device_alloc. */
zt_status shard_state_alloc(struct shard_engine *e, enum ledger_category cat, size_t bytes,
                            const char *what, void **out);
void shard_state_free(struct shard_engine *e, enum ledger_category cat, size_t bytes, void *p);
/* Copies the reduced gradients g (device) of the rank's trainable ranges
 * into host[] laid out alike. Errors: the device copy's. */
zt_status shard_offload_pull_grads(struct shard_engine *e, const void *g, void *host);
/* Writes range r's n working-precision elements host[n] into the device
 * working params. Errors: the device copy's. */
zt_status shard_offload_push_working(struct shard_engine *e, const struct owned_range *r,
                                     const void *host);
/* Sums (or maxes) host[n] over the engine's comm through dev[n] (device
 * memory, what the communicator works on). Errors: ZT_ERR_COMM, copies'. */
zt_status shard_offload_allreduce(struct shard_engine *e, double *host, double *dev, size_t n,
                                  enum comm_op op);

/* ---- ZeRO-Infinity (shard/nvme.c) ---- */

/* Where the update finds one range's fp32 master and optimizer states
 * (element lo of the range first): the engine's vectors, or under NVMe
 * offload a window slot. */
struct range_states {
    float *master;
    void *states[OPTIMIZER_MAX_STATES];
};

/* Sizes the window and the file from the partition and cfg (nvme_buffer_*);
 * unless a plan, creates the file (truncated, its bytes reserved) and the
 * I/O thread. Errors: ZT_ERR_CONFIG naming the file for a missing or
 * unwritable folder or a full disk, ZT_ERR_IO, ZT_ERR_NOMEM. */
zt_status shard_nvme_open(struct shard_engine *e);
/* Stops the thread, closes and removes the file; no-op without NVMe. */
void shard_nvme_close(struct shard_engine *e);
/* The window's bytes (allocated by the engine as its master and states),
 * and where they were put. */
void shard_nvme_window_bytes(const struct shard_engine *e, size_t *master, size_t *states);
void shard_nvme_set_window(struct shard_engine *e, void *master, void *states);
/* A streamed pass over the rank's trainable ranges, in chunks of at most
 * the window's buffer: begin (reads ahead), then for i in [0, n_chunks)
 * get(i) (waits for chunk i; its unit, range piece and states in the
 * window) and put(i) (writes it behind), then end (waits for every
 * write) — end also after a failure. Errors: the file's (as open's),
 * ZT_ERR_NOMEM. */
zt_status shard_nvme_pass_begin(struct shard_engine *e, int *n_chunks);
zt_status shard_nvme_chunk_get(struct shard_engine *e, int i, int *unit, struct owned_range *r,
                               struct range_states *rs);
void shard_nvme_chunk_put(struct shard_engine *e, int i);
zt_status shard_nvme_pass_end(struct shard_engine *e);
/* Elements [at, at + count) of vector v (0 the master, k + 1 optimizer
 * state k; at in state_off's coordinates) to dst / from src in host
 * memory, outside a pass. Errors: the file's. */
zt_status shard_nvme_read(struct shard_engine *e, int v, size_t at, size_t count, void *dst);
zt_status shard_nvme_write(struct shard_engine *e, int v, size_t at, size_t count, const void *src);
/* The window's first master buffer, *elems floats, as scratch outside a
 * pass (the master read back to rebuild the working params). */
float *shard_nvme_scratch(const struct shard_engine *e, size_t *elems);

#endif
