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
 *  3. A new order, once the history is sure of the old one: its guesses
 *     go wrong, and after a window of them it stops following chains, so
 *     under half the region is brought back on wrong guesses (following
 *     them all brings back most of it). Then the old order again: the
 *     guesses come right and the history resumes, refaults under a third
 *     of the first pass's again (a chain's links are counted again when
 *     the fault after it was foreseen: else the new order's one miss
 *     each would have made them unsure).
 *  4. Two threads at once, each walking its half of another region in
 *     its own fixed order, five times: from the third pass on, under a
 *     third of the first pass's refaults. Each thread has its own
 *     history; with one for both, their interleaved faults make pairs
 *     that never repeat.
 *  5. Then the order of step 2 written: each page rewritten in that order
 *     (write faults, and writes into pages the history brought back as
 *     clean copies), evicted again and read in address order: the new
 *     content everywhere.
 *
 * The daemon runs with fault_history=yes (the default, set so the test
 * does not depend on it), then
 * $TEST_DAEMON_ARGS. With TEST_DAEMON_ARGS="--set fault_history=no" step 2
 * fails: the refaults stay where they were.
 */
#include <pthread.h>
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

static uint64_t status_wrong(const TestDaemon *d) {
        ZMsgStatusReply st;
        td_status(d, &st);
        return st.history_wrong;
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
#define CHAIN_GIVE_UP 16       /* waits in a row that saw nothing come: the history is off, */
#define CHAIN_RETRY 128        /* or paused: wait again after this many reads */
#define HIST_WINDOW 64         /* guesses the history scores together (serve.c) */

/*
 * Evict buf whole, read it in order, checking every page: the refaults
 * and history prefetches the pass took. With wait_chain, a page within
 * CHAIN reads after a fault that is not back yet is waited for (up to
 * CHAIN_WAIT_NS) before it is read: the history installs its chain while
 * no other fault waits, and this reader is faster than the daemon's
 * installs on a busy machine, so a read that does not wait would cut the
 * chain short by a race, and the count would say nothing about the
 * history. After CHAIN_GIVE_UP waits in a row for nothing (the history
 * off, or paused on wrong guesses) it reads on without waiting for
 * CHAIN_RETRY reads, then waits again.
 */
static void walk(const uint8_t *buf, const uint64_t *hashes, const unsigned *order, unsigned n, bool wait_chain) {
        unsigned since_fault = CHAIN + 1, empty_waits = 0, unwaited = 0;

        for (unsigned k = 0; k < n; k++) {
                unsigned i = order[k];
                const uint8_t *p = buf + (size_t)i * ZSWAP_PAGE_SIZE;
                bool in = resident(p);
                if (!in && wait_chain && since_fault <= CHAIN && empty_waits < CHAIN_GIVE_UP) {
                        uint64_t until = test_now_ns() + CHAIN_WAIT_NS;
                        while (!(in = resident(p)) && test_now_ns() < until)
                                sched_yield();
                        empty_waits = in ? 0 : empty_waits + 1;
                } else if (empty_waits >= CHAIN_GIVE_UP && ++unwaited >= CHAIN_RETRY) {
                        empty_waits = unwaited = 0; /* the history may have resumed */
                }
                since_fault = in ? since_fault + 1 : 1;
                if (page_hash(p) != hashes[i])
                        test_fail("page %u (read %u of the pass) differs", i, k);
        }
}

static void pass(const TestDaemon *d, struct zswap_client *c, uint8_t *buf, const uint64_t *hashes,
                 const unsigned *order, bool wait_chain, uint64_t *refaults, uint64_t *history) {
        struct zswap_stats s0, s1;

        ASSERT_TRUE(td_pageout_want(c, buf, LEN, NPAGES * 9 / 10) > 0);
        td_stats(c, &s0);
        uint64_t h0 = status_history(d);
        walk(buf, hashes, order, NPAGES, wait_chain);
        td_stats(c, &s1);
        *refaults = s1.refaults - s0.refaults;
        *history = status_history(d) - h0;
}

/* Two threads, each walking its own half of a region in its own order,
 * at once. */
typedef struct {
        const uint8_t *buf;
        const uint64_t *hashes;
        const unsigned *order;
        pthread_barrier_t *go;
        int passes;
} Walker;

static void *walker_main(void *arg) {
        const Walker *w = arg;

        for (int p = 0; p < w->passes; p++) {
                pthread_barrier_wait(w->go); /* paged out */
                walk(w->buf, w->hashes, w->order, NPAGES / 2, p >= 2);
                pthread_barrier_wait(w->go); /* walked */
        }
        return NULL;
}

static void two_walkers(const TestDaemon *d, struct zswap_client *c, uint8_t *buf, const uint64_t *hashes,
                        const unsigned *order, int passes, uint64_t *refaults, uint64_t *history) {
        static unsigned halves[2][NPAGES / 2];
        pthread_barrier_t go;
        pthread_t t[2];
        Walker w[2];

        ASSERT_OK(pthread_barrier_init(&go, NULL, 3));
        for (unsigned h = 0; h < 2; h++) {
                /* each half in the order its pages take in order */
                unsigned n = 0;
                for (unsigned k = 0; k < NPAGES; k++)
                        if (order[k] / (NPAGES / 2) == h)
                                halves[h][n++] = order[k];
                ASSERT_EQ(n, NPAGES / 2);
                w[h] = (Walker){ buf, hashes, halves[h], &go, passes };
                ASSERT_OK(pthread_create(&t[h], NULL, walker_main, &w[h]));
        }
        for (int p = 0; p < passes; p++) {
                struct zswap_stats s0, s1;
                ASSERT_TRUE(td_pageout_want(c, buf, LEN, NPAGES * 9 / 10) > 0);
                td_stats(c, &s0);
                uint64_t h0 = status_history(d);
                pthread_barrier_wait(&go);
                pthread_barrier_wait(&go);
                td_stats(c, &s1);
                refaults[p] = s1.refaults - s0.refaults;
                history[p] = status_history(d) - h0;
                fprintf(stderr, "two threads, pass %d: %llu refaults, %llu pages brought back by the history\n", p,
                        (unsigned long long)refaults[p], (unsigned long long)history[p]);
        }
        for (unsigned h = 0; h < 2; h++)
                ASSERT_OK(pthread_join(t[h], NULL));
        pthread_barrier_destroy(&go);
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
        static unsigned other[NPAGES];
        shuffle(other, 78);
        uint64_t wrong0 = status_wrong(&d);
        pass(&d, c, buf, hashes, other, false, &refaults, &history);
        uint64_t wrong = status_wrong(&d) - wrong0;
        fprintf(stderr, "a new order: %llu refaults, %llu pages brought back, %llu guesses wrong\n",
                (unsigned long long)refaults, (unsigned long long)history, (unsigned long long)wrong);
        ASSERT_TRUE(wrong >= HIST_WINDOW);
        if (history * 2 >= NPAGES)
                test_fail("a new order: %llu pages brought back on wrong guesses", (unsigned long long)history);
        pass(&d, c, buf, hashes, order, true, &refaults, &history);
        fprintf(stderr, "the old order again: %llu refaults, %llu pages brought back\n",
                (unsigned long long)refaults, (unsigned long long)history);
        if (refaults * 3 >= first)
                test_fail("the old order again took %llu refaults, the first %llu", (unsigned long long)refaults,
                          (unsigned long long)first);

        /* 4 */
        static uint64_t two_hashes[NPAGES];
        static unsigned two_order[NPAGES];
        uint8_t *two = td_region(c, LEN, 0x7e0d, two_hashes);
        uint64_t two_refaults[5], two_history[5];
        shuffle(two_order, 79);
        two_walkers(&d, c, two, two_hashes, two_order, 5, two_refaults, two_history);
        ASSERT_TRUE(two_refaults[0] > NPAGES / 2);
        for (int p = 2; p < 5; p++)
                if (two_refaults[p] * 3 >= two_refaults[0])
                        test_fail("two threads: pass %d took %llu refaults, the first %llu", p,
                                  (unsigned long long)two_refaults[p], (unsigned long long)two_refaults[0]);
        ASSERT_OK(zswap_unregister(c, two, LEN));

        /* 5 */
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
