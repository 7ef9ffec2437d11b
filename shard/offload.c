/* shard/offload.c — ZeRO-Offload: the optimizer's side of the model states
 * in host memory and the update on the CPU.
 *
 * Why: the fp32 master and the optimizer's states are 12 of AdamW's 16
 * bytes per parameter under mixed precision; keeping them in host memory
 * leaves the GPU the working params and gradients (DeepSpeed's
 * offload_optimizer: {device: cpu}). The update is memory bound and runs
 * at host bandwidth on the CPU; what crosses the bus per step is the
 * reduced gradient of the rank's ranges (down) and the updated working
 * params of those ranges (up), each in the working precision.
 *
 * How: the engine opens a second compute backend, the CPU's, on its own
 * ledger, and allocates master, states, tensor_state and the update's
 * staging through it (state_dev); the update's ops are that backend's
 * (state_ops), the same op table a CPU-only run updates with, so the
 * offloaded update is bit for bit the non-offloaded one. The gradient
 * norm still runs on the device, where the gradients are.
 *
 * Pinned memory: with offload_pin_memory and a hook (cfg.pinned), the
 * host device's table is the CPU's with the hook's allocator, so that the
 * copies can run by DMA; the hook lives in the device's state, which the
 * CPU table does not use otherwise.
 */
#include <stdlib.h>

#include "shard_impl.h"

struct shard_offload {
    struct compute_backend host;      /* the CPU bundle on the engine's ledger */
    struct device_backend_ops pinned; /* the CPU table with pin's allocator */
    struct shard_pinned_alloc pin;    /* cfg.pinned, copied */
    size_t bytes, peak;               /* host bytes held now, and at most */
};

static zt_status pinned_alloc(const struct device *d, size_t bytes, void **out)
{
    const struct shard_pinned_alloc *pin = d->state;
    return pin->alloc(bytes, out);
}

static void pinned_free(const struct device *d, void *p)
{
    const struct shard_pinned_alloc *pin = d->state;
    pin->free(p);
}

int shard_offload_wanted(const struct shard_engine_config *cfg, const struct compute_backend *be)
{
    return cfg->offload_optimizer && (!be->host_memory || cfg->offload_force || cfg->nvme_path);
}

/* The host device allocates through the pinned hook (CPU table otherwise:
 * memset and copies are plain host memory either way). A plan allocates
 * nothing, so it keeps the CPU table. */
static void use_pinned(struct shard_offload *o, const struct shard_pinned_alloc *pin)
{
    /* the CPU device's host cache goes (nothing was allocated from it yet):
     * pin's allocator keeps its own blocks */
    if (o->host.dev.ops->close)
        o->host.dev.ops->close(&o->host.dev);
    o->pin = *pin;
    o->pinned = *o->host.dev.ops;
    o->pinned.name = "cpu (pinned)";
    o->pinned.open = NULL;
    o->pinned.close = NULL;
    o->pinned.alloc = pinned_alloc;
    o->pinned.free = pinned_free;
    o->host.dev.ops = &o->pinned;
    o->host.dev.state = &o->pin;
}

zt_status shard_offload_open(struct shard_engine *e)
{
    if (e->cfg.optimizer->fused_backward)
        return zt_error_set(ZT_ERR_CONFIG,
                            "offload_optimizer: %s updates inside the backward, on the device; "
                            "it cannot be offloaded",
                            e->cfg.optimizer->name);
    struct shard_offload *o = calloc(1, sizeof *o);
    if (!o)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the offload bookkeeping");
    e->offload = o;
    ZT_TRY(compute_backend_open("cpu", -1, e->dev->ledger, &o->host));
    if (e->cfg.offload_pin_memory && e->cfg.pinned && device_is_real(&o->host.dev))
        use_pinned(o, e->cfg.pinned);
    e->state_dev = &o->host.dev;
    e->state_ops = o->host.ops;
    return ZT_OK;
}

void shard_offload_close(struct shard_engine *e)
{
    if (!e->offload)
        return;
    /* the pinned table has no close hook; the CPU one releases its cache */
    compute_backend_close(&e->offload->host);
    free(e->offload);
    e->offload = NULL;
}

zt_status shard_state_alloc(struct shard_engine *e, enum ledger_category cat, size_t bytes,
                            const char *what, void **out)
{
    ZT_TRY(device_alloc(e->state_dev, cat, bytes, what, out));
    if (e->offload) {
        e->offload->bytes += bytes;
        if (e->offload->bytes > e->offload->peak)
            e->offload->peak = e->offload->bytes;
    }
    return ZT_OK;
}

void shard_state_free(struct shard_engine *e, enum ledger_category cat, size_t bytes, void *p)
{
    device_free(e->state_dev, cat, bytes, p);
    if (e->offload)
        e->offload->bytes -= bytes;
}

void shard_engine_host_bytes(const struct shard_engine *e, size_t *current, size_t *peak)
{
    *current = e->offload ? e->offload->bytes : 0;
    *peak = e->offload ? e->offload->peak : 0;
}

zt_status shard_offload_pull_grads(struct shard_engine *e, const void *g, void *host)
{
    for (int u = 0; u < e->part.n_units; u++) {
        const struct owned_range r = owned_range_of(e, u);
        if (!e->part.units[u].trainable || r.hi == r.lo)
            continue;
        ZT_TRY(e->dev->ops->copy_to_host(e->dev, gat(e, host, r.grad_off),
                                         gat(e, (void *)g, r.grad_off), (r.hi - r.lo) * e->gsz));
    }
    return ZT_OK;
}

zt_status shard_offload_push_working(struct shard_engine *e, const struct owned_range *r,
                                     const void *host)
{
    return e->dev->ops->copy_from_host(e->dev, at(e, e->params, r->working_off), host,
                                       (r->hi - r->lo) * e->esz);
}

zt_status shard_offload_allreduce(struct shard_engine *e, double *host, double *dev, size_t n,
                                  enum comm_op op)
{
    const size_t bytes = n * sizeof(double);
    ZT_TRY(e->dev->ops->copy_from_host(e->dev, dev, host, bytes));
    ZT_TRY(comm_allreduce(e->comm, dev, n, ZT_F64, op));
    return e->dev->ops->copy_to_host(e->dev, host, dev, bytes);
}
