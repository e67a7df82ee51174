/*
 * test-fork-flood: an admitted, unprivileged user forks children that
 * never attach, and keeps them alive.
 *
 * Every fork of a client's address space gives the daemon the child's
 * userfaultfd (UFFD_EVENT_FORK), and the daemon keeps it as an orphan
 * until the child attaches or exits (daemon/fault/fork.c event_fork(),
 * tick_orphans()): the uffd, a store (a memfd), a duplicate of the sync
 * page's memfd and of the parent's pidfd, four descriptors, besides the
 * child's copy of its parent's regions and index, all in locked memory.
 * A child forked without libzswap's handlers (a raw clone) never
 * attaches, and the user's processes are bounded only by the kernel
 * (RLIMIT_NPROC, pid_max). Unbounded, one connection of one user could
 * take every descriptor the daemon may open, and then nobody connects
 * (accept fails with EMFILE) and no client's fork returns (its event
 * cannot be read without a free descriptor). So a user's children not
 * attached count against its max_connections: at the bound, its next
 * fork waits (docs/security.md, "Fork children that never attach").
 *
 * To keep the test cheap the daemon's RLIMIT_NOFILE is lowered (prlimit)
 * to what it holds plus 600, so 200 sleeping children suffice; at the
 * real limit it takes more processes, never a quota of the user's.
 *
 * The attacker (U_FLOOD, max_connections 4) connects once with libzswap,
 * registers and evicts 64 pages, and forks up to 200 raw children that
 * sleep (a fork waits in the kernel while the daemon has no descriptor
 * free to read its event: every client's fork waits so, not only the
 * attacker's).
 * Then: the daemon must hold no more descriptors for that user than its
 * connections allow (4 connections of at most 16 descriptors each), must
 * say why the attacker waits, and an honest root client must still
 * connect, page out and read back. Without the bound, 148 children
 * take all 600 descriptors and the honest client is not served at all.
 * When one child exits, the fork that waits at the bound completes. A
 * shell of that user that forks and execs 200 commands one after the
 * other is slowed by a tick at most each (children that exec'd stop
 * counting at once).
 *
 * Then root, whom no bound holds, does the same until the daemon is out
 * of descriptors: the fork whose event cannot be read waits in the
 * kernel. When one child exits, that fork must complete: the daemon has
 * to read the event again by itself, since its epoll edge is spent
 * (before, it waited for good).
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "harness.h"
#include "util.h"

#define U_FLOOD 61201
#define NKIDS 200
#define FLOOD_PAGES 64
#define FDS_PER_CONN 16
#define MAX_CONNS 4

static TestDaemon d;
static char conf_path[128];

/* fork() without libzswap's atfork handlers: the child never attaches */
static pid_t raw_fork(void) {
        return (pid_t)syscall(SYS_clone, SIGCHLD, 0, NULL, NULL, 0);
}

/* A client of ours with FLOOD_PAGES pages of the given seed held out
 * (*buf, their hashes in hashes): 0, or the exit status that says which
 * step failed. */
static int client_holding(int seed, uint8_t **buf, uint64_t *hashes) {
        struct zswap_client *c;

        if (zswap_connect(d.sock, &c) < 0)
                return 80;
        *buf = td_region(c, FLOOD_PAGES * ZSWAP_PAGE_SIZE, seed, hashes);
        if (td_pageout_want(c, *buf, FLOOD_PAGES * ZSWAP_PAGE_SIZE, 1) <= 0)
                return 81;
        return 0;
}

/* As U_FLOOD (or root): one client, NKIDS children that sleep until we
 * die. The pid of each child made on ready. A fork waits in the kernel
 * until the daemon has read its event, which it does not at the user's
 * bound, nor without a free descriptor: the test stops waiting for us
 * once the daemon says so (flood_start()), and kills us at the end (the
 * children die with us: PDEATHSIG). */
static int flood(int ready) {
        uint64_t hashes[FLOOD_PAGES];
        uint8_t *buf;
        int r = client_holding(7, &buf, hashes);

        if (r)
                return r;
        pid_t self = getpid();
        for (unsigned i = 0; i < NKIDS; i++) {
                pid_t k = raw_fork();
                if (k < 0)
                        return 82;
                if (k == 0) {
                        /* async-signal-safe only: another thread may have
                         * held a lock at the clone. A parent killed before
                         * the prctl sends no signal: then the child goes
                         * at once (flood_end() kills the process group
                         * too). */
                        syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
                        if (syscall(SYS_getppid) != self)
                                syscall(SYS_exit_group, 0);
                        for (;;)
                                pause();
                }
                if (write(ready, &k, sizeof(k)) != sizeof(k))
                        return 83;
        }
        for (;;)
                pause();
}

/* As root: connect, page 1 MiB out and read it back (a daemon out of
 * descriptors never serves it: the test's safety bound ends it) */
static int honest(void) {
        size_t len = 1 << 20;
        uint64_t *hashes = calloc(len / ZSWAP_PAGE_SIZE, sizeof(uint64_t));
        struct zswap_client *c;

        alarm(TEST_WAIT_S);
        if (!hashes)
                return 60;
        int r = zswap_connect(d.sock, &c);
        if (r < 0) {
                fprintf(stderr, "honest client: connect: %s\n", strerror(-r));
                return 61;
        }
        uint8_t *buf = td_region(c, len, 3, hashes);
        if (td_pageout_want(c, buf, len, 1) <= 0)
                return 62;
        if (verify_pages(buf, len, hashes) != 0)
                return 63;
        zswap_disconnect(c);
        return 0;
}

/* As U_FLOOD: one client, then FORK_EXECS children one after the other,
 * each exec'ing /bin/true at once (as a shell runs commands): an orphan
 * each until its exec, so the user is at its bound all along. */
#define FORK_EXECS 200
static int fork_exec(void) {
        uint64_t hashes[FLOOD_PAGES];
        uint8_t *buf;
        int r = client_holding(9, &buf, hashes);

        if (r)
                return r;
        for (unsigned i = 0; i < FORK_EXECS; i++) {
                pid_t k = raw_fork();
                if (k < 0)
                        return 82;
                if (k == 0) {
                        char *argv[] = { "true", NULL };
                        syscall(SYS_execve, "/bin/true", argv, (char *[]){ NULL });
                        syscall(SYS_exit_group, 127);
                }
                int st;
                if (waitpid(k, &st, 0) != k || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
                        return 83;
        }
        return verify_pages(buf, FLOOD_PAGES * ZSWAP_PAGE_SIZE, hashes) ? 84 : 0;
}

typedef struct Flood {
        pid_t att, first;
        int ready;
        unsigned made, fds1;
        uint64_t rss1;
} Flood;

/* uid's flood: until NKIDS children are made, or the daemon has said
 * held (a line of its log: it holds the flood's next fork) and no child
 * came for a second since; TEST_WAIT_S at most. A slow machine only makes
 * this wait for the daemon's line longer. */
static void flood_start(Flood *fl, uid_t uid, const char *held) {
        int ready[2], st;

        *fl = (Flood){ 0 };
        ASSERT_OK(pipe2(ready, O_CLOEXEC));
        fl->att = td_fork_as(uid, 0);
        /* the flood and its children in a process group of their own,
         * which flood_end() kills whole (set on both sides: whichever
         * runs first) */
        if (fl->att == 0) {
                setpgid(0, 0);
                close(ready[0]);
                _exit(flood(ready[1]));
        }
        setpgid(fl->att, fl->att);
        close(ready[1]);
        fl->ready = ready[0];
        uint64_t t0 = now_ns(), last = t0;
        while (fl->made < NKIDS && now_ns() - t0 < (uint64_t)TEST_WAIT_S * 1000000000) {
                struct pollfd p = { .fd = fl->ready, .events = POLLIN };
                pid_t k;
                if (poll(&p, 1, 100) == 1) {
                        if (read(fl->ready, &k, sizeof(k)) != sizeof(k))
                                break;
                        fl->first = fl->first ? fl->first : k;
                        fl->made++;
                        last = now_ns();
                } else if (now_ns() - last > 1000000000ull && td_log_has(&d, held))
                        break;
        }
        if (fl->made < NKIDS && now_ns() - t0 >= (uint64_t)TEST_WAIT_S * 1000000000)
                /* said, so that a run that meson ends at its timeout
                 * shows which wait took the time */
                fprintf(stderr, "uid %u: %u children in %d s, and the daemon's log %s \"%s\"; its descriptors: %u\n",
                        (unsigned)uid, fl->made, TEST_WAIT_S, td_log_has(&d, held) ? "has" : "lacks", held,
                        td_fd_count(&d));
        if (waitpid(fl->att, &st, WNOHANG) == fl->att)
                test_fail("uid %u: the flood exited (%#x) after %u children", (unsigned)uid, st, fl->made);
        usleep(1500 * 1000); /* a tick or two */
        fl->fds1 = td_fd_count(&d);
        fl->rss1 = td_rss_kb(&d);
}

/* One child exits: the fork that waits completes (the daemon looks for
 * children that exited at its tick). */
static bool flood_one_gone(Flood *fl) {
        struct pollfd p = { .fd = fl->ready, .events = POLLIN };
        pid_t k;
        bool more;

        if (fl->made >= NKIDS || fl->first <= 0)
                return false;
        kill(fl->first, SIGKILL);
        more = poll(&p, 1, TEST_WAIT_S * 1000) == 1 && read(fl->ready, &k, sizeof(k)) == sizeof(k);
        fprintf(stderr, "one child killed: %s\n",
                more ? "the waiting fork completed" : "no fork completed within the test's bound");
        return more;
}

/* The flood and every child of it killed. A child left alive would hold
 * our stdout and stderr open, and meson waits for those to close: the
 * test would end at meson's timeout after it passed. */
static void flood_end(Flood *fl) {
        int st;
        kill(-fl->att, SIGKILL);
        if (!td_waitpid_for(fl->att, &st, TEST_WAIT_S, "the flood after SIGKILL")) {
                td_dump_stacks(d.pid, "zswapd");
                td_log_dump(&d);
                test_fail("a killed flood did not exit");
        }
        close(fl->ready);
}

int main(void) {
        char args[256];
        int st;
        Flood fl;

        snprintf(conf_path, sizeof(conf_path), "/tmp/test-fork-flood-%d.conf", (int)getpid());
        FILE *f = fopen(conf_path, "we");
        ASSERT_TRUE(f != NULL);
        fprintf(f, "[users]\nallow = %d\nuserfaultfd_device = yes\n[user:%d]\nmax_connections = %d\n", U_FLOOD,
                U_FLOOD, MAX_CONNS);
        ASSERT_OK(fclose(f));
        snprintf(args, sizeof(args), "--config %s", conf_path);
        td_start_logged(&d, args);

        unsigned fds0 = td_fd_count(&d);
        uint64_t rss0 = td_rss_kb(&d);
        struct rlimit rl = { .rlim_cur = fds0 + 600, .rlim_max = fds0 + 600 };
        ASSERT_OK(prlimit(d.pid, RLIMIT_NOFILE, &rl, NULL));

        /* the attacker */
        flood_start(&fl, U_FLOOD, "forked children not attached (its max_connections)");
        fprintf(stderr,
                "attacker: %u children that never attach%s; daemon: %u -> %u descriptors, VmRSS %llu -> %llu kB\n",
                fl.made, fl.made < NKIDS ? " (its next fork waits for the daemon)" : "", fds0, fl.fds1,
                (unsigned long long)rss0, (unsigned long long)fl.rss1);
        pid_t h = fork();
        ASSERT_TRUE(h >= 0);
        if (h == 0)
                _exit(honest());
        ASSERT_TRUE(waitpid(h, &st, 0) == h);
        int honest_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        bool more = flood_one_gone(&fl);
        flood_end(&fl);
        if (honest_status != 0 || fl.fds1 > fds0 + MAX_CONNS * FDS_PER_CONN) {
                td_log_dump(&d);
                test_fail("%u children of one user (max_connections %d) cost the daemon %u descriptors; an honest "
                          "client %s (status %d)",
                          fl.made, MAX_CONNS, fl.fds1 - fds0, honest_status ? "was not served" : "was served",
                          honest_status);
        }
        ASSERT_TRUE(td_log_has(&d, "forked children not attached (its max_connections)"));
        if (!more)
                test_fail("the attacker's fork still waits after one of its children exited");

        /* an honest shell of that user: fork and exec, one after the
         * other; each child counts until its exec, and must stop counting
         * at once then (not at the daemon's once-a-second look at its
         * children, which would make this take 50 s) */
        for (int i = 0; i < TEST_WAIT_S * 10 && td_fd_count(&d) > fds0 + 16; i++)
                usleep(100 * 1000);
        uint64_t t0 = now_ns();
        pid_t sh = td_fork_as(U_FLOOD, 0);
        if (sh == 0)
                _exit(fork_exec());
        ASSERT_TRUE(waitpid(sh, &st, 0) == sh);
        double secs = (double)(now_ns() - t0) / 1e9;
        fprintf(stderr, "%d forks and execs of a user at its bound of %d: %.2f s (status %#x)\n", FORK_EXECS,
                MAX_CONNS, secs, st);
        /* the time is said, not asserted (a loaded machine is slow):
         * about 2 s on an idle one; children that exec'd, counted until
         * the daemon's once-a-second look at its children, would make it
         * about 50 s */
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);

        /* root, whom no bound holds, runs the daemon out of descriptors:
         * the fork whose event could not be read for want of one must
         * complete once one is free (the kernel keeps the event, but its
         * epoll edge is spent: the daemon must look again by itself) */
        for (int i = 0; i < TEST_WAIT_S * 10 && td_fd_count(&d) > fds0 + 16; i++)
                usleep(100 * 1000);
        if (td_fd_count(&d) > fds0 + 16)
                fprintf(stderr, "the daemon's descriptors after %d s: %u, %u at the start\n", TEST_WAIT_S,
                        td_fd_count(&d), fds0);
        flood_start(&fl, 0, "a fork event cannot be read");
        fprintf(stderr, "root: %u children that never attach; daemon: %u -> %u descriptors\n", fl.made, fds0,
                fl.fds1);
        more = flood_one_gone(&fl);
        flood_end(&fl);
        if (!more && fl.made >= NKIDS && td_log_has(&d, "cannot track forked child")) {
                /* the sanitizers' shadow takes the address space each
                 * child's pool reserves: the daemon runs out of memory for
                 * children before it runs out of descriptors, and the
                 * descriptor case is the plain build's */
                fprintf(stderr, "root: the daemon ran out of memory for children before descriptors: that part "
                                "is not reached in this build\n");
                td_stop(&d);
                unlink(conf_path);
                unlink(d.log);
                return 0;
        }
        if (!more) {
                td_log_dump(&d);
                test_fail("root's fork, whose event met a daemon out of descriptors, still waits after %s",
                          fl.made < NKIDS ? "one of its children exited" : "(it never ran out: nothing tested)");
        }
        /* what ran out: descriptors (the plain build), or, in the
         * sanitizers' builds, memory for a child, which the fault thread
         * waits for a while; either way root's fork went on once a
         * child was gone */
        ASSERT_TRUE(td_log_has(&d, "a fork event cannot be read") ||
                    td_log_has(&d, "no memory to track its forked child"));
        td_stop(&d);
        unlink(conf_path);
        unlink(d.log);
        return 0;
}
