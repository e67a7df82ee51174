/*
 * bench-policy: the daemon's idle-age and pressure policies over time, and
 * what re-evicting clean pages costs (docs/reclaim.md).
 *
 *   bench-policy clean [--size MiB]
 *       page a region out, read it all back (every page keeps its copy),
 *       page it out again, then write it all and page it out a third time;
 *       per pass: pages, copies reused, compressions, wall time and the
 *       daemon's CPU, as ratios to the first pass
 *   bench-policy idle [--idle-age S] [--seconds N]
 *       three regions: one the program stops using, one it keeps writing,
 *       one it keeps reading; a table per second of how much of each is
 *       resident, and the refaults (the bound: a page only read costs one
 *       refault per idle_age)
 *   bench-policy wake [--size MiB] [--idle-age S]
 *       a program reads half its memory (in a random order) every 100 ms
 *       and never the other half; idle_age takes the cold half out, the
 *       program sleeps until it took the hot half too, then wakes and
 *       reads its hot half once: with refill off and on, the time of that
 *       pass, the pages its reads brought back, the pages refilled, and
 *       what is resident of each half a second later (refill's memory
 *       cost: cold pages it brought back); then the same memory on
 *       zram-lz4 swap, all paged out, and the same pass (every page a
 *       fault). At most 256 MiB, idle_age 5 s.
 *   bench-policy pressure [--target PCT] [--seconds N] [--client-gib G]
 *       real memory pressure, no swap: a zswapd client holding G GiB of
 *       heap pages and a reader (not a client) looping over a file a bit
 *       larger than the page cache left to it, so that every read refaults
 *       a page evicted a moment ago, which PSI counts as memory stall. An
 *       mlocked ballast leaves ~10 GiB to the two. The table has, every
 *       2 s: PSI memory some avg10 against the target, MemAvailable, the
 *       controller's hold target, the client's resident memory and the
 *       reader's throughput. The first third runs with the controller off:
 *       the pressure the reader suffers on its own.
 *
 * Needs root. Every page the client reads back is checked against the
 * corpus; a mismatch fails the run.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "bench-util.h"
#include "corpus.h"
#include "macro.h"
#include "util.h"
#include "zswap.h"

static Corpus *corpus;
static const char *daemon_args[16];

static double now_s(void) {
        return (double)bench_now_ns() / 1e9;
}

static void die(const char *what, int r) {
        fprintf(stderr, "bench-policy: %s: %s\n", what, strerror(r < 0 ? -r : r));
        exit(1);
}

/* zswapctl next to the daemon, against b's socket */
static int ctl(Backend *b, const char *args) {
        char exe[4096], cmd[8192];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n <= 0)
                return -1;
        exe[n] = 0;
        *strrchr(exe, '/') = 0;
        snprintf(cmd, sizeof(cmd), "%s/../client/tools/zswapctl --socket %s %s >/dev/null", exe, backend_socket(b), args);
        return system(cmd);
}

static void ctl_get(Backend *b, const char *key, char *out, size_t len) {
        char exe[4096], cmd[8192];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        out[0] = 0;
        if (n <= 0)
                return;
        exe[n] = 0;
        *strrchr(exe, '/') = 0;
        snprintf(cmd, sizeof(cmd), "%s/../client/tools/zswapctl --socket %s get %s", exe, backend_socket(b), key);
        FILE *p = popen(cmd, "r");
        if (!p)
                return;
        if (!fgets(out, (int)len, p))
                out[0] = 0;
        pclose(p);
        out[strcspn(out, "\n")] = 0;
}

static Backend *start_daemon(void) {
        BackendConfig cfg = { .kind = BACKEND_ZSWAPD, .zswapd_args = daemon_args };
        Backend *b;
        int r = backend_setup(&cfg, &b);
        if (r < 0)
                die("starting zswapd", r);
        return b;
}

static struct zswap_client *connect_client(Backend *b) {
        struct zswap_client *c;
        int r = zswap_connect(backend_socket(b), &c);
        if (r < 0)
                die("connecting", r);
        return c;
}

static uint8_t *corpus_region(size_t pages) {
        uint8_t *buf = mmap(NULL, pages * ZSWAP_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf == MAP_FAILED)
                die("mmap", -errno);
        madvise(buf, pages * ZSWAP_PAGE_SIZE, MADV_NOHUGEPAGE);
        corpus_fill(corpus, buf, pages);
        return buf;
}

static void verify(const uint8_t *buf, size_t pages, const char *what) {
        size_t first = 0, bad = corpus_verify(corpus, buf, pages, &first);
        if (bad) {
                fprintf(stderr, "bench-policy: %s: %zu bad pages, first at %zu\n", what, bad, first);
                exit(1);
        }
}

static struct zswap_stats stats(struct zswap_client *c) {
        struct zswap_stats s;
        int r = zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s);
        if (r < 0)
                die("stats", r);
        return s;
}

static size_t present(const void *buf, size_t pages) {
        static uint64_t pm[1 << 16];
        size_t n = 0;
        FILE *f = fopen("/proc/self/pagemap", "re");
        if (!f)
                return 0;
        for (size_t i = 0; i < pages;) {
                size_t k = MIN(pages - i, ELEMENTSOF(pm));
                if (pread(fileno(f), pm, k * 8, (off_t)(((uintptr_t)buf >> 12) + i) * 8) != (ssize_t)(k * 8))
                        break;
                for (size_t j = 0; j < k; j++)
                        n += pm[j] >> 63;
                i += k;
        }
        fclose(f);
        return n;
}

/* ---- clean ---- */

static void part_clean(size_t mib) {
        size_t pages = mib << 8;
        daemon_args[0] = "--set";
        daemon_args[1] = "write_scan=200ms";
        Backend *b = start_daemon();
        struct zswap_client *c = connect_client(b);
        uint8_t *buf = corpus_region(pages);
        int r = zswap_register(c, buf, pages * ZSWAP_PAGE_SIZE);
        if (r < 0)
                die("register", r);
        struct {
                const char *what;
                double wall, cpu;
                uint64_t evicted, reused;
        } pass[3];

        for (int i = 0; i < 3; i++) {
                if (i == 1)
                        verify(buf, pages, "read back"); /* every page back by a read: each keeps its copy */
                if (i == 2) {
                        /* every page written: no copy stays */
                        for (size_t p = 0; p < pages; p++)
                                ((volatile uint8_t *)buf)[p * ZSWAP_PAGE_SIZE] = buf[p * ZSWAP_PAGE_SIZE];
                        bench_sleep_us(600000);
                }
                struct zswap_stats s0 = stats(c);
                double cpu0 = backend_daemon_cpu_s(b), t0 = now_s();
                r = zswap_pageout(c, buf, pages * ZSWAP_PAGE_SIZE);
                if (r < 0)
                        die("pageout", r);
                pass[i].wall = now_s() - t0;
                pass[i].cpu = backend_daemon_cpu_s(b) - cpu0;
                struct zswap_stats s1 = stats(c);
                pass[i].evicted = s1.evictions - s0.evictions;
                pass[i].reused = s1.clean_reevictions - s0.clean_reevictions;
                pass[i].what = i == 0 ? "first pageout" : i == 1 ? "again after reads" : "again after writes";
                if (i < 2)
                        verify(buf, pages, "after pageout");
        }
        verify(buf, pages, "at the end");
        printf("\n### Re-evicting clean pages (%zu MiB of heap pages, lz4)\n\n", mib);
        printf("| pass | pages evicted | copies reused | compressions | wall | daemon CPU | CPU vs first |\n");
        printf("|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < 3; i++)
                printf("| %s | %llu | %llu | %llu | %.3f s | %.3f s | %.2fx |\n", pass[i].what,
                       (unsigned long long)pass[i].evicted, (unsigned long long)pass[i].reused,
                       (unsigned long long)(pass[i].evicted - pass[i].reused), pass[i].wall, pass[i].cpu,
                       pass[0].cpu > 0 ? pass[i].cpu / pass[0].cpu : 0);
        zswap_disconnect(c);
        backend_teardown(b);
}

/* ---- idle ---- */

typedef struct Toucher {
        uint8_t *buf;
        size_t pages;
        bool write;
        atomic_bool stop;
        atomic_size_t bad;
} Toucher;

static void *toucher_main(void *arg) {
        Toucher *t = arg;
        while (!atomic_load(&t->stop)) {
                for (size_t p = 0; p < t->pages; p++) {
                        uint8_t *pg = t->buf + p * ZSWAP_PAGE_SIZE;
                        if (t->write)
                                ((volatile uint8_t *)pg)[0] = pg[0];
                        else if (corpus_checksum(pg) != corpus->sums[corpus_index(p)])
                                atomic_fetch_add(&t->bad, 1);
                }
                bench_sleep_us(100000);
        }
        return NULL;
}

static void part_idle(unsigned idle_age, unsigned seconds) {
        char arg[64];
        size_t ip = 64 << 8, wp = 16 << 8, rp = 16 << 8;
        snprintf(arg, sizeof(arg), "idle_age=%us", idle_age);
        daemon_args[0] = "--set";
        daemon_args[1] = arg;
        Backend *b = start_daemon();
        struct zswap_client *c = connect_client(b);
        uint8_t *idle = corpus_region(ip), *ws = corpus_region(wp), *rs = corpus_region(rp);
        Toucher tw = { .buf = ws, .pages = wp, .write = true }, tr = { .buf = rs, .pages = rp };
        pthread_t a, d;
        double t0 = now_s(), done = -1;

        zswap_register(c, idle, ip * ZSWAP_PAGE_SIZE);
        zswap_register(c, ws, wp * ZSWAP_PAGE_SIZE);
        zswap_register(c, rs, rp * ZSWAP_PAGE_SIZE);
        pthread_create(&a, NULL, toucher_main, &tw);
        pthread_create(&d, NULL, toucher_main, &tr);
        printf("\n### Idle age %u s: an idle 64 MiB region, 16 MiB written and 16 MiB read every 100 ms\n\n", idle_age);
        printf("| t (s) | idle region resident | written region resident | read region resident | refaults (all) |\n");
        printf("|---|---|---|---|---|\n");
        for (unsigned s = 1; s <= seconds; s++) {
                bench_sleep_us(1000000);
                size_t pi = present(idle, ip);
                if (done < 0 && pi * 20 <= ip)
                        done = now_s() - t0;
                printf("| %u | %.0f %% | %.0f %% | %.0f %% | %llu |\n", s, 100.0 * (double)pi / (double)ip,
                       100.0 * (double)present(ws, wp) / (double)wp, 100.0 * (double)present(rs, rp) / (double)rp,
                       (unsigned long long)stats(c).refaults);
                fflush(stdout);
        }
        atomic_store(&tw.stop, true);
        atomic_store(&tr.stop, true);
        pthread_join(a, NULL);
        pthread_join(d, NULL);
        printf("\nidle region 95 %% compressed after %.1f s (idle_age %u s); bad pages read: %zu\n", done, idle_age,
               atomic_load(&tr.bad));
        verify(idle, ip, "idle region");
        verify(rs, rp, "read region");
        verify(ws, wp, "written region");
        if (atomic_load(&tr.bad))
                exit(1);
        zswap_disconnect(c);
        backend_teardown(b);
}

/* ---- wake ---- */

typedef struct WakeRun {
        double wake_s;           /* the woken program's pass over its hot half */
        uint64_t back;           /* pages its pass brought back itself (faults, fault-around) */
        uint64_t refilled;       /* pages the daemon brought back ahead */
        size_t hot_in, cold_in;  /* pages of each half resident a second after the pass */
        double cpu_s;            /* the daemon's CPU over the pass and that second */
} WakeRun;

/* Read the pages of buf listed in order, each checked against the corpus. */
static void read_pages(const uint8_t *buf, const uint32_t *order, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (corpus_checksum(buf + (size_t)order[i] * ZSWAP_PAGE_SIZE) != corpus->sums[corpus_index(order[i])]) {
                        fprintf(stderr, "bench-policy: wake: page %u is bad\n", order[i]);
                        exit(1);
                }
}

/* The pages 0..n-1 in one fixed random order. */
static void wake_order(uint32_t *order, size_t n) {
        uint64_t x = 88172645463325252ull;
        for (size_t i = 0; i < n; i++)
                order[i] = (uint32_t)i;
        for (size_t i = n - 1; i > 0; i--) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                size_t j = x % (i + 1);
                uint32_t t = order[i];
                order[i] = order[j];
                order[j] = t;
        }
}

static uint64_t ctl_u64(Backend *b, const char *field) {
        char exe[4096], cmd[8192], out[64] = "";
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n <= 0)
                return 0;
        exe[n] = 0;
        *strrchr(exe, '/') = 0;
        snprintf(cmd, sizeof(cmd), "%s/../client/tools/zswapctl --socket %s status -n -o %s", exe, backend_socket(b),
                 field);
        FILE *p = popen(cmd, "r");
        if (p && !fgets(out, sizeof(out), p))
                out[0] = 0;
        if (p)
                pclose(p);
        return strtoull(out, NULL, 10);
}

/*
 * A program reads the first half of its memory (hot, in a random order)
 * every 100 ms, never the second half; idle_age takes the cold half out,
 * then the program sleeps until idle_age has taken the hot half too, and
 * wakes to read its hot half once more.
 */
static void wake_run(size_t mib, unsigned idle_age, bool refill, WakeRun *out) {
        size_t pages = mib << 8, hot = pages / 2;
        char age[64];
        snprintf(age, sizeof(age), "idle_age=%us", idle_age);
        const char *args[] = { "--set", age, "--set", refill ? "refill=yes" : "refill=no", "--set", "refill_quiet=2s", NULL };
        memcpy(daemon_args, args, sizeof(args));
        Backend *b = start_daemon();
        struct zswap_client *c = connect_client(b);
        uint8_t *buf = corpus_region(pages);
        uint32_t *order = malloc(hot * sizeof(*order));
        if (!order)
                die("malloc", -ENOMEM);
        wake_order(order, hot);
        int r = zswap_register(c, buf, pages * ZSWAP_PAGE_SIZE);
        if (r < 0)
                die("register", r);
        double t0 = now_s();
        while (present(buf + hot * ZSWAP_PAGE_SIZE, pages - hot) * 20 > pages - hot) {
                read_pages(buf, order, hot);
                bench_sleep_us(100000);
                if (now_s() - t0 > 20.0 * idle_age)
                        die("the cold half never went out", -ETIMEDOUT);
        }
        while (present(buf, pages) * 20 > pages) {
                bench_sleep_us(200000);
                if (now_s() - t0 > 40.0 * idle_age)
                        die("the hot half never went out", -ETIMEDOUT);
        }
        bench_sleep_us(2500000); /* refill_quiet, and then some */
        struct zswap_stats s0 = stats(c);
        uint64_t f0 = ctl_u64(b, "refilled");
        double cpu0 = backend_daemon_cpu_s(b);
        t0 = now_s();
        read_pages(buf, order, hot);
        out->wake_s = now_s() - t0;
        struct zswap_stats s1 = stats(c);
        out->back = s1.faults - s0.faults + s1.prefetches - s0.prefetches;
        bench_sleep_us(1000000);
        out->refilled = ctl_u64(b, "refilled") - f0;
        out->cpu_s = backend_daemon_cpu_s(b) - cpu0;
        out->hot_in = present(buf, hot);
        out->cold_in = present(buf + hot * ZSWAP_PAGE_SIZE, pages - hot);
        verify(buf, pages, "at the end");
        free(order);
        zswap_disconnect(c);
        backend_teardown(b);
        munmap(buf, pages * ZSWAP_PAGE_SIZE);
}

/*
 * The kernel's side: the same memory on zram-lz4 swap, all of it paged
 * out (process_madvise; the kernel has no idle age), then the hot half
 * read in the same order: every page a fault (ru_majflt).
 */
static void wake_zram(size_t mib, WakeRun *out) {
        size_t pages = mib << 8, hot = pages / 2;
        BackendConfig cfg = { .kind = BACKEND_ZRAM, .compressor = "lz4", .size_bytes = pages * ZSWAP_PAGE_SIZE };
        Backend *b;
        BackendClient *c;
        int r = backend_setup(&cfg, &b);
        if (r < 0)
                die("zram", r);
        if ((r = backend_client_new(b, &c)) < 0)
                die("zram client", r);
        uint8_t *buf = corpus_region(pages);
        uint32_t *order = malloc(hot * sizeof(*order));
        if (!order)
                die("malloc", -ENOMEM);
        wake_order(order, hot);
        if ((r = backend_attach(c, buf, pages * ZSWAP_PAGE_SIZE)) < 0 ||
            (r = backend_pageout(c, buf, pages * ZSWAP_PAGE_SIZE)) < 0)
                die("zram pageout", r);
        struct rusage ru0, ru1;
        getrusage(RUSAGE_SELF, &ru0);
        double t0 = now_s();
        read_pages(buf, order, hot);
        out->wake_s = now_s() - t0;
        getrusage(RUSAGE_SELF, &ru1);
        *out = (WakeRun){ .wake_s = out->wake_s, .back = (uint64_t)(ru1.ru_majflt - ru0.ru_majflt) };
        out->hot_in = present(buf, hot);
        out->cold_in = present(buf + hot * ZSWAP_PAGE_SIZE, pages - hot);
        verify(buf, pages, "zram, at the end");
        free(order);
        backend_detach(c, buf, pages * ZSWAP_PAGE_SIZE);
        backend_client_free(c);
        munmap(buf, pages * ZSWAP_PAGE_SIZE);
        backend_teardown(b);
}

static void part_wake(size_t mib, unsigned idle_age) {
        WakeRun off, on, zram;
        wake_run(mib, idle_age, false, &off);
        wake_run(mib, idle_age, true, &on);
        wake_zram(mib, &zram);
        printf("\n### Waking after idle_age took everything (%zu MiB, hot half read in a random order, idle_age %u s)\n\n",
               mib, idle_age);
        printf("| store | wake pass | pages its reads brought back | pages refilled | hot half resident after | cold half "
               "resident after | daemon CPU |\n");
        printf("|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < 3; i++) {
                WakeRun *w = i == 0 ? &off : i == 1 ? &on : &zram;
                printf("| %s | %.3f s | %llu | %llu | %zu | %zu | %.3f s |\n",
                       i == 0 ? "zswapd, refill=no" : i == 1 ? "zswapd, refill=yes" : "zram-lz4 (all paged out)",
                       w->wake_s, (unsigned long long)w->back, (unsigned long long)w->refilled, w->hot_in, w->cold_in,
                       w->cpu_s);
        }
        printf("\nwake pass with refill / without: %.2fx; / zram-lz4's: %.2fx (without: %.2fx); faults avoided: %.0f %%\n",
               off.wake_s > 0 ? on.wake_s / off.wake_s : 0, zram.wake_s > 0 ? on.wake_s / zram.wake_s : 0,
               zram.wake_s > 0 ? off.wake_s / zram.wake_s : 0,
               off.back ? 100.0 * (1.0 - (double)on.back / (double)off.back) : 0);
}

/* ---- pressure ---- */

/* The ballast: memory nobody can reclaim (mlocked), so that the
 * experiment needs gigabytes, not the machine's whole RAM. */
static pid_t ballast_start(uint64_t bytes) {
        int pfd[2];
        char ok;
        if (pipe(pfd) < 0)
                die("pipe", -errno);
        pid_t p = fork();
        if (p == 0) {
                void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
                if (m == MAP_FAILED || mlock(m, bytes) < 0)
                        _exit(1);
                (void)!write(pfd[1], "k", 1);
                pause();
                _exit(0);
        }
        close(pfd[1]);
        if (read(pfd[0], &ok, 1) != 1)
                die("ballast (mlock)", EAGAIN);
        close(pfd[0]);
        return p;
}

/* The victim of the pressure: not a zswapd client. It reads a file larger
 * than the page cache it can get, again and again (every page a refault of
 * a recently evicted one, which PSI counts), and reports its throughput. */
static _Atomic uint64_t *reader_bytes;

static _noreturn_ void reader_main(const char *path) {
        static char buf[1 << 20];
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                _exit(1);
        for (;;) {
                ssize_t n = read(fd, buf, sizeof(buf));
                if (n <= 0) {
                        lseek(fd, 0, SEEK_SET);
                        continue;
                }
                atomic_fetch_add_explicit(reader_bytes, (uint64_t)n, memory_order_relaxed);
        }
}

static void write_file(const char *path, uint64_t bytes) {
        static char buf[1 << 20];
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                die(path, -errno);
        for (size_t i = 0; i < sizeof(buf); i += ZSWAP_PAGE_SIZE)
                memcpy(buf + i, corpus->data + corpus_index(i / ZSWAP_PAGE_SIZE) * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE);
        for (uint64_t w = 0; w < bytes; w += sizeof(buf))
                if (write(fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
                        die("writing the reader's file", -errno);
        fsync(fd);
        close(fd);
}

/*
 * Sizes, with A = MemAvailable after the ballast: the client holds C, the
 * file is F, with A - C < F (the file does not fit in the cache left: the
 * reader thrashes and PSI rises) and A - C / 2 > F (it fits once the
 * client is compressed, at about 2x).
 */
static void part_pressure(double target, unsigned seconds, unsigned client_gib) {
        const char *file = "/var/tmp/zswap-bench-pressure.dat";
        uint64_t c_bytes = (uint64_t)client_gib << 30, avail0 = proc_mem_available("/");
        uint64_t ballast = avail0 > (10ull << 30) + c_bytes ? avail0 - (10ull << 30) : 0;
        size_t cp = c_bytes / ZSWAP_PAGE_SIZE;
        char cmd[128];
        int r;

        write_file(file, 1); /* fail early if /var/tmp is not writable */
        pid_t bp = ballast ? ballast_start(ballast) : 0;
        uint64_t avail = proc_mem_available("/");
        uint64_t f_bytes = avail - c_bytes + (avail - c_bytes) / 4; /* 25 % more than the cache left */
        if (avail - c_bytes / 2 <= f_bytes)
                f_bytes = avail - c_bytes / 2 - (256ull << 20);
        write_file(file, f_bytes);
        /* the reader is forked before the client's memory exists: a child
         * would share it copy-on-write and be a client too */
        reader_bytes = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        pid_t rp = fork();
        if (rp == 0)
                reader_main(file);
        daemon_args[0] = "--set";
        daemon_args[1] = "pressure_target=0";
        daemon_args[2] = "--set";
        daemon_args[3] = "pressure_period=2s";
        daemon_args[4] = "--set";
        daemon_args[5] = "pressure_step=5";
        Backend *b = start_daemon();
        struct zswap_client *c = connect_client(b);
        uint8_t *buf = corpus_region(cp);
        r = zswap_register(c, buf, cp * ZSWAP_PAGE_SIZE);
        if (r < 0)
                die("register", r);
        printf("\n### Pressure control: target PSI memory some avg10 %.1f %%; a client holding %u GiB of heap "
               "pages, a reader looping over a %.1f GiB file, %.1f GiB of RAM left to both (ballast %.1f GiB "
               "mlocked); the controller is off for the first third\n\n",
               target, client_gib, (double)f_bytes / (1 << 30), (double)avail / (1 << 30),
               (double)ballast / (1 << 30));
        printf("| t (s) | controller | PSI some, last period | PSI some avg10 | target | MemAvailable | hold target | "
               "client resident | held | pool | reader MB/s |\n");
        printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
        double t0 = now_s(), tl = t0;
        uint64_t rb = 0;
        bool on = false;
        for (unsigned s = 2; s <= seconds; s += 2) {
                bench_sleep_us(2000000);
                if (!on && now_s() - t0 >= seconds / 3.0) {
                        snprintf(cmd, sizeof(cmd), "set pressure_target %g", target);
                        ctl(b, cmd);
                        on = true;
                }
                char st[256], *h, *ps;
                ctl_get(b, "status", st, sizeof(st));
                h = strstr(st, "hold_target_pages=");
                ps = strstr(st, "psi_some=");
                struct zswap_stats zs = stats(c), g;
                zswap_get_stats(c, ZSWAP_STATS_GLOBAL, &g);
                uint64_t nb = atomic_load(reader_bytes);
                double now = now_s();
                printf("| %u | %s | %.2f %% | %.2f %% | %.1f %% | %.0f MiB | %.0f MiB | %.0f MiB | %.0f MiB | %.0f MiB | "
                       "%.0f |\n", s, on ? "on" : "off", ps ? strtod(ps + 9, NULL) : -1.0, proc_psi_memory_some("/"),
                       on ? target : 0.0,
                       (double)proc_mem_available("/") / (1 << 20),
                       h ? (double)strtoull(h + 18, NULL, 10) / 256 : 0, (double)zs.resident_bytes / (1 << 20),
                       (double)g.original_bytes / (1 << 20), (double)g.pool_bytes / (1 << 20),
                       (double)(nb - rb) / (now - tl) / 1e6);
                fflush(stdout);
                rb = nb;
                tl = now;
        }
        kill(rp, SIGKILL);
        waitpid(rp, NULL, 0);
        if (bp) {
                kill(bp, SIGKILL);
                waitpid(bp, NULL, 0);
        }
        unlink(file);
        verify(buf, cp, "client after pressure");
        zswap_disconnect(c);
        backend_teardown(b);
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "size", required_argument, NULL, 's' },      { "idle-age", required_argument, NULL, 'i' },
                { "seconds", required_argument, NULL, 't' },   { "target", required_argument, NULL, 'p' },
                { "client-gib", required_argument, NULL, 'g' }, {}
        };
        size_t mib = 512;
        unsigned idle_age = 10, seconds = 0, gib = 4;
        double target = 5;
        _cleanup_free_ char *corpus_dir = NULL;
        int c, r;

        while ((c = getopt_long(argc, argv, "s:i:t:p:g:", opts, NULL)) >= 0) {
                switch (c) {
                case 's':
                        mib = strtoul(optarg, NULL, 10);
                        break;
                case 'i':
                        idle_age = (unsigned)strtoul(optarg, NULL, 10);
                        break;
                case 't':
                        seconds = (unsigned)strtoul(optarg, NULL, 10);
                        break;
                case 'p':
                        target = strtod(optarg, NULL);
                        break;
                case 'g':
                        gib = (unsigned)strtoul(optarg, NULL, 10);
                        break;
                default:
                        return 2;
                }
        }
        const char *part = optind < argc ? argv[optind] : "all";
        if ((r = bench_corpus_load(NULL, &corpus_dir, &corpus)) < 0)
                die("corpus", r);
        printf("bench-policy %s, git %s\n", part, getenv("GIT_REV") ? getenv("GIT_REV") : "");
        if (!strcmp(part, "clean") || !strcmp(part, "all"))
                part_clean(mib);
        if (!strcmp(part, "idle") || !strcmp(part, "all"))
                part_idle(idle_age, seconds ? seconds : idle_age * 3);
        if (!strcmp(part, "wake") || !strcmp(part, "all"))
                part_wake(mib > 256 ? 256 : mib, idle_age > 5 ? 5 : idle_age);
        if (!strcmp(part, "pressure") || !strcmp(part, "all"))
                part_pressure(target, seconds ? seconds : 120, gib);
        return 0;
}
