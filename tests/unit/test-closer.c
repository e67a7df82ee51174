/*
 * test-closer: the closer threads (daemon/util/closer.c), which close what
 * clients sent where a close that waits holds up nobody else.
 *
 * - Which descriptors the manager may close itself: a pipe's end, yes; a
 *   userfaultfd, no (its release takes the mmap lock of the address space
 *   it serves for writing), though a handler may keep one; a TCP socket,
 *   neither.
 * - A close that waits (a TCP socket with unsent data, set to linger, its
 *   peer not reading) holds one thread and its user's next descriptor: a
 *   pipe of the same user stays open behind it, while another user's pipe
 *   is closed meanwhile. With one closer thread for everybody, as before,
 *   the other user's pipe waited too, and this test fails saying so.
 * - Once the peer resets the socket, its close returns and the user's
 *   next descriptor is closed; the per-user counts fall back to 0.
 * - What the daemon lets go of its own (closer_release()) is closed too,
 *   and never counted against the user.
 */
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "closer.h"
#include "test.h"
#include "uffd-compat.h"

#define WAIT_S 60

static int listener = -1;

/* A TCP connection to our listener, its send queue full (the other side
 * never reads, and its receive buffer is small), set to linger an hour on
 * close; *peer: the accepted end. */
static int lingering_socket(int *peer) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof(sa);
        int small = 4096;

        listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(listener >= 0);
        ASSERT_OK(setsockopt(listener, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small))); /* the accepted end's */
        ASSERT_OK(bind(listener, (struct sockaddr *)&sa, sizeof(sa)));
        ASSERT_OK(listen(listener, 4));
        ASSERT_OK(getsockname(listener, (struct sockaddr *)&sa, &len));
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(fd >= 0);
        ASSERT_OK(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)));
        ASSERT_OK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
        *peer = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        ASSERT_TRUE(*peer >= 0);
        /* full once sends have failed for a while: what the send queue
         * held went on into the peer's buffer meanwhile, until it was full
         * too */
        static char junk[65536];
        for (int idle = 0; idle < 200;) {
                if (send(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0)
                        idle = 0;
                else {
                        idle++;
                        usleep(1000);
                }
        }
        struct linger lg = { .l_onoff = 1, .l_linger = 3600 };
        ASSERT_OK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)));
        return fd;
}

/* Whether the write end of the pipe whose read end is r is closed (EOF,
 * POLLHUP), looking for up to ms. */
static bool pipe_closed(int r, int ms) {
        struct pollfd p = { .fd = r, .events = POLLIN };
        return poll(&p, 1, ms) == 1 && (p.revents & POLLHUP);
}

static void case_kinds(void) {
        int p[2], peer;
        ASSERT_OK(pipe2(p, O_CLOEXEC));
        ASSERT_TRUE(fd_close_is_safe(p[1]) && fd_may_be_kept(p[1]));
        int u = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
        ASSERT_TRUE(u >= 0);
        ASSERT_TRUE(!fd_close_is_safe(u));
        ASSERT_TRUE(fd_may_be_kept(u));
        int s = lingering_socket(&peer);
        ASSERT_TRUE(!fd_close_is_safe(s) && !fd_may_be_kept(s));
        struct linger lg = { .l_onoff = 1, .l_linger = 0 };
        ASSERT_OK(setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)));
        close(s);
        close(peer);
        close(listener);
        close(u);
        close(p[0]);
        close(p[1]);
}

static void case_users(void) {
        const uid_t a = 60100, b = 60101;
        Closer *cl;
        int peer, pa[2], pb[2];

        ASSERT_OK(closer_new(&cl));
        ASSERT_OK(pipe2(pa, O_CLOEXEC));
        ASSERT_OK(pipe2(pb, O_CLOEXEC));
        int s = lingering_socket(&peer);

        /* a's socket: its close waits; a's pipe queued behind it */
        closer_hand(cl, s, a);
        closer_hand(cl, pa[1], a);
        ASSERT_EQ(closer_pending(cl, a), 2u);
        /* b's pipe: closed meanwhile, on another thread */
        closer_hand(cl, pb[1], b);
        if (!pipe_closed(pb[0], WAIT_S * 1000))
                test_fail("another user's pipe was not closed in %d s while a's socket lingered", WAIT_S);
        fprintf(stderr, "b's pipe closed while a's socket lingers\n");
        for (int i = 0; i < WAIT_S * 100 && closer_pending(cl, b); i++)
                usleep(10000); /* counted out once its close returned */
        ASSERT_EQ(closer_pending(cl, b), 0u);
        /* a's pipe waits for a's socket: one close of a user at a time */
        ASSERT_TRUE(!pipe_closed(pa[0], 0));
        ASSERT_EQ(closer_pending(cl, a), 2u);

        /* the peer resets: the lingering close returns, a's pipe follows */
        struct linger lg = { .l_onoff = 1, .l_linger = 0 };
        ASSERT_OK(setsockopt(peer, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)));
        close(peer);
        if (!pipe_closed(pa[0], WAIT_S * 1000))
                test_fail("a's pipe was not closed in %d s after its socket was reset (%u of a's waiting)", WAIT_S,
                          closer_pending(cl, a));
        for (int i = 0; i < WAIT_S * 100 && closer_pending(cl, a); i++)
                usleep(10000);
        ASSERT_EQ(closer_pending(cl, a), 0u);
        fprintf(stderr, "a's socket and pipe closed once the peer reset\n");
        /* a client's uffd let go: closed the same way, never counted */
        int pc[2];
        ASSERT_OK(pipe2(pc, O_CLOEXEC));
        closer_release(cl, pc[1], a);
        ASSERT_EQ(closer_pending(cl, a), 0u);
        if (!pipe_closed(pc[0], WAIT_S * 1000))
                test_fail("a descriptor let go was not closed in %d s", WAIT_S);
        close(pc[0]);
        cl = closer_free(cl);
        close(listener);
        close(pa[0]);
        close(pb[0]);
}

int main(void) {
        case_kinds();
        case_users();
        return 0;
}
