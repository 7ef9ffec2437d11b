/* tests/fuzz/fuzz_bpe.c — a BPE vocabulary folder: encoder.json (the
 * first piece) and vocab.bpe (the second), loaded as tokenizer gpt2 loads
 * them; a vocabulary that loads encodes a third piece (or a fixed text)
 * and must decode it back to the same bytes. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "../../data/bpe.h"

static void round_trip(const struct bpe *b, const uint8_t *text, size_t n)
{
    struct token_buffer ids = {0};
    unsigned char *back = NULL;
    size_t len = 0;
    fuzz_begin();
    if (fuzz_check(bpe_encode(b, text, n, &ids)) == ZT_OK &&
        fuzz_check(bpe_decode(b, ids.tokens, ids.n, &back, &len)) == ZT_OK &&
        (len != n || (n > 0 && memcmp(back, text, n) != 0)))
        abort(); /* byte-level BPE loses nothing */
    free(back);
    token_buffer_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char sample[] = "Hello world, it's   a test\n\tof 123 tokens\xc3\xa9!";
    struct fuzz_piece p[3];
    const size_t n = fuzz_split(data, size, p, 3);
    fuzz_write("encoder.json", p[0].data, p[0].size);
    fuzz_write("vocab.bpe", n > 1 ? p[1].data : NULL, n > 1 ? p[1].size : 0);
    struct bpe *b = NULL;
    fuzz_begin();
    if (fuzz_check(bpe_load(fuzz_dir(), &b)) != ZT_OK)
        return 0;
    if (n > 2)
        round_trip(b, p[2].data, p[2].size);
    else
        round_trip(b, (const uint8_t *)sample, sizeof sample - 1);
    bpe_free(b);
    return 0;
}
