/* config/machine.c — machine files (see machine.h).
 *
 * One flat table names every key of the format as a dotted path, parents
 * before their children and each section's keys together, with how the
 * value is read and where it lives in struct machine. The reader walks the
 * YAML tree against it (unknown keys, missing keys, values), and the writer
 * prints it in table order, so the two cannot disagree on the format.
 *
 * Finding a file by name is a path join; only when that file is missing is
 * the folder listed, to say which names there are.
 */
#include "machine.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "../common/size.h"
#include "config_impl.h"
#include "yaml_tree.h"

#ifndef ZT_MACHINES_DIR
#error "ZT_MACHINES_DIR must be defined (config/CMakeLists.txt)"
#endif

enum kind {
    K_SECTION, /* a mapping of the rows below it */
    K_NAME,    /* char[64]: 1 to 63 characters */
    K_SIZE,    /* uint64_t bytes: zt_size_parse */
    K_COUNT,   /* int >= 1 */
    K_RATE,    /* double, finite and > 0 */
    K_GEMMS,   /* struct machine_gemm_table: a list of [threads, rows, in, out, 3 FLOP/s] rows */
    K_UPDATES, /* struct machine_update[]: a mapping of optimizer names to rates */
    K_BUSBW,   /* struct machine_busbw_table: a list of [bytes, 3 bus bytes/s] rows */
};

struct row {
    const char *path; /* dotted key path */
    enum kind kind;
    size_t off;       /* of the value in struct machine; 0 for sections */
    const char *unit; /* written as a comment after the value */
    int optional;     /* may be absent (its field, or a section's fields, stay 0, and are
                         not written while 0) */
};

#define OFF(member) offsetof(struct machine, member)
#define FLOPS(p)    (OFF(matmul_flops) + (p) * sizeof(double))
#define PEAK(p)     (OFF(peak_matmul_flops) + (p) * sizeof(double))
#define GEMMS(p)    (OFF(gemm_rates) + (p) * sizeof(struct machine_gemm_table))
#define ATTN(p)     (OFF(attention_flops) + (p) * sizeof(double))
#define BUSBW(link, p)                                                                             \
    (OFF(link) + offsetof(struct machine_link, busbw) + (p) * sizeof(struct machine_busbw_table))
#define BUSBW_NOTE "[bytes, allreduce, reduce_scatter, allgather] bus bytes/s by message size"

static const struct row rows[] = {
    {"name", K_NAME, OFF(name), NULL, 0},
    {"device_memory", K_SIZE, OFF(device_memory), "of one device", 0},
    {"devices_per_node", K_COUNT, OFF(devices_per_node), NULL, 0},
    {"cores", K_COUNT, OFF(cores), "of one node", 1},
    {"compute", K_SECTION, 0, NULL, 0},
    {"compute.matmul_flops", K_SECTION, 0, "sustained dense matmul FLOP/s of one device", 0},
    {"compute.matmul_flops.fp32", K_RATE, FLOPS(MACHINE_FP32), NULL, 0},
    {"compute.matmul_flops.bf16", K_RATE, FLOPS(MACHINE_BF16), NULL, 0},
    {"compute.matmul_flops.fp16", K_RATE, FLOPS(MACHINE_FP16), NULL, 0},
    {"compute.peak_matmul_flops", K_SECTION, 0, "the datasheet's dense peak (MFU's denominator)",
     1},
    {"compute.peak_matmul_flops.fp32", K_RATE, PEAK(MACHINE_FP32), NULL, 1},
    {"compute.peak_matmul_flops.bf16", K_RATE, PEAK(MACHINE_BF16), NULL, 1},
    {"compute.peak_matmul_flops.fp16", K_RATE, PEAK(MACHINE_FP16), NULL, 1},
    {"compute.memory_bandwidth", K_RATE, OFF(memory_bandwidth), "bytes/s", 0},
    {"compute.gemm_tile", K_COUNT, OFF(gemm_tile), "output tile edge of the GEMM kernels", 1},
    {"compute.gemm_rates", K_SECTION, 0,
     "[threads, rows, in, out, forward, input grad, weight grad FLOP/s] of measured layers", 1},
    {"compute.gemm_rates.fp32", K_GEMMS, GEMMS(MACHINE_FP32), NULL, 1},
    {"compute.gemm_rates.bf16", K_GEMMS, GEMMS(MACHINE_BF16), NULL, 1},
    {"compute.gemm_rates.fp16", K_GEMMS, GEMMS(MACHINE_FP16), NULL, 1},
    {"compute.update_rates", K_UPDATES, OFF(updates),
     "parameter elements/s of each optimizer's update", 1},
    {"compute.dequantize_4bit", K_RATE, OFF(dequantize_4bit), "4-bit weights dequantised per s", 1},
    {"compute.attention_flops", K_SECTION, 0,
     "one core's FLOP/s of the fused attention, forward and backward (12 T C a token)", 1},
    {"compute.attention_flops.fp32", K_RATE, ATTN(MACHINE_FP32), NULL, 1},
    {"compute.attention_flops.bf16", K_RATE, ATTN(MACHINE_BF16), NULL, 1},
    {"compute.attention_flops.fp16", K_RATE, ATTN(MACHINE_FP16), NULL, 1},
    {"compute.elementwise_bandwidth", K_RATE, OFF(elementwise_bandwidth),
     "bytes/s one core's element-wise ops move", 1},
    {"compute.weights_read", K_RATE, OFF(weights_read),
     "16-bit weights one core reads into fp32 per s (page cache)", 1},
    {"compute.weights_read_transposed", K_RATE, OFF(weights_read_transposed),
     "weights one core reads from a tensor stored transposed per s (page cache)", 1},
    {"compute.quantize_4bit", K_RATE, OFF(quantize_4bit),
     "weights one core encodes in 4 bits per s", 1},
    {"nvme", K_SECTION, 0, "the offload folder's disk: bytes/s of all the node's ranks", 1},
    {"nvme.read_bandwidth", K_RATE, OFF(nvme_read_bandwidth), NULL, 1},
    {"nvme.write_bandwidth", K_RATE, OFF(nvme_write_bandwidth), NULL, 1},
    {"links", K_SECTION, 0, "bus bandwidth in bytes/s, latency in s per collective step", 0},
    {"links.intra_node", K_SECTION, 0, NULL, 0},
    {"links.intra_node.bandwidth", K_RATE, OFF(intra_node.bandwidth), NULL, 0},
    {"links.intra_node.latency", K_RATE, OFF(intra_node.latency), NULL, 0},
    {"links.intra_node.busbw", K_SECTION, 0, BUSBW_NOTE, 1},
    {"links.intra_node.busbw.fp32", K_BUSBW, BUSBW(intra_node, MACHINE_FP32), NULL, 1},
    {"links.intra_node.busbw.bf16", K_BUSBW, BUSBW(intra_node, MACHINE_BF16), NULL, 1},
    {"links.intra_node.busbw.fp16", K_BUSBW, BUSBW(intra_node, MACHINE_FP16), NULL, 1},
    {"links.inter_node", K_SECTION, 0, NULL, 0},
    {"links.inter_node.bandwidth", K_RATE, OFF(inter_node.bandwidth), NULL, 0},
    {"links.inter_node.latency", K_RATE, OFF(inter_node.latency), NULL, 0},
    {"links.inter_node.busbw", K_SECTION, 0, BUSBW_NOTE, 1},
    {"links.inter_node.busbw.fp32", K_BUSBW, BUSBW(inter_node, MACHINE_FP32), NULL, 1},
    {"links.inter_node.busbw.bf16", K_BUSBW, BUSBW(inter_node, MACHINE_BF16), NULL, 1},
    {"links.inter_node.busbw.fp16", K_BUSBW, BUSBW(inter_node, MACHINE_FP16), NULL, 1},
};

#define N_ROWS (sizeof rows / sizeof rows[0])
#define WHERE  512
#define GOT    128

/* The last component of a dotted path. */
static const char *leaf(const char *path)
{
    const char *dot = strrchr(path, '.');
    return dot ? dot + 1 : path;
}

/* Whether `path` is a key directly inside the section `prefix` ("" for the
 * top level). */
static int is_child(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    if (n == 0)
        return strchr(path, '.') == NULL;
    return strncmp(path, prefix, n) == 0 && path[n] == '.' && strchr(path + n + 1, '.') == NULL;
}

/* "name, device_memory, ..." : the keys the section `prefix` expects. */
static void expected_keys(const char *prefix, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_ROWS && used < size; i++)
        if (is_child(rows[i].path, prefix))
            used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "",
                                     leaf(rows[i].path));
}

/* Keys an older calibrate wrote, and what replaced them. */
static const struct {
    const char *path, *advice;
} retired[] = {
    {"compute.gemm_measured", "replaced by compute.gemm_rates (each product apart, by thread "
                              "count): run zerotrain calibrate again"},
};

static zt_status unknown_key(const struct yaml_tree_node *key, const char *prefix)
{
    char where[WHERE], expected[256], path[256];
    yaml_tree_where(key, where, sizeof where);
    snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", key->text);
    for (size_t i = 0; i < sizeof retired / sizeof retired[0]; i++)
        if (strcmp(path, retired[i].path) == 0)
            return zt_error_set(ZT_ERR_CONFIG, "%s: %s is no longer read: %s", where, path,
                                retired[i].advice);
    expected_keys(prefix, expected, sizeof expected);
    return zt_error_set(ZT_ERR_CONFIG, "%s: unknown key '%s'%s%s (expected %s)", where, key->text,
                        *prefix ? " in " : "", prefix, expected);
}

static zt_status bad_value(const struct yaml_tree_node *v, const char *path, const char *expected)
{
    char where[WHERE], got[GOT];
    yaml_tree_where(v, where, sizeof where);
    yaml_tree_describe(v, got, sizeof got);
    return zt_error_set(ZT_ERR_CONFIG, "%s: %s: expected %s, got %s", where, path, expected, got);
}

static int is_plain(const struct yaml_tree_node *v)
{
    return v->kind == YAML_TREE_SCALAR && !v->quoted && !yaml_tree_is_null(v);
}

/* A positive finite decimal. strtod alone would also take "inf", "nan",
 * hex floats and surrounding space, which a machine file should not. */
static int parse_rate(const struct yaml_tree_node *v, double *out)
{
    if (!is_plain(v) || v->text[strspn(v->text, "0123456789+-.eE")] != '\0')
        return 0;
    char *end;
    errno = 0;
    double d = strtod(v->text, &end);
    if (end == v->text || *end != '\0' || errno == ERANGE || !isfinite(d) || !(d > 0))
        return 0;
    *out = d;
    return 1;
}

static int parse_count(const struct yaml_tree_node *v, int *out)
{
    if (!is_plain(v) || v->text[strspn(v->text, "0123456789")] != '\0')
        return 0;
    char *end;
    errno = 0;
    long n = strtol(v->text, &end, 10);
    if (end == v->text || *end != '\0' || errno == ERANGE || n < 1 || n > INT_MAX)
        return 0;
    *out = (int)n;
    return 1;
}

/* A list of at most MACHINE_MAX_GEMM_RATES rows [threads, rows, in, out,
 * forward, input grad, weight grad FLOP/s]. */
static zt_status read_gemms(const struct row *r, const struct yaml_tree_node *v,
                            struct machine_gemm_table *out)
{
    static const char expected[] = "a list of at most 64 [threads, rows, in, out, forward, input "
                                   "grad, weight grad FLOP/s] rows (4 positive integers, then 3 "
                                   "positive numbers)";
    if (v->kind != YAML_TREE_SEQUENCE || v->n > MACHINE_MAX_GEMM_RATES)
        return bad_value(v, r->path, expected);
    for (size_t i = 0; i < v->n; i++) {
        const struct yaml_tree_node *row = v->items[i];
        struct machine_gemm_rate *g = &out->row[i];
        int ok = row->kind == YAML_TREE_SEQUENCE && row->n == 4 + MACHINE_PRODUCTS;
        int *const dims[4] = {&g->threads, &g->rows, &g->in, &g->out};
        for (int k = 0; k < 4 && ok; k++)
            ok = parse_count(row->items[k], dims[k]);
        for (int k = 0; k < MACHINE_PRODUCTS && ok; k++)
            ok = parse_rate(row->items[4 + k], &g->flops[k]);
        if (!ok)
            return bad_value(row, r->path, expected);
    }
    out->n = (int)v->n;
    return ZT_OK;
}

/* A list of at most MACHINE_MAX_BUSBW rows [bytes, allreduce,
 * reduce_scatter, allgather bus bytes/s], sizes increasing. */
static zt_status read_busbw(const struct row *r, const struct yaml_tree_node *v,
                            struct machine_busbw_table *out)
{
    static const char expected[] = "a list of at most 24 [bytes, allreduce, reduce_scatter, "
                                   "allgather bus bytes/s] rows (sizes increasing, rates "
                                   "positive)";
    if (v->kind != YAML_TREE_SEQUENCE || v->n > MACHINE_MAX_BUSBW)
        return bad_value(v, r->path, expected);
    for (size_t i = 0; i < v->n; i++) {
        const struct yaml_tree_node *row = v->items[i];
        struct machine_busbw *b = &out->row[i];
        int ok = row->kind == YAML_TREE_SEQUENCE && row->n == 1 + MACHINE_COLLECTIVES &&
                 parse_rate(row->items[0], &b->bytes) && (i == 0 || b->bytes > b[-1].bytes);
        for (int k = 0; k < MACHINE_COLLECTIVES && ok; k++)
            ok = parse_rate(row->items[1 + k], &b->busbw[k]);
        if (!ok)
            return bad_value(row, r->path, expected);
    }
    out->n = (int)v->n;
    return ZT_OK;
}

/* A mapping of at most MACHINE_MAX_UPDATES optimizer names to rates. */
static zt_status read_updates(const struct row *r, const struct yaml_tree_node *v,
                              struct machine *m)
{
    static const char expected[] = "a mapping of at most 8 optimizer names (1 to 23 characters) "
                                   "to positive numbers";
    if (v->kind != YAML_TREE_MAP || v->n > MACHINE_MAX_UPDATES)
        return bad_value(v, r->path, expected);
    for (size_t i = 0; i < v->n; i++) {
        struct machine_update *u = &m->updates[i];
        const char *name = v->keys[i]->text;
        if (!name[0] || strlen(name) >= sizeof u->optimizer || !parse_rate(v->items[i], &u->rate))
            return bad_value(v->items[i], r->path, expected);
        strcpy(u->optimizer, name);
    }
    m->n_updates = (int)v->n;
    return ZT_OK;
}

double machine_update_rate(const struct machine *m, const char *name)
{
    for (int i = 0; i < m->n_updates; i++)
        if (strcasecmp(m->updates[i].optimizer, name) == 0)
            return m->updates[i].rate;
    return 0.0;
}

static zt_status read_value(const struct row *r, const struct yaml_tree_node *v, struct machine *m)
{
    char *field = (char *)m + r->off;
    switch (r->kind) {
    case K_NAME:
        if (v->kind != YAML_TREE_SCALAR || yaml_tree_is_null(v) || v->text[0] == '\0' ||
            strlen(v->text) >= sizeof m->name)
            return bad_value(v, r->path, "a string of 1 to 63 characters");
        strcpy(m->name, v->text);
        return ZT_OK;
    case K_SIZE:
        if (v->kind != YAML_TREE_SCALAR || !zt_size_parse(v->text, (uint64_t *)(void *)field))
            return bad_value(v, r->path, "a size such as 80GiB or a number of bytes");
        return ZT_OK;
    case K_COUNT:
        if (!parse_count(v, (int *)(void *)field))
            return bad_value(v, r->path, "an integer >= 1");
        return ZT_OK;
    case K_RATE:
        if (!parse_rate(v, (double *)(void *)field))
            return bad_value(v, r->path, "a positive number");
        return ZT_OK;
    case K_GEMMS:
        return read_gemms(r, v, (struct machine_gemm_table *)(void *)field);
    case K_UPDATES:
        return read_updates(r, v, m);
    case K_BUSBW:
        return read_busbw(r, v, (struct machine_busbw_table *)(void *)field);
    case K_SECTION:
        break;
    }
    ZT_ASSERT(0);
    return ZT_ERR_INTERNAL;
}

/* Every key of `map` has a row; then every row of the section is present
 * and read, in table order, so the first missing key reported is the first
 * in the format. */
static zt_status read_section(const struct yaml_tree_node *map, const char *prefix,
                              struct machine *m)
{
    for (size_t k = 0; k < map->n; k++) {
        size_t i = 0;
        while (i < N_ROWS && !(is_child(rows[i].path, prefix) &&
                               strcmp(leaf(rows[i].path), map->keys[k]->text) == 0))
            i++;
        if (i == N_ROWS)
            return unknown_key(map->keys[k], prefix);
    }
    for (size_t i = 0; i < N_ROWS; i++) {
        if (!is_child(rows[i].path, prefix))
            continue;
        const struct yaml_tree_node *v = yaml_tree_get(map, leaf(rows[i].path));
        if (!v && rows[i].optional)
            continue;
        if (!v)
            return zt_error_set(ZT_ERR_CONFIG, "%s: missing key %s", map->origin, rows[i].path);
        if (rows[i].kind != K_SECTION)
            ZT_TRY(read_value(&rows[i], v, m));
        else if (v->kind != YAML_TREE_MAP)
            return bad_value(v, rows[i].path, "a mapping");
        else
            ZT_TRY(read_section(v, rows[i].path, m));
    }
    return ZT_OK;
}

static zt_status read_tree(const struct yaml_tree *t, const char *path, struct machine *m)
{
    if (!t->root)
        return zt_error_set(ZT_ERR_CONFIG, "%s: empty machine file", path);
    if (t->root->kind != YAML_TREE_MAP) {
        char where[WHERE], got[GOT], expected[256];
        yaml_tree_where(t->root, where, sizeof where);
        yaml_tree_describe(t->root, got, sizeof got);
        expected_keys("", expected, sizeof expected);
        return zt_error_set(ZT_ERR_CONFIG, "%s: a machine file must be a mapping of %s; got %s",
                            where, expected, got);
    }
    return read_section(t->root, "", m);
}

/* ---- finding a machine by name ---------------------------------------- */

static const char *machines_dir(void)
{
    const char *env = getenv("ZT_MACHINES_DIR");
    return env && *env ? env : ZT_MACHINES_DIR;
}

static int is_path(const char *s)
{
    size_t n = strlen(s);
    return strchr(s, '/') != NULL || (n >= 5 && strcmp(s + n - 5, ".yaml") == 0);
}

/* The stem of a "NAME.yaml" entry into stem (sized NAME_MAX + 1); 0 for
 * other entries. */
static int yaml_stem(const char *entry, char *stem)
{
    size_t n = strlen(entry);
    if (n <= 5 || n > NAME_MAX || strcmp(entry + n - 5, ".yaml") != 0 || entry[0] == '.')
        return 0;
    memcpy(stem, entry, n - 5);
    stem[n - 5] = '\0';
    return 1;
}

/* "a, b, c" : the machine names in dir in sorted order, truncated to
 * `size`. Each pass picks the smallest name after the last one written,
 * which needs no allocation; a folder of machines is small. */
static void list_names(DIR *d, char *buf, size_t size)
{
    char last[NAME_MAX + 1] = "", best[NAME_MAX + 1], stem[NAME_MAX + 1];
    size_t used = 0;
    buf[0] = '\0';
    for (int have = 1; have && used < size;) {
        have = 0;
        rewinddir(d);
        for (struct dirent *e; (e = readdir(d)) != NULL;)
            if (yaml_stem(e->d_name, stem) && (!used || strcmp(stem, last) > 0) &&
                (!have || strcmp(stem, best) < 0)) {
                strcpy(best, stem);
                have = 1;
            }
        if (have) {
            used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", best);
            strcpy(last, best);
        }
    }
}

static zt_status no_such_machine(const char *name, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return zt_error_set(ZT_ERR_CONFIG,
                            "no machine '%s': cannot list the machines folder %s: %s", name, dir,
                            strerror(errno));
    char names[1024];
    list_names(d, names, sizeof names);
    closedir(d);
    if (!names[0])
        return zt_error_set(ZT_ERR_CONFIG, "no machine '%s' in %s (there are none)", name, dir);
    return zt_error_set(ZT_ERR_CONFIG, "no machine '%s' in %s (there are: %s)", name, dir, names);
}

/* The file to read for `name_or_path` into path (sized like machine.path). */
static zt_status resolve(const char *name_or_path, char *path, size_t size)
{
    if (!*name_or_path)
        return zt_error_set(ZT_ERR_CONFIG, "machine_load: empty machine name");
    const char *dir = machines_dir();
    int n = is_path(name_or_path) ? snprintf(path, size, "%s", name_or_path)
                                  : snprintf(path, size, "%s/%s.yaml", dir, name_or_path);
    if (n < 0 || (size_t)n >= size)
        return zt_error_set(ZT_ERR_CONFIG, "machine_load: path too long: %s", name_or_path);
    struct stat sb;
    if (!is_path(name_or_path) && stat(path, &sb) != 0 && errno == ENOENT)
        return no_such_machine(name_or_path, dir);
    return ZT_OK;
}

zt_status machine_load(const char *name_or_path, struct machine *out)
{
    struct yaml_tree *t = NULL;
    memset(out, 0, sizeof *out);
    zt_status s = resolve(name_or_path, out->path, sizeof out->path);
    if (s == ZT_OK)
        s = yaml_tree_load_file(out->path, &t);
    if (s == ZT_OK)
        s = read_tree(t, out->path, out);
    yaml_tree_free(t);
    if (s != ZT_OK) {
        memset(out, 0, sizeof *out); /* nothing half-read escapes */
        zt_error_trace_push(__FILE__, __LINE__);
    }
    return s;
}

/* ---- writing ------------------------------------------------------------ */

/* The shortest %g form that reads back as the same double: exact like
 * %.17g, and 6.9258e+14 reads better than 692580000000000. */
/* The largest binary unit that divides the size exactly, so 80 GiB reads
 * as 80GiB; zt_size_parse reads it back to the same bytes. */
static void put_size(FILE *f, uint64_t bytes)
{
    static const char *const units[] = {"TiB", "GiB", "MiB", "KiB"};
    for (int i = 0; i < 4; i++) {
        uint64_t scale = 1ull << (10 * (4 - i));
        if (bytes % scale == 0) {
            fprintf(f, "%llu%s", (unsigned long long)(bytes / scale), units[i]);
            return;
        }
    }
    fprintf(f, "%llu", (unsigned long long)bytes);
}

static void put_comment(FILE *f, const char *comment)
{
    while (comment && *comment) {
        size_t n = strcspn(comment, "\n");
        if (n)
            fprintf(f, "# %.*s\n", (int)n, comment);
        else
            fputs("#\n", f);
        comment += n + (comment[n] == '\n');
    }
}

static void put_row(FILE *f, const struct row *r, const struct machine *m)
{
    const char *field = (const char *)m + r->off;
    int depth = 0;
    for (const char *p = r->path; *p; p++)
        depth += *p == '.';
    fprintf(f, "%*s%s:", 2 * depth, "", leaf(r->path));
    if (r->kind != K_SECTION && r->kind != K_GEMMS && r->kind != K_BUSBW)
        fputc(' ', f);
    switch (r->kind) {
    case K_SECTION:
        break;
    case K_NAME:
        config_write_quoted(f, field);
        break;
    case K_SIZE:
        put_size(f, *(const uint64_t *)(const void *)field);
        break;
    case K_COUNT:
        fprintf(f, "%d", *(const int *)(const void *)field);
        break;
    case K_RATE:
        config_write_double(f, *(const double *)(const void *)field);
        break;
    case K_GEMMS: {
        const struct machine_gemm_table *g = (const void *)field;
        fputc('\n', f);
        for (int i = 0; i < g->n; i++) {
            const struct machine_gemm_rate *w = &g->row[i];
            fprintf(f, "%*s- [%d, %d, %d, %d", 2 * depth + 2, "", w->threads, w->rows, w->in,
                    w->out);
            for (int k = 0; k < MACHINE_PRODUCTS; k++) {
                fputs(", ", f);
                config_write_double(f, w->flops[k]);
            }
            fputs("]\n", f);
        }
        return;
    }
    case K_BUSBW: {
        const struct machine_busbw_table *b = (const void *)field;
        fputc('\n', f);
        for (int i = 0; i < b->n; i++) {
            fprintf(f, "%*s- [", 2 * depth + 2, "");
            config_write_double(f, b->row[i].bytes);
            for (int k = 0; k < MACHINE_COLLECTIVES; k++) {
                fputs(", ", f);
                config_write_double(f, b->row[i].busbw[k]);
            }
            fputs("]\n", f);
        }
        return;
    }
    case K_UPDATES:
        fprintf(f, "# %s\n", r->unit);
        for (int i = 0; i < m->n_updates; i++) {
            fprintf(f, "%*s%s: ", 2 * depth + 2, "", m->updates[i].optimizer);
            config_write_double(f, m->updates[i].rate);
            fputc('\n', f);
        }
        return;
    }
    if (r->unit)
        fprintf(f, " # %s", r->unit);
    fputc('\n', f);
}

/* Whether an optional row holds 0, its "not stated": its count or rate,
 * or every row of its section. */
static int is_unset(const struct row *r, const struct machine *m)
{
    const void *field = (const char *)m + r->off;
    switch (r->kind) {
    case K_COUNT:
        return *(const int *)field == 0;
    case K_RATE:
        return *(const double *)field == 0.0;
    case K_GEMMS:
        return ((const struct machine_gemm_table *)field)->n == 0;
    case K_BUSBW:
        return ((const struct machine_busbw_table *)field)->n == 0;
    case K_UPDATES:
        return m->n_updates == 0;
    case K_SECTION:
        for (size_t i = 0; i < N_ROWS; i++)
            if (is_child(rows[i].path, r->path) && !is_unset(&rows[i], m))
                return 0;
        return 1;
    default:
        ZT_ASSERT(0);
        return 0;
    }
}

zt_status machine_write(const struct machine *m, const char *comment, FILE *f)
{
    put_comment(f, comment);
    for (size_t i = 0; i < N_ROWS; i++)
        if (!rows[i].optional || !is_unset(&rows[i], m))
            put_row(f, &rows[i], m);
    if (fflush(f) != 0 || ferror(f))
        return zt_error_set(ZT_ERR_IO, "machine_write: cannot write machine '%s': %s", m->name,
                            strerror(errno));
    return ZT_OK;
}
