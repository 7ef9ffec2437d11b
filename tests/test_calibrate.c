/* tests/test_calibrate.c — `zerotrain calibrate`: the link fit on numbers
 * made from known links, and the binary under mpirun: a quick calibration
 * writes a machine file that machine_load reads with every number positive
 * and the measured tables in its comment; a world of one rank, a missing
 * --out and an --out in a folder that does not exist are refused with the
 * same exit code on every rank and one message.
 *
 * Each rank's own exit code is seen through a shell around it that prints
 * the code and exits 0, so that mpirun lets every rank finish. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/machine.h"
#include "plan/calibrate.h"
#include "worker/optimizer.h"
#include "testutil.h"

#define MPIRUN "mpirun --oversubscribe -np"
/* Runs each rank inside sh, which prints "rank exit N" and exits 0. */
#define EACH_RANK "sh -c '\"$0\" \"$@\"; echo \"rank exit $?\"'"

/* Points of t = steps*latency + busbytes/bandwidth + skew*busbytes for the
 * three collectives of calibrate at n ranks, sizes 4 KiB .. 4 MiB. */
static int make_points(int n, double latency, double bandwidth, double skew, double *steps,
                       double *bus, double *t)
{
    int k = 0;
    for (double size = 4096; size <= 4 << 20; size *= 2)
        for (int c = 0; c < 3; c++, k++) {
            steps[k] = c == 0 ? 2.0 * (n - 1) : n - 1.0;
            bus[k] = (c == 0 ? 2.0 * (n - 1) / n : (n - 1.0) / n) * size;
            t[k] = steps[k] * latency + bus[k] / bandwidth + skew * bus[k];
        }
    return k;
}

/* Exact numbers give back the link they were made from. */
START_TEST(fit_recovers_a_known_link)
{
    double steps[64], bus[64], t[64];
    for (int n = 2; n <= 4; n++) {
        const int k = make_points(n, 5e-6, 2e9, 0, steps, bus, t);
        struct calibrate_link_fit fit;
        calibrate_fit_link(steps, bus, t, k, &fit);
        ck_assert_msg(fabs(fit.latency - 5e-6) < 1e-12 && fabs(fit.bandwidth - 2e9) < 1e-3 * 2e9,
                      "n=%d: latency %g bandwidth %g", n, fit.latency, fit.bandwidth);
        ck_assert_int_eq(fit.latency_fallback, 0);
        ck_assert_int_eq(fit.bandwidth_fallback, 0);
    }
}
END_TEST

/* A negative latency (or 1/bandwidth) from the fit is replaced by a
 * positive one taken from the points, and says so. */
START_TEST(fit_forces_both_positive)
{
    double steps[64], bus[64], t[64];
    /* t = bus/1e9 - 1us * steps: positive at every size, latency fits to -1us */
    int k = make_points(2, 0, 1e9, 0, steps, bus, t);
    for (int i = 0; i < k; i++)
        t[i] -= 1e-6 * steps[i];
    struct calibrate_link_fit fit;
    calibrate_fit_link(steps, bus, t, k, &fit);
    double lowest = INFINITY;
    for (int i = 0; i < k; i++)
        lowest = fmin(lowest, t[i] / steps[i]);
    ck_assert_int_eq(fit.latency_fallback, 1);
    ck_assert_int_eq(fit.bandwidth_fallback, 0);
    ck_assert_msg(fit.latency == lowest, "latency %g, lowest time/steps %g", fit.latency, lowest);
    ck_assert_msg(fit.bandwidth > 0.9e9 && fit.bandwidth < 1.1e9, "bandwidth %g", fit.bandwidth);

    /* t falling with the size: 1/bandwidth fits negative */
    k = make_points(2, 1e-3, INFINITY, -1e-12, steps, bus, t);
    calibrate_fit_link(steps, bus, t, k, &fit);
    double best = 0;
    for (int i = 0; i < k; i++)
        best = fmax(best, bus[i] / t[i]);
    ck_assert_int_eq(fit.bandwidth_fallback, 1);
    ck_assert_msg(fabs(fit.bandwidth - best) <= 1e-12 * best, "bandwidth %g, best busbw %g",
                  fit.bandwidth, best);
    ck_assert_msg(fit.latency > 0 && isfinite(fit.latency), "latency %g", fit.latency);
}
END_TEST

/* A quick calibration at 2 ranks writes a machine file machine_load reads:
 * one device per node with the node's online cores, every rate positive (the 16-bit types'
 * measured apart), each type's layers on every core and on one in gemm_rates, one link for
 * both classes, the node's memory, the tables in the comment. */
START_TEST(quick_calibration_writes_a_machine_file)
{
    const char *dir = testutil_tmpdir("calibrate-ok");
    const char *log = testutil_path_in(dir, "log"), *out = testutil_path_in(dir, "m.yaml");
    const char *nvme = testutil_path_in(dir, "nvme");
    ck_assert_int_eq(mkdir(nvme, 0700), 0);
    const int rc = testutil_run(log, MPIRUN " 2 %s calibrate --quick --nvme-path %s --out %s",
                                testutil_binary(), nvme, out);
    const char *text = testutil_slurp(log);
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, text);
    ck_assert_msg(strstr(text, "wrote machine 'cpu-") != NULL, "%s", text);

    struct machine m;
    ck_assert_msg(machine_load(out, &m) == ZT_OK, "%s", zt_error_message());
    char host[256] = "";
    ck_assert_int_eq(gethostname(host, sizeof host - 1), 0);
    ck_assert_str_eq(m.name, testutil_fmt("cpu-%.59s", host));
    ck_assert_int_eq(m.devices_per_node, 1);
    ck_assert_int_eq(m.cores, (int)sysconf(_SC_NPROCESSORS_ONLN));
    ck_assert_uint_eq(m.device_memory,
                      (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE));
    const double rates[] = {m.matmul_flops[MACHINE_FP32], m.matmul_flops[MACHINE_BF16],
                            m.matmul_flops[MACHINE_FP16], m.memory_bandwidth,
                            m.intra_node.bandwidth,       m.intra_node.latency,
                            m.inter_node.bandwidth,       m.inter_node.latency};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
        ck_assert_msg(rates[i] > 0 && isfinite(rates[i]), "number %zu is %g", i, rates[i]);
    /* --quick: three layers at 256 rows, on every core and (where there are
     * more than one) on one */
    const int counts = m.cores > 1 ? 2 : 1;
    ck_assert_int_eq(m.gemm_rates[MACHINE_FP32].n, 3 * counts);
    ck_assert_int_eq(m.gemm_rates[MACHINE_FP32].row[0].threads, m.cores);
    ck_assert_int_eq(m.gemm_rates[MACHINE_FP32].row[3 * counts - 1].threads, 1);
    ck_assert_int_eq(m.gemm_rates[MACHINE_FP32].row[2].in, 768);
    /* --nvme-path: both bandwidths, and no file left in the folder */
    ck_assert_double_gt(m.nvme_read_bandwidth, 0);
    ck_assert_double_gt(m.nvme_write_bandwidth, 0);
    ck_assert_int_eq(testutil_run(log, "ls -A %s", nvme), 0);
    ck_assert_str_eq(testutil_slurp(log), "");
    ck_assert(m.inter_node.bandwidth == m.intra_node.bandwidth);
    ck_assert(m.inter_node.latency == m.intra_node.latency);
    /* every type's collectives by size, 4 KiB to 4 MiB under --quick, the
     * same for both links (one node measured) */
    for (int t = 0; t < 3; t++) {
        const struct machine_busbw_table *b = &m.intra_node.busbw[t];
        ck_assert_int_eq(b->n, 11);
        ck_assert_double_eq(b->row[0].bytes, 4096);
        ck_assert_double_eq(b->row[10].bytes, 4194304);
        for (int i = 0; i < b->n; i++)
            for (int k = 0; k < MACHINE_COLLECTIVES; k++)
                ck_assert_msg(b->row[i].busbw[k] > 0, "type %d row %d column %d", t, i, k);
        ck_assert_mem_eq(b, &m.inter_node.busbw[t], sizeof *b);
    }

    const char *file = testutil_slurp(out);
    const char *const lines[] = {
        "# Measured by zerotrain calibrate on host ",
        testutil_fmt("#   zerotrain calibrate --quick --nvme-path %s --out %s\n", nvme, out),
        "with 2 ranks",
        "# threads  rows     in    out   forward  input grad  weight grad\n",
        "# fp32 on ",
        "# memory: triad",
        "# cores: the node's online cores",
        "allreduce(us)",
        "#    4194304 ",
        "# links: least-squares fit",
        "# nvme: 2 ranks at once, each a file of 8 MiB in ",
        "which the planner reads for a product by its shape",
        "# collectives: the \"mpi\" backend (algorithms auto), bf16 sum, 2 ranks",
        "# collectives: the \"mpi\" backend (algorithms auto), fp16 sum, 2 ranks",
        "busbw: these tables' bus bandwidths",
        "intra_node and inter_node are both these"};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        ck_assert_msg(strstr(file, lines[i]) != NULL, "no '%s' in\n%s", lines[i], file);
    /* a 16-bit type has rows of its own where the CPU computes it, else
     * none and fp32's rate */
    const char *const types[] = {"bf16", "fp16"};
    for (int p = MACHINE_BF16; p <= MACHINE_FP16; p++) {
        const int rows = m.gemm_rates[p].n;
        ck_assert_msg(rows == 3 * counts ||
                          (rows == 0 && m.matmul_flops[p] == m.matmul_flops[MACHINE_FP32]),
                      "%s: %d rows, and %g FLOP/s against fp32's %g", types[p - 1], rows,
                      m.matmul_flops[p], m.matmul_flops[MACHINE_FP32]);
        ck_assert_msg(strstr(file, testutil_fmt(rows ? "# %s on " : "# %s: no kernel of its own",
                                                types[p - 1])),
                      "%s", file);
    }
    /* every optimizer's update and the 4-bit decode, on one core */
    int optimizers = 0;
    while (optimizer_at(optimizers))
        optimizers++;
    ck_assert_int_eq(m.n_updates, optimizers);
    ck_assert_double_gt(machine_update_rate(&m, "AdamW8bit"), 0);
    ck_assert_double_gt(m.dequantize_4bit, 0);
    ck_assert_msg(strstr(file, "#   AdamW8bit ") && strstr(file, "#   nf4 decode "), "%s", file);
    /* the fused attention in each type (a type without a kernel at fp32's
     * rate) and the element-wise ops, on one core */
    for (int p = MACHINE_FP32; p <= MACHINE_FP16; p++)
        ck_assert_double_gt(m.attention_flops[p], 0);
    if (m.gemm_rates[MACHINE_FP16].n == 0)
        ck_assert_double_eq(m.attention_flops[MACHINE_FP16], m.attention_flops[MACHINE_FP32]);
    ck_assert_double_gt(m.elementwise_bandwidth, 0);
    ck_assert_msg(strstr(file, "#   attention_flops: attention_forward + attention_backward") &&
                      strstr(file, "# attention_flops and elementwise_bandwidth: these rates."),
                  "%s", file);
    /* the loader on one core */
    ck_assert_double_gt(m.weights_read, 0);
    ck_assert_double_gt(m.weights_read_transposed, 0);
    ck_assert_double_gt(m.quantize_4bit, 0);
    ck_assert_msg(strstr(file, "#   weights_read: bf16 safetensors from the page cache") &&
                      strstr(file,
                             "# weights_read, weights_read_transposed and quantize_4bit: these "
                             "rates."),
                  "%s", file);
    /* written whole: no temporary file is left beside it */
    ck_assert_int_eq(testutil_run(log, "ls %s", dir), 0);
    ck_assert_str_eq(testutil_slurp(log), "log\nm.yaml\nnvme\n");
}
END_TEST

/* One message, and `code` on each of `ranks` ranks. */
static void assert_refused(const char *log, int ranks, int code, const char *message)
{
    const char *text = testutil_slurp(log);
    ck_assert_msg(testutil_count(text, "zerotrain: error: ") == 1, "%s", text);
    ck_assert_msg(strstr(text, message) != NULL, "no '%s' in\n%s", message, text);
    ck_assert_msg(testutil_count(text, testutil_fmt("rank exit %d\n", code)) == ranks,
                  "want exit %d on %d ranks:\n%s", code, ranks, text);
}

/* Usage errors exit 2 everywhere before anything is measured or written. */
START_TEST(usage_errors_exit_2_on_every_rank)
{
    const char *dir = testutil_tmpdir("calibrate-usage");
    const char *log = testutil_path_in(dir, "log"), *out = testutil_path_in(dir, "m.yaml");
    ck_assert_int_eq(testutil_run(log, MPIRUN " 1 " EACH_RANK " %s calibrate --quick --out %s",
                                  testutil_binary(), out),
                     0);
    assert_refused(log, 1, 2,
                   "zerotrain: error: calibrate measures collectives between ranks: run it under "
                   "mpirun with 2 to 4 ranks\n");
    ck_assert_int_eq(
        testutil_run(log, MPIRUN " 2 " EACH_RANK " %s calibrate --quick", testutil_binary()), 0);
    assert_refused(log, 2, 2, "zerotrain: error: calibrate needs --out FILE");
    ck_assert_int_eq(access(out, F_OK), -1);
}
END_TEST

/* An --out that cannot be created is a run-time failure found before
 * measuring: exit 1 on every rank, the message naming the path. */
START_TEST(unwritable_out_exits_1_on_every_rank)
{
    const char *dir = testutil_tmpdir("calibrate-nodir");
    const char *log = testutil_path_in(dir, "log");
    const char *out = testutil_fmt("%s/missing/m.yaml", dir);
    ck_assert_int_eq(testutil_run(log, MPIRUN " 2 " EACH_RANK " %s calibrate --quick --out %s",
                                  testutil_binary(), out),
                     0);
    assert_refused(log, 2, 1, testutil_fmt("zerotrain: error: rank 0: %s: cannot create ", out));
    ck_assert_msg(strstr(testutil_slurp(log), "GEMM") == NULL, "measured before failing:\n%s",
                  testutil_slurp(log));
}
END_TEST

/* An --nvme-path whose folder is missing fails on every rank with exit 1,
 * the message naming the folder, and no machine file is written. */
START_TEST(missing_nvme_folder_exits_1_on_every_rank)
{
    const char *dir = testutil_tmpdir("calibrate-nvme");
    const char *log = testutil_path_in(dir, "log"), *out = testutil_path_in(dir, "m.yaml");
    const char *nvme = testutil_fmt("%s/missing", dir);
    ck_assert_int_eq(
        testutil_run(log, MPIRUN " 2 " EACH_RANK " %s calibrate --quick --nvme-path %s --out %s",
                     testutil_binary(), nvme, out),
        0);
    assert_refused(log, 2, 1,
                   testutil_fmt("calibrate --nvme-path: cannot create a file in %s: No such file "
                                "or directory",
                                nvme));
    ck_assert_int_eq(access(out, F_OK), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("calibrate");
    TCase *fit = testutil_tcase(s, "fit", 30);
    tcase_add_test(fit, fit_recovers_a_known_link);
    tcase_add_test(fit, fit_forces_both_positive);
    TCase *bin = testutil_tcase(s, "binary", 120);
    tcase_add_test(bin, quick_calibration_writes_a_machine_file);
    tcase_add_test(bin, usage_errors_exit_2_on_every_rank);
    tcase_add_test(bin, unwritable_out_exits_1_on_every_rank);
    tcase_add_test(bin, missing_nvme_folder_exits_1_on_every_rank);
    return testutil_run_suite(s, 0);
}
