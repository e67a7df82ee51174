/*
 * test-zswapctl: `zswapctl status` reports what the daemon holds (text and
 * JSON agree with the library's counters, fault latency is there and in
 * order once pages came back); `clients` lists this process with its
 * command and figures, in a table whose columns -o picks and as JSON that
 * python reads, over several replies when there are many clients, and to
 * another user not at all; `metrics` is valid Prometheus text (checked line
 * by line) with the same figures; `pageout`, `limit`, `set` and `get` steer
 * it, and refusals say what to do: no daemon, not an admin, no such
 * client, a value that does not parse, a usage error.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "protocol.h"
#include "tunable-keys.h"
#include "util.h"

static char *run(const char *cmd, int *status) {
        static char out[65536];
        FILE *p = popen(cmd, "r");
        ASSERT_TRUE(p);
        size_t n = fread(out, 1, sizeof(out) - 1, p);
        out[n] = 0;
        *status = pclose(p);
        return out;
}

static unsigned long long json_field(const char *json, const char *key) {
        char pat[64];
        snprintf(pat, sizeof(pat), "\"%s\": ", key);
        const char *p = strstr(json, pat);
        if (!p)
                test_fail("no %s in %s", key, json);
        return strtoull(p + strlen(pat), NULL, 10);
}

static uint64_t held(struct zswap_client *c) {
        struct zswap_stats s;
        td_stats(c, &s);
        return s.stored_pages + s.same_pages;
}

/* `zswapctl pageout PID [ADDR LEN]`: another program's view of this one */
/* cmd must exit with status and print want (a substring) */
static void expect(const char *cmd, int status, const char *want) {
        int st;
        char *out = run(cmd, &st);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != status || !strstr(out, want))
                test_fail("%s: status %#x, not %d with '%s':\n%s", cmd, st, status, want, out);
}

/* Of npages pages at buf, how many a child process fails to read as
 * written through /proc/PARENT/mem, as a debugger reads (-1: it could not
 * look). */
static long remote_unreadable(const uint8_t *buf, size_t npages, const uint64_t *hashes) {
        int p[2];
        pid_t parent = getpid();
        ASSERT_OK(pipe(p));
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                char path[64];
                static uint8_t page[ZSWAP_PAGE_SIZE];
                long bad = 0;
                snprintf(path, sizeof(path), "/proc/%d/mem", (int)parent);
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        bad = -1;
                for (size_t i = 0; fd >= 0 && i < npages; i++)
                        if (pread(fd, page, sizeof(page), (off_t)(uintptr_t)(buf + i * ZSWAP_PAGE_SIZE)) !=
                                    (ssize_t)sizeof(page) ||
                            page_hash(page) != hashes[i])
                                bad++;
                (void)!write(p[1], &bad, sizeof(bad));
                _exit(0);
        }
        close(p[1]);
        long bad = -1;
        ASSERT_EQ(read(p[0], &bad, sizeof(bad)), (ssize_t)sizeof(bad));
        close(p[0]);
        ASSERT_EQ(waitpid(pid, NULL, 0), pid);
        ASSERT_TRUE(bad >= 0);
        return bad;
}

static void pageout_pid(const char *ctl, TestDaemon *d, struct zswap_client *c, uint8_t *buf, const uint64_t *hashes) {
        const size_t npages = 4096, len = npages * ZSWAP_PAGE_SIZE;
        char cmd[PATH_MAX + 256];
        int st;

        /* everything: every page of the region was resident again */
        ASSERT_EQ(held(c), 0);
        snprintf(cmd, sizeof(cmd), "%s --socket %s pageout %d --json", ctl, d->sock, (int)getpid());
        char *out = run(cmd, &st);
        ASSERT_EQ(st, 0);
        ASSERT_EQ(json_field(out, "evicted_pages"), held(c));
        ASSERT_TRUE(held(c) > npages * 9 / 10);

        /* pagein: what a debugger sees. gdb and gcore read another
         * process through /proc/PID/mem, where an evicted page is an error
         * (the kernel hands a remote access to a userfault no fault);
         * after pagein every page is back and such a read sees it */
        uint64_t before = held(c);
        long unread = remote_unreadable(buf, npages, hashes);
        fprintf(stderr, "pagein: %llu pages held, %ld of %zu unreadable through /proc/PID/mem\n",
                (unsigned long long)before, unread, npages);
        ASSERT_TRUE(unread > 0);
        snprintf(cmd, sizeof(cmd), "%s --socket %s pagein %d --json", ctl, d->sock, (int)getpid());
        out = run(cmd, &st);
        ASSERT_EQ(st, 0);
        ASSERT_EQ(json_field(out, "held_pages"), before);
        ASSERT_EQ(held(c), 0);
        ASSERT_EQ(remote_unreadable(buf, npages, hashes), 0);
        snprintf(cmd, sizeof(cmd), "%s --socket %s get --pid %d reclaim", ctl, d->sock, (int)getpid());
        expect(cmd, 0, "reclaim = no\n");
        snprintf(cmd, sizeof(cmd), "%s --socket %s set --pid %d reclaim yes", ctl, d->sock, (int)getpid());
        expect(cmd, 0, "reclaim = yes\n");
        /* out again, for what follows */
        snprintf(cmd, sizeof(cmd), "%s --socket %s pageout %d", ctl, d->sock, (int)getpid());
        expect(cmd, 0, " pages evicted\n");
        ASSERT_EQ(verify_pages(buf, len, hashes), 0);

        /* a range: 16 pages from the 8th */
        snprintf(cmd, sizeof(cmd), "%s --socket %s pageout %d %#llx 64K", ctl, d->sock, (int)getpid(),
                 (unsigned long long)(uintptr_t)(buf + 8 * ZSWAP_PAGE_SIZE));
        out = run(cmd, &st);
        ASSERT_EQ(st, 0);
        char want[64];
        snprintf(want, sizeof(want), "process %d: %llu pages evicted\n", (int)getpid(), (unsigned long long)held(c));
        if (!strstr(out, want) || held(c) == 0 || held(c) > 16)
                test_fail("pageout of 16 pages: '%s', %llu held", out, (unsigned long long)held(c));
        ASSERT_EQ(verify_pages(buf, len, hashes), 0);

        /* a process without a client, nonsense, another user's process */
        snprintf(cmd, sizeof(cmd), "%s --socket %s pageout 1 2>&1", ctl, d->sock);
        out = run(cmd, &st);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 1 || !strstr(out, "has no memory managed by zswapd"))
                test_fail("pageout of init: status %#x, '%s'", st, out);
        /* a process that is no more: said so, not "no memory managed" */
        pid_t gone = fork();
        ASSERT_TRUE(gone >= 0);
        if (gone == 0)
                _exit(0);
        ASSERT_EQ(waitpid(gone, NULL, 0), gone);
        snprintf(cmd, sizeof(cmd), "%s --socket %s pageout %d 2>&1", ctl, d->sock, (int)gone);
        out = run(cmd, &st);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 1 || !strstr(out, "no such process"))
                test_fail("pageout of an exited process: status %#x, '%s'", st, out);
        snprintf(cmd, sizeof(cmd), "%s --socket %s pageout 12x 2>&1", ctl, d->sock);
        out = run(cmd, &st);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 2 || !strstr(out, "not a process id"))
                test_fail("pageout 12x: status %#x, '%s'", st, out);
        snprintf(cmd, sizeof(cmd), "setpriv --reuid=65534 --regid=65534 --clear-groups %s --socket %s pageout %d 2>&1",
                 ctl, d->sock, (int)getpid());
        out = run(cmd, &st);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 1 ||
            !strstr(out, "permission denied: admin commands need root or group zswap"))
                test_fail("pageout as nobody: status %#x, '%s'", st, out);
        ASSERT_EQ(verify_pages(buf, len, hashes), 0);
}


/* `zswapctl limit`, `set` and `get`, daemon-wide and per client */
static void tunables(const char *ctl, TestDaemon *d) {
        char pre[PATH_MAX + 128], cmd[2 * PATH_MAX], want[64];
        int st, pid = (int)getpid();

        snprintf(pre, sizeof(pre), "%s --socket %s", ctl, d->sock);
        /* every key, in the JSON form */
        snprintf(cmd, sizeof(cmd), "%s get --json", pre);
        char *out = run(cmd, &st);
        ASSERT_EQ(st, 0);
        for (size_t i = 0; i < _TUNABLE_KEY_MAX; i++) {
                snprintf(want, sizeof(want), "\"%s\": \"", tunable_names[i]);
                if (!strstr(out, want))
                        test_fail("get --json lacks %s: %s", tunable_names[i], out);
        }
        snprintf(cmd, sizeof(cmd), "%s set interval 0.5", pre);
        expect(cmd, 0, "interval = 500ms\n");
        snprintf(cmd, sizeof(cmd), "%s get interval", pre);
        expect(cmd, 0, "interval = 500ms\n");
        /* KEY=VALUE, as zswapd --set takes it */
        snprintf(cmd, sizeof(cmd), "%s set interval=0.25", pre);
        expect(cmd, 0, "interval = 250ms\n");
        snprintf(cmd, sizeof(cmd), "%s set interval=500ms", pre);
        expect(cmd, 0, "interval = 500ms\n");
        snprintf(cmd, sizeof(cmd), "%s set interval 5ms 2>&1", pre);
        expect(cmd, 1, "interval: 5ms is not a duration between 10ms and 10s");
        snprintf(cmd, sizeof(cmd), "%s set bogus 1 2>&1", pre);
        expect(cmd, 1, "unknown key 'bogus'");
        snprintf(cmd, sizeof(cmd), "setpriv --reuid=65534 --regid=65534 --clear-groups %s set interval 1s 2>&1", pre);
        expect(cmd, 1, "permission denied: admin commands need root or group zswap");
        snprintf(cmd, sizeof(cmd), "%s get interval", pre);
        expect(cmd, 0, "interval = 500ms\n");

        /* this process's own settings */
        snprintf(cmd, sizeof(cmd), "%s set --pid %d limit 1G", pre, pid);
        expect(cmd, 0, "limit = 1G\n");
        snprintf(cmd, sizeof(cmd), "%s get --pid %d --json", pre, pid);
        expect(cmd, 0, "\"limit\": \"1G\"");
        snprintf(cmd, sizeof(cmd), "%s limit %d 2G", pre, pid);
        expect(cmd, 0, "limit 2G\n");
        snprintf(cmd, sizeof(cmd), "%s get --pid %d limit", pre, pid);
        expect(cmd, 0, "limit = 2G\n");
        snprintf(cmd, sizeof(cmd), "%s limit %d none", pre, pid);
        expect(cmd, 0, "no limit\n");
        snprintf(cmd, sizeof(cmd), "%s limit 1 64M 2>&1", pre);
        expect(cmd, 1, "process 1 has no memory managed by zswapd");
        snprintf(cmd, sizeof(cmd), "%s set --pid 1 idle_age 1m 2>&1", pre);
        expect(cmd, 1, "process 1 has no memory managed by zswapd");
        /* refused before asking */
        snprintf(cmd, sizeof(cmd), "%s limit %d 12x 2>&1", pre, pid);
        expect(cmd, 2, "'12x' is not a size");
        snprintf(cmd, sizeof(cmd), "%s --pid %d status 2>&1", pre, pid);
        expect(cmd, 2, "--pid is for set and get");
}

/* ---- status, clients, metrics ---- */

/* Does python3 read text as JSON? Skip-free: python3 is part of the test
 * setup (pydict.py), so a missing one fails. */
static bool json_valid(const char *text) {
        char path[] = "/tmp/test-zswapctl-XXXXXX";
        int fd = mkstemp(path), st;
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(write(fd, text, strlen(text)), (ssize_t)strlen(text));
        close(fd);
        char cmd[PATH_MAX + 96];
        snprintf(cmd, sizeof(cmd), "python3 -c 'import json,sys; json.load(sys.stdin)' < %s", path);
        st = system(cmd);
        unlink(path);
        return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static double json_real(const char *json, const char *key) {
        char pat[64];
        snprintf(pat, sizeof(pat), "\"%s\": ", key);
        const char *p = strstr(json, pat);
        if (!p)
                test_fail("no %s in %s", key, json);
        return strtod(p + strlen(pat), NULL);
}

/* The string value of key, into buf. */
static const char *json_str(const char *json, const char *key, char *buf, size_t len) {
        char pat[64];
        snprintf(pat, sizeof(pat), "\"%s\": \"", key);
        const char *p = strstr(json, pat);
        if (!p)
                test_fail("no string %s in %s", key, json);
        p += strlen(pat);
        size_t n = strcspn(p, "\"");
        snprintf(buf, len, "%.*s", (int)MIN(n, len - 1), p);
        return buf;
}

/* Words of a line, up to max; returns how many. */
static size_t split(char *line, char **w, size_t max) {
        size_t n = 0;
        for (char *t = strtok(line, " \n"); t && n < max; t = strtok(NULL, " \n"))
                w[n++] = t;
        return n;
}

/* The fault latency figures: present, ordered, and from real faults. */
static void status_latency(const char *out, const struct zswap_stats *s) {
        unsigned long long timed = json_field(out, "faults_timed");
        unsigned long long p50 = json_field(out, "fault_latency_p50_ns"), p90 = json_field(out, "fault_latency_p90_ns");
        unsigned long long p99 = json_field(out, "fault_latency_p99_ns"), max = json_field(out, "fault_latency_max_ns");

        /* every page was read back: each fault that was not a prefetch was timed */
        if (timed == 0 || timed > json_field(out, "faults") || json_field(out, "faults") != s->faults)
                test_fail("faults_timed %llu of %llu faults (client: %llu)", timed, json_field(out, "faults"),
                          (unsigned long long)s->faults);
        if (!(p50 > 0 && p50 <= p90 && p90 <= p99 && p99 <= max))
                test_fail("latency p50 %llu p90 %llu p99 %llu max %llu", p50, p90, p99, max);
}

/* `status --json` after the pages came back, against the client's counters */
static void status_after_faults(const char *pre, struct zswap_client *c) {
        char cmd[2 * PATH_MAX + 512], buf[32];
        struct zswap_stats s;
        int st;

        td_stats(c, &s);
        snprintf(cmd, sizeof(cmd), "%s status --json", pre);
        char *out = run(cmd, &st);
        ASSERT_EQ(st, 0);
        if (!json_valid(out))
                test_fail("status --json is not JSON:\n%s", out);
        ASSERT_EQ(json_field(out, "stored_pages"), s.stored_pages);
        ASSERT_EQ(json_field(out, "registered_bytes"), s.registered_bytes);
        ASSERT_EQ(json_field(out, "evictions"), s.evictions);
        const char *args = getenv("TEST_DAEMON_ARGS");
        ASSERT_STREQ(json_str(out, "compressor", buf, sizeof(buf)), args && strstr(args, "zstd") ? "zstd" : "lz4");
        status_latency(out, &s);
        /* a rate, or null right after start */
        if (!strstr(out, "\"evictions_per_s\": null") && json_real(out, "evictions_per_s") < 0)
                test_fail("evictions_per_s: %s", out);

        /* -o picks fields, in the order it names them (registered_bytes
         * comes after stored_pages in the full list); --no-headings leaves
         * the values */
        snprintf(cmd, sizeof(cmd), "%s status --bytes -o registered_bytes,stored_pages --no-headings", pre);
        out = run(cmd, &st);
        char want[96];
        snprintf(want, sizeof(want), "%llu\n%llu\n", (unsigned long long)s.registered_bytes,
                 (unsigned long long)s.stored_pages);
        if (st != 0 || strcmp(out, want) != 0)
                test_fail("status -o: status %#x, '%s', not '%s'", st, out, want);
        snprintf(cmd, sizeof(cmd), "%s status -o pool_bytes,bogus 2>&1", pre);
        expect(cmd, 2, "unknown status field 'bogus'");
}

/* `clients`: this process's row, in every form */
static void clients(const char *pre, struct zswap_client *c, size_t len) {
        char cmd[2 * PATH_MAX + 512], line[1024], *w[24], want[64], buf[32];
        struct zswap_stats s;
        int st;

        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s));
        ASSERT_EQ(s.registered_bytes, len);
        snprintf(cmd, sizeof(cmd), "%s clients --json", pre);
        char *out = run(cmd, &st);
        ASSERT_EQ(st, 0);
        if (!json_valid(out) || out[0] != '[')
                test_fail("clients --json is not a JSON array:\n%s", out);
        ASSERT_EQ(json_field(out, "pid"), (unsigned long long)getpid());
        ASSERT_STREQ(json_str(out, "command", buf, sizeof(buf)), "test-zswapctl");
        ASSERT_STREQ(json_str(out, "user", buf, sizeof(buf)), "root");
        ASSERT_EQ(json_field(out, "registered"), len);
        ASSERT_EQ(json_field(out, "evicted"), (s.stored_pages + s.same_pages) * ZSWAP_PAGE_SIZE);
        ASSERT_EQ(json_field(out, "pool"), s.compressed_bytes);
        ASSERT_EQ(json_field(out, "refaults"), s.refaults);
        ASSERT_TRUE(strstr(out, "\"limit\": null") != NULL);
        if (s.compressed_bytes)
                {
                        double want_ratio = (double)(s.stored_pages + s.same_pages) * ZSWAP_PAGE_SIZE /
                                            (double)s.compressed_bytes;
                        double got = json_real(out, "ratio");
                        if (got < want_ratio - 0.01 || got > want_ratio + 0.01)
                                test_fail("ratio %f, not %f", got, want_ratio);
                }

        /* the default table: a header and one row */
        snprintf(cmd, sizeof(cmd), "%s clients", pre);
        out = run(cmd, &st);
        ASSERT_EQ(st, 0);
        snprintf(line, sizeof(line), "%s", out);
        ASSERT_EQ(split(line, w, 24), 20);
        ASSERT_STREQ(w[0], "PID");
        ASSERT_STREQ(w[9], "LIMIT");
        ASSERT_EQ(strtoull(w[10], NULL, 10), (unsigned long long)getpid());
        ASSERT_STREQ(w[12], "test-zswapctl");
        ASSERT_STREQ(w[13], "16.0M");
        ASSERT_STREQ(w[19], "-");

        /* -o: exactly those columns, in that order; --bytes; --no-headings */
        snprintf(cmd, sizeof(cmd), "%s clients --bytes -o command,REGISTERED,pid", pre);
        out = run(cmd, &st);
        snprintf(line, sizeof(line), "%s", out);
        if (st != 0 || split(line, w, 24) != 6)
                test_fail("clients -o: status %#x:\n%s", st, out);
        ASSERT_STREQ(w[0], "COMMAND");
        ASSERT_STREQ(w[1], "REGISTERED");
        ASSERT_STREQ(w[2], "PID");
        ASSERT_STREQ(w[3], "test-zswapctl");
        ASSERT_EQ(strtoull(w[4], NULL, 10), len);
        ASSERT_EQ(strtoull(w[5], NULL, 10), (unsigned long long)getpid());
        snprintf(cmd, sizeof(cmd), "%s clients --no-headings -o pid", pre);
        snprintf(want, sizeof(want), "%d\n", (int)getpid());
        out = run(cmd, &st);
        ASSERT_EQ(st, 0);
        ASSERT_STREQ(out, want);
        /* no [tier]: none of its pages there (test-tier checks the counts) */
        snprintf(cmd, sizeof(cmd), "%s clients --no-headings --bytes -o pid,tier", pre);
        out = run(cmd, &st);
        ASSERT_EQ(st, 0);
        snprintf(line, sizeof(line), "%s", out);
        ASSERT_EQ(split(line, w, 24), 2);
        ASSERT_EQ(strtoull(w[0], NULL, 10), (unsigned long long)getpid());
        ASSERT_STREQ(w[1], "0");
        snprintf(cmd, sizeof(cmd), "%s clients -o pid,bogus 2>&1", pre);
        expect(cmd, 2, "unknown column 'bogus'");
        snprintf(cmd, sizeof(cmd), "%s clients extra 2>&1", pre);
        expect(cmd, 2, "clients takes no arguments");

        /* another user sees no row of root's, and is refused root's process */
        snprintf(cmd, sizeof(cmd), "setpriv --reuid=65534 --regid=65534 --clear-groups %s clients --json", pre);
        expect(cmd, 0, "[]\n");
        snprintf(cmd, sizeof(cmd), "setpriv --reuid=65534 --regid=65534 --clear-groups %s status --json", pre);
        expect(cmd, 0, "\"stored_pages\": ");
}

/* More clients than one reply holds: every one listed once, in id order. */
static void clients_paged(const char *pre, TestDaemon *d) {
        enum { N = ZSWAP_CLIENTS_PER_MSG + 5 };
        struct zswap_client *extra[N];
        char cmd[2 * PATH_MAX + 512];
        int st;

        for (int i = 0; i < N; i++)
                extra[i] = td_connect(d);
        snprintf(cmd, sizeof(cmd),
                 "%s clients --json -o id,pid | python3 -c 'import json,sys; r=json.load(sys.stdin); "
                 "i=[x[\"id\"] for x in r]; print(len(r), len(set(i)), i == sorted(i), "
                 "sum(x[\"pid\"] == %d for x in r))'",
                 pre, (int)getpid());
        char *out = run(cmd, &st);
        char want[64];
        snprintf(want, sizeof(want), "%d %d True %d\n", N + 1, N + 1, N + 1);
        if (st != 0 || strcmp(out, want) != 0)
                test_fail("%d clients listed as '%s' (count, distinct, ours)", N + 1, out);
        for (int i = 0; i < N; i++)
                zswap_disconnect(extra[i]);
}

/* ---- the Prometheus text format, checked line by line ---- */

typedef struct Family {
        char name[96], type[16];
        bool help;
        uint64_t last_bucket; /* histograms: buckets never decrease */
        double inf;           /* the +Inf bucket, -1 before it */
        int samples;
} Family;

static bool metric_name(const char **p, char *out, size_t len) {
        size_t n = 0;
        const char *s = *p;
        if (!(isalpha((unsigned char)*s) || *s == '_' || *s == ':'))
                return false;
        while (isalnum((unsigned char)s[n]) || s[n] == '_' || s[n] == ':')
                n++;
        if (n >= len)
                return false;
        memcpy(out, s, n);
        out[n] = 0;
        *p = s + n;
        return true;
}

/* {name="value",...}: label names as the grammar says, values with \\ \" \n
 * escapes only; le's value to le (if there is one). */
static bool metric_labels(const char **p, char *le, size_t lelen, char *labels, size_t lablen) {
        const char *s = *p;
        le[0] = labels[0] = 0;
        if (*s != '{')
                return true;
        s++;
        while (*s != '}') {
                char name[64], value[256];
                size_t n = 0;
                if (!metric_name(&s, name, sizeof(name)) || strchr(name, ':') || *s++ != '=' || *s++ != '"')
                        return false;
                for (; *s != '"'; s++) {
                        if (!*s || *s == '\n' || n + 1 >= sizeof(value))
                                return false;
                        if (*s == '\\') {
                                s++;
                                if (*s != '\\' && *s != '"' && *s != 'n')
                                        return false;
                        }
                        value[n++] = *s;
                }
                value[n] = 0;
                s++;
                if (strcmp(name, "le") == 0 && strlen(value) < lelen)
                        memcpy(le, value, strlen(value) + 1);
                size_t used = strlen(labels);
                snprintf(labels + used, lablen - used, "%s=%s;", name, value);
                if (*s == ',')
                        s++;
                else if (*s != '}')
                        return false;
        }
        *p = s + 1;
        return true;
}

/* One sample line of family f (the current one). */
static void metric_sample(Family *f, const char *line, const char *name, const char *le, const char *labels,
                          double v) {
        bool hist = strcmp(f->type, "histogram") == 0;
        size_t bl = strlen(f->name);

        if (strcmp(name, f->name) != 0 &&
            !(hist && strncmp(name, f->name, bl) == 0 &&
              (!strcmp(name + bl, "_bucket") || !strcmp(name + bl, "_sum") || !strcmp(name + bl, "_count"))))
                test_fail("sample outside its family %s (or one without # TYPE): %s", f->name, line);
        if (!f->help)
                test_fail("family %s has no # HELP before its samples", f->name);
        if (!strcmp(f->type, "counter") || !strcmp(f->type, "gauge"))
                if (v < 0 || (!strcmp(f->type, "counter") && strcmp(name + strlen(name) - 6, "_total") != 0))
                        test_fail("bad counter or gauge: %s", line);
        if (hist && strcmp(name + bl, "_bucket") == 0) {
                if (!le[0] || v < (double)f->last_bucket)
                        test_fail("histogram bucket without le, or decreasing: %s", line);
                f->last_bucket = (uint64_t)v;
                if (strcmp(le, "+Inf") == 0)
                        f->inf = v;
        }
        if (hist && strcmp(name + bl, "_count") == 0 && v != f->inf)
                test_fail("histogram _count %g is not its +Inf bucket %g", v, f->inf);
        (void)labels;
        f->samples++;
}

/*
 * Check every line of the exposition; return the value of the sample
 * `want` (name and labels as "name{k=v;...}"), or -1 if there is none.
 */
static double metrics_check(const char *text, const char *want, Family *fams, size_t *nfams) {
        _cleanup_free_ char *copy = strdup(text);
        double found = -1;
        Family *cur = NULL;
        char *save = NULL;

        *nfams = 0;
        ASSERT_TRUE(text[0] && text[strlen(text) - 1] == '\n');
        for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char name[96], type[16], le[64], labels[512], key[700];
                const char *p = line;
                if (strncmp(line, "# HELP ", 7) == 0 || strncmp(line, "# TYPE ", 7) == 0) {
                        p = line + 7;
                        if (!metric_name(&p, name, sizeof(name)) || *p != ' ')
                                test_fail("bad comment line: %s", line);
                        if (!cur || strcmp(cur->name, name) != 0) {
                                for (size_t i = 0; i < *nfams; i++)
                                        if (strcmp(fams[i].name, name) == 0)
                                                test_fail("family %s is split or repeated", name);
                                ASSERT_TRUE(*nfams < 128);
                                cur = &fams[(*nfams)++];
                                *cur = (Family){ .inf = -1 };
                                snprintf(cur->name, sizeof(cur->name), "%s", name);
                        }
                        if (line[2] == 'H') {
                                if (cur->help || !p[1])
                                        test_fail("second or empty HELP: %s", line);
                                cur->help = true;
                                continue;
                        }
                        if (cur->type[0] || sscanf(p, " %15s", type) != 1 ||
                            (strcmp(type, "counter") && strcmp(type, "gauge") && strcmp(type, "histogram") &&
                             strcmp(type, "summary") && strcmp(type, "untyped")) || cur->samples)
                                test_fail("bad or late TYPE: %s", line);
                        snprintf(cur->type, sizeof(cur->type), "%s", type);
                        continue;
                }
                if (line[0] == '#')
                        continue;
                char *end;
                if (!metric_name(&p, name, sizeof(name)) || !metric_labels(&p, le, sizeof(le), labels, sizeof(labels)) ||
                    *p++ != ' ')
                        test_fail("not a sample line: '%s'", line);
                double v = strtod(p, &end);
                if (end == p || *end)
                        test_fail("bad value: '%s'", line);
                if (!cur || !cur->type[0])
                        test_fail("sample before any # TYPE: %s", line);
                metric_sample(cur, line, name, le, labels, v);
                snprintf(key, sizeof(key), "%s{%s}", name, labels);
                if (want && strcmp(key, want) == 0)
                        found = v;
        }
        return found;
}

static const Family *family(const Family *fams, size_t n, const char *name, const char *type) {
        for (size_t i = 0; i < n; i++)
                if (strcmp(fams[i].name, name) == 0) {
                        if (strcmp(fams[i].type, type) != 0)
                                test_fail("%s is a %s, not a %s", name, fams[i].type, type);
                        return &fams[i];
                }
        test_fail("no metric family %s", name);
}

/* `metrics`: the format, and the figures against the client's */
static void metrics(const char *pre, struct zswap_client *c) {
        static Family fams[128];
        char cmd[2 * PATH_MAX + 512], want[256];
        struct zswap_stats s;
        size_t n;
        int st;

        snprintf(cmd, sizeof(cmd), "%s metrics", pre);
        char *out = run(cmd, &st);
        ASSERT_EQ(st, 0);
        td_stats(c, &s);
        ASSERT_EQ(metrics_check(out, "zswapd_stored_pages{}", fams, &n), (double)s.stored_pages);
        ASSERT_EQ(metrics_check(out, "zswapd_faults_total{}", fams, &n), (double)s.faults);
        family(fams, n, "zswapd_pool_bytes", "gauge");
        family(fams, n, "zswapd_faults_total", "counter");
        const Family *h = family(fams, n, "zswapd_fault_latency_seconds", "histogram");
        ASSERT_TRUE(h->inf > 0);
        ASSERT_EQ(h->samples, ZSWAP_LAT_LE_N + 3);
        snprintf(want, sizeof(want), "zswapd_client_registered_bytes{pid=%d;user=root;command=test-zswapctl;}",
                 (int)getpid());
        ASSERT_EQ(metrics_check(out, want, fams, &n), (double)s.registered_bytes);
        ASSERT_TRUE(metrics_check(out, "zswapd_fault_latency_p50_seconds{}", fams, &n) > 0);
        ASSERT_TRUE(metrics_check(out, "zswapd_fault_latency_p99_seconds{}", fams, &n) <=
                    metrics_check(out, "zswapd_fault_latency_max_seconds{}", fams, &n));
        snprintf(cmd, sizeof(cmd), "%s metrics --json 2>&1", pre);
        expect(cmd, 2, "no --json");

        /* --textfile: the same figures in a file, written whole (no
         * temporary one left), as node_exporter's textfile collector reads
         * them (zswapd-metrics.service) */
        char dir[] = "/tmp/zswapctl-textfile-XXXXXX", file[64];
        ASSERT_TRUE(mkdtemp(dir));
        snprintf(file, sizeof(file), "%s/zswapd.prom", dir);
        snprintf(cmd, sizeof(cmd), "%s metrics --textfile %s", pre, file);
        expect(cmd, 0, "");
        FILE *f = fopen(file, "re");
        ASSERT_TRUE(f);
        static char prom[65536], text[65536];
        size_t len = fread(prom, 1, sizeof(prom) - 1, f);
        prom[len] = 0;
        fclose(f);
        ASSERT_EQ(metrics_check(prom, "zswapd_stored_pages{}", fams, &n), (double)s.stored_pages);
        snprintf(cmd, sizeof(cmd), "ls -A %s", dir);
        ASSERT_STREQ(run(cmd, &st), "zswapd.prom\n");
        snprintf(cmd, sizeof(cmd), "%s status --textfile %s 2>&1", pre, file);
        expect(cmd, 2, "--textfile is for metrics");
        unlink(file);
        rmdir(dir);

        /* the Grafana dashboard asks for no metric that is not there */
        const char *src = getenv("ZSWAP_SOURCE_ROOT");
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/client/tools/zswapd-grafana.json", src ? src : ".");
        f = fopen(path, "re");
        ASSERT_TRUE(f);
        len = fread(text, 1, sizeof(text) - 1, f);
        text[len] = 0;
        fclose(f);
        unsigned names = 0;
        for (char *p = strstr(text, "zswapd_"); p; p = strstr(p + 1, "zswapd_")) {
                char name[64];
                size_t k = strspn(p, "abcdefghijklmnopqrstuvwxyz_");
                if (k >= sizeof(name))
                        test_fail("dashboard: a name too long at %.40s", p);
                memcpy(name, p, k);
                name[k] = 0;
                char *b = strstr(name, "_bucket");
                if (b && b[7] == 0)
                        *b = 0; /* a histogram's buckets: its family */
                snprintf(want, sizeof(want), "# TYPE %s ", name);
                char sample[80];
                snprintf(sample, sizeof(sample), "\n%s{", name);
                if (!strstr(prom, want) && !strstr(prom, sample))
                        test_fail("dashboard %s: %s is not a metric zswapctl prints", path, name);
                names++;
        }
        fprintf(stderr, "metrics: --textfile written whole; the dashboard's %u metric names all printed\n", names);
        ASSERT_TRUE(names >= 20);
}

/* The limit zswapctl clients shows for pid, in bytes (0: none); -1 while
 * pid is not a client. */
static long long client_limit(const char *pre, pid_t pid) {
        char cmd[PATH_MAX + 256];
        int st, p;
        long long limit;
        snprintf(cmd, sizeof(cmd), "%s clients -o pid,limit --bytes --no-headings", pre);
        char *out = run(cmd, &st);
        for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
                char l[32];
                if (sscanf(line, "%d %31s", &p, l) == 2 && p == pid)
                        return sscanf(l, "%lld", &limit) == 1 ? limit : 0;
        }
        return -1;
}

/* A process started with the nenv variables of a drop-in, as systemd
 * would start the service: it becomes a client of the daemon with the
 * drop-in's limit. */
static _unused_ void start_as_unit(const char *pre, char (*env)[PATH_MAX + 64], int nenv) {
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                for (int i = 0; i < nenv; i++)
                        putenv(env[i]);
                setenv("ZSWAP_ATTACH_MS", "0", 1);
                execl("/bin/sleep", "sleep", "60", (char *)NULL);
                _exit(127);
        }
        long long limit = -1;
        for (uint64_t t0 = now_ns(); (limit = client_limit(pre, pid)) <= 0; usleep(20000))
                if (now_ns() - t0 > TEST_WAIT_S * 1000000000ull)
                        test_fail("units: the process started with the drop-in's environment is no client with a "
                                  "limit after %d s (limit %lld)", TEST_WAIT_S, limit);
        kill(pid, SIGKILL);
        ASSERT_EQ(waitpid(pid, NULL, 0), pid);
        fprintf(stderr, "units: started with the drop-in's environment, pid %d is a client, limit %lld bytes\n",
                (int)pid, limit);
        ASSERT_TRUE(limit > (16 << 20) && limit <= (64 << 20));
}

/*
 * enable/disable: a drop-in for a systemd service under a root of our own
 * (--root), the preload library in it where the drop-in says; systemd's
 * own checker accepts it without a word; a process started with the
 * environment it gives, as systemd would start the service, becomes a
 * client of the daemon with the limit; names that could reach outside the
 * drop-in directory, or name another type of unit, are refused.
 */
static void units(const char *ctl, TestDaemon *d) {
        char root[] = "/tmp/zswapctl-units-XXXXXX", lib[PATH_MAX], path[3 * PATH_MAX], cmd[4 * PATH_MAX];
        char pre[PATH_MAX + 128], line[PATH_MAX + 64], env[5][PATH_MAX + 64];
        int st, nenv = 0;

        ASSERT_TRUE(mkdtemp(root));
        snprintf(lib, sizeof(lib), "%s", ctl);
        strcpy(strrchr(lib, '/'), "/../preload/libzswap-preload.so");
        char real[PATH_MAX];
        ASSERT_TRUE(realpath(lib, real));
        snprintf(lib, sizeof(lib), "%s", real);
        static char mk[8 * PATH_MAX];
        snprintf(mk, sizeof(mk), "mkdir -p %s%s && rmdir %s%s && ln -s %s %s%s", root, lib, root, lib, lib, root, lib);
        ASSERT_EQ(system(mk), 0);
        snprintf(pre, sizeof(pre), "%s --socket %s", ctl, d->sock);

        snprintf(cmd, sizeof(cmd), "%s enable foo --limit 64M --root %s --preload %s", pre, root, lib);
        expect(cmd, 0, "foo.service: enabled");
        snprintf(path, sizeof(path), "%s/etc/systemd/system/foo.service.d/zswap.conf", root);
        FILE *f = fopen(path, "re");
        ASSERT_TRUE(f);
        bool wants = false;
        while (fgets(line, sizeof(line), f)) {
                wants |= strcmp(line, "Wants=zswapd.socket\n") == 0;
                if (strncmp(line, "Environment=\"", 13) == 0 && nenv < 5) {
                        snprintf(env[nenv], sizeof(env[nenv]), "%s", line + 13);
                        *strrchr(env[nenv++], '"') = 0;
                }
        }
        fclose(f);
        ASSERT_TRUE(wants);
        ASSERT_EQ(nenv, 4);
        snprintf(line, sizeof(line), "LD_PRELOAD=%s", lib);
        ASSERT_STREQ(env[0], line);
        ASSERT_STREQ(env[1], "ZSWAP_LIMIT=67108864");
        ASSERT_STREQ(env[2], "ZSWAP_GROUP=unit:foo.service"); /* one limit for the service */
        snprintf(line, sizeof(line), "ZSWAP_SOCKET=%s", d->sock);
        ASSERT_STREQ(env[3], line);

        /* systemd's checker: the unit with its drop-in, not a word */
        if (system("command -v systemd-analyze >/dev/null 2>&1") == 0) {
                snprintf(path, sizeof(path), "%s/etc/systemd/system/foo.service", root);
                f = fopen(path, "we");
                ASSERT_TRUE(f);
                fprintf(f, "[Unit]\nDescription=a service under zswapd\n[Service]\nExecStart=/bin/sleep 1\n");
                fclose(f);
                snprintf(cmd, sizeof(cmd), "systemd-analyze verify %s 2>&1", path);
                char *out = run(cmd, &st);
                if (st != 0 || *out)
                        test_fail("systemd-analyze verify of the unit with its drop-in: status %#x:\n%s", st, out);
                unlink(path);
        } else
                fprintf(stderr, "units: no systemd-analyze here, the drop-in is not verified\n");

        /* started as systemd starts it: with the drop-in's environment
         * (not in a sanitizer build: its shim cannot be preloaded into a
         * program without the sanitizer's runtime, test-preload's rule) */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
        start_as_unit(pre, env, nenv);
#endif

        /* names and paths that are refused, nothing written */
        snprintf(cmd, sizeof(cmd), "%s enable ../../etc/passwd --root %s --preload %s 2>&1", pre, root, lib);
        expect(cmd, 2, "is not a service unit name");
        snprintf(cmd, sizeof(cmd), "%s enable foo.socket --root %s --preload %s 2>&1", pre, root, lib);
        expect(cmd, 2, "is not a service unit name");
        snprintf(cmd, sizeof(cmd), "%s enable bar --root %s --preload lib.so 2>&1", pre, root);
        expect(cmd, 1, "is not a plain absolute path");
        snprintf(cmd, sizeof(cmd), "%s enable bar --limit lots --root %s --preload %s 2>&1", pre, root, lib);
        expect(cmd, 2, "'lots' is not a size");
        snprintf(cmd, sizeof(cmd), "%s limit 1 64M --root %s 2>&1", pre, root);
        expect(cmd, 2, "--root is for enable and disable");

        snprintf(cmd, sizeof(cmd), "%s disable foo.service --root %s", pre, root);
        expect(cmd, 0, "foo.service: disabled");
        snprintf(path, sizeof(path), "%s/etc/systemd/system/foo.service.d", root);
        ASSERT_TRUE(access(path, F_OK) < 0 && errno == ENOENT);
        snprintf(cmd, sizeof(cmd), "%s disable foo --root %s 2>&1", pre, root);
        expect(cmd, 1, "foo.service is not enabled");
        snprintf(path, sizeof(path), "rm -rf %s", root);
        ASSERT_EQ(system(path), 0);
}

int main(void) {
        TestDaemon d;
        static uint64_t hashes[4096];
        char ctl[PATH_MAX], cmd[PATH_MAX + 256], pre[PATH_MAX + 128];
        struct zswap_stats s;
        int st;

        const char *zswapd = getenv("ZSWAPD");
        if (!zswapd)
                test_skip("ZSWAPD not set");
        snprintf(ctl, sizeof(ctl), "%s", zswapd);
        strcpy(strrchr(ctl, '/'), "/../client/tools/zswapctl");

        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, sizeof(hashes) / 8 * ZSWAP_PAGE_SIZE, 9, hashes);
        int n = zswap_pageout(c, buf, sizeof(hashes) / 8 * ZSWAP_PAGE_SIZE);
        ASSERT_TRUE(n > 4000);
        td_stats(c, &s);
        /* the global resident count may be a reclaim tick old (one taken
         * during the pageout); the client's own is counted now and kept */
        struct zswap_stats own;
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &own));

        snprintf(cmd, sizeof(cmd), "%s --socket %s status --json", ctl, d.sock);
        char *out = run(cmd, &st);
        ASSERT_EQ(st, 0);
        ASSERT_EQ(json_field(out, "stored_pages") + json_field(out, "same_filled_pages"), (unsigned long long)n);
        ASSERT_EQ(json_field(out, "original_bytes"), (unsigned long long)n * ZSWAP_PAGE_SIZE);
        ASSERT_EQ(json_field(out, "compressed_bytes"), s.compressed_bytes);
        /* the codec's ratio, as clients shows it; ratio counts the pool's memory */
        if (s.compressed_bytes) {
                double want = (double)n * ZSWAP_PAGE_SIZE / (double)s.compressed_bytes;
                double got = json_real(out, "compression_ratio");
                if (got < want * 0.99 || got > want * 1.01)
                        test_fail("compression_ratio %.3f, not %.3f", got, want);
        }
        ASSERT_EQ(json_field(out, "clients"), 1);
        ASSERT_TRUE(json_field(out, "pool_bytes") >= s.compressed_bytes);
        /* reclaim's counters: everything was paged out, none of it resident */
        ASSERT_TRUE(json_field(out, "resident_bytes") <= 16 * ZSWAP_PAGE_SIZE);
        ASSERT_EQ(json_field(out, "refaults"), 0);
        ASSERT_EQ(json_field(out, "clean_reevictions"), 0);
        ASSERT_EQ(json_field(out, "pool_full_events"), 0);
        /* the fault service the daemon chose at start (calibrate.h): with
         * the defaults, one of the arrangements auto chooses between */
        if (!strstr(out, "\"fault_wake\": \"one\"") && !strstr(out, "\"fault_wake\": \"all\"") &&
            !strstr(out, "\"fault_wake\": \"home\""))
                test_fail("status --json says no fault_wake:\n%s", out);
        if (!getenv("TEST_DAEMON_ARGS"))
                ASSERT_TRUE(json_field(out, "fault_spin_us") == 0 || json_field(out, "fault_spin_us") == 50);

        snprintf(cmd, sizeof(cmd), "%s --socket %s status --bytes", ctl, d.sock);
        out = run(cmd, &st);
        ASSERT_EQ(st, 0);
        char want[64];
        snprintf(want, sizeof(want), "compressed_bytes       %llu\n", (unsigned long long)s.compressed_bytes);
        if (!strstr(out, want))
                test_fail("text output lacks '%s':\n%s", want, out);

        ASSERT_EQ(verify_pages(buf, sizeof(hashes) / 8 * ZSWAP_PAGE_SIZE, hashes), 0);
        snprintf(pre, sizeof(pre), "%s --socket %s", ctl, d.sock);
        status_after_faults(pre, c);
        metrics(pre, c);
        /* the client's row while it has pages out, then all of them back */
        ASSERT_TRUE(zswap_pageout(c, buf, sizeof(hashes) / 8 * ZSWAP_PAGE_SIZE) > 4000);
        clients(pre, c, sizeof(hashes) / 8 * ZSWAP_PAGE_SIZE);
        clients_paged(pre, &d);
        ASSERT_EQ(verify_pages(buf, sizeof(hashes) / 8 * ZSWAP_PAGE_SIZE, hashes), 0);
        pageout_pid(ctl, &d, c, buf, hashes);
        tunables(ctl, &d);
        units(ctl, &d);
        zswap_disconnect(c);
        td_stop(&d);

        /* no daemon: a clear message and a failure status */
        snprintf(cmd, sizeof(cmd), "%s --socket %s status 2>&1", ctl, d.sock);
        out = run(cmd, &st);
        ASSERT_TRUE(st != 0);
        if (!strstr(out, "zswapd is not running: start it with systemctl start zswapd"))
                test_fail("unexpected message: %s", out);
        snprintf(cmd, sizeof(cmd), "%s --socket %s set interval 1s 2>&1", ctl, d.sock);
        expect(cmd, 1, "zswapd is not running: start it with systemctl start zswapd (no socket at");
        snprintf(cmd, sizeof(cmd), "%s --version", ctl);
        expect(cmd, 0, "zswapctl 0.");
        snprintf(cmd, sizeof(cmd), "%s --help", ctl);
        out = run(cmd, &st);
        const char *tail = "\n\nSee zswapctl(8).\n";
        if (st != 0 || strlen(out) < strlen(tail) || strcmp(out + strlen(out) - strlen(tail), tail) != 0)
                test_fail("--help: status %#x, does not end with See zswapctl(8).:\n%s", st, out);
        snprintf(cmd, sizeof(cmd), "%s --bogus 2>&1", ctl);
        expect(cmd, 2, "See zswapctl --help");
        return 0;
}
