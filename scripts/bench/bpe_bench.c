/* scripts/bench/bpe_bench.c — how fast GPT-2's BPE encodes.
 *
 *   bpe_bench VOCAB_DIR FILE [--mb N] [--repeats R]
 *
 * Builds one document of N MiB (default 1) by repeating FILE, encodes it R
 * times (default 5) with the "gpt2" tokenizer of data.h, and prints one
 * line: the document's size, its token count, the median and best time of
 * one encode, and MB/s (10^6 bytes per second) from the median. Loading
 * the vocabulary is timed on its own line. The encoder keeps no cache, so
 * every repeat does the whole work.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/clock.h"
#include "../../data/data.h"

static int compare_doubles(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* FILE repeated to `n` bytes, in a new buffer; NULL when it cannot be read. */
static unsigned char *repeat_file(const char *path, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char *seed = malloc(n), *doc = malloc(n);
    size_t got = seed ? fread(seed, 1, n, f) : 0;
    fclose(f);
    for (size_t i = 0; doc && got > 0 && i < n; i++)
        doc[i] = seed[i % got];
    free(seed);
    if (got == 0) {
        free(doc);
        return NULL;
    }
    return doc;
}

int main(int argc, char **argv)
{
    double mb = 1.0;
    int repeats = 5;
    if (argc < 3) {
        fprintf(stderr, "usage: bpe_bench VOCAB_DIR FILE [--mb N] [--repeats R]\n");
        return 2;
    }
    for (int i = 3; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--mb") == 0)
            mb = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--repeats") == 0)
            repeats = atoi(argv[i + 1]);
    }
    if (mb <= 0 || repeats < 1 || repeats > 1000) {
        fprintf(stderr, "bpe_bench: --mb must be > 0 and --repeats 1 .. 1000\n");
        return 2;
    }
    const size_t n = (size_t)(mb * (1 << 20));
    unsigned char *doc = repeat_file(argv[2], n);
    if (!doc) {
        fprintf(stderr, "bpe_bench: cannot read %s\n", argv[2]);
        return 1;
    }
    struct tokenizer *t;
    double t0 = zt_now_seconds();
    if (tokenizer_open("gpt2", argv[1], &t) != ZT_OK) {
        fprintf(stderr, "bpe_bench: %s\n", zt_error_message());
        free(doc);
        return 1;
    }
    printf("load   %.3f s (encoder.json and vocab.bpe)\n", zt_now_seconds() - t0);
    double *secs = malloc((size_t)repeats * sizeof *secs);
    size_t tokens = 0;
    for (int r = 0; secs && r < repeats; r++) {
        struct token_buffer b = {0};
        t0 = zt_now_seconds();
        zt_status st = tokenizer_encode(t, doc, n, &b);
        secs[r] = zt_now_seconds() - t0;
        tokens = b.n;
        token_buffer_free(&b);
        if (st != ZT_OK) {
            fprintf(stderr, "bpe_bench: %s\n", zt_error_message());
            return 1;
        }
    }
    qsort(secs, (size_t)repeats, sizeof *secs, compare_doubles);
    const double median = secs[repeats / 2];
    printf("encode %zu bytes -> %zu tokens: median %.3f s, best %.3f s of %d, %.1f MB/s\n", n,
           tokens, median, secs[0], repeats, (double)n / median / 1e6);
    free(secs);
    free(doc);
    tokenizer_close(t);
    return 0;
}
