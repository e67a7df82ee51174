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
static struct zswap_client *client;

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

        TdRace race = { .c = client, .buf = buf, .npages = NPAGES, .hashes = hashes, .read_pause_us = 50,
                        .write_pause_us = 200 };
        td_race_start(&race);
        time_t t0 = time(NULL);
        for (;;) {
                sleep(1);
                td_status(&d, &st);
                time_t t = time(NULL) - t0;
                /* until the work asserted below is done: on a loaded
                 * machine a pass may move a few objects and empty no chunk */
                if ((t >= (time_t)seconds && st.compactions >= COMPACT_PASSES && st.compact_moved > 0 &&
                     st.compact_freed > 0) ||
                    t >= SAFETY_S || atomic_load(&race.bad))
                        break;
        }
        td_race_stop(&race);
        fprintf(stderr,
                "%llu pages checked, %llu rewritten, %llu evicted again; %llu compaction passes moved %llu "
                "objects and gave back %llu bytes; pool %llu bytes for %llu of objects\n",
                (unsigned long long)race.checked, (unsigned long long)race.rewritten, (unsigned long long)race.evicted,
                (unsigned long long)st.compactions, (unsigned long long)st.compact_moved,
                (unsigned long long)st.compact_freed, (unsigned long long)st.stats.pool_bytes,
                (unsigned long long)st.stats.compressed_bytes);
        ASSERT_EQ(atomic_load(&race.bad), 0);
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
