/*
 * test-history: fault history (serve.c history_note()). A fault on a held
 * page brings back, in the same round trip, the pages that faulted after
 * it the last two times; a reader in a new order each time gets nothing
 * brought back.
 *
 *  1. Random: a region evicted and read whole three times, each time in
 *     a new random order. Every page reads back intact, and the history
 *     brings back almost nothing (pairs never repeat).
 *  2. The same order: another region evicted and read whole five times in
 *     one fixed random order (a walk of the same scattered data). Every
 *     page reads back intact each time; from the third pass on (two
 *     passes make a pair sure) the refaults drop to under a third of the
 *     first pass's, the history bringing the rest back.
 *  3. Then that order written: each page rewritten in the same order
 *     (write faults, and writes into pages the history brought back as
 *     clean copies), evicted again and read in address order: the new
 *     content everywhere.
 *
 * With fault_history=no (TEST_DAEMON_ARGS="--set fault_history=no") step 2
 * fails: the refaults stay where they were.
 */
#include <string.h>

#include "harness.h"
#include "protocol.h"

#define NPAGES 2048
#define LEN ((size_t)NPAGES * ZSWAP_PAGE_SIZE)

static uint64_t status_history(const TestDaemon *d) {
        ZMsgStatusReply st;
        td_status(d, &st);
        return st.history_prefetched;
}

static void shuffle(unsigned *order, uint64_t seed) {
        for (unsigned i = 0; i < NPAGES; i++)
                order[i] = i;
        for (unsigned i = NPAGES - 1; i > 0; i--) {
                unsigned j = (unsigned)(xorshift(&seed) % (i + 1)), t = order[i];
                order[i] = order[j];
                order[j] = t;
        }
}

/* Evict buf whole, read it in order, checking every page: the refaults
 * and history prefetches the pass took. */
static void pass(const TestDaemon *d, struct zswap_client *c, uint8_t *buf, const uint64_t *hashes,
                 const unsigned *order, uint64_t *refaults, uint64_t *history) {
        struct zswap_stats s0, s1;

        ASSERT_TRUE(td_pageout_want(c, buf, LEN, NPAGES * 9 / 10) > 0);
        td_stats(c, &s0);
        uint64_t h0 = status_history(d);
        for (unsigned k = 0; k < NPAGES; k++) {
                unsigned i = order[k];
                if (page_hash(buf + (size_t)i * ZSWAP_PAGE_SIZE) != hashes[i])
                        test_fail("page %u (read %u of the pass) differs", i, k);
        }
        td_stats(c, &s1);
        *refaults = s1.refaults - s0.refaults;
        *history = status_history(d) - h0;
}

int main(void) {
        TestDaemon d;
        static uint64_t hashes[NPAGES];
        static unsigned order[NPAGES];
        uint64_t refaults, history, first = 0;

        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);

        /* 1 */
        uint8_t *r = td_region(c, LEN, 0x4a11, hashes);
        uint64_t random_refaults = 0, random_history = 0;
        for (int p = 0; p < 3; p++) {
                shuffle(order, 1000 + (uint64_t)p);
                pass(&d, c, r, hashes, order, &refaults, &history);
                fprintf(stderr, "random pass %d: %llu refaults, %llu pages brought back by the history\n", p,
                        (unsigned long long)refaults, (unsigned long long)history);
                random_refaults += refaults;
                random_history += history;
        }
        ASSERT_TRUE(random_refaults > NPAGES);
        ASSERT_TRUE(random_history * 50 < random_refaults);
        ASSERT_OK(zswap_unregister(c, r, LEN));

        /* 2 */
        uint8_t *buf = td_region(c, LEN, 0x5a3e, hashes);
        shuffle(order, 77);
        for (int p = 0; p < 5; p++) {
                pass(&d, c, buf, hashes, order, &refaults, &history);
                fprintf(stderr, "same-order pass %d: %llu refaults, %llu pages brought back by the history\n", p,
                        (unsigned long long)refaults, (unsigned long long)history);
                if (p == 0)
                        first = refaults;
                if (p >= 2 && refaults * 3 >= first)
                        test_fail("pass %d of the same order took %llu refaults, the first %llu", p,
                                  (unsigned long long)refaults, (unsigned long long)first);
        }
        ASSERT_TRUE(first > NPAGES / 2);

        /* 3 */
        ASSERT_TRUE(td_pageout_want(c, buf, LEN, NPAGES * 9 / 10) > 0);
        for (unsigned k = 0; k < NPAGES; k++) {
                unsigned i = order[k];
                fill_pages(buf + (size_t)i * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE, 9000 + i);
                hashes[i] = page_hash(buf + (size_t)i * ZSWAP_PAGE_SIZE);
        }
        ASSERT_TRUE(td_pageout_want(c, buf, LEN, NPAGES * 9 / 10) > 0);
        ASSERT_EQ(verify_pages(buf, LEN, hashes), 0);

        zswap_disconnect(c);
        td_stop(&d);
        return 0;
}
