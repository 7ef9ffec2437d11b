/* common/status.c — status names and the thread-local last-error buffer. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int exit_code;
    const char *desc;
} status_table[] = {
#define ZT_STATUS_ROW(name, code, desc) {#name, code, desc},
    ZT_STATUS_LIST(ZT_STATUS_ROW)
#undef ZT_STATUS_ROW
};

static _Thread_local char error_message[2048];
static _Thread_local char error_trace[1024];

static int status_valid(zt_status s)
{
    return (int)s >= 0 && s < ZT_STATUS_COUNT;
}

const char *zt_status_str(zt_status s)
{
    return status_valid(s) ? status_table[s].name : "ZT_ERR_UNKNOWN";
}

const char *zt_status_desc(zt_status s)
{
    return status_valid(s) ? status_table[s].desc : "unknown status";
}

int zt_status_exit_code(zt_status s)
{
    return status_valid(s) ? status_table[s].exit_code : 1;
}

zt_status zt_error_set(zt_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, ap);
    va_end(ap);
    error_trace[0] = '\0';
    return s;
}

const char *zt_error_message(void)
{
    return error_message;
}

const char *zt_error_trace(void)
{
    return error_trace;
}

void zt_error_trace_push(const char *file, int line)
{
    size_t used = strlen(error_trace);
    if (used + 2 < sizeof error_trace)
        snprintf(error_trace + used, sizeof error_trace - used, "%s%s:%d", used ? " <- " : "", file,
                 line);
}

void zt_error_clear(void)
{
    error_message[0] = '\0';
    error_trace[0] = '\0';
}

void zt_assert_fail(const char *cond, const char *file, int line)
{
    fprintf(stderr, "zerotrain: internal error: assertion '%s' failed at %s:%d\n", cond, file,
            line);
    fflush(stderr);
    abort();
}
