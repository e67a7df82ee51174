/*
 * test-shared-pages: memory whose pages a fork made shared is evicted
 * whole, and the other process keeps its own copy.
 *
 * After fork() every private anonymous page of both processes is shared
 * copy-on-write, and stays so (not "exclusive" to either) until one
 * writes it, even after the child has exited or exec'd. UFFDIO_MOVE refuses
 * such a page (EBUSY); the agent then breaks the sharing with
 * MADV_POPULATE_WRITE and moves it. Any program that ever ran a
 * subprocess has such pages. Before the fix, the agent broke the sharing of
 * every second page of a run only, so a pageout evicted half.
 *
 *  1. fork + exit before registering: every page is evicted, and reads back.
 *  2. a live child holding the same pages: every page of the parent is
 *     evicted and reads back, and the child's copy is untouched.
 */
#include <sys/wait.h>

#include "harness.h"
#include "protocol.h"

#define NPAGES 2048

static size_t held(struct zswap_client *c) {
        struct zswap_stats s;
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s));
        return (size_t)(s.stored_pages + s.same_pages);
}

static uint64_t revoked(const TestDaemon *d) {
        ZMsgStatusReply st;
        td_status(d, &st);
        return st.moves_revoked;
}

/* Page out [p, p + len) until every page is held. A pageout must evict
 * every page by itself, unless the daemon revoked a move of the agent
 * meanwhile (an agent too slow to finish one, as under valgrind on a busy
 * machine: those pages stay resident, and the next pageout takes them). */
static void pageout_all(const TestDaemon *d, struct zswap_client *c, uint8_t *p, size_t len, const char *what) {
        for (unsigned round = 1;; round++) {
                uint64_t r0 = revoked(d);
                int n = zswap_pageout(c, p, len);
                size_t h = held(c);
                fprintf(stderr, "%s: pageout %u: %d pages evicted, %zu of %d held\n", what, round, n, h, NPAGES);
                ASSERT_TRUE(n >= 0);
                if (h == NPAGES)
                        return;
                if (revoked(d) == r0)
                        test_fail("%s: a pageout left %zu of %d pages resident, and no move was revoked", what,
                                  NPAGES - h, NPAGES);
                ASSERT_TRUE(round < 1000);
        }
}

int main(void) {
        TestDaemon d;
        const size_t len = NPAGES * ZSWAP_PAGE_SIZE;
        static uint64_t hashes[NPAGES];
        int st;

        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);

        /* 1: shared by a child that is gone */
        uint8_t *a = test_map(len);
        fill_pages(a, len, 61);
        hash_pages(a, len, hashes);
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0)
                _exit(0);
        ASSERT_TRUE(waitpid(pid, &st, 0) == pid);
        ASSERT_OK(zswap_register(c, a, len));
        pageout_all(&d, c, a, len, "after a fork and exit");
        ASSERT_EQ(verify_pages(a, len, hashes), 0);
        ASSERT_OK(zswap_unregister(c, a, len));

        /* 2: shared with a live child, which checks its copy afterwards */
        uint8_t *b = test_map(len);
        fill_pages(b, len, 62);
        hash_pages(b, len, hashes);
        int go[2], result[2];
        ASSERT_OK(pipe(go));
        ASSERT_OK(pipe(result));
        pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                char x;
                size_t bad;
                close(go[1]);
                close(result[0]);
                if (read(go[0], &x, 1) != 1)
                        _exit(2);
                bad = verify_pages(b, len, hashes);
                _exit(write(result[1], &bad, sizeof(bad)) == sizeof(bad) ? 0 : 3);
        }
        close(go[0]);
        close(result[1]);
        ASSERT_OK(zswap_register(c, b, len));
        pageout_all(&d, c, b, len, "shared with a live child");
        ASSERT_EQ(write(go[1], "g", 1), 1);
        size_t child_bad = SIZE_MAX;
        ASSERT_EQ(read(result[0], &child_bad, sizeof(child_bad)), (ssize_t)sizeof(child_bad));
        ASSERT_EQ(child_bad, 0);
        ASSERT_TRUE(waitpid(pid, &st, 0) == pid);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        ASSERT_EQ(verify_pages(b, len, hashes), 0);

        zswap_disconnect(c);
        td_stop(&d);
        return 0;
}
