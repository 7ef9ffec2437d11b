/* tests/fuzz/fuzz_tokfile.c — a token file (`zerotrain prepare`'s .tok):
 * the header checked against the size without reading the tokens
 * (tokfile_check), then the whole file read and verified. */
#include "fuzz.h"
#include "../../data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("train.tok", data, size);
    fuzz_begin();
    fuzz_check(tokfile_check(path));
    struct token_buffer b = {0};
    fuzz_begin();
    fuzz_check(tokfile_read(path, &b));
    token_buffer_free(&b);
    return 0;
}
