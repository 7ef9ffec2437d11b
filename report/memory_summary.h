/* report/memory_summary.h — each rank's memory ledger as a table shaped
 * like torch.cuda.memory_summary() (`train --memory-summary`).
 *
 * Per category and for the total: bytes held now, the peak, bytes
 * allocated and freed since the start, the number of allocations and
 * frees, and the phase in which the peak was first reached ("step 1, micro
 * 0: backward of h.11"), all from the ledger (common/ledger.h), which
 * counts every buffer the run allocates. Rows are gathered to rank 0 and
 * printed rank by rank. Under `--dry-run` the ledgers are plans: the table
 * shows what one step would allocate, and when.
 */
#ifndef ZT_REPORT_MEMORY_SUMMARY_H
#define ZT_REPORT_MEMORY_SUMMARY_H

#include <stdio.h>

#include "../comm/comm.h"
#include "../common/ledger.h"
#include "../common/status.h"
#include "../worker/model_family.h"

/* Where a rank sits in the layout, for its table's title. */
struct memory_summary_place {
    int tp, pp, dp;
    int layout; /* 1: tensor or pipeline parallel (print the coordinates) */
};

/* Writes phase p as the summary names it into buf ("setup", "step 2, micro
 * 1: forward of h.3", "step 2: optimizer"), units named from `names`. */
void memory_summary_phase(const struct ledger_phase *p, const struct param_table *names, char *buf,
                          size_t n);

/* Collective over c: rank 0 prints every rank's table to f. `stage` is the
 * ZeRO stage, for the title. Errors: ZT_ERR_NOMEM, the communicator's. */
zt_status memory_summary_print(struct comm *c, const struct ledger *mine,
                               const struct memory_summary_place *place, int stage,
                               const struct param_table *names, FILE *f);

#endif
