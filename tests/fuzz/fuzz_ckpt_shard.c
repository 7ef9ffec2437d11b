/* tests/fuzz/fuzz_ckpt_shard.c — a checkpoint shard file (rank-R.bin):
 * the header and its table of sections checked against the format and the
 * file size at open, then each section found by name, its first element
 * read, and every checksum verified. */
#include "fuzz.h"
#include "../../formats/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ckpt_shard *s = NULL;
    fuzz_begin();
    if (fuzz_check(ckpt_shard_open(fuzz_write("rank-00000.bin", data, size), &s)) != ZT_OK)
        return 0;
    const struct ckpt_shard_header *h = ckpt_shard_header(s);
    for (int i = 0; i < h->n_sections; i++) {
        const struct ckpt_section *sec = &h->sections[i];
        unsigned char first[16];
        if (ckpt_shard_find(s, sec->name) == NULL)
            __builtin_trap();
        fuzz_begin();
        if (sec->count > 0)
            fuzz_check(ckpt_shard_read(s, sec, 0, 1, first));
    }
    fuzz_begin();
    fuzz_check(ckpt_shard_verify(s));
    ckpt_shard_close(s);
    return 0;
}
