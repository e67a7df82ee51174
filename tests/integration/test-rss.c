/*
 * test-rss: paging out 1 GiB of real heap data through zswap_pageout drops
 * the client's RssAnon by at least 95 %, and every page reads back
 * identical. TEST_RSS_MB overrides the size (the sanitizer builds use less).
 */
#include "harness.h"

int main(void) {
        TestDaemon d;
        size_t mb = test_env_uint("TEST_RSS_MB", 1024);
        size_t len = mb << 20;
        uint64_t *hashes = malloc(len / ZSWAP_PAGE_SIZE * sizeof(uint64_t));
        struct zswap_stats s;

        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = test_map(len);
        fill_pages(buf, len, 7);
        hash_pages(buf, len, hashes);
        uint64_t before = rss_anon_bytes(0);
        ASSERT_OK(zswap_register(c, buf, len));
        ASSERT_OK(zswap_pageout(c, buf, len));
        uint64_t after = rss_anon_bytes(0);
        td_stats(c, &s);
        double drop = (double)(before - after) / (double)len;
        fprintf(stderr, "RssAnon %llu MiB -> %llu MiB: %.1f %% of %zu MiB gone; pool %llu MiB for %llu MiB (ratio %.2f)\n",
                (unsigned long long)(before >> 20), (unsigned long long)(after >> 20), drop * 100, mb,
                (unsigned long long)(s.pool_bytes >> 20), (unsigned long long)(s.original_bytes >> 20),
                s.pool_bytes ? (double)s.original_bytes / (double)s.pool_bytes : 0.0);
        ASSERT_TRUE(drop >= 0.95);
        ASSERT_EQ(verify_pages(buf, len, hashes), 0);
        ASSERT_TRUE(rss_anon_bytes(0) >= before - len / 50);
        zswap_disconnect(c);
        td_stop(&d);
        return 0;
}
