/* data/bpe_tokenizer.c — building a struct bpe_tokenizer, encoding and
 * decoding with it; see bpe_tokenizer.h. The two loaders (hf_tokenizer.c,
 * tiktoken.c) only read their files and call the builders here, which keep
 * the invariants the encoder relies on.
 */
#include "bpe_tokenizer.h"
#include "nfc.h"
#include "data_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "▁", U+2581, which a character vocabulary writes for a space. */
static const unsigned char METASPACE[3] = {0xE2, 0x96, 0x81};

zt_status bpe_tokenizer_new(struct bpe_tokenizer **out)
{
    *out = NULL;
    struct bpe_tokenizer *t = calloc(1, sizeof *t);
    if (t)
        t->b = calloc(1, sizeof *t->b);
    if (!t || !t->b) {
        free(t);
        return zt_error_set(ZT_ERR_NOMEM, "tokenizer: out of memory");
    }
    t->name = "hf";
    t->b->eot = -1;
    t->bos = t->eos = t->space_id = t->unk_id = -1;
    for (int i = 0; i < 256; i++)
        t->byte_id[i] = t->b->byte_token[i] = -1;
    *out = t;
    return ZT_OK;
}

void bpe_tokenizer_free(struct bpe_tokenizer *t)
{
    if (!t)
        return;
    bpe_free(t->b);
    free(t->dec_offsets);
    free(t->dec_bytes);
    free(t->added);
    free(t->added_bytes);
    free(t->chat_template);
    free(t);
}

zt_status bpe_tokenizer_reserve(struct bpe_tokenizer *t, const char *path, uint32_t vocab, size_t n,
                                size_t bytes)
{
    struct bpe *b = t->b;
    b->vocab_size = vocab;
    b->offsets = calloc((size_t)vocab + 1, sizeof *b->offsets);
    b->bytes = malloc(bytes > 0 ? bytes : 1);
    b->index_mask = bpe_table_size(n) - 1;
    b->index = malloc((b->index_mask + 1) * sizeof *b->index);
    if (!b->offsets || !b->bytes || !b->index || bytes > UINT32_MAX)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the table of %zu tokens", path, n);
    memset(b->index, 0xFF, (b->index_mask + 1) * sizeof *b->index);
    return ZT_OK;
}

zt_status bpe_tokenizer_reserve_merges(struct bpe_tokenizer *t, const char *path, size_t merges)
{
    struct bpe *b = t->b;
    b->merge_mask = bpe_table_size(merges) - 1;
    b->merges = malloc((b->merge_mask + 1) * sizeof *b->merges);
    if (!b->merges)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the table of %zu merges", path,
                            merges);
    for (size_t i = 0; i <= b->merge_mask; i++)
        b->merges[i] = (struct bpe_merge){0, BPE_NO_RANK, -1};
    return ZT_OK;
}

int32_t bpe_tokenizer_put_token(struct bpe_tokenizer *t, int32_t id, const unsigned char *p,
                                size_t n)
{
    struct bpe *b = t->b;
    int32_t *slot = bpe_index_slot(b, p, n);
    if (*slot >= 0)
        return *slot;
    /* offsets[next_id] is the end of the bytes so far; ids skipped are
     * empty. */
    for (uint32_t i = t->next_id + 1; i <= (uint32_t)id; i++)
        b->offsets[i] = b->offsets[t->next_id];
    memcpy(b->bytes + b->offsets[id], p, n);
    b->offsets[id + 1] = b->offsets[id] + (uint32_t)n;
    t->next_id = (uint32_t)id + 1;
    *slot = id;
    return -1;
}

void bpe_tokenizer_put_merge(struct bpe_tokenizer *t, int32_t left, int32_t right, int32_t merged,
                             uint32_t rank)
{
    struct bpe_merge *slot = bpe_merge_slot(t->b, left, right);
    t->b->n_merges += slot->rank == BPE_NO_RANK;
    *slot = (struct bpe_merge){(uint64_t)(uint32_t)left << 32 | (uint32_t)right, rank, merged};
}

/* The ids after the last one put are empty. */
static void close_offsets(struct bpe_tokenizer *t)
{
    struct bpe *b = t->b;
    for (uint32_t i = t->next_id + 1; i <= b->vocab_size; i++)
        b->offsets[i] = b->offsets[t->next_id];
}

/* The bytes a character vocabulary's token decodes to, into out (room for
 * n): "▁" as a space, "<0xNN>" as the byte. Returns their count. */
static size_t char_token_bytes(const unsigned char *p, size_t n, unsigned char *out)
{
    unsigned int byte;
    char hex[7];
    if (n == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && p[5] == '>') {
        memcpy(hex, p, 6);
        hex[6] = '\0';
        if (sscanf(hex, "<0x%2X>", &byte) == 1) {
            out[0] = (unsigned char)byte;
            return 1;
        }
    }
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && memcmp(p + i, METASPACE, 3) == 0) {
            out[m++] = ' ';
            i += 3;
        } else {
            out[m++] = p[i++];
        }
    }
    return m;
}

/* An added token beside its text and its place in the file, while sorting:
 * qsort's comparison gets no context argument in C11. */
struct added_sort {
    const unsigned char *text;
    size_t order;
    struct bpe_added a;
};

/* By text (memcmp, then length), then by place in the file, so that of two
 * added tokens with one text the first listed is the one found. */
static int compare_added(const void *x, const void *y)
{
    const struct added_sort *p = x, *q = y;
    const uint32_t n = p->a.len < q->a.len ? p->a.len : q->a.len;
    const int c = memcmp(p->text, q->text, n);
    if (c != 0)
        return c;
    if (p->a.len != q->a.len)
        return (p->a.len > q->a.len) - (p->a.len < q->a.len);
    return (p->order > q->order) - (p->order < q->order);
}

/* Sorts t's added tokens by compare_added; a file may list many thousands. */
static zt_status sort_added(struct bpe_tokenizer *t, const char *path)
{
    struct added_sort *s = malloc((t->n_added > 0 ? t->n_added : 1) * sizeof *s);
    if (!s)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot sort %zu added tokens", path, t->n_added);
    for (size_t i = 0; i < t->n_added; i++)
        s[i] = (struct added_sort){t->added_bytes + t->added[i].offset, i, t->added[i]};
    qsort(s, t->n_added, sizeof *s, compare_added);
    for (size_t i = 0; i < t->n_added; i++)
        t->added[i] = s[i].a;
    free(s);
    return ZT_OK;
}

static zt_status take_added(struct bpe_tokenizer *t, const char *path,
                            const unsigned char *const *texts, const size_t *lens,
                            const int32_t *ids, size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (lens[i] == 0)
            return zt_error_set(ZT_ERR_CONFIG, "%s: added token %d is empty", path, ids[i]);
        total += lens[i];
    }
    t->added = malloc((n > 0 ? n : 1) * sizeof *t->added);
    t->added_bytes = malloc(total > 0 ? total : 1);
    if (!t->added || !t->added_bytes || total > UINT32_MAX)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate %zu added tokens", path, n);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(t->added_bytes + at, texts[i], lens[i]);
        t->added[i] = (struct bpe_added){(uint32_t)at, (uint32_t)lens[i], ids[i]};
        at += lens[i];
        if ((uint32_t)ids[i] >= t->vocab_size)
            t->vocab_size = (uint32_t)ids[i] + 1;
    }
    t->n_added = n;
    ZT_TRY(sort_added(t, path));
    for (size_t i = n; i-- > 0;) {
        const unsigned char first = t->added_bytes[t->added[i].offset];
        t->added_first[first]++;
        t->added_start[first] = (uint32_t)i;
    }
    return ZT_OK;
}

/* The table of decoded bytes of every id. */
static zt_status build_decoding(struct bpe_tokenizer *t, const char *path)
{
    const struct bpe *b = t->b;
    size_t total = (size_t)b->offsets[b->vocab_size];
    for (size_t i = 0; i < t->n_added; i++)
        total += t->added[i].len;
    t->dec_offsets = calloc((size_t)t->vocab_size + 1, sizeof *t->dec_offsets);
    t->dec_bytes = malloc(total > 0 ? total : 1);
    const struct bpe_added **by_id = calloc((size_t)t->vocab_size, sizeof *by_id);
    if (!t->dec_offsets || !t->dec_bytes || !by_id || total > UINT32_MAX) {
        free(by_id);
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the decoding table", path);
    }
    for (size_t i = 0; i < t->n_added; i++)
        by_id[t->added[i].id] = &t->added[i];
    uint32_t at = 0;
    for (uint32_t id = 0; id < t->vocab_size; id++) {
        unsigned char *dst = t->dec_bytes + at;
        size_t m = 0;
        if (by_id[id]) {
            m = by_id[id]->len;
            memcpy(dst, t->added_bytes + by_id[id]->offset, m);
        } else if (id < b->vocab_size) {
            const unsigned char *p = b->bytes + b->offsets[id];
            const size_t n = b->offsets[id + 1] - b->offsets[id];
            if (t->symbols == BPE_SYMBOLS_CHARS) {
                m = char_token_bytes(p, n, dst);
            } else {
                memcpy(dst, p, n);
                m = n;
            }
        }
        at += (uint32_t)m;
        t->dec_offsets[id + 1] = at;
    }
    free(by_id);
    return ZT_OK;
}

/* The tokens of single bytes (byte-level) or of <0xNN>, "▁" (characters). */
static zt_status find_byte_tokens(struct bpe_tokenizer *t, const char *path)
{
    struct bpe *b = t->b;
    for (int byte = 0; byte < 256; byte++) {
        if (t->symbols == BPE_SYMBOLS_BYTES) {
            const unsigned char c = (unsigned char)byte;
            b->byte_token[byte] = bpe_token_id(b, &c, 1);
            if (b->byte_token[byte] < 0)
                return zt_error_set(ZT_ERR_CONFIG,
                                    "%s: has no token for the byte 0x%02X (a byte-level "
                                    "vocabulary has one for every byte)",
                                    path, byte);
        } else {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", byte);
            t->byte_id[byte] = bpe_token_id(b, (const unsigned char *)name, 6);
        }
    }
    if (t->symbols == BPE_SYMBOLS_CHARS)
        t->space_id = bpe_token_id(b, METASPACE, 3);
    return ZT_OK;
}

/* Whether no model token has a "▁" after another character: then no merge
 * crosses from a word into the "▁" that starts the next, and a text may be
 * merged word by word, with the same ids, in time linear in the words. */
static int words_split(const struct bpe *b)
{
    for (uint32_t id = 0; id < b->vocab_size; id++) {
        const unsigned char *p = b->bytes + b->offsets[id];
        const size_t n = b->offsets[id + 1] - b->offsets[id];
        for (size_t i = 1; i + 3 <= n; i++)
            if (memcmp(p + i, METASPACE, 3) == 0 && (i < 3 || memcmp(p + i - 3, METASPACE, 3) != 0))
                return 0;
    }
    return 1;
}

zt_status bpe_tokenizer_finish(struct bpe_tokenizer *t, const char *path,
                               const unsigned char *const *texts, const size_t *lens,
                               const int32_t *ids, size_t n)
{
    close_offsets(t);
    t->vocab_size = t->b->vocab_size;
    ZT_TRY(take_added(t, path, texts, lens, ids, n));
    ZT_TRY(find_byte_tokens(t, path));
    t->split_words = t->symbols == BPE_SYMBOLS_CHARS && words_split(t->b);
    return build_decoding(t, path);
}

int32_t bpe_tokenizer_find(const struct bpe_tokenizer *t, const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && memcmp(t->added_bytes + t->added[i].offset, s, n) == 0)
            return t->added[i].id;
    return n > 0 ? bpe_token_id(t->b, s, n) : -1;
}

/* ---- encoding ---- */

/* The longest added token that starts at text[i], or NULL. */
static const struct bpe_added *added_at(const struct bpe_tokenizer *t, const unsigned char *text,
                                        size_t n, size_t i)
{
    const uint32_t count = t->added_first[text[i]];
    const struct bpe_added *best = NULL;
    for (uint32_t k = t->added_start[text[i]]; k < t->added_start[text[i]] + count; k++) {
        const struct bpe_added *a = &t->added[k];
        if (a->len <= n - i && memcmp(t->added_bytes + a->offset, text + i, a->len) == 0 &&
            (!best || a->len > best->len))
            best = a;
    }
    return best;
}

/* A byte-level part: its pieces, each merged. */
static zt_status encode_bytes(const struct bpe_tokenizer *t, struct bpe_work *w,
                              const unsigned char *text, size_t n, struct token_buffer *out)
{
    for (size_t pos = 0; pos < n;) {
        const size_t k = t->pretokenize ? t->pretokenize(text, n, pos) : n - pos;
        ZT_TRY(data_buffer_reserve(out, k, "tokenizer"));
        ZT_TRY(bpe_encode_piece(t->b, w, text + pos, k, out));
        pos += k;
    }
    return ZT_OK;
}

/* Appends the symbols of one character c[0..len) to w->ids[*k ..]. */
static zt_status char_symbols(const struct bpe_tokenizer *t, struct bpe_work *w,
                              const unsigned char *c, size_t len, size_t *k)
{
    if (len == 1 && c[0] == ' ') {
        c = METASPACE;
        len = 3;
    }
    const int32_t id = bpe_token_id(t->b, c, len);
    if (id >= 0) {
        w->ids[(*k)++] = id;
        return ZT_OK;
    }
    for (size_t i = 0; t->byte_fallback && i < len; i++)
        if (t->byte_id[c[i]] < 0)
            break;
        else if (i + 1 == len) {
            for (size_t j = 0; j < len; j++)
                w->ids[(*k)++] = t->byte_id[c[j]];
            return ZT_OK;
        }
    uint32_t cp;
    pretokenize_char(c, len, 0, &cp);
    if (t->unk_id < 0)
        return zt_error_set(ZT_ERR_DATA,
                            "tokenizer %s: the character U+%04X has no token, and the vocabulary "
                            "has no unknown token",
                            t->name, (unsigned)cp);
    if (!(t->fuse_unk && *k > 0 && w->ids[*k - 1] == t->unk_id))
        w->ids[(*k)++] = t->unk_id;
    return ZT_OK;
}

/* Merges the k symbols gathered in w->ids and appends them. */
static void flush_chars(const struct bpe_tokenizer *t, struct bpe_work *w, size_t *k,
                        struct token_buffer *out)
{
    if (*k > 0)
        bpe_merge_ids(t->b, w, *k, out);
    *k = 0;
}

/* A part of a character vocabulary, text[0..n) at offset `at` of the
 * whole: "▁" first as the vocabulary says, then its characters. */
static zt_status encode_chars(const struct bpe_tokenizer *t, struct bpe_work *w,
                              const unsigned char *text, size_t n, size_t at,
                              struct token_buffer *out)
{
    const int starts_with_space = text[0] == ' ' || (n >= 3 && memcmp(text, METASPACE, 3) == 0);
    const int prepend =
        (t->prepend == BPE_PREPEND_ALWAYS || (t->prepend == BPE_PREPEND_FIRST && at == 0)) &&
        !(t->metaspace && starts_with_space);
    ZT_TRY(bpe_work_reserve(w, 4 * n + 3));
    ZT_TRY(data_buffer_reserve(out, 4 * n + 3, "tokenizer"));
    size_t k = 0;
    if (prepend)
        ZT_TRY(char_symbols(t, w, (const unsigned char *)" ", 1, &k));
    int after_space = prepend;
    for (size_t pos = 0; pos < n;) {
        uint32_t cp;
        const size_t len = pretokenize_char(text, n, pos, &cp);
        const int space = cp == ' ' || cp == 0x2581;
        if (space && (t->split_metaspace || (t->split_words && !after_space)))
            flush_chars(t, w, &k, out);
        ZT_TRY(char_symbols(t, w, text + pos, len, &k));
        after_space = space;
        pos += len;
    }
    flush_chars(t, w, &k, out);
    return ZT_OK;
}

static zt_status encode_normal_part(const struct bpe_tokenizer *t, struct bpe_work *w,
                                    const unsigned char *text, size_t n, size_t at,
                                    struct token_buffer *out)
{
    if (t->symbols == BPE_SYMBOLS_BYTES)
        return encode_bytes(t, w, text, n, out);
    return encode_chars(t, w, text, n, at, out);
}

/* text[from..to), between added tokens (which are matched on the text as
 * given, as Hugging Face's are), normalized as the tokenizer says. */
static zt_status encode_part(const struct bpe_tokenizer *t, struct bpe_work *w,
                             const unsigned char *text, size_t from, size_t to,
                             struct token_buffer *out)
{
    if (from == to)
        return ZT_OK;
    unsigned char *normal = NULL;
    size_t n = 0;
    if (t->nfc)
        ZT_TRY(nfc_normalize(text + from, to - from, &normal, &n));
    const zt_status st = normal ? encode_normal_part(t, w, normal, n, from, out)
                                : encode_normal_part(t, w, text + from, to - from, from, out);
    free(normal);
    return st;
}

zt_status bpe_tokenizer_encode(const struct bpe_tokenizer *t, const unsigned char *text, size_t n,
                               struct token_buffer *out)
{
    struct bpe_work w = {0};
    zt_status st = ZT_OK;
    size_t from = 0;
    for (size_t i = 0; st == ZT_OK && i <= n;) {
        const struct bpe_added *a = i < n ? added_at(t, text, n, i) : NULL;
        if (i < n && !a) {
            i++;
            continue;
        }
        st = encode_part(t, &w, text, from, i, out);
        if (!a)
            break;
        if (st == ZT_OK)
            st = data_buffer_reserve(out, 1, "tokenizer");
        if (st == ZT_OK)
            out->tokens[out->n++] = a->id;
        i += a->len;
        from = i;
    }
    bpe_work_free(&w);
    return st;
}

zt_status bpe_tokenizer_decode(const struct bpe_tokenizer *t, const int32_t *ids, size_t n,
                               unsigned char **out, size_t *len)
{
    const char *name = t->name;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t size = t->dec_offsets[ids[i] + 1] - t->dec_offsets[ids[i]];
        if (size == 0)
            return zt_error_set(ZT_ERR_DATA, "tokenizer %s: id %d at position %zu names no token",
                                name, ids[i], i);
        total += size;
    }
    unsigned char *p = malloc(total > 0 ? total : 1);
    if (!p)
        return zt_error_set(ZT_ERR_NOMEM, "tokenizer %s: cannot allocate %zu decoded bytes", name,
                            total);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t from = t->dec_offsets[ids[i]], to = t->dec_offsets[ids[i] + 1];
        memcpy(p + at, t->dec_bytes + from, to - from);
        at += to - from;
    }
    if (t->strip_leading_space && total > 0 && p[0] == ' ')
        memmove(p, p + 1, --total);
    *out = p;
    *len = total;
    return ZT_OK;
}
