/* data/token_buffer.c — growing and freeing a struct token_buffer (see
 * data.h and data_impl.h): what every tokenizer and the dataset loader
 * append through; and the list of a table's names for messages. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "data_impl.h"

void token_buffer_free(struct token_buffer *b)
{
    if (!b)
        return;
    free(b->tokens);
    free(b->mask);
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

void data_names_join(char *buf, size_t n, size_t count, const char *(*name)(size_t i))
{
    size_t at = 0;
    if (n > 0)
        buf[0] = '\0';
    for (size_t i = 0; i < count && at < n; i++) {
        int w = snprintf(buf + at, n - at, "%s%s", i ? ", " : "", name(i));
        at += w > 0 ? (size_t)w : 0;
    }
}
