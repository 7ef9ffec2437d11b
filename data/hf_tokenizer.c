/* data/hf_tokenizer.c — reading a Hugging Face tokenizer.json (and its
 * tokenizer_config.json) into a struct bpe_tokenizer; see bpe_tokenizer.h.
 *
 * The file is untrusted and large (Llama 3's is 17 MB): it is parsed whole
 * with the project's JSON reader, then walked. What is read:
 *   model            type "BPE"; vocab (token -> id), merges ("A B" strings
 *                    or [A, B] pairs, lowest rank first), unk_token,
 *                    byte_fallback, fuse_unk, ignore_merges;
 *   normalizer       none, NFC (nfc.h), or Prepend("▁") and Replace(" " ->
 *                    "▁"), alone or in a Sequence (SentencePiece's legacy
 *                    form, NFC allowed beside them);
 *   pre_tokenizer    none, ByteLevel, Split with a pattern pretokenize.h
 *                    writes out (Isolated), Metaspace, or a Sequence of them;
 *   decoder          whether a character vocabulary strips its leading space;
 *   added_tokens     id and content (lstrip, rstrip and single_word must be
 *                    false: they are not written here).
 * Anything else that changes ids (dropout, a word prefix or suffix, other
 * normalizers: NFD, NFKC, Lowercase ...; Digits or Punctuation
 * pre-tokenizers, another model type) is refused by name rather than
 * ignored.
 */
#include "bpe_tokenizer.h"
#include "data_impl.h"

#include "../common/fileio.h"
#include "../common/json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Larger than any tokenizer.json published (Gemma's is 34 MB). */
#define TOKENIZER_JSON_MAX ((size_t)512 << 20)
#define CONFIG_JSON_MAX    ((size_t)16 << 20)
/* The tables are as long as the highest id, so a few bytes of JSON could
 * ask for gigabytes; no published vocabulary comes near this (Gemma 3's
 * has 262,144 ids). */
#define HF_MAX_ID ((1u << 24) - 1)

struct hf_loader {
    const char *path; /* DIR/tokenizer.json */
    struct bpe_tokenizer *t;
    int byte_level; /* tokens are written in GPT-2's byte alphabet */
    int16_t byte_of[BPE_ALPHABET_END];
    unsigned char *scratch; /* one token's or merge's bytes */
    size_t longest;         /* the longest key of model.vocab, in bytes */
};

/* The member `key` of obj when obj is an object and the member is not
 * null, else NULL. */
static const struct json_value *member(const struct json_value *obj, const char *key)
{
    if (!obj || obj->type != JSON_OBJECT)
        return NULL;
    const struct json_value *v = json_object_get(obj, key, NULL);
    return v && v->type != JSON_NULL ? v : NULL;
}

static const char *string_of(const struct json_value *obj, const char *key)
{
    const struct json_value *v = member(obj, key);
    return v && v->type == JSON_STRING ? v->str : NULL;
}

static int true_of(const struct json_value *obj, const char *key)
{
    const struct json_value *v = member(obj, key);
    return v && v->type == JSON_BOOL && v->boolean;
}

static zt_status expect(const char *path, const char *key, const struct json_value *v,
                        enum json_type type)
{
    if (!v)
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s: missing, expected %s", path, key,
                            json_type_name(type));
    if (v->type != type)
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s: expected %s, got %s", path, key,
                            json_type_name(type), json_type_name(v->type));
    return ZT_OK;
}

static zt_status unsupported(const char *path, const char *key, const char *what)
{
    return zt_error_set(ZT_ERR_UNSUPPORTED,
                        "%s: %s: %s is not supported (zerotrain reads BPE "
                        "tokenizers, byte-level or SentencePiece-style)",
                        path, key, what);
}

/* ---- normalizer, pre-tokenizer, decoder ---- */

static int is_metaspace(const char *s)
{
    return s && strcmp(s, "\xE2\x96\x81") == 0;
}

/* One normalizer (not a Sequence): NFC and SentencePiece's two are taken;
 * *metaspace counts SentencePiece's. */
static zt_status take_normalizer(struct hf_loader *ld, const struct json_value *n, int *spaces,
                                 int *metaspace)
{
    const char *type = string_of(n, "type");
    if (type && strcmp(type, "NFC") == 0) {
        ld->t->nfc = 1;
        return ZT_OK;
    }
    ++*metaspace;
    if (type && strcmp(type, "Prepend") == 0 && is_metaspace(string_of(n, "prepend"))) {
        ld->t->prepend = BPE_PREPEND_ALWAYS;
        return ZT_OK;
    }
    const struct json_value *pattern = member(n, "pattern");
    if (type && strcmp(type, "Replace") == 0 && is_metaspace(string_of(n, "content")) &&
        string_of(pattern, "String") && strcmp(string_of(pattern, "String"), " ") == 0) {
        *spaces = 1;
        return ZT_OK;
    }
    return unsupported(ld->path, "normalizer", type ? type : "a normalizer without a type");
}

static zt_status take_normalizers(struct hf_loader *ld, const struct json_value *root, int *chars)
{
    const struct json_value *n = member(root, "normalizer");
    if (!n)
        return ZT_OK;
    int spaces = 0, metaspace = 0;
    const char *type = string_of(n, "type");
    if (type && strcmp(type, "Sequence") == 0) {
        const struct json_value *list = member(n, "normalizers");
        ZT_TRY(expect(ld->path, "normalizer.normalizers", list, JSON_ARRAY));
        for (size_t i = 0; i < list->n; i++)
            ZT_TRY(take_normalizer(ld, &list->items[i], &spaces, &metaspace));
    } else {
        ZT_TRY(take_normalizer(ld, n, &spaces, &metaspace));
    }
    if (!metaspace) /* NFC alone: the characters are left to the pre-tokenizer */
        return ZT_OK;
    if (!spaces)
        return unsupported(ld->path, "normalizer", "a \"▁\" prepended without spaces as \"▁\"");
    *chars = 1;
    return ZT_OK;
}

static zt_status take_metaspace(struct hf_loader *ld, const struct json_value *p)
{
    struct bpe_tokenizer *t = ld->t;
    if (!is_metaspace(string_of(p, "replacement")))
        return unsupported(ld->path, "pre_tokenizer", "Metaspace with another replacement");
    const char *scheme = string_of(p, "prepend_scheme");
    if (scheme && strcmp(scheme, "first") == 0)
        t->prepend = BPE_PREPEND_FIRST;
    else if (scheme && strcmp(scheme, "never") == 0)
        t->prepend = BPE_PREPEND_NEVER;
    else if (scheme || member(p, "add_prefix_space") == NULL || true_of(p, "add_prefix_space"))
        t->prepend = BPE_PREPEND_ALWAYS;
    else
        t->prepend = BPE_PREPEND_NEVER;
    if (scheme && strcmp(scheme, "always") != 0 && strcmp(scheme, "first") != 0 &&
        strcmp(scheme, "never") != 0)
        return unsupported(ld->path, "pre_tokenizer.prepend_scheme", scheme);
    t->metaspace = 1;
    t->split_metaspace = member(p, "split") ? true_of(p, "split") : 1;
    return ZT_OK;
}

/* One pre-tokenizer (not a Sequence). */
static zt_status take_pretokenizer(struct hf_loader *ld, const struct json_value *p, int *chars)
{
    const char *type = string_of(p, "type");
    if (type && strcmp(type, "ByteLevel") == 0) {
        if (true_of(p, "add_prefix_space"))
            return unsupported(ld->path, "pre_tokenizer", "ByteLevel with add_prefix_space");
        ld->byte_level = 1;
        if (!member(p, "use_regex") || true_of(p, "use_regex")) {
            if (ld->t->pretokenize)
                return unsupported(ld->path, "pre_tokenizer", "two splitting patterns");
            ld->t->pretokenize = pretokenize_next;
        }
        return ZT_OK;
    }
    if (type && strcmp(type, "Split") == 0) {
        const char *regex = string_of(member(p, "pattern"), "Regex");
        const char *behavior = string_of(p, "behavior");
        if (!regex || true_of(p, "invert") || !behavior || strcmp(behavior, "Isolated") != 0)
            return unsupported(ld->path, "pre_tokenizer",
                               "Split other than by a regex pattern, Isolated");
        if (ld->t->pretokenize)
            return unsupported(ld->path, "pre_tokenizer", "two splitting patterns");
        ld->t->pretokenize = pretokenize_find(regex);
        if (!ld->t->pretokenize)
            return zt_error_set(ZT_ERR_UNSUPPORTED,
                                "%s: pre_tokenizer: the Split pattern \"%s\" is not one zerotrain "
                                "writes out (GPT-2's, Llama 3's, Qwen2's, cl100k's, o200k's)",
                                ld->path, regex);
        return ZT_OK;
    }
    if (type && strcmp(type, "Metaspace") == 0) {
        *chars = 1;
        return take_metaspace(ld, p);
    }
    return unsupported(ld->path, "pre_tokenizer", type ? type : "a pre-tokenizer without a type");
}

static zt_status take_pretokenizers(struct hf_loader *ld, const struct json_value *root, int *chars)
{
    const struct json_value *p = member(root, "pre_tokenizer");
    if (!p)
        return ZT_OK;
    const char *type = string_of(p, "type");
    if (!type || strcmp(type, "Sequence") != 0)
        return take_pretokenizer(ld, p, chars);
    const struct json_value *list = member(p, "pretokenizers");
    ZT_TRY(expect(ld->path, "pre_tokenizer.pretokenizers", list, JSON_ARRAY));
    for (size_t i = 0; i < list->n; i++)
        ZT_TRY(take_pretokenizer(ld, &list->items[i], chars));
    return ZT_OK;
}

/* Whether the decoder drops the space the "▁" before the text made: a
 * Strip of a leading space, or a Metaspace decoder that prepends. */
static int strips_leading_space(const struct json_value *d)
{
    const char *type = string_of(d, "type");
    if (!type)
        return 0;
    if (strcmp(type, "Strip") == 0) {
        const struct json_value *start = member(d, "start");
        return start && start->type == JSON_INT && start->magnitude >= 1;
    }
    if (strcmp(type, "Metaspace") == 0) {
        const char *scheme = string_of(d, "prepend_scheme");
        return !(scheme && strcmp(scheme, "never") == 0) &&
               !(member(d, "add_prefix_space") && !true_of(d, "add_prefix_space"));
    }
    const struct json_value *list = member(d, "decoders");
    for (size_t i = 0; strcmp(type, "Sequence") == 0 && list && i < list->n; i++)
        if (list->type == JSON_ARRAY && strips_leading_space(&list->items[i]))
            return 1;
    return 0;
}

/* ---- the model ---- */

/* The bytes of token string s: through the byte alphabet when byte-level,
 * else as written. Into ld->scratch; returns the count, or SIZE_MAX with
 * the message set. */
static size_t token_text(struct hf_loader *ld, const char *key, const char *s, size_t *n)
{
    const size_t len = strlen(s);
    if (!ld->byte_level) {
        memcpy(ld->scratch, s, len);
        *n = len;
        return len;
    }
    uint32_t bad = 0;
    *n = bpe_alphabet_bytes(ld->byte_of, (const unsigned char *)s, len, ld->scratch, &bad);
    if (*n == SIZE_MAX)
        zt_error_set(ZT_ERR_CONFIG,
                     "%s: %s: token \"%s\" has U+%04X, not a character of the byte-level "
                     "alphabet",
                     ld->path, key, s, (unsigned)bad);
    return *n;
}

static zt_status check_model(struct hf_loader *ld, const struct json_value *model)
{
    ZT_TRY(expect(ld->path, "model", model, JSON_OBJECT));
    const char *type = string_of(model, "type");
    if (!type)
        return zt_error_set(ZT_ERR_CONFIG, "%s: model.type: missing, expected \"BPE\"", ld->path);
    if (strcmp(type, "BPE") != 0)
        return unsupported(ld->path, "model.type", type);
    const struct json_value *dropout = member(model, "dropout");
    if (dropout && !(dropout->type == JSON_INT && dropout->magnitude == 0) &&
        !(dropout->type == JSON_REAL && dropout->real == 0.0))
        return unsupported(ld->path, "model.dropout", "BPE dropout");
    const char *keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 2; i++) {
        const char *s = string_of(model, keys[i]);
        if (s && s[0])
            return unsupported(ld->path, keys[i], "a word prefix or suffix");
    }
    return ZT_OK;
}

/* Checks the ids of model.vocab (integers in 0 .. HF_MAX_ID) and sets
 * *size to the highest + 1, *bytes to the tokens' bytes. */
static zt_status scan_vocab(struct hf_loader *ld, const struct json_value *vocab, uint32_t *size,
                            size_t *bytes, size_t *longest)
{
    ZT_TRY(expect(ld->path, "model.vocab", vocab, JSON_OBJECT));
    if (vocab->n == 0)
        return zt_error_set(ZT_ERR_CONFIG, "%s: model.vocab: empty", ld->path);
    uint64_t top = 0;
    *bytes = *longest = 0;
    for (size_t i = 0; i < vocab->n; i++) {
        const struct json_value *v = &vocab->items[i];
        if (v->type != JSON_INT || v->negative || v->magnitude > HF_MAX_ID)
            return zt_error_set(ZT_ERR_CONFIG,
                                "%s: model.vocab: token \"%s\": the id must be an integer in 0 .. "
                                "%u, got %s",
                                ld->path, vocab->keys[i], HF_MAX_ID,
                                v->type == JSON_INT ? "one outside" : json_type_name(v->type));
        top = v->magnitude + 1 > top ? v->magnitude + 1 : top;
        const size_t len = strlen(vocab->keys[i]);
        *bytes += len;
        *longest = len > *longest ? len : *longest;
    }
    *size = (uint32_t)top;
    return ZT_OK;
}

static zt_status take_vocab(struct hf_loader *ld, const struct json_value *vocab)
{
    uint32_t size = 0;
    size_t bytes = 0, longest = 0;
    ZT_TRY(scan_vocab(ld, vocab, &size, &bytes, &longest));
    ld->longest = longest;
    /* A merge's two tokens side by side fill the scratch buffer at most. */
    ld->scratch = malloc(2 * longest + 8);
    size_t *by_id = malloc((size_t)size * sizeof *by_id);
    zt_status st = ld->scratch && by_id
                       ? bpe_tokenizer_reserve(ld->t, ld->path, size, vocab->n, bytes)
                       : zt_error_set(ZT_ERR_NOMEM, "%s: out of memory", ld->path);
    for (size_t i = 0; st == ZT_OK && i < size; i++)
        by_id[i] = SIZE_MAX;
    for (size_t i = 0; st == ZT_OK && i < vocab->n; i++) {
        const size_t id = (size_t)vocab->items[i].magnitude;
        if (by_id[id] != SIZE_MAX)
            st = zt_error_set(ZT_ERR_CONFIG,
                              "%s: model.vocab: tokens \"%s\" and \"%s\" both have "
                              "id %zu",
                              ld->path, vocab->keys[by_id[id]], vocab->keys[i], id);
        by_id[id] = i;
    }
    for (size_t id = 0; st == ZT_OK && id < size; id++) {
        if (by_id[id] == SIZE_MAX)
            continue;
        const char *key = vocab->keys[by_id[id]];
        size_t n;
        if (token_text(ld, "model.vocab", key, &n) == SIZE_MAX)
            st = ZT_ERR_CONFIG;
        else if (n == 0)
            st = zt_error_set(ZT_ERR_CONFIG, "%s: model.vocab: token %zu is empty", ld->path, id);
        else if (bpe_tokenizer_put_token(ld->t, (int32_t)id, ld->scratch, n) >= 0)
            st = zt_error_set(ZT_ERR_CONFIG, "%s: model.vocab: token \"%s\" is given twice",
                              ld->path, key);
    }
    free(by_id);
    return st;
}

/* The two token strings of merge i: "A B" or ["A", "B"]. */
static zt_status merge_strings(const struct hf_loader *ld, const struct json_value *m, size_t i,
                               char *split, const char **a, const char **b)
{
    if (m->type == JSON_ARRAY && m->n == 2 && m->items[0].type == JSON_STRING &&
        m->items[1].type == JSON_STRING) {
        *a = m->items[0].str;
        *b = m->items[1].str;
        return ZT_OK;
    }
    const char *space = m->type == JSON_STRING ? strchr(m->str, ' ') : NULL;
    if (!space || space == m->str || !space[1] || strchr(space + 1, ' '))
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: model.merges[%zu]: expected \"A B\" (two tokens and one space) or "
                            "[\"A\", \"B\"]",
                            ld->path, i);
    strcpy(split, m->str);
    split[space - m->str] = '\0';
    *a = split;
    *b = split + (space - m->str) + 1;
    return ZT_OK;
}

/* The id of token string s in merge i. A string longer than every key of
 * model.vocab is none of them (and more than the scratch buffer holds). */
static zt_status merge_token(struct hf_loader *ld, size_t i, const char *s, int32_t *id)
{
    size_t n = 0;
    char key[48];
    snprintf(key, sizeof key, "model.merges[%zu]", i);
    if (strlen(s) <= ld->longest && token_text(ld, key, s, &n) == SIZE_MAX)
        return ZT_ERR_CONFIG;
    *id = n > 0 ? bpe_token_id(ld->t->b, ld->scratch, n) : -1;
    if (*id < 0)
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s: token \"%s\" is not in model.vocab", ld->path,
                            key, s);
    return ZT_OK;
}

static zt_status take_merge(struct hf_loader *ld, const struct json_value *m, size_t i, char *split)
{
    const char *a = NULL, *b = NULL;
    ZT_TRY(merge_strings(ld, m, i, split, &a, &b));
    int32_t left, right;
    ZT_TRY(merge_token(ld, i, a, &left));
    ZT_TRY(merge_token(ld, i, b, &right));
    const struct bpe *bp = ld->t->b;
    const uint32_t la = bp->offsets[left + 1] - bp->offsets[left];
    const uint32_t lb = bp->offsets[right + 1] - bp->offsets[right];
    memcpy(ld->scratch, bp->bytes + bp->offsets[left], la);
    memcpy(ld->scratch + la, bp->bytes + bp->offsets[right], lb);
    const int32_t merged = bpe_token_id(bp, ld->scratch, la + lb);
    if (merged < 0)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s: model.merges[%zu]: \"%s\" + \"%s\" makes a token that is not in "
                            "model.vocab",
                            ld->path, i, a, b);
    bpe_tokenizer_put_merge(ld->t, left, right, merged, (uint32_t)i);
    return ZT_OK;
}

static zt_status take_merges(struct hf_loader *ld, const struct json_value *merges)
{
    ZT_TRY(expect(ld->path, "model.merges", merges, JSON_ARRAY));
    if (merges->n >= BPE_NO_RANK)
        return zt_error_set(ZT_ERR_CONFIG, "%s: model.merges: too many (%zu)", ld->path, merges->n);
    ZT_TRY(bpe_tokenizer_reserve_merges(ld->t, ld->path, merges->n));
    size_t longest = 0;
    for (size_t i = 0; i < merges->n; i++)
        if (merges->items[i].type == JSON_STRING && strlen(merges->items[i].str) > longest)
            longest = strlen(merges->items[i].str);
    char *split = malloc(longest + 1);
    if (!split)
        return zt_error_set(ZT_ERR_NOMEM, "%s: out of memory", ld->path);
    zt_status st = ZT_OK;
    for (size_t i = 0; st == ZT_OK && i < merges->n; i++)
        st = take_merge(ld, &merges->items[i], i, split);
    free(split);
    return st;
}

/* added_tokens: every entry's id and content; the texts point into the
 * tree. */
static zt_status take_added(struct hf_loader *ld, const struct json_value *root)
{
    const struct json_value *list = member(root, "added_tokens");
    size_t n = 0;
    if (list)
        ZT_TRY(expect(ld->path, "added_tokens", list, JSON_ARRAY));
    n = list ? list->n : 0;
    const unsigned char **texts = malloc((n > 0 ? n : 1) * sizeof *texts);
    size_t *lens = malloc((n > 0 ? n : 1) * sizeof *lens);
    int32_t *ids = malloc((n > 0 ? n : 1) * sizeof *ids);
    zt_status st =
        texts && lens && ids ? ZT_OK : zt_error_set(ZT_ERR_NOMEM, "%s: out of memory", ld->path);
    for (size_t i = 0; st == ZT_OK && i < n; i++) {
        const struct json_value *a = &list->items[i], *id = member(a, "id");
        const char *content = string_of(a, "content");
        const char *flags[] = {"lstrip", "rstrip", "single_word"};
        if (!id || id->type != JSON_INT || id->negative || id->magnitude > HF_MAX_ID || !content)
            st = zt_error_set(ZT_ERR_CONFIG,
                              "%s: added_tokens[%zu]: expected an object with an integer \"id\" "
                              "in 0 .. %u and a string \"content\"",
                              ld->path, i, HF_MAX_ID);
        for (size_t f = 0; st == ZT_OK && f < 3; f++)
            if (true_of(a, flags[f]))
                st = zt_error_set(ZT_ERR_UNSUPPORTED,
                                  "%s: added_tokens[%zu] (\"%s\"): %s is not supported", ld->path,
                                  i, content, flags[f]);
        if (st == ZT_OK) {
            texts[i] = (const unsigned char *)content;
            lens[i] = strlen(content);
            ids[i] = (int32_t)id->magnitude;
        }
    }
    if (st == ZT_OK)
        st = bpe_tokenizer_finish(ld->t, ld->path, texts, lens, ids, n);
    free(texts);
    free(lens);
    free(ids);
    return st;
}

/* The id of the token a model option names ("unk_token"), or -1. */
static zt_status named_token(struct hf_loader *ld, const char *file, const char *key,
                             const struct json_value *v, int32_t *id)
{
    const char *s = v && v->type == JSON_STRING ? v->str : string_of(v, "content");
    *id = -1;
    if (!v)
        return ZT_OK;
    if (!s)
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s: expected a token's text", file, key);
    *id = bpe_tokenizer_find(ld->t, (const unsigned char *)s, strlen(s));
    if (*id < 0)
        return zt_error_set(ZT_ERR_CONFIG, "%s: %s: \"%s\" is not a token of %s", file, key, s,
                            ld->path);
    return ZT_OK;
}

static zt_status take_tokenizer(struct hf_loader *ld, const struct json_value *root)
{
    struct bpe_tokenizer *t = ld->t;
    if (root->type != JSON_OBJECT)
        return zt_error_set(ZT_ERR_CONFIG, "%s: expected an object, got %s", ld->path,
                            json_type_name(root->type));
    const struct json_value *model = member(root, "model");
    ZT_TRY(check_model(ld, model));
    int chars = 0;
    t->prepend = BPE_PREPEND_NEVER;
    ZT_TRY(take_normalizers(ld, root, &chars));
    ZT_TRY(take_pretokenizers(ld, root, &chars));
    if (ld->byte_level == chars)
        return unsupported(ld->path, "pre_tokenizer",
                           chars ? "a byte-level vocabulary with \"▁\" for spaces"
                                 : "a vocabulary neither byte-level (ByteLevel) nor "
                                   "SentencePiece-style (\"▁\" for spaces)");
    if (t->pretokenize && chars)
        return unsupported(ld->path, "pre_tokenizer", "Split with \"▁\" for spaces");
    t->symbols = chars ? BPE_SYMBOLS_CHARS : BPE_SYMBOLS_BYTES;
    t->strip_leading_space = chars && strips_leading_space(member(root, "decoder"));
    t->byte_fallback = true_of(model, "byte_fallback");
    t->fuse_unk = true_of(model, "fuse_unk");
    t->b->whole_pieces = true_of(model, "ignore_merges");
    ZT_TRY(take_vocab(ld, member(model, "vocab")));
    ZT_TRY(take_merges(ld, member(model, "merges")));
    ZT_TRY(take_added(ld, root));
    return named_token(ld, ld->path, "model.unk_token", member(model, "unk_token"), &t->unk_id);
}

/* chat_template's Jinja: a string, or a list of named ones of which
 * "default" is what apply_chat_template uses. */
static zt_status take_chat_template(struct bpe_tokenizer *t, const struct json_value *v)
{
    const char *jinja = v && v->type == JSON_STRING ? v->str : NULL;
    for (size_t i = 0; v && v->type == JSON_ARRAY && i < v->n; i++) {
        const char *name = string_of(&v->items[i], "name");
        if (name && strcmp(name, "default") == 0)
            jinja = string_of(&v->items[i], "template");
    }
    if (jinja && !(t->chat_template = strdup(jinja)))
        return zt_error_set(ZT_ERR_NOMEM, "cannot keep the tokenizer's chat_template");
    return ZT_OK;
}

/* tokenizer_config.json, when there is one: bos_token, eos_token and
 * chat_template. */
static zt_status take_config(struct hf_loader *ld, const char *dir)
{
    char *path = data_join_path(dir, "tokenizer_config.json");
    if (!path)
        return zt_error_set(ZT_ERR_NOMEM, "%s: out of memory", dir);
    struct stat sb;
    char *text = NULL;
    size_t len = 0;
    zt_status st = ZT_OK;
    if (stat(path, &sb) == 0)
        st = zt_read_small_file(path, CONFIG_JSON_MAX, ZT_ERR_CONFIG, &text, &len);
    struct json_value root = {0};
    if (st == ZT_OK && text) {
        const struct json_source src = {path, NULL, ZT_ERR_CONFIG, 32};
        st = json_parse(&src, text, len, &root);
        if (st == ZT_OK && root.type != JSON_OBJECT)
            st = zt_error_set(ZT_ERR_CONFIG, "%s: expected an object", path);
        if (st == ZT_OK)
            st = named_token(ld, path, "bos_token", member(&root, "bos_token"), &ld->t->bos);
        if (st == ZT_OK)
            st = named_token(ld, path, "eos_token", member(&root, "eos_token"), &ld->t->eos);
        if (st == ZT_OK)
            st = take_chat_template(ld->t, member(&root, "chat_template"));
    }
    json_free(&root);
    free(text);
    free(path);
    return st;
}

#define HF_HINT                                                                                    \
    "a model's tokenizer.json is beside its config.json; scripts/tokenizers.sh fetches "           \
    "reference ones"

static zt_status load_file(struct hf_loader *ld, const char *dir)
{
    ZT_TRY(data_check_present(dir, "folder", ZT_ERR_CONFIG, HF_HINT));
    ZT_TRY(data_check_present(ld->path, "file", ZT_ERR_CONFIG, HF_HINT));
    char *text;
    size_t len;
    ZT_TRY(zt_read_small_file(ld->path, TOKENIZER_JSON_MAX, ZT_ERR_CONFIG, &text, &len));
    const struct json_source src = {ld->path, NULL, ZT_ERR_CONFIG, 32};
    struct json_value root;
    zt_status st = json_parse(&src, text, len, &root);
    free(text);
    ZT_TRY(st);
    st = take_tokenizer(ld, &root);
    json_free(&root);
    ZT_TRY(st);
    return take_config(ld, dir);
}

zt_status hf_tokenizer_load(const char *dir, struct bpe_tokenizer **out)
{
    *out = NULL;
    struct hf_loader ld = {0};
    bpe_alphabet_build(ld.byte_of);
    char *path = data_join_path(dir, "tokenizer.json");
    zt_status st =
        path ? bpe_tokenizer_new(&ld.t) : zt_error_set(ZT_ERR_NOMEM, "%s: out of memory", dir);
    ld.path = path;
    if (st == ZT_OK)
        st = load_file(&ld, dir);
    free(ld.scratch);
    free(path);
    if (st != ZT_OK) {
        bpe_tokenizer_free(ld.t);
        return st;
    }
    *out = ld.t;
    return ZT_OK;
}
