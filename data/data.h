/* data/data.h — token files, tokenizers, datasets and the batch sampler.
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
#include <stdio.h>

#include "../common/status.h"

#define ZT_TOKFILE_MAGIC       "ZTTOKENS"
#define ZT_TOKFILE_VERSION     1u
#define ZT_TOKFILE_HEADER_SIZE 40

/* Tokens in memory: always widened to int32. A zeroed struct is an empty
 * buffer.
 *
 * The loss mask: NULL means every token counts; otherwise mask[i] = 0 says
 * token i is never a prediction target (a prompt token, padding, the first
 * token of an example laid in its own window), so where it would be a
 * target the sampler writes -1, which the model does not count (ops.h).
 * Only JSONL data (jsonl_load) carries a mask. */
struct token_buffer {
    int32_t *tokens; /* owned */
    size_t n;
    uint32_t vocab_size; /* ids are < vocab_size */
    size_t capacity;     /* entries allocated; appends grow it geometrically */
    uint8_t *mask;       /* owned; NULL or n entries (capacity allocated) */
};

/* Frees the tokens and the mask and leaves *b empty (zeroed); NULL-safe. */
void token_buffer_free(struct token_buffer *b);

/* FNV-1a 64 of `n` bytes. */
uint64_t tokfile_checksum(const void *bytes, size_t n);

/* Writes a token file atomically: PATH.tmp.<pid>, fflush + fsync, rename
 * over PATH, fsync of the folder; a failure removes the temp file and leaves
 * PATH as it was. width 1, 2 or 4; vocab_size in 1 .. 256^width (4:
 * INT32_MAX, as ids are int32); every id must be in 0 .. vocab_size - 1.
 * Errors: ZT_ERR_IO, ZT_ERR_DATA (bad width or vocab, an id that does not
 * fit, named with its position). */
zt_status tokfile_write(const char *path, const int32_t *tokens, size_t n, uint32_t width,
                        uint32_t vocab_size);

/* Reads and verifies a token file into *out (overwritten, not freed: pass
 * an empty buffer; the caller frees it). The body is read in chunks and
 * checked against the size fstat gives. Errors: ZT_ERR_IO (cannot open or
 * read), ZT_ERR_NOMEM, ZT_ERR_DATA (bad magic, version, width, vocab,
 * reserved field, size, checksum, id >= vocab), each message starting with
 * the path. On error *out is empty. */
zt_status tokfile_read(const char *path, struct token_buffer *out);

/* Opens a token file and checks its header and size against each other,
 * as tokfile_read does, without reading the tokens: for a file that is
 * meant as a token file but will not be read. Errors: those of
 * tokfile_read's header and size checks, each naming the path. */
zt_status tokfile_check(const char *path);

/* Returns 1 if the file starts with the token-file magic, 0 otherwise
 * (including when it cannot be read). */
int tokfile_is_tokfile(const char *path);

/* Returns 1 if `path` is named as a token file (it ends in ".tok"). */
int tokfile_is_named(const char *path);

/* Bytes at the start of a file that decide whether it is text (git and
 * grep look at about as many). */
#define ZT_SNIFF_BYTES 8192

/* Whether a file whose first bytes are head[0..n) is binary rather than
 * text: a NUL byte among its first ZT_SNIFF_BYTES bytes, or more than one
 * of them in ten outside valid UTF-8 (`more`: the file goes on after n, so
 * a sequence cut off at n is not counted). Returns 1 and writes the reason
 * into why[why_size] ("a NUL byte at offset 12", "900 of its first 8192
 * bytes are not UTF-8 text"); 0 when the file is text. */
int sniff_is_binary(const unsigned char *head, size_t n, int more, char *why, size_t why_size);

/* Byte-level tokenizer: vocabulary 256, one token per byte. Appends the
 * tokens of `n` text bytes to *out (growing it) and sets its vocab_size to
 * 256. Errors: ZT_ERR_NOMEM; ZT_ERR_DATA when *out already holds tokens of
 * another vocabulary. */
zt_status tokenizer_bytes_encode(const unsigned char *text, size_t n, struct token_buffer *out);

/* ---- tokenizers by name ----
 *
 * A tokenizer turns text bytes into ids and back; each is an entry of one
 * table (tokenizer.c), found by name:
 *   "bytes"  the byte tokenizer above: vocabulary 256, no folder, no
 *            end-of-text id;
 *   "gpt2"   GPT-2's byte-level BPE (bpe.h): a folder holding OpenAI's
 *            encoder.json and vocab.bpe (scripts/gpt2_vocab.sh fetches
 *            them), vocabulary 50257, end-of-text id 50256; ids equal those
 *            of GPT-2's own encoder for any text, and any bytes (invalid
 *            UTF-8 too) decode back exactly.
 *   "hf"     a Hugging Face tokenizer.json with a BPE model, byte-level
 *            (Llama 3, Qwen2, GPT-NeoX, GPT-2) or SentencePiece-style with
 *            byte fallback (Llama 2, Mistral 7B, TinyLlama), and its added
 *            tokens; tokenizer_config.json's bos_token and eos_token give
 *            the begin-of-text and end-of-text ids (bpe_tokenizer.h);
 *   "cl100k", "o200k"  tiktoken's rank files cl100k_base.tiktoken and
 *            o200k_base.tiktoken, with tiktoken's patterns and special
 *            tokens; end-of-text <|endoftext|>.
 * Added and special tokens written in the text ("<|eot_id|>") are those
 * tokens for hf, cl100k and o200k (Hugging Face's and tiktoken's
 * allowed_special="all"), text for gpt2. scripts/tokenizers.sh fetches
 * reference vocabularies of each.
 * An open tokenizer is only read by encoding and decoding, so threads may
 * share one. */
struct tokenizer;

/* Whether `name` names a tokenizer: 1 when it reads a vocabulary folder, 0
 * when it reads none, -1 when there is no tokenizer of that name. */
int tokenizer_needs_dir(const char *name);

/* The tokenizers' names, ", " between them ("bytes, gpt2"), into buf[n]
 * (NUL-terminated, cut to fit). */
void tokenizer_names(char *buf, size_t n);

/* The name of the tokenizer whose files the folder holds (tokenizer.json:
 * "hf", a tiktoken rank file, GPT-2's encoder.json or, without a
 * tokenizer.json, Hugging Face's vocab.json for it), or NULL. */
const char *tokenizer_detect(const char *dir);

/* Copies the files of tokenizer `name` from its folder `dir` (NULL for
 * one that reads none: nothing is copied) into the model folder to_dir,
 * under the names from_pretrained reads there (GPT-2: vocab.json and
 * merges.txt; hf: tokenizer.json and tokenizer_config.json and
 * special_tokens_map.json when present; tiktoken: the rank file), each
 * whole or not at all; tokenizer_open(NULL, to_dir) opens them again. The
 * names written, ", " between them, go to saved[n] ("" for none).
 * Errors: ZT_ERR_USAGE (no tokenizer of that name), ZT_ERR_IO naming the
 * file, ZT_ERR_NOMEM. */
zt_status tokenizer_save(const char *name, const char *dir, const char *to_dir, char *saved,
                         size_t n);

/* The key of tokenizer_config.json that names a built-in chat template
 * (chat_template_find), beside Hugging Face's Jinja "chat_template". */
#define TOKENIZER_CONFIG_CHAT_KEY "zerotrain_chat_template"

/* After tokenizer_save into the model folder to_dir: its
 * tokenizer_config.json as save_pretrained writes it. GPT-2's is written
 * whole (GPT2Tokenizer, <|endoftext|> for bos, eos and unk,
 * model_max_length `max_length`, no prefix space), with
 * special_tokens_map.json; with `chat` (a built-in template's name, NULL:
 * none) "chat_template" holds its Jinja (chat_template_jinja) and
 * TOKENIZER_CONFIG_CHAT_KEY its name, added to the copied file of hf (its
 * other members kept) or to a file of these two alone for the others.
 * Nothing else is written. The names written are appended to saved[n]
 * (", " between them). Errors: ZT_ERR_USAGE (no template `chat`),
 * ZT_ERR_CONFIG (a copied tokenizer_config.json that is not a JSON
 * object), ZT_ERR_IO, ZT_ERR_NOMEM. */
zt_status tokenizer_save_config(const char *name, const char *to_dir, int max_length,
                                const char *chat, char *saved, size_t n);

/* The built-in chat template the folder's tokenizer_config.json names
 * (TOKENIZER_CONFIG_CHAT_KEY) into name[n]; "" when the folder has no such
 * file or key. Errors: ZT_ERR_CONFIG (not a JSON object, the key not one
 * string), ZT_ERR_IO. */
zt_status tokenizer_config_chat(const char *dir, char *name, size_t n);

/* A model's files and the tokenizer it is given: when `tokenizer` reads no
 * folder (bytes) but the model setting `key` names a file or folder
 * (`path`, NULL: nothing to check) beside which a tokenizer lies
 * (tokenizer_detect of the folder), the model's ids are not bytes: a
 * ZT_ERR_CONFIG naming both and what to set. */
zt_status tokenizer_check_model_files(const char *tokenizer, const char *key, const char *path);

/* Opens tokenizer `name` with its vocabulary folder `dir` (NULL for one
 * that reads none) into *out; close it with tokenizer_close. A NULL name
 * is the tokenizer the folder holds (tokenizer_detect), or bytes without a
 * folder. Errors:
 * ZT_ERR_USAGE (no tokenizer of that name, a folder missing or given to
 * one that reads none), and the tokenizer's own: for gpt2 those of
 * bpe_load in bpe.h (ZT_ERR_IO for a missing or unreadable folder or file,
 * ZT_ERR_DATA for a malformed file, naming it and, in vocab.bpe, the line;
 * ZT_ERR_NOMEM); for hf, cl100k and o200k those of hf_tokenizer_load and
 * tiktoken_load (ZT_ERR_CONFIG for a missing or malformed file,
 * ZT_ERR_UNSUPPORTED for what a tokenizer.json asks that is not written
 * here). On error *out is NULL. */
zt_status tokenizer_open(const char *name, const char *dir, struct tokenizer **out);

/* Frees the tokenizer; NULL-safe. */
void tokenizer_close(struct tokenizer *t);

/* The table name it was opened by ("gpt2"). */
const char *tokenizer_name(const struct tokenizer *t);

/* Its ids are 0 .. vocab size - 1. */
uint32_t tokenizer_vocab_size(const struct tokenizer *t);

/* The id put between documents, or -1 when it has none (bytes). */
int32_t tokenizer_eot_id(const struct tokenizer *t);

/* The begin-of-text id (tokenizer_config.json's bos_token), or -1. */
int32_t tokenizer_bos_id(const struct tokenizer *t);

/* Its tokenizer_config.json's chat_template, the Jinja text (which
 * chat_template_detect, below, names the family of); NULL when the
 * tokenizer has none. */
const char *tokenizer_chat_template(const struct tokenizer *t);

/* Appends the ids of text[0..n), one document or part of one, to *out
 * (growing it) and sets its vocab_size. Errors: ZT_ERR_NOMEM; ZT_ERR_DATA
 * when *out already holds tokens of another vocabulary. */
zt_status tokenizer_encode(const struct tokenizer *t, const unsigned char *text, size_t n,
                           struct token_buffer *out);

/* The bytes of ids[0..n) into a new buffer (*out, caller frees; *len
 * bytes). Errors: ZT_ERR_DATA for an id outside 0 .. vocab size - 1 (named
 * with its position), ZT_ERR_NOMEM. On error *out is NULL. */
zt_status tokenizer_decode(const struct tokenizer *t, const int32_t *ids, size_t n,
                           unsigned char **out, size_t *len);

/* How dataset_load_with treats what it finds; a zeroed struct is what
 * dataset_load does. */
struct dataset_options {
    /* 1: a binary file found inside a folder is left out and listed in the
     * report; 0: it is an error. A file named directly is never skipped. */
    int skip_binary;
    /* The setting that turns skip_binary on ("data.skip_binary"), named in
     * the error for a binary file in a folder; NULL: none is named. */
    const char *skip_setting;
    /* 1: every input is meant as text (prepare): a ".tok" name means
     * nothing, and a token file is refused by its magic, never read. */
    int text_only;
    /* What text is tokenised with; NULL: the byte tokenizer. Every text
     * file is one document, and a tokenizer's end-of-text id goes between
     * documents (not after the last). */
    const struct tokenizer *tokenizer;
};

/* Skipped files the report names; the rest are only counted. */
#define DATASET_SKIPPED_NAMED 4

/* What dataset_load_with read and left out. A zeroed struct is empty;
 * free with dataset_report_free. */
struct dataset_report {
    size_t n_files;                       /* files read; a token file counts as one */
    size_t n_skipped;                     /* binary files left out (skip_binary) */
    char *skipped[DATASET_SKIPPED_NAMED]; /* the first of them, in reading order; owned */
};

/* Frees the names and leaves *r empty; NULL-safe. */
void dataset_report_free(struct dataset_report *r);

/* Writes "skipped 2 binary files: A, B" to f, naming the first
 * DATASET_SKIPPED_NAMED and counting the rest ("..., D and 3 more"). */
void dataset_report_write_skipped(const struct dataset_report *r, FILE *f);

/* Loads tokens from paths into *out (overwritten, not freed; the caller
 * frees it): a single token file, or any number of text files and folders,
 * each tokenised (opt->tokenizer, bytes by default) and concatenated in the
 * order given, with the tokenizer's end-of-text id between files if it has
 * one. A tokenizer that cannot take a file in pieces (gpt2) reads each
 * file whole before encoding it.
 *
 * A path named directly is meant as a token file when it is a regular file
 * whose name ends in ".tok" or that starts with the token-file magic; it is
 * read with tokfile_read, so a damaged one is refused with what is wrong
 * (never read as text), and among several paths it is an error (after its
 * header is checked, so a damaged one says so). A folder is walked
 * recursively (symbolic links followed) and its regular files are taken in
 * strcmp order of their paths; names starting with '.' and anything that is
 * neither a file nor a folder are skipped. Inside a folder only the magic
 * marks a token file (text files may end in .tok), and one is an error, so
 * that a prepared file left in its own input folder is not read back as
 * text. Every text file is sniffed (sniff_is_binary): a binary one is an
 * error naming it, or, inside a folder with opt->skip_binary, left out.
 *
 * opt may be NULL (defaults); report may be NULL, else it is overwritten
 * (pass an empty one) and the caller frees it, on error too.
 * Errors: ZT_ERR_USAGE (no paths), ZT_ERR_IO ("PATH: no such file or
 * directory", unreadable files), ZT_ERR_DATA ("PATH: folder contains no
 * files", "PATH: folder contains no text files (N binary files skipped)",
 * "PATH: is binary, not text (WHY)", a folder loop, a mixed token file, or
 * the token file's own errors), ZT_ERR_NOMEM. On error *out is empty. */
zt_status dataset_load_with(const char *const *paths, int n_paths,
                            const struct dataset_options *opt, struct token_buffer *out,
                            struct dataset_report *report);

/* dataset_load_with with the default options and no report. */
zt_status dataset_load(const char *const *paths, int n_paths, struct token_buffer *out);

/* dataset_load that also reports how many files it read (*n_files; a token
 * file counts as one); n_files may be NULL. */
zt_status dataset_load_counted(const char *const *paths, int n_paths, struct token_buffer *out,
                               size_t *n_files);

/* Splits off the last `fraction` of `all` (rounded down to whole tokens,
 * at least seq_len + 1 when fraction > 0) as validation into *val (a new
 * copy the caller frees; empty when fraction is 0); `all` keeps the head.
 * With a mask the split is of whole windows (whole examples when each
 * example is a window): the last floor(fraction * W) of the W windows, at
 * least one, go to validation (with their mask), and `all` keeps the
 * first ones and the token after them.
 * Errors: ZT_ERR_CONFIG (fraction outside [0, 1) or seq_len < 1),
 * ZT_ERR_DATA when either part would be shorter than seq_len + 1 tokens
 * ("data: N tokens are fewer than seq_len + 1 = M: not one training
 * window"), ZT_ERR_NOMEM. On error `all` is unchanged and *val empty. */
zt_status dataset_split_tail(struct token_buffer *all, double fraction, int seq_len,
                             struct token_buffer *val);

/* ---- chat templates (chat.c) ----
 *
 * Built-in renderings of a conversation, as Hugging Face's
 * apply_chat_template writes it for each family (the strings are tabled in
 * docs/guide/fine-tuning.md): "llama3" (Llama 3 Instruct), "chatml" (Qwen2
 * Instruct), "llama2" (Llama 2 chat), "mistral" (Mistral 7B Instruct v0.1,
 * v0.2). A Jinja chat_template is never run, only recognised by a marker
 * its family's holds. */
struct chat_template;

/* The template of that name, or NULL. Static. */
const struct chat_template *chat_template_find(const char *name);

/* The name of the family whose markers the Jinja text holds, or NULL (also
 * for a later release that renders otherwise: Llama 3.1's dated header,
 * Qwen2.5's system message, Mistral v0.3's tools). */
const char *chat_template_detect(const char *jinja);

/* The templates' names, ", " between them, into buf[n] (NUL-terminated). */
void chat_template_names(char *buf, size_t n);

const char *chat_template_name(const struct chat_template *tpl);

/* The token that ends the assistant's reply ("<|eot_id|>", "<|im_end|>",
 * "</s>"): where generation stops. Static. */
const char *chat_template_end_of_turn(const struct chat_template *tpl);

/* The template as Jinja text that renders what chat_render_prompt does
 * (for Hugging Face's apply_chat_template, which a model folder's
 * tokenizer_config.json gives it); chat_template_detect names it. Static. */
const char *chat_template_jinja(const struct chat_template *tpl);

/* The conversation `messages` (a JSON array of {"role", "content"}, read
 * as chat_encode reads it but needing no assistant turn, the last being
 * the user's) rendered as apply_chat_template(add_generation_prompt=True)
 * renders it: the template, then the assistant's header without a reply.
 * *text (NUL-terminated, *len bytes) is the caller's to free. Errors:
 * ZT_ERR_CONFIG naming `where` and the message, ZT_ERR_USAGE (the last
 * message is the assistant's), ZT_ERR_NOMEM. */
struct json_value;
zt_status chat_render_prompt(const struct chat_template *tpl, const struct json_value *messages,
                             const char *where, char **text, size_t *len);

/* ZT_OK when each special token the template writes is one token of tok;
 * else ZT_ERR_CONFIG naming `key`, the template and the token. */
zt_status chat_template_check(const struct chat_template *tpl, const struct tokenizer *tok,
                              const char *key);

/* ---- JSONL instruction data (jsonl.c) ----
 *
 * Each non-empty line of a .jsonl file is one example, a JSON object with
 * either string fields "prompt" and "completion", or a string field "text"
 * (other fields are ignored). An example's tokens are its prompt's (mask
 * 0: not counted in the loss), then its completion's and the tokenizer's
 * end-of-text id (mask 1; the byte tokenizer has none: nothing is
 * appended); a "text" example counts all its tokens and the end-of-text.
 * The prompt and the completion are encoded separately and joined.
 * A third form, {"messages": [{"role": "system"|"user"|"assistant",
 * "content": STRING}, ...]}, is a conversation: rendered by the chat
 * template (opt->chat_template, else the one the tokenizer's config names),
 * encoded whole, and counted only on the assistant's turns (each template
 * says which tokens: the reply and its end-of-turn token); no end-of-text
 * is appended, the template writes its own.
 *
 * Layout (seq_len T):
 *   packing   examples concatenated into one stream, windows as for text
 *             (they cross example boundaries, as TRL's packing does);
 *   no packing  example e is window e: its first T tokens (the rest cut
 *             off and counted in the report) at offset e*T, padded to T
 *             with the end-of-text id (0 without one), mask 0; its first
 *             token's mask is 0 too, as it is only ever the target of the
 *             window before; one padding token ends the buffer, so that W =
 *             examples and window e's targets e*T+1 .. e*T+T are its own
 *             tokens and the next example's first (masked). */
struct jsonl_options {
    const struct tokenizer *tokenizer; /* NULL: the byte tokenizer */
    int packing;                       /* 1: one stream; 0: one window per example */
    int seq_len;                       /* T, >= 1 */
    const char *chat_template;         /* for "messages" lines; NULL: the tokenizer's */
};

enum { JSONL_REPORT_NAMED = 3 };

/* What jsonl_load read. */
struct jsonl_report {
    size_t n_files;     /* .jsonl files read */
    size_t n_examples;  /* examples (non-empty lines) */
    size_t n_truncated; /* examples longer than seq_len, cut (no packing) */
    size_t n_untrained; /* of those, examples left without a counted target */
    /* "PATH:LINE" of the first JSONL_REPORT_NAMED truncated examples */
    char truncated_at[JSONL_REPORT_NAMED][512];
};

/* Loads JSONL examples from paths into *out (overwritten, not freed; the
 * caller frees it), with the mask as the layout above says: each path a
 * file (whatever its name) or a folder whose *.jsonl files under it are
 * read in strcmp order of their paths. report may be NULL.
 * Errors: ZT_ERR_USAGE (no paths), ZT_ERR_CONFIG (seq_len < 1), ZT_ERR_IO
 * (a missing or unreadable path), ZT_ERR_DATA naming "PATH:LINE: " for a
 * line that is not JSON, not an object, lacks a field, has a field that is
 * not a string or repeated, or mixes "text" with "prompt"/"completion";
 * ZT_ERR_CONFIG (exit 2) naming "PATH:LINE: " and the field for a
 * "messages" line: a message that is not an object, without a role or
 * content, an unknown role, content not a string, no assistant message,
 * turns a template does not take, no template to render with; and for an
 * unknown chat_template or one whose special tokens the tokenizer lacks;
 * "PATH: no examples" for a file without any, "PATH: folder contains no
 * .jsonl files"; ZT_ERR_NOMEM. On error *out is empty. */
zt_status jsonl_load(const char *const *paths, int n_paths, const struct jsonl_options *opt,
                     struct token_buffer *out, struct jsonl_report *report);

/* Window w of data (seq_len T) into inputs[T] (tokens w*T .. w*T+T-1) and
 * targets[T] (the next T tokens, -1 where the mask says a token is not a
 * target); returns how many targets count. */
int token_window_fill(const struct token_buffer *data, size_t w, int seq_len, int32_t *inputs,
                      int32_t *targets);

struct sampler {
    size_t n_windows;
    int seq_len;
    uint64_t seed;
    int micro, accum, dp_size, dp_rank;
    /* cached permutation of the current epoch */
    uint64_t epoch;
    uint32_t *perm; /* owned, n_windows entries */
};

/* Sets up sampling over a dataset of n_tokens tokens and draws epoch 0's
 * permutation (owned by *s; free with sampler_free). dp_size and dp_rank
 * are the size of the data-parallel group and this rank's index in it (the
 * ranks among which a step's batch is divided; not necessarily the world):
 * a step's G = micro * accum * dp_size windows are cut into dp_size slices.
 * The permutation of epoch e is a Fisher-Yates shuffle of 0..W-1 whose draw
 * for position i (i = W-1 down to 1) is rng_u64(rng_key(seed, "data"),
 * (e << 32) | i) modulo i + 1, so it is a pure function of (seed, e).
 * Errors: ZT_ERR_CONFIG (seq_len, micro, accum, dp_size < 1 or dp_rank
 * outside 0..dp_size-1), ZT_ERR_DATA when the dataset has no full window or
 * more than 2^32 - 1 windows, ZT_ERR_NOMEM. */
zt_status sampler_init(struct sampler *s, size_t n_tokens, int seq_len, uint64_t seed, int micro,
                       int accum, int dp_size, int dp_rank);
/* Frees the permutation; NULL-safe, idempotent. */
void sampler_free(struct sampler *s);

/* The global entry index (what sampler_window takes) of each of the micro
 * rows sampler_fill writes for (step, micro_step), into ids[micro]: what
 * per-sample draws are keyed on, the same whatever the world size. */
void sampler_rows(const struct sampler *s, uint64_t step, int micro_step, uint64_t *ids);

/* Window index of entry `i` of the endless global sequence: entry i is
 * position i % W of epoch i / W's permutation, redrawn into the cache when
 * the epoch changes. */
size_t sampler_window(struct sampler *s, uint64_t i);

/* Fills inputs[micro*seq_len] and targets[micro*seq_len] for this rank's
 * micro step `micro_step` (0..accum-1) of optimizer step `step`: row b is
 * window w = sampler_window(s, step*G + dp_rank*micro*accum +
 * micro_step*micro + b), inputs tokens w*seq_len .. +seq_len-1 and targets the next
 * seq_len (token_window_fill: -1 for a masked target). `data` must be the
 * n_tokens tokens the sampler was made for. Returns how many of this
 * micro batch's targets count. */
int sampler_fill(struct sampler *s, const struct token_buffer *data, uint64_t step, int micro_step,
                 int32_t *inputs, int32_t *targets);

/* How many targets of the whole global step `step` count: over all
 * dp_size ranks and all accum micro steps (G * seq_len without a mask). A
 * pure function of (seed, step) and the data, so every rank computes the
 * same number locally. */
uint64_t sampler_counted(struct sampler *s, const struct token_buffer *data, uint64_t step);

#endif
