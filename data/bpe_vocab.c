/* data/bpe_vocab.c — reading GPT-2's encoder.json and vocab.bpe into a
 * struct bpe; see bpe.h for the files.
 *
 * Both files are untrusted: everything bpe.c later relies on without
 * looking (ids dense and below the vocabulary size, one token per byte,
 * every merge and its result a token, no pair twice) is checked here, and
 * a failure names the file and, in vocab.bpe, the line. The hash index
 * from token bytes to id (struct bpe's) turns the merges' strings into ids.
 */
#include "bpe.h"
#include "data_impl.h"
#include "pretokenize.h"

#include "../common/fileio.h"
#include "../common/json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The largest vocabulary file read: GPT-2's are 1.0 MB and 0.46 MB. */
#define VOCAB_FILE_MAX ((size_t)64 << 20)

#define EOT_TEXT "<|endoftext|>"

struct loader {
    struct bpe *b;
    int16_t byte_of[BPE_ALPHABET_END]; /* the byte a character stands for, -1 none */
    unsigned char *scratch;            /* a token's bytes while it is looked up */
};

void bpe_alphabet_build(int16_t byte_of[BPE_ALPHABET_END])
{
    for (int cp = 0; cp < BPE_ALPHABET_END; cp++)
        byte_of[cp] = -1;
    int next = 0x100;
    for (int byte = 0; byte < 256; byte++) {
        const int printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
                              (byte >= 0xAE && byte <= 0xFF);
        byte_of[printable ? byte : next++] = (int16_t)byte;
    }
}

size_t bpe_alphabet_bytes(const int16_t byte_of[BPE_ALPHABET_END], const unsigned char *s, size_t n,
                          unsigned char *out, uint32_t *bad)
{
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += pretokenize_char(s, n, i, &cp);
        if (cp >= BPE_ALPHABET_END || byte_of[cp] < 0) {
            *bad = cp;
            return SIZE_MAX;
        }
        out[m++] = (unsigned char)byte_of[cp];
    }
    return m;
}

/* ---- encoder.json ---- */

/* Checks that every member of the object is an id below n, once each, and
 * sets order[id] to the member's index. */
static zt_status take_ids(const char *path, const struct json_value *obj, size_t *order)
{
    const size_t n = obj->n;
    for (size_t i = 0; i < n; i++)
        order[i] = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        const struct json_value *v = &obj->items[i];
        if (v->type != JSON_INT)
            return zt_error_set(ZT_ERR_DATA, "%s: token \"%s\": the id must be an integer, got %s",
                                path, obj->keys[i], json_type_name(v->type));
        if (v->negative || v->magnitude >= n)
            return zt_error_set(ZT_ERR_DATA,
                                "%s: token \"%s\": id %s%llu is outside 0 .. %zu (the ids of %zu "
                                "tokens)",
                                path, obj->keys[i], v->negative ? "-" : "",
                                (unsigned long long)v->magnitude, n - 1, n);
        if (order[v->magnitude] != SIZE_MAX)
            return zt_error_set(ZT_ERR_DATA, "%s: tokens \"%s\" and \"%s\" both have id %llu", path,
                                obj->keys[order[v->magnitude]], obj->keys[i],
                                (unsigned long long)v->magnitude);
        order[v->magnitude] = i;
    }
    return ZT_OK;
}

/* Appends token `id`'s bytes (its key in the object) and indexes it. */
static zt_status take_token(struct loader *ld, const char *path, const char *key, int32_t id)
{
    struct bpe *b = ld->b;
    const uint32_t from = b->offsets[id];
    uint32_t bad = 0;
    const size_t n = bpe_alphabet_bytes(ld->byte_of, (const unsigned char *)key, strlen(key),
                                        b->bytes + from, &bad);
    if (n == SIZE_MAX)
        return zt_error_set(ZT_ERR_DATA,
                            "%s: token \"%s\" has U+%04X, not a character of GPT-2's byte "
                            "alphabet",
                            path, key, (unsigned)bad);
    if (n == 0)
        return zt_error_set(ZT_ERR_DATA, "%s: token %d is empty", path, id);
    b->offsets[id + 1] = from + (uint32_t)n;
    int32_t *slot = bpe_index_slot(b, b->bytes + from, n);
    if (*slot >= 0)
        return zt_error_set(ZT_ERR_DATA, "%s: token \"%s\" is given twice (ids %d and %d)", path,
                            key, *slot, id);
    *slot = id;
    return ZT_OK;
}

/* The id of the token with bytes p[0..n), or -1. */
static int32_t token_id(const struct loader *ld, const unsigned char *p, size_t n)
{
    return bpe_token_id(ld->b, p, n);
}

/* The end-of-text token and the token of every single byte. */
static zt_status find_special(struct loader *ld, const char *path)
{
    struct bpe *b = ld->b;
    b->eot = token_id(ld, (const unsigned char *)EOT_TEXT, strlen(EOT_TEXT));
    if (b->eot < 0)
        return zt_error_set(ZT_ERR_DATA, "%s: has no " EOT_TEXT " token", path);
    for (int byte = 0; byte < 256; byte++) {
        const unsigned char c = (unsigned char)byte;
        b->byte_token[byte] = token_id(ld, &c, 1);
        if (b->byte_token[byte] < 0)
            return zt_error_set(ZT_ERR_DATA, "%s: has no token for the byte 0x%02X", path, byte);
    }
    return ZT_OK;
}

/* Builds the token table (bytes by id) and the index from the object. */
static zt_status take_tokens(struct loader *ld, const char *path, const struct json_value *obj)
{
    struct bpe *b = ld->b;
    if (obj->type != JSON_OBJECT || obj->n == 0 || obj->n > INT32_MAX)
        return zt_error_set(
            ZT_ERR_DATA, "%s: expected an object of tokens and their ids, got %s", path,
            obj->type == JSON_OBJECT ? "an empty or oversized object" : json_type_name(obj->type));
    size_t total = 0; /* a character is at least one byte, so the bytes fit */
    for (size_t i = 0; i < obj->n; i++)
        total += strlen(obj->keys[i]);
    b->vocab_size = (uint32_t)obj->n;
    b->offsets = calloc(obj->n + 1, sizeof *b->offsets);
    b->bytes = malloc(total > 0 ? total : 1);
    b->index_mask = bpe_table_size(obj->n) - 1;
    b->index = malloc((b->index_mask + 1) * sizeof *b->index);
    size_t *order = malloc(obj->n * sizeof *order);
    zt_status st = ZT_OK;
    if (!b->offsets || !b->bytes || !b->index || !order || total > UINT32_MAX)
        st =
            zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the table of %zu tokens", path, obj->n);
    if (st == ZT_OK) {
        memset(b->index, 0xFF, (b->index_mask + 1) * sizeof *b->index);
        st = take_ids(path, obj, order);
    }
    for (size_t id = 0; st == ZT_OK && id < obj->n; id++)
        st = take_token(ld, path, obj->keys[order[id]], (int32_t)id);
    free(order);
    if (st == ZT_OK)
        st = find_special(ld, path);
    return st;
}

static zt_status load_encoder(struct loader *ld, const char *path)
{
    char *text;
    size_t len;
    ZT_TRY(zt_read_small_file(path, VOCAB_FILE_MAX, ZT_ERR_DATA, &text, &len));
    const struct json_source src = {path, NULL, ZT_ERR_DATA, 2};
    struct json_value root;
    zt_status st = json_parse(&src, text, len, &root);
    free(text);
    ZT_TRY(st);
    st = take_tokens(ld, path, &root);
    json_free(&root);
    return st;
}

/* ---- vocab.bpe ---- */

/* The line (from 1) that byte `pos` of the text is on. */
static size_t line_of(const char *text, size_t pos)
{
    size_t line = 1;
    for (size_t i = 0; i < pos; i++)
        line += text[i] == '\n';
    return line;
}

/* The id of the token written s[0..n) on `line`. */
static zt_status merge_token(struct loader *ld, const char *path, size_t line, const char *s,
                             size_t n, int32_t *id)
{
    uint32_t bad = 0;
    const size_t m =
        bpe_alphabet_bytes(ld->byte_of, (const unsigned char *)s, n, ld->scratch, &bad);
    if (m == SIZE_MAX)
        return zt_error_set(ZT_ERR_DATA,
                            "%s:%zu: token \"%.*s\" has U+%04X, not a character of GPT-2's byte "
                            "alphabet",
                            path, line, (int)n, s, (unsigned)bad);
    *id = token_id(ld, ld->scratch, m);
    if (*id < 0)
        return zt_error_set(ZT_ERR_DATA, "%s:%zu: token \"%.*s\" is not in encoder.json", path,
                            line, (int)n, s);
    return ZT_OK;
}

/* One merge line s[0..n) ("A B") of rank `rank`, on line rank + 2. */
static zt_status take_merge(struct loader *ld, const char *path, const char *s, size_t n,
                            uint32_t rank)
{
    const size_t line = (size_t)rank + 2;
    const char *space = memchr(s, ' ', n);
    const size_t a = space ? (size_t)(space - s) : 0;
    if (!space || a == 0 || a + 1 == n || memchr(space + 1, ' ', n - a - 1))
        return zt_error_set(ZT_ERR_DATA,
                            "%s:%zu: expected a merge, two tokens separated by one space, got "
                            "\"%.*s\"",
                            path, line, (int)n, s);
    int32_t left, right, merged;
    ZT_TRY(merge_token(ld, path, line, s, a, &left));
    ZT_TRY(merge_token(ld, path, line, space + 1, n - a - 1, &right));
    const struct bpe *b = ld->b;
    const uint32_t la = b->offsets[left + 1] - b->offsets[left];
    const uint32_t lb = b->offsets[right + 1] - b->offsets[right];
    memcpy(ld->scratch, b->bytes + b->offsets[left], la);
    memcpy(ld->scratch + la, b->bytes + b->offsets[right], lb);
    merged = token_id(ld, ld->scratch, la + lb);
    if (merged < 0)
        return zt_error_set(ZT_ERR_DATA,
                            "%s:%zu: the merge of \"%.*s\" makes a token that is not in "
                            "encoder.json",
                            path, line, (int)n, s);
    struct bpe_merge *slot = bpe_merge_slot(b, left, right);
    if (slot->rank != BPE_NO_RANK)
        return zt_error_set(ZT_ERR_DATA, "%s:%zu: the merge \"%.*s\" is already on line %lu", path,
                            line, (int)n, s, (unsigned long)slot->rank + 2);
    *slot = (struct bpe_merge){(uint64_t)(uint32_t)left << 32 | (uint32_t)right, rank, merged};
    return ZT_OK;
}

/* Checks the file as a whole and sizes the merge table and the scratch
 * buffer (the longest line). */
static zt_status scan_merges(struct loader *ld, const char *path, const char *text, size_t len)
{
    const size_t bad = json_utf8_check(text, len);
    if (bad < len)
        return zt_error_set(ZT_ERR_DATA, "%s:%zu: not valid UTF-8 (byte %zu of the file)", path,
                            line_of(text, bad), bad);
    if (len == 0 || text[len - 1] != '\n')
        return zt_error_set(ZT_ERR_DATA, "%s: does not end with a newline (is it cut short?)",
                            path);
    if (text[0] != '#')
        return zt_error_set(ZT_ERR_DATA,
                            "%s:1: expected the version comment (\"#version: 0.2\") first", path);
    size_t lines = 0, longest = 0;
    for (size_t i = 0, start = 0; i < len; i++)
        if (text[i] == '\n') {
            longest = i - start > longest ? i - start : longest;
            start = i + 1;
            lines++;
        }
    if (lines - 1 >= BPE_NO_RANK)
        return zt_error_set(ZT_ERR_DATA, "%s: too many merges (%zu)", path, lines - 1);
    struct bpe *b = ld->b;
    b->n_merges = (uint32_t)(lines - 1);
    b->merge_mask = bpe_table_size(b->n_merges) - 1;
    b->merges = malloc((b->merge_mask + 1) * sizeof *b->merges);
    ld->scratch = malloc(longest + 1);
    if (!b->merges || !ld->scratch)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the table of %u merges", path,
                            (unsigned)b->n_merges);
    for (size_t i = 0; i <= b->merge_mask; i++)
        b->merges[i] = (struct bpe_merge){0, BPE_NO_RANK, -1};
    return ZT_OK;
}

static zt_status load_merges(struct loader *ld, const char *path)
{
    char *text;
    size_t len;
    ZT_TRY(zt_read_small_file(path, VOCAB_FILE_MAX, ZT_ERR_DATA, &text, &len));
    zt_status st = scan_merges(ld, path, text, len);
    const char *line = st == ZT_OK ? (const char *)memchr(text, '\n', len) + 1 : NULL;
    for (uint32_t rank = 0; st == ZT_OK && line < text + len; rank++) {
        const char *end = memchr(line, '\n', (size_t)(text + len - line));
        st = take_merge(ld, path, line, (size_t)(end - line), rank);
        line = end + 1;
    }
    free(text);
    return st;
}

/* ---- the folder ---- */

#define GPT2_HINT "scripts/gpt2_vocab.sh fetches GPT-2's encoder.json and vocab.bpe"

static zt_status load_files(struct loader *ld, const char *dir, const char *enc, const char *bpe)
{
    ZT_TRY(data_check_present(dir, "folder", ZT_ERR_IO, GPT2_HINT));
    ZT_TRY(data_check_present(enc, "file", ZT_ERR_IO, GPT2_HINT));
    ZT_TRY(data_check_present(bpe, "file", ZT_ERR_IO, GPT2_HINT));
    ZT_TRY(load_encoder(ld, enc));
    return load_merges(ld, bpe);
}

zt_status bpe_load(const char *dir, struct bpe **out)
{
    *out = NULL;
    struct loader ld = {0};
    bpe_alphabet_build(ld.byte_of);
    ld.b = calloc(1, sizeof *ld.b);
    if (ld.b)
        ld.b->rounds = 1;
    /* OpenAI's names, else Hugging Face's for the same two files */
    char *enc = data_join_path(dir, "encoder.json"), *bpe = data_join_path(dir, "vocab.bpe");
    struct stat sb;
    if (enc && bpe && stat(enc, &sb) != 0) {
        char *hf_enc = data_join_path(dir, "vocab.json"),
             *hf_bpe = data_join_path(dir, "merges.txt");
        if (hf_enc && hf_bpe && stat(hf_enc, &sb) == 0) {
            free(enc), free(bpe);
            enc = hf_enc, bpe = hf_bpe;
        } else {
            free(hf_enc), free(hf_bpe);
        }
    }
    zt_status st = ld.b && enc && bpe
                       ? load_files(&ld, dir, enc, bpe)
                       : zt_error_set(ZT_ERR_NOMEM, "%s: out of memory loading the tokenizer", dir);
    free(enc);
    free(bpe);
    free(ld.scratch);
    if (st != ZT_OK) {
        bpe_free(ld.b);
        return st;
    }
    *out = ld.b;
    return ZT_OK;
}
