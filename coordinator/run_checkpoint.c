/* coordinator/run_checkpoint.c — see run_checkpoint.h.
 *
 * Save, by phase (each phase ends with an agreement, so a failure on any
 * rank stops every rank at the same point and the previous checkpoint stays
 * the published one):
 *   every rank checks its weights are finite -> rank 0 checksums the
 *   base file of a fine-tuning run, the first time (run_base.h) ->
 *   rank 0 prepares DIR/step-N -> every rank writes its shard (atomic) ->
 *   the shard sizes and checksums are gathered -> rank 0 writes meta.json
 *   (atomic), points DIR/latest at the step, and rotates old ones.
 *
 * Load: rank 0 validates every file -> each rank checks the model ->
 * a base kept outside is checked and read -> each rank reads its ranges
 * of the units the shards hold.
 */
#include "run_checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/clock.h"
#include "../common/fileio.h"
#include "../formats/checkpoint.h"
#include "../formats/checkpoint_reader.h"
#include "../formats/hf_weights.h"
#include "../formats/peft_adapter.h"
#include "../formats/safetensors_set.h"
#include "../worker/param_quant.h"
#include "../worker/tensor_parallel.h"
#include "run_base.h"

void run_checkpoint_dir(const struct zt_config *c, char *buf, size_t n)
{
    ZT_ASSERT(c->checkpoint.dir); /* null: no checkpoints, nothing saved or found */
    snprintf(buf, n, "%s", c->checkpoint.dir);
}

/* ---- save ----------------------------------------------------------------- */

/* The layout a checkpoint is stored in: the run's, but with HSDP's shard
 * group as the data-parallel size, since the R shard groups hold the same
 * shards. The first group's ranks write them (as a run of T x P x G ranks
 * would), the others write nothing; a reader reshards from any layout, so
 * the checkpoint resumes under HSDP or without. */
static struct ckpt_layout stored_layout(const struct run_session *s)
{
    const int vocab = param_table_vocab(&s->table), padded = param_table_vocab_padded(&s->table);
    return (struct ckpt_layout){s->layout.tp, s->layout.pp, s->engine.part.world,
                                padded != vocab ? padded : 0};
}

/* Whether this rank writes a file: it is in the first shard group. */
static int stores_shard(const struct run_session *s)
{
    return s->coords.dp < s->engine.part.world;
}

/* The file of world rank r in the stored layout (-1: r writes none). */
static int stored_file(const struct run_session *s, int r)
{
    const struct comm_coords c = comm_layout_coords(&s->layout, r);
    const struct ckpt_layout l = stored_layout(s);
    return c.dp < l.dp ? ckpt_layout_rank(&l, c.tp, c.pp, c.dp) : -1;
}

/* The pipeline stage whose ranks store unit u: the first that holds it (a
 * tied embedding is held by the first and the last stage and stored once). */
static zt_status storing_stage(const struct run_session *s, int u, int *out)
{
    for (int p = 0; p < s->layout.pp; p++) {
        struct model_stage st;
        ZT_TRY(session_stage_of(&s->cfg, &s->table, p, &st));
        if (model_stage_holds(&s->table, &st, u)) {
            *out = p;
            return ZT_OK;
        }
    }
    return zt_error_set(ZT_ERR_USAGE, "unit %d is held by no pipeline stage", u);
}

/* Whether the checkpoint gets state `which` of unit u: every state the
 * rank keeps, but a frozen unit's weights when the base is kept elsewhere
 * (run_base.h), and the last stage's copy of a tied embedding. */
static int saves_state(const struct run_session *s, int which, int u)
{
    const int duplicate = u == 0 && s->stage.last && !s->stage.first &&
                          model_stage_holds(&s->table, &s->stage, 0) &&
                          param_table_head_tied(&s->table);
    return shard_engine_holds_state(&s->engine, which, u) && !duplicate &&
           (!run_base_external(s) || s->engine.part.units[u].trainable);
}

static zt_status write_tensor_state(struct run_session *s, struct ckpt_shard_writer *w)
{
    float *host = malloc(s->engine.tensor_state_len * sizeof(float));
    if (!host)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the optimizer state staging");
    zt_status st = shard_engine_get_tensor_state(&s->engine, host);
    if (st == ZT_OK)
        st = ckpt_shard_writer_write(w, host, s->engine.tensor_state_len);
    free(host);
    return st;
}

/* fp8 delayed scaling's scales and amax histories (worker/fp8_scaling.h):
 * the same on every rank after a step, so world rank 0's shard holds them
 * once, whatever the layout. */
#define FP8_SECTION "fp8_scaling"

static zt_status write_fp8_scaling(const struct run_session *s, struct ckpt_shard_writer *w)
{
    const size_t n = fp8_scaling_state_len(s->table.fp8);
    float *host = malloc(n * sizeof(float));
    if (!host)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the fp8 scaling staging");
    fp8_scaling_get_state(s->table.fp8, host);
    const zt_status st = ckpt_shard_writer_write(w, host, n);
    free(host);
    return st;
}

/* weights_only: the master alone, for a checkpoint read once for its
 * weights (run_checkpoint_save_weights), never resumed. */
static zt_status write_sections(struct run_session *s, long step, int weights_only,
                                struct ckpt_shard_writer *w)
{
    const struct shard_partition *p = &s->engine.part;
    const int n_states = weights_only ? 1 : shard_engine_n_states(&s->engine);
    size_t max_unit = 0;
    for (int u = 0; u < p->n_units; u++)
        max_unit = p->units[u].shard > max_unit ? p->units[u].shard : max_unit;
    /* A section holds the rank's real elements of every unit that has the
     * state: the master all units, the optimizer's the trainable ones. */
    for (int k = 0; k < n_states; k++) {
        uint64_t count = 0;
        for (int u = 0; u < p->n_units; u++)
            if (saves_state(s, k, u))
                count +=
                    ckpt_piece_elements(p->units[u].numel, p->units[u].shard, s->engine.cfg.rank);
        ZT_TRY(ckpt_shard_writer_add(w, shard_engine_state_name(&s->engine, k),
                                     shard_engine_state_dtype(&s->engine, k), count));
    }
    /* A whole-tensor optimizer's per-tensor state is the same on every
     * rank of a stage: the first data-parallel rank's shard holds it (all
     * tensors' entries, valid for the stage's), whatever the world size. */
    const int tensor_state =
        !weights_only && s->engine.cfg.rank == 0 && s->engine.tensor_state_len > 0;
    if (tensor_state)
        ZT_TRY(ckpt_shard_writer_add(w, s->engine.cfg.optimizer->tensor_state_name, ZT_F32,
                                     s->engine.tensor_state_len));
    const int fp8 = s->rank == 0 && s->table.fp8;
    if (fp8)
        ZT_TRY(ckpt_shard_writer_add(w, FP8_SECTION, ZT_F32, fp8_scaling_state_len(s->table.fp8)));
    ZT_TRY(ckpt_shard_writer_begin(w));
    float *buf = malloc((max_unit ? max_unit : 1) * sizeof(float));
    if (!buf)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the checkpoint staging buffer");
    zt_status st = ZT_OK;
    for (int k = 0; k < n_states && st == ZT_OK; k++) {
        if (k == 1 && s->faults && s->faults->mid_shard)
            s->faults->mid_shard(s->faults->arg, s->rank, step);
        for (int u = 0; u < p->n_units && st == ZT_OK; u++) {
            size_t lo, hi;
            shard_owned_range(p, s->engine.cfg.rank, u, &lo, &hi);
            if (hi == lo || !saves_state(s, k, u))
                continue;
            st = shard_engine_get_state(&s->engine, k, u, lo, hi, buf);
            if (st == ZT_OK)
                st = ckpt_shard_writer_write(w, buf, hi - lo);
        }
    }
    free(buf);
    if (st == ZT_OK && tensor_state)
        st = write_tensor_state(s, w);
    if (st == ZT_OK && fp8)
        st = write_fp8_scaling(s, w);
    return st;
}

static zt_status write_my_shard(struct run_session *s, long step, int weights_only,
                                const char *step_dir, struct ckpt_file *mine)
{
    char path[4096];
    struct ckpt_shard_writer *w;
    const struct ckpt_layout l = stored_layout(s);
    const int file = stored_file(s, s->rank);
    if (file < 0) /* HSDP: another shard group writes these shards */
        return ZT_OK;
    ZT_TRY(ckpt_shard_path(step_dir, file, path, sizeof path));
    ZT_TRY(ckpt_shard_writer_open(path, file, l.tp * l.pp * l.dp, &w));
    zt_status st = write_sections(s, step, weights_only, w);
    if (st != ZT_OK) {
        ckpt_shard_writer_abort(w);
        return st;
    }
    return ckpt_shard_writer_finish(w, &mine->bytes, &mine->checksum);
}

/* The adapters as meta.json records them: the config's lora section with
 * target_modules resolved. The strings are borrowed (publish drops them
 * before freeing the rest). */
static zt_status describe_lora(const struct run_session *s, struct ckpt_lora *l)
{
    struct lora_spec spec;
    if (s->table.lora.r == 0)
        return ZT_OK;
    ZT_TRY(session_lora_spec(&s->cfg, &spec));
    l->r = spec.r;
    l->alpha = spec.alpha;
    l->dropout = spec.dropout;
    snprintf(l->bias, sizeof l->bias, "%s", s->cfg.lora.bias);
    l->targets = (char **)spec.targets;
    l->n_targets = spec.n_targets;
    return ZT_OK;
}

/* Each unit's size, slice, share per data-parallel piece, storing stage
 * and state, over every stage: a stage's own partition has only its units. */
static zt_status fill_units(const struct run_session *s, struct ckpt_meta *m)
{
    const struct shard_partition *held = &s->engine.part;
    struct shard_partition whole;
    ZT_TRY(shard_partition_build(&s->table, s->engine.part.world, &whole));
    zt_status st = ZT_OK;
    for (int u = 0; u < whole.n_units && st == ZT_OK; u++) {
        m->unit_numel[u] = param_table_unit_size(param_table_whole(&s->table), u);
        m->unit_slice[u] = whole.units[u].numel;
        m->unit_shard[u] = whole.units[u].shard;
        m->unit_frozen[u] = param_quant_unit_packed(&s->table, u) ? CKPT_UNIT_NOT_STORED
                            : !whole.units[u].trainable           ? CKPT_UNIT_FROZEN
                                                                  : 0;
        st = storing_stage(s, u, &m->unit_stage[u]);
        ZT_ASSERT(!held->units[u].held || held->units[u].shard == whole.units[u].shard);
    }
    shard_partition_free(&whole);
    return st;
}

static zt_status fill_meta(const struct run_session *s, long step, struct ckpt_file *files,
                           struct ckpt_meta *m)
{
    const struct shard_partition *p = &s->engine.part;
    const struct zt_config *c = &s->cfg;
    memset(m, 0, sizeof *m);
    m->step = step;
    m->layout = stored_layout(s);
    m->world = m->layout.tp * m->layout.pp * m->layout.dp;
    m->stage = c->zero.stage;
    snprintf(m->precision, sizeof m->precision, "%s", zt_precision_name(s->engine.cfg.precision));
    const struct ops_backend *ops = s->compute.ops;
    if (ops->gemm_describe(ops, s->table.compute, m->gemm, sizeof m->gemm) != ZT_OK)
        m->gemm[0] = '\0'; /* a record only: a run is not stopped for it */
    m->n_units = p->n_units;
    m->unit_numel = calloc((size_t)p->n_units, sizeof *m->unit_numel);
    m->unit_slice = calloc((size_t)p->n_units, sizeof *m->unit_slice);
    m->unit_shard = calloc((size_t)p->n_units, sizeof *m->unit_shard);
    m->unit_frozen = calloc((size_t)p->n_units + 1, sizeof *m->unit_frozen);
    m->unit_stage = calloc((size_t)p->n_units + 1, sizeof *m->unit_stage);
    char *yaml = NULL;
    size_t yaml_len = 0;
    FILE *f = open_memstream(&yaml, &yaml_len);
    if (!m->unit_numel || !m->unit_slice || !m->unit_shard || !m->unit_frozen || !m->unit_stage ||
        !f) {
        if (f)
            fclose(f);
        free(yaml);
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the checkpoint metadata");
    }
    zt_status st = config_write_yaml(c, f);
    fclose(f);
    m->config_yaml = yaml;
    ZT_TRY(st);
    ZT_TRY(fill_units(s, m));
    m->n_params = param_table_whole(&s->table)->n_params;
    m->model = s->table.shape;
    const struct optimizer_hparams hp = config_optimizer_hparams(c, c->optimizer.lr);
    optimizer_describe(s->engine.cfg.optimizer, &hp, &m->optimizer);
    m->seed = c->run.seed;
    m->samples_seen = (uint64_t)step * (uint64_t)c->train_micro_batch_size_per_gpu *
                      (uint64_t)c->gradient_accumulation_steps * (uint64_t)s->dp_size;
    m->loss_scale = s->scaler.scale;
    m->scaler_good_steps = s->scaler.good_steps;
    m->scaler_hysteresis = s->scaler.hysteresis_left;
    m->optimizer_steps = s->engine.updates;
    m->files = files;
    if (run_base_external(s))
        m->base = s->base;
    session_quant_of(&s->cfg, &m->quant);
    return describe_lora(s, &m->lora);
}

/* Where a save goes and what it keeps. */
struct save_target {
    const char *dir;
    int keep;         /* step folders kept (checkpoint.keep) */
    int weights_only; /* write_sections */
};

static zt_status publish(struct run_session *s, long step, const struct save_target *to,
                         const char *step_dir, struct ckpt_file *files)
{
    struct ckpt_meta m;
    char path[4096];
    zt_status st = fill_meta(s, step, files, &m);
    if (st == ZT_OK)
        st = ckpt_meta_path(step_dir, path, sizeof path);
    if (st == ZT_OK)
        st = ckpt_meta_write(path, &m);
    m.files = NULL;        /* the caller's */
    m.lora.targets = NULL; /* the config's */
    m.lora.n_targets = 0;
    ckpt_meta_free(&m);
    ZT_TRY(st);
    ZT_TRY(ckpt_publish(to->dir, step));
    return ckpt_rotate(to->dir, to->keep);
}

/* Creates dir if missing and proves that this rank can create and remove
 * a file in it. */
static zt_status try_write_in(const char *dir, int rank)
{
    char path[4200];
    if (zt_mkdir_p(dir) != ZT_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", zt_error_message());
        return zt_error_set(ZT_ERR_IO, "checkpoint.dir %s: not writable: %s", dir, why);
    }
    snprintf(path, sizeof path, "%s/.write-test.rank-%05d.%ld", dir, rank, (long)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return zt_error_set(ZT_ERR_IO,
                            "checkpoint.dir %s: not writable: cannot create a file in it: %s", dir,
                            strerror(errno));
    close(fd);
    if (unlink(path) != 0)
        return zt_error_set(ZT_ERR_IO, "checkpoint.dir %s: cannot remove %s: %s", dir, path,
                            strerror(errno));
    return ZT_OK;
}

zt_status run_checkpoint_check_dir(struct run_session *s)
{
    if (!s->cfg.checkpoint.dir)
        return ZT_OK;
    return try_write_in(s->cfg.checkpoint.dir, s->rank);
}

zt_status run_checkpoint_agree(struct run_session *s, zt_status local)
{
    zt_status agreed;
    ZT_TRY(comm_agree_status(s->comm, local, &agreed));
    if (local == ZT_OK && agreed != ZT_OK)
        s->failed_elsewhere = 1;
    return agreed;
}

/* Whether `n` weights are finite, and stay finite in the working
 * precision (an fp32 master beyond fp16's range is an infinite fp16
 * parameter); *bad receives the first that is not. */
static int weights_finite(enum zt_dtype working, const float *w, size_t n, float *scratch,
                          size_t *bad)
{
    float *round = scratch + n; /* scratch holds the 16-bit copy, then this */
    for (size_t i = 0; i < n; i++)
        if (!isfinite(w[i])) {
            *bad = i;
            return 0;
        }
    if (working == ZT_F32)
        return 1;
    precision_from_f32(working, w, scratch, n);
    precision_to_f32(working, scratch, round, n);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(round[i])) {
            *bad = i;
            return 0;
        }
    return 1;
}

/* A diverged run must not replace good checkpoints (`latest`, and those
 * `keep` would rotate out) with broken weights: each rank checks the
 * master weights it would write before anything is written. */
static zt_status check_weights_finite(struct run_session *s, long step, const char *dir)
{
    const struct shard_partition *p = &s->engine.part;
    const enum zt_dtype working = s->engine.cfg.precision;
    size_t max_unit = 1;
    for (int u = 0; u < p->n_units; u++)
        max_unit = p->units[u].shard > max_unit ? p->units[u].shard : max_unit;
    float *buf = malloc(3 * max_unit * sizeof(float));
    if (!buf)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the checkpoint staging buffer");
    zt_status st = ZT_OK;
    for (int u = 0; u < p->n_units && st == ZT_OK; u++) {
        size_t lo, hi, bad;
        shard_owned_range(p, s->engine.cfg.rank, u, &lo, &hi);
        if (hi == lo || !stores_shard(s) || !saves_state(s, SHARD_STATE_MASTER, u))
            continue;
        st = shard_engine_get_state(&s->engine, SHARD_STATE_MASTER, u, lo, hi, buf);
        if (st == ZT_OK && !weights_finite(working, buf, hi - lo, buf + max_unit, &bad))
            st = zt_error_set(ZT_ERR_NUMERIC,
                              "step %ld: checkpoint not saved: the weights are not finite (unit "
                              "%d, element %zu is %g%s): the run has diverged; %s/latest still "
                              "names the last good checkpoint",
                              step, u, lo + bad, (double)buf[bad],
                              isfinite(buf[bad]) ? ", infinite in the working precision" : "", dir);
    }
    free(buf);
    return st;
}

static zt_status save_to(struct run_session *s, const struct save_target *to, long step,
                         char *where, size_t n)
{
    char step_dir[4096 + CKPT_STEP_NAME_MAX + 2] = "";
    const char *dir = to->dir;
    struct ckpt_file mine = {0, 0};
    ZT_TRY(run_checkpoint_agree(s, check_weights_finite(s, step, dir)));
    /* meta.json records the base file's checksum: known before any shard */
    ZT_TRY(
        run_checkpoint_agree(s, s->rank == 0 && run_base_external(s) ? run_base_digest(s) : ZT_OK));
    zt_status st = ZT_OK;
    if (s->rank == 0)
        st = ckpt_dir_prepare(dir, step, step_dir, sizeof step_dir);
    ZT_TRY(run_checkpoint_agree(s, st));
    char name[CKPT_STEP_NAME_MAX];
    ckpt_step_dirname(step, name, sizeof name);
    snprintf(step_dir, sizeof step_dir, "%s/%s", dir, name);
    ZT_TRY(run_checkpoint_agree(s, write_my_shard(s, step, to->weights_only, step_dir, &mine)));

    struct ckpt_file *files = s->rank == 0 ? calloc((size_t)s->world, sizeof *files) : NULL;
    uint64_t *all = s->rank == 0 ? calloc(2 * (size_t)s->world, sizeof *all) : NULL;
    st = s->rank == 0 && (!files || !all)
             ? zt_error_set(ZT_ERR_NOMEM, "cannot allocate the file table")
             : ZT_OK;
    if (run_checkpoint_agree(s, st) != ZT_OK) {
        free(files);
        free(all);
        return ZT_ERR_NOMEM;
    }
    uint64_t info[2] = {mine.bytes, mine.checksum};
    st = comm_gather(comm_host(s->comm), info, all, 2, ZT_I64, 0);
    if (st == ZT_OK && s->rank == 0) {
        for (int r = 0; r < s->world; r++)
            if (stored_file(s, r) >= 0)
                files[stored_file(s, r)] = (struct ckpt_file){all[2 * r], all[2 * r + 1]};
        st = publish(s, step, to, step_dir, files);
    }
    free(all);
    free(files);
    ZT_TRY(run_checkpoint_agree(s, st));
    snprintf(where, n, "%s", step_dir);
    return ZT_OK;
}

zt_status run_checkpoint_save(struct run_session *s, long step, char *where, size_t n)
{
    char dir[4096];
    run_checkpoint_dir(&s->cfg, dir, sizeof dir);
    const struct save_target to = {dir, s->cfg.checkpoint.keep, 0};
    return save_to(s, &to, step, where, n);
}

zt_status run_checkpoint_save_weights(struct run_session *s, const char *dir, long step,
                                      char *where, size_t n)
{
    const struct save_target to = {dir, 1, 1};
    return save_to(s, &to, step, where, n);
}

/* ---- resume ---------------------------------------------------------------- */

/* Puts the option or key that named a checkpoint before the message of an
 * error about it ("run.resume: DIR: neither a checkpoint ..."). */
static zt_status named_by(const char *key, zt_status st)
{
    if (st == ZT_OK)
        return ZT_OK;
    char why[2048];
    snprintf(why, sizeof why, "%s", zt_error_message());
    return zt_error_set(st, "%s: %s", key, why);
}

zt_status run_checkpoint_find(const struct run_session *s, char *step_dir, size_t n, int *found)
{
    const char *resume = s->cfg.run.resume;
    *found = 0;
    if (strcmp(resume, "never") == 0)
        return ZT_OK;
    if (strcmp(resume, "auto") != 0) {
        ZT_TRY(named_by("run.resume", ckpt_resolve(resume, step_dir, n)));
        *found = 1;
        return ZT_OK;
    }
    if (!s->cfg.checkpoint.dir)
        return ZT_OK; /* no checkpoints: a new run */
    char dir[4096];
    run_checkpoint_dir(&s->cfg, dir, sizeof dir);
    return ckpt_find_latest(dir, step_dir, n, found);
}

/* The adapters a checkpoint's meta.json records, as a spec (borrowing
 * its strings). */
static struct lora_spec spec_of(const struct ckpt_lora *l)
{
    return (struct lora_spec){.r = l->r,
                              .alpha = l->alpha,
                              .dropout = l->dropout,
                              .targets = (const char *const *)l->targets,
                              .n_targets = l->n_targets};
}

/* The checkpoint's adapters must be the config's: another rank, alpha or
 * set of targets is another model (even where the sizes agree). */
static zt_status check_same_lora(const struct run_session *s, const char *step_dir,
                                 const struct ckpt_meta *m)
{
    const int here = s->table.lora.r > 0, there = m->lora.r > 0;
    if (here != there)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s/meta.json: the checkpoint %s LoRA adapters, but the config's "
                            "lora.enabled is %s",
                            step_dir, there ? "has" : "has no", here ? "true" : "false");
    if (!here)
        return ZT_OK;
    struct lora_spec want;
    const struct lora_spec had = spec_of(&m->lora);
    char a[512], b[512];
    ZT_TRY(session_lora_spec(&s->cfg, &want));
    const char *key = lora_spec_diff(&had, &want, a, b, sizeof a);
    if (!key && had.dropout != want.dropout) {
        key = "lora_dropout";
        snprintf(a, sizeof a, "%.17g", had.dropout);
        snprintf(b, sizeof b, "%.17g", want.dropout);
    }
    if (key)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s/meta.json: the checkpoint's adapters have lora.%s %s, but the "
                            "config says %s (set lora.%s as the checkpoint has it)",
                            step_dir, key, a, b, key);
    return ZT_OK;
}

/* A 4-bit base must be stored as the checkpoint's was: its codes are
 * part of the model. */
static zt_status check_same_quant(const struct run_session *s, const char *step_dir,
                                  const struct ckpt_meta *m)
{
    struct ckpt_quant want;
    session_quant_of(&s->cfg, &want);
    const struct ckpt_quant *had = &m->quant;
    char a[96], b[96];
    snprintf(a, sizeof a, "load_in_4bit %s, %s, double quant %s, compute %s",
             had->load_in_4bit ? "true" : "false", had->load_in_4bit ? had->quant_type : "-",
             had->double_quant ? "true" : "false", had->load_in_4bit ? had->compute_dtype : "-");
    snprintf(b, sizeof b, "load_in_4bit %s, %s, double quant %s, compute %s",
             want.load_in_4bit ? "true" : "false", want.load_in_4bit ? want.quant_type : "-",
             want.double_quant ? "true" : "false", want.load_in_4bit ? want.compute_dtype : "-");
    if (strcmp(a, b) == 0)
        return ZT_OK;
    return zt_error_set(ZT_ERR_CONFIG,
                        "%s/meta.json: the checkpoint's base was stored as (%s), the config's "
                        "quantization section says (%s): set it as the checkpoint has it",
                        step_dir, a, b);
}

/* Whether any tensor of unit u trains (whichever stage holds it). */
static int unit_trains(const struct param_table *t, int u)
{
    for (int k = 0; k < t->n_tensors; k++)
        if (t->tensors[k].unit == u && t->tensors[k].trainable)
            return 1;
    return 0;
}

/* The checkpoint must be of this model (same family, shape, adapters,
 * units and frozen units) and of this optimizer, whose states are loaded
 * with the weights: one optimizer's moments are not another's. */
static zt_status check_same_model(const struct run_session *s, const char *step_dir,
                                  const struct ckpt_meta *m, int weights_only)
{
    const char *want = s->engine.cfg.optimizer->name;
    if (!zt_kv_equal(&m->model, &s->table.shape)) {
        char had[512], have[512];
        zt_kv_format(&m->model, had, sizeof had);
        zt_kv_format(&s->table.shape, have, sizeof have);
        return zt_error_set(ZT_ERR_CHECKPOINT,
                            "%s/meta.json: the checkpoint is of another model shape (%s) than the "
                            "config's (%s)",
                            step_dir, had, have);
    }
    ZT_TRY(check_same_lora(s, step_dir, m));
    ZT_TRY(check_same_quant(s, step_dir, m));
    if (!weights_only && strcmp(m->optimizer.kind, want) != 0)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s/meta.json: the checkpoint was written with optimizer %s, but the "
                            "config asks for %s: its optimizer state cannot be resumed (set "
                            "optimizer.type: %s, or export the weights and start from them with "
                            "model.init_from)",
                            step_dir, m->optimizer.kind, want, m->optimizer.kind);
    const struct param_table *whole = param_table_whole(&s->table);
    if (m->n_params != whole->n_params || m->n_units != whole->n_units)
        return zt_error_set(
            ZT_ERR_CHECKPOINT, "%s/meta.json: %llu parameters in %d units, the model has %zu in %d",
            step_dir, (unsigned long long)m->n_params, m->n_units, whole->n_params, whole->n_units);
    for (int u = 0; u < m->n_units; u++)
        if (m->unit_numel[u] != param_table_unit_size(whole, u) || m->unit_shard[u] == 0)
            return zt_error_set(ZT_ERR_CHECKPOINT,
                                "%s/meta.json: unit %d has %llu elements, "
                                "the model's has %zu",
                                step_dir, u, (unsigned long long)m->unit_numel[u],
                                param_table_unit_size(whole, u));
    /* per-tensor statistics span the vocabulary's padded rows */
    if (!weights_only && s->engine.tensor_state_len > 0 &&
        m->layout.vocab_padded != stored_layout(s).vocab_padded)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s/meta.json: the checkpoint's vocabulary was padded to %lld rows, "
                            "this run's to %lld: optimizer %s keeps statistics per tensor, which "
                            "span the padded rows (resume at a tensor_parallel.size that pads "
                            "alike, or export the weights and start from them with "
                            "model.init_from)",
                            step_dir, (long long)m->layout.vocab_padded,
                            (long long)stored_layout(s).vocab_padded, want);
    /* A unit that trains here needs the optimizer states the checkpoint has
     * only for units that trained there. */
    for (int u = 0; u < m->n_units; u++)
        if ((m->unit_frozen[u] == CKPT_UNIT_NOT_STORED) != param_quant_unit_packed(&s->table, u))
            return zt_error_set(ZT_ERR_CHECKPOINT,
                                "%s/meta.json: unit %d was %sstored in 4 bits in the checkpoint, "
                                "but %s here (quantization.load_in_4bit must be as it was)",
                                step_dir, u,
                                m->unit_frozen[u] == CKPT_UNIT_NOT_STORED ? "" : "not ",
                                param_quant_unit_packed(&s->table, u) ? "is" : "is not");
    for (int u = 0; u < m->n_units && !weights_only; u++)
        if ((m->unit_frozen[u] == 0) != unit_trains(&s->table, u))
            return zt_error_set(ZT_ERR_CHECKPOINT,
                                "%s/meta.json: unit %d was %s in the checkpoint, but %s here",
                                step_dir, u, m->unit_frozen[u] ? "frozen" : "trained",
                                m->unit_frozen[u] ? "trains" : "is frozen");
    return ZT_OK;
}

/* State k's sections as the checkpoint reader finds them. */
static struct ckpt_state state_of(const struct run_session *s, int k)
{
    return (struct ckpt_state){.name = shard_engine_state_name(&s->engine, k),
                               .dtype = shard_engine_state_dtype(&s->engine, k),
                               .trained_only = k != SHARD_STATE_MASTER};
}

/* Loads states 0 .. n_states - 1 (the master first, then the optimizer's)
 * of the ranges this rank holds, from whichever files of the checkpoint's
 * layout hold them (formats/checkpoint_reader.h). */
static zt_status load_states(struct run_session *s, const char *step_dir, const struct ckpt_meta *m,
                             int n_states)
{
    struct ckpt_reader *r = NULL;
    size_t max_unit = 0;
    for (int u = 0; u < s->table.n_units; u++)
        max_unit = param_table_unit_size(&s->table, u) > max_unit
                       ? param_table_unit_size(&s->table, u)
                       : max_unit;
    float *buf = malloc((max_unit ? max_unit : 1) * sizeof(float));
    zt_status st = buf ? ckpt_reader_open(step_dir, m, param_table_whole(&s->table), &r)
                       : zt_error_set(ZT_ERR_NOMEM, "cannot allocate the checkpoint staging");
    for (int k = 0; k < n_states && st == ZT_OK; k++) {
        const struct ckpt_state state = state_of(s, k);
        for (int u = 0; u < s->table.n_units && st == ZT_OK; u++) {
            size_t lo, hi;
            shard_engine_held_range(&s->engine, u, &lo, &hi);
            if (hi == lo || !shard_engine_holds_state(&s->engine, k, u) ||
                !ckpt_meta_unit_stored(m, u))
                continue;
            st = ckpt_reader_read(r, &state, &s->table, u, lo, hi, buf);
            if (st == ZT_OK)
                st = shard_engine_set_state(&s->engine, k, u, lo, hi, buf);
        }
    }
    ckpt_reader_close(r);
    free(buf);
    return st;
}

/* Whether tensor k's unit was stored by pipeline stage p. */
static int tensor_on_stage(const struct run_session *s, const struct ckpt_meta *m, int k, int p)
{
    return s->engine.tensor_state_off[k] != SHARD_NO_STATE &&
           m->unit_stage[s->table.tensors[k].unit] == p;
}

/* Stage p's entries of a whole-tensor optimizer's per-tensor state, from
 * the shard of the stage's first rank, into host: the state is the whole
 * tensor's, the same on every tensor-parallel rank (shard/update.c), so
 * any tensor_parallel.size reads it. */
static zt_status load_stage_tensor_state(struct run_session *s, const char *step_dir,
                                         const struct ckpt_meta *m, int p, float *host,
                                         float *staging)
{
    const size_t n = s->engine.tensor_state_len;
    const char *name = s->engine.cfg.optimizer->tensor_state_name;
    char path[4096];
    struct ckpt_shard *f = NULL;
    ZT_TRY(ckpt_shard_path(step_dir, ckpt_layout_rank(&m->layout, 0, p, 0), path, sizeof path));
    ZT_TRY(ckpt_shard_open(path, &f));
    const struct ckpt_section *sec = ckpt_shard_find(f, name);
    zt_status st = ZT_OK;
    if (!sec || sec->dtype != ZT_F32 || sec->count != n)
        st = zt_error_set(ZT_ERR_CHECKPOINT,
                          "%s: no fp32 section '%s' of %zu elements (the optimizer's per-tensor "
                          "state for this model)",
                          path, name, n);
    if (st == ZT_OK)
        st = ckpt_shard_read(f, sec, 0, n, staging);
    ckpt_shard_close(f);
    const struct optimizer_ops *opt = s->engine.cfg.optimizer;
    for (int k = 0; k < s->table.n_tensors && st == ZT_OK; k++) {
        const struct param_tensor *pt = &param_table_whole(&s->table)->tensors[k];
        const size_t at = s->engine.tensor_state_off[k];
        if (tensor_on_stage(s, m, k, p))
            memcpy(host + at, staging + at,
                   opt->tensor_state_len(pt->rows, pt->cols, &s->engine.cfg.hparams) *
                       sizeof(float));
    }
    return st;
}

/* A whole-tensor optimizer's per-tensor state: each tensor's entries from
 * the stage that stored its unit. */
static zt_status load_tensor_state(struct run_session *s, const char *step_dir,
                                   const struct ckpt_meta *m)
{
    const size_t n = s->engine.tensor_state_len;
    if (n == 0)
        return ZT_OK;
    float *host = calloc(n, sizeof(float)), *staging = malloc(n * sizeof(float));
    zt_status st = host && staging
                       ? ZT_OK
                       : zt_error_set(ZT_ERR_NOMEM, "cannot allocate the optimizer state staging");
    for (int p = 0; p < m->layout.pp && st == ZT_OK; p++) {
        int used = 0;
        for (int k = 0; k < s->table.n_tensors; k++)
            used |= tensor_on_stage(s, m, k, p);
        if (used)
            st = load_stage_tensor_state(s, step_dir, m, p, host, staging);
    }
    if (st == ZT_OK)
        st = shard_engine_set_tensor_state(&s->engine, host);
    free(host);
    free(staging);
    return st;
}

/* The fp8 scales and histories from the shard of the writer's rank 0. A
 * checkpoint without them, or with another number of them (written
 * without fp8, or with another amax_history_len or depth), leaves this
 * run's histories empty and its scales 1, as a new run starts; rank 0
 * says so. */
static zt_status load_fp8_scaling(struct run_session *s, const char *step_dir,
                                  const struct ckpt_meta *m)
{
    struct fp8_scaling *f = s->table.fp8;
    if (!f)
        return ZT_OK;
    const size_t n = fp8_scaling_state_len(f);
    char path[4096];
    struct ckpt_shard *shard = NULL;
    ZT_TRY(ckpt_shard_path(step_dir, ckpt_layout_rank(&m->layout, 0, 0, 0), path, sizeof path));
    ZT_TRY(ckpt_shard_open(path, &shard));
    const struct ckpt_section *sec = ckpt_shard_find(shard, FP8_SECTION);
    float *host = NULL;
    zt_status st = ZT_OK;
    if (sec && sec->dtype == ZT_F32 && sec->count == n) {
        host = malloc(n * sizeof(float));
        st = host ? ckpt_shard_read(shard, sec, 0, n, host)
                  : zt_error_set(ZT_ERR_NOMEM, "cannot allocate the fp8 scaling staging");
        if (st == ZT_OK)
            fp8_scaling_set_state(f, host);
    } else if (s->rank == 0) {
        fprintf(stderr,
                "zerotrain: note: %s holds no fp8 scaling state for this model and "
                "fp8.amax_history_len: the fp8 scales restart at 1 with empty histories\n",
                step_dir);
    }
    free(host);
    ckpt_shard_close(shard);
    return st;
}

static zt_status load_base(struct run_session *s, const char *meta, const struct ckpt_base *b);

zt_status run_checkpoint_load(struct run_session *s, const char *step_dir, int weights_only)
{
    struct ckpt_meta m;
    /* Rank 0 reads every byte once to check the checksums; the others then
     * read only what they need. */
    zt_status st = ZT_OK;
    if (s->rank == 0) {
        st = ckpt_validate(step_dir, &m);
        if (st == ZT_OK)
            ckpt_meta_free(&m);
    }
    ZT_TRY(run_checkpoint_agree(s, st));
    char path[4096];
    st = ckpt_meta_path(step_dir, path, sizeof path);
    if (st == ZT_OK)
        st = ckpt_meta_read(path, &m);
    ZT_TRY(run_checkpoint_agree(s, st));
    st = check_same_model(s, step_dir, &m, weights_only);
    if (st == ZT_OK && m.base.kind != CKPT_BASE_STORED)
        st = load_base(s, path, &m.base);
    if (st == ZT_OK)
        st = load_states(s, step_dir, &m, weights_only ? 1 : shard_engine_n_states(&s->engine));
    if (st == ZT_OK && !weights_only)
        st = load_tensor_state(s, step_dir, &m);
    if (st == ZT_OK) /* evaluation's forward quantises with them too */
        st = load_fp8_scaling(s, step_dir, &m);
    st = run_checkpoint_agree(s, st);
    if (st == ZT_OK)
        st = shard_engine_params_from_master(&s->engine);
    if (st == ZT_OK) {
        run_base_note(s, &m.base);
        shard_engine_set_updates(&s->engine, (long)m.optimizer_steps);
        s->start_step = (long)m.step;
        if (s->scaler.dynamic) {
            s->scaler.scale = m.loss_scale;
            s->scaler.good_steps = m.scaler_good_steps;
            s->scaler.hysteresis_left = m.scaler_hysteresis;
        }
    }
    ckpt_meta_free(&m);
    return st;
}

/* ---- restoring a session's weights ------------------------------------------- */

/* model.init_from names Hugging Face weights: a file, an index, or a
 * save_pretrained folder holding either. Any other folder (a checkpoint
 * folder, most likely) is a mix-up worth a precise message rather than the
 * reader's. */
static zt_status check_weights_folder(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return ZT_OK;
    char file[4096], index[4096];
    snprintf(file, sizeof file, "%s/%s", path, SAFETENSORS_SET_FILE);
    snprintf(index, sizeof index, "%s/%s", path, SAFETENSORS_SET_INDEX);
    if (stat(file, &sb) == 0 || stat(index, &sb) == 0)
        return ZT_OK;
    return zt_error_set(ZT_ERR_CONFIG,
                        "model.init_from: %s is a folder: expected a Hugging Face .safetensors "
                        "file, an index (" SAFETENSORS_SET_INDEX
                        ") or a folder holding " SAFETENSORS_SET_FILE
                        " or the index (for a checkpoint's weights, "
                        "`zerotrain export %s --out FILE.safetensors` and name FILE; to continue "
                        "its run, set run.resume: %s)",
                        path, path, path);
}

/* Reads flat elements [begin, end) of the session's table from an open
 * file of weights. */
typedef zt_status (*range_reader)(void *reader, size_t begin, size_t end, float *dst);

static zt_status read_hf(void *r, size_t begin, size_t end, float *dst)
{
    return hf_weights_read(r, begin, end, dst);
}

static zt_status read_peft(void *r, size_t begin, size_t end, float *dst)
{
    return peft_adapter_read(r, begin, end, dst);
}

/* A reader of the whole model's ranges, read by a slice's: each run of
 * the slice's range (worker/tensor_parallel.h) is a range of the whole. */
struct slice_read {
    range_reader read;
    void *reader;
    float *dst;
    zt_status st;
};

static void read_run(void *arg, size_t whole_begin, size_t n, size_t at)
{
    struct slice_read *sr = arg;
    if (sr->st == ZT_OK)
        sr->st = sr->read(sr->reader, whole_begin, whole_begin + n, sr->dst + at);
}

/* Flat elements [begin, end) of table t (a slice, or the whole model) from
 * a reader of the whole model's; a padded vocabulary's padding rows zero. */
static zt_status read_through(const struct param_table *t, range_reader read, void *reader,
                              size_t begin, size_t end, float *dst)
{
    struct slice_read sr = {read, reader, dst, ZT_OK};
    if (t->whole)
        memset(dst, 0, (end - begin) * sizeof *dst);
    param_table_tp_runs(t, begin, end, read_run, &sr);
    return sr.st;
}

/* Elements read per piece: with the weights reader's own buffers, what a
 * rank holds while loading besides the model states, whatever the model's
 * size. */
#define LOAD_CHUNK ((size_t)1 << 18)

/* Host staging of weights being loaded, counted by the ledger under
 * `load` (what the memory report shows of the loader). */
static zt_status staging_alloc(struct run_session *s, size_t bytes, const char *what, void **out)
{
    *out = malloc(bytes ? bytes : 1);
    if (!*out)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate %zu bytes for %s", bytes, what);
    ledger_add(&s->ledger, LEDGER_LOAD, bytes);
    return ZT_OK;
}

static void staging_free(struct run_session *s, size_t bytes, void *p)
{
    if (!p)
        return;
    free(p);
    ledger_sub(&s->ledger, LEDGER_LOAD, bytes);
}

/* The loader's host staging: a chunk of values, and for a 4-bit base the
 * region of one tensor being encoded with its block scales. */
struct load_buffers {
    float *chunk;
    size_t chunk_n;
    void *region;
    float *scales;
};

/* Flat elements of the whole model, for param_quant_encode_tensor. */
struct packed_source {
    struct run_session *s;
    range_reader read;
    void *reader;
};

static zt_status read_packed_piece(void *ctx, size_t first, size_t n, float *dst)
{
    const struct packed_source *ps = ctx;
    return read_through(&ps->s->table, ps->read, ps->reader, first, first + n, dst);
}

/* Packed unit u (a 4-bit base), a tensor at a time: each tensor whose
 * bytes of the image the rank keeps is read a chunk at a time and encoded
 * (param_quant.h), the others are not read. */
static zt_status import_packed(struct run_session *s, int u, range_reader read, void *reader,
                               const struct load_buffers *b)
{
    struct packed_source ps = {s, read, reader};
    const struct param_quant_source src = {read_packed_piece, &ps};
    const enum zt_dtype working = s->engine.cfg.precision;
    size_t keep_lo, keep_hi, at = 0;
    shard_engine_packed_range(&s->engine, u, &keep_lo, &keep_hi);
    for (int k = 0; k < s->table.n_tensors; k++) {
        if (s->table.tensors[k].unit != u)
            continue;
        const size_t bytes = param_quant_tensor_bytes(&s->table, k, working);
        if (at < keep_hi && at + bytes > keep_lo) {
            ZT_TRY(param_quant_encode_tensor(&s->table, k, working, &src,
                                             keep_lo > at ? keep_lo - at : 0, keep_hi - at,
                                             b->chunk, b->chunk_n, b->scales, b->region));
            ZT_TRY(shard_engine_set_packed_bytes(&s->engine, u, at, bytes, b->region));
        }
        at += bytes;
    }
    return ZT_OK;
}

/* The range unit u's rank holds, a chunk at a time, into the fp32 master
 * the optimizer starts from. */
static zt_status import_range(struct run_session *s, int u, range_reader read, void *reader,
                              const struct load_buffers *b)
{
    size_t lo, hi;
    const size_t at = s->table.unit_offset[u];
    shard_engine_held_range(&s->engine, u, &lo, &hi);
    for (size_t c0 = lo; c0 < hi; c0 += b->chunk_n) {
        const size_t c1 = hi - c0 < b->chunk_n ? hi : c0 + b->chunk_n;
        ZT_TRY(read_through(&s->table, read, reader, at + c0, at + c1, b->chunk));
        ZT_TRY(shard_engine_set_state(&s->engine, SHARD_STATE_MASTER, u, c0, c1, b->chunk));
    }
    return ZT_OK;
}

/* The staging units [u0, u1) of engine e (table t) need: a chunk no
 * longer than the longest range read, a multiple of the 4-bit blocks (as
 * the encoder reads), and for packed units the largest tensor's region
 * and scales. */
static void load_sizes(const struct param_table *t, const struct shard_engine *e, int u0, int u1,
                       size_t *chunk, size_t *region, size_t *scales)
{
    *chunk = *region = *scales = 0;
    for (int k = 0; k < t->n_tensors; k++) {
        const struct param_tensor *p = &t->tensors[k];
        if (p->unit < u0 || p->unit >= u1)
            continue;
        size_t lo, hi, n = p->numel;
        if (e->part.units[p->unit].packed) {
            const size_t r = param_quant_tensor_bytes(t, k, e->cfg.precision);
            *region = r > *region ? r : *region;
            *scales = quant4_blocks(n) > *scales ? quant4_blocks(n) : *scales;
        } else {
            shard_engine_held_range(e, p->unit, &lo, &hi);
            n = hi - lo;
        }
        *chunk = n > *chunk ? n : *chunk;
    }
    if (*chunk > LOAD_CHUNK)
        *chunk = LOAD_CHUNK;
    *chunk = (*chunk + QUANT4_BLOCK - 1) / QUANT4_BLOCK * QUANT4_BLOCK;
}

/* The base units of t's model: what model.init_from fills. */
static struct param_table init_from_units(const struct param_table *t)
{
    return param_table_base(param_table_whole(t));
}

size_t run_checkpoint_import_bytes(const struct param_table *t, const struct shard_engine *e)
{
    const struct param_table base = init_from_units(t);
    size_t chunk, region, scales;
    load_sizes(t, e, 0, base.n_units, &chunk, &region, &scales);
    return hf_weights_buffer_bytes_of(&base) + chunk * sizeof(float) + region +
           scales * sizeof(float);
}

/* Tensor k's share of what rank `rank` reads of its unit: the kept bytes
 * of a packed unit's image (whose blocks' codes it encodes, the rest of
 * the tensor scanned for its scales alone), else the held range; the work
 * in *w. */
static void tensor_import_work(const struct param_table *t, const struct shard_engine *e, int rank,
                               int k, size_t at, int transposed, struct run_import_work *w)
{
    const struct param_tensor *p = &t->tensors[k];
    const struct shard_unit *su = &e->part.units[p->unit];
    size_t lo, hi, n;
    if (su->packed) {
        const size_t bytes = param_quant_tensor_bytes(t, k, e->cfg.precision);
        shard_engine_packed_range_of(e, rank, p->unit, &lo, &hi);
        n = at < hi && at + bytes > lo ? p->numel : 0;
        if (n && p->storage == PARAM_STORAGE_Q4) {
            size_t k0, k1;
            param_quant_kept_blocks(p->numel, lo > at ? lo - at : 0, hi - at, &k0, &k1);
            const size_t coded =
                k1 * QUANT4_BLOCK < n ? (k1 - k0) * QUANT4_BLOCK : n - k0 * QUANT4_BLOCK;
            w->encoded += k1 > k0 ? coded : 0;
            w->scanned += n - (k1 > k0 ? coded : 0);
        }
        const size_t kept_lo = at > lo ? at : lo, kept_hi = at + bytes < hi ? at + bytes : hi;
        w->stored += kept_hi > kept_lo ? 2 * (kept_hi - kept_lo) : 0; /* the region copied */
    } else {
        const size_t first = p->offset - t->unit_offset[p->unit];
        shard_engine_held_range_of(e, rank, p->unit, &lo, &hi);
        lo = lo > first ? lo : first;
        hi = hi < first + p->numel ? hi : first + p->numel;
        n = hi > lo ? hi - lo : 0;
        w->master_nvme += e->nvme && su->trainable ? n : 0;
        /* into the working copy (4 + esz), or into the master (8) and
         * from it into the working copy once the ranks agree */
        const int master = shard_engine_master_in_memory(e) && su->trainable;
        w->stored += n * (sizeof(float) + e->esz + (master ? 2 * sizeof(float) : 0));
    }
    if (n && transposed) /* the reader caches the whole tensor */
        n = param_table_whole(t)->tensors[k].numel;
    w->read += n;
    w->transposed += transposed ? n : 0;
    w->stored += transposed ? n * 2 * sizeof(float) : 0; /* copied out of the cache */
}

static size_t most(size_t a, size_t b)
{
    return a > b ? a : b;
}

/* Every rank's work: tensor k counted on the ranks whose ranges meet its
 * values (a packed unit: its region's bytes) alone, or in `all` where
 * every rank holds its whole unit; the slowest rank's, each count the
 * most any rank has, is all's plus the most of the others'. */
void run_checkpoint_import_work(const struct param_table *t, const struct shard_engine *e,
                                struct run_import_work *w)
{
    const struct param_table base = init_from_units(t);
    struct run_import_work all = {0}, *per = calloc((size_t)e->cfg.world, sizeof *per);
    size_t *at = calloc((size_t)base.n_units + 1, sizeof *at); /* a packed unit's next region */
    ZT_ASSERT(per && at);
    for (int k = 0; k < t->n_tensors; k++) {
        const struct param_tensor *p = &t->tensors[k];
        int transposed = 0, r0, r1;
        if (p->unit >= base.n_units || hf_weights_transposed(&base, k, &transposed) != ZT_OK)
            continue; /* not in the file (an adapter), or a family that cannot be loaded */
        const int packed = e->part.units[p->unit].packed;
        const size_t bytes = packed ? param_quant_tensor_bytes(t, k, e->cfg.precision) : 0;
        const size_t first = packed ? at[p->unit] : p->offset - t->unit_offset[p->unit];
        if (shard_engine_ranks_meeting(e, p->unit, first, packed ? bytes : p->numel, &r0, &r1))
            for (int r = r0; r < r1; r++)
                tensor_import_work(t, e, r, k, at[p->unit], transposed, &per[r]);
        else
            tensor_import_work(t, e, 0, k, at[p->unit], transposed, &all);
        at[p->unit] += bytes;
    }
    *w = all;
    for (int r = 0; r < e->cfg.world; r++) {
        w->read = most(w->read, all.read + per[r].read);
        w->transposed = most(w->transposed, all.transposed + per[r].transposed);
        w->encoded = most(w->encoded, all.encoded + per[r].encoded);
        w->scanned = most(w->scanned, all.scanned + per[r].scanned);
        w->master_nvme = most(w->master_nvme, all.master_nvme + per[r].master_nvme);
        w->stored = most(w->stored, all.stored + per[r].stored);
    }
    free(per);
    free(at);
}

/* Each rank reads the ranges it holds of units [u0, u1) through `read`
 * into the fp32 weights the optimizer starts from (the optimizer state
 * starts at zero), a chunk at a time; then, agreed, the parameters are
 * rebuilt. */
static zt_status import_units(struct run_session *s, int u0, int u1, range_reader read,
                              void *reader)
{
    size_t chunk, region, scales;
    load_sizes(&s->table, &s->engine, u0, u1, &chunk, &region, &scales);
    struct load_buffers b = {.chunk_n = chunk};
    zt_status st =
        staging_alloc(s, chunk * sizeof(float), "the weights' staging", (void **)&b.chunk);
    if (st == ZT_OK && region)
        st = staging_alloc(s, region, "a 4-bit tensor's encoding", &b.region);
    if (st == ZT_OK && scales)
        st =
            staging_alloc(s, scales * sizeof(float), "a 4-bit tensor's scales", (void **)&b.scales);
    for (int u = u0; u < u1 && st == ZT_OK; u++)
        st = s->engine.part.units[u].packed ? import_packed(s, u, read, reader, &b)
                                            : import_range(s, u, read, reader, &b);
    staging_free(s, scales * sizeof(float), b.scales);
    staging_free(s, region, b.region);
    staging_free(s, chunk * sizeof(float), b.chunk);
    zt_status agreed;
    /* every rank must arrive before the collective rebuild of the params */
    ZT_TRY(comm_agree_status(s->comm, st, &agreed));
    ZT_TRY(agreed);
    return shard_engine_params_from_master(&s->engine);
}

/* A weights file that cannot be read as one (a bad index, header or
 * shard, a missing file) is a bad input the configuration names: exit 2,
 * as a file that contradicts the config is. */
static zt_status bad_weights_file(zt_status st)
{
    if (st != ZT_ERR_DATA && st != ZT_ERR_IO)
        return st;
    char why[2048];
    snprintf(why, sizeof why, "%s", zt_error_message());
    return zt_error_set(ZT_ERR_CONFIG, "model.init_from: %s", why);
}

/* model.init_from: the base units from the Hugging Face weights of the
 * model's family (formats/hf_weights.h), each rank reading only the ranges
 * it holds. LoRA adapters are not in the file: they keep their initial
 * values (or lora.init_from's). */
static zt_status import_weights(struct run_session *s, const char *path)
{
    struct hf_weights_reader *r = NULL;
    /* the file holds the whole model, whichever slice this rank holds */
    const struct param_table base = init_from_units(&s->table);
    zt_status opened = check_weights_folder(path), agreed_open;
    if (opened == ZT_OK)
        opened = bad_weights_file(hf_weights_open(path, &base, &r));
    ZT_TRY(comm_agree_status(s->comm, opened, &agreed_open));
    if (agreed_open != ZT_OK) {
        if (opened == ZT_OK)
            hf_weights_close(r);
        return agreed_open;
    }
    /* the reader's transposition buffers are part of the loader's staging */
    const size_t held = hf_weights_buffer_bytes(r);
    ledger_add(&s->ledger, LEDGER_LOAD, held);
    zt_status st = import_units(s, 0, base.n_units, read_hf, r);
    hf_weights_close(r);
    ledger_sub(&s->ledger, LEDGER_LOAD, held);
    return st;
}

/* The initial values of a table, as a reader of ranges. */
struct seed_reader {
    const struct param_table *t;
    uint64_t seed;
};

static zt_status read_seed(void *r, size_t begin, size_t end, float *dst)
{
    const struct seed_reader *sr = r;
    param_table_init(sr->t, sr->seed, begin, end, dst);
    return ZT_OK;
}

/* A checkpoint's base kept outside it (run_base.h): the file, once rank 0
 * has checked its bytes against meta.json's record, or the seed's values.
 * Collective. */
static zt_status load_base(struct run_session *s, const char *meta, const struct ckpt_base *b)
{
    if (b->kind == CKPT_BASE_SEED) {
        struct seed_reader sr = {param_table_whole(&s->table), b->seed};
        return import_units(s, 0, s->table.lora.n_base_units, read_seed, &sr);
    }
    ZT_TRY(run_checkpoint_agree(s, s->rank == 0 ? run_base_check(meta, b) : ZT_OK));
    return import_weights(s, b->path);
}

/* lora.init_from: the adapter units from a PEFT adapter folder
 * (formats/peft_adapter.h) that every rank checks against the config's
 * lora section, each reading only the ranges it holds. */
static zt_status import_adapters(struct run_session *s, const char *dir)
{
    struct peft_adapter_reader *r = NULL;
    struct lora_spec want;
    zt_status opened = session_lora_spec(&s->cfg, &want), agreed_open;
    if (opened == ZT_OK)
        opened = named_by("lora.init_from", peft_adapter_open(dir, &s->table, &want, &r));
    ZT_TRY(comm_agree_status(s->comm, opened, &agreed_open));
    if (agreed_open != ZT_OK) {
        if (opened == ZT_OK)
            peft_adapter_close(r);
        return agreed_open;
    }
    zt_status st = import_units(s, s->table.lora.n_base_units, s->table.n_units, read_peft, r);
    peft_adapter_close(r);
    return st;
}

/* The checkpoint a session starts from, by one rule for every command:
 * eval --checkpoint; else, training, what run.resume says; else,
 * evaluating, the latest checkpoint of checkpoint.dir, the weights this
 * config trained (an unset checkpoint.dir names none). *from says which,
 * RUN_WEIGHTS_INITIAL when there is none. */
static zt_status choose_checkpoint(const struct run_session *s, const struct run_options *o,
                                   int need_train, char *step_dir, size_t n, enum run_weights *from)
{
    int found = 0;
    *from = RUN_WEIGHTS_INITIAL;
    if (o->checkpoint_path) {
        ZT_TRY(named_by("--checkpoint", ckpt_resolve(o->checkpoint_path, step_dir, n)));
        *from = RUN_WEIGHTS_NAMED;
    } else if (need_train) {
        ZT_TRY(run_checkpoint_find(s, step_dir, n, &found));
        if (found)
            *from = strcmp(s->cfg.run.resume, "auto") == 0 ? RUN_WEIGHTS_LATEST : RUN_WEIGHTS_NAMED;
    } else if (s->cfg.checkpoint.dir) {
        struct stat sb;
        /* a folder that never was, with nothing else named, would measure
         * random weights under a name that promises trained ones */
        if (stat(s->cfg.checkpoint.dir, &sb) != 0 && !s->cfg.model.init_from)
            return zt_error_set(ZT_ERR_CONFIG,
                                "checkpoint.dir: %s: no such folder, so there is no checkpoint "
                                "to evaluate: train with this config first, or name the "
                                "weights with --checkpoint or model.init_from",
                                s->cfg.checkpoint.dir);
        ZT_TRY(named_by("checkpoint.dir",
                        ckpt_find_latest(s->cfg.checkpoint.dir, step_dir, n, &found)));
        if (found)
            *from = RUN_WEIGHTS_LATEST;
    }
    return ZT_OK;
}

/* The units the engine left undrawn (shard_engine_config.defer_init, set
 * when model.init_from names the weights), drawn now unless the file
 * fills them: the adapters when it does, every unit when a checkpoint is
 * loaded instead, which then finds the state it always found. */
static zt_status draw_deferred(struct run_session *s, int from_file)
{
    if (!s->engine.cfg.defer_init)
        return ZT_OK;
    const int base = s->table.lora.r > 0 ? s->table.lora.n_base_units : s->table.n_units;
    return run_checkpoint_agree(
        s, shard_engine_init_units(&s->engine, from_file ? base : 0, s->table.n_units));
}

/* Where the weights come from: a checkpoint (choose_checkpoint), else
 * model.init_from, else the initial values. Collective. */
static zt_status restore_weights(struct run_session *s, const struct run_options *o, int need_train)
{
    char step_dir[4096];
    enum run_weights from;
    /* each rank looks at the files itself: agree before loading collectively */
    ZT_TRY(run_checkpoint_agree(
        s, choose_checkpoint(s, o, need_train, step_dir, sizeof step_dir, &from)));
    ZT_TRY(draw_deferred(s, from == RUN_WEIGHTS_INITIAL && s->cfg.model.init_from));
    if (from == RUN_WEIGHTS_INITIAL) {
        if (s->cfg.model.init_from) {
            const double t0 = zt_now_seconds();
            ZT_TRY(import_weights(s, s->cfg.model.init_from));
            s->load_seconds = zt_now_seconds() - t0;
            s->load_rss_peak = ledger_rss_peak();
            s->weights_from = RUN_WEIGHTS_INIT_FROM;
        }
        if (s->cfg.lora.init_from)
            ZT_TRY(import_adapters(s, s->cfg.lora.init_from));
        run_base_note(s, NULL);
        return ZT_OK;
    }
    /* evaluation needs the weights; resuming training, the optimizer too */
    ZT_TRY(run_checkpoint_load(s, step_dir, !need_train));
    snprintf(s->resumed_from, sizeof s->resumed_from, "%s", step_dir);
    s->weights_from = from;
    return ZT_OK;
}

zt_status run_checkpoint_plan_import(const struct zt_config *c, const struct param_table *t,
                                     struct shard_engine *e, struct ledger *ledger)
{
    if (!c->model.init_from)
        return ZT_OK;
    const int base = t->lora.r > 0 ? t->lora.n_base_units : t->n_units;
    ZT_TRY(shard_engine_init_units(e, base, t->n_units));
    const size_t bytes = run_checkpoint_import_bytes(t, e);
    ledger_add(ledger, LEDGER_LOAD, bytes);
    ledger_sub(ledger, LEDGER_LOAD, bytes);
    return ZT_OK;
}

zt_status run_checkpoint_restore(struct run_session *s, const struct run_options *o, int need_train)
{
    ledger_enter_outer(&s->ledger, LEDGER_PHASE_LOAD);
    zt_status st = o->dry_run
                       ? run_checkpoint_plan_import(&s->cfg, &s->table, &s->engine, &s->ledger)
                       : restore_weights(s, o, need_train);
    ledger_enter_outer(&s->ledger, LEDGER_PHASE_SETUP);
    st = session_agree(s, s->failed_elsewhere ? ZT_OK : st, &s->failed_here);
    if (st != ZT_OK) {
        session_close(s);
        s->state = RUN_FAILED;
    }
    return st;
}

/* ---- saying which weights ------------------------------------------------------ */

/* After a loaded checkpoint's line: where its base came from when it
 * keeps it outside (run_base.h), and a model.init_from it overrides (the
 * base file itself is used), with `hint`. */
static void describe_checkpoint_base(const struct run_session *s, char *buf, size_t n,
                                     const char *hint)
{
    const char *init_from = s->cfg.model.init_from;
    const int file = run_base_external(s) && s->base.kind == CKPT_BASE_FILE;
    size_t len = strlen(buf);
    if (file && len + 1 < n)
        snprintf(buf + len, n - len, "; its base weights from %s, unchanged", s->base.path);
    else if (run_base_external(s) && len + 1 < n)
        snprintf(buf + len, n - len, "; its base drawn again from seed %llu",
                 (unsigned long long)s->base.seed);
    len = strlen(buf);
    if (init_from && !(file && strcmp(init_from, s->base.path) == 0) && len + 1 < n)
        snprintf(buf + len, n - len, "; model.init_from %s is not used%s", init_from, hint);
}

/* Training: which checkpoint it resumes and why, and what happens to a
 * model.init_from that the checkpoint overrides. */
static void describe_resume(const struct run_session *s, char *buf, size_t n)
{
    char why[4200];
    if (s->weights_from == RUN_WEIGHTS_LATEST) {
        char dir[4096];
        run_checkpoint_dir(&s->cfg, dir, sizeof dir);
        snprintf(why, sizeof why, "the latest checkpoint in %s", dir);
    } else {
        snprintf(why, sizeof why, "run.resume names it");
    }
    snprintf(buf, n, "resumed from %s at step %ld (%s)", s->resumed_from, s->start_step, why);
    describe_checkpoint_base(s, buf, n, ": set run.resume: never to start from it");
}

/* Evaluation: which weights are measured; *warn when they are the initial
 * ones, which measure nothing trained. */
static void describe_eval(const struct run_session *s, char *buf, size_t n, int *warn)
{
    const char *init_from = s->cfg.model.init_from;
    if (s->weights_from == RUN_WEIGHTS_INIT_FROM) {
        snprintf(buf, n, "evaluating weights from %s (model.init_from)", init_from);
    } else if (s->weights_from == RUN_WEIGHTS_INITIAL) {
        *warn = 1;
        if (s->cfg.checkpoint.dir)
            snprintf(buf, n,
                     "checkpoint.dir %s holds no checkpoint and no model.init_from is named: "
                     "evaluating randomly initialised weights",
                     s->cfg.checkpoint.dir);
        else
            snprintf(buf, n,
                     "no checkpoint or init_from named: evaluating randomly initialised weights");
    } else {
        snprintf(buf, n, "evaluating checkpoint %s (step %ld%s)", s->resumed_from, s->start_step,
                 s->weights_from == RUN_WEIGHTS_LATEST ? ", the latest in checkpoint.dir" : "");
        describe_checkpoint_base(s, buf, n, "");
    }
}

/* lora.init_from: where the adapters came from, or that a checkpoint
 * overrode it. */
static void describe_adapters(const struct run_session *s, char *buf, size_t n)
{
    const char *dir = s->cfg.lora.init_from;
    const size_t len = strlen(buf);
    if (!dir || len + 1 >= n)
        return;
    if (s->weights_from == RUN_WEIGHTS_INITIAL || s->weights_from == RUN_WEIGHTS_INIT_FROM)
        snprintf(buf + len, n - len, "%sadapters from %s (lora.init_from)",
                 len ? "; " : "starting from the ", dir);
    else
        snprintf(buf + len, n - len, "; lora.init_from %s is not used", dir);
}

void run_checkpoint_describe(const struct run_session *s, int training, char *buf, size_t n,
                             int *warn)
{
    *warn = 0;
    buf[0] = '\0';
    if (!training)
        describe_eval(s, buf, n, warn);
    else if (s->weights_from == RUN_WEIGHTS_INIT_FROM)
        snprintf(buf, n, "starting from the weights in %s (model.init_from)",
                 s->cfg.model.init_from);
    else if (s->weights_from != RUN_WEIGHTS_INITIAL)
        describe_resume(s, buf, n);
    describe_adapters(s, buf, n);
}

/* ---- export ---------------------------------------------------------------- */

/* The table meta.json describes, with its adapters, by the session's one
 * way of building tables; it must be the checkpoint's partition. */
static zt_status table_of(const char *step_dir, const struct ckpt_meta *m, struct param_table *t)
{
    const struct lora_spec spec = spec_of(&m->lora);
    ZT_TRY(session_table_build(&m->model, m->lora.r ? &spec : NULL, t));
    if (m->quant.load_in_4bit)
        ZT_TRY(session_table_quantise(&m->quant, t));
    int same = t->n_params == m->n_params && t->n_units == m->n_units;
    for (int u = 0; same && u < m->n_units; u++)
        same = param_table_unit_size(t, u) == m->unit_numel[u];
    if (same)
        return ZT_OK;
    param_table_free(t);
    return zt_error_set(ZT_ERR_CHECKPOINT,
                        "%s/meta.json: %llu parameters in %d units, but its model and adapters "
                        "have %zu in %d",
                        step_dir, (unsigned long long)m->n_params, m->n_units, t->n_params,
                        t->n_units);
}

/* The master weights of every unit the shards hold, into their places. */
static zt_status read_stored_units(const char *step_dir, const struct ckpt_meta *m,
                                   const struct param_table *t, float *out)
{
    const struct ckpt_state master = {SHARD_STATE_MASTER_NAME, ZT_F32, 0};
    struct ckpt_reader *r;
    ZT_TRY(ckpt_reader_open(step_dir, m, t, &r));
    zt_status st = ZT_OK;
    for (int u = 0; u < m->n_units && st == ZT_OK; u++)
        if (ckpt_meta_unit_stored(m, u))
            st = ckpt_reader_read(r, &master, t, u, 0, m->unit_numel[u], out + t->unit_offset[u]);
    ckpt_reader_close(r);
    return st;
}

zt_status run_checkpoint_read_model(const char *step_dir, struct ckpt_meta *meta,
                                    struct param_table *table, float **params)
{
    *params = NULL;
    ZT_TRY(ckpt_validate(step_dir, meta));
    zt_status st = table_of(step_dir, meta, table);
    if (st != ZT_OK) {
        ckpt_meta_free(meta);
        return st;
    }
    float *out = malloc((table->n_params ? table->n_params : 1) * sizeof(float));
    st = out ? read_stored_units(step_dir, meta, table, out)
             : zt_error_set(ZT_ERR_NOMEM, "cannot allocate %zu parameters", table->n_params);
    if (st == ZT_OK && meta->base.kind != CKPT_BASE_STORED)
        st = run_base_read(step_dir, meta, table, out);
    /* a 4-bit base is the model the run computed with */
    if (st == ZT_OK && meta->quant.load_in_4bit)
        st = param_quant_round_trip(table, out);
    if (st != ZT_OK) {
        free(out);
        param_table_free(table);
        ckpt_meta_free(meta);
        return st;
    }
    *params = out;
    return ZT_OK;
}
