/* plan/plan_share.c — how the ranks of a node share its devices and
 * cores (plan.h): what the cost model (plan_cost.c) and the GEMM rates
 * (plan_gemm.c) both divide by. */
#include "plan.h"

double plan_device_share(const struct machine *m, int per_node)
{
    const double share = (double)per_node / m->devices_per_node;
    return share > 1.0 ? share : 1.0;
}

double plan_core_share(const struct machine *m, int per_node)
{
    return m->cores > 0 && per_node > m->cores ? (double)m->cores / per_node : 1.0;
}
