/*
 * bench-wake.c: what a userfaultfd round trip costs for each arrangement of
 * the threads that serve it, on this machine (daemon/util/wakeprobe.h, the
 * same code the daemon measures its choices with at start).
 *
 * A faulting thread touches pages of a registered region one at a time; a
 * handler in a process of its own (--same-process: a thread of the same
 * process) serves each missing fault with one UFFDIO_COPY of a prepared
 * page. Nothing is decompressed: this is the bare cost of the wake-ups.
 * Arrangements:
 *
 *   same-cpu   both pinned to the first CPU; the handler sleeps in
 *              epoll_wait (as the daemon's threads do)
 *   same-read  as same-cpu, but the handler sleeps in poll()
 *   cross-cpu  handler pinned to the second CPU, faulting thread to the first
 *   cross-spin as cross-cpu, the handler busy-polls (non-blocking read in
 *              a loop) instead of sleeping: its CPU is spent
 *   unpinned   neither pinned: where the scheduler puts them
 *   percpu     one handler per CPU, each pinned, each with its own epoll
 *              watching the same uffd (edge-triggered); every handler is
 *              woken, whichever gets there first takes a per-uffd trylock
 *              and serves: the daemon's shared service with --fault-wake all.
 *              The faulting thread is not pinned.
 *   percpu-spin as percpu, and a handler that served polls its epoll for
 *              50 us before it sleeps again (--fault-spin-us 50)
 *   percpu-one as percpu, registered with EPOLLEXCLUSIVE: a fault wakes
 *              one sleeping handler (--fault-wake one)
 *   percpu-one-spin as percpu-one, with the 50 us poll
 *   unpin-spin one unpinned handler that polls 50 us after each fault
 *              (--fault-home --fault-spin-us 50)
 *
 * Each arrangement prints median, p99 and max of the fault latency (one
 * volatile read bracketed by clock_gettime) and the handler CPU time per
 * fault (all handler threads, getrusage RUSAGE_THREAD).
 *
 * Then the floor under all of them, measured the same way:
 *
 *   in-thread    the region registered with UFFD_FEATURE_SIGBUS: the
 *                faulting thread's own SIGBUS handler copies the page in
 *                and returns (no wake-up of any other thread: the
 *                exception, the signal and one ioctl, the least any fault
 *                served in userspace pays)
 *   kernel-fault no userfaultfd: the kernel maps its zero page (the
 *                cheapest fault the kernel serves: what kernel zram's
 *                fault pays before its own work)
 *
 * and the ratios of the medians between the best arrangement, in-thread
 * and kernel-fault.
 *
 * Needs plain userfaultfd (root, or vm.unprivileged_userfaultfd=1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wakeprobe.h"

int main(int argc, char **argv) {
        WakeProbeOpts o = { .nfaults = 20000, .spin_us = 50 };
        cpu_set_t two;
        int ncpu = 0;

        for (int i = 1; i < argc; i++)
                if (strcmp(argv[i], "--same-process") == 0)
                        o.same_process = true;
                else
                        o.nfaults = strtoul(argv[i], NULL, 0);
        /* the arrangements are about two vCPUs: the first two this
         * process may use */
        if (sched_getaffinity(0, sizeof(two), &two) == 0)
                for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
                        if (CPU_ISSET(cpu, &two) && ++ncpu > 2)
                                CPU_CLR(cpu, &two);
        o.cpus = ncpu ? &two : NULL;
        if (ncpu > 2)
                ncpu = 2;
        printf("uffd missing-fault round trip, %zu faults per arrangement, %d CPUs, handlers in %s\n", o.nfaults,
               ncpu, o.same_process ? "the same process" : "a process of their own");
        printf("%-15s %9s %9s %9s %12s\n", "arrangement", "median us", "p99 us", "max us", "handler CPU us/fault");
        double best = 0;
        for (WakeArr a = 0; a < WAKE_N; a++) {
                WakeProbe p;
                int r = wake_probe(a, &o, &p);
                if (r < 0) {
                        fprintf(stderr, "%s: %s\n", wake_arr_names[a], strerror(-r));
                        return 1;
                }
                printf("%-15s %9.1f %9.1f %9.1f %12.1f\n", wake_arr_names[a], p.median_us, p.p99_us, p.max_us,
                       p.handler_cpu_us);
                if (best == 0 || p.median_us < best)
                        best = p.median_us;
        }
        /* the floor: what no arrangement of handler threads can go under */
        WakeProbe self, kernel;
        int r = wake_probe_floor(WAKE_FLOOR_SIGBUS, &o, &self);
        if (r == 0)
                r = wake_probe_floor(WAKE_FLOOR_KERNEL, &o, &kernel);
        if (r < 0) {
                fprintf(stderr, "floor: %s\n", strerror(-r));
                return 1;
        }
        printf("%-15s %9.1f %9.1f %9.1f %12s   (the faulting thread serves itself: SIGBUS, UFFDIO_COPY)\n",
               "in-thread", self.median_us, self.p99_us, self.max_us, "-");
        printf("%-15s %9.1f %9.1f %9.1f %12s   (no userfaultfd: the kernel maps its zero page)\n", "kernel-fault",
               kernel.median_us, kernel.p99_us, kernel.max_us, "-");
        printf("medians: in-thread / kernel-fault %.2fx; best arrangement above / in-thread %.2fx, / kernel-fault "
               "%.2fx\n",
               self.median_us / kernel.median_us, best / self.median_us, best / kernel.median_us);
        return 0;
}
