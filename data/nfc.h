/* data/nfc.h — Unicode normalization form C (canonical decomposition, then
 * canonical composition), as Hugging Face's "NFC" normalizer applies it to
 * text before a tokenizer (Qwen2's) cuts it.
 *
 * The algorithm is UAX #15's: every code point is replaced by its full
 * canonical decomposition (Hangul syllables by arithmetic), runs of
 * non-starters are sorted stably by canonical combining class, then each
 * starter takes in turn every later character it composes with that no
 * character between them blocks. The tables are unicode_nfc.c, generated
 * from the Unicode data by scripts/gen_unicode_nfc.py.
 *
 * Bytes that are not valid UTF-8 pass through unchanged and compose with
 * nothing.
 */
#ifndef ZT_DATA_NFC_H
#define ZT_DATA_NFC_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"

/* The Unicode version the tables are from (unicode_nfc.c). */
extern const char nfc_unicode_version[];

/* text[0..n) in NFC: *out is a new buffer of *out_n bytes (caller frees),
 * or NULL when the text is its own NFC form as far as a quick check sees
 * (every code point below U+0300). Errors: ZT_ERR_NOMEM. */
zt_status nfc_normalize(const unsigned char *text, size_t n, unsigned char **out, size_t *out_n);

/* The tables (unicode_nfc.c), each sorted by its first field. */
struct nfc_class_range {
    uint32_t first, last;
    uint8_t ccc; /* canonical combining class, 1..254 */
};
struct nfc_decomposition {
    uint32_t cp;
    uint16_t at, len; /* nfc_decomposition_chars[at .. at + len) */
};
struct nfc_composite {
    uint32_t first, second, composite;
};
extern const struct nfc_class_range nfc_class_ranges[];
extern const size_t nfc_class_range_count;
extern const struct nfc_decomposition nfc_decompositions[];
extern const size_t nfc_decomposition_count;
extern const uint32_t nfc_decomposition_chars[];
extern const struct nfc_composite nfc_composites[];
extern const size_t nfc_composite_count;

#endif
