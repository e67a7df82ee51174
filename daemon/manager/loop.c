/*
 * loop.c: the daemon's control thread, its set-up and its event loop.
 *
 * One thread owns the listening socket, every client connection, the
 * eviction state machines (evict.c) and the list of client address spaces.
 * It never serves a page fault and never compresses; it only decides and
 * hands work to the compression workers and to the fault threads, and
 * hears back through its inbox. Everything it owns is touched by no other
 * thread, except where a field says otherwise (manager.h, mmclient.h).
 *
 * Here: manager_new() and manager_free(), the fds the loop waits on, the
 * Core's calls up (core_ops), manager_run() with its signals, the inbox
 * and the 20 ms tick. What the loop hands a connection, a request, a
 * client, a reload or systemd is in the files manager-internal.h lists.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "closer.h"
#include "evict.h"
#include "fault.h"
#include "log.h"
#include "manager-internal.h"
#include "memread.h"
#include "mmjob.h"
#include "mpsc.h"
#include "reclaim.h"
#include "sandbox.h"
#include "sd-daemon.h"
#include "tier-writer.h"
#include "uffd-compat.h"
#include "users.h"
#include "util.h"

#define EP_LISTEN 1
#define EP_INBOX 2
#define EP_TIMER 3
#define EP_SIGNAL 4
#define TICK_MS 20

/* ---- setup ---- */

static int listen_socket(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        _cleanup_close_ int fd = -1;
        char dir[sizeof(sa.sun_path)];

        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        strcpy(dir, path);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
                *slash = 0;
                mkdir(dir, 0755);
        }
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return negative_errno();
        /* a stale socket from a dead daemon is replaced; a live one is not */
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
                return -EADDRINUSE;
        unlink(path);
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return negative_errno();
        chmod(path, 0666); /* admission is decided per connection (SO_PEERCRED) */
        if (listen(fd, 128) < 0)
                return negative_errno();
        return TAKE_FD(fd);
}

static int epoll_add(int epfd, int fd, uint64_t tag) {
        struct epoll_event ev = { .events = EPOLLIN, .data.u64 = tag };
        return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? negative_errno() : 0;
}

static int setup_fds(Manager *m) {
        struct itimerspec its = { .it_interval = { 0, TICK_MS * 1000000L }, .it_value = { 0, TICK_MS * 1000000L } };
        sigset_t mask;
        int r;

        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGUSR1);
        sigaddset(&mask, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &mask, NULL);
        m->signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        m->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        m->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (m->signal_fd < 0 || m->timer_fd < 0 || m->epfd < 0 || inbox_init(&m->core.inbox) < 0)
                return negative_errno();
        timerfd_settime(m->timer_fd, 0, &its, NULL);
        if ((r = epoll_add(m->epfd, m->listen_fd, EP_LISTEN)) < 0 ||
            (r = epoll_add(m->epfd, m->core.inbox.efd, EP_INBOX)) < 0 ||
            (r = epoll_add(m->epfd, m->timer_fd, EP_TIMER)) < 0 ||
            (r = epoll_add(m->epfd, m->signal_fd, EP_SIGNAL)) < 0)
                return r;
        return 0;
}

/*
 * What this kernel's userfaultfd offers beyond what we need: WP_ASYNC
 * (write tracking for reclaim) and PAGEMAP_SCAN. Asked of a scratch uffd,
 * never assumed from the version.
 */
static void probe_features(Manager *m) {
        struct uffdio_api api = { .api = UFFD_API, .features = 0 };
        int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
        int fd = dev >= 0 ? ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC) : -1;

        if (fd >= 0 && ioctl(fd, UFFDIO_API, &api) == 0) {
                m->core.wp_async = (api.features & UFFD_FEATURE_WP_ASYNC) != 0;
                m->core.uffd_poison = (api.features & UFFD_FEATURE_POISON) != 0;
        }
        safe_close(fd);
        safe_close(dev);

        int pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
        struct pm_scan_arg arg = { .size = sizeof(arg), .start = 0x10000, .end = 0x10000 };
        m->core.pagemap_scan = pm >= 0 && ioctl(pm, PAGEMAP_SCAN, &arg) >= 0;
        /* the zero page's frame: a read of fresh memory maps it */
        volatile uint8_t *z = mmap(NULL, ZSWAP_PAGE_SIZE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        uint64_t word = 0;
        if (z != MAP_FAILED) {
                (void)z[0];
                if (pm >= 0 && pread(pm, &word, sizeof(word), (off_t)((uintptr_t)z >> ZSWAP_PAGE_SHIFT) * 8) == 8 &&
                    (word & PM_PRESENT))
                        m->core.zero_pfn = PM_PFN(word);
                munmap((void *)z, ZSWAP_PAGE_SIZE);
        }
        safe_close(pm);
        if (!m->core.pagemap_scan)
                m->core.wp_async = false; /* writes could not be read back */
        log_info("write tracking (UFFD_FEATURE_WP_ASYNC + PAGEMAP_SCAN): %s",
                 m->core.wp_async ? "yes" : "no: idle age sees faults only, no page keeps its compressed copy");
}

/* ---- the calls up from the layers below (core.h) ---- */

static int core_send(Conn *c, const void *msg, size_t len) {
        return zmsg_send(c->fd, msg, len, NULL, 0);
}

static void core_pool_reclaim_all(Core *core) {
        manager_pool_reclaim(manager_of(core));
}

static void core_mm_release(MMClient *mm) {
        fault_mm_free_retries(mm);
        for (unsigned i = 0; i < mm->nlanes; i++)
                evict_lane_drop_keeps(mm, &mm->lanes[i]);
}

static const CoreOps core_ops = {
        .reply = conn_reply,
        .kill = conn_kill,
        .send = core_send,
        .pool_reclaim = core_pool_reclaim_all,
        .mm_release = core_mm_release,
};

/* ---- the loop ---- */

/*
 * A fault thread asks whether a client's uffd has an event under way
 * (events.c remap_src_expire()): the ioctl that tells waits for the
 * client's mmap lock, so it is a job. The answer "none" covers the
 * ranges the thread had when it asked (w->a).
 */
static void events_ask(Manager *m, Work *w) {
        if (m->exiting) {
                atomic_store_explicit(&w->mm->remap_probing, false, memory_order_relaxed);
                work_free(w);
                return;
        }
        w->type = MW_JOB_EVENTS;
        mmjob_submit(&m->core, w);
}

static void events_answered(Work *w) {
        MMClient *mm = w->mm;

        /* the manager alone writes remap_probed, and only raises it */
        if (w->status == 0 && w->a > atomic_load_explicit(&mm->remap_probed, memory_order_relaxed))
                atomic_store_explicit(&mm->remap_probed, w->a, memory_order_relaxed);
        atomic_store_explicit(&mm->remap_probing, false, memory_order_relaxed);
        work_free(w);
}

/* A call that waited for a client's mmap lock is back (mmjob.h): the
 * client's next one starts, what it was for goes on, and once none of
 * its user's runs, that user's clients are planned for eviction again. */
static void job_done(Manager *m, Work *w) {
        MMClient *mm = mmclient_ref(w->mm);
        uid_t uid = mm->uid;
        bool writes = mmjob_writes(w->type);

        mmjob_done(&m->core, w);
        if (w->type == MW_JOB_REGISTER)
                register_done(m, w);
        else if (w->type == MW_JOB_PROVE)
                prove_done(m, w);
        else if (w->type == MW_JOB_ADOPT)
                adopt_walked(m, w);
        else if (w->type == MW_JOB_UNREGISTER_ALL)
                unregister_all_done(m, w);
        else if (w->type == MW_JOB_ALIVE)
                orphan_probe_done(m, w);
        else if (w->type == MW_JOB_EVENTS)
                events_answered(w);
        else if (w->type == MW_JOB_SCAN) {
                reclaim_scan_done(&m->reclaim, w);
                if (w->v)
                        report_stats_counted(m, w->v, w->id);
                work_free(w);
        }
        else
                evict_job_done(&m->core, w);
        mmclient_unref(mm);
        /* the user's clients left alone meanwhile are planned again */
        if (writes && mmjob_writing(uid) == 0)
                for (MMClient *o = m->mms; o; o = o->next)
                        o->repump |= o->uid == uid && !mmjob_busy(o);
}

static void run_inbox(Manager *m) {
        inbox_clear(&m->core.inbox);
        for (Work *w = inbox_take(&m->core.inbox); w;) {
                Work *n = w->next;
                if (w->type == MW_BATCH_DONE)
                        evict_batch_done(&m->core, w);
                else if (w->type == MW_RESTORE_DONE)
                        restore_done(m, w);
                else if (w->type == MW_SYNC_DONE)
                        sync_done(m, w);
                else if (w->type == MW_REFILL_DONE)
                        reclaim_refill_done(&m->reclaim, w);
                else if (w->type == MW_RECOMP_DONE)
                        recompress_done(&m->recomp, w);
                else if (w->type == MW_EVENTS_ASK)
                        events_ask(m, w);
                else if (mmjob_is(w->type))
                        job_done(m, w);
                else
                        work_free(w);
                w = n;
        }
}

/* The attached client or fork child not attached yet whose uffd is
 * uffd, or NULL. */
static MMClient *client_of_uffd(Manager *m, int uffd) {
        MMClient *lists[] = { m->mms, manager_orphans(m) };

        for (size_t i = 0; i < ELEMENTSOF(lists); i++)
                for (MMClient *mm = lists[i]; mm; mm = mm->next)
                        if (mm->uffd == uffd)
                                return mm;
        return NULL;
}

/* Clients whose uffd a fault thread left unread while another client of
 * their user held a thread (MMClient.parked): read now that none does. */
static void fault_unpark(Manager *m) {
        MMClient *lists[] = { m->mms, manager_orphans(m) };

        for (size_t i = 0; i < ELEMENTSOF(lists); i++)
                for (MMClient *mm = lists[i]; mm; mm = mm->next)
                        if (atomic_load_explicit(&mm->parked, memory_order_relaxed) &&
                            !core_user_held(&m->core, mm->uid) && mm->ft) {
                                atomic_store_explicit(&mm->parked, false, memory_order_relaxed);
                                if (fault_post_mm(mm->ft, FW_KICK, mm) < 0)
                                        atomic_store_explicit(&mm->parked, true, memory_order_relaxed);
                        }
}

/*
 * Every fault thread is held in a call into a client: a spare starts and
 * watches every client (with held users' clients parked: no call into
 * them), up to CORE_FAULT_SPARES in the daemon's life. Its index: -1 if
 * none could start.
 */
static int fault_spare(Manager *m) {
        unsigned n = m->core.nfts;
        FaultThread *ft;

        if (n >= m->cfg.fault_threads + CORE_FAULT_SPARES) {
                if (!m->spares_said)
                        log_error("every fault thread waits in a call into a client, and the %d spares started "
                                  "already: faults wait until a call ends", CORE_FAULT_SPARES);
                m->spares_said = true;
                return -1;
        }
        int r = fault_thread_new(&m->core, n, &ft);
        if (r < 0) {
                log_error("every fault thread waits in a call into a client: cannot start a spare: %s", strerror(-r));
                return -1;
        }
        m->core.fts[n] = ft;
        atomic_store_explicit(&m->core.nfts, n + 1, memory_order_release);
        MMClient *lists[] = { m->mms, manager_orphans(m) };
        for (size_t i = 0; i < ELEMENTSOF(lists); i++)
                for (MMClient *mm = lists[i]; mm; mm = mm->next)
                        if (mm->ft && fault_post_mm(ft, FW_ADOPT, mm) < 0)
                                log_warn("pid %d: the spare fault thread cannot watch the client (out of memory)",
                                         (int)mmclient_pid(mm));
        log_warn("every fault thread waits in a call into a client: spare fault thread %u starts", n);
        return (int)n;
}

/*
 * A fault thread's call into a client (a copy) can wait for the client's
 * mmap lock, which the client can hold as long as it likes (FUSE:
 * docs/security.md). Once a call has lasted STEAL_AFTER_MS:
 *  - the work handed to the held thread (the installs, restores, refills
 *    and syncs of the clients it is home to) is taken by a thread that is
 *    not held, every tick while the call lasts (FW_STEAL); the other
 *    threads watch every client and serve their faults;
 *  - no other thread calls into a client of the same user meanwhile
 *    (Core.held_uid, core_user_held()): its work waits, so that one user
 *    cannot hold the threads one after the other;
 *  - if no thread is free (one thread; or calls that began together), a
 *    spare starts (fault_spare()).
 * Said once per call, after HELD_SAY_MS.
 */
#define STEAL_AFTER_MS 100
#define HELD_SAY_MS 1000

static void fault_threads_held(Manager *m) {
        const uint64_t steal = STEAL_AFTER_MS * 1000000ull, say = HELD_SAY_MS * 1000000ull;
        const unsigned n = m->core.nfts, none = CORE_FAULT_THREADS_MAX;
        uint64_t now = now_ns();
        unsigned free_ft = none, nheld = 0;
        bool was = atomic_load_explicit(&m->core.held_threads, memory_order_relaxed) != 0;
        int uffd;

        /* who holds each thread, published before anything else happens
         * (a spare must find the held users' clients parked) */
        for (unsigned i = 0; i < n; i++) {
                uint64_t held = fault_thread_held(m->core.fts[i], now, &uffd);
                MMClient *mm = held >= steal ? client_of_uffd(m, uffd) : NULL;
                /* relaxed: hints (core.h) */
                atomic_store_explicit(&m->core.held_uid[i], mm ? (uint64_t)mm->uid + 1 : 0, memory_order_relaxed);
                nheld += held >= steal;
                if (held < steal && free_ft == none)
                        free_ft = i;
        }
        atomic_store_explicit(&m->core.held_threads, nheld, memory_order_relaxed);
        if (nheld && free_ft == none) {
                int s = fault_spare(m);
                free_ft = s >= 0 ? (unsigned)s : none;
        }
        /* the held ones again (the same answer: the same call, or 0 if it
         * ended in between) */
        for (unsigned i = 0; i < n; i++) {
                uint64_t held = fault_thread_held(m->core.fts[i], now, &uffd);
                if (held < steal)
                        continue;
                if (fault_thread_first(m->core.fts[i], FT_HELD_COUNTED))
                        atomic_fetch_add_explicit(&m->core.calls_held, 1, memory_order_relaxed);
                if (free_ft != none)
                        (void)fault_thread_steal(m->core.fts[free_ft], m->core.fts[i]);
                if (held < say || !fault_thread_first(m->core.fts[i], FT_HELD_SAID))
                        continue;
                MMClient *mm = client_of_uffd(m, uffd);
                log_warn("fault thread %u has waited more than a second in a call into pid %d (uid %d) (its mmap "
                         "lock held: a FUSE server of its own that does not answer?): %s",
                         i, mm ? (int)mmclient_pid(mm) : -1, mm ? (int)mm->uid : -1,
                         free_ft != none ? "another thread takes what was handed to it"
                                         : "no other thread is free: what was handed to it waits");
        }
        /* the exchange first: a client parked after it is seen next tick */
        if (atomic_exchange_explicit(&m->core.parked_any, false, memory_order_acquire) || was || nheld)
                fault_unpark(m);
}

static void tick(Manager *m) {
        uint64_t expirations;
        static unsigned n;

        (void)!read(m->timer_fd, &expirations, sizeof(expirations));
        for (MMClient *mm = m->mms, *next; mm; mm = next) {
                next = mm->next;
                if (mm->conn && !mmclient_alive(mm)) {
                        /* the process died but its socket lingers (passed
                         * on), or it exec'd and we have not read the end
                         * of the socket its exec closes yet (a fork child
                         * of a shell, attached as it execs): its address
                         * space is gone either way */
                        conn_kill(mm->conn, "its process exited or exec'd");
                        continue;
                }
                if (!mm->conn && mmclient_pid(mm) > 0 && mm->restores == 0 && !mmclient_alive(mm)) {
                        mm_retire(m, mm); /* a fork child without connection that exited */
                        continue;
                }
                evict_tick(&m->core, mm);
        }
        groups_tick(m);
        reclaim_tick(&m->reclaim);
        memread_reap();
        mmjob_tick();
        if (m->core.tier)
                tier_tick(m->core.tier, m->mms);
        const Tunables *t = &m->reclaim.tun;
        recompress_tick(&m->recomp, m->mms,
                        &(RecompConf){ .age_ms = t->recompress_age_ms, .level = (int)t->recompress_level,
                                       .cpu = t->recompress_cpu, .dict = t->recompress_dict });
        notify_tick(m);
        users_tick(m);
        dedups_tick(m);
        if (m->listen_paused && epoll_add(m->epfd, m->listen_fd, EP_LISTEN) == 0)
                m->listen_paused = false;
        report_tick(m);
        fault_threads_held(m);
        if (++n % (1000 / TICK_MS) == 0) {
                tick_orphans(m);
                manager_pool_trim(m);
                manager_pool_compact(m);
        }
}

int manager_new(const ManagerConfig *cfg, Manager **ret) {
        Manager *m = calloc(1, sizeof(*m));
        int r;

        if (!m)
                return -ENOMEM;
        m->cfg = *cfg;
        pthread_mutex_init(&m->core.orphan_lock, NULL);
        char err[512];
        if (cfg->conf)
                r = config_copy(&m->conf, cfg->conf);
        else if ((r = manager_build_config(cfg, &m->conf, err, sizeof(err))) < 0)
                log_error("%s", err);
        if (r < 0) {
                free(m);
                return r;
        }
        m->cfg.conf = NULL; /* the caller's; ours is m->conf */
        m->reclaim.tun = m->conf.tun;
        m->listen_fd = m->signal_fd = m->timer_fd = m->epfd = -1;
        /* before any thread of ours runs, and before the memory is locked
         * (the probe's region must fault) */
        FaultCalibration fc = { .shared = cfg->fault_shared, .pin = cfg->fault_pin, .threads = cfg->fault_threads,
                                .wake = cfg->fault_wake, .spin_us = cfg->fault_spin_us };
        fault_calibrate(&fc);
        if (fc.summary[0])
                log_info("fault service measured: %s; chosen: wake %s, spin %u us", fc.summary,
                         fault_wake_name(fc.wake), fc.spin_us);
        m->core.cfg = (CoreConfig){
                .codec = cfg->codec,
                .level = cfg->level,
                .batch_pages = cfg->batch_pages,
                .worker_nice = cfg->worker_nice,
                .worker_sched_idle = cfg->worker_sched_idle,
                .max_compressed = cfg->max_compressed,
                .max_regions = cfg->max_regions,
                .max_registered = cfg->max_registered,
                .fault_threads = cfg->fault_threads,
                .fault_spin_us = fc.spin_us,
                .fault_wake_one = fc.wake == FAULT_WAKE_ONE,
                .fault_pin = cfg->fault_pin,
                .fault_shared = cfg->fault_shared,
                .fault_rt_prio = cfg->fault_rt_prio,
        };
        m->core.ops = &core_ops;
        probe_features(m);
        reclaim_init(&m->reclaim, &m->core, &m->mms);
        recompress_init(&m->recomp, &m->core);
        m->core.inbox.efd = -1;
        r = pool_shared_new(cfg->pool_max, &m->core.pools);
        if (r < 0)
                goto fail;
        /* names this instance in the stores it owns (adopt.c tells "ours,
         * still" from "a dead daemon's"); never 0 */
        while (m->core.daemon_id == 0)
                if (getrandom(&m->core.daemon_id, sizeof(m->core.daemon_id), 0) != sizeof(m->core.daemon_id))
                        m->core.daemon_id = now_ns() ^ ((uint64_t)getpid() << 32);
        m->listen_fd = cfg->listen_fd >= 0 ? cfg->listen_fd : listen_socket(cfg->socket_path);
        if (m->listen_fd < 0) {
                r = m->listen_fd;
                log_error("cannot listen on %s: %s", cfg->socket_path, strerror(-r));
                goto fail;
        }
        r = setup_fds(m);
        if (r < 0)
                goto fail;
        if (m->conf.tier.backing[0]) {
                /* before the sandbox: it opens the backing file (an NBD
                 * server is connected to after it, in tier_start()) */
                r = tier_open(&m->conf.tier, &m->core.tier, err, sizeof(err));
                if (r < 0) {
                        log_error("second tier: %s", err);
                        goto fail;
                }
        }
        /* set up: from here on least privilege, inherited by every thread */
        if (cfg->lock_memory)
                (void)sandbox_lock_memory(); /* logged; the daemon works unlocked */
        if (cfg->sandbox && (r = sandbox_enter(&(SandboxConfig){
                                     .socket_path = cfg->listen_fd < 0 ? cfg->socket_path : NULL,
                                     .realtime = cfg->fault_rt_prio > 0 || cfg->worker_nice < 0,
                                     .tier_inet = strncmp(m->conf.tier.backing, "nbd://", 6) == 0 })) < 0)
                goto fail;
        memread_thread_init(); /* the manager reads fork tokens and adopted slots */
        if (m->core.tier && ((r = tier_start(m->core.tier, err, sizeof(err))) < 0 ||
                             (r = tier_writer_start(m->core.tier, &m->core, err, sizeof(err))) < 0)) {
                log_error("second tier: %s", err);
                goto fail;
        }
        r = closer_new(&m->core.closer);
        if (r < 0)
                goto fail;
        m->core.fts = calloc(cfg->fault_threads + CORE_FAULT_SPARES, sizeof(*m->core.fts));
        if (!m->core.fts) {
                r = -ENOMEM;
                goto fail;
        }
        for (unsigned i = 0; i < cfg->fault_threads; i++) {
                r = fault_thread_new(&m->core, i, &m->core.fts[i]);
                if (r < 0)
                        goto fail;
                m->core.nfts++;
        }
        r = evictor_new(&m->core, cfg->workers, &m->core.evictor);
        if (r < 0)
                goto fail;
        r = recompress_start(&m->recomp);
        if (r < 0)
                goto fail;
        *ret = m;
        return 0;
fail:
        manager_free(m);
        return r;
}

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;
        m->exiting = true; /* no job starts any more (events_ask()) */
        /* nothing is held at a bound of forked children any more: each
         * client's events are read to the end */
        users_orphans_release(m);
        while (m->conns)
                conn_free(m, m->conns);
        /* clients still alive get their pages back before we go (bounded) */
        for (uint64_t end = now_ns() + 10ull * 1000000000; now_ns() < end;) {
                bool busy = false;
                for (MMClient *mm = m->mms; mm; mm = mm->next)
                        busy |= mm->restores > 0;
                if (!busy)
                        break;
                usleep(1000);
                run_inbox(m);
        }
        /* a call still waiting for a client's mmap lock is left to the
         * exit */
        mmjob_stop();
        /* workers and the tier's writer first: their jobs hold client
         * references */
        m->core.evictor = evictor_free(m->core.evictor);
        recompress_fini(&m->recomp);
        if (m->core.tier)
                tier_stop(m->core.tier);
        run_inbox(m);
        while (m->mms)
                mm_retire(m, m->mms);
        while (manager_orphans(m)) {
                MMClient *mm = m->orphans;
                m->orphans = mm->next;
                mmclient_unref(mm);
        }
        for (unsigned i = 0; i < m->core.nfts; i++)
                fault_thread_stop(m->core.fts[i]);
        for (unsigned i = 0; i < m->core.nfts; i++)
                fault_thread_free(m->core.fts[i]);
        free(m->core.fts);
        /* fault threads posted their last completions */
        for (Work *w = inbox_take(&m->core.inbox); w;) {
                Work *n = w->next;
                work_free(w);
                w = n;
        }
        m->core.closer = closer_free(m->core.closer);
        memread_free();
        /* every client is gone: nothing refers to a block any more */
        m->core.tier = tier_free(m->core.tier);
        dedups_free(m);
        pool_shared_free(m->core.pools);
        if (m->listen_fd >= 0 && m->cfg.listen_fd < 0 && m->cfg.socket_path)
                sandbox_unlink(m->cfg.socket_path);
        safe_close(m->listen_fd);
        safe_close(m->signal_fd);
        safe_close(m->timer_fd);
        safe_close(m->epfd);
        safe_close(m->core.inbox.efd);
        users_free(m);
        config_free(&m->conf);
        free(m);
        return NULL;
}

int manager_run(Manager *m) {
        struct epoll_event evs[32];

        log_info("ready: socket %s, %s, %u workers, %u fault threads", m->cfg.socket_path,
                 codec_to_string(m->cfg.codec), m->cfg.workers, m->core.nfts);
        m->watchdog_ns = sdd_watchdog_usec() * 1000 / 2;
        m->watchdog_last_ns = now_ns();
        notify_status(m, "READY=1\n");
        while (!m->exiting) {
                bool repump = false;
                for (MMClient *mm = m->mms; mm; mm = mm->next)
                        repump |= mm->repump;
                int n = epoll_wait(m->epfd, evs, ELEMENTSOF(evs), repump ? 0 : -1);
                if (n < 0 && errno != EINTR)
                        return negative_errno();
                for (int i = 0; i < n; i++) {
                        uint64_t tag = evs[i].data.u64;
                        if (tag == EP_LISTEN)
                                conn_accept(m);
                        else if (tag == EP_INBOX)
                                run_inbox(m);
                        else if (tag == EP_TIMER)
                                tick(m);
                        else if (tag == EP_SIGNAL) {
                                struct signalfd_siginfo si;
                                (void)!read(m->signal_fd, &si, sizeof(si));
                                if (si.ssi_signo == SIGHUP) {
                                        /* systemd 252 has no Type=notify-reload, but hears this */
                                        sdd_notifyf("RELOADING=1\nMONOTONIC_USEC=%llu",
                                                    (unsigned long long)(now_ns() / 1000));
                                        reload_config(m);
                                        notify_status(m, "READY=1\n");
                                        continue;
                                }
                                m->exiting = true;
                                if (si.ssi_signo == SIGUSR1) {
                                        /* manager_free() leaves every store as it is */
                                        m->handover = true;
                                        log_info("signal %u: exiting, handing the clients over to the next daemon",
                                                 si.ssi_signo);
                                        sdd_notify("STOPPING=1\nSTATUS=stopping: clients wait for the next daemon");
                                } else {
                                        log_info("signal %u: exiting", si.ssi_signo);
                                        /* manager_free() gives every client its pages back next */
                                        sdd_notify("STOPPING=1\nSTATUS=stopping: restoring the clients' pages");
                                }
                                /* a counter, relaxed: it orders nothing (core.h) */
                                if (atomic_load_explicit(&m->core.move_misreports, memory_order_relaxed))
                                        log_info("%llu pages were moved otherwise than the clients' agents "
                                                 "reported (a UFFDIO_MOVE's count can be off, or an agent "
                                                 "can lie): each was decided from pagemap, none was lost",
                                                 (unsigned long long)atomic_load_explicit(&m->core.move_misreports,
                                                                                          memory_order_relaxed));
                        } else
                                conn_readable(m, evs[i].data.ptr);
                }
                reap_conns(m);
                for (MMClient *mm = m->mms; mm; mm = mm->next)
                        if (mm->repump)
                                evict_pump(&m->core, mm);
        }
        return 0;
}
