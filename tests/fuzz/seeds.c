/* tests/fuzz/seeds.c — `fuzz_seeds DIR` writes the seed inputs of the
 * binary formats with zerotrain's own writers, one folder per target under
 * DIR: small files, so that the fuzzers start from what zerotrain really
 * writes. scripts/fuzz_corpus.sh runs it and copies the results into
 * tests/fuzz/corpus/; the text formats' seeds come from the repository's
 * own files. Multi-file inputs are joined with FUZZ_SEPARATOR. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "peft_table.h"
#include "../../data/data.h"
#include "../../formats/checkpoint.h"
#include "../../formats/peft_adapter.h"
#include "../../formats/safetensors_set.h"

static void check(zt_status s)
{
    if (s != ZT_OK) {
        fprintf(stderr, "fuzz_seeds: %s\n", zt_error_message());
        exit(1);
    }
}

static const char *in(const char *dir, const char *name)
{
    static char path[4][4096 + 256];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", dir, name);
    return p;
}

/* Makes ROOT/NAME (if missing) and writes its path into dir[4096]. */
static void folder(char *dir, const char *root, const char *name)
{
    snprintf(dir, 4096, "%s/%s", root, name);
    if (mkdir(dir, 0755) != 0 && access(dir, W_OK) != 0) {
        perror(dir);
        exit(1);
    }
}

static void append_file(FILE *out, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, out);
    fclose(f);
}

/* Writes the files `names` of `dir` joined with FUZZ_SEPARATOR into `out`. */
static void join(const char *out, const char *dir, const char *const *names, int n)
{
    FILE *f = fopen(out, "wb");
    if (!f) {
        perror(out);
        exit(1);
    }
    for (int i = 0; i < n; i++) {
        if (i)
            fputs(FUZZ_SEPARATOR, f);
        append_file(f, in(dir, names[i]));
    }
    if (fclose(f) != 0)
        exit(1);
}

static void safetensors_seed(const char *root)
{
    char dir[4096];
    folder(dir, root, "safetensors");
    struct safetensors_writer *w;
    const uint64_t s23[] = {2, 3}, s4[] = {4}, s22[] = {2, 2};
    float values[6 + 4 + 4 + 1];
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++)
        values[i] = 0.25f * (float)i - 1.0f;
    check(safetensors_writer_open(in(dir, "small.safetensors"), &w));
    check(safetensors_writer_add(w, "wte.weight", ZT_F32, 2, s23));
    check(safetensors_writer_add(w, "ln.bias", ZT_BF16, 1, s4));
    check(safetensors_writer_add(w, "h.0.attn", ZT_F16, 2, s22));
    check(safetensors_writer_add(w, "scale", ZT_F64, 0, NULL));
    check(safetensors_writer_set_metadata(w, "format", "pt"));
    check(safetensors_writer_begin_data(w));
    check(safetensors_writer_write_f32(w, values, sizeof values / sizeof values[0]));
    check(safetensors_writer_finish(w));
}

static void safetensors_set_seed(const char *root)
{
    char dir[4096];
    folder(dir, root, "safetensors_set");
    char work[4096];
    folder(work, dir, "work");
    struct safetensors_set_writer *w;
    const uint64_t s4[] = {4}, s22[] = {2, 2};
    float values[12];
    for (int i = 0; i < 12; i++)
        values[i] = (float)i;
    check(safetensors_set_writer_open(in(work, "model.safetensors"), 24, &w));
    check(safetensors_set_writer_add(w, "embed.weight", ZT_F32, 1, s4));
    check(safetensors_set_writer_add(w, "layers.0.weight", ZT_F32, 2, s22));
    check(safetensors_set_writer_add(w, "norm.weight", ZT_F32, 1, s4));
    check(safetensors_set_writer_set_metadata(w, "format", "pt"));
    check(safetensors_set_writer_begin_data(w));
    check(safetensors_set_writer_write_f32(w, values, 12));
    check(safetensors_set_writer_finish(w));
    const char *const names[] = {SAFETENSORS_SET_INDEX, "model-00001-of-00003.safetensors",
                                 "model-00002-of-00003.safetensors",
                                 "model-00003-of-00003.safetensors"};
    join(in(dir, "three_shards"), work, names, 4);
    for (int i = 0; i < 4; i++)
        remove(in(work, names[i]));
    remove(work);
}

static void ckpt_shard_seed(const char *root)
{
    char dir[4096];
    folder(dir, root, "ckpt_shard");
    struct ckpt_shard_writer *w;
    const float master[6] = {1, -2, 3, -4, 5, -6};
    const uint16_t half[6] = {0x3f80, 0xc000, 0x4040, 0xc080, 0x40a0, 0xc0c0};
    const uint8_t codes[4] = {1, 2, 254, 255};
    check(ckpt_shard_writer_open(in(dir, "rank-00001.bin"), 1, 2, &w));
    check(ckpt_shard_writer_add(w, "master", ZT_F32, 6));
    check(ckpt_shard_writer_add(w, "exp_avg", ZT_BF16, 6));
    check(ckpt_shard_writer_add(w, "exp_avg_sq.q", ZT_U8, 4));
    check(ckpt_shard_writer_begin(w));
    check(ckpt_shard_writer_write(w, master, 6));
    check(ckpt_shard_writer_write(w, half, 6));
    check(ckpt_shard_writer_write(w, codes, 4));
    check(ckpt_shard_writer_finish(w, NULL, NULL));
}

static void tokfile_seed(const char *root)
{
    char dir[4096];
    folder(dir, root, "tokfile");
    const int32_t bytes[] = {72, 101, 108, 108, 111, 10, 0, 255};
    const int32_t bpe[] = {15496, 995, 50256, 0, 1, 50000};
    check(tokfile_write(in(dir, "bytes.tok"), bytes, 8, 1, 256));
    check(tokfile_write(in(dir, "gpt2.tok"), bpe, 6, 2, 50257));
}

static void peft_seed(const char *root, enum zt_dtype dtype, const char *name)
{
    char dir[4096];
    folder(dir, root, "peft");
    char work[4096];
    folder(work, dir, "work");
    struct param_table t;
    fuzz_peft_table(&t);
    float *params = calloc(t.n_params, sizeof *params);
    if (!params)
        exit(1);
    for (size_t i = t.lora.n_base_params; i < t.n_params; i++)
        params[i] = 0.01f * (float)(i % 17) - 0.08f;
    check(peft_adapter_write(work, &t, params, dtype, fuzz_peft_spec(), "gpt2"));
    const char *const names[] = {PEFT_ADAPTER_CONFIG, PEFT_ADAPTER_WEIGHTS};
    join(in(dir, name), work, names, 2);
    for (int i = 0; i < 2; i++)
        remove(in(work, names[i]));
    remove(work);
    free(params);
    param_table_free(&t);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds DIR\n");
        return 2;
    }
    safetensors_seed(argv[1]);
    safetensors_set_seed(argv[1]);
    ckpt_shard_seed(argv[1]);
    tokfile_seed(argv[1]);
    peft_seed(argv[1], ZT_F32, "f32");
    peft_seed(argv[1], ZT_BF16, "bf16");
    return 0;
}
