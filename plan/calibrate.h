/* plan/calibrate.h — `zerotrain calibrate`: measure the node it runs
 * on and write a machine file (config/machine.h) for the planner.
 *
 * The planner's machine files under configs/machines/ take datasheet peaks
 * times stated efficiency factors. On a CPU node nobody publishes such a
 * sheet, so calibrate measures the numbers instead, with the code that
 * training itself runs:
 *
 *   - matmul_flops: the CPU op table's matmul_forward and matmul_backward at
 *     transformer shapes, on rank 0 with BLAS threads on every core of the
 *     node while the other ranks sleep (a CPU node is ONE device whose cores
 *     run one rank's threads, so the rate is what all cores sustain);
 *     fp32's shapes go into gemm_measured, which the planner reads for
 *     the rate of a GEMM by its shape (plan.h's plan_gemm_rate), and bf16
 *     and fp16 are timed at one width for their own matmul_flops;
 *   - update_rates and dequantize_4bit: each optimizer's update and the
 *     NF4 decode on one core (calibrate_rates.h);
 *   - nvme (with --nvme-path DIR): every rank writes and reads a file of
 *     its own in DIR at once (calibrate_nvme.h);
 *   - memory_bandwidth: a triad a[i] = b[i] + s*c[i] over float arrays far
 *     larger than the caches, on rank 0 with every core;
 *   - links: allreduce, reduce-scatter and allgather of the "mpi" backend
 *     among all ranks in fp32, bf16 and fp16, sizes doubling up to 256 MiB
 *     (ZeRO's units), the slowest rank's time per call: the busbw tables,
 *     which the planner reads by type and message size, and over fp32's a
 *     least-squares fit of t = steps*latency + busbytes/bandwidth
 *     (comm.h's bus model; plan_cost.c's time of a collective).
 *
 * Every measured table goes into the file's comment, so a reader sees
 * where each number came from. Nothing here is global state; the results
 * live in a caller-owned struct calibration.
 */
#ifndef ZT_PLAN_CALIBRATE_H
#define ZT_PLAN_CALIBRATE_H

#include <stdint.h>
#include <stdio.h>

#include "../common/status.h"

struct calibrate_options {
    const char *out_path;     /* the machine file written (required) */
    const char *name;         /* the machine's name; NULL: "cpu-<hostname>" cut to 63 chars */
    uint64_t device_memory;   /* bytes; 0: the node's physical memory */
    int quick;                /* 1: small sizes and few repetitions (tests) */
    const char *nvme_path;    /* a folder whose disk's file bandwidth to measure; NULL: none */
    const char *command_line; /* recorded in the file's comment; may be NULL */
};

/* The link fit over every measured collective: t = steps*latency +
 * busbytes/bandwidth, both forced positive. */
struct calibrate_link_fit {
    double latency;         /* seconds per step */
    double bandwidth;       /* bus bytes per second */
    int latency_fallback;   /* 1: the fit's latency was <= 0; the smallest size's time/steps */
    int bandwidth_fallback; /* 1: the fit's 1/bandwidth was <= 0; the best measured busbw */
};

/* Fits t[i] = steps[i]*latency + busbytes[i]/bandwidth by least squares
 * over n >= 1 points (two unknowns, closed form). A non-positive latency is
 * replaced by the smallest busbytes' t/steps (the lowest such over points of
 * that size) and 1/bandwidth refitted alone; a non-positive 1/bandwidth by
 * the highest busbytes/t measured. Pure: exposed for the tests. */
void calibrate_fit_link(const double *steps, const double *busbytes, const double *t, int n,
                        struct calibrate_link_fit *out);

/* Runs the calibration; collective over the world (comm_runtime_init must
 * have run). Rank 0 prints the tables to `report` (NULL: nowhere) and
 * writes o->out_path atomically. Every rank returns the same status;
 * *print_here is set on the lowest rank whose own status failed, so that
 * the message is printed once. Errors: ZT_ERR_USAGE (no out_path, a name
 * of 0 or more than 63 characters, a world of one rank: "calibrate
 * measures collectives between ranks: run it under mpirun with 2 to 4
 * ranks", ranks on several nodes), ZT_ERR_IO naming out_path when it
 * cannot be created or written, or nvme_path when a file cannot be
 * created, reserved, written or read there, ZT_ERR_NOMEM, ZT_ERR_COMM, those of
 * compute_backend_open, and ZT_ERR_INTERNAL for a measured rate that is not
 * positive and finite. */
zt_status calibrate_run(const struct calibrate_options *o, FILE *report, int *print_here);

#endif
