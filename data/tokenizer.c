/* data/tokenizer.c — token buffers, the table of tokenizers and the
 * byte-level tokenizer.
 *
 * The byte tokenizer is the identity on bytes (vocabulary 256): it needs no
 * vocabulary file, round-trips any input exactly and is what the small
 * models in this project are trained on. Buffers grow geometrically because
 * a folder of many small files is appended one file at a time.
 *
 * Tokenizers are rows of one table, `tokenizers[]`: a name, whether it
 * reads a folder and takes text in pieces, and its operations on the state
 * `load` made. prepare, and later a config key or an instruction-data
 * reader, reach every tokenizer by name through the functions of data.h;
 * a new tokenizer is a row here and its own file, nothing else. The
 * wrappers do what every tokenizer needs (vocabulary checks on the buffer
 * and on ids to decode), so the rows do only their own work.
 */
#include "bpe.h"
#include "bpe_tokenizer.h"
#include "data.h"
#include "data_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define BYTE_VOCAB 256u

struct tokenizer_ops {
    const char *name;
    int needs_dir; /* load reads a vocabulary folder */
    int streams;   /* see tokenizer_streams */
    zt_status (*load)(const char *dir, void **state);
    /* Appends the ids of text[0..n) to out, growing it. */
    zt_status (*encode)(const void *state, const unsigned char *text, size_t n,
                        struct token_buffer *out);
    /* The bytes of ids (each below the vocabulary size) in a new buffer. */
    zt_status (*decode)(const void *state, const int32_t *ids, size_t n, unsigned char **out,
                        size_t *len);
    uint32_t (*vocab_size)(const void *state);
    int32_t (*eot_id)(const void *state);
    int32_t (*bos_id)(const void *state);
    void (*free)(void *state);
    /* The file in a folder that says the folder is this tokenizer's
     * (tokenizer_open without a name); NULL: none. */
    const char *marker;
    /* See tokenizer_chat_template; NULL: the tokenizer has no config. */
    const char *(*chat_template)(const void *state);
};

struct tokenizer {
    const struct tokenizer_ops *ops;
    void *state; /* owned: ops->free */
};

/* Refuses to append tokens of one vocabulary to those of another. */
static zt_status check_vocab(const struct token_buffer *out, uint32_t vocab)
{
    if (out->n > 0 && out->vocab_size != vocab)
        return zt_error_set(ZT_ERR_DATA,
                            "tokenizer: cannot append tokens of vocab size %u to tokens of vocab "
                            "size %u",
                            (unsigned)vocab, (unsigned)out->vocab_size);
    return ZT_OK;
}

zt_status tokenizer_bytes_encode(const unsigned char *text, size_t n, struct token_buffer *out)
{
    ZT_TRY(check_vocab(out, BYTE_VOCAB));
    ZT_TRY(data_buffer_reserve(out, n, "tokenizer"));
    for (size_t i = 0; i < n; i++)
        out->tokens[out->n + i] = text[i];
    out->n += n;
    out->vocab_size = BYTE_VOCAB;
    return ZT_OK;
}

/* ---- the byte tokenizer's row ---- */

static zt_status bytes_load(const char *dir, void **state)
{
    (void)dir;
    *state = NULL;
    return ZT_OK;
}

static zt_status bytes_encode(const void *state, const unsigned char *text, size_t n,
                              struct token_buffer *out)
{
    (void)state;
    return tokenizer_bytes_encode(text, n, out);
}

static zt_status bytes_decode(const void *state, const int32_t *ids, size_t n, unsigned char **out,
                              size_t *len)
{
    (void)state;
    unsigned char *p = malloc(n > 0 ? n : 1);
    if (!p)
        return zt_error_set(ZT_ERR_NOMEM, "tokenizer bytes: cannot allocate %zu bytes", n);
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)ids[i];
    *out = p;
    *len = n;
    return ZT_OK;
}

static uint32_t bytes_vocab_size(const void *state)
{
    (void)state;
    return BYTE_VOCAB;
}

static int32_t bytes_eot_id(const void *state)
{
    (void)state;
    return -1;
}

static void bytes_free(void *state)
{
    (void)state;
}

/* The bytes and gpt2 rows have no begin-of-text id. */
static int32_t no_bos_id(const void *state)
{
    (void)state;
    return -1;
}

/* ---- GPT-2's row: bpe.h behind the table's signatures ---- */

static zt_status gpt2_load(const char *dir, void **state)
{
    struct bpe *b;
    ZT_TRY(bpe_load(dir, &b));
    *state = b;
    return ZT_OK;
}

static zt_status gpt2_encode(const void *state, const unsigned char *text, size_t n,
                             struct token_buffer *out)
{
    return bpe_encode(state, text, n, out);
}

static zt_status gpt2_decode(const void *state, const int32_t *ids, size_t n, unsigned char **out,
                             size_t *len)
{
    return bpe_decode(state, ids, n, out, len);
}

static uint32_t gpt2_vocab_size(const void *state)
{
    return ((const struct bpe *)state)->vocab_size;
}

static int32_t gpt2_eot_id(const void *state)
{
    return ((const struct bpe *)state)->eot;
}

static void gpt2_free(void *state)
{
    bpe_free(state);
}

/* ---- the rows of bpe_tokenizer.h: tokenizer.json and tiktoken ---- */

static zt_status hf_load(const char *dir, void **state)
{
    struct bpe_tokenizer *t;
    ZT_TRY(hf_tokenizer_load(dir, &t));
    *state = t;
    return ZT_OK;
}

static zt_status tiktoken_load_named(const char *name, const char *dir, void **state)
{
    struct bpe_tokenizer *t;
    ZT_TRY(tiktoken_load(dir, tiktoken_encoding(name), &t));
    *state = t;
    return ZT_OK;
}

static zt_status cl100k_load(const char *dir, void **state)
{
    return tiktoken_load_named("cl100k", dir, state);
}

static zt_status o200k_load(const char *dir, void **state)
{
    return tiktoken_load_named("o200k", dir, state);
}

static zt_status bpet_encode(const void *state, const unsigned char *text, size_t n,
                             struct token_buffer *out)
{
    return bpe_tokenizer_encode(state, text, n, out);
}

static zt_status bpet_decode(const void *state, const int32_t *ids, size_t n, unsigned char **out,
                             size_t *len)
{
    return bpe_tokenizer_decode(state, ids, n, out, len);
}

static uint32_t bpet_vocab_size(const void *state)
{
    return ((const struct bpe_tokenizer *)state)->vocab_size;
}

static int32_t bpet_eot_id(const void *state)
{
    return ((const struct bpe_tokenizer *)state)->eos;
}

static int32_t bpet_bos_id(const void *state)
{
    return ((const struct bpe_tokenizer *)state)->bos;
}

static const char *bpet_chat_template(const void *state)
{
    return ((const struct bpe_tokenizer *)state)->chat_template;
}

static void bpet_free(void *state)
{
    bpe_tokenizer_free(state);
}

static const struct tokenizer_ops tokenizers[] = {
    {"bytes", 0, 1, bytes_load, bytes_encode, bytes_decode, bytes_vocab_size, bytes_eot_id,
     no_bos_id, bytes_free, NULL, NULL},
    {"gpt2", 1, 0, gpt2_load, gpt2_encode, gpt2_decode, gpt2_vocab_size, gpt2_eot_id, no_bos_id,
     gpt2_free, "encoder.json", NULL},
    {"hf", 1, 0, hf_load, bpet_encode, bpet_decode, bpet_vocab_size, bpet_eot_id, bpet_bos_id,
     bpet_free, "tokenizer.json", bpet_chat_template},
    {"cl100k", 1, 0, cl100k_load, bpet_encode, bpet_decode, bpet_vocab_size, bpet_eot_id,
     bpet_bos_id, bpet_free, "cl100k_base.tiktoken", NULL},
    {"o200k", 1, 0, o200k_load, bpet_encode, bpet_decode, bpet_vocab_size, bpet_eot_id, bpet_bos_id,
     bpet_free, "o200k_base.tiktoken", NULL},
};

#define N_TOKENIZERS (sizeof tokenizers / sizeof tokenizers[0])

static const struct tokenizer_ops *find(const char *name)
{
    for (size_t i = 0; i < N_TOKENIZERS; i++)
        if (strcmp(tokenizers[i].name, name) == 0)
            return &tokenizers[i];
    return NULL;
}

int tokenizer_needs_dir(const char *name)
{
    const struct tokenizer_ops *ops = find(name);
    return ops ? ops->needs_dir : -1;
}

static const char *tokenizer_name_at(size_t i)
{
    return tokenizers[i].name;
}

void tokenizer_names(char *buf, size_t n)
{
    data_names_join(buf, n, N_TOKENIZERS, tokenizer_name_at);
}

const char *tokenizer_detect(const char *dir)
{
    for (size_t i = 0; i < N_TOKENIZERS; i++) {
        if (!tokenizers[i].marker)
            continue;
        char *path = data_join_path(dir, tokenizers[i].marker);
        struct stat sb;
        const int there = path && stat(path, &sb) == 0;
        free(path);
        if (there)
            return tokenizers[i].name;
    }
    return NULL;
}

zt_status tokenizer_check_model_files(const char *tokenizer, const char *key, const char *path)
{
    if (!path || tokenizer_needs_dir(tokenizer) != 0)
        return ZT_OK;
    struct stat sb;
    char *dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) ? strdup(path) : NULL;
    if (!dir && (dir = strdup(path)) != NULL) {
        char *slash = strrchr(dir, '/');
        if (slash)
            slash[slash == dir] = '\0';
        else
            strcpy(dir, ".");
    }
    if (!dir)
        return zt_error_set(ZT_ERR_NOMEM, "%s: out of memory", key);
    const char *found = tokenizer_detect(dir);
    zt_status st = ZT_OK;
    if (found)
        st = zt_error_set(ZT_ERR_CONFIG,
                          "data.tokenizer: %s, but %s (%s) comes with a tokenizer in %s: its ids "
                          "are not bytes; set data.tokenizer: %s and data.tokenizer_dir: %s",
                          tokenizer, key, path, dir, found, dir);
    free(dir);
    return st;
}

zt_status tokenizer_open(const char *name, const char *dir, struct tokenizer **out)
{
    *out = NULL;
    if (!name && dir && !(name = tokenizer_detect(dir)))
        return zt_error_set(ZT_ERR_USAGE,
                            "%s: holds no tokenizer zerotrain knows (tokenizer.json, "
                            "cl100k_base.tiktoken, o200k_base.tiktoken, or encoder.json with "
                            "vocab.bpe): name one with --tokenizer",
                            dir);
    if (!name)
        name = "bytes";
    const struct tokenizer_ops *ops = find(name);
    char names[128];
    tokenizer_names(names, sizeof names);
    if (!ops)
        return zt_error_set(ZT_ERR_USAGE, "unknown tokenizer '%s' (known: %s)", name, names);
    if (ops->needs_dir && !dir)
        return zt_error_set(ZT_ERR_USAGE, "tokenizer %s needs a vocabulary folder", name);
    if (!ops->needs_dir && dir)
        return zt_error_set(ZT_ERR_USAGE, "tokenizer %s reads no vocabulary folder (%s given)",
                            name, dir);
    struct tokenizer *t = malloc(sizeof *t);
    if (!t)
        return zt_error_set(ZT_ERR_NOMEM, "tokenizer %s: out of memory", name);
    t->ops = ops;
    zt_status st = ops->load(dir, &t->state);
    if (st != ZT_OK) {
        free(t);
        return st;
    }
    *out = t;
    return ZT_OK;
}

void tokenizer_close(struct tokenizer *t)
{
    if (!t)
        return;
    t->ops->free(t->state);
    free(t);
}

const struct tokenizer *tokenizer_default(void)
{
    static const struct tokenizer bytes = {&tokenizers[0], NULL};
    return &bytes;
}

int tokenizer_streams(const struct tokenizer *t)
{
    return t->ops->streams;
}

const char *tokenizer_name(const struct tokenizer *t)
{
    return t->ops->name;
}

uint32_t tokenizer_vocab_size(const struct tokenizer *t)
{
    return t->ops->vocab_size(t->state);
}

int32_t tokenizer_eot_id(const struct tokenizer *t)
{
    return t->ops->eot_id(t->state);
}

int32_t tokenizer_bos_id(const struct tokenizer *t)
{
    return t->ops->bos_id(t->state);
}

const char *tokenizer_chat_template(const struct tokenizer *t)
{
    return t->ops->chat_template ? t->ops->chat_template(t->state) : NULL;
}

zt_status tokenizer_encode(const struct tokenizer *t, const unsigned char *text, size_t n,
                           struct token_buffer *out)
{
    const uint32_t vocab = tokenizer_vocab_size(t);
    ZT_TRY(check_vocab(out, vocab));
    ZT_TRY(t->ops->encode(t->state, text, n, out));
    out->vocab_size = vocab;
    return ZT_OK;
}

zt_status tokenizer_decode(const struct tokenizer *t, const int32_t *ids, size_t n,
                           unsigned char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    const uint32_t vocab = tokenizer_vocab_size(t);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= vocab)
            return zt_error_set(ZT_ERR_DATA,
                                "tokenizer %s: id %d at position %zu is outside 0 .. %u",
                                t->ops->name, ids[i], i, (unsigned)vocab - 1);
    return t->ops->decode(t->state, ids, n, out, len);
}
