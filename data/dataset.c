/* data/dataset.c — turning the paths a user names into one token array, and
 * holding out a validation tail.
 *
 * The same folder must give the same tokens on every machine and every run,
 * or two ranks (or a resumed run) would train on different data. readdir
 * order is whatever the file system likes, so a folder is first walked into
 * a list of file paths, the list is sorted with strcmp (bytes, not locale),
 * and only then are files read. Dotfiles are skipped (editor swap files,
 * .git), as is anything that is neither a file nor a folder (sockets, FIFOs,
 * dangling links). Links are followed, so a folder that links back to an
 * enclosing one would never end; the walk keeps the (device, inode) chain of
 * the folders above it and refuses such a loop.
 *
 * Text files are streamed through one chunk into the byte tokenizer. A
 * file that starts with the token-file magic is refused unless it is the
 * only input: reading a prepared file as text would silently train on its
 * header and packed ids.
 */
#include "data.h"
#include "data_impl.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

struct path_list {
    char **v; /* owned strings */
    size_t n, cap;
};

/* The folders above the one being walked, innermost first. */
struct ancestor {
    dev_t dev;
    ino_t ino;
    const struct ancestor *up;
};

static void path_list_free(struct path_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    *l = (struct path_list){0};
}

/* Takes ownership of `p` (freed on failure too). */
static zt_status path_list_push(struct path_list *l, char *p)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            free(p);
            return zt_error_set(ZT_ERR_NOMEM, "data: out of memory listing files");
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = p;
    return ZT_OK;
}

static int compare_paths(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *join_path(const char *dir, const char *name)
{
    size_t ld = strlen(dir), ln = strlen(name);
    int slash = ld > 0 && dir[ld - 1] != '/';
    char *p = malloc(ld + slash + ln + 1);
    if (p) {
        memcpy(p, dir, ld);
        if (slash)
            p[ld] = '/';
        memcpy(p + ld + slash, name, ln + 1);
    }
    return p;
}

/* The non-dot entries of `dir`, in readdir order. The folder is closed
 * before any entry is visited, so deep trees do not hold a descriptor per
 * level. */
static zt_status list_entries(const char *dir, struct path_list *names)
{
    DIR *d = opendir(dir);
    if (!d)
        return zt_error_set(ZT_ERR_IO, "%s: cannot open folder: %s", dir, strerror(errno));
    zt_status st = ZT_OK;
    struct dirent *e;
    errno = 0;
    while (st == ZT_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char *p = join_path(dir, e->d_name);
        st = p ? path_list_push(names, p)
               : zt_error_set(ZT_ERR_NOMEM, "%s: out of memory listing files", dir);
        errno = 0;
    }
    if (st == ZT_OK && errno != 0)
        st = zt_error_set(ZT_ERR_IO, "%s: cannot read folder: %s", dir, strerror(errno));
    closedir(d);
    return st;
}

static zt_status walk(const char *dir, const struct ancestor *up, struct path_list *files);

/* Files go to the list, folders are walked, anything else is dropped. */
static zt_status visit(const char *path, const struct ancestor *up, struct path_list *files)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT) /* a dangling link */
            return ZT_OK;
        return zt_error_set(ZT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    if (S_ISREG(sb.st_mode)) {
        char *copy = strdup(path);
        if (!copy)
            return zt_error_set(ZT_ERR_NOMEM, "%s: out of memory listing files", path);
        return path_list_push(files, copy);
    }
    if (!S_ISDIR(sb.st_mode))
        return ZT_OK;
    for (const struct ancestor *a = up; a; a = a->up)
        if (a->dev == sb.st_dev && a->ino == sb.st_ino)
            return zt_error_set(
                ZT_ERR_DATA, "%s: folder loop: it leads back to a folder that contains it", path);
    struct ancestor self = {sb.st_dev, sb.st_ino, up};
    return walk(path, &self, files);
}

static zt_status walk(const char *dir, const struct ancestor *up, struct path_list *files)
{
    struct path_list names = {0};
    zt_status st = list_entries(dir, &names);
    for (size_t i = 0; st == ZT_OK && i < names.n; i++)
        st = visit(names.v[i], up, files);
    path_list_free(&names);
    return st;
}

/* All files under the folder `root`, sorted by path. */
static zt_status collect_folder(const char *root, const struct stat *sb, struct path_list *files)
{
    struct ancestor self = {sb->st_dev, sb->st_ino, NULL};
    ZT_TRY(walk(root, &self, files));
    if (files->n == 0)
        return zt_error_set(ZT_ERR_DATA, "%s: folder contains no files", root);
    qsort(files->v, files->n, sizeof *files->v, compare_paths);
    return ZT_OK;
}

/* Streams one text file through the byte tokenizer. */
static zt_status read_text_chunks(FILE *f, const char *path, unsigned char *chunk,
                                  struct token_buffer *out)
{
    int first = 1;
    size_t got;
    while ((got = fread(chunk, 1, DATA_CHUNK_BYTES, f)) > 0) {
        if (first && got >= 8 && memcmp(chunk, ZT_TOKFILE_MAGIC, 8) == 0)
            return zt_error_set(ZT_ERR_DATA,
                                "%s: is a token file; a token file must be the only input", path);
        first = 0;
        ZT_TRY(tokenizer_bytes_encode(chunk, got, out));
    }
    if (ferror(f))
        return zt_error_set(ZT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
    return ZT_OK;
}

static zt_status append_text_file(const char *path, unsigned char *chunk, struct token_buffer *out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return data_open_error(path, errno);
    struct stat sb;
    zt_status st = ZT_OK;
    if (fstat(fileno(f), &sb) != 0)
        st = zt_error_set(ZT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = zt_error_set(ZT_ERR_DATA, "%s: not a regular file", path);
    else if ((uint64_t)sb.st_size > SIZE_MAX)
        st = zt_error_set(ZT_ERR_NOMEM, "%s: too large for memory", path);
    else if ((st = data_buffer_reserve(out, (size_t)sb.st_size, path)) == ZT_OK)
        st = read_text_chunks(f, path, chunk, out);
    fclose(f);
    return st;
}

/* Reads one named input (a text file or a folder) and appends its tokens. */
static zt_status append_input(const char *path, const struct stat *sb, unsigned char *chunk,
                              struct token_buffer *out, size_t *n_files)
{
    if (S_ISREG(sb->st_mode)) {
        ZT_TRY(append_text_file(path, chunk, out));
        (*n_files)++;
        return ZT_OK;
    }
    if (!S_ISDIR(sb->st_mode))
        return zt_error_set(ZT_ERR_DATA, "%s: not a regular file or folder", path);
    struct path_list files = {0};
    zt_status st = collect_folder(path, sb, &files);
    for (size_t i = 0; st == ZT_OK && i < files.n; i++)
        st = append_text_file(files.v[i], chunk, out);
    if (st == ZT_OK)
        *n_files += files.n;
    path_list_free(&files);
    return st;
}

static zt_status load_text(const char *const *paths, int n_paths, const struct stat *sbs,
                           struct token_buffer *out, size_t *n_files)
{
    unsigned char *chunk = malloc(DATA_CHUNK_BYTES);
    if (!chunk)
        return zt_error_set(ZT_ERR_NOMEM, "data: cannot allocate the read buffer");
    zt_status st = ZT_OK;
    for (int i = 0; st == ZT_OK && i < n_paths; i++)
        st = append_input(paths[i], &sbs[i], chunk, out, n_files);
    free(chunk);
    out->vocab_size = 256;
    return st;
}

zt_status dataset_load_counted(const char *const *paths, int n_paths, struct token_buffer *out,
                               size_t *n_files)
{
    *out = (struct token_buffer){0};
    size_t files = 0;
    if (n_files)
        *n_files = 0;
    if (n_paths < 1)
        return zt_error_set(ZT_ERR_USAGE, "data: no input paths given");
    /* Every path must exist before anything large is read. */
    struct stat *sbs = malloc((size_t)n_paths * sizeof *sbs);
    if (!sbs)
        return zt_error_set(ZT_ERR_NOMEM, "data: out of memory");
    zt_status st = ZT_OK;
    for (int i = 0; st == ZT_OK && i < n_paths; i++)
        if (stat(paths[i], &sbs[i]) != 0)
            st = data_open_error(paths[i], errno);
    if (st == ZT_OK && n_paths == 1 && S_ISREG(sbs[0].st_mode) && tokfile_is_tokfile(paths[0])) {
        st = tokfile_read(paths[0], out);
        files = 1;
    } else if (st == ZT_OK) {
        st = load_text(paths, n_paths, sbs, out, &files);
    }
    free(sbs);
    if (st != ZT_OK) {
        token_buffer_free(out);
        return st;
    }
    if (n_files)
        *n_files = files;
    return ZT_OK;
}

zt_status dataset_load(const char *const *paths, int n_paths, struct token_buffer *out)
{
    return dataset_load_counted(paths, n_paths, out, NULL);
}

static zt_status too_short(size_t n, int seq_len)
{
    return zt_error_set(ZT_ERR_DATA,
                        "data: %zu tokens are fewer than seq_len + 1 = %lld: not one training "
                        "window",
                        n, (long long)seq_len + 1);
}

zt_status dataset_split_tail(struct token_buffer *all, double fraction, int seq_len,
                             struct token_buffer *val)
{
    *val = (struct token_buffer){0};
    if (!(fraction >= 0.0 && fraction < 1.0))
        return zt_error_set(ZT_ERR_CONFIG, "data: validation fraction %g is outside [0, 1)",
                            fraction);
    if (seq_len < 1)
        return zt_error_set(ZT_ERR_CONFIG, "data: seq_len %d must be >= 1", seq_len);
    size_t window = (size_t)seq_len + 1;
    if (all->n < window)
        return too_short(all->n, seq_len);
    if (fraction == 0.0)
        return ZT_OK;
    size_t n_val = (size_t)floor((double)all->n * fraction);
    if (n_val < window)
        n_val = window;
    if (n_val > all->n - window)
        return zt_error_set(ZT_ERR_DATA,
                            "data: %zu tokens are too few to split: %zu validation tokens would "
                            "leave %zu for training, fewer than seq_len + 1 = %zu",
                            all->n, n_val, n_val < all->n ? all->n - n_val : 0, window);
    int32_t *tail = malloc(n_val * sizeof *tail);
    if (!tail)
        return zt_error_set(ZT_ERR_NOMEM, "data: cannot allocate %zu validation tokens", n_val);
    memcpy(tail, all->tokens + (all->n - n_val), n_val * sizeof *tail);
    *val = (struct token_buffer){tail, n_val, all->vocab_size, n_val};
    all->n -= n_val;
    return ZT_OK;
}
