/*
 * evict.c: how pages leave a client.
 *
 * A pageout request becomes batches of up to ZSWAP_BATCH_MAX pages. Each
 * batch owns one staging lane (LANE_SLOTS slots of the client's staging
 * area) and goes through:
 *
 *   plan      (manager) entries EMPTY -> MOVING(slot), pages found present
 *             in /proc/PID/pagemap; MOVE sent to the client's agent
 *   move      (agent)   UFFDIO_MOVE page -> slot: atomic, the page leaves the
 *             client's page table in one step, so no write can be lost
 *   stage     (manager) MOVE_DONE: MOVING -> STAGED or back to EMPTY
 *   compress  (worker)  one read of the lane (/proc/PID/mem), then per page:
 *             STAGED -> SAME / STORED, or handed back to the fault thread
 *             to be reinstalled (incompressible, pool full)
 *   drain     (manager) wait until no fault thread is reading a slot
 *   release   (agent)   MADV_DONTNEED of the lane: the memory is freed
 *
 * Every entry transition is a compare-and-swap from the value this stage
 * set; a fault thread that took a page over in between (LOADING) or an
 * event that dropped it (EMPTY) makes the CAS fail, and the stage lets the
 * page go. docs/page-lifecycle.md lists each race.
 *
 * This file is the manager's side: the queue of requests, planning, the
 * lanes' state machine and the agent's answers. The compress stage is the
 * workers' (workers.c); evict-internal.h is what the two share.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "age.h"
#include "inject.h"
#include "evict-internal.h"
#include "evict.h"
#include "fault.h"
#include "log.h"
#include "memread.h"
#include "util.h"
#include "trace.h"
#include "mmjob.h"

/* ---- manager side ---- */

static void op_finish(Core *core, MMClient *mm, PageoutOp *op) {
        for (PageoutOp **p = &mm->ops; *p; p = &(*p)->next) {
                if (*p != op)
                        continue;
                *p = op->next;
                if (!*p)
                        mm->ops_tail = p;
                break;
        }
        if (mm->rc.op == op) {
                mm->rc.op = NULL;
                if (mm->rc.last_op == op) {
                        /* it took all it was given */
                        mm->rc.pressure_left -= MIN(mm->rc.pressure_left, mm->rc.last_want - op->want);
                        mm->rc.last_op = NULL;
                }
                log_debug("pid %d: policy eviction done: %llu pages", (int)mmclient_pid(mm),
                          (unsigned long long)op->evicted);
        }
        if (op->unregister)
                mm->unregisters--;
        evict_op_drop(core, op);
}

void evict_group_done(Core *core, PageoutGroup *g, uint64_t evicted) {
        g->evicted += evicted;
        if (--g->ops > 0)
                return;
        if (g->conn)
                core->ops->reply(g->conn, g->id, 0, (int64_t)g->evicted);
        free(g);
}

void evict_op_drop(Core *core, PageoutOp *op) {
        if (op->group)
                evict_group_done(core, op->group, op->evicted);
        else if (op->conn && op->id)
                core->ops->reply(op->conn, op->id, 0, (int64_t)op->evicted);
        free(op->pm);
        free(op);
}

static int queue_op(Core *core, MMClient *mm, PageoutGroup *g, Conn *c, uint32_t id, uint64_t start, uint64_t end,
                    bool unregister, bool restore) {
        if (!unregister) {
                /* a client whose agent never answers holds every request
                 * queued after its MOVE: bounded, not the manager's memory
                 * at the rate of max_requests for as long as it likes */
                unsigned n = 0;
                for (PageoutOp *o = mm->ops; o && n < EVICT_OPS_MAX; o = o->next)
                        n += !o->unregister && !o->reclaim;
                if (n >= EVICT_OPS_MAX) {
                        if (!mm->ops_full_warned)
                                log_warn("pid %d: %u requests wait for its pageouts already: more are refused "
                                         "(EBUSY)", (int)mmclient_pid(mm), n);
                        mm->ops_full_warned = true;
                        return -EBUSY;
                }
                mm->ops_full_warned = false;
        }
        PageoutOp *op = INJECT_ALLOC(calloc(1, sizeof(*op)));
        if (!op)
                return -ENOMEM;
        if (unregister) {
                /* the range leaves the daemon's list only once its op exists:
                 * an unregister refused for memory changes nothing */
                int r = mmclient_region_remove(mm, start, end, true);
                if (r < 0) {
                        free(op);
                        return r;
                }
        }
        op->group = g;
        if (g)
                g->ops++;
        op->conn = c;
        op->id = id;
        op->start = op->cursor = start;
        op->end = end;
        op->unregister = unregister;
        op->restore = unregister || restore;
        if (restore && !unregister)
                op->evicted = mmclient_held_pages(mm); /* the answer: what was held */
        if (unregister)
                mm->unregisters++;
        *mm->ops_tail = op;
        mm->ops_tail = &op->next;
        evict_pump(core, mm);
        return 0;
}

int evict_queue(Core *core, MMClient *mm, Conn *c, uint32_t id, uint64_t start, uint64_t end, bool unregister) {
        return queue_op(core, mm, NULL, c, id, start, end, unregister, false);
}

int evict_queue_group(Core *core, MMClient *mm, PageoutGroup *g, uint64_t start, uint64_t end) {
        return queue_op(core, mm, g, NULL, 0, start, end, false, false);
}

int evict_queue_pagein(Core *core, MMClient *mm, PageoutGroup *g, uint64_t start, uint64_t end) {
        return queue_op(core, mm, g, NULL, 0, start, end, false, true);
}

PageoutOp *evict_queue_reclaim(Core *core, MMClient *mm) {
        PageoutOp *op = INJECT_ALLOC(calloc(1, sizeof(*op)));
        if (!op)
                return NULL;
        /* the sweep starts where the hand is and goes round once */
        op->reclaim = true;
        op->start = op->cursor = mm->rc.hand;
        op->end = PINDEX_MAX_ADDR;
        *mm->ops_tail = op;
        mm->ops_tail = &op->next;
        mm->rc.op = op;
        return op;
}

uint64_t evict_moving_pages(const MMClient *mm) {
        uint64_t n = 0;
        for (unsigned i = 0; i < mm->nlanes; i++)
                if (mm->lanes[i].state == LANE_MOVING)
                        n += mm->lanes[i].npages;
        return n;
}

bool evict_settled(MMClient *mm) {
        for (unsigned i = 0; i < mm->nlanes; i++)
                if (mm->lanes[i].state == LANE_MOVING || mm->lanes[i].state == LANE_COMPRESSING)
                        return false;
        return true;
}

/* A page handed back (hand_back(), workers.c) pins its lane until its
 * fault thread has put it back, and the lane stays DRAINING until then.
 * seq_cst: as lane_try_release()'s load. */
bool evict_quiet(MMClient *mm) {
        if (!evict_settled(mm))
                return false;
        for (unsigned i = 0; i < mm->nlanes; i++)
                if (mm->lanes[i].state == LANE_DRAINING &&
                    atomic_load_explicit(&mm->lanes[i].users, memory_order_seq_cst) != 0)
                        return false;
        return true;
}


/* Every change of a lane's state goes through here: mm->lanes_moving
 * shows the fault threads which lanes the agent may be moving pages into
 * (events.c, revoke_moves()). The bit is set before the MOVE is sent
 * (release: the message carries it to the agent, whose `moving` a fault
 * thread sees before it looks here); a bit cleared late only costs a read. */
static void lane_set_state(MMClient *mm, Lane *lane, LaneState state) {
        uint32_t bit = 1u << (lane - mm->lanes);

        if (state == LANE_MOVING)
                atomic_fetch_or_explicit(&mm->lanes_moving, bit, memory_order_release);
        else if (lane->state == LANE_MOVING)
                atomic_fetch_and_explicit(&mm->lanes_moving, ~bit, memory_order_relaxed);
        lane->state = state;
}

/*
 * Which pages of a lane did the agent's moves really take? The agent's
 * report is not enough: on this kernel (6.18) move_pages() never clears
 * an internal -EAGAIN once it had one, so a batch of PTEs it then moves is
 * neither counted nor stepped over, and the next step fails with EEXIST on
 * the now-populated slot: pages moved, reported left. Trusting "left in
 * place" stranded them in their slot, the lane's release freed them, and
 * the next fault served zeros (the torture test found it).
 *
 * So the page tables decide: a page was moved if its slot now maps
 * anything (a page, a swap or migration entry) and its source address no
 * longer does. A slot starts empty (the lane was released with
 * MADV_DONTNEED); only a move, or a read of an empty slot (which maps the
 * zero page), fills it, and such a read only happens after the entry left
 * MOVING (a poison, a fault-path read), when the CAS below fails anyway.
 * No exclusive-mapping test: a moved page can show as shared (a fork the
 * library did not announce, a huge page), and "not moved" is the direction
 * that loses data. If pagemap cannot be read, every page counts as moved
 * for the same reason: a page wrongly taken as moved keeps a stale entry
 * while the program still has it; one wrongly left is lost.
 *
 * The reads take the client's mmap lock for reading, which the client can
 * make wait as long as it likes (a writer of its own queued behind a FUSE
 * read of its own): an mm job does them (MW_JOB_MOVED), on copies of the
 * lane's addresses, and the lane stays MOVING (checking) until it is back
 * (moved_done()).
 */
static bool pm_holds_page(uint64_t pm) {
        return !(pm & PM_FILE) && (pm & (PM_PRESENT | PM_SWAP));
}

/* What a MOVE's check reads (MW_JOB_MOVED): the lane's pages and slots,
 * copied by the manager; truth: bit i, page i moved. */
typedef struct MovedCheck {
        MMJobCall call;     /* first: moved_check() */
        uint32_t lane, gen; /* which lane, as of which plan (Lane.gen) */
        uint64_t slot_addr; /* the lane's first slot */
        uint32_t npages;
        uint64_t addrs[LANE_SLOTS];
        uint64_t truth[LANE_SLOTS / 64];
} MovedCheck;

/* An mm-job thread's (MW_JOB_MOVED): fill c->truth from mm's page tables. */
static void moved_check(MMClient *mm, MMJobCall *call) {
        MovedCheck *c = (MovedCheck *)call;
        uint64_t slot_pm[LANE_SLOTS], src_pm[LANE_SLOTS];
        uint32_t n = MIN(c->npages, (uint32_t)LANE_SLOTS);

        memset(c->truth, 0xff, sizeof(c->truth));
        if (mmclient_pagemap(mm, c->slot_addr, n, slot_pm) < 0)
                return;
        for (uint32_t i = 0, j; i < n; i = j) {
                for (j = i + 1; j < n && c->addrs[j] == c->addrs[j - 1] + ZSWAP_PAGE_SIZE; j++)
                        ;
                if (mmclient_pagemap(mm, c->addrs[i], j - i, src_pm + i) < 0)
                        return;
        }
        for (uint32_t i = 0; i < n; i++)
                if (!pm_holds_page(slot_pm[i]) || pm_holds_page(src_pm[i]))
                        c->truth[i / 64] &= ~((uint64_t)1 << (i % 64));
}

typedef struct Plan {
        ZMsgMove msg;
        Lane *lane;
        uint32_t slot0;
        bool new_run; /* the next page starts a run: UFFDIO_MOVE fails (EINVAL)
                       * on a run that spans two vmas, and separately
                       * registered regions are often separate vmas */
        bool arming;  /* planning stopped at a job: a region being armed, a
                       * pagemap read */
} Plan;

/* Mark one page MOVING and add it to the plan; false if the plan is full.
 * pm is the page's pagemap word. */
static bool plan_add(MMClient *mm, Plan *p, uint64_t addr, uint64_t pm) {
        Lane *lane = p->lane;
        ZMsgMove *msg = &p->msg;
        bool extend = !p->new_run && msg->nruns > 0 && msg->runs[msg->nruns - 1].addr +
                                                (uint64_t)msg->runs[msg->nruns - 1].npages * ZSWAP_PAGE_SIZE == addr;

        if (!extend && msg->nruns == ZSWAP_MOVE_RUNS_MAX)
                return false;
        _Atomic uint64_t *e = pindex_entry(mm->index, addr, true);
        if (!e)
                return true; /* no memory for the index: leave the page resident */
        /* only a plain EMPTY entry, or a CLEAN one whose copy the batch
         * takes over: REMOVED is a frame a MADV_DONTNEED is about to zap
         * (fault.c, tombstone_mapped), never to be moved */
        /* acquire (the load, the CAS): a CLEAN entry's copy becomes the
         * batch's, and the worker that reads it (keep_matches()) gets it
         * from here through Evictor.lock. The CAS decides; its release is
         * not argued weaker */
        uint64_t expected = atomic_load_explicit(e, memory_order_acquire);
        if (expected != 0 && pe_state(expected) != PE_CLEAN)
                return true;
        if (!atomic_compare_exchange_strong_explicit(e, &expected, pe_make_slot(PE_MOVING, p->slot0 + lane->npages),
                                                     memory_order_acq_rel, memory_order_relaxed))
                return true;
        lane->keep[lane->npages] = expected; /* 0 unless CLEAN */
        uint64_t bit = (uint64_t)1 << (lane->npages % 64);
        if (pm & PM_EXCLUSIVE)
                lane->cow[lane->npages / 64] &= ~bit;
        else
                lane->cow[lane->npages / 64] |= bit;
        TRACE(TR_PLAN, addr, p->slot0 + lane->npages, pm);
        if (extend)
                msg->runs[msg->nruns - 1].npages++;
        else
                msg->runs[msg->nruns++] = (ZMoveRun){ .addr = addr, .npages = 1 };
        p->new_run = false;
        lane->addrs[lane->npages++] = addr;
        return true;
}

/* Pages of address space one planning step may look at: a PAGEOUT of a
 * huge, mostly empty range must not hold the manager thread for seconds. */
#define PLAN_SCAN_BUDGET (64 * LANE_SLOTS)

/* Has op pages left to look at? A policy sweep that reached the top of
 * the address space goes on from 0 up to where it started. */
static bool op_has_more(PageoutOp *op) {
        if (op->reclaim) {
                if (op->want == 0 && !op->idle_before)
                        return false;
                if (op->cursor >= op->end && !op->wrapped && op->start > 0) {
                        op->wrapped = true;
                        op->cursor = 0;
                        op->end = op->start;
                }
        }
        return op->cursor < op->end;
}

/*
 * Would the policy eviction op take the present page at addr? Its last use
 * is the stamp a fault or a write scan left (reclaim.c), or else the
 * registration of its region. Idle: used before op->idle_before. By the
 * clock (limits, pressure): a page with a hot count spends one instead of
 * being taken, the second chance of CLOCK; only refaults and writes give
 * counts, so a page the daemon saw nothing of goes first.
 */
static bool reclaim_takes(PageoutOp *op, PageMeta *meta, uint64_t addr, uint32_t region_stamp) {
        unsigned i = pmeta_idx(addr);
        /* relaxed: ageing hints (pindex.h); a stale or lost one only
         * changes which page goes first */
        uint32_t stamp = meta ? atomic_load_explicit(&meta->stamp[i], memory_order_relaxed) : 0;

        if (stamp == 0)
                stamp = region_stamp;
        if (op->idle_before && stamp < op->idle_before)
                return true;
        if (op->want == 0)
                return false;
        uint8_t hot = meta ? atomic_load_explicit(&meta->hot[i], memory_order_relaxed) : 0;
        if (hot) {
                atomic_store_explicit(&meta->hot[i], (uint8_t)(hot - 1), memory_order_relaxed);
                return false;
        }
        return true;
}

/* Pagemap words one read of the plan's takes at most (op.pm): 256 KiB */
#define PLAN_PM_PAGES PLAN_SCAN_BUDGET
/* ... and for how long they stand: a page that came or went since is a
 * race the plan has anyway (plan_verify(), moved_check()) */
#define PLAN_PM_FRESH_NS (200 * 1000000ull)

/*
 * The pagemap words of n pages at s for op's plan, or NULL: a read is on
 * its way (its return pumps again), or op->pm_failed. The read is a job
 * (mmjob.h), never the manager's own pread(): pagemap_read() takes the
 * client's mmap lock for reading, and a client that holds it for reading
 * (a FUSE read of its own) while another of its threads waits to take it
 * for writing (an mmap()) holds every reader after that writer for as long
 * as it likes. One read covers what the plan goes on to, up to
 * PLAN_PM_PAGES.
 */
static const uint64_t *plan_pagemap(MMClient *mm, PageoutOp *op, uint64_t s, size_t n) {
        uint64_t e = s + n * ZSWAP_PAGE_SIZE;

        if (op->pm && s >= op->pm_start && e <= op->pm_end && now_ns() - op->pm_ns < PLAN_PM_FRESH_NS)
                return op->pm + ((s - op->pm_start) >> ZSWAP_PAGE_SHIFT);
        if (op->pm_reading || op->pm_failed)
                return NULL;
        uint64_t end = s + MAX((uint64_t)n, MIN((op->end - s) >> ZSWAP_PAGE_SHIFT, (uint64_t)PLAN_PM_PAGES)) *
                                   ZSWAP_PAGE_SIZE;
        Work *w = work_new(MW_JOB_PAGEMAP, mm);
        void *words = w ? malloc((size_t)((end - s) >> ZSWAP_PAGE_SHIFT) * sizeof(uint64_t)) : NULL;
        if (!words) {
                work_free(w);
                mm->repump = true; /* without memory now: again soon */
                return NULL;
        }
        w->a = s;
        w->b = end;
        w->v = (uintptr_t)op;
        w->data = words;
        op->pm_reading = true;
        mmjob_submit(mm->core, w);
        return NULL;
}

/* A plan's read is back (MW_JOB_PAGEMAP). */
static void plan_pagemap_done(MMClient *mm, Work *w) {
        for (PageoutOp *op = mm->ops; op; op = op->next) {
                if ((uintptr_t)op != w->v || !op->pm_reading)
                        continue;
                op->pm_reading = false;
                if (w->status < 0) {
                        op->pm_failed = true;
                        break;
                }
                free(op->pm);
                op->pm = w->data;
                w->data = NULL;
                op->pm_start = w->a;
                op->pm_end = w->b;
                op->pm_ns = now_ns();
                break;
        }
        mm->repump = true;
}

/* Fill a batch from op; the op's cursor moves past what was looked at. */
static void plan_batch(MMClient *mm, PageoutOp *op, Plan *p, unsigned *budget) {
        uint64_t now = op->reclaim ? now_ms() : 0;

        size_t limit = MIN(mm->core->cfg.batch_pages, (unsigned)LANE_SLOTS);

        while (p->lane->npages < limit && op_has_more(op) && *budget > 0) {
                uint64_t s = op->cursor, e = op->end;
                uint32_t region_stamp = 0;
                bool armed = false;
                if (!mmclient_region_clip_stamp(mm, &s, &e, &region_stamp, &armed)) {
                        op->cursor = op->end;
                        continue;
                }
                if (!armed && mm->arm_failed == s + 1) {
                        /* it could not be registered for missing faults:
                         * none of its pages may leave (this pass) */
                        mm->arm_failed = 0;
                        op->cursor = e;
                        continue;
                }
                if (!armed) {
                        /* registered for missing faults first, by a job
                         * (mmjob.h); the plan goes on once it is back
                         * (evict_job_done()) */
                        Work *w = work_new(MW_JOB_ARM, mm);
                        if (w) {
                                w->a = s;
                                mmjob_submit(mm->core, w);
                        }
                        p->arming = true;
                        break;
                }
                p->new_run = true; /* a region of its own */
                size_t n = MIN((e - s) >> ZSWAP_PAGE_SHIFT, limit - p->lane->npages);
                PageMeta *meta = NULL;
                if (op->reclaim) {
                        /* one zone at a time: its reclaim data and back-off */
                        uint64_t zone_end = (s | ((uint64_t)PMETA_PAGES * ZSWAP_PAGE_SIZE - 1)) + 1;
                        n = MIN(n, (size_t)((zone_end - s) >> ZSWAP_PAGE_SHIFT));
                        meta = pindex_meta(mm->index, s, false);
                        if (meta && op->spare_thrash && meta->backoff_until_ms > now) {
                                op->cursor = MIN(zone_end, e);
                                continue;
                        }
                }
                n = MIN(n, (size_t)*budget);
                const uint64_t *pm = plan_pagemap(mm, op, s, n);
                if (!pm && op->pm_failed) {
                        /* as a pagemap the client took away (it exited) */
                        op->pm_failed = false;
                        op->cursor = op->end;
                        break;
                }
                if (!pm) {
                        p->arming = true; /* waits for the read */
                        break;
                }
                *budget -= (unsigned)n;
                size_t i;
                for (i = 0; i < n; i++) {
                        uint64_t addr = s + i * ZSWAP_PAGE_SIZE;
                        /* present, private, not in swap: the only pages worth moving */
                        if ((pm[i] & (PM_PRESENT | PM_FILE)) != PM_PRESENT)
                                continue;
                        /* the zero page (zero-fill-around): nothing to take */
                        if (mm->core && mm->core->zero_pfn && PM_PFN(pm[i]) == mm->core->zero_pfn)
                                continue;
                        if (op->reclaim) {
                                if (op->want == 0 && !op->idle_before)
                                        break;
                                /* relaxed: a look to skip a page; plan_add()'s CAS decides */
                                _Atomic uint64_t *ent = meta ? pindex_entry(mm->index, addr, false) : NULL;
                                uint64_t v = ent ? atomic_load_explicit(ent, memory_order_relaxed) : 0;
                                if (v != 0 && pe_state(v) != PE_CLEAN)
                                        continue; /* incompressible, being evicted, dying */
                                if (!reclaim_takes(op, meta, addr, region_stamp))
                                        continue;
                        }
                        uint32_t before = p->lane->npages;
                        if (!plan_add(mm, p, addr, pm[i]))
                                break;
                        if (op->reclaim && p->lane->npages > before && op->want > 0)
                                op->want--;
                }
                op->cursor = s + i * ZSWAP_PAGE_SIZE;
                if (i < n)
                        break;
        }
        if (op->reclaim)
                mm->rc.hand = op->cursor;
}

/*
 * An munmap handled between our pagemap read and our CAS leaves a page
 * marked MOVING outside every region, where a new mapping may appear whose
 * page the agent would then move out (the fault thread removes the region
 * before it walks the entries, so one of us sees the other). The MOVE is
 * not sent yet: such a batch is given up whole, every entry back, and its
 * pages are planned again later, those still managed.
 */
static void plan_verify(MMClient *mm, Plan *p) {
        uint32_t i;

        pthread_mutex_lock(&mm->regions_lock);
        for (i = 0; i < p->lane->npages && mmclient_region_has_locked(mm, p->lane->addrs[i]); i++)
                ;
        pthread_mutex_unlock(&mm->regions_lock);
        if (i == p->lane->npages)
                return;
        for (i = 0; i < p->lane->npages; i++) {
                uint64_t v = pe_make_slot(PE_MOVING, p->slot0 + i), keep = p->lane->keep[i];
                _Atomic uint64_t *e = pindex_entry(mm->index, p->lane->addrs[i], false);
                /* back to what it was (EMPTY, or CLEAN with its copy). A
                 * fault thread that took it meanwhile (LOADING) finds the
                 * slot empty: no move comes, the page is where it was, and
                 * the copy is of no use. acq_rel, not argued weaker: the
                 * entry gets back the copy it published itself */
                p->lane->keep[i] = 0;
                if (!e || !atomic_compare_exchange_strong_explicit(e, &v, keep, memory_order_acq_rel,
                                                                   memory_order_relaxed)) {
                        if (keep)
                                mmclient_release_payload(mm, keep);
                }
        }
        p->lane->npages = 0;
        p->msg.nruns = 0;
}

static int lane_send_move(Core *core, MMClient *mm, unsigned li, Plan *p) {
        zmsg_init(&p->msg.hdr, ZMSG_MOVE, li, zmsg_move_size(p->msg.nruns));
        p->msg.slot0 = p->slot0;
        p->msg.npages = p->lane->npages;
        return core->ops->send(mm->conn, &p->msg, zmsg_move_size(p->msg.nruns));
}

/* The job that unregisters an UNREGISTER's range; without memory for it,
 * the next pump (each tick) tries again. */
static void op_unregister(Core *core, MMClient *mm, PageoutOp *op) {
        Work *w = work_new(MW_JOB_UNREGISTER, mm);
        if (!w)
                return;
        w->a = op->start;
        w->b = op->end;
        w->v = (uintptr_t)op;
        op->unregistering = true;
        mmjob_submit(core, w);
}

/*
 * Start one step of the client's queued requests: the first request that
 * still has pages to plan gets a lane. A request whose last batches are in
 * flight does not hold up the ones behind it (a program whose threads page
 * out in parallel gets its requests served in parallel, up to the lanes it
 * has), but nothing passes an UNREGISTER: it waits for everything before it
 * and everything after it waits for it.
 */
static bool pump_one(Core *core, MMClient *mm, unsigned *budget) {
        PageoutOp *op;
        unsigned li;

        /* a read of this client's memory waited past its bound (memread.h)
         * and its user's reads still count (memread_stuck()): it is not
         * evicted meanwhile; what is asked of it ends with what was
         * evicted so far. relaxed: a hint (mmclient.h, read_stuck) */
        bool stuck = atomic_load_explicit(&mm->read_stuck, memory_order_relaxed) && memread_stuck(mm->uid) > 0;
        for (op = mm->ops; op; op = op->next) {
                if (stuck && !op->restore) {
                        op->cursor = op->end;
                        op->want = 0;
                        op->wrapped = true;
                }
                if (op->restore) {
                        /* an unregister (or pagein) waits until nothing of the
                         * client is in flight, then the fault thread puts the
                         * pages back */
                        if (op == mm->ops && op->restored && !op->unregistering)
                                /* every page of the range is back: the
                                 * kernel stops sending us its faults,
                                 * and then the op ends (evict_job_done()) */
                                op_unregister(core, mm, op);
                        if (op == mm->ops && !op->posted && evict_settled(mm)) {
                                Work *w = work_new(FW_RESTORE, mm);
                                if (!w)
                                        return false;
                                w->a = op->start;
                                w->b = op->end;
                                w->id = op->id;
                                op->posted = true;
                                fault_thread_post(mm->ft, w);
                        }
                        return false;
                }
                if (op_has_more(op))
                        break;
                if (op->inflight == 0) {
                        op_finish(core, mm, op);
                        return true;
                }
        }
        if (!op)
                return false;
        /* acquire: pairs with the release (sync_swap, fault.c's
         * FW_SYNC_SWAP) or acq_rel (fork_hold's end) of the fault thread
         * that clears them: what it did before is seen by the plan */
        if (mm->fork_paused || atomic_load_explicit(&mm->fork_hold, memory_order_acquire) || !mm->conn ||
            mm->nlanes == 0 || atomic_load_explicit(&mm->sync_swap, memory_order_acquire))
                return false;
        /* a call of ours waits for the mmap lock of the client or of
         * another of its user's (mmjob.h): the plan's pagemap read would
         * wait behind it */
        if (mmjob_user_busy(mm))
                return false;
        for (li = 0; li < mm->nlanes && mm->lanes[li].state != LANE_FREE; li++)
                ;
        if (li == mm->nlanes)
                return false;

        Plan p = { .lane = &mm->lanes[li], .slot0 = li * LANE_SLOTS };
        p.lane->npages = 0;
        plan_batch(mm, op, &p, budget);
        plan_verify(mm, &p);
        if (p.lane->npages == 0 && p.arming)
                return false; /* the arming's return pumps again */
        if (p.lane->npages == 0) {
                if (*budget == 0) {
                        /* come back after the other clients had their turn */
                        mm->repump = true;
                        return false;
                }
                return true; /* the cursor moved; look again */
        }
        p.lane->op = op;
        p.lane->stored = 0;
        p.lane->gen++;
        p.lane->checking = p.lane->check_due = false;
        lane_set_state(mm, p.lane, LANE_MOVING);
        op->inflight++;
        if (lane_send_move(core, mm, li, &p) < 0) {
                core->ops->kill(mm->conn, "agent not reading its socket");
                return false;
        }
        return true;
}

void evict_pump(Core *core, MMClient *mm) {
        unsigned budget = PLAN_SCAN_BUDGET;

        mm->repump = false;
        /* dead: relaxed, a hint (mmclient.h) */
        while (!atomic_load_explicit(&mm->dead, memory_order_relaxed) && pump_one(core, mm, &budget))
                ;
        if (mm->fork_reply_id && evict_settled(mm) && mm->conn) {
                /* answered once the fault thread has also caught up (pages
                 * handed back to it, events): see requests.c range_request() */
                if (fault_sync_post(mm, ZMSG_FORK_PREPARE, mm->fork_reply_id, mm->fork_reply_serial, 0, 0) == 0)
                        mm->fork_reply_id = 0;
        }
}

static void lane_try_release(Core *core, MMClient *mm, unsigned li) {
        Lane *lane = &mm->lanes[li];
        ZMsgRelease msg;

        /* seq_cst pairs with the fault thread's increment before it reads a
         * slot: if we see 0 here, any later reader sees its entry changed.
         * The fence orders the entry CASes that ended the batch (worker,
         * seen through the inbox) before this load in the C11 model too. */
        atomic_thread_fence(memory_order_seq_cst);
        if (atomic_load_explicit(&lane->users, memory_order_seq_cst) != 0)
                return;
        if (!mm->conn) {
                lane_set_state(mm, lane, LANE_FREE);
                return;
        }
        zmsg_init(&msg.hdr, ZMSG_RELEASE, li, sizeof(msg));
        msg.slot0 = li * LANE_SLOTS;
        msg.nslots = LANE_SLOTS;
        lane_set_state(mm, lane, LANE_RELEASING);
        if (core->ops->send(mm->conn, &msg, sizeof(msg)) < 0)
                core->ops->kill(mm->conn, "agent not reading its socket");
}

static void lane_compressed(Core *core, MMClient *mm, unsigned li, uint64_t stored) {
        Lane *lane = &mm->lanes[li];

        if (lane->op)
                lane->op->evicted += stored;
        if (lane->op && lane->op->reclaim) /* a counter: relaxed */
                atomic_fetch_add_explicit(&mm->st.reclaim_evictions, stored, memory_order_relaxed);
        lane_set_state(mm, lane, LANE_DRAINING);
        lane_try_release(core, mm, li);
}

/* Hand a staged lane to the workers. Without memory for the job the lane
 * waits in COMPRESSING (faults still find every page in its slot) and
 * evict_tick() tries again: the pageout it belongs to must still end. */
static void lane_submit(Core *core, MMClient *mm, unsigned li) {
        Lane *lane = &mm->lanes[li];
        Work *w = work_new(JOB_COMPRESS, mm);

        lane_set_state(mm, lane, LANE_COMPRESSING);
        lane->compress_due = !w;
        if (!w)
                return;
        w->lane = li;
        evictor_submit(core->evictor, w);
}

/* The check of what lane li's MOVE moved goes to a job (the comment above
 * pm_holds_page()); without memory for it, evict_tick() tries again. */
static void lane_check(Core *core, MMClient *mm, unsigned li) {
        Lane *lane = &mm->lanes[li];
        Work *w = work_new(MW_JOB_MOVED, mm);
        MovedCheck *c = w ? malloc(sizeof(*c)) : NULL;

        lane->check_due = !c;
        if (!c) {
                work_free(w);
                return;
        }
        c->slot_addr = mmclient_slot_addr(mm, li * LANE_SLOTS);
        c->npages = lane->npages;
        memcpy(c->addrs, lane->addrs, lane->npages * sizeof(c->addrs[0]));
        c->call.fn = moved_check;
        c->lane = li;
        c->gen = lane->gen;
        w->data = c;
        mmjob_submit(core, w);
}

int evict_move_done(Core *core, MMClient *mm, uint32_t li, const ZMsgMoveDone *msg) {
        if (li >= mm->nlanes || mm->lanes[li].state != LANE_MOVING || mm->lanes[li].checking ||
            msg->npages != mm->lanes[li].npages)
                return -EPROTO;
        Lane *lane = &mm->lanes[li];
        memcpy(lane->reported, msg->moved, sizeof(lane->reported));
        lane->checking = true;
        lane_check(core, mm, li);
        return 0;
}

/* What lane li's MOVE moved is known (truth, bit i: page i): each entry
 * goes on from MOVING, and the lane to its workers. */
static void lane_moved(Core *core, MMClient *mm, unsigned li, const uint64_t *truth) {
        Lane *lane = &mm->lanes[li];
        unsigned staged = 0;

        lane->checking = false;
        const uint64_t *reported_bits = lane->reported;
        unsigned unreported = 0, phantom = 0; /* moved but reported left; reported moved but not */
        unsigned nmoved = 0;
        for (uint32_t i = 0; i < lane->npages; i++) {
                _Atomic uint64_t *e = pindex_entry(mm->index, lane->addrs[i], false);
                uint32_t slot = li * LANE_SLOTS + i;
                uint64_t v = pe_make_slot(PE_MOVING, slot), bit = (uint64_t)1 << (i % 64);
                bool reported = reported_bits[i / 64] & bit, moved = truth[i / 64] & bit;
                unreported += moved && !reported;
                phantom += reported && !moved;
                nmoved += moved;
                uint64_t keep = lane->keep[i];
                lane->keep[i] = 0;
                if (!e) {
                        if (keep)
                                mmclient_release_payload(mm, keep);
                        continue;
                }
                /* relaxed: only recorded (trace.h); the CAS below decides */
                TRACE(TR_MOVED, lane->addrs[i], moved, atomic_load_explicit(e, memory_order_relaxed));
                /* acq_rel, not argued weaker: STAGED carries no payload
                 * (the page is in the slot, which the worker reads after
                 * the hand-over through Evictor.lock). Counters and the
                 * refault epoch (an ageing hint): relaxed */
                if (moved && atomic_compare_exchange_strong_explicit(e, &v, pe_make_slot(PE_STAGED, slot),
                                                                      memory_order_acq_rel, memory_order_relaxed)) {
                        atomic_fetch_add_explicit(&mm->st.staged_pages, 1, memory_order_relaxed);
                        lane->keep[i] = keep; /* the worker checks the page against it */
                        PageMeta *pm = pindex_meta(mm->index, lane->addrs[i], false);
                        if (pm) /* for the refault distance */
                                atomic_store_explicit(&pm->epoch[pmeta_idx(lane->addrs[i])],
                                                      age_epoch(atomic_load_explicit(&mm->st.evictions,
                                                                                         memory_order_relaxed)),
                                                      memory_order_relaxed);
                        staged++;
                        continue;
                }
                /* left in place: a kept copy goes back to its entry, if the
                 * entry is still ours; anything else lets the copy go
                 * (acq_rel, as plan_verify()'s) */
                if (!moved && atomic_compare_exchange_strong_explicit(e, &v, keep, memory_order_acq_rel,
                                                                      memory_order_relaxed))
                        continue;
                if (keep)
                        mmclient_release_payload(mm, keep);
        }
        atomic_fetch_add_explicit(&mm->st.moved_out, nmoved, memory_order_relaxed); /* a counter: relaxed */
        if (unreported + phantom) { /* a counter: relaxed */
                atomic_fetch_add_explicit(&core->move_misreports, unreported + phantom, memory_order_relaxed);
                log_debug("pid %d, lane %u: %u pages moved but reported left, %u reported moved but not",
                          (int)mmclient_pid(mm), li, unreported, phantom);
        }
        if (staged == 0) {
                lane_compressed(core, mm, li, 0);
                return;
        }
        lane_submit(core, mm, li);
}

/* A MOVE's check is back (MW_JOB_MOVED): unless the lane moved on
 * meanwhile (its agent went, evict_agent_gone()). */
static void moved_done(Core *core, MMClient *mm, Work *w) {
        const MovedCheck *c = w->data;
        Lane *lane = c->lane < mm->nlanes ? &mm->lanes[c->lane] : NULL;

        if (!lane || lane->state != LANE_MOVING || !lane->checking || lane->gen != c->gen)
                return;
        lane_moved(core, mm, c->lane, c->truth);
}

int evict_release_done(Core *core, MMClient *mm, uint32_t li) {
        if (li >= mm->nlanes || mm->lanes[li].state != LANE_RELEASING)
                return -EPROTO;
        Lane *lane = &mm->lanes[li];
        lane_set_state(mm, lane, LANE_FREE);
        if (lane->op)
                lane->op->inflight--;
        lane->op = NULL;
        evict_pump(core, mm);
        return 0;
}

void evict_batch_done(Core *core, Work *w) {
        MMClient *mm = w->mm;
        if (w->lane < mm->nlanes && mm->lanes[w->lane].state == LANE_COMPRESSING)
                lane_compressed(core, mm, w->lane, w->v);
        evict_pump(core, mm);
        work_free(w);
}

void evict_restore_done(Core *core, Work *w) {
        MMClient *mm = w->mm;
        for (PageoutOp *op = mm->ops; op; op = op->next)
                if (op->restore && op->posted && op->id == w->id && op->start == w->a) {
                        if (op->unregister)
                                op->restored = true; /* unregistered next (pump_one()) */
                        else
                                op_finish(core, mm, op);
                        break;
                }
        evict_pump(core, mm);
        work_free(w);
}

void evict_job_done(Core *core, Work *w) {
        MMClient *mm = w->mm;

        if (w->type == MW_JOB_PAGEMAP)
                plan_pagemap_done(mm, w);
        if (w->type == MW_JOB_MOVED)
                moved_done(core, mm, w);
        if (w->type == MW_JOB_ARM && w->status < 0)
                mm->arm_failed = w->a + 1; /* its region is passed over once (plan_batch()) */
        if (w->type == MW_JOB_UNREGISTER && w->v)
                for (PageoutOp *op = mm->ops; op; op = op->next)
                        if ((uintptr_t)op == w->v && op->unregistering) {
                                op_finish(core, mm, op);
                                break;
                        }
        work_free(w);
}

void evict_tick(Core *core, MMClient *mm) {
        for (unsigned i = 0; i < mm->nlanes; i++)
                if (mm->lanes[i].state == LANE_DRAINING)
                        lane_try_release(core, mm, i);
                else if (mm->lanes[i].state == LANE_COMPRESSING && mm->lanes[i].compress_due)
                        lane_submit(core, mm, i);
                else if (mm->lanes[i].state == LANE_MOVING && mm->lanes[i].check_due)
                        lane_check(core, mm, i);
        if (mm->fork_paused && now_ns() - mm->fork_paused_at > 10ull * 1000000000) {
                /* a client that never said FORK_DONE does not stop eviction forever */
                mm->fork_paused = false;
        }
        evict_pump(core, mm);
}

void evict_forget_conn(MMClient *mm, Conn *c) {
        for (PageoutOp *op = mm->ops; op; op = op->next) {
                if (op->conn == c)
                        op->conn = NULL;
                if (op->group && op->group->conn == c)
                        op->group->conn = NULL;
        }
}

void evict_agent_gone(Core *core, MMClient *mm) {
        /* Lanes waiting for the agent will not hear from it again. MOVING
         * entries stay: the restore (or the fault path) reads their slots
         * and installs whatever the agent did move. Lanes only change state. */
        for (unsigned i = 0; i < mm->nlanes; i++) {
                Lane *lane = &mm->lanes[i];
                if (lane->state == LANE_RELEASING)
                        lane_set_state(mm, lane, LANE_FREE);
                if (lane->state == LANE_MOVING) {
                        /* a check on its way finds it moved on */
                        lane->checking = lane->check_due = false;
                        evict_lane_drop_keeps(mm, lane);
                        lane_set_state(mm, lane, LANE_DRAINING);
                }
                if (lane->state == LANE_FREE && lane->op) {
                        lane->op->inflight--;
                        lane->op = NULL;
                }
        }
}
