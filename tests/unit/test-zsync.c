/*
 * test-zsync: the handshake between the agent's page moves and the
 * daemon's reads of the client's uffd (common/zsync.h), on one memfd page
 * mapped twice, as the client and the daemon each map it.
 *
 * - An agent that finds a reader sleeps in the kernel (FUTEX_WAIT on
 *   `reading`) instead of spinning on the CPU the reader and the program
 *   need: the test waits until /proc says the agent's thread sits in
 *   futex(). With the loop of sched_yield() it replaced, that never
 *   happens.
 * - The reader's end lets it move (zsync_move_begin() true), and the
 *   agent is counted out of `waiting` again.
 * - A reader that stays lets zsync_move_begin() give up (false) after its
 *   bound, as before.
 * - A page that claims sleepers nobody has (a hostile client's) costs the
 *   reader a futex wake and nothing else.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "test.h"
#include "zsync.h"

static ZSync *daemon_view, *agent_view;
static _Atomic pid_t agent_tid;
static _Atomic int agent_result = -1;

static void *agent(void *arg) {
        (void)arg;
        atomic_store(&agent_tid, (pid_t)syscall(SYS_gettid));
        bool ok;
        /* a reader that stays longer than one wait makes it give up: try
         * again, as the agent does with the next run */
        while (!(ok = zsync_move_begin(agent_view)))
                ;
        zsync_move_end(agent_view);
        atomic_store(&agent_result, ok);
        return NULL;
}

/* The system call the thread is blocked in, from /proc (-1: running or unknown). */
static long thread_syscall(pid_t tid) {
        char path[64], buf[256];
        snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
        FILE *f = fopen(path, "re");
        long nr = -1;
        if (!f)
                return -1;
        if (!fgets(buf, sizeof(buf), f) || sscanf(buf, "%ld", &nr) != 1)
                nr = -1;
        fclose(f);
        return nr;
}

int main(void) {
        int fd = memfd_create("zsync-test", MFD_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ASSERT_OK(ftruncate(fd, ZSWAP_SYNC_SIZE));
        daemon_view = mmap(NULL, ZSWAP_SYNC_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        agent_view = mmap(NULL, ZSWAP_SYNC_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ASSERT_TRUE(daemon_view != MAP_FAILED && agent_view != MAP_FAILED && daemon_view != agent_view);

        /* the reader first, then the agent: it must go to sleep */
        ASSERT_TRUE(zsync_read_begin(daemon_view, 0, false));
        pthread_t th;
        ASSERT_OK(pthread_create(&th, NULL, agent, NULL));
        bool slept = false;
        for (unsigned i = 0; i < 20000 && !slept; i++) { /* 20 s at most */
                pid_t tid = atomic_load(&agent_tid);
                slept = tid > 0 && thread_syscall(tid) == SYS_futex && atomic_load(&daemon_view->waiting) == 1;
                if (!slept)
                        usleep(1000);
        }
        fprintf(stderr, "agent %s asleep in futex() while the reader holds\n", slept ? "found" : "never found");
        ASSERT_TRUE(slept);
        ASSERT_EQ(atomic_load(&agent_result), -1); /* still waiting */

        /* the reader's end lets it move */
        zsync_read_end(daemon_view);
        ASSERT_OK(pthread_join(th, NULL));
        ASSERT_EQ(atomic_load(&agent_result), 1);
        ASSERT_EQ(atomic_load(&daemon_view->waiting), 0);
        ASSERT_EQ(atomic_load(&daemon_view->moving), 0);
        ASSERT_EQ(atomic_load(&daemon_view->reading), 0);

        /* a reader that stays: the agent gives up after its bound */
        ASSERT_TRUE(zsync_read_begin(daemon_view, 0, false));
        uint64_t t0 = zsync_now_ns();
        ASSERT_TRUE(!zsync_move_begin(agent_view));
        ASSERT_TRUE(zsync_now_ns() - t0 >= ZSYNC_MOVE_WAIT_NS);
        ASSERT_EQ(atomic_load(&agent_view->moving), 0);
        ASSERT_EQ(atomic_load(&agent_view->waiting), 0);
        zsync_read_end(daemon_view);

        /* sleepers claimed by a page nobody sleeps on: a wake, no wait */
        atomic_store(&agent_view->waiting, 1000);
        for (unsigned i = 0; i < 100; i++) {
                ASSERT_TRUE(zsync_read_begin(daemon_view, 0, false));
                zsync_read_end(daemon_view);
        }
        ASSERT_EQ(atomic_load(&daemon_view->reading), 0);
        return 0;
}
