/*
 * test-basic: register, page out, read back byte for byte, unregister;
 * the counters say what happened. TEST_BASIC_MB sizes the region (64 MiB;
 * the valgrind run uses less).
 */
#include "harness.h"

int main(void) {
        TestDaemon d;
        const size_t len = (size_t)test_env_uint("TEST_BASIC_MB", 64) << 20;
        uint64_t *hashes = malloc(len / ZSWAP_PAGE_SIZE * sizeof(uint64_t));
        struct zswap_stats s;

        ASSERT_TRUE(len >= 1 << 20);

        /* no daemon there: an error, never a crash or a hang */
        struct zswap_client *none = NULL;
        test_require_root();
        ASSERT_ERROR(zswap_connect("/nonexistent/zswapd.sock", &none), ENOENT);
        ASSERT_TRUE(none == NULL);

        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        /* bad arguments are refused by the library itself */
        ASSERT_ERROR(zswap_register(c, NULL, 4096), EINVAL);
        ASSERT_ERROR(zswap_register(c, (void *)0x1001, 4096), EINVAL);
        ASSERT_ERROR(zswap_pageout(c, (void *)0x1000, 100), EINVAL);
        ASSERT_ERROR(zswap_get_stats(c, ZSWAP_STATS_CLIENT, NULL), EINVAL);
        uint8_t *buf = test_map(len);
        fill_pages(buf, len, 1);
        hash_pages(buf, len, hashes);

        ASSERT_OK(zswap_register(c, buf, len));
        int n = zswap_pageout(c, buf, len);
        ASSERT_OK(n);
        fprintf(stderr, "evicted %d pages\n", n);
        ASSERT_TRUE(n > (int)(len / ZSWAP_PAGE_SIZE) * 9 / 10);
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s));
        fprintf(stderr, "stored %llu same %llu incompressible %llu compressed %llu\n",
                (unsigned long long)s.stored_pages, (unsigned long long)s.same_pages,
                (unsigned long long)s.incompressible_pages, (unsigned long long)s.compressed_bytes);
        ASSERT_EQ(s.stored_pages + s.same_pages, (uint64_t)n);
        ASSERT_EQ(s.staged_pages, 0);
        ASSERT_TRUE(s.same_pages >= len / ZSWAP_PAGE_SIZE / 50);

        ASSERT_EQ(verify_pages(buf, len, hashes), 0);
        fprintf(stderr, "verified\n");
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s));
        fprintf(stderr, "stats: stored %llu faults %llu\n", (unsigned long long)s.stored_pages, (unsigned long long)s.faults);
        ASSERT_EQ(s.stored_pages, 0);
        ASSERT_EQ(s.same_pages, 0);
        ASSERT_TRUE(s.faults + s.prefetches >= (uint64_t)n);
        fprintf(stderr, "read back: %llu faults, %llu pages installed ahead\n", (unsigned long long)s.faults,
                (unsigned long long)s.prefetches);
        ASSERT_TRUE(s.prefetches > 0); /* a sequential reader gets fault-around */

        /* again, then unregister brings every page back without a fault */
        ASSERT_OK(zswap_pageout(c, buf, len));
        fprintf(stderr, "second pageout done\n");
        ASSERT_OK(zswap_unregister(c, buf, len));
        fprintf(stderr, "unregistered\n");
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s));
        ASSERT_EQ(s.stored_pages + s.same_pages, 0);
        ASSERT_EQ(verify_pages(buf, len, hashes), 0);
        ASSERT_EQ(zswap_pageout(c, buf, len), 0); /* not ours any more */

        zswap_disconnect(c);
        td_stop(&d);
        free(hashes);
        return 0;
}
