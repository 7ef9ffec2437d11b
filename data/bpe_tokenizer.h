/* data/bpe_tokenizer.h — BPE tokenizers as models ship them: a Hugging Face
 * tokenizer.json (hf_tokenizer.c) or a tiktoken rank file (tiktoken.c), read
 * into one shape and encoded by one routine (bpe_tokenizer.c); for the data
 * module's files (the "hf", "cl100k" and "o200k" rows of tokenizer.c) and
 * its tests.
 *
 * Two kinds of vocabulary:
 *   byte-level (Llama 3, Qwen2, GPT-NeoX, GPT-2, tiktoken): a piece's
 *     symbols start as its bytes, each a token; the text is first cut into
 *     pieces by a pre-tokenising rule (pretokenize.h);
 *   characters (SentencePiece's BPE as Llama 2, Mistral 7B and TinyLlama
 *     ship it): spaces are written "▁" (U+2581), one "▁" is put before the
 *     text, and a piece's symbols start as its characters, a character that
 *     is no token falling back to the tokens of its bytes (<0x41>) or, with
 *     no byte fallback, to the unknown token. The text is one piece, or
 *     with Metaspace's split one piece per "▁"; when no token has a "▁"
 *     after another character (Llama 2's, Mistral's), merging word by word
 *     gives the same ids, and is done so.
 * Merging is bpe.h's. Added tokens (special or not) are found in the text
 * first, leftmost and longest, and the text between them is encoded on its
 * own: each such part of a character vocabulary gets its own "▁" (Hugging
 * Face's legacy behaviour) unless the pre-tokenizer says only the first.
 *
 * Decoding concatenates each id's bytes: a byte-level token's bytes, a
 * character token's text with "▁" as a space and <0xNN> as the byte, an added
 * token's text; a character vocabulary whose decoder strips the space its
 * "▁" made drops one leading space of the whole. Ids between a vocabulary's
 * tokens that name none (tiktoken leaves gaps before its special tokens) are
 * refused.
 *
 * Ownership: a loader makes a struct bpe_tokenizer that
 * bpe_tokenizer_free frees; encoding and decoding only read it, so
 * threads may share one.
 */
#ifndef ZT_DATA_BPE_TOKENIZER_H
#define ZT_DATA_BPE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"
#include "bpe.h"
#include "data.h"
#include "pretokenize.h"

enum bpe_symbols { BPE_SYMBOLS_BYTES, BPE_SYMBOLS_CHARS };

/* Where a character vocabulary puts its "▁" before a part of the text. */
enum bpe_prepend { BPE_PREPEND_ALWAYS, BPE_PREPEND_FIRST, BPE_PREPEND_NEVER };

/* An added token: its text is added_bytes[offset .. offset + len). */
struct bpe_added {
    uint32_t offset, len;
    int32_t id;
};

struct bpe_tokenizer {
    const char *name;    /* the table's name for it, in messages ("hf") */
    struct bpe *b;       /* the model's tokens and merges; owned */
    uint32_t vocab_size; /* the highest id of the model and the added tokens, + 1 */
    /* The bytes each id decodes to: vocab_size + 1 offsets, owned. */
    uint32_t *dec_offsets;
    unsigned char *dec_bytes;
    enum bpe_symbols symbols;
    int nfc; /* each part of the text between added tokens is put in NFC first (nfc.h) */
    pretokenize_fn pretokenize; /* bytes: the rule (NULL: the whole part is one piece) */
    /* characters: */
    enum bpe_prepend prepend;
    int metaspace;           /* Metaspace: a part that starts with a space gets no "▁" */
    int split_metaspace;     /* Metaspace's split: a piece starts at each "▁" */
    int split_words;         /* a piece starts at each "▁" after another character: no token
                                holds one there, so no merge crosses it */
    int byte_fallback;       /* unknown characters as their bytes' tokens */
    int fuse_unk;            /* consecutive unknown characters as one unknown token */
    int strip_leading_space; /* decoding drops one leading space */
    int32_t space_id;        /* the token of "▁" (-1 none) */
    int32_t unk_id;          /* the unknown token (-1 none) */
    int32_t byte_id[256];    /* <0xNN>'s ids (-1 none) */
    struct bpe_added *added; /* n_added, sorted by their text (memcmp, then length) */
    size_t n_added;
    unsigned char *added_bytes;
    uint32_t added_first[256]; /* how many added tokens start with each byte */
    uint32_t added_start[256]; /* the index of the first of them in `added` */
    int32_t bos, eos;          /* from tokenizer_config.json, or the format's own; -1 none */
    /* tokenizer_config.json's chat_template (the Jinja text; a list's
     * "default" entry), owned; NULL for none. */
    char *chat_template;
    uint32_t next_id; /* while loading: the model ids below it are put */
};

/* A new empty tokenizer (bos, eos, space, unk and byte ids -1) with a new
 * empty struct bpe. Errors: ZT_ERR_NOMEM. */
zt_status bpe_tokenizer_new(struct bpe_tokenizer **out);

/* Frees everything; NULL-safe. */
void bpe_tokenizer_free(struct bpe_tokenizer *t);

/* Sizes t->b for `n` model tokens with ids below `vocab` whose bytes total
 * `bytes`: offsets (vocab + 1, zeroed), the byte pool and the index, empty.
 * Errors: ZT_ERR_NOMEM, naming `path`. */
zt_status bpe_tokenizer_reserve(struct bpe_tokenizer *t, const char *path, uint32_t vocab, size_t n,
                                size_t bytes);

/* Sizes t->b's merge table, empty, for `merges` merges (once). Errors:
 * ZT_ERR_NOMEM, naming `path`. */
zt_status bpe_tokenizer_reserve_merges(struct bpe_tokenizer *t, const char *path, size_t merges);

/* Puts model token `id` (below the reserved vocabulary, in increasing id
 * order; ids skipped stay empty) with bytes p[0..n) (n >= 1) into the
 * table and the index. Returns the id of a token with the same bytes that
 * is already there, else -1. */
int32_t bpe_tokenizer_put_token(struct bpe_tokenizer *t, int32_t id, const unsigned char *p,
                                size_t n);

/* Puts the merge (left, right) -> merged of `rank`; a pair given again
 * takes the later rank, as Hugging Face's reader does. */
void bpe_tokenizer_put_merge(struct bpe_tokenizer *t, int32_t left, int32_t right, int32_t merged,
                             uint32_t rank);

/* Sets the added tokens (texts[i] of lens[i] bytes, ids[i]; n of them),
 * raises vocab_size to cover them, builds the decoding table and the byte
 * tables, and checks what the encoder relies on: byte-level vocabularies
 * have a token for every byte. Errors: ZT_ERR_CONFIG naming `path` (an
 * empty added token, a byte with no token), ZT_ERR_NOMEM. */
zt_status bpe_tokenizer_finish(struct bpe_tokenizer *t, const char *path,
                               const unsigned char *const *texts, const size_t *lens,
                               const int32_t *ids, size_t n);

/* The id of the added token or model token with text s[0..n), or -1. */
int32_t bpe_tokenizer_find(const struct bpe_tokenizer *t, const unsigned char *s, size_t n);

/* Appends the ids of text[0..n) to *out (growing it). Errors:
 * ZT_ERR_NOMEM. */
zt_status bpe_tokenizer_encode(const struct bpe_tokenizer *t, const unsigned char *text, size_t n,
                               struct token_buffer *out);

/* The bytes of ids[0..n) (each below vocab_size, checked by the caller)
 * into a new buffer (*out, caller frees; *len bytes). Errors: ZT_ERR_DATA
 * for an id that names no token (with its position), ZT_ERR_NOMEM. */
zt_status bpe_tokenizer_decode(const struct bpe_tokenizer *t, const int32_t *ids, size_t n,
                               unsigned char **out, size_t *len);

/* Reads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json
 * (its bos_token, eos_token and which family its chat_template is) into a new *out. Errors:
 * ZT_ERR_CONFIG for a missing folder or file (with a hint at scripts/tokenizers.sh) and for a file
 * that is not what tokenizer.json is, naming the file and the key (model.vocab, model.merges[12],
 * added_tokens[3].id ...); ZT_ERR_UNSUPPORTED for a valid file that asks for what is not written
 * here (another model type than BPE, a normalizer or pre-tokenizer other
 * than those above, a pattern pretokenize.h does not have, added tokens
 * that strip white space), naming it; ZT_ERR_NOMEM. */
zt_status hf_tokenizer_load(const char *dir, struct bpe_tokenizer **out);

/* Reads tiktoken's rank file DIR/FILE ("cl100k_base.tiktoken": one
 * "BASE64 RANK" line a token, ranks 0, 1, ... in order) into a new *out,
 * with the encoding's rule and special tokens (`specials`, n_specials of
 * them, texts and ids), end-of-text `eot`. Errors: ZT_ERR_CONFIG for a
 * missing folder or file and a malformed line (naming PATH:LINE),
 * ZT_ERR_NOMEM. */
struct tiktoken_encoding {
    const char *name;    /* "cl100k" */
    const char *file;    /* "cl100k_base.tiktoken" */
    pretokenize_fn rule; /* pretokenize_next_llama3 */
    const char *const *special_texts;
    const int32_t *special_ids;
    size_t n_specials;
    int32_t eot;
};
zt_status tiktoken_load(const char *dir, const struct tiktoken_encoding *enc,
                        struct bpe_tokenizer **out);

/* The encodings tiktoken.c knows, by name ("cl100k", "o200k"); NULL for
 * another. */
const struct tiktoken_encoding *tiktoken_encoding(const char *name);

#endif
