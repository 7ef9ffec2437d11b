/* tests/fuzz/fuzz_ckpt_meta.c — a checkpoint's meta.json: every key with
 * its type and range, the per-unit arrays, the layout, the LoRA, 4-bit
 * and base records. A file that reads is written back and must read
 * again: a resumed run rewrites what it read. */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"
#include "../../formats/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ckpt_meta m;
    fuzz_begin();
    if (fuzz_check(ckpt_meta_read(fuzz_write("meta.json", data, size), &m)) == ZT_OK) {
        char again_path[4200];
        snprintf(again_path, sizeof again_path, "%s/again.json", fuzz_dir());
        struct ckpt_meta again;
        if (ckpt_meta_write(again_path, &m) != ZT_OK ||
            ckpt_meta_read(again_path, &again) != ZT_OK) {
            fprintf(stderr,
                    "fuzz_ckpt_meta: a meta.json that read does not write and read "
                    "back: %s\n",
                    zt_error_message());
            abort();
        }
        ckpt_meta_free(&again);
    }
    ckpt_meta_free(&m);
    return 0;
}
