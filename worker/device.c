/* worker/device.c — backend selection and ledger-counted allocation. */
#include "device.h"

#include <string.h>

static const struct device_backend_ops *find_backend(const char *name)
{
    if (strcmp(name, "cpu") == 0)
        return device_cpu_backend();
#ifdef ZT_HAVE_CUDA
    if (strcmp(name, "cuda") == 0)
        return device_cuda_backend();
#endif
    return NULL;
}

zt_status device_open(const char *name, struct ledger *ledger, struct device *out)
{
    char why[256] = "";
    const struct device_backend_ops *ops;

    if (strcmp(name, "auto") == 0) {
#ifdef ZT_HAVE_CUDA
        ops = device_cuda_backend();
        if (ops->query(why, sizeof why) < 0)
            ops = device_cpu_backend();
#else
        ops = device_cpu_backend();
#endif
    } else {
        ops = find_backend(name);
        if (!ops)
            return zt_error_set(ZT_ERR_CONFIG, "device '%s': unknown or not built (built: cpu%s)",
                                name,
#ifdef ZT_HAVE_CUDA
                                ", cuda"
#else
                                ""
#endif
            );
        if (ops->query(why, sizeof why) < 0)
            return zt_error_set(ZT_ERR_DEVICE, "device '%s' is not usable here: %s", name, why);
    }
    out->ops = ops;
    out->ledger = ledger;
    return ZT_OK;
}

zt_status device_alloc_uninit(const struct device *d, enum ledger_category cat, size_t bytes,
                              const char *what, void **out)
{
    *out = NULL;
    if (!d->ledger->plan_only && bytes > 0) {
        ZT_TRY(d->ops->alloc(bytes, out));
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
    zt_status s = *out ? d->ops->memset_zero(*out, bytes) : ZT_OK;
    if (s != ZT_OK) {
        device_free(d, cat, bytes, *out);
        *out = NULL;
    }
    return s;
}

void device_free(const struct device *d, enum ledger_category cat, size_t bytes, void *p)
{
    if (p)
        d->ops->free(p);
    ledger_sub(d->ledger, cat, bytes);
}
