/* data/sniff.c — telling a binary file from a text file by its first bytes.
 *
 * The byte tokenizer reads any bytes, so an image or an archive left in a
 * text folder would be trained on without a word. The test is the one git
 * and grep make: text has no NUL byte in its first few KiB; and, since a
 * binary file without a NUL is rare but possible, text is mostly valid
 * UTF-8. "Mostly" leaves room for older 8-bit encodings (Latin-1 text with
 * its accented letters), which a byte-level model can still learn from: only
 * more than one byte in ten outside valid UTF-8 makes a file binary.
 *
 * A UTF-8 sequence cut off at the end of the sample is not counted as
 * invalid when the file goes on: the sample's edge falls where it falls.
 */
#include "data.h"

#include <stdio.h>

/* Length of the valid UTF-8 sequence at p[0..n): 1..4, 0 when the bytes
 * there are invalid, or -1 when they are a valid start cut off at n. */
static int utf8_sequence(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    int len;
    unsigned char lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4;
    else
        return 0;
    /* Overlong forms, UTF-16 surrogates and code points above U+10FFFF. */
    if (c == 0xe0)
        lo = 0xa0;
    else if (c == 0xed)
        hi = 0x9f;
    else if (c == 0xf0)
        lo = 0x90;
    else if (c == 0xf4)
        hi = 0x8f;
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n)
            return -1;
        unsigned char min = i == 1 ? lo : 0x80, max = i == 1 ? hi : 0xbf;
        if (p[i] < min || p[i] > max)
            return 0;
    }
    return len;
}

int sniff_is_binary(const unsigned char *head, size_t n, int more, char *why, size_t why_size)
{
    if (n > ZT_SNIFF_BYTES)
        n = ZT_SNIFF_BYTES, more = 1;
    size_t invalid = 0;
    for (size_t i = 0; i < n;) {
        if (head[i] == 0) {
            snprintf(why, why_size, "a NUL byte at offset %zu", i);
            return 1;
        }
        int len = utf8_sequence(head + i, n - i);
        if (len < 0 && !more)
            len = 0;
        if (len < 0)
            break;
        if (len == 0) {
            invalid++;
            len = 1;
        }
        i += (size_t)len;
    }
    if (invalid * 10 > n) {
        snprintf(why, why_size, "%zu of its first %zu bytes are not UTF-8 text", invalid, n);
        return 1;
    }
    return 0;
}
