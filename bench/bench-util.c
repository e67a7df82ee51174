/*
 * bench-util.c: helpers of bench-store and bench-scale (see bench-util.h).
 *
 * Everything here is called from the benchmarks' main threads only, except
 * bench_now_ns() and bench_sleep_us(), which any thread may call.
 */
#include <signal.h>
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <lz4.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "bench-util.h"
#include "macro.h"

uint64_t bench_now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void bench_sleep_us(long us) {
        struct timespec ts = { us / 1000000, (us % 1000000) * 1000L };

        nanosleep(&ts, NULL);
}

static int read_small(const char *path, char *buf, size_t len) {
        FILE *f = fopen(path, "re");
        size_t k;

        if (!f)
                return -errno;
        k = fread(buf, 1, len - 1, f);
        fclose(f);
        buf[k] = 0;
        return 0;
}

int bench_rss_anon_kib(const char *procfs, pid_t pid, long *ret) {
        char path[128], buf[4096], *p;
        int r;

        snprintf(path, sizeof(path), "%s/%d/status", procfs, (int)pid);
        r = read_small(path, buf, sizeof(buf));
        if (r < 0)
                return r;
        p = strstr(buf, "\nRssAnon:");
        if (!p || sscanf(p, "\nRssAnon: %ld kB", ret) != 1)
                return -EBADMSG; /* a zombie has no RssAnon line */
        return 0;
}

/*
 * Fields of a stat line, numbered as in proc(5) (3 = state), want[] in
 * increasing order; comm may hold spaces and parentheses, so counting
 * starts after the last ')'.
 */
static int stat_fields(const char *path, const unsigned *want, unsigned long long *vals, size_t n) {
        char buf[1024], *p, *save = NULL;
        unsigned field = 3;
        size_t got = 0;
        int r;

        r = read_small(path, buf, sizeof(buf));
        if (r < 0)
                return r;
        p = strrchr(buf, ')');
        if (!p)
                return -EBADMSG;
        for (char *t = strtok_r(p + 1, " \n", &save); t && got < n; t = strtok_r(NULL, " \n", &save), field++)
                if (field == want[got])
                        vals[got++] = strtoull(t, NULL, 10);
        return got == n ? 0 : -EBADMSG;
}

int bench_proc_times(const char *procfs, pid_t pid, double *ret_user, double *ret_sys) {
        static const unsigned want[] = { 14, 15 }; /* utime, stime */
        unsigned long long v[2];
        char path[128];
        int r;

        snprintf(path, sizeof(path), "%s/%d/stat", procfs, (int)pid);
        r = stat_fields(path, want, v, 2);
        if (r < 0)
                return r;
        if (ret_user)
                *ret_user = (double)v[0] / sysconf(_SC_CLK_TCK);
        if (ret_sys)
                *ret_sys = (double)v[1] / sysconf(_SC_CLK_TCK);
        return 0;
}

int bench_worker_cpu_s(const char *procfs, pid_t pid, int nice, double *ret, double *ret_sys,
                       unsigned *ret_threads) {
        static const unsigned want[] = { 15, 19, 41 }; /* stime, nice, policy */
        char path[512], buf[256];
        unsigned n = 0;
        double s = 0, sys = 0;
        struct dirent *de;
        DIR *d;

        snprintf(path, sizeof(path), "%s/%d/task", procfs, (int)pid);
        d = opendir(path);
        if (!d)
                return -errno;
        while ((de = readdir(d))) {
                unsigned long long v[3], runtime;

                if (de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "%s/%d/task/%s/stat", procfs, (int)pid, de->d_name);
                if (stat_fields(path, want, v, 3) < 0)
                        continue; /* the thread ended meanwhile */
                if ((int)(long long)v[1] != nice && v[2] != SCHED_IDLE)
                        continue;
                snprintf(path, sizeof(path), "%s/%d/task/%s/schedstat", procfs, (int)pid, de->d_name);
                if (read_small(path, buf, sizeof(buf)) < 0 || sscanf(buf, "%llu", &runtime) != 1)
                        continue;
                s += runtime / 1e9;
                sys += (double)v[0] / sysconf(_SC_CLK_TCK);
                n++;
        }
        closedir(d);
        *ret = s;
        *ret_sys = sys;
        *ret_threads = n;
        return 0;
}

int bench_parse_list(const char *s, unsigned lo, unsigned hi, unsigned *v, unsigned max, unsigned *ret_n) {
        unsigned n = 0;
        const char *p = s;

        while (*p) {
                char *end;
                unsigned long x = strtoul(p, &end, 10);

                if (end == p || x < lo || x > hi || n == max || (*end && *end != ','))
                        return -EINVAL;
                v[n++] = (unsigned)x;
                p = *end ? end + 1 : end;
        }
        if (n == 0)
                return -EINVAL;
        *ret_n = n;
        return 0;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;

        if (isnan(x) || isnan(y))
                return isnan(x) - isnan(y);
        return (x > y) - (x < y);
}

double bench_median(double *v, size_t n) {
        size_t k = 0;

        qsort(v, n, sizeof(*v), cmp_double);
        while (k < n && !isnan(v[k]))
                k++;
        if (k == 0)
                return NAN;
        return k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
}

double bench_percentile_us(const uint64_t *v, size_t n, double p) {
        size_t rank = (size_t)(p * n);

        if (n == 0)
                return NAN;
        if ((double)rank < p * n)
                rank++; /* ceil() without libm */
        return v[rank ? MIN(rank, n) - 1 : 0] / 1000.0;
}

int bench_zswapctl(const char *sock, const char *args, const char *const *names, uint64_t *values, size_t n) {
        _cleanup_free_ char *exe = realpath("/proc/self/exe", NULL);
        char cmd[8400], line[256], name[64], value[64];
        FILE *p;

        snprintf(cmd, sizeof(cmd), "%s/../client/tools/zswapctl --socket %s %s", exe ? dirname(exe) : ".", sock, args);
        p = popen(cmd, "re");
        if (!p)
                return -errno;
        while (fgets(line, sizeof(line), p))
                if (sscanf(line, "%63s %63s", name, value) == 2)
                        for (size_t i = 0; i < n; i++)
                                if (strcmp(name, names[i]) == 0)
                                        values[i] = strtoull(value, NULL, 10);
        int st = pclose(p);
        return st == 0 ? 0 : st < 0 ? -errno : -EIO;
}

int bench_corpus_load(const char *dir, char **ret_dir, Corpus **ret) {
        _cleanup_free_ char *exe = NULL, *found = NULL;
        int r;

        if (dir)
                r = (found = realpath(dir, NULL)) ? 0 : -errno;
        else {
                exe = realpath("/proc/self/exe", NULL);
                r = corpus_find_dir(exe ? dirname(exe) : ".", &found);
        }
        if (r == 0)
                r = corpus_load(found, ret);
        if (r < 0)
                return r;
        *ret_dir = TAKE_PTR(found);
        return 0;
}

/* One thread's share of a codec measurement. */
typedef struct CodecJob {
        const Corpus *c;
        bool zstd, copies;
        int level;
        size_t n_pages;
        unsigned runs;
        pthread_barrier_t *barrier;
        double *cpu, *wall;      /* runs entries */
        int64_t out;             /* compressed bytes of the last run */
        size_t incompressible;
        int err;
} CodecJob;

static double thread_cpu_s(void) {
        struct timespec ts;

        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int64_t compress_page(CodecJob *j, const uint8_t *page, uint8_t *dst, void *state, ZSTD_CCtx *zc) {
        const int cap = (int)(ZSWAP_PAGE_SIZE * 3 / 4); /* as the daemon's max_compressed */

        if (j->zstd) {
                size_t k = ZSTD_compress2(zc, dst, cap, page, ZSWAP_PAGE_SIZE);
                return ZSTD_isError(k) ? -1 : (int64_t)k;
        }
        return LZ4_compress_fast_extState(state, (const char *)page, (char *)dst, (int)ZSWAP_PAGE_SIZE, cap,
                                          j->level > 1 ? j->level : 1);
}

/*
 * One pass. With copies, each batch of CODEC_BATCH pages is first copied
 * into a bounce buffer (the worker's process_vm_readv of a staging lane)
 * and each compressed page is appended to a fresh arena (the pool, whose
 * memory is new when it grows). Returns the compressed bytes.
 */
#define CODEC_BATCH 512
static int64_t codec_pass(CodecJob *j, const uint8_t *buf, uint8_t *bounce, uint8_t *arena, void *state,
                          ZSTD_CCtx *zc) {
        uint8_t dst[ZSWAP_PAGE_SIZE];
        int64_t total = 0;

        j->incompressible = 0;
        for (size_t b = 0; b < j->n_pages; b += CODEC_BATCH) {
                size_t n = MIN((size_t)CODEC_BATCH, j->n_pages - b);
                const uint8_t *src = buf + b * ZSWAP_PAGE_SIZE;

                if (j->copies) {
                        memcpy(bounce, src, n * ZSWAP_PAGE_SIZE);
                        src = bounce;
                }
                for (size_t i = 0; i < n; i++) {
                        int64_t k = compress_page(j, src + i * ZSWAP_PAGE_SIZE, dst, state, zc);

                        if (k <= 0) {
                                j->incompressible++;
                                total += ZSWAP_PAGE_SIZE;
                                continue;
                        }
                        if (j->copies)
                                memcpy(arena + total, dst, (size_t)k);
                        total += k;
                }
        }
        return total;
}

static void *codec_job_run(void *arg) {
        CodecJob *j = arg;
        size_t len = j->n_pages * ZSWAP_PAGE_SIZE;
        void *state = j->zstd ? NULL : malloc(LZ4_sizeofState());
        ZSTD_CCtx *zc = j->zstd ? ZSTD_createCCtx() : NULL;
        uint8_t *buf = aligned_alloc(ZSWAP_PAGE_SIZE, len);
        uint8_t *bounce = aligned_alloc(ZSWAP_PAGE_SIZE, CODEC_BATCH * ZSWAP_PAGE_SIZE);

        if (!buf || !bounce || (j->zstd ? !zc : !state)) {
                j->err = -ENOMEM;
                goto out;
        }
        if (j->zstd) {
                /* the daemon's codec.c settings: a page is one frame, no extras */
                ZSTD_CCtx_setParameter(zc, ZSTD_c_compressionLevel, j->level ? j->level : 1);
                ZSTD_CCtx_setParameter(zc, ZSTD_c_contentSizeFlag, 0);
                ZSTD_CCtx_setParameter(zc, ZSTD_c_checksumFlag, 0);
                ZSTD_CCtx_setParameter(zc, ZSTD_c_dictIDFlag, 0);
        }
        corpus_fill(j->c, buf, j->n_pages);
        memset(bounce, 0, CODEC_BATCH * ZSWAP_PAGE_SIZE);
        for (unsigned i = 0; i < j->runs; i++) {
                uint8_t *arena = MAP_FAILED;
                double c0;
                uint64_t t0;

                if (j->barrier)
                        pthread_barrier_wait(j->barrier);
                c0 = thread_cpu_s();
                t0 = bench_now_ns();
                if (j->copies) {
                        /* timed: a growing pool takes fresh pages too */
                        arena = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                        if (arena == MAP_FAILED) {
                                j->err = -errno;
                                break;
                        }
                }
                j->out = codec_pass(j, buf, bounce, arena, state, zc);
                if (arena != MAP_FAILED)
                        munmap(arena, len);
                j->cpu[i] = len / 1e6 / (thread_cpu_s() - c0);
                j->wall[i] = len * 1e3 / (double)(bench_now_ns() - t0);
        }
out:
        ZSTD_freeCCtx(zc);
        free(state);
        free(buf);
        free(bounce);
        return NULL;
}

int bench_codec_speed(const Corpus *c, const char *compressor, int level, size_t n_pages, unsigned runs,
                      unsigned threads, bool copies, CodecSpeed *ret) {
        _cleanup_free_ double *cpu = calloc((size_t)runs * threads, sizeof(double));
        _cleanup_free_ double *wall = calloc((size_t)runs * threads, sizeof(double));
        _cleanup_free_ CodecJob *jobs = calloc(threads, sizeof(CodecJob));
        _cleanup_free_ pthread_t *tids = calloc(threads, sizeof(pthread_t));
        pthread_barrier_t barrier;
        unsigned started = 0;
        int r = 0;

        if (!cpu || !wall || !jobs || !tids || threads == 0 || runs == 0)
                return -ENOMEM;
        pthread_barrier_init(&barrier, NULL, threads);
        for (unsigned t = 0; t < threads; t++)
                jobs[t] = (CodecJob){ .c = c, .zstd = strcmp(compressor, "zstd") == 0, .copies = copies,
                                      .level = level, .n_pages = n_pages, .runs = runs,
                                      .barrier = threads > 1 ? &barrier : NULL, .cpu = cpu + (size_t)t * runs,
                                      .wall = wall + (size_t)t * runs };
        if (threads == 1)
                codec_job_run(&jobs[0]);
        else {
                for (; started < threads; started++)
                        if ((r = -pthread_create(&tids[started], NULL, codec_job_run, &jobs[started])) < 0)
                                break;
                if (r < 0) {
                        /* those started wait at the barrier for the missing ones forever */
                        fprintf(stderr, "cannot start codec threads: %s\n", strerror(-r));
                        exit(EXIT_FAILURE);
                }
                for (unsigned t = 0; t < threads; t++)
                        pthread_join(tids[t], NULL);
        }
        pthread_barrier_destroy(&barrier);
        for (unsigned t = 0; t < threads; t++)
                if (jobs[t].err)
                        return jobs[t].err;
        ret->ratio = jobs[0].out > 0 ? (double)(n_pages * ZSWAP_PAGE_SIZE) / jobs[0].out : NAN;
        ret->incompressible = jobs[0].incompressible;
        ret->cpu_mbs = bench_median(cpu, (size_t)runs * threads);
        ret->min_mbs = cpu[0];
        ret->max_mbs = cpu[(size_t)runs * threads - 1];
        ret->wall_mbs = bench_median(wall, (size_t)runs * threads);
        return 0;
}

const char *bench_loadavg(char *buf, size_t len) {
        double a, b, c;

        if (read_small("/proc/loadavg", buf, len) < 0 || sscanf(buf, "%lf %lf %lf", &a, &b, &c) != 3)
                snprintf(buf, len, "?");
        else
                snprintf(buf, len, "%.2f %.2f %.2f", a, b, c);
        return buf;
}

const char *bench_fmt(char *buf, size_t len, const char *fmt, double v) {
        if (isfinite(v))
                snprintf(buf, len, fmt, v);
        else
                snprintf(buf, len, "-");
        return buf;
}

const char *bench_ratio(char *buf, size_t len, double a, double b) {
        if (isfinite(a) && isfinite(b) && b != 0)
                snprintf(buf, len, "%.2f", a / b);
        else
                snprintf(buf, len, "-");
        return buf;
}

volatile sig_atomic_t bench_interrupted;

static void on_signal(int sig) {
        bench_interrupted = sig;
}

void bench_install_signals(void) {
        struct sigaction sa = { .sa_handler = on_signal }; /* no SA_RESTART: sleeps end early */

        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);
}
