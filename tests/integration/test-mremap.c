/*
 * test-mremap: mremap of evicted memory keeps its content at the new
 * address, and the moved range stays managed there. A region grown in
 * place, whose new part was registered on its own (as the preload shim
 * does), can still be moved whole after a pageout of its first part
 * (arming only that part split the kernel's vma: mremap() failed with
 * EFAULT).
 */
#include <sys/mman.h>

#include "harness.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
/* ASan does not follow mremap(): memory moved onto an address its own
 * allocator once used keeps that shadow. Tell it the range is ours. */
#define unpoison(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define unpoison(p, n) ((void)(p), (void)(n))
#endif

#define NPAGES 4096

int main(void) {
        TestDaemon d;
        const size_t len = NPAGES * ZSWAP_PAGE_SIZE;
        uint64_t hashes[NPAGES];
        struct zswap_stats s;

        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);

        /* grown in place, its new part registered as a region of its
         * own, its first part paged out: then moved whole */
        const size_t q = len / 4;
        uint8_t *g = test_map(2 * q);
        ASSERT_OK(munmap(g + q, q));
        fill_pages(g, q, 7);
        hash_pages(g, q, hashes);
        ASSERT_OK(zswap_register(c, g, q));
        if (mremap(g, q, 2 * q, 0) != g) {
                /* valgrind keeps address space of its own next to a
                 * mapping it shrank: nothing grows in place under it */
                if (!getenv("ZSWAP_VALGRIND_PRELOAD"))
                        test_fail("mremap() cannot grow a mapping in place over what it unmapped: %s", strerror(errno));
                fprintf(stderr, "grown in place: not under valgrind (%s), case left out\n", strerror(errno));
                ASSERT_OK(zswap_unregister(c, g, q));
                goto moves;
        }
        fill_pages(g + q, q, 8);
        hash_pages(g + q, q, hashes + q / ZSWAP_PAGE_SIZE);
        ASSERT_OK(zswap_register(c, g + q, q));
        int ng = zswap_pageout(c, g, q);
        ASSERT_TRUE(ng > (int)(q / ZSWAP_PAGE_SIZE) / 2);
        uint8_t *away = test_map(2 * q);
        uint8_t *m2 = mremap(g, 2 * q, 2 * q, MREMAP_MAYMOVE | MREMAP_FIXED, away);
        if (m2 == MAP_FAILED)
                test_fail("a region grown in place, part of it paged out, cannot be moved whole: %s", strerror(errno));
        unpoison(m2, 2 * q);
        ASSERT_EQ(verify_pages(m2, 2 * q, hashes), 0);
        ASSERT_OK(zswap_unregister(c, m2, q)); /* two regions, as registered */
        ASSERT_OK(zswap_unregister(c, m2 + q, q));

moves:;
        uint8_t *buf = td_region(c, len, 5, hashes);
        ASSERT_OK(zswap_pageout(c, buf, len));
        /* touch a few so the range is part resident, part evicted */
        for (size_t i = 0; i < NPAGES; i += 3)
                ASSERT_EQ(page_hash(buf + i * ZSWAP_PAGE_SIZE), hashes[i]);

        /* move the whole range to an address of our choosing */
        /* onto a reservation, which MREMAP_FIXED replaces (a hole could
         * meanwhile take a mapping of libzswap's agent) */
        uint8_t *target = test_map(len + (2 << 20));
        uint8_t *moved = mremap(buf, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, target);
        ASSERT_TRUE(moved == target);
        unpoison(moved, len);
        ASSERT_EQ(verify_pages(moved, len, hashes), 0);

        /* managed at the new place: evict and read back again */
        int n = zswap_pageout(c, moved, len);
        ASSERT_OK(n);
        ASSERT_TRUE(n > NPAGES / 2);
        ASSERT_EQ(verify_pages(moved, len, hashes), 0);

        /* move half of it while evicted; the other half stays */
        ASSERT_OK(zswap_pageout(c, moved, len));
        uint8_t *half = mremap(moved + len / 2, len / 2, len / 2, MREMAP_MAYMOVE | MREMAP_FIXED,
                               target + len + (1 << 20) - (1 << 20) + 0);
        ASSERT_TRUE(half != MAP_FAILED);
        unpoison(half, len / 2);
        ASSERT_EQ(verify_pages(moved, len / 2, hashes), 0);
        ASSERT_EQ(verify_pages(half, len / 2, hashes + NPAGES / 2), 0);

        /* grown to four times its size while evicted, moved by the kernel
         * (the page after it is taken, a PROT_NONE page over the rest of
         * our reservation): its pages follow it, the new part reads
         * zeros */
        uint8_t *fence = mmap(half + len / 2, ZSWAP_PAGE_SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                              -1, 0);
        ASSERT_TRUE(fence == half + len / 2);
        ASSERT_OK(zswap_pageout(c, half, len / 2));
        uint8_t *grown = mremap(half, len / 2, 2 * len, MREMAP_MAYMOVE);
        ASSERT_TRUE(grown != MAP_FAILED && grown != half);
        unpoison(grown, 2 * len);
        ASSERT_EQ(verify_pages(grown, len / 2, hashes + NPAGES / 2), 0);
        for (size_t i = len / 2; i < 2 * len; i += ZSWAP_PAGE_SIZE)
                ASSERT_EQ(grown[i], 0);
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s));
        ASSERT_EQ(s.stored_pages + s.same_pages, 0);

        zswap_disconnect(c);
        td_stop(&d);
        return 0;
}
