/*
 * bench-reclaim.c: how well does the daemon's automatic reclaim choose its
 * victims? A trace-driven benchmark.
 *
 * For each trace (Zipf(s) over the heap's pages for every skew of --skews,
 * the hot ranks scattered over the heap by a fixed random permutation, and
 * "phase": Zipf 1.0 whose permutation is drawn anew at each quarter of the
 * measured part, so the hot set moves three times):
 *
 * 1. offline: replay the trace through LRU, FIFO, CLOCK and Belady's OPT
 *    with a cache of exactly the limit's pages (reclaim-sim.c); the first
 *    --warmup accesses fill the cache and are not counted;
 * 2. real, unlimited: a fresh zswapd of our own (backend.h), a private
 *    anonymous heap filled with corpus pages and registered, the same trace
 *    replayed with no limit: the baseline throughput;
 * 3. real, limited: a fresh heap and registration in the same daemon,
 *    zswap_set_limit(limit), a wait until the daemon's resident_bytes is
 *    within 5 % of it, the warm-up replayed, the counters read, the measured
 *    part replayed and timed, the counters read again. Refaults over the
 *    measured part are the daemon's misses.
 *
 * Every access reads its page whole: corpus_checksum() of the page against
 * the corpus page that belongs there. Any mismatch fails the run, as does
 * any page that differs when the heap is checked whole after it was
 * unregistered, and a limit the daemon never reaches.
 *
 * Two things make raw refaults/LRU misleading, so the table takes them
 * apart. Compulsory misses: the simulators start empty and miss every
 * first reference; the daemon starts with the whole heap resident and
 * misses a first reference only if it evicted that page (blindly, when the
 * limit was set, or later as never used). So each first reference of the
 * measured part asks mincore() whether its page is out, and refaults on
 * pages read before are compared with LRU's misses on them. Memory: the
 * daemon trims to the limit once per tick and refaults push it above in
 * between, so the heap's resident pages are sampled with mincore() over
 * the measured part and LRU is replayed again with their mean as its
 * size. Both probes run in the unlimited replay too, so the throughput
 * ratio compares like with like.
 *
 * The daemon sees no accessed bits: a page that is only read shows it
 * nothing between the fault that brings it in and the eviction that takes
 * it out. The traces here only read, so FIFO and CLOCK say where a
 * reclaimer that learns from refaults alone would land; LRU is the goal
 * (refaults <= 1.5 x LRU misses), OPT the floor.
 *
 * SIGINT, SIGTERM and SIGHUP set a flag; loops stop at the next page,
 * what was set up is torn down, and the tables show the rows completed.
 *
 * Single-threaded (libzswap starts its own agent thread).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "bench-util.h"
#include "corpus.h"
#include "kswap.h"
#include "macro.h"
#include "reclaim-sim.h"
#include "zram.h"
#include "zswap.h"

#define DEFAULT_SEED 0x5eed2025ULL
#define MAX_SKEWS 8
#define MAX_DAEMON_ARGS 16
#define SETTLE_SLACK 1.05   /* "at the limit": resident within 5 % above it */
#define SETTLE_POLL_MS 50
#define TICK_MS 250         /* the daemon's reclaim tick (tunable "interval") */
#define GOAL_LRU_RATIO 1.5  /* the goal: refaults at most 1.5 x LRU misses */
#define RESIDENT_SAMPLES 64 /* mincore() of the heap this often over the measured part */
#define MIB (1024.0 * 1024.0)

typedef struct Options {
        const char *zswapd;     /* NULL: $ZSWAPD, then the zswapd built beside the bench */
        const char *corpus;     /* NULL: corpus_find_dir() */
        const char *compressor;
        long workers;
        const char *daemon_args[MAX_DAEMON_ARGS];
        unsigned n_daemon_args;
        uint64_t size;          /* heap bytes */
        unsigned limit_pct;
        size_t accesses, warmup;
        double skews[MAX_SKEWS];
        unsigned n_skews;
        uint64_t seed;
        double settle_timeout_s;
        bool quick, sim_only, self_test;
        bool size_set, accesses_set, warmup_set;
} Options;

typedef struct TraceSpec {
        char name[24];
        double skew;
        bool phase; /* the hot set moves at each quarter of the measured part */
} TraceSpec;

typedef struct SimResult {
        uint64_t distinct, cold;
        uint64_t misses[SIM_POLICIES];
        double seconds;
} SimResult;

/* A trace as the real runs replay it. */
typedef struct Trace {
        uint32_t *page;   /* warm-up, then the measured part */
        uint32_t *first;  /* indices of the measured part's first references (sim_first_refs()) */
        size_t n_first;
} Trace;

/* What a replay of part of a trace saw. */
typedef struct Replay {
        size_t mismatches;      /* accesses that read a wrong page */
        size_t first_out;       /* first references whose page was out (mincore() just before) */
        uint64_t resident_sum;  /* of the mincore() samples of the heap, pages */
        size_t resident_max, samples;
} Replay;

/* One real replay of a trace, limited or not. */
typedef struct RunResult {
        bool done;
        double settle_s;        /* set_limit until resident <= limit * SETTLE_SLACK */
        bool settle_timeout;
        double seconds;         /* wall time of the measured part */
        double rate;            /* accesses per second over it */
        struct zswap_stats before, after; /* around the measured part (client scope) */
        struct zswap_stats end; /* a tick after it: resident */
        uint64_t pool_bytes;    /* the daemon's pool then (global scope: one client at a time) */
        Replay warm, measured;
        double daemon_cpu_s;    /* over the measured part */
        size_t bad_after;       /* pages wrong in the whole-heap check after unregistering */
} RunResult;

typedef struct Row {
        TraceSpec spec;
        bool sim_done;
        SimResult sim;
        RunResult unl, lim;
        uint32_t mean_resident; /* limited run, pages, mean of the samples */
        uint64_t lru_at_mean;   /* LRU misses with that many frames */
} Row;

/* What every run of the benchmark shares. */
typedef struct Bench {
        const Options *o;
        const Corpus *corpus;
        size_t n_pages;
        uint32_t capacity;      /* the limit in pages */
        uint64_t limit;         /* bytes */
        unsigned char *vec;     /* mincore() vector of the heap */
} Bench;

/* A registered heap of one run. */
typedef struct Heap {
        struct zswap_client *zc;
        uint8_t *addr;
        size_t len, n_pages;
} Heap;

/* ---- traces ---- */

/* Split [0, len) into the phase trace's four segments: warm-up plus the
 * first quarter of the measured part, then the other three quarters. */
static size_t phase_end(size_t warmup, size_t accesses, unsigned seg) {
        return seg == 3 ? warmup + accesses : warmup + accesses / 4 * (seg + 1);
}

static int trace_build(const Options *o, const TraceSpec *t, unsigned idx, size_t n_pages, uint32_t **ret) {
        size_t len = o->warmup + o->accesses, from = 0;
        _cleanup_free_ uint32_t *trace = malloc(len * sizeof(uint32_t));
        _cleanup_free_ size_t *perm = malloc(n_pages * sizeof(size_t));
        uint64_t rng = o->seed ^ (0x100000001b3ULL * (idx + 1));
        Zipf *z = NULL;
        int r;

        if (!trace || !perm)
                return -ENOMEM;
        r = zipf_new((uint32_t)n_pages, t->skew, &z);
        if (r < 0)
                return r;
        for (unsigned seg = 0; seg < (t->phase ? 4u : 1u); seg++) {
                size_t to = t->phase ? phase_end(o->warmup, o->accesses, seg) : len;

                /* the permutation depends on the seed and segment only: every skew scatters alike */
                corpus_shuffle(perm, n_pages, o->seed + seg);
                trace_zipf(z, perm, trace + from, to - from, &rng);
                from = to;
        }
        zipf_free(z);
        *ret = TAKE_PTR(trace);
        return 0;
}

static int simulate(const Bench *b, const uint32_t *trace, SimResult *ret) {
        size_t len = b->o->warmup + b->o->accesses;
        uint64_t t0 = bench_now_ns();
        int r;

        r = sim_cold(trace, len, b->o->warmup, (uint32_t)b->n_pages, &ret->distinct, &ret->cold);
        for (SimPolicy p = 0; p < SIM_POLICIES && r == 0 && !bench_interrupted; p++)
                r = sim_run(p, trace, len, b->o->warmup, (uint32_t)b->n_pages, b->capacity, &ret->misses[p]);
        ret->seconds = (bench_now_ns() - t0) / 1e9;
        return bench_interrupted ? -EINTR : r;
}

/* ---- the real runs ---- */

/* zswap_connect() with the signals we catch blocked, so the agent thread never takes them. */
static int connect_blocked(Backend *b, struct zswap_client **ret) {
        sigset_t old;
        int r;

        kswap_signals_block(&old);
        r = zswap_connect(backend_socket(b), ret);
        kswap_signals_restore(&old);
        return r;
}

static int heap_open(Backend *b, const Bench *bench, Heap *h) {
        int r;

        *h = (Heap){ .len = bench->n_pages * ZSWAP_PAGE_SIZE, .n_pages = bench->n_pages };
        r = connect_blocked(b, &h->zc);
        if (r < 0)
                return r;
        h->addr = mmap(NULL, h->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (h->addr == MAP_FAILED) {
                h->addr = NULL;
                return -errno;
        }
        /* THP off before the first touch: one fault, one page */
        (void)madvise(h->addr, h->len, MADV_NOHUGEPAGE);
        corpus_fill(bench->corpus, h->addr, h->n_pages);
        return zswap_register(h->zc, h->addr, h->len);
}

/* Unregister (every page comes back), check the whole heap, unmap, disconnect. */
static int heap_close(Heap *h, const Bench *bench, RunResult *res) {
        int r = 0;

        if (h->addr && h->zc) {
                r = zswap_unregister(h->zc, h->addr, h->len);
                if (r == 0)
                        res->bad_after = corpus_verify(bench->corpus, h->addr, h->n_pages, NULL);
        }
        if (h->addr)
                munmap(h->addr, h->len);
        zswap_disconnect(h->zc);
        *h = (Heap){};
        return r;
}

static void sample_resident(const Heap *h, unsigned char *vec, Replay *ret) {
        size_t n = zram_resident_pages(h->addr, h->len, vec);

        ret->resident_sum += n;
        ret->resident_max = MAX(ret->resident_max, n);
        ret->samples++;
}

static bool page_out(const uint8_t *page) {
        unsigned char v = 1;

        return mincore((void *)page, ZSWAP_PAGE_SIZE, &v) == 0 && !(v & 1);
}

/*
 * Read t->page[from..to) page by page, each checked whole against the
 * corpus. With probe (the measured part, limited or not, so both pay the
 * same), also: the heap's resident pages every 1/RESIDENT_SAMPLES of the
 * way and at the end, and whether each first reference finds its page out.
 */
static void replay(const Heap *h, const Bench *b, const Trace *t, size_t from, size_t to, bool probe,
                   Replay *ret) {
        size_t every = MAX((to - from) / RESIDENT_SAMPLES, (size_t)1), next_sample = from, k = 0;

        while (k < t->n_first && t->first[k] < from)
                k++;
        for (size_t i = from; i < to; i++) {
                const uint8_t *page = h->addr + (size_t)t->page[i] * ZSWAP_PAGE_SIZE;

                if (probe && i == next_sample) {
                        sample_resident(h, b->vec, ret);
                        next_sample += every;
                }
                if (probe && k < t->n_first && t->first[k] == i) {
                        k++;
                        ret->first_out += page_out(page);
                }
                if (corpus_checksum(page) != b->corpus->sums[corpus_index(t->page[i])])
                        ret->mismatches++;
                if ((i & 0xffff) == 0 && bench_interrupted)
                        break;
        }
        if (probe)
                sample_resident(h, b->vec, ret);
}

/* Poll until the daemon's resident figure for us is at the limit. */
static int wait_settled(const Heap *h, uint64_t limit, double timeout_s, RunResult *res) {
        uint64_t t0 = bench_now_ns();
        struct zswap_stats st;
        int r;

        for (;;) {
                double s = (bench_now_ns() - t0) / 1e9;

                r = zswap_get_stats(h->zc, ZSWAP_STATS_CLIENT, &st);
                if (r < 0)
                        return r;
                /* evictions > 0: a resident figure from before the limit took effect does not count */
                if (st.reclaim_evictions > 0 && st.resident_bytes <= limit * SETTLE_SLACK) {
                        res->settle_s = s;
                        return 0;
                }
                if (bench_interrupted)
                        return -EINTR;
                if (s >= timeout_s) {
                        /* measured all the same: the table says how far above the limit it ran */
                        res->settle_s = s;
                        res->settle_timeout = true;
                        fprintf(stderr, "  limit not reached in %.0f s: resident %.1f MiB, limit %.1f MiB, "
                                "%" PRIu64 " reclaim evictions\n", s, st.resident_bytes / MIB, limit / MIB,
                                st.reclaim_evictions);
                        return 0;
                }
                bench_sleep_us(SETTLE_POLL_MS * 1000);
        }
}

static int set_limit(const Heap *h, uint64_t limit) {
        int r = zswap_set_limit(h->zc, limit);

        if (r == -EPROTO || r == -EINVAL || r == -EOPNOTSUPP || r == -ENOSYS)
                fprintf(stderr, "bench-reclaim: zswap_set_limit() failed: %s. This daemon has no per-client "
                        "resident limit (automatic reclaim); nothing to measure.\n", strerror(-r));
        else if (r < 0)
                fprintf(stderr, "bench-reclaim: zswap_set_limit() failed: %s\n", strerror(-r));
        return r;
}

/* Warm-up, then the timed measured part, with counters around it. */
static int measure(const Heap *h, Backend *b, const Bench *bench, const Trace *t, RunResult *res) {
        const Options *o = bench->o;
        struct zswap_stats global;
        double cpu0;
        uint64_t t0;
        int r;

        replay(h, bench, t, 0, o->warmup, false, &res->warm);
        r = zswap_get_stats(h->zc, ZSWAP_STATS_CLIENT, &res->before);
        if (r < 0 || bench_interrupted)
                return r ?: -EINTR;
        cpu0 = backend_daemon_cpu_s(b);
        t0 = bench_now_ns();
        replay(h, bench, t, o->warmup, o->warmup + o->accesses, true, &res->measured);
        res->seconds = (bench_now_ns() - t0) / 1e9;
        res->daemon_cpu_s = backend_daemon_cpu_s(b) - cpu0;
        res->rate = o->accesses / res->seconds;
        r = zswap_get_stats(h->zc, ZSWAP_STATS_CLIENT, &res->after);
        if (r < 0 || bench_interrupted)
                return r ?: -EINTR;
        /* what the reclaimer makes of it once the accesses stop: one tick */
        bench_sleep_us((TICK_MS + 50) * 1000);
        r = zswap_get_stats(h->zc, ZSWAP_STATS_CLIENT, &res->end);
        if (r == 0)
                r = zswap_get_stats(h->zc, ZSWAP_STATS_GLOBAL, &global);
        res->pool_bytes = global.pool_bytes;
        return r;
}

static int run_one(Backend *b, const Bench *bench, const Trace *trace, uint64_t limit, RunResult *res) {
        Heap h = {};
        int r;

        r = heap_open(b, bench, &h);
        if (r == 0 && limit) {
                r = set_limit(&h, limit);
                if (r == 0)
                        r = wait_settled(&h, limit, bench->o->settle_timeout_s, res);
        }
        if (r == 0)
                r = measure(&h, b, bench, trace, res);
        /* an unregister that fails leaves the heap unchecked: a failure too */
        r = heap_close(&h, bench, res) ?: r;
        res->done = r == 0;
        return r;
}

static void print_progress(const char *what, const RunResult *r) {
        const Replay *m = &r->measured;

        fprintf(stderr,
                "  %-9s %.2f s, %.0f accesses/s; %" PRIu64 " faults, %" PRIu64 " refaults (%zu on first "
                "references); resident (mincore) mean %.1f MiB, max %.1f MiB; a tick later the daemon says "
                "%.1f MiB; pool %.1f MiB; daemon CPU %.2f s; %zu mismatches, %zu pages bad after\n",
                what, r->seconds, r->rate, r->after.faults - r->before.faults,
                r->after.refaults - r->before.refaults, m->first_out,
                (double)m->resident_sum / MAX(m->samples, (size_t)1) * ZSWAP_PAGE_SIZE / MIB,
                (double)m->resident_max * ZSWAP_PAGE_SIZE / MIB, r->end.resident_bytes / MIB, r->pool_bytes / MIB,
                r->daemon_cpu_s, r->warm.mismatches + m->mismatches, r->bad_after);
}

static bool run_failed(const RunResult *r) {
        return r->warm.mismatches || r->measured.mismatches || r->bad_after;
}

/* Both real runs of one trace, in a daemon of their own. */
static int run_real(const Bench *bench, const Trace *trace, Row *row) {
        const Options *o = bench->o;
        const char *args[2 + MAX_DAEMON_ARGS + 1] = { "--workers" };
        char workers[24];
        BackendConfig cfg = { .kind = BACKEND_ZSWAPD, .compressor = o->compressor, .size_bytes = o->size,
                              .zswapd_path = o->zswapd, .zswapd_args = args };
        Backend *b = NULL;
        int r;

        snprintf(workers, sizeof(workers), "%ld", o->workers);
        args[1] = workers;
        for (unsigned i = 0; i < o->n_daemon_args; i++)
                args[2 + i] = o->daemon_args[i];
        r = backend_setup(&cfg, &b);
        if (r < 0) {
                fprintf(stderr, "bench-reclaim: cannot start zswapd: %s%s%s\n", strerror(-r),
                        backend_last_log() ? "; log: " : "", backend_last_log() ?: "");
                return r;
        }
        r = run_one(b, bench, trace, 0, &row->unl);
        if (row->unl.done)
                print_progress("unlimited", &row->unl);
        if (r == 0) {
                r = run_one(b, bench, trace, bench->limit, &row->lim);
                if (row->lim.done && !row->lim.settle_timeout)
                        fprintf(stderr, "  limit reached in %.2f s\n", row->lim.settle_s);
        }
        if (row->lim.done)
                print_progress("limited", &row->lim);
        if (r < 0 && r != -EINTR)
                fprintf(stderr, "  %s run failed: %s\n", row->unl.done ? "limited" : "unlimited", strerror(-r));
        if ((r < 0 && r != -EINTR) || run_failed(&row->unl) || run_failed(&row->lim)) {
                backend_keep_log(b);
                fprintf(stderr, "  daemon log kept: %s\n", backend_log(b));
        }
        backend_teardown(b);
        return r;
}

/* Does this daemon take a limit at all? Asked once, before any trace is built. */
static int probe_limit(const Options *o) {
        BackendConfig cfg = { .kind = BACKEND_ZSWAPD, .compressor = o->compressor, .zswapd_path = o->zswapd };
        struct zswap_client *zc = NULL;
        Backend *b = NULL;
        Heap h = {};
        int r;

        r = backend_setup(&cfg, &b);
        if (r < 0) {
                fprintf(stderr, "bench-reclaim: cannot start zswapd (%s): %s%s%s\n",
                        o->zswapd ?: "<bench dir>/../daemon/zswapd", strerror(-r),
                        backend_last_log() ? "; log: " : "", backend_last_log() ?: "");
                return r;
        }
        r = connect_blocked(b, &zc);
        h.zc = zc;
        if (r == 0)
                r = set_limit(&h, 64ULL << 20);
        if (r == 0)
                r = zswap_set_limit(zc, 0);
        zswap_disconnect(zc);
        backend_teardown(b);
        return r;
}

/* ---- output ---- */

static void print_header(const Options *o, const Bench *b, const char *corpus_dir) {
        _cleanup_free_ char *exe = realpath("/proc/self/exe", NULL);
        char when[32], rev[64] = "?", cmd[4200], load[64];
        time_t now = time(NULL);
        struct utsname u;
        FILE *p;

        uname(&u);
        strftime(when, sizeof(when), "%F %T", gmtime(&now));
        snprintf(cmd, sizeof(cmd), "git -C '%s' describe --always --dirty 2>/dev/null", exe ? dirname(exe) : ".");
        p = popen(cmd, "re");
        if (p) {
                if (fgets(rev, sizeof(rev), p))
                        rev[strcspn(rev, "\n")] = 0;
                pclose(p);
        }
        printf("bench-reclaim, %s UTC, Linux %s %s, %ld CPUs, git %s, load %s\n", when, u.release, u.machine,
               sysconf(_SC_NPROCESSORS_ONLN), rev, bench_loadavg(load, sizeof(load)));
        printf("heap %.0f MiB (%zu pages), limit %u %% = %u pages; %zu warm-up + %zu measured accesses per trace; "
               "seed %#" PRIx64 "; corpus %s\n\n", o->size / MIB, b->n_pages, o->limit_pct, b->capacity,
               o->warmup, o->accesses, o->seed, corpus_dir ?: "-");
}

static void print_sim_table(const Row *rows, unsigned n, const Bench *b) {
        char c[SIM_POLICIES][16];

        printf("Offline policies, cache = limit (%u pages), misses over the %zu measured accesses "
               "(miss rate %%):\n\n", b->capacity, b->o->accesses);
        printf("| trace | distinct pages | cold misses | LRU | FIFO | CLOCK | OPT | OPT/LRU | sim s |\n");
        printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (unsigned i = 0; i < n; i++) {
                const SimResult *s = &rows[i].sim;

                if (!rows[i].sim_done)
                        continue;
                for (SimPolicy p = 0; p < SIM_POLICIES; p++)
                        snprintf(c[p], sizeof(c[p]), "%.1f", 100.0 * s->misses[p] / b->o->accesses);
                printf("| %s | %" PRIu64 " | %" PRIu64 " | %" PRIu64 " (%s) | %" PRIu64 " (%s) | %" PRIu64
                       " (%s) | %" PRIu64 " (%s) | %.2f | %.1f |\n", rows[i].spec.name, s->distinct, s->cold,
                       s->misses[SIM_LRU], c[SIM_LRU], s->misses[SIM_FIFO], c[SIM_FIFO], s->misses[SIM_CLOCK],
                       c[SIM_CLOCK], s->misses[SIM_OPT], c[SIM_OPT],
                       (double)s->misses[SIM_OPT] / MAX(s->misses[SIM_LRU], 1), s->seconds);
        }
        printf("\n");
}

static double refaults_of(const RunResult *r) {
        return (double)(r->after.refaults - r->before.refaults);
}

/* Table 1 row: how good the victims were, against the offline policies. */
static void print_choice_row(const Row *row, const Bench *b) {
        const RunResult *l = &row->lim;
        const SimResult *s = &row->sim;
        double refaults = refaults_of(l), reref = refaults - (double)l->measured.first_out;
        char lru[16], opt[16], at_mean[16], rr[16];

        bench_ratio(lru, sizeof(lru), refaults, (double)s->misses[SIM_LRU]);
        bench_ratio(opt, sizeof(opt), refaults, (double)s->misses[SIM_OPT]);
        bench_ratio(at_mean, sizeof(at_mean), refaults, (double)row->lru_at_mean);
        bench_ratio(rr, sizeof(rr), reref, (double)(s->misses[SIM_LRU] - s->cold));
        printf("| %s | %.0f | %zu | %" PRIu64 " | %" PRIu64 " | %" PRIu64 " | %" PRIu64 " | %s %s | %s |"
               " %.2f | %" PRIu64 " | %s | %.0f | %" PRIu64 " | %s |\n",
               row->spec.name, refaults, l->measured.first_out, s->misses[SIM_LRU], s->misses[SIM_OPT],
               s->misses[SIM_FIFO], s->misses[SIM_CLOCK], lru,
               refaults <= GOAL_LRU_RATIO * s->misses[SIM_LRU] ? "met" : "MISSED", opt,
               (double)row->mean_resident / b->capacity, row->lru_at_mean, at_mean, reref,
               s->misses[SIM_LRU] - s->cold, rr);
}

/* Table 2 row: what the limit cost and saved. */
static void print_cost_row(const Row *row, const Bench *b) {
        const RunResult *l = &row->lim;
        double heap = (double)b->n_pages * ZSWAP_PAGE_SIZE;
        double resident = (double)l->end.resident_bytes, pool = (double)l->pool_bytes;
        char thru[16], settle[24];

        bench_ratio(thru, sizeof(thru), l->rate, row->unl.done ? row->unl.rate : NAN);
        snprintf(settle, sizeof(settle), l->settle_timeout ? "%.0f TIMEOUT" : "%.1f", l->settle_s);
        printf("| %s | %.0f | %.0f | %.0f | %s | %.0f (%.1f %%) | %.1f | %.1f | %" PRIu64 " | %" PRIu64 " |"
               " %" PRIu64 " | %" PRIu64 " | %.2f | %s |\n",
               row->spec.name, refaults_of(l) / l->seconds, row->unl.rate, l->rate, thru, resident / MIB,
               100.0 * resident / heap, pool / MIB, 100.0 * (1 - (resident + pool) / heap),
               l->after.reclaim_evictions - l->before.reclaim_evictions,
               l->after.clean_reevictions - l->before.clean_reevictions,
               l->after.thrash_backoffs - l->before.thrash_backoffs,
               l->after.pool_full_events - l->before.pool_full_events, l->daemon_cpu_s, settle);
}

static void print_real_tables(const Row *rows, unsigned n, const Bench *b) {
        printf("zswapd, resident limit %.0f MiB (%u pages), against the offline policies on the same trace;\n"
               "measured part only. Goal: refaults <= %.1f x LRU misses. first-ref: refaults on the trace's first\n"
               "reference to a page (LRU counts those as its cold misses). mean res/limit: the heap's resident\n"
               "pages (mincore(), %d samples over the run) over the limit; LRU@res: LRU misses with that many\n"
               "frames, the same memory the daemon used. re-ref: refaults on pages the trace had read before;\n"
               "LRU re-ref: LRU's misses on those (its misses minus cold misses).\n\n",
               b->limit / MIB, b->capacity, GOAL_LRU_RATIO, RESIDENT_SAMPLES + 1);
        printf("| trace | refaults | first-ref | LRU | OPT | FIFO | CLOCK | refaults/LRU | refaults/OPT |"
               " mean res/limit | LRU@res | refaults/LRU@res | re-ref | LRU re-ref | re-ref/LRU re-ref |\n");
        printf("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
        for (unsigned i = 0; i < n; i++)
                if (rows[i].lim.done && rows[i].sim_done)
                        print_choice_row(&rows[i], b);
        printf("\nthru: accesses/s limited over unlimited (same trace, same daemon, fresh heap). resident: the\n"
               "daemon's figure a tick after the run; pool: its whole pool then; saved = 1 - (resident + pool)\n"
               "/ heap. Counters over the measured part; daemon CPU too.\n\n");
        printf("| trace | refaults/s | accesses/s unlimited | accesses/s limited | thru | resident MiB (%% heap) |"
               " pool MiB | saved %% | reclaim evictions | clean re-evictions | thrash backoffs | pool full |"
               " daemon CPU s | settle s |\n");
        printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (unsigned i = 0; i < n; i++)
                if (rows[i].lim.done && rows[i].sim_done)
                        print_cost_row(&rows[i], b);
        printf("\n");
}

/* ---- main ---- */

static void help(void) {
        printf("bench-reclaim [--size SIZE] [--limit-pct N] [--accesses N] [--warmup N] [--skews LIST]\n"
               "              [--seed N] [--quick] [--sim-only] [--self-test] [--settle-timeout S]\n"
               "              [--zswapd PATH] [--corpus DIR] [--compressor lz4|zstd] [--workers N]\n"
               "              [--daemon-arg ARG]...\n\n"
               "Score the daemon's automatic reclaim: replay Zipf access traces (one per skew, and one whose\n"
               "hot set moves) over a heap of corpus pages with a resident limit, and compare its refaults\n"
               "with LRU, FIFO, CLOCK and OPT misses on the same trace. SIZE: MiB, or with K, M, G. N takes\n"
               "k, M, G (x1000). Defaults: 2G, 40 %%, 4M, 1M, 0.8,1.0,1.2. --quick: 64M, 200k, 50k.\n"
               "--sim-only prints the offline table only; --self-test checks the simulators.\n");
}

static int parse_size(const char *s, uint64_t *ret) {
        char *end;
        double v = strtod(s, &end);
        uint64_t mult = 1ULL << 20;

        switch (*end) {
        case 'k': case 'K': mult = 1ULL << 10; end++; break;
        case 'm': case 'M': end++; break;
        case 'g': case 'G': mult = 1ULL << 30; end++; break;
        }
        if (end == s || *end || !(v > 0) || v * mult > (double)(1ULL << 44))
                return -EINVAL;
        *ret = ALIGN_TO((uint64_t)(v * mult), (uint64_t)ZSWAP_PAGE_SIZE);
        return 0;
}

static int parse_count(const char *s, size_t lo, size_t *ret) {
        char *end;
        double v = strtod(s, &end);
        double mult = 1;

        switch (*end) {
        case 'k': case 'K': mult = 1e3; end++; break;
        case 'm': case 'M': mult = 1e6; end++; break;
        case 'g': case 'G': mult = 1e9; end++; break;
        }
        if (end == s || *end || !(v * mult >= lo) || v * mult > 2e9)
                return -EINVAL;
        *ret = (size_t)(v * mult);
        return 0;
}

static int parse_skews(const char *s, Options *o) {
        const char *p = s;

        o->n_skews = 0;
        while (*p) {
                char *end;
                double v = strtod(p, &end);

                if (end == p || !(v >= 0 && v <= 4) || o->n_skews == MAX_SKEWS || (*end && *end != ','))
                        return -EINVAL;
                o->skews[o->n_skews++] = v;
                p = *end ? end + 1 : end;
        }
        return o->n_skews ? 0 : -EINVAL;
}

enum {
        OPT_SIZE = 256, OPT_LIMIT_PCT, OPT_ACCESSES, OPT_WARMUP, OPT_SKEWS, OPT_SEED, OPT_QUICK, OPT_SIM_ONLY,
        OPT_SELF_TEST, OPT_SETTLE, OPT_ZSWAPD, OPT_CORPUS, OPT_COMPRESSOR, OPT_WORKERS, OPT_DAEMON_ARG,
};

static int parse_one(int c, const char *arg, Options *o) {
        char *end;

        switch (c) {
        case OPT_SIZE:
                o->size_set = true;
                return parse_size(arg, &o->size);
        case OPT_LIMIT_PCT:
                o->limit_pct = (unsigned)strtoul(arg, &end, 10);
                return *end || o->limit_pct < 1 || o->limit_pct > 99 ? -EINVAL : 0;
        case OPT_ACCESSES:
                o->accesses_set = true;
                return parse_count(arg, 4, &o->accesses);
        case OPT_WARMUP:
                o->warmup_set = true;
                return parse_count(arg, 0, &o->warmup);
        case OPT_SKEWS:
                return parse_skews(arg, o);
        case OPT_SEED:
                o->seed = strtoull(arg, &end, 0);
                return *end ? -EINVAL : 0;
        case OPT_SETTLE:
                o->settle_timeout_s = strtod(arg, &end);
                return *end || !(o->settle_timeout_s > 0) ? -EINVAL : 0;
        case OPT_ZSWAPD:
                o->zswapd = arg;
                return 0;
        case OPT_CORPUS:
                o->corpus = arg;
                return 0;
        case OPT_COMPRESSOR:
                o->compressor = arg;
                return strcmp(arg, "lz4") && strcmp(arg, "zstd") ? -EINVAL : 0;
        case OPT_WORKERS:
                o->workers = strtol(arg, &end, 10);
                return *end || o->workers < 1 || o->workers > 1024 ? -EINVAL : 0;
        case OPT_DAEMON_ARG:
                if (o->n_daemon_args == MAX_DAEMON_ARGS)
                        return -E2BIG;
                o->daemon_args[o->n_daemon_args++] = arg;
                return 0;
        }
        return -EINVAL;
}

/* 1: go on, 0: done (--help), < 0: bad usage. */
static int parse_argv(int argc, char **argv, Options *o) {
        static const struct option opts[] = {
                { "help", no_argument, NULL, 'h' },
                { "size", required_argument, NULL, OPT_SIZE },
                { "limit-pct", required_argument, NULL, OPT_LIMIT_PCT },
                { "accesses", required_argument, NULL, OPT_ACCESSES },
                { "warmup", required_argument, NULL, OPT_WARMUP },
                { "skews", required_argument, NULL, OPT_SKEWS },
                { "seed", required_argument, NULL, OPT_SEED },
                { "quick", no_argument, NULL, OPT_QUICK },
                { "sim-only", no_argument, NULL, OPT_SIM_ONLY },
                { "self-test", no_argument, NULL, OPT_SELF_TEST },
                { "settle-timeout", required_argument, NULL, OPT_SETTLE },
                { "zswapd", required_argument, NULL, OPT_ZSWAPD },
                { "corpus", required_argument, NULL, OPT_CORPUS },
                { "compressor", required_argument, NULL, OPT_COMPRESSOR },
                { "workers", required_argument, NULL, OPT_WORKERS },
                { "daemon-arg", required_argument, NULL, OPT_DAEMON_ARG },
                {}
        };
        int c;

        while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
                if (c == 'h')
                        return help(), 0;
                if (c == OPT_QUICK || c == OPT_SIM_ONLY || c == OPT_SELF_TEST) {
                        *(c == OPT_QUICK ? &o->quick : c == OPT_SIM_ONLY ? &o->sim_only : &o->self_test) = true;
                        continue;
                }
                if (c == '?' || parse_one(c, optarg, o) < 0)
                        return fprintf(stderr, "bad option or value: %s\n", argv[optind - 1]), -EINVAL;
        }
        if (optind < argc)
                return fprintf(stderr, "unexpected argument: %s\n", argv[optind]), -EINVAL;
        if (o->quick) {
                /* a CI smoke test: every step, seconds in all */
                o->size = o->size_set ? o->size : 64ULL << 20;
                o->accesses = o->accesses_set ? o->accesses : 200000;
                o->warmup = o->warmup_set ? o->warmup : 50000;
        }
        if (o->size / ZSWAP_PAGE_SIZE * o->limit_pct / 100 == 0 || o->size / ZSWAP_PAGE_SIZE >= UINT32_MAX ||
            o->warmup + o->accesses >= UINT32_MAX)
                return fprintf(stderr, "heap or trace size out of range\n"), -EINVAL;
        return 1;
}

/* The traces of this run: one per skew, then "phase". */
static unsigned trace_specs(const Options *o, Row *rows) {
        unsigned n = 0;

        for (unsigned i = 0; i < o->n_skews; i++, n++) {
                snprintf(rows[n].spec.name, sizeof(rows[n].spec.name), "zipf-%.2g", o->skews[i]);
                rows[n].spec.skew = o->skews[i];
        }
        snprintf(rows[n].spec.name, sizeof(rows[n].spec.name), "phase (zipf-1)");
        rows[n].spec.skew = 1.0;
        rows[n].spec.phase = true;
        return n + 1;
}

/* The real runs of one trace, and LRU with the memory the daemon really used. */
static int trace_real(const Bench *b, Trace *t, Row *row) {
        const Replay *m = &row->lim.measured;
        int r;

        r = sim_first_refs(t->page, b->o->warmup + b->o->accesses, b->o->warmup, (uint32_t)b->n_pages, &t->first,
                           &t->n_first);
        if (r == 0)
                r = run_real(b, t, row);
        if (r < 0 || !row->lim.done || m->samples == 0)
                return r;
        row->mean_resident = (uint32_t)MAX(m->resident_sum / m->samples, (uint64_t)1);
        return sim_run(SIM_LRU, t->page, b->o->warmup + b->o->accesses, b->o->warmup, (uint32_t)b->n_pages,
                       row->mean_resident, &row->lru_at_mean);
}

/* Build each trace, simulate it, and (unless --sim-only) run it for real. */
static int run_traces(const Bench *b, Row *rows, unsigned n, bool *ret_bad) {
        for (unsigned i = 0; i < n && !bench_interrupted; i++) {
                Trace t = {};
                Row *row = &rows[i];
                int r;

                fprintf(stderr, "trace %s:\n", row->spec.name);
                r = trace_build(b->o, &row->spec, i, b->n_pages, &t.page);
                if (r == 0)
                        r = simulate(b, t.page, &row->sim);
                if (r == 0) {
                        row->sim_done = true;
                        fprintf(stderr, "  simulated in %.1f s: LRU %" PRIu64 ", OPT %" PRIu64 " misses\n",
                                row->sim.seconds, row->sim.misses[SIM_LRU], row->sim.misses[SIM_OPT]);
                } else if (r != -EINTR)
                        fprintf(stderr, "simulation: %s\n", strerror(-r));
                if (r == 0 && !b->o->sim_only) {
                        r = trace_real(b, &t, row);
                        *ret_bad |= run_failed(&row->unl) || run_failed(&row->lim) || row->lim.settle_timeout;
                }
                free(t.page);
                free(t.first);
                if (r < 0)
                        return r;
        }
        return bench_interrupted ? -EINTR : 0;
}

static int report_failures(const Row *rows, unsigned n) {
        int bad = 0;

        for (unsigned i = 0; i < n; i++) {
                const RunResult *runs[] = { &rows[i].unl, &rows[i].lim };

                for (size_t k = 0; k < ELEMENTSOF(runs); k++)
                        if (run_failed(runs[k])) {
                                printf("VERIFICATION FAILED: %s, %s run: %zu accesses read a wrong page, %zu pages "
                                       "wrong after unregistering\n", rows[i].spec.name, k ? "limited" : "unlimited",
                                       runs[k]->warm.mismatches + runs[k]->measured.mismatches, runs[k]->bad_after);
                                bad = 1;
                        }
                if (rows[i].lim.settle_timeout) {
                        printf("LIMIT NOT REACHED: %s: resident stayed above %.0f %% of the limit for %.0f s\n",
                               rows[i].spec.name, SETTLE_SLACK * 100, rows[i].lim.settle_s);
                        bad = 1;
                }
        }
        return bad;
}

int main(int argc, char **argv) {
        Options o = { .compressor = "lz4", .workers = sysconf(_SC_NPROCESSORS_ONLN), .size = 2ULL << 30,
                      .limit_pct = 40, .accesses = 4000000, .warmup = 1000000, .skews = { 0.8, 1.0, 1.2 },
                      .n_skews = 3, .seed = DEFAULT_SEED, .settle_timeout_s = 120, .zswapd = getenv("ZSWAPD") };
        _cleanup_free_ char *corpus_dir = NULL;
        _cleanup_free_ unsigned char *vec = NULL;
        _cleanup_corpus_ Corpus *corpus = NULL;
        Row rows[MAX_SKEWS + 1] = {};
        Bench b = { .o = &o };
        char load[64];
        unsigned n_rows;
        uint64_t t0 = bench_now_ns();
        bool bad = false;
        int r;

        r = parse_argv(argc, argv, &o);
        if (r <= 0)
                return r < 0 ? 2 : 0;
        if (o.self_test)
                return sim_self_test(stdout) ? 1 : 0;
        if (!o.sim_only && geteuid() != 0)
                return fprintf(stderr, "bench-reclaim: needs root (the daemon takes over memory through "
                               "userfaultfd); --sim-only runs without\n"), 77;
        b.n_pages = o.size / ZSWAP_PAGE_SIZE;
        b.capacity = (uint32_t)(b.n_pages * o.limit_pct / 100);
        b.limit = (uint64_t)b.capacity * ZSWAP_PAGE_SIZE;
        bench_install_signals();
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (!o.sim_only) {
                r = bench_corpus_load(o.corpus, &corpus_dir, &corpus);
                if (r < 0)
                        return fprintf(stderr, "cannot load the corpus: %s; try --corpus or $ZSWAP_CORPUS\n",
                                       strerror(-r)), 1;
                vec = malloc(b.n_pages);
                if (!vec)
                        return fprintf(stderr, "out of memory\n"), 1;
                if (probe_limit(&o) < 0)
                        return 1;
        }
        b.corpus = corpus;
        b.vec = vec;
        print_header(&o, &b, corpus_dir);
        n_rows = trace_specs(&o, rows);
        r = run_traces(&b, rows, n_rows, &bad);

        print_sim_table(rows, n_rows, &b);
        if (!o.sim_only)
                print_real_tables(rows, n_rows, &b);
        bad |= report_failures(rows, n_rows);
        printf("total %.0f s; load at the end %s (other work on the machine skews every time and rate)\n",
               (bench_now_ns() - t0) / 1e9, bench_loadavg(load, sizeof(load)));
        if (bench_interrupted)
                return printf("bench_interrupted by signal %d\n", (int)bench_interrupted), 130;
        return bad || r < 0 ? 1 : 0;
}
