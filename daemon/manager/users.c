/*
 * users.c: per-user admission and limits (users.h).
 *
 * The limits are of a user's clients together, as cgroup limits are of a
 * group of processes: a user cannot get around max_registered by opening
 * more connections. Everything is counted from the manager's own lists
 * when it is needed (registering, the tick), so there is no second copy of
 * the truth to drift. Root is never limited.
 *
 * What each limit does when it is reached:
 *  - max_connections: the connection is refused at accept, logged.
 *  - max_regions, max_registered: REGISTER fails with EDQUOT, logged; so
 *    does ADOPT, for the ranges of the store it hands back, all at once.
 *  - max_pool: the user's pages stay resident; workers hand them back as
 *    they do at the daemon's pool bound, with no page lost. Each client
 *    gets what its user has left at every tick and the workers take from
 *    it page by page (mmclient_quota_take()). With one client the overshoot
 *    is the pages a worker had debited but not yet counted when the tick
 *    handed the share out anew (a page per worker); with k clients, k - 1
 *    times what was left at the tick besides. The same share pays for
 *    what is not an eviction: a fork's copies of its parent's objects
 *    (fault.c, from the parent's share; what does not fit is installed in
 *    the child, resident) and an adopted store's objects (adopt.c, from
 *    users_pool_left(); what does not fit is installed in the client).
 *    A forked child that has not attached yet (an orphan) counts for its
 *    user as much as an attached client.
 *  - max_requests: the user's connections are taken out of epoll until
 *    the bucket has a token again: slower, never dropped or refused.
 *  - max_connections bounds the user's forked children not attached yet
 *    too: each holds a uffd, a store and memory of ours for as long as it
 *    lives, and a child forked without libzswap's handlers never attaches.
 *    At the bound the address space that forked, and the child, are not
 *    read (event_fork()): their next fork waits in the kernel until the
 *    user is under the bound again (users_orphans_unstop(), at the tick).
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>

#include "fault.h"
#include "inject.h"
#include "log.h"
#include "manager-internal.h"
#include "mmclient.h"
#include "mmjob.h"
#include "reclaim.h"
#include "users.h"
#include "util.h"

static UserState *users_find(Manager *m, uid_t uid) {
        for (UserState *u = m->users; u; u = u->next)
                if (u->uid == uid)
                        return u;
        return NULL;
}

UserState *users_get(Manager *m, uid_t uid) {
        UserState *u = users_find(m, uid);
        if (u)
                return u;
        u = INJECT_ALLOC(calloc(1, sizeof(*u)));
        if (!u)
                return NULL;
        u->uid = uid;
        config_user_limits(&m->conf.users, uid, &u->lim);
        u->tokens = (double)u->lim.v[UKEY_MAX_REQUESTS];
        u->refill_ms = now_ms();
        u->next = m->users;
        m->users = u;
        return u;
}

bool users_may_connect(Manager *m, uid_t uid) {
        UserLimits lim;
        unsigned n = 0;

        if (uid == 0)
                return true;
        config_user_limits(&m->conf.users, uid, &lim);
        for (Conn *c = m->conns; c; c = c->next)
                n += c->uid == uid;
        /* and its calls still waiting for a client's mmap lock (mmjob.h)
         * that no connection counts: a connection closed while its call
         * waits keeps a thread */
        n += mmjob_unconnected(uid);
        return n < lim.v[UKEY_MAX_CONNECTIONS];
}

bool users_take_request(Manager *m, Conn *c) {
        UserState *u;

        if (c->uid == 0 || !(u = users_get(m, c->uid)) || u->lim.v[UKEY_MAX_REQUESTS] == 0)
                return true;
        u->tokens -= 1;
        if (u->tokens >= 0)
                return true;
        /* out of epoll, not just out of EPOLLIN: a peer that hangs up would
         * otherwise wake the loop with EPOLLHUP until the tick */
        epoll_ctl(m->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        if (u->throttled++ == 0)
                log_info("uid %u: over max_requests (%llu/s): reading its connections more slowly", c->uid,
                         (unsigned long long)u->lim.v[UKEY_MAX_REQUESTS]);
        c->throttled = true;
        return false;
}

/* Would regions more regions of bytes more put mm's user over a limit? The
 * user's clients in the manager's list are counted (mm among them once it
 * is linked). */
static int users_check(Manager *m, MMClient *mm, uint64_t regions, uint64_t bytes, const char *what) {
        uint64_t len = bytes;
        UserState *u;

        if (mm->uid == 0 || !(u = users_get(m, mm->uid)))
                return 0;
        for (MMClient *o = m->mms; o; o = o->next) {
                if (o->uid != mm->uid)
                        continue;
                pthread_mutex_lock(&o->regions_lock);
                regions += o->nregions;
                bytes += o->registered_bytes;
                pthread_mutex_unlock(&o->regions_lock);
                /* and those on their way */
                mmjob_registering(o, 0, 0, &regions, &bytes);
        }
        UserKey over;
        if (regions > u->lim.v[UKEY_MAX_REGIONS])
                over = UKEY_MAX_REGIONS;
        else if (u->lim.v[UKEY_MAX_REGISTERED] && bytes > u->lim.v[UKEY_MAX_REGISTERED])
                over = UKEY_MAX_REGISTERED;
        else
                return 0;
        if (u->refused++ % 1000 == 0) /* one line per thousand refusals */
                log_warn("uid %u (pid %d): %s %llu bytes would exceed its %s (%llu): refused", mm->uid,
                         (int)mmclient_pid(mm), what, (unsigned long long)len, config_user_key(over),
                         (unsigned long long)u->lim.v[over]);
        return -EDQUOT;
}

int users_check_register(Manager *m, MMClient *mm, uint64_t len) {
        return users_check(m, mm, 1, len, "registering");
}

int users_check_adopt(Manager *m, MMClient *mm, uint64_t regions, uint64_t bytes) {
        return users_check(m, mm, regions, bytes, "adopting a store of");
}

uint64_t users_default_limit(Manager *m, uid_t uid) {
        UserLimits lim;
        config_user_limits(&m->conf.users, uid, &lim);
        return lim.v[UKEY_LIMIT];
}

static void users_pool_add(Manager *m, MMClient *mm) {
        UserState *u = mm->uid ? users_find(m, mm->uid) : NULL;
        /* relaxed: counters, read as of now. fork_bytes: a child being
         * built by a fork event is in no list yet, and its copies are
         * paid from this share; counted twice a moment once it is an
         * orphan, which errs on the safe side */
        if (u)
                u->pool_bytes += atomic_load_explicit(&mm->st.compressed_bytes, memory_order_relaxed) +
                                 atomic_load_explicit(&mm->fork_bytes, memory_order_relaxed);
}

static void users_share(Manager *m, MMClient *mm) {
        UserState *u = mm->uid ? users_find(m, mm->uid) : NULL;
        uint64_t max = u ? u->lim.v[UKEY_MAX_POOL] : 0;
        int64_t left = !max ? QUOTA_NONE : u->pool_full || u->pool_bytes >= max ? 0 : (int64_t)(max - u->pool_bytes);
        /* relaxed: a budget the workers and fault threads take from */
        atomic_store_explicit(&mm->quota_left, left, memory_order_relaxed);
}

/*
 * fn for each client whose pool its user pays for: those attached; forked
 * children not attached yet, which hold their copies too (a process that
 * forks and whose children never attach must not get its user's pool
 * past max_pool; and an orphan may fork before it attaches, its
 * children's copies paid from its share); and stores being adopted,
 * their copies as they are made.
 */
#define POOL_LISTS(m) { (m)->mms, manager_orphans(m), (m)->adopting }

static void users_each_pool(Manager *m, void (*fn)(Manager *m, MMClient *mm)) {
        MMClient *lists[] = POOL_LISTS(m);

        for (size_t i = 0; i < ELEMENTSOF(lists); i++)
                for (MMClient *mm = lists[i]; mm; mm = mm->next)
                        fn(m, mm);
}

static void users_pool(Manager *m) {
        for (UserState *u = m->users; u; u = u->next)
                u->pool_bytes = 0;
        users_each_pool(m, users_pool_add);
        /* the user's shared store: what its processes share, once */
        for (UserState *u = m->users; u; u = u->next)
                u->pool_bytes += dedups_user_bytes(m, u->uid);
        for (UserState *u = m->users; u; u = u->next) {
                uint64_t max = u->lim.v[UKEY_MAX_POOL];
                /* hysteresis as at the daemon's bound: resume 10 % under it */
                bool full = max && (u->pool_full ? u->pool_bytes >= max - max / 10 : u->pool_bytes >= max);
                if (full != u->pool_full)
                        log_info("uid %u: pool %s max_pool (%llu bytes): its eviction %s", u->uid,
                                 full ? "at" : "under", (unsigned long long)max, full ? "stops" : "resumes");
                u->pool_full = full;
        }
        /* each client may take what its user has left: with one client
         * that is exact; with k, the overshoot is at most k - 1 times what
         * was left at this tick. An orphan too: it may fork before it
         * attaches, and its children's copies are paid from its share */
        users_each_pool(m, users_share);
}

int64_t users_pool_left(Manager *m, uid_t uid) {
        UserState *u = uid ? users_get(m, uid) : NULL;
        uint64_t max = u ? u->lim.v[UKEY_MAX_POOL] : 0;

        if (!max)
                return QUOTA_NONE;
        users_pool(m);
        return u->pool_full || u->pool_bytes >= max ? 0 : (int64_t)(max - u->pool_bytes);
}

void users_link(Manager *m, MMClient *mm) {
        mm->user_limit = users_default_limit(m, mm->uid);
        if (mm->uid != 0 && users_get(m, mm->uid))
                users_pool(m);
}

uint32_t users_orphans_max(Manager *m, uid_t uid) {
        UserLimits lim;

        if (uid == 0)
                return 0;
        config_user_limits(&m->conf.users, uid, &lim);
        uint64_t v = lim.v[UKEY_MAX_CONNECTIONS];
        return v == 0 ? 1 : v >= UINT32_MAX ? 0 : (uint32_t)v;
}

void users_orphan_gone(Manager *m, MMClient *mm) {
        if (!mm->orphan_counted)
                return;
        mm->orphan_counted = false;
        core_orphans_add(&m->core, mm->uid, -1);
}

/* mm stopped at its user's bound of children not attached: read again
 * once the user is under it (or the bound is gone) */
static void orphans_unstop(Manager *m, MMClient *mm, bool all) {
        /* relaxed: set by a fault thread, a hint; the kick orders */
        if (!atomic_load_explicit(&mm->orphans_stop, memory_order_relaxed))
                return;
        uint32_t max = atomic_load_explicit(&mm->orphans_max, memory_order_relaxed);
        if (!all && max && core_orphans_add(&m->core, mm->uid, 0) >= max)
                return;
        atomic_store_explicit(&mm->orphans_stop, false, memory_order_relaxed);
        if (mm->ft && fault_post_mm(mm->ft, FW_KICK, mm) < 0)
                log_error("pid %d: cannot wake a fault thread (out of memory)", (int)mmclient_pid(mm));
}

static void users_orphans_unstop(Manager *m, bool all) {
        bool stopped = false;
        for (MMClient *mm = m->mms; mm && !stopped; mm = mm->next)
                stopped = atomic_load_explicit(&mm->orphans_stop, memory_order_relaxed);
        for (MMClient *mm = manager_orphans(m); mm && !stopped; mm = mm->next)
                stopped = atomic_load_explicit(&mm->orphans_stop, memory_order_relaxed);
        if (!stopped)
                return;
        /* children that exec'd or exited count no more at once, not at
         * the next second's look: a shell's fork and exec, many a second,
         * waits a tick at most at the bound */
        if (!all)
                tick_orphans(m);
        for (MMClient *mm = m->mms; mm; mm = mm->next)
                orphans_unstop(m, mm, all);
        for (MMClient *mm = manager_orphans(m); mm; mm = mm->next)
                orphans_unstop(m, mm, all);
}

void users_orphans_release(Manager *m) {
        atomic_store_explicit(&m->core.orphans_unbounded, true, memory_order_relaxed);
        users_orphans_unstop(m, true);
}

void users_tick(Manager *m) {
        uint64_t now = now_ms();

        for (UserState *u = m->users; u; u = u->next) {
                double rate = (double)u->lim.v[UKEY_MAX_REQUESTS];
                u->tokens += rate * (double)(now - u->refill_ms) / 1000.0;
                if (u->tokens > rate)
                        u->tokens = rate; /* a burst of one second at most */
                u->refill_ms = now;
        }
        for (Conn *c = m->conns; c; c = c->next) {
                UserState *u = c->throttled ? users_find(m, c->uid) : NULL;
                if (!c->throttled || (u && u->tokens < 1 && u->lim.v[UKEY_MAX_REQUESTS]))
                        continue;
                struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
                if (epoll_ctl(m->epfd, EPOLL_CTL_ADD, c->fd, &ev) == 0 || errno == EEXIST)
                        c->throttled = false;
        }
        users_pool(m);
        users_orphans_unstop(m, false);
        /* forget users with neither connections nor clients */
        for (UserState **p = &m->users; *p;) {
                UserState *u = *p;
                MMClient *lists[] = POOL_LISTS(m);
                bool used = false;
                for (Conn *c = m->conns; c && !used; c = c->next)
                        used = c->uid == u->uid;
                /* a forked child not attached yet, or a store being
                 * adopted, holds pool bytes too */
                for (size_t i = 0; i < ELEMENTSOF(lists) && !used; i++)
                        for (MMClient *mm = lists[i]; mm && !used; mm = mm->next)
                                used = mm->uid == u->uid;
                if (used) {
                        p = &u->next;
                        continue;
                }
                *p = u->next;
                free(u);
        }
}

void users_apply(Manager *m) {
        for (UserState *u = m->users; u; u = u->next)
                config_user_limits(&m->conf.users, u->uid, &u->lim);
        for (MMClient *mm = m->mms; mm; mm = mm->next) {
                mm->user_limit = users_default_limit(m, mm->uid);
                atomic_store_explicit(&mm->orphans_max, users_orphans_max(m, mm->uid), memory_order_relaxed);
        }
        for (MMClient *mm = manager_orphans(m); mm; mm = mm->next)
                atomic_store_explicit(&mm->orphans_max, users_orphans_max(m, mm->uid), memory_order_relaxed);
        users_pool(m);
}

void users_free(Manager *m) {
        while (m->users) {
                UserState *u = m->users;
                m->users = u->next;
                free(u);
        }
}
