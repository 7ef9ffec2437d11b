/* tests/test_bpe.c — GPT-2's byte-level BPE behind the tokenizer table, and
 * `zerotrain prepare --tokenizer gpt2` end to end.
 *
 * The ids are checked against tests/data/gpt2_bpe_reference.txt, written by
 * an independent encoder (scripts/reference/gpt2_bpe_reference.py, on the
 * `regex` module GPT-2's own encoder uses): contractions, numbers, runs of
 * white space, non-ASCII letters, emoji, bytes that are not UTF-8, random
 * texts and two whole files. The vocabulary is OpenAI's, fetched by
 * scripts/gpt2_vocab.sh, which scripts/test.sh runs before the tests: the
 * folder is $ZT_GPT2_VOCAB_DIR, else the script's default cache folder, and
 * when it is missing every test that needs it fails saying how to get it.
 *
 * Vocabularies written here, a few tokens over the 256 bytes, check what
 * the real one cannot show: the order of merges inside a round, and the
 * message for each way a vocabulary folder can be broken. A fault loop
 * fails every allocation of a load and of an encoding in turn.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../data/data.h"
#include "../data/pretokenize.h"
#include "fault_alloc.h"
#include "testutil.h"

#define GPT2_VOCAB 50257
#define GPT2_EOT   50256

/* ---- helpers ---- */

static const char *vocab_dir(void)
{
    return testutil_gpt2_vocab_dir();
}

static struct tokenizer *open_gpt2(void)
{
    struct tokenizer *t;
    zt_status st = tokenizer_open("gpt2", vocab_dir(), &t);
    ck_assert_msg(st == ZT_OK, "%s", zt_error_message());
    return t;
}

static void encode_ok(const struct tokenizer *t, const void *text, size_t n,
                      struct token_buffer *out)
{
    zt_status st = tokenizer_encode(t, text, n, out);
    ck_assert_msg(st == ZT_OK, "%s", zt_error_message());
}

/* decode(ids) must be text[0..n). */
static void expect_decodes_to(const struct tokenizer *t, const struct token_buffer *ids,
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

static void expect_status(zt_status got, zt_status want, const char *text)
{
    ck_assert_msg(got == want, "status %s, expected %s (message: %s)", zt_status_str(got),
                  zt_status_str(want), zt_error_message());
    ck_assert_msg(strstr(zt_error_message(), text) != NULL, "message '%s' lacks '%s'",
                  zt_error_message(), text);
}

/* A deterministic byte generator (xorshift64*), independent of the code
 * under test. */
static uint64_t next_random(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* ---- the reference file ---- */

struct ref_case {
    char name[64];
    unsigned char *text; /* owned */
    size_t n;
    int32_t *ids; /* owned */
    size_t n_ids;
};

static unsigned char *parse_hex(const char *hex, size_t len, size_t *n)
{
    unsigned char *p = malloc(len / 2 + 1);
    ck_assert(p != NULL && len % 2 == 0);
    for (size_t i = 0; i < len / 2; i++) {
        unsigned v;
        ck_assert(sscanf(hex + 2 * i, "%2x", &v) == 1);
        p[i] = (unsigned char)v;
    }
    *n = len / 2;
    return p;
}

static int32_t *parse_ids(const char *s, size_t *n)
{
    size_t cap = 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    ck_assert(ids != NULL);
    *n = 0;
    for (char *end; *s && *s != '\n'; s = end) {
        long v = strtol(s, &end, 10);
        ck_assert_msg(end != s, "bad id list at '%.20s'", s);
        if (*n == cap)
            ck_assert((ids = realloc(ids, (cap *= 2) * sizeof *ids)) != NULL);
        ids[(*n)++] = (int32_t)v;
    }
    return ids;
}

/* Reads one "name<TAB>source<TAB>ids" line into *c; returns the next line. */
static const char *parse_case(const char *line, struct ref_case *c)
{
    const char *tab1 = strchr(line, '\t'), *tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL;
    ck_assert_msg(tab1 && tab2 && tab1 - line < (long)sizeof c->name, "bad line '%.40s'", line);
    memcpy(c->name, line, (size_t)(tab1 - line));
    c->name[tab1 - line] = '\0';
    const char *src = tab1 + 1;
    const size_t src_len = (size_t)(tab2 - src);
    if (strncmp(src, "hex:", 4) == 0) {
        c->text = parse_hex(src + 4, src_len - 4, &c->n);
    } else {
        ck_assert_msg(strncmp(src, "file:", 5) == 0, "%s: bad source", c->name);
        char rel[256];
        snprintf(rel, sizeof rel, "%.*s", (int)src_len - 5, src + 5);
        c->text = testutil_read_file(testutil_source_path(rel), &c->n);
    }
    c->ids = parse_ids(tab2 + 1, &c->n_ids);
    const char *next = strchr(tab2, '\n');
    return next ? next + 1 : tab2 + strlen(tab2);
}

/* Says where the ids first differ, with the bytes of the tokens there. */
static void expect_ids(const struct tokenizer *t, const struct ref_case *c,
                       const struct token_buffer *got)
{
    size_t i = 0;
    while (i < got->n && i < c->n_ids && got->tokens[i] == c->ids[i])
        i++;
    if (i == got->n && i == c->n_ids)
        return;
    unsigned char *g = NULL, *w = NULL;
    size_t gl = 0, wl = 0;
    const size_t gn = got->n - i < 3 ? got->n - i : 3, wn = c->n_ids - i < 3 ? c->n_ids - i : 3;
    ck_assert(tokenizer_decode(t, got->tokens + i, gn, &g, &gl) == ZT_OK);
    ck_assert(tokenizer_decode(t, c->ids + i, wn, &w, &wl) == ZT_OK);
    ck_abort_msg("%s: %zu ids, expected %zu; first difference at id %zu: got %d '%.*s', "
                 "expected %d '%.*s'",
                 c->name, got->n, c->n_ids, i, i < got->n ? got->tokens[i] : -1, (int)gl, g,
                 i < c->n_ids ? c->ids[i] : -1, (int)wl, w);
}

/* ---- GPT-2's vocabulary ---- */

START_TEST(test_hello_world)
{
    struct tokenizer *t = open_gpt2();
    ck_assert_str_eq(tokenizer_name(t), "gpt2");
    ck_assert_uint_eq(tokenizer_vocab_size(t), GPT2_VOCAB);
    ck_assert_int_eq(tokenizer_eot_id(t), GPT2_EOT);
    struct token_buffer b = {0};
    encode_ok(t, "Hello world", 11, &b);
    ck_assert_uint_eq(b.n, 2);
    ck_assert_int_eq(b.tokens[0], 15496);
    ck_assert_int_eq(b.tokens[1], 995);
    ck_assert_uint_eq(b.vocab_size, GPT2_VOCAB);
    /* Appending continues the buffer; the end-of-text text is only text. */
    encode_ok(t, "<|endoftext|>", 13, &b);
    ck_assert_uint_gt(b.n, 3);
    for (size_t i = 0; i < b.n; i++)
        ck_assert_int_ne(b.tokens[i], GPT2_EOT);
    expect_decodes_to(t, &b, "Hello world<|endoftext|>", 24, "appended");
    token_buffer_free(&b);
    tokenizer_close(t);
}
END_TEST

START_TEST(test_reference_ids)
{
    struct tokenizer *t = open_gpt2();
    size_t len;
    char *file =
        (char *)testutil_read_file(testutil_source_path("tests/data/gpt2_bpe_reference.txt"), &len);
    file[len] = '\0';
    int n_cases = 0;
    for (const char *line = file; *line;) {
        if (*line == '#') {
            line = strchr(line, '\n') + 1;
            continue;
        }
        struct ref_case c;
        line = parse_case(line, &c);
        struct token_buffer got = {0};
        encode_ok(t, c.text, c.n, &got);
        expect_ids(t, &c, &got);
        expect_decodes_to(t, &got, c.text, c.n, c.name);
        token_buffer_free(&got);
        free(c.text);
        free(c.ids);
        n_cases++;
    }
    ck_assert_int_ge(n_cases, 80);
    free(file);
    tokenizer_close(t);
}
END_TEST

START_TEST(test_roundtrip_license_and_random_bytes)
{
    struct tokenizer *t = open_gpt2();
    size_t n;
    unsigned char *license = testutil_read_file(testutil_source_path("LICENSE"), &n);
    struct token_buffer b = {0};
    encode_ok(t, license, n, &b);
    ck_assert_msg(b.n > n / 8 && b.n < n / 2, "%zu bytes of English in %zu tokens", n, b.n);
    expect_decodes_to(t, &b, license, n, "LICENSE");
    token_buffer_free(&b);
    free(license);

    uint64_t seed = 0x9E3779B97F4A7C15ULL;
    unsigned char buf[4096];
    for (int round = 0; round < 40; round++) {
        const size_t len = (size_t)(next_random(&seed) % sizeof buf);
        /* Half the rounds keep to a few bytes, so that runs and UTF-8
         * sequences (valid and not) are common. */
        for (size_t i = 0; i < len; i++) {
            const uint64_t r = next_random(&seed);
            static const unsigned char few[] = {' ',  'a',  '\'', 's',  '\n', '7',  0xC3, 0xA9,
                                                0xE6, 0x97, 0xA5, 0xFF, 0x80, 0xF0, 0x9F, 0x98};
            buf[i] = round % 2 ? few[r % sizeof few] : (unsigned char)r;
        }
        encode_ok(t, buf, len, &b);
        expect_decodes_to(t, &b, buf, len, testutil_fmt("random round %d", round));
        token_buffer_free(&b);
    }
    tokenizer_close(t);
}
END_TEST

/* One piece of a megabyte (one letter, white space, invalid bytes) is
 * merged in O(k log k), not rescanned merge by merge. */
START_TEST(test_long_pieces)
{
    struct tokenizer *t = open_gpt2();
    const size_t n = (size_t)1 << 20;
    unsigned char *text = malloc(n);
    ck_assert(text != NULL);
    static const unsigned char fill[] = {'a', ' ', 0xFF};
    for (size_t k = 0; k < sizeof fill; k++) {
        memset(text, fill[k], n);
        struct token_buffer b = {0};
        encode_ok(t, text, n, &b);
        ck_assert_msg(b.n > 0 && b.n <= n, "fill 0x%02X: %zu tokens", fill[k], b.n);
        expect_decodes_to(t, &b, text, n, testutil_fmt("fill 0x%02X", fill[k]));
        token_buffer_free(&b);
    }
    free(text);
    tokenizer_close(t);
}
END_TEST

START_TEST(test_decode_refuses_bad_ids)
{
    struct tokenizer *t = open_gpt2();
    const int32_t ids[] = {15496, GPT2_VOCAB};
    unsigned char *out = (unsigned char *)"x";
    size_t len = 7;
    expect_status(tokenizer_decode(t, ids, 2, &out, &len), ZT_ERR_DATA,
                  "tokenizer gpt2: id 50257 at position 1 is outside 0 .. 50256");
    ck_assert(out == NULL && len == 0);
    const int32_t neg[] = {-1};
    expect_status(tokenizer_decode(t, neg, 1, &out, &len), ZT_ERR_DATA, "id -1 at position 0");
    const int32_t eot[] = {GPT2_EOT};
    ck_assert_int_eq(tokenizer_decode(t, eot, 1, &out, &len), ZT_OK);
    ck_assert(len == 13 && memcmp(out, "<|endoftext|>", 13) == 0);
    free(out);
    tokenizer_close(t);
}
END_TEST

/* Files are documents: the end-of-text id between them (an empty file
 * too), none after the last; a file larger than the reading chunk is
 * encoded whole, as if given in one piece. */
START_TEST(test_dataset_documents)
{
    struct tokenizer *t = open_gpt2();
    const char *dir = testutil_tmpdir("bpe-docs");
    testutil_write_file(testutil_path_in(dir, "1.txt"), "Hello world", 11);
    testutil_write_file(testutil_path_in(dir, "2.txt"), "", 0);
    testutil_write_file(testutil_path_in(dir, "3.txt"), " Hello", 6);
    const char *paths[] = {dir};
    const struct dataset_options opt = {.tokenizer = t};
    struct token_buffer b = {0};
    ck_assert_int_eq(dataset_load_with(paths, 1, &opt, &b, NULL), ZT_OK);
    const int32_t want[] = {15496, 995, GPT2_EOT, GPT2_EOT, 18435};
    ck_assert_uint_eq(b.n, 5);
    ck_assert_mem_eq(b.tokens, want, sizeof want);
    ck_assert_uint_eq(b.vocab_size, GPT2_VOCAB);
    token_buffer_free(&b);

    size_t n;
    unsigned char *corpus =
        testutil_read_file(testutil_source_path("tests/data/trajectory_corpus.txt"), &n);
    const size_t big_n = 3 * ((size_t)1 << 20) / 2;
    unsigned char *big = malloc(big_n);
    ck_assert(big != NULL);
    for (size_t i = 0; i < big_n; i++)
        big[i] = corpus[i % n];
    const char *big_path = testutil_path_in(testutil_tmpdir("bpe-big"), "big.txt");
    testutil_write_file(big_path, big, big_n);
    const char *one[] = {big_path};
    struct token_buffer whole = {0};
    ck_assert_int_eq(dataset_load_with(one, 1, &opt, &b, NULL), ZT_OK);
    encode_ok(t, big, big_n, &whole);
    ck_assert_uint_eq(b.n, whole.n);
    ck_assert_mem_eq(b.tokens, whole.tokens, whole.n * sizeof *whole.tokens);
    token_buffer_free(&b);
    token_buffer_free(&whole);
    free(big);
    free(corpus);
    tokenizer_close(t);
}
END_TEST

/* ---- the table ---- */

START_TEST(test_table_by_name)
{
    char names[64];
    tokenizer_names(names, sizeof names);
    ck_assert_str_eq(names, "bytes, gpt2, hf, cl100k, o200k");
    tokenizer_names(names, 6);
    ck_assert_str_eq(names, "bytes");
    ck_assert_int_eq(tokenizer_needs_dir("bytes"), 0);
    ck_assert_int_eq(tokenizer_needs_dir("gpt2"), 1);
    ck_assert_int_eq(tokenizer_needs_dir("GPT2"), -1);
    struct tokenizer *t = (struct tokenizer *)1;
    expect_status(tokenizer_open("gpt3", NULL, &t), ZT_ERR_USAGE,
                  "unknown tokenizer 'gpt3' (known: bytes, gpt2, hf, cl100k, o200k)");
    ck_assert(t == NULL);
    expect_status(tokenizer_open("gpt2", NULL, &t), ZT_ERR_USAGE,
                  "tokenizer gpt2 needs a vocabulary folder");
    expect_status(tokenizer_open("bytes", "/tmp", &t), ZT_ERR_USAGE,
                  "tokenizer bytes reads no vocabulary folder (/tmp given)");

    ck_assert_int_eq(tokenizer_open("bytes", NULL, &t), ZT_OK);
    ck_assert_uint_eq(tokenizer_vocab_size(t), 256);
    ck_assert_int_eq(tokenizer_eot_id(t), -1);
    struct token_buffer b = {0};
    encode_ok(t, "a\xff", 2, &b);
    ck_assert(b.n == 2 && b.tokens[0] == 'a' && b.tokens[1] == 0xFF && b.vocab_size == 256);
    expect_decodes_to(t, &b, "a\xff", 2, "bytes");
    /* Tokens of two vocabularies do not mix in one buffer. */
    struct tokenizer *g = open_gpt2();
    expect_status(tokenizer_encode(g, (const unsigned char *)"x", 1, &b), ZT_ERR_DATA,
                  "cannot append tokens of vocab size 50257 to tokens of vocab size 256");
    token_buffer_free(&b);
    tokenizer_close(g);
    tokenizer_close(t);
    tokenizer_close(NULL);
}
END_TEST

START_TEST(test_unicode_classes)
{
    for (size_t i = 0; i < unicode_class_range_count; i++) {
        const struct unicode_range *r = &unicode_class_ranges[i];
        ck_assert(r->first <= r->last && r->last <= 0x10FFFF && r->cat != UCAT_OTHER);
        ck_assert(i == 0 || r->first > unicode_class_ranges[i - 1].last);
    }
    ck_assert_int_eq(unicode_class(0xE9), UCLASS_LETTER);    /* é */
    ck_assert_int_eq(unicode_class(0x301), UCLASS_OTHER);    /* combining acute */
    ck_assert_int_eq(unicode_class(0x65E5), UCLASS_LETTER);  /* 日 */
    ck_assert_int_eq(unicode_class(0xB2), UCLASS_NUMBER);    /* ² */
    ck_assert_int_eq(unicode_class(0x216B), UCLASS_NUMBER);  /* Ⅻ */
    ck_assert_int_eq(unicode_class(0xA0), UCLASS_SPACE);     /* no-break space */
    ck_assert_int_eq(unicode_class(0x1C), UCLASS_OTHER);     /* not \s in regex */
    ck_assert_int_eq(unicode_class(0x200B), UCLASS_OTHER);   /* zero width space */
    ck_assert_int_eq(unicode_class(0x1F600), UCLASS_OTHER);  /* emoji */
    ck_assert_int_eq(unicode_class(0xDCFF), UCLASS_OTHER);   /* an escaped byte */
    ck_assert_int_eq(unicode_class(0x11F04), UCLASS_LETTER); /* Kawi, Unicode 15 */
    ck_assert_int_eq(unicode_class(0x110000), UCLASS_OTHER);
    uint32_t cp;
    ck_assert_uint_eq(pretokenize_char((const unsigned char *)"\xF0\x9F\x98\x80", 4, 0, &cp), 4);
    ck_assert_uint_eq(cp, 0x1F600);
    ck_assert_uint_eq(pretokenize_char((const unsigned char *)"\xF0\x9F\x98", 3, 0, &cp), 1);
    ck_assert_uint_eq(cp, 0xDCF0);
    ck_assert_uint_eq(pretokenize_char((const unsigned char *)"\xED\xA0\x80", 3, 0, &cp), 1);
    ck_assert_uint_eq(pretokenize_char((const unsigned char *)"\xE0\x80\xAF", 3, 0, &cp), 1);
}
END_TEST

/* ---- small vocabularies written here ---- */

/* A vocabulary folder: the 256 byte tokens (ids 0..255 in byte order), then
 * `extra` tokens (ASCII, which stands for itself), "<|endoftext|>" last,
 * and the merges, one string per line after the version comment. */
struct mini_vocab {
    const char *extra[8];
    const char *merges[8];
};

/* GPT-2's alphabet, written from its definition: printable bytes stand
 * for themselves, the rest count up from U+0100. */
static unsigned byte_char(unsigned byte)
{
    unsigned next = 0x100;
    for (unsigned b = 0; b < 256; b++) {
        const int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        if (b == byte)
            return printable ? b : next;
        next += !printable;
    }
    return 0;
}

static void write_encoder(const char *path, const struct mini_vocab *v)
{
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    int id = 0;
    fputc('{', f);
    for (unsigned b = 0; b < 256; b++)
        fprintf(f, "%s\"\\u%04X\": %d", b ? ", " : "", byte_char(b), id++);
    for (int i = 0; i < 8 && v->extra[i]; i++)
        fprintf(f, ", \"%s\": %d", v->extra[i], id++);
    fprintf(f, ", \"<|endoftext|>\": %d}", id);
    ck_assert_int_eq(fclose(f), 0);
}

static void write_merges(const char *path, const struct mini_vocab *v)
{
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    fputs("#version: 0.2\n", f);
    for (int i = 0; i < 8 && v->merges[i]; i++)
        fprintf(f, "%s\n", v->merges[i]);
    ck_assert_int_eq(fclose(f), 0);
}

static const char *mini_folder(const struct mini_vocab *v)
{
    const char *dir = testutil_tmpdir("bpe-mini");
    write_encoder(testutil_path_in(dir, "encoder.json"), v);
    write_merges(testutil_path_in(dir, "vocab.bpe"), v);
    return dir;
}

/* The ids of text under vocabulary v. */
static void expect_mini(const struct mini_vocab *v, const char *text, const int32_t *want,
                        size_t n_want)
{
    struct tokenizer *t;
    ck_assert_msg(tokenizer_open("gpt2", mini_folder(v), &t) == ZT_OK, "%s", zt_error_message());
    struct token_buffer b = {0};
    encode_ok(t, text, strlen(text), &b);
    ck_assert_uint_eq(b.n, n_want);
    ck_assert_mem_eq(b.tokens, want, n_want * sizeof *want);
    expect_decodes_to(t, &b, text, strlen(text), text);
    token_buffer_free(&b);
    tokenizer_close(t);
}

/* GPT-2 merges every occurrence of the lowest pair before it looks at the
 * pairs those merges made, even one of lower rank: "abab" with "ab a"
 * (rank 0) and "a b" (rank 1) is "ab" "ab", not "aba" "b". Occurrences
 * are taken left to right without overlap: "aaa" is "aa" "a". */
START_TEST(test_merge_rounds)
{
    const struct mini_vocab rounds = {{"ab", "aba"}, {"ab a", "a b"}};
    expect_mini(&rounds, "abab", (const int32_t[]){256, 256}, 2);
    const struct mini_vocab runs = {{"aa", "aaaa"}, {"a a", "aa aa"}};
    expect_mini(&runs, "aaa", (const int32_t[]){256, 'a'}, 2);
    expect_mini(&runs, "aaaaaaa", (const int32_t[]){257, 256, 'a'}, 3);
    /* The space goes with the word; pieces never merge across. */
#define G "\xC4\xA0" /* the character that stands for the space byte */
    const struct mini_vocab space = {{G "a", "a" G}, {G " a", "a " G}};
#undef G
    expect_mini(&space, "a a", (const int32_t[]){'a', 256}, 2);
}
END_TEST

static const struct mini_vocab good = {{"ab", "abc"}, {"a b", "ab c"}};

/* Opens the folder and expects the status and a message holding `text`. */
static void expect_load(const char *dir, zt_status want, const char *text)
{
    struct tokenizer *t = (struct tokenizer *)1;
    expect_status(tokenizer_open("gpt2", dir, &t), want, testutil_fmt(text, dir));
    ck_assert(t == NULL);
}

/* The good folder with `name` replaced by `body`. */
static const char *broken(const char *name, const char *body)
{
    const char *dir = mini_folder(&good);
    testutil_write_file(testutil_path_in(dir, name), body, strlen(body));
    return dir;
}

START_TEST(test_missing_files)
{
    const char *dir = mini_folder(&good);
    expect_load(testutil_path_in(dir, "nowhere"), ZT_ERR_IO,
                "%s: no such folder (scripts/gpt2_vocab.sh fetches GPT-2's encoder.json and "
                "vocab.bpe)");
    const char *enc = testutil_path_in(dir, "encoder.json");
    ck_assert_int_eq(unlink(enc), 0);
    ck_assert_int_eq(mkdir(enc, 0755), 0);
    expect_load(dir, ZT_ERR_DATA, "%s/encoder.json: not a regular file");
    ck_assert_int_eq(rmdir(enc), 0);
    expect_load(dir, ZT_ERR_IO, "%s/encoder.json: no such file (scripts/gpt2_vocab.sh");
    write_encoder(enc, &good);
    ck_assert_int_eq(unlink(testutil_path_in(dir, "vocab.bpe")), 0);
    expect_load(dir, ZT_ERR_IO, "%s/vocab.bpe: no such file (scripts/gpt2_vocab.sh");
}
END_TEST

/* One way to break a file of the good folder, and what the message says
 * after "DIR/FILE". */
struct broken_file {
    const char *file, *body, *says;
};

static const struct broken_file broken_files[] = {
    {"encoder.json", "{\"a\": 0,", ": not valid JSON at byte"},
    {"encoder.json", "[0, 1]", ": expected an object of tokens and their ids, got an array"},
    {"encoder.json", "{\"a\": \"0\"}", ": token \"a\": the id must be an integer, got a string"},
    {"encoder.json", "{\"a\": 0, \"b\": 2}",
     ": token \"b\": id 2 is outside 0 .. 1 (the ids of 2 tokens)"},
    {"encoder.json", "{\"a\": 0, \"b\": -1}", ": token \"b\": id -1 is outside 0 .. 1"},
    {"encoder.json", "{\"a\": 1, \"b\": 1}", ": tokens \"a\" and \"b\" both have id 1"},
    {"encoder.json", "{\"a\": 1, \"a\": 0}", ": token \"a\" is given twice (ids 0 and 1)"},
    {"encoder.json", "{\"a\\u0400\": 0}",
     ": token \"a\xD0\x80\" has U+0400, not a character of GPT-2's byte alphabet"},
    {"encoder.json", "{\"a\": 1, \"\": 0}", ": token 0 is empty"},
    {"encoder.json", "{\"a\": 0}", ": has no <|endoftext|> token"},
    {"encoder.json", "{\"a\": 0, \"<|endoftext|>\": 1}", ": has no token for the byte 0x00"},
    {"vocab.bpe", "a b\n", ":1: expected the version comment (\"#version: 0.2\") first"},
    {"vocab.bpe", "#version: 0.2\na b\nab c", ": does not end with a newline (is it cut short?)"},
    {"vocab.bpe", "", ": does not end with a newline"},
    {"vocab.bpe", "#version: 0.2\na b\nabc\n",
     ":3: expected a merge, two tokens separated by one space, got \"abc\""},
    {"vocab.bpe", "#version: 0.2\na b\n\nab c\n", ":3: expected a merge"},
    {"vocab.bpe", "#version: 0.2\na  b\n", ":2: expected a merge"},
    {"vocab.bpe", "#version: 0.2\na b\nxy z\n", ":3: token \"xy\" is not in encoder.json"},
    {"vocab.bpe", "#version: 0.2\nx y\n",
     ":2: the merge of \"x y\" makes a token that is not in encoder.json"},
    {"vocab.bpe", "#version: 0.2\na b\nab c\na b\n", ":4: the merge \"a b\" is already on line 2"},
    {"vocab.bpe", "#version: 0.2\na b\nab \xD0\x80\n",
     ":3: token \"\xD0\x80\" has U+0400, not a character of GPT-2's byte alphabet"},
    {"vocab.bpe", "#version: 0.2\na b\nab \xFF\n", ":3: not valid UTF-8 (byte 21 of the file)"},
};

START_TEST(test_broken_files)
{
    for (size_t i = 0; i < sizeof broken_files / sizeof broken_files[0]; i++) {
        const struct broken_file *c = &broken_files[i];
        const char *dir = broken(c->file, c->body);
        expect_load(dir, ZT_ERR_DATA, testutil_fmt("%%s/%s%s", c->file, c->says));
    }
}
END_TEST

/* Every allocation of a load and of an encoding fails in turn: a clean
 * ZT_ERR_NOMEM each time (the sanitizer build checks that nothing leaks),
 * until none is left to fail. */
START_TEST(test_allocation_failures)
{
    const char *dir = mini_folder(&good);
    long n;
    for (n = 1; n < 100000; n++) {
        struct tokenizer *t = NULL;
        struct token_buffer b = {0};
        fault_alloc_arm(n);
        zt_status st = tokenizer_open("gpt2", dir, &t);
        if (st == ZT_OK)
            st = tokenizer_encode(t, (const unsigned char *)"abc abcabc  ab", 14, &b);
        const long left = fault_alloc_disarm();
        token_buffer_free(&b);
        tokenizer_close(t);
        if (left > 0) {
            ck_assert_msg(st == ZT_OK, "%s", zt_error_message());
            break;
        }
        ck_assert_msg(st == ZT_ERR_NOMEM, "allocation %ld: %s: %s", n, zt_status_str(st),
                      zt_error_message());
    }
    ck_assert_int_gt(n, 10);
    ck_assert_int_lt(n, 100000);
}
END_TEST

/* ---- zerotrain prepare ---- */

START_TEST(test_prepare_gpt2_token_file)
{
    const char *dir = testutil_tmpdir("bpe-prepare");
    const char *a = testutil_path_in(dir, "a.txt"), *b = testutil_path_in(dir, "b.txt");
    testutil_write_file(a, "Hello world", 11);
    testutil_write_file(b, " Hello", 6);
    const char *out = testutil_path_in(dir, "o.tok"), *log = testutil_path_in(dir, "log");
    ck_assert_int_eq(testutil_run(log,
                                  "%s prepare --tokenizer gpt2 --tokenizer-dir %s --out %s %s %s",
                                  testutil_binary(), vocab_dir(), out, a, b),
                     0);
    ck_assert_str_eq(
        testutil_slurp(log),
        testutil_fmt("wrote 4 tokens (50257 vocab, 2-byte ids) from 2 files to %s\n", out));
    /* The header and body as data.h describes them, read by hand. */
    size_t n;
    unsigned char *f = testutil_read_file(out, &n);
    ck_assert_uint_eq(n, 40 + 4 * 2);
    ck_assert_mem_eq(f, "ZTTOKENS", 8);
    ck_assert_uint_eq(testutil_get_le(f + 8, 4), 1);
    ck_assert_uint_eq(testutil_get_le(f + 12, 4), 2);
    ck_assert_uint_eq(testutil_get_le(f + 16, 4), GPT2_VOCAB);
    ck_assert_uint_eq(testutil_get_le(f + 24, 8), 4);
    const uint64_t want[] = {15496, 995, GPT2_EOT, 18435};
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(testutil_get_le(f + 40 + 2 * i, 2), want[i]);
    free(f);

    /* The default is still the byte tokenizer. */
    ck_assert_int_eq(testutil_run(log, "%s prepare --out %s %s %s", testutil_binary(), out, a, b),
                     0);
    ck_assert_str_eq(
        testutil_slurp(log),
        testutil_fmt("wrote 17 tokens (256 vocab, 1-byte ids) from 2 files to %s\n", out));
}
END_TEST

/* Runs prepare with `args` and expects exit `code` and `message` once. */
static void expect_prepare(const char *args, int code, const char *message)
{
    const char *log = testutil_path_in(testutil_tmpdir("bpe-usage"), "log");
    const int rc = testutil_run(log, "%s prepare %s", testutil_binary(), args);
    const char *got = testutil_slurp(log);
    ck_assert_msg(rc == code, "exit %d, expected %d: %s", rc, code, got);
    ck_assert_msg(strstr(got, message) && testutil_count(got, "zerotrain: error:") == 1,
                  "output lacks '%s':\n%s", message, got);
}

START_TEST(test_prepare_usage_and_vocab_errors)
{
    const char *dir = testutil_tmpdir("bpe-cli");
    const char *in = testutil_path_in(dir, "in.txt");
    testutil_write_file(in, "text", 4);
    const char *out = testutil_path_in(dir, "o.tok");
    expect_prepare(testutil_fmt("--tokenizer gpt3 --out %s %s", out, in), 2,
                   "zerotrain: error: --tokenizer gpt3: unknown tokenizer (known: bytes, gpt2, hf, "
                   "cl100k, o200k)");
    expect_prepare(testutil_fmt("--tokenizer gpt2 --out %s %s", out, in), 2,
                   "zerotrain: error: --tokenizer gpt2 needs --tokenizer-dir DIR");
    expect_prepare(testutil_fmt("--tokenizer bytes --tokenizer-dir %s --out %s %s", dir, out, in),
                   2,
                   "zerotrain: error: --tokenizer-dir: the bytes tokenizer reads no vocabulary "
                   "folder");
    /* Without --tokenizer the folder says which; this one holds none. */
    expect_prepare(testutil_fmt("--tokenizer-dir %s --out %s %s", dir, out, in), 2,
                   testutil_fmt("zerotrain: error: %s: holds no tokenizer zerotrain knows", dir));
    expect_prepare(testutil_fmt("--out %s %s --tokenizer", out, in), 2,
                   "zerotrain: error: --tokenizer needs a value");
    expect_prepare(
        testutil_fmt("--tokenizer gpt2 --tokenizer-dir %s/none --out %s %s", dir, out, in), 1,
        testutil_fmt("zerotrain: error: %s/none: no such folder (scripts/gpt2_vocab.sh", dir));
    const char *bad = broken("vocab.bpe", "#version: 0.2\nq r\n");
    expect_prepare(testutil_fmt("--tokenizer gpt2 --tokenizer-dir %s --out %s %s", bad, out, in), 1,
                   testutil_fmt("zerotrain: error: %s/vocab.bpe:2: the merge of \"q r\" makes a "
                                "token that is not in encoder.json",
                                bad));
    ck_assert_int_ne(access(out, F_OK), 0);
    const char *log = testutil_path_in(dir, "log");
    ck_assert_int_eq(testutil_run(log, "%s help prepare", testutil_binary()), 0);
    const char *help = testutil_slurp(log);
    ck_assert_msg(strstr(help, "--tokenizer gpt2") && strstr(help, "--tokenizer-dir DIR") &&
                      strstr(help, "scripts/gpt2_vocab.sh"),
                  "%s", help);
}
END_TEST

static Suite *bpe_suite(void)
{
    Suite *s = suite_create("bpe");
    TCase *g = testutil_tcase(s, "gpt2", 120);
    tcase_add_test(g, test_hello_world);
    tcase_add_test(g, test_reference_ids);
    tcase_add_test(g, test_roundtrip_license_and_random_bytes);
    tcase_add_test(g, test_long_pieces);
    tcase_add_test(g, test_decode_refuses_bad_ids);
    tcase_add_test(g, test_dataset_documents);

    TCase *t = testutil_tcase(s, "table", 60);
    tcase_add_test(t, test_table_by_name);
    tcase_add_test(t, test_unicode_classes);

    TCase *m = testutil_tcase(s, "vocabulary", 120);
    tcase_add_test(m, test_merge_rounds);
    tcase_add_test(m, test_missing_files);
    tcase_add_test(m, test_broken_files);
    tcase_add_test(m, test_allocation_failures);

    TCase *p = testutil_tcase(s, "prepare", 120);
    tcase_add_test(p, test_prepare_gpt2_token_file);
    tcase_add_test(p, test_prepare_usage_and_vocab_errors);
    return s;
}

int main(void)
{
    return testutil_run_suite(bpe_suite(), 0);
}
