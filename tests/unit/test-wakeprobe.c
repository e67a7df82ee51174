/*
 * test-wakeprobe: the userfaultfd round-trip probe (daemon/util/wakeprobe.c)
 * and the choice the daemon makes with it at start (daemon/fault/calibrate.c).
 *
 * - Every arrangement, its handlers in a process of their own and as
 *   threads, serves every fault with the right page (the probe checks each
 *   touched page) and reports ordered figures; the caller's CPU affinity
 *   is as it was, and no child is left.
 * - A handler process that dies mid-probe ends the probe with -EIO
 *   (zero pages) instead of leaving the caller waiting in a fault for
 *   ever: the caller drops its own copy of the uffd once the child has
 *   one. Without that, this test hangs at the join.
 * - fault_calibrate() measures only what is left at auto and chooses among
 *   the arrangements the daemon can run.
 * - The floor (wake_probe_floor()): the faulting thread serving its own
 *   faults through SIGBUS gets every page right, as does the kernel's zero
 *   page without a userfaultfd; the caller's SIGBUS action and affinity are
 *   as they were.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "calibrate.h"
#include "test.h"
#include "util.h"
#include "wakeprobe.h"

static void assert_no_child(void) {
        errno = 0;
        ASSERT_TRUE(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD);
}

static void test_arrangements(void) {
        cpu_set_t before, after;

        ASSERT_OK(sched_getaffinity(0, sizeof(before), &before));
        for (int same = 0; same < 2; same++)
                for (WakeArr a = 0; a < WAKE_N; a++) {
                        WakeProbeOpts o = { .nfaults = 200, .spin_us = 50, .same_process = same };
                        WakeProbe p = {};
                        int r = wake_probe(a, &o, &p);
                        if (r < 0)
                                test_fail("%s (%s): %s", wake_arr_names[a], same ? "threads" : "process", strerror(-r));
                        ASSERT_TRUE(p.median_us > 0 && p.p99_us >= p.median_us && p.max_us >= p.p99_us);
                        ASSERT_TRUE(p.handler_cpu_us >= 0);
                        ASSERT_OK(sched_getaffinity(0, sizeof(after), &after));
                        ASSERT_TRUE(CPU_EQUAL(&before, &after));
                        assert_no_child();
                        printf("arrangement %-15s (%s): median %.1f us, p99 %.1f us\n", wake_arr_names[a],
                               same ? "threads" : "process", p.median_us, p.p99_us);
                }
}

static void test_floor(void) {
        struct sigaction before, after;
        cpu_set_t cpus_before, cpus_after;

        ASSERT_OK(sigaction(SIGBUS, NULL, &before));
        ASSERT_OK(sched_getaffinity(0, sizeof(cpus_before), &cpus_before));
        for (WakeFloor f = WAKE_FLOOR_SIGBUS; f <= WAKE_FLOOR_KERNEL; f++) {
                WakeProbeOpts o = { .nfaults = 500 };
                WakeProbe p = {};
                int r = wake_probe_floor(f, &o, &p);
                if (r < 0)
                        test_fail("floor %d: %s", (int)f, strerror(-r));
                ASSERT_TRUE(p.median_us > 0 && p.p99_us >= p.median_us && p.max_us >= p.p99_us);
                ASSERT_OK(sigaction(SIGBUS, NULL, &after));
                /* SA_RESTORER, which libc adds to every action it sets, is not compared */
                ASSERT_TRUE(after.sa_handler == before.sa_handler &&
                            (after.sa_flags & SA_SIGINFO) == (before.sa_flags & SA_SIGINFO));
                ASSERT_OK(sched_getaffinity(0, sizeof(cpus_after), &cpus_after));
                ASSERT_TRUE(CPU_EQUAL(&cpus_before, &cpus_after));
                printf("floor %s: median %.1f us, p99 %.1f us\n", f == WAKE_FLOOR_SIGBUS ? "in-thread" : "kernel-fault",
                       p.median_us, p.p99_us);
        }
}

typedef struct Probe {
        pid_t tid;
        _Atomic bool started, done;
        int r;
} Probe;

static void *probe_main(void *arg) {
        Probe *pr = arg;
        WakeProbeOpts o = { .nfaults = 1u << 20 }; /* far longer than the test lets it run */
        WakeProbe p;

        pr->tid = gettid();
        atomic_store_explicit(&pr->started, true, memory_order_release);
        pr->r = wake_probe(WAKE_CROSS_CPU, &o, &p);
        atomic_store_explicit(&pr->done, true, memory_order_release);
        return NULL;
}

/* the probing thread's child, once it has one */
static pid_t child_of(pid_t tid) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)tid);
        FILE *f = fopen(path, "re");
        int pid = 0;
        if (f) {
                if (fscanf(f, "%d", &pid) != 1)
                        pid = 0;
                fclose(f);
        }
        return pid;
}

static void test_child_dies(void) {
        Probe pr = {};
        pthread_t t;
        pid_t child = 0;
        uint64_t t0 = test_now_ns();

        ASSERT_EQ(pthread_create(&t, NULL, probe_main, &pr), 0);
        while (!atomic_load_explicit(&pr.started, memory_order_acquire) || !(child = child_of(pr.tid))) {
                if (test_now_ns() - t0 > TEST_WAIT_S * 1000000000ull)
                        test_fail("the probe started no handler process in %d s", TEST_WAIT_S);
                usleep(1000);
        }
        usleep(50000); /* well into its faults */
        ASSERT_OK(kill(child, SIGKILL));
        t0 = test_now_ns();
        while (!atomic_load_explicit(&pr.done, memory_order_acquire)) {
                if (test_now_ns() - t0 > TEST_WAIT_S * 1000000000ull)
                        test_fail("the probe still waits %d s after its handler process died", TEST_WAIT_S);
                usleep(1000);
        }
        ASSERT_EQ(pthread_join(t, NULL), 0);
        ASSERT_EQ(pr.r, -EIO);
        assert_no_child();
        printf("handler process killed: the probe ended with %s\n", strerror(-pr.r));
}

static void test_calibrate(void) {
        cpu_set_t allowed;
        ASSERT_OK(sched_getaffinity(0, sizeof(allowed), &allowed));
        unsigned ncpu = (unsigned)CPU_COUNT(&allowed);

        /* both given: nothing measured */
        FaultCalibration c = { .shared = true, .pin = true, .threads = ncpu, .wake = FAULT_WAKE_ONE, .spin_us = 7 };
        fault_calibrate(&c);
        ASSERT_TRUE(c.wake == FAULT_WAKE_ONE && c.spin_us == 7 && !c.summary[0]);

        /* the shared service, both at auto */
        c = (FaultCalibration){ .shared = true, .pin = true, .threads = ncpu, .wake = FAULT_WAKE_AUTO,
                                .spin_us = FAULT_SPIN_AUTO };
        fault_calibrate(&c);
        ASSERT_TRUE(c.wake == FAULT_WAKE_ALL || c.wake == FAULT_WAKE_ONE);
        ASSERT_TRUE(c.spin_us == 0 || c.spin_us == CALIBRATE_SPIN_US);
        if (ncpu >= 2) {
                ASSERT_TRUE(strstr(c.summary, "percpu ") && strstr(c.summary, "percpu-one ") &&
                            strstr(c.summary, "percpu-spin ") && strstr(c.summary, "percpu-one-spin "));
        } else
                ASSERT_TRUE(c.wake == FAULT_WAKE_ALL && c.spin_us == 0 && !c.summary[0]);
        printf("shared service: %s: wake %s, spin %u us\n", c.summary, fault_wake_name(c.wake), c.spin_us);
        assert_no_child();

        /* the wake given, the spin measured */
        c = (FaultCalibration){ .shared = true, .pin = true, .threads = ncpu, .wake = FAULT_WAKE_ALL,
                                .spin_us = FAULT_SPIN_AUTO };
        fault_calibrate(&c);
        ASSERT_TRUE(c.wake == FAULT_WAKE_ALL && (c.spin_us == 0 || c.spin_us == CALIBRATE_SPIN_US));
        ASSERT_TRUE(ncpu < 2 || (strstr(c.summary, "percpu ") && !strstr(c.summary, "percpu-one")));

        /* the home service: only the spin */
        c = (FaultCalibration){ .shared = false, .pin = true, .threads = ncpu, .wake = FAULT_WAKE_AUTO,
                                .spin_us = FAULT_SPIN_AUTO };
        fault_calibrate(&c);
        ASSERT_TRUE(c.wake == FAULT_WAKE_ALL && (c.spin_us == 0 || c.spin_us == CALIBRATE_SPIN_US));
        ASSERT_TRUE(ncpu < 2 || (strstr(c.summary, "unpinned ") && strstr(c.summary, "unpin-spin ")));
        printf("home service: %s: spin %u us\n", c.summary, c.spin_us);

        /* shared threads that are not one per CPU: no probe models them */
        c = (FaultCalibration){ .shared = true, .pin = true, .threads = ncpu + 1, .wake = FAULT_WAKE_AUTO,
                                .spin_us = FAULT_SPIN_AUTO };
        fault_calibrate(&c);
        ASSERT_TRUE(c.wake == FAULT_WAKE_ALL && c.spin_us == 0 && !c.summary[0]);
        assert_no_child();
}

int main(void) {
        test_require_root(); /* userfaultfd for missing faults of our own memory */
        setvbuf(stdout, NULL, _IOLBF, 0);
        test_arrangements();
        test_floor();
        test_child_dies();
        test_calibrate();
        return 0;
}
