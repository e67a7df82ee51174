/*
 * attach.c: how a connection becomes a client.
 *
 * HELLO names the role (and hands a client /dev/userfaultfd where the
 * configuration lets it); ATTACH hands over a new client's uffd, ADOPT one
 * a dead daemon served with its store (adopt.c), CHILD_ATTACH claims a
 * fork child's address space the fault threads made from its fork event.
 * Each binds the address space to the process that connected and proves
 * its uffd acts on it (bind_then_prove(), a job: mmjob.h) before anything
 * of it is served; prove_done() goes on with the request.
 * Manager thread only; dispatch() (requests.c) calls in.
 */
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>

#include "adopt.h"
#include "fault.h"
#include "log.h"
#include "manager-internal.h"
#include "memread.h"
#include "mmjob.h"
#include "sandbox.h"
#include "uffd-compat.h"
#include "users.h"
#include "util.h"

static int open_uffd_dev(void) {
        return sandbox_open_uffd_dev(); /* the sandbox opens no file for writing */
}

int do_hello(Manager *m, Conn *c, const ZMsgHello *h) {
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
        c->features = h->features;
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
        int fds[4];
        size_t n = 0;

        for (size_t i = 0; i < nfirst && n < 2; i++)
                fds[n++] = first[i];
        int ro = mmclient_store_fd_ro(mm), shared = -1;
        if (ro >= 0) {
                fds[n++] = ro;
                /* and its user's shared store, whose objects its entries
                 * may name: a store without it could not be restored */
                shared = mm->dedup ? dedup_fd_ro(mm->dedup) : -1;
                if (shared >= 0)
                        fds[n++] = shared;
                else if (mm->dedup)
                        log_warn("pid %d: its shared store cannot be handed over (%s): it cannot outlive this daemon",
                                 (int)c->pid, strerror(-shared));
        } else
                log_warn("pid %d: its store cannot be handed over (%s): it cannot outlive this daemon",
                         (int)c->pid, strerror(-ro));
        ZMsgReply rep = { .status = 0, .value = value };
        zmsg_init(&rep.hdr, ZMSG_REPLY, id, sizeof(rep));
        reply_send(c, &rep, sizeof(rep), fds, n);
        safe_close(ro);
        safe_close(shared);
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
 * The client's staging area (mmclient.h, MMClient.staging_addr). A fork
 * child's address is its parent's, known since its fork event; its ATTACH
 * gives the number of lanes only, published with a release store because
 * fault threads already watch it.
 */
static void mm_set_staging(MMClient *mm, const ZMsgAttach *a, unsigned nlanes) {
        mm->staging_addr = a->staging_addr;
        atomic_store_explicit(&mm->nlanes, nlanes, memory_order_release);
}

/* What a request that waits for its proof (prove_done()) goes on with:
 * its message and the descriptors it still holds. */
typedef struct ProveWait {
        int type; /* ZMSG_ATTACH, ZMSG_ADOPT, ZMSG_CHILD_ATTACH */
        pid_t pid;
        union {
                ZMsgAttach a;
                ZMsgChild ch;
        } msg;
        int fds[4];
        size_t nfds;
} ProveWait;

/*
 * Bind mm to the process of connection c and prove its uffd is of that
 * process's address space (mmclient_prove()): what the daemon reads of the
 * client (staging, the fork token, pagemap) and what it serves through the
 * uffd are then one address space, whatever the pid number names later. A
 * uffd made in another process, or a process that exec'd since it sent
 * the request (a setuid program now, say), is refused and logged. The
 * proof registers a page of the client's on its uffd, which waits for the
 * client's mmap lock: a job (mmjob.h), and prove_done() goes on with the
 * request, msg of len bytes, with the descriptors fds[] still holds (taken
 * from it). mm's reference (or, for a fork child, the orphan list's) goes
 * with the job. 1: answered later, or < 0 (mm is the caller's again).
 */
static int bind_then_prove(Manager *m, Conn *c, MMClient *mm, const void *msg, size_t len, int *fds, size_t nfds,
                           uint64_t staging, uint64_t staging_len) {
        int r = mmclient_mem_fd(mm) >= 0 ? 0 : mmclient_bind(mm, c->pidfd, c->pid);
        if (r == -ESRCH)
                log_warn("pid %d: refused: the process that connected exited or exec'd", (int)c->pid);
        if (r < 0)
                return r == -ESRCH ? -EPERM : r;
        Work *w = work_new(MW_JOB_PROVE, mm);
        ProveWait *pw = calloc(1, sizeof(*pw));
        if (!w || !pw || nfds > ELEMENTSOF(pw->fds)) {
                free(pw);
                work_free(w);
                mmclient_unbind(mm);
                return -ENOMEM;
        }
        const ZMsgHeader *h = msg;
        pw->type = h->type;
        pw->pid = c->pid;
        memcpy(&pw->msg, msg, MIN(len, sizeof(pw->msg)));
        for (size_t i = 0; i < nfds; i++) {
                pw->fds[i] = fds[i];
                fds[i] = -1;
        }
        pw->nfds = nfds;
        w->data = pw;
        w->a = staging;
        w->b = staging + staging_len;
        w->id = h->id;
        w->v = c->serial;
        c->proving = true;
        mmjob_submit(&m->core, w);
        return 1;
}

int do_attach(Manager *m, Conn *c, const ZMsgAttach *a, int *fds, size_t nfds) {
        struct uffdio_api api = { .api = UFFD_API,
                                  .features = UFFD_FEATURE_EVENT_FORK | UFFD_FEATURE_EVENT_REMAP |
                                              UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_UNMAP |
                                              UFFD_FEATURE_MOVE | UFFD_FEATURE_THREAD_ID |
                                              (m->core.wp_async ? UFFD_FEATURE_WP_ASYNC : 0) |
                                              (m->core.uffd_poison ? UFFD_FEATURE_POISON : 0) };
        unsigned nlanes;
        MMClient *mm;
        int r;

        r = staging_check(a, &nlanes);
        if (r < 0)
                return r;
        if (c->role == ZROLE_CHILD && c->mm && c->mm->nlanes == 0 && nfds == 0) {
                /* the area it inherited, which CHILD_ATTACH proved */
                if (a->staging_addr != c->mm->staging_addr) {
                        log_warn("pid %d: refused: a forked child names a staging area other than the one it "
                                 "inherited", (int)c->pid);
                        return -EINVAL;
                }
                atomic_store_explicit(&c->mm->nlanes, nlanes, memory_order_release);
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
        mm->uid = c->uid;
        r = bind_then_prove(m, c, mm, a, sizeof(*a), fds, nfds, a->staging_addr, a->staging_len);
        if (r < 0)
                mmclient_unref(mm);
        return r;
}

/* ATTACH, once mm is proven (prove_done()). */
static int attach_proven(Manager *m, Conn *c, MMClient *mm, const ZMsgAttach *a, int *fds, size_t nfds) {
        unsigned nlanes;
        int r;

        (void)staging_check(a, &nlanes);
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
        /* relaxed: before mm_serve() hands mm to a fault thread */
        atomic_store_explicit(&mm->orphans_max, users_orphans_max(m, c->uid), memory_order_relaxed);
        mm->strong_ok = (c->features & ZHELLO_F_STRONG) != 0;
        mm->dict_ok = mm->strong_ok && (c->features & ZHELLO_F_DICT);
        dedups_join(m, mm, c->features);
        if (mm_serve(m, c, mm) < 0)
                return -ENOMEM;
        log_info("client pid %d attached (%u staging lanes)", (int)c->pid, nlanes);
        reply_store(c, a->hdr.id, mm, 0, NULL, 0);
        return 1;
}

/* Which of an ADOPT's descriptors after the uffd and the store are the
 * sync page's memfd (zsync.h) and the shared store: *sync_i, *shared_i,
 * -1 if none. False if they are not as the protocol says. */
static bool adopt_fds(const int *fds, size_t nfds, int *sync_i, int *shared_i) {
        *sync_i = *shared_i = -1;
        for (size_t i = 2; i < nfds && i < 4; i++) {
                if (*sync_i < 0 && *shared_i < 0 && mmclient_sync_fd_ok(fds[i]))
                        *sync_i = (int)i;
                else if (*shared_i < 0)
                        *shared_i = (int)i;
        }
        return nfds >= 2 && nfds <= 4 && !(nfds == 4 && (*sync_i < 0 || *shared_i < 0));
}

/*
 * ZMSG_ADOPT: a client whose daemon died hands its uffd and store to us
 * (adopt.c checks and copies the store, adopt_proven()). Its threads may
 * be waiting on faults the old daemon read and never served: once we
 * watch the uffd, a wake of every range makes them fault again, to us.
 */
int do_adopt(Manager *m, Conn *c, const ZMsgAttach *a, int *fds, size_t nfds) {
        unsigned nlanes;
        MMClient *mm;
        int sync_i, shared_i;

        int r = staging_check(a, &nlanes);
        if (r < 0)
                return r;
        if (c->role != ZROLE_CLIENT || c->mm)
                return -EPERM;
        /* adoption's walk reads the slots of pages the dead daemon left in
         * flight, waiting up to the bound (memread.h): not while a read of
         * this user's memory waits already, or a user could hold an mm-job
         * thread for the bound once per connection it holds, again and
         * again. The library asks again */
        if (memread_stuck(c->uid) > 0) {
                log_warn("pid %d (uid %u): adopt: a read of its user's memory waits past its bound: later",
                         (int)c->pid, c->uid);
                return -EBUSY;
        }
        /* the uffd, the store, the sync page's memfd (zsync.h) if any, and
         * the store's shared store if it has one */
        if (!adopt_fds(fds, nfds, &sync_i, &shared_i) || fd_is_userfaultfd(fds[0]) != 1)
                return -EBADF;
        fd_set_nonblock(fds[0], true);
        r = mmclient_new(&m->core, fds[0], &mm);
        if (r < 0)
                return r;
        fds[0] = -1;
        mm->uid = c->uid;
        /* before anything of the store is taken: the adopted pages are
         * served through this uffd and read (staging, the fork token)
         * through the mem fd, which must be the one address space. The
         * proof writes nothing, so the slots the store names are as the
         * dead daemon left them. */
        r = bind_then_prove(m, c, mm, a, sizeof(*a), fds, nfds, a->staging_addr, a->staging_len);
        if (r < 0)
                mmclient_unref(mm); /* the client keeps its own uffd and store */
        return r;
}

/* An ADOPT's walk on its way (MW_JOB_ADOPT; AdoptWalk first: the job's
 * data): what the answer needs when it is back. */
typedef struct AdoptWait {
        AdoptWalk walk;
        ZMsgAttach a;
        pid_t pid;
        bool forking;
} AdoptWait;

static void adopt_wait_free(AdoptWait *aw) {
        store_unmap(aw->walk.old);
        store_unmap(aw->walk.shared);
        safe_close(aw->walk.old_fd);
        safe_close(aw->walk.shared_fd);
        free(aw->walk.ranges);
}

static void adopting_remove(Manager *m, MMClient *mm) {
        for (MMClient **p = &m->adopting; *p; p = &(*p)->next)
                if (*p == mm) {
                        *p = mm->next;
                        mm->next = NULL;
                        return;
                }
}

/*
 * ADOPT, once mm is proven (prove_done()): the store is mapped and
 * checked here, and what reads the client (its maps, the pages the dead
 * daemon left in flight) and copies the entries is a job (AdoptWalk);
 * adopt_walked() answers. Meanwhile mm is on m->adopting, where its pool
 * counts for its user (users.c), and the connection takes no other
 * ATTACH or ADOPT (c->proving).
 */
static int adopt_proven(Manager *m, Conn *c, MMClient *mm, const ZMsgAttach *a, int *fds, size_t nfds) {
        _cleanup_free_ StoreRange *ranges = NULL;
        char why[160] = "";
        uint8_t *old = NULL, *old_shared = NULL;
        unsigned nlanes;
        StoreEvent ev;
        bool has_ev = false;
        int r, n, sync_i, shared_i;

        (void)staging_check(a, &nlanes);
        (void)adopt_fds(fds, nfds, &sync_i, &shared_i);
        if (store_map(fds[1], false, &old) < 0) {
                log_warn("pid %d: adopt: not a store: refused", (int)c->pid);
                mmclient_unref(mm);
                return -EBADMSG;
        }
        r = adopt_check(m, old, why, sizeof(why));
        if (r == 0 && shared_i >= 0) {
                /* checked before any entry names it; a store that names
                 * none, or another one, leaves its shared entries bad */
                if (store_map(fds[shared_i], false, &old_shared) < 0)
                        old_shared = NULL;
                else if (store_check_shared(old_shared, old, why, sizeof(why)) < 0) {
                        log_warn("pid %d: adopt: %s: its shared pages cannot be taken", (int)c->pid, why);
                        store_unmap(old_shared);
                        old_shared = NULL;
                        why[0] = 0;
                }
        }
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
        AdoptWait *aw = n < 0 ? NULL : calloc(1, sizeof(*aw));
        Work *w = aw ? work_new(MW_JOB_ADOPT, mm) : NULL;
        if (n >= 0 && !w) {
                free(aw);
                n = -ENOMEM;
        }
        if (n < 0) {
                store_unmap(old);
                store_unmap(old_shared);
                if (n == -EBADMSG)
                        log_warn("pid %d: adopt: store refused: %s", (int)c->pid, why);
                mmclient_unref(mm); /* the client keeps its own uffd and store */
                return n;
        }
        if (sync_i >= 0) {
                /* with a shared store too, the fourth: the sync page is
                 * the third whenever there is one */
                r = mmclient_set_sync(mm, fds[sync_i]);
                fds[sync_i] = -1;
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
        /* relaxed: before mm_serve() hands mm to a fault thread */
        atomic_store_explicit(&mm->orphans_max, users_orphans_max(m, c->uid), memory_order_relaxed);
        mm->strong_ok = (c->features & ZHELLO_F_STRONG) != 0;
        mm->dict_ok = mm->strong_ok && (c->features & ZHELLO_F_DICT);
        /* before its entries are taken: its shared ones go to its user's
         * shared store here */
        dedups_join(m, mm, c->features);
        /* a fork may be waiting for us to read its event: the FORK_PREPARE
         * that announced its token went to the dead daemon, and the client
         * names it again (relaxed: before mm_serve() hands mm to a
         * fault thread, which orders it) */
        atomic_store_explicit(&mm->next_fork_token, a->fork_token, memory_order_relaxed);
        if (has_ev && ev.to == STORE_EVENT_GONE)
                log_info("pid %d: adopt: the dead daemon left an event unfinished: [%#llx, %#llx) gone", (int)c->pid,
                         (unsigned long long)ev.start, (unsigned long long)ev.end);
        else if (has_ev)
                log_info("pid %d: adopt: the dead daemon left an event unfinished: [%#llx, %#llx) moved to %#llx",
                         (int)c->pid, (unsigned long long)ev.start, (unsigned long long)ev.end,
                         (unsigned long long)ev.to);
        /* the copies are paid from this share (relaxed: mm is not served
         * yet; users_pool() sets it anew while it is on m->adopting) */
        atomic_store_explicit(&mm->quota_left, users_pool_left(m, mm->uid), memory_order_relaxed);
        *aw = (AdoptWait){ .walk = { .old = old, .shared = old_shared, .old_fd = fds[1],
                                     .shared_fd = old_shared ? fds[shared_i] : -1, .ranges = TAKE_PTR(ranges),
                                     .n = n, .ev = ev, .has_ev = has_ev, .codec = m->cfg.codec,
                                     .level = m->cfg.level },
                           .a = *a, .pid = c->pid, .forking = forking };
        adopt_walk_init(&aw->walk);
        fds[1] = -1;
        if (old_shared)
                fds[shared_i] = -1;
        w->data = aw;
        w->id = a->hdr.id;
        w->v = c->serial;
        mm->next = m->adopting;
        m->adopting = mm;
        c->proving = true;
        mmjob_submit(&m->core, w);
        return 1; /* mm's reference goes with the job */
}

/* An ADOPT's walk is back (MW_JOB_ADOPT): admitted as REGISTER admits
 * ranges, then served, and answered. */
void adopt_walked(Manager *m, Work *w) {
        AdoptWait *aw = w->data;
        AdoptWalk *wk = &aw->walk;
        MMClient *mm = w->mm;
        Conn *c = conn_find(m, w->v);
        int r = wk->r, n = wk->n;

        adopting_remove(m, mm);
        if (c)
                c->proving = false;
        if (r == 0)
                /* as REGISTER admits ranges, and its quotas (adopt.c) */
                r = adopt_admit(m, mm, wk->ranges, n, wk->why, sizeof(wk->why));
        for (int i = 0; r == 0 && i < n; i++)
                /* armed or not as the dead daemon left it: armed again
                 * before a page leaves (a no-op for the kernel if it is) */
                if ((r = mmclient_region_add(mm, wk->ranges[i].start, wk->ranges[i].end, false)) < 0)
                        snprintf(wk->why, sizeof(wk->why), "cannot take its ranges: %s", strerror(-r));
        if (r == 0 && !c)
                r = -ECONNRESET; /* nobody to serve it for */
        if (r < 0) {
                if (r != -ECONNRESET)
                        log_warn("pid %d: adopt: store refused: %s", (int)aw->pid, wk->why);
                mmclient_unref(mm); /* the client keeps its own uffd and store */
                if (c)
                        conn_reply(c, w->id, r == -ENOMEM || r == -EDQUOT || r == -EINVAL ? r : -EBADMSG, 0);
                goto out;
        }
        if (aw->forking) {
                /* before the uffd is watched: its fork event may be there */
                mm->fork_token_announced = aw->a.fork_token;
                mm->fork_paused = true;
                mm->fork_paused_at = now_ns();
                /* what the dead daemon told the library is not known: the
                 * child gets its parent held, as it would have from it
                 * (relaxed: before the uffd is watched, as above) */
                atomic_store_explicit(&mm->fork_held_pages, UINT64_MAX, memory_order_relaxed);
                atomic_store_explicit(&mm->fork_announced, true, memory_order_relaxed);
                if (mm->store)
                        /* release: after every entry adopted into it */
                        atomic_store_explicit(&store_super(mm->store)->fork_announced, aw->a.fork_token,
                                              memory_order_release);
                log_info("pid %d: adopted while it forks (its FORK_PREPARE went to the dead daemon): eviction paused "
                         "until the fork is done",
                         (int)aw->pid);
        }
        if (mm_serve(m, c, mm) < 0) {
                conn_reply(c, w->id, -ENOMEM, 0);
                goto out;
        }
        for (int i = 0; i < n; i++) {
                struct uffdio_range wake = { .start = wk->ranges[i].start, .len = wk->ranges[i].end - wk->ranges[i].start };
                (void)ioctl(mm->uffd, UFFDIO_WAKE, &wake);
        }
        log_info("client pid %d adopted: %llu pages held, %d ranges", (int)aw->pid, (unsigned long long)wk->held, n);
        reply_store(c, w->id, mm, (int64_t)wk->held, NULL, 0);
out:
        adopt_wait_free(aw);
        work_free(w);
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
                /* seq_cst: as mm_sync_now() (requests.c) */
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
        /* relaxed: read by this thread only (planning, evict.c), and the post
         * orders it before the fault thread's clearing */
        atomic_store_explicit(&mm->sync_swap, true, memory_order_relaxed);
        fault_thread_post(mm->ft, w);
        return 0;
}

int do_child_attach(Manager *m, Conn *c, const ZMsgChild *ch, int *fds, size_t nfds) {
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
                if (mm->fork_token == ch->fork_token && ch->fork_token != 0 && mm->staging_addr == ch->staging_addr &&
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
        int r = bind_then_prove(m, c, found, ch, sizeof(*ch), fds, nfds, ch->staging_addr,
                                (uint64_t)LANE_SLOTS * ZSWAP_PAGE_SIZE);
        if (r < 0)
                /* the orphan keeps waiting for its real owner */
                core_adopt_orphan(&m->core, found);
        return r;
}

/* CHILD_ATTACH, once the orphan found is proven (prove_done()). */
static int child_proven(Manager *m, Conn *c, MMClient *found, const ZMsgChild *ch, int *fds, size_t nfds) {
        int r;

        if (nfds == 1) {
                r = mm_replace_sync(found, fds[0]);
                fds[0] = -1;
                if (r < 0)
                        log_warn("pid %d: cannot map its sync page: it runs without the move/unmap handshake",
                                 (int)c->pid);
        }
        users_orphan_gone(m, found);
        found->id = ++m->next_mm_id;
        found->conn = c;
        c->mm = found;
        mm_link(m, found);
        /* the child keeps its own reference to its uffd, and its store,
         * from now on */
        reply_store(c, ch->hdr.id, found, 0, &found->uffd, 1);
        log_info("forked child pid %d attached", (int)c->pid);
        /* it has its uffd and store now, whatever happens to us: its
         * parent is served again (daemon/fault/fork.c, fork_held()) */
        mmclient_fork_release(found);
        return 1; /* replied */
}

void prove_done(Manager *m, Work *w) {
        ProveWait *pw = w->data;
        MMClient *mm = w->mm;
        Conn *c = conn_find(m, w->v);
        int r = w->status;

        if (c)
                c->proving = false;
        if (r == -EPERM || r == -ESRCH)
                log_warn("pid %d: refused: not its own address space (its userfaultfd is another process's, "
                         "or the process that connected exited or exec'd)", (int)pw->pid);
        if (r < 0)
                mmclient_unbind(mm);
        else if (!c)
                r = -ECONNRESET; /* nobody to serve it for */
        if (r < 0 && pw->type == ZMSG_CHILD_ATTACH)
                /* the orphan keeps waiting for its real owner */
                core_adopt_orphan(&m->core, mm);
        else if (r < 0)
                mmclient_unref(mm); /* the client keeps its own uffd (and store) */
        else if (pw->type == ZMSG_ATTACH)
                r = attach_proven(m, c, mm, &pw->msg.a, pw->fds, pw->nfds);
        else if (pw->type == ZMSG_ADOPT)
                r = adopt_proven(m, c, mm, &pw->msg.a, pw->fds, pw->nfds);
        else
                r = child_proven(m, c, mm, &pw->msg.ch, pw->fds, pw->nfds);
        if (c && r <= 0)
                conn_reply(c, w->id, r == -ESRCH ? -EPERM : r, 0);
        for (size_t i = 0; i < pw->nfds; i++)
                safe_close(pw->fds[i]);
        work_free(w);
}
