/*
 * manager.c: the daemon's control thread.
 *
 * One thread owns the listening socket, every client connection, the
 * eviction state machines (evict.c) and the list of client address spaces.
 * It never serves a page fault and never compresses; it only decides and
 * hands work to the compression workers and to the fault threads, and
 * hears back through its inbox. Everything it owns is touched by no other
 * thread, except where a field says otherwise (manager.h, mmclient.h).
 *
 * Every message from a client is validated (protocol.c) and answered;
 * malformed ones get -EPROTO and are counted. A client is the process that
 * connected, not its pid number: a pidfd taken at connect (SO_PEERPIDFD),
 * and from ATTACH on fds bound to its address space, with the proof that
 * its uffd acts on that address space (mm_bind_proven()). Its credentials
 * (SO_PEERCRED, SO_PEERGROUPS at connect) are checked on each request
 * (creds_changed()): a message sent by another process (a forked child
 * writing to an inherited socket) is refused; one from a process whose
 * credentials changed is refused and the connection ended. A client can
 * only name memory of its own address space: the uffd it hands over is the
 * only way the daemon changes its memory, its mem fd the only way it reads it.
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#include <sys/un.h>

#include <sys/random.h>

#include "adopt.h"
#include "closer.h"
#include "inject.h"
#include "evict.h"
#include "fault.h"
#include "log.h"
#include "manager.h"
#include "memread.h"
#include "mpsc.h"
#include "pidfd-compat.h"
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
#define PROTOCOL_ERRORS_MAX 64
#define RESTORE_DETACH 1 /* Work.status of the restore that ends a client */

static void conn_free(Manager *m, Conn *c);
static int do_register(Manager *m, MMClient *mm, const ZMsgRange *rg);

MMClient *manager_orphans(Manager *m) {
        MMClient *fresh = core_take_orphans(&m->core);
        if (fresh) {
                MMClient *tail = fresh;
                while (tail->next)
                        tail = tail->next;
                tail->next = m->orphans;
                m->orphans = fresh;
        }
        return m->orphans;
}

static void reply_send(Conn *c, const void *msg, size_t len, const int *fds, size_t nfds) {
        if (c->dying)
                return;
        int r = zmsg_send(c->fd, msg, len, fds, nfds);
        if (r < 0)
                conn_kill(c, r == -EAGAIN ? "client not reading its socket" : "cannot send");
}

void conn_reply(Conn *c, uint32_t id, int status, int64_t value) {
        ZMsgReply r = { .status = status, .value = value };
        zmsg_init(&r.hdr, ZMSG_REPLY, id, sizeof(r));
        reply_send(c, &r, sizeof(r), NULL, 0);
}

void conn_kill(Conn *c, const char *why) {
        if (c->dying)
                return;
        log_warn("client pid %d: dropping connection: %s", (int)c->pid, why);
        c->dying = true;
}

/* ---- client address spaces ---- */

static void mm_link(Manager *m, MMClient *mm) {
        mm->next = m->mms;
        m->mms = mm;
        users_link(m, mm);
}

static void mm_unlink(Manager *m, MMClient *mm) {
        for (MMClient **p = &m->mms; *p; p = &(*p)->next)
                if (*p == mm) {
                        *p = mm->next;
                        return;
                }
}

/* The ioctls take the client's mmap lock for writing, which the client
 * may hold a long time: never under regions_lock, which fault threads
 * take to handle the client's events (a copy is made under it). Without
 * memory for a copy, one region at a time, looked up again each time. */
static void mm_unregister_all(MMClient *mm) {
        pthread_mutex_lock(&mm->regions_lock);
        size_t n = mm->nregions;
        Region *copy = n ? malloc(n * sizeof(*copy)) : NULL;
        if (copy)
                memcpy(copy, mm->regions, n * sizeof(*copy));
        pthread_mutex_unlock(&mm->regions_lock);
        if (copy || n == 0) {
                for (size_t i = 0; i < n; i++)
                        mmclient_uffd_unregister(mm, copy[i].start, copy[i].end);
                free(copy);
                return;
        }
        for (size_t i = 0;; i++) {
                Region g;
                pthread_mutex_lock(&mm->regions_lock);
                bool any = i < mm->nregions;
                if (any)
                        g = mm->regions[i];
                pthread_mutex_unlock(&mm->regions_lock);
                if (!any)
                        return;
                mmclient_uffd_unregister(mm, g.start, g.end);
        }
}

/* Forget an address space: stop its fault thread reading it and drop the
 * manager's reference. Whoever else holds one finishes first. */
static void mm_retire(Manager *m, MMClient *mm) {
        atomic_store_explicit(&mm->dead, true, memory_order_relaxed);
        while (mm->ops) {
                PageoutOp *op = mm->ops;
                mm->ops = op->next;
                evict_op_drop(&m->core, op); /* a group waiting for it answers without it */
        }
        mm->ops_tail = &mm->ops;
        for (unsigned i = 0; i < mm->nlanes; i++)
                mm->lanes[i].op = NULL; /* freed above; batches still in flight finish without it */
        if (mm->ft)
                fault_unwatch(&m->core, mm);
        mm_unlink(m, mm);
        mmclient_unref(mm);
}

/* The connection of mm went away. A process that is still alive gets all
 * its pages back and its memory unregistered before we let go, so that it
 * keeps its data and never waits on a fault nobody serves. */
static void mm_detach(Manager *m, MMClient *mm, Conn *c) {
        evict_forget_conn(mm, c);
        mm->conn = NULL;
        evict_agent_gone(&m->core, mm);
        if (m->handover && mm->store) {
                /* the client keeps its uffd and store and waits for the
                 * next daemon, which adopts them */
                mm->keep_store = true;
                mm_retire(m, mm);
                return;
        }
        if (mmclient_alive(mm) && mm->ft) {
                Work *w = work_new(FW_RESTORE, mm);
                if (w) {
                        w->a = 0;
                        w->b = PINDEX_MAX_ADDR;
                        w->id = 0;
                        w->status = RESTORE_DETACH;
                        mm->restores++;
                        fault_thread_post(mm->ft, w);
                        return; /* retired when the restore is done */
                }
        }
        mm_retire(m, mm);
}

static void restore_done(Manager *m, Work *w) {
        MMClient *mm = w->mm;
        if (w->status == RESTORE_DETACH) {
                /* the end of mm_detach() */
                mm_unregister_all(mm);
                /* nothing left for another daemon to adopt: the client,
                 * reconnecting, attaches anew */
                if (mm->store)
                        atomic_store_explicit(&store_super(mm->store)->state, STORE_RELEASED, memory_order_release);
                mm->restores--;
                mm_retire(m, mm);
                work_free(w);
                return;
        }
        evict_restore_done(&m->core, w);
}

/* A range request, after the fault thread caught up with mm's events. */
static int range_request(Manager *m, Conn *c, MMClient *mm, int type, uint32_t id, uint64_t s, uint64_t e) {
        int r;

        if (type == ZMSG_STATS)
                return report_stats_reply(m, c, id, (uint32_t)s);
        if (type == ZMSG_FORK_DONE) {
                mmclient_fork_evented(mm, mm->fork_token_announced);
                /* a fork that failed, or one a daemon adopting us took as
                 * announced and whose event the dead one had read: no
                 * event of it will come (the fault thread is past any) */
                atomic_store_explicit(&mm->fork_announced, false, memory_order_relaxed);
                mm->fork_paused = false;
                evict_pump(&m->core, mm);
                return 1; /* no reply */
        }
        if (type == ZMSG_FORK_PREPARE) {
                /* nothing of ours is in flight, every event and hand-back
                 * so far is handled: the token of this fork counts now,
                 * and so do the pages held (sync_done() answers with them) */
                atomic_store_explicit(&mm->fork_held_pages, mmclient_held_pages(mm), memory_order_relaxed);
                atomic_store_explicit(&mm->next_fork_token, mm->fork_token_announced, memory_order_relaxed);
                atomic_store_explicit(&mm->fork_announced, mm->fork_token_announced != 0, memory_order_relaxed);
                if (mm->store)
                        /* before the answer, so before the fork (release:
                         * after everything the store holds now) */
                        atomic_store_explicit(&store_super(mm->store)->fork_announced, mm->fork_token_announced,
                                              memory_order_release);
                return 0;
        }
        if (type == ZMSG_REGISTER) {
                ZMsgRange rg = { .addr = s, .len = e - s };
                return do_register(m, mm, &rg);
        }
        /* an UNREGISTER takes the range off the list itself (evict.c) */
        r = evict_queue(&m->core, mm, c, id, s, e, type == ZMSG_UNREGISTER);
        return r < 0 ? r : 1;
}

/*
 * FW_SYNC without the round trip: if no fault thread holds serve_lock,
 * every uffd message read so far has been handled (a reader holds it from
 * its read until the message is handled), which is all FW_SYNC waits for.
 * A fault thread that found the lock taken meanwhile left a kick for us,
 * the holder; we cannot read the uffd, so its home thread is asked to.
 * False: a fault thread is busy with this client; take the slow way.
 */
static bool mm_sync_now(MMClient *mm) {
        if (!mm->ft || pthread_mutex_trylock(&mm->serve_lock) != 0)
                return false;
        pthread_mutex_unlock(&mm->serve_lock);
        /* seq_cst: the load after the unlock in fault.c service()'s
         * handshake, as its serve_unlock() makes it */
        if (atomic_load_explicit(&mm->kick, memory_order_seq_cst) && fault_post_mm(mm->ft, FW_KICK, mm) < 0)
                log_error("pid %d: cannot wake a fault thread (out of memory)", (int)mmclient_pid(mm));
        return true;
}

/*
 * A forked child's own sync page replaces its parent's. Every reader of
 * mm->sync holds serve_lock; the manager never waits for it (a fault
 * thread may hold it across a slow read of this client's page), so if it
 * is taken the child's home thread swaps the page in (FW_SYNC_SWAP), and
 * no move is planned for the child until it has (mm->sync_swap). Takes
 * fd.
 */
static int mm_replace_sync(MMClient *mm, int fd) {
        ZSync *p;
        int r = mmclient_map_sync(fd, &p);
        if (r < 0)
                return r;
        if (mmclient_serve_trylock(mm) == 0) {
                mmclient_swap_sync(mm, p, fd);
                pthread_mutex_unlock(&mm->serve_lock);
                /* seq_cst: as mm_sync_now() */
                if (atomic_load_explicit(&mm->kick, memory_order_seq_cst) && fault_post_mm(mm->ft, FW_KICK, mm) < 0)
                        log_error("pid %d: cannot wake a fault thread (out of memory)", (int)mmclient_pid(mm));
                return 0;
        }
        Work *w = work_new(FW_SYNC_SWAP, mm);
        if (!w) {
                munmap(p, ZSWAP_SYNC_SIZE);
                safe_close(fd);
                return -ENOMEM;
        }
        w->v = (uintptr_t)p;
        w->a = (uint64_t)fd;
        atomic_store_explicit(&mm->sync_swap, true, memory_order_relaxed);
        fault_thread_post(mm->ft, w);
        return 0;
}

static void sync_done(Manager *m, Work *w) {
        for (Conn *c = m->conns; c; c = c->next) {
                if (c->serial != w->v || c->dying || c->mm != w->mm)
                        continue;
                if (atomic_load_explicit(&w->mm->dead, memory_order_relaxed))
                        break;
                int r = range_request(m, c, w->mm, w->status, w->id, w->a, w->b);
                /* a FORK_PREPARE's answer: 1 + the pages held (0 is what a
                 * daemon that does not say gives: unknown) */
                int64_t v = r == 0 && w->status == ZMSG_FORK_PREPARE
                                    ? 1 + (int64_t)atomic_load_explicit(&w->mm->fork_held_pages, memory_order_relaxed)
                                    : 0;
                if (r <= 0)
                        conn_reply(c, w->id, r, v);
                break;
        }
        work_free(w);
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
                else
                        work_free(w);
                w = n;
        }
}

static void tick_orphans(Manager *m) {
        manager_orphans(m);
        for (MMClient **p = &m->orphans; *p;) {
                MMClient *mm = *p;
                if (uffd_mm_alive(mm->uffd)) {
                        p = &mm->next;
                        continue;
                }
                *p = mm->next;
                /* the child exited without ever attaching */
                mm_link(m, mm);
                mm_retire(m, mm);
                p = &m->orphans;
        }
}

static int epoll_add(int epfd, int fd, uint64_t tag);

/* The one-line summary systemctl status shows: clients, what they hold out, the pool. */
static void notify_status(Manager *m, const char *state) {
        uint64_t pages = 0;
        unsigned clients = 0;
        PoolStats ps;
        char status[sizeof(m->status)];

        for (MMClient *mm = m->mms; mm; mm = mm->next, clients++)
                pages += atomic_load_explicit(&mm->st.stored_pages, memory_order_relaxed) +
                         atomic_load_explicit(&mm->st.same_pages, memory_order_relaxed);
        pool_shared_stats(m->core.pools, &ps);
        snprintf(status, sizeof(status), "%u client%s, %.1f MiB held out in a %.1f MiB pool", clients,
                 clients == 1 ? "" : "s", (double)(pages * ZSWAP_PAGE_SIZE) / (1 << 20),
                 (double)ps.pool_bytes / (1 << 20));
        m->status_last_ns = now_ns();
        if (!state && strcmp(status, m->status) == 0)
                return;
        strcpy(m->status, status);
        sdd_notifyf("%sSTATUS=%s", state ? state : "", status);
}

/* systemd's watchdog hears from the manager thread's own loop: a stuck loop is a dead daemon. */
static void notify_tick(Manager *m) {
        uint64_t now = now_ns();

        if (m->watchdog_ns && now - m->watchdog_last_ns >= m->watchdog_ns) {
                sdd_notify("WATCHDOG=1");
                m->watchdog_last_ns = now;
        }
        if (now - m->status_last_ns >= 5ull * 1000000000)
                notify_status(m, NULL);
}

static void tick(Manager *m) {
        uint64_t expirations;
        static unsigned n;

        (void)!read(m->timer_fd, &expirations, sizeof(expirations));
        for (MMClient *mm = m->mms, *next; mm; mm = next) {
                next = mm->next;
                if (mm->conn && !mmclient_alive(mm)) {
                        /* the process died but its socket lingers (passed on) */
                        conn_kill(mm->conn, "process exited");
                        continue;
                }
                if (!mm->conn && mmclient_pid(mm) > 0 && mm->restores == 0 && !mmclient_alive(mm)) {
                        mm_retire(m, mm); /* a fork child without connection that exited */
                        continue;
                }
                evict_tick(&m->core, mm);
        }
        reclaim_tick(&m->reclaim);
        memread_reap();
        if (m->core.tier)
                tier_tick(m->core.tier, m->mms);
        notify_tick(m);
        users_tick(m);
        if (m->listen_paused && epoll_add(m->epfd, m->listen_fd, EP_LISTEN) == 0)
                m->listen_paused = false;
        report_tick(m);
        if (++n % (1000 / TICK_MS) == 0) {
                tick_orphans(m);
                manager_pool_reclaim(m);
        }
}

/* ---- requests ---- */

void manager_pool_reclaim(Manager *m) {
        for (MMClient *mm = m->mms; mm; mm = mm->next)
                if (mm->pool)
                        pool_reclaim(mm->pool);
        for (MMClient *mm = manager_orphans(m); mm; mm = mm->next)
                if (mm->pool)
                        pool_reclaim(mm->pool);
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

/* Root, or a member of [users] admin_group: may steer every client and
 * change daemon-wide settings. Decided now, from the credentials the peer
 * had when it connected, which creds_changed() checked still hold for this
 * request; a reload that changes admin_group applies at once. */
bool conn_admin(Manager *m, Conn *c) {
        return config_is_admin(&m->conf.users, c->uid, c->groups, c->ngroups);
}

static int open_uffd_dev(void) {
        return sandbox_open_uffd_dev(); /* the sandbox opens no file for writing */
}

static int do_hello(Manager *m, Conn *c, const ZMsgHello *h) {
        if (c->role)
                return -EALREADY;
        if (h->role != ZROLE_CLIENT && h->role != ZROLE_CONTROL && h->role != ZROLE_CHILD)
                return -EINVAL;
        if (h->role != ZROLE_CONTROL && !m->cfg.allow_all &&
            !config_user_allowed(&m->conf.users, c->uid, c->groups, c->ngroups)) {
                log_warn("pid %d (uid %u): not allowed to be a client ([users] allow in zswapd.conf): refused",
                         (int)c->pid, c->uid);
                return -EPERM;
        }
        c->role = (int)h->role;
        if (c->role == ZROLE_CONTROL) {
                conn_reply(c, h->hdr.id, 0, 0);
                return 1;
        }
        /* A client creates its uffds through this fd, in its own address
         * space, with kernel-mode faults handled (never USER_MODE_ONLY).
         * With it, any process can make uffds that stall the kernel's own
         * copies, which is what vm.unprivileged_userfaultfd = 0 denies, and
         * it may keep the fd: so only users the configuration names get it
         * (userfaultfd_device; root always). Without it, the library makes
         * its uffd with userfaultfd(2), which the kernel allows only where
         * the sysctl does. A fork child gets its uffd from the fork event
         * and never needs the device. */
        int dev = -1;
        if (c->role == ZROLE_CLIENT && config_user_uffd_device(&m->conf.users, c->uid)) {
                dev = open_uffd_dev();
                if (dev < 0)
                        return dev;
        } else if (c->role == ZROLE_CLIENT)
                log_info("pid %d (uid %u): no /dev/userfaultfd handed out (userfaultfd_device = no in zswapd.conf): "
                         "it can be a client only if vm.unprivileged_userfaultfd = 1 lets it make its own userfaultfd",
                         (int)c->pid, c->uid);
        ZMsgReply r = { .status = 0 };
        zmsg_init(&r.hdr, ZMSG_REPLY, h->hdr.id, sizeof(r));
        reply_send(c, &r, sizeof(r), &dev, dev >= 0 ? 1 : 0);
        safe_close(dev);
        return 1;
}

/* Reply 0 (value) with fds first[] and then a read-only descriptor of mm's
 * store, which the client keeps (store.h). */
static void reply_store(Conn *c, uint32_t id, MMClient *mm, int64_t value, const int *first, size_t nfirst) {
        int fds[3];
        size_t n = 0;

        for (size_t i = 0; i < nfirst && n < 2; i++)
                fds[n++] = first[i];
        int ro = mmclient_store_fd_ro(mm);
        if (ro >= 0)
                fds[n++] = ro;
        else
                log_warn("pid %d: its store cannot be handed over (%s): it cannot outlive this daemon",
                         (int)c->pid, strerror(-ro));
        ZMsgReply rep = { .status = 0, .value = value };
        zmsg_init(&rep.hdr, ZMSG_REPLY, id, sizeof(rep));
        reply_send(c, &rep, sizeof(rep), fds, n);
        safe_close(ro);
}

static int staging_check(const ZMsgAttach *a, unsigned *nlanes) {
        uint64_t lane_bytes = (uint64_t)LANE_SLOTS * ZSWAP_PAGE_SIZE;
        if (!page_aligned(a->staging_addr) || a->staging_len == 0 || a->staging_len % lane_bytes ||
            a->staging_len / lane_bytes > LANES_MAX || a->staging_addr + a->staging_len > PINDEX_MAX_ADDR ||
            a->staging_addr + a->staging_len < a->staging_addr)
                return -EINVAL;
        *nlanes = (unsigned)(a->staging_len / lane_bytes);
        return 0;
}

/*
 * Written once. For ATTACH and ADOPT before mm_serve() publishes mm; for a
 * fork child at its ATTACH, which comes after CHILD_ATTACH, while fault
 * threads already watch its uffd. Two of them read these two fields then
 * with no lock and no atomic: a data race. uffd_read_msg() (every event
 * of the child's uffd: is a REMOVE of the staging area?) decides only
 * whether fault injection may kill there; event_fork() (the child itself
 * forks meanwhile) copies staging_addr as the grandchild's
 * origin_staging, which do_child_attach() matches. Every other reader
 * comes after this write through something published later (mmclient.h,
 * MMClient.staging_addr).
 */
static void mm_set_staging(MMClient *mm, const ZMsgAttach *a, unsigned nlanes) {
        mm->staging_addr = a->staging_addr;
        mm->nlanes = nlanes;
}

/* A new client address space of connection c starts being served: an id,
 * a fault thread watching its uffd, the manager's list. On failure mm is
 * let go (the client keeps its own uffd). */
static int mm_serve(Manager *m, Conn *c, MMClient *mm) {
        mm->id = ++m->next_mm_id;
        mm->conn = c;
        c->mm = mm;
        mm->ft = m->core.fts[mm->id % m->core.nfts];
        if (fault_watch(&m->core, mm) < 0) {
                c->mm = NULL;
                mm->ft = NULL;
                mmclient_unref(mm);
                return -ENOMEM;
        }
        mm_link(m, mm);
        return 0;
}

/*
 * Bind mm to the process of connection c and prove its uffd is of that
 * process's address space (mmclient_prove()): what the daemon reads of the
 * client (staging, the fork token, pagemap) and what it serves through the
 * uffd are then one address space, whatever the pid number names later. A
 * uffd made in another process, or a process that exec'd since it sent
 * the request (a setuid program now, say), is refused and logged.
 */
static int mm_bind_proven(Conn *c, MMClient *mm, uint64_t staging, uint64_t len) {
        int r = mmclient_mem_fd(mm) >= 0 ? 0 : mmclient_bind(mm, c->pidfd, c->pid);
        if (r == 0)
                r = mmclient_prove(mm, staging, len);
        if (r == -EPERM || r == -ESRCH)
                log_warn("pid %d: refused: not its own address space (its userfaultfd is another process's, "
                         "or the process that connected exited or exec'd)", (int)c->pid);
        if (r < 0)
                mmclient_unbind(mm);
        return r == -ESRCH ? -EPERM : r;
}

static int do_attach(Manager *m, Conn *c, const ZMsgAttach *a, int *fds, size_t nfds) {
        struct uffdio_api api = { .api = UFFD_API,
                                  .features = UFFD_FEATURE_EVENT_FORK | UFFD_FEATURE_EVENT_REMAP |
                                              UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_UNMAP |
                                              UFFD_FEATURE_MOVE | (m->core.wp_async ? UFFD_FEATURE_WP_ASYNC : 0) |
                                              (m->core.uffd_poison ? UFFD_FEATURE_POISON : 0) };
        unsigned nlanes;
        MMClient *mm;
        int r;

        r = staging_check(a, &nlanes);
        if (r < 0)
                return r;
        if (c->role == ZROLE_CHILD && c->mm && c->mm->nlanes == 0 && nfds == 0) {
                mm_set_staging(c->mm, a, nlanes);
                return 0;
        }
        if (c->role != ZROLE_CLIENT || c->mm)
                return -EPERM;
        /* the uffd, and the sync page's memfd (zsync.h) */
        if (nfds < 1 || nfds > 2 || fd_is_userfaultfd(fds[0]) != 1 || (nfds == 2 && !mmclient_sync_fd_ok(fds[1])))
                return -EBADF;
        /* the handshake is ours: a uffd the client already initialised is refused */
        if (ioctl(fds[0], UFFDIO_API, &api) < 0)
                return -EINVAL;
        fd_set_nonblock(fds[0], true);
        r = mmclient_new(&m->core, fds[0], &mm);
        if (r < 0)
                return r;
        fds[0] = -1; /* owned by mm now */
        r = mm_bind_proven(c, mm, a->staging_addr, a->staging_len);
        if (r < 0) {
                mmclient_unref(mm);
                return r;
        }
        if (nfds == 2) {
                r = mmclient_set_sync(mm, fds[1]);
                fds[1] = -1; /* taken either way */
                if (r < 0) {
                        mmclient_unref(mm);
                        return r;
                }
        }
        mm->wp_async = m->core.wp_async;
        mm_set_staging(mm, a, nlanes);
        mm->uid = c->uid;
        if (mm_serve(m, c, mm) < 0)
                return -ENOMEM;
        log_info("client pid %d attached (%u staging lanes)", (int)c->pid, nlanes);
        reply_store(c, a->hdr.id, mm, 0, NULL, 0);
        return 1;
}

/*
 * ZMSG_ADOPT: a client whose daemon died hands its uffd and store to us
 * (adopt.c checks and copies the store). Its threads may be waiting on
 * faults the old daemon read and never served: once we watch the uffd, a
 * wake of every range makes them fault again, to us.
 */
static int do_adopt(Manager *m, Conn *c, const ZMsgAttach *a, int *fds, size_t nfds) {
        _cleanup_free_ StoreRange *ranges = NULL;
        char why[160] = "";
        uint8_t *old = NULL;
        unsigned nlanes;
        uint64_t held = 0;
        StoreEvent ev;
        bool has_ev = false;
        MMClient *mm;
        int r, n;

        r = staging_check(a, &nlanes);
        if (r < 0)
                return r;
        if (c->role != ZROLE_CLIENT || c->mm)
                return -EPERM;
        /* adoption reads the slots of pages the dead daemon left in flight,
         * waiting up to the bound (memread.h): not while a read of this
         * user's memory waits already, or a user could hold the manager
         * once per connection it holds. The library asks again */
        if (memread_stuck(c->uid) > 0) {
                log_warn("pid %d (uid %u): adopt: a read of its user's memory waits past its bound: later",
                         (int)c->pid, c->uid);
                return -EBUSY;
        }
        /* the uffd, the store, and the sync page's memfd (zsync.h) */
        if (nfds < 2 || nfds > 3 || fd_is_userfaultfd(fds[0]) != 1 || (nfds == 3 && !mmclient_sync_fd_ok(fds[2])))
                return -EBADF;
        if (store_map(fds[1], false, &old) < 0) {
                log_warn("pid %d: adopt: not a store: refused", (int)c->pid);
                return -EBADMSG;
        }
        r = adopt_check(m, old, why, sizeof(why));
        /* the dead daemon answered the FORK_PREPARE of the fork the library
         * names and never read that fork's event: the fork may be under
         * way (the library forks once the answer is in; its agent may
         * adopt before the fork's instant). It is announced to us now:
         * nothing of the client is evicted until its FORK_DONE, and its
         * event, when we read it, holds it for the child (fork_held()),
         * as if the FORK_PREPARE had come to us, so that the child can
         * restore itself from the store we hand the client now, should we
         * die before it attaches (docs/reliability.md) */
        bool forking = r == 0 && a->fork_token != 0 &&
                       atomic_load_explicit(&store_super(old)->fork_announced, memory_order_acquire) == a->fork_token &&
                       atomic_load_explicit(&store_super(old)->fork_evented, memory_order_acquire) != a->fork_token;
        n = r < 0 ? r : adopt_ranges(old, &ranges, &ev, &has_ev, why, sizeof(why));
        if (n < 0) {
                store_unmap(old);
                if (n == -EBADMSG)
                        log_warn("pid %d: adopt: store refused: %s", (int)c->pid, why);
                return n;
        }
        fd_set_nonblock(fds[0], true);
        r = mmclient_new(&m->core, fds[0], &mm);
        if (r < 0) {
                store_unmap(old);
                return r;
        }
        fds[0] = -1;
        /* before anything of the store is taken: the adopted pages are
         * served through this uffd and read (staging, the fork token)
         * through the mem fd, which must be the one address space. The
         * proof writes nothing, so the slots the store names are as the
         * dead daemon left them. */
        r = mm_bind_proven(c, mm, a->staging_addr, a->staging_len);
        if (r < 0) {
                store_unmap(old);
                mmclient_unref(mm); /* the client keeps its own uffd and store */
                return r;
        }
        if (nfds == 3) {
                r = mmclient_set_sync(mm, fds[2]);
                fds[2] = -1;
                if (r == 0) {
                        /* the agent waits for us in its reconnect loop and
                         * the old daemon's reader is gone: nobody is inside.
                         * seq_cst, as every access of the handshake's
                         * counters (zsync.h); not argued weaker */
                        atomic_store_explicit(&mm->sync->moving, 0, memory_order_seq_cst);
                        atomic_store_explicit(&mm->sync->reading, 0, memory_order_seq_cst);
                }
        }
        mm->wp_async = (store_super(old)->features & STORE_F_WP_ASYNC) != 0;
        mm_set_staging(mm, a, nlanes);
        mm->uid = c->uid;
        /* a fork may be waiting for us to read its event: the FORK_PREPARE
         * that announced its token went to the dead daemon, and the client
         * names it again */
        atomic_store_explicit(&mm->next_fork_token, a->fork_token, memory_order_relaxed);
        if (has_ev && ev.to == STORE_EVENT_GONE)
                log_info("pid %d: adopt: the dead daemon left an event unfinished: [%#llx, %#llx) gone", (int)c->pid,
                         (unsigned long long)ev.start, (unsigned long long)ev.end);
        else if (has_ev)
                log_info("pid %d: adopt: the dead daemon left an event unfinished: [%#llx, %#llx) moved to %#llx",
                         (int)c->pid, (unsigned long long)ev.start, (unsigned long long)ev.end,
                         (unsigned long long)ev.to);
        n = adopt_live_ranges(mm, ranges, n);
        /* as REGISTER admits ranges, and its quotas (adopt.c) */
        int admit = adopt_admit(m, mm, ranges, n, why, sizeof(why));
        r = admit;
        for (int i = 0; r == 0 && i < n; i++)
                /* armed or not as the dead daemon left it: armed again
                 * before a page leaves (a no-op for the kernel if it is) */
                r = mmclient_region_add(mm, ranges[i].start, ranges[i].end, false);
        if (r < 0 && admit == 0)
                snprintf(why, sizeof(why), "cannot take its ranges: %s", strerror(-r));
        if (r == 0)
                r = adopt_entries(mm, old, ranges, (size_t)n, has_ev ? &ev : NULL, &held, why, sizeof(why));
        store_unmap(old);
        if (r < 0) {
                log_warn("pid %d: adopt: store refused: %s", (int)c->pid, why);
                mmclient_unref(mm); /* the client keeps its own uffd and store */
                return r == -ENOMEM || r == -EDQUOT || r == -EINVAL ? r : -EBADMSG;
        }
        if (forking) {
                /* before the uffd is watched: its fork event may be there */
                mm->fork_token_announced = a->fork_token;
                mm->fork_paused = true;
                mm->fork_paused_at = now_ns();
                /* what the dead daemon told the library is not known: the
                 * child gets its parent held, as it would have from it */
                atomic_store_explicit(&mm->fork_held_pages, UINT64_MAX, memory_order_relaxed);
                atomic_store_explicit(&mm->fork_announced, true, memory_order_relaxed);
                if (mm->store)
                        /* release: after every entry adopted into it */
                        atomic_store_explicit(&store_super(mm->store)->fork_announced, a->fork_token,
                                              memory_order_release);
                log_info("pid %d: adopted while it forks (its FORK_PREPARE went to the dead daemon): eviction paused "
                         "until the fork is done",
                         (int)c->pid);
        }
        if (mm_serve(m, c, mm) < 0)
                return -ENOMEM;
        for (int i = 0; i < n; i++) {
                struct uffdio_range wake = { .start = ranges[i].start, .len = ranges[i].end - ranges[i].start };
                (void)ioctl(mm->uffd, UFFDIO_WAKE, &wake);
        }
        log_info("client pid %d adopted: %llu pages held, %d ranges", (int)c->pid, (unsigned long long)held, n);
        reply_store(c, a->hdr.id, mm, (int64_t)held, NULL, 0);
        return 1;
}

static int do_child_attach(Manager *m, Conn *c, const ZMsgChild *ch, int *fds, size_t nfds) {
        MMClient *found = NULL;
        pid_t ppid = 0;

        if (c->role != ZROLE_CHILD || c->mm)
                return -EPERM;
        /* optionally the child's own sync page (zsync.h) */
        if (nfds > 1 || (nfds == 1 && !mmclient_sync_fd_ok(fds[0])))
                return -EBADF;
        if (proc_ppid(c->pid, &ppid) < 0)
                return -ESRCH;
        unsigned matches = 0;
        for (MMClient *mm = manager_orphans(m); mm; mm = mm->next)
                /* the forked child of its parent, or, once that parent
                 * exited (the child has another parent now), a process of
                 * the same user: the token, a secret of the two processes,
                 * names the child, and the proof below that its uffd acts
                 * on the caller's address space decides */
                if (mm->fork_token == ch->fork_token && ch->fork_token != 0 && mm->origin_staging == ch->staging_addr &&
                    (mm->parent_pid == ppid || (mm->uid == c->uid && mmclient_parent_gone(mm)))) {
                        found = mm;
                        matches++;
                }
        if (matches == 1)
                for (MMClient **p = &m->orphans; *p; p = &(*p)->next)
                        if (*p == found) {
                                *p = found->next;
                                break;
                        }
        if (matches > 1) {
                /* never guess which address space a process is */
                log_warn("pid %d: fork token %llu matches %u children: refused", (int)c->pid,
                         (unsigned long long)ch->fork_token, matches);
                return -EBUSY;
        }
        if (!found)
                return -ESRCH;
        /* the child's uffd came from its fork event: proven against the
         * process that connected with one lane of the staging area it
         * inherited (registered on that uffd already) */
        int r = mm_bind_proven(c, found, ch->staging_addr, (uint64_t)LANE_SLOTS * ZSWAP_PAGE_SIZE);
        if (r < 0) {
                /* unbind again: the orphan keeps waiting for its real owner */
                mmclient_unbind(found);
                core_adopt_orphan(&m->core, found);
                return r;
        }
        if (nfds == 1) {
                r = mm_replace_sync(found, fds[0]);
                fds[0] = -1;
                if (r < 0)
                        log_warn("pid %d: cannot map its sync page: it runs without the move/unmap handshake",
                                 (int)c->pid);
        }
        found->id = ++m->next_mm_id;
        found->conn = c;
        c->mm = found;
        mm_link(m, found);
        /* the child keeps its own reference to its uffd, and its store,
         * from now on */
        reply_store(c, ch->hdr.id, found, 0, &found->uffd, 1);
        log_info("forked child pid %d attached", (int)c->pid);
        /* it has its uffd and store now, whatever happens to us: its
         * parent is served again (fault.c, fork_held()) */
        mmclient_fork_release(found);
        return 1; /* replied */
}

static int range_check(const ZMsgRange *rg) {
        if (!page_aligned(rg->addr) || !page_aligned(rg->len) || rg->len == 0 || rg->addr == 0 ||
            rg->addr + rg->len < rg->addr || rg->addr + rg->len > PINDEX_MAX_ADDR)
                return -EINVAL;
        return 0;
}

static int do_register(Manager *m, MMClient *mm, const ZMsgRange *rg) {
        uint64_t s = rg->addr, e = rg->addr + rg->len;
        int r = mmclient_check_anon(mm, s, e);
        if (r < 0)
                return r;
        /* overlap check first, so that we never touch a range already ours */
        uint64_t cs = s, ce = e;
        if (mmclient_region_clip(mm, &cs, &ce))
                return -EEXIST;
        for (PageoutOp *op = mm->ops; op; op = op->next)
                if (op->unregister && op->start < e && s < op->end)
                        return -EBUSY; /* still being unregistered: ask again when that returns */
        if (s < mm->staging_addr + (uint64_t)mm->nlanes * LANE_SLOTS * ZSWAP_PAGE_SIZE && e > mm->staging_addr)
                return -EINVAL; /* the staging area is the agent's, never managed */
        if ((r = users_check_register(m, mm, e - s)) < 0)
                return r;
        r = mmclient_uffd_register(mm, s, e);
        if (r < 0)
                return r == -EBUSY ? -EEXIST : r;
        r = mmclient_region_add(mm, s, e, r > 0);
        if (r < 0)
                mmclient_uffd_unregister(mm, s, e);
        mm->rc.measured_ms = 0; /* the next statistics count afresh */
        return r;
}

/*
 * zswapctl pageout PID: evict a running process's managed memory, over
 * every client it has (a process may connect more than once). Root may
 * ask for any process, other users for their own. Replied when the last
 * client's pageout is done, with the pages evicted in all.
 */
static int do_pageout_pid(Manager *m, Conn *c, const ZMsgPageoutPid *q) {
        uint64_t start = q->addr, end = q->len ? q->addr + q->len : PINDEX_MAX_ADDR;
        PageoutGroup *g;
        bool found = false, allowed = false;

        if (c->role != ZROLE_CONTROL)
                return -EPROTO;
        if (q->pid <= 0 || !page_aligned(q->addr) || !page_aligned(q->len) || end < start || end > PINDEX_MAX_ADDR)
                return -EINVAL;
        for (MMClient *mm = m->mms; mm; mm = mm->next) {
                if (mmclient_pid(mm) != q->pid || !mm->conn || atomic_load_explicit(&mm->dead, memory_order_relaxed))
                        continue;
                found = true;
                allowed |= conn_admin(m, c) || c->uid == mm->conn->uid;
        }
        if (!found)
                return -ESRCH;
        if (!allowed)
                return -EPERM;
        g = INJECT_ALLOC(calloc(1, sizeof(*g)));
        if (!g)
                return -ENOMEM;
        g->conn = c;
        g->id = q->hdr.id;
        g->ops = 1; /* ours, until every op is queued: one that finishes at once must not answer */
        for (MMClient *mm = m->mms; mm; mm = mm->next)
                if (mmclient_pid(mm) == q->pid && mm->conn && mm->nlanes > 0 &&
                    !atomic_load_explicit(&mm->dead, memory_order_relaxed) &&
                    evict_queue_group(&m->core, mm, g, start, end) < 0)
                        log_warn("pid %d: no memory to queue a pageout", (int)q->pid);
        evict_group_done(&m->core, g, 0);
        return 1;
}

/*
 * The clients of pid the sender may steer: root any, others their own.
 * pid 0: the sender's own client. -ESRCH, -EPERM, or how many there are.
 */
static int steerable(Manager *m, Conn *c, int32_t pid) {
        int found = 0;
        bool allowed = false;

        if (pid == 0)
                return c->mm && c->role == ZROLE_CLIENT ? 1 : -ESRCH;
        if (pid < 0)
                return -EINVAL;
        for (MMClient *mm = m->mms; mm; mm = mm->next) {
                if (mmclient_pid(mm) != pid || !mm->conn || atomic_load_explicit(&mm->dead, memory_order_relaxed))
                        continue;
                found++;
                allowed |= conn_admin(m, c) || c->uid == mm->conn->uid;
        }
        return !found ? -ESRCH : !allowed ? -EPERM : found;
}

/* Is mm one of the clients a request for pid from c applies to, and may c
 * steer it? Decided per client: two clients of one pid can belong to
 * different users. */
static bool steer_target(Conn *c, MMClient *mm, int32_t pid) {
        if (pid == 0)
                return mm == c->mm;
        return mmclient_pid(mm) == pid && mm->conn && !atomic_load_explicit(&mm->dead, memory_order_relaxed) &&
               (conn_admin(c->m, c) || c->uid == mm->conn->uid);
}

/* zswapctl limit PID SIZE, zswap_set_limit(): applied at the next tick */
static int do_set_limit(Manager *m, Conn *c, const ZMsgLimit *q) {
        int r = steerable(m, c, q->pid);
        if (r < 0)
                return r;
        for (MMClient *mm = m->mms; mm; mm = mm->next)
                if (steer_target(c, mm, q->pid)) {
                        mm->rc.limit = q->bytes;
                        mm->rc.limit_set = true;
                        mm->rc.measured_ms = 0;
                        log_info("pid %d: resident limit %llu bytes", (int)mmclient_pid(mm),
                                 (unsigned long long)q->bytes);
                }
        reclaim_soon(&m->reclaim); /* act on it now */
        return 0;
}

static void tunable_reply(Conn *c, const ZMsgTunable *q, int status, const char *value) {
        ZMsgTunable rep = { .pid = q->pid, .status = status };
        zmsg_init(&rep.hdr, ZMSG_TUNABLE_REPLY, q->hdr.id, sizeof(rep));
        memcpy(rep.key, q->key, sizeof(rep.key));
        snprintf(rep.value, sizeof(rep.value), "%s", value);
        reply_send(c, &rep, sizeof(rep), NULL, 0);
}

/* Per-client keys: limit, idle_age, reclaim. Format or set them on mm. */
static int client_tunable(MMClient *mm, const char *key, const char *value, char *out, size_t len) {
        Tunables t = manager_of(mm->core)->reclaim.tun; /* parse with the daemon's parser, into a scratch copy */
        char err[ZSWAP_TUNABLE_VALUE_MAX];
        int r;

        if (strcmp(key, "limit") == 0) {
                if (value) {
                        if ((r = tunable_set(&t, "limit", value, err, sizeof(err))) < 0)
                                return snprintf(out, len, "%s", err), r;
                        mm->rc.limit = t.limit;
                        mm->rc.limit_set = true;
                }
                t.limit = reclaim_client_limit(&manager_of(mm->core)->reclaim, mm);
                return tunable_get(&t, "limit", out, len);
        }
        if (strcmp(key, "idle_age") == 0) {
                if (value) {
                        if ((r = tunable_set(&t, "idle_age", value, err, sizeof(err))) < 0)
                                return snprintf(out, len, "%s", err), r;
                        mm->rc.idle_age_ms = (int64_t)t.idle_age_ms;
                }
                t.idle_age_ms = mm->rc.idle_age_ms >= 0 ? (uint64_t)mm->rc.idle_age_ms : manager_of(mm->core)->reclaim.tun.idle_age_ms;
                return tunable_get(&t, "idle_age", out, len);
        }
        if (strcmp(key, "reclaim") == 0) {
                if (value) {
                        if ((r = tunable_set(&t, "keep_clean", value, err, sizeof(err))) < 0)
                                return snprintf(out, len, "reclaim: '%.32s' is not yes/no", value), r;
                        mm->rc.off = !t.keep_clean;
                }
                return snprintf(out, len, "%s", mm->rc.off ? "no" : "yes") < 0 ? -EINVAL : 0;
        }
        snprintf(out, len, "%s: not a per-client key (limit, idle_age, reclaim)", key);
        return -ENOENT;
}

/*
 * zswapctl set/get. Daemon-wide keys: anyone reads, root sets. Per-client
 * keys (pid != 0): root or the process's own user.
 */
static int do_tunable(Manager *m, Conn *c, const ZMsgTunable *q) {
        char key[ZSWAP_TUNABLE_KEY_MAX + 1] = "", value[ZSWAP_TUNABLE_VALUE_MAX + 1] = "";
        char out[ZSWAP_TUNABLE_VALUE_MAX] = "";
        bool set = q->hdr.type == ZMSG_TUNABLE_SET;
        int r = 0;

        memcpy(key, q->key, sizeof(q->key));
        memcpy(value, q->value, sizeof(q->value));
        if (q->pid != 0) {
                r = steerable(m, c, q->pid);
                if (r < 0) {
                        snprintf(out, sizeof(out), "%s", r == -ESRCH ? "no such client" : "permission denied");
                        tunable_reply(c, q, r, out);
                        return 1;
                }
                r = -ESRCH;
                for (MMClient *mm = m->mms; mm; mm = mm->next)
                        if (steer_target(c, mm, q->pid)) {
                                r = client_tunable(mm, key, set ? value : NULL, out, sizeof(out));
                                if (r < 0)
                                        break;
                        }
                if (r == 0 && set) {
                        log_info("pid %d: %s = %s", (int)q->pid, key, out);
                        reclaim_soon(&m->reclaim);
                }
                tunable_reply(c, q, r, out);
                return 1;
        }
        if (strcmp(key, "status") == 0 && !set) {
                reclaim_status(&m->reclaim, out, sizeof(out));
                tunable_reply(c, q, 0, out);
                return 1;
        }
        if (set && !conn_admin(m, c)) {
                tunable_reply(c, q, -EPERM, "permission denied: admin commands need root or group zswap");
                return 1;
        }
        if (set) {
                r = tunable_set(&m->reclaim.tun, key, value, out, sizeof(out));
                if (r == 0) {
                        reclaim_apply(&m->reclaim);
                        reclaim_soon(&m->reclaim);
                }
        }
        if (r == 0)
                r = tunable_get(&m->reclaim.tun, key, out, sizeof(out));
        if (r == -ENOENT && !out[0])
                snprintf(out, sizeof(out), "unknown key '%s'", key);
        if (r == 0 && set)
                log_info("set %s = %s", key, out);
        else if (r < 0 && set)
                log_warn("set %s = %s refused: %s", key, value, out);
        tunable_reply(c, q, r, out);
        return 1;
}

int manager_build_config(const ManagerConfig *cfg, Config *ret, char *err, size_t len) {
        int r;

        config_default(ret);
        if (cfg->config_path && (r = config_load(ret, cfg->config_path, err, len)) < 0) {
                config_free(ret);
                return r;
        }
        for (size_t i = 0; i < cfg->nsets; i++) {
                char key[ZSWAP_TUNABLE_KEY_MAX], why[256];
                const char *eq = strchr(cfg->sets[i], '=');
                size_t kl = eq ? (size_t)(eq - cfg->sets[i]) : 0;
                if (!eq || kl == 0 || kl >= sizeof(key)) {
                        snprintf(err, len, "--set %s: expected KEY=VALUE", cfg->sets[i]);
                        config_free(ret);
                        return -EINVAL;
                }
                memcpy(key, cfg->sets[i], kl);
                key[kl] = 0;
                if ((r = tunable_set(&ret->tun, key, eq + 1, why, sizeof(why))) < 0) {
                        snprintf(err, len, "--set %s: %s", cfg->sets[i], r == -ENOENT ? "unknown key" : why);
                        config_free(ret);
                        return r;
                }
        }
        return 0;
}

/* The [daemon] keys a reload would change: they need a restart. The
 * command line's own win anyway, so only the file's are compared. */
static void reload_daemon_keys(Manager *m, const DaemonConf *now, const DaemonConf *new) {
        for (DaemonKey k = 0; k < _DKEY_MAX; k++) {
                bool same;
                if (m->cfg.cli_set & (1u << k))
                        continue;
                switch (k) {
                case DKEY_SOCKET: same = strcmp(now->socket, new->socket) == 0; break;
                case DKEY_COMPRESSOR: same = now->codec == new->codec; break;
                case DKEY_LEVEL: same = now->level == new->level; break;
                case DKEY_WORKERS: same = now->workers == new->workers; break;
                case DKEY_FAULT_THREADS: same = now->fault_threads == new->fault_threads; break;
                case DKEY_BATCH: same = now->batch == new->batch; break;
                case DKEY_WORKER_NICE: same = now->worker_nice == new->worker_nice; break;
                case DKEY_LOCK_MEMORY: same = now->lock_memory == new->lock_memory; break;
                case DKEY_SANDBOX: same = now->sandbox == new->sandbox; break;
                case DKEY_MAX_CLIENTS: same = now->max_clients == new->max_clients; break;
                default: same = true;
                }
                if (!same)
                        log_warn("SIGHUP: [daemon] %s changed: it needs a restart (systemctl restart zswapd); "
                                 "the running value stays", config_daemon_key(k));
        }
}

/* SIGHUP: reread the file. A bad file changes nothing and says why; a good
 * one applies the policies and the users' rules without dropping anyone. */
static void reload_config(Manager *m) {
        char err[512];
        Config c;

        if (!m->cfg.config_path) {
                log_info("SIGHUP: no configuration file to reload (--config)");
                return;
        }
        int r = manager_build_config(&m->cfg, &c, err, sizeof(err));
        if (r < 0) {
                log_error("SIGHUP: %s; the running configuration stays", err);
                return;
        }
        reload_daemon_keys(m, &m->conf.daemon, &c.daemon);
        if (memcmp(&m->conf.tier, &c.tier, sizeof(c.tier)) != 0)
                log_warn("SIGHUP: [tier] changed: it needs a restart (systemctl restart zswapd); the running "
                         "second tier stays as it is");
        c.daemon = m->conf.daemon; /* [daemon] is read at start only */
        config_free(&m->conf);
        m->conf = c;
        m->reclaim.tun = c.tun;
        users_apply(m);
        reclaim_apply(&m->reclaim);
        reclaim_soon(&m->reclaim);
        log_info("SIGHUP: %s reloaded", m->cfg.config_path);
}

/* Returns < 0 to reply with that error, 0 to reply success, 1 if replied or
 * no reply is due. */
static int dispatch(Manager *m, Conn *c, const void *buf, int *fds, size_t nfds) {
        const ZMsgHeader *h = buf;
        MMClient *mm = c->mm;
        bool ready = mm && mm->nlanes > 0 && !atomic_load_explicit(&mm->dead, memory_order_relaxed);

        switch (h->type) {
        case ZMSG_HELLO:
                return do_hello(m, c, buf);
        case ZMSG_ATTACH:
                return do_attach(m, c, buf, fds, nfds);
        case ZMSG_CHILD_ATTACH:
                return do_child_attach(m, c, buf, fds, nfds);
        case ZMSG_ADOPT:
                return do_adopt(m, c, buf, fds, nfds);
        case ZMSG_PAGEOUT_PID:
                return do_pageout_pid(m, c, buf);
        case ZMSG_SET_LIMIT:
                return do_set_limit(m, c, buf);
        case ZMSG_TUNABLE_SET:
        case ZMSG_TUNABLE_GET:
                return do_tunable(m, c, buf);
        case ZMSG_STATUS:
                return report_status(m, c, buf);
        case ZMSG_CLIENTS:
                return report_clients(m, c, buf);
        case ZMSG_STATS:
                if (((const ZMsgStatsReq *)buf)->scope > ZSWAP_STATS_GLOBAL)
                        return -EINVAL;
                if (ready) {
                        /* counters as of after every event the client caused */
                        if (mm_sync_now(mm))
                                return report_stats_reply(m, c, h->id, ((const ZMsgStatsReq *)buf)->scope);
                        Work *w = work_new(FW_SYNC, mm);
                        if (!w)
                                return -ENOMEM;
                        w->a = ((const ZMsgStatsReq *)buf)->scope;
                        w->id = h->id;
                        w->status = h->type;
                        w->v = c->serial;
                        fault_thread_post(mm->ft, w);
                        return 1;
                }
                return report_stats_reply(m, c, h->id, ((const ZMsgStatsReq *)buf)->scope);
        case ZMSG_REGISTER:
        case ZMSG_UNREGISTER:
        case ZMSG_PAGEOUT: {
                const ZMsgRange *rg = buf;
                int r = range_check(rg);
                if (!ready)
                        return -ENOTCONN;
                if (r < 0)
                        return r;
                /* The client's view of its address space may be ahead of
                 * ours: munmap() returns once the UNMAP event is read, not
                 * once it is handled. Let the fault thread catch up first. */
                if (mm_sync_now(mm))
                        return range_request(m, c, mm, h->type, h->id, rg->addr, rg->addr + rg->len);
                Work *w = work_new(FW_SYNC, mm);
                if (!w)
                        return -ENOMEM;
                w->a = rg->addr;
                w->b = rg->addr + rg->len;
                w->id = h->id;
                w->status = h->type;
                w->v = c->serial;
                fault_thread_post(mm->ft, w);
                return 1;
        }
        case ZMSG_FORK_PREPARE:
                if (!ready)
                        return -ENOTCONN;
                mm->fork_token_announced = ((const ZMsgFork *)buf)->token;
                mm->fork_paused = true;
                mm->fork_paused_at = now_ns();
                mm->fork_reply_id = h->id;
                mm->fork_reply_serial = c->serial;
                evict_pump(&m->core, mm);
                return 1;
        case ZMSG_FORK_DONE:
                if (!mm)
                        return 1;
                /* Resume only once the fork's event is handled: fork()
                 * returned once the fault thread *read* it, and that thread
                 * may still be walking our index for the child; a page
                 * planned now would look to it like one in flight at the
                 * fork. A sync orders us after the handling. */
                if (ready && !mm_sync_now(mm)) {
                        Work *w = work_new(FW_SYNC, mm);
                        if (w) {
                                w->status = h->type;
                                w->v = c->serial;
                                fault_thread_post(mm->ft, w);
                                return 1;
                        }
                }
                mmclient_fork_evented(mm, mm->fork_token_announced);
                /* a fork that failed, or one a daemon adopting us took as
                 * announced and whose event the dead one had read: no
                 * event of it will come (the fault thread is past any) */
                atomic_store_explicit(&mm->fork_announced, false, memory_order_relaxed);
                mm->fork_paused = false;
                evict_pump(&m->core, mm);
                return 1;
        case ZMSG_MOVE_DONE:
                if (!ready || evict_move_done(&m->core, mm, h->id, buf) < 0)
                        return -EPROTO;
                return 1;
        case ZMSG_RELEASE_DONE:
                if (!ready || evict_release_done(&m->core, mm, h->id) < 0)
                        return -EPROTO;
                return 1;
        default:
                return -EPROTO;
        }
}

/* The requests whose answer depends on who asks: admin rights ([users]
 * admin_group, root) or the user that owns a client. */
static bool request_privileged(uint16_t type) {
        return type == ZMSG_PAGEOUT_PID || type == ZMSG_SET_LIMIT || type == ZMSG_TUNABLE_SET ||
               type == ZMSG_TUNABLE_GET || type == ZMSG_CLIENTS;
}

/* Parse the ids after key ("Uid:", "Gid:", "Groups:") in a /proc status
 * line into ids[] (up to cap); their count, or -1 if line is not key's. */
static int status_ids(const char *line, const char *key, unsigned long *ids, int cap) {
        size_t kl = strlen(key);
        int n = 0;

        if (strncmp(line, key, kl) != 0)
                return -1;
        for (const char *p = line + kl; n < cap;) {
                char *end;
                while (*p == ' ' || *p == '\t')
                        p++;
                unsigned long v = strtoul(p, &end, 10);
                if (end == p)
                        break;
                ids[n++] = v;
                p = end;
        }
        return n;
}

/*
 * Has the peer the credentials it connected with (SO_PEERCRED: effective
 * uid and gid; SO_PEERGROUPS)? Read now from /proc/PID/status, which its
 * pidfd, alive after the read, says is still that process's. True if so.
 */
static bool conn_creds_same(Conn *c) {
        char path[64], line[4096];
        unsigned long ids[64];
        bool uid_ok = false, gid_ok = false, groups_ok = false;
        struct pollfd p = { .fd = c->pidfd, .events = POLLIN };
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", (int)c->pid);
        f = fopen(path, "re");
        if (!f)
                return false;
        while (fgets(line, sizeof(line), f)) {
                int n;
                /* "Uid:" real, effective, saved, fs */
                if ((n = status_ids(line, "Uid:", ids, 4)) >= 0)
                        uid_ok = n == 4 && ids[1] == c->uid;
                else if ((n = status_ids(line, "Gid:", ids, 4)) >= 0)
                        gid_ok = n == 4 && ids[1] == c->gid;
                else if ((n = status_ids(line, "Groups:", ids, ELEMENTSOF(ids))) >= 0) {
                        /* both lists come from the same sorted group_info */
                        groups_ok = (size_t)n + 1 == c->ngroups && n < (int)ELEMENTSOF(ids);
                        for (int i = 0; groups_ok && i < n; i++)
                                groups_ok = ids[i] == c->groups[i + 1];
                }
        }
        fclose(f);
        return uid_ok && gid_ok && groups_ok && c->pidfd >= 0 && poll(&p, 1, 0) == 0;
}

/*
 * Credentials are checked per request, not only at connect. A message
 * whose SCM_CREDENTIALS (real uid, gid) differ from the connection's first
 * one's, or a privileged request from a process whose effective ids or
 * groups are no longer those it connected with (a root process that
 * dropped privileges, setuid() or seteuid()), is refused and the
 * connection ended: admin rights and ownership are decided on the
 * connect-time credentials, which must therefore still be true. NULL, or
 * why not.
 */
static const char *creds_changed(Conn *c, const struct ucred *sender, uint16_t type) {
        if (sender->pid != 0) {
                if (!c->scm_known) {
                        c->scm_known = true;
                        c->scm_uid = sender->uid;
                        c->scm_gid = sender->gid;
                } else if (sender->uid != c->scm_uid || sender->gid != c->scm_gid)
                        return "its uid or gid changed since its first message";
        }
        if (request_privileged(type) && !conn_creds_same(c))
                return "its credentials changed since it connected";
        return NULL;
}

static void conn_message(Manager *m, Conn *c, const void *buf, ssize_t n, int *fds, size_t nfds,
                         const struct ucred *sender) {
        const ZMsgHeader *h = buf;
        /* a truncated packet (-EMSGSIZE) has a header only if it was long:
         * conn_readable() zeroes the header before each receive, so a short
         * one never echoes stale bytes of ours */
        bool has_hdr = n >= (ssize_t)sizeof(ZMsgHeader) || (n == -EMSGSIZE && h->magic == ZSWAP_PROTO_MAGIC);
        uint32_t id = has_hdr ? h->id : 0;
        int r;

        const char *changed = NULL;
        if (n < 0 || zmsg_validate(buf, (size_t)n) < 0)
                r = -EPROTO;
        else if (sender->pid != 0 && sender->pid != c->pid)
                r = -EPERM; /* another process writing to this client's socket */
        else if ((changed = creds_changed(c, sender, h->type)))
                r = -EPERM;
        else
                r = dispatch(m, c, buf, fds, nfds);

        if (r == -EPROTO) {
                atomic_fetch_add_explicit(&m->core.protocol_errors, 1, memory_order_relaxed);
                log_warn("client pid %d: malformed or unexpected message (%zd bytes, type %u)", (int)c->pid, n,
                         has_hdr ? h->type : 0);
                if (++c->errors > PROTOCOL_ERRORS_MAX)
                        conn_kill(c, "too many protocol errors");
        }
        if (r <= 0)
                conn_reply(c, id, r, 0);
        if (changed) {
                log_warn("client pid %d (uid %u): request refused: %s", (int)c->pid, c->uid, changed);
                conn_kill(c, changed);
        }
        for (size_t i = 0; i < nfds; i++)
                safe_close(fds[i]);
}

static void conn_readable(Manager *m, Conn *c) {
        _Alignas(8) uint8_t buf[ZSWAP_MSG_MAX + 8];

        for (int budget = 64; budget > 0 && !c->dying; budget--) {
                int fds[ZMSG_FDS_MAX];
                size_t nfds = ELEMENTSOF(fds);
                struct ucred sender;
                memset(buf, 0, sizeof(ZMsgHeader));
                ssize_t n = zmsg_recv_all(c->fd, buf, sizeof(buf), fds, &nfds, &sender);
                /* a file whose close may wait never reaches a handler:
                 * the closer thread closes it (closer.c) */
                for (size_t i = 0; i < nfds; i++)
                        if (!fd_close_is_safe(fds[i]))
                                fds[i] = closer_drop(m->core.closer, fds[i], c->uid);
                if (n == -EAGAIN)
                        return;
                if (closer_pending(m->core.closer, c->uid) >= CLOSER_USER_MAX)
                        conn_kill(c, "too many descriptors sent whose close waits");
                if (n == 0 || (n < 0 && n != -EMSGSIZE) || c->dying) {
                        for (size_t i = 0; i < nfds; i++)
                                safe_close(fds[i]);
                        c->dying = true;
                        return;
                }
                bool request = n >= (ssize_t)sizeof(ZMsgHeader) && ((ZMsgHeader *)buf)->type < ZMSG_REPLY;
                conn_message(m, c, buf, n, fds, nfds, &sender);
                if (request && !c->dying && !users_take_request(m, c))
                        return; /* paused until users_tick() */
        }
}

/* ---- connections ---- */

/* The peer's groups (SO_PEERGROUPS, Linux 4.13): the admin group and
 * "allow = @group" count supplementary groups too. */
static int peer_groups(int fd, gid_t primary, Conn *c) {
        socklen_t len = 64 * sizeof(gid_t);

        for (;;) {
                gid_t *g = INJECT_ALLOC(realloc(c->groups, len + sizeof(gid_t)));
                if (!g)
                        return -ENOMEM;
                c->groups = g;
                g[0] = primary;
                if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g + 1, &len) == 0) {
                        c->ngroups = 1 + len / sizeof(gid_t);
                        return 0;
                }
                if (errno != ERANGE || len > 65536 * sizeof(gid_t))
                        return negative_errno();
        }
}

/*
 * A pidfd of the peer process: the kernel's own, taken at connect()
 * (SO_PEERPIDFD, Linux 6.5). Without it, pidfd_open() of the pid, kept
 * only if that process started before we accepted (its start time, in
 * clock ticks, at most the tick of accepted_ticks): a process started
 * since cannot be the one that connected, so a reused pid is caught, up
 * to a reuse within the same clock tick.
 */
static int peer_pidfd(int fd, pid_t pid, uint64_t accepted_ticks) {
        socklen_t len = sizeof(int);
        uint64_t start;
        int pidfd = -1;

        if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 && pidfd >= 0)
                return pidfd;
        if (errno != ENOPROTOOPT && errno != EINVAL)
                return negative_errno();
        pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (pidfd < 0)
                return negative_errno();
        if (proc_start_ticks(pid, &start) < 0 || start > accepted_ticks) {
                safe_close(pidfd);
                return -ESRCH;
        }
        return pidfd;
}

/* CLOCK_BOOTTIME in clock ticks (the unit of /proc/PID/stat's start time), rounded up. */
static uint64_t boot_ticks_now(void) {
        struct timespec ts;
        long hz = sysconf(_SC_CLK_TCK);

        clock_gettime(CLOCK_BOOTTIME, &ts);
        return ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) * (uint64_t)hz / 1000000000ull + 1;
}

static void conn_accept(Manager *m) {
        for (;;) {
                int fd = accept4(m->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd < 0) {
                        if (errno == EMFILE || errno == ENFILE) {
                                /* stop listening until the next tick instead of
                                 * spinning on a listen socket we cannot serve */
                                log_warn("out of file descriptors: not accepting for a moment");
                                epoll_ctl(m->epfd, EPOLL_CTL_DEL, m->listen_fd, NULL);
                                m->listen_paused = true;
                        }
                        return;
                }
                struct ucred cred;
                socklen_t len = sizeof(cred);
                int one = 1;
                Conn *c = INJECT_ALLOC(calloc(1, sizeof(*c)));
                if (!c || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
                    setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) < 0) {
                        free(c);
                        safe_close(fd);
                        continue;
                }
                if (closer_pending(m->core.closer, cred.uid) >= CLOSER_USER_MAX) {
                        log_warn("pid %d (uid %u): refused: its user sent descriptors whose close still waits",
                                 (int)cred.pid, cred.uid);
                        free(c);
                        safe_close(fd);
                        continue;
                }
                if (memread_stuck(cred.uid) > 0) {
                        log_warn("pid %d (uid %u): refused: a read of its user's memory waited past its bound "
                                 "(memread.h)",
                                 (int)cred.pid, cred.uid);
                        free(c);
                        safe_close(fd);
                        continue;
                }
                if (m->nconns >= m->cfg.max_clients || !users_may_connect(m, cred.uid)) {
                        log_warn("pid %d (uid %u): too many connections (%s), refused", (int)cred.pid, cred.uid,
                                 m->nconns >= m->cfg.max_clients ? "max_clients" : "its user's max_connections");
                        free(c);
                        safe_close(fd);
                        continue;
                }
                c->pidfd = peer_pidfd(fd, cred.pid, boot_ticks_now());
                if (c->pidfd < 0 || peer_groups(fd, cred.gid, c) < 0) {
                        safe_close(c->pidfd);
                        free(c->groups);
                        free(c);
                        safe_close(fd);
                        continue;
                }
                c->m = m;
                c->serial = ++m->next_conn_serial;
                c->fd = fd;
                c->pid = cred.pid;
                c->uid = cred.uid;
                c->gid = cred.gid;
                struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
                if (epoll_ctl(m->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
                        safe_close(fd);
                        safe_close(c->pidfd);
                        free(c->groups);
                        free(c);
                        continue;
                }
                c->next = m->conns;
                m->conns = c;
                m->nconns++;
        }
}

static void conn_free(Manager *m, Conn *c) {
        for (Conn **p = &m->conns; *p; p = &(*p)->next)
                if (*p == c) {
                        *p = c->next;
                        break;
                }
        m->nconns--;
        for (MMClient *mm = m->mms; mm; mm = mm->next)
                evict_forget_conn(mm, c);
        if (c->mm) {
                log_info("client pid %d disconnected", (int)c->pid);
                mm_detach(m, c->mm, c);
        }
        epoll_ctl(m->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        c->fd = closer_close_conn(m->core.closer, c->fd, c->uid);
        safe_close(c->pidfd);
        free(c->groups);
        free(c);
}

static void reap_conns(Manager *m) {
        for (Conn *c = m->conns, *n; c; c = n) {
                n = c->next;
                if (c->dying)
                        conn_free(m, c);
        }
}

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

int manager_new(const ManagerConfig *cfg, Manager **ret) {
        Manager *m = calloc(1, sizeof(*m));
        int r;

        if (!m)
                return -ENOMEM;
        m->cfg = *cfg;
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
                .fault_spin_us = cfg->fault_spin_us,
                .fault_pin = cfg->fault_pin,
                .fault_shared = cfg->fault_shared,
                .fault_rt_prio = cfg->fault_rt_prio,
        };
        m->core.ops = &core_ops;
        probe_features(m);
        reclaim_init(&m->reclaim, &m->core, &m->mms);
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
                /* before the sandbox: it opens the backing file or connects */
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
        m->core.fts = calloc(cfg->fault_threads, sizeof(*m->core.fts));
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
        *ret = m;
        return 0;
fail:
        manager_free(m);
        return r;
}

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;
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
        /* workers and the tier's writer first: their jobs hold client
         * references */
        m->core.evictor = evictor_free(m->core.evictor);
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
                                if (atomic_load_explicit(&m->core.move_misreports, memory_order_relaxed))
                                        log_info("%llu pages were moved otherwise than UFFDIO_MOVE reported "
                                                 "(decided from pagemap, evict.c)",
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
