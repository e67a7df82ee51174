/*
 * bench-recompress.c: the strong tier (recompression of cold objects with
 * zstd) against kernel zram, one run, one table.
 *
 * The same corpus pages (corpus.c) go through each phase: fill a fresh
 * private region, page it out, measure the memory the backend uses for it
 * (original bytes out, by mincore(), over the backend's memory: zram's
 * mem_used_total, zswapd's pool chunks), read every page back in a seeded
 * random order timing each fault, and check every page. The phases:
 *
 *   zram-lz4      kernel zram with lz4, the reference
 *   zswapd-lz4    zswapd, lz4, recompression off
 *   zswapd-strong zswapd, lz4, recompress_age 1s and recompress_cpu 100,
 *                 zstd at --level (9, the daemon's default) with the
 *                 client's dictionary: measured once recompression has
 *                 ended (its count still for two polls); its CPU per GiB
 *                 and the dictionary's training from the daemon's counters
 *   zswapd-nodict the same without the dictionary (recompress_dict no)
 *   zswapd-zstd   zswapd with zstd at --ref-level (3, zram's default) as
 *                 its only codec: what zram with zstd would hold, for
 *                 kernels whose zram has no zstd (this one's offers lzo,
 *                 lzo-rle and lz4); zram-zstd itself when the kernel
 *                 offers it (--zram-zstd)
 *
 * Then the effect on other clients: a 16 MiB client evicted and read back
 * at random over and over (its pages never stay unused for a second, so
 * none of its own are recompressed) while a --size client's pages sit in
 * the pool, first with recompression off, then while it recompresses the
 * big client at the default budget (recompress_cpu 10). Its fault p99 in
 * both, and the ratio.
 *
 * bench-recompress [--size MiB] [--level N] [--ref-level N] [--corpus DIR] [--zswapd PATH] [--zram-zstd]
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
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
#include "macro.h"
#include "util.h"
#include "zram.h"

#define ZSTD_STATIC_LINKING_ONLY
#include <zdict.h>
#include <zstd.h>

#define RANDOM_SEED 0x5eed2026ULL
#define SMALL_MIB 16
#define CYCLES 12
#define SAFETY_S 900

typedef struct Options {
        const char *zswapd, *corpus;
        unsigned long size_mib;
        int level, ref_level;
        bool zram_zstd;
} Options;

typedef struct Phase {
        const char *label;
        bool done;
        double ratio;                  /* original out / memory used */
        double median_us, p99_us, p999_us;
        size_t faults, bad;
        /* zswapd-strong and -nodict only */
        uint64_t strong_pages, recompressed, cpu_ns, saved;
        uint64_t dict_pages, dicts_trained, dict_cpu_ns, dict_mem;
        double wait_s;
} Phase;

typedef struct Run {
        const Options *o;
        const Corpus *corpus;
        size_t n_pages;
        unsigned char *resident;
        uint64_t *lat;
        size_t *perm;
} Run;

static const char *const status_names[] = { "recompressed",     "strong_pages",  "recompress_cpu_ns",
                                            "recompress_saved_bytes", "dict_pages", "dicts_trained",
                                            "dict_train_cpu_ns", "dict_mem" };
enum { ST_RECOMPRESSED, ST_STRONG, ST_CPU, ST_SAVED, ST_DICT_PAGES, ST_DICTS, ST_DICT_CPU, ST_DICT_MEM, ST_N };

/* Touch every page of region in random order; latencies of those that
 * were out into run->lat (sorted). Returns the faults timed. */
static size_t fault_pass(Run *run, uint8_t *region, size_t n_pages, const size_t *perm) {
        size_t k = 0;

        (void)zram_resident_pages(region, n_pages * ZSWAP_PAGE_SIZE, run->resident);
        for (size_t i = 0; i < n_pages && !bench_interrupted; i++) {
                size_t pg = perm[i];
                const volatile uint8_t *p = region + pg * ZSWAP_PAGE_SIZE;
                uint64_t a = now_ns();
                (void)*p;
                uint64_t z = now_ns();
                if (!(run->resident[pg] & 1))
                        run->lat[k++] = z - a;
        }
        qsort(run->lat, k, sizeof(*run->lat), cmp_u64);
        return k;
}

/* zswapd-strong: until the daemon's recompressed count stays still. */
static int wait_recompressed(Backend *b, Phase *ph) {
        uint64_t v[ST_N] = { 0 }, last = UINT64_MAX, t0 = now_ns();
        unsigned still = 0;

        while (still < 2 && !bench_interrupted) {
                bench_sleep_us(500000);
                int r = bench_zswapctl(backend_socket(b), "status --bytes", status_names, v, ST_N);
                if (r < 0)
                        return r;
                still = v[ST_RECOMPRESSED] > 0 && v[ST_RECOMPRESSED] == last ? still + 1 : 0;
                last = v[ST_RECOMPRESSED];
                if (now_ns() - t0 > SAFETY_S * 1000000000ull) {
                        printf("  recompression still going after %d s: measured as it is\n", SAFETY_S);
                        break;
                }
        }
        ph->wait_s = (now_ns() - t0) / 1e9;
        ph->recompressed = v[ST_RECOMPRESSED];
        ph->strong_pages = v[ST_STRONG];
        ph->cpu_ns = v[ST_CPU];
        ph->saved = v[ST_SAVED];
        ph->dict_pages = v[ST_DICT_PAGES];
        ph->dicts_trained = v[ST_DICTS];
        ph->dict_cpu_ns = v[ST_DICT_CPU];
        ph->dict_mem = v[ST_DICT_MEM];
        printf("  recompression ended after %.1f s: %" PRIu64 " pages recompressed, %" PRIu64
               " strong (%" PRIu64 " with a dictionary), %" PRIu64 " bytes saved, %.3f s of CPU; %" PRIu64
               " dictionaries trained (%.3f s of CPU), %" PRIu64 " bytes\n",
               ph->wait_s, ph->recompressed, ph->strong_pages, ph->dict_pages, ph->saved, ph->cpu_ns / 1e9,
               ph->dicts_trained, ph->dict_cpu_ns / 1e9, ph->dict_mem);
        return 0;
}

static int phase_region(Run *run, Backend *b, bool strong, Phase *ph) {
        _cleanup_(backend_client_freep) BackendClient *c = NULL;
        size_t len = run->n_pages * ZSWAP_PAGE_SIZE;
        uint64_t orig, used;
        int r = backend_client_new(b, &c);

        if (r < 0)
                return r;
        uint8_t *region = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (region == MAP_FAILED)
                return -errno;
        (void)madvise(region, len, MADV_NOHUGEPAGE);
        corpus_fill(run->corpus, region, run->n_pages);
        r = backend_attach(c, region, len);
        if (r == 0)
                r = backend_pageout(c, region, len);
        if (r >= 0 && strong)
                r = wait_recompressed(b, ph);
        if (r >= 0)
                r = backend_memory(b, &orig, &used);
        if (r >= 0) {
                size_t out = run->n_pages - zram_resident_pages(region, len, run->resident);
                ph->ratio = used ? (double)out * ZSWAP_PAGE_SIZE / used : NAN;
                ph->faults = fault_pass(run, region, run->n_pages, run->perm);
                ph->median_us = bench_percentile_us(run->lat, ph->faults, 0.5);
                ph->p99_us = bench_percentile_us(run->lat, ph->faults, 0.99);
                ph->p999_us = bench_percentile_us(run->lat, ph->faults, 0.999);
                ph->bad = corpus_verify(run->corpus, region, run->n_pages, NULL);
                printf("  %zu of %zu pages out, ratio %.2f; random fault-in: %zu faults, median %.2f us, "
                       "p99 %.2f us; %zu bad pages\n",
                       out, run->n_pages, ph->ratio, ph->faults, ph->median_us, ph->p99_us, ph->bad);
                ph->done = !bench_interrupted;
        }
        backend_detach(c, region, len);
        munmap(region, len);
        return r < 0 ? r : 0;
}

static int phase_run(Run *run, const BackendConfig *cfg, bool strong, Phase *ph) {
        Backend *b = NULL;
        int r = backend_setup(cfg, &b);

        if (r < 0) {
                printf("%s phase: not run: %s\n", ph->label, strerror(-r));
                return r == -ENODEV || r == -EPERM ? 0 : r;
        }
        printf("%s phase: %s\n", ph->label, backend_describe(b));
        r = phase_region(run, b, strong, ph);
        if (r < 0 || ph->bad)
                backend_keep_log(b);
        int rt = backend_teardown(b);
        return r ?: rt;
}

/* ---- the effect on another client ---- */

typedef struct Effect {
        bool done;
        double quiet_p99, busy_p99, quiet_med, busy_med;
        uint64_t recompressed_during;
        size_t bad;
} Effect;

/* CYCLES pageouts and random passes of the small region; every fault's
 * latency into all (n so far). */
static int cycles(Run *run, BackendClient *c, uint8_t *small, size_t n_small, const size_t *perm, uint64_t *all,
                  size_t *n) {
        for (unsigned i = 0; i < CYCLES && !bench_interrupted; i++) {
                int r = backend_pageout(c, small, n_small * ZSWAP_PAGE_SIZE);
                if (r < 0)
                        return r;
                size_t k = fault_pass(run, small, n_small, perm);
                memcpy(all + *n, run->lat, k * sizeof(*all));
                *n += k;
        }
        qsort(all, *n, sizeof(*all), cmp_u64);
        return 0;
}

static int phase_effect(Run *run, const Options *o, Effect *ef) {
        const char *args[] = { "-o", "recompress_age=0", NULL };
        BackendConfig cfg = { .kind = BACKEND_ZSWAPD, .compressor = "lz4", .zswapd_path = o->zswapd,
                              .zswapd_args = args };
        size_t n_small = (size_t)SMALL_MIB << 8, len = run->n_pages * ZSWAP_PAGE_SIZE;
        size_t small_len = n_small * ZSWAP_PAGE_SIZE, *perm = calloc(n_small, sizeof(*perm));
        uint64_t *quiet = calloc(n_small * CYCLES, sizeof(*quiet)), *busy = calloc(n_small * CYCLES, sizeof(*busy));
        uint64_t v0[ST_N] = { 0 }, v1[ST_N] = { 0 };
        size_t nq = 0, nb = 0;
        BackendClient *c = NULL;
        Backend *b = NULL;
        int r = perm && quiet && busy ? backend_setup(&cfg, &b) : -ENOMEM;

        if (r < 0)
                goto out;
        corpus_shuffle(perm, n_small, RANDOM_SEED);
        printf("effect phase: %s; a %d MiB client faulting while a %lu MiB one is recompressed\n",
               backend_describe(b), SMALL_MIB, o->size_mib);
        r = backend_client_new(b, &c);
        uint8_t *big = r == 0 ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : MAP_FAILED;
        uint8_t *small = big != MAP_FAILED ? mmap(NULL, small_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                                           : MAP_FAILED;
        if (r == 0 && (big == MAP_FAILED || small == MAP_FAILED))
                r = -ENOMEM;
        if (r == 0) {
                (void)madvise(big, len, MADV_NOHUGEPAGE);
                (void)madvise(small, small_len, MADV_NOHUGEPAGE);
                corpus_fill(run->corpus, big, run->n_pages);
                corpus_fill(run->corpus, small, n_small);
                r = backend_attach(c, big, len);
        }
        if (r == 0)
                r = backend_attach(c, small, small_len);
        if (r == 0)
                r = backend_pageout(c, big, len);
        if (r >= 0)
                r = cycles(run, c, small, n_small, perm, quiet, &nq);
        if (r >= 0)
                r = bench_zswapctl(backend_socket(b), "set recompress_age 1s", NULL, NULL, 0);
        if (r >= 0) {
                bench_sleep_us(1200000); /* the big client's pages are a second old */
                r = bench_zswapctl(backend_socket(b), "status --bytes", status_names, v0, ST_N);
        }
        if (r >= 0)
                r = cycles(run, c, small, n_small, perm, busy, &nb);
        if (r >= 0)
                r = bench_zswapctl(backend_socket(b), "status --bytes", status_names, v1, ST_N);
        if (r >= 0) {
                ef->quiet_p99 = bench_percentile_us(quiet, nq, 0.99);
                ef->busy_p99 = bench_percentile_us(busy, nb, 0.99);
                ef->quiet_med = bench_percentile_us(quiet, nq, 0.5);
                ef->busy_med = bench_percentile_us(busy, nb, 0.5);
                ef->recompressed_during = v1[ST_RECOMPRESSED] - v0[ST_RECOMPRESSED];
                ef->bad = corpus_verify(run->corpus, small, n_small, NULL) + corpus_verify(run->corpus, big, run->n_pages, NULL);
                ef->done = !bench_interrupted;
                printf("  recompression off: %zu faults, median %.2f us, p99 %.2f us\n", nq, ef->quiet_med,
                       ef->quiet_p99);
                printf("  recompressing: %zu faults, median %.2f us, p99 %.2f us; %" PRIu64
                       " pages of the other client recompressed meanwhile; %zu bad pages\n",
                       nb, ef->busy_med, ef->busy_p99, ef->recompressed_during, ef->bad);
        }
        if (c) {
                if (big != MAP_FAILED)
                        backend_detach(c, big, len);
                if (small != MAP_FAILED)
                        backend_detach(c, small, small_len);
        }
        if (big != MAP_FAILED)
                munmap(big, len);
        if (small != MAP_FAILED)
                munmap(small, small_len);
        backend_client_free(c);
out:
        if (b) {
                int rt = backend_teardown(b);
                r = r < 0 ? r : rt;
        }
        free(perm);
        free(quiet);
        free(busy);
        return r < 0 ? r : 0;
}

/* ---- a dictionary per heap: what it would add (no daemon) ---- */

static double cpu_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
}

static size_t units16(size_t n) {
        return (n + 15) / 16 * 16;
}

/*
 * Per corpus heap: a zstd dictionary of DICT_BYTES trained (ZDICT, the
 * default fastCover) on every 8th page, and the other pages compressed
 * at level with it and without it, each object rounded up to the pool's
 * 16-byte classes; decode time per page with the dictionary digested once
 * (a ZSTD_DDict, as a daemon would keep it) and without.
 */
#define DICT_BYTES (32 * 1024)
static void dict_experiment(const Corpus *corpus, int level) {
        static const char *const heaps[CORPUS_FILES] = { "python", "node", "java" };
        size_t ns = CORPUS_FILE_PAGES / 8, samples_len[CORPUS_FILE_PAGES / 8];
        uint8_t *samples = malloc(ns * ZSWAP_PAGE_SIZE), *dict = malloc(DICT_BYTES), out[ZSWAP_PAGE_SIZE * 2],
                back[ZSWAP_PAGE_SIZE];
        ZSTD_CCtx *cc = ZSTD_createCCtx();
        ZSTD_DCtx *dc = ZSTD_createDCtx();

        if (!samples || !dict || !cc || !dc)
                goto out;
        printf("dictionaries (zstd %d, %d KiB trained on every 8th page of the heap, the other pages compressed):\n",
               level, DICT_BYTES / 1024);
        for (unsigned f = 0; f < CORPUS_FILES; f++) {
                const uint8_t *heap = corpus->data + (size_t)f * CORPUS_FILE_PAGES * ZSWAP_PAGE_SIZE;
                for (size_t i = 0; i < ns; i++) {
                        memcpy(samples + i * ZSWAP_PAGE_SIZE, heap + i * 8 * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE);
                        samples_len[i] = ZSWAP_PAGE_SIZE;
                }
                double t0 = cpu_s();
                size_t dn = ZDICT_trainFromBuffer(dict, DICT_BYTES, samples, samples_len, (unsigned)ns);
                double train_s = cpu_s() - t0;
                if (ZDICT_isError(dn)) {
                        printf("  %s: training failed: %s\n", heaps[f], ZDICT_getErrorName(dn));
                        continue;
                }
                ZSTD_CDict *cd = ZSTD_createCDict(dict, dn, level);
                ZSTD_DDict *dd = ZSTD_createDDict(dict, dn);
                size_t plain = 0, with = 0, orig = 0, n = 0;
                double dec_plain = 0, dec_dict = 0;
                for (size_t i = 0; cd && dd && i < CORPUS_FILE_PAGES; i++) {
                        if (i % 8 == 0)
                                continue;
                        const uint8_t *pg = heap + i * ZSWAP_PAGE_SIZE;
                        size_t a = ZSTD_compressCCtx(cc, out, sizeof(out), pg, ZSWAP_PAGE_SIZE, level);
                        double d0 = cpu_s();
                        (void)ZSTD_decompressDCtx(dc, back, sizeof(back), out, a);
                        dec_plain += cpu_s() - d0;
                        size_t b = ZSTD_compress_usingCDict(cc, out, sizeof(out), pg, ZSWAP_PAGE_SIZE, cd);
                        d0 = cpu_s();
                        size_t r = ZSTD_decompress_usingDDict(dc, back, sizeof(back), out, b, dd);
                        dec_dict += cpu_s() - d0;
                        if (ZSTD_isError(a) || ZSTD_isError(b) || r != ZSWAP_PAGE_SIZE ||
                            memcmp(back, pg, ZSWAP_PAGE_SIZE) != 0) {
                                printf("  %s: page %zu does not round-trip\n", heaps[f], i);
                                break;
                        }
                        plain += units16(MIN(a, (size_t)ZSWAP_PAGE_SIZE));
                        with += units16(MIN(b, (size_t)ZSWAP_PAGE_SIZE));
                        orig += ZSWAP_PAGE_SIZE;
                        n++;
                }
                if (n)
                        printf("  %-6s ratio %.2f without, %.2f with the dictionary (%.2fx); training %.3f CPU s on "
                               "%zu KiB, dictionary %zu bytes; decode %.2f us/page without, %.2f with\n",
                               heaps[f], (double)orig / plain, (double)orig / with, (double)plain / with, train_s,
                               ns * ZSWAP_PAGE_SIZE / 1024, dn, dec_plain * 1e6 / n, dec_dict * 1e6 / n);
                ZSTD_freeCDict(cd);
                ZSTD_freeDDict(dd);
        }
out:
        ZSTD_freeCCtx(cc);
        ZSTD_freeDCtx(dc);
        free(samples);
        free(dict);
}

/* ---- output ---- */

static void row(const char *name, const char *fmt, const Phase *ph, size_t off, const Phase *ref) {
        char cell[32];
        printf("%-26s", name);
        for (const Phase *p = ph; p->label; p++) {
                double v = p->done ? *(const double *)((const char *)p + off) : NAN;
                if (isfinite(v))
                        snprintf(cell, sizeof(cell), fmt, v);
                else
                        snprintf(cell, sizeof(cell), "-");
                printf(" %14s", cell);
        }
        double r = ref->done ? *(const double *)((const char *)ref + off) : NAN;
        for (const Phase *p = ph + 1; p->label; p++) {
                double v = p->done ? *(const double *)((const char *)p + off) : NAN;
                if (isfinite(v) && isfinite(r) && r != 0)
                        snprintf(cell, sizeof(cell), "%.2f", v / r);
                else
                        snprintf(cell, sizeof(cell), "-");
                printf(" %8s", cell);
        }
        printf("\n");
}

static void usage(void) {
        printf("bench-recompress [--size MiB] [--level N] [--ref-level N] [--corpus DIR] [--zswapd PATH] [--zram-zstd]\n"
               "  the strong tier against zram: memory ratio and random fault latency once recompressed,\n"
               "  its CPU per GiB, and its effect on another client's faults. Needs root.\n");
}

int main(int argc, char **argv) {
        static const struct option opts[] = { { "size", required_argument, NULL, 's' },
                                              { "level", required_argument, NULL, 'l' },
                                              { "ref-level", required_argument, NULL, 'L' },
                                              { "corpus", required_argument, NULL, 'c' },
                                              { "zswapd", required_argument, NULL, 'z' },
                                              { "zram-zstd", no_argument, NULL, 'Z' },
                                              { "help", no_argument, NULL, 'h' },
                                              {} };
        Options o = { .size_mib = 128, .level = 9, .ref_level = 3 };
        _cleanup_free_ char *corpus_dir = NULL;
        _cleanup_corpus_ Corpus *corpus = NULL;
        char level_arg[64], lvl[16], load[64];
        struct utsname un;
        int c, r;

        while ((c = getopt_long(argc, argv, "s:l:L:c:z:Zh", opts, NULL)) >= 0) {
                switch (c) {
                case 's': o.size_mib = strtoul(optarg, NULL, 10); break;
                case 'l': o.level = atoi(optarg); break;
                case 'L': o.ref_level = atoi(optarg); break;
                case 'c': o.corpus = optarg; break;
                case 'z': o.zswapd = optarg; break;
                case 'Z': o.zram_zstd = true; break;
                case 'h': usage(); return 0;
                default: usage(); return 2;
                }
        }
        if (o.size_mib < 16 || o.level < 1 || o.level > 22 || o.ref_level < 1 || o.ref_level > 22) {
                usage();
                return 2;
        }
        if (geteuid() != 0) {
                printf("bench-recompress: needs root (zram, the daemon)\n");
                return 77;
        }
        r = bench_corpus_load(o.corpus, &corpus_dir, &corpus);
        if (r < 0) {
                printf("cannot load the corpus: %s (--corpus DIR)\n", strerror(-r));
                return 1;
        }
        bench_install_signals();
        uname(&un);
        printf("bench-recompress: %lu MiB of corpus pages (%s), zstd level %d, reference level %d; %s %s, %ld CPUs, "
               "load %s\n",
               o.size_mib, corpus_dir, o.level, o.ref_level, un.sysname, un.release, sysconf(_SC_NPROCESSORS_ONLN),
               bench_loadavg(load, sizeof(load)));
        Run run = { .o = &o, .corpus = corpus, .n_pages = o.size_mib << 8 };
        run.resident = calloc(run.n_pages, 1);
        run.lat = calloc(run.n_pages, sizeof(*run.lat));
        run.perm = calloc(run.n_pages, sizeof(*run.perm));
        if (!run.resident || !run.lat || !run.perm)
                return 1;
        corpus_shuffle(run.perm, run.n_pages, RANDOM_SEED);
        dict_experiment(corpus, o.level);

        snprintf(level_arg, sizeof(level_arg), "recompress_level=%d", o.level);
        snprintf(lvl, sizeof(lvl), "%d", o.ref_level);
        /* refill off: a client idle while its pages are recompressed
         * (longer than refill_quiet at high levels) would have them
         * brought back ahead of the timed faults */
        const char *off[] = { "-o", "recompress_age=0", "-o", "refill=no", NULL };
        const char *strong[] = { "-o", "recompress_age=1s", "-o", "recompress_cpu=100", "-o", level_arg,
                                 "-o", "refill=no",         NULL };
        const char *nodict[] = { "-o", "recompress_age=1s", "-o", "recompress_cpu=100", "-o", level_arg,
                                 "-o", "recompress_dict=no", "-o", "refill=no", NULL };
        const char *zstd[] = { "-o", "recompress_age=0", "-o", "refill=no", "--level", lvl, NULL };
        uint64_t disk = (uint64_t)o.size_mib << 21;
        Phase ph[] = {
                { .label = "zram-lz4" }, { .label = "zswapd-lz4" }, { .label = "zswapd-strong" },
                { .label = o.zram_zstd ? "zram-zstd" : "zswapd-zstd" }, { .label = "zswapd-nodict" }, { .label = NULL },
        };
        const BackendConfig cfgs[] = {
                { .kind = BACKEND_ZRAM, .compressor = "lz4", .size_bytes = disk },
                { .kind = BACKEND_ZSWAPD, .compressor = "lz4", .zswapd_path = o.zswapd, .zswapd_args = off },
                { .kind = BACKEND_ZSWAPD, .compressor = "lz4", .zswapd_path = o.zswapd, .zswapd_args = strong },
                o.zram_zstd ? (BackendConfig){ .kind = BACKEND_ZRAM, .compressor = "zstd", .size_bytes = disk }
                            : (BackendConfig){ .kind = BACKEND_ZSWAPD, .compressor = "zstd", .zswapd_path = o.zswapd,
                                               .zswapd_args = zstd },
                { .kind = BACKEND_ZSWAPD, .compressor = "lz4", .zswapd_path = o.zswapd, .zswapd_args = nodict },
        };
        for (size_t i = 0; i < ELEMENTSOF(cfgs) && !bench_interrupted; i++)
                if ((r = phase_run(&run, &cfgs[i], i == 2 || i == 4, &ph[i])) < 0)
                        printf("%s phase failed: %s\n", ph[i].label, strerror(-r));
        Effect ef = { 0 };
        if (!bench_interrupted && (r = phase_effect(&run, &o, &ef)) < 0)
                printf("effect phase failed: %s\n", strerror(-r));

        printf("\n%-26s", "metric");
        for (const Phase *p = ph; p->label; p++)
                printf(" %14s", p->label);
        for (const Phase *p = ph + 1; p->label; p++)
                printf(" %8.8s", p->label + (strncmp(p->label, "zswapd-", 7) == 0 ? 7 : 0));
        printf("\n%-26s%*s(ratios: each / zram-lz4)\n", "", 15 * 5, "");
        row("memory ratio (out/used)", "%.2f", ph, offsetof(Phase, ratio), &ph[0]);
        row("random fault median us", "%.2f", ph, offsetof(Phase, median_us), &ph[0]);
        row("random fault p99 us", "%.2f", ph, offsetof(Phase, p99_us), &ph[0]);
        row("random fault p99.9 us", "%.2f", ph, offsetof(Phase, p999_us), &ph[0]);
        const Phase *s = &ph[2], *z = &ph[3];
        if (s->done && z->done)
                printf("strong tier against %s: memory ratio %.2fx, random fault median %.2fx, p99 %.2fx\n",
                       z->label, s->ratio / z->ratio, s->median_us / z->median_us, s->p99_us / z->p99_us);
        const Phase *nd = &ph[4];
        if (s->done && nd->done)
                printf("the client's dictionary: memory ratio %.2fx recompression without one at level %d; random fault "
                       "median %.2fx; %" PRIu64 " of %" PRIu64 " strong pages made with it; training %.3f CPU s, "
                       "%" PRIu64 " bytes\n",
                       s->ratio / nd->ratio, o.level, s->median_us / nd->median_us, s->dict_pages, s->strong_pages,
                       s->dict_cpu_ns / 1e9, s->dict_mem);
        if (s->done && s->recompressed)
                printf("recompression: %" PRIu64 " pages in %.1f s, %.2f CPU s per GiB recompressed, %.1f %% of the "
                       "pool saved\n",
                       s->recompressed, s->wait_s, s->cpu_ns / 1e9 / (s->recompressed * (double)ZSWAP_PAGE_SIZE / (1 << 30)),
                       ph[1].done ? 100.0 * (1.0 - ph[1].ratio / s->ratio) : NAN);
        if (ef.done)
                printf("another client's faults while recompression runs (recompress_cpu 10): p99 %.2f us against "
                       "%.2f us without (%.2fx), median %.2fx; %" PRIu64 " pages recompressed meanwhile\n",
                       ef.busy_p99, ef.quiet_p99, ef.busy_p99 / ef.quiet_p99, ef.busy_med / ef.quiet_med,
                       ef.recompressed_during);
        size_t bad = ef.bad;
        for (const Phase *p = ph; p->label; p++)
                bad += p->bad;
        if (bad) {
                printf("%zu BAD PAGES\n", bad);
                return 1;
        }
        return bench_interrupted ? 130 : 0;
}
