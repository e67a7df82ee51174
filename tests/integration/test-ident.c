/*
 * test-ident.c: the daemon acts for a process, never for a pid number.
 *
 * The attack: an unprivileged attacker (process A) attaches with a
 * userfaultfd made in another of its processes (B), registers a page X and
 * asks for it to be paged out; the MOVE_DONE that answers the daemon's
 * MOVE it queues behind its own request-rate bucket ([user] max_requests),
 * and then it stops being itself: A exec()s a setuid program of another
 * user (exec), or exits and that program gets its pid (reuse). The
 * program holds its user's secret (a 0600 file) in its memory at the
 * place A had named as its staging area. A daemon that reads "the client"
 * by pid reads the secret as X's evicted content, and B, faulting X in
 * through its uffd, is served the secret.
 *
 * The daemon must refuse: the uffd is not of A's address space (ATTACH
 * proves it is, mmclient_prove()), and what it reads goes through fds
 * bound to A's address space, which an exec or an exit ends. Each case
 * asserts that B never reads the secret, and that the victim really ran
 * with the secret where A said (the attack was made).
 *
 * own: A attaches with a uffd of its own (a real client) and registers X,
 * then execs the setuid program: the daemon must drop that client rather
 * than go on acting for the new image.
 *
 * The victim is tests/integration/ident-victim.c, copied into a temporary directory
 * on the root file system, owned by a victim uid and made setuid.
 *
 * drop: credentials are checked per request. A process connects as root
 * (a control connection, as zswapctl), then drops to an unprivileged uid
 * (setuid(), and seteuid() alone) and asks for a daemon-wide setting
 * (TUNABLE_SET idle_age) and another user's client's limit (SET_LIMIT):
 * both refused, both read back unchanged.
 */
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#include "harness.h"
#include "macro.h"
#include "protocol.h"
#include "uffd-compat.h"
#include "util.h"

#define U_VICTIM 60031
#define U_ATTACKER 60032
#define U_DROP 60033 /* what a root process drops to */
#define LANE ((size_t)ZSWAP_BATCH_MAX * ZSWAP_PAGE_SIZE) /* one staging lane */

static TestDaemon d;
static char dir[64], victim_bin[PATH_MAX], secret_path[PATH_MAX], conf_path[PATH_MAX];
static char secret[64];

typedef enum { CASE_EXEC, CASE_REUSE, CASE_OWN } Case;

/* ---- the attacker's side (uid U_ATTACKER) ---- */

static int raw_connect(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct timeval tv = { .tv_sec = 20 };
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        strcpy(sa.sun_path, d.sock);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return -1;
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        return fd;
}

static uint32_t next_id = 1;

static uint32_t send_msg(int fd, void *m, uint16_t type, size_t size, const int *fds, size_t nfds) {
        uint32_t id = next_id++;
        zmsg_init(m, type, id, size);
        if (zmsg_send(fd, m, size, fds, nfds) < 0)
                _exit(40);
        return id;
}

/* Read messages until the reply to id (its status) or a message of type
 * `until` (then its id in *got_id); -ETIMEDOUT if none came. */
static int wait_for(int fd, uint32_t id, uint16_t until, uint32_t *got_id, int *rfd) {
        _Alignas(8) uint8_t in[ZSWAP_MSG_MAX];
        for (;;) {
                int fds[4];
                size_t nfds = ELEMENTSOF(fds);
                ssize_t n = zmsg_recv(fd, in, sizeof(in), fds, &nfds, NULL);
                if (n <= 0)
                        return n == -EAGAIN ? -ETIMEDOUT : -ECONNRESET;
                for (size_t i = 0; i < nfds; i++)
                        if (i == 0 && rfd && ((ZMsgHeader *)in)->id == id)
                                *rfd = fds[0];
                        else
                                close(fds[i]);
                const ZMsgHeader *h = (const ZMsgHeader *)in;
                if (until && h->type == until) {
                        *got_id = h->id;
                        return 1;
                }
                if (h->type == ZMSG_REPLY && h->id == id)
                        return ((const ZMsgReply *)in)->status;
                if (h->type == ZMSG_STATS_REPLY && h->id == id)
                        return 0;
                if (h->type == ZMSG_TUNABLE_REPLY && h->id == id)
                        return ((const ZMsgTunable *)in)->status;
        }
}

/* B: a uffd of its own address space, handed to A; then, told to, X read
 * (the fault its uffd reports) and what it holds written to res. */
static void attacker_b(int sp, int go, int res, uint8_t *x) {
        ZMsgHello hello = { .role = ZROLE_CLIENT };
        int t = raw_connect(), dev = -1, uffd = -1;
        char c;

        if (t >= 0) {
                uint32_t id = send_msg(t, &hello, ZMSG_HELLO, sizeof(hello), NULL, 0);
                if (wait_for(t, id, 0, NULL, &dev) == 0 && dev >= 0)
                        uffd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC);
        }
        if (uffd < 0) /* no device handed out: user-mode faults are all B needs */
                uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
        if (uffd < 0)
                _exit(50);
        ZMsgHeader h;
        zmsg_init(&h, ZMSG_STATS, 0, sizeof(h));
        if (zmsg_send(sp, &h, sizeof(h), &uffd, 1) < 0)
                _exit(51);
        if (read(go, &c, 1) != 1)
                _exit(52);
        uint8_t page[ZSWAP_PAGE_SIZE];
        memcpy(page, x, sizeof(page)); /* the fault: served by whoever serves B's uffd */
        if (write(res, page, sizeof(page)) != (ssize_t)sizeof(page))
                _exit(53);
        _exit(0);
}

/* A: the requests, then exec (or exit). Its steps go to ev. */
static int attacker_a(Case k, int go, int res, int ev, int out) {
        int sp[2], uffd = -1;
        uint8_t *r = mmap(NULL, 2 * LANE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (r == MAP_FAILED || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
                return 10;
        uint8_t *x = r + LANE;
        int s = raw_connect();
        if (s < 0)
                return 11;
        pid_t b = fork();
        if (b == 0) {
                close(sp[0]);
                attacker_b(sp[1], go, res, x); /* keeps a copy of s: the connection outlives A */
        }
        close(sp[1]);
        /* after the fork: X is present in A, never in B */
        memset(x, 'a', ZSWAP_PAGE_SIZE);
        {
                _Alignas(8) uint8_t in[ZSWAP_MSG_MAX];
                int fds[1];
                size_t nfds = 1;
                struct timeval tv = { .tv_sec = 20 };
                setsockopt(sp[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
                if (zmsg_recv(sp[0], in, sizeof(in), fds, &nfds, NULL) <= 0 || nfds != 1)
                        return 12;
                uffd = fds[0];
        }
        dprintf(ev, "b %d\n", (int)b);

        ZMsgHello hello = { .role = ZROLE_CLIENT };
        ZMsgStatsReq st = { .scope = ZSWAP_STATS_CLIENT };
        ZMsgAttach at = { .staging_addr = (uintptr_t)r, .staging_len = LANE };
        ZMsgRange rg = { .addr = (uintptr_t)x, .len = ZSWAP_PAGE_SIZE };
        int dev = -1;
        uint32_t id = send_msg(s, &hello, ZMSG_HELLO, sizeof(hello), NULL, 0);
        dprintf(ev, "hello %d\n", wait_for(s, id, 0, NULL, &dev));
        if (k == CASE_OWN) {
                /* a uffd of A's own: the attach is A's, until it execs */
                int own = dev >= 0 ? ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC) : -1;
                if (own < 0)
                        own = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
                id = send_msg(s, &at, ZMSG_ATTACH, sizeof(at), &own, 1);
                dprintf(ev, "attach with its own uffd: %d\n", wait_for(s, id, 0, NULL, NULL));
                id = send_msg(s, &rg, ZMSG_REGISTER, sizeof(rg), NULL, 0);
                dprintf(ev, "register %d\n", wait_for(s, id, 0, NULL, NULL));
        }
        if (k == CASE_REUSE) {
                /* two requests back to back: the second finds the bucket
                 * empty and the connection is read again only once it has
                 * refilled (2 s); what follows is read then, by which time
                 * the victim has A's pid */
                for (int i = 0; i < 2; i++) {
                        id = send_msg(s, &st, ZMSG_STATS, sizeof(st), NULL, 0);
                        wait_for(s, id, 0, NULL, NULL);
                }
                send_msg(s, &at, ZMSG_ATTACH, sizeof(at), &uffd, 1);
                send_msg(s, &rg, ZMSG_REGISTER, sizeof(rg), NULL, 0);
                send_msg(s, &rg, ZMSG_PAGEOUT, sizeof(rg), NULL, 0);
                dprintf(ev, "exit %p\n", (void *)r);
                return 0;
        }
        uint32_t lane = 0;
        if (k == CASE_OWN)
                goto exec;
        id = send_msg(s, &at, ZMSG_ATTACH, sizeof(at), &uffd, 1);
        dprintf(ev, "attach with B's uffd: %d\n", wait_for(s, id, 0, NULL, NULL));
        id = send_msg(s, &rg, ZMSG_REGISTER, sizeof(rg), NULL, 0);
        dprintf(ev, "register %d\n", wait_for(s, id, 0, NULL, NULL));
        id = send_msg(s, &rg, ZMSG_PAGEOUT, sizeof(rg), NULL, 0);
        int moved = wait_for(s, id, ZMSG_MOVE, &lane, NULL);
        dprintf(ev, "pageout: %s (%d)\n", moved == 1 ? "MOVE came" : "no MOVE", moved);
        /* as above: the connection is read again 2 s after the second */
        for (int i = 0; i < 2; i++) {
                id = send_msg(s, &st, ZMSG_STATS, sizeof(st), NULL, 0);
                wait_for(s, id, 0, NULL, NULL);
        }
        /* a few more requests ahead of it: one is read per token, tokens
         * come one a second */
        for (int i = 0; i < 4; i++)
                send_msg(s, &st, ZMSG_STATS, sizeof(st), NULL, 0);
        /* "moved": X left A, and the daemon reads slot 0 of the staging
         * area, which will be the victim's by then */
        madvise(x, ZSWAP_PAGE_SIZE, MADV_DONTNEED);
        ZMsgMoveDone done = { .npages = 1 };
        done.moved[0] = 1;
        zmsg_init(&done.hdr, ZMSG_MOVE_DONE, lane, sizeof(done));
        if (zmsg_send(s, &done, sizeof(done), NULL, 0) < 0)
                return 13;
exec:;
        char addr[32], len[32];
        snprintf(addr, sizeof(addr), "%#llx", (unsigned long long)(uintptr_t)r);
        snprintf(len, sizeof(len), "%zu", 2 * LANE);
        munmap(r, 2 * LANE); /* gone with the exec anyway */
        dprintf(ev, "exec %s\n", addr);
        if (dup2(out, 1) < 0)
                return 14;
        execl(victim_bin, "ident-victim", secret_path, addr, len, (char *)NULL);
        return 15;
}

/* ---- the test's side (root) ---- */

static pid_t fork_as(uid_t uid) {
        return td_fork_as(uid, 0);
}

/* A line from fd, with a deadline; false at EOF or timeout. */
static bool read_line(int fd, char *buf, size_t len, int timeout_ms) {
        size_t n = 0;
        while (n + 1 < len) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                if (poll(&p, 1, timeout_ms) <= 0 || read(fd, buf + n, 1) != 1)
                        break;
                if (buf[n++] == '\n')
                        break;
        }
        buf[n] = 0;
        return n > 0;
}

/* Does the daemon serve a client of process pid (zswapctl clients)? */
static bool daemon_has_client(pid_t pid) {
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        const ZMsgClientsReply *rep = (const ZMsgClientsReply *)buf;
        ZMsgHello h = { .role = ZROLE_CONTROL };
        ZMsgClientsReq q = { .after = 0 };
        bool found = false;
        int fd = raw_connect();

        ASSERT_TRUE(fd >= 0);
        uint32_t id = send_msg(fd, &h, ZMSG_HELLO, sizeof(h), NULL, 0);
        ASSERT_EQ(wait_for(fd, id, 0, NULL, NULL), 0);
        for (;;) {
                zmsg_init(&q.hdr, ZMSG_CLIENTS, next_id++, sizeof(q));
                ASSERT_OK(zmsg_send(fd, &q, sizeof(q), NULL, 0));
                ASSERT_TRUE(zmsg_recv(fd, buf, sizeof(buf), NULL, NULL, NULL) == (ssize_t)sizeof(*rep));
                ASSERT_EQ(rep->status, 0);
                for (uint32_t i = 0; i < rep->count && i < ZSWAP_CLIENTS_PER_MSG; i++)
                        found |= rep->rec[i].pid == pid;
                if (!rep->more || rep->count == 0)
                        break;
                q.after = rep->rec[rep->count - 1].id;
        }
        close(fd);
        return found;
}

static uint64_t evictions(void) {
        ZMsgStatusReply st;
        td_status(&d, &st);
        return st.stats.evictions;
}

/* The victim as the new owner of pid `want` (ns_last_pid), running the
 * setuid program with the secret at addr; -1 if another process of the
 * machine took the pid first and keeps it (a busy machine: between our
 * write of ns_last_pid and our fork, any fork or thread anywhere may take
 * it). */
static pid_t spawn_at_pid(pid_t want, int out, const char *addr) {
        for (int tries = 0; tries < 200; tries++) {
                int f = open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
                if (f < 0)
                        test_skip("ns_last_pid: %s", strerror(errno));
                dprintf(f, "%d", (int)want - 1);
                close(f);
                pid_t p = fork();
                ASSERT_TRUE(p >= 0);
                if (p == 0) {
                        if (getpid() != want)
                                _exit(99);
                        char len[32];
                        snprintf(len, sizeof(len), "%zu", 2 * LANE);
                        dup2(out, 1);
                        execl(victim_bin, "ident-victim", secret_path, addr, len, (char *)NULL);
                        _exit(98);
                }
                if (p == want)
                        return p;
                waitpid(p, NULL, 0); /* another process took the pid first: again */
                if (kill(want, 0) == 0 || errno == EPERM)
                        break; /* and it is still there */
        }
        fprintf(stderr, "could not give the victim pid %d: another process holds it\n", (int)want);
        return -1;
}

/* B killed (reaped by init: A is gone) and the case's pipes closed. */
static void case_end(pid_t b, int go, int res, int ev, const int out[2]) {
        if (b > 0)
                kill(b, SIGKILL);
        close(go);
        close(res);
        close(ev);
        close(out[0]);
        close(out[1]);
}

/* One attack; false if the pid reuse could not be staged (nothing was
 * checked: the caller makes it again). */
static bool run_case(Case k) {
        int go[2], res[2], ev[2], out[2];
        char line[256], addr[64] = "";
        pid_t b = 0, victim;
        uint64_t ev0 = evictions();

        fprintf(stderr, "==== %s\n", k == CASE_EXEC ? "exec" : k == CASE_REUSE ? "pid reuse" : "exec after a real attach");
        ASSERT_OK(pipe2(go, O_CLOEXEC));
        ASSERT_OK(pipe2(res, O_CLOEXEC));
        ASSERT_OK(pipe2(ev, O_CLOEXEC));
        ASSERT_OK(pipe(out)); /* the victim's stdout: inherited across the exec */
        pid_t a = fork_as(U_ATTACKER);
        if (a == 0) {
                close(go[1]);
                close(res[0]);
                close(ev[0]);
                close(out[0]);
                _exit(attacker_a(k, go[0], res[1], ev[1], out[1]));
        }
        close(go[0]);
        close(res[1]);
        close(ev[1]);
        /* A's steps, up to its exec or exit */
        for (;;) {
                if (!read_line(ev[0], line, sizeof(line), 60000)) {
                        int st = 0;
                        waitpid(a, &st, WNOHANG);
                        test_fail("attacker stopped before its exec/exit (status %#x)", st);
                }
                fprintf(stderr, "attacker: %s", line);
                sscanf(line, "b %d", &b);
                if (sscanf(line, "exec %63s", addr) == 1 || sscanf(line, "exit %63s", addr) == 1)
                        break;
        }
        if (k == CASE_REUSE) {
                int st;
                ASSERT_TRUE(waitpid(a, &st, 0) == a);
                victim = spawn_at_pid(a, out[1], addr);
                if (victim < 0) {
                        case_end(b, go[1], res[0], ev[0], out);
                        return false;
                }
        } else
                victim = a;
        if (!read_line(out[0], line, sizeof(line), 30000) || strcmp(line, "mapped\n") != 0) {
                int st = 0;
                waitpid(victim, &st, WNOHANG);
                test_fail("the victim did not map its secret at %s (status %#x): no attack was made", addr, st);
        }
        fprintf(stderr, "victim pid %d (uid %d, setuid) holds its secret at %s\n", (int)victim, U_VICTIM, addr);
        /* exec: the daemon either reads the queued MOVE_DONE and evicts X
         * (or puts it back), or refused the attach; reuse: it reads the
         * queued ATTACH, after the victim took the pid */
        uint64_t t0 = (now_ns() / 1000000);
        bool refused = false;
        if (k == CASE_OWN) {
                /* the exec ends the client: the daemon never acts for the new image */
                while (daemon_has_client(victim) && (now_ns() / 1000000) - t0 < TEST_WAIT_S * 1000ull)
                        usleep(50000);
                if (daemon_has_client(victim)) {
                        td_log_dump(&d);
                        test_fail("the daemon still serves pid %d %llu ms after it exec'd a setuid program",
                                  (int)victim, (unsigned long long)((now_ns() / 1000000) - t0));
                }
                fprintf(stderr, "client of pid %d dropped after its exec (%llu ms)\n", (int)victim,
                        (unsigned long long)((now_ns() / 1000000) - t0));
                refused = true;
        }
        char attached[64], not_own[96], gone[96];
        snprintf(attached, sizeof(attached), "client pid %d attached", (int)victim);
        /* either refusal, for this pid (an earlier try's lines name others):
         * the attach read before or after the daemon saw the pid change */
        snprintf(not_own, sizeof(not_own), "pid %d: refused: not its own address space", (int)victim);
        snprintf(gone, sizeof(gone), "pid %d: refused: the process that connected exited or exec'd", (int)victim);
        while (k != CASE_OWN && (now_ns() / 1000000) - t0 < 30000) {
                /* evicted, or put back (hand_back(): the page is read from
                 * the slot again, later, and installed in X) */
                if (k == CASE_EXEC && (evictions() > ev0 || td_log_has(&d, "putting 1 pages back")))
                        break;
                if (k == CASE_REUSE && td_log_has(&d, attached)) {
                        usleep(500000); /* its REGISTER and PAGEOUT too */
                        break;
                }
                if ((refused = td_log_has(&d, not_own) || (k == CASE_REUSE && td_log_has(&d, gone))) &&
                    (now_ns() / 1000000) - t0 > 4000)
                        break;
                usleep(50000);
        }
        if (daemon_has_client(victim)) {
                td_log_dump(&d);
                test_fail("the daemon serves the victim (pid %d, uid %d) as the attacker's client", (int)victim,
                          U_VICTIM);
        }
        if (k != CASE_OWN)
                fprintf(stderr, "after %llu ms: %llu evictions, attach %s\n", (unsigned long long)((now_ns() / 1000000) - t0),
                (unsigned long long)(evictions() - ev0), refused ? "refused" : "not refused");
        /* B faults X in */
        ASSERT_EQ(write(go[1], "g", 1), 1);
        uint8_t page[ZSWAP_PAGE_SIZE + 1];
        size_t got = 0;
        while (got < ZSWAP_PAGE_SIZE) {
                struct pollfd p = { .fd = res[0], .events = POLLIN };
                if (poll(&p, 1, 30000) <= 0)
                        break;
                ssize_t n = read(res[0], page + got, ZSWAP_PAGE_SIZE - got);
                if (n <= 0)
                        break;
                got += (size_t)n;
        }
        page[got] = 0;
        kill(victim, SIGKILL);
        waitpid(victim, NULL, 0);
        case_end(b, go[1], res[0], ev[0], out);
        if (got != ZSWAP_PAGE_SIZE)
                test_fail("B read no page (%zu bytes)", got);
        if (memmem(page, ZSWAP_PAGE_SIZE, secret, strlen(secret))) {
                td_log_dump(&d);
                test_fail("the attacker read the victim's secret: \"%.*s\"", (int)strlen(secret), (char *)page);
        }
        fprintf(stderr, "B read X as \"%.16s...\": not the secret\n", page[0] ? (char *)page : "(zeros)");
        if (!refused) {
                td_log_dump(&d);
                test_fail("the attack was neither refused nor carried out: see the log");
        }
        return true;
}

/* ---- credentials per request ---- */

/* A tunable as the daemon has it now: pid 0 daemon-wide, else that client's. */
static void tunable_get(pid_t pid, const char *key, char *out, size_t len) {
        ZMsgHello h = { .role = ZROLE_CONTROL };
        ZMsgTunable q = { .pid = pid };
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        const ZMsgTunable *rep = (const ZMsgTunable *)buf;
        int fd = raw_connect();

        ASSERT_TRUE(fd >= 0);
        uint32_t id = send_msg(fd, &h, ZMSG_HELLO, sizeof(h), NULL, 0);
        ASSERT_EQ(wait_for(fd, id, 0, NULL, NULL), 0);
        snprintf(q.key, sizeof(q.key), "%s", key);
        send_msg(fd, &q, ZMSG_TUNABLE_GET, sizeof(q), NULL, 0);
        ASSERT_TRUE(zmsg_recv(fd, buf, sizeof(buf), NULL, NULL, NULL) == (ssize_t)sizeof(*rep));
        ASSERT_EQ(rep->hdr.type, ZMSG_TUNABLE_REPLY);
        ASSERT_EQ(rep->status, 0);
        size_t n = strnlen(rep->value, sizeof(rep->value));
        ASSERT_TRUE(n < len);
        memcpy(out, rep->value, n);
        out[n] = 0;
        close(fd);
}

/* Connect as root (a control connection, as zswapctl), then drop to U_DROP
 * (setuid(), or seteuid() only), then ask: TUNABLE_SET idle_age (daemon
 * wide) or SET_LIMIT on the client of pid. Exits 0 if refused (an error,
 * or the connection ended), 1 if done. */
static int dropped_request(bool eff_only, bool limit, pid_t pid) {
        ZMsgHello h = { .role = ZROLE_CONTROL };
        int fd = raw_connect();
        if (fd < 0)
                return 10;
        uint32_t id = send_msg(fd, &h, ZMSG_HELLO, sizeof(h), NULL, 0);
        if (wait_for(fd, id, 0, NULL, NULL) != 0)
                return 11;
        if (eff_only ? seteuid(U_DROP) < 0 : setuid(U_DROP) < 0)
                return 12;
        if (limit) {
                ZMsgLimit q = { .pid = pid, .bytes = 1 << 20 };
                id = send_msg(fd, &q, ZMSG_SET_LIMIT, sizeof(q), NULL, 0);
        } else {
                ZMsgTunable q = { .pid = 0 };
                snprintf(q.key, sizeof(q.key), "idle_age");
                snprintf(q.value, sizeof(q.value), "3h");
                id = send_msg(fd, &q, ZMSG_TUNABLE_SET, sizeof(q), NULL, 0);
        }
        return wait_for(fd, id, 0, NULL, NULL) == 0;
}

static void run_drop(bool eff_only) {
        char idle0[ZSWAP_TUNABLE_VALUE_MAX], limit0[ZSWAP_TUNABLE_VALUE_MAX];
        char idle1[ZSWAP_TUNABLE_VALUE_MAX], limit1[ZSWAP_TUNABLE_VALUE_MAX];
        int ready[2], hold[2], st;
        char c;

        fprintf(stderr, "==== root connects, then %s(%d)\n", eff_only ? "seteuid" : "setuid", U_DROP);
        /* another user's client, with a limit of its own */
        ASSERT_OK(pipe2(ready, O_CLOEXEC));
        ASSERT_OK(pipe2(hold, O_CLOEXEC));
        pid_t owner = fork_as(U_VICTIM);
        if (owner == 0) {
                struct zswap_client *zc;
                uint64_t hashes[16];
                close(hold[1]);
                close(ready[0]);
                if (zswap_connect(d.sock, &zc) < 0)
                        _exit(20);
                td_region(zc, 16 * ZSWAP_PAGE_SIZE, 3, hashes);
                if (zswap_set_limit(zc, 8 << 20) < 0)
                        _exit(21);
                if (write(ready[1], "r", 1) != 1 || read(hold[0], &c, 1) < 0)
                        _exit(22);
                zswap_disconnect(zc);
                _exit(0);
        }
        close(ready[1]);
        close(hold[0]);
        ASSERT_EQ(read(ready[0], &c, 1), 1);
        tunable_get(0, "idle_age", idle0, sizeof(idle0));
        tunable_get(owner, "limit", limit0, sizeof(limit0));
        ASSERT_TRUE(strcmp(idle0, "3h") != 0 && strcmp(idle0, "10800s") != 0);

        for (int limit = 0; limit < 2; limit++) {
                pid_t p = fork();
                ASSERT_TRUE(p >= 0);
                if (p == 0)
                        _exit(dropped_request(eff_only, limit, owner));
                ASSERT_EQ(waitpid(p, &st, 0), p);
                ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) <= 1);
                fprintf(stderr, "%s as uid %d after connecting as root: %s\n", limit ? "SET_LIMIT" : "TUNABLE_SET",
                        U_DROP, WEXITSTATUS(st) ? "done" : "refused");
        }
        tunable_get(0, "idle_age", idle1, sizeof(idle1));
        tunable_get(owner, "limit", limit1, sizeof(limit1));
        close(hold[1]);
        ASSERT_EQ(waitpid(owner, &st, 0), owner);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        close(ready[0]);
        if (strcmp(idle0, idle1) != 0)
                test_fail("a process that dropped root changed the daemon-wide idle_age: %s -> %s", idle0, idle1);
        if (strcmp(limit0, limit1) != 0)
                test_fail("a process that dropped root changed uid %d's client limit: %s -> %s", U_VICTIM, limit0,
                          limit1);
        fprintf(stderr, "idle_age %s, the client's limit %s: unchanged\n", idle1, limit1);
}

int main(int argc, char **argv) {
        char args[PATH_MAX + 16];
        uint64_t rnd;
        struct statvfs sv;

        if (geteuid() != 0)
                test_skip("needs root (uids of its own)");
        const char *bin = getenv("ZSWAP_IDENT_VICTIM");
        if (!bin)
                test_skip("ZSWAP_IDENT_VICTIM not set");
        snprintf(dir, sizeof(dir), "/tmp/test-ident-XXXXXX");
        ASSERT_TRUE(mkdtemp(dir) != NULL);
        ASSERT_OK(chmod(dir, 0711));
        if (statvfs(dir, &sv) == 0 && (sv.f_flag & ST_NOSUID))
                test_skip("%s is on a nosuid file system", dir);
        /* the victim's secret: 0600, its own */
        ASSERT_EQ(getrandom(&rnd, sizeof(rnd), 0), (ssize_t)sizeof(rnd));
        snprintf(secret, sizeof(secret), "victim-secret-%016llx", (unsigned long long)rnd);
        snprintf(secret_path, sizeof(secret_path), "%s/secret", dir);
        int f = open(secret_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        ASSERT_TRUE(f >= 0);
        ASSERT_EQ(write(f, secret, strlen(secret)), (ssize_t)strlen(secret));
        ASSERT_OK(fchown(f, U_VICTIM, U_VICTIM));
        ASSERT_OK(close(f));
        /* the setuid program */
        snprintf(victim_bin, sizeof(victim_bin), "%s/ident-victim", dir);
        snprintf(args, sizeof(args), "cp %s %s", bin, victim_bin);
        ASSERT_EQ(system(args), 0);
        ASSERT_OK(chown(victim_bin, U_VICTIM, U_VICTIM));
        ASSERT_OK(chmod(victim_bin, 04755));

        snprintf(conf_path, sizeof(conf_path), "%s/zswapd.conf", dir);
        FILE *c = fopen(conf_path, "we");
        ASSERT_TRUE(c != NULL);
        /* the attacker has what a granted user has: uffds of its own */
        fprintf(c, "[users]\nallow = %d %d\nuserfaultfd_device = yes\n[user:%d]\nmax_requests = 1\n", U_ATTACKER,
                U_VICTIM, U_ATTACKER);
        ASSERT_OK(fclose(c));
        snprintf(args, sizeof(args), "--config %s", conf_path);
        td_start_logged(&d, args);

        /* a case name runs that case alone */
        if (argc < 2 || strcmp(argv[1], "exec") == 0)
                run_case(CASE_EXEC);
        if (argc < 2 || strcmp(argv[1], "reuse") == 0) {
                int tries = 0;
                while (!run_case(CASE_REUSE))
                        if (++tries == 5)
                                test_fail("the victim never got the attacker's pid in %d tries", tries);
        }
        if (argc < 2 || strcmp(argv[1], "own") == 0)
                run_case(CASE_OWN);
        if (argc < 2 || strcmp(argv[1], "drop") == 0) {
                run_drop(false);
                run_drop(true);
        }

        td_stop(&d);
        unlink(victim_bin);
        unlink(secret_path);
        unlink(conf_path);
        rmdir(dir);
        return 0;
}
