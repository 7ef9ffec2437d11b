/* tests/fuzz/fuzz_safetensors_set.c — a sharded model's folder: the
 * index (model.safetensors.index.json, the first piece) and up to three
 * shards (model-0000I-of-00003.safetensors, the further pieces), opened as
 * from_pretrained's folder and checked against each other, then the first
 * element of every tensor read from its shard, and the digest of the set. */
#include <stdio.h>

#include "fuzz.h"
#include "../../formats/safetensors_set.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_piece pieces[4];
    const size_t n = fuzz_split(data, size, pieces, 4);
    fuzz_write(SAFETENSORS_SET_INDEX, pieces[0].data, pieces[0].size);
    for (size_t i = 1; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05zu-of-00003.safetensors", i);
        fuzz_write(name, i < n ? pieces[i].data : NULL, i < n ? pieces[i].size : 0);
    }
    struct safetensors_set *s = NULL;
    fuzz_begin();
    if (fuzz_check(safetensors_set_open(fuzz_dir(), &s)) != ZT_OK)
        return 0;
    for (int i = 0; i < safetensors_set_count(s); i++) {
        const struct safetensors_tensor *t = safetensors_set_tensor_at(s, i);
        float first;
        if (safetensors_set_find(s, t->name) != t)
            __builtin_trap();
        fuzz_begin();
        if (safetensors_tensor_numel(t) > 0)
            fuzz_check(safetensors_set_read_f32(s, t, 0, 1, &first));
    }
    uint64_t checksum, bytes;
    fuzz_begin();
    fuzz_check(safetensors_set_digest(s, &checksum, &bytes));
    safetensors_set_close(s);
    return 0;
}
