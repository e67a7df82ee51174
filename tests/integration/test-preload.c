/*
 * test-preload: unmodified programs under zswap-run (the LD_PRELOAD shim,
 * client/preload/preload.c), evicted from outside with `zswapctl pageout PID`.
 *
 * 1. preload-victim: threads churning malloc/realloc/free over every block
 *    size, mremap and MADV_DONTNEED of their own regions, checking every
 *    byte, while the test evicts the process every 200 ms, for 5 s and
 *    on until 1000 pages were evicted; then a forked child checks
 *    everything again. No bad byte, pages really evicted.
 * 2. python3 with a large dict: at least 80 % of its RssAnon evicted, and
 *    the digest of all its data computed inside python is the same after.
 * 3. The same python under --limit 64M stays under it.
 * 4. redis-server: populated, half its RssAnon evicted, benchmarked, same
 *    DEBUG DIGEST; a BGSAVE after eviction loads back with that digest.
 * 5. sqlite3 with an in-memory database: integrity_check ok and the same
 *    query results after eviction.
 * 6. No daemon: the program runs unmanaged to the end, with one line on
 *    stderr.
 * 7. The scanner's CPUs: it starts on its starter's CPU and takes back
 *    the rest when it first wakes; once attached, every thread of a
 *    process and of its fork child may run where its main thread may.
 * 8. A shell: bash attached at once (ZSWAP_ATTACH_MS=0) runs subshells,
 *    each forking before it has attached (its parent held nothing, so it
 *    attaches late: client/lib/libzswap.c child_pending), and so attaching
 *    in the fork's prepare handler; every command's output is right, the
 *    daemon saw the subshells attach, and nothing is said on stderr (a
 *    child attaching while it execs: the kernel refuses it a thread).
 */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "util.h"

static char run_path[PATH_MAX], ctl_path[PATH_MAX], victim_path[PATH_MAX];

typedef struct Child {
        pid_t pid;
        FILE *out; /* its stdout */
        FILE *in;  /* its stdin */
        int err;   /* its stderr, read end */
} Child;

static void spawn(Child *c, char *const argv[]) {
        int o[2], i[2], e[2];
        ASSERT_OK(pipe2(o, O_CLOEXEC));
        ASSERT_OK(pipe2(i, O_CLOEXEC));
        ASSERT_OK(pipe2(e, O_CLOEXEC));
        c->pid = fork();
        ASSERT_TRUE(c->pid >= 0);
        if (c->pid == 0) {
                dup2(i[0], 0);
                dup2(o[1], 1);
                dup2(e[1], 2);
                execv(argv[0], argv);
                _exit(127);
        }
        close(i[0]);
        close(o[1]);
        close(e[1]);
        c->out = fdopen(o[0], "r");
        c->in = fdopen(i[1], "w");
        c->err = e[0];
}

static int finish(Child *c, char *err, size_t cap) {
        int st;
        size_t n = 0;
        ssize_t r;
        fclose(c->in);
        while (n + 1 < cap && (r = read(c->err, err + n, cap - 1 - n)) > 0)
                n += (size_t)r;
        err[n] = 0;
        close(c->err);
        fclose(c->out);
        ASSERT_EQ(waitpid(c->pid, &st, 0), c->pid);
        return st;
}

/* Pageouts of one process so far: pages evicted, calls, RssAnon left. */
typedef struct Evicted {
        long pages, calls;
        uint64_t rest;
} Evicted;

/* One more `zswapctl pageout PID`; whether at most 1/keep_div of before
 * is still resident and something was evicted. */
static bool pageout_more(TestDaemon *d, pid_t pid, uint64_t before, unsigned keep_div, Evicted *e) {
        long r = td_pageout_pid(d, pid, 0, 0);

        e->calls++;
        e->pages += r > 0 ? r : 0;
        e->rest = rss_anon_bytes(pid);
        return e->pages > 0 && e->rest <= before / keep_div;
}

/* `zswapctl pageout PID` until at most 1/keep_div of the RssAnon the
 * program had is still resident: the shim's scanner registers what the
 * program built in its own time (later on a loaded machine), so one
 * pageout may find only part of it. */
static void pageout_most(TestDaemon *d, pid_t pid, const char *what, unsigned keep_div) {
        uint64_t before = rss_anon_bytes(pid);
        Evicted e = { 0 };

        WAIT_UNTIL(pageout_more(d, pid, before, keep_div, &e), TEST_WAIT_S,
                   "%s: RssAnon %llu KiB, %ld pages evicted in %ld pageouts, %llu KiB left", what,
                   (unsigned long long)before >> 10, e.pages, e.calls, (unsigned long long)e.rest >> 10);
        fprintf(stderr, "%s: RssAnon %llu KiB, %ld pages evicted in %ld pageouts, then %llu KiB (%.1f %% out)\n",
                what, (unsigned long long)before >> 10, e.pages, e.calls, (unsigned long long)e.rest >> 10,
                100.0 * (double)(before - e.rest) / (double)before);
}

static void codecs(TestDaemon *d, pid_t attached);

static void churn(TestDaemon *d) {
        char *argv[] = { run_path, "--socket", d->sock, "--", victim_path, "5", "4", "stdin", NULL }, err[4096], line[128];
        Child c;
        long total = 0, calls = 0;

        spawn(&c, argv);
        ASSERT_TRUE(fgets(line, sizeof(line), c.out));
        pid_t pid = (pid_t)atoi(line);
        /* evictions every 200 ms, racing the program's churn, for its 5 s
         * and on until 1000 pages were evicted: one pageout of all of it
         * may take seconds on a loaded machine */
        uint64_t start = now_ns(), bound = start + TEST_WAIT_S * 1000000000ull;
        while (now_ns() < start + 5000000000ull || total <= 1000) {
                if (now_ns() > bound)
                        test_fail("churn: %ld pages evicted in %ld pageouts in %.0f s, not 1000", total, calls,
                                  (double)(now_ns() - start) / 1e9);
                usleep(200000);
                long n = td_pageout_pid(d, pid, 0, 0);
                if (n >= 0) {
                        total += n;
                        calls++;
                }
        }
        codecs(d, pid);
        fputs("stop\n", c.in);
        fflush(c.in);
        ASSERT_TRUE(fgets(line, sizeof(line), c.out));
        int st = finish(&c, err, sizeof(err));
        fprintf(stderr, "churn: %s", line);
        fprintf(stderr, "churn: %ld pages evicted in %ld pageouts\n", total, calls);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || strncmp(line, "errors 0 ", 9) != 0)
                test_fail("the churning program found bad data: status %#x, '%s', stderr: %s", st, line, err);
        if (strstr(err, "zswap:"))
                test_fail("the shim complained: %s", err);
        ASSERT_TRUE(calls >= 1 && total > 1000);
}

/* limit: 0 for a pageout from outside, else zswap-run --limit (MiB) */
static void python(TestDaemon *d, unsigned limit_mb) {
        char limit[32];
        char *argv[] = { run_path, "--socket", d->sock, "--limit", limit, "--", "/usr/bin/env", "python3", NULL, NULL, NULL };
        char script[PATH_MAX], err[4096], line[256], digest[128], after[128];
        const char *src = getenv("ZSWAP_TEST_SRC");
        Child c;
        int pid;

        if (system("python3 -c 1 >/dev/null 2>&1") != 0) {
                fprintf(stderr, "python: no python3 here (scripts/setup-deps.sh installs it)\n");
                test_fail("python3 missing");
        }
        snprintf(script, sizeof(script), "%s/pydict.py", src ? src : ".");
        snprintf(limit, sizeof(limit), "%uM", limit_mb);
        char **args = limit_mb ? argv : argv + 2;
        if (!limit_mb) {
                args[0] = run_path;
                args[1] = "--socket";
                args[2] = d->sock;
        }
        argv[8] = script;
        /* ~670 bytes of RssAnon an entry: 260 MiB to page out; 100 MiB
         * under the limit, which keeps evicting while python grows (at
         * about 1 MB/s on this project's machines: 400000 entries took
         * over 4 minutes there) */
        argv[9] = limit_mb ? "150000" : "400000";
        spawn(&c, args);
        ASSERT_TRUE(fgets(line, sizeof(line), c.out));
        ASSERT_EQ(sscanf(line, "%d %127s", &pid, digest), 2);
        if (!limit_mb) {
                pageout_most(d, pid, "python", 5);
        } else {
                /* the shim keeps it under the limit by itself */
                uint64_t rss;
                WAIT_UNTIL((rss = rss_anon_bytes(pid)) <= (uint64_t)limit_mb << 20, TEST_WAIT_S,
                           "python --limit %uM: RssAnon %llu KiB", limit_mb, (unsigned long long)rss >> 10);
                fprintf(stderr, "python --limit %uM: RssAnon %llu KiB\n", limit_mb, (unsigned long long)rss >> 10);
        }
        fputs("go\n", c.in);
        fflush(c.in);
        ASSERT_TRUE(fgets(line, sizeof(line), c.out));
        ASSERT_EQ(sscanf(line, "%127s", after), 1);
        int st = finish(&c, err, sizeof(err));
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        if (strcmp(digest, after) != 0)
                test_fail("python's data changed: %s before, %s after", digest, after);
}

/* Run a shell command; its stdout, trailing newline cut. Fails the test
 * if it fails. */
static char *sh(const char *fmt, ...) {
        static char out[4096];
        char cmd[2048];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(cmd, sizeof(cmd), fmt, ap);
        va_end(ap);
        FILE *p = popen(cmd, "r");
        ASSERT_TRUE(p);
        size_t n = fread(out, 1, sizeof(out) - 1, p);
        out[n] = 0;
        int st = pclose(p);
        if (st != 0)
                test_fail("'%s' failed (status %#x): %s", cmd, st, out);
        while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r'))
                out[--n] = 0;
        return out;
}

static void shell(TestDaemon *d) {
        unsigned before = td_log_count(d, "forked child pid");
        char *out = sh("ZSWAP_ATTACH_MS=0 timeout %d %s --socket %s -- bash -c "
                       "'for i in $(seq 200); do ( /bin/true; x=$(echo $i); [ \"$x\" = $i ] || exit 3 ); done; echo ok' 2>&1",
                       TEST_WAIT_S, run_path, d->sock);
        ASSERT_STREQ(out, "ok");
        unsigned attached = td_log_count(d, "forked child pid") - before;
        fprintf(stderr, "shell: 200 subshells, %u fork children attached\n", attached);
        ASSERT_TRUE(attached >= 200);
}

/*
 * The shim's scanner starts pinned to the CPU of the thread that starts
 * it, so that a process that ends or execs before the scanner wakes pays
 * no other CPU for it (preload.c, scanner_start()); it must take back
 * every CPU its starter had once it wakes, or a long-lived program keeps
 * a thread of its own on one CPU. A process and its fork child (a
 * subshell), each once attached (three threads: the program's, the
 * scanner, the agent): every thread of each may run where its main
 * thread may. Proves nothing on a machine (or a test) with one CPU.
 */
static void cpus(TestDaemon *d) {
        char *out = sh("ZSWAP_ATTACH_MS=100 timeout %d %s --socket %s -- bash -c '"
                       "t() { for i in $(seq 300); do [ $(ls /proc/$1/task | wc -l) -ge 3 ] && break; sleep 0.1; done; "
                       "echo $(ls /proc/$1/task | wc -l) $(grep -h Cpus_allowed_list /proc/$1/task/*/status | sort -u | "
                       "wc -l) $(grep Cpus_allowed_list /proc/$1/status | cut -f2); }; t $$; ( t $BASHPID )' 2>&1",
                       TEST_WAIT_S, run_path, d->sock);
        unsigned threads[2], lists[2];
        char allowed[2][128];
        if (sscanf(out, "%u %u %127s %u %u %127s", &threads[0], &lists[0], allowed[0], &threads[1], &lists[1],
                   allowed[1]) != 6)
                test_fail("cpus: the shell said: %s", out);
        fprintf(stderr, "cpus: %s\n", out);
        for (int i = 0; i < 2; i++) {
                const char *who = i ? "the fork child" : "the process";
                if (threads[i] < 3)
                        test_fail("cpus: %s never attached (%u threads)", who, threads[i]);
                if (!strpbrk(allowed[i], ",-")) {
                        fprintf(stderr, "cpus: %s may run on CPU %s alone: nothing to check\n", who, allowed[i]);
                        continue;
                }
                if (lists[i] != 1)
                        test_fail("cpus: the threads of %s may not all run where its main thread may (%s): %s", who,
                                  allowed[i], out);
        }
}

/* A shell under --limit whose subshells attach and exit, and a Python
 * that starts a subprocess: nothing is said on the program's stderr (fork
 * children once had their share of the limit refused, "No such process",
 * one line each; Python's subprocess children, which close every
 * descriptor before their exec, one line each), and the daemon logs each
 * process's limit once at most (the shim's adjustments, about one a
 * second a process, only for debugging). */
static void quiet(TestDaemon *d) {
        unsigned before = td_log_count(d, "attached");
        unsigned limits = td_log_count(d, "resident limit");
        char *out = sh("ZSWAP_ATTACH_MS=0 timeout %d %s --socket %s --limit 48M -- bash -c "
                       "'for i in $(seq 20); do ( x=$(echo $i; sleep 0.05); sleep 0.05; [ \"$x\" = $i ] || exit 3 ); "
                       "done; echo ok' 2>&1",
                       TEST_WAIT_S, run_path, d->sock);
        ASSERT_STREQ(out, "ok");
        out = sh("ZSWAP_ATTACH_MS=0 timeout %d %s --socket %s -- python3 -c "
                 "'import subprocess, time; time.sleep(0.2); print(subprocess.run([\"echo\", \"ok\"], "
                 "capture_output=True, text=True).stdout.strip())' 2>&1",
                 TEST_WAIT_S, run_path, d->sock);
        ASSERT_STREQ(out, "ok");
        unsigned attached = td_log_count(d, "attached") - before;
        limits = td_log_count(d, "resident limit") - limits;
        fprintf(stderr, "quiet: %u processes attached, %u limit lines logged, nothing on stderr\n", attached, limits);
        ASSERT_TRUE(attached >= 20);
        ASSERT_TRUE(limits <= attached);
}

/* A statically linked program: zswap-run says in one line that it cannot
 * manage it, and runs it. */
static void static_cmd(TestDaemon *d) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s", victim_path);
        strcpy(strrchr(path, '/'), "/static-victim");
        char *out = sh("%s --socket %s -- %s 2>&1", run_path, d->sock, path);
        if (!strstr(out, "is statically linked: nothing can be preloaded into it") || !strstr(out, "static ok"))
                test_fail("static: zswap-run said: %s", out);
        fprintf(stderr, "static: %s\n", out);
}

/* A process that ends before it attaches never maps the codec libraries
 * (codec.c, CODEC_DLOPEN: they cost a short process a third of the
 * shim's price); one that attached has them, as its own (RTLD_LOCAL). */
static void codecs(TestDaemon *d, pid_t attached) {
        char *out = sh("ZSWAP_ATTACH_MS=60000 timeout %d %s --socket %s -- cat /proc/self/maps 2>&1 | "
                       "grep -oE '[^/]*(libzswap-preload|liblz4|libzstd)[^ ]*$' | sort -u",
                       TEST_WAIT_S, run_path, d->sock);
        ASSERT_TRUE(strstr(out, "libzswap-preload.so") != NULL);
        if (strstr(out, "liblz4") || strstr(out, "libzstd"))
                test_fail("a process that never attached mapped the codec libraries:\n%s", out);
        char path[64], line[512];
        bool lz4 = false;
        snprintf(path, sizeof(path), "/proc/%d/maps", (int)attached);
        FILE *f = fopen(path, "re");
        ASSERT_TRUE(f != NULL);
        while (fgets(line, sizeof(line), f))
                lz4 |= strstr(line, "liblz4.so") != NULL;
        fclose(f);
        if (!lz4)
                test_fail("a process that attached has no liblz4 mapped");
        fprintf(stderr, "codecs: loaded by the attached process only\n");
}

static void wait_for(const char *path) {
        WAIT_UNTIL(access(path, F_OK) == 0, TEST_WAIT_S, "no %s", path);
}

/*
 * redis-server (jemalloc): populated, digest recorded, more than half its
 * RssAnon evicted, redis-benchmark GET/SET run against it (in db 1, which
 * is then flushed, so db 0 is untouched), the digest is unchanged; a
 * BGSAVE (a fork of the evicted server) writes an RDB that a plain
 * redis-server loads with the same digest.
 */
static void redis(TestDaemon *d) {
        char dir[] = "/tmp/zswap-test-redis-XXXXXX", sock[PATH_MAX], plain[PATH_MAX], digest[64], err[4096];
        ASSERT_TRUE(mkdtemp(dir));
        snprintf(sock, sizeof(sock), "%s/redis.sock", dir);
        char *argv[] = { run_path, "--socket", d->sock, "--", "/usr/bin/redis-server", "--port", "0", "--unixsocket",
                         sock, "--save", "", "--appendonly", "no", "--dir", dir, "--enable-debug-command", "yes",
                         "--daemonize", "no", NULL };
        Child c;

        spawn(&c, argv);
        wait_for(sock);
        WAIT_UNTIL(strcmp(sh("redis-cli -s %s PING 2>&1 || true", sock), "PONG") == 0, TEST_WAIT_S, "redis-server does not answer");
        sh("redis-cli -s %s DEBUG POPULATE 400000 key 200", sock);
        snprintf(digest, sizeof(digest), "%s", sh("redis-cli -s %s DEBUG DIGEST", sock));
        pageout_most(d, c.pid, "redis", 2);
        sh("redis-benchmark -s %s --dbnum 1 -t get,set -n 20000 -r 100000 -q >/dev/null", sock);
        sh("redis-cli -s %s -n 1 FLUSHDB", sock);
        if (strcmp(sh("redis-cli -s %s DEBUG DIGEST", sock), digest) != 0)
                test_fail("redis digest changed: %s before", digest);
        /* BGSAVE: a fork of the evicted server writes every key */
        sh("redis-cli -s %s BGSAVE", sock);
        WAIT_UNTIL(strstr(sh("redis-cli -s %s INFO persistence", sock), "rdb_bgsave_in_progress:0"), TEST_WAIT_S,
                   "the BGSAVE is still in progress");
        if (!strstr(sh("redis-cli -s %s INFO persistence", sock), "rdb_last_bgsave_status:ok"))
                test_fail("BGSAVE failed");
        sh("redis-cli -s %s SHUTDOWN NOSAVE || true", sock);
        int st = finish(&c, err, sizeof(err));
        (void)st;
        /* the RDB, loaded by a redis-server nobody manages */
        snprintf(plain, sizeof(plain), "%s/plain.sock", dir);
        sh("redis-server --port 0 --unixsocket %s --dir %s --appendonly no --save '' --enable-debug-command yes "
           "--daemonize yes --pidfile %s/plain.pid --logfile %s/plain.log",
           plain, dir, dir, dir);
        wait_for(plain);
        WAIT_UNTIL(!strstr(sh("redis-cli -s %s PING 2>&1", plain), "LOADING"), TEST_WAIT_S, "redis still loads the RDB");
        char *loaded = sh("redis-cli -s %s DEBUG DIGEST", plain);
        bool same = strcmp(loaded, digest) == 0;
        sh("redis-cli -s %s SHUTDOWN NOSAVE || true", plain);
        if (!same)
                test_fail("the RDB written after eviction loads with digest %s, not %s", loaded, digest);
        sh("rm -rf %s", dir);
}

/*
 * sqlite3 with a large in-memory database: integrity_check ok and the same
 * query results before and after its memory was evicted.
 */
static void sqlite(TestDaemon *d) {
        char *argv[] = { run_path, "--socket", d->sock, "--", "/usr/bin/sqlite3", "-batch", ":memory:", NULL };
        const char *query = "SELECT count(*), sum(a), total(length(t)), sum(unicode(substr(t, 30, 1))), max(t) FROM x;\n";
        char line[512], first[512], err[4096], flag[64];
        snprintf(flag, sizeof(flag), "/tmp/zswap-test-sqlite-%d", (int)getpid());
        Child c;

        spawn(&c, argv);
        fputs("CREATE TABLE x(a INTEGER PRIMARY KEY, t TEXT);\n"
              "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000)\n"
              "  INSERT INTO x SELECT i, printf('row %08d: customer %d of region %s, status %s', i, i * 7919 % 1000003,\n"
              "    substr('northsoutheastwestcentral', 1 + i % 21, 5), CASE i % 3 WHEN 0 THEN 'open' ELSE 'closed' END) FROM n;\n"
              "CREATE INDEX xt ON x(t);\n",
              c.in);
        fputs(query, c.in);
        fputs(".print ready\n", c.in);
        /* sqlite3 writes to a pipe only when its buffer fills or it exits,
         * so it says "built" through a file (a fork and exec of the
         * managed process, too) */
        fprintf(c.in, ".shell touch %s\n", flag);
        fflush(c.in);
        WAIT_UNTIL(access(flag, F_OK) == 0, 5 * TEST_WAIT_S, "sqlite3 has not built its database");
        unlink(flag);
        pageout_most(d, c.pid, "sqlite3", 2);
        fputs("PRAGMA integrity_check;\n", c.in);
        fputs(query, c.in);
        fputs(".quit\n", c.in);
        fflush(c.in);
        ASSERT_TRUE(fgets(first, sizeof(first), c.out));
        ASSERT_TRUE(fgets(line, sizeof(line), c.out));
        ASSERT_TRUE(strcmp(line, "ready\n") == 0);
        ASSERT_TRUE(fgets(line, sizeof(line), c.out));
        if (strcmp(line, "ok\n") != 0)
                test_fail("integrity_check after eviction: %s", line);
        ASSERT_TRUE(fgets(line, sizeof(line), c.out));
        if (strcmp(line, first) != 0)
                test_fail("sqlite3 answers differ after eviction:\n%s%s", first, line);
        int st = finish(&c, err, sizeof(err));
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void fail_open(void) {
        char *argv[] = { run_path, "--socket", "/nonexistent/zswapd.sock", victim_path, "1", "2", NULL };
        char err[4096], line[128];
        Child c;

        spawn(&c, argv);
        ASSERT_TRUE(fgets(line, sizeof(line), c.out));
        ASSERT_TRUE(fgets(line, sizeof(line), c.out));
        int st = finish(&c, err, sizeof(err));
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || strncmp(line, "errors 0 ", 9) != 0)
                test_fail("without a daemon: status %#x, '%s', stderr: %s", st, line, err);
        /* one line from the process (the forked child does not connect again) */
        char *first = strstr(err, "not managing memory");
        if (!first || strstr(first + 1, "not managing memory") || strchr(err, '\n') != strrchr(err, '\n'))
                test_fail("expected one line on stderr, got: %s", err);
}

int main(void) {
        TestDaemon d;
        /* (a sanitized shim cannot be preloaded into python: the
         * runtime must come first; the plain build runs this test) */
        td_shim_paths(run_path, ctl_path, victim_path, "preload-victim");

        td_start_logged(&d, getenv("TEST_DAEMON_ARGS"));
        uint64_t t = now_ns();
#define PHASE(name, call)                                                                                  \
        do {                                                                                               \
                call;                                                                                      \
                fprintf(stderr, "-- %s took %.1f s\n", name, (double)(now_ns() - t) / 1e9);                 \
                t = now_ns();                                                                              \
        } while (0)
        PHASE("cpus", cpus(&d));
        PHASE("shell", shell(&d));
        PHASE("quiet", quiet(&d));
        PHASE("static", static_cmd(&d));
        PHASE("churn", churn(&d));
        PHASE("python", python(&d, 0));
        PHASE("python --limit", python(&d, 64));
        PHASE("redis", redis(&d));
        PHASE("sqlite", sqlite(&d));
        td_stop(&d);
        PHASE("no daemon", fail_open());
        return 0;
}
