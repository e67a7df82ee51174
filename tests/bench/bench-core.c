/*
 * bench-core.c: zswapd against kernel zram, one run, one table.
 *
 * The same workload (real heap pages, corpus.c) goes through both backends
 * and is measured by the same code: a Backend supplies only how to page a
 * region out, how much memory that took and whose CPU time to read. Each
 * phase maps a fresh private anonymous region, fills it, pages it out, reads
 * it back in address order and checks every page, pages it out again, reads
 * it back in a seeded random order and checks again.
 *
 * Measuring: each fault is one volatile byte read bracketed by two
 * CLOCK_MONOTONIC reads (vDSO, ~25 ns each, included in every figure).
 * Latencies are kept only for pages mincore() said were out before the pass,
 * so a page the backend kept resident does not count as a fast fault.
 * Read-back MB/s is the region size over the whole pass. The bench process's
 * own CPU time is counted over the timed sections only (pageouts and fault
 * passes, not filling or checking): for zram that is where the kernel
 * compresses and decompresses; for zswapd it is the library's agent thread.
 * The daemon's CPU is read from /proc/PID/stat over its whole phase, as it
 * may compress after zswap_pageout() has returned.
 *
 * THP is switched off for both regions (MADV_NOHUGEPAGE): one fault, one
 * page, on both sides. Swap readahead is off for the zram run (zram.c).
 *
 * SIGINT, SIGTERM and SIGHUP only set a flag; loops stop at the next page or
 * call, and the phase tears down what it set up. The daemon runs in its own
 * process group so that a ^C reaches only the bench, which still needs the
 * daemon to put its pages back before stopping it.
 *
 * Single-threaded (libzswap starts its own agent thread).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <libgen.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "corpus.h"
#include "macro.h"
#include "zram.h"
#ifndef BENCH_ZRAM_ONLY
#include "zswap.h"
#endif

#define RANDOM_SEED 0x5eed2024ULL
#define PAGEOUT_MAX_CALLS 8 /* MADV_PAGEOUT repeats while it makes progress */
#define GIB (1024.0 * 1024.0 * 1024.0)

static volatile sig_atomic_t interrupted;

typedef struct Options {
        const char *zswapd;     /* NULL: the zswapd built beside the bench */
        const char *corpus;     /* NULL: corpus_find_dir() */
        const char *compressor;
        unsigned long size_mib;
        long workers;
        bool skip_zram;
} Options;

typedef struct Latency {
        size_t faults; /* pages that were out before the pass */
        double median_us, p99_us, p999_us, max_us;
        double mbs;    /* region bytes / wall time of the pass */
} Latency;

typedef struct Result {
        bool done;
        double pageout_mbs;   /* bytes paged out / time, both passes */
        double out_pct;       /* region paged out after the first pageout */
        double rss_drop_pct;  /* RssAnon drop over the first pageout, % of the region */
        double mem_ratio;     /* original / memory used */
        Latency seq, rnd;
        double daemon_cpu_s;  /* NAN where there is no daemon */
        double self_cpu_s;    /* timed sections only */
        double moved_gib;     /* paged out + faulted back */
        size_t bad_pages;
} Result;

/* What one phase measures, with the buffers both phases share. */
typedef struct Run {
        const Corpus *corpus;
        uint8_t *region;
        size_t len, n_pages;
        unsigned char *resident; /* mincore() vector of the region */
        uint64_t *lat;           /* ns, one per fault of the current pass */
        size_t *perm;            /* the random order, same for every phase */
        uint64_t out_bytes, out_ns;
} Run;

/* What differs between zswapd and zram. */
typedef struct Backend {
        const char *name;
        void *ctx;
        int (*attach)(void *ctx, void *addr, size_t len);    /* optional */
        void (*detach)(void *ctx, void *addr, size_t len);   /* optional */
        int (*pageout)(void *ctx, void *addr, size_t len);   /* pages out or -errno */
        int (*memory)(void *ctx, uint64_t out_bytes, double *ret_ratio);
        int (*daemon_cpu)(void *ctx, double *ret_secs);      /* optional */
} Backend;

static void on_signal(int sig) {
        interrupted = sig;
}

static uint64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static double self_cpu_s(void) {
        struct rusage ru;

        getrusage(RUSAGE_SELF, &ru);
        return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
               (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* This process's RssAnon, from procfs/self/status, in KiB; -1 if unknown. */
static long self_rss_anon_kib(const char *procfs) {
        char path[128], line[256];
        long kib = -1;
        FILE *f;

        snprintf(path, sizeof(path), "%s/self/status", procfs);
        f = fopen(path, "re");
        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "RssAnon: %ld kB", &kib) == 1)
                        break;
        fclose(f);
        return kib;
}

static size_t region_resident(Run *run) {
        return zram_resident_pages(run->region, run->len, run->resident);
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array: the smallest value with at least p of all at or below it. */
static double percentile_us(const uint64_t *v, size_t n, double p) {
        size_t rank = (size_t)(p * n);

        if (n == 0)
                return NAN;
        if ((double)rank < p * n)
                rank++; /* ceil() without libm */
        return v[rank ? MIN(rank, n) - 1 : 0] / 1000.0;
}

static void latency_summarize(uint64_t *lat, size_t n, Latency *ret) {
        qsort(lat, n, sizeof(*lat), cmp_u64);
        ret->faults = n;
        ret->median_us = percentile_us(lat, n, 0.5);
        ret->p99_us = percentile_us(lat, n, 0.99);
        ret->p999_us = percentile_us(lat, n, 0.999);
        ret->max_us = percentile_us(lat, n, 1.0);
}

/* Page the whole region out; the first pass also records what it achieved. */
static int measure_pageout(Run *run, const Backend *b, bool first, Result *res) {
        long rss0 = self_rss_anon_kib("/proc"), rss1;
        double cpu0 = self_cpu_s();
        uint64_t t0 = now_ns(), dt;
        size_t out;
        int n;

        n = b->pageout(b->ctx, run->region, run->len);
        dt = now_ns() - t0;
        res->self_cpu_s += self_cpu_s() - cpu0;
        if (n < 0)
                return n;
        rss1 = self_rss_anon_kib("/proc");
        out = run->n_pages - region_resident(run);
        run->out_bytes += out * ZSWAP_PAGE_SIZE;
        run->out_ns += dt;
        res->moved_gib += out * ZSWAP_PAGE_SIZE / GIB;
        printf("  %s pageout %d: %zu of %zu pages out (backend says %d) in %.3f s, RssAnon %ld -> %ld KiB\n",
               b->name, first ? 1 : 2, out, run->n_pages, n, dt / 1e9, rss0, rss1);
        if (!first)
                return 0;
        res->out_pct = 100.0 * out / run->n_pages;
        res->rss_drop_pct = 100.0 * (rss0 - rss1) * 1024.0 / run->len;
        return b->memory(b->ctx, out * ZSWAP_PAGE_SIZE, &res->mem_ratio);
}

/* Touch every page once, sequentially or in run->perm order, timing each touch. */
static int measure_faults(Run *run, const char *name, bool random, Latency *ret, Result *res) {
        double cpu0 = self_cpu_s();
        size_t k = 0, bad, first_bad = 0;
        uint64_t t0 = now_ns(), dt;

        for (size_t i = 0; i < run->n_pages; i++) {
                size_t pg = random ? run->perm[i] : i;
                const volatile uint8_t *p = run->region + pg * ZSWAP_PAGE_SIZE;
                uint64_t a, z;

                if (interrupted)
                        return -EINTR;
                a = now_ns();
                (void)*p;
                z = now_ns();
                if (!(run->resident[pg] & 1))
                        run->lat[k++] = z - a;
        }
        dt = now_ns() - t0;
        res->self_cpu_s += self_cpu_s() - cpu0;
        res->moved_gib += k * ZSWAP_PAGE_SIZE / GIB;
        latency_summarize(run->lat, k, ret);
        ret->mbs = run->len / (dt / 1e3);

        bad = corpus_verify(run->corpus, run->region, run->n_pages, &first_bad);
        res->bad_pages += bad;
        printf("  %s %s fault-in: %zu faults, %.3f s, median %.2f us; %zu bad pages",
               name, random ? "random" : "sequential", k, dt / 1e9, ret->median_us, bad);
        if (bad)
                printf(" (first: page %zu)", first_bad);
        printf("\n");
        return 0;
}

static int phase_measure(Run *run, const Backend *b, Result *res) {
        double cpu0 = 0, cpu1 = 0;
        int r = 0;

        if (b->daemon_cpu)
                r = b->daemon_cpu(b->ctx, &cpu0);
        if (r == 0 && !interrupted)
                r = measure_pageout(run, b, true, res);
        if (r == 0 && !interrupted)
                r = measure_faults(run, b->name, false, &res->seq, res);
        if (r == 0 && !interrupted)
                r = measure_pageout(run, b, false, res);
        if (r == 0 && !interrupted)
                r = measure_faults(run, b->name, true, &res->rnd, res);
        if (r == 0 && b->daemon_cpu)
                r = b->daemon_cpu(b->ctx, &cpu1);
        res->daemon_cpu_s = b->daemon_cpu ? cpu1 - cpu0 : NAN;
        res->pageout_mbs = run->out_ns ? run->out_bytes / (run->out_ns / 1e3) : NAN;
        return interrupted ? -EINTR : r;
}

static int phase_run(Run *run, const Backend *b, Result *res) {
        int r;

        run->out_bytes = run->out_ns = 0;
        run->region = mmap(NULL, run->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (run->region == MAP_FAILED)
                return -errno;
        (void)madvise(run->region, run->len, MADV_NOHUGEPAGE);
        corpus_fill(run->corpus, run->region, run->n_pages);

        r = b->attach ? b->attach(b->ctx, run->region, run->len) : 0;
        if (r == 0) {
                r = phase_measure(run, b, res);
                if (b->detach)
                        b->detach(b->ctx, run->region, run->len);
        }
        munmap(run->region, run->len);
        run->region = NULL;
        res->done = r == 0;
        return r;
}

/* ---- zswapd ---- */
#ifndef BENCH_ZRAM_ONLY

static void sleep_us(long us) {
        struct timespec ts = { us / 1000000, (us % 1000000) * 1000L };

        nanosleep(&ts, NULL);
}

/* utime + stime of pid from procfs/PID/stat, in seconds. */
static int proc_cpu_s(const char *procfs, pid_t pid, double *ret) {
        char path[128], buf[1024], *p;
        unsigned long long utime, stime;
        size_t k;
        FILE *f;

        snprintf(path, sizeof(path), "%s/%d/stat", procfs, (int)pid);
        f = fopen(path, "re");
        if (!f)
                return -errno;
        k = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[k] = 0;
        /* comm may hold spaces and parens; the fields start after the last ')'. */
        p = strrchr(buf, ')');
        if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                         &utime, &stime) != 2)
                return -EBADMSG;
        *ret = (double)(utime + stime) / sysconf(_SC_CLK_TCK);
        return 0;
}

typedef struct Daemon {
        pid_t pid;
        char sock[108];
        char log[108];
        struct zswap_client *client;
} Daemon;

static _noreturn_ void daemon_exec(const Options *o, const char *path, const Daemon *d, pid_t parent) {
        char workers[24];
        char *argv[] = { (char *)path, "--socket", (char *)d->sock, "--foreground",
                         "--compressor", (char *)o->compressor, "--workers", workers, NULL };
        int fd;

        setpgid(0, 0); /* ^C is for the bench, which stops the daemon in order */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
                _exit(1);
        snprintf(workers, sizeof(workers), "%ld", o->workers);
        fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
                dup2(fd, STDOUT_FILENO);
                dup2(fd, STDERR_FILENO);
        }
        execv(path, argv);
        fprintf(stderr, "bench-core: cannot execute %s: %m\n", path);
        _exit(127);
}

/*
 * zswap_connect() starts the library's agent thread, which inherits our
 * signal mask: block the signals we catch while it starts, so they always
 * land on this thread and never interrupt the agent's system calls.
 */
static int daemon_connect(Daemon *d) {
        sigset_t mask, old;
        int r;

        sigemptyset(&mask);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &mask, &old);
        r = zswap_connect(d->sock, &d->client);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return r;
}

static int daemon_wait_ready(Daemon *d) {
        for (int i = 0; i < 500 && !interrupted; i++) {
                int status;

                if (daemon_connect(d) == 0)
                        return 0;
                if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
                        printf("  zswapd exited before accepting connections (wait status 0x%x)\n", status);
                        d->pid = -1;
                        return -ECHILD;
                }
                sleep_us(10000);
        }
        return interrupted ? -EINTR : -ETIMEDOUT;
}

static int daemon_start(const Options *o, const char *path, Daemon *d) {
        pid_t parent = getpid();

        snprintf(d->sock, sizeof(d->sock), "/tmp/zswapd-bench-%d.sock", (int)parent);
        snprintf(d->log, sizeof(d->log), "/tmp/zswapd-bench-%d.log", (int)parent);
        unlink(d->sock);
        d->pid = fork();
        if (d->pid < 0)
                return -errno;
        if (d->pid == 0)
                daemon_exec(o, path, d, parent);
        return daemon_wait_ready(d);
}

/* Reap pid within ms milliseconds; false if it is still running. */
static bool reap_within(pid_t pid, int *status, int ms) {
        for (int i = 0; i < ms / 10; i++) {
                pid_t r = waitpid(pid, status, WNOHANG);

                if (r == pid || (r < 0 && errno != EINTR))
                        return true;
                sleep_us(10000);
        }
        return false;
}

/* Returns true if the daemon ended as asked (SIGTERM or exit 0). */
static bool daemon_stop(Daemon *d) {
        bool clean = true;
        int status = 0;

        zswap_disconnect(d->client);
        d->client = NULL;
        if (d->pid > 0) {
                kill(d->pid, SIGTERM);
                if (!reap_within(d->pid, &status, 5000)) {
                        printf("  zswapd did not exit within 5 s of SIGTERM; killing it\n");
                        kill(d->pid, SIGKILL);
                        waitpid(d->pid, &status, 0);
                }
                clean = (WIFEXITED(status) && WEXITSTATUS(status) == 0) ||
                        (WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
                if (!clean)
                        printf("  zswapd ended with wait status 0x%x\n", status);
        }
        d->pid = -1;
        unlink(d->sock);
        return clean;
}

static int zswapd_attach(void *ctx, void *addr, size_t len) {
        return zswap_register(((Daemon *)ctx)->client, addr, len);
}

static void zswapd_detach(void *ctx, void *addr, size_t len) {
        zswap_unregister(((Daemon *)ctx)->client, addr, len);
}

/* Out means compressed: wait for the daemon to drain what it staged. */
static int zswapd_pageout(void *ctx, void *addr, size_t len) {
        Daemon *d = ctx;
        struct zswap_stats st;
        int n, r;

        n = zswap_pageout(d->client, addr, len);
        if (n < 0)
                return n;
        for (int i = 0; i < 30000 && !interrupted; i++) {
                r = zswap_get_stats(d->client, ZSWAP_STATS_CLIENT, &st);
                if (r < 0)
                        return r;
                if (st.staged_pages == 0)
                        return n;
                sleep_us(1000);
        }
        return interrupted ? -EINTR : -ETIMEDOUT;
}

static int zswapd_memory(void *ctx, _unused_ uint64_t out_bytes, double *ret) {
        struct zswap_stats st;
        int r;

        r = zswap_get_stats(((Daemon *)ctx)->client, ZSWAP_STATS_GLOBAL, &st);
        if (r < 0)
                return r;
        printf("  zswapd holds %" PRIu64 " bytes in a pool of %" PRIu64 " (%" PRIu64 " stored, %" PRIu64
               " same-filled, %" PRIu64 " incompressible pages)\n",
               st.original_bytes, st.pool_bytes, st.stored_pages, st.same_pages, st.incompressible_pages);
        *ret = st.pool_bytes ? (double)st.original_bytes / st.pool_bytes : NAN;
        return 0;
}

static int zswapd_cpu(void *ctx, double *ret) {
        return proc_cpu_s("/proc", ((Daemon *)ctx)->pid, ret);
}

static int zswapd_phase(const Options *o, const char *exe_dir, Run *run, Result *res) {
        _cleanup_free_ char *path = NULL;
        Daemon d = { .pid = -1 };
        Backend b = { "zswapd", &d, zswapd_attach, zswapd_detach, zswapd_pageout,
                      zswapd_memory, zswapd_cpu };
        int r;

        if (o->zswapd)
                path = strdup(o->zswapd);
        else if (asprintf(&path, "%s/../../daemon/zswapd", exe_dir) < 0)
                path = NULL;
        if (!path)
                return -ENOMEM;
        printf("zswapd phase: %s, compressor %s, %ld workers\n", path, o->compressor, o->workers);
        if (access(path, X_OK) < 0) {
                printf("  no zswapd there (%m); build it or pass --zswapd PATH\n");
                return -ENOENT;
        }
        r = daemon_start(o, path, &d);
        if (r < 0)
                printf("  zswapd did not come up on %s: %s\n", d.sock, strerror(-r));
        else
                r = phase_run(run, &b, res);
        if (!daemon_stop(&d) || (r < 0 && r != -EINTR) || res->bad_pages)
                printf("  daemon log: %s\n", d.log);
        else
                unlink(d.log);
        return r;
}

#else

static int zswapd_phase(_unused_ const Options *o, _unused_ const char *exe_dir,
                        _unused_ Run *run, _unused_ Result *res) {
        printf("zswapd phase: skipped (built with BENCH_ZRAM_ONLY)\n");
        return 0;
}

#endif

/* ---- zram ---- */

typedef struct ZramCtx {
        Zram *zram;
        Run *run;
} ZramCtx;

static int zram_backend_pageout(void *ctx, void *addr, size_t len) {
        ZramCtx *zc = ctx;
        ZramPageout po;
        int n;

        n = zram_pageout(addr, len, zc->run->resident, PAGEOUT_MAX_CALLS, &po);
        if (n >= 0 && (po.calls > 1 || po.resident > 0))
                printf("  zram: %u MADV_PAGEOUT calls; the first left %zu pages resident, the last %zu\n",
                       po.calls, po.first_resident, po.resident);
        return n;
}

static int zram_backend_memory(void *ctx, uint64_t out_bytes, double *ret) {
        ZramCtx *zc = ctx;
        uint64_t orig, used;
        int r;

        r = zram_mm_stat(zc->zram, &orig, &used);
        if (r < 0)
                return r;
        printf("  zram mm_stat: orig_data_size %" PRIu64 ", mem_used_total %" PRIu64 "\n", orig, used);
        *ret = used ? (double)out_bytes / used : NAN;
        return 0;
}

static int zram_phase(Run *run, Result *res) {
        ZramCtx zc = { .run = run };
        Backend b = { "zram", &zc, NULL, NULL, zram_backend_pageout, zram_backend_memory, NULL };
        int r, rt;

        if (geteuid() != 0) {
                printf("zram phase: skipped, needs root (zram-control, swapon)\n");
                return 0;
        }
        if (access("/sys/class/zram-control/hot_add", R_OK) < 0) {
                printf("zram phase: skipped, no /sys/class/zram-control (zram not in this kernel)\n");
                return 0;
        }
        if (zram_kernel_zswap_enabled("/sys"))
                printf("zram phase: note: kernel zswap is enabled and sits in front of zram\n");
        r = zram_new("/sys", "/proc", "lz4", 2 * (uint64_t)run->len, &zc.zram);
        if (r < 0) {
                printf("zram phase: could not set up a zram swap device: %s\n", strerror(-r));
                return r;
        }
        printf("zram phase: %s, lz4, disksize %zu MiB, swap priority 32767, page-cluster %d -> 0 "
               "(no swap readahead: one page per fault)\n",
               zram_device(zc.zram), 2 * run->len >> 20, zram_saved_page_cluster(zc.zram));
        r = phase_run(run, &b, res);
        rt = zram_teardown(zc.zram);
        if (rt < 0)
                printf("  zram teardown of %s failed: %s; check swapon --show\n",
                       zram_device(zc.zram), strerror(-rt));
        zc.zram = zram_free(zc.zram);
        return r ?: rt;
}

/* ---- output ---- */

static void print_row(const char *name, const char *fmt, double a, double b) {
        char sa[32] = "-", sb[32] = "-", sr[32] = "-";

        if (isfinite(a))
                snprintf(sa, sizeof(sa), fmt, a);
        if (isfinite(b))
                snprintf(sb, sizeof(sb), fmt, b);
        if (isfinite(a) && isfinite(b) && b != 0)
                snprintf(sr, sizeof(sr), "%.2f", a / b);
        printf("%-30s %12s %12s %8s\n", name, sa, sb, sr);
}

/* A value of r, or NAN if its phase did not complete. */
#define VAL(r, field) ((r)->done ? (double)(r)->field : NAN)

enum { CPU_DAEMON, CPU_SELF, CPU_TOTAL };

/* CPU seconds per GiB moved; a missing daemon counts as none in the total. */
static double cpu_per_gib(const Result *r, int which) {
        double daemon = isfinite(r->daemon_cpu_s) ? r->daemon_cpu_s : 0;
        double s = which == CPU_DAEMON ? r->daemon_cpu_s :
                   which == CPU_SELF ? r->self_cpu_s : daemon + r->self_cpu_s;

        return r->done && r->moved_gib > 0 ? s / r->moved_gib : NAN;
}

static void print_table(const Result *z, const Result *k) {
        printf("\nratio = zswapd / zram. Lower is better for latency and CPU, higher for MB/s, memory ratio and RssAnon drop.\n");
        printf("%-30s %12s %12s %8s\n", "metric", "zswapd", "zram-lz4", "ratio");
        print_row("pageout MB/s", "%.0f", VAL(z, pageout_mbs), VAL(k, pageout_mbs));
        print_row("fault seq median us", "%.2f", VAL(z, seq.median_us), VAL(k, seq.median_us));
        print_row("fault seq p99 us", "%.2f", VAL(z, seq.p99_us), VAL(k, seq.p99_us));
        print_row("fault seq p99.9 us", "%.2f", VAL(z, seq.p999_us), VAL(k, seq.p999_us));
        print_row("fault seq max us", "%.1f", VAL(z, seq.max_us), VAL(k, seq.max_us));
        print_row("fault rand median us", "%.2f", VAL(z, rnd.median_us), VAL(k, rnd.median_us));
        print_row("fault rand p99 us", "%.2f", VAL(z, rnd.p99_us), VAL(k, rnd.p99_us));
        print_row("fault rand p99.9 us", "%.2f", VAL(z, rnd.p999_us), VAL(k, rnd.p999_us));
        print_row("fault rand max us", "%.1f", VAL(z, rnd.max_us), VAL(k, rnd.max_us));
        print_row("read-back seq MB/s", "%.0f", VAL(z, seq.mbs), VAL(k, seq.mbs));
        print_row("read-back rand MB/s", "%.0f", VAL(z, rnd.mbs), VAL(k, rnd.mbs));
        print_row("memory ratio (orig/used)", "%.2f", VAL(z, mem_ratio), VAL(k, mem_ratio));
        print_row("CPU s/GiB moved: daemon", "%.3f", cpu_per_gib(z, CPU_DAEMON), NAN);
        print_row("CPU s/GiB moved: bench proc", "%.3f", cpu_per_gib(z, CPU_SELF), cpu_per_gib(k, CPU_SELF));
        print_row("CPU s/GiB moved: total", "%.3f", cpu_per_gib(z, CPU_TOTAL), cpu_per_gib(k, CPU_TOTAL));
        print_row("RssAnon drop % of region", "%.1f", VAL(z, rss_drop_pct), VAL(k, rss_drop_pct));
        print_row("region paged out % (mincore)", "%.1f", VAL(z, out_pct), VAL(k, out_pct));
        printf("CPU: zram compresses in the calling process, so its CPU is the bench's own (utime+stime,\n"
               "timed sections only); zswapd's is the daemon's (/proc/PID/stat, whole phase) plus the bench's.\n"
               "GiB moved = pages paged out + pages faulted back, both passes.\n");
}

static void print_machine(const Options *o, const char *corpus_dir) {
        struct utsname u;

        uname(&u);
        printf("machine: %ld CPUs, Linux %s %s; size %lu MiB (%lu pages); corpus %s; seed 0x%llx\n",
               sysconf(_SC_NPROCESSORS_ONLN), u.release, u.machine, o->size_mib, o->size_mib << 8,
               corpus_dir, RANDOM_SEED);
}

/* ---- main ---- */

static void help(void) {
        printf("bench-core [--zswapd PATH] [--size MiB] [--corpus DIR] [--compressor lz4|zstd]\n"
               "           [--workers N] [--skip-zram]\n\n"
               "Measure zswapd against kernel zram (lz4) on real heap pages.\n");
}

static int parse_argv(int argc, char **argv, Options *o) {
        static const struct option opts[] = {
                { "help", no_argument, NULL, 'h' },
                { "zswapd", required_argument, NULL, 'd' },
                { "size", required_argument, NULL, 's' },
                { "corpus", required_argument, NULL, 'c' },
                { "compressor", required_argument, NULL, 'C' },
                { "workers", required_argument, NULL, 'w' },
                { "skip-zram", no_argument, NULL, 'Z' },
                {}
        };
        char *end;
        int c;

        while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case 'd':
                        o->zswapd = optarg;
                        break;
                case 's':
                        o->size_mib = strtoul(optarg, &end, 10);
                        if (*end || o->size_mib == 0 || o->size_mib > (1UL << 20))
                                return fprintf(stderr, "bad --size: %s\n", optarg), -EINVAL;
                        break;
                case 'c':
                        o->corpus = optarg;
                        break;
                case 'C':
                        if (strcmp(optarg, "lz4") != 0 && strcmp(optarg, "zstd") != 0)
                                return fprintf(stderr, "bad --compressor: %s\n", optarg), -EINVAL;
                        o->compressor = optarg;
                        break;
                case 'w':
                        o->workers = strtol(optarg, &end, 10);
                        if (*end || o->workers < 1 || o->workers > 1024)
                                return fprintf(stderr, "bad --workers: %s\n", optarg), -EINVAL;
                        break;
                case 'Z':
                        o->skip_zram = true;
                        break;
                default:
                        return -EINVAL;
                }
        }
        if (optind < argc)
                return fprintf(stderr, "unexpected argument: %s\n", argv[optind]), -EINVAL;
        return 1;
}

static int run_init(Run *run, const Corpus *corpus, size_t size_mib) {
        run->corpus = corpus;
        run->len = size_mib << 20;
        run->n_pages = run->len / ZSWAP_PAGE_SIZE;
        run->resident = malloc(run->n_pages);
        run->lat = malloc(run->n_pages * sizeof(*run->lat));
        run->perm = malloc(run->n_pages * sizeof(*run->perm));
        if (!run->resident || !run->lat || !run->perm)
                return -ENOMEM;
        corpus_shuffle(run->perm, run->n_pages, RANDOM_SEED);
        return 0;
}

static void run_done(Run *run) {
        free(run->resident);
        free(run->lat);
        free(run->perm);
}

static void install_signals(void) {
        struct sigaction sa = { .sa_handler = on_signal }; /* no SA_RESTART: sleeps end early */

        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);
}

int main(int argc, char **argv) {
        Options o = { .compressor = "lz4", .size_mib = 1024, .workers = sysconf(_SC_NPROCESSORS_ONLN) };
        _cleanup_free_ char *exe = NULL, *corpus_dir = NULL;
        _cleanup_corpus_ Corpus *corpus = NULL;
        Result zres = { .daemon_cpu_s = NAN }, kres = { .daemon_cpu_s = NAN };
        const char *exe_dir;
        Run run = {};
        int r, failed = 0;

        r = parse_argv(argc, argv, &o);
        if (r <= 0)
                return r < 0 ? 2 : 0;
        exe = realpath("/proc/self/exe", NULL);
        exe_dir = exe ? dirname(exe) : ".";
        r = o.corpus ? ((corpus_dir = realpath(o.corpus, NULL)) ? 0 : -errno)
                     : corpus_find_dir(exe_dir, &corpus_dir);
        if (r == 0)
                r = corpus_load(corpus_dir, &corpus);
        if (r < 0)
                return fprintf(stderr, "cannot load the corpus (%s): %s; try --corpus or $ZSWAP_CORPUS\n",
                               corpus_dir ?: o.corpus ?: "not found", strerror(-r)), 1;
        if (run_init(&run, corpus, o.size_mib) < 0)
                return fprintf(stderr, "out of memory\n"), 1;
        install_signals();
        print_machine(&o, corpus_dir);

        failed |= zswapd_phase(&o, exe_dir, &run, &zres) < 0;
        if (o.skip_zram)
                printf("zram phase: skipped (--skip-zram)\n");
        else if (!interrupted)
                failed |= zram_phase(&run, &kres) < 0;
        run_done(&run);

        print_table(&zres, &kres);
        if (zres.bad_pages || kres.bad_pages)
                printf("VERIFICATION FAILED: %zu zswapd pages, %zu zram pages differ from what was written\n",
                       zres.bad_pages, kres.bad_pages);
        if (interrupted)
                return printf("interrupted by signal %d\n", (int)interrupted), 130;
        return failed || zres.bad_pages || kres.bad_pages ? 1 : 0;
}
