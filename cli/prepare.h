/* cli/prepare.h — the core of `zerotrain prepare`: text files and
 * folders in, one token file out.
 *
 * Tokenising once ahead of training means every rank of every run reads
 * the same verified, checksummed tokens instead of re-walking a folder that
 * may have changed; the CLI parses the arguments and calls prepare_run.
 */
#ifndef ZT_CLI_PREPARE_H
#define ZT_CLI_PREPARE_H

#include <stdio.h>

#include "../common/status.h"

/* Which tokenizer prepare uses; a zeroed struct (or NULL) is the byte
 * tokenizer. */
struct prepare_options {
    const char *tokenizer;     /* a name of data.h's table; NULL: the folder's own, else bytes */
    const char *tokenizer_dir; /* its vocabulary folder; NULL for one that reads none */
};

/* Loads `paths` (text files and folders, as dataset_load walks them, every
 * file read as text whatever its name; a binary one is an error), tokenises
 * them with opt's tokenizer, each file one document with the tokenizer's
 * end-of-text id between documents (gpt2: 50256; bytes has none), and
 * writes them atomically to `out_path` as a token file: 1-byte ids for a
 * vocabulary of at most 256, else 2-byte ids. On success prints one line
 * to `report` (skipped when NULL): "wrote N tokens (V vocab, W-byte ids)
 * from F files to OUT". Errors: ZT_ERR_USAGE (no paths, a path that is
 * already a token file, out_path being one of the input files, and
 * tokenizer_open's usage errors), the tokenizer's errors loading its folder,
 * ZT_ERR_DATA for a vocabulary too large for 2-byte ids, and
 * dataset_load's and tokfile_write's errors; out_path is untouched on
 * error. */
zt_status prepare_run(const char *out_path, const char *const *paths, int n_paths,
                      const struct prepare_options *opt, FILE *report);

#endif
