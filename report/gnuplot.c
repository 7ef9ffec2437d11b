/* report/gnuplot.c — see gnuplot.h. */
#define _GNU_SOURCE /* environ */
#include "gnuplot.h"

#include <errno.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

zt_status gnuplot_find(const char **program)
{
    static char found[4096];
    const char *path = getenv("PATH");
    for (const char *dir = path; dir && *dir;) {
        const char *end = strchr(dir, ':');
        const int len = end ? (int)(end - dir) : (int)strlen(dir);
        snprintf(found, sizeof found, "%.*s/gnuplot", len, len ? dir : ".");
        if (access(found, X_OK) == 0) {
            *program = found;
            return ZT_OK;
        }
        dir = end ? end + 1 : NULL;
    }
    return zt_error_set(ZT_ERR_IO,
                        "gnuplot not found on PATH; install gnuplot-nox (scripts/deps.sh)");
}

void gnuplot_quote(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

const char *gnuplot_colour(int i)
{
    static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                          "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                          "#bcbd22", "#17becf", "#393b79", "#ad494a"};
    const int n = (int)(sizeof palette / sizeof palette[0]);
    return palette[((i % n) + n) % n];
}

zt_status gnuplot_begin(struct gnuplot_job *job, const char *program, const char *png)
{
    memset(job, 0, sizeof *job);
    job->program = program;
    snprintf(job->png, sizeof job->png, "%s", png);
    snprintf(job->tmp_png, sizeof job->tmp_png, "%s.tmp.%ld", png, (long)getpid());
    job->script = tmpfile();
    if (!job->script)
        return zt_error_set(ZT_ERR_IO, "cannot create a temporary file for gnuplot: %s",
                            strerror(errno));
    FILE *f = job->script;
    fputs("set terminal pngcairo noenhanced size 1000,600 font 'DejaVu Sans,11'\n", f);
    fputs("set output ", f);
    gnuplot_quote(f, job->tmp_png);
    fputs("\nset encoding utf8\n"
          "set grid lc rgb '#dddddd' lt 1\n"
          "set border lc rgb '#555555'\n"
          "set key opaque box lc rgb '#cccccc'\n"
          "set title font ',14'\n",
          f);
    return ZT_OK;
}

void gnuplot_abort(struct gnuplot_job *job)
{
    if (job->script)
        fclose(job->script);
    job->script = NULL;
}

/* Runs the program with `in` as its standard input and `out` as its
 * standard output and error; *status gets waitpid's. */
static zt_status spawn_and_wait(const char *program, FILE *in, FILE *out, int *status)
{
    posix_spawn_file_actions_t actions;
    pid_t pid;
    char *const argv[] = {(char *)program, NULL};
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fileno(in), 0);
    posix_spawn_file_actions_adddup2(&actions, fileno(out), 1);
    posix_spawn_file_actions_adddup2(&actions, fileno(out), 2);
    const int err = posix_spawn(&pid, program, &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    if (err != 0)
        return zt_error_set(ZT_ERR_IO, "cannot run %s: %s", program, strerror(err));
    while (waitpid(pid, status, 0) < 0)
        if (errno != EINTR)
            return zt_error_set(ZT_ERR_IO, "waiting for %s: %s", program, strerror(errno));
    return ZT_OK;
}

/* What gnuplot printed (its last n - 1 bytes) in `text`. */
static void read_output(FILE *out, char *text, size_t n)
{
    long size = 0;
    if (fflush(out) == 0 && fseek(out, 0, SEEK_END) == 0)
        size = ftell(out);
    const long from = size > (long)n - 1 ? size - ((long)n - 1) : 0;
    size_t got = fseek(out, from, SEEK_SET) == 0 ? fread(text, 1, n - 1, out) : 0;
    while (got > 0 && text[got - 1] == '\n')
        got--;
    text[got] = '\0';
}

zt_status gnuplot_finish(struct gnuplot_job *job)
{
    FILE *out = tmpfile();
    int status = 0;
    zt_status st = ZT_OK;
    if (!out)
        st = zt_error_set(ZT_ERR_IO, "cannot create a temporary file for gnuplot: %s",
                          strerror(errno));
    if (st == ZT_OK && (fflush(job->script) != 0 || fseek(job->script, 0, SEEK_SET) != 0))
        st = zt_error_set(ZT_ERR_IO, "cannot write gnuplot's script: %s", strerror(errno));
    if (st == ZT_OK)
        st = spawn_and_wait(job->program, job->script, out, &status);
    if (st == ZT_OK && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        char said[2048];
        read_output(out, said, sizeof said);
        st = zt_error_set(ZT_ERR_IO, "gnuplot failed drawing %s (%s %d):\n%s", job->png,
                          WIFEXITED(status) ? "exit" : "signal",
                          WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), said);
    }
    if (st == ZT_OK && rename(job->tmp_png, job->png) != 0)
        st = zt_error_set(ZT_ERR_IO, "cannot rename %s to %s: %s", job->tmp_png, job->png,
                          strerror(errno));
    if (st != ZT_OK)
        unlink(job->tmp_png);
    if (out)
        fclose(out);
    gnuplot_abort(job);
    return st;
}
