/* tests/test_hier.c — node-aware ZeRO through the binary under mpirun: 4
 * ranks as 2 simulated nodes x 2 (ZT_SIMULATED_RANKS_PER_NODE=2).
 *
 * hpZ (zero_hpz_partition_size 2) and HSDP (shard_group_size 2) train
 * configs/tiny.yaml as flat ZeRO does, within 1e-5 in fp32 (stage 3; HSDP
 * at stages 1 and 2 too; LOMO under both at stage 3); the bytes each sends per step, by link class,
 * are the formulas below over the sizes of the model's partition; the dry
 * run plans the secondary copy as the run holds it, byte for byte; the
 * configuration refuses what cannot work, saying where; and checkpoints
 * written under either resume exactly, also without them.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/json.h"
#include "../config/config.h"
#include "../coordinator/session.h"
#include "testutil.h"

#define NP    4 /* world ranks */
#define NODE  2 /* simulated ranks per node */
#define STEPS 4
#define ESZ   4 /* fp32 bytes */

#define HPZ  "--set zero_optimization.zero_hpz_partition_size=2"
#define HSDP "--set zero_optimization.shard_group_size=2"

static const char *tiny(void)
{
    return testutil_source_path("configs/tiny.yaml");
}

/* Trains configs/tiny.yaml at NP ranks for STEPS steps at ZeRO `stage`,
 * outputs in dir/name (metrics dir/name.jsonl, log dir/name.log). */
static int train(const char *dir, const char *name, int stage, const char *extra)
{
    return testutil_run(testutil_path_in(dir, testutil_fmt("%s.log", name)),
                        "mpirun --oversubscribe -np %d %s train %s --quiet --no-progress "
                        "--set run.output_dir=%s/%s --metrics %s/%s.jsonl --set run.steps=%d "
                        "--set run.eval_interval=0 --set zero_optimization.stage=%d %s",
                        NP, testutil_binary(), tiny(), dir, name, dir, name, STEPS, stage, extra);
}

static void train_ok(const char *dir, const char *name, int stage, const char *extra)
{
    ck_assert_msg(train(dir, name, stage, extra) == 0, "%s failed:\n%s", name,
                  testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", name))));
}

static void losses(const char *dir, const char *name, double *out, int n)
{
    ck_assert_int_eq(
        testutil_read_losses(testutil_path_in(dir, testutil_fmt("%s.jsonl", name)), out, n), n);
}

/* ---- JSON ----------------------------------------------------------------- */

static const struct json_value *member(const struct json_value *obj, const char *key)
{
    for (size_t i = 0; obj->type == JSON_OBJECT && i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0)
            return &obj->items[i];
    ck_abort_msg("no member '%s'", key);
    return NULL;
}

static uint64_t uint_of(const struct json_value *obj, const char *key)
{
    const struct json_value *v = member(obj, key);
    ck_assert_msg(v->type == JSON_INT && !v->negative, "'%s' is not a count", key);
    return v->magnitude;
}

/* The bytes of one step by link class and kind: the last step's line. */
struct traffic {
    uint64_t bytes[COMM_LINK_COUNT][COMM_KIND_COUNT];
};

static struct traffic step_traffic(const char *dir, const char *name)
{
    const char *path = testutil_path_in(dir, testutil_fmt("%s.jsonl", name));
    const char *text = testutil_slurp(path), *last = NULL;
    for (const char *p = strstr(text, "\"loss\""); p; p = strstr(p + 1, "\"loss\""))
        last = p;
    ck_assert_msg(last != NULL, "%s: no step", path);
    while (last > text && last[-1] != '\n')
        last--;
    struct json_value m;
    const struct json_source src = {.path = path, .code = ZT_ERR_DATA, .max_depth = 8};
    ck_assert_int_eq(json_parse(&src, last, strcspn(last, "\n"), &m), ZT_OK);
    struct traffic t;
    for (int l = 0; l < COMM_LINK_COUNT; l++) {
        const struct json_value *by_kind =
            member(&m, testutil_fmt("comm_bytes_%s", comm_link_name((enum comm_link)l)));
        for (int k = 0; k < COMM_KIND_COUNT; k++)
            t.bytes[l][k] = uint_of(by_kind, comm_kind_name((enum comm_kind)k));
    }
    /* the link classes split the bytes of each kind */
    const struct json_value *all = member(&m, "comm_bytes");
    for (int k = 0; k < COMM_KIND_COUNT; k++)
        ck_assert_uint_eq(t.bytes[COMM_LINK_INTRA][k] + t.bytes[COMM_LINK_INTER][k],
                          uint_of(all, comm_kind_name((enum comm_kind)k)));
    json_free(&m);
    return t;
}

/* ---- the model's partition ------------------------------------------------ */

/* tiny.yaml's parameter table, its partition over `ranks`, and the units
 * a stage-3 forward and backward gather, in order. */
struct model_sizes {
    struct param_table table;
    struct shard_partition part;
    int fwd[MODEL_MAX_UNITS + 4], bwd[MODEL_MAX_UNITS + 4];
    int n_fwd, n_bwd;
};

static void model_sizes(int ranks, struct model_sizes *out)
{
    struct zt_config c;
    ck_assert_msg(config_load(tiny(), NULL, 0, &c) == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(session_build_table(&c, &out->table), ZT_OK);
    config_free(&c);
    ck_assert_int_eq(shard_partition_build(&out->table, ranks, &out->part), ZT_OK);
    const struct model_stage whole = model_stage_whole(&out->table);
    out->n_fwd = param_table_unit_order(&out->table, &whole, MODEL_PASS_FORWARD, out->fwd,
                                        MODEL_MAX_UNITS + 4);
    out->n_bwd = param_table_unit_order(&out->table, &whole, MODEL_PASS_BACKWARD, out->bwd,
                                        MODEL_MAX_UNITS + 4);
}

static void model_sizes_free(struct model_sizes *m)
{
    shard_partition_free(&m->part);
    param_table_free(&m->table);
}

/* Whether unit u is gathered before position pos of the forward. */
static int seen_before(const struct model_sizes *m, int pos)
{
    for (int i = 0; i < pos; i++)
        if (m->fwd[i] == m->fwd[pos])
            return 1;
    return 0;
}

/* ---- memory --------------------------------------------------------------- */

/* The run's memory report holds the secondary copy under its own category
 * (a 1/2 share of every padded unit at 4 ranks, 2 per node), HSDP's model
 * states are those of 2 ranks, and the dry run plans every category
 * exactly as the run measured it (the runs of the stage-3 test). */
static void assert_memory(const char *dir)
{
    static const struct {
        const char *name, *extra;
        int group;     /* ranks ZeRO shards over */
        int secondary; /* the secondary partition's, 0: none */
    } cases[] = {{"hpz", HPZ, 4, 2}, {"hsdp", HSDP, 2, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *run = testutil_path_in(dir, testutil_fmt("%s-run.json", cases[i].name));
        char run_path[4096];
        snprintf(run_path, sizeof run_path, "%s", run);
        const char *plan = testutil_path_in(dir, testutil_fmt("%s-plan.json", cases[i].name));
        char plan_path[4096];
        snprintf(plan_path, sizeof plan_path, "%s", plan);
        ck_assert_msg(
            testutil_run(testutil_path_in(dir, "dry.log"),
                         "mpirun --oversubscribe -np %d %s train %s --quiet --dry-run --set "
                         "zero_optimization.stage=3 %s --memory-report %s",
                         NP, testutil_binary(), tiny(), cases[i].extra, plan_path) == 0,
            "dry run failed:\n%s", testutil_slurp(testutil_path_in(dir, "dry.log")));
        struct json_value r, p;
        testutil_load_json(run_path, &r);
        testutil_load_json(plan_path, &p);
        struct model_sizes m;
        model_sizes(cases[i].group, &m);
        uint64_t secondary = 0;
        for (int u = 0; cases[i].secondary && u < m.part.n_units; u++)
            secondary += m.part.units[u].padded / (uint64_t)cases[i].secondary * ESZ;
        const struct json_value *rr = member(&r, "ranks"), *pr = member(&p, "ranks");
        ck_assert_uint_eq(rr->n, NP);
        for (size_t k = 0; k < rr->n; k++) {
            const struct json_value *got = member(&rr->items[k], "peak"),
                                    *want = member(&pr->items[k], "peak");
            ck_assert_uint_eq(uint_of(got, "secondary_params"), secondary);
            ck_assert_uint_eq(uint_of(got, "params"), m.part.shard_total * ESZ);
            for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++) {
                const char *name = ledger_category_name((enum ledger_category)c);
                ck_assert_msg(uint_of(got, name) == uint_of(want, name),
                              "%s rank %zu %s: run %llu, plan %llu", cases[i].name, k, name,
                              (unsigned long long)uint_of(got, name),
                              (unsigned long long)uint_of(want, name));
            }
            ck_assert_uint_eq(uint_of(&rr->items[k], "total_peak"),
                              uint_of(&pr->items[k], "total_peak"));
        }
        ck_assert_uint_eq(uint_of(&r, "expected_model_states"),
                          uint_of(&rr->items[0], "expected_model_states"));
        model_sizes_free(&m);
        json_free(&r);
        json_free(&p);
    }
}

/* ---- losses and traffic --------------------------------------------------- */

/* Stage 3, 2 nodes x 2 ranks. Flat ZeRO-3 gathers every unit over the 4
 * ranks for each use: the ring 0-1-2-3 crosses nodes on 2 of its 4 edges,
 * so half of each allgather's (4-1) x shard x 4 bytes are inter-node.
 * hpZ gathers a unit over the 4 only at its first use of the step (the
 * forward's), and every later use (the tied head, the backward) within
 * the node: (2-1) x padded/2 x 4 bytes, intra-node. So hpZ's inter-node
 * allgather bytes are flat ZeRO-3's forward share alone; the backward's,
 * about half of flat's, stay inside the node. HSDP (groups {0,1}, {2,3}
 * on one node each) reduce-scatters and gathers inside the node; only the
 * allreduce of the reduced shards between replicas {0,2} and {1,3} (two
 * ranks on two nodes: every byte inter-node) leaves it, padded/2 x 4
 * bytes of every unit once a step. Everything equals flat ZeRO-3's
 * losses within 1e-5. */
START_TEST(stage3_hpz_and_hsdp_match_flat_with_the_formulas_traffic)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("hier-stage3"));
    train_ok(dir, "flat", 3, "");
    train_ok(dir, "hpz", 3, testutil_fmt("%s --memory-report %s/hpz-run.json", HPZ, dir));
    train_ok(dir, "hsdp", 3, testutil_fmt("%s --memory-report %s/hsdp-run.json", HSDP, dir));
    double flat[STEPS], hpz[STEPS], hsdp[STEPS];
    losses(dir, "flat", flat, STEPS);
    losses(dir, "hpz", hpz, STEPS);
    losses(dir, "hsdp", hsdp, STEPS);
    testutil_assert_losses_close(flat, hpz, STEPS, 1e-5, "hpZ against flat ZeRO-3");
    testutil_assert_losses_close(flat, hsdp, STEPS, 1e-5, "HSDP against flat ZeRO-3");
    /* the report's expectation names the ranks the states are sharded over */
    const char *report = testutil_slurp(testutil_path_in(dir, "hsdp.log"));
    ck_assert_msg(strstr(report, "expected for stage 3, N = 2 (one shard group)"), "%s", report);
    report = testutil_slurp(testutil_path_in(dir, "flat.log"));
    ck_assert_msg(strstr(report, "expected for stage 3, N = 4, "), "%s", report);

    struct model_sizes m4, m2;
    model_sizes(NP, &m4);
    model_sizes(NP / NODE, &m2);
    uint64_t flat_inter = 0, hpz_inter = 0, hpz_intra = 0;
    for (int i = 0; i < m4.n_fwd + m4.n_bwd; i++) {
        const int fwd = i < m4.n_fwd, u = fwd ? m4.fwd[i] : m4.bwd[i - m4.n_fwd];
        const uint64_t bus = (NP - 1) * (uint64_t)m4.part.units[u].shard * ESZ;
        flat_inter += bus * 2 / 4;
        if (fwd && !seen_before(&m4, i)) {
            hpz_inter += bus * 2 / 4;
            hpz_intra += bus - bus * 2 / 4;
        } else {
            hpz_intra += (NODE - 1) * (uint64_t)m4.part.units[u].padded / NODE * ESZ;
        }
    }
    const struct traffic tf = step_traffic(dir, "flat"), th = step_traffic(dir, "hpz"),
                         ts = step_traffic(dir, "hsdp");
    ck_assert_uint_eq(tf.bytes[COMM_LINK_INTER][COMM_KIND_ALLGATHER], flat_inter);
    ck_assert_uint_eq(tf.bytes[COMM_LINK_INTRA][COMM_KIND_ALLGATHER], flat_inter);
    ck_assert_uint_eq(th.bytes[COMM_LINK_INTER][COMM_KIND_ALLGATHER], hpz_inter);
    ck_assert_uint_eq(th.bytes[COMM_LINK_INTRA][COMM_KIND_ALLGATHER], hpz_intra);
    /* about half: the backward's share, every unit once */
    ck_assert(2 * hpz_inter <= flat_inter && 2 * hpz_inter >= flat_inter * 9 / 10);
    /* the gradients' reduce-scatter is hpZ's as flat's */
    ck_assert_uint_eq(th.bytes[COMM_LINK_INTER][COMM_KIND_REDUCE_SCATTER],
                      tf.bytes[COMM_LINK_INTER][COMM_KIND_REDUCE_SCATTER]);

    uint64_t replica_bytes = 0;
    for (int u = 0; u < m2.part.n_units; u++)
        replica_bytes += (uint64_t)m2.part.units[u].shard * ESZ; /* 2(2-1)/2 x the shard */
    ck_assert_uint_eq(replica_bytes, m2.part.state_shard_total * ESZ);
    ck_assert_uint_eq(ts.bytes[COMM_LINK_INTER][COMM_KIND_ALLREDUCE], replica_bytes);
    ck_assert_uint_eq(ts.bytes[COMM_LINK_INTER][COMM_KIND_ALLGATHER], 0);
    ck_assert_uint_eq(ts.bytes[COMM_LINK_INTER][COMM_KIND_REDUCE_SCATTER], 0);
    /* inside the node: the group's gathers, and the norm's allreduce */
    ck_assert_uint_eq(ts.bytes[COMM_LINK_INTRA][COMM_KIND_ALLREDUCE], 2 * 1 * 8 / 2);
    ck_assert_uint_gt(ts.bytes[COMM_LINK_INTRA][COMM_KIND_ALLGATHER], 0);
    model_sizes_free(&m4);
    model_sizes_free(&m2);
    assert_memory(dir);
}
END_TEST

/* HSDP at stages 1 and 2, G = 2
 * of 4: the losses of flat ZeRO within 1e-5, and the only inter-node
 * traffic is the replicas' allreduce of the reduced shards. */
START_TEST(stages_1_and_2_under_hsdp_match_flat)
{
    static const struct {
        int stage;
        const char *extra;
    } cases[] = {{1, ""}, {2, ""}};
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("hier-stages"));
    struct model_sizes m2;
    model_sizes(NP / NODE, &m2);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *flat_name = testutil_fmt("flat%zu", i);
        char flat_copy[32], hsdp_name[32];
        snprintf(flat_copy, sizeof flat_copy, "%s", flat_name);
        snprintf(hsdp_name, sizeof hsdp_name, "hsdp%zu", i);
        train_ok(dir, flat_copy, cases[i].stage, cases[i].extra);
        train_ok(dir, hsdp_name, cases[i].stage, testutil_fmt("%s %s", HSDP, cases[i].extra));
        double flat[STEPS], hsdp[STEPS];
        losses(dir, flat_copy, flat, STEPS);
        losses(dir, hsdp_name, hsdp, STEPS);
        testutil_assert_losses_close(flat, hsdp, STEPS, 1e-5, hsdp_name);
        const struct traffic t = step_traffic(dir, hsdp_name);
        ck_assert_uint_eq(t.bytes[COMM_LINK_INTER][COMM_KIND_ALLREDUCE],
                          m2.part.state_shard_total * ESZ);
        ck_assert_uint_eq(t.bytes[COMM_LINK_INTER][COMM_KIND_ALLGATHER], 0);
        ck_assert_uint_eq(t.bytes[COMM_LINK_INTER][COMM_KIND_REDUCE_SCATTER], 0);
    }
    model_sizes_free(&m2);
}
END_TEST

/* LOMO updates each unit inside the backward: under hpZ the secondary
 * copy the backward gathers from is refreshed from the new values at the
 * next forward, so hpZ and HSDP (stage 3) train flat LOMO's losses, which
 * fall. */
START_TEST(lomo_under_hpz_and_hsdp_matches_flat)
{
    const char *lomo = "--set optimizer.type=LOMO --set optimizer.params.betas=null "
                       "--set optimizer.params.eps=null --set optimizer.params.lr=0.05";
    static const struct {
        const char *name, *extra;
    } runs[] = {{"flat", ""}, {"hpz", HPZ}, {"hsdp", HSDP}};
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("hier-lomo"));
    double got[3][STEPS];
    for (int i = 0; i < 3; i++) {
        train_ok(dir, runs[i].name, 3, testutil_fmt("%s %s", lomo, runs[i].extra));
        losses(dir, runs[i].name, got[i], STEPS);
    }
    ck_assert_msg(got[0][STEPS - 1] < got[0][0] - 0.05, "flat LOMO: loss %g -> %g", got[0][0],
                  got[0][STEPS - 1]);
    for (int i = 1; i < 3; i++)
        testutil_assert_losses_close(got[0], got[i], STEPS, 1e-5,
                                     testutil_fmt("LOMO under %s", runs[i].name));
}
END_TEST

/* ---- refusals ------------------------------------------------------------- */

/* Each refusal exits 2 naming the file, line and column of the key that
 * cannot work (tiny.yaml's last section is zero_optimization: a key
 * appended at its indentation joins it). */
START_TEST(refusals_say_where)
{
    static const struct {
        int np;
        const char *keys, *stage, *message;
    } cases[] = {
        {4, "  shard_group_size: 3\n", "3",
         "zero_optimization.shard_group_size: 3 does not divide the data-parallel size 4"},
        {4, "  zero_hpz_partition_size: 3\n", "3",
         "zero_optimization.zero_hpz_partition_size: 3 does not divide the data-parallel size 4"},
        {4, "  shard_group_size: 8\n", "2",
         "zero_optimization.shard_group_size: 8 does not divide the data-parallel size 4"},
        {2, "  zero_hpz_partition_size: 2\n", "2",
         "zero_optimization.zero_hpz_partition_size: 2 needs stage 3"},
        {2, "  shard_group_size: 1\n", "0", "but stage 0 shards nothing"},
        {2, "  zero_hpz_partition_size: 2\n  shard_group_size: 1\n", "3", "choose one"},
    };
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("hier-refusals"));
    static char base[8192];
    snprintf(base, sizeof base, "%s", testutil_slurp(tiny()));
    const int lines = testutil_count(base, "\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[4200], yaml[8192 + 128];
        snprintf(path, sizeof path, "%s/bad%zu.yaml", dir, i);
        /* tiny.yaml's "  stage: 0" set to the case's stage, the keys appended */
        const char *at = strstr(base, "  stage: 0\n");
        ck_assert_ptr_nonnull(at);
        snprintf(yaml, sizeof yaml, "%.*s  stage: %s\n%s%s", (int)(at - base), base, cases[i].stage,
                 at + strlen("  stage: 0\n"), cases[i].keys);
        testutil_write_file(path, yaml, strlen(yaml));
        const char *log = testutil_path_in(dir, "bad.log");
        const int rc = testutil_run(log, "mpirun --oversubscribe -np %d %s train %s --quiet",
                                    cases[i].np, testutil_binary(), path);
        const char *text = testutil_slurp(log);
        ck_assert_msg(rc == 2, "case %zu: exit %d:\n%s", i, rc, text);
        ck_assert_msg(strstr(text, cases[i].message), "case %zu: no '%s' in:\n%s", i,
                      cases[i].message, text);
        ck_assert_msg(strstr(text, testutil_fmt("bad%zu.yaml:%d:", i, lines + 1)),
                      "case %zu: no line %d in:\n%s", i, lines + 1, text);
    }
}
END_TEST

/* ---- checkpoints ---------------------------------------------------------- */

/* A checkpoint saved at step 2 under hpZ or HSDP resumes under the same
 * keys bit for bit (steps 3-4 as the uninterrupted run's), and without
 * them (flat ZeRO-3, resharded from HSDP's 2-rank shards): step 3's loss,
 * computed from the loaded weights, is the same bits, step 4 within 1e-5. */
START_TEST(checkpoints_resume_exactly_and_reshard_to_flat)
{
    static const struct {
        const char *name, *extra;
    } cases[] = {{"hpz", HPZ}, {"hsdp", HSDP}};
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("hier-resume"));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *n = cases[i].name, *x = cases[i].extra;
        char full[64], same[64], flat[64];
        snprintf(full, sizeof full, "%s-full", n);
        snprintf(same, sizeof same, "%s-same", n);
        snprintf(flat, sizeof flat, "%s-flat", n);
        train_ok(
            dir, full, 3,
            testutil_fmt("%s --set checkpoint.every=2 --set checkpoint.dir=%s/%s-ck", x, dir, n));
        const char *step2 = testutil_fmt("%s/%s-ck/step-00000002", dir, n);
        char from[4096];
        snprintf(from, sizeof from, "%s", step2);
        train_ok(
            dir, same, 3,
            testutil_fmt("%s --set run.resume=%s --set checkpoint.dir=%s/%s-ck2", x, from, dir, n));
        train_ok(dir, flat, 3,
                 testutil_fmt("--set run.resume=%s --set checkpoint.dir=%s/%s-ck3", from, dir, n));
        double a[STEPS], b[STEPS - 2], c[STEPS - 2];
        losses(dir, full, a, STEPS);
        losses(dir, same, b, STEPS - 2);
        losses(dir, flat, c, STEPS - 2);
        for (int k = 0; k < STEPS - 2; k++)
            ck_assert_msg(a[2 + k] == b[k], "%s: step %d: %.9g resumed, %.9g uninterrupted", n,
                          3 + k, b[k], a[2 + k]);
        ck_assert_msg(a[2] == c[0], "%s to flat: step 3: %.9g vs %.9g", n, c[0], a[2]);
        testutil_assert_losses_close(a + 2, c, STEPS - 2, 1e-5, "resumed flat");
    }
}
END_TEST

int main(void)
{
    /* 2 simulated nodes of 2 ranks for every mpirun below */
    setenv("ZT_SIMULATED_RANKS_PER_NODE", "2", 1);
    Suite *s = suite_create("hier");
    TCase *tc = testutil_tcase(s, "hier", 600);
    tcase_add_test(tc, refusals_say_where);
    tcase_add_test(tc, stage3_hpz_and_hsdp_match_flat_with_the_formulas_traffic);
    tcase_add_test(tc, stages_1_and_2_under_hsdp_match_flat);
    tcase_add_test(tc, lomo_under_hpz_and_hsdp_matches_flat);
    tcase_add_test(tc, checkpoints_resume_exactly_and_reshard_to_flat);
    return testutil_run_suite(s, 0);
}
