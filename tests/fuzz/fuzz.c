/* tests/fuzz/fuzz.c — see fuzz.h. The scratch folder is the one piece of
 * state a target keeps between inputs: libFuzzer owns main, so it lives in
 * statics, made on first use and removed by an atexit handler. */
#define _DEFAULT_SOURCE /* mkdtemp, DT_REG */
#include "fuzz.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char scratch[4096];
static char file_path[4096 + 256];

static void scratch_remove(void)
{
    DIR *d = opendir(scratch);
    if (!d)
        return;
    struct dirent *e;
    char path[sizeof scratch + 256];
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", scratch, e->d_name);
            unlink(path);
        }
    closedir(d);
    rmdir(scratch);
}

const char *fuzz_dir(void)
{
    if (scratch[0])
        return scratch;
    const char *t = getenv("ZT_TEST_TMPDIR");
    if (!t || !*t)
        t = getenv("TMPDIR");
    snprintf(scratch, sizeof scratch, "%s/zt-fuzz-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(scratch)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(scratch_remove);
    return scratch;
}

const char *fuzz_write(const char *name, const uint8_t *data, size_t size)
{
    snprintf(file_path, sizeof file_path, "%s/%s", fuzz_dir(), name);
    int fd = open(file_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror(file_path);
        abort();
    }
    while (size > 0) {
        ssize_t n = write(fd, data, size);
        if (n <= 0) {
            perror(file_path);
            abort();
        }
        data += n;
        size -= (size_t)n;
    }
    close(fd);
    return file_path;
}

size_t fuzz_split(const uint8_t *data, size_t size, struct fuzz_piece *pieces, size_t max)
{
    const size_t sep = sizeof FUZZ_SEPARATOR - 1;
    size_t n = 0, start = 0;
    for (size_t i = 0; n + 1 < max && i + sep <= size; i++)
        if (memcmp(data + i, FUZZ_SEPARATOR, sep) == 0) {
            pieces[n++] = (struct fuzz_piece){data + start, i - start};
            start = i + sep;
            i = start - 1;
        }
    pieces[n++] = (struct fuzz_piece){data + start, size - start};
    return n;
}

void fuzz_begin(void)
{
    zt_error_clear();
}

zt_status fuzz_check(zt_status s)
{
    if (s != ZT_OK && zt_error_message()[0] == '\0') {
        fprintf(stderr, "fuzz: %s without a message\n", zt_status_str(s));
        abort();
    }
    if (s != ZT_OK && getenv("ZT_FUZZ_VERBOSE")) /* to see why a seed is refused */
        fprintf(stderr, "refused: %s\n", zt_error_message());
    return s;
}
