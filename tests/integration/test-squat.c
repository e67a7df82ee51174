/*
 * test-squat: a listener on the daemon's socket path that is not the
 * daemon gets nothing from a client: not a message, not a descriptor.
 *
 * A client hands its daemon its userfaultfd and its store, with which the
 * other end can read and rewrite the client's memory. The socket's path is
 * only a name: whoever can write its directory can listen there once the
 * daemon is gone. The impostor here runs as an unprivileged uid of the
 * test's own (by number) in a directory it may write (mode 0777), answers
 * HELLO as a daemon would (status 0 and a descriptor) and every other
 * message with status 0, and records what reached it.
 *
 *  - fresh: zswap_connect() to the impostor fails with EPERM, and the
 *    impostor saw one connection and no message. zswapctl refuses it too,
 *    saying so. With ZSWAP_DAEMON_UID naming the impostor's uid, the
 *    client does talk to it (the variable is what makes it trusted).
 *  - reconnect: a client with evicted pages loses its daemon (SIGKILL);
 *    the impostor takes the path while the client's agent looks for a new
 *    daemon, and sees its connection attempts but no message and no
 *    descriptor. A real daemon then comes back on the path, adopts the
 *    client's store, and every page reads back as it was.
 */
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "harness.h"
#include "protocol.h"
#include "util.h"

#define U_IMPOSTOR 60020
#define NPAGES 256

/* What reached the impostor, in memory shared with the test. */
typedef struct Record {
        _Atomic unsigned ready, conns, closed, msgs, fds;
} Record;

static Record *rec;

/* Serve one connection until the peer hangs up. */
static void impostor_conn(int fd) {
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        union {
                struct cmsghdr h;
                char b[CMSG_SPACE(8 * sizeof(int))];
        } cm;

        for (;;) {
                struct iovec iov = { buf, sizeof(buf) };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
                                     .msg_controllen = sizeof(cm.b) };
                ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
                if (n <= 0)
                        break;
                atomic_fetch_add(&rec->msgs, 1);
                for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
                        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                                size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                                atomic_fetch_add(&rec->fds, (unsigned)k);
                                for (size_t i = 0; i < k; i++)
                                        close(((int *)CMSG_DATA(c))[i]);
                        }
                if ((size_t)n < sizeof(ZMsgHeader))
                        continue;
                /* answer as a daemon would, so that a client that trusts us
                 * goes on to hand over what it has */
                const ZMsgHeader *h = (const ZMsgHeader *)buf;
                ZMsgReply r = { .status = 0 };
                int dev = h->type == ZMSG_HELLO ? open("/dev/null", O_RDWR | O_CLOEXEC) : -1;
                zmsg_init(&r.hdr, ZMSG_REPLY, h->id, sizeof(r));
                zmsg_send(fd, &r, sizeof(r), &dev, dev >= 0 ? 1 : 0);
                if (dev >= 0)
                        close(dev);
        }
        close(fd);
        atomic_fetch_add(&rec->closed, 1);
}

/* An impostor as U_IMPOSTOR that listens on path once told to (*go:
 * impostor_go()), until killed. Forked before the test connects a client
 * of its own: a fork of a process with registered memory waits for its
 * daemon to read the fork event, and there is none while the impostor
 * squats. */
static pid_t impostor_fork(const char *path, int *go) {
        int p[2];

        memset(rec, 0, sizeof(*rec));
        ASSERT_OK(pipe2(p, O_CLOEXEC));
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                struct sockaddr_un sa = { .sun_family = AF_UNIX };
                char b;
                close(p[1]);
                if (setgroups(0, NULL) < 0 || setgid(U_IMPOSTOR) < 0 || setuid(U_IMPOSTOR) < 0)
                        _exit(90);
                /* after setuid(), which clears it: never outlive the test */
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (getppid() == 1)
                        _exit(0);
                if (read(p[0], &b, 1) != 1)
                        _exit(0);
                int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
                snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
                unlink(path); /* a dead daemon's socket, in a directory we may write */
                if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(s, 16) < 0)
                        _exit(91);
                atomic_store(&rec->ready, 1);
                for (;;) {
                        int fd = accept4(s, NULL, NULL, SOCK_CLOEXEC);
                        if (fd < 0)
                                continue;
                        atomic_fetch_add(&rec->conns, 1);
                        impostor_conn(fd);
                }
        }
        close(p[0]);
        *go = p[1];
        return pid;
}

/* Let it listen; returns once it does. */
static void impostor_go(pid_t pid, int go) {
        ASSERT_EQ(write(go, "g", 1), 1);
        close(go);
        for (int i = 0; i < 3000 && !atomic_load(&rec->ready); i++) {
                int st;
                if (waitpid(pid, &st, WNOHANG) == pid)
                        test_fail("impostor exited at start: status %#x", st);
                usleep(10000);
        }
        ASSERT_TRUE(atomic_load(&rec->ready));
}

static void impostor_stop(pid_t pid) {
        kill(pid, SIGKILL);
        ASSERT_EQ(waitpid(pid, NULL, 0), pid);
}

/* Until cond holds (TEST_WAIT_S at most, 10 ms steps); whether it did. */
#define WAIT_FOR(cond)                                                                          \
        ({                                                                                      \
                bool _ok = false;                                                               \
                for (int _i = 0; _i < TEST_WAIT_S * 100 && !(_ok = (cond)); _i++)               \
                        usleep(10000);                                                          \
                _ok;                                                                            \
        })

static void zswapctl_path(char *buf, size_t len) {
        ssize_t n = readlink("/proc/self/exe", buf, len - 32);
        ASSERT_TRUE(n > 0);
        buf[n] = 0;
        strcpy(strrchr(buf, '/'), "/../client/tools/zswapctl");
}

static void case_fresh(const char *where) {
        char path[256], cmd[PATH_MAX + 640], ctl[PATH_MAX], out[256], line[512];
        struct zswap_client *c = NULL;

        int go;
        snprintf(path, sizeof(path), "%s/impostor.sock", where);
        pid_t imp = impostor_fork(path, &go);
        impostor_go(imp, go);

        int r = zswap_connect(path, &c);
        if (r != -EPERM)
                test_fail("zswap_connect to an impostor (uid %d) returned %d (%s), not -EPERM", U_IMPOSTOR, r,
                          strerror(-r));
        if (!WAIT_FOR(atomic_load(&rec->closed) >= 1))
                test_fail("the impostor saw %u connections, %u closed", atomic_load(&rec->conns),
                          atomic_load(&rec->closed));
        fprintf(stderr, "fresh: impostor saw %u connections, %u messages, %u fds\n", atomic_load(&rec->conns),
                atomic_load(&rec->msgs), atomic_load(&rec->fds));
        ASSERT_EQ(atomic_load(&rec->conns), 1);
        ASSERT_EQ(atomic_load(&rec->msgs), 0);
        ASSERT_EQ(atomic_load(&rec->fds), 0);

        /* zswapctl: refused, saying why, nothing sent */
        zswapctl_path(ctl, sizeof(ctl));
        snprintf(out, sizeof(out), "%s/zswapctl.err", where);
        snprintf(cmd, sizeof(cmd), "%s --socket %s status >/dev/null 2>%s", ctl, path, out);
        int st = system(cmd);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0);
        FILE *f = fopen(out, "re");
        ASSERT_TRUE(f != NULL);
        bool said = fgets(line, sizeof(line), f) && strstr(line, "not trusted as zswapd") &&
                    strstr(line, "ZSWAP_DAEMON_UID=60020");
        fclose(f);
        if (!said)
                test_fail("zswapctl said: %s", line);
        ASSERT_TRUE(WAIT_FOR(atomic_load(&rec->closed) >= 2));
        ASSERT_EQ(atomic_load(&rec->msgs), 0);
        ASSERT_EQ(atomic_load(&rec->fds), 0);

        /* trusted by name: the client talks to it (and fails on its
         * answer, which is no daemon's) */
        setenv("ZSWAP_DAEMON_UID", "60020", 1);
        r = zswap_connect(path, &c);
        unsetenv("ZSWAP_DAEMON_UID");
        ASSERT_TRUE(r < 0);
        ASSERT_TRUE(WAIT_FOR(atomic_load(&rec->closed) >= 3));
        ASSERT_TRUE(atomic_load(&rec->msgs) >= 1);
        impostor_stop(imp);
        unlink(path);
}

static void case_reconnect(const char *where) {
        const size_t len = NPAGES * ZSWAP_PAGE_SIZE;
        static uint64_t hashes[NPAGES];
        char report[4096] = "";
        TestDaemon d;
        int rp[2];

        /* the daemon on a path in the writable directory */
        char sock[sizeof(d.sock)];
        snprintf(sock, sizeof(sock), "%s/zswapd.sock", where);
        td_start_at(&d, sock, getenv("TEST_DAEMON_ARGS"));

        int go;
        pid_t imp = impostor_fork(d.sock, &go);
        ASSERT_OK(pipe2(rp, O_CLOEXEC | O_NONBLOCK));
        char fdnum[16];
        snprintf(fdnum, sizeof(fdnum), "%d", rp[1]);
        setenv("ZSWAP_RECOVERY_FD", fdnum, 1);
        struct zswap_client *c = td_connect(&d);
        unsetenv("ZSWAP_RECOVERY_FD");
        /* long enough for the real daemon to come back and adopt us */
        ASSERT_OK(zswap_set_reconnect_timeout(c, 300 * 1000));
        uint8_t *buf = td_region(c, len, 21, hashes);
        int n = zswap_pageout(c, buf, len);
        ASSERT_TRUE(n > NPAGES / 2);

        td_kill(&d);
        impostor_go(imp, go);
        /* the agent tries again every 50 ms: a few attempts reached it */
        bool tried = WAIT_FOR(atomic_load(&rec->conns) >= 3 || atomic_load(&rec->fds) > 0);
        fprintf(stderr, "reconnect: impostor saw %u connections, %u messages, %u fds\n", atomic_load(&rec->conns),
                atomic_load(&rec->msgs), atomic_load(&rec->fds));
        if (atomic_load(&rec->msgs) || atomic_load(&rec->fds))
                test_fail("the client's reconnect sent the impostor %u messages and %u descriptors",
                          atomic_load(&rec->msgs), atomic_load(&rec->fds));
        if (!tried)
                test_fail("the client's agent reached the impostor %u times in 30 s", atomic_load(&rec->conns));
        impostor_stop(imp);
        ASSERT_EQ(atomic_load(&rec->msgs), 0);
        ASSERT_EQ(atomic_load(&rec->fds), 0);

        /* a real daemon again: it adopts the store, every page as it was */
        td_respawn(&d);
        ASSERT_EQ(verify_pages(buf, len, hashes), 0);
        /* the agent says what it did once it serves the new connection */
        size_t have = 0;
        for (int i = 0; i < 3000 && !strstr(report, "adopted by a new daemon"); i++) {
                ssize_t got = read(rp[0], report + have, sizeof(report) - 1 - have);
                if (got > 0)
                        report[have += (size_t)got] = 0;
                else
                        usleep(10000);
        }
        fprintf(stderr, "%s", report);
        ASSERT_TRUE(strstr(report, "nothing sent") != NULL);
        ASSERT_TRUE(strstr(report, "adopted by a new daemon") != NULL);
        zswap_disconnect(c);
        td_stop(&d);
        close(rp[0]);
        close(rp[1]);
}

static char dir[] = "/tmp/zswapd-squat-XXXXXX";

static void dir_remove(void) {
        char cmd[PATH_MAX];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        (void)!system(cmd);
}

int main(void) {

        test_require_root();
        rec = mmap(NULL, sizeof(*rec), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(rec != MAP_FAILED);
        ASSERT_TRUE(mkdtemp(dir) != NULL);
        atexit(dir_remove); /* also when a check fails (exit()) */
        /* the mistake under test: a socket directory others may write */
        ASSERT_OK(chmod(dir, 0777));

        case_fresh(dir);
        case_reconnect(dir);
        return 0;
}
