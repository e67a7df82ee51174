/*
 * test-fork-lazy: a fork child whose parent held nothing out attaches
 * late, and loses nothing by it.
 *
 * With zswap_child_attach_defer() (what the preload shim asks for), a
 * child of a parent that held no page out at the fork (the daemon's
 * answer to FORK_PREPARE says how many it held) does not attach in the
 * fork: a shell's child that execs at once then costs no round trip, and
 * the daemon does not hold the parent for it. Checked here, each on its
 * own memory (hashes of every page):
 *
 *   idle    the child is pending after the fork and reads its memory;
 *           meanwhile the parent pages out and reads back, never held for
 *           the child (the daemon's log never says "did not attach"); the
 *           child then attaches, pages out its own pages, reads them back
 *   nested  a pending child that forks attaches first, and its own child
 *           (pending in turn) attaches and pages out too
 *   held    a parent that held pages at the fork: its child attaches in
 *           the fork as before, and reads every page
 *   claim   a pending child attaches by hand, over a socket of its own:
 *           an ATTACH naming a staging area other than the one it
 *           inherited is refused (fault threads watch the child from its
 *           fork on and read where its staging is, so it is fixed then),
 *           the inherited one is taken, and its memory is whole
 *   death   the daemon killed while a child is pending: the child's
 *           memory is all in place, its attach fails, it lives on
 *
 * Built on libzswap's core (static) for the internal header.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/socket.h>
#include <sys/un.h>

#include "client.h"
#include "harness.h"
#include "libzswap-internal.h"
#include "protocol.h"

#define NPAGES 2048
#define LEN ((size_t)NPAGES * ZSWAP_PAGE_SIZE)

static TestDaemon d;
static uint64_t orig[NPAGES];

static void put(int fd, char ch) {
        ASSERT_EQ(write(fd, &ch, 1), 1);
}

static char get(int fd) {
        char ch = 0;
        ASSERT_EQ(read(fd, &ch, 1), 1);
        return ch;
}

/* A pending child's life once told to go on: attach, evict, read back. */
static int attach_and_evict(struct zswap_client *c, uint8_t *buf, const uint64_t *hashes) {
        int r = zswap_child_attach(c);
        if (r < 0) {
                fprintf(stderr, "child %d: attach: %s\n", (int)getpid(), strerror(-r));
                return 21;
        }
        if (zswap_child_pending(c))
                return 22;
        if (td_pageout_want(c, buf, LEN, NPAGES / 2) < 0)
                return 23;
        if (verify_pages(buf, LEN, hashes) != 0)
                return 24;
        return 0;
}

static void reap(pid_t pid, const char *what) {
        int st;
        ASSERT_EQ(waitpid(pid, &st, 0), pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                test_fail("%s: child status %#x", what, st);
}

/* Fork with a pipe each way (up: child to parent, down: the other); in
 * the child, which exits 20 unless it is pending (attached in the fork
 * after all), 0. */
static pid_t fork_pending(struct zswap_client *c, int up[2], int down[2]) {
        ASSERT_OK(pipe2(up, O_CLOEXEC));
        ASSERT_OK(pipe2(down, O_CLOEXEC));
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0 && !zswap_child_pending(c))
                _exit(20);
        return pid;
}

static void idle_parent(struct zswap_client *c, uint8_t *buf) {
        int up[2], down[2];

        fprintf(stderr, "-- idle: a parent holding nothing forks\n");
        pid_t pid = fork_pending(c, up, down);
        if (pid == 0) {
                if (verify_pages(buf, LEN, orig) != 0)
                        _exit(25);
                put(up[1], 'r');
                get(down[0]);
                _exit(attach_and_evict(c, buf, orig));
        }
        ASSERT_EQ(get(up[0]), 'r');
        /* the child has not attached: the parent is not held for it */
        int n = zswap_pageout(c, buf, LEN);
        fprintf(stderr, "  parent: %d pages evicted while its child is pending\n", n);
        ASSERT_TRUE(n > 0);
        ASSERT_EQ(verify_pages(buf, LEN, orig), 0);
        put(down[1], 'g');
        reap(pid, "idle");
        if (td_log_has(&d, "did not attach within"))
                test_fail("the parent was held for a child that had nothing to restore");
        close(up[0]), close(up[1]), close(down[0]), close(down[1]);
}

static void nested(struct zswap_client *c, uint8_t *buf) {
        fprintf(stderr, "-- nested: a pending child forks\n");
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                if (!zswap_child_pending(c))
                        _exit(20);
                pid_t g = fork(); /* attaches this child first */
                if (g < 0)
                        _exit(30);
                if (g == 0) {
                        if (!zswap_child_pending(c))
                                _exit(31);
                        if (verify_pages(buf, LEN, orig) != 0)
                                _exit(32);
                        _exit(attach_and_evict(c, buf, orig));
                }
                int st, r = 0;
                if (zswap_child_pending(c))
                        r = 33;
                else if (td_pageout_want(c, buf, LEN, NPAGES / 2) < 0 || verify_pages(buf, LEN, orig) != 0)
                        r = 34;
                if (waitpid(g, &st, 0) != g || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                        fprintf(stderr, "grandchild status %#x\n", st);
                        r = 35;
                }
                _exit(r);
        }
        reap(pid, "nested");
        ASSERT_EQ(verify_pages(buf, LEN, orig), 0);
}

static void held_parent(struct zswap_client *c, uint8_t *buf) {
        fprintf(stderr, "-- held: a parent holding pages forks\n");
        ASSERT_TRUE(td_pageout_want(c, buf, LEN, NPAGES / 2) > 0);
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                if (zswap_child_pending(c))
                        _exit(20); /* it must attach in the fork */
                _exit(verify_pages(buf, LEN, orig) != 0 ? 25 : 0);
        }
        reap(pid, "held");
        ASSERT_EQ(verify_pages(buf, LEN, orig), 0);
}

/* One request on a raw connection: the reply's status; its descriptors
 * in fds (up to 2), -1 where none came. */
static int raw_req(int sock, void *m, size_t len, int fds[2]) {
        union {
                ZMsgReply r;
                uint8_t buf[256];
        } in;
        size_t nfds = 2;
        fds[0] = fds[1] = -1;
        if (zmsg_send(sock, m, len, NULL, 0) < 0 || zmsg_recv_all(sock, &in, sizeof(in), fds, &nfds, NULL) <
                                                            (ssize_t)sizeof(ZMsgReply))
                return -EPIPE;
        return in.r.status;
}

static int claim_by_hand(struct zswap_client *c, uint8_t *buf) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct timeval tv = { .tv_sec = TEST_WAIT_S };
        int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), fds[2];

        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", d.sock);
        if (sock < 0 || connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
            setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
                return 40;
        ZMsgHello h = { .role = ZROLE_CHILD };
        zmsg_init(&h.hdr, ZMSG_HELLO, 1, sizeof(h));
        if (raw_req(sock, &h, sizeof(h), fds) != 0)
                return 41;
        ZMsgChild ch = { .fork_token = c->child_token, .staging_addr = (uintptr_t)c->staging };
        int r = -ESRCH;
        /* the daemon may still be handling the fork event */
        for (int i = 0; i < TEST_WAIT_S * 100 && r == -ESRCH; i++) {
                zmsg_init(&ch.hdr, ZMSG_CHILD_ATTACH, 2, sizeof(ch));
                r = raw_req(sock, &ch, sizeof(ch), fds);
                if (r == -ESRCH)
                        usleep(10000);
        }
        if (r != 0 || fds[0] < 0) {
                fprintf(stderr, "child %d: CHILD_ATTACH: %s\n", (int)getpid(), strerror(-r));
                return 42;
        }
        /* the area right after the inherited one: aligned, whole lanes */
        ZMsgAttach a = { .staging_addr = (uintptr_t)c->staging + STAGING_BYTES, .staging_len = STAGING_BYTES };
        zmsg_init(&a.hdr, ZMSG_ATTACH, 3, sizeof(a));
        r = raw_req(sock, &a, sizeof(a), fds);
        if (r != -EINVAL) {
                fprintf(stderr, "child %d: ATTACH naming another staging area: %s\n", (int)getpid(),
                        r ? strerror(-r) : "accepted");
                return 43;
        }
        a.staging_addr = (uintptr_t)c->staging;
        zmsg_init(&a.hdr, ZMSG_ATTACH, 4, sizeof(a));
        if (raw_req(sock, &a, sizeof(a), fds) != 0)
                return 44;
        return verify_pages(buf, LEN, orig) != 0 ? 45 : 0;
}

static void claim(struct zswap_client *c, uint8_t *buf) {
        fprintf(stderr, "-- claim: a pending child attaches by hand\n");
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0)
                _exit(zswap_child_pending(c) ? claim_by_hand(c, buf) : 20);
        reap(pid, "claim");
        if (!td_log_has(&d, "names a staging area other than the one it inherited"))
                test_fail("the refusal was not logged");
        ASSERT_EQ(verify_pages(buf, LEN, orig), 0);
}

static void daemon_dies(struct zswap_client *c, uint8_t *buf) {
        int up[2], down[2];

        fprintf(stderr, "-- death: the daemon killed while a child is pending\n");
        pid_t pid = fork_pending(c, up, down);
        if (pid == 0) {
                put(up[1], 'r');
                get(down[0]);
                /* its memory unregistered by the kernel with the daemon's
                 * last reference: every page is in place all the same */
                if (verify_pages(buf, LEN, orig) != 0)
                        _exit(25);
                if (zswap_child_attach(c) == 0)
                        _exit(26); /* there is no daemon to attach to */
                _exit(verify_pages(buf, LEN, orig) != 0 ? 27 : 0);
        }
        ASSERT_EQ(get(up[0]), 'r');
        td_kill(&d);
        put(down[1], 'g');
        reap(pid, "death");
        ASSERT_EQ(verify_pages(buf, LEN, orig), 0);
        close(up[0]), close(up[1]), close(down[0]), close(down[1]);
}

int main(void) {
#if defined(__SANITIZE_THREAD__)
        /* the child starts its agent thread after a multi-threaded fork,
         * which ThreadSanitizer's runtime cannot follow */
        test_skip("fork children cannot start threads under ThreadSanitizer");
#endif
        test_require_root();
        zswap_child_attach_defer();
        td_start_logged(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, LEN, 17, orig);

        idle_parent(c, buf);
        nested(c, buf);
        held_parent(c, buf);
        /* every page back in: the parent holds nothing again */
        ASSERT_EQ(verify_pages(buf, LEN, orig), 0);
        claim(c, buf);
        daemon_dies(c, buf);
        zswap_disconnect(c);
        unlink(d.log);
        return 0;
}
