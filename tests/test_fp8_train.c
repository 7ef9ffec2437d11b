/* tests/test_fp8_train.c — fp8 training through the binary under mpirun:
 * every layout trains with the 1-rank run's scales, activation
 * checkpointing changes no bit, configs/tiny.yaml in fp8 follows bf16's
 * loss curve over 300 steps (40 in the sanitizer build) within the
 * measured tolerance, the dry run counts the fp8 buffers to the byte, and
 * refused combinations exit with a configuration error.
 *
 * The layouts run tests/data/micro.yaml with the global batch kept (4 x 2
 * sequences a step). Data and pipeline parallelism reproduce the 1-rank
 * losses to ~1e-7: every rank quantises with the same scales (the amaxes
 * max-reduced over the world) and the same dY (divided by the data-
 * parallel size, a power of two here, so exactly). Tensor parallelism sums
 * a row-parallel layer's partial products in another order; the fp32
 * results differ in the last bits (~3e-8 of the loss without fp8), and a
 * value lying near a rounding boundary of E4M3 (3 mantissa bits) then
 * lands on the neighbouring code, 6-12% away. These flips compound over
 * the steps: measured 1.5e-5 of the loss after 10 steps at T = 2 (exactly
 * 0 at steps 1 and 2, where step 2 already runs on scales that the
 * reduction produced, so the scales themselves agree). The tensor-parallel
 * runs are held to 1e-4, the others to 1e-5.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define STEPS 8
#define FP8   "--set fp8.enabled=true --set run.steps=8 "
#define LLAMA                                                                                      \
    "--set model.family=llama --set model.n_head=4 --set model.n_kv_head=2 "                       \
    "--set model.intermediate_size=64 "

/* micro.yaml in fp8 at np ranks of `extra`'s layout, the global batch kept
 * at 4 micro batches of 2 over the data-parallel ranks (dp). */
static void train(const char *dir, const char *name, int np, int dp, const char *extra,
                  double *loss)
{
    testutil_train_micro_losses(
        dir, name, np, testutil_fmt(FP8 "--set gradient_accumulation_steps=%d %s", 4 / dp, extra),
        loss, STEPS);
}

struct layout_case {
    const char *name;
    int np, dp;
    const char *set;
    double tol;
};

static void check_layouts(const char *dir, const char *family, const struct layout_case *cases,
                          int n)
{
    double base[STEPS], got[STEPS];
    train(dir, testutil_fmt("%sbase", family[0] ? "llama-" : ""), 1, 1, family, base);
    ck_assert_msg(base[STEPS - 1] < base[0] - 0.05, "loss did not fall: %g -> %g", base[0],
                  base[STEPS - 1]);
    for (int i = 0; i < n; i++) {
        const struct layout_case *c = &cases[i];
        train(dir, testutil_fmt("%s%s", family[0] ? "llama-" : "", c->name), c->np, c->dp,
              testutil_fmt("%s %s", family, c->set), got);
        testutil_assert_losses_close(base, got, STEPS, c->tol,
                                     testutil_fmt("%s%s", family[0] ? "llama " : "", c->name));
    }
}

START_TEST(layouts_give_the_one_rank_losses)
{
    static const struct layout_case cases[] = {
        {"dp2-stage0", 2, 2, "--set zero_optimization.stage=0", 1e-5},
        {"dp2-stage3", 2, 2, "--set zero_optimization.stage=3", 1e-5},
        {"tp2", 2, 1, "--set tensor_parallel.size=2", 1e-4},
        {"pp2", 2, 1, "--set pipeline.stages=2", 1e-5},
    };
    check_layouts(testutil_tmpdir("fp8-layouts"), "", cases, 4);
}
END_TEST

START_TEST(llama_layouts_give_the_one_rank_losses)
{
    static const struct layout_case cases[] = {
        {"dp2-stage3", 2, 2, "--set zero_optimization.stage=3", 1e-5},
        {"tp2", 2, 1, "--set tensor_parallel.size=2", 1e-4},
    };
    check_layouts(testutil_tmpdir("fp8-llama-layouts"), LLAMA, cases, 2);
}
END_TEST

/* The recompute quantises with the step's scales and records the same
 * amaxes again (a maximum), so checkpointing changes no bit; under stage
 * 3 at 2 ranks, every block and every second block. */
START_TEST(activation_checkpointing_changes_no_bit)
{
    const char *dir = testutil_tmpdir("fp8-ckpt");
    double plain[STEPS], got[STEPS];
    train(dir, "plain", 2, 2, "--set zero_optimization.stage=3", plain);
    for (int every = 1; every <= 2; every++) {
        train(dir, testutil_fmt("every%d", every), 2, 2,
              testutil_fmt("--set zero_optimization.stage=3 "
                           "--set activation_checkpointing.enabled=true "
                           "--set activation_checkpointing.every_n_blocks=%d",
                           every),
              got);
        ck_assert_msg(memcmp(plain, got, sizeof got) == 0, "every_n_blocks %d: losses differ",
                      every);
    }
}
END_TEST

/* micro.yaml in fp8 (amax_history_len 3) for `steps` steps with
 * checkpoints in dir/ck, `accum` micro batches per rank; the losses it
 * logs (n: those after a resume) into loss. */
static void train_saving(const char *dir, const char *name, int np, int accum, const char *ck,
                         int steps, const char *extra, double *loss, int n)
{
    testutil_train_micro_losses(
        dir, name, np,
        testutil_fmt("--set fp8.enabled=true --set fp8.amax_history_len=3 --set run.steps=%d "
                     "--set gradient_accumulation_steps=%d --set checkpoint.dir=%s/%s %s",
                     steps, accum, dir, ck, extra),
        loss, n);
}

/* A checkpoint keeps the scales and amax histories: a run resumed at step
 * 4 continues bit for bit at one rank and within 1e-5 at two (stage 3);
 * another amax_history_len restarts the scales (a note says so), which
 * changes the losses, so the restored state is what made them equal.
 * `eval --checkpoint` quantises with the saved scales too: it gives the
 * validation loss the run printed at its end. */
START_TEST(resume_continues_with_the_saved_scales)
{
    enum { HALF = STEPS / 2 };
    const char *dir = testutil_tmpdir("fp8-resume");
    double whole[STEPS], half[HALF], got[HALF];
    train_saving(dir, "whole", 1, 2, "ck-whole", STEPS, "", whole, STEPS);
    for (int k = 0; k < 3; k++) {
        train_saving(dir, testutil_fmt("half%d", k), 1, 2, testutil_fmt("ck%d", k), HALF, "", half,
                     HALF);
        ck_assert(memcmp(half, whole, sizeof half) == 0);
    }
    train_saving(dir, "resumed", 1, 2, "ck0", STEPS, "", got, HALF);
    ck_assert_msg(memcmp(got, whole + HALF, sizeof got) == 0, "1 rank: resumed losses differ");
    train_saving(dir, "resumed-np2", 2, 1, "ck1", STEPS, "--set zero_optimization.stage=3", got,
                 HALF);
    testutil_assert_losses_close(whole + HALF, got, HALF, 1e-5, "2 ranks resumed");
    train_saving(dir, "restarted", 1, 2, "ck2", STEPS, "--set fp8.amax_history_len=5", got, HALF);
    ck_assert_ptr_nonnull(strstr(testutil_slurp(testutil_path_in(dir, "restarted.log")),
                                 "the fp8 scales restart at 1"));
    ck_assert_msg(memcmp(got, whole + HALF, sizeof got) != 0,
                  "restarted scales gave the restored run's losses");
    const char *v = strstr(testutil_slurp(testutil_path_in(dir, "whole.jsonl")), "\"val_loss\": ");
    ck_assert_ptr_nonnull(v);
    const double trained = strtod(v + 12, NULL);
    const char *log = testutil_path_in(dir, "eval.log");
    ck_assert_int_eq(
        testutil_run(log,
                     "mpirun --oversubscribe -np 1 %s eval %s --checkpoint %s/ck-whole "
                     "--set fp8.enabled=true "
                     "--set fp8.amax_history_len=3",
                     testutil_binary(), testutil_source_path("tests/data/micro.yaml"), dir),
        0);
    const char *e = strstr(testutil_slurp(log), "val_loss ");
    ck_assert_msg(e != NULL, "%s", testutil_slurp(log));
    ck_assert_msg(fabs(strtod(e + 9, NULL) - trained) <= 1e-6, "eval %s, trained %.8f", e + 9,
                  trained);
}
END_TEST

/* ---- fp8 against bf16 on configs/tiny.yaml ----
 *
 * tiny.yaml on one rank, bf16 against bf16 with fp8 GEMMs (hybrid, TE's
 * default delayed scaling), the cosine schedule over the run's steps, the
 * same seed and data. Two lengths, with bounds about twice to four times
 * what this build measured (the runs are deterministic on one machine;
 * the margin is for other CPUs' BLAS kernels and for later changes that
 * move the curves a little without breaking fp8):
 *
 *   300 steps (release build; scripts/bench/fp8.sh 300 prints the same
 *   curves): per-step |fp8 - bf16| at most 0.175 (step 29, where the loss
 *   falls fastest and a small lag shows most), its mean over the last 50
 *   steps 0.0049, the last step's 0.0016, the validation losses at the end
 *   2.6338 and 2.6469 (0.013 apart); both fall from 5.52 to 2.44. Held to
 *   0.35, 0.02, 0.03 and a fall of more than 2.5. With scales that never
 *   leave 1 (the update dropped: small weights and output gradients fall
 *   into E4M3's and E5M2's subnormals or flush to zero) the same run gave a
 *   largest gap of 1.13, a mean over the last 50 steps of 0.88 and 0.85 in
 *   validation loss: far outside every bound.
 *
 *   40 steps (the sanitizer build, where 2 x 300 instrumented steps would
 *   take minutes): at most 0.090 (step 30), mean 0.015 over the 40 steps,
 *   validation losses 3.1849 and 3.1963; held to 0.2, 0.03 and 0.03, and a
 *   fall of more than 2. Scales stuck at 1 gave 0.26 and 0.088 there. bf16
 *   against fp32 differs by at most 0.0055 over these steps, so fp8's three
 *   mantissa bits, not noise, make the gaps. */
struct curve_bounds {
    int steps;
    int tail;        /* the last `tail` steps' mean |gap| is held to tail_gap */
    double max_gap;  /* every step's |gap| */
    double tail_gap; /* mean |gap| over the tail */
    double val_gap;  /* the validation losses at the end */
    double min_fall; /* fp8 and bf16 fall by more than this from step 1 */
};

#ifdef ZT_FP8_TRAIN_SANITIZED
static const struct curve_bounds tiny_curve = {40, 40, 0.2, 0.03, 0.03, 2.0};
#else
static const struct curve_bounds tiny_curve = {300, 50, 0.35, 0.02, 0.03, 2.5};
#endif
enum { TINY_MAX_STEPS = 300 };

static void train_tiny(const char *dir, const char *name, int steps, const char *extra,
                       double *loss, double *val)
{
    const char *log = testutil_path_in(dir, testutil_fmt("%s.log", name));
    const char *metrics = testutil_path_in(dir, testutil_fmt("%s.jsonl", name));
    const int rc = testutil_run(
        log,
        "mpirun --oversubscribe -np 1 %s train %s --quiet --no-progress --set run.steps=%d "
        "--set scheduler.params.total_num_steps=%d --set run.eval_interval=0 "
        "--set run.output_dir=%s/%s --metrics %s --set bf16.enabled=true %s",
        testutil_binary(), testutil_source_path("configs/tiny.yaml"), steps, steps, dir, name,
        metrics, extra);
    ck_assert_msg(rc == 0, "%s failed:\n%s", name, testutil_slurp(log));
    ck_assert_int_eq(testutil_read_losses(metrics, loss, steps), steps);
    const char *v = strstr(testutil_slurp(metrics), "\"val_loss\": ");
    ck_assert_msg(v != NULL, "%s: no validation loss", name);
    *val = strtod(v + 12, NULL);
}

START_TEST(tiny_follows_bf16)
{
    const struct curve_bounds *b = &tiny_curve;
#ifdef ZT_FP8_TRAIN_SANITIZED
    fprintf(stderr, "tiny_follows_bf16: the sanitizer build checks 40 steps; the 300-step curve "
                    "is skipped here (2 x 300 instrumented steps take minutes) and checked by "
                    "the release build\n");
#endif
    const char *dir = testutil_tmpdir("fp8-tiny");
    double bf16[TINY_MAX_STEPS], fp8[TINY_MAX_STEPS], val_bf16, val_fp8, worst = 0.0, tail = 0.0;
    int worst_at = 0;
    train_tiny(dir, "bf16", b->steps, "", bf16, &val_bf16);
    train_tiny(dir, "fp8", b->steps, "--set fp8.enabled=true", fp8, &val_fp8);
    for (int i = 0; i < b->steps; i++) {
        const double d = fabs(fp8[i] - bf16[i]);
        if (d > worst)
            worst = d, worst_at = i + 1;
        if (i >= b->steps - b->tail)
            tail += d;
    }
    tail /= b->tail;
    ck_assert_msg(worst <= b->max_gap,
                  "%d steps: |fp8 - bf16| %.4f at step %d (fp8 %.4f, bf16 %.4f)", b->steps, worst,
                  worst_at, fp8[worst_at - 1], bf16[worst_at - 1]);
    ck_assert_msg(tail <= b->tail_gap, "%d steps: mean |fp8 - bf16| over the last %d steps %.4f",
                  b->steps, b->tail, tail);
    ck_assert_msg(fabs(val_fp8 - val_bf16) <= b->val_gap, "validation loss: fp8 %.4f, bf16 %.4f",
                  val_fp8, val_bf16);
    const int last = b->steps - 1;
    ck_assert_msg(fp8[last] < fp8[0] - b->min_fall && bf16[last] < bf16[0] - b->min_fall,
                  "did not learn: fp8 %.4f -> %.4f, bf16 %.4f -> %.4f", fp8[0], fp8[last], bf16[0],
                  bf16[last]);
}
END_TEST

/* ---- the dry run's memory ------------------------------------------------ */

/* The peak of `category` of rank 0 in a memory report (JSON). */
static long report_peak(const char *path, const char *category)
{
    const char *ranks = strstr(testutil_slurp(path), "\"ranks\"");
    ck_assert_ptr_nonnull(ranks);
    const char *p = strstr(ranks, testutil_fmt("\"%s\": ", category));
    ck_assert_ptr_nonnull(p);
    return strtol(p + strlen(category) + 4, NULL, 10);
}

static void dry_run(const char *dir, const char *name, const char *extra)
{
    const char *log = testutil_path_in(dir, testutil_fmt("%s.log", name));
    const int rc = testutil_run(
        log, "mpirun --oversubscribe -np 1 %s train %s --dry-run --memory-report %s/%s.json %s",
        testutil_binary(), testutil_source_path("tests/data/micro.yaml"), dir, name, extra);
    ck_assert_msg(rc == 0, "%s failed:\n%s", name, testutil_slurp(log));
}

/* micro.yaml: GPT-2 with C = 32, MLP width F = 128, L = 2 blocks, micro
 * batch N = 2 x 32 rows. Its four GEMMs read C, C, C and F features, so a
 * block's kept fp8 inputs are N (3C + F) bytes, kept for each block whose
 * internals are kept plus one recompute slot under checkpointing; the
 * weight's and dY's codes take the largest weight (F x C) and the widest
 * output (N x F) bytes, the decoded fp32 operands N F + F C + N F floats. */
START_TEST(dry_run_counts_the_fp8_buffers)
{
    const char *dir = testutil_tmpdir("fp8-dry");
    const long N = 2 * 32, C = 32, F = 128;
    const long copies = F * C + N * F, scratch = (N * F + F * C + N * F) * 4;
    static const struct {
        const char *set;
        long slots;
    } cases[] = {
        {"", 2},
        {"--set activation_checkpointing.enabled=true", 1}, /* both blocks recompute */
        {"--set activation_checkpointing.enabled=true "
         "--set activation_checkpointing.every_n_blocks=2",
         2}, /* block 1 kept, block 0 recomputes */
    };
    for (int i = 0; i < 3; i++) {
        dry_run(dir, testutil_fmt("plain%d", i), cases[i].set);
        dry_run(dir, testutil_fmt("fp8-%d", i),
                testutil_fmt("--set fp8.enabled=true %s", cases[i].set));
        const char *plain = testutil_path_in(dir, testutil_fmt("plain%d.json", i));
        const char *fp8 = testutil_path_in(dir, testutil_fmt("fp8-%d.json", i));
        ck_assert_int_eq(report_peak(fp8, "activations") - report_peak(plain, "activations"),
                         cases[i].slots * N * (3 * C + F));
        ck_assert_int_eq(report_peak(fp8, "workspace") - report_peak(plain, "workspace"),
                         copies + scratch);
    }
}
END_TEST

/* ---- refused combinations ------------------------------------------------ */

START_TEST(refused_combinations_exit_with_a_config_error)
{
    const char *dir = testutil_tmpdir("fp8-refused");
    const char *log = testutil_path_in(dir, "fp16.log");
    const int rc = testutil_run(log,
                                "mpirun --oversubscribe -np 1 %s train %s --dry-run "
                                "--set fp8.enabled=true "
                                "--set fp16.enabled=true",
                                testutil_binary(), testutil_source_path("tests/data/micro.yaml"));
    ck_assert_int_eq(rc, 2);
    ck_assert_ptr_nonnull(strstr(testutil_slurp(log), "fp8.enabled: not with fp16.enabled"));
}
END_TEST

static Suite *fp8_train_suite(void)
{
    Suite *s = suite_create("fp8_train");
    TCase *t = tcase_create("fp8_train");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, layouts_give_the_one_rank_losses);
    tcase_add_test(t, llama_layouts_give_the_one_rank_losses);
    tcase_add_test(t, activation_checkpointing_changes_no_bit);
    tcase_add_test(t, resume_continues_with_the_saved_scales);
    tcase_add_test(t, dry_run_counts_the_fp8_buffers);
    tcase_add_test(t, refused_combinations_exit_with_a_config_error);
    suite_add_tcase(s, t);
    /* the curve alone, tagged: CTest runs it as test_fp8_train_curve beside the rest */
    TCase *curve = tcase_create("curve");
    tcase_set_timeout(curve, 300);
    tcase_set_tags(curve, "curve");
    tcase_add_test(curve, tiny_follows_bf16);
    suite_add_tcase(s, curve);
    return s;
}

int main(void)
{
    return testutil_run_suite(fp8_train_suite(), 0);
}
