/* common/size.c — byte sizes written as people write them (see size.h). */
#include "size.h"

#include <stdio.h>
#include <string.h>

#define FRACTION_DIGS 9 /* keeps the arithmetic exact in 64 bits */

int zt_size_parse(const char *text, uint64_t *bytes)
{
    static const struct {
        const char *unit;
        uint64_t scale;
    } units[] = {
        {"", 1},
        {"KB", 1000ull},
        {"MB", 1000000ull},
        {"GB", 1000000000ull},
        {"TB", 1000000000000ull},
        {"KiB", 1ull << 10},
        {"MiB", 1ull << 20},
        {"GiB", 1ull << 30},
        {"TiB", 1ull << 40},
    };
    const char *p = text;
    uint64_t whole = 0, frac = 0, frac_scale = 1;
    int digits = 0, frac_digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        const uint64_t d = (uint64_t)(*p - '0');
        if (whole > (UINT64_MAX - d) / 10)
            return 0;
        whole = whole * 10 + d;
    }
    int has_fraction = *p == '.';
    if (has_fraction)
        for (p++; *p >= '0' && *p <= '9'; p++, digits++) {
            if (++frac_digits > FRACTION_DIGS)
                return 0;
            frac = frac * 10 + (uint64_t)(*p - '0');
            frac_scale *= 10;
        }
    if (digits == 0)
        return 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        const uint64_t m = units[i].scale;
        if (strcmp(p, units[i].unit) != 0 || (has_fraction && m == 1) || whole > UINT64_MAX / m)
            continue;
        /* frac / frac_scale of m, rounded down, without overflow: m = q *
         * frac_scale + r, and frac * r < 10^18 */
        uint64_t part = frac * (m / frac_scale) + frac * (m % frac_scale) / frac_scale;
        if (whole * m > UINT64_MAX - part || whole * m + part == 0)
            return 0;
        *bytes = whole * m + part;
        return 1;
    }
    return 0;
}

void zt_size_format(uint64_t bytes, char *buf, size_t n)
{
    static const char *const units[] = {"KiB", "MiB", "GiB"};
    if (bytes < 10 * 1024) {
        snprintf(buf, n, "%llu B", (unsigned long long)bytes);
        return;
    }
    double v = (double)bytes / 1024;
    int u = 0;
    while (u < 2 && v >= 999.995) {
        v /= 1024;
        u++;
    }
    snprintf(buf, n, "%.2f %s", v, units[u]);
}
