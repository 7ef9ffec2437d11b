/* coordinator/run_export.c — see run_export.h. One process reads every
 * rank's shard of the checkpoint (no MPI) and its base when kept
 * elsewhere, rebuilds the table and the full fp32 weights in the flat
 * order (run_checkpoint_read_model) and hands them to the writer of what
 * was asked; the tokenizer's files and ids follow.
 */
#include "run_export.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/fileio.h"
#include "../config/yaml_tree.h"
#include "../data/data.h"
#include "../formats/hf_weights.h"
#include "../formats/peft_adapter.h"
#include "run_checkpoint.h"

/* What one export writes from, and where. */
struct export_job {
    const struct run_export_request *rq;
    char step_dir[4096];
    struct ckpt_meta meta;
    struct param_table table;
    float *params;
    char folder[4096];  /* the model or adapter folder */
    char weights[4200]; /* the model's .safetensors path */
    int named_file;     /* --out named the .safetensors file, not the folder */
};

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* The folder and the weights' path that rq->out names (made by the
 * writer, once what is asked of the checkpoint is known to make sense). */
static void place(struct export_job *j)
{
    const char *out = j->rq->out;
    j->named_file = j->rq->what != RUN_EXPORT_ADAPTER && zt_ends_with(out, ".safetensors");
    if (!j->named_file) {
        snprintf(j->folder, sizeof j->folder, "%s", out);
        snprintf(j->weights, sizeof j->weights, "%s/model.safetensors", out);
        return;
    }
    const char *slash = strrchr(out, '/');
    snprintf(j->folder, sizeof j->folder, "%.*s", slash ? (int)(slash - out) : 1,
             slash ? out : ".");
    if (slash == out)
        snprintf(j->folder, sizeof j->folder, "/");
    snprintf(j->weights, sizeof j->weights, "%s", out);
}

/* A folder's config describes its weights: one already there is replaced
 * only with force, or (a NAME.safetensors beside it) when it describes
 * this model too. Then the folder is made if missing. */
static zt_status check_config_free(const struct export_job *j, const struct param_table *t)
{
    const int adapter = j->rq->what == RUN_EXPORT_ADAPTER;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", j->folder, adapter ? PEFT_ADAPTER_CONFIG : "config.json");
    if (j->rq->force || !exists(path))
        return zt_mkdir_p(j->folder);
    if (j->named_file) {
        char want[HF_WEIGHTS_CONFIG_MAX], *have = NULL;
        size_t want_len, have_len = 0;
        ZT_TRY(hf_weights_config_text(t, j->rq->dtype, want, sizeof want, &want_len));
        const int same = zt_read_small_file(path, 1 << 20, ZT_ERR_IO, &have, &have_len) == ZT_OK &&
                         have_len == want_len && memcmp(have, want, want_len) == 0;
        free(have);
        if (same)
            return zt_mkdir_p(j->folder);
        return zt_error_set(ZT_ERR_USAGE,
                            "%s holds another model (its config.json differs from this one's): "
                            "export into another folder, or pass --force to replace it",
                            j->folder);
    }
    return zt_error_set(ZT_ERR_USAGE,
                        "%s: already holds an export (%s): name another folder, or pass --force "
                        "to write over it",
                        j->folder, path);
}

/* ---- the writers ---- */

/* The model, all of it, through the family's Hugging Face writer. */
static zt_status write_model(struct export_job *j, const struct param_table *t, const char *how,
                             FILE *report)
{
    int n_shards = 1;
    ZT_TRY(check_config_free(j, t));
    ZT_TRY(hf_weights_export(t, j->params, j->rq->dtype, j->weights, j->rq->max_shard, &n_shards));
    ZT_TRY(hf_weights_write_config(t, j->rq->dtype, j->folder));
    if (!report)
        return ZT_OK;
    const char *dtype = zt_precision_name(j->rq->dtype);
    if (n_shards == 1)
        fprintf(report, "wrote %s and %s/config.json: %zu parameters of step %lld (%s)%s as %s\n",
                j->weights, j->folder, t->n_params, (long long)j->meta.step, j->step_dir, how,
                dtype);
    else
        fprintf(report,
                "wrote %s.index.json and %d shards beside it, with config.json: %zu "
                "parameters of step %lld (%s)%s as %s\n",
                j->weights, n_shards, t->n_params, (long long)j->meta.step, j->step_dir, how,
                dtype);
    return ZT_OK;
}

static zt_status export_model(struct export_job *j, FILE *report)
{
    if (j->table.lora.r > 0)
        return zt_error_set(ZT_ERR_USAGE,
                            "%s holds LoRA adapters (r %d) on a frozen model: export --merge "
                            "writes the model with them merged in, export --adapter --out DIR "
                            "the adapters in PEFT's format",
                            j->step_dir, j->table.lora.r);
    return write_model(j, &j->table, "", report);
}

static zt_status export_merged(struct export_job *j, FILE *report)
{
    if (j->table.lora.r == 0)
        return write_model(j, &j->table, ", which has no adapters to merge,", report);
    lora_merge(&j->table, j->meta.lora.alpha, j->params);
    const struct param_table base = param_table_base(&j->table);
    return write_model(j, &base, " with its adapters merged in", report);
}

static zt_status export_adapter(struct export_job *j, FILE *report)
{
    const struct ckpt_meta *m = &j->meta;
    if (j->table.lora.r == 0)
        return zt_error_set(ZT_ERR_USAGE,
                            "%s holds no LoRA adapters (it was not trained with lora.enabled): "
                            "export it without --adapter",
                            j->step_dir);
    const struct lora_spec spec = {.r = m->lora.r,
                                   .alpha = m->lora.alpha,
                                   .dropout = m->lora.dropout,
                                   .targets = (const char *const *)m->lora.targets,
                                   .n_targets = m->lora.n_targets};
    ZT_TRY(check_config_free(j, &j->table));
    ZT_TRY(peft_adapter_write(j->folder, &j->table, j->params, j->rq->dtype, &spec,
                              m->base.kind == CKPT_BASE_FILE ? m->base.path : NULL));
    if (report)
        fprintf(report,
                "wrote %s/" PEFT_ADAPTER_WEIGHTS " and " PEFT_ADAPTER_CONFIG
                ": %zu adapter parameters (r %d) of step %lld (%s) as %s\n",
                j->folder, lora_n_params(&j->table), m->lora.r, (long long)m->step, j->step_dir,
                zt_precision_name(j->rq->dtype));
    return ZT_OK;
}

/* By enum run_export_what. */
static zt_status (*const writers[])(struct export_job *, FILE *) = {
    [RUN_EXPORT_MODEL] = export_model,
    [RUN_EXPORT_MERGED] = export_merged,
    [RUN_EXPORT_ADAPTER] = export_adapter,
};

/* ---- the tokenizer ---- */

static const char *scalar_at(const struct yaml_tree *tree, const char *key)
{
    const struct yaml_tree_node *v = yaml_tree_lookup(tree, key);
    return v && v->kind == YAML_TREE_SCALAR && !yaml_tree_is_null(v) ? v->text : NULL;
}

zt_status run_export_tokenizer_of(const char *where, const char *yaml,
                                  struct run_tokenizer_ref *out)
{
    struct yaml_tree *tree;
    ZT_TRY(yaml_tree_load_string(where, yaml, strlen(yaml), &tree));
    const char *n = scalar_at(tree, "data.tokenizer"), *d = scalar_at(tree, "data.tokenizer_dir");
    const char *c = scalar_at(tree, "data.chat_template");
    snprintf(out->name, sizeof out->name, "%s", n ? n : "bytes");
    snprintf(out->dir, sizeof out->dir, "%s", d ? d : "");
    snprintf(out->chat_template, sizeof out->chat_template, "%s", c ? c : "");
    yaml_tree_free(tree);
    return ZT_OK;
}

/* generation_config.json and the tokenizer's files, with the run's chat
 * template in tokenizer_config.json. The begin-of-text id is the
 * tokenizer's, else (GPT-2, whose texts are separated by one token) its
 * end-of-text id, as GPT2Config has it. */
static zt_status write_tokenizer(const struct export_job *j, FILE *report)
{
    struct run_tokenizer_ref ref;
    char saved[256];
    ZT_TRY(
        run_export_tokenizer_of(j->step_dir, j->meta.config_yaml ? j->meta.config_yaml : "", &ref));
    const char *name = ref.name, *dir = ref.dir;
    struct tokenizer *tok;
    zt_status st = tokenizer_open(name, dir[0] ? dir : NULL, &tok);
    if (st != ZT_OK) { /* the weights are written: a tokenizer moved since is said, not fatal */
        fprintf(stderr,
                "zerotrain: warning: the run's tokenizer (%s) is not copied: %s; "
                "generation_config.json is not written\n",
                name, zt_error_message());
        return ZT_OK;
    }
    const int32_t eos = tokenizer_eot_id(tok), bos = tokenizer_bos_id(tok);
    tokenizer_close(tok);
    ZT_TRY(hf_weights_write_generation_config(j->folder, bos >= 0 ? bos : eos, eos));
    ZT_TRY(tokenizer_save(name, dir[0] ? dir : NULL, j->folder, saved, sizeof saved));
    const struct zt_kv *positions = zt_kv_find(&j->table.shape, "block_size");
    ZT_TRY(tokenizer_save_config(name, j->folder, positions ? (int)positions->i : 0,
                                 ref.chat_template[0] ? ref.chat_template : NULL, saved,
                                 sizeof saved));
    if (report)
        fprintf(report, "wrote %s/generation_config.json%s%s (tokenizer %s)\n", j->folder,
                saved[0] ? " and " : "", saved, name);
    return ZT_OK;
}

zt_status run_export_write(const struct run_export_request *rq, FILE *report)
{
    struct export_job *j = calloc(1, sizeof *j);
    if (!j)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the export");
    j->rq = rq;
    zt_status st = ckpt_resolve(rq->checkpoint, j->step_dir, sizeof j->step_dir);
    if (st == ZT_OK)
        st = run_checkpoint_read_model(j->step_dir, &j->meta, &j->table, &j->params);
    if (st != ZT_OK) {
        free(j);
        return st;
    }
    place(j);
    st = writers[rq->what](j, report);
    if (st == ZT_OK)
        st = write_tokenizer(j, report);
    param_table_free(&j->table);
    free(j->params);
    ckpt_meta_free(&j->meta);
    free(j);
    return st;
}

/* ---- a run's final weights ---- */

/* Rank 0: an empty folder for the weights' checkpoint, none left over. */
static zt_status fresh_folder(const char *dir)
{
    ZT_TRY(ckpt_remove(dir));
    return zt_mkdir_p(dir);
}

zt_status run_export_final(struct run_session *s, long step, char *where, size_t n,
                           const char **kind)
{
    char tmp[4200], folder[4200], step_dir[4400];
    snprintf(tmp, sizeof tmp, "%s/final.checkpoint", s->cfg.run.output_dir);
    snprintf(folder, sizeof folder, "%s/final", s->cfg.run.output_dir);
    const int adapters = s->table.lora.r > 0 && s->base.kind == CKPT_BASE_FILE;
    *kind = adapters ? "adapters" : "model";
    ZT_TRY(run_checkpoint_agree(s, s->rank == 0 ? fresh_folder(tmp) : ZT_OK));
    ZT_TRY(run_checkpoint_save_weights(s, tmp, step, step_dir, sizeof step_dir));
    zt_status st = ZT_OK;
    if (s->rank == 0) {
        const struct run_export_request rq = {
            .checkpoint = step_dir,
            .out = folder,
            .dtype = ZT_F32,
            .max_shard = HF_WEIGHTS_DEFAULT_MAX_SHARD,
            .what = adapters              ? RUN_EXPORT_ADAPTER
                    : s->table.lora.r > 0 ? RUN_EXPORT_MERGED
                                          : RUN_EXPORT_MODEL,
            .force = 1,
        };
        st = ckpt_remove(folder);
        if (st == ZT_OK)
            st = run_export_write(&rq, NULL);
        const zt_status removed = ckpt_remove(tmp);
        st = st == ZT_OK ? removed : st;
    }
    ZT_TRY(run_checkpoint_agree(s, st));
    snprintf(where, n, "%s", folder);
    return ZT_OK;
}
