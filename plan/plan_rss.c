/* plan/plan_rss.c — the host memory (peak RSS) of a planned rank, by
 * report/rss_model.h's parts (see plan.h).
 *
 * The planner runs in one process without MPI, so its baseline is this
 * process at start-up: the binary and its libraries, not MPI's buffers (a
 * few MiB a rank that `train --dry-run`, which runs under mpirun, measures).
 * The runtime part is probed here as a rank probes it, on the CPU backend.
 * A rank's ledger is host memory when the config's device is the CPU or
 * the machine is a CPU node (a file `zerotrain calibrate` wrote, which
 * states no datasheet peak); on a GPU only the host-side categories count:
 * the loader's staging and, under ZeRO-Offload, the master and optimizer
 * states.
 */
#include <string.h>

#include "../coordinator/session.h"
#include "plan.h"

static int rank_on_host(const struct zt_config *c, const struct machine *m)
{
    return strcmp(c->device, "cpu") == 0 || m->peak_matmul_flops[MACHINE_FP32] == 0.0;
}

zt_status plan_rss_start(const struct zt_config *c, const struct machine *m, struct rss_start *out)
{
    memset(out, 0, sizeof *out);
    out->baseline = ledger_rss_now();
    if (!rank_on_host(c, m))
        return ZT_OK;
    struct ledger ledger;
    struct compute_backend be;
    ledger_init(&ledger, 0);
    ZT_TRY(compute_backend_open("cpu", -1, &ledger, &be));
    const enum zt_dtype t = session_compute_type(c, be.ops, NULL, 0);
    zt_status st = rss_probe_runtime(&be, t, c->train_micro_batch_size_per_gpu * c->data.seq_len,
                                     c->model.n_embd, 4 * c->model.n_embd, &out->runtime);
    compute_backend_close(&be);
    return st;
}

void plan_rss_role(const struct zt_config *c, const struct machine *m, const struct rss_start *st,
                   struct plan_role *r)
{
    const int offload = c->zero.offload_optimizer.device != ZT_OFFLOAD_NONE;
    const uint64_t host_states =
        offload ? r->peak[LEDGER_MASTER_PARAMS] + r->peak[LEDGER_OPTIMIZER_STATES] : 0;
    const uint64_t train = rss_data_estimate(c->data.train, c->data.n_train);
    const uint64_t data =
        train + (c->data.n_val == 0 ? (uint64_t)(c->data.val_fraction * (double)train)
                                    : rss_data_estimate(c->data.val, c->data.n_val));
    r->rss = (struct rss_parts){.baseline = st->baseline,
                                .runtime = st->runtime,
                                .counted = rss_counted(r->peak, r->total_peak, rank_on_host(c, m),
                                                       host_states, r->cache_kept),
                                .data = data};
    if (r->loaded_total_peak == 0)
        return;
    const uint64_t loaded_host =
        offload ? r->loaded_peak[LEDGER_MASTER_PARAMS] + r->loaded_peak[LEDGER_OPTIMIZER_STATES]
                : 0;
    r->rss_loaded = r->rss;
    r->rss_loaded.counted = rss_counted(r->loaded_peak, r->loaded_total_peak, rank_on_host(c, m),
                                        loaded_host, r->loaded_cache_kept);
}

void plan_rss_print(const struct plan_role *roles, int n, FILE *f)
{
    fprintf(f, "host memory (peak RSS) per rank of the best layout = baseline (this process, "
               "without MPI) + runtime (probed) + counted (the ledger's host bytes) + data:\n");
    for (int k = 0; k < n; k++) {
        char parts[200];
        rss_parts_format(&roles[k].rss, parts, sizeof parts);
        fprintf(f, "  stage %d: %s\n", roles[k].stage, parts);
    }
}
