/* report/rss_model.c — see rss_model.h. */
#include "rss_model.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/endian.h"
#include "../common/size.h"

uint64_t rss_parts_total(const struct rss_parts *p)
{
    return p->baseline + p->runtime + p->counted + p->data;
}

void rss_parts_write_json(const struct rss_parts *p, FILE *f)
{
    fprintf(f,
            "{\"baseline\": %llu, \"runtime\": %llu, \"counted\": %llu, \"data\": %llu, "
            "\"total\": %llu}",
            (unsigned long long)p->baseline, (unsigned long long)p->runtime,
            (unsigned long long)p->counted, (unsigned long long)p->data,
            (unsigned long long)rss_parts_total(p));
}

void rss_parts_format(const struct rss_parts *p, char *buf, size_t n)
{
    const uint64_t v[5] = {p->baseline, p->runtime, p->counted, p->data, rss_parts_total(p)};
    char b[5][32];
    for (int k = 0; k < 5; k++)
        zt_size_format(v[k], b[k], sizeof b[k]);
    snprintf(buf, n, "%s + %s + %s + %s = %s", b[0], b[1], b[2], b[3], b[4]);
}

uint64_t rss_counted(const uint64_t peak[LEDGER_CATEGORY_COUNT], uint64_t total_peak,
                     int host_memory, uint64_t offload_host_peak, uint64_t kept)
{
    return host_memory ? total_peak + kept : offload_host_peak + peak[LEDGER_LOAD];
}

static int capped(int n, int cap)
{
    return n < 1 ? 1 : n < cap ? n : cap;
}

zt_status rss_probe_runtime(const struct compute_backend *be, enum zt_dtype t, int rows, int C,
                            int OC, uint64_t *out)
{
    *out = 0;
    if (!be->host_memory)
        return ZT_OK;
    rows = capped(rows, 1024);
    C = capped(C, 4096);
    OC = capped(OC, 4096);
    const size_t esz = zt_dtype_size(t), nin = (size_t)rows * C, nw = (size_t)OC * C,
                 nout = (size_t)rows * OC;
    const uint64_t before = ledger_rss_now();
    /* zeros: the libraries' paths do not depend on the values */
    void *in = calloc(nin, esz), *w = calloc(nw, esz), *y = calloc(nout, esz);
    void *din = calloc(nin, esz);
    float *dw = calloc(nw, sizeof *dw);
    zt_status st = in && w && y && din && dw
                       ? ZT_OK
                       : zt_error_set(ZT_ERR_NOMEM, "cannot allocate the runtime probe's %zu bytes",
                                      (2 * nin + nw + nout) * esz + nw * sizeof *dw);
    if (st == ZT_OK)
        st = be->ops->matmul_forward(be->ops, t, y, in, w, NULL, rows, C, OC);
    if (st == ZT_OK)
        st = be->ops->matmul_backward(be->ops, t, din, dw, NULL, y, in, w, rows, C, OC);
    free(in);
    free(w);
    free(y);
    free(din);
    free(dw);
    const uint64_t after = ledger_rss_now();
    *out = after > before ? after - before : 0;
    return st;
}

/* Tokens of one file: a token file's header count, else its bytes. */
static uint64_t file_tokens(const char *path, uint64_t size)
{
    unsigned char h[32];
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    const size_t got = fread(h, 1, sizeof h, f);
    fclose(f);
    if (got == sizeof h && memcmp(h, "ZTTOKENS", 8) == 0)
        return zt_get_le(h + 24, 8);
    return size;
}

static uint64_t path_tokens(const char *path, int depth)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return 0;
    if (S_ISREG(sb.st_mode))
        return file_tokens(path, (uint64_t)sb.st_size);
    if (!S_ISDIR(sb.st_mode) || depth > 8)
        return 0;
    DIR *d = opendir(path);
    uint64_t n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        n += path_tokens(sub, depth + 1);
    }
    if (d)
        closedir(d);
    return n;
}

uint64_t rss_data_estimate(char *const *paths, int n)
{
    uint64_t tokens = 0;
    for (int i = 0; i < n; i++)
        tokens += path_tokens(paths[i], 0);
    return tokens * sizeof(int32_t);
}
