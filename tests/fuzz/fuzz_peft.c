/* tests/fuzz/fuzz_peft.c — a PEFT adapter folder: adapter_config.json
 * (the first piece) and adapter_model.safetensors (the second), checked
 * against a small model's adapters as lora.init_from checks them, and,
 * when they match, every adapter element read. */
#include <stdlib.h>

#include "fuzz.h"
#include "peft_table.h"
#include "../../formats/peft_adapter.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct param_table table; /* built once: the model does not change */
    static int built;
    if (!built) {
        fuzz_peft_table(&table);
        built = 1;
    }
    struct fuzz_piece p[2];
    const size_t n = fuzz_split(data, size, p, 2);
    fuzz_write(PEFT_ADAPTER_CONFIG, p[0].data, p[0].size);
    fuzz_write(PEFT_ADAPTER_WEIGHTS, n > 1 ? p[1].data : NULL, n > 1 ? p[1].size : 0);
    struct peft_adapter_reader *r = NULL;
    fuzz_begin();
    if (fuzz_check(peft_adapter_open(fuzz_dir(), &table, fuzz_peft_spec(), &r)) != ZT_OK)
        return 0;
    const size_t begin = table.lora.n_base_params, count = table.n_params - begin;
    float *dst = malloc(count * sizeof *dst);
    if (!dst)
        abort();
    fuzz_begin();
    fuzz_check(peft_adapter_read(r, begin, table.n_params, dst));
    free(dst);
    peft_adapter_close(r);
    return 0;
}
