/* plan/calibrate_load.c — the loader's work timed on one core
 * (calibrate_load.h). */
#include "calibrate_load.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/clock.h"
#include "../formats/hf_weights.h"
#include "../formats/safetensors.h"
#include "../worker/quant4.h"
#include "calibrate_gemm.h"
#include "calibrate_rates.h"

enum { MAX_REPS = 16, ROWS = 2048, COLS = 4096, PIECE = 1 << 18 };
#define N ((size_t)ROWS * COLS)

/* The loader's buffers: the values, their fp32 copy, the reader's tile
 * and an encoding. */
struct load_buffers {
    float *x, *y, *tile;
    void *region;
};

static zt_status write_tensor(const char *path, const float *x)
{
    struct safetensors_writer *w;
    const uint64_t shape[2] = {ROWS, COLS};
    ZT_TRY(safetensors_writer_open(path, &w));
    zt_status st = safetensors_writer_add(w, "weight", ZT_BF16, 2, shape);
    if (st == ZT_OK)
        st = safetensors_writer_begin_data(w);
    if (st == ZT_OK)
        st = safetensors_writer_write_f32(w, x, N);
    if (st != ZT_OK) {
        safetensors_writer_abort(w);
        return st;
    }
    return safetensors_writer_finish(w);
}

/* One pass over the file, a piece at a time, into y. */
static zt_status read_pass(struct safetensors *s, const struct load_buffers *b)
{
    const struct safetensors_tensor *t = safetensors_find(s, "weight");
    for (size_t at = 0; at < N; at += PIECE)
        ZT_TRY(safetensors_read_f32(s, t, at, N - at < PIECE ? N - at : PIECE, b->y + at));
    return ZT_OK;
}

/* The file as the [COLS, ROWS] side of a tensor it stores transposed,
 * read into y in our layout as the reader does: its tiles of
 * HF_WEIGHTS_TILE_ROWS rows, each scattered into place. */
static zt_status read_transposed_pass(struct safetensors *s, const struct load_buffers *b)
{
    const struct safetensors_tensor *t = safetensors_find(s, "weight");
    for (size_t c0 = 0; c0 < COLS; c0 += HF_WEIGHTS_TILE_ROWS) {
        const size_t nc = COLS - c0 < HF_WEIGHTS_TILE_ROWS ? COLS - c0 : HF_WEIGHTS_TILE_ROWS;
        ZT_TRY(safetensors_read_f32(s, t, c0 * ROWS, nc * ROWS, b->tile));
        hf_weights_scatter_tile(b->tile, nc, ROWS, COLS, c0, b->y);
    }
    return ZT_OK;
}

typedef zt_status (*file_pass)(struct safetensors *s, const struct load_buffers *b);

static zt_status time_reads(const char *dir, int reps, const struct load_buffers *b,
                            struct machine *m)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/zt-calibrate-load.%ld.safetensors", dir, (long)getpid());
    ZT_TRY(write_tensor(path, b->x));
    struct safetensors *s = NULL;
    zt_status st = safetensors_open(path, &s);
    const file_pass passes[] = {read_pass, read_transposed_pass};
    double *const rates[] = {&m->weights_read, &m->weights_read_transposed};
    for (int p = 0; p < 2 && st == ZT_OK; p++) {
        double v[MAX_REPS];
        for (int r = 0; r < reps + 1 && st == ZT_OK; r++) {
            const double t0 = zt_now_seconds();
            st = passes[p](s, b);
            if (r > 0)
                v[r - 1] = zt_now_seconds() - t0;
        }
        if (st == ZT_OK)
            *rates[p] = (double)N / calibrate_median(v, reps);
    }
    safetensors_close(s);
    unlink(path);
    return st;
}

static double time_encoding(int reps, const struct load_buffers *b)
{
    double v[MAX_REPS];
    for (int r = 0; r < reps + 1; r++) {
        const double t0 = zt_now_seconds();
        quant4_quantize_region(QUANT4_NF4, 1, b->x, N, b->region);
        if (r > 0)
            v[r - 1] = zt_now_seconds() - t0;
    }
    return (double)N / calibrate_median(v, reps);
}

void calibrate_load_put(FILE *f, const struct machine *m, int reps)
{
    fprintf(f,
            "loader: one core (a rank's thread), median of %d after 1 warm-up, a %d x %d "
            "tensor\n"
            "  weights_read: bf16 safetensors from the page cache into fp32, 2^18 a piece\n"
            "  weights_read_transposed: the same stored transposed, read as the reader does,\n"
            "    tiles of %d rows put back in our layout\n"
            "  quantize_4bit: NF4 with double quantisation\n",
            reps, ROWS, COLS, HF_WEIGHTS_TILE_ROWS);
    fprintf(f, "    %-24s %8.1f M elements/s\n", "weights_read", m->weights_read / 1e6);
    fprintf(f, "    %-24s %8.1f M elements/s\n", "weights_read_transposed",
            m->weights_read_transposed / 1e6);
    fprintf(f, "    %-24s %8.1f M elements/s\n", "quantize_4bit", m->quantize_4bit / 1e6);
}

zt_status calibrate_load(const char *dir, int reps, struct machine *m, FILE *report)
{
    ZT_ASSERT(reps >= 1 && reps <= MAX_REPS);
    struct load_buffers b = {malloc(N * sizeof(float)), malloc(N * sizeof(float)),
                             malloc((size_t)HF_WEIGHTS_TILE_ROWS * ROWS * sizeof(float)),
                             aligned_alloc(64, (quant4_bytes(N, 1) + 63) / 64 * 64)};
    zt_status st = b.x && b.y && b.tile && b.region
                       ? ZT_OK
                       : zt_error_set(ZT_ERR_NOMEM, "calibrate: no memory to time the loader");
    if (st == ZT_OK) {
        calibrate_fill(b.x, N, 7);
        st = time_reads(dir, reps, &b, m);
    }
    if (st == ZT_OK)
        m->quantize_4bit = time_encoding(reps, &b);
    free(b.x);
    free(b.y);
    free(b.tile);
    free(b.region);
    if (st == ZT_OK && report) {
        calibrate_load_put(report, m, reps);
        fputc('\n', report);
        fflush(report);
    }
    return st;
}
