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
 * each thread block computes one tile of the output). Where calibrate has
 * measured GEMMs on the machine, those rates replace the formula: they are
 * interpolated in the arithmetic intensity 2mkn / (esz (mk + kn + mn)),
 * which orders a CPU's products by what bounds them as it does a GPU's.
 * The measured curve is fp32's; another precision keeps its shape at the
 * level calibrate measured for it (matmul_flops[p] / matmul_flops[fp32]).
 */
#include "plan.h"

#include <math.h>

#include "../worker/tensor_parallel.h"

static double element_bytes(enum machine_precision p)
{
    return p == MACHINE_FP32 ? 4.0 : 2.0;
}

static double intensity(double m, double k, double n, double esz)
{
    return 2.0 * m * k * n / (esz * (m * k + k * n + m * n));
}

static double whole_tiles(double d, int tile)
{
    return tile > 0 ? ceil(d / tile) * tile : d;
}

/* Measured fp32 rates against log
 * intensity: sorted, points of equal intensity averaged, linear between
 * neighbours, constant beyond the ends. */
static double measured_rate(const struct machine *mach, double x)
{
    double px[MACHINE_MAX_GEMM] = {0}, pr[MACHINE_MAX_GEMM] = {0};
    int cnt[MACHINE_MAX_GEMM] = {0}, n = 0;
    for (int i = 0; i < mach->n_gemm; i++) {
        const struct machine_gemm *g = &mach->gemm[i];
        const double gx = log(intensity(g->m, g->k, g->n, 4.0));
        int j = n;
        while (j > 0 && px[j - 1] > gx)
            j--;
        if (j > 0 && px[j - 1] == gx) {
            pr[j - 1] += g->flops, cnt[j - 1]++;
            continue;
        }
        for (int t = n++; t > j; t--)
            px[t] = px[t - 1], pr[t] = pr[t - 1], cnt[t] = cnt[t - 1];
        px[j] = gx, pr[j] = g->flops, cnt[j] = 1;
    }
    for (int j = 0; j < n; j++)
        pr[j] /= cnt[j];
    if (x <= px[0])
        return pr[0];
    for (int j = 1; j < n; j++)
        if (x <= px[j])
            return pr[j - 1] + (pr[j] - pr[j - 1]) * (x - px[j - 1]) / (px[j] - px[j - 1]);
    return pr[n - 1];
}

double plan_gemm_rate(const struct machine *mach, enum machine_precision p, double m, double k,
                      double n)
{
    const double flops = 2.0 * m * k * n, esz = element_bytes(p);
    if (mach->n_gemm > 0)
        return measured_rate(mach, log(intensity(m, k, n, 4.0))) * mach->matmul_flops[p] /
               mach->matmul_flops[MACHINE_FP32];
    const double tiles =
        2.0 * whole_tiles(m, mach->gemm_tile) * k * whole_tiles(n, mach->gemm_tile);
    const double compute = tiles / mach->matmul_flops[p];
    const double memory = esz * (m * k + k * n + m * n) / mach->memory_bandwidth;
    return flops / (compute > memory ? compute : memory);
}

/* A weight's (out x in) shape on a tensor-parallel rank of T. */
static void rank_shape(const struct plan_weight *w, int T, double *out, double *in)
{
    *out = w->split == TP_ROWS ? (double)w->out / T : w->out;
    *in = w->split == TP_COLS ? (double)w->in / T : w->in;
}

/* Adds one weight's three products over `rows` rows: the forward
 * (rows x in)(in x out), the input's gradient (rows x out)(out x in) and
 * the weight's (out x rows)(rows x in); each 2 rows in out FLOPs. */
static void add_weight(const struct plan_weight *w, int T, double rows, double times,
                       const struct machine *mach, enum machine_precision p, double *flops,
                       double *seconds)
{
    double out, in;
    rank_shape(w, T, &out, &in);
    const double f = 2.0 * rows * in * out * times;
    const double shapes[3][3] = {{rows, in, out}, {rows, out, in}, {out, rows, in}};
    for (int s = 0; s < 3; s++) {
        *flops += f;
        *seconds += f / plan_gemm_rate(mach, p, shapes[s][0], shapes[s][1], shapes[s][2]);
    }
}

double plan_matmul_rate(const struct plan_model *pm, const struct plan_layout *l, int blocks,
                        int last, const struct machine *mach, enum machine_precision p)
{
    if (pm->n_weights == 0)
        return mach->matmul_flops[p];
    const double rows = (double)l->micro_batch * pm->seq;
    double flops = 0.0, seconds = 0.0;
    for (int i = 0; i < pm->n_weights; i++)
        add_weight(&pm->weights[i], l->tp, rows, blocks, mach, p, &flops, &seconds);
    if (last && pm->head.out > 0)
        add_weight(&pm->head, l->tp, rows, 1.0, mach, p, &flops, &seconds);
    return flops / seconds;
}
