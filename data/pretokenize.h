/* data/pretokenize.h — GPT-2's pre-tokenising rule, written out by hand on
 * UTF-8 bytes; for the data module's files (bpe.c) and its tests.
 *
 * GPT-2's encoder cuts text into pieces before BPE, and no merge ever
 * crosses a piece, with the pattern
 *
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *
 * (Python's `regex` module, findall: at each position the first
 * alternative that matches, each as long as it goes). Every character is of
 * exactly one of four classes, white space (\s), letter (\p{L}), number
 * (\p{N}) or other, so the pattern reads, at a position:
 *   - an ASCII apostrophe and one of s t re ve m ll d (case matters);
 *   - else a space (U+0020 only) and a run of one class other than white
 *     space: the space and the run;
 *   - else a run of the class of the character there, letters, numbers or
 *     others (apostrophes included: "?'s" is "?'" then "s");
 *   - else (white space) the whole run of white space when it reaches the
 *     end of the text; a run of two or more characters but its last one (which
 *     goes with what follows: "a  b" is "a", " ", " b"); a single character.
 * No lookup table of the pattern is needed, and every piece is found in time
 * linear in its length.
 *
 * The classes come from unicode_classes.c, generated from the regex module
 * itself by scripts/gen_unicode_classes.py, so that they are what GPT-2's
 * encoder sees for every code point (Unicode 15.0 with Debian 12's module).
 *
 * Bytes that are not UTF-8. GPT-2's encoder takes a Python str; bytes reach
 * it decoded with surrogateescape, which turns every byte that is not part
 * of a well-formed sequence into one lone surrogate U+DC80..U+DCFF, a
 * character in none of \s, \p{L} and \p{N}. The same is done here: a byte
 * that does not start a well-formed sequence (Unicode's table 3-7: no
 * overlong form, no surrogate, nothing past U+10FFFF, nothing cut short) is
 * one character of class other, U+DC00 + the byte, and decoding goes on at
 * the next byte. So invalid bytes join the runs of other characters around
 * them, and since a piece is a run of the input's bytes, encoding never
 * loses or alters a byte.
 */
#ifndef ZT_DATA_PRETOKENIZE_H
#define ZT_DATA_PRETOKENIZE_H

#include <stddef.h>
#include <stdint.h>

enum uclass { UCLASS_OTHER, UCLASS_SPACE, UCLASS_LETTER, UCLASS_NUMBER };

/* Code points first..last are all of class cls. */
struct unicode_range {
    uint32_t first, last;
    enum uclass cls;
};

/* unicode_classes.c: sorted, disjoint ranges of the white space, letter and
 * number code points; every other code point is UCLASS_OTHER. */
extern const struct unicode_range unicode_class_ranges[];
extern const size_t unicode_class_range_count;

/* The class of code point cp (any value; past U+10FFFF: other). */
enum uclass unicode_class(uint32_t cp);

/* Decodes the character at s[i] (i < n): returns its length in bytes (1 to
 * 4) and sets *cp to its code point, or to U+DC00 + s[i] with length 1 when
 * s[i] does not start a well-formed UTF-8 sequence inside s[0..n). */
size_t pretokenize_char(const unsigned char *s, size_t n, size_t i, uint32_t *cp);

/* The length in bytes of the piece that starts at text[pos] (pos < n): at
 * least 1, and pos + the length is at most n. */
size_t pretokenize_next(const unsigned char *text, size_t n, size_t pos);

#endif
