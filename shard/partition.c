/* shard/partition.c — the unit-by-unit even split of the flat space. */
#include <stdlib.h>

#include "../worker/param_quant.h"
#include "shard.h"

zt_status shard_partition_build(const struct param_table *t, int world, struct shard_partition *out)
{
    return shard_partition_build_stage(t, world, NULL, out);
}

zt_status shard_partition_build_stage(const struct param_table *t, int world,
                                      const struct model_stage *stage, struct shard_partition *out)
{
    ZT_ASSERT(world >= 1);
    out->world = world;
    out->n_units = t->n_units;
    out->shard_total = 0;
    out->padded_total = 0;
    out->state_padded_total = 0;
    out->state_shard_total = 0;
    out->trainable_numel = 0;
    out->units = calloc((size_t)t->n_units, sizeof *out->units);
    if (!out->units)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the partition table");
    const size_t quantum = (size_t)world * ZT_SHARD_ALIGN;
    for (int u = 0; u < t->n_units; u++) {
        struct shard_unit *su = &out->units[u];
        su->offset = t->unit_offset[u];
        su->held = model_stage_holds(t, stage, u);
        su->numel = su->held ? param_table_unit_size(t, u) : 0;
        su->padded = (su->numel + quantum - 1) / quantum * quantum;
        su->shard = su->padded / (size_t)world;
        su->padded_offset = out->padded_total;
        su->shard_offset = out->shard_total;
        out->padded_total += su->padded;
        out->shard_total += su->shard;
        su->trainable = 0;
        for (int k = 0; k < t->n_tensors && su->held; k++)
            su->trainable |= t->tensors[k].unit == u && t->tensors[k].trainable;
        su->state_padded_offset = su->state_shard_offset = SHARD_NO_STATE;
        if (!su->trainable)
            continue;
        su->state_padded_offset = out->state_padded_total;
        su->state_shard_offset = out->state_shard_total;
        out->state_padded_total += su->padded;
        out->state_shard_total += su->shard;
        out->trainable_numel += su->numel;
    }
    return ZT_OK;
}

void shard_partition_pack(struct shard_partition *p, const struct param_table *t,
                          enum zt_dtype working)
{
    const size_t quantum = (size_t)p->world * ZT_SHARD_ALIGN * 4;
    p->padded_total = p->shard_total = p->packed_total = p->packed_shard_total = 0;
    for (int u = 0; u < p->n_units; u++) {
        struct shard_unit *su = &p->units[u];
        su->packed = su->held && param_quant_unit_packed(t, u);
        if (!su->packed) {
            su->padded_offset = p->padded_total;
            su->shard_offset = p->shard_total;
            p->padded_total += su->padded;
            p->shard_total += su->shard;
            continue;
        }
        ZT_ASSERT(!su->trainable);
        su->padded_offset = su->shard_offset = SHARD_NO_STATE;
        su->image = param_quant_unit_bytes(t, u, working);
        su->image_padded = (su->image + quantum - 1) / quantum * quantum;
        su->image_shard = su->image_padded / (size_t)p->world;
        su->image_offset = p->packed_total;
        su->image_shard_offset = p->packed_shard_total;
        p->packed_total += su->image_padded;
        p->packed_shard_total += su->image_shard;
    }
}

void shard_owned_range(const struct shard_partition *p, int rank, int u, size_t *lo, size_t *hi)
{
    const struct shard_unit *su = &p->units[u];
    size_t a = (size_t)rank * su->shard, b = a + su->shard;
    if (b > su->numel)
        b = su->numel;
    *lo = a;
    *hi = b > a ? b : a;
}

void shard_partition_free(struct shard_partition *p)
{
    free(p->units);
    p->units = NULL;
}

void shard_partition_print(const struct shard_partition *p, const struct param_table *t, FILE *f)
{
    fprintf(f, "partition: %zu parameters, %d units, %d ranks, %zu elements per rank\n",
            t->n_params, p->n_units, p->world, p->shard_total);
    for (int u = 0; u < p->n_units; u++) {
        const struct shard_unit *su = &p->units[u];
        fprintf(f, "  unit %3d  offset %10zu  numel %10zu  padded %10zu  shard %9zu%s\n", u,
                su->offset, su->numel, su->padded, su->shard, su->trainable ? "" : "  frozen");
        for (int r = 0; r < p->world; r++) {
            size_t lo = (size_t)r * su->shard, hi = lo + su->shard;
            size_t real_hi = hi < su->numel ? hi : su->numel;
            size_t real = real_hi > lo ? real_hi - lo : 0;
            fprintf(f, "    rank %d: unit elements [%zu, %zu) real %zu padding %zu\n", r, lo, hi,
                    real, su->shard - real);
        }
    }
}
