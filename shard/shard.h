/* shard/shard.h — ZeRO: who owns which part of the model states, and the
 * engine that keeps them, lends parameters to the model and takes the
 * optimizer step.
 *
 * Partition. The flat parameter space is split unit by unit (see
 * worker/model.h): every unit of n elements is padded to n_pad, a multiple
 * of world * ZT_SHARD_ALIGN, and rank r owns elements [r*n_pad/world,
 * (r+1)*n_pad/world) of it, the way FSDP splits flat parameters. Gathering a
 * unit is then one allgather with equal shares and reducing its gradients
 * one reduce-scatter. The padding (zeros that never train) is counted in
 * every shard's memory. The partition is a pure function of (table, world).
 *
 * Engine. Stage 0 keeps full parameters, full gradients and full optimizer
 * state on every rank and averages gradients with one allreduce per
 * optimizer step (none on the other micro steps).
 */
#ifndef ZT_SHARD_H
#define ZT_SHARD_H

#include <stddef.h>
#include <stdio.h>

#include "../comm/comm.h"
#include "../common/status.h"
#include "../worker/device.h"
#include "../worker/model.h"
#include "../worker/optimizer.h"

/* Elements per alignment quantum of a shard: 16 floats = 64 bytes. */
#define ZT_SHARD_ALIGN 16

struct shard_unit {
    size_t offset; /* first element of the unit in the flat space */
    size_t numel; /* real elements */
    size_t padded; /* numel rounded up to a multiple of world * ZT_SHARD_ALIGN */
    size_t shard; /* padded / world: what each rank owns */
};

struct shard_partition {
    int world;
    int n_units;
    struct shard_unit *units; /* owned */
    size_t shard_total; /* sum of unit shards: elements one rank owns */
};

/* Builds the partition of `t` over `world` ranks. Errors: ZT_ERR_NOMEM. */
zt_status shard_partition_build(const struct param_table *t, int world,
                                struct shard_partition *out);
void shard_partition_free(struct shard_partition *p);
/* Prints the partition (one line per unit and per rank's range). */
void shard_partition_print(const struct shard_partition *p, const struct param_table *t, FILE *f);

struct shard_engine_config {
    int stage; /* 0 only in this version */
    double clip; /* global-norm clipping threshold, 0 = off */
    uint64_t seed;
};

#define SHARD_MAX_ALLOCS 8

struct shard_alloc {
    enum ledger_category cat;
    size_t bytes;
    void *ptr; /* NULL under a plan-only ledger */
};

struct shard_engine {
    struct shard_engine_config cfg;
    const struct param_table *table; /* not owned */
    struct comm *comm; /* not owned */
    struct device *dev; /* not owned */
    struct shard_partition part;
    float *params, *grads; /* full flat space (stage 0) */
    float *m, *v; /* AdamW moments over what this rank updates */
    size_t n_params;
    long updates; /* optimizer steps taken */
    struct gpt2_unit_hooks hooks; /* what the model borrows through */
    struct shard_alloc allocs[SHARD_MAX_ALLOCS]; /* every counted allocation */
    int n_allocs;
};

/* Allocates the model states on `dev` (counted in the ledger) and
 * initialises the parameters from the seed. With a plan-only ledger only
 * counts. Errors: ZT_ERR_UNSUPPORTED (stage), ZT_ERR_NOMEM. */
zt_status shard_engine_create(const struct shard_engine_config *cfg, const struct param_table *t,
                              struct comm *comm, struct device *dev, struct shard_engine *out);
void shard_engine_destroy(struct shard_engine *e);

/* Averages the accumulated gradients over ranks, clips them by global norm,
 * takes one AdamW step with `hp` (hp->step is set by the engine) and zeroes
 * the gradients for the next accumulation. *grad_norm receives the norm
 * before clipping. Errors: ZT_ERR_COMM, ZT_ERR_NUMERIC (non-finite norm). */
zt_status shard_engine_step(struct shard_engine *e, struct adamw_hparams *hp, double *grad_norm);

/* Copies the full parameters into host memory dst[n_params] (collective). */
zt_status shard_engine_full_params(struct shard_engine *e, float *dst);

#endif
