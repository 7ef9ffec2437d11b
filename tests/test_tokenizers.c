/* tests/test_tokenizers.c — the tokenizer.json and tiktoken rows of the
 * tokenizer table against the npm packages' own encoders, and
 * `zerotrain tokenize`.
 *
 * The vocabularies are those scripts/tokenizers.sh fetches and verifies
 * (scripts/test.sh runs it before the tests): llama3, llama2, mistral,
 * cl100k and o200k under $ZT_TOKENIZERS_DIR, else the script's default
 * cache folder; when one is missing the tests that need it fail saying how
 * to get it. The reference ids come from running each package's encoder
 * with node on tests/data/tokenizer_corpus.json (scripts/tokenizers/
 * reference.mjs): code, CJK, emoji, combining marks, white space runs,
 * digits, letter case changes and special tokens. They must equal
 * zerotrain's id for id, and every text must decode back to its bytes
 * (SentencePiece-style vocabularies aside where Hugging Face's do not
 * either: a special token in the text, or a literal "▁").
 *
 * Small tokenizer.json files written here check what the real ones cannot:
 * each way a file can be malformed or ask for what is not supported.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/json.h"
#include "../data/data.h"
#include "../data/nfc.h"
#include "testutil.h"

/* ---- the reference vocabularies ---- */

struct reference {
    const char *name, *file, *row; /* fetched as NAME, holding FILE, opened as ROW */
    uint32_t vocab;
    int32_t eot, bos;
    int sentencepiece;
};

static const struct reference references[] = {
    {"llama3", "tokenizer.json", "hf", 128256, 128001, 128000, 0},
    {"llama2", "tokenizer.json", "hf", 32000, 2, 1, 1},
    {"mistral", "tokenizer.json", "hf", 32000, 2, 1, 1},
    {"cl100k", "cl100k_base.tiktoken", "cl100k", 100277, 100257, -1, 0},
    {"o200k", "o200k_base.tiktoken", "o200k", 200019, 199999, -1, 0},
};

static struct tokenizer *open_reference(const struct reference *r)
{
    struct tokenizer *t;
    /* No name: the folder's files say which row reads it. */
    zt_status st = tokenizer_open(NULL, testutil_tokenizer_dir(r->name, r->file), &t);
    ck_assert_msg(st == ZT_OK, "%s: %s", r->name, zt_error_message());
    ck_assert_str_eq(tokenizer_name(t), r->row);
    ck_assert_uint_eq(tokenizer_vocab_size(t), r->vocab);
    ck_assert_int_eq(tokenizer_eot_id(t), r->eot);
    ck_assert_int_eq(tokenizer_bos_id(t), r->bos);
    return t;
}

/* The corpus, as an array of strings (owned by the caller's root). */
static const struct json_value *load_corpus(struct json_value *root)
{
    testutil_load_json(testutil_source_path("tests/data/tokenizer_corpus.json"), root);
    ck_assert_int_eq(root->type, JSON_ARRAY);
    ck_assert_uint_ge(root->n, 30);
    return root;
}

/* The reference encoder's ids of every text: one line each. */
static char *reference_ids(const struct reference *r)
{
    const char *out = testutil_path_in(testutil_tmpdir("tokenizers-ref"), r->name);
    const char *log = testutil_path_in(testutil_tmpdir("tokenizers-ref"), "log");
    const int rc = testutil_run(log, "{ node %s %s %s %s > %s; }",
                                testutil_source_path("scripts/tokenizers/reference.mjs"), r->name,
                                testutil_path_in(testutil_tokenizers_root(), "npm/node_modules"),
                                testutil_source_path("tests/data/tokenizer_corpus.json"), out);
    ck_assert_msg(rc == 0,
                  "the reference encoder of %s failed (exit %d; node and the packages "
                  "come with scripts/tokenizers.sh): %s",
                  r->name, rc, testutil_slurp(log));
    size_t n;
    char *text = (char *)testutil_read_file(out, &n);
    ck_assert(text != NULL);
    return text;
}

/* Line i of the reference output as ids. */
static void parse_line(const char *line, size_t len, struct json_value *ids)
{
    const struct json_source src = {"reference ids", NULL, ZT_ERR_DATA, 2};
    ck_assert_msg(json_parse(&src, line, len, ids) == ZT_OK, "%s", zt_error_message());
    ck_assert_int_eq(ids->type, JSON_ARRAY);
}

static void expect_ids(const struct reference *r, size_t i, const char *text,
                       const struct token_buffer *got, const struct json_value *want)
{
    size_t first = SIZE_MAX;
    for (size_t k = 0; k < want->n && k < got->n && first == SIZE_MAX; k++)
        if ((int64_t)want->items[k].magnitude != got->tokens[k])
            first = k;
    ck_assert_msg(got->n == want->n && first == SIZE_MAX,
                  "%s, text %zu (\"%.60s\"): %zu ids, the reference %zu; first difference at %zu",
                  r->name, i, text, got->n, want->n, first);
}

/* Hugging Face's SentencePiece-style vocabularies do not give back a
 * special token's neighbourhood (each part gets its own "▁") or a literal
 * "▁" (decoded as a space). */
static int round_trips(const struct reference *r, const char *text)
{
    return !r->sentencepiece || (!strstr(text, "<s>") && !strstr(text, "</s>") &&
                                 !strstr(text, "<unk>") && !strstr(text, "\xE2\x96\x81"));
}

static void expect_round_trip(const struct tokenizer *t, const struct token_buffer *ids,
                              const void *text, size_t n, const char *what)
{
    unsigned char *back;
    size_t len;
    zt_status st = tokenizer_decode(t, ids->tokens, ids->n, &back, &len);
    ck_assert_msg(st == ZT_OK, "%s: %s", what, zt_error_message());
    ck_assert_msg(len == n && memcmp(back, text, n) == 0, "%s: %zu bytes decode to %zu others",
                  what, n, len);
    free(back);
}

START_TEST(test_reference_ids)
{
    const struct reference *r = &references[_i];
    struct tokenizer *t = open_reference(r);
    struct json_value corpus;
    load_corpus(&corpus);
    char *ref = reference_ids(r);
    const char *line = ref;
    for (size_t i = 0; i < corpus.n; i++) {
        const char *end = strchr(line, '\n');
        ck_assert_msg(end != NULL, "%s: the reference has %zu lines, not %zu", r->name, i,
                      corpus.n);
        struct json_value want;
        parse_line(line, (size_t)(end - line), &want);
        const char *text = corpus.items[i].str;
        struct token_buffer got = {0};
        ck_assert_msg(tokenizer_encode(t, (const unsigned char *)text, strlen(text), &got) == ZT_OK,
                      "%s", zt_error_message());
        expect_ids(r, i, text, &got, &want);
        if (round_trips(r, text))
            expect_round_trip(t, &got, text, strlen(text), testutil_fmt("%s text %zu", r->name, i));
        token_buffer_free(&got);
        json_free(&want);
        line = end + 1;
    }
    free(ref);
    json_free(&corpus);
    tokenizer_close(t);
}
END_TEST

/* Bytes that are not UTF-8 and every byte value: byte-level vocabularies
 * and byte fallback give them back exactly. */
START_TEST(test_any_bytes_round_trip)
{
    const struct reference *r = &references[_i];
    struct tokenizer *t = open_reference(r);
    unsigned char text[600];
    for (size_t i = 0; i < 256; i++)
        text[i] = (unsigned char)(i == 0 ? 1 : i);
    uint64_t s = 0x9E3779B97F4A7C15ULL;
    for (size_t i = 256; i < sizeof text; i++) {
        s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
        text[i] = (unsigned char)((s * 0x2545F4914F6CDD1DULL) >> 56);
    }
    text[0] = 'x'; /* not a space: SentencePiece's decoder strips a leading one */
    struct token_buffer ids = {0};
    ck_assert_msg(tokenizer_encode(t, text, sizeof text, &ids) == ZT_OK, "%s", zt_error_message());
    expect_round_trip(t, &ids, text, sizeof text, r->name);
    token_buffer_free(&ids);
    tokenizer_close(t);
}
END_TEST

/* The Llama 3 vocabulary through prepare: ids over 65,536 take 4 bytes,
 * and the token file reads back as the encoder's ids. */
START_TEST(test_prepare_llama3_width4)
{
    const char *vocab = testutil_tokenizer_dir("llama3", "tokenizer.json");
    const char *dir = testutil_tmpdir("tokenizers-prepare");
    const char *a = testutil_path_in(dir, "a.txt"), *b = testutil_path_in(dir, "b.txt");
    testutil_write_file(a, "Hello world", 11);
    testutil_write_file(b, "日本語", 9);
    const char *out = testutil_path_in(dir, "out.tok"), *log = testutil_path_in(dir, "log");
    ck_assert_int_eq(testutil_run(log, "%s prepare --tokenizer-dir %s --out %s %s %s",
                                  testutil_binary(), vocab, out, a, b),
                     0);
    ck_assert_msg(strstr(testutil_slurp(log), "(128256 vocab, 4-byte ids) from 2 files"), "%s",
                  testutil_slurp(log));
    struct token_buffer got = {0};
    ck_assert_msg(tokfile_read(out, &got) == ZT_OK, "%s", zt_error_message());
    /* "Hello" " world", <|end_of_text|>, then 日本語: an id past 65,535. */
    const int32_t want[] = {9906, 1917, 128001, 102433, 102158};
    ck_assert_uint_eq(got.n, 5);
    ck_assert_uint_eq(got.vocab_size, 128256);
    ck_assert_mem_eq(got.tokens, want, sizeof want);
    token_buffer_free(&got);
}
END_TEST

/* The start-up checks of a run: a tokenizer larger than model.vocab_size
 * (both numbers named), bytes given to a model whose files come with a
 * tokenizer, and model.vocab_size up to 2^31 - 1. */
START_TEST(test_run_start_errors)
{
    const char *vocab = testutil_tokenizer_dir("llama3", "tokenizer.json");
    const char *dir = testutil_tmpdir("tokenizers-run"), *log = testutil_path_in(dir, "log");
    const char *tiny = testutil_source_path("configs/tiny.yaml");
    int rc = testutil_run(log,
                          "%s train %s --set data.tokenizer=hf --set data.tokenizer_dir=%s "
                          "--set run.output_dir=%s/out",
                          testutil_binary(), tiny, vocab, dir);
    ck_assert_msg(rc == 2 && strstr(testutil_slurp(log),
                                    "model.vocab_size: 256 is smaller than the vocabulary of "
                                    "data.tokenizer hf (128256 ids)"),
                  "exit %d: %s", rc, testutil_slurp(log));
    const char *model = testutil_path_in(dir, "model");
    ck_assert_int_eq(
        testutil_run(log, "mkdir -p %s && cp %s/tokenizer.json %s/", model, vocab, model), 0);
    testutil_write_file(testutil_path_in(model, "config.json"), "{}", 2);
    rc = testutil_run(log, "%s train %s --set model.init_from=%s --dry-run", testutil_binary(),
                      tiny, model);
    ck_assert_msg(rc == 2 && strstr(testutil_slurp(log),
                                    testutil_fmt("data.tokenizer: bytes, but model.init_from (%s) "
                                                 "comes with a tokenizer in %s",
                                                 model, model)),
                  "exit %d: %s", rc, testutil_slurp(log));
    rc = testutil_run(
        log, "%s train %s --set model.vocab_size=128256 --dry-run --set run.output_dir=%s/o",
        testutil_binary(), tiny, dir);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, testutil_slurp(log));
    rc = testutil_run(log, "%s train %s --set model.vocab_size=2147483648 --dry-run",
                      testutil_binary(), tiny);
    ck_assert_msg(rc == 2 && strstr(testutil_slurp(log), "model.vocab_size"), "exit %d: %s", rc,
                  testutil_slurp(log));
}
END_TEST

/* ---- zerotrain tokenize ---- */

START_TEST(test_tokenize_command)
{
    const char *vocab = testutil_tokenizer_dir("cl100k", "cl100k_base.tiktoken");
    const char *dir = testutil_tmpdir("tokenizers-cmd");
    const char *in = testutil_path_in(dir, "in.txt"), *ids = testutil_path_in(dir, "ids.json");
    const char *log = testutil_path_in(dir, "log"), *back = testutil_path_in(dir, "back.txt");
    testutil_write_file(in, "Hello world!<|endoftext|>", 25);
    ck_assert_int_eq(testutil_run(ids,
                                  "%s tokenize --tokenizer cl100k --tokenizer-dir %s --file %s",
                                  testutil_binary(), vocab, in),
                     0);
    ck_assert_str_eq(testutil_slurp(ids), "[9906, 1917, 0, 100257]\n");
    ck_assert_int_eq(testutil_run(back, "%s tokenize --tokenizer-dir %s --decode < %s",
                                  testutil_binary(), vocab, ids),
                     0);
    ck_assert_str_eq(testutil_slurp(back), "Hello world!<|endoftext|>");
    /* Bytes in, byte ids out, without a folder. */
    ck_assert_int_eq(testutil_run(log, "printf 'ab' | %s tokenize", testutil_binary()), 0);
    ck_assert_str_eq(testutil_slurp(log), "[97, 98]\n");
    const struct {
        const char *args, *message;
    } bad[] = {
        {"--tokenizer gpt3", "unknown tokenizer 'gpt3'"},
        {"--frobnicate", "'--frobnicate': unknown option"},
        {"--file", "--file needs a value"},
        {testutil_fmt("--file %s/none.txt", dir), "none.txt: no such file"},
        {testutil_fmt("--tokenizer-dir %s", dir), "holds no tokenizer zerotrain knows"},
        {testutil_fmt("--tokenizer hf --tokenizer-dir %s", dir), "tokenizer.json: no such file"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const int rc =
            testutil_run(log, "printf 'x' | %s tokenize %s", testutil_binary(), bad[i].args);
        ck_assert_msg(rc == 2 && strstr(testutil_slurp(log), bad[i].message) &&
                          testutil_count(testutil_slurp(log), "zerotrain: error:") == 1,
                      "%s: exit %d: %s", bad[i].args, rc, testutil_slurp(log));
    }
    const char *decode_bad[][2] = {
        {"[1, \"x\"]", "item 1: expected an id"},
        {"{}", "expected a JSON array of ids"},
        {"[1, 2", "not valid JSON"},
        {"[100261]", "id 100261 at position 0 names no token"},
        {"[300000]", "id 300000 at position 0 is outside 0 .. 100276"},
    };
    for (size_t i = 0; i < sizeof decode_bad / sizeof decode_bad[0]; i++) {
        testutil_write_file(ids, decode_bad[i][0], strlen(decode_bad[i][0]));
        const int rc = testutil_run(log, "%s tokenize --tokenizer-dir %s --decode --file %s",
                                    testutil_binary(), vocab, ids);
        ck_assert_msg(rc != 0 && strstr(testutil_slurp(log), decode_bad[i][1]), "%s: exit %d: %s",
                      decode_bad[i][0], rc, testutil_slurp(log));
    }
}
END_TEST

/* ---- Qwen2's NFC normalizer ---- */

/* Llama 3's files, its tokenizer.json given Qwen2's normalizer. */
static const char *llama3_with_nfc(void)
{
    const char *dir = testutil_tmpdir("tokenizers-nfc");
    const char *from = testutil_tokenizer_dir("llama3", "tokenizer.json");
    size_t n;
    char *json = (char *)testutil_read_file(testutil_path_in(from, "tokenizer.json"), &n);
    json[n] = '\0';
    const char *null = "\"normalizer\": null", *nfc = "\"normalizer\": {\"type\": \"NFC\"}";
    char *at = strstr(json, null);
    ck_assert_msg(at != NULL, "Llama 3's tokenizer.json has no %s", null);
    FILE *f = fopen(testutil_path_in(dir, "tokenizer.json"), "wb");
    ck_assert_ptr_nonnull(f);
    fwrite(json, 1, (size_t)(at - json), f);
    fputs(nfc, f);
    fputs(at + strlen(null), f);
    ck_assert_int_eq(fclose(f), 0);
    free(json);
    unsigned char *config = testutil_read_file(testutil_path_in(from, "tokenizer_config.json"), &n);
    testutil_write_file(testutil_path_in(dir, "tokenizer_config.json"), config, n);
    free(config);
    return dir;
}

static void encode(const struct tokenizer *t, const void *text, size_t n, struct token_buffer *out)
{
    ck_assert_msg(tokenizer_encode(t, text, n, out) == ZT_OK, "%s", zt_error_message());
}

/* With "normalizer": {"type": "NFC"} (Qwen2's) every corpus text, and texts
 * NFC changes, encode as Llama 3's vocabulary (checked against its npm
 * encoder above) encodes their NFC form. Added tokens are found in the
 * text as given: a mark after "<|eot_id|>" does not compose with its ">". */
START_TEST(test_nfc_normalizer)
{
    struct tokenizer *plain = open_reference(&references[0]), *t;
    zt_status st = tokenizer_open(NULL, llama3_with_nfc(), &t);
    ck_assert_msg(st == ZT_OK, "%s", zt_error_message());
    struct json_value corpus;
    load_corpus(&corpus);
    static const char *const extra[] = {
        "Cafe\xCC\x81 na\xC3\xAFve",
        "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB\xE1\x84\x80\xE1\x85\xB3\xE1\x86\xAF",
        "\xE2\x84\xAB\xE2\x84\xA6 5\xE2\x84\xAB", "q\xCC\x87\xCC\xA3 a\xCC\x81\xCC\xA3 x\xCC\xB8",
        "Vie\xCC\xA3\xCC\x82t Nam"};
    const size_t n_extra = sizeof extra / sizeof extra[0];
    size_t changed = 0;
    for (size_t i = 0; i < corpus.n + n_extra; i++) {
        const char *text = i < corpus.n ? corpus.items[i].str : extra[i - corpus.n];
        unsigned char *normal;
        size_t n;
        ck_assert_int_eq(nfc_normalize((const unsigned char *)text, strlen(text), &normal, &n),
                         ZT_OK);
        changed += normal && (n != strlen(text) || memcmp(normal, text, n) != 0);
        struct token_buffer got = {0}, want = {0};
        encode(t, text, strlen(text), &got);
        encode(plain, normal ? (const char *)normal : text, normal ? n : strlen(text), &want);
        ck_assert_msg(
            got.n == want.n &&
                (got.n == 0 || memcmp(got.tokens, want.tokens, got.n * sizeof *got.tokens) == 0),
            "text %zu (\"%.60s\"): %zu ids, %zu for its NFC form", i, text, got.n, want.n);
        token_buffer_free(&got);
        token_buffer_free(&want);
        free(normal);
    }
    ck_assert_uint_ge(changed, n_extra);
    struct token_buffer got = {0}, mark = {0};
    encode(t, "<|eot_id|>\xCC\xB8", 12, &got);
    encode(plain, "\xCC\xB8", 2, &mark);
    ck_assert_uint_eq(got.n, 1 + mark.n);
    ck_assert_int_eq(got.tokens[0], 128009);
    ck_assert_mem_eq(got.tokens + 1, mark.tokens, mark.n * sizeof *mark.tokens);
    token_buffer_free(&got);
    token_buffer_free(&mark);
    json_free(&corpus);
    tokenizer_close(t);
    tokenizer_close(plain);
}
END_TEST

/* ---- broken and unsupported tokenizer.json files ---- */

/* A byte-level tokenizer.json over the 256 bytes (written in GPT-2's
 * alphabet) and the tokens "ab", "abc", with `extra` spliced into the
 * top-level object and `merges` as the merge list. */
static const char *mini_json(const char *extra, const char *merges)
{
    struct json_text j = {0};
    json_text_puts(&j, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
    unsigned next = 0x100;
    for (unsigned b = 0; b < 256; b++) {
        const int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        json_text_printf(&j, "%s\"\\u%04X\": %u", b ? ", " : "", printable ? b : next++, b);
    }
    json_text_printf(&j, ", \"ab\": 256, \"abc\": 257}, \"merges\": %s}, %s}", merges, extra);
    ck_assert(!j.oom);
    const char *json = testutil_fmt("%s", j.p);
    free(j.p);
    return json;
}

#define BYTE_LEVEL "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"use_regex\": true}"

/* Writes tokenizer.json (and tokenizer_config.json unless NULL) into a new
 * folder and expects the open to give `want` with `message`. */
static void expect_open(const char *json, const char *config, zt_status want, const char *message)
{
    const char *dir = testutil_tmpdir("tokenizers-mini");
    testutil_write_file(testutil_path_in(dir, "tokenizer.json"), json, strlen(json));
    if (config)
        testutil_write_file(testutil_path_in(dir, "tokenizer_config.json"), config, strlen(config));
    else
        unlink(testutil_path_in(dir, "tokenizer_config.json"));
    struct tokenizer *t = NULL;
    const zt_status st = tokenizer_open("hf", dir, &t);
    ck_assert_msg(st == want, "%s: %s, expected %s (%s)", message, zt_status_str(st),
                  zt_status_str(want), zt_error_message());
    ck_assert_msg(want == ZT_OK || strstr(zt_error_message(), message), "message '%s' lacks '%s'",
                  zt_error_message(), message);
    if (want == ZT_OK) {
        struct token_buffer ids = {0};
        ck_assert(tokenizer_encode(t, (const unsigned char *)"abc abd", 7, &ids) == ZT_OK);
        const int32_t expected[] = {257, ' ', 256, 'd'};
        ck_assert_uint_eq(ids.n, 4);
        ck_assert_mem_eq(ids.tokens, expected, sizeof expected);
        token_buffer_free(&ids);
    }
    tokenizer_close(t);
}

START_TEST(test_broken_files)
{
    const char *merges = "[\"a b\", [\"ab\", \"c\"]]";
    expect_open(mini_json(BYTE_LEVEL, merges), "{\"eos_token\": {\"content\": \"abc\"}}", ZT_OK,
                "");
    expect_open("{\"model\": ", NULL, ZT_ERR_CONFIG, "tokenizer.json: not valid JSON at byte");
    expect_open("[]", NULL, ZT_ERR_CONFIG, "expected an object, got an array");
    expect_open("{\"model\": {\"type\": \"Unigram\"}}", NULL, ZT_ERR_UNSUPPORTED,
                "model.type: Unigram is not supported");
    expect_open(mini_json(BYTE_LEVEL, "[\"a xy\"]"), NULL, ZT_ERR_CONFIG,
                "model.merges[0]: token \"xy\" is not in model.vocab");
    /* A merge's token longer than every token of the vocabulary. */
    expect_open(mini_json(BYTE_LEVEL, "[\"a xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"]"), NULL,
                ZT_ERR_CONFIG,
                "model.merges[0]: token \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\" is not");
    /* Ids that would size the tables in gigabytes. */
    expect_open(mini_json(BYTE_LEVEL ", \"added_tokens\": [{\"id\": 2147483640, \"content\": "
                                     "\"<x>\"}]",
                          merges),
                NULL, ZT_ERR_CONFIG,
                "added_tokens[0]: expected an object with an integer \"id\" in 0 .. 16777215");
    expect_open(
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 16777216}, \"merges\": []}, " BYTE_LEVEL
        "}",
        NULL, ZT_ERR_CONFIG,
        "model.vocab: token \"a\": the id must be an integer in 0 .. 16777215");
    expect_open(mini_json(BYTE_LEVEL, "[\"a c\"]"), NULL, ZT_ERR_CONFIG,
                "model.merges[0]: \"a\" + \"c\" makes a token that is not in model.vocab");
    expect_open(mini_json(BYTE_LEVEL, "[\"ab\"]"), NULL, ZT_ERR_CONFIG,
                "model.merges[0]: expected \"A B\"");
    expect_open(mini_json(BYTE_LEVEL, "{}"), NULL, ZT_ERR_CONFIG,
                "model.merges: expected an array, got an object");
    expect_open(mini_json("\"normalizer\": {\"type\": \"NFC\"}, " BYTE_LEVEL, merges), NULL, ZT_OK,
                "");
    expect_open(mini_json("\"normalizer\": {\"type\": \"NFKC\"}, " BYTE_LEVEL, merges), NULL,
                ZT_ERR_UNSUPPORTED, "normalizer: NFKC is not supported");
    expect_open(mini_json("\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": "
                          "[{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\d+\"}, "
                          "\"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"use_regex\": "
                          "false}]}",
                          merges),
                NULL, ZT_ERR_UNSUPPORTED, "the Split pattern \"\\d+\" is not one zerotrain");
    expect_open(mini_json(BYTE_LEVEL ", \"added_tokens\": [{\"id\": 258, \"content\": \"<x>\", "
                                     "\"lstrip\": true}]",
                          merges),
                NULL, ZT_ERR_UNSUPPORTED, "added_tokens[0] (\"<x>\"): lstrip is not supported");
    expect_open(mini_json(BYTE_LEVEL ", \"added_tokens\": [{\"content\": \"<x>\"}]", merges), NULL,
                ZT_ERR_CONFIG, "added_tokens[0]: expected an object with an integer \"id\"");
    expect_open(mini_json("\"pre_tokenizer\": null", merges), NULL, ZT_ERR_UNSUPPORTED,
                "neither byte-level (ByteLevel) nor SentencePiece-style");
    expect_open(mini_json(BYTE_LEVEL, merges), "{\"eos_token\": \"</s>\"}", ZT_ERR_CONFIG,
                "tokenizer_config.json: eos_token: \"</s>\" is not a token of");
    expect_open(mini_json(BYTE_LEVEL, merges), "{\"eos_token\": ", ZT_ERR_CONFIG,
                "tokenizer_config.json: not valid JSON");
    /* A byte-level vocabulary without a token for each byte. */
    expect_open(
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, " BYTE_LEVEL "}",
        NULL, ZT_ERR_CONFIG, "has no token for the byte 0x00");
}
END_TEST

/* tiktoken rank files: a line out of order or not base64. */
START_TEST(test_broken_rank_files)
{
    const char *dir = testutil_tmpdir("tokenizers-ranks");
    const char *path = testutil_path_in(dir, "cl100k_base.tiktoken");
    const struct {
        const char *text, *message;
    } bad[] = {
        {"QQ== 0\nQg== 2\n", "cl100k_base.tiktoken:2: expected rank 1 after the token"},
        {"QQ== 0\n!!!! 1\n", "cl100k_base.tiktoken:2: the token is not base64"},
        {"QQ== 0\nQQ== 1\n", "cl100k_base.tiktoken:2: the token of rank 0 again"},
        {"QQ== 0", "does not end with a newline"},
        {"QQ==\n", "cl100k_base.tiktoken:1: expected \"BASE64 RANK\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        testutil_write_file(path, bad[i].text, strlen(bad[i].text));
        struct tokenizer *t = NULL;
        const zt_status st = tokenizer_open("cl100k", dir, &t);
        ck_assert_msg(st == ZT_ERR_CONFIG && strstr(zt_error_message(), bad[i].message), "%s: %s",
                      bad[i].message, zt_error_message());
    }
    /* More ranks than come before cl100k's first special token (100257). */
    const size_t n = 100258;
    char *ranks = malloc(n * 16);
    size_t len = 0;
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t r = 0; r < n; r++) /* three bytes r+1, four base64 characters */
        len +=
            (size_t)sprintf(ranks + len, "%c%c%c%c %zu\n", b64[(r + 1) >> 18 & 63],
                            b64[(r + 1) >> 12 & 63], b64[(r + 1) >> 6 & 63], b64[(r + 1) & 63], r);
    testutil_write_file(path, ranks, len);
    free(ranks);
    struct tokenizer *big = NULL;
    ck_assert_int_eq(tokenizer_open("cl100k", dir, &big), ZT_ERR_CONFIG);
    ck_assert_msg(strstr(zt_error_message(),
                         "100258 ranks, but cl100k's <|endoftext|> has id 100257: not cl100k's"),
                  "%s", zt_error_message());
    unlink(path);
    struct tokenizer *t = NULL;
    ck_assert_int_eq(tokenizer_open("cl100k", dir, &t), ZT_ERR_CONFIG);
    ck_assert_msg(strstr(zt_error_message(), "no such file (scripts/tokenizers.sh cl100k"), "%s",
                  zt_error_message());
}
END_TEST

/* ---- chat templates: "messages" lines token by token ---- */

/* Loads one JSONL line with tokenizer tok and template (NULL: the
 * tokenizer's) into *out: packed when seq_len is 0, else one window of
 * seq_len. */
static zt_status load_chat_window(const struct tokenizer *tok, const char *template,
                                  const char *line, int seq_len, struct token_buffer *out)
{
    const char *path = testutil_path_in(testutil_tmpdir("chat"), "chat.jsonl");
    testutil_write_file(path, line, strlen(line));
    const struct jsonl_options opt = {.tokenizer = tok,
                                      .packing = seq_len == 0,
                                      .seq_len = seq_len ? seq_len : 8,
                                      .chat_template = template};
    return jsonl_load(&path, 1, &opt, out, NULL);
}

static zt_status load_chat(const struct tokenizer *tok, const char *template, const char *line,
                           struct token_buffer *out)
{
    return load_chat_window(tok, template, line, 0, out);
}

struct chat_case {
    const char *vocab, *template, *line;
    /* The reference encoder's ids of the text apply_chat_template renders
     * (scripts/tokenizers/reference.mjs on it; the text is in the guide's
     * table), and the [begin, end) index ranges that count. */
    const int32_t *ids;
    size_t n;
    size_t counted[2][2];
};

static const int32_t llama3_ids[] = {
    128000, 128006, 9125, 128007, 271,    2675,   527,    51637,  13,  128009, 128006, 882,
    128007, 271,    3923, 374,    220,    17,     10,     17,     30,  128009, 128006, 78191,
    128007, 271,    19,   13,     128009, 128006, 882,    128007, 271, 3112,   220,    18,
    10,     18,     30,   128009, 128006, 78191,  128007, 271,    21,  13,     128009};
static const int32_t llama2_ids[] = {1,     518,   25580, 29962, 3532,  14816, 29903, 6778,  13,
                                     3629,  11473, 29889, 13,    29966, 829,   14816, 29903, 6778,
                                     13,    13,    18567, 518,   29914, 25580, 29962, 15043, 29991,
                                     29871, 2,     1,     518,   25580, 29962, 2648,  29872, 518,
                                     29914, 25580, 29962, 7197,  26966, 29889, 29871, 2};
static const int32_t mistral_ids[] = {1,     733,   16289, 28793, 15359, 733,   28748, 16289, 28793,
                                      16230, 28808, 2,     733,   16289, 28793, 2463,  28706, 733,
                                      28748, 16289, 28793, 10604, 17664, 28723, 2};

#define IDS(a) a, sizeof a / sizeof a[0]
static const struct chat_case chat_cases[] = {
    /* <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are
     * terse.<|eot_id|>...assistant<|end_header_id|>\n\n4.<|eot_id|>...
     * assistant<|end_header_id|>\n\n6.<|eot_id|>: contents trimmed. */
    {"llama3",
     "llama3",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"You are terse.\"}, {\"role\": "
     "\"user\", \"content\": \"What is 2+2?\"}, {\"role\": \"assistant\", \"content\": \"4.\"}, "
     "{\"role\": \"user\", \"content\": \"And 3+3?\"}, {\"role\": \"assistant\", \"content\": "
     "\" 6. \"}]}\n",
     IDS(llama3_ids),
     {{26, 29}, {44, 47}}},
    /* <s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST]
     * Bye [/INST] Goodbye. </s>: the assistant's " Hello! </s>" counts. */
    {"llama2",
     "llama2",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
     "\"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello!\"}, {\"role\": "
     "\"user\", \"content\": \"Bye \"}, {\"role\": \"assistant\", \"content\": \"  Goodbye.\"}]}\n",
     IDS(llama2_ids),
     {{25, 29}, {39, 44}}},
    /* <s>[INST] Hi [/INST]Hello!</s>[INST] Bye [/INST]Goodbye.</s> */
    {"mistral",
     "mistral",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", "
     "\"content\": \"Hello!\"}, {\"role\": \"user\", \"content\": \"Bye\"}, {\"role\": "
     "\"assistant\", \"content\": \"Goodbye.\"}]}\n",
     IDS(mistral_ids),
     {{9, 12}, {21, 25}}},
};
#define N_CHAT_CASES (sizeof chat_cases / sizeof chat_cases[0])

START_TEST(test_chat_templates)
{
    const struct chat_case *c = &chat_cases[_i];
    struct tokenizer *tok;
    ck_assert(tokenizer_open("hf", testutil_tokenizer_dir(c->vocab, "tokenizer.json"), &tok) ==
              ZT_OK);
    struct token_buffer b = {0};
    zt_status st = load_chat(tok, c->template, c->line, &b);
    ck_assert_msg(st == ZT_OK, "%s: %s", c->template, zt_error_message());
    ck_assert_uint_eq(b.n, c->n);
    for (size_t i = 0; i < b.n; i++) {
        const int counted = (i >= c->counted[0][0] && i < c->counted[0][1]) ||
                            (i >= c->counted[1][0] && i < c->counted[1][1]);
        ck_assert_msg(b.tokens[i] == c->ids[i], "%s: id %zu: %d, want %d", c->template, i,
                      b.tokens[i], c->ids[i]);
        ck_assert_msg(b.mask[i] == counted, "%s: mask %zu: %d, want %d", c->template, i, b.mask[i],
                      counted);
    }
    token_buffer_free(&b);
    tokenizer_close(tok);
}
END_TEST

/* ChatML on a byte-level vocabulary with <|im_start|> and <|im_end|>, the
 * template found from tokenizer_config.json's Jinja: ids are the bytes and
 * the two tokens, and a default system message comes first. */
START_TEST(test_chat_chatml_detected)
{
    const char *dir = testutil_tmpdir("chat-chatml");
    const char *json = mini_json(BYTE_LEVEL ", \"added_tokens\": [{\"id\": 258, \"content\": "
                                            "\"<|im_start|>\", \"special\": true}, {\"id\": 259, "
                                            "\"content\": \"<|im_end|>\", \"special\": true}]",
                                 "[]");
    const char *config = "{\"eos_token\": \"<|im_end|>\", \"chat_template\": \"{% for message in "
                         "messages %}{{'<|im_start|>' + message['role'] + '\\\\n' + "
                         "message['content'] + '<|im_end|>' + '\\\\n'}}{% endfor %}\"}";
    testutil_write_file(testutil_path_in(dir, "tokenizer.json"), json, strlen(json));
    testutil_write_file(testutil_path_in(dir, "tokenizer_config.json"), config, strlen(config));
    struct tokenizer *tok;
    ck_assert_msg(tokenizer_open("hf", dir, &tok) == ZT_OK, "%s", zt_error_message());
    ck_assert_str_eq(chat_template_detect(tokenizer_chat_template(tok)), "chatml");
    ck_assert_str_eq(chat_template_detect("{{ '<|start_header_id|>' }}"), "llama3");
    ck_assert_str_eq(chat_template_detect("{{ '<<SYS>>\\n' }}[INST]"), "llama2");
    ck_assert_str_eq(chat_template_detect("{{ '[INST] ' }}"), "mistral");
    ck_assert_ptr_null(chat_template_detect("Cutting Knowledge Date <|start_header_id|>"));
    ck_assert_ptr_null(chat_template_detect("<|im_start|>system\\nYou are Qwen"));
    ck_assert_ptr_null(chat_template_detect("{{ message.content }}"));
    struct token_buffer b = {0};
    zt_status st = load_chat(tok, NULL,
                             "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                             "{\"role\": \"assistant\", \"content\": \"yo\"}]}",
                             &b);
    ck_assert_msg(st == ZT_OK, "%s", zt_error_message());
    /* S = <|im_start|> (258), E = <|im_end|> (259); "yo" and E count. */
    const char *text = "Ssystem\nYou are a helpful assistant.E\nSuser\nhiE\nSassistant\nyoE\n";
    const size_t n = strlen(text), reply = n - strlen("yoE\n");
    ck_assert_uint_eq(b.n, n);
    for (size_t i = 0; i < b.n; i++) {
        const int32_t want = text[i] == 'S' ? 258 : text[i] == 'E' ? 259 : text[i];
        ck_assert_msg(b.tokens[i] == want, "id %zu: %d, want %d", i, b.tokens[i], want);
        ck_assert_msg(b.mask[i] == (i >= reply && i < n - 1), "mask %zu: %d", i, b.mask[i]);
    }
    token_buffer_free(&b);
    tokenizer_close(tok);
}
END_TEST

/* Each bad conversation is refused naming the line and the field. */
START_TEST(test_chat_errors)
{
    struct tokenizer *tok;
    ck_assert(tokenizer_open("hf", testutil_tokenizer_dir("llama3", "tokenizer.json"), &tok) ==
              ZT_OK);
    static const struct {
        const char *template, *line, *message;
        zt_status want;
    } bad[] = {
        {"llama3", "{\"messages\": [{\"content\": \"x\"}]}",
         "chat.jsonl:1: messages[0]: has no "
         "\"role\"",
         ZT_ERR_CONFIG},
        {"llama3", "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}",
         "messages[0].role: unknown role 'tool'", ZT_ERR_CONFIG},
        {"llama3",
         "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", "
         "\"content\": 3}]}",
         "messages[1].content: must be a string, not an integer", ZT_ERR_CONFIG},
        {"llama3", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}",
         "no assistant message", ZT_ERR_CONFIG},
        {"llama3", "{\"messages\": {}}", "messages: must be a non-empty array", ZT_ERR_CONFIG},
        {"llama3", "{\"messages\": [], \"text\": \"x\"}", "has both \"messages\" and \"text\"",
         ZT_ERR_CONFIG},
        {"vicuna", "{\"messages\": []}",
         "data.chat_template: unknown template 'vicuna' (known: "
         "llama3, chatml, llama2, mistral)",
         ZT_ERR_CONFIG},
        {"chatml",
         "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", "
         "\"content\": \"y\"}]}",
         "template chatml writes <|im_start|>, which tokenizer hf does not have as one token",
         ZT_ERR_CONFIG},
        {NULL,
         "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", "
         "\"content\": \"y\"}]}",
         "chat.jsonl:1: \"messages\" need a chat template, and tokenizer hf names none",
         ZT_ERR_CONFIG},
        {"mistral",
         "{\"messages\": [{\"role\": \"system\", \"content\": \"x\"}, {\"role\": \"assistant\", "
         "\"content\": \"y\"}]}",
         "messages[0].role: system, but template mistral has no system message", ZT_ERR_CONFIG},
        {"llama2",
         "{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}, {\"role\": \"user\", "
         "\"content\": \"y\"}]}",
         "messages[0].role: assistant, but template llama2 takes user and assistant turns in "
         "turn",
         ZT_ERR_CONFIG},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct tokenizer *t = tok;
        struct tokenizer *llama2 = NULL;
        if (bad[i].template && strcmp(bad[i].template, "llama3") != 0 &&
            strcmp(bad[i].template, "chatml") != 0 && strcmp(bad[i].template, "vicuna") != 0) {
            ck_assert(tokenizer_open("hf", testutil_tokenizer_dir("llama2", "tokenizer.json"),
                                     &llama2) == ZT_OK);
            t = llama2;
        }
        struct token_buffer b = {0};
        const zt_status st = load_chat(t, bad[i].template, bad[i].line, &b);
        ck_assert_msg(st == bad[i].want && strstr(zt_error_message(), bad[i].message),
                      "case %zu: %s: '%s' lacks '%s'", i, zt_status_str(st), zt_error_message(),
                      bad[i].message);
        ck_assert_uint_eq(b.n, 0);
        tokenizer_close(llama2);
    }
    tokenizer_close(tok);
}
END_TEST

/* A Python with jinja2 (the system's, else the one on PATH), or NULL. */
static const char *python_with_jinja(void)
{
    static const char *const pythons[] = {"/usr/bin/python3", "python3"};
    for (size_t i = 0; i < sizeof pythons / sizeof pythons[0]; i++)
        if (system(testutil_fmt("%s -c 'import jinja2' >/dev/null 2>&1", pythons[i])) == 0)
            return pythons[i];
    return NULL;
}

/* The folder's tokenizer_config.json that tokenizer_save_config writes
 * for template `tpl` renders `messages` as `want` under jinja2 (Hugging
 * Face's apply_chat_template; scripts/reference/chat_jinja.py); said and
 * skipped without a Python with jinja2. */
static void check_jinja(const char *tpl, const char *messages, const char *want)
{
    const char *dir = testutil_tmpdir(testutil_fmt("jinja-%s", tpl));
    char saved[128] = "";
    ck_assert_msg(tokenizer_save_config("bytes", dir, 0, tpl, saved, sizeof saved) == ZT_OK, "%s",
                  zt_error_message());
    ck_assert_str_eq(saved, "tokenizer_config.json");
    const char *python = python_with_jinja();
    if (!python) {
        fprintf(stderr, "test_tokenizers: no python3 with jinja2: %s's Jinja not run\n", tpl);
        return;
    }
    testutil_write_file(testutil_path_in(dir, "messages.json"), messages, strlen(messages));
    const char *out = testutil_path_in(dir, "rendered.txt"), *log = testutil_path_in(dir, "py.log");
    ck_assert_msg(testutil_run(log, "(%s %s %s/tokenizer_config.json %s/messages.json > %s)",
                               python, testutil_source_path("scripts/reference/chat_jinja.py"), dir,
                               dir, out) == 0,
                  "%s: %s", tpl, testutil_slurp(log));
    ck_assert_str_eq(testutil_slurp(out), want);
}

/* A conversation to answer, rendered as apply_chat_template(messages,
 * add_generation_prompt=True) renders it for each template; the Jinja a
 * model folder gets renders it alike and is recognised as the template. */
START_TEST(test_chat_generation_prompts)
{
    static const struct {
        const char *template, *messages, *want, *end_of_turn;
    } cases[] = {
        {"llama3",
         "[{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": "
         "\"Hello\"}, {\"role\": \"user\", \"content\": \" Bye \"}]",
         "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
         "<|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
         "<|start_header_id|>assistant<|end_header_id|>\n\n",
         "<|eot_id|>"},
        {"chatml", "[{\"role\": \"user\", \"content\": \"Hi\"}]",
         "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi"
         "<|im_end|>\n<|im_start|>assistant\n",
         "<|im_end|>"},
        {"llama2",
         "[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": "
         "\"Hi\"}]",
         "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nHi [/INST]", "</s>"},
        {"mistral", "[{\"role\": \"user\", \"content\": \"Hi\"}]", "<s>[INST] Hi [/INST]", "</s>"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct chat_template *tpl = chat_template_find(cases[i].template);
        ck_assert_ptr_nonnull(tpl);
        const struct json_source src = {.path = "case", .code = ZT_ERR_DATA, .max_depth = 8};
        struct json_value v;
        ck_assert(json_parse(&src, cases[i].messages, strlen(cases[i].messages), &v) == ZT_OK);
        char *text = NULL;
        size_t len = 0;
        ck_assert_msg(chat_render_prompt(tpl, &v, "case", &text, &len) == ZT_OK, "%s",
                      zt_error_message());
        ck_assert_str_eq(text, cases[i].want);
        ck_assert_uint_eq(len, strlen(cases[i].want));
        ck_assert_str_eq(chat_template_end_of_turn(tpl), cases[i].end_of_turn);
        ck_assert_str_eq(chat_template_detect(chat_template_jinja(tpl)), cases[i].template);
        check_jinja(cases[i].template, cases[i].messages, cases[i].want);
        free(text);
        json_free(&v);
    }
    /* the reply answers the user: a conversation ending with the assistant is refused */
    const char *ends = "[{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", "
                       "\"content\": \"Hello\"}]";
    const struct json_source src = {.path = "case", .code = ZT_ERR_DATA, .max_depth = 8};
    struct json_value v;
    ck_assert(json_parse(&src, ends, strlen(ends), &v) == ZT_OK);
    char *text = NULL;
    size_t len;
    ck_assert_int_eq(chat_render_prompt(chat_template_find("llama3"), &v, "f.jsonl:3", &text, &len),
                     ZT_ERR_USAGE);
    ck_assert_msg(strstr(zt_error_message(), "f.jsonl:3: messages[1].role: assistant"), "%s",
                  zt_error_message());
    ck_assert_ptr_null(text);
    json_free(&v);
}
END_TEST

/* tokenizer_save copies what from_pretrained reads, under its names, and
 * the copy opens as the same tokenizer: GPT-2's encoder.json and vocab.bpe
 * as vocab.json and merges.txt, a tokenizer.json with its config. */
START_TEST(test_tokenizer_save)
{
    static const char text[] = "Hello, world! <|endoftext|> ok";
    const struct {
        const char *row, *from, *files;
    } cases[] = {
        {"gpt2", testutil_gpt2_vocab_dir(), "vocab.json, merges.txt"},
        {"hf", testutil_tokenizer_dir("llama3", "tokenizer.json"),
         "tokenizer.json, tokenizer_config.json"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *to = testutil_tmpdir(testutil_fmt("save-%s", cases[i].row));
        char saved[256];
        ck_assert_msg(tokenizer_save(cases[i].row, cases[i].from, to, saved, sizeof saved) == ZT_OK,
                      "%s", zt_error_message());
        ck_assert_str_eq(saved, cases[i].files);
        struct tokenizer *a, *b;
        ck_assert(tokenizer_open(cases[i].row, cases[i].from, &a) == ZT_OK);
        ck_assert_msg(tokenizer_open(NULL, to, &b) == ZT_OK, "%s", zt_error_message());
        ck_assert_str_eq(tokenizer_name(b), cases[i].row);
        ck_assert_uint_eq(tokenizer_vocab_size(a), tokenizer_vocab_size(b));
        ck_assert_int_eq(tokenizer_eot_id(a), tokenizer_eot_id(b));
        ck_assert_int_eq(tokenizer_bos_id(a), tokenizer_bos_id(b));
        struct token_buffer x = {0}, y = {0};
        ck_assert(tokenizer_encode(a, (const unsigned char *)text, strlen(text), &x) == ZT_OK);
        ck_assert(tokenizer_encode(b, (const unsigned char *)text, strlen(text), &y) == ZT_OK);
        ck_assert_uint_eq(x.n, y.n);
        ck_assert_mem_eq(x.tokens, y.tokens, x.n * sizeof *x.tokens);
        token_buffer_free(&x), token_buffer_free(&y);
        tokenizer_close(a), tokenizer_close(b);
    }
    char saved[64] = "x";
    ck_assert_int_eq(
        tokenizer_save("bytes", NULL, testutil_tmpdir("save-bytes"), saved, sizeof saved), ZT_OK);
    ck_assert_str_eq(saved, "");
}
END_TEST

/* tokenizer_save_config: GPT-2's tokenizer_config.json and
 * special_tokens_map.json as save_pretrained writes them; a run's chat
 * template added to a copied tokenizer_config.json, its other members
 * kept, and read back by name; nothing for bytes without a template. */
START_TEST(test_tokenizer_save_config)
{
    const char *to = testutil_tmpdir("config-gpt2");
    char saved[128] = "";
    ck_assert(tokenizer_save_config("gpt2", to, 1024, NULL, saved, sizeof saved) == ZT_OK);
    ck_assert_str_eq(saved, "tokenizer_config.json, special_tokens_map.json");
    ck_assert_str_eq(testutil_slurp(testutil_path_in(to, "tokenizer_config.json")),
                     "{\"add_prefix_space\": false, \"bos_token\": \"<|endoftext|>\", "
                     "\"eos_token\": \"<|endoftext|>\", \"unk_token\": \"<|endoftext|>\", "
                     "\"errors\": \"replace\", \"clean_up_tokenization_spaces\": false, "
                     "\"model_max_length\": 1024, \"tokenizer_class\": \"GPT2Tokenizer\"}\n");
    ck_assert_str_eq(testutil_slurp(testutil_path_in(to, "special_tokens_map.json")),
                     "{\"bos_token\": \"<|endoftext|>\", \"eos_token\": \"<|endoftext|>\", "
                     "\"unk_token\": \"<|endoftext|>\"}\n");
    char name[32] = "x";
    ck_assert(tokenizer_config_chat(to, name, sizeof name) == ZT_OK);
    ck_assert_str_eq(name, "");

    const char *from = testutil_tokenizer_dir("llama3", "tokenizer.json");
    const char *hf = testutil_tmpdir("config-hf");
    ck_assert(tokenizer_save("hf", from, hf, saved, sizeof saved) == ZT_OK);
    saved[0] = '\0';
    ck_assert(tokenizer_save_config("hf", hf, 64, "llama3", saved, sizeof saved) == ZT_OK);
    ck_assert_str_eq(saved, "tokenizer_config.json");
    struct json_value was, now;
    testutil_load_json(testutil_path_in(from, "tokenizer_config.json"), &was);
    testutil_load_json(testutil_path_in(hf, "tokenizer_config.json"), &now);
    ck_assert_int_eq(now.type, JSON_OBJECT);
    for (size_t i = 0; i < was.n; i++)
        ck_assert_msg(json_object_get(&now, was.keys[i], NULL), "%s lost", was.keys[i]);
    const size_t had = was.n;
    ck_assert_uint_eq(now.n, had + 2);
    ck_assert_str_eq(json_object_get(&now, "chat_template", NULL)->str,
                     chat_template_jinja(chat_template_find("llama3")));
    json_free(&was), json_free(&now);
    ck_assert(tokenizer_config_chat(hf, name, sizeof name) == ZT_OK);
    ck_assert_str_eq(name, "llama3");
    struct tokenizer *tok;
    ck_assert(tokenizer_open(NULL, hf, &tok) == ZT_OK);
    ck_assert_str_eq(chat_template_detect(tokenizer_chat_template(tok)), "llama3");
    tokenizer_close(tok);
    /* a template written again replaces the one there */
    ck_assert(tokenizer_save_config("hf", hf, 64, "chatml", saved, sizeof saved) == ZT_OK);
    ck_assert(tokenizer_config_chat(hf, name, sizeof name) == ZT_OK);
    ck_assert_str_eq(name, "chatml");
    testutil_load_json(testutil_path_in(hf, "tokenizer_config.json"), &now);
    ck_assert_uint_eq(now.n, had + 2);
    json_free(&now);

    const char *bytes = testutil_tmpdir("config-bytes");
    saved[0] = '\0';
    ck_assert(tokenizer_save_config("bytes", bytes, 64, NULL, saved, sizeof saved) == ZT_OK);
    ck_assert_str_eq(saved, "");
    ck_assert_int_ne(access(testutil_path_in(bytes, "tokenizer_config.json"), F_OK), 0);
    ck_assert_int_eq(tokenizer_save_config("bytes", bytes, 64, "nope", saved, sizeof saved),
                     ZT_ERR_USAGE);
    testutil_write_file(testutil_path_in(bytes, "tokenizer_config.json"), "[1]", 3);
    ck_assert_int_eq(tokenizer_config_chat(bytes, name, sizeof name), ZT_ERR_CONFIG);
    ck_assert_msg(strstr(zt_error_message(), "expected a JSON object, not an array"), "%s",
                  zt_error_message());
    const char *bad = "{\"zerotrain_chat_template\": 3}";
    testutil_write_file(testutil_path_in(bytes, "tokenizer_config.json"), bad, strlen(bad));
    ck_assert_int_eq(tokenizer_config_chat(bytes, name, sizeof name), ZT_ERR_CONFIG);
    ck_assert_msg(strstr(zt_error_message(), "tokenizer_config.json: zerotrain_chat_template: "
                                             "expected one string"),
                  "%s", zt_error_message());
}
END_TEST

static Suite *tokenizers_suite(void)
{
    Suite *s = suite_create("tokenizers");
    const int n = (int)(sizeof references / sizeof references[0]);
    TCase *r = testutil_tcase(s, "reference", 600);
    tcase_add_loop_test(r, test_reference_ids, 0, n);
    tcase_add_loop_test(r, test_any_bytes_round_trip, 0, n);
    tcase_add_test(r, test_prepare_llama3_width4);
    tcase_add_test(r, test_nfc_normalizer);
    TCase *c = testutil_tcase(s, "command", 300);
    tcase_add_test(c, test_tokenize_command);
    tcase_add_test(c, test_run_start_errors);
    TCase *f = testutil_tcase(s, "files", 120);
    tcase_add_test(f, test_broken_files);
    tcase_add_test(f, test_broken_rank_files);
    TCase *ch = testutil_tcase(s, "chat", 120);
    tcase_add_loop_test(ch, test_chat_templates, 0, (int)N_CHAT_CASES);
    tcase_add_test(ch, test_chat_chatml_detected);
    tcase_add_test(ch, test_chat_errors);
    tcase_add_test(ch, test_chat_generation_prompts);
    tcase_add_test(ch, test_tokenizer_save);
    tcase_add_test(ch, test_tokenizer_save_config);
    return s;
}

int main(void)
{
    return testutil_run_suite(tokenizers_suite(), 0);
}
