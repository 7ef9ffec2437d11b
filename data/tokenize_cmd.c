/* data/tokenize_cmd.c — `zerotrain tokenize`; see tokenize_cmd.h.
 *
 * The text is read whole (a tokenizer that cannot take pieces needs it so)
 * and encoded as one document: no begin- or end-of-text id is added, so
 * what is printed is exactly what the tokenizer makes of those bytes.
 */
#include "tokenize_cmd.h"

#include "../common/json.h"
#include "data.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char tokenize_help[] =
    "usage: zerotrain tokenize [--tokenizer NAME] [--tokenizer-dir DIR] [--file FILE] [--decode]\n"
    "Encodes the text on stdin (or in FILE) and prints its ids as a JSON array on one line;\n"
    "with --decode reads a JSON array of ids and prints the bytes they decode to. Nothing is\n"
    "added around the text: no begin-of-text or end-of-text id.\n"
    "  --tokenizer NAME       bytes, gpt2, hf (a tokenizer.json), cl100k or o200k (tiktoken's\n"
    "                         rank files); without it, the one DIR holds (bytes without DIR)\n"
    "  --tokenizer-dir DIR    the tokenizer's folder: tokenizer.json and tokenizer_config.json,\n"
    "                         cl100k_base.tiktoken, o200k_base.tiktoken, or GPT-2's files\n"
    "                         (scripts/tokenizers.sh NAME and scripts/gpt2_vocab.sh fetch them)\n"
    "  --file FILE            read FILE instead of stdin\n"
    "  --decode               ids in, text out\n";

struct tokenize_args {
    const char *tokenizer, *dir, *file;
    int decode;
};

static int fail(FILE *err, zt_status st)
{
    const char *msg = zt_error_message();
    fprintf(err, "zerotrain: error: %s\n", msg[0] ? msg : zt_status_desc(st));
    return zt_status_exit_code(st);
}

static int parse_args(int argc, char **argv, struct tokenize_args *a)
{
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        const char **value = strcmp(arg, "--tokenizer") == 0       ? &a->tokenizer
                             : strcmp(arg, "--tokenizer-dir") == 0 ? &a->dir
                             : strcmp(arg, "--file") == 0          ? &a->file
                                                                   : NULL;
        if (value && i + 1 == argc)
            return zt_error_set(ZT_ERR_USAGE, "%s needs a value (see zerotrain help tokenize)",
                                arg);
        if (value)
            *value = argv[++i];
        else if (strcmp(arg, "--decode") == 0)
            a->decode = 1;
        else
            return zt_error_set(ZT_ERR_USAGE, "'%s': unknown option (see zerotrain help tokenize)",
                                arg);
    }
    return ZT_OK;
}

/* All of f into a new buffer (*text, *len; the caller frees it). */
static zt_status read_all(FILE *f, const char *name, unsigned char **text, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    unsigned char *p = malloc(cap);
    while (p) {
        n += fread(p + n, 1, cap - n, f);
        if (n < cap)
            break;
        unsigned char *q = realloc(p, cap *= 2);
        if (!q)
            free(p);
        p = q;
    }
    if (!p)
        return zt_error_set(ZT_ERR_NOMEM, "%s: out of memory reading it", name);
    if (ferror(f)) {
        free(p);
        return zt_error_set(ZT_ERR_IO, "%s: read failed: %s", name, strerror(errno));
    }
    *text = p;
    *len = n;
    return ZT_OK;
}

static zt_status encode(const struct tokenizer *tok, const unsigned char *text, size_t n, FILE *out)
{
    struct token_buffer ids = {0};
    ZT_TRY(tokenizer_encode(tok, text, n, &ids));
    fputc('[', out);
    for (size_t i = 0; i < ids.n; i++)
        fprintf(out, i ? ", %d" : "%d", ids.tokens[i]);
    fputs("]\n", out);
    token_buffer_free(&ids);
    return ZT_OK;
}

/* The JSON array of ids in text into a new int32 array. */
static zt_status parse_ids(const char *name, const unsigned char *text, size_t n, int32_t **ids,
                           size_t *count)
{
    const struct json_source src = {name, NULL, ZT_ERR_USAGE, 2};
    struct json_value v;
    ZT_TRY(json_parse(&src, (const char *)text, n, &v));
    zt_status st = v.type == JSON_ARRAY
                       ? ZT_OK
                       : zt_error_set(ZT_ERR_USAGE, "%s: expected a JSON array of ids, got %s",
                                      name, json_type_name(v.type));
    *ids = st == ZT_OK ? malloc((v.n > 0 ? v.n : 1) * sizeof **ids) : NULL;
    if (st == ZT_OK && !*ids)
        st = zt_error_set(ZT_ERR_NOMEM, "%s: out of memory", name);
    for (size_t i = 0; st == ZT_OK && i < v.n; i++) {
        const struct json_value *e = &v.items[i];
        if (e->type != JSON_INT || e->magnitude > INT32_MAX)
            st = zt_error_set(ZT_ERR_USAGE, "%s: item %zu: expected an id (an integer), got %s",
                              name, i,
                              e->type == JSON_INT ? "one out of range" : json_type_name(e->type));
        else
            (*ids)[i] = e->negative ? -(int32_t)e->magnitude : (int32_t)e->magnitude;
    }
    *count = v.n;
    json_free(&v);
    if (st != ZT_OK) {
        free(*ids);
        *ids = NULL;
    }
    return st;
}

static zt_status decode(const struct tokenizer *tok, const char *name, const unsigned char *text,
                        size_t n, FILE *out)
{
    int32_t *ids;
    size_t count;
    ZT_TRY(parse_ids(name, text, n, &ids, &count));
    unsigned char *bytes;
    size_t len;
    zt_status st = tokenizer_decode(tok, ids, count, &bytes, &len);
    free(ids);
    ZT_TRY(st);
    fwrite(bytes, 1, len, out);
    free(bytes);
    return ZT_OK;
}

static zt_status run(const struct tokenize_args *a, FILE *in, FILE *out)
{
    FILE *f = in;
    const char *name = a->file ? a->file : "stdin";
    if (a->file && !(f = fopen(a->file, "rb")))
        return zt_error_set(errno == ENOENT ? ZT_ERR_USAGE : ZT_ERR_IO, "%s: %s", a->file,
                            errno == ENOENT ? "no such file" : strerror(errno));
    unsigned char *text = NULL;
    size_t n = 0;
    zt_status st = read_all(f, name, &text, &n);
    if (a->file)
        fclose(f);
    struct tokenizer *tok = NULL;
    if (st == ZT_OK)
        st = tokenizer_open(a->tokenizer, a->dir, &tok);
    if (st == ZT_OK)
        st = a->decode ? decode(tok, name, text, n, out) : encode(tok, text, n, out);
    tokenizer_close(tok);
    free(text);
    if (st == ZT_OK && (fflush(out) != 0 || ferror(out)))
        st = zt_error_set(ZT_ERR_IO, "tokenize: cannot write the output: %s", strerror(errno));
    return st;
}

int tokenize_command(int argc, char **argv, FILE *in, FILE *out, FILE *err)
{
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(tokenize_help, out);
            return 0;
        }
    struct tokenize_args a = {0};
    zt_status st = parse_args(argc, argv, &a);
    if (st == ZT_OK)
        st = run(&a, in, out);
    return st == ZT_OK ? 0 : fail(err, st);
}
