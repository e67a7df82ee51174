/*
 * test-fork-raw-exit: a fork the library is not told of (a raw clone,
 * _Fork), in the middle of eviction, by a parent that exits at once.
 *
 * A page the agent had moved into a staging slot at the fork's instant
 * is missing at its address in the child; the daemon gives it to the
 * child by reading the parent's slot (daemon/fault/fork.c,
 * fork_inflight()), and that read is made after the FORK event was read,
 * so after fork() returned in the parent. Each round, a process P
 * connects, holds a large region evicted (so that the fork's walk of its
 * index takes a while before it reaches the pages in flight, at higher
 * addresses), keeps a second region A going out and coming back, raw-forks
 * and _exit()s at once. The child C, with nobody running the library,
 * reads both regions and exits 0 only if every page is intact.
 *
 * A known gap (docs/page-lifecycle.md, "Known narrow gaps"): once the
 * parent's address space is torn down, the read of its slot fails and
 * the child's page reads as zeros. The daemon reads the slots first
 * thing for a fork (fork.c, snap_take()), which narrows the window.
 * Measured on 6.18: with the slots read by the index walk, children lost
 * pages in 11 of 60 rounds; read first, in 3 of 60; with the parent
 * waiting 300 ms before it exits (TEST_FORK_EXIT_WAIT_MS=300, the
 * control), in none of 40. Until the gap is closed the test runs only
 * with TEST_FORK_EXIT_GAP=1.
 *
 * TEST_FORK_EXIT_ROUNDS overrides the number of rounds.
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define APAGES 1024
#define BPAGES 16384

static TestDaemon d;
static struct zswap_client *c;
static uint8_t *a, *b;
static uint64_t ahash[APAGES], bhash[BPAGES];
static atomic_bool stop;

static void *pager(void *arg) {
        (void)arg;
        while (!atomic_load(&stop))
                (void)zswap_pageout(c, a, APAGES * ZSWAP_PAGE_SIZE);
        return NULL;
}

static void *reader(void *arg) {
        uint64_t sum = 0;
        (void)arg;
        while (!atomic_load(&stop))
                for (size_t i = 0; i < APAGES && !atomic_load(&stop); i++)
                        sum += ((volatile uint8_t *)a)[i * ZSWAP_PAGE_SIZE + 64];
        return (void *)(uintptr_t)sum;
}

/* P: returns only in the child, after the raw fork */
static void parent_round(unsigned r) {
        pthread_t tp, tr;

        c = td_connect(&d);
        a = td_region(c, APAGES * ZSWAP_PAGE_SIZE, 100 + r, ahash); /* mapped first: the higher address */
        b = td_region(c, BPAGES * ZSWAP_PAGE_SIZE, 200 + r, bhash);
        if (td_pageout_want(c, b, BPAGES * ZSWAP_PAGE_SIZE, BPAGES * 9 / 10) < 0)
                _exit(3);
        ASSERT_OK(-pthread_create(&tp, NULL, pager, NULL));
        ASSERT_OK(-pthread_create(&tr, NULL, reader, NULL));
        usleep(20000 + (r % 7) * 3000);
        pid_t pid = r & 1 ? _Fork() : (pid_t)syscall(SYS_clone, SIGCHLD, 0, NULL, NULL, 0);
        if (pid != 0) {
                unsigned wait_ms = test_env_uint("TEST_FORK_EXIT_WAIT_MS", 0);
                if (wait_ms)
                        usleep(wait_ms * 1000); /* a control: the parent outlives the child's copies */
                _exit(pid < 0 ? 4 : 0); /* P: gone at once */
        }
        /* C: only this thread exists here; no stdio, no malloc */
        size_t bad = verify_pages(a, APAGES * ZSWAP_PAGE_SIZE, ahash) + verify_pages(b, BPAGES * ZSWAP_PAGE_SIZE, bhash);
        _exit(bad == 0 ? 0 : bad > 200 ? 200 : (int)bad);
}

int main(void) {
#if defined(__SANITIZE_THREAD__)
        test_skip("raw forks cannot be followed by ThreadSanitizer");
#endif
        unsigned rounds = test_env_uint("TEST_FORK_EXIT_ROUNDS", 20), bad_rounds = 0;

        if (!test_env_uint("TEST_FORK_EXIT_GAP", 0) && !test_env_uint("TEST_FORK_EXIT_WAIT_MS", 0))
                test_skip("a known gap (docs/page-lifecycle.md): TEST_FORK_EXIT_GAP=1 runs it");

        ASSERT_OK(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)); /* C is ours to wait for once P is gone */
        td_start_logged(&d, getenv("TEST_DAEMON_ARGS"));
        for (unsigned r = 0; r < rounds; r++) {
                pid_t p = fork();
                ASSERT_TRUE(p >= 0);
                if (p == 0)
                        parent_round(r);
                int st;
                ASSERT_EQ(waitpid(p, &st, 0), p);
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                        test_fail("round %u: the parent failed (status %#x)", r, st);
                pid_t ch = waitpid(-1, &st, 0); /* C, reparented to us */
                ASSERT_TRUE(ch > 0);
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                        fprintf(stderr, "round %u: the child read %d pages that differ (status %#x)\n", r,
                                WIFEXITED(st) ? WEXITSTATUS(st) : -1, st);
                        bad_rounds++;
                }
        }
        unsigned caught = td_log_count(&d, "in flight at a fork the library did not announce");
        unsigned errs = td_log_count(&d, "could not be copied to a forked child");
        fprintf(stderr, "%u rounds: pages in flight at %u forks, copies failed at %u, children with pages lost: %u\n",
                rounds, caught, errs, bad_rounds);
        td_stop(&d);
        ASSERT_EQ(bad_rounds, 0);
        return 0;
}
