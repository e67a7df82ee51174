/*
 * test-compact: pool compaction (pool.c, "Compaction") moves compressed
 * objects while the client faults them back and evicts them again, and
 * never loses or corrupts a page.
 *
 * 32 MiB of corpus pages are evicted, then every other page is written
 * back (one of its bytes rewritten with its own value: a write fault,
 * which drops any kept copy), so every chunk of the pool is left about
 * half empty. Then, for TORTURE_SECONDS / 3 + 2 seconds (12 s by default)
 * and until the daemon has made at least COMPACT_PASSES compaction passes,
 * two threads read random even pages and check each whole against its
 * hash, one rewrites random odd pages the same way (pages of their own, so
 * that no byte is read and written at once by the test itself), and one
 * evicts random ranges again, while the daemon compacts once a second. At the end every page
 * holds what it held, the daemon has moved objects, and chunks went back.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "harness.h"
#include "protocol.h"

#define NPAGES 8192
#define COMPACT_PASSES 3
#define SAFETY_S 240

static uint8_t *buf;
static uint64_t hashes[NPAGES];
static _Atomic bool stop;
static _Atomic uint64_t bad, checked, rewritten, evicted;
static _Atomic long first_bad = -1;
static struct zswap_client *client;

static void *reader(void *arg) {
        uint64_t s = (uintptr_t)arg;
        while (!atomic_load(&stop)) {
                size_t i = xorshift(&s) % (NPAGES / 2) * 2;
                if (page_hash(buf + i * ZSWAP_PAGE_SIZE) != hashes[i]) {
                        long none = -1;
                        atomic_fetch_add(&bad, 1);
                        atomic_compare_exchange_strong(&first_bad, &none, (long)i);
                }
                atomic_fetch_add(&checked, 1);
                if (i % 8 == 0)
                        usleep(50); /* leave most of the region out, for compaction to move */
        }
        return NULL;
}

static void *writer(void *arg) {
        uint64_t s = (uintptr_t)arg;
        while (!atomic_load(&stop)) {
                size_t i = xorshift(&s) % (NPAGES / 2) * 2 + 1;
                volatile uint8_t *b = buf + i * ZSWAP_PAGE_SIZE + xorshift(&s) % ZSWAP_PAGE_SIZE;
                *b = *b; /* a write fault with the same content */
                atomic_fetch_add(&rewritten, 1);
                usleep(200);
        }
        return NULL;
}

static void *evicter(void *arg) {
        uint64_t s = (uintptr_t)arg;
        while (!atomic_load(&stop)) {
                size_t i = xorshift(&s) % (NPAGES / 256) * 256;
                int r = zswap_pageout(client, buf + i * ZSWAP_PAGE_SIZE, 256 * ZSWAP_PAGE_SIZE);
                ASSERT_TRUE(r >= 0);
                atomic_fetch_add(&evicted, (uint64_t)r);
        }
        return NULL;
}

int main(void) {
        TestDaemon d;
        const size_t len = (size_t)NPAGES * ZSWAP_PAGE_SIZE;
        unsigned seconds = test_env_uint("TORTURE_SECONDS", 30) / 3 + 2;
        ZMsgStatusReply st;

        td_start(&d, "");
        client = td_connect(&d);
        buf = td_region(client, len, 41, hashes);
        ASSERT_TRUE(td_pageout_want(client, buf, len, NPAGES * 9 / 10) > 0);
        for (size_t i = 0; i < NPAGES; i += 2) {
                volatile uint8_t *b = buf + i * ZSWAP_PAGE_SIZE + 100;
                *b = *b;
        }
        td_status(&d, &st);
        fprintf(stderr, "half the pages back: pool %llu bytes for %llu of objects\n",
                (unsigned long long)st.stats.pool_bytes, (unsigned long long)st.stats.compressed_bytes);

        pthread_t th[4];
        ASSERT_OK(pthread_create(&th[0], NULL, reader, (void *)(uintptr_t)1));
        ASSERT_OK(pthread_create(&th[1], NULL, reader, (void *)(uintptr_t)2));
        ASSERT_OK(pthread_create(&th[2], NULL, writer, (void *)(uintptr_t)3));
        ASSERT_OK(pthread_create(&th[3], NULL, evicter, (void *)(uintptr_t)4));
        time_t t0 = time(NULL);
        for (;;) {
                sleep(1);
                td_status(&d, &st);
                time_t t = time(NULL) - t0;
                if ((t >= (time_t)seconds && st.compactions >= COMPACT_PASSES && st.compact_moved > 0) || t >= SAFETY_S ||
                    atomic_load(&bad))
                        break;
        }
        atomic_store(&stop, true);
        for (unsigned i = 0; i < 4; i++)
                ASSERT_OK(pthread_join(th[i], NULL));
        fprintf(stderr,
                "%llu pages checked, %llu rewritten, %llu evicted again; %llu compaction passes moved %llu "
                "objects and gave back %llu bytes; pool %llu bytes for %llu of objects\n",
                (unsigned long long)checked, (unsigned long long)rewritten, (unsigned long long)evicted,
                (unsigned long long)st.compactions, (unsigned long long)st.compact_moved,
                (unsigned long long)st.compact_freed, (unsigned long long)st.stats.pool_bytes,
                (unsigned long long)st.stats.compressed_bytes);
        if (atomic_load(&bad))
                fprintf(stderr, "%llu bad reads, the first of page %ld\n", (unsigned long long)bad,
                        atomic_load(&first_bad));
        ASSERT_EQ(atomic_load(&bad), 0);
        ASSERT_TRUE(st.compactions >= COMPACT_PASSES); /* else: stopped by the safety timeout */
        ASSERT_TRUE(st.compact_moved > 0);
        ASSERT_TRUE(st.compact_freed > 0);

        /* every page, resident or not, whole */
        ASSERT_EQ(verify_pages(buf, len, hashes), 0);
        ASSERT_TRUE(td_pageout_want(client, buf, len, NPAGES * 9 / 10) > 0);
        ASSERT_EQ(verify_pages(buf, len, hashes), 0);
        zswap_disconnect(client);
        td_stop(&d);
        return 0;
}
