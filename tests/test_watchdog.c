/* tests/test_watchdog.c — a job that cannot go on ends, and says why;
 * one that is only slow goes on (comm/flight.h).
 *
 * The failing tests start a 3-rank run of the micro model with a short
 * comm.timeout_s, let it train a few steps, then break one rank: stop it
 * (SIGSTOP), kill it (SIGKILL), or make it hang inside a checkpoint write
 * while the others wait for it (zerotrain_faulty). The launcher itself
 * (mpirun, which the test's child execs) must be gone within the timeout
 * plus 10 s with a non-zero exit, no rank may be left, one line must name
 * the rank and its host, and the ranks that could act must have written
 * flight logs that parse (test_output_json reads them again after the
 * suite).
 *
 * The slow tests (a straggler, a slow pipeline stage, an uneven final
 * evaluation) make one rank sleep 0.3 s after each block of one step's
 * forwards or of the final evaluation (zerotrain_faulty's ZT_TEST_SLOW)
 * with comm.timeout_s = 1: in all nearly twice the timeout late, so that
 * the others' wait is reported, but moving from unit to unit every 0.3 s,
 * as a healthy slow rank does. The run must finish with exit 0 and a
 * warning that names the slow rank as busy, not a hang. A stop or a hang
 * is waited for without end, so those verdicts need no luck either. */
#include <check.h>
#include <stdlib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/json.h"
#include "testutil.h"

#define MPIRUN "mpirun --oversubscribe -np"
/* Long enough that a rank starved of CPU on a loaded machine does not go
 * without moving for that long; the bound checked is the timeout + 10 s
 * whatever it is. */
#define TIMEOUT_S 5
#define RANKS     3

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A run in the background: the shell's pid and where it writes. */
struct bg_run {
    pid_t child;
    char dir[512], metrics[600], log[600], marker[600];
};

static void start(struct bg_run *r, const char *tag, const char *binary, const char *env,
                  const char *extra)
{
    snprintf(r->dir, sizeof r->dir, "%s", testutil_tmpdir(tag));
    snprintf(r->metrics, sizeof r->metrics, "%s/m.jsonl", r->dir);
    snprintf(r->log, sizeof r->log, "%s/run.log", r->dir);
    snprintf(r->marker, sizeof r->marker, "run.output_dir=%s/out", r->dir);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s exec " MPIRUN " %d %s train %s --quiet --no-progress --set %s "
             "--set run.steps=1000000 --set comm.timeout_s=%d --set checkpoint.dir=%s/ck "
             "--metrics %s %s >%s 2>&1",
             env, RANKS, binary, testutil_source_path("tests/data/micro.yaml"), r->marker,
             TIMEOUT_S, r->dir, r->metrics, extra, r->log);
    /* sh execs mpirun: the child is the launcher */
    r->child = fork();
    ck_assert(r->child >= 0);
    if (r->child == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
}

/* World rank `rank`'s pid once the run has written `lines` metrics lines. */
static pid_t rank_pid(const struct bg_run *r, int lines, int rank)
{
    pid_t any = testutil_wait_for_rank(r->metrics, lines, r->marker);
    ck_assert_msg(any > 0, "the run did not start:\n%s", testutil_slurp(r->log));
    pid_t pid = 0;
    for (int tries = 0; tries < 50 && !pid; tries++) {
        pid = testutil_find_world_rank(r->marker, rank);
        if (!pid)
            nanosleep(&(struct timespec){0, 100000000}, NULL);
    }
    ck_assert_msg(pid > 0, "rank %d not found", rank);
    return pid;
}

/* Kills what is left of the run's ranks (a stopped rank the launcher did
 * not reach must not outlive the test). */
static void kill_leftovers(const struct bg_run *r)
{
    for (int k = 0; k < 16; k++) {
        pid_t pid = testutil_find_rank(r->marker);
        if (!pid)
            return;
        kill(pid, SIGKILL);
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
}

/* Waits for the job; returns the seconds since t0 and its exit status.
 * Gives up (and fails) after a minute, ending what is left. */
static double finish(struct bg_run *r, double t0, int *status)
{
    pid_t got = 0;
    while ((got = waitpid(r->child, status, WNOHANG)) == 0 && now() - t0 < 60)
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    const double took = now() - t0;
    if (got == 0) {
        kill_leftovers(r);
        waitpid(r->child, status, 0);
        ck_abort_msg("the job did not end within 60 s:\n%s", testutil_slurp(r->log));
    }
    return took;
}

/* No zerotrain process of this run is left. */
static int ranks_left(const struct bg_run *r)
{
    nanosleep(&(struct timespec){0, 200000000}, NULL);
    const int left = testutil_find_rank(r->marker) != 0;
    kill_leftovers(r);
    return left;
}

/* Rank r's flight log parses and names its rank and the reason. */
static void check_flight_log(const struct bg_run *r, int rank, const char *reason_part)
{
    const char *path = testutil_fmt("%s/out/flight/rank-%d.json", r->dir, rank);
    ck_assert_msg(access(path, F_OK) == 0, "no flight log %s", path);
    struct json_value root;
    testutil_load_json(path, &root);
    const struct json_value *v = json_object_get(&root, "rank", NULL);
    ck_assert(v && v->type == JSON_INT && (int)v->magnitude == rank);
    v = json_object_get(&root, "reason", NULL);
    ck_assert(v && v->type == JSON_STRING);
    ck_assert_msg(strstr(v->str, reason_part), "reason: %s", v->str);
    v = json_object_get(&root, "calls", NULL);
    ck_assert(v && v->type == JSON_ARRAY && v->n > 0);
    v = json_object_get(&root, "groups", NULL);
    ck_assert(v && v->type == JSON_ARRAY && v->n >= 2);
    json_free(&root);
}

/* Stops world rank `rank` of a fresh run once it has trained a few steps;
 * returns the run's log once the job has ended within the timeout + 10 s
 * with a non-zero status. */
static const char *stop_rank(struct bg_run *r, const char *tag, int rank)
{
    start(r, tag, testutil_binary(), "", "");
    const pid_t victim = rank_pid(r, 3, rank);
    const double t0 = now();
    ck_assert_int_eq(kill(victim, SIGSTOP), 0);
    int status;
    const double took = finish(r, t0, &status);
    const char *out = testutil_slurp(r->log);
    ck_assert_msg(took < TIMEOUT_S + 10, "took %.1f s:\n%s", took, out);
    ck_assert_msg(!WIFEXITED(status) || WEXITSTATUS(status) != 0, "exit 0:\n%s", out);
    ck_assert_msg(testutil_count(out, "zerotrain: error:") == 1, "one host, one line:\n%s", out);
    return out;
}

/* A stopped rank does not answer: after the timeout rank 0 names it, and
 * every rank that can still act writes its log and exits 1. */
START_TEST(stopped_rank_is_named_within_the_timeout)
{
    struct bg_run r;
    const char *out = stop_rank(&r, "watchdog-stop", 1);
    ck_assert_msg(strstr(out, testutil_fmt("comm.timeout_s = %d: ", TIMEOUT_S)) &&
                      strstr(out, "has not completed"),
                  "%s", out);
    ck_assert_msg(strstr(out, "rank 1 (host ") && strstr(out, "does not answer"), "%s", out);
    /* a collective the stopped rank had done its part of is not taken for
     * a straggler's: that verdict waited one more timeout */
    ck_assert_msg(!strstr(out, "straggler"), "%s", out);
    check_flight_log(&r, 0, "rank 1 (host ");
    check_flight_log(&r, 2, "rank 1 (host ");
    ck_assert(!ranks_left(&r));
}
END_TEST

/* When rank 0, which gathers the states, is the one stopped, the others
 * name it themselves, one line per host. */
START_TEST(stopped_rank_0_is_named_by_the_others)
{
    struct bg_run r;
    const char *out = stop_rank(&r, "watchdog-stop0", 0);
    ck_assert_msg(strstr(out, "rank 1: rank 0 (host ") && strstr(out, "does not answer"), "%s",
                  out);
    check_flight_log(&r, 1, "rank 0 (host ");
    ck_assert(!ranks_left(&r));
}
END_TEST

/* A killed rank's connection closes without a goodbye: rank 0 names it at
 * once, well inside 10 s, whatever the timeout. */
START_TEST(killed_rank_is_named_at_once)
{
    struct bg_run r;
    start(&r, "watchdog-kill", testutil_binary(), "", "--set comm.timeout_s=300");
    const pid_t victim = rank_pid(&r, 3, 2);
    const double t0 = now();
    ck_assert_int_eq(kill(victim, SIGKILL), 0);
    int status;
    const double took = finish(&r, t0, &status);
    const char *out = testutil_slurp(r.log);
    ck_assert_msg(took < 10, "took %.1f s:\n%s", took, out);
    ck_assert_msg(!WIFEXITED(status) || WEXITSTATUS(status) != 0, "exit 0:\n%s", out);
    /* the launcher may end the others first; whoever speaks names rank 2 */
    ck_assert_msg(strstr(out, "rank 2 (host ") || strstr(out, "process rank 2"), "%s", out);
    ck_assert(!ranks_left(&r));
}
END_TEST

/* A rank that hangs outside MPI still answers through the side channel:
 * the line says it never entered the collective the others wait in, and
 * what it last did. */
START_TEST(hung_rank_never_entered_the_collective)
{
    struct bg_run r;
    start(&r, "watchdog-hang", testutil_faulty_binary(), "ZT_TEST_CRASH_IN_SAVE=1,4,hang",
          "--set checkpoint.every=4");
    const double t0 = now();
    int status;
    const double took = finish(&r, t0, &status);
    const char *out = testutil_slurp(r.log);
    ck_assert_msg(took < 30, "took %.1f s:\n%s", took, out);
    ck_assert_msg(!WIFEXITED(status) || WEXITSTATUS(status) != 0, "exit 0:\n%s", out);
    ck_assert_msg(strstr(out, "rank 1 (host ") && strstr(out, "never entered it: busy for") &&
                      strstr(out, "in a checkpoint write at step 4") && strstr(out, "not moving") &&
                      !strstr(out, "does not answer"),
                  "%s", out);
    ck_assert_int_eq(testutil_count(out, "zerotrain: error:"), 1);
    check_flight_log(&r, 0, "never entered it");
    check_flight_log(&r, 1, "never entered it");
    check_flight_log(&r, 2, "never entered it");
    ck_assert(!ranks_left(&r));
}
END_TEST

/* Runs zerotrain_faulty with ZT_TEST_SLOW=slow to its end; returns its
 * log once it exited 0, with no error and a warning. */
static const char *slow_run(const char *tag, int ranks, const char *slow, const char *extra)
{
    const char *dir = testutil_tmpdir(tag);
    const char *log = testutil_fmt("%s/log", dir);
    int rc = testutil_run(log,
                          "ZT_TEST_SLOW=%s " MPIRUN " %d %s train %s --quiet --no-progress "
                          "--set run.output_dir=%s/out --set run.steps=5 --set model.n_layer=6 "
                          "--set comm.timeout_s=1 --set checkpoint.dir=%s/ck %s",
                          slow, ranks, testutil_faulty_binary(),
                          testutil_source_path("tests/data/micro.yaml"), dir, dir, extra);
    const char *out = testutil_slurp(log);
    ck_assert_msg(rc == 0, "exit %d:\n%s", rc, out);
    ck_assert_msg(!strstr(out, "zerotrain: error:"), "%s", out);
    ck_assert_msg(strstr(out, "zerotrain: warning: rank 0: comm.timeout_s = 1: "), "%s", out);
    ck_assert_msg(strstr(out, "a slow rank, not a hang") || strstr(out, "a straggler"), "%s", out);
    ck_assert_msg(!strstr(out, "network or MPI problem") && !strstr(out, "does not answer"), "%s",
                  out);
    return out;
}

/* A data-parallel rank several timeouts late in step 3 (6 blocks of 0.3 s
 * with comm.timeout_s = 1), moving all along: the others' wait is
 * reported as a slow rank busy in its forward, and the run finishes its
 * steps, checkpoints and evaluation. */
START_TEST(straggler_does_not_end_the_run)
{
    const char *out = slow_run("watchdog-straggler", 3, "2,3,0.3", "--set checkpoint.every=2");
    ck_assert_msg(strstr(out, "rank 2 (host ") || strstr(out, "a straggler"), "%s", out);
    ck_assert_msg(strstr(out, "busy for") || strstr(out, "a straggler"), "%s", out);
    ck_assert_msg(strstr(out, "in the forward of unit") || strstr(out, "a straggler"), "%s", out);
    ck_assert_msg(strstr(out, "checkpoint saved") && strstr(out, "val loss"), "%s", out);
}
END_TEST

/* A slow first pipeline stage (6 blocks of 0.3 s per micro batch): the
 * second stage waits for its message, and the line says so, point to
 * point, naming the stage it waits for as busy. */
START_TEST(slow_pipeline_stage_does_not_end_the_run)
{
    const char *out = slow_run("watchdog-pipeline", 2, "0,3,0.3",
                               "--set pipeline.stages=2 --set gradient_accumulation_steps=2 "
                               "--set model.n_layer=12");
    ck_assert_msg(strstr(out, "rank 1 has been waiting for rank 0") &&
                      strstr(out, "on group pipeline") && strstr(out, "at step 3") &&
                      strstr(out, "rank 0 (host ") && strstr(out, "is busy for"),
                  "%s", out);
    ck_assert_msg(!strstr(out, "never entered"), "%s", out);
}
END_TEST

/* An uneven final evaluation: rank 1 evaluates slowly (6 blocks of 0.3 s
 * per batch), the others wait for it alone in the evaluation's allreduce;
 * the line names rank 1 as busy in the evaluation, and the run ends with
 * its validation loss and exit 0. */
START_TEST(uneven_evaluation_does_not_end_the_run)
{
    const char *out = slow_run("watchdog-eval", 3, "1,5,0.3,eval", "");
    ck_assert_msg((strstr(out, "rank 1 (host ") && strstr(out, "busy for") &&
                   strstr(out, "in an evaluation of unit")) ||
                      strstr(out, "a straggler"),
                  "%s", out);
    ck_assert_msg(strstr(out, "val loss"), "%s", out);
}
END_TEST

/* comm.timeout_s must be a number >= 0, said with its place. */
START_TEST(bad_timeout_is_refused)
{
    const char *dir = testutil_tmpdir("watchdog-config");
    const char *log = testutil_fmt("%s/log", dir);
    int rc = testutil_run(log,
                          MPIRUN " 2 %s train %s --quiet --set run.output_dir=%s "
                                 "--set comm.timeout_s=-1",
                          testutil_binary(), testutil_source_path("tests/data/micro.yaml"), dir);
    ck_assert_int_eq(rc, 2);
    const char *out = testutil_slurp(log);
    ck_assert_msg(strstr(out, "comm.timeout_s"), "%s", out);
    ck_assert_int_eq(testutil_count(out, "zerotrain: error:"), 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("watchdog");
    TCase *tc = tcase_create("binary");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, stopped_rank_is_named_within_the_timeout);
    tcase_add_test(tc, stopped_rank_0_is_named_by_the_others);
    tcase_add_test(tc, killed_rank_is_named_at_once);
    tcase_add_test(tc, hung_rank_never_entered_the_collective);
    tcase_add_test(tc, bad_timeout_is_refused);
    tcase_add_test(tc, straggler_does_not_end_the_run);
    tcase_add_test(tc, slow_pipeline_stage_does_not_end_the_run);
    tcase_add_test(tc, uneven_evaluation_does_not_end_the_run);
    suite_add_tcase(s, tc);
    return testutil_run_suite(s, 0);
}
