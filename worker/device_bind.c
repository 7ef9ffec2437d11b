/* worker/device_bind.c — a rank's GPU from its node-local rank.
 *
 * The launchers' variables are text a user or a batch script can get
 * wrong (an unexpanded "$SLURM_LOCALID", "0,1" pasted from
 * CUDA_VISIBLE_DEVICES), and the cost of taking them loosely is two ranks
 * silently on one GPU or a rank on none. So each value is parsed whole, as
 * a plain decimal with nothing around it, and every refusal names the
 * variable, the value and what was expected. The shared-memory split the
 * caller passes is its own computation, not user input: a bad one is a
 * usage error (a bug), not a configuration error.
 */
#include "device_bind.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char split_name[] = "MPI_COMM_TYPE_SHARED";

void device_bind_env_read(struct device_bind_env *env)
{
    env->ompi_local_rank = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    env->ompi_local_size = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    env->slurm_localid = getenv("SLURM_LOCALID");
    env->slurm_ntasks_per_node = getenv("SLURM_NTASKS_PER_NODE");
    env->cuda_visible_devices = getenv("CUDA_VISIBLE_DEVICES");
}

/* `text` of variable `name` as an int >= min, or ZT_ERR_CONFIG saying why. */
static zt_status parse_count(const char *name, const char *text, int min, int *out)
{
    const char *p = text;
    int negative = *p == '-';
    if (negative)
        p++;
    if (!isdigit((unsigned char)*p))
        return zt_error_set(ZT_ERR_CONFIG, "%s='%s': expected a non-negative integer", name, text);
    long long v = 0;
    for (; isdigit((unsigned char)*p); p++) {
        v = v * 10 + (*p - '0');
        if (v > INT_MAX)
            return zt_error_set(ZT_ERR_CONFIG, "%s='%s': out of range (at most %d)", name, text,
                                INT_MAX);
    }
    if (*p != '\0')
        return zt_error_set(ZT_ERR_CONFIG, "%s='%s': expected a non-negative integer", name, text);
    if (negative || v < min)
        return zt_error_set(ZT_ERR_CONFIG, "%s='%s': must be >= %d", name, text, min);
    *out = (int)v;
    return ZT_OK;
}

/* The first of the launchers' two variables that is set, parsed; else the
 * split's value. */
static zt_status pick(const char *ompi_name, const char *ompi, const char *slurm_name,
                      const char *slurm, int split_value, int min, int *out, const char **from)
{
    if (ompi) {
        *from = ompi_name;
        return parse_count(ompi_name, ompi, min, out);
    }
    if (slurm) {
        *from = slurm_name;
        return parse_count(slurm_name, slurm, min, out);
    }
    *from = split_name;
    *out = split_value;
    return ZT_OK;
}

/* CUDA_VISIBLE_DEVICES as it will read in messages. */
static void record_visible(const char *v, char *buf, size_t n)
{
    if (!v)
        snprintf(buf, n, "(unset)");
    else if (strlen(v) < n)
        snprintf(buf, n, "%s", v);
    else
        snprintf(buf, n, "%.*s...", (int)(n - 4), v);
}

static zt_status check_split(struct device_bind_split split, const char *rank_from,
                             const char *size_from)
{
    int uses_split = rank_from == split_name || size_from == split_name;
    if (uses_split && (split.size < 1 || split.rank < 0 || split.rank >= split.size))
        return zt_error_set(ZT_ERR_USAGE,
                            "device binding: the %s split gives rank %d of %d (need 0 <= rank < "
                            "size)",
                            split_name, split.rank, split.size);
    return ZT_OK;
}

zt_status device_bind_choose(const struct device_bind_env *env, struct device_bind_split split,
                             int device_count, struct device_binding *out)
{
    if (!env || !out)
        return zt_error_set(ZT_ERR_USAGE, "device_bind_choose: NULL argument");
    if (device_count < 0)
        return zt_error_set(ZT_ERR_USAGE, "device_bind_choose: device count %d < 0", device_count);
    struct device_binding b = {.device_count = device_count};
    record_visible(env->cuda_visible_devices, b.visible, sizeof b.visible);
    ZT_TRY(pick("OMPI_COMM_WORLD_LOCAL_RANK", env->ompi_local_rank, "SLURM_LOCALID",
                env->slurm_localid, split.rank, 0, &b.local_rank, &b.rank_from));
    ZT_TRY(pick("OMPI_COMM_WORLD_LOCAL_SIZE", env->ompi_local_size, "SLURM_NTASKS_PER_NODE",
                env->slurm_ntasks_per_node, split.size, 1, &b.local_size, &b.size_from));
    ZT_TRY(check_split(split, b.rank_from, b.size_from));
    if (b.local_rank >= b.local_size)
        return zt_error_set(ZT_ERR_CONFIG,
                            "%s=%d is not below %s=%d: a node-local rank must be less than the "
                            "number of ranks on the node",
                            b.rank_from, b.local_rank, b.size_from, b.local_size);
    if (device_count == 0)
        return zt_error_set(ZT_ERR_DEVICE,
                            "no CUDA device is visible to local rank %d (CUDA_VISIBLE_DEVICES=%s)",
                            b.local_rank, b.visible);
    b.ordinal = b.local_rank % device_count;
    b.shared = b.local_size > device_count;
    *out = b;
    return ZT_OK;
}

void device_bind_describe(const struct device_binding *b, char *buf, size_t n)
{
    int used = snprintf(buf, n,
                        "local rank %d of %d (%s) -> visible device %d of %d "
                        "(CUDA_VISIBLE_DEVICES=%s)",
                        b->local_rank, b->local_size, b->rank_from, b->ordinal, b->device_count,
                        b->visible);
    if (b->shared && used >= 0 && (size_t)used < n) {
        int per_gpu = (b->local_size + b->device_count - 1) / b->device_count;
        snprintf(buf + used, n - (size_t)used, ", shared by up to %d ranks", per_gpu);
    }
}
