/* common/ledger.h — the memory ledger: every counted byte of a rank.
 *
 * In the spirit of Redis' zmalloc, every allocation of model states,
 * activations, gathered parameters, communication staging and workspace
 * goes through a device allocator that records here what it really got
 * (worker/device.h). The ledger keeps current and peak bytes per category
 * and the peak of their total, so the memory report is measured, not
 * computed from a formula.
 *
 * A ledger in plan mode is the same bookkeeping with no memory behind it:
 * running the real allocation plan against it gives what that plan would
 * need (the single-device baseline, `train --dry-run`).
 */
#ifndef ZT_LEDGER_H
#define ZT_LEDGER_H

#include <stddef.h>
#include <stdint.h>

#define ZT_LEDGER_CATEGORIES(X)                                                                    \
    X(LEDGER_PARAMS, "params")                                                                     \
    X(LEDGER_GRADS, "grads")                                                                       \
    X(LEDGER_MASTER_PARAMS, "master_params")                                                       \
    X(LEDGER_OPTIMIZER_STATES, "optimizer_states")                                                 \
    X(LEDGER_GATHERED_PARAMS, "gathered_params")                                                   \
    X(LEDGER_ACTIVATIONS, "activations")                                                           \
    X(LEDGER_COMM_BUFFERS, "comm_buffers")                                                         \
    X(LEDGER_WORKSPACE, "workspace")

enum ledger_category {
#define ZT_LEDGER_ENUM(id, name) id,
    ZT_LEDGER_CATEGORIES(ZT_LEDGER_ENUM)
#undef ZT_LEDGER_ENUM
        LEDGER_CATEGORY_COUNT
};

struct ledger {
    int plan_only; /* 1: record sizes, allocate nothing */
    uint64_t current[LEDGER_CATEGORY_COUNT];
    uint64_t peak[LEDGER_CATEGORY_COUNT];
    uint64_t total_current, total_peak;
};

/* Name of a category as printed in reports ("optimizer_states"). */
const char *ledger_category_name(enum ledger_category c);

void ledger_init(struct ledger *l, int plan_only);
/* Records `bytes` more in category c, updating the peaks. */
void ledger_add(struct ledger *l, enum ledger_category c, uint64_t bytes);
/* Records `bytes` released from category c (must not exceed current). */
void ledger_sub(struct ledger *l, enum ledger_category c, uint64_t bytes);

/* Peak resident set size of this process in bytes (VmHWM), 0 if unknown. */
uint64_t ledger_rss_peak(void);

#endif
