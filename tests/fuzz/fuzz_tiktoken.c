/* tests/fuzz/fuzz_tiktoken.c — a tiktoken rank file, read as tokenizer
 * cl100k (first byte even) or o200k (odd) reads it: the rest is the file
 * and, after a separator, a text that a file that loads encodes and decodes
 * back (tokenizer_check.h; else a fixed text). */
#include "fuzz.h"
#include "tokenizer_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char sample[] = "Hello world, it's   a test\n\tof 123 tokens\xc3\xa9"
                                 "<|endoftext|>!";
    if (size < 1)
        return 0;
    const struct tiktoken_encoding *enc = tiktoken_encoding(data[0] % 2 ? "o200k" : "cl100k");
    struct fuzz_piece p[2];
    const size_t n = fuzz_split(data + 1, size - 1, p, 2);
    fuzz_write(enc->file, p[0].data, p[0].size);
    struct bpe_tokenizer *t = NULL;
    fuzz_begin();
    if (fuzz_check(tiktoken_load(fuzz_dir(), enc, &t)) != ZT_OK)
        return 0;
    if (n > 1)
        fuzz_tokenizer_round_trip(t, p[1].data, p[1].size);
    else
        fuzz_tokenizer_round_trip(t, (const uint8_t *)sample, sizeof sample - 1);
    bpe_tokenizer_free(t);
    return 0;
}
