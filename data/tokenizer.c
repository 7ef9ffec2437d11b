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

#include "../common/atomic_file.h"
#include "../common/fileio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define BYTE_VOCAB 256u

/* A file of a tokenizer's folder, by the names it may have there (the
 * first found is taken), and the name a model folder gives it: Hugging
 * Face's, so that from_pretrained finds it (GPT-2's encoder.json is its
 * vocab.json, vocab.bpe its merges.txt). */
struct tokenizer_file {
    const char *names[2];
    const char *saved_as;
    int optional;
};

#define TOKENIZER_MAX_FILES 3

struct tokenizer_files {
    /* A marker looked for after every row's first (a Qwen2 folder holds
     * a vocab.json beside its tokenizer.json); NULL: none. */
    const char *later_marker;
    struct tokenizer_file files[TOKENIZER_MAX_FILES]; /* names[0] NULL ends the list */
};

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
    /* What tokenizer_save copies; NULL: nothing (bytes). */
    const struct tokenizer_files *saved;
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

/* What a model folder keeps of each tokenizer that reads files. */
static const struct tokenizer_files gpt2_files = {
    "vocab.json",
    {{{"encoder.json", "vocab.json"}, "vocab.json", 0},
     {{"vocab.bpe", "merges.txt"}, "merges.txt", 0}}};
static const struct tokenizer_files hf_files = {
    NULL,
    {{{"tokenizer.json"}, "tokenizer.json", 0},
     {{"tokenizer_config.json"}, "tokenizer_config.json", 1},
     {{"special_tokens_map.json"}, "special_tokens_map.json", 1}}};
static const struct tokenizer_files cl100k_files = {
    NULL, {{{"cl100k_base.tiktoken"}, "cl100k_base.tiktoken", 0}}};
static const struct tokenizer_files o200k_files = {
    NULL, {{{"o200k_base.tiktoken"}, "o200k_base.tiktoken", 0}}};

static const struct tokenizer_ops tokenizers[] = {
    {"bytes", 0, 1, bytes_load, bytes_encode, bytes_decode, bytes_vocab_size, bytes_eot_id,
     no_bos_id, bytes_free, NULL, NULL, NULL},
    {"gpt2", 1, 0, gpt2_load, gpt2_encode, gpt2_decode, gpt2_vocab_size, gpt2_eot_id, no_bos_id,
     gpt2_free, "encoder.json", NULL, &gpt2_files},
    {"hf", 1, 0, hf_load, bpet_encode, bpet_decode, bpet_vocab_size, bpet_eot_id, bpet_bos_id,
     bpet_free, "tokenizer.json", bpet_chat_template, &hf_files},
    {"cl100k", 1, 0, cl100k_load, bpet_encode, bpet_decode, bpet_vocab_size, bpet_eot_id,
     bpet_bos_id, bpet_free, "cl100k_base.tiktoken", NULL, &cl100k_files},
    {"o200k", 1, 0, o200k_load, bpet_encode, bpet_decode, bpet_vocab_size, bpet_eot_id, bpet_bos_id,
     bpet_free, "o200k_base.tiktoken", NULL, &o200k_files},
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

static int file_in(const char *dir, const char *name)
{
    char *path = data_join_path(dir, name);
    struct stat sb;
    const int there = path && stat(path, &sb) == 0;
    free(path);
    return there;
}

const char *tokenizer_detect(const char *dir)
{
    for (size_t i = 0; i < N_TOKENIZERS; i++)
        if (tokenizers[i].marker && file_in(dir, tokenizers[i].marker))
            return tokenizers[i].name;
    for (size_t i = 0; i < N_TOKENIZERS; i++)
        if (tokenizers[i].saved && tokenizers[i].saved->later_marker &&
            file_in(dir, tokenizers[i].saved->later_marker))
            return tokenizers[i].name;
    return NULL;
}

/* Copies one file of the folder `dir` to to_dir/f->saved_as; a missing
 * optional file is skipped. */
static zt_status save_file(const struct tokenizer_file *f, const char *dir, const char *to_dir,
                           int *copied)
{
    const char *name = f->names[0];
    if (!file_in(dir, name) && f->names[1] && file_in(dir, f->names[1]))
        name = f->names[1];
    *copied = 0;
    if (!file_in(dir, name) && f->optional)
        return ZT_OK;
    char *from = data_join_path(dir, name), *to = data_join_path(to_dir, f->saved_as);
    char *bytes = NULL;
    size_t len = 0;
    zt_status st = from && to ? zt_read_small_file(from, (size_t)1 << 31, ZT_ERR_IO, &bytes, &len)
                              : zt_error_set(ZT_ERR_NOMEM, "%s: out of memory", dir);
    if (st == ZT_OK)
        st = atomic_file_write(to, bytes, len);
    *copied = st == ZT_OK;
    free(bytes);
    free(from);
    free(to);
    return st;
}

zt_status tokenizer_save(const char *name, const char *dir, const char *to_dir, char *saved,
                         size_t n)
{
    const struct tokenizer_ops *ops = find(name);
    if (n > 0)
        saved[0] = '\0';
    if (!ops)
        return zt_error_set(ZT_ERR_USAGE, "unknown tokenizer '%s'", name);
    size_t len = 0;
    for (int i = 0; ops->saved && dir && i < TOKENIZER_MAX_FILES; i++) {
        const struct tokenizer_file *f = &ops->saved->files[i];
        int copied;
        if (!f->names[0])
            break;
        ZT_TRY(save_file(f, dir, to_dir, &copied));
        if (copied && len < n)
            len += (size_t)snprintf(saved + len, n - len, "%s%s", len ? ", " : "", f->saved_as);
    }
    return ZT_OK;
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
