/* tests/fuzz/fuzz_tokenize.c — `zerotrain tokenize --file FILE` with the
 * byte tokenizer: with the first byte odd, --decode, which reads the rest
 * as a JSON array of ids; else the rest is a text to encode. A non-zero
 * exit must come with a message. */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"
#include "../../data/tokenize_cmd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *sink;
    if (size < 1)
        return 0;
    if (!sink && !(sink = fopen("/dev/null", "w")))
        abort();
    char file[4096 + 64];
    snprintf(file, sizeof file, "%s", fuzz_write("ids.json", data + 1, size - 1));
    char *argv[] = {"--tokenizer", "bytes", "--file", file, "--decode"};
    fuzz_begin();
    const int rc = tokenize_command(data[0] % 2 ? 5 : 4, argv, stdin, sink, sink);
    if (rc != 0 && zt_error_message()[0] == '\0')
        abort();
    return 0;
}
