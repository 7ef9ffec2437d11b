/* data/tiktoken.c — tiktoken's rank files (cl100k_base, o200k_base) read
 * into a struct bpe_tokenizer; see bpe_tokenizer.h.
 *
 * A rank file lists tokens only: "BASE64 RANK" a line, ranks 0, 1, ... in
 * order, the rank being the id. tiktoken merges, at each step, the adjacent
 * pair whose concatenation is the token of lowest rank; so every split of a
 * token into two tokens is a merge whose rank is the whole token's, and the
 * merge table is derived here once. A piece that is a token is that token
 * without merging (tiktoken looks it up first). The pattern and the special
 * tokens are not in the file: tiktoken's code carries them, and so does the
 * table below.
 */
#include "bpe_tokenizer.h"
#include "data_impl.h"

#include "../common/fileio.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define RANK_FILE_MAX ((size_t)256 << 20)

static const char *const cl100k_texts[] = {"<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>",
                                           "<|fim_suffix|>", "<|endofprompt|>"};
static const int32_t cl100k_ids[] = {100257, 100258, 100259, 100260, 100276};
static const char *const o200k_texts[] = {"<|endoftext|>", "<|endofprompt|>"};
static const int32_t o200k_ids[] = {199999, 200018};

static const struct tiktoken_encoding encodings[] = {
    {"cl100k", "cl100k_base.tiktoken", pretokenize_next_llama3, cl100k_texts, cl100k_ids, 5,
     100257},
    {"o200k", "o200k_base.tiktoken", pretokenize_next_o200k, o200k_texts, o200k_ids, 2, 199999},
};

const struct tiktoken_encoding *tiktoken_encoding(const char *name)
{
    for (size_t i = 0; i < sizeof encodings / sizeof encodings[0]; i++)
        if (strcmp(encodings[i].name, name) == 0)
            return &encodings[i];
    return NULL;
}

/* The value of a base64 character, or -1. */
static int base64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Decodes s[0..n) (padded base64) into out (room for n); returns the byte
 * count, or SIZE_MAX when it is not base64. */
static size_t base64_decode(const char *s, size_t n, unsigned char *out)
{
    if (n == 0 || n % 4 != 0)
        return SIZE_MAX;
    size_t m = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        for (int k = 0; k < 4; k++) {
            const int last = i + 4 == n;
            v[k] = s[i + k] == '=' && last && k >= 2 ? 0 : base64_value((unsigned char)s[i + k]);
            if (v[k] < 0)
                return SIZE_MAX;
        }
        const unsigned bits =
            (unsigned)v[0] << 18 | (unsigned)v[1] << 12 | (unsigned)v[2] << 6 | (unsigned)v[3];
        out[m++] = (unsigned char)(bits >> 16);
        if (s[i + 2] != '=')
            out[m++] = (unsigned char)(bits >> 8);
        if (s[i + 3] != '=')
            out[m++] = (unsigned char)bits;
        if (s[i + 2] == '=' && s[i + 3] != '=')
            return SIZE_MAX;
    }
    return m;
}

/* Counts the lines and checks that the file ends with a newline. */
static zt_status scan_lines(const char *path, const char *text, size_t len, size_t *lines)
{
    if (len == 0 || text[len - 1] != '\n')
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: empty or does not end with a newline (is it cut "
                            "short?)",
                            path);
    *lines = 0;
    for (size_t i = 0; i < len; i++)
        *lines += text[i] == '\n';
    if (*lines >= INT32_MAX / 2)
        return zt_error_set(ZT_ERR_CONFIG, "%s: too many tokens (%zu)", path, *lines);
    return ZT_OK;
}

/* Line `rank` + 1, s[0..n): "BASE64 RANK", the token put as id `rank`. */
static zt_status take_line(struct bpe_tokenizer *t, const char *path, const char *s, size_t n,
                           uint32_t rank, unsigned char *scratch)
{
    const char *space = memchr(s, ' ', n);
    const size_t line = (size_t)rank + 1;
    if (!space)
        return zt_error_set(ZT_ERR_CONFIG, "%s:%zu: expected \"BASE64 RANK\"", path, line);
    char *end;
    const unsigned long long r = strtoull(space + 1, &end, 10);
    if (end != s + n || space + 1 == end || r != rank)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s:%zu: expected rank %u after the token (ranks "
                            "count up from 0, one a line)",
                            path, line, (unsigned)rank);
    const size_t m = base64_decode(s, (size_t)(space - s), scratch);
    if (m == SIZE_MAX || m == 0)
        return zt_error_set(ZT_ERR_CONFIG, "%s:%zu: the token is not base64", path, line);
    const int32_t twin = bpe_tokenizer_put_token(t, (int32_t)rank, scratch, m);
    if (twin >= 0)
        return zt_error_set(ZT_ERR_CONFIG, "%s:%zu: the token of rank %d again", path, line, twin);
    return ZT_OK;
}

/* Every split of every token into two tokens, as a merge of its rank; with
 * `put` 0 only counted. */
static size_t derive_merges(struct bpe_tokenizer *t, int put)
{
    const struct bpe *b = t->b;
    size_t count = 0;
    for (uint32_t id = 0; id < b->vocab_size; id++) {
        const unsigned char *p = b->bytes + b->offsets[id];
        const size_t n = b->offsets[id + 1] - b->offsets[id];
        for (size_t i = 1; i < n; i++) {
            const int32_t left = bpe_token_id(b, p, i), right = bpe_token_id(b, p + i, n - i);
            if (left < 0 || right < 0)
                continue;
            count++;
            if (put)
                bpe_tokenizer_put_merge(t, left, right, (int32_t)id, id);
        }
    }
    return count;
}

static zt_status take_ranks(struct bpe_tokenizer *t, const char *path, const char *text, size_t len)
{
    size_t lines = 0;
    ZT_TRY(scan_lines(path, text, len, &lines));
    ZT_TRY(bpe_tokenizer_reserve(t, path, (uint32_t)lines, lines, len));
    unsigned char *scratch = malloc(len);
    if (!scratch)
        return zt_error_set(ZT_ERR_NOMEM, "%s: out of memory", path);
    zt_status st = ZT_OK;
    const char *line = text;
    for (uint32_t rank = 0; st == ZT_OK && line < text + len; rank++) {
        const char *end = memchr(line, '\n', (size_t)(text + len - line));
        st = take_line(t, path, line, (size_t)(end - line), rank, scratch);
        line = end + 1;
    }
    free(scratch);
    ZT_TRY(st);
    ZT_TRY(bpe_tokenizer_reserve_merges(t, path, derive_merges(t, 0)));
    derive_merges(t, 1);
    return ZT_OK;
}

static zt_status load(struct bpe_tokenizer *t, const char *dir, const char *path,
                      const struct tiktoken_encoding *enc)
{
    struct stat sb;
    if (stat(dir, &sb) != 0 || stat(path, &sb) != 0) {
        if (errno == ENOENT)
            return zt_error_set(ZT_ERR_CONFIG,
                                "%s: no such file (scripts/tokenizers.sh %s fetches it)", path,
                                enc->name);
    }
    char *text;
    size_t len;
    ZT_TRY(zt_read_small_file(path, RANK_FILE_MAX, ZT_ERR_CONFIG, &text, &len));
    zt_status st = take_ranks(t, path, text, len);
    free(text);
    ZT_TRY(st);
    /* A rank that is a special token's id would decode as that token. */
    for (size_t i = 0; i < enc->n_specials; i++)
        if ((uint32_t)enc->special_ids[i] < t->b->vocab_size)
            return zt_error_set(ZT_ERR_CONFIG,
                                "%s: %u ranks, but %s's %s has id %d: not %s's rank file", path,
                                (unsigned)t->b->vocab_size, enc->name, enc->special_texts[i],
                                enc->special_ids[i], enc->name);
    t->name = enc->name;
    t->symbols = BPE_SYMBOLS_BYTES;
    t->pretokenize = enc->rule;
    t->b->whole_pieces = 1;
    size_t lens[8];
    for (size_t i = 0; i < enc->n_specials; i++)
        lens[i] = strlen(enc->special_texts[i]);
    ZT_TRY(bpe_tokenizer_finish(t, path, (const unsigned char *const *)enc->special_texts, lens,
                                enc->special_ids, enc->n_specials));
    t->eos = enc->eot;
    return ZT_OK;
}

zt_status tiktoken_load(const char *dir, const struct tiktoken_encoding *enc,
                        struct bpe_tokenizer **out)
{
    *out = NULL;
    char *path = data_join_path(dir, enc->file);
    struct bpe_tokenizer *t = NULL;
    zt_status st =
        path ? bpe_tokenizer_new(&t) : zt_error_set(ZT_ERR_NOMEM, "%s: out of memory", dir);
    if (st == ZT_OK)
        st = load(t, dir, path, enc);
    free(path);
    if (st != ZT_OK) {
        bpe_tokenizer_free(t);
        return st;
    }
    *out = t;
    return ZT_OK;
}
