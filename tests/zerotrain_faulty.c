/* tests/zerotrain_faulty.c — the zerotrain command line with checkpoint
 * fault injection, for test_resume's crash-safety test only (the zerotrain
 * binary carries no such hook).
 *
 * ZT_TEST_CRASH_IN_SAVE=R,S kills rank R with SIGKILL in the middle of
 * writing its shard of the checkpoint of step S, as a node failure would;
 * ZT_TEST_CRASH_IN_SAVE=R,S,hang makes it sleep there for good instead, as
 * a stuck file system would (test_watchdog). Signals are left at their
 * defaults: the tests need no graceful stop. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/cli.h"
#include "coordinator/run_checkpoint.h"

struct crash_point {
    int rank;
    long step;
    int hang; /* sleep for good instead of dying */
};

static void crash_mid_shard(void *arg, int rank, long step)
{
    const struct crash_point *at = arg;
    if (rank != at->rank || step != at->step)
        return;
    while (at->hang)
        sleep(1);
    raise(SIGKILL);
}

int main(int argc, char **argv)
{
    const char *spec = getenv("ZT_TEST_CRASH_IN_SAVE");
    struct crash_point at = {0};
    char how[8] = "";
    const int n = spec ? sscanf(spec, "%d,%ld,%7s", &at.rank, &at.step, how) : 0;
    if (n < 2 || (n == 3 && strcmp(how, "hang") != 0)) {
        fprintf(stderr, "%s: set ZT_TEST_CRASH_IN_SAVE=RANK,STEP[,hang]\n", argv[0]);
        return 2;
    }
    at.hang = n == 3;
    const struct ckpt_fault_hooks faults = {.mid_shard = crash_mid_shard, .arg = &at};
    return cli_main(argc, argv, NULL, &faults);
}
