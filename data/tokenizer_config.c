/* data/tokenizer_config.c — a model folder's tokenizer_config.json and
 * special_tokens_map.json, as save_pretrained leaves them.
 *
 * Hugging Face keeps a tokenizer's settings there: GPT2Tokenizer reads
 * its special tokens and length from it, and apply_chat_template runs the
 * Jinja text of its "chat_template". zerotrain runs no Jinja: its
 * templates are built in (chat.c), so beside the Jinja it writes the
 * template's name, which generate reads back to pick the template. An hf
 * tokenizer's own file (tokenizer_save copied it) keeps every member it
 * had; only the two chat keys are set.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data.h"

#include "common/atomic_file.h"
#include "common/fileio.h"
#include "common/json.h"

#define CONFIG_FILE "tokenizer_config.json"
#define CONFIG_MAX  ((size_t)64 << 20)

static const char gpt2_special[] = "<|endoftext|>";

/* Writes to_dir/file from t, and appends its name to saved[n]. */
static zt_status write_json_file(const char *to_dir, const char *file, struct json_text *t,
                                 char *saved, size_t n)
{
    char path[4200];
    json_text_puts(t, "\n");
    if (t->oom)
        return zt_error_set(ZT_ERR_NOMEM, "cannot build %s", file);
    if (snprintf(path, sizeof path, "%s/%s", to_dir, file) >= (int)sizeof path)
        return zt_error_set(ZT_ERR_IO, "%s: path too long", to_dir);
    ZT_TRY(atomic_file_write(path, t->p, t->len));
    const size_t len = strlen(saved);
    if (len < n)
        snprintf(saved + len, n - len, "%s%s", len ? ", " : "", file);
    return ZT_OK;
}

/* The object in the file `path` into *v (free with json_free); *found 0
 * and nothing read when there is no such file. */
static zt_status read_config(const char *path, struct json_value *v, int *found)
{
    struct stat sb;
    char *text;
    size_t len;
    *found = stat(path, &sb) == 0;
    if (!*found)
        return ZT_OK;
    ZT_TRY(zt_read_small_file(path, CONFIG_MAX, ZT_ERR_CONFIG, &text, &len));
    const struct json_source src = {.path = path, .code = ZT_ERR_CONFIG, .max_depth = 64};
    zt_status st = json_parse(&src, text, len, v);
    free(text);
    ZT_TRY(st);
    if (v->type == JSON_OBJECT)
        return ZT_OK;
    st = zt_error_set(ZT_ERR_CONFIG, "%s: expected a JSON object, not %s", path,
                      json_type_name(v->type));
    json_free(v);
    return st;
}

/* The members of a copied tokenizer_config.json, the chat keys left out;
 * a missing file: none. */
static zt_status put_copied_members(struct json_text *t, const char *path, int *n_put)
{
    struct json_value v;
    int found;
    *n_put = 0;
    ZT_TRY(read_config(path, &v, &found));
    for (size_t i = 0; found && i < v.n; i++) {
        if (strcmp(v.keys[i], "chat_template") == 0 ||
            strcmp(v.keys[i], TOKENIZER_CONFIG_CHAT_KEY) == 0)
            continue;
        json_text_puts(t, (*n_put)++ ? ", " : "");
        json_text_string(t, v.keys[i], JSON_ESCAPE_U);
        json_text_puts(t, ": ");
        json_text_value(t, &v.items[i], JSON_ESCAPE_U);
    }
    if (found)
        json_free(&v);
    return ZT_OK;
}

/* GPT2Tokenizer's members, as save_pretrained writes them. */
static void put_gpt2_members(struct json_text *t, int max_length, int *n_put)
{
    json_text_printf(t,
                     "\"add_prefix_space\": false, \"bos_token\": \"%s\", \"eos_token\": \"%s\", "
                     "\"unk_token\": \"%s\", \"errors\": \"replace\", "
                     "\"clean_up_tokenization_spaces\": false, \"model_max_length\": %d, "
                     "\"tokenizer_class\": \"GPT2Tokenizer\"",
                     gpt2_special, gpt2_special, gpt2_special, max_length);
    *n_put = 1;
}

zt_status tokenizer_save_config(const char *name, const char *to_dir, int max_length,
                                const char *chat, char *saved, size_t n)
{
    const struct chat_template *tpl = chat ? chat_template_find(chat) : NULL;
    const int gpt2 = strcmp(name, "gpt2") == 0;
    if (chat && !tpl)
        return zt_error_set(ZT_ERR_USAGE, "unknown chat template '%s'", chat);
    if (!gpt2 && !tpl)
        return ZT_OK;
    char path[4200];
    if (snprintf(path, sizeof path, "%s/" CONFIG_FILE, to_dir) >= (int)sizeof path)
        return zt_error_set(ZT_ERR_IO, "%s: path too long", to_dir);
    struct json_text t = {0};
    int n_put = 0;
    json_text_puts(&t, "{");
    zt_status st = ZT_OK;
    if (gpt2)
        put_gpt2_members(&t, max_length, &n_put);
    else if (strcmp(name, "hf") == 0)
        st = put_copied_members(&t, path, &n_put);
    if (st == ZT_OK && tpl) {
        json_text_puts(&t, n_put ? ", \"chat_template\": " : "\"chat_template\": ");
        json_text_string(&t, chat_template_jinja(tpl), JSON_ESCAPE_SHORT);
        json_text_printf(&t, ", \"" TOKENIZER_CONFIG_CHAT_KEY "\": \"%s\"",
                         chat_template_name(tpl));
    }
    json_text_puts(&t, "}");
    if (st == ZT_OK)
        st = write_json_file(to_dir, CONFIG_FILE, &t, saved, n);
    free(t.p);
    if (st != ZT_OK || !gpt2)
        return st;
    struct json_text m = {0};
    json_text_printf(&m, "{\"bos_token\": \"%s\", \"eos_token\": \"%s\", \"unk_token\": \"%s\"}",
                     gpt2_special, gpt2_special, gpt2_special);
    st = write_json_file(to_dir, "special_tokens_map.json", &m, saved, n);
    free(m.p);
    return st;
}

zt_status tokenizer_config_chat(const char *dir, char *name, size_t n)
{
    char path[4200];
    size_t count;
    struct json_value v;
    int found;
    if (n > 0)
        name[0] = '\0';
    if (snprintf(path, sizeof path, "%s/" CONFIG_FILE, dir) >= (int)sizeof path)
        return zt_error_set(ZT_ERR_IO, "%s: path too long", dir);
    ZT_TRY(read_config(path, &v, &found));
    if (!found)
        return ZT_OK;
    const struct json_value *key = json_object_get(&v, TOKENIZER_CONFIG_CHAT_KEY, &count);
    zt_status st = ZT_OK;
    if (key && (key->type != JSON_STRING || count > 1))
        st = zt_error_set(ZT_ERR_CONFIG, "%s: " TOKENIZER_CONFIG_CHAT_KEY ": expected one string",
                          path);
    else if (key)
        snprintf(name, n, "%s", key->str);
    json_free(&v);
    return st;
}
