/*
 * bench-redis.c: redis-server under zswap-run, GET/SET throughput and p99
 * latency with 0 %, 50 % and 80 % of its memory compressed, next to the
 * same redis whose memory is paged out to kernel zram-lz4 swap in the same
 * proportion (process_madvise MADV_PAGEOUT).
 *
 * For each backend and fraction: a fresh redis-server (unix socket, no
 * persistence) is filled with --keys keys of --value bytes by
 * redis-benchmark's own SETs (so the GETs that follow hit them), then the
 * fraction of every private anonymous mapping of the server is paged out
 * in 1 MiB chunks spread over all of it (zswapd: `zswapctl pageout PID
 * ADDR LEN`; zram: process_madvise), then redis-benchmark runs GET and SET
 * on random keys of the same key space. Pages come back as they are
 * touched, so the fraction is what is out when the run starts (the table
 * shows what RssAnon said). Ratios: zswapd over zram at the same fraction.
 *
 *   sudo build/bench/bench-redis [--keys N] [--value BYTES] [--requests N]
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "bench-util.h"

#define CHUNK (1ull << 20)

typedef struct Result {
        double out_pct;            /* RssAnon paged out at the start of the run */
        double get_rps, get_p99, set_rps, set_p99;
} Result;

static char dir[64], sock[128], run_path[PATH_MAX], ctl_path[PATH_MAX];
static unsigned keys = 1000000, value = 100, requests = 200000;

static int sh(char *out, size_t cap, const char *fmt, ...) {
        char cmd[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(cmd, sizeof(cmd), fmt, ap);
        va_end(ap);
        FILE *p = popen(cmd, "r");
        if (!p)
                return -errno;
        size_t n = out ? fread(out, 1, cap - 1, p) : 0;
        if (out)
                out[n] = 0;
        else
                while (fgetc(p) != EOF)
                        ;
        int st = pclose(p);
        return st == 0 ? 0 : -EIO;
}

static pid_t redis_start(const char *zswapd_socket) {
        pid_t pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                int null = open("/dev/null", O_WRONLY);
                dup2(null, 1);
                dup2(null, 2);
                char *args[] = { "redis-server", "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly",
                                 "no", "--dir", dir, "--daemonize", "no", NULL };
                if (zswapd_socket) {
                        char *z[32] = { run_path, "--socket", (char *)zswapd_socket, "--", "/usr/bin/redis-server" };
                        memcpy(z + 5, args + 1, sizeof(args) - sizeof(args[0]));
                        execv(run_path, z);
                } else
                        execv("/usr/bin/redis-server", args);
                _exit(127);
        }
        for (int i = 0; i < 500 && access(sock, F_OK) < 0; i++)
                bench_sleep_us(10000);
        bench_sleep_us(200000);
        return access(sock, F_OK) == 0 ? pid : -ETIMEDOUT;
}

static void redis_stop(pid_t pid) {
        sh(NULL, 0, "redis-cli -s %s SHUTDOWN NOSAVE >/dev/null 2>&1", sock);
        for (int i = 0; i < 200 && waitpid(pid, NULL, WNOHANG) == 0; i++)
                bench_sleep_us(10000);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        unlink(sock);
}

/* Every private anonymous writable mapping of pid, as 1 MiB chunks; calls
 * out() for the fraction f of them, spread evenly. */
static long evict(pid_t pid, double f, const char *zswapd_socket) {
        char path[64], line[512];
        long chunks = 0, done = 0;
        snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
        FILE *m = fopen(path, "r");
        int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);

        if (!m || pidfd < 0)
                return -errno;
        while (fgets(line, sizeof(line), m)) {
                unsigned long long s, e, off, inode;
                char perms[8], dev[16], name[64] = "";
                if (sscanf(line, "%llx-%llx %7s %llx %15s %llu %63s", &s, &e, perms, &off, dev, &inode, name) < 6)
                        continue;
                if (perms[1] != 'w' || perms[3] != 'p' || inode || (name[0] && strcmp(name, "[heap]")))
                        continue;
                for (uint64_t a = s; a < e; a += CHUNK, chunks++) {
                        uint64_t len = e - a < CHUNK ? e - a : CHUNK;
                        if ((long)((double)(chunks + 1) * f) == (long)((double)chunks * f))
                                continue;
                        if (zswapd_socket)
                                sh(NULL, 0, "%s --socket %s pageout %d %#llx %llu >/dev/null 2>&1", ctl_path,
                                   zswapd_socket, (int)pid, (unsigned long long)a, (unsigned long long)len);
                        else {
                                struct iovec v = { (void *)(uintptr_t)a, len };
                                for (int i = 0; i < 4; i++)
                                        if (syscall(SYS_process_madvise, pidfd, &v, 1, MADV_PAGEOUT, 0) <= 0)
                                                break;
                        }
                        done++;
                }
        }
        fclose(m);
        close(pidfd);
        return done;
}

/* redis-benchmark --csv: "GET","rps","avg","min","p50","p95","p99","max" */
static int bench(const char *test, double *rps, double *p99) {
        char out[4096];
        int r = sh(out, sizeof(out), "redis-benchmark -s %s -t %s -n %u -r %u -d %u -c 50 --csv 2>/dev/null", sock, test,
                   requests, keys, value);
        if (r < 0)
                return r;
        for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
                char name[32];
                double v[7];
                if (sscanf(l, "\"%31[^\"]\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\"", name, &v[0], &v[1],
                           &v[2], &v[3], &v[4], &v[5], &v[6]) == 8) {
                        *rps = v[0];
                        *p99 = v[5];
                        return 0;
                }
        }
        return -EPROTO;
}

static int measure(Backend *b, double f, Result *res) {
        const char *zs = backend_socket(b);
        pid_t pid = redis_start(zs);
        long before, after;
        int r;

        if (pid < 0)
                return (int)pid;
        /* fill: redis-benchmark's own key names, so the GETs hit */
        r = sh(NULL, 0, "redis-benchmark -s %s -t set -n %u -r %u -d %u -P 32 -q >/dev/null 2>&1", sock, keys * 2, keys,
               value);
        if (r == 0 && zs)
                bench_sleep_us(500000); /* the shim's scanner has registered what redis mapped */
        bench_rss_anon_kib("/proc", pid, &before);
        if (r == 0 && f > 0 && evict(pid, f, zs) < 0)
                r = -EIO;
        bench_rss_anon_kib("/proc", pid, &after);
        res->out_pct = before > 0 ? 100.0 * (double)(before - after) / (double)before : 0;
        if (r == 0)
                r = bench("get", &res->get_rps, &res->get_p99);
        if (r == 0)
                r = bench("set", &res->set_rps, &res->set_p99);
        fprintf(stderr, "  %s %2.0f %%: RssAnon %ld -> %ld KiB (%.1f %% out); GET %.0f/s p99 %.3f ms; SET %.0f/s p99 %.3f ms\n",
                backend_name(b), f * 100, before, after, res->out_pct, res->get_rps, res->get_p99, res->set_rps,
                res->set_p99);
        redis_stop(pid);
        return r;
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "keys", required_argument, NULL, 'k' },
                { "value", required_argument, NULL, 'v' },
                { "requests", required_argument, NULL, 'n' },
                {}
        };
        const double fractions[] = { 0, 0.5, 0.8 };
        Result res[2][3] = { 0 };
        int c;

        while ((c = getopt_long(argc, argv, "k:v:n:", opts, NULL)) >= 0) {
                switch (c) {
                case 'k': keys = (unsigned)atoi(optarg); break;
                case 'v': value = (unsigned)atoi(optarg); break;
                case 'n': requests = (unsigned)atoi(optarg); break;
                default: return 2;
                }
        }
        if (geteuid() != 0) {
                fprintf(stderr, "bench-redis: run as root (it sets up zram swap)\n");
                return 77;
        }
        if (access("/usr/bin/redis-server", X_OK) < 0 || system("redis-benchmark --version >/dev/null 2>&1") != 0) {
                fprintf(stderr, "bench-redis: needs redis-server and redis-tools (scripts/setup-deps.sh)\n");
                return 77;
        }
        ssize_t n = readlink("/proc/self/exe", run_path, sizeof(run_path) - 32);
        if (n <= 0)
                return 1;
        run_path[n] = 0;
        strcpy(strrchr(run_path, '/'), "/../client/preload/zswap-run");
        snprintf(ctl_path, sizeof(ctl_path), "%s", run_path);
        strcpy(strrchr(ctl_path, '/'), "/../tools/zswapctl");
        snprintf(dir, sizeof(dir), "/tmp/bench-redis-XXXXXX");
        if (!mkdtemp(dir))
                return 1;
        snprintf(sock, sizeof(sock), "%s/redis.sock", dir);
        signal(SIGPIPE, SIG_IGN);

        const BackendKind kinds[] = { BACKEND_ZSWAPD, BACKEND_ZRAM };
        for (int k = 0; k < 2; k++) {
                BackendConfig cfg = { .kind = kinds[k], .size_bytes = (uint64_t)keys * (value + 200) * 2 };
                Backend *b = NULL;
                int r = backend_setup(&cfg, &b);
                if (r < 0) {
                        fprintf(stderr, "bench-redis: set-up of backend %d failed: %s\n", k, strerror(-r));
                        return 1;
                }
                fprintf(stderr, "%s\n", backend_describe(b));
                for (int i = 0; i < 3 && r == 0; i++)
                        r = measure(b, fractions[i], &res[k][i]);
                backend_teardown(b);
                if (r < 0) {
                        fprintf(stderr, "bench-redis: %s: %s\n", k ? "zram" : "zswapd", strerror(-r));
                        return 1;
                }
        }
        rmdir(dir);

        printf("\nredis-server %u keys x %u bytes; redis-benchmark -c 50 -n %u random keys; ratio = zswapd / zram\n",
               keys, value, requests);
        printf("%-8s %10s %10s %12s %12s %12s %12s %8s %8s\n", "out", "zswapd %", "zram %", "GET/s zswapd",
               "GET/s zram", "GET p99 zs", "GET p99 zr", "GET rps", "GET p99");
        for (int i = 0; i < 3; i++)
                printf("%-8.0f %10.1f %10.1f %12.0f %12.0f %12.3f %12.3f %8.2f %8.2f\n", fractions[i] * 100,
                       res[0][i].out_pct, res[1][i].out_pct, res[0][i].get_rps, res[1][i].get_rps, res[0][i].get_p99,
                       res[1][i].get_p99, res[0][i].get_rps / res[1][i].get_rps, res[0][i].get_p99 / res[1][i].get_p99);
        printf("%-8s %10s %10s %12s %12s %12s %12s %8s %8s\n", "out", "", "", "SET/s zswapd", "SET/s zram",
               "SET p99 zs", "SET p99 zr", "SET rps", "SET p99");
        for (int i = 0; i < 3; i++)
                printf("%-8.0f %10s %10s %12.0f %12.0f %12.3f %12.3f %8.2f %8.2f\n", fractions[i] * 100, "", "",
                       res[0][i].set_rps, res[1][i].set_rps, res[0][i].set_p99, res[1][i].set_p99,
                       res[0][i].set_rps / res[1][i].set_rps, res[0][i].set_p99 / res[1][i].set_p99);
        return 0;
}
