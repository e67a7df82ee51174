/*
 * test-client-kill: a client killed with SIGKILL in the middle of an
 * eviction leaves nothing behind in the daemon (no pool bytes, no pages,
 * no client), and another client paging in parallel is unaffected.
 * Each victim holds TEST_VICTIM_MB (64) MiB, paged out again and again.
 */
#include <signal.h>
#include <sys/wait.h>

#include "harness.h"
#include "util.h"

static _Noreturn void victim(const char *sock, int ready_fd) {
        struct zswap_client *c;
        size_t len = (size_t)MAX(test_env_uint("TEST_VICTIM_MB", 64), 1u) << 20;
        /* the daemon refuses our user while a read of a killed victim's
         * memory outlives its bound (memread.h), as on a machine so busy
         * that the victim's exit takes that long: until that read is back */
        for (uint64_t end = now_ns() + TEST_WAIT_S * 1000000000ull; zswap_connect(sock, &c) < 0; usleep(10000))
                if (now_ns() > end)
                        _exit(1);
        uint8_t *buf = test_map(len);
        fill_pages(buf, len, (uint64_t)getpid());
        if (zswap_register(c, buf, len) < 0)
                _exit(2);
        (void)!write(ready_fd, "x", 1);
        for (uint64_t s = 1;; s++) {
                zswap_pageout(c, buf, len);
                /* touch a random eighth back in, so each pass really works */
                for (size_t i = 0; i < len / ZSWAP_PAGE_SIZE / 8; i++)
                        buf[(xorshift(&s) % (len / ZSWAP_PAGE_SIZE)) * ZSWAP_PAGE_SIZE] ^= 1;
        }
}

int main(int argc, char **argv) {
        TestDaemon d;

        /* victims are exec'ed, not just forked: a fresh process, as in life */
        if (argc == 4 && strcmp(argv[1], "--victim") == 0)
                victim(argv[2], atoi(argv[3]));
        const size_t len = 16 << 20;
        static uint64_t hashes[(16 << 20) / 4096];
        struct zswap_stats s;
        uint64_t seed = 42;

        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, len, 31, hashes);

        for (int round = 0; round < 6; round++) {
                int p[2];
                char x;
                ASSERT_OK(pipe(p));
                pid_t pid = fork();
                if (pid == 0) {
                        char fd[16];
                        close(p[0]);
                        snprintf(fd, sizeof(fd), "%d", p[1]);
                        execl("/proc/self/exe", "test-client-kill", "--victim", d.sock, fd, (char *)NULL);
                        _exit(127);
                }
                close(p[1]);
                ASSERT_EQ(read(p[0], &x, 1), 1);
                close(p[0]);
                /* meanwhile our own pages go out and come back */
                ASSERT_OK(zswap_pageout(c, buf, len));
                usleep(1000 * (useconds_t)(xorshift(&seed) % 300));
                kill(pid, SIGKILL);
                ASSERT_EQ(waitpid(pid, NULL, 0), pid);
                ASSERT_EQ(verify_pages(buf, len, hashes), 0);
        }

        /* the daemon forgets the dead: only our client and our pages remain */
        ASSERT_OK(zswap_pageout(c, buf, len));
        struct zswap_stats mine;
        for (uint64_t end = now_ns() + TEST_WAIT_S * 1000000000ull; now_ns() < end;) {
                td_stats(c, &s);
                ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &mine));
                if (s.clients == 1 && s.stored_pages == mine.stored_pages && s.same_pages == mine.same_pages)
                        break;
                usleep(20000);
        }
        fprintf(stderr, "clients %llu, stored %llu (ours %llu), pool %llu bytes for %llu compressed\n",
                (unsigned long long)s.clients, (unsigned long long)s.stored_pages,
                (unsigned long long)mine.stored_pages, (unsigned long long)s.pool_bytes,
                (unsigned long long)s.compressed_bytes);
        ASSERT_EQ(s.clients, 1);
        ASSERT_EQ(s.stored_pages, mine.stored_pages);
        ASSERT_EQ(s.staged_pages, 0);
        ASSERT_EQ(s.compressed_bytes, mine.compressed_bytes);
        /* the pool shrinks back to what our pages need, plus chunks that
         * still hold one of ours among the victims' holes (the pool does
         * not compact yet); reclaim runs about once a second */
        uint64_t bound = mine.compressed_bytes * 2 + (16 << 20);
        for (uint64_t end = now_ns() + TEST_WAIT_S * 1000000000ull; s.pool_bytes > bound && now_ns() < end;) {
                usleep(20000);
                td_stats(c, &s);
        }
        fprintf(stderr, "pool after reclaim: %llu bytes\n", (unsigned long long)s.pool_bytes);
        ASSERT_LE(s.pool_bytes, bound);
        ASSERT_EQ(verify_pages(buf, len, hashes), 0);
        zswap_disconnect(c);
        td_stop(&d);
        return 0;
}
