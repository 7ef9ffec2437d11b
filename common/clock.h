/* common/clock.h — monotonic wall-clock seconds. */
#ifndef ZT_CLOCK_H
#define ZT_CLOCK_H

#include <time.h>

static inline double zt_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
