/* tests/fuzz/fuzz_machine.c — a machine file of the planner
 * (configs/machines/NAME.yaml): every key, its type and range. A file that
 * loads is written back and must load to the same values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "../../config/machine.h"

static int same_link(const struct machine_link *a, const struct machine_link *b)
{
    return a->bandwidth == b->bandwidth && a->latency == b->latency;
}

static int same_machine(const struct machine *a, const struct machine *b)
{
    return !strcmp(a->name, b->name) && a->device_memory == b->device_memory &&
           a->devices_per_node == b->devices_per_node && a->cores == b->cores &&
           !memcmp(a->matmul_flops, b->matmul_flops, sizeof a->matmul_flops) &&
           a->memory_bandwidth == b->memory_bandwidth &&
           same_link(&a->intra_node, &b->intra_node) && same_link(&a->inter_node, &b->inter_node);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct machine m;
    fuzz_begin();
    if (fuzz_check(machine_load(fuzz_write("machine.yaml", data, size), &m)) != ZT_OK)
        return 0;
    char again_path[4200];
    snprintf(again_path, sizeof again_path, "%s/again.yaml", fuzz_dir());
    FILE *f = fopen(again_path, "w");
    if (!f || machine_write(&m, "written back", f) != ZT_OK || fclose(f) != 0)
        abort();
    struct machine again;
    if (machine_load(again_path, &again) != ZT_OK) {
        fprintf(stderr, "fuzz_machine: a written machine does not load: %s\n", zt_error_message());
        abort();
    }
    if (!same_machine(&again, &m)) {
        fprintf(stderr, "fuzz_machine: a written machine loads to other values\n");
        abort();
    }
    return 0;
}
