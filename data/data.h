/* data/data.h — token files, the byte tokenizer, datasets and the batch sampler.
 *
 * Token file format (little-endian), version 1:
 *   offset 0  char[8]  magic "ZTTOKENS"
 *          8  uint32   version (1)
 *         12  uint32   token width in bytes: 1 (byte tokenizer) or 2 (16-bit ids)
 *         16  uint32   vocab size the ids were made for (ids < vocab size)
 *         20  uint32   reserved, 0
 *         24  uint64   token count
 *         32  uint64   checksum: FNV-1a 64 over the token bytes as stored
 *         40  ...      tokens, `width` bytes each, little-endian
 * A reader checks every field and the file size, and names the file and the
 * field that is wrong.
 *
 * Sampling: a dataset of n tokens holds W = (n - 1) / seq_len windows; window
 * w is tokens [w*seq_len, w*seq_len + seq_len] (seq_len + 1 tokens: inputs
 * and next-token targets). Epoch e visits the windows in a permutation drawn
 * from (seed, e) with the counter-based generator. The global batch of
 * optimizer step s is the G = micro * accum * world consecutive entries
 * s*G .. s*G+G-1 of the endless sequence epoch 0, epoch 1, ...; so it does
 * not depend on the world size. Rank r takes entries r*G/world .. of it, and
 * its micro step m takes `micro` consecutive entries of that slice.
 */
#ifndef ZT_DATA_H
#define ZT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"

#define ZT_TOKFILE_MAGIC "ZTTOKENS"
#define ZT_TOKFILE_VERSION 1u
#define ZT_TOKFILE_HEADER_SIZE 40

/* Tokens in memory: always widened to int32. */
struct token_buffer {
    int32_t *tokens; /* owned */
    size_t n;
    uint32_t vocab_size; /* ids are < vocab_size */
};

void token_buffer_free(struct token_buffer *b);

/* FNV-1a 64 of `n` bytes. */
uint64_t tokfile_checksum(const void *bytes, size_t n);

/* Writes a token file atomically (temp file, fsync, rename). width 1 or 2;
 * every id must be < vocab_size and fit the width.
 * Errors: ZT_ERR_IO, ZT_ERR_DATA (an id that does not fit). */
zt_status tokfile_write(const char *path, const int32_t *tokens, size_t n, uint32_t width,
                        uint32_t vocab_size);

/* Reads and verifies a token file. Errors: ZT_ERR_IO (cannot open/read),
 * ZT_ERR_DATA (bad magic, version, width, size, checksum, id >= vocab). */
zt_status tokfile_read(const char *path, struct token_buffer *out);

/* Returns 1 if the file starts with the token-file magic, 0 otherwise
 * (including when it cannot be read). */
int tokfile_is_tokfile(const char *path);

/* Byte-level tokenizer: vocabulary 256, one token per byte. Appends the
 * bytes of `n` text bytes to *out (growing it). */
zt_status tokenizer_bytes_encode(const unsigned char *text, size_t n, struct token_buffer *out);

/* Loads tokens from paths: a single token file, or any number of text
 * files and folders (folders walked recursively in sorted order, regular
 * files only, each tokenised with the byte tokenizer). Mixing a token file
 * with other paths is an error. Errors: ZT_ERR_IO, ZT_ERR_DATA. */
zt_status dataset_load(const char *const *paths, int n_paths, struct token_buffer *out);

/* Splits off the last `fraction` of `all` (rounded down to whole tokens,
 * at least seq_len + 1 when fraction > 0) as validation; `all` keeps the
 * head. Errors: ZT_ERR_DATA when either part would be shorter than
 * seq_len + 1 tokens. */
zt_status dataset_split_tail(struct token_buffer *all, double fraction, int seq_len,
                             struct token_buffer *val);

struct sampler {
    size_t n_windows;
    int seq_len;
    uint64_t seed;
    int micro, accum, world, rank;
    /* cached permutation of the current epoch */
    uint64_t epoch;
    uint32_t *perm; /* owned, n_windows entries */
};

/* Errors: ZT_ERR_DATA when the dataset has no full window. */
zt_status sampler_init(struct sampler *s, size_t n_tokens, int seq_len, uint64_t seed, int micro,
                       int accum, int world, int rank);
void sampler_free(struct sampler *s);

/* Window index of entry `i` of the endless global sequence. */
size_t sampler_window(struct sampler *s, uint64_t i);

/* Fills inputs[micro*seq_len] and targets[micro*seq_len] for this rank's
 * micro step `micro_step` (0..accum-1) of optimizer step `step`. */
void sampler_fill(struct sampler *s, const struct token_buffer *data, uint64_t step,
                  int micro_step, int32_t *inputs, int32_t *targets);

#endif
