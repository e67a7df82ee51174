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
 * Without the index check (an entry means: held, do not fill), step 1
 * reads zeros where the evicted pages were.
 */
#include "harness.h"
#include "protocol.h"

#define NPAGES 8192
#define HELD(i) ((i) % 64 < 16)
#define NFRESH (NPAGES - NPAGES / 4)

static bool page_is_zero(const uint8_t *p) {
        for (size_t i = 0; i < ZSWAP_PAGE_SIZE; i += 8)
                if (*(const uint64_t *)(p + i))
                        return false;
        return true;
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
