/*
 * test-fork-late: a FORK_DONE whose sync through the fault thread comes
 * back only after the program's next FORK_PREPARE leaves that next fork
 * alone (docs/page-lifecycle.md, fork: the fork generation).
 *
 * The daemon runs one fault thread, and the injection fork_done_late
 * sends each FORK_DONE through it, which waits FORK_DONE_LATE_MS (200 ms)
 * before the sync and as long after it. A parent with every page out
 * forks a first child, which leaves at once, and at once a second, which
 * stops before it attaches. Its FORK_PREPARE comes while the first
 * FORK_DONE's sync is still out. The parent must be held for the second
 * child: nothing of its store may change until the child attaches (should
 * the daemon die, the child restores itself from that store), so a touch
 * of one of the parent's evicted pages waits. A daemon that answered that
 * FORK_PREPARE at once, and then let the late FORK_DONE end the second
 * fork's pause and announcement, did not hold the parent: the touch was
 * served while the child was stopped. Then the child goes on and attaches
 * (the hold ends), the touch is served, and the child finds its memory as
 * it was at the fork.
 */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define NPAGES 256u
#define WATCH_MS 1000 /* how long the held touch must wait: the hold lasts 10 s */

static _Atomic bool stop_in_child;
static pid_t test_pid;

/* Registered before the library's own handler (which registers at the
 * first connect), so it runs first in the child: the child stops before
 * it attaches. */
static void child_stops(void) {
        if (atomic_load(&stop_in_child)) {
                /* a test that fails leaves no stopped child (holding its
                 * output open, so that meson waits for it); one that
                 * failed before the prctl() took is gone already */
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (getppid() != test_pid)
                        _exit(2);
                raise(SIGSTOP);
        }
}

/* Whether a thread of the daemon sleeps in nanosleep: the injected wait
 * (the daemon's threads otherwise wait in epoll or on a futex). */
static bool daemon_thread_sleeps(const TestDaemon *d) {
        char path[64], wchan[64];
        bool found = false;

        snprintf(path, sizeof(path), "/proc/%d/task", (int)d->pid);
        DIR *dir = opendir(path);
        if (!dir)
                return false;
        for (struct dirent *e; !found && (e = readdir(dir));)
                if (e->d_name[0] != '.')
                        found = strstr(task_wchan(d->pid, (pid_t)atoi(e->d_name), wchan, sizeof(wchan)),
                                       "nanosleep") != NULL;
        closedir(dir);
        return found;
}

typedef struct Touch {
        const volatile uint8_t *page;
        uint8_t first;
        _Atomic pid_t tid;
        _Atomic bool done;
} Touch;

static void *touch_main(void *arg) {
        Touch *t = arg;

        atomic_store(&t->tid, gettid());
        t->first = t->page[0];
        atomic_store(&t->done, true);
        return NULL;
}

int main(void) {
#if !ZSWAP_INJECT
        test_skip("built with -Dinject=false: no injection sites");
#endif
#if defined(__SANITIZE_THREAD__)
        test_skip("fork children cannot start threads under ThreadSanitizer");
#endif
        const size_t len = NPAGES * ZSWAP_PAGE_SIZE;
        static uint64_t hashes[NPAGES];
        char args[512];
        TestDaemon d;
        int st;

        test_pid = getpid();
        ASSERT_OK(pthread_atfork(NULL, NULL, child_stops));
        const char *extra = getenv("TEST_DAEMON_ARGS");
        snprintf(args, sizeof(args), "%s --fault-threads 1", extra ? extra : "");
        ASSERT_OK(setenv("TEST_DAEMON_ARGS", args, 1));
        td_start_injected(&d, "fork_done_late=1/1");
        struct zswap_client *c = td_connect(&d);
        uint8_t *buf = td_region(c, len, 23, hashes);
        uint8_t first = buf[0];
        ASSERT_TRUE(td_pageout_want(c, buf, len, NPAGES) >= (long)NPAGES);

        /* the first child leaves at once; its FORK_DONE's sync is late */
        pid_t one = fork();
        ASSERT_TRUE(one >= 0);
        if (one == 0)
                _exit(0);
        /* the second fork once the fault thread waits before that sync
         * (done with the first fork's event: a FORK_PREPARE the manager
         * could answer at once), and its child stops */
        WAIT_UNTIL(daemon_thread_sleeps(&d), TEST_WAIT_S, "no thread of the daemon waits before a FORK_DONE's sync");
        atomic_store(&stop_in_child, true);
        pid_t two = fork();
        ASSERT_TRUE(two >= 0);
        if (two == 0) {
                size_t bad = verify_pages(buf, len, hashes);
                if (bad)
                        fprintf(stderr, "second child: %zu pages differ\n", bad);
                zswap_disconnect(c);
                _exit(bad ? 1 : 0);
        }
        atomic_store(&stop_in_child, false);
        ASSERT_EQ(waitpid(two, &st, WUNTRACED), two);
        ASSERT_TRUE(WIFSTOPPED(st));

        /* held for the stopped child: a touch of an evicted page waits */
        Touch t = { .page = buf };
        pthread_t th;
        ASSERT_OK(pthread_create(&th, NULL, touch_main, &t));
        /* in the fault, or served; then it must stay in the fault */
        WAIT_UNTIL(atomic_load(&t.done) || (atomic_load(&t.tid) && task_in_userfault(atomic_load(&t.tid))),
                   TEST_WAIT_S, "the touch neither waits in its fault nor is done");
        for (int i = 0; i < WATCH_MS / 10 && !atomic_load(&t.done); i++)
                usleep(10000);
        if (atomic_load(&t.done)) {
                if (td_log_has(&d, "did not attach within"))
                        test_skip("the parent's hold ended before the test looked: this machine is too slow for "
                                  "the case");
                test_fail("the parent's evicted page was served while its second fork child, not attached yet, "
                          "needed it held: the late FORK_DONE of the first fork ended the second's pause");
        }
        printf("the touch waited %d ms while the second child was stopped\n", WATCH_MS);

        /* the child goes on and attaches: the hold ends */
        ASSERT_OK(kill(two, SIGCONT));
        ASSERT_TRUE(td_waitpid_for(two, &st, TEST_WAIT_S, "the second child"));
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                test_fail("the second child: status %#x", st);
        ASSERT_OK(pthread_join(th, NULL));
        ASSERT_EQ(t.first, first);
        ASSERT_TRUE(td_waitpid_for(one, &st, TEST_WAIT_S, "the first child"));
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        ASSERT_EQ(verify_pages(buf, len, hashes), 0);
        zswap_disconnect(c);
        td_stop(&d);
        return 0;
}
