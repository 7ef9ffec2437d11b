/* tests/fuzz/fuzz_hf_tokenizer.c — a Hugging Face tokenizer folder:
 * tokenizer.json (the first piece) and tokenizer_config.json (the second;
 * empty or missing: no such file), loaded as tokenizer hf loads them; a
 * vocabulary that loads encodes a third piece (or a fixed text) and
 * decodes it back (tokenizer_check.h), and its chat_template, if any, is
 * told apart as data.chat_template's default would be. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "tokenizer_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char sample[] = "<|begin_of_text|>Hello world, it's  a test\n\tof 123 "
                                 "<s>tokens\xc3\xa9 \xe2\x96\x81x</s>!";
    struct fuzz_piece p[3];
    const size_t n = fuzz_split(data, size, p, 3);
    fuzz_write("tokenizer.json", p[0].data, p[0].size);
    char config[4096 + 64];
    snprintf(config, sizeof config, "%s/tokenizer_config.json", fuzz_dir());
    if (n > 1 && p[1].size > 0)
        fuzz_write("tokenizer_config.json", p[1].data, p[1].size);
    else
        unlink(config);
    struct bpe_tokenizer *t = NULL;
    fuzz_begin();
    if (fuzz_check(hf_tokenizer_load(fuzz_dir(), &t)) != ZT_OK)
        return 0;
    if (n > 2)
        fuzz_tokenizer_round_trip(t, p[2].data, p[2].size);
    else
        fuzz_tokenizer_round_trip(t, (const uint8_t *)sample, sizeof sample - 1);
    if (t->chat_template)
        (void)chat_template_detect(t->chat_template);
    bpe_tokenizer_free(t);
    return 0;
}
