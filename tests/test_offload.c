/* tests/test_offload.c — ZeRO-Offload (shard_engine_config.offload_optimizer)
 * at 1, 2 and 3 ranks, on the CPU backend through the engine's test hook
 * offload_force: the master and the optimizer states in the engine's host
 * memory, the update on the CPU op table, the gradients and the working
 * params copied through the device table. The config key is not wired
 * yet, so each session's engine is rebuilt with the option (as
 * test_frozen.c rebuilds it to freeze tensors).
 *
 * Offload changes where the states are, never the arithmetic: the losses
 * and the parameters equal the non-offloaded run's bit for bit, in every
 * stage and precision, for an element-wise and the whole-tensor
 * optimizers; checkpoints cross between the two; the ledger counts the
 * states in host memory (shard_engine_host_bytes). */
#include <check.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/run_checkpoint.h"
#include "coordinator/train.h"
#include "micro_session.h"
#include "testutil.h"

#define STEPS 4

static void open_micro(struct run_session *s, const char *outdir, const char *const *sets,
                       int n_sets)
{
    ck_assert_int_eq(micro_session_open(s, outdir, sets, n_sets), ZT_OK);
}

/* A pinned allocator for the hook: plain aligned memory, counted, so the
 * test sees the host states go through it and come back. */
static long pinned_live;

static zt_status test_pinned_alloc(size_t bytes, void **out)
{
    *out = aligned_alloc(64, (bytes + 63) / 64 * 64);
    pinned_live += *out != NULL;
    return ZT_OK;
}

static void test_pinned_free(void *p)
{
    pinned_live--;
    free(p);
}

static const struct shard_pinned_alloc test_pinned = {test_pinned_alloc, test_pinned_free};

/* The session's engine again with offload on or off (pinned through the
 * test hook when asked). */
static zt_status rebuild(struct run_session *s, int offload, int pinned)
{
    struct shard_engine_config ec = s->engine.cfg;
    ec.offload_optimizer = offload;
    ec.offload_force = offload;
    ec.offload_pin_memory = pinned;
    ec.pinned = pinned ? &test_pinned : NULL;
    shard_engine_destroy(&s->engine);
    return shard_engine_create(&ec, &s->table, s->dp_groups.shard ? s->dp_groups.shard : s->axes.dp,
                               &s->compute, &s->engine);
}

static void open_engine(struct run_session *s, const char *dir, const char *const *sets, int n_sets,
                        int offload)
{
    open_micro(s, dir, sets, n_sets);
    ck_assert_int_eq(rebuild(s, offload, offload), ZT_OK);
    ck_assert_int_eq(s->engine.offload != NULL, offload);
}

static double step(struct run_session *s, long k)
{
    return micro_session_step(s, k);
}

static float *full_params(struct run_session *s)
{
    return micro_session_params(s);
}

/* What a run ends with: its losses and its full parameters (owned). */
struct outcome {
    double loss[STEPS];
    float *params;
    size_t n;
};

/* Under offload the host holds exactly the persistent master and optimizer
 * states between steps, and more at its peak (the step's staging); without
 * it, nothing. */
static void check_host_bytes(struct run_session *s)
{
    size_t current, peak;
    shard_engine_host_bytes(&s->engine, &current, &peak);
    const struct ledger *l = &s->ledger;
    if (!s->engine.offload) {
        ck_assert_uint_eq(current, 0);
        return;
    }
    ck_assert_uint_eq(current,
                      l->current[LEDGER_MASTER_PARAMS] + l->current[LEDGER_OPTIMIZER_STATES]);
    ck_assert_uint_gt(peak, current);
    /* the master is kept under fp32 too: 4 bytes per held state element */
    const size_t held = s->engine.policy.shard_states ? s->engine.part.state_shard_total
                                                      : s->engine.part.state_padded_total;
    ck_assert_uint_eq(l->current[LEDGER_MASTER_PARAMS], held * sizeof(float));
    ck_assert_int_gt(pinned_live, 0);
}

static void run(const char *const *sets, int n_sets, int offload, struct outcome *out)
{
    struct run_session s;
    open_engine(&s, testutil_tmpdir("offload"), sets, n_sets, offload);
    for (long k = 0; k < STEPS; k++)
        out->loss[k] = step(&s, k);
    check_host_bytes(&s);
    out->params = full_params(&s);
    out->n = s.table.n_params;
    session_close(&s);
    ck_assert_int_eq(pinned_live, 0);
}

static const char *const stage_sets[4] = {"zero_optimization.stage=0", "zero_optimization.stage=1",
                                          "zero_optimization.stage=2", "zero_optimization.stage=3"};
static const char *const precision_sets[2] = {"bf16.enabled=false", "bf16.enabled=true"};

/* Each optimizer as a pair of settings; micro.yaml's betas and eps are
 * AdamW's, nulled for the others. */
static const char *const optimizer_sets[][3] = {
    {"optimizer.type=AdamW", "optimizer.params.weight_decay=0.1", "optimizer.params.lr=3e-3"},
    /* with beta1: a per-element state besides the factors */
    {"optimizer.type=Adafactor", "optimizer.params.beta1=0.9",
     "optimizer.params.scale_parameter=false"},
    /* 8-bit codes, and block scales in the whole-tensor state */
    {"optimizer.type=AdamW8bit", "optimizer.params.min_8bit_size=256",
     "optimizer.params.weight_decay=0.1"},
};

static void same_outcome(const struct outcome *a, const struct outcome *b, const char *what)
{
    for (int k = 0; k < STEPS; k++)
        ck_assert_msg(memcmp(&a->loss[k], &b->loss[k], sizeof a->loss[k]) == 0,
                      "%s: step %d loss %.17g with offload, %.17g without", what, k + 1, b->loss[k],
                      a->loss[k]);
    ck_assert_uint_eq(a->n, b->n);
    ck_assert_msg(memcmp(a->params, b->params, a->n * sizeof(float)) == 0,
                  "%s: parameters differ with offload", what);
}

/* One optimizer in every stage and precision, offloaded or not. */
static void offload_matches(int opt)
{
    for (int prec = 0; prec < 2; prec++)
        for (int stage = 0; stage <= 3; stage++) {
            const char *sets[] = {stage_sets[stage],          precision_sets[prec],
                                  optimizer_sets[opt][0],     optimizer_sets[opt][1],
                                  optimizer_sets[opt][2],     "optimizer.params.betas=null",
                                  "optimizer.params.eps=null"};
            struct outcome ref, got;
            char what[160];
            run(sets, 7, 0, &ref);
            run(sets, 7, 1, &got);
            snprintf(what, sizeof what, "%s stage %d %s", optimizer_sets[opt][0], stage,
                     precision_sets[prec]);
            same_outcome(&ref, &got, what);
            free(ref.params);
            free(got.params);
        }
}

START_TEST(adamw_offloaded_is_bit_identical)
{
    offload_matches(0);
}
END_TEST

START_TEST(adafactor_offloaded_is_bit_identical)
{
    offload_matches(1);
}
END_TEST

START_TEST(adamw8bit_offloaded_is_bit_identical)
{
    offload_matches(2);
}
END_TEST

/* Freezes block 0 (its unit has no master nor states: its weights are the
 * working copy) and wpe inside the trainable embedding unit. */
static void freeze(struct run_session *s, int offload)
{
    for (int k = 0; k < s->table.n_tensors; k++) {
        const char *name = s->table.tensors[k].name;
        if (strncmp(name, "h.0.", 4) == 0 || strncmp(name, "wpe.", 4) == 0)
            s->table.tensors[k].trainable = 0;
    }
    ck_assert_int_eq(rebuild(s, offload, 0), ZT_OK);
}

/* Saves after 3 steps with offload `save_off`, trains 2 more; a session
 * with offload `load_off` resumes from the checkpoint and repeats those 2
 * steps and their parameters bit for bit. */
static void resume_case(const char *const *sets, int n_sets, int frozen, int save_off, int load_off)
{
    char dir[512], where[8192];
    double want[2];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("offload-ckpt"));
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD); /* one folder for every rank */
    struct run_session s;
    open_engine(&s, dir, sets, n_sets, save_off);
    if (frozen)
        freeze(&s, save_off);
    for (long k = 0; k < 3; k++)
        step(&s, k);
    ck_assert_int_eq(run_checkpoint_save(&s, 3, where, sizeof where), ZT_OK);
    for (long k = 3; k < 5; k++)
        want[k - 3] = step(&s, k);
    float *want_params = full_params(&s);
    session_close(&s);

    open_engine(&s, dir, sets, n_sets, load_off);
    if (frozen)
        freeze(&s, load_off);
    char what[160];
    snprintf(what, sizeof what, "%s %s (offload %d -> %d)", sets[0], sets[1], save_off, load_off);
    micro_session_check_resume(&s, where, want, want_params, what);
    free(want_params);
    session_close(&s);
}

static void resume_both_ways(const char *const *sets, int n_sets, int frozen)
{
    resume_case(sets, n_sets, frozen, 1, 0);
    resume_case(sets, n_sets, frozen, 0, 1);
}

START_TEST(checkpoints_cross_between_offload_and_not)
{
    const char *adamw[] = {stage_sets[1], precision_sets[1]};
    resume_both_ways(adamw, 2, 0);
    const char *adafactor[] = {stage_sets[3],
                               precision_sets[0],
                               optimizer_sets[1][0],
                               optimizer_sets[1][1],
                               "optimizer.params.betas=null",
                               "optimizer.params.eps=null"};
    resume_both_ways(adafactor, 6, 0);
    const char *adamw8bit[] = {stage_sets[0], precision_sets[1], optimizer_sets[2][0],
                               optimizer_sets[2][1]};
    resume_both_ways(adamw8bit, 4, 0);
    /* frozen units: their master is the working copy, in device memory */
    const char *frozen32[] = {stage_sets[2], precision_sets[0]};
    resume_both_ways(frozen32, 2, 1);
    const char *frozen16[] = {stage_sets[3], precision_sets[1]};
    resume_both_ways(frozen16, 2, 1);
}
END_TEST

/* LOMO updates inside the backward on the device: offloading it is refused. */
START_TEST(fused_backward_optimizer_is_refused)
{
    /* (LOMO keeps no gradients to accumulate) */
    const char *sets[] = {"optimizer.type=LOMO", "optimizer.params.betas=null",
                          "optimizer.params.eps=null", "gradient_accumulation_steps=1"};
    struct run_session s;
    open_micro(&s, testutil_tmpdir("offload-lomo"), sets, 4);
    ck_assert_int_eq(rebuild(&s, 1, 0), ZT_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(zt_error_message(), "cannot be offloaded"));
    session_close(&s);
}
END_TEST

/* A plan counts the same host states and staging as a real engine. */
START_TEST(a_plan_counts_the_host_states)
{
    const char *sets[] = {stage_sets[2], precision_sets[1]};
    struct run_session s;
    open_engine(&s, testutil_tmpdir("offload-plan"), sets, 2, 1);
    step(&s, 0);
    size_t real_current, real_peak;
    shard_engine_host_bytes(&s.engine, &real_current, &real_peak);
    struct ledger plan;
    ledger_init(&plan, 1);
    struct compute_backend be;
    ck_assert_int_eq(compute_backend_open("cpu", -1, &plan, &be), ZT_OK);
    struct shard_engine e;
    struct shard_engine_config ec = s.engine.cfg;
    ck_assert_int_eq(shard_engine_create(&ec, &s.table, NULL, &be, &e), ZT_OK);
    ck_assert_ptr_nonnull(e.offload);
    struct optimizer_hparams hp = ec.hparams;
    struct shard_step_result r;
    ck_assert_int_eq(shard_engine_step(&e, &hp, 1.0, 0, &r), ZT_OK);
    size_t plan_current, plan_peak;
    shard_engine_host_bytes(&e, &plan_current, &plan_peak);
    ck_assert_uint_eq(plan_current, real_current);
    ck_assert_uint_eq(plan_peak, real_peak);
    shard_engine_destroy(&e);
    ck_assert_uint_eq(plan.total_current, 0);
    compute_backend_close(&be);
    session_close(&s);
}
END_TEST

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    Suite *s = suite_create("offload");
    TCase *tc = tcase_create("offload");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, adamw_offloaded_is_bit_identical);
    tcase_add_test(tc, adafactor_offloaded_is_bit_identical);
    tcase_add_test(tc, adamw8bit_offloaded_is_bit_identical);
    tcase_add_test(tc, checkpoints_cross_between_offload_and_not);
    tcase_add_test(tc, fused_backward_optimizer_is_refused);
    tcase_add_test(tc, a_plan_counts_the_host_states);
    suite_add_tcase(s, tc);
    int rc = testutil_run_suite(s, 1);
    MPI_Finalize();
    return rc;
}
