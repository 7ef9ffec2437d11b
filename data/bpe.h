/* data/bpe.h — GPT-2's byte-level BPE: its two vocabulary files, encoding
 * and decoding; for the data module's files (the "gpt2" entry of the
 * tokenizer table in tokenizer.c, which data.h exposes) and its tests.
 *
 * The folder holds OpenAI's files as published (scripts/gpt2_vocab.sh
 * fetches and verifies them):
 *   encoder.json  one JSON object, token -> id, the ids 0..N-1 once each
 *                 (GPT-2: N = 50257, "<|endoftext|>" is 50256);
 *   vocab.bpe     a version comment ("#version: 0.2"), then one merge a
 *                 line, "A B": two tokens and one space; the merge on line
 *                 L has rank L - 2 (lower merges first); the file ends with
 *                 a newline.
 * Tokens are written in GPT-2's byte alphabet (bytes_to_unicode in its
 * encoder.py): the printable bytes ! .. ~, ¡ .. ¬ and ® .. ÿ stand for
 * themselves as characters, the other 68 bytes, in order, for U+0100 ..
 * U+0143. So every token string is a byte string, and the tokenizer works
 * on bytes throughout; the alphabet only matters while the files are read.
 *
 * Encoding, as GPT-2's encoder does it: the text is cut into pieces
 * (pretokenize.h); each piece starts as one token per byte, and rounds of
 * merging follow: the adjacent pair of lowest rank is found and all its
 * occurrences are merged, left to right and without overlap, until no
 * adjacent pair is a merge. "<|endoftext|>" written in the text is text,
 * not the end-of-text id (GPT-2's encoder does not look for it either).
 *
 * Why a heap: GPT-2 rescans a piece for every merge and hides the cost
 * behind a cache of pieces, so a long piece (a megabyte of one letter, a
 * run of white space) is quadratic. Here a piece is a linked list of
 * symbols and a min-heap of candidate pairs ordered by (rank, position);
 * each round takes every candidate of the lowest rank off the heap first
 * (in position order, as GPT-2's scan meets them), and a merge pushes the
 * two pairs it creates. A candidate that a merge made stale is dropped when
 * it comes up: its pair's rank no longer matches. O(k log k) per piece of k
 * bytes, with no cache and no state kept between calls.
 *
 * Ownership: bpe_load makes a struct bpe that bpe_free frees; encoding and
 * decoding only read it, so several threads may use one at once.
 */
#ifndef ZT_DATA_BPE_H
#define ZT_DATA_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "data.h"

/* One slot of the merge table: the pair (left, right) of token ids merges
 * into token `id` with priority `rank`. A slot with rank BPE_NO_RANK is
 * empty. */
struct bpe_merge {
    uint64_t pair; /* left << 32 | right */
    uint32_t rank;
    int32_t id;
};

#define BPE_NO_RANK UINT32_MAX

struct bpe {
    uint32_t vocab_size;
    int32_t eot;             /* the id of "<|endoftext|>" */
    int32_t byte_token[256]; /* the token of each single byte */
    uint32_t *offsets;       /* vocab_size + 1: token i is bytes[offsets[i] .. offsets[i + 1]) */
    unsigned char *bytes;
    struct bpe_merge *merges; /* open addressing, merge_mask + 1 slots (a power of two) */
    size_t merge_mask;
    uint32_t n_merges;
};

/* Reads DIR/encoder.json and DIR/vocab.bpe into a new *out (free with
 * bpe_free). Errors: ZT_ERR_IO for a folder or file that is missing or
 * cannot be read, naming it (a missing one with a hint at
 * scripts/gpt2_vocab.sh); ZT_ERR_DATA for a file that is not what is
 * described above, naming it: encoder.json not JSON or not an object of
 * ids, an id out of range or given twice, a token outside the byte alphabet
 * or written twice, no "<|endoftext|>", a byte with no token; vocab.bpe
 * naming the line: no version comment, not valid UTF-8, a line that is not
 * two tokens, a token (or the token a merge makes) that encoder.json does
 * not have, a merge given twice, no newline at the end; ZT_ERR_NOMEM. */
zt_status bpe_load(const char *dir, struct bpe **out);

/* Frees everything; NULL-safe. */
void bpe_free(struct bpe *b);

/* The slot of the merge (left, right): the one holding it, or the empty
 * slot where it would go (rank BPE_NO_RANK). */
struct bpe_merge *bpe_merge_slot(const struct bpe *b, int32_t left, int32_t right);

/* Appends the ids of text[0..n) to *out (growing it; its vocab_size is the
 * caller's business). Errors: ZT_ERR_NOMEM. */
zt_status bpe_encode(const struct bpe *b, const unsigned char *text, size_t n,
                     struct token_buffer *out);

/* The bytes of ids[0..n), each below vocab_size (checked by the caller),
 * into a new buffer (*out, caller frees; *len bytes). Errors: ZT_ERR_NOMEM. */
zt_status bpe_decode(const struct bpe *b, const int32_t *ids, size_t n, unsigned char **out,
                     size_t *len);

#endif
