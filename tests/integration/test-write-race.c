/*
 * test-write-race: a write racing an eviction of the same page is never
 * lost, and a read never sees a torn or stale page. A writer thread bumps
 * a counter in a few pages, rewriting each whole page with it, as fast as
 * it can, while the main thread pages the same pages out in a tight loop;
 * a reader thread checks every page it reads is whole (all words equal)
 * and never goes back in time. It runs TORTURE_SECONDS / 3 + 1 (10 s by
 * default), and on until the pages were evicted ten times over.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "harness.h"
#include "util.h"

#define NPAGES 64
#define WORDS (ZSWAP_PAGE_SIZE / 8)

static uint64_t *pages;
static _Atomic bool stop;
static _Atomic uint64_t torn, backwards;
static uint64_t written[NPAGES]; /* writer only */

static void *writer(void *arg) {
        uint64_t seed = 3;
        while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
                size_t p = xorshift(&seed) % NPAGES;
                uint64_t v = ++written[p];
                for (size_t j = 0; j < WORDS; j++)
                        __atomic_store_n(&pages[p * WORDS + j], v, __ATOMIC_RELAXED);
        }
        return NULL;
}

static void *reader(void *arg) {
        uint64_t last[NPAGES] = { 0 }, seed = 5;
        while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
                size_t p = xorshift(&seed) % NPAGES;
                /* the writer may be mid-page: read last word first, then
                 * the first; first >= last always, and no word < last word */
                uint64_t tail = __atomic_load_n(&pages[p * WORDS + WORDS - 1], __ATOMIC_ACQUIRE);
                uint64_t head = __atomic_load_n(&pages[p * WORDS], __ATOMIC_ACQUIRE);
                if (head < tail)
                        atomic_fetch_add(&torn, 1);
                if (tail < last[p])
                        atomic_fetch_add(&backwards, 1);
                last[p] = tail;
        }
        return NULL;
}

int main(void) {
        TestDaemon d;
        pthread_t w, r;
        unsigned seconds = test_env_uint("TORTURE_SECONDS", 27) / 3 + 1;
        uint64_t passes = 0, evicted = 0;

        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        pages = test_map(NPAGES * ZSWAP_PAGE_SIZE);
        ASSERT_OK(zswap_register(c, pages, NPAGES * ZSWAP_PAGE_SIZE));
        ASSERT_OK(-pthread_create(&w, NULL, writer, NULL));
        ASSERT_OK(-pthread_create(&r, NULL, reader, NULL));
        /* the chosen time, and on until the pages were evicted ten times
         * over, however slow the machine; a safety bound says how far */
        uint64_t end = now_ns() + seconds * 1000000000ull, bound = end + TEST_WAIT_S * 1000000000ull;
        while (now_ns() < end || evicted <= NPAGES * 10) {
                if (now_ns() > bound)
                        test_fail("after %u s: %llu pages evicted in %llu passes, not %d", seconds + TEST_WAIT_S,
                                  (unsigned long long)evicted, (unsigned long long)passes, NPAGES * 10);
                int n = zswap_pageout(c, pages, NPAGES * ZSWAP_PAGE_SIZE);
                ASSERT_OK(n);
                evicted += (uint64_t)n;
                passes++;
        }
        atomic_store(&stop, true);
        pthread_join(w, NULL);
        pthread_join(r, NULL);
        ASSERT_OK(zswap_pageout(c, pages, NPAGES * ZSWAP_PAGE_SIZE));
        size_t lost = 0;
        for (size_t p = 0; p < NPAGES; p++)
                for (size_t j = 0; j < WORDS; j++)
                        lost += pages[p * WORDS + j] != written[p];
        fprintf(stderr, "%llu passes, %llu pages evicted; %zu words lost, %llu torn reads, %llu stale reads\n",
                (unsigned long long)passes, (unsigned long long)evicted, lost, (unsigned long long)torn,
                (unsigned long long)backwards);
        ASSERT_EQ(lost, 0);
        ASSERT_EQ(atomic_load(&torn), 0);
        ASSERT_EQ(atomic_load(&backwards), 0);
        ASSERT_TRUE(evicted > NPAGES * 10);
        zswap_disconnect(c);
        td_stop(&d);
        return 0;
}
