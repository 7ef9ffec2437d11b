/* data/jsonl.c — instruction data: JSONL examples into tokens and a loss
 * mask (the layouts are in data.h).
 *
 * What supervised fine-tuning asks of the data is which tokens the model is
 * trained to predict: the completion (and the end-of-text that teaches it
 * to stop), not the prompt it is given. That is one byte per token beside
 * the ids, made here once, so that the sampler only turns masked targets
 * into -1 and the model only skips them; nothing downstream knows about
 * prompts.
 *
 * Files are read whole and cut into lines; each line is parsed on its own
 * so that an error names the file and the line (PATH:LINE) the user has to
 * fix. The example's tokens are gathered in a scratch buffer first: the
 * layout without packing needs their count before it places them (cut to
 * seq_len, then padded).
 */
#include "data.h"
#include "data_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "../common/json.h"

/* Larger files than this are refused rather than read into memory. */
#define JSONL_MAX_FILE_BYTES ((size_t)1 << 40)
/* Nesting allowed in a line (fields other than the example's are ignored,
 * but still parsed). */
#define JSONL_MAX_DEPTH 64

struct jsonl_load {
    const struct jsonl_options *opt;
    const struct tokenizer *tok;
    struct token_buffer *out;
    struct token_buffer ex; /* one example's tokens, reused */
    struct jsonl_report *report;
    const struct chat_template *chat; /* once a "messages" line needed it */
};

/* Room for `extra` more tokens and mask entries in out (the mask is kept
 * as long as the tokens' capacity). */
static zt_status reserve(struct token_buffer *out, size_t extra, const char *what)
{
    const size_t before = out->capacity;
    ZT_TRY(data_buffer_reserve(out, extra, what));
    if (out->mask && out->capacity == before)
        return ZT_OK;
    uint8_t *m = realloc(out->mask, out->capacity);
    if (!m)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the loss mask", what);
    out->mask = m;
    return ZT_OK;
}

/* Appends n tokens whose mask is `counted`. */
static zt_status append(struct token_buffer *out, const int32_t *tokens, size_t n, uint8_t counted,
                        const char *what)
{
    ZT_TRY(reserve(out, n, what));
    if (n == 0)
        return ZT_OK;
    memcpy(out->tokens + out->n, tokens, n * sizeof *tokens);
    memset(out->mask + out->n, counted, n);
    out->n += n;
    return ZT_OK;
}

/* Appends n padding tokens (the end-of-text id, or 0), none counted. */
static zt_status append_padding(struct jsonl_load *l, size_t n, const char *what)
{
    const int32_t eot = tokenizer_eot_id(l->tok);
    ZT_TRY(reserve(l->out, n, what));
    for (size_t i = 0; i < n; i++)
        l->out->tokens[l->out->n + i] = eot >= 0 ? eot : 0;
    memset(l->out->mask + l->out->n, 0, n);
    l->out->n += n;
    return ZT_OK;
}

/* Places the example in l->ex as data.h's layout says: counted as `mask`
 * says, or with mask NULL all but the first n_prompt tokens. */
static zt_status place_example(struct jsonl_load *l, size_t n_prompt, const uint8_t *mask,
                               const char *what)
{
    const size_t T = (size_t)l->opt->seq_len, start = l->out->n;
    size_t n = l->ex.n;
    if (!l->opt->packing && n > T) {
        struct jsonl_report *r = l->report;
        if (r->n_truncated < JSONL_REPORT_NAMED)
            snprintf(r->truncated_at[r->n_truncated], sizeof r->truncated_at[0], "%.500s", what);
        r->n_truncated++;
        /* window targets are tokens 1 .. T-1 of the example: the
         * completion must begin before T to leave one */
        r->n_untrained += n_prompt >= T;
        n = T;
    }
    if (mask) {
        ZT_TRY(append(l->out, l->ex.tokens, n, 0, what));
        memcpy(l->out->mask + start, mask, n);
    } else {
        const size_t np = n_prompt < n ? n_prompt : n;
        ZT_TRY(append(l->out, l->ex.tokens, np, 0, what));
        ZT_TRY(append(l->out, l->ex.tokens + np, n - np, 1, what));
    }
    if (l->opt->packing)
        return ZT_OK;
    ZT_TRY(append_padding(l, T - n, what));
    l->out->mask[start] = 0; /* only ever the target of the window before */
    return ZT_OK;
}

/* The string field `key` of obj, or NULL when absent. */
static zt_status string_field(const struct json_value *obj, const char *key, const char *where,
                              const struct json_value **out)
{
    size_t count = 0;
    *out = json_object_get(obj, key, &count);
    if (count > 1)
        return zt_error_set(ZT_ERR_DATA, "%s: \"%s\" is repeated", where, key);
    if (*out && (*out)->type != JSON_STRING)
        return zt_error_set(ZT_ERR_DATA, "%s: \"%s\" must be a string, not %s", where, key,
                            json_type_name((*out)->type));
    return ZT_OK;
}

/* The chat template "messages" lines are rendered with: data.chat_template,
 * else the tokenizer's; found and checked against the tokenizer once. */
static zt_status chat_template_of(struct jsonl_load *l, const char *where)
{
    if (l->chat)
        return ZT_OK;
    char names[64];
    chat_template_names(names, sizeof names);
    const char *name = l->opt->chat_template;
    const char *key = "data.chat_template";
    if (!name) {
        const char *jinja = tokenizer_chat_template(l->tok);
        name = jinja ? chat_template_detect(jinja) : NULL;
        key = "the tokenizer's chat_template";
        if (!jinja)
            return zt_error_set(ZT_ERR_CONFIG,
                                "%s: \"messages\" need a chat template, and tokenizer %s names "
                                "none: set data.chat_template (%s)",
                                where, tokenizer_name(l->tok), names);
        if (!name)
            return zt_error_set(ZT_ERR_CONFIG,
                                "%s: \"messages\" need a chat template, and the chat_template of "
                                "tokenizer %s's tokenizer_config.json is none of the built-in "
                                "ones: set data.chat_template (%s)",
                                where, tokenizer_name(l->tok), names);
    }
    const struct chat_template *tpl = chat_template_find(name);
    if (!tpl)
        return zt_error_set(ZT_ERR_CONFIG, "data.chat_template: unknown template '%s' (known: %s)",
                            name, names);
    ZT_TRY(chat_template_check(tpl, l->tok, key));
    l->chat = tpl;
    return ZT_OK;
}

/* A "messages" example: rendered, encoded and placed. */
static zt_status add_chat(struct jsonl_load *l, const struct json_value *obj,
                          const struct json_value *messages, const char *where)
{
    for (size_t i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], "prompt") == 0 || strcmp(obj->keys[i], "completion") == 0 ||
            strcmp(obj->keys[i], "text") == 0)
            return zt_error_set(ZT_ERR_CONFIG,
                                "%s: has both \"messages\" and \"%s\": an example is one "
                                "conversation, a prompt and a completion, or a text",
                                where, obj->keys[i]);
    ZT_TRY(chat_template_of(l, where));
    ZT_TRY(chat_encode(l->chat, l->tok, messages, where, &l->ex));
    ZT_TRY(place_example(l, 0, l->ex.mask, where));
    l->report->n_examples++;
    return ZT_OK;
}

/* Which form the object is: its prompt and completion (text NULL), or its
 * text (the others NULL). */
static zt_status example_fields(const struct json_value *obj, const char *where,
                                const struct json_value **prompt,
                                const struct json_value **completion,
                                const struct json_value **text)
{
    if (obj->type != JSON_OBJECT)
        return zt_error_set(ZT_ERR_DATA,
                            "%s: an example must be a JSON object with \"messages\", with "
                            "\"prompt\" and \"completion\", or with \"text\"; got %s",
                            where, json_type_name(obj->type));
    ZT_TRY(string_field(obj, "prompt", where, prompt));
    ZT_TRY(string_field(obj, "completion", where, completion));
    ZT_TRY(string_field(obj, "text", where, text));
    if (*text && (*prompt || *completion))
        return zt_error_set(ZT_ERR_DATA,
                            "%s: has both \"text\" and \"%s\": an example is either a prompt and "
                            "a completion or a text",
                            where, *prompt ? "prompt" : "completion");
    if (*text || (*prompt && *completion))
        return ZT_OK;
    if (*prompt || *completion)
        return zt_error_set(ZT_ERR_DATA, "%s: has \"%s\" but no \"%s\"", where,
                            *prompt ? "prompt" : "completion", *prompt ? "completion" : "prompt");
    return zt_error_set(ZT_ERR_DATA,
                        "%s: has neither \"messages\", \"prompt\" and \"completion\", nor "
                        "\"text\"",
                        where);
}

static zt_status encode_string(struct jsonl_load *l, const struct json_value *v)
{
    return tokenizer_encode(l->tok, (const unsigned char *)v->str, strlen(v->str), &l->ex);
}

/* One example from the object: its tokens into l->ex, then placed. */
static zt_status add_example(struct jsonl_load *l, const struct json_value *obj, const char *where)
{
    size_t n_messages = 0;
    const struct json_value *messages =
        obj->type == JSON_OBJECT ? json_object_get(obj, "messages", &n_messages) : NULL;
    if (n_messages > 1)
        return zt_error_set(ZT_ERR_CONFIG, "%s: \"messages\" is repeated", where);
    if (messages)
        return add_chat(l, obj, messages, where);
    const struct json_value *prompt, *completion, *text;
    ZT_TRY(example_fields(obj, where, &prompt, &completion, &text));
    l->ex.n = 0;
    size_t n_prompt = 0;
    if (prompt) {
        ZT_TRY(encode_string(l, prompt));
        n_prompt = l->ex.n;
    }
    ZT_TRY(encode_string(l, text ? text : completion));
    const int32_t eot = tokenizer_eot_id(l->tok);
    if (eot >= 0) {
        ZT_TRY(data_buffer_reserve(&l->ex, 1, where));
        l->ex.tokens[l->ex.n++] = eot;
    }
    ZT_TRY(place_example(l, n_prompt, NULL, where));
    l->report->n_examples++;
    return ZT_OK;
}

static int is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return 0;
    return 1;
}

/* Parses line `lineno` (text[0..n)) of `path` into an example. */
static zt_status add_line(struct jsonl_load *l, const char *path, size_t lineno, const char *text,
                          size_t n)
{
    char where[4200];
    snprintf(where, sizeof where, "%s:%zu", path, lineno);
    const struct json_source src = {where, NULL, ZT_ERR_DATA, JSONL_MAX_DEPTH};
    struct json_value v;
    ZT_TRY(json_parse(&src, text, n, &v));
    zt_status st = add_example(l, &v, where);
    json_free(&v);
    return st;
}

/* Every non-blank line of one file. */
static zt_status read_file(struct jsonl_load *l, const char *path)
{
    char *text;
    size_t len;
    ZT_TRY(zt_read_small_file(path, JSONL_MAX_FILE_BYTES, ZT_ERR_DATA, &text, &len));
    const size_t before = l->report->n_examples;
    zt_status st = ZT_OK;
    size_t lineno = 1;
    for (size_t at = 0; st == ZT_OK && at < len; lineno++) {
        const char *nl = memchr(text + at, '\n', len - at);
        const size_t end = nl ? (size_t)(nl - text) : len;
        if (!is_blank(text + at, end - at))
            st = add_line(l, path, lineno, text + at, end - at);
        at = end + 1;
    }
    free(text);
    ZT_TRY(st);
    if (l->report->n_examples == before)
        return zt_error_set(ZT_ERR_DATA, "%s: no examples (the file is empty or blank)", path);
    l->report->n_files++;
    return ZT_OK;
}

static int ends_with(const char *s, const char *suffix)
{
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The *.jsonl files under a folder, in path order. */
static zt_status read_folder(struct jsonl_load *l, const char *root, const struct stat *sb)
{
    struct data_path_list files = {0};
    zt_status st = data_collect_folder(root, sb, &files);
    size_t read = 0;
    for (size_t i = 0; st == ZT_OK && i < files.n; i++)
        if (ends_with(files.v[i], ".jsonl")) {
            st = read_file(l, files.v[i]);
            read++;
        }
    data_path_list_free(&files);
    ZT_TRY(st);
    if (read == 0)
        return zt_error_set(ZT_ERR_DATA, "%s: folder contains no .jsonl files", root);
    return ZT_OK;
}

static zt_status read_path(struct jsonl_load *l, const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return data_open_error(path, errno);
    if (S_ISDIR(sb.st_mode))
        return read_folder(l, path, &sb);
    return read_file(l, path);
}

zt_status jsonl_load(const char *const *paths, int n_paths, const struct jsonl_options *opt,
                     struct token_buffer *out, struct jsonl_report *report)
{
    struct jsonl_report own = {0};
    struct jsonl_load l = {opt,
                           opt->tokenizer ? opt->tokenizer : tokenizer_default(),
                           out,
                           {0},
                           report ? report : &own,
                           NULL};
    *out = (struct token_buffer){0};
    *l.report = (struct jsonl_report){0};
    if (n_paths < 1)
        return zt_error_set(ZT_ERR_USAGE, "data: no input paths given");
    if (opt->seq_len < 1)
        return zt_error_set(ZT_ERR_CONFIG, "data: seq_len %d must be >= 1", opt->seq_len);
    out->vocab_size = tokenizer_vocab_size(l.tok);
    zt_status st = ZT_OK;
    if (opt->chat_template && !chat_template_find(opt->chat_template)) {
        char names[64];
        chat_template_names(names, sizeof names);
        return zt_error_set(ZT_ERR_CONFIG, "data.chat_template: unknown template '%s' (known: %s)",
                            opt->chat_template, names);
    }
    for (int i = 0; st == ZT_OK && i < n_paths; i++)
        st = read_path(&l, paths[i]);
    if (st == ZT_OK && !opt->packing)
        st = append_padding(&l, 1, "data"); /* the last window's last target */
    token_buffer_free(&l.ex);
    if (st != ZT_OK)
        token_buffer_free(out);
    return st;
}
