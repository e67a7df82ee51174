/*
 * bench-tier.c: zswapd's second tier against kernel zswap's writeback to a
 * swapfile on the same disk, one run, one table.
 *
 * Every backend gets the same workload: D MiB of real heap pages (corpus.c)
 * with its compressed pool bounded to about a quarter of D, so that about
 * half of the compressed data must leave RAM. zswapd runs with --pool-max
 * D/4 and a [tier] section naming a file under /var/tmp (O_DIRECT) or an
 * nbd-server export on loopback; kernel zswap runs with max_pool_percent as
 * close to D/4 as its whole-percent steps of total RAM allow and its
 * shrinker on, in front of a swapfile under /var/tmp (kzswap.c).
 *
 * A backend runs two cycles on a freshly filled region each, one per read
 * order (sequential, then bench-core's seeded random order), so both start
 * alike: all pages dirty, nothing on disk. A cycle:
 *
 *   1. pageout: MADV_PAGEOUT (kernel) or zswap_pageout() (zswapd), again
 *      while pages remain and it makes progress; then wait until the backend
 *      has written what it will write: the written counter (kernel: zswpwb
 *      and pswpout of /proc/vmstat; zswapd: tier_written) unchanged for
 *      SETTLE_QUIET_MS and the backend idle (kernel: no I/O in flight,
 *      nr_writeback; zswapd: the pool under its bound, nothing staged).
 *      Pageout MB/s is D over the time from the pageout call to the later
 *      of the counter's last change and the last poll that found it busy.
 *   2. bytes written: the backend's counter (pswpout * 4 KiB: every page the
 *      kernel wrote to swap, written back or refused by a full pool; zswapd's
 *      tier_written) and the sectors written on the disk under /var/tmp
 *      (machine-wide, so other work shows there too). Write amplification is
 *      each over D.
 *   3. making "on the tier" mean "on the disk": the kernel leaves every page
 *      it wrote to swap in the swap cache until memory pressure reclaims it,
 *      and a fault would find it there. Those pages are exactly the ones
 *      pagemap says are swapped while mincore says resident; they are read
 *      once (a clean read fault maps them) and paged out again, which drops
 *      them without I/O (clean, still on swap; the swapfile is sized so swap
 *      stays under half full, where a read fault keeps the slot). That set
 *      is the kernel's tier, page by page. nbd-server writes the export
 *      through the page cache: the export is fdatasync()ed (timed, printed)
 *      and its cache dropped, so tier reads go to the disk there too.
 *   4. the fault pass: one volatile byte read per page, timed with two
 *      CLOCK_MONOTONIC reads, for pages that were out before the pass;
 *      every page is then checked against the corpus.
 *   5. tier faults and pool faults apart. Kernel: by the page set of step 3
 *      (checked against pswpin, the pages read from swap in the pass).
 *      zswapd: no per-page view, so by count: K = the tier's reads in the
 *      pass (tier_reads; a read also installs the neighbours in its window,
 *      which then never fault), and the K slowest faults are the tier's.
 *      The kernel's output shows how well that rank split agrees with its
 *      exact one.
 *
 * The kernel phase holds the benchmarks' lock (backend.h) from set-up to
 * teardown and blocks SIGINT, SIGTERM and SIGHUP while it changes or
 * restores the machine; kzswap.c puts every parameter back. The zswapd
 * phases read the daemon's status through zswapctl (built beside the
 * daemon) by field name.
 *
 * Single-threaded (libzswap starts its own agent thread).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "bench-util.h"
#include "corpus.h"
#include "kswap.h"
#include "kzswap.h"
#include "macro.h"
#include "util.h"

#define RANDOM_SEED 0x5eed2024ULL /* bench-core's */
#define MIB (1024.0 * 1024.0)
#define POLL_MS 20
#define SETTLE_QUIET_MS 2000      /* the written counter this long unchanged: settled */
#define SETTLE_BUSY_MS 60000      /* not idle this long after the last write: give up waiting */
#define SETTLE_MAX_MS 120000      /* still writing this long after the pageout: give up, say so */
#define PAGEOUT_STALL_MS 5000     /* zswapd: pageout making no progress this long: give up */
#define TIER_FILE "/var/tmp/zswap-bench.tier"
#define NBD_EXPORT "/var/tmp/zswap-bench-nbd.img"
#define NBD_EXPORT_NAME "zswapbench"

enum { KZSWAP, ZFILE, ZNBD, N_BACKENDS };
static const char *const backend_label[N_BACKENDS] = { "kzswap", "zswapd-file", "zswapd-nbd" };

typedef struct Options {
        const char *zswapd, *corpus, *compressor;
        unsigned long size_mib;
        bool skip[N_BACKENDS];
} Options;

typedef struct Latency {
        size_t n;
        double median_us, p99_us;
        double sum_ns; /* time spent in these faults */
} Latency;

/* What one cycle (one region, one read order) measured. */
typedef struct Cycle {
        bool done;
        double call_s, settle_s; /* pageout call(s) alone; call to the written counter's last change */
        uint64_t written;        /* bytes to the backing store, the backend's counter */
        uint64_t read;           /* bytes read from it in the pass */
        uint64_t disk;           /* bytes written on the disk under /var/tmp (machine-wide) */
        uint64_t pool_peak;      /* pool bytes, most seen while settling */
        size_t out;              /* pages out before the pass */
        size_t on_tier;          /* of which on the tier */
        size_t tier_n;           /* faults that read the tier (zswapd: its neighbours come in with them) */
        Latency tier, pool;
        double pass_mbs;         /* region over the pass's wall time */
        double rank_agree;       /* kernel: share of its tier pages the rank split also calls tier */
        size_t bad;
} Cycle;

typedef struct Result {
        uint64_t pool_limit;
        Cycle c[2]; /* sequential, random */
} Result;

/* Buffers and machine facts every phase shares. */
typedef struct Run {
        const Options *o;
        const Corpus *corpus;
        char exe_dir[4096];
        uint8_t *region;
        size_t len, n_pages;
        unsigned char *vec;    /* mincore() */
        uint64_t *pm;          /* pagemap entries of the region */
        uint8_t *tier;         /* kernel: page i is on the disk */
        uint64_t *lat;         /* ns per fault of the pass */
        size_t *lat_pg;        /* the page of each */
        uint64_t *sorted;      /* 2 n_pages: split_exact() fills both halves */
        size_t *perm;
        char disk_stat[128];   /* /sys/dev/block/M:m/stat of /var/tmp's device */
        uint64_t mem_total;    /* bytes, /proc/meminfo */
} Run;

/* ---- machine counters ---- */

typedef struct Vmstat {
        uint64_t pswpin, pswpout, zswpin, zswpout, zswpwb, nr_writeback;
} Vmstat;

static int vmstat_read(Vmstat *ret) {
        static const struct {
                const char *name;
                size_t off;
        } keys[] = {
                { "pswpin", offsetof(Vmstat, pswpin) },   { "pswpout", offsetof(Vmstat, pswpout) },
                { "zswpin", offsetof(Vmstat, zswpin) },   { "zswpout", offsetof(Vmstat, zswpout) },
                { "zswpwb", offsetof(Vmstat, zswpwb) },   { "nr_writeback", offsetof(Vmstat, nr_writeback) },
        };
        char name[64];
        unsigned long long v;
        FILE *f;

        *ret = (Vmstat) {};
        f = fopen("/proc/vmstat", "re");
        if (!f)
                return -errno;
        while (fscanf(f, "%63s %llu", name, &v) == 2)
                for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                        if (strcmp(name, keys[i].name) == 0)
                                *(uint64_t *)((char *)ret + keys[i].off) = v;
        fclose(f);
        return 0;
}

/* A "Name: N kB" line of /proc/meminfo, in bytes; 0 if absent. */
static uint64_t meminfo_bytes(const char *key) {
        char line[256];
        unsigned long long kib = 0;
        size_t n = strlen(key);
        FILE *f = fopen("/proc/meminfo", "re");

        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, key, n) == 0 && line[n] == ':' && sscanf(line + n + 1, "%llu", &kib) == 1)
                        break;
        fclose(f);
        return kib * 1024;
}

/* Sectors written (field 7) of the block device holding dir, as bytes. */
static int disk_stat_path(const char *dir, char *path, size_t size) {
        struct stat st;

        if (stat(dir, &st) < 0)
                return -errno;
        snprintf(path, size, "/sys/dev/block/%u:%u/stat", major(st.st_dev), minor(st.st_dev));
        return access(path, R_OK) < 0 ? -errno : 0;
}

static uint64_t disk_written(const Run *run) {
        unsigned long long f[7] = {};
        FILE *fp = run->disk_stat[0] ? fopen(run->disk_stat, "re") : NULL;

        if (!fp)
                return 0;
        if (fscanf(fp, "%llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6]) != 7)
                f[6] = 0;
        fclose(fp);
        return f[6] * 512;
}

static int pagemap_read(Run *run) {
        _cleanup_close_ int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
        size_t want = run->n_pages * sizeof(uint64_t);
        off_t off = (off_t)((uintptr_t)run->region / ZSWAP_PAGE_SIZE * sizeof(uint64_t));

        if (fd < 0)
                return -errno;
        for (size_t got = 0; got < want;) {
                ssize_t k = pread(fd, (char *)run->pm + got, want - got, off + (off_t)got);

                if (k <= 0)
                        return k < 0 ? -errno : -EIO;
                got += (size_t)k;
        }
        return 0;
}

/* Pages still mapped (pagemap present): not out. */
static size_t pages_present(Run *run) {
        size_t n = 0;

        if (pagemap_read(run) < 0)
                return run->n_pages;
        for (size_t i = 0; i < run->n_pages; i++)
                n += !!(run->pm[i] & PM_PRESENT);
        return n;
}

/* ---- latencies ---- */

/* v sorted ascending; nearest rank. */
static double pct_us(const uint64_t *v, size_t n, double p) {
        size_t rank = (size_t)ceil(p * n);

        return n ? v[rank ? MIN(rank, n) - 1 : 0] / 1000.0 : NAN;
}

static void summarize(const uint64_t *sorted, size_t n, Latency *ret) {
        double sum = 0;

        for (size_t i = 0; i < n; i++)
                sum += sorted[i];
        *ret = (Latency) { .n = n, .median_us = pct_us(sorted, n, 0.5), .p99_us = pct_us(sorted, n, 0.99),
                           .sum_ns = sum };
}

/* Kernel: split the pass's faults by run->tier, and see what the rank split would say. */
static void split_exact(Run *run, size_t k, Cycle *c) {
        size_t nt = 0, np = 0, agree = 0;
        uint64_t *t = run->sorted, *p = run->sorted + k, thr;

        for (size_t i = 0; i < k; i++) {
                if (run->tier[run->lat_pg[i]])
                        t[nt++] = run->lat[i];
                else
                        p[np++] = run->lat[i];
        }
        qsort(t, nt, sizeof(*t), cmp_u64);
        qsort(p, np, sizeof(*p), cmp_u64);
        summarize(t, nt, &c->tier);
        summarize(p, np, &c->pool);
        c->tier_n = c->on_tier = nt;
        /* The rank split's threshold: the nt-th largest latency of all. */
        memcpy(run->sorted, run->lat, k * sizeof(*run->lat));
        qsort(run->sorted, k, sizeof(*run->sorted), cmp_u64);
        thr = nt ? run->sorted[k - nt] : UINT64_MAX;
        for (size_t i = 0; i < k; i++)
                agree += run->tier[run->lat_pg[i]] && run->lat[i] >= thr;
        c->rank_agree = nt ? (double)agree / nt : NAN;
}

/* zswapd: the n_tier slowest faults are the tier's. */
static void split_rank(Run *run, size_t k, size_t n_tier, Cycle *c) {
        n_tier = MIN(n_tier, k);
        memcpy(run->sorted, run->lat, k * sizeof(*run->lat));
        qsort(run->sorted, k, sizeof(*run->sorted), cmp_u64);
        summarize(run->sorted, k - n_tier, &c->pool);
        summarize(run->sorted + k - n_tier, n_tier, &c->tier);
        c->tier_n = n_tier;
        c->rank_agree = NAN;
}

/* Touch every page once in order (random: run->perm), timing pages that were out; then verify. */
static int fault_pass(Run *run, bool random, size_t *ret_k, Cycle *c) {
        uint64_t t0, dt;
        size_t k = 0, first_bad = 0;

        (void)mincore(run->region, run->len, run->vec);
        t0 = bench_now_ns();
        for (size_t i = 0; i < run->n_pages; i++) {
                size_t pg = random ? run->perm[i] : i;
                const volatile uint8_t *p = run->region + pg * ZSWAP_PAGE_SIZE;
                uint64_t a, z;

                if (bench_interrupted)
                        return -EINTR;
                a = bench_now_ns();
                (void)*p;
                z = bench_now_ns();
                if (!(run->vec[pg] & 1)) {
                        run->lat[k] = z - a;
                        run->lat_pg[k++] = pg;
                }
        }
        dt = bench_now_ns() - t0;
        c->pass_mbs = run->len / (dt / 1e3);
        c->out = k;
        c->bad = corpus_verify(run->corpus, run->region, run->n_pages, &first_bad);
        if (c->bad)
                printf("    VERIFY: %zu bad pages (first: page %zu)\n", c->bad, first_bad);
        *ret_k = k;
        return 0;
}

/* ---- waiting for the writer ---- */

/* What a backend says while it settles: a counter that grows while it writes, and whether it is idle. */
typedef int (*ProbeFn)(void *ctx, uint64_t *progress, uint64_t *pool, bool *idle);

/*
 * Poll until the backend is done: progress unchanged and the backend idle
 * for SETTLE_QUIET_MS. *ret_end: the later of progress's last change and
 * the last poll that found it busy. Idleness may be machine-wide (the
 * kernel's nr_writeback counts every file's writeback too), so a backend
 * still busy SETTLE_BUSY_MS after its last progress ends at that change;
 * one still writing SETTLE_MAX_MS after the start ends there, said loudly.
 */
static int settle(ProbeFn probe, void *ctx, uint64_t t_start, uint64_t *ret_end, uint64_t *ret_peak) {
        uint64_t changed = t_start, busy = t_start, prev = UINT64_MAX, progress, pool, peak = 0, now;
        bool idle;
        int r;

        for (;;) {
                r = probe(ctx, &progress, &pool, &idle);
                if (r < 0)
                        return r;
                now = bench_now_ns();
                peak = MAX(peak, pool);
                if (progress != prev && prev != UINT64_MAX)
                        changed = now;
                if (!idle)
                        busy = now;
                prev = progress;
                if (now - MAX(changed, busy) >= SETTLE_QUIET_MS * 1000000ULL)
                        break;
                if (now - changed >= SETTLE_BUSY_MS * 1000000ULL) {
                        printf("    still busy %d s after the last write: taken as settled at it\n",
                               SETTLE_BUSY_MS / 1000);
                        busy = changed;
                        break;
                }
                if (now - t_start >= SETTLE_MAX_MS * 1000000ULL) {
                        printf("    NOT SETTLED: still writing %d s after the pageout\n", SETTLE_MAX_MS / 1000);
                        break;
                }
                if (bench_interrupted)
                        return -EINTR;
                bench_sleep_us(POLL_MS * 1000);
        }
        *ret_end = MAX(changed, busy);
        *ret_peak = peak;
        return 0;
}

/* ---- the region ---- */

static int region_map(Run *run) {
        run->region = mmap(NULL, run->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (run->region == MAP_FAILED) {
                run->region = NULL;
                return -errno;
        }
        /* THP off before the first touch: one fault, one page. */
        (void)madvise(run->region, run->len, MADV_NOHUGEPAGE);
        corpus_fill(run->corpus, run->region, run->n_pages);
        return 0;
}

static void region_unmap(Run *run) {
        if (run->region)
                munmap(run->region, run->len);
        run->region = NULL;
}

/* Pages that came off the tier over the time spent in the faults that read it, MB/s. */
static double tier_mbs(const Cycle *c) {
        return c->done && c->tier.sum_ns > 0 ? c->on_tier * (double)ZSWAP_PAGE_SIZE / (c->tier.sum_ns / 1e3) : NAN;
}

static void cycle_print(const char *name, bool random, const Run *run, const Cycle *c) {
        printf("    %s %s: pageout %.2f s call, %.2f s to settled (%.0f MB/s); wrote %.1f MiB (disk %.1f MiB); "
               "pool peak %.1f MiB\n",
               name, random ? "random" : "sequential", c->call_s, c->settle_s, run->len / (c->settle_s * 1e6),
               c->written / MIB, c->disk / MIB, c->pool_peak / MIB);
        printf("    %s %s pass: %zu pages out, %zu on the tier; %zu faults read the tier (median %.1f us, p99 "
               "%.1f us), %zu did not (median %.2f us); %.0f MB/s; %zu bad pages\n",
               name, random ? "random" : "sequential", c->out, c->on_tier, c->tier_n, c->tier.median_us,
               c->tier.p99_us, c->pool.n, c->pool.median_us, c->pass_mbs, c->bad);
}

/* ---- kernel zswap with writeback ---- */

typedef struct KPhase {
        Run *run;
        KZswap *k;
        int lock_fd;
} KPhase;

/* The benchmarks' lock, as backend.c takes it (pid in the file for whoever waits). */
static int bench_lock(void) {
        _cleanup_close_ int fd = open(BACKEND_LOCK_FILE, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        char pid[24];

        if (fd < 0)
                return -errno;
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                if (errno != EWOULDBLOCK)
                        return -errno;
                fprintf(stderr, "bench-tier: waiting for %s\n", BACKEND_LOCK_FILE);
                if (flock(fd, LOCK_EX) < 0)
                        return -errno;
        }
        snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
        if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, strlen(pid), 0) < 0)
                return -errno;
        return TAKE_FD(fd);
}

static void bench_unlock(int fd) {
        if (fd < 0)
                return;
        (void)!ftruncate(fd, 0);
        close(fd);
}

static int kernel_probe(void *ctx, uint64_t *progress, uint64_t *pool, bool *idle) {
        Vmstat v = {};
        int r;

        (void)ctx;
        r = vmstat_read(&v);
        *progress = v.zswpwb + v.pswpout;
        *pool = meminfo_bytes("Zswap");
        *idle = v.nr_writeback == 0;
        return r;
}

/* MADV_PAGEOUT, again while it makes progress: the kernel skips pages it cannot isolate at once. */
static void kernel_pageout(Run *run) {
        size_t present = run->n_pages, prev;

        for (int i = 0; i < 8; i++) {
                prev = present;
                (void)madvise(run->region, run->len, MADV_PAGEOUT);
                present = pages_present(run);
                if (present == 0 || present >= prev)
                        break;
        }
}

/*
 * Pages the kernel wrote to swap still sit in the swap cache: find them
 * (swapped in pagemap, resident by mincore), mark them as the tier, read
 * each once and page them out again, which drops the clean copies. Returns
 * how many stay resident.
 */
static size_t kernel_drop_swapcache(Run *run, size_t *ret_tier) {
        size_t n = 0, left = 0;

        memset(run->tier, 0, run->n_pages);
        if (pagemap_read(run) < 0 || mincore(run->region, run->len, run->vec) < 0)
                return SIZE_MAX;
        for (size_t i = 0; i < run->n_pages; i++)
                if ((run->pm[i] & PM_SWAP) && (run->vec[i] & 1)) {
                        run->tier[i] = 1;
                        (void)*(const volatile uint8_t *)(run->region + i * ZSWAP_PAGE_SIZE);
                        n++;
                }
        for (int pass = 0; pass < 4; pass++) {
                for (size_t i = 0; i < run->n_pages;) {
                        size_t j = i;

                        while (j < run->n_pages && run->tier[j])
                                j++;
                        if (j > i)
                                (void)madvise(run->region + i * ZSWAP_PAGE_SIZE, (j - i) * ZSWAP_PAGE_SIZE,
                                              MADV_PAGEOUT);
                        i = j + 1;
                }
                (void)mincore(run->region, run->len, run->vec);
                left = 0;
                for (size_t i = 0; i < run->n_pages; i++)
                        left += run->tier[i] && (run->vec[i] & 1);
                if (left == 0)
                        break;
        }
        *ret_tier = n;
        return left;
}

static void kernel_report(KPhase *ph, const Vmstat *a, const Vmstat *b, const KZswapStats *s0) {
        KZswapStats s1 = {};
        uint64_t wb = b->zswpwb - a->zswpwb, out = b->pswpout - a->pswpout;

        (void)kzswap_stats(ph->k, &s1);
        printf("    kernel: %" PRIu64 " pages stored in zswap, %" PRIu64 " written to swap: %" PRIu64
               " written back from the pool, %" PRIu64 " straight (refused by the pool); pool_limit_hit +%" PRIu64
               ", rejects +%" PRIu64 "; pool now %.1f MiB, %" PRIu64 " pages\n",
               b->zswpout - a->zswpout, out, wb, out - MIN(out, wb),
               s1.pool_limit_hit != UINT64_MAX ? s1.pool_limit_hit - s0->pool_limit_hit : 0,
               s1.rejected != UINT64_MAX ? s1.rejected - s0->rejected : 0, s1.pool_bytes / MIB, s1.stored_pages);
}

static int kernel_cycle(KPhase *ph, bool random, Cycle *c) {
        Run *run = ph->run;
        Vmstat v0, v1, v2, v3;
        KZswapStats s0 = {};
        uint64_t d0, t0, t1, last;
        size_t k, n_tier = 0, left;
        char agree[16];
        int r;

        r = region_map(run);
        if (r < 0)
                return r;
        (void)kzswap_stats(ph->k, &s0);
        vmstat_read(&v0);
        d0 = disk_written(run);
        t0 = bench_now_ns();
        kernel_pageout(run);
        t1 = bench_now_ns();
        r = settle(kernel_probe, ph, t1, &last, &c->pool_peak);
        if (r < 0)
                goto out;
        vmstat_read(&v1);
        c->call_s = (t1 - t0) / 1e9;
        c->settle_s = (last - t0) / 1e9;
        c->written = (v1.pswpout - v0.pswpout) * ZSWAP_PAGE_SIZE;
        c->disk = disk_written(run) - d0;
        kernel_report(ph, &v0, &v1, &s0);

        left = kernel_drop_swapcache(run, &n_tier);
        vmstat_read(&v2);
        printf("    kernel: %zu pages in the swap cache after writeback (the tier), %zu still resident after "
               "dropping them; swap writes meanwhile %" PRIu64 "\n",
               n_tier, left, v2.pswpout - v1.pswpout);
        r = fault_pass(run, random, &k, c);
        if (r < 0)
                goto out;
        vmstat_read(&v3);
        c->read = (v3.pswpin - v2.pswpin) * ZSWAP_PAGE_SIZE;
        split_exact(run, k, c);
        printf("    kernel: the pass read %" PRIu64 " pages from swap (pswpin), %" PRIu64
               " from zswap (zswpin); rank split agrees on %s %% of the tier\n",
               v3.pswpin - v2.pswpin, v3.zswpin - v2.zswpin,
               bench_fmt(agree, sizeof(agree), "%.1f", 100 * c->rank_agree));
        c->done = true;
out:
        region_unmap(run);
        return r;
}

/* As close to D/4 as whole percents of RAM allow, at least 1. */
static unsigned kernel_pool_percent(const Run *run, uint64_t *ret_limit) {
        double want = run->len / 4.0 / (run->mem_total / 100.0);
        unsigned pct = MAX(1u, (unsigned)lround(want));

        *ret_limit = run->mem_total / 100 * pct;
        return pct;
}

static int kernel_setup(KPhase *ph, unsigned pct) {
        KZswapSetup s = {
                .sysfs = "/sys", .procfs = "/proc", .swapfile = BACKEND_KZSWAP_SWAPFILE,
                .state = KZSWAP_STATE_FILE, .compressor = "lzo",
                /* 3 D: swap stays under half full, where a read fault keeps its slot (vm_swap_full()) */
                .size = 3 * (uint64_t)ph->run->len + (64ULL << 20),
                .max_pool_percent = pct, .writeback = true,
        };
        sigset_t old;
        int r;

        if (geteuid() != 0)
                return -EPERM;
        if (access("/sys/module/zswap/parameters/enabled", W_OK) < 0)
                return -ENODEV;
        ph->lock_fd = bench_lock();
        if (ph->lock_fd < 0)
                return ph->lock_fd;
        kswap_signals_block(&old);
        r = kzswap_new(&s, &ph->k);
        kswap_signals_restore(&old);
        return r;
}

static int kernel_teardown(KPhase *ph) {
        sigset_t old;
        int r;

        kswap_signals_block(&old);
        r = kzswap_teardown(ph->k);
        ph->k = kzswap_free(ph->k);
        bench_unlock(ph->lock_fd);
        ph->lock_fd = -1;
        kswap_signals_restore(&old);
        return r;
}

static int phase_kernel(Run *run, Result *res) {
        KPhase ph = { .run = run, .lock_fd = -1 };
        unsigned pct = kernel_pool_percent(run, &res->pool_limit);
        int r, rt;

        printf("kzswap phase: max_pool_percent %u of %.0f MiB RAM = pool limit %.1f MiB (D/4 = %.1f MiB), "
               "accept_threshold_percent as found, shrinker on\n",
               pct, run->mem_total / MIB, res->pool_limit / MIB, run->len / 4 / MIB);
        if (res->pool_limit > run->len / 2)
                printf("  note: that limit holds most of the compressed data set; little will be written back\n");
        r = kernel_setup(&ph, pct);
        if (r < 0) {
                printf("kzswap phase: set-up failed: %s\n", strerror(-r));
                kernel_teardown(&ph);
                return r;
        }
        printf("  %s\n", kzswap_describe(ph.k));
        for (int i = 0; i < 2 && r == 0 && !bench_interrupted; i++) {
                r = kernel_cycle(&ph, i == 1, &res->c[i]);
                if (r == 0)
                        cycle_print("kzswap", i == 1, run, &res->c[i]);
        }
        rt = kernel_teardown(&ph);
        if (rt < 0)
                printf("kzswap teardown failed: %s; check swapon --show and /sys/module/zswap/parameters\n",
                       strerror(-rt));
        return r ?: rt;
}

/* ---- zswapd's status, by field name ---- */

typedef struct ZStatus {
        uint64_t pool_bytes, pool_limit_bytes, staged_pages, tier_pages, tier_bytes, tier_written, tier_reads,
                tier_read_bytes, tier_errors, tier_prefetched, tier_corrupt, tier_written_pages;
        char tier_state[64];
        bool has_tier; /* the daemon reports tier_written */
} ZStatus;

/* `zswapctl --socket S status --bytes`: "name value" lines; unknown names are skipped. */
static int zstatus_read(const Run *run, Backend *b, ZStatus *ret) {
        static const struct {
                const char *name;
                size_t off;
        } keys[] = {
#define K(n) { #n, offsetof(ZStatus, n) }
                K(pool_bytes), K(pool_limit_bytes), K(staged_pages), K(tier_pages), K(tier_bytes),
                K(tier_written), K(tier_reads), K(tier_read_bytes), K(tier_errors), K(tier_prefetched),
                K(tier_corrupt), K(tier_written_pages),
#undef K
        };
        char cmd[8400], line[256], name[64], value[64];
        FILE *p;
        int status;

        snprintf(cmd, sizeof(cmd), "%s/../client/tools/zswapctl --socket %s status --bytes", run->exe_dir,
                 backend_socket(b));
        p = popen(cmd, "re");
        if (!p)
                return -errno;
        *ret = (ZStatus) {};
        while (fgets(line, sizeof(line), p)) {
                if (sscanf(line, "%63s %63s", name, value) != 2)
                        continue;
                if (strcmp(name, "tier_state") == 0)
                        snprintf(ret->tier_state, sizeof(ret->tier_state), "%s", value);
                ret->has_tier |= strcmp(name, "tier_written") == 0;
                for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                        if (strcmp(name, keys[i].name) == 0)
                                *(uint64_t *)((char *)ret + keys[i].off) = strtoull(value, NULL, 10);
        }
        status = pclose(p);
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

typedef struct ZPhase {
        Run *run;
        Backend *b;
        uint64_t pool_max;
        const char *export_path; /* nbd: the export file, fdatasync'ed and dropped before a pass */
} ZPhase;

static int zswapd_probe(void *ctx, uint64_t *progress, uint64_t *pool, bool *idle) {
        static unsigned failures;
        static uint64_t last;
        ZPhase *ph = ctx;
        ZStatus s = {};

        /* A status read can fail while the daemon is busy: busy this poll, give up after 50 in a row. */
        if (zstatus_read(ph->run, ph->b, &s) < 0) {
                *progress = last;
                *pool = 0;
                *idle = false;
                return ++failures >= 50 ? -EIO : 0;
        }
        failures = 0;
        *progress = last = s.tier_written;
        *pool = s.pool_bytes;
        *idle = s.staged_pages == 0 && s.pool_bytes <= ph->pool_max;
        return 0;
}

/* zswap_pageout() again while pages remain, until PAGEOUT_STALL_MS pass without progress. */
static int zswapd_pageout(ZPhase *ph, BackendClient *c) {
        Run *run = ph->run;
        size_t present = run->n_pages, best = run->n_pages;
        uint64_t stall = bench_now_ns();
        int r;

        while (present > 0 && !bench_interrupted) {
                r = backend_pageout(c, run->region, run->len);
                if (r < 0 && r != -EAGAIN && r != -ENOSPC)
                        return r;
                present = pages_present(run);
                if (present < best) {
                        best = present;
                        stall = bench_now_ns();
                } else if (bench_now_ns() - stall > PAGEOUT_STALL_MS * 1000000ULL) {
                        printf("    zswapd: %zu pages still resident, pageout makes no progress\n", present);
                        break;
                } else {
                        bench_sleep_us(POLL_MS * 1000);
                }
        }
        return bench_interrupted ? -EINTR : 0;
}

/* nbd-server writes through the page cache: put the export on the disk and out of the cache. */
static void export_drop_cache(const char *path) {
        _cleanup_close_ int fd = -1;
        uint64_t t0 = bench_now_ns();

        if (!path)
                return;
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || fdatasync(fd) < 0 || posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) {
                printf("    cannot drop the export's cache: %m\n");
                return;
        }
        printf("    export fdatasync + cache drop: %.2f s\n", (bench_now_ns() - t0) / 1e9);
}

static int zswapd_cycle_measure(ZPhase *ph, BackendClient *c, bool random, Cycle *cy) {
        Run *run = ph->run;
        ZStatus s0, s1, s2, s3;
        uint64_t d0, t0, t1, last;
        size_t k;
        int r;

        zstatus_read(run, ph->b, &s0);
        d0 = disk_written(run);
        t0 = bench_now_ns();
        r = zswapd_pageout(ph, c);
        t1 = bench_now_ns();
        if (r == 0)
                r = settle(zswapd_probe, ph, t1, &last, &cy->pool_peak);
        if (r < 0)
                return r;
        zstatus_read(run, ph->b, &s1);
        cy->call_s = (t1 - t0) / 1e9;
        cy->settle_s = (last - t0) / 1e9;
        cy->written = s1.tier_written - s0.tier_written;
        cy->disk = disk_written(run) - d0;
        printf("    zswapd: tier %s, %" PRIu64 " pages (%.1f MiB compressed) on it; wrote %" PRIu64
               " pages in %.1f MiB; errors %" PRIu64 ", corrupt %" PRIu64 "; pool %.1f MiB of %.1f MiB\n",
               s1.tier_state[0] ? s1.tier_state : "?", s1.tier_pages, s1.tier_bytes / MIB,
               s1.tier_written_pages - s0.tier_written_pages, cy->written / MIB, s1.tier_errors, s1.tier_corrupt,
               s1.pool_bytes / MIB, ph->pool_max / MIB);
        if (!s1.has_tier)
                printf("    zswapd reports no tier_written: this daemon has no second tier yet\n");
        export_drop_cache(ph->export_path);
        zstatus_read(run, ph->b, &s2);
        r = fault_pass(run, random, &k, cy);
        if (r < 0)
                return r;
        zstatus_read(run, ph->b, &s3);
        /* A fault that reads the tier reads its object's window and installs the neighbours that came
         * with it: those are never faulted, so the tier's faults are its reads. */
        split_rank(run, k, s3.tier_reads - s2.tier_reads, cy);
        cy->read = s3.tier_read_bytes - s2.tier_read_bytes;
        cy->on_tier = MIN(s2.tier_pages, k);
        printf("    zswapd: the pass: tier_pages %" PRIu64 " -> %" PRIu64 ", tier_reads +%" PRIu64
               " (%.1f MiB), prefetched +%" PRIu64 ", errors +%" PRIu64 "\n",
               s2.tier_pages, s3.tier_pages, s3.tier_reads - s2.tier_reads,
               (s3.tier_read_bytes - s2.tier_read_bytes) / MIB, s3.tier_prefetched - s2.tier_prefetched,
               s3.tier_errors - s2.tier_errors);
        cy->done = true;
        return 0;
}

static int zswapd_cycle(ZPhase *ph, bool random, Cycle *cy) {
        Run *run = ph->run;
        BackendClient *c = NULL;
        int r;

        r = backend_client_new(ph->b, &c);
        if (r < 0)
                return r;
        r = region_map(run);
        if (r == 0)
                r = backend_attach(c, run->region, run->len);
        if (r == 0) {
                r = zswapd_cycle_measure(ph, c, random, cy);
                backend_detach(c, run->region, run->len);
        }
        region_unmap(run);
        backend_client_free(c);
        return r;
}

/* ---- nbd-server ---- */

typedef struct Nbd {
        char dir[64], conf[96], pidfile[96];
        pid_t pid;
        int port;
} Nbd;

/* A port nobody listens on now (bound and released: a small race, fine for a bench). */
static int free_port(void) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof(a);
        _cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
            getsockname(fd, (struct sockaddr *)&a, &len) < 0)
                return -errno;
        return ntohs(a.sin_port);
}

static bool port_accepts(int port) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        _cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        return fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
}

/* 0 if pid exited 0; -ENOENT if it could not execute (127); else -EIO. */
static int run_wait(pid_t pid) {
        int status;

        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        if (!WIFEXITED(status))
                return -EIO;
        return WEXITSTATUS(status) == 0 ? 0 : WEXITSTATUS(status) == 127 ? -ENOENT : -EIO;
}

static void nbd_stop(Nbd *n) {
        if (n->pid > 0) {
                kill(n->pid, SIGTERM);
                for (int i = 0; i < 200 && kill(n->pid, 0) == 0; i++)
                        kswap_sleep_ms(10);
                if (kill(n->pid, 0) == 0)
                        kill(n->pid, SIGKILL);
        }
        n->pid = 0;
        unlink(n->conf);
        unlink(n->pidfile);
        if (n->dir[0])
                rmdir(n->dir);
        unlink(NBD_EXPORT);
}

/* nbd-server daemonizes (it forks per client) and writes its pid to a file of ours. */
static int nbd_start(Nbd *n) {
        char pid[32] = "";
        pid_t child;
        FILE *f;
        int r;

        snprintf(n->dir, sizeof(n->dir), "/tmp/zswap-bench-nbd.XXXXXX");
        if (!mkdtemp(n->dir))
                return n->dir[0] = 0, -errno;
        snprintf(n->conf, sizeof(n->conf), "%s/config", n->dir);
        snprintf(n->pidfile, sizeof(n->pidfile), "%s/pid", n->dir);
        n->port = free_port();
        if (n->port < 0)
                return n->port;
        f = fopen(n->conf, "we");
        if (!f)
                return -errno;
        fprintf(f, "[generic]\n    listenaddr = 127.0.0.1\n    port = %d\n    allowlist = false\n"
                   "[%s]\n    exportname = %s\n    flush = true\n",
                n->port, NBD_EXPORT_NAME, NBD_EXPORT);
        if (fclose(f) != 0)
                return -errno;
        child = _Fork();
        if (child < 0)
                return -errno;
        if (child == 0) {
                setpgid(0, 0);
                execlp("nbd-server", "nbd-server", "-C", n->conf, "-p", n->pidfile, (char *)NULL);
                _exit(127);
        }
        r = run_wait(child);
        if (r < 0)
                return r;
        for (int i = 0; i < 500 && !port_accepts(n->port); i++)
                kswap_sleep_ms(10);
        f = fopen(n->pidfile, "re");
        if (f) {
                if (!fgets(pid, sizeof(pid), f))
                        pid[0] = 0;
                fclose(f);
        }
        n->pid = atoi(pid);
        return n->pid > 0 && port_accepts(n->port) ? 0 : -ETIMEDOUT;
}

/* ---- zswapd phases ---- */

/* The tier's backing: a file of its size, given its blocks now, as the kernel's swapfile has. */
static int backing_create(const char *path, uint64_t size) {
        _cleanup_close_ int fd = -1;

        unlink(path);
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return -errno;
        if (fallocate(fd, 0, 0, (off_t)size) < 0 || fsync(fd) < 0)
                return -errno;
        return 0;
}

static int tier_config(char *path, size_t size, const char *backing, uint64_t tier_size) {
        int fd;
        FILE *f;

        snprintf(path, size, "/tmp/zswap-bench-tier.XXXXXX");
        fd = mkstemp(path);
        if (fd < 0)
                return -errno;
        f = fdopen(fd, "w");
        if (!f) {
                close(fd);
                return -errno;
        }
        fprintf(f, "[tier]\nbacking = %s\nkey = %s.key\nsize = %" PRIu64 "M\nwriteback_rate = 0\n", backing, backing,
                tier_size >> 20);
        return fclose(f) == 0 ? 0 : -errno;
}

static int zswapd_run(ZPhase *ph, const char *conf, Result *res, const char *name) {
        char pool[32];
        const char *const args[] = { "--pool-max", pool, "--config", conf, NULL };
        BackendConfig cfg = { .kind = BACKEND_ZSWAPD, .compressor = ph->run->o->compressor,
                              .zswapd_path = ph->run->o->zswapd, .zswapd_args = args };
        char log[128] = "";
        int r = 0, rt;

        snprintf(pool, sizeof(pool), "%" PRIu64, ph->pool_max);
        r = backend_setup(&cfg, &ph->b);
        if (r < 0) {
                printf("%s phase: daemon set-up failed: %s (log %s)\n", name, strerror(-r),
                       backend_last_log() ?: "-");
                return r;
        }
        printf("  %s\n", backend_describe(ph->b));
        for (int i = 0; i < 2 && r == 0 && !bench_interrupted; i++) {
                r = zswapd_cycle(ph, i == 1, &res->c[i]);
                if (r == 0)
                        cycle_print(name, i == 1, ph->run, &res->c[i]);
                if (res->c[i].bad)
                        backend_keep_log(ph->b);
        }
        if (r < 0 && r != -EINTR) {
                printf("  %s phase failed: %s\n", name, strerror(-r));
                backend_keep_log(ph->b);
        }
        if (backend_log(ph->b))
                snprintf(log, sizeof(log), "%s", backend_log(ph->b));
        rt = backend_teardown(ph->b);
        ph->b = NULL;
        if (log[0] && (r < 0 || rt < 0 || res->c[0].bad || res->c[1].bad))
                printf("  daemon log: %s\n", log);
        return r ?: rt;
}

static int phase_zswapd(Run *run, int which, Result *res) {
        /* the tier holds both cycles' worth with room: the first region's pages are freed as it is unmapped */
        uint64_t tier_size = ALIGN_TO(2 * (uint64_t)run->len, 1ULL << 20);
        ZPhase ph = { .run = run, .pool_max = run->len / 4 };
        char conf[64] = "", backing[160];
        Nbd nbd = {};
        int r;

        res->pool_limit = ph.pool_max;
        printf("%s phase: --pool-max %" PRIu64 " (%.1f MiB), tier %.0f MiB\n", backend_label[which], ph.pool_max,
               ph.pool_max / MIB, tier_size / MIB);
        if (which == ZFILE) {
                r = backing_create(TIER_FILE, tier_size);
                snprintf(backing, sizeof(backing), "%s", TIER_FILE);
        } else {
                r = backing_create(NBD_EXPORT, tier_size);
                if (r == 0)
                        r = nbd_start(&nbd);
                if (r == 0)
                        printf("  nbd-server pid %d on 127.0.0.1:%d, export %s (%s)\n", (int)nbd.pid, nbd.port,
                               NBD_EXPORT_NAME, NBD_EXPORT);
                snprintf(backing, sizeof(backing), "nbd://127.0.0.1:%d/%s", nbd.port, NBD_EXPORT_NAME);
                ph.export_path = NBD_EXPORT;
        }
        if (r == 0)
                r = tier_config(conf, sizeof(conf), backing, tier_size);
        if (r == -ENOENT && which == ZNBD)
                printf("%s phase: no nbd-server (scripts/setup-deps.sh installs it)\n", backend_label[which]);
        else if (r < 0)
                printf("%s phase: set-up failed: %s\n", backend_label[which], strerror(-r));
        else
                r = zswapd_run(&ph, conf, res, backend_label[which]);
        if (conf[0])
                unlink(conf);
        if (which == ZNBD)
                nbd_stop(&nbd);
        else
                unlink(TIER_FILE);
        return r;
}

/* ---- output ---- */

/* The table's rows, in order. */
typedef enum Fig {
        F_POOL_LIMIT, F_SETTLED_MBS, F_CALL_MBS, F_WRITTEN, F_WA, F_WA_DISK, F_ON_TIER, F_TIER_FAULTS, F_READ,
        F_SEQ_MED, F_SEQ_P99, F_RND_MED, F_RND_P99, F_POOL_SEQ_MED, F_POOL_RND_MED, F_TIER_SEQ_MBS,
        F_TIER_RND_MBS, F_PASS_SEQ_MBS, F_PASS_RND_MBS, F_BAD, N_FIGS
} Fig;

/* One figure of a result, NAN where not measured. Pageout and writes: both cycles. */
static double figure(const Run *run, const Result *r, Fig f) {
        const Cycle *s = &r->c[0], *q = &r->c[1];
        bool both = s->done && q->done;
        size_t out = s->out + q->out;

        switch (f) {
        case F_POOL_LIMIT: return s->done ? r->pool_limit / MIB : NAN;
        case F_SETTLED_MBS: return both ? 2.0 * run->len / ((s->settle_s + q->settle_s) * 1e6) : NAN;
        case F_CALL_MBS: return both ? 2.0 * run->len / ((s->call_s + q->call_s) * 1e6) : NAN;
        case F_WRITTEN: return both ? (s->written + q->written) / 2.0 / MIB : NAN;
        case F_WA: return both ? (s->written + q->written) / (2.0 * run->len) : NAN;
        case F_WA_DISK: return both ? (s->disk + q->disk) / (2.0 * run->len) : NAN;
        case F_ON_TIER: return both && out ? 100.0 * (s->on_tier + q->on_tier) / out : NAN;
        case F_TIER_FAULTS: return both && out ? 100.0 * (s->tier_n + q->tier_n) / out : NAN;
        case F_SEQ_MED: return s->done ? s->tier.median_us : NAN;
        case F_SEQ_P99: return s->done ? s->tier.p99_us : NAN;
        case F_RND_MED: return q->done ? q->tier.median_us : NAN;
        case F_RND_P99: return q->done ? q->tier.p99_us : NAN;
        case F_POOL_SEQ_MED: return s->done ? s->pool.median_us : NAN;
        case F_POOL_RND_MED: return q->done ? q->pool.median_us : NAN;
        case F_TIER_SEQ_MBS: return tier_mbs(s);
        case F_TIER_RND_MBS: return tier_mbs(q);
        case F_READ: return both ? (s->read + q->read) / 2.0 / MIB : NAN;
        case F_PASS_SEQ_MBS: return s->done ? s->pass_mbs : NAN;
        case F_PASS_RND_MBS: return q->done ? q->pass_mbs : NAN;
        case F_BAD: return both ? (double)(s->bad + q->bad) : NAN;
        case N_FIGS: break;
        }
        return NAN;
}

static void print_table(const Run *run, const Result res[N_BACKENDS]) {
        static const struct {
                const char *name, *fmt;
        } rows[N_FIGS] = {
                [F_POOL_LIMIT] = { "pool limit MiB", "%.1f" },
                [F_SETTLED_MBS] = { "pageout to settled MB/s", "%.0f" },
                [F_CALL_MBS] = { "pageout call MB/s", "%.0f" },
                [F_WRITTEN] = { "written to backing MiB/cycle", "%.1f" },
                [F_WA] = { "write amplification", "%.3f" },
                [F_WA_DISK] = { "disk write ampl. (sectors)", "%.3f" },
                [F_ON_TIER] = { "pages on the tier %", "%.1f" },
                [F_TIER_FAULTS] = { "faults reading the tier %", "%.1f" },
                [F_READ] = { "read from backing MiB/cycle", "%.1f" },
                [F_SEQ_MED] = { "tier fault seq median us", "%.1f" },
                [F_SEQ_P99] = { "tier fault seq p99 us", "%.1f" },
                [F_RND_MED] = { "tier fault rand median us", "%.1f" },
                [F_RND_P99] = { "tier fault rand p99 us", "%.1f" },
                [F_POOL_SEQ_MED] = { "other fault seq median us", "%.2f" },
                [F_POOL_RND_MED] = { "other fault rand median us", "%.2f" },
                [F_TIER_SEQ_MBS] = { "tier pages seq MB/s", "%.1f" },
                [F_TIER_RND_MBS] = { "tier pages rand MB/s", "%.1f" },
                [F_PASS_SEQ_MBS] = { "read-back seq MB/s (mix)", "%.0f" },
                [F_PASS_RND_MBS] = { "read-back rand MB/s (mix)", "%.0f" },
                [F_BAD] = { "bad pages", "%.0f" },
        };
        char cell[N_BACKENDS][24], ratio[2][16];

        printf("\nD = %zu MiB. ratio = zswapd / kernel: lower is better for latency and write amplification,\n"
               "higher for MB/s. Tier faults read the backing store (kernel: the pages found in the swap\n"
               "cache after writeback; zswapd: the K slowest faults, K = its tier reads in the pass); other\n"
               "faults are served from RAM (the pool, same-filled or zero pages, or already installed by a\n"
               "neighbour's tier read). Tier pages MB/s: pages that were on the tier, 4 KiB each, over the\n"
               "time spent in the faults that read it. Pageout and bytes: both cycles.\n",
               run->len >> 20);
        printf("%-30s %12s %12s %12s %9s %9s\n", "metric", backend_label[KZSWAP], backend_label[ZFILE],
               backend_label[ZNBD], "file/k", "nbd/k");
        for (Fig i = 0; i < N_FIGS; i++) {
                double v[N_BACKENDS];

                for (int b = 0; b < N_BACKENDS; b++) {
                        v[b] = figure(run, &res[b], i);
                        bench_fmt(cell[b], sizeof(cell[b]), rows[i].fmt, v[b]);
                }
                bench_ratio(ratio[0], sizeof(ratio[0]), v[ZFILE], v[KZSWAP]);
                bench_ratio(ratio[1], sizeof(ratio[1]), v[ZNBD], v[KZSWAP]);
                printf("%-30s %12s %12s %12s %9s %9s\n", rows[i].name, cell[KZSWAP], cell[ZFILE], cell[ZNBD],
                       ratio[0], ratio[1]);
        }
        if (isfinite(res[KZSWAP].c[0].rank_agree) && isfinite(res[KZSWAP].c[1].rank_agree))
                printf("kernel: the rank split (slowest K) agrees with the exact one on %.1f %% (seq) and %.1f %% "
                       "(rand) of its tier faults\n",
                       100 * res[KZSWAP].c[0].rank_agree, 100 * res[KZSWAP].c[1].rank_agree);
}

/* ---- main ---- */

static void help(void) {
        printf("bench-tier [--size MiB | --quick] [--zswapd PATH] [--corpus DIR] [--compressor lz4|zstd]\n"
               "           [--skip-kzswap] [--skip-file] [--skip-nbd]\n\n"
               "zswapd's second tier (a file under /var/tmp, an nbd-server export on loopback) against\n"
               "kernel zswap writing back to a swapfile under /var/tmp, pools bounded to a quarter of the\n"
               "data. Needs root; the kernel phase takes %s. --quick is --size 256.\n",
               BACKEND_LOCK_FILE);
}

static int parse_argv(int argc, char **argv, Options *o) {
        static const struct option opts[] = {
                { "help", no_argument, NULL, 'h' },          { "zswapd", required_argument, NULL, 'd' },
                { "size", required_argument, NULL, 's' },    { "quick", no_argument, NULL, 'q' },
                { "corpus", required_argument, NULL, 'c' },  { "compressor", required_argument, NULL, 'C' },
                { "skip-kzswap", no_argument, NULL, 'K' },   { "skip-file", no_argument, NULL, 'F' },
                { "skip-nbd", no_argument, NULL, 'N' },      {}
        };
        char *end;
        int c;

        while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case 'd': o->zswapd = optarg; break;
                case 'c': o->corpus = optarg; break;
                case 'q': o->size_mib = 256; break;
                case 'K': o->skip[KZSWAP] = true; break;
                case 'F': o->skip[ZFILE] = true; break;
                case 'N': o->skip[ZNBD] = true; break;
                case 's':
                        o->size_mib = strtoul(optarg, &end, 10);
                        if (*end || o->size_mib < 16 || o->size_mib > (1UL << 20))
                                return fprintf(stderr, "bad --size: %s\n", optarg), -EINVAL;
                        break;
                case 'C':
                        if (strcmp(optarg, "lz4") != 0 && strcmp(optarg, "zstd") != 0)
                                return fprintf(stderr, "bad --compressor: %s\n", optarg), -EINVAL;
                        o->compressor = optarg;
                        break;
                default:
                        return -EINVAL;
                }
        }
        if (optind < argc)
                return fprintf(stderr, "unexpected argument: %s\n", argv[optind]), -EINVAL;
        return 1;
}

static int run_init(Run *run, const Options *o, const Corpus *corpus) {
        _cleanup_free_ char *exe = realpath("/proc/self/exe", NULL);

        run->o = o;
        run->corpus = corpus;
        run->len = o->size_mib << 20;
        run->n_pages = run->len / ZSWAP_PAGE_SIZE;
        run->mem_total = meminfo_bytes("MemTotal");
        snprintf(run->exe_dir, sizeof(run->exe_dir), "%s", exe ? dirname(exe) : ".");
        if (disk_stat_path("/var/tmp", run->disk_stat, sizeof(run->disk_stat)) < 0)
                run->disk_stat[0] = 0;
        run->vec = malloc(run->n_pages);
        run->tier = malloc(run->n_pages);
        run->pm = malloc(run->n_pages * sizeof(*run->pm));
        run->lat = malloc(run->n_pages * sizeof(*run->lat));
        run->sorted = malloc(2 * run->n_pages * sizeof(*run->sorted));
        run->lat_pg = malloc(run->n_pages * sizeof(*run->lat_pg));
        run->perm = malloc(run->n_pages * sizeof(*run->perm));
        if (!run->vec || !run->tier || !run->pm || !run->lat || !run->sorted || !run->lat_pg || !run->perm)
                return -ENOMEM;
        corpus_shuffle(run->perm, run->n_pages, RANDOM_SEED);
        return 0;
}

static void run_done(Run *run) {
        free(run->vec);
        free(run->tier);
        free(run->pm);
        free(run->lat);
        free(run->sorted);
        free(run->lat_pg);
        free(run->perm);
}

static int load_corpus(const Options *o, const char *exe_dir, char **ret_dir, Corpus **ret) {
        int r = o->corpus ? ((*ret_dir = realpath(o->corpus, NULL)) ? 0 : -errno)
                          : corpus_find_dir(exe_dir, ret_dir);

        return r < 0 ? r : corpus_load(*ret_dir, ret);
}

int main(int argc, char **argv) {
        Options o = { .compressor = "lz4", .size_mib = 1024 };
        _cleanup_free_ char *corpus_dir = NULL;
        _cleanup_corpus_ Corpus *corpus = NULL;
        Result res[N_BACKENDS] = {};
        Run run = {};
        char load[64];
        struct utsname u;
        size_t bad = 0;
        int r, failed = 0;

        r = parse_argv(argc, argv, &o);
        if (r <= 0)
                return r < 0 ? 2 : 0;
        if (run_init(&run, &o, NULL) < 0)
                return fprintf(stderr, "out of memory\n"), 1;
        r = load_corpus(&o, run.exe_dir, &corpus_dir, &corpus);
        if (r < 0)
                return fprintf(stderr, "cannot load the corpus: %s; try --corpus or $ZSWAP_CORPUS\n", strerror(-r)), 1;
        run.corpus = corpus;
        bench_install_signals();
        setvbuf(stdout, NULL, _IOLBF, 0);
        uname(&u);
        printf("machine: %ld CPUs, Linux %s, %.0f MiB RAM; D = %lu MiB; disk stat %s; load %s\n",
               sysconf(_SC_NPROCESSORS_ONLN), u.release, run.mem_total / MIB, o.size_mib,
               run.disk_stat[0] ? run.disk_stat : "-", bench_loadavg(load, sizeof(load)));

        for (int b = 0; b < N_BACKENDS && !bench_interrupted; b++) {
                if (o.skip[b]) {
                        printf("%s phase: skipped\n", backend_label[b]);
                        continue;
                }
                failed |= (b == KZSWAP ? phase_kernel(&run, &res[b]) : phase_zswapd(&run, b, &res[b])) < 0;
        }
        print_table(&run, res);
        run_done(&run);
        printf("load at end %s\n", bench_loadavg(load, sizeof(load)));
        for (int b = 0; b < N_BACKENDS; b++)
                bad += res[b].c[0].bad + res[b].c[1].bad;
        if (bad)
                printf("VERIFICATION FAILED: %zu pages differ from what was written\n", bad);
        if (bench_interrupted)
                return printf("interrupted by signal %d\n", (int)bench_interrupted), 130;
        return failed || bad ? 1 : 0;
}
