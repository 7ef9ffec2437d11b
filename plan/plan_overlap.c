/* plan/plan_overlap.c — how much of ZeRO's per-unit traffic the compute
 * beside it hides (plan.h's plan_pass_exposed).
 *
 * A pass is two resources, the link and the compute, and units flowing
 * through them. Unit i's gather holds one of depth + 1 buffers, so it can
 * start only when unit i - depth - 1 has computed and released its own;
 * its compute waits for its gather; its reduce-scatter is queued after its
 * compute. The link runs one collective at a time, in the order issued.
 * Walking the units in order gives each event's time exactly, so a gather
 * slower than a unit's compute is exposed by the difference at every unit
 * after the first, and the first gather and the last reduce-scatter are
 * exposed whole: DeepSpeed's and FSDP's step, not "all of it hidden".
 */
#include "plan.h"

static double later(double a, double b)
{
    return a > b ? a : b;
}

double plan_pass_exposed(int n, double work, double gather, double reduce, int depth)
{
    if (n > PLAN_MAX_PASS_UNITS) /* equal units: the walk's steady state, scaled */
        return plan_pass_exposed(PLAN_MAX_PASS_UNITS, work, gather, reduce, depth) * n /
               PLAN_MAX_PASS_UNITS;
    double done_at[PLAN_MAX_PASS_UNITS]; /* when each unit's compute ends */
    double link = 0.0, done = 0.0;       /* the link free; the last compute done */
    int reduced = 0;                     /* reduce-scatters the link has taken */
    for (int i = 0; i < n; i++) {
        const int freed = i - depth - 1; /* the unit whose buffer this gather reuses */
        const double issue = freed >= 0 ? done_at[freed] : 0.0;
        for (; reduce > 0.0 && reduced < i && done_at[reduced] <= issue; reduced++)
            link = later(link, done_at[reduced]) + reduce; /* queued before this gather */
        double ready = issue;
        if (gather > 0.0)
            ready = link = later(link, issue) + gather;
        done_at[i] = done = later(done, ready) + work;
    }
    for (; reduce > 0.0 && reduced < n; reduced++)
        link = later(link, done_at[reduced]) + reduce;
    return later(link, done) - n * work;
}
