/* tests/fuzz/fuzz.h — what the fuzz targets share.
 *
 * A target is one file fuzz_<name>.c defining LLVMFuzzerTestOneInput: it
 * feeds one input to one parser and frees what the parser gave back. The
 * same function is linked two ways (tests/fuzz/CMakeLists.txt): with
 * libFuzzer's main under clang (ZT_FUZZ=ON), and with replay.c's main in
 * every build, which feeds it each file of the target's seed corpus and
 * regression folder, so that CTest replays every kept finding.
 *
 * The parsers are given files, not buffers: they check what a header says
 * against the file's real size and read it by ranges (pread), and a
 * buffer entry point would skip exactly the code a hostile file reaches.
 * So an input is written into a scratch folder of the process (on the
 * folder $TMPDIR names; scripts/fuzz.sh points it at /dev/shm) and the
 * parser opens it by path, as a run would. Formats that are a folder of
 * several files (a BPE vocabulary, a PEFT adapter, a sharded safetensors
 * model) take one input holding the files one after the other, split at
 * FUZZ_SEPARATOR; a missing piece is an empty file.
 *
 * Beyond not crashing, leaking or hanging, a target checks the one rule
 * every reader shares: a refused input has a message (fuzz_check).
 */
#ifndef ZT_TESTS_FUZZ_H
#define ZT_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/status.h"

/* Between the files of a multi-file input. */
#define FUZZ_SEPARATOR "\n====8<====\n"

/* Largest number of pieces fuzz_split gives. */
#define FUZZ_MAX_PIECES 8

struct fuzz_piece {
    const uint8_t *data;
    size_t size;
};

/* libFuzzer's entry point, which each target defines. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes `size` bytes to the file `name` in the process's scratch folder
 * (made on first use, removed at exit) and returns its path, valid until
 * the next call with another name; aborts when the folder cannot be
 * written, which is the machine's problem and not a finding. */
const char *fuzz_write(const char *name, const uint8_t *data, size_t size);

/* The scratch folder's path (made on first use). */
const char *fuzz_dir(void);

/* Splits data at each FUZZ_SEPARATOR into at most `max` pieces (the last
 * takes the rest, separators included); returns how many. */
size_t fuzz_split(const uint8_t *data, size_t size, struct fuzz_piece *pieces, size_t max);

/* Clears the last error; call before the parser. */
void fuzz_begin(void);

/* Aborts when `s` is a failure without a message: every refused input
 * must say what is wrong with it. With ZT_FUZZ_VERBOSE set in the
 * environment, prints the message (to see why a seed is refused).
 * Returns s. */
zt_status fuzz_check(zt_status s);

#endif
