/* tests/test_host_cache.c — the CPU backend's host cache
 * (worker/cpu/host_cache.h): freed large blocks come back for the same
 * size (or a near one); the mapped bytes never exceed the live peak and an
 * eighth, checked after every
 * call of a random replay against a model of the live set; the resident
 * memory the kernel reports follows; blocks freed after their device
 * closed are unmapped; small blocks come from malloc; two threads at once.
 */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/ledger.h"
#include "common/rng.h"
#include "testutil.h"
#include "worker/cpu/host_cache.h"

enum { MIB = 1 << 20 };

static size_t page_rounded(size_t bytes)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + 32 * 64 + page - 1) / page * page; /* the header and the colours */
}

START_TEST(a_freed_block_comes_back_for_its_size)
{
    struct host_cache *c;
    struct host_cache_stats s;
    ck_assert_int_eq(host_cache_create(&c), ZT_OK);
    void *a = host_cache_alloc(c, 3 * MIB + 5);
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq((uintptr_t)a % 64, 0);
    memset(a, 1, 3 * MIB + 5);
    host_cache_free(a);
    host_cache_stats(c, &s);
    ck_assert_uint_eq(s.live, 0);
    ck_assert_uint_eq(s.cached, page_rounded(3 * MIB + 5));
    void *b = host_cache_alloc(c, 3 * MIB + 5);
    ck_assert_ptr_eq(b, a);
    host_cache_stats(c, &s);
    ck_assert_uint_eq(s.reused, 1);
    ck_assert_uint_eq(s.mapped, 1);
    ck_assert_uint_eq(s.cached, 0);
    host_cache_free(b);
    host_cache_release(c);
}
END_TEST

START_TEST(a_new_size_unmaps_the_oldest_freed_blocks)
{
    struct host_cache *c;
    struct host_cache_stats s;
    ck_assert_int_eq(host_cache_create(&c), ZT_OK);
    void *a = host_cache_alloc(c, MIB), *b = host_cache_alloc(c, 2 * MIB);
    host_cache_free(a);
    host_cache_free(b);
    /* the peak was MIB + 2 MIB (and two headers): MIB / 2 more fits once
     * the older block (a) is unmapped, and b stays */
    void *d = host_cache_alloc(c, MIB / 2);
    host_cache_stats(c, &s);
    ck_assert_uint_eq(s.unmapped, 1);
    ck_assert_uint_eq(s.cached, page_rounded(2 * MIB));
    ck_assert_uint_le(s.live + s.cached, s.peak_live + s.peak_live / HOST_CACHE_SLACK);
    host_cache_free(d);
    host_cache_release(c);
}
END_TEST

/* Thousands of allocations and frees of random sizes, as a step's
 * buffers: after each call, live is what the model says is live and
 * live + cached stays within the live peak and its slack. */
START_TEST(the_mapped_bytes_never_exceed_the_live_peak)
{
    enum { SLOTS = 24, CALLS = 2000 };
    static const size_t sizes[] = {300 << 10, MIB, 3 * MIB + 100, 7 * MIB, 12 * MIB + 4096};
    struct host_cache *c;
    struct host_cache_stats s;
    uint64_t draw = 0;
    void *p[SLOTS] = {0};
    size_t n[SLOTS] = {0}, live = 0, peak = 0;
    ck_assert_int_eq(host_cache_create(&c), ZT_OK);
    for (int i = 0; i < CALLS; i++) {
        const int k = (int)(rng_u64(11, draw++) % SLOTS);
        if (p[k]) {
            host_cache_free(p[k]);
            live -= page_rounded(n[k]);
            p[k] = NULL;
        } else {
            n[k] = sizes[rng_u64(11, draw++) % (sizeof sizes / sizeof sizes[0])];
            p[k] = host_cache_alloc(c, n[k]);
            ck_assert_ptr_nonnull(p[k]);
            ((char *)p[k])[0] = ((char *)p[k])[n[k] - 1] = (char)k; /* writable to the end */
            live += page_rounded(n[k]);
            peak = live > peak ? live : peak;
        }
        host_cache_stats(c, &s);
        ck_assert_uint_eq(s.live, live);
        ck_assert_uint_eq(s.peak_live, peak);
        ck_assert_uint_le(s.live + s.cached, s.peak_live + s.peak_live / HOST_CACHE_SLACK);
    }
    ck_assert_uint_gt(s.reused, s.mapped); /* the point of it */
    for (int k = 0; k < SLOTS; k++)
        host_cache_free(p[k]);
    host_cache_release(c);
}
END_TEST

/* A model of a cache, given the same sizes, makes the same decisions: a
 * random replay (near sizes, which a freed block a quarter larger serves,
 * and small ones among them) through a cache and a model side by side,
 * each free the newest live block of its size as the model takes it,
 * leaves every count equal after every call. */
START_TEST(a_model_makes_the_caches_decisions)
{
    enum { SLOTS = 24, CALLS = 3000 };
    static const size_t sizes[] = {100 << 10, MIB, MIB + MIB / 8, 3 * MIB + 100, 7 * MIB};
    struct host_cache *c, *m;
    struct host_cache_stats a, b;
    uint64_t draw = 0, order = 0;
    void *p[SLOTS] = {0};
    size_t n[SLOTS] = {0};
    uint64_t born[SLOTS] = {0};
    ck_assert_int_eq(host_cache_create(&c), ZT_OK);
    ck_assert_int_eq(host_cache_model_create(&m), ZT_OK);
    for (int i = 0; i < CALLS; i++) {
        int k = (int)(rng_u64(12, draw++) % SLOTS);
        if (p[k]) {
            for (int j = 0; j < SLOTS; j++) /* the newest live block of that size */
                if (p[j] && n[j] == n[k] && born[j] > born[k])
                    k = j;
            host_cache_free(p[k]);
            host_cache_model_free(m, n[k]);
            p[k] = NULL;
        } else {
            n[k] = sizes[rng_u64(12, draw++) % (sizeof sizes / sizeof sizes[0])];
            p[k] = host_cache_alloc(c, n[k]);
            ck_assert_ptr_nonnull(p[k]);
            born[k] = ++order;
            host_cache_model_alloc(m, n[k]);
        }
        host_cache_stats(c, &a);
        host_cache_stats(m, &b);
        ck_assert_msg(memcmp(&a, &b, sizeof a) == 0,
                      "call %d: cache live %zu cached %zu small %zu peak %zu/%zu/%zu mapped %zu "
                      "reused %zu unmapped %zu; model %zu %zu %zu %zu/%zu/%zu %zu %zu %zu",
                      i, a.live, a.cached, a.small, a.peak_live, a.peak_held, a.peak_resident,
                      a.mapped, a.reused, a.unmapped, b.live, b.cached, b.small, b.peak_live,
                      b.peak_held, b.peak_resident, b.mapped, b.reused, b.unmapped);
    }
    ck_assert_uint_gt(a.reused, 0);
    ck_assert_uint_gt(a.unmapped, 0);
    ck_assert_uint_gt(a.peak_resident, a.peak_held); /* the cache kept some */
    for (int k = 0; k < SLOTS; k++)
        host_cache_free(p[k]);
    host_cache_release(c);
    host_cache_release(m); /* its live blocks' headers go with it */
}
END_TEST

/* What the kernel sees: a loop of buffers whose sizes drift, as in a run
 * with many shapes, leaves the resident memory within the live peak and
 * its slack (the C library's heap kept for reuse grew it to several times
 * that). */
START_TEST(resident_memory_stays_within_the_live_peak)
{
#ifdef __SANITIZE_ADDRESS__
    return; /* AddressSanitizer's shadow of every mapped byte is resident too */
#endif
    enum { ROUNDS = 16, LIVE = 6 };
    struct host_cache *c;
    struct host_cache_stats s;
    void *p[LIVE];
    ck_assert_int_eq(host_cache_create(&c), ZT_OK);
    const uint64_t before = ledger_rss_now();
    for (int r = 0; r < ROUNDS; r++) {
        for (int k = 0; k < LIVE; k++) {
            const size_t bytes = (size_t)(4 + (r * 7 + k * 3) % 13) * MIB;
            p[k] = host_cache_alloc(c, bytes);
            ck_assert_ptr_nonnull(p[k]);
            memset(p[k], 1, bytes); /* every page touched */
        }
        for (int k = 0; k < LIVE; k++)
            host_cache_free(p[k]);
    }
    const uint64_t after = ledger_rss_now();
    host_cache_stats(c, &s);
    ck_assert_msg(after <= before + s.peak_live + s.peak_live / HOST_CACHE_SLACK + 4 * MIB,
                  "resident grew by %llu bytes, the live peak is %zu",
                  (unsigned long long)(after - before), s.peak_live);
    host_cache_release(c);
    ck_assert_uint_le(ledger_rss_now(), before + 4 * MIB); /* all unmapped */
}
END_TEST

START_TEST(a_block_outlives_its_device)
{
    struct host_cache *c;
    ck_assert_int_eq(host_cache_create(&c), ZT_OK);
    void *big = host_cache_alloc(c, 5 * MIB), *small = host_cache_alloc(c, 100);
    ck_assert_ptr_nonnull(small);
    ck_assert_uint_eq((uintptr_t)small % 64, 0);
    host_cache_release(c);
    memset(big, 2, 5 * MIB); /* still mapped */
    host_cache_free(big);    /* unmapped, not kept: LeakSanitizer sees the rest */
    host_cache_free(small);
    host_cache_free(NULL);
}
END_TEST

static void *churn(void *arg)
{
    struct host_cache *c = arg;
    for (int i = 0; i < 200; i++) {
        void *p = host_cache_alloc(c, (size_t)(1 + i % 5) * MIB);
        ck_assert_ptr_nonnull(p);
        memset(p, i, MIB);
        host_cache_free(p);
    }
    return NULL;
}

START_TEST(two_threads_share_one_cache)
{
    struct host_cache *c;
    struct host_cache_stats s;
    pthread_t t;
    ck_assert_int_eq(host_cache_create(&c), ZT_OK);
    ck_assert_int_eq(pthread_create(&t, NULL, churn, c), 0);
    churn(c);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    host_cache_stats(c, &s);
    ck_assert_uint_eq(s.live, 0);
    ck_assert_uint_le(s.cached, s.peak_live + s.peak_live / HOST_CACHE_SLACK);
    host_cache_release(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("host_cache");
    TCase *tc = testutil_tcase(s, "cache", 60);
    tcase_add_test(tc, a_freed_block_comes_back_for_its_size);
    tcase_add_test(tc, a_new_size_unmaps_the_oldest_freed_blocks);
    tcase_add_test(tc, the_mapped_bytes_never_exceed_the_live_peak);
    tcase_add_test(tc, resident_memory_stays_within_the_live_peak);
    tcase_add_test(tc, a_model_makes_the_caches_decisions);
    tcase_add_test(tc, a_block_outlives_its_device);
    tcase_add_test(tc, two_threads_share_one_cache);
    return testutil_run_suite(s, 0);
}
