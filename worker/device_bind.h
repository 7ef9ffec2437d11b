/* worker/device_bind.h — which GPU a rank computes on.
 *
 * One rank drives one device at a time, and the ranks of a node are spread
 * over its visible GPUs by their node-local rank: ordinal = local_rank %
 * device_count. The ordinal is an index into the devices the CUDA runtime
 * shows this process; CUDA_VISIBLE_DEVICES (already applied by the runtime)
 * decides which physical GPUs those are and in what order, so it is only
 * recorded here, for messages.
 *
 * The node-local rank comes from the first source that has it, in the
 * order launchers set them: Open MPI's mpirun (OMPI_COMM_WORLD_LOCAL_RANK,
 * OMPI_COMM_WORLD_LOCAL_SIZE), then Slurm's srun (SLURM_LOCALID,
 * SLURM_NTASKS_PER_NODE), then the caller's split of the world by
 * MPI_COMM_TYPE_SHARED, which every MPI launch has but which costs a
 * collective. Rank and size are looked up separately, each by the same
 * order, so a launcher that exports only the rank still gets a size.
 * Environment values are read before they are trusted: a launcher's
 * variable that is not a plain decimal number, or a rank outside its size,
 * is a configuration error naming the variable and its value rather than a
 * silently wrong GPU.
 *
 * More ranks on a node than visible GPUs is allowed (ranks then share a
 * GPU round robin) and is reported in `shared`, since what runs on a
 * shared GPU differs: NCCL refuses two ranks of one communicator on one
 * device, so comm.backend auto falls back to MPI with host staging
 * (comm/comm.h, comm_backend_auto).
 *
 * Everything here is a pure function of its arguments: no CUDA call, no
 * MPI call, no global state. device_bind_env_read is the one reader of the
 * process environment; the caller supplies the device count
 * (cudaGetDeviceCount) and the shared-memory split.
 */
#ifndef ZT_WORKER_DEVICE_BIND_H
#define ZT_WORKER_DEVICE_BIND_H

#include <stddef.h>

#include "../common/status.h"

/* The launcher variables a binding reads; each NULL when unset. The strings
 * are borrowed (from getenv, or a test's literals). */
struct device_bind_env {
    const char *ompi_local_rank;       /* OMPI_COMM_WORLD_LOCAL_RANK */
    const char *ompi_local_size;       /* OMPI_COMM_WORLD_LOCAL_SIZE */
    const char *slurm_localid;         /* SLURM_LOCALID */
    const char *slurm_ntasks_per_node; /* SLURM_NTASKS_PER_NODE */
    const char *cuda_visible_devices;  /* CUDA_VISIBLE_DEVICES, for messages only */
};

/* The rank's node-local place among its node's ranks (from MPI_Comm_split_type
 * with MPI_COMM_TYPE_SHARED): used when the environment gives neither. */
struct device_bind_split {
    int rank; /* 0 <= rank < size */
    int size; /* >= 1 */
};

struct device_binding {
    int ordinal;           /* the visible device to use: local_rank % device_count */
    int local_rank;        /* this rank's index among its node's ranks */
    int local_size;        /* ranks on this node */
    int device_count;      /* visible devices, as the caller counted them */
    int shared;            /* 1: local_size > device_count, so ranks share a GPU */
    const char *rank_from; /* where local_rank came from: a variable's name or
                            * "MPI_COMM_TYPE_SHARED"; static */
    const char *size_from; /* likewise for local_size */
    char visible[128];     /* CUDA_VISIBLE_DEVICES as set ("" set empty; "(unset)";
                            * cut with "..." when longer) */
};

/* Fills *env from the process environment (getenv: valid until the
 * environment changes). */
void device_bind_env_read(struct device_bind_env *env);

/* Chooses this rank's device from the launcher variables, the
 * shared-memory split and the number of visible devices. *out is written
 * only on success.
 * Errors: ZT_ERR_CONFIG naming the variable and its value (not a
 * non-negative decimal integer, beyond INT_MAX, a size of 0, a local rank
 * not below the local size); ZT_ERR_DEVICE when device_count is 0 (naming
 * CUDA_VISIBLE_DEVICES as set); ZT_ERR_USAGE for a NULL argument, a
 * negative device_count, or a split outside 0 <= rank < size when it is
 * used. */
zt_status device_bind_choose(const struct device_bind_env *env, struct device_bind_split split,
                             int device_count, struct device_binding *out);

/* One line for a start-up log or an error, without newline, e.g.
 * "local rank 3 of 4 (OMPI_COMM_WORLD_LOCAL_RANK) -> visible device 1 of 2
 * (CUDA_VISIBLE_DEVICES=4,5), shared by 2 ranks". Always NUL-terminates
 * buf (n >= 1). */
void device_bind_describe(const struct device_binding *b, char *buf, size_t n);

#endif
