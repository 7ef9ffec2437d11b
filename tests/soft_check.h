/* tests/soft_check.h — checks that count failures instead of stopping, for
 * the MPI suites whose ranks must all reach the end of a case together (a
 * rank that stopped at its first failed assertion would leave the others
 * waiting in the next collective). Each suite has its own counter (the
 * statics are per file); ASSERT_NO_BAD needs an int `rank` in scope. */
#ifndef ZT_TESTS_SOFT_CHECK_H
#define ZT_TESTS_SOFT_CHECK_H

#include <stdio.h>

#include "../common/status.h"

/* Failures are counted, and the first one described, until the end. */
static int bad;
static char first_bad[512];
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond) && bad++ == 0)                                                                 \
            snprintf(first_bad, sizeof first_bad, __VA_ARGS__);                                    \
    } while (0)
#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        zt_status st_ = (expr);                                                                    \
        CHECK(st_ == ZT_OK, "%s: %s: %s", #expr, zt_status_str(st_), zt_error_message());          \
    } while (0)
#define ASSERT_NO_BAD()                                                                            \
    ck_assert_msg(bad == 0, "rank %d: %d failures, first: %s", rank, bad, first_bad)

static inline void reset_bad(void)
{
    bad = 0;
    first_bad[0] = '\0';
}

#endif
