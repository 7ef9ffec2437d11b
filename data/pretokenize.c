/* data/pretokenize.c — see pretokenize.h.
 *
 * Text is mostly ASCII, so its classes are decided without the table; other
 * code points take a binary search over a few thousand ranges.
 */
#include "pretokenize.h"

#include <string.h>

static const enum uclass coarse[] = {
    [UCAT_OTHER] = UCLASS_OTHER,  [UCAT_SPACE] = UCLASS_SPACE,   [UCAT_UPPER] = UCLASS_LETTER,
    [UCAT_LOWER] = UCLASS_LETTER, [UCAT_LETTER] = UCLASS_LETTER, [UCAT_NUMBER] = UCLASS_NUMBER,
    [UCAT_MARK] = UCLASS_OTHER,
};

static enum ucat ascii_category(unsigned char c)
{
    if (c >= 'a' && c <= 'z')
        return UCAT_LOWER;
    if (c >= 'A' && c <= 'Z')
        return UCAT_UPPER;
    if (c >= '0' && c <= '9')
        return UCAT_NUMBER;
    if (c == ' ' || (c >= '\t' && c <= '\r'))
        return UCAT_SPACE;
    return UCAT_OTHER;
}

static enum uclass ascii_class(unsigned char c)
{
    return coarse[ascii_category(c)];
}

enum ucat unicode_category(uint32_t cp)
{
    if (cp < 0x80)
        return ascii_category((unsigned char)cp);
    size_t lo = 0, hi = unicode_class_range_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < unicode_class_ranges[mid].first)
            hi = mid;
        else if (cp > unicode_class_ranges[mid].last)
            lo = mid + 1;
        else
            return unicode_class_ranges[mid].cat;
    }
    return UCAT_OTHER;
}

enum uclass unicode_class(uint32_t cp)
{
    return coarse[unicode_category(cp)];
}

size_t pretokenize_char(const unsigned char *s, size_t n, size_t i, uint32_t *cp)
{
    const unsigned char c = s[i];
    /* The lead byte fixes the length, the bits it carries and the range of
     * the second byte (which excludes overlong forms, surrogates and code
     * points past U+10FFFF); later bytes are 80..BF. */
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
    } else {
        len = 0;
    }
    uint32_t v = c & (0x7Fu >> len);
    for (size_t k = 1; len > 0 && k < len; k++) {
        if (i + k >= n || s[i + k] < lo || s[i + k] > hi) {
            len = 0;
            break;
        }
        v = (v << 6) | (s[i + k] & 0x3Fu);
        lo = 0x80;
        hi = 0xBF;
    }
    if (len == 0) {
        *cp = 0xDC00u + c; /* as Python's surrogateescape decodes it */
        return 1;
    }
    *cp = v;
    return len;
}

/* The class of the character at text[pos]; *len gets its length. */
static enum uclass class_at(const unsigned char *text, size_t n, size_t pos, size_t *len)
{
    if (text[pos] < 0x80) {
        *len = 1;
        return ascii_class(text[pos]);
    }
    uint32_t cp;
    *len = pretokenize_char(text, n, pos, &cp);
    return unicode_class(cp);
}

/* Where the run of characters of class cls that starts at pos ends. */
static size_t run_end(const unsigned char *text, size_t n, size_t pos, enum uclass cls)
{
    size_t len;
    while (pos < n && class_at(text, n, pos, &len) == cls)
        pos += len;
    return pos;
}

/* 's 't 're 've 'm 'll 'd at pos: the length of the one there, else 0. */
static size_t contraction(const unsigned char *text, size_t n, size_t pos)
{
    if (text[pos] != '\'' || pos + 1 >= n)
        return 0;
    const unsigned char a = text[pos + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if (pos + 2 >= n)
        return 0;
    const unsigned char b = text[pos + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

/* \s+(?!\S)|\s+ at pos, a white space character: the whole run when it
 * reaches the end; else all of it but its last character, which stays for
 * what follows, unless that would leave nothing. */
static size_t space_piece(const unsigned char *text, size_t n, size_t pos)
{
    size_t end = pos, last = pos, len;
    while (end < n && class_at(text, n, end, &len) == UCLASS_SPACE) {
        last = end;
        end += len;
    }
    if (end == n || last == pos)
        return end - pos;
    return last - pos;
}

size_t pretokenize_next(const unsigned char *text, size_t n, size_t pos)
{
    size_t len = contraction(text, n, pos);
    if (len > 0)
        return len;
    if (text[pos] == ' ' && pos + 1 < n) {
        /* " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+" with the space */
        const enum uclass next = class_at(text, n, pos + 1, &len);
        if (next != UCLASS_SPACE)
            return run_end(text, n, pos + 1, next) - pos;
    }
    const enum uclass cls = class_at(text, n, pos, &len);
    if (cls != UCLASS_SPACE)
        return run_end(text, n, pos, cls) - pos;
    return space_piece(text, n, pos);
}

/* ---- Llama 3, cl100k, Qwen2 and o200k ---- */

static int is_break(unsigned char c)
{
    return c == '\r' || c == '\n';
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d) at pos: the length of the one there, else 0.
 * b | 0x20 is the lower case of an ASCII letter and no other byte's. */
static size_t contraction_any_case(const unsigned char *text, size_t n, size_t pos)
{
    if (pos + 1 >= n || text[pos] != '\'')
        return 0;
    const unsigned char a = text[pos + 1] | 0x20;
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if (pos + 2 >= n)
        return 0;
    const unsigned char b = text[pos + 2] | 0x20;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

/* \p{N}{1,max} at pos, a number. */
static size_t numbers(const unsigned char *text, size_t n, size_t pos, int max)
{
    size_t end = pos, len;
    for (int k = 0; k < max && end < n && class_at(text, n, end, &len) == UCLASS_NUMBER; k++)
        end += len;
    return end - pos;
}

/* " ?[^\s\p{L}\p{N}]+" and the line breaks (and with `slash`, '/') after it,
 * at pos; 0 when it does not match. */
static size_t others(const unsigned char *text, size_t n, size_t pos, int slash)
{
    size_t start = pos, len;
    if (text[pos] == ' ' && pos + 1 < n && class_at(text, n, pos + 1, &len) == UCLASS_OTHER)
        start = pos + 1;
    if (class_at(text, n, start, &len) != UCLASS_OTHER)
        return 0;
    size_t end = run_end(text, n, start, UCLASS_OTHER);
    while (end < n && (is_break(text[end]) || (slash && text[end] == '/')))
        end++;
    return end - pos;
}

/* \s*[\r\n]+|\s+(?!\S)|\s+ at pos, white space: up to the run's last line
 * break when it has one, else as GPT-2's rule. */
static size_t space_piece_breaks(const unsigned char *text, size_t n, size_t pos)
{
    size_t end = pos, after_break = 0, len;
    while (end < n && class_at(text, n, end, &len) == UCLASS_SPACE) {
        end += len;
        if (is_break(text[end - len]))
            after_break = end;
    }
    return after_break > 0 ? after_break - pos : space_piece(text, n, pos);
}

static size_t llama3_rule(const unsigned char *text, size_t n, size_t pos, int max_numbers)
{
    size_t len = contraction_any_case(text, n, pos), next_len;
    if (len > 0)
        return len;
    const enum uclass cls = class_at(text, n, pos, &len);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (cls == UCLASS_LETTER)
        return run_end(text, n, pos, UCLASS_LETTER) - pos;
    if (cls != UCLASS_NUMBER && !is_break(text[pos]) && pos + len < n &&
        class_at(text, n, pos + len, &next_len) == UCLASS_LETTER)
        return run_end(text, n, pos + len, UCLASS_LETTER) - pos;
    if (cls == UCLASS_NUMBER)
        return numbers(text, n, pos, max_numbers);
    const size_t other = others(text, n, pos, 0);
    return other > 0 ? other : space_piece_breaks(text, n, pos);
}

size_t pretokenize_next_llama3(const unsigned char *text, size_t n, size_t pos)
{
    return llama3_rule(text, n, pos, 3);
}

size_t pretokenize_next_qwen2(const unsigned char *text, size_t n, size_t pos)
{
    return llama3_rule(text, n, pos, 1);
}

static enum ucat category_at(const unsigned char *text, size_t n, size_t pos, size_t *len)
{
    if (text[pos] < 0x80) {
        *len = 1;
        return ascii_category(text[pos]);
    }
    uint32_t cp;
    *len = pretokenize_char(text, n, pos, &cp);
    return unicode_category(cp);
}

/* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
static int upper_set(enum ucat c)
{
    return c == UCAT_UPPER || c == UCAT_LETTER || c == UCAT_MARK;
}

static int lower_set(enum ucat c)
{
    return c == UCAT_LOWER || c == UCAT_LETTER || c == UCAT_MARK;
}

/* Where the run of lower-set characters from pos ends (pos when none). */
static size_t lower_run_end(const unsigned char *text, size_t n, size_t pos)
{
    size_t len;
    while (pos < n && lower_set(category_at(text, n, pos, &len)))
        pos += len;
    return pos;
}

/* Upper*Lower+ from s: the end, or 0. The upper run is greedy and gives
 * back characters until a lower one can follow: the last position at or
 * after its own characters where a lower-set character stands (Lm, Lo and
 * marks are in both sets). */
static size_t upper_then_lower(const unsigned char *text, size_t n, size_t s)
{
    size_t p = s, last_lower = 0, len;
    int found = 0;
    enum ucat c = UCAT_OTHER;
    while (p < n && upper_set(c = category_at(text, n, p, &len))) {
        if (lower_set(c)) {
            last_lower = p;
            found = 1;
        }
        p += len;
    }
    if (p < n && lower_set(c))
        return lower_run_end(text, n, p);
    return found ? lower_run_end(text, n, last_lower) : 0;
}

/* Upper+Lower* from s: the end, or 0. */
static size_t upper_then_any_lower(const unsigned char *text, size_t n, size_t s)
{
    size_t p = s, len;
    while (p < n && upper_set(category_at(text, n, p, &len)))
        p += len;
    return p > s ? lower_run_end(text, n, p) : 0;
}

/* o200k's two word alternatives at pos, each first with the optional
 * leading character taken, then without: the end, or 0. */
static size_t o200k_word(const unsigned char *text, size_t n, size_t pos)
{
    size_t len, end;
    const enum ucat c = category_at(text, n, pos, &len);
    const int lead = c != UCAT_UPPER && c != UCAT_LOWER && c != UCAT_LETTER && c != UCAT_NUMBER &&
                     !is_break(text[pos]) && pos + len < n;
    if ((lead && (end = upper_then_lower(text, n, pos + len))) ||
        (end = upper_then_lower(text, n, pos)) ||
        (lead && (end = upper_then_any_lower(text, n, pos + len))) ||
        (end = upper_then_any_lower(text, n, pos)))
        return end < n ? end + contraction_any_case(text, n, end) : end;
    return 0;
}

size_t pretokenize_next_o200k(const unsigned char *text, size_t n, size_t pos)
{
    const size_t word = o200k_word(text, n, pos);
    if (word > 0)
        return word - pos;
    size_t len;
    if (class_at(text, n, pos, &len) == UCLASS_NUMBER)
        return numbers(text, n, pos, 3);
    const size_t other = others(text, n, pos, 1);
    return other > 0 ? other : space_piece_breaks(text, n, pos);
}

/* Each rule's pattern as the files spell it: tokenizer.json's Split and
 * ByteLevel pre-tokenizers, tiktoken's two spellings (with and without
 * possessive quantifiers, which change nothing for these classes). */
static const struct {
    const char *pattern;
    pretokenize_fn rule;
} rules[] = {
    {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
     pretokenize_next},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     pretokenize_next_llama3},
    {"'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}{1,3}| "
     "?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
     pretokenize_next_llama3},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     pretokenize_next_qwen2},
    {"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:"
     "'"
     "s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}"
     "\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     pretokenize_next_o200k},
};

pretokenize_fn pretokenize_find(const char *pattern)
{
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (strcmp(rules[i].pattern, pattern) == 0)
            return rules[i].rule;
    return NULL;
}
