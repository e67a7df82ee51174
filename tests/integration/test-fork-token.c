/*
 * test-fork-token: the token a forked child names to claim its address
 * space (CHILD_ATTACH) is 64 random bits per fork, not a counter. Once the
 * parent has exited, the daemon matches an orphaned child by its token and
 * its user alone, so a token another process of that user could predict
 * (1, 2, 3, ...) would let it claim the child's memory.
 *
 * Two client programs started afresh (exec) each fork twice, with pages
 * evicted at every fork; each child checks that it got its memory (the
 * daemon matched its token) and leaves. The programs report their tokens
 * (zswap_fork_token_last(), libzswap-internal.h): the first forks of the
 * two must differ (a counter gives 1 in both), and one program's two
 * forks must not differ by 1.
 *
 * Built on libzswap's core (static) for the internal header.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "libzswap-internal.h"

#define NPAGES 64

static int worker(const char *sock) {
        const size_t len = NPAGES * ZSWAP_PAGE_SIZE;
        static uint64_t hashes[NPAGES];
        uint64_t tok[2];
        struct zswap_client *c;

        ASSERT_OK(zswap_connect(sock, &c));
        uint8_t *buf = td_region(c, len, 5, hashes);
        for (int i = 0; i < 2; i++) {
                ASSERT_TRUE(zswap_pageout(c, buf, len) > 0);
                pid_t pid = fork();
                ASSERT_TRUE(pid >= 0);
                if (pid == 0) {
                        /* attached by its token: its memory as at the fork */
                        int bad = (int)verify_pages(buf, len, hashes);
                        zswap_disconnect(c);
                        _exit(bad ? 10 : 0);
                }
                tok[i] = zswap_fork_token_last();
                int st;
                ASSERT_EQ(waitpid(pid, &st, 0), pid);
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                        test_fail("fork child failed: status %#x", st);
                /* every page back in, for the next pageout */
                ASSERT_EQ(verify_pages(buf, len, hashes), 0);
        }
        zswap_disconnect(c);
        printf("%" PRIx64 " %" PRIx64 "\n", tok[0], tok[1]);
        return 0;
}

/* Run this program afresh as a worker: its two tokens. */
static void run_worker(const TestDaemon *d, uint64_t tok[2]) {
        char line[128];
        int p[2];

        ASSERT_OK(pipe2(p, O_CLOEXEC));
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                dup2(p[1], STDOUT_FILENO);
                execl("/proc/self/exe", "test-fork-token", "worker", d->sock, (char *)NULL);
                _exit(127);
        }
        close(p[1]);
        FILE *f = fdopen(p[0], "re");
        ASSERT_TRUE(f != NULL);
        bool got = fgets(line, sizeof(line), f) != NULL;
        fclose(f);
        int st;
        ASSERT_EQ(waitpid(pid, &st, 0), pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                test_fail("worker failed: status %#x", st);
        ASSERT_TRUE(got && sscanf(line, "%" SCNx64 " %" SCNx64, &tok[0], &tok[1]) == 2);
}

int main(int argc, char **argv) {
#if defined(__SANITIZE_THREAD__)
        test_skip("fork children cannot start threads under ThreadSanitizer");
#endif
        if (argc == 3 && strcmp(argv[1], "worker") == 0)
                return worker(argv[2]);

        TestDaemon d;
        uint64_t a[2], b[2];

        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        run_worker(&d, a);
        run_worker(&d, b);
        fprintf(stderr, "program 1: forks %#" PRIx64 " %#" PRIx64 "; program 2: forks %#" PRIx64 " %#" PRIx64 "\n",
                a[0], a[1], b[0], b[1]);
        ASSERT_TRUE(a[0] != 0 && a[1] != 0 && b[0] != 0 && b[1] != 0);
        if (a[0] == b[0])
                test_fail("two programs' first forks named the same token %#" PRIx64, a[0]);
        if (a[1] - a[0] == 1 || b[1] - b[0] == 1)
                test_fail("a program's consecutive forks named consecutive tokens");
        ASSERT_TRUE(a[0] != a[1] && b[0] != b[1]);
        td_stop(&d);
        return 0;
}
