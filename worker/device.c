/* worker/device.c — backend selection, the backend's state, and
 * ledger-counted allocation. */
#include "device.h"

#include "cuda_module.h"

#include <stdio.h>
#include <string.h>

/* The CUDA module's device memory, or NULL with the reason in why. */
static const struct device_backend_ops *cuda_memory(char *why, size_t n)
{
    const struct cuda_worker_table *t;
    return cuda_worker_table(&t, why, n) < 0 ? NULL : t->device;
}

/* The table `name` names ("auto": CUDA where a GPU answers, else the CPU). */
static zt_status find_backend(const char *name, const struct device_backend_ops **out)
{
    char why[512] = "";
    const struct device_backend_ops *ops = NULL;
    if (strcmp(name, "auto") == 0) {
        ops = cuda_driver_present() ? cuda_memory(why, sizeof why) : NULL;
        *out = ops && ops->query(why, sizeof why) >= 0 ? ops : device_cpu_backend();
        return ZT_OK;
    }
    if (strcmp(name, "cpu") == 0)
        ops = device_cpu_backend();
    else if (strcmp(name, "cuda") == 0)
        ops = cuda_memory(why, sizeof why);
    else
        return zt_error_set(ZT_ERR_CONFIG, "device '%s': unknown (auto, cpu or cuda)", name);
    if (!ops || ops->query(why, sizeof why) < 0)
        return zt_error_set(ZT_ERR_DEVICE, "device '%s' is not usable here: %s", name, why);
    *out = ops;
    return ZT_OK;
}

zt_status device_open(const char *name, struct ledger *ledger, struct device *out)
{
    const struct device_backend_ops *ops;
    ZT_TRY(find_backend(name, &ops));
    *out = (struct device){.ops = ops, .ledger = ledger};
    zt_status (*open)(struct device *) = ledger->plan_only ? ops->plan_open : ops->open;
    if (open) {
        zt_status s = open(out);
        if (s != ZT_OK) {
            memset(out, 0, sizeof *out);
            return s;
        }
    }
    return ZT_OK;
}

void device_close(struct device *d)
{
    if (d->ops && d->ops->close && d->state)
        d->ops->close(d);
    memset(d, 0, sizeof *d);
}

zt_status device_memory_info(const struct device *d, struct device_memory_info *out)
{
    memset(out, 0, sizeof *out);
    return d->ops->memory_info(d, out);
}

/* Names the buffer in a backend's out-of-memory message, which knows the
 * pool's numbers but not what the bytes were for. */
static zt_status name_failure(const struct device *d, size_t bytes, const char *what, zt_status s)
{
    char why[512];
    snprintf(why, sizeof why, "%s", zt_error_message());
    return zt_error_set(s, "cannot allocate %zu bytes for %s on %s: %s", bytes, what, d->ops->name,
                        why);
}

zt_status device_alloc_uninit(const struct device *d, enum ledger_category cat, size_t bytes,
                              const char *what, void **out)
{
    *out = NULL;
    if (d->ledger->plan_only && bytes > 0 && d->ops->plan_alloc)
        d->ops->plan_alloc(d, bytes);
    if (!d->ledger->plan_only && bytes > 0) {
        zt_status s = d->ops->alloc(d, bytes, out);
        if (s != ZT_OK) {
            *out = NULL;
            return name_failure(d, bytes, what, s);
        }
        if (!*out)
            return zt_error_set(ZT_ERR_NOMEM, "cannot allocate %zu bytes for %s on %s", bytes, what,
                                d->ops->name);
    }
    ledger_add(d->ledger, cat, bytes);
    return ZT_OK;
}

zt_status device_alloc(const struct device *d, enum ledger_category cat, size_t bytes,
                       const char *what, void **out)
{
    ZT_TRY(device_alloc_uninit(d, cat, bytes, what, out));
    zt_status s = *out ? d->ops->memset_zero(d, *out, bytes) : ZT_OK;
    if (s != ZT_OK) {
        device_free(d, cat, bytes, *out);
        *out = NULL;
    }
    return s;
}

void device_free(const struct device *d, enum ledger_category cat, size_t bytes, void *p)
{
    if (p)
        d->ops->free(d, p);
    else if (d->ledger->plan_only && bytes > 0 && d->ops->plan_free)
        d->ops->plan_free(d, bytes);
    ledger_sub(d->ledger, cat, bytes);
}
