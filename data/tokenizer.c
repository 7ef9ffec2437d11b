/* data/tokenizer.c — token buffers and the byte-level tokenizer.
 *
 * The byte tokenizer is the identity on bytes (vocabulary 256): it needs no
 * vocabulary file, round-trips any input exactly and is what the small
 * models in this project are trained on. Buffers grow geometrically because
 * a folder of many small files is appended one file at a time.
 */
#include "data.h"
#include "data_impl.h"

#include <stdlib.h>

#define BYTE_VOCAB 256u

void token_buffer_free(struct token_buffer *b)
{
    if (!b)
        return;
    free(b->tokens);
    *b = (struct token_buffer){0};
}

zt_status data_buffer_reserve(struct token_buffer *b, size_t extra, const char *what)
{
    if (extra > SIZE_MAX / sizeof(int32_t) - b->n)
        return zt_error_set(ZT_ERR_NOMEM, "%s: %zu + %zu tokens do not fit in memory", what, b->n,
                            extra);
    size_t need = b->n + extra;
    /* A buffer filled by hand may have tokens but no recorded capacity. */
    size_t cap = b->capacity > b->n ? b->capacity : b->n;
    if (need <= cap && b->tokens)
        return ZT_OK;
    size_t grown = cap < SIZE_MAX / sizeof(int32_t) / 2 ? 2 * cap : need;
    size_t new_cap = grown > need ? grown : need;
    if (new_cap < 1024)
        new_cap = 1024;
    int32_t *t = realloc(b->tokens, new_cap * sizeof *t);
    if (!t)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate %zu tokens (%zu bytes)", what,
                            new_cap, new_cap * sizeof *t);
    b->tokens = t;
    b->capacity = new_cap;
    return ZT_OK;
}

zt_status tokenizer_bytes_encode(const unsigned char *text, size_t n, struct token_buffer *out)
{
    if (out->n > 0 && out->vocab_size != BYTE_VOCAB)
        return zt_error_set(ZT_ERR_DATA,
                            "tokenizer: cannot append byte tokens to tokens of vocab size %u",
                            (unsigned)out->vocab_size);
    ZT_TRY(data_buffer_reserve(out, n, "tokenizer"));
    for (size_t i = 0; i < n; i++)
        out->tokens[out->n + i] = text[i];
    out->n += n;
    out->vocab_size = BYTE_VOCAB;
    return ZT_OK;
}
