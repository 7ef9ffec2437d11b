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
 *
 * secondary_params is ZeRO++ hpZ's second copy of the stage-3 parameter
 * shards, partitioned within a node (shard/shard.h); zero without hpZ.
 * load is the host staging the initial weights pass through on their way
 * into the model states (drawn from the seed, or read from a weights
 * file): a bounded window, whatever the model's size; zero after setup.
 *
 * Phases. A peak is only useful when it says *when* it happened: the
 * ledger knows what the rank is doing (the phase: setup, the forward or
 * backward of unit u, the reduction, the optimizer step, a checkpoint, an
 * evaluation, loading weights, at step s and micro step m) and remembers the phase in which
 * each category and the total reached their peak. The coordinator sets the
 * step and the outer phases, the ZeRO engine the unit a pass is at. An
 * outer phase (setup, checkpoint, evaluation, load) is not replaced by the inner
 * ones the engine's hooks enter while it lasts (an evaluation's forward is
 * still the evaluation): they only move its unit.
 *
 * Events. Every change can also go to a sink (the memory timeline,
 * report/memory_timeline.h), called after the change with the
 * category and the signed number of bytes; every phase change to a phase
 * watcher (the collective watchdog, comm/flight.h, which says what a rank
 * that is in no call is doing).
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
    X(LEDGER_SECONDARY_PARAMS, "secondary_params")                                                 \
    X(LEDGER_ACTIVATIONS, "activations")                                                           \
    X(LEDGER_COMM_BUFFERS, "comm_buffers")                                                         \
    X(LEDGER_WORKSPACE, "workspace")                                                               \
    X(LEDGER_LOAD, "load")

enum ledger_category {
#define ZT_LEDGER_ENUM(id, name) id,
    ZT_LEDGER_CATEGORIES(ZT_LEDGER_ENUM)
#undef ZT_LEDGER_ENUM
        LEDGER_CATEGORY_COUNT
};

#define ZT_LEDGER_PHASES(X)                                                                        \
    X(LEDGER_PHASE_SETUP, "setup")                                                                 \
    X(LEDGER_PHASE_FORWARD, "forward")                                                             \
    X(LEDGER_PHASE_BACKWARD, "backward")                                                           \
    X(LEDGER_PHASE_REDUCTION, "reduction")                                                         \
    X(LEDGER_PHASE_OPTIMIZER, "optimizer")                                                         \
    X(LEDGER_PHASE_CHECKPOINT, "checkpoint")                                                       \
    X(LEDGER_PHASE_EVALUATION, "evaluation")                                                       \
    X(LEDGER_PHASE_LOAD, "load")

enum ledger_phase_kind {
#define ZT_LEDGER_PHASE_ENUM(id, name) id,
    ZT_LEDGER_PHASES(ZT_LEDGER_PHASE_ENUM)
#undef ZT_LEDGER_PHASE_ENUM
        LEDGER_PHASE_COUNT
};

/* Where a rank is in its run. */
struct ledger_phase {
    enum ledger_phase_kind kind;
    int unit;       /* the unit the pass is at, -1 for none */
    long step;      /* 1-based optimizer step; 0 before the first */
    int micro_step; /* within the step, 0-based */
};

struct ledger;

/* Receives every change after the ledger applied it. */
struct ledger_sink {
    void (*record)(void *ctx, const struct ledger *l, enum ledger_category c, int64_t bytes);
    void *ctx;
};

/* Receives every phase change, after it. */
struct ledger_phase_watch {
    void (*moved)(void *ctx, const struct ledger_phase *now);
    void *ctx;
};

struct ledger {
    int plan_only; /* 1: record sizes, allocate nothing */
    uint64_t current[LEDGER_CATEGORY_COUNT];
    uint64_t peak[LEDGER_CATEGORY_COUNT];
    uint64_t total_current, total_peak;
    /* Counts since init: allocations and frees, and their bytes. */
    uint64_t allocs[LEDGER_CATEGORY_COUNT], frees[LEDGER_CATEGORY_COUNT];
    uint64_t allocated[LEDGER_CATEGORY_COUNT], freed[LEDGER_CATEGORY_COUNT];
    struct ledger_phase phase;                             /* now */
    struct ledger_phase peak_phase[LEDGER_CATEGORY_COUNT]; /* when each peak was first reached */
    struct ledger_phase total_peak_phase;
    const struct ledger_sink *sink;         /* not owned; NULL: none */
    const struct ledger_phase_watch *watch; /* not owned; NULL: none */
};

/* Name of a category as printed in reports ("optimizer_states"). */
const char *ledger_category_name(enum ledger_category c);

/* Name of a phase as printed ("backward"). */
const char *ledger_phase_name(enum ledger_phase_kind k);

/* Starts empty, in the setup phase of step 0, with no sink. */
void ledger_init(struct ledger *l, int plan_only);
/* Records `bytes` more in category c, updating the peaks. */
void ledger_add(struct ledger *l, enum ledger_category c, uint64_t bytes);
/* Records `bytes` released from category c (must not exceed current). */
void ledger_sub(struct ledger *l, enum ledger_category c, uint64_t bytes);

/* Micro step m of step `step` begins: the forward, at no unit yet. */
void ledger_set_step(struct ledger *l, long step, int micro_step);
/* Enters phase k at `unit` (-1: none). An inner phase (forward, backward,
 * reduction, optimizer) entered during an outer one (setup, checkpoint,
 * evaluation, load) only moves the unit. */
void ledger_enter(struct ledger *l, enum ledger_phase_kind k, int unit);
/* Leaves any phase for outer phase k (setup, checkpoint, evaluation, load) or
 * for an inner one: the coordinator's transitions. */
void ledger_enter_outer(struct ledger *l, enum ledger_phase_kind k);

/* Peak resident set size of this process in bytes (VmHWM), 0 if unknown. */
uint64_t ledger_rss_peak(void);
/* Resident set size of this process now (VmRSS), 0 if unknown. */
uint64_t ledger_rss_now(void);

#endif
