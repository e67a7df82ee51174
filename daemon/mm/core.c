/*
 * core.c: what the layers below the manager share (core.h): the way fork
 * children go up to the manager, and the pool's bound.
 */
#include <stdatomic.h>

#include "core.h"
#include "log.h"
#include "mmclient.h"
#include "mpsc.h"
#include "pool.h"
#include "util.h"

__thread int core_fault_idx = -1;

/* ---- fork children on their way to the manager (core.h) ---- */

MPSC_LIST(orphan_list, MMClient, next)

void core_adopt_orphan(Core *core, MMClient *child) {
        child->fork_paused_at = now_ns();
        orphan_list_push(&core->orphans_new, child);
}

MMClient *core_take_orphans(Core *core) {
        return orphan_list_take(&core->orphans_new);
}

uint32_t core_orphans_add(Core *core, uid_t uid, int delta) {
        uint32_t n = 0;
        unsigned i, free_i = CORE_ORPHAN_USERS;

        pthread_mutex_lock(&core->orphan_lock);
        for (i = 0; i < CORE_ORPHAN_USERS; i++) {
                if (core->orphan_users[i].n && core->orphan_users[i].uid == uid)
                        break;
                if (!core->orphan_users[i].n && free_i == CORE_ORPHAN_USERS)
                        free_i = i;
        }
        if (i == CORE_ORPHAN_USERS && delta > 0 && free_i < CORE_ORPHAN_USERS) {
                i = free_i;
                core->orphan_users[i].uid = uid;
        }
        if (i < CORE_ORPHAN_USERS) {
                if (delta < 0 && core->orphan_users[i].n < (uint32_t)-delta)
                        core->orphan_users[i].n = 0;
                else
                        core->orphan_users[i].n += (uint32_t)delta;
                n = core->orphan_users[i].n;
        }
        pthread_mutex_unlock(&core->orphan_lock);
        return n;
}

/* ---- the pool bound ---- */

bool core_pool_accepts(Core *core) {
        uint64_t bound = atomic_load_explicit(&core->pool_bound, memory_order_relaxed);
        if (bound == 0)
                return true;
        PoolStats ps;
        pool_shared_stats(core->pools, &ps);
        bool full = atomic_load_explicit(&core->pool_full, memory_order_relaxed);
        if (!full && ps.pool_bytes >= bound) {
                if (!atomic_exchange_explicit(&core->pool_full, true, memory_order_relaxed)) {
                        atomic_fetch_add_explicit(&core->pool_full_events, 1, memory_order_relaxed);
                        log_info("pool at its bound (%llu bytes): eviction stops", (unsigned long long)bound);
                }
                return false;
        }
        if (full && ps.pool_bytes < atomic_load_explicit(&core->pool_resume, memory_order_relaxed)) {
                if (atomic_exchange_explicit(&core->pool_full, false, memory_order_relaxed))
                        log_info("pool under %llu bytes again: eviction resumes",
                                 (unsigned long long)atomic_load_explicit(&core->pool_resume, memory_order_relaxed));
                return true;
        }
        return !full;
}

bool core_pool_keeps(Core *core) {
        /* relaxed: hints, as in core_pool_accepts() */
        uint64_t resume = atomic_load_explicit(&core->pool_resume, memory_order_relaxed);
        if (atomic_load_explicit(&core->pool_bound, memory_order_relaxed) == 0)
                return true;
        PoolStats ps;
        pool_shared_stats(core->pools, &ps);
        return ps.pool_bytes < resume - resume / 5;
}

void core_pool_trim(Core *core, Pool *p) {
        pool_trim(p, now_ms(), core_pool_keeps(core));
}

bool core_pool_room(Core *core, uint64_t len) {
        /* relaxed: a bound set by the manager, read as a hint; the pool's
         * own counter is the one that matters, and a chunk made by the
         * allocation that passes this check is the overshoot */
        uint64_t bound = atomic_load_explicit(&core->pool_bound, memory_order_relaxed);
        if (bound == 0)
                return true;
        PoolStats ps;
        pool_shared_stats(core->pools, &ps);
        return ps.pool_bytes + len <= bound;
}
