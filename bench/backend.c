/*
 * backend.c: the stores the benchmarks compare, behind one interface
 * (backend.h).
 *
 * A Backend is what was set up: a zswapd daemon of our own, or kernel swap
 * (zram.c, kzswap.c) plus the benchmarks' lock. A BackendClient is one
 * process's way in: a libzswap connection for zswapd, for the kernel kinds
 * only a mincore() vector, since the kernel needs no handle. The two are
 * kept apart because benches fork workers, and a child must make its own
 * connection while the Backend stays with the process that set it up.
 *
 * Kernel swap: the lock is taken first and held until teardown; the lock
 * file holds its owner's pid so that a bench kept waiting can say whose run
 * it waits for. Changing the machine (set-up after the lock, teardown) runs
 * with SIGINT, SIGTERM and SIGHUP blocked: a ^C then cannot cut a swapoff or
 * an mkswap short, and the bench sees its flag set once we are done.
 *
 * zswapd: the daemon is forked from the thread that calls backend_setup(),
 * in a process group of its own (so a ^C at the terminal reaches the bench
 * only; the bench still needs the daemon to put pages back when it
 * disconnects) and with PR_SET_PDEATHSIG (so it never outlives us).
 * Readiness is a successful zswap_connect(): the socket accepting is not
 * enough, the daemon must also hand out a userfaultfd. Memory figures come
 * from a short-lived connection of their own, so they can be read from any
 * process and no idle connection of ours takes part in every fork.
 *
 * Not thread-safe per object: one thread sets up, asks for figures and
 * tears down; clients follow libzswap's rules (any thread).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "kswap.h"
#include "kzswap.h"
#include "zram.h"
#include "zswap.h"

#define PAGEOUT_MAX_CALLS 8        /* MADV_PAGEOUT repeats while it makes progress */
#define DAEMON_START_MS 10000      /* noisy machine: allow a slow start */
#define DAEMON_STOP_MS 5000        /* then SIGKILL */
#define KZSWAP_MAX_POOL_PERCENT 50 /* the whole data set must fit in the pool */

struct Backend {
        BackendKind kind;
        char name[32];
        char describe[1024];
        int lock_fd;       /* kernel kinds: holds BACKEND_LOCK_FILE; -1: not locked */
        Zram *zram;
        KZswap *kzswap;
        pid_t pid;         /* zswapd; 0: none running */
        bool keep_log;
        char sock[108];
        char log[108];
};

struct BackendClient {
        Backend *b;
        struct zswap_client *zc; /* zswapd */
        unsigned char *vec;      /* kernel: mincore() vector */
        size_t vec_pages;
};

static char last_log[108];

/* Headroom for swap slots: metadata, and pages still in the swap cache from the pass before. */
static uint64_t swap_size(uint64_t data) {
        return ALIGN_TO(data + data / 4 + (64ULL << 20), (uint64_t)ZSWAP_PAGE_SIZE);
}

/* Sleep ms, but give up with -EINTR when a caught signal arrives. */
static int sleep_interruptible(long ms) {
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

        return nanosleep(&ts, NULL) < 0 ? -errno : 0;
}

/* ---- the lock ---- */

static int backend_lock(Backend *b) {
        _cleanup_close_ int fd = -1;
        char holder[32] = "";
        char pid[24];

        fd = open(BACKEND_LOCK_FILE, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return -errno;
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                if (errno != EWOULDBLOCK)
                        return -errno;
                if (pread(fd, holder, sizeof(holder) - 1, 0) > 0)
                        holder[strcspn(holder, "\n")] = 0;
                fprintf(stderr, "backend: waiting for %s (held by pid %s)\n", BACKEND_LOCK_FILE,
                        holder[0] ? holder : "?");
                if (flock(fd, LOCK_EX) < 0)
                        return -errno; /* EINTR: the bench was asked to stop */
        }
        /* Ours from here: backend_unlock() may clear the pid. */
        b->lock_fd = TAKE_FD(fd);
        snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
        if (ftruncate(b->lock_fd, 0) < 0 || pwrite(b->lock_fd, pid, strlen(pid), 0) < 0)
                return -errno;
        return 0;
}

static void backend_unlock(Backend *b) {
        if (b->lock_fd < 0)
                return;
        /* Gone before unlocking: a waiter that wakes reads no stale pid. */
        (void)!ftruncate(b->lock_fd, 0);
        b->lock_fd = safe_close(b->lock_fd);
}

/* ---- kernel kinds ---- */

static int zram_setup(Backend *b, const BackendConfig *c, const char *algo) {
        uint64_t disksize = swap_size(c->size_bytes);
        int r;

        if (access("/sys/class/zram-control/hot_add", R_OK) < 0)
                return -ENODEV;
        r = zram_new("/sys", "/proc", algo, disksize, &b->zram);
        if (r < 0)
                return r;
        snprintf(b->describe, sizeof(b->describe),
                 "%s, %s, disksize %" PRIu64 " MiB, swap priority %d, page-cluster %d -> 0 (no readahead)",
                 zram_device(b->zram), algo, disksize >> 20, KSWAP_PRIO, zram_saved_page_cluster(b->zram));
        return 0;
}

static int kzswap_setup(Backend *b, const BackendConfig *c, const char *algo) {
        KZswapSetup s = {
                .sysfs = "/sys",
                .procfs = "/proc",
                .swapfile = BACKEND_KZSWAP_SWAPFILE,
                .state = KZSWAP_STATE_FILE,
                .compressor = algo,
                .size = swap_size(c->size_bytes),
                .max_pool_percent = KZSWAP_MAX_POOL_PERCENT,
        };
        int r;

        if (access("/sys/module/zswap/parameters/enabled", W_OK) < 0)
                return -ENODEV;
        r = kzswap_new(&s, &b->kzswap);
        if (r < 0)
                return r;
        snprintf(b->describe, sizeof(b->describe), "%s", kzswap_describe(b->kzswap));
        return 0;
}

static int kernel_setup(Backend *b, const BackendConfig *c, const char *algo) {
        sigset_t old;
        int r;

        if (geteuid() != 0)
                return -EPERM;
        r = backend_lock(b);
        if (r < 0)
                return r;
        kswap_signals_block(&old);
        /* A killed kernel-zswap run may have left zswap enabled: it would sit in front of zram too. */
        r = kzswap_recover("/sys", "/proc", KZSWAP_STATE_FILE);
        if (r == 0)
                r = b->kind == BACKEND_ZRAM ? zram_setup(b, c, algo) : kzswap_setup(b, c, algo);
        kswap_signals_restore(&old);
        return r;
}

static int kernel_teardown(Backend *b) {
        int r = 0;

        if (b->zram) {
                r = zram_teardown(b->zram);
                b->zram = zram_free(b->zram);
        }
        if (b->kzswap) {
                r = kzswap_teardown(b->kzswap);
                b->kzswap = kzswap_free(b->kzswap);
        }
        backend_unlock(b);
        return r;
}

/* ---- zswapd ---- */

/*
 * zswap_connect() starts the library's agent thread, which inherits our
 * signal mask: block the signals the benches catch while it starts, so they
 * always land on the bench's own threads and never interrupt the agent.
 */
static int connect_blocked(const char *sock, struct zswap_client **ret) {
        sigset_t old;
        int r;

        kswap_signals_block(&old);
        r = zswap_connect(sock, ret);
        kswap_signals_restore(&old);
        return r;
}

static int zswapd_stats(const Backend *b, struct zswap_stats *ret) {
        struct zswap_client *zc;
        int r;

        r = connect_blocked(b->sock, &zc);
        if (r < 0)
                return r;
        r = zswap_get_stats(zc, ZSWAP_STATS_GLOBAL, ret);
        zswap_disconnect(zc);
        return r;
}

static char *zswapd_default_path(void) {
        _cleanup_free_ char *exe = realpath("/proc/self/exe", NULL);
        char *path;

        if (!exe)
                return NULL;
        if (asprintf(&path, "%s/../daemon/zswapd", dirname(exe)) < 0)
                return NULL;
        return path;
}

/* argv of the daemon, built before fork(): the child only executes. */
static char **zswapd_argv(const Backend *b, const char *path, const char *algo, const char *const *extra) {
        size_t n = 0, k = 0;
        char **argv;

        while (extra && extra[n])
                n++;
        argv = calloc(n + 8, sizeof(*argv));
        if (!argv)
                return NULL;
        argv[k++] = (char *)path;
        argv[k++] = "--socket";
        argv[k++] = (char *)b->sock;
        argv[k++] = "--foreground";
        argv[k++] = "--no-config"; /* the machine's /etc/zswapd/zswapd.conf must not change a measurement */
        argv[k++] = "--compressor";
        argv[k++] = (char *)algo;
        for (size_t i = 0; i < n; i++)
                argv[k++] = (char *)extra[i];
        return argv;
}

static _noreturn_ void zswapd_exec(const Backend *b, char **argv, pid_t parent) {
        sigset_t none;
        int fd;

        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
                _exit(1);
        /* What the bench blocked or ignored is not the daemon's business. */
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        fd = open(b->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
                dup2(fd, STDOUT_FILENO);
                dup2(fd, STDERR_FILENO);
        }
        execv(argv[0], argv);
        /* Only async-signal-safe calls here (see zswapd_setup()). */
        (void)!write(STDERR_FILENO, "backend: cannot execute ", 24);
        (void)!write(STDERR_FILENO, argv[0], strlen(argv[0]));
        (void)!write(STDERR_FILENO, "\n", 1);
        _exit(127);
}

static int zswapd_wait_ready(Backend *b) {
        for (int i = 0; i < DAEMON_START_MS / 10; i++) {
                struct zswap_client *zc;
                int status, r;

                if (connect_blocked(b->sock, &zc) == 0) {
                        zswap_disconnect(zc);
                        return 0;
                }
                if (waitpid(b->pid, &status, WNOHANG) == b->pid) {
                        b->pid = 0;
                        return -ECHILD;
                }
                r = sleep_interruptible(10);
                if (r < 0)
                        return r;
        }
        return -ETIMEDOUT;
}

static void zswapd_describe(Backend *b, char *const *argv) {
        size_t n;

        n = (size_t)snprintf(b->describe, sizeof(b->describe), "pid %d:", (int)b->pid);
        for (size_t i = 0; argv[i] && n < sizeof(b->describe); i++)
                n += (size_t)snprintf(b->describe + n, sizeof(b->describe) - n, " %s", argv[i]);
}

static int zswapd_setup(Backend *b, const BackendConfig *c, const char *algo) {
        static unsigned seq;
        _cleanup_free_ char *path = NULL;
        _cleanup_free_ char **argv = NULL;
        pid_t parent = getpid();
        int r;

        path = c->zswapd_path ? strdup(c->zswapd_path) : zswapd_default_path();
        if (!path)
                return -ENOMEM;
        if (access(path, X_OK) < 0)
                return -errno;
        seq++;
        snprintf(b->sock, sizeof(b->sock), "/tmp/zswapd-bench-%d-%u.sock", (int)parent, seq);
        snprintf(b->log, sizeof(b->log), "/tmp/zswapd-bench-%d-%u.log", (int)parent, seq);
        snprintf(last_log, sizeof(last_log), "%s", b->log);
        argv = zswapd_argv(b, path, algo, c->zswapd_args);
        if (!argv)
                return -ENOMEM;
        unlink(b->sock);
        /*
         * _Fork(), not fork(): fork() would run libzswap's atfork handlers,
         * which pause eviction for every client this process has and
         * reconnect each one in the child, all for a child that only execs.
         */
        b->pid = _Fork();
        if (b->pid < 0) {
                b->pid = 0;
                return -errno;
        }
        if (b->pid == 0)
                zswapd_exec(b, argv, parent);
        zswapd_describe(b, argv);
        r = zswapd_wait_ready(b);
        if (r < 0)
                b->keep_log = true;
        return r;
}

/* Reap pid within ms milliseconds; false if it is still running. */
static bool reap_within(pid_t pid, int *status, int ms) {
        for (int i = 0; i < ms / 10; i++) {
                pid_t r = waitpid(pid, status, WNOHANG);

                if (r == pid || (r < 0 && errno != EINTR))
                        return true;
                kswap_sleep_ms(10);
        }
        return false;
}

/* 0 if the daemon ended as asked (SIGTERM or exit 0), else -EIO. */
static int zswapd_stop(Backend *b) {
        int status = 0;
        bool clean;

        if (b->pid > 0) {
                kill(b->pid, SIGTERM);
                if (!reap_within(b->pid, &status, DAEMON_STOP_MS)) {
                        kill(b->pid, SIGKILL);
                        while (waitpid(b->pid, &status, 0) < 0 && errno == EINTR)
                                ;
                }
                b->pid = 0;
                clean = (WIFEXITED(status) && WEXITSTATUS(status) == 0) ||
                        (WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
                if (!clean) {
                        b->keep_log = true;
                        return -EIO;
                }
        }
        return 0;
}

/* utime + stime of pid from /proc/PID/stat, in seconds. */
static double proc_cpu_s(pid_t pid) {
        char path[64], buf[1024], *p;
        unsigned long long utime, stime;
        _cleanup_close_ int fd = -1;
        ssize_t k;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return NAN;
        k = read(fd, buf, sizeof(buf) - 1);
        if (k <= 0)
                return NAN;
        buf[k] = 0;
        /* comm may hold spaces and parens; the fields start after the last ')'. */
        p = strrchr(buf, ')');
        if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
                return NAN;
        return (double)(utime + stime) / sysconf(_SC_CLK_TCK);
}

/* ---- set-up and teardown ---- */

static const char *default_compressor(BackendKind kind) {
        return kind == BACKEND_KZSWAP ? "lzo" : "lz4";
}

int backend_setup(const BackendConfig *c, Backend **ret) {
        static const char *const prefix[] = { [BACKEND_ZSWAPD] = "zswapd", [BACKEND_ZRAM] = "zram",
                                              [BACKEND_KZSWAP] = "zswap" };
        const char *algo;
        Backend *b;
        int r;

        if (!c || (unsigned)c->kind > BACKEND_KZSWAP || !ret)
                return -EINVAL;
        algo = c->compressor ?: default_compressor(c->kind);
        b = calloc(1, sizeof(*b));
        if (!b)
                return -ENOMEM;
        b->kind = c->kind;
        b->lock_fd = -1;
        snprintf(b->name, sizeof(b->name), "%s-%s", prefix[c->kind], algo);
        r = c->kind == BACKEND_ZSWAPD ? zswapd_setup(b, c, algo) : kernel_setup(b, c, algo);
        if (r < 0) {
                backend_teardown(b);
                return r;
        }
        *ret = b;
        return 0;
}

int backend_teardown(Backend *b) {
        sigset_t old;
        int r;

        if (!b)
                return 0;
        kswap_signals_block(&old);
        if (b->kind == BACKEND_ZSWAPD) {
                r = zswapd_stop(b);
                if (b->sock[0])
                        unlink(b->sock);
                if (b->log[0] && !b->keep_log)
                        unlink(b->log);
        } else {
                r = kernel_teardown(b);
        }
        free(b);
        kswap_signals_restore(&old);
        return r;
}

const char *backend_name(const Backend *b) {
        return b->name;
}

const char *backend_describe(const Backend *b) {
        return b->describe;
}

pid_t backend_daemon_pid(const Backend *b) {
        return b->kind == BACKEND_ZSWAPD ? b->pid : 0;
}

const char *backend_socket(const Backend *b) {
        return b->kind == BACKEND_ZSWAPD ? b->sock : NULL;
}

const char *backend_log(const Backend *b) {
        return b->kind == BACKEND_ZSWAPD ? b->log : NULL;
}

void backend_keep_log(Backend *b) {
        b->keep_log = true;
}

const char *backend_last_log(void) {
        return last_log[0] ? last_log : NULL;
}

/* ---- clients ---- */

int backend_client_new(Backend *b, BackendClient **ret) {
        BackendClient *c;
        int r;

        if (!b || !ret)
                return -EINVAL;
        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->b = b;
        if (b->kind == BACKEND_ZSWAPD) {
                r = connect_blocked(b->sock, &c->zc);
                if (r < 0) {
                        free(c);
                        return r;
                }
        }
        *ret = c;
        return 0;
}

void backend_client_free(BackendClient *c) {
        if (!c)
                return;
        zswap_disconnect(c->zc);
        free(c->vec);
        free(c);
}

int backend_attach(BackendClient *c, void *addr, size_t len) {
        if (madvise(addr, len, MADV_NOHUGEPAGE) < 0)
                return -errno;
        return c->zc ? zswap_register(c->zc, addr, len) : 0;
}

int backend_detach(BackendClient *c, void *addr, size_t len) {
        return c->zc ? zswap_unregister(c->zc, addr, len) : 0;
}

/* zswap_pageout() returns once the batches it started are compressed and
 * their staging released (or put back as incompressible): out means out.
 * No extra wait here: with several threads, a wait for the whole client's
 * staged pages would make each thread wait for the others' pageouts. */
static int zswapd_pageout(BackendClient *c, void *addr, size_t len) {
        return zswap_pageout(c->zc, addr, len);
}

static int kernel_pageout(BackendClient *c, void *addr, size_t len) {
        size_t pages = len / ZSWAP_PAGE_SIZE;
        ZramPageout po;

        if (pages > c->vec_pages) {
                unsigned char *v = realloc(c->vec, pages);

                if (!v)
                        return -ENOMEM;
                c->vec = v;
                c->vec_pages = pages;
        }
        return zram_pageout(addr, len, c->vec, PAGEOUT_MAX_CALLS, &po);
}

int backend_pageout(BackendClient *c, void *addr, size_t len) {
        return c->zc ? zswapd_pageout(c, addr, len) : kernel_pageout(c, addr, len);
}

/* ---- figures ---- */

/* What a backend counts about the pages it holds, read once for both callers below. */
typedef struct Counters {
        uint64_t orig, used;
        struct zswap_stats zswapd; /* BACKEND_ZSWAPD */
        KZswapStats kzswap;        /* BACKEND_KZSWAP */
} Counters;

static int counters_read(Backend *b, Counters *ret) {
        int r;

        switch (b->kind) {
        case BACKEND_ZSWAPD:
                r = zswapd_stats(b, &ret->zswapd);
                ret->orig = ret->zswapd.original_bytes;
                ret->used = ret->zswapd.pool_bytes;
                return r;
        case BACKEND_ZRAM:
                return zram_mm_stat(b->zram, &ret->orig, &ret->used);
        case BACKEND_KZSWAP:
                r = kzswap_stats(b->kzswap, &ret->kzswap);
                ret->orig = ret->kzswap.stored_pages * ZSWAP_PAGE_SIZE;
                ret->used = ret->kzswap.pool_bytes;
                return r;
        }
        return -EINVAL;
}

int backend_memory(Backend *b, uint64_t *orig, uint64_t *used) {
        Counters n = {};
        int r;

        r = counters_read(b, &n);
        if (r < 0)
                return r;
        *orig = n.orig;
        *used = n.used;
        return 0;
}

int backend_moves(Backend *b, uint64_t *in, uint64_t *out) {
        struct zswap_stats st;
        char name[64];
        unsigned long long v;
        FILE *f;
        int r;

        if (b->kind == BACKEND_ZSWAPD) {
                r = zswapd_stats(b, &st);
                if (r < 0)
                        return r;
                *in = st.faults - st.faults_zero;
                *out = st.evictions;
                return 0;
        }
        *in = *out = 0;
        f = fopen("/proc/vmstat", "re");
        if (!f)
                return -errno;
        while (fscanf(f, "%63s %llu", name, &v) == 2) {
                if (strcmp(name, "pswpin") == 0)
                        *in = v;
                else if (strcmp(name, "pswpout") == 0)
                        *out = v;
        }
        fclose(f);
        return 0;
}

/* "N" or "?" for a counter the kernel does not give. */
static const char *count_or_unknown(uint64_t v, char *buf, size_t size) {
        if (v == UINT64_MAX)
                return "?";
        snprintf(buf, size, "%" PRIu64, v);
        return buf;
}

int backend_report(Backend *b, char *buf, size_t size) {
        const struct zswap_stats *z;
        const KZswapStats *k;
        char rej[24], wb[24];
        Counters n = {};
        int r;

        r = counters_read(b, &n);
        if (r < 0)
                return r;
        z = &n.zswapd;
        k = &n.kzswap;
        if (b->kind == BACKEND_ZSWAPD)
                snprintf(buf, size,
                         "zswapd holds %" PRIu64 " bytes in a pool of %" PRIu64 " (%" PRIu64 " stored, %" PRIu64
                         " same-filled, %" PRIu64 " incompressible, %" PRIu64 " staged pages)",
                         z->original_bytes, z->pool_bytes, z->stored_pages, z->same_pages,
                         z->incompressible_pages, z->staged_pages);
        else if (b->kind == BACKEND_ZRAM)
                snprintf(buf, size, "zram mm_stat: orig_data_size %" PRIu64 ", mem_used_total %" PRIu64, n.orig,
                         n.used);
        else
                snprintf(buf, size,
                         "zswap (%s): %" PRIu64 " stored pages in a pool of %" PRIu64
                         " bytes; since set-up %s stores rejected (went to disk), %s pages written back",
                         k->debugfs ? "debugfs" : "/proc/meminfo, machine-wide", k->stored_pages, k->pool_bytes,
                         count_or_unknown(k->rejected, rej, sizeof(rej)),
                         count_or_unknown(k->written_back, wb, sizeof(wb)));
        return 0;
}

double backend_daemon_cpu_s(const Backend *b) {
        return b->kind == BACKEND_ZSWAPD && b->pid > 0 ? proc_cpu_s(b->pid) : NAN;
}
