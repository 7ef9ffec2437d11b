/* worker/backend.c — the table of compute backends and the choice among them.
 *
 * An entry names the device memory table (opened through device_open under
 * the same name), the op table and how to make the stream. The table is
 * static const and lists only what was built; the chosen entry's pieces are
 * copied into the caller's struct compute_backend, not kept in a global.
 * Unlike comm/, choosing is local (no collective): each rank opens its own
 * device, and a failure reaches the other ranks through the session's phase
 * agreement. Whether the communicator can reach the chosen memory is comm/'s
 * question, not this file's.
 */
#include "backend.h"

#include <stdio.h>
#include <string.h>

struct backend_entry {
    const char *name;
    /* >= 0: usable here; < 0: not, with the reason written into why. */
    int (*query)(char *why, size_t n);
    const struct ops_backend *(*ops)(void);
    int host_memory; /* 1: its device memory is host memory */
    /* NULL: the ops are synchronous and need no stream (stream stays NULL). */
    zt_status (*stream_create)(void **stream);
    void (*stream_destroy)(void *stream);
};

static int cpu_query(char *why, size_t n)
{
    (void)why;
    (void)n;
    return 0;
}

#ifdef ZT_HAVE_CUDA
/* CUDA device memory is built, CUDA compute ops are not: never usable yet,
 * and the reason also says whether a device is there at all. When the ops
 * exist, this becomes the device query alone and the entry gets its op
 * table and stream functions. */
static int cuda_query(char *why, size_t n)
{
    char dev_why[200] = "";
    if (device_cuda_backend()->query(dev_why, sizeof dev_why) < 0)
        snprintf(why, n, "CUDA compute ops are not built yet, and %s", dev_why);
    else
        snprintf(why, n, "CUDA compute ops are not built yet");
    return -1;
}
#endif

static const struct backend_entry entries[] = {
#ifdef ZT_HAVE_CUDA
    {"cuda", cuda_query, NULL, 0, NULL, NULL}, /* first: "auto" prefers the GPU */
#endif
    {"cpu", cpu_query, ops_cpu_backend, 1, NULL, NULL},
};
#define N_ENTRIES (sizeof entries / sizeof entries[0])

/* Every name a configuration may give, built or not. */
static int is_known(const char *name)
{
    return strcmp(name, "cpu") == 0 || strcmp(name, "cuda") == 0 || strcmp(name, "auto") == 0;
}

static const struct backend_entry *find(const char *name)
{
    for (size_t i = 0; i < N_ENTRIES; i++)
        if (strcmp(entries[i].name, name) == 0)
            return &entries[i];
    return NULL;
}

int compute_backend_query(const char *name, char *why, size_t n)
{
    if (!name || !is_known(name) || strcmp(name, "auto") == 0) {
        snprintf(why, n, "'%s' is not a backend (cpu, cuda)", name ? name : "(null)");
        return -1;
    }
    const struct backend_entry *e = find(name);
    if (!e) {
        snprintf(why, n, "not built into this binary (built without the CUDA toolkit)");
        return -1;
    }
    return e->query(why, n);
}

/* The entry `name` resolves to; see compute_backend_select. */
static zt_status choose(const char *name, const struct backend_entry **out)
{
    char why[256] = "";
    if (!name || !is_known(name))
        return zt_error_set(ZT_ERR_CONFIG, "device '%s': unknown (auto, cpu or cuda)",
                            name ? name : "(null)");
    if (strcmp(name, "auto") == 0) {
        for (size_t i = 0; i < N_ENTRIES; i++) {
            if (entries[i].query(why, sizeof why) >= 0) {
                *out = &entries[i];
                return ZT_OK;
            }
        }
        return zt_error_set(ZT_ERR_DEVICE, "device 'auto': no backend is usable here");
    }
    if (compute_backend_query(name, why, sizeof why) < 0)
        return zt_error_set(ZT_ERR_DEVICE, "device '%s': not usable here: %s", name, why);
    *out = find(name);
    return ZT_OK;
}

zt_status compute_backend_select(const char *name, const char **chosen)
{
    const struct backend_entry *e;
    ZT_TRY(choose(name, &e));
    *chosen = e->name;
    return ZT_OK;
}

zt_status compute_backend_open(const char *name, struct ledger *ledger, struct compute_backend *out)
{
    const struct backend_entry *e;
    memset(out, 0, sizeof *out);
    ZT_TRY(choose(name, &e));
    ZT_ASSERT(e->ops && "a usable backend has an op table");
    ZT_TRY(device_open(e->name, ledger, &out->dev));
    if (e->stream_create) {
        zt_status s = e->stream_create(&out->stream);
        if (s != ZT_OK) {
            memset(out, 0, sizeof *out);
            return s;
        }
    }
    out->name = e->name;
    out->ops = e->ops();
    out->host_memory = e->host_memory;
    return ZT_OK;
}

void compute_backend_close(struct compute_backend *be)
{
    if (be->name) {
        const struct backend_entry *e = find(be->name);
        if (e && e->stream_destroy && be->stream)
            e->stream_destroy(be->stream);
    }
    device_close(&be->dev);
    memset(be, 0, sizeof *be);
}
