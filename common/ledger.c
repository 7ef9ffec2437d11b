/* common/ledger.c — see ledger.h. */
#include "ledger.h"

#include <stdio.h>
#include <string.h>

#include "status.h"

static const char *const category_names[] = {
#define ZT_LEDGER_NAME(id, name) name,
    ZT_LEDGER_CATEGORIES(ZT_LEDGER_NAME)
#undef ZT_LEDGER_NAME
};

static const char *const phase_names[] = {
#define ZT_LEDGER_PHASE_NAME(id, name) name,
    ZT_LEDGER_PHASES(ZT_LEDGER_PHASE_NAME)
#undef ZT_LEDGER_PHASE_NAME
};

const char *ledger_phase_name(enum ledger_phase_kind k)
{
    ZT_ASSERT((int)k >= 0 && k < LEDGER_PHASE_COUNT);
    return phase_names[k];
}

const char *ledger_category_name(enum ledger_category c)
{
    ZT_ASSERT((int)c >= 0 && c < LEDGER_CATEGORY_COUNT);
    return category_names[c];
}

void ledger_init(struct ledger *l, int plan_only)
{
    memset(l, 0, sizeof *l);
    l->plan_only = plan_only;
    l->phase = (struct ledger_phase){.kind = LEDGER_PHASE_SETUP, .unit = -1};
    l->total_peak_phase = l->phase;
    for (int c = 0; c < LEDGER_CATEGORY_COUNT; c++)
        l->peak_phase[c] = l->phase;
}

static int phase_is_outer(enum ledger_phase_kind k)
{
    return k == LEDGER_PHASE_SETUP || k == LEDGER_PHASE_CHECKPOINT ||
           k == LEDGER_PHASE_EVALUATION || k == LEDGER_PHASE_LOAD;
}

static void phase_moved(const struct ledger *l)
{
    if (l->watch)
        l->watch->moved(l->watch->ctx, &l->phase);
}

void ledger_set_step(struct ledger *l, long step, int micro_step)
{
    l->phase = (struct ledger_phase){
        .kind = LEDGER_PHASE_FORWARD, .unit = -1, .step = step, .micro_step = micro_step};
    phase_moved(l);
}

void ledger_enter(struct ledger *l, enum ledger_phase_kind k, int unit)
{
    ZT_ASSERT((int)k >= 0 && k < LEDGER_PHASE_COUNT);
    if (!phase_is_outer(l->phase.kind) || phase_is_outer(k))
        l->phase.kind = k;
    l->phase.unit = unit;
    phase_moved(l);
}

void ledger_enter_outer(struct ledger *l, enum ledger_phase_kind k)
{
    ZT_ASSERT((int)k >= 0 && k < LEDGER_PHASE_COUNT);
    l->phase.kind = k;
    l->phase.unit = -1;
    phase_moved(l);
}

void ledger_add(struct ledger *l, enum ledger_category c, uint64_t bytes)
{
    ZT_ASSERT((int)c >= 0 && c < LEDGER_CATEGORY_COUNT);
    l->current[c] += bytes;
    l->total_current += bytes;
    l->allocs[c]++;
    l->allocated[c] += bytes;
    if (l->current[c] > l->peak[c]) {
        l->peak[c] = l->current[c];
        l->peak_phase[c] = l->phase;
    }
    if (l->total_current > l->total_peak) {
        l->total_peak = l->total_current;
        l->total_peak_phase = l->phase;
    }
    if (l->sink)
        l->sink->record(l->sink->ctx, l, c, (int64_t)bytes);
}

void ledger_sub(struct ledger *l, enum ledger_category c, uint64_t bytes)
{
    ZT_ASSERT((int)c >= 0 && c < LEDGER_CATEGORY_COUNT);
    ZT_ASSERT(l->current[c] >= bytes);
    l->current[c] -= bytes;
    l->total_current -= bytes;
    l->frees[c]++;
    l->freed[c] += bytes;
    if (l->sink)
        l->sink->record(l->sink->ctx, l, c, -(int64_t)bytes);
}

/* A "Key:  N kB" line of /proc/self/status in bytes; 0 if unknown. */
static uint64_t status_bytes(const char *format)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kib = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, format, &kib) == 1)
            break;
    fclose(f);
    return (uint64_t)kib * 1024;
}

uint64_t ledger_rss_peak(void)
{
    return status_bytes("VmHWM: %llu kB");
}

uint64_t ledger_rss_now(void)
{
    return status_bytes("VmRSS: %llu kB");
}
