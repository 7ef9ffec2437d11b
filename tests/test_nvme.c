/* tests/test_nvme.c — ZeRO-Infinity's optimizer states on disk
 * (zero_optimization.offload_optimizer: {device: nvme}) at 1 and 2 ranks,
 * through the config keys.
 *
 * The file changes where the states are, never the arithmetic: losses and
 * parameters equal the run without offload bit for bit in every stage, with
 * the default window and with one far smaller than a unit's states (so the
 * ring of buffers cycles many times a step); checkpoints cross between
 * nvme and no offload both ways; the ledger counts the window and the
 * engine reports the file apart; a plan counts the same window and creates
 * nothing; a missing or unwritable folder, a full disk and what nvme
 * cannot stream are clear errors. */
#include <check.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "coordinator/run_checkpoint.h"
#include "coordinator/train.h"
#include "micro_session.h"
#include "testutil.h"

#define MAX_SETS MICRO_SESSION_MAX_SETS
#define STEPS    4

/* One folder for every rank (the ranks' tmpdirs would differ). */
static const char *shared_tmpdir(const char *tag, char *buf, size_t n)
{
    snprintf(buf, n, "%s", testutil_tmpdir(tag));
    MPI_Bcast(buf, (int)n, MPI_CHAR, 0, MPI_COMM_WORLD);
    return buf;
}

/* The settings of a run: `sets`, and with nvme the offload into dir/nvme
 * (made here) with a window of `window` elements per buffer (0: default). */
struct run_setup {
    const char *sets[MAX_SETS];
    int n;
    char path[700], size[64];
};

static void setup(struct run_setup *r, const char *const *sets, int n_sets, const char *dir,
                  int nvme, long window)
{
    memset(r, 0, sizeof *r);
    for (int i = 0; i < n_sets; i++)
        r->sets[r->n++] = sets[i];
    if (!nvme)
        return;
    snprintf(r->path, sizeof r->path, "zero_optimization.offload_optimizer.nvme_path=%s/nvme", dir);
    mkdir(testutil_fmt("%s/nvme", dir), 0755);
    r->sets[r->n++] = "zero_optimization.offload_optimizer.device=nvme";
    r->sets[r->n++] = r->path;
    if (window > 0) {
        snprintf(r->size, sizeof r->size, "zero_optimization.offload_optimizer.buffer_size=%ld",
                 window);
        r->sets[r->n++] = r->size;
        r->sets[r->n++] = "zero_optimization.offload_optimizer.buffer_count=2";
    }
}

static void open_run(struct run_session *s, const char *dir, const struct run_setup *r)
{
    zt_status st = micro_session_open(s, dir, r->sets, r->n);
    ck_assert_msg(st == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(s->engine.nvme != NULL, r->path[0] != '\0');
}

/* Under nvme the ledger holds the window, not the states: with `window`
 * elements a buffer, 2 buffers of 4 bytes of master and 8 of AdamW's
 * moments an element; the file holds 12 bytes of every held element. */
static void check_window(struct run_session *s, long window)
{
    const struct ledger *l = &s->ledger;
    const size_t held = s->engine.policy.shard_states ? s->engine.part.state_shard_total
                                                      : s->engine.part.state_padded_total;
    ck_assert_uint_eq(shard_engine_nvme_bytes(&s->engine), held * 12);
    ck_assert_uint_eq(l->current[LEDGER_MASTER_PARAMS], 2 * (size_t)window * 4);
    ck_assert_uint_eq(l->current[LEDGER_OPTIMIZER_STATES], 2 * (size_t)window * 8);
    /* one file per rank, of the bytes reported */
    struct stat st;
    const char *path = testutil_fmt("%s/%s", s->engine.cfg.nvme_path, s->nvme_name);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq((size_t)st.st_size, held * 12);
}

struct outcome {
    double loss[STEPS];
    float *params;
};

static void run(const char *dir, const struct run_setup *r, long window, struct outcome *out)
{
    struct run_session s;
    open_run(&s, dir, r);
    for (long k = 0; k < STEPS; k++)
        out->loss[k] = micro_session_step(&s, k);
    if (window > 0)
        check_window(&s, window);
    out->params = micro_session_params(&s);
    const int nvme = s.engine.nvme != NULL;
    session_close(&s);
    if (nvme) { /* a clean end removes the scratch */
        MPI_Barrier(MPI_COMM_WORLD);
        ck_assert_int_eq(testutil_entries(testutil_fmt("%s/nvme", dir)), 0);
    }
}

static void same_outcome(const struct outcome *a, const struct outcome *b, size_t n,
                         const char *what)
{
    for (int k = 0; k < STEPS; k++)
        ck_assert_msg(memcmp(&a->loss[k], &b->loss[k], sizeof a->loss[k]) == 0,
                      "%s: step %d loss %.17g with nvme, %.17g without", what, k + 1, b->loss[k],
                      a->loss[k]);
    ck_assert_msg(memcmp(a->params, b->params, n * sizeof(float)) == 0,
                  "%s: parameters differ with nvme", what);
}

static const char *const stage_sets[4] = {"zero_optimization.stage=0", "zero_optimization.stage=1",
                                          "zero_optimization.stage=2", "zero_optimization.stage=3"};
static const char *const precision_sets[2] = {"bf16.enabled=false", "bf16.enabled=true"};

/* Every stage and precision, without offload, then on nvme with the
 * default window and with buffers of 37 elements (a block's states are
 * thousands: the ring turns over many times, and chunks end mid-tensor). */
START_TEST(nvme_is_bit_identical)
{
    char dir[512];
    shared_tmpdir("nvme-same", dir, sizeof dir);
    for (int prec = 0; prec < 2; prec++)
        for (int stage = 0; stage <= 3; stage++) {
            const char *sets[] = {stage_sets[stage], precision_sets[prec]};
            struct run_setup plain, nvme, small;
            setup(&plain, sets, 2, dir, 0, 0);
            setup(&nvme, sets, 2, dir, 1, 0);
            setup(&small, sets, 2, dir, 1, 37);
            struct outcome ref, got, cycled;
            run(dir, &plain, 0, &ref);
            run(dir, &nvme, 0, &got);
            run(dir, &small, 37, &cycled);
            struct run_session probe; /* the model's size */
            open_run(&probe, dir, &plain);
            const size_t n = probe.table.n_params;
            session_close(&probe);
            char what[160];
            snprintf(what, sizeof what, "stage %d %s", stage, precision_sets[prec]);
            same_outcome(&ref, &got, n, what);
            snprintf(what, sizeof what, "stage %d %s, 37-element window", stage,
                     precision_sets[prec]);
            same_outcome(&ref, &cycled, n, what);
            free(ref.params);
            free(got.params);
            free(cycled.params);
        }
}
END_TEST

/* Saves after 3 steps under `save`, trains 2 more; a session under `load`
 * resumes from the checkpoint and repeats those 2 steps and their
 * parameters bit for bit. */
static void resume_case(const char *dir, const char *const *sets, int n_sets, int save_nvme,
                        int load_nvme)
{
    char where[8192];
    double want[2];
    struct run_setup save, load;
    setup(&save, sets, n_sets, dir, save_nvme, 53);
    setup(&load, sets, n_sets, dir, load_nvme, 0);
    struct run_session s;
    open_run(&s, dir, &save);
    for (long k = 0; k < 3; k++)
        micro_session_step(&s, k);
    zt_status saved = run_checkpoint_save(&s, 3, where, sizeof where);
    ck_assert_msg(saved == ZT_OK, "%s", zt_error_message());
    for (long k = 3; k < 5; k++)
        want[k - 3] = micro_session_step(&s, k);
    float *want_params = micro_session_params(&s);
    session_close(&s);

    open_run(&s, dir, &load);
    char what[160];
    snprintf(what, sizeof what, "%s %s (nvme %d -> %d)", sets[0], sets[1], save_nvme, load_nvme);
    micro_session_check_resume(&s, where, want, want_params, what);
    free(want_params);
    session_close(&s);
}

START_TEST(checkpoints_cross_between_nvme_and_memory)
{
    static const int ways[3][2] = {{1, 1}, {1, 0}, {0, 1}}; /* nvme when saved, when loaded */
    char dir[512];
    for (int stage = 1; stage <= 3; stage += 2)
        for (int prec = 0; prec < 2; prec++)
            for (int w = 0; w < 3; w++) {
                const char *sets[] = {stage_sets[stage], precision_sets[prec]};
                resume_case(shared_tmpdir("nvme-ckpt", dir, sizeof dir), sets, 2, ways[w][0],
                            ways[w][1]);
            }
}
END_TEST

/* A plan counts the same window as a real engine, and creates no file. */
START_TEST(a_plan_counts_the_window)
{
    char dir[512];
    shared_tmpdir("nvme-plan", dir, sizeof dir);
    const char *sets[] = {stage_sets[3], precision_sets[1]};
    struct run_setup r;
    setup(&r, sets, 2, dir, 1, 41);
    struct run_session s;
    open_run(&s, dir, &r);
    micro_session_step(&s, 0);
    struct ledger plan;
    ledger_init(&plan, 1);
    struct compute_backend be;
    ck_assert_int_eq(compute_backend_open("cpu", -1, &plan, &be), ZT_OK);
    struct shard_engine e;
    struct shard_engine_config ec = s.engine.cfg;
    ec.nvme_name = "plan.states";
    ck_assert_int_eq(shard_engine_create(&ec, &s.table, NULL, &be, &e), ZT_OK);
    ck_assert_ptr_nonnull(e.nvme);
    struct optimizer_hparams hp = ec.hparams;
    struct shard_step_result res;
    ck_assert_int_eq(shard_engine_step(&e, &hp, 1.0, 0, &res), ZT_OK);
    for (int c = LEDGER_MASTER_PARAMS; c <= LEDGER_OPTIMIZER_STATES; c++)
        ck_assert_uint_eq(plan.peak[c], s.ledger.peak[c]);
    ck_assert_uint_eq(shard_engine_nvme_bytes(&e), shard_engine_nvme_bytes(&s.engine));
    struct stat st;
    ck_assert_int_ne(stat(testutil_fmt("%s/nvme/plan.states", dir), &st), 0);
    shard_engine_destroy(&e);
    ck_assert_uint_eq(plan.total_current, 0);
    compute_backend_close(&be);
    session_close(&s);
}
END_TEST

/* A config that opens (ZT_OK expected) or fails with `status` and a
 * message holding `message`. */
static void expect_refusal(const char *dir, const char *const *sets, int n, zt_status status,
                           const char *message)
{
    struct run_session s;
    const zt_status st = micro_session_open(&s, dir, sets, n);
    ck_assert_msg(st == status, "%s: got %s: %s", sets[n - 1], zt_status_str(st),
                  zt_error_message());
    if (st == ZT_OK) {
        session_close(&s);
        return;
    }
    ck_assert_msg(strstr(zt_error_message(), message), "wanted '%s' in: %s", message,
                  zt_error_message());
}

START_TEST(bad_settings_are_named)
{
    char dir[512], missing[700], file[700],
        proc[] = "zero_optimization.offload_optimizer.nvme_path=/proc";
    shared_tmpdir("nvme-bad", dir, sizeof dir);
    snprintf(missing, sizeof missing, "zero_optimization.offload_optimizer.nvme_path=%s/none", dir);
    snprintf(file, sizeof file, "zero_optimization.offload_optimizer.nvme_path=%s/a-file", dir);
    if (comm_world_rank() == 0)
        testutil_write_file(testutil_fmt("%s/a-file", dir), "x", 1);
    MPI_Barrier(MPI_COMM_WORLD);
    const char *nvme = "zero_optimization.offload_optimizer.device=nvme";
    const char *no_path[] = {nvme};
    expect_refusal(dir, no_path, 1, ZT_ERR_CONFIG, "nvme_path: required with device nvme");
    const char *gone[] = {nvme, missing};
    expect_refusal(dir, gone, 2, ZT_ERR_CONFIG, testutil_fmt("%s/none", dir));
    const char *not_dir[] = {nvme, file};
    expect_refusal(dir, not_dir, 2, ZT_ERR_CONFIG, "not a folder");
    const char *unwritable[] = {nvme, proc};
    expect_refusal(dir, unwritable, 2, ZT_ERR_CONFIG, "cannot create /proc/");
    const char *adafactor[] = {nvme, missing, "optimizer.type=Adafactor",
                               "optimizer.params.betas=null", "optimizer.params.eps=null"};
    expect_refusal(dir, adafactor, 5, ZT_ERR_CONFIG, "nvme streams the states of element-wise");
    const char *params[] = {"zero_optimization.offload_param.device=nvme"};
    expect_refusal(dir, params, 1, ZT_ERR_UNSUPPORTED, "offload_param.device: nvme is not");
}
END_TEST

/* A disk without room for the file: found when the file is reserved,
 * before any step, and named (RLIMIT_FSIZE stands for the full disk). */
START_TEST(a_full_disk_is_found_at_start)
{
    char dir[512];
    shared_tmpdir("nvme-full", dir, sizeof dir);
    struct run_session s;
    ck_assert_int_eq(micro_session_open(&s, dir, NULL, 0), ZT_OK);
    mkdir(testutil_fmt("%s/nvme", dir), 0755);
    struct shard_engine_config ec = s.engine.cfg;
    ec.offload_optimizer = 1;
    ec.nvme_path = testutil_fmt("%s/nvme", dir);
    ec.nvme_name = comm_world_rank() ? "full-1.states" : "full-0.states";
    shard_engine_destroy(&s.engine);
    struct rlimit old, tiny = {4096, 4096};
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    tiny.rlim_max = old.rlim_max;
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &tiny), 0);
    const zt_status st = shard_engine_create(
        &ec, &s.table, s.dp_groups.shard ? s.dp_groups.shard : s.axes.dp, &s.compute, &s.engine);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, was);
    ck_assert_int_eq(st, ZT_ERR_CONFIG);
    ck_assert_msg(strstr(zt_error_message(), ec.nvme_path) &&
                      strstr(zt_error_message(), "cannot reserve"),
                  "%s", zt_error_message());
    /* the ranks share the folder: count once every rank has removed its file */
    MPI_Barrier(MPI_COMM_WORLD);
    ck_assert_int_eq(testutil_entries(ec.nvme_path), 0);
    session_close(&s); /* the failed create left the engine empty */
}
END_TEST

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    Suite *s = suite_create("nvme");
    TCase *tc = tcase_create("nvme");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, nvme_is_bit_identical);
    tcase_add_test(tc, checkpoints_cross_between_nvme_and_memory);
    tcase_add_test(tc, a_plan_counts_the_window);
    tcase_add_test(tc, bad_settings_are_named);
    tcase_add_test(tc, a_full_disk_is_found_at_start);
    suite_add_tcase(s, tc);
    int rc = testutil_run_suite(s, 1);
    MPI_Finalize();
    return rc;
}
