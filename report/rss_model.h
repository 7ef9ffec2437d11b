/* report/rss_model.h — a rank's peak resident memory (RSS), predicted
 * beside the ledger's bytes.
 *
 * The ledger counts the buffers zerotrain asks for; the kernel counts the
 * pages a process touches (VmHWM). What lies between them is what no
 * ledger call sees, and the prediction adds it part by part:
 *
 *   baseline  the process before the model: the binary and its libraries,
 *             MPI's buffers, the compute backend opened (a GPU's context).
 *             Measured, VmRSS at start-up once the communicator is made
 *             (ledger_rss_now).
 *   runtime   what the compute libraries keep once products have run: the
 *             GEMM library's packing buffers and JIT kernels (OpenBLAS,
 *             oneDNN), its threads' stacks and malloc arenas. Measured at
 *             start-up too (rss_probe_runtime): one product of the model's
 *             shape, forward and backward, on the run's threads, and what
 *             VmRSS kept after its buffers were freed. 0 on a GPU (its
 *             libraries keep device memory).
 *   counted   the ledger's total peak where device memory is host memory
 *             (the CPU backend), and what its host cache keeps mapped
 *             beyond its live buffers' peak (up to an eighth of it: the
 *             plan and the dry run run a model of the cache,
 *             worker/cpu/host_cache.h); on a GPU only what the ledger
 *             counts in host memory: ZeRO-Offload's host states and
 *             staging, the loader's staging (`load`).
 *   data      the token buffers: 4 bytes a token (int32), one more with a
 *             loss mask. A run knows them; a plan estimates them from the
 *             files (rss_data_estimate).
 *
 * The allocator's own overhead is in none of them: the CPU backend's
 * buffers are page-sized and larger, which glibc maps whole, so its
 * rounding is a page a live buffer, and the validation (scripts/bench/
 * rss_check.sh) shows the sum within a few percent without it.
 * NVMe offload's files are read with pread into the counted window, so
 * the page cache they fill is the kernel's, not the rank's; the weights
 * loader reads the same way.
 */
#ifndef ZT_REPORT_RSS_MODEL_H
#define ZT_REPORT_RSS_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/dtype.h"
#include "../common/ledger.h"
#include "../common/status.h"
#include "../worker/backend.h"

/* The parts of a rank's predicted peak RSS (see above), in bytes. */
struct rss_parts {
    uint64_t baseline, runtime, counted, data;
};

/* What a rank measures at start-up, before the model: the two measured
 * parts of its prediction. */
struct rss_start {
    uint64_t baseline, runtime;
};

/* The prediction: the sum of the parts. */
uint64_t rss_parts_total(const struct rss_parts *p);

/* The counted part of a ledger's peaks: where the device is host memory,
 * total_peak and what its host cache keeps beyond its live buffers' peak
 * (`kept`: device_memory_info's resident_peak - held_peak, which a plan's
 * model of the cache gives too); else the host-side part
 * (offload_host_peak, the bytes ZeRO-Offload keeps in host memory, plus
 * the `load` peak). */
uint64_t rss_counted(const uint64_t peak[LEDGER_CATEGORY_COUNT], uint64_t total_peak,
                     int host_memory, uint64_t offload_host_peak, uint64_t kept);

/* The parts and their sum as JSON, {"baseline": b, "runtime": r,
 * "counted": c, "data": d, "total": t}, to f. */
void rss_parts_write_json(const struct rss_parts *p, FILE *f);

/* The parts and their sum as text, "B + R + C + D = T" in
 * zt_size_format's units (common/size.h), into buf[n]. */
void rss_parts_format(const struct rss_parts *p, char *buf, size_t n);

/* The compute libraries' resident working memory: VmRSS after one
 * forward and backward product out[rows, OC] = in[rows, C] W^T of type t
 * on `be` (its threads as they are set), its buffers freed, less VmRSS
 * before. Dimensions are capped (rows 1024, C and OC 4096) so that the
 * probe takes a fraction of a second at any model size; the libraries'
 * blocking buffers do not grow past such shapes. 0 where be's memory is
 * not host memory. Not collective. Errors: ZT_ERR_NOMEM, the ops'. */
zt_status rss_probe_runtime(const struct compute_backend *be, enum zt_dtype t, int rows, int C,
                            int OC, uint64_t *out);

/* Bytes of token buffers the n paths (token files, text files or folders
 * of them) load into: a token file's count from its header, 4 bytes each;
 * text at one token a byte (the byte tokenizer's count, an upper bound for
 * the others). A path that cannot be read counts 0. */
uint64_t rss_data_estimate(char *const *paths, int n);

#endif
