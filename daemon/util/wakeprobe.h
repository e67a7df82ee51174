/*
 * wakeprobe.h: what a userfaultfd round trip costs on this machine for
 * one arrangement of the threads that serve it.
 *
 * A region of the calling thread's process is registered for missing
 * faults; a child process (as the daemon is to its clients: a context
 * switch between the two also switches address spaces, which some
 * hypervisors make far dearer than a switch between threads) serves each
 * fault with one UFFDIO_COPY of a prepared page, and the calling thread
 * touches the pages one at a time in a scattered order and times each
 * touch. Nothing is decompressed: the bare cost of the wake-ups.
 *
 * bench-wake prints every arrangement (docs/benchmarks.md, "Fault
 * service"); the daemon measures the ones it may choose between at start
 * (daemon/fault/calibrate.c). The child holds the only reference to the
 * uffd once it runs, so a child that dies ends the faults instead of
 * leaving the caller waiting (the kernel then maps zero pages, which the
 * probe reports as an error), and the child lives 10 s at most (an alarm),
 * so the caller's wait is bounded even if its handlers stopped serving.
 */
#pragma once

#include <sched.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum WakeArr {
        WAKE_SAME_CPU,      /* handler and faulting thread on the first CPU; handler in epoll_wait */
        WAKE_SAME_READ,     /* as same-cpu, the handler sleeps in poll() */
        WAKE_CROSS_CPU,     /* handler on the second CPU, faulting thread on the first */
        WAKE_CROSS_SPIN,    /* as cross-cpu, the handler busy-polls */
        WAKE_UNPINNED,      /* one handler, neither pinned */
        WAKE_PERCPU,        /* one pinned handler per CPU, all woken by each fault (the shared service) */
        WAKE_PERCPU_SPIN,   /* as percpu, a handler that served polls spin_us before it sleeps */
        WAKE_PERCPU_ONE,    /* as percpu, EPOLLEXCLUSIVE: a fault wakes one sleeping handler */
        WAKE_PERCPU_ONE_SPIN, /* as percpu-one, with the poll */
        WAKE_UNPINNED_SPIN, /* as unpinned, with the poll (the home service) */
        WAKE_N
} WakeArr;

extern const char *const wake_arr_names[WAKE_N];

typedef struct WakeProbeOpts {
        size_t nfaults;
        unsigned spin_us;   /* the *_SPIN arrangements' poll */
        bool same_process;  /* handlers as threads of the caller's process (bench-wake --same-process) */
        const cpu_set_t *cpus; /* where to run: the first two for the pinned pairs, all for percpu; NULL: the caller's affinity */
} WakeProbeOpts;

typedef struct WakeProbe {
        double median_us, p99_us, max_us;
        double handler_cpu_us; /* CPU time of all handlers per fault */
} WakeProbe;

/*
 * The floor under every arrangement, measured the same way in the
 * caller's process (bench-wake; the daemon never calls it):
 *   WAKE_FLOOR_SIGBUS  the faulting thread serves its own fault: the region
 *                      is registered with UFFD_FEATURE_SIGBUS, and the
 *                      thread's SIGBUS handler copies the page in
 *                      (UFFDIO_COPY) and returns; no other thread, no
 *                      wake-up: the exception, the signal's delivery and
 *                      return and one ioctl, the least any fault served in
 *                      userspace pays.
 *   WAKE_FLOOR_KERNEL  no userfaultfd: the kernel maps its zero page. The
 *                      cheapest fault the kernel serves (the exception,
 *                      the handling, one page-table entry), which every
 *                      fault pays at least.
 * Not thread-safe (the SIGBUS handler is the process's, restored after).
 */
typedef enum WakeFloor { WAKE_FLOOR_SIGBUS, WAKE_FLOOR_KERNEL } WakeFloor;
int wake_probe_floor(WakeFloor f, const WakeProbeOpts *o, WakeProbe *ret);

/* Measure one arrangement. 0, or -errno (no userfaultfd, the child
 * failed, a page came back wrong). The caller's CPU affinity is restored. */
int wake_probe(WakeArr arr, const WakeProbeOpts *o, WakeProbe *ret);
