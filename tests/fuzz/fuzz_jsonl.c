/* tests/fuzz/fuzz_jsonl.c — JSONL instruction data (prompt/completion and
 * text lines), encoded with the byte tokenizer, once packed and once a
 * window per example; the first byte picks the window length. */
#include "fuzz.h"
#include "../../data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *path = fuzz_write("train.jsonl", data + 1, size - 1);
    const char *paths[] = {path};
    for (int packing = 0; packing <= 1; packing++) {
        const struct jsonl_options opt = {NULL, packing, 1 + data[0] % 64, NULL};
        struct token_buffer b = {0};
        struct jsonl_report report;
        fuzz_begin();
        fuzz_check(jsonl_load(paths, 1, &opt, &b, &report));
        token_buffer_free(&b);
    }
    return 0;
}
