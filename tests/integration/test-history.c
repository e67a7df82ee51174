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
 *     first pass's, the history bringing the rest back (one fault in
 *     nine: each brings a chain of 8). There the reader waits for a page
 *     of the chain that is not back yet rather than racing the daemon's
 *     installs (pass()).
 *  3. Then that order written: each page rewritten in the same order
 *     (write faults, and writes into pages the history brought back as
 *     clean copies), evicted again and read in address order: the new
 *     content everywhere.
 *
 * The daemon runs with fault_history=yes (it is off by default), then
 * $TEST_DAEMON_ARGS. With TEST_DAEMON_ARGS="--set fault_history=no" step 2
 * fails: the refaults stay where they were.
 */
#include <sched.h>
#include <string.h>
#include <sys/mman.h>

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

static bool resident(const uint8_t *p) {
        unsigned char v = 0;
        ASSERT_OK(mincore((void *)p, ZSWAP_PAGE_SIZE, &v));
        return v & 1;
}

#define CHAIN 8                /* pages a fault brings back by its history (serve.c HIST_CHAIN) */
#define CHAIN_WAIT_NS 200000000ull
#define CHAIN_GIVE_UP 16       /* waits in a row that saw nothing come: the history is off */

/*
 * Evict buf whole, read it in order, checking every page: the refaults
 * and history prefetches the pass took. With wait_chain, a page within
 * CHAIN reads after a fault that is not back yet is waited for (up to
 * CHAIN_WAIT_NS) before it is read: the history installs its chain while
 * no other fault waits, and this reader is faster than the daemon's
 * installs on a busy machine, so a read that does not wait would cut the
 * chain short by a race, and the count would say nothing about the
 * history.
 */
static void pass(const TestDaemon *d, struct zswap_client *c, uint8_t *buf, const uint64_t *hashes,
                 const unsigned *order, bool wait_chain, uint64_t *refaults, uint64_t *history) {
        struct zswap_stats s0, s1;
        unsigned since_fault = CHAIN + 1, empty_waits = 0;

        ASSERT_TRUE(td_pageout_want(c, buf, LEN, NPAGES * 9 / 10) > 0);
        td_stats(c, &s0);
        uint64_t h0 = status_history(d);
        for (unsigned k = 0; k < NPAGES; k++) {
                unsigned i = order[k];
                const uint8_t *p = buf + (size_t)i * ZSWAP_PAGE_SIZE;
                bool in = resident(p);
                if (!in && wait_chain && since_fault <= CHAIN && empty_waits < CHAIN_GIVE_UP) {
                        uint64_t until = test_now_ns() + CHAIN_WAIT_NS;
                        while (!(in = resident(p)) && test_now_ns() < until)
                                sched_yield();
                        empty_waits = in ? 0 : empty_waits + 1;
                }
                since_fault = in ? since_fault + 1 : 1;
                if (page_hash(p) != hashes[i])
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

        char args[512];
        snprintf(args, sizeof(args), "--set fault_history=yes %s", getenv("TEST_DAEMON_ARGS") ?: "");
        td_start(&d, args);
        struct zswap_client *c = td_connect(&d);

        /* 1 */
        uint8_t *r = td_region(c, LEN, 0x4a11, hashes);
        uint64_t random_refaults = 0, random_history = 0;
        for (int p = 0; p < 3; p++) {
                shuffle(order, 1000 + (uint64_t)p);
                pass(&d, c, r, hashes, order, false, &refaults, &history);
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
                pass(&d, c, buf, hashes, order, p >= 2, &refaults, &history);
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
