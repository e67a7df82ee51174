/*
 * bench-core.c: zswapd against kernel zram and kernel zswap, one run, one
 * table.
 *
 * The same workload (real heap pages, corpus.c) goes through every backend
 * (backend.h) and is measured by the same code. Each phase sets its backend
 * up, maps a fresh private anonymous region, fills it, pages it out, reads it
 * back in address order and checks every page, pages it out again, reads it
 * back in a seeded random order and checks again, then tears the backend
 * down. The kernel phases hold the benchmarks' lock while they run.
 *
 * Measuring: each fault is one volatile byte read bracketed by two
 * CLOCK_MONOTONIC reads (vDSO, ~25 ns each, included in every figure).
 * Latencies are kept only for pages mincore() said were out before the pass,
 * so a page the backend kept resident does not count as a fast fault.
 * Read-back MB/s is the region size over the whole pass. The bench process's
 * own CPU time is counted over the timed sections only (pageouts and fault
 * passes, not filling or checking): for the kernel that is where it
 * compresses and decompresses; for zswapd it is the library's agent thread.
 * The daemon's CPU is read from /proc/PID/stat over its whole phase, as it
 * may compress after zswap_pageout() has returned. The memory ratio is the
 * bytes paged out (by mincore()) over the memory the backend uses for them,
 * so all-zero pages, which no backend stores, count the same on all.
 *
 * THP is off for every region (backend_attach()): one fault, one page.
 * Swap readahead is off for the kernel phases (page-cluster 0).
 *
 * SIGINT, SIGTERM and SIGHUP only set a flag; loops stop at the next page or
 * call, and the phase tears down what it set up (backend.c blocks the
 * signals while it changes the machine back).
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
#include <libgen.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "bench-util.h"
#include "corpus.h"
#include "macro.h"
#include "util.h"
#include "wakeprobe.h"
#include "zram.h"

#define RANDOM_SEED 0x5eed2024ULL
#define GIB (1024.0 * 1024.0 * 1024.0)

#define BENCH_READERS_MAX 16 /* --walk-threads */
#define SMALL_PAGES 16         /* pages a call of the small pageouts */
#define SMALL_CALLS 512        /* small pageouts, at most (the region's pages / SMALL_PAGES) */

typedef struct Options {
        const char *zswapd;     /* NULL: the zswapd built beside the bench */
        const char *corpus;     /* NULL: corpus_find_dir() */
        const char *compressor;
        unsigned long size_mib;
        long workers;
        bool skip_zram;
        bool skip_kzswap;
        const char *latencies;  /* --latencies DIR: each pass's distribution, for bench/plot.sh */
        bool skip_wake;         /* --skip-wake: no bare round trip measured */
        unsigned walks;         /* --walks N: passes of the random order again after the table's */
        unsigned walk_threads;  /* --walk-threads N: threads that read each walk, each its share */
        const char *set;        /* --set KEY=VALUE: one policy key for the daemon (zswapd --set) */
} Options;

typedef struct Latency {
        size_t faults; /* pages that were out before the pass */
        double median_us, p99_us, p999_us, max_us;
        double mbs;    /* region bytes / wall time of the pass */
} Latency;

typedef struct Result {
        char name[32];        /* the backend's, once set up */
        bool done;
        double pageout_mbs;   /* bytes paged out / time, both passes */
        double out_pct;       /* region paged out after the first pageout */
        double rss_drop_pct;  /* RssAnon drop over the first pageout, % of the region */
        double mem_ratio;     /* original / memory used */
        Latency seq, rnd;
        Latency walk;         /* the last of the walks: the random order once more, after a pageout */
        Latency small;        /* small pageouts: each call's time (median_us, p99_us), SMALL_PAGES a call */
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
        unsigned walks, walk_threads;
        const char *lat_dir;     /* --latencies, NULL: none */
} Run;

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

static void latency_summarize(uint64_t *lat, size_t n, Latency *ret) {
        qsort(lat, n, sizeof(*lat), cmp_u64);
        ret->faults = n;
        ret->median_us = bench_percentile_us(lat, n, 0.5);
        ret->p99_us = bench_percentile_us(lat, n, 0.99);
        ret->p999_us = bench_percentile_us(lat, n, 0.999);
        ret->max_us = bench_percentile_us(lat, n, 1.0);
}

/*
 * A pass's fault latencies (sorted, ns) into DIR/NAME-PASS.dat for plots
 * (bench/plot.sh): "us fraction" lines, fraction being the share of faults
 * slower than us (the complementary CDF, each share plus half a fault's
 * so that the slowest has one on a log scale), at up to 1000 points from
 * the median down to the slowest fault, spaced evenly on a log scale of
 * the share so that the tail has as many points as the body.
 */
static void latency_write(const char *dir, const char *name, const char *pass, const uint64_t *lat, size_t n) {
        char path[4096];
        size_t last = 0;

        if (!dir || n == 0)
                return;
        snprintf(path, sizeof(path), "%s/%s-%s.dat", dir, name, pass);
        FILE *f = fopen(path, "w");
        if (!f) {
                fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
                return;
        }
        fprintf(f, "# %s %s fault-in: %zu faults; latency_us fraction_slower\n", name, pass, n);
        for (int k = 0; k <= 1000; k++) {
                /* the share slower, from 1/2 down to 1/n */
                double tail = 0.5 * pow(2.0 / (double)n, k / 1000.0);
                size_t rank = (size_t)((1.0 - tail) * (double)n); /* faults at or below */
                rank = MIN(MAX(rank, 1), n);
                if (rank == last)
                        continue;
                last = rank;
                fprintf(f, "%.3f %.9g\n", lat[rank - 1] / 1000.0, (double)(n - rank) / (double)n + 0.5 / (double)n);
        }
        if (last != n) /* the slowest fault, at half a fault's share */
                fprintf(f, "%.3f %.9g\n", lat[n - 1] / 1000.0, 0.5 / (double)n);
        fclose(f);
}

/* What the backend holds after the first pageout: memory ratio and its own counters. */
static int measure_memory(Backend *b, uint64_t out_bytes, Result *res) {
        uint64_t orig, used;
        char report[512];
        int r;

        r = backend_memory(b, &orig, &used);
        if (r < 0)
                return r;
        if (backend_report(b, report, sizeof(report)) == 0)
                printf("  %s\n", report);
        res->mem_ratio = used ? (double)out_bytes / used : NAN;
        return 0;
}

/* Page the whole region out; the first pass also records what it achieved. */
static int measure_pageout(Run *run, Backend *b, BackendClient *c, bool first, Result *res) {
        long rss0 = self_rss_anon_kib("/proc"), rss1;
        double cpu0 = self_cpu_s();
        uint64_t t0 = now_ns(), dt;
        size_t out;
        int n;

        n = backend_pageout(c, run->region, run->len);
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
               res->name, first ? 1 : 2, out, run->n_pages, n, dt / 1e9, rss0, rss1);
        if (!first)
                return 0;
        res->out_pct = 100.0 * out / run->n_pages;
        res->rss_drop_pct = 100.0 * (rss0 - rss1) * 1024.0 / run->len;
        return measure_memory(b, out * ZSWAP_PAGE_SIZE, res);
}

/* One reader of a pass: every nth page from the first, of the region in
 * address order or in run->perm order, each touch timed into lat. */
typedef struct Reader {
        const Run *run;
        bool random;
        size_t first, nth;
        uint64_t *lat;
        size_t k; /* faults timed */
} Reader;

static void *reader_main(void *arg) {
        Reader *rd = arg;
        const Run *run = rd->run;

        for (size_t i = rd->first; i < run->n_pages && !bench_interrupted; i += rd->nth) {
                size_t pg = rd->random ? run->perm[i] : i;
                const volatile uint8_t *p = run->region + pg * ZSWAP_PAGE_SIZE;
                uint64_t a = now_ns();
                (void)*p;
                uint64_t z = now_ns();
                if (!(run->resident[pg] & 1))
                        rd->lat[rd->k++] = z - a;
        }
        return NULL;
}

/* Touch every page once, sequentially or in run->perm order, timing each
 * touch; with threads > 1, that many threads at once, the ith reading
 * every threads-th page of the order from the ith (each thread's own
 * order is then the same every pass). Self CPU counts all of them. */
static int measure_faults(Run *run, const char *name, const char *pass, bool random, unsigned threads, Latency *ret,
                          Result *res) {
        double cpu0 = self_cpu_s();
        size_t k = 0, bad, first_bad = 0;
        uint64_t t0 = now_ns(), dt;
        Reader rd[BENCH_READERS_MAX];
        pthread_t tid[BENCH_READERS_MAX];
        size_t share = run->n_pages / threads + 1;

        for (unsigned t = 0; t < threads; t++)
                rd[t] = (Reader){ run, random, t, threads, run->lat + (size_t)t * share, 0 };
        unsigned started = 1;
        while (started < threads && pthread_create(&tid[started], NULL, reader_main, &rd[started]) == 0)
                started++;
        if (started == threads)
                reader_main(&rd[0]);
        for (unsigned t = 1; t < started; t++)
                pthread_join(tid[t], NULL);
        if (started < threads)
                return fprintf(stderr, "cannot start reader %u of %u\n", started + 1, threads), -EAGAIN;
        dt = now_ns() - t0;
        if (bench_interrupted)
                return -EINTR;
        for (unsigned t = 0; t < threads; t++) {
                memmove(run->lat + k, rd[t].lat, rd[t].k * sizeof(*run->lat));
                k += rd[t].k;
        }
        res->self_cpu_s += self_cpu_s() - cpu0;
        res->moved_gib += k * ZSWAP_PAGE_SIZE / GIB;
        latency_summarize(run->lat, k, ret);
        latency_write(run->lat_dir, name, pass, run->lat, k);
        ret->mbs = run->len / (dt / 1e3);

        bad = corpus_verify(run->corpus, run->region, run->n_pages, &first_bad);
        res->bad_pages += bad;
        printf("  %s %s fault-in: %zu faults, %.3f s, median %.2f us; %zu bad pages",
               name, pass, k, dt / 1e9, ret->median_us, bad);
        if (bad)
                printf(" (first: page %zu)", first_bad);
        printf("\n");
        return 0;
}

/* Small pageouts: a program that pages out a little at a time (as
 * bench-scale's threads do). Each call takes SMALL_PAGES pages not taken
 * before, written first (the same bytes again) so that neither store has
 * a clean copy to drop, and is timed alone: for zswapd a round trip
 * through the daemon's hand-offs, for the kernel one synchronous
 * MADV_PAGEOUT. Outside the figures above; every page is read back and
 * checked after. */
static int measure_small(Run *run, BackendClient *c, Result *res) {
        size_t calls = MIN((size_t)SMALL_CALLS, run->n_pages / SMALL_PAGES), bad, first_bad = 0;

        for (size_t i = 0; i < calls && !bench_interrupted; i++) {
                volatile uint8_t *p = run->region + i * SMALL_PAGES * ZSWAP_PAGE_SIZE;
                for (size_t k = 0; k < SMALL_PAGES; k++)
                        p[k * ZSWAP_PAGE_SIZE] = p[k * ZSWAP_PAGE_SIZE];
                uint64_t t0 = now_ns();
                int n = backend_pageout(c, (void *)p, SMALL_PAGES * ZSWAP_PAGE_SIZE);
                run->lat[i] = now_ns() - t0;
                if (n < 0)
                        return n;
        }
        if (bench_interrupted)
                return -EINTR;
        latency_summarize(run->lat, calls, &res->small);
        bad = corpus_verify(run->corpus, run->region, run->n_pages, &first_bad);
        res->bad_pages += bad;
        printf("  %s small pageouts: %zu calls of %d pages, median %.1f us, p99 %.1f us; %zu bad pages\n", res->name,
               calls, SMALL_PAGES, res->small.median_us, res->small.p99_us, bad);
        return 0;
}

static int phase_measure(Run *run, Backend *b, BackendClient *c, Result *res) {
        double cpu0 = backend_daemon_cpu_s(b);
        int r = 0;

        if (!bench_interrupted)
                r = measure_pageout(run, b, c, true, res);
        if (r == 0 && !bench_interrupted)
                r = measure_faults(run, res->name, "sequential", false, 1, &res->seq, res);
        if (r == 0 && !bench_interrupted)
                r = measure_pageout(run, b, c, false, res);
        if (r == 0 && !bench_interrupted)
                r = measure_faults(run, res->name, "random", true, 1, &res->rnd, res);
        res->daemon_cpu_s = backend_daemon_cpu_s(b) - cpu0;
        res->pageout_mbs = run->out_ns ? run->out_bytes / (run->out_ns / 1e3) : NAN;
        /* The walks: a program that walks the same scattered data again
         * (zswapd's fault history). Outside the figures above: their
         * CPU, pageouts and faults count nowhere else. */
        for (unsigned w = 0; r == 0 && w < run->walks && !bench_interrupted; w++) {
                Result scratch = *res;
                char pass[32];
                int n = backend_pageout(c, run->region, run->len);
                if (n < 0)
                        return n;
                (void)region_resident(run);
                snprintf(pass, sizeof(pass), "walk-%u", w + 1);
                r = measure_faults(run, res->name, pass, true, run->walk_threads, &res->walk, &scratch);
                res->bad_pages = scratch.bad_pages;
        }
        if (r == 0 && !bench_interrupted)
                r = measure_small(run, c, res);
        return bench_interrupted ? -EINTR : r;
}

/* Map, fill, attach, measure, detach, unmap: everything the phase needs a client for. */
static int phase_region(Run *run, Backend *b, Result *res) {
        BackendClient *c = NULL;
        int r;

        run->out_bytes = run->out_ns = 0;
        r = backend_client_new(b, &c);
        if (r < 0)
                return r;
        run->region = mmap(NULL, run->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (run->region == MAP_FAILED) {
                run->region = NULL;
                backend_client_free(c);
                return -errno;
        }
        /* THP off before the first touch: backend_attach() would be too late for pages already there. */
        (void)madvise(run->region, run->len, MADV_NOHUGEPAGE);
        corpus_fill(run->corpus, run->region, run->n_pages);
        r = backend_attach(c, run->region, run->len);
        if (r == 0) {
                r = phase_measure(run, b, c, res);
                backend_detach(c, run->region, run->len);
        }
        /* Unmapped before teardown, or swapoff would read it all back. */
        munmap(run->region, run->len);
        run->region = NULL;
        backend_client_free(c);
        res->done = r == 0;
        return r;
}

/* Why a backend could not be set up; true if that means "skipped", not "failed". */
static bool explain_setup_error(const char *label, const BackendConfig *cfg, int r) {
        switch (r) {
        case -EPERM:
                printf("%s phase: skipped, needs root (swap, zram, zswap parameters)\n", label);
                return true;
        case -ENODEV:
                printf("%s phase: skipped, not in this kernel\n", label);
                return true;
        case -EBUSY:
                printf("%s phase: refused, kernel zswap is enabled and would catch every page before zram\n"
                       "  (echo N > /sys/module/zswap/parameters/enabled if no one needs it)\n", label);
                return false;
        case -ENOENT:
                if (cfg->kind == BACKEND_ZSWAPD) {
                        printf("%s phase: no zswapd at %s; build it or pass --zswapd PATH\n", label,
                               cfg->zswapd_path ?: "<bench dir>/../daemon/zswapd");
                        return false;
                }
                break;
        case -EINTR:
                printf("%s phase: bench_interrupted while setting up\n", label);
                return false;
        }
        printf("%s phase: set-up failed: %s\n", label, strerror(-r));
        if (cfg->kind == BACKEND_ZSWAPD && backend_last_log())
                printf("  daemon log: %s\n", backend_last_log());
        return false;
}

static int phase_run(Run *run, const char *label, const BackendConfig *cfg, Result *res) {
        char log[128] = "";
        Backend *b = NULL;
        int r, rt;

        snprintf(res->name, sizeof(res->name), "%s", label);
        r = backend_setup(cfg, &b);
        if (r < 0)
                return explain_setup_error(label, cfg, r) ? 0 : r;
        snprintf(res->name, sizeof(res->name), "%s", backend_name(b));
        printf("%s phase: %s\n", res->name, backend_describe(b));
        r = phase_region(run, b, res);
        if (r < 0 && r != -EINTR)
                printf("  %s phase failed: %s\n", res->name, strerror(-r));
        if ((r < 0 && r != -EINTR) || res->bad_pages)
                backend_keep_log(b);
        if (backend_log(b))
                snprintf(log, sizeof(log), "%s", backend_log(b));
        rt = backend_teardown(b);
        if (rt < 0)
                printf("  %s teardown failed: %s; check swapon --show and /sys/module/zswap/parameters\n",
                       res->name, strerror(-rt));
        if (log[0] && (rt < 0 || (r < 0 && r != -EINTR) || res->bad_pages))
                printf("  daemon log: %s\n", log);
        return r ?: rt;
}

/* ---- output ---- */

enum { ZSWAPD, ZRAM, KZSWAP, N_BACKENDS };

/* "-" for a value that was not measured. */
static void format_cell(char *buf, size_t size, const char *fmt, double v) {
        if (isfinite(v))
                snprintf(buf, size, fmt, v);
        else
                snprintf(buf, size, "-");
}

/* One metric for every backend, then zswapd's value as a ratio to each kernel's. */
static void print_row(const char *name, const char *fmt, const double v[N_BACKENDS]) {
        char cell[N_BACKENDS][32], ratio[N_BACKENDS][16];

        for (int i = 0; i < N_BACKENDS; i++) {
                format_cell(cell[i], sizeof(cell[i]), fmt, v[i]);
                format_cell(ratio[i], sizeof(ratio[i]), "%.2f", v[i] != 0 ? v[ZSWAPD] / v[i] : NAN);
        }
        printf("%-30s %12s %12s %12s %8s %8s\n", name, cell[ZSWAPD], cell[ZRAM], cell[KZSWAP], ratio[ZRAM],
               ratio[KZSWAP]);
}

/* A figure of r, or NAN if its phase did not complete. */
static double value(const Result *r, size_t offset) {
        return r->done ? *(const double *)((const char *)r + offset) : NAN;
}

enum { CPU_DAEMON, CPU_SELF, CPU_TOTAL };

/* CPU seconds per GiB moved; a missing daemon counts as none in the total. */
static double cpu_per_gib(const Result *r, int which) {
        double daemon = isfinite(r->daemon_cpu_s) ? r->daemon_cpu_s : 0;
        double s = which == CPU_DAEMON ? r->daemon_cpu_s :
                   which == CPU_SELF ? r->self_cpu_s : daemon + r->self_cpu_s;

        return r->done && r->moved_gib > 0 ? s / r->moved_gib : NAN;
}

static void print_table(const Result res[N_BACKENDS]) {
        static const struct {
                const char *name, *fmt;
                size_t offset;
        } rows[] = {
                { "pageout MB/s", "%.0f", offsetof(Result, pageout_mbs) },
                { "fault seq median us", "%.2f", offsetof(Result, seq.median_us) },
                { "fault seq p99 us", "%.2f", offsetof(Result, seq.p99_us) },
                { "fault seq p99.9 us", "%.2f", offsetof(Result, seq.p999_us) },
                { "fault seq max us", "%.1f", offsetof(Result, seq.max_us) },
                { "fault rand median us", "%.2f", offsetof(Result, rnd.median_us) },
                { "fault rand p99 us", "%.2f", offsetof(Result, rnd.p99_us) },
                { "fault rand p99.9 us", "%.2f", offsetof(Result, rnd.p999_us) },
                { "fault rand max us", "%.1f", offsetof(Result, rnd.max_us) },
                { "read-back seq MB/s", "%.0f", offsetof(Result, seq.mbs) },
                { "read-back rand MB/s", "%.0f", offsetof(Result, rnd.mbs) },
                { "read-back walk MB/s", "%.0f", offsetof(Result, walk.mbs) },
                { "walk median us", "%.2f", offsetof(Result, walk.median_us) },
                { "walk p99 us", "%.2f", offsetof(Result, walk.p99_us) },
                { "small pageout median us", "%.1f", offsetof(Result, small.median_us) },
                { "small pageout p99 us", "%.1f", offsetof(Result, small.p99_us) },
                { "memory ratio (out/used)", "%.2f", offsetof(Result, mem_ratio) },
                { "RssAnon drop % of region", "%.1f", offsetof(Result, rss_drop_pct) },
                { "region paged out % (mincore)", "%.1f", offsetof(Result, out_pct) },
        };
        static const char *const cpu_rows[] = { "CPU s/GiB moved: daemon", "CPU s/GiB moved: bench proc",
                                                "CPU s/GiB moved: total" };
        double v[N_BACKENDS];

        printf("\nratio = zswapd / kernel. Lower is better for latency and CPU, higher for MB/s, memory ratio "
               "and RssAnon drop.\n");
        printf("%-30s %12s %12s %12s %8s %8s\n", "metric", res[ZSWAPD].name, res[ZRAM].name, res[KZSWAP].name,
               "/zram", "/zswap");
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                for (int k = 0; k < N_BACKENDS; k++)
                        v[k] = value(&res[k], rows[i].offset);
                print_row(rows[i].name, rows[i].fmt, v);
        }
        for (int which = CPU_DAEMON; which <= CPU_TOTAL; which++) {
                for (int k = 0; k < N_BACKENDS; k++)
                        v[k] = cpu_per_gib(&res[k], which);
                print_row(cpu_rows[which], "%.3f", v);
        }
        printf("CPU: the kernel compresses and decompresses in the calling process, so its CPU is the bench's\n"
               "own (utime+stime, timed sections only); zswapd's is the daemon's (/proc/PID/stat, whole phase)\n"
               "plus the bench's. GiB moved = pages paged out + pages faulted back, both passes.\n"
               "Walk: the random order read again after a pageout, --walks times; the rows are the last\n"
               "time (a touch of a page zswapd's fault history brought back is no fault).\n"
               "Small pageout: one call of 16 written pages, timed alone, 512 calls (the region allowing).\n");
}

/* zswapd's figure over a kernel's, for a target; NAN if either is missing. */
static double target_ratio(const Result res[N_BACKENDS], int kernel, size_t offset, double scale) {
        double z = value(&res[ZSWAPD], offset), k = value(&res[kernel], offset);

        return k != 0 ? z * scale / k : NAN;
}

/*
 * The bare userfaultfd round trip of the daemon's shared fault service on
 * this machine, in this run (wakeprobe.h): the fastest of its two
 * arrangements that poll nothing, one handler woken per fault or all, as
 * the daemon's start-up measurement picks (daemon/fault/calibrate.c). No
 * userspace handler serves a fault faster, so where this alone is dearer
 * than zram's whole fault the fault targets are read against it.
 */
static bool bare_round_trip(WakeProbe *ret, const char **arr) {
        static const WakeArr arrs[] = { WAKE_PERCPU_ONE, WAKE_PERCPU };
        WakeProbeOpts o = { .nfaults = 20000 };
        bool any = false;

        for (size_t i = 0; i < ELEMENTSOF(arrs); i++) {
                WakeProbe p;
                int r = wake_probe(arrs[i], &o, &p);

                if (r < 0) {
                        printf("bare round trip, %s: %s\n", wake_arr_names[arrs[i]], strerror(-r));
                        continue;
                }
                printf("bare round trip, %s: median %.1f us, p99 %.1f us (%zu faults, wakeprobe.h)\n",
                       wake_arr_names[arrs[i]], p.median_us, p.p99_us, o.nfaults);
                if (!any || p.median_us < ret->median_us) {
                        *ret = p;
                        *arr = wake_arr_names[arrs[i]];
                }
                any = true;
        }
        return any;
}

/* The fault targets against the bare round trip, where it alone is dearer
 * than zram's whole fault (the allowance): within 1.3x of it. */
static void print_bare_targets(const Result res[N_BACKENDS], const WakeProbe *bare, const char *arr) {
        const Latency *z = &res[ZSWAPD].rnd, *k = &res[ZRAM].rnd;

        if (!bare || !(z->median_us > 0))
                return;
        bool applies = k->median_us > 0 && bare->median_us > k->median_us;
        printf("\nagainst the bare round trip of %s (median %.1f us, p99 %.1f us); zram-lz4's whole random fault: "
               "median %.1f us, so this allowance %s\n",
               arr, bare->median_us, bare->p99_us, k->median_us,
               k->median_us > 0 ? (applies ? "applies" : "does not apply") : "is not known");
        printf("%-30s %8s %10s %-8s\n", "target", "goal", "/bare", "");
        double rm = z->median_us / bare->median_us, rp = z->p99_us / bare->p99_us;
        printf("%-30s %8s %10.3f %-8s\n", "random fault-in median", "<= 1.30", rm, rm <= 1.3 ? "met" : "MISSED");
        printf("%-30s %8s %10.3f %-8s\n", "random fault-in p99", "<= 1.30", rp, rp <= 1.3 ? "met" : "MISSED");
}

/* The project's targets against zram-lz4: zswapd as a ratio to it in this run. */
static void print_targets(const Result res[N_BACKENDS], long workers) {
        const struct {
                const char *name;
                size_t offset;
                double scale, goal;
                bool at_most;
        } targets[] = {
                { "random fault-in median", offsetof(Result, rnd.median_us), 1, 1.2, true },
                { "sequential read-back", offsetof(Result, seq.mbs), 1, 1.5, false },
                { "pageout per worker", offsetof(Result, pageout_mbs), 1.0 / workers, 1.0, false },
                { "pool memory (memory ratio)", offsetof(Result, mem_ratio), 1, 1.0, false },
        };
        char label[48], vz[16], vk[16];

        printf("\ntargets: %s as a ratio to %s in this run (%s for comparison); pageout per worker\n"
               "divides zswapd's MB/s by its %ld workers\n",
               res[ZSWAPD].name, res[ZRAM].name, res[KZSWAP].name, workers);
        printf("%-30s %8s %10s %-8s %10s\n", "target", "goal", "/zram", "", "/zswap");
        for (size_t i = 0; i < ELEMENTSOF(targets); i++) {
                double rz = target_ratio(res, ZRAM, targets[i].offset, targets[i].scale);
                double rk = target_ratio(res, KZSWAP, targets[i].offset, targets[i].scale);
                bool met = targets[i].at_most ? rz <= targets[i].goal : rz >= targets[i].goal;

                snprintf(label, sizeof(label), "%s %.2f", targets[i].at_most ? "<=" : ">=", targets[i].goal);
                format_cell(vz, sizeof(vz), "%.3f", rz);
                format_cell(vk, sizeof(vk), "%.3f", rk);
                printf("%-30s %8s %10s %-8s %10s\n", targets[i].name, label, vz,
                       isfinite(rz) ? (met ? "met" : "MISSED") : "-", vk);
        }
}

static void print_machine(const Options *o, const char *corpus_dir) {
        struct utsname u;

        uname(&u);
        printf("machine: %ld CPUs, Linux %s %s; size %lu MiB (%lu pages); corpus %s; seed 0x%llx\n",
               sysconf(_SC_NPROCESSORS_ONLN), u.release, u.machine, o->size_mib, o->size_mib << 8,
               corpus_dir, RANDOM_SEED);
        if (o->set)
                printf("zswapd runs with --set %s\n", o->set);
        if (o->walk_threads > 1)
                printf("each walk is read by %u threads at once\n", o->walk_threads);
}

/* ---- main ---- */

static void help(void) {
        printf("bench-core [--zswapd PATH] [--size MiB] [--corpus DIR] [--compressor lz4|zstd]\n"
               "           [--workers N] [--skip-zram] [--skip-kzswap] [--skip-wake] [--latencies DIR]\n"
               "           [--walks N] [--walk-threads N] [--set KEY=VALUE]\n\n"
               "Measure zswapd against kernel zram (lz4) and kernel zswap (lzo, in front of a swapfile)\n"
               "on real heap pages, and print the project's targets as ratios to zram. Kernel phases\n"
               "need root and take %s. --latencies DIR: each fault-in pass's latency\n"
               "distribution into DIR/BACKEND-PASS.dat (bench/plot.sh draws them). Before the phases the\n"
               "bare userfaultfd round trip of the daemon's fault service is measured (--skip-wake: not),\n"
               "and the random fault is also read against it. --walks N (default 3): after the measured\n"
               "passes, page out and read in the same random order N times more (a program walking the\n"
               "same data again); the table's walk rows are the last. --walk-threads N (default 1): N\n"
               "threads read each walk at once, the ith every Nth page of the order from the ith.\n"
               "--set KEY=VALUE: the daemon runs with that policy key (zswapd --set), e.g.\n"
               "fault_history=no.\n", BACKEND_LOCK_FILE);
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
                { "skip-kzswap", no_argument, NULL, 'K' },
                { "latencies", required_argument, NULL, 'L' },
                { "skip-wake", no_argument, NULL, 'W' },
                { "walks", required_argument, NULL, 'k' },
                { "walk-threads", required_argument, NULL, 'T' },
                { "set", required_argument, NULL, 'S' },
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
                case 'K':
                        o->skip_kzswap = true;
                        break;
                case 'L':
                        o->latencies = optarg;
                        break;
                case 'W':
                        o->skip_wake = true;
                        break;
                case 'S':
                        o->set = optarg;
                        break;
                case 'k':
                        o->walks = (unsigned)strtoul(optarg, &end, 10);
                        if (*end || o->walks > 100)
                                return fprintf(stderr, "bad --walks: %s\n", optarg), -EINVAL;
                        break;
                case 'T':
                        o->walk_threads = (unsigned)strtoul(optarg, &end, 10);
                        if (*end || o->walk_threads < 1 || o->walk_threads > BENCH_READERS_MAX)
                                return fprintf(stderr, "bad --walk-threads: %s (1 to %d)\n", optarg,
                                               BENCH_READERS_MAX), -EINVAL;
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
        /* each reader of a pass times into its own share (measure_faults()) */
        run->lat = malloc((run->n_pages + BENCH_READERS_MAX) * sizeof(*run->lat));
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

/* Each backend in turn, on the same data; a kernel phase only while not bench_interrupted. */
static int run_phases(const Options *o, Run *run, Result res[N_BACKENDS]) {
        char workers[24];
        const char *const args[] = { "--workers", workers, o->set ? "--set" : NULL, o->set, NULL };
        const BackendConfig cfg[N_BACKENDS] = {
                [ZSWAPD] = { .kind = BACKEND_ZSWAPD, .compressor = o->compressor, .size_bytes = run->len,
                             .zswapd_path = o->zswapd, .zswapd_args = args },
                [ZRAM] = { .kind = BACKEND_ZRAM, .compressor = "lz4", .size_bytes = run->len },
                [KZSWAP] = { .kind = BACKEND_KZSWAP, .compressor = "lzo", .size_bytes = run->len },
        };
        static const char *const label[N_BACKENDS] = { "zswapd", "zram", "zswap" };
        const bool skip[N_BACKENDS] = { false, o->skip_zram, o->skip_kzswap };
        int failed = 0;

        snprintf(workers, sizeof(workers), "%ld", o->workers);
        for (int i = 0; i < N_BACKENDS; i++) {
                snprintf(res[i].name, sizeof(res[i].name), "%s-%s", label[i], cfg[i].compressor);
                if (skip[i])
                        printf("%s phase: skipped (--skip-%s)\n", label[i], i == ZRAM ? "zram" : "kzswap");
                else if (!bench_interrupted)
                        failed |= phase_run(run, label[i], &cfg[i], &res[i]) < 0;
        }
        return failed;
}

int main(int argc, char **argv) {
        Options o = { .compressor = "lz4", .size_mib = 1024, .workers = sysconf(_SC_NPROCESSORS_ONLN), .walks = 3, .walk_threads = 1 };
        _cleanup_free_ char *exe = NULL, *corpus_dir = NULL;
        _cleanup_corpus_ Corpus *corpus = NULL;
        Result res[N_BACKENDS];
        const char *exe_dir;
        size_t bad = 0;
        Run run = {};
        int r, failed;

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
        run.lat_dir = o.latencies;
        run.walks = o.walks;
        run.walk_threads = o.walk_threads;
        for (int i = 0; i < N_BACKENDS; i++)
                res[i] = (Result) { .daemon_cpu_s = NAN };
        bench_install_signals();
        /* Progress lines as they happen, also into a file or a pipe. */
        setvbuf(stdout, NULL, _IOLBF, 0);
        print_machine(&o, corpus_dir);
        WakeProbe bare = {};
        const char *bare_arr = NULL;
        bool have_bare = !o.skip_wake && bare_round_trip(&bare, &bare_arr);

        failed = run_phases(&o, &run, res);
        run_done(&run);

        print_table(res);
        print_targets(res, o.workers);
        print_bare_targets(res, have_bare ? &bare : NULL, bare_arr);
        for (int i = 0; i < N_BACKENDS; i++) {
                if (res[i].bad_pages)
                        printf("VERIFICATION FAILED: %zu %s pages differ from what was written\n",
                               res[i].bad_pages, res[i].name);
                bad += res[i].bad_pages;
        }
        if (bench_interrupted)
                return printf("bench_interrupted by signal %d\n", (int)bench_interrupted), 130;
        return failed || bad ? 1 : 0;
}
