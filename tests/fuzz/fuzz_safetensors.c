/* tests/fuzz/fuzz_safetensors.c — one safetensors file: the header's JSON
 * and its checks against the file size at open, then the first and last
 * elements of every tensor, which must read whenever the file opened. */
#include "fuzz.h"
#include "../../formats/safetensors.h"

/* Reads up to 16 elements at each end of t; a float tensor of a file that
 * opened must read, an integer one is refused with a message. */
static void read_ends(struct safetensors *s, const struct safetensors_tensor *t)
{
    float buf[16];
    const uint64_t n = safetensors_tensor_numel(t), k = n < 16 ? n : 16;
    if (k == 0)
        return;
    fuzz_begin();
    zt_status st = fuzz_check(safetensors_read_f32(s, t, 0, k, buf));
    if (st == ZT_OK)
        fuzz_check(safetensors_read_f32(s, t, n - k, k, buf));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("model.safetensors", data, size);
    struct safetensors *s = NULL;
    fuzz_begin();
    if (fuzz_check(safetensors_open(path, &s)) != ZT_OK)
        return 0;
    for (int i = 0; i < safetensors_count(s); i++) {
        const struct safetensors_tensor *t = safetensors_tensor_at(s, i);
        if (safetensors_find(s, t->name) != t) /* names are unique: the first is this one */
            __builtin_trap();
        read_ends(s, t);
    }
    safetensors_metadata(s, "format");
    safetensors_close(s);
    return 0;
}
