/*
 * workers.c: the compression workers, the "compress" stage of a batch
 * (evict.c has the others and the lanes' state machine).
 *
 * A worker takes a lane's job, reads the lane's slots in one bounded read
 * (/proc/PID/mem), then per page: STAGED -> SAME / STORED (a kept copy
 * that still matches is taken back instead, keep_matches()), or handed
 * back to the fault thread to be reinstalled (incompressible, pool full,
 * the user's quota spent), and posts the job back to the manager
 * (MW_BATCH_DONE).
 *
 * Workers take jobs from a mutex-protected queue shared only with the
 * manager; they run at SCHED_IDLE-ish low priority (nice 10) so that they
 * never delay a fault thread or the client's own threads.
 */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "evict-internal.h"
#include "evict.h"
#include "fault.h"
#include "log.h"
#include "memread.h"
#include "pool.h"
#include "store.h"
#include "util.h"
#include "trace.h"

struct Evictor {
        Core *core;         /* set by evictor_new() before the workers start, then constant */
        pthread_mutex_t lock;
        pthread_cond_t cond; /* workers wait on it for a job or stop */
        /* the job queue, protected by lock: the manager appends
         * (evictor_submit()), workers take from the head (worker_main()),
         * evictor_free() empties it after the workers are gone */
        Work *head, **tail;
        bool stop;          /* protected by lock: set by evictor_free() (manager) */
        /* the manager's (evictor_new(), evictor_free()); no worker reads them */
        unsigned nthreads;
        pthread_t *threads;
};

/* One per worker thread, its own: set up by evictor_new() before the
 * thread starts, then used and freed by that thread only. */
typedef struct Worker {
        Evictor *ev;
        CodecCCtx *cctx;
        CodecDCtx *dctx; /* to check a kept copy against the page */
        CodecCCtx *strong; /* zstd: the strong tier (recompress.h) */
        uint8_t cbuf[ZSWAP_PAGE_SIZE];
        uint8_t vbuf[ZSWAP_PAGE_SIZE];
} Worker;

/* ---- workers ---- */

void evict_lane_drop_keeps(MMClient *mm, Lane *lane) {
        for (uint32_t i = 0; i < LANE_SLOTS; i++)
                if (lane->keep[i]) {
                        mmclient_release_payload(mm, lane->keep[i]);
                        lane->keep[i] = 0;
                }
}

/*
 * Is the staged page the same as the copy it kept when it was restored?
 * Exact (decompress and compare), never trusting that "not written" seen
 * by PAGEMAP_SCAN still held when the agent moved it: a write between the
 * scan and the move is caught here. A clean page costs a decompression
 * instead of a compression (4x cheaper with lz4) and no pool allocation.
 */
static bool keep_matches(Worker *wk, MMClient *mm, uint64_t keep, const uint8_t *page) {
        uint64_t origin = pe_clean_origin(keep);
        uint32_t fill;

        if (pe_state(origin) == PE_SAME)
                return page_same_filled(page, &fill) && fill == pe_fill(origin);
        const void *src = pool_map(mmclient_pool_of(mm, origin), pe_handle(origin));
        uint32_t clen = pe_clen(origin);
        if (!src)
                return false;
        if (clen == ZSWAP_PAGE_SIZE)
                return memcmp(src, page, ZSWAP_PAGE_SIZE) == 0;
        return pe_decompress(wk->dctx, mmclient_dict(mm), origin, src, clen, wk->vbuf) == 0 && memcmp(wk->vbuf, page, ZSWAP_PAGE_SIZE) == 0;
}

/* The staged page i matches its kept copy: the entry takes the copy back
 * (STAGED -> STORED/SAME). 1 if it did. */
static int store_kept(Core *core, MMClient *mm, Lane *lane, uint32_t i, _Atomic uint64_t *e, uint64_t v) {
        uint64_t keep = lane->keep[i], nv = pe_clean_origin(keep);

        lane->keep[i] = 0;
        /* release, as store_page()'s: a fault thread's acquire load of the
         * entry sees the object, and our reads of it (keep_matches()) come
         * before whatever it does with it. Failure relaxed: the entry is
         * not ours any more, only our copy is let go */
        if (!atomic_compare_exchange_strong_explicit(e, &v, nv, memory_order_release, memory_order_relaxed)) {
                mmclient_release_payload(mm, keep);
                return 0;
        }
        /* counters (MMClientStats, Core): relaxed */
        atomic_fetch_sub_explicit(&mm->st.clean_pages, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&mm->st.staged_pages, 1, memory_order_relaxed);
        if (pe_state(nv) == PE_STORED) {
                atomic_fetch_sub_explicit(&mm->st.clean_bytes, pe_clen(nv), memory_order_relaxed);
                mmclient_count_stored(mm, nv, 1);
        } else
                atomic_fetch_add_explicit(&mm->st.same_pages, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&mm->st.clean_reevictions, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&mm->st.evictions, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&core->evictions, 1, memory_order_relaxed);
        return 1;
}

static void job_fail_all(MMClient *mm, Lane *lane, uint32_t slot0) {
        for (uint32_t i = 0; i < lane->npages; i++) {
                _Atomic uint64_t *e = pindex_entry(mm->index, lane->addrs[i], false);
                uint64_t v = pe_make_slot(PE_STAGED, slot0 + i);
                /* acq_rel, not argued weaker: STAGED holds no payload to
                 * hand over and the process is gone. The count: relaxed */
                if (e && atomic_compare_exchange_strong_explicit(e, &v, 0, memory_order_acq_rel, memory_order_relaxed))
                        atomic_fetch_sub_explicit(&mm->st.staged_pages, 1, memory_order_relaxed);
        }
}

static void hand_back(MMClient *mm, Lane *lane, uint32_t lane_idx, uint64_t addr, uint64_t v, int why) {
        TRACE(TR_HANDBACK, addr, v, why);
        /* pin the lane until the fault thread has read the slot. seq_cst,
         * as the fault threads' pins (serve_slot()); not argued weaker
         * (the job's MW_BATCH_DONE, which the manager waits for before it
         * looks at users, comes after it anyway) */
        atomic_fetch_add_explicit(&lane->users, 1, memory_order_seq_cst);
        /* a worker may wait for memory: without the item the lane stays
         * pinned and the pageout waiting for it is never answered */
        Work *w;
        for (int tries = 0; !(w = work_new(FW_INSTALL, mm)) && tries < 10000; tries++)
                usleep(1000);
        if (!w) {
                /* the page stays STAGED in a lane that stays pinned: a fault
                 * still finds it; eviction loses this lane, no page is lost */
                log_error("pid %d: out of memory handing a page back; staging lane %u kept", (int)mmclient_pid(mm),
                          lane_idx);
                return;
        }
        w->a = addr;
        w->v = v;
        w->lane = lane_idx;
        w->status = why;
        fault_thread_post(mm->ft, w);
}

/* Store one staged page; returns 1 if it is now held by the pool. */
static int store_page(Worker *wk, MMClient *mm, Lane *lane, uint32_t lane_idx, uint32_t i, const uint8_t *page) {
        Core *core = wk->ev->core;
        uint32_t slot = lane_idx * LANE_SLOTS + i;
        _Atomic uint64_t *e = pindex_entry(mm->index, lane->addrs[i], false);
        uint64_t v = pe_make_slot(PE_STAGED, slot), nv;
        uint32_t fill, clen = 0;
        PoolHandle h = 0;

        /* acquire, not argued weaker: only a look, the CAS below decides */
        if (!e || atomic_load_explicit(e, memory_order_acquire) != v) {
                /* a fault or an event took it */
                if (lane->keep[i]) {
                        mmclient_release_payload(mm, lane->keep[i]);
                        lane->keep[i] = 0;
                }
                return 0;
        }
        if (lane->keep[i]) {
                if (keep_matches(wk, mm, lane->keep[i], page))
                        return store_kept(core, mm, lane, i, e, v);
                /* written after all: compress it afresh */
                mmclient_release_payload(mm, lane->keep[i]);
                lane->keep[i] = 0;
        }
        if (!core_pool_accepts(core)) {
                /* the pool is at its bound: the page goes back, nothing is dropped */
                hand_back(mm, lane, lane_idx, lane->addrs[i], v, -ENOSPC);
                return 0;
        }
        if (page_same_filled(page, &fill))
                nv = pe_make_same(fill);
        else {
                int n = codec_compress(wk->cctx, page, wk->cbuf, core->cfg.max_compressed);
                uint64_t strong = 0, shared = 0;
                /* relaxed: a setting (mmclient.h) */
                if (n < 0 && atomic_load_explicit(&mm->strong_rescue, memory_order_relaxed) &&
                    codec_cctx_set_level(wk->strong, (int)atomic_load_explicit(&core->strong_level, memory_order_relaxed)) == 0 &&
                    (n = codec_compress(wk->strong, page, wk->cbuf, core->cfg.max_compressed)) > 0) {
                        /* what the fast codec cannot shrink the strong one may */
                        strong = PE_STRONG;
                }
                if (n < 0) {
                        /* counters and the quota (a budget, mmclient.h): relaxed */
                        atomic_fetch_add_explicit(&mm->st.incompressible_pages, 1, memory_order_relaxed);
                        hand_back(mm, lane, lane_idx, lane->addrs[i], v, -E2BIG);
                        return 0;
                }
                /* the same page may be in its user's shared store already
                 * (dedup.h): found by its compressed bytes, it costs this
                 * client nothing. A page another process maps too (a
                 * fork's) goes there if it is not, for the others to find */
                /* relaxed: a setting (core.h) */
                bool dd = mm->dedup && !strong && atomic_load_explicit(&core->dedup, memory_order_relaxed);
                bool cow = dd && (lane->cow[i / 64] >> (i % 64) & 1);
                int dr = dd && !cow ? dedup_get(mm->dedup, wk->cbuf, (uint32_t)n, false, &h) : -ENOENT;
                if (dr != 1) {
                        if (atomic_fetch_sub_explicit(&mm->quota_left, n, memory_order_relaxed) < n) {
                                /* its user's max_pool is spent (users.c): back it goes */
                                atomic_fetch_add_explicit(&mm->quota_left, n, memory_order_relaxed);
                                hand_back(mm, lane, lane_idx, lane->addrs[i], v, -EDQUOT);
                                return 0;
                        }
                        if (cow && (dr = dedup_get(mm->dedup, wk->cbuf, (uint32_t)n, true, &h)) == 1)
                                atomic_fetch_add_explicit(&mm->quota_left, n, memory_order_relaxed);
                }
                if (dr >= 0)
                        shared = PE_SHARED;
                else if (pool_alloc(mm->pool, (size_t)n, &h) < 0) {
                        hand_back(mm, lane, lane_idx, lane->addrs[i], v, -ENOSPC);
                        return 0;
                } else
                        memcpy(pool_map(mm->pool, h), wk->cbuf, (size_t)n);
                clen = (uint32_t)n;
                nv = pe_make_stored(h, clen) | strong | shared;
                if (shared && mm->store)
                        store_mark_shared(mm->store);
                if (strong && mm->store)
                        store_mark_strong(mm->store);
        }
        /* release: the fault path's acquire load sees the object's bytes */
        TRACE(TR_STORE, lane->addrs[i], nv, ((const uint64_t *)page)[1]);
        if (!atomic_compare_exchange_strong_explicit(e, &v, nv, memory_order_release, memory_order_relaxed)) {
                if (h)
                        pool_release(mmclient_pool_of(mm, nv), h);
                return 0;
        }
        /* counters: relaxed */
        atomic_fetch_sub_explicit(&mm->st.staged_pages, 1, memory_order_relaxed);
        if (h)
                mmclient_count_stored(mm, nv, 1);
        if (nv & PE_STRONG)
                atomic_fetch_add_explicit(&core->strong_rescued, 1, memory_order_relaxed);
        if (!h)
                atomic_fetch_add_explicit(&mm->st.same_pages, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&mm->st.evictions, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&core->evictions, 1, memory_order_relaxed);
        return 1;
}

static void job_compress(Worker *wk, Work *w) {
        MMClient *mm = w->mm;
        Lane *lane = &mm->lanes[w->lane];
        uint32_t slot0 = w->lane * LANE_SLOTS;
        uint64_t stored = 0;
        int r;

        const uint8_t *pages = NULL;
        r = mmclient_read_view(mm, mmclient_slot_addr(mm, slot0), (size_t)lane->npages * ZSWAP_PAGE_SIZE, &pages);
        if (r < 0)
                evict_lane_drop_keeps(mm, lane);
        if (r == -ESRCH)
                job_fail_all(mm, lane, slot0); /* the process is gone, and its pages with it */
        else if (r < 0) {
                /* the pages are still in the slots: each goes back where it came from */
                log_error("pid %d: cannot read staging (%s): putting %u pages back", (int)mmclient_pid(mm),
                          strerror(-r), lane->npages);
                for (uint32_t i = 0; i < lane->npages; i++)
                        hand_back(mm, lane, w->lane, lane->addrs[i], pe_make_slot(PE_STAGED, slot0 + i), -ENOMEM);
        } else
                for (uint32_t i = 0; i < lane->npages; i++)
                        stored += store_page(wk, mm, lane, w->lane, i, pages + (size_t)i * ZSWAP_PAGE_SIZE);
        /* empty chunks stay a while: the next pageout fills them warm */
        core_pool_trim(wk->ev->core, mm->pool);
        w->type = MW_BATCH_DONE;
        w->v = stored;
        core_post(wk->ev->core, w);
}

/*
 * SCHED_IDLE runs a worker only when nothing else wants the CPU; a nice
 * value keeps a share of it (a nice 10 thread gets ~1/10 of a nice 0 one).
 * Failure is logged and ignored: a worker at the default priority still
 * works, it only competes harder.
 */
static void worker_set_priority(const CoreConfig *cfg) {
        pid_t tid = (pid_t)syscall(SYS_gettid);

        if (cfg->worker_sched_idle) {
                struct sched_param sp = { 0 };
                if (sched_setscheduler(tid, SCHED_IDLE, &sp) < 0)
                        log_warn("worker: cannot switch to SCHED_IDLE: %m");
        } else if (setpriority(PRIO_PROCESS, (id_t)tid, cfg->worker_nice) < 0) {
                log_warn("worker: cannot set nice %d: %m", cfg->worker_nice);
        }
}

static void *worker_main(void *arg) {
        Worker *wk = arg;
        Evictor *ev = wk->ev;

        /* below the clients' own threads and far below the fault threads */
        worker_set_priority(&ev->core->cfg);
        memread_thread_init();
        for (;;) {
                pthread_mutex_lock(&ev->lock);
                while (!ev->head && !ev->stop)
                        pthread_cond_wait(&ev->cond, &ev->lock);
                if (ev->stop) {
                        pthread_mutex_unlock(&ev->lock);
                        break;
                }
                Work *w = ev->head;
                ev->head = w->next;
                if (!ev->head)
                        ev->tail = &ev->head;
                pthread_mutex_unlock(&ev->lock);
                job_compress(wk, w);
        }
        codec_cctx_free(wk->cctx);
        codec_cctx_free(wk->strong);
        codec_dctx_free(wk->dctx);
        free(wk);
        return NULL;
}

void evictor_submit(Evictor *ev, Work *w) {
        pthread_mutex_lock(&ev->lock);
        w->next = NULL;
        *ev->tail = w;
        ev->tail = &w->next;
        pthread_cond_signal(&ev->cond);
        pthread_mutex_unlock(&ev->lock);
}

int evictor_new(Core *core, unsigned workers, Evictor **ret) {
        Evictor *ev = calloc(1, sizeof(*ev));
        if (!ev)
                return -ENOMEM;
        ev->core = core;
        ev->tail = &ev->head;
        pthread_mutex_init(&ev->lock, NULL);
        pthread_cond_init(&ev->cond, NULL);
        ev->threads = calloc(workers, sizeof(pthread_t));
        if (!ev->threads) {
                evictor_free(ev);
                return -ENOMEM;
        }
        for (unsigned i = 0; i < workers; i++) {
                Worker *wk = calloc(1, sizeof(*wk));
                int r = wk ? codec_cctx_new(core->cfg.codec, core->cfg.level, &wk->cctx) : -ENOMEM;
                if (r == 0)
                        r = codec_dctx_new(core->cfg.codec, &wk->dctx);
                if (r == 0)
                        r = codec_cctx_new(CODEC_ZSTD, 3, &wk->strong);
                if (r == 0)
                        wk->ev = ev;
                if (r == 0)
                        r = -pthread_create(&ev->threads[i], NULL, worker_main, wk);
                if (r < 0) {
                        if (wk) {
                                codec_cctx_free(wk->cctx);
                                codec_cctx_free(wk->strong);
                                codec_dctx_free(wk->dctx);
                                free(wk);
                        }
                        evictor_free(ev);
                        return r;
                }
                ev->nthreads++;
        }
        *ret = ev;
        return 0;
}

Evictor *evictor_free(Evictor *ev) {
        if (!ev)
                return NULL;
        pthread_mutex_lock(&ev->lock);
        ev->stop = true;
        pthread_cond_broadcast(&ev->cond);
        pthread_mutex_unlock(&ev->lock);
        for (unsigned i = 0; i < ev->nthreads; i++)
                pthread_join(ev->threads[i], NULL);
        while (ev->head) {
                Work *n = ev->head->next;
                work_free(ev->head);
                ev->head = n;
        }
        free(ev->threads);
        pthread_mutex_destroy(&ev->lock);
        pthread_cond_destroy(&ev->cond);
        free(ev);
        return NULL;
}
