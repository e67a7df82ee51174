/*
 * test-remap-order: one thread moves its memory away with mremap(), and a
 * second thread moves its own evicted memory into the range the first
 * just left, before the first thread runs again. The kernel unmaps an
 * mremap's old range before it sends the REMAP, but sends that UNMAP only
 * once the mremap's thread runs again after the REMAP was read: here
 * after the second thread's REMAP. The daemon must take that late UNMAP
 * for what it is, the first mremap's own, and not drop the second
 * thread's pages that now live there (it did, and they read as zeros:
 * test-preload churn lost pages so under load, docs/page-lifecycle.md).
 *
 * The first thread is kept from running by a SCHED_FIFO thread of its own
 * priority on its CPU, which sees the first REMAP queued (poll() of the
 * uffd) while that thread sleeps in mremap(), and then spins until the
 * second mremap() has returned (200 ms at most). Every other thread, the
 * daemon's and the agent, is kept on the other CPU meanwhile.
 *
 * TEST_REMAP_ROUNDS overrides the number of rounds.
 */
#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "harness.h"
#include "util.h"

#define NPAGES 512
#define LEN ((size_t)NPAGES * ZSWAP_PAGE_SIZE)

static int uffd;
static uint8_t *a_old, *b_old;
static _Atomic bool queued, moved, hog_ready, gave_up;

/* Attributes of a thread that starts on cpu, at SCHED_FIFO priority fifo
 * (0: as the thread that makes it). */
static void attr_on(pthread_attr_t *a, int cpu, int fifo) {
        struct sched_param sp = { .sched_priority = fifo };
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        ASSERT_OK(pthread_attr_init(a));
        ASSERT_OK(pthread_attr_setaffinity_np(a, sizeof(set), &set));
        if (fifo) {
                ASSERT_OK(pthread_attr_setinheritsched(a, PTHREAD_EXPLICIT_SCHED));
                ASSERT_OK(pthread_attr_setschedpolicy(a, SCHED_FIFO));
                ASSERT_OK(pthread_attr_setschedparam(a, &sp));
        }
}

/* Every thread of process pid but `except` onto CPU 0: nothing but the
 * first thread and the hog runs on CPU 1, so the hog holds up no lock the
 * daemon or the agent would take (new threads inherit it). */
static void pin_others(pid_t pid, pid_t except) {
        char path[64];
        cpu_set_t set;
        struct dirent *e;

        CPU_ZERO(&set);
        CPU_SET(0, &set);
        snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
        DIR *dir = opendir(path);
        ASSERT_TRUE(dir != NULL);
        while ((e = readdir(dir)))
                if (e->d_name[0] != '.' && atoi(e->d_name) != except)
                        (void)sched_setaffinity(atoi(e->d_name), sizeof(set), &set);
        closedir(dir);
}

/* On the first thread's CPU, at its real-time priority: it runs while
 * the first thread sleeps in mremap(), and once the REMAP is queued it
 * keeps the CPU until the second thread's mremap() has returned. */
static void *hog(void *arg) {
        struct pollfd p = { .fd = uffd, .events = POLLIN };
        uint64_t end = now_ns() + 200000000ull;

        (void)arg;
        atomic_store(&hog_ready, true);
        while (poll(&p, 1, 0) == 0)
                if (now_ns() > end) {
                        atomic_store(&gave_up, true);
                        return NULL;
                } else
                        sched_yield(); /* the first thread runs until it sleeps */
        atomic_store(&queued, true);
        while (!atomic_load(&moved) && now_ns() < end)
                ;
        return NULL;
}

/* The second thread, on the other CPU: its evicted pages into the range
 * the first one left. */
static void *mover(void *arg) {
        (void)arg;
        while (!atomic_load(&queued))
                if (atomic_load(&gave_up))
                        return NULL;
        ASSERT_TRUE(mremap(b_old, LEN, LEN, MREMAP_MAYMOVE | MREMAP_FIXED, a_old) == a_old);
        atomic_store(&moved, true);
        return NULL;
}

int main(void) {
        static uint64_t ha[NPAGES], hb[NPAGES];
        unsigned rounds = test_env_uint("TEST_REMAP_ROUNDS", 20);
        size_t bad = 0;
        unsigned late = 0;
        TestDaemon d;
        int fds[4];

        if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
                test_skip("needs two CPUs");
        struct sched_param sp = { .sched_priority = 1 };
        if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0)
                test_skip("SCHED_FIFO not allowed: %m");
        sp.sched_priority = 0;
        ASSERT_OK(sched_setscheduler(0, SCHED_OTHER, &sp));
        td_start(&d, getenv("TEST_DAEMON_ARGS"));
        struct zswap_client *c = td_connect(&d);
        ASSERT_EQ(td_fds_named("anon_inode:[userfaultfd]", fds, ELEMENTSOF(fds)), 1);
        uffd = fds[0];
        for (unsigned r = 0; r < rounds; r++) {
                /* the first thread's memory and the second's, evicted; a
                 * reservation the first one's moves onto */
                a_old = td_region(c, LEN, 2 * r + 1, ha);
                b_old = td_region(c, LEN, 2 * r + 2, hb);
                uint8_t *a_new = test_map(LEN);
                ASSERT_TRUE(td_pageout_want(c, b_old, LEN, NPAGES / 2) >= 0);
                atomic_store(&queued, false);
                atomic_store(&moved, false);
                atomic_store(&hog_ready, false);
                atomic_store(&gave_up, false);
                pin_others(d.pid, 0);
                pin_others(getpid(), (pid_t)syscall(SYS_gettid));
                pthread_t th[2];
                pthread_attr_t a;
                attr_on(&a, 0, 0);
                ASSERT_OK(pthread_create(&th[1], &a, mover, NULL));
                ASSERT_OK(pthread_attr_destroy(&a));
                attr_on(&a, 1, 1);
                ASSERT_OK(pthread_create(&th[0], &a, hog, NULL));
                ASSERT_OK(pthread_attr_destroy(&a));
                while (!atomic_load(&hog_ready))
                        sched_yield();
                /* real-time first: the hog yields to it on their CPU */
                sp.sched_priority = 1;
                ASSERT_OK(sched_setscheduler(0, SCHED_FIFO, &sp));
                cpu_set_t one;
                CPU_ZERO(&one);
                CPU_SET(1, &one);
                ASSERT_OK(sched_setaffinity(0, sizeof(one), &one));
                /* the first thread, on the hog's CPU. Its mremap() returns
                 * once its UNMAP was read: the second REMAP came first if
                 * that mremap() returned already (the hog may have missed
                 * the first REMAP, which the daemon read at once) */
                ASSERT_TRUE(mremap(a_old, LEN, LEN, MREMAP_MAYMOVE | MREMAP_FIXED, a_new) == a_new);
                late += atomic_load(&moved);
                sp.sched_priority = 0;
                ASSERT_OK(sched_setscheduler(0, SCHED_OTHER, &sp));
                CPU_ZERO(&one);
                CPU_SET(0, &one);
                ASSERT_OK(sched_setaffinity(0, sizeof(one), &one)); /* off the next hog's CPU */
                ASSERT_OK(pthread_join(th[0], NULL));
                ASSERT_OK(pthread_join(th[1], NULL));
                if (!atomic_load(&moved)) {
                        /* the hog never saw the REMAP: nothing to look at */
                        ASSERT_EQ(munmap(b_old, LEN), 0);
                        ASSERT_EQ(munmap(a_new, LEN), 0);
                        continue;
                }
                size_t here = verify_pages(a_old, LEN, hb), first = verify_pages(a_new, LEN, ha);
                if (here || first)
                        fprintf(stderr, "round %u: %zu pages moved into the range left, %zu of the first thread's lost "
                                        "their content\n",
                                r, here, first);
                bad += here + first;
                ASSERT_EQ(munmap(a_old, LEN), 0);
                ASSERT_EQ(munmap(a_new, LEN), 0);
        }
        fprintf(stderr, "%u rounds, %u with the first UNMAP after the second REMAP: %zu pages lost\n", rounds, late, bad);
        ASSERT_EQ(bad, 0);
        if (late == 0)
                test_skip("the first UNMAP never came after the second REMAP: nothing was tested");
        zswap_disconnect(c);
        td_stop(&d);
        return 0;
}
