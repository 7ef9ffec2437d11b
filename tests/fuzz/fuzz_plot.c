/* tests/fuzz/fuzz_plot.c — a run folder as `zerotrain plot` reads it:
 * metrics.jsonl and config.yaml (the first two pieces), memory_report.json
 * (the third) and memory_timeline.jsonl (the fourth, read for rank 0);
 * a missing piece is an empty file. These are zerotrain's own files, but
 * the folder plot is given may hold a damaged or foreign one. */
#include <stdio.h>

#include "fuzz.h"
#include "../../report/plot_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const names[] = {"metrics.jsonl", "config.yaml", "memory_report.json",
                                        "memory_timeline.jsonl"};
    struct fuzz_piece p[4];
    const size_t n = fuzz_split(data, size, p, 4);
    char paths[4][4096 + 64];
    for (size_t i = 0; i < 4; i++)
        snprintf(paths[i], sizeof paths[i], "%s",
                 fuzz_write(names[i], i < n ? p[i].data : NULL, i < n ? p[i].size : 0));
    struct plot_metrics m;
    fuzz_begin();
    if (fuzz_check(plot_metrics_read(fuzz_dir(), &m)) == ZT_OK)
        plot_metrics_free(&m);
    struct plot_memory_report r;
    fuzz_begin();
    if (fuzz_check(plot_memory_report_read(paths[2], &r)) == ZT_OK)
        plot_memory_report_free(&r);
    struct plot_timeline t;
    fuzz_begin();
    if (fuzz_check(plot_timeline_read(paths[3], 0, &t)) == ZT_OK)
        plot_timeline_free(&t);
    return 0;
}
