/* tests/fuzz/fuzz_text.c — a text file of data.train, read with the byte
 * tokenizer: named directly (first byte even), where the token-file magic
 * is looked for, or found in its folder with data.skip_binary (odd), where
 * the binary sniff may leave it out; the rest is the file. */
#include "fuzz.h"
#include "../../data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const int in_folder = data[0] % 2;
    const char *path = fuzz_write("train.txt", data + 1, size - 1);
    const char *in = in_folder ? fuzz_dir() : path;
    const struct dataset_options opt = {in_folder, "data.skip_binary", 0, NULL};
    struct token_buffer b = {0};
    struct dataset_report report = {0};
    fuzz_begin();
    fuzz_check(dataset_load_with(&in, 1, &opt, &b, &report));
    token_buffer_free(&b);
    dataset_report_free(&report);
    return 0;
}
