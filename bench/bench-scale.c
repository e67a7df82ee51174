/*
 * bench-scale.c: scalability under concurrent stores and loads.
 *
 * The seed (zswap: split the rb-tree into one tree per 64 MiB) measured a
 * kernel build in tmpfs, many tasks storing and loading at once: the
 * single tree's spinlock cost 7m37s of sys time, split trees 4m54s. Here 2
 * to 16 threads of one process (--threads, default 2,4,8,16) each loop
 * for --duration seconds:
 *
 *     page out a chunk of its pages (--chunk pages, in calls of --block
 *     pages), see with mincore() which of them are out, read every page
 *     of the chunk (each read of an out page is a fault), check every
 *     page's checksum against the corpus, go on with the next chunk.
 *
 * in two layouts:
 *   distinct  each thread its own region (its own mmap, registered alone)
 *   shared    one region; the threads' blocks interleave (block k of the
 *             region belongs to thread k mod threads), so neighbouring
 *             pages of one page table and one daemon index belong to
 *             different threads
 * against three backends: zswapd (the daemon's defaults), kernel zram-lz4
 * and kernel zswap-lzo (MADV_PAGEOUT). Each backend is set up afresh for
 * each thread count and the three take turns, so a burst of other work on
 * this shared, noisy machine lands on all of them, not on one.
 *
 * Reported per cell: faults/s (pages found out by mincore() and then read,
 * all threads, over the wall time of the cell), and sys time: the daemon's
 * stime (/proc/PID/stat) and this process's own stime (getrusage, every
 * thread: for the kernel backends that is where zram and zswap compress
 * and decompress; for zswapd it holds the library's agent and the uffd
 * fault entry). Ratios are to zram-lz4 at the same layout and thread count.
 *
 * The pageout and read-back calls are the same for every backend and
 * layout; only the layout differs between the two halves of a table.
 * SIGINT/SIGTERM/SIGHUP set a flag: the current cell stops early and the
 * backend is torn down.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "zram.h"
#include "bench-util.h"
#include "corpus.h"
#include "macro.h"

#define MAX_THREADS 64
#define MAX_LIST 8
#define MAX_BACKENDS 3
#define JOIN_TIMEOUT_S 60

enum { MODE_DISTINCT, MODE_SHARED, N_MODES };
static const char *const mode_names[N_MODES] = { "distinct", "shared" };

typedef struct Options {
        const char *zswapd;
        const char *corpus;
        const char *compressor;
        unsigned threads[MAX_LIST], nthreads;
        double duration_s;
        unsigned pages;  /* per thread */
        unsigned chunk;  /* pages per loop */
        unsigned block;  /* pages per pageout call, and the interleave unit */
        bool modes[N_MODES];
        unsigned repeat;
        bool skip_kernel, skip_zswapd;
} Options;

/* One cell's figures; with --repeat, the sums over its runs. */
typedef struct Cell {
        bool done;               /* every run of it completed */
        unsigned runs;
        double elapsed_s;
        uint64_t faults, cycled, bad;
        uint64_t pageout_calls, pageout_ns, read_ns;
        double daemon_sys_s, daemon_cpu_s; /* NAN without a daemon */
        double proc_sys_s, proc_cpu_s;
        int err;
} Cell;

typedef struct Run Run;

typedef struct Thread {
        Run *run;
        pthread_t thr;
        unsigned idx;
        BackendClient *client;  /* the process's (zswapd) or its own (kernel) */
        uint8_t *region;        /* distinct: its own; shared: the common one */
        uint64_t faults, cycled, bad, first_bad;
        uint64_t pageout_calls, pageout_ns, read_ns;
        int err;
        const char *failed_step;
        uint64_t t_end;
} Thread;

struct Run {
        const Options *o;
        const Corpus *corpus;
        BackendClient *client;
        unsigned mode, nthreads;
        size_t region_pages;     /* pages of each region */
        pthread_barrier_t start;
        atomic_bool stop;
        Thread th[MAX_THREADS];
};

/* ---- the client threads ---- */

/* Address and corpus_fill() index of the first page of block k of thread t. */
static uint8_t *block_addr(const Thread *t, size_t k, size_t *ret_fill) {
        const Run *run = t->run;
        size_t b = run->o->block;
        size_t g = run->mode == MODE_SHARED ? k * run->nthreads + t->idx : k;

        *ret_fill = g * b;
        return t->region + g * b * ZSWAP_PAGE_SIZE;
}

/* Read every page of one block (faulting in those that are out) and check it. */
static void block_read_check(Thread *t, uint8_t *addr, size_t fill) {
        const Corpus *c = t->run->corpus;

        for (size_t j = 0; j < t->run->o->block; j++) {
                const volatile uint8_t *p = addr + j * ZSWAP_PAGE_SIZE;

                (void)*p;
                if (corpus_checksum(addr + j * ZSWAP_PAGE_SIZE) == c->sums[corpus_index(fill + j)])
                        continue;
                if (t->bad++ == 0)
                        t->first_bad = fill + j;
        }
}

/* Pages of the range that are out; 0 if mincore() fails (zram.h). */
static size_t out_pages(void *addr, size_t len, unsigned char *vec) {
        return len / ZSWAP_PAGE_SIZE - zram_resident_pages(addr, len, vec);
}

/* One loop: page a chunk out block by block, then read and check it. */
static int thread_chunk(Thread *t, size_t k0, size_t nblocks, unsigned char *vec) {
        const Options *o = t->run->o;
        size_t per = o->chunk / o->block, blen = (size_t)o->block * ZSWAP_PAGE_SIZE, fill;

        uint64_t t0 = bench_now_ns(), t1;
        int r;

        for (size_t i = 0; i < per; i++) {
                r = backend_pageout(t->client, block_addr(t, (k0 + i) % nblocks, &fill), blen);
                if (r < 0) {
                        t->failed_step = "pageout";
                        return r;
                }
        }
        t1 = bench_now_ns();
        t->pageout_ns += t1 - t0;
        t->pageout_calls += per;
        for (size_t i = 0; i < per; i++) {
                uint8_t *a = block_addr(t, (k0 + i) % nblocks, &fill);

                t->faults += out_pages(a, blen, vec);
                block_read_check(t, a, fill);
        }
        t->read_ns += bench_now_ns() - t1;
        t->cycled += per * o->block;
        return 0;
}

static void *thread_main(void *arg) {
        Thread *t = arg;
        const Options *o = t->run->o;
        size_t nblocks = o->pages / o->block, per = o->chunk / o->block;
        unsigned char vec[512];

        pthread_barrier_wait(&t->run->start);
        for (size_t k = 0; !atomic_load_explicit(&t->run->stop, memory_order_relaxed); k = (k + per) % nblocks) {
                t->err = thread_chunk(t, k, nblocks, vec);
                if (t->err < 0)
                        break;
        }
        t->t_end = bench_now_ns();
        return NULL;
}

/* ---- one cell: a layout at a thread count ---- */

static int regions_map(Run *run, size_t len, unsigned n) {
        for (unsigned i = 0; i < n; i++) {
                uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                int r;

                if (p == MAP_FAILED)
                        return -errno;
                run->th[i].region = p;
                (void)madvise(p, len, MADV_NOHUGEPAGE); /* one fault, one page */
                corpus_fill(run->corpus, p, len / ZSWAP_PAGE_SIZE);
                r = backend_attach(run->client, p, len);
                if (r < 0) {
                        munmap(p, len);
                        run->th[i].region = NULL;
                        return r;
                }
        }
        for (unsigned i = n; i < run->nthreads; i++)
                run->th[i].region = run->th[0].region;
        return 0;
}

static void regions_unmap(Run *run, size_t len, unsigned n) {
        for (unsigned i = 0; i < n; i++) {
                if (!run->th[i].region)
                        continue;
                int r = backend_detach(run->client, run->th[i].region, len);
                if (r < 0)
                        printf("    detach of region %u failed: %s\n", i, strerror(-r));
                munmap(run->th[i].region, len);
        }
}

static double rusage_s(const struct timeval *tv) {
        return tv->tv_sec + tv->tv_usec / 1e6;
}

/* stime and utime+stime of the daemon and of this process. */
static void sample_cpu(Backend *b, double *dsys, double *dcpu, double *psys, double *pcpu) {
        pid_t pid = backend_daemon_pid(b);
        struct rusage ru;
        double u, s;

        *dsys = *dcpu = NAN;
        if (pid > 0 && bench_proc_times("/proc", pid, &u, &s) == 0) {
                *dsys = s;
                *dcpu = u + s;
        }
        getrusage(RUSAGE_SELF, &ru);
        *psys = rusage_s(&ru.ru_stime);
        *pcpu = *psys + rusage_s(&ru.ru_utime);
}

/* Let the threads run for the duration; false if one of them hangs. */
static bool threads_run(Run *run, uint64_t *t0) {
        const Options *o = run->o;
        uint64_t until;
        bool hung = false;

        pthread_barrier_wait(&run->start);
        *t0 = bench_now_ns();
        until = *t0 + (uint64_t)(o->duration_s * 1e9);
        while (!bench_interrupted && bench_now_ns() < until)
                bench_sleep_us(10000);
        atomic_store_explicit(&run->stop, true, memory_order_relaxed);
        for (unsigned i = 0; i < run->nthreads; i++) {
                struct timespec ts;

                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_sec += JOIN_TIMEOUT_S;
                if (pthread_timedjoin_np(run->th[i].thr, NULL, &ts) != 0) {
                        printf("    HANG: thread %u did not finish its chunk within %d s of the stop\n", i,
                               JOIN_TIMEOUT_S);
                        hung = true;
                }
        }
        return !hung;
}

static void cell_collect(Run *run, uint64_t t0, Cell *cell) {
        uint64_t t_last = t0;

        for (unsigned i = 0; i < run->nthreads; i++) {
                Thread *t = &run->th[i];

                cell->faults += t->faults;
                cell->cycled += t->cycled;
                cell->bad += t->bad;
                cell->pageout_calls += t->pageout_calls;
                cell->pageout_ns += t->pageout_ns;
                cell->read_ns += t->read_ns;
                t_last = MAX(t_last, t->t_end);
                if (t->bad)
                        printf("    thread %u: %" PRIu64 " bad pages (first: page %" PRIu64 " of the fill)\n", i,
                               t->bad, t->first_bad);
                if (t->err < 0) {
                        printf("    thread %u: %s failed: %s\n", i, t->failed_step, strerror(-t->err));
                        if (!cell->err)
                                cell->err = t->err;
                }
        }
        cell->elapsed_s = (t_last - t0) / 1e9;
}

/* Add one run's figures to the cell's sums. */
static void cell_add(Cell *sum, const Cell *one) {
        sum->done = (sum->runs == 0 || sum->done) && one->done;
        sum->runs++;
        sum->elapsed_s += one->elapsed_s;
        sum->faults += one->faults;
        sum->cycled += one->cycled;
        sum->bad += one->bad;
        sum->pageout_calls += one->pageout_calls;
        sum->pageout_ns += one->pageout_ns;
        sum->read_ns += one->read_ns;
        sum->daemon_sys_s = sum->runs == 1 ? one->daemon_sys_s : sum->daemon_sys_s + one->daemon_sys_s;
        sum->daemon_cpu_s = sum->runs == 1 ? one->daemon_cpu_s : sum->daemon_cpu_s + one->daemon_cpu_s;
        sum->proc_sys_s += one->proc_sys_s;
        sum->proc_cpu_s += one->proc_cpu_s;
        if (!sum->err)
                sum->err = one->err;
}

static int cell_run(Run *run, Backend *b, Cell *sum) {
        const Options *o = run->o;
        Cell one = {}, *cell = &one;
        unsigned nregions = run->mode == MODE_SHARED ? 1 : run->nthreads;
        size_t len = run->region_pages * ZSWAP_PAGE_SIZE;
        double ds0, dc0, ps0, pc0, ds1, dc1, ps1, pc1;
        unsigned started = 0;
        uint64_t t0 = 0;
        int r;

        r = regions_map(run, len, nregions);
        if (r < 0) {
                printf("    cannot map and register the regions: %s\n", strerror(-r));
                regions_unmap(run, len, nregions);
                return r;
        }
        pthread_barrier_init(&run->start, NULL, run->nthreads + 1);
        atomic_store_explicit(&run->stop, false, memory_order_relaxed);
        for (; started < run->nthreads; started++) {
                Thread *t = &run->th[started];

                *t = (Thread){ .run = run, .idx = started, .region = t->region, .client = run->client };
                /* zswapd: one client per process, thread-safe. Kernel kinds:
                 * a client is a mincore() buffer, so each thread gets its own */
                if (backend_daemon_pid(b) <= 0)
                        r = backend_client_new(b, &t->client);
                if (r == 0)
                        r = -pthread_create(&t->thr, NULL, thread_main, t);
                if (r < 0)
                        break;
        }
        if (r < 0) {
                /* the barrier would never open: nothing started may be left behind */
                printf("    cannot start %u threads: %s\n", run->nthreads, strerror(-r));
                fflush(stdout);
                _exit(1);
        }
        sample_cpu(b, &ds0, &dc0, &ps0, &pc0);
        if (!threads_run(run, &t0)) {
                printf("    daemon pid %d; reproduce: bench-scale --threads %u --modes %s --pages %u --chunk %u "
                       "--block %u%s\n",
                       (int)backend_daemon_pid(b), run->nthreads, mode_names[run->mode], o->pages, o->chunk,
                       o->block, backend_daemon_pid(b) > 0 ? " --skip-kernel" : " --skip-zswapd");
                fflush(stdout);
                return -ETIMEDOUT;
        }
        sample_cpu(b, &ds1, &dc1, &ps1, &pc1);
        cell_collect(run, t0, cell);
        for (unsigned i = 0; i < run->nthreads; i++)
                if (run->th[i].client != run->client)
                        backend_client_free(run->th[i].client);
        cell->daemon_sys_s = ds1 - ds0;
        cell->daemon_cpu_s = dc1 - dc0;
        cell->proc_sys_s = ps1 - ps0;
        cell->proc_cpu_s = pc1 - pc0;
        pthread_barrier_destroy(&run->start);
        regions_unmap(run, len, nregions);
        cell->done = cell->err == 0 && !bench_interrupted;
        printf("    %-8s %2u threads: %" PRIu64 " faults, %" PRIu64 " pages cycled in %.2f s; pageout call %.0f us, "
               "read+check %.1f us/page (mean, per thread); sys: daemon %.2f s, process %.2f s; %" PRIu64
               " bad pages\n",
               mode_names[run->mode], run->nthreads, cell->faults, cell->cycled, cell->elapsed_s,
               cell->pageout_calls ? cell->pageout_ns / 1e3 / cell->pageout_calls : NAN,
               cell->cycled ? cell->read_ns / 1e3 / cell->cycled : NAN, isfinite(cell->daemon_sys_s) ?
               cell->daemon_sys_s : 0, cell->proc_sys_s, cell->bad);
        fflush(stdout);
        cell_add(sum, cell);
        return cell->err;
}

/* ---- backends ---- */

typedef struct BackendSpec {
        const char *name;
        BackendKind kind;
        const char *compressor;
} BackendSpec;

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

static unsigned max_threads(const Options *o) {
        unsigned m = 0;

        for (unsigned i = 0; i < o->nthreads; i++)
                m = MAX(m, o->threads[i]);
        return m;
}

/*
 * One backend at one thread count, both layouts: a fresh backend each time,
 * so that the three backends take turns at every thread count and a burst
 * of other work on the machine hits all of them rather than one.
 * cells[mode] is the cell of each layout at this thread count.
 */
static int backend_session(const Options *o, const Corpus *corpus, const BackendSpec *spec, unsigned nthreads,
                           Cell *cells[N_MODES]) {
        _cleanup_free_ char *path = NULL;
        BackendConfig bc = {
                .kind = spec->kind,
                .compressor = spec->compressor,
                .size_bytes = 2 * (uint64_t)max_threads(o) * o->pages * ZSWAP_PAGE_SIZE,
        };
        _cleanup_free_ Run *run = calloc(1, sizeof(Run));
        Backend *b = NULL;
        int r, rt, failed = 0;

        if (!run)
                return -ENOMEM;
        if (spec->kind == BACKEND_ZSWAPD) {
                r = zswapd_path(o, &path);
                if (r < 0)
                        return r;
                bc.zswapd_path = path;
        }
        printf("  %s, %u threads:\n", spec->name, nthreads);
        fflush(stdout);
        r = backend_setup(&bc, &b);
        if (r < 0)
                return printf("    cannot set up %s: %s\n", spec->name, strerror(-r)), r;
        r = backend_client_new(b, &run->client);
        if (r < 0)
                printf("    cannot connect to %s: %s\n", spec->name, strerror(-r));
        for (unsigned m = 0; r == 0 && m < N_MODES && !bench_interrupted; m++) {
                if (!o->modes[m])
                        continue;
                run->o = o;
                run->corpus = corpus;
                run->mode = m;
                run->nthreads = nthreads;
                run->region_pages = m == MODE_SHARED ? (size_t)o->pages * nthreads : o->pages;
                r = cell_run(run, b, cells[m]);
                if (r == -ETIMEDOUT)
                        break; /* threads are stuck in faults: nothing more can run in this process */
                failed |= r < 0;
                r = 0;
        }
        if (r == -ETIMEDOUT) {
                /* the stuck threads still use the client and the regions: leave them,
                 * take the backend down (swapoff, daemon) and stop here */
                rt = backend_teardown(b);
                printf("    teardown after the hang: %s\n", rt < 0 ? strerror(-rt) : "done");
                fflush(stdout);
                _exit(1);
        }
        backend_client_free(run->client);
        rt = backend_teardown(b);
        if (rt < 0)
                printf("    teardown of %s failed: %s (check swapon --show)\n", spec->name, strerror(-rt));
        return r ?: failed ? -EIO : rt;
}

/* ---- output ---- */

#define F(buf, fmt, v) bench_fmt(buf, sizeof(buf), fmt, v)
#define R(buf, a, b) bench_ratio(buf, sizeof(buf), a, b)

static double cell_faults_s(const Cell *c) {
        return c->done && c->elapsed_s > 0 ? c->faults / c->elapsed_s : NAN;
}

/* Sys time where the backend's work is: daemon + process for zswapd, the process for the kernel. */
static double cell_sys_s(const Cell *c) {
        return c->done ? (isfinite(c->daemon_sys_s) ? c->daemon_sys_s : 0) + c->proc_sys_s : NAN;
}

static double cell_sys_us_per_fault(const Cell *c) {
        return c->done && c->faults ? cell_sys_s(c) / c->faults * 1e6 : NAN;
}

static void print_tables(const Options *o, const BackendSpec *spec, unsigned nb, Cell cells[][N_MODES][MAX_LIST],
                         int ref) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

        printf("\nfaults/s = pages found out (mincore) and read back, all threads / wall time.\n"
               "sys = stime: daemon (zswapd, /proc/PID/stat) and this process (getrusage, every thread;\n"
               "for the kernel backends that is where zram/zswap work). us/f = (daemon + process sys) / faults.\n"
               "ratio = backend / zram-lz4 at the same layout and thread count.\n");
        printf("%-9s %3s %-12s %10s %6s %10s %9s %9s %7s %6s %9s %6s %5s\n", "layout", "thr", "backend", "faults/s",
               "ratio", "cycled/s", "daemon s", "proc s", "us/f", "ratio", "daemon %", "cpu %", "bad");
        for (unsigned m = 0; m < N_MODES; m++) {
                if (!o->modes[m])
                        continue;
                for (unsigned i = 0; i < o->nthreads; i++)
                        for (unsigned k = 0; k < nb; k++) {
                                const Cell *c = &cells[k][m][i], *z = ref >= 0 ? &cells[ref][m][i] : NULL;
                                char a[7][24], q[2][16];
                                double cyc = c->done && c->elapsed_s > 0 ? c->cycled / c->elapsed_s : NAN;
                                double dpct = c->done && c->elapsed_s > 0 ? 100 * c->daemon_cpu_s / c->elapsed_s
                                                                           : NAN;
                                double cpct = c->done && c->elapsed_s > 0
                                                      ? 100 * ((isfinite(c->daemon_cpu_s) ? c->daemon_cpu_s : 0) +
                                                               c->proc_cpu_s) / c->elapsed_s / ncpu
                                                      : NAN;

                                printf("%-9s %3u %-12s %10s %6s %10s %9s %9s %7s %6s %9s %6s %5" PRIu64 "\n",
                                       mode_names[m], o->threads[i], spec[k].name, F(a[0], "%.0f", cell_faults_s(c)),
                                       R(q[0], cell_faults_s(c), z ? cell_faults_s(z) : NAN),
                                       F(a[1], "%.0f", cyc), F(a[2], "%.2f", c->done ? c->daemon_sys_s : NAN),
                                       F(a[3], "%.2f", c->done ? c->proc_sys_s : NAN),
                                       F(a[4], "%.2f", cell_sys_us_per_fault(c)),
                                       R(q[1], cell_sys_us_per_fault(c), z ? cell_sys_us_per_fault(z) : NAN),
                                       F(a[5], "%.0f", dpct), F(a[6], "%.0f", cpct), c->bad);
                        }
        }
        printf("daemon %% = the daemon's utime+stime as a share of one CPU over the cell; cpu %% = daemon +\n"
               "this process, as a share of all %ld CPUs: the kernel backends are CPU-bound, so a kernel row\n"
               "far below 100 %% means other work on the machine took the CPUs during that cell.\n", ncpu);
}

/* ---- main ---- */

static void help(void) {
        printf("bench-scale [--threads LIST] [--duration S] [--pages N] [--chunk N] [--block N]\n"
               "            [--modes distinct,shared] [--repeat N] [--compressor lz4|zstd] [--zswapd PATH]\n"
               "            [--corpus DIR] [--skip-kernel] [--skip-zswapd]\n\n"
               "Scalability: 2..16 threads (default 2,4,8,16) each page out a chunk\n"
               "of its pages (default 64, in calls of 16), read them back and check them, for\n"
               "--duration s (default 1.5) per cell, in distinct regions and in one shared region\n"
               "(blocks interleaved); faults/s and sys time, zswapd next to kernel zram-lz4 and\n"
               "zswap-lzo in the same run. --pages is per thread (default 1024). The backends take\n"
               "turns at each thread count; --repeat N runs it all N times and sums. Needs root.\n");
}

static int parse_modes(const char *s, Options *o) {
        _cleanup_free_ char *copy = strdup(s);
        char *save = NULL;

        if (!copy)
                return -ENOMEM;
        o->modes[MODE_DISTINCT] = o->modes[MODE_SHARED] = false;
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (strcmp(t, "distinct") == 0)
                        o->modes[MODE_DISTINCT] = true;
                else if (strcmp(t, "shared") == 0)
                        o->modes[MODE_SHARED] = true;
                else
                        return -EINVAL;
        }
        return o->modes[MODE_DISTINCT] || o->modes[MODE_SHARED] ? 0 : -EINVAL;
}

static int parse_one(const char *s, unsigned lo, unsigned hi, unsigned *ret) {
        unsigned n;

        return bench_parse_list(s, lo, hi, ret, 1, &n);
}

static int parse_argv(int argc, char **argv, Options *o) {
        static const struct option opts[] = {
                { "help", no_argument, NULL, 'h' },
                { "threads", required_argument, NULL, 't' },
                { "duration", required_argument, NULL, 'D' },
                { "pages", required_argument, NULL, 'p' },
                { "chunk", required_argument, NULL, 'k' },
                { "block", required_argument, NULL, 'b' },
                { "modes", required_argument, NULL, 'm' },
                { "repeat", required_argument, NULL, 'r' },
                { "compressor", required_argument, NULL, 'C' },
                { "zswapd", required_argument, NULL, 'd' },
                { "corpus", required_argument, NULL, 'c' },
                { "skip-kernel", no_argument, NULL, 'K' },
                { "skip-zswapd", no_argument, NULL, 'Z' },
                {}
        };
        char *end;
        int c;

        while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case 't':
                        if (bench_parse_list(optarg, 1, MAX_THREADS, o->threads, MAX_LIST, &o->nthreads) < 0)
                                return fprintf(stderr, "bad --threads (1..%d, comma-separated): %s\n", MAX_THREADS,
                                               optarg), -EINVAL;
                        break;
                case 'D':
                        o->duration_s = strtod(optarg, &end);
                        if (*end || !(o->duration_s >= 0.1 && o->duration_s <= 3600))
                                return fprintf(stderr, "bad --duration (0.1..3600 s): %s\n", optarg), -EINVAL;
                        break;
                case 'p':
                        if (parse_one(optarg, 1, 1 << 24, &o->pages) < 0)
                                return fprintf(stderr, "bad --pages: %s\n", optarg), -EINVAL;
                        break;
                case 'k':
                        if (parse_one(optarg, 1, 512, &o->chunk) < 0)
                                return fprintf(stderr, "bad --chunk (1..512): %s\n", optarg), -EINVAL;
                        break;
                case 'b':
                        if (parse_one(optarg, 1, 512, &o->block) < 0)
                                return fprintf(stderr, "bad --block (1..512): %s\n", optarg), -EINVAL;
                        break;
                case 'm':
                        if (parse_modes(optarg, o) < 0)
                                return fprintf(stderr, "bad --modes (distinct,shared): %s\n", optarg), -EINVAL;
                        break;
                case 'r':
                        if (parse_one(optarg, 1, 64, &o->repeat) < 0)
                                return fprintf(stderr, "bad --repeat (1..64): %s\n", optarg), -EINVAL;
                        break;
                case 'C':
                        if (strcmp(optarg, "lz4") != 0 && strcmp(optarg, "zstd") != 0)
                                return fprintf(stderr, "bad --compressor: %s\n", optarg), -EINVAL;
                        o->compressor = optarg;
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
        if (o->chunk % o->block || o->pages % o->chunk)
                return fprintf(stderr, "--chunk must be a multiple of --block, --pages of --chunk\n"), -EINVAL;
        return 1;
}

int main(int argc, char **argv) {
        Options o = { .compressor = "lz4", .threads = { 2, 4, 8, 16 }, .nthreads = 4, .duration_s = 1.5,
                      .pages = 1024, .chunk = 64, .block = 16, .modes = { true, true }, .repeat = 1 };
        _cleanup_free_ char *corpus_dir = NULL;
        _cleanup_corpus_ Corpus *corpus = NULL;
        static Cell cells[MAX_BACKENDS][N_MODES][MAX_LIST];
        BackendSpec spec[MAX_BACKENDS];
        unsigned nb = 0;
        int ref = -1, r, failed = 0;
        uint64_t bad = 0;
        struct utsname u;
        char load[64];

        r = parse_argv(argc, argv, &o);
        if (r <= 0)
                return r < 0 ? 2 : 0;
        if (geteuid() != 0 && !o.skip_kernel)
                return fprintf(stderr, "bench-scale: the kernel references need root (or pass --skip-kernel)\n"), 77;
        r = bench_corpus_load(o.corpus, &corpus_dir, &corpus);
        if (r < 0)
                return fprintf(stderr, "cannot load the corpus: %s; try --corpus or $ZSWAP_CORPUS\n", strerror(-r)),
                       1;
        if (!o.skip_kernel) {
                ref = (int)nb;
                spec[nb++] = (BackendSpec){ "zram-lz4", BACKEND_ZRAM, "lz4" };
        }
        if (!o.skip_zswapd)
                spec[nb++] = (BackendSpec){ "zswapd", BACKEND_ZSWAPD, o.compressor };
        if (!o.skip_kernel)
                spec[nb++] = (BackendSpec){ "zswap-lzo", BACKEND_KZSWAP, "lzo" };
        bench_install_signals();
        uname(&u);
        printf("machine: %ld CPUs, Linux %s %s; corpus %s\n", sysconf(_SC_NPROCESSORS_ONLN), u.release, u.machine,
               corpus_dir);
        printf("load average at the start: %s\n", bench_loadavg(load, sizeof(load)));
        printf("each cell %.1f s; %u pages per thread, chunks of %u pages paged out in calls of %u; "
               "zswapd %s with its default options\n",
               o.duration_s, o.pages, o.chunk, o.block, o.compressor);

        for (unsigned rep = 0; rep < o.repeat && !bench_interrupted; rep++)
                for (unsigned i = 0; i < o.nthreads && !bench_interrupted; i++)
                        for (unsigned k = 0; k < nb && !bench_interrupted; k++) {
                                Cell *c[N_MODES] = { &cells[k][MODE_DISTINCT][i], &cells[k][MODE_SHARED][i] };

                                failed |= backend_session(&o, corpus, &spec[k], o.threads[i], c) < 0;
                        }
        for (unsigned k = 0; k < nb; k++)
                for (unsigned m = 0; m < N_MODES; m++)
                        for (unsigned i = 0; i < o.nthreads; i++)
                                bad += cells[k][m][i].bad;
        printf("load average at the end: %s\n", bench_loadavg(load, sizeof(load)));
        print_tables(&o, spec, nb, cells, ref);
        if (bad)
                printf("VERIFICATION FAILED: %" PRIu64 " pages differ from what was written (see above)\n", bad);
        if (bench_interrupted)
                return printf("bench_interrupted by signal %d\n", (int)bench_interrupted), 130;
        return failed || bad ? 1 : 0;
}
