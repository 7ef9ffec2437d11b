/* coordinator/metrics.c — see metrics.h. */
#include "metrics.h"

#include <errno.h>
#include <string.h>

zt_status metrics_open(const char *path, FILE **out)
{
    *out = fopen(path, "w");
    if (!*out)
        return zt_error_set(ZT_ERR_IO, "cannot write metrics file %s: %s", path, strerror(errno));
    return ZT_OK;
}

void metrics_write_step(FILE *f, const struct step_record *r)
{
    fprintf(f,
            "{\"step\": %ld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"step_ms\": %.4f, "
            "\"tokens_per_s\": %.2f, \"gflops\": %.4f, \"loss_scale\": %.9g, \"skipped\": %s, "
            "\"comm_bytes\": {",
            r->step, r->loss, r->lr, r->grad_norm, r->step_ms, r->tokens_per_s, r->gflops,
            r->loss_scale, r->skipped ? "true" : "false");
    for (int k = 0; k < COMM_KIND_COUNT; k++)
        fprintf(f, "%s\"%s\": %llu", k ? ", " : "", comm_kind_name((enum comm_kind)k),
                (unsigned long long)r->comm.bytes[k]);
    fprintf(f, "}, \"comm_calls\": {");
    for (int k = 0; k < COMM_KIND_COUNT; k++)
        fprintf(f, "%s\"%s\": %llu", k ? ", " : "", comm_kind_name((enum comm_kind)k),
                (unsigned long long)r->comm.calls[k]);
    fprintf(f, "}, \"comm_wait_ms\": %.4f}\n", r->comm.wait_seconds * 1e3);
    fflush(f);
}

void metrics_write_eval(FILE *f, long step, double val_loss, uint64_t tokens)
{
    fprintf(f, "{\"step\": %ld, \"val_loss\": %.9g, \"val_tokens\": %llu}\n", step, val_loss,
            (unsigned long long)tokens);
    fflush(f);
}
