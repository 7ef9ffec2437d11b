/* plan/plan_gemm.c — a GEMM's sustained rate by its shape (plan.h).
 *
 * One rate for every matrix flatters small products: a 768-wide GPT-2
 * layer on an H100 moves as many bytes per FLOP as the memory can feed,
 * and a width of 200 computes the whole of its last 128-wide tile. The
 * rate of an (m x k)(k x n) product is therefore
 *
 *   2mkn / max(2 m' k n' / matmul_flops, esz (mk + kn + mn) / memory_bandwidth)
 *
 * with m' and n' rounded up to whole tiles (NVIDIA's "tile quantization":
 * each thread block computes one tile of the output), and a node's rate is
 * shared by the ranks on it.
 *
 * Where calibrate has measured linear layers on the machine (gemm_rates),
 * those replace the formula. A CPU's kernels differ by product as well as
 * by shape (at Llama-7B's width, one core computes the input gradient at
 * two thirds of the forward's rate, and LoRA's r-16 products at a tenth),
 * so each product is read from its own column: the rows measured on the
 * thread count nearest the rank's own (scaled by the ratio of the two),
 * weighted by inverse distance in log shape (exact at a measured shape).
 * Rates are averaged as seconds per FLOP, as times add up.
 */
#include "plan.h"

#include <math.h>

#include "../worker/tensor_parallel.h"

static double element_bytes(enum machine_precision p)
{
    return p == MACHINE_FP32 ? 4.0 : 2.0;
}

static double whole_tiles(double d, int tile)
{
    return tile > 0 ? ceil(d / tile) * tile : d;
}

/* The roofline of one (m x k)(k x n) product on a whole device. */
static double roofline(const struct machine *mach, enum machine_precision p, double m, double k,
                       double n)
{
    const double flops = 2.0 * m * k * n, esz = element_bytes(p);
    const double tiles =
        2.0 * whole_tiles(m, mach->gemm_tile) * k * whole_tiles(n, mach->gemm_tile);
    const double compute = tiles / mach->matmul_flops[p];
    const double memory = esz * (m * k + k * n + m * n) / mach->memory_bandwidth;
    return flops / (compute > memory ? compute : memory);
}

/* The measured layers a run in precision p computes as: its own, or
 * fp32's where calibrate found no kernel for p (a run then computes in
 * fp32); NULL without any. */
static const struct machine_gemm_table *table_of(const struct machine *m, enum machine_precision p)
{
    if (m->gemm_rates[p].n > 0)
        return &m->gemm_rates[p];
    return m->gemm_rates[MACHINE_FP32].n > 0 ? &m->gemm_rates[MACHINE_FP32] : NULL;
}

/* The thread count among the table's rows nearest `threads` (by ratio). */
static int nearest_threads(const struct machine_gemm_table *g, int threads)
{
    int best = g->row[0].threads;
    for (int i = 1; i < g->n; i++)
        if (fabs(log((double)g->row[i].threads / threads)) < fabs(log((double)best / threads)))
            best = g->row[i].threads;
    return best;
}

static double measured(const struct machine_gemm_table *g, enum machine_product prod, int threads,
                       double rows, double in, double out)
{
    const int at = nearest_threads(g, threads);
    double weights = 0.0, seconds = 0.0; /* per FLOP, weighted */
    for (int i = 0; i < g->n; i++) {
        const struct machine_gemm_rate *r = &g->row[i];
        if (r->threads != at)
            continue;
        const double d[3] = {log(rows / r->rows), log(in / r->in), log(out / r->out)};
        const double d2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
        if (d2 < 1e-12)
            return r->flops[prod] * threads / at;
        weights += 1.0 / (d2 * d2);
        seconds += 1.0 / (d2 * d2) / r->flops[prod];
    }
    return weights / seconds * threads / at;
}

double plan_gemm_rate(const struct machine *mach, enum machine_precision p,
                      enum machine_product prod, int per_node, double rows, double in, double out)
{
    const struct machine_gemm_table *g = table_of(mach, p);
    if (g) {
        const int threads = mach->cores / per_node > 1 ? mach->cores / per_node : 1;
        return measured(g, prod, threads, rows, in, out) * plan_core_share(mach, per_node);
    }
    /* forward (rows x in)(in x out), input gradient (rows x out)(out x in),
     * weight gradient (out x rows)(rows x in) */
    const double shape[MACHINE_PRODUCTS][3] = {{rows, in, out}, {rows, out, in}, {out, rows, in}};
    return roofline(mach, p, shape[prod][0], shape[prod][1], shape[prod][2]) /
           plan_device_share(mach, per_node);
}

/* Where a layout's products run. */
struct gemm_use {
    const struct machine *mach;
    enum machine_precision precision;
    int per_node, tp;
    double recompute; /* 1: every forward is run again in the backward */
};

/* A weight's (out x in) shape on a tensor-parallel rank of T. */
static void rank_shape(const struct plan_weight *w, int T, double *out, double *in)
{
    *out = w->split == TP_ROWS ? (double)w->out / T : w->out;
    *in = w->split == TP_COLS ? (double)w->in / T : w->in;
}

/* Adds one weight's products over `rows` rows, `times` over: the forward
 * (once more when recomputed), the input's gradient, and the weight's
 * unless it is frozen; each 2 rows in out FLOPs. */
static void add_weight(const struct plan_weight *w, const struct gemm_use *u, double rows,
                       double times, double *flops, double *seconds)
{
    double out, in;
    rank_shape(w, u->tp, &out, &in);
    const double f = 2.0 * rows * in * out * times;
    const double count[MACHINE_PRODUCTS] = {1.0 + u->recompute, 1.0, w->trainable ? 1.0 : 0.0};
    for (int k = 0; k < MACHINE_PRODUCTS; k++) {
        if (count[k] == 0.0)
            continue;
        *flops += count[k] * f;
        *seconds += count[k] * f /
                    plan_gemm_rate(u->mach, u->precision, (enum machine_product)k, u->per_node,
                                   rows, in, out);
    }
}

double plan_matmul_rate(const struct plan_model *pm, const struct plan_layout *l, int blocks,
                        int last, const struct machine *mach, enum machine_precision p,
                        int per_node)
{
    if (pm->n_weights == 0)
        return mach->matmul_flops[p] / plan_device_share(mach, per_node);
    const struct gemm_use u = {mach, p, per_node, l->tp, l->ckpt_every > 0 ? 1.0 : 0.0};
    const double rows = (double)l->micro_batch * pm->seq / plan_context_size(l);
    double flops = 0.0, seconds = 0.0;
    for (int i = 0; i < pm->n_weights; i++)
        add_weight(&pm->weights[i], &u, rows, blocks, &flops, &seconds);
    if (last && pm->head.out > 0)
        add_weight(&pm->head, &u, rows, 1.0, &flops, &seconds);
    return flops / seconds;
}
