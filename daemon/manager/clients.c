/*
 * clients.c: the life of a client address space in the manager.
 *
 * An MMClient is served (mm_serve(): an id, a fault thread watching its
 * uffd, the manager's list), linked to its user (users.c), detached when
 * its connection goes (mm_detach(): a live process gets its pages back
 * first, or, at a hand-over, keeps its store for the next daemon) and
 * retired (mm_retire()). Fork children no process has claimed yet are the
 * orphans (manager_orphans()). Manager thread only.
 */
#include <stdlib.h>
#include <string.h>

#include "evict.h"
#include "fault.h"
#include "log.h"
#include "manager-internal.h"
#include "mmjob.h"
#include "report.h"
#include "users.h"
#include "util.h"

#define RESTORE_DETACH 1 /* Work.status of the restore that ends a client */

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

void mm_link(Manager *m, MMClient *mm) {
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

/* Forget an address space: stop its fault thread reading it and drop the
 * manager's reference. Whoever else holds one finishes first. */
void mm_retire(Manager *m, MMClient *mm) {
        atomic_store_explicit(&mm->dead, true, memory_order_relaxed); /* a hint, relaxed (mmclient.h) */
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
        report_retire(m, mm);
        mmclient_unref(mm);
}

/* The connection of mm went away. A process that is still alive gets all
 * its pages back and its memory unregistered before we let go, so that it
 * keeps its data and never waits on a fault nobody serves. */
void mm_detach(Manager *m, MMClient *mm, Conn *c) {
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

void restore_done(Manager *m, Work *w) {
        if (w->status == RESTORE_DETACH) {
                /* the end of mm_detach(): every page is back, the
                 * registrations go (a job: the ioctls wait for the
                 * client's mmap lock), and unregister_all_done() */
                w->type = MW_JOB_UNREGISTER_ALL;
                mmjob_submit(&m->core, w);
                return;
        }
        evict_restore_done(&m->core, w);
}

void unregister_all_done(Manager *m, Work *w) {
        MMClient *mm = w->mm;
        /* nothing left for another daemon to adopt: the client,
         * reconnecting, attaches anew (release: after the restore and the
         * unregister; a reader only learns from it that there is nothing
         * to take, true whenever it sees it) */
        if (mm->store)
                atomic_store_explicit(&store_super(mm->store)->state, STORE_RELEASED, memory_order_release);
        mm->restores--;
        mm_retire(m, mm);
        work_free(w);
}

/* A new client address space of connection c starts being served: an id,
 * a fault thread watching its uffd, the manager's list. On failure mm is
 * let go (the client keeps its own uffd). */
int mm_serve(Manager *m, Conn *c, MMClient *mm) {
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

/* An orphan's address space is known by its uffd only, whose probe takes
 * its mmap lock, which the child may hold: a job (mmjob.h) asks, and
 * orphan_probe_done() hears. */
void tick_orphans(Manager *m) {
        for (MMClient *mm = manager_orphans(m); mm; mm = mm->next) {
                if (mmjob_busy(mm))
                        continue;
                Work *w = work_new(MW_JOB_ALIVE, mm);
                if (w)
                        mmjob_submit(&m->core, w);
        }
}

void orphan_probe_done(Manager *m, Work *w) {
        MMClient *mm = w->mm;

        for (MMClient **p = &m->orphans; w->status == 0 && *p; p = &(*p)->next)
                if (*p == mm) {
                        *p = mm->next;
                        /* the child exited without ever attaching */
                        users_orphan_gone(m, mm);
                        mm_link(m, mm);
                        mm_retire(m, mm);
                        break;
                }
        work_free(w);
}

/* ---- pool compaction ---- */

static uint64_t compact_rename(uint64_t v, PoolHandle nh) {
        return (v & 0xffffffffull) | (uint64_t)nh << 32; /* pe_handle()'s bits: state, length and flags stay */
}

typedef struct CompactCtx {
        MMClient *mm;
        uint64_t moved, busy;
} CompactCtx;

/* Does entry v name an object compaction may move, in a chunk it is
 * emptying? Only entries nobody owns: a STORED object (a stub of the
 * second tier too), or a kept copy of one. A STORED|WB one is being read
 * by the tier's writer, a CLEAN copy of a SAME page holds a fill value,
 * LOADING belongs to a fault thread, MOVING and STAGED name slots. */
static bool compact_movable(MMClient *mm, uint64_t v) {
        if (!(pe_state(v) == PE_STORED && !(v & PE_MARKS)) && !(pe_state(v) == PE_CLEAN && !(v & PE_CLEAN_SAME)))
                return false;
        if (v & PE_SHARED)
                return false; /* in its user's shared store, not in this pool */
        return pool_compact_source(mm->pool, pe_handle(v));
}

static int compact_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        CompactCtx *c = ud;
        MMClient *mm = c->mm;
        /* acquire: the object's bytes, written before the entry named it */
        uint64_t v = atomic_load_explicit(e, memory_order_acquire);
        (void)addr;

        if (!compact_movable(mm, v))
                return 0;
        /* Under serve_lock, trylocked as the manager always does: an event
         * handler holds it throughout, and an mremap's handler writes each
         * entry at its new place before it clears the old one, so that for
         * a moment two entries name the object (events.c); a move of
         * either then would leave the other naming a released slot. A
         * fault thread that finds it taken sets kick and goes on; we ask
         * for its read once we let go (as mm_sync_now()). */
        if (pthread_mutex_trylock(&mm->serve_lock) != 0) {
                c->busy++;
                return 0;
        }
        /* again, as it is now: the same test as above, whatever changed */
        v = atomic_load_explicit(e, memory_order_acquire);
        int r = compact_movable(mm, v) ? pool_compact_move(mm->pool, e, v, pe_handle(v), compact_rename) : 0;
        pthread_mutex_unlock(&mm->serve_lock);
        /* seq_cst: the load after the unlock in events.c service()'s handshake */
        if (atomic_load_explicit(&mm->kick, memory_order_seq_cst) && fault_post_mm(mm->ft, FW_KICK, mm) < 0)
                log_error("pid %d: cannot wake a fault thread (out of memory)", (int)mmclient_pid(mm));
        if (r > 0)
                c->moved++;
        return 0; /* -ENOSPC ends only that class: go on for the others */
}

/* Compact the client's pool (pool.h, pool_compact_begin()): at most
 * max_move bytes of objects moved, and only if min_gain bytes of chunks
 * or more can be freed that way. Walks the whole page index. Returns the
 * bytes of pool memory given back; *ret_moved the objects moved. */
static uint64_t mm_compact(MMClient *mm, uint64_t max_move, uint64_t min_gain, uint64_t *ret_moved) {
        CompactCtx c = { .mm = mm };

        *ret_moved = 0;
        if (!mm->pool || !mm->index || !mm->ft)
                return 0;
        uint64_t gain = pool_compact_begin(mm->pool, max_move, min_gain);
        if (gain == 0)
                return 0;
        (void)pindex_walk(mm->index, 0, PINDEX_MAX_ADDR, compact_cb, &c);
        *ret_moved = c.moved;
        return pool_compact_end(mm->pool);
}

/* A compaction pass moves at most this much of a client's objects (about
 * a millisecond of copying), and runs only if it frees this much at least */
#define COMPACT_MAX_MOVE (4ull << 20)
#define COMPACT_MIN_GAIN (64ull << 10)

void manager_pool_compact(Manager *m) {
        double pct = m->reclaim.tun.pool_compact;

        if (pct <= 0)
                return;
        for (MMClient *mm = m->mms; mm; mm = mm->next) {
                /* a store a fork child may still restore from stays as it
                 * was at the fork; the manager itself answers FORK_PREPARE,
                 * so no fork can be announced during the pass */
                if (!mm->pool || atomic_load_explicit(&mm->dead, memory_order_relaxed) || mm->fork_paused ||
                    atomic_load_explicit(&mm->fork_announced, memory_order_acquire) ||
                    atomic_load_explicit(&mm->fork_hold, memory_order_acquire))
                        continue;
                /* a small pool cannot give back enough to be worth the
                 * plan's 256 class locks, every second, for every client */
                if (pool_bytes(mm->pool) < 4 * COMPACT_MIN_GAIN)
                        continue;
                uint64_t min_gain = MAX((uint64_t)((double)pool_bytes(mm->pool) * pct / 100.0), COMPACT_MIN_GAIN);
                uint64_t moved = 0, freed = mm_compact(mm, COMPACT_MAX_MOVE, min_gain, &moved);
                if (freed)
                        log_debug("pid %d: pool compacted: %llu objects moved, %llu KiB of chunks given back",
                                  (int)mmclient_pid(mm), (unsigned long long)moved,
                                  (unsigned long long)(freed >> 10));
        }
}

static void give_back(Manager *m, Pool *p, bool trim) {
        if (trim)
                core_pool_trim(&m->core, p);
        else
                pool_reclaim(p);
}

static void pools_give_back(Manager *m, bool trim) {
        for (MMClient *mm = m->mms; mm; mm = mm->next)
                if (mm->pool)
                        give_back(m, mm->pool, trim);
        for (MMClient *mm = manager_orphans(m); mm; mm = mm->next)
                if (mm->pool)
                        give_back(m, mm->pool, trim);
        for (size_t i = 0; i < m->ndedups; i++)
                give_back(m, dedup_pool(m->dedups[i]), trim);
}

void manager_pool_reclaim(Manager *m) {
        pools_give_back(m, false);
}

void manager_pool_trim(Manager *m) {
        pools_give_back(m, true);
}
