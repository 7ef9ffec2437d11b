/* coordinator/run_base.c — see run_base.h. */
#include "run_base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../formats/hf_weights.h"
#include "../formats/safetensors_set.h"

void run_base_note(struct run_session *s, const struct ckpt_base *loaded)
{
    const char *init_from = s->cfg.model.init_from;
    memset(&s->base, 0, sizeof s->base);
    s->base_digested = 0;
    if (s->table.lora.r == 0)
        return;
    if (loaded) {
        s->base = *loaded;
        s->base_digested = loaded->kind == CKPT_BASE_FILE; /* checked on loading */
    } else if (s->weights_from != RUN_WEIGHTS_INIT_FROM) {
        s->base.kind = CKPT_BASE_SEED;
        s->base.seed = s->cfg.run.seed;
    } else if (strlen(init_from) < sizeof s->base.path) {
        s->base.kind = CKPT_BASE_FILE;
        snprintf(s->base.path, sizeof s->base.path, "%s", init_from);
    }
}

/* The checksum and size of the files at `path` (a Hugging Face file, index
 * or folder). */
static zt_status digest(const char *path, uint64_t *checksum, uint64_t *bytes)
{
    struct safetensors_set *set;
    ZT_TRY(safetensors_set_open(path, &set));
    zt_status st = safetensors_set_digest(set, checksum, bytes);
    safetensors_set_close(set);
    return st;
}

zt_status run_base_digest(struct run_session *s)
{
    if (s->base.kind != CKPT_BASE_FILE || s->base_digested)
        return ZT_OK;
    ZT_TRY(digest(s->base.path, &s->base.checksum, &s->base.bytes));
    s->base_digested = 1;
    return ZT_OK;
}

zt_status run_base_check(const char *meta, const struct ckpt_base *b)
{
    uint64_t checksum, bytes;
    ZT_ASSERT(b->kind == CKPT_BASE_FILE);
    if (digest(b->path, &checksum, &bytes) != ZT_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", zt_error_message());
        return zt_error_set(ZT_ERR_CHECKPOINT,
                            "%s: the checkpoint holds only what trains; its base weights %s "
                            "(checksum 0x%016llx, %llu bytes) cannot be read: %s",
                            meta, b->path, (unsigned long long)b->checksum,
                            (unsigned long long)b->bytes, why);
    }
    if (checksum != b->checksum || bytes != b->bytes)
        return zt_error_set(ZT_ERR_CHECKPOINT,
                            "%s: the base weights %s have changed since the checkpoint was "
                            "written: checksum 0x%016llx (%llu bytes), the checkpoint's 0x%016llx "
                            "(%llu bytes); the adapters were trained on the old ones",
                            meta, b->path, (unsigned long long)checksum, (unsigned long long)bytes,
                            (unsigned long long)b->checksum, (unsigned long long)b->bytes);
    return ZT_OK;
}

/* The file's base, checked against the record first. */
static zt_status read_file(const char *step_dir, const struct ckpt_meta *m,
                           const struct param_table *base, float *params)
{
    char meta[4200];
    struct hf_weights_reader *r;
    snprintf(meta, sizeof meta, "%s/" CKPT_META_NAME, step_dir);
    ZT_TRY(run_base_check(meta, &m->base));
    ZT_TRY(hf_weights_open(m->base.path, base, &r));
    zt_status st = hf_weights_read(r, 0, base->n_params, params);
    hf_weights_close(r);
    return st;
}

/* Rounds the adapted base weights of t to the working precision, as the
 * run's frozen units held them under the adapters. */
static zt_status round_adapted(const char *precision, const struct param_table *t, float *params)
{
    enum zt_dtype working = ZT_F32;
    if (!zt_precision_from_name(precision, &working) || working == ZT_F32)
        return ZT_OK;
    size_t most = 1;
    for (int k = 0; k < t->lora.n_base_tensors; k++)
        most = t->tensors[k].numel > most ? t->tensors[k].numel : most;
    uint16_t *half = malloc(most * sizeof *half);
    if (!half)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate %zu 16-bit values", most);
    for (int k = 0; k < t->lora.n_base_tensors; k++) {
        const struct param_tensor *p = &t->tensors[k];
        if (p->adapter < 0)
            continue;
        precision_from_f32(working, params + p->offset, half, p->numel);
        precision_to_f32(working, half, params + p->offset, p->numel);
    }
    free(half);
    return ZT_OK;
}

zt_status run_base_read(const char *step_dir, const struct ckpt_meta *m,
                        const struct param_table *t, float *params)
{
    const struct param_table base = param_table_base(t);
    ZT_ASSERT(t->lora.r > 0 && m->base.kind != CKPT_BASE_STORED);
    if (m->base.kind == CKPT_BASE_FILE)
        ZT_TRY(read_file(step_dir, m, &base, params));
    else
        param_table_init(t, m->base.seed, 0, base.n_params, params);
    return round_adapted(m->precision, t, params);
}
