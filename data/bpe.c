/* data/bpe.c — BPE merges over pre-tokenised pieces, and decoding; see
 * bpe.h (GPT-2's vocabulary files are read in bpe_vocab.c).
 *
 * A piece of k symbols gets a doubly linked list over an array, so a
 * symbol's index is its position in the piece, and a heap of candidates,
 * each a 64-bit key rank << 32 | position: the heap's order is then exactly
 * (rank, position). The arrays live in a workspace that one encoding call
 * grows to its longest piece and frees at the end.
 */
#include "bpe.h"
#include "data_impl.h"
#include "pretokenize.h"

#include <stdlib.h>
#include <string.h>

/* MurmurHash3's 64-bit finaliser: every bit of both ids reaches the low
 * bits the table's mask keeps. */
static size_t pair_hash(uint64_t pair)
{
    pair ^= pair >> 33;
    pair *= 0xFF51AFD7ED558CCDULL;
    pair ^= pair >> 33;
    pair *= 0xC4CEB9FE1A85EC53ULL;
    pair ^= pair >> 33;
    return (size_t)pair;
}

struct bpe_merge *bpe_merge_slot(const struct bpe *b, int32_t left, int32_t right)
{
    const uint64_t pair = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (size_t i = pair_hash(pair) & b->merge_mask;; i = (i + 1) & b->merge_mask) {
        struct bpe_merge *m = &b->merges[i];
        if (m->rank == BPE_NO_RANK || m->pair == pair)
            return m;
    }
}

size_t bpe_table_size(size_t n)
{
    size_t size = 16;
    while (size < 2 * n)
        size *= 2;
    return size;
}

int32_t *bpe_index_slot(const struct bpe *b, const unsigned char *p, size_t n)
{
    /* Token files' FNV-1a checksum is a good enough hash of short strings. */
    for (size_t i = (size_t)tokfile_checksum(p, n) & b->index_mask;; i = (i + 1) & b->index_mask) {
        int32_t *slot = &b->index[i];
        if (*slot < 0)
            return slot;
        const uint32_t from = b->offsets[*slot], len = b->offsets[*slot + 1] - from;
        if (len == n && memcmp(b->bytes + from, p, n) == 0)
            return slot;
    }
}

int32_t bpe_token_id(const struct bpe *b, const unsigned char *p, size_t n)
{
    return *bpe_index_slot(b, p, n);
}

/* The merge of the symbol at pos with the one after it, or NULL. */
static const struct bpe_merge *merge_at(const struct bpe *b, const struct bpe_symbol *sym,
                                        int32_t pos)
{
    if (pos < 0 || sym[pos].next < 0)
        return NULL;
    const struct bpe_merge *m = bpe_merge_slot(b, sym[pos].id, sym[sym[pos].next].id);
    return m->rank == BPE_NO_RANK ? NULL : m;
}

static void heap_push(struct bpe_work *w, uint64_t key)
{
    size_t i = w->heap_n++;
    while (i > 0 && w->heap[(i - 1) / 2] > key) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = key;
}

static uint64_t heap_pop(struct bpe_work *w)
{
    const uint64_t top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= w->heap_n)
            break;
        if (c + 1 < w->heap_n && w->heap[c + 1] < w->heap[c])
            c++;
        if (w->heap[c] >= last)
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (w->heap_n > 0)
        w->heap[i] = last;
    return top;
}

/* Pushes the pair that starts at pos, if it is a merge. */
static void push_pair(const struct bpe *b, struct bpe_work *w, int32_t pos)
{
    const struct bpe_merge *m = merge_at(b, w->sym, pos);
    if (m)
        heap_push(w, (uint64_t)m->rank << 32 | (uint32_t)pos);
}

/* Merges the symbol at pos with the next one into `id`, and pushes the two
 * pairs the new symbol is part of. */
static void merge(const struct bpe *b, struct bpe_work *w, int32_t pos, int32_t id)
{
    struct bpe_symbol *s = w->sym;
    const int32_t gone = s[pos].next;
    s[pos].id = id;
    s[pos].next = s[gone].next;
    if (s[gone].next >= 0)
        s[s[gone].next].prev = pos;
    s[gone].id = -1;
    push_pair(b, w, s[pos].prev);
    push_pair(b, w, pos);
}

/* GPT-2's round: every candidate of the lowest rank, in position order;
 * those that are still that pair are merged. None of the pairs a merge
 * pushes can be of this rank (they hold the new, longer token), so the
 * round is whole once taken off the heap. */
static void merge_round(const struct bpe *b, struct bpe_work *w)
{
    const uint32_t rank = (uint32_t)(w->heap[0] >> 32);
    size_t n = 0;
    while (w->heap_n > 0 && (uint32_t)(w->heap[0] >> 32) == rank)
        w->round[n++] = heap_pop(w);
    for (size_t i = 0; i < n; i++) {
        const int32_t pos = (int32_t)(uint32_t)w->round[i];
        if (w->sym[pos].id < 0)
            continue;
        const struct bpe_merge *m = merge_at(b, w->sym, pos);
        if (m && m->rank == rank)
            merge(b, w, pos, m->id);
    }
}

/* Takes the lowest candidate off the heap and merges it unless a merge
 * before it made it stale. */
static void merge_next(const struct bpe *b, struct bpe_work *w)
{
    const uint64_t key = heap_pop(w);
    const uint32_t rank = (uint32_t)(key >> 32);
    const int32_t pos = (int32_t)(uint32_t)key;
    if (w->sym[pos].id < 0)
        return;
    const struct bpe_merge *m = merge_at(b, w->sym, pos);
    if (m && m->rank == rank)
        merge(b, w, pos, m->id);
}

zt_status bpe_work_reserve(struct bpe_work *w, size_t k)
{
    if (k <= w->cap)
        return ZT_OK;
    if (k > (size_t)INT32_MAX)
        return zt_error_set(ZT_ERR_NOMEM, "tokenizer: a piece of %zu symbols is too long", k);
    size_t cap = k > 2 * w->cap ? k : 2 * w->cap;
    bpe_work_free(w);
    w->sym = malloc(cap * sizeof *w->sym);
    w->heap = malloc(3 * cap * sizeof *w->heap);
    w->ids = malloc(cap * sizeof *w->ids);
    w->round = malloc(cap * sizeof *w->round);
    w->cap = w->sym && w->heap && w->ids && w->round ? cap : 0;
    if (w->cap == 0)
        return zt_error_set(ZT_ERR_NOMEM,
                            "tokenizer: cannot allocate room for a piece of %zu symbols", k);
    return ZT_OK;
}

void bpe_work_free(struct bpe_work *w)
{
    free(w->sym);
    free(w->heap);
    free(w->ids);
    free(w->round);
    *w = (struct bpe_work){0};
}

void bpe_merge_ids(const struct bpe *b, struct bpe_work *w, size_t k, struct token_buffer *out)
{
    for (size_t i = 0; i < k; i++)
        w->sym[i] = (struct bpe_symbol){w->ids[i], (int32_t)i - 1, i + 1 < k ? (int32_t)i + 1 : -1};
    w->heap_n = 0;
    for (size_t i = 0; i + 1 < k; i++)
        push_pair(b, w, (int32_t)i);
    while (w->heap_n > 0)
        if (b->rounds)
            merge_round(b, w);
        else
            merge_next(b, w);
    for (int32_t i = 0; i >= 0; i = w->sym[i].next)
        out->tokens[out->n++] = w->sym[i].id;
}

zt_status bpe_encode_piece(const struct bpe *b, struct bpe_work *w, const unsigned char *p,
                           size_t k, struct token_buffer *out)
{
    if (k == 1) {
        out->tokens[out->n++] = b->byte_token[p[0]];
        return ZT_OK;
    }
    if (b->whole_pieces) {
        const int32_t id = bpe_token_id(b, p, k);
        if (id >= 0) {
            out->tokens[out->n++] = id;
            return ZT_OK;
        }
    }
    ZT_TRY(bpe_work_reserve(w, k));
    for (size_t i = 0; i < k; i++)
        w->ids[i] = b->byte_token[p[i]];
    bpe_merge_ids(b, w, k, out);
    return ZT_OK;
}

zt_status bpe_encode(const struct bpe *b, const unsigned char *text, size_t n,
                     struct token_buffer *out)
{
    struct bpe_work w = {0};
    zt_status st = ZT_OK;
    for (size_t pos = 0; st == ZT_OK && pos < n;) {
        const size_t k = pretokenize_next(text, n, pos);
        st = data_buffer_reserve(out, k, "tokenizer gpt2");
        if (st == ZT_OK)
            st = bpe_encode_piece(b, &w, text + pos, k, out);
        pos += k;
    }
    bpe_work_free(&w);
    return st;
}

zt_status bpe_decode(const struct bpe *b, const int32_t *ids, size_t n, unsigned char **out,
                     size_t *len)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += b->offsets[ids[i] + 1] - b->offsets[ids[i]];
    unsigned char *p = malloc(total > 0 ? total : 1);
    if (!p)
        return zt_error_set(ZT_ERR_NOMEM, "tokenizer gpt2: cannot allocate %zu decoded bytes",
                            total);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t from = b->offsets[ids[i]], to = b->offsets[ids[i] + 1];
        memcpy(p + at, b->bytes + from, to - from);
        at += to - from;
    }
    *out = p;
    *len = total;
    return ZT_OK;
}

void bpe_free(struct bpe *b)
{
    if (!b)
        return;
    free(b->offsets);
    free(b->bytes);
    free(b->merges);
    free(b->index);
    free(b);
}
