/*
 * test-sandbox: the daemon runs with least privilege and still serves.
 *
 * /proc/PID/status of every daemon thread says: seccomp filter on, no new
 * privileges, exactly the capabilities sandbox.c keeps (effective,
 * permitted and bounding), memory locked without being populated. Then a
 * system call outside the allowlist is made by the daemon itself: the test
 * stops a daemon thread with ptrace, points it at its own syscall
 * instruction with another call number (the syscall-entry ptrace stop
 * comes before seccomp, kernel/entry/common.c, so the filter judges the
 * call we put there), lets it run through the SIGSYS handler, reads
 * -EPERM as the call's result when the handler returns, and puts the
 * registers back so the thread goes on where it was. The client paged
 * out before it reads every page back and checks it; the daemon's log
 * names each refused call. With a second tier (a backing file), every
 * thread, its writer and io_uring's kernel workers (iou-wrk) included,
 * holds no more. A second tier's NBD server (one of ours, on a Unix
 * socket) finds the daemon that connects to it the first time sandboxed
 * already. Without --no-mlock / with --no-sandbox the same fields say so.
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/user.h>
#include <sys/wait.h>

#include "harness.h"

#define CAPBIT(c) (1ull << (c))

static char log_path[128];

static uint64_t status_num(const char *path, const char *key, int base) {
        char v[128];
        if (!td_status_field(path, key, v, sizeof(v)))
                test_fail("%s: no %s", path, key);
        return strtoull(v, NULL, base);
}

static bool memlock_unlimited(pid_t pid) {
        char path[64], line[256];
        bool unlimited = false;
        snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
        FILE *f = fopen(path, "re");
        ASSERT_TRUE(f != NULL);
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, "Max locked memory", 17) == 0)
                        unlimited = strncmp(line + 26, "unlimited", 9) == 0;
        fclose(f);
        return unlimited;
}

/* Every thread of pid: the filter, no_new_privs and caps == want. */
static unsigned check_threads(pid_t pid, int seccomp, uint64_t want) {
        char dir[64], path[400];
        unsigned n = 0;
        struct dirent *e;

        snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
        DIR *d = opendir(dir);
        ASSERT_TRUE(d != NULL);
        while ((e = readdir(d))) {
                if (e->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "%s/%s/status", dir, e->d_name);
                char name[64] = "";
                (void)td_status_field(path, "Name", name, sizeof(name));
                fprintf(stderr, "thread %s (%s): CapEff %#llx\n", e->d_name, name,
                        (unsigned long long)status_num(path, "CapEff", 16));
                ASSERT_EQ(status_num(path, "Seccomp", 10), seccomp);
                ASSERT_EQ(status_num(path, "NoNewPrivs", 10), seccomp ? 1 : 0);
                ASSERT_EQ(status_num(path, "CapEff", 16), want);
                ASSERT_EQ(status_num(path, "CapPrm", 16), want);
                ASSERT_EQ(status_num(path, "CapBnd", 16), seccomp ? want : status_num("/proc/self/status", "CapBnd", 16));
                ASSERT_EQ(status_num(path, "CapAmb", 16), 0);
                n++;
        }
        closedir(d);
        return n;
}

static uint64_t kept_caps(pid_t pid, bool locked, bool realtime) {
        uint64_t want = CAPBIT(CAP_SYS_PTRACE) | CAPBIT(CAP_DAC_READ_SEARCH) | CAPBIT(CAP_KILL);
        if (locked && !memlock_unlimited(pid))
                want |= CAPBIT(CAP_IPC_LOCK);
        if (realtime)
                want |= CAPBIT(CAP_SYS_NICE);
        return want;
}

/* ---- a forbidden call, made by a daemon thread ---- */

static int wait_stop(pid_t tid) {
        int st;
        ASSERT_EQ(waitpid(tid, &st, __WALL), tid);
        if (!WIFSTOPPED(st))
                test_fail("daemon thread %d did not stop: status %#x", (int)tid, st);
        return st;
}

/* Stop tid at a system call: where it waits in one (the daemon's idle
 * threads do), or else at the entry of the next one it makes (true).
 * Either way regs->rip - 2 is a syscall instruction, and
 * resume_regs(*regs) goes on with what the thread was doing. */
static bool stop_at_syscall(pid_t tid, struct user_regs_struct *regs) {
        bool entry = false;

        ASSERT_OK(ptrace(PTRACE_INTERRUPT, tid, 0, 0));
        int st = wait_stop(tid);
        ASSERT_EQ(st >> 16, PTRACE_EVENT_STOP);
        ASSERT_OK(ptrace(PTRACE_GETREGS, tid, 0, regs));
        if ((long long)regs->orig_rax < 0) {
                /* in user code: run it to its next call (a thread just
                 * resumed by us may not even have left the kernel yet) */
                for (int sig = 0;; sig = (st >> 16) == 0 ? WSTOPSIG(st) : 0) {
                        ASSERT_OK(ptrace(PTRACE_SYSCALL, tid, 0, sig));
                        st = wait_stop(tid);
                        if (WSTOPSIG(st) == (SIGTRAP | 0x80))
                                break;
                }
                ASSERT_OK(ptrace(PTRACE_GETREGS, tid, 0, regs));
                regs->rax = (unsigned long long)-513; /* ERESTARTNOINTR: make that call after ours */
                entry = true;
        }
        errno = 0;
        long insn = ptrace(PTRACE_PEEKTEXT, tid, (void *)(regs->rip - 2), 0);
        ASSERT_EQ(errno, 0);
        ASSERT_EQ(insn & 0xffff, 0x050f); /* syscall */
        return entry;
}

/* The registers that resume what was interrupted: an -ERESTART* call is
 * made again (what the kernel would have done), a finished one returns. */
static struct user_regs_struct resume_regs(struct user_regs_struct r) {
        long long ret = (long long)r.rax;
        if ((long long)r.orig_rax >= 0 && (ret == -512 || ret == -513 || ret == -514)) {
                r.rax = r.orig_rax;
                r.rip -= 2;
        } else if ((long long)r.orig_rax >= 0 && ret == -516) {
                /* ERESTART_RESTARTBLOCK: the handler's sigreturn reset the
                 * restart block, so restart_syscall says EINTR, which a
                 * timed wait's caller retries */
                r.rax = SYS_restart_syscall;
                r.rip -= 2;
        }
        r.orig_rax = (unsigned long long)-1; /* no restart by the kernel on top */
        return r;
}

/* The filter refused tid's call: SIGSYS is queued before the exit stop. */
static bool sigsys_pending(pid_t tid) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
        return (status_num(path, "SigPnd", 16) | status_num(path, "ShdPnd", 16)) & (1ull << (SIGSYS - 1));
}

/* Make thread tid call nr(a0, a1, a2); its return value. */
static long inject(pid_t tid, long nr, long a0, long a1, long a2) {
        struct user_regs_struct saved, r;
        long entered = -1, ret = LONG_MAX;
        bool sigsys = false;

        ASSERT_OK(ptrace(PTRACE_SEIZE, tid, 0, PTRACE_O_TRACESYSGOOD));
        bool at_entry = stop_at_syscall(tid, &saved);
        uint64_t insn = saved.rip - 2;
        r = saved;
        if (at_entry) {
                /* its call becomes ours; seccomp runs after this stop. (Not
                 * -1 to skip it: the filter would judge "-1" and refuse) */
                r.orig_rax = (unsigned long long)nr;
                entered = nr;
        } else {
                r.rip = insn; /* back onto the instruction: a fresh call */
                r.orig_rax = (unsigned long long)-1; /* not a restart */
                r.rax = (unsigned long long)nr;
        }
        r.rdi = (unsigned long long)a0;
        r.rsi = (unsigned long long)a1;
        r.rdx = (unsigned long long)a2;
        ASSERT_OK(ptrace(PTRACE_SETREGS, tid, 0, &r));
        ASSERT_OK(ptrace(PTRACE_SYSCALL, tid, 0, 0));
        /* entry (the filter sees nr), skipped-call exit, SIGSYS, the
         * handler's own calls, its rt_sigreturn: bounded */
        for (int stops = 0; ret == LONG_MAX && stops < 1000; stops++) {
                int st = wait_stop(tid), sig = 0;
                if (WSTOPSIG(st) == (SIGTRAP | 0x80)) {
                        struct __ptrace_syscall_info info;
                        ASSERT_OK(ptrace(PTRACE_GET_SYSCALL_INFO, tid, sizeof(info), &info));
                        if (info.op == PTRACE_SYSCALL_INFO_ENTRY)
                                entered = (long)info.entry.nr;
                        else if (info.op == PTRACE_SYSCALL_INFO_EXIT && entered == nr && !sigsys &&
                                 !sigsys_pending(tid))
                                ret = info.exit.rval; /* made, or refused without a signal */
                        else if (info.op == PTRACE_SYSCALL_INFO_EXIT && entered == SYS_rt_sigreturn) {
                                ASSERT_OK(ptrace(PTRACE_GETREGS, tid, 0, &r));
                                if (r.rip == insn + 2)
                                        ret = (long)r.rax; /* back where our call returns */
                        }
                } else if ((st >> 16) == 0) {
                        sig = WSTOPSIG(st); /* a signal for the thread: delivered */
                        sigsys |= sig == SIGSYS;
                }
                if (ret == LONG_MAX)
                        ASSERT_OK(ptrace(PTRACE_SYSCALL, tid, 0, sig));
        }
        if (ret == LONG_MAX)
                test_fail("thread %d: the injected call did not come back", (int)tid);
        r = resume_regs(saved);
        ASSERT_OK(ptrace(PTRACE_SETREGS, tid, 0, &r));
        ASSERT_OK(ptrace(PTRACE_DETACH, tid, 0, 0));
        fprintf(stderr, "thread %d (%s): system call %ld returned %ld%s\n", (int)tid,
                at_entry ? "stopped entering a call" : "stopped waiting in a call", nr, ret,
                sigsys ? " (through the SIGSYS handler)" : "");
        return ret;
}

/* A thread other than the main one that waits in nr (a fault thread in
 * epoll_wait), or any other thread. */
static pid_t other_thread(pid_t pid, long nr) {
        char dir[64], path[400], buf[64];
        pid_t any = 0, found = 0;
        struct dirent *e;

        snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
        DIR *d = opendir(dir);
        ASSERT_TRUE(d != NULL);
        while (!found && (e = readdir(d))) {
                pid_t tid = atoi(e->d_name);
                if (tid <= 0 || tid == pid)
                        continue;
                any = any ? any : tid;
                snprintf(path, sizeof(path), "%s/%d/syscall", dir, (int)tid);
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
                if (fd >= 0)
                        close(fd);
                if (n > 0 && (buf[n] = 0, atol(buf) == nr))
                        found = tid;
        }
        closedir(d);
        ASSERT_TRUE(any > 0);
        return found ? found : any;
}

static bool log_has(const char *needle) {
        char line[1024];
        bool found = false;
        FILE *f = fopen(log_path, "re");
        ASSERT_TRUE(f != NULL);
        while (!found && fgets(line, sizeof(line), f))
                found = strstr(line, needle) != NULL;
        fclose(f);
        return found;
}

static void start(TestDaemon *d, const char *args) {
        char a[256];
        snprintf(a, sizeof(a), "%s 2>>%s", args, log_path);
        td_start(d, a);
}

/* Register, page out, read back, check every page. */
static void client_cycle(struct zswap_client *c, uint8_t *buf, size_t len, const uint64_t *h) {
        int n = zswap_pageout(c, buf, len);
        ASSERT_OK(n);
        fprintf(stderr, "paged out %d of %zu pages\n", n, len / ZSWAP_PAGE_SIZE);
        ASSERT_TRUE(n > (int)(len / ZSWAP_PAGE_SIZE) * 9 / 10);
        ASSERT_EQ(verify_pages(buf, len, h), 0);
}

static void sandboxed(void) {
        const size_t len = 32 << 20;
        uint64_t *h = malloc(len / ZSWAP_PAGE_SIZE * sizeof(uint64_t));
        char path[64];
        TestDaemon d;

        start(&d, "");
        snprintf(path, sizeof(path), "/proc/%d/status", (int)d.pid);
        uint64_t want = kept_caps(d.pid, true, false);
        unsigned nthreads = check_threads(d.pid, 2, want);
        uint64_t lck = status_num(path, "VmLck", 10), rss = status_num(path, "VmRSS", 10);
        fprintf(stderr, "%u threads sandboxed, caps %#llx; VmLck %llu kB, VmRSS %llu kB\n", nthreads,
                (unsigned long long)want, (unsigned long long)lck, (unsigned long long)rss);
        ASSERT_TRUE(lck > 0);
        ASSERT_TRUE(rss < lck); /* locked on fault: the pool reservation stays unpopulated */

        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, len, 7, h);
        int n = zswap_pageout(c, buf, len);
        ASSERT_OK(n);
        /* while the pages are out: the manager thread tries an IPv4
         * socket, a fault thread execve (NULL: unrefused it would say
         * EFAULT) */
        ASSERT_EQ(inject(d.pid, SYS_socket, AF_INET, SOCK_STREAM, 0), -EPERM);
        ASSERT_EQ(inject(other_thread(d.pid, SYS_epoll_pwait2), SYS_execve, 0, 0, 0), -EPERM);
        /* an allowed call goes through: socket(AF_UNIX) gives an fd */
        long fd = inject(d.pid, SYS_socket, AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(inject(d.pid, SYS_close, fd, 0, 0), 0);
        ASSERT_EQ(verify_pages(buf, len, h), 0);
        client_cycle(c, buf, len, h);
        zswap_disconnect(c);
        check_threads(d.pid, 2, want);
        td_stop(&d);
        ASSERT_TRUE(log_has("sandbox: refused system call socket (41) in thread"));
        ASSERT_TRUE(log_has("sandbox: refused system call execve (59) in thread"));
        ASSERT_TRUE(log_has("sandbox: capabilities kept: "));
        munmap(buf, len);
        free(h);
}

/* SCHED_FIFO fault threads: CAP_SYS_NICE kept, and used. */
static void realtime(void) {
        char dir[64];
        struct dirent *e;
        bool fifo = false;
        TestDaemon d;

        start(&d, "--fault-rt-prio 1");
        check_threads(d.pid, 2, kept_caps(d.pid, true, true));
        snprintf(dir, sizeof(dir), "/proc/%d/task", (int)d.pid);
        /* each fault thread switches as it starts, which may be after the
         * socket accepts: look again until one has (or the safety bound went by) */
        for (int tries = 0; !fifo && tries < TEST_WAIT_S * 100; tries++) {
                DIR *dd = opendir(dir);
                ASSERT_TRUE(dd != NULL);
                while ((e = readdir(dd)))
                        if (atoi(e->d_name) > 0)
                                fifo |= sched_getscheduler(atoi(e->d_name)) == SCHED_FIFO;
                closedir(dd);
                if (!fifo)
                        usleep(10000);
        }
        ASSERT_TRUE(fifo);
        td_stop(&d);
}

/* A second tier (a backing file): its writer thread, which the tier
 * starts, holds no more than the other threads, and pages go through. */
static void tiered(void) {
        const size_t len = 8 << 20;
        uint64_t *h = malloc(len / ZSWAP_PAGE_SIZE * sizeof(uint64_t));
        char conf[128], backing[128], args[300];
        TestDaemon d;

        snprintf(conf, sizeof(conf), "/tmp/zswap-test-sandbox-%d.conf", (int)getpid());
        snprintf(backing, sizeof(backing), "/var/tmp/zswap-test-sandbox-%d.img", (int)getpid());
        unlink(backing);
        FILE *f = fopen(conf, "w");
        ASSERT_TRUE(f);
        fprintf(f, "[tier]\nbacking = %s\nsize = 16M\nkey = /tmp/zswap-test-tier.key\n", backing);
        fclose(f);
        snprintf(args, sizeof(args), "--config %s", conf);
        start(&d, args);
        unsigned base = check_threads(d.pid, 2, kept_caps(d.pid, true, false));
        fprintf(stderr, "with a second tier: %u threads sandboxed\n", base);
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, len, 10, h);
        client_cycle(c, buf, len, h);
        zswap_disconnect(c);
        check_threads(d.pid, 2, kept_caps(d.pid, true, false));
        td_stop(&d);
        unlink(conf);
        unlink(backing);
        munmap(buf, len);
        free(h);
}

/* The NBD server a second tier names is hostile too: its first bytes are
 * read by a daemon already sandboxed, as every later connection's. A
 * server of ours on a Unix socket takes the first connection, looks at
 * the daemon's main thread (the one that connects) through /proc while
 * the daemon waits for its greeting, and hangs up. The daemon starts
 * without the tier (its size is set) and tries again every second. */
static void nbd_first(void) {
        char conf[128], sock[108], args[300], line[128];
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int p[2];
        TestDaemon d;

        snprintf(conf, sizeof(conf), "/tmp/zswap-test-sandbox-nbd-%d.conf", (int)getpid());
        snprintf(sock, sizeof(sock), "/tmp/zswap-test-sandbox-nbd-%d.sock", (int)getpid());
        unlink(sock);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
        int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(l >= 0);
        ASSERT_OK(bind(l, (struct sockaddr *)&sa, sizeof(sa)));
        ASSERT_OK(listen(l, 4));
        ASSERT_OK(pipe2(p, O_CLOEXEC));
        pid_t server = fork();
        ASSERT_TRUE(server >= 0);
        if (server == 0) {
                struct ucred cr;
                socklen_t crl = sizeof(cr);
                char path[64], sc[32] = "?", cap[32] = "?";
                alarm(TEST_WAIT_S);
                int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0 || getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &crl) < 0)
                        _exit(1);
                snprintf(path, sizeof(path), "/proc/%d/status", (int)cr.pid);
                (void)td_status_field(path, "Seccomp", sc, sizeof(sc));
                (void)td_status_field(path, "CapEff", cap, sizeof(cap));
                dprintf(p[1], "%s %s\n", sc, cap);
                _exit(0); /* hangs up before its greeting */
        }
        close(l);
        close(p[1]);
        FILE *f = fopen(conf, "w");
        ASSERT_TRUE(f);
        fprintf(f, "[tier]\nbacking = nbd+unix:///x?socket=%s\nsize = 16M\nkey = /tmp/zswap-test-tier.key\n", sock);
        fclose(f);
        snprintf(args, sizeof(args), "--config %s", conf);
        start(&d, args);
        FILE *r = fdopen(p[0], "re");
        ASSERT_TRUE(r && fgets(line, sizeof(line), r));
        fclose(r);
        int st;
        ASSERT_EQ(waitpid(server, &st, 0), server);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        unsigned long long sc = 0, cap = 0;
        ASSERT_EQ(sscanf(line, "%llu %llx", &sc, &cap), 2);
        fprintf(stderr, "the NBD server's first connection came from a daemon with Seccomp %llu, CapEff %#llx\n",
                sc, cap);
        if (sc != 2 || cap != kept_caps(d.pid, true, false))
                test_fail("the daemon connected to its NBD server before its sandbox");
        ASSERT_TRUE(log_has("starting without it"));
        check_threads(d.pid, 2, kept_caps(d.pid, true, false));
        td_stop(&d);
        unlink(conf);
        unlink(sock);
}

/* --no-mlock: nothing locked, so no CAP_IPC_LOCK; --no-sandbox: nothing
 * dropped, no filter. Both still serve. */
static void switched_off(void) {
        const size_t len = 8 << 20;
        uint64_t *h = malloc(len / ZSWAP_PAGE_SIZE * sizeof(uint64_t));
        char path[64];
        TestDaemon d;

        start(&d, "--no-mlock");
        snprintf(path, sizeof(path), "/proc/%d/status", (int)d.pid);
        ASSERT_EQ(status_num(path, "VmLck", 10), 0);
        check_threads(d.pid, 2, kept_caps(d.pid, false, false));
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, len, 8, h);
        client_cycle(c, buf, len, h);
        zswap_disconnect(c);
        td_stop(&d);

        start(&d, "--no-sandbox");
        snprintf(path, sizeof(path), "/proc/%d/status", (int)d.pid);
        ASSERT_TRUE(status_num(path, "VmLck", 10) > 0);
        check_threads(d.pid, 0, status_num("/proc/self/status", "CapEff", 16));
        c = td_connect(&d);
        munmap(buf, len);
        buf = td_region(c, len, 9, h);
        client_cycle(c, buf, len, h);
        zswap_disconnect(c);
        td_stop(&d);
        munmap(buf, len);
        free(h);
}

int main(void) {
        test_require_root();
        if (status_num("/proc/self/status", "Seccomp", 10) != 0)
                test_skip("the test itself runs under a seccomp filter");
        if (!(status_num("/proc/self/status", "CapEff", 16) & CAPBIT(CAP_SYS_PTRACE)))
                test_skip("needs CAP_SYS_PTRACE");
        snprintf(log_path, sizeof(log_path), "/tmp/zswapd-test-sandbox-%d.log", (int)getpid());
        unlink(log_path);
        sandboxed();
        realtime();
        tiered();
        nbd_first();
        switched_off();
        unlink(log_path);
        return 0;
}
