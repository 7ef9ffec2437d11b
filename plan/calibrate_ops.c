/* plan/calibrate_ops.c — the fused attention and the element-wise ops
 * timed on one core (calibrate_ops.h). */
#include "calibrate_ops.h"

#include <stdint.h>
#include <stdlib.h>

#include "../common/clock.h"
#include "../worker/ops.h"
#include "calibrate_gemm.h"
#include "calibrate_rates.h"

enum {
    MAX_REPS = 16,
    SEQ = 512,    /* the attention's tokens and the element-wise rows */
    WIDTH = 1024, /* the attention's heads x head size */
    ROWS = 512,   /* the element-wise block's activations, ROWS x COLS */
    COLS = 2048,
};

static const int head_sizes[] = {64, 128};
#define N_HEAD_SIZES (int)(sizeof head_sizes / sizeof head_sizes[0])

static const enum zt_dtype types[3] = {ZT_F32, ZT_BF16, ZT_F16}; /* by machine_precision */
static const char *const type_names[3] = {"fp32", "bf16", "fp16"};

/* n elements of type t, small and finite (the same for a seed). */
static zt_status filled(const struct ops_backend *ops, enum zt_dtype t, size_t n, int seed,
                        void **out)
{
    float *f = malloc(n * sizeof *f);
    *out = malloc(n * zt_dtype_size(t));
    zt_status st =
        f && *out ? ZT_OK : zt_error_set(ZT_ERR_NOMEM, "calibrate: no memory to time the ops");
    if (st == ZT_OK) {
        calibrate_fill(f, n, seed);
        st = ops->from_f32(ops, t, f, *out, n);
    }
    free(f);
    return st;
}

/* The buffers of one attention shape. */
struct attn_buffers {
    void *qkv, *out, *dout, *dqkv;
    float *lse;
};

static void free_attn(struct attn_buffers *b)
{
    free(b->qkv);
    free(b->out);
    free(b->dout);
    free(b->dqkv);
    free(b->lse);
}

/* Seconds of one forward and backward at head size hs, median of reps. */
static zt_status time_attention(const struct ops_backend *ops, enum zt_dtype t, int hs, int reps,
                                double *seconds)
{
    const int NH = WIDTH / hs;
    struct attn_buffers b = {0};
    zt_status st = filled(ops, t, (size_t)SEQ * 3 * WIDTH, 1, &b.qkv);
    if (st == ZT_OK)
        st = filled(ops, t, (size_t)SEQ * WIDTH, 2, &b.dout);
    if (st == ZT_OK)
        st = filled(ops, t, (size_t)SEQ * 3 * WIDTH, 3, &b.dqkv);
    if (st == ZT_OK) {
        b.out = malloc((size_t)SEQ * WIDTH * zt_dtype_size(t));
        b.lse = malloc((size_t)NH * SEQ * sizeof *b.lse);
        if (!b.out || !b.lse)
            st = zt_error_set(ZT_ERR_NOMEM, "calibrate: no memory to time the attention");
    }
    double v[MAX_REPS];
    for (int r = 0; r < reps + 1 && st == ZT_OK; r++) {
        const double t0 = zt_now_seconds();
        st = ops->attention_forward(ops, t, b.out, b.lse, b.qkv, 1, SEQ, NH, NH, hs);
        if (st == ZT_OK)
            st = ops->attention_backward(ops, t, b.dqkv, b.dout, b.qkv, b.out, b.lse, 1, SEQ, NH,
                                         NH, hs);
        if (r > 0)
            v[r - 1] = zt_now_seconds() - t0;
    }
    free_attn(&b);
    if (st == ZT_OK)
        *seconds = calibrate_median(v, reps);
    return st;
}

/* m->attention_flops[p]: both head sizes' FLOPs over their seconds. */
static zt_status attention_rates(const struct ops_backend *ops, int reps, struct machine *m)
{
    const double flops = 12.0 * SEQ * (double)SEQ * WIDTH; /* a shape's, 12 T C a token */
    for (int p = 0; p < 3; p++) {
        if (p != MACHINE_FP32 && ops->computes(ops, types[p]) != ZT_OK) {
            m->attention_flops[p] = m->attention_flops[MACHINE_FP32]; /* a run computes in fp32 */
            continue;
        }
        double total = 0.0;
        for (int i = 0; i < N_HEAD_SIZES; i++) {
            double s;
            ZT_TRY(time_attention(ops, types[p], head_sizes[i], reps, &s));
            total += s;
        }
        m->attention_flops[p] = N_HEAD_SIZES * flops / total;
    }
    return ZT_OK;
}

/* The element-wise block's buffers: x, y and z of ROWS x COLS, h, g and
 * dh of 4 ROWS x COLS (the MLP's width), an fp32 gradient view of
 * ROWS x COLS, a norm's weights and statistics. */
struct ew_buffers {
    void *x, *y, *z, *h, *g, *dh, *w, *bias;
    float *view, *mean, *rstd, *dw, *db;
};

static void free_ew(struct ew_buffers *b)
{
    void *all[] = {b->x,    b->y,    b->z,    b->h,    b->g,  b->dh, b->w,
                   b->bias, b->view, b->mean, b->rstd, b->dw, b->db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

static zt_status alloc_ew(const struct ops_backend *ops, enum zt_dtype t, struct ew_buffers *b)
{
    const size_t n = (size_t)ROWS * COLS;
    void **act[] = {&b->x, &b->y, &b->z, &b->h, &b->g, &b->dh, &b->w, &b->bias};
    const size_t len[] = {n, n, n, 4 * n, 4 * n, 4 * n, COLS, COLS};
    for (size_t i = 0; i < sizeof act / sizeof act[0]; i++)
        ZT_TRY(filled(ops, t, len[i], (int)i + 10, act[i]));
    b->view = malloc(n * sizeof(float));
    b->mean = malloc(ROWS * sizeof(float));
    b->rstd = malloc(ROWS * sizeof(float));
    b->dw = calloc(COLS, sizeof(float));
    b->db = calloc(COLS, sizeof(float));
    if (!b->view || !b->mean || !b->rstd || !b->dw || !b->db)
        return zt_error_set(ZT_ERR_NOMEM, "calibrate: no memory to time the element-wise ops");
    return ZT_OK;
}

/* One pass of the block's element-wise ops; *bytes: what they read and
 * write, counted per op (activations of esz bytes, the view's fp32). */
static zt_status ew_pass(const struct ops_backend *ops, enum zt_dtype t, struct ew_buffers *b,
                         double *bytes)
{
    const size_t n = (size_t)ROWS * COLS;
    const double e = (double)zt_dtype_size(t), N = (double)n;
    ZT_TRY(ops->layernorm_forward(ops, t, b->y, b->mean, b->rstd, b->x, b->w, b->bias, ROWS, COLS));
    ZT_TRY(ops->gelu_forward(ops, t, b->g, b->h, (int)(4 * n)));
    ZT_TRY(ops->residual_forward(ops, t, b->z, b->x, b->y, (int)n));
    ZT_TRY(ops->gelu_backward(ops, t, b->dh, b->h, b->g, (int)(4 * n)));
    ZT_TRY(ops->layernorm_backward(ops, t, b->z, b->dw, b->db, b->y, b->x, b->w, b->mean, b->rstd,
                                   ROWS, COLS));
    ZT_TRY(ops->add_into(ops, t, b->x, b->z, n));
    ZT_TRY(ops->memset_zero(ops, b->view, n * sizeof(float)));
    ZT_TRY(ops->from_f32(ops, t, b->view, b->y, n));
    /* norm forward 2, GELU forward 2 (x4), residual 3, GELU backward 3
     * (x4; dinp accumulates: 4 with its read), norm backward 4 (dinp
     * read and written), add 3 activations; the view 4 + 4 + e */
    *bytes = e * N * (2 + 8 + 3 + 16 + 4 + 3) + N * (8 + e);
    return ZT_OK;
}

static zt_status elementwise_rate(const struct ops_backend *ops, int reps, struct machine *m)
{
    const enum zt_dtype t = ops->computes(ops, ZT_BF16) == ZT_OK ? ZT_BF16 : ZT_F32;
    struct ew_buffers b = {0};
    zt_status st = alloc_ew(ops, t, &b);
    double v[MAX_REPS], bytes = 0.0;
    for (int r = 0; r < reps + 1 && st == ZT_OK; r++) {
        const double t0 = zt_now_seconds();
        st = ew_pass(ops, t, &b, &bytes);
        if (r > 0)
            v[r - 1] = zt_now_seconds() - t0;
    }
    free_ew(&b);
    if (st == ZT_OK)
        m->elementwise_bandwidth = bytes / calibrate_median(v, reps);
    return st;
}

void calibrate_ops_put(FILE *f, const struct machine *m, int reps)
{
    fprintf(f,
            "other ops: one core (a rank's thread), median of %d after 1 warm-up\n"
            "  attention_flops: attention_forward + attention_backward, one sequence of %d\n"
            "  tokens, width %d, heads of 64 and of 128, at 12 T C FLOPs a token\n",
            reps, SEQ, WIDTH);
    for (int p = 0; p < 3; p++)
        fprintf(f, "    %-5s %8.2f GFLOP/s\n", type_names[p], m->attention_flops[p] / 1e9);
    fprintf(f,
            "  elementwise_bandwidth: a block's layernorm, GELU (4x wide), residual, gradient\n"
            "  add and fp32 gradient view over %d x %d activations: %.2f GB/s of the bytes\n"
            "  each op reads and writes\n",
            ROWS, COLS, m->elementwise_bandwidth / 1e9);
}

zt_status calibrate_ops(const struct ops_backend *ops, int reps, struct machine *m, FILE *report)
{
    ZT_ASSERT(reps >= 1 && reps <= MAX_REPS);
    ZT_TRY(attention_rates(ops, reps, m));
    ZT_TRY(elementwise_rate(ops, reps, m));
    if (report) {
        calibrate_ops_put(report, m, reps);
        fputc('\n', report);
        fflush(report);
    }
    return ZT_OK;
}
