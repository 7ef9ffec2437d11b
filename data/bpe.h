/* data/bpe.h — the BPE merge engine every BPE tokenizer shares, and
 * GPT-2's byte-level BPE on it: its two vocabulary files, encoding and
 * decoding; for the data module's files (the "gpt2" entry of the tokenizer
 * table in tokenizer.c, which data.h exposes, and bpe_tokenizer.h's
 * tokenizers) and its tests.
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
 * the lowest is merged, and the merge pushes the two pairs it creates. A
 * candidate that a merge made stale is dropped when it comes up: its
 * symbol is gone or its pair's rank no longer matches. This is Hugging
 * Face's, SentencePiece's and tiktoken's order, one merge at a time. GPT-2
 * merges every occurrence of the lowest pair in one round (`rounds`): each
 * round takes every candidate of the lowest rank off the heap first, in
 * position order, then merges those still current. Both give the same
 * pieces whenever a merge's rank exceeds the ranks that made its two parts,
 * as in every vocabulary learned by BPE; the tests' small vocabularies
 * tell them apart. O(k log k) per piece of k symbols, with no cache and no
 * state kept between calls.
 *
 * The same engine serves vocabularies of other shapes (bpe_tokenizer.h):
 * symbols that start as characters rather than bytes, merges derived from
 * tiktoken's ranks, and `whole_pieces` (tokenizer.json's ignore_merges,
 * tiktoken's rule), which makes a piece that is itself a token that token.
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

struct bpe_symbol {
    int32_t id;         /* -1 once merged into the symbol before it */
    int32_t prev, next; /* positions, -1 at the ends */
};

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
    int32_t eot;             /* the id of "<|endoftext|>" (gpt2); -1 none */
    int32_t byte_token[256]; /* the token of each single byte (-1 none: not byte-level) */
    uint32_t *offsets;       /* vocab_size + 1: token i is bytes[offsets[i] .. offsets[i + 1]) */
    unsigned char *bytes;
    struct bpe_merge *merges; /* open addressing, merge_mask + 1 slots (a power of two) */
    size_t merge_mask;
    uint32_t n_merges;
    int32_t *index; /* token bytes -> id: open addressing over ids, -1 empty */
    size_t index_mask;
    int whole_pieces; /* a piece that is a token is that token (no merging) */
    int rounds;       /* GPT-2's rounds rather than one merge at a time */
};

/* Room for the merging of one piece, grown to the longest piece seen; a
 * zeroed struct is empty, bpe_work_free frees it. */
struct bpe_work {
    struct bpe_symbol *sym; /* cap */
    uint64_t *heap;         /* 3 * cap: k - 1 first pairs, 2 per merge, at most k - 1 merges */
    int32_t *ids;           /* cap: the initial ids a caller fills */
    uint64_t *round;        /* cap: the candidates of one round (rounds) */
    size_t cap, heap_n;
};

/* Grows w to pieces of k symbols. Errors: ZT_ERR_NOMEM. */
zt_status bpe_work_reserve(struct bpe_work *w, size_t k);

/* Frees w's arrays and leaves it empty. */
void bpe_work_free(struct bpe_work *w);

/* Merges the k symbols w->ids[0..k) (at least 1; bpe_work_reserve(w, k)
 * made room) and appends the resulting ids to out, which has room for k
 * more. */
void bpe_merge_ids(const struct bpe *b, struct bpe_work *w, size_t k, struct token_buffer *out);

/* Appends the tokens of one byte-level piece p[0..k) (k >= 1): its bytes'
 * tokens merged, or with whole_pieces the piece's own token when it is
 * one. out must have room for k more. Errors: ZT_ERR_NOMEM. */
zt_status bpe_encode_piece(const struct bpe *b, struct bpe_work *w, const unsigned char *p,
                           size_t k, struct token_buffer *out);

/* The id of the token with bytes p[0..n), or -1. */
int32_t bpe_token_id(const struct bpe *b, const unsigned char *p, size_t n);

/* The index slot of the token with bytes p[0..n): the one holding it, or
 * the empty one (-1) where it would go. For loaders building the index. */
int32_t *bpe_index_slot(const struct bpe *b, const unsigned char *p, size_t n);

/* The smallest power of two of at least 2n slots (a table at most half
 * full), for the index and the merge table. */
size_t bpe_table_size(size_t n);

/* GPT-2's byte alphabet stops before U+0144: the characters that stand for
 * a byte are below it. */
#define BPE_ALPHABET_END 0x144

/* bytes_to_unicode of GPT-2's encoder.py, inverted: byte_of[cp] is the byte
 * character cp stands for (the printable bytes stand for themselves, the
 * others in order for U+0100 onwards), -1 for the characters that stand
 * for none. Byte-level tokenizer.json files write their tokens in it too. */
void bpe_alphabet_build(int16_t byte_of[BPE_ALPHABET_END]);

/* The bytes of a token written in the alphabet (valid UTF-8, s[0..n)),
 * into out (room for n); returns their count, or sets *bad to the first
 * character outside the alphabet and returns SIZE_MAX. */
size_t bpe_alphabet_bytes(const int16_t byte_of[BPE_ALPHABET_END], const unsigned char *s, size_t n,
                          unsigned char *out, uint32_t *bad);

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
