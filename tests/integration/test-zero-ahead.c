/*
 * test-zero-ahead: a first touch of fresh memory maps the fresh pages
 * after it to the zero page in the same round trip (fault.c
 * zero_ahead()), and never the pages the daemon holds.
 *
 *  1. A region of runs of 16 pages written and evicted between runs of
 *     48 pages never touched: a read of every page in address order finds
 *     each evicted page's content and zeros elsewhere, with far fewer
 *     zero-fill faults than fresh pages read (the fills ahead took the
 *     rest, up to the next page held).
 *  2. Writes into those zero-page mappings are ordinary private pages:
 *     new content everywhere, the evicted pages' content kept, and the
 *     whole region evicts and reads back.
 *  3. A fresh region touched at random pages (first touches scattered):
 *     every page reads zero, then holds what was written.
 *
 *  0. Before any of that, memory never evicted from is no business of the
 *     daemon's: a fresh region, registered, is registered for write-protect
 *     faults only (VmFlags "uw", not "um"), and first touches of half of
 *     it (reads and writes) take no zero-fill round trip and no fill
 *     ahead. Its first pageout registers it for missing faults ("um")
 *     before any page leaves; then the untouched half reads as zeros
 *     through the daemon, and the written half holds what was written.
 *     (A kernel without UFFD_FEATURE_WP_ASYNC registers for missing faults
 *     at once: that part is skipped, with a line.)
 *
 * Without the index check (an entry means: held, do not fill), step 1
 * reads zeros where the evicted pages were.
 */
#include <fcntl.h>
#include <string.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "harness.h"
#include "protocol.h"
#include "uffd-compat.h"

#define NPAGES 8192
#define HELD(i) ((i) % 64 < 16)
#define NFRESH (NPAGES - NPAGES / 4)

static bool page_is_zero(const uint8_t *p) {
        for (size_t i = 0; i < ZSWAP_PAGE_SIZE; i += 8)
                if (*(const uint64_t *)(p + i))
                        return false;
        return true;
}

/* Does this kernel's userfaultfd have WP_ASYNC (the daemon's condition
 * for registering write-protect faults only)? */
static bool kernel_wp_async(void) {
        struct uffdio_api api = { .api = UFFD_API };
        int u = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
        bool r = u >= 0 && ioctl(u, UFFDIO_API, &api) == 0 && (api.features & UFFD_FEATURE_WP_ASYNC);
        if (u >= 0)
                close(u);
        return r;
}

static uint64_t status_zero_ahead(const TestDaemon *d) {
        ZMsgStatusReply st;
        td_status(d, &st);
        return st.zero_ahead;
}

int main(void) {
        TestDaemon d;
        const size_t len = NPAGES * ZSWAP_PAGE_SIZE;
        static uint64_t hashes[NPAGES];
        struct zswap_stats s0, s1;

        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);

        /* 0 */
        uint8_t *z = test_map(len);
        ASSERT_OK(zswap_register(c, z, len));
        ASSERT_TRUE(vma_uffd_registered(z));
        if (!kernel_wp_async())
                fprintf(stderr, "no UFFD_FEATURE_WP_ASYNC here: registered for missing faults at once, step 0 skipped\n");
        else {
                ASSERT_TRUE(!vma_uffd_missing(z));
                td_stats(c, &s0);
                uint64_t za = status_zero_ahead(&d);
                for (size_t i = 0; i < NPAGES / 2; i++) {
                        if (!page_is_zero(z + i * ZSWAP_PAGE_SIZE))
                                test_fail("fresh page %zu reads nonzero", i);
                        if (i % 2)
                                fill_pages(z + i * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE, 300 + i);
                }
                td_stats(c, &s1);
                fprintf(stderr, "never evicted: %d first touches, %llu zero-fill round trips, %llu filled ahead\n",
                        NPAGES / 2, (unsigned long long)(s1.faults_zero - s0.faults_zero),
                        (unsigned long long)(status_zero_ahead(&d) - za));
                ASSERT_EQ(s1.faults_zero, s0.faults_zero);
                ASSERT_EQ(status_zero_ahead(&d), za);
                ASSERT_TRUE(zswap_pageout(c, z, len) > 0);
                ASSERT_TRUE(vma_uffd_missing(z));
                td_stats(c, &s0);
                for (size_t i = 0; i < NPAGES; i++) {
                        const uint8_t *p = z + i * ZSWAP_PAGE_SIZE;
                        if (i < NPAGES / 2 && i % 2) {
                                uint8_t want[ZSWAP_PAGE_SIZE];
                                fill_pages(want, ZSWAP_PAGE_SIZE, 300 + i);
                                if (memcmp(p, want, ZSWAP_PAGE_SIZE))
                                        test_fail("page %zu lost what was written before its eviction", i);
                        } else if (!page_is_zero(p))
                                test_fail("page %zu: never written, reads nonzero after the pageout", i);
                }
                td_stats(c, &s1);
                fprintf(stderr, "after its first pageout: %llu zero-fill round trips reading it whole\n",
                        (unsigned long long)(s1.faults_zero - s0.faults_zero));
                ASSERT_TRUE(s1.faults_zero > s0.faults_zero);
        }

        /* 1 */
        uint8_t *a = test_map(len);
        for (size_t i = 0; i < NPAGES; i++)
                if (HELD(i)) {
                        fill_pages(a + i * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE, 1000 + i);
                        hashes[i] = page_hash(a + i * ZSWAP_PAGE_SIZE);
                }
        ASSERT_OK(zswap_register(c, a, len));
        int n = zswap_pageout(c, a, len);
        ASSERT_TRUE(n > 0);
        td_stats(c, &s0);
        fprintf(stderr, "evicted %d of %d written pages (%llu held)\n", n, NPAGES / 4,
                (unsigned long long)(s0.stored_pages + s0.same_pages));
        uint64_t za0 = status_zero_ahead(&d);
        size_t held_ok = 0;
        for (size_t i = 0; i < NPAGES; i++) {
                const uint8_t *p = a + i * ZSWAP_PAGE_SIZE;
                if (HELD(i)) {
                        if (page_hash(p) != hashes[i])
                                test_fail("page %zu: its evicted content is gone (zero: %d)", i, page_is_zero(p));
                        held_ok++;
                } else if (!page_is_zero(p))
                        test_fail("page %zu: never written, reads nonzero", i);
        }
        td_stats(c, &s1);
        uint64_t zero_faults = s1.faults_zero - s0.faults_zero, around = status_zero_ahead(&d) - za0;
        fprintf(stderr, "read %d fresh pages: %llu zero-fill faults, %llu pages zero-filled around; %zu held pages intact\n",
                NFRESH, (unsigned long long)zero_faults, (unsigned long long)around, held_ok);
        ASSERT_TRUE(around > 0);
        ASSERT_TRUE(zero_faults * 4 < (uint64_t)NFRESH);

        /* 2 */
        for (size_t i = 0; i < NPAGES; i++)
                if (!HELD(i))
                        fill_pages(a + i * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE, 5000 + i);
        hash_pages(a, len, hashes);
        ASSERT_TRUE(zswap_pageout(c, a, len) > 0);
        ASSERT_EQ(verify_pages(a, len, hashes), 0);

        /* 3: scattered first touches, reads then writes */
        uint8_t *b = test_map(len);
        ASSERT_OK(zswap_register(c, b, len));
        uint64_t rng = 42;
        for (unsigned k = 0; k < NPAGES / 8; k++) {
                size_t i = (size_t)(xorshift(&rng) % NPAGES);
                if (!page_is_zero(b + i * ZSWAP_PAGE_SIZE))
                        test_fail("fresh page %zu reads nonzero", i);
        }
        fill_pages(b, len, 77);
        hash_pages(b, len, hashes);
        ASSERT_TRUE(zswap_pageout(c, b, len) > 0);
        ASSERT_EQ(verify_pages(b, len, hashes), 0);

        zswap_disconnect(c);
        td_stop(&d);
        return 0;
}
