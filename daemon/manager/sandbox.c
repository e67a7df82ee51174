/*
 * sandbox.c: what the daemon may still do once it serves clients.
 *
 * The daemon starts as root because it must: it reads other processes'
 * memory (/proc/PID/mem), their page tables (/proc/PID/pagemap) and
 * their mappings, and asks for UFFD_FEATURE_EVENT_FORK, which the kernel
 * grants to CAP_SYS_PTRACE only. Everything that needs more than that
 * (binding the socket, chmod, the feature probe, raising RLIMIT_NOFILE)
 * is done by then; manager_new() calls us after it and before the first
 * thread exists, so every thread inherits the result (capabilities are per
 * thread; the filter is synchronised to all threads anyway, TSYNC).
 *
 * Memory. mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT): a page of ours
 * is never reclaimed once touched, so no fault thread ever waits on the
 * kernel's swap while a client waits on it; ONFAULT keeps the pool's
 * 64 GiB MAP_NORESERVE reservation (and a sanitizer's shadow) from being
 * populated: RSS stays what is used, VmLck counts what is mapped. Locked
 * memory can only be freed with MADV_DONTNEED_LOCKED (pool.c). Mapping
 * more under MCL_FUTURE needs RLIMIT_MEMLOCK room or CAP_IPC_LOCK; the
 * limit is raised to infinity where we may (CAP_SYS_RESOURCE, or a unit's
 * LimitMEMLOCK=infinity), and CAP_IPC_LOCK is kept only if it is not.
 *
 * Capabilities. Kept: CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH and CAP_KILL
 * always, CAP_IPC_LOCK as above,
 * CAP_SYS_NICE only for SCHED_FIFO fault threads or workers below nice 0.
 * Everything else leaves the effective, permitted, inheritable, ambient
 * and bounding sets, and PR_SET_NO_NEW_PRIVS is set. The uid stays 0: the
 * files the daemon still opens (/dev/userfaultfd 0600, its socket's
 * directory) are root's, and without CAP_DAC_OVERRIDE or CAP_FOWNER being
 * root only means owning them. What root could still write is closed by
 * the filter: no file is opened for writing.
 *
 * The filter. An allowlist (docs/security.md has the reasons), arguments
 * checked where that is cheap and means something: socket() AF_UNIX only;
 * ioctl() the userfaultfd, PAGEMAP_SCAN and isatty requests; open() and
 * openat() read-only, never creating or truncating; unlinkat() only in
 * the socket's directory; clone() threads only (clone3 says ENOSYS so
 * glibc falls back to clone, whose flags we can see); no writable and
 * executable mapping; tgkill() our own threads; prctl() and fcntl() a few
 * commands; prlimit64() reads. Anything else raises SIGSYS (SCMP_ACT_TRAP):
 * the handler writes one line naming the call with write(2) alone, and
 * makes the call return -EPERM by setting the return register in the
 * interrupted context, so the daemon goes on. ThreadSanitizer counts SIGSYS
 * as synchronous and runs the handler at once with the real context.
 * Only the native architecture is allowed; a call of another ABI
 * (int 0x80, x32) is refused the same way.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/audit.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <termios.h>
#include <ucontext.h>
#include <unistd.h>

#include "log.h"
#include "macro.h"
#include "sandbox.h"
#include "uffd-compat.h"

#ifndef MCL_ONFAULT
#define MCL_ONFAULT 4
#endif
#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#endif

#define NAMES_MAX 512     /* native syscall numbers we can name in the log */
#define LOG_REFUSALS 100  /* then one line saying the rest go unlogged */
#define CAPS_KEPT_MAX 5

static bool memory_locked;
static bool filtered; /* the system call filter is in force */
static int uffd_dev = -1;       /* /dev/userfaultfd, opened before the filter */
static int sock_dir = -1;       /* the socket's directory (O_PATH) */
static bool tier_inet; /* SandboxConfig's, for the filter */
static char sock_name[108];     /* and its name in there */
static char sock_path[108];
static const char *names[NAMES_MAX]; /* syscall names, resolved before the filter */
static uint32_t native_arch;   /* AUDIT_ARCH_* of the filter, for the handler */
static _Atomic unsigned refusals;

/* ---- memory ---- */

int sandbox_lock_memory(void) {
        struct rlimit rl, inf = { RLIM_INFINITY, RLIM_INFINITY };

        /* MCL_FUTURE charges every later mapping to RLIMIT_MEMLOCK (the
         * pool reservation alone is 64 GiB): infinity if we may, else the
         * hard limit, and CAP_IPC_LOCK covers the rest (sandbox_enter) */
        if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && setrlimit(RLIMIT_MEMLOCK, &inf) < 0) {
                rl.rlim_cur = rl.rlim_max;
                (void)setrlimit(RLIMIT_MEMLOCK, &rl);
        }
        /* the raw call: the sanitizer runtimes intercept mlockall() and
         * ignore it (locking their shadow without ONFAULT would populate
         * terabytes); with ONFAULT their builds can lock like ours */
        if (syscall(SYS_mlockall, MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) < 0) {
                int r = negative_errno();
                log_warn("cannot lock the daemon's memory (mlockall): %s; its pages may be swapped", strerror(-r));
                return r;
        }
        memory_locked = true;
        log_info("memory locked as it is touched (mlockall on fault)");
        return 0;
}

/* ---- capabilities ---- */

static bool memlock_unlimited(void) {
        struct rlimit rl;
        return getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur == RLIM_INFINITY;
}

/* The capabilities we keep, among those we hold: n of them into keep[]. */
static size_t caps_wanted(const SandboxConfig *cfg, cap_value_t keep[CAPS_KEPT_MAX]) {
        cap_value_t want[CAPS_KEPT_MAX];
        size_t nwant = 0, n = 0;
        cap_t cur = cap_get_proc();

        want[nwant++] = CAP_SYS_PTRACE;      /* clients' memory, pagemap, maps; EVENT_FORK */
        want[nwant++] = CAP_DAC_READ_SEARCH; /* another user's /proc/PID/pagemap is 0400, theirs */
        want[nwant++] = CAP_KILL;            /* SIGKILL or SIGBUS to another user's client (its pidfd) */
        if (memory_locked && !memlock_unlimited())
                want[nwant++] = CAP_IPC_LOCK; /* mappings made later are locked too */
        if (cfg->realtime)
                want[nwant++] = CAP_SYS_NICE; /* SCHED_FIFO, negative nice */
        for (size_t i = 0; i < nwant; i++) {
                cap_flag_value_t v = CAP_CLEAR;
                if (cur && cap_get_flag(cur, want[i], CAP_PERMITTED, &v) == 0 && v == CAP_SET)
                        keep[n++] = want[i];
                else {
                        char *name = cap_to_name(want[i]);
                        log_warn("sandbox: %s is not held: %s", name ? name : "?",
                                 want[i] == CAP_SYS_PTRACE ? "clients of other users cannot be served"
                                                           : "it cannot be kept");
                        cap_free(name);
                }
        }
        cap_free(cur);
        return n;
}

static bool kept(const cap_value_t *keep, size_t n, cap_value_t v) {
        for (size_t i = 0; i < n; i++)
                if (keep[i] == v)
                        return true;
        return false;
}

static bool have_cap(cap_value_t v) {
        cap_t cur = cap_get_proc();
        cap_flag_value_t f = CAP_CLEAR;
        if (cur)
                cap_get_flag(cur, v, CAP_EFFECTIVE, &f);
        cap_free(cur);
        return f == CAP_SET;
}

/* Shrink the bounding set to keep[]; false if it stays larger. */
static bool bound_drop(const cap_value_t *keep, size_t n) {
        bool can = have_cap(CAP_SETPCAP), ok = true;

        for (cap_value_t v = 0; v < cap_max_bits(); v++)
                if (!kept(keep, n, v) && cap_get_bound(v) == 1 && (!can || cap_drop_bound(v) < 0))
                        ok = false;
        return ok;
}

static int caps_drop(const cap_value_t *keep, size_t n, bool *bound_ok) {
        cap_t c;
        int r = 0;

        /* the bounding set first: that needs CAP_SETPCAP, which goes next.
         * With no_new_privs and no execve it guards nothing more, so a
         * daemon started without CAP_SETPCAP (a unit's narrower
         * CapabilityBoundingSet=) keeps the bounding set it was given */
        *bound_ok = bound_drop(keep, n);
        c = cap_init(); /* all clear */
        if (!c)
                return -ENOMEM;
        if ((n && (cap_set_flag(c, CAP_PERMITTED, (int)n, keep, CAP_SET) < 0 ||
                   cap_set_flag(c, CAP_EFFECTIVE, (int)n, keep, CAP_SET) < 0)) ||
            cap_set_proc(c) < 0)
                r = negative_errno();
        cap_free(c);
        if (r == 0 && CAP_AMBIENT_SUPPORTED() && cap_reset_ambient() < 0)
                r = negative_errno();
        return r;
}

/* ---- the refusal handler ---- */

static char *fmt_str(char *p, char *end, const char *s) {
        while (*s && p < end)
                *p++ = *s++;
        return p;
}

static char *fmt_num(char *p, char *end, unsigned long long v, unsigned base) {
        char tmp[24];
        int n = 0;

        do
                tmp[n++] = "0123456789abcdef"[v % base];
        while ((v /= base) && n < (int)sizeof(tmp));
        while (n > 0 && p < end)
                *p++ = tmp[--n];
        return p;
}

#if defined(__x86_64__)
#define SANDBOX_TRAP 1
#define UC_RETURN(uc) ((uc)->uc_mcontext.gregs[REG_RAX])
#elif defined(__aarch64__)
#define SANDBOX_TRAP 1
#define UC_RETURN(uc) ((uc)->uc_mcontext.regs[0])
#else
#define SANDBOX_TRAP 0 /* no known return register: refusals are EPERM, unlogged */
#endif

/*
 * SIGSYS from the filter: async-signal-safe calls only (write, gettid), no
 * locks, no allocation. The kernel skipped the call; the value in the
 * return register is what the caller sees.
 */
static void on_sigsys(int sig, siginfo_t *si, void *ctx) {
        int saved_errno = errno;
        unsigned n = atomic_fetch_add_explicit(&refusals, 1, memory_order_relaxed);
        char buf[256], *p = buf, *end = buf + sizeof(buf) - 1;

        if (n < LOG_REFUSALS) {
                int nr = si->si_syscall;
                p = fmt_str(p, end, "<4>zswapd: sandbox: refused system call ");
                if (si->si_arch == native_arch && nr >= 0 && nr < NAMES_MAX && names[nr])
                        p = fmt_str(p, end, names[nr]);
                else
                        p = fmt_str(p, end, "?");
                p = fmt_str(p, end, " (");
                p = fmt_num(p, end, (unsigned)nr, 10);
                if (si->si_arch != native_arch) {
                        p = fmt_str(p, end, ", foreign arch 0x");
                        p = fmt_num(p, end, si->si_arch, 16);
                }
                p = fmt_str(p, end, ") in thread ");
                p = fmt_num(p, end, (unsigned long long)syscall(SYS_gettid), 10);
                p = fmt_str(p, end, ": EPERM");
        } else if (n == LOG_REFUSALS)
                p = fmt_str(p, end, "<4>zswapd: sandbox: more system calls refused; not logging them any more");
        if (p != buf) {
                *p++ = '\n';
                (void)!write(STDERR_FILENO, buf, (size_t)(p - buf));
        }
#if SANDBOX_TRAP
        UC_RETURN((ucontext_t *)ctx) = -EPERM;
#endif
        errno = saved_errno;
}

/* ---- the filter ---- */

static int rule(scmp_filter_ctx f, uint32_t action, const char *name, unsigned n, const struct scmp_arg_cmp *a) {
        int nr = seccomp_syscall_resolve_name(name);
        if (nr == __NR_SCMP_ERROR)
                return 0; /* not a call of this architecture */
        int r = seccomp_rule_add_array(f, action, nr, n, a);
        if (r < 0)
                log_error("sandbox: rule for %s: %s", name, strerror(-r));
        return r;
}

static int allow(scmp_filter_ctx f, const char *name) {
        return rule(f, SCMP_ACT_ALLOW, name, 0, NULL);
}

static int allow1(scmp_filter_ctx f, const char *name, struct scmp_arg_cmp a) {
        return rule(f, SCMP_ACT_ALLOW, name, 1, &a);
}

/*
 * Calls allowed with any arguments. Each group says who makes them; the
 * sanitizer runtimes (ASan, TSan) need nothing beyond glibc's set at run
 * time (checked by running every test with the sandbox on).
 */
static const char *const plain[] = {
        /* I/O on fds the daemon holds: sockets, eventfds, pagemap, uffds */
        "read", "write", "readv", "writev", "pread64", "close", "lseek",
        "fstat", "newfstatat", "statx", "fstatfs", "readlink", "readlinkat",
        "dup", "getdents64",
        /* memory: malloc, thread stacks, the pool (mmap, mprotect: below) */
        "munmap", "brk", "madvise", "mremap", "mincore",
        /* threads and their scheduling (fault.c pins, evict.c renices) */
        "futex", "set_robust_list", "get_robust_list", "rseq", "sched_yield",
        "sched_getaffinity", "sched_setaffinity", "sched_setscheduler", "sched_getscheduler",
        "sched_getparam", "sched_get_priority_max", "sched_get_priority_min",
        "setpriority", "getpriority", "getcpu", "exit", "exit_group",
        "gettid", "getpid", "getppid", "getuid", "geteuid", "getgid", "getegid",
        "getresuid", "getresgid", "getgroups",
        /* a thread dropping what it holds (nbd.c's name lookup): capset
         * can only lower a thread's capabilities to within its
         * permitted set, which is already what the daemon keeps */
        "capset",
        /* signals: signalfd's mask, abort(), sanitizer handlers */
        "rt_sigprocmask", "rt_sigaction", "rt_sigreturn", "sigaltstack", "restart_syscall",
        /* time */
        "nanosleep", "clock_nanosleep", "clock_gettime", "clock_getres", "gettimeofday",
        "getrandom",
        /* event loops */
        "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll",
        "eventfd2", "timerfd_create", "timerfd_settime", "timerfd_gettime", "signalfd4",
        /* Unix sockets (socket() itself: below) */
        "connect", "accept4", "sendmsg", "recvmsg", "sendto", "recvfrom", "getsockopt",
        "setsockopt", "getsockname", "getpeername", "shutdown",
        /* client processes: pidfd_open() where SO_PEERPIDFD is missing
         * (their memory is read through /proc/PID/mem, pread64) */
        "pidfd_open",
        /* the clients' stores (store.c): a memfd each, sized and sealed
         * once, chmod 0600, freed chunks punched out */
        "memfd_create", "ftruncate", "fchmod", "fallocate",
        /* sysconf(), the configuration's "10%" of RAM */
        "sysinfo", "uname",
};

static int ioctl_rules(scmp_filter_ctx f) {
        static const unsigned long reqs[] = {
                UFFDIO_API, UFFDIO_REGISTER, UFFDIO_UNREGISTER, UFFDIO_WAKE, UFFDIO_COPY,
                UFFDIO_ZEROPAGE, UFFDIO_WRITEPROTECT, UFFDIO_MOVE, USERFAULTFD_IOC_NEW,
                UFFDIO_POISON, PAGEMAP_SCAN, PROCMAP_QUERY, TCGETS, TIOCGWINSZ,
        };
        int r = 0;
        /* the kernel takes the request as an unsigned int: compare 32 bits */
        for (size_t i = 0; i < ELEMENTSOF(reqs) && r == 0; i++)
                r = allow1(f, "ioctl", SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, reqs[i]));
        return r;
}

static int arg_rules(scmp_filter_ctx f) {
        static const int prctls[] = { PR_SET_NAME, PR_GET_NAME, PR_GET_DUMPABLE, PR_SET_VMA, PR_GET_NO_NEW_PRIVS };
        static const int fcntls[] = { F_DUPFD, F_DUPFD_CLOEXEC, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_GET_SEALS,
                                      F_ADD_SEALS };
        const uint64_t ro_mask = O_ACCMODE | O_CREAT | O_TRUNC;
        int r = 0;

        /* read-only opens: /proc/PID/{pagemap,maps,status}, /proc/meminfo,
         * PSI, the configuration file; never create, truncate or write */
        r = r ?: allow1(f, "openat", SCMP_A2(SCMP_CMP_MASKED_EQ, ro_mask, O_RDONLY));
        r = r ?: allow1(f, "open", SCMP_A1(SCMP_CMP_MASKED_EQ, ro_mask, O_RDONLY));
        /* no memory both writable and executable (dlopen of an NSS module
         * still works: it maps r-x) */
        r = r ?: allow1(f, "mmap", SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
        r = r ?: allow1(f, "mmap", SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_WRITE, 0));
        r = r ?: allow1(f, "mprotect", SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
        r = r ?: allow1(f, "mprotect", SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_WRITE, 0));
        /* threads, never processes; clone3's flags sit in memory the filter
         * cannot read, so glibc is told it does not exist and uses clone */
        r = r ?: allow1(f, "clone", SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD));
        r = r ?: rule(f, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL);
        r = r ?: allow1(f, "socket", SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
        /* reads of a client's memory (memread.c) and the second tier's
         * reads and writes (tier.c) go through io_uring; a client whose
         * memory a read waits on is killed, and a page lost on the tier
         * whose uffd cannot be poisoned is a SIGBUS to its client, both
         * through the pidfd the daemon holds */
        r = r ?: allow(f, "io_uring_setup");
        r = r ?: allow(f, "io_uring_enter");
        r = r ?: allow(f, "io_uring_register");
        r = r ?: allow(f, "pidfd_send_signal");
        /* an NBD export over TCP is reconnected to, its host name looked
         * up again each time: glibc's resolver sends the A and AAAA
         * queries together with sendmmsg() (res_send.c) */
        if (tier_inet) {
                r = r ?: allow1(f, "socket", SCMP_A0(SCMP_CMP_EQ, AF_INET));
                r = r ?: allow1(f, "socket", SCMP_A0(SCMP_CMP_EQ, AF_INET6));
                r = r ?: allow(f, "sendmmsg");
                /* the resolver sizes each answer before it reads it */
                r = r ?: allow1(f, "ioctl", SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, FIONREAD));
        }
        r = r ?: allow1(f, "tgkill", SCMP_A0(SCMP_CMP_EQ, (uint64_t)getpid()));
        r = r ?: allow1(f, "prlimit64", SCMP_A2(SCMP_CMP_EQ, 0)); /* getrlimit() */
        if (sock_dir >= 0)
                r = r ?: allow1(f, "unlinkat", SCMP_A0(SCMP_CMP_EQ, (uint64_t)sock_dir));
        for (size_t i = 0; i < ELEMENTSOF(prctls) && r == 0; i++)
                r = allow1(f, "prctl", SCMP_A0(SCMP_CMP_EQ, (uint64_t)prctls[i]));
        for (size_t i = 0; i < ELEMENTSOF(fcntls) && r == 0; i++)
                r = allow1(f, "fcntl", SCMP_A1(SCMP_CMP_EQ, (uint64_t)fcntls[i]));
        return r ?: ioctl_rules(f);
}

static int filter_load(unsigned *nsyscalls) {
        scmp_filter_ctx f = seccomp_init(SANDBOX_TRAP ? SCMP_ACT_TRAP : SCMP_ACT_ERRNO(EPERM));
        int r;

        if (!f)
                return -ENOMEM;
        /* every thread, should one exist; refuse foreign ABIs as we refuse
         * anything else; a binary tree: the fault path's ioctl() is not
         * last in a list of a hundred */
        r = seccomp_attr_set(f, SCMP_FLTATR_CTL_TSYNC, 1);
        r = r ?: seccomp_attr_set(f, SCMP_FLTATR_ACT_BADARCH, SANDBOX_TRAP ? SCMP_ACT_TRAP : SCMP_ACT_ERRNO(EPERM));
        if (r == 0 && seccomp_attr_set(f, SCMP_FLTATR_CTL_OPTIMIZE, 2) < 0)
                log_debug("sandbox: libseccomp cannot build a binary tree; a linear filter it is");
        for (size_t i = 0; i < ELEMENTSOF(plain) && r == 0; i++)
                r = allow(f, plain[i]);
        r = r ?: arg_rules(f);
        r = r ?: seccomp_load(f);
        *nsyscalls = ELEMENTSOF(plain) + 11 + 4 + (sock_dir >= 0); /* + those arg_rules() allows */
        seccomp_release(f);
        return r;
}

static void names_resolve(void) {
        native_arch = seccomp_arch_native();
        for (int nr = 0; nr < NAMES_MAX; nr++)
                if (!names[nr])
                        names[nr] = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
}

/* Keep what later steps need: the device and the socket's directory. */
static void open_keepers(const SandboxConfig *cfg) {
        uffd_dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
        if (uffd_dev < 0)
                log_warn("sandbox: /dev/userfaultfd: %m; clients will be refused");
        if (!cfg->socket_path || strlen(cfg->socket_path) >= sizeof(sock_path))
                return;
        char dir[sizeof(sock_path)];
        snprintf(dir, sizeof(dir), "%s", cfg->socket_path);
        char *slash = strrchr(dir, '/');
        const char *name = slash ? slash + 1 : dir;
        if (!*name)
                return;
        snprintf(sock_name, sizeof(sock_name), "%s", name);
        if (slash == dir)
                dir[1] = 0;
        else if (slash)
                *slash = 0;
        sock_dir = open(slash ? dir : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        snprintf(sock_path, sizeof(sock_path), "%s", cfg->socket_path);
}

static void log_kept(const cap_value_t *keep, size_t n, bool bound_ok, unsigned nsyscalls) {
        char list[128] = "";
        size_t len = 0;

        for (size_t i = 0; i < n; i++) {
                char *name = cap_to_name(keep[i]);
                len += (size_t)snprintf(list + len, sizeof(list) - MIN(len, sizeof(list)), "%s%s", i ? " " : "",
                                        name ? name : "?");
                cap_free(name);
                len = MIN(len, sizeof(list) - 1);
        }
        log_info("sandbox: capabilities kept: %s (all others dropped%s); "
                 "%u system calls allowed, any other is refused with EPERM and logged",
                 n ? list : "none", bound_ok ? ", bounding set too" : "; bounding set as given, no CAP_SETPCAP",
                 nsyscalls);
}

int sandbox_enter(const SandboxConfig *cfg) {
        struct sigaction sa = { .sa_sigaction = on_sigsys, .sa_flags = SA_SIGINFO | SA_NODEFER };
        cap_value_t keep[CAPS_KEPT_MAX];
        unsigned nsyscalls = 0;
        bool bound_ok = false;
        int r;

        open_keepers(cfg);
        names_resolve();
        tier_inet = cfg->tier_inet;
        size_t n = caps_wanted(cfg, keep);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
                r = negative_errno();
                log_error("sandbox: PR_SET_NO_NEW_PRIVS: %s", strerror(-r));
                return r;
        }
        r = caps_drop(keep, n, &bound_ok);
        if (r < 0) {
                log_error("sandbox: cannot drop capabilities: %s", strerror(-r));
                return r;
        }
        sigemptyset(&sa.sa_mask);
        if (SANDBOX_TRAP && sigaction(SIGSYS, &sa, NULL) < 0) {
                r = negative_errno();
                log_error("sandbox: SIGSYS handler: %s", strerror(-r));
                return r;
        }
        r = filter_load(&nsyscalls);
        if (r < 0) {
                log_error("sandbox: cannot install the system call filter: %s", strerror(-r));
                return r;
        }
        log_kept(keep, n, bound_ok, nsyscalls);
        filtered = true;
        return 0;
}

#if defined(__SANITIZE_ADDRESS__)
/*
 * LeakSanitizer's check at exit stops the world with a tracer task (a
 * clone without CLONE_THREAD, then ptrace): calls the allowlist refuses,
 * from a task that blocks every signal, so SIGSYS could only kill the
 * daemon at its very end. A sandboxed daemon is therefore not leak-checked
 * (LSan asks this hook); run it with --no-sandbox to check for leaks.
 */
__attribute__((visibility("default"))) int __lsan_is_turned_off(void);
__attribute__((visibility("default"))) int __lsan_is_turned_off(void) {
        return filtered;
}
#endif

int sandbox_open_uffd_dev(void) {
        if (uffd_dev < 0) {
                int fd = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
                return fd < 0 ? negative_errno() : fd;
        }
        int fd = fcntl(uffd_dev, F_DUPFD_CLOEXEC, 3);
        return fd < 0 ? negative_errno() : fd;
}

int sandbox_unlink(const char *path) {
        if (sock_dir >= 0 && strcmp(path, sock_path) == 0)
                return unlinkat(sock_dir, sock_name, 0) < 0 ? negative_errno() : 0;
        return unlink(path) < 0 ? negative_errno() : 0;
}
