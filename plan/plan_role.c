/* plan/plan_role.c — one rank of a layout, built on a plan-only
 * ledger with training's own code (see plan.h). */
#include "plan.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/fileio.h"
#include "../worker/model_family.h"
#include "../worker/optimizer.h"
#include "../worker/tensor_parallel.h"
#include "../coordinator/pipeline.h"
#include "../coordinator/run_checkpoint.h"
#include "../coordinator/session.h"

struct zt_config plan_config(const struct zt_config *base, const struct plan_layout *l)
{
    struct zt_config c = *base;
    c.tensor_parallel.size = l->tp;
    c.pipeline.stages = l->pp;
    c.pipeline.virtual_stages = l->vp > 1 ? l->vp : 1;
    c.context_parallel.size = plan_context_size(l);
    c.zero.stage = l->zero_stage;
    c.train_micro_batch_size_per_gpu = l->micro_batch;
    c.gradient_accumulation_steps = l->accum;
    c.train_batch_size = 0;
    c.activation_checkpointing.enabled = l->ckpt_every > 0;
    c.activation_checkpointing.every_n_blocks = l->ckpt_every > 0 ? l->ckpt_every : 1;
    c.tensor_parallel.sequence_parallel = l->sequence_parallel;
    return c;
}

/* The token embedding's rows and width: tensor 0 of every family. */
static void embedding_shape(const struct param_table *whole, int *vocab, int *embd)
{
    *vocab = whole->tensors[0].rows;
    *embd = whole->tensors[0].cols;
}

/* The linear weights of the first block (all blocks are alike), their
 * adapters, and the head, whose shapes set the GEMMs' rates
 * (plan_matmul_rate). */
static void weights_of(const struct param_table *t, struct plan_model *out)
{
    for (int k = 0; k < t->n_tensors; k++) {
        const struct param_tensor *w = &t->tensors[k];
        const struct param_tensor *base = w->adapts >= 0 ? &t->tensors[w->adapts] : w;
        const struct plan_weight pw = {
            .out = w->rows, .in = w->cols, .split = w->tp_split, .trainable = w->trainable};
        if (w->linear == PARAM_LINEAR_HEAD)
            out->head = pw;
        else if (base->linear == PARAM_LINEAR && base->unit == 1 &&
                 out->n_weights < PLAN_MAX_WEIGHTS)
            out->weights[out->n_weights++] = pw;
    }
    if (out->head.out == 0) /* tied: the head is the embedding, cut by vocabulary rows */
        out->head = (struct plan_weight){.out = out->vocab,
                                         .in = out->embd,
                                         .split = TP_ROWS,
                                         .trainable = t->tensors[0].trainable};
}

/* Bytes of the .safetensors files model.init_from names: the file, or
 * those of its folder (an index's folder); 0 where none can be listed. */
static double weights_file_bytes(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return 0.0;
    if (S_ISREG(st.st_mode) && !zt_ends_with(path, ".json"))
        return (double)st.st_size;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    if (S_ISREG(st.st_mode)) { /* an index: its shards beside it */
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            strcpy(dir, ".");
    }
    DIR *d = opendir(dir);
    double bytes = 0.0;
    for (struct dirent *de; d && (de = readdir(d)) != NULL;) {
        char file[8192];
        snprintf(file, sizeof file, "%s/%s", dir, de->d_name);
        if (zt_ends_with(de->d_name, ".safetensors") && stat(file, &st) == 0 && S_ISREG(st.st_mode))
            bytes += (double)st.st_size;
    }
    if (d)
        closedir(d);
    return bytes;
}

zt_status plan_model_of(const struct zt_config *c, struct plan_model *out)
{
    struct param_table t;
    ZT_TRY(session_build_table(c, &t));
    memset(out, 0, sizeof *out);
    out->layers = param_table_blocks(&t);
    out->heads = c->model.n_head;
    out->kv_heads = c->model.n_kv_head > 0 ? c->model.n_kv_head : c->model.n_head;
    embedding_shape(&t, &out->vocab, &out->embd);
    out->seq = c->data.seq_len;
    out->flops_per_token = t.family->flops_per_token(&t, c->data.seq_len);
    out->n_params = t.n_params;
    /* the final norm's unit (L + 1) holds one norm's vectors (and may hold
     * an untied head) */
    const int final_norm = out->layers + 1;
    for (int k = 0; k < t.n_tensors; k++)
        out->norm_vectors +=
            t.tensors[k].unit == final_norm && t.tensors[k].numel == (size_t)out->embd;
    out->sequence_parallel = c->tensor_parallel.sequence_parallel;
    out->prefetch_depth = c->zero.stage3_prefetch_depth;
    out->shard_group_size = c->zero.shard_group_size;
    out->hpz_partition_size = c->zero.hpz_partition_size;
    const struct optimizer_ops *o = optimizer_find(c->optimizer.type);
    snprintf(out->optimizer, sizeof out->optimizer, "%s", o ? o->name : c->optimizer.type);
    out->passes = o && o->fused_backward && config_norm_before_update(c) ? 2 : 1;
    weights_of(&t, out);
    if (c->model.init_from)
        out->weights_file_esz =
            weights_file_bytes(c->model.init_from) / (double)param_table_base(&t).n_params;
    param_table_free(&t);
    return ZT_OK;
}

/* A model's linear weights per token, as 2 x parameters FLOPs per
 * product: the blocks' (all, and the frozen ones, whose weight gradient is
 * never formed), their LoRA adapters', and the head's. */
struct linear_params {
    double block, block_frozen, block_adapters, head_adapters;
    int head_trainable;
};

static struct linear_params linear_params_of(const struct param_table *whole)
{
    const int L = param_table_blocks(whole);
    struct linear_params p = {.head_trainable = whole->tensors[0].trainable};
    for (int k = 0; k < whole->n_tensors; k++) {
        const struct param_tensor *w = &whole->tensors[k];
        const double n = (double)w->rows * w->cols;
        if (w->linear == PARAM_LINEAR_HEAD)
            p.head_trainable = w->trainable;
        if (w->linear == PARAM_LINEAR && w->unit >= 1 && w->unit <= L) {
            p.block += n;
            p.block_frozen += w->trainable ? 0.0 : n;
        }
        if (w->adapts >= 0) {
            const int head = whole->tensors[w->adapts].linear == PARAM_LINEAR_HEAD;
            *(head ? &p.head_adapters : &p.block_adapters) += n;
        }
    }
    return p;
}

/* Matmul FLOPs of one micro batch on a rank of stage st, and in
 * *attention those of them that are attention's. A weight of n
 * parameters costs 2n a token in each of its forward, input gradient and
 * weight gradient (none when frozen: a LoRA base), and 2n again for a
 * recomputed forward under checkpointing; attention's products (the rest
 * of the family's count) a third more when recomputed. The head's 6 V C
 * (4 V C frozen) per token goes to the last stage, at the padded
 * vocabulary. All over the tensor-parallel ranks. */
static double stage_flops(const struct zt_config *c, const struct param_table *t,
                          const struct model_stage *st, double *attention)
{
    const struct param_table *whole = param_table_whole(t);
    int vocab, embd;
    embedding_shape(whole, &vocab, &embd);
    const int L = param_table_blocks(whole);
    const struct linear_params p = linear_params_of(whole);
    const double rc = c->activation_checkpointing.enabled ? 1.0 : 0.0;
    const double family = whole->family->flops_per_token(whole, c->data.seq_len);
    const double attn = (family - 6.0 * vocab * embd - 6.0 * p.block) / L * (1.0 + rc / 3.0);
    const double block = attn + (2.0 * (p.block + p.block_adapters) * (2.0 + rc) +
                                 2.0 * (p.block - p.block_frozen + p.block_adapters)) /
                                    L;
    const double head =
        (double)param_table_vocab_padded(t) * embd * (p.head_trainable ? 6.0 : 4.0) +
        6.0 * p.head_adapters;
    const double per_token = model_stage_blocks(st) * block + (st->last ? head : 0.0);
    const double tokens = (double)c->train_micro_batch_size_per_gpu * c->data.seq_len /
                          param_table_tp_size(t) / (t->cp_size > 1 ? t->cp_size : 1);
    *attention = model_stage_blocks(st) * attn * tokens;
    return per_token * tokens;
}

/* A micro batch's activations on stage st, chunk by chunk, as an
 * instance without checkpointing allocates them. */
static size_t act_pass_bytes(const struct zt_config *c, const struct param_table *t,
                             const struct model_stage *st)
{
    const int v = model_stage_chunks(st), L = param_table_blocks(t);
    const int T = c->data.seq_len / (t->cp_size > 1 ? t->cp_size : 1);
    size_t bytes = 0;
    for (int j = 0; j < v; j++) {
        const struct model_stage chunk = v > 1 ? model_stage_chunk(st, j, L) : *st;
        bytes += t->family->activation_bytes(t, c->train_micro_batch_size_per_gpu, T, 0, &chunk);
    }
    return bytes;
}

/* Bytes of the full units one micro batch's passes acquire, in order
 * (what stage 3 gathers: a unit used twice, as a tied embedding is, twice),
 * into bytes[0] (the forward's) and bytes[1] (the backward's); bytes[2]:
 * the forward's distinct units (what hpZ gathers from the shard group);
 * *decoded: the elements of the 4-bit units among them. */
static void pass_unit_bytes(const struct shard_engine *e, size_t bytes[3], size_t *decoded)
{
    *decoded = 0;
    int order[MODEL_MAX_UNITS + 4];
    char seen[MODEL_MAX_UNITS + 4] = {0};
    const enum model_pass passes[] = {MODEL_PASS_FORWARD, MODEL_PASS_BACKWARD};
    bytes[2] = 0;
    for (int p = 0; p < 2; p++) {
        bytes[p] = 0;
        const int n = param_table_unit_order(e->table, &e->pipeline_stage, passes[p], order,
                                             MODEL_MAX_UNITS + 4);
        for (int i = 0; i < n; i++) {
            const struct shard_unit *su = &e->part.units[order[i]];
            const size_t b = su->packed ? su->image_padded : su->padded * e->esz;
            bytes[p] += b;
            *decoded += su->packed ? su->numel : 0;
            if (p == 0 && !seen[order[i]]++)
                bytes[2] += b;
        }
    }
}

static void read_engine(const struct shard_engine *e, struct plan_role *out)
{
    size_t pass[3];
    pass_unit_bytes(e, pass, &out->decoded_elems);
    out->pass_bytes = pass[0] + pass[1];
    out->pass_bytes_forward = pass[0];
    out->pass_bytes_distinct = pass[2];
    out->padded = e->part.padded_total;
    out->trainable_padded = e->part.state_padded_total;
    out->trainable_shard = e->part.state_shard_total;
    out->esz = e->esz;
    out->grad_esz = e->gsz;
    out->act_esz = zt_dtype_size(e->table->compute);
    out->nvme_bytes = shard_engine_nvme_bytes(e);
    out->state_bytes = 0;
    for (int k = 0; k < e->n_allocs; k++)
        out->state_bytes += e->allocs[k].bytes;
    const struct shard_unit *emb = &e->part.units[0];
    out->tied_exchange = e->tie_peer >= 0;
    out->tied_elems = e->policy.shard_states ? emb->shard : emb->padded;
}

/* model.init_from's load on the plan's ledger, and what it holds then. */
static zt_status plan_load(const struct zt_config *c, const struct param_table *t,
                           struct shard_engine *e, const struct compute_backend *be,
                           struct plan_role *out)
{
    if (!c->model.init_from)
        return ZT_OK;
    struct ledger *ledger = e->dev->ledger;
    ZT_TRY(run_checkpoint_plan_import(c, t, e, ledger));
    struct device_memory_info dm;
    ZT_TRY(device_memory_info(&be->dev, &dm));
    run_checkpoint_import_work(t, e, &out->load_work);
    memcpy(out->loaded_peak, ledger->peak, sizeof out->loaded_peak);
    out->loaded_total_peak = ledger->total_peak;
    out->loaded_cache_kept = dm.resident_peak - dm.held_peak;
    return ZT_OK;
}

/* The engine, the stage's instances in flight and one planned step. */
static zt_status plan_rank(const struct zt_config *c, const struct plan_layout *l,
                           const struct param_table *t, const struct model_stage *st,
                           const struct compute_backend *be, struct plan_role *out)
{
    struct shard_engine engine;
    struct shard_engine_config ec =
        session_engine_config(c, l->zero_stage, l->dp * plan_context_size(l), 0);
    ec.pipeline_stage = l->pp > 1 ? st : NULL;
    ec.defer_init = c->model.init_from != NULL; /* as a run: the file fills the base */
    ZT_TRY(shard_engine_create(&ec, t, NULL, be, &engine));
    shard_engine_plan_pipeline(&engine, l->pp);
    /* a pipeline's 1F1B keeps at most P - stage micro batches in flight
     * (interleaved: each chunk as many as its schedule has; a chunk's
     * first instance with its own scratch) */
    const int v = model_stage_chunks(st), L = param_table_blocks(t);
    int per_chunk[PLAN_MAX_CHUNKS], first[PLAN_MAX_CHUNKS];
    ZT_ASSERT(v <= PLAN_MAX_CHUNKS);
    out->chunks = v;
    out->slots = 0;
    for (int j = 0; j < v; j++) {
        per_chunk[j] =
            l->pp > 1 ? pipeline_slots(c->pipeline.schedule, l->pp, out->stage, l->accum, v, j) : 1;
        first[j] = out->slots;
        out->slots += per_chunk[j];
    }
    struct model **slots = calloc((size_t)out->slots, sizeof *slots);
    zt_status s =
        slots ? ZT_OK : zt_error_set(ZT_ERR_NOMEM, "cannot plan %d instances", out->slots);
    for (int j = 0; j < v && s == ZT_OK; j++) {
        const struct model_stage chunk = v > 1 ? model_stage_chunk(st, j, L) : *st;
        for (int k = 0; k < per_chunk[j] && s == ZT_OK; k++) {
            s = session_model_create_for(c, t, be, &chunk, k ? slots[first[j]] : NULL,
                                         &slots[first[j] + k]);
            if (s == ZT_OK && j == 0 && k == 0) /* a run loads with one instance made */
                s = plan_load(c, t, &engine, be, out);
        }
    }
    if (s == ZT_OK) {
        struct model *chunk_models[PLAN_MAX_CHUNKS];
        for (int j = 0; j < v; j++)
            chunk_models[j] = slots[first[j]];
        read_engine(&engine, out);
        out->boundary = (size_t)model_sp_rows(slots[0]) * (size_t)c->model.n_embd;
        s = session_plan_chunks_step(chunk_models, v, &engine, l->accum);
    }
    for (int k = out->slots - 1; k >= 0 && slots; k--)
        model_destroy(slots[k]);
    free(slots);
    shard_engine_destroy(&engine);
    return s;
}

zt_status plan_role(const struct zt_config *base, const struct plan_layout *l, int stage,
                    struct plan_role *out)
{
    const struct zt_config c = plan_config(base, l);
    struct ledger ledger;
    struct compute_backend be;
    struct param_table t;
    struct model_stage st;
    memset(out, 0, sizeof *out);
    ledger_init(&ledger, 1);
    ZT_TRY(session_rank_table(&c, l->tp, 0, &t));
    t.cp_size = plan_context_size(l); /* the rank's T/C rows of each sequence */
    char why[192];
    t.compute = session_compute_type(&c, NULL, why, sizeof why); /* the hardware planned for */
    zt_status s = session_stage_of(&c, &t, stage, &st);
    if (s == ZT_OK)
        s = compute_backend_open("cpu", -1, &ledger, &be); /* plans need no device */
    if (s != ZT_OK) {
        param_table_free(&t);
        return s;
    }
    out->stage = stage;
    out->first = st.first;
    out->last = st.last;
    out->blocks = model_stage_blocks(&st);
    out->flops = stage_flops(&c, &t, &st, &out->attention_flops);
    out->act_pass_bytes = act_pass_bytes(&c, &t, &st);
    out->units = out->blocks + st.first + st.last;
    s = plan_rank(&c, l, &t, &st, &be, out);
    memcpy(out->peak, ledger.peak, sizeof out->peak);
    out->total_peak = ledger.total_peak;
    struct device_memory_info dm;
    if (s == ZT_OK)
        s = device_memory_info(&be.dev, &dm);
    if (s == ZT_OK)
        out->cache_kept = dm.resident_peak - dm.held_peak;
    compute_backend_close(&be);
    param_table_free(&t);
    return s;
}

zt_status plan_stage_blocks(const struct zt_config *base, const struct plan_layout *l, int *blocks)
{
    const struct zt_config c = plan_config(base, l);
    struct param_table t;
    struct model_stage st;
    ZT_TRY(session_rank_table(&c, l->tp, 0, &t));
    zt_status s = ZT_OK;
    for (int p = 0; p < l->pp && s == ZT_OK; p++) {
        s = session_stage_of(&c, &t, p, &st);
        blocks[p] = model_stage_blocks(&st);
    }
    param_table_free(&t);
    return s;
}
