/* report/memory_report.h — the per-rank memory report of a run.
 *
 * At the end of `zerotrain train` (and of `train --dry-run`, whose ledgers
 * are in plan mode) every rank's ledger peaks and resident peak (VmHWM) are
 * gathered to rank 0, which prints them next to two references: the
 * single-device baseline (the same allocation plan run at stage 0 on one
 * rank, measured on a plan ledger) and the ZeRO paper's model-state bytes
 * per rank for the stage in use. The report is measured, not derived: the
 * formula is only printed beside the measurement, so padding of the shards
 * or a forgotten buffer shows up as a difference.
 *
 * Ownership: the caller owns the struct and fills every field except
 * `ranks` (and `world_size`, which the gather sets); memory_report_gather
 * allocates `ranks` on rank 0 and memory_report_free releases it.
 *
 * JSON file (one line; bytes are exact integers):
 *   {"world_size": N, "stage": s, "n_params": Ψ,
 *    "bytes_per_param": {"params": p, "grads": g, "master_params": m, "optimizer_states": o},
 *    "base4_numel": n, "base4_bytes": bytes,  (a 4-bit base; 0, 0 without)
 *    "baseline": {"<category>": bytes, ..., "total": bytes},
 *    "expected_model_states": bytes,
 *    "ranks": [{"rank": r, "tp": t, "pp": p, "dp": d, "peak": {"<category>": bytes, ...},
 *               "total_peak": bytes, "rss_peak": bytes, "expected_model_states": bytes,
 *               "device": {"reserved": bytes, "used_peak": bytes, "largest_free": bytes,
 *                          "driver_free": bytes, "driver_total": bytes,
 *                          "offload_host_peak": bytes},
 *               "nvme_file_bytes": bytes,
 *               "rss_predicted": {"baseline": bytes, "runtime": bytes, "counted": bytes,
 *                                 "data": bytes, "total": bytes},
 *               "load_rss_peak": bytes, "rss_predicted_loaded": {...as rss_predicted}},
 *              ...]}
 * "device" is worker/device.h's device_memory_info read at the report: on
 * a GPU the caching pool's reservation, the peak of its blocks in use, its
 * largest free block and what the driver says is free of the card's
 * memory; on the CPU the ledger's bytes and the host's physical pages.
 * "offload_host_peak" is the part of the rank's peaks that ZeRO-Offload
 * keeps in host memory (master weights, optimizer states, the update's
 * staging; 0 without offload). "nvme_file_bytes" is the rank's NVMe offload
 * file (master and optimizer states on disk, in no category; 0 without).
 * "rss_predicted" is the rank's peak RSS as rss_model.h predicts it, the
 * parts and their sum; under --dry-run the prediction, in a run the same
 * sum over the run's own peaks, to hold against "rss_peak".
 * "rss_predicted_loaded" is the same once model.init_from's weights were
 * read (the ledger's peaks until then), to hold against "load_rss_peak",
 * the VmHWM the run read then; both are absent without model.init_from.
 * with the category names of ledger_category_name() in ledger order.
 */
#ifndef ZT_REPORT_MEMORY_REPORT_H
#define ZT_REPORT_MEMORY_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "../comm/comm.h"
#include "../common/ledger.h"
#include "../common/status.h"
#include "rss_model.h"

struct memory_rank_row {
    int rank;
    /* Its place in the layout (comm/layout.h) and the model-state bytes
     * expected of it (memory_expected_model_states over its pipeline
     * stage's parameters); 0, 0, rank and 0 when the caller gave none. */
    int tp, pp, dp;
    uint64_t expected_model_states;
    uint64_t peak[LEDGER_CATEGORY_COUNT];
    uint64_t total_peak; /* peak of the sum, not the sum of the peaks */
    uint64_t rss_peak;   /* VmHWM in bytes, 0 if unknown */
    /* The device's own account (struct device_memory_info): reserved,
     * peak used, largest free block, the driver's free and total bytes;
     * filled by the caller, zero when it gave none. */
    uint64_t device_reserved, device_used_peak, device_largest_free;
    uint64_t driver_free, driver_total;
    uint64_t offload_host_peak; /* ZeRO-Offload's host bytes at their peak */
    uint64_t nvme_file_bytes;   /* NVMe offload: the rank's state file (on disk) */
    struct rss_parts rss;       /* the predicted peak RSS, by part (rss_model.h) */
    /* model.init_from's load (all zero without one): the predicted peak
     * RSS once the weights were read, by part, and the measured one then
     * (VmHWM; 0 in a dry run) */
    struct rss_parts rss_loaded;
    uint64_t load_rss_peak;
};

struct memory_report {
    int world_size, stage;
    /* ZeRO's group: the ranks the model states are sharded over (the
     * data-parallel ranks, or one HSDP shard group); 0: world_size. */
    int shard_ranks;
    uint64_t n_params;    /* Ψ, unpadded */
    uint64_t n_trainable; /* of them trainable (Ψ unless some are frozen): printed when fewer */
    /* params, grads, master_params, optimizer_states (fp32 AdamW: 4, 4, 0, 8) */
    double bytes_per_param[4];
    uint64_t baseline[LEDGER_CATEGORY_COUNT]; /* single-device plan peaks */
    uint64_t baseline_total;
    uint64_t expected_model_states; /* memory_expected_model_states() for this run */
    /* A 4-bit base (QLoRA): how many parameters it holds, and the bytes of
     * their codes and scales on each rank (in the params column); 0, 0
     * without one. */
    uint64_t base4_numel, base4_bytes;
    struct memory_rank_row *ranks; /* world_size rows in rank order; rank 0 only */
    int layout;                    /* rows show (tp, pp, dp): tensor or pipeline parallel */
    int device_memory;             /* 1: the buffers are a GPU's: print the device rows */
    const char *nvme_path;         /* NVMe offload's folder, borrowed; NULL: none */
    int planned;                   /* 1: a dry run's: no rank ran, rss_peak is not the run's */
};

/* Collective over c: every rank sends its ledger peaks and its VmHWM (read
 * now) to rank 0 of c, which gets them in r->ranks (allocated, rank order);
 * elsewhere r->ranks is set to NULL. Sets r->world_size to the size of c and
 * leaves the other fields alone. Errors (on every rank alike): ZT_ERR_NOMEM
 * (rank 0 could not allocate the rows), ZT_ERR_COMM. */
zt_status memory_report_gather(struct comm *c, const struct ledger *mine, struct memory_report *r);
/* The same with this rank's place in the layout and its expected model
 * states (place->rank is ignored), which rank 0's rows then carry. */
zt_status memory_report_gather_placed(struct comm *c, const struct ledger *mine,
                                      const struct memory_rank_row *place, struct memory_report *r);

/* The ZeRO paper's model-state bytes per rank with p, g, m, o bytes per
 * parameter (bpp[0..3]) for N = world ranks: stage 0 (p+g+m+o)Ψ; stage 1
 * (p+g)Ψ + (m+o)Ψ/N; stage 2 pΨ + (g+m+o)Ψ/N; stage 3 (p+g+m+o)Ψ/N,
 * rounded to the nearest byte, where g, m and o count only the n_trainable
 * parameters of units that train (n_trainable = Ψ when nothing is
 * frozen). Shards are padded to a multiple of N, so
 * the measured bytes may exceed this slightly. `replicated` bytes of the
 * optimizer's state (included in bpp[3] as their average per trainable
 * parameter) are kept whole by every rank in every stage: a whole-tensor
 * optimizer's per-tensor state. Asserts 0 <= stage <= 3 and world >= 1. */
uint64_t memory_expected_model_states(int stage, int world, uint64_t n_params, uint64_t n_trainable,
                                      const double bpp[4], uint64_t replicated);

/* Prints the report to f: one row per rank (each category's peak, the total
 * peak, the resident peak, total / baseline total), the baseline row, and
 * the measured model states (min .. max over ranks) against the expected
 * ones. Prints nothing when r->ranks is NULL, so every rank may call it. */
void memory_report_print(const struct memory_report *r, FILE *f);

/* Writes the report as JSON (format above) to path atomically: a temporary
 * file beside it, fsync, rename, fsync of the folder; a failure leaves any
 * previous file and no temporary. Rank 0 only (asserts r->ranks).
 * Errors: ZT_ERR_IO, ZT_ERR_NOMEM. */
zt_status memory_report_write_json(const struct memory_report *r, const char *path);

/* Frees r->ranks and sets it to NULL; safe to call twice and on any rank. */
void memory_report_free(struct memory_report *r);

#endif
