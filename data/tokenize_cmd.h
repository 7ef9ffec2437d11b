/* data/tokenize_cmd.h — `zerotrain tokenize`: a tokenizer of the table run
 * on a text, the ids printed as JSON, or ids decoded back to text. The
 * debugging tool for tokenizers and templates, and how the tests compare
 * zerotrain's ids with other encoders'. No MPI.
 */
#ifndef ZT_DATA_TOKENIZE_CMD_H
#define ZT_DATA_TOKENIZE_CMD_H

#include <stdio.h>

/* The command's help, as `zerotrain help tokenize` prints it. */
extern const char tokenize_help[];

/* Runs `zerotrain tokenize ARGS` (argv without the command's name): reads
 * the text (or with --decode a JSON array of ids) from --file or `in`,
 * writes the JSON array of ids, one line, (or the decoded bytes) to `out`
 * and any error, "zerotrain: error: ...", to `err`. Returns the exit
 * status: 0, 2 for a usage error, a bad tokenizer folder or ids that are
 * not a JSON array of integers, 1 for a run-time failure. */
int tokenize_command(int argc, char **argv, FILE *in, FILE *out, FILE *err);

#endif
