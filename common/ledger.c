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

const char *ledger_category_name(enum ledger_category c)
{
    ZT_ASSERT((int)c >= 0 && c < LEDGER_CATEGORY_COUNT);
    return category_names[c];
}

void ledger_init(struct ledger *l, int plan_only)
{
    memset(l, 0, sizeof *l);
    l->plan_only = plan_only;
}

void ledger_add(struct ledger *l, enum ledger_category c, uint64_t bytes)
{
    ZT_ASSERT((int)c >= 0 && c < LEDGER_CATEGORY_COUNT);
    l->current[c] += bytes;
    l->total_current += bytes;
    if (l->current[c] > l->peak[c])
        l->peak[c] = l->current[c];
    if (l->total_current > l->total_peak)
        l->total_peak = l->total_current;
}

void ledger_sub(struct ledger *l, enum ledger_category c, uint64_t bytes)
{
    ZT_ASSERT((int)c >= 0 && c < LEDGER_CATEGORY_COUNT);
    ZT_ASSERT(l->current[c] >= bytes);
    l->current[c] -= bytes;
    l->total_current -= bytes;
}

uint64_t ledger_rss_peak(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kib = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %llu kB", &kib) == 1)
            break;
    fclose(f);
    return (uint64_t)kib * 1024;
}
