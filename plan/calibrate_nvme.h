/* plan/calibrate_nvme.h — how fast a folder's disk reads and writes the
 * state files of ZeRO-Infinity's NVMe offload (shard/nvme.c), for a
 * machine file's nvme bandwidths (calibrate.h).
 *
 * Every rank of the node streams a file of its own at once, as the
 * offload's ranks do: written whole in 8 MiB pieces and synced, then read
 * whole. The files bypass the page cache (O_DIRECT) where the file system
 * allows it: a step's state files are larger than the cache would keep,
 * so the device's own rate is what a step gets; elsewhere the written
 * pages are synced and dropped from the cache before the read. Each file
 * is unlinked as soon as it is open, so that nothing is left behind.
 */
#ifndef ZT_PLAN_CALIBRATE_NVME_H
#define ZT_PLAN_CALIBRATE_NVME_H

#include <stddef.h>

#include "../common/status.h"

/* One rank's file. */
struct calibrate_nvme_file {
    int fd;
    int direct; /* 1: opened with O_DIRECT */
    void *chunk;
    size_t bytes;
};

/* Creates (and unlinks) a file of `bytes` (a multiple of 8 MiB) in dir,
 * named for `rank`, with its blocks reserved. Errors: ZT_ERR_IO naming dir
 * and the reason (a missing folder, no space), ZT_ERR_NOMEM. */
zt_status calibrate_nvme_open(const char *dir, int rank, size_t bytes,
                              struct calibrate_nvme_file *f);

/* One pass over the whole file: written and synced (write 1), or read
 * (write 0). Errors: ZT_ERR_IO. */
zt_status calibrate_nvme_pass(struct calibrate_nvme_file *f, int write);

void calibrate_nvme_close(struct calibrate_nvme_file *f);

#endif
