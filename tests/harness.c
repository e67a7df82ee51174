/*
 * harness.c: see harness.h.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <spawn.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <grp.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "corpus.h"
#include "harness.h"
#include "protocol.h"
#include "util.h"

/* zswapctl of the daemon's build tree */
void td_ctl_path(char *ctl) {
        snprintf(ctl, PATH_MAX, "%s", td_daemon_path());
        char *slash = strrchr(ctl, '/');
        if (!slash)
                test_fail("daemon path %s", ctl);
        snprintf(slash, PATH_MAX - (size_t)(slash - ctl), "/../client/tools/zswapctl");
}

int td_ctl(const TestDaemon *d, const char *fmt, ...) {
        char args[512], ctl[PATH_MAX], cmd[PATH_MAX + 1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(args, sizeof(args), fmt, ap);
        va_end(ap);
        td_ctl_path(ctl);
        snprintf(cmd, sizeof(cmd), "%s --socket %s %s >&2", ctl, d->sock, args);
        int st = system(cmd);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

long td_pageout_pid(const TestDaemon *d, pid_t pid, uint64_t addr, uint64_t len) {
        char ctl[PATH_MAX], cmd[PATH_MAX + 256], out[256] = "";
        td_ctl_path(ctl);
        if (len)
                snprintf(cmd, sizeof(cmd), "%s --socket %s pageout %d %#llx %llu 2>/dev/null", ctl, d->sock, (int)pid,
                         (unsigned long long)addr, (unsigned long long)len);
        else
                snprintf(cmd, sizeof(cmd), "%s --socket %s pageout %d 2>/dev/null", ctl, d->sock, (int)pid);
        FILE *p = popen(cmd, "r");
        ASSERT_TRUE(p);
        size_t n = fread(out, 1, sizeof(out) - 1, p);
        out[n] = 0;
        long got;
        if (pclose(p) != 0 || sscanf(out, "process %*d: %ld pages evicted", &got) != 1)
                got = -1;
        return got;
}

void td_shim_paths(char *run, char *ctl, char *victim, const char *victim_name) {
        const char *zswapd = getenv("ZSWAPD");
        if (!zswapd)
                test_skip("ZSWAPD not set");
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
        test_skip("sanitizer build: the LD_PRELOAD shim is tested in the plain build");
#endif
        test_require_root();
        snprintf(run, PATH_MAX, "%s", zswapd);
        snprintf(strrchr(run, '/'), PATH_MAX - (size_t)(strrchr(run, '/') - run), "/../client/preload/zswap-run");
        snprintf(ctl, PATH_MAX, "%s", zswapd);
        snprintf(strrchr(ctl, '/'), PATH_MAX - (size_t)(strrchr(ctl, '/') - ctl), "/../client/tools/zswapctl");
        ssize_t n = readlink("/proc/self/exe", victim, PATH_MAX - 1);
        ASSERT_TRUE(n > 0);
        victim[n] = 0;
        char *slash = strrchr(victim, '/');
        snprintf(slash + 1, PATH_MAX - (size_t)(slash + 1 - victim), "%s", victim_name);
}

const char *td_daemon_path(void) {
        static char path[PATH_MAX];
        const char *env = getenv("ZSWAPD");
        if (env)
                return env;
        ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 32);
        if (n < 0)
                test_fail("readlink");
        path[n] = 0;
        char *slash = strrchr(path, '/');
        strcpy(slash, "/../daemon/zswapd");
        return path;
}

static void td_spawn(TestDaemon *d) {
        char cmd[PATH_MAX + 512];
        d->pid = fork();
        ASSERT_TRUE(d->pid >= 0);
        if (d->pid == 0) {
                /* never outlive the test */
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                snprintf(cmd, sizeof(cmd), "exec %s --socket %s %s%s%s", td_daemon_path(), d->sock, d->args,
                         d->log[0] ? " 2>>" : "", d->log);
                execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
                _exit(127);
        }
        /* until it accepts: a sanitized daemon on a loaded machine (or
         * one under valgrind) takes seconds to start */
        for (uint64_t end = now_ns() + TEST_WAIT_S * 1000000000ull; now_ns() < end; usleep(10000)) {
                struct zswap_client *c;
                if (zswap_connect(d->sock, &c) == 0) {
                        zswap_disconnect(c);
                        return;
                }
                int st;
                if (waitpid(d->pid, &st, WNOHANG) == d->pid)
                        test_fail("zswapd exited at start (status %d)", st);
        }
        test_fail("zswapd did not accept connections on %s within %d s", d->sock, TEST_WAIT_S);
}

/*
 * The daemon's arguments. In the sanitizer builds, a fixed fault service
 * (wake one, no poll) unless the test names one: the daemon's measurement
 * at start (design.md, "Fault service") there times the sanitizer's
 * runtime, not the machine, and costs a second a start under TSan. The
 * plain build's tests run what the daemon measured.
 */
static void td_set_args(TestDaemon *d, const char *extra_args) {
        const char *fixed = "";
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
        if (!extra_args || (!strstr(extra_args, "--fault-wake") && !strstr(extra_args, "--fault-spin-us") &&
                            !strstr(extra_args, "--fault-home")))
                fixed = "--fault-wake one --fault-spin-us 0 ";
#endif
        snprintf(d->args, sizeof(d->args), "%s%s", fixed, extra_args ? extra_args : "");
}

void td_start(TestDaemon *d, const char *extra_args) {
        test_require_root();
        memset(d, 0, sizeof(*d));
        snprintf(d->sock, sizeof(d->sock), "/tmp/zswapd-test-%d-%ld.sock", (int)getpid(), (long)time(NULL));
        td_set_args(d, extra_args);
        td_spawn(d);
}

void td_start_at(TestDaemon *d, const char *sock, const char *extra_args) {
        test_require_root();
        memset(d, 0, sizeof(*d));
        snprintf(d->sock, sizeof(d->sock), "%s", sock);
        td_set_args(d, extra_args);
        td_respawn(d);
}

void td_start_logged(TestDaemon *d, const char *extra_args) {
        test_require_root();
        memset(d, 0, sizeof(*d));
        snprintf(d->sock, sizeof(d->sock), "/tmp/zswapd-test-%d-%ld.sock", (int)getpid(), (long)time(NULL));
        snprintf(d->log, sizeof(d->log), "/tmp/zswapd-test-%d-%ld.log", (int)getpid(), (long)time(NULL));
        unlink(d->log);
        td_set_args(d, extra_args);
        td_spawn(d);
}

void td_start_injected(TestDaemon *d, const char *spec) {
        ASSERT_OK(setenv("ZSWAPD_INJECT", spec, 1));
        td_start_logged(d, getenv("TEST_DAEMON_ARGS"));
        ASSERT_OK(unsetenv("ZSWAPD_INJECT"));
}

unsigned td_log_count(const TestDaemon *d, const char *needle) {
        char line[1024];
        unsigned n = 0;
        FILE *f = fopen(d->log, "re");

        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f))
                n += strstr(line, needle) != NULL;
        fclose(f);
        return n;
}

bool td_log_has(const TestDaemon *d, const char *needle) {
        return td_log_count(d, needle) > 0;
}

void td_dump_stacks(pid_t pid, const char *who) {
        char cmd[256];

        fprintf(stderr, "---- %s (pid %d): its threads' states and kernel stacks ----\n", who, (int)pid);
        snprintf(cmd, sizeof(cmd),
                 "for t in /proc/%d/task/*; do echo \"$t: $(grep State: $t/status)\"; head -n 16 $t/stack; done >&2",
                 (int)pid);
        if (system(cmd) != 0)
                fprintf(stderr, "(could not read all of /proc/%d/task)\n", (int)pid);
}

bool td_waitpid_for(pid_t pid, int *st, unsigned secs, const char *who) {
        for (uint64_t end = now_ns() + secs * 1000000000ull;; usleep(10000)) {
                pid_t r = waitpid(pid, st, WNOHANG);
                if (r == pid)
                        return true;
                if (r < 0)
                        test_fail("waitpid(%s, pid %d): %s", who, (int)pid, strerror(errno));
                if (now_ns() >= end)
                        break;
        }
        fprintf(stderr, "%s (pid %d) has not exited in %u s\n", who, (int)pid, secs);
        td_dump_stacks(pid, who);
        return false;
}

void td_stop(TestDaemon *d) {
        int st;
        if (d->pid <= 0)
                return;
        kill(d->pid, SIGTERM);
        if (!td_waitpid_for(d->pid, &st, TEST_WAIT_S, "zswapd after SIGTERM")) {
                td_log_dump(d);
                kill(d->pid, SIGKILL);
                waitpid(d->pid, NULL, 0);
                d->pid = 0;
                test_fail("zswapd did not exit within %d s of SIGTERM", TEST_WAIT_S);
        }
        d->pid = 0;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                test_fail("zswapd did not exit cleanly: status %#x", st);
}

void td_kill(TestDaemon *d) {
        uint32_t i = 0;
        if (d->pid <= 0)
                return;
        if (d->kills) {
                i = atomic_load(&d->kills->n);
                ASSERT_TRUE(i < TD_KILLS_MAX);
                atomic_store(&d->kills->k[i].end, 0);
                atomic_store(&d->kills->k[i].start, now_ns());
                atomic_store(&d->kills->n, i + 1);
        }
        kill(d->pid, SIGKILL);
        waitpid(d->pid, NULL, 0);
        d->pid = 0;
        if (d->kills)
                atomic_store(&d->kills->k[i].end, now_ns());
}

int td_kills_record(TestDaemon *d) {
        int fd = memfd_create("td-kills", MFD_CLOEXEC);
        ASSERT_OK(fd);
        ASSERT_OK(ftruncate(fd, sizeof(TdKills)));
        d->kills = mmap(NULL, sizeof(TdKills), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ASSERT_TRUE(d->kills != MAP_FAILED);
        return fd;
}

const TdKills *td_kills_map(int fd) {
        const TdKills *k = mmap(NULL, sizeof(TdKills), PROT_READ, MAP_SHARED, fd, 0);
        ASSERT_TRUE(k != MAP_FAILED);
        return k;
}

bool td_killed_between(const TdKills *k, uint64_t from, uint64_t to) {
        uint32_t n = k ? atomic_load(&k->n) : 0;
        for (uint32_t i = 0; i < n && i < TD_KILLS_MAX; i++) {
                uint64_t start = atomic_load(&k->k[i].start), end = atomic_load(&k->k[i].end);
                if (start <= to && (end == 0 || end >= from))
                        return true;
        }
        return false;
}

void td_restart(TestDaemon *d) {
        td_kill(d);
        td_spawn(d);
}

struct zswap_client *td_connect(TestDaemon *d) {
        struct zswap_client *c = NULL;
        ASSERT_OK(zswap_connect(d->sock, &c));
        return c;
}

void td_stats(struct zswap_client *c, struct zswap_stats *s) {
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_GLOBAL, s));
}

static void ctl_roundtrip(int fd, void *msg, size_t len, void *reply, size_t cap, uint16_t want) {
        ASSERT_OK(zmsg_send(fd, msg, len, NULL, 0));
        ssize_t n = zmsg_recv(fd, reply, cap, NULL, NULL, NULL);
        ASSERT_TRUE(n >= (ssize_t)sizeof(ZMsgHeader));
        ASSERT_EQ(((ZMsgHeader *)reply)->type, want);
}

/* A control connection (what zswapctl opens), greeted with id 1. */
static int ctl_open(const TestDaemon *d) {
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        ZMsgHello h = { .role = ZROLE_CONTROL };
        int fd = unix_connect(d->sock);

        ASSERT_TRUE(fd >= 0);
        zmsg_init(&h.hdr, ZMSG_HELLO, 1, sizeof(h));
        ctl_roundtrip(fd, &h, sizeof(h), buf, sizeof(buf), ZMSG_REPLY);
        return fd;
}

void td_status(const TestDaemon *d, ZMsgStatusReply *st) {
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        ZMsgHeader q;
        int fd = ctl_open(d);

        zmsg_init(&q, ZMSG_STATUS, 2, sizeof(q));
        ctl_roundtrip(fd, &q, sizeof(q), buf, sizeof(buf), ZMSG_STATUS_REPLY);
        memcpy(st, buf, sizeof(*st));
        close(fd);
}

void td_clients_sum(const TestDaemon *d, pid_t pid, ZClientRecord *sum) {
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX];
        ZMsgClientsReq q = { .after = 0 };
        const ZMsgClientsReply *rep = (const ZMsgClientsReply *)buf;
        int fd = ctl_open(d);

        *sum = (ZClientRecord){ 0 };
        for (uint32_t id = 2;; id++) {
                zmsg_init(&q.hdr, ZMSG_CLIENTS, id, sizeof(q));
                ctl_roundtrip(fd, &q, sizeof(q), buf, sizeof(buf), ZMSG_CLIENTS_REPLY);
                ASSERT_EQ(rep->status, 0);
                ASSERT_LE(rep->count, ZSWAP_CLIENTS_PER_MSG);
                for (uint32_t i = 0; i < rep->count; i++) {
                        const ZClientRecord *r = &rep->rec[i];
                        if (pid && r->pid != pid)
                                continue;
                        ASSERT_LE(r->tier_pages, r->stored_pages);
                        ASSERT_LE(r->strong_pages + r->tier_pages, r->stored_pages);
                        ASSERT_LE(r->strong_bytes, r->compressed_bytes);
                        sum->stored_pages += r->stored_pages;
                        sum->compressed_bytes += r->compressed_bytes;
                        sum->tier_pages += r->tier_pages;
                        sum->tier_bytes += r->tier_bytes;
                        sum->strong_pages += r->strong_pages;
                        sum->strong_bytes += r->strong_bytes;
                        sum->recompressed += r->recompressed;
                        sum->recompress_age_ms = r->recompress_age_ms;
                }
                if (!rep->more || !rep->count)
                        break;
                q.after = rep->rec[rep->count - 1].id;
        }
        close(fd);
}

void td_clients_tier(const TestDaemon *d, pid_t pid, uint64_t *pages, uint64_t *bytes) {
        ZClientRecord sum;
        td_clients_sum(d, pid, &sum);
        *pages = sum.tier_pages;
        *bytes = sum.tier_bytes;
}

size_t td_fds_named(const char *needle, int *fds, size_t max) {
        DIR *dir = opendir("/proc/self/fd");
        struct dirent *e;
        size_t n = 0;

        while (dir && (e = readdir(dir)) && n < max) {
                char path[300], target[256];
                snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
                ssize_t l = readlink(path, target, sizeof(target) - 1);
                if (l <= 0)
                        continue;
                target[l] = 0;
                if (strstr(target, needle))
                        fds[n++] = atoi(e->d_name);
        }
        if (dir)
                closedir(dir);
        return n;
}

static void *race_reader(void *arg) {
        TdRace *r = ((struct TdRaceArg *)arg)->r;
        uint64_t s = ((struct TdRaceArg *)arg)->seed;
        while (!atomic_load(&r->stop)) {
                size_t i = xorshift(&s) % (r->npages / 2) * 2;
                if (page_hash(r->buf + i * ZSWAP_PAGE_SIZE) != r->hashes[i]) {
                        long none = -1;
                        atomic_fetch_add(&r->bad, 1);
                        atomic_compare_exchange_strong(&r->first_bad, &none, (long)i);
                }
                atomic_fetch_add(&r->checked, 1);
                if (i % 8 == 0 && r->read_pause_us)
                        usleep(r->read_pause_us); /* leave most of the region out */
        }
        return NULL;
}

static void *race_writer(void *arg) {
        TdRace *r = ((struct TdRaceArg *)arg)->r;
        uint64_t s = ((struct TdRaceArg *)arg)->seed;
        while (!atomic_load(&r->stop)) {
                size_t i = xorshift(&s) % (r->npages / 2) * 2 + 1;
                volatile uint8_t *b = r->buf + i * ZSWAP_PAGE_SIZE + xorshift(&s) % ZSWAP_PAGE_SIZE;
                *b = *b; /* a write fault with the same content */
                atomic_fetch_add(&r->rewritten, 1);
                if (r->write_pause_us)
                        usleep(r->write_pause_us);
        }
        return NULL;
}

static void *race_evicter(void *arg) {
        TdRace *r = ((struct TdRaceArg *)arg)->r;
        uint64_t s = ((struct TdRaceArg *)arg)->seed;
        while (!atomic_load(&r->stop)) {
                size_t i = xorshift(&s) % (r->npages / 256) * 256;
                int n = zswap_pageout(r->c, r->buf + i * ZSWAP_PAGE_SIZE, 256 * ZSWAP_PAGE_SIZE);
                ASSERT_TRUE(n >= 0);
                atomic_fetch_add(&r->evicted, (uint64_t)n);
                if (r->evict_pause_us)
                        usleep(r->evict_pause_us);
        }
        return NULL;
}

void td_race_start(TdRace *r) {
        void *(*const fn[4])(void *) = { race_reader, race_reader, race_writer, race_evicter };

        atomic_store(&r->first_bad, -1);
        for (unsigned i = 0; i < 4; i++) {
                r->args[i] = (struct TdRaceArg){ .r = r, .seed = i + 1 };
                ASSERT_OK(-pthread_create(&r->th[i], NULL, fn[i], &r->args[i]));
        }
}

void td_race_stop(TdRace *r) {
        atomic_store(&r->stop, true);
        for (unsigned i = 0; i < 4; i++)
                ASSERT_OK(-pthread_join(r->th[i], NULL));
        if (atomic_load(&r->bad))
                fprintf(stderr, "%llu bad reads, the first of page %ld\n", (unsigned long long)atomic_load(&r->bad),
                        atomic_load(&r->first_bad));
}

void *test_map(size_t len) {
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(p != MAP_FAILED);
        return p;
}

uint8_t *td_region(struct zswap_client *c, size_t len, uint64_t seed, uint64_t *hashes) {
        uint8_t *buf = test_map(len);
        fill_pages(buf, len, seed);
        hash_pages(buf, len, hashes);
        ASSERT_OK(zswap_register(c, buf, len));
        return buf;
}

long td_pageout_want(struct zswap_client *c, void *buf, size_t len, long want) {
        uint64_t end = now_ns() + TEST_WAIT_S * 1000000000ull;
        long n = 0;
        int calls = 0;

        while (n < want) {
                int r = zswap_pageout(c, buf, len);
                calls++;
                if (r < 0 || now_ns() > end) {
                        fprintf(stderr, "pid %d: %ld of %ld pages out after %d pageouts, then %d (%s)\n", (int)getpid(),
                                n, want, calls, r, r < 0 ? strerror(-r) : "out of time");
                        return -1;
                }
                n += r;
        }
        return n;
}

uint64_t xorshift(uint64_t *s) {
        uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return *s = x;
}

/* ---- corpus ---- */

static Corpus *corpus;

static void corpus_once(void) {
        static bool tried;
        _cleanup_free_ char *dir = NULL;

        if (tried)
                return;
        tried = true;
        if (corpus_find_dir(NULL, &dir) < 0 || corpus_load(dir, &corpus) < 0)
                fprintf(stderr, "corpus not found: synthetic pages instead\n");
}

static void synthetic_page(uint8_t *p, uint64_t *s) {
        static const char *words[] = { "alpha ", "beta ", "gamma ", "delta ", "{\"key\": ", "value, ", "0x7f00 ", "\n" };
        size_t o = 0;
        while (o < ZSWAP_PAGE_SIZE) {
                const char *w = words[xorshift(s) % 8];
                size_t n = strlen(w);
                if (o + n > ZSWAP_PAGE_SIZE)
                        n = ZSWAP_PAGE_SIZE - o;
                memcpy(p + o, w, n);
                o += n;
        }
}

void fill_pages(void *buf, size_t len, uint64_t seed) {
        uint8_t *b = buf;
        uint64_t s = seed * 2654435761u + 1;
        corpus_once();
        for (size_t i = 0; i < len / ZSWAP_PAGE_SIZE; i++) {
                uint8_t *p = b + i * ZSWAP_PAGE_SIZE;
                if (i % 50 == 49) {
                        memset(p, 0, ZSWAP_PAGE_SIZE);
                        continue;
                }
                if (i % 97 == 96) {
                        memset(p, 0xa5, ZSWAP_PAGE_SIZE);
                        continue;
                }
                if (corpus)
                        memcpy(p, corpus->data + corpus_index(i + seed * 131) * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE);
                else
                        synthetic_page(p, &s);
                /* make the page unique to this buffer and position */
                uint64_t tag = seed ^ (i * 0x9e3779b97f4a7c15ull);
                memcpy(p + (xorshift(&s) % (ZSWAP_PAGE_SIZE / 8)) * 8, &tag, 8);
        }
}

uint64_t page_hash(const void *page) {
        const uint64_t *w = page;
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < ZSWAP_PAGE_SIZE / 8; i++) {
                h ^= w[i];
                h *= 0x100000001b3ull;
        }
        return h;
}

void hash_pages(const void *buf, size_t len, uint64_t *hashes) {
        for (size_t i = 0; i < len / ZSWAP_PAGE_SIZE; i++)
                hashes[i] = page_hash((const uint8_t *)buf + i * ZSWAP_PAGE_SIZE);
}

size_t verify_pages(const void *buf, size_t len, const uint64_t *hashes) {
        size_t bad = 0;
        for (size_t i = 0; i < len / ZSWAP_PAGE_SIZE; i++)
                if (page_hash((const uint8_t *)buf + i * ZSWAP_PAGE_SIZE) != hashes[i]) {
                        if (bad < 5)
                                fprintf(stderr, "page %zu differs\n", i);
                        bad++;
                }
        return bad;
}

uint64_t rss_anon_bytes(pid_t pid) {
        uint64_t v = 0;
        proc_status_kb(pid, "RssAnon", &v);
        return v;
}

/* ---- daemon restarts ---- */

void td_respawn(TestDaemon *d) {
        extern char **environ;
        char cmd[PATH_MAX + 640];
        char *argv[] = { "sh", "-c", cmd, NULL };
        pid_t pid;

        ASSERT_EQ(d->pid, 0);
        /* posix_spawn() cannot set a parent-death signal: setpriv does,
         * where it is there (the daemon never outlives the test) */
        snprintf(cmd, sizeof(cmd),
                 "p=; command -v setpriv >/dev/null && p='setpriv --pdeathsig KILL --'; "
                 "exec $p %s --socket %s %s%s%s",
                 td_daemon_path(), d->sock, d->args, d->log[0] ? " 2>>" : "", d->log);
        ASSERT_OK(-posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ));
        d->pid = pid;
        for (uint64_t end = now_ns() + TEST_WAIT_S * 1000000000ull; now_ns() < end; usleep(10000)) {
                struct zswap_client *c;
                int st;
                if (zswap_connect(d->sock, &c) == 0) {
                        zswap_disconnect(c);
                        return;
                }
                if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
                        td_log_dump(d);
                        test_fail("zswapd exited at restart (status %#x)", st);
                }
        }
        td_log_dump(d);
        test_fail("zswapd did not restart on %s within %d s", d->sock, TEST_WAIT_S);
}

void td_log_mark(const TestDaemon *d, const char *fmt, ...) {
        char line[512];
        va_list ap;
        FILE *f = d->log[0] ? fopen(d->log, "ae") : NULL;

        if (!f)
                return;
        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        fprintf(f, "==== test: %s\n", line);
        fclose(f);
}

void td_log_dump(const TestDaemon *d) {
        char line[1024];
        FILE *f = d->log[0] ? fopen(d->log, "re") : NULL;

        if (!f)
                return;
        fprintf(stderr, "---- %s ----\n", d->log);
        while (fgets(line, sizeof(line), f))
                fputs(line, stderr);
        fprintf(stderr, "---- end of %s ----\n", d->log);
        fclose(f);
}

const char *task_wchan(pid_t pid, pid_t tid, char *buf, size_t len) {
        char path[96];

        if (tid)
                snprintf(path, sizeof(path), "/proc/%d/task/%d/wchan", (int)(pid ? pid : getpid()), (int)tid);
        else
                snprintf(path, sizeof(path), "/proc/%d/wchan", (int)(pid ? pid : getpid()));
        buf[0] = 0;
        FILE *f = fopen(path, "re");
        if (f) {
                if (!fgets(buf, (int)len, f))
                        buf[0] = 0;
                fclose(f);
        }
        return buf;
}

bool task_in_userfault(pid_t tid) {
        char w[64];
        return strstr(task_wchan(0, tid, w, sizeof(w)), "userfault") != NULL;
}

bool vma_flags(const void *addr, char *buf, size_t len) {
        char line[512];
        bool inside = false, found = false;
        FILE *f = fopen("/proc/self/smaps", "re");

        if (!f)
                return false;
        while (!found && fgets(line, sizeof(line), f)) {
                unsigned long lo, hi;
                /* a mapping's header: "lo-hi perms ..."; its fields are "Name: value" */
                if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
                        inside = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
                else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
                        snprintf(buf, len, "%s", line + 8 + strspn(line + 8, " "));
                        buf[strcspn(buf, "\n")] = 0;
                        found = true;
                }
        }
        fclose(f);
        return found;
}

static bool vma_has_flag(const void *addr, const char *flag) {
        char flags[256], *save = NULL;

        if (!vma_flags(addr, flags, sizeof(flags)))
                return false;
        for (char *t = strtok_r(flags, " ", &save); t; t = strtok_r(NULL, " ", &save))
                if (strcmp(t, flag) == 0)
                        return true;
        return false;
}

bool vma_uffd_missing(const void *addr) {
        return vma_has_flag(addr, "um");
}

bool vma_uffd_registered(const void *addr) {
        return vma_has_flag(addr, "um") || vma_has_flag(addr, "uw");
}

pid_t td_fork_as(uid_t uid, gid_t group) {
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid != 0)
                return pid;
        gid_t groups[1] = { group };
        if (setgroups(group ? 1 : 0, groups) < 0 || setgid(uid) < 0 || setuid(uid) < 0)
                _exit(90);
        prctl(PR_SET_DUMPABLE, 1);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        return 0;
}

/* ---- cgroups with a CPU quota ---- */

static bool cg_write(const char *path, const char *text) {
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        bool ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
        close(fd);
        return ok;
}

/* Where a mount of fstype whose options include opt (NULL: any) is. */
static bool cg_mount(const char *fstype, const char *opt, char *dir, size_t len) {
        FILE *f = fopen("/proc/self/mounts", "re");
        char src[256], mnt[256], type[64], opts[512];
        bool found = false;

        if (!f)
                return false;
        while (!found && fscanf(f, "%255s %255s %63s %511s %*d %*d", src, mnt, type, opts) == 4) {
                if (strcmp(type, fstype) != 0)
                        continue;
                if (opt) {
                        bool has = false;
                        for (char *save, *t = strtok_r(opts, ",", &save); t; t = strtok_r(NULL, ",", &save))
                                has |= strcmp(t, opt) == 0;
                        if (!has)
                                continue;
                }
                snprintf(dir, len, "%s", mnt);
                found = true;
        }
        fclose(f);
        return found;
}

bool td_quota_cgroup(unsigned pct, char *dir, size_t dlen) {
        char mnt[256], path[640], val[64];

        if (cg_mount("cgroup2", NULL, mnt, sizeof(mnt))) {
                snprintf(path, sizeof(path), "%s/cgroup.subtree_control", mnt);
                (void)cg_write(path, "+cpu");
                snprintf(dir, dlen, "%s/zswap-throttle-%d", mnt, (int)getpid());
                if (mkdir(dir, 0755) == 0) {
                        snprintf(path, sizeof(path), "%s/cpu.max", dir);
                        snprintf(val, sizeof(val), "%u 100000", pct * 1000);
                        if (cg_write(path, val)) {
                                fprintf(stderr, "quota: cgroup v2 %s, cpu.max %s\n", dir, val);
                                return true;
                        }
                        rmdir(dir);
                }
        }
        if (cg_mount("cgroup", "cpu", mnt, sizeof(mnt))) {
                snprintf(dir, dlen, "%s/zswap-throttle-%d", mnt, (int)getpid());
                if (mkdir(dir, 0755) == 0) {
                        snprintf(path, sizeof(path), "%s/cpu.cfs_period_us", dir);
                        bool ok = cg_write(path, "100000");
                        snprintf(path, sizeof(path), "%s/cpu.cfs_quota_us", dir);
                        snprintf(val, sizeof(val), "%u", pct * 1000);
                        if (ok && cg_write(path, val)) {
                                fprintf(stderr, "quota: cgroup v1 %s, cfs_quota_us %s of 100000\n", dir, val);
                                return true;
                        }
                        rmdir(dir);
                }
        }
        return false;
}

bool td_cgroup_join(const char *dir, pid_t pid) {
        char path[600], val[32];
        snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
        snprintf(val, sizeof(val), "%d", (int)pid);
        return cg_write(path, val);
}

void td_cgroup_remove(const char *dir) {
        /* an exited member leaves it a moment after it is reaped */
        for (unsigned i = 0; rmdir(dir) < 0 && errno == EBUSY && i < 500; i++)
                usleep(10000);
}

bool td_status_field(const char *path, const char *key, char *out, size_t len) {
        char line[512];
        size_t kl = strlen(key);
        bool found = false;
        FILE *f = fopen(path, "re");

        if (!f)
                return false;
        while (!found && fgets(line, sizeof(line), f))
                if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
                        const char *v = line + kl + 1;
                        while (*v == ' ' || *v == '\t')
                                v++;
                        snprintf(out, len, "%s", v);
                        out[strcspn(out, "\n")] = 0;
                        found = true;
                }
        fclose(f);
        return found;
}

unsigned td_fd_count(const TestDaemon *d) {
        char path[64];
        unsigned n = 0;

        snprintf(path, sizeof(path), "/proc/%d/fd", (int)d->pid);
        DIR *dir = opendir(path);
        ASSERT_TRUE(dir != NULL);
        for (struct dirent *e; (e = readdir(dir));)
                n += e->d_name[0] != '.';
        closedir(dir);
        return n;
}

uint64_t td_rss_kb(const TestDaemon *d) {
        char path[64], v[64];

        snprintf(path, sizeof(path), "/proc/%d/status", (int)d->pid);
        return td_status_field(path, "VmRSS", v, sizeof(v)) ? strtoull(v, NULL, 10) : 0;
}

/* A hex field of a /proc status file; ~0 if missing (a thread gone). */
static unsigned long long status_hex(const char *path, const char *key) {
        char v[128];
        return td_status_field(path, key, v, sizeof(v)) ? strtoull(v, NULL, 16) : ~0ull;
}

unsigned td_assert_threads_unprivileged(const TestDaemon *d) {
        char dir[64], path[sizeof(dir) + 256 + 8];
        unsigned n = 0;
        struct dirent *e;

        snprintf(path, sizeof(path), "/proc/%d/status", (int)d->pid);
        unsigned long long eff = status_hex(path, "CapEff"), prm = status_hex(path, "CapPrm");
        ASSERT_TRUE(eff != ~0ull);
        snprintf(dir, sizeof(dir), "/proc/%d/task", (int)d->pid);
        DIR *dd = opendir(dir);
        ASSERT_TRUE(dd != NULL);
        while ((e = readdir(dd))) {
                if (e->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "%s/%s/status", dir, e->d_name);
                unsigned long long te = status_hex(path, "CapEff"), tp = status_hex(path, "CapPrm");
                if (te == ~0ull)
                        continue; /* gone meanwhile */
                if (te != eff || tp != prm)
                        test_fail("daemon thread %s: CapEff %#llx CapPrm %#llx, its main thread %#llx %#llx",
                                  e->d_name, te, tp, eff, prm);
                n++;
        }
        closedir(dd);
        return n;
}

/* ---- nbd-server ---- */

int td_free_port(void) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof(sa);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        ASSERT_OK(fd);
        ASSERT_OK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)));
        ASSERT_OK(getsockname(fd, (struct sockaddr *)&sa, &len));
        close(fd);
        return ntohs(sa.sin_port);
}

bool td_nbd_installed(void) {
        return system("command -v nbd-server >/dev/null 2>&1") == 0;
}

void td_nbd_stop(TdNbd *n) {
        char cmd[300];
        /* "serve[r]": the pattern must not match the shell running it */
        for (int i = 0; i < TEST_WAIT_S * 100; i++) {
                snprintf(cmd, sizeof(cmd), "pkill -KILL -f -- 'nbd-serve[r] -C %s/nbd.conf' 2>/dev/null", n->dir);
                (void)!system(cmd);
                snprintf(cmd, sizeof(cmd), "pgrep -f -- 'nbd-serve[r] -C %s/nbd.conf' >/dev/null", n->dir);
                if (system(cmd) != 0) {
                        n->running = false;
                        return;
                }
                usleep(10000);
        }
        test_fail("nbd-server does not go away");
}

/* A process of its own that, once this one has ended however it ended
 * (an assertion's abort() runs no atexit()), kills the servers of dir,
 * stopped ones too, and removes dir: nbd-server daemonizes, so nothing
 * else would. */
static void nbd_reaper(const char *dir) {
        pid_t owner = getpid();
        int pfd = (int)syscall(SYS_pidfd_open, owner, 0);
        ASSERT_OK(pfd);
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid > 0) {
                close(pfd);
                return;
        }
        char cmd[300];
        setsid();
        for (int fd = 3; fd < 1024; fd++)
                if (fd != pfd)
                        close(fd);
        struct pollfd p = { .fd = pfd, .events = POLLIN };
        while (poll(&p, 1, -1) < 0 && errno == EINTR)
                ;
        snprintf(cmd, sizeof(cmd), "pkill -KILL -f -- 'nbd-serve[r] -C %s/nbd.conf'; rm -rf '%s'", dir, dir);
        (void)!system(cmd);
        _exit(0);
}

void td_nbd_start(TdNbd *n) {
        char conf[160], cmd[300];

        if (!n->dir[0]) {
                snprintf(n->dir, sizeof(n->dir), "/var/tmp/zswap-test-nbd-%d", (int)getpid());
                mkdir(n->dir, 0700);
                nbd_reaper(n->dir);
                snprintf(cmd, sizeof(cmd), "truncate -s 64M '%s/export.img'", n->dir);
                ASSERT_EQ(system(cmd), 0);
                n->port = td_free_port();
                snprintf(conf, sizeof(conf), "%s/nbd.conf", n->dir);
                FILE *f = fopen(conf, "we");
                ASSERT_TRUE(f);
                fprintf(f, "[generic]\nport = %d\nlistenaddr = 127.0.0.1\n\n[tier]\nexportname = %s/export.img\n",
                        n->port, n->dir);
                ASSERT_OK(fclose(f));
        }
        snprintf(cmd, sizeof(cmd), "nbd-server -C %s/nbd.conf >/dev/null 2>&1", n->dir);
        ASSERT_EQ(system(cmd), 0); /* it forks into the background */
        n->running = true;
        for (int i = 0; i < TEST_WAIT_S * 100; i++) {
                int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)n->port),
                                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
                int r = connect(s, (struct sockaddr *)&a, sizeof(a));
                close(s);
                if (r == 0)
                        return;
                usleep(10000);
        }
        test_fail("nbd-server does not listen on port %d", n->port);
}

void td_nbd_pause(TdNbd *n) {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "pgrep -f -- 'nbd-serve[r] -C %s/nbd.conf'", n->dir);
        FILE *p = popen(cmd, "re");
        ASSERT_TRUE(p != NULL);
        n->nstopped = 0;
        for (int pid; n->nstopped < ELEMENTSOF(n->stopped) && fscanf(p, "%d", &pid) == 1;)
                n->stopped[n->nstopped++] = pid;
        pclose(p);
        ASSERT_TRUE(n->nstopped > 0);
        for (unsigned i = 0; i < n->nstopped; i++)
                ASSERT_OK(kill(n->stopped[i], SIGSTOP));
}

void td_nbd_resume(TdNbd *n) {
        for (unsigned i = 0; i < n->nstopped; i++)
                (void)kill(n->stopped[i], SIGCONT);
        n->nstopped = 0;
}

void td_nbd_remove(TdNbd *n) {
        char cmd[160];
        if (n->running)
                td_nbd_stop(n);
        if (!n->dir[0])
                return;
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", n->dir);
        (void)!system(cmd);
        n->dir[0] = 0;
}

/* ---- a second tier's pages ---- */

void td_tier_fill(const TestDaemon *d, struct zswap_client *c, uint8_t *buf, size_t len, uint64_t min_tier) {
        const uint64_t npages = len / ZSWAP_PAGE_SIZE;
        uint64_t deadline = now_ns() + TEST_WAIT_S * 1000000000ull;
        ZMsgStatusReply st;

        for (;;) {
                ASSERT_OK(zswap_pageout(c, buf, len));
                td_status(d, &st);
                uint64_t held = st.stats.stored_pages + st.stats.same_pages;
                if (held >= npages * 9 / 10 && st.tier_pages >= min_tier)
                        return;
                if (now_ns() > deadline) {
                        td_log_dump(d);
                        test_fail("after %d s: %llu of %llu pages held, %llu on the tier (pool %llu bytes, "
                                  "tier state %d, errors %llu/%llu)",
                                  TEST_WAIT_S, (unsigned long long)held, (unsigned long long)npages,
                                  (unsigned long long)st.tier_pages, (unsigned long long)st.stats.pool_bytes,
                                  st.tier_state, (unsigned long long)st.tier_write_errors,
                                  (unsigned long long)st.tier_read_errors);
                }
                usleep(20000);
        }
}

void td_tier_settled(const TestDaemon *d, ZMsgStatusReply *st) {
        ZMsgStatusReply prev;

        td_status(d, st);
        for (int i = 0; i < 100; i++) {
                prev = *st;
                usleep(200000);
                td_status(d, st);
                if (st->tier_written == prev.tier_written)
                        break;
        }
}

void *td_page_reader(void *arg) {
        TdPageReader *r = arg;
        for (size_t i = 0; i < r->npages; i++) {
                atomic_fetch_add(&r->bad, page_hash(r->buf + i * ZSWAP_PAGE_SIZE) != r->hashes[i]);
                atomic_store(&r->at, i + 1);
        }
        atomic_store(&r->done, true);
        return NULL;
}

size_t td_page_reader_stall(TdPageReader *r, const char *what) {
        size_t at = SIZE_MAX;
        for (int i = 0;; i++) {
                if (i >= TEST_WAIT_S * 10 || atomic_load(&r->done))
                        test_fail("%s did not wait in a fault (%zu of %zu pages read)", what, atomic_load(&r->at),
                                  r->npages);
                size_t now = atomic_load(&r->at);
                if (now == at && i % 10 == 9)
                        return now;
                if (i % 10 == 0)
                        at = now;
                usleep(100000);
        }
}
