/* cli/generate.h — `zerotrain generate`: text from a trained model, one
 * token per step over a key/value cache (worker/infer.h), with the run's
 * tokenizer. One process without MPI, or under mpirun the ranks of one
 * tensor-parallel group (MPI is started only when the launcher says there
 * are several). */
#ifndef ZT_CLI_GENERATE_H
#define ZT_CLI_GENERATE_H

#include <stdio.h>

/* The command's help, as `zerotrain help generate` prints it. */
extern const char generate_help[];

/* Runs `zerotrain generate ARGS` (argv without the command's name): the
 * text (or JSON lines) to `out`, the source line, speeds and errors
 * ("zerotrain: error: ...") to `err`. Returns the exit status: 0, 2 for a
 * usage or configuration error (a missing checkpoint, no weights, a prompt
 * too long for the model, a world that is not the layout's T ranks), 1
 * for a run-time failure; under several ranks the same on each, the text
 * and the error printed once. */
int generate_command(int argc, char **argv, FILE *out, FILE *err);

#endif
