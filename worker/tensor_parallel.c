/* worker/tensor_parallel.c — see tensor_parallel.h. */
#include "tensor_parallel.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

zt_status param_table_copy(const struct param_table *src, struct param_table *out)
{
    ZT_ASSERT(!src->whole && !src->fp8); /* fp8's state is owned once */
    const size_t n_adapted = src->lora.r > 0 ? (size_t)src->lora.n_base_units : 0;
    *out = *src;
    out->tensors = malloc((size_t)src->n_tensors * sizeof *out->tensors + 1);
    out->unit_offset = malloc(((size_t)src->n_units + 1) * sizeof *out->unit_offset);
    out->lora.unit_adapter = n_adapted ? malloc(n_adapted * sizeof(int)) : NULL;
    if (!out->tensors || !out->unit_offset || (n_adapted && !out->lora.unit_adapter)) {
        free(out->tensors);
        free(out->unit_offset);
        free(out->lora.unit_adapter);
        memset(out, 0, sizeof *out);
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the parameter table");
    }
    memcpy(out->tensors, src->tensors, (size_t)src->n_tensors * sizeof *out->tensors);
    memcpy(out->unit_offset, src->unit_offset,
           ((size_t)src->n_units + 1) * sizeof *out->unit_offset);
    if (n_adapted)
        memcpy(out->lora.unit_adapter, src->lora.unit_adapter, n_adapted * sizeof(int));
    return ZT_OK;
}

/* Whether `size` ranks can cut tensor pt: each part's rows (or its
 * columns) into equal slices of whole blocks (heads); names it if not. */
static zt_status check_divides(const struct param_tensor *pt, int size)
{
    const int parts = pt->tp_parts > 0 ? pt->tp_parts : 1,
              block = pt->tp_block > 0 ? pt->tp_block : 1;
    const int cut = pt->tp_split == TP_ROWS ? pt->rows / parts : pt->cols;
    if (pt->tp_split == TP_REPLICATED || cut % (size * block) == 0)
        return ZT_OK;
    return zt_error_set(ZT_ERR_CONFIG,
                        "tensor_parallel.size %d does not divide %s: its %d %s%s are cut over "
                        "the tensor-parallel ranks in slices of whole %s (the model's heads, "
                        "key-value heads, hidden sizes and vocabulary must be multiples of it)",
                        size, pt->name, cut, pt->tp_split == TP_ROWS ? "rows" : "columns",
                        parts > 1 ? " per part" : "", block > 1 ? "heads" : "rows or columns");
}

int64_t tp_vocab_padded(int vocab, int multiple, int tp)
{
    ZT_ASSERT(vocab >= 1 && multiple >= 1 && tp >= 1);
    if (multiple == 1)
        return vocab;
    const int64_t m = (int64_t)multiple * tp;
    return (vocab + m - 1) / m * m;
}

/* Whether vocab_padded can pad t's vocabulary over `size` ranks. */
static zt_status check_padding(const struct param_table *t, int size, int64_t vocab_padded)
{
    const int vocab = t->tensors[0].rows;
    if (vocab_padded >= vocab && vocab_padded % size == 0 && vocab_padded <= INT32_MAX)
        return ZT_OK;
    return zt_error_set(ZT_ERR_CONFIG,
                        "model.pad_vocab_size_to_multiple_of: the vocabulary %d padded to %lld is "
                        "not a multiple of tensor_parallel.size %d of at least %d rows and at "
                        "most 2^31 - 1",
                        vocab, (long long)vocab_padded, size, vocab);
}

zt_status param_table_tp_slice(const struct param_table *whole, int size, int rank,
                               int64_t vocab_padded, struct param_table *out)
{
    ZT_ASSERT(size >= 1 && rank >= 0 && rank < size);
    memset(out, 0, sizeof *out);
    const int padded = vocab_padded > 0 && vocab_padded != whole->tensors[0].rows;
    if (padded)
        ZT_TRY(check_padding(whole, size, vocab_padded));
    for (int k = 0; k < whole->n_tensors; k++)
        if (!(padded && whole->tensors[k].tp_vocab))
            ZT_TRY(check_divides(&whole->tensors[k], size));
    struct param_table *copy = malloc(sizeof *copy);
    if (!copy)
        return zt_error_set(ZT_ERR_NOMEM, "cannot allocate the parameter table");
    zt_status st = param_table_copy(whole, copy);
    if (st == ZT_OK)
        st = param_table_copy(whole, out);
    if (st != ZT_OK) {
        param_table_free(copy);
        free(copy);
        return st;
    }
    out->whole = copy;
    out->tp_size = size;
    out->tp_rank = rank;
    size_t off = 0;
    for (int u = 0, k = 0; u < out->n_units; u++) {
        out->unit_offset[u] = off;
        for (; k < out->n_tensors && out->tensors[k].unit == u; k++) {
            struct param_tensor *pt = &out->tensors[k];
            if (padded && pt->tp_vocab)
                pt->rows = (int)vocab_padded;
            pt->rows /= pt->tp_split == TP_ROWS ? size : 1;
            pt->cols /= pt->tp_split == TP_COLS ? size : 1;
            pt->numel = (size_t)pt->rows * (size_t)pt->cols;
            pt->offset = off;
            off += pt->numel;
        }
    }
    out->unit_offset[out->n_units] = off;
    out->n_params = off;
    if (out->lora.r > 0) /* the base units come first (lora.h) */
        out->lora.n_base_params = out->unit_offset[out->lora.n_base_units];
    return ZT_OK;
}

/* No place in the whole model: a padding row's. */
#define PADDING SIZE_MAX

/* The run of the slice's tensor k starting at its element e, at most
 * `max` long: where it starts in the whole model (PADDING for padding
 * rows) and how long it is. */
static size_t run_of(const struct param_table *t, int k, size_t e, size_t max, size_t *whole_at)
{
    const struct param_tensor *pt = &t->tensors[k], *wt = &t->whole->tensors[k];
    const size_t cols = (size_t)pt->cols, i = e / cols, j = e % cols;
    size_t n = max;
    if (pt->tp_vocab && pt->tp_split == TP_ROWS) { /* one part, maybe padded */
        const size_t rows = (size_t)pt->rows, first = (size_t)t->tp_rank * rows;
        const size_t real = (size_t)wt->rows > first ? (size_t)wt->rows - first : 0;
        const size_t real_end = (real < rows ? real : rows) * cols;
        const size_t left = e < real_end ? real_end - e : pt->numel - e;
        *whole_at = e < real_end ? wt->offset + first * cols + e : PADDING;
        n = n < left ? n : left;
    } else if (pt->tp_split == TP_ROWS) {
        const size_t parts = pt->tp_parts > 0 ? (size_t)pt->tp_parts : 1;
        const size_t part_rows = (size_t)pt->rows / parts, q = i / part_rows, r = i % part_rows;
        const size_t row = q * ((size_t)wt->rows / parts) + (size_t)t->tp_rank * part_rows + r;
        *whole_at = wt->offset + row * cols + j;
        const size_t left = (q + 1) * part_rows * cols - e;
        n = n < left ? n : left;
    } else if (pt->tp_split == TP_COLS) {
        *whole_at = wt->offset + i * (size_t)wt->cols + (size_t)t->tp_rank * cols + j;
        n = n < cols - j ? n : cols - j;
    } else {
        *whole_at = wt->offset + e;
    }
    return n;
}

void param_table_tp_runs(const struct param_table *t, size_t begin, size_t end, tp_run_fn fn,
                         void *arg)
{
    if (!t->whole) {
        if (end > begin)
            fn(arg, begin, end - begin, 0);
        return;
    }
    size_t pos = begin;
    while (pos < end) {
        int k;
        size_t lo, hi, whole_at;
        param_table_piece(t, pos, end, &k, &lo, &hi);
        const size_t n = run_of(t, k, lo, hi - lo, &whole_at);
        if (whole_at != PADDING)
            fn(arg, whole_at, n, pos - begin);
        pos += n;
    }
}

void param_table_tp_tensor_runs(const struct param_table *t, int k, size_t *first, size_t *run,
                                size_t *stride)
{
    const struct param_tensor *pt = &t->tensors[k];
    *first = *run = *stride = 0;
    if (!t->whole || pt->tp_split == TP_REPLICATED)
        return;
    const struct param_tensor *wt = &t->whole->tensors[k];
    const size_t cols = (size_t)pt->cols, rank = (size_t)t->tp_rank;
    if (pt->tp_split == TP_COLS) {
        *first = rank * cols;
        *run = cols;
        *stride = (size_t)wt->cols;
        return;
    }
    const size_t parts = pt->tp_parts > 0 ? (size_t)pt->tp_parts : 1;
    const size_t part_rows = (size_t)pt->rows / parts;
    *first = rank * part_rows * cols;
    *run = part_rows * cols;
    *stride = (size_t)wt->rows / parts * cols;
}

struct whole_init {
    const struct param_table *whole;
    uint64_t seed;
    float *dst;
};

static void init_run(void *arg, size_t whole_begin, size_t n, size_t at)
{
    const struct whole_init *w = arg;
    param_table_init(w->whole, w->seed, whole_begin, whole_begin + n, w->dst + at);
}

void param_table_tp_init(const struct param_table *t, uint64_t seed, size_t begin, size_t end,
                         float *dst)
{
    if (!t->whole) {
        param_table_init(t, seed, begin, end, dst);
        return;
    }
    struct whole_init w = {t->whole, seed, dst};
    memset(dst, 0, (end - begin) * sizeof *dst); /* the padding rows' */
    param_table_tp_runs(t, begin, end, init_run, &w);
}

struct slice_copy {
    const float *whole;
    float *dst;
};

static void copy_run(void *arg, size_t whole_begin, size_t n, size_t at)
{
    const struct slice_copy *c = arg;
    memcpy(c->dst + at, c->whole + whole_begin, n * sizeof *c->dst);
}

void param_table_tp_take(const struct param_table *t, const float *whole, float *dst)
{
    struct slice_copy c = {whole, dst};
    memset(dst, 0, t->n_params * sizeof *dst); /* the padding rows' */
    param_table_tp_runs(t, 0, t->n_params, copy_run, &c);
}
