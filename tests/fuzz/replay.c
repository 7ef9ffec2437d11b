/* tests/fuzz/replay.c — main for a fuzz target without libFuzzer: feeds
 * every file of each folder (or each file) named on the command line
 * through LLVMFuzzerTestOneInput, in name order, so that the ordinary
 * builds and their sanitizers replay the seed corpus and every finding
 * kept in a target's regression folder. A crash, a sanitizer report or a
 * message-less failure (fuzz_check) ends the process and fails the test. */
#define _DEFAULT_SOURCE /* DT_* */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *grown = realloc(buf, cap);
            if (!grown) {
                fprintf(stderr, "%s: out of memory\n", path);
                abort();
            }
            buf = grown;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        fprintf(stderr, "%s: read error\n", path);
        free(buf);
        return 1;
    }
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int skip_entry(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

/* Replays a folder's files (not its subfolders); counts them into *n. */
static int replay_folder(const char *dir, int *n)
{
    struct dirent **names;
    int count = scandir(dir, &names, skip_entry, by_name);
    if (count < 0) {
        perror(dir);
        return 1;
    }
    int failed = 0;
    for (int i = 0; i < count; i++) {
        char path[8192];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (!failed && stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
            failed = replay_file(path);
            ++*n;
        }
        free(names[i]);
    }
    free(names);
    return failed;
}

int main(int argc, char **argv)
{
    int n = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (S_ISDIR(sb.st_mode) ? replay_folder(argv[i], &n) : (n++, replay_file(argv[i])))
            return 1;
    }
    printf("%s: %d inputs replayed\n", argc > 0 ? argv[0] : "replay", n);
    return n > 0 ? 0 : 1;
}
