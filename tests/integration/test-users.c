/*
 * test-users.c: unprivileged clients, admitted and limited by zswapd.conf's
 * [users] and [user:NAME] sections (daemon/manager/users.c).
 *
 * Each case runs in a child that drops to a uid of its own (numeric uids
 * need no passwd entry; the config names them by number) and makes itself
 * dumpable again, as a process started by a login is. Every client that is
 * admitted hands real pages over and reads every one of them back.
 *
 *  - admission: allow by uid and by @group (a supplementary group), a user
 *    not listed refused with EPERM, a [user:UID] allow = no winning over
 *    the list; control connections (zswapctl) open to everyone
 *  - max_registered and max_regions counted over all of a user's
 *    connections, refused with EDQUOT; root unaffected
 *  - max_connections
 *  - max_pool: the user's pages beyond it stay resident, none lost
 *  - max_requests: over the rate, requests are slowed, none refused
 *  - admin_group: a member may change daemon-wide settings and steer
 *    another user's client; a non-member gets the message saying how
 *  - SIGHUP: a new allow list applies without dropping a client; a bad
 *    file keeps the running one; a changed [daemon] key is reported as
 *    needing a restart
 */
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include "harness.h"

#define U_ALLOWED 60001   /* allowed by uid, max_connections 2, max_registered 1M */
#define U_GROUP 60002     /* allowed through group G_CLIENTS, max_regions 3 */
#define U_STRANGER 60003  /* not allowed (until the reload) */
#define U_POOL 60004      /* max_pool 256K */
#define U_ADMIN 60005     /* in G_ADMIN */
#define U_DENIED 60006    /* in G_CLIENTS, but [user:60006] allow = no */
#define U_SLOW 60007      /* max_requests 40 */
#define G_CLIENTS 60100
#define G_ADMIN 60200

static TestDaemon d;
static char conf_path[128], ctl[PATH_MAX];

static void write_conf(const char *extra) {
        FILE *f = fopen(conf_path, "we");
        ASSERT_TRUE(f != NULL);
        fprintf(f,
                "# test-users\n"
                "[users]\n"
                "allow = %d %d %d %d %d @%d\n"
                "admin_group = %d\n"
                "max_regions = 64\n"
                /* kernel-mode uffds for its users, whatever the sysctl
                 * says (test-uffd-device covers the default, no) */
                "userfaultfd_device = yes\n"
                "[user:%d]\n"
                "max_connections = 2\n"
                "max_registered = 1M\n"
                "[user:%d]\n"
                "max_regions = 3\n"
                "[user:%d]\n"
                "max_pool = 256K\n"
                "[user:%d]\n"
                "allow = no\n"
                "[user:%d]\n"
                "max_requests = 40\n"
                "%s",
                U_ALLOWED, U_POOL, U_ADMIN, U_SLOW, 0, G_CLIENTS, G_ADMIN, U_ALLOWED, U_GROUP, U_POOL, U_DENIED,
                U_SLOW, extra);
        ASSERT_OK(fclose(f));
}

/* Run fn as uid with the given supplementary groups; its exit status. */
static int as_user(uid_t uid, gid_t group, int (*fn)(void *), void *arg) {
        pid_t pid = td_fork_as(uid, group);
        int st;

        if (pid == 0)
                _exit(fn(arg));
        ASSERT_TRUE(waitpid(pid, &st, 0) == pid);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A region of real pages, evicted, read back and checked. */
static int client_cycle(void *arg) {
        size_t len = 256 * ZSWAP_PAGE_SIZE;
        uint64_t hashes[256];
        struct zswap_client *c;

        int r = zswap_connect(d.sock, &c);
        if (r < 0) {
                fprintf(stderr, "uid %u: zswap_connect: %s\n", getuid(), strerror(-r));
                return 10;
        }
        uint8_t *buf = td_region(c, len, 7, hashes);
        if (zswap_pageout(c, buf, len) <= 0)
                return 11;
        if (verify_pages(buf, len, hashes) != 0)
                return 12;
        zswap_disconnect(c);
        return 0;
}

static int expect_refused(void *arg) {
        struct zswap_client *c;
        int r = zswap_connect(d.sock, &c);
        if (r == 0) {
                zswap_disconnect(c);
                return 20;
        }
        return r == -EPERM ? 0 : 21;
}

/* max_registered = 1M over both of the user's connections; max_connections 2 */
static int registered_quota(void *arg) {
        struct zswap_client *a, *b, *third;
        if (zswap_connect(d.sock, &a) < 0 || zswap_connect(d.sock, &b) < 0)
                return 30;
        uint8_t *m1 = test_map(1 << 20), *m2 = test_map(1 << 16);
        fill_pages(m1, 1 << 20, 3);
        fill_pages(m2, 1 << 16, 4);
        if (zswap_register(a, m1, 1 << 20) < 0)
                return 31;
        if (zswap_register(b, m2, 1 << 16) != -EDQUOT)
                return 32; /* the user's total, not the connection's */
        int r = zswap_connect(d.sock, &third); /* a third connection: closed at accept */
        if (r != -ECONNRESET && r != -EPIPE && r != -ENOTCONN) {
                fprintf(stderr, "third connection: %d\n", r);
                return 33;
        }
        /* what was admitted works */
        uint64_t h[256];
        hash_pages(m1, 1 << 20, h);
        if (zswap_pageout(a, m1, 1 << 20) <= 0 || verify_pages(m1, 1 << 20, h) != 0)
                return 34;
        zswap_disconnect(b);
        zswap_disconnect(a);
        return 0;
}

static int regions_quota(void *arg) {
        struct zswap_client *c;
        uint8_t *m = test_map(8 * ZSWAP_PAGE_SIZE);
        if (zswap_connect(d.sock, &c) < 0)
                return 40;
        fill_pages(m, 8 * ZSWAP_PAGE_SIZE, 5);
        for (int i = 0; i < 3; i++)
                if (zswap_register(c, m + 2 * i * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE) < 0)
                        return 41;
        if (zswap_register(c, m + 6 * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE) != -EDQUOT)
                return 42;
        zswap_disconnect(c);
        return 0;
}

/* 16 MiB of heap pages take far more than 256K compressed: the rest stays
 * resident, and every page reads back */
static int pool_quota(void *arg) {
        size_t len = 16u << 20;
        uint64_t *hashes = calloc(len / ZSWAP_PAGE_SIZE, sizeof(uint64_t));
        struct zswap_stats s;
        struct zswap_client *c;

        if (!hashes || zswap_connect(d.sock, &c) < 0)
                return 50;
        uint8_t *buf = td_region(c, len, 11, hashes);
        int n = zswap_pageout(c, buf, len);
        if (n <= 0 || zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s) < 0)
                return 51;
        fprintf(stderr, "max_pool 256K: %d pages evicted, %llu stored in %llu compressed bytes\n", n,
                (unsigned long long)s.stored_pages, (unsigned long long)s.compressed_bytes);
        /* the bound: max_pool plus the pages the workers had compressed but
         * not yet counted when a tick handed out the share anew (users.c),
         * at most one page per worker per tick; 16 pages is far above that */
        if (s.compressed_bytes > 256 * 1024 + 16 * ZSWAP_PAGE_SIZE || s.stored_pages == 0)
                return 52;
        if (s.stored_pages + s.same_pages >= len / ZSWAP_PAGE_SIZE / 2)
                return 53; /* most must have stayed */
        if (verify_pages(buf, len, hashes) != 0)
                return 54;
        zswap_disconnect(c);
        free(hashes);
        return 0;
}

/* 160 requests at 40/s with a one-second burst: at least three seconds,
 * and every one answered */
static int request_rate(void *arg) {
        struct zswap_client *c;
        struct zswap_stats s;
        struct timespec a, b;

        if (zswap_connect(d.sock, &c) < 0)
                return 60;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (int i = 0; i < 160; i++)
                if (zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s) < 0)
                        return 61;
        clock_gettime(CLOCK_MONOTONIC, &b);
        double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
        fprintf(stderr, "160 requests at max_requests = 40: %.2f s\n", secs);
        zswap_disconnect(c);
        /* the bucket allows 40 at once and 40 a second after: 120 must wait
         * at least 3 s; this is the throttle's guarantee, not a speed */
        return secs >= 2.9 ? 0 : 62;
}

/* zswapctl as the child's user: its exit status, its output in out */
static int ctl_run(const char *args, char *out, size_t len) {
        char cmd[PATH_MAX + 512];
        snprintf(cmd, sizeof(cmd), "%s --socket %s %s 2>&1", ctl, d.sock, args);
        FILE *p = popen(cmd, "r");
        if (!p)
                return -1;
        size_t n = fread(out, 1, len - 1, p);
        out[n] = 0;
        int st = pclose(p);
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static pid_t victim; /* a client of U_ALLOWED's, for steering */

static int admin_ok(void *arg) {
        char out[1024], args[64];
        if (ctl_run("set idle_age 1h", out, sizeof(out)) != 0)
                return fprintf(stderr, "%s", out), 70;
        snprintf(args, sizeof(args), "limit %d 256K", (int)victim);
        if (ctl_run(args, out, sizeof(out)) != 0)
                return fprintf(stderr, "%s", out), 71;
        return 0;
}

static int admin_refused(void *arg) {
        char out[1024], args[64];
        if (ctl_run("set idle_age 2h", out, sizeof(out)) != 1)
                return 72;
        if (!strstr(out, "admin commands need root or group zswap"))
                return fprintf(stderr, "got: %s", out), 73;
        snprintf(args, sizeof(args), "limit %d 2M", (int)victim);
        if (ctl_run(args, out, sizeof(out)) != 1 || !strstr(out, "permission denied"))
                return fprintf(stderr, "got: %s", out), 74;
        /* reading is anyone's */
        if (ctl_run("status", out, sizeof(out)) != 0)
                return fprintf(stderr, "got: %s", out), 75;
        return 0;
}

/* A client of U_ALLOWED that lives across the reload: pages evicted before,
 * read back after. Told to finish through a pipe. */
static int lingering_client(void *arg) {
        int *fds = arg;
        size_t len = 128 * ZSWAP_PAGE_SIZE; /* under the user's max_registered */
        uint64_t hashes[128];
        struct zswap_client *c;
        char x = 0;

        close(fds[1]);
        if (zswap_connect(d.sock, &c) < 0)
                return 80;
        uint8_t *buf = td_region(c, len, 21, hashes);
        if (zswap_pageout(c, buf, len) <= 0)
                return 81;
        if (write(fds[3], "r", 1) != 1)
                return 82;
        if (read(fds[0], &x, 1) != 1)
                return 83;
        if (verify_pages(buf, len, hashes) != 0)
                return 84;
        zswap_disconnect(c);
        return 0;
}

static void wait_log(const char *needle) {
        WAIT_UNTIL(td_log_has(&d, needle), TEST_WAIT_S, "the daemon's log does not say '%s' (%s)", needle, d.log);
}

int main(void) {
        char args[256];
        int r;

        const char *zswapd = getenv("ZSWAPD");
        if (!zswapd)
                test_skip("ZSWAPD not set");
        snprintf(ctl, sizeof(ctl), "%s", zswapd);
        strcpy(strrchr(ctl, '/'), "/../client/tools/zswapctl");
        snprintf(conf_path, sizeof(conf_path), "/tmp/test-users-%d.conf", (int)getpid());
        write_conf("");
        snprintf(args, sizeof(args), "--config %s", conf_path);
        td_start_logged(&d, args);

        /* admission */
        ASSERT_EQ(as_user(U_ALLOWED, 0, client_cycle, NULL), 0);
        ASSERT_EQ(as_user(U_GROUP, G_CLIENTS, client_cycle, NULL), 0);
        ASSERT_EQ(as_user(U_STRANGER, 0, expect_refused, NULL), 0);
        ASSERT_EQ(as_user(U_DENIED, G_CLIENTS, expect_refused, NULL), 0);
        wait_log("not allowed to be a client");
        ASSERT_EQ(client_cycle(NULL), 0); /* root */

        /* quotas */
        ASSERT_EQ(as_user(U_ALLOWED, 0, registered_quota, NULL), 0);
        wait_log("would exceed its max_registered");
        ASSERT_EQ(as_user(U_GROUP, G_CLIENTS, regions_quota, NULL), 0);
        ASSERT_EQ(as_user(U_POOL, 0, pool_quota, NULL), 0);
        ASSERT_EQ(as_user(U_SLOW, 0, request_rate, NULL), 0);
        wait_log("over max_requests");

        /* a client of U_ALLOWED across admin steering and reloads */
        int p1[2], p2[2];
        ASSERT_OK(pipe(p1));
        ASSERT_OK(pipe(p2));
        int fds[4] = { p1[0], p1[1], p2[0], p2[1] };
        pid_t lc = fork();
        ASSERT_TRUE(lc >= 0);
        if (lc == 0) {
                close(p2[0]);
                _exit(as_user(U_ALLOWED, 0, lingering_client, fds));
        }
        close(p1[0]);
        close(p2[1]);
        char x;
        ASSERT_EQ(read(p2[0], &x, 1), 1); /* its pages are out */
        /* the lingering client is as_user's child: find it by its uid's
         * connection instead of guessing; zswapctl clients is the operator's
         * way, but the pid the daemon knows is what limit takes */
        {
                char path[64], line[256];
                victim = 0;
                for (int tries = 0; tries < 100 && !victim; tries++) {
                        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)lc, (int)lc);
                        FILE *f = fopen(path, "re");
                        if (f && fgets(line, sizeof(line), f))
                                victim = (pid_t)atoi(line);
                        if (f)
                                fclose(f);
                }
                ASSERT_TRUE(victim > 0);
        }
        ASSERT_EQ(as_user(U_ADMIN, G_ADMIN, admin_ok, NULL), 0);
        ASSERT_EQ(as_user(U_GROUP, G_CLIENTS, admin_refused, NULL), 0);

        /* reload: U_STRANGER allowed now, the running client untouched */
        write_conf("[user:60003]\nallow = yes\n[daemon]\nworkers = 1\n");
        ASSERT_OK(kill(d.pid, SIGHUP));
        wait_log("reloaded");
        wait_log("[daemon] workers changed: it needs a restart");
        ASSERT_EQ(as_user(U_STRANGER, 0, client_cycle, NULL), 0);
        /* a bad file: refused, and the running rules stay */
        FILE *f = fopen(conf_path, "we");
        ASSERT_TRUE(f != NULL);
        fprintf(f, "[users]\nallow = %d\nmax_pool = lots\n", U_ALLOWED);
        ASSERT_OK(fclose(f));
        ASSERT_OK(kill(d.pid, SIGHUP));
        wait_log("max_pool: 'lots' is not a size");
        ASSERT_EQ(as_user(U_STRANGER, 0, client_cycle, NULL), 0);

        ASSERT_EQ(write(p1[1], "x", 1), 1);
        int st;
        ASSERT_TRUE(waitpid(lc, &st, 0) == lc);
        ASSERT_TRUE(WIFEXITED(st));
        ASSERT_EQ(WEXITSTATUS(st), 0);

        /* a bad file at start: exit 2 with file:line */
        {
                char cmd[PATH_MAX + 256], out[1024] = "";
                snprintf(cmd, sizeof(cmd), "%s --config %s --socket /tmp/test-users-bad-%d.sock 2>&1", zswapd,
                         conf_path, (int)getpid());
                FILE *p = popen(cmd, "r");
                ASSERT_TRUE(p != NULL);
                size_t n = fread(out, 1, sizeof(out) - 1, p);
                out[n] = 0;
                r = pclose(p);
                ASSERT_TRUE(WIFEXITED(r));
                ASSERT_EQ(WEXITSTATUS(r), 2);
                char want[256];
                snprintf(want, sizeof(want), "%s:3: max_pool: 'lots' is not a size", conf_path);
                if (!strstr(out, want))
                        test_fail("expected '%s', got: %s", want, out);
                /* --check-config says the same without starting */
                snprintf(cmd, sizeof(cmd), "%s --check-config --config %s 2>&1", zswapd, conf_path);
                p = popen(cmd, "r");
                ASSERT_TRUE(p != NULL);
                n = fread(out, 1, sizeof(out) - 1, p);
                out[n] = 0;
                r = pclose(p);
                ASSERT_TRUE(WIFEXITED(r));
                ASSERT_EQ(WEXITSTATUS(r), 2);
                if (!strstr(out, want))
                        test_fail("--check-config: expected '%s', got: %s", want, out);
                write_conf("");
                snprintf(cmd, sizeof(cmd), "%s --check-config --config %s 2>&1", zswapd, conf_path);
                ASSERT_EQ(system(cmd), 0);
        }
        td_stop(&d);
        unlink(conf_path);
        unlink(d.log);
        return 0;
}
