/* tests/zerotrain_faulty.c — the zerotrain command line with checkpoint
 * fault injection, for test_resume's crash-safety test only (the zerotrain
 * binary carries no such hook).
 *
 * ZT_TEST_CRASH_IN_SAVE=R,S kills rank R with SIGKILL in the middle of
 * writing its shard of the checkpoint of step S, as a node failure would.
 * Signals are left at their defaults: the test needs no graceful stop. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "coordinator/cli.h"
#include "coordinator/run_checkpoint.h"

struct crash_point {
    int rank;
    long step;
};

static void crash_mid_shard(void *arg, int rank, long step)
{
    const struct crash_point *at = arg;
    if (rank == at->rank && step == at->step)
        raise(SIGKILL);
}

int main(int argc, char **argv)
{
    const char *spec = getenv("ZT_TEST_CRASH_IN_SAVE");
    struct crash_point at;
    if (!spec || sscanf(spec, "%d,%ld", &at.rank, &at.step) != 2) {
        fprintf(stderr, "%s: set ZT_TEST_CRASH_IN_SAVE=RANK,STEP\n", argv[0]);
        return 2;
    }
    const struct ckpt_fault_hooks faults = {.mid_shard = crash_mid_shard, .arg = &at};
    return cli_main(argc, argv, NULL, &faults);
}
