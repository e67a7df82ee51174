/*
 * bench-restart.c: what surviving the daemon costs.
 *
 * Every client's compressed pool and page entries live in a store (a memfd
 * the client keeps), so a daemon killed with SIGKILL loses nothing: the
 * client reconnects and the next daemon copies ("adopts") its store, or, if
 * none comes, the client restores every page from the store itself. This
 * bench measures those paths on real heap pages (corpus.c), for each
 * --sizes value, --reps times, every phase of one repetition run back to
 * back so that ratios are taken within one repetition:
 *
 *   undisturbed  a daemon of our own; the client maps N MiB, fills it,
 *                registers it, pages it all out (zswap_pageout), reads it
 *                back in address order, timing each fault;
 *   cold restart the same, but before the read-back the daemon is killed
 *                (SIGKILL) and a new one started on the same socket. (a):
 *                from the new daemon accepting connections (our own probe
 *                zswap_connect() succeeds) until the library reports the
 *                adoption on $ZSWAP_RECOVERY_FD; the library retries every
 *                50 ms, so this includes 0-50 ms of its wait;
 *   warm restart the new daemon is started first on a socket of its own,
 *                which is then renamed over the old one, and the old daemon
 *                killed: the library's first retry (at once) finds the new
 *                daemon, so kill -> adopted is EOF seen, connect, HELLO
 *                and ADOPT (the store checked and copied), overlapping the
 *                old daemon's exit; the new daemon's CPU over it is the
 *                adoption's own cost; (b) both read back after it;
 *   zram         the same region on kernel zram-lz4 swap (MADV_PAGEOUT),
 *                read back the same way: the reference;
 *   self-restore (c) no new daemon, reconnect timeout 0: from the kill
 *                until the library reports it restored every page itself.
 *
 * (d) fork: a client with N MiB paged out forks; the child returns from
 * fork() once it is attached (libzswap's atfork handler waits for the
 * daemon to copy the parent's compressed objects into the child's store)
 * and exits at once; the parent waits for it. Against the same process
 * with the region resident (unregistered, still connected) and with no
 * client at all (plain memory).
 *
 * Each fault of a read-back is one volatile byte read bracketed by two
 * CLOCK_MONOTONIC reads; latencies count only pages mincore() said were out
 * before the pass. Every read-back is checked against the corpus.
 *
 * Needs root for the zram reference (--skip-zram without). Single-threaded
 * apart from libzswap's agent threads.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/utsname.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "bench-util.h"
#include "corpus.h"
#include "kswap.h"
#include "macro.h"
#include "util.h"
#include "zram.h"
#include "zswap.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define RANDOM_SEED 0x5eed2024ULL /* bench-core's */
#define MAX_SIZES 8
#define MAX_REPS 16
#define FORKS 3 /* per state and repetition */
#define LINE_TIMEOUT_MS 60000

typedef struct Options {
        const char *zswapd;
        const char *corpus;
        unsigned sizes[MAX_SIZES];
        unsigned n_sizes;
        unsigned reps;
        bool skip_zram, skip_fork;
        const char *phases; /* letters of the phases to run: u c w z r */
} Options;

/* ---- daemons of our own ---- */

typedef struct Daemon {
        pid_t pid;
        char sock[108];
        char log[108];
} Daemon;

static const char *zswapd_path;
static int report_rd = -1; /* read end of $ZSWAP_RECOVERY_FD */
static unsigned daemon_seq;

static int connect_blocked(const char *sock, struct zswap_client **ret) {
        sigset_t old;
        int r;

        kswap_signals_block(&old); /* the agent thread inherits the mask */
        r = zswap_connect(sock, ret);
        kswap_signals_restore(&old);
        return r;
}

/* Fork and exec the daemon on sock (not waiting for it). */
static int daemon_spawn(const char *sock, Daemon *d) {
        const char *argv[] = { zswapd_path, "--socket", sock, "--foreground", "--no-config", "--compressor", "lz4",
                               NULL };
        pid_t parent = getpid();

        snprintf(d->sock, sizeof(d->sock), "%s", sock);
        snprintf(d->log, sizeof(d->log), "/tmp/zswapd-restart-%d-%u.log", (int)parent, ++daemon_seq);
        /*
         * vfork(): no copy of our address space. A fork() (even _Fork(),
         * without libzswap's handlers) of a process with registered memory
         * raises a fork event on its userfaultfd and waits until a daemon
         * reads it: with the daemon just killed, nobody would, and a live
         * one would copy our store for a child that only execs. The child
         * makes only system calls, on its own stack frame, before execv().
         */
        d->pid = vfork();
        if (d->pid < 0)
                return -errno;
        if (d->pid == 0) {
                sigset_t none;
                int fd;

                setpgid(0, 0);
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                if (getppid() != parent)
                        _exit(1);
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                signal(SIGINT, SIG_DFL);
                signal(SIGTERM, SIG_DFL);
                signal(SIGHUP, SIG_DFL);
                fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                if (fd >= 0) {
                        dup2(fd, STDOUT_FILENO);
                        dup2(fd, STDERR_FILENO);
                }
                execv(argv[0], (char **)argv);
                _exit(127);
        }
        return 0;
}

/* Until a zswap_connect() to d succeeds (1 ms steps, 10 s): *t_ready. */
static int daemon_wait_ready(Daemon *d, uint64_t *t_ready) {
        for (int i = 0; i < 10000 && !bench_interrupted; i++) {
                struct zswap_client *zc;
                int status;

                if (connect_blocked(d->sock, &zc) == 0) {
                        if (t_ready)
                                *t_ready = bench_now_ns();
                        zswap_disconnect(zc);
                        return 0;
                }
                if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
                        fprintf(stderr, "zswapd exited at start, log %s\n", d->log);
                        d->pid = 0;
                        return -ECHILD;
                }
                bench_sleep_us(1000);
        }
        return bench_interrupted ? -EINTR : -ETIMEDOUT;
}

static int daemon_start(const char *sock, Daemon *d) {
        int r = daemon_spawn(sock, d);

        return r < 0 ? r : daemon_wait_ready(d, NULL);
}

static void daemon_kill9(Daemon *d) {
        if (d->pid <= 0)
                return;
        kill(d->pid, SIGKILL);
        while (waitpid(d->pid, NULL, 0) < 0 && errno == EINTR)
                ;
        d->pid = 0;
        unlink(d->log);
}

/* SIGTERM, 10 s, then SIGKILL; the log is kept if it did not end cleanly. */
static void daemon_stop(Daemon *d) {
        int status = 0;
        bool done = false;

        if (d->pid <= 0)
                return;
        kill(d->pid, SIGTERM);
        for (int i = 0; i < 1000 && !done; i++) {
                done = waitpid(d->pid, &status, WNOHANG) == d->pid;
                if (!done)
                        bench_sleep_us(10000);
        }
        if (!done) {
                kill(d->pid, SIGKILL);
                waitpid(d->pid, &status, 0);
        }
        if ((WIFEXITED(status) && WEXITSTATUS(status) == 0) || (WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM))
                unlink(d->log);
        else
                fprintf(stderr, "zswapd pid %d did not end cleanly; log %s\n", (int)d->pid, d->log);
        d->pid = 0;
}

static double self_cpu_s(void) {
        double u, s;

        return bench_proc_times("/proc", getpid(), &u, &s) == 0 ? u + s : NAN;
}

static double daemon_cpu_s(pid_t pid) {
        double u, s;

        return bench_proc_times("/proc", pid, &u, &s) == 0 ? u + s : NAN;
}

/* The next line the library writes on $ZSWAP_RECOVERY_FD, and when it came. */
static int wait_report(char *buf, size_t len, uint64_t *t) {
        struct pollfd p = { .fd = report_rd, .events = POLLIN };
        ssize_t n;
        int r;

        do
                r = poll(&p, 1, LINE_TIMEOUT_MS);
        while (r < 0 && errno == EINTR && !bench_interrupted);
        *t = bench_now_ns();
        if (r <= 0)
                return r == 0 ? -ETIMEDOUT : -errno;
        n = read(report_rd, buf, len - 1);
        if (n <= 0)
                return -EIO;
        buf[n] = 0;
        buf[strcspn(buf, "\n")] = 0;
        return 0;
}

static void drain_reports(void) {
        char buf[1024];

        while (read(report_rd, buf, sizeof(buf)) > 0)
                ;
}

/* ---- the client's region ---- */

typedef struct Region {
        const Corpus *corpus;
        uint8_t *mem;
        size_t len, n_pages;
        unsigned char *vec;
        uint64_t *lat;
        size_t *perm; /* the read-back order, the same for every phase */
} Region;

typedef struct ReadBack {
        double s;         /* wall time of the pass */
        double median_us; /* of the faults on pages that were out */
        size_t faults, bad;
} ReadBack;

static int region_map(Region *g) {
        g->mem = mmap(NULL, g->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (g->mem == MAP_FAILED) {
                g->mem = NULL;
                return -errno;
        }
        (void)madvise(g->mem, g->len, MADV_NOHUGEPAGE); /* one fault, one page */
        corpus_fill(g->corpus, g->mem, g->n_pages);
        return 0;
}

static void region_unmap(Region *g) {
        if (g->mem)
                munmap(g->mem, g->len);
        g->mem = NULL;
}

static size_t region_out(Region *g) {
        return g->n_pages - zram_resident_pages(g->mem, g->len, g->vec);
}

/* Touch every page in g->perm order, timing each fault; then check every page. */
static int read_back(Region *g, ReadBack *rb) {
        size_t k = 0, first_bad = 0;
        uint64_t t0;

        (void)zram_resident_pages(g->mem, g->len, g->vec);
        t0 = bench_now_ns();
        for (size_t i = 0; i < g->n_pages; i++) {
                size_t pg = g->perm[i];
                const volatile uint8_t *p = g->mem + pg * ZSWAP_PAGE_SIZE;
                uint64_t a = bench_now_ns(), z;

                (void)*p;
                z = bench_now_ns();
                if (!(g->vec[pg] & 1))
                        g->lat[k++] = z - a;
                if (bench_interrupted)
                        return -EINTR;
        }
        rb->s = (bench_now_ns() - t0) / 1e9;
        rb->faults = k;
        qsort(g->lat, k, sizeof(*g->lat), cmp_u64);
        rb->median_us = k ? g->lat[k / 2] / 1e3 : NAN;
        rb->bad = corpus_verify(g->corpus, g->mem, g->n_pages, &first_bad);
        if (rb->bad)
                printf("    VERIFICATION FAILED: %zu bad pages, first %zu\n", rb->bad, first_bad);
        return 0;
}

/* Connect to sock, map and fill the region, register it, page it all out. */
static int client_setup(Region *g, const char *sock, unsigned reconnect_ms, struct zswap_client **ret,
                        struct zswap_stats *st) {
        struct zswap_client *zc = NULL;
        size_t out;
        int r;

        r = region_map(g);
        if (r < 0)
                return r;
        r = connect_blocked(sock, &zc);
        if (r == 0 && reconnect_ms != ~0u)
                r = zswap_set_reconnect_timeout(zc, reconnect_ms);
        if (r == 0)
                r = zswap_register(zc, g->mem, g->len);
        if (r == 0)
                r = zswap_pageout(zc, g->mem, g->len);
        if (r >= 0)
                r = zswap_get_stats(zc, ZSWAP_STATS_CLIENT, st);
        if (r < 0) {
                zswap_disconnect(zc);
                region_unmap(g);
                return r;
        }
        out = region_out(g);
        if (out < g->n_pages)
                printf("    note: %zu of %zu pages out\n", out, g->n_pages);
        *ret = zc;
        return 0;
}

static char sock_main[108], sock_spare[108];

/* One repetition's figures for one size. */
typedef struct Rep {
        double orig_gib, comp_gib;          /* held by the daemon, from its client stats */
        double cold_ready_ms, cold_spawn_ms; /* new daemon ready (spawn) -> adopted */
        double warm_ms;                     /* kill -> adopted, new daemon waiting */
        double warm_dead_ms;                /* old daemon reaped -> adopted */
        double kill_ms, restore_kill_ms;    /* kill -> reaped */
        ReadBack undisturbed, cold, warm, zram;
        double restore_s;                   /* kill -> restored, no daemon */
        double restore_cpu_s;               /* our CPU meanwhile (the agent's) */
        double adopt_cpu_ms;                /* the new daemon's CPU, warm: kill -> adopted */
        size_t restore_resident;
        size_t bad;
} Rep;

static int phase_undisturbed(Region *g, Rep *rep) {
        struct zswap_client *zc;
        struct zswap_stats st;
        Daemon d = { 0 };
        int r;

        r = daemon_start(sock_main, &d);
        if (r < 0)
                return r;
        r = client_setup(g, sock_main, ~0u, &zc, &st);
        if (r == 0) {
                rep->orig_gib = st.original_bytes / GIB;
                rep->comp_gib = st.compressed_bytes / GIB;
                r = read_back(g, &rep->undisturbed);
                zswap_disconnect(zc);
                region_unmap(g);
        }
        daemon_stop(&d);
        printf("    undisturbed: %zu faults, read-back %.3f s, median %.2f us (held %.1f MiB, compressed %.1f MiB)\n",
               rep->undisturbed.faults, rep->undisturbed.s, rep->undisturbed.median_us, rep->orig_gib * 1024,
               rep->comp_gib * 1024);
        rep->bad += rep->undisturbed.bad;
        return r;
}

/* A report line that is the adoption; anything else is a failure. */
static int expect(const char *line, const char *what) {
        if (strstr(line, what))
                return 0;
        printf("    unexpected recovery report: \"%s\"\n", line);
        return -EPROTO;
}

static int phase_cold(Region *g, Rep *rep) {
        struct zswap_client *zc;
        struct zswap_stats st;
        Daemon a = { 0 }, b = { 0 };
        uint64_t t_spawn, t_ready = 0, t_adopted;
        char line[512];
        int r;

        r = daemon_start(sock_main, &a);
        if (r < 0)
                return r;
        r = client_setup(g, sock_main, ~0u, &zc, &st);
        if (r < 0) {
                daemon_stop(&a);
                return r;
        }
        drain_reports();
        daemon_kill9(&a);
        t_spawn = bench_now_ns();
        r = daemon_spawn(sock_main, &b);
        if (r == 0)
                r = daemon_wait_ready(&b, &t_ready);
        if (r == 0)
                r = wait_report(line, sizeof(line), &t_adopted);
        if (r == 0)
                r = expect(line, "adopted");
        if (r == 0) {
                rep->cold_ready_ms = (t_adopted - t_ready) / 1e6;
                rep->cold_spawn_ms = (t_adopted - t_spawn) / 1e6;
                r = read_back(g, &rep->cold);
                rep->bad += rep->cold.bad;
                printf("    cold restart: spawn -> ready %.1f ms, ready -> adopted %.1f ms; read-back %.3f s, "
                       "median %.2f us\n",
                       (t_ready - t_spawn) / 1e6, rep->cold_ready_ms, rep->cold.s, rep->cold.median_us);
        }
        zswap_disconnect(zc);
        region_unmap(g);
        daemon_stop(&b);
        return r;
}

static int phase_warm(Region *g, Rep *rep) {
        struct zswap_client *zc;
        struct zswap_stats st;
        Daemon a = { 0 }, b = { 0 };
        uint64_t t_kill, t_dead = 0, t_adopted;
        double cpu0;
        char line[512];
        int r;

        r = daemon_start(sock_main, &a);
        if (r < 0)
                return r;
        r = client_setup(g, sock_main, ~0u, &zc, &st);
        if (r < 0) {
                daemon_stop(&a);
                return r;
        }
        unlink(sock_spare);
        r = daemon_start(sock_spare, &b);
        /* the waiting daemon takes the socket's name: the next connect reaches it */
        if (r == 0 && rename(sock_spare, sock_main) < 0)
                r = -errno;
        if (r == 0) {
                drain_reports();
                cpu0 = daemon_cpu_s(b.pid);
                t_kill = bench_now_ns();
                daemon_kill9(&a);
                t_dead = bench_now_ns();
                r = wait_report(line, sizeof(line), &t_adopted);
                rep->adopt_cpu_ms = (daemon_cpu_s(b.pid) - cpu0) * 1e3;
        }
        if (r == 0)
                r = expect(line, "adopted");
        if (r == 0) {
                rep->warm_ms = (t_adopted - t_kill) / 1e6;
                rep->warm_dead_ms = (t_adopted - t_dead) / 1e6;
                rep->kill_ms = (t_dead - t_kill) / 1e6;
                r = read_back(g, &rep->warm);
                rep->bad += rep->warm.bad;
                printf("    warm restart: kill -> reaped %.1f ms, reaped -> adopted %.1f ms (new daemon CPU %.0f ms); read-back %.3f s, median %.2f us\n", rep->kill_ms,
                       rep->warm_dead_ms, rep->adopt_cpu_ms, rep->warm.s, rep->warm.median_us);
        }
        zswap_disconnect(zc);
        region_unmap(g);
        daemon_stop(&b);
        daemon_stop(&a);
        unlink(sock_main);
        return r;
}

static int phase_restore(Region *g, Rep *rep) {
        struct zswap_client *zc;
        struct zswap_stats st;
        Daemon a = { 0 };
        uint64_t t_kill, t_dead, t_done;
        double cpu0;
        char line[512];
        int r;

        r = daemon_start(sock_main, &a);
        if (r < 0)
                return r;
        r = client_setup(g, sock_main, 0, &zc, &st);
        if (r < 0) {
                daemon_stop(&a);
                return r;
        }
        drain_reports();
        t_kill = bench_now_ns();
        daemon_kill9(&a);
        t_dead = bench_now_ns();
        cpu0 = self_cpu_s(); /* our main thread waits: this is the agent's */
        r = wait_report(line, sizeof(line), &t_done);
        rep->restore_cpu_s = self_cpu_s() - cpu0;
        if (r == 0)
                r = expect(line, "restored");
        if (r == 0) {
                size_t first_bad = 0, bad;

                rep->restore_s = (t_done - t_kill) / 1e9;
                rep->restore_kill_ms = (t_dead - t_kill) / 1e6;
                rep->restore_resident = g->n_pages - region_out(g);
                bad = corpus_verify(g->corpus, g->mem, g->n_pages, &first_bad);
                rep->bad += bad;
                printf("    self-restore: kill -> reaped %.1f ms, kill -> restored %.3f s (CPU %.3f s), %zu of %zu pages resident, %zu bad (%s)\n",
                       rep->restore_kill_ms, rep->restore_s, rep->restore_cpu_s, rep->restore_resident, g->n_pages, bad, line);
        }
        zswap_disconnect(zc);
        region_unmap(g);
        unlink(sock_main);
        return r;
}

static int phase_zram(Region *g, Rep *rep) {
        BackendConfig cfg = { .kind = BACKEND_ZRAM, .size_bytes = g->len };
        BackendClient *c = NULL;
        Backend *b = NULL;
        int r, n;

        r = backend_setup(&cfg, &b);
        if (r < 0)
                return r;
        r = backend_client_new(b, &c);
        if (r == 0)
                r = region_map(g);
        if (r == 0)
                r = backend_attach(c, g->mem, g->len);
        if (r == 0) {
                n = backend_pageout(c, g->mem, g->len);
                r = n < 0 ? n : 0;
        }
        if (r == 0) {
                r = read_back(g, &rep->zram);
                rep->bad += rep->zram.bad;
                printf("    zram-lz4: %zu faults, read-back %.3f s, median %.2f us\n", rep->zram.faults, rep->zram.s,
                       rep->zram.median_us);
        }
        region_unmap(g); /* before swapoff */
        backend_client_free(c);
        backend_teardown(b);
        return r;
}

/* ---- fork ---- */

/* fork(), the child exits as soon as fork() returns in it; ms until reaped. */
static double fork_once(void) {
        uint64_t t0 = bench_now_ns();
        pid_t pid = fork();
        int status;

        if (pid < 0)
                return NAN;
        if (pid == 0)
                _exit(0);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return NAN;
        return (bench_now_ns() - t0) / 1e6;
}

static double fork_median(double *daemon_cpu_ms, pid_t daemon) {
        double v[FORKS], c0 = daemon ? daemon_cpu_s(daemon) : NAN;

        for (int i = 0; i < FORKS; i++)
                v[i] = fork_once();
        if (daemon_cpu_ms)
                *daemon_cpu_ms = (daemon_cpu_s(daemon) - c0) * 1e3 / FORKS;
        return bench_median(v, FORKS);
}

typedef struct ForkRep {
        double evicted_ms, connected_ms, plain_ms, daemon_cpu_ms;
} ForkRep;

static int fork_size(Region *g, unsigned reps, ForkRep *fr) {
        Daemon d = { 0 };
        int r;

        r = daemon_start(sock_main, &d);
        if (r < 0)
                return r;
        r = region_map(g);
        for (unsigned i = 0; r == 0 && i < reps && !bench_interrupted; i++) {
                struct zswap_client *zc;
                size_t out;

                r = connect_blocked(sock_main, &zc);
                if (r < 0)
                        break;
                r = zswap_register(zc, g->mem, g->len);
                if (r == 0)
                        r = zswap_pageout(zc, g->mem, g->len);
                if (r < 0) {
                        zswap_disconnect(zc);
                        break;
                }
                r = 0;
                out = region_out(g);
                fr[i].evicted_ms = fork_median(&fr[i].daemon_cpu_ms, d.pid);
                r = zswap_unregister(zc, g->mem, g->len); /* every page back */
                fr[i].connected_ms = fork_median(NULL, 0);
                zswap_disconnect(zc);
                fr[i].plain_ms = fork_median(NULL, 0);
                printf("    fork %u: %zu pages out: %.2f ms (daemon CPU %.2f ms per fork); resident, connected: "
                       "%.2f ms; no client: %.2f ms\n",
                       i + 1, out, fr[i].evicted_ms, fr[i].daemon_cpu_ms, fr[i].connected_ms, fr[i].plain_ms);
        }
        if (r == 0) {
                size_t first_bad = 0, bad = corpus_verify(g->corpus, g->mem, g->n_pages, &first_bad);

                if (bad) {
                        printf("    VERIFICATION FAILED after the forks: %zu bad pages\n", bad);
                        r = -EIO;
                }
        }
        region_unmap(g);
        daemon_stop(&d);
        return r;
}

/* ---- output ---- */

typedef double (*RepFn)(const Rep *);

/* "median (min-max)" of f over the repetitions. */
static const char *stat_cell(char *buf, size_t len, const Rep *reps, unsigned n, RepFn f, const char *fmt) {
        double v[MAX_REPS];
        char m[32], lo[32], hi[32];

        for (unsigned i = 0; i < n; i++)
                v[i] = f(&reps[i]);
        double med = bench_median(v, n); /* sorts v, NANs last */
        unsigned k = 0;
        while (k < n && !isnan(v[k]))
                k++;
        if (k == 0)
                return snprintf(buf, len, "-"), buf;
        bench_fmt(m, sizeof(m), fmt, med);
        bench_fmt(lo, sizeof(lo), fmt, v[0]);
        bench_fmt(hi, sizeof(hi), fmt, v[k - 1]);
        snprintf(buf, len, "%s (%s-%s)", m, lo, hi);
        return buf;
}

static double ratio(double a, double b) {
        return isfinite(a) && isfinite(b) && b > 0 ? a / b : NAN;
}

static double f_orig(const Rep *r) { return r->orig_gib * 1024; }
static double f_comp(const Rep *r) { return r->comp_gib * 1024; }
static double f_cold(const Rep *r) { return r->cold_ready_ms; }
static double f_cold_spawn(const Rep *r) { return r->cold_spawn_ms; }
static double f_warm(const Rep *r) { return r->warm_ms; }
static double f_warm_dead(const Rep *r) { return r->warm_dead_ms; }
static double f_kill(const Rep *r) { return r->kill_ms; }
static double f_warm_gib(const Rep *r) { return ratio(r->warm_ms, r->orig_gib); }
static double f_warm_cgib(const Rep *r) { return ratio(r->warm_ms, r->comp_gib); }
static double f_cold_gib(const Rep *r) { return ratio(r->cold_ready_ms, r->orig_gib); }
static double f_rb_und(const Rep *r) { return r->undisturbed.s; }
static double f_rb_cold(const Rep *r) { return r->cold.s; }
static double f_rb_warm(const Rep *r) { return r->warm.s; }
static double f_rb_zram(const Rep *r) { return r->zram.s; }
static double f_cold_und(const Rep *r) { return ratio(r->cold.s, r->undisturbed.s); }
static double f_warm_und(const Rep *r) { return ratio(r->warm.s, r->undisturbed.s); }
static double f_cold_zram(const Rep *r) { return ratio(r->cold.s, r->zram.s); }
static double f_warm_zram(const Rep *r) { return ratio(r->warm.s, r->zram.s); }
static double f_und_zram(const Rep *r) { return ratio(r->undisturbed.s, r->zram.s); }
static double f_med_und(const Rep *r) { return r->undisturbed.median_us; }
static double f_med_cold(const Rep *r) { return r->cold.median_us; }
static double f_med_warm(const Rep *r) { return r->warm.median_us; }
static double f_med_zram(const Rep *r) { return r->zram.median_us; }
static double f_restore(const Rep *r) { return r->restore_s; }
static double f_restore_cpu(const Rep *r) { return r->restore_cpu_s; }
static double f_adopt_cpu(const Rep *r) { return r->adopt_cpu_ms; }
static double f_restore_gib(const Rep *r) { return ratio(r->restore_s, r->orig_gib); }
static double f_restore_zram(const Rep *r) { return ratio(r->restore_s, r->zram.s); }
static double f_restore_und(const Rep *r) { return ratio(r->restore_s, r->undisturbed.s); }

static void print_size(unsigned mib, const Rep *reps, unsigned n) {
        static const struct {
                const char *name, *fmt;
                RepFn f;
        } rows[] = {
                { "held MiB", "%.1f", f_orig },
                { "compressed MiB", "%.1f", f_comp },
                { "(a) cold: ready -> adopted ms", "%.1f", f_cold },
                { "(a) cold: spawn -> adopted ms", "%.1f", f_cold_spawn },
                { "(a) cold: ms per GiB held", "%.0f", f_cold_gib },
                { "(a) kill -> old daemon reaped ms", "%.1f", f_kill },
                { "(a) warm: kill -> adopted ms", "%.1f", f_warm },
                { "(a) warm: old reaped -> adopted ms", "%.1f", f_warm_dead },
                { "(a) warm: ms per GiB held", "%.0f", f_warm_gib },
                { "(a) warm: ms per GiB compressed", "%.0f", f_warm_cgib },
                { "(a) warm: new daemon CPU ms", "%.0f", f_adopt_cpu },
                { "(b) read-back s, undisturbed", "%.3f", f_rb_und },
                { "(b) read-back s, after cold", "%.3f", f_rb_cold },
                { "(b) read-back s, after warm", "%.3f", f_rb_warm },
                { "(b) read-back s, zram", "%.3f", f_rb_zram },
                { "(b) after cold / undisturbed", "%.2f", f_cold_und },
                { "(b) after warm / undisturbed", "%.2f", f_warm_und },
                { "(b) after cold / zram", "%.2f", f_cold_zram },
                { "(b) after warm / zram", "%.2f", f_warm_zram },
                { "(b) undisturbed / zram", "%.2f", f_und_zram },
                { "(b) fault median us, undisturbed", "%.2f", f_med_und },
                { "(b) fault median us, after cold", "%.2f", f_med_cold },
                { "(b) fault median us, after warm", "%.2f", f_med_warm },
                { "(b) fault median us, zram", "%.2f", f_med_zram },
                { "(c) self-restore s (kill -> restored)", "%.3f", f_restore },
                { "(c) self-restore CPU s (agent)", "%.3f", f_restore_cpu },
                { "(c) self-restore s per GiB held", "%.3f", f_restore_gib },
                { "(c) self-restore / zram read-back", "%.2f", f_restore_zram },
                { "(c) self-restore / zswapd read-back", "%.2f", f_restore_und },
        };
        char cell[128];

        printf("\n%u MiB, %u repetitions: median (min-max); ratios taken within each repetition\n", mib, n);
        for (size_t i = 0; i < ELEMENTSOF(rows); i++)
                printf("  %-38s %s\n", rows[i].name, stat_cell(cell, sizeof(cell), reps, n, rows[i].f, rows[i].fmt));
}

static void print_fork(unsigned mib, const ForkRep *fr, unsigned n) {
        double ev[MAX_REPS], co[MAX_REPS], pl[MAX_REPS], cpu[MAX_REPS], r1[MAX_REPS], r2[MAX_REPS];

        for (unsigned i = 0; i < n; i++) {
                ev[i] = fr[i].evicted_ms;
                co[i] = fr[i].connected_ms;
                pl[i] = fr[i].plain_ms;
                cpu[i] = fr[i].daemon_cpu_ms;
                r1[i] = ratio(ev[i], pl[i]);
                r2[i] = ratio(ev[i], co[i]);
        }
        printf("  fork %u MiB: evicted %.2f ms (daemon CPU %.2f ms), resident connected %.2f ms, plain %.2f ms; "
               "evicted/plain %.2f, evicted/connected %.2f (medians of %u)\n",
               mib, bench_median(ev, n), bench_median(cpu, n), bench_median(co, n), bench_median(pl, n),
               bench_median(r1, n), bench_median(r2, n), n);
}

/* ---- main ---- */

static void usage(void) {
        printf("bench-restart [--sizes MiB,...] [--reps N] [--zswapd PATH] [--corpus DIR] [--skip-zram]\n"
               "              [--skip-fork] [--phases ucwzr]\n\n"
               "Kill -9 the daemon under a client with N MiB paged out: adoption time, read-back after it\n"
               "against an undisturbed daemon and kernel zram, the client's own restore, fork cost.\n"
               "Phases: u undisturbed, c cold restart, w warm restart, z zram, r self-restore.\n"
               "Default: --sizes 64,256,1024 --reps 3, every phase. Root for zram.\n");
}

static int parse_options(int argc, char **argv, Options *o) {
        static const struct option opts[] = {
                { "sizes", required_argument, NULL, 's' },  { "reps", required_argument, NULL, 'r' },
                { "zswapd", required_argument, NULL, 'z' }, { "corpus", required_argument, NULL, 'c' },
                { "skip-zram", no_argument, NULL, 'Z' },    { "skip-fork", no_argument, NULL, 'F' },
                { "phases", required_argument, NULL, 'p' }, { "help", no_argument, NULL, 'h' }, {}
        };
        unsigned reps[1], n;
        int ch;

        while ((ch = getopt_long(argc, argv, "h", opts, NULL)) >= 0)
                switch (ch) {
                case 's':
                        if (bench_parse_list(optarg, 1, 65536, o->sizes, MAX_SIZES, &o->n_sizes) < 0)
                                return -EINVAL;
                        break;
                case 'r':
                        if (bench_parse_list(optarg, 1, MAX_REPS, reps, 1, &n) < 0)
                                return -EINVAL;
                        o->reps = reps[0];
                        break;
                case 'z':
                        o->zswapd = optarg;
                        break;
                case 'c':
                        o->corpus = optarg;
                        break;
                case 'Z':
                        o->skip_zram = true;
                        break;
                case 'F':
                        o->skip_fork = true;
                        break;
                case 'p':
                        o->phases = optarg;
                        break;
                case 'h':
                        usage();
                        exit(0);
                default:
                        return -EINVAL;
                }
        return optind == argc ? 0 : -EINVAL;
}

static char *default_zswapd(void) {
        _cleanup_free_ char *exe = realpath("/proc/self/exe", NULL);
        char *path;

        if (!exe || asprintf(&path, "%s/../daemon/zswapd", dirname(exe)) < 0)
                return NULL;
        return path;
}

static int run_size(const Options *o, const Corpus *corpus, unsigned mib, size_t *bad) {
        Region g = { .corpus = corpus, .len = (size_t)mib << 20 };
        Rep reps[MAX_REPS];
        ForkRep fr[MAX_REPS];
        char la[64];
        int r = 0;

        g.n_pages = g.len / ZSWAP_PAGE_SIZE;
        g.vec = malloc(g.n_pages);
        g.lat = malloc(g.n_pages * sizeof(*g.lat));
        g.perm = malloc(g.n_pages * sizeof(*g.perm));
        if (!g.vec || !g.lat || !g.perm)
                return -ENOMEM;
        corpus_shuffle(g.perm, g.n_pages, RANDOM_SEED);
        for (unsigned i = 0; i < o->reps; i++)
                reps[i] = (Rep){ .cold_ready_ms = NAN, .cold_spawn_ms = NAN, .warm_ms = NAN, .warm_dead_ms = NAN, .kill_ms = NAN,
                                 .restore_kill_ms = NAN, .restore_s = NAN, .restore_cpu_s = NAN,
                                 .adopt_cpu_ms = NAN,
                                 .undisturbed.s = NAN, .cold.s = NAN, .warm.s = NAN, .zram.s = NAN,
                                 .undisturbed.median_us = NAN, .cold.median_us = NAN, .warm.median_us = NAN,
                                 .zram.median_us = NAN };
        for (unsigned i = 0; i < o->reps && r == 0 && !bench_interrupted; i++) {
                Rep *rep = &reps[i];

                printf("  %u MiB, repetition %u (load %s)\n", mib, i + 1, bench_loadavg(la, sizeof(la)));
                /* a different order each repetition: drift spreads over every phase */
                for (unsigned k = 0; k < 5 && r == 0 && !bench_interrupted; k++) {
                        if (!strchr(o->phases, "ucwzr"[(k + i) % 5]))
                                continue;
                        switch ((k + i) % 5) {
                        case 0:
                                r = phase_undisturbed(&g, rep);
                                break;
                        case 1:
                                r = phase_cold(&g, rep);
                                break;
                        case 2:
                                r = phase_warm(&g, rep);
                                break;
                        case 3:
                                r = o->skip_zram ? 0 : phase_zram(&g, rep);
                                break;
                        case 4:
                                r = phase_restore(&g, rep);
                                break;
                        }
                }
                *bad += rep->bad;
        }
        if (r == 0 && !bench_interrupted)
                print_size(mib, reps, o->reps);
        if (r == 0 && !o->skip_fork && !bench_interrupted) {
                r = fork_size(&g, o->reps, fr);
                if (r == 0)
                        print_fork(mib, fr, o->reps);
        }
        free(g.vec);
        free(g.lat);
        free(g.perm);
        return r;
}

int main(int argc, char **argv) {
        Options o = { .sizes = { 64, 256, 1024 }, .n_sizes = 3, .reps = 3, .phases = "ucwzr" };
        _cleanup_free_ char *corpus_dir = NULL, *zpath = NULL;
        _cleanup_corpus_ Corpus *corpus = NULL;
        struct utsname u;
        char la[64], fdstr[16];
        int pipefd[2], r = 0;
        size_t bad = 0;

        if (parse_options(argc, argv, &o) < 0) {
                usage();
                return 2;
        }
        zpath = o.zswapd ? strdup(o.zswapd) : default_zswapd();
        if (!zpath || access(zpath, X_OK) < 0)
                return fprintf(stderr, "no zswapd at %s; --zswapd PATH\n", zpath ?: "?"), 1;
        zswapd_path = zpath;
        r = bench_corpus_load(o.corpus, &corpus_dir, &corpus);
        if (r < 0)
                return fprintf(stderr, "cannot load the corpus: %s; --corpus DIR\n", strerror(-r)), 1;
        /* the library's recovery reports, one line each, into a pipe we poll */
        if (pipe2(pipefd, O_CLOEXEC) < 0)
                return perror("pipe2"), 1;
        report_rd = pipefd[0];
        fcntl(report_rd, F_SETFL, O_NONBLOCK);
        snprintf(fdstr, sizeof(fdstr), "%d", pipefd[1]);
        setenv("ZSWAP_RECOVERY_FD", fdstr, 1);
        snprintf(sock_main, sizeof(sock_main), "/tmp/zswapd-restart-%d.sock", (int)getpid());
        snprintf(sock_spare, sizeof(sock_spare), "/tmp/zswapd-restart-%d-spare.sock", (int)getpid());
        bench_install_signals();
        setvbuf(stdout, NULL, _IOLBF, 0);
        uname(&u);
        printf("bench-restart: %ld CPUs, Linux %s; sizes", sysconf(_SC_NPROCESSORS_ONLN), u.release);
        for (unsigned i = 0; i < o.n_sizes; i++)
                printf(" %u", o.sizes[i]);
        printf(" MiB, %u repetitions; zswapd %s; corpus %s; load %s\n", o.reps, zswapd_path, corpus_dir,
               bench_loadavg(la, sizeof(la)));
        if (o.skip_zram || geteuid() != 0)
                o.skip_zram = true, printf("zram reference: skipped%s\n", geteuid() ? " (not root)" : "");

        for (unsigned i = 0; i < o.n_sizes && r == 0 && !bench_interrupted; i++) {
                r = run_size(&o, corpus, o.sizes[i], &bad);
                if (r < 0 && r != -EINTR)
                        printf("%u MiB failed: %s\n", o.sizes[i], strerror(-r));
        }
        unlink(sock_main);
        unlink(sock_spare);
        printf("load at the end %s\n", bench_loadavg(la, sizeof(la)));
        if (bad)
                printf("VERIFICATION FAILED: %zu bad pages in all\n", bad);
        if (bench_interrupted)
                return 130;
        return r < 0 || bad ? 1 : 0;
}
