/*
 * reclaim.c: the daemon decides by itself what to evict (docs/reclaim.md).
 *
 * Every `interval` the manager looks at each client:
 *
 *   resident   PAGEMAP_SCAN (or pagemap) counts its resident managed pages
 *   writes     PAGEMAP_SCAN with WP_MATCHING returns the pages written since
 *              the last scan and write-protects them again (WP_ASYNC: the
 *              program never stops for it); each gets a use stamp and one
 *              hot count, and loses the compressed copy it kept (CLEAN)
 *   limit      resident above the client's limit: evict the excess, by the
 *              clock (pages with hot counts spend one instead)
 *   idle       every page whose last use is older than idle_age goes
 *   pressure   the controller's share of what it wants held out
 *   thrash     zones whose pages come back faster than thrash_refaults/s
 *              are left alone for a back-off that doubles while it lasts
 *
 * and hands the result to evict.c as one policy op per client, which a
 * clock hand carries round the client's registered memory. The pool bound
 * is checked by the workers themselves (core_pool_accepts) so that no
 * tick-long overshoot happens; when it is reached the kept copies of clean
 * pages, a cache, are dropped first.
 *
 * A refault's distance (pages evicted between the page's eviction and its
 * return) against the client's resident size says whether the page would
 * have stayed had the hand been a true LRU: if so it gets three hot counts
 * (kept for three passes), else one, as the kernel's workingset code
 * activates refaulting pages.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "age.h"
#include "inject.h"
#include "evict.h"
#include "fault.h"
#include "log.h"
#include "memread.h"
#include "core.h"
#include "mmclient.h"
#include "mmjob.h"
#include "pool.h"
#include "reclaim.h"


typedef void (*ScanFn)(MMClient *mm, uint64_t start, uint64_t end, void *ud);

/* Call fn for each run of [start, end) that has all of `mask` and is not
 * mapped to the zero page (zero-fill-around maps fresh pages there: they
 * take no memory, hold nothing, and were never written); with wp,
 * write-protect them as well. -errno if the scan is refused. */
static int pm_scan(MMClient *mm, uint64_t start, uint64_t end, uint64_t mask, bool wp, ScanFn fn, void *ud) {
        struct page_region vec[256];

        while (start < end) {
                struct pm_scan_arg a = {
                        .size = sizeof(a),
                        .flags = wp ? PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC : 0,
                        .start = start,
                        .end = end,
                        .vec = (uintptr_t)vec,
                        .vec_len = ELEMENTSOF(vec),
                        .category_inverted = PAGE_IS_PFNZERO,
                        .category_mask = mask | PAGE_IS_PFNZERO,
                        .return_mask = mask,
                };
                long n = ioctl(mmclient_pagemap_fd(mm), PAGEMAP_SCAN, &a);
                if (n < 0)
                        return negative_errno();
                for (long i = 0; i < n; i++)
                        fn(mm, vec[i].start, vec[i].end, ud);
                if (a.walk_end <= start)
                        break;
                start = a.walk_end;
        }
        return 0;
}

static void count_cb(MMClient *mm, uint64_t start, uint64_t end, void *ud) {
        (void)mm;
        *(uint64_t *)ud += (end - start) >> ZSWAP_PAGE_SHIFT;
}

/* Pages of [start, end) present, by pagemap words: kernels without
 * PAGEMAP_SCAN. */
static uint64_t count_present_pread(MMClient *mm, uint64_t start, uint64_t end) {
        uint64_t pm[512], n = 0;

        for (uint64_t a = start; a < end;) {
                size_t k = MIN((end - a) >> ZSWAP_PAGE_SHIFT, ELEMENTSOF(pm));
                if (mmclient_pagemap(mm, a, k, pm) < 0)
                        break;
                for (size_t i = 0; i < k; i++)
                        n += (pm[i] & (PM_PRESENT | PM_FILE)) == PM_PRESENT &&
                             !(mm->core->zero_pfn && PM_PFN(pm[i]) == mm->core->zero_pfn);
                a += k * ZSWAP_PAGE_SIZE;
        }
        return n;
}

/* A page was written: it is in use now, and its kept copy is stale. */
static void written_cb(MMClient *mm, uint64_t start, uint64_t end, void *ud) {
        uint32_t stamp = *(uint32_t *)ud;
        PageMeta *meta = NULL;

        mm->rc.written += (end - start) >> ZSWAP_PAGE_SHIFT;
        for (uint64_t a = start; a < end; a += ZSWAP_PAGE_SIZE) {
                unsigned i = pmeta_idx(a);
                if (!meta || i == 0)
                        meta = pindex_meta(mm->index, a, true);
                if (!meta)
                        continue;
                atomic_store_explicit(&meta->stamp[i], stamp, memory_order_relaxed);
                if (atomic_load_explicit(&meta->hot[i], memory_order_relaxed) == 0)
                        atomic_store_explicit(&meta->hot[i], 1, memory_order_relaxed);
                if (!(meta->written[i / 64] & (1ull << (i % 64)))) {
                        meta->written[i / 64] |= 1ull << (i % 64);
                        meta->nwritten++;
                }
                _Atomic uint64_t *e = pindex_entry(mm->index, a, false);
                uint64_t v = e ? atomic_load_explicit(e, memory_order_acquire) : 0;
                if (pe_state(v) == PE_CLEAN) {
                        if (atomic_compare_exchange_strong_explicit(e, &v, 0, memory_order_acq_rel,
                                                                    memory_order_relaxed))
                                mmclient_release_payload(mm, v);
                } else if (v == PE_FLAG_INCOMPRESSIBLE) {
                        /* new content: worth another try */
                        atomic_compare_exchange_strong_explicit(e, &v, 0, memory_order_relaxed, memory_order_relaxed);
                }
        }
}

/* A copy of mm's regions (the lock is not held while scanning). */
static size_t regions_snapshot(MMClient *mm, Region **ret) {
        size_t n;

        pthread_mutex_lock(&mm->regions_lock);
        n = mm->nregions;
        *ret = n ? INJECT_ALLOC(malloc(n * sizeof(Region))) : NULL;
        if (*ret)
                memcpy(*ret, mm->regions, n * sizeof(Region));
        else
                n = 0;
        pthread_mutex_unlock(&mm->regions_lock);
        return n;
}

/*
 * Write tracking's back-off. Each page written since the last scan took
 * one kernel write-protect fault, and takes another at its first write
 * after this scan protects it again: a program that writes most of its
 * memory all the time would pay that on every page every write_scan. So
 * a zone (2 MiB) found densely written (WP_DENSE of its pages) sits out
 * the next scans, 1, 3, 7 ... up to WP_SKIP_MAX in a row while it stays
 * so: its pages stay unprotected meanwhile (writes cost nothing), and
 * the pages written at its last scan count as written at each scan it
 * sits out, so ageing still sees them in use. A zone written sparsely is
 * scanned every time (its few faults are cheap). A kept copy (CLEAN) of
 * a page written unseen is only dropped later: its content is compared
 * before it is ever reused (workers.c keep_matches()).
 */
#define WP_DENSE (PMETA_PAGES / 8)
#define WP_LEVEL_MAX 5 /* sits out at most 2^5 - 1 = 31 scans */

/* A zone sitting out this scan: its pages written last time are in use. */
static void wp_sit_out(PageMeta *meta, uint32_t stamp) {
        for (unsigned w = 0; w < ELEMENTSOF(meta->written); w++)
                for (uint64_t b = meta->written[w]; b; b &= b - 1) {
                        unsigned i = w * 64 + (unsigned)__builtin_ctzll(b);
                        atomic_store_explicit(&meta->stamp[i], stamp, memory_order_relaxed);
                        if (atomic_load_explicit(&meta->hot[i], memory_order_relaxed) == 0)
                                atomic_store_explicit(&meta->hot[i], 1, memory_order_relaxed);
                }
}

/* Is the zone at z scanned by write scan seq? The first region that
 * reaches a zone decides (a zone can straddle two regions). */
static bool wp_zone_due(MMClient *mm, uint64_t z, uint32_t seq, uint32_t stamp) {
        PageMeta *meta = pindex_meta(mm->index, z, false);
        if (!meta)
                return true;
        if (meta->wp_seen == seq)
                return !meta->wp_out;
        meta->wp_seen = seq;
        meta->wp_out = meta->wp_skip > 0;
        if (meta->wp_out) {
                atomic_fetch_add_explicit(&mm->core->write_zones_out, 1, memory_order_relaxed);
                meta->wp_skip--;
                wp_sit_out(meta, stamp);
                return false;
        }
        memset(meta->written, 0, sizeof(meta->written));
        meta->nwritten = 0;
        return true;
}

/* After the scan: a zone written densely again sits out longer; one
 * written sparsely, not at all. */
static void wp_judge(MMClient *mm, uint64_t start, uint64_t end, uint32_t seq) {
        const uint64_t zone = (uint64_t)PMETA_PAGES * ZSWAP_PAGE_SIZE;

        for (uint64_t z = start & ~(zone - 1); z < end; z += zone) {
                PageMeta *meta = pindex_meta(mm->index, z, false);
                if (!meta || meta->wp_judged == seq || (meta->wp_seen == seq && meta->wp_out))
                        continue;
                meta->wp_judged = seq;
                if (meta->nwritten >= WP_DENSE) {
                        if (meta->wp_level < WP_LEVEL_MAX)
                                meta->wp_level++;
                        meta->wp_skip = (uint8_t)((1u << meta->wp_level) - 1);
                } else
                        meta->wp_level = meta->wp_skip = 0;
        }
}

/*
 * The count, and the write scan, are a job (mmjob.h, MW_JOB_SCAN): both
 * are PAGEMAP_SCAN (or pagemap reads), which take the client's mmap lock
 * for reading, and a client that holds it for reading (a FUSE read of its
 * own) while another of its threads waits to take it for writing (an
 * mmap()) would hold the manager in them for as long as it liked. The
 * manager decides which zones the write scan covers (their back-off, in
 * the zones' PageMeta) and gives the job copies of the regions and of
 * those runs; the job only asks the kernel and collects the runs it found
 * written; the manager applies them when the job is back
 * (reclaim_scan_done()). What the policies decide from is the last count
 * back: a count on its way is not waited for.
 */
typedef struct ScanRun {
        uint64_t start, end;
} ScanRun;

typedef struct ScanRuns {
        ScanRun *v;
        size_t n, cap;
} ScanRuns;

/* Add [start, end) to r, joined to the last run if it follows it. False
 * without memory. */
static bool runs_add(ScanRuns *r, uint64_t start, uint64_t end) {
        if (r->n && r->v[r->n - 1].end == start) {
                r->v[r->n - 1].end = end;
                return true;
        }
        if (r->n == r->cap) {
                size_t c = r->cap ? 2 * r->cap : 64;
                ScanRun *p = realloc(r->v, c * sizeof(*p));
                if (!p)
                        return false;
                r->v = p;
                r->cap = c;
        }
        r->v[r->n++] = (ScanRun){ start, end };
        return true;
}

typedef struct ScanJob {
        MMJobCall call; /* first: scan_job() */
        /* given */
        bool pagemap_scan;      /* PAGEMAP_SCAN works (else pagemap reads count) */
        bool do_write_scan, wp; /* a write scan is due; it protects (runs) */
        uint32_t seq, stamp;
        uint64_t now, back;     /* the tick's time; mmclient_pages_back() before the count */
        Region *rg;
        size_t nrg;
        ScanRuns runs;          /* the write scan's runs, zones due only */
        /* found: the resident pages; as the count began (after its write
         * scan), mmclient_pages_back(), st.moved_out and whether no lane
         * was moving */
        uint64_t resident, back_run, moved_run;
        bool settled_run;
        bool wp_failed;
        ScanRuns written;       /* runs found written (and protected again) */
} ScanJob;

static void scan_job_free(ScanJob *j) {
        free(j->rg);
        free(j->runs.v);
        free(j->written.v);
}

/* The write scan's runs of [start, end): zones due, joined; the others
 * sit out (wp_zone_due()). False without memory. */
static bool write_runs(ScanJob *j, MMClient *mm, uint64_t start, uint64_t end) {
        const uint64_t zone = (uint64_t)PMETA_PAGES * ZSWAP_PAGE_SIZE;
        uint64_t run = start;

        for (uint64_t z = start & ~(zone - 1); z < end; z += zone) {
                uint64_t zs = MAX(z, start), ze = MIN(z + zone, end);
                if (wp_zone_due(mm, z, j->seq, j->stamp))
                        continue;
                if (run < zs && !runs_add(&j->runs, run, zs))
                        return false;
                run = ze;
        }
        return run >= end || runs_add(&j->runs, run, end);
}

static void written_collect(MMClient *mm, uint64_t start, uint64_t end, void *ud) {
        (void)mm;
        /* without memory, its pages age as if unwritten; a kept copy is
         * compared before reuse */
        (void)runs_add(&((ScanJob *)ud)->written, start, end);
}

/* An mm-job thread's: the kernel's part of the count and the write scan. */
static void scan_job(MMClient *mm, MMJobCall *call) {
        ScanJob *j = (ScanJob *)call;

        for (size_t i = 0; j->wp && i < j->runs.n; i++)
                if (pm_scan(mm, j->runs.v[i].start, j->runs.v[i].end, PAGE_IS_WRITTEN | PAGE_IS_PRESENT, true,
                            written_collect, j) < 0) {
                        j->wp_failed = true;
                        break;
                }
        /* relaxed: counters; a page that moves while the walk runs is off
         * by one, corrected by the next count */
        j->settled_run = atomic_load_explicit(&mm->lanes_moving, memory_order_relaxed) == 0;
        j->back_run = mmclient_pages_back(mm);
        j->moved_run = atomic_load_explicit(&mm->st.moved_out, memory_order_relaxed);
        for (size_t i = 0; i < j->nrg; i++)
                if (!j->pagemap_scan ||
                    pm_scan(mm, j->rg[i].start, j->rg[i].end, PAGE_IS_PRESENT, false, count_cb, &j->resident) < 0)
                        j->resident += count_present_pread(mm, j->rg[i].start, j->rg[i].end);
}

/* Start a count of mm (with its write scan if do_write_scan) as of now;
 * with serial, a STATS request (id) of that connection waits for it
 * (report.c). False if none was started (no memory). */
static bool scan_start(Reclaim *rc, MMClient *mm, uint64_t now, bool do_write_scan, uint64_t serial, uint32_t id) {
        Work *w = work_new(MW_JOB_SCAN, mm);
        ScanJob *j = w ? calloc(1, sizeof(*j)) : NULL;

        if (!j) {
                work_free(w);
                return false;
        }
        j->call.fn = scan_job;
        j->pagemap_scan = rc->core->pagemap_scan;
        j->nrg = regions_snapshot(mm, &j->rg);
        j->stamp = age_stamp();
        j->now = now;
        j->back = mmclient_pages_back(mm);
        j->do_write_scan = do_write_scan;
        j->wp = do_write_scan && mm->wp_async;
        if (j->wp) {
                j->seq = ++mm->rc.write_scans;
                for (size_t i = 0; i < j->nrg; i++)
                        if (!write_runs(j, mm, j->rg[i].start, j->rg[i].end)) {
                                j->wp = j->do_write_scan = false; /* the next tick's, then */
                                break;
                        }
        }
        w->data = j;
        w->v = serial;
        w->id = id;
        mm->rc.scanning++;
        mmjob_submit(rc->core, w);
        return true;
}

/*
 * The client's resident pages now: its last count, plus the pages the
 * fault threads put back since the count ran (faults, refills), less the
 * pages moved out since. A count may wait long in its queue (mmjob.h) and
 * its result comes back while refills and evictions go on, so taken as
 * it stands it counts a refill twice (its pages, then the refill's done)
 * or pages already evicted as still resident.
 */
static uint64_t resident_now(MMClient *mm) {
        const MMReclaim *r = &mm->rc;
        uint64_t back = mmclient_pages_back(mm) - r->back_at_scan;
        uint64_t out = atomic_load_explicit(&mm->st.moved_out, memory_order_relaxed) - r->moved_at_scan;
        return r->counted + back > out ? r->counted + back - out : 0;
}

/* A count is back: what it found becomes the client's. */
void reclaim_scan_done(Reclaim *rc, Work *w) {
        MMClient *mm = w->mm;
        ScanJob *j = w->data;

        mm->rc.scanning--;
        if (atomic_load_explicit(&mm->dead, memory_order_relaxed)) {
                scan_job_free(j);
                return;
        }
        for (size_t i = 0; i < j->written.n; i++)
                written_cb(mm, j->written.v[i].start, j->written.v[i].end, &j->stamp);
        bool do_write_scan = j->do_write_scan && !j->wp_failed;
        if (do_write_scan && j->wp) {
                for (size_t i = 0; i < j->nrg; i++)
                        wp_judge(mm, j->rg[i].start, j->rg[i].end, j->seq);
                atomic_fetch_add_explicit(&rc->core->write_scans, 1, memory_order_relaxed);
        }
        if (do_write_scan) {
                /* a page the daemon installed is not write-protected, so
                 * it counts as written once: only more than the pages
                 * that came back since the last scan tells of the
                 * program's own writes */
                mm->rc.wrote |= mm->rc.written > j->back - mm->rc.back_at_write_scan;
                mm->rc.back_at_write_scan = j->back;
                mm->rc.written = 0;
                mm->rc.written_ms = j->now;
        }
        mm->rc.counted = j->resident;
        mm->rc.back_at_scan = j->back_run;
        mm->rc.moved_at_scan = j->moved_run;
        mm->rc.count_settled = j->settled_run;
        mm->rc.resident = resident_now(mm);
        mm->rc.measured_ms = now_ms();
        atomic_store_explicit(&mm->st.resident_pages, mm->rc.resident, memory_order_relaxed);
        atomic_store_explicit(&mm->st.limit_bytes, reclaim_client_limit(rc, mm), memory_order_relaxed);
        scan_job_free(j);
}

/* ---- thrash protection ---- */

typedef struct ThrashCtx {
        Reclaim *rc;
        MMClient *mm;
        uint64_t now;
} ThrashCtx;

static int thrash_cb(void *ud, uint64_t addr, PageMeta *meta) {
        ThrashCtx *c = ud;
        const Tunables *t = &c->rc->tun;
        uint32_t refaults = atomic_load_explicit(&meta->refaults, memory_order_relaxed);
        uint64_t dt = c->now - meta->seen_ms;

        if (meta->seen_ms == 0 || dt > 60000) {
                meta->seen_ms = c->now;
                meta->refaults_seen = refaults;
                return 0;
        }
        /* a rate over 2 s at least: returns come in bursts, one per sweep */
        if (dt < 2000)
                return 0;
        uint64_t rate = (uint64_t)(refaults - meta->refaults_seen) * 1000 / dt;
        meta->refaults_seen = refaults;
        meta->seen_ms = c->now;
        if (t->thrash_refaults && rate > t->thrash_refaults) {
                if (meta->backoff_until_ms <= c->now) {
                        meta->backoff_until_ms = c->now + (t->thrash_backoff_ms << meta->backoff_level);
                        if (meta->backoff_level < 6)
                                meta->backoff_level++;
                        atomic_fetch_add_explicit(&c->mm->st.thrash_backoffs, 1, memory_order_relaxed);
                        log_debug("pid %d: zone %#llx refaults %llu/s: backed off %llu ms", (int)mmclient_pid(c->mm),
                                  (unsigned long long)addr, (unsigned long long)rate,
                                  (unsigned long long)(meta->backoff_until_ms - c->now));
                }
        } else if (meta->backoff_level > 0 && meta->backoff_until_ms + t->thrash_backoff_ms <= c->now &&
                   rate * 4 <= t->thrash_refaults) {
                /* quiet for a while after its back-off: trust it a bit more */
                meta->backoff_level--;
        }
        return 0;
}

/* ---- pool bound ---- */



static int drop_clean_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        MMClient *mm = ud;
        uint64_t v = atomic_load_explicit(e, memory_order_acquire);
        (void)addr;
        if (pe_state(v) == PE_CLEAN &&
            atomic_compare_exchange_strong_explicit(e, &v, 0, memory_order_acq_rel, memory_order_relaxed))
                mmclient_release_payload(mm, v);
        return 0;
}

/* ---- system pressure ---- */

static bool client_managed(MMClient *mm) {
        return mm->conn && mm->nlanes > 0 && !mm->rc.off && !mm->fork_paused &&
               !atomic_load_explicit(&mm->fork_hold, memory_order_acquire) &&
               !atomic_load_explicit(&mm->dead, memory_order_relaxed) &&
               !(atomic_load_explicit(&mm->read_stuck, memory_order_relaxed) &&
                 memread_stuck(mm->uid) > 0); /* not evicted meanwhile (evict.c) */
}

/*
 * Senpai-style control of how much the daemon holds out. Each period:
 * pressure above target (PSI memory "some" avg10) or MemAvailable under
 * min_free raises the hold target by pressure_step % of the managed
 * memory; pressure under half the target with memory to spare lowers it
 * by the same step. Whatever the held pages fall short of the target is
 * asked of the clients in proportion to their resident size; a lower
 * target evicts nothing, and pages come back as they are used. The step
 * bound and PSI's own 10 s average keep it from oscillating.
 */
static void pressure_period(Reclaim *rc, uint64_t now) {
        const Tunables *t = &rc->tun;
        uint64_t resident = 0, held = 0;

        for (MMClient *mm = *rc->mms; mm; mm = mm->next) {
                mm->rc.pressure_want = 0;
                if (!client_managed(mm))
                        continue;
                resident += mm->rc.resident;
                held += mmclient_held_pages(mm);
        }
        /* the stall share of this very period, from the cumulative total:
         * avg10 lags ~10 s behind, which made the controller overshoot
         * (docs/benchmarks.md) */
        uint64_t total = 0;
        if (proc_psi_memory_some_total("/", &total) == 0) {
                uint64_t dt_us = (now - rc->psi_total_ms) * 1000;
                rc->psi_now = rc->psi_total_ms && dt_us && total >= rc->psi_total
                                     ? 100.0 * (double)(total - rc->psi_total) / (double)dt_us
                                     : proc_psi_memory_some("/");
                rc->psi_total = total;
                rc->psi_total_ms = now;
        } else
                rc->psi_now = proc_psi_memory_some("/");
        rc->avail_now = proc_mem_available("/");
        rc->pressure_last_ms = now;
        if (t->pressure_target <= 0 && t->min_free == 0) {
                if (rc->hold_target && t->refill)
                        /* the controller turned off: what it held may come
                         * back, counted by refill_plan() (lanes in flight) */
                        for (MMClient *mm = *rc->mms; mm; mm = mm->next)
                                if (client_managed(mm))
                                        mm->rc.refill_all = true;
                rc->hold_target = 0;
                rc->wants_out = false;
                for (MMClient *mm = *rc->mms; mm; mm = mm->next)
                        mm->rc.pressure_left = mm->rc.pressure_cap = 0;
                return;
        }
        uint64_t step = MAX((uint64_t)((double)(resident + held) * t->pressure_step / 100.0), (uint64_t)256);
        bool high = (t->pressure_target > 0 && rc->psi_now > t->pressure_target) ||
                    (t->min_free && rc->avail_now < t->min_free);
        bool low = (t->pressure_target <= 0 || rc->psi_now < t->pressure_target / 2) &&
                   (t->min_free == 0 || rc->avail_now > t->min_free + step * ZSWAP_PAGE_SIZE);
        if (high)
                rc->hold_target = MIN(MAX(rc->hold_target, held) + step, resident + held);
        else if (low)
                rc->hold_target = rc->hold_target > step ? rc->hold_target - step : 0;
        if (low && t->refill && held > rc->hold_target) {
                /* pressure is gone: what is held beyond the target may come
                 * back, a step a period, shared as the pages are held (of
                 * what the policies took: refill_plan()) */
                uint64_t back = MIN(held - rc->hold_target, step);
                for (MMClient *mm = *rc->mms; mm; mm = mm->next)
                        if (client_managed(mm)) {
                                uint64_t h = mmclient_held_pages(mm);
                                mm->rc.refill_want =
                                        MIN(mm->rc.refill_want + (uint64_t)((double)back * (double)h / (double)held), h);
                        }
        }
        log_debug("pressure: psi some %.2f%% over the period (target %.2f%%), available %llu MiB: hold %llu pages (held %llu)",
                  rc->psi_now, t->pressure_target, (unsigned long long)(rc->avail_now >> 20),
                  (unsigned long long)rc->hold_target, (unsigned long long)held);
        uint64_t want = rc->hold_target > held && resident ? MIN(rc->hold_target - held, step) : 0;
        rc->wants_out = rc->hold_target > held;
        for (MMClient *mm = *rc->mms; mm; mm = mm->next)
                if (client_managed(mm)) {
                        /* this period's share; the backlog is capped at it */
                        mm->rc.pressure_want =
                                want ? (uint64_t)((double)want * (double)mm->rc.resident / (double)resident) + 1 : 0;
                        mm->rc.pressure_cap = mm->rc.pressure_want;
                        if (!want)
                                mm->rc.pressure_left = 0;
                }
}

/* ---- the tick ---- */

static uint32_t stamp_at(uint64_t ms) {
        return ms <= age_t0_ms ? 1 : (uint32_t)((ms - age_t0_ms) / AGE_STAMP_MS) + 1;
}

uint64_t reclaim_client_limit(Reclaim *rc, MMClient *mm) {
        /* the client's own, else its user's ([users] limit), else the
         * daemon's; and its share of its group's, whichever is lower */
        uint64_t own = mm->rc.limit_set ? mm->rc.limit : mm->user_limit ? mm->user_limit : rc->tun.limit;
        uint64_t group = !mm->rc.group[0]        ? 0
                         : mm->rc.group_share    ? mm->rc.group_share
                         : mm->rc.group_op_limit ? mm->rc.group_op_limit
                                                 : mm->rc.group_limit;
        return own && group ? MIN(own, group) : own ? own : group;
}

/* A group's members summed: resident pages, unmanaged bytes (saturating:
 * each a client's word, which may be anything), the limit (the highest
 * any member gave) */
typedef struct GroupSum {
        unsigned members;
        uint64_t resident, unmanaged, limit;
} GroupSum;

static void group_add(GroupSum *g, const MMClient *x) {
        g->members++;
        g->resident += x->rc.resident;
        g->unmanaged = g->unmanaged + x->rc.group_unmanaged < g->unmanaged ? UINT64_MAX
                                                                             : g->unmanaged + x->rc.group_unmanaged;
        /* the operator's, where there is one (every member has it) */
        g->limit = MAX(g->limit, x->rc.group_op_limit ? x->rc.group_op_limit : x->rc.group_limit);
}

/* Is mm counted for statistics (attached, with lanes, alive)? */
static bool measurable(const MMClient *mm) {
        return mm->conn && mm->nlanes != 0 && !atomic_load_explicit(&mm->dead, memory_order_relaxed);
}

void reclaim_measure(Reclaim *rc, MMClient *mm) {
        uint64_t now = now_ms();
        if (!measurable(mm))
                return;
        /* statistics: a count younger than a tick will do (a loop of stats
         * requests must not turn into a loop of page-table walks) */
        atomic_store_explicit(&mm->st.limit_bytes, reclaim_client_limit(rc, mm), memory_order_relaxed);
        if (mm->rc.scanning || (mm->rc.measured_ms && now - mm->rc.measured_ms < MIN(rc->tun.interval_ms, (uint64_t)100)))
                return;
        /* a call of ours waits for the mmap lock of this client or of
         * another of its user's (mmjob.h): the count's job would wait
         * behind it; the last count stands */
        if (mmjob_user_busy(mm))
                return;
        (void)scan_start(rc, mm, now, false, 0, 0); /* for the next look: this one has the last count */
}

bool reclaim_measure_for(Reclaim *rc, MMClient *mm, uint64_t serial, uint32_t id) {
        if (!measurable(mm) || mmjob_user_busy(mm) || mm->rc.scanning >= RECLAIM_SCANS_MAX)
                return false;
        return scan_start(rc, mm, now_ms(), false, serial, id);
}

bool reclaim_group_of(Reclaim *rc, MMClient *mm, unsigned *members, uint64_t *resident, uint64_t *unmanaged,
                      uint64_t *limit) {
        GroupSum g = { 0 };
        if (mm->rc.group[0])
                for (MMClient *x = *rc->mms; x; x = x->next)
                        if (x->rc.group[0] && mmclient_same_group(x, mm) &&
                            !atomic_load_explicit(&x->dead, memory_order_relaxed)) {
                                reclaim_measure(rc, x); /* a count younger than 100 ms will do */
                                group_add(&g, x);
                        }
        *members = g.members;
        *resident = g.resident << ZSWAP_PAGE_SHIFT;
        *unmanaged = g.unmanaged;
        *limit = g.limit;
        return mm->rc.group[0] != 0;
}

/*
 * Does the tick look at this client's memory at all? Not while no policy
 * can evict from it (no limit, no idle age, the pressure controller off,
 * no policy eviction under way) and it holds nothing (nothing evicted, no
 * kept copy): a program that is never evicted then pays for no write
 * tracking (no write-protect fault per written page per write_scan) and
 * no page-table walk each tick. Explicit pageouts need neither (they take
 * every present page asked for); what they leave held turns the ticks on.
 * Once a policy applies, the first tick's write scan finds every page
 * written since the client registered it: in use, as far as ageing knows.
 */
static bool reclaim_watches(Reclaim *rc, MMClient *mm, uint64_t limit, int64_t idle) {
        const Tunables *t = &rc->tun;
        return limit || idle > 0 || t->pressure_target > 0 || t->min_free || mm->rc.op || mmclient_held_pages(mm) ||
               atomic_load_explicit(&mm->st.clean_pages, memory_order_relaxed);
}

static void refill_plan(Reclaim *rc, MMClient *mm, uint64_t now, uint64_t limit, uint64_t evict_want);

/* The idle age in force for mm: its own, else the daemon's; 0: none. */
static int64_t client_idle_age(Reclaim *rc, MMClient *mm) {
        return mm->rc.idle_age_ms >= 0 ? mm->rc.idle_age_ms : (int64_t)rc->tun.idle_age_ms;
}

/* Count mm's resident pages (and, when due, the pages it wrote) for the
 * tick: what the policies decide from. False: no policy looks at it. */
static bool reclaim_count(Reclaim *rc, MMClient *mm, uint64_t now) {
        const Tunables *t = &rc->tun;
        if (!reclaim_watches(rc, mm, reclaim_client_limit(rc, mm), client_idle_age(rc, mm)))
                return false;
        /* a count of it on its way, or a call of ours that waits for the
         * mmap lock of the client or of another of its user's (mmjob.h),
         * which the count's job would wait behind: the last count stands.
         * Else a count starts, for the next tick: this one decides from
         * the last (0 if none came back yet) */
        if (!mm->rc.scanning && !mmjob_user_busy(mm)) {
                bool write_scan = t->write_scan_ms && now - mm->rc.written_ms >= t->write_scan_ms;
                (void)scan_start(rc, mm, now, write_scan, 0, 0);
        }
        if (now - mm->rc.thrash_ms >= 500) {
                ThrashCtx c = { .rc = rc, .mm = mm, .now = now };
                pindex_walk_meta(mm->index, thrash_cb, &c);
                mm->rc.thrash_ms = now;
        }
        return mm->rc.measured_ms != 0;
}

/*
 * Groups: the members of one (same user, same name: the processes of one
 * zswap-run, of one systemd unit) share one resident limit, as a cgroup's
 * memory.high: the group's limit less what its members hold unmanaged
 * (never less than a quarter of it, as the preload shim's own limit) is
 * shared out in proportion to what each member has resident, counted
 * afresh for all of them first. Over it, each gives up the same fraction
 * of its pages; under it, each may grow by the same fraction, and none is
 * evicted until the group as a whole is over. A member alone gets it all.
 */
static int group_cmp(const void *a, const void *b) {
        const MMClient *x = *(MMClient *const *)a, *y = *(MMClient *const *)b;
        return x->uid != y->uid ? (x->uid < y->uid ? -1 : 1) : strcmp(x->rc.group, y->rc.group);
}

static void groups_share(Reclaim *rc, uint64_t now) {
        uint64_t tick = ++rc->group_tick;
        size_t n = 0, cap = 0;

        for (MMClient *mm = *rc->mms; mm; mm = mm->next)
                cap += mm->rc.group[0] != 0;
        if (!cap)
                return;
        /* the members, sorted by group: each group a run (n log n, not a
         * walk of the list per group) */
        MMClient **v = malloc(cap * sizeof(*v));
        if (!v)
                return; /* the shares of the last tick stay */
        for (MMClient *mm = *rc->mms; mm && n < cap; mm = mm->next)
                if (mm->rc.group[0] && client_managed(mm))
                        v[n++] = mm;
        qsort(v, n, sizeof(*v), group_cmp);
        for (size_t i = 0, j; i < n; i = j) {
                GroupSum g = { 0 };
                for (j = i; j < n && mmclient_same_group(v[j], v[i]); j++) {
                        MMClient *x = v[j];
                        x->rc.group_tick = tick;
                        x->rc.group_share = 0; /* counted against the group's whole limit */
                        if (!reclaim_count(rc, x, now))
                                x->rc.resident = 0;
                        group_add(&g, x);
                }
                if (!g.limit) /* a cgroup's group nobody gave a limit: none */
                        continue;
                uint64_t budget = (g.unmanaged < g.limit - g.limit / 4 ? g.limit - g.unmanaged : g.limit / 4) >>
                                  ZSWAP_PAGE_SHIFT;
                for (size_t k = i; k < j; k++) {
                        uint64_t share = g.resident ? (uint64_t)((double)budget * (double)v[k]->rc.resident /
                                                                 (double)g.resident)
                                                    : budget / g.members;
                        v[k]->rc.group_share = MAX(share, (uint64_t)1) << ZSWAP_PAGE_SHIFT;
                }
                log_debug("group %s of uid %u: %u processes, %llu pages resident, %llu unmanaged bytes, limit %llu "
                          "bytes", v[i]->rc.group, (unsigned)v[i]->uid, g.members, (unsigned long long)g.resident,
                          (unsigned long long)g.unmanaged, (unsigned long long)g.limit);
        }
        free(v);
}

/* The policies' decision for mm, from the tick's count. */
static void reclaim_decide(Reclaim *rc, MMClient *mm, uint64_t now) {
        uint64_t limit = reclaim_client_limit(rc, mm);
        int64_t idle = client_idle_age(rc, mm);

        atomic_store_explicit(&mm->st.limit_bytes, limit, memory_order_relaxed);
        mm->rc.resident = resident_now(mm);
        /* pages of lanes still moving are on their way out: not wanted
         * again (those the agent leaves in place are, at the next count) */
        uint64_t moving = evict_moving_pages(mm), staying = mm->rc.resident - MIN(moving, mm->rc.resident);
        uint64_t limit_pages = limit >> ZSWAP_PAGE_SHIFT, want_limit = 0;
        if (limit && staying > limit_pages)
                /* down to a little under the limit, so that batches stay whole */
                want_limit = staying - (limit_pages - limit_pages / 64);
        uint32_t idle_before = 0;
        if (idle > 0 && now - mm->rc.idle_swept_ms >= MAX((uint64_t)idle / 4, (uint64_t)1000) &&
            now > (uint64_t)idle) {
                idle_before = stamp_at(now - (uint64_t)idle);
                mm->rc.idle_swept_ms = now;
        }
        /* the limit's want is absolute (recomputed from a fresh count each
         * tick); the controller's is an amount per period, consumed as the
         * op plans pages: what the op took since the last tick comes off */
        if (mm->rc.op && mm->rc.op == mm->rc.last_op) {
                uint64_t taken = mm->rc.last_want > mm->rc.op->want ? mm->rc.last_want - mm->rc.op->want : 0;
                mm->rc.pressure_left -= MIN(taken, mm->rc.pressure_left);
        }
        /* a backlog never outgrows what the controller still wants */
        mm->rc.pressure_left = MIN(mm->rc.pressure_left + mm->rc.pressure_want, mm->rc.pressure_cap);
        mm->rc.pressure_want = 0;
        mm->rc.last_op = NULL;
        uint64_t want = MAX(want_limit, mm->rc.pressure_left);
        refill_plan(rc, mm, now, limit, want);
        if ((want == 0 && idle_before == 0) || !core_pool_accepts(rc->core)) {
                /* nothing to take (or no room to store it): an op still
                 * sweeping stops taking by the clock */
                if (mm->rc.op)
                        mm->rc.op->want = 0;
                return;
        }
        PageoutOp *op = mm->rc.op ? mm->rc.op : evict_queue_reclaim(rc->core, mm);
        if (!op)
                return;
        log_debug("pid %d: resident %llu pages, policy eviction: want %llu (limit %llu), idle before %u (now %u)",
                  (int)mmclient_pid(mm), (unsigned long long)mm->rc.resident, (unsigned long long)want,
                  (unsigned long long)want_limit, idle_before, age_stamp());
        op->want = want;
        mm->rc.last_op = op;
        mm->rc.last_want = want;
        if (idle_before)
                op->idle_before = idle_before;
        /* a limit is the user's word: thrashing zones are spared only by
         * the daemon's own initiatives (idle, pressure) */
        op->spare_thrash = want_limit == 0;
        evict_pump(rc->core, mm);
}

static void reclaim_client(Reclaim *rc, MMClient *mm, uint64_t now) {
        if (reclaim_count(rc, mm, now))
                reclaim_decide(rc, mm, now); /* which says the limit in force */
        else
                atomic_store_explicit(&mm->st.limit_bytes, reclaim_client_limit(rc, mm), memory_order_relaxed);
}

/* ---- refill: pages back ahead of use ---- */

#define REFILL_TICK_MAX 16384 /* pages (64 MiB) one refill brings back at most */
#define AGE_BUCKETS 34

typedef struct RefillCut {
        MMClient *mm;
        uint32_t now;
        uint64_t n[AGE_BUCKETS]; /* held pages by age: 0, then [2^(i-1), 2^i) stamps; the last: never used */
} RefillCut;

static int refill_cut_cb(void *ud, uint64_t addr, _Atomic uint64_t *e) {
        RefillCut *c = ud;
        uint64_t v = atomic_load_explicit(e, memory_order_relaxed);
        if ((pe_state(v) != PE_STORED && pe_state(v) != PE_SAME) || pe_is_tier(v))
                return 0;
        PageMeta *meta = pindex_meta(c->mm->index, addr, false);
        uint32_t s = meta ? atomic_load_explicit(&meta->stamp[pmeta_idx(addr)], memory_order_relaxed) : 0;
        unsigned b = AGE_BUCKETS - 1;
        if (s) {
                uint32_t age = s < c->now ? c->now - s : 0;
                b = age ? 32 - (unsigned)__builtin_clz(age) : 0;
        }
        c->n[b]++;
        return 0;
}

/*
 * The stamp from which the client's n most recently used held pages
 * (those in the pool) were used: ages are counted in powers of two, so
 * the pages from it on are n to 2n; the refill stops at n.
 */
static uint32_t refill_since(MMClient *mm, uint64_t n) {
        RefillCut c = { .mm = mm, .now = age_stamp() };
        pindex_walk(mm->index, 0, PINDEX_MAX_ADDR, refill_cut_cb, &c);
        uint64_t sum = 0;
        for (unsigned b = 0; b < AGE_BUCKETS - 1; b++) {
                sum += c.n[b];
                if (sum >= n) {
                        uint32_t age = b ? (uint32_t)((1ull << b) - 1) : 0;
                        return c.now > age ? c.now - age : 1;
                }
        }
        return 0; /* every page, the never used too */
}

/* Did mm take a refault after refill_quiet without any and without a
 * write seen (refill_plan() restarts the clock at each)? */
static bool refill_woke(const Reclaim *rc, MMClient *mm, uint64_t now) {
        const MMReclaim *r = &mm->rc;
        return rc->tun.refill_quiet_ms && r->refill_quiet_ms && now - r->refill_quiet_ms >= rc->tun.refill_quiet_ms &&
               atomic_load_explicit(&mm->st.refaults, memory_order_relaxed) != r->refill_refaults;
}

/* Did room open since refill_plan() last looked: mm's limit raised or
 * removed, or the controller let go? */
static bool refill_room_opened(const MMReclaim *r, uint64_t limit) {
        return r->refill_all || (r->refill_limit && (limit == 0 || limit > r->refill_limit));
}

/*
 * Pages come back ahead of use (refill), most recently used first, when
 * room opens (the pressure controller holds less: pressure_period(); the
 * client's limit was raised or removed), as many as opened and no more
 * than the policies took; or when the client takes a refault after
 * refill_quiet without any and without a write seen, while pages were
 * taken from it (it woke: the pages taken meanwhile). Never above the
 * limit, never while an eviction of it is under way (room is measured
 * once it is done and counted) or the controller wants more held; one
 * FW_REFILL out at a time, at most REFILL_TICK_MAX
 * pages each, which its fault thread brings back between faults
 * (work.c).
 */
static void refill_plan(Reclaim *rc, MMClient *mm, uint64_t now, uint64_t limit, uint64_t evict_want) {
        MMReclaim *r = &mm->rc;
        uint64_t held = mmclient_held_pages(mm);
        uint64_t refaults = atomic_load_explicit(&mm->st.refaults, memory_order_relaxed);
        uint64_t evictions = atomic_load_explicit(&mm->st.evictions, memory_order_relaxed);

        if (!rc->tun.refill) {
                r->refill_want = r->refill_wake = 0;
                r->refill_limit = limit;
                r->refill_all = r->refill_deferred = false;
                return;
        }
        if (refill_woke(rc, mm, now) && evictions > r->refill_evictions) {
                log_debug("pid %d woke after %llu ms without a refault: %llu pages taken meanwhile come back",
                          (int)mmclient_pid(mm), (unsigned long long)(now - r->refill_quiet_ms),
                          (unsigned long long)(evictions - r->refill_evictions));
                r->refill_wake += evictions - r->refill_evictions;
        }
        if (refaults != r->refill_refaults || r->wrote) {
                /* a refault, or busy in its resident memory: active now,
                 * whatever was taken */
                r->refill_refaults = refaults;
                r->refill_evictions = evictions;
                r->refill_quiet_ms = now;
        } else if (!r->refill_quiet_ms)
                r->refill_quiet_ms = now;
        r->wrote = false;
        if (r->op && (r->op->want || r->op->inflight)) {
                /* a policy eviction still takes pages, or has lanes in
                 * flight, which reclaim_evictions counts only once they
                 * are compressed: room that opened meanwhile is measured
                 * once it is done. The lowest limit meanwhile is the one
                 * the room opens from. */
                r->refill_deferred = refill_room_opened(r, limit);
                if (limit && (!r->refill_limit || limit < r->refill_limit))
                        r->refill_limit = limit;
                return;
        }
        r->refill_deferred = false;
        if (refill_room_opened(r, limit))
                r->refill_want += limit && !r->refill_all ? (limit - r->refill_limit) >> ZSWAP_PAGE_SHIFT : held;
        r->refill_limit = limit;
        r->refill_all = false;

        /* room refills bring back only what the policies took (limit,
         * pressure, idle), never what a pageout asked for; the wake
         * brings back whatever was taken while the client was quiet */
        uint64_t policy = atomic_load_explicit(&mm->st.reclaim_evictions, memory_order_relaxed);
        r->refill_want = MIN(r->refill_want, policy > r->room_refilled ? policy - r->room_refilled : 0);
        r->refill_want = MIN(r->refill_want, held);
        r->refill_wake = MIN(r->refill_wake, held);
        uint64_t n = MIN(r->refill_want + r->refill_wake, held);
        r->resident = resident_now(mm);
        if (!r->count_settled)
                /* the count ran while lanes were moving: pages already out
                 * but not yet checked (not in moved_out) would count twice
                 * as room; the next count tells (each tick starts one) */
                n = 0;
        if (limit) {
                uint64_t lp = limit >> ZSWAP_PAGE_SHIFT, room = lp - lp / 16;
                n = MIN(n, room > r->resident ? room - r->resident : 0);
        }
        if (rc->wants_out)
                n = 0; /* the controller still wants pages out */
        if (n == 0 || evict_want || r->refilling || !mm->ft)
                return;
        n = MIN(n, (uint64_t)REFILL_TICK_MAX);
        Work *w = work_new(FW_REFILL, mm);
        if (!w)
                return;
        w->lane = (uint32_t)n;
        uint64_t total = MIN(r->refill_want + r->refill_wake, held);
        if (!r->refill_cut_ok || total > r->refill_cut_for) {
                /* new pages wanted: the age they start from, for all of
                 * them (one walk of the index per burst, not per refill) */
                r->refill_cut = refill_since(mm, total);
                r->refill_cut_ok = true;
        }
        r->refill_cut_for = total;
        w->id = r->refill_cut;
        int64_t idle = client_idle_age(rc, mm);
        if (!r->refill_wake && idle > 0 && now > (uint64_t)idle)
                /* room opened, but pages idle age would take again at once
                 * stay out (a client that woke gets them: it is back) */
                w->id = MAX(w->id, stamp_at(now - (uint64_t)idle));
        w->a = w->v = 0;
        r->refilling = true;
        r->refill_out_wake = (uint32_t)MIN(r->refill_wake, n);
        log_debug("pid %d: refill of %llu pages used since stamp %u (now %u)", (int)mmclient_pid(mm),
                  (unsigned long long)n, w->id, age_stamp());
        fault_thread_post(mm->ft, w);
}

void reclaim_refill_done(Reclaim *rc, Work *w) {
        MMClient *mm = w->mm;
        (void)rc;
        mm->rc.refilling = false;
        mm->rc.resident = resident_now(mm); /* the pages it brought back are in mmclient_pages_back() */
        /* the wake's part first; fewer than asked: the walk found no more
         * (tier, in flight, older) */
        MMReclaim *r = &mm->rc;
        uint64_t wake = MIN((uint64_t)r->refill_out_wake, w->a), room = w->a - wake;
        r->refill_wake -= MIN(r->refill_wake, wake);
        r->refill_want -= MIN(r->refill_want, room);
        r->room_refilled += room;
        if (w->lane)
                r->refill_want = r->refill_wake = 0;
        if (!r->refill_want && !r->refill_wake)
                r->refill_cut_ok = false;
        r->refill_cut_for = r->refill_want + r->refill_wake;
        work_free(w);
}

/*
 * A limit is met at each count, and a program that reads through its
 * evicted memory brings pages back between two counts: at tens of
 * thousands of faults a second, a whole interval of them is many times a
 * small limit. So a client with a limit whose pages came back since its
 * last count, by a sixteenth of the limit (at least EARLY_MIN_PAGES), is
 * counted again at the manager's next tick rather than at the next
 * interval, and its eviction is given the new excess. The count is what
 * it costs (a PAGEMAP_SCAN of the client's regions), at most once per
 * that many pages brought back.
 */
#define EARLY_MIN_PAGES 64

static void reclaim_early(Reclaim *rc, uint64_t now) {
        for (MMClient *mm = *rc->mms; mm; mm = mm->next) {
                if (!client_managed(mm) || !mm->rc.measured_ms)
                        continue;
                MMReclaim *r = &mm->rc;
                if (r->count_soon) {
                        /* it grew past most of its limit since its last count */
                        r->count_soon = false;
                        reclaim_client(rc, mm, now);
                        continue;
                }
                uint64_t limit = reclaim_client_limit(rc, mm);
                if (rc->tun.refill && (refill_woke(rc, mm, now) || ((r->refill_want || r->refill_wake) && !r->refilling) ||
                                       r->refill_all || r->refill_deferred))
                        /* it woke, the controller let go, a refill ended
                         * with more wanted, or an eviction deferred the
                         * room's measure: the pages back now, not at the
                         * next interval */
                        refill_plan(rc, mm, now, limit, r->op ? r->op->want : 0);
                uint64_t limit_pages = limit >> ZSWAP_PAGE_SHIFT,
                         back = mmclient_pages_back(mm) - mm->rc.back_at_scan;
                if (!limit_pages || back < MAX(limit_pages / 16, (uint64_t)EARLY_MIN_PAGES))
                        continue;
                log_debug("pid %d: %llu pages back since the last count: counted again before the interval",
                          (int)mmclient_pid(mm), (unsigned long long)back);
                reclaim_client(rc, mm, now);
        }
}

void reclaim_tick(Reclaim *rc) {
        uint64_t now = now_ms();

        if (now - rc->reclaim_last_ms < rc->tun.interval_ms) {
                reclaim_early(rc, now);
                return;
        }
        rc->reclaim_last_ms = now;
        if (atomic_load_explicit(&rc->core->pool_full, memory_order_relaxed)) {
                /* make room: kept copies of clean pages are a cache */
                for (MMClient *mm = *rc->mms; mm; mm = mm->next)
                        if (atomic_load_explicit(&mm->st.clean_pages, memory_order_relaxed))
                                pindex_walk(mm->index, 0, PINDEX_MAX_ADDR, drop_clean_cb, mm);
                rc->core->ops->pool_reclaim(rc->core);
                core_pool_accepts(rc->core);
        }
        if (now - rc->pressure_last_ms >= rc->tun.pressure_period_ms)
                pressure_period(rc, now);
        groups_share(rc, now);
        for (MMClient *mm = *rc->mms; mm; mm = mm->next)
                if (!client_managed(mm))
                        continue;
                else if (mm->rc.group[0] && mm->rc.group_tick == rc->group_tick)
                        reclaim_decide(rc, mm, now); /* counted by groups_share() */
                else
                        reclaim_client(rc, mm, now);
}

void reclaim_soon(Reclaim *rc) {
        /* within 50 ms; never later than it was due, however many ask */
        uint64_t due = now_ms() + 50, at = due > rc->tun.interval_ms ? due - rc->tun.interval_ms : 0;
        rc->reclaim_last_ms = MIN(rc->reclaim_last_ms, at);
}

void reclaim_init(Reclaim *rc, Core *core, MMClient *const *mms) {
        rc->core = core;
        rc->mms = mms;
        age_t0_ms = now_ms() - AGE_STAMP_MS;
        reclaim_apply(rc);
}

void reclaim_apply(Reclaim *rc) {
        const Tunables *t = &rc->tun;
        atomic_store_explicit(&rc->core->keep_clean, t->keep_clean, memory_order_relaxed);
        atomic_store_explicit(&rc->core->fault_history, t->fault_history, memory_order_relaxed);
        atomic_store_explicit(&rc->core->dedup, t->dedup, memory_order_relaxed);
        /* the workers' rescue is on the eviction path: zstd's level 9
         * costs six times its level 3 there, for a few percent */
        atomic_store_explicit(&rc->core->strong_level, (uint32_t)MIN(t->recompress_level, RESCUE_LEVEL_MAX),
                              memory_order_relaxed);
        atomic_store_explicit(&rc->core->clean_max_permille, (uint32_t)(t->clean_max * 10), memory_order_relaxed);
        atomic_store_explicit(&rc->core->pool_bound, t->pool_max, memory_order_relaxed);
        atomic_store_explicit(&rc->core->pool_resume, (uint64_t)((double)t->pool_max * t->pool_accept / 100.0),
                              memory_order_relaxed);
        if (t->pool_max == 0)
                atomic_store_explicit(&rc->core->pool_full, false, memory_order_relaxed);
}

int reclaim_status(Reclaim *rc, char *buf, size_t len) {
        PoolStats ps;
        pool_shared_stats(rc->core->pools, &ps);
        return snprintf(buf, len, "psi_some=%.2f mem_available=%llu hold_target_pages=%llu pool_bytes=%llu pool_full=%d",
                        rc->psi_now, (unsigned long long)rc->avail_now, (unsigned long long)rc->hold_target,
                        (unsigned long long)ps.pool_bytes,
                        (int)atomic_load_explicit(&rc->core->pool_full, memory_order_relaxed));
}
