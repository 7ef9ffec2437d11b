/* data/chat.c — chat examples ({"messages": [{"role", "content"}, ...]})
 * rendered through the built-in templates and encoded with a loss mask that
 * counts only the assistant's turns (TRL's assistant_only_loss).
 *
 * A template is a row of `templates[]`: its name, the marker that tells its
 * Jinja text apart in a tokenizer_config.json (the Jinja is never run; a
 * later release of the family that renders otherwise is told apart too, and
 * recognised as none, rather than rendered as the earlier one), the
 * special tokens it writes, which must each be one token of the tokenizer
 * (else a tokenizer without them would learn "<|eot_id|>" as ten ordinary
 * tokens), and a function that writes the conversation as Hugging Face's
 * apply_chat_template renders it, marking the byte spans that count.
 *
 * The ids are those of the whole rendered text, encoded once, as Hugging
 * Face tokenizes it. Where a span begins or ends is found by encoding the
 * text before it: the ids both encodings share are the tokens before the
 * boundary. A token that straddles a boundary (none does in these
 * templates, whose counted spans start after a special token, a newline
 * pair or a "[/INST]" and end with a special token) falls to the later side.
 */
#include "data.h"
#include "data_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/json.h"

enum chat_role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT };

static const char *const role_names[] = {"system", "user", "assistant"};

struct chat_message {
    enum chat_role role;
    const char *content; /* NUL-terminated, borrowed from the JSON value */
};

/* The rendered text and the byte spans that count. */
struct chat_render {
    char *text;
    size_t n, cap;
    size_t (*spans)[2]; /* [begin, end) byte offsets */
    size_t n_spans, cap_spans;
    int failed; /* out of memory */
};

static void put(struct chat_render *r, const char *s, size_t n)
{
    if (r->failed)
        return;
    if (r->n + n + 1 > r->cap) {
        size_t cap = 2 * (r->n + n + 1) + 256;
        char *t = realloc(r->text, cap);
        if (!t) {
            r->failed = 1;
            return;
        }
        r->text = t;
        r->cap = cap;
    }
    memcpy(r->text + r->n, s, n);
    r->n += n;
    r->text[r->n] = '\0';
}

static void puts_(struct chat_render *r, const char *s)
{
    put(r, s, strlen(s));
}

/* Opens a counted span at the end of the text. */
static void count_begin(struct chat_render *r)
{
    if (r->failed)
        return;
    if (r->n_spans == r->cap_spans) {
        size_t cap = 2 * r->cap_spans + 8;
        size_t(*s)[2] = realloc(r->spans, cap * sizeof *s);
        if (!s) {
            r->failed = 1;
            return;
        }
        r->spans = s;
        r->cap_spans = cap;
    }
    r->spans[r->n_spans][0] = r->spans[r->n_spans][1] = r->n;
    r->n_spans++;
}

static void count_end(struct chat_render *r)
{
    if (!r->failed)
        r->spans[r->n_spans - 1][1] = r->n;
}

/* Python's str.strip() (Jinja's trim) for ASCII white space. */
static void put_stripped(struct chat_render *r, const char *s)
{
    static const char ws[] = " \t\n\v\f\r\x1c\x1d\x1e\x1f";
    size_t n = strlen(s);
    while (n > 0 && strchr(ws, s[n - 1]))
        n--;
    while (n > 0 && strchr(ws, *s)) {
        s++;
        n--;
    }
    put(r, s, n);
}

/* What a render function reads: the messages, and where they came from. */
struct chat_input {
    const struct chat_message *m;
    size_t n;
    const char *where;    /* "PATH:LINE" */
    const char *template; /* its name, for messages */
};

/* ---- the templates ---- */

/* Llama 3 Instruct: <|begin_of_text|>, then each message as
 * <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|> with CONTENT
 * trimmed; the assistant's content and <|eot_id|> count. */
static zt_status render_llama3(const struct chat_input *in, struct chat_render *r)
{
    puts_(r, "<|begin_of_text|>");
    for (size_t i = 0; i < in->n; i++) {
        puts_(r, "<|start_header_id|>");
        puts_(r, role_names[in->m[i].role]);
        puts_(r, "<|end_header_id|>\n\n");
        const int counted = in->m[i].role == ROLE_ASSISTANT;
        if (counted)
            count_begin(r);
        put_stripped(r, in->m[i].content);
        puts_(r, "<|eot_id|>");
        if (counted)
            count_end(r);
    }
    return ZT_OK;
}

/* Qwen2's ChatML: a default system message when the first is none, then
 * <|im_start|>ROLE\nCONTENT<|im_end|>\n; the assistant's content and
 * <|im_end|> count. */
static zt_status render_chatml(const struct chat_input *in, struct chat_render *r)
{
    if (in->m[0].role != ROLE_SYSTEM)
        puts_(r, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n");
    for (size_t i = 0; i < in->n; i++) {
        puts_(r, "<|im_start|>");
        puts_(r, role_names[in->m[i].role]);
        puts_(r, "\n");
        const int counted = in->m[i].role == ROLE_ASSISTANT;
        if (counted)
            count_begin(r);
        puts_(r, in->m[i].content);
        puts_(r, "<|im_end|>");
        if (counted)
            count_end(r);
        puts_(r, "\n");
    }
    return ZT_OK;
}

/* Llama 2 and Mistral take user and assistant turns in turn, the user
 * first, after an optional system message (first_turn: its index). */
static zt_status check_alternating(const struct chat_input *in, size_t first_turn)
{
    for (size_t i = first_turn; i < in->n; i++) {
        const enum chat_role want = (i - first_turn) % 2 == 0 ? ROLE_USER : ROLE_ASSISTANT;
        if (in->m[i].role != want)
            return zt_error_set(ZT_ERR_CONFIG,
                                "%s: messages[%zu].role: %s, but template %s takes user and "
                                "assistant turns in turn, the user first%s",
                                in->where, i, role_names[in->m[i].role], in->template,
                                first_turn ? " after the system message" : "");
    }
    return ZT_OK;
}

/* Llama 2 chat: each user turn <s>[INST] CONTENT [/INST] (the system
 * message as <<SYS>>\nSYSTEM\n<</SYS>>\n\n before the first user content),
 * each assistant turn " CONTENT </s>", contents stripped; the assistant's
 * turn counts, its leading space included. */
static zt_status render_llama2(const struct chat_input *in, struct chat_render *r)
{
    const size_t first = in->m[0].role == ROLE_SYSTEM;
    ZT_TRY(check_alternating(in, first));
    for (size_t i = first; i < in->n; i++) {
        if (in->m[i].role == ROLE_USER) {
            puts_(r, "<s>[INST] ");
            if (first && i == first) {
                /* Stripped as one string with the user's content, as the
                 * template does: the system's leading space goes. */
                struct chat_render sys = {0};
                puts_(&sys, "<<SYS>>\n");
                puts_(&sys, in->m[0].content);
                puts_(&sys, "\n<</SYS>>\n\n");
                puts_(&sys, in->m[i].content);
                if (sys.failed)
                    r->failed = 1;
                else
                    put_stripped(r, sys.text);
                free(sys.text);
                free(sys.spans);
            } else {
                put_stripped(r, in->m[i].content);
            }
            puts_(r, " [/INST]");
        } else {
            count_begin(r);
            puts_(r, " ");
            put_stripped(r, in->m[i].content);
            puts_(r, " </s>");
            count_end(r);
        }
    }
    return ZT_OK;
}

/* Mistral 7B Instruct (v0.1, v0.2): <s>, then [INST] CONTENT [/INST] for
 * the user and CONTENT</s> for the assistant, which counts; no system
 * message (the template refuses one). */
static zt_status render_mistral(const struct chat_input *in, struct chat_render *r)
{
    if (in->m[0].role == ROLE_SYSTEM)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: messages[0].role: system, but template mistral has no system "
                            "message (Mistral 7B Instruct's template refuses one)",
                            in->where);
    ZT_TRY(check_alternating(in, 0));
    puts_(r, "<s>");
    for (size_t i = 0; i < in->n; i++) {
        if (in->m[i].role == ROLE_USER) {
            puts_(r, "[INST] ");
            puts_(r, in->m[i].content);
            puts_(r, " [/INST]");
        } else {
            count_begin(r);
            puts_(r, in->m[i].content);
            puts_(r, "</s>");
            count_end(r);
        }
    }
    return ZT_OK;
}

struct chat_template {
    const char *name;
    const char *marker; /* a string only this family's Jinja template holds */
    const char *later;  /* one that a later release's holds, which renders otherwise */
    const char *specials[3];
    zt_status (*render)(const struct chat_input *in, struct chat_render *r);
    /* What add_generation_prompt=True appends: the assistant's header
     * without a reply ("" where the user's turn already ends in it). */
    const char *generation_prompt;
    const char *end_of_turn; /* the token that ends the assistant's reply */
    /* The same rendering as Jinja, for a model folder's
     * tokenizer_config.json: Hugging Face's apply_chat_template runs it
     * (tests/test_generate.c renders both). Holds `marker`, so that
     * chat_template_detect names it again. */
    const char *jinja;
};

/* The Jinja texts: one statement per line. */
#define JINJA_ALTERNATING                                                                          \
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"                              \
    "{{- raise_exception('roles must alternate user/assistant/user/assistant/...') }}"             \
    "{%- endif %}"
static const char jinja_llama3[] =
    "{{- '<|begin_of_text|>' }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{{- message['content'] | trim }}{{- '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{%- endif %}";
static const char jinja_chatml[] =
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}";
static const char jinja_llama2[] =
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set system = '<<SYS>>\n' + messages[0]['content'] + '\n<</SYS>>\n\n' %}"
    "{%- set turns = messages[1:] %}"
    "{%- else %}{%- set system = '' %}{%- set turns = messages %}{%- endif %}"
    "{%- for message in turns %}" JINJA_ALTERNATING "{%- if message['role'] == 'user' %}"
    "{{- '<s>[INST] ' + ((system if loop.first else '') + message['content']) | trim + ' [/INST]' "
    "}}"
    "{%- else %}{{- ' ' + message['content'] | trim + ' </s>' }}{%- endif %}"
    "{%- endfor %}";
static const char jinja_mistral[] =
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- raise_exception('this template has no system message') }}"
    "{%- endif %}"
    "{{- '<s>' }}"
    "{%- for message in messages %}" JINJA_ALTERNATING "{%- if message['role'] == 'user' %}"
    "{{- '[INST] ' + message['content'] + ' [/INST]' }}"
    "{%- else %}{{- message['content'] + '</s>' }}{%- endif %}"
    "{%- endfor %}";

/* In detection order: Llama 2's Jinja holds "[INST]" too. */
static const struct chat_template templates[] = {
    {"llama3",
     "<|start_header_id|>",
     "Cutting Knowledge Date",
     {"<|begin_of_text|>", "<|eot_id|>", "<|end_header_id|>"},
     render_llama3,
     "<|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|eot_id|>",
     jinja_llama3},
    {"chatml",
     "<|im_start|>",
     "You are Qwen",
     {"<|im_start|>", "<|im_end|>", NULL},
     render_chatml,
     "<|im_start|>assistant\n",
     "<|im_end|>",
     jinja_chatml},
    {"llama2", "<<SYS>>", NULL, {"<s>", "</s>", NULL}, render_llama2, "", "</s>", jinja_llama2},
    {"mistral",
     "[INST]",
     "[AVAILABLE_TOOLS]",
     {"<s>", "</s>", NULL},
     render_mistral,
     "",
     "</s>",
     jinja_mistral},
};

#define N_TEMPLATES (sizeof templates / sizeof templates[0])

const struct chat_template *chat_template_find(const char *name)
{
    for (size_t i = 0; i < N_TEMPLATES; i++)
        if (strcmp(templates[i].name, name) == 0)
            return &templates[i];
    return NULL;
}

const char *chat_template_detect(const char *jinja)
{
    for (size_t i = 0; i < N_TEMPLATES; i++)
        if (strstr(jinja, templates[i].marker))
            return templates[i].later && strstr(jinja, templates[i].later) ? NULL
                                                                           : templates[i].name;
    return NULL;
}

static const char *template_name_at(size_t i)
{
    return templates[i].name;
}

void chat_template_names(char *buf, size_t n)
{
    data_names_join(buf, n, N_TEMPLATES, template_name_at);
}

const char *chat_template_name(const struct chat_template *tpl)
{
    return tpl->name;
}

const char *chat_template_end_of_turn(const struct chat_template *tpl)
{
    return tpl->end_of_turn;
}

const char *chat_template_jinja(const struct chat_template *tpl)
{
    return tpl->jinja;
}

zt_status chat_template_check(const struct chat_template *tpl, const struct tokenizer *tok,
                              const char *key)
{
    struct token_buffer ids = {0};
    zt_status st = ZT_OK;
    for (size_t i = 0; st == ZT_OK && i < 3 && tpl->specials[i]; i++) {
        const char *s = tpl->specials[i];
        ids.n = 0;
        st = tokenizer_encode(tok, (const unsigned char *)s, strlen(s), &ids);
        if (st == ZT_OK && ids.n != 1)
            st = zt_error_set(ZT_ERR_CONFIG,
                              "%s: template %s writes %s, which tokenizer %s does not have as one "
                              "token (it encodes to %zu): use the tokenizer of the model the "
                              "template is for",
                              key, tpl->name, s, tokenizer_name(tok), ids.n);
    }
    token_buffer_free(&ids);
    return st;
}

/* ---- the messages ---- */

static zt_status read_message(const struct json_value *v, size_t i, const char *where,
                              struct chat_message *m)
{
    if (v->type != JSON_OBJECT)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: messages[%zu]: must be an object with \"role\" and \"content\", "
                            "not %s",
                            where, i, json_type_name(v->type));
    const struct json_value *role = json_object_get(v, "role", NULL);
    const struct json_value *content = json_object_get(v, "content", NULL);
    if (!role)
        return zt_error_set(ZT_ERR_CONFIG, "%s: messages[%zu]: has no \"role\"", where, i);
    if (role->type != JSON_STRING)
        return zt_error_set(ZT_ERR_CONFIG, "%s: messages[%zu].role: must be a string, not %s",
                            where, i, json_type_name(role->type));
    size_t r = 0;
    while (r < 3 && strcmp(role->str, role_names[r]) != 0)
        r++;
    if (r == 3)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: messages[%zu].role: unknown role '%s' (system, user, assistant)",
                            where, i, role->str);
    if (!content)
        return zt_error_set(ZT_ERR_CONFIG, "%s: messages[%zu]: has no \"content\"", where, i);
    if (content->type != JSON_STRING)
        return zt_error_set(ZT_ERR_CONFIG, "%s: messages[%zu].content: must be a string, not %s",
                            where, i, json_type_name(content->type));
    if (r == ROLE_SYSTEM && i > 0)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: messages[%zu].role: system, but only the first message may be "
                            "the system's",
                            where, i);
    *m = (struct chat_message){(enum chat_role)r, content->str};
    return ZT_OK;
}

/* need_assistant: a training example, which must have a turn to learn. */
static zt_status read_messages(const struct json_value *messages, const char *where,
                               int need_assistant, struct chat_message **out)
{
    *out = NULL;
    if (messages->type != JSON_ARRAY || messages->n == 0)
        return zt_error_set(ZT_ERR_CONFIG, "%s: messages: must be a non-empty array, not %s", where,
                            messages->type == JSON_ARRAY ? "an empty one"
                                                         : json_type_name(messages->type));
    struct chat_message *m = calloc(messages->n, sizeof *m);
    if (!m)
        return zt_error_set(ZT_ERR_NOMEM, "%s: out of memory", where);
    int assistant = 0;
    for (size_t i = 0; i < messages->n; i++) {
        zt_status st = read_message(&messages->items[i], i, where, &m[i]);
        if (st != ZT_OK) {
            free(m);
            return st;
        }
        assistant |= m[i].role == ROLE_ASSISTANT;
    }
    if (!assistant && need_assistant) {
        free(m);
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: messages: no assistant message, so no token would count in the "
                            "loss",
                            where);
    }
    *out = m;
    return ZT_OK;
}

/* ---- encoding ---- */

/* How many leading ids the encoding of text[0..end) shares with ids. */
static zt_status boundary(const struct tokenizer *tok, const char *text, size_t end,
                          const struct token_buffer *ids, struct token_buffer *scratch, size_t *at)
{
    scratch->n = 0;
    ZT_TRY(tokenizer_encode(tok, (const unsigned char *)text, end, scratch));
    size_t k = 0;
    while (k < scratch->n && k < ids->n && scratch->tokens[k] == ids->tokens[k])
        k++;
    *at = k;
    return ZT_OK;
}

/* The rendered text's ids into out (emptied first) and their mask. */
static zt_status encode_render(const struct tokenizer *tok, const struct chat_render *r,
                               struct token_buffer *out, const char *where)
{
    out->n = 0;
    ZT_TRY(tokenizer_encode(tok, (const unsigned char *)r->text, r->n, out));
    /* The tokens grew outside the mask's sight: a new one, as long. */
    free(out->mask);
    out->mask = calloc(out->capacity > 0 ? out->capacity : 1, 1);
    if (!out->mask)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate the loss mask", where);
    struct token_buffer scratch = {0};
    zt_status st = ZT_OK;
    for (size_t s = 0; st == ZT_OK && s < r->n_spans; s++) {
        size_t begin = 0, end = 0;
        st = boundary(tok, r->text, r->spans[s][0], out, &scratch, &begin);
        if (st == ZT_OK)
            st = boundary(tok, r->text, r->spans[s][1], out, &scratch, &end);
        if (st == ZT_OK && end > begin)
            memset(out->mask + begin, 1, end - begin);
    }
    token_buffer_free(&scratch);
    return st;
}

zt_status chat_encode(const struct chat_template *tpl, const struct tokenizer *tok,
                      const struct json_value *messages, const char *where,
                      struct token_buffer *out)
{
    struct chat_message *m;
    ZT_TRY(read_messages(messages, where, 1, &m));
    const struct chat_input in = {m, messages->n, where, tpl->name};
    struct chat_render r = {0};
    zt_status st = tpl->render(&in, &r);
    if (st == ZT_OK && r.failed)
        st = zt_error_set(ZT_ERR_NOMEM, "%s: out of memory rendering the messages", where);
    if (st == ZT_OK)
        st = encode_render(tok, &r, out, where);
    free(r.text);
    free(r.spans);
    free(m);
    return st;
}

zt_status chat_render_prompt(const struct chat_template *tpl, const struct json_value *messages,
                             const char *where, char **text, size_t *len)
{
    struct chat_message *m;
    *text = NULL;
    *len = 0;
    ZT_TRY(read_messages(messages, where, 0, &m));
    if (m[messages->n - 1].role == ROLE_ASSISTANT) {
        free(m);
        return zt_error_set(ZT_ERR_USAGE,
                            "%s: messages[%zu].role: assistant: the last message is the one the "
                            "reply answers (user)",
                            where, messages->n - 1);
    }
    const struct chat_input in = {m, messages->n, where, tpl->name};
    struct chat_render r = {0};
    zt_status st = tpl->render(&in, &r);
    puts_(&r, tpl->generation_prompt);
    if (st == ZT_OK && r.failed)
        st = zt_error_set(ZT_ERR_NOMEM, "%s: out of memory rendering the messages", where);
    free(r.spans);
    free(m);
    if (st != ZT_OK) {
        free(r.text);
        return st;
    }
    if (!r.text) /* nothing rendered: an empty string */
        r.text = calloc(1, 1);
    if (!r.text)
        return zt_error_set(ZT_ERR_NOMEM, "%s: out of memory", where);
    *text = r.text;
    *len = r.n;
    return ZT_OK;
}
