/*
 * bench-policy: the daemon's idle-age and pressure policies over time, and
 * what re-evicting clean pages costs (issue 5; docs/reclaim.md).
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
 *   bench-policy pressure [--target PCT] [--seconds N] [--client-gib G]
 *       real memory pressure: a zswapd client holding G GiB of heap data,
 *       and a memory hog, not a client, that needs more than the rest of
 *       RAM and swaps to a zram device of the bench's own. The table has,
 *       every 2 s: PSI memory some avg10 against the target, MemAvailable,
 *       the controller's hold target and the client's resident memory. The
 *       first third runs with the controller off (pressure_target 0): the
 *       pressure the hog makes on its own.
 *
 * Needs root. Every page the client reads back is checked against the
 * corpus; a mismatch fails the run.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "bench-util.h"
#include "corpus.h"
#include "macro.h"
#include "zram.h"
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
        snprintf(cmd, sizeof(cmd), "%s/../../client/zswapctl --socket %s %s >/dev/null", exe, backend_socket(b), args);
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
        snprintf(cmd, sizeof(cmd), "%s/../../client/zswapctl --socket %s get %s", exe, backend_socket(b), key);
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

/* ---- pressure ---- */

static double psi_some(void) {
        char buf[256];
        double v = -1;
        FILE *f = fopen("/proc/pressure/memory", "re");
        if (f && fgets(buf, sizeof(buf), f))
                sscanf(buf, "some avg10=%lf", &v);
        if (f)
                fclose(f);
        return v;
}

static uint64_t mem_available(void) {
        char line[256];
        unsigned long long kb = 0;
        FILE *f = fopen("/proc/meminfo", "re");
        while (f && fgets(line, sizeof(line), f))
                if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
                        break;
        if (f)
                fclose(f);
        return kb << 10;
}

/* The hog: not a zswapd client. It writes its pages once (half-compressible
 * content), then keeps touching random pages of them until killed. */
static _noreturn_ void hog_main(size_t bytes) {
        uint8_t *h = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        uint64_t x = 88172645463325252ull;
        size_t pages = bytes / ZSWAP_PAGE_SIZE;
        if (h == MAP_FAILED)
                _exit(1);
        for (size_t p = 0; p < pages; p++)
                memcpy(h + p * ZSWAP_PAGE_SIZE, corpus->data + corpus_index(p) * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE);
        for (;;) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((volatile uint8_t *)h)[(x % pages) * ZSWAP_PAGE_SIZE + 64]++;
        }
}

static void part_pressure(double target, unsigned seconds, unsigned client_gib) {
        char targ[64];
        uint64_t avail = mem_available();
        size_t cp = (size_t)client_gib << 18;
        /* the hog wants everything the client leaves, and 3 GiB more */
        size_t hog = avail > ((uint64_t)client_gib << 30) ? avail - ((uint64_t)client_gib << 30) + (3ull << 30) : 0;
        Zram *z = NULL;
        int r;

        if (hog == 0)
                die("not enough memory for the experiment", ENOMEM);
        r = zram_new("/sys", "/proc", "lz4", hog, &z);
        if (r < 0)
                die("zram swap for the hog", r);
        snprintf(targ, sizeof(targ), "pressure_target=%g", target);
        daemon_args[0] = "--set";
        daemon_args[1] = "pressure_target=0";
        daemon_args[2] = "--set";
        daemon_args[3] = "pressure_period=2s";
        daemon_args[4] = "--set";
        daemon_args[5] = "pressure_step=2";
        Backend *b = start_daemon();
        struct zswap_client *c = connect_client(b);
        uint8_t *buf = corpus_region(cp);
        r = zswap_register(c, buf, cp * ZSWAP_PAGE_SIZE);
        if (r < 0)
                die("register", r);
        pid_t hp = fork();
        if (hp == 0)
                hog_main(hog);
        printf("\n### Pressure control: target PSI some avg10 %.1f %%, client %u GiB, hog %.1f GiB, zram swap for "
               "the hog; controller off for the first third\n\n", target, client_gib, (double)hog / (1 << 30));
        printf("| t (s) | controller | PSI some avg10 | MemAvailable | hold target | client resident | pool |\n");
        printf("|---|---|---|---|---|---|---|\n");
        double t0 = now_s();
        bool on = false;
        for (unsigned s = 2; s <= seconds; s += 2) {
                bench_sleep_us(2000000);
                if (!on && now_s() - t0 >= seconds / 3.0) {
                        snprintf(targ, sizeof(targ), "set pressure_target %g", target);
                        ctl(b, targ);
                        on = true;
                }
                char st[256], *h = NULL;
                ctl_get(b, "status", st, sizeof(st));
                h = strstr(st, "hold_target_pages=");
                struct zswap_stats zs = stats(c);
                struct zswap_stats g;
                zswap_get_stats(c, ZSWAP_STATS_GLOBAL, &g);
                printf("| %u | %s | %.2f %% | %.0f MiB | %.0f MiB | %.0f MiB | %.0f MiB |\n", s, on ? "on" : "off",
                       psi_some(), (double)mem_available() / (1 << 20),
                       h ? (double)strtoull(h + 18, NULL, 10) / 256 : 0, (double)zs.resident_bytes / (1 << 20),
                       (double)g.pool_bytes / (1 << 20));
                fflush(stdout);
        }
        kill(hp, SIGKILL);
        waitpid(hp, NULL, 0);
        verify(buf, cp, "client after pressure");
        zswap_disconnect(c);
        backend_teardown(b);
        zram_free(z);
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "size", required_argument, NULL, 's' },      { "idle-age", required_argument, NULL, 'i' },
                { "seconds", required_argument, NULL, 't' },   { "target", required_argument, NULL, 'p' },
                { "client-gib", required_argument, NULL, 'g' }, {}
        };
        size_t mib = 512;
        unsigned idle_age = 10, seconds = 0, gib = 6;
        double target = 2;
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
        if (!strcmp(part, "pressure") || !strcmp(part, "all"))
                part_pressure(target, seconds ? seconds : 120, gib);
        return 0;
}
