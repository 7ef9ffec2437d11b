/* data/pretokenize.c — see pretokenize.h.
 *
 * Text is mostly ASCII, so its classes are decided without the table; other
 * code points take a binary search over a few hundred ranges.
 */
#include "pretokenize.h"

static enum uclass ascii_class(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return UCLASS_LETTER;
    if (c >= '0' && c <= '9')
        return UCLASS_NUMBER;
    if (c == ' ' || (c >= '\t' && c <= '\r'))
        return UCLASS_SPACE;
    return UCLASS_OTHER;
}

enum uclass unicode_class(uint32_t cp)
{
    if (cp < 0x80)
        return ascii_class((unsigned char)cp);
    size_t lo = 0, hi = unicode_class_range_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < unicode_class_ranges[mid].first)
            hi = mid;
        else if (cp > unicode_class_ranges[mid].last)
            lo = mid + 1;
        else
            return unicode_class_ranges[mid].cls;
    }
    return UCLASS_OTHER;
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
