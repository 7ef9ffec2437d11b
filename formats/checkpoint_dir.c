/* formats/checkpoint_dir.c — checkpoint folders: preparing a step
 * folder, publishing it through DIR/latest, finding the latest one,
 * rotating old ones away, and validating one completely.
 *
 * The invariant everything here keeps: DIR/latest, when it exists, names a
 * complete checkpoint. Each file is written whole or not at all, latest is
 * replaced only after the step folder checks complete, rotation never
 * removes what latest names, and a removal starts with meta.json so that a
 * folder half removed reads as incomplete rather than as a checkpoint with
 * missing shards. Only names of the exact form step-NNNNNNNN (the form
 * ckpt_step_dirname makes) are ever removed, so nothing else a user keeps
 * in DIR is at risk.
 *
 * Two depths of checking: *complete* (meta.json reads strictly and every
 * shard file is there with its size: a few stat calls, what publishing,
 * finding and rotating need) and *valid* (that plus every header and every
 * byte checksummed: what loading needs, once).
 */
#include "checkpoint.h"
#include "checkpoint_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "../common/atomic_file.h"

#define PATH_BYTES   4096
#define STEP_DIGITS  8  /* at least: "step-00000120" */
#define LATEST_BYTES 64 /* a longer DIR/latest is not ours */

/* ---- names ---- */

void ckpt_step_dirname(int64_t step, char *buf, size_t n)
{
    ZT_ASSERT(step >= 0 && n >= CKPT_STEP_NAME_MAX);
    snprintf(buf, n, "step-%0*" PRId64, STEP_DIGITS, step);
}

/* 1 and *step when `name` is exactly what ckpt_step_dirname makes. */
static int parse_step_name(const char *name, int64_t *step)
{
    if (strncmp(name, "step-", 5) != 0)
        return 0;
    const char *d = name + 5;
    size_t n = strlen(d);
    if (n < STEP_DIGITS || n > 18 || strspn(d, "0123456789") != n)
        return 0;
    int64_t v = 0;
    for (size_t k = 0; k < n; k++)
        v = v * 10 + (d[k] - '0');
    char again[CKPT_STEP_NAME_MAX];
    ckpt_step_dirname(v, again, sizeof again);
    if (strcmp(again, name) != 0)
        return 0;
    *step = v;
    return 1;
}

static zt_status join(char *buf, size_t n, const char *dir, const char *name)
{
    int len = snprintf(buf, n, "%s/%s", dir, name);
    if (len < 0 || (size_t)len >= n)
        return zt_error_set(ZT_ERR_USAGE, "%s/%s: path longer than %zu bytes", dir, name,
                            n ? n - 1 : 0);
    return ZT_OK;
}

zt_status ckpt_shard_path(const char *step_dir, int rank, char *buf, size_t n)
{
    ZT_ASSERT(rank >= 0);
    char name[32];
    snprintf(name, sizeof name, "rank-%05d.bin", rank);
    return join(buf, n, step_dir, name);
}

zt_status ckpt_meta_path(const char *step_dir, char *buf, size_t n)
{
    return join(buf, n, step_dir, CKPT_META_NAME);
}

/* ---- folders ---- */

/* mkdir -p: every missing component of dir, then a check that it is a
 * folder. */
static zt_status make_dirs(const char *dir)
{
    char p[PATH_BYTES];
    if (strlen(dir) >= sizeof p || !*dir)
        return zt_error_set(ZT_ERR_USAGE, "%s: not a usable folder name", dir);
    strcpy(p, dir);
    for (char *c = p + 1; *c; c++) {
        if (*c != '/')
            continue;
        *c = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return zt_error_set(ZT_ERR_IO, "%s: cannot create folder %s: %s", dir, p,
                                strerror(errno));
        *c = '/';
    }
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
        return zt_error_set(ZT_ERR_IO, "%s: cannot create folder: %s", dir, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return zt_error_set(ZT_ERR_IO, "%s: not a folder", dir);
    return ZT_OK;
}

/* fsync of a folder, so that the entries just made in it survive a crash;
 * filesystems that cannot (EINVAL) have nothing more to give. */
static zt_status sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY);
    zt_status st = ZT_OK;
    if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL))
        st = zt_error_set(ZT_ERR_IO, "%s: cannot sync the folder: %s", dir, strerror(errno));
    if (fd >= 0)
        close(fd);
    return st;
}

static zt_status remove_tree(const char *path);

/* Removes everything inside folder `path`. */
static zt_status remove_entries(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return zt_error_set(ZT_ERR_IO, "%s: cannot open the folder: %s", path, strerror(errno));
    zt_status st = ZT_OK;
    char *child = malloc(PATH_BYTES);
    if (!child)
        st = zt_error_set(ZT_ERR_NOMEM, "%s: out of memory", path);
    struct dirent *e;
    while (st == ZT_OK && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        st = join(child, PATH_BYTES, path, e->d_name);
        if (st == ZT_OK)
            st = remove_tree(child);
    }
    free(child);
    closedir(d);
    return st;
}

/* rm -r without following links. */
static zt_status remove_tree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return errno == ENOENT
                   ? ZT_OK
                   : zt_error_set(ZT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        ZT_TRY(remove_entries(path));
        if (rmdir(path) != 0)
            return zt_error_set(ZT_ERR_IO, "%s: cannot remove the folder: %s", path,
                                strerror(errno));
        return ZT_OK;
    }
    if (unlink(path) != 0 && errno != ENOENT)
        return zt_error_set(ZT_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    return ZT_OK;
}

zt_status ckpt_remove(const char *dir)
{
    return remove_tree(dir);
}

/* Removes a step folder, meta.json first (see the top of the file). */
static zt_status remove_step_dir(const char *step_dir)
{
    char meta[PATH_BYTES];
    ZT_TRY(ckpt_meta_path(step_dir, meta, sizeof meta));
    if (unlink(meta) != 0 && errno != ENOENT)
        return zt_error_set(ZT_ERR_IO, "%s: cannot remove: %s", meta, strerror(errno));
    return remove_tree(step_dir);
}

/* ---- DIR/latest ---- */

/* Reads DIR/latest: *present = 0 when it does not exist; else the step it
 * names, which must be one line "step-NNNNNNNN". */
static zt_status read_latest(const char *dir, int *present, int64_t *step)
{
    char path[PATH_BYTES];
    *present = 0;
    ZT_TRY(join(path, sizeof path, dir, CKPT_LATEST_NAME));
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return ZT_OK;
        return zt_error_set(ZT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    char *text;
    size_t len;
    ZT_TRY(ckpt_read_small(path, LATEST_BYTES, &text, &len));
    if (len > 0 && text[len - 1] == '\n')
        text[--len] = '\0';
    int ok = strlen(text) == len && parse_step_name(text, step);
    for (size_t k = 0; k < len; k++)
        if (text[k] < ' ' || text[k] > '~')
            text[k] = '?';
    zt_status st =
        ok ? ZT_OK
           : zt_error_set(ZT_ERR_CHECKPOINT, "%s: expected one line 'step-NNNNNNNN', found '%s'",
                          path, text);
    free(text);
    *present = ok;
    return st;
}

/* ---- completeness ---- */

/* Checks that every shard file m lists is in step_dir with its size. */
static zt_status check_files(const char *step_dir, const struct ckpt_meta *m)
{
    char path[PATH_BYTES];
    for (int r = 0; r < m->world; r++) {
        ZT_TRY(ckpt_shard_path(step_dir, r, path, sizeof path));
        struct stat sb;
        if (stat(path, &sb) != 0) {
            if (errno == ENOENT)
                return zt_error_set(ZT_ERR_CHECKPOINT,
                                    "%s: missing (the checkpoint lists %d shard files)", path,
                                    m->world);
            return zt_error_set(ZT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        }
        if (!S_ISREG(sb.st_mode))
            return zt_error_set(ZT_ERR_CHECKPOINT, "%s: not a regular file", path);
        uint64_t size = (uint64_t)sb.st_size, want = m->files[r].bytes;
        if (size != want)
            return zt_error_set(ZT_ERR_CHECKPOINT, "%s: %s%llu bytes, meta.json says %llu", path,
                                size < want ? "truncated: " : "", (unsigned long long)size,
                                (unsigned long long)want);
    }
    return ZT_OK;
}

/* Reads step_dir's meta.json into *m, telling a folder that never got one
 * (an interrupted save: ZT_ERR_CHECKPOINT) from an unreadable file. */
static zt_status read_step_meta(const char *step_dir, struct ckpt_meta *m)
{
    char path[PATH_BYTES];
    ZT_TRY(ckpt_meta_path(step_dir, path, sizeof path));
    struct stat sb;
    if (stat(step_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return zt_error_set(ZT_ERR_IO, "%s: no such checkpoint folder", step_dir);
    if (stat(path, &sb) != 0 && errno == ENOENT)
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: missing: the checkpoint was never completed",
                            path);
    return ckpt_meta_read(path, m);
}

/* Complete: meta.json reads and every shard file has its size. */
static zt_status check_complete(const char *step_dir)
{
    struct ckpt_meta m;
    ZT_TRY(read_step_meta(step_dir, &m));
    zt_status st = check_files(step_dir, &m);
    ckpt_meta_free(&m);
    return st;
}

/* ---- the public operations ---- */

zt_status ckpt_dir_prepare(const char *dir, int64_t step, char *step_dir, size_t n)
{
    if (step < 0)
        return zt_error_set(ZT_ERR_USAGE, "%s: step %lld is negative", dir, (long long)step);
    char name[CKPT_STEP_NAME_MAX];
    ckpt_step_dirname(step, name, sizeof name);
    ZT_TRY(join(step_dir, n, dir, name));
    ZT_TRY(make_dirs(dir));
    int present;
    int64_t latest;
    ZT_TRY(read_latest(dir, &present, &latest));
    if (present && latest == step)
        return zt_error_set(ZT_ERR_CHECKPOINT,
                            "%s: is the published checkpoint (%s/latest names it); it is not "
                            "written over",
                            step_dir, dir);
    ZT_TRY(remove_step_dir(step_dir));
    if (mkdir(step_dir, 0777) != 0)
        return zt_error_set(ZT_ERR_IO, "%s: cannot create folder: %s", step_dir, strerror(errno));
    return sync_dir(dir);
}

zt_status ckpt_publish(const char *dir, int64_t step)
{
    char name[CKPT_STEP_NAME_MAX], step_dir[PATH_BYTES], path[PATH_BYTES], line[48];
    ckpt_step_dirname(step, name, sizeof name);
    ZT_TRY(join(step_dir, sizeof step_dir, dir, name));
    ZT_TRY(join(path, sizeof path, dir, CKPT_LATEST_NAME));
    ZT_TRY(check_complete(step_dir));
    int len = snprintf(line, sizeof line, "%s\n", name);
    return atomic_file_write(path, line, (size_t)len);
}

zt_status ckpt_find_latest(const char *dir, char *step_dir, size_t n, int *found)
{
    *found = 0;
    struct stat sb;
    if (stat(dir, &sb) != 0 && (errno == ENOENT || errno == ENOTDIR))
        return ZT_OK;
    int present;
    int64_t step;
    ZT_TRY(read_latest(dir, &present, &step));
    if (!present)
        return ZT_OK;
    char name[CKPT_STEP_NAME_MAX], meta[PATH_BYTES];
    ckpt_step_dirname(step, name, sizeof name);
    ZT_TRY(join(step_dir, n, dir, name));
    ZT_TRY(ckpt_meta_path(step_dir, meta, sizeof meta));
    if (stat(meta, &sb) != 0 && (errno == ENOENT || errno == ENOTDIR))
        return zt_error_set(
            ZT_ERR_CHECKPOINT, "%s/latest names %s, which is not a complete checkpoint (%s)", dir,
            name, stat(step_dir, &sb) != 0 ? "its folder is missing" : "meta.json missing");
    zt_status st = check_complete(step_dir);
    if (st == ZT_ERR_CHECKPOINT) {
        char why[1024];
        snprintf(why, sizeof why, "%s", zt_error_message());
        return zt_error_set(ZT_ERR_CHECKPOINT,
                            "%s/latest names %s, which is not a complete checkpoint: %s", dir, name,
                            why);
    }
    ZT_TRY(st);
    *found = 1;
    return ZT_OK;
}

static int newest_first(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The steps of the step-NNNNNNNN folders in dir, newest first (*steps:
 * caller frees). */
static zt_status list_steps(const char *dir, int64_t **steps, size_t *n)
{
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return zt_error_set(ZT_ERR_IO, "%s: cannot open the folder: %s", dir, strerror(errno));
    size_t cap = 0;
    zt_status st = ZT_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t step;
        if (!parse_step_name(e->d_name, &step))
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            int64_t *p = realloc(*steps, cap * sizeof *p);
            if (!p) {
                st = zt_error_set(ZT_ERR_NOMEM, "%s: out of memory listing the folder", dir);
                break;
            }
            *steps = p;
        }
        (*steps)[(*n)++] = step;
    }
    closedir(d);
    if (st != ZT_OK) {
        free(*steps);
        *steps = NULL;
        *n = 0;
        return st;
    }
    if (*n)
        qsort(*steps, *n, sizeof **steps, newest_first);
    return ZT_OK;
}

/* Walks the steps newest first: counts complete folders up to `keep`,
 * then removes every older one but latest's. */
static zt_status rotate_steps(const char *dir, const int64_t *steps, size_t n, int keep,
                              int64_t latest)
{
    int complete = 0;
    char name[CKPT_STEP_NAME_MAX], step_dir[PATH_BYTES];
    for (size_t k = 0; k < n; k++) {
        ckpt_step_dirname(steps[k], name, sizeof name);
        ZT_TRY(join(step_dir, sizeof step_dir, dir, name));
        if (complete < keep) {
            zt_status st = check_complete(step_dir);
            if (st == ZT_OK)
                complete++;
            else if (st != ZT_ERR_CHECKPOINT)
                return st;
            continue;
        }
        if (steps[k] != latest)
            ZT_TRY(remove_step_dir(step_dir));
    }
    zt_error_clear(); /* the verdicts on incomplete folders were not errors */
    return ZT_OK;
}

zt_status ckpt_rotate(const char *dir, int keep)
{
    if (keep < 1)
        return zt_error_set(ZT_ERR_USAGE, "%s: rotation must keep at least 1 checkpoint, not %d",
                            dir, keep);
    int present;
    int64_t latest;
    ZT_TRY(read_latest(dir, &present, &latest));
    if (!present)
        return zt_error_set(ZT_ERR_CHECKPOINT,
                            "%s/latest: missing; rotation runs only after a checkpoint is "
                            "published",
                            dir);
    int64_t *steps;
    size_t n;
    ZT_TRY(list_steps(dir, &steps, &n));
    zt_status st = rotate_steps(dir, steps, n, keep, latest);
    free(steps);
    return st;
}

/* ---- a checkpoint as a user names it ---- */

#define EXPECTED "expected a step-NNNNNNNN folder or the checkpoint.dir holding them"

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* The message for a folder that is neither kind: one holding step
 * folders but no `latest` is a checkpoint.dir whose saves never finished. */
static zt_status neither_kind(const char *dir)
{
    int64_t *steps;
    size_t k;
    ZT_TRY(list_steps(dir, &steps, &k));
    free(steps);
    if (k > 0)
        return zt_error_set(ZT_ERR_CHECKPOINT,
                            "%s: holds %zu step folder(s) but no `%s` file, so no checkpoint "
                            "in it was completed: %s",
                            dir, k, CKPT_LATEST_NAME, EXPECTED);
    return zt_error_set(ZT_ERR_CHECKPOINT,
                        "%s: neither a checkpoint (no %s) nor a checkpoint folder (no `%s` "
                        "file): %s",
                        dir, CKPT_META_NAME, CKPT_LATEST_NAME, EXPECTED);
}

static zt_status copy_path(const char *dir, char *step_dir, size_t n)
{
    int len = snprintf(step_dir, n, "%s", dir);
    if (len < 0 || (size_t)len >= n)
        return zt_error_set(ZT_ERR_USAGE, "%s: path longer than %zu bytes", dir, n ? n - 1 : 0);
    return ZT_OK;
}

zt_status ckpt_resolve(const char *path, char *step_dir, size_t n)
{
    char dir[PATH_BYTES], probe[PATH_BYTES];
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    if (len == 0 || len >= sizeof dir)
        return zt_error_set(ZT_ERR_USAGE, "'%s': not a usable checkpoint path", path);
    memcpy(dir, path, len);
    dir[len] = '\0';
    struct stat sb;
    if (stat(dir, &sb) != 0) /* a path that names nothing is the caller's mistake: exit 2 */
        return zt_error_set(errno == ENOENT ? ZT_ERR_USAGE : ZT_ERR_IO, "%s: %s: %s", dir,
                            errno == ENOENT ? "no such folder" : strerror(errno), EXPECTED);
    if (!S_ISDIR(sb.st_mode))
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: not a folder: %s", dir, EXPECTED);
    ZT_TRY(ckpt_meta_path(dir, probe, sizeof probe));
    if (exists(probe))
        return copy_path(dir, step_dir, n);
    char meta[PATH_BYTES];
    snprintf(meta, sizeof meta, "%s", probe);
    ZT_TRY(join(probe, sizeof probe, dir, CKPT_LATEST_NAME));
    if (exists(probe)) {
        int found;
        ZT_TRY(ckpt_find_latest(dir, step_dir, n, &found));
        return found ? ZT_OK : neither_kind(dir); /* latest went away meanwhile */
    }
    /* a step folder by its name: an interrupted save */
    const char *base = strrchr(dir, '/');
    int64_t step;
    if (parse_step_name(base ? base + 1 : dir, &step))
        return zt_error_set(ZT_ERR_CHECKPOINT, "%s: missing: the checkpoint was never completed",
                            meta);
    return neither_kind(dir);
}

/* The header of rank r's shard against meta.json, then every byte. */
static zt_status validate_shard(const char *step_dir, const struct ckpt_meta *m, int r)
{
    char path[PATH_BYTES];
    ZT_TRY(ckpt_shard_path(step_dir, r, path, sizeof path));
    struct ckpt_shard *s;
    ZT_TRY(ckpt_shard_open(path, &s));
    const struct ckpt_shard_header *h = ckpt_shard_header(s);
    zt_status st = ZT_OK;
    if (h->rank != r || h->world != m->world)
        st = zt_error_set(ZT_ERR_CHECKPOINT, "%s: written by rank %d of %d, expected rank %d of %d",
                          path, h->rank, h->world, r, m->world);
    else if (h->file_checksum != m->files[r].checksum)
        st = zt_error_set(
            ZT_ERR_CHECKPOINT, "%s: header checksum 0x%016llx, meta.json says 0x%016llx", path,
            (unsigned long long)h->file_checksum, (unsigned long long)m->files[r].checksum);
    else
        st = ckpt_shard_verify(s);
    ckpt_shard_close(s);
    return st;
}

zt_status ckpt_validate(const char *step_dir, struct ckpt_meta *meta_out)
{
    if (meta_out)
        *meta_out = (struct ckpt_meta){0};
    struct ckpt_meta m;
    ZT_TRY(read_step_meta(step_dir, &m));
    zt_status st = check_files(step_dir, &m);
    for (int r = 0; r < m.world && st == ZT_OK; r++)
        st = validate_shard(step_dir, &m, r);
    if (st == ZT_OK && meta_out)
        *meta_out = m;
    else
        ckpt_meta_free(&m);
    return st;
}
