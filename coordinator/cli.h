/* coordinator/cli.h — the `zerotrain` command line. */
#ifndef ZT_COORDINATOR_CLI_H
#define ZT_COORDINATOR_CLI_H

#include <signal.h>

struct ckpt_fault_hooks;

/* Parses the command line, runs the subcommand and returns the process exit
 * status: 0 success, 2 usage or configuration error, 1 run-time failure.
 * Initialises and finalises MPI for the commands that need it. `stop` is
 * the signal handlers' stop request (see main.c); may be NULL. `faults` is
 * NULL but in test builds (coordinator/run_checkpoint.h). */
int cli_main(int argc, char **argv, volatile sig_atomic_t *stop,
             const struct ckpt_fault_hooks *faults);

#endif
