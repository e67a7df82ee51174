/*
 * bench-equal.c: zswapd against kernel zram at equal memory, on a Zipf
 * access pattern over corpus pages.
 *
 * A process fills a heap of --size MiB with corpus pages and reads it page
 * by page in a Zipf(--skew) order (the hot ranks scattered over the heap by
 * a fixed random permutation), each page checked whole against the corpus.
 * For each fraction of --out, both stores get the same bound on the heap's
 * resident memory, (100 - out) % of it:
 *
 *   zswapd  the heap registered with a daemon of the bench's own, and
 *           zswap_set_limit() of that many bytes: the daemon's reclaim
 *           keeps the process under it; the warm-up runs until the daemon
 *           says it is there;
 *   zram    the process in a memory cgroup of its own whose limit is that
 *           many bytes above what the process had charged before it made
 *           the heap, with kernel zram-lz4 as its swap (page-cluster 0):
 *           the kernel reclaims to stay under it, as it would for a service
 *           with memory.max.
 *
 * The memory each used is then measured the same way for both: the heap's
 * resident pages (mincore()) plus the store's pool (zram: mem_used_total;
 * zswapd: the daemon's pool bytes), sampled over the measured part. zram
 * runs first; zswapd's limit is then moved, run after run (up to
 * EQUAL_TRIES), until its heap and pool together use what zram's did
 * within 5 %: its limit is met once per reclaim tick, not at every page
 * as a cgroup's is, so the same bound would not be the same memory. The
 * table gives each run's bound, accesses per second, the median and p99 of
 * an access (a read of one 4 KiB page, a fault or not) and the memory,
 * then the ratios zswapd / zram of each store's last run.
 *
 *   sudo build/bench/bench-equal [--size MiB] [--out 50,80] [--skew S]
 *        [--accesses N] [--warmup N] [--zswapd PATH] [--corpus DIR]
 *
 * Needs root (zram, swap, cgroups). Each measurement runs in a child
 * process of its own, so that the cgroup and the daemon's client end with it.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "bench-util.h"
#include "corpus.h"
#include "kswap.h"
#include "macro.h"
#include "reclaim-sim.h"
#include "util.h"
#include "zram.h"
#include "zswap.h"

#define MIB (1024.0 * 1024.0)
#define MAX_OUT 8
#define SAMPLES 32            /* memory samples over the measured part */
#define SETTLE_SLACK 1.05     /* zswapd "at the limit": resident within 5 % above it */
#define SETTLE_TIMEOUT_S 120.0
#define EQUAL_TRIES 4         /* zswapd runs to reach zram's memory */
#define EQUAL_SLACK 0.05

typedef struct Options {
        const char *zswapd, *corpus;
        uint64_t size;
        unsigned out[MAX_OUT], n_out;
        double skew;
        size_t accesses, warmup;
        uint64_t seed;
} Options;

/* What one child measured, sent up a pipe. */
typedef struct Result {
        int err;                /* 0, or the -errno that ended it */
        size_t mismatches;      /* accesses that read a wrong page, and pages wrong at the end */
        double rate;            /* accesses per second over the measured part */
        double p50_us, p99_us;
        double resident_mib;    /* the heap's resident pages, mean of the samples */
        double pool_mib;        /* the store's pool, mean of the samples */
        double settle_s;        /* zswapd: set_limit until resident at the limit */
} Result;

typedef struct Ctx {
        const Options *o;
        const Corpus *corpus;
        Backend *b;
        BackendKind kind;
        size_t n_pages;
        uint64_t limit;         /* bytes of heap that may stay resident */
        const uint32_t *trace;  /* warm-up, then the measured part */
        uint64_t *lat;          /* ns per access of the measured part */
        unsigned char *vec;     /* mincore() of the heap */
} Ctx;

/* ---- one measurement, in a child ---- */

/* The store's pool now: zswapd's through the client this process holds
 * (backend_memory() would connect anew for each sample), zram's device. */
static uint64_t pool_bytes(const Ctx *c, struct zswap_client *zc) {
        struct zswap_stats st;
        uint64_t orig, used = 0;

        if (zc)
                return zswap_get_stats(zc, ZSWAP_STATS_GLOBAL, &st) == 0 ? st.pool_bytes : 0;
        return backend_memory(c->b, &orig, &used) == 0 ? used : 0;
}

static size_t replay(const Ctx *c, struct zswap_client *zc, const uint8_t *heap, size_t from, size_t to,
                     uint64_t *lat, Result *res) {
        size_t every = MAX((to - from) / SAMPLES, (size_t)1), bad = 0, samples = 0;
        double resident = 0, pool = 0;

        for (size_t i = from; i < to; i++) {
                const uint8_t *page = heap + (size_t)c->trace[i] * ZSWAP_PAGE_SIZE;
                uint64_t t0 = lat ? bench_now_ns() : 0;
                uint64_t sum = corpus_checksum(page);
                if (lat)
                        lat[i - from] = bench_now_ns() - t0;
                bad += sum != c->corpus->sums[corpus_index(c->trace[i])];
                if (lat && (i - from) % every == 0) {
                        resident += (double)zram_resident_pages((void *)heap, c->n_pages * ZSWAP_PAGE_SIZE, c->vec) *
                                    ZSWAP_PAGE_SIZE;
                        pool += (double)pool_bytes(c, zc);
                        samples++;
                }
                if ((i & 0xffff) == 0 && bench_interrupted)
                        break;
        }
        if (lat && samples) {
                res->resident_mib = resident / samples / MIB;
                res->pool_mib = pool / samples / MIB;
        }
        return bad;
}

static int wait_settled(struct zswap_client *zc, uint64_t limit, Result *res) {
        uint64_t t0 = bench_now_ns();
        struct zswap_stats st;

        for (;;) {
                int r = zswap_get_stats(zc, ZSWAP_STATS_CLIENT, &st);
                if (r < 0)
                        return r;
                res->settle_s = (bench_now_ns() - t0) / 1e9;
                if (st.reclaim_evictions > 0 && st.resident_bytes <= limit * SETTLE_SLACK)
                        return 0;
                if (res->settle_s > SETTLE_TIMEOUT_S || bench_interrupted)
                        return bench_interrupted ? -EINTR : -ETIMEDOUT;
                bench_sleep_us(50000);
        }
}

static void child(const Ctx *c, const KswapCgroup *cg, int fd) {
        const Options *o = c->o;
        size_t len = c->n_pages * ZSWAP_PAGE_SIZE;
        struct zswap_client *zc = NULL;
        Result res = {};
        uint8_t *heap = MAP_FAILED;
        uint64_t base = 0;
        int r = 0;

        /* everything this process touches from here on but the heap was
         * touched before it joins the cgroup (the latency array, the
         * mincore vector), so the limit is about the heap */
        memset(c->lat, 0, o->accesses * sizeof(uint64_t));
        memset(c->vec, 0, c->n_pages);
        if (c->kind == BACKEND_ZRAM) {
                r = kswap_cgroup_join(cg, 0) ?: kswap_cgroup_usage(cg, &base);
                if (r == 0)
                        r = kswap_cgroup_limit(cg, base + c->limit);
        } else
                r = zswap_connect(backend_socket(c->b), &zc);
        if (r == 0) {
                heap = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                r = heap == MAP_FAILED ? -errno : 0;
        }
        if (r == 0) {
                (void)madvise(heap, len, MADV_NOHUGEPAGE);
                corpus_fill(c->corpus, heap, c->n_pages);
                if (zc)
                        r = zswap_register(zc, heap, len) ?: zswap_set_limit(zc, c->limit) ?:
                                                               wait_settled(zc, c->limit, &res);
        }
        if (r == 0) {
                res.mismatches += replay(c, zc, heap, 0, o->warmup, NULL, &res);
                uint64_t t0 = bench_now_ns();
                res.mismatches += replay(c, zc, heap, o->warmup, o->warmup + o->accesses, c->lat, &res);
                res.rate = (double)o->accesses / ((bench_now_ns() - t0) / 1e9);
                qsort(c->lat, o->accesses, sizeof(uint64_t), cmp_u64);
                res.p50_us = c->lat[o->accesses / 2] / 1e3;
                res.p99_us = c->lat[o->accesses * 99 / 100] / 1e3;
                /* every page, whole: nothing lost on the way */
                if (zc)
                        r = zswap_unregister(zc, heap, len);
                res.mismatches += corpus_verify(c->corpus, heap, c->n_pages, NULL);
        }
        res.err = r;
        (void)!write(fd, &res, sizeof(res));
        _exit(0);
}

static int measure(const Ctx *c, Result *res) {
        KswapCgroup cg = {};
        int p[2], r;
        pid_t pid;

        /* zram: the child runs in a memory cgroup of its own */
        if (c->kind == BACKEND_ZRAM && (r = kswap_cgroup_make(&cg, "equal")) < 0)
                return r;
        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                close(p[0]);
                child(c, &cg, p[1]);
        }
        close(p[1]);
        ssize_t n = read(p[0], res, sizeof(*res));
        close(p[0]);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
        if (c->kind == BACKEND_ZRAM)
                (void)kswap_cgroup_remove(&cg);
        return n == sizeof(*res) ? res->err : -EIO;
}

/* ---- the table ---- */

static void print_row(unsigned out, const char *name, uint64_t limit, const Result *r) {
        printf("%3u %%  %-11s %9.1f %10.0f %8.1f %8.1f %12.1f %9.1f %9.1f %5zu\n", out, name, limit / MIB, r->rate,
               r->p50_us, r->p99_us, r->resident_mib, r->pool_mib, r->resident_mib + r->pool_mib, r->mismatches);
}

static int parse(int argc, char **argv, Options *o) {
        static const struct option opts[] = {
                { "size", required_argument, NULL, 's' },     { "out", required_argument, NULL, 'o' },
                { "skew", required_argument, NULL, 'k' },     { "accesses", required_argument, NULL, 'a' },
                { "warmup", required_argument, NULL, 'w' },   { "zswapd", required_argument, NULL, 'z' },
                { "corpus", required_argument, NULL, 'c' },   { "help", no_argument, NULL, 'h' },
                {}
        };
        int ch;

        while ((ch = getopt_long(argc, argv, "s:o:k:a:w:z:c:h", opts, NULL)) != -1)
                switch (ch) {
                case 's':
                        o->size = strtoull(optarg, NULL, 10) << 20;
                        break;
                case 'o':
                        if (bench_parse_list(optarg, 1, 99, o->out, MAX_OUT, &o->n_out) < 0)
                                return -EINVAL;
                        break;
                case 'k':
                        o->skew = strtod(optarg, NULL);
                        break;
                case 'a':
                        o->accesses = strtoull(optarg, NULL, 10);
                        break;
                case 'w':
                        o->warmup = strtoull(optarg, NULL, 10);
                        break;
                case 'z':
                        o->zswapd = optarg;
                        break;
                case 'c':
                        o->corpus = optarg;
                        break;
                default:
                        printf("bench-equal [--size MiB (256)] [--out PCT,... (50,80)] [--skew S (1.0)]\n"
                               "            [--accesses N (300000)] [--warmup N (300000)] [--zswapd PATH] [--corpus DIR]\n");
                        return ch == 'h' ? 1 : -EINVAL;
                }
        if (o->size < (4u << 20) || o->accesses < 100 || o->skew <= 0)
                return -EINVAL;
        return 0;
}

int main(int argc, char **argv) {
        Options o = { .size = 256ull << 20, .out = { 50, 80 }, .n_out = 2, .skew = 1.0, .accesses = 300000,
                      .warmup = 300000, .seed = 0x5eed2025ULL };
        _cleanup_free_ char *corpus_dir = NULL;
        Corpus *corpus = NULL;
        Result res[2][MAX_OUT] = {};
        Zipf *z = NULL;
        char load[64];
        int r;

        if ((r = parse(argc, argv, &o)) != 0)
                return r > 0 ? 0 : 2;
        bench_install_signals();
        r = bench_corpus_load(o.corpus, &corpus_dir, &corpus);
        if (r < 0) {
                fprintf(stderr, "bench-equal: corpus: %s\n", strerror(-r));
                return 1;
        }
        size_t n_pages = o.size / ZSWAP_PAGE_SIZE, len = o.warmup + o.accesses;
        _cleanup_free_ uint32_t *trace = malloc(len * sizeof(uint32_t));
        _cleanup_free_ size_t *perm = malloc(n_pages * sizeof(size_t));
        uint64_t *lat = malloc(o.accesses * sizeof(uint64_t));
        unsigned char *vec = malloc(n_pages);
        uint64_t rng = o.seed;
        if (!trace || !perm || !lat || !vec || zipf_new((uint32_t)n_pages, o.skew, &z) < 0)
                return 1;
        corpus_shuffle(perm, n_pages, o.seed);
        trace_zipf(z, perm, trace, len, &rng);
        zipf_free(z);

        printf("bench-equal: %.0f MiB heap of corpus pages (%s), Zipf %.2f, %zu accesses after %zu of warm-up; "
               "load %s\n", o.size / MIB, corpus_dir, o.skew, o.accesses, o.warmup,
               bench_loadavg(load, sizeof(load)));
        printf("out    store       bound MiB accesses/s  p50 us   p99 us heap res MiB  pool MiB total MiB   bad\n");
        /* zram first: what it used at each bound is what zswapd gets */
        static const BackendKind kinds[2] = { BACKEND_ZRAM, BACKEND_ZSWAPD };
        for (int k = 0; k < 2 && !bench_interrupted; k++) {
                Backend *b = NULL;
                BackendConfig bc = { .kind = kinds[k], .size_bytes = o.size, .zswapd_path = o.zswapd };
                r = backend_setup(&bc, &b);
                if (r < 0) {
                        fprintf(stderr, "bench-equal: %s: %s\n", k ? "zswapd" : "zram", strerror(-r));
                        return 1;
                }
                for (unsigned i = 0; i < o.n_out && !bench_interrupted; i++) {
                        Ctx c = { &o, corpus, b, kinds[k], n_pages, o.size * (100 - o.out[i]) / 100, trace, lat,
                                  vec };
                        Result *zr = &res[0][i], *out = &res[k][i];
                        /* zswapd: its limit is a bound it meets once per
                         * reclaim tick, and its pool is its own; so its
                         * limit is moved until heap and pool together use
                         * what zram used, within EQUAL_SLACK */
                        for (unsigned it = 0; it < (k ? EQUAL_TRIES : 1u); it++) {
                                r = measure(&c, out);
                                if (r < 0) {
                                        fprintf(stderr, "bench-equal: %s at %u %% out: %s\n", backend_name(b),
                                                o.out[i], strerror(-r));
                                        break;
                                }
                                print_row(o.out[i], backend_name(b), c.limit, out);
                                if (!k || zr->err || !zr->rate)
                                        break;
                                double want = zr->resident_mib + zr->pool_mib,
                                       got = out->resident_mib + out->pool_mib;
                                if (got <= want * (1 + EQUAL_SLACK) && got >= want * (1 - EQUAL_SLACK))
                                        break;
                                double next = (double)c.limit + (want - got) * MIB;
                                c.limit = next < (double)(1u << 20) ? (1u << 20) : (uint64_t)next & ~(uint64_t)4095;
                        }
                }
                backend_teardown(b);
        }
        printf("\nratios zswapd / zram, each store's last run (throughput: higher is better; latency, memory: "
               "lower)\n");
        bool bad = false;
        for (unsigned i = 0; i < o.n_out; i++) {
                const Result *zr = &res[0][i], *zs = &res[1][i];
                bad |= zs->mismatches || zr->mismatches;
                if (zs->err || zr->err || !zr->rate)
                        continue;
                printf("%3u %%  throughput %.2f  p50 %.2f  p99 %.2f  total memory %.2f  (zswapd settled in %.1f s)\n",
                       o.out[i], zs->rate / zr->rate, zs->p50_us / zr->p50_us, zs->p99_us / zr->p99_us,
                       (zs->resident_mib + zs->pool_mib) / (zr->resident_mib + zr->pool_mib), zs->settle_s);
        }
        free(lat);
        free(vec);
        corpus_free(corpus);
        if (bad)
                fprintf(stderr, "bench-equal: pages read back wrong\n");
        return bad ? 1 : 0;
}
