/*
 * thread.c: a fault thread's life: its loop (epoll, spinning, pinning,
 * SCHED_FIFO), the clients it watches, its start and stop. Overview:
 * fault-internal.h.
 */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "inject.h"
#include "fault-internal.h"
#include "log.h"
#include "stages.h"

static void run_read_done(FaultThread *ft, MemReadOp *op) {
        if (op->tag == READ_REVOKE)
                revoke_read_done(ft, op);
        else
                slot_read_done(ft, op);
}

/* Retries this thread left behind, and reads it put off (drain_uffd()),
 * on whichever mm they are. */
static void run_due_retries(FaultThread *ft) {
        ft->retry_due = false;
        ft->read_soon = false;
        for (size_t i = 0; i < ft->nowned; i++) {
                MMClient *mm = ft->owned[i];
                if (!atomic_load_explicit(&mm->has_retries, memory_order_relaxed) &&
                    !atomic_load_explicit(&mm->read_deferred, memory_order_relaxed) &&
                    !atomic_load_explicit(&mm->fork_unread, memory_order_relaxed))
                        continue;
                if (core_user_held(mm->core, mm->uid) || pthread_mutex_trylock(&mm->serve_lock) != 0) {
                        ft->retry_due = true; /* the holder may leave them; look again */
                        continue;
                }
                drain_uffd(ft, mm);
                if (mm->retries)
                        run_retries(ft, mm);
                serve_unlock(ft, mm);
        }
}

void fault_thread_own(FaultThread *ft, MMClient *mm) {
        /* with wake one, the kernel wakes the first thread of the uffd's
         * queue that sleeps; the others find the uffd ready when they
         * next look (calibrate.h) */
        uint32_t one = ft->core->cfg.fault_wake_one ? EPOLLEXCLUSIVE : 0;
        struct epoll_event ev = { .events = EPOLLIN | EPOLLET | one, .data.ptr = mmclient_ref(mm) };
        MMClient **n = INJECT_ALLOC(realloc(ft->owned, (ft->nowned + 1) * sizeof(*n)));

        /* an address space nobody watches has its faults wait forever (a
         * forked child has no other reader): wait for memory a while */
        for (int i = 0; !n && i < 1000; i++) {
                usleep(1000);
                n = INJECT_ALLOC(realloc(ft->owned, (ft->nowned + 1) * sizeof(*n)));
        }
        if (!n || epoll_ctl(ft->epfd, EPOLL_CTL_ADD, mm->uffd, &ev) < 0) {
                log_error("cannot watch a client uffd: %m");
                if (n)
                        ft->owned = n;
                mmclient_unref(mm);
                return;
        }
        ft->owned = n;
        ft->owned[ft->nowned++] = mm;
}

void fault_thread_disown(FaultThread *ft, MMClient *mm) {
        for (size_t i = 0; i < ft->nowned; i++) {
                if (ft->owned[i] != mm)
                        continue;
                epoll_ctl(ft->epfd, EPOLL_CTL_DEL, mm->uffd, NULL);
                ft->owned[i] = ft->owned[--ft->nowned];
                mmclient_unref(mm); /* its retries go with it (mmclient_unref) */
                return;
        }
}

/*
 * One fault thread per CPU, each pinned to its CPU: the thread on the
 * faulting CPU is woken there, runs as soon as the faulting thread sleeps,
 * and wakes it on the same CPU again (3-7 us here). An unpinned thread is
 * woken on whichever CPU is idle, which is the other one, and a wake-up
 * across vCPUs costs ~60 us on this kind of machine (bench/bench-wake,
 * docs/benchmarks.md). The CPUs are those the daemon may run on, in order.
 */
static void pin_to_cpu(FaultThread *ft) {
        cpu_set_t allowed, one;
        unsigned k = 0;

        if (!ft->core->cfg.fault_pin || !ft->core->cfg.fault_shared || sched_getaffinity(0, sizeof(allowed), &allowed) < 0)
                return;
        if ((unsigned)CPU_COUNT(&allowed) != ft->core->cfg.fault_threads)
                return; /* not one thread per CPU: let the scheduler place them */
        for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
                if (!CPU_ISSET(cpu, &allowed) || k++ != ft->idx)
                        continue;
                CPU_ZERO(&one);
                CPU_SET(cpu, &one);
                if (sched_setaffinity(0, sizeof(one), &one) < 0)
                        log_warn("fault thread %u: cannot pin to CPU %d: %m", ft->idx, cpu);
                else
                        log_debug("fault thread %u serves CPU %d", ft->idx, cpu);
                return;
        }
}

static char reads_tag; /* epoll: the slot read queue's fd (the inbox's is NULL) */
static char pump_tag;  /* epoll: the tier pump's eventfd */

/* The second tier's reads of from's pump that are back, run by ft: how
 * many. */
static size_t pump_done(FaultThread *ft, FaultThread *from) {
        size_t n = 0;
        for (TierJob *j = tier_pump_done(from->pump); j; n++) {
                TierJob *next = j->next;
                tier_read_done(ft, j);
                j = next;
        }
        return n;
}

static void run_pump(FaultThread *ft) {
        uint64_t n;
        (void)!read(ft->pump_fd, &n, sizeof(n)); /* before the take: a later push writes again */
        (void)pump_done(ft, ft);
}

/* The slot reads of from's queue that are back (if ready), run by ft, and
 * those past their bound (memread.h): the client is evicted no more and
 * its user is refused while the read waits; the fault stays LOADING until
 * the read is back, as it waits for nothing of ours. How many came back. */
static size_t reads_done(FaultThread *ft, FaultThread *from, bool ready) {
        size_t n = 0;
        for (MemReadOp *op = ready ? memread_queue_complete(from->reads) : NULL; op; n++) {
                MemReadOp *next = op->next;
                run_read_done(ft, op);
                op = next;
        }
        for (MemReadOp *op; (op = memread_queue_overdue(from->reads, now_ns()));) {
                if (op->tag == READ_REVOKE)
                        mmclient_read_overdue(container_of(op, RevokeRead, op)->mm, op->off);
                else
                        mmclient_read_overdue(container_of(op, Retry, op)->mm, container_of(op, Retry, op)->addr);
        }
        return n;
}

/*
 * The reads thread x submitted that are back, run here: x is held in a
 * call into a client (work_steal()), and the pages of every other client
 * it read for would wait for it. What each completion does is the
 * retry's (its state, its client's has_retries) and this thread's
 * (retry_due): whoever serves the client next installs the page. The
 * queue's lock and the pump's list let two threads take; x finds them
 * gone when its call ends, and its eventfds wake it once for nothing.
 */
size_t fault_thread_reap(FaultThread *ft, FaultThread *x) {
        size_t n = 0;
        if (x->pump)
                n += pump_done(ft, x);
        if (x->reads)
                n += reads_done(ft, x, true);
        return n;
}

/* epoll_pwait2() where it exists (timeouts finer than a millisecond for
 * a read put off: READ_RECHECK_NS); epoll_wait() where it does not (a
 * kernel before 5.11, valgrind before 3.21), whose put-off reads then look
 * again every millisecond. */
static atomic_bool no_pwait2; /* set by any fault thread, once; relaxed: a hint, a thread that misses it gets ENOSYS once more */

static int wait_events(FaultThread *ft, struct epoll_event *evs, int n, int timeout_ms) {
        bool soon = ft->read_soon && timeout_ms != 0;
        if (!atomic_load_explicit(&no_pwait2, memory_order_relaxed)) {
                struct timespec ts = { timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000 };
                if (soon)
                        ts = (struct timespec){ 0, READ_RECHECK_NS };
                int r = epoll_pwait2(ft->epfd, evs, n, timeout_ms < 0 && !soon ? NULL : &ts, NULL);
                if (r >= 0 || errno != ENOSYS)
                        return r;
                atomic_store_explicit(&no_pwait2, true, memory_order_relaxed);
        }
        return epoll_wait(ft->epfd, evs, n, soon ? 1 : timeout_ms);
}

/*
 * After it served a fault, a thread polls for a while before it sleeps: a
 * program reading through evicted memory faults again within
 * microseconds, and a thread asleep on another vCPU costs a wake-up across
 * vCPUs to reach (bench-wake). Bounded by fault_spin_us per fault; 0
 * turns it off.
 *
 * The poll pays only where the next fault arrives while the thread still
 * polls. Where the faulting thread shares this CPU and the scheduler does
 * not let it preempt the poller (on a hypervisor whose context switches
 * are dear, where it would matter most), the poll keeps the faulting
 * thread off its CPU for the whole spin, and every fault costs the spin on
 * top (bench-core, docs/benchmarks.md). So a spin that caught nothing
 * makes the thread skip the spins of its next faults, 1, 2, 4, ... up to
 * SPIN_SKIP_MAX of them, and one that caught a fault brings it back to
 * spinning after every fault. A wake-up that served nothing (in the shared
 * service, the threads of the other CPUs) never spins.
 */
#define SPIN_SKIP_MAX 64u

static void spin_wasted(FaultThread *ft) {
        ft->spin_backoff = ft->spin_backoff ? MIN(ft->spin_backoff * 2, SPIN_SKIP_MAX) : 1;
        ft->spin_skip = ft->spin_backoff;
}

/* when the spin after the fault just served ends, 0: no spin */
static uint64_t spin_next(FaultThread *ft, uint64_t spin_ns) {
        if (ft->spin_skip) {
                ft->spin_skip--;
                return 0;
        }
        return now_ns() + spin_ns;
}

static void *fault_thread_main(void *arg) {
        FaultThread *ft = arg;
        struct epoll_event evs[16];
        uint64_t spin_until = 0, spin_ns = ft->core->cfg.fault_spin_us * 1000ull;

        fault_self = ft;
        core_fault_idx = (int)ft->idx;
        pin_to_cpu(ft);
        memread_thread_init();
        if (ft->core->cfg.fault_rt_prio > 0) {
                /* a fault is served before any time-shared thread runs on
                 * this CPU (a CPU hog, a low-priority client), as the
                 * kernel serves a fault in the faulting task's own context */
                struct sched_param sp = { .sched_priority = (int)ft->core->cfg.fault_rt_prio };
                if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0)
                        log_warn("fault thread %u: cannot switch to SCHED_FIFO %u: %m", ft->idx,
                                 ft->core->cfg.fault_rt_prio);
        }

        while (!atomic_load_explicit(&ft->stop, memory_order_relaxed)) {
                bool spinning = spin_until && now_ns() < spin_until;
                if (spin_until && !spinning) {
                        spin_wasted(ft);
                        spin_until = 0;
                }
                bool waits = work_waits(ft);
                if (!waits)
                        ft->refill_more = false; /* its refill was taken by another thread (work_steal()) */
                int timeout = spinning || ft->refill_more ? 0 : (ft->retry_due || waits) ? 1 : -1;
                int reads_due = ft->reads ? memread_queue_timeout_ms(ft->reads, now_ns()) : -1;
                if (reads_due >= 0 && (timeout < 0 || reads_due < timeout))
                        timeout = reads_due;
                int n = wait_events(ft, evs, ELEMENTSOF(evs), timeout);
                STAGE(ST_WAKE);
                bool inbox = false, reads = false, pump = false;
                /* relaxed: this thread is the counter's only writer */
                uint64_t served = atomic_load_explicit(&ft->lat.count, memory_order_relaxed);

                if (n == 0 && spinning)
                        continue;

                for (int i = 0; i < n; i++) {
                        if (evs[i].data.ptr == NULL) {
                                inbox = true;
                                continue;
                        }
                        if (evs[i].data.ptr == &reads_tag) {
                                reads = true;
                                continue;
                        }
                        if (evs[i].data.ptr == &pump_tag) {
                                pump = true;
                                continue;
                        }
                        service(ft, evs[i].data.ptr);
                        STAGE(ST_SERVICE_END);
                }
                if (ft->reads)
                        (void)reads_done(ft, ft, reads);
                if (pump)
                        run_pump(ft);
                /* an mm may be disowned by the inbox: only after this batch
                 * of events, whose pointers refer to it, is done */
                if (inbox)
                        run_inbox(ft);
                if (ft->retry_due || ft->read_soon)
                        run_due_retries(ft);
                /* only this thread adds to its lists, in run_inbox(): what
                 * waited before the wait, or what the inbox brought */
                if (waits || inbox) {
                        run_restores(ft);
                        run_deferred(ft);
                }
                if (spin_ns && atomic_load_explicit(&ft->lat.count, memory_order_relaxed) != served) {
                        if (spinning)
                                ft->spin_backoff = 0; /* the spin caught this fault */
                        spin_until = spin_next(ft, spin_ns);
                }
                STAGE_LOOP_END();
        }
        STAGE_REPORT(ft->idx);
        return NULL;
}

int fault_thread_new(Core *core, unsigned idx, FaultThread **ret) {
        FaultThread *ft = calloc(1, sizeof(*ft));
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
        int r;

        if (!ft)
                return -ENOMEM;
        ft->core = core;
        ft->idx = idx;
        pthread_mutex_init(&ft->work_lock, NULL);
        atomic_store_explicit(&ft->call_uffd, -1, memory_order_relaxed);
        ft->seen_uffd = -1;
        ft->pump_fd = -1;
        ft->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (ft->epfd < 0 || inbox_init(&ft->inbox) < 0) {
                r = negative_errno();
                goto fail;
        }
        r = codec_dctx_new(core->cfg.codec, &ft->dctx);
        if (r < 0)
                goto fail;
        if (core->tier && (r = tier_reader_new(core->tier, false, &ft->tier)) < 0)
                goto fail;
        if (core->tier) {
                struct epoll_event pev = { .events = EPOLLIN, .data.ptr = &pump_tag };
                ft->pump_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
                if (ft->pump_fd < 0 || epoll_ctl(ft->epfd, EPOLL_CTL_ADD, ft->pump_fd, &pev) < 0) {
                        r = negative_errno();
                        goto fail;
                }
                if ((r = tier_pump_new(core->tier, core->cfg.codec, ft->pump_fd, &ft->pump)) < 0)
                        goto fail;
        }
        for (int i = 0; i < RETRY_RESERVE; i++) {
                Retry *rr = calloc(1, sizeof(*rr));
                if (!rr) {
                        r = -ENOMEM;
                        goto fail;
                }
                rr->reserved = true;
                rr->next = ft->reserve;
                ft->reserve = rr;
        }
        if (epoll_ctl(ft->epfd, EPOLL_CTL_ADD, ft->inbox.efd, &ev) < 0) {
                r = negative_errno();
                goto fail;
        }
        /* without io_uring, slot reads are made in this thread (memread.h) */
        r = memread_queue_new(SLOT_READS_DEPTH, &ft->reads);
        if (r < 0 && r != -ENOSYS)
                goto fail;
        if (ft->reads) {
                struct epoll_event rev = { .events = EPOLLIN, .data.ptr = &reads_tag };
                if (epoll_ctl(ft->epfd, EPOLL_CTL_ADD, memread_queue_fd(ft->reads), &rev) < 0) {
                        r = negative_errno();
                        goto fail;
                }
        }
        r = -pthread_create(&ft->thread, NULL, fault_thread_main, ft);
        if (r < 0)
                goto fail;
        ft->started = true;
        *ret = ft;
        return 0;
fail:
        fault_thread_free(ft);
        return r;
}

void fault_thread_latency(const FaultThread *ft, LatencySnapshot *s) {
        latency_add(s, &ft->lat);
}

void fault_thread_stop(FaultThread *ft) {
        if (!ft || !ft->started)
                return;
        Work *w = work_new(0, NULL);
        /* relaxed: the inbox push that follows publishes it */
        atomic_store_explicit(&ft->stop, true, memory_order_relaxed);
        if (w)
                fault_thread_post(ft, w);
        else
                /* no memory for the item: wake the thread anyway, or it
                 * sleeps on and the daemon never exits */
                (void)!write(ft->inbox.efd, &(uint64_t){ 1 }, sizeof(uint64_t));
        pthread_join(ft->thread, NULL);
        ft->started = false;
}

FaultThread *fault_thread_free(FaultThread *ft) {
        if (!ft)
                return NULL;
        fault_thread_stop(ft);
        /* the second tier's reads: the one under way ends within the
         * tier's timeout, the rest come back cancelled */
        if (ft->pump) {
                tier_pump_stop(ft->pump);
                run_pump(ft);
                ft->pump = tier_pump_free(ft->pump);
        }
        /* no thread runs now: nobody takes these meanwhile */
        Work *unrun = inbox_take(&ft->inbox);
        work_list_discard(&unrun);
        work_list_discard(&ft->pending);
        work_list_discard(&ft->mine);
        work_list_discard(&ft->restores);
        work_list_discard(&ft->deferred);
        /* the slot reads still in flight come back (or are left to the
         * kernel, with what they hold, if a client's file system keeps
         * them): their retries become READY or are freed, as any read's */
        MemReadOp *left;
        memread_queue_free(ft->reads, &left);
        ft->reads = NULL;
        while (left) {
                MemReadOp *next = left->next;
                run_read_done(ft, left);
                left = next;
        }
        free(ft->revoke_buf); /* no read is left to write it */
        while (ft->reserve) {
                Retry *r = ft->reserve;
                ft->reserve = r->next;
                free(r);
        }
        while (ft->nowned)
                fault_thread_disown(ft, ft->owned[0]);
        free(ft->owned);
        codec_dctx_free(ft->dctx);
        tier_reader_free(ft->tier);
        safe_close(ft->pump_fd);
        safe_close(ft->epfd);
        safe_close(ft->inbox.efd);
        pthread_mutex_destroy(&ft->work_lock);
        free(ft);
        return NULL;
}

uint64_t fault_thread_held(FaultThread *ft, uint64_t now, int *uffd) {
        int u = atomic_load_explicit(&ft->call_uffd, memory_order_relaxed);
        uint64_t calls = atomic_load_explicit(&ft->calls, memory_order_relaxed);

        *uffd = u;
        if (u < 0 || u != ft->seen_uffd || calls != ft->seen_calls) {
                ft->seen_uffd = u;
                ft->seen_calls = calls;
                ft->seen_since = now;
                ft->seen_done = 0;
                return 0;
        }
        return now - ft->seen_since; /* the same call as at the last look */
}

bool fault_thread_first(FaultThread *ft, unsigned what) {
        bool first = !(ft->seen_done & what);
        ft->seen_done |= what;
        return first;
}
