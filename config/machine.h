/* config/machine.h — what one kind of machine can do, read from a small
 * YAML file, for the planner's time and memory estimates.
 *
 * A machine file describes one device and the links between devices:
 *
 *     # comments ...
 *     name: h100-sxm
 *     device_memory: 80GiB        # zt_size_parse syntax, or a plain integer of bytes
 *     devices_per_node: 8
 *     cores: 112                  # optional: CPU cores of one node
 *     compute:
 *       matmul_flops:             # FLOP/s one device sustains in dense matmuls
 *         fp32: 46.9e12           # 67 TFLOPS peak x 0.70
 *         bf16: 692.58e12
 *         fp16: 692.58e12
 *       peak_matmul_flops:        # optional: the datasheet's dense peak
 *         fp32: 67e12
 *         bf16: 989.4e12
 *         fp16: 989.4e12
 *       memory_bandwidth: 3.015e12 # bytes/s
 *       gemm_tile: 128            # optional: the GEMM kernels' output tile edge
 *       gemm_rates:               # optional: measured linear layers, by type
 *         bf16:                   # [threads, rows, in, out, forward, input grad, weight grad]
 *           - [1, 512, 4096, 11008, 4.9e11, 4.1e11, 4.9e11]
 *       update_rates:             # optional: parameter elements/s of an optimizer's update
 *         AdamW8bit: 1.3e8
 *       dequantize_4bit: 2.1e9    # optional: 4-bit weights dequantised per s
 *       attention_flops:          # optional: one core's fused attention FLOP/s, by type
 *         bf16: 9.1e10
 *       elementwise_bandwidth: 6e9 # optional: bytes/s one core's element-wise ops move
 *       weights_read: 1.1e9       # optional: model.init_from's loader on one core,
 *       weights_read_transposed: 4e8 # elements/s: read from the page cache into fp32,
 *       quantize_4bit: 2.4e8      #   read and transposed, encoded into 4 bits
 *     nvme:                       # optional: the offload folder's disk, whole node
 *       read_bandwidth: 1.5e9     # bytes/s
 *       write_bandwidth: 1.1e9
 *     links:
 *       intra_node:
 *         bandwidth: 360e9        # bytes/s a device sends in a collective (bus bandwidth)
 *         latency: 3e-6           # s per collective step (per ring hop)
 *         busbw:                  # optional: measured, by the type reduced or moved
 *           bf16:                 # [bytes, allreduce, reduce_scatter, allgather bus bytes/s]
 *             - [67108864, 4.7e9, 1.3e9, 3.6e9]
 *       inter_node:
 *         bandwidth: 45e9
 *         latency: 5e-6
 *
 * The numbers are sustained rates, not datasheet peaks: the files under
 * configs/machines/ take the peak from the vendor's datasheet and apply a
 * stated efficiency factor, with the arithmetic in a comment, so that a
 * reader can check and change them.
 *
 * `peak_matmul_flops` is the vendor's dense peak itself, what model FLOPs
 * utilisation (MFU) is measured against, as PaLM's and Megatron's papers
 * measure it; the planner reports MFU only for the precisions a file
 * states it for (calibrate, which measures a CPU, states none), and the
 * share of the sustained rate beside it.
 *
 * `gemm_tile` and `gemm_rates` say how a GEMM's rate depends on its
 * shape (plan.h's plan_gemm_rate): a (m x k) by (k x n) product computes
 * whole tiles of the output, so a dimension that is not a multiple of the
 * tile wastes the rest of its last tile; `gemm_rates` lists what
 * `zerotrain calibrate` measured for a linear layer of `in` x `out`
 * weights over `rows` rows, its forward, input-gradient and weight-gradient
 * products apart, on `threads` threads (at most MACHINE_MAX_GEMM_RATES
 * rows a type), which the planner then reads instead of the roofline.
 * Both are optional: a file without them plans every GEMM at
 * matmul_flops, bounded only by the memory bandwidth.
 *
 * `update_rates` and `dequantize_4bit` are work a device does at its own
 * pace rather than the memory's: where a CPU decodes 8-bit optimizer
 * states or 4-bit weights element by element. An optimizer the file names
 * is planned at its rate (or the memory's traffic, whichever is slower);
 * the others, and every 4-bit weight without the key, as memory traffic.
 * calibrate measures them on one device's cores.
 *
 * `attention_flops` and `elementwise_bandwidth` are the same for the
 * ops the forward and backward run besides the GEMMs, each on one core
 * (a rank's OpenMP threads each bring one): the fused attention (per
 * type, counted as the planner counts it: 12 T C FLOPs a token for a
 * forward and backward, the whole T x T, though the causal kernel skips
 * half) and the norms, activations, residuals and casts (bytes each op
 * reads and writes). Without them the planner prices attention at the
 * GEMMs' rate and the element-wise ops at memory_bandwidth: the GPU
 * files' case, whose kernels have no measurement here.
 *
 * `weights_read`, `weights_read_transposed` and `quantize_4bit` time the
 * load of model.init_from's weights (coordinator/run_checkpoint.h's work),
 * a rank on one thread: a 16-bit file read and widened, a tensor the file
 * stores transposed read, widened and put back, a QLoRA base encoded;
 * what it stores into the model states streams at the rank's share of
 * `memory_bandwidth`. The file itself comes off the node's disk at
 * `nvme.read_bandwidth` where the file states one (a first load: the page
 * cache holds none of it). Without them the planner
 * predicts no load time.
 *
 * Every key but `cores`, the peaks, the GEMM keys, the seven rates above and
 * `nvme` is required and no other key is allowed, so that a typo is an
 * error rather than a silently ignored number. Numbers are plain decimal
 * (1e12, 450e9, 3.35e12, 2), finite and > 0; devices_per_node and cores
 * are integers >= 1; name is a string of 1 to 63 characters.
 *
 * `nvme` is the disk behind zero_optimization.offload_optimizer's
 * nvme_path, read and written by all the node's ranks at once: a step
 * reads and writes every rank's state file once (shard/nvme.c), which the
 * planner prices at these rates; `zerotrain calibrate --nvme-path DIR`
 * measures them.
 *
 * `cores` is what the ranks of a node run their threads on: `train` gives
 * each of R ranks max(1, cores / R) threads, so R > cores oversubscribes
 * the cores, and the planner then lets the busy ranks absorb a pipeline
 * stage's idle time (plan.h). `zerotrain calibrate` writes it (the online
 * cores); the GPU machines give their DGX node's CPU cores, which their 8
 * ranks never oversubscribe. A file without it reads as 0, "not stated",
 * which the planner takes as never oversubscribed.
 *
 * Files live in a folder of machines, found by name: ZT_MACHINES_DIR in
 * the environment, else the repository's configs/machines (compiled in).
 *
 * Errors are ZT_ERR_CONFIG, with one message naming the file and, where
 * there is a node to point at, its line and column:
 *   "FILE: empty machine file"
 *   "FILE:L:C: a machine file must be a mapping of name, device_memory,
 *    devices_per_node, cores, compute, nvme, links; got 'x'"
 *   "FILE:L:C: unknown key 'gpu_mem' (expected name, device_memory, ...)"
 *   "FILE:L:C: compute.gemm_measured is no longer read: replaced by
 *    compute.gemm_rates (...): run zerotrain calibrate again"
 *   "FILE:L:C: unknown key 'bf17' in compute.matmul_flops (expected fp32, bf16, fp16)"
 *   "FILE: missing key links.inter_node.latency"
 *   "FILE:L:C: links.intra_node: expected a mapping, got '3'"
 *   "FILE:L:C: compute.matmul_flops.bf16: expected a positive number, got 'fast'"
 *   "FILE:L:C: devices_per_node: expected an integer >= 1, got '0'"
 *   "FILE:L:C: cores: expected an integer >= 1, got '-2'"
 *   "FILE:L:C: device_memory: expected a size such as 80GiB or a number of bytes, got 'lots'"
 *   "FILE:L:C: name: expected a string of 1 to 63 characters, got ..."
 *   "FILE:L:C: links.intra_node.busbw.bf16: expected a list of at most 24
 *    [bytes, allreduce, reduce_scatter, allgather bus bytes/s] rows (sizes
 *    increasing, rates positive), got ..."
 *   "FILE:L:C: compute.gemm_rates.bf16: expected a list of at most 64
 *    [threads, rows, in, out, forward, input grad, weight grad FLOP/s] rows
 *    (4 positive integers, then 3 positive numbers), got ..."
 *   "no machine 'x' in DIR (there are: a100-40gb, a100-80gb, h100-sxm)"
 *   "no machine 'x': cannot list the machines folder DIR: <strerror>"
 *   yaml_tree_load_file's for a file that cannot be opened, read or parsed
 *   ("cannot open the configuration file FILE: ...", YAML syntax errors).
 * Nothing is allocated that outlives a call; struct machine is plain data.
 */
#ifndef ZT_CONFIG_MACHINE_H
#define ZT_CONFIG_MACHINE_H

#include <stdint.h>
#include <stdio.h>

#include "../common/status.h"

/* The collectives a link's measured table has a column for. */
enum machine_collective {
    MACHINE_ALLREDUCE,
    MACHINE_REDUCE_SCATTER,
    MACHINE_ALLGATHER,
    MACHINE_COLLECTIVES
};

/* Bus bandwidth measured at one message size: `bytes` is the full buffer
 * (the allreduce's, the reduce-scatter's input, the allgather's output). */
struct machine_busbw {
    double bytes;
    double busbw[MACHINE_COLLECTIVES]; /* bytes/s, nccl-tests' bus bandwidth */
};

#define MACHINE_MAX_BUSBW 24

/* One type's measured sizes, increasing (busbw.fp32 and so on). */
struct machine_busbw_table {
    int n; /* 0: none */
    struct machine_busbw row[MACHINE_MAX_BUSBW];
};

/* One class of link between devices: what a device sends per second in a
 * collective (nccl-tests' bus bandwidth) and the fixed cost of each step;
 * optionally what calibrate measured by message size, collective and type
 * (a 16-bit reduction adds on the CPU at another rate than fp32, and a
 * large message leaves the caches), which the planner reads instead. */
struct machine_link {
    double bandwidth;                    /* bytes per second */
    double latency;                      /* seconds per collective step (per ring hop) */
    struct machine_busbw_table busbw[3]; /* by type, as matmul_flops */
};

/* A linear layer's three products, each 2 rows in out FLOPs. */
enum machine_product { MACHINE_FORWARD, MACHINE_INPUT_GRAD, MACHINE_WEIGHT_GRAD, MACHINE_PRODUCTS };

/* One measured linear layer: `rows` rows through an `in` x `out` weight on
 * `threads` threads, each product's FLOP/s. */
struct machine_gemm_rate {
    int threads, rows, in, out;
    double flops[MACHINE_PRODUCTS];
};

#define MACHINE_MAX_GEMM_RATES 64

/* The measured layers of one type (gemm_rates.fp32 and so on). */
struct machine_gemm_table {
    int n; /* 0: none */
    struct machine_gemm_rate row[MACHINE_MAX_GEMM_RATES];
};

/* An optimizer's update rate (update_rates). */
struct machine_update {
    char optimizer[24]; /* its name as the file spells it */
    double rate;        /* parameter elements per second of one device */
};

#define MACHINE_MAX_UPDATES 8

struct machine {
    char name[64];
    char path[4096];        /* the file it was read from */
    uint64_t device_memory; /* bytes of one device */
    int devices_per_node;
    int cores;              /* CPU cores of one node; 0: not stated */
    double matmul_flops[3]; /* sustained dense matmul FLOP/s of one device, by working precision:
                               [0] fp32, [1] bf16, [2] fp16 (enum machine_precision) */
    double peak_matmul_flops[3]; /* the datasheet's dense peak, likewise; 0: not stated */
    double memory_bandwidth;     /* bytes per second of one device's memory */
    int gemm_tile;               /* output tile edge of the GEMM kernels; 0: not stated */
    struct machine_gemm_table gemm_rates[3]; /* by working precision, as matmul_flops */
    int n_updates;                           /* optimizers in updates[]; 0: none */
    struct machine_update updates[MACHINE_MAX_UPDATES];
    double dequantize_4bit;       /* 4-bit weights dequantised per second; 0: not stated */
    double attention_flops[3];    /* one core's fused attention FLOP/s by type; 0: not stated */
    double elementwise_bandwidth; /* bytes/s one core's element-wise ops move; 0: not stated */
    /* model.init_from's loader on one core, elements/s; 0: not stated */
    double weights_read, weights_read_transposed, quantize_4bit;
    double nvme_read_bandwidth, nvme_write_bandwidth; /* bytes/s of the node; 0: not stated */
    struct machine_link intra_node, inter_node;
};

/* Indexes of struct machine's matmul_flops and peak_matmul_flops. */
enum machine_precision { MACHINE_FP32, MACHINE_BF16, MACHINE_FP16 };

/* The update rate of optimizer `name` (ASCII case ignored), or 0 when the
 * file states none. */
double machine_update_rate(const struct machine *m, const char *name);

/* Reads a machine description into *out. `name_or_path` is a path when it
 * contains '/' or ends in ".yaml"; otherwise a NAME, read from
 * <dir>/NAME.yaml where dir is $ZT_MACHINES_DIR if set and non-empty, else
 * the repository's configs/machines. out->path is the file read. On error
 * *out is zeroed. Errors: ZT_ERR_CONFIG (see the top of this file). */
zt_status machine_load(const char *name_or_path, struct machine *out);

/* Writes m to f as a machine file that machine_load reads back to the same
 * values (doubles in the shortest form that reads back exactly), after
 * `comment` (may be NULL; each of its lines is written prefixed by "# ").
 * m must hold what machine_load accepts, as one it filled does. Errors:
 * ZT_ERR_IO "machine_write: cannot write machine 'NAME': <strerror>". */
zt_status machine_write(const struct machine *m, const char *comment, FILE *f);

#endif
