/* report/memory_timeline.h — every change of a rank's memory ledger
 * over chosen steps, with the phase it happened in (`train
 * --memory-timeline FILE`).
 *
 * The ledger (common/ledger.h) already knows the phase (setup, forward or
 * backward of unit u, reduction, optimizer, checkpoint, evaluation; step,
 * micro step). A timeline is the ledger's sink: it keeps the events of
 * steps [first, last] (step 0 is the setup before the first step) in
 * memory, each with the ledger's per-category bytes after it, and at the
 * end of training gathers every rank's events to rank 0, which writes them
 * as JSON lines, rank after rank:
 *
 *   {"rank": 0, "seq": 17, "time": 0.012345, "step": 1, "micro_step": 0,
 *    "phase": "backward", "unit": 3, "unit_name": "h.2",
 *    "category": "gathered_params", "bytes": -1234,
 *    "current": {"params": ..., ...}, "total": ...}
 *
 * `time` is seconds since the timeline was attached (the ledger's start),
 * `bytes` the signed change. When the first recorded event finds memory
 * already held (a range that starts after setup) a "snapshot" line comes
 * first: phase "snapshot", category null, bytes 0, and `current` the state
 * before that event. So the running sum of `bytes` per category, started
 * from the snapshot (or from zero), equals `current` at every line.
 *
 * Recording costs one append per allocation or free. It stops after
 * MEMORY_TIMELINE_MAX_EVENTS events of a rank (or when memory for more runs
 * out); the rank's events are then followed by the line
 * {"rank": R, "truncated": true, "events": N}.
 */
#ifndef ZT_REPORT_MEMORY_TIMELINE_H
#define ZT_REPORT_MEMORY_TIMELINE_H

#include "../comm/comm.h"
#include "../common/ledger.h"
#include "../common/status.h"
#include "../worker/model_family.h"

#define MEMORY_TIMELINE_MAX_EVENTS (1L << 18)

struct memory_timeline;

/* Parses `FIRST[-LAST]` (steps, 0 = setup) into [*first, *last]. Errors:
 * ZT_ERR_USAGE naming the text. */
zt_status memory_timeline_parse_steps(const char *spec, long *first, long *last);

/* A timeline of steps [first, last], recording once attached. Errors:
 * ZT_ERR_NOMEM. */
zt_status memory_timeline_create(long first, long last, struct memory_timeline **out);
/* Makes the timeline l's sink: from now on l's changes are its events. */
void memory_timeline_attach(struct memory_timeline *t, struct ledger *l);
/* Collective over c: detaches from l, gathers every rank's events to rank
 * 0, which writes them into `path` (atomically) naming units from
 * `names`. Errors: ZT_ERR_IO (rank 0 cannot write), ZT_ERR_NOMEM, and the
 * communicator's. */
zt_status memory_timeline_write(struct memory_timeline *t, struct ledger *l, struct comm *c,
                                const struct param_table *names, const char *path);
void memory_timeline_destroy(struct memory_timeline *t);

#endif
