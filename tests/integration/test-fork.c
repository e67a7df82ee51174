/*
 * test-fork: fork after eviction. Parent and child each see the content as
 * it was at the fork, then diverge independently: what one writes (and
 * evicts again) the other never sees. The child sets a resident limit of
 * its own.
 */
#include <sys/wait.h>

#include "harness.h"

#define NPAGES 4096

static void rewrite_half(uint8_t *buf, uint64_t seed) {
        fill_pages(buf, NPAGES / 2 * ZSWAP_PAGE_SIZE, seed);
}

static int child_main(struct zswap_client *c, uint8_t *buf, const uint64_t *orig) {
        uint64_t mine[NPAGES];

        /* the content as it was at the fork */
        if (verify_pages(buf, NPAGES * ZSWAP_PAGE_SIZE, orig) != 0)
                return 10;
        /* diverge: rewrite half, evict (the child's own client), read back */
        rewrite_half(buf, 1000);
        hash_pages(buf, NPAGES * ZSWAP_PAGE_SIZE, mine);
        /* half of it out (td_pageout_want(): on a slow machine, or under
         * valgrind, the agent's moves may be revoked and leave pages
         * resident, which is no loss) */
        if (td_pageout_want(c, buf, NPAGES * ZSWAP_PAGE_SIZE, NPAGES / 2) < 0)
                return 11;
        if (verify_pages(buf, NPAGES * ZSWAP_PAGE_SIZE, mine) != 0)
                return 12;
        /* its own limit, as a worker of a service under one sets it (the
         * daemon once refused a fork child's with ESRCH) */
        int r = zswap_set_limit(c, 64 << 20);
        if (r != 0) {
                fprintf(stderr, "child: zswap_set_limit: %s\n", strerror(-r));
                return 13;
        }
        zswap_disconnect(c);
        return 0;
}

int main(void) {
#if defined(__SANITIZE_THREAD__)
        /* the child starts its agent thread after a multi-threaded fork,
         * which ThreadSanitizer's runtime cannot follow */
        test_skip("fork children cannot start threads under ThreadSanitizer");
#endif
        TestDaemon d;
        const size_t len = NPAGES * ZSWAP_PAGE_SIZE;
        static uint64_t orig[NPAGES], mine[NPAGES];

        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, len, 11, orig);

        for (int round = 0; round < 3; round++) {
                ASSERT_OK(zswap_pageout(c, buf, len));
                /* a quarter resident, the rest evicted at the fork */
                for (size_t i = 0; i < NPAGES; i += 4)
                        ASSERT_EQ(page_hash(buf + i * ZSWAP_PAGE_SIZE), orig[i]);
                pid_t pid = fork();
                ASSERT_TRUE(pid >= 0);
                if (pid == 0)
                        _exit(child_main(c, buf, orig));
                /* the parent diverges at the same time */
                ASSERT_EQ(verify_pages(buf, len, orig), 0);
                rewrite_half(buf, 2000 + round);
                hash_pages(buf, len, mine);
                ASSERT_OK(zswap_pageout(c, buf, len));
                int st;
                ASSERT_EQ(waitpid(pid, &st, 0), pid);
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                        test_fail("child failed: status %#x", st);
                ASSERT_EQ(verify_pages(buf, len, mine), 0);
                /* back to the original for the next round */
                fill_pages(buf, len, 11);
        }
        struct zswap_stats s;
        td_stats(c, &s);
        fprintf(stderr, "clients after children exited: %llu\n", (unsigned long long)s.clients);
        zswap_disconnect(c);
        td_stop(&d);
        return 0;
}
