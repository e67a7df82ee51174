/*
 * test-connect-death: a daemon that dies as it answers a client's ATTACH
 * leaves a client that can still fork, unmap and read its memory.
 *
 * The library's agent thread reads every reply, and the end of the
 * connection after it. When the daemon dies right after it answered
 * ATTACH (with the client's store), the agent sees the end before the
 * connecting thread has taken the store from the reply. The agent must
 * then wait for the connect to finish and recover with what it got (look
 * for a new daemon, or put every page back and close the uffd): had it
 * left at once, seeing no store, zswap_connect() would still succeed,
 * and the client's uffd, its staging area registered on it, would have
 * no reader. The program's next fork() then waits forever for somebody
 * to read its fork event (userfaultfd_event_wait_completion).
 *
 * The daemon here is the test's own (run as root, so the library trusts
 * it): it answers HELLO, does the uffd handshake a real daemon does on
 * ATTACH, answers with a fresh store and hangs up, and no daemon comes
 * back (ZSWAP_RECONNECT_TIMEOUT 0.2 s). Each of 10 rounds (TEST_CONNECT_ROUNDS) connects a
 * client in a child process, which then forks, munmaps and reads its own
 * memory; the parent gives it TEST_WAIT_S and reports where it waits.
 * Without the agent's wait, the first round hangs in the fork.
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <linux/userfaultfd.h>

#include "harness.h"
#include "protocol.h"
#include "store.h"
#include "util.h"

#define ROUNDS_DEFAULT 10
#define NPAGES 64

/* One connection: HELLO, ATTACH answered with a store, then hang up. */
static void serve_one(int lfd) {
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        int fds[4];
        size_t nfds;
        int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        ASSERT_TRUE(s >= 0);

        for (;;) {
                nfds = 4;
                ssize_t n = zmsg_recv(s, buf, sizeof(buf), fds, &nfds, NULL);
                if (n <= 0)
                        break;
                const ZMsgHeader *h = (const ZMsgHeader *)buf;
                ZMsgReply rep = { .status = 0 };
                zmsg_init(&rep.hdr, ZMSG_REPLY, h->id, sizeof(rep));
                if (h->type == ZMSG_HELLO) {
                        ASSERT_TRUE(zmsg_send(s, &rep, sizeof(rep), NULL, 0) >= 0);
                } else if (h->type == ZMSG_ATTACH) {
                        /* as attach.c does: the handshake the staging
                         * area's registration needs, the events a real
                         * daemon asks for */
                        ASSERT_TRUE(nfds >= 1);
                        struct uffdio_api api = { .api = UFFD_API,
                                                  .features = UFFD_FEATURE_EVENT_FORK | UFFD_FEATURE_EVENT_REMAP |
                                                              UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_UNMAP };
                        ASSERT_OK(ioctl(fds[0], UFFDIO_API, &api));
                        uint8_t *map;
                        int store = store_create(CODEC_LZ4, 0, 0x5eed, &map);
                        ASSERT_TRUE(store >= 0);
                        int ro = store_reopen_ro(store);
                        ASSERT_TRUE(ro >= 0);
                        ASSERT_TRUE(zmsg_send(s, &rep, sizeof(rep), &ro, 1) >= 0);
                        close(ro);
                        store_unmap(map);
                        close(store);
                        for (size_t i = 0; i < nfds; i++)
                                close(fds[i]);
                        break; /* and die, as it were */
                } else {
                        rep.status = -ENOTCONN;
                        ASSERT_TRUE(zmsg_send(s, &rep, sizeof(rep), NULL, 0) >= 0);
                }
                for (size_t i = 0; i < nfds; i++)
                        close(fds[i]);
        }
        close(s);
}

/* The client: connect, then what a program does next. */
static int client(const char *sock) {
        static uint64_t hashes[NPAGES];
        uint8_t *buf = test_map(NPAGES * ZSWAP_PAGE_SIZE);
        struct zswap_client *c;
        int st;

        fill_pages(buf, NPAGES * ZSWAP_PAGE_SIZE, 77);
        for (size_t i = 0; i < NPAGES; i++)
                hashes[i] = page_hash(buf + i * ZSWAP_PAGE_SIZE);
        int r = zswap_connect(sock, &c);
        if (r < 0) {
                /* the end came before the reply: nothing to check */
                fprintf(stderr, "round: zswap_connect: %d (%s)\n", r, strerror(-r));
                return 3;
        }
        pid_t pid = fork();
        if (pid == 0)
                _exit(verify_pages(buf, NPAGES * ZSWAP_PAGE_SIZE, hashes) == 0 ? 0 : 1);
        ASSERT_TRUE(pid > 0);
        ASSERT_EQ(waitpid(pid, &st, 0), pid);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        ASSERT_EQ(verify_pages(buf, NPAGES * ZSWAP_PAGE_SIZE, hashes), 0);
        ASSERT_OK(munmap(buf + (NPAGES / 2) * ZSWAP_PAGE_SIZE, (NPAGES / 2) * ZSWAP_PAGE_SIZE));
        ASSERT_EQ(verify_pages(buf, (NPAGES / 2) * ZSWAP_PAGE_SIZE, hashes), 0);
        /* no daemon now: told so */
        r = zswap_pageout(c, buf, ZSWAP_PAGE_SIZE);
        if (r != -ENOTCONN)
                test_fail("zswap_pageout with no daemon: %d, not -ENOTCONN", r);
        zswap_disconnect(c);
        ASSERT_EQ(verify_pages(buf, (NPAGES / 2) * ZSWAP_PAGE_SIZE, hashes), 0);
        return 0;
}

static void print_wchan(pid_t pid) {
        char w[64];
        fprintf(stderr, "client pid %d waits in %s\n", (int)pid, task_wchan(pid, 0, w, sizeof(w))[0] ? w : "?");
}

int main(int argc, char **argv) {
        char sock[108];
        int replied = 0;

        if (argc == 3 && strcmp(argv[1], "client") == 0)
                return client(argv[2]);

        snprintf(sock, sizeof(sock), "/tmp/zswapd-test-connect-death-%d.sock", (int)getpid());
        setenv("ZSWAP_RECONNECT_TIMEOUT", "0.2", 1);
        const int rounds = (int)test_env_uint("TEST_CONNECT_ROUNDS", ROUNDS_DEFAULT);
        for (int round = 0; round < rounds; round++) {
                unlink(sock);
                int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
                struct sockaddr_un a = { .sun_family = AF_UNIX };
                snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
                ASSERT_OK(bind(lfd, (struct sockaddr *)&a, sizeof(a)));
                ASSERT_OK(listen(lfd, 4));

                pid_t pid = fork();
                ASSERT_TRUE(pid >= 0);
                if (pid == 0) {
                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                        close(lfd);
                        execl("/proc/self/exe", argv[0], "client", sock, (char *)NULL);
                        _exit(127);
                }
                serve_one(lfd);
                /* gone: the agent finds nobody at the path */
                close(lfd);
                unlink(sock);

                int st = 0;
                uint64_t t0 = now_ns();
                pid_t w;
                while ((w = waitpid(pid, &st, WNOHANG)) == 0 && now_ns() - t0 < TEST_WAIT_S * 1000000000ull)
                        usleep(10000);
                if (w != pid) {
                        print_wchan(pid);
                        kill(pid, SIGKILL);
                        waitpid(pid, &st, 0);
                        test_fail("round %d: the client did not finish in %d s (a fork or munmap waiting for "
                                  "an event nobody reads)", round, TEST_WAIT_S);
                }
                if (!WIFEXITED(st) || (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 3))
                        test_fail("round %d: client failed: status %#x", round, st);
                replied += WEXITSTATUS(st) == 0;
        }
        fprintf(stderr, "ok: %d rounds, %d clients connected before their daemon died and forked, unmapped and "
                        "read their memory after it\n", rounds, replied);
        ASSERT_TRUE(replied > 0);
        return 0;
}
