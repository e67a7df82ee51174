/*
 * test-dos: a local user tries to stop or monopolise the daemon's manager
 * thread, while an honest client pages 64 MiB out and reads every page
 * back. One case per attack (argv[1]):
 *
 * linger: files whose last close waits. A TCP socket with unsent
 * data and SO_LINGER set (an hour) makes close() wait until its data is
 * gone or the hour has passed; the peer here never reads. The attacker
 * (uid U_ATTACKER, not in any allow list) sends such sockets to the
 * daemon and closes its own copies, three ways:
 *  - one with a message (the daemon refuses the message and has to close
 *    the descriptor);
 *  - twenty in one message (more than a receiver that takes only a few
 *    lets in: the kernel would drop the rest in the receiving thread);
 *  - one queued behind enough malformed messages to have the connection
 *    dropped, so that it is still queued when the daemon closes the
 *    connection (the kernel drops it then, in the closing thread).
 *
 * The honest client's work runs in a child the test waits for; a manager
 * stuck in close() would stop its connect, and after a safety timeout the
 * test fails saying how far it got. Its pages must read back identical.
 * The attacker's user, with more sockets waiting than its bound, is
 * refused new connections while they wait, and admitted again once the
 * peer resets them. The times alone and under attack are printed (a
 * ratio, never asserted: CI machines are noisy).
 *
 * maps: a client with 60,000 mappings registers and unregisters a page
 * above all of them, again and again. Checking that the range is private
 * anonymous memory must not cost the manager in proportion to the
 * mappings elsewhere in the process: the daemon's reads (rchar in
 * /proc/PID/io, the bytes its read() calls returned) per REGISTER must
 * stay under 64 KiB, where reading /proc/PID/maps from its first line
 * read megabytes each time. The honest client's work runs meanwhile.
 */
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "harness.h"
#include "protocol.h"
#include "util.h"

#define U_ATTACKER 60031
#define LEN ((size_t)64 << 20)
#define HONEST_TIMEOUT_S 120

static TestDaemon d;
static int listener = -1;
static int accepted[64];
static int naccepted;

/* A TCP connection to our listener, its send queue full (the listener's
 * side never reads), set to linger an hour on close. */
static int lingering_socket(void) {
        struct sockaddr_in sa;
        socklen_t len = sizeof(sa);
        ASSERT_OK(getsockname(listener, (struct sockaddr *)&sa, &len));
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(fd >= 0);
        int small = 4096;
        ASSERT_OK(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)));
        ASSERT_OK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)));
        static char junk[65536];
        while (send(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0)
                ;
        struct linger lg = { .l_onoff = 1, .l_linger = 3600 };
        ASSERT_OK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)));
        return fd;
}

static int raw_connect(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(fd >= 0);
        strcpy(sa.sun_path, d.sock);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

/* Whether the daemon took the message (it may have dropped the
 * connection already: the attack goes on regardless). */
static bool send_with(int sock, uint16_t type, const int *fds, size_t nfds) {
        _Alignas(8) uint8_t out[ZSWAP_MSG_MAX];
        memset(out, 0, sizeof(out));
        zmsg_init((ZMsgHeader *)out, type, 1, zmsg_expected_size(type));
        ((ZMsgHello *)out)->role = ZROLE_CONTROL;
        return zmsg_send(sock, out, ((ZMsgHeader *)out)->size, fds, nfds) == 0;
}

/* The attack, as U_ATTACKER; the attacker's copies closed. The three
 * connections are made first: the daemon refuses new ones of this user
 * once the second message is in. */
static int attack(void) {
        int fds[20];
        int s = raw_connect(), s2 = raw_connect(), s3 = raw_connect();
        ASSERT_TRUE(s >= 0 && s2 >= 0 && s3 >= 0);

        /* one with a message the daemon refuses (HELLO carries none) */
        fds[0] = lingering_socket();
        (void)send_with(s, ZMSG_HELLO, fds, 1);
        close(fds[0]);

        /* twenty in one message */
        for (int i = 0; i < 20; i++)
                fds[i] = lingering_socket();
        (void)send_with(s2, ZMSG_STATUS, fds, 20);
        for (int i = 0; i < 20; i++)
                close(fds[i]);

        /* one queued behind enough garbage to have the connection dropped */
        int flags = fcntl(s3, F_GETFL);
        ASSERT_OK(fcntl(s3, F_SETFL, flags | O_NONBLOCK));
        for (int i = 0; i < 80; i++) {
                char garbage[16] = "not a message";
                if (send(s3, garbage, sizeof(garbage), MSG_NOSIGNAL) < 0)
                        break;
        }
        fds[0] = lingering_socket();
        (void)send_with(s3, ZMSG_STATUS, fds, 1);
        close(fds[0]);
        /* the connections stay open: the daemon decides when they close */
        pause();
        return 0;
}

/* The honest client's whole job; progress in *stage. */
static int honest(volatile int *stage) {
        uint64_t *hashes = malloc(LEN / ZSWAP_PAGE_SIZE * sizeof(uint64_t));
        *stage = 1;
        struct zswap_client *c = td_connect(&d);
        *stage = 2;
        uint8_t *buf = td_region(c, LEN, 42, hashes);
        *stage = 3;
        int n = zswap_pageout(c, buf, LEN);
        if (n < (int)(LEN / ZSWAP_PAGE_SIZE) / 2) {
                fprintf(stderr, "pageout evicted %d pages\n", n);
                return 10;
        }
        *stage = 4;
        if (verify_pages(buf, LEN, hashes) != 0)
                return 11;
        *stage = 5;
        zswap_disconnect(c);
        munmap(buf, LEN);
        free(hashes);
        return 0;
}

static const char *stage_name[] = { "not started", "connecting", "registering", "paging out", "reading back",
                                    "disconnecting" };

/* Run honest() in a child; its time in seconds. Fails after the safety
 * timeout, saying how far it got. */
static double run_honest(const char *when) {
        volatile int *stage = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(stage != MAP_FAILED);
        uint64_t t0 = now_ns();
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0)
                _exit(honest(stage));
        int st = 0;
        pid_t w = 0;
        while ((w = waitpid(pid, &st, WNOHANG)) == 0 && now_ns() - t0 < HONEST_TIMEOUT_S * 1000000000ull)
                usleep(10000);
        if (w == 0) {
                int at = *stage;
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
                td_log_dump(&d);
                test_fail("%s: the honest client was still %s after %d s: the daemon does not serve it", when,
                          stage_name[at], HONEST_TIMEOUT_S);
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                test_fail("%s: the honest client failed (status %d)", when, st);
        munmap((void *)stage, 4096);
        return (double)(now_ns() - t0) / 1e9;
}

/* A connection by U_ATTACKER: whether the daemon answers its STATUS. */
static bool attacker_served(void) {
        pid_t pid = fork();
        int st;
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                if (setgid(U_ATTACKER) < 0 || setuid(U_ATTACKER) < 0)
                        _exit(90);
                int s = raw_connect();
                if (s < 0)
                        _exit(1);
                struct timeval tv = { .tv_sec = 30 };
                setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
                ZMsgHello h;
                memset(&h, 0, sizeof(h));
                zmsg_init(&h.hdr, ZMSG_HELLO, 7, sizeof(h));
                h.role = ZROLE_CONTROL;
                if (zmsg_send(s, &h, sizeof(h), NULL, 0) < 0)
                        _exit(1);
                _Alignas(8) uint8_t in[ZSWAP_MSG_MAX + 8];
                ssize_t n = zmsg_recv(s, in, sizeof(in), NULL, NULL, NULL);
                _exit(n > 0 && ((ZMsgReply *)in)->status == 0 ? 0 : 1);
        }
        ASSERT_TRUE(waitpid(pid, &st, 0) == pid);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 90);
        return WEXITSTATUS(st) == 0;
}

static void case_linger(void) {
        /* a listener with a tiny receive buffer that never reads */
        listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int small = 4096;
        ASSERT_OK(setsockopt(listener, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)));
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        ASSERT_OK(bind(listener, (struct sockaddr *)&sa, sizeof(sa)));
        ASSERT_OK(listen(listener, 64));

        double alone = run_honest("alone");

        pid_t att = fork();
        ASSERT_TRUE(att >= 0);
        if (att == 0) {
                if (setgid(U_ATTACKER) < 0 || setuid(U_ATTACKER) < 0)
                        _exit(90);
                prctl(PR_SET_PDEATHSIG, SIGKILL); /* after setuid(), which clears it */
                _exit(attack());
        }
        /* the attacker's 22 connections reach our listener */
        for (uint64_t t0 = now_ns(); naccepted < 22; usleep(1000)) {
                int a = accept4(listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (a >= 0)
                        accepted[naccepted++] = a;
                if (now_ns() - t0 > 60 * 1000000000ull)
                        test_fail("only %d of the attacker's 22 sockets connected", naccepted);
        }
        /* the daemon has been handed them: the attacker's user has more
         * waiting to be closed than it may, and is turned away */
        for (int i = 0; i < 600 && !td_log_has(&d, "too many descriptors sent whose close waits"); i++)
                usleep(50000);
        double attacked = run_honest("under attack");
        ASSERT_TRUE(td_log_has(&d, "too many descriptors sent whose close waits"));
        ASSERT_TRUE(!attacker_served());
        ASSERT_TRUE(td_log_has(&d, "refused: its user sent descriptors whose close still waits"));

        /* the peer resets the attacker's sockets: their closes end, and the
         * user is served again */
        struct linger rst = { .l_onoff = 1, .l_linger = 0 };
        for (int i = 0; i < naccepted; i++) {
                setsockopt(accepted[i], SOL_SOCKET, SO_LINGER, &rst, sizeof(rst));
                close(accepted[i]);
        }
        bool served = false;
        for (int i = 0; i < 300 && !(served = attacker_served()); i++)
                usleep(100000);
        ASSERT_TRUE(served);

        kill(att, SIGKILL);
        waitpid(att, NULL, 0);
        fprintf(stderr, "honest 64 MiB pageout and read-back: alone %.2f s, under attack %.2f s (%.2fx)\n", alone,
                attacked, attacked / alone);
}

/* ---- maps ---- */

#define MAPPINGS 60000
#define REGISTERS 200

/* The bytes the daemon's read() calls have returned so far. */
static uint64_t daemon_rchar(void) {
        char path[64], buf[512];
        snprintf(path, sizeof(path), "/proc/%d/io", (int)d.pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        ASSERT_TRUE(n > 0);
        buf[n] = 0;
        unsigned long long v = 0;
        ASSERT_TRUE(sscanf(buf, "rchar: %llu", &v) == 1);
        return v;
}

/* A client with MAPPINGS mappings below one page it registers over and
 * over; *done counts the REGISTERs, *stop ends the loop. */
static int many_mappings(volatile uint64_t *done, volatile int *stop) {
        uint8_t *top = test_map(ZSWAP_PAGE_SIZE); /* the highest: mmap goes down */
        for (int i = 0; i < MAPPINGS; i++) {
                /* alternate protections so that none merge */
                void *p = mmap(NULL, ZSWAP_PAGE_SIZE, i & 1 ? PROT_READ : PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (p == MAP_FAILED) {
                        fprintf(stderr, "mapping %d: %s\n", i, strerror(errno));
                        return 20;
                }
        }
        struct zswap_client *c = td_connect(&d);
        top[0] = 1;
        while (!*stop) {
                int r = zswap_register(c, top, ZSWAP_PAGE_SIZE);
                if (r < 0) {
                        fprintf(stderr, "register: %s\n", strerror(-r));
                        return 21;
                }
                ASSERT_OK(zswap_unregister(c, top, ZSWAP_PAGE_SIZE));
                (*done)++;
        }
        if (top[0] != 1)
                return 22;
        zswap_disconnect(c);
        return 0;
}

static void case_maps(void) {
        volatile uint64_t *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(shared != MAP_FAILED);
        volatile uint64_t *done = &shared[0];
        volatile int *stop = (volatile int *)&shared[1];

        double alone = run_honest("alone");
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                _exit(many_mappings(done, stop));
        }
        /* the first few REGISTERs, then count the daemon's reads over many */
        for (uint64_t t0 = now_ns(); *done < 3; usleep(1000))
                if (now_ns() - t0 > 120 * 1000000000ull || waitpid(pid, NULL, WNOHANG) == pid)
                        test_fail("the client with %d mappings made %llu REGISTERs", MAPPINGS,
                                  (unsigned long long)*done);
        uint64_t r0 = daemon_rchar(), n0 = *done;
        double attacked = run_honest("under attack");
        for (uint64_t t0 = now_ns(); *done < n0 + REGISTERS; usleep(1000))
                if (now_ns() - t0 > 300 * 1000000000ull)
                        test_fail("%llu of %d REGISTERs in 300 s", (unsigned long long)(*done - n0), REGISTERS);
        uint64_t r1 = daemon_rchar(), n1 = *done;
        *stop = 1;
        int st;
        ASSERT_TRUE(waitpid(pid, &st, 0) == pid);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        uint64_t per = (r1 - r0) / (n1 - n0);
        fprintf(stderr, "%llu REGISTERs with %d mappings: the daemon read %llu bytes each\n",
                (unsigned long long)(n1 - n0), MAPPINGS, (unsigned long long)per);
        fprintf(stderr, "honest 64 MiB pageout and read-back: alone %.2f s, under attack %.2f s (%.2fx)\n", alone,
                attacked, attacked / alone);
        if (per >= 64 * 1024)
                test_fail("the daemon read %llu bytes per REGISTER: its work grows with the client's mappings",
                          (unsigned long long)per);
}

int main(int argc, char **argv) {
        test_require_root();
        signal(SIGPIPE, SIG_IGN);
        if (argc != 2)
                test_fail("usage: test-dos linger|maps");
        td_start_logged(&d, getenv("TEST_DAEMON_ARGS"));
        if (strcmp(argv[1], "linger") == 0)
                case_linger();
        else if (strcmp(argv[1], "maps") == 0)
                case_maps();
        else
                test_fail("no case %s", argv[1]);
        td_stop(&d);
        return 0;
}
