/* report/csv_monitor.c — see csv_monitor.h.
 *
 * The events are a table: DeepSpeed's name, where the value comes from,
 * whether the row is an evaluation's (at the samples after its step) and
 * whether only fp16 runs log it. File names and headers are derived from
 * the names as DeepSpeed derives them, not written out a second time.
 */
#include "csv_monitor.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "log_trim.h"

struct csv_event {
    const char *name; /* DeepSpeed's event name */
    size_t value;     /* offsetof the double in struct step_record; unused for evaluations */
    int evaluation;   /* the row of an evaluation (its val_loss) */
    int fp16_only;    /* DeepSpeed logs it only with fp16 */
};

static const struct csv_event events[CSV_MONITOR_FILES] = {
    {"Train/Samples/train_loss", offsetof(struct step_record, loss), 0, 0},
    {"Train/Samples/lr", offsetof(struct step_record, lr), 0, 0},
    {"Train/Samples/loss_scale", offsetof(struct step_record, loss_scale), 0, 1},
    {"Train/Samples/grad_norm", offsetof(struct step_record, grad_norm), 0, 0},
    {"Train/Samples/tokens_per_s", offsetof(struct step_record, tokens_per_s), 0, 0},
    {"Eval/Samples/val_loss", 0, 1, 0},
};

/* output_path joined with job_name as os.path.join joins two parts ("."
 * for two empty ones: the current directory). */
static void log_dir(const struct zt_config *cfg, char *out, size_t n)
{
    const char *base = cfg->csv_monitor.output_path, *job = cfg->csv_monitor.job_name;
    const size_t len = strlen(base);
    if (len == 0)
        snprintf(out, n, "%s", job[0] ? job : ".");
    else if (job[0] == '/' || job[0] == '\0')
        snprintf(out, n, "%s", job[0] ? job : base);
    else
        snprintf(out, n, "%s%s%s", base, base[len - 1] == '/' ? "" : "/", job);
}

/* DIR/<name with '/' and ' ' as '_'>.csv */
static void file_path(const char *dir, const char *name, char *out, size_t n)
{
    char file[128];
    snprintf(file, sizeof file, "%s", name);
    for (char *c = file; *c; c++)
        if (*c == '/' || *c == ' ')
            *c = '_';
    snprintf(out, n, "%s/%s.csv", dir, file);
}

/* The sample count a row records (log_line_position): its first column. */
static long row_samples(const char *line)
{
    long samples;
    char comma;
    return sscanf(line, "%ld%c", &samples, &comma) == 2 && comma == ',' ? samples : -1;
}

/* The sample count of step `step`'s row of event e. */
static long row_position(const struct csv_monitor *m, const struct csv_event *e, long step)
{
    return (e->evaluation ? step : step - 1) * m->samples_per_step;
}

/* Opens event e's file: truncated for a new run; for a resumed one cut
 * back to the rows of steps up to resumed_at. The header goes into a file
 * that has none yet. */
static zt_status open_file(struct csv_monitor *m, const struct csv_event *e, const char *dir,
                           long resumed_at, FILE **out)
{
    char path[4352];
    file_path(dir, e->name, path, sizeof path);
    if (resumed_at > 0)
        ZT_TRY(
            log_trim_after(path, "csv_monitor file", row_position(m, e, resumed_at), row_samples));
    FILE *f = fopen(path, resumed_at > 0 ? "a" : "w");
    if (!f)
        return zt_error_set(ZT_ERR_IO, "csv_monitor: cannot write %s: %s", path, strerror(errno));
    if (ftell(f) == 0) {
        const char *header = strrchr(e->name, '/');
        fprintf(f, "step,%s\r\n", header ? header + 1 : e->name);
        fflush(f);
    }
    *out = f;
    return ZT_OK;
}

zt_status csv_monitor_open(struct csv_monitor *m, const struct zt_config *cfg,
                           long samples_per_step, long resumed_at)
{
    memset(m, 0, sizeof *m);
    if (!cfg->csv_monitor.enabled)
        return ZT_OK;
    char dir[4096];
    log_dir(cfg, dir, sizeof dir);
    zt_status st = zt_mkdir_p(dir);
    if (st != ZT_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", zt_error_message()); /* the message is rewritten */
        return zt_error_set(st, "csv_monitor: %s", why);
    }
    m->samples_per_step = samples_per_step;
    for (int k = 0; k < CSV_MONITOR_FILES && st == ZT_OK; k++)
        if (!events[k].fp16_only || cfg->fp16.enabled)
            st = open_file(m, &events[k], dir, resumed_at, &m->files[k]);
    if (st != ZT_OK)
        csv_monitor_close(m);
    return st;
}

/* v as Python's repr writes a float: the fewest significant digits that
 * read back as v, positional for decimal exponents -4 to 15 (with ".0" on
 * an integral value), else scientific with a two-digit exponent at least;
 * nan, inf, -inf. */
static void python_float(double v, char *out, size_t n)
{
    if (!isfinite(v)) {
        snprintf(out, n, "%s", isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
        return;
    }
    char sci[40];
    int digits = 1;
    for (; digits < 17; digits++) {
        snprintf(sci, sizeof sci, "%.*e", digits - 1, v);
        if (strtod(sci, NULL) == v)
            break;
    }
    snprintf(sci, sizeof sci, "%.*e", digits - 1, v);
    const int exponent = atoi(strchr(sci, 'e') + 1);
    if (exponent < -4 || exponent >= 16) {
        snprintf(out, n, "%s", sci);
        return;
    }
    const int decimals = digits - 1 - exponent;
    snprintf(out, n, "%.*f", decimals > 0 ? decimals : 0, v);
    if (!strchr(out, '.'))
        snprintf(out + strlen(out), n - strlen(out), ".0");
}

/* One row, ended as Python's csv writer ends it (\r\n). */
static void write_row(FILE *f, long samples, double value)
{
    char text[40];
    python_float(value, text, sizeof text);
    fprintf(f, "%ld,%s\r\n", samples, text);
    fflush(f);
}

void csv_monitor_write_step(struct csv_monitor *m, const struct step_record *r)
{
    for (int k = 0; k < CSV_MONITOR_FILES; k++) {
        const struct csv_event *e = &events[k];
        if (!m->files[k] || e->evaluation)
            continue;
        const double value = *(const double *)((const char *)r + e->value);
        write_row(m->files[k], row_position(m, e, r->step), value);
    }
}

void csv_monitor_write_eval(struct csv_monitor *m, long step, double val_loss)
{
    for (int k = 0; k < CSV_MONITOR_FILES; k++)
        if (m->files[k] && events[k].evaluation)
            write_row(m->files[k], row_position(m, &events[k], step), val_loss);
}

void csv_monitor_close(struct csv_monitor *m)
{
    for (int k = 0; k < CSV_MONITOR_FILES; k++)
        if (m->files[k])
            fclose(m->files[k]);
    memset(m, 0, sizeof *m);
}
