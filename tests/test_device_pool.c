/* tests/test_device_pool.c — the caching sub-allocator (worker/device_pool.h)
 * and the device memory table's per-open state and memory numbers
 * (worker/device.h).
 *
 * The pool only does address arithmetic, so most cases run it over made-up
 * addresses (nothing is ever dereferenced) and one over real host memory.
 * The randomized case replays thousands of allocations and frees against a
 * naive model: a byte map of the region saying which bytes are in use, from
 * which it derives what best fit must return, the largest free block and the
 * number of free blocks after coalescing.
 *
 * Freeing a pointer the pool did not hand out, or freeing one twice, must
 * stop the process (ZT_ASSERT, SIGABRT): those cases need Check's fork mode,
 * the default for this serial suite.
 */
#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "worker/device.h"
#include "worker/device_pool.h"

#define A DEVICE_POOL_ALIGN

/* A made-up region start: aligned, never dereferenced. */
static void *fake_base(void)
{
    return (void *)(uintptr_t)0x40000000u;
}

static size_t rounded(size_t n)
{
    return n == 0 ? A : (n + A - 1) / A * A;
}

static struct device_pool *pool_over(void *base, size_t bytes)
{
    struct device_pool *p = NULL;
    ck_assert_int_eq(device_pool_create(base, bytes, &p), ZT_OK);
    ck_assert_ptr_nonnull(p);
    return p;
}

static void *must_alloc(struct device_pool *p, size_t n)
{
    void *ptr = NULL;
    ck_assert_int_eq(device_pool_alloc(p, n, &ptr), ZT_OK);
    ck_assert_ptr_nonnull(ptr);
    return ptr;
}

static struct device_pool_stats stats_of(const struct device_pool *p)
{
    struct device_pool_stats s;
    device_pool_stats(p, &s);
    return s;
}

static size_t off_of(const void *ptr, const void *base)
{
    return (size_t)((uintptr_t)ptr - (uintptr_t)base);
}

static void assert_message_has(const char *needle)
{
    ck_assert_msg(strstr(zt_error_message(), needle) != NULL, "message '%s' lacks '%s'",
                  zt_error_message(), needle);
}

/* Real host memory: every pointer aligned, distinct, inside the region and
 * as large as asked (written whole here, which ASan checks). */
START_TEST(blocks_are_aligned_and_inside_the_region)
{
    enum { BYTES = 64 * 1024 };
    char *region = aligned_alloc(A, BYTES);
    ck_assert_ptr_nonnull(region);
    struct device_pool *p = pool_over(region, BYTES);
    const size_t sizes[] = {1, 255, 256, 257, 1000, 0, 4096, 3};
    char *got[8];
    for (int i = 0; i < 8; i++) {
        got[i] = must_alloc(p, sizes[i]);
        ck_assert_uint_eq((uintptr_t)got[i] % A, 0);
        ck_assert(got[i] >= region && got[i] + rounded(sizes[i]) <= region + BYTES);
        memset(got[i], i, sizes[i]);
        for (int j = 0; j < i; j++)
            ck_assert_ptr_ne(got[i], got[j]);
    }
    size_t used = 0;
    for (int i = 0; i < 8; i++)
        used += rounded(sizes[i]);
    ck_assert_uint_eq(stats_of(p).used, used);
    ck_assert_uint_eq(stats_of(p).reserved, BYTES);
    for (int i = 0; i < 8; i++)
        device_pool_free(p, got[i]);
    device_pool_free(p, NULL); /* ignored */
    ck_assert_uint_eq(stats_of(p).used, 0);
    device_pool_destroy(p);
    free(region);
}
END_TEST

/* An unaligned region is trimmed to its aligned middle. */
START_TEST(an_unaligned_region_is_trimmed)
{
    char *base = (char *)fake_base() + 3;
    struct device_pool *p = pool_over(base, 10 * A + 100);
    /* starts at fake_base() + A, ends at or before base + 10 A + 100 */
    ck_assert_uint_eq(stats_of(p).reserved, 9 * A);
    void *x = must_alloc(p, 1);
    ck_assert_uint_eq((uintptr_t)x, (uintptr_t)fake_base() + A);
    device_pool_free(p, x);
    device_pool_destroy(p);

    p = pool_over(fake_base(), A - 1); /* too small for one block */
    ck_assert_uint_eq(stats_of(p).reserved, 0);
    ck_assert_uint_eq(stats_of(p).free_blocks, 0);
    ck_assert_int_eq(device_pool_alloc(p, 0, &x), ZT_ERR_NOMEM);
    ck_assert_ptr_null(x);
    device_pool_destroy(p);
}
END_TEST

/* Blocks are cut from the front of the region; frees merge with either
 * neighbour and with both, and freeing everything leaves one block. */
START_TEST(frees_coalesce_back_to_one_block)
{
    void *base = fake_base();
    const size_t bytes = 64 * A;
    struct device_pool *p = pool_over(base, bytes);
    void *b[6];
    for (int i = 0; i < 6; i++) {
        b[i] = must_alloc(p, (size_t)(i + 1) * A);
        /* an empty pool splits its one block: consecutive from the start */
        ck_assert_uint_eq(off_of(b[i], base), (size_t)i * (i + 1) / 2 * A);
    }
    ck_assert_uint_eq(stats_of(p).free_blocks, 1); /* the tail */
    device_pool_free(p, b[1]);
    device_pool_free(p, b[3]);
    ck_assert_uint_eq(stats_of(p).free_blocks, 3);
    device_pool_free(p, b[2]); /* joins both neighbours */
    ck_assert_uint_eq(stats_of(p).free_blocks, 2);
    ck_assert_uint_eq(stats_of(p).largest_free, bytes - 21 * A); /* the tail: 43 blocks */
    device_pool_free(p, b[5]);                                   /* joins the tail */
    ck_assert_uint_eq(stats_of(p).free_blocks, 2);
    ck_assert_uint_eq(stats_of(p).largest_free, bytes - 15 * A);
    device_pool_free(p, b[4]); /* joins b[1..3]'s block and the tail */
    ck_assert_uint_eq(stats_of(p).free_blocks, 1);
    device_pool_free(p, b[0]); /* joins the rest on its right */
    struct device_pool_stats s = stats_of(p);
    ck_assert_uint_eq(s.free_blocks, 1);
    ck_assert_uint_eq(s.live_blocks, 0);
    ck_assert_uint_eq(s.largest_free, bytes);
    ck_assert_uint_eq(s.used, 0);
    ck_assert_uint_eq(s.peak, 21 * A);
    /* the whole region in one block again */
    void *all = must_alloc(p, bytes);
    ck_assert_ptr_eq(all, base);
    device_pool_free(p, all);
    device_pool_destroy(p);
}
END_TEST

/* Holes of 4, 16, 8 and 4 blocks: each request takes the smallest hole
 * that holds it, the lower one among equal holes, and splits it. */
START_TEST(allocation_takes_the_best_fit)
{
    void *base = fake_base();
    struct device_pool *p = pool_over(base, 64 * A);
    const size_t hole[4] = {4 * A, 16 * A, 8 * A, 4 * A};
    void *h[4], *sep[4];
    for (int i = 0; i < 4; i++) {
        h[i] = must_alloc(p, hole[i]);
        sep[i] = must_alloc(p, A);
    }
    /* 36 blocks used, a tail of 28 blocks free */
    for (int i = 0; i < 4; i++)
        device_pool_free(p, h[i]);
    ck_assert_uint_eq(stats_of(p).free_blocks, 5);

    ck_assert_ptr_eq(must_alloc(p, 6 * A), h[2]);     /* the 8-block hole */
    ck_assert_ptr_eq(must_alloc(p, 3 * A + 1), h[0]); /* 4 blocks: the lower of two */
    ck_assert_ptr_eq(must_alloc(p, 4 * A), h[3]);     /* the other, exactly: it goes away */
    ck_assert_uint_eq(stats_of(p).free_blocks, 3);    /* 2 left of the 8, 16, the tail */
    void *two = must_alloc(p, 2 * A);                 /* the 8-block hole's remainder */
    ck_assert_uint_eq(off_of(two, base), off_of(h[2], base) + 6 * A);
    ck_assert_ptr_eq(must_alloc(p, 17 * A), (char *)sep[3] + A); /* only the tail holds it */
    /* left: the 16-block hole and 11 blocks of tail */
    ck_assert_ptr_eq(must_alloc(p, 9 * A), (char *)sep[3] + 18 * A); /* 11 is the closer fit */
    ck_assert_ptr_eq(must_alloc(p, 12 * A), h[1]);                   /* only 16 holds it now */
    device_pool_destroy(p);                                          /* live blocks are forgotten */
}
END_TEST

/* A full pool refuses even one byte, says what was asked and what is used,
 * and changes nothing. */
START_TEST(exhaustion_names_the_request_and_the_pool)
{
    struct device_pool *p = pool_over(fake_base(), 16 * A);
    void *all = must_alloc(p, 16 * A), *x = fake_base();
    zt_error_clear();
    ck_assert_int_eq(device_pool_alloc(p, 1, &x), ZT_ERR_NOMEM);
    ck_assert_ptr_null(x);
    assert_message_has("cannot allocate 1 bytes (256 aligned)");
    assert_message_has("4096 of 4096 reserved bytes used");
    assert_message_has("0 free in 0 blocks, the largest 0 bytes");
    ck_assert_msg(strstr(zt_error_message(), "fragmented") == NULL, "%s", zt_error_message());
    ck_assert_int_eq(device_pool_alloc(p, SIZE_MAX, &x), ZT_ERR_NOMEM);
    struct device_pool_stats s = stats_of(p);
    ck_assert_uint_eq(s.used, 16 * A);
    ck_assert_uint_eq(s.live_blocks, 1);
    device_pool_free(p, all);
    /* too large for an empty pool as well */
    ck_assert_int_eq(device_pool_alloc(p, 16 * A + 1, &x), ZT_ERR_NOMEM);
    assert_message_has("cannot allocate 4097 bytes (4352 aligned): 0 of 4096");
    assert_message_has("the largest 4096 bytes");
    device_pool_destroy(p);
}
END_TEST

/* Half the pool free in single blocks: a two-block request fails, and the
 * message shows the free bytes would hold it but no block does. */
START_TEST(fragmentation_is_visible_in_the_message)
{
    struct device_pool *p = pool_over(fake_base(), 8 * A);
    void *b[8], *x;
    for (int i = 0; i < 8; i++)
        b[i] = must_alloc(p, A);
    for (int i = 0; i < 8; i += 2)
        device_pool_free(p, b[i]);
    ck_assert_uint_eq(stats_of(p).largest_free, A);
    ck_assert_int_eq(device_pool_alloc(p, 2 * A, &x), ZT_ERR_NOMEM);
    assert_message_has("cannot allocate 512 bytes");
    assert_message_has("1024 of 2048 reserved bytes used");
    assert_message_has("1024 free in 4 blocks, the largest 256 bytes");
    assert_message_has("fragmented");
    ck_assert_ptr_eq(must_alloc(p, A), b[0]); /* one block still fits */
    device_pool_destroy(p);
}
END_TEST

/* --- The randomized sequence against a byte map. --- */

enum { REGION = 1 << 20, GRANULES = REGION / A, OPS = 20000, MAX_LIVE = 512 };

struct live {
    size_t off, size; /* size as asked */
};

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Mostly small buffers, some large, an occasional empty one. */
static size_t random_size(uint64_t *s)
{
    uint64_t r = next_rand(s) % 100;
    if (r < 3)
        return 0;
    if (r < 80)
        return 1 + (size_t)(next_rand(s) % 4096);
    if (r < 97)
        return 1 + (size_t)(next_rand(s) % (64 * 1024));
    return 1 + (size_t)(next_rand(s) % (256 * 1024));
}

/* From the byte map: where best fit must put `size` (SIZE_MAX: nowhere), the
 * largest free run and the number of free runs. Every block starts on a
 * granule, so the first byte of each granule says whether it is free. */
struct model_view {
    size_t best, largest, runs;
};

static struct model_view view_of(const unsigned char *used, size_t size)
{
    struct model_view v = {SIZE_MAX, 0, 0};
    size_t best_len = SIZE_MAX;
    for (size_t g = 0; g < GRANULES;) {
        if (used[g * A]) {
            g++;
            continue;
        }
        size_t start = g;
        while (g < GRANULES && !used[g * A])
            g++;
        const size_t len = (g - start) * A;
        v.runs++;
        v.largest = len > v.largest ? len : v.largest;
        if (len >= size && len < best_len) {
            best_len = len;
            v.best = start * A;
        }
    }
    return v;
}

/* Check's assertions record every passing check, which thousands of
 * operations times many checks make slow: the loop asserts only on failure. */
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ck_abort_msg(__VA_ARGS__);                                                             \
    } while (0)

/* Marks [off, off+n) in use (to = 1) or free (to = 0); none of it may be so
 * already: no overlap, no double free. */
static void mark(unsigned char *used, size_t off, size_t n, unsigned char to)
{
    for (size_t i = off; i < off + n; i++)
        EXPECT(used[i] != to, "byte %zu is already %s", i, to ? "in use" : "free");
    memset(used + off, to, n);
}

START_TEST(random_sequence_matches_a_byte_map)
{
    void *base = fake_base();
    unsigned char *used = calloc(REGION, 1);
    struct live *live = malloc(MAX_LIVE * sizeof *live);
    ck_assert(used && live);
    struct device_pool *p = pool_over(base, REGION);
    size_t n_live = 0, used_bytes = 0, peak = 0, failures = 0;
    uint64_t seed = 0x9e3779b97f4a7c15u;

    for (int op = 0; op < OPS; op++) {
        const int do_alloc = n_live == 0 || (n_live < MAX_LIVE && next_rand(&seed) % 100 < 55);
        if (do_alloc) {
            const size_t n = random_size(&seed), r = rounded(n);
            const struct model_view want = view_of(used, r);
            void *ptr = NULL;
            zt_status s = device_pool_alloc(p, n, &ptr);
            if (want.best == SIZE_MAX) {
                EXPECT(s == ZT_ERR_NOMEM && !ptr, "op %d: %zu bytes fit nowhere", op, n);
                failures++;
            } else {
                EXPECT(s == ZT_OK, "op %d: %zu bytes: %s", op, n, zt_error_message());
                const size_t off = off_of(ptr, base);
                EXPECT(off % A == 0 && off < REGION && off + r <= REGION,
                       "op %d: block at %zu + %zu", op, off, r);
                EXPECT(off == want.best, "op %d: %zu bytes at %zu, best fit is %zu", op, n, off,
                       want.best);
                mark(used, off, r, 1);
                live[n_live++] = (struct live){off, n};
                used_bytes += r;
            }
        } else {
            const size_t i = (size_t)(next_rand(&seed) % n_live);
            device_pool_free(p, (char *)base + live[i].off);
            mark(used, live[i].off, rounded(live[i].size), 0);
            used_bytes -= rounded(live[i].size);
            live[i] = live[--n_live];
        }
        peak = used_bytes > peak ? used_bytes : peak;
        const struct model_view now = view_of(used, SIZE_MAX);
        const struct device_pool_stats st = stats_of(p);
        EXPECT(st.reserved == REGION && st.used == used_bytes && st.peak == peak &&
                   st.live_blocks == n_live,
               "op %d: used %zu (want %zu), peak %zu (%zu), live %zu (%zu)", op, st.used,
               used_bytes, st.peak, peak, st.live_blocks, n_live);
        /* no two free blocks adjacent: as many as the map has free runs */
        EXPECT(st.largest_free == now.largest && st.free_blocks == now.runs,
               "op %d: largest free %zu (want %zu), free blocks %zu (%zu)", op, st.largest_free,
               now.largest, st.free_blocks, now.runs);
    }
    /* the sequence must have exercised both outcomes */
    ck_assert_uint_gt(failures, 0);
    ck_assert_uint_gt(peak, REGION / 2);

    while (n_live > 0) {
        n_live--;
        device_pool_free(p, (char *)base + live[n_live].off);
    }
    const struct device_pool_stats end = stats_of(p);
    ck_assert_uint_eq(end.used, 0);
    ck_assert_uint_eq(end.free_blocks, 1);
    ck_assert_uint_eq(end.largest_free, REGION);
    device_pool_destroy(p);
    free(used);
    free(live);
}
END_TEST

/* --- Frees the pool must refuse (SIGABRT from ZT_ASSERT). --- */

START_TEST(freeing_twice_asserts)
{
    struct device_pool *p = pool_over(fake_base(), 16 * A);
    void *x = must_alloc(p, 100);
    device_pool_free(p, x);
    device_pool_free(p, x);
}
END_TEST

START_TEST(freeing_inside_a_block_asserts)
{
    struct device_pool *p = pool_over(fake_base(), 16 * A);
    char *x = must_alloc(p, 2 * A);
    device_pool_free(p, x + A);
}
END_TEST

START_TEST(freeing_a_foreign_pointer_asserts)
{
    struct device_pool *p = pool_over(fake_base(), 16 * A);
    (void)must_alloc(p, A);
    device_pool_free(p, (char *)fake_base() - A);
}
END_TEST

/* --- The device table: state, close, memory numbers. --- */

/* The CPU has no pool (its state is the host cache, which never holds
 * more than the live peak): reserved and used are the ledger's total. */
START_TEST(cpu_memory_info_is_the_ledger)
{
    struct ledger l;
    struct device d;
    ledger_init(&l, 0);
    ck_assert_int_eq(device_open("cpu", &l, &d), ZT_OK);
    ck_assert_ptr_nonnull(d.state);
    void *a, *b;
    ck_assert_int_eq(device_alloc(&d, LEDGER_PARAMS, 1000, "a", &a), ZT_OK);
    ck_assert_int_eq(device_alloc(&d, LEDGER_GRADS, 3000, "b", &b), ZT_OK);
    device_free(&d, LEDGER_GRADS, 3000, b);
    struct device_memory_info mi;
    ck_assert_int_eq(device_memory_info(&d, &mi), ZT_OK);
    ck_assert_uint_eq(mi.reserved, 1000);
    ck_assert_uint_eq(mi.used, 1000);
    ck_assert_uint_eq(mi.peak, 4000);
    ck_assert_uint_eq(mi.largest_free, 0);
    ck_assert_uint_gt(mi.driver_total, 0);
    ck_assert_uint_le(mi.driver_free, mi.driver_total);
    device_free(&d, LEDGER_PARAMS, 1000, a);
    device_close(&d);
    ck_assert_ptr_null(d.ops);
    device_close(&d); /* a closed device closes again */

    ledger_init(&l, 1); /* a plan: the ledger's numbers, no memory */
    ck_assert_int_eq(device_open("cpu", &l, &d), ZT_OK);
    ck_assert_int_eq(device_alloc(&d, LEDGER_PARAMS, 1 << 30, "plan", &a), ZT_OK);
    ck_assert_ptr_null(a);
    ck_assert_int_eq(device_memory_info(&d, &mi), ZT_OK);
    ck_assert_uint_eq(mi.reserved, 1 << 30);
    ck_assert_uint_eq(mi.used, 1 << 30);
    device_free(&d, LEDGER_PARAMS, 1 << 30, a);
    device_close(&d);
}
END_TEST

/* A backend with per-open state, the way the CUDA one is built: a pool over
 * host memory, opened and closed through the table's hooks. */
struct host_pool {
    char *region;
    struct device_pool *pool;
};

static zt_status hp_open(struct device *d)
{
    struct host_pool *h = calloc(1, sizeof *h);
    ck_assert_ptr_nonnull(h);
    h->region = aligned_alloc(A, 8 * A);
    ck_assert_ptr_nonnull(h->region);
    ck_assert_int_eq(device_pool_create(h->region, 8 * A, &h->pool), ZT_OK);
    d->state = h;
    return ZT_OK;
}

static int closes;

static void hp_close(struct device *d)
{
    struct host_pool *h = d->state;
    device_pool_destroy(h->pool);
    free(h->region);
    free(h);
    closes++;
}

static zt_status hp_alloc(const struct device *d, size_t bytes, void **out)
{
    return device_pool_alloc(((struct host_pool *)d->state)->pool, bytes, out);
}

static void hp_free(const struct device *d, void *p)
{
    device_pool_free(((struct host_pool *)d->state)->pool, p);
}

static zt_status hp_zero(const struct device *d, void *p, size_t bytes)
{
    (void)d;
    memset(p, 0, bytes);
    return ZT_OK;
}

static zt_status hp_info(const struct device *d, struct device_memory_info *out)
{
    struct device_pool_stats s;
    device_pool_stats(((struct host_pool *)d->state)->pool, &s);
    out->reserved = s.reserved;
    out->used = s.used;
    out->peak = s.peak;
    out->largest_free = s.largest_free;
    return ZT_OK;
}

static const struct device_backend_ops host_pool_ops = {
    .name = "hostpool",
    .open = hp_open,
    .close = hp_close,
    .alloc = hp_alloc,
    .free = hp_free,
    .memset_zero = hp_zero,
    .memory_info = hp_info,
};

/* device_alloc through a pooled table zeroes, counts what was asked, and
 * names the buffer in front of the pool's message when it does not fit. */
START_TEST(a_pooled_table_counts_and_names_failures)
{
    struct ledger l;
    struct device d = {.ops = &host_pool_ops, .ledger = &l};
    ledger_init(&l, 0);
    ck_assert_int_eq(d.ops->open(&d), ZT_OK);
    unsigned char *x;
    void *y;
    ck_assert_int_eq(device_alloc(&d, LEDGER_ACTIVATIONS, 700, "x", (void **)&x), ZT_OK);
    for (int i = 0; i < 700; i++)
        ck_assert_uint_eq(x[i], 0);
    ck_assert_uint_eq(l.total_current, 700);
    struct device_memory_info mi;
    ck_assert_int_eq(device_memory_info(&d, &mi), ZT_OK);
    ck_assert_uint_eq(mi.reserved, 8 * A);
    ck_assert_uint_eq(mi.used, 3 * A);
    ck_assert_uint_eq(mi.largest_free, 5 * A);
    ck_assert_int_eq(device_alloc(&d, LEDGER_WORKSPACE, 6 * A, "the workspace", &y), ZT_ERR_NOMEM);
    ck_assert_ptr_null(y);
    assert_message_has("cannot allocate 1536 bytes for the workspace on hostpool: device pool: "
                       "cannot allocate 1536 bytes");
    assert_message_has("the largest 1280 bytes");
    ck_assert_uint_eq(l.total_current, 700); /* nothing counted for the failure */
    device_free(&d, LEDGER_ACTIVATIONS, 700, x);
    ck_assert_uint_eq(l.total_current, 0);
    closes = 0;
    device_close(&d);
    ck_assert_int_eq(closes, 1);
    ck_assert_ptr_null(d.state);
    device_close(&d);
    ck_assert_int_eq(closes, 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("device_pool");
    TCase *tc = tcase_create("pool");
    tcase_add_test(tc, blocks_are_aligned_and_inside_the_region);
    tcase_add_test(tc, an_unaligned_region_is_trimmed);
    tcase_add_test(tc, frees_coalesce_back_to_one_block);
    tcase_add_test(tc, allocation_takes_the_best_fit);
    tcase_add_test(tc, exhaustion_names_the_request_and_the_pool);
    tcase_add_test(tc, fragmentation_is_visible_in_the_message);
    tcase_add_test(tc, random_sequence_matches_a_byte_map);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);

    TCase *bad = tcase_create("misuse");
    tcase_add_test_raise_signal(bad, freeing_twice_asserts, SIGABRT);
    tcase_add_test_raise_signal(bad, freeing_inside_a_block_asserts, SIGABRT);
    tcase_add_test_raise_signal(bad, freeing_a_foreign_pointer_asserts, SIGABRT);
    suite_add_tcase(s, bad);

    TCase *dev = tcase_create("device");
    tcase_add_test(dev, cpu_memory_info_is_the_ledger);
    tcase_add_test(dev, a_pooled_table_counts_and_names_failures);
    suite_add_tcase(s, dev);
    return testutil_run_suite(s, 0);
}
