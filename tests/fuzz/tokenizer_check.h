/* tests/fuzz/tokenizer_check.h — what the tokenizer targets (fuzz_hf_tokenizer,
 * fuzz_tiktoken) ask of a vocabulary that loads: a text encodes, every id
 * it gives names a token, and a byte-level vocabulary decodes the ids
 * back to the same bytes. */
#ifndef ZT_TESTS_FUZZ_TOKENIZER_CHECK_H
#define ZT_TESTS_FUZZ_TOKENIZER_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "../../data/bpe_tokenizer.h"

/* Encodes text[0..n) with t and decodes the ids; aborts when an encoded id
 * is outside the vocabulary or names no token, or when a byte-level
 * vocabulary whose ids each decode to one text does not give the text back.
 * A refusal must have a message (fuzz_check). */
void fuzz_tokenizer_round_trip(const struct bpe_tokenizer *t, const uint8_t *text, size_t n);

#endif
