/*
 * test-dedup: pages a user's processes share after fork are held once, in
 * that user's shared store (daemon/mm/dedup.h, docs/reclaim.md
 * "Deduplication"), and every process gets its own content back, through
 * faults, a daemon restart and its own restore.
 *
 *   test-dedup fork     a client with NPAGES pages forks KIDS children;
 *                       all page the region out: the shared store holds
 *                       each distinct page once, every process's entries
 *                       name it; every process reads its pages back; the
 *                       parent rewrites half of its pages and pages out
 *                       again, and the children still read theirs; once
 *                       all are gone, nothing is left in the store
 *   fork-nodedup        the same with dedup = no: nothing shared, each
 *                       process's pages stored again (the figure beside)
 *   restart             parent and child paged out, the daemon killed -9
 *                       and started again: both adopted, the shared pages
 *                       in the new daemon's store once, both read theirs
 *   restore             the same, no daemon started again: each process
 *                       restores itself from its store and the shared one
 *   users               another user's identical pages are not shared with
 *                       root's (one store per user), and a process that is
 *                       not dumpable gets no shared store at all
 */
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "harness.h"
#include "protocol.h"
#include "util.h"

#define NPAGES 2048
#define KIDS 3
#define U_OTHER 60011

static TestDaemon d;
static uint64_t hashes[NPAGES], hashes2[NPAGES];

static ZMsgStatusReply status(void) {
        ZMsgStatusReply st;
        td_status(&d, &st);
        return st;
}

static size_t held(struct zswap_client *c) {
        struct zswap_stats s;
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s));
        return (size_t)(s.stored_pages + s.same_pages);
}

/* Page [p, p + len) out until every page is held (a pageout may leave a
 * page whose move was revoked: the next one takes it). */
static void pageout_all(struct zswap_client *c, uint8_t *p, size_t len) {
        for (unsigned round = 0; held(c) < len / ZSWAP_PAGE_SIZE; round++) {
                if (round == 1000)
                        test_fail("pid %d: %zu of %zu pages held after 1000 pageouts", (int)getpid(), held(c),
                                  len / ZSWAP_PAGE_SIZE);
                ASSERT_TRUE(zswap_pageout(c, p, len) >= 0);
        }
}

/* Pages of buf that are not same-filled: what the shared store holds. */
static uint64_t distinct(const uint8_t *buf) {
        uint64_t n = 0;
        for (size_t i = 0; i < NPAGES; i++) {
                const uint64_t *w = (const uint64_t *)(buf + i * ZSWAP_PAGE_SIZE);
                size_t k = 1;
                while (k < ZSWAP_PAGE_SIZE / 8 && w[k] == w[0])
                        k++;
                n += k < ZSWAP_PAGE_SIZE / 8;
        }
        return n;
}

/* A child: on each byte from cmd, one step ('p' page out, 'v' verify,
 * 'q' quit); after each, its result on res (the pages found bad). */
typedef struct Kid {
        pid_t pid;
        int cmd, res;
} Kid;

static void kid_main(struct zswap_client *c, uint8_t *buf, size_t len, int cmd, int res) {
        char op;
        while (read(cmd, &op, 1) == 1 && op != 'q') {
                uint64_t bad = 0;
                if (op == 'p')
                        pageout_all(c, buf, len);
                else
                        bad = verify_pages(buf, len, hashes);
                if (write(res, &bad, sizeof(bad)) != sizeof(bad))
                        _exit(3);
        }
        _exit(0);
}

static Kid kid_fork(struct zswap_client *c, uint8_t *buf, size_t len) {
        int cmd[2], res[2];
        ASSERT_OK(pipe(cmd));
        ASSERT_OK(pipe(res));
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                close(cmd[1]);
                close(res[0]);
                kid_main(c, buf, len, cmd[0], res[1]);
        }
        close(cmd[0]);
        close(res[1]);
        return (Kid){ .pid = pid, .cmd = cmd[1], .res = res[0] };
}

static uint64_t kid_do(Kid *k, char op) {
        uint64_t bad = UINT64_MAX;
        ASSERT_EQ(write(k->cmd, &op, 1), 1);
        if (read(k->res, &bad, sizeof(bad)) != sizeof(bad))
                test_fail("child %d died doing '%c'", (int)k->pid, op);
        return bad;
}

static void kid_end(Kid *k) {
        int st;
        ASSERT_EQ(write(k->cmd, "q", 1), 1);
        ASSERT_TRUE(waitpid(k->pid, &st, 0) == k->pid);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        close(k->cmd);
        close(k->res);
}

static void case_fork(bool dedup) {
        const size_t len = NPAGES * ZSWAP_PAGE_SIZE;
        Kid kids[KIDS];

        td_start_logged(&d, dedup ? getenv("TEST_DAEMON_ARGS") : "--set dedup=no");
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, len, 91, hashes);
        uint64_t u = distinct(buf);
        for (int i = 0; i < KIDS; i++)
                kids[i] = kid_fork(c, buf, len);

        /* the parent first, while every page is mapped by four: into the
         * shared store; each child then finds its pages there */
        pageout_all(c, buf, len);
        for (int i = 0; i < KIDS; i++)
                ASSERT_EQ(kid_do(&kids[i], 'p'), 0);
        ZMsgStatusReply st = status();
        fprintf(stderr, "%d processes, %llu distinct pages each: %llu pages held shared, %llu objects (%llu bytes) "
                "in the shared store, %llu hits; pool %llu bytes, %llu bytes of the clients' own objects\n",
                KIDS + 1, (unsigned long long)u, (unsigned long long)st.dedup_pages,
                (unsigned long long)st.dedup_objects, (unsigned long long)st.dedup_bytes,
                (unsigned long long)st.dedup_hits, (unsigned long long)st.stats.pool_bytes,
                (unsigned long long)st.stats.compressed_bytes);
        if (dedup) {
                ASSERT_EQ(st.dedup_pages, (KIDS + 1) * u);
                ASSERT_EQ(st.dedup_objects, u);
                ASSERT_EQ(st.dedup_hits, KIDS * u);
                /* the clients' own pools hold none of those pages */
                ASSERT_TRUE(st.stats.compressed_bytes < st.dedup_bytes / 10);
        } else {
                ASSERT_EQ(st.dedup_pages, 0);
                ASSERT_EQ(st.dedup_objects, 0);
        }

        /* every process gets its own pages back */
        ASSERT_EQ(verify_pages(buf, len, hashes), 0);
        for (int i = 0; i < KIDS; i++)
                ASSERT_EQ(kid_do(&kids[i], 'v'), 0);

        /* the parent writes half of its pages anew and pages out again:
         * the children's pages are theirs, whatever the parent does */
        memcpy(hashes2, hashes, sizeof(hashes));
        for (size_t i = 0; i < NPAGES; i += 2) {
                uint64_t *w = (uint64_t *)(buf + i * ZSWAP_PAGE_SIZE);
                w[3] ^= 0x5a5a5a5a5a5a5a5aull;
                hashes2[i] = page_hash(w);
        }
        pageout_all(c, buf, len);
        for (int i = 0; i < KIDS; i++)
                ASSERT_EQ(kid_do(&kids[i], 'p'), 0);
        for (int i = 0; i < KIDS; i++)
                ASSERT_EQ(kid_do(&kids[i], 'v'), 0);
        ASSERT_EQ(verify_pages(buf, len, hashes2), 0);
        for (int i = 0; i < KIDS; i++)
                kid_end(&kids[i]);

        /* all gone: the store lets go of every object (its tick sweeps) */
        ASSERT_OK(zswap_unregister(c, buf, len));
        uint64_t t0 = now_ns();
        while ((st = status()).dedup_objects != 0) {
                if (now_ns() - t0 > TEST_WAIT_S * 1000000000ull)
                        test_fail("%llu objects left in the shared store after every client let go",
                                  (unsigned long long)st.dedup_objects);
                usleep(20000);
        }
        zswap_disconnect(c);
        td_stop(&d);
}

/* Lines of the daemon's /proc/PID/maps that name needle. */
static unsigned daemon_maps_count(const char *needle) {
        char path[64], line[512];
        unsigned n = 0;
        snprintf(path, sizeof(path), "/proc/%d/maps", (int)d.pid);
        FILE *f = fopen(path, "re");
        ASSERT_TRUE(f != NULL);
        while (fgets(line, sizeof(line), f))
                n += strstr(line, needle) != NULL;
        fclose(f);
        return n;
}

/* Parent and one child paged out; the daemon killed. restart: a new one
 * takes both over; else each restores itself. */
static void case_restart(bool respawn) {
        const size_t len = NPAGES * ZSWAP_PAGE_SIZE;

        if (!respawn)
                ASSERT_OK(setenv("ZSWAP_RECONNECT_TIMEOUT", "0", 1));
        td_start_logged(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, len, 92, hashes);
        uint64_t u = distinct(buf);
        Kid kid = kid_fork(c, buf, len);
        pageout_all(c, buf, len);
        ASSERT_EQ(kid_do(&kid, 'p'), 0);
        ZMsgStatusReply st = status();
        ASSERT_EQ(st.dedup_objects, u);
        ASSERT_EQ(st.dedup_pages, 2 * u);

        td_kill(&d);
        if (respawn) {
                td_respawn(&d);
                /* both come back to the new daemon (their agents adopt):
                 * wait until it holds both stores' pages */
                uint64_t t0 = now_ns();
                while ((st = status()).dedup_pages < 2 * u) {
                        if (now_ns() - t0 > TEST_WAIT_S * 1000000000ull)
                                test_fail("after the restart: %llu pages shared, not %llu",
                                          (unsigned long long)st.dedup_pages, (unsigned long long)(2 * u));
                        usleep(20000);
                }
                fprintf(stderr, "adopted: %llu pages shared, %llu objects in the new shared store\n",
                        (unsigned long long)st.dedup_pages, (unsigned long long)st.dedup_objects);
                ASSERT_EQ(st.dedup_objects, u);
                /* each hands its sync page over with its shared store (four
                 * descriptors), and the new daemon maps both: without them
                 * their moves and its reads of their uffds would not be
                 * kept apart (zsync.h) */
                unsigned syncs = daemon_maps_count("memfd:zswap-sync");
                if (syncs < 2)
                        test_fail("after the restart the daemon maps %u sync pages of the 2 clients'", syncs);
        }
        ASSERT_EQ(kid_do(&kid, 'v'), 0);
        ASSERT_EQ(verify_pages(buf, len, hashes), 0);
        /* (restore: a page whose shared object could not be read would
         * have been poisoned, and its read killed us with SIGBUS) */
        kid_end(&kid);
        zswap_disconnect(c);
        if (respawn)
                td_stop(&d);
}

/* ---- users ---- */

/* How many of our descriptors are zswapd's stores (our own, its user's
 * shared one: memfds named zswapd-store, zswapd-shared). */
static int stores_held(void) {
        int fds[16];
        return (int)(td_fds_named("memfd:zswapd-store", fds, 16) + td_fds_named("memfd:zswapd-shared", fds, 16));
}

/* Another user: the same pages as root's, paged out; its stores on res. */
static void other_user(bool dumpable, int go, int res) {
        char x;
        int r[2] = { -1, -1 };
        if (!dumpable)
                prctl(PR_SET_DUMPABLE, 0);
        struct zswap_client *c;
        if (zswap_connect(d.sock, &c) < 0)
                _exit(10);
        static uint64_t h[NPAGES];
        uint8_t *buf = td_region(c, NPAGES * ZSWAP_PAGE_SIZE, 93, h);
        if (read(go, &x, 1) != 1)
                _exit(11);
        pageout_all(c, buf, NPAGES * ZSWAP_PAGE_SIZE);
        r[0] = stores_held();
        r[1] = (int)verify_pages(buf, NPAGES * ZSWAP_PAGE_SIZE, h);
        if (write(res, r, sizeof(r)) != sizeof(r))
                _exit(12);
        zswap_disconnect(c);
        _exit(0);
}

static void case_users(void) {
        const size_t len = NPAGES * ZSWAP_PAGE_SIZE;
        char conf[128], args[192];
        int go[2][2], res[2][2], got[2], st;
        pid_t pid[2];

        snprintf(conf, sizeof(conf), "/tmp/test-dedup-%d.conf", (int)getpid());
        FILE *f = fopen(conf, "we");
        ASSERT_TRUE(f != NULL);
        fprintf(f, "[users]\nallow = %d\nuserfaultfd_device = yes\n", U_OTHER);
        ASSERT_OK(fclose(f));
        snprintf(args, sizeof(args), "--config %s", conf);
        td_start_logged(&d, args);

        /* the other user's processes first: not forks of a client of ours */
        for (int i = 0; i < 2; i++) {
                ASSERT_OK(pipe(go[i]));
                ASSERT_OK(pipe(res[i]));
                pid[i] = td_fork_as(U_OTHER, 0);
                if (pid[i] == 0)
                        other_user(i == 0, go[i][0], res[i][1]);
        }
        /* root's pages, shared with a child of its own: in root's store */
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, len, 93, hashes);
        uint64_t u = distinct(buf);
        Kid kid = kid_fork(c, buf, len);
        pageout_all(c, buf, len);
        ZMsgStatusReply before = status();
        ASSERT_EQ(before.dedup_objects, u);

        /* the same pages, paged out by the other user: found in no store
         * of root's */
        for (int i = 0; i < 2; i++) {
                ASSERT_EQ(write(go[i][1], "g", 1), 1);
                ASSERT_EQ(read(res[i][0], got, sizeof(got)), (ssize_t)sizeof(got));
                ASSERT_TRUE(waitpid(pid[i], &st, 0) == pid[i]);
                ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
                fprintf(stderr, "uid %d, %s: holds %d stores, %d pages bad\n", U_OTHER,
                        i == 0 ? "dumpable" : "not dumpable", got[0], got[1]);
                ASSERT_EQ(got[1], 0);
                /* its own store, and a shared store of its own user's only
                 * if it is dumpable */
                ASSERT_EQ(got[0], i == 0 ? 2 : 1);
        }
        ZMsgStatusReply after = status();
        ASSERT_EQ(after.dedup_hits, before.dedup_hits);
        ASSERT_EQ(after.dedup_objects, u);
        ASSERT_EQ(verify_pages(buf, len, hashes), 0);
        ASSERT_EQ(kid_do(&kid, 'v'), 0);
        kid_end(&kid);
        zswap_disconnect(c);
        td_stop(&d);
        unlink(conf);
}

int main(int argc, char **argv) {
        const char *mode = argc > 1 ? argv[1] : "fork";

        if (strcmp(mode, "fork") == 0)
                case_fork(true);
        else if (strcmp(mode, "fork-nodedup") == 0)
                case_fork(false);
        else if (strcmp(mode, "restart") == 0)
                case_restart(true);
        else if (strcmp(mode, "restore") == 0)
                case_restart(false);
        else if (strcmp(mode, "users") == 0)
                case_users();
        else
                test_fail("unknown mode %s", mode);
        return 0;
}
