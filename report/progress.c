/* report/progress.c — see progress.h. */
#include "progress.h"

#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

void progress_init(struct progress *p, FILE *out, enum progress_mode mode)
{
    p->out = out;
    if (mode == PROGRESS_AUTO)
        p->tty = isatty(fileno(out)) && !getenv("OMPI_COMM_WORLD_SIZE");
    else
        p->tty = mode == PROGRESS_ALWAYS;
    p->drawn = 0;
}

static void clear_line(struct progress *p)
{
    if (p->drawn) {
        fputs("\r\033[K", p->out);
        p->drawn = 0;
    }
}

void progress_log(struct progress *p, const char *fmt, ...)
{
    va_list ap;
    clear_line(p);
    va_start(ap, fmt);
    vfprintf(p->out, fmt, ap);
    va_end(ap);
    fputc('\n', p->out);
    fflush(p->out);
}

void progress_format_duration(double seconds, char *buf, size_t n)
{
    long s = seconds > 0 ? (long)(seconds + 0.5) : 0;
    if (s >= 3600)
        snprintf(buf, n, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
    else if (s >= 60)
        snprintf(buf, n, "%ldm%02lds", s / 60, s % 60);
    else
        snprintf(buf, n, "%lds", s);
}

void progress_update(struct progress *p, long step, long total, double seconds_left)
{
    char eta[32];
    if (!p->tty)
        return;
    progress_format_duration(seconds_left, eta, sizeof eta);
    clear_line(p);
    fprintf(p->out, "step %ld/%ld  ETA %s", step, total, eta);
    fflush(p->out);
    p->drawn = 1;
}

void progress_finish(struct progress *p)
{
    clear_line(p);
    fflush(p->out);
}
