/* coordinator/prepare.h — the core of `zerotrain prepare`: text files and
 * folders in, one token file out.
 *
 * Tokenising once ahead of training means every rank of every run reads
 * the same verified, checksummed tokens instead of re-walking a folder that
 * may have changed; the CLI parses the arguments and calls prepare_run.
 */
#ifndef ZT_COORDINATOR_PREPARE_H
#define ZT_COORDINATOR_PREPARE_H

#include <stdio.h>

#include "../common/status.h"

/* Loads `paths` (text files and folders, as dataset_load walks them, every
 * file read as text whatever its name; a binary one is an error) with
 * the byte tokenizer and writes them atomically to `out_path` as a token
 * file (1-byte ids, vocab 256). On success prints one line to `report`
 * (skipped when NULL): "wrote N tokens (256 vocab, 1-byte ids) from F files
 * to OUT". Errors: ZT_ERR_USAGE (no paths, a path that is already a token
 * file, or out_path being one of the input files), and dataset_load's and
 * tokfile_write's errors; out_path is untouched on error. */
zt_status prepare_run(const char *out_path, const char *const *paths, int n_paths, FILE *report);

#endif
