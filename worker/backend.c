/* worker/backend.c — the table of compute backends and the choice among them.
 *
 * An entry names the device memory table (opened through device_open under
 * the same name), how to make a device current, and how to open and close
 * its op table with the stream the ops run on. The CPU's entry is static;
 * the CUDA one comes from the module zt_cuda.so (worker/cuda_module.h),
 * loaded only when a run names "cuda", or names "auto" on a machine with
 * an NVIDIA driver. What an open makes is kept in the caller's struct
 * compute_backend, not in a global.
 * Unlike comm/, choosing is local (no collective): each rank opens its own
 * device, and a failure reaches the other ranks through the session's phase
 * agreement. Whether the communicator can reach the chosen memory is comm/'s
 * question, not this file's.
 */
#include "backend.h"

#include "cuda_module.h"

#include <stdio.h>
#include <string.h>

/* What one open needs of a backend; the CPU's is static, the CUDA one is
 * filled from the module's table. */
struct backend_entry {
    const char *name;
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

static zt_status cpu_ops_open(const struct ops_backend **ops, void **stream)
{
    *stream = NULL;
    return ops_cpu_open(ops);
}

static const struct backend_entry cpu_entry = {"cpu",         1,    NULL, cpu_ops_open,
                                               ops_cpu_close, NULL, NULL, NULL};

/* The CUDA entry from the module when it loads and sees a GPU: >= 0, or
 * -1 with why. */
static int cuda_entry(struct backend_entry *out, char *why, size_t n)
{
    const struct cuda_worker_table *t;
    if (cuda_worker_table(&t, why, n) < 0 || t->device->query(why, n) < 0)
        return -1;
    *out = (struct backend_entry){"cuda",       0,          t->bind,         t->ops_open,
                                  t->ops_close, t->devices, t->pinned_alloc, t->pinned_free};
    return 0;
}

/* Every name a configuration may give. */
static int is_known(const char *name)
{
    return strcmp(name, "cpu") == 0 || strcmp(name, "cuda") == 0 || strcmp(name, "auto") == 0;
}

int compute_backend_query(const char *name, char *why, size_t n)
{
    struct backend_entry e;
    if (!name || !is_known(name) || strcmp(name, "auto") == 0) {
        snprintf(why, n, "'%s' is not a backend (cpu, cuda)", name ? name : "(null)");
        return -1;
    }
    return strcmp(name, "cpu") == 0 ? 0 : cuda_entry(&e, why, n);
}

/* The entry `name` resolves to ("auto": the GPU where the driver is
 * present and the module sees one, else the CPU); see
 * compute_backend_select. */
static zt_status choose(const char *name, struct backend_entry *out)
{
    char why[512] = "";
    if (!name || !is_known(name))
        return zt_error_set(ZT_ERR_CONFIG, "device '%s': unknown (auto, cpu or cuda)",
                            name ? name : "(null)");
    if (strcmp(name, "auto") == 0) {
        if (!cuda_driver_present() || cuda_entry(out, why, sizeof why) < 0)
            *out = cpu_entry;
        return ZT_OK;
    }
    if (strcmp(name, "cpu") == 0)
        *out = cpu_entry;
    else if (cuda_entry(out, why, sizeof why) < 0)
        return zt_error_set(ZT_ERR_DEVICE, "device '%s': not usable here: %s", name, why);
    return ZT_OK;
}

zt_status compute_backend_select(const char *name, const char **chosen)
{
    struct backend_entry e;
    ZT_TRY(choose(name, &e));
    *chosen = e.name;
    return ZT_OK;
}

zt_status compute_backend_devices(const char *name, int *count)
{
    struct backend_entry e;
    *count = 0;
    ZT_TRY(choose(name, &e));
    return e.devices ? e.devices(count) : ZT_OK;
}

zt_status compute_backend_open(const char *name, int ordinal, struct ledger *ledger,
                               struct compute_backend *out)
{
    struct backend_entry e;
    memset(out, 0, sizeof *out);
    ZT_TRY(choose(name, &e));
    if (e.bind)
        ZT_TRY(e.bind(ordinal));
    ZT_TRY(device_open(e.name, ledger, &out->dev));
    zt_status s = e.ops_open(&out->ops, &out->stream);
    if (s != ZT_OK) {
        device_close(&out->dev);
        memset(out, 0, sizeof *out);
        return s;
    }
    out->name = e.name;
    out->host_memory = e.host_memory;
    out->pinned_alloc = e.pinned_alloc;
    out->pinned_free = e.pinned_free;
    out->ops_close = e.ops_close;
    return ZT_OK;
}

void compute_backend_close(struct compute_backend *be)
{
    if (be->ops_close)
        be->ops_close(be->ops);
    device_close(&be->dev);
    memset(be, 0, sizeof *be);
}
