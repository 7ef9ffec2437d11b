/* tests/test_nfc.c — Unicode NFC (data/nfc.h) against Python's
 * unicodedata.normalize("NFC", ...) and against forms written out by hand.
 *
 * Python is the reference for every code point alone (each of the 1.1
 * million but the surrogates) and for random strings drawn from the
 * characters NFC is about: combining marks of several classes in
 * non-canonical order, Hangul jamo and syllables, singletons (Ångström,
 * Ohm), composition exclusions and non-starter decompositions. Its
 * Unicode version must be the tables' (nfc_unicode_version); another
 * version gives different answers for the characters added between them,
 * so that comparison is skipped, said on stderr. The hand-written cases run
 * everywhere.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../data/nfc.h"
#include "testutil.h"

/* text in NFC, as a new string (caller frees). */
static char *nfc_of(const char *text, size_t n, size_t *out_n)
{
    unsigned char *out;
    ck_assert_int_eq(nfc_normalize((const unsigned char *)text, n, &out, out_n), ZT_OK);
    if (!out) {
        out = malloc(n + 1);
        ck_assert_ptr_nonnull(out);
        memcpy(out, text, n);
        *out_n = n;
    }
    return (char *)out;
}

START_TEST(hand_written_forms)
{
    static const struct {
        const char *in, *want, *what;
    } cases[] = {
        {"plain ASCII", "plain ASCII", "ASCII"},
        {"e\xCC\x81", "\xC3\xA9", "e + acute composes"},
        {"\xC3\xA9", "\xC3\xA9", "a composite stays"},
        {"\xE2\x84\xAB", "\xC3\x85", "Angstrom sign to A with ring (singleton)"},
        {"\xE2\x84\xA6", "\xCE\xA9", "Ohm sign to Omega (singleton)"},
        /* a + dot below (220) + acute (230) either way round: the same */
        {"a\xCC\x81\xCC\xA3", "\xE1\xBA\xA1\xCC\x81", "marks reordered, then composed"},
        {"a\xCC\xA3\xCC\x81", "\xE1\xBA\xA1\xCC\x81", "marks in order"},
        /* q has no composite with dot below: the marks are only ordered */
        {"q\xCC\x87\xCC\xA3", "q\xCC\xA3\xCC\x87", "non-canonical order sorted"},
        {"\xE1\x84\x80\xE1\x85\xA1", "\xEA\xB0\x80", "Hangul L + V to LV"},
        {"\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81", "Hangul L + V + T to LVT"},
        {"\xEA\xB0\x80\xE1\x86\xA8", "\xEA\xB0\x81", "Hangul LV + T"},
        {"\xEA\xB0\x81", "\xEA\xB0\x81", "Hangul LVT stays"},
        {"\xE0\xBD\xB3", "\xE0\xBD\xB1\xE0\xBD\xB2", "non-starter decomposition stays apart"},
        {"\xE0\xA5\x98", "\xE0\xA4\x95\xE0\xA4\xBC", "composition exclusion stays apart"},
        {">\xCC\xB8", "\xE2\x89\xAF", "> + long solidus overlay"},
        {"\xCC\x81"
         "a",
         "\xCC\x81"
         "a",
         "a leading mark composes with nothing"},
        {"a\xFF\xCC\x81", "a\xFF\xCC\x81", "an invalid byte blocks and passes through"},
        {"e\xCC\x81\xCC\x81", "\xC3\xA9\xCC\x81", "a second acute stays"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n;
        char *got = nfc_of(cases[i].in, strlen(cases[i].in), &n);
        ck_assert_msg(n == strlen(cases[i].want) && memcmp(got, cases[i].want, n) == 0,
                      "%s: got %zu bytes \"%.*s\"", cases[i].what, n, (int)n, got);
        free(got);
    }
}
END_TEST

static size_t put_utf8(uint32_t c, char *out)
{
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | c >> 6);
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | c >> 12);
        out[1] = (char)(0x80 | (c >> 6 & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | c >> 18);
    out[1] = (char)(0x80 | (c >> 12 & 0x3F));
    out[2] = (char)(0x80 | (c >> 6 & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* The characters the random strings are drawn from. */
static uint32_t pool_char(uint64_t *s)
{
    static const uint32_t special[] = {
        'a',    'e',    'o',    'A',    'n',    'c',    ' ',     '>',    '=',    0x212B, 0x2126,
        0x0344, 0x0F73, 0x0F71, 0x0F72, 0x0F80, 0x0B47, 0x0B3E,  0x0B56, 0x1E0B, 0x0323, 0x05B0,
        0x05B1, 0x0591, 0x0338, 0x3099, 0x309A, 0x304B, 0x30CF,  0xFB2A, 0x0958, 0x1F71, 0x00C5,
        0x0CC6, 0x0CC2, 0x0CD5, 0x11A7, 0x11A8, 0x11C2, 0x1D15E, 0x1D165};
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    const uint32_t r = (uint32_t)(*s >> 33);
    switch (r % 4) {
    case 0:
        return 0x300 + r / 4 % 0x70; /* combining diacritics */
    case 1:
        return 0x1100 + r / 4 % 0x100; /* Hangul jamo */
    case 2:
        return 0xAC00 + r / 4 % 0x40; /* Hangul syllables */
    default:
        return special[r / 4 % (sizeof special / sizeof special[0])];
    }
}

/* The version of Python's Unicode data, or "" without python3. */
static const char *python_unicode_version(const char *dir)
{
    const char *out = testutil_path_in(dir, "version");
    if (testutil_run(
            testutil_path_in(dir, "version.log"),
            "(python3 -c 'import unicodedata; print(unicodedata.unidata_version, end=\"\")' "
            "> %s)",
            out) != 0)
        return "";
    return testutil_slurp(out);
}

START_TEST(every_code_point_and_random_strings_as_python)
{
    const char *dir = testutil_tmpdir("nfc");
    const char *version = python_unicode_version(dir);
    if (strcmp(version, nfc_unicode_version) != 0) {
        fprintf(stderr,
                "test_nfc: skipped the comparison with Python: its Unicode data is '%s', the "
                "tables' %s (scripts/gen_unicode_nfc.py)\n",
                version, nfc_unicode_version);
        return;
    }
    enum { RANDOM = 200000 };
    const char *in = testutil_path_in(dir, "in.txt"), *want = testutil_path_in(dir, "want.txt");
    FILE *f = fopen(in, "wb");
    ck_assert_ptr_nonnull(f);
    char c[4];
    size_t lines = 0;
    for (uint32_t cp = 1; cp < 0x110000; cp++)
        if (cp != '\n' && cp != '\r' && !(cp >= 0xD800 && cp <= 0xDFFF)) {
            fwrite(c, 1, put_utf8(cp, c), f);
            fputc('\n', f);
            lines++;
        }
    uint64_t s = 0x853C49E6748FEA9BULL;
    for (int i = 0; i < RANDOM; i++, lines++) {
        const int len = 1 + (int)(pool_char(&s) % 8);
        for (int k = 0; k < len; k++)
            fwrite(c, 1, put_utf8(pool_char(&s), c), f);
        fputc('\n', f);
    }
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_msg(testutil_run(testutil_path_in(dir, "python.log"),
                               "(python3 -c 'import sys, unicodedata\n"
                               "for line in sys.stdin.buffer.read().split(b\"\\n\")[:-1]:\n"
                               "    t = unicodedata.normalize(\"NFC\", line.decode())\n"
                               "    sys.stdout.buffer.write(t.encode() + b\"\\n\")' < %s > %s)",
                               in, want) == 0,
                  "%s", testutil_slurp(testutil_path_in(dir, "python.log")));
    size_t n_in, n_want;
    char *text = (char *)testutil_read_file(in, &n_in),
         *ref = (char *)testutil_read_file(want, &n_want);
    size_t at = 0, ref_at = 0, checked = 0, changed = 0;
    while (at < n_in) {
        const size_t len = (size_t)((char *)memchr(text + at, '\n', n_in - at) - (text + at));
        const char *end = memchr(ref + ref_at, '\n', n_want - ref_at);
        ck_assert_ptr_nonnull(end);
        const size_t ref_len = (size_t)(end - (ref + ref_at));
        size_t n;
        char *got = nfc_of(text + at, len, &n);
        ck_assert_msg(n == ref_len && memcmp(got, ref + ref_at, n) == 0,
                      "line %zu \"%.*s\": Python gives %zu bytes \"%.*s\", ours %zu \"%.*s\"",
                      checked + 1, (int)len, text + at, ref_len, (int)ref_len, ref + ref_at, n,
                      (int)n, got);
        changed += n != len || memcmp(got, text + at, n) != 0;
        free(got);
        at += len + 1;
        ref_at += ref_len + 1;
        checked++;
    }
    ck_assert_uint_eq(checked, lines);
    printf("test_nfc: %zu strings as Python's NFC (Unicode %s), %zu of them changed by it\n",
           checked, version, changed);
    free(text);
    free(ref);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("nfc");
    TCase *tc = testutil_tcase(s, "nfc", 600);
    tcase_add_test(tc, hand_written_forms);
    tcase_add_test(tc, every_code_point_and_random_strings_as_python);
    return testutil_run_suite(s, 0);
}
