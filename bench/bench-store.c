/*
 * bench-store.c: batched store throughput.
 *
 * The seed (zswap: batched compression of large folios) measured usemem: 4
 * processes fill 1200 MiB each with the Silesia corpus and are pushed out
 * under memory.high; batching raised throughput by 51 % and cut the time to
 * free memory by 40 %. Here 4 processes each fill --size MiB with real heap
 * pages (corpus.c) and then all page their whole region out at the same
 * moment: zswapd through backend_pageout() (zswap_pageout), the kernel
 * references through MADV_PAGEOUT into a zram-lz4 device or zswap-lzo. The
 * daemon runs with --batch 1, 8, 32, 512 (its default) and --workers 1 and 2;
 * every configuration gets a fresh backend, all of them in one run, so the
 * ratios to zram-lz4 compare like with like on this noisy machine. With
 * --repeat N the configurations take turns N times and medians are shown.
 *
 * What is measured, per configuration:
 *   throughput     bytes paged out (mincore() after the call) over the time
 *                  from the common start to the last process's return; also
 *                  the mean of each process's own bytes / time (the seed's
 *                  "average throughput").
 *   time to free   the parent samples RssAnon of the 4 processes
 *                  (/proc/PID/status, every --poll-us) from the start; a
 *                  process's memory is free at the first sample where 99 %
 *                  of its eventual drop has happened. Reported for the last
 *                  process (all memory free) and as the mean.
 *   CPU            the daemon's (utime+stime, whole daemon), its compression
 *                  workers' alone (threads at nice 10 or SCHED_IDLE; run
 *                  time from schedstat), and the 4 processes' own over their
 *                  pageout call (getrusage: the kernel compresses there; for
 *                  zswapd that is the library's agent moving pages).
 *   codec target   eviction throughput per worker thread of at least 0.9x
 *                  the raw codec speed on the same data.
 *                  Raw speed: this process compresses the same pages with
 *                  liblz4/libzstd exactly as a worker calls it, one thread,
 *                  bytes / thread CPU time, measured right before and after
 *                  each zswapd configuration (other work on the machine
 *                  comes and goes) and once up front with 2 threads at once
 *                  and with the worker's copies added. Daemon: bytes evicted
 *                  / the workers' CPU time (schedstat), and for --workers 1
 *                  also bytes / wall time of the pageout.
 * After all processes are out and the figures taken, each process reads its
 * region back in address order and checks every page against the corpus.
 *
 * The parent owns the backends and only samples /proc; the children own the
 * memory. Gates are pipes whose write end the parent closes, so that all
 * children leave read() at once. SIGINT/SIGTERM/SIGHUP set a flag in the
 * parent, which stops after the current configuration has been torn down;
 * children take the default action and the parent reaps them.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "zram.h"
#include "bench-util.h"
#include "corpus.h"
#include "macro.h"

#define MAX_PROCS 16
#define MAX_LIST 8
#define MAX_CONFIGS 40
#define WORKER_NICE 10          /* zswapd's default --worker-nice */
#define FREE_FRACTION 0.99      /* memory is free once this much of the drop happened */
#define READY_TIMEOUT_S 120
#define PAGEOUT_TIMEOUT_S 300
#define VERIFY_TIMEOUT_S 300

typedef struct Options {
        const char *zswapd;
        const char *corpus;
        const char *compressor;
        unsigned long size_mib; /* per process */
        unsigned procs;
        unsigned batches[MAX_LIST], nbatches;
        unsigned workers[MAX_LIST], nworkers;
        unsigned repeat;
        unsigned poll_us;
        bool cross;
        bool skip_kernel;
        bool skip_zswapd;
} Options;

typedef struct Config {
        char name[40];
        BackendKind kind;
        const char *compressor;
        unsigned batch, workers; /* zswapd only */
} Config;

/* One child's account, in memory shared with the parent. */
typedef struct ChildShared {
        _Atomic uint64_t t_end;  /* CLOCK_MONOTONIC ns its pageout returned; 0 before */
        int64_t pageout_ret;     /* what backend_pageout() returned */
        uint64_t pages_out;      /* pages mincore() found out after it */
        double cpu_s, sys_s;     /* the process's CPU over its pageout call */
        uint64_t t_verified;     /* when its read-back and check ended */
        uint64_t bad_pages, first_bad;
        int err;                 /* first failure, negative errno */
        const char *failed_step;
} ChildShared;

typedef struct Shared {
        _Atomic int abort;       /* set by the parent: skip the pageout */
        ChildShared child[MAX_PROCS];
} Shared;

/*
 * The figures of one configuration run. Every field is a double so that
 * medians over --repeat runs go field by field (result_median()).
 */
typedef struct Result {
        double done;             /* 1 if complete, else NAN */
        double total_mbs;        /* all bytes out / (last return - start) */
        double avg_mbs;          /* mean of each process's bytes / its time */
        double free_all_s, free_avg_s;
        double rss_drop_pct;     /* RssAnon drop, % of the regions */
        double out_pct;          /* pages out (mincore), % of the regions */
        double daemon_cpu_s, worker_cpu_s, worker_sys_s, worker_threads;
        double client_cpu_s, client_sys_s;
        double mem_ratio;        /* backend: original / memory used */
        double bytes_out;
        double readback_mbs;
        double bad_pages;
        double raw_mbs;          /* raw codec MB/s per CPU-s around this run (zswapd configs) */
        double wall_s;           /* start to the last pageout's return */
} Result;

#define RESULT_FIELDS (sizeof(Result) / sizeof(double))

typedef struct Sample {
        uint64_t t;
        long kib;
} Sample;

typedef struct Trace {
        Sample *v;
        size_t n, cap;
        long full_kib, final_kib;
        bool gone;               /* reaped early */
        int status;
} Trace;

/* ---- child ---- */

/* Block until the parent closes the gate's write end. */
static void gate_wait(int fd) {
        char c;

        while (read(fd, &c, 1) < 0 && errno == EINTR)
                ;
}

static double rusage_s(const struct timeval *a) {
        return a->tv_sec + a->tv_usec / 1e6;
}

static int child_fail(ChildShared *cs, const char *step, int r) {
        cs->err = r;
        cs->failed_step = step;
        return r;
}

/* Page out; everything the parent needs goes into cs. */
static void child_pageout(BackendClient *c, uint8_t *region, size_t len, unsigned char *vec, ChildShared *cs) {
        struct rusage ru0, ru1;
        uint64_t t1;
        int64_t n;

        getrusage(RUSAGE_SELF, &ru0);
        n = backend_pageout(c, region, len);
        t1 = bench_now_ns();
        getrusage(RUSAGE_SELF, &ru1);
        cs->pageout_ret = n;
        if (n < 0)
                child_fail(cs, "pageout", (int)n);
        cs->pages_out = len / ZSWAP_PAGE_SIZE - zram_resident_pages(region, len, vec);
        cs->cpu_s = rusage_s(&ru1.ru_utime) + rusage_s(&ru1.ru_stime) - rusage_s(&ru0.ru_utime) -
                    rusage_s(&ru0.ru_stime);
        cs->sys_s = rusage_s(&ru1.ru_stime) - rusage_s(&ru0.ru_stime);
        /* release: the parent reads the fields above once it sees t_end */
        atomic_store_explicit(&cs->t_end, t1, memory_order_release);
}

static int child_main(const Options *o, const Corpus *corpus, Backend *b, Shared *sh, unsigned idx,
                      int ready_fd, int go_fd, int verify_fd) {
        ChildShared *cs = &sh->child[idx];
        size_t len = o->size_mib << 20, n_pages = len / ZSWAP_PAGE_SIZE;
        _cleanup_free_ unsigned char *vec = malloc(n_pages);
        BackendClient *c = NULL;
        uint8_t *region = MAP_FAILED;
        bool attached = false;
        int r;

        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        r = vec ? backend_client_new(b, &c) : -ENOMEM;
        if (r < 0)
                child_fail(cs, "client", r);
        if (r == 0) {
                region = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (region == MAP_FAILED)
                        r = child_fail(cs, "mmap", -errno);
        }
        if (r == 0) {
                (void)madvise(region, len, MADV_NOHUGEPAGE); /* one page, one fault, as in bench-core */
                corpus_fill(corpus, region, n_pages);
                r = backend_attach(c, region, len);
                if (r < 0)
                        child_fail(cs, "attach", r);
                attached = r == 0;
        }
        (void)!write(ready_fd, "R", 1);
        close(ready_fd);
        gate_wait(go_fd);
        if (r == 0 && !atomic_load_explicit(&sh->abort, memory_order_acquire))
                child_pageout(c, region, len, vec, cs);
        else
                atomic_store_explicit(&cs->t_end, bench_now_ns(), memory_order_release);
        gate_wait(verify_fd);
        if (region != MAP_FAILED) {
                size_t first_bad = 0;

                cs->bad_pages = corpus_verify(corpus, region, n_pages, &first_bad);
                cs->first_bad = first_bad;
                cs->t_verified = bench_now_ns();
        }
        if (attached && (r = backend_detach(c, region, len)) < 0)
                child_fail(cs, "detach", r);
        backend_client_free(c);
        return cs->err || cs->bad_pages ? 1 : 0;
}

/* ---- parent ---- */

static int trace_add(Trace *t, uint64_t now, long kib) {
        if (t->n == t->cap) {
                size_t cap = t->cap ? 2 * t->cap : 4096;
                Sample *v = realloc(t->v, cap * sizeof(*v));

                if (!v)
                        return -ENOMEM;
                t->v = v;
                t->cap = cap;
        }
        t->v[t->n++] = (Sample){ now, kib };
        return 0;
}

/* Seconds from t_go to the first sample with FREE_FRACTION of the drop done; NAN if there was no drop. */
static double trace_free_s(const Trace *t, uint64_t t_go, size_t len) {
        double drop = t->full_kib - t->final_kib;
        double threshold = t->full_kib - FREE_FRACTION * drop;

        if (drop * 1024.0 < len / 2.0)
                return NAN; /* less than half the region ever left: not "free" */
        for (size_t i = 0; i < t->n; i++)
                if (t->v[i].kib <= threshold)
                        return (t->v[i].t - t_go) / 1e9;
        return NAN;
}

static bool child_ended(Shared *sh, unsigned i) {
        return atomic_load_explicit(&sh->child[i].t_end, memory_order_acquire) != 0;
}

/* Sample RssAnon of every child until all have returned from their pageout. */
static int sample_until_out(const Options *o, Shared *sh, const pid_t *pids, Trace *tr, uint64_t t_go) {
        for (;;) {
                unsigned ended = 0;
                uint64_t now = bench_now_ns();

                for (unsigned i = 0; i < o->procs; i++) {
                        long kib;

                        if (!tr[i].gone && waitpid(pids[i], &tr[i].status, WNOHANG) == pids[i])
                                tr[i].gone = true;
                        if (tr[i].gone || child_ended(sh, i)) {
                                ended++;
                                continue;
                        }
                        if (bench_rss_anon_kib("/proc", pids[i], &kib) == 0 && trace_add(&tr[i], now, kib) < 0)
                                return -ENOMEM;
                }
                if (ended == o->procs)
                        return 0;
                if (bench_interrupted)
                        return -EINTR;
                if (now - t_go > PAGEOUT_TIMEOUT_S * 1000000000ULL)
                        return -ETIMEDOUT;
                bench_sleep_us(o->poll_us);
        }
}

/* Reap every child; after timeout_s, kill the rest. Returns how many were killed. */
static unsigned reap_all(const Options *o, const pid_t *pids, Trace *tr, unsigned timeout_s) {
        uint64_t t0 = bench_now_ns();
        unsigned left, killed = 0;

        do {
                left = 0;
                for (unsigned i = 0; i < o->procs; i++) {
                        if (tr[i].gone)
                                continue;
                        if (waitpid(pids[i], &tr[i].status, WNOHANG) == pids[i])
                                tr[i].gone = true;
                        else
                                left++;
                }
                if (left && bench_now_ns() - t0 > timeout_s * 1000000000ULL) {
                        for (unsigned i = 0; i < o->procs; i++)
                                if (!tr[i].gone) {
                                        printf("    process %u (pid %d) still running after %u s: killing it\n", i,
                                               (int)pids[i], timeout_s);
                                        kill(pids[i], SIGKILL);
                                        waitpid(pids[i], &tr[i].status, 0);
                                        tr[i].gone = true;
                                        killed++;
                                }
                        left = 0;
                }
                if (left)
                        bench_sleep_us(2000);
        } while (left);
        return killed;
}

/* Read one byte per child from the ready pipe. */
static int wait_ready(const Options *o, int fd) {
        unsigned got = 0;

        while (got < o->procs) {
                struct pollfd p = { fd, POLLIN, 0 };
                char buf[MAX_PROCS];
                ssize_t k;
                int n = poll(&p, 1, READY_TIMEOUT_S * 1000);

                if (n < 0 && errno == EINTR && !bench_interrupted)
                        continue;
                if (n <= 0)
                        return bench_interrupted ? -EINTR : -ETIMEDOUT;
                k = read(fd, buf, o->procs - got);
                if (k <= 0)
                        return -ECHILD; /* every write end closed early: children died */
                got += (unsigned)k;
        }
        return 0;
}

static void summarize(const Options *o, Shared *sh, Trace *tr, uint64_t t_go, uint64_t t_verify, Result *res) {
        size_t len = o->size_mib << 20;
        double sum_mbs = 0, sum_free = 0, free_all = 0, drop = 0;
        uint64_t last = 0, last_v = 0, bytes = 0;
        unsigned nfree = 0;

        for (unsigned i = 0; i < o->procs; i++) {
                ChildShared *cs = &sh->child[i];
                uint64_t t_end = atomic_load_explicit(&cs->t_end, memory_order_acquire);
                uint64_t b = cs->pages_out * ZSWAP_PAGE_SIZE;
                double f = trace_free_s(&tr[i], t_go, len);

                bytes += b;
                last = MAX(last, t_end);
                last_v = MAX(last_v, cs->t_verified);
                sum_mbs += t_end > t_go ? b / ((t_end - t_go) / 1e3) : 0;
                res->client_cpu_s += cs->cpu_s;
                res->client_sys_s += cs->sys_s;
                res->bad_pages += cs->bad_pages;
                drop += (tr[i].full_kib - tr[i].final_kib) * 1024.0;
                if (isfinite(f)) {
                        nfree++;
                        sum_free += f;
                        free_all = MAX(free_all, f);
                }
        }
        res->bytes_out = bytes;
        res->out_pct = 100.0 * bytes / ((double)len * o->procs);
        res->rss_drop_pct = 100.0 * drop / ((double)len * o->procs);
        res->total_mbs = last > t_go ? bytes / ((last - t_go) / 1e3) : NAN;
        res->wall_s = last > t_go ? (last - t_go) / 1e9 : NAN;
        res->avg_mbs = sum_mbs / o->procs;
        res->free_all_s = nfree == o->procs ? free_all : NAN;
        res->free_avg_s = nfree ? sum_free / nfree : NAN;
        res->readback_mbs = last_v > t_verify ? (double)len * o->procs / ((last_v - t_verify) / 1e3) : NAN;
}

static void report_children(const Options *o, Shared *sh, const Trace *tr, uint64_t t_go) {
        for (unsigned i = 0; i < o->procs; i++) {
                ChildShared *cs = &sh->child[i];
                uint64_t t_end = atomic_load_explicit(&cs->t_end, memory_order_acquire);

                printf("    process %u: pageout returned %" PRId64 " after %.3f s, %" PRIu64
                       " pages out, RssAnon %ld -> %ld KiB, free after %.3f s; %" PRIu64 " bad pages",
                       i, cs->pageout_ret, t_end > t_go ? (t_end - t_go) / 1e9 : NAN, cs->pages_out,
                       tr[i].full_kib, tr[i].final_kib, trace_free_s(&tr[i], t_go, o->size_mib << 20),
                       cs->bad_pages);
                if (cs->bad_pages)
                        printf(" (first: page %" PRIu64 ")", cs->first_bad);
                if (cs->err)
                        printf("; %s failed: %s", cs->failed_step, strerror(-cs->err));
                if (tr[i].gone && !(WIFEXITED(tr[i].status) && WEXITSTATUS(tr[i].status) <= 1))
                        printf("; ended with wait status 0x%x", tr[i].status);
                printf("\n");
        }
}

typedef struct DaemonCpu {
        double total, workers, workers_sys;
        unsigned nworkers;
} DaemonCpu;

/* The daemon's whole CPU and its workers' alone; NAN where there is no daemon. */
static void daemon_cpu(Backend *b, DaemonCpu *ret) {
        pid_t pid = backend_daemon_pid(b);

        *ret = (DaemonCpu){ NAN, NAN, NAN, 0 };
        if (pid <= 0)
                return;
        ret->total = backend_daemon_cpu_s(b);
        if (bench_worker_cpu_s("/proc", pid, WORKER_NICE, &ret->workers, &ret->workers_sys, &ret->nworkers) < 0)
                ret->workers = ret->workers_sys = NAN;
}

static int run_phase(const Options *o, Backend *b, Shared *sh, const pid_t *pids, Trace *tr, int go_wr,
                     int verify_wr, Result *res) {
        DaemonCpu d0, d1;
        uint64_t t_go, t_verify;
        uint64_t orig = 0, used = 0;
        int r;

        for (unsigned i = 0; i < o->procs; i++)
                if (sh->child[i].err || bench_rss_anon_kib("/proc", pids[i], &tr[i].full_kib) < 0) {
                        atomic_store_explicit(&sh->abort, 1, memory_order_release);
                        r = -ECHILD;
                }
        daemon_cpu(b, &d0);
        t_go = bench_now_ns();
        close(go_wr);
        r = atomic_load_explicit(&sh->abort, memory_order_acquire) ? -ECHILD :
            sample_until_out(o, sh, pids, tr, t_go);
        if (r == -ETIMEDOUT)
                printf("    HANG: not every pageout returned within %d s (daemon pid %d)\n", PAGEOUT_TIMEOUT_S,
                       (int)backend_daemon_pid(b));
        bench_sleep_us(20000);
        for (unsigned i = 0; i < o->procs; i++) {
                if (bench_rss_anon_kib("/proc", pids[i], &tr[i].final_kib) < 0)
                        tr[i].final_kib = tr[i].full_kib;
                trace_add(&tr[i], bench_now_ns(), tr[i].final_kib);
        }
        daemon_cpu(b, &d1);
        res->daemon_cpu_s = d1.total - d0.total;
        res->worker_cpu_s = d1.workers - d0.workers;
        res->worker_sys_s = d1.workers_sys - d0.workers_sys;
        res->worker_threads = d1.nworkers;
        if (backend_memory(b, &orig, &used) == 0 && used)
                res->mem_ratio = (double)orig / used;
        t_verify = bench_now_ns();
        close(verify_wr);
        if (reap_all(o, pids, tr, VERIFY_TIMEOUT_S))
                printf("    HANG: read-back did not finish within %d s (daemon pid %d)\n", VERIFY_TIMEOUT_S,
                       (int)backend_daemon_pid(b));
        summarize(o, sh, tr, t_go, t_verify, res);
        report_children(o, sh, tr, t_go);
        return r;
}

static int run_procs(const Options *o, const Corpus *corpus, Backend *b, Result *res) {
        int ready[2] = { -1, -1 }, go[2] = { -1, -1 }, verify[2] = { -1, -1 };
        pid_t pids[MAX_PROCS];
        Trace tr[MAX_PROCS] = {};
        unsigned forked = 0;
        Shared *sh;
        int r = 0;

        sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (sh == MAP_FAILED)
                return -errno;
        if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0 || pipe2(verify, O_CLOEXEC) < 0)
                r = -errno;
        fflush(stdout);
        for (; r == 0 && forked < o->procs; forked++) {
                pids[forked] = fork();
                if (pids[forked] < 0) {
                        r = -errno;
                        break;
                }
                if (pids[forked] == 0) {
                        close(ready[0]);
                        close(go[1]);
                        close(verify[1]);
                        _exit(child_main(o, corpus, b, sh, forked, ready[1], go[0], verify[0]));
                }
        }
        ready[1] = safe_close(ready[1]);
        go[0] = safe_close(go[0]);
        verify[0] = safe_close(verify[0]);
        if (r == 0)
                r = wait_ready(o, ready[0]);
        if (r == 0) {
                r = run_phase(o, b, sh, pids, tr, TAKE_FD(go[1]), TAKE_FD(verify[1]), res);
        } else {
                printf("    the processes did not get ready: %s\n", strerror(-r));
                atomic_store_explicit(&sh->abort, 1, memory_order_release);
                safe_close(go[1]);
                safe_close(verify[1]);
                reap_all(&(Options){ .procs = forked }, pids, tr, 10);
        }
        for (unsigned i = 0; i < forked; i++)
                if (sh->child[i].err && r == 0)
                        r = sh->child[i].err;
        res->done = r == 0 ? 1 : NAN;
        for (unsigned i = 0; i < MAX_PROCS; i++)
                free(tr[i].v);
        safe_close(ready[0]);
        munmap(sh, sizeof(*sh));
        return r;
}

static int zswapd_path(const Options *o, char **ret) {
        _cleanup_free_ char *exe = NULL;
        char *slash;

        if (o->zswapd)
                return (*ret = strdup(o->zswapd)) ? 0 : -ENOMEM;
        exe = realpath("/proc/self/exe", NULL);
        if (!exe)
                return -errno;
        slash = strrchr(exe, '/');
        *slash = 0;
        return asprintf(ret, "%s/../daemon/zswapd", exe) < 0 ? -ENOMEM : 0;
}

/*
 * The raw codec speed right around one run: other work on this machine
 * comes and goes within seconds, so each configuration is compared with
 * what one thread compressed just before and just after it.
 */
#define RAW_QUICK_PAGES 16384
static double raw_quick(const Options *o, const Corpus *corpus) {
        CodecSpeed cs;

        return bench_codec_speed(corpus, o->compressor, 0, RAW_QUICK_PAGES, 3, 1, false, &cs) < 0 ? NAN : cs.cpu_mbs;
}

static int run_config(const Options *o, const Config *cfg, const Corpus *corpus, Result *res) {
        _cleanup_free_ char *path = NULL;
        char batch[16], workers[16];
        const char *args[] = { "--batch", batch, "--workers", workers, NULL };
        BackendConfig bc = {
                .kind = cfg->kind,
                .compressor = cfg->compressor,
                .size_bytes = 2 * (uint64_t)o->procs * (o->size_mib << 20),
                .zswapd_args = args,
        };
        Backend *b = NULL;
        double raw0 = NAN, raw1 = NAN;
        int r, rt;

        snprintf(batch, sizeof(batch), "%u", cfg->batch);
        snprintf(workers, sizeof(workers), "%u", cfg->workers);
        if (cfg->kind == BACKEND_ZSWAPD) {
                r = zswapd_path(o, &path);
                if (r < 0)
                        return r;
                bc.zswapd_path = path;
        }
        printf("  %s:\n", cfg->name);
        fflush(stdout);
        if (cfg->kind == BACKEND_ZSWAPD)
                raw0 = raw_quick(o, corpus);
        r = backend_setup(&bc, &b);
        if (r < 0) {
                printf("    cannot set up %s: %s\n", cfg->name, strerror(-r));
                return r;
        }
        r = run_procs(o, corpus, b, res);
        rt = backend_teardown(b);
        if (cfg->kind == BACKEND_ZSWAPD) {
                raw1 = raw_quick(o, corpus);
                res->raw_mbs = (raw0 + raw1) / 2;
                printf("    raw %s codec, 1 thread, just before / after: %.0f / %.0f MB/s per CPU-second\n",
                       o->compressor, raw0, raw1);
        }
        if (rt < 0)
                printf("    teardown of %s failed: %s (check swapon --show)\n", cfg->name, strerror(-rt));
        return r ?: rt;
}

/* ---- configurations and output ---- */

static unsigned max_of(const unsigned *v, unsigned n) {
        unsigned m = 0;

        for (unsigned i = 0; i < n; i++)
                m = MAX(m, v[i]);
        return m;
}

static void config_zswapd(Config *c, const Options *o, unsigned batch, unsigned workers) {
        *c = (Config){ .kind = BACKEND_ZSWAPD, .compressor = o->compressor, .batch = batch, .workers = workers };
        snprintf(c->name, sizeof(c->name), "zswapd-%s b%u w%u", o->compressor, batch, workers);
}

/* zram-lz4 first (the reference), then the batch sweep at the most workers,
 * the worker sweep at the last batch size (512 by default), zswap-lzo. */
static unsigned build_configs(const Options *o, Config *v) {
        unsigned n = 0, wmax = max_of(o->workers, o->nworkers), blast = o->batches[o->nbatches - 1];

        if (!o->skip_kernel)
                v[n++] = (Config){ .name = "zram-lz4", .kind = BACKEND_ZRAM, .compressor = "lz4" };
        if (!o->skip_zswapd) {
                for (unsigned i = 0; i < o->nbatches; i++)
                        for (unsigned j = 0; j < o->nworkers; j++)
                                if (o->cross || o->workers[j] == wmax)
                                        config_zswapd(&v[n++], o, o->batches[i], o->workers[j]);
                for (unsigned j = 0; !o->cross && j < o->nworkers; j++)
                        if (o->workers[j] != wmax)
                                config_zswapd(&v[n++], o, blast, o->workers[j]);
        }
        if (!o->skip_kernel)
                v[n++] = (Config){ .name = "zswap-lzo", .kind = BACKEND_KZSWAP, .compressor = "lzo" };
        return n;
}

static void result_median(Result *runs, unsigned n, Result *ret) {
        double v[64];

        for (size_t f = 0; f < RESULT_FIELDS; f++) {
                for (unsigned i = 0; i < n; i++)
                        v[i] = ((double *)&runs[i])[f];
                ((double *)ret)[f] = bench_median(v, n);
        }
        /* bad pages add up over the runs: one bad page anywhere counts */
        ret->bad_pages = 0;
        for (unsigned i = 0; i < n; i++)
                ret->bad_pages += runs[i].bad_pages;
}

#define F(buf, fmt, v) bench_fmt(buf, sizeof(buf), fmt, v)
#define R(buf, a, b) bench_ratio(buf, sizeof(buf), a, b)

static void print_throughput(const Config *cfg, const Result *m, unsigned n, const Result *ref) {
        printf("\nStore throughput and time to free memory; ratio = config / zram-lz4 (higher is better for MB/s,\n"
               "lower for seconds)\n");
        printf("%-24s %9s %6s %9s %6s %8s %6s %8s %6s %7s %6s %6s\n", "config", "MB/s", "ratio", "MB/s/proc",
               "ratio", "free s", "ratio", "free avg", "ratio", "drop %", "out %", "bad");
        for (unsigned i = 0; i < n; i++) {
                const Result *x = &m[i];
                char a[6][24], q[4][16];

                printf("%-24s %9s %6s %9s %6s %8s %6s %8s %6s %7s %6s %6.0f\n", cfg[i].name,
                       F(a[0], "%.0f", x->total_mbs), R(q[0], x->total_mbs, ref->total_mbs),
                       F(a[1], "%.0f", x->avg_mbs), R(q[1], x->avg_mbs, ref->avg_mbs),
                       F(a[2], "%.3f", x->free_all_s), R(q[2], x->free_all_s, ref->free_all_s),
                       F(a[3], "%.3f", x->free_avg_s), R(q[3], x->free_avg_s, ref->free_avg_s),
                       F(a[4], "%.1f", x->rss_drop_pct), F(a[5], "%.1f", x->out_pct), x->bad_pages);
        }
}

static void print_cpu(const Config *cfg, const Result *m, unsigned n, const Result *ref) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

        printf("\nCPU and memory. daemon = zswapd utime+stime; workers = its compression threads (schedstat);\n"
               "client = the processes over their pageout call (kernel: where zram/zswap compress).\n"
               "CPU s/GiB = (daemon + client) / GiB paged out. cpu %% = (daemon + client) / pageout wall time,\n"
               "as a share of all %ld CPUs: the kernel's pageout is CPU-bound, so a kernel row far below\n"
               "100 %% means other work on the machine took the CPUs meanwhile. readback = MB/s of the\n"
               "check that reads every page back, all processes at once.\n", ncpu);
        printf("%-24s %8s %8s %8s %8s %9s %6s %6s %9s %9s %6s\n", "config", "daemon s", "workers", "client s",
               "sys s", "CPU s/GiB", "ratio", "cpu %", "mem ratio", "readback", "ratio");
        for (unsigned i = 0; i < n; i++) {
                const Result *x = &m[i];
                double daemon = isfinite(x->daemon_cpu_s) ? x->daemon_cpu_s : 0;
                double gib = x->bytes_out / (1024.0 * 1024 * 1024);
                double per = gib > 0 ? (daemon + x->client_cpu_s) / gib : NAN;
                double rgib = ref->bytes_out / (1024.0 * 1024 * 1024);
                double rper = rgib > 0 ? ref->client_cpu_s / rgib : NAN;
                double cpct = 100 * (daemon + x->client_cpu_s) / x->wall_s / ncpu;
                char a[8][24], q[2][16];

                printf("%-24s %8s %8s %8s %8s %9s %6s %6s %9s %9s %6s\n", cfg[i].name,
                       F(a[0], "%.2f", x->daemon_cpu_s), F(a[1], "%.2f", x->worker_cpu_s),
                       F(a[2], "%.2f", x->client_cpu_s), F(a[3], "%.2f", x->client_sys_s), F(a[4], "%.2f", per),
                       R(q[0], per, rper), F(a[7], "%.0f", cpct), F(a[5], "%.2f", x->mem_ratio),
                       F(a[6], "%.0f", x->readback_mbs),
                       R(q[1], x->readback_mbs, ref->readback_mbs));
        }
}

/* The raw codec figures the workers are compared with. */
typedef struct Raw {
        CodecSpeed one;      /* 1 thread: the codec target's "raw codec speed" */
        CodecSpeed par;      /* as many threads as the most workers, at once; per thread */
        CodecSpeed copies;   /* 1 thread, with the worker's copies */
        unsigned par_threads;
} Raw;

static int raw_measure(const Options *o, const Corpus *corpus, Raw *raw) {
        size_t pages = MIN(o->size_mib << 8, 65536UL); /* up to 256 MiB: past every cache */
        int r;

        raw->par_threads = max_of(o->workers, o->nworkers);
        r = bench_codec_speed(corpus, o->compressor, 0, pages, 3, 1, false, &raw->one);
        if (r == 0 && raw->par_threads > 1)
                r = bench_codec_speed(corpus, o->compressor, 0, pages, 3, raw->par_threads, false, &raw->par);
        if (r == 0)
                r = bench_codec_speed(corpus, o->compressor, 0, pages, 3, 1, true, &raw->copies);
        return r;
}

static void print_codec(const Options *o, const Config *cfg, const Result *m, unsigned n, const Raw *raw) {
        const CodecSpeed *cs = &raw->one;

        printf("\nCodec target: eviction throughput per worker thread >= 0.9x the raw codec speed.\n"
               "Up front: %s compress of the same pages in this process, 1 thread: %.0f MB/s per CPU-second\n"
               "     (median of 3 passes, range %.0f-%.0f; wall %.0f MB/s; ratio %.2f, %zu pages over 3/4 page)\n",
               o->compressor, cs->cpu_mbs, cs->min_mbs, cs->max_mbs, cs->wall_mbs, cs->ratio, cs->incompressible);
        if (raw->par_threads > 1)
                printf("     %u threads at once: %.0f MB/s per CPU-second per thread (range %.0f-%.0f)\n",
                       raw->par_threads, raw->par.cpu_mbs, raw->par.min_mbs, raw->par.max_mbs);
        printf("     1 thread with the worker's copies (512-page bounce copy in, compressed bytes out to\n"
               "     fresh memory): %.0f MB/s per CPU-second (%.2fx raw)\n",
               raw->copies.cpu_mbs, raw->copies.cpu_mbs / cs->cpu_mbs);
        printf("Each configuration below is compared with the raw speed measured right around it (\"raw\":\n"
               "1 thread, %d pages, before and after, mean). per worker CPU: bytes paged out / the workers'\n"
               "CPU time (schedstat of the threads at nice %d); \"sys\" is their stime (staging reads, pool page\n"
               "faults; from clock ticks, so approximate); user-s = CPU - sys, the codec's own share.\n"
               "per worker wall: bytes paged out / pageout wall time / workers (bounded by the workers only\n"
               "when they are the bottleneck; with 1 worker it is the target measured on wall time).\n",
               RAW_QUICK_PAGES, WORKER_NICE);
        printf("%-24s %5s %6s %8s %6s %10s %6s %11s %6s %11s %6s\n", "config", "thr", "raw", "worker s",
               "sys s", "MB/s/CPU-s", "x raw", "MB/s/user-s", "x raw", "MB/s/worker", "x raw");
        for (unsigned i = 0; i < n; i++) {
                const Result *x = &m[i];
                double per_cpu, per_user, per_wall;
                char a[6][24], q[3][16];

                if (cfg[i].kind != BACKEND_ZSWAPD)
                        continue;
                per_cpu = x->worker_cpu_s > 0 ? x->bytes_out / 1e6 / x->worker_cpu_s : NAN;
                per_user = x->worker_cpu_s > x->worker_sys_s ? x->bytes_out / 1e6 / (x->worker_cpu_s - x->worker_sys_s)
                                                             : NAN;
                per_wall = x->total_mbs / cfg[i].workers;
                printf("%-24s %5.0f %6s %8s %6s %10s %6s %11s %6s %11s %6s\n", cfg[i].name, x->worker_threads,
                       F(a[5], "%.0f", x->raw_mbs), F(a[0], "%.3f", x->worker_cpu_s), F(a[3], "%.2f", x->worker_sys_s),
                       F(a[1], "%.0f", per_cpu), R(q[0], per_cpu, x->raw_mbs), F(a[4], "%.0f", per_user),
                       R(q[2], per_user, x->raw_mbs), F(a[2], "%.0f", per_wall), R(q[1], per_wall, x->raw_mbs));
        }
}

/* ---- main ---- */

static void help(void) {
        printf("bench-store [--size MiB] [--procs N] [--batches LIST] [--workers LIST] [--cross]\n"
               "            [--repeat N] [--compressor lz4|zstd] [--poll-us N] [--zswapd PATH]\n"
               "            [--corpus DIR] [--skip-kernel] [--skip-zswapd]\n\n"
               "Batched store throughput: N processes (default 4) each fill --size MiB (default 256)\n"
               "of real heap pages and page it all out at once; throughput and time until their\n"
               "memory is free, for zswapd --batch LIST (default 1,8,32,512) at the most workers\n"
               "and --workers LIST (default 1,2) at the last batch size (--cross: every pair),\n"
               "next to kernel zram-lz4 and zswap-lzo in the same run. Needs root.\n");
}

static int parse_argv(int argc, char **argv, Options *o) {
        static const struct option opts[] = {
                { "help", no_argument, NULL, 'h' },
                { "size", required_argument, NULL, 's' },
                { "procs", required_argument, NULL, 'p' },
                { "batches", required_argument, NULL, 'b' },
                { "workers", required_argument, NULL, 'w' },
                { "cross", no_argument, NULL, 'x' },
                { "repeat", required_argument, NULL, 'r' },
                { "compressor", required_argument, NULL, 'C' },
                { "poll-us", required_argument, NULL, 'P' },
                { "zswapd", required_argument, NULL, 'd' },
                { "corpus", required_argument, NULL, 'c' },
                { "skip-kernel", no_argument, NULL, 'K' },
                { "skip-zswapd", no_argument, NULL, 'Z' },
                {}
        };
        unsigned v[1], n;
        int c;

        while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case 's':
                        if (bench_parse_list(optarg, 1, 1 << 20, v, 1, &n) < 0)
                                return fprintf(stderr, "bad --size: %s\n", optarg), -EINVAL;
                        o->size_mib = v[0];
                        break;
                case 'p':
                        if (bench_parse_list(optarg, 1, MAX_PROCS, &o->procs, 1, &n) < 0)
                                return fprintf(stderr, "bad --procs (1..%d): %s\n", MAX_PROCS, optarg), -EINVAL;
                        break;
                case 'b':
                        if (bench_parse_list(optarg, 1, 512, o->batches, MAX_LIST, &o->nbatches) < 0)
                                return fprintf(stderr, "bad --batches (1..512, comma-separated): %s\n", optarg),
                                       -EINVAL;
                        break;
                case 'w':
                        if (bench_parse_list(optarg, 1, 64, o->workers, MAX_LIST, &o->nworkers) < 0)
                                return fprintf(stderr, "bad --workers (1..64, comma-separated): %s\n", optarg),
                                       -EINVAL;
                        break;
                case 'x':
                        o->cross = true;
                        break;
                case 'r':
                        if (bench_parse_list(optarg, 1, 64, &o->repeat, 1, &n) < 0)
                                return fprintf(stderr, "bad --repeat (1..64): %s\n", optarg), -EINVAL;
                        break;
                case 'C':
                        if (strcmp(optarg, "lz4") != 0 && strcmp(optarg, "zstd") != 0)
                                return fprintf(stderr, "bad --compressor: %s\n", optarg), -EINVAL;
                        o->compressor = optarg;
                        break;
                case 'P':
                        if (bench_parse_list(optarg, 100, 1000000, &o->poll_us, 1, &n) < 0)
                                return fprintf(stderr, "bad --poll-us (100..1000000): %s\n", optarg), -EINVAL;
                        break;
                case 'd':
                        o->zswapd = optarg;
                        break;
                case 'c':
                        o->corpus = optarg;
                        break;
                case 'K':
                        o->skip_kernel = true;
                        break;
                case 'Z':
                        o->skip_zswapd = true;
                        break;
                default:
                        return -EINVAL;
                }
        }
        if (optind < argc)
                return fprintf(stderr, "unexpected argument: %s\n", argv[optind]), -EINVAL;
        return 1;
}

static void print_machine(const Options *o, const char *corpus_dir) {
        struct utsname u;

        uname(&u);
        printf("machine: %ld CPUs, Linux %s %s; corpus %s\n", sysconf(_SC_NPROCESSORS_ONLN), u.release, u.machine,
               corpus_dir);
        printf("size: %u processes x %lu MiB = %lu MiB paged out per configuration (--size to change); "
               "%u run(s) per configuration (--repeat), medians shown\n",
               o->procs, o->size_mib, o->procs * o->size_mib, o->repeat);
}

int main(int argc, char **argv) {
        Options o = { .compressor = "lz4", .size_mib = 256, .procs = 4, .batches = { 1, 8, 32, 512 },
                      .nbatches = 4, .workers = { 1, 2 }, .nworkers = 2, .repeat = 1, .poll_us = 1000 };
        _cleanup_free_ char *corpus_dir = NULL;
        _cleanup_corpus_ Corpus *corpus = NULL;
        _cleanup_free_ Result *runs = NULL;
        Config cfg[MAX_CONFIGS];
        Result med[MAX_CONFIGS];
        Raw raw = {};
        unsigned n;
        char load[64];
        double bad = 0;
        int r, failed = 0;

        r = parse_argv(argc, argv, &o);
        if (r <= 0)
                return r < 0 ? 2 : 0;
        if (geteuid() != 0 && !o.skip_kernel)
                return fprintf(stderr, "bench-store: the kernel references need root (or pass --skip-kernel)\n"), 77;
        r = bench_corpus_load(o.corpus, &corpus_dir, &corpus);
        if (r < 0)
                return fprintf(stderr, "cannot load the corpus: %s; try --corpus or $ZSWAP_CORPUS\n", strerror(-r)),
                       1;
        n = build_configs(&o, cfg);
        runs = calloc((size_t)n * o.repeat, sizeof(Result));
        if (!runs)
                return fprintf(stderr, "out of memory\n"), 1;
        bench_install_signals();
        print_machine(&o, corpus_dir);
        printf("load average at the start: %s\n", bench_loadavg(load, sizeof(load)));
        r = raw_measure(&o, corpus, &raw);
        if (r < 0)
                return fprintf(stderr, "raw codec measurement failed: %s\n", strerror(-r)), 1;

        for (unsigned rep = 0; rep < o.repeat && !bench_interrupted; rep++) {
                printf("run %u of %u\n", rep + 1, o.repeat);
                for (unsigned i = 0; i < n && !bench_interrupted; i++) {
                        Result *x = &runs[(size_t)i * o.repeat + rep];

                        for (size_t f = 0; f < RESULT_FIELDS; f++)
                                ((double *)x)[f] = NAN;
                        x->bad_pages = x->client_cpu_s = x->client_sys_s = 0;
                        failed |= run_config(&o, &cfg[i], corpus, x) < 0;
                }
        }
        printf("load average at the end: %s\n", bench_loadavg(load, sizeof(load)));
        for (unsigned i = 0; i < n; i++) {
                result_median(&runs[(size_t)i * o.repeat], o.repeat, &med[i]);
                bad += med[i].bad_pages;
        }
        {
                Result none;

                for (size_t f = 0; f < RESULT_FIELDS; f++)
                        ((double *)&none)[f] = NAN;
                const Result *ref = !o.skip_kernel ? &med[0] : &none;

                print_throughput(cfg, med, n, ref);
                print_cpu(cfg, med, n, ref);
                print_codec(&o, cfg, med, n, &raw);
        }
        if (bad)
                printf("VERIFICATION FAILED: %.0f pages differ from what was written (see the lines above)\n", bad);
        if (bench_interrupted)
                return printf("bench_interrupted by signal %d\n", (int)bench_interrupted), 130;
        return failed || bad ? 1 : 0;
}
