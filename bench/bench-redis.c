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
 * --equal: both stores get the same memory instead of the same fraction
 * out. Redis is filled by the bench's own client (every key of the key
 * space, each value a sentence of words drawn from the key, so that it
 * compresses about as text does and can be checked); then, for each
 * fraction of --out (default 50,80):
 *
 *   zram    redis runs in a memory cgroup of its own (kswap_cgroup_*) with
 *           zram-lz4 as its swap; the cgroup's limit is moved to its usage
 *           less that fraction of redis's RssAnon, and the kernel reclaims
 *           to stay under it for the rest of the run;
 *   zswapd  redis under zswap-run; `zswapctl limit` of RssAnon less that
 *           fraction, the daemon's reclaim keeps it there.
 *
 * Then three runs: GET on uniform keys (redis-benchmark), GET on Zipf
 * (--skew) keys by the bench's own clients (--clients connections, each
 * value checked against the one written), SET (redis-benchmark). Memory is
 * sampled over the runs the same way for both: redis's RssAnon plus the
 * store's pool (zram: mem_used_total; zswapd: the daemon's pool bytes).
 * zram runs first; zswapd's limit is then moved, run after run (up to
 * EQUAL_TRIES), until its memory is zram's within 5 %, as in bench-equal.
 * Ratios: zswapd's last run over zram's.
 *
 *   sudo build/bench/bench-redis [--keys N] [--value BYTES] [--requests N]
 *        [--equal [--out 50,80] [--skew S] [--clients N]]
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "bench-util.h"
#include "kswap.h"
#include "reclaim-sim.h"
#include "util.h"

#define CHUNK (1ull << 20)

typedef struct Result {
        double out_pct;            /* RssAnon paged out at the start of the run */
        double get_rps, get_p99, set_rps, set_p99;
} Result;

static char dir[64], sock[96], run_path[PATH_MAX], ctl_path[PATH_MAX];
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

static pid_t redis_start(const char *zswapd_socket, const KswapCgroup *cg) {
        pid_t pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                if (cg && kswap_cgroup_join(cg, 0) < 0)
                        _exit(126);
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
        pid_t pid = redis_start(zs, NULL);
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

/* ---- --equal: the same memory for both stores ---- */

#define EQUAL_TRIES 4          /* zswapd runs to reach zram's memory */
#define EQUAL_SLACK 0.05
#define SETTLE_TIMEOUT_S 60.0
#define FILL_BATCH 256         /* SETs in flight on the filling connection */
#define MAX_CLIENTS 64
#define MAX_OUT 8
#define OOM_ROOM (8ull << 20)  /* zram: more room in the cgroup after an OOM kill */

typedef struct EqResult {
        uint64_t bound;            /* zram: the cgroup's limit; zswapd: the resident limit */
        double out_pct;            /* RssAnon paged out before the runs */
        double mem_mib;            /* RssAnon + pool, mean over the runs */
        double pool_mib;           /* of which the pool */
        double get_rps, get_p99, zipf_rps, zipf_p99, set_rps, set_p99;
        uint64_t bad, miss;        /* Zipf GETs that read a wrong value, or none */
        double in_kreq, out_kreq;  /* pages faulted back and sent out per 1000 requests over the three runs */
        double cpu_redis, cpu_daemon; /* CPU ms per 1000 requests of redis-server and of zswapd (NAN: zram) */
        bool killed;               /* redis-server died of SIGKILL (zram: its cgroup's OOM killer) */
} EqResult;

static double skew = 0.99;
static unsigned clients = 8;

/* The value of key k: words drawn from k, exactly `value` bytes. */
static void value_of(uint32_t k, char *out) {
        static const char *const words[] = {
                "the", "user", "session", "cart", "item", "price", "order", "id", "name", "email", "status",
                "active", "created", "updated", "at", "for", "and", "of", "region", "eu", "us", "token", "count",
                "total", "null", "true", "false", "value", "key", "list", "page", "view", "click", "time",
        };
        uint64_t rng = k * 0x9e3779b97f4a7c15ull + 1;
        size_t n = 0;
        while (n < value) {
                const char *w = words[sim_rand(&rng) % (sizeof(words) / sizeof(words[0]))];
                char num[24];
                if (sim_rand(&rng) % 4 == 0) {
                        snprintf(num, sizeof(num), "%u", (unsigned)(sim_rand(&rng) % 100000));
                        w = num;
                }
                for (size_t i = 0; w[i] && n < value; i++)
                        out[n++] = w[i];
                if (n < value)
                        out[n++] = ' ';
        }
}

typedef struct Conn {
        int fd;
        size_t off, len;
        char buf[65536];
} Conn;

static int conn_open(Conn *c) {
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
        c->off = c->len = 0;
        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0)
                return -errno;
        if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
                int r = -errno;
                close(c->fd);
                return r;
        }
        return 0;
}

static int conn_write(Conn *c, const char *p, size_t n) {
        while (n) {
                ssize_t k = write(c->fd, p, n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return k < 0 ? -errno : -EIO;
                p += k;
                n -= (size_t)k;
        }
        return 0;
}

/* The next n bytes of the reply stream (n <= sizeof(buf)), at *ret. */
static int conn_need(Conn *c, size_t n, const char **ret) {
        if (c->len - c->off < n) {
                memmove(c->buf, c->buf + c->off, c->len - c->off);
                c->len -= c->off;
                c->off = 0;
                while (c->len < n) {
                        ssize_t k = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k <= 0)
                                return k < 0 ? -errno : -ECONNRESET;
                        c->len += (size_t)k;
                }
        }
        *ret = c->buf + c->off;
        c->off += n;
        return 0;
}

/* One reply line (without its CRLF) into line. */
static int conn_line(Conn *c, char *line, size_t cap) {
        size_t n = 0;
        const char *p;
        for (;;) {
                int r = conn_need(c, 1, &p);
                if (r < 0)
                        return r;
                if (*p == '\n')
                        break;
                if (n + 1 < cap && *p != '\r')
                        line[n++] = *p;
        }
        line[n] = 0;
        return 0;
}

/* A bulk reply into out (cap bytes); its length, -1 for nil. */
static int conn_bulk(Conn *c, char *out, size_t cap, long *ret) {
        char line[64];
        const char *p;
        int r = conn_line(c, line, sizeof(line));
        if (r < 0)
                return r;
        if (line[0] != '$')
                return -EPROTO;
        long n = atol(line + 1);
        *ret = n;
        if (n < 0)
                return 0;
        if ((size_t)n > cap)
                return -EMSGSIZE;
        r = conn_need(c, (size_t)n + 2, &p);
        if (r == 0)
                memcpy(out, p, (size_t)n);
        return r;
}

/* Every key of the key space, each with value_of() its index. */
static int fill_all(void) {
        Conn *c = malloc(sizeof(*c));
        size_t cap = FILL_BATCH * (value + 96);
        char *cmd = malloc(cap), *v = malloc(value + 1), line[64];
        int r = c && cmd && v ? conn_open(c) : -ENOMEM;

        for (uint32_t k = 0; r == 0 && k < keys; k += FILL_BATCH) {
                uint32_t end = k + FILL_BATCH < keys ? k + FILL_BATCH : keys;
                size_t n = 0;
                for (uint32_t i = k; i < end; i++) {
                        value_of(i, v);
                        n += (size_t)snprintf(cmd + n, cap - n, "*3\r\n$3\r\nSET\r\n$16\r\nkey:%012u\r\n$%u\r\n", i,
                                              value);
                        memcpy(cmd + n, v, value);
                        n += value;
                        memcpy(cmd + n, "\r\n", 2);
                        n += 2;
                }
                r = conn_write(c, cmd, n);
                for (uint32_t i = k; r == 0 && i < end; i++)
                        if ((r = conn_line(c, line, sizeof(line))) == 0 && strcmp(line, "+OK") != 0)
                                r = -EPROTO;
        }
        if (c && c->fd >= 0)
                close(c->fd);
        free(c);
        free(cmd);
        free(v);
        return r;
}

typedef struct ZipfRun {
        const Zipf *z;
        uint64_t step; /* key_step() */
        uint64_t seed;
        size_t n;
        uint64_t *lat;
        uint64_t bad, miss;
        int err;
} ZipfRun;

/* The multiplier that scatters ranks over the key space: coprime with
 * keys, so rank * step % keys is a bijection. Found once a run. */
static uint64_t key_step(void) {
        static const uint64_t steps[] = { 2654435761u, 1000003, 999983, 7919 };
        for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
                uint64_t a = steps[i], b = keys;
                while (b) {
                        uint64_t t = a % b;
                        a = b;
                        b = t;
                }
                if (a == 1)
                        return steps[i];
        }
        return 1;
}

static void *zipf_client(void *arg) {
        ZipfRun *z = arg;
        Conn *c = malloc(sizeof(*c));
        char *got = malloc(value + 1), *want = malloc(value + 1), cmd[96];
        uint64_t rng = z->seed;

        z->err = c && got && want ? conn_open(c) : -ENOMEM;
        for (size_t i = 0; z->err == 0 && i < z->n; i++) {
                uint32_t k = (uint32_t)(zipf_sample(z->z, &rng) * z->step % keys);
                int n = snprintf(cmd, sizeof(cmd), "*2\r\n$3\r\nGET\r\n$16\r\nkey:%012u\r\n", k);
                long len = 0;
                uint64_t t0 = bench_now_ns();
                z->err = conn_write(c, cmd, (size_t)n) ?: conn_bulk(c, got, value, &len);
                z->lat[i] = bench_now_ns() - t0;
                if (z->err == 0 && len < 0)
                        z->miss++;
                else if (z->err == 0) {
                        value_of(k, want);
                        z->bad += len != (long)value || memcmp(got, want, value) != 0;
                }
        }
        if (c && c->fd >= 0)
                close(c->fd);
        free(c);
        free(got);
        free(want);
        return NULL;
}

/* `requests` GETs of Zipf-ranked keys over `clients` connections, each
 * waiting for its reply before the next (so p99 is a GET's own). */
static int zipf_bench(EqResult *res) {
        size_t per = requests / clients, all = per * clients;
        uint64_t *lat = calloc(all ? all : 1, sizeof(uint64_t));
        ZipfRun run[MAX_CLIENTS] = {};
        pthread_t t[MAX_CLIENTS];
        Zipf *z = NULL;
        int r = lat ? zipf_new(keys, skew, &z) : -ENOMEM;

        if (r < 0) {
                free(lat);
                return r;
        }
        uint64_t t0 = bench_now_ns(), step = key_step();
        unsigned started = 0;
        for (unsigned i = 0; i < clients; i++, started++) {
                run[i] = (ZipfRun){ .z = z, .step = step, .seed = 0x5eed + i, .n = per, .lat = lat + i * per };
                if (pthread_create(&t[i], NULL, zipf_client, &run[i]) != 0)
                        break;
        }
        for (unsigned i = 0; i < started; i++) {
                pthread_join(t[i], NULL);
                if (run[i].err && !r)
                        r = run[i].err;
                res->bad += run[i].bad;
                res->miss += run[i].miss;
        }
        double s = (double)(bench_now_ns() - t0) / 1e9;
        if (started < clients && !r)
                r = -EAGAIN;
        res->zipf_rps = (double)all / s;
        qsort(lat, all, sizeof(uint64_t), cmp_u64);
        res->zipf_p99 = (double)lat[all * 99 / 100] / 1e6;
        free(lat);
        zipf_free(z);
        return r;
}

/* RssAnon of redis plus the store's pool, sampled every 100 ms while the runs go */
typedef struct Sampler {
        Backend *b;
        pid_t pid;
        _Atomic bool stop;
        double sum_mib, sum_pool_mib;
        unsigned n;
} Sampler;

static double memory_mib(Backend *b, pid_t pid, double *pool_mib) {
        uint64_t orig = 0, used = 0;
        long rss = 0;
        (void)backend_memory(b, &orig, &used);
        (void)bench_rss_anon_kib("/proc", pid, &rss);
        *pool_mib = (double)used / (1024.0 * 1024.0);
        return (double)rss / 1024.0 + *pool_mib;
}

static void *sampler_main(void *arg) {
        Sampler *s = arg;
        while (!atomic_load(&s->stop)) {
                double pool;
                s->sum_mib += memory_mib(s->b, s->pid, &pool);
                s->sum_pool_mib += pool;
                s->n++;
                bench_sleep_us(100000);
        }
        return NULL;
}

/* zswapd: until redis's RssAnon is at the limit (within 5 %) or stops falling */
static void wait_settled(pid_t pid, uint64_t limit) {
        long last = LONG_MAX, rss = 0;
        for (double t = 0; t < SETTLE_TIMEOUT_S; t += 0.5) {
                bench_sleep_us(500000);
                if (bench_rss_anon_kib("/proc", pid, &rss) < 0)
                        return;
                if ((double)rss * 1024.0 <= (double)limit * 1.05 || rss >= last - last / 200)
                        return;
                last = rss;
        }
}

/* zram: headroom is added to the cgroup's limit; zswapd: zs_limit is the
 * resident limit (0: RssAnon less the fraction). */
static int equal_measure(Backend *b, double f, uint64_t zs_limit, uint64_t headroom, EqResult *res) {
        const char *zs = backend_socket(b);
        KswapCgroup cg = {};
        long before = 0, after = 0;
        int r = zs ? 0 : kswap_cgroup_make(&cg, "redis");

        *res = (EqResult){};
        if (r < 0)
                return r;
        pid_t pid = redis_start(zs, zs ? NULL : &cg);
        if (pid < 0) {
                if (!zs)
                        (void)kswap_cgroup_remove(&cg);
                return (int)pid;
        }
        r = fill_all();
        if (r == 0 && zs)
                bench_sleep_us(500000); /* the shim's scanner has registered what redis mapped */
        bench_rss_anon_kib("/proc", pid, &before);
        if (r == 0 && !zs) {
                uint64_t usage = 0;
                r = kswap_cgroup_usage(&cg, &usage);
                res->bound = usage - (uint64_t)(f * (double)before * 1024.0) + headroom;
                if (r == 0)
                        r = kswap_cgroup_limit(&cg, res->bound);
        } else if (r == 0) {
                res->bound = zs_limit ? zs_limit : (uint64_t)((1 - f) * (double)before * 1024.0);
                r = sh(NULL, 0, "%s --socket %s limit %d %llu >/dev/null 2>&1", ctl_path, zs, (int)pid,
                       (unsigned long long)res->bound);
                if (r == 0)
                        wait_settled(pid, res->bound);
        }
        bench_rss_anon_kib("/proc", pid, &after);
        res->out_pct = before > 0 ? 100.0 * (double)(before - after) / (double)before : 0;

        uint64_t in0 = 0, out0 = 0, in1 = 0, out1 = 0;
        double u0 = 0, s0 = 0, u1 = 0, s1 = 0, d0 = backend_daemon_cpu_s(b);
        if (r == 0)
                r = backend_moves(b, &in0, &out0);
        if (r == 0)
                r = bench_proc_times("/proc", pid, &u0, &s0);
        Sampler smp = { .b = b, .pid = pid };
        pthread_t st;
        bool sampling = r == 0 && pthread_create(&st, NULL, sampler_main, &smp) == 0;
        if (r == 0)
                r = bench("get", &res->get_rps, &res->get_p99);
        if (r == 0)
                r = zipf_bench(res);
        if (r == 0)
                r = bench("set", &res->set_rps, &res->set_p99);
        if (r == 0 && (r = backend_moves(b, &in1, &out1)) == 0) {
                double kreq = (2.0 * requests + (double)(requests / clients * clients)) / 1000.0;
                res->in_kreq = (double)(in1 - in0) / kreq;
                res->out_kreq = (double)(out1 - out0) / kreq;
                if ((r = bench_proc_times("/proc", pid, &u1, &s1)) == 0) {
                        res->cpu_redis = 1000.0 * (u1 + s1 - u0 - s0) / kreq;
                        res->cpu_daemon = 1000.0 * (backend_daemon_cpu_s(b) - d0) / kreq;
                }
        }
        if (sampling) {
                atomic_store(&smp.stop, true);
                pthread_join(st, NULL);
        }
        res->mem_mib = smp.n ? smp.sum_mib / smp.n : NAN;
        res->pool_mib = smp.n ? smp.sum_pool_mib / smp.n : NAN;
        fprintf(stderr, "  %s %2.0f %%: bound %.1f MiB; RssAnon %ld -> %ld KiB (%.1f %% out); memory %.1f MiB (pool %.1f); "
                "GET %.0f/s p99 %.3f ms; Zipf GET %.0f/s p99 %.3f ms (bad %llu, nil %llu); SET %.0f/s p99 %.3f ms; "
                "per 1000 requests %.0f pages in, %.0f out, CPU ms redis %.1f, daemon %.1f\n",
                backend_name(b), f * 100, (double)res->bound / (1024.0 * 1024.0), before, after, res->out_pct,
                res->mem_mib, res->pool_mib, res->get_rps, res->get_p99, res->zipf_rps, res->zipf_p99,
                (unsigned long long)res->bad, (unsigned long long)res->miss, res->set_rps, res->set_p99,
                res->in_kreq, res->out_kreq, res->cpu_redis, res->cpu_daemon);
        int ws = 0;
        if (r < 0 && waitpid(pid, &ws, WNOHANG) == pid) {
                res->killed = WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL;
                fprintf(stderr, "  redis-server %s\n", res->killed ? "was killed (SIGKILL: the OOM killer?)" : "died");
                unlink(sock);
        } else
                redis_stop(pid);
        if (!zs)
                (void)kswap_cgroup_remove(&cg);
        if (r == 0 && (res->bad || res->miss))
                r = -EBADMSG; /* every key was written: a nil or a wrong value is a lost page */
        return r;
}

static void equal_row(unsigned out, const char *name, const EqResult *e) {
        printf("%3u %%  %-10s %9.1f %6.1f %8.1f %9.0f %8.3f %9.0f %8.3f %9.0f %8.3f %7.0f %7.0f\n", out, name,
               (double)e->bound / (1024.0 * 1024.0), e->out_pct, e->mem_mib, e->get_rps, e->get_p99, e->zipf_rps,
               e->zipf_p99, e->set_rps, e->set_p99, e->in_kreq, e->out_kreq);
}

static int equal_main(const unsigned *outs, unsigned n_out) {
        EqResult zr[MAX_OUT], zw[MAX_OUT];
        Backend *b = NULL;
        int r;

        BackendConfig zcfg = { .kind = BACKEND_ZRAM, .size_bytes = (uint64_t)keys * (value + 200) * 2 };
        if ((r = backend_setup(&zcfg, &b)) < 0) {
                fprintf(stderr, "bench-redis: set-up of zram failed: %s\n", strerror(-r));
                return 1;
        }
        fprintf(stderr, "%s\n", backend_describe(b));
        for (unsigned i = 0; i < n_out && r == 0; i++) {
                /* the cgroup's OOM killer may end redis when reclaim cannot
                 * keep up at the bound: again with more room (a finding the
                 * table shows as a larger bound and memory) */
                for (uint64_t room = 0; room <= 3 * OOM_ROOM; room += OOM_ROOM) {
                        r = equal_measure(b, outs[i] / 100.0, 0, room, &zr[i]);
                        if (r == 0 || !zr[i].killed)
                                break;
                }
        }
        backend_teardown(b);
        if (r < 0) {
                fprintf(stderr, "bench-redis: zram: %s\n", strerror(-r));
                return 1;
        }

        BackendConfig scfg = { .kind = BACKEND_ZSWAPD, .size_bytes = zcfg.size_bytes };
        if ((r = backend_setup(&scfg, &b)) < 0) {
                fprintf(stderr, "bench-redis: set-up of zswapd failed: %s\n", strerror(-r));
                return 1;
        }
        fprintf(stderr, "%s\n", backend_describe(b));
        printf("\nredis-server %u keys x %u bytes, every key written; equal memory (RssAnon + pool); GET: "
               "redis-benchmark -c 50 uniform; Zipf: %u clients, s=%.2f, each value checked; SET: redis-benchmark\n",
               keys, value, clients, skew);
        printf("out    store      bound MiB  out %%  mem MiB     GET/s  GET p99    Zipf/s Zipf p99     SET/s  SET p99  in/kreq out/kreq\n");
        for (unsigned i = 0; i < n_out && r == 0; i++) {
                uint64_t limit = 0;
                equal_row(outs[i], "zram-lz4", &zr[i]);
                for (unsigned t = 0; t < EQUAL_TRIES && r == 0; t++) {
                        r = equal_measure(b, outs[i] / 100.0, limit, 0, &zw[i]);
                        if (r < 0)
                                break;
                        equal_row(outs[i], "zswapd-lz4", &zw[i]);
                        fflush(stdout);
                        double d = zr[i].mem_mib - zw[i].mem_mib;
                        if (fabs(d) <= EQUAL_SLACK * zr[i].mem_mib)
                                break;
                        double next = (double)zw[i].bound + d * 1024.0 * 1024.0;
                        limit = next < 1024.0 * 1024 ? 1u << 20 : (uint64_t)next; /* 0 would be no limit */
                }
        }
        backend_teardown(b);
        if (r < 0) {
                fprintf(stderr, "bench-redis: zswapd: %s\n", strerror(-r));
                return 1;
        }
        printf("\nratios zswapd / zram, each store's last run (throughput: higher is better; p99, memory: lower)\n");
        for (unsigned i = 0; i < n_out; i++)
                printf("%3u %%  GET %.2f p99 %.2f  Zipf %.2f p99 %.2f  SET %.2f p99 %.2f  memory %.2f  pages in %.2f\n", outs[i],
                       zw[i].get_rps / zr[i].get_rps, zw[i].get_p99 / zr[i].get_p99, zw[i].zipf_rps / zr[i].zipf_rps,
                       zw[i].zipf_p99 / zr[i].zipf_p99, zw[i].set_rps / zr[i].set_rps,
                       zw[i].set_p99 / zr[i].set_p99, zw[i].mem_mib / zr[i].mem_mib,
                       zw[i].in_kreq / zr[i].in_kreq);
        return 0;
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "keys", required_argument, NULL, 'k' },
                { "value", required_argument, NULL, 'v' },
                { "requests", required_argument, NULL, 'n' },
                { "equal", no_argument, NULL, 'e' },
                { "out", required_argument, NULL, 'o' },
                { "skew", required_argument, NULL, 's' },
                { "clients", required_argument, NULL, 'c' },
                {}
        };
        unsigned outs[MAX_OUT] = { 50, 80 }, n_out = 2;
        bool equal = false;
        const double fractions[] = { 0, 0.5, 0.8 };
        Result res[2][3] = { 0 };
        int c;

        while ((c = getopt_long(argc, argv, "k:v:n:eo:s:c:", opts, NULL)) >= 0) {
                switch (c) {
                case 'k': keys = (unsigned)atoi(optarg); break;
                case 'v': value = (unsigned)atoi(optarg); break;
                case 'n': requests = (unsigned)atoi(optarg); break;
                case 'e': equal = true; break;
                case 'o':
                        if (bench_parse_list(optarg, 1, 95, outs, MAX_OUT, &n_out) < 0) {
                                fprintf(stderr, "bench-redis: --out takes percentages 1..95, e.g. 50,80\n");
                                return 2;
                        }
                        break;
                case 's': skew = atof(optarg); break;
                case 'c': clients = (unsigned)atoi(optarg); break;
                default: return 2;
                }
        }
        if (keys < 1 || value < 1 || value > 60000 || clients < 1 || clients > MAX_CLIENTS || skew <= 0 ||
            requests < clients) {
                fprintf(stderr, "bench-redis: --keys, --value (1..60000), --clients (1..%d), --skew (> 0) or "
                        "--requests (>= clients) out of range\n", MAX_CLIENTS);
                return 2;
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
        if (equal) {
                int r = equal_main(outs, n_out);
                rmdir(dir);
                return r;
        }

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
