/*
 * test-fork-orphan: a parent that is gone before its forked child has
 * attached (daemon(3): fork, and the parent exits at once; or the parent
 * killed). The child's address space is the daemon's already (it read the
 * fork event and holds the child's uffd), so the child must attach and
 * read every page the parent had evicted, whoever its parent is by then.
 *
 * The test process is a child subreaper. It starts a client P, which
 * registers a region, evicts it and forks C. C's first fork handler
 * (registered before libzswap's, so it runs first in the child) kills P
 * and waits until it is reparented; only then does libzswap's handler
 * attach C. C checks every page, writes and evicts part of the region
 * through its own client, checks again, and exits with a status saying
 * what failed; the test process, its new parent, collects it.
 *
 * Variants: P killed with SIGKILL, and P exiting on its own (_exit in a
 * thread of P, as daemon(3)'s parent does).
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "harness.h"

#define NPAGES 512

static pid_t parent_pid;
static int parent_exit_fd = -1; /* write end: P exits when C writes to it */
static bool kill_parent;

/* In C, before libzswap's handler: P goes away now. */
static void child_first(void) {
        if (kill_parent)
                kill(parent_pid, SIGKILL);
        else
                (void)!write(parent_exit_fd, "x", 1);
        /* reparented: P has exited (a zombie or reaped, its children are ours) */
        for (int i = 0; i < TEST_WAIT_S * 1000 && getppid() == parent_pid; i++)
                usleep(1000);
}

static void *exit_when_told(void *arg) {
        char b;
        int fd = (int)(intptr_t)arg;
        (void)!read(fd, &b, 1);
        _exit(0);
}

static int child_main(struct zswap_client *c, uint8_t *buf, const uint64_t *orig) {
        static uint64_t mine[NPAGES];
        const size_t len = NPAGES * ZSWAP_PAGE_SIZE;

        if (getppid() == parent_pid)
                return 9; /* P did not go away: the test tests nothing */
        size_t bad = verify_pages(buf, len, orig);
        if (bad) {
                fprintf(stderr, "orphan child: %zu of %u pages differ from the parent's at the fork\n", bad, NPAGES);
                return 10;
        }
        fill_pages(buf, len / 2, 77);
        hash_pages(buf, len, mine);
        int n = zswap_pageout(c, buf, len);
        if (n < NPAGES / 2) {
                fprintf(stderr, "orphan child: pageout through its own client: %d\n", n);
                return 11;
        }
        bad = verify_pages(buf, len, mine);
        if (bad) {
                fprintf(stderr, "orphan child: %zu pages differ after its own pageout\n", bad);
                return 12;
        }
        zswap_disconnect(c);
        return 0;
}

/* P (this program run again, so that libzswap has installed no fork
 * handler yet): register, evict, fork. Never returns. */
static int parent_main(const char *sock, bool by_kill) {
        static uint64_t orig[NPAGES];
        const size_t len = NPAGES * ZSWAP_PAGE_SIZE;
        struct zswap_client *c;
        int p[2];
        pthread_t t;

        ASSERT_OK(pipe2(p, O_CLOEXEC));
        parent_pid = getpid();
        parent_exit_fd = p[1];
        kill_parent = by_kill;
        /* before libzswap installs its own (in zswap_connect): child
         * handlers run in the order they were registered */
        ASSERT_OK(-pthread_atfork(NULL, NULL, child_first));
        ASSERT_OK(-pthread_create(&t, NULL, exit_when_told, (void *)(intptr_t)p[0]));
        ASSERT_OK(zswap_connect(sock, &c));
        uint8_t *buf = td_region(c, len, 41, orig);
        ASSERT_TRUE(td_pageout_want(c, buf, len, NPAGES / 2 + 1) > NPAGES / 2);
        pid_t pid = fork();
        if (pid == 0)
                _exit(child_main(c, buf, orig));
        /* killed or told to exit by the child meanwhile */
        for (;;)
                pause();
}

static void one(TestDaemon *d, bool by_kill) {
        int st;

        fprintf(stderr, "-- the parent %s before its child attaches\n", by_kill ? "killed" : "exits");
        pid_t p = fork();
        ASSERT_TRUE(p >= 0);
        if (p == 0) {
                execl("/proc/self/exe", "test-fork-orphan", "parent", d->sock, by_kill ? "kill" : "exit", (char *)NULL);
                _exit(127);
        }
        ASSERT_EQ(waitpid(p, &st, 0), p);
        if (by_kill ? !WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL : !WIFEXITED(st) || WEXITSTATUS(st) != 0)
                test_fail("the parent: status %#x", st);
        /* the orphan is ours now (subreaper) */
        pid_t ch = waitpid(-1, &st, 0);
        ASSERT_TRUE(ch > 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                td_log_dump(d);
                test_fail("the orphaned child failed: status %#x (%s)", st,
                          WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "exited");
        }
}

int main(int argc, char **argv) {
        if (argc == 4 && strcmp(argv[1], "parent") == 0)
                return parent_main(argv[2], strcmp(argv[3], "kill") == 0);
#if defined(__SANITIZE_THREAD__)
        /* the child starts its agent thread after a multi-threaded fork,
         * which ThreadSanitizer's runtime cannot follow */
        test_skip("fork children cannot start threads under ThreadSanitizer");
#endif
        TestDaemon d;

        ASSERT_OK(prctl(PR_SET_CHILD_SUBREAPER, 1));
        td_start_logged(&d, getenv("TEST_DAEMON_ARGS"));
        one(&d, true);
        one(&d, false);
        td_stop(&d);
        return 0;
}
