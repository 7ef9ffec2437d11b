/* tests/test_trajectory.c — refactoring guard: the per-step losses of a
 * 20-step run of configs/tiny.yaml at 2 ranks, for stages 0-3 in fp32 and
 * bf16, must be bit-identical to the trajectories recorded in
 * tests/data/trajectories.txt (written by this suite, with
 * ZT_TRAJECTORY_RECORD=path, from the code before a structural change).
 *
 * The corpus is a fixed file in the tree (tests/data/trajectory_corpus.txt)
 * rather than tiny.yaml's system folder, so that the numbers do not depend
 * on the machine's packages; CTest pins one BLAS thread, OpenBLAS for the
 * products (ZT_CPU_GEMM) and its Haswell kernels for this suite so that
 * they do not depend on its CPU either. Losses are stored as C99 hex floats: exact.
 *
 * The sanitizer build is another binary: its instrumented code gives the
 * same trajectories up to the last bits (measured: gradient norms about
 * 1e-9 apart from step 2, the fp32 stage-0 loss of step 13 one float ulp
 * apart, bf16's rounding carrying that to 7e-6 by step 16), with no
 * sanitizer report; a RelWithDebInfo build without the sanitizers matches
 * bit for bit. There the suite runs the same trajectories under the
 * sanitizers and checks them to ZT_TRAJECTORY_TOLERANCE (relative), which
 * CMake sets only for that build; the release build is the bit-exact
 * guard. */
#include <check.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/train.h"
#include "testutil.h"
#include "worker/schedule.h"

#define STEPS      20
#define N_STAGES   4
#define N_PRECS    2
#define N_RECORDED (N_STAGES * N_PRECS)

static const char *const prec_names[N_PRECS] = {"fp32", "bf16"};

struct trajectory {
    int stage, prec;
    double loss[STEPS];
};

static void run_trajectory(int stage, int prec, double *loss)
{
    char outdir[600], data[4200], stage_set[64];
    snprintf(outdir, sizeof outdir, "run.output_dir=%s", testutil_tmpdir("trajectory"));
    snprintf(data, sizeof data, "data.train=%s",
             testutil_source_path("tests/data/trajectory_corpus.txt"));
    snprintf(stage_set, sizeof stage_set, "zero_optimization.stage=%d", stage);
    struct config_override ov[] = {
        {.assignment = outdir},
        {.assignment = data},
        {.assignment = stage_set},
        {.assignment = prec ? "bf16.enabled=true" : "bf16.enabled=false"},
        {.assignment = "run.steps=20"},
        {.assignment = "run.resume=never"},
    };
    struct run_options o = {.config_path = testutil_source_path("configs/tiny.yaml"),
                            .overrides = ov,
                            .n_overrides = (int)(sizeof ov / sizeof ov[0]),
                            .quiet = 1};
    struct run_session s;
    ck_assert_int_eq(session_open(&s, &o, 1), ZT_OK);
    const struct lr_schedule lrs = config_lr_schedule(&s.cfg);
    for (long step = 0; step < STEPS; step++) {
        struct step_record r = {.step = step + 1, .lr = schedule_lr(&lrs, step)};
        ck_assert_int_eq(train_step(&s, step, &r), ZT_OK);
        loss[step] = r.loss;
    }
    session_close(&s);
}

/* Reads the recorded trajectories: lines "<prec> <stage> <step> <hexfloat>". */
static void read_recorded(struct trajectory *t)
{
    const char *path = testutil_source_path("tests/data/trajectories.txt");
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot read %s", path);
    int seen = 0;
    char prec[8], hex[64];
    int stage, step;
    for (int i = 0; i < N_RECORDED; i++)
        t[i] = (struct trajectory){.stage = i % N_STAGES, .prec = i / N_STAGES};
    while (fscanf(f, "%7s %d %d %63s", prec, &stage, &step, hex) == 4) {
        int p = strcmp(prec, "bf16") == 0;
        ck_assert(stage >= 0 && stage < N_STAGES && step >= 1 && step <= STEPS);
        t[p * N_STAGES + stage].loss[step - 1] = strtod(hex, NULL);
        seen++;
    }
    fclose(f);
    ck_assert_int_eq(seen, N_RECORDED * STEPS);
}

static void write_recorded(const char *path, const struct trajectory *t)
{
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    for (int i = 0; i < N_RECORDED; i++)
        for (int k = 0; k < STEPS; k++)
            fprintf(f, "%s %d %d %a\n", prec_names[t[i].prec], t[i].stage, k + 1, t[i].loss[k]);
    ck_assert_int_eq(fclose(f), 0);
}

static int same_loss(double got, double want)
{
#ifdef ZT_TRAJECTORY_TOLERANCE
    return fabs(got - want) <= ZT_TRAJECTORY_TOLERANCE * fabs(want);
#else
    return memcmp(&got, &want, sizeof got) == 0;
#endif
}

START_TEST(losses_are_bit_identical_to_the_recorded_ones)
{
    struct trajectory got[N_RECORDED], want[N_RECORDED];
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    ck_assert_int_eq(world, 2);
    for (int i = 0; i < N_RECORDED; i++) {
        got[i] = (struct trajectory){.stage = i % N_STAGES, .prec = i / N_STAGES};
        run_trajectory(got[i].stage, got[i].prec, got[i].loss);
    }
    const char *record = getenv("ZT_TRAJECTORY_RECORD");
    if (record) {
        int rank;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (rank == 0)
            write_recorded(record, got);
        return;
    }
    read_recorded(want);
    for (int i = 0; i < N_RECORDED; i++)
        for (int k = 0; k < STEPS; k++)
            ck_assert_msg(same_loss(got[i].loss[k], want[i].loss[k]),
                          "%s stage %d step %d: loss %a (%.17g), recorded %a (%.17g)",
                          prec_names[got[i].prec], got[i].stage, k + 1, got[i].loss[k],
                          got[i].loss[k], want[i].loss[k], want[i].loss[k]);
}
END_TEST

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    Suite *s = suite_create("trajectory");
    TCase *tc = tcase_create("bit-identical");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, losses_are_bit_identical_to_the_recorded_ones);
    suite_add_tcase(s, tc);
    int rc = testutil_run_suite(s, 1);
    MPI_Finalize();
    return rc;
}
