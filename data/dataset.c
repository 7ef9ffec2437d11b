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
 * Text files are streamed through one chunk into the tokenizer (bytes
 * unless the options name another), or read whole for one that cannot take
 * pieces; each file is a document, with the tokenizer's end-of-text id
 * between documents. Tokenizers take any bytes, so nothing downstream would
 * notice a file that is not text; the checks are made here, on the first
 * chunk, before a token is kept. A file that starts with the token-file
 * magic is refused unless it is the only input: reading a prepared file as
 * text would silently train on its header and packed ids. A path named
 * directly that ends in .tok is meant as a token file too, so a damaged one
 * is refused with what is wrong rather than read as text; inside folders
 * the name decides nothing (tokenised text is often called *.tok), and a
 * damaged token file there is caught as binary, its header having NUL
 * bytes. A binary file (sniff.c) is an error naming it, or, inside a folder
 * and with skip_binary, left out and listed in the report for the caller to
 * warn.
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

/* The folders above the one being walked, innermost first. */
struct ancestor {
    dev_t dev;
    ino_t ino;
    const struct ancestor *up;
};

void data_path_list_free(struct data_path_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    *l = (struct data_path_list){0};
}

/* Takes ownership of `p` (freed on failure too). */
static zt_status path_list_push(struct data_path_list *l, char *p)
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

/* The non-dot entries of `dir`, in readdir order. The folder is closed
 * before any entry is visited, so deep trees do not hold a descriptor per
 * level. */
static zt_status list_entries(const char *dir, struct data_path_list *names)
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
        char *p = data_join_path(dir, e->d_name);
        st = p ? path_list_push(names, p)
               : zt_error_set(ZT_ERR_NOMEM, "%s: out of memory listing files", dir);
        errno = 0;
    }
    if (st == ZT_OK && errno != 0)
        st = zt_error_set(ZT_ERR_IO, "%s: cannot read folder: %s", dir, strerror(errno));
    closedir(d);
    return st;
}

static zt_status walk(const char *dir, const struct ancestor *up, struct data_path_list *files);

/* Files go to the list, folders are walked, anything else is dropped. */
static zt_status visit(const char *path, const struct ancestor *up, struct data_path_list *files)
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

static zt_status walk(const char *dir, const struct ancestor *up, struct data_path_list *files)
{
    struct data_path_list names = {0};
    zt_status st = list_entries(dir, &names);
    for (size_t i = 0; st == ZT_OK && i < names.n; i++)
        st = visit(names.v[i], up, files);
    data_path_list_free(&names);
    return st;
}

zt_status data_collect_folder(const char *root, const struct stat *sb, struct data_path_list *files)
{
    struct ancestor self = {sb->st_dev, sb->st_ino, NULL};
    ZT_TRY(walk(root, &self, files));
    if (files->n == 0)
        return zt_error_set(ZT_ERR_DATA, "%s: folder contains no files", root);
    qsort(files->v, files->n, sizeof *files->v, compare_paths);
    return ZT_OK;
}

/* What one load works with. */
struct load {
    const struct dataset_options *opt;
    const struct tokenizer *tok; /* opt's, or the byte tokenizer */
    unsigned char *chunk;        /* DATA_CHUNK_BYTES, reused for every file */
    struct token_buffer *out;
    struct dataset_report *report;
};

/* Judges a text file by its first chunk, before any of it is kept: a token
 * file is never text, and a binary file is text only by mistake. Sets
 * *skip when the file is to be left out. */
static zt_status check_head(const struct load *l, const char *path, size_t got, int in_folder,
                            int *skip)
{
    if (got >= 8 && memcmp(l->chunk, ZT_TOKFILE_MAGIC, 8) == 0)
        return zt_error_set(ZT_ERR_DATA, "%s: is a token file; a token file must be the only input",
                            path);
    char why[96];
    /* A short first chunk is the whole file: fread fills it otherwise. */
    if (!sniff_is_binary(l->chunk, got, got == DATA_CHUNK_BYTES, why, sizeof why))
        return ZT_OK;
    if (in_folder && l->opt->skip_binary) {
        *skip = 1;
        return ZT_OK;
    }
    if (in_folder && l->opt->skip_setting)
        return zt_error_set(ZT_ERR_DATA,
                            "%s: is binary, not text (%s); set %s: true to skip binary files in "
                            "folders",
                            path, why, l->opt->skip_setting);
    return zt_error_set(ZT_ERR_DATA, "%s: is binary, not text (%s)", path, why);
}

/* Puts the tokenizer's end-of-text id before every document but the
 * first. The report counts the files read before this one. */
static zt_status separate_document(const struct load *l, const char *path)
{
    const int32_t eot = tokenizer_eot_id(l->tok);
    if (eot < 0 || l->report->n_files == 0)
        return ZT_OK;
    ZT_TRY(data_buffer_reserve(l->out, 1, path));
    l->out->tokens[l->out->n++] = eot;
    return ZT_OK;
}

/* Doubles the buffer *p of *cap bytes (freed on failure by the caller). */
static zt_status grow_bytes(unsigned char **p, size_t *cap, const char *path)
{
    unsigned char *more = *cap <= SIZE_MAX / 2 ? realloc(*p, 2 * *cap) : NULL;
    if (!more)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate more than %zu bytes to read it",
                            path, *cap);
    *p = more;
    *cap *= 2;
    return ZT_OK;
}

/* Reads the rest of a file whose first `got` bytes are in the chunk into
 * one buffer and tokenises it whole. One byte of room past `size` lets the
 * last fread see the end; a file that grows while read grows the buffer. */
static zt_status encode_whole(const struct load *l, FILE *f, const char *path, size_t size,
                              size_t got)
{
    size_t cap = (size > got ? size : got) + 1, n = got, r;
    unsigned char *doc = malloc(cap);
    if (!doc)
        return zt_error_set(ZT_ERR_NOMEM, "%s: cannot allocate %zu bytes to read it", path, cap);
    memcpy(doc, l->chunk, got);
    zt_status st = ZT_OK;
    while (st == ZT_OK && (r = fread(doc + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap)
            st = grow_bytes(&doc, &cap, path);
    }
    if (st == ZT_OK && !ferror(f))
        st = tokenizer_encode(l->tok, doc, n, l->out);
    free(doc);
    return st;
}

/* Tokenises one text file of `size` bytes whose first `got` bytes are in
 * the chunk: chunk by chunk when the tokenizer takes pieces, else whole. */
static zt_status encode_text(const struct load *l, FILE *f, const char *path, size_t size,
                             size_t got)
{
    if (!tokenizer_streams(l->tok))
        return encode_whole(l, f, path, size, got);
    /* Room for one token per byte, the byte tokenizer's count. */
    if (got > 0)
        ZT_TRY(data_buffer_reserve(l->out, size, path));
    for (; got > 0; got = fread(l->chunk, 1, DATA_CHUNK_BYTES, f))
        ZT_TRY(tokenizer_encode(l->tok, l->chunk, got, l->out));
    return ZT_OK;
}

/* Reads one text file of `size` bytes as one document. The room for its
 * tokens is taken only once the head says it is text, so a large binary
 * file costs one chunk, not its size in tokens. */
static zt_status read_text(const struct load *l, FILE *f, const char *path, size_t size,
                           int in_folder, int *skip)
{
    size_t got = fread(l->chunk, 1, DATA_CHUNK_BYTES, f);
    if (got > 0) {
        ZT_TRY(check_head(l, path, got, in_folder, skip));
        if (*skip)
            return ZT_OK;
    }
    ZT_TRY(separate_document(l, path));
    ZT_TRY(encode_text(l, f, path, size, got));
    if (ferror(f))
        return zt_error_set(ZT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
    return ZT_OK;
}

/* Appends one text file's tokens, or sets *skip (only for a binary file in
 * a folder under skip_binary). */
static zt_status append_text_file(const struct load *l, const char *path, int in_folder, int *skip)
{
    *skip = 0;
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
    else
        st = read_text(l, f, path, (size_t)sb.st_size, in_folder, skip);
    fclose(f);
    return st;
}

/* Counts a skipped file and keeps its name while the report names them. */
static zt_status report_skip(struct dataset_report *r, const char *path)
{
    if (r->n_skipped < DATASET_SKIPPED_NAMED) {
        char *copy = strdup(path);
        if (!copy)
            return zt_error_set(ZT_ERR_NOMEM, "%s: out of memory listing skipped files", path);
        r->skipped[r->n_skipped] = copy;
    }
    r->n_skipped++;
    return ZT_OK;
}

static const char *plural(size_t n)
{
    return n == 1 ? "" : "s";
}

/* Reads every file under the folder `root`, in path order. */
static zt_status append_folder(const struct load *l, const char *root, const struct stat *sb)
{
    struct data_path_list files = {0};
    zt_status st = data_collect_folder(root, sb, &files);
    size_t skipped = 0;
    for (size_t i = 0; st == ZT_OK && i < files.n; i++) {
        int skip;
        st = append_text_file(l, files.v[i], 1, &skip);
        if (st == ZT_OK && skip) {
            skipped++;
            st = report_skip(l->report, files.v[i]);
        } else if (st == ZT_OK) {
            l->report->n_files++;
        }
    }
    if (st == ZT_OK && skipped == files.n)
        st = zt_error_set(ZT_ERR_DATA,
                          "%s: folder contains no text files (%zu binary file%s skipped)", root,
                          skipped, plural(skipped));
    data_path_list_free(&files);
    return st;
}

/* Reads one named input (a text file or a folder) and appends its tokens.
 * A file named as a token file is not text, whatever it holds: a damaged
 * one says what is wrong with it, a sound one that it must be alone. */
static zt_status append_input(const struct load *l, const char *path, const struct stat *sb)
{
    if (S_ISDIR(sb->st_mode))
        return append_folder(l, path, sb);
    if (!S_ISREG(sb->st_mode))
        return zt_error_set(ZT_ERR_DATA, "%s: not a regular file or folder", path);
    if (!l->opt->text_only && tokfile_is_named(path)) {
        ZT_TRY(tokfile_check(path));
        return zt_error_set(ZT_ERR_DATA, "%s: is a token file; a token file must be the only input",
                            path);
    }
    int skip;
    ZT_TRY(append_text_file(l, path, 0, &skip));
    l->report->n_files++;
    return ZT_OK;
}

static zt_status load_text(struct load *l, const char *const *paths, int n_paths,
                           const struct stat *sbs)
{
    /* Set first: the end-of-text id may come before any encoded token. */
    l->out->vocab_size = tokenizer_vocab_size(l->tok);
    l->chunk = malloc(DATA_CHUNK_BYTES);
    if (!l->chunk)
        return zt_error_set(ZT_ERR_NOMEM, "data: cannot allocate the read buffer");
    zt_status st = ZT_OK;
    for (int i = 0; st == ZT_OK && i < n_paths; i++)
        st = append_input(l, paths[i], &sbs[i]);
    free(l->chunk);
    l->chunk = NULL;
    return st;
}

/* A single regular file is read as a token file when its name or its
 * first bytes say it is one. */
static int single_tokfile(const struct dataset_options *opt, const char *const *paths, int n_paths,
                          const struct stat *sbs)
{
    return !opt->text_only && n_paths == 1 && S_ISREG(sbs[0].st_mode) &&
           (tokfile_is_named(paths[0]) || tokfile_is_tokfile(paths[0]));
}

zt_status dataset_load_with(const char *const *paths, int n_paths,
                            const struct dataset_options *opt, struct token_buffer *out,
                            struct dataset_report *report)
{
    static const struct dataset_options defaults = {0};
    struct dataset_report own = {0};
    struct load l = {opt ? opt : &defaults, NULL, NULL, out, report ? report : &own};
    l.tok = l.opt->tokenizer ? l.opt->tokenizer : tokenizer_default();
    *out = (struct token_buffer){0};
    *l.report = (struct dataset_report){0};
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
    if (st == ZT_OK && single_tokfile(l.opt, paths, n_paths, sbs)) {
        st = tokfile_read(paths[0], out);
        l.report->n_files = 1;
    } else if (st == ZT_OK) {
        st = load_text(&l, paths, n_paths, sbs);
    }
    free(sbs);
    dataset_report_free(&own);
    if (st != ZT_OK)
        token_buffer_free(out);
    return st;
}

zt_status dataset_load_counted(const char *const *paths, int n_paths, struct token_buffer *out,
                               size_t *n_files)
{
    struct dataset_report r = {0};
    zt_status st = dataset_load_with(paths, n_paths, NULL, out, &r);
    if (n_files)
        *n_files = st == ZT_OK ? r.n_files : 0;
    dataset_report_free(&r);
    return st;
}

void dataset_report_free(struct dataset_report *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < DATASET_SKIPPED_NAMED; i++)
        free(r->skipped[i]);
    *r = (struct dataset_report){0};
}

void dataset_report_write_skipped(const struct dataset_report *r, FILE *f)
{
    size_t named = r->n_skipped < DATASET_SKIPPED_NAMED ? r->n_skipped : DATASET_SKIPPED_NAMED;
    fprintf(f, "skipped %zu binary file%s: ", r->n_skipped, plural(r->n_skipped));
    for (size_t i = 0; i < named; i++)
        fprintf(f, "%s%s", i ? ", " : "", r->skipped[i]);
    if (r->n_skipped > named)
        fprintf(f, " and %zu more", r->n_skipped - named);
}

zt_status dataset_load(const char *const *paths, int n_paths, struct token_buffer *out)
{
    return dataset_load_with(paths, n_paths, NULL, out, NULL);
}

static zt_status too_short(size_t n, int seq_len)
{
    return zt_error_set(ZT_ERR_DATA,
                        "data: %zu tokens are fewer than seq_len + 1 = %lld: not one training "
                        "window",
                        n, (long long)seq_len + 1);
}

/* A copy of all's tokens and mask [from, from + n) into *val. */
static zt_status copy_range(const struct token_buffer *all, size_t from, size_t n,
                            struct token_buffer *val)
{
    int32_t *tail = malloc(n * sizeof *tail);
    uint8_t *mask = all->mask ? malloc(n) : NULL;
    if (!tail || (all->mask && !mask)) {
        free(tail);
        free(mask);
        return zt_error_set(ZT_ERR_NOMEM, "data: cannot allocate %zu validation tokens", n);
    }
    memcpy(tail, all->tokens + from, n * sizeof *tail);
    if (mask)
        memcpy(mask, all->mask + from, n);
    *val = (struct token_buffer){tail, n, all->vocab_size, n, mask};
    return ZT_OK;
}

/* With a mask: the last floor(fraction * W) windows (at least one), whole,
 * so that no example of the one-window-per-example layout is cut. */
static zt_status split_windows(struct token_buffer *all, double fraction, size_t len,
                               struct token_buffer *val)
{
    const size_t windows = (all->n - 1) / len;
    size_t k = (size_t)floor((double)windows * fraction);
    k = k < 1 ? 1 : k;
    if (k >= windows)
        return zt_error_set(ZT_ERR_DATA,
                            "data: %zu windows (examples) are too few to split: %zu for "
                            "validation would leave none for training",
                            windows, k);
    const size_t from = (windows - k) * len;
    ZT_TRY(copy_range(all, from, k * len + 1, val));
    all->n = from + 1;
    return ZT_OK;
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
    if (all->mask)
        return split_windows(all, fraction, (size_t)seq_len, val);
    size_t n_val = (size_t)floor((double)all->n * fraction);
    if (n_val < window)
        n_val = window;
    if (n_val > all->n - window)
        return zt_error_set(ZT_ERR_DATA,
                            "data: %zu tokens are too few to split: %zu validation tokens would "
                            "leave %zu for training, fewer than seq_len + 1 = %zu",
                            all->n, n_val, n_val < all->n ? all->n - n_val : 0, window);
    ZT_TRY(copy_range(all, all->n - n_val, n_val, val));
    all->n -= n_val;
    return ZT_OK;
}
