/*
 * test-dontneed: MADV_DONTNEED and munmap of evicted memory drop the
 * daemon's copies; a later touch sees zeros, never the old data, and the
 * pages around keep their content.
 */
#include <sys/mman.h>

#include "harness.h"

#define NPAGES 4096

static bool page_is_zero(const uint8_t *p) {
        for (size_t i = 0; i < ZSWAP_PAGE_SIZE; i++)
                if (p[i])
                        return false;
        return true;
}

int main(void) {
        TestDaemon d;
        const size_t len = NPAGES * ZSWAP_PAGE_SIZE;
        uint64_t hashes[NPAGES];
        struct zswap_stats s;

        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, len, 3, hashes);
        ASSERT_OK(zswap_pageout(c, buf, len));

        /* pages [1024, 2048): dropped while evicted */
        ASSERT_OK(madvise(buf + 1024 * ZSWAP_PAGE_SIZE, 1024 * ZSWAP_PAGE_SIZE, MADV_DONTNEED));
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s));
        ASSERT_TRUE(s.stored_pages + s.same_pages <= NPAGES - 1024);
        for (size_t i = 1024; i < 2048; i++)
                ASSERT_TRUE(page_is_zero(buf + i * ZSWAP_PAGE_SIZE));

        /* pages [3072, 4096): unmapped while evicted, mapped again fresh */
        ASSERT_OK(munmap(buf + 3072 * ZSWAP_PAGE_SIZE, 1024 * ZSWAP_PAGE_SIZE));
        void *again = mmap(buf + 3072 * ZSWAP_PAGE_SIZE, 1024 * ZSWAP_PAGE_SIZE, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        ASSERT_TRUE(again == buf + 3072 * ZSWAP_PAGE_SIZE);
        ASSERT_OK(zswap_register(c, again, 1024 * ZSWAP_PAGE_SIZE));
        for (size_t i = 3072; i < 4096; i++)
                ASSERT_TRUE(page_is_zero(buf + i * ZSWAP_PAGE_SIZE));

        /* the rest is intact */
        for (size_t i = 0; i < NPAGES; i++) {
                if ((i >= 1024 && i < 2048) || i >= 3072)
                        continue;
                ASSERT_EQ(page_hash(buf + i * ZSWAP_PAGE_SIZE), hashes[i]);
        }
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s));
        ASSERT_EQ(s.stored_pages + s.same_pages, 0);

        /* evict again, DONTNEED single pages scattered, verify */
        ASSERT_OK(zswap_pageout(c, buf, len));
        for (size_t i = 5; i < NPAGES; i += 37)
                ASSERT_OK(madvise(buf + i * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE, MADV_DONTNEED));
        for (size_t i = 0; i < NPAGES; i++) {
                const uint8_t *p = buf + i * ZSWAP_PAGE_SIZE;
                if (i >= 5 && (i - 5) % 37 == 0)
                        ASSERT_TRUE(page_is_zero(p));
                else if ((i >= 1024 && i < 2048) || i >= 3072)
                        ASSERT_TRUE(page_is_zero(p));
                else
                        ASSERT_EQ(page_hash(p), hashes[i]);
        }
        zswap_disconnect(c);
        td_stop(&d);
        return 0;
}
