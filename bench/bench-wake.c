/*
 * bench-wake.c: what a userfaultfd round trip costs for each arrangement of
 * the handler thread, on this machine. This is the measurement that chose
 * the daemon's fault-thread layout (docs/benchmarks.md, "Fault service").
 *
 * One process, two threads: a faulting thread touches pages of a registered
 * region one at a time; a handler thread serves each missing fault with one
 * UFFDIO_COPY of a prepared page. Nothing is decompressed: this is the bare
 * cost of the wake-ups. Arrangements:
 *
 *   same-cpu   both threads pinned to CPU 0; the handler sleeps in
 *              epoll_wait (as the daemon's threads do)
 *   same-read  as same-cpu, but the handler sleeps in a blocking read()
 *   cross-cpu  handler pinned to CPU 1, faulting thread to CPU 0
 *   cross-spin as cross-cpu, the handler busy-polls (non-blocking read in
 *              a loop) instead of sleeping: its CPU is spent
 *   unpinned   neither pinned: where the scheduler puts them
 *   percpu     one handler per CPU, each pinned, each with its own epoll
 *              watching the same uffd (edge-triggered); whichever wakes
 *              first takes a per-uffd trylock and serves: the daemon's
 *              arrangement. The faulting thread is not pinned.
 *   percpu-spin as percpu, and a handler that served polls its epoll for
 *              50 us before it sleeps again (--fault-spin-us 50)
 *   unpin-spin one unpinned handler that polls 50 us after each fault
 *              (--fault-home --fault-spin-us 50)
 *
 * Each arrangement prints median, p99 and max of the fault latency (one
 * volatile read bracketed by clock_gettime) and the handler CPU time per
 * fault (all handler threads, getrusage RUSAGE_THREAD).
 *
 * Needs CAP_SYS_PTRACE-free plain userfaultfd (root, or
 * vm.unprivileged_userfaultfd=1).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL

typedef enum Mode { SAME_CPU, SAME_READ, CROSS_CPU, CROSS_SPIN, UNPINNED, PERCPU, PERCPU_SPIN, UNPINNED_SPIN, PERCPU_EXCL } Mode;

static const char *const mode_names[] = { "same-cpu", "same-read", "cross-cpu", "cross-spin", "unpinned", "percpu", "percpu-spin", "unpin-spin", "percpu-excl" };

typedef struct Ctx {
        Mode mode;
        int uffd;
        _Atomic bool stop;
        atomic_flag lock; /* percpu: one reader of the uffd at a time */
        _Alignas(64) uint8_t page[PAGE];
} Ctx;

typedef struct Handler {
        Ctx *c;
        int cpu; /* -1: not pinned */
        pthread_t thread;
        double cpu_s;
        uint64_t spin_until;
} Handler;

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void pin(int cpu) {
        cpu_set_t s;
        if (cpu < 0)
                return;
        CPU_ZERO(&s);
        CPU_SET(cpu, &s);
        if (sched_setaffinity(0, sizeof(s), &s) < 0)
                perror("sched_setaffinity");
}

static double thread_cpu_s(void) {
        struct rusage ru;
        getrusage(RUSAGE_THREAD, &ru);
        return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
               ru.ru_stime.tv_usec / 1e6;
}

/* Read one message if there is one and serve it; false when empty. */
static bool serve_one(Ctx *c) {
        struct uffd_msg msg;
        ssize_t n = read(c->uffd, &msg, sizeof(msg));

        if (n != sizeof(msg))
                return false;
        if (msg.event != UFFD_EVENT_PAGEFAULT)
                return true;
        struct uffdio_copy cp = { .dst = msg.arg.pagefault.address & ~(PAGE - 1),
                                  .src = (uintptr_t)c->page, .len = PAGE };
        if (ioctl(c->uffd, UFFDIO_COPY, &cp) < 0 && errno != EEXIST)
                perror("UFFDIO_COPY");
        return true;
}

static void *handler_main(void *arg) {
        Handler *h = arg;
        Ctx *c = h->c;
        int ep = -1;

        pin(h->cpu);
        if (c->mode != SAME_READ && c->mode != CROSS_SPIN) {
                struct epoll_event ev = { .events = EPOLLIN | (c->mode == PERCPU || c->mode == PERCPU_SPIN ? EPOLLET : c->mode == PERCPU_EXCL ? EPOLLET | EPOLLEXCLUSIVE : 0) };
                ep = epoll_create1(0);
                epoll_ctl(ep, EPOLL_CTL_ADD, c->uffd, &ev);
        }
        while (!atomic_load(&c->stop)) {
                if (c->mode == CROSS_SPIN) {
                        serve_one(c);
                        continue;
                }
                if (c->mode == SAME_READ) {
                        struct pollfd p = { .fd = c->uffd, .events = POLLIN };
                        /* the uffd is non-blocking; poll() is the blocking read */
                        if (poll(&p, 1, 100) > 0)
                                serve_one(c);
                        continue;
                }
                struct epoll_event ev;
                bool spin = (c->mode == PERCPU_SPIN || c->mode == UNPINNED_SPIN) && now_ns() < h->spin_until;
                if (epoll_wait(ep, &ev, 1, spin ? 0 : 100) <= 0)
                        continue;
                if (c->mode == PERCPU_SPIN || c->mode == UNPINNED_SPIN)
                        h->spin_until = now_ns() + 50000;
                if (c->mode == PERCPU || c->mode == PERCPU_SPIN || c->mode == PERCPU_EXCL) {
                        if (atomic_flag_test_and_set(&c->lock))
                                continue; /* the holder's epoll has this edge too */
                        while (serve_one(c))
                                ;
                        atomic_flag_clear(&c->lock);
                } else
                        while (serve_one(c))
                                ;
        }
        h->cpu_s = thread_cpu_s();
        if (ep >= 0)
                close(ep);
        return NULL;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

/* The handlers run in a process of their own, as the daemon's fault
 * threads do, unless --same-process: a context switch between two
 * processes also switches address spaces, which some hypervisors make
 * far dearer than a switch between two threads of one process. */
static bool same_process;

static void *shared_alloc(size_t size) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
}

static void start_handlers(Handler *hs, int nh) {
        for (int i = 0; i < nh; i++)
                pthread_create(&hs[i].thread, NULL, handler_main, &hs[i]);
}

static void join_handlers(Handler *hs, int nh) {
        for (int i = 0; i < nh; i++)
                pthread_join(hs[i].thread, NULL);
}

static int run(Mode mode, size_t npages, int ncpu) {
        Ctx *c = shared_alloc(sizeof(*c));
        Handler *hs = shared_alloc(2 * sizeof(*hs));
        int nh = mode == PERCPU || mode == PERCPU_SPIN || mode == PERCPU_EXCL ? (ncpu < 2 ? 1 : 2) : 1;
        uint64_t *lat = calloc(npages, sizeof(*lat));
        uint8_t *region;
        pid_t child = -1;

        if (!c || !hs || !lat) {
                perror("memory");
                return -1;
        }
        c->mode = mode;
        atomic_flag_clear(&c->lock);
        memset(c->page, 0x5a, PAGE);
        c->uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
        if (c->uffd < 0) {
                perror("userfaultfd");
                return -1;
        }
        struct uffdio_api api = { .api = UFFD_API };
        if (ioctl(c->uffd, UFFDIO_API, &api) < 0) {
                perror("UFFDIO_API");
                return -1;
        }
        region = mmap(NULL, npages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        madvise(region, npages * PAGE, MADV_NOHUGEPAGE);
        struct uffdio_register reg = { .range = { (uintptr_t)region, npages * PAGE },
                                       .mode = UFFDIO_REGISTER_MODE_MISSING };
        if (ioctl(c->uffd, UFFDIO_REGISTER, &reg) < 0) {
                perror("UFFDIO_REGISTER");
                return -1;
        }
        for (int i = 0; i < nh; i++) {
                hs[i].c = c;
                hs[i].cpu = mode == SAME_CPU || mode == SAME_READ ? 0
                            : mode == CROSS_CPU || mode == CROSS_SPIN ? (ncpu > 1 ? 1 : 0)
                            : mode == PERCPU || mode == PERCPU_SPIN || mode == PERCPU_EXCL ? i : -1;
        }
        if (same_process)
                start_handlers(hs, nh);
        else if ((child = fork()) == 0) {
                start_handlers(hs, nh);
                join_handlers(hs, nh);
                _exit(0);
        } else if (child < 0) {
                perror("fork");
                return -1;
        }
        pin(mode >= UNPINNED ? -1 : 0);
        if (mode >= UNPINNED) {
                cpu_set_t all;
                CPU_ZERO(&all);
                for (int i = 0; i < ncpu; i++)
                        CPU_SET(i, &all);
                sched_setaffinity(0, sizeof(all), &all);
        }
        usleep(20000);
        for (size_t i = 0; i < npages; i++) {
                /* a random-ish walk, so no pattern helps */
                size_t p = (i * 7919) % npages;
                uint64_t t0 = now_ns();
                uint8_t v = *(volatile uint8_t *)(region + p * PAGE);
                lat[i] = now_ns() - t0;
                if (v != 0x5a) {
                        fprintf(stderr, "bad content at page %zu\n", p);
                        return -1;
                }
                /* a little work between faults, as a real reader has */
                for (volatile int k = 0; k < 200; k++)
                        ;
        }
        atomic_store(&c->stop, true);
        if (same_process)
                join_handlers(hs, nh);
        else
                waitpid(child, NULL, 0);
        double cpu = 0;
        for (int i = 0; i < nh; i++)
                cpu += hs[i].cpu_s;
        qsort(lat, npages, sizeof(*lat), cmp_u64);
        printf("%-11s %9.1f %9.1f %9.1f %12.1f\n", mode_names[mode], lat[npages / 2] / 1e3,
               lat[npages * 99 / 100] / 1e3, lat[npages - 1] / 1e3, cpu * 1e6 / (double)npages);
        munmap(region, npages * PAGE);
        close(c->uffd);
        free(lat);
        munmap(c, sizeof(*c));
        munmap(hs, 2 * sizeof(*hs));
        pin(-1);
        return 0;
}

int main(int argc, char **argv) {
        size_t npages = 20000;

        for (int i = 1; i < argc; i++)
                if (strcmp(argv[i], "--same-process") == 0)
                        same_process = true;
                else
                        npages = strtoul(argv[i], NULL, 0);
        int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);

        if (ncpu > 2)
                ncpu = 2; /* the arrangements are about two vCPUs */
        printf("uffd missing-fault round trip, %zu faults per arrangement, %d CPUs\n", npages, ncpu);
        printf("%-11s %9s %9s %9s %12s\n", "arrangement", "median us", "p99 us", "max us", "handler CPU us/fault");
        for (Mode m = SAME_CPU; m <= PERCPU_EXCL; m++)
                if (run(m, npages, ncpu) < 0)
                        return 1;
        return 0;
}
