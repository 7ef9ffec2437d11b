/* data/pretokenize.h — the pre-tokenising rules of byte-level BPE
 * tokenizers (GPT-2's, Llama 3's and cl100k's, Qwen2's, o200k's), each
 * written out by hand on UTF-8 bytes; for the data module's files (bpe.c,
 * bpe_tokenizer.c) and its tests.
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
 * encoder sees for every code point.
 *
 * Llama 3's pattern (cl100k's is the same, its contractions spelt out),
 *
 *     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *      ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *
 * reads, at a position: a contraction in either case; one character that is
 * neither a line break, a letter nor a number, if a letter follows, and the
 * run of letters; one to three numbers; an optional space, a run of others
 * and the line breaks after it; a run of white space up to its last line
 * break, if it has one; else white space as GPT-2's rule cuts it. Qwen2's
 * takes one number at a time. o200k's splits letters by case:
 *
 *     [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|..)?|
 *     [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|..)?|
 *     \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *
 * "Hello" is one piece, "HelloWorld" two, "HTTPServer" "HTTPS" + "erver".
 * Marks belong to both case sets and may be the optional first character;
 * the backtracking this needs is written out in o200k_word (pretokenize.c).
 * Tokenizer files name their rule by its pattern: pretokenize_find takes
 * the pattern as written there and gives the rule, or NULL for one that is
 * not written out here.
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

/* The classes GPT-2's and Llama 3's patterns see; marks are "other". */
enum uclass { UCLASS_OTHER, UCLASS_SPACE, UCLASS_LETTER, UCLASS_NUMBER };

/* The categories o200k's pattern sees: upper and title case (Lu, Lt), lower
 * case (Ll), other letters (Lm, Lo), numbers, marks (M). */
enum ucat { UCAT_OTHER, UCAT_SPACE, UCAT_UPPER, UCAT_LOWER, UCAT_LETTER, UCAT_NUMBER, UCAT_MARK };

/* Code points first..last are all of category cat. */
struct unicode_range {
    uint32_t first, last;
    enum ucat cat;
};

/* unicode_classes.c: sorted, disjoint ranges of the white space, letter,
 * number and mark code points; every other code point is UCAT_OTHER. */
extern const struct unicode_range unicode_class_ranges[];
extern const size_t unicode_class_range_count;

/* The category of code point cp (any value; past U+10FFFF: other). */
enum ucat unicode_category(uint32_t cp);

/* The class of code point cp: its category with the letters joined and
 * marks as other. */
enum uclass unicode_class(uint32_t cp);

/* Decodes the character at s[i] (i < n): returns its length in bytes (1 to
 * 4) and sets *cp to its code point, or to U+DC00 + s[i] with length 1 when
 * s[i] does not start a well-formed UTF-8 sequence inside s[0..n). */
size_t pretokenize_char(const unsigned char *s, size_t n, size_t i, uint32_t *cp);

/* A rule: the length in bytes of the piece that starts at text[pos]
 * (pos < n): at least 1, and pos + the length is at most n. */
typedef size_t (*pretokenize_fn)(const unsigned char *text, size_t n, size_t pos);

/* GPT-2's rule. */
size_t pretokenize_next(const unsigned char *text, size_t n, size_t pos);
/* Llama 3's and cl100k's. */
size_t pretokenize_next_llama3(const unsigned char *text, size_t n, size_t pos);
/* Qwen2's: Llama 3's with one number a piece. */
size_t pretokenize_next_qwen2(const unsigned char *text, size_t n, size_t pos);
/* o200k's. */
size_t pretokenize_next_o200k(const unsigned char *text, size_t n, size_t pos);

/* The rule whose pattern is written `pattern` (as tokenizer.json or
 * tiktoken spell it), or NULL when none is. */
pretokenize_fn pretokenize_find(const char *pattern);

#endif
