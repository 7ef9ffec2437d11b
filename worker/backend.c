/* worker/backend.c — the table of compute backends and the choice among them.
 *
 * An entry names the device memory table (opened through device_open under
 * the same name), how to make a device current, and how to open and close
 * its op table with the stream the ops run on. The table is static const
 * and lists only what was built; what an open makes is kept in the caller's
 * struct compute_backend, not in a global.
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
    int host_memory; /* 1: its device memory is host memory */
    /* Makes device `ordinal` current for the opening thread (-1: keep the
     * current one) before its memory and ops open; NULL: one device only. */
    zt_status (*bind)(int ordinal);
    /* The op table for one open (a static one, or one made for this open
     * with its ctx) and the queue its ops run on (NULL: synchronous ops). */
    zt_status (*ops_open)(const struct ops_backend **ops, void **stream);
    /* Releases what ops_open made; NULL: it made nothing. */
    void (*ops_close)(const struct ops_backend *ops);
    /* How many devices this process sees to bind ranks to; NULL: none to
     * choose among (the CPU). */
    zt_status (*devices)(int *count);
    /* Page-locked host memory; NULL where device memory is host memory. */
    zt_status (*pinned_alloc)(size_t bytes, void **out);
    void (*pinned_free)(void *p);
};

static int cpu_query(char *why, size_t n)
{
    (void)why;
    (void)n;
    return 0;
}

static zt_status cpu_ops_open(const struct ops_backend **ops, void **stream)
{
    *stream = NULL;
    return ops_cpu_open(ops);
}

#ifdef ZT_HAVE_CUDA
/* Usable wherever the CUDA runtime sees a device. */
static int cuda_query(char *why, size_t n)
{
    return device_cuda_backend()->query(why, n);
}
#endif

static const struct backend_entry entries[] = {
#ifdef ZT_HAVE_CUDA
    /* first: "auto" prefers the GPU */
    {"cuda", cuda_query, 0, ops_cuda_bind, ops_cuda_open, ops_cuda_close, ops_cuda_devices,
     ops_cuda_pinned_alloc, ops_cuda_pinned_free},
#endif
    {"cpu", cpu_query, 1, NULL, cpu_ops_open, ops_cpu_close, NULL, NULL, NULL},
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

zt_status compute_backend_devices(const char *name, int *count)
{
    const struct backend_entry *e;
    *count = 0;
    ZT_TRY(choose(name, &e));
    return e->devices ? e->devices(count) : ZT_OK;
}

zt_status compute_backend_open(const char *name, int ordinal, struct ledger *ledger,
                               struct compute_backend *out)
{
    const struct backend_entry *e;
    memset(out, 0, sizeof *out);
    ZT_TRY(choose(name, &e));
    if (e->bind)
        ZT_TRY(e->bind(ordinal));
    ZT_TRY(device_open(e->name, ledger, &out->dev));
    zt_status s = e->ops_open(&out->ops, &out->stream);
    if (s != ZT_OK) {
        device_close(&out->dev);
        memset(out, 0, sizeof *out);
        return s;
    }
    out->name = e->name;
    out->host_memory = e->host_memory;
    out->pinned_alloc = e->pinned_alloc;
    out->pinned_free = e->pinned_free;
    return ZT_OK;
}

void compute_backend_close(struct compute_backend *be)
{
    if (be->name) {
        const struct backend_entry *e = find(be->name);
        if (e && e->ops_close)
            e->ops_close(be->ops);
    }
    device_close(&be->dev);
    memset(be, 0, sizeof *be);
}
