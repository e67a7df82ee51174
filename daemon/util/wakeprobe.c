/*
 * wakeprobe.c: see wakeprobe.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "macro.h"
#include "util.h"
#include "wakeprobe.h"

#define PAGE 4096UL
#define MAX_HANDLERS 64
#define FILL 0x5a
#define PROBE_BOUND_S 10 /* the most a handler process may live */

const char *const wake_arr_names[WAKE_N] = {
        [WAKE_SAME_CPU] = "same-cpu",           [WAKE_SAME_READ] = "same-read",
        [WAKE_CROSS_CPU] = "cross-cpu",         [WAKE_CROSS_SPIN] = "cross-spin",
        [WAKE_UNPINNED] = "unpinned",           [WAKE_PERCPU] = "percpu",
        [WAKE_PERCPU_SPIN] = "percpu-spin",     [WAKE_PERCPU_ONE] = "percpu-one",
        [WAKE_PERCPU_ONE_SPIN] = "percpu-one-spin", [WAKE_UNPINNED_SPIN] = "unpin-spin",
};

/* In a shared mapping: the handlers may be another process. */
typedef struct Ctx {
        WakeArr arr;
        int uffd;
        uint64_t spin_ns;
        int stop_fd;        /* eventfd, written at the end: no handler sleeps through it */
        _Atomic bool stop;
        _Atomic unsigned ready; /* handlers waiting for faults */
        /* percpu: one reader of the uffd at a time (lock), and the
         * daemon's handshake (fault/events.c service()): a handler that
         * finds the lock taken leaves a kick, and the holder reads again
         * after it lets go if it finds one. With EPOLLEXCLUSIVE the
         * holder's epoll may never hear of a fault that woke another
         * handler, so without the kick that fault would wait for ever */
        atomic_flag lock;
        _Atomic bool kick;
        _Alignas(64) uint8_t page[PAGE];
} Ctx;

typedef struct Handler {
        Ctx *c;
        cpu_set_t cpus;
        pthread_t thread;
        double cpu_s; /* written by the handler when it ends */
} Handler;

static bool arr_percpu(WakeArr a) {
        return a == WAKE_PERCPU || a == WAKE_PERCPU_SPIN || a == WAKE_PERCPU_ONE || a == WAKE_PERCPU_ONE_SPIN;
}

static bool arr_spins(WakeArr a) {
        return a == WAKE_PERCPU_SPIN || a == WAKE_PERCPU_ONE_SPIN || a == WAKE_UNPINNED_SPIN;
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
        struct uffdio_copy cp = { .dst = msg.arg.pagefault.address & ~(PAGE - 1), .src = (uintptr_t)c->page,
                                  .len = PAGE };
        (void)ioctl(c->uffd, UFFDIO_COPY, &cp); /* EEXIST: served already */
        return true;
}

static void *handler_main(void *arg) {
        Handler *h = arg;
        Ctx *c = h->c;
        WakeArr a = c->arr;
        uint64_t spin_until = 0;
        int ep = -1;

        (void)sched_setaffinity(0, sizeof(h->cpus), &h->cpus);
        if (a != WAKE_SAME_READ && a != WAKE_CROSS_SPIN) {
                struct epoll_event ev = { .events = EPOLLIN, .data.u32 = 1 }, sev = { .events = EPOLLIN };
                if (arr_percpu(a))
                        ev.events |= EPOLLET;
                if (a == WAKE_PERCPU_ONE || a == WAKE_PERCPU_ONE_SPIN)
                        ev.events |= EPOLLEXCLUSIVE;
                ep = epoll_create1(EPOLL_CLOEXEC);
                if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, c->uffd, &ev) < 0 ||
                    epoll_ctl(ep, EPOLL_CTL_ADD, c->stop_fd, &sev) < 0)
                        goto out;
        }
        atomic_fetch_add_explicit(&c->ready, 1, memory_order_release);
        while (!atomic_load_explicit(&c->stop, memory_order_relaxed)) {
                if (a == WAKE_CROSS_SPIN) {
                        serve_one(c);
                        continue;
                }
                if (a == WAKE_SAME_READ) {
                        struct pollfd p[2] = { { .fd = c->uffd, .events = POLLIN }, { .fd = c->stop_fd, .events = POLLIN } };
                        /* the uffd is non-blocking; poll() is the blocking read */
                        if (poll(p, 2, 100) > 0 && p[0].revents)
                                serve_one(c);
                        continue;
                }
                struct epoll_event ev;
                bool spinning = spin_until && now_ns() < spin_until;
                if (epoll_wait(ep, &ev, 1, spinning ? 0 : 100) <= 0 || !ev.data.u32)
                        continue;
                bool served = false;
                if (arr_percpu(a)) {
                        /* seq_cst: a store-buffering handshake, as service()'s */
                        atomic_store_explicit(&c->kick, true, memory_order_seq_cst);
                        while (!atomic_flag_test_and_set_explicit(&c->lock, memory_order_seq_cst)) {
                                atomic_store_explicit(&c->kick, false, memory_order_seq_cst);
                                while (serve_one(c))
                                        served = true;
                                atomic_flag_clear_explicit(&c->lock, memory_order_seq_cst);
                                if (!atomic_load_explicit(&c->kick, memory_order_seq_cst))
                                        break;
                        }
                } else
                        while (serve_one(c))
                                served = true;
                if (served && arr_spins(a))
                        spin_until = now_ns() + c->spin_ns;
        }
out:
        h->cpu_s = thread_cpu_s();
        if (ep >= 0)
                close(ep);
        return NULL;
}

static void *shared_alloc(size_t size) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
}

static int start_handlers(Handler *hs, unsigned nh) {
        for (unsigned i = 0; i < nh; i++)
                if (pthread_create(&hs[i].thread, NULL, handler_main, &hs[i]) != 0) {
                        atomic_store_explicit(&hs[0].c->stop, true, memory_order_relaxed);
                        for (unsigned k = 0; k < i; k++)
                                pthread_join(hs[k].thread, NULL);
                        return -EAGAIN;
                }
        return 0;
}

static void join_handlers(Handler *hs, unsigned nh) {
        for (unsigned i = 0; i < nh; i++)
                pthread_join(hs[i].thread, NULL);
}

/* The handlers end at once (stop_fd); a child that does not end within
 * 5 s is killed. */
static void reap(pid_t child) {
        for (int i = 0; i < 25000; i++) {
                if (waitpid(child, NULL, WNOHANG) == child)
                        return;
                usleep(200);
        }
        kill(child, SIGKILL);
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
                ;
}

static int open_uffd(uint64_t features) {
        int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
                return -errno;
        struct uffdio_api api = { .api = UFFD_API, .features = features };
        if (ioctl(fd, UFFDIO_API, &api) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

/* The pages are touched in a scattered order (a stride prime to the
 * count), with a little work in between, as a reader would. */
static int touch_pages(const uint8_t *region, size_t n, uint8_t expect, uint64_t *lat) {
        for (size_t i = 0; i < n; i++) {
                size_t p = (i * 7919) % n;
                uint64_t t0 = now_ns();
                uint8_t v = *(const volatile uint8_t *)(region + p * PAGE);
                lat[i] = now_ns() - t0;
                if (v != expect)
                        return -EIO; /* the handlers are gone: a zero page */
                for (volatile int k = 0; k < 200; k++)
                        ;
        }
        return 0;
}

static void summarize(uint64_t *lat, size_t n, double cpu_s, WakeProbe *ret) {
        qsort(lat, n, sizeof(*lat), cmp_u64);
        *ret = (WakeProbe){ .median_us = (double)lat[n / 2] / 1e3,
                            .p99_us = (double)lat[n * 99 / 100] / 1e3,
                            .max_us = (double)lat[n - 1] / 1e3,
                            .handler_cpu_us = cpu_s * 1e6 / (double)n };
}

int wake_probe(WakeArr arr, const WakeProbeOpts *o, WakeProbe *ret) {
        cpu_set_t saved, all, first;
        int cpus[MAX_HANDLERS], ncpu = 0;
        size_t n = o->nfaults ? o->nfaults : 1;
        Ctx *c = NULL;
        Handler *hs = NULL;
        uint64_t *lat = NULL;
        uint8_t *region = MAP_FAILED;
        pid_t child = -1;
        unsigned nh = 1;
        int uffd = -1, r;

        if (arr >= WAKE_N)
                return -EINVAL;
        if (sched_getaffinity(0, sizeof(saved), &saved) < 0)
                return -errno;
        all = o->cpus ? *o->cpus : saved;
        for (int cpu = 0; cpu < CPU_SETSIZE && ncpu < MAX_HANDLERS; cpu++)
                if (CPU_ISSET(cpu, &all))
                        cpus[ncpu++] = cpu;
        if (ncpu == 0)
                return -EINVAL;
        CPU_ZERO(&first);
        CPU_SET(cpus[0], &first);

        c = shared_alloc(sizeof(*c));
        hs = shared_alloc(MAX_HANDLERS * sizeof(*hs));
        if (c)
                c->stop_fd = -1;
        lat = calloc(n, sizeof(*lat));
        region = mmap(NULL, n * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (!c || !hs || !lat || region == MAP_FAILED) {
                r = -ENOMEM;
                goto out;
        }
        (void)madvise(region, n * PAGE, MADV_NOHUGEPAGE);
        c->arr = arr;
        c->spin_ns = (uint64_t)o->spin_us * 1000;
        atomic_flag_clear(&c->lock);
        memset(c->page, FILL, PAGE);
        c->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (c->stop_fd < 0) {
                r = -errno;
                goto out;
        }
        uffd = c->uffd = open_uffd(0);
        if (uffd < 0) {
                r = uffd;
                goto out;
        }
        struct uffdio_register reg = { .range = { (uintptr_t)region, n * PAGE }, .mode = UFFDIO_REGISTER_MODE_MISSING };
        if (ioctl(uffd, UFFDIO_REGISTER, &reg) < 0) {
                r = -errno;
                goto out;
        }
        if (arr_percpu(arr))
                nh = (unsigned)ncpu;
        for (unsigned i = 0; i < nh; i++) {
                int cpu = arr == WAKE_SAME_CPU || arr == WAKE_SAME_READ ? cpus[0]
                          : arr == WAKE_CROSS_CPU || arr == WAKE_CROSS_SPIN ? cpus[ncpu > 1 ? 1 : 0]
                          : arr_percpu(arr) ? cpus[i] : -1;
                hs[i].c = c;
                if (cpu < 0)
                        hs[i].cpus = all;
                else {
                        CPU_ZERO(&hs[i].cpus);
                        CPU_SET(cpu, &hs[i].cpus);
                }
        }
        if (o->same_process) {
                if ((r = start_handlers(hs, nh)) < 0)
                        goto out;
        } else {
                pid_t parent = getpid();
                child = fork();
                if (child < 0) {
                        r = -errno;
                        goto out;
                }
                if (child == 0) {
                        /* never outlive the probe, nor keep it waiting
                         * past a bound: a child that dies ends the
                         * caller's faults (zero pages: -EIO) */
                        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
                                _exit(1);
                        sigset_t alrm;
                        sigemptyset(&alrm);
                        sigaddset(&alrm, SIGALRM);
                        signal(SIGALRM, SIG_DFL);
                        sigprocmask(SIG_UNBLOCK, &alrm, NULL); /* a caller's mask must not lift the bound */
                        alarm(PROBE_BOUND_S);
                        _exit(start_handlers(hs, nh) < 0 ? 1 : (join_handlers(hs, nh), 0));
                }
                /* the child's copy is the uffd now (c->uffd names it
                 * there): if it dies, the faults end rather than wait */
                close(uffd);
                uffd = -1;
        }
        bool pinned = arr == WAKE_SAME_CPU || arr == WAKE_SAME_READ || arr == WAKE_CROSS_CPU || arr == WAKE_CROSS_SPIN;
        (void)sched_setaffinity(0, sizeof(cpu_set_t), pinned ? &first : &all);
        /* the handlers at their epoll_wait (a 1 s bound, then measure anyway) */
        for (int i = 0; i < 10000 && atomic_load_explicit(&c->ready, memory_order_acquire) < nh; i++)
                usleep(100);
        r = touch_pages(region, n, FILL, lat);
        atomic_store_explicit(&c->stop, true, memory_order_relaxed);
        (void)!write(c->stop_fd, &(uint64_t){ 1 }, sizeof(uint64_t));
        if (o->same_process)
                join_handlers(hs, nh);
        else
                reap(child);
        (void)sched_setaffinity(0, sizeof(saved), &saved);
        if (r == 0) {
                double cpu_s = 0;
                for (unsigned i = 0; i < nh; i++)
                        cpu_s += hs[i].cpu_s;
                summarize(lat, n, cpu_s, ret);
        }
out:
        if (uffd >= 0)
                close(uffd);
        if (c && c->stop_fd >= 0)
                close(c->stop_fd);
        if (region != MAP_FAILED)
                munmap(region, n * PAGE);
        free(lat);
        if (c)
                munmap(c, sizeof(*c));
        if (hs)
                munmap(hs, MAX_HANDLERS * sizeof(*hs));
        return r;
}

/* The faulting thread's own SIGBUS handler (wake_probe_floor()): one probe
 * at a time in a process, so the uffd, the page and the region are static.
 * A copy that fails for good unregisters that page, so that the access
 * retried after the handler reads the zero page (-EIO) instead of faulting
 * again for ever; a SIGBUS from anywhere else, or a page that stays
 * registered, gets the default action (the process dies of it, as it
 * would have without the probe). */
static int floor_uffd = -1;
static const uint8_t *floor_page;
static uintptr_t floor_start, floor_end;

static void floor_sigbus(int sig, siginfo_t *si, void *uc) {
        int saved = errno;
        uintptr_t addr = (uintptr_t)si->si_addr & ~(PAGE - 1);
        struct uffdio_copy cp = { .dst = addr, .src = (uintptr_t)floor_page, .len = PAGE };
        struct uffdio_range one = { addr, PAGE };

        (void)uc;
        if (addr < floor_start || addr >= floor_end ||
            (ioctl(floor_uffd, UFFDIO_COPY, &cp) < 0 && errno != EEXIST && errno != EAGAIN &&
             ioctl(floor_uffd, UFFDIO_UNREGISTER, &one) < 0))
                signal(sig, SIG_DFL);
        errno = saved;
}

int wake_probe_floor(WakeFloor f, const WakeProbeOpts *o, WakeProbe *ret) {
        size_t n = o->nfaults ? o->nfaults : 1;
        struct sigaction sa = { .sa_sigaction = floor_sigbus, .sa_flags = SA_SIGINFO }, old;
        cpu_set_t saved, first;
        uint8_t *region = MAP_FAILED, *page = MAP_FAILED;
        uint64_t *lat = NULL;
        bool handler = false;
        int uffd = -1, r = 0;

        if (sched_getaffinity(0, sizeof(saved), &saved) < 0)
                return -errno;
        CPU_ZERO(&first);
        for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
                if (CPU_ISSET(cpu, o->cpus ? o->cpus : &saved)) {
                        CPU_SET(cpu, &first);
                        break;
                }
        lat = calloc(n, sizeof(*lat));
        region = mmap(NULL, n * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        page = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (!lat || region == MAP_FAILED || page == MAP_FAILED) {
                r = -ENOMEM;
                goto out;
        }
        (void)madvise(region, n * PAGE, MADV_NOHUGEPAGE);
        memset(page, FILL, PAGE);
        if (f == WAKE_FLOOR_SIGBUS) {
                struct uffdio_register reg = { .range = { (uintptr_t)region, n * PAGE },
                                               .mode = UFFDIO_REGISTER_MODE_MISSING };
                uffd = open_uffd(UFFD_FEATURE_SIGBUS);
                if (uffd < 0) {
                        r = uffd;
                        goto out;
                }
                if (ioctl(uffd, UFFDIO_REGISTER, &reg) < 0) {
                        r = -errno;
                        goto out;
                }
                floor_uffd = uffd;
                floor_page = page;
                floor_start = (uintptr_t)region;
                floor_end = floor_start + n * PAGE;
                if (sigaction(SIGBUS, &sa, &old) < 0) {
                        r = -errno;
                        goto out;
                }
                handler = true;
        }
        (void)sched_setaffinity(0, sizeof(first), &first);
        r = touch_pages(region, n, f == WAKE_FLOOR_SIGBUS ? FILL : 0, lat);
        (void)sched_setaffinity(0, sizeof(saved), &saved);
        if (r == 0)
                summarize(lat, n, 0, ret);
out:
        if (handler)
                (void)sigaction(SIGBUS, &old, NULL);
        if (uffd >= 0)
                close(uffd);
        floor_uffd = -1;
        if (region != MAP_FAILED)
                munmap(region, n * PAGE);
        if (page != MAP_FAILED)
                munmap(page, PAGE);
        free(lat);
        return r;
}
