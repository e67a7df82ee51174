/*
 * test-restart: a daemon that dies, or stops, and comes back loses no page
 * (docs/reliability.md).
 *
 * A client keeps its userfaultfd and its store (common/store.h) when the
 * daemon dies: threads that touch evicted pages wait in the kernel, the
 * library reconnects to the same socket path and hands both to the next
 * daemon (ZMSG_ADOPT), which serves on. If none comes within
 * ZSWAP_RECONNECT_TIMEOUT seconds, the library restores every page itself
 * from the store and unregisters: the program keeps its data, calls return
 * -ENOTCONN.
 *
 * Each case runs in its own process (this program run with the case's
 * name), with its own daemon and environment, and checks content, page by
 * page, never only return codes:
 *   idle          kill -9 with every page evicted and a reader waiting;
 *                 the next daemon serves the reader, every page, pageout
 *   load          kill -9 at random moments under writers, readers,
 *                 pageouts and forks (not under TSan), five times; a fork
 *                 child whose daemon died before it attached writes its
 *                 pages back (fork-event-kill); it may die by SIGKILL
 *                 (libzswap's verdict where it cannot, docs/reliability.md)
 *                 only if a kill was under way between the fork call and
 *                 its death; such forks are counted
 *   fallback      no daemon comes back: restored after 1 s, -ENOTCONN,
 *                 the range no longer registered
 *   fallback-now  the same with ZSWAP_RECONNECT_TIMEOUT=0
 *   planned       SIGTERM, then a new daemon: data intact, pageout works
 *   tamper        the client breaks one entry of its store while no daemon
 *                 runs (as root it can open it for writing): the next
 *                 daemon serves a healthy client of the same process on;
 *                 the tampered client keeps every page but the broken one,
 *                 which is poisoned (SIGBUS on access), never zeros
 *   disconnect    zswap_disconnect() while no daemon runs: every page
 *                 restored at once, the range no longer registered
 *   fork-kill     the daemon killed after answering FORK_PREPARE, before
 *                 it read the fork event (a pthread_atfork handler of
 *                 ours); the next daemon adopts the parent and reads the
 *                 event: the child must attach to it and read every page
 *                 (not under TSan)
 *   fork-adopt-kill  the daemon killed after answering FORK_PREPARE; the
 *                 next adopts the parent before the fork's instant (the
 *                 fork waits for that in a handler of ours), reads the
 *                 event, and is killed before the child attaches (the
 *                 child stops first): the child must write its pages back
 *                 from the store that daemon handed the parent, and read
 *                 every page (neither zeros nor a kill; not under TSan)
 *   event-kill    the daemon killed (ZSWAPD_INJECT kill_event) once it has
 *                 read an mremap, MADV_DONTNEED or munmap event of an
 *                 evicted range, and while it handles one (an mremap: with
 *                 the entry in the middle of the range at its old place and
 *                 its new one): the next daemon applies it from the store's
 *                 journal; the moved pages read back at their new place,
 *                 the dropped ones as zeros, a new mapping where the
 *                 unmapped one was as zeros; and with no daemon coming
 *                 back, the same from the library's own restore
 *   remap-kill    two mremaps in a row, the daemon killed at each of their
 *                 kill points in turn, with the pages stored, partly read
 *                 back, or being evicted: every page reads back at the
 *                 final place (TEST_REMAP_KILL_QUICK=1: each kill point
 *                 with one of the three)
 *   fork-event-kill  the daemon killed once it has read a fork event: the
 *                 child's memory is unregistered with the uffd it held; the
 *                 child must write the pages back from its parent's store,
 *                 which the daemon kept as at the fork, and read every page
 *                 (neither zeros nor a kill); the parent is adopted and
 *                 keeps every page (not under TSan)
 * TEST_RESTART_ONLY=NAME runs one case; TEST_SEED fixes the random seeds;
 * TEST_RESTART_FORKS=0 leaves the forks out of "load".
 *
 * The daemon is started again with td_respawn(): a fork() of this process
 * would wait in the kernel for a daemon to read its UFFD_EVENT_FORK.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "harness.h"
#include "store.h"
#include "util.h"
#include "zsync.h"

static TestDaemon d;
static uint64_t seed;

/* ---- what every case needs ---- */

/* Where the case is, for the watchdog's message. */
static _Atomic(const char *) step = "start";
static _Atomic bool watchdog_off;

static void dump_tasks(void) {
        DIR *dir = opendir("/proc/self/task");
        struct dirent *e;

        while (dir && (e = readdir(dir))) {
                char w[64];
                if (e->d_name[0] == '.')
                        continue;
                task_wchan(0, atoi(e->d_name), w, sizeof(w));
                fprintf(stderr, "  task %s waits in %s\n", e->d_name, w[0] ? w : "?");
        }
        if (dir)
                closedir(dir);
}

/* TEST_GDB=1: the stacks of this process's threads and the daemon's, by
 * gdb, for a case that hangs (posix_spawn: a fork() could wait on our
 * userfaultfd). */
static void gdb_stacks(void) {
        extern char **environ;
        char cmd[256];
        char *argv[] = { "sh", "-c", cmd, NULL };
        pid_t pid;

        if (!getenv("TEST_GDB"))
                return;
        snprintf(cmd, sizeof(cmd), "for p in %d %d; do gdb -q -p $p -batch -ex 'thread apply all bt' 2>&1; done",
                 (int)getpid(), (int)d.pid);
        if (posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ) == 0)
                waitpid(pid, NULL, 0);
}

/* The agent/daemon handshake counters (common/zsync.h) of each client of
 * this process: a count its daemon left behind when it was killed stops
 * the agent's moves. */
static void dump_sync(void) {
        int fds[64];
        size_t n = td_fds_named("memfd:zswap-sync", fds, 64);

        for (size_t i = 0; i < n; i++) {
                ZSync *z = mmap(NULL, ZSWAP_SYNC_SIZE, PROT_READ, MAP_SHARED, fds[i], 0);
                if (z == MAP_FAILED)
                        continue;
                fprintf(stderr, "  sync memfd (fd %d): moving %u, reading %u\n", fds[i], atomic_load(&z->moving),
                        atomic_load(&z->reading));
                munmap(z, ZSWAP_SYNC_SIZE);
        }
}

/* A case that hangs fails with what it waited for, not by meson's timeout. */
static void *watchdog_main(void *arg) {
        uint64_t end = now_ns() + (uint64_t)(uintptr_t)arg * 1000000000ull;

        while (now_ns() < end)
                if (atomic_load(&watchdog_off))
                        return NULL;
                else
                        usleep(100000);
        fprintf(stderr, "stuck for %lu s at: %s\n", (unsigned long)(uintptr_t)arg, atomic_load(&step));
        dump_tasks();
        dump_sync();
        gdb_stacks();
        td_log_dump(&d);
        abort();
}

static void watchdog_start(unsigned seconds) {
        pthread_t t;
        ASSERT_OK(-pthread_create(&t, NULL, watchdog_main, (void *)(uintptr_t)seconds));
        pthread_detach(t);
}

static uint64_t ms_since(uint64_t t0) {
        return (now_ns() - t0) / 1000000;
}

/*
 * After a restart, until the library has handed its uffd and store over,
 * calls may report the daemon gone; they must work again within seconds.
 */
static void wait_served(struct zswap_client *c) {
        struct zswap_stats s;
        uint64_t t0 = now_ns();
        int r;

        atomic_store(&step, "waiting for the client to be served again (zswap_get_stats)");
        while ((r = zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s)) == -ENOTCONN && ms_since(t0) < TEST_WAIT_S * 1000ull)
                usleep(10000);
        if (r < 0) {
                td_log_dump(&d);
                test_fail("zswap_get_stats %llu ms after the restart: %d (%s)", (unsigned long long)ms_since(t0), r,
                          strerror(-r));
        }
        fprintf(stderr, "served again after %llu ms\n", (unsigned long long)ms_since(t0));
}

/* A thread that reads one page: it must wait while no daemon serves. */
typedef struct Reader {
        pthread_t thread;
        const uint8_t *page;
        _Atomic pid_t tid;
        _Atomic bool done;
        _Atomic uint64_t hash;
} Reader;

static void *reader_main(void *arg) {
        Reader *r = arg;
        atomic_store(&r->tid, gettid());
        atomic_store(&r->hash, page_hash(r->page));
        atomic_store(&r->done, true);
        return NULL;
}

static void reader_start(Reader *r, const uint8_t *page) {
        memset(r, 0, sizeof(*r));
        r->page = page;
        ASSERT_OK(-pthread_create(&r->thread, NULL, reader_main, r));
}

/* The reader waits in the kernel for its page, and still does 100 ms
 * later: waited for, however long the thread takes to get there. */
static void reader_assert_waits(Reader *r) {
        WAIT_UNTIL(atomic_load(&r->tid) > 0, TEST_WAIT_S, "the reader never started");
        WAIT_UNTIL(atomic_load(&r->done) || task_in_userfault(atomic_load(&r->tid)), TEST_WAIT_S,
                   "the reader neither got its page nor waits in a fault");
        usleep(100000);
        ASSERT_TRUE(!atomic_load(&r->done));
        ASSERT_TRUE(task_in_userfault(atomic_load(&r->tid)));
}

/* Join the reader (a safety bound of `seconds` that says how long it
 * waited) and return when it got its page (ms after t0). */
static uint64_t reader_join(Reader *r, uint64_t t0, unsigned seconds) {
        while (!atomic_load(&r->done) && ms_since(t0) < seconds * 1000ull)
                usleep(1000);
        uint64_t ms = ms_since(t0);
        if (!atomic_load(&r->done)) {
                dump_tasks();
                td_log_dump(&d);
                test_fail("the reader still waits %llu ms later", (unsigned long long)ms);
        }
        pthread_join(r->thread, NULL);
        return ms;
}

static void assert_verified(const uint8_t *buf, size_t len, const uint64_t *hashes, const char *when) {
        size_t bad = verify_pages(buf, len, hashes);
        if (bad) {
                td_log_dump(&d);
                test_fail("%zu of %zu pages differ %s", bad, len / ZSWAP_PAGE_SIZE, when);
        }
}

/* ---- idle: kill -9 with every page evicted ---- */

#define IDLE_PAGES 1024

static void case_idle(void) {
        const size_t len = IDLE_PAGES * ZSWAP_PAGE_SIZE;
        static uint64_t hashes[IDLE_PAGES];
        struct zswap_stats s;
        Reader r;

        td_start_logged(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, len, 71, hashes);
        int n = zswap_pageout(c, buf, len);
        ASSERT_TRUE(n > IDLE_PAGES / 2);

        atomic_store(&step, "idle: daemon killed, reader on an evicted page");
        td_kill(&d);
        uint64_t t0 = now_ns();
        reader_start(&r, buf + 200 * ZSWAP_PAGE_SIZE);
        reader_assert_waits(&r);
        fprintf(stderr, "while no daemon runs, zswap_get_stats: %d\n", zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s));

        atomic_store(&step, "idle: new daemon started, reader waiting for its page");
        td_respawn(&d);
        uint64_t t1 = now_ns();
        uint64_t ms = reader_join(&r, t1, TEST_WAIT_S);
        fprintf(stderr, "reader served %llu ms after the restart (%llu ms after the kill)\n",
                (unsigned long long)ms, (unsigned long long)ms_since(t0));
        ASSERT_EQ(atomic_load(&r.hash), hashes[200]);
        atomic_store(&step, "idle: reading every page from the new daemon");
        assert_verified(buf, len, hashes, "after the restart");

        /* the new daemon serves this client fully: stats, pageout, faults */
        wait_served(c);
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s));
        /* every page was read back: the counters it rebuilt from the store
         * must say it holds none */
        ASSERT_EQ(s.stored_pages + s.same_pages, 0);
        atomic_store(&step, "idle: pageout through the new daemon");
        n = zswap_pageout(c, buf, len);
        ASSERT_TRUE(n > IDLE_PAGES / 2);
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s));
        ASSERT_TRUE(s.stored_pages + s.same_pages + s.staged_pages > 0);
        assert_verified(buf, len, hashes, "after a pageout through the new daemon");
        td_stats(c, &s);
        zswap_disconnect(c);
        assert_verified(buf, len, hashes, "after disconnecting");
        td_stop(&d);
}

/* ---- load: kill -9 at random moments under load ---- */

#define LOAD_PAGES 4096
#define LOAD_THREADS 3

static uint8_t *lbuf;
static struct zswap_client *lclient;
static uint32_t *lversion; /* shadow: page p is written by thread p % LOAD_THREADS only */
static _Atomic bool lstop;
static _Atomic uint64_t lerrors, lreads, lwrites, ldrops, lpageouts, lenotconn, lforks;
/* fork children that killed themselves, a daemon kill since their fork */
static _Atomic uint64_t lforks_lost;
static _Atomic int lbad_pageout; /* first error of zswap_pageout other than ENOTCONN */
/* Workers hold it shared for each access, the forker exclusive around
 * fork(), so a child never copies a page half written. Prefers writers. */
static pthread_rwlock_t fork_lock;
static uint64_t lt0; /* the case's start, for the timeline it prints */

static unsigned long long lms(void) {
        return (unsigned long long)ms_since(lt0);
}

static void make_page(uint64_t *w, size_t page, uint32_t ver) {
        uint64_t tag = (uint64_t)page << 32 | ver;
        for (size_t j = 0; j < ZSWAP_PAGE_SIZE / 8; j++)
                w[j] = (j & 3) ? tag + (j & ~(size_t)3) : j;
}

static bool check_page(const uint64_t *w, size_t page, uint32_t ver) {
        uint64_t expect[ZSWAP_PAGE_SIZE / 8];
        if (ver == 0)
                memset(expect, 0, sizeof(expect));
        else
                make_page(expect, page, ver);
        if (memcmp(w, expect, ZSWAP_PAGE_SIZE) == 0)
                return true;
        fprintf(stderr, "%llu ms: pid %d: page %zu at %p: expected version %u, words %#llx %#llx\n", lms(),
                (int)getpid(), page, (const void *)w, ver, (unsigned long long)w[0], (unsigned long long)w[1]);
        return false;
}

static size_t check_all(void) {
        size_t bad = 0;
        for (size_t p = 0; p < LOAD_PAGES; p++)
                bad += !check_page((uint64_t *)(lbuf + p * ZSWAP_PAGE_SIZE), p, lversion[p]);
        return bad;
}

static void *load_worker(void *arg) {
        unsigned t = (unsigned)(uintptr_t)arg;
        uint64_t s = seed + 17 * t + 1;

        fprintf(stderr, "worker %u: task %d\n", t, (int)gettid());
        while (!atomic_load_explicit(&lstop, memory_order_relaxed)) {
                size_t page = (xorshift(&s) % (LOAD_PAGES / LOAD_THREADS)) * LOAD_THREADS + t;
                uint64_t *p = (uint64_t *)(lbuf + page * ZSWAP_PAGE_SIZE);
                unsigned op = (unsigned)(xorshift(&s) % 100);

                pthread_rwlock_rdlock(&fork_lock);
                if (op < 50) {
                        if (!check_page(p, page, lversion[page]))
                                atomic_fetch_add(&lerrors, 1);
                        atomic_fetch_add_explicit(&lreads, 1, memory_order_relaxed);
                } else if (op < 97) {
                        if (++lversion[page] == 0)
                                lversion[page] = 1;
                        make_page(p, page, lversion[page]);
                        atomic_fetch_add_explicit(&lwrites, 1, memory_order_relaxed);
                } else {
                        ASSERT_OK(madvise(p, ZSWAP_PAGE_SIZE, MADV_DONTNEED));
                        lversion[page] = 0;
                        atomic_fetch_add_explicit(&ldrops, 1, memory_order_relaxed);
                }
                pthread_rwlock_unlock(&fork_lock);
        }
        return NULL;
}

static void *load_pageout(void *arg) {
        struct zswap_client *c = arg;
        uint64_t s = seed + 99;

        while (!atomic_load_explicit(&lstop, memory_order_relaxed)) {
                size_t first = xorshift(&s) % LOAD_PAGES, n = 1 + xorshift(&s) % 1024;
                if (xorshift(&s) % 8 == 0) {
                        first = 0;
                        n = LOAD_PAGES;
                }
                if (first + n > LOAD_PAGES)
                        n = LOAD_PAGES - first;
                int r = zswap_pageout(c, lbuf + first * ZSWAP_PAGE_SIZE, n * ZSWAP_PAGE_SIZE);
                if (r >= 0) {
                        atomic_fetch_add_explicit(&lpageouts, 1, memory_order_relaxed);
                } else if (r == -ENOTCONN) {
                        atomic_fetch_add_explicit(&lenotconn, 1, memory_order_relaxed);
                        usleep(2000);
                } else {
                        int zero = 0;
                        atomic_compare_exchange_strong(&lbad_pageout, &zero, r);
                        usleep(2000);
                }
        }
        return NULL;
}

/* The child verifies the copy it got, then changes and evicts it through
 * its own client (unless the daemon is away), and verifies again. */
static int load_child(void) {
        size_t bad = check_all();
        if (bad) {
                struct zswap_stats s = { 0 };
                int r = zswap_get_stats(lclient, ZSWAP_STATS_CLIENT, &s);
                fprintf(stderr, "%llu ms: fork child %d: %zu pages differ from the copy at the fork; its stats: %d, "
                                "%llu stored, %llu same, %llu faults, %llu zero-filled\n",
                        lms(), (int)getpid(), bad, r, (unsigned long long)s.stored_pages,
                        (unsigned long long)s.same_pages, (unsigned long long)s.faults,
                        (unsigned long long)s.faults_zero);
                return 1;
        }
        for (size_t p = 0; p < LOAD_PAGES; p += 5)
                make_page((uint64_t *)(lbuf + p * ZSWAP_PAGE_SIZE), p, ++lversion[p]);
        int r = zswap_pageout(lclient, lbuf, LOAD_PAGES * ZSWAP_PAGE_SIZE);
        if (r < 0 && r != -ENOTCONN) {
                fprintf(stderr, "fork child: zswap_pageout: %d\n", r);
                return 2;
        }
        bad = check_all();
        if (bad) {
                fprintf(stderr, "fork child: %zu pages differ after its own pageout (%d)\n", bad, r);
                return 3;
        }
        return 0;
}

static void *load_forker(void *arg) {
        uint64_t s = seed + 7;
        (void)arg;

        while (!atomic_load_explicit(&lstop, memory_order_relaxed)) {
                usleep(100000 + xorshift(&s) % 300000);
                pthread_rwlock_wrlock(&fork_lock);
                uint64_t t0 = now_ns(), t = lms();
                pid_t pid = fork();
                if (pid == 0)
                        _exit(load_child());
                pthread_rwlock_unlock(&fork_lock);
                ASSERT_TRUE(pid > 0);
                fprintf(stderr, "%llu ms: fork of child %d (called at %llu ms)\n", lms(), (int)pid, (unsigned long long)t);
                int st;
                ASSERT_EQ(waitpid(pid, &st, 0), pid);
                uint64_t died = now_ns();
                atomic_fetch_add(&lforks, 1);
                /* libzswap's verdict on a child that could not get its
                 * pages back: that alone, and only with a kill of ours
                 * since the fork call */
                if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && td_killed_between(d.kills, t0, died)) {
                        fprintf(stderr, "%llu ms: fork child %d killed itself: the daemon died during the fork\n",
                                lms(), (int)pid);
                        atomic_fetch_add(&lforks_lost, 1);
                        continue;
                }
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                        td_log_dump(&d);
                        test_fail("fork child failed: status %#x (%s)", st,
                                  WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? "SIGKILL, no daemon kill since the fork"
                                                                              : "no SIGKILL");
                }
        }
        return NULL;
}

/* Served again: the threads read and write on (1000 more accesses),
 * within a safety bound that only threads waiting for good reach. */
static void load_assert_progress(void) {
        uint64_t before = atomic_load(&lreads) + atomic_load(&lwrites), t0 = now_ns();

        while (atomic_load(&lreads) + atomic_load(&lwrites) < before + 1000)
                if (ms_since(t0) > TEST_WAIT_S * 1000ull) {
                        fprintf(stderr, "%llu ms: %llu accesses of 1000 in %d s since the restart:\n", lms(),
                                (unsigned long long)(atomic_load(&lreads) + atomic_load(&lwrites) - before),
                                TEST_WAIT_S);
                        dump_tasks();
                        dump_sync();
                        gdb_stacks();
                        td_log_dump(&d);
                        test_fail("the threads wait for good after a restart");
                } else {
                        usleep(1000);
                }
}

static void case_load(void) {
        const size_t len = LOAD_PAGES * ZSWAP_PAGE_SIZE;
        pthread_t workers[LOAD_THREADS], pager, forker;
        pthread_rwlockattr_t attr;
        uint64_t s = seed;
        bool forks = true;
        struct zswap_stats st;

#if defined(__SANITIZE_THREAD__)
        /* a fork child starts its agent thread after a multi-threaded
         * fork, which ThreadSanitizer's runtime cannot follow */
        forks = false;
#endif
        /* TEST_RESTART_FORKS=0: tell the address space's own losses from a
         * fork child's */
        if (getenv("TEST_RESTART_FORKS") && strcmp(getenv("TEST_RESTART_FORKS"), "0") == 0)
                forks = false;
        pthread_rwlockattr_init(&attr);
        pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        pthread_rwlock_init(&fork_lock, &attr);

        lt0 = now_ns();
        td_start_logged(&d, getenv("TEST_DAEMON_ARGS"));
        td_kills_record(&d);
        struct zswap_client *c = lclient = td_connect(&d);
        lbuf = test_map(len);
        lversion = calloc(LOAD_PAGES, sizeof(*lversion));
        ASSERT_TRUE(lversion);
        for (size_t p = 0; p < LOAD_PAGES; p++) {
                lversion[p] = 1;
                make_page((uint64_t *)(lbuf + p * ZSWAP_PAGE_SIZE), p, 1);
        }
        ASSERT_OK(zswap_register(c, lbuf, len));
        ASSERT_OK(zswap_pageout(c, lbuf, len));
        for (unsigned t = 0; t < LOAD_THREADS; t++)
                ASSERT_OK(-pthread_create(&workers[t], NULL, load_worker, (void *)(uintptr_t)t));
        ASSERT_OK(-pthread_create(&pager, NULL, load_pageout, c));
        if (forks)
                ASSERT_OK(-pthread_create(&forker, NULL, load_forker, NULL));

        for (int round = 0; round < 5; round++) {
                usleep(200000 + xorshift(&s) % 500000);
                atomic_store(&step, "load: killing the daemon");
                fprintf(stderr, "%llu ms: kill -9 of daemon %d\n", lms(), (int)d.pid);
                td_kill(&d);
                usleep(xorshift(&s) % 300001);
                atomic_store(&step, "load: starting the daemon again");
                fprintf(stderr, "%llu ms: starting a daemon\n", lms());
                td_respawn(&d);
                fprintf(stderr, "%llu ms: daemon %d accepts connections\n", lms(), (int)d.pid);
                load_assert_progress();
                fprintf(stderr, "restart %d: %llu reads, %llu writes, %llu pageouts, %llu ENOTCONN, %llu forks\n",
                        round + 1, (unsigned long long)lreads, (unsigned long long)lwrites,
                        (unsigned long long)lpageouts, (unsigned long long)lenotconn, (unsigned long long)lforks);
        }
        usleep(500000);
        atomic_store(&step, "load: stopping the threads");
        atomic_store(&lstop, true);
        for (unsigned t = 0; t < LOAD_THREADS; t++)
                pthread_join(workers[t], NULL);
        pthread_join(pager, NULL);
        if (forks)
                pthread_join(forker, NULL);

        atomic_store(&step, "load: reading every page");
        size_t bad = check_all();
        fprintf(stderr, "5 restarts: %llu reads, %llu writes, %llu drops, %llu pageouts (%llu ENOTCONN), %llu forks; "
                        "%llu read errors, %zu bad pages at the end, pageout error %d\n",
                (unsigned long long)lreads, (unsigned long long)lwrites, (unsigned long long)ldrops,
                (unsigned long long)lpageouts, (unsigned long long)lenotconn, (unsigned long long)lforks,
                (unsigned long long)lerrors, bad, atomic_load(&lbad_pageout));
        fprintf(stderr, "forks lost to a daemon death during the fork: %llu of %llu\n",
                (unsigned long long)lforks_lost, (unsigned long long)lforks);
        if (lerrors || bad)
                td_log_dump(&d);
        ASSERT_EQ(atomic_load(&lerrors), 0);
        ASSERT_EQ(bad, 0);
        ASSERT_EQ(atomic_load(&lbad_pageout), 0);
        ASSERT_TRUE(atomic_load(&lpageouts) > 0);

        /* served in full by the last daemon */
        wait_served(c);
        int n = zswap_pageout(c, lbuf, len);
        ASSERT_TRUE(n > LOAD_PAGES / 2);
        ASSERT_EQ(check_all(), 0);
        ASSERT_OK(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &st));
        zswap_disconnect(c);
        ASSERT_EQ(check_all(), 0);
        td_stop(&d);
}

/* ---- fallback: no daemon comes back ---- */

#define FB_PAGES 1024

static void case_fallback(const char *timeout) {
        const size_t len = FB_PAGES * ZSWAP_PAGE_SIZE;
        static uint64_t hashes[FB_PAGES];
        struct zswap_stats s;
        static const uint8_t zeros[ZSWAP_PAGE_SIZE];
        const uint64_t zero_hash = page_hash(zeros);
        char flags[256] = "";
        Reader r;

        ASSERT_OK(setenv("ZSWAP_RECONNECT_TIMEOUT", timeout, 1));
        td_start_logged(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, len, 23, hashes);
        ASSERT_TRUE(vma_uffd_registered(buf));
        ASSERT_TRUE(td_pageout_want(c, buf, len, FB_PAGES / 2 + 1) > FB_PAGES / 2);
        ASSERT_TRUE(vma_uffd_missing(buf)); /* armed before its pages left */
        /* every kind of page at the death: resident (read back), written
         * since, written and evicted again, dropped, evicted */
        for (size_t i = 0; i < FB_PAGES; i += 4)
                ASSERT_EQ(page_hash(buf + i * ZSWAP_PAGE_SIZE), hashes[i]);
        for (size_t i = 3; i < FB_PAGES; i += 7) {
                fill_pages(buf + i * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE, 900 + i);
                hashes[i] = page_hash(buf + i * ZSWAP_PAGE_SIZE);
        }
        for (size_t i = 5; i < FB_PAGES; i += 61) {
                ASSERT_OK(madvise(buf + i * ZSWAP_PAGE_SIZE, ZSWAP_PAGE_SIZE, MADV_DONTNEED));
                hashes[i] = zero_hash;
        }
        ASSERT_OK(zswap_pageout(c, buf, len / 2));

        atomic_store(&step, "fallback: daemon killed, waiting for the library to restore the pages");
        td_kill(&d);
        uint64_t t0 = now_ns();
        reader_start(&r, buf + 513 * ZSWAP_PAGE_SIZE); /* evicted, not written */
        uint64_t ms = reader_join(&r, t0, TEST_WAIT_S);
        fprintf(stderr, "ZSWAP_RECONNECT_TIMEOUT=%s: the reader got its page %llu ms after the kill\n", timeout,
                (unsigned long long)ms);
        ASSERT_EQ(atomic_load(&r.hash), hashes[513]);
        if (strcmp(timeout, "0") != 0)
                ASSERT_TRUE(ms >= 900); /* the library waited for a daemon first */
        /* and for the second it was told, not its default 10 s: the one
         * bound on a time here, with all the rest of the 10 s for the
         * restore itself on a loaded machine */
        ASSERT_TRUE(ms < 10000);
        assert_verified(buf, len, hashes, "after the library restored them");

        /* the client is on its own now */
        ASSERT_ERROR(zswap_get_stats(c, ZSWAP_STATS_CLIENT, &s), ENOTCONN);
        ASSERT_ERROR(zswap_pageout(c, buf, len), ENOTCONN);
        ASSERT_ERROR(zswap_set_limit(c, 1 << 20), ENOTCONN);
        uint8_t *other = test_map(16 * ZSWAP_PAGE_SIZE);
        ASSERT_ERROR(zswap_register(c, other, 16 * ZSWAP_PAGE_SIZE), ENOTCONN);
        ASSERT_TRUE(vma_flags(buf, flags, sizeof(flags)));
        fprintf(stderr, "VmFlags of the range now: %s\n", flags);
        ASSERT_TRUE(!vma_uffd_registered(buf));
        ASSERT_TRUE(!vma_uffd_registered(buf + len - ZSWAP_PAGE_SIZE));
        /* plain memory: written, dropped and read back as such */
        fill_pages(buf, len, 24);
        hash_pages(buf, len, hashes);
        ASSERT_OK(madvise(buf, ZSWAP_PAGE_SIZE, MADV_DONTNEED));
        hashes[0] = zero_hash;
        assert_verified(buf, len, hashes, "written after the fallback");
        zswap_disconnect(c);
        assert_verified(buf, len, hashes, "after disconnecting");
}

/* ---- planned: SIGTERM, then a new daemon ---- */

#define PL_PAGES 1024

static void case_planned(void) {
        const size_t len = PL_PAGES * ZSWAP_PAGE_SIZE;
        static uint64_t hashes[PL_PAGES];
        Reader r;

        td_start_logged(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, len, 31, hashes);
        ASSERT_TRUE(td_pageout_want(c, buf, len, PL_PAGES / 2 + 1) > PL_PAGES / 2);

        atomic_store(&step, "planned: stopping the daemon (SIGTERM)");
        td_stop(&d);
        /* whether the daemon gave the pages back or handed them over, a
         * reader gets its page, at the latest from the next daemon */
        uint64_t t0 = now_ns();
        reader_start(&r, buf + 300 * ZSWAP_PAGE_SIZE);
        usleep(100000);
        fprintf(stderr, "after the stop, the reader %s\n", atomic_load(&r.done) ? "got its page" : "waits");
        atomic_store(&step, "planned: a new daemon, the reader waiting for its page");
        td_respawn(&d);
        reader_join(&r, t0, TEST_WAIT_S);
        ASSERT_EQ(atomic_load(&r.hash), hashes[300]);
        assert_verified(buf, len, hashes, "after a planned restart");

        wait_served(c);
        atomic_store(&step, "planned: pageout through the new daemon");
        int n = zswap_pageout(c, buf, len);
        fprintf(stderr, "pageout through the new daemon: %d pages\n", n);
        ASSERT_TRUE(n > PL_PAGES / 2); /* the range is managed again */
        assert_verified(buf, len, hashes, "after a pageout through the new daemon");
        zswap_disconnect(c);
        assert_verified(buf, len, hashes, "after disconnecting");
        td_stop(&d);
}

/* ---- tamper: a store broken by its client ---- */

#define TA_PAGES 512

/* The stores this process holds: memfds named zswapd-store (store.c). */
static size_t find_stores(int *fds, size_t max) {
        return td_fds_named("memfd:zswapd-store", fds, max);
}

/* Point the STORED entry of page addr at an object past the pool's end.
 * Returns whether a store held such an entry. */
static bool break_entry(const int *fds, size_t nfds, const uint8_t *addr) {
        const uint64_t zone = (uintptr_t)addr & ~(((uint64_t)2 << 20) - 1);

        for (size_t i = 0; i < nfds; i++) {
                /* the client's descriptor is read-only; root (the owner,
                 * here) can open the file again for writing */
                char path[64];
                snprintf(path, sizeof(path), "/proc/self/fd/%d", fds[i]);
                int fd = open(path, O_RDWR | O_CLOEXEC);
                if (fd < 0)
                        test_skip("cannot open the store for writing: %s", strerror(errno));
                uint8_t *map = mmap(NULL, STORE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                close(fd);
                if (map == MAP_FAILED)
                        continue;
                uint32_t leaves = atomic_load(&store_super(map)->leaves);
                for (uint32_t id = 0; id < leaves && id < STORE_LEAVES_MAX; id++) {
                        if (atomic_load(&store_dir(map)[id]) != (zone | STORE_DIR_USED))
                                continue;
                        _Atomic uint64_t *e = &store_leaf(map, id)[((uintptr_t)addr - zone) / ZSWAP_PAGE_SIZE];
                        uint64_t v = atomic_load(e);
                        if (pe_state(v) != PE_STORED)
                                continue;
                        atomic_store(e, pe_make_stored(0xfffffff0u, pe_clen(v)));
                        munmap(map, STORE_SIZE);
                        return true;
                }
                munmap(map, STORE_SIZE);
        }
        return false;
}

static void case_tamper(void) {
        const size_t len = TA_PAGES * ZSWAP_PAGE_SIZE;
        static uint64_t hashes[TA_PAGES], good_hashes[TA_PAGES];
        int fds[8];
        size_t broken = 1; /* a page that is STORED: not zero, not pattern */

        td_start_logged(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *bad = td_connect(&d);
        uint8_t *buf = td_region(bad, len, 41, hashes);
        struct zswap_client *good = td_connect(&d);
        uint8_t *gbuf = td_region(good, len, 42, good_hashes);
        ASSERT_TRUE(td_pageout_want(bad, buf, len, TA_PAGES / 2 + 1) > TA_PAGES / 2);
        ASSERT_TRUE(td_pageout_want(good, gbuf, len, TA_PAGES / 2 + 1) > TA_PAGES / 2);
        size_t nfds = find_stores(fds, 8);
        fprintf(stderr, "%zu stores held by this process\n", nfds);
        if (nfds == 0)
                test_skip("no store memfd found in /proc/self/fd (not handed to clients yet?)");

        atomic_store(&step, "tamper: daemon killed, breaking an entry");
        td_kill(&d);
        /* both clients' stores are here; only one holds an entry for buf */
        ASSERT_TRUE(break_entry(fds, nfds, buf + broken * ZSWAP_PAGE_SIZE));
        atomic_store(&step, "tamper: a new daemon, reading the healthy client's pages");
        td_respawn(&d);
        assert_verified(gbuf, len, good_hashes, "in the healthy client after the restart");
        wait_served(good);
        ASSERT_TRUE(td_pageout_want(good, gbuf, len, TA_PAGES / 2 + 1) > TA_PAGES / 2);
        assert_verified(gbuf, len, good_hashes, "in the healthy client after a pageout");

        /* the tampered client restores what it can: every other page */
        atomic_store(&step, "tamper: reading the tampered client's pages");
        size_t lost = 0;
        for (size_t i = 0; i < TA_PAGES; i++)
                if (i != broken && page_hash(buf + i * ZSWAP_PAGE_SIZE) != hashes[i]) {
                        fprintf(stderr, "tampered client: page %zu differs\n", i);
                        lost++;
                }
        bool bus = test_page_poisoned(buf + broken * ZSWAP_PAGE_SIZE);
        fprintf(stderr, "tampered client: page %zu %s; %zu other pages differ; the daemon is %s\n", broken,
                bus ? "lost (poisoned)" : "readable, not poisoned", lost, kill(d.pid, 0) == 0 ? "alive" : "gone");
        td_log_dump(&d);
        ASSERT_EQ(lost, 0);
        ASSERT_TRUE(bus); /* never a page of zeros */
        ASSERT_EQ(kill(d.pid, 0), 0);
        zswap_disconnect(good);
        zswap_disconnect(bad);
        td_stop(&d);
}

/* ---- disconnect: while no daemon runs ---- */

#define DC_PAGES 1024

static void case_disconnect(void) {
        const size_t len = DC_PAGES * ZSWAP_PAGE_SIZE;
        static uint64_t hashes[DC_PAGES];
        Reader r;

        td_start_logged(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, len, 51, hashes);
        ASSERT_TRUE(td_pageout_want(c, buf, len, DC_PAGES / 2 + 1) > DC_PAGES / 2);

        atomic_store(&step, "disconnect: daemon killed, a reader waiting");
        td_kill(&d);
        reader_start(&r, buf + 100 * ZSWAP_PAGE_SIZE);
        reader_assert_waits(&r);
        /* the library looks for a daemon for 10 s (the default); a
         * disconnect does not wait for it */
        atomic_store(&step, "disconnect: zswap_disconnect() with no daemon");
        uint64_t t0 = now_ns();
        zswap_disconnect(c);
        uint64_t ms = ms_since(t0);
        fprintf(stderr, "zswap_disconnect took %llu ms with no daemon\n", (unsigned long long)ms);
        ASSERT_TRUE(ms < 10000); /* it did not wait the 10 s for a daemon */
        reader_join(&r, t0, TEST_WAIT_S);
        ASSERT_EQ(atomic_load(&r.hash), hashes[100]);
        assert_verified(buf, len, hashes, "after a disconnect with no daemon");
        ASSERT_TRUE(!vma_uffd_registered(buf));
}

/* ---- fork-kill: the daemon dies between FORK_PREPARE and the fork ---- */

#define FK_PAGES 512

static _Atomic bool fk_armed;
static _Atomic bool fk_killed;

/* Registered before libzswap's handlers, so it runs after libzswap's
 * prepare handler (reverse order): FORK_PREPARE has been answered, the
 * fork system call comes next and waits in the kernel until someone reads
 * its event, which the dead daemon never will. */
static void fk_prepare(void) {
        if (!atomic_load(&fk_armed))
                return;
        td_kill(&d);
        atomic_store(&fk_killed, true);
}

static _Atomic bool fk_done;

/* Starts the next daemon while the main thread waits in fork(), and lives
 * on until the case ends: the daemon's parent-death signal (setpriv
 * --pdeathsig) follows the thread that started it, not the process. */
static void *fk_respawn_main(void *arg) {
        while (!atomic_load(&fk_killed))
                usleep(1000);
        usleep(100000);
        td_respawn(&d); /* posix_spawn: not a fork of ours */
        while (!atomic_load(&fk_done))
                usleep(10000);
        return NULL;
}

static void case_fork_kill(void) {
        const size_t len = FK_PAGES * ZSWAP_PAGE_SIZE;
        static uint64_t hashes[FK_PAGES];
        pthread_t t;
        int st;

#if defined(__SANITIZE_THREAD__)
        /* the child starts libzswap's agent thread after a multi-threaded
         * fork, which ThreadSanitizer's runtime cannot follow */
        test_skip("fork-kill: not under TSan");
#endif
        ASSERT_OK(-pthread_atfork(fk_prepare, NULL, NULL));
        td_start_logged(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, len, 61, hashes);
        ASSERT_TRUE(td_pageout_want(c, buf, len, FK_PAGES / 2 + 1) > FK_PAGES / 2);

        ASSERT_OK(-pthread_create(&t, NULL, fk_respawn_main, NULL));
        atomic_store(&step, "fork-kill: fork with the daemon killed after FORK_PREPARE");
        atomic_store(&fk_armed, true);
        uint64_t t0 = now_ns();
        pid_t pid = fork();
        if (pid == 0) {
                /* the new daemon read our fork event: it holds our uffd and
                 * every page the parent had evicted */
                size_t bad = verify_pages(buf, len, hashes);
                if (bad)
                        fprintf(stderr, "fork-kill child: %zu pages differ\n", bad);
                _exit(bad ? 1 : 0);
        }
        atomic_store(&fk_armed, false);
        ASSERT_TRUE(pid > 0);
        fprintf(stderr, "fork returned after %llu ms\n", (unsigned long long)ms_since(t0));
        atomic_store(&step, "fork-kill: waiting for the child");
        ASSERT_EQ(waitpid(pid, &st, 0), pid);
        fprintf(stderr, "child %d: status %#x, %llu ms after the fork call\n", (int)pid, st,
                (unsigned long long)ms_since(t0));
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                td_log_dump(&d);
                test_fail("a child whose fork event the next daemon read failed: status %#x (%s)", st,
                          WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "exited");
        }
        assert_verified(buf, len, hashes, "in the parent after the fork");
        wait_served(c);
        ASSERT_TRUE(td_pageout_want(c, buf, len, FK_PAGES / 2 + 1) > FK_PAGES / 2);
        assert_verified(buf, len, hashes, "in the parent after a pageout");
        zswap_disconnect(c);
        td_stop(&d);
        atomic_store(&fk_done, true);
        pthread_join(t, NULL);
}

/* ---- fork-adopt-kill: the next daemon adopts the parent before the fork's
 * instant, and dies before the child attaches ---- */

static _Atomic bool fa_armed, fa_respawned, fa_done;
static int fa_report = -1; /* the library's recovery lines (ZSWAP_RECOVERY_FD), non-blocking */

/* After libzswap's prepare handler (registered before it): FORK_PREPARE
 * was answered. The daemon dies, and the fork waits until the library has
 * been adopted by the next one (its agent does that meanwhile) and uses
 * the store that one handed it. */
static void fa_prepare(void) {
        char buf[512];
        size_t len = 0;

        if (!atomic_load(&fa_armed))
                return;
        td_kill(&d);
        atomic_store(&fk_killed, true);
        for (uint64_t end = now_ns() + TEST_WAIT_S * 1000000000ull;; usleep(1000)) {
                ssize_t n = read(fa_report, buf + len, sizeof(buf) - 1 - len);
                if (n > 0) {
                        len += (size_t)n;
                        buf[len] = 0;
                        if (strstr(buf, "adopted by a new daemon"))
                                return;
                        if (len > sizeof(buf) / 2)
                                len = 0;
                }
                if (now_ns() > end) {
                        fprintf(stderr, "fork-adopt-kill: the next daemon did not adopt the parent within %d s\n",
                                TEST_WAIT_S);
                        _exit(1);
                }
        }
}

/* Before libzswap's child handler: the child stops before it attaches. */
static void fa_child(void) {
        if (atomic_load(&fa_armed)) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                raise(SIGSTOP);
        }
}

/* Starts the next daemon (posix_spawn: not a fork of ours); its check that
 * the daemon accepts connects a client, which waits for the fork to end */
static void *fa_respawn_main(void *arg) {
        while (!atomic_load(&fk_killed))
                usleep(1000);
        td_respawn(&d);
        atomic_store(&fa_respawned, true);
        while (!atomic_load(&fa_done))
                usleep(10000);
        return NULL;
}

static void case_fork_adopt_kill(void) {
        const size_t len = FK_PAGES * ZSWAP_PAGE_SIZE;
        static uint64_t hashes[FK_PAGES];
        pthread_t t;
        int st;

#if defined(__SANITIZE_THREAD__)
        test_skip("fork-adopt-kill: not under TSan (a child of a multi-threaded fork starts threads)");
#endif
        ASSERT_OK(-pthread_atfork(fa_prepare, NULL, fa_child));
        td_start_logged(&d, getenv("TEST_DAEMON_ARGS"));
        int rp[2];
        char fdnum[16];
        ASSERT_OK(pipe2(rp, O_CLOEXEC | O_NONBLOCK));
        fa_report = rp[0];
        snprintf(fdnum, sizeof(fdnum), "%d", rp[1]);
        ASSERT_OK(setenv("ZSWAP_RECOVERY_FD", fdnum, 1));
        struct zswap_client *c = td_connect(&d);
        ASSERT_OK(unsetenv("ZSWAP_RECOVERY_FD"));
        uint8_t *buf = td_region(c, len, 71, hashes);
        ASSERT_TRUE(td_pageout_want(c, buf, len, FK_PAGES / 2 + 1) > FK_PAGES / 2);

        ASSERT_OK(-pthread_create(&t, NULL, fa_respawn_main, NULL));
        atomic_store(&step, "fork-adopt-kill: fork, the daemon killed after FORK_PREPARE, the next adopts");
        atomic_store(&fa_armed, true);
        pid_t pid = fork();
        if (pid == 0) {
                size_t bad = verify_pages(buf, len, hashes);
                fprintf(stderr, "fork-adopt-kill child: %zu pages differ\n", bad);
                _exit(bad ? 1 : 0);
        }
        atomic_store(&fa_armed, false);
        ASSERT_TRUE(pid > 0);
        ASSERT_EQ(waitpid(pid, &st, WUNTRACED), pid);
        ASSERT_TRUE(WIFSTOPPED(st));
        WAIT_UNTIL(atomic_load(&fa_respawned), TEST_WAIT_S, "the next daemon never accepted");
        bool told = td_log_has(&d, "adopted while it forks");
        /* it read the fork's event (fork() returned): it alone holds the
         * child's uffd, and it dies before the child can attach */
        atomic_store(&step, "fork-adopt-kill: the adopting daemon dies; the child goes on");
        td_kill(&d);
        ASSERT_OK(kill(pid, SIGCONT));
        ASSERT_EQ(waitpid(pid, &st, 0), pid);
        fprintf(stderr, "child %d: status %#x\n", (int)pid, st);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                td_log_dump(&d);
                test_fail("a child forked while the next daemon adopted its parent, that daemon dead before the "
                          "child attached: status %#x (%s)",
                          st, WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? "killed by its library" : "pages differ");
        }
        ASSERT_TRUE(told); /* the fork was taken as announced to the adopting daemon */
        td_respawn(&d);
        wait_served(c);
        assert_verified(buf, len, hashes, "in the parent, adopted again after the fork");
        zswap_disconnect(c);
        td_stop(&d);
        atomic_store(&fa_done, true);
        pthread_join(t, NULL);
}

/* ---- one process per case ---- */

/* ---- event-kill: the daemon killed while it handles an event ---- */

#define EK_PAGES 256

typedef enum EkOp { EK_REMAP, EK_REMOVE, EK_UNMAP, _EK_MAX } EkOp;

static void assert_zeros(const uint8_t *p, size_t len, const char *what) {
        for (size_t i = 0; i < len; i++)
                if (p[i]) {
                        td_log_dump(&d);
                        test_fail("%s: byte %zu of %zu (page %zu) is %#x, not 0", what, i, len, i / ZSWAP_PAGE_SIZE,
                                  p[i]);
                }
}

static _Atomic int ek_status; /* the dying daemon's wait status, once the next one runs */
static _Atomic bool ek_ready, ek_done;

/* Waits for the daemon to die and starts the next one. Not the main
 * thread's job: an mremap() sends a second event (UNMAP of the old range)
 * and waits in the kernel until a daemon reads it. The thread lives until
 * the daemon is stopped (its parent-death signal follows this thread). */
static void *ek_respawn_main(void *arg) {
        int st;

        ASSERT_EQ(waitpid(d.pid, &st, 0), d.pid);
        d.pid = 0;
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && !arg)
                td_respawn(&d);
        atomic_store(&ek_status, st);
        atomic_store(&ek_ready, true);
        while (!atomic_load(&ek_done))
                usleep(10000);
        return NULL;
}

/* The watcher of a daemon armed to kill itself at an event: started
 * before the event, it starts the next daemon unless `respawn` is false. */
static pthread_t ek_watch(bool respawn) {
        static int no_respawn;
        pthread_t t;

        atomic_store(&ek_ready, false);
        atomic_store(&ek_done, false);
        ASSERT_OK(-pthread_create(&t, NULL, ek_respawn_main, respawn ? NULL : &no_respawn));
        return t;
}

/* The daemon must have died by its injected SIGKILL at `what`. */
static void ek_assert_killed(const char *what) {
        while (!atomic_load(&ek_ready))
                usleep(1000);
        int st = atomic_load(&ek_status);
        if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL || !td_log_has(&d, "fault injection: killed")) {
                td_log_dump(&d);
                test_fail("the daemon did not die at %s: status %#x", what, st);
        }
}

/* The daemon stopped, the watcher (and the daemon's parent-death signal
 * that follows it) can go. */
static void ek_unwatch(pthread_t t) {
        atomic_store(&ek_done, true);
        pthread_join(t, NULL);
}

/*
 * Every page evicted, then one address-space change whose event kills the
 * daemon (ZSWAPD_INJECT kill_event, common/inject.h) at the read that
 * hands it over (point 1: munmap/madvise/mremap return then) or in the
 * middle of handling it (point 2). The next daemon must find the event in
 * the store's journal and apply it to what it adopts. Point 3: killed at
 * the read and no daemon comes back (reconnect timeout 0): the library
 * restores every page itself, the journal's event applied.
 */
static void event_kill_one(EkOp op, unsigned point) {
        const bool restore = point == 3;
        static const char *const names[] = { "mremap", "MADV_DONTNEED", "munmap" };
        static uint64_t hashes[EK_PAGES];
        const size_t len = EK_PAGES * ZSWAP_PAGE_SIZE, half = len / 2;
        char spec[64];

        fprintf(stderr, "-- %s, the daemon killed %s\n", names[op],
                point == 1 ? "once it has read the event" : point == 2 ? "while it handles the event" :
                "once it has read the event, and none comes back");
        atomic_store(&step, "event-kill: starting a daemon that dies at an event");
        /* the middle of the mremap's entries: by the count of those points
         * alone (kill_remap), whatever other event came first */
        if (op == EK_REMAP && point == 2)
                snprintf(spec, sizeof(spec), "kill_remap=#1");
        else
                snprintf(spec, sizeof(spec), "kill_event=1/%u", restore ? 1 : point);
        td_start_injected(&d, spec);
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, len, 90 + op * 2 + point, hashes), *fresh = NULL;
        ASSERT_TRUE(td_pageout_want(c, buf, len, EK_PAGES / 2 + 1) > EK_PAGES / 2);
        if (restore)
                ASSERT_OK(zswap_set_reconnect_timeout(c, 0));
        pthread_t t = ek_watch(!restore);

        atomic_store(&step, "event-kill: the address-space change");
        switch (op) {
        case EK_REMAP: {
                /* onto a reservation of our own: MREMAP_FIXED replaces it,
                 * and no other thread can map into a hole meanwhile */
                uint8_t *target = test_map(len + (1 << 20));
                target += 37 * ZSWAP_PAGE_SIZE;
                uint8_t *moved = mremap(buf, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, target);
                ASSERT_TRUE(moved == target);
                buf = moved;
                break;
        }
        case EK_REMOVE:
                ASSERT_OK(madvise(buf, half, MADV_DONTNEED));
                break;
        default:
                /* a new mapping over the second half: the kernel unmaps the
                 * old one first (the same UNMAP event as munmap(), from
                 * vm_mmap_pgoff()), and no other thread can map into a
                 * hole between an munmap() and our mmap() (one did, under
                 * ASan, and the mmap found the place taken) */
                fresh = mmap(buf + half, half, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
                ASSERT_TRUE(fresh == buf + half);
                break;
        }
        atomic_store(&step, "event-kill: waiting for the next daemon");
        ek_assert_killed("the event");
        if (op == EK_REMAP && point == 2 && !td_log_has(&d, "killed with an mremap's entry at its old place and its new one")) {
                td_log_dump(&d);
                test_fail("the daemon was not killed in the middle of moving the mremap's entries");
        }

        if (restore) {
                /* the library put every page back and let the memory go */
                atomic_store(&step, "event-kill: waiting for the library's own restore");
                uint8_t *probe = op == EK_UNMAP ? buf : buf + half;
                WAIT_UNTIL(!vma_uffd_registered(probe), TEST_WAIT_S, "the range is still registered");
                if (op == EK_REMAP)
                        assert_verified(buf, len, hashes, "restored by the library at the mremap's destination");
                else if (op == EK_REMOVE) {
                        assert_zeros(buf, half, "a page dropped by MADV_DONTNEED, restored by the library");
                        assert_verified(buf + half, half, hashes + EK_PAGES / 2, "restored past the MADV_DONTNEED");
                } else {
                        assert_zeros(fresh, half, "a new mapping where an unmapped one was, after the restore");
                        assert_verified(buf, half, hashes, "restored before the munmap's range");
                }
                zswap_disconnect(c);
                ek_unwatch(t);
                munmap(buf, len);
                return;
        }
        atomic_store(&step, "event-kill: a new daemon, reading every page");
        wait_served(c);
        if (!td_log_has(&d, "left an event unfinished")) {
                td_log_dump(&d);
                test_fail("the new daemon found no event in the journal");
        }
        switch (op) {
        case EK_REMAP:
                assert_verified(buf, len, hashes, "at the mremap's destination");
                break;
        case EK_REMOVE:
                assert_zeros(buf, half, "a page dropped by MADV_DONTNEED");
                assert_verified(buf + half, half, hashes + EK_PAGES / 2, "past the MADV_DONTNEED");
                break;
        default:
                /* the new mapping, registered where the old one was: it
                 * must not see the old one's pages */
                ASSERT_OK(zswap_register(c, fresh, half));
                assert_zeros(fresh, half, "a new mapping where an unmapped one was");
                assert_verified(buf, half, hashes, "before the munmap's range");
                break;
        }
        /* the new daemon knows the ranges as they are now: each unregisters
         * whole (an MADV_DONTNEED leaves its range registered) */
        ASSERT_EQ(zswap_unregister(c, buf, op == EK_UNMAP ? half : len), 0);
        if (fresh)
                ASSERT_EQ(zswap_unregister(c, fresh, half), 0);
        zswap_disconnect(c);
        td_stop(&d);
        ek_unwatch(t);
        munmap(buf, len);
}

/*
 * Two mremaps in a row (as test-soak does), the daemon killed at the
 * `hit`th kill_event point of the pair: 1 the first REMAP read, 2 the
 * entry in the middle of its range written at its new place and not yet
 * gone from the old one, 3 every entry moved and the ranges not yet, 4
 * the UNMAP of its source read (which the REMAP did already: nothing
 * more is cut or dropped, events.c remap_src_take()), 5..8 the same for
 * the second mremap. Points 2 and 6 are the first and second kill_remap
 * point, which counts those alone: the state they are for is reached
 * whatever other event the daemon reads first. The
 * pages in the states a busy client leaves: `mix` 0 every page evicted
 * and stored; 1 a part read back sequentially first (fault-around, kept
 * copies); 2 a pageout just before the moves (pages in staging or being
 * compressed). Every page must read back at the final place. (test-soak
 * under TSan lost a page when the daemon was killed between taking an
 * entry from its old place and writing it at the new one.)
 */
static void remap_kill_one(unsigned hit, unsigned mix) {
        static uint64_t hashes[EK_PAGES];
        const size_t len = EK_PAGES * ZSWAP_PAGE_SIZE;
        char spec[64];

        fprintf(stderr, "-- two mremaps, the daemon killed at kill point %u, pages mix %u\n", hit, mix);
        atomic_store(&step, "remap-kill: starting a daemon that dies at an event");
        if (hit % 4 == 2)
                snprintf(spec, sizeof(spec), "kill_remap=#%u", hit / 4 + 1);
        else
                snprintf(spec, sizeof(spec), "kill_event=1/%u", hit);
        td_start_injected(&d, spec);
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, len, 120 + hit * 3 + mix, hashes);
        if (mix != 2)
                ASSERT_TRUE(td_pageout_want(c, buf, len, EK_PAGES / 2 + 1) > EK_PAGES / 2);
        if (mix == 1) {
                volatile uint8_t sink = 0;
                for (size_t p = EK_PAGES / 4; p < EK_PAGES / 2; p++)
                        sink ^= buf[p * ZSWAP_PAGE_SIZE];
                (void)sink;
        }
        pthread_t t = ek_watch(true);
        if (mix == 2)
                (void)zswap_pageout(c, buf, len);

        atomic_store(&step, "remap-kill: the moves");
        for (int i = 0; i < 2; i++) {
                const size_t extra = 2 << 20, skip = (size_t)(17 + 29 * i) * ZSWAP_PAGE_SIZE;
                uint8_t *res = test_map(len + extra), *target = res + skip;
                uint8_t *moved = mremap(buf, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, target);
                ASSERT_TRUE(moved == target);
                ASSERT_OK(munmap(res, skip));
                ASSERT_OK(munmap(target + len, extra - skip));
                buf = moved;
        }
        atomic_store(&step, "remap-kill: waiting for the next daemon");
        ek_assert_killed("the moves");
        /* (a pageout just before may have left the range's second half
         * resident: the kill then comes after the walk) */
        if (hit % 4 == 2 && mix != 2 && !td_log_has(&d, "killed with an mremap's entry at its old place and its new one")) {
                td_log_dump(&d);
                test_fail("the daemon was not killed in the middle of moving an mremap's entries");
        }
        wait_served(c);
        assert_verified(buf, len, hashes, "after two mremaps and a daemon killed among them");
        zswap_disconnect(c);
        td_stop(&d);
        ek_unwatch(t);
        munmap(buf, len);
}

/* Every kill point with every mix of page states; with
 * TEST_REMAP_KILL_QUICK=1 (the sanitizer runs of .ci/run, where a daemon
 * takes a second to start) every kill point once, the mix rotating. */
static void case_remap_kill(void) {
        const char *quick = getenv("TEST_REMAP_KILL_QUICK");

        for (unsigned mix = 0; mix < 3; mix++)
                for (unsigned hit = 1; hit <= 8; hit++)
                        if (!(quick && strcmp(quick, "1") == 0) || hit % 3 == mix)
                                remap_kill_one(hit, mix);
}

static void case_event_kill(void) {
        for (EkOp op = 0; op < _EK_MAX; op++)
                for (unsigned point = 1; point <= 3; point++)
                        event_kill_one(op, point);
}

/*
 * The daemon killed once it has read a fork event: the child's uffd died
 * with it, the kernel unregistered the child's memory, and the pages the
 * parent had evicted are missing from the child. Its library writes them
 * back from the parent's store (held as at the fork until the child
 * attaches): the child reads every page. The parent loses nothing and is
 * adopted by the next daemon.
 */
static void case_fork_event_kill(void) {
        const size_t len = FK_PAGES * ZSWAP_PAGE_SIZE;
        static uint64_t hashes[FK_PAGES];
        pthread_t t;
        int st;

#if defined(__SANITIZE_THREAD__)
        test_skip("fork-event-kill: not under TSan (a child of a multi-threaded fork starts threads)");
#endif
        td_start_injected(&d, "kill_event=1/1");
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, len, 67, hashes);
        ASSERT_TRUE(td_pageout_want(c, buf, len, FK_PAGES / 2 + 1) > FK_PAGES / 2);
        t = ek_watch(true);

        atomic_store(&step, "fork-event-kill: fork, the daemon dies reading its event");
        pid_t pid = fork();
        if (pid == 0) {
                size_t bad = verify_pages(buf, len, hashes);
                fprintf(stderr, "fork-event-kill child: %zu pages differ\n", bad);
                _exit(bad ? 1 : 0);
        }
        ASSERT_TRUE(pid > 0);
        ASSERT_EQ(waitpid(pid, &st, 0), pid);
        fprintf(stderr, "child %d: status %#x\n", (int)pid, st);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                test_fail("a child whose uffd died with the daemon: status %#x (%s)", st,
                          WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? "killed by its library" : "pages differ");
        ek_assert_killed("the fork event");
        wait_served(c);
        assert_verified(buf, len, hashes, "in the parent, adopted after the fork");
        zswap_disconnect(c);
        td_stop(&d);
        ek_unwatch(t);
}

static const char *const cases[] = { "idle",   "load",       "fallback", "fallback-now", "planned",
                                     "tamper", "disconnect", "fork-kill", "event-kill", "fork-event-kill",
                                     "remap-kill", "fork-adopt-kill" };

static void run_case(const char *name) {
        watchdog_start(3 * TEST_WAIT_S); /* above every wait's own bound */
        if (strcmp(name, "idle") == 0)
                case_idle();
        else if (strcmp(name, "load") == 0)
                case_load();
        else if (strcmp(name, "fallback") == 0)
                case_fallback("1");
        else if (strcmp(name, "fallback-now") == 0)
                case_fallback("0");
        else if (strcmp(name, "planned") == 0)
                case_planned();
        else if (strcmp(name, "tamper") == 0)
                case_tamper();
        else if (strcmp(name, "disconnect") == 0)
                case_disconnect();
        else if (strcmp(name, "fork-kill") == 0)
                case_fork_kill();
        else if (strcmp(name, "event-kill") == 0)
                case_event_kill();
        else if (strcmp(name, "fork-event-kill") == 0)
                case_fork_event_kill();
        else if (strcmp(name, "remap-kill") == 0)
                case_remap_kill();
        else if (strcmp(name, "fork-adopt-kill") == 0)
                case_fork_adopt_kill();
        else
                test_fail("no case %s", name);
        atomic_store(&watchdog_off, true);
}

int main(int argc, char **argv) {
        const char *only = getenv("TEST_RESTART_ONLY");
        const char *env_seed = getenv("TEST_SEED");
        unsigned failed = 0, skipped = 0, ran = 0;

        seed = env_seed ? strtoull(env_seed, NULL, 0) : now_ns() ^ (uint64_t)getpid() << 32;
        if (argc == 2) {
                fprintf(stderr, "case %s, TEST_SEED=%#llx\n", argv[1], (unsigned long long)seed);
                run_case(argv[1]);
                return 0;
        }
        test_require_root();
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                int st;
                if (only && strcmp(only, cases[i]) != 0)
                        continue;
                fprintf(stderr, "==== %s\n", cases[i]);
                pid_t pid = fork();
                ASSERT_TRUE(pid >= 0);
                if (pid == 0) {
                        char s[32];
                        snprintf(s, sizeof(s), "%#llx", (unsigned long long)seed + i);
                        setenv("TEST_SEED", s, 1);
                        execl("/proc/self/exe", argv[0], cases[i], (char *)NULL);
                        _exit(127);
                }
                ASSERT_EQ(waitpid(pid, &st, 0), pid);
                ran++;
                if (WIFEXITED(st) && WEXITSTATUS(st) == TEST_SKIP) {
                        skipped++;
                        fprintf(stderr, "==== %s: skipped\n", cases[i]);
                } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                        failed++;
                        fprintf(stderr, "==== %s: FAILED (status %#x)\n", cases[i], st);
                } else {
                        fprintf(stderr, "==== %s: ok\n", cases[i]);
                }
        }
        fprintf(stderr, "%u cases: %u failed, %u skipped\n", ran, failed, skipped);
        if (failed)
                return 1;
        return ran && skipped == ran ? TEST_SKIP : 0;
}
