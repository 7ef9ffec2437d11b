/* coordinator/session.c — opening a run phase by phase, agreeing after each. */
#include "session.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../formats/hf_weights.h"
#include "../report/report.h"
#include "../worker/device_bind.h"
#include "../worker/lora.h"
#include "../worker/param_quant.h"
#include "../worker/tensor_parallel.h"
#include "../worker/model_family.h"
#include "../worker/ops.h"

zt_status session_agree(const struct run_session *s, zt_status local, int *print_here)
{
    if (s->comm)
        return comm_agree_ranks(s->comm, local, print_here);
    return comm_world_agree(local, print_here);
}

/* Threads per rank: the user's OMP_NUM_THREADS if set, else the cores
 * divided among the ranks on this node (oversubscribing BLAS threads
 * across ranks costs far more than it gains). */
static int threads_per_rank(int local_ranks)
{
    const char *env = getenv("OMP_NUM_THREADS");
    if (env && atoi(env) > 0)
        return atoi(env);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cores > 0 ? (int)(cores / local_ranks) : 1;
    return n > 0 ? n : 1;
}

/* A data path that does not exist is a configuration mistake (exit 2), told
 * before any data is read; unreadable or malformed data is a run-time one. */
static zt_status check_data_paths(const char *key, char **paths, int n)
{
    struct stat st;
    for (int i = 0; i < n; i++)
        if (stat(paths[i], &st) != 0)
            return zt_error_set(ZT_ERR_CONFIG, "%s: %s: %s", key, paths[i], strerror(errno));
    return ZT_OK;
}

/* data.tokenizer names a tokenizer, and data.tokenizer_dir is given when it
 * reads a folder and only then: configuration mistakes, told before any
 * data is read. */
static zt_status check_tokenizer_keys(const struct zt_config *c)
{
    char names[64];
    const int needs = tokenizer_needs_dir(c->data.tokenizer);
    tokenizer_names(names, sizeof names);
    if (needs < 0)
        return zt_error_set(ZT_ERR_CONFIG, "data.tokenizer: no tokenizer '%s' (there are: %s)",
                            c->data.tokenizer, names);
    if (needs && !c->data.tokenizer_dir)
        return zt_error_set(ZT_ERR_CONFIG,
                            "data.tokenizer: %s reads a vocabulary folder: set "
                            "data.tokenizer_dir (scripts/gpt2_vocab.sh fetches GPT-2's)",
                            c->data.tokenizer);
    if (!needs && c->data.tokenizer_dir)
        return zt_error_set(ZT_ERR_CONFIG,
                            "data.tokenizer_dir: given, but data.tokenizer %s reads no folder",
                            c->data.tokenizer);
    ZT_TRY(tokenizer_check_model_files(c->data.tokenizer, "model.hf_config", c->model.hf_config));
    return tokenizer_check_model_files(c->data.tokenizer, "model.init_from", c->model.init_from);
}

/* A tokenizer with a vocabulary folder makes ids up to its vocabulary
 * size: the model must have an embedding row for each. (The byte
 * tokenizer's data are checked id by id, as token files are: a small
 * model.vocab_size with ASCII text is fine.) */
static zt_status check_tokenizer_vocab(const struct zt_config *c, const struct tokenizer *t)
{
    const uint32_t v = tokenizer_vocab_size(t);
    if (tokenizer_needs_dir(c->data.tokenizer) == 0 || (uint32_t)c->model.vocab_size >= v)
        return ZT_OK;
    return zt_error_set(ZT_ERR_CONFIG,
                        "model.vocab_size: %d is smaller than the vocabulary of data.tokenizer "
                        "%s (%u ids): set model.vocab_size >= %u",
                        c->model.vocab_size, c->data.tokenizer, v, v);
}

static zt_status load_config(struct run_session *s, const struct run_options *o)
{
    ZT_TRY(config_load(o->config_path, o->overrides, o->n_overrides, &s->cfg));
    ZT_TRY(config_check_world(&s->cfg, s->world));
    ZT_TRY(check_tokenizer_keys(&s->cfg));
    ZT_TRY(check_data_paths("data.train", s->cfg.data.train, s->cfg.data.n_train));
    ZT_TRY(check_data_paths("data.val", s->cfg.data.val, s->cfg.data.n_val));
    return ZT_OK;
}

static zt_status check_vocab(const struct token_buffer *b, const char *what, int vocab)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->tokens[i] < 0 || b->tokens[i] >= vocab)
            return zt_error_set(ZT_ERR_DATA,
                                "%s: token id %d at position %zu does not fit model.vocab_size %d",
                                what, b->tokens[i], i, vocab);
    return ZT_OK;
}

/* Loads the paths of one data key as data.format says, with the run's
 * tokenizer; what the user should know of (skipped binary files, cut
 * examples) is told once, by rank 0 (every rank reads the same files). */
typedef zt_status (*data_loader)(const struct run_session *s, const struct tokenizer *tok,
                                 const char *key, char **paths, int n, struct token_buffer *out);

static void warn_prefix(const char *key)
{
    fprintf(stderr, "zerotrain: warning: %s: ", key);
}

static zt_status load_text(const struct run_session *s, const struct tokenizer *tok,
                           const char *key, char **paths, int n, struct token_buffer *out)
{
    const struct dataset_options opt = {.skip_binary = s->cfg.data.skip_binary,
                                        .skip_setting = "data.skip_binary",
                                        .tokenizer = tok};
    struct dataset_report rep = {0};
    zt_status st = dataset_load_with((const char *const *)paths, n, &opt, out, &rep);
    if (st == ZT_OK && rep.n_skipped > 0 && s->rank == 0) {
        warn_prefix(key);
        dataset_report_write_skipped(&rep, stderr);
        fputs(" (data.skip_binary is true)\n", stderr);
        fflush(stderr);
    }
    dataset_report_free(&rep);
    return st;
}

/* Whether any target of the loaded examples counts. */
static int has_target(const struct token_buffer *b)
{
    for (size_t i = 0; i < b->n; i++)
        if (!b->mask || b->mask[i])
            return 1;
    return 0;
}

static zt_status load_jsonl(const struct run_session *s, const struct tokenizer *tok,
                            const char *key, char **paths, int n, struct token_buffer *out)
{
    const struct jsonl_options opt = {.tokenizer = tok,
                                      .packing = s->cfg.data.packing,
                                      .seq_len = s->cfg.data.seq_len,
                                      .chat_template = s->cfg.data.chat_template};
    struct jsonl_report rep;
    ZT_TRY(jsonl_load((const char *const *)paths, n, &opt, out, &rep));
    if (!has_target(out))
        return zt_error_set(ZT_ERR_DATA,
                            "%s: no example keeps a trainable token at data.seq_len %d: %zu of "
                            "%zu examples were cut, %zu of them inside the prompt (%s%s): "
                            "raise data.seq_len or shorten the prompts",
                            key, s->cfg.data.seq_len, rep.n_truncated, rep.n_examples,
                            rep.n_untrained, rep.n_truncated ? "first: " : "no example cut",
                            rep.n_truncated ? rep.truncated_at[0] : "");
    if (rep.n_truncated > 0 && s->rank == 0) {
        warn_prefix(key);
        fprintf(stderr,
                "%zu of %zu examples are longer than data.seq_len (%d tokens) and were cut to "
                "it (data.packing is false); %zu lost every completion token:",
                rep.n_truncated, rep.n_examples, s->cfg.data.seq_len, rep.n_untrained);
        for (size_t i = 0; i < rep.n_truncated && i < JSONL_REPORT_NAMED; i++)
            fprintf(stderr, " %s", rep.truncated_at[i]);
        fputs(rep.n_truncated > JSONL_REPORT_NAMED ? " ...\n" : "\n", stderr);
        fflush(stderr);
    }
    return ZT_OK;
}

static data_loader loader_of(const char *format)
{
    static const struct {
        const char *format;
        data_loader load;
    } loaders[] = {{"text", load_text}, {"jsonl", load_jsonl}};
    for (size_t i = 0; i < sizeof loaders / sizeof loaders[0]; i++)
        if (strcmp(loaders[i].format, format) == 0)
            return loaders[i].load;
    ZT_ASSERT(0 && "data.format is checked by the config");
    return NULL;
}

static zt_status load_sets(struct run_session *s, const struct tokenizer *tok,
                           struct token_buffer *all)
{
    const struct zt_config *c = &s->cfg;
    const data_loader load = loader_of(c->data.format);
    ZT_TRY(check_tokenizer_vocab(c, tok));
    ZT_TRY(load(s, tok, "data.train", c->data.train, c->data.n_train, all));
    if (c->data.n_val > 0)
        return load(s, tok, "data.val", c->data.val, c->data.n_val, &s->val);
    return dataset_split_tail(all, c->data.val_fraction, c->data.seq_len, &s->val);
}

/* run.epochs: the steps that many passes over the training windows take
 * (the last step may run into the next epoch, as a whole batch), and the
 * schedule's total with them unless it was given. */
static void steps_from_epochs(struct run_session *s)
{
    struct zt_config *c = &s->cfg;
    const double global = (double)c->train_micro_batch_size_per_gpu *
                          c->gradient_accumulation_steps * (double)s->dp_size;
    const double steps = ceil(c->run.epochs * (double)s->sampler.n_windows / global);
    c->run.steps = steps < 1.0 ? 1 : (long)steps;
    if (c->scheduler.total_from_steps)
        c->scheduler.total_num_steps = c->run.steps;
}

double session_epoch_at(const struct run_session *s, long step)
{
    if (!(s->cfg.run.epochs > 0) || s->sampler.n_windows == 0)
        return -1.0;
    const double global = (double)s->cfg.train_micro_batch_size_per_gpu *
                          s->cfg.gradient_accumulation_steps * (double)s->dp_size;
    return (double)step * global / (double)s->sampler.n_windows;
}

static zt_status load_data(struct run_session *s, int need_train)
{
    const struct zt_config *c = &s->cfg;
    struct token_buffer all = {0};
    struct tokenizer *tok;
    ZT_TRY(tokenizer_open(c->data.tokenizer, c->data.tokenizer_dir, &tok));
    zt_status st = load_sets(s, tok, &all);
    tokenizer_close(tok);
    if (st == ZT_OK)
        st = check_vocab(&all, "data.train", c->model.vocab_size);
    if (st == ZT_OK && s->val.n > 0)
        st = check_vocab(&s->val, "validation data", c->model.vocab_size);
    if (st != ZT_OK || !need_train) {
        token_buffer_free(&all);
        return st;
    }
    s->train = all;
    ZT_TRY(sampler_init(&s->sampler, s->train.n, c->data.seq_len, c->run.seed,
                        c->train_micro_batch_size_per_gpu, c->gradient_accumulation_steps,
                        s->dp_size, s->dp_rank));
    s->have_train = 1;
    if (c->run.epochs > 0)
        steps_from_epochs(s);
    return ZT_OK;
}

/* An evaluation needs one validation window (eval.c). Finding that out at
 * the first evaluation would lose the training before it, with every rank
 * failing there on its own; so it is checked here. */
static zt_status check_validation_size(const struct run_session *s)
{
    const struct zt_config *c = &s->cfg;
    const int T = c->data.seq_len;
    const size_t windows = s->val.n > 0 ? (s->val.n - 1) / (size_t)T : 0;
    if (!config_has_validation(c) || windows >= 1)
        return ZT_OK;
    return zt_error_set(ZT_ERR_DATA,
                        "validation data has no window of seq_len + 1 = %d tokens: give more "
                        "data.val or a larger data.val_fraction",
                        T + 1);
}

zt_status session_lora_spec(const struct zt_config *c, struct lora_spec *spec)
{
    const char *const *defaults = hf_weights_lora_targets(c->model.family);
    *spec = (struct lora_spec){
        .r = c->lora.r,
        .alpha = c->lora.lora_alpha,
        .dropout = c->lora.lora_dropout,
        .targets = (const char *const *)c->lora.target_modules,
        .n_targets = c->lora.n_target_modules,
    };
    if (spec->n_targets > 0)
        return ZT_OK;
    if (!defaults)
        return zt_error_set(ZT_ERR_UNSUPPORTED,
                            "lora: model family %s has no Hugging Face mapping, so no default "
                            "lora.target_modules: name them",
                            c->model.family);
    spec->targets = defaults;
    while (defaults[spec->n_targets])
        spec->n_targets++;
    return ZT_OK;
}

/* Adapters on the modules spec targets, named as in the Hugging Face
 * model; the base frozen. */
static zt_status attach_adapters(const struct lora_spec *spec, struct param_table *t)
{
    char **modules;
    ZT_TRY(hf_weights_module_names(t, &modules));
    zt_status s = lora_attach(t, spec, (const char *const *)modules);
    free(modules);
    return s;
}

zt_status session_table_build(const struct zt_kvlist *shape, const struct lora_spec *lora,
                              struct param_table *out)
{
    ZT_TRY(param_table_build(shape, out));
    zt_status s = lora ? attach_adapters(lora, out) : ZT_OK;
    if (s != ZT_OK)
        param_table_free(out);
    return s;
}

void session_quant_of(const struct zt_config *c, struct ckpt_quant *out)
{
    memset(out, 0, sizeof *out);
    out->load_in_4bit = c->quantization.load_in_4bit;
    if (!out->load_in_4bit)
        return;
    snprintf(out->quant_type, sizeof out->quant_type, "%s", c->quantization.bnb_4bit_quant_type);
    out->double_quant = c->quantization.bnb_4bit_use_double_quant;
    snprintf(out->compute_dtype, sizeof out->compute_dtype, "%s",
             zt_precision_name(config_compute_dtype(c)));
}

zt_status session_table_quantise(const struct ckpt_quant *q, struct param_table *t)
{
    struct param_quant_spec spec = {.double_quant = q->double_quant};
    zt_status s = ZT_OK;
    if (!quant4_type_find(q->quant_type, &spec.type) ||
        !zt_precision_from_name(q->compute_dtype, &spec.compute))
        s = zt_error_set(ZT_ERR_CHECKPOINT,
                         "quantization: unknown bnb_4bit_quant_type '%s' or compute dtype '%s'",
                         q->quant_type, q->compute_dtype);
    if (s == ZT_OK)
        s = param_quant_attach(t, &spec);
    if (s != ZT_OK)
        param_table_free(t);
    return s;
}

zt_status session_build_table(const struct zt_config *c, struct param_table *out)
{
    struct zt_kvlist shape;
    struct lora_spec spec;
    config_model_shape(c, &shape);
    if (c->lora.enabled)
        ZT_TRY(session_lora_spec(c, &spec));
    ZT_TRY(session_table_build(&shape, c->lora.enabled ? &spec : NULL, out));
    if (!c->quantization.load_in_4bit)
        return ZT_OK;
    struct ckpt_quant q;
    session_quant_of(c, &q);
    return session_table_quantise(&q, out);
}

/* With fp8.enabled, t's delayed-scaling state (worker/fp8_scaling.h),
 * owned by t. */
static zt_status attach_fp8(const struct zt_config *c, struct param_table *t)
{
    if (!c->fp8.enabled)
        return ZT_OK;
    const struct fp8_recipe r = {.format = (enum fp8_recipe_format)c->fp8.format,
                                 .amax_history_len = c->fp8.amax_history_len,
                                 .amax_compute_algo = (enum fp8_amax_algo)c->fp8.amax_compute_algo,
                                 .margin = c->fp8.margin};
    return fp8_scaling_create(&r, param_table_blocks(t), &t->fp8);
}

int64_t session_vocab_padded(const struct zt_config *c, int T)
{
    return tp_vocab_padded(c->model.vocab_size, c->model.pad_vocab_size_to_multiple_of, T);
}

zt_status session_rank_table(const struct zt_config *c, int T, int t, struct param_table *out)
{
    ZT_TRY(session_build_table(c, out));
    const int64_t vocab_padded = session_vocab_padded(c, T);
    if (T > 1 || vocab_padded != c->model.vocab_size) {
        struct param_table whole = *out;
        const zt_status st = param_table_tp_slice(&whole, T, t, vocab_padded, out);
        param_table_free(&whole);
        ZT_TRY(st);
        out->tp_sequence = c->tensor_parallel.sequence_parallel;
    }
    zt_status st = attach_fp8(c, out);
    if (st == ZT_OK && out->whole) /* the single-device baseline's */
        st = attach_fp8(c, out->whole);
    if (st != ZT_OK)
        param_table_free(out);
    return st;
}

/* A shard group (HSDP) or a secondary group (hpZ) is meant to be one
 * node's ranks; one that spans nodes still trains the same, but its
 * traffic crosses them: rank 0 says so, once. */
static void warn_spread_groups(const struct run_session *s)
{
    const struct {
        const char *key;
        struct comm *group;
    } groups[] = {{"shard_group_size", s->dp_groups.shard},
                  {"zero_hpz_partition_size", s->dp_groups.secondary}};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        const struct comm *g = groups[i].group;
        if (!g || comm_nodes_spanned(g) == 1 || s->rank != 0)
            continue;
        fprintf(stderr,
                "zerotrain: warning: zero_optimization.%s: %d: rank 0's group spans %d nodes, so "
                "its traffic crosses nodes (a divisor of the ranks per node keeps it inside "
                "one)\n",
                groups[i].key, comm_size(g), comm_nodes_spanned(g));
        fflush(stderr);
    }
}

/* The rank grid, this rank's place and its axes' groups (collective). */
static zt_status open_layout(struct run_session *s)
{
    const struct zt_config *c = &s->cfg;
    ZT_TRY(comm_layout_make(s->world, c->tensor_parallel.size, c->pipeline.stages, &s->layout));
    s->coords = comm_layout_coords(&s->layout, s->rank);
    const int C = c->context_parallel.size > 1 ? c->context_parallel.size : 1;
    s->dp_rank = s->coords.dp / C;
    s->dp_size = s->layout.dp / C;
    ZT_TRY(comm_axes_split(s->comm, &s->layout, &s->axes));
    if (C > 1) {
        ZT_TRY(comm_split(s->axes.dp, s->coords.dp / C, s->coords.dp % C, &s->context));
        comm_set_name(s->context, "context");
    }
    const int shard = c->zero.shard_group_size > 0 ? c->zero.shard_group_size : s->layout.dp;
    ZT_TRY(comm_dp_groups_split(s->axes.dp, shard, c->zero.hpz_partition_size, &s->dp_groups));
    warn_spread_groups(s);
    return ZT_OK;
}

enum model_partition session_stage_method(const struct zt_config *c)
{
    return c->pipeline.partition_method == PIPELINE_PARTITION_UNIFORM ? MODEL_PARTITION_UNIFORM
                                                                      : MODEL_PARTITION_PARAMETERS;
}

zt_status session_stage_of(const struct zt_config *c, const struct param_table *t, int p,
                           struct model_stage *out)
{
    const int P = c->pipeline.stages, v = c->pipeline.virtual_stages;
    if (P > 1 && v > 1)
        return model_stage_interleaved(t, P, v, p, out);
    return model_stage_of(t, P, session_stage_method(c), p, out);
}

zt_status session_model_create_for(const struct zt_config *c, const struct param_table *t,
                                   const struct compute_backend *be,
                                   const struct model_stage *stage, const struct model *lender,
                                   struct model **out)
{
    ZT_TRY(model_create_slot(t, be, c->train_micro_batch_size_per_gpu, c->data.seq_len,
                             session_ckpt_every(c), stage, lender, out));
    (*out)->seed = c->run.seed;
    if (c->run.neftune_noise_alpha <= 0.0)
        return ZT_OK;
    return model_neftune_enable(*out, be, c->run.neftune_noise_alpha, c->run.seed);
}

zt_status session_model_create(struct run_session *s, int j, struct model_profile *profile,
                               const struct model *lender, struct model **out)
{
    const struct model_stage chunk =
        model_stage_chunks(&s->stage) > 1
            ? model_stage_chunk(&s->stage, j, param_table_blocks(&s->table))
            : s->stage;
    const zt_status st =
        session_model_create_for(&s->cfg, &s->table, &s->compute, &chunk, lender, out);
    if (*out)
        (*out)->profile = profile;
    return st;
}

/* The tests' crash hook, called by the engine's I/O thread. */
static void nvme_written(void *arg, long updates)
{
    const struct run_session *s = arg;
    s->faults->mid_update(s->faults->arg, s->rank, updates);
}

/* NVMe offload: the rank's state file is named by the run (its output
 * folder's name and a hash of its path, so that two runs sharing
 * nvme_path keep apart and a rerun overwrites its own crash's leftover)
 * and by the world rank (tensor and pipeline ranks share a data-parallel
 * rank). */
static void name_nvme_file(struct run_session *s, struct shard_engine_config *ec)
{
    const char *dir = s->cfg.run.output_dir, *base = strrchr(dir, '/');
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *p = dir; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    base = base && base[1] ? base + 1 : dir;
    snprintf(s->nvme_name, sizeof s->nvme_name, "zerotrain-%.64s-%08x-rank%05d.states", base,
             (unsigned)h, s->rank);
    ec->nvme_name = s->nvme_name;
    if (s->faults && s->faults->mid_update) {
        ec->nvme_written = nvme_written;
        ec->nvme_written_arg = s;
    }
}

static zt_status build_model(struct run_session *s, const struct run_options *o)
{
    const struct zt_config *c = &s->cfg;
    ZT_TRY(session_rank_table(c, s->layout.tp, s->coords.tp, &s->table));
    if (s->context) {
        s->table.cp_size = comm_size(s->context);
        s->table.cp_rank = comm_rank(s->context);
    }
    s->table.compute =
        session_compute_type(c, s->compute.ops, s->compute_why, sizeof s->compute_why);
    if (s->table.fp8) /* each rank's dY is the D-rank mean loss's times D (fp8_scaling.h) */
        s->table.fp8->grad_divisor = (float)s->layout.dp;
    s->stage_method = session_stage_method(c);
    ZT_TRY(session_stage_of(c, &s->table, s->coords.pp, &s->stage));
    struct shard_engine_config ec =
        session_engine_config(c, c->zero.stage, s->layout.dp, s->coords.dp);
    ec.pipeline_stage = c->pipeline.stages > 1 ? &s->stage : NULL;
    /* the file's weights replace the drawn ones: run_checkpoint_restore
     * draws only what it does not fill */
    ec.defer_init = c->model.init_from != NULL;
    s->pinned = (struct shard_pinned_alloc){s->compute.pinned_alloc, s->compute.pinned_free};
    ec.pinned = s->compute.pinned_alloc ? &s->pinned : NULL;
    if (config_loss_scale_dynamic(c))
        loss_scaler_init_dynamic(&s->scaler, c->fp16.initial_scale_power, c->fp16.loss_scale_window,
                                 c->fp16.hysteresis, c->fp16.min_loss_scale);
    else
        loss_scaler_init_static(&s->scaler, c->fp16.enabled ? c->fp16.loss_scale : 1.0);
    name_nvme_file(s, &ec);
    ZT_TRY(shard_engine_create(&ec, &s->table, s->dp_groups.shard ? s->dp_groups.shard : s->axes.dp,
                               &s->compute, &s->engine));
    /* interleaved: the model is the stage's last chunk, whose loss an
     * evaluation reads (the pipeline adds the other chunks) */
    ZT_TRY(session_model_create(s, model_stage_chunks(&s->stage) - 1,
                                o->profile ? &s->profile : NULL, NULL, &s->model));
    s->engine.profile = o->profile ? &s->engine_profile : NULL;
    const size_t bt = (size_t)c->train_micro_batch_size_per_gpu * c->data.seq_len;
    s->inputs = malloc(2 * bt * sizeof(int32_t));
    if (!s->inputs)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the host batch");
    s->targets = s->inputs + bt;
    s->row_ids = malloc((size_t)c->train_micro_batch_size_per_gpu * sizeof *s->row_ids);
    if (!s->row_ids)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the host batch");
    if (c->pipeline.stages > 1)
        shard_engine_join_pipeline(&s->engine, s->axes.pp);
    if (s->layout.tp > 1)
        shard_engine_join_tensor(&s->engine, s->axes.tp);
    if (s->context)
        shard_engine_join_context(&s->engine, s->context);
    if (s->dp_groups.replica)
        shard_engine_join_replicas(&s->engine, s->dp_groups.replica);
    if (s->dp_groups.secondary)
        shard_engine_join_secondary(&s->engine, s->dp_groups.secondary);
    return ZT_OK;
}

struct shard_engine_config session_engine_config(const struct zt_config *c, int stage, int world,
                                                 int rank)
{
    const struct optimizer_hparams hp = config_optimizer_hparams(c, c->optimizer.lr);
    /* HSDP: the partition is one shard group's of G ranks, R = D / G of them */
    const int G = c->zero.shard_group_size, H = c->zero.hpz_partition_size;
    const int hsdp = stage >= 1 && G > 0 && G < world && world % G == 0;
    const int hpz = stage == 3 && H > 1 && world % H == 0;
    return (struct shard_engine_config){
        .stage = stage,
        .world = hsdp ? G : world,
        .rank = hsdp ? rank % G : rank,
        .replicas = hsdp ? world / G : 1,
        .secondary_size = hpz ? H : 0,
        .clip = c->gradient_clipping,
        .seed = c->run.seed,
        .reduce_bucket_size = (size_t)c->zero.reduce_bucket_size,
        .overlap_comm = c->zero.overlap_comm,
        .prefetch_depth = c->zero.stage3_prefetch_depth,
        .precision = session_precision(c),
        .grad_accum_fp32 = config_grad_accum_fp32(c),
        .optimizer = optimizer_find(c->optimizer.type),
        .optimizer_states = optimizer_state_count(optimizer_find(c->optimizer.type), &hp),
        .hparams = hp,
        .offload_optimizer = c->zero.offload_optimizer.device != ZT_OFFLOAD_NONE,
        .offload_pin_memory = c->zero.offload_optimizer.pin_memory,
        .nvme_path = c->zero.offload_optimizer.device == ZT_OFFLOAD_NVME
                         ? c->zero.offload_optimizer.nvme_path
                         : NULL,
        .nvme_buffer_count = c->zero.offload_optimizer.buffer_count,
        .nvme_buffer_elems = (size_t)c->zero.offload_optimizer.buffer_size,
    };
}

enum zt_dtype session_precision(const struct zt_config *c)
{
    return c->bf16.enabled ? ZT_BF16 : c->fp16.enabled ? ZT_F16 : ZT_F32;
}

enum zt_dtype session_compute_type(const struct zt_config *c, const struct ops_backend *ops,
                                   char *why, size_t n)
{
    const enum zt_dtype t = session_precision(c);
    const char *layout = c->fp8.enabled ? "fp8 GEMMs are emulated in fp32" : NULL;
    snprintf(why, n, "%s", "");
    if (t == ZT_F32)
        return ZT_F32;
    if (layout) {
        snprintf(why, n, "%s so far", layout);
        return ZT_F32;
    }
    if (ops && ops->computes(ops, t) != ZT_OK) {
        snprintf(why, n, "%s", zt_error_message());
        return ZT_F32;
    }
    return t;
}

int session_ckpt_every(const struct zt_config *c)
{
    return c->activation_checkpointing.enabled ? c->activation_checkpointing.every_n_blocks : 0;
}

void session_add_loss(const struct run_session *s, const struct model *m, double *sums)
{
    if (s->coords.tp != 0) /* the tensor-parallel slices share one loss */
        return;
    const double share = (double)m->n_counted / ((double)m->B * m->T);
    sums[0] += m->mean_loss * share;
    sums[1] += share;
}

zt_status session_plan_chunks_step(struct model *const *chunks, int n, struct shard_engine *engine,
                                   int accum)
{
    struct shard_step_result result;
    struct optimizer_hparams hp = {0};
    ZT_ASSERT(engine->plan);
    for (int m = 0; m < accum; m++) {
        ledger_set_step(engine->dev->ledger, 1, m);
        for (int j = 0; j < n; j++) {
            ZT_ASSERT(chunks[j]->plan);
            ZT_TRY(model_forward(chunks[j], &engine->hooks, NULL, NULL));
        }
        if (m == accum - 1)
            shard_engine_final_backward(engine);
        for (int j = n - 1; j >= 0; j--)
            ZT_TRY(model_backward(chunks[j], &engine->hooks, 1.0f));
    }
    return shard_engine_step(engine, &hp, 1.0, 0, &result);
}

zt_status session_plan_step(struct model *model, struct shard_engine *engine, int accum)
{
    return session_plan_chunks_step(&model, 1, engine, accum);
}

zt_status session_plan_baseline(const struct run_session *s, struct ledger *out)
{
    const struct zt_config *c = &s->cfg;
    struct compute_backend be;
    struct shard_engine engine;
    struct model *model;
    const struct shard_engine_config ec = session_engine_config(c, 0, 1, 0);
    ledger_init(out, 1);
    ZT_TRY(compute_backend_open(c->device, -1, out, &be));
    /* the single-rank baseline runs the whole model */
    const struct param_table *whole = param_table_whole(&s->table);
    zt_status st = shard_engine_create(&ec, whole, NULL, &be, &engine);
    if (st != ZT_OK) {
        compute_backend_close(&be);
        return st;
    }
    st = model_create(whole, &be, c->train_micro_batch_size_per_gpu, c->data.seq_len,
                      session_ckpt_every(c), &model);
    if (st == ZT_OK) {
        st = session_plan_step(model, &engine, 1);
        model_destroy(model);
    }
    shard_engine_destroy(&engine);
    compute_backend_close(&be);
    return st;
}

/* --memory-timeline: records from the ledger's first allocation on. */
static zt_status open_timeline(struct run_session *s, const struct run_options *o)
{
    if (!o->memory_timeline_path)
        return ZT_OK;
    ZT_TRY(memory_timeline_create(o->memory_timeline_first, o->memory_timeline_last, &s->timeline));
    memory_timeline_attach(s->timeline, &s->ledger);
    return ZT_OK;
}

/* The flight recorder and its watchdog (comm/flight.h), with several ranks
 * and a timeout. A side channel that could not reach every rank is said
 * once: the watchdog still ends a stalled job, naming less. */
static zt_status open_flight(struct run_session *s)
{
    int missing = 0;
    if (s->world == 1 || !(s->cfg.comm.timeout_s > 0))
        return ZT_OK;
    const struct comm_flight_config fc = {.timeout_s = s->cfg.comm.timeout_s,
                                          .dir = s->cfg.run.output_dir};
    ZT_TRY(comm_flight_create(&fc, &s->flight, &missing));
    s->ledger.watch = comm_flight_phase_watch(s->flight);
    if (missing > 0) {
        fprintf(stderr,
                "zerotrain: warning: comm.timeout_s: %d rank(s) could not reach rank 0's side "
                "channel (TCP): a stalled collective still ends the job, but those ranks' states "
                "are not collected\n",
                missing);
        fflush(stderr);
    }
    return ZT_OK;
}

/* The device this rank opens: on a backend with devices to choose among,
 * the one its node-local rank is bound to (worker/device_bind.h: the
 * launcher's local rank, else the shared-memory split's), recording
 * whether ranks share it, the input comm.backend auto needs; the backend's
 * only one (-1) otherwise. */
static zt_status bind_device(struct run_session *s)
{
    int count = 0;
    s->device_ordinal = -1;
    s->device_shared = 0;
    ZT_TRY(compute_backend_devices(s->cfg.device, &count));
    if (count == 0)
        return ZT_OK;
    struct device_bind_env env;
    struct device_binding b;
    device_bind_env_read(&env);
    const struct device_bind_split split = {.rank = s->local_rank, .size = s->local_ranks};
    ZT_TRY(device_bind_choose(&env, split, count, &b));
    s->device_ordinal = b.ordinal;
    s->device_shared = b.shared;
    return ZT_OK;
}

/* Once, by rank 0, when the config's offload_optimizer can do nothing on
 * the device opened (config_offload_note). */
static void note_offload(const struct run_session *s)
{
    const char *note = config_offload_note(&s->cfg, s->compute.host_memory);
    if (s->rank != 0 || !note)
        return;
    fprintf(stderr, "zerotrain: note: %s\n", note);
    fflush(stderr);
}

/* Under comm.backend auto on a GPU, rank 0 says which backend the rule took
 * and why (on the CPU it is always MPI, and nothing is said). */
static void note_comm_backend(const struct run_session *s)
{
    if (s->rank != 0 || s->compute.host_memory)
        return;
    fprintf(stderr, "zerotrain: note: comm.backend %s: %s\n", s->cfg.comm.backend,
            comm_backend_reason(s->comm));
    fflush(stderr);
}

/* Once, by rank 0, when the vocabulary was padded for the tensor-parallel
 * ranks (session_vocab_padded): the rows the embedding and head got. */
static void note_vocab_padding(const struct run_session *s)
{
    const int vocab = param_table_vocab(&s->table), padded = param_table_vocab_padded(&s->table);
    if (s->rank != 0 || padded == vocab)
        return;
    fprintf(stderr,
            "zerotrain: note: vocabulary %d padded to %d for T=%d "
            "(model.pad_vocab_size_to_multiple_of %d)\n",
            vocab, padded, param_table_tp_size(&s->table),
            s->cfg.model.pad_vocab_size_to_multiple_of);
    fflush(stderr);
}

/* Runs one phase and agrees on its outcome; on failure closes the session. */
#define SESSION_PHASE(s, expr)                                                                     \
    do {                                                                                           \
        zt_status phase_local_ = (expr);                                                           \
        zt_status phase_agreed_ = session_agree((s), phase_local_, &(s)->failed_here);             \
        if (phase_agreed_ != ZT_OK) {                                                              \
            session_close(s);                                                                      \
            (s)->state = RUN_FAILED;                                                               \
            return phase_agreed_;                                                                  \
        }                                                                                          \
    } while (0)

/* The measured parts of the rank's predicted resident memory
 * (report/rss_model.h): the process as it stands, before data and model,
 * and what a product of the model's width leaves the compute libraries. */
static zt_status measure_start_rss(struct run_session *s)
{
    const struct zt_config *c = &s->cfg;
    s->rss_start.baseline = ledger_rss_now();
    const enum zt_dtype t = session_compute_type(c, s->compute.ops, NULL, 0);
    return rss_probe_runtime(&s->compute, t, c->train_micro_batch_size_per_gpu * c->data.seq_len,
                             c->model.n_embd, 4 * c->model.n_embd, &s->rss_start.runtime);
}

zt_status session_open(struct run_session *s, const struct run_options *o, int need_train)
{
    memset(s, 0, sizeof *s);
    s->state = RUN_INIT;
    s->rank = comm_world_rank();
    s->world = comm_world_size();
    comm_local_place(&s->local_rank, &s->local_ranks);
    ops_cpu_set_threads(threads_per_rank(s->local_ranks));

    SESSION_PHASE(s, load_config(s, o));
    /* Once, for every rank: the config is the same everywhere. */
    if (s->rank == 0) {
        const char *warnings[] = {s->cfg.ignored, s->cfg.no_effect};
        for (size_t i = 0; i < sizeof warnings / sizeof warnings[0]; i++)
            if (warnings[i])
                fprintf(stderr, "zerotrain: warning: %s", warnings[i]);
        fflush(stderr);
    }
    /* The device comes first: the communicator must reach its memory. */
    ledger_init(&s->ledger, o->dry_run);
    SESSION_PHASE(s, open_timeline(s, o));
    SESSION_PHASE(s, bind_device(s));
    SESSION_PHASE(s,
                  compute_backend_open(s->cfg.device, s->device_ordinal, &s->ledger, &s->compute));
    note_offload(s);
    SESSION_PHASE(s, o->dry_run ? ZT_OK : open_flight(s));
    struct comm_config cc = {.backend = s->cfg.comm.backend,
                             .reduce_scatter = s->cfg.comm.reduce_scatter,
                             .allgather = s->cfg.comm.allgather,
                             .allreduce = s->cfg.comm.allreduce,
                             .memory = s->compute.host_memory ? COMM_MEMORY_HOST : COMM_MEMORY_CUDA,
                             .flight = s->flight,
                             .device_stream = s->compute.stream,
                             .ranks_share_gpu = s->device_shared};
    SESSION_PHASE(s, comm_create(&cc, &s->comm));
    note_comm_backend(s);
    SESSION_PHASE(s, open_layout(s));
    SESSION_PHASE(s, measure_start_rss(s));
    SESSION_PHASE(s, o->dry_run ? ZT_OK : load_data(s, need_train));
    s->faults = o->faults; /* the engine's NVMe hook reaches them */
    SESSION_PHASE(s, build_model(s, o));
    note_vocab_padding(s);
    SESSION_PHASE(s, o->dry_run ? ZT_OK : check_validation_size(s));
    s->stop_signal = o->stop_signal;
    s->state = RUN_CONFIGURED;
    return ZT_OK;
}

void session_close(struct run_session *s)
{
    s->ledger.sink = NULL; /* teardown is not part of any timeline */
    free(s->inputs);
    s->inputs = s->targets = NULL;
    free(s->row_ids);
    s->row_ids = NULL;
    if (s->pipe)
        s->pipe_free(s->pipe);
    s->pipe = NULL;
    model_destroy(s->model);
    s->model = NULL;
    if (s->engine.dev)
        shard_engine_destroy(&s->engine);
    compute_backend_close(&s->compute);
    param_table_free(&s->table);
    if (s->have_train)
        sampler_free(&s->sampler);
    token_buffer_free(&s->train);
    token_buffer_free(&s->val);
    comm_dp_groups_destroy(&s->dp_groups);
    comm_destroy(s->context);
    s->context = NULL;
    comm_axes_destroy(&s->axes);
    if (s->comm)
        comm_destroy(s->comm);
    s->comm = NULL;
    s->ledger.watch = NULL;
    comm_flight_destroy(s->flight);
    s->flight = NULL;
    config_free(&s->cfg);
    memory_timeline_destroy(s->timeline);
    s->timeline = NULL;
}
