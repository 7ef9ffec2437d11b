/* tests/zerotrain_faulty.c — the zerotrain command line with fault
 * injection, for the tests only (the zerotrain binary carries no such
 * hook): test_resume's crash safety, test_watchdog's hung rank and
 * test_nonfinite's poisoned steps.
 *
 * ZT_TEST_CRASH_IN_SAVE=R,S kills rank R with SIGKILL in the middle of
 * writing its shard of the checkpoint of step S, as a node failure would;
 * ZT_TEST_CRASH_IN_SAVE=R,S,hang makes it sleep there for good instead, as
 * a stuck file system would. Signals are left at their defaults: the tests
 * need no graceful stop.
 *
 * ZT_TEST_CRASH_IN_UPDATE=R,S kills rank R with SIGKILL in the update of
 * optimizer step S under NVMe offload, once its first chunk of states was
 * written back to the file (the rest still old).
 *
 * ZT_TEST_POISON=R,S,M,B writes a NaN into the first element of block B's
 * attention output in the forward of micro batch M of step S (1-based) on
 * rank R, as an op that diverged would; the step's re-run meets it too.
 *
 * ZT_TEST_SLOW=R,S,SECONDS[,eval] makes rank R sleep SECONDS after each
 * block's attention output in the forwards of step S (every micro batch),
 * or with ",eval" in the evaluation at step S: a rank that is slow but
 * moves from unit to unit, for test_watchdog's slow-rank cases. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "coordinator/run_checkpoint.h"
#include "worker/precision.h"

struct fault_point {
    int rank;
    long step;
    double seconds; /* ZT_TEST_SLOW */
    int in_eval;    /* ZT_TEST_SLOW's ",eval": the evaluation's forwards only */
    int hang;       /* sleep for good instead of dying */
    int micro, block;
};

static void crash_at(void *arg, int rank, long step)
{
    const struct fault_point *at = arg;
    if (rank != at->rank || step != at->step)
        return;
    while (at->hang)
        sleep(1);
    raise(SIGKILL);
}

static void poison_attention(void *arg, int rank, long step, int micro, int block, const char *what,
                             enum zt_dtype t, void *buf, size_t n)
{
    const struct fault_point *at = arg;
    const float nan = NAN;
    if (rank == at->rank && step == at->step && micro == at->micro && block == at->block &&
        strcmp(what, "attention output") == 0 && n > 0)
        precision_from_f32(t, &nan, buf, 1);
}

static void slow_forward(void *arg, int rank, long step, int micro, int block, const char *what,
                         enum zt_dtype t, void *buf, size_t n)
{
    const struct fault_point *at = arg;
    (void)block, (void)t, (void)buf, (void)n;
    if (rank == at->rank && step == at->step && (micro < 0) == at->in_eval &&
        strcmp(what, "attention output") == 0)
        nanosleep(&(struct timespec){(time_t)at->seconds,
                                     (long)((at->seconds - (double)(time_t)at->seconds) * 1e9)},
                  NULL);
}

/* ZT_TEST_CRASH_IN_SAVE's value: 1 when it parses. */
static int parse_crash(const char *spec, struct fault_point *at)
{
    char how[8] = "";
    const int n = sscanf(spec, "%d,%ld,%7s", &at->rank, &at->step, how);
    at->hang = n == 3;
    return n == 2 || (n == 3 && strcmp(how, "hang") == 0);
}

/* ZT_TEST_SLOW's value: 1 when it parses. */
static int parse_slow(const char *spec, struct fault_point *at)
{
    char where[8] = "";
    const int n = sscanf(spec, "%d,%ld,%lf,%7s", &at->rank, &at->step, &at->seconds, where);
    at->in_eval = n == 4;
    return at->seconds >= 0 && (n == 3 || (n == 4 && strcmp(where, "eval") == 0));
}

int main(int argc, char **argv)
{
    const char *crash = getenv("ZT_TEST_CRASH_IN_SAVE"), *poison = getenv("ZT_TEST_POISON");
    const char *slow = getenv("ZT_TEST_SLOW"), *update = getenv("ZT_TEST_CRASH_IN_UPDATE");
    struct fault_point at = {0};
    struct ckpt_fault_hooks faults = {.arg = &at};
    if (crash && parse_crash(crash, &at))
        faults.mid_shard = crash_at;
    else if (update && sscanf(update, "%d,%ld", &at.rank, &at.step) == 2)
        faults.mid_update = crash_at;
    else if (poison &&
             sscanf(poison, "%d,%ld,%d,%d", &at.rank, &at.step, &at.micro, &at.block) == 4)
        faults.forward_output = poison_attention;
    else if (slow && parse_slow(slow, &at))
        faults.forward_output = slow_forward;
    else {
        fprintf(
            stderr,
            "%s: set ZT_TEST_CRASH_IN_SAVE=RANK,STEP[,hang] or ZT_TEST_CRASH_IN_UPDATE=RANK,STEP "
            "or ZT_TEST_POISON=RANK,STEP,MICRO,BLOCK or ZT_TEST_SLOW=RANK,STEP,SECONDS[,eval]\n",
            argv[0]);
        return 2;
    }
    return cli_main(argc, argv, NULL, &faults);
}
