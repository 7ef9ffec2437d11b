/* tests/test_frozen.c — frozen tensors under every ZeRO stage: the engine
 * keeps gradients, master weights and optimizer states only for units that
 * train, frozen weights never change, every stage trains the same model,
 * and checkpoints of a partly frozen model, and of every optimizer's
 * states, resume exactly (run at 1, 2 and 3 ranks). Tensors are frozen through the per-tensor flag
 * of the model interface, the way a fine-tuning method sets it. */
#include <check.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/memory_report.h"
#include "coordinator/run_checkpoint.h"
#include "coordinator/train.h"
#include "testutil.h"

#define MAX_SETS 6

/* micro.yaml has units 0 (wte, wpe), 1 and 2 (blocks), 3 (ln_f): block 0
 * is frozen whole, wpe inside the trainable embedding unit. */
static const char *const frozen_prefixes[] = {"h.0.", "wpe."};
#define N_FROZEN_PREFIXES 2

static int is_frozen_name(const char *name)
{
    for (int i = 0; i < N_FROZEN_PREFIXES; i++)
        if (strncmp(name, frozen_prefixes[i], strlen(frozen_prefixes[i])) == 0)
            return 1;
    return 0;
}

static void open_micro(struct run_session *s, const char *outdir, const char *const *sets,
                       int n_sets)
{
    struct config_override ov[MAX_SETS + 2];
    char out[600], ckpt[620];
    snprintf(out, sizeof out, "run.output_dir=%s", outdir);
    snprintf(ckpt, sizeof ckpt, "checkpoint.dir=%s/ckpt", outdir);
    ov[0].assignment = out;
    ov[1].assignment = ckpt;
    ck_assert_int_le(n_sets, MAX_SETS);
    for (int i = 0; i < n_sets; i++)
        ov[2 + i].assignment = sets[i];
    struct run_options o = {.config_path = testutil_source_path("tests/data/micro.yaml"),
                            .overrides = ov,
                            .n_overrides = 2 + n_sets,
                            .quiet = 1};
    ck_assert_int_eq(session_open(s, &o, 1), ZT_OK);
}

/* Freezes the tensors named above and rebuilds the engine, which then
 * sizes its states for the trainable units only. */
static void freeze(struct run_session *s)
{
    for (int k = 0; k < s->table.n_tensors; k++)
        if (is_frozen_name(s->table.tensors[k].name))
            s->table.tensors[k].trainable = 0;
    const struct shard_engine_config ec = s->engine.cfg;
    shard_engine_destroy(&s->engine);
    ck_assert_int_eq(shard_engine_create(&ec, &s->table, s->comm, &s->compute, &s->engine), ZT_OK);
}

static double step(struct run_session *s, long k)
{
    struct step_record r = {.step = k + 1, .lr = 3e-3};
    ck_assert_int_eq(train_step(s, k, &r), ZT_OK);
    return r.loss;
}

static float *full_params(struct run_session *s)
{
    float *p = malloc(s->table.n_params * sizeof(float));
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(shard_engine_full_params(&s->engine, p), ZT_OK);
    return p;
}

static const char *const stage_sets[4] = {"zero_optimization.stage=0", "zero_optimization.stage=1",
                                          "zero_optimization.stage=2", "zero_optimization.stage=3"};

START_TEST(frozen_units_hold_no_state_and_never_change)
{
    enum { STEPS = 6 };
    double ref[STEPS], got[STEPS];
    for (int prec = 0; prec < 2; prec++)
        for (int stage = 0; stage <= 3; stage++) {
            const char *sets[] = {stage_sets[stage],
                                  prec ? "bf16.enabled=true" : "bf16.enabled=false"};
            struct run_session s;
            open_micro(&s, testutil_tmpdir("frozen"), sets, 2);
            const size_t grads_all = s.ledger.current[LEDGER_GRADS];
            const size_t states_all = s.ledger.current[LEDGER_OPTIMIZER_STATES];
            freeze(&s);
            const struct shard_partition *p = &s.engine.part;
            ck_assert(!p->units[1].trainable && p->units[0].trainable && p->units[2].trainable);
            ck_assert(p->state_padded_total == p->padded_total - p->units[1].padded);
            /* what is kept: gradients and states of the trainable units */
            const size_t esz = prec ? 2 : 4;
            const size_t gsz = stage < 2 ? p->state_padded_total : p->state_shard_total;
            const size_t ssz = stage < 1 ? p->state_padded_total : p->state_shard_total;
            ck_assert_uint_eq(s.ledger.current[LEDGER_GRADS], gsz * esz);
            ck_assert_uint_eq(s.ledger.current[LEDGER_OPTIMIZER_STATES], ssz * 8);
            ck_assert_uint_lt(s.ledger.current[LEDGER_GRADS], grads_all);
            ck_assert_uint_lt(s.ledger.current[LEDGER_OPTIMIZER_STATES], states_all);
            ck_assert_uint_eq(s.ledger.current[LEDGER_MASTER_PARAMS], prec ? ssz * 4 : 0);

            float *before = full_params(&s);
            for (long k = 0; k < STEPS; k++)
                (stage == 0 ? ref : got)[k] = step(&s, k);
            float *after = full_params(&s);
            int moved = 0;
            for (int k = 0; k < s.table.n_tensors; k++) {
                const struct param_tensor *t = &s.table.tensors[k];
                int same =
                    memcmp(before + t->offset, after + t->offset, t->numel * sizeof(float)) == 0;
                if (!t->trainable)
                    ck_assert_msg(same, "stage %d: frozen %s changed", stage, t->name);
                moved += !same;
            }
            ck_assert_int_gt(moved, 0);
            free(before);
            free(after);
            for (int k = 0; k < STEPS && stage > 0; k++)
                ck_assert_msg(fabs(got[k] - ref[k]) <= (prec ? 0.05 : 1e-5 * fabs(ref[k])),
                              "precision %d stage %d step %d: %.9g vs stage 0's %.9g", prec, stage,
                              k + 1, got[k], ref[k]);
            session_close(&s);
        }
}
END_TEST

/* Save after 3 steps, train 2 more; a new session (partly frozen when
 * `frozen`) resumes from the checkpoint and repeats those 2 steps bit for
 * bit. A session that does not freeze the same units refuses the
 * checkpoint. */
static void resume_case(const char *stage, const char *precision, const char *optimizer, int frozen)
{
    const char *sets[] = {stage, precision, optimizer, "optimizer.params.betas=null",
                          "optimizer.params.eps=null"};
    char dir[512], where[8192];
    double want[2];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("frozen-ckpt"));
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD); /* one folder for every rank */
    struct run_session s;
    open_micro(&s, dir, sets, 5);
    if (frozen)
        freeze(&s);
    for (long k = 0; k < 3; k++)
        step(&s, k);
    ck_assert_int_eq(run_checkpoint_save(&s, 3, where, sizeof where), ZT_OK);
    for (long k = 3; k < 5; k++)
        want[k - 3] = step(&s, k);
    session_close(&s);

    open_micro(&s, dir, sets, 5);
    if (frozen)
        freeze(&s);
    ck_assert_int_eq(run_checkpoint_load(&s, where, 0), ZT_OK);
    ck_assert_int_eq(s.start_step, 3);
    for (long k = 3; k < 5; k++) {
        double got = step(&s, k);
        ck_assert_msg(memcmp(&got, &want[k - 3], sizeof got) == 0,
                      "%s %s %s: step %ld loss %.17g after resume, %.17g before", stage, precision,
                      optimizer, k + 1, got, want[k - 3]);
    }
    session_close(&s);
    if (!frozen)
        return;
    open_micro(&s, dir, sets, 5);
    ck_assert_int_eq(run_checkpoint_load(&s, where, 0), ZT_ERR_CHECKPOINT);
    ck_assert_ptr_nonnull(strstr(zt_error_message(), "was frozen in the checkpoint"));
    session_close(&s);
}

START_TEST(partly_frozen_checkpoints_resume_exactly)
{
    resume_case("zero_optimization.stage=1", "bf16.enabled=false", "optimizer.type=AdamW", 1);
    resume_case("zero_optimization.stage=3", "bf16.enabled=true", "optimizer.type=AdamW", 1);
    resume_case("zero_optimization.stage=0", "bf16.enabled=true", "optimizer.type=AdamW", 1);
}
END_TEST

/* Each optimizer's states (their number and names from the optimizer
 * table) go into the checkpoint and come back exactly. */
START_TEST(every_optimizer_resumes_exactly)
{
    resume_case("zero_optimization.stage=2", "bf16.enabled=false", "optimizer.type=Lion", 0);
    resume_case("zero_optimization.stage=3", "bf16.enabled=true", "optimizer.type=Adam", 0);
    resume_case("zero_optimization.stage=1", "bf16.enabled=false", "optimizer.type=Lion", 1);
    /* SGD without momentum: a checkpoint of the weights alone */
    resume_case("zero_optimization.stage=2", "bf16.enabled=false", "optimizer.type=SGD", 0);
    /* Adafactor: its factors (rank 0's section) and, with beta1, exp_avg */
    resume_case("zero_optimization.stage=3", "bf16.enabled=true", "optimizer.type=Adafactor", 0);
    resume_case("zero_optimization.stage=1", "bf16.enabled=false", "optimizer.type=Adafactor", 1);
    resume_case("zero_optimization.stage=0", "optimizer.params.beta1=0.9",
                "optimizer.type=Adafactor", 0);
    /* AdamW8bit: 8-bit code sections, and the absmax (and small tensors'
     * fp32 moments) in rank 0's */
    resume_case("zero_optimization.stage=3", "bf16.enabled=true", "optimizer.type=AdamW8bit", 0);
    resume_case("zero_optimization.stage=1", "optimizer.params.min_8bit_size=100",
                "optimizer.type=AdamW8bit", 1);
}
END_TEST

/* The ledger's optimizer_states are the optimizer's state vectors, no
 * more: 8 bytes per element of the rank's range for the Adam family, 4 for
 * Lion and SGD with momentum, 0 for SGD without (stage 0 holds the whole
 * padded space, stages 1-3 the shards). */
START_TEST(optimizer_state_bytes_follow_the_table)
{
    static const struct {
        const char *type;
        size_t bytes;
        const char *momentum;
    } cases[] = {{"optimizer.type=AdamW", 8, "optimizer.params.weight_decay=0.1"},
                 {"optimizer.type=Adam", 8, "optimizer.params.weight_decay=0.1"},
                 {"optimizer.type=Lion", 4, "optimizer.params.weight_decay=0.1"},
                 {"optimizer.type=SGD", 4, "optimizer.params.momentum=0.9"},
                 {"optimizer.type=SGD", 0, "optimizer.params.momentum=0"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int stage = 0; stage <= 3; stage++) {
            const char *sets[] = {stage_sets[stage], cases[k].type, cases[k].momentum,
                                  "optimizer.params.betas=null", "optimizer.params.eps=null"};
            struct run_session s;
            open_micro(&s, testutil_tmpdir("frozen"), sets, 5);
            const struct shard_partition *p = &s.engine.part;
            const size_t held = stage == 0 ? p->padded_total : p->shard_total;
            ck_assert_uint_eq(s.ledger.current[LEDGER_OPTIMIZER_STATES], held * cases[k].bytes);
            ck_assert_uint_eq(s.engine.cfg.optimizer_states * sizeof(float), cases[k].bytes);
            session_close(&s);
        }
}
END_TEST

/* Adafactor keeps row and column factors of every trainable matrix and a
 * full second moment of every trainable vector, whole on every rank in
 * every stage, plus exp_avg on the rank's range with a beta1. */
START_TEST(adafactor_state_bytes_are_factors)
{
    for (int beta1 = 0; beta1 <= 1; beta1++)
        for (int stage = 0; stage <= 3; stage++) {
            const char *sets[] = {stage_sets[stage], "optimizer.type=Adafactor",
                                  beta1 ? "optimizer.params.beta1=0.9"
                                        : "optimizer.params.beta1=null",
                                  "optimizer.params.betas=null", "optimizer.params.eps=null"};
            struct run_session s;
            open_micro(&s, testutil_tmpdir("frozen"), sets, 5);
            freeze(&s);
            size_t factors = 0, matrix_elems = 0;
            for (int k = 0; k < s.table.n_tensors; k++) {
                const struct param_tensor *t = &s.table.tensors[k];
                if (!t->trainable)
                    continue;
                factors += t->cols > 1 ? (size_t)(t->rows + t->cols) : t->numel;
                matrix_elems += t->cols > 1 ? t->numel : 0;
            }
            /* the factors are a small fraction of the matrices they stand for */
            ck_assert_uint_lt(factors * 10, matrix_elems);
            const struct shard_partition *p = &s.engine.part;
            const size_t held = stage == 0 ? p->state_padded_total : p->state_shard_total;
            ck_assert_uint_eq(s.ledger.current[LEDGER_OPTIMIZER_STATES],
                              (factors + (beta1 ? held : 0)) * sizeof(float));
            session_close(&s);
        }
}
END_TEST

/* AdamW8bit keeps two 8-bit codes per element of the rank's range, and on
 * every rank two fp32 absmax per block of 256 of each quantised tensor and
 * fp32 moments of the tensors under min_8bit_size: about 2 bytes per
 * parameter. */
START_TEST(adamw8bit_state_bytes_are_codes_and_scales)
{
    for (int stage = 0; stage <= 3; stage++) {
        const char *sets[] = {stage_sets[stage], "optimizer.type=AdamW8bit",
                              "optimizer.params.min_8bit_size=1000", "optimizer.params.betas=null",
                              "optimizer.params.eps=null"};
        struct run_session s;
        open_micro(&s, testutil_tmpdir("frozen"), sets, 5);
        freeze(&s);
        size_t replicated = 0, quantised = 0;
        for (int k = 0; k < s.table.n_tensors; k++) {
            const struct param_tensor *t = &s.table.tensors[k];
            if (!t->trainable)
                continue;
            replicated += t->numel >= 1000 ? 2 * ((t->numel + 255) / 256) : 2 * t->numel;
            quantised += t->numel >= 1000;
        }
        ck_assert_uint_gt(quantised, 0);
        const struct shard_partition *p = &s.engine.part;
        const size_t held = stage == 0 ? p->state_padded_total : p->state_shard_total;
        ck_assert_uint_eq(s.ledger.current[LEDGER_OPTIMIZER_STATES],
                          2 * held + replicated * sizeof(float));
        session_close(&s);
    }
}
END_TEST

/* LOMO keeps no gradients: in every stage the ledger's grads never hold a
 * byte, and the communication buffers peak at one unit's full gradient
 * (plus its reduced shard under stages 1-3), measured over real steps —
 * besides the embedding unit's (unit 0): the tied head adds to it at the
 * start of the backward and the embeddings at the end, so it is open
 * throughout. The largest other unit sets the bound, and the peak reaches
 * it. */
START_TEST(lomo_holds_one_unit_gradient_at_a_time)
{
    for (int stage = 0; stage <= 3; stage++)
        for (int precision = 0; precision < 2; precision++) {
            const char *sets[] = {stage_sets[stage], "optimizer.type=LOMO",
                                  precision ? "bf16.enabled=true" : "bf16.enabled=false",
                                  "optimizer.params.betas=null", "optimizer.params.eps=null"};
            struct run_session s;
            open_micro(&s, testutil_tmpdir("frozen"), sets, 5);
            for (long k = 0; k < 2; k++)
                step(&s, k);
            const struct shard_partition *p = &s.engine.part;
            /* under bf16 the backward accumulates in an fp32 view (workspace)
             * and the 16-bit buffer exists only while the unit reduces: one
             * unit at a time, the embedding's included */
            size_t bound = 0;
            for (int u = precision ? 0 : 1; u < p->n_units; u++) {
                const size_t unit = p->units[u].padded * s.engine.esz;
                const size_t shard = stage > 0 ? p->units[u].shard * s.engine.esz : 0;
                bound = unit + shard > bound ? unit + shard : bound;
            }
            bound += precision ? 0 : p->units[0].padded * s.engine.esz;
            ck_assert_uint_eq(s.ledger.peak[LEDGER_GRADS], 0);
            ck_assert_uint_eq(s.ledger.peak[LEDGER_COMM_BUFFERS], bound);
            session_close(&s);
        }
}
END_TEST

/* The memory report's expected model states (the paper's formula with the
 * engine's bytes per parameter) equal what the ledger holds, up to the
 * shard padding, for every optimizer in every stage: 8-bit codes at one
 * byte, block scales, factors and small tensors' fp32 moments counted
 * once per rank, no gradients for LOMO. */
START_TEST(expected_model_states_match_the_ledger)
{
    static const char *const types[][2] = {
        {"optimizer.type=AdamW", "bf16.enabled=true"},
        {"optimizer.type=Lion", "bf16.enabled=false"},
        {"optimizer.type=SGD", "optimizer.params.momentum=0"},
        {"optimizer.type=AdamW8bit", "optimizer.params.min_8bit_size=1000"},
        {"optimizer.type=Adafactor", "optimizer.params.beta1=0.9"},
        {"optimizer.type=Adafactor", "bf16.enabled=true"},
        {"optimizer.type=LOMO", "bf16.enabled=false"},
    };
    static const enum ledger_category model_states[] = {
        LEDGER_PARAMS, LEDGER_GRADS, LEDGER_MASTER_PARAMS, LEDGER_OPTIMIZER_STATES};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (int stage = 0; stage <= 3; stage++) {
            const char *sets[] = {stage_sets[stage], types[t][0], types[t][1],
                                  "optimizer.params.betas=null", "optimizer.params.eps=null"};
            struct run_session s;
            open_micro(&s, testutil_tmpdir("frozen"), sets, 5);
            double bpp[4];
            shard_engine_bytes_per_param(&s.engine, bpp);
            const struct shard_partition *p = &s.engine.part;
            const uint64_t expected =
                memory_expected_model_states(stage, s.world, s.table.n_params, p->trainable_numel,
                                             bpp, s.engine.tensor_state_len * sizeof(float));
            size_t held = 0;
            for (size_t k = 0; k < 4; k++)
                held += s.ledger.current[model_states[k]];
            /* padding: each unit rounded up to the ranks times 16 elements */
            const double padding = (double)(p->padded_total - s.table.n_params) * 16;
            ck_assert_msg(held >= expected && (double)(held - expected) <= padding,
                          "%s %s stage %d: the ledger holds %zu bytes of model states, the "
                          "report expects %llu",
                          types[t][0], types[t][1], stage, held, (unsigned long long)expected);
            session_close(&s);
        }
}
END_TEST

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    Suite *s = suite_create("frozen");
    TCase *tc = tcase_create("frozen");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, frozen_units_hold_no_state_and_never_change);
    tcase_add_test(tc, adafactor_state_bytes_are_factors);
    tcase_add_test(tc, adamw8bit_state_bytes_are_codes_and_scales);
    tcase_add_test(tc, lomo_holds_one_unit_gradient_at_a_time);
    tcase_add_test(tc, expected_model_states_match_the_ledger);
    tcase_add_test(tc, partly_frozen_checkpoints_resume_exactly);
    tcase_add_test(tc, every_optimizer_resumes_exactly);
    tcase_add_test(tc, optimizer_state_bytes_follow_the_table);
    suite_add_tcase(s, tc);
    int rc = testutil_run_suite(s, 1);
    MPI_Finalize();
    return rc;
}
