/* tests/fuzz/fuzz_hf_config.c — a Hugging Face config.json as
 * model.hf_config reads it: the architecture or model_type, the keys of
 * each family, and the settings zerotrain refuses to build. */
#include "fuzz.h"
#include "../../config/config_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct config_hf hf;
    fuzz_begin();
    fuzz_check(config_hf_read(fuzz_write("config.json", data, size), &hf));
    return 0;
}
