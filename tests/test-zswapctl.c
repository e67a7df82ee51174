/*
 * test-zswapctl: `zswapctl status` reports what the daemon holds (text and
 * JSON agree with the library's counters); `pageout`, `limit`, `set` and
 * `get` steer it, and refusals say what to do: no daemon, not root, no
 * such client, a value that does not parse.
 */
#include <limits.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tunable-keys.h"

static char *run(const char *cmd, int *status) {
        static char out[8192];
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
        snprintf(cmd, sizeof(cmd), "%s --socket %s pageout 12x 2>&1", ctl, d->sock);
        out = run(cmd, &st);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 2 || !strstr(out, "not a process id"))
                test_fail("pageout 12x: status %#x, '%s'", st, out);
        snprintf(cmd, sizeof(cmd), "setpriv --reuid=65534 --regid=65534 --clear-groups %s --socket %s pageout %d 2>&1",
                 ctl, d->sock, (int)getpid());
        out = run(cmd, &st);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 1 || !strstr(out, "permission denied"))
                test_fail("pageout as nobody: status %#x, '%s'", st, out);
        ASSERT_EQ(verify_pages(buf, len, hashes), 0);
}

/* cmd must exit with status and print want (a substring) */
static void expect(const char *cmd, int status, const char *want) {
        int st;
        char *out = run(cmd, &st);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != status || !strstr(out, want))
                test_fail("%s: status %#x, not %d with '%s':\n%s", cmd, st, status, want, out);
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
        snprintf(cmd, sizeof(cmd), "%s set interval 5ms 2>&1", pre);
        expect(cmd, 1, "interval: 5ms is not a duration between 10ms and 10s");
        snprintf(cmd, sizeof(cmd), "%s set bogus 1 2>&1", pre);
        expect(cmd, 1, "unknown key 'bogus'");
        snprintf(cmd, sizeof(cmd), "setpriv --reuid=65534 --regid=65534 --clear-groups %s set interval 1s 2>&1", pre);
        expect(cmd, 1, "permission denied: changing daemon settings needs root");
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
        expect(cmd, 1, "no zswapd client with pid 1");
        snprintf(cmd, sizeof(cmd), "%s set --pid 1 idle_age 1m 2>&1", pre);
        expect(cmd, 1, "no zswapd client with pid 1");
        /* refused before asking */
        snprintf(cmd, sizeof(cmd), "%s limit %d 12x 2>&1", pre, pid);
        expect(cmd, 2, "'12x' is not a size");
        snprintf(cmd, sizeof(cmd), "%s --pid %d status 2>&1", pre, pid);
        expect(cmd, 2, "--pid is for set and get");
}

int main(void) {
        TestDaemon d;
        static uint64_t hashes[4096];
        char ctl[PATH_MAX], cmd[PATH_MAX + 256];
        struct zswap_stats s;
        int st;

        const char *zswapd = getenv("ZSWAPD");
        if (!zswapd)
                test_skip("ZSWAPD not set");
        snprintf(ctl, sizeof(ctl), "%s", zswapd);
        strcpy(strrchr(ctl, '/'), "/../client/zswapctl");

        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, sizeof(hashes) / 8 * ZSWAP_PAGE_SIZE, 9, hashes);
        int n = zswap_pageout(c, buf, sizeof(hashes) / 8 * ZSWAP_PAGE_SIZE);
        ASSERT_TRUE(n > 4000);
        td_stats(c, &s);

        snprintf(cmd, sizeof(cmd), "%s --socket %s status --json", ctl, d.sock);
        char *out = run(cmd, &st);
        ASSERT_EQ(st, 0);
        ASSERT_EQ(json_field(out, "stored_pages") + json_field(out, "same_filled_pages"), (unsigned long long)n);
        ASSERT_EQ(json_field(out, "original_bytes"), (unsigned long long)n * ZSWAP_PAGE_SIZE);
        ASSERT_EQ(json_field(out, "compressed_bytes"), s.compressed_bytes);
        ASSERT_EQ(json_field(out, "clients"), 1);
        ASSERT_TRUE(json_field(out, "pool_bytes") >= s.compressed_bytes);
        /* reclaim's counters: everything was paged out, none of it resident */
        ASSERT_TRUE(json_field(out, "resident_bytes") <= 16 * ZSWAP_PAGE_SIZE);
        ASSERT_EQ(json_field(out, "refaults"), 0);
        ASSERT_EQ(json_field(out, "clean_reevictions"), 0);
        ASSERT_EQ(json_field(out, "pool_full_events"), 0);

        snprintf(cmd, sizeof(cmd), "%s --socket %s status --bytes", ctl, d.sock);
        out = run(cmd, &st);
        ASSERT_EQ(st, 0);
        char want[64];
        snprintf(want, sizeof(want), "compressed_bytes       %llu\n", (unsigned long long)s.compressed_bytes);
        if (!strstr(out, want))
                test_fail("text output lacks '%s':\n%s", want, out);

        ASSERT_EQ(verify_pages(buf, sizeof(hashes) / 8 * ZSWAP_PAGE_SIZE, hashes), 0);
        pageout_pid(ctl, &d, c, buf, hashes);
        tunables(ctl, &d);
        zswap_disconnect(c);
        td_stop(&d);

        /* no daemon: a clear message and a failure status */
        snprintf(cmd, sizeof(cmd), "%s --socket %s status 2>&1", ctl, d.sock);
        out = run(cmd, &st);
        ASSERT_TRUE(st != 0);
        if (!strstr(out, "zswapd is not running"))
                test_fail("unexpected message: %s", out);
        snprintf(cmd, sizeof(cmd), "%s --socket %s set interval 1s 2>&1", ctl, d.sock);
        expect(cmd, 1, "zswapd is not running (no socket at");
        return 0;
}
