/* tests/fuzz/tokenizer_check.c — see tokenizer_check.h. */
#include "tokenizer_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

/* Whether some id stands for two texts: an added token over a model token
 * of other bytes, or two added tokens with one id. Hugging Face's reader
 * decodes such an id as the added token, so the text of the other does not
 * come back, and that is no finding. */
static int ids_shared(const struct bpe_tokenizer *t)
{
    const struct bpe *b = t->b;
    for (size_t i = 0; i < t->n_added; i++) {
        const struct bpe_added *a = &t->added[i];
        const uint32_t id = (uint32_t)a->id;
        if (id < b->vocab_size && b->offsets[id + 1] > b->offsets[id] &&
            (b->offsets[id + 1] - b->offsets[id] != a->len ||
             memcmp(b->bytes + b->offsets[id], t->added_bytes + a->offset, a->len) != 0))
            return 1;
        for (size_t k = 0; k < i; k++)
            if (t->added[k].id == a->id)
                return 1;
    }
    return 0;
}

void fuzz_tokenizer_round_trip(const struct bpe_tokenizer *t, const uint8_t *text, size_t n)
{
    struct token_buffer ids = {0};
    unsigned char *back = NULL;
    size_t len = 0;
    fuzz_begin();
    if (fuzz_check(bpe_tokenizer_encode(t, text, n, &ids)) == ZT_OK) {
        for (size_t i = 0; i < ids.n; i++)
            if (ids.tokens[i] < 0 || (uint32_t)ids.tokens[i] >= t->vocab_size) {
                fprintf(stderr, "fuzz: encoded id %d outside the vocabulary of %u\n", ids.tokens[i],
                        (unsigned)t->vocab_size);
                abort();
            }
        fuzz_begin();
        if (bpe_tokenizer_decode(t, ids.tokens, ids.n, &back, &len) != ZT_OK) {
            fprintf(stderr, "fuzz: an encoded id does not decode: %s\n", zt_error_message());
            abort();
        }
        if (t->symbols == BPE_SYMBOLS_BYTES && !ids_shared(t) &&
            (len != n || (n > 0 && memcmp(back, text, n) != 0))) {
            fprintf(stderr, "fuzz: %zu bytes encode to %zu ids that decode to %zu other bytes\n", n,
                    ids.n, len);
            abort(); /* byte-level BPE loses nothing */
        }
    }
    free(back);
    token_buffer_free(&ids);
}
