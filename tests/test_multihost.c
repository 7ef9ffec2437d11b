/* tests/test_multihost.c — runs across several nodes, on two hosts
 * simulated in network namespaces on this machine (scripts/simhosts.sh:
 * each host its own address and hostname, TCP between hosts, shared memory
 * within one). CTest's fixture brings zt-h0 and zt-h1 up before the suite
 * and removes them after it, even when it fails or times out.
 *
 *   test_multihost            ranks land on their hosts; 2 hosts x 2 ranks
 *                             train configs/tiny.yaml as 4 ranks on one
 *                             host do, at stages 3 and 1, and checkpoint
 *                             and resume there exactly
 *   test_multihost link-down  a host whose link goes down mid-run: every
 *                             rank stops within comm.timeout_s, and the log
 *                             names the host
 *
 * Both skip (exit 77, saying why) where simulated hosts cannot run (not
 * root, no namespaces); the second also while zerotrain has no
 * comm.timeout_s. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define STEPS     20
#define MAX_STEPS 64
#define TIMEOUT_S 5 /* comm.timeout_s of the link-down run */

static const char *simhosts(void)
{
    return testutil_source_path("scripts/simhosts.sh");
}

/* Simulated host i's name: scripts/simhosts.sh's rule, zt-hI or, with
 * ZT_SIMHOSTS_ID=K (each build tree's own set), ztK-hI. */
static const char *host(int i)
{
    const char *id = getenv("ZT_SIMHOSTS_ID");
    return id && *id ? testutil_fmt("zt%s-h%d", id, i) : testutil_fmt("zt-h%d", i);
}

static const char *tiny(void)
{
    return testutil_source_path("configs/tiny.yaml");
}

/* Trains tiny.yaml at 4 ranks, on the simulated hosts (2 x 2) or on this
 * one, quiet, outputs in dir/name, metrics in dir/name.jsonl, log in
 * dir/name.log, then the extra arguments; returns the exit status. */
static int train(const char *dir, const char *name, int on_hosts, const char *extra)
{
    return testutil_run(testutil_path_in(dir, testutil_fmt("%s.log", name)),
                        "%s -np 4 %s train %s --quiet --no-progress --set run.eval_interval=0 "
                        "--set run.output_dir=%s/%s --metrics %s/%s.jsonl %s",
                        on_hosts ? testutil_fmt("%s mpirun", simhosts()) : "mpirun --oversubscribe",
                        testutil_binary(), tiny(), dir, name, dir, name, extra);
}

/* train() that must succeed and log n steps, whose losses it returns. */
static void train_losses(const char *dir, const char *name, int on_hosts, const char *extra,
                         double *loss, int n)
{
    ck_assert_msg(train(dir, name, on_hosts, extra) == 0, "%s failed:\n%s", name,
                  testutil_slurp(testutil_path_in(dir, testutil_fmt("%s.log", name))));
    ck_assert_int_eq(testutil_read_losses(testutil_path_in(dir, testutil_fmt("%s.jsonl", name)),
                                          loss, MAX_STEPS),
                     n);
}

/* Open MPI fills zt-h0's slots first: ranks 0 and 1 there, 2 and 3 on
 * zt-h1, each seeing its host's name. */
START_TEST(ranks_run_on_their_hosts)
{
    const char *dir = testutil_tmpdir("multihost-names");
    const char *log = testutil_path_in(dir, "names.log");
    /* the shell's builtins only: under the sanitizers every program the
     * ranks run gets the ASan runtime preloaded, and hostname(1) leaks */
    ck_assert_int_eq(testutil_run(log,
                                  "%s mpirun -np 4 sh -c 'read -r h </proc/sys/kernel/hostname && "
                                  "echo \"rank $OMPI_COMM_WORLD_RANK on $h\"'",
                                  simhosts()),
                     0);
    const char *out = testutil_slurp(log);
    for (int r = 0; r < 4; r++) {
        const char *want = testutil_fmt("rank %d on %s\n", r, host(r / 2));
        ck_assert_msg(testutil_count(out, want) == 1, "no '%s' in:\n%s", want, out);
    }
}
END_TEST

/* At stage 3 (loop 0) and 1 (loop 1): 2 hosts x 2 ranks give the losses of
 * 4 ranks on one host; a run stopped at step 10 on the hosts and resumed
 * there gives the uninterrupted run's losses and final weights exactly. */
START_TEST(hosts_train_checkpoint_and_resume)
{
    const int stage = _i == 0 ? 3 : 1;
    const char *dir = testutil_tmpdir("multihost-train");
    char common[128];
    snprintf(common, sizeof common, "--set zero_optimization.stage=%d", stage);
    double one[MAX_STEPS], two[MAX_STEPS], part[MAX_STEPS], rest[MAX_STEPS];
    train_losses(dir, "one", 0, testutil_fmt("%s --set run.steps=%d", common, STEPS), one, STEPS);
    train_losses(
        dir, "two", 1,
        testutil_fmt("%s --set run.steps=%d --set checkpoint.every=10 --set checkpoint.dir=%s/c2",
                     common, STEPS, dir),
        two, STEPS);
    testutil_assert_losses_close(one, two, STEPS, 1e-5,
                                 testutil_fmt("stage %d, 2 hosts x 2 ranks vs 1 host x 4", stage));

    /* the same run stopped at step 10 (its checkpoint saved at the end), then resumed */
    char ck[600];
    snprintf(ck, sizeof ck, "--set checkpoint.every=10 --set checkpoint.dir=%s/cp", dir);
    train_losses(dir, "part", 1, testutil_fmt("%s --set run.steps=10 %s", common, ck), part, 10);
    train_losses(dir, "rest", 1, testutil_fmt("%s --set run.steps=%d %s", common, STEPS, ck), rest,
                 STEPS - 10);
    const char *out = testutil_slurp(testutil_path_in(dir, "rest.log"));
    ck_assert_msg(strstr(out, "resumed from") && strstr(out, "at step 10"), "%s", out);
    for (int i = 0; i < STEPS; i++) {
        const double got = i < 10 ? part[i] : rest[i - 10];
        ck_assert_msg(got == two[i], "stage %d step %d: resumed %.9g, uninterrupted %.9g", stage,
                      i + 1, got, two[i]);
    }
    const char *log = testutil_path_in(dir, "export.log");
    ck_assert_int_eq(testutil_run(log,
                                  "%s export %s/c2 --out %s/two.safetensors && "
                                  "%s export %s/cp --out %s/rest.safetensors",
                                  testutil_binary(), dir, dir, testutil_binary(), dir, dir),
                     0);
    ck_assert_msg(testutil_run(log, "cmp %s/two.safetensors %s/rest.safetensors", dir, dir) == 0,
                  "stage %d: final weights differ: %s", stage, testutil_slurp(log));
}
END_TEST

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* How many zerotrain processes whose command line holds `marker` still run
 * (a zombie awaiting its parent has finished). */
static int live_ranks(const char *marker)
{
    FILE *p = popen(testutil_fmt("pgrep -f -- '%s'", marker), "r");
    ck_assert(p != NULL);
    int n = 0;
    long pid;
    while (fscanf(p, "%ld", &pid) == 1) {
        FILE *f = fopen(testutil_fmt("/proc/%ld/stat", pid), "r");
        char comm[64], state;
        long self;
        if (f && fscanf(f, "%ld (%63[^)]) %c", &self, comm, &state) == 3 &&
            strcmp(comm, "zerotrain") == 0 && state != 'Z')
            n++;
        if (f)
            fclose(f);
    }
    pclose(p);
    return n;
}

/* Whether some line of text holds both a and b. */
static int line_with(const char *text, const char *a, const char *b)
{
    for (const char *l = text; l && *l;) {
        const char *end = strchr(l, '\n');
        const size_t len = end ? (size_t)(end - l) : strlen(l);
        const char *pa = strstr(l, a), *pb = strstr(l, b);
        if (pa && pb && (size_t)(pa - l) < len && (size_t)(pb - l) < len)
            return 1;
        l = end ? end + 1 : NULL;
    }
    return 0;
}

/* 2 hosts x 2 ranks with comm.timeout_s = 5; after a few steps zt-h1's link
 * goes down (its packets dropped, no error on either side). Every rank
 * must be gone within timeout_s + 10 s, each having written its flight
 * log, a line of zerotrain's must name the host that stopped answering,
 * and the launcher itself (simhosts.sh mpirun: scripts/launch.sh around
 * mpirun, which alone would wait for zt-h1's daemon for many minutes) must
 * have exited by then too, non-zero. */
START_TEST(link_down_stops_every_rank)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testutil_tmpdir("multihost-linkdown"));
    char marker[600], metrics[600], log[600], mpirun_argv[4096];
    snprintf(marker, sizeof marker, "run.output_dir=%s/run", dir);
    snprintf(metrics, sizeof metrics, "%s/run.jsonl", dir);
    snprintf(log, sizeof log, "%s/run.log", dir);
    snprintf(mpirun_argv, sizeof mpirun_argv,
             "exec %s mpirun -np 4 %s train %s --quiet --no-progress --set run.steps=100000 "
             "--set comm.timeout_s=%d --set %s --metrics %s >%s 2>&1",
             simhosts(), testutil_binary(), tiny(), TIMEOUT_S, marker, metrics, log);
    /* sh execs the script, which execs mpirun: the child is mpirun */
    pid_t child = fork();
    ck_assert(child >= 0);
    if (child == 0) {
        execl("/bin/sh", "sh", "-c", mpirun_argv, (char *)NULL);
        _exit(127);
    }
    const pid_t rank = testutil_wait_for_rank(metrics, 3, marker);
    const char *quiet = testutil_path_in(dir, "link.log");
    const int down = rank > 0 ? testutil_run(quiet, "%s link-down %s", simhosts(), host(1)) : -1;
    const double t0 = now_s();
    int left = live_ranks(marker);
    while (left > 0 && now_s() - t0 < TIMEOUT_S + 10) {
        nanosleep(&(struct timespec){0, 200000000}, NULL);
        left = live_ranks(marker);
    }
    const double took = now_s() - t0;
    int status = 0, waited = 0;
    while (!waited && now_s() - t0 < TIMEOUT_S + 10) {
        waited = waitpid(child, &status, WNOHANG) == child;
        if (!waited)
            nanosleep(&(struct timespec){0, 100000000}, NULL);
    }
    const int launcher_ended = waited;
    const double launcher_took = now_s() - t0;

    /* put things back before any check can end the test */
    const int up = testutil_run(quiet, "%s link-up %s", simhosts(), host(1));
    if (!waited) { /* a failure already: only clean up */
        kill(child, SIGTERM);
        for (int i = 0; i < 50 && !waited; i++) {
            waited = waitpid(child, &status, WNOHANG) == child;
            if (!waited)
                nanosleep(&(struct timespec){0, 100000000}, NULL);
        }
    }
    if (!waited) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
    }

    const char *out = testutil_slurp(log);
    ck_assert_msg(rank > 0, "the run never reached step 3:\n%s", out);
    ck_assert_int_eq(down, 0);
    ck_assert_int_eq(up, 0);
    ck_assert_msg(left == 0, "%d zerotrain ranks still ran %.1f s after %s's link went down:\n%s",
                  left, took, host(1), out);
    ck_assert_msg(launcher_ended, "the launcher still ran %.1f s after %s's link went down:\n%s",
                  launcher_took, host(1), out);
    ck_assert_msg(!WIFEXITED(status) || WEXITSTATUS(status) != 0, "the launcher exited 0:\n%s",
                  out);
    ck_assert_msg(line_with(out, "zerotrain", host(1)), "no line of zerotrain's names host %s:\n%s",
                  host(1), out);
    for (int r = 0; r < 4; r++)
        ck_assert_msg(access(testutil_fmt("%s/run/flight/rank-%d.json", dir, r), R_OK) == 0,
                      "rank %d wrote no flight log (%s/run/flight)", r, dir);
}
END_TEST

/* The first line of a file, or "". */
static const char *first_line(const char *path)
{
    static char line[512];
    line[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f) {
        if (fgets(line, sizeof line, f))
            line[strcspn(line, "\n")] = '\0';
        fclose(f);
    }
    return line;
}

/* Exits 77 with the reason unless zt-h0 and zt-h1 are up (the fixture's
 * scripts/simhosts.sh up 2); with link_down, also unless zerotrain knows
 * comm.timeout_s. Runs before the suite: no ck_assert here. */
static void skip_unless_ready(int link_down)
{
    const char *dir = testutil_tmpdir("multihost-ready");
    const char *bin = getenv("ZT_BINARY");
    char log[600], cmd[2048];
    snprintf(log, sizeof log, "%s/ready.log", dir);
    snprintf(cmd, sizeof cmd, "%s hosts | grep -qx %s || %s check >%s 2>&1", simhosts(), host(1),
             simhosts(), log);
    int st = system(cmd);
    if (st != 0) {
        printf("SKIP: %s\n", WIFEXITED(st) && WEXITSTATUS(st) == 77
                                 ? first_line(log)
                                 : "the simulated hosts are not up: run the suite through ctest, "
                                   "whose fixture runs scripts/simhosts.sh up 2");
        exit(77);
    }
    if (!link_down)
        return;
    if (!bin) {
        printf("ZT_BINARY not set (run through ctest)\n");
        exit(1);
    }
    /* under mpirun, as every run of the suite: the sanitizer build's ranks
     * get their runtime and suppressions through it */
    snprintf(cmd, sizeof cmd,
             "mpirun -np 1 %s train %s --dry-run --set comm.timeout_s=%d "
             "--set run.output_dir=%s/dry >%s 2>&1",
             bin, tiny(), TIMEOUT_S, dir, log);
    st = system(cmd);
    if (st != 0) {
        const char *why = first_line(log);
        if (strstr(why, "unknown key")) {
            printf("SKIP: comm.timeout_s not built (%s)\n", why);
            exit(77);
        }
        printf("the dry run with comm.timeout_s failed: %s\n", why);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    const int link_down = argc > 1 && strcmp(argv[1], "link-down") == 0;
    if (argc > 2 || (argc == 2 && !link_down)) {
        fprintf(stderr, "usage: %s [link-down]\n", argv[0]);
        return 2;
    }
    skip_unless_ready(link_down);
    Suite *s = suite_create("multihost");
    if (link_down) {
        TCase *tc = testutil_tcase(s, "link_down", 240);
        tcase_add_test(tc, link_down_stops_every_rank);
    } else {
        TCase *tc = testutil_tcase(s, "hosts", 450);
        tcase_add_test(tc, ranks_run_on_their_hosts);
        tcase_add_loop_test(tc, hosts_train_checkpoint_and_resume, 0, 2);
    }
    return testutil_run_suite(s, 0);
}
