/* report/metrics.c — see metrics.h.
 *
 * Resuming keeps the history: the lines of steps up to the checkpoint's
 * stay as they were and only those past it are dropped (log_trim.h). */
#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log_trim.h"

/* The step a line of ours records ("{\"step\": N, ..."), or -1 for any
 * other line (log_line_position). */
static long line_step(const char *line)
{
    long step;
    return sscanf(line, "{\"step\": %ld", &step) == 1 ? step : -1;
}

zt_status metrics_open(const char *path, FILE **out)
{
    return metrics_open_run(path, 0, out);
}

zt_status metrics_open_run(const char *path, long resumed_at, FILE **out)
{
    if (resumed_at > 0)
        ZT_TRY(log_trim_after(path, "metrics file", resumed_at, line_step));
    *out = fopen(path, resumed_at > 0 ? "a" : "w");
    if (!*out)
        return zt_error_set(ZT_ERR_IO, "cannot write metrics file %s: %s", path, strerror(errno));
    return ZT_OK;
}

/* A JSON number, or null for what JSON has no number for (the NaN loss and
 * infinite norm of a step skipped on overflow). */
static const char *num(double v, const char *fmt, char *buf, size_t n)
{
    if (!isfinite(v))
        return "null";
    snprintf(buf, n, fmt, v);
    return buf;
}

/* Wall-clock Unix seconds, to the microsecond: when the line was written. */
static double unix_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void metrics_write_step(FILE *f, const struct step_record *r)
{
    char b[8][40];
    fprintf(f,
            "{\"step\": %ld, \"time\": %.6f, \"loss\": %s, \"lr\": %s, \"grad_norm\": %s, "
            "\"step_ms\": %s, \"tokens_per_s\": %s, \"gflops\": %s, \"loss_scale\": %s, "
            "\"skipped\": %s, \"comm_bytes\": {",
            r->step, unix_time(), num(r->loss, "%.9g", b[0], sizeof b[0]),
            num(r->lr, "%.9g", b[1], sizeof b[1]), num(r->grad_norm, "%.9g", b[2], sizeof b[2]),
            num(r->step_ms, "%.4f", b[3], sizeof b[3]),
            num(r->tokens_per_s, "%.2f", b[4], sizeof b[4]),
            num(r->gflops, "%.4f", b[5], sizeof b[5]),
            num(r->loss_scale, "%.9g", b[6], sizeof b[6]), r->skipped ? "true" : "false");
    for (int k = 0; k < COMM_KIND_COUNT; k++)
        fprintf(f, "%s\"%s\": %llu", k ? ", " : "", comm_kind_name((enum comm_kind)k),
                (unsigned long long)r->comm.bytes[k]);
    for (int l = 0; l < COMM_LINK_COUNT; l++) {
        fprintf(f, "}, \"comm_bytes_%s\": {", comm_link_name((enum comm_link)l));
        for (int k = 0; k < COMM_KIND_COUNT; k++)
            fprintf(f, "%s\"%s\": %llu", k ? ", " : "", comm_kind_name((enum comm_kind)k),
                    (unsigned long long)r->comm.link_bytes[l][k]);
    }
    fprintf(f, "}, \"comm_calls\": {");
    for (int k = 0; k < COMM_KIND_COUNT; k++)
        fprintf(f, "%s\"%s\": %llu", k ? ", " : "", comm_kind_name((enum comm_kind)k),
                (unsigned long long)r->comm.calls[k]);
    fprintf(f, "}, \"comm_wait_ms\": %s",
            num(r->comm.wait_seconds * 1e3, "%.4f", b[7], sizeof b[7]));
    if (r->epoch > 0)
        fprintf(f, ", \"epoch\": %.6g", r->epoch);
    static const char *const axes[3] = {"tp", "pp", "dp"};
    fprintf(f, ", \"comm_bytes_by_axis\": {");
    for (int k = 0; k < 3; k++)
        fprintf(f, "%s\"%s\": %llu", k ? ", " : "", axes[k], (unsigned long long)r->axis[k].bytes);
    fprintf(f, "}, \"comm_wait_ms_by_axis\": {");
    for (int k = 0; k < 3; k++)
        fprintf(f, "%s\"%s\": %s", k ? ", " : "", axes[k],
                num(r->axis[k].wait_seconds * 1e3, "%.4f", b[0], sizeof b[0]));
    fprintf(f, "}");
    static const char *const reasons[] = {[STEP_SKIP_NONE] = NULL,
                                          [STEP_SKIP_OVERFLOW] = "overflow",
                                          [STEP_SKIP_MASKED] = "masked",
                                          [STEP_SKIP_NONFINITE] = "nonfinite"};
    if (r->skipped && reasons[r->skip_reason])
        fprintf(f, ", \"skip_reason\": \"%s\"", reasons[r->skip_reason]);
    if (r->nonfinite_skips >= 0)
        fprintf(f, ", \"nonfinite_skips\": %ld", r->nonfinite_skips);
    if (r->busy_seconds > 0.0)
        fprintf(
            f, ", \"bubble\": %s",
            num((r->span_seconds - r->busy_seconds) / r->busy_seconds, "%.4f", b[0], sizeof b[0]));
    fprintf(f, "}\n");
    fflush(f);
}

void metrics_write_eval(FILE *f, long step, double val_loss, uint64_t tokens)
{
    char b[40];
    fprintf(f, "{\"step\": %ld, \"time\": %.6f, \"val_loss\": %s, \"val_tokens\": %llu}\n", step,
            unix_time(), num(val_loss, "%.9g", b, sizeof b), (unsigned long long)tokens);
    fflush(f);
}
