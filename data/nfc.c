/* data/nfc.c — see nfc.h. */
#include "nfc.h"

#include <stdlib.h>
#include <string.h>

/* A byte that is not part of valid UTF-8, kept as this plus the byte. */
#define RAW_BYTE 0x80000000u

/* Hangul syllables (UAX #15, 3.12 of the Unicode standard). */
enum {
    S_BASE = 0xAC00,
    L_BASE = 0x1100,
    V_BASE = 0x1161,
    T_BASE = 0x11A7,
    L_COUNT = 19,
    V_COUNT = 21,
    T_COUNT = 28,
    N_COUNT = V_COUNT * T_COUNT,
    S_COUNT = L_COUNT * N_COUNT,
};

/* The code point at text[i] into *cp and its length; an invalid sequence
 * (overlong, a surrogate, above U+10FFFF, cut short) is one RAW_BYTE. */
static size_t utf8_next(const unsigned char *text, size_t n, size_t i, uint32_t *cp)
{
    const unsigned char b = text[i];
    size_t len = b < 0x80                ? 1
                 : b >= 0xC2 && b < 0xE0 ? 2
                 : b >= 0xE0 && b < 0xF0 ? 3
                 : b >= 0xF0 && b < 0xF5 ? 4
                                         : 0;
    uint32_t c = len == 1 ? b : len == 2 ? b & 0x1Fu : len == 3 ? b & 0x0Fu : b & 0x07u;
    for (size_t k = 1; k < len; k++) {
        if (i + k >= n || (text[i + k] & 0xC0) != 0x80) {
            len = 0;
            break;
        }
        c = c << 6 | (text[i + k] & 0x3Fu);
    }
    if (len == 0 || (len == 3 && (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF))) ||
        (len == 4 && (c < 0x10000 || c > 0x10FFFF))) {
        *cp = RAW_BYTE | b;
        return 1;
    }
    *cp = c;
    return len;
}

static size_t utf8_put(uint32_t c, unsigned char *out)
{
    if (c & RAW_BYTE) {
        out[0] = (unsigned char)c;
        return 1;
    }
    if (c < 0x80) {
        out[0] = (unsigned char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (unsigned char)(0xC0 | c >> 6);
        out[1] = (unsigned char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (unsigned char)(0xE0 | c >> 12);
        out[1] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
        out[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | c >> 18);
    out[1] = (unsigned char)(0x80 | (c >> 12 & 0x3F));
    out[2] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
    out[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

/* The canonical combining class of c (0 for every code point below
 * U+0300 and for raw bytes). */
static int combining_class(uint32_t c)
{
    if (c < 0x300 || (c & RAW_BYTE))
        return 0;
    size_t lo = 0, hi = nfc_class_range_count;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (nfc_class_ranges[mid].last < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < nfc_class_range_count && nfc_class_ranges[lo].first <= c ? nfc_class_ranges[lo].ccc
                                                                         : 0;
}

/* c's full canonical decomposition, appended at out[*k ..] (at most 4). */
static void decompose(uint32_t c, uint32_t *out, size_t *k)
{
    if (c >= S_BASE && c < S_BASE + S_COUNT) {
        const uint32_t s = c - S_BASE;
        out[(*k)++] = L_BASE + s / N_COUNT;
        out[(*k)++] = V_BASE + s % N_COUNT / T_COUNT;
        if (s % T_COUNT)
            out[(*k)++] = T_BASE + s % T_COUNT;
        return;
    }
    size_t lo = 0, hi = c < 0xC0 || (c & RAW_BYTE) ? 0 : nfc_decomposition_count;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (nfc_decompositions[mid].cp < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (hi == 0 || lo == nfc_decomposition_count || nfc_decompositions[lo].cp != c) {
        out[(*k)++] = c;
        return;
    }
    const struct nfc_decomposition *d = &nfc_decompositions[lo];
    for (uint16_t j = 0; j < d->len; j++)
        out[(*k)++] = nfc_decomposition_chars[d->at + j];
}

/* The primary composite of (a, b), or 0 when they do not compose. */
static uint32_t compose(uint32_t a, uint32_t b)
{
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE &&
        b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    size_t lo = 0, hi = nfc_composite_count;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const struct nfc_composite *p = &nfc_composites[mid];
        if (p->first < a || (p->first == a && p->second < b))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < nfc_composite_count && nfc_composites[lo].first == a &&
                   nfc_composites[lo].second == b
               ? nfc_composites[lo].composite
               : 0;
}

/* Sorts every run of non-starters in c[0..n) stably by class (cls[i] is
 * c[i]'s, moved with it). Runs are short: insertion sort. */
static void canonical_order(uint32_t *c, uint8_t *cls, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        const uint32_t ch = c[i];
        const uint8_t k = cls[i];
        size_t j = i;
        for (; k != 0 && j > 0 && cls[j - 1] > k; j--) {
            c[j] = c[j - 1];
            cls[j] = cls[j - 1];
        }
        c[j] = ch;
        cls[j] = k;
    }
}

/* Composes c[0..n) in place (UAX #15's canonical composition); returns
 * the new length. A character composes with the last starter kept unless
 * a character kept between them has a class of 0 or at least its own. */
static size_t canonical_compose(uint32_t *c, const uint8_t *cls, size_t n)
{
    const size_t none = SIZE_MAX; /* no starter yet: nothing composes */
    size_t starter = none, kept = 0;
    int last = 0; /* the class of the last character kept after the starter */
    for (size_t i = 0; i < n; i++) {
        if (starter != none && (last == 0 || last < cls[i])) {
            const uint32_t composite = compose(c[starter], c[i]);
            if (composite) {
                c[starter] = composite;
                continue;
            }
        }
        if (cls[i] == 0)
            starter = kept;
        last = cls[i];
        c[kept++] = c[i];
    }
    return kept;
}

static int quick_yes(const unsigned char *text, size_t n)
{
    /* every code point below U+0300: lead bytes below 0xCC */
    for (size_t i = 0; i < n; i++)
        if (text[i] >= 0xCC)
            return 0;
    return 1;
}

zt_status nfc_normalize(const unsigned char *text, size_t n, unsigned char **out, size_t *out_n)
{
    *out = NULL;
    *out_n = 0;
    if (quick_yes(text, n))
        return ZT_OK;
    /* at most 4 code points per input byte's character, one per byte */
    uint32_t *c = malloc((4 * n + 1) * sizeof *c);
    uint8_t *cls = malloc(4 * n + 1);
    unsigned char *bytes = malloc(4 * 4 * n + 1);
    if (!c || !cls || !bytes) {
        free(c);
        free(cls);
        free(bytes);
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate %zu bytes to normalize text", 24 * n);
    }
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += utf8_next(text, n, i, &cp);
        decompose(cp, c, &k);
    }
    for (size_t i = 0; i < k; i++)
        cls[i] = (uint8_t)combining_class(c[i]);
    canonical_order(c, cls, k);
    k = canonical_compose(c, cls, k);
    size_t m = 0;
    for (size_t i = 0; i < k; i++)
        m += utf8_put(c[i], bytes + m);
    free(c);
    free(cls);
    *out = bytes;
    *out_n = m;
    return ZT_OK;
}
