/* cli/cli.h — the `zerotrain` command line. */
#ifndef ZT_CLI_CLI_H
#define ZT_CLI_CLI_H

#include <signal.h>
#include <stdio.h>

#include "../common/status.h"

struct ckpt_fault_hooks;

/* Parses the command line, runs the subcommand and returns the process exit
 * status: 0 success, 2 usage or configuration error, 1 run-time failure.
 * Initialises and finalises MPI for the commands that need it. `stop` is
 * the signal handlers' stop request (see main.c); may be NULL. `faults` is
 * NULL but in test builds (coordinator/run_checkpoint.h). */
int cli_main(int argc, char **argv, volatile sig_atomic_t *stop,
             const struct ckpt_fault_hooks *faults);

/* Writes the command-line reference (docs/reference/cli.md) as Markdown
 * from the help texts `zerotrain help` prints: the usage, then each
 * command's help in a code block. Errors: ZT_ERR_IO on a write error. */
zt_status cli_write_reference(FILE *f);

#endif
